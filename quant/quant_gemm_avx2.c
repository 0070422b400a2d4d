/* quant_gemm_avx2.c - AVX2 int8 activation quantizer and integer GEMM on Q4/Q8 chunks (compiled
 * with -mavx2 -mf16c -mfma; called only when the CPU has them, see quant_gemm.c).
 *
 * Activations (bit-identical to the reference): |x| maxima as integer maxima of the sign-cleared
 * bits (exact; NaN/Inf show up as bits >= 0x7F800000), x * inv rounded by VCVTPS2DQ (nearest
 * even, as rintf), packed to bytes, then for Q4 split into evens and odds per 32 columns; group
 * sums of x in 8 lanes reduced in the order quant.h states.
 *
 * GEMM: for each weight row j (its codes stay in L1) and each tile of up to 4 activation rows,
 * each group gives one 8-lane int32 vector per activation row:
 *   Q4: 16 code bytes broadcast to both halves, high nibbles shifted down in the upper half and
 *       masked: 32 codes whose order (evens | odds) matches the activations' Q4 order, so
 *       VPMADDUBSW (codes unsigned x activations signed, pairs at most 2 * 15 * 127) then
 *       VPMADDWD by 1 gives int32 partial sums;
 *   Q8: codes recentred to c = q - 128, VPMADDUBSW(|c|, sign(x, c)) (pairs at most
 *       2 * 128 * 127, no saturation), and the integer vector starts at 128 * qsum so the group's
 *       integer equals the reference's exactly.
 * The group's vector is converted to float and accumulated times scale_g (VFMADD), the min term
 * min_g * qsum is a scalar FMA per group; both are multiplied by the activation scale a once per
 * activation block (or per group, a variant of its own), and the lanes are added once per output.
 * Columns are walked in windows of 2048, and within a window blocks of 8 weight rows meet each
 * tile of 4 activation rows, so that codes and activations are reused from L1.
 */
#include <immintrin.h>

#include "quant_gemm_int.h"

/* Loop blocking: a window of WINDOW_COLS activation columns; within it, ROW_BLOCK weight rows
 * (their window of codes, at most ~17 KiB for Q8) meet one tile of 4 activation rows (8 KiB) at
 * a time, so both stay in L1 while they are reused. */
#define WINDOW_COLS 2048u
#define ROW_BLOCK 8u

/* ---- activations ---- */

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum8i(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Largest |x| of x[0..n) as bits, or UINT32_MAX when some x is NaN or Inf. */
static uint32_t amax_bits(const float *x, uint64_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i mx = _mm256_setzero_si256();
    uint64_t c = 0;
    for (; c + 8 <= n; c += 8)
        mx = _mm256_max_epu32(mx, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + c)), abs));
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4E));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xB1));
    uint32_t r = (uint32_t)_mm_cvtsi128_si32(m4);
    for (; c < n; c++) {
        uint32_t u = fgq_fbits(x[c]) & 0x7FFFFFFFu;
        r = u > r ? u : r;
    }
    return r >= 0x7F800000u ? UINT32_MAX : r;
}

/* 32 activation codes of x[0..32) in natural order (Q4: evens then odds). */
static inline __m256i act32(const float *x, __m256 inv, int q4)
{
    __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
    __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), inv));
    __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), inv));
    __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), inv));
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (!q4)
        return b;
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                        4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, eo), 0xD8);
}

static int8_t act_code(float x, float inv)
{
    float q = rintf(x * inv);
    return (int8_t)(q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q);
}

/* Codes of columns [c0, c1) of row x against inv (32-aligned full runs vectorised). */
static void act_codes(const float *x, const fg_quant_act *a, int8_t *q, uint64_t c0, uint64_t c1,
                      float inv)
{
    __m256 vi = _mm256_set1_ps(inv);
    uint64_t c = c0;
    while (c < c1) {
        if (c % 32 == 0 && c + 32 <= c1 && c + 32 <= a->k) {
            _mm256_storeu_si256((__m256i *)(q + c), act32(x + c, vi, a->bits == 4));
            c += 32;
        } else {
            q[fgq_act_pos(a, c)] = c < a->k ? act_code(x[c], inv) : 0;
            c++;
        }
    }
}

/* Code sums per group. */
static void act_sums(fg_quant_act *a, uint64_t i)
{
    const int8_t *q = a->q + i * a->kp;
    const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
    for (uint64_t g = 0; g < a->n_groups; g++) {
        uint64_t c0 = g * a->group;
        int32_t qs = 0;
        if (a->group >= 32) { /* whole 32-column runs: their order does not matter */
            __m256i acc = _mm256_setzero_si256();
            for (uint32_t t = 0; t < a->group; t += 32) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(q + c0 + t));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(one8, v), one16));
            }
            qs = hsum8i(acc);
        } else {
            for (uint32_t t = 0; t < a->group; t++) /* Q4 order spreads a small group */
                qs += q[fgq_act_pos(a, c0 + t)];
        }
        a->qsum[i * a->n_groups + g] = qs;
    }
}

int fgq_avx2_act_row(const float *x, fg_quant_act *a, uint64_t i)
{
    int8_t *q = a->q + i * a->kp;
    for (uint64_t b = 0; b < a->n_blocks; b++) {
        uint64_t c0 = b * a->block, c1 = c0 + a->block < a->kp ? c0 + a->block : a->kp;
        uint64_t r1 = c1 < a->k ? c1 : a->k;
        uint32_t mx = c0 < a->k ? amax_bits(x + c0, r1 - c0) : 0;
        if (mx == UINT32_MAX)
            return 1;
        float amax = fgq_bitsf(mx), inv = 127.0f / amax, sc = amax / 127.0f;
        if (amax == 0.0f || !fgq_finite(inv))
            inv = 0.0f, sc = 0.0f;
        a->scale[i * a->n_blocks + b] = sc;
        act_codes(x, a, q, c0, c1, inv);
    }
    act_sums(a, i);
    return 0;
}

/* ---- GEMM ---- */

/* 32 Q4 codes of 16 bytes: low nibbles (even t) in the low half, high nibbles (odd t) in the
 * upper half; swapped roles with HI_FIRST. */
static inline __m256i q4codes(const uint8_t *b, int hi_first)
{
    __m256i B = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b));
    __m256i S = _mm256_srli_epi16(B, 4);
    __m256i C = hi_first ? _mm256_blend_epi32(S, B, 0xF0) : _mm256_blend_epi32(B, S, 0xF0);
    return _mm256_and_si256(C, _mm256_set1_epi8(0x0F));
}

/* Stored min (scalar) and scale (broadcast) of a group. */
static inline void group_ms(const uint8_t *grp, int f16, float *m, __m256 *s)
{
    if (f16) {
        int v;
        memcpy(&v, grp, 4);
        __m128 ms = _mm_cvtph_ps(_mm_cvtsi32_si128(v));
        *m = _mm_cvtss_f32(ms);
        *s = _mm256_broadcastss_ps(_mm_movehdup_ps(ms));
    } else {
        float f[2];
        memcpy(f, grp, 8);
        *m = f[0];
        *s = _mm256_set1_ps(f[1]);
    }
}

/* Integer dot products of one group (codes at `codes`, activation columns from cb) for MR
 * activation rows starting at xq (row stride kp): ai[r], 8 int32 lanes each. */
static inline __attribute__((always_inline)) void group_dots(const uint8_t *codes, uint32_t G,
                                                             const int8_t *xq, uint64_t kp,
                                                             const int32_t *qs, uint64_t qs_ld,
                                                             const int MR, const int bits,
                                                             const int hi, __m256i *ai)
{
    const __m256i one16 = _mm256_set1_epi16(1), x80 = _mm256_set1_epi8((char)0x80);
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        ai[r] = bits == 8 ? _mm256_zextsi128_si256(_mm_cvtsi32_si128(qs[r * qs_ld] * 128))
                          : _mm256_setzero_si256();
    uint32_t t = 0;
    if (bits == 4) {
        /* two 32-code runs summed in int16 first: |pair| <= 2 * 15 * 127, four pairs fit */
        for (; t + 64 <= G; t += 64) {
            __m256i C0 = q4codes(codes + t / 2, hi), C1 = q4codes(codes + t / 2 + 16, hi);
            #pragma GCC unroll 4
            for (int r = 0; r < MR; r++) {
                const __m256i *x = (const __m256i *)(xq + r * kp + t);
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(C0, _mm256_loadu_si256(x)),
                                             _mm256_maddubs_epi16(C1, _mm256_loadu_si256(x + 1)));
                ai[r] = _mm256_add_epi32(ai[r], _mm256_madd_epi16(p, one16));
            }
        }
        for (; t < G; t += 32) {
            __m256i C = q4codes(codes + t / 2, hi);
            #pragma GCC unroll 4
            for (int r = 0; r < MR; r++) {
                __m256i X = _mm256_loadu_si256((const __m256i *)(xq + r * kp + t));
                ai[r] = _mm256_add_epi32(ai[r], _mm256_madd_epi16(_mm256_maddubs_epi16(C, X), one16));
            }
        }
        return;
    }
    for (; t < G; t += 32) {
        __m256i Cs = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(codes + t)), x80);
        __m256i A = _mm256_abs_epi8(Cs);
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256i X = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xq + r * kp + t)), Cs);
            ai[r] = _mm256_add_epi32(ai[r], _mm256_madd_epi16(_mm256_maddubs_epi16(A, X), one16));
        }
    }
}

/* One group g of weight row `row` for MR activation rows from i0: accb[r] += cvt(idot) * scale,
 * mt[r] += min * qsum. */
static inline __attribute__((always_inline)) void one_group(const fgq_params *p,
                                                            const uint8_t *row, uint64_t g,
                                                            const fg_quant_act *a, uint64_t i0,
                                                            const int MR, const int bits,
                                                            const int hi, const int f16,
                                                            const int GC, const int B1,
                                                            __m256 *accb, float *mt)
{
    const uint64_t ng = a->n_groups;
    const uint8_t *grp = row + g * p->gbytes;
    float m;
    __m256 s;
    group_ms(grp, f16, &m, &s);
    __m256i ai[4];
    const uint32_t G = GC ? (uint32_t)GC : p->G;
    group_dots(grp + p->hdr, G, a->q + i0 * a->kp + g * G, a->kp, a->qsum + i0 * ng + g, ng, MR,
               bits, hi, ai);
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
        /* B1: one activation scale per group (block index g), applied here */
        float ar = B1 ? a->scale[(i0 + r) * a->n_blocks + g] : 1.0f;
        __m256 sr = B1 ? _mm256_mul_ps(s, _mm256_set1_ps(ar)) : s;
        accb[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[r]), sr, accb[r]);
        mt[r] = fmaf(B1 ? m * ar : m, (float)a->qsum[(i0 + r) * ng + g], mt[r]);
    }
}

/* Partial outputs of weight row `row` over groups [g0, g1) for activation rows i0..i0+MR-1:
 * per activation block, sum_g cvt(idot) * scale_g in 8 lanes and sum_g min_g * qsum as a
 * scalar, both times the block's a. With one or two rows, groups alternate between two sets of
 * accumulators so that FMA latency does not serialise the loop. */
static inline __attribute__((always_inline)) void tile(const fgq_params *p, const uint8_t *row,
                                                       uint64_t g0, uint64_t g1,
                                                       const fg_quant_act *a, uint64_t i0,
                                                       const int MR, const int bits,
                                                       const int hi, const int f16, const int GC,
                                                       const int B1, float *out)
{
    __m256 acc[4];
    float mt[4];
    if (B1) { /* one scale per group: applied per group, no block loop */
        __m256 acc2[4];
        float mt2[4];
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            acc[r] = acc2[r] = _mm256_setzero_ps(), mt[r] = mt2[r] = 0.0f;
        uint64_t g = g0;
        if (MR <= 2)
            for (; g + 2 <= g1; g += 2) {
                one_group(p, row, g, a, i0, MR, bits, hi, f16, GC, 1, acc, mt);
                one_group(p, row, g + 1, a, i0, MR, bits, hi, f16, GC, 1, acc2, mt2);
            }
        for (; g < g1; g++)
            one_group(p, row, g, a, i0, MR, bits, hi, f16, GC, 1, acc, mt);
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            out[r] = hsum8(_mm256_add_ps(acc[r], acc2[r])) + (mt[r] + mt2[r]);
        return;
    }
    const uint64_t gpb = a->block / p->G;
    const float *as = a->scale + i0 * a->n_blocks;
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        acc[r] = _mm256_setzero_ps(), mt[r] = 0.0f;
    for (uint64_t g = g0, b = g0 / gpb; g < g1; b++) {
        uint64_t gend = (b + 1) * gpb < g1 ? (b + 1) * gpb : g1;
        __m256 accb[4], accb2[4];
        float mtb[4], mtb2[4];
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            accb[r] = accb2[r] = _mm256_setzero_ps(), mtb[r] = mtb2[r] = 0.0f;
        if (MR <= 2)
            for (; g + 2 <= gend; g += 2) {
                one_group(p, row, g, a, i0, MR, bits, hi, f16, GC, 0, accb, mtb);
                one_group(p, row, g + 1, a, i0, MR, bits, hi, f16, GC, 0, accb2, mtb2);
            }
        for (; g < gend; g++)
            one_group(p, row, g, a, i0, MR, bits, hi, f16, GC, 0, accb, mtb);
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            float ab = as[r * a->n_blocks + b];
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(accb[r], accb2[r]), _mm256_set1_ps(ab), acc[r]);
            mt[r] = fmaf(mtb[r] + mtb2[r], ab, mt[r]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        out[r] = hsum8(acc[r]) + mt[r];
}

typedef struct gemm_job {
    const fgq_params *p;
    const uint8_t *w;
    uint64_t row_bytes, n0, n1, g0, g1;
    const fg_quant_act *a;
    float *y;
    uint64_t ldy;
    int first; /* 1: write y; 0: add to it */
} gemm_job;

/* One tile (up to 4 activation rows from i0) against weight row j, into y. */
static inline __attribute__((always_inline)) void row_tile(const gemm_job *jb, uint64_t j,
                                                           uint64_t i0, const int bits,
                                                           const int hi, const int f16,
                                                           const int GC, const int B1)
{
    const fg_quant_act *a = jb->a;
    const uint8_t *row = jb->w + j * jb->row_bytes;
    uint64_t mr = a->m - i0 < 4 ? a->m - i0 : 4;
    float out[4];
    if (mr == 4)
        tile(jb->p, row, jb->g0, jb->g1, a, i0, 4, bits, hi, f16, GC, B1, out);
    else if (mr == 3)
        tile(jb->p, row, jb->g0, jb->g1, a, i0, 3, bits, hi, f16, GC, B1, out);
    else if (mr == 2)
        tile(jb->p, row, jb->g0, jb->g1, a, i0, 2, bits, hi, f16, GC, B1, out);
    else
        tile(jb->p, row, jb->g0, jb->g1, a, i0, 1, bits, hi, f16, GC, B1, out);
    for (uint64_t r = 0; r < mr; r++) {
        float *yy = &jb->y[(i0 + r) * jb->ldy + j];
        *yy = jb->first ? out[r] : *yy + out[r];
    }
}

static inline __attribute__((always_inline)) void run_rows(const gemm_job *jb, const int bits,
                                                           const int hi, const int f16,
                                                           const int GC, const int B1)
{
    for (uint64_t j0 = jb->n0; j0 < jb->n1; j0 += ROW_BLOCK) {
        uint64_t j1 = jb->n1 - j0 < ROW_BLOCK ? jb->n1 : j0 + ROW_BLOCK;
        for (uint64_t i0 = 0; i0 < jb->a->m; i0 += 4)
            for (uint64_t j = j0; j < j1; j++)
                row_tile(jb, j, i0, bits, hi, f16, GC, B1);
    }
}

/* One instance per (bits, nibble order, scale dtype), with G = 64 (fg-convert's default)
 * compiled as a constant and any other G at run time, for one activation scale per group (B1)
 * or per block of several groups (a whole row included). */
#define RUNNERS(name, bits, hi, f16)                                                              \
    static void name##_g64(const gemm_job *j) { run_rows(j, bits, hi, f16, 64, 0); }            \
    static void name##_gx(const gemm_job *j) { run_rows(j, bits, hi, f16, 0, 0); }              \
    static void name##_g64b1(const gemm_job *j) { run_rows(j, bits, hi, f16, 64, 1); }          \
    static void name##_gxb1(const gemm_job *j) { run_rows(j, bits, hi, f16, 0, 1); }
RUNNERS(run_q4_lo_h, 4, 0, 1)
RUNNERS(run_q4_hi_h, 4, 1, 1)
RUNNERS(run_q8_h, 8, 0, 1)
RUNNERS(run_q4_lo_f, 4, 0, 0)
RUNNERS(run_q4_hi_f, 4, 1, 0)
RUNNERS(run_q8_f, 8, 0, 0)

typedef void (*runner)(const gemm_job *);
#define RUN4(name) {{name##_gx, name##_g64}, {name##_gxb1, name##_g64b1}}
/* [bits 4 lo, 4 hi, 8][f16][block == G][G == 64] */
static const runner k_runners[3][2][2][2] = {
    {RUN4(run_q4_lo_f), RUN4(run_q4_lo_h)},
    {RUN4(run_q4_hi_f), RUN4(run_q4_hi_h)},
    {RUN4(run_q8_f), RUN4(run_q8_h)},
};

void fgq_avx2_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                   uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy)
{
    runner run = k_runners[p->bits == 8 ? 2 : p->hi_first][p->f16scale][a->block == p->G]
                          [p->G == 64];
    uint64_t ngw = row_bytes / p->gbytes;
    /* with one activation tile there is nothing to reuse across rows: whole rows, read once in
     * order (a streamed weight is then one sequential pass over DRAM) */
    uint64_t win = a->m <= 4 ? ngw : WINDOW_COLS / p->G;
    win = win ? win : 1;
    gemm_job jb = {.p = p, .w = w, .row_bytes = row_bytes, .n0 = n0, .n1 = n1, .a = a, .y = y,
                   .ldy = ldy, .first = 1};
    for (jb.g0 = 0; jb.g0 < ngw; jb.g0 = jb.g1, jb.first = 0) {
        jb.g1 = jb.g0 + win < ngw ? jb.g0 + win : ngw;
        run(&jb);
    }
}

/* ---- F16 weights x f32 activations ---- */

/* Outputs of weight rows j0..j0+NR-1 for activation rows i0..i0+MR-1, k columns. */
static inline __attribute__((always_inline)) void f16_tile(const uint16_t *w, uint64_t j0,
                                                           uint64_t k, uint64_t ldw,
                                                           const float *x, uint64_t i0,
                                                           uint64_t ldx, float *y, uint64_t ldy,
                                                           const int MR, const int NR)
{
    __m256 acc[4][4];
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        #pragma GCC unroll 4
        for (int q = 0; q < NR; q++)
            acc[r][q] = _mm256_setzero_ps();
    uint64_t c = 0;
    for (; c + 8 <= k; c += 8) {
        __m256 wv[4];
        #pragma GCC unroll 4
        for (int q = 0; q < NR; q++)
            wv[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (j0 + q) * ldw + c)));
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256 xv = _mm256_loadu_ps(x + (i0 + r) * ldx + c);
            #pragma GCC unroll 4
            for (int q = 0; q < NR; q++)
                acc[r][q] = _mm256_fmadd_ps(wv[q], xv, acc[r][q]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        #pragma GCC unroll 4
        for (int q = 0; q < NR; q++) {
            float s = hsum8(acc[r][q]);
            for (uint64_t t = c; t < k; t++)
                s = fmaf(fgq_h2f(w[(j0 + q) * ldw + t]), x[(i0 + r) * ldx + t], s);
            y[(i0 + r) * ldy + j0 + q] = s;
        }
}

void fgq_avx2_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                       uint64_t m, uint64_t ldx, float *y, uint64_t ldy)
{
    for (uint64_t i0 = 0; i0 < m; i0 += 4) {
        uint64_t mr = m - i0 < 4 ? m - i0 : 4, j = 0;
        if (mr == 1) {
            for (; j + 4 <= n; j += 4)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 1, 4);
            for (; j < n; j++)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 1, 1);
            continue;
        }
        for (; j + 2 <= n; j += 2) {
            if (mr == 4)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 4, 2);
            else if (mr == 3)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 3, 2);
            else
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 2, 2);
        }
        for (; j < n; j++) {
            if (mr == 4)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 4, 1);
            else if (mr == 3)
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 3, 1);
            else
                f16_tile(w, j, k, ldw, x, i0, ldx, y, ldy, 2, 1);
        }
    }
}
