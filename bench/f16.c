/* f16.c - where the fused F16 kernel (fg_f16_gemm: F16 weights converted in registers, f32
 * sums) stops beating the CPU backend's other F16 paths, by row count m: the 16-bit GEMM
 * (fg_w16_gemm: x packed, weights widened into panels; its x packing is timed too) and, for
 * reference, the piece converted to f32 then OpenBLAS sgemm. The CPU backend's F16_GEMM_MAX_M
 * comes from this.
 *
 * usage: bench_f16 [N] [K]   (default one 4 MiB piece of opt-1.3b: 1024 x 2048)
 * One thread, timed with the thread's CPU time (a call that lost its core to another process is
 * not charged the wait: this machine is shared), best of 30 calls each, the two paths
 * alternated; the piece stays in the cache, as the engine's 4 MiB pieces stay in L3.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "quant.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    uint64_t k = argc > 2 ? strtoull(argv[2], NULL, 10) : 2048;
    if (!n || !k || n > 65536 || k > 65536) {
        fprintf(stderr, "usage: bench_f16 [N] [K]  (1..65536 each)\n");
        return 2;
    }
    openblas_set_num_threads(1);
    uint16_t *w = aligned_alloc(64, (n * k * 2 + 63) / 64 * 64);
    float *wf = aligned_alloc(64, n * k * 4), *y = aligned_alloc(64, 128 * n * 4);
    float *xp = aligned_alloc(64, fg_xpack_floats(128, k) * 4 + 64);
    float *panel = aligned_alloc(64, (uint64_t)FG_XPACK_KC * 1024 * 4);
    float *xbuf = aligned_alloc(64, 128 * k * 4 + 64), *x = xbuf + (getenv("X_OFF") ? atoi(getenv("X_OFF")) : 0);
    if (!w || !wf || !xbuf || !y || !xp || !panel) {
        fprintf(stderr, "bench_f16: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < n * k; i++)
        wf[i] = 0.02f * ((float)rand() / RAND_MAX - 0.5f);
    fg_f32_to_f16(wf, w, n * k, FG_QUANT_ISA_AUTO);
    for (uint64_t i = 0; i < 128 * k; i++)
        x[i] = (float)rand() / RAND_MAX;
    printf("F16 weights [%llu, %llu] x f32 [m, %llu], one thread, GFLOP/s (CPU time)\n",
           (unsigned long long)n, (unsigned long long)k, (unsigned long long)k);
    static const int ms[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 128};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
        int m = ms[i];
        double fused = 1e9, conv = 1e9, g16 = 1e9;
        fg_err err;
        for (int r = 0; r < 30; r++) {
            double t = cpu_now();
            if (fg_f16_gemm(w, n, k, k, x, (uint64_t)m, k, y, n, FG_QUANT_ISA_AUTO, &err)) {
                fprintf(stderr, "bench_f16: %s\n", err.msg);
                return 1;
            }
            t = cpu_now() - t;
            fused = t < fused ? t : fused;
            t = cpu_now();
            fg_f16_to_f32(w, wf, n * k, FG_QUANT_ISA_AUTO);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, (int)n, (int)k, 1.0f, x,
                        (int)k, wf, (int)k, 0.0f, y, (int)n);
            t = cpu_now() - t;
            conv = t < conv ? t : conv;
            t = cpu_now();
            fg_xpack(x, (uint64_t)m, k, k, xp, 0, UINT64_MAX);
            if (fg_w16_gemm(FG_CODEC_F16, w, n, k, xp, (uint64_t)m, k, 0, (uint64_t)m, NULL, y, n,
                            panel, (uint64_t)FG_XPACK_KC * 1024, FG_QUANT_ISA_AUTO, &err)) {
                fprintf(stderr, "bench_f16: %s\n", err.msg);
                return 1;
            }
            t = cpu_now() - t;
            g16 = t < g16 ? t : g16;
        }
        double f = 2.0 * m * n * k / 1e9;
        printf("  m %3d: fused %6.1f   w16 gemm %6.1f   f32 + sgemm %6.1f   fused / w16 %.2f\n", m,
               f / fused, f / g16, f / conv, g16 / fused);
    }
    free(w), free(wf), free(xbuf), free(y), free(xp), free(panel);
    return 0;
}
