/* quant_bf16_emul.c - the AVX512-BF16 16-bit-weight GEMM's body (quant/gemm16_bf16_kern.h) with
 * VDPBF16PS, VCVTNE2PS2BF16 and VCVTNEPS2BF16 emulated in AVX-512 F/BW, so that its logic
 * (weight and x packing, tiles, edge strips, kc blocks, the half pair of odd k) is tested on
 * AVX-512 CPUs without AVX512-BF16; on CPUs with it the native build runs too and both are
 * compared bit for bit (test_quant_gemm). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx2
 * -mf16c -mfma. CPUs without AVX-512 cannot run this build (zmm registers): quant_bf16_emul2.c
 * includes this file after emulating the zmm intrinsics in AVX2, and runs there.
 *
 * The emulations follow Intel's pseudo-code (SDM vol. 2, VDPBF16PS and convert_fp32_to_bfloat16):
 *  - VDPBF16PS, per 32-bit lane: acc += a.hi * b.hi, then acc += a.lo * b.lo, each step one
 *    binary32 FMA rounded to nearest even, with denormal inputs (acc, a, b) read as signed zero
 *    and denormal results flushed to signed zero; MXCSR is not used. Here: the inputs masked to
 *    signed zero where their exponent is 0, VFMADD (one rounding; MXCSR at its default, nearest
 *    even without FTZ/DAZ), the result masked the same way.
 *  - the conversions: zero or denormal -> signed zero; NaN -> its top half with bit 6 set (quiet);
 *    else the integer add x + 0x7FFF + bit 16 of x, top half (nearest even, Inf stays Inf, the
 *    largest values round to Inf).
 * Exact against the instructions but for NaN payloads (which NaN of several inputs comes out)
 * and one corner of FTZ: a result whose exact value lies less than 2^-150 below 2^-126 rounds here
 * to 2^-126 and is kept, where the instruction may flush it (if it detects tininess before
 * rounding, or after rounding with an unbounded exponent for values 2^-151 or more below).
 * Checked against an AMD Zen 4 (4 million random zmm operands each: normal, any exponent, and
 * denormal-heavy inputs; 0 differences outside NaN payloads), not yet against an Intel CPU.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* lanes of v whose exponent field is 0 (zeros and denormals) as signed zero */
static inline __m512 emu_flush(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(
        _mm512_mask_and_epi32(u, tiny, u, _mm512_set1_epi32((int)0x80000000u)));
}

static inline __m512 emu_dpbf16(__m512 acc, __m512i a, __m512i b)
{
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 ahi = emu_flush(_mm512_castsi512_ps(_mm512_and_si512(a, top)));
    __m512 bhi = emu_flush(_mm512_castsi512_ps(_mm512_and_si512(b, top)));
    __m512 alo = emu_flush(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)));
    __m512 blo = emu_flush(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
    acc = emu_flush(_mm512_fmadd_ps(ahi, bhi, emu_flush(acc)));
    return emu_flush(_mm512_fmadd_ps(alo, blo, acc));
}

/* 16 floats to 16 bfloat16, each in the low half of its 32-bit lane (the high half zero) */
static inline __m512i emu_cvt(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_srli_epi32(r, 16);
    __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    __m512i top = _mm512_srli_epi32(u, 16);
    r = _mm512_mask_and_epi32(r, tiny, top, _mm512_set1_epi32(0x8000));
    return _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
}

/* VCVTNE2PS2BF16 hi, lo: words 0..15 from lo, 16..31 from hi */
static inline __m512i emu_cvt32(__m512 hi, __m512 lo)
{
    __m256i l = _mm512_cvtepi32_epi16(emu_cvt(lo)), h = _mm512_cvtepi32_epi16(emu_cvt(hi));
    return _mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1);
}

static inline uint16_t emu_cvt1(float f)
{
    __m512i r = emu_cvt(_mm512_set1_ps(f));
    return (uint16_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(r));
}

#define FGQ_BF16_DP(acc, a, b) emu_dpbf16((acc), (a), (b))
#define FGQ_BF16_CVT32(hi, lo) emu_cvt32((hi), (lo))
#define FGQ_BF16_CVT16(v) _mm512_cvtepi32_epi16(emu_cvt(v))
#define FGQ_BF16_CVT1(f) emu_cvt1(f)
#define FGQ_BF16_GEMM_ENTRY fgq_bf16_emul_w16_gemm
#define FGQ_BF16_XPACK_ENTRY fgq_bf16_emul_xpack
#include "gemm16_bf16_kern.h"
