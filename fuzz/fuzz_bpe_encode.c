/* fuzz_bpe_encode.c - libFuzzer target for GPT-2 BPE encoding: the input is arbitrary bytes
 * (text, invalid UTF-8, anything) encoded with the real GPT-2 vocabulary from
 * data/gpt2-tokenizer, plainly and with "<|endoftext|>" matched as a special token; both must
 * decode back to the input bytes exactly, and every id must be in the vocabulary. The
 * tokenizer is loaded once per process (its word cache carries over between inputs, which is
 * part of what is tested). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fg_tok *tok;

static void check(const uint8_t *data, size_t size, unsigned flags)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes back = {0};
    fg_err err;
    if (fg_tok_encode(tok, data, size, flags, &ids, &err)) {
        fprintf(stderr, "fuzz_bpe_encode: %s\n", err.msg);
        abort();
    }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= fg_tok_vocab_size(tok))
            abort();
    if (fg_tok_decode(tok, ids.ids, ids.n, 0, &back, &err)) {
        fprintf(stderr, "fuzz_bpe_encode: %s\n", err.msg);
        abort();
    }
    if (back.len != size || (size && memcmp(back.data, data, size) != 0)) {
        fprintf(stderr, "fuzz_bpe_encode: decode(encode(s)) != s (%zu -> %zu bytes, flags %u)\n",
                size, back.len, flags);
        abort();
    }
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok) {
        fg_err err;
        if (fg_tok_load_dir(FG_GPT2_DIR, &tok, &err) ||
            fg_tok_add_special(tok, "<|endoftext|>", 13, NULL, &err)) {
            fprintf(stderr, "fuzz_bpe_encode: %s\n", err.msg);
            abort();
        }
    }
    check(data, size, 0);
    check(data, size, FG_TOK_SPECIAL);
    return 0;
}
