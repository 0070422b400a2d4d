/* bench/quant_accuracy.c - normalized MSE of Q4/Q8 on weight-like data, per group axis.
 *
 * Usage: bench_quant_accuracy [--rows R] [--cols C] [--group G] [--seed S]
 * A matrix W [rows = out features, cols = in features] (the Hugging Face nn.Linear layout,
 * row-major) of N(0, 0.02^2) with outliers, in three flavours:
 *   gauss        no outliers;
 *   row-outliers 4 random entries per row scaled x25;
 *   col-outliers 6 fixed input columns x25 for every row (outlier features, as in LLM.int8());
 * quantized with F16 min/scale, groups along axis 0 (down a column: FlexGen's choice) and along
 * the last axis (along a row), dequantized to F32. Prints NMSE = sum (x - y)^2 / sum x^2.
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

static void make(float *w, uint64_t rows, uint64_t cols, int flavour)
{
    for (uint64_t i = 0; i < rows * cols; i++)
        w[i] = 0.02f * gauss();
    for (uint64_t r = 0; r < rows; r++) {
        if (flavour == 1)
            for (int k = 0; k < 4; k++)
                w[r * cols + (uint64_t)(unif() * cols)] *= 25.0f;
        if (flavour == 2)
            for (int k = 0; k < 6; k++)
                w[r * cols + (k * 7919u) % cols] *= 25.0f;
    }
}

static double nmse(const float *x, uint64_t rows, uint64_t cols, unsigned bits, uint32_t G,
                   int axis0, float *y, uint8_t *q)
{
    fg_codec c = fg_codec_quant(bits, G, axis0 ? 0 : 1);
    uint64_t dims[2] = {rows, cols};
    fg_qview v;
    size_t len = 0;
    fg_err err;
    if (fg_codec_qview(&c, 2, dims, rows, &v, &err) || fg_quant_chunk_bytes(&v, &len, &err) ||
        fg_quant_encode(&c, &v, x, FG_CODEC_F32, 0, q, len, FG_QUANT_ISA_AUTO, &err) ||
        fg_quant_decode(&c, &v, q, len, y, FG_CODEC_F32, 0, FG_QUANT_ISA_AUTO, &err)) {
        fprintf(stderr, "bench_quant_accuracy: %s\n", err.msg);
        exit(1);
    }
    double num = 0, den = 0;
    for (uint64_t i = 0; i < rows * cols; i++) {
        double d = (double)x[i] - y[i];
        num += d * d;
        den += (double)x[i] * x[i];
    }
    return num / den;
}

int main(int argc, char **argv)
{
    uint64_t rows = 2048, cols = 2048;
    uint32_t G = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--cols")) cols = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--group")) G = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--seed")) g_s = strtoull(argv[i + 1], NULL, 10) | 1;
        else {
            fprintf(stderr, "bench_quant_accuracy: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (!rows || !cols) {
        fprintf(stderr, "bench_quant_accuracy: --rows and --cols must be >= 1\n");
        return 2;
    }
    float *x = malloc(rows * cols * 4), *y = malloc(rows * cols * 4);
    uint8_t *q = malloc(rows * cols * 2 + 8 * (rows + cols) + 4096); /* >= any Q8 chunk (G >= 8) */
    if (!x || !y || !q)
        return 1;
    static const char *names[] = {"gauss", "row-outliers", "col-outliers"};
    printf("W [%llu out, %llu in] N(0, 0.02^2), group %u, F16 min/scale; "
           "NMSE = sum(x-y)^2/sum x^2\n",
           (unsigned long long)rows, (unsigned long long)cols, G);
    printf("| data         | q4 axis 0 | q4 last   | q8 axis 0 | q8 last   |\n");
    printf("|--------------|-----------|-----------|-----------|-----------|\n");
    for (int f = 0; f < 3; f++) {
        make(x, rows, cols, f);
        printf("| %-12s |", names[f]);
        for (unsigned bits = 4; bits <= 8; bits += 4)
            for (int axis0 = 1; axis0 >= 0; axis0--)
                printf(" %9.3e |", nmse(x, rows, cols, bits, G, axis0, y, q));
        printf("\n");
    }
    free(x), free(y), free(q);
    return 0;
}
