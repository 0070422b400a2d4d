/* quant_gemm_vnni.c - the int8 GEMM kernel (quant_gemm_kern.h) with AVX-VNNI VPDPBUSD (compiled
 * with -mavxvnni; called only when CPUID reports AVX-VNNI, see quant_gemm.c). */
#define FGQ_VNNI 1
#define FGQ_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define FGQ_GEMM_ENTRY fgq_vnni_gemm
#include "quant_gemm_kern.h"
