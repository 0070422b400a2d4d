/* gemm_q4p_avx2.c - the prefill's int8 GEMM on Q4 weights (groups of G >= 64 along the input
 * axis) with AVX2: weights repacked into panels, many activation rows per pass (quant.h:
 * fg_quant_gemm_panel; compiled with -mavx2 -mf16c -mfma, called only when the CPU has them).
 *
 * Why a second Q4 kernel: fg_quant_gemm's kernel (quant_gemm_avx2.c) runs along k within each
 * (weight row, activation row) pair and reduces lanes once per output, which costs 41 vector
 * instructions per 256 multiply-adds of a 4-row tile (VPMADDUBSW, VPMADDWD, conversions and
 * scales once per group and row) and unpacks the nibbles again for every tile of activation rows.
 * Here the nibbles are unpacked once per slab into a panel laid out [quad of k][8 weight
 * rows][4 codes] per group, so one VPMADDUBSW multiplies 8 weight rows by 4 codes of one
 * activation row (broadcast), and the 16-bit sums of 8 quads are added before one VPMADDWD
 * widens them (Q4 codes 0..15 times activations in -127..127: a pair is at most 3810, eight
 * pairs 30480, under 2^15). A tile is 4 activation rows x 8 weight rows: 4 float accumulators,
 * 4 int32 group sums, 4 int16 runs, the weight vector, a broadcast and the ones: 15 registers.
 * Per group of 64 and tile: 16 x (1 load, 4 broadcasts, 4 VPMADDUBSW, 4 VPADDW), 8 VPMADDWD and
 * 8 VPADDD, then 4 x (convert, multiply, 2 FMA): about 12 multiply-adds an instruction where
 * the other kernel has 6.
 *
 * Codes meet the activations in their Q4 order (quant.h: per 64 columns the 32 evens, then the
 * 32 odds), which for a 64-column block is the 32 low nibbles of its 32 code bytes, then the 32
 * high ones (hi_first swaps them): so a group of G >= 64 is G consecutive activation bytes.
 * The float terms per group follow quant.h: y += a_i * s_g * I + m_g * qmin_i (FMA in binary32).
 * Loops: weight rows in slabs that fit the panel, k in blocks of KB_COLS columns; within a block,
 * activation rows in blocks of MC (in L2) meet each strip (8 KiB of codes, in L1) tile by tile;
 * y is stored at the first k block and added to after.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"

#define TR 4            /* activation rows a tile */
#define TC 8            /* weight rows a tile (a strip) */
#define KB_COLS FG_QUANT_PANEL_COLS /* columns a k block */
#define MC 128          /* activation rows a pass over the strips (128 KiB of codes at 1024) */

static inline void transpose8_store(__m256i r[8], uint8_t *out)
{
    __m256 v0 = _mm256_castsi256_ps(r[0]), v1 = _mm256_castsi256_ps(r[1]);
    __m256 v2 = _mm256_castsi256_ps(r[2]), v3 = _mm256_castsi256_ps(r[3]);
    __m256 v4 = _mm256_castsi256_ps(r[4]), v5 = _mm256_castsi256_ps(r[5]);
    __m256 v6 = _mm256_castsi256_ps(r[6]), v7 = _mm256_castsi256_ps(r[7]);
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    __m256 t4 = _mm256_unpacklo_ps(v4, v5), t5 = _mm256_unpackhi_ps(v4, v5);
    __m256 t6 = _mm256_unpacklo_ps(v6, v7), t7 = _mm256_unpackhi_ps(v6, v7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float *o = (float *)out; /* quad q of the 8 rows at out + 32 q */
    _mm256_store_ps(o + 0, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_store_ps(o + 8, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_store_ps(o + 16, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_store_ps(o + 24, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_store_ps(o + 32, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_store_ps(o + 40, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_store_ps(o + 48, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_store_ps(o + 56, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* Strip rows [0, nr) (nr <= 8; the rest zero) of groups [g0, g0 + ng): codes to codes
 * ([group][G / 4 quads][8 rows][4]), scale and min to sm ([group][8 scales, 8 mins]). */
static void pack_strip(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint32_t nr,
                       uint64_t g0, uint64_t ng, uint8_t *codes, float *sm)
{
    const __m256i lo = _mm256_set1_epi8(0x0F);
    for (uint64_t g = 0; g < ng; g++) {
        uint8_t *cg = codes + g * (uint64_t)p->G * TC;
        float *s = sm + g * 2 * TC;
        for (uint32_t t = 0; t < TC; t++) {
            float mn = 0.0f, sc = 0.0f;
            if (t < nr)
                fgq_read_ms(w + t * row_bytes + (g0 + g) * p->gbytes, p, &mn, &sc);
            s[t] = sc, s[TC + t] = mn;
        }
        for (uint32_t b = 0; b < p->G / 64; b++) {
            __m256i l[TC], h[TC];
            for (uint32_t t = 0; t < TC; t++) {
                if (t >= nr) {
                    l[t] = h[t] = _mm256_setzero_si256();
                    continue;
                }
                const uint8_t *src = w + t * row_bytes + (g0 + g) * p->gbytes + p->hdr + b * 32;
                __m256i v = _mm256_loadu_si256((const __m256i *)src);
                __m256i a = _mm256_and_si256(v, lo);
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
                l[t] = p->hi_first ? c : a;
                h[t] = p->hi_first ? a : c;
            }
            transpose8_store(l, cg + b * 64 * TC);           /* quads 0..7 of the block */
            transpose8_store(h, cg + b * 64 * TC + 32 * TC); /* quads 8..15 */
        }
    }
}

static inline __m256i bcast4(const int8_t *x)
{
    int32_t v;
    memcpy(&v, x, 4);
    return _mm256_set1_epi32(v);
}

/* What every tile of one k block shares: the activation scale's block (groups per block, and
 * the block and position in it of the k block's first group), computed once per k block (three
 * divisions a tile were 3% of it). */
typedef struct kblock {
    uint64_t g0, ng;        /* the k block's groups */
    uint64_t gpb, blk, in_blk;
    uint32_t G;
} kblock;

/* y tile rows x[0..3] (activation rows r0..r0+3 of a, rows >= rows duplicated and not stored)
 * times the strip's groups [0, kb->ng) (global groups kb->g0..): y[i * ldy + 0..cols) = (first:
 * from bias[0..cols), or 0 when bias is NULL) or += . */
static void tile(const fg_quant_act *a, uint64_t r0, uint32_t rows, const kblock *kb,
                 const uint8_t *codes, const float *sm, float *y, uint64_t ldy, uint32_t cols,
                 int first, const float *bias)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const uint64_t g0 = kb->g0, ng = kb->ng;
    const uint32_t G = kb->G;
    const int8_t *x[TR];
    const float *asc[TR], *qmn[TR];
    for (uint32_t r = 0; r < TR; r++) {
        uint64_t i = r0 + (r < rows ? r : rows - 1);
        x[r] = a->q + i * a->kp + g0 * G;
        asc[r] = a->scale + i * a->n_blocks;
        qmn[r] = a->qmin + i * a->n_groups + g0;
    }
    for (uint32_t r = 0; !first && r < rows; r++) /* y's tile, wanted at the end */
        _mm_prefetch((const char *)(y + (r0 + r) * ldy), _MM_HINT_T0);
    /* the float sums live in memory (L1): in registers beside the 12 integer ones gcc spilled
     * inside the quad loop; set with vector stores (a zero initializer became REP STOSQ) */
    float acc[TR * TC] __attribute__((aligned(32)));
    __m256 init = _mm256_setzero_ps();
    if (first && bias) {
        float b[TC] = {0};
        memcpy(b, bias, cols * 4);
        init = _mm256_loadu_ps(b);
    }
    for (uint32_t r = 0; r < TR; r++)
        _mm256_store_ps(acc + r * TC, init);
    uint64_t gpb = kb->gpb, blk = kb->blk, in_blk = kb->in_blk;
    for (uint64_t g = 0; g < ng; g++, in_blk++) {
        if (in_blk == gpb)
            blk++, in_blk = 0;
        const uint8_t *cg = codes + g * (uint64_t)G * TC;
        const int8_t *x0 = x[0] + g * G, *x1 = x[1] + g * G, *x2 = x[2] + g * G;
        const int8_t *x3 = x[3] + g * G;
        __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
        for (uint32_t q0 = 0; q0 < G / 4; q0 += 8) {
            __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
            for (uint32_t q = q0; q < q0 + 8; q++) { /* unrolled, gcc spilled every product */
                __m256i wv = _mm256_load_si256((const __m256i *)(cg + q * 32));
                s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(wv, bcast4(x0 + 4 * q)));
                s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(wv, bcast4(x1 + 4 * q)));
                s2 = _mm256_add_epi16(s2, _mm256_maddubs_epi16(wv, bcast4(x2 + 4 * q)));
                s3 = _mm256_add_epi16(s3, _mm256_maddubs_epi16(wv, bcast4(x3 + 4 * q)));
            }
            i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(s0, ones));
            i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(s1, ones));
            i2 = _mm256_add_epi32(i2, _mm256_madd_epi16(s2, ones));
            i3 = _mm256_add_epi32(i3, _mm256_madd_epi16(s3, ones));
        }
        const float *s = sm + g * 2 * TC;
        __m256 sw = _mm256_loadu_ps(s), mw = _mm256_loadu_ps(s + TC);
        __m256i iv[TR] = {i0, i1, i2, i3};
        for (uint32_t r = 0; r < TR; r++) {
            __m256 f = _mm256_load_ps(acc + r * TC);
            __m256 ws = _mm256_mul_ps(sw, _mm256_set1_ps(asc[r][blk]));
            f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv[r]), ws, f);
            f = _mm256_fmadd_ps(mw, _mm256_set1_ps(qmn[r][g]), f);
            _mm256_store_ps(acc + r * TC, f);
        }
    }
    __m256 f[TR] = {_mm256_load_ps(acc), _mm256_load_ps(acc + TC), _mm256_load_ps(acc + 2 * TC),
                    _mm256_load_ps(acc + 3 * TC)};
    for (uint32_t r = 0; r < rows; r++) {
        float *yr = y + (r0 + r) * ldy;
        if (cols == TC) {
            __m256 v = first ? f[r] : _mm256_add_ps(_mm256_loadu_ps(yr), f[r]);
            _mm256_storeu_ps(yr, v);
            continue;
        }
        float tmp[TC];
        _mm256_storeu_ps(tmp, f[r]);
        for (uint32_t c = 0; c < cols; c++)
            yr[c] = first ? tmp[c] : yr[c] + tmp[c];
    }
}

void fgq_avx2_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                         uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                         const float *bias, float *y, uint64_t ldy, void *panel,
                         size_t panel_bytes)
{
    const uint64_t ngw = row_bytes / p->gbytes;
    uint64_t kb = KB_COLS / p->G ? KB_COLS / p->G : 1;
    kb = kb < ngw ? kb : ngw; /* as quant_gemm.c's strip_bytes */
    /* a strip of one k block: codes G * 8 a group, 16 floats of scale and min a group */
    const uint64_t strip_bytes = kb * ((uint64_t)p->G * TC + 2 * TC * 4);
    uint64_t strips = panel_bytes / strip_bytes, gpb = a->block / p->G;
    for (uint64_t j0 = n0; j0 < n1; j0 += strips * TC) {
        uint64_t jn = n1 - j0 < strips * TC ? n1 - j0 : strips * TC, ns = (jn + TC - 1) / TC;
        for (uint64_t g0 = 0; g0 < ngw; g0 += kb) {
            uint64_t ng = ngw - g0 < kb ? ngw - g0 : kb;
            const kblock kbk = {.g0 = g0, .ng = ng, .gpb = gpb, .blk = g0 / gpb,
                                .in_blk = g0 % gpb, .G = p->G};
            uint8_t *codes = panel;
            float *sm = (float *)(codes + ns * ng * p->G * TC);
            for (uint64_t s = 0; s < ns; s++) {
                uint64_t r = j0 + s * TC;
                uint32_t nr = (uint32_t)(n1 - r < TC ? n1 - r : TC);
                pack_strip(p, w + r * row_bytes, row_bytes, nr, g0, ng,
                           codes + s * ng * p->G * TC, sm + s * ng * 2 * TC);
            }
            for (uint64_t ib = i0; ib < i1; ib += MC) { /* MC rows' block stays in L2 */
                uint64_t ie = i1 - ib < MC ? i1 : ib + MC;
                for (uint64_t s = 0; s < ns; s++) {
                    uint64_t r = j0 + s * TC;
                    uint32_t cols = (uint32_t)(n1 - r < TC ? n1 - r : TC);
                    for (uint64_t i = ib; i < ie; i += TR) {
                        uint32_t rows = (uint32_t)(ie - i < TR ? ie - i : TR);
                        tile(a, i, rows, &kbk, codes + s * ng * p->G * TC, sm + s * ng * 2 * TC,
                             y + r, ldy, cols, g0 == 0, bias ? bias + r : NULL);
                    }
                }
            }
        }
    }
}
