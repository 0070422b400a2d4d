/* bench/int8_accuracy.c - what int8 activations cost in accuracy, against f32 activations on the
 * same quantized weights and against f32 weights, on activations with outlier features.
 *
 * Usage: bench_int8_accuracy [--m M] [--k K] [--n N] [--group G] [--seed S]
 * W [n, k] ~ N(0, 0.02^2) (Linear weights), x [m, k] ~ N(0, 1) with a few outlier features
 * (the same columns in every row, as LLM.int8() found in transformers' hidden states) scaled by
 * 0 (none), 6, 20 and 60. For Q4 and Q8 weights (groups of G along k, F16 min/scale) prints the
 * relative error ||y - y_f32|| / ||y_f32|| over all outputs, where y_f32 = x W^T in binary64, of:
 *   wq-f32x   quantized weights times f32 activations (fg's f32 path on a quantized store);
 *   int8-row  fg_quant_gemm, one activation scale per row;
 *   int8-blkB fg_quant_gemm, one scale per B columns (B = G and 4G);
 * and the int8 error relative to wq-f32x's (how much of the total the activations add).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

static uint64_t g_s = 1;
static double unif(void)
{
    g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
    return (double)(g_s >> 11) * 0x1.0p-53;
}
static float gauss(void)
{
    return (float)(sqrt(-2.0 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif()));
}

__attribute__((noreturn)) static void die(const char *what, const fg_err *e)
{
    fprintf(stderr, "bench_int8_accuracy: %s: %s\n", what, e ? e->msg : "out of memory");
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        die("alloc", NULL);
    return p;
}

/* ||y - r|| / ||r|| over m x n. */
static double rel(const float *y, const double *r, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += (y[i] - r[i]) * (y[i] - r[i]), den += r[i] * r[i];
    return sqrt(num / den);
}

static double rel_f(const float *y, const float *r, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += ((double)y[i] - r[i]) * ((double)y[i] - r[i]), den += (double)r[i] * r[i];
    return sqrt(num / den);
}

static void int8_run(const fg_codec *c, const fg_qview *v, const uint8_t *q, size_t ql,
                     const float *x, uint64_t m, uint64_t k, uint64_t n, uint32_t block, float *y)
{
    fg_err err;
    size_t len;
    fg_quant_act a;
    if (fg_quant_act_size(c, m, k, block, &len, &err))
        die("act", &err);
    void *buf = xmalloc(len);
    if (fg_quant_act_init(&a, c, m, k, block, buf, len, &err) ||
        fg_quant_act_q8(&a, x, 0, FG_QUANT_ISA_AUTO, &err) ||
        fg_quant_gemm(c, v, q, ql, 0, n, &a, y, n, FG_QUANT_ISA_AUTO, &err))
        die("int8", &err);
    free(buf);
}

int main(int argc, char **argv)
{
    uint64_t m = 64, k = 2048, n = 512;
    uint32_t G = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--m"))
            m = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--k"))
            k = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--n"))
            n = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--group"))
            G = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            g_s = strtoull(argv[i + 1], NULL, 10) | 1;
        else {
            fprintf(stderr, "usage: bench_int8_accuracy [--m M] [--k K] [--n N] [--group G] "
                            "[--seed S]\n");
            return 2;
        }
    }
    float *w = xmalloc(n * k * 4), *wd = xmalloc(n * k * 4), *x = xmalloc(m * k * 4);
    float *y = xmalloc(m * n * 4), *yq = xmalloc(m * n * 4);
    double *yr = xmalloc(m * n * 8);
    for (uint64_t i = 0; i < n * k; i++)
        w[i] = 0.02f * gauss();
    static const float outl[] = {1, 6, 20, 60};
    printf("m %llu k %llu n %llu, groups of %u along k; relative error vs f32 x f32 (binary64)\n",
           (unsigned long long)m, (unsigned long long)k, (unsigned long long)n, G);
    printf("%-4s %8s | %9s %9s %9s %9s | %8s %8s %8s\n", "w", "outliers", "wq-f32x", "int8-row",
           "int8-blkG", "int8-blk4G", "row/wq", "blkG/wq", "blk4G/wq");
    for (unsigned bits = 4; bits <= 8; bits += 4) {
        fg_err err;
        fg_codec c = fg_codec_quant(bits, G, 1);
        uint64_t dims[2] = {n, k};
        fg_qview v;
        size_t ql = 0;
        if (fg_codec_qview(&c, 2, dims, n, &v, &err) || fg_quant_chunk_bytes(&v, &ql, &err))
            die("view", &err);
        uint8_t *q = xmalloc(ql);
        if (fg_quant_encode(&c, &v, w, FG_CODEC_F32, 0, q, ql, FG_QUANT_ISA_AUTO, &err) ||
            fg_quant_decode(&c, &v, q, ql, wd, FG_CODEC_F32, 0, FG_QUANT_ISA_AUTO, &err))
            die("quant", &err);
        for (int o = 0; o < 4; o++) {
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t cc = 0; cc < k; cc++) /* 6 outlier features */
                    x[i * k + cc] = gauss() * ((cc * 7919) % k < 6 ? outl[o] : 1.0f);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    double s = 0, sq = 0;
                    for (uint64_t cc = 0; cc < k; cc++)
                        s += (double)x[i * k + cc] * w[j * k + cc],
                            sq += (double)x[i * k + cc] * wd[j * k + cc];
                    yr[i * n + j] = s;
                    yq[i * n + j] = (float)sq;
                }
            double e[4], r[3];
            e[0] = rel(yq, yr, m * n);
            uint32_t blocks[3] = {0, G, 4 * G};
            for (int b = 0; b < 3; b++) {
                int8_run(&c, &v, q, ql, x, m, k, n, blocks[b], y);
                e[b + 1] = rel(y, yr, m * n);
                r[b] = rel_f(y, yq, m * n);
            }
            printf("q%-3u %8s | %9.5f %9.5f %9.5f %9.5f | %8.5f %8.5f %8.5f\n", bits,
                   o ? (o == 1 ? "x6" : o == 2 ? "x20" : "x60") : "none", e[0], e[1], e[2], e[3],
                   r[0], r[1], r[2]);
        }
        free(q);
    }
    free(w), free(wd), free(x), free(y), free(yq), free(yr);
    return 0;
}
