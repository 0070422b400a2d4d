/* gemm16_bf16_kern.h - the body of the AVX512-BF16 16-bit-weight GEMM (gemm16_bf16.c has the
 * design), included once per build of it. The includer defines the entries' names
 * (FGQ_BF16_GEMM_ENTRY, FGQ_BF16_XPACK_ENTRY) and the four bfloat16 operations the body uses,
 * on plain integer vectors (a 32-bit lane holds a pair, low half first):
 *   FGQ_BF16_DP(acc, a, b)   __m512 acc + per lane a.hi * b.hi, then + a.lo * b.lo (VDPBF16PS)
 *   FGQ_BF16_CVT32(hi, lo)   two __m512 rounded into one __m512i of 32 bfloat16, lo's in the
 *                            low 16 words (VCVTNE2PS2BF16)
 *   FGQ_BF16_CVT16(v)        one __m512 into a __m256i of 16 bfloat16 (VCVTNEPS2BF16)
 *   FGQ_BF16_CVT1(f)         one float into a uint16_t bfloat16 (VCVTNEPS2BF16)
 * gemm16_bf16.c maps them on the instructions; tests/quant_bf16_emul.c on exact emulations in
 * AVX-512 F/BW, so that this body runs on AVX-512 CPUs without AVX512-BF16, and
 * tests/quant_bf16_emul2.c on those with the zmm intrinsics emulated in AVX2 too
 * (tests/quant_zmm_emul.h: an intrinsic added here must be added there).
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"

#define MR FG_XPACK_MR
#define NR 32
#define KC FG_XPACK_KC
#define MC 144 /* rows of x a pass over the strips: 24 panels, 72 KiB of pairs at kc = 256 */
#define NC_MAX 1024

/* bfloat16 of f, rounded to nearest even (VCVTNEPS2BF16's rule; NaN stays NaN). */
static inline uint16_t bf16_1(float f) { return FGQ_BF16_CVT1(f); }

/* 16 weights of a row from k (16 <= kc - k) as f32. */
static inline __m512 widen16(int bf16, const uint16_t *s)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)s);
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* rows [0, nr) of w (the rest zero), columns [0, kc) (kc even, or the last pair's second half
 * zero), into pairs pp[nc/32][kc2][32] (uint32: the row's bf16 pair, low half first). */
static void pack_w(int bf16, const uint16_t *w, uint64_t ldw, uint64_t nr, uint64_t nc,
                   uint64_t kc, uint32_t *pp)
{
    const uint64_t kc2 = (kc + 1) / 2;
    for (uint64_t j = 0; j < nc; j += NR) {
        uint32_t *d = pp + j * kc2;
        for (uint64_t r = 0; r < NR; r += 8) {
            uint64_t kk = 0;
            if (j + r + 8 <= nr)
                for (; kk + 16 <= kc; kk += 16) { /* 8 rows x 8 pairs */
                    __m256 v[8], o[8];
                    for (int t = 0; t < 8; t++) {
                        __m256i h = FGQ_BF16_CVT16(widen16(bf16, w + (j + r + t) * ldw + kk));
                        v[t] = _mm256_castsi256_ps(h);
                    }
                    qp_transpose8(v, o);
                    for (int t = 0; t < 8; t++)
                        _mm256_storeu_ps((float *)(d + (kk / 2 + t) * NR + r), o[t]);
                }
            for (; kk < kc; kk += 2)
                for (uint64_t t = 0; t < 8; t++) {
                    uint64_t row = j + r + t;
                    uint16_t lo = 0, hi = 0;
                    if (row < nr) {
                        lo = bf16_1(qp_widen1(bf16, w[row * ldw + kk]));
                        hi = kk + 1 < kc ? bf16_1(qp_widen1(bf16, w[row * ldw + kk + 1])) : 0;
                    }
                    d[(kk / 2) * NR + r + t] = (uint32_t)lo | (uint32_t)hi << 16;
                }
        }
    }
}

/* fg_xpack_bf16's panels [b0, b1) from x [m, k] (row stride ldx): per 32 columns of a row, two
 * loads rounded by VCVTNE2PS2BF16 into 16 pairs, written to the panel's pair rows. */
void FGQ_BF16_XPACK_ENTRY(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                    uint64_t b0, uint64_t b1)
{
    const uint64_t mp = (m + MR - 1) / MR * MR;
    for (uint64_t p = 0; p < k; p += KC) {
        uint64_t kc = k - p < KC ? k - p : KC, kc2 = (kc + 1) / 2;
        for (uint64_t b = b0; b < b1; b++) {
            uint32_t *d = xb + p / 2 * mp + b * kc2 * MR;
            for (uint64_t i = 0; i < MR; i++) {
                uint64_t r = b * MR + i;
                if (r >= m) {
                    for (uint64_t q = 0; q < kc2; q++)
                        d[q * MR + i] = 0;
                    continue;
                }
                const float *s = x + r * ldx + p;
                uint64_t kk = 0;
                for (; kk + 32 <= kc; kk += 32) {
                    uint32_t t[16];
                    __m512i v = FGQ_BF16_CVT32(_mm512_loadu_ps(s + kk + 16),
                                               _mm512_loadu_ps(s + kk));
                    _mm512_storeu_si512(t, v);
                    for (int q = 0; q < 16; q++)
                        d[(kk / 2 + q) * MR + i] = t[q];
                }
                for (; kk < kc; kk += 2)
                    d[(kk / 2) * MR + i] = (uint32_t)bf16_1(s[kk]) |
                                           (kk + 1 < kc ? (uint32_t)bf16_1(s[kk + 1]) << 16 : 0);
            }
        }
    }
}

#define ROW(i)                                                                                    \
    x = _mm512_set1_epi32((int)a[i]);                                                             \
    c##i##0 = FGQ_BF16_DP(c##i##0, x, b0), c##i##1 = FGQ_BF16_DP(c##i##1, x, b1);

/* c[6][32] (row stride ldc) = a [kc2][6] pairs x b [kc2][32] pairs + bias[32] (first; bias
 * NULL: 0), or += a x b. */
static inline void kernel(uint64_t kc2, const uint32_t *a, const uint32_t *b, float *c,
                          uint64_t ldc, int first, const float *bias)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    if (first && bias) {
        c00 = c10 = c20 = c30 = c40 = c50 = _mm512_loadu_ps(bias);
        c01 = c11 = c21 = c31 = c41 = c51 = _mm512_loadu_ps(bias + 16);
    }
#pragma GCC unroll 4
    for (uint64_t kk = 0; kk < kc2; kk++, a += MR, b += NR) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 16);
        __m512i x;
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
    }
    __m512 r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int i = 0; i < MR; i++) {
        float *p = c + (uint64_t)i * ldc;
        if (first) {
            _mm512_storeu_ps(p, r[2 * i]);
            _mm512_storeu_ps(p + 16, r[2 * i + 1]);
        } else {
            _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), r[2 * i]));
            _mm512_storeu_ps(p + 16, _mm512_add_ps(_mm512_loadu_ps(p + 16), r[2 * i + 1]));
        }
    }
}

/* One strip (32 weight rows, cols of them real) against the converted panels [0, np) of x. */
static void strip(uint64_t kc2, const uint32_t *xb, uint64_t np, uint64_t row0, uint64_t i1,
                  const uint32_t *bw, float *y, uint64_t ldy, uint64_t cols, int first,
                  const float *bj)
{
    float tile[MR * NR] __attribute__((aligned(64))), btile[NR];
    if (bj && cols < NR) {
        memset(btile, 0, sizeof btile);
        memcpy(btile, bj, cols * sizeof *btile);
        bj = btile;
    }
    for (uint64_t b = 0; b < np; b++) {
        uint64_t r = row0 + b * MR, rows = i1 - r < MR ? i1 - r : MR;
        float *yt = y + r * ldy;
        const uint32_t *a = xb + b * kc2 * MR;
        if (rows == MR && cols == NR) {
            kernel(kc2, a, bw, yt, ldy, first, bj);
            continue;
        }
        kernel(kc2, a, bw, tile, NR, 1, first ? bj : NULL);
        qp_tile_out(yt, ldy, tile, NR, rows, cols, first);
    }
}

void FGQ_BF16_GEMM_ENTRY(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const uint32_t *xb,
                       uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                         float *y, uint64_t ldy, float *panel, uint64_t panel_floats)
{
    const uint64_t mp = (m + MR - 1) / MR * MR, b0 = i0 / MR, b1 = (i1 + MR - 1) / MR;
    if (i0 >= i1)
        return;
    for (uint64_t p = 0; p < k; p += KC) {
        uint64_t kc = k - p < KC ? k - p : KC, kc2 = (kc + 1) / 2;
        uint64_t ncap = panel_floats / kc2 / NR * NR; /* a pair: one float's room */
        ncap = ncap < NC_MAX ? ncap : NC_MAX;
        const uint32_t *xbp = xb + p / 2 * mp;
        for (uint64_t jc = 0; jc < n; jc += ncap) {
            uint64_t nr = n - jc < ncap ? n - jc : ncap, nc = (nr + NR - 1) / NR * NR;
            uint32_t *pp = (uint32_t *)panel;
            pack_w(bf16, w + jc * ldw + p, ldw, nr, nc, kc, pp);
            for (uint64_t ic = b0; ic < b1; ic += MC / MR) {
                uint64_t ie = ic + MC / MR < b1 ? ic + MC / MR : b1;
                for (uint64_t jr = 0; jr < nc; jr += NR) {
                    uint64_t cols = nr - jr < NR ? nr - jr : NR;
                    strip(kc2, xbp + ic * kc2 * MR, ie - ic, ic * MR, i1, pp + jr * kc2,
                          y + jc + jr, ldy, cols, p == 0, bias ? bias + jc + jr : NULL);
                }
            }
        }
    }
}
