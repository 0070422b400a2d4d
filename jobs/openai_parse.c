/* openai_parse.c - an OpenAI request body (completions or chat completions) as an fg_request
 * (openai.h), and the typed field readers fg's own job line shares (jobs_int.h).
 *
 * Design:
 * - Every key of the body is looked up in one table for its endpoint: a field fg implements
 *   is read with its strict type (an integer field takes no 1.0, a boolean no 0, a number no
 *   string); a field OpenAI or vLLM defines that fg does not implement is refused as "not
 *   supported by fg"; anything else as an unknown field. A null value is the field absent, as
 *   OpenAI's API reads it. Refusals name the field, and its name goes to param (the error
 *   object's "param").
 * - Types are checked here, ranges between fields by fg_request_check (request.c), so every
 *   front door refuses the same request with the same words.
 * - Accepted without effect, as OpenAI documents them: "user" (an end-user id), "best_of" equal
 *   to n (one candidate a choice), "stream": false.
 */
#define _GNU_SOURCE
#include "fg_json.h"
#include "jobs_int.h"
#include "openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHY(...) (snprintf(why, FGJ_WHY, __VA_ARGS__), FGJ_BAD)

fg_oai_endpoint fg_oai_endpoint_of(const char *url)
{
    if (url && !strcmp(url, "/v1/completions"))
        return FG_OAI_COMPLETIONS;
    if (url && !strcmp(url, "/v1/chat/completions"))
        return FG_OAI_CHAT;
    return FG_OAI_NONE;
}

const char *fg_oai_endpoint_url(fg_oai_endpoint ep)
{
    return ep == FG_OAI_CHAT ? "/v1/chat/completions" : "/v1/completions";
}

/* ---- typed readers (shared with jobs_line.c) -------------------------------------------- */

int fgj_get_number(json_t *v, const char *name, float *out, char *why)
{
    if (!json_is_number(v))
        return WHY("\"%s\" must be a number", name);
    *out = (float)json_number_value(v);
    return FG_OK;
}

int fgj_get_int(json_t *v, const char *name, int64_t lo, int64_t hi, int64_t *out, char *why)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return WHY("\"%s\" must be an integer from %lld to %lld (no fraction, exponent or "
                   "quotes)", name, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return FG_OK;
}

int fgj_get_bool(json_t *v, const char *name, int *out, char *why)
{
    if (!json_is_boolean(v))
        return WHY("\"%s\" must be true or false", name);
    *out = json_is_true(v);
    return FG_OK;
}

int fgj_get_stops(json_t *st, char **stops, int *n_stops, char *why)
{
    size_t n = json_is_string(st) ? 1 : json_is_array(st) ? json_array_size(st) : SIZE_MAX;
    if (n > FG_REQ_MAX_STOPS)
        return WHY("\"stop\" must be a string or an array of at most %d strings",
                   FG_REQ_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(st) ? st : json_array_get(st, i);
        if (!json_is_string(s) || !*json_string_value(s))
            return WHY("\"stop\" strings must be non-empty strings");
        if (!(stops[*n_stops] = strdup(json_string_value(s))))
            return FG_ERR_NOMEM;
        (*n_stops)++;
    }
    return FG_OK;
}

int fgj_get_ids(json_t *a, const char *name, int32_t **ids, uint32_t *n, char *why)
{
    size_t k = json_array_size(a);
    if (k == 0 || k > FG_OAI_MAX_PROMPT_IDS)
        return WHY("\"%s\" token ids: from 1 to %u of them", name, FG_OAI_MAX_PROMPT_IDS);
    if (!(*ids = malloc(k * sizeof **ids)))
        return FG_ERR_NOMEM;
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX)
            return WHY("\"%s\"[%zu] must be a token id (an integer from 0 to 2147483647)", name,
                       i);
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    *n = (uint32_t)k;
    return FG_OK;
}

int fgj_messages_wrong(json_t *m, char *why)
{
    if (!json_is_array(m) || json_array_size(m) == 0)
        return WHY("\"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *o = json_array_get(m, i), *c = json_object_get(o, "content");
        if (!json_is_object(o))
            return WHY("\"messages\"[%zu] is not an object", i);
        if (!json_is_string(json_object_get(o, "role")))
            return WHY("\"messages\"[%zu] has no \"role\" string", i);
        if (!c || !(json_is_string(c) || json_is_array(c) || json_is_null(c)))
            return WHY("\"messages\"[%zu] has no \"content\" (a string, an array of parts, or "
                       "null)", i);
    }
    return FG_OK;
}

/* The sampling fields both line formats and both endpoints share: 1 when key is one of them
 * (read into q, or a refusal in why), 0 when it is not. *rc gets the outcome. */
int fgj_sampling_field(const char *key, json_t *v, fg_request *q, int *rc, char *why)
{
    static const struct {
        const char *name;
        unsigned bit;
    } num[] = {{"temperature", FG_REQ_SET_TEMPERATURE}, {"top_p", FG_REQ_SET_TOP_P},
               {"min_p", FG_REQ_SET_MIN_P}, {"presence_penalty", FG_REQ_SET_PRESENCE},
               {"frequency_penalty", FG_REQ_SET_FREQUENCY},
               {"repetition_penalty", FG_REQ_SET_REPETITION}};
    float *dst[] = {&q->sample.temperature, &q->sample.top_p, &q->min_p, &q->presence_penalty,
                    &q->frequency_penalty, &q->repetition_penalty};
    for (size_t i = 0; i < sizeof num / sizeof *num; i++)
        if (!strcmp(key, num[i].name)) {
            *rc = fgj_get_number(v, key, dst[i], why);
            q->set |= num[i].bit;
            return 1;
        }
    int64_t x = 0;
    if (!strcmp(key, "top_k")) { /* vLLM: -1 (or 0) is off */
        *rc = fgj_get_int(v, key, -1, INT32_MAX, &x, why);
        q->sample.top_k = x < 0 ? 0 : (uint32_t)x;
        q->set |= FG_REQ_SET_TOP_K;
    } else if (!strcmp(key, "seed")) {
        *rc = fgj_get_int(v, key, INT64_MIN, INT64_MAX, &x, why);
        q->sample.seed = (uint64_t)x;
        q->has_seed = 1;
        q->set |= FG_REQ_SET_SEED;
    } else if (!strcmp(key, "n")) {
        *rc = fgj_get_int(v, key, 1, FG_REQ_MAX_N, &x, why);
        q->n = (uint32_t)x;
    } else if (!strcmp(key, "min_tokens")) {
        *rc = fgj_get_int(v, key, 0, FGJ_MAX_TOKENS, &x, why);
        q->min_tokens = (uint32_t)x;
    } else if (!strcmp(key, "ignore_eos")) {
        *rc = fgj_get_bool(v, key, &q->ignore_eos, why);
    } else {
        return 0;
    }
    return 1;
}

/* ---- the body's fields ------------------------------------------------------------------ */

/* Fields OpenAI or vLLM define for these endpoints that fg does not implement. */
static const char *const unsupported[] = {
    "logit_bias", "suffix", "tools", "tool_choice", "parallel_tool_calls", "functions",
    "function_call", "response_format", "audio", "modalities", "metadata", "prediction",
    "reasoning_effort", "service_tier", "store", "web_search_options", "verbosity",
    "prompt_cache_key", "safety_identifier", "use_beam_search", "length_penalty",
    "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "allowed_token_ids",
    "prompt_logprobs", "add_special_tokens", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_decoding_backend", "guided_whitespace_pattern", "structured_outputs",
    "priority", "logits_processors", "return_tokens_as_token_ids", "return_token_ids",
    "request_id", "prompt_embeds", "cache_salt", "bad_words", "vllm_xargs", "kv_transfer_params",
    "add_generation_prompt", "continue_final_message", "documents", "chat_template",
    "mm_processor_kwargs", "echo", "best_of"};

static int refuse_key(const char *key, fg_oai_endpoint ep, char *why)
{
    char c[48];
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (!strcmp(key, unsupported[i]))
            return WHY("\"%s\" is not supported by fg%s", key,
                       !strcmp(key, "echo") ? " for /v1/chat/completions (only for "
                       "/v1/completions)" : "");
    return WHY("unknown field \"%s\" for %s", fgj_clip(key, c), fg_oai_endpoint_url(ep));
}

/* "prompt": a string, token ids, or a list of one of either. */
static int read_prompt(json_t *v, fg_oai_body *b, char *why)
{
    if (json_is_array(v) && json_array_size(v) >= 1 && !json_is_integer(json_array_get(v, 0))) {
        if (json_array_size(v) > 1)
            return WHY("\"prompt\" is a list of %zu prompts: give one prompt a request (a "
                       "string or a list of token ids)", json_array_size(v));
        v = json_array_get(v, 0);
        if (!json_is_string(v) && !json_is_array(v))
            return WHY("\"prompt\"[0] must be a string or a list of token ids");
    }
    if (json_is_string(v))
        return (b->prompt = strdup(json_string_value(v))) ? FG_OK : FG_ERR_NOMEM;
    if (json_is_array(v))
        return fgj_get_ids(v, "prompt", &b->prompt_ids, &b->req.n_prompt_ids, why);
    return WHY("\"prompt\" must be a string, a list of token ids, or a list of one of either");
}

static int read_chat(json_t *o, fg_oai_body *b, char *why)
{
    json_t *m = json_object_get(o, "messages"), *kw = json_object_get(o, "chat_template_kwargs");
    int rc = fgj_messages_wrong(m, why);
    if (rc)
        return rc;
    if (!(b->messages = json_dumps(m, JSON_COMPACT)))
        return FG_ERR_NOMEM;
    if (json_is_object(kw) && !(b->chat_kwargs = json_dumps(kw, JSON_COMPACT)))
        return FG_ERR_NOMEM;
    return FG_OK;
}

/* logprobs: completions an integer 0..20 (OpenAI says 0..5; vLLM allows 20), chat true/false
 * with top_logprobs 0..20 (top_logprobs only with logprobs true, as OpenAI says). */
static int read_logprobs(json_t *o, fg_oai_body *b, char *why)
{
    json_t *lp = json_object_get(o, "logprobs"), *top = json_object_get(o, "top_logprobs");
    int64_t k = -1;
    int on = 0;
    b->req.logprobs = -1;
    if (b->ep == FG_OAI_COMPLETIONS) {
        if (top && !json_is_null(top))
            return WHY("\"top_logprobs\" is for /v1/chat/completions (here \"logprobs\": "
                       "an integer)");
        if (lp && !json_is_null(lp) && fgj_get_int(lp, "logprobs", 0, 20, &k, why))
            return FGJ_BAD;
        b->req.logprobs = (int)k;
        return FG_OK;
    }
    if (lp && !json_is_null(lp) && fgj_get_bool(lp, "logprobs", &on, why))
        return FGJ_BAD;
    if (top && !json_is_null(top)) {
        if (!on)
            return WHY("\"top_logprobs\" needs \"logprobs\": true");
        if (fgj_get_int(top, "top_logprobs", 0, 20, &k, why))
            return FGJ_BAD;
    }
    b->req.logprobs = on ? (k < 0 ? 0 : (int)k) : -1;
    return FG_OK;
}

/* One key of the body (not null): read it, or refuse it. */
static int read_key(json_t *o, const char *key, json_t *v, fg_oai_body *b, unsigned flags,
                    char *why)
{
    int rc = FG_OK, chat = b->ep == FG_OAI_CHAT;
    int64_t x;
    if (fgj_sampling_field(key, v, &b->req, &rc, why))
        return rc;
    if (!strcmp(key, "model")) {
        if (!json_is_string(v))
            return WHY("\"model\" must be a string");
        return (b->model = strdup(json_string_value(v))) ? FG_OK : FG_ERR_NOMEM;
    }
    if (!strcmp(key, chat ? "messages" : "prompt"))
        return chat ? read_chat(o, b, why) : read_prompt(v, b, why);
    if (chat && !strcmp(key, "chat_template_kwargs") && !json_is_object(v))
        return WHY("\"chat_template_kwargs\" must be an object");
    if ((chat && !strcmp(key, "chat_template_kwargs")) || !strcmp(key, "logprobs") ||
        !strcmp(key, "top_logprobs") || !strcmp(key, "user"))
        return !strcmp(key, "user") && !json_is_string(v) ? WHY("\"user\" must be a string")
                                                          : FG_OK; /* read with their pair */
    if (!strcmp(key, "max_tokens") || (chat && !strcmp(key, "max_completion_tokens"))) {
        if (chat && json_object_get(o, "max_tokens") &&
            json_object_get(o, "max_completion_tokens") && !strcmp(key, "max_tokens"))
            return WHY("\"max_tokens\" and \"max_completion_tokens\" together: give one");
        rc = fgj_get_int(v, key, 1, FGJ_MAX_TOKENS, &x, why);
        b->req.max_tokens = (uint32_t)x;
        return rc;
    }
    if (!strcmp(key, "stop"))
        return fgj_get_stops(v, b->stops, &b->req.n_stops, why);
    if (!chat && !strcmp(key, "echo"))
        return fgj_get_bool(v, key, &b->req.echo, why);
    if (!strcmp(key, "stream")) {
        if ((rc = fgj_get_bool(v, key, &b->stream, why)))
            return rc;
        if (b->stream && (flags & FG_OAI_BATCH))
            return WHY("\"stream\": true is not possible in a batch");
        return FG_OK;
    }
    if (!strcmp(key, "stream_options")) {
        json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (u != NULL) ||
            (u && !json_is_boolean(u)))
            return WHY("\"stream_options\" must be {\"include_usage\": true or false}");
        if (!json_is_true(json_object_get(o, "stream")))
            return WHY("\"stream_options\" only with \"stream\": true");
        b->include_usage = json_is_true(u);
        return FG_OK;
    }
    if (!chat && !strcmp(key, "best_of")) {
        json_t *n = json_object_get(o, "n");
        int64_t want = json_is_integer(n) ? json_integer_value(n) : 1;
        if (fgj_get_int(v, key, 1, FG_REQ_MAX_N, &x, why))
            return FGJ_BAD;
        return x == want ? FG_OK : WHY("\"best_of\" %lld is not supported by fg (only best_of "
                                       "equal to n)", (long long)x);
    }
    return refuse_key(key, b->ep, why);
}

/* The field a refusal starts with (its first quoted name) into param[64]. */
static void param_of(const char *why, char *param)
{
    const char *s = strchr(why, '"'), *t = s ? strchr(s + 1, '"') : NULL;
    snprintf(param, 64, "%.*s", s && t && t - s < 64 ? (int)(t - s - 1) : 0, s ? s + 1 : "");
}

static int read_body(json_t *o, fg_oai_body *b, unsigned flags, char *param, char *why)
{
    if (!json_is_object(o))
        return WHY("the body is not a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (json_is_null(v))
            continue;
        int rc = read_key(o, key, v, b, flags, why);
        if (rc) {
            if (param)
                snprintf(param, 64, "%s", key);
            return rc;
        }
    }
    const char *need = b->ep == FG_OAI_CHAT ? "messages" : "prompt";
    if (!json_object_get(o, need) || json_is_null(json_object_get(o, need))) {
        if (param)
            snprintf(param, 64, "%s", need);
        return WHY("\"%s\" is missing", need);
    }
    int rc = read_logprobs(o, b, why);
    if (rc && param)
        param_of(why, param);
    return rc;
}

/* Point req at the storage, then the rules between fields. */
static int finish_body(fg_oai_body *b, char *param, char *why)
{
    fg_request *q = &b->req;
    q->prompt = b->prompt;
    q->prompt_ids = b->prompt_ids;
    q->messages = b->messages;
    q->chat_kwargs = b->chat_kwargs;
    for (int i = 0; i < q->n_stops; i++)
        q->stops[i] = b->stops[i];
    q->stream = b->stream;
    fg_err e;
    if (fg_request_check(q, &e) == FG_OK)
        return FG_OK;
    snprintf(why, FGJ_WHY, "%s", e.msg);
    if (param)
        param_of(why, param);
    return FGJ_BAD;
}

int fgj_oai_body_read(json_t *o, fg_oai_endpoint ep, unsigned flags, fg_oai_body *b,
                      char *param, char *why)
{
    memset(b, 0, sizeof *b);
    b->ep = ep;
    b->req.logprobs = -1;
    if (param)
        *param = '\0';
    int rc = read_body(o, b, flags, param, why);
    if (rc == FG_OK)
        rc = finish_body(b, param, why);
    if (rc == FG_ERR_NOMEM)
        snprintf(why, FGJ_WHY, "out of memory");
    if (rc)
        fg_oai_body_clear(b);
    return rc;
}

int fg_oai_body_parse(const char *body, size_t len, fg_oai_endpoint ep, unsigned flags,
                      fg_oai_body *b, char *param, fg_err *err)
{
    memset(b, 0, sizeof *b);
    if (param)
        *param = '\0';
    if (ep != FG_OAI_COMPLETIONS && ep != FG_OAI_CHAT)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "not an endpoint fg serves");
    json_error_t je;
    json_t *o = fg_json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "the body is not valid JSON: %s (column %d)",
                          fgj_oneline(je.text), je.column);
    char why[FGJ_WHY];
    int rc = fgj_oai_body_read(o, ep, flags, b, param, why);
    json_decref(o);
    if (rc)
        return fg_err_set(err, rc == FG_ERR_NOMEM ? FG_ERR_NOMEM : FG_ERR_INVALID_ARG, "%s", why);
    return FG_OK;
}

void fg_oai_body_clear(fg_oai_body *b)
{
    if (!b)
        return;
    free(b->model);
    free(b->prompt);
    free(b->prompt_ids);
    free(b->messages);
    free(b->chat_kwargs);
    for (int i = 0; i < FG_REQ_MAX_STOPS; i++)
        free(b->stops[i]);
    memset(b, 0, sizeof *b);
}
