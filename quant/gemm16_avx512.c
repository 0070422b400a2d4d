/* gemm16_avx512.c - AVX-512 kernel of the 16-bit-weight GEMM (gemm16.c; compiled with
 * -mavx512f -mavx512vl -mf16c -mfma, called only when the CPU runs AVX-512, see gemm16.c;
 * tests/quant_w16_emul2.c includes this file whole on AVX2 alone through tests/quant_zmm_emul.h,
 * so an intrinsic added here must be added there).
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
#include "quant_x86_pack.h"

#define MR FG_XPACK_MR
#define NR 32
#define KC FG_XPACK_KC
#define MC 144   /* rows of x a pass over a strip: 24 panels, 144 KiB at kc = 256 */
#define NC_MAX 1024

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
        qp_tile_out(yt, ldy, tile, NR, rows, cols, first);
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
            qp_pack_w16(bf16, w + jc * ldw + p, ldw, nr, nc, kc, NR, panel);
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
