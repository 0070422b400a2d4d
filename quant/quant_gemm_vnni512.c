/* quant_gemm_vnni512.c - the int8 GEMM kernel (quant_gemm_kern.h) with AVX512-VNNI VPDPBUSD on ymm
 * registers (compiled with -mavx512vnni -mavx512vl; called only when the CPU and OS run AVX-512
 * and CPUID reports AVX512-VNNI, see quant_gemm.c). */
#define FGQ_VNNI 1
#define FGQ_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define FGQ_GEMM_ENTRY fgq_vnni512_gemm
#include "quant_gemm_kern.h"
