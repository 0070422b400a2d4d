/* fuzz_bpe_load.c - libFuzzer target for loading a tokenizer from untrusted files: the input is
 * split at NUL bytes into vocab.json, merges.txt and, when present, tokenizer_config.json and
 * special_tokens_map.json, and loaded with fg_tok_load_mem. A tokenizer that loads must then
 * encode a few strings (and the whole input) so that decode(encode(s)) == s, with every
 * id decodable; special-token matching is run too but not compared, since an added token's
 * text need not equal its vocab bytes. A failed load must leave a one-line message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(fg_tok *t, const void *s, size_t n)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes back = {0};
    if (fg_tok_encode(t, s, n, 0, &ids, NULL) ||
        fg_tok_decode(t, ids.ids, ids.n, 0, &back, NULL) || back.len != n ||
        (n && memcmp(back.data, s, n) != 0))
        abort();
    ids.n = 0;
    if (fg_tok_encode(t, s, n, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &ids, NULL) ||
        fg_tok_decode(t, ids.ids, ids.n, FG_TOK_SKIP_SPECIAL, &back, NULL))
        abort();
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const void *part[4] = {NULL, NULL, NULL, NULL};
    size_t len[4] = {0, 0, 0, 0}, k = 0, start = 0;
    for (size_t i = 0; i <= size && k < 4; i++) {
        if (i == size || data[i] == 0) {
            part[k] = data + start;
            len[k++] = i - start;
            start = i + 1;
        }
    }
    if (k < 2)
        return 0;
    fg_tok_files f = {part[0], len[0], NULL, part[1], len[1], NULL,
                      part[2], len[2], NULL, part[3], len[3], NULL};
    fg_tok *t;
    fg_err err;
    fg_err_clear(&err);
    if (fg_tok_load_mem(&f, &t, &err)) {
        if (err.code == 0 || !err.msg[0] || strchr(err.msg, '\n')) {
            fprintf(stderr, "fuzz_bpe_load: bad error record: code %d, \"%s\"\n", err.code, err.msg);
            abort();
        }
        return 0;
    }
    static const char *probe[] = {"Hello world", "  it's 42 caf\xc3\xa9\n\n", "\xff\xfe abc</s>",
                                  "aaaaaaaabababab", "<|endoftext|>x"};
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++)
        roundtrip(t, probe[i], strlen(probe[i]));
    roundtrip(t, data, size);  /* the input itself as text: arbitrary bytes */
    for (int32_t id = 0; id < fg_tok_vocab_size(t); id++) {
        const char *b;
        size_t n;
        if (fg_tok_token_bytes(t, id, &b, &n) == 0 && n && b[n - 1] == 0x7f)
            (void)b;  /* touch every token's bytes under ASan */
    }
    fg_tok_free(t);
    return 0;
}
