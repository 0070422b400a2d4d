/* gemm_q4p_kern512.h - the prefill's int8 GEMM on Q4 weights with zmm registers: the body of
 * the AVX512-VNNI panel kernel (gemm_q4p_vnni512.c), included once per build of it. The includer
 * defines FGQ_PANEL512_ENTRY (the function's name) and either FGQ_DPBUSD512_ASM (the 64-column
 * inner sequence in assembly with VPDPBUSD) or FGQ_DPBUSD512(acc, u, s) (acc + per int32 lane
 * the 4 products of unsigned bytes u and signed bytes s, in intrinsics: the emulation in
 * tests/quant_q4p_emul.c, which runs this body on AVX-512 CPUs without VNNI, and
 * tests/quant_q4p_emul2.c, on AVX2 alone through tests/quant_zmm_emul.h: an intrinsic added here
 * must be added there).
 *
 * The AVX2 panel kernel (gemm_q4p_avx2.c: its header has the why) with 32 weight rows a strip
 * and VPDPBUSD: per quad of k (4 columns) the panel holds the 32 rows' 4 codes as two zmm (one
 * load each), and each activation row's 4 bytes, broadcast, meet them in two VPDPBUSD, whose
 * int32 sums need no 16-bit stage (VPMADDUBSW + VPADDW + VPMADDWD in the AVX2 kernel) and do not
 * saturate. A tile is TR = 4 activation rows x 32 weight rows: 8 independent accumulator chains,
 * 8 VPDPBUSD per 2 + 4 loads. The accumulators and float sums are named variables, not arrays:
 * as arrays gcc kept them in memory (a REP STOSB to zero them every group was 15% of the time).
 * Measured (bench_gemm_prefill, one thread, M 1024, opt-1.3b's mix; AMD EPYC Zen 5): 580
 * GFLOP/s against the AVX2 kernel's 265 and oneDNN's u8s8s32 GEMM's 750-770 (no scales, no
 * groups). Smaller k blocks (512 or 256 columns, the strip in L1) were slower (300, 260 in an
 * earlier form of this kernel). The float terms per group are the AVX2 kernel's, op for op (y =
 * sum over groups of a_i * s_g * I + m_g * qmin_i, FMA in binary32, from the bias at the first k
 * block), so with the same k blocks the outputs are the AVX2 kernel's bits.
 * Activation scales: one a group (the engine's layout) only; the caller sends wider scale blocks
 * to the AVX2 kernel.
 * Loops: weight rows in slabs that fit the panel, k in blocks of KB_COLS columns; within a block,
 * activation rows in blocks of MC meet each strip tile by tile; y stored at the first k block and
 * added to after.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"

#define TR 4                        /* activation rows a tile */
#define TC 32                       /* weight rows a tile (a strip) */
#ifndef KB_COLS
#define KB_COLS FG_QUANT_PANEL_COLS /* columns a k block: the AVX2 kernel's, for its bits */
#endif
#define MC 64                       /* activation rows a pass over the strips */
/* pack_strip prefetches each row's group this many groups ahead: the 32 rows of a strip are 32
 * strided streams through weights fresh from DRAM (the pager's pool), more than the hardware
 * prefetchers follow, and the loads of the codes stalled (opt-1.3b 4-bit prefill, 8 x 128, perf:
 * pack_strip 3.6% of the samples, 44% of them on the first use of a code load). */
#define PF_GROUPS 4

/* Strip rows [0, nr) (nr <= 32; the rest zero) of groups [g0, g0 + ng): codes to codes
 * ([group][G / 4 quads][32 rows][4]), scale and min to sm ([group][32 scales, 32 mins]). */
static void pack_strip(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint32_t nr,
                       uint64_t g0, uint64_t ng, uint8_t *codes, float *sm)
{
    const __m256i lo = _mm256_set1_epi8(0x0F);
    for (uint64_t g = 0; g < ng; g++) {
        uint8_t *cg = codes + g * (uint64_t)p->G * TC;
        float *s = sm + g * 2 * TC;
        for (uint32_t t = 0; t < TC; t++) {
            float mn = 0.0f, sc = 0.0f;
            if (t < nr) {
                const uint8_t *src = w + t * row_bytes + (g0 + g) * p->gbytes;
                if (p->f16scale) /* VCVTPH2PS: fgq_h2f's bits without its branches */
                    mn = qp_widen1(0, fg_le16(src)), sc = qp_widen1(0, fg_le16(src + 2));
                else
                    fgq_read_ms(src, p, &mn, &sc);
                if (g + PF_GROUPS < ng) /* see PF_GROUPS */
                    _mm_prefetch((const char *)src + PF_GROUPS * p->gbytes, _MM_HINT_T0);
            }
            s[t] = sc, s[TC + t] = mn;
        }
        for (uint32_t b = 0; b < p->G / 64; b++)
            for (uint32_t r8 = 0; r8 < TC; r8 += 8) {
                __m256i l[8], h[8];
                for (uint32_t t = 0; t < 8; t++) {
                    if (r8 + t >= nr) {
                        l[t] = h[t] = _mm256_setzero_si256();
                        continue;
                    }
                    const uint8_t *src = w + (r8 + t) * row_bytes + (g0 + g) * p->gbytes +
                                         p->hdr + b * 32;
                    __m256i v = _mm256_loadu_si256((const __m256i *)src);
                    __m256i a = _mm256_and_si256(v, lo);
                    __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
                    l[t] = p->hi_first ? c : a;
                    h[t] = p->hi_first ? a : c;
                }
                uint8_t *o = cg + b * 64 * TC + r8 * 4;
                qp_transpose8_store(l, o, 32);           /* quads 0..7 of the block */
                qp_transpose8_store(h, o + 8 * 128, 32); /* quads 8..15 */
            }
    }
}

#ifdef FGQ_DPBUSD512_ASM
/* One quad q (4 columns) of dot64: 32 weight rows x 4 codes (two loads) times each activation
 * row's 4 bytes (broadcast), added to the int32 sums a0..a7 (two a row). */
#define QUAD512(q)                                                                                \
    "vmovdqu64 " #q "*128(%[cg]), %%zmm16\n\t"                                                    \
    "vmovdqu64 " #q "*128+64(%[cg]), %%zmm17\n\t"                                                 \
    "vpbroadcastd " #q "*4(%[x0]), %%zmm18\n\t"                                                   \
    "vpbroadcastd " #q "*4(%[x1]), %%zmm19\n\t"                                                   \
    "vpbroadcastd " #q "*4(%[x2]), %%zmm20\n\t"                                                   \
    "vpbroadcastd " #q "*4(%[x3]), %%zmm21\n\t"                                                   \
    "vpdpbusd %%zmm18, %%zmm16, %[a0]\n\tvpdpbusd %%zmm18, %%zmm17, %[a1]\n\t"                    \
    "vpdpbusd %%zmm19, %%zmm16, %[a2]\n\tvpdpbusd %%zmm19, %%zmm17, %[a3]\n\t"                    \
    "vpdpbusd %%zmm20, %%zmm16, %[a4]\n\tvpdpbusd %%zmm20, %%zmm17, %[a5]\n\t"                    \
    "vpdpbusd %%zmm21, %%zmm16, %[a6]\n\tvpdpbusd %%zmm21, %%zmm17, %[a7]\n\t"

/* 64 columns (16 quads of 128 code bytes at cg) against activation rows x0..x3 (64 bytes each),
 * added to *a0..*a7. In assembly: from intrinsics gcc rotated the accumulators through register
 * copies every quad (the AVX2 kernel's dot64 has the same story): 431 GFLOP/s against 581 in
 * one interleaved run (bench_gemm_prefill --m 1024, opt-1.3b's mix). */
static inline __attribute__((always_inline)) void dot64(const uint8_t *cg, const int8_t *x0,
                                                        const int8_t *x1, const int8_t *x2,
                                                        const int8_t *x3, __m512i *a0,
                                                        __m512i *a1, __m512i *a2, __m512i *a3,
                                                        __m512i *a4, __m512i *a5, __m512i *a6,
                                                        __m512i *a7)
{
    __asm__(QUAD512(0) QUAD512(1) QUAD512(2) QUAD512(3) QUAD512(4) QUAD512(5) QUAD512(6)
            QUAD512(7) QUAD512(8) QUAD512(9) QUAD512(10) QUAD512(11) QUAD512(12) QUAD512(13)
            QUAD512(14) QUAD512(15)
            : [a0] "+v"(*a0), [a1] "+v"(*a1), [a2] "+v"(*a2), [a3] "+v"(*a3), [a4] "+v"(*a4),
              [a5] "+v"(*a5), [a6] "+v"(*a6), [a7] "+v"(*a7)
            : [cg] "r"(cg), [x0] "r"(x0), [x1] "r"(x1), [x2] "r"(x2), [x3] "r"(x3),
              "m"(*(const uint8_t(*)[64 * TC])cg), "m"(*(const int8_t(*)[64])x0),
              "m"(*(const int8_t(*)[64])x1), "m"(*(const int8_t(*)[64])x2),
              "m"(*(const int8_t(*)[64])x3)
            : "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21");
}
#else
static inline __m512i bcast4(const int8_t *x)
{
    int32_t v;
    memcpy(&v, x, 4);
    return _mm512_set1_epi32(v);
}

/* dot64 in intrinsics (the emulated build's: FGQ_DPBUSD512 is a function there). */
static inline __attribute__((always_inline)) void dot64(const uint8_t *cg, const int8_t *x0,
                                                        const int8_t *x1, const int8_t *x2,
                                                        const int8_t *x3, __m512i *a0,
                                                        __m512i *a1, __m512i *a2, __m512i *a3,
                                                        __m512i *a4, __m512i *a5, __m512i *a6,
                                                        __m512i *a7)
{
    __m512i *acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (uint32_t q = 0; q < 16; q++) {
        __m512i c0 = _mm512_loadu_si512(cg + q * 128), c1 = _mm512_loadu_si512(cg + q * 128 + 64);
        __m512i b = bcast4(x0 + 4 * q);
        *acc[0] = FGQ_DPBUSD512(*acc[0], c0, b), *acc[1] = FGQ_DPBUSD512(*acc[1], c1, b);
        b = bcast4(x1 + 4 * q);
        *acc[2] = FGQ_DPBUSD512(*acc[2], c0, b), *acc[3] = FGQ_DPBUSD512(*acc[3], c1, b);
        b = bcast4(x2 + 4 * q);
        *acc[4] = FGQ_DPBUSD512(*acc[4], c0, b), *acc[5] = FGQ_DPBUSD512(*acc[5], c1, b);
        b = bcast4(x3 + 4 * q);
        *acc[6] = FGQ_DPBUSD512(*acc[6], c0, b), *acc[7] = FGQ_DPBUSD512(*acc[7], c1, b);
    }
}
#endif

/* What a tile needs of one k block: its groups (g0.., ng of them) and G. */
typedef struct kblock512 {
    uint64_t g0, ng;
    uint32_t G;
} kblock512;

/* The float terms of group g for activation row r (sums a_r0, a_r1 of the 32 weight rows):
 * t += I * (s_w * a_r) + m_w * qmin_r, as the AVX2 kernel. */
#define FTERMS(r)                                                                                 \
    do {                                                                                          \
        __m512 as = _mm512_set1_ps(s##r[g]), qm = _mm512_set1_ps(q##r[g]);                       \
        t##r##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##0), _mm512_mul_ps(sw0, as), t##r##0);  \
        t##r##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##1), _mm512_mul_ps(sw1, as), t##r##1);  \
        t##r##0 = _mm512_fmadd_ps(mw0, qm, t##r##0);                                              \
        t##r##1 = _mm512_fmadd_ps(mw1, qm, t##r##1);                                              \
    } while (0)

/* y row yr's 32 columns (those in masks k0, k1) = v0, v1 (+ bias b at the first k block) or
 * += v0, v1. */
static inline void store_row(float *yr, __m512 v0, __m512 v1, __mmask16 k0, __mmask16 k1,
                             int first, const float *b)
{
    if (first && b) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, b));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, b + 16));
    } else if (!first) {
        v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, yr), v0);
        v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, yr + 16), v1);
    }
    _mm512_mask_storeu_ps(yr, k0, v0);
    _mm512_mask_storeu_ps(yr + 16, k1, v1);
}

/* Tile rows r0..r0+3 of a (rows past `rows` duplicate the last and are not stored) times the
 * strip's groups: y[i * ldy + 0..cols) = (first: from bias[0..cols), or 0 when bias is NULL)
 * or += the terms (one activation scale a group). */
static void tile(const fg_quant_act *a, uint64_t r0, uint32_t rows, const kblock512 *kb,
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
    /* one scale a group: the scale of group g0 + g is the row's block g0 + g */
    const uint64_t nb = a->n_blocks;
    const float *s0 = a->scale + ri[0] * nb + g0, *s1 = a->scale + ri[1] * nb + g0;
    const float *s2 = a->scale + ri[2] * nb + g0, *s3 = a->scale + ri[3] * nb + g0;
    const float *q0 = a->qmin + ri[0] * a->n_groups + g0, *q1 = a->qmin + ri[1] * a->n_groups + g0;
    const float *q2 = a->qmin + ri[2] * a->n_groups + g0, *q3 = a->qmin + ri[3] * a->n_groups + g0;
    __m512 t00 = _mm512_setzero_ps(), t01 = t00, t10 = t00, t11 = t00, t20 = t00, t21 = t00;
    __m512 t30 = t00, t31 = t00;
    for (uint64_t g = 0; g < ng; g++) {
        __m512i i00 = _mm512_setzero_si512(), i01 = i00, i10 = i00, i11 = i00, i20 = i00;
        __m512i i21 = i00, i30 = i00, i31 = i00;
        const uint8_t *cg = codes + g * (uint64_t)G * TC;
        for (uint32_t c = 0; c < G; c += 64)
            dot64(cg + c * TC, x0 + g * G + c, x1 + g * G + c, x2 + g * G + c, x3 + g * G + c,
                  &i00, &i01, &i10, &i11, &i20, &i21, &i30, &i31);
        const float *smg = sm + g * 2 * TC;
        __m512 sw0 = _mm512_loadu_ps(smg), sw1 = _mm512_loadu_ps(smg + 16);
        __m512 mw0 = _mm512_loadu_ps(smg + TC), mw1 = _mm512_loadu_ps(smg + TC + 16);
        FTERMS(0);
        FTERMS(1);
        FTERMS(2);
        FTERMS(3);
    }
    __mmask16 k0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    __mmask16 k1 = cols >= 32 ? 0xFFFF : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
    store_row(y + r0 * ldy, t00, t01, k0, k1, first, bias);
    if (rows > 1)
        store_row(y + (r0 + 1) * ldy, t10, t11, k0, k1, first, bias);
    if (rows > 2)
        store_row(y + (r0 + 2) * ldy, t20, t21, k0, k1, first, bias);
    if (rows > 3)
        store_row(y + (r0 + 3) * ldy, t30, t31, k0, k1, first, bias);
}

void FGQ_PANEL512_ENTRY(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                        uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                        const float *bias, float *y, uint64_t ldy, void *panel,
                        size_t panel_bytes)
{
    const uint64_t ngw = row_bytes / p->gbytes;
    uint64_t kb = KB_COLS / p->G ? KB_COLS / p->G : 1;
    kb = kb < ngw ? kb : ngw;
    const uint64_t strip_bytes = kb * ((uint64_t)p->G * TC + 2 * TC * 4);
    uint64_t strips = panel_bytes / strip_bytes;
    for (uint64_t j0 = n0; j0 < n1; j0 += strips * TC) {
        uint64_t jn = n1 - j0 < strips * TC ? n1 - j0 : strips * TC, ns = (jn + TC - 1) / TC;
        for (uint64_t g0 = 0; g0 < ngw; g0 += kb) {
            uint64_t ng = ngw - g0 < kb ? ngw - g0 : kb;
            const kblock512 kbk = {.g0 = g0, .ng = ng, .G = p->G};
            uint8_t *codes = panel;
            float *sm = (float *)(codes + ns * ng * p->G * TC);
            for (uint64_t s = 0; s < ns; s++) {
                uint64_t r = j0 + s * TC;
                uint32_t nr = (uint32_t)(n1 - r < TC ? n1 - r : TC);
                pack_strip(p, w + r * row_bytes, row_bytes, nr, g0, ng,
                           codes + s * ng * p->G * TC, sm + s * ng * 2 * TC);
            }
            for (uint64_t ib = i0; ib < i1; ib += MC) {
                uint64_t ie = i1 - ib < MC ? i1 : ib + MC;
                for (uint64_t s = 0; s < ns; s++) {
                    uint64_t r = j0 + s * TC;
                    uint32_t cols = (uint32_t)(n1 - r < TC ? n1 - r : TC);
                    for (uint64_t i = ib; i < ie; i += TR)
                        tile(a, i, (uint32_t)(ie - i < TR ? ie - i : TR), &kbk,
                             codes + s * ng * p->G * TC, sm + s * ng * 2 * TC, y + r, ldy, cols,
                             g0 == 0, bias ? bias + r : NULL);
                }
            }
        }
    }
}

#undef TR
#undef TC
#undef KB_COLS
#undef MC
#undef PF_GROUPS
