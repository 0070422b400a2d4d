/* fuzz_tiktoken_load.c - libFuzzer target for the tiktoken-bpe class from untrusted bytes: the
 * input is split at NUL bytes into tiktoken.model, tokenizer_config.json and tokenization_kimi.py
 * (the last two optional; without the third, Kimi's pattern). The pattern is read from the
 * Python text with fg_tok_tiktoken_pattern, then the tokenizer loaded with
 * fg_tok_load_tiktoken_mem. A refusal must leave a one-line message and a code. A tokenizer that
 * loads must encode probe strings and the input itself with every flag combination (a pattern
 * may hit PCRE2's match limit, FG_ERR_LIMIT, and nothing else), give ids inside the vocabulary,
 * decode in both modes, and give back every byte string it was given (flags 0, raw decode: every
 * byte is a token). Seeds: fuzz/gen_seeds_tiktoken.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char kimi_pattern[] =
    "[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static void check_err(const fg_err *err, const char *what)
{
    if (err->code == 0 || !err->msg[0] || strchr(err->msg, '\n')) {
        fprintf(stderr, "fuzz_tiktoken_load: %s: bad error record: code %d, \"%s\"\n", what,
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
        if (fg_tok_decode(t, ids.ids, ids.n, 0, &back, &err))
            abort();
        if (flags[f] == 0 && (back.len != n || (n && memcmp(back.data, s, n)))) {
            fprintf(stderr, "fuzz_tiktoken_load: %zu bytes do not round-trip\n", n);
            abort();
        }
        back.len = 0;
        if (fg_tok_decode(t, ids.ids, ids.n, FG_TOK_SKIP_SPECIAL | FG_TOK_REPLACE_INVALID, &back, &err))
            abort();
        fg_tok_ids_free(&ids);
        fg_tok_bytes_free(&back);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *part[3] = {NULL, NULL, NULL};
    size_t len[3] = {0, 0, 0}, k = 0, start = 0;
    for (size_t i = 0; i <= size && k < 3; i++)
        if (i == size || data[i] == 0) {
            part[k] = (const char *)data + start;
            len[k++] = i - start;
            start = i + 1;
        }
    fg_err err;
    fg_err_clear(&err);
    char *pat = NULL;
    if (part[2]) {
        if (fg_tok_tiktoken_pattern(part[2], len[2], NULL, &pat, &err)) {
            check_err(&err, "pattern");
            if (pat)
                abort();
            return 0;
        }
    }
    fg_tok_tiktoken_files f = {part[0], len[0], NULL, part[1], len[1], NULL,
                               pat ? pat : kimi_pattern, NULL};
    fg_tok *t;
    fg_err_clear(&err);
    int rc = fg_tok_load_tiktoken_mem(&f, &t, &err);
    free(pat);
    if (rc) {
        check_err(&err, "load");
        return 0;
    }
    static const char *probe[] = {"Hello world", "HelloWorld don't I'M 东京 12345", "\xff\xfe abc[BOS]",
                                  "<|im_end|>x<|reserved_token_300|>", "aaaaaaaabababab  \n\n\t",
                                  ""};
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
