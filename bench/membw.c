/* membw.c - the machine's memory read bandwidth, the roofline of batch-1 decode (bench/batch1.sh
 * prints fg's weight bytes per token x tok/s against it, measured in the same run).
 *
 * usage: bench_membw [THREADS] [MIB] [SECONDS]   (defaults 2, 1024, 2)
 * A plain AVX2 read loop (four sequential streams per thread, XOR-folded so nothing is
 * optimized away) over MIB MiB split evenly across THREADS threads, repeated for SECONDS; each
 * pass is timed from a barrier to the last thread's finish. Prints the best and the median pass
 * in GB/s (1e9 bytes). The buffer is written once first so its pages exist.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_progress.h"

typedef struct part {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
} part;

static pthread_barrier_t g_start, g_done;
static int g_quit;

__attribute__((target("avx2"))) static uint64_t read_loop(const uint8_t *p0, size_t n)
{
    size_t q = n / 4 / 64 * 64;
    const uint8_t *p1 = p0 + q, *p2 = p1 + q, *p3 = p2 + q;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < q; i += 64) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p0 + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p1 + i)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p2 + i)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p3 + i)));
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p0 + i + 32)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p1 + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p2 + i + 32)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p3 + i + 32)));
    }
    __m256i acc = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(acc, 0);
}

static void *helper(void *v)
{
    part *p = v;
    for (;;) {
        pthread_barrier_wait(&g_start);
        if (g_quit)
            return NULL;
        p->sink += read_loop(p->p, p->n);
        pthread_barrier_wait(&g_done);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    double secs = argc > 3 ? atof(argv[3]) : 2.0;
    if (threads < 1 || threads > 256 || mib < 64 || !(secs > 0)) {
        fprintf(stderr, "usage: bench_membw [THREADS 1..256] [MIB >= 64] [SECONDS > 0]\n");
        return 2;
    }
    size_t bytes = mib << 20, per = bytes / threads / 256 * 256;
    uint8_t *buf = aligned_alloc(4096, bytes);
    part *parts = calloc(threads, sizeof *parts);
    pthread_t *th = calloc(threads, sizeof *th);
    if (!buf || !parts || !th) {
        fprintf(stderr, "bench_membw: out of memory for %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes);
    pthread_barrier_init(&g_start, NULL, threads);
    pthread_barrier_init(&g_done, NULL, threads);
    for (int i = 0; i < threads; i++) {
        parts[i] = (part){buf + (size_t)i * per, per, 0};
        if (i)
            pthread_create(&th[i], NULL, helper, &parts[i]);
    }
    double t[4096], t_end = fg_now() + secs;
    int n = 0;
    for (int r = 0; n < 4096 && (r < 4 || fg_now() < t_end); r++) {
        double t0 = fg_now();
        pthread_barrier_wait(&g_start);
        parts[0].sink += read_loop(parts[0].p, parts[0].n);
        pthread_barrier_wait(&g_done);
        if (r) /* the first pass warms the TLB */
            t[n++] = fg_now() - t0;
    }
    g_quit = 1;
    pthread_barrier_wait(&g_start);
    for (int i = 1; i < threads; i++)
        pthread_join(th[i], NULL);
    qsort(t, n, sizeof *t, cmp);
    double moved = (double)per * threads;
    printf("read bandwidth, %d threads, %zu MiB: best %.1f GB/s, median %.1f GB/s (%d passes)%s\n",
           threads, mib, moved / t[0] / 1e9, moved / t[n / 2] / 1e9, n,
           parts[0].sink == 42 ? " " : "");
    free(buf), free(parts), free(th);
    return 0;
}
