/* quant_avx2.c - AVX2 + F16C group kernels (compiled with -mavx2 -mf16c; called only when the
 * CPU has both, see quant.c).
 *
 * Same arithmetic as quant_ref.c, vectorised 8 lanes wide, so the results are bit-identical:
 *  - codes: (x - m) / s with VSUBPS/VDIVPS (IEEE, like the scalar ops), VROUNDPS to nearest even
 *    (= rintf), clamp, truncate; Q4 pairs are packed with VPMADDUBSW (c0 * 1 + c1 * 16) then
 *    VPACKUSWB, so one 16-byte store holds 32 codes;
 *  - dequantization (quant_x86_dec.h, shared with quant_avx512.c): nibbles split with AND/shift,
 *    interleaved with PUNPCKL/HBW into t order,
 *    widened with VPMOVZXBD, converted, then VMULPS and VADDPS (no FMA: m + code*s rounds twice);
 *  - F16 output clamps to +-65504 with MIN/MAX operand order that lets NaN through, then
 *    VCVTPS2PH with round-to-nearest-even;
 *  - groups down the rows (axis 0): 8 columns x 8 rows at a time, the code bytes transposed with
 *    unpacks (Q4: the nibble-pair bytes, split afterwards), then y = m[c] + code * s[c] in row
 *    order with per-column min/scale vectors: the same per-element arithmetic;
 *  - 8x8 float transposes for the quantizer's column tiles.
 * Blocks of 32 elements (8x8 blocks on axis 0) run here; tails go to the scalar reference pieces.
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

static inline __m128i to_f16_sat(__m256 y)
{
    y = _mm256_max_ps(_mm256_set1_ps(-FGQ_F16_MAX), _mm256_min_ps(_mm256_set1_ps(FGQ_F16_MAX), y));
    return _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT);
}

#define QX_V __m256
#define QX_SET1 _mm256_set1_ps
#define QX_BCAST _mm256_broadcastss_ps
#define QX_STORE16_F32(y, c, m, s)                                                                 \
    do {                                                                                           \
        _mm256_storeu_ps((y), deq8((c), (m), (s)));                                                \
        _mm256_storeu_ps((y) + 8, deq8(_mm_srli_si128((c), 8), (m), (s)));                         \
    } while (0)
#define QX_STORE16_F16(y, c, m, s)                                                                 \
    do {                                                                                           \
        _mm_storeu_si128((__m128i *)(y), to_f16_sat(deq8((c), (m), (s))));                         \
        _mm_storeu_si128((__m128i *)((y) + 8), to_f16_sat(deq8(_mm_srli_si128((c), 8), (m), (s)))); \
    } while (0)
#include "quant_x86_dec.h"

static void avx2_f2h_sat(const float *f, uint16_t *h, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), to_f16_sat(_mm256_loadu_ps(f + i)));
    fgq_ref_f2h_sat(f + i, h + i, n - i);
}

/* 8x8 transpose in registers: o[j] lane i = r[i] lane j. */
static inline void transpose8_regs(const __m256 r[8], __m256 o[8])
{
    __m256 t[8], u[8];
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    #pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
        o[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        o[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

/* One 8x8 block: dst row j = src column j. */
static inline void transpose8(const float *src, size_t ss, float *dst, size_t ds)
{
    __m256 r[8], o[8];
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        r[k] = _mm256_loadu_ps(src + k * ss);
    transpose8_regs(r, o);
    #pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        _mm256_storeu_ps(dst + k * ds, o[k]);
}

static inline __m256 widen8(__m128i lo8)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo8));
}

/* Codes t0..t0+7 of 8 groups (columns c .. c+7, group stride gb), transposed: o[i] holds the
 * codes of row t0 + i as floats, one lane per column. The transpose is done on the code bytes
 * (Q4: on the nibble pairs, which are then split without any interleave), not on floats. */
static inline __attribute__((always_inline)) void codes_block8(const uint8_t *codes0, uint32_t gb,
                                                               uint32_t t0, unsigned bits,
                                                               int hi_first, __m256 o[8])
{
    if (bits == 8) {
        __m128i a[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm_loadl_epi64((const __m128i *)(codes0 + j * gb + t0));
        __m128i s0 = _mm_unpacklo_epi8(a[0], a[1]), s1 = _mm_unpacklo_epi8(a[2], a[3]);
        __m128i s2 = _mm_unpacklo_epi8(a[4], a[5]), s3 = _mm_unpacklo_epi8(a[6], a[7]);
        __m128i u0 = _mm_unpacklo_epi16(s0, s1), u1 = _mm_unpackhi_epi16(s0, s1);
        __m128i u2 = _mm_unpacklo_epi16(s2, s3), u3 = _mm_unpackhi_epi16(s2, s3);
        __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2),
                        _mm_unpacklo_epi32(u1, u3), _mm_unpackhi_epi32(u1, u3)};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) { /* v[k]: row 2k in bytes 0-7, row 2k+1 in bytes 8-15 */
            o[2 * k] = widen8(v[k]);
            o[2 * k + 1] = widen8(_mm_srli_si128(v[k], 8));
        }
        return;
    }
    __m128i a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        int w;
        memcpy(&w, codes0 + j * gb + t0 / 2, 4);
        a[j] = _mm_cvtsi32_si128(w);
    }
    __m128i q0 = _mm_unpacklo_epi64(_mm_unpacklo_epi32(a[0], a[1]), _mm_unpacklo_epi32(a[2], a[3]));
    __m128i q1 = _mm_unpacklo_epi64(_mm_unpacklo_epi32(a[4], a[5]), _mm_unpacklo_epi32(a[6], a[7]));
    const __m128i km = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m128i r0 = _mm_shuffle_epi8(q0, km), r1 = _mm_shuffle_epi8(q1, km); /* dword k: byte k */
    __m128i x[2] = {_mm_unpacklo_epi32(r0, r1), _mm_unpackhi_epi32(r0, r1)}; /* pairs 0,1 / 2,3 */
    const __m128i f = _mm_set1_epi8(0x0F);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* x[h]: byte pair 2h in bytes 0-7, pair 2h+1 in bytes 8-15 */
        __m128i lo = _mm_and_si128(x[h], f), hi = _mm_and_si128(_mm_srli_epi16(x[h], 4), f);
        __m128i ev = hi_first ? hi : lo, od = hi_first ? lo : hi; /* rows 2i and 2i+1 */
        o[4 * h] = widen8(ev);
        o[4 * h + 1] = widen8(od);
        o[4 * h + 2] = widen8(_mm_srli_si128(ev, 8));
        o[4 * h + 3] = widen8(_mm_srli_si128(od, 8));
    }
}

/* Min and scale of columns [c0, c0 + n) of a row-group, as binary32 arrays (exact). */
static void ms_arrays(const uint8_t *grp, uint64_t c0, uint32_t n, const fgq_params *p, float *m,
                      float *s)
{
    for (uint32_t j = 0; j < n; j++)
        fgq_read_ms(grp + (c0 + j) * p->gbytes, p, m + j, s + j);
}

/* The row-group walk: blocks of MSBLOCK columns whose min/scale rows are read once; then each
 * 8-row strip is computed STAGE columns at a time in row order (y = m[c] + code * s[c], the
 * reference's per-element arithmetic), staged, and copied out row by row, so the output is
 * written in 8 long sequential runs (with a row stride that is a multiple of 4 KiB, stores a row
 * apart land in one L1 set and 4K-alias the loads). Specialised per (bits, nibble order, output
 * type). */
#define STAGE 128u  /* columns staged per 8-row strip */
#define MSBLOCK 1024u /* columns whose min/scale rows are read at once (8 KiB) */

/* One 8-row strip of columns [b0, b0 + nb) (nb <= STAGE, a multiple of 8), min/scale from mv/sv
 * (indexed from the start of the block they were read for). */
static inline __attribute__((always_inline)) void
strip_impl(const uint8_t *grp, uint32_t t0, uint64_t b0, uint32_t nb, const float *mv,
           const float *sv, const fgq_params *p, void *y, uint64_t ld, unsigned bits,
           int hi_first, int f16)
{
    _Alignas(32) float stage[8][STAGE];
    for (uint32_t c = 0; c < nb; c += 8) {
        __m256 o[8], m = _mm256_loadu_ps(mv + c), s = _mm256_loadu_ps(sv + c);
        codes_block8(grp + (b0 + c) * p->gbytes + p->hdr, p->gbytes, t0, bits, hi_first, o);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            _mm256_store_ps(stage[i] + c, _mm256_add_ps(m, _mm256_mul_ps(o[i], s)));
    }
    for (int i = 0; i < 8; i++) {
        uint64_t off = (t0 + i) * ld + b0;
        for (uint32_t c = 0; c < nb; c += 8) {
            __m256 v = _mm256_load_ps(stage[i] + c);
            if (f16)
                _mm_storeu_si128((__m128i *)((uint16_t *)y + off + c), to_f16_sat(v));
            else
                _mm256_storeu_ps((float *)y + off + c, v);
        }
    }
}

static inline __attribute__((always_inline)) void
rows_impl(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p, void *y,
          uint64_t ld, unsigned bits, int hi_first, int f16)
{
    _Alignas(32) float mv[MSBLOCK], sv[MSBLOCK];
    uint32_t fr = nr & ~7u;
    uint64_t fc = cols & ~(uint64_t)7;
    for (uint64_t m0 = 0; m0 < fc; m0 += MSBLOCK) {
        uint32_t nm = (uint32_t)(fc - m0 < MSBLOCK ? fc - m0 : MSBLOCK);
        ms_arrays(grp, m0, nm, p, mv, sv);
        for (uint32_t t0 = 0; t0 < fr; t0 += 8)
            for (uint32_t b = 0; b < nm; b += STAGE)
                strip_impl(grp, t0, m0 + b, nm - b < STAGE ? nm - b : STAGE, mv + b, sv + b, p,
                           y, ld, bits, hi_first, f16);
    }
    if (f16) {
        fgq_ref_dec_block_f16(grp, 0, fr, fc, cols, p, y, ld);
        fgq_ref_dec_block_f16(grp, fr, nr, 0, cols, p, y, ld);
    } else {
        fgq_ref_dec_block_f32(grp, 0, fr, fc, cols, p, y, ld);
        fgq_ref_dec_block_f32(grp, fr, nr, 0, cols, p, y, ld);
    }
}

void fgq_avx2_dec_rows_f32(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                           float *y, uint64_t ld)
{
    if (p->bits == 8)
        rows_impl(grp, nr, cols, p, y, ld, 8, 0, 0);
    else if (p->hi_first)
        rows_impl(grp, nr, cols, p, y, ld, 4, 1, 0);
    else
        rows_impl(grp, nr, cols, p, y, ld, 4, 0, 0);
}

void fgq_avx2_dec_rows_f16(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                           uint16_t *y, uint64_t ld)
{
    if (p->bits == 8)
        rows_impl(grp, nr, cols, p, y, ld, 8, 0, 1);
    else if (p->hi_first)
        rows_impl(grp, nr, cols, p, y, ld, 4, 1, 1);
    else
        rows_impl(grp, nr, cols, p, y, ld, 4, 0, 1);
}

void fgq_avx2_transpose(const float *src, size_t sstride, float *dst, size_t dstride,
                        uint32_t nrows, uint32_t ncols)
{
    uint32_t fr = nrows & ~7u, fc = ncols & ~7u;
    for (uint32_t i = 0; i < fr; i += 8)
        for (uint32_t j = 0; j < fc; j += 8)
            transpose8(src + i * sstride + j, sstride, dst + j * dstride + i, dstride);
    if (fc < ncols) /* right edge of the full row blocks */
        fgq_ref_transpose(src + fc, sstride, dst + fc * dstride, dstride, fr, ncols - fc);
    if (fr < nrows) /* bottom rows, all columns */
        fgq_ref_transpose(src + fr * sstride, sstride, dst + fr, dstride, nrows - fr, ncols);
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
    .isa = FG_QUANT_ISA_AVX2,
    .minmax = avx2_minmax,
    .codes = avx2_codes,
    .dec_f32 = qx_dec_f32,
    .dec_f16 = qx_dec_f16,
    .dec_rows_f32 = fgq_avx2_dec_rows_f32,
    .dec_rows_f16 = fgq_avx2_dec_rows_f16,
    .h2f = avx2_h2f,
    .f2h = avx2_f2h,
    .f2h_sat = avx2_f2h_sat,
    .transpose = fgq_avx2_transpose,
};
