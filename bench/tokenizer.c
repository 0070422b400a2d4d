/* bench/tokenizer.c - tokenizer throughput on a real text (default: Persuasion, 467 KB).
 *
 * Prints, per tokenizer directory, for encode with an empty word cache (a fresh tokenizer),
 * encode with a warm cache (the same text again) and decode: MB/s of text and tokens/s, best
 * of --reps runs. Default directories: GPT-2 (data/gpt2-tokenizer) and the Llama 3-, Qwen2-,
 * Llama 2- and Mistral-like tokenizer.json fixtures (vocabularies of 1-2 K tokens: real ones
 * have 32-150 K, so fewer symbols are left per piece and more merges are tried). Figures are
 * wall-clock on whatever else the machine is doing; compare the rows of one run.
 *
 *   bench_tokenizer [--dir TOKENIZER_DIR]... [--reps N] [FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer.h"

#ifndef FG_SOURCE_DIR
#define FG_SOURCE_DIR "."
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void row(const char *what, size_t bytes, size_t tokens, double s)
{
    printf("  %-22s %9.2f MB/s %12.0f tokens/s  (%.1f ms)\n", what, bytes / s / 1e6, tokens / s,
           s * 1e3);
}

static int bench_one(const char *dir, const char *text, size_t len, int reps)
{
    fg_err err;
    fg_tok *tok = NULL;
    double best_load = 1e9, best_cold = 1e9, best_warm = 1e9, best_dec = 1e9;
    fg_tok_ids ids = {0};
    fg_tok_bytes out = {0};
    int exact = 1;
    for (int r = 0; r < reps; r++) {
        fg_tok_free(tok);
        double t0 = now();
        if (fg_tok_load_dir(dir, &tok, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        double t1 = now();
        ids.n = 0;
        if (fg_tok_encode(tok, text, len, 0, &ids, &err))
            return fprintf(stderr, "bench_tokenizer: %s\n", err.msg), 1;
        double t2 = now();
        ids.n = 0;
        fg_tok_encode(tok, text, len, 0, &ids, &err);
        double t3 = now();
        out.len = 0;
        if (fg_tok_decode(tok, ids.ids, ids.n, 0, &out, &err))
            return fprintf(stderr, "bench_tokenizer: %s\n", err.msg), 1;
        double t4 = now();
        exact = out.len == len && memcmp(out.data, text, len) == 0;
        if (!exact && strcmp(fg_tok_class(tok), "gpt2-bpe") == 0)
            return fprintf(stderr, "bench_tokenizer: round trip failed\n"), 1;
        best_load = t1 - t0 < best_load ? t1 - t0 : best_load;
        best_cold = t2 - t1 < best_cold ? t2 - t1 : best_cold;
        best_warm = t3 - t2 < best_warm ? t3 - t2 : best_warm;
        best_dec = t4 - t3 < best_dec ? t4 - t3 : best_dec;
    }
    printf("%s (%s, vocabulary %d, %u merges): %zu tokens (%.2f bytes/token)%s\n", dir,
           fg_tok_class(tok), fg_tok_vocab_size(tok), fg_tok_merge_count(tok), ids.n,
           (double)len / ids.n, exact ? "" : "; decode differs from the text (decoder rules)");
    printf("  %-22s %9.1f ms\n", "load", best_load * 1e3);
    row("encode, cold cache", len, ids.n, best_cold);
    row("encode, warm cache", len, ids.n, best_warm);
    row("decode", len, ids.n, best_dec);
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&out);
    fg_tok_free(tok);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dirs[16];
    int n_dirs = 0;
    const char *file = FG_SOURCE_DIR "/data/austen/persuasion.txt";
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc && n_dirs < 16)
            dirs[n_dirs++] = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_tokenizer [--dir DIR]... [--reps N] [FILE]\n");
            return 2;
        } else
            file = argv[i];
    }
    if (n_dirs == 0) {
        static const char *def[] = {FG_SOURCE_DIR "/data/gpt2-tokenizer",
                                    FG_SOURCE_DIR "/tests/fixtures/tokjson/llama3",
                                    FG_SOURCE_DIR "/tests/fixtures/tokjson/qwen2",
                                    FG_SOURCE_DIR "/tests/fixtures/tokjson/llama2",
                                    FG_SOURCE_DIR "/tests/fixtures/tokjson/mistral"};
        for (; n_dirs < 5; n_dirs++)
            dirs[n_dirs] = def[n_dirs];
    }
    size_t len;
    char *text = slurp(file, &len);
    if (!text) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", file);
        return 1;
    }
    printf("%s: %zu bytes, best of %d\n", file, len, reps);
    int rc = 0;
    for (int i = 0; i < n_dirs && !rc; i++)
        rc = bench_one(dirs[i], text, len, reps);
    free(text);
    return rc;
}
