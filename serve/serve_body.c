/* serve_body.c - the untrusted bytes of an HTTP request turned into fg_requests: the route of
 * a method and path, and the JSON bodies of /v1/completions, /v1/chat/completions, /tokenize
 * and /detokenize (fuzzed: fuzz/fuzz_http.c).
 *
 * Generation bodies are read by jobs/openai.h's parser (fg_oai_body_parse), the one set of
 * field rules OpenAI Batch lines share: a field fg implements is read and checked, a field it
 * does not is refused by name, never ignored. What is the server's own: a completions "prompt"
 * listing several prompts (strings or lists of ids) is split here, each parsed as the body with
 * that prompt alone (one fg_request each, sharing every other field); token ids must lie in
 * the model's vocabulary; limits on prompts and sequences a request.
 * Routes are exact paths: no path parameters, no file names, nothing that reaches the disk.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_json.h"
#include "openai.h"
#include "serve_int.h"

int srv_error_set(srv_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->param = param;
    e->allow = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return FG_ERR_INVALID_ARG;
}

static int bad(srv_error *e, const char *param, const char *fmt, const char *what)
{
    return srv_error_set(e, 400, "invalid_request_error", param, fmt, param, what);
}

/* ---- routes ---- */

static const struct {
    const char *path, *method;
    srv_route route;
    const char *name;
} k_routes[] = {
    {"/health", "GET", SRV_HEALTH, "health"},
    {"/v1/models", "GET", SRV_MODELS, "models"},
    {"/tokenize", "POST", SRV_TOKENIZE, "tokenize"},
    {"/detokenize", "POST", SRV_DETOKENIZE, "detokenize"},
    {"/tokenizer_info", "GET", SRV_TOKENIZER_INFO, "tokenizer_info"},
    {"/v1/completions", "POST", SRV_COMPLETIONS, "completions"},
    {"/v1/chat/completions", "POST", SRV_CHAT, "chat_completions"},
    {"/metrics", "GET", SRV_METRICS, "metrics"},
};

srv_route srv_route_of(const char *method, const char *url, srv_error *e)
{
    size_t n = strcspn(url, "?"); /* a query string names nothing here */
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        if (strlen(k_routes[i].path) != n || memcmp(k_routes[i].path, url, n))
            continue;
        if (!strcmp(method, k_routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(k_routes[i].method, "GET")))
            return k_routes[i].route;
        srv_error_set(e, 405, "invalid_request_error", NULL, "%s %.*s: the method is %s",
                      method, (int)(n > 200 ? 200 : n), url, k_routes[i].method);
        e->allow = k_routes[i].method;
        return SRV_ROUTE_NONE;
    }
    srv_error_set(e, 404, "not_found_error", NULL, "no route %.*s (see docs/serve.md)",
                  (int)(n > 200 ? 200 : n), url);
    return SRV_ROUTE_NONE;
}

const char *srv_route_name(srv_route r)
{
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
        if (k_routes[i].route == r)
            return k_routes[i].name;
    return "other";
}

/* ---- field readers (the tokenizer routes; generation bodies are jobs/openai.h's) ---- */

static int load_object(json_t **root, const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    *root = fg_json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             "the body is not valid JSON: %s (line %d, column %d)", je.text,
                             je.line, je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             "the body must be a JSON object");
    }
    return FG_OK;
}

static int get_bool(json_t *o, const char *k, int *out, srv_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return FG_OK;
    if (!json_is_boolean(v))
        return bad(e, k, "\"%s\" must be true or false%s", "");
    *out = json_is_true(v);
    return FG_OK;
}

/* ---- generation bodies ---- */

/* One body (or one prompt's copy of it) through jobs/openai.h's parser. */
static int parse_one(srv_body *b, uint32_t i, const char *body, size_t len, srv_error *e)
{
    fg_err err;
    char param[64];
    int rc = fg_oai_body_parse(body, len, b->chat ? FG_OAI_CHAT : FG_OAI_COMPLETIONS, 0,
                               &b->bodies[i], param, &err);
    if (rc == FG_OK) {
        b->reqs[i] = b->bodies[i].req;
        return FG_OK;
    }
    snprintf(e->param_buf, sizeof e->param_buf, "%s", param);
    return srv_error_set(e, rc == FG_ERR_NOMEM ? 500 : 400,
                         rc == FG_ERR_NOMEM ? "server_error" : "invalid_request_error",
                         param[0] ? e->param_buf : NULL, "%s", err.msg);
}

/* A completions "prompt" listing several prompts (strings, or lists of ids): each is parsed as
 * the body with that prompt alone, so every field follows the one parser's rules. */
static int parse_many(srv_body *b, json_t *root, json_t *p, srv_error *e)
{
    for (uint32_t i = 0; i < b->n_reqs; i++) {
        json_t *one = json_copy(root);
        char *text = NULL;
        if (one && !json_object_set(one, "prompt", json_array_get(p, i)))
            text = json_dumps(one, JSON_COMPACT);
        json_decref(one);
        if (!text)
            return srv_error_set(e, 500, "server_error", NULL, "out of memory");
        int rc = parse_one(b, i, text, strlen(text), e);
        free(text);
        if (rc)
            return rc;
    }
    return FG_OK;
}

static int check_ids(const srv_body *b, uint32_t vocab, srv_error *e)
{
    for (uint32_t i = 0; vocab && i < b->n_reqs; i++)
        for (uint32_t k = 0; k < b->reqs[i].n_prompt_ids; k++)
            if (b->reqs[i].prompt_ids[k] < 0 || (uint32_t)b->reqs[i].prompt_ids[k] >= vocab)
                return srv_error_set(e, 400, "invalid_request_error", "prompt",
                                     "\"prompt\" token id %d is outside the vocabulary [0, %u)",
                                     b->reqs[i].prompt_ids[k], vocab);
    return FG_OK;
}

void srv_body_clear(srv_body *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; b->bodies && i < b->n_reqs; i++)
        fg_oai_body_clear(&b->bodies[i]);
    free(b->bodies);
    free(b->reqs);
    memset(b, 0, sizeof *b);
}

int srv_body_parse(srv_body *out, int chat, const char *body, size_t len, uint32_t vocab,
                   srv_error *e)
{
    srv_body b = {.chat = chat, .n_reqs = 1};
    json_t *root = NULL, *p = NULL;
    if (load_object(&root, body, len, e))
        return FG_ERR_INVALID_ARG;
    if (!chat)
        p = json_object_get(root, "prompt");
    int many = p && json_is_array(p) && json_array_size(p) > 1 &&
               (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)));
    if (many)
        b.n_reqs = (uint32_t)(json_array_size(p) < SRV_MAX_PROMPTS + 1 ? json_array_size(p)
                                                                        : SRV_MAX_PROMPTS + 1);
    int rc = FG_ERR_INVALID_ARG;
    if (b.n_reqs > SRV_MAX_PROMPTS) {
        srv_error_set(e, 400, "invalid_request_error", "prompt",
                      "\"prompt\" lists more than %d prompts", SRV_MAX_PROMPTS);
        goto done;
    }
    b.bodies = calloc(b.n_reqs, sizeof *b.bodies);
    b.reqs = calloc(b.n_reqs, sizeof *b.reqs);
    if (!b.bodies || !b.reqs) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    if ((many ? parse_many(&b, root, p, e) : parse_one(&b, 0, body, len, e)) ||
        check_ids(&b, vocab, e))
        goto done;
    b.n = b.reqs[0].n ? b.reqs[0].n : 1;
    if ((uint64_t)b.n * b.n_reqs > SRV_MAX_SEQS) {
        srv_error_set(e, 400, "invalid_request_error", "n", "at most %d sequences (prompts x "
                      "n) a request", SRV_MAX_SEQS);
        goto done;
    }
    b.stream = b.bodies[0].stream;
    b.include_usage = b.bodies[0].include_usage;
    b.chat_logprobs = chat && b.reqs[0].logprobs >= 0;
    rc = FG_OK;
done:
    json_decref(root);
    if (rc)
        srv_body_clear(&b);
    else
        *out = b;
    return rc;
}

/* ---- /tokenize and /detokenize ---- */

void srv_tok_body_clear(srv_tok_body *t)
{
    if (!t)
        return;
    free(t->messages);
    json_decref(t->root);
    memset(t, 0, sizeof *t);
}

int srv_tok_body_parse(srv_tok_body *out, const char *body, size_t len, srv_error *e)
{
    srv_tok_body t = {.add_special = 1};
    if (load_object(&t.root, body, len, e))
        return FG_ERR_INVALID_ARG;
    const char *k;
    json_t *v, *p = json_object_get(t.root, "prompt"), *m = json_object_get(t.root, "messages");
    json_object_foreach(t.root, k, v) {
        if (strcmp(k, "model") && strcmp(k, "prompt") && strcmp(k, "messages") &&
            strcmp(k, "add_special_tokens") && strcmp(k, "return_token_strs") &&
            strcmp(k, "add_generation_prompt")) {
            srv_error_set(e, 400, "invalid_request_error", NULL,
                          "\"%.64s\" is not supported by /tokenize", k);
            goto fail;
        }
    }
    int agp = 1;
    if (!!p == !!m) {
        srv_error_set(e, 400, "invalid_request_error", "prompt",
                      "/tokenize takes one of \"prompt\" (a string) or \"messages\"");
        goto fail;
    }
    if (m)
        t.add_special = 0; /* the template writes what it wants, as vLLM's default */
    if (get_bool(t.root, "add_special_tokens", &t.add_special, e) ||
        get_bool(t.root, "return_token_strs", &t.token_strs, e) ||
        get_bool(t.root, "add_generation_prompt", &agp, e))
        goto fail;
    if (!agp) {
        bad(e, "add_generation_prompt", "\"%s\" false is not supported%s", "");
        goto fail;
    }
    if (p) {
        if (!json_is_string(p) || strlen(json_string_value(p)) != json_string_length(p)) {
            bad(e, "prompt", "\"%s\" must be a string (without NUL bytes)%s", "");
            goto fail;
        }
        t.prompt = json_string_value(p);
    } else {
        if (!json_is_array(m) || !json_array_size(m)) {
            bad(e, "messages", "\"%s\" must be a non-empty array of messages%s", "");
            goto fail;
        }
        t.messages = json_dumps(m, JSON_COMPACT);
        if (!t.messages) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            goto fail;
        }
    }
    *out = t;
    return FG_OK;
fail:
    srv_tok_body_clear(&t);
    return FG_ERR_INVALID_ARG;
}

int srv_detok_body_parse(const char *body, size_t len, uint32_t vocab, int32_t **ids,
                         uint32_t *n, srv_error *e)
{
    json_t *root;
    *ids = NULL;
    *n = 0;
    if (load_object(&root, body, len, e))
        return FG_ERR_INVALID_ARG;
    const char *k;
    json_t *v, *toks = json_object_get(root, "tokens");
    int rc = FG_OK;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "model") && strcmp(k, "tokens")) {
            rc = srv_error_set(e, 400, "invalid_request_error", NULL,
                               "\"%.64s\" is not supported by /detokenize", k);
            goto done;
        }
    }
    if (!toks || !json_is_array(toks)) {
        rc = bad(e, "tokens", "\"%s\" must be a list of token ids%s", "");
        goto done;
    }
    size_t m = json_array_size(toks), i;
    *ids = malloc((m ? m : 1) * sizeof **ids);
    if (!*ids) {
        rc = srv_error_set(e, 500, "server_error", NULL, "out of memory");
        goto done;
    }
    json_array_foreach(toks, i, v) {
        long long x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > INT32_MAX || (vocab && x >= vocab)) {
            char why[96];
            snprintf(why, sizeof why, " in [0, %u)", vocab ? vocab : (unsigned)INT32_MAX);
            rc = bad(e, "tokens", "\"%s\" must hold integers%s", why);
            free(*ids);
            *ids = NULL;
            goto done;
        }
        (*ids)[i] = (int32_t)x;
    }
    *n = (uint32_t)m;
done:
    json_decref(root);
    return rc;
}
