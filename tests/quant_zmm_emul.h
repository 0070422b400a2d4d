/* quant_zmm_emul.h - the AVX-512 intrinsics quant/'s zmm kernel bodies use, emulated in AVX2, so
 * that those bodies (and the instruction emulations written with zmm intrinsics in
 * quant_bf16_emul.c and quant_q4p_emul.c) compile and run on CPUs without AVX-512: each
 * <body>_emul2.c includes this header and then the body (see quant_bf16_emul2.c). Test-only.
 *
 * How: after <immintrin.h> (and any header whose declarations must keep the real types), macros
 * rename __m512, __m512i, __mmask16 and each _mm512_* the bodies call to the fgz_ twins here; a
 * body included after that is compiled with -mavx2 -mfma -mf16c and no -mavx512* (a _mm512_*
 * left out here then fails to compile: the real one cannot inline without AVX-512, or its
 * operands are of the wrong type). A zmm is two ymm, h[0] lanes 0..7 and h[1] lanes 8..15; a
 * mask is 16 bits, bit i lane i, as in a k register.
 *
 * Exact: every float operation is the same IEEE binary32 operation per lane as the zmm
 * instruction (VADDPS, VMULPS, VFMADD..PS with one rounding, VCVTDQ2PS: the same rounding mode
 * from the same MXCSR, nearest even, no FTZ/DAZ by default), and the integer ones are exact (the
 * 16-bit packs of VPMOVDW's truncation mask each lane to 16 bits first, so the unsigned
 * saturation of VPACKUSDW never acts). The includer compiles with -ffp-contract=off: gcc writes
 * _mm256_add_ps and _mm256_mul_ps as vector + and *, which it may otherwise fuse into an FMA
 * that the zmm code did not have. Masked loads and stores use VMASKMOVPS, which like the zmm
 * instructions neither reads nor writes the masked-off lanes (no fault past an array's end;
 * ASan sees neither kind, it checks the plain loads and stores).
 * test_quant_gemm compares each emulated build with the AVX-512 one (emulated instructions or
 * native) bit for bit where the CPU has AVX-512, and with the scalar reference or the AVX2
 * kernel everywhere with AVX2; where the CPU has AVX-512, quant_zmm_emul_check.c also compares
 * each emulation here with its instruction on random and corner operands, whole domains (every
 * lane, every mask, NaN, Inf, denormals), not only the values the bodies make.
 */
#ifndef FG_QUANT_ZMM_EMUL_H
#define FG_QUANT_ZMM_EMUL_H

#include <immintrin.h>
#include <stdint.h>

typedef struct fgz_m512 {
    __m256 h[2]; /* lanes 0..7, 8..15 */
} fgz_m512;
typedef struct fgz_m512i {
    __m256i h[2]; /* bytes 0..31, 32..63 */
} fgz_m512i;
typedef uint16_t fgz_mmask16;

/* the lanes of k's 8 bits (bit i: lane i) as all-ones or zero 32-bit lanes */
static inline __m256i fgz_lanes(unsigned k8)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(k8 & 0xFF)), bit), bit);
}

/* the top bits of two ymm of 32-bit lanes (all-ones or zero) as a 16-bit mask */
static inline fgz_mmask16 fgz_mask(__m256i lo, __m256i hi)
{
    return (fgz_mmask16)(_mm256_movemask_ps(_mm256_castsi256_ps(lo)) |
                         _mm256_movemask_ps(_mm256_castsi256_ps(hi)) << 8);
}

/* ---- set, load, store ---- */
static inline fgz_m512 fgz_mm512_setzero_ps(void)
{
    return (fgz_m512){{_mm256_setzero_ps(), _mm256_setzero_ps()}};
}
static inline fgz_m512i fgz_mm512_setzero_si512(void)
{
    return (fgz_m512i){{_mm256_setzero_si256(), _mm256_setzero_si256()}};
}
static inline fgz_m512 fgz_mm512_set1_ps(float f)
{
    return (fgz_m512){{_mm256_set1_ps(f), _mm256_set1_ps(f)}};
}
static inline fgz_m512i fgz_mm512_set1_epi32(int v)
{
    return (fgz_m512i){{_mm256_set1_epi32(v), _mm256_set1_epi32(v)}};
}
static inline fgz_m512i fgz_mm512_set1_epi16(short v)
{
    return (fgz_m512i){{_mm256_set1_epi16(v), _mm256_set1_epi16(v)}};
}
static inline fgz_m512 fgz_mm512_loadu_ps(const void *p)
{
    const float *f = p;
    return (fgz_m512){{_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8)}};
}
static inline fgz_m512i fgz_mm512_loadu_si512(const void *p)
{
    const __m256i *v = p;
    return (fgz_m512i){{_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)}};
}
static inline void fgz_mm512_storeu_ps(void *p, fgz_m512 a)
{
    float *f = p;
    _mm256_storeu_ps(f, a.h[0]), _mm256_storeu_ps(f + 8, a.h[1]);
}
static inline void fgz_mm512_storeu_si512(void *p, fgz_m512i a)
{
    __m256i *v = p;
    _mm256_storeu_si256(v, a.h[0]), _mm256_storeu_si256(v + 1, a.h[1]);
}
/* lanes of k loaded, the rest zero; the masked-off lanes' memory is not read */
static inline fgz_m512 fgz_mm512_maskz_loadu_ps(fgz_mmask16 k, const void *p)
{
    const float *f = p;
    return (fgz_m512){{_mm256_maskload_ps(f, fgz_lanes(k)),
                       _mm256_maskload_ps(f + 8, fgz_lanes(k >> 8))}};
}
/* lanes of k stored; the masked-off lanes' memory is not written */
static inline void fgz_mm512_mask_storeu_ps(void *p, fgz_mmask16 k, fgz_m512 a)
{
    float *f = p;
    _mm256_maskstore_ps(f, fgz_lanes(k), a.h[0]);
    _mm256_maskstore_ps(f + 8, fgz_lanes(k >> 8), a.h[1]);
}

/* ---- casts (no instruction; the upper half of a widening cast is undefined: zero here) ---- */
static inline fgz_m512 fgz_mm512_castsi512_ps(fgz_m512i a)
{
    return (fgz_m512){{_mm256_castsi256_ps(a.h[0]), _mm256_castsi256_ps(a.h[1])}};
}
static inline fgz_m512i fgz_mm512_castps_si512(fgz_m512 a)
{
    return (fgz_m512i){{_mm256_castps_si256(a.h[0]), _mm256_castps_si256(a.h[1])}};
}
static inline fgz_m512i fgz_mm512_castsi256_si512(__m256i a)
{
    return (fgz_m512i){{a, _mm256_setzero_si256()}};
}
static inline __m128i fgz_mm512_castsi512_si128(fgz_m512i a)
{
    return _mm256_castsi256_si128(a.h[0]);
}
/* VINSERTI64X4: a with its half imm & 1 replaced by b */
static inline fgz_m512i fgz_mm512_inserti64x4(fgz_m512i a, __m256i b, int imm)
{
    a.h[imm & 1] = b;
    return a;
}

/* ---- float arithmetic: per lane, the zmm instruction's rounding ---- */
static inline fgz_m512 fgz_mm512_add_ps(fgz_m512 a, fgz_m512 b)
{
    return (fgz_m512){{_mm256_add_ps(a.h[0], b.h[0]), _mm256_add_ps(a.h[1], b.h[1])}};
}
static inline fgz_m512 fgz_mm512_mul_ps(fgz_m512 a, fgz_m512 b)
{
    return (fgz_m512){{_mm256_mul_ps(a.h[0], b.h[0]), _mm256_mul_ps(a.h[1], b.h[1])}};
}
/* a * b + c, one rounding */
static inline fgz_m512 fgz_mm512_fmadd_ps(fgz_m512 a, fgz_m512 b, fgz_m512 c)
{
    return (fgz_m512){{_mm256_fmadd_ps(a.h[0], b.h[0], c.h[0]),
                       _mm256_fmadd_ps(a.h[1], b.h[1], c.h[1])}};
}

/* ---- conversions ---- */
static inline fgz_m512 fgz_mm512_cvtepi32_ps(fgz_m512i a)
{
    return (fgz_m512){{_mm256_cvtepi32_ps(a.h[0]), _mm256_cvtepi32_ps(a.h[1])}};
}
/* VCVTPH2PS: 16 halves (exact widening) */
static inline fgz_m512 fgz_mm512_cvtph_ps(__m256i a)
{
    return (fgz_m512){{_mm256_cvtph_ps(_mm256_castsi256_si128(a)),
                       _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1))}};
}
/* VPMOVZXWD: 16 unsigned words to 32-bit lanes */
static inline fgz_m512i fgz_mm512_cvtepu16_epi32(__m256i a)
{
    return (fgz_m512i){{_mm256_cvtepu16_epi32(_mm256_castsi256_si128(a)),
                        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1))}};
}
/* VPMOVDW: each 32-bit lane's low word, in lane order. VPACKUSDW on the lanes masked to 16 bits
 * (no saturation), which interleaves the two inputs by 128-bit lane: the qword permute puts
 * them back in order. */
static inline __m256i fgz_mm512_cvtepi32_epi16(fgz_m512i a)
{
    const __m256i low = _mm256_set1_epi32(0xFFFF);
    __m256i p = _mm256_packus_epi32(_mm256_and_si256(a.h[0], low), _mm256_and_si256(a.h[1], low));
    return _mm256_permute4x64_epi64(p, 0xD8);
}

/* ---- integer arithmetic and logic ---- */
static inline fgz_m512i fgz_mm512_add_epi32(fgz_m512i a, fgz_m512i b)
{
    return (fgz_m512i){{_mm256_add_epi32(a.h[0], b.h[0]), _mm256_add_epi32(a.h[1], b.h[1])}};
}
static inline fgz_m512i fgz_mm512_and_si512(fgz_m512i a, fgz_m512i b)
{
    return (fgz_m512i){{_mm256_and_si256(a.h[0], b.h[0]), _mm256_and_si256(a.h[1], b.h[1])}};
}
static inline fgz_m512i fgz_mm512_slli_epi32(fgz_m512i a, unsigned n)
{
    return (fgz_m512i){{_mm256_slli_epi32(a.h[0], (int)n), _mm256_slli_epi32(a.h[1], (int)n)}};
}
static inline fgz_m512i fgz_mm512_srli_epi32(fgz_m512i a, unsigned n)
{
    return (fgz_m512i){{_mm256_srli_epi32(a.h[0], (int)n), _mm256_srli_epi32(a.h[1], (int)n)}};
}
/* VPMADDUBSW: unsigned bytes of a times signed bytes of b, adjacent pairs summed, saturated */
static inline fgz_m512i fgz_mm512_maddubs_epi16(fgz_m512i a, fgz_m512i b)
{
    return (fgz_m512i){{_mm256_maddubs_epi16(a.h[0], b.h[0]),
                        _mm256_maddubs_epi16(a.h[1], b.h[1])}};
}
/* VPMADDWD: signed words multiplied, adjacent pairs summed into 32-bit lanes */
static inline fgz_m512i fgz_mm512_madd_epi16(fgz_m512i a, fgz_m512i b)
{
    return (fgz_m512i){{_mm256_madd_epi16(a.h[0], b.h[0]), _mm256_madd_epi16(a.h[1], b.h[1])}};
}

/* ---- masks ---- */
/* VPTESTNMD: bit i set where lane i of a & b is zero */
static inline fgz_mmask16 fgz_mm512_testn_epi32_mask(fgz_m512i a, fgz_m512i b)
{
    const __m256i z = _mm256_setzero_si256();
    return fgz_mask(_mm256_cmpeq_epi32(_mm256_and_si256(a.h[0], b.h[0]), z),
                    _mm256_cmpeq_epi32(_mm256_and_si256(a.h[1], b.h[1]), z));
}
/* VPCMPUD (greater than): the unsigned order is the signed one with the sign bits flipped */
static inline fgz_mmask16 fgz_mm512_cmpgt_epu32_mask(fgz_m512i a, fgz_m512i b)
{
    const __m256i s = _mm256_set1_epi32((int)0x80000000u);
    return fgz_mask(_mm256_cmpgt_epi32(_mm256_xor_si256(a.h[0], s), _mm256_xor_si256(b.h[0], s)),
                    _mm256_cmpgt_epi32(_mm256_xor_si256(a.h[1], s), _mm256_xor_si256(b.h[1], s)));
}
/* lanes of k from r, the rest from src (merge masking) */
static inline fgz_m512i fgz_merge(fgz_m512i src, fgz_mmask16 k, fgz_m512i r)
{
    return (fgz_m512i){{_mm256_blendv_epi8(src.h[0], r.h[0], fgz_lanes(k)),
                        _mm256_blendv_epi8(src.h[1], r.h[1], fgz_lanes(k >> 8))}};
}
static inline fgz_m512i fgz_mm512_mask_and_epi32(fgz_m512i src, fgz_mmask16 k, fgz_m512i a,
                                                 fgz_m512i b)
{
    return fgz_merge(src, k, fgz_mm512_and_si512(a, b));
}
static inline fgz_m512i fgz_mm512_mask_or_epi32(fgz_m512i src, fgz_mmask16 k, fgz_m512i a,
                                                fgz_m512i b)
{
    fgz_m512i r = {{_mm256_or_si256(a.h[0], b.h[0]), _mm256_or_si256(a.h[1], b.h[1])}};
    return fgz_merge(src, k, r);
}

/* ---- the renames: what follows this header (the kernel body) sees only the emulation. The
 * #undef first: without optimization gcc's headers define some of these as macros.
 * FGZ_KEEP_NAMES leaves them out, for quant_zmm_emul_check.c, which calls both. ---- */
#ifndef FGZ_KEEP_NAMES
#undef __m512
#undef __m512i
#undef __mmask16
#define __m512 fgz_m512
#define __m512i fgz_m512i
#define __mmask16 fgz_mmask16
#undef _mm512_setzero_ps
#undef _mm512_setzero_si512
#undef _mm512_set1_ps
#undef _mm512_set1_epi32
#undef _mm512_set1_epi16
#undef _mm512_loadu_ps
#undef _mm512_loadu_si512
#undef _mm512_storeu_ps
#undef _mm512_storeu_si512
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_castsi512_ps
#undef _mm512_castps_si512
#undef _mm512_castsi256_si512
#undef _mm512_castsi512_si128
#undef _mm512_inserti64x4
#undef _mm512_add_ps
#undef _mm512_mul_ps
#undef _mm512_fmadd_ps
#undef _mm512_cvtepi32_ps
#undef _mm512_cvtph_ps
#undef _mm512_cvtepu16_epi32
#undef _mm512_cvtepi32_epi16
#undef _mm512_add_epi32
#undef _mm512_and_si512
#undef _mm512_slli_epi32
#undef _mm512_srli_epi32
#undef _mm512_maddubs_epi16
#undef _mm512_madd_epi16
#undef _mm512_testn_epi32_mask
#undef _mm512_cmpgt_epu32_mask
#undef _mm512_mask_and_epi32
#undef _mm512_mask_or_epi32
#define _mm512_setzero_ps fgz_mm512_setzero_ps
#define _mm512_setzero_si512 fgz_mm512_setzero_si512
#define _mm512_set1_ps fgz_mm512_set1_ps
#define _mm512_set1_epi32 fgz_mm512_set1_epi32
#define _mm512_set1_epi16 fgz_mm512_set1_epi16
#define _mm512_loadu_ps fgz_mm512_loadu_ps
#define _mm512_loadu_si512 fgz_mm512_loadu_si512
#define _mm512_storeu_ps fgz_mm512_storeu_ps
#define _mm512_storeu_si512 fgz_mm512_storeu_si512
#define _mm512_maskz_loadu_ps fgz_mm512_maskz_loadu_ps
#define _mm512_mask_storeu_ps fgz_mm512_mask_storeu_ps
#define _mm512_castsi512_ps fgz_mm512_castsi512_ps
#define _mm512_castps_si512 fgz_mm512_castps_si512
#define _mm512_castsi256_si512 fgz_mm512_castsi256_si512
#define _mm512_castsi512_si128 fgz_mm512_castsi512_si128
#define _mm512_inserti64x4 fgz_mm512_inserti64x4
#define _mm512_add_ps fgz_mm512_add_ps
#define _mm512_mul_ps fgz_mm512_mul_ps
#define _mm512_fmadd_ps fgz_mm512_fmadd_ps
#define _mm512_cvtepi32_ps fgz_mm512_cvtepi32_ps
#define _mm512_cvtph_ps fgz_mm512_cvtph_ps
#define _mm512_cvtepu16_epi32 fgz_mm512_cvtepu16_epi32
#define _mm512_cvtepi32_epi16 fgz_mm512_cvtepi32_epi16
#define _mm512_add_epi32 fgz_mm512_add_epi32
#define _mm512_and_si512 fgz_mm512_and_si512
#define _mm512_slli_epi32 fgz_mm512_slli_epi32
#define _mm512_srli_epi32 fgz_mm512_srli_epi32
#define _mm512_maddubs_epi16 fgz_mm512_maddubs_epi16
#define _mm512_madd_epi16 fgz_mm512_madd_epi16
#define _mm512_testn_epi32_mask fgz_mm512_testn_epi32_mask
#define _mm512_cmpgt_epu32_mask fgz_mm512_cmpgt_epu32_mask
#define _mm512_mask_and_epi32 fgz_mm512_mask_and_epi32
#define _mm512_mask_or_epi32 fgz_mm512_mask_or_epi32
#endif /* FGZ_KEEP_NAMES */

#endif
