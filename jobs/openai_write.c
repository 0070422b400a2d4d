/* openai_write.c - OpenAI response bodies, streaming chunks, error objects and Batch output
 * lines from fg_responses (openai.h).
 *
 * Decisions (docs/jobs.md says them to users):
 * - finish_reason: "stop" for EOS and stop strings, "length" for max_tokens.
 * - A token's string is its bytes with invalid UTF-8 as U+FFFD (a byte-level piece that is half
 *   of a character shows as U+FFFD, as vLLM decodes one token); chat's "bytes" are the raw bytes.
 * - Log-probs: NaN (the first prompt token's, no context) is null; -inf (a token the model gives
 *   no probability) is -9999.0, OpenAI's value for "very unlikely".
 * - Completions' top_logprobs at a position: the n_top alternatives and the chosen token (so up
 *   to logprobs + 1 entries, as OpenAI documents), keyed by token string (the more likely kept
 *   when two tokens share a string); text_offset: each token's offset, in characters, into the
 *   text its tokens' bytes spell (from 0; with echo the prompt's tokens first): the character
 *   that holds the token's first byte, so a piece that starts inside a character points at it.
 *   That is the choice's "text" when the tokens spell it; a BOS the tokenizer added (the echoed
 *   text is the prompt as given) or a stop string cut from the text shift it, as in vLLM, whose
 *   offsets sum the token strings' lengths.
 * Everything is built as jansson values and dumped compact, ASCII-escaped, in insertion order,
 * reals to 9 significant digits (a float's log-prob round-trips).
 */
#define _GNU_SOURCE
#include "jobs_int.h"
#include "engine.h"
#include "openai.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))

int fg_oai_tok_piece(void *ctx, int32_t id, const char **bytes, size_t *len)
{
    return fg_tok_token_bytes((const fg_tok *)ctx, id, bytes, len);
}

static const char *finish_name(int finish)
{
    return finish == FG_FINISH_EOS || finish == FG_FINISH_STOP ? "stop" : "length";
}

static json_t *lp_value(float lp)
{
    if (isnan(lp))
        return json_null();
    return json_real(isinf(lp) ? -9999.0 : (double)lp);
}

/* One token as text (malloc'd, U+FFFD for invalid UTF-8) and, when raw is non-NULL, its bytes
 * as a JSON array. NULL when the callback fails or memory runs out. */
static char *token_text(const fg_oai_meta *m, int32_t id, json_t **raw)
{
    const char *b = "";
    size_t n = 0;
    if (!m->piece || m->piece(m->piece_ctx, id, &b, &n) != FG_OK)
        return NULL;
    char *z = strndup(b, n), *t = z ? fgj_utf8_sanitize(z) : NULL;
    if (t && raw) {
        *raw = json_array();
        for (size_t i = 0; *raw && i < n; i++)
            json_array_append_new(*raw, json_integer((unsigned char)b[i]));
    }
    free(z);
    return t;
}

/* ---- completions' legacy log-probs ------------------------------------------------------- */

typedef struct legacy {
    json_t *tokens, *lps, *tops, *offs;
    size_t at; /* characters begun so far (UTF-8 lead bytes of the pieces) */
    int ok;
} legacy;

/* Append one position: chosen id with lp, alternatives top[n_top] (NULL: none, a null entry). */
static void legacy_add(legacy *L, const fg_oai_meta *m, int32_t id, float lp,
                       const fg_token_lp *top, uint32_t n_top, int null_top)
{
    char *t = token_text(m, id, NULL);
    if (!t) {
        L->ok = 0;
        return;
    }
    const char *b = "";
    size_t nb = 0;
    m->piece(m->piece_ctx, id, &b, &nb); /* succeeded in token_text */
    json_array_append_new(L->tokens, json_string(t));
    json_array_append_new(L->lps, lp_value(lp));
    /* the character holding the token's first byte (a piece may start inside one) */
    size_t at = L->at - (nb && ((unsigned char)b[0] & 0xC0) == 0x80 && L->at);
    json_array_append_new(L->offs, json_integer((json_int_t)at));
    for (size_t i = 0; i < nb; i++)
        L->at += ((unsigned char)b[i] & 0xC0) != 0x80;
    json_t *d = null_top ? json_null() : json_object();
    for (uint32_t k = 0; d && !null_top && k <= n_top; k++) {
        int32_t tid = k < n_top ? top[k].id : id;
        float tlp = k < n_top ? top[k].logprob : lp;
        char *s = tid >= 0 ? token_text(m, tid, NULL) : NULL;
        if (s && !json_object_get(d, s))
            json_object_set_new(d, s, lp_value(tlp));
        free(s);
    }
    json_array_append_new(L->tops, d);
    free(t);
}

/* The legacy {tokens, token_logprobs, top_logprobs, text_offset} of choice c (with the prompt's
 * positions first when echo). NULL on failure. */
json_t *fgj_legacy_logprobs(const fg_oai_meta *m, const fg_response *r, const fg_choice *c,
                            int echo)
{
    legacy L = {json_array(), json_array(), json_array(), json_array(), 0, 1};
    L.ok = L.tokens && L.lps && L.tops && L.offs;
    for (uint32_t i = 0; L.ok && echo && i < r->n_prompt; i++) {
        float lp = r->prompt_logprob ? r->prompt_logprob[i] : NAN;
        const fg_token_lp *top = r->prompt_top ? r->prompt_top + (size_t)i * c->n_top : NULL;
        legacy_add(&L, m, r->prompt_ids[i], lp, top, top ? c->n_top : 0, i == 0 || !top);
    }
    for (uint32_t i = 0; L.ok && i < c->n_tokens; i++) {
        float lp = c->logprob ? c->logprob[i] : NAN;
        const fg_token_lp *top = c->top ? c->top + (size_t)i * c->n_top : NULL;
        legacy_add(&L, m, c->tokens[i], lp, top, top ? c->n_top : 0, 0);
    }
    json_t *o = L.ok ? json_pack("{s:o, s:o, s:o, s:o}", "tokens", L.tokens, "token_logprobs",
                                 L.lps, "top_logprobs", L.tops, "text_offset", L.offs)
                     : NULL;
    if (!o && !L.ok) {
        json_decref(L.tokens);
        json_decref(L.lps);
        json_decref(L.tops);
        json_decref(L.offs);
    }
    return o;
}

/* ---- chat log-probs ---------------------------------------------------------------------- */

static json_t *chat_entry(const fg_oai_meta *m, int32_t id, float lp)
{
    json_t *raw = NULL;
    char *t = token_text(m, id, &raw);
    json_t *o = t && raw ? json_pack("{s:s, s:o, s:o}", "token", t, "logprob", lp_value(lp),
                                     "bytes", raw)
                         : NULL;
    if (!o)
        json_decref(raw);
    free(t);
    return o;
}

/* {"content": [{token, logprob, bytes, top_logprobs: [...]}]} for positions [0, n). */
static json_t *chat_logprobs(const fg_oai_meta *m, const int32_t *ids, const float *lp,
                             const fg_token_lp *top, uint32_t n_top, uint32_t n)
{
    json_t *content = json_array();
    for (uint32_t i = 0; content && i < n; i++) {
        json_t *e = chat_entry(m, ids[i], lp ? lp[i] : NAN), *tl = json_array();
        for (uint32_t k = 0; e && tl && top && k < n_top; k++)
            if (top[(size_t)i * n_top + k].id >= 0)
                json_array_append_new(tl, chat_entry(m, top[(size_t)i * n_top + k].id,
                                                     top[(size_t)i * n_top + k].logprob));
        if (!e || !tl || json_object_set_new(e, "top_logprobs", tl) ||
            json_array_append_new(content, e)) {
            json_decref(e);
            json_decref(content);
            return NULL;
        }
    }
    return content ? json_pack("{s:o}", "content", content) : NULL;
}

/* ---- bodies ------------------------------------------------------------------------------ */

static int dump(json_t *o, char **out, fg_err *err)
{
    *out = o ? json_dumps(o, DUMP_FLAGS) : NULL;
    json_decref(o);
    if (!*out)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory writing a response");
    return FG_OK;
}

static json_t *usage(uint64_t prompt, uint64_t completion)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt,
                     "completion_tokens", (json_int_t)completion, "total_tokens",
                     (json_int_t)(prompt + completion));
}

/* The prompt's text for echo: as given, or its tokens' pieces. */
static char *echo_text(const fg_oai_meta *m, const fg_request *q, const fg_response *r)
{
    if (q->prompt)
        return fgj_utf8_sanitize(q->prompt);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (uint32_t i = 0; f && i < r->n_prompt; i++) {
        const char *b;
        size_t n;
        if (m->piece && m->piece(m->piece_ctx, r->prompt_ids[i], &b, &n) == FG_OK)
            fwrite(b, 1, n, f);
    }
    if (!f || fclose(f))
        return NULL;
    char *t = fgj_utf8_sanitize(buf);
    free(buf);
    return t;
}

static json_t *completion_choice(const fg_oai_meta *m, const fg_request *q, const fg_response *r,
                                 uint32_t i, const char *echo)
{
    const fg_choice *c = &r->choices[i];
    char *text = fgj_utf8_sanitize(c->text ? c->text : "");
    char *full = text && echo ? malloc(strlen(echo) + strlen(text) + 1) : NULL;
    if (full)
        strcat(strcpy(full, echo), text);
    json_t *lp = q->logprobs >= 0 ? fgj_legacy_logprobs(m, r, c, q->echo) : json_null();
    json_t *o = text && (full || !echo) && lp
                    ? json_pack("{s:I, s:s, s:o, s:s}", "index", (json_int_t)i, "text",
                                full ? full : text, "logprobs", lp, "finish_reason",
                                finish_name(c->finish))
                    : NULL;
    if (!o && lp && !(text && (full || !echo)))
        json_decref(lp);
    free(text);
    free(full);
    return o;
}

static json_t *chat_choice(const fg_oai_meta *m, const fg_request *q, const fg_choice *c,
                           uint32_t i)
{
    char *text = fgj_utf8_sanitize(c->text ? c->text : "");
    json_t *lp = q->logprobs >= 0 ? chat_logprobs(m, c->tokens, c->logprob, c->top, c->n_top,
                                                  c->n_tokens)
                                  : json_null();
    json_t *o = text && lp ? json_pack("{s:I, s:{s:s, s:s}, s:o, s:s}", "index", (json_int_t)i,
                                       "message", "role", "assistant", "content", text,
                                       "logprobs", lp, "finish_reason", finish_name(c->finish))
                           : NULL;
    if (!o && lp && !text)
        json_decref(lp);
    free(text);
    return o;
}

int fg_oai_response_json(const fg_oai_meta *m, fg_oai_endpoint ep, const fg_request *q,
                         const fg_response *r, char **out, fg_err *err)
{
    int chat = ep == FG_OAI_CHAT;
    char *echo = !chat && q->echo ? echo_text(m, q, r) : NULL;
    json_t *choices = json_array();
    for (uint32_t i = 0; choices && i < r->n_choices; i++) {
        json_t *c = chat ? chat_choice(m, q, &r->choices[i], i)
                         : completion_choice(m, q, r, i, q->echo ? (echo ? echo : "") : NULL);
        if (!c || json_array_append_new(choices, c)) {
            json_decref(choices);
            choices = NULL;
        }
    }
    free(echo);
    json_t *o = choices ? json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", m->id ? m->id : "",
                                    "object", chat ? "chat.completion" : "text_completion",
                                    "created", (json_int_t)m->created, "model",
                                    m->model ? m->model : "", "choices", choices, "usage",
                                    usage(r->n_prompt, r->completion_tokens))
                        : NULL;
    return dump(o, out, err);
}

int fg_oai_chunk_json(const fg_oai_meta *m, fg_oai_endpoint ep, uint32_t choice, int first,
                      const char *text, size_t len, const int32_t *ids, const float *logprob,
                      const fg_token_lp *top, uint32_t n_top, uint32_t n_ids, int finish,
                      char **out, fg_err *err)
{
    int chat = ep == FG_OAI_CHAT;
    char *z = strndup(text ? text : "", text ? len : 0), *t = z ? fgj_utf8_sanitize(z) : NULL;
    free(z);
    json_t *lp = json_null();
    if (logprob && chat)
        lp = chat_logprobs(m, ids, logprob, top, n_top, n_ids);
    else if (logprob) { /* the legacy object over these positions alone */
        fg_choice c = {.tokens = (int32_t *)ids, .n_tokens = n_ids, .logprob = (float *)logprob,
                       .top = (fg_token_lp *)top, .n_top = n_top};
        fg_response r = {0};
        lp = fgj_legacy_logprobs(m, &r, &c, 0);
    }
    json_t *fin = finish ? json_string(finish_name(finish)) : json_null();
    json_t *c = NULL;
    if (t && lp && chat) {
        json_t *delta = first ? json_pack("{s:s, s:s}", "role", "assistant", "content", t)
                              : json_pack("{s:s}", "content", t);
        c = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)choice, "delta", delta,
                      "logprobs", lp, "finish_reason", fin);
    } else if (t && lp) {
        c = json_pack("{s:I, s:s, s:o, s:o}", "index", (json_int_t)choice, "text", t, "logprobs",
                      lp, "finish_reason", fin);
    } else {
        json_decref(lp);
        json_decref(fin);
    }
    free(t);
    json_t *o = c ? json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", m->id ? m->id : "", "object",
                              chat ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)m->created, "model", m->model ? m->model : "",
                              "choices", c)
                  : NULL;
    return dump(o, out, err);
}

int fg_oai_usage_chunk_json(const fg_oai_meta *m, fg_oai_endpoint ep, uint64_t prompt_tokens,
                            uint64_t completion_tokens, char **out, fg_err *err)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", m->id ? m->id : "", "object",
                          ep == FG_OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)m->created, "model", m->model ? m->model : "",
                          "choices", "usage", usage(prompt_tokens, completion_tokens));
    return dump(o, out, err);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *fgj_error_object(const char *message, const char *type, const char *param,
                         const char *code)
{
    char *msg = fgj_utf8_sanitize(message ? message : "");
    json_t *o = msg ? json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type",
                                type ? type : "invalid_request_error", "param",
                                str_or_null(param && *param ? param : NULL), "code",
                                str_or_null(code))
                    : NULL;
    free(msg);
    return o;
}

int fg_oai_error_json(const char *message, const char *type, const char *param,
                      const char *code, char **out, fg_err *err)
{
    return dump(fgj_error_object(message, type, param, code), out, err);
}

int fg_oai_batch_line(const char *line_id, const char *custom_id, const char *request_id,
                      int status, const char *body_json, const char *error_code,
                      const char *error_message, char **out, fg_err *err)
{
    json_t *body = body_json ? json_loads(body_json, 0, NULL) : json_null();
    json_t *e = status >= 400 ? json_pack("{s:s, s:s}", "code", error_code ? error_code : "error",
                                          "message", error_message ? error_message : "")
                              : json_null();
    json_t *o = body && e ? json_pack("{s:s, s:s, s:{s:i, s:s, s:o}, s:o}", "id", line_id,
                                      "custom_id", custom_id, "response", "status_code", status,
                                      "request_id", request_id, "body", body, "error", e)
                          : NULL;
    if (!o && !(body && e)) {
        json_decref(body);
        json_decref(e);
    }
    return dump(o, out, err);
}
