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
 * pairs 30480, under 2^15). A tile is 4 activation rows x 8 weight rows. Per 64 columns (dot64,
 * in assembly): 16 x (1 load, 4 broadcasts, 4 VPMADDUBSW, 4 VPADDW), 8 VPMADDWD and 8 VPADDD
 * into 4 int32 sums; per group, 4 conversions, the scales (weight x activation) and 8 FMA
 * (the integer sums, the weights' min term). With wider activation-scale blocks, the block's
 * scale is applied once per block and the min term is a second pass. About 12 multiply-adds an
 * instruction where the row kernel has 6. The ceiling of the 64-column sequence alone here
 * (Zen 3 at 2.95 GHz, data in L1): 1.57 VPMADDUBSW a cycle, 296 GFLOP/s a thread; the kernel
 * reaches 0.5-0.55 of it (m 1024, one thread: 135-170 GFLOP/s with a scale a group).
 * Codes meet the activations in their Q4 order (quant.h: per 64 columns the 32 evens, then the
 * 32 odds), which for a 64-column block is the 32 low nibbles of its 32 code bytes, then the 32
 * high ones (hi_first swaps them): so a group of G >= 64 is G consecutive activation bytes.
 * The float terms follow quant.h, y = sum over groups of a_i * s_g * I + m_g * qmin_i, with a_i
 * (constant over an activation-scale block) taken out of each block's sum (FMA in binary32).
 * Loops: weight rows in slabs that fit the panel, k in blocks of KB_COLS columns; within a block,
 * activation rows in blocks of MC (in L2) meet each strip (16 KiB of codes, in L1) tile by tile;
 * y is stored at the first k block and added to after.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"

#define TR 4            /* activation rows a tile */
#define TC 8            /* weight rows a tile (a strip) */
#define KB_COLS FG_QUANT_PANEL_COLS /* columns a k block */
#define MC 128          /* activation rows a pass over the strips (128 KiB of codes at 1024) */

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
            qp_transpose8_store(l, cg + b * 64 * TC, 8);           /* quads 0..7 of the block */
            qp_transpose8_store(h, cg + b * 64 * TC + 32 * TC, 8); /* quads 8..15 */
        }
    }
}

/* What every tile of one k block shares: the activation scale's block (groups per block, and
 * the block and position in it of the k block's first group), computed once per k block (three
 * divisions a tile were 3% of it). */
typedef struct kblock {
    uint64_t g0, ng;        /* the k block's groups */
    uint64_t gpb, blk, in_blk;
    uint32_t G;
} kblock;

/* One quad q (4 columns) of the 64 in dot64: 8 weight rows x 4 codes (one load) times each
 * activation row's 4 bytes (broadcast), the 16-bit pair sums added to s0..s3 (ymm0..3). */
#define QUAD(q)                                                                                   \
    "vmovdqa " #q "*32(%[cg]), %%ymm8\n\t"                                                        \
    "vpbroadcastd " #q "*4(%[x0]), %%ymm9\n\t"                                                    \
    "vpmaddubsw %%ymm9, %%ymm8, %%ymm9\n\t"                                                       \
    "vpaddw %%ymm9, %%ymm0, %%ymm0\n\t"                                                           \
    "vpbroadcastd " #q "*4(%[x1]), %%ymm9\n\t"                                                    \
    "vpmaddubsw %%ymm9, %%ymm8, %%ymm9\n\t"                                                       \
    "vpaddw %%ymm9, %%ymm1, %%ymm1\n\t"                                                           \
    "vpbroadcastd " #q "*4(%[x2]), %%ymm9\n\t"                                                    \
    "vpmaddubsw %%ymm9, %%ymm8, %%ymm9\n\t"                                                       \
    "vpaddw %%ymm9, %%ymm2, %%ymm2\n\t"                                                           \
    "vpbroadcastd " #q "*4(%[x3]), %%ymm9\n\t"                                                    \
    "vpmaddubsw %%ymm9, %%ymm8, %%ymm9\n\t"                                                       \
    "vpaddw %%ymm9, %%ymm3, %%ymm3\n\t"
#define ZERO16 "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvpxor %%ymm1, %%ymm1, %%ymm1\n\t"               \
               "vpxor %%ymm2, %%ymm2, %%ymm2\n\tvpxor %%ymm3, %%ymm3, %%ymm3\n\t"
/* the 16-bit sums of 8 quads widened (pairs added) into the int32 sums */
#define WIDEN                                                                                     \
    "vpmaddwd %[ones], %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %[i0], %[i0]\n\t"                         \
    "vpmaddwd %[ones], %%ymm1, %%ymm1\n\tvpaddd %%ymm1, %[i1], %[i1]\n\t"                         \
    "vpmaddwd %[ones], %%ymm2, %%ymm2\n\tvpaddd %%ymm2, %[i2], %[i2]\n\t"                         \
    "vpmaddwd %[ones], %%ymm3, %%ymm3\n\tvpaddd %%ymm3, %[i3], %[i3]\n\t"

/* 64 columns of one strip (cg: 16 quads of 8 rows x 4 codes) against activation rows x0..x3
 * (64 bytes each), added to the int32 sums i0..i3. In assembly: from the same sequence in
 * intrinsics gcc made a loop with index arithmetic and register copies, 22 instructions a quad
 * for 13, and the kernel ran at 0.75-0.85 of this. Inlined always: as a call its sums went
 * through memory. */
static inline __attribute__((always_inline)) void dot64(const uint8_t *cg, const int8_t *x0,
                                                        const int8_t *x1, const int8_t *x2,
                                                        const int8_t *x3, __m256i *i0,
                                                        __m256i *i1, __m256i *i2, __m256i *i3)
{
    static const int16_t ones[16] __attribute__((aligned(32))) = {1, 1, 1, 1, 1, 1, 1, 1,
                                                                   1, 1, 1, 1, 1, 1, 1, 1};
    __asm__(ZERO16 QUAD(0) QUAD(1) QUAD(2) QUAD(3) QUAD(4) QUAD(5) QUAD(6) QUAD(7) WIDEN
            ZERO16 QUAD(8) QUAD(9) QUAD(10) QUAD(11) QUAD(12) QUAD(13) QUAD(14) QUAD(15) WIDEN
            : [i0] "+x"(*i0), [i1] "+x"(*i1), [i2] "+x"(*i2), [i3] "+x"(*i3)
            : [cg] "r"(cg), [x0] "r"(x0), [x1] "r"(x1), [x2] "r"(x2), [x3] "r"(x3),
              [ones] "m"(ones), "m"(*(const uint8_t(*)[64 * TC])cg),
              "m"(*(const int8_t(*)[64])x0), "m"(*(const int8_t(*)[64])x1),
              "m"(*(const int8_t(*)[64])x2), "m"(*(const int8_t(*)[64])x3)
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm8", "xmm9");
}

/* Group g of the strip (codes at cg, G columns) against activation rows x0..x3 (at column 0
 * of the k block): the int32 sums of each row's 8 weight rows, from zero. */
static inline __attribute__((always_inline)) void group_dot(const uint8_t *cg, uint64_t g,
                                                            uint32_t G, const int8_t *x0,
                                                            const int8_t *x1, const int8_t *x2,
                                                            const int8_t *x3, __m256i i[TR])
{
    i[0] = i[1] = i[2] = i[3] = _mm256_setzero_si256();
    for (uint32_t c = 0; c < G; c += 64)
        dot64(cg + (g * G + c) * TC, x0 + g * G + c, x1 + g * G + c, x2 + g * G + c,
              x3 + g * G + c, &i[0], &i[1], &i[2], &i[3]);
}

/* y tile rows x[0..3] (activation rows r0..r0+3 of a, rows >= rows duplicated and not stored)
 * times the strip's groups [0, kb->ng) (global groups kb->g0..): y[i * ldy + 0..cols) = (first:
 * from bias[0..cols), or 0 when bias is NULL) or += . With one activation scale a group (what
 * the engine quantizes), each group's terms in one pass; with wider scale blocks, the integer
 * sums times the weight scales are summed over each block's groups and scaled once, and the
 * weights' min term (min times the activations' group sum) is a second pass. */
static void tile(const fg_quant_act *a, uint64_t r0, uint32_t rows, const kblock *kb,
                 const uint8_t *codes, const float *sm, float *y, uint64_t ldy, uint32_t cols,
                 int first, const float *bias)
{
    const uint64_t g0 = kb->g0, ng = kb->ng;
    const uint32_t G = kb->G;
    uint64_t ri[TR];
    for (uint32_t r = 0; r < TR; r++)
        ri[r] = r0 + (r < rows ? r : rows - 1);
    const int8_t *x0 = a->q + ri[0] * a->kp + g0 * G, *x1 = a->q + ri[1] * a->kp + g0 * G;
    const int8_t *x2 = a->q + ri[2] * a->kp + g0 * G, *x3 = a->q + ri[3] * a->kp + g0 * G;
    for (uint32_t r = 0; !first && r < rows; r++) /* y's tile, wanted at the end */
        _mm_prefetch((const char *)(y + (r0 + r) * ldy), _MM_HINT_T0);
    __m256 t0 = _mm256_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
    const float *q0 = a->qmin + ri[0] * a->n_groups + g0, *q1 = a->qmin + ri[1] * a->n_groups + g0;
    const float *q2 = a->qmin + ri[2] * a->n_groups + g0, *q3 = a->qmin + ri[3] * a->n_groups + g0;
    if (kb->gpb == 1) { /* a scale a group (the engine's choice): one pass, all terms */
        const float *s0 = a->scale + ri[0] * a->n_blocks + kb->blk;
        const float *s1 = a->scale + ri[1] * a->n_blocks + kb->blk;
        const float *s2 = a->scale + ri[2] * a->n_blocks + kb->blk;
        const float *s3 = a->scale + ri[3] * a->n_blocks + kb->blk;
        for (uint64_t g = 0; g < ng; g++) {
            __m256i i[TR];
            group_dot(codes, g, G, x0, x1, x2, x3, i);
            const float *smg = sm + g * 2 * TC;
            __m256 sw = _mm256_loadu_ps(smg), mw = _mm256_loadu_ps(smg + TC);
            __m256 w0 = _mm256_mul_ps(sw, _mm256_broadcast_ss(s0 + g));
            __m256 w1 = _mm256_mul_ps(sw, _mm256_broadcast_ss(s1 + g));
            __m256 w2 = _mm256_mul_ps(sw, _mm256_broadcast_ss(s2 + g));
            __m256 w3 = _mm256_mul_ps(sw, _mm256_broadcast_ss(s3 + g));
            t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[0]), w0, t0);
            t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[1]), w1, t1);
            t2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[2]), w2, t2);
            t3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[3]), w3, t3);
            t0 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q0 + g), t0);
            t1 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q1 + g), t1);
            t2 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q2 + g), t2);
            t3 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q3 + g), t3);
        }
    } else { /* wider scale blocks: each block's sum scaled once, then the min term */
        uint64_t blk = kb->blk, in_blk = kb->in_blk;
        for (uint64_t g = 0; g < ng; blk++, in_blk = 0) { /* a run of groups in block blk */
            uint64_t ge = ng - g < kb->gpb - in_blk ? ng : g + (kb->gpb - in_blk);
            __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
            for (; g < ge; g++) {
                __m256i i[TR];
                group_dot(codes, g, G, x0, x1, x2, x3, i);
                __m256 sw = _mm256_loadu_ps(sm + g * 2 * TC);
                f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[0]), sw, f0);
                f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[1]), sw, f1);
                f2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[2]), sw, f2);
                f3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[3]), sw, f3);
            }
            t0 = _mm256_fmadd_ps(f0, _mm256_set1_ps(a->scale[ri[0] * a->n_blocks + blk]), t0);
            t1 = _mm256_fmadd_ps(f1, _mm256_set1_ps(a->scale[ri[1] * a->n_blocks + blk]), t1);
            t2 = _mm256_fmadd_ps(f2, _mm256_set1_ps(a->scale[ri[2] * a->n_blocks + blk]), t2);
            t3 = _mm256_fmadd_ps(f3, _mm256_set1_ps(a->scale[ri[3] * a->n_blocks + blk]), t3);
        }
        for (uint64_t g = 0; g < ng; g++) {
            __m256 mw = _mm256_loadu_ps(sm + g * 2 * TC + TC);
            t0 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q0 + g), t0);
            t1 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q1 + g), t1);
            t2 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q2 + g), t2);
            t3 = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(q3 + g), t3);
        }
    }
    if (first && bias) {
        float b[TC] = {0};
        memcpy(b, bias, cols * 4);
        __m256 bv = _mm256_loadu_ps(b);
        t0 = _mm256_add_ps(t0, bv), t1 = _mm256_add_ps(t1, bv);
        t2 = _mm256_add_ps(t2, bv), t3 = _mm256_add_ps(t3, bv);
    }
    __m256 f[TR] = {t0, t1, t2, t3};
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
