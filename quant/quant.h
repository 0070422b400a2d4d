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
