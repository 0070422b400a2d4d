/* quant_w16_emul2.c - the AVX-512 16-bit-weight GEMM (quant/gemm16_avx512.c, fg_w16_gemm's zmm
 * kernel) on AVX2 alone: the file included whole after quant_zmm_emul.h, which emulates its zmm
 * intrinsics (loads, stores, VFMADD231PS with one rounding, VADDPS) in AVX2, exactly. So its
 * loops (slabs, kc blocks, strips, edge tiles, the bias) are tested on CPUs without AVX-512
 * against the AVX2 kernel's bits, as the native kernel is on CPUs with AVX-512
 * (test_quant_gemm). gemm16_avx512.c is a .c file, not a header: it is compiled here a second
 * time, its one entry renamed. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off and no
 * -mavx512*; called where the CPU runs AVX2. Entry: fgq_avx512_emul2_w16_gemm.
 */
#include <immintrin.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"
#include "quant_zmm_emul.h"

#define fgq_avx512_w16_gemm fgq_avx512_emul2_w16_gemm
#include "gemm16_avx512.c"
