/* quant_x86_pack.h - what the prefill kernels' panel packers share, written once: the 8 x 8
 * transpose of 32-bit lanes, the widening of 16-bit weights (F16 through VCVTPH2PS, BF16 by a
 * 16-bit shift: bit-identical to fgq_h2f and the BF16 rule), the F32 panel packer of the
 * 16-bit-weight GEMMs and their edge tiles' store. Included by gemm16_avx2.c, gemm16_avx512.c,
 * gemm16_bf16_kern.h, gemm_q4p_avx2.c and gemm_q4p_kern512.h; static inline, so each compiles
 * it with its own ISA flags (all have AVX2 and F16C).
 */
#ifndef FG_QUANT_X86_PACK_H
#define FG_QUANT_X86_PACK_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_int.h"

/* o[t] = lane t of v[0..7] (an 8 x 8 transpose of 32-bit lanes). */
static inline void qp_transpose8(const __m256 v[8], __m256 o[8])
{
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    o[0] = _mm256_permute2f128_ps(s0, s4, 0x20), o[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    o[2] = _mm256_permute2f128_ps(s2, s6, 0x20), o[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    o[4] = _mm256_permute2f128_ps(s0, s4, 0x31), o[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    o[6] = _mm256_permute2f128_ps(s2, s6, 0x31), o[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* r[t] (t < 8): 8 quads (32 bytes) of row t; quad q of the 8 rows to out + q * stride floats. */
static inline void qp_transpose8_store(const __m256i r[8], uint8_t *out, size_t stride)
{
    __m256 v[8], o[8];
    for (int t = 0; t < 8; t++)
        v[t] = _mm256_castsi256_ps(r[t]);
    qp_transpose8(v, o);
    float *f = (float *)out;
    for (int t = 0; t < 8; t++)
        _mm256_storeu_ps(f + t * stride, o[t]);
}

/* 8 16-bit weights as f32. */
static inline __m256 qp_widen8(int bf16, const uint16_t *s)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

static inline float qp_widen1(int bf16, uint16_t h)
{
    return bf16 ? fgq_bitsf((uint32_t)h << 16) : _cvtsh_ss(h);
}

/* Rows [0, nr) of w (nr <= nc, the rest zero), columns [0, kc), widened into the F32 panel
 * [nc / np][kc][np] (np a multiple of 8; panel 32-byte aligned). */
static inline void qp_pack_w16(int bf16, const uint16_t *w, uint64_t ldw, uint64_t nr,
                               uint64_t nc, uint64_t kc, uint64_t np, float *panel)
{
    for (uint64_t j = 0; j < nc; j += np) {
        float *d = panel + j * kc;
        for (uint64_t r = 0; r < np; r += 8) {
            uint64_t kk = 0;
            if (j + r + 8 <= nr) {
                const uint16_t *s = w + (j + r) * ldw;
                for (; kk + 8 <= kc; kk += 8) {
                    __m256 v[8], o[8];
                    for (int t = 0; t < 8; t++)
                        v[t] = qp_widen8(bf16, s + t * ldw + kk);
                    qp_transpose8(v, o);
                    for (int t = 0; t < 8; t++)
                        _mm256_store_ps(d + (kk + t) * np + r, o[t]);
                }
            }
            for (; kk < kc; kk++)
                for (uint64_t t = 0; t < 8; t++) {
                    uint64_t row = j + r + t;
                    d[kk * np + r + t] = row < nr ? qp_widen1(bf16, w[row * ldw + kk]) : 0.0f;
                }
        }
    }
}

/* An edge tile's rows x cols outputs (the kernel wrote them to tile, nr floats a row) into y:
 * stored when first, else added (the 16-bit GEMMs' k blocks after the first). */
static inline void qp_tile_out(float *y, uint64_t ldy, const float *tile, uint64_t nr,
                               uint64_t rows, uint64_t cols, int first)
{
    for (uint64_t i = 0; i < rows; i++)
        for (uint64_t q = 0; q < cols; q++)
            y[i * ldy + q] = first ? tile[i * nr + q] : y[i * ldy + q] + tile[i * nr + q];
}

#endif
