/* quant_avx2.c - AVX2 + F16C group kernels (compiled with -mavx2 -mf16c; called only when the
 * CPU has both, see quant.c).
 *
 * Same arithmetic as quant_ref.c, vectorised 8 lanes wide, so the results are bit-identical:
 *  - codes: (x - m) / s with VSUBPS/VDIVPS (IEEE, like the scalar ops), VROUNDPS to nearest even
 *    (= rintf), clamp, truncate; Q4 pairs are packed with VPMADDUBSW (c0 * 1 + c1 * 16) then
 *    VPACKUSWB, so one 16-byte store holds 32 codes;
 *  - dequantization: nibbles split with AND/shift, interleaved with PUNPCKL/HBW into t order,
 *    widened with VPMOVZXBD, converted, then VMULPS and VADDPS (no FMA: m + code*s rounds twice);
 *  - F16 output clamps to +-65504 with MIN/MAX operand order that lets NaN through, then
 *    VCVTPS2PH with round-to-nearest-even.
 * Blocks of 32 elements run here; the tail of a group goes to the scalar reference pieces.
 */
#include <immintrin.h>

#include "quant_int.h"

static inline int any_nonfinite(__m256 v)
{
    const __m256i e = _mm256_set1_epi32(0x7F800000);
    __m256i b = _mm256_and_si256(_mm256_castps_si256(v), e);
    return !_mm256_testz_si256(_mm256_cmpeq_epi32(b, e), _mm256_cmpeq_epi32(b, e));
}

static inline float hmin(__m256 v)
{
    __m128 a = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_min_ps(a, _mm_movehl_ps(a, a));
    a = _mm_min_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

static inline float hmax(__m256 v)
{
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

static int avx2_minmax(const float *x, uint32_t n, float *mn, float *mx)
{
    uint32_t i = 0;
    float lo = x[0], hi = x[0];
    if (n >= 8) {
        __m256 vlo = _mm256_loadu_ps(x), vhi = vlo;
        int bad = 0;
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            bad |= any_nonfinite(v);
            vlo = _mm256_min_ps(vlo, v);
            vhi = _mm256_max_ps(vhi, v);
        }
        if (bad)
            return 1;
        lo = hmin(vlo);
        hi = hmax(vhi);
    }
    for (; i < n; i++) {
        if ((fgq_fbits(x[i]) & 0x7F800000u) == 0x7F800000u)
            return 1;
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *mn = lo;
    *mx = hi;
    return 0;
}

/* 8 codes as int32 lanes. */
static inline __m256i codes8(const float *x, __m256 m, __m256 s, __m256 L)
{
    __m256 q = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x), m), s);
    q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(q, _mm256_setzero_ps()), L);
    return _mm256_cvttps_epi32(q);
}

/* 32 codes as bytes in t order. */
static inline __m256i codes32(const float *x, __m256 m, __m256 s, __m256 L)
{
    __m256i a = _mm256_packs_epi32(codes8(x, m, s, L), codes8(x + 8, m, s, L));
    __m256i b = _mm256_packs_epi32(codes8(x + 16, m, s, L), codes8(x + 24, m, s, L));
    __m256i c = _mm256_packus_epi16(a, b);
    return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void avx2_codes(const float *x, uint32_t n, float mf, float sf, const fgq_params *p,
                       uint8_t *out)
{
    __m256 m = _mm256_set1_ps(mf), s = _mm256_set1_ps(sf), L = _mm256_set1_ps((float)p->levels);
    __m256i mul = p->hi_first ? _mm256_set1_epi16(0x0110) : _mm256_set1_epi16(0x1001);
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c = codes32(x + i, m, s, L);
        if (p->bits == 8) {
            _mm256_storeu_si256((__m256i *)(out + i), c);
        } else {
            __m256i w = _mm256_maddubs_epi16(c, mul);
            __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(out + i / 2), b);
        }
    }
    fgq_ref_codes(x, n, mf, sf, p, out, i);
}

static inline __m256 deq8(__m128i c8, __m256 m, __m256 s)
{
    __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c8));
    return _mm256_add_ps(m, _mm256_mul_ps(f, s));
}

/* 32 codes of a block starting at t = i, as two 16-byte vectors in t order. */
static inline void load32(const uint8_t *codes, uint32_t i, const fgq_params *p, __m128i *c0,
                          __m128i *c1)
{
    if (p->bits == 8) {
        *c0 = _mm_loadu_si128((const __m128i *)(codes + i));
        *c1 = _mm_loadu_si128((const __m128i *)(codes + i + 16));
        return;
    }
    const __m128i f = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)(codes + i / 2));
    __m128i lo = _mm_and_si128(b, f), hi = _mm_and_si128(_mm_srli_epi16(b, 4), f);
    if (p->hi_first) {
        __m128i t = lo;
        lo = hi;
        hi = t;
    }
    *c0 = _mm_unpacklo_epi8(lo, hi);
    *c1 = _mm_unpackhi_epi8(lo, hi);
}

static void avx2_dec_f32(const uint8_t *grp, uint32_t n, const fgq_params *p, float *y)
{
    float mf, sf;
    fgq_read_ms(grp, p, &mf, &sf);
    __m256 m = _mm256_set1_ps(mf), s = _mm256_set1_ps(sf);
    const uint8_t *codes = grp + p->hdr;
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i c0, c1;
        load32(codes, i, p, &c0, &c1);
        _mm256_storeu_ps(y + i, deq8(c0, m, s));
        _mm256_storeu_ps(y + i + 8, deq8(_mm_srli_si128(c0, 8), m, s));
        _mm256_storeu_ps(y + i + 16, deq8(c1, m, s));
        _mm256_storeu_ps(y + i + 24, deq8(_mm_srli_si128(c1, 8), m, s));
    }
    fgq_ref_dec_f32(grp, n, p, y, i);
}

static inline __m128i to_f16_sat(__m256 y)
{
    y = _mm256_max_ps(_mm256_set1_ps(-FGQ_F16_MAX), _mm256_min_ps(_mm256_set1_ps(FGQ_F16_MAX), y));
    return _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT);
}

static void avx2_dec_f16(const uint8_t *grp, uint32_t n, const fgq_params *p, uint16_t *y)
{
    float mf, sf;
    fgq_read_ms(grp, p, &mf, &sf);
    __m256 m = _mm256_set1_ps(mf), s = _mm256_set1_ps(sf);
    const uint8_t *codes = grp + p->hdr;
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i c0, c1;
        load32(codes, i, p, &c0, &c1);
        _mm_storeu_si128((__m128i *)(y + i), to_f16_sat(deq8(c0, m, s)));
        _mm_storeu_si128((__m128i *)(y + i + 8), to_f16_sat(deq8(_mm_srli_si128(c0, 8), m, s)));
        _mm_storeu_si128((__m128i *)(y + i + 16), to_f16_sat(deq8(c1, m, s)));
        _mm_storeu_si128((__m128i *)(y + i + 24), to_f16_sat(deq8(_mm_srli_si128(c1, 8), m, s)));
    }
    fgq_ref_dec_f16(grp, n, p, y, i);
}

static void avx2_h2f(const uint16_t *h, float *f, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++)
        f[i] = fgq_h2f(h[i]);
}

static void avx2_f2h(const float *f, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = fgq_f2h(f[i]);
}

const fgq_kernels fgq_kernels_avx2 = {
    FG_QUANT_ISA_AVX2, avx2_minmax, avx2_codes, avx2_dec_f32, avx2_dec_f16, avx2_h2f, avx2_f2h,
};
