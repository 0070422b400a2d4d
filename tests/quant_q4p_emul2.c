/* quant_q4p_emul2.c - the AVX512-VNNI Q4 panel kernel's body (quant/gemm_q4p_kern512.h) on AVX2
 * alone: quant_q4p_emul.c (VPDPBUSD emulated with AVX-512 BW intrinsics, exact for Q4 codes,
 * and the body after it) included whole after quant_zmm_emul.h, which emulates those intrinsics
 * and the body's own (masked loads and stores of the edge columns included) in AVX2, exactly.
 * So the body's packing, tiles, edges, k blocks and float terms are tested on CPUs without
 * AVX-512, against the AVX2 panel kernel's bits (test_quant_gemm), and on CPUs with AVX-512
 * against the AVX-512 emulated and native builds too. Compiled with -mavx2 -mfma -mf16c
 * -ffp-contract=off and no -mavx512*; called where the CPU runs AVX2.
 * Entry: fgq_q4p_emul2_gemm_panel (quant_q4p_emul.c's fgq_q4p_emul512_gemm_panel).
 */
#include <immintrin.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"
#include "quant_zmm_emul.h"

#define fgq_q4p_emul512_gemm_panel fgq_q4p_emul2_gemm_panel
#include "quant_q4p_emul.c"
