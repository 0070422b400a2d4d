/* gemm16_bf16.c - the 16-bit-weight GEMM with AVX512-BF16 (VDPBF16PS): weights and x rounded to
 * bfloat16, products summed in binary32 (gemm16.c; compiled with -mavx512bf16 -mavx512f
 * -mavx512bw -mavx512vl -mf16c; called by fg_w16_gemm_bf16, the --compute bf16 path, only when
 * the CPU reports AVX512-BF16).
 *
 * Why not the default: bfloat16 has 8 significant bits where binary16 has 11, so F16 weights
 * lose three bits and x loses sixteen; VDPBF16PS also treats subnormal inputs as zero. The
 * result is within
 * about 2^-8 of sum |x w| of the exact sum, not the FMA kernels' 2^-24-per-term bound
 * (test_w16_bf16 checks the kernel against a scalar reference that rounds the same way; the
 * perplexity row is in docs/accuracy.md).
 *
 * Loops: the AVX-512 kernel's (gemm16_avx512.c), with the panel of 32 weight rows stored as
 * bfloat16 pairs [nc / 32][kc / 2][32][2] (a pair of consecutive k of one row is one 32-bit
 * lane, as VDPBF16PS multiplies them) and x rounded and packed once per Linear by
 * fg_xpack_bf16 (pairs [panel][kc / 2][6][2] per kc block; converting x per call and weight
 * block was 9-15% of an opt-1.3b prefill's CPU time), each MC-row block met by every strip.
 * A tile is 6 x 32: 12 zmm accumulators, per k pair two weight loads, six broadcasts, twelve
 * VDPBF16PS. Each kc block's sums are stored (first block, from the bias) or added to y, as the
 * other kernels.
 *
 * The body is gemm16_bf16_kern.h, with the bfloat16 instructions behind macros: this file maps
 * them on the instructions, tests/quant_bf16_emul.c on exact emulations (Intel's pseudo-code:
 * per step one binary32 FMA, the pair's high halves first, denormal inputs read as zero and
 * denormal results flushed; conversions rounded to nearest even with denormals flushed), so the
 * body is tested bit for bit on AVX-512 CPUs without AVX512-BF16 too (test_quant_gemm).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_cvt1(float f)
{
    __m128bh h = _mm_cvtneps_pbh(_mm_set1_ps(f));
    uint16_t out;
    memcpy(&out, &h, 2);
    return out;
}

#define FGQ_BF16_DP(acc, a, b) _mm512_dpbf16_ps((acc), (__m512bh)(a), (__m512bh)(b))
#define FGQ_BF16_CVT32(hi, lo) ((__m512i)_mm512_cvtne2ps_pbh((hi), (lo)))
#define FGQ_BF16_CVT16(v) ((__m256i)_mm512_cvtneps_pbh(v))
#define FGQ_BF16_CVT1(f) bf16_cvt1(f)
#define FGQ_BF16_GEMM_ENTRY fgq_bf16_w16_gemm
#define FGQ_BF16_XPACK_ENTRY fgq_bf16_xpack
#include "gemm16_bf16_kern.h"
