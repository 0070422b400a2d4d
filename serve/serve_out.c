/* serve_out.c - the JSON fg-serve answers with, in OpenAI's schemas (the `openai` package's
 * types parse them: tests/serve_test.py): completions (text_completion, with the legacy
 * log-probs object: tokens, token_logprobs, top_logprobs, text_offset, which is what
 * lm-evaluation-harness reads for loglikelihood requests), chat completions (chat.completion,
 * log-probs as content[{token, logprob, bytes, top_logprobs}]), their streaming chunks as
 * server-sent events, and error objects.
 *
 * Token strings are each token's lone decode (srv_vocab, made once at start); a log-prob of
 * -inf is written as -9999.0 (JSON has no infinity; vLLM writes the same), NaN (the first
 * prompt token's, which has no context) as null.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "serve_int.h"

const char *srv_finish_name(int finish)
{
    switch (finish) {
    case FG_FINISH_LENGTH: return "length";
    case FG_FINISH_EOS: return "stop";
    case FG_FINISH_STOP: return "stop";
    default: return NULL;
    }
}

/* Length of the valid UTF-8 sequence at s (1..4), 0 when invalid or cut. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || n > left || (n == 2 && c < 0xC2) || (n == 4 && c > 0xF4))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (n == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)))
        return 0;
    if (n == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)))
        return 0;
    return n;
}

json_t *srv_json_text(const char *s, size_t len)
{
    char *o = malloc(len * 3 + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq((const unsigned char *)s + i, len - i);
        if (n && s[i]) {
            memcpy(w, s + i, n);
            w += n;
            i += n;
        } else { /* invalid byte (or NUL): U+FFFD */
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    json_t *j = json_stringn(o, (size_t)(w - o));
    free(o);
    return j;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static const char *tok_text(const srv_out_ctx *c, int32_t id)
{
    if (c->vocab && id >= 0 && (uint32_t)id < c->vocab->n && c->vocab->text[id])
        return c->vocab->text[id];
    return "";
}

static json_t *lp_value(float x)
{
    if (isnan(x))
        return json_null();
    return json_real(isinf(x) ? -9999.0 : (double)x);
}

static char *dump_event(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, s, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(s);
    return ev;
}

/* ---- completions' legacy log-probs ---- */

typedef struct lp_lists {
    json_t *tokens, *token_lp, *top, *offset;
    size_t at; /* characters so far (text_offset) */
} lp_lists;

static int lp_lists_init(lp_lists *l, size_t at)
{
    l->tokens = json_array();
    l->token_lp = json_array();
    l->top = json_array();
    l->offset = json_array();
    l->at = at;
    return l->tokens && l->token_lp && l->top && l->offset ? 0 : -1;
}

/* One position: the token, its log-prob (NaN: null) and its alternatives top[0..k) (NULL
 * or a row starting with id -1: null). */
static void lp_lists_add(lp_lists *l, const srv_out_ctx *c, int32_t id, float lp,
                         const fg_token_lp *top, uint32_t k)
{
    const char *t = tok_text(c, id);
    json_array_append_new(l->tokens, json_string(t));
    json_array_append_new(l->token_lp, lp_value(lp));
    json_array_append_new(l->offset, json_integer((json_int_t)l->at));
    l->at += utf8_chars(t);
    if (!top || !k || top[0].id < 0) {
        json_array_append_new(l->top, isnan(lp) ? json_null() : json_object());
        return;
    }
    json_t *d = json_object();
    for (uint32_t i = 0; i < k; i++)
        if (top[i].id >= 0 && !json_object_get(d, tok_text(c, top[i].id)))
            json_object_set_new(d, tok_text(c, top[i].id), lp_value(top[i].logprob));
    json_array_append_new(l->top, d);
}

static json_t *lp_lists_obj(lp_lists *l)
{
    json_t *o = json_object();
    json_object_set_new(o, "tokens", l->tokens);
    json_object_set_new(o, "token_logprobs", l->token_lp);
    json_object_set_new(o, "top_logprobs", l->top);
    json_object_set_new(o, "text_offset", l->offset);
    return o;
}

/* ---- chat's log-probs ---- */

static json_t *bytes_of(const char *t)
{
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        json_array_append_new(a, json_integer(*p));
    return a;
}

static json_t *chat_lp_entry(const srv_out_ctx *c, int32_t id, float lp, const fg_token_lp *top,
                             uint32_t k)
{
    json_t *o = json_object(), *alts = json_array();
    const char *t = tok_text(c, id);
    json_object_set_new(o, "token", json_string(t));
    json_object_set_new(o, "logprob", lp_value(lp));
    json_object_set_new(o, "bytes", bytes_of(t));
    for (uint32_t i = 0; top && i < k; i++) {
        if (top[i].id < 0)
            continue;
        json_t *a = json_object();
        const char *at = tok_text(c, top[i].id);
        json_object_set_new(a, "token", json_string(at));
        json_object_set_new(a, "logprob", lp_value(top[i].logprob));
        json_object_set_new(a, "bytes", bytes_of(at));
        json_array_append_new(alts, a);
    }
    json_object_set_new(o, "top_logprobs", alts);
    return o;
}

/* ---- whole responses ---- */

static json_t *head(const srv_out_ctx *c, const char *object)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(c->created));
    json_object_set_new(o, "model", json_string(c->model));
    return o;
}

static json_t *usage(uint64_t p, uint64_t g)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)p));
    json_object_set_new(u, "completion_tokens", json_integer((json_int_t)g));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)(p + g)));
    return u;
}

/* A completions choice (with echo the session put the prompt's text first in ch->text, and
 * the prompt's log-probs in r). */
static json_t *completion_choice(const srv_out_ctx *c, const fg_request *q,
                                 const fg_response *r, const fg_choice *ch, uint32_t index)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(index));
    json_object_set_new(o, "text", srv_json_text(ch->text ? ch->text : "",
                                                 ch->text ? strlen(ch->text) : 0));
    if (q->logprobs >= 0) {
        lp_lists l;
        lp_lists_init(&l, 0);
        uint32_t pk = (uint32_t)q->logprobs;
        for (uint32_t i = 0; q->echo && i < r->n_prompt; i++)
            lp_lists_add(&l, c, r->prompt_ids[i],
                         r->prompt_logprob ? r->prompt_logprob[i] : NAN,
                         r->prompt_top && pk ? r->prompt_top + (size_t)i * pk : NULL, pk);
        for (uint32_t i = 0; i < ch->n_tokens; i++)
            lp_lists_add(&l, c, ch->tokens[i], ch->logprob ? ch->logprob[i] : NAN,
                         ch->top && ch->n_top ? ch->top + (size_t)i * ch->n_top : NULL,
                         ch->n_top);
        json_object_set_new(o, "logprobs", lp_lists_obj(&l));
    } else {
        json_object_set_new(o, "logprobs", json_null());
    }
    const char *f = srv_finish_name(ch->finish);
    json_object_set_new(o, "finish_reason", f ? json_string(f) : json_null());
    return o;
}

static json_t *chat_choice(const srv_out_ctx *c, const srv_body *b, const fg_choice *ch,
                           uint32_t index)
{
    json_t *o = json_object(), *m = json_object();
    json_object_set_new(o, "index", json_integer(index));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content",
                        srv_json_text(ch->text ? ch->text : "", ch->text ? strlen(ch->text) : 0));
    json_object_set_new(o, "message", m);
    if (b->chat_logprobs) {
        json_t *lp = json_object(), *content = json_array();
        for (uint32_t i = 0; i < ch->n_tokens; i++)
            json_array_append_new(content, chat_lp_entry(c, ch->tokens[i],
                ch->logprob ? ch->logprob[i] : NAN,
                ch->top && ch->n_top ? ch->top + (size_t)i * ch->n_top : NULL, ch->n_top));
        json_object_set_new(lp, "content", content);
        json_object_set_new(o, "logprobs", lp);
    } else {
        json_object_set_new(o, "logprobs", json_null());
    }
    const char *f = srv_finish_name(ch->finish);
    json_object_set_new(o, "finish_reason", f ? json_string(f) : json_null());
    return o;
}

char *srv_out_response(const srv_out_ctx *c, const srv_body *b, const fg_response *resp)
{
    json_t *o = head(c, b->chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    uint64_t pt = 0, gt = 0;
    for (uint32_t i = 0; i < b->n_reqs; i++) {
        const fg_response *r = &resp[i];
        pt += r->n_prompt;
        gt += r->completion_tokens;
        for (uint32_t j = 0; j < r->n_choices; j++) {
            uint32_t index = i * b->n + j;
            json_array_append_new(choices, b->chat ? chat_choice(c, b, &r->choices[j], index)
                : completion_choice(c, &b->reqs[i], r, &r->choices[j], index));
        }
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage(pt, gt));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *srv_out_chunk(const srv_out_ctx *c, const srv_body *b, uint32_t index, const char *piece,
                    size_t len, const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids,
                    uint32_t n_top, int finish, int first)
{
    json_t *o = head(c, b->chat ? "chat.completion.chunk" : "text_completion");
    json_t *choices = json_array(), *ch = json_object();
    const fg_request *q = &b->reqs[index / (b->n ? b->n : 1)];
    json_object_set_new(ch, "index", json_integer(index));
    if (b->chat) {
        json_t *d = json_object();
        if (first)
            json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", srv_json_text(piece, len));
        json_object_set_new(ch, "delta", d);
    } else {
        json_object_set_new(ch, "text", srv_json_text(piece, len));
    }
    /* lp: per id, the chosen token's log-prob then its n_top alternatives */
    if (q->logprobs >= 0 && lp && n_ids) {
        size_t row = 1 + (size_t)n_top;
        if (b->chat) {
            json_t *l = json_object(), *content = json_array();
            for (uint32_t i = 0; i < n_ids; i++)
                json_array_append_new(content, chat_lp_entry(c, ids[i], lp[i * row].logprob,
                                                             lp + i * row + 1, n_top));
            json_object_set_new(l, "content", content);
            json_object_set_new(ch, "logprobs", l);
        } else {
            lp_lists l;
            lp_lists_init(&l, 0);
            for (uint32_t i = 0; i < n_ids; i++)
                lp_lists_add(&l, c, ids[i], lp[i * row].logprob, lp + i * row + 1, n_top);
            json_object_set_new(ch, "logprobs", lp_lists_obj(&l));
        }
    } else {
        json_object_set_new(ch, "logprobs", json_null());
    }
    const char *f = srv_finish_name(finish);
    json_object_set_new(ch, "finish_reason", f ? json_string(f) : json_null());
    json_array_append_new(choices, ch);
    json_object_set_new(o, "choices", choices);
    return dump_event(o);
}

char *srv_out_usage_chunk(const srv_out_ctx *c, const srv_body *b, uint64_t prompt_tokens,
                          uint64_t completion_tokens)
{
    json_t *o = head(c, b->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage(prompt_tokens, completion_tokens));
    return dump_event(o);
}

static char k_oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":500}}";

char *srv_out_error(const srv_error *e)
{
    json_t *o = json_object(), *er = json_object();
    json_object_set_new(er, "message", srv_json_text(e->message, strlen(e->message)));
    json_object_set_new(er, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(er, "param", e->param ? json_string(e->param) : json_null());
    json_object_set_new(er, "code", json_integer(e->status));
    json_object_set_new(o, "error", er);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s ? s : k_oom;
}

void srv_out_free(char *s)
{
    if (s != k_oom)
        free(s);
}
