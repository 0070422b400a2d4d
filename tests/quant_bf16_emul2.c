/* quant_bf16_emul2.c - the AVX512-BF16 16-bit-weight GEMM's body (quant/gemm16_bf16_kern.h) on
 * AVX2 alone: quant_bf16_emul.c (VDPBF16PS, VCVTNE2PS2BF16 and VCVTNEPS2BF16 emulated with
 * AVX-512 F/BW intrinsics, the body after them) included whole after quant_zmm_emul.h, which
 * emulates those intrinsics and the body's own in AVX2, exactly. So the body's logic and the
 * instructions' rounding and flushes are tested on CPUs without AVX-512 (AMD Zen 2/3, Intel
 * client cores), and on CPUs with it the three builds (this one, the AVX-512 emulated one, the
 * native one where AVX512-BF16 exists) are compared bit for bit (test_quant_gemm). Compiled with
 * -mavx2 -mfma -mf16c -ffp-contract=off and no -mavx512*; called where the CPU runs AVX2.
 * Entries: fgq_bf16_emul2_w16_gemm and fgq_bf16_emul2_xpack, quant_bf16_emul.c's with the 2.
 */
#include <immintrin.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"
#include "quant_zmm_emul.h"

#define fgq_bf16_emul_w16_gemm fgq_bf16_emul2_w16_gemm
#define fgq_bf16_emul_xpack fgq_bf16_emul2_xpack
#include "quant_bf16_emul.c"
