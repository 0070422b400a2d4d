/* serve_body.c - the untrusted bytes of an HTTP request turned into fg_requests: the route of
 * a method and path, and the JSON bodies of /v1/completions, /v1/chat/completions, /tokenize
 * and /detokenize (fuzzed: fuzz/fuzz_http.c).
 *
 * Rules, as OpenAI's endpoints and vLLM's extensions define the fields:
 *  - a field fg implements is read and checked by its type and range, a wrong one refused by
 *    name (400, "param" set); a field fg does not implement is refused by name unless it has
 *    its no-op value (null, 0 penalties, an empty logit_bias, best_of equal to n), never
 *    silently ignored; "model" and "user" are accepted and not checked (one model a server);
 *  - a completions prompt is a string, a list of strings, a list of token ids or a list of such
 *    lists (one fg_request each, sharing every other field); ids must lie in the vocabulary;
 *  - the rules between fields are fg_request_check's (jobs/request.h), run on each request.
 * Routes are exact paths: no path parameters, no file names, nothing that reaches the disk.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_json.h"
#include "serve_int.h"

int srv_error_set(srv_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->param = param;
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

/* ---- field readers: each refuses a wrong type or range by the field's name ---- */

static int load_object(json_t **root, const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    *root = fg_json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             "the body is not JSON: %s (line %d, column %d)", je.text, je.line,
                             je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             "the body must be a JSON object");
    }
    return FG_OK;
}

/* A number field (absent or null: *out unchanged, *given 0). */
static int get_num(json_t *o, const char *k, double lo, double hi, double *out, int *given,
                   srv_error *e)
{
    json_t *v = json_object_get(o, k);
    if (given)
        *given = 0;
    if (!v || json_is_null(v))
        return FG_OK;
    if (!json_is_number(v))
        return bad(e, k, "\"%s\" must be a number%s", "");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        char why[96];
        snprintf(why, sizeof why, " in [%g, %g]", lo, hi);
        return bad(e, k, "\"%s\" must be a number%s", why);
    }
    *out = x;
    if (given)
        *given = 1;
    return FG_OK;
}

/* An integer field in [lo, hi]. */
static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                   int *given, srv_error *e)
{
    json_t *v = json_object_get(o, k);
    if (given)
        *given = 0;
    if (!v || json_is_null(v))
        return FG_OK;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        fabs(json_real_value(v)) < 9e15) {
        /* 5.0 is 5, as Python's clients may send it */
    } else if (!json_is_integer(v)) {
        return bad(e, k, "\"%s\" must be an integer%s", "");
    }
    long long x = json_is_integer(v) ? json_integer_value(v) : (long long)json_real_value(v);
    if (x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof why, " in [%lld, %lld]", lo, hi);
        return bad(e, k, "\"%s\" must be an integer%s", why);
    }
    *out = x;
    if (given)
        *given = 1;
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

/* The fields each endpoint reads; any other key is refused unless noop_field says it is at its
 * no-op value. */
static const char *const k_common[] = {
    "model", "user", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n",
    "stream", "stream_options", "ignore_eos", "min_tokens", "logprobs", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", NULL,
};
static const char *const k_completions[] = {"prompt", "echo", NULL};
static const char *const k_chat[] = {
    "messages", "top_logprobs", "chat_template_kwargs", "max_completion_tokens",
    "add_generation_prompt", NULL,
};

static int in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return 1;
    return 0;
}

/* A field fg lacks, at the value that asks for nothing: accepted. */
static int noop_field(const char *k, json_t *v, long long n)
{
    if (json_is_null(v))
        return 1;
    if (!strcmp(k, "logit_bias"))
        return json_is_object(v) && json_object_size(v) == 0;
    if (!strcmp(k, "best_of"))
        return json_is_integer(v) && json_integer_value(v) == n;
    if (!strcmp(k, "suffix"))
        return json_is_string(v) && !json_string_length(v);
    if (!strcmp(k, "skip_special_tokens") || !strcmp(k, "parallel_tool_calls"))
        return json_is_true(v);
    if (!strcmp(k, "tools") || !strcmp(k, "stop_token_ids"))
        return json_is_array(v) && !json_array_size(v);
    if (!strcmp(k, "service_tier"))
        return json_is_string(v) && !strcmp(json_string_value(v), "auto");
    return 0;
}

static int check_keys(json_t *o, int chat, long long n, srv_error *e)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (in_list(k_common, k) || in_list(chat ? k_chat : k_completions, k) ||
            noop_field(k, v, n))
            continue;
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             "\"%.64s\" is not supported by fg-serve%s", k,
                             in_list(chat ? k_completions : k_chat, k)
                                 ? (chat ? " on /v1/chat/completions"
                                         : " on /v1/completions")
                                 : " (docs/serve.md lists the fields)");
    }
    return FG_OK;
}

/* "stop": a string or a list of at most FG_REQ_MAX_STOPS non-empty strings. */
static int get_stops(json_t *o, fg_request *q, srv_error *e)
{
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v))
        return FG_OK;
    if (json_is_string(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v))
            return bad(e, "stop", "\"%s\" must not hold NUL bytes%s", "");
        if (json_string_length(v))
            q->stops[q->n_stops++] = json_string_value(v);
        return FG_OK;
    }
    if (!json_is_array(v) || json_array_size(v) > FG_REQ_MAX_STOPS)
        return srv_error_set(e, 400, "invalid_request_error", "stop",
                             "\"stop\" must be a string or a list of at most %d strings",
                             FG_REQ_MAX_STOPS);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || strlen(json_string_value(s)) != json_string_length(s))
            return bad(e, "stop", "\"%s\" must list strings%s", " (without NUL bytes)");
        if (json_string_length(s))
            q->stops[q->n_stops++] = json_string_value(s);
    }
    return FG_OK;
}

/* The sampling and length fields every prompt of the body shares. */
static int get_sampling(json_t *o, int chat, fg_request *q, srv_body *b, srv_error *e)
{
    double t = 1.0, p = 1.0, minp = 0, pp = 0, fp = 0, rp = 0;
    long long k = 0, seed = 0, n = 1, mt = 0, mint = 0;
    int has_t, has_mt, has_mint, has_seed, stream = 0;
    if (get_num(o, "temperature", 0, 2, &t, &has_t, e) || get_num(o, "top_p", 0, 1, &p, NULL, e) ||
        get_int(o, "top_k", -1, 1 << 30, &k, NULL, e) ||
        get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed, e) ||
        get_int(o, "n", 1, FG_REQ_MAX_N, &n, NULL, e) ||
        get_int(o, "max_tokens", 1, 1 << 24, &mt, &has_mt, e) ||
        get_int(o, "min_tokens", 0, 1 << 24, &mint, &has_mint, e) ||
        get_num(o, "min_p", 0, 1, &minp, NULL, e) ||
        get_num(o, "presence_penalty", -2, 2, &pp, NULL, e) ||
        get_num(o, "frequency_penalty", -2, 2, &fp, NULL, e) ||
        get_num(o, "repetition_penalty", 0, 100, &rp, NULL, e) ||
        get_bool(o, "ignore_eos", &q->ignore_eos, e) || get_bool(o, "stream", &stream, e))
        return FG_ERR_INVALID_ARG;
    if (chat && !has_mt && get_int(o, "max_completion_tokens", 1, 1 << 24, &mt, &has_mt, e))
        return FG_ERR_INVALID_ARG;
    if (p == 0)
        return bad(e, "top_p", "\"%s\" must be above 0%s", "");
    /* OpenAI's default temperature is 1; fg's is greedy only when asked (0) */
    q->sample.temperature = (float)t;
    q->sample.top_p = (float)p;
    q->sample.top_k = k < 0 ? 0 : (uint32_t)k;
    q->sample.seed = (uint64_t)seed;
    q->sample.min_p = (float)minp;
    q->sample.presence_penalty = (float)pp;
    q->sample.frequency_penalty = (float)fp;
    q->sample.repetition_penalty = (float)rp;
    q->has_seed = has_seed;
    q->n = (uint32_t)n;
    q->max_tokens = (uint32_t)mt;
    q->min_tokens = (uint32_t)mint;
    q->stream = stream;
    b->n = (uint32_t)n;
    b->stream = stream;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so) || !stream)
            return srv_error_set(e, 400, "invalid_request_error", "stream_options",
                                 "\"stream_options\" must be an object, and only with "
                                 "\"stream\": true");
        if (get_bool(so, "include_usage", &b->include_usage, e))
            return FG_ERR_INVALID_ARG;
    }
    return get_stops(o, q, e);
}

/* Chat: messages (kept as JSON text for the template), logprobs true + top_logprobs. */
static int get_chat(json_t *o, fg_request *q, srv_body *b, srv_error *e)
{
    json_t *m = json_object_get(o, "messages");
    if (!m || !json_is_array(m) || !json_array_size(m))
        return bad(e, "messages", "\"%s\" must be a non-empty array of messages%s", "");
    b->messages = json_dumps(m, JSON_COMPACT);
    if (!b->messages)
        return srv_error_set(e, 500, "server_error", NULL, "out of memory");
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return bad(e, "chat_template_kwargs", "\"%s\" must be an object%s", "");
        b->kwargs = json_dumps(kw, JSON_COMPACT);
        if (!b->kwargs)
            return srv_error_set(e, 500, "server_error", NULL, "out of memory");
    }
    int agp = 1, lp = 0;
    long long top = 0;
    int has_top;
    if (get_bool(o, "add_generation_prompt", &agp, e) || get_bool(o, "logprobs", &lp, e) ||
        get_int(o, "top_logprobs", 0, FG_REQ_MAX_TOP_LOGPROBS, &top, &has_top, e))
        return FG_ERR_INVALID_ARG;
    if (!agp)
        return bad(e, "add_generation_prompt", "\"%s\" false is not supported%s", "");
    if (has_top && !lp)
        return bad(e, "top_logprobs", "\"%s\" needs \"logprobs\": true%s", "");
    b->chat_logprobs = lp;
    q->logprobs = lp ? (int)top : -1;
    q->messages = b->messages;
    q->chat_kwargs = b->kwargs;
    return FG_OK;
}

/* One prompt of a completions body: a string or a list of ids. */
static int one_prompt(json_t *p, fg_request *q, uint32_t vocab, srv_error *e)
{
    if (json_is_string(p)) {
        if (strlen(json_string_value(p)) != json_string_length(p))
            return bad(e, "prompt", "\"%s\" must not hold NUL bytes%s", "");
        q->prompt = json_string_value(p);
        return FG_OK;
    }
    if (!json_is_array(p) || !json_array_size(p))
        return bad(e, "prompt", "\"%s\" must be a string, a list of strings, a non-empty list "
                   "of token ids or a list of such lists%s", "");
    size_t n = json_array_size(p), i;
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids)
        return srv_error_set(e, 500, "server_error", NULL, "out of memory");
    json_t *v;
    json_array_foreach(p, i, v) {
        long long x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (x < 0 || x > INT32_MAX || (vocab && x >= vocab)) {
            free(ids);
            char why[96];
            snprintf(why, sizeof why, " in [0, %u)", vocab ? vocab : (unsigned)INT32_MAX);
            return bad(e, "prompt", "\"%s\" token ids must be integers%s", why);
        }
        ids[i] = (int32_t)x;
    }
    q->prompt_ids = ids;
    q->n_prompt_ids = (uint32_t)n;
    return FG_OK;
}

/* Completions: the prompt (one or many), logprobs k, echo. */
static int get_prompts(json_t *o, const fg_request *proto, srv_body *b, uint32_t vocab,
                       srv_error *e)
{
    json_t *p = json_object_get(o, "prompt");
    if (!p)
        return bad(e, "prompt", "\"%s\" is required%s", "");
    size_t n = 1;
    int many = json_is_array(p) && json_array_size(p) &&
               (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)));
    if (many)
        n = json_array_size(p);
    if (n > SRV_MAX_PROMPTS || n * proto->n > SRV_MAX_SEQS)
        return srv_error_set(e, 400, "invalid_request_error", "prompt",
                             "at most %d prompts and %d sequences (prompts x n) a request",
                             SRV_MAX_PROMPTS, SRV_MAX_SEQS);
    b->reqs = calloc(n, sizeof *b->reqs);
    if (!b->reqs)
        return srv_error_set(e, 500, "server_error", NULL, "out of memory");
    b->n_reqs = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        b->reqs[i] = *proto;
        if (one_prompt(many ? json_array_get(p, i) : p, &b->reqs[i], vocab, e))
            return FG_ERR_INVALID_ARG;
    }
    return FG_OK;
}

void srv_body_clear(srv_body *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; b->reqs && i < b->n_reqs; i++)
        free((void *)b->reqs[i].prompt_ids);
    free(b->reqs);
    free(b->messages);
    free(b->kwargs);
    json_decref(b->root);
    memset(b, 0, sizeof *b);
}

int srv_body_parse(srv_body *out, int chat, const char *body, size_t len, uint32_t vocab,
                   srv_error *e)
{
    srv_body b = {.chat = chat};
    fg_request q = {.logprobs = -1};
    long long n = 1, lp = -1;
    int echo = 0, has_lp = 0;
    if (load_object(&b.root, body, len, e))
        return FG_ERR_INVALID_ARG;
    json_t *o = b.root;
    if (get_int(o, "n", 1, FG_REQ_MAX_N, &n, NULL, e) || check_keys(o, chat, n, e) ||
        get_sampling(o, chat, &q, &b, e))
        goto fail;
    if (chat) {
        if (get_chat(o, &q, &b, e))
            goto fail;
        b.reqs = calloc(1, sizeof *b.reqs);
        if (!b.reqs) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            goto fail;
        }
        b.reqs[0] = q;
        b.n_reqs = 1;
    } else {
        if (get_int(o, "logprobs", 0, FG_REQ_MAX_TOP_LOGPROBS, &lp, &has_lp, e) ||
            get_bool(o, "echo", &echo, e))
            goto fail;
        q.logprobs = has_lp ? (int)lp : -1;
        q.echo = echo;
        if (get_prompts(o, &q, &b, vocab, e))
            goto fail;
    }
    for (uint32_t i = 0; i < b.n_reqs; i++) {
        fg_err err;
        if (fg_request_check(&b.reqs[i], &err)) {
            srv_error_set(e, 400, "invalid_request_error", NULL, "%s", err.msg);
            goto fail;
        }
    }
    *out = b;
    return FG_OK;
fail:
    srv_body_clear(&b);
    return FG_ERR_INVALID_ARG;
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
