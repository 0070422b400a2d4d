/* quant_gemm_kern.h - the int8 GEMM kernel body, compiled once per instruction set: included by
 * quant_gemm_avx2.c (VPMADDUBSW + VPMADDWD), quant_gemm_vnni.c (AVX-VNNI VPDPBUSD on ymm) and
 * quant_gemm_vnni512.c (AVX512-VNNI VPDPBUSD on ymm), each with its own target flags. The includer
 * defines FGQ_VNNI (0 or 1), FGQ_DPBUSD(acc, u8, s8) when FGQ_VNNI, and FGQ_GEMM_ENTRY, the name
 * of the exported entry point (quant_gemm_int.h). See quant_gemm_avx2.c for the design.
 */
#ifndef FGQ_GEMM_ENTRY
#error "define FGQ_GEMM_ENTRY (and FGQ_VNNI) before including quant_gemm_kern.h"
#endif

#include <immintrin.h>
#include <string.h>

#include "quant_gemm_int.h"

/* Loop blocking: a window of WINDOW_COLS activation columns; within it, ROW_BLOCK weight rows
 * (their window of codes, at most ~17 KiB for Q8) meet one tile of 4 activation rows (8 KiB) at
 * a time, so both stay in L1 while they are reused. */
#define WINDOW_COLS 2048u
#define ROW_BLOCK 8u
#define WINDOW_GROUPS 1024u
/* Activation rows per pass over the weight rows: their window (M_BLOCK x WINDOW_COLS bytes,
 * 128 KiB) stays in L2 while every weight row of the job meets it; without it a prefill's
 * thousand rows (2 MiB a window) were streamed from L3 once per ROW_BLOCK weight rows. */
#define M_BLOCK 64u
/* Software prefetch distance along the weight rows: measured from DRAM at batch 1 (weights
 * cycled through 512 MiB), interleaved A/B: Q8 15.4 -> 19.1 GB/s, Q4 11.1 -> 11.9 (k 2048) and
 * 14.4 -> 18.4 (k 8192) on one core; 2048 and 4096 bytes measure the same. */
#define PREFETCH_BYTES 2048 /* most groups one tile call takes (its mins live on the stack) */

static inline float kern_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}


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

/* Q4 codes of 64 positions from 32 bytes: the even positions (in order) and the odd ones. */
static inline void q4codes64(const uint8_t *b, int hi_first, __m256i *even, __m256i *odd)
{
    const __m256i f = _mm256_set1_epi8(0x0F);
    __m256i B = _mm256_loadu_si256((const __m256i *)b);
    __m256i lo = _mm256_and_si256(B, f), hi = _mm256_and_si256(_mm256_srli_epi16(B, 4), f);
    *even = hi_first ? hi : lo;
    *odd = hi_first ? lo : hi;
}

/* acc + the int32 lane sums of u (unsigned codes) x s (signed activations), 4 products a lane. */
static inline __m256i dot4(__m256i acc, __m256i u, __m256i s)
{
#if FGQ_VNNI
    return FGQ_DPBUSD(acc, u, s);
#else
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    return _mm256_add_epi32(acc, p);
#endif
}

/* Integer dot products of one Q4 group for MR activation rows from xq (row stride kp), ai[r] in
 * 8 int32 lanes. G >= 64: per 64 codes, 32 bytes give the even and the odd codes, which meet the
 * activations' evens and odds (Q4 order). G = 32: 16 bytes give [evens | odds] of the group,
 * and the activations' halves are gathered from the 64-column block (`half` says which). */
static inline __attribute__((always_inline)) void q4_dots(const uint8_t *codes, uint32_t G,
                                                          uint32_t half, const int8_t *xq,
                                                          uint64_t kp, const int MR, const int hi,
                                                          __m256i *ai)
{
    if (G == 32) {
        __m256i C = q4codes(codes, hi);
        const int8_t *xb = xq - 32 * half;
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(xb + r * kp));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(xb + r * kp + 32));
            __m256i X = half ? _mm256_permute2x128_si256(x0, x1, 0x31)
                             : _mm256_permute2x128_si256(x0, x1, 0x20);
            ai[r] = dot4(ai[r], C, X);
        }
        return;
    }
    for (uint32_t t = 0; t < G; t += 64) {
        __m256i E, O;
        q4codes64(codes + t / 2, hi, &E, &O);
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            const __m256i *x = (const __m256i *)(xq + r * kp + t);
#if FGQ_VNNI
            ai[r] = FGQ_DPBUSD(ai[r], E, _mm256_loadu_si256(x));
            ai[r] = FGQ_DPBUSD(ai[r], O, _mm256_loadu_si256(x + 1));
#else
            /* the two products summed in int16 first: |pair| <= 2 * 15 * 127, four pairs fit */
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(E, _mm256_loadu_si256(x)),
                                         _mm256_maddubs_epi16(O, _mm256_loadu_si256(x + 1)));
            ai[r] = _mm256_add_epi32(ai[r], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
        }
    }
}

/* Integer dot products of one group (codes at `codes`; activations from xq, row stride kp, the
 * group's columns) for MR activation rows: ai[r], 8 int32 lanes each. */
static inline __attribute__((always_inline)) void group_dots(const uint8_t *codes, uint32_t G,
                                                             uint32_t half, const int8_t *xq,
                                                             uint64_t kp, const int32_t *qs,
                                                             uint64_t qs_ld, const int MR,
                                                             const int bits, const int hi,
                                                             __m256i *ai)
{
#if FGQ_VNNI
    /* VPDPBUSD sums 4 products into int32 lanes without saturation: Q8 codes as they are */
    (void)qs, (void)qs_ld;
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        ai[r] = _mm256_setzero_si256();
    if (bits == 4) {
        q4_dots(codes, G, half, xq, kp, MR, hi, ai);
        return;
    }
    for (uint32_t t = 0; t < G; t += 32) {
        __m256i C = _mm256_loadu_si256((const __m256i *)(codes + t));
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            ai[r] = FGQ_DPBUSD(ai[r], C, _mm256_loadu_si256((const __m256i *)(xq + r * kp + t)));
    }
#else
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        ai[r] = bits == 8 ? _mm256_zextsi128_si256(_mm_cvtsi32_si128(qs[r * qs_ld] * 128))
                          : _mm256_setzero_si256();
    if (bits == 4) {
        q4_dots(codes, G, half, xq, kp, MR, hi, ai);
        return;
    }
    /* Q8: c = q - 128 signed, |c| * sign(x, c) = c * x, pairs at most 2 * 128 * 127; the
     * 128 * qsum the recentring removed was put back in the initial value */
    for (uint32_t t = 0; t < G; t += 32) {
        __m256i Cs = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(codes + t)), x80);
        __m256i A = _mm256_abs_epi8(Cs);
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256i X = _mm256_loadu_si256((const __m256i *)(xq + r * kp + t));
            X = _mm256_sign_epi8(X, Cs);
            ai[r] = dot4(ai[r], A, X);
        }
    }
#endif
}

/* One group of a weight row (its bytes at grp) for MR activation rows: accb[r] += cvt(idot) *
 * scale (times the group's activation scale with B1); the group's min goes to *min_out. The
 * activation rows' codes start at xq (row stride kp), their code sums at qs (stride ng), their
 * scales at as (stride nb): pointers and strides the caller keeps in registers, so the loop does
 * no index arithmetic of its own. */
static inline __attribute__((always_inline)) void one_group(const uint8_t *grp, uint32_t hdr,
                                                            uint32_t G, uint32_t half,
                                                            const int8_t *xq, uint64_t kp,
                                                            const int32_t *qs, uint64_t ng,
                                                            const float *as, uint64_t nb,
                                                            const int MR, const int bits,
                                                            const int hi, const int f16,
                                                            const int B1, __m256 *accb,
                                                            float *min_out)
{
    __m256 s;
    _mm_prefetch((const char *)grp + PREFETCH_BYTES, _MM_HINT_T0);
    group_ms(grp, f16, min_out, &s);
    __m256i ai[4];
    group_dots(grp + hdr, G, half, xq, kp, qs, ng, MR, bits, hi, ai);
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
        __m256 sr = B1 ? _mm256_mul_ps(s, _mm256_broadcast_ss(as + r * nb)) : s;
        accb[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[r]), sr, accb[r]);
    }
}

/* sum x[i] y[i], i < n, in 8 lanes then the tail. */
static inline float kern_dot(const float *x, const float *y, uint64_t n)
{
    __m256 s = _mm256_setzero_ps();
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s);
    float r = kern_hsum8(s);
    for (; i < n; i++)
        r = fmaf(x[i], y[i], r);
    return r;
}

/* Partial outputs of weight row `row` over groups [g0, g1) (at most WINDOW_GROUPS) for activation
 * rows i0..i0+MR-1: per activation block, sum_g cvt(idot) * scale_g in 8 lanes times the block's
 * a (with B1, the group's a folded into scale_g instead); the min term afterwards as a dot
 * product of the groups' mins with qmin. With one or two rows, groups alternate between two
 * sets of accumulators so that FMA latency does not serialise the loop. */
static inline __attribute__((always_inline)) void tile(const fgq_params *p, const uint8_t *row,
                                                       uint64_t g0, uint64_t g1,
                                                       const fg_quant_act *a, uint64_t i0,
                                                       const int MR, const int bits,
                                                       const int hi, const int f16, const int GC,
                                                       const int B1, float *out)
{
    __m256 acc[4];
    float mins[WINDOW_GROUPS];
    const uint64_t gpb = B1 ? g1 - g0 : a->block / p->G; /* B1: one pass, scales inside */
    const uint64_t kp = a->kp, ng = a->n_groups, nb = a->n_blocks, gbytes = p->gbytes;
    const uint32_t G = GC ? (uint32_t)GC : p->G, hdr = p->hdr;
    const int8_t *xq0 = a->q + i0 * kp;
    const int32_t *qs0 = a->qsum + i0 * ng;
    const float *as = a->scale + i0 * nb, *as0 = as;
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        acc[r] = _mm256_setzero_ps();
    for (uint64_t g = g0, b = B1 ? 0 : g0 / gpb; g < g1; b++) {
        uint64_t gend = B1 ? g1 : (b + 1) * gpb < g1 ? (b + 1) * gpb : g1;
        __m256 accb[4], accb2[4];
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            accb[r] = accb2[r] = _mm256_setzero_ps();
#define FGQ_GROUP(gg, acc_)                                                                   \
    one_group(row + (gg) * gbytes, hdr, G, (uint32_t)(((gg) * G) >> 5) & 1u, xq0 + (gg) * G, kp, \
              qs0 + (gg), ng, as0 + (gg), nb, MR, bits, hi, f16, B1, acc_, &mins[(gg) - g0])
        if (MR <= 2)
            for (; g + 2 <= gend; g += 2) {
                FGQ_GROUP(g, accb);
                FGQ_GROUP(g + 1, accb2);
            }
        for (; g < gend; g++)
            FGQ_GROUP(g, accb);
#undef FGQ_GROUP
        #pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m256 ab = B1 ? _mm256_set1_ps(1.0f) : _mm256_broadcast_ss(&as[r * nb + b]);
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(accb[r], accb2[r]), ab, acc[r]);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        out[r] = kern_hsum8(acc[r]) +
                 kern_dot(mins, a->qmin + (i0 + r) * a->n_groups + g0, g1 - g0);
}

typedef struct gemm_job {
    const fgq_params *p;
    const uint8_t *w;
    uint64_t row_bytes, n0, n1, ngw, win; /* groups a row, groups a window */
    const fg_quant_act *a;
    float *y;
    uint64_t ldy;
} gemm_job;

/* One tile (up to 4 activation rows from i0) against weight row j over groups [g0, g1), into y
 * (written when first, added to otherwise). */
static inline __attribute__((always_inline)) void row_tile(const gemm_job *jb, uint64_t j,
                                                           uint64_t i0, uint64_t g0, uint64_t g1,
                                                           int first, const int bits,
                                                           const int hi, const int f16,
                                                           const int GC, const int B1)
{
    const fg_quant_act *a = jb->a;
    const uint8_t *row = jb->w + j * jb->row_bytes;
    uint64_t mr = a->m - i0 < 4 ? a->m - i0 : 4;
    float out[4];
    if (mr == 4)
        tile(jb->p, row, g0, g1, a, i0, 4, bits, hi, f16, GC, B1, out);
    else if (mr == 3)
        tile(jb->p, row, g0, g1, a, i0, 3, bits, hi, f16, GC, B1, out);
    else if (mr == 2)
        tile(jb->p, row, g0, g1, a, i0, 2, bits, hi, f16, GC, B1, out);
    else
        tile(jb->p, row, g0, g1, a, i0, 1, bits, hi, f16, GC, B1, out);
    for (uint64_t r = 0; r < mr; r++) {
        float *yy = &jb->y[(i0 + r) * jb->ldy + j];
        *yy = first ? out[r] : *yy + out[r];
    }
}

/* Activation bytes of a row block up to which the windows are walked inside each block of
 * weight rows (the block's activations, all of k, stay in L2 while each block of weight rows reads
 * every window): the weights are then one sequential pass. Past it (a prefill's 64 rows of a k =
 * 8192 input are 512 KiB) the windows are the outer loop, each a strided pass over the rows
 * (measured in quant_gemm_avx2.c's header). */
#define INNER_WINDOW_BYTES (256u << 10)

static inline __attribute__((always_inline)) void run_rows(const gemm_job *jb, const int bits,
                                                           const int hi, const int f16,
                                                           const int GC, const int B1)
{
    const uint64_t m = jb->a->m, ngw = jb->ngw, win = jb->win;
    for (uint64_t ib = 0; ib < m; ib += M_BLOCK) {
        uint64_t ie = m - ib < M_BLOCK ? m : ib + M_BLOCK;
        /* groups a pass over the weight rows covers: every window (inside each row block), or
         * one window a pass */
        uint64_t span = (ie - ib) * jb->a->kp <= INNER_WINDOW_BYTES ? ngw : win;
        for (uint64_t w0 = 0; w0 < ngw; w0 += span) {
            uint64_t w1 = w0 + span < ngw ? w0 + span : ngw;
            for (uint64_t j0 = jb->n0; j0 < jb->n1; j0 += ROW_BLOCK) {
                uint64_t j1 = jb->n1 - j0 < ROW_BLOCK ? jb->n1 : j0 + ROW_BLOCK;
                for (uint64_t g0 = w0; g0 < w1; g0 += win) {
                    uint64_t g1 = g0 + win < w1 ? g0 + win : w1;
                    for (uint64_t i0 = ib; i0 < ie; i0 += 4)
                        for (uint64_t j = j0; j < j1; j++)
                            row_tile(jb, j, i0, g0, g1, g0 == 0, bits, hi, f16, GC, B1);
                }
            }
        }
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

void FGQ_GEMM_ENTRY(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                   uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy)
{
    runner run = k_runners[p->bits == 8 ? 2 : p->hi_first][p->f16scale][a->block == p->G]
                          [p->G == 64];
    uint64_t ngw = row_bytes / p->gbytes;
    /* with one activation tile there is nothing to reuse across rows: whole rows, read once in
     * order (a streamed weight is then one sequential pass over DRAM) */
    uint64_t win = a->m <= 4 ? ngw : WINDOW_COLS / p->G;
    win = win ? win : 1;
    win = win < WINDOW_GROUPS ? win : WINDOW_GROUPS;
    gemm_job jb = {.p = p, .w = w, .row_bytes = row_bytes, .n0 = n0, .n1 = n1, .ngw = ngw,
                   .win = win, .a = a, .y = y, .ldy = ldy};
    run(&jb);
}
