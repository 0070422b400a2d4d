/* quant_gemm_avx2.c - AVX2 int8 activation quantizer and integer GEMM on Q4/Q8 chunks (compiled
 * with -mavx2 -mf16c -mfma; called only when the CPU has them, see quant_gemm.c).
 *
 * Activations (bit-identical to the reference): |x| maxima as integer maxima of the sign-cleared
 * bits (exact; NaN/Inf show up as bits >= 0x7F800000), x * inv rounded by VCVTPS2DQ (nearest
 * even, as rintf), packed to bytes, then for Q4 split into evens and odds per 64 columns; code
 * sums per group with VPMADDUBSW by 1.
 *
 * GEMM (the body is quant_gemm_kern.h, shared with the VNNI builds): for each weight row and
 * each tile of up to 4 activation rows, each group gives one 8-lane int32 vector per activation
 * row:
 *   Q4: 32 code bytes masked give the 32 even codes (low nibbles) and, shifted, the 32 odd ones,
 *       which meet the activations' Q4 order (evens, then odds, per 64 columns) as they are, so
 *       VPMADDUBSW (codes unsigned x activations signed, pairs at most 2 * 15 * 127) then
 *       VPMADDWD by 1 gives int32 partial sums;
 *   Q8: codes recentred to c = q - 128, VPMADDUBSW(|c|, sign(x, c)) (pairs at most
 *       2 * 128 * 127, no saturation), and the integer vector starts at 128 * qsum so the group's
 *       integer equals the reference's exactly.
 * The group's vector is converted to float and accumulated times scale_g (VFMADD), multiplied by
 * the activation scale a once per activation block (or per group, a variant of its own), lanes
 * added once per output; the min term is a dot product of the row's mins (collected on the way)
 * with qmin = a * qsum.
 * Columns are walked in windows of 2048, and within a window blocks of 8 weight rows meet each
 * tile of 4 activation rows, so that codes and activations are reused from L1. When a block of
 * activation rows is small (m x k <= 256 KiB: a decode's 32 rows) the windows are walked inside
 * each block of weight rows, so the weights are read once in order; before, each window was a
 * strided pass over every row: fc2's shape (k 8192, n 2048, m 32, weights from DRAM, one thread,
 * three interleaved pairs) ran at 55-61 GFLOP/s, now 70-94 (the panel kernel, unchanged, as the
 * yardstick of each pair: 0.87-0.94 of the old, 0.68-0.75 of the new).
 */
#include <immintrin.h>

#include "quant_gemm_int.h"

/* ---- activations ---- */

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Largest |x| of x[0..n) as bits, or UINT32_MAX when some x is NaN or Inf. */
static uint32_t amax_bits(const float *x, uint64_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i mx = _mm256_setzero_si256();
    uint64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + c));
        mx = _mm256_max_epu32(mx, _mm256_and_si256(v, abs));
    }
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4E));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xB1));
    uint32_t r = (uint32_t)_mm_cvtsi128_si32(m4);
    for (; c < n; c++) {
        uint32_t u = fgq_fbits(x[c]) & 0x7FFFFFFFu;
        r = u > r ? u : r;
    }
    return r >= 0x7F800000u ? UINT32_MAX : r;
}

/* 32 activation codes of x[0..32) in natural order. */
static inline __m256i act32(const float *x, __m256 inv)
{
    __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
    __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), inv));
    __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), inv));
    __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), inv));
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 64 activation codes of x[0..64) in Q4 order: the 32 evens to q[0..32), the odds to q[32..64). */
static inline void act64_q4(const float *x, __m256 inv, int8_t *q)
{
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                        4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    /* each: [evens of its 32 | odds of its 32] */
    __m256i v0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(act32(x, inv), eo), 0xD8);
    __m256i v1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(act32(x + 32, inv), eo), 0xD8);
    _mm256_storeu_si256((__m256i *)q, _mm256_permute2x128_si256(v0, v1, 0x20));
    _mm256_storeu_si256((__m256i *)(q + 32), _mm256_permute2x128_si256(v0, v1, 0x31));
}

static int8_t act_code(float x, float inv)
{
    float q = rintf(x * inv);
    return (int8_t)(q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q);
}

/* Codes of columns [c0, c1) of row x against inv (full runs of 64 (Q4, aligned) or 32 columns
 * vectorised). */
static void act_codes(const float *x, const fg_quant_act *a, int8_t *q, uint64_t c0, uint64_t c1,
                      float inv)
{
    __m256 vi = _mm256_set1_ps(inv);
    uint64_t c = c0;
    while (c < c1) {
        if (a->bits == 4 && c % 64 == 0 && c + 64 <= c1 && c + 64 <= a->k) {
            act64_q4(x + c, vi, q + c);
            c += 64;
        } else if (a->bits == 8 && c + 32 <= c1 && c + 32 <= a->k) {
            _mm256_storeu_si256((__m256i *)(q + c), act32(x + c, vi));
            c += 32;
        } else {
            q[fgq_act_pos(a, c)] = c < a->k ? act_code(x[c], inv) : 0;
            c++;
        }
    }
}

/* Code sums per group. */
static void act_sums(fg_quant_act *a, uint64_t i)
{
    const int8_t *q = a->q + i * a->kp;
    const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
    for (uint64_t g = 0; g < a->n_groups; g++) {
        uint64_t c0 = g * a->group;
        int32_t qs = 0;
        if (a->group >= (a->bits == 4 ? 64u : 32u)) { /* whole runs: order does not matter */
            __m256i acc = _mm256_setzero_si256();
            for (uint32_t t = 0; t < a->group; t += 32) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q + c0 + t));
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(one8, v), one16);
                acc = _mm256_add_epi32(acc, p);
            }
            qs = hsum8i(acc);
        } else {
            for (uint32_t t = 0; t < a->group; t++) /* Q4 order spreads a small group */
                qs += q[fgq_act_pos(a, c0 + t)];
        }
        a->qsum[i * a->n_groups + g] = qs;
        a->qmin[i * a->n_groups + g] = a->scale[i * a->n_blocks + c0 / a->block] * (float)qs;
    }
}

int fgq_avx2_act_row(const float *x, fg_quant_act *a, uint64_t i)
{
    int8_t *q = a->q + i * a->kp;
    for (uint64_t b = 0; b < a->n_blocks; b++) {
        uint64_t c0 = b * a->block, c1 = c0 + a->block < a->kp ? c0 + a->block : a->kp;
        uint64_t r1 = c1 < a->k ? c1 : a->k;
        uint32_t mx = c0 < a->k ? amax_bits(x + c0, r1 - c0) : 0;
        if (mx == UINT32_MAX)
            return 1;
        float amax = fgq_bitsf(mx), inv = 127.0f / amax, sc = amax / 127.0f;
        if (amax == 0.0f || !fgq_finite(inv))
            inv = 0.0f, sc = 0.0f;
        a->scale[i * a->n_blocks + b] = sc;
        act_codes(x, a, q, c0, c1, inv);
    }
    act_sums(a, i);
    return 0;
}

/* ---- GEMM: quant_gemm_kern.h with VPMADDUBSW ---- */
#define FGQ_VNNI 0
#define FGQ_GEMM_ENTRY fgq_avx2_gemm
#include "quant_gemm_kern.h"

/* ---- F16 weights x f32 activations ---- */

/* Outputs of weight rows j0..j0+NR-1 for activation rows i0..i0+MR-1, k columns. */
static inline __attribute__((always_inline)) void f16_tile(const uint16_t *w, uint64_t j0,
                                                           uint64_t k, uint64_t ldw,
                                                           const float *x, uint64_t i0,
                                                           uint64_t ldx, float *y, uint64_t ldy,
                                                           const int MR, const int NR)
{
    __m256 acc[4][8];
    #pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        #pragma GCC unroll 8
        for (int q = 0; q < NR; q++)
            acc[r][q] = _mm256_setzero_ps();
    uint64_t c = 0;
    for (; c + 8 <= k; c += 8) {
        __m256 wv[8];
        /* A GEMV reads NR rows at once, each a short stream (4 KiB for k = 2048) that ends
         * before a hardware prefetcher has followed it far: the next tile's rows are asked for
         * into L2 meanwhile, a cache line of each every 32 columns (+8-10% weight GB/s from
         * DRAM on one thread of an AMD EPYC Zen 4, bench_int8 --no-gemm; T0 measured slower). */
        if (MR == 1 && !(c & 31))
            #pragma GCC unroll 8
            for (int q = 0; q < NR; q++)
                _mm_prefetch((const char *)(w + (j0 + NR + q) * ldw + c), _MM_HINT_T1);
        #pragma GCC unroll 8
        for (int q = 0; q < NR; q++)
            wv[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (j0 + q) * ldw + c)));
        #pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m256 xv = _mm256_loadu_ps(x + (i0 + r) * ldx + c);
            #pragma GCC unroll 8
            for (int q = 0; q < NR; q++)
                acc[r][q] = _mm256_fmadd_ps(wv[q], xv, acc[r][q]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        #pragma GCC unroll 8
        for (int q = 0; q < NR; q++) {
            float s = hsum8(acc[r][q]);
            for (uint64_t t = c; t < k; t++)
                s = fmaf(fgq_h2f(w[(j0 + q) * ldw + t]), x[(i0 + r) * ldx + t], s);
            y[(i0 + r) * ldy + j0 + q] = s;
        }
}

void fgq_avx2_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                       uint64_t m, uint64_t ldx, float *y, uint64_t ldy)
{
    for (uint64_t i0 = 0; i0 < m; i0 += 4) {
        uint64_t mr = m - i0 < 4 ? m - i0 : 4, j = 0;
        if (mr == 1) {
            for (; j + 8 <= n; j += 8)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 1, 8);
            for (; j < n; j++)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 1, 1);
            continue;
        }
        for (; j + 2 <= n; j += 2) {
            if (mr == 4)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 4, 2);
            else if (mr == 3)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 3, 2);
            else
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 2, 2);
        }
        for (; j < n; j++) {
            if (mr == 4)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 4, 1);
            else if (mr == 3)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 3, 1);
            else
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 2, 1);
        }
    }
}
