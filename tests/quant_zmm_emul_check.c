/* quant_zmm_emul_check.c - each emulation in quant_zmm_emul.h against the AVX-512 instruction
 * it stands for, bit for bit, on operands over whole domains: every lane from random bits, zeros
 * and denormals, Inf, quiet and signalling NaN, ties, values near 1 (where an FMA's one rounding
 * shows) and tiny normals (results that fall under 2^-126), every mask value at random, shift
 * counts past 31, unaligned addresses. The kernel-body tests see only the values the bodies
 * make (a masked-off lane's load is never used; VPCMPUD there compares values under 2^31); this
 * checks the claim of exactness for what a body changed tomorrow might use. One freedom: which
 * NaN of several inputs an add, multiply or FMA returns (see same_f). Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c -ffp-contract=off and FGZ_KEEP_NAMES, so
 * both the fgz_ functions and the real intrinsics are in reach; called by test_quant_gemm only
 * where the CPU runs AVX-512. The fgz_ code compiled here is the code quant_*_emul2.c compile
 * for AVX2: the compiler keeps its semantics whatever registers it picks (and FP contraction is
 * off in both).
 */
#define FGZ_KEEP_NAMES
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant_zmm_emul.h"

int fgz_emul_check(uint64_t seed, int rounds, const char **first);

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* one 32-bit lane, as float bits, from one of the classes above */
static uint32_t lane(uint64_t *s)
{
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
        0x7F800001u, 0xFFA5A5A5u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u, 0x80800000u,
        0x3F800000u, 0xBF800000u, 0x3F808000u, 0x3F818000u, 0x007FFFFFu, 0x7FFF8000u,
    };
    uint64_t r = xs(s);
    uint32_t sign = (uint32_t)(r >> 63) << 31, mant = (uint32_t)(r >> 20) & 0x7FFFFFu;
    switch (r % 8) {
    case 0: return (uint32_t)(r >> 32);
    case 1: return sign | mant;                                  /* zero or denormal */
    case 2: return special[(r >> 8) % (sizeof special / sizeof *special)];
    case 3: return sign | (uint32_t)(126 + (r >> 8) % 3) << 23 | mant; /* near 1 */
    case 4: return sign | (uint32_t)(1 + (r >> 8) % 4) << 23 | mant;   /* tiny normals */
    default: return sign | (uint32_t)(100 + (r >> 8) % 55) << 23 | mant;
    }
}

static fgz_m512 ef(const uint32_t *u)
{
    fgz_m512 r;
    memcpy(&r, u, 64);
    return r;
}
static fgz_m512i ei(const uint32_t *u)
{
    fgz_m512i r;
    memcpy(&r, u, 64);
    return r;
}
static __m512 zf(const uint32_t *u) { return _mm512_loadu_ps(u); }
static __m512i zi(const uint32_t *u) { return _mm512_loadu_si512(u); }
static __m256i yi(const uint32_t *u) { return _mm256_loadu_si256((const __m256i *)u); }

typedef struct tally {
    int bad;
    const char *first;
} tally;

static void same(tally *t, const char *name, const void *emu, const void *real, size_t n)
{
    if (memcmp(emu, real, n)) {
        if (!t->bad++)
            t->first = name;
    }
}

/* emu and real of the same size, compared whole */
#define SAME(name, emu, real)                                                                     \
    do {                                                                                          \
        __typeof__(emu) e_ = (emu);                                                               \
        __typeof__(real) r_ = (real);                                                             \
        _Static_assert(sizeof e_ == sizeof r_, name);                                             \
        same(t, name, &e_, &r_, sizeof e_);                                                       \
    } while (0)

static void check_memory(tally *t, uint64_t *s, const uint32_t *a, fgz_mmask16 k)
{
    uint32_t be[48], br[48];
    for (int i = 0; i < 48; i++)
        be[i] = br[i] = lane(s);
    unsigned off = (unsigned)(xs(s) % 16);
    SAME("loadu_ps", fgz_mm512_loadu_ps(be + off), _mm512_loadu_ps(br + off));
    SAME("loadu_si512", fgz_mm512_loadu_si512(be + off), _mm512_loadu_si512(br + off));
    SAME("maskz_loadu_ps", fgz_mm512_maskz_loadu_ps(k, be + off),
         _mm512_maskz_loadu_ps(k, br + off));
    fgz_mm512_mask_storeu_ps(be + off, k, ef(a));
    _mm512_mask_storeu_ps(br + off, k, zf(a));
    same(t, "mask_storeu_ps", be, br, sizeof be);
    off = (unsigned)(xs(s) % 16);
    fgz_mm512_storeu_ps(be + off, ef(a + 16));
    _mm512_storeu_ps(br + off, zf(a + 16));
    same(t, "storeu_ps", be, br, sizeof be);
    off = (unsigned)(xs(s) % 16);
    fgz_mm512_storeu_si512(be + off, ei(a + 32));
    _mm512_storeu_si512(br + off, zi(a + 32));
    same(t, "storeu_si512", be, br, sizeof be);
}

static void check_sets_casts(tally *t, const uint32_t *a, const uint32_t *b)
{
    float f;
    memcpy(&f, a, 4);
    SAME("setzero_ps", fgz_mm512_setzero_ps(), _mm512_setzero_ps());
    SAME("setzero_si512", fgz_mm512_setzero_si512(), _mm512_setzero_si512());
    SAME("set1_ps", fgz_mm512_set1_ps(f), _mm512_set1_ps(f));
    SAME("set1_epi32", fgz_mm512_set1_epi32((int)a[1]), _mm512_set1_epi32((int)a[1]));
    SAME("set1_epi16", fgz_mm512_set1_epi16((short)a[2]), _mm512_set1_epi16((short)a[2]));
    SAME("castsi512_ps", fgz_mm512_castsi512_ps(ei(a)), _mm512_castsi512_ps(zi(a)));
    SAME("castps_si512", fgz_mm512_castps_si512(ef(a)), _mm512_castps_si512(zf(a)));
    SAME("castsi512_si128", fgz_mm512_castsi512_si128(ei(a)), _mm512_castsi512_si128(zi(a)));
    /* the upper half of a widening cast is undefined: the lower compared */
    fgz_m512i e = fgz_mm512_castsi256_si512(yi(b));
    __m512i r = _mm512_castsi256_si512(yi(b));
    same(t, "castsi256_si512", &e, &r, 32);
    SAME("inserti64x4 0", fgz_mm512_inserti64x4(ei(a), yi(b), 0),
         _mm512_inserti64x4(zi(a), yi(b), 0));
    SAME("inserti64x4 1", fgz_mm512_inserti64x4(ei(a), yi(b), 1),
         _mm512_inserti64x4(zi(a), yi(b), 1));
}

static int nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

/* a float operation's 16 lanes, bit for bit but where a lane's inputs (a, b, and c unless NULL)
 * hold two NaN or more: which of them comes out (quieted) follows the operand order, and the
 * compiler may swap the operands of an add or a multiply (and of an FMA's product), in the
 * emulation and in the zmm code alike; there both must be NaN. */
static void same_f(tally *t, const char *name, fgz_m512 emu, __m512 real, const uint32_t *a,
                   const uint32_t *b, const uint32_t *c)
{
    uint32_t e[16], r[16];
    memcpy(e, &emu, 64), memcpy(r, &real, 64);
    for (int i = 0; i < 16; i++) {
        int nans = nan_bits(a[i]) + nan_bits(b[i]) + (c && nan_bits(c[i]));
        if (e[i] != r[i] && !(nans >= 2 && nan_bits(e[i]) && nan_bits(r[i]))) {
            same(t, name, &e[i], &r[i], 4);
            return;
        }
    }
}

static void check_float(tally *t, const uint32_t *a, const uint32_t *b, const uint32_t *c)
{
    same_f(t, "add_ps", fgz_mm512_add_ps(ef(a), ef(b)), _mm512_add_ps(zf(a), zf(b)), a, b, NULL);
    same_f(t, "mul_ps", fgz_mm512_mul_ps(ef(a), ef(b)), _mm512_mul_ps(zf(a), zf(b)), a, b, NULL);
    same_f(t, "fmadd_ps", fgz_mm512_fmadd_ps(ef(a), ef(b), ef(c)),
           _mm512_fmadd_ps(zf(a), zf(b), zf(c)), a, b, c);
    SAME("cvtepi32_ps", fgz_mm512_cvtepi32_ps(ei(a)), _mm512_cvtepi32_ps(zi(a)));
    SAME("cvtph_ps", fgz_mm512_cvtph_ps(yi(b)), _mm512_cvtph_ps(yi(b)));
}

static void check_int(tally *t, const uint32_t *a, const uint32_t *b, fgz_mmask16 k, unsigned n)
{
    SAME("cvtepu16_epi32", fgz_mm512_cvtepu16_epi32(yi(a)), _mm512_cvtepu16_epi32(yi(a)));
    SAME("cvtepi32_epi16", fgz_mm512_cvtepi32_epi16(ei(a)), _mm512_cvtepi32_epi16(zi(a)));
    SAME("add_epi32", fgz_mm512_add_epi32(ei(a), ei(b)), _mm512_add_epi32(zi(a), zi(b)));
    SAME("and_si512", fgz_mm512_and_si512(ei(a), ei(b)), _mm512_and_si512(zi(a), zi(b)));
    SAME("slli_epi32", fgz_mm512_slli_epi32(ei(a), n), _mm512_slli_epi32(zi(a), n));
    SAME("srli_epi32", fgz_mm512_srli_epi32(ei(a), n), _mm512_srli_epi32(zi(a), n));
    SAME("maddubs_epi16", fgz_mm512_maddubs_epi16(ei(a), ei(b)),
         _mm512_maddubs_epi16(zi(a), zi(b)));
    SAME("madd_epi16", fgz_mm512_madd_epi16(ei(a), ei(b)), _mm512_madd_epi16(zi(a), zi(b)));
    SAME("testn_epi32_mask", fgz_mm512_testn_epi32_mask(ei(a), ei(b)),
         _mm512_testn_epi32_mask(zi(a), zi(b)));
    SAME("cmpgt_epu32_mask", fgz_mm512_cmpgt_epu32_mask(ei(a), ei(b)),
         _mm512_cmpgt_epu32_mask(zi(a), zi(b)));
    SAME("mask_and_epi32", fgz_mm512_mask_and_epi32(ei(a + 16), k, ei(a), ei(b)),
         _mm512_mask_and_epi32(zi(a + 16), k, zi(a), zi(b)));
    SAME("mask_or_epi32", fgz_mm512_mask_or_epi32(ei(a + 16), k, ei(a), ei(b)),
         _mm512_mask_or_epi32(zi(a + 16), k, zi(a), zi(b)));
}

/* The emulations against the instructions, `rounds` rounds of operands drawn from seed (not 0):
 * the number of mismatches, and in *first the intrinsic of the first one (NULL if none). */
int fgz_emul_check(uint64_t seed, int rounds, const char **first)
{
    tally t = {0, NULL};
    uint64_t s = seed;
    for (int r = 0; r < rounds; r++) {
        uint32_t a[48], b[16], c[16];
        for (int i = 0; i < 48; i++)
            a[i] = lane(&s);
        for (int i = 0; i < 16; i++)
            b[i] = lane(&s), c[i] = lane(&s);
        if (r % 4 == 1) /* lanes equal, or one apart, in a (the compares' edges) */
            for (int i = 0; i < 16; i++)
                b[i] = a[i] + (uint32_t)(xs(&s) % 3) - 1;
        uint64_t x = xs(&s);
        fgz_mmask16 k = r % 7 == 0 ? 0 : r % 7 == 1 ? 0xFFFF : (fgz_mmask16)x;
        check_memory(&t, &s, a, k);
        check_sets_casts(&t, a, b);
        check_float(&t, a, b, c);
        check_int(&t, a, b, k, (unsigned)(x >> 16) % 34);
    }
    *first = t.first;
    return t.bad;
}
