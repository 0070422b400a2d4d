/* fuzz_tokjson_encode.c - libFuzzer target for encoding with tokenizer.json tokenizers: the
 * input is arbitrary bytes (text, invalid UTF-8, anything) encoded with the Llama 3-like and
 * the Llama 2-like fixtures of tests/fixtures/tokjson (loaded once; their word caches carry
 * over between inputs). Every flag combination must succeed with ids inside the vocabulary that
 * decode in both modes; and the plain encoding must round-trip exactly where the pipeline is
 * lossless: always for the byte-level one unless the input holds its lstrip/rstrip added token
 * "<tab>", and for the SentencePiece one (byte fallback, '\u2581' for ' ', one leading space
 * stripped) unless the input holds '\u2581' itself or its normalized added token. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fg_tok *tok[2];

static void check(fg_tok *t, const uint8_t *data, size_t size, unsigned flags, int exact)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes back = {0};
    fg_err err;
    if (fg_tok_encode(t, data, size, flags, &ids, &err)) {
        fprintf(stderr, "fuzz_tokjson_encode: %s\n", err.msg);
        abort();
    }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= fg_tok_vocab_size(t))
            abort();
    if (fg_tok_decode(t, ids.ids, ids.n, FG_TOK_REPLACE_INVALID, &back, &err))
        abort();
    back.len = 0;
    if (fg_tok_decode(t, ids.ids, ids.n, 0, &back, &err))
        abort();
    if (exact && (back.len != size || (size && memcmp(back.data, data, size) != 0))) {
        fprintf(stderr, "fuzz_tokjson_encode: %s: decode(encode(s)) != s (%zu -> %zu bytes)\n",
                fg_tok_class(t), size, back.len);
        abort();
    }
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *names[2] = {"llama3", "llama2"};
    for (int i = 0; i < 2 && !tok[i]; i++) {
        fg_err err;
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", FG_TOKJSON_DIR, names[i]);
        if (fg_tok_load_dir(dir, &tok[i], &err)) {
            fprintf(stderr, "fuzz_tokjson_encode: %s\n", err.msg);
            abort();
        }
    }
    int exact[2] = {!memmem(data, size, "<tab>", 5),
                    !memmem(data, size, "\xe2\x96\x81", 3) && !memmem(data, size, "Lady Russell", 12)};
    for (int i = 0; i < 2; i++) {
        check(tok[i], data, size, 0, exact[i]);
        check(tok[i], data, size, FG_TOK_SPECIAL, 0);
        check(tok[i], data, size, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, 0);
    }
    return 0;
}
