/* quant_vnni_emul.c - the VPDPBUSD build of the int8 GEMM kernel (quant/quant_gemm_kern.h with
 * FGQ_VNNI 1) with the instruction emulated in AVX2, so that the VNNI kernels' logic (Q4 and Q8
 * paths, no Q8 recentring) is tested on CPUs that lack the instruction. Compiled with -mavx2
 * -mf16c -mfma; test_quant_gemm calls it only when the CPU runs AVX2. */
#include <immintrin.h>

/* acc + per int32 lane the sum of the 4 products unsigned byte x signed byte, exactly, as
 * VPDPBUSD: bytes widened to int16, pair sums with VPMADDWD (at most 2 * 255 * 128), then the
 * adjacent pairs added and put back in lane order. */
static inline __m256i emu_dpbusd(__m256i acc, __m256i u, __m256i s)
{
    __m256i ua = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(u));
    __m256i ub = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1));
    __m256i sa = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(s));
    __m256i sb = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(s, 1));
    __m256i q = _mm256_hadd_epi32(_mm256_madd_epi16(ua, sa), _mm256_madd_epi16(ub, sb));
    q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
    return _mm256_add_epi32(acc, q);
}

#define FGQ_VNNI 1
#define FGQ_DPBUSD(acc, u, s) emu_dpbusd((acc), (u), (s))
#define FGQ_GEMM_ENTRY fgq_vnni_emul_gemm
#include "quant_gemm_kern.h"
