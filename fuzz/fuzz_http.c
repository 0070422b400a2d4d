/* fuzz_http.c - libFuzzer target for fg-serve's request glue (serve/serve_body.c): the route
 * of a method and path, and the JSON bodies of /v1/completions, /v1/chat/completions,
 * /tokenize and /detokenize turned into fg_requests; then the JSON answered for them
 * (serve/serve_out.c over jobs/openai.h's writers) from responses made of the input's own
 * bytes.
 *
 * Input: "METHOD PATH\n" then the body (generation bodies go through jobs/openai.h's parser
 * here as in the server). Checks, besides memory safety: a refused route is 404
 * or 405, a refused body 400 (or 500, out of memory) with a message, and its error object is
 * JSON; an accepted body keeps every documented rule (one prompt kind a request, ids inside
 * the vocabulary, n, logprobs, stops in range, fg_request_check passes); the response and
 * stream chunk written for it are JSON (valid UTF-8 whatever bytes the text holds). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"

#define VOCAB 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(const srv_error *e, int want_lo, int want_hi)
{
    if (e->status < want_lo || e->status > want_hi || !e->message[0])
        abort();
    char *s = srv_out_error(e);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j || !json_is_object(json_object_get(j, "error")))
        abort();
    json_decref(j);
    srv_out_free(s);
}

static void check_request(const fg_request *q)
{
    int kinds = !!q->prompt + !!q->prompt_ids + !!q->messages;
    fg_err err;
    if (kinds != 1 || q->n > FG_REQ_MAX_N || q->logprobs < -1 ||
        q->logprobs > FG_REQ_MAX_TOP_LOGPROBS || q->n_stops < 0 || q->n_stops > FG_REQ_MAX_STOPS ||
        !(q->sample.temperature >= 0 && isfinite(q->sample.temperature)) ||
        fg_request_check(q, &err))
        abort();
    for (int i = 0; i < q->n_stops; i++)
        if (!q->stops[i] || !q->stops[i][0])
            abort();
    for (uint32_t i = 0; i < q->n_prompt_ids; i++)
        if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= VOCAB)
            abort();
}

static void check_json_text(char *s, int event)
{
    if (!s)
        return; /* out of memory */
    const char *t = s;
    if (event) {
        if (strncmp(s, "data: ", 6))
            abort();
        t += 6;
    }
    json_error_t je;
    json_t *j = json_loads(t, JSON_DISABLE_EOF_CHECK, &je);
    if (!j)
        abort();
    json_decref(j);
    free(s);
}

/* Responses made of the input's bytes, answered as the server would. */
static void answer(const srv_body *b, const uint8_t *data, size_t size)
{
    static srv_vocab vocab;
    static char *texts[VOCAB];
    static size_t lens[VOCAB];
    if (!vocab.text) { /* tokens' text: bytes that are not all valid UTF-8 */
        for (int i = 0; i < VOCAB; i++) {
            char t[4] = {(char)(i & 0xff), (char)(0x80 | (i >> 8)), (char)i ? 'x' : 0, 0};
            texts[i] = strdup(t);
            lens[i] = strlen(t);
        }
        vocab.text = texts;
        vocab.len = lens;
        vocab.n = VOCAB;
    }
    srv_out_ctx c = {"model", "cmpl-1", 1, &vocab};
    fg_response *r = calloc(b->n_reqs, sizeof *r);
    int32_t ids[4] = {1, 2, (int32_t)(size % VOCAB), 3};
    float lp[4] = {-1.0f, NAN, -INFINITY, 0};
    fg_token_lp top[4 * FG_REQ_MAX_TOP_LOGPROBS];
    for (int i = 0; i < 4 * FG_REQ_MAX_TOP_LOGPROBS; i++)
        top[i] = (fg_token_lp){i % 3 ? i : -1, -0.5f * i};
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    for (uint32_t i = 0; r && i < b->n_reqs; i++) {
        const fg_request *q = &b->reqs[i];
        uint32_t n = q->n ? q->n : 1;
        r[i].n_choices = n;
        r[i].choices = calloc(n, sizeof *r[i].choices);
        r[i].prompt_ids = ids;
        r[i].n_prompt = 4;
        r[i].prompt_logprob = lp;
        r[i].prompt_top = top;
        for (uint32_t j = 0; r[i].choices && j < n; j++)
            r[i].choices[j] = (fg_choice){text, ids, 4, 1 + (int)(j % 3), lp,
                                          q->logprobs > 0 ? top : NULL,
                                          q->logprobs > 0 ? (uint32_t)q->logprobs : 0};
    }
    if (r && (b->n_reqs == 0 || r[b->n_reqs - 1].choices))
        check_json_text(srv_out_response(&c, b, r), 0);
    fg_token_lp plp[4] = {{1, -1}, {2, NAN}, {3, -INFINITY}, {4, 0}};
    check_json_text(srv_out_chunk(&c, b, 0, text, size, ids, plp, 4, (int)(size % 4), 1), 1);
    check_json_text(srv_out_usage_chunk(&c, b, 3, 4), 1);
    for (uint32_t i = 0; r && i < b->n_reqs; i++)
        free(r[i].choices);
    free(r);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - data) : size;
    char line[512];
    if (head >= sizeof line)
        return 0;
    memcpy(line, data, head);
    line[head] = 0;
    char *sp = strchr(line, ' ');
    const char *method = line, *url = sp ? sp + 1 : "/";
    if (sp)
        *sp = 0;
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t len = nl ? size - head - 1 : 0;
    srv_error e = {0};
    srv_route r = srv_route_of(method, url, &e);
    if (r == SRV_ROUTE_NONE) {
        check_error(&e, 404, 405);
        /* a wrong route's body is still read by no one; parse it as completions anyway */
        r = SRV_COMPLETIONS;
    }
    if (r == SRV_COMPLETIONS || r == SRV_CHAT) {
        srv_body b;
        if (srv_body_parse(&b, r == SRV_CHAT, body, len, VOCAB, &e)) {
            check_error(&e, 400, 500);
            return 0;
        }
        if (b.n_reqs < 1 || b.n_reqs > SRV_MAX_PROMPTS || (b.chat && b.n_reqs != 1))
            abort();
        for (uint32_t i = 0; i < b.n_reqs; i++)
            check_request(&b.reqs[i]);
        answer(&b, (const uint8_t *)body, len);
        srv_body_clear(&b);
    } else if (r == SRV_TOKENIZE) {
        srv_tok_body t;
        if (srv_tok_body_parse(&t, body, len, &e)) {
            check_error(&e, 400, 500);
            return 0;
        }
        if (!t.prompt == !t.messages)
            abort();
        srv_tok_body_clear(&t);
    } else if (r == SRV_DETOKENIZE) {
        int32_t *ids;
        uint32_t n;
        if (srv_detok_body_parse(body, len, VOCAB, &ids, &n, &e)) {
            check_error(&e, 400, 500);
            return 0;
        }
        for (uint32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= VOCAB)
                abort();
        free(ids);
    }
    return 0;
}
