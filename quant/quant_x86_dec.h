/* quant_x86_dec.h - the group decoder of quant_avx2.c and quant_avx512.c, written once.
 *
 * Both files decode a group the same way: read the stored min and scale (F16 through VCVTPH2PS,
 * bit-identical to fgq_h2f, or F32), then blocks of 32 codes brought into t order as two 16-byte
 * vectors (Q4 nibbles split and interleaved), each turned into 16 values m + code * s (VMULPS then
 * VADDPS, no FMA, as quant_ref.c rounds), stored as F32 or as saturated F16; the group's tail goes
 * to the scalar reference. Only the vector width differs, so each file defines, before including
 * this header:
 *   QX_V                    its float vector type (__m256 or __m512)
 *   QX_SET1(f)              broadcast a float
 *   QX_BCAST(m128)          broadcast lane 0 of an __m128
 *   QX_STORE16_F32(y, c, m, s)  16 codes (an __m128i) -> 16 floats at y
 *   QX_STORE16_F16(y, c, m, s)  the same as saturated F16 at y
 * and gets static qx_dec_f32 / qx_dec_f16 (fgq_kernels.dec_f32 / dec_f16).
 */
#ifndef FG_QUANT_X86_DEC_H
#define FG_QUANT_X86_DEC_H

#include <immintrin.h>
#include <string.h>

#include "quant_int.h"

/* 32 codes of a block starting at t = i, as two 16-byte vectors in t order. */
static inline void qx_load32(const uint8_t *codes, uint32_t i, const fgq_params *p, __m128i *c0,
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

/* Stored min and scale broadcast. */
static inline void qx_read_ms(const uint8_t *grp, const fgq_params *p, QX_V *m, QX_V *s)
{
    if (p->f16scale) {
        int w;
        memcpy(&w, grp, 4);
        __m128 ms = _mm_cvtph_ps(_mm_cvtsi32_si128(w));
        *m = QX_BCAST(ms);
        *s = QX_BCAST(_mm_shuffle_ps(ms, ms, 1));
    } else {
        *m = QX_SET1(fgq_bitsf(fg_le32(grp)));
        *s = QX_SET1(fgq_bitsf(fg_le32(grp + 4)));
    }
}

static inline void qx_group_f32(const uint8_t *grp, uint32_t n, const fgq_params *p, float *y)
{
    QX_V m, s;
    qx_read_ms(grp, p, &m, &s);
    const uint8_t *codes = grp + p->hdr;
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i c0, c1;
        qx_load32(codes, i, p, &c0, &c1);
        QX_STORE16_F32(y + i, c0, m, s);
        QX_STORE16_F32(y + i + 16, c1, m, s);
    }
    if (i < n)
        fgq_ref_dec_f32(grp, n, p, y, i);
}

static inline void qx_group_f16(const uint8_t *grp, uint32_t n, const fgq_params *p, uint16_t *y)
{
    QX_V m, s;
    qx_read_ms(grp, p, &m, &s);
    const uint8_t *codes = grp + p->hdr;
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i c0, c1;
        qx_load32(codes, i, p, &c0, &c1);
        QX_STORE16_F16(y + i, c0, m, s);
        QX_STORE16_F16(y + i + 16, c1, m, s);
    }
    if (i < n)
        fgq_ref_dec_f16(grp, n, p, y, i);
}

static void qx_dec_f32(const uint8_t *grp, uint64_t n, const fgq_params *p, float *y)
{
    for (; n >= p->G; n -= p->G, grp += p->gbytes, y += p->G)
        qx_group_f32(grp, p->G, p, y);
    if (n)
        qx_group_f32(grp, (uint32_t)n, p, y);
}

static void qx_dec_f16(const uint8_t *grp, uint64_t n, const fgq_params *p, uint16_t *y)
{
    for (; n >= p->G; n -= p->G, grp += p->gbytes, y += p->G)
        qx_group_f16(grp, p->G, p, y);
    if (n)
        qx_group_f16(grp, (uint32_t)n, p, y);
}

#endif
