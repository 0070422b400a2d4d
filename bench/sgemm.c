/* sgemm.c - OpenBLAS sgemm GFLOP/s on the Linear shapes of an OPT decode step, for comparing
 * with what fg-infer achieves (bench/infer.sh, bench/prefill.sh).
 * usage: bench_sgemm M HIDDEN FFN [THREADS [SECONDS]]
 * prints GFLOP/s for [M, h] x [h, h]^T (attention projections), [M, h] x [ffn, h]^T (fc1) and
 * [M, ffn] x [h, ffn]^T (fc2), best of 5 after a warm-up, and their mix weighted by the FLOPs
 * each contributes to a layer. With SECONDS, also "sustained": a layer's six Linears in the
 * order a layer runs them (q, k, v, out, fc1, fc2; each on the previous one's output where the
 * shapes allow), back to back for at least SECONDS, total FLOPs over total wall time: what a
 * prefill of that many seconds would get from sgemm alone, slow moments of a shared machine
 * included as they are in the prefill's own time (the best-of-5 figures are bursts). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "fg_progress.h"

/* n floats, allocated (or the program exits) and set to small values. */
static float *filled(size_t n)
{
    float *p = malloc(n * 4);
    if (!p) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i % 7) * 0.01f;
    return p;
}

static double run(int m, int n, int k)
{
    float *a = filled((size_t)m * k), *b = filled((size_t)n * k), *c = filled((size_t)m * n);
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

/* A layer's Linears back to back for at least secs seconds: GFLOP/s over the whole time. */
static double sustained(int m, int h, int f, double secs)
{
    float *w[6], *x = filled((size_t)m * h), *qkv = filled((size_t)m * h * 3);
    float *o = filled((size_t)m * h), *u = filled((size_t)m * f), *y = filled((size_t)m * h);
    for (int i = 0; i < 4; i++)
        w[i] = filled((size_t)h * h);
    w[4] = filled((size_t)f * h), w[5] = filled((size_t)h * f);
    double flop = 2.0 * m * (4.0 * h * h + 2.0 * h * f), done = 0, t0 = fg_now(), t = t0;
    while (t - t0 < secs) {
        for (int i = 0; i < 3; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, h, h, 1.0f, x, h, w[i], h,
                        0.0f, qkv + (size_t)i * m * h, h);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, h, h, 1.0f, qkv, h, w[3], h,
                    0.0f, o, h);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, f, h, 1.0f, o, h, w[4], h, 0.0f,
                    u, f);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, h, f, 1.0f, u, f, w[5], f, 0.0f,
                    y, h);
        done += flop;
        t = fg_now();
    }
    for (int i = 0; i < 6; i++)
        free(w[i]);
    free(x), free(qkv), free(o), free(u), free(y);
    return done / (t - t0) / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_sgemm M HIDDEN FFN [THREADS [SECONDS]]\n");
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
    double secs = argc > 5 ? atof(argv[5]) : 0;
    if (secs > 0)
        printf("sgemm M=%d h=%d ffn=%d: sustained %.1f GFLOP/s over %.1f s\n", m, h, f,
               sustained(m, h, f, secs), secs);
    return 0;
}
