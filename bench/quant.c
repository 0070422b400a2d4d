/* bench/quant.c - single-threaded quant/ throughput per ISA, next to memcpy in the same run.
 *
 * Usage: bench_quant [--mb N] [--reps N] [--cols N] [--group G] [--isa ref|avx2|avx512]
 * For each ISA this CPU runs (ref, avx2, avx512): quantize F32 -> Q4 and Q8 (input GB/s), and
 * dequantize Q4 -> F32, Q4 -> F16, Q8 -> F32 (output GB/s), with groups along the contiguous axis
 * ("last") and along axis 0 ("axis0"), printed next to memcpy of the same number of output bytes
 * and the ratio (memcpy runs alternate with the decode runs, so both see the same load). The
 * matrix is [rows, cols], cols 4096 by default; buffers hold N MiB of F32 output (default 64, well
 * past the caches), so these are memory-bound figures. Each figure is the best of --reps runs
 * (default 5). Single thread. The machine is shared: compare the ratios within one run, not
 * absolute figures across runs.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct ctx {
    uint64_t rows, cols;
    float *x;       /* [rows, cols] input */
    void *out;      /* [rows, cols] output, F32 sized */
    void *copy_src; /* memcpy source, F32 sized */
    uint8_t *q;     /* chunk bytes */
    int reps;
} ctx;

static void die(const char *what, const fg_err *err)
{
    fprintf(stderr, "bench_quant: %s: %s\n", what, err->msg);
    exit(1);
}

static double best_encode(const ctx *c, const fg_codec *codec, const fg_qview *v, size_t qlen,
                          fg_quant_isa isa)
{
    double best = 1e30;
    fg_err err;
    for (int r = 0; r < c->reps; r++) {
        double t = now();
        if (fg_quant_encode(codec, v, c->x, FG_CODEC_F32, 0, c->q, qlen, isa, &err))
            die("encode", &err);
        t = now() - t;
        best = t < best ? t : best;
    }
    return c->rows * c->cols * 4.0 / best / 1e9;
}

/* Decode GB/s; *mc gets the memcpy GB/s of the same output bytes, measured in alternation
 * with the decode runs so both see the same machine load. */
static double best_decode(const ctx *c, const fg_codec *codec, const fg_qview *v, size_t qlen,
                          uint8_t dtype, fg_quant_isa isa, double *mc)
{
    double best = 1e30, best_mc = 1e30;
    size_t bytes = c->rows * c->cols * (dtype == FG_CODEC_F32 ? 4 : 2);
    fg_err err;
    for (int r = 0; r < c->reps; r++) {
        double t = now();
        if (fg_quant_decode(codec, v, c->q, qlen, c->out, dtype, 0, isa, &err))
            die("decode", &err);
        t = now() - t;
        best = t < best ? t : best;
        t = now();
        memcpy(c->out, c->copy_src, bytes);
        t = now() - t;
        best_mc = t < best_mc ? t : best_mc;
    }
    *mc = bytes / best_mc / 1e9;
    return bytes / best / 1e9;
}

static void run_isa(ctx *c, fg_quant_isa isa, uint32_t G)
{
    double mc32, mc16;
    for (int axis = 0; axis < 2; axis++) {
        const char *an = axis ? "axis0" : "last";
        uint64_t dims[2] = {c->rows, c->cols};
        for (int bits = 4; bits <= 8; bits += 4) {
            fg_codec codec = fg_codec_quant((unsigned)bits, G, axis ? 0 : 1);
            fg_qview v;
            size_t qlen = 0;
            fg_err err;
            if (fg_codec_qview(&codec, 2, dims, c->rows, &v, &err) ||
                fg_quant_chunk_bytes(&v, &qlen, &err))
                die("view", &err);
            double enc = best_encode(c, &codec, &v, qlen, isa);
            printf("%-7s %-6s quantize f32->q%d          %7.2f GB/s in\n", fg_quant_isa_name(isa),
                   an, bits, enc);
            double d32 = best_decode(c, &codec, &v, qlen, FG_CODEC_F32, isa, &mc32);
            printf("%-7s %-6s dequantize q%d->f32        %7.2f GB/s out   memcpy %6.2f GB/s   "
                   "ratio %5.1f%%\n", fg_quant_isa_name(isa), an, bits, d32, mc32,
                   100 * d32 / mc32);
            if (bits == 4) {
                double d16 = best_decode(c, &codec, &v, qlen, FG_CODEC_F16, isa, &mc16);
                printf("%-7s %-6s dequantize q4->f16        %7.2f GB/s out   memcpy %6.2f GB/s   "
                       "ratio %5.1f%%\n", fg_quant_isa_name(isa), an, d16, mc16,
                       100 * d16 / mc16);
            }
        }
    }
}

int main(int argc, char **argv)
{
    size_t mb = 64;
    ctx c = {0};
    c.reps = 5;
    c.cols = 4096;
    uint32_t G = 64;
    fg_quant_isa only = FG_QUANT_ISA_AUTO;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            c.reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--isa")) {
            fg_err err;
            if (fg_quant_isa_parse(argv[i + 1], &only, &err)) {
                fprintf(stderr, "bench_quant: --isa: %s\n", err.msg);
                return 2;
            }
        } else if (!strcmp(argv[i], "--cols"))
            c.cols = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--group"))
            G = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "bench_quant: unknown flag %s (--mb --reps --cols --group --isa)\n",
                    argv[i]);
            return 2;
        }
    }
    if (mb < 1 || c.reps < 1 || c.cols < 1 || c.cols > mb * 1024 * 1024 / 4 / 256) {
        fprintf(stderr, "bench_quant: --mb, --reps, --cols must be >= 1 (cols <= mb * 1024)\n");
        return 2;
    }
    c.rows = mb * 1024 * 1024 / 4 / c.cols;
    c.rows -= c.rows % 256;
    size_t n = c.rows * c.cols;
    c.x = malloc(n * 4), c.out = malloc(n * 4), c.copy_src = malloc(n * 4);
    c.q = malloc(2 * n + 4096); /* >= any Q4/Q8 chunk of n elements (G >= 8) */
    if (!c.x || !c.out || !c.copy_src || !c.q) {
        fprintf(stderr, "bench_quant: out of memory for %zu MiB buffers\n", mb);
        return 1;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        c.x[i] = (float)((int64_t)(s % 2000001) - 1000000) * 1e-6f;
    }
    memset(c.out, 1, n * 4), memcpy(c.copy_src, c.x, n * 4), memset(c.q, 0, 2 * n + 4096);
    printf("bench_quant: [%llu, %llu] f32 (%zu MiB), group %u, best of %d, single thread\n",
           (unsigned long long)c.rows, (unsigned long long)c.cols, n * 4 >> 20, G, c.reps);
    for (int isa = FG_QUANT_ISA_REF; isa <= FG_QUANT_ISA_AVX512; isa++) {
        if (only != FG_QUANT_ISA_AUTO && isa != (int)only)
            continue;
        if (!fg_quant_isa_supported((fg_quant_isa)isa)) {
            printf("%-7s not supported on this CPU\n", fg_quant_isa_name((fg_quant_isa)isa));
            continue;
        }
        run_isa(&c, (fg_quant_isa)isa, G);
    }
    free(c.x), free(c.out), free(c.copy_src), free(c.q);
    return 0;
}
