/* quant_q4p_emul.c - the AVX512-VNNI Q4 panel kernel's body (quant/gemm_q4p_kern512.h) with
 * VPDPBUSD emulated in AVX-512 BW, so that its logic (packing, tiles, edges, k blocks, the float
 * terms) is tested on AVX-512 CPUs without VNNI (Skylake-X class); on CPUs with VNNI the native
 * build runs too and both are compared. Compiled with -mavx512f -mavx512bw -mavx512vl; called
 * only when the CPU runs AVX-512 (test_quant_gemm). CPUs without AVX-512 cannot run either
 * (no zmm registers): quant_q4p_emul2.c includes this file after emulating the zmm intrinsics
 * in AVX2, and runs there.
 *
 * The emulation is exact for Q4: VPMADDUBSW's pair sums of unsigned codes (0..15) and signed
 * activations (-127..127) are at most 2 x 15 x 127 = 3810, far from its 16-bit saturation; then
 * VPMADDWD with ones adds the pairs into the int32 lanes VPDPBUSD adds its 4 products into. */
#include <immintrin.h>

static inline __m512i emu_dpbusd512(__m512i acc, __m512i u, __m512i s)
{
    __m512i pairs = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
}

#define FGQ_DPBUSD512(acc, u, s) emu_dpbusd512((acc), (u), (s))
#define FGQ_PANEL512_ENTRY fgq_q4p_emul512_gemm_panel
#include "gemm_q4p_kern512.h"
