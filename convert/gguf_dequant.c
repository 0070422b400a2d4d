/* gguf_dequant.c - ggml's reference dequantization of GGUF's block types (see gguf.h).
 *
 * Each function is ggml-quants.c's dequantize_row_<type> rewritten from its description: the
 * same binary32 operations in the same order (a product of the F16 scale and the sub-scale, then
 * the product with the integer, then the subtraction of the min where the type has one), each
 * rounded on its own (no fused multiply-add: the build is ISO C11, where GCC contracts nothing,
 * and x86-64's baseline has no FMA). That makes them bit for bit with gguf-py's numpy
 * dequantization (gguf.quants.dequantize), which test_gguf checks on every type here against
 * files gguf-py wrote. Block layouts (bytes, in the file's order):
 *   Q4_0  d:f16 qs[16]                                  32 values, (n - 8) d
 *   Q4_1  d:f16 m:f16 qs[16]                            32 values, n d + m
 *   Q5_0  d:f16 qh:u32 qs[16]                           32 values, (n | h << 4) - 16) d
 *   Q5_1  d:f16 m:f16 qh:u32 qs[16]                     32 values, (n | h << 4) d + m
 *   Q8_0  d:f16 qs:i8[32]                               32 values, q d
 *   Q2_K  scales[16] qs[64] d:f16 dmin:f16              256: 16 groups of 16, 2-bit
 *   Q3_K  hmask[32] qs[64] scales[12] d:f16             256: 16 groups of 16, 3-bit, 6-bit scales
 *   Q4_K  d dmin scales[12] qs[128]                     256: 8 groups of 32, 4-bit
 *   Q5_K  d dmin scales[12] qh[32] qs[128]              256: 8 groups of 32, 5-bit
 *   Q6_K  ql[128] qh[64] scales:i8[16] d:f16            256: 16 groups of 16, 6-bit
 *   IQ4_NL d:f16 qs[16]                                 32 values, d kvalues[n]
 *   IQ4_XS d:f16 scales_h:u16 scales_l[4] qs[128]       256: 8 groups of 32, d (ls - 32) kvalues[n]
 *   MXFP4 e:u8 qs[16]                                   32 values, e2m1(n) x 2^(e - 127)
 * In every 32-value group the low nibbles are elements 0..15 and the high ones 16..31 (Q4_K and
 * Q5_K: of 64).
 */
#include <string.h>

#include "fg_bytes.h"
#include "gguf.h"
#include "quant.h"

static float h2f(const uint8_t *p) { return fg_f16_to_f32_1(fg_le16(p)); }


void ck_gguf_dequant_q8_0(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 34, dst += 32) {
        const float d = h2f(src);
        for (int i = 0; i < 32; i++)
            dst[i] = (float)(int8_t)src[2 + i] * d;
    }
}

void ck_gguf_dequant_q4_0(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 18, dst += 32) {
        const float d = h2f(src);
        for (int i = 0; i < 16; i++) { /* low nibbles are elements 0..15, high ones 16..31 */
            dst[i] = (float)((src[2 + i] & 0x0f) - 8) * d;
            dst[i + 16] = (float)((src[2 + i] >> 4) - 8) * d;
        }
    }
}

/* Q4_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void ck_gguf_dequant_q4_k(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 144) {
        const float d = h2f(src), min = h2f(src + 2);
        const uint8_t *scales = src + 4, *q = src + 16;
        for (int j = 0; j < 8; j += 2, q += 32) { /* 64 values: 32 low nibbles, 32 high ones */
            uint8_t sc, m;
            scale_min_k4(j, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(j + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void ck_gguf_dequant_q6_k(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 210) {
        const float d = h2f(src + 208);
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        for (int n = 0; n < 256; n += 128, dst += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * sc[is] * (float)q1;
                dst[l + 32] = d * sc[is + 2] * (float)q2;
                dst[l + 64] = d * sc[is + 4] * (float)q3;
                dst[l + 96] = d * sc[is + 6] * (float)q4;
            }
    }
}

void ck_gguf_dequant_q4_1(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 20, dst += 32) {
        const float d = h2f(src), m = h2f(src + 2);
        for (int i = 0; i < 16; i++) {
            dst[i] = (float)(src[4 + i] & 0x0f) * d + m;
            dst[i + 16] = (float)(src[4 + i] >> 4) * d + m;
        }
    }
}

/* Q5_0 / Q5_1: the 5-bit value j of a block (qh's bit j is its fifth bit) */
static int q5(const uint8_t *qh, const uint8_t *qs, int j)
{
    uint32_t h = fg_le32(qh);
    int lo = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    return lo | (int)(((h >> j) & 1) << 4);
}

void ck_gguf_dequant_q5_0(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 22, dst += 32) {
        const float d = h2f(src);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)(q5(src + 2, src + 6, j) - 16) * d;
    }
}

void ck_gguf_dequant_q5_1(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 24, dst += 32) {
        const float d = h2f(src), m = h2f(src + 2);
        for (int j = 0; j < 32; j++)
            dst[j] = (float)q5(src + 4, src + 8, j) * d + m;
    }
}

void ck_gguf_dequant_q2_k(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 84) {
        const uint8_t *sc = src, *q = src + 16;
        const float d = h2f(src + 80), dmin = h2f(src + 82);
        for (int h = 0; h < 2; h++, q += 32)         /* halves of 128 values */
            for (int shift = 0; shift < 8; shift += 2) /* 32 values: q[0..32) >> shift */
                for (int g = 0; g < 2; g++, sc++) {  /* two groups of 16, a scale each */
                    const float dl = d * (float)(*sc & 0x0f), ml = dmin * (float)(*sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[16 * g + l] >> shift) & 3) - ml;
                }
    }
}

/* Q3_K's 16 6-bit scales (minus 32): the low 4 bits from bytes 0..7 (k < 8: low nibble of byte
 * k; else the high nibble of byte k - 8), the top 2 from bytes 8..11 (bits 2(k / 4) of byte
 * 8 + k % 4) */
static int q3k_scale(const uint8_t *s, int k)
{
    int lo = k < 8 ? (s[k] & 0x0f) : (s[k - 8] >> 4);
    int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | hi << 4) - 32;
}

void ck_gguf_dequant_q3_k(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 110) {
        const uint8_t *hm = src, *q = src + 32, *s = src + 96;
        const float d = h2f(src + 108);
        int k = 0, bit = 0;
        for (int h = 0; h < 2; h++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, bit++)
                for (int g = 0; g < 2; g++, k++) {
                    const float dl = d * (float)q3k_scale(s, k);
                    for (int l = 16 * g; l < 16 * g + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
                        *dst++ = dl * (float)v;
                    }
                }
    }
}

void ck_gguf_dequant_q5_k(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 176) {
        const float d = h2f(src), min = h2f(src + 2);
        const uint8_t *scales = src + 4, *qh = src + 16, *ql = src + 48;
        for (int j = 0; j < 8; j += 2, ql += 32) { /* 64 values: low nibbles, then high ones */
            uint8_t sc, m;
            scale_min_k4(j, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(j + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((ql[l] & 0xf) | (((qh[l] >> j) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)((ql[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
        }
    }
}

/* IQ4_NL's and IQ4_XS's non-linear 4-bit values */
static const int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

void ck_gguf_dequant_iq4_nl(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 18, dst += 32) {
        const float d = h2f(src);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)iq4_values[src[2 + j] & 0x0f];
            dst[j + 16] = d * (float)iq4_values[src[2 + j] >> 4];
        }
    }
}

void ck_gguf_dequant_iq4_xs(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 136) {
        const float d = h2f(src);
        const unsigned sh = fg_le16(src + 2);
        const uint8_t *sl = src + 4, *qs = src + 8;
        for (int ib = 0; ib < 8; ib++, qs += 16, dst += 32) {
            int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (int)(((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)iq4_values[qs[j] & 0x0f];
                dst[j + 16] = dl * (float)iq4_values[qs[j] >> 4];
            }
        }
    }
}

/* e2m1 values doubled; the scale is half of 2^(e - 127) (ggml's ggml_e8m0_to_fp32_half) */
static const int8_t e2m1_x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static float e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void ck_gguf_dequant_mxfp4(const uint8_t *src, uint64_t n_blocks, float *dst)
{
    for (uint64_t b = 0; b < n_blocks; b++, src += 17, dst += 32) {
        const float d = e8m0_half(src[0]);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)e2m1_x2[src[1 + j] & 0x0f];
            dst[j + 16] = d * (float)e2m1_x2[src[1 + j] >> 4];
        }
    }
}

int ck_gguf_dequant(uint8_t dtype, const uint8_t *src, uint64_t n_blocks, float *dst)
{
    switch (dtype) {
    case FG_CKPT_Q8_0: ck_gguf_dequant_q8_0(src, n_blocks, dst); break;
    case FG_CKPT_Q4_0: ck_gguf_dequant_q4_0(src, n_blocks, dst); break;
    case FG_CKPT_Q4_1: ck_gguf_dequant_q4_1(src, n_blocks, dst); break;
    case FG_CKPT_Q5_0: ck_gguf_dequant_q5_0(src, n_blocks, dst); break;
    case FG_CKPT_Q5_1: ck_gguf_dequant_q5_1(src, n_blocks, dst); break;
    case FG_CKPT_Q2_K: ck_gguf_dequant_q2_k(src, n_blocks, dst); break;
    case FG_CKPT_Q3_K: ck_gguf_dequant_q3_k(src, n_blocks, dst); break;
    case FG_CKPT_Q4_K: ck_gguf_dequant_q4_k(src, n_blocks, dst); break;
    case FG_CKPT_Q5_K: ck_gguf_dequant_q5_k(src, n_blocks, dst); break;
    case FG_CKPT_Q6_K: ck_gguf_dequant_q6_k(src, n_blocks, dst); break;
    case FG_CKPT_IQ4_NL: ck_gguf_dequant_iq4_nl(src, n_blocks, dst); break;
    case FG_CKPT_IQ4_XS: ck_gguf_dequant_iq4_xs(src, n_blocks, dst); break;
    case FG_CKPT_MXFP4: ck_gguf_dequant_mxfp4(src, n_blocks, dst); break;
    default: return FG_ERR_UNSUPPORTED;
    }
    return FG_OK;
}
