/* fuzz_jinja.c - libFuzzer target for the chat-template interpreter (text/chat.h): the lexer,
 * the parser and the renderer on hostile templates and hostile messages.
 * Input: byte 0 holds flags (bit 0: add_generation_prompt, bit 1: pass extra variables),
 * then the template source up to the first NUL, then (optionally) the messages JSON; with no
 * NUL a fixed three-turn conversation is used, so template mutations always reach the
 * renderer with real data. Checks, besides memory safety (ASan/UBSan): a render stays within
 * its output ceiling, and a failure always leaves a one-line "chat template line N: ..."
 * message (or the messages' own error) and no output. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char conv[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello\",\"reasoning_content\":\"think\"},"
    "{\"role\":\"user\",\"content\":\"Bye\"}]";
static const char extra[] =
    "{\"enable_thinking\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int flags = data[0];
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    const char *nul = memchr(src, 0, n);
    size_t tlen = nul ? (size_t)(nul - src) : n;
    const char *msgs = nul ? nul + 1 : conv;
    size_t mlen = nul ? n - tlen - 1 : sizeof conv - 1;
    fg_chat_template *t;
    fg_err e = {0};
    if (fg_chat_template_parse(src, tlen, &t, &e) != FG_OK) {
        if (strncmp(e.msg, "chat template", 13) || strchr(e.msg, '\n'))
            abort();
        return 0;
    }
    fg_chat_opts o = {.add_generation_prompt = flags & 1, .bos_token = "<s>", .eos_token = "</s>",
                      .extra_json = flags & 2 ? extra : NULL, .extra_len = sizeof extra - 1,
                      .now = 1768478400, .max_output = 1 << 16, .max_iterations = 20000};
    char *out = NULL;
    size_t olen = 0;
    int rc = fg_chat_render(t, msgs, mlen, &o, &out, &olen, &e);
    if (rc == FG_OK && (!out || olen > o.max_output || strlen(out) > olen))
        abort();
    if (rc != FG_OK && (out || strncmp(e.msg, "chat template", 13) || strchr(e.msg, '\n')))
        abort();
    free(out);
    fg_chat_template_free(t);
    return 0;
}
