/* kernels_cpu.c - the CPU backend's small kernels: dot product, LayerNorm and attention, each
 * as a scalar reference (_ref) and AVX2/AVX-512 paths picked once at run time.
 *
 * The SIMD paths use target attributes, so the library runs on any x86-64 and only the
 * dispatcher decides. FG_COMPUTE_ISA=ref|avx2|avx512 lowers the choice (tests compare every path
 * with the reference). Sums are accumulated in float in several lanes, so SIMD results differ
 * from the reference by rounding only (tests bound the normalized error).
 *
 * Attention (fg_attn_args in backend.h) follows Hugging Face's eager OPT attention: scores
 * q.k over the causal window, masked keys skipped (they get -inf, i.e. zero weight), softmax
 * with the max subtracted, output the weighted sum of v rows (v_dim values a head, which MLA
 * makes other than the keys' head_dim). A query row whose keys are all
 * masked (a left-padding position) gets zeros; its logits are never used.
 * Sparse attention (keep < 1, FlexGen's top-k): only the ceil(keep * n_valid) keys with the
 * highest scores take part in the softmax, and only their v rows are read; the threshold is
 * found by sorting a copy of the scores (ties at the threshold are all kept).
 * Sinks (gpt-oss): head h's softmax also counts exp(sinks[h]) in its denominator, a key with no
 * value, so the weights sum to less than 1; the max subtracted is max(scores, sinks[h]) as in
 * transformers' eager attention, which concatenates the sink to the scores (a sink far above
 * the scores takes the mass without exp overflowing). It comes after the soft-cap and the top-k
 * and takes no part in either; a padding query still gets zeros.
 * The AVX-512 softmax takes 16 exponentials at a time with glibc's expf algorithm (expf8_avx512,
 * the same bits as the expf the other paths call, checked over every float), the rare lanes
 * outside its plain range (|x| >= 88, NaN) through expf itself.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "backend.h"
#include "fg_cpu.h"

typedef enum { ISA_REF = FG_ISA_REF, ISA_AVX2 = FG_ISA_AVX2, ISA_AVX512 = FG_ISA_AVX512 } isa_t;

/* The process's one detector (core/fg_cpu.h), capped by $FG_COMPUTE_ISA for this module, read
 * once (every op asks). */
static isa_t isa(void)
{
    static _Atomic int cached = -1;
    return (isa_t)fg_cpu_isa_cap_once("FG_COMPUTE_ISA", &cached);
}

const char *fg_cpu_isa(void)
{
    return fg_cpu_isa_name((fg_isa)isa());
}

/* ---- dot ---- */

float fg_cpu_dot_ref(const float *a, const float *b, uint32_t n)
{
    float s = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The 8 lanes of v summed: 256 -> 128 -> 64 -> 32 bits. */
__attribute__((target("avx2,fma"))) static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b,
                                                           uint32_t n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float r = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b,
                                                            uint32_t n)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    if (i + 16 <= n) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                               acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float fg_cpu_dot(const float *a, const float *b, uint32_t n)
{
    switch (isa()) {
    case ISA_AVX512: return dot_avx512(a, b, n);
    case ISA_AVX2: return dot_avx2(a, b, n);
    default: return fg_cpu_dot_ref(a, b, n);
    }
}

/* y += s * x */
static void axpy_ref(float *y, const float *x, float s, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        y[i] += s * x[i];
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, const float *x, float s,
                                                           uint32_t n)
{
    __m256 vs = _mm256_set1_ps(s);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += s * x[i];
}

__attribute__((target("avx512f"))) static void axpy_avx512(float *y, const float *x, float s,
                                                            uint32_t n)
{
    __m512 vs = _mm512_set1_ps(s);
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vs, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(vs, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

/* ---- LayerNorm ---- */

/* The scalar steps every LayerNorm shares, from element i on (the SIMD versions do the head in
 * lanes and hand over the rest): the sum of x, of (x - mean)^2, and y = (x - mean) inv g + b. */
static float ln_sum(const float *x, uint32_t i, uint32_t n, float s)
{
    for (; i < n; i++)
        s += x[i];
    return s;
}

static float ln_sq(const float *x, uint32_t i, uint32_t n, float mean, float s)
{
    for (; i < n; i++)
        s += (x[i] - mean) * (x[i] - mean);
    return s;
}

static void ln_apply(const float *x, const float *g, const float *b, float *y, uint32_t i,
                     uint32_t n, float mean, float inv)
{
    for (; i < n; i++)
        y[i] = (x[i] - mean) * inv * g[i] + b[i];
}

void fg_cpu_layernorm_ref(const float *x, const float *g, const float *b, float *y, uint32_t n,
                          float eps)
{
    float mean = ln_sum(x, 0, n, 0.0f) / (float)n;
    float var = ln_sq(x, 0, n, mean, 0.0f) / (float)n;
    ln_apply(x, g, b, y, 0, n, mean, 1.0f / sqrtf(var + eps));
}

__attribute__((target("avx512f"))) static void layernorm_avx512(const float *x, const float *g,
                                                                 const float *b, float *y,
                                                                 uint32_t n, float eps)
{
    __m512 acc = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
    float mean = ln_sum(x, i, n, _mm512_reduce_add_ps(acc)) / (float)n;
    __m512 vm = _mm512_set1_ps(mean);
    acc = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vm);
        acc = _mm512_fmadd_ps(d, d, acc);
    }
    float var = ln_sq(x, i, n, mean, _mm512_reduce_add_ps(acc)) / (float)n;
    float inv = 1.0f / sqrtf(var + eps);
    __m512 vi = _mm512_set1_ps(inv);
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vi);
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(d, _mm512_loadu_ps(g + i), _mm512_loadu_ps(b + i)));
    }
    ln_apply(x, g, b, y, i, n, mean, inv);
}

/* The same with AVX2: the two sums in 8 lanes (the reference's sums are serial adds, which gcc
 * cannot vectorize without reordering them: 0.8% of an opt-1.3b F16 prefill's samples). */
__attribute__((target("avx2,fma"))) static void layernorm_avx2(const float *x, const float *g,
                                                               const float *b, float *y,
                                                               uint32_t n, float eps)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    }
    float mean = ln_sum(x, i, n, hsum8(_mm256_add_ps(a0, a1))) / (float)n;
    __m256 vm = _mm256_set1_ps(mean);
    a0 = a1 = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
        a0 = _mm256_fmadd_ps(d0, d0, a0);
        a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    float var = ln_sq(x, i, n, mean, hsum8(_mm256_add_ps(a0, a1))) / (float)n;
    float inv = 1.0f / sqrtf(var + eps);
    __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi);
        __m256 gv = _mm256_loadu_ps(g + i), bv = _mm256_loadu_ps(b + i);
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(d, gv, bv));
    }
    ln_apply(x, g, b, y, i, n, mean, inv);
}

void fg_cpu_layernorm(const float *x, const float *g, const float *b, float *y, uint32_t n,
                      float eps)
{
    switch (isa()) {
    case ISA_AVX512: layernorm_avx512(x, g, b, y, n, eps); break;
    case ISA_AVX2: layernorm_avx2(x, g, b, y, n, eps); break;
    default: fg_cpu_layernorm_ref(x, g, b, y, n, eps); break;
    }
}

/* ---- attention ---- */

/* One (query, head) problem's scores q.k_t of n keys at kb (row stride `stride`; -inf where
 * valid[t] is 0) into sc, and its weighted sum o += (p[t] * inv) v_t over the keys with p[t] != 0. */
typedef void (*scores_fn)(const float *q, const float *kb, size_t stride, const uint8_t *valid,
                          uint32_t n, uint32_t d, float *sc);
typedef void (*pv_fn)(float *o, const float *vb, size_t stride, const float *p, float inv,
                      uint32_t n, uint32_t d);

/* The reference's: a dot and an axpy a key. */
static void scores_ref(const float *q, const float *kb, size_t stride, const uint8_t *valid,
                       uint32_t n, uint32_t d, float *sc)
{
    for (uint32_t t = 0; t < n; t++)
        sc[t] = valid[t] ? fg_cpu_dot_ref(q, kb + t * stride, d) : -INFINITY;
}

static void pv_ref(float *o, const float *vb, size_t stride, const float *p, float inv,
                   uint32_t n, uint32_t d)
{
    for (uint32_t t = 0; t < n; t++)
        if (p[t] != 0.0f)
            axpy_ref(o, vb + t * stride, p[t] * inv, d);
}

static int desc(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* k-th largest of x[0..n) (1-based k); x is reordered. A sort: n is at most the context. */
static float kth_largest(float *x, uint32_t n, uint32_t k)
{
    qsort(x, n, sizeof *x, desc);
    return x[k - 1];
}

/* Scores below the top-k threshold become -inf (k = ceil(keep * valid keys)); s[n_ctx..) is
 * the copy's room. */
static void sparsify(const fg_attn_args *a, uint32_t n_ctx, float *s)
{
    float *copy = s + n_ctx;
    uint32_t n = 0;
    for (uint32_t t = 0; t < n_ctx; t++)
        if (s[t] != -INFINITY)
            copy[n++] = s[t];
    uint32_t k = (uint32_t)ceilf(a->keep * (float)n);
    if (n == 0 || k >= n)
        return;
    float thr = kth_largest(copy, n, k ? k : 1);
    for (uint32_t t = 0; t < n_ctx; t++)
        if (s[t] < thr)
            s[t] = -INFINITY;
}

/* The blocked AVX2 inner loops of one (query, head) problem, bit for bit the per-key dot_avx2
 * and axpy_avx2 they replace (same lanes, same order of every add and FMA):
 * scores: four keys a pass share each load of q, and their four sums are folded together
 *   (dot_avx2's 256 -> 128 -> 64 -> 32 fold, done on a 4 x 4 transpose); d a multiple of 16;
 * weighted sum: 64 columns of the output stay in registers over every key (axpy_avx2 loaded
 *   and stored them once a key).
 * opt-1.3b prefill (8 x 128 prompts, perf): attention 5% of the time with the per-key calls. */
__attribute__((target("avx2,fma"))) static void scores_avx2(const float *q, const float *kb,
                                                             size_t stride, const uint8_t *valid,
                                                             uint32_t n, uint32_t d, float *sc)
{
    uint32_t t = 0;
    for (; d % 16 == 0 && t + 4 <= n; t += 4) {
        const float *k0 = kb + t * stride, *k1 = k0 + stride, *k2 = k1 + stride;
        const float *k3 = k2 + stride;
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0;
        __m256 b3 = a0;
        for (uint32_t c = 0; c < d; c += 16) {
            __m256 q0 = _mm256_loadu_ps(q + c), q1 = _mm256_loadu_ps(q + c + 8);
            a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k0 + c), a0);
            b0 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k0 + c + 8), b0);
            a1 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k1 + c), a1);
            b1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k1 + c + 8), b1);
            a2 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k2 + c), a2);
            b2 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k2 + c + 8), b2);
            a3 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k3 + c), a3);
            b3 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k3 + c + 8), b3);
        }
        a0 = _mm256_add_ps(a0, b0), a1 = _mm256_add_ps(a1, b1);
        a2 = _mm256_add_ps(a2, b2), a3 = _mm256_add_ps(a3, b3);
        __m128 r0 = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
        __m128 r1 = _mm_add_ps(_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1));
        __m128 r2 = _mm_add_ps(_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1));
        __m128 r3 = _mm_add_ps(_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1));
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3); /* r_l: lane l of the four keys */
        float out[4];
        _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(r0, r2), _mm_add_ps(r1, r3)));
        for (uint32_t j = 0; j < 4; j++)
            sc[t + j] = valid[t + j] ? out[j] : -INFINITY;
    }
    for (; t < n; t++)
        sc[t] = valid[t] ? dot_avx2(q, kb + t * stride, d) : -INFINITY;
}

__attribute__((target("avx2,fma"))) static void pv_avx2(float *o, const float *vb, size_t stride,
                                                         const float *p, float inv, uint32_t n,
                                                         uint32_t d)
{
    uint32_t c0 = 0;
    for (; c0 + 64 <= d; c0 += 64) {
        __m256 o0 = _mm256_loadu_ps(o + c0), o1 = _mm256_loadu_ps(o + c0 + 8);
        __m256 o2 = _mm256_loadu_ps(o + c0 + 16), o3 = _mm256_loadu_ps(o + c0 + 24);
        __m256 o4 = _mm256_loadu_ps(o + c0 + 32), o5 = _mm256_loadu_ps(o + c0 + 40);
        __m256 o6 = _mm256_loadu_ps(o + c0 + 48), o7 = _mm256_loadu_ps(o + c0 + 56);
        for (uint32_t t = 0; t < n; t++) {
            if (p[t] == 0.0f)
                continue;
            __m256 w = _mm256_set1_ps(p[t] * inv);
            const float *v = vb + t * stride + c0;
            o0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v), o0);
            o1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8), o1);
            o2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 16), o2);
            o3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 24), o3);
            o4 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 32), o4);
            o5 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 40), o5);
            o6 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 48), o6);
            o7 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 56), o7);
        }
        _mm256_storeu_ps(o + c0, o0), _mm256_storeu_ps(o + c0 + 8, o1);
        _mm256_storeu_ps(o + c0 + 16, o2), _mm256_storeu_ps(o + c0 + 24, o3);
        _mm256_storeu_ps(o + c0 + 32, o4), _mm256_storeu_ps(o + c0 + 40, o5);
        _mm256_storeu_ps(o + c0 + 48, o6), _mm256_storeu_ps(o + c0 + 56, o7);
    }
    for (uint32_t t = 0; c0 < d && t < n; t++)
        if (p[t] != 0.0f)
            axpy_avx2(o + c0, vb + t * stride + c0, p[t] * inv, d - c0);
}

/* The same blocking with AVX-512, bit for bit dot_avx512 and axpy_avx512 a key: per key the
 * two accumulators over 32-column steps (a 16-column step into the first; d a multiple of 16),
 * folded as _mm512_reduce_add_ps folds (512 -> 256 -> 128 bits, then lanes (0 + 2) + (1 + 3),
 * done on a 4 x 4 transpose of the four keys); the weighted sum keeps 64 output columns in four
 * registers over every key.
 * opt-1.3b 4-bit prefill (8 x 128 prompts, 2 threads, perf): the per-key calls were 11% of the
 * samples (dot 3.5%, axpy 4.9%, the rest of attention 2.9%). */
__attribute__((target("avx512f"))) static __m128 fold512(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

__attribute__((target("avx512f"))) static void scores_avx512(const float *q, const float *kb,
                                                              size_t stride,
                                                              const uint8_t *valid, uint32_t n,
                                                              uint32_t d, float *sc)
{
    uint32_t t = 0;
    for (; d % 16 == 0 && t + 4 <= n; t += 4) {
        const float *k0 = kb + t * stride, *k1 = k0 + stride, *k2 = k1 + stride;
        const float *k3 = k2 + stride;
        __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0;
        __m512 b3 = a0;
        uint32_t c = 0;
        for (; c + 32 <= d; c += 32) {
            __m512 q0 = _mm512_loadu_ps(q + c), q1 = _mm512_loadu_ps(q + c + 16);
            a0 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k0 + c), a0);
            b0 = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k0 + c + 16), b0);
            a1 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k1 + c), a1);
            b1 = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k1 + c + 16), b1);
            a2 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k2 + c), a2);
            b2 = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k2 + c + 16), b2);
            a3 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k3 + c), a3);
            b3 = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k3 + c + 16), b3);
        }
        if (c < d) { /* 16 columns left: into the first accumulators, as dot_avx512 */
            __m512 q0 = _mm512_loadu_ps(q + c);
            a0 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k0 + c), a0);
            a1 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k1 + c), a1);
            a2 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k2 + c), a2);
            a3 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k3 + c), a3);
        }
        __m128 r0 = fold512(_mm512_add_ps(a0, b0)), r1 = fold512(_mm512_add_ps(a1, b1));
        __m128 r2 = fold512(_mm512_add_ps(a2, b2)), r3 = fold512(_mm512_add_ps(a3, b3));
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3); /* r_l: lane l of the four keys */
        float out[4];
        _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(r0, r2), _mm_add_ps(r1, r3)));
        for (uint32_t j = 0; j < 4; j++)
            sc[t + j] = valid[t + j] ? out[j] : -INFINITY;
    }
    for (; t < n; t++)
        sc[t] = valid[t] ? dot_avx512(q, kb + t * stride, d) : -INFINITY;
}

__attribute__((target("avx512f"))) static void pv_avx512(float *o, const float *vb,
                                                          size_t stride, const float *p,
                                                          float inv, uint32_t n, uint32_t d)
{
    uint32_t c0 = 0;
    for (; c0 + 64 <= d; c0 += 64) {
        __m512 o0 = _mm512_loadu_ps(o + c0), o1 = _mm512_loadu_ps(o + c0 + 16);
        __m512 o2 = _mm512_loadu_ps(o + c0 + 32), o3 = _mm512_loadu_ps(o + c0 + 48);
        for (uint32_t t = 0; t < n; t++) {
            if (p[t] == 0.0f)
                continue;
            __m512 w = _mm512_set1_ps(p[t] * inv);
            const float *v = vb + t * stride + c0;
            o0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v), o0);
            o1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 16), o1);
            o2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 32), o2);
            o3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + 48), o3);
        }
        _mm512_storeu_ps(o + c0, o0), _mm512_storeu_ps(o + c0 + 16, o1);
        _mm512_storeu_ps(o + c0 + 32, o2), _mm512_storeu_ps(o + c0 + 48, o3);
    }
    for (uint32_t t = 0; c0 < d && t < n; t++)
        if (p[t] != 0.0f)
            axpy_avx512(o + c0, vb + t * stride + c0, p[t] * inv, d - c0);
}

/* sc[t] = exp(sc[t] - mx) (0 for a masked key, -inf), returning their sum added in order t = 0..:
 * the softmax's numerators. */
typedef float (*expsum_fn)(float *sc, uint32_t n, float mx);

/* expsum's scalar loop over [t, n), the sum so far in sum. */
static float expsum_from(float *sc, uint32_t t, uint32_t n, float mx, float sum)
{
    for (; t < n; t++) {
        float p = sc[t] != -INFINITY ? expf(sc[t] - mx) : 0.0f;
        sc[t] = p;
        sum += p;
    }
    return sum;
}

static float expsum_ref(float *sc, uint32_t n, float mx)
{
    return expsum_from(sc, 0, n, mx, 0.0f);
}

/* expf of 16 lanes, bit for bit glibc's (2.28 on: sysdeps/ieee754/flt-32/e_expf.c, from Arm's
 * optimized-routines, MIT) as its FMA build runs it (__expf_fma, disassembled in glibc 2.36):
 * x N / ln 2 = k + r, k rounded by adding 1.5 * 2^52, 2^(k / N) from a table of N = 32 entries
 * with k's high bits added to the exponent, 2^(r / N) by a cubic, all in binary64, rounded to
 * float once. Lanes with |x| >= 88 or NaN (its special cases: overflow, underflow, errno) are
 * left to expf itself. The table is 2^(i/32) with i << 47 taken off its bits (the exponent's
 * share is added back from k). Checked against expf over every float (pf32 harness, 2^32
 * inputs, glibc 2.36). */
static const uint64_t k_exp2f_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

__attribute__((target("avx512f"))) static __m256 expf8_avx512(__m256 x)
{
    const __m512d inv_ln2n = _mm512_castsi512_pd(_mm512_set1_epi64(0x40471547652b82fe));
    const __m512d shift = _mm512_castsi512_pd(_mm512_set1_epi64(0x4338000000000000));
    const __m512d c0 = _mm512_castsi512_pd(_mm512_set1_epi64(0x3ebc6af84b912394));
    const __m512d c1 = _mm512_castsi512_pd(_mm512_set1_epi64(0x3f2ebfce50fac4f3));
    const __m512d c2 = _mm512_castsi512_pd(_mm512_set1_epi64(0x3f962e42ff0c52d6));
    const __m512i *tab = (const __m512i *)k_exp2f_tab;
    __m512d xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_fmadd_pd(inv_ln2n, xd, shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(inv_ln2n, xd, kd);
    __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab), ki,
                                           _mm512_loadu_si512(tab + 1));
    __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab + 2), ki,
                                           _mm512_loadu_si512(tab + 3));
    __mmask8 up = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(up, lo, hi), _mm512_slli_epi64(ki, 47));
    __m512d z = _mm512_fmadd_pd(c0, r, c1), r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0));
    y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y), _mm512_castsi512_pd(t));
    return _mm512_cvtpd_ps(y);
}

/* expsum_ref with 16 lanes of expf8_avx512 at a time (the sum still added lane by lane, in
 * order). */
__attribute__((target("avx512f"))) static float expsum_avx512(float *sc, uint32_t n, float mx)
{
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), big = _mm512_set1_epi32(0x42B00000);
    __m512 vm = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
    float sum = 0.0f;
    uint32_t t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 s = _mm512_loadu_ps(sc + t), x = _mm512_sub_ps(s, vm);
        __m256 e0 = expf8_avx512(_mm512_castps512_ps256(x));
        __m256 e1 = expf8_avx512(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        __m512 p = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castps_pd(_mm512_castps256_ps512(e0)), _mm256_castps_pd(e1), 1));
        __mmask16 live = _mm512_cmp_ps_mask(s, ninf, _CMP_NEQ_UQ);
        __mmask16 odd = live & _mm512_cmpge_epu32_mask(
                                   _mm512_and_si512(_mm512_castps_si512(x), abs), big);
        float xs[16];
        if (odd)
            _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(sc + t, _mm512_maskz_mov_ps(live, p));
        for (uint32_t j = 0; j < 16; j++) {
            if (odd >> j & 1)
                sc[t + j] = expf(xs[j]);
            sum += sc[t + j];
        }
    }
    return expsum_from(sc, t, n, mx, sum);
}

/* Keys [t0, n) of KV head g into kp ([n - t0][d]) and their values after them ([n - t0][vd]). */
static void pack_head(const fg_attn_args *a, uint32_t g, uint32_t t0, uint32_t n, size_t vs,
                      float *kp)
{
    uint32_t d = a->head_dim, vd = a->v_dim ? a->v_dim : d;
    float *vp = kp + (size_t)(n - t0) * d;
    for (uint32_t t = t0; t < n; t++) {
        memcpy(kp + (size_t)(t - t0) * d, a->k + t * a->kv_stride + (size_t)g * d, d * 4);
        memcpy(vp + (size_t)(t - t0) * vd, a->v + t * vs + (size_t)g * vd, vd * 4);
    }
}

/* The (query i, head h) problems j = h * n_q + i with j = part (mod n_parts), using scratch
 * region `part`: each problem is independent, so any split gives the same bits. Head-major: a
 * head's keys and values (n x head_dim, 64 KiB for 128 keys of 64) stay in L2 over its queries;
 * query-major read every head's cache rows again for each query (opt-1.3b prefill, 8 prompts of
 * 128: 2 x 8 KiB x 128^2 / 2 a sequence and layer from L3; attention 2.8 -> 1.8% of the
 * prefill's samples). Query head h reads KV head h / (n_heads / n_kv_heads) (grouped-query
 * attention); with a sliding window the keys before pos + 1 - window are not scored at all.
 * With a->kv_pack a part first copies its KV head's keys and values to contiguous rows: in the
 * cache a head's rows are kv_stride apart, a power of two (8 KiB in opt-1.3b), so every key of
 * a head falls in the same few L1 and L2 sets and 128 keys plus values did not stay in L2
 * (opt-1.3b's shape, 32 heads x 128 queries, one thread, AVX-512: 6.1 ms a layer and sequence
 * with the per-key calls, 5.0 blocked, 3.3 blocked and packed, 2.4 with expsum_avx512; AVX2
 * 3.9 -> 3.2).
 * scores, expsum, pv: the reference's scalar loops or an ISA's above. */
static void attention_with(const fg_attn_args *a, scores_fn scores, expsum_fn expsum, pv_fn pv,
                           uint32_t part, uint32_t n_parts)
{
    uint32_t d = a->head_dim, width = a->n_heads * d, vd = a->v_dim ? a->v_dim : d;
    uint32_t kvh = a->n_kv_heads ? a->n_kv_heads : a->n_heads, grp = a->n_heads / kvh;
    size_t vs = a->v_stride ? a->v_stride : a->kv_stride, ow = (size_t)a->n_heads * vd;
    float *sc = a->scratch + part * a->scratch_stride;
    float *kp = a->kv_pack ? a->kv_pack + part * a->kv_pack_stride : NULL;
    uint32_t packed = UINT32_MAX, n_ctx = a->q_pos0 + a->n_q;
    uint32_t p0 = a->window && a->q_pos0 + 1 > a->window ? a->q_pos0 + 1 - a->window : 0;
    for (uint64_t j = part; j < (uint64_t)a->n_q * a->n_heads; j += n_parts) {
        uint32_t i = (uint32_t)(j % a->n_q), h = (uint32_t)(j / a->n_q), g = h / grp;
        uint32_t end = a->q_pos0 + i + 1;
        uint32_t t0 = a->window && end > a->window ? end - a->window : 0, n = end - t0;
        const float *q = a->q + (size_t)i * width + (size_t)h * d;
        const float *kb = a->k + (size_t)t0 * a->kv_stride + (size_t)g * d;
        const float *vb = a->v + (size_t)t0 * vs + (size_t)g * vd;
        size_t kst = a->kv_stride, vst = vs;
        if (kp) { /* keys [p0, n_ctx) of head g, values after them */
            if (g != packed)
                pack_head(a, g, p0, n_ctx, vs, kp);
            packed = g;
            kb = kp + (size_t)(t0 - p0) * d, kst = d;
            vb = kp + (size_t)(n_ctx - p0) * d + (size_t)(t0 - p0) * vd, vst = vd;
        }
        float *o = a->out + (size_t)i * ow + (size_t)h * vd, mx = -INFINITY;
        scores(q, kb, kst, a->valid + t0, n, d, sc);
        for (uint32_t t = 0; a->softcap > 0.0f && t < n; t++) /* Gemma 2: cap * tanh(s / cap) */
            sc[t] = sc[t] != -INFINITY ? a->softcap * tanhf(sc[t] / a->softcap) : sc[t];
        for (uint32_t t = 0; t < n; t++)
            mx = sc[t] > mx ? sc[t] : mx;
        memset(o, 0, vd * sizeof *o);
        if (mx == -INFINITY)
            continue; /* every key masked: a padding query */
        if (a->keep > 0.0f && a->keep < 1.0f)
            sparsify(a, n, sc);
        float sink = a->sinks ? a->sinks[h] : -INFINITY;
        mx = sink > mx ? sink : mx;
        float sum = expsum(sc, n, mx);
        if (a->sinks) /* the sink's share of the denominator; its weight is dropped */
            sum += expf(sink - mx);
        pv(o, vb, vst, sc, 1.0f / sum, n, vd);
    }
}

void fg_cpu_attention_ref(const fg_attn_args *a)
{
    attention_with(a, scores_ref, expsum_ref, pv_ref, 0, 1);
}

void fg_cpu_attention_part(const fg_attn_args *a, uint32_t part, uint32_t n_parts)
{
    switch (isa()) {
    case ISA_AVX512:
        attention_with(a, scores_avx512, expsum_avx512, pv_avx512, part, n_parts);
        break;
    case ISA_AVX2: attention_with(a, scores_avx2, expsum_ref, pv_avx2, part, n_parts); break;
    default: attention_with(a, scores_ref, expsum_ref, pv_ref, part, n_parts); break;
    }
}

void fg_cpu_attention(const fg_attn_args *a)
{
    fg_cpu_attention_part(a, 0, 1);
}
