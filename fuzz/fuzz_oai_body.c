/* fuzz_oai_body.c - libFuzzer target for the OpenAI request body parser (jobs/openai_parse.c),
 * which fg-serve runs on every HTTP body and the job reader on every Batch line's body. The
 * first byte picks the endpoint (bit 0: chat) and the batch flag (bit 1); the rest is the body.
 * An accepted body must give a request that passes fg_request_check and points into the body's
 * own storage; a refused one leaves the body empty, with a one-line message and a param that
 * is empty or a field name the message quotes. Accepted requests are then answered with a made-
 * up response and written by the response writer, whose output must be JSON. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int piece(void *ctx, int32_t id, const char **bytes, size_t *len)
{
    static const char *const p[] = {"a", " b", "\xe2\x98", "\x95", "\"q\"", ""};
    (void)ctx;
    *bytes = p[(uint32_t)id % 6];
    *len = strlen(*bytes);
    return 0;
}

static void answer(const fg_oai_body *b)
{
    uint32_t n = b->req.n ? b->req.n : 1, k = b->req.logprobs > 0 ? (uint32_t)b->req.logprobs : 0;
    int32_t ids[3] = {0, 2, 3};
    float lp[3] = {-0.5f, -1.0f, -2.0f};
    fg_token_lp top[3 * 20];
    for (uint32_t i = 0; i < 3 * k; i++)
        top[i] = (fg_token_lp){(int32_t)i, -(float)i};
    fg_choice *c = calloc(n, sizeof *c);
    for (uint32_t i = 0; i < n; i++)
        c[i] = (fg_choice){"x\xe2", ids, 3, FG_FINISH_STOP, b->req.logprobs >= 0 ? lp : NULL,
                           b->req.logprobs >= 0 ? top : NULL, k};
    fg_response r = {.prompt_ids = ids, .n_prompt = 3, .choices = c, .n_choices = n};
    fg_oai_meta m = {"id", b->model, 0, piece, NULL};
    char *s;
    fg_err err;
    if (fg_oai_response_json(&m, b->ep, &b->req, &r, &s, &err) == FG_OK) {
        json_t *o = json_loads(s, 0, NULL);
        if (!o)
            abort();
        json_decref(o);
        free(s);
    }
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fg_oai_endpoint ep = data[0] & 1 ? FG_OAI_CHAT : FG_OAI_COMPLETIONS;
    unsigned flags = data[0] & 2 ? FG_OAI_BATCH : 0;
    fg_oai_body b;
    fg_err err;
    char param[64];
    int rc = fg_oai_body_parse((const char *)data + 1, size - 1, ep, flags, &b, param, &err);
    if (rc != FG_OK) {
        if (b.req.prompt || b.req.messages || b.model || strchr(err.msg, '\n'))
            abort();
        /* the field named in param is the one the message names (a long name is clipped in
         * the message: its first 20 bytes, when they are printable ASCII) */
        char head[21];
        size_t k = 0;
        while (k < 20 && param[k] > 0x20 && param[k] < 0x7f)
            k++;
        memcpy(head, param, k);
        head[k] = '\0';
        if (k == strlen(param) || k == 20)
            if (*head && !strstr(err.msg, head))
                abort();
        return 0;
    }
    if (fg_request_check(&b.req, &err) != FG_OK || b.req.prompt != b.prompt ||
        b.req.messages != b.messages || b.req.prompt_ids != b.prompt_ids)
        abort();
    if ((flags & FG_OAI_BATCH) && b.stream)
        abort();
    if (b.req.echo && ep == FG_OAI_CHAT)
        abort();
    answer(&b);
    fg_oai_body_clear(&b);
    return 0;
}
