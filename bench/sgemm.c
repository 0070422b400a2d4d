/* sgemm.c - OpenBLAS sgemm GFLOP/s on the Linear shapes of an OPT decode step, for comparing
 * with what fg-infer achieves (bench/infer.sh). usage: bench_sgemm M HIDDEN FFN [THREADS]
 * prints GFLOP/s for [M, h] x [h, h]^T (attention projections), [M, h] x [ffn, h]^T (fc1) and
 * [M, ffn] x [h, ffn]^T (fc2), best of 5 after a warm-up. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "fg_progress.h"

static double run(int m, int n, int k)
{
    float *a = calloc((size_t)m * k, 4), *b = calloc((size_t)n * k, 4), *c = calloc((size_t)m * n, 4);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)n * k; i++)
        b[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = fg_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double g = 2.0 * m * n * k / (fg_now() - t0) / 1e9;
        if (rep && g > best)
            best = g;
    }
    free(a), free(b), free(c);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_sgemm M HIDDEN FFN [THREADS]\n");
        return 2;
    }
    int m = atoi(argv[1]), h = atoi(argv[2]), f = atoi(argv[3]);
    if (argc > 4)
        openblas_set_num_threads(atoi(argv[4]));
    double qkv = run(m, h, h), fc1 = run(m, f, h), fc2 = run(m, h, f);
    /* weighted by the flops each shape contributes to a layer (4 h^2 + 2 h ffn) */
    double w = (4.0 * h * h + 2.0 * h * f);
    double mixed = w / (4.0 * h * h / qkv + (double)h * f / fc1 + (double)h * f / fc2);
    printf("sgemm M=%d h=%d ffn=%d: proj %.1f, fc1 %.1f, fc2 %.1f, layer mix %.1f GFLOP/s\n", m, h,
           f, qkv, fc1, fc2, mixed);
    return 0;
}
