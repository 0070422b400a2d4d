/* quant_gemm_int.h - private to quant/: the kernels behind fg_quant_act_q8 and fg_quant_gemm.
 *
 * One activation row at a time (act_row) and one range of weight rows against every activation
 * row (gemm); quant_gemm.c checks the arguments and picks the ISA. The reference (quant_gemm.c)
 * is the definition; quant_gemm_avx2.c is tested against it (act_row bit for bit, gemm within
 * the float tolerance stated in quant.h).
 */
#ifndef FG_QUANT_GEMM_INT_H
#define FG_QUANT_GEMM_INT_H

#include "quant_int.h"

/* Where column c of a row lives in a->q: Q4 order (per 64 columns, evens then odds) or natural. */
static inline uint64_t fgq_act_pos(const fg_quant_act *a, uint64_t c)
{
    if (a->bits != 4)
        return c;
    return (c & ~(uint64_t)63) + (c & 1) * 32 + ((c & 63) >> 1);
}

/* Quantize row i of x (k floats at x) into a's row i. Returns 1 (row unspecified) when some x is
 * NaN or Inf, else 0. */
int fgq_ref_act_row(const float *x, fg_quant_act *a, uint64_t i);
/* y[i * ldy + j] for every activation row i and weight rows j in [n0, n1) of the chunk at w
 * (row j at w + j * row_bytes). */
void fgq_ref_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                  uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);

/* F16 weights [n, k] (stride ldw) times x [m, k] (stride ldx) into y (stride ldy). */
void fgq_ref_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                      uint64_t m, uint64_t ldx, float *y, uint64_t ldy);

/* Element (i, c) of x packed by fg_xpack (m rows, k columns). */
float fgq_xpack_at(const float *xp, uint64_t m, uint64_t k, uint64_t i, uint64_t c);
/* fg_w16_gemm after its checks: the reference (binary64 sums) on x packed by fg_xpack (xp) or,
 * for fg_w16_gemm_bf16, by fg_xpack_bf16 (xb: then the weights are rounded to bfloat16 too). */
void fgq_ref_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                      const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                      const float *bias, float *y, uint64_t ldy);
/* bfloat16 of f, nearest even, denormals to signed zero (VCVTNEPS2BF16's rule, NaN kept NaN),
 * widened back. */
float fgq_bf16_round(float f);

/* (Declared for every build: tests call them where FG_QUANT_BF16 built them.)
 * fg_w16_gemm_bf16's AVX512-BF16 kernel (gemm16_bf16.c) on x packed by fg_xpack_bf16; panel: at
 * least min(k, FG_XPACK_KC) / 2 x 32 floats (rounded up), 64-byte aligned. And fg_xpack_bf16's
 * AVX512-BF16 form. */
void fgq_bf16_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const uint32_t *xb,
                       uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                       float *y, uint64_t ldy, float *panel, uint64_t panel_floats);
void fgq_bf16_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                    uint64_t b0, uint64_t b1);
/* The same body with the bfloat16 instructions emulated (tests/quant_bf16_emul.c, built into
 * test_quant_gemm only; any AVX-512 CPU). */
void fgq_bf16_emul_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw,
                            const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                            const float *bias, float *y, uint64_t ldy, float *panel,
                            uint64_t panel_floats);
void fgq_bf16_emul_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                         uint64_t b0, uint64_t b1);
/* The bfloat16 of x at (i, c) in fg_xpack_bf16's layout, widened. */
float fgq_xpack_bf16_at(const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i, uint64_t c);
#ifdef FG_QUANT_X86
/* fg_xpack with AVX2 (the same floats). */
void fgq_avx2_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, float *xp, uint64_t b0,
                    uint64_t b1);
/* Activation rows [i0, i1) against weight rows [n0, n1), Q4 with G >= 64, weights repacked into
 * panel (32-byte aligned, at least one strip of one k block). */
void fgq_avx2_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                         uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                         const float *bias, float *y, uint64_t ldy, void *panel,
                         size_t panel_bytes);
void fgq_avx2_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                       uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                       float *y, uint64_t ldy, float *panel, uint64_t panel_floats);
/* The same 16-bit GEMM with zmm registers: 6 x 32 tiles, panel >= min(k, FG_XPACK_KC) x 32
 * floats, 64-byte aligned; the AVX2 kernel's bits. */
void fgq_avx512_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                         uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                         float *y, uint64_t ldy, float *panel, uint64_t panel_floats);
/* 0 when $FG_PREFILL_AVX512 is "0": the prefill GEMMs keep their AVX2 kernels on AVX-512 CPUs.
 * Read once. */
int fgq_prefill_avx512_on(void);
void fgq_avx2_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                       uint64_t m, uint64_t ldx, float *y, uint64_t ldy);
int fgq_avx2_act_row(const float *x, fg_quant_act *a, uint64_t i);
void fgq_avx2_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                   uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);
#endif
/* ---- the AMX-INT8 panel kernel (gemm_amx.c; its body gemm_amx_kern.h) ----
 * fgq_avx2_gemm_panel's contract for Q4 and Q8 with G a multiple of 64 and one activation scale
 * a group (a->block == G); panel >= fgq_amx_panel_min(G, k) bytes, 4-byte aligned. Q4:
 * the AVX2 panel kernel's bits. */
typedef void (*fgq_panel_fn)(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                             uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0,
                             uint64_t i1, const float *bias, float *y, uint64_t ldy, void *panel,
                             size_t panel_bytes);
/* Bytes of a 32-row strip of kb groups of G (A tiles, scales and mins), which is also the size
 * of a 32-row activation block (B tiles, scales and qmin). */
#define FGQ_AMX_ROWS 32
static inline uint64_t fgq_amx_block_bytes(uint64_t kb, uint32_t G)
{
    return kb * ((uint64_t)G * FGQ_AMX_ROWS + 2 * FGQ_AMX_ROWS * 4);
}
/* One strip and one activation block of a k block: the least panel for k columns. */
uint64_t fgq_amx_panel_min(uint32_t G, uint64_t k);
/* A small Q4 and Q8 GEMM with tails in m, n and k (two k blocks), every value an exact integer,
 * through fn against the integer result: 0 when every output is equal, else how many differ
 * (-1: out of memory). quant_gemm.c runs it on the hardware kernel before its first use. */
int fgq_amx_selfcheck(fgq_panel_fn fn);
/* 1 when the AMX kernel runs: the CPU and OS (fg_cpu_features) have AMX-INT8, FG_QUANT_AMX is not
 * "0", and the self-check passed (run once, on the first call). */
int fgq_amx_on(void);
void fgq_amx_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                        uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                        const float *bias, float *y, uint64_t ldy, void *panel,
                        size_t panel_bytes);
/* The same body with the tile instructions emulated (tests/quant_amx_emul.c, test builds). */
void fgq_amx_emul_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                             uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0,
                             uint64_t i1, const float *bias, float *y, uint64_t ldy, void *panel,
                             size_t panel_bytes);

#ifdef FG_QUANT_VNNI
/* The same with VPDPBUSD: AVX-VNNI, and AVX512-VNNI (+VL) on ymm registers. */
void fgq_vnni_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                   uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);
void fgq_vnni512_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                      uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);
/* fgq_avx2_gemm_panel with zmm VPDPBUSD and 32-row strips (gemm_q4p_kern512.h): one activation
 * scale a group (a->block == G) only; panel >= 4 AVX2 strips. The AVX2 panel kernel's bits. */
void fgq_vnni512_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                            uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0,
                            uint64_t i1, const float *bias, float *y, uint64_t ldy, void *panel,
                            size_t panel_bytes);
#endif

#endif
