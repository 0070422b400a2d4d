/* gemm16_avx512.c - AVX-512 kernel of the 16-bit-weight GEMM (gemm16.c; compiled with
 * -mavx512f -mavx512vl -mf16c -mfma, called only when the CPU runs AVX-512, see gemm16.c).
 *
 * The AVX2 kernel (gemm16_avx2.c) with zmm registers: the same loops (BLIS order: slabs of nc
 * weight rows, blocks of kc = FG_XPACK_KC columns, blocks of MC rows of x, strips of the panel),
 * the same packed x (fg_xpack: micro-panels of 6 rows), but 32 weight rows a strip: the panel is
 * [nc / 32][kc][32] and a tile of y is 6 x 32, 12 zmm accumulators, two weight vectors and one
 * broadcast of x a k. The arithmetic is the AVX2 kernel's: each kc block's sums by FMA in
 * binary32 per output (from the bias at the first block), stored or added to y block by block,
 * so the result has the same error bound (quant.h) and the same bits as the AVX2 kernel.
 *
 * Why: on a core with two 512-bit FMA pipes (AMD Zen 5 here) the AVX2 kernel runs at half the
 * FMA peak whatever its blocking; OpenBLAS 0.3.21 picks its Haswell (AVX2) kernels on this CPU,
 * oneDNN's AVX-512 sgemm ran 1.9x as fast (bench_gemm_prefill, docs/performance.md).
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"

#define MR FG_XPACK_MR
#define NR 32
#define KC FG_XPACK_KC
#define MC 144   /* rows of x a pass over a strip: 24 panels, 144 KiB at kc = 256 */
#define NC_MAX 1024

static inline __m256 widen8(int bf16, const uint16_t *s)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

static inline float widen1(int bf16, uint16_t h)
{
    return bf16 ? fgq_bitsf((uint32_t)h << 16) : _cvtsh_ss(h);
}

/* o[t] = lane t of v[0..7] (an 8 x 8 transpose of floats). */
static inline void transpose8(const __m256 v[8], __m256 o[8])
{
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    o[0] = _mm256_permute2f128_ps(s0, s4, 0x20), o[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    o[2] = _mm256_permute2f128_ps(s2, s6, 0x20), o[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    o[4] = _mm256_permute2f128_ps(s0, s4, 0x31), o[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    o[6] = _mm256_permute2f128_ps(s2, s6, 0x31), o[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* rows [0, nr) of w (nr <= nc, the rest zero), columns [0, kc), into panel [nc/32][kc][32]. */
static void pack_w(int bf16, const uint16_t *w, uint64_t ldw, uint64_t nr, uint64_t nc,
                   uint64_t kc, float *panel)
{
    for (uint64_t j = 0; j < nc; j += NR) {
        float *d = panel + j * kc;
        for (uint64_t r = 0; r < NR; r += 8) {
            uint64_t kk = 0;
            if (j + r + 8 <= nr) {
                const uint16_t *s = w + (j + r) * ldw;
                for (; kk + 8 <= kc; kk += 8) {
                    __m256 v[8], o[8];
                    for (int t = 0; t < 8; t++)
                        v[t] = widen8(bf16, s + t * ldw + kk);
                    transpose8(v, o);
                    for (int t = 0; t < 8; t++)
                        _mm256_store_ps(d + (kk + t) * NR + r, o[t]);
                }
            }
            for (; kk < kc; kk++)
                for (uint64_t t = 0; t < 8; t++) {
                    uint64_t row = j + r + t;
                    d[kk * NR + r + t] = row < nr ? widen1(bf16, w[row * ldw + kk]) : 0.0f;
                }
        }
    }
}

#define ROW(i)                                                                                    \
    x = _mm512_set1_ps(a[i]);                                                                     \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0), c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1);

/* c[6][32] (row stride ldc) = a [kc][6] x b [kc][32] + bias[32] (first; bias NULL: 0), or +=
 * a x b. */
static inline void kernel(uint64_t kc, const float *a, const float *b, float *c, uint64_t ldc,
                          int first, const float *bias)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    if (first && bias) {
        c00 = c10 = c20 = c30 = c40 = c50 = _mm512_loadu_ps(bias);
        c01 = c11 = c21 = c31 = c41 = c51 = _mm512_loadu_ps(bias + 16);
    }
    if (!first) /* the tile's rows of y, wanted at the end: on their way while the sums run */
        for (int i = 0; i < MR; i++) {
            _mm_prefetch((const char *)(c + (uint64_t)i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + (uint64_t)i * ldc + 31), _MM_HINT_T0);
        }
#pragma GCC unroll 4
    for (uint64_t kk = 0; kk < kc; kk++, a += MR, b += NR) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), x; /* 32-byte aligned */
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

/* One strip (32 weight rows jr.. of the slab, cols of them real) against x's micro-panels
 * [ic, ie) of one kc block. */
static void strip(uint64_t kc, const float *xb, const float *bw, uint64_t ic, uint64_t ie,
                  uint64_t i1, float *y, uint64_t ldy, uint64_t cols, int first, const float *bj)
{
    float tile[MR * NR] __attribute__((aligned(64))), btile[NR];
    if (bj && cols < NR) { /* an edge strip: its bias padded to 32 */
        memset(btile, 0, sizeof btile);
        memcpy(btile, bj, cols * sizeof *btile);
        bj = btile;
    }
    for (uint64_t b = ic; b < ie; b++) {
        uint64_t rows = i1 - b * MR < MR ? i1 - b * MR : MR;
        float *yt = y + b * MR * ldy;
        const float *a = xb + b * kc * MR;
        if (rows == MR && cols == NR) {
            kernel(kc, a, bw, yt, ldy, first, bj);
            continue;
        }
        kernel(kc, a, bw, tile, NR, 1, first ? bj : NULL);
        for (uint64_t i = 0; i < rows; i++)
            for (uint64_t q = 0; q < cols; q++)
                yt[i * ldy + q] = first ? tile[i * NR + q] : yt[i * ldy + q] + tile[i * NR + q];
    }
}

void fgq_avx512_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                         uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                         float *y, uint64_t ldy, float *panel, uint64_t panel_floats)
{
    const uint64_t mp = (m + MR - 1) / MR * MR, b0 = i0 / MR, b1 = (i1 + MR - 1) / MR;
    if (i0 >= i1)
        return;
    for (uint64_t p = 0; p < k; p += KC) {
        uint64_t kc = k - p < KC ? k - p : KC;
        uint64_t ncap = panel_floats / kc / NR * NR;
        ncap = ncap < NC_MAX ? ncap : NC_MAX;
        for (uint64_t jc = 0; jc < n; jc += ncap) {
            uint64_t nr = n - jc < ncap ? n - jc : ncap, nc = (nr + NR - 1) / NR * NR;
            pack_w(bf16, w + jc * ldw + p, ldw, nr, nc, kc, panel);
            const float *xb = xp + p * mp;
            for (uint64_t ic = b0; ic < b1; ic += MC / MR) {
                uint64_t ie = ic + MC / MR < b1 ? ic + MC / MR : b1;
                for (uint64_t jr = 0; jr < nc; jr += NR) {
                    uint64_t cols = nr - jr < NR ? nr - jr : NR;
                    strip(kc, xb, panel + jr * kc, ic, ie, i1, y + jc + jr, ldy, cols, p == 0,
                          bias ? bias + jc + jr : NULL);
                }
            }
        }
    }
}
