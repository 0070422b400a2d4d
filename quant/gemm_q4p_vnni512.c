/* gemm_q4p_vnni512.c - the prefill's int8 GEMM on Q4 weights with AVX512-VNNI: the panel kernel
 * body (gemm_q4p_kern512.h) with VPDPBUSD on zmm registers, its inner sequence in assembly (compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni; called only when the CPU and OS run AVX-512 and CPUID reports
 * AVX512-VNNI, see quant_gemm.c). */
#define FGQ_DPBUSD512_ASM 1
#define FGQ_PANEL512_ENTRY fgq_vnni512_gemm_panel
#include "gemm_q4p_kern512.h"
