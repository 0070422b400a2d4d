/* serve_out.c - the JSON fg-serve answers with: jobs/openai.h's writers (the same bodies,
 * chunks and error objects the OpenAI Batch output carries; docs/jobs.md), with what only an
 * HTTP server needs around them:
 *  - a completions request listing several prompts is one response: each prompt's body is
 *    written alone, its choices renumbered prompt x n + choice and appended, the usage summed;
 *  - streamed chunks as server-sent events, "data: {chunk}\n\n", the choice index already
 *    global (prompt x n + choice), and with echo the prompt's text as the choice's first chunk;
 *  - token strings from the server's token table (srv_vocab), each id's text as it decodes
 *    after a neutral token (so a SentencePiece token keeps its leading space), made once.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "serve_int.h"

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

int srv_vocab_piece(void *ctx, int32_t id, const char **bytes, size_t *len)
{
    const srv_vocab *v = ctx;
    if (id < 0 || (uint32_t)id >= v->n || !v->text[id]) {
        *bytes = "";
        *len = 0;
        return FG_OK; /* an id the model never emits: no text, never a failed response */
    }
    *bytes = v->text[id];
    *len = v->len[id];
    return FG_OK;
}

static fg_oai_meta meta_of(const srv_out_ctx *c)
{
    return (fg_oai_meta){c->id, c->model, c->created, srv_vocab_piece, (void *)c->vocab};
}

static fg_oai_endpoint ep_of(const srv_body *b)
{
    return b->chat ? FG_OAI_CHAT : FG_OAI_COMPLETIONS;
}

/* Several prompts' bodies as one: choices renumbered and appended to the first, usage summed. */
static char *merge(char **parts, uint32_t n, uint32_t per)
{
    json_error_t je;
    json_t *all = json_loads(parts[0], 0, &je), *choices = json_object_get(all, "choices");
    json_int_t pt = 0, ct = 0;
    for (uint32_t i = 0; all && choices && i < n; i++) {
        json_t *o = i ? json_loads(parts[i], 0, &je) : json_incref(all);
        json_t *u = json_object_get(o, "usage"), *ch = json_object_get(o, "choices"), *x;
        pt += json_integer_value(json_object_get(u, "prompt_tokens"));
        ct += json_integer_value(json_object_get(u, "completion_tokens"));
        size_t k;
        json_array_foreach(ch, k, x) {
            json_int_t idx = json_integer_value(json_object_get(x, "index"));
            json_object_set_new(x, "index", json_integer((json_int_t)i * per + idx));
            if (i)
                json_array_append(choices, x);
        }
        json_decref(o);
    }
    char *s = NULL;
    if (all && choices) {
        json_object_set_new(all, "usage", json_pack("{s:I, s:I, s:I}", "prompt_tokens", pt,
                                                    "completion_tokens", ct, "total_tokens",
                                                    pt + ct));
        s = json_dumps(all, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    }
    json_decref(all);
    return s;
}

char *srv_out_response(const srv_out_ctx *c, const srv_body *b, const fg_response *resp)
{
    fg_oai_meta m = meta_of(c);
    char **parts = calloc(b->n_reqs, sizeof *parts), *s = NULL;
    fg_err err;
    uint32_t done = 0;
    for (; parts && done < b->n_reqs; done++)
        if (fg_oai_response_json(&m, ep_of(b), &b->reqs[done], &resp[done], &parts[done], &err))
            break;
    if (parts && done == b->n_reqs) {
        s = b->n_reqs == 1 ? parts[0] : merge(parts, b->n_reqs, b->n);
        if (b->n_reqs == 1)
            parts[0] = NULL;
    }
    for (uint32_t i = 0; parts && i < b->n_reqs; i++)
        free(parts[i]);
    free(parts);
    return s;
}

static char *event(char *json)
{
    if (!json)
        return NULL;
    size_t n = strlen(json);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, json, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(json);
    return ev;
}

char *srv_out_chunk(const srv_out_ctx *c, const srv_body *b, uint32_t index, const char *piece,
                    size_t len, const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids,
                    int finish, int first)
{
    fg_oai_meta m = meta_of(c);
    float *lps = lp && n_ids ? malloc(n_ids * sizeof *lps) : NULL;
    for (uint32_t i = 0; lps && i < n_ids; i++)
        lps[i] = lp[i].logprob;
    char *out = NULL;
    fg_err err;
    if (fg_oai_chunk_json(&m, ep_of(b), index, first, piece, len, ids, lps, NULL, 0, n_ids,
                          finish, &out, &err))
        out = NULL;
    free(lps);
    return event(out);
}

char *srv_out_usage_chunk(const srv_out_ctx *c, const srv_body *b, uint64_t prompt_tokens,
                          uint64_t completion_tokens)
{
    fg_oai_meta m = meta_of(c);
    char *out = NULL;
    fg_err err;
    if (fg_oai_usage_chunk_json(&m, ep_of(b), prompt_tokens, completion_tokens, &out, &err))
        out = NULL;
    return event(out);
}

static char k_oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}";

char *srv_out_error(const srv_error *e)
{
    char *out = NULL;
    fg_err err;
    json_t *msg = srv_json_text(e->message, strlen(e->message)); /* a URL's bytes, say */
    if (!msg || fg_oai_error_json(json_string_value(msg), e->type ? e->type : "server_error",
                                  e->param, NULL, &out, &err))
        out = k_oom;
    json_decref(msg);
    return out;
}

void srv_out_free(char *s)
{
    if (s != k_oom)
        free(s);
}
