/* quant_avx512.c - AVX-512 (F + BW + VL) group kernels (compiled with -mavx512f -mavx512bw
 * -mavx512vl; called only when the CPU has them, see quant.c).
 *
 * The quant_avx2.c algorithm 16 lanes wide, bit-identical to quant_ref.c:
 *  - codes: VSUBPS, VDIVPS, VRNDSCALEPS to nearest even, clamp, truncate, VPMOVDB narrows 16
 *    codes to bytes; Q4 pairs packed with VPMADDUBSW then VPMOVWB;
 *  - dequantization: quant_x86_dec.h's group decoder (shared with quant_avx2.c) with VPMOVZXBD
 *    widening 16 codes at once, VMULPS then VADDPS (no FMA), 64-byte stores; F16 output clamps
 *    to +-65504 (NaN passes) and narrows with VCVTPS2PH round-to-nearest-even.
 * Blocks of 32 elements run here; group tails use the scalar reference pieces.
 */
#include <immintrin.h>

#include "quant_int.h"

static int avx512_minmax(const float *x, uint32_t n, float *mn, float *mx)
{
    uint32_t i = 0;
    float lo = x[0], hi = x[0];
    if (n >= 16) {
        const __m512i e = _mm512_set1_epi32(0x7F800000);
        __m512 vlo = _mm512_loadu_ps(x), vhi = vlo;
        __mmask16 bad = 0;
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_loadu_ps(x + i);
            bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), e), e);
            vlo = _mm512_min_ps(vlo, v);
            vhi = _mm512_max_ps(vhi, v);
        }
        if (bad)
            return 1;
        lo = _mm512_reduce_min_ps(vlo);
        hi = _mm512_reduce_max_ps(vhi);
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

/* 16 codes as bytes. */
static inline __m128i codes16(const float *x, __m512 m, __m512 s, __m512 L)
{
    __m512 q = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(x), m), s);
    q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), L);
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
}

static void avx512_codes(const float *x, uint32_t n, float mf, float sf, const fgq_params *p,
                         uint8_t *out)
{
    __m512 m = _mm512_set1_ps(mf), s = _mm512_set1_ps(sf), L = _mm512_set1_ps((float)p->levels);
    __m256i mul = p->hi_first ? _mm256_set1_epi16(0x0110) : _mm256_set1_epi16(0x1001);
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c = _mm256_inserti128_si256(_mm256_castsi128_si256(codes16(x + i, m, s, L)),
                                            codes16(x + i + 16, m, s, L), 1);
        if (p->bits == 8)
            _mm256_storeu_si256((__m256i *)(out + i), c);
        else
            _mm_storeu_si128((__m128i *)(out + i / 2),
                             _mm256_cvtepi16_epi8(_mm256_maddubs_epi16(c, mul)));
    }
    fgq_ref_codes(x, n, mf, sf, p, out, i);
}

static inline __m512 deq16(__m128i c16, __m512 m, __m512 s)
{
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c16));
    return _mm512_add_ps(m, _mm512_mul_ps(f, s));
}

static inline __m256i to_f16_sat(__m512 y)
{
    y = _mm512_max_ps(_mm512_set1_ps(-FGQ_F16_MAX), _mm512_min_ps(_mm512_set1_ps(FGQ_F16_MAX), y));
    return _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT);
}

#define QX_V __m512
#define QX_SET1 _mm512_set1_ps
#define QX_BCAST _mm512_broadcastss_ps
#define QX_STORE16_F32(y, c, m, s) _mm512_storeu_ps((y), deq16((c), (m), (s)))
#define QX_STORE16_F16(y, c, m, s) \
    _mm256_storeu_si256((__m256i *)(y), to_f16_sat(deq16((c), (m), (s))))
#include "quant_x86_dec.h"

static void avx512_f2h_sat(const float *f, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(h + i), to_f16_sat(_mm512_loadu_ps(f + i)));
    fgq_ref_f2h_sat(f + i, h + i, n - i);
}

static void avx512_h2f(const uint16_t *h, float *f, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(f + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
    for (; i < n; i++)
        f[i] = fgq_h2f(h[i]);
}

static void avx512_f2h(const float *f, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(h + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = fgq_f2h(f[i]);
}

/* The 8x8-transpose kernels of quant_avx2.c (row-groups, tiles) serve here too: every AVX-512
 * CPU has AVX2, and those kernels are bound by their strided access, not the vector width. */
const fgq_kernels fgq_kernels_avx512 = {
    .isa = FG_QUANT_ISA_AVX512,
    .minmax = avx512_minmax,
    .codes = avx512_codes,
    .dec_f32 = qx_dec_f32,
    .dec_f16 = qx_dec_f16,
    .dec_rows_f32 = fgq_avx2_dec_rows_f32,
    .dec_rows_f16 = fgq_avx2_dec_rows_f16,
    .h2f = avx512_h2f,
    .f2h = avx512_f2h,
    .f2h_sat = avx512_f2h_sat,
    .transpose = fgq_avx2_transpose,
};
