/* gemm16_avx2.c - AVX2 + FMA kernel of the 16-bit-weight GEMM (gemm16.c; compiled with -mavx2
 * -mf16c -mfma, called only when the CPU has them).
 *
 * Loops (BLIS order): for each slab of nc weight rows and each block of kc columns, the slab is
 * widened (VCVTPH2PS, or a 16-bit shift for bfloat16) and transposed 8 x 8 into the panel as
 * [nc / 16][kc][16], so the register kernel reads 16 output columns of one k in two aligned
 * loads; then for each block of MC rows of x (its packed panels stay in L2) and each 16-column
 * strip of the panel (16 KiB at kc = 256, in L1), 6 x 16 tiles of y: 12 accumulators, two weight
 * vectors, one broadcast of x a k. Each kc block's sums are stored (first block) or added to y,
 * so y's binary32 result sums kc terms by FMA per lane (from the bias, when there is one),
 * then the blocks in order. Edge tiles
 * (rows past i1, columns past n) go through a tile on the stack.
 *
 * Measured (one thread, m 504, n 1024, k 2048, this repo's bench_sgemm machine): 78-89 GFLOP/s
 * with the widening included, against OpenBLAS sgemm on f32 weights 76-88 in the same run.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"
#include "quant_x86_pack.h"

#define MR FG_XPACK_MR
#define NR 16
#define KC FG_XPACK_KC
#define MC 144   /* rows of x a pass over a strip: 24 panels, 144 KiB at kc = 256 */
#define NC_MAX 1024

/* c[6][16] (row stride ldc) = a [kc][6] x b [kc][16] + bias[16] (first; bias NULL: 0), or +=
 * a x b. */
static inline void kernel(uint64_t kc, const float *a, const float *b, float *c, uint64_t ldc,
                          int first, const float *bias)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    if (first && bias) {
        c00 = c10 = c20 = c30 = c40 = c50 = _mm256_loadu_ps(bias);
        c01 = c11 = c21 = c31 = c41 = c51 = _mm256_loadu_ps(bias + 8);
    }
    if (!first) /* the tile's rows of y, wanted at the end: on their way while the sums run */
        for (int i = 0; i < MR; i++) {
            _mm_prefetch((const char *)(c + (uint64_t)i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + (uint64_t)i * ldc + 15), _MM_HINT_T0);
        }
#pragma GCC unroll 4
    for (uint64_t kk = 0; kk < kc; kk++, a += MR, b += NR) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8), x;
        x = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    __m256 r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    for (int i = 0; i < MR; i++) {
        float *p = c + (uint64_t)i * ldc;
        if (first) {
            _mm256_storeu_ps(p, r[2 * i]);
            _mm256_storeu_ps(p + 8, r[2 * i + 1]);
        } else {
            _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), r[2 * i]));
            _mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_loadu_ps(p + 8), r[2 * i + 1]));
        }
    }
}

void fgq_avx2_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                       uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias,
                       float *y, uint64_t ldy, float *panel, uint64_t panel_floats)
{
    const uint64_t mp = (m + MR - 1) / MR * MR, b0 = i0 / MR, b1 = (i1 + MR - 1) / MR;
    float tile[MR * NR] __attribute__((aligned(32))), btile[NR];
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
                    const float *bj = bias ? bias + jc + jr : NULL;
                    if (bj && cols < NR) { /* an edge strip: its bias padded to 16 */
                        memset(btile, 0, sizeof btile);
                        memcpy(btile, bj, cols * sizeof *btile);
                        bj = btile;
                    }
                    for (uint64_t b = ic; b < ie; b++) {
                        uint64_t rows = i1 - b * MR < MR ? i1 - b * MR : MR;
                        float *yt = y + b * MR * ldy + jc + jr;
                        const float *a = xb + b * kc * MR, *bw = panel + jr * kc;
                        if (rows == MR && cols == NR) {
                            kernel(kc, a, bw, yt, ldy, p == 0, bj);
                            continue;
                        }
                        kernel(kc, a, bw, tile, NR, 1, p == 0 ? bj : NULL);
                        for (uint64_t i = 0; i < rows; i++)
                            for (uint64_t q = 0; q < cols; q++)
                                yt[i * ldy + q] = p == 0 ? tile[i * NR + q]
                                                         : yt[i * ldy + q] + tile[i * NR + q];
                    }
                }
            }
        }
    }
}

/* fg_xpack's micro-panels [b0, b1) with 8 x 8 transposes: eight columns of the six rows, as 8
 * groups of 6 (the two dummy lanes are not stored). Rows past m read as zero. */
void fgq_avx2_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, float *xp, uint64_t b0,
                    uint64_t b1)
{
    const uint64_t mp = (m + MR - 1) / MR * MR;
    for (uint64_t p = 0; p < k; p += KC) {
        uint64_t kc = k - p < KC ? k - p : KC;
        for (uint64_t b = b0; b < b1; b++) {
            float *d = xp + p * mp + b * kc * MR;
            const float *row[MR];
            for (uint64_t i = 0; i < MR; i++)
                row[i] = b * MR + i < m ? x + (b * MR + i) * ldx + p : NULL;
            uint64_t kk = 0;
            for (; kk + 8 <= kc; kk += 8) {
                __m256 v[8];
                for (uint64_t i = 0; i < MR; i++)
                    v[i] = row[i] ? _mm256_loadu_ps(row[i] + kk) : _mm256_setzero_ps();
                v[6] = v[7] = _mm256_setzero_ps();
                __m256 o[8];
                qp_transpose8(v, o);
                for (int t = 0; t < 8; t++) { /* column kk + t: rows 0..5 */
                    float *q = d + (kk + t) * MR;
                    _mm_storeu_ps(q, _mm256_castps256_ps128(o[t]));
                    _mm_storel_pi((__m64 *)(q + 4), _mm256_extractf128_ps(o[t], 1));
                }
            }
            for (; kk < kc; kk++)
                for (uint64_t i = 0; i < MR; i++)
                    d[kk * MR + i] = row[i] ? row[i][kk] : 0.0f;
        }
    }
}
