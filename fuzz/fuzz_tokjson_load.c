/* fuzz_tokjson_load.c - libFuzzer target for loading a tokenizer.json from untrusted bytes: the
 * input is split at NUL bytes into tokenizer.json, tokenizer_config.json and
 * special_tokens_map.json (the last two optional) and loaded with fg_tok_load_json_mem. A failed
 * load must leave a one-line message and a code. A tokenizer that loads must encode probe
 * strings and the input itself with every flag combination (a pattern may hit PCRE2's match
 * limit, FG_ERR_LIMIT, and nothing else), give ids inside the vocabulary that decode in both
 * decode modes, and give every id's bytes. Seeds: fuzz/gen_seeds_tokjson.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(const fg_err *err, const char *what)
{
    if (err->code == 0 || !err->msg[0] || strchr(err->msg, '\n')) {
        fprintf(stderr, "fuzz_tokjson_load: %s: bad error record: code %d, \"%s\"\n", what,
                err->code, err->msg);
        abort();
    }
}

static void exercise(fg_tok *t, const void *s, size_t n)
{
    static const unsigned flags[4] = {0, FG_TOK_SPECIAL, FG_TOK_ADD_BOS, FG_TOK_SPECIAL | FG_TOK_ADD_BOS};
    for (int f = 0; f < 4; f++) {
        fg_tok_ids ids = {0};
        fg_tok_bytes back = {0};
        fg_err err;
        fg_err_clear(&err);
        int rc = fg_tok_encode(t, s, n, flags[f], &ids, &err);
        if (rc) {
            check_err(&err, "encode");
            if (rc != FG_ERR_LIMIT && rc != FG_ERR_NOMEM)
                abort();
            continue;
        }
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= fg_tok_vocab_size(t))
                abort();
        if (fg_tok_decode(t, ids.ids, ids.n, 0, &back, &err) ||
            fg_tok_decode(t, ids.ids, ids.n, FG_TOK_SKIP_SPECIAL | FG_TOK_REPLACE_INVALID, &back, &err))
            abort();
        fg_tok_ids_free(&ids);
        fg_tok_bytes_free(&back);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const void *part[3] = {NULL, NULL, NULL};
    size_t len[3] = {0, 0, 0}, k = 0, start = 0;
    for (size_t i = 0; i <= size && k < 3; i++)
        if (i == size || data[i] == 0) {
            part[k] = data + start;
            len[k++] = i - start;
            start = i + 1;
        }
    fg_tok_json_files f = {part[0], len[0], NULL, part[1], len[1], NULL, part[2], len[2], NULL};
    fg_tok *t;
    fg_err err;
    fg_err_clear(&err);
    if (fg_tok_load_json_mem(&f, &t, &err)) {
        check_err(&err, "load");
        return 0;
    }
    static const char *probe[] = {"Hello world", "  it's 42 caf\xc3\xa9\n\n\t x", "\xff\xfe abc</s>",
                                  "<s>[INST] \xe2\x96\x81hi <0x41>", "aaaaaaaabababab 1234567",
                                  "<|endoftext|>x", ""};
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++)
        exercise(t, probe[i], strlen(probe[i]));
    exercise(t, data, size < 4096 ? size : 4096);
    for (int32_t id = 0; id < fg_tok_vocab_size(t); id++) {
        const char *b;
        size_t n;
        if (fg_tok_token_bytes(t, id, &b, &n) == 0 && n && b[n - 1] == 0x7f)
            (void)b;  /* touch every token's bytes under ASan */
    }
    (void)fg_tok_class(t);
    fg_tok_free(t);
    return 0;
}
