/* quant.h - group-wise asymmetric 4/8-bit quantization of .fgt Q4/Q8 chunks, and F16 conversion.
 *
 * SPEC.md ("Quantized chunk layout and arithmetic") is normative for every byte and every
 * rounding; this header is the C view of it. A quantized chunk is seen through fg_qview
 * (format/fgt.h, fg_codec_qview) as a matrix [rows, cols]:
 *  - along_rows == 0: element (r, c) is position c % G of group (r, c / G); groups stored r outer.
 *  - along_rows == 1: element (r, c) is position r % G of group (r / G, c); r/G outer.
 * Each group is: min, scale (codec scale_dtype, F16 or F32), then G codes (Q8: a byte each; Q4:
 * two per byte, nibble order from the codec). x = min + code * scale.
 *
 * The dense side is a row-major [rows, cols] matrix of F32 or F16 (dtype given as FG_CODEC_F32 or
 * FG_CODEC_F16) whose row r starts ld elements after row r-1 (ld >= cols; 0 means cols), so a KV
 * page [tokens, heads, head_dim] is quantized along head_dim as rows = tokens*heads, cols =
 * head_dim, and a column block of a wider matrix is quantized in place through ld.
 *
 * Kernels: scalar reference, AVX2 (+F16C) and AVX-512 (F+BW+VL), picked at run time from the CPU
 * (FG_QUANT_ISA=ref|avx2|avx512 in the environment caps the choice), all bit-identical: the same
 * bytes from quantization and the same bits from dequantization. CUDA kernels are in quant_cuda.h.
 * The int8 GEMM below (quant_gemm*.c) has a reference, AVX2 (+FMA) kernels, and VPDPBUSD twins
 * that run instead on CPUs with AVX-VNNI (ISA avx2) or AVX512-VNNI (ISA avx512);
 * FG_QUANT_VNNI=0 in the environment keeps the plain AVX2 ones.
 *
 * Threads: every function is reentrant; none allocates memory (work buffers live on the stack).
 */
#ifndef FG_QUANT_H
#define FG_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_quant_isa {
    FG_QUANT_ISA_AUTO = 0, /* fg_quant_isa_default() */
    FG_QUANT_ISA_REF = 1,  /* portable scalar C: the reference */
    FG_QUANT_ISA_AVX2 = 2, /* AVX2 + F16C */
    FG_QUANT_ISA_AVX512 = 3, /* AVX-512 F + BW + VL */
} fg_quant_isa;

/* "ref", "avx2", "avx512" ("auto" for AUTO). */
const char *fg_quant_isa_name(fg_quant_isa isa);
/* Parse a name as above; FG_ERR_INVALID_ARG naming the string otherwise. */
int fg_quant_isa_parse(const char *s, fg_quant_isa *out, fg_err *err);
/* 1 when the kernels for isa are compiled in and this CPU (and OS) runs them; REF always. */
int fg_quant_isa_supported(fg_quant_isa isa);
/* The ISA AUTO resolves to: the best supported one, capped by $FG_QUANT_ISA when that names an
 * ISA (an unsupported or unknown name falls back to the best supported ISA below it). Read once. */
fg_quant_isa fg_quant_isa_default(void);

/* Bytes of a chunk with view v (v->n_groups * v->group_bytes); FG_ERR_OVERFLOW past SIZE_MAX. */
int fg_quant_chunk_bytes(const fg_qview *v, size_t *out, fg_err *err);

/* Quantize the dense matrix src [v->rows, v->cols] (src_dtype FG_CODEC_F32 or FG_CODEC_F16, row
 * stride ld elements, so src holds (rows - 1) * ld + cols elements) into dst (dst_len >= fg_quant_chunk_bytes, fully written: padding codes are
 * 0). c is the chunk's Q4/Q8 codec and v its view (fg_codec_qview). Caller owns both buffers; no
 * pointer is kept. NaN or Inf anywhere -> FG_ERR_NONFINITE naming the element; a group whose min
 * or scale does not fit the scale dtype, or whose top code would decode to Inf ->
 * FG_ERR_QUANT_RANGE naming the group; dst is then unspecified. */
int fg_quant_encode(const fg_codec *c, const fg_qview *v, const void *src, uint8_t src_dtype,
                    uint64_t ld, void *dst, size_t dst_len, fg_quant_isa isa, fg_err *err);

/* Dequantize chunk bytes src (src_len >= fg_quant_chunk_bytes) into the dense matrix dst [v->rows,
 * v->cols] of dst_dtype FG_CODEC_F32 or FG_CODEC_F16, row stride ld elements (dst holds
 * (rows - 1) * ld + cols elements; those between cols and ld are not touched). F16 output is the F32 value rounded to nearest even, saturated to
 * +-65504 (SPEC). Never fails on chunk content: any bytes decode to finite numbers or +-Inf/NaN
 * exactly as the arithmetic says. */
int fg_quant_decode(const fg_codec *c, const fg_qview *v, const void *src, size_t src_len,
                    void *dst, uint8_t dst_dtype, uint64_t ld, fg_quant_isa isa, fg_err *err);

/* ---- Integer GEMM on quantized weights (quant_gemm.c) ----
 *
 * y[i, j] = sum_c x[i, c] * W[j, c] for a Linear layer whose weight W [n, k] (Hugging Face
 * [out, in]) is stored as Q4/Q8 chunks of whole rows with groups along the INPUT axis (group_axis
 * = 1, along_rows == 0 in the view): each row j is ceil(k / G) groups, w = min_g + scale_g * q.
 * Activations are quantized at run time to int8 (fg_quant_act_q8): per row, or per row and block
 * of columns, a = amax / 127, xq = rint(x / a) in [-127, 127]. The product of the dequantized
 * weights and the dequantized activations factors per group:
 *   y[i, j] = sum_g a[i, b(g)] * ( min_g * qsum[i, g]  +  scale_g * idot[i, j, g] )
 * where qsum is the sum of xq over the group and idot = sum_{c in g} xq[i, c] * q[j, c] is an
 * exact integer dot product (int8 x unsigned 4/8-bit codes). That formula, with the integers
 * exact and the rest in binary64, is the definition (the scalar reference); the SIMD kernels take
 * the same integers and combine them in binary32 (within 2^-17 of the magnitude sum of the
 * terms, while that sum stays well inside the binary32 range). Both terms use the rounded
 * activations on purpose: min_g * sum x + scale_g * sum q x with x exact in the first term only
 * has an error of sum (w - min) e instead of sum w e over the rounding errors e, about 2.7 times
 * larger (measured: bench_int8_accuracy).
 * Groups along axis 0 (fg-convert's default) do not factor this way: the int8 path needs a store
 * converted with --group-axis 1 (or a weight quantized at load along axis 1). */

/* Int8 activations for one weight codec: rows of x quantized once, then multiplied by every
 * chunk of every weight with that codec's group size and bits. Plain data describing a buffer the
 * caller owns (fg_quant_act_init carves it); valid while that buffer lives. */
typedef struct fg_quant_act {
    uint64_t m;        /* rows */
    uint64_t k;        /* real columns (the weight's input features) */
    uint64_t kp;       /* row stride of q: k rounded up to a multiple of max(G, 64) */
    uint64_t n_groups; /* kp / G */
    uint64_t n_blocks; /* kp / block */
    uint32_t group;    /* G of the weight codec */
    uint32_t block;    /* columns sharing one scale: a multiple of G, or kp (one per row) */
    uint8_t bits;      /* weight bits: with 4, q is stored in Q4 order (below) */
    int8_t *q;         /* [m, kp] codes in -127..127, 0 past k. Q4 order: within each aligned 64
                        * columns, the 32 even columns first, then the 32 odd ones */
    float *scale;      /* [m, n_blocks] a: x ~ a * q */
    int32_t *qsum;     /* [m, n_groups] sum of q over the group */
    float *qmin;       /* [m, n_groups] fl32(a[i, b(g)] * qsum[i, g]): what the group's min
                        * multiplies (SIMD kernels; the reference uses the exact product) */
} fg_quant_act;

/* Bytes fg_quant_act_init needs for m rows of k columns against codec c (Q4/Q8), one activation
 * scale per block columns (0: one per row; else a multiple of c's group size). */
int fg_quant_act_size(const fg_codec *c, uint64_t m, uint64_t k, uint32_t block, size_t *bytes,
                      fg_err *err);
/* Lay *a out in buf (len >= fg_quant_act_size; 64-byte aligned for the best speed). The caller
 * owns buf; *a points into it. */
int fg_quant_act_init(fg_quant_act *a, const fg_codec *c, uint64_t m, uint64_t k, uint32_t block,
                      void *buf, size_t len, fg_err *err);
/* Quantize x [a->m, a->k] (row stride ldx floats, 0 means k) into *a: per block, amax = max |x|
 * (exact), a = fl32(amax / 127), q = clamp(rint(fl32(x * fl32(127 / amax))), -127, 127) (a = 0
 * and q = 0 when amax is 0, or so small that 127 / amax overflows: below about 7.5e-37); qsum
 * and qmin follow. Every ISA writes the same bytes and bits. NaN or Inf in x -> FG_ERR_NONFINITE
 * naming (row, column); *a is then unspecified. */
int fg_quant_act_q8(fg_quant_act *a, const float *x, uint64_t ldx, fg_quant_isa isa, fg_err *err);
/* A view of rows [i0, i1) of a (i0 <= i1 <= a->m): the same buffer, m = i1 - i0. */
fg_quant_act fg_quant_act_rows(const fg_quant_act *a, uint64_t i0, uint64_t i1);

/* y[i * ldy + j] = sum_c x[i, c] * W[j, c] for i < a->m and chunk rows j in [n0, n1), where W's
 * chunk is w (w_len >= fg_quant_chunk_bytes(v)) with codec c and view v (fg_codec_qview of a 2-d
 * [n, k] tensor: rows = the chunk's rows, cols = k, along_rows 0). a must be quantized for c
 * (same group size and bits; any scale dtype and nibble order) with a->k == v->cols. y is
 * overwritten (no accumulation, no bias). Threads may run disjoint [n0, n1) ranges of one chunk
 * into one y at once. Any k and m; chunk bytes are never refused (as fg_quant_decode). AVX2 runs
 * groups of 32 or more codes; smaller groups take the reference path. */
int fg_quant_gemm(const fg_codec *c, const fg_qview *v, const void *w, size_t w_len, uint64_t n0,
                  uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy, fg_quant_isa isa,
                  fg_err *err);

/* ---- int8 activations x Q4 weights for many activation rows: the prefill path ----
 * fg_quant_gemm restricted to activation rows [i0, i1) (y rows i0.. of the same y, ldy >= n1),
 * plus bias[j] (indexed by chunk row j; NULL: none),
 * with the weight rows repacked into `panel` (the caller's scratch: 32-byte aligned, at least
 * fg_quant_gemm_panel_min(c, k) bytes for k columns, more lets a pass cover more weight rows; threads use their
 * own). Q4 with groups of 64 or more on an AVX2 CPU (fg_quant_gemm_panel_fast) runs a kernel
 * that unpacks the codes once per slab and multiplies 4 activation rows by 8 weight rows at a
 * time (gemm_q4p_avx2.c), or on a CPU with AVX512-VNNI, given a panel of 4 x the minimum and
 * one activation scale a group, its zmm VPDPBUSD twin with 4 x 32 tiles and the same bits
 * (gemm_q4p_vnni512.c; FG_QUANT_VNNI=0 or FG_PREFILL_AVX512=0 keep the AVX2 one). On a CPU and
 * OS with AMX-INT8 (ISA avx512), Q4 and Q8 with G a multiple of 64, one activation scale a group
 * and a panel of fgq_amx_panel_min bytes run a tile kernel (gemm_amx.c: Q4 with the AVX2 panel
 * kernel's bits, Q8 with the same arithmetic), once its first-use self-check passed (it has not
 * yet run on hardware; FG_QUANT_AMX=0 turns it off); fg_quant_gemm_panel_fast then says 1 for
 * Q8 too. Anything else runs fg_quant_gemm's kernels on those rows (panel unused). The result is
 * fg_quant_gemm's within its stated float tolerance. */
#define FG_QUANT_PANEL_COLS 2048 /* columns of one k block of the panel kernel */
size_t fg_quant_gemm_panel_min(const fg_codec *c, uint64_t k);
int fg_quant_gemm_panel_fast(const fg_codec *c);
int fg_quant_gemm_panel(const fg_codec *c, const fg_qview *v, const void *w, size_t w_len,
                        uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                        const float *bias, float *y, uint64_t ldy, void *panel, size_t panel_bytes,
                        fg_quant_isa isa, fg_err *err);

/* ---- F16 weights times f32 activations (quant_gemm.c): the batch-1 decode path ----
 * y[i * ldy + j] = sum_c x[i * ldx + c] * W[j * ldw + c] for i < m, j < n, with W binary16
 * [n, k] (row stride ldw >= k) widened in registers (F16C) and multiplied with FMA: no f32 copy
 * of the weights, so one pass over the F16 bytes. Meant for small m (decode); any m works. The
 * reference sums in binary64; AVX2 in binary32 lanes (within 2^-18 of sum |x w|). y overwritten. */
int fg_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                uint64_t m, uint64_t ldx, float *y, uint64_t ldy, fg_quant_isa isa, fg_err *err);

/* ---- 16-bit float weights times many rows of x (gemm16.c): the prefill path ----
 * A GotoBLAS-style GEMM whose weights are widened to f32 as they are packed, for m past what
 * fg_f16_gemm suits. x [m, k] (row stride ldx) is packed once per Linear into xp
 * (fg_xpack_floats(m, k) floats); fg_xpack packs micro-panels [b0, b1) of FG_XPACK_MR rows, so
 * threads may pack disjoint ranges (b1 past the end is clipped). fg_w16_gemm then computes
 *   y[i * ldy + j] = bias[j] + sum_c x[i, c] * W[j, c]
 * for i in [i0, i1) (i0 a multiple of FG_XPACK_MR) and j < n, W binary16 (codec FG_CODEC_F16)
 * or bfloat16 (FG_CODEC_BF16) [n, k] with row stride ldw, bias NULL for none; y overwritten.
 * panel: the caller's scratch of panel_floats floats, 32-byte aligned, at least
 * fg_w16_panel_min_floats(k) = min(k, FG_XPACK_KC) x 16 (the SIMD kernel widens up to
 * panel_floats / kc weights at a time into it; the reference does not use it). Threads may run
 * disjoint (rows, i range) problems into one y, each with its own panel. The reference sums in
 * binary64; AVX2 sums each block of FG_XPACK_KC columns by FMA in binary32, then the blocks
 * (within (KC + k / KC + 2) x 2^-24 of |bias| + sum |x w|); AVX512 the same sums with zmm
 * registers (the AVX2 kernel's bits). NaN and Inf propagate as in any sum. */
#define FG_XPACK_MR 6
#define FG_XPACK_KC 256
uint64_t fg_xpack_floats(uint64_t m, uint64_t k);
void fg_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, float *xp, uint64_t b0,
              uint64_t b1);
uint64_t fg_w16_panel_min_floats(uint64_t k);
int fg_w16_gemm(uint8_t codec, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias, float *y,
                uint64_t ldy, float *panel, uint64_t panel_floats, fg_quant_isa isa, fg_err *err);
/* 1 when AUTO runs a SIMD kernel of fg_w16_gemm on this CPU (else only the slow reference). */
int fg_w16_gemm_fast(void);

/* The same product with bfloat16 inputs (the CPU backend's --compute bf16): y from x' and W',
 * x and W each rounded to bfloat16 (nearest even, subnormals to signed zero, as VCVTNEPS2BF16;
 * BF16 weights are already bfloat16, subnormal ones read as zero), the products summed
 * in binary32. x is rounded and packed once per Linear by fg_xpack_bf16 into xb
 * (fg_xpack_bf16_words(m, k) 32-bit words: fg_xpack's layout with a pair of consecutive columns
 * in a word, low half first; panels [b0, b1) as fg_xpack). On a CPU with AVX512-BF16
 * (fg_w16_gemm_bf16_fast) VDPBF16PS sums pairs of products in binary32 (subnormal sums flushed
 * to zero); otherwise, and with isa REF, the reference sums in binary64. Within
 * (KC + k / KC + 2) x 2^-24 of |bias| + sum |x' w'| of the exact sum of the rounded values (F16
 * weights lose three of their eleven significant bits, x sixteen of its twenty-four:
 * docs/performance.md has the perplexity rows). Other arguments as fg_w16_gemm's; panel: at least
 * fg_w16_bf16_panel_min_floats(k) floats, 64-byte aligned. */
uint64_t fg_xpack_bf16_words(uint64_t m, uint64_t k);
void fg_xpack_bf16(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                   uint64_t b0, uint64_t b1);
int fg_w16_gemm_bf16(uint8_t codec, const uint16_t *w, uint64_t n, uint64_t ldw,
                     const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                     const float *bias, float *y, uint64_t ldy, float *panel,
                     uint64_t panel_floats, fg_quant_isa isa, fg_err *err);
uint64_t fg_w16_bf16_panel_min_floats(uint64_t k);
/* 1 when AUTO runs fg_w16_gemm_bf16's VDPBF16PS kernel on this CPU: AVX512-BF16 and the ISA
 * avx512 (FG_QUANT_ISA or FG_ISA may cap it). */
int fg_w16_gemm_bf16_fast(void);

/* ---- IEEE binary16 conversions (bit-identical across ISAs) ---- */
/* Exact widening; NaN payloads kept (quieted). */
void fg_f16_to_f32(const uint16_t *src, float *dst, size_t n, fg_quant_isa isa);
/* Round to nearest even, overflow to +-Inf, subnormals kept, NaN quieted with its top payload
 * bits (the F16C VCVTPS2PH result). */
void fg_f32_to_f16(const float *src, uint16_t *dst, size_t n, fg_quant_isa isa);
/* One-value scalar reference forms of the two above. */
float fg_f16_to_f32_1(uint16_t h);
uint16_t fg_f32_to_f16_1(float f);

#ifdef __cplusplus
}
#endif
#endif
