/* fg_membw.c - the memory read loop (fg_membw.h). */
#define _GNU_SOURCE
#include "fg_membw.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "fg_progress.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p0, size_t n)
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
#endif

static uint64_t read_u64(const uint8_t *p0, size_t n)
{
    size_t q = n / 4 / 8 * 8;
    const uint64_t *p[4];
    uint64_t a[4] = {0};
    for (int s = 0; s < 4; s++)
        p[s] = (const uint64_t *)(const void *)(p0 + s * q);
    for (size_t i = 0; i < q / 8; i++)
        for (int s = 0; s < 4; s++)
            a[s] ^= ((const volatile uint64_t *)p[s])[i];
    return a[0] ^ a[1] ^ a[2] ^ a[3];
}

typedef struct mb_part {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
    int avx2;
} mb_part;

static uint64_t read_any(const uint8_t *p, size_t n, int avx2)
{
#if defined(__x86_64__) || defined(__i386__)
    if (avx2)
        return read_avx2(p, n);
#endif
    (void)avx2;
    return read_u64(p, n);
}

unsigned long long fg_membw_read(const void *p, size_t n)
{
    return read_any(p, n, (fg_cpu_features() & FG_CPU_AVX2) != 0);
}

static void *read_part(void *v)
{
    mb_part *p = v;
    p->sink ^= read_any(p->p, p->n, p->avx2);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One pass: threads - 1 helpers started for it, the caller reading the first part; seconds, or
 * -1 when a helper cannot be started */
static double pass(mb_part *parts, pthread_t *th, int threads)
{
    double t0 = fg_now();
    int started = 1;
    for (int i = 1; i < threads; i++, started++)
        if (pthread_create(&th[i], NULL, read_part, &parts[i]))
            break;
    read_part(&parts[0]);
    for (int i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    return started == threads ? fg_now() - t0 : -1;
}

volatile uint64_t fg_membw_sink; /* what the loops read, so that they are not optimized away */

int fg_membw_measure(int threads, size_t bytes, double seconds, fg_membw *out)
{
    memset(out, 0, sizeof *out);
    if (threads < 1 || threads > 256 || bytes / (size_t)threads < (64u << 10)) {
        errno = EINVAL;
        return -1;
    }
    size_t per = bytes / (size_t)threads / 256 * 256;
    uint8_t *buf = aligned_alloc(4096, (per * (size_t)threads + 4095) / 4096 * 4096);
    mb_part *parts = calloc((size_t)threads, sizeof *parts);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    double *t = malloc(4096 * sizeof *t);
    int avx2 = (fg_cpu_features() & FG_CPU_AVX2) != 0, n = 0, rc = -1;
    if (!buf || !parts || !th || !t) {
        errno = ENOMEM;
        goto out;
    }
    memset(buf, 1, per * (size_t)threads);
    for (int i = 0; i < threads; i++)
        parts[i] = (mb_part){buf + (size_t)i * per, per, 0, avx2};
    double t_end = fg_now() + seconds;
    for (int r = 0; n < 4096 && (r < 5 || fg_now() < t_end); r++) {
        double s = pass(parts, th, threads);
        if (s < 0) {
            errno = EAGAIN;
            goto out;
        }
        if (r) /* the first pass warms the TLB */
            t[n++] = s;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double moved = (double)per * threads;
    out->best = moved / t[0];
    out->median = moved / t[n / 2];
    out->passes = n;
    for (int i = 0; i < threads; i++)
        fg_membw_sink ^= parts[i].sink;
    rc = 0;
out:
    free(buf), free(parts), free(th), free(t);
    return rc;
}
