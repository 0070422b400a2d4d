/* quant_int.h - private to quant/: group parameters, the per-ISA kernel table, and the scalar
 * pieces every ISA shares (binary16 conversion, the min/scale rounding rule, header reads).
 *
 * Quantization kernels work on ONE group laid out contiguously (t = 0..G-1); quant.c gathers
 * groups that run down the rows through a small stack tile. Dequantization kernels take a run of
 * groups along a row, or a whole row-group. The per-group header (stored min and scale) is
 * computed by fgq_header_calc for every ISA (and on the GPU), so only the min/max reduction and
 * the code arithmetic are vectorised, and both are exact or IEEE-defined: the same bytes come
 * out of every ISA. Files including this are compiled with -ffp-contract=off (CUDA: --fmad=false)
 * so no compiler fuses min + code * scale into an FMA behind our back.
 */
#ifndef FG_QUANT_INT_H
#define FG_QUANT_INT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fg_bytes.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" { /* quant_cuda.cu includes this */
#endif

/* The scalar helpers below are shared with the CUDA kernels (quant_cuda.cu). */
#ifdef __CUDACC__
#define FGQ_HD __host__ __device__
#else
#define FGQ_HD
#endif

typedef struct fgq_params {
    uint32_t G;        /* group size, power of two 8..4096 */
    uint32_t levels;   /* 2^bits - 1: 15 or 255 */
    uint32_t hdr;      /* bytes of stored min + scale: 4 (F16) or 8 (F32) */
    uint32_t gbytes;   /* hdr + G * bits / 8 */
    uint8_t bits;      /* 4 or 8 */
    uint8_t f16scale;  /* 1: min and scale are binary16; 0: binary32 */
    uint8_t hi_first;  /* Q4: code 2i in the high nibble of byte i */
} fgq_params;

typedef struct fgq_kernels {
    fg_quant_isa isa;
    /* min and max of x[0..n), n >= 1; returns 1 (mn/mx unspecified) when any x is NaN or Inf. */
    int (*minmax)(const float *x, uint32_t n, float *mn, float *mx);
    /* Codes of x[0..n) against stored m and s > 0, packed into G*bits/8 bytes at out; the
     * positions n..G-1 get code 0. */
    void (*codes)(const float *x, uint32_t n, float m, float s, const fgq_params *p, uint8_t *out);
    /* Dequantize n elements from the consecutive groups starting at grp (a run along a row:
     * every group full but maybe the last; n <= G is one group) into y[0..n). */
    void (*dec_f32)(const uint8_t *grp, uint64_t n, const fgq_params *p, float *y);
    void (*dec_f16)(const uint8_t *grp, uint64_t n, const fgq_params *p, uint16_t *y);
    void (*h2f)(const uint16_t *h, float *f, size_t n);
    void (*f2h)(const float *f, uint16_t *h, size_t n);
    /* Dequantize a row-group (groups down the rows, along_rows == 1): the groups of columns
     * 0..cols-1 start at grp (consecutive), each holds nr <= G rows; element (t, c) goes to
     * y[t * ld + c]. */
    void (*dec_rows_f32)(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                         float *y, uint64_t ld);
    void (*dec_rows_f16)(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                         uint16_t *y, uint64_t ld);
    /* h = f2h(sat16(f)): the F16 output rule. */
    void (*f2h_sat)(const float *f, uint16_t *h, size_t n);
    /* dst[j * dstride + i] = src[i * sstride + j] for i < nrows, j < ncols. */
    void (*transpose)(const float *src, size_t sstride, float *dst, size_t dstride,
                      uint32_t nrows, uint32_t ncols);
} fgq_kernels;

extern const fgq_kernels fgq_kernels_ref;
#ifdef FG_QUANT_X86
extern const fgq_kernels fgq_kernels_avx2;
extern const fgq_kernels fgq_kernels_avx512;
#endif

#define FGQ_F16_MAX 65504.0f

FGQ_HD static inline uint32_t fgq_fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

FGQ_HD static inline float fgq_bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* binary16 -> binary32, exact; NaN quieted with payload kept (as VCVTPH2PS). */
FGQ_HD static inline float fgq_h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 31)
        return fgq_bitsf(s | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0));
    if (e != 0)
        return fgq_bitsf(s | ((e + 112) << 23) | (m << 13));
    if (m == 0)
        return fgq_bitsf(s);
    uint32_t sh = 0;
    while (!(m & 0x400u))
        m <<= 1, sh++;
    return fgq_bitsf(s | ((113 - sh) << 23) | ((m & 0x3FFu) << 13));
}

/* binary32 -> binary16, round to nearest even, overflow to Inf, NaN quieted keeping the top
 * payload bits (as VCVTPS2PH with imm 0). */
FGQ_HD static inline uint16_t fgq_f2h(float f)
{
    uint32_t x = fgq_fbits(f), s = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (uint16_t)(s | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u) /* >= 65520: rounds to Inf */
        return (uint16_t)(s | 0x7C00u);
    if (ax >= 0x38800000u) /* normal binary16 */
        return (uint16_t)(s | ((ax + 0xFFFu + ((ax >> 13) & 1u) - 0x38000000u) >> 13));
    uint32_t e = ax >> 23;
    if (e < 102) /* below half the smallest subnormal */
        return (uint16_t)s;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u, sh = 126 - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(s | r);
}

/* Saturate a decoded value to the binary16 range; NaN passes through (SPEC: F16 output). */
FGQ_HD static inline float fgq_sat16(float y)
{
    return y > FGQ_F16_MAX ? FGQ_F16_MAX : y < -FGQ_F16_MAX ? -FGQ_F16_MAX : y;
}

/* Stored min and scale of the group at grp, as binary32 (exact). */
static inline void fgq_read_ms(const uint8_t *grp, const fgq_params *p, float *m, float *s)
{
    if (p->f16scale) {
        *m = fgq_h2f(fg_le16(grp));
        *s = fgq_h2f(fg_le16(grp + 2));
    } else {
        *m = fgq_bitsf(fg_le32(grp));
        *s = fgq_bitsf(fg_le32(grp + 4));
    }
}

/* Code of one element: clamp(rint((x - m) / s), 0, levels), every step in binary32 (SPEC). */
FGQ_HD static inline uint32_t fgq_code1(float x, float m, float s, float levels)
{
    float q = rintf((x - m) / s);
    q = q < 0.0f ? 0.0f : q > levels ? levels : q;
    return (uint32_t)q;
}

FGQ_HD static inline int fgq_finite(float f)
{
    return (fgq_fbits(f) & 0x7F800000u) != 0x7F800000u;
}

/* Next binary16 toward -Inf / +Inf of a finite h. */
FGQ_HD static inline uint16_t fgq_f16_down_step(uint16_t h)
{
    if (h & 0x8000u)
        return (uint16_t)(h + 1);
    return h == 0 ? 0x8001u : (uint16_t)(h - 1);
}

FGQ_HD static inline uint16_t fgq_f16_up_step(uint16_t h)
{
    if (h & 0x8000u)
        return h == 0x8000u ? 0x0001u : (uint16_t)(h - 1);
    return (uint16_t)(h + 1);
}

/* Largest binary16 <= v (v finite). */
FGQ_HD static inline uint16_t fgq_f16_round_down(float v)
{
    uint16_t h = fgq_f2h(v);
    if (fgq_h2f(h) > v)
        h = fgq_f16_down_step(h);
    return h;
}

/* Smallest binary16 >= v (v finite, > 0). One step suffices: the binary16 nearest to the
 * binary32 nearest to v is within one binary16 step of v. */
FGQ_HD static inline uint16_t fgq_f16_round_up(double v)
{
    uint16_t h = fgq_f2h((float)v);
    if ((double)fgq_h2f(h) < v)
        h = fgq_f16_up_step(h);
    return h;
}

/* Smallest binary32 >= v (v > 0): the nearest, or the next one up. */
FGQ_HD static inline float fgq_f32_round_up(double v)
{
    float f = (float)v;
    if ((double)f < v)
        f = fgq_bitsf(fgq_fbits(f) + 1); /* f >= 0 and finite here */
    return f;
}

/* Min and scale to store for a group with real min mn and max mx (SPEC rounding rule): their
 * binary32 values in *m, *s and their stored bit patterns in *mb, *sb (16 or 32 bits).
 * FG_ERR_QUANT_RANGE when one is not finite in the scale dtype. */
FGQ_HD static inline int fgq_header_calc(float mn, float mx, int f16scale, uint32_t levels,
                                         float *m, float *s, uint32_t *mb, uint32_t *sb)
{
    if (f16scale) {
        *mb = fgq_f16_round_down(mn);
        *m = fgq_h2f((uint16_t)*mb);
    } else {
        *m = mn;
        *mb = fgq_fbits(mn);
    }
    if (!fgq_finite(*m))
        return FG_ERR_QUANT_RANGE;
    double range = (double)mx - (double)*m;
    if (range == 0.0) {
        *s = 0.0f;
        *sb = 0;
        return FG_OK;
    }
    if (f16scale) {
        *sb = fgq_f16_round_up(range / levels);
        *s = fgq_h2f((uint16_t)*sb);
    } else {
        *s = fgq_f32_round_up(range / levels);
        *sb = fgq_fbits(*s);
    }
    if (!fgq_finite(*s))
        return FG_ERR_QUANT_RANGE;
    /* The largest code must decode to a finite binary32 (SPEC Q4 step 4). */
    float top = (float)levels * *s;
    top = *m + top;
    return fgq_finite(top) ? FG_OK : FG_ERR_QUANT_RANGE;
}

/* Check a Q4/Q8 codec, its chunk view, the dense dtype (F32/F16), the row stride and the chunk
 * buffer length; fill *p. Shared by the CPU and CUDA entry points. */
int fgq_check(const fg_codec *c, const fg_qview *v, uint8_t dtype, uint64_t ld, size_t len,
              fgq_params *p, fg_err *err);

/* fgq_header_calc, then the stored bytes written little-endian to hdr. */
int fgq_header(float mn, float mx, const fgq_params *p, float *m, float *s, uint8_t *hdr);

/* Scalar reference pieces reused by SIMD tails. */
void fgq_ref_codes(const float *x, uint32_t n, float m, float s, const fgq_params *p,
                   uint8_t *out, uint32_t from);
void fgq_ref_dec_f32(const uint8_t *grp, uint32_t n, const fgq_params *p, float *y, uint32_t from);
void fgq_ref_dec_f16(const uint8_t *grp, uint32_t n, const fgq_params *p, uint16_t *y,
                     uint32_t from);
void fgq_ref_transpose(const float *src, size_t sstride, float *dst, size_t dstride,
                       uint32_t nrows, uint32_t ncols);
void fgq_ref_f2h_sat(const float *f, uint16_t *h, size_t n);
/* Rows [t0, t1) x columns [c0, c1) of a row-group, as dec_rows_f32 / dec_rows_f16. */
void fgq_ref_dec_block_f32(const uint8_t *grp, uint32_t t0, uint32_t t1, uint64_t c0, uint64_t c1,
                           const fgq_params *p, float *y, uint64_t ld);
void fgq_ref_dec_block_f16(const uint8_t *grp, uint32_t t0, uint32_t t1, uint64_t c0, uint64_t c1,
                           const fgq_params *p, uint16_t *y, uint64_t ld);
#ifdef FG_QUANT_X86
void fgq_avx2_transpose(const float *src, size_t sstride, float *dst, size_t dstride,
                        uint32_t nrows, uint32_t ncols);
void fgq_avx2_dec_rows_f32(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                           float *y, uint64_t ld);
void fgq_avx2_dec_rows_f16(const uint8_t *grp, uint32_t nr, uint64_t cols, const fgq_params *p,
                           uint16_t *y, uint64_t ld);
#endif

#ifdef __cplusplus
}
#endif
#endif
