/* quant_ref.c - the scalar reference kernels of quant/ and the shared min/scale rounding rule.
 *
 * This file is the executable form of SPEC "Quantized chunk layout and arithmetic"; the AVX2,
 * AVX-512 and CUDA kernels are tested against it bit for bit. Plain C, one element at a time,
 * compiled with -ffp-contract=off:
 *  - stored min m: the group min rounded DOWN to the scale dtype (exact for F32);
 *  - stored scale s: (max - m) / levels evaluated in binary64, rounded UP to the scale dtype,
 *    or 0 when max == m; so every real element lies in [m, m + levels * s] and its nearest code
 *    is within s/2 of it;
 *  - code = clamp(rint((x - m) / s), 0, levels), subtraction and division in binary32;
 *  - value = m + code * s, product rounded to binary32, then the sum (never a fused FMA).
 */
#include "quant_int.h"

int fgq_header(float mn, float mx, const fgq_params *p, float *m, float *s, uint8_t *hdr)
{
    uint32_t mb, sb;
    int rc = fgq_header_calc(mn, mx, p->f16scale, p->levels, m, s, &mb, &sb);
    if (rc)
        return rc;
    if (p->f16scale) {
        fg_put16(hdr, (uint16_t)mb);
        fg_put16(hdr + 2, (uint16_t)sb);
    } else {
        fg_put32(hdr, mb);
        fg_put32(hdr + 4, sb);
    }
    return FG_OK;
}

static int ref_minmax(const float *x, uint32_t n, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (uint32_t i = 0; i < n; i++) {
        if ((fgq_fbits(x[i]) & 0x7F800000u) == 0x7F800000u)
            return 1;
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *mn = lo;
    *mx = hi;
    return 0;
}

void fgq_ref_codes(const float *x, uint32_t n, float m, float s, const fgq_params *p,
                   uint8_t *out, uint32_t from)
{
    float L = (float)p->levels;
    if (p->bits == 8) {
        for (uint32_t i = from; i < p->G; i++)
            out[i] = i < n ? (uint8_t)fgq_code1(x[i], m, s, L) : 0;
        return;
    }
    for (uint32_t i = from; i < p->G; i += 2) { /* from is even */
        uint32_t c0 = i < n ? fgq_code1(x[i], m, s, L) : 0;
        uint32_t c1 = i + 1 < n ? fgq_code1(x[i + 1], m, s, L) : 0;
        out[i / 2] = (uint8_t)(p->hi_first ? (c0 << 4) | c1 : c0 | (c1 << 4));
    }
}

static void ref_codes(const float *x, uint32_t n, float m, float s, const fgq_params *p,
                      uint8_t *out)
{
    fgq_ref_codes(x, n, m, s, p, out, 0);
}

static inline uint32_t code_at(const uint8_t *codes, uint32_t i, const fgq_params *p)
{
    if (p->bits == 8)
        return codes[i];
    uint32_t b = codes[i / 2], lo_pos = (i & 1u) ^ p->hi_first;
    return lo_pos ? b >> 4 : b & 0xFu;
}

void fgq_ref_dec_f32(const uint8_t *grp, uint32_t n, const fgq_params *p, float *y, uint32_t from)
{
    float m, s;
    fgq_read_ms(grp, p, &m, &s);
    const uint8_t *codes = grp + p->hdr;
    for (uint32_t i = from; i < n; i++) {
        float prod = (float)code_at(codes, i, p) * s;
        y[i] = m + prod;
    }
}

void fgq_ref_dec_f16(const uint8_t *grp, uint32_t n, const fgq_params *p, uint16_t *y,
                     uint32_t from)
{
    float m, s;
    fgq_read_ms(grp, p, &m, &s);
    const uint8_t *codes = grp + p->hdr;
    for (uint32_t i = from; i < n; i++) {
        float prod = (float)code_at(codes, i, p) * s;
        y[i] = fgq_f2h(fgq_sat16(m + prod));
    }
}

static void ref_dec_f32(const uint8_t *grp, uint64_t n, const fgq_params *p, float *y)
{
    for (; n; grp += p->gbytes, y += p->G) {
        uint32_t nn = n < p->G ? (uint32_t)n : p->G;
        fgq_ref_dec_f32(grp, nn, p, y, 0);
        n -= nn;
    }
}

static void ref_dec_f16(const uint8_t *grp, uint64_t n, const fgq_params *p, uint16_t *y)
{
    for (; n; grp += p->gbytes, y += p->G) {
        uint32_t nn = n < p->G ? (uint32_t)n : p->G;
        fgq_ref_dec_f16(grp, nn, p, y, 0);
        n -= nn;
    }
}

void fgq_ref_transpose(const float *src, size_t sstride, float *dst, size_t dstride,
                       uint32_t nrows, uint32_t ncols)
{
    for (uint32_t i = 0; i < nrows; i++)
        for (uint32_t j = 0; j < ncols; j++)
            dst[j * dstride + i] = src[i * sstride + j];
}

void fgq_ref_dec_block_f32(const uint8_t *grp, uint32_t t0, uint32_t t1, uint64_t c0, uint64_t c1,
                           const fgq_params *p, float *y, uint64_t ld)
{
    for (uint64_t c = c0; c < c1; c++) {
        const uint8_t *g = grp + c * p->gbytes;
        float m, s;
        fgq_read_ms(g, p, &m, &s);
        for (uint32_t t = t0; t < t1; t++) {
            float prod = (float)code_at(g + p->hdr, t, p) * s;
            y[t * ld + c] = m + prod;
        }
    }
}

void fgq_ref_dec_block_f16(const uint8_t *grp, uint32_t t0, uint32_t t1, uint64_t c0, uint64_t c1,
                           const fgq_params *p, uint16_t *y, uint64_t ld)
{
    for (uint64_t c = c0; c < c1; c++) {
        const uint8_t *g = grp + c * p->gbytes;
        float m, s;
        fgq_read_ms(g, p, &m, &s);
        for (uint32_t t = t0; t < t1; t++) {
            float prod = (float)code_at(g + p->hdr, t, p) * s;
            y[t * ld + c] = fgq_f2h(fgq_sat16(m + prod));
        }
    }
}

static void ref_dec_rows_f32(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                             float *y, uint64_t ld)
{
    fgq_ref_dec_block_f32(grp, 0, nr, 0, cols, p, y, ld);
}

static void ref_dec_rows_f16(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                             uint16_t *y, uint64_t ld)
{
    fgq_ref_dec_block_f16(grp, 0, nr, 0, cols, p, y, ld);
}

void fgq_ref_f2h_sat(const float *f, uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h[i] = fgq_f2h(fgq_sat16(f[i]));
}

static void ref_h2f(const uint16_t *h, float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = fgq_h2f(h[i]);
}

static void ref_f2h(const float *f, uint16_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h[i] = fgq_f2h(f[i]);
}

const fgq_kernels fgq_kernels_ref = {
    .isa = FG_QUANT_ISA_REF,
    .minmax = ref_minmax,
    .codes = ref_codes,
    .dec_f32 = ref_dec_f32,
    .dec_f16 = ref_dec_f16,
    .dec_rows_f32 = ref_dec_rows_f32,
    .dec_rows_f16 = ref_dec_rows_f16,
    .h2f = ref_h2f,
    .f2h = ref_f2h,
    .f2h_sat = fgq_ref_f2h_sat,
    .transpose = fgq_ref_transpose,
};
