/* test_quant_gemm.c - quant/'s int8 path (fg_quant_act_q8, fg_quant_gemm): every ISA against the
 * scalar reference (activation bytes and bits identical; GEMM outputs identical when every float
 * step is exact, else within 2^-17 of the terms' magnitude), the reference against an independent
 * binary64 computation from the decoded weights, the error bound against f32 weights times f32
 * activations, odd shapes, chunk-by-chunk and row-range use, random chunk bytes, the refusals;
 * the VNNI kernel body with VPDPBUSD emulated; and fg_f16_gemm and fg_w16_gemm against a
 * binary64 sum. The AVX-512 kernel bodies (the BF16 and 16-bit GEMMs, the Q4 panel kernel) also
 * run built for AVX2 alone, their zmm intrinsics emulated (quant_zmm_emul.h), on every CPU with
 * AVX2, and are compared bit for bit with their AVX-512 builds where the CPU has AVX-512;
 * FG_QUANT_ISA=avx2 runs those tests as on a CPU without it. ISAs this CPU lacks are skipped
 * with a note on stderr. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "fgt.h"
#include "quant.h"
#include "quant_gemm_int.h" /* fgq_check and the kernel signature, for the emulated VNNI build */
#include "testutil.h"

static const fg_quant_isa k_isas[] = {FG_QUANT_ISA_REF, FG_QUANT_ISA_AVX2, FG_QUANT_ISA_AVX512};
#define N_ISAS 3

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) { return tu_xorshift(&g_rng); }
static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }
static float gauss(void)
{
    double u = unif() + 1e-300, v = unif();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static int isa_ok(fg_quant_isa isa)
{
    if (fg_quant_isa_supported(isa))
        return 1;
    static int told[4];
    if (!told[isa]++)
        fprintf(stderr, "test_quant_gemm: ISA %s not supported on this CPU: not tested\n",
                fg_quant_isa_name(isa));
    return 0;
}

/* Whether the AVX-512 builds of the zmm kernel bodies run here: the CPU has AVX-512 and
 * $FG_QUANT_ISA (or $FG_ISA) does not cap quant/ below it. With FG_QUANT_ISA=avx2 the tests of
 * those bodies run as on a CPU with AVX2 alone: only the builds with the zmm emulated in AVX2. */
static int zmm_runs(void)
{
    return isa_ok(FG_QUANT_ISA_AVX512) && fg_quant_isa_default() == FG_QUANT_ISA_AVX512;
}

/* ---- a weight chunk [n, k] with groups along k ---- */
typedef struct wcase {
    fg_codec c;
    fg_qview v;
    uint64_t n, k;
    float *w;      /* [n, k] source */
    uint8_t *q;    /* chunk bytes */
    size_t qlen;
    float *deq;    /* [n, k] decoded */
} wcase;

static void wcase_make(wcase *wc, unsigned bits, uint32_t G, int f32scale, int hi, uint64_t n,
                       uint64_t k)
{
    fg_err err;
    memset(wc, 0, sizeof *wc);
    wc->c = fg_codec_quant(bits, G, 1);
    if (f32scale)
        wc->c.scale_dtype = FG_SCALE_F32;
    if (hi)
        wc->c.nibble_order = FG_NIBBLE_HI_FIRST;
    wc->n = n, wc->k = k;
    uint64_t dims[2] = {n, k};
    ck_assert_msg(fg_codec_qview(&wc->c, 2, dims, n, &wc->v, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_quant_chunk_bytes(&wc->v, &wc->qlen, &err), FG_OK);
    wc->w = malloc(n * k * 4);
    wc->deq = malloc(n * k * 4);
    wc->q = malloc(wc->qlen);
    for (uint64_t i = 0; i < n * k; i++)
        wc->w[i] = 0.02f * gauss() + (rnd() % 50 == 0 ? 0.1f : 0.0f);
    ck_assert_msg(fg_quant_encode(&wc->c, &wc->v, wc->w, FG_CODEC_F32, 0, wc->q, wc->qlen,
                                  FG_QUANT_ISA_REF, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_quant_decode(&wc->c, &wc->v, wc->q, wc->qlen, wc->deq, FG_CODEC_F32, 0,
                                     FG_QUANT_ISA_REF, &err), FG_OK);
}

static void wcase_free(wcase *wc) { free(wc->w), free(wc->q), free(wc->deq); }

/* Activations with a few outlier columns. */
static float *make_x(uint64_t m, uint64_t k, uint64_t ldx)
{
    float *x = calloc(m * ldx + 1, 4);
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t c = 0; c < k; c++)
            x[i * ldx + c] = gauss() * (c % 37 == 5 ? 20.0f : 1.0f);
    return x;
}

typedef struct act {
    fg_quant_act a;
    void *buf;
    size_t len;
} act;

static void act_make(act *t, const fg_codec *c, uint64_t m, uint64_t k, uint32_t block)
{
    fg_err err;
    ck_assert_msg(fg_quant_act_size(c, m, k, block, &t->len, &err) == FG_OK, "%s", err.msg);
    t->buf = aligned_alloc(64, (t->len + 63) / 64 * 64);
    memset(t->buf, 0xA5, t->len);
    ck_assert_msg(fg_quant_act_init(&t->a, c, m, k, block, t->buf, t->len, &err) == FG_OK, "%s",
                  err.msg);
}

static void act_quant(act *t, const float *x, uint64_t ldx, fg_quant_isa isa)
{
    fg_err err;
    int rc = fg_quant_act_q8(&t->a, x, ldx, isa, &err);
    ck_assert_msg(rc == FG_OK, "act %s: %s", fg_quant_isa_name(isa), err.msg);
}

/* Position of column c in a row of a->q (quant.h: Q4 order). */
static uint64_t qpos(const fg_quant_act *a, uint64_t c)
{
    return a->bits == 4 ? (c & ~63ull) + (c & 1) * 32 + ((c & 63) >> 1) : c;
}

static uint32_t wcode(const wcase *wc, uint64_t j, uint64_t c, float *m, float *s)
{
    uint32_t G = wc->c.group_size, hdr = wc->c.scale_dtype == FG_SCALE_F16 ? 4 : 8;
    uint64_t ngr = (wc->k + G - 1) / G;
    const uint8_t *grp = wc->q + (j * ngr + c / G) * wc->v.group_bytes;
    if (hdr == 4) {
        *m = fg_f16_to_f32_1((uint16_t)(grp[0] | grp[1] << 8));
        *s = fg_f16_to_f32_1((uint16_t)(grp[2] | grp[3] << 8));
    } else {
        memcpy(m, grp, 4);
        memcpy(s, grp + 4, 4);
    }
    uint32_t t = (uint32_t)(c % G);
    if (wc->c.bits == 8)
        return grp[hdr + t];
    uint32_t b = grp[hdr + t / 2], high = (t & 1u) ^ wc->c.nibble_order;
    return high ? b >> 4 : b & 15u;
}

/* Independent binary64 evaluation of quant.h's formula, element by element, and the magnitude
 * sum of its terms (for tolerances). */
static double expect(const wcase *wc, const fg_quant_act *a, uint64_t i, uint64_t j, double *mag)
{
    double y = 0, mg = 0;
    for (uint64_t g = 0; g * a->group < a->k; g++) {
        double sum = 0, smag = 0, m0 = 0;
        for (uint64_t c = g * a->group; c < (g + 1) * a->group && c < a->k; c++) {
            float m, s;
            uint32_t q = wcode(wc, j, c, &m, &s);
            double xq = a->q[i * a->kp + qpos(a, c)] *
                        (double)a->scale[i * a->n_blocks + c / a->block];
            sum += (double)s * q * xq;
            smag += fabs((double)s * q * xq);
            m0 = m;
        }
        double gs = a->qsum[i * a->n_groups + g] *
                    (double)a->scale[i * a->n_blocks + g * a->group / a->block];
        y += m0 * gs + sum;
        mg += fabs(m0 * gs) + smag;
    }
    *mag = mg;
    return y;
}

static float *gemm(const wcase *wc, const fg_quant_act *a, fg_quant_isa isa)
{
    float *y = malloc((a->m * wc->n + 1) * 4);
    y[a->m * wc->n] = 1234.5f;
    fg_err err;
    int rc = fg_quant_gemm(&wc->c, &wc->v, wc->q, wc->qlen, 0, wc->n, a, y, wc->n, isa, &err);
    ck_assert_msg(rc == FG_OK, "gemm %s: %s", fg_quant_isa_name(isa), err.msg);
    ck_assert(y[a->m * wc->n] == 1234.5f);
    return y;
}

/* ---- tests ---- */

typedef struct shape {
    unsigned bits;
    uint32_t G, block_groups; /* block = block_groups * G, 0: per row */
    uint64_t m, n, k;
    int f32scale, hi;
} shape;

static shape random_shape(int i)
{
    static const uint32_t gs[] = {8, 16, 32, 64, 128, 256};
    shape s;
    s.bits = i & 1 ? 4 : 8;
    s.G = gs[rnd() % 6];
    s.block_groups = (uint32_t)(rnd() % 3);
    s.m = 1 + rnd() % 13;
    s.n = 1 + rnd() % 23;
    s.k = 1 + rnd() % (4 * s.G + 300);
    s.f32scale = rnd() % 3 == 0;
    s.hi = s.bits == 4 && rnd() % 3 == 0;
    return s;
}

/* Activation bytes and bits from every ISA equal the reference's; GEMM within tolerance. */
START_TEST(test_isa_equals_ref)
{
    g_rng += (uint64_t)_i * 7919;
    for (int it = 0; it < 12; it++) {
        shape s = random_shape(it + _i);
        wcase wc;
        wcase_make(&wc, s.bits, s.G, s.f32scale, s.hi, s.n, s.k);
        uint64_t ldx = s.k + rnd() % 5;
        float *x = make_x(s.m, s.k, ldx);
        act ref;
        act_make(&ref, &wc.c, s.m, s.k, s.block_groups * s.G);
        act_quant(&ref, x, ldx, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &ref.a, FG_QUANT_ISA_REF);
        for (int ii = 1; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            act t;
            act_make(&t, &wc.c, s.m, s.k, s.block_groups * s.G);
            act_quant(&t, x, ldx, k_isas[ii]);
            TU_REQUIRE(memcmp(t.buf, ref.buf, ref.len) == 0,
                    "%s act bytes differ (q%u G %u m %llu k %llu)", fg_quant_isa_name(k_isas[ii]),
                    s.bits, s.G, (unsigned long long)s.m, (unsigned long long)s.k);
            float *y = gemm(&wc, &t.a, k_isas[ii]);
            for (uint64_t i = 0; i < s.m; i++)
                for (uint64_t j = 0; j < s.n; j++) {
                    double mag, e = expect(&wc, &ref.a, i, j, &mag);
                    (void)e;
                    double d = fabs((double)y[i * s.n + j] - yr[i * s.n + j]);
                    TU_REQUIRE(d <= 0x1p-17 * mag + 1e-30,
                            "%s q%u G %u hi %d f32s %d (%llu, %llu): %.9g vs ref %.9g (mag %g)",
                            fg_quant_isa_name(k_isas[ii]), s.bits, s.G, s.hi, s.f32scale,
                            (unsigned long long)i, (unsigned long long)j, y[i * s.n + j],
                            yr[i * s.n + j], mag);
                }
            free(y), free(t.buf);
        }
        free(yr), free(ref.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

/* The reference equals an element-by-element binary64 evaluation (to its final rounding), and
 * stays within the activation-rounding bound of f32 weights (decoded) times f32 activations:
 * |y - sum_c W[j,c] x[i,c]| <= sum_c |W[j,c]| * a / 2 + float slack. */
START_TEST(test_ref_definition)
{
    g_rng += (uint64_t)_i * 104729;
    for (int it = 0; it < 8; it++) {
        shape s = random_shape(it + _i);
        wcase wc;
        wcase_make(&wc, s.bits, s.G, s.f32scale, s.hi, s.n, s.k);
        float *x = make_x(s.m, s.k, s.k);
        act t;
        act_make(&t, &wc.c, s.m, s.k, s.block_groups * s.G);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *y = gemm(&wc, &t.a, FG_QUANT_ISA_REF);
        for (uint64_t i = 0; i < s.m; i++)
            for (uint64_t j = 0; j < s.n; j++) {
                double mag, e = expect(&wc, &t.a, i, j, &mag), f = 0, bound = 0, fmag = 0;
                TU_REQUIRE(fabs(y[i * s.n + j] - e) <= 0x1p-23 * fabs(e) + 0x1p-40 * mag,
                        "(%llu, %llu): ref %.9g, binary64 %.12g", (unsigned long long)i,
                        (unsigned long long)j, y[i * s.n + j], e);
                for (uint64_t c = 0; c < s.k; c++) {
                    float m, sc;
                    (void)wcode(&wc, j, c, &m, &sc);
                    double xv = x[i * s.k + c], wv = wc.deq[j * s.k + c];
                    f += wv * xv;
                    fmag += fabs(wv * xv) + fabs(m * xv);
                    bound += fabs(wv) * t.a.scale[i * t.a.n_blocks + c / t.a.block] / 2;
                }
                TU_REQUIRE(fabs(y[i * s.n + j] - f) <= bound + 1e-5 * fmag,
                        "(%llu, %llu): int8 %.9g, f32 %.9g, bound %g", (unsigned long long)i,
                        (unsigned long long)j, y[i * s.n + j], f, bound);
            }
        free(y), free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

/* Integer-valued activations (amax 127 -> a = 1, q = x) and weights with min 1, scale 1 and random
 * code bytes, padding codes included (they meet zero activations): every float step is exact,
 * so every ISA returns the exact integer dot product, bit for bit. */
START_TEST(test_exact_integers)
{
    static const uint32_t gs[] = {8, 32, 64, 128};
    for (int it = 0; it < 16; it++) {
        unsigned bits = it & 1 ? 4 : 8;
        uint32_t G = gs[(it / 2) % 4];
        uint64_t m = 1 + rnd() % 9, n = 1 + rnd() % 9, k = 1 + rnd() % 333;
        wcase wc;
        wcase_make(&wc, bits, G, it % 3 == 0, bits == 4 && it % 4 == 1, n, k);
        uint32_t hdr = wc.c.scale_dtype == FG_SCALE_F16 ? 4 : 8;
        for (uint64_t g = 0; g < wc.v.n_groups; g++) {
            uint8_t *grp = wc.q + g * wc.v.group_bytes;
            for (uint32_t b = hdr; b < wc.v.group_bytes; b++)
                grp[b] = (uint8_t)rnd();
            float one = 1.0f; /* min 1, scale 1: w = 1 + code */
            if (hdr == 4)
                grp[0] = grp[2] = 0, grp[1] = grp[3] = 0x3C;
            else
                memcpy(grp, &one, 4), memcpy(grp + 4, &one, 4);
        }
        float *x = calloc(m * k, 4);
        for (uint64_t i = 0; i < m; i++) {
            for (uint64_t c = 0; c < k; c++)
                x[i * k + c] = (float)((int)(rnd() % 255) - 127);
            x[i * k + rnd() % k] = rnd() & 1 ? 127.0f : -127.0f;
        }
        act t;
        act_make(&t, &wc.c, m, k, 0);
        for (int ii = 0; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            act_quant(&t, x, k, k_isas[ii]);
            float *y = gemm(&wc, &t.a, k_isas[ii]);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    int64_t d = 0;
                    for (uint64_t c = 0; c < k; c++) {
                        float mm, ss;
                        d += (1 + (int64_t)wcode(&wc, j, c, &mm, &ss)) * (int64_t)x[i * k + c];
                    }
                    TU_REQUIRE(y[i * n + j] == (float)d, "%s q%u G %u (%llu, %llu): %.1f vs %lld",
                            fg_quant_isa_name(k_isas[ii]), bits, G, (unsigned long long)i,
                            (unsigned long long)j, y[i * n + j], (long long)d);
                }
            free(y);
        }
        free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

/* A tensor as two stored chunks, and one chunk as two row ranges (two threads' share), give the
 * same bits as one call over everything. */
START_TEST(test_chunks_and_ranges)
{
    uint64_t n = 37, k = 300, m = 6, n1 = 16; /* first chunk 16 rows, second 21 */
    for (int ii = 0; ii < N_ISAS; ii++) {
        if (!isa_ok(k_isas[ii]))
            continue;
        for (unsigned bits = 4; bits <= 8; bits += 4) {
            wcase wc;
            wcase_make(&wc, bits, 64, 0, 0, n, k);
            float *x = make_x(m, k, k);
            act t;
            act_make(&t, &wc.c, m, k, 64);
            act_quant(&t, x, 0, k_isas[ii]);
            float *whole = gemm(&wc, &t.a, k_isas[ii]);
            float *y = calloc(m * n, 4), *z = calloc(m * n, 4);
            fg_err err;
            uint64_t dims[2] = {n, k};
            fg_qview v1, v2;
            ck_assert_int_eq(fg_codec_qview(&wc.c, 2, dims, n1, &v1, &err), FG_OK);
            ck_assert_int_eq(fg_codec_qview(&wc.c, 2, dims, n - n1, &v2, &err), FG_OK);
            size_t l1 = v1.n_groups * v1.group_bytes, l2 = v2.n_groups * v2.group_bytes;
            ck_assert_uint_eq(l1 + l2, wc.qlen);
            ck_assert_int_eq(fg_quant_gemm(&wc.c, &v1, wc.q, l1, 0, n1, &t.a, y, n,
                                           k_isas[ii], &err), FG_OK);
            ck_assert_int_eq(fg_quant_gemm(&wc.c, &v2, wc.q + l1, l2, 0, n - n1, &t.a, y + n1, n,
                                           k_isas[ii], &err), FG_OK);
            ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen, 0, 20, &t.a, z, n,
                                           k_isas[ii], &err), FG_OK);
            ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen, 20, n, &t.a, z, n,
                                           k_isas[ii], &err), FG_OK);
            ck_assert(memcmp(y, whole, m * n * 4) == 0);
            ck_assert(memcmp(z, whole, m * n * 4) == 0);
            free(whole), free(y), free(z), free(t.buf), free(x);
            wcase_free(&wc);
        }
    }
}
END_TEST

/* The largest groups (integers up to 4096 * 255 * 127 per group), every ISA against the
 * reference, per-row and per-group scales. */
START_TEST(test_large_groups)
{
    static const uint32_t gs[] = {512, 4096};
    for (int it = 0; it < 8; it++) {
        unsigned bits = it & 1 ? 4 : 8;
        uint32_t G = gs[(it / 2) % 2], block = it / 4 ? G : 0;
        uint64_t m = 3, n = 5, k = 2 * G + 5;
        wcase wc;
        wcase_make(&wc, bits, G, 0, 0, n, k);
        float *x = make_x(m, k, k);
        act t;
        act_make(&t, &wc.c, m, k, block);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &t.a, FG_QUANT_ISA_REF);
        for (int ii = 1; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            float *y = gemm(&wc, &t.a, k_isas[ii]);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    double mag;
                    (void)expect(&wc, &t.a, i, j, &mag);
                    TU_REQUIRE(fabs((double)y[i * n + j] - yr[i * n + j]) <= 0x1p-17 * mag,
                            "q%u G %u (%llu, %llu): %.9g vs %.9g", bits, G, (unsigned long long)i,
                            (unsigned long long)j, y[i * n + j], yr[i * n + j]);
                }
            free(y);
        }
        free(yr), free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

/* Large m and k take the windowed path (several column windows per row) and m past 64 three
 * blocks of activation rows (the last one partial and not a multiple of the 4-row tile): the
 * full blocks (64 x 8256 bytes) walk the windows outside the weight rows, the last one (3 rows)
 * inside each block of 8 weight rows; n = 21 gives three blocks of weight rows, one partial. */
START_TEST(test_windows)
{
    uint64_t n = 21, k = 8192 + 64, m = 131;
    for (unsigned bits = 4; bits <= 8; bits += 4) {
        wcase wc;
        wcase_make(&wc, bits, 64, 0, 0, n, k);
        float *x = make_x(m, k, k);
        act t;
        act_make(&t, &wc.c, m, k, 0);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &t.a, FG_QUANT_ISA_REF);
        for (int ii = 1; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            float *y = gemm(&wc, &t.a, k_isas[ii]);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    double mag;
                    (void)expect(&wc, &t.a, i, j, &mag);
                    TU_REQUIRE(fabs((double)y[i * n + j] - yr[i * n + j]) <= 0x1p-17 * mag,
                            "(%llu, %llu): %.9g vs %.9g", (unsigned long long)i,
                            (unsigned long long)j, y[i * n + j], yr[i * n + j]);
                }
            free(y);
        }
        free(yr), free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

START_TEST(test_refusals)
{
    fg_err err;
    wcase wc;
    wcase_make(&wc, 4, 64, 0, 0, 8, 128);
    float *x = make_x(2, 128, 128);
    act t;
    act_make(&t, &wc.c, 2, 128, 0);
    float y[16];
    /* NaN / Inf in activations, named */
    x[130] = NAN;
    ck_assert_int_eq(fg_quant_act_q8(&t.a, x, 0, FG_QUANT_ISA_AUTO, &err), FG_ERR_NONFINITE);
    ck_assert_msg(strstr(err.msg, "(1, 2)") != NULL, "%s", err.msg);
    x[130] = -INFINITY;
    ck_assert_int_eq(fg_quant_act_q8(&t.a, x, 0, FG_QUANT_ISA_REF, &err), FG_ERR_NONFINITE);
    x[130] = 0.5f;
    ck_assert_int_eq(fg_quant_act_q8(&t.a, x, 64, FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_quant_act_q8(&t.a, x, 0, FG_QUANT_ISA_REF, &err), FG_OK);
    /* groups along axis 0 */
    fg_codec c0 = fg_codec_quant(4, 8, 0);
    uint64_t dims[2] = {8, 128};
    fg_qview v0;
    ck_assert_int_eq(fg_codec_qview(&c0, 2, dims, 8, &v0, &err), FG_OK);
    uint8_t *q0 = calloc(v0.n_groups, v0.group_bytes);
    ck_assert_int_eq(fg_quant_gemm(&c0, &v0, q0, v0.n_groups * v0.group_bytes, 0, 8, &t.a, y, 8,
                                   FG_QUANT_ISA_REF, &err), FG_ERR_UNSUPPORTED);
    free(q0);
    ck_assert_msg(strstr(err.msg, "axis 0") != NULL, "%s", err.msg);
    /* activations for another codec, short chunk, bad ranges */
    fg_codec c8 = fg_codec_quant(8, 64, 1);
    act t8;
    act_make(&t8, &c8, 2, 128, 0);
    ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen, 0, 8, &t8.a, y, 8,
                                   FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen - 1, 0, 8, &t.a, y, 8,
                                   FG_QUANT_ISA_REF, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen, 0, 9, &t.a, y, 9,
                                   FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_quant_gemm(&wc.c, &wc.v, wc.q, wc.qlen, 0, 8, &t.a, y, 4,
                                   FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    /* act shapes and buffers */
    size_t len;
    ck_assert_int_eq(fg_quant_act_size(&wc.c, 2, 128, 32, &len, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_quant_act_size(&wc.c, 0, 128, 0, &len, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_quant_act_size(&wc.c, UINT64_MAX / 2, 1ull << 40, 0, &len, &err),
                     FG_ERR_OVERFLOW);
    fg_codec f = fg_codec_float(FG_CODEC_F16);
    ck_assert_int_ne(fg_quant_act_size(&f, 2, 128, 0, &len, &err), FG_OK);
    fg_quant_act a2;
    ck_assert_int_eq(fg_quant_act_init(&a2, &wc.c, 2, 128, 0, t.buf, t.len - 1, &err),
                     FG_ERR_SIZE_MISMATCH);
    free(t.buf), free(t8.buf), free(x);
    wcase_free(&wc);
}
END_TEST

/* Blocks whose largest |x| is 0 or so small that 127 / amax overflows get scale 0 and codes 0. */
START_TEST(test_zero_and_tiny_blocks)
{
    fg_codec c = fg_codec_quant(8, 32, 1);
    float x[96] = {0};
    x[40] = 1e-38f, x[41] = -3e-39f; /* block 1: 127 / 1e-38 overflows */
    x[70] = 2.0f;
    for (int ii = 0; ii < N_ISAS; ii++) {
        if (!isa_ok(k_isas[ii]))
            continue;
        act t;
        act_make(&t, &c, 1, 96, 32);
        act_quant(&t, x, 0, k_isas[ii]);
        ck_assert(t.a.scale[0] == 0.0f && t.a.scale[1] == 0.0f);
        ck_assert(t.a.scale[2] == 2.0f / 127.0f);
        for (int col = 0; col < 64; col++)
            ck_assert_int_eq(t.a.q[col], 0);
        ck_assert_int_eq(t.a.q[70], 127);
        ck_assert_int_eq(t.a.qsum[2], 127);
        free(t.buf);
    }
}
END_TEST

#ifdef FG_TEST_VNNI_EMUL
void fgq_vnni_emul_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                        uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);

/* The VNNI kernel body (VPDPBUSD emulated in AVX2, quant_vnni_emul.c) against the reference:
 * Q4 and Q8, F16/F32 scales, both nibble orders, per-row and per-group activation scales. */
START_TEST(test_vnni_kernel_emulated)
{
    if (!fg_quant_isa_supported(FG_QUANT_ISA_AVX2)) {
        fprintf(stderr, "test_quant_gemm: no AVX2: emulated VNNI kernel not tested\n");
        return;
    }
    g_rng += 4242;
    for (int it = 0; it < 24; it++) {
        shape s = random_shape(it);
        if (s.G < 32)
            s.G = 64; /* the SIMD kernels take groups of 32 and more */
        wcase wc;
        wcase_make(&wc, s.bits, s.G, s.f32scale, s.hi, s.n, s.k);
        float *x = make_x(s.m, s.k, s.k);
        act t;
        act_make(&t, &wc.c, s.m, s.k, s.block_groups * s.G);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &t.a, FG_QUANT_ISA_REF), *y = malloc(s.m * s.n * 4);
        fgq_params p;
        fg_err err;
        ck_assert_int_eq(fgq_check(&wc.c, &wc.v, FG_CODEC_F32, 0, wc.qlen, &p, &err), FG_OK);
        uint64_t row_bytes = (s.k + s.G - 1) / s.G * p.gbytes;
        fgq_vnni_emul_gemm(&p, wc.q, row_bytes, 0, s.n, &t.a, y, s.n);
        for (uint64_t i = 0; i < s.m; i++)
            for (uint64_t j = 0; j < s.n; j++) {
                double mag;
                (void)expect(&wc, &t.a, i, j, &mag);
                TU_REQUIRE(fabs((double)y[i * s.n + j] - yr[i * s.n + j]) <= 0x1p-17 * mag + 1e-30,
                        "vnni-emul q%u G %u hi %d (%llu, %llu): %.9g vs ref %.9g", s.bits, s.G,
                        s.hi, (unsigned long long)i, (unsigned long long)j, y[i * s.n + j],
                        yr[i * s.n + j]);
            }
        free(y), free(yr), free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST
#endif

/* Chunk bytes are never refused: random bytes (headers included: huge, subnormal, Inf, NaN
 * mins and scales) in a buffer of exactly the chunk's length are read in bounds (ASan) and every
 * ISA agrees with the reference wherever the reference is finite. */
START_TEST(test_random_chunk_bytes)
{
    for (int it = 0; it < 24; it++) {
        shape s = random_shape(it);
        wcase wc;
        wcase_make(&wc, s.bits, s.G, s.f32scale, s.hi, s.n, s.k);
        for (size_t i = 0; i < wc.qlen; i++)
            wc.q[i] = (uint8_t)rnd();
        uint8_t *exact = malloc(wc.qlen); /* exactly qlen bytes: ASan sees any overread */
        memcpy(exact, wc.q, wc.qlen);
        free(wc.q);
        wc.q = exact;
        float *x = make_x(s.m, s.k, s.k);
        act t;
        act_make(&t, &wc.c, s.m, s.k, s.block_groups * s.G);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &t.a, FG_QUANT_ISA_REF);
        for (int ii = 1; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            float *y = gemm(&wc, &t.a, k_isas[ii]);
            for (uint64_t i = 0; i < s.m; i++)
                for (uint64_t j = 0; j < s.n; j++) {
                    double mag;
                    (void)expect(&wc, &t.a, i, j, &mag);
                    float r = yr[i * s.n + j], v = y[i * s.n + j];
                    if (!isfinite(r) || !(mag < 0x1p120)) /* binary32 partial sums may overflow */
                        continue;
                    TU_REQUIRE(fabs((double)v - r) <= 0x1p-17 * mag + 1e-30,
                            "%s q%u G %u (%llu, %llu): %.9g vs ref %.9g (mag %g)",
                            fg_quant_isa_name(k_isas[ii]), s.bits, s.G, (unsigned long long)i,
                            (unsigned long long)j, v, r, mag);
                }
            free(y);
        }
        free(yr), free(t.buf), free(x);
        wcase_free(&wc);
    }
}
END_TEST

/* F16 weights x f32 activations: every ISA within 2^-18 of sum |w x| of the binary64 sum of the
 * widened weights, odd shapes and strides; bad strides refused. */
START_TEST(test_f16_gemm)
{
    for (int it = 0; it < 20; it++) {
        uint64_t m = 1 + rnd() % 9, n = 1 + rnd() % 19, k = 1 + rnd() % 700;
        uint64_t ldw = k + rnd() % 3, ldx = k + rnd() % 3, ldy = n + rnd() % 3;
        uint16_t *w = malloc(n * ldw * 2);
        float *x = make_x(m, k, ldx), *y = malloc(m * ldy * 4);
        for (uint64_t i = 0; i < n * ldw; i++)
            w[i] = fg_f32_to_f16_1(gauss() * 0.05f);
        for (int ii = 0; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            fg_err err;
            ck_assert_int_eq(fg_f16_gemm(w, n, k, ldw, x, m, ldx, y, ldy, k_isas[ii], &err), FG_OK);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    double e = 0, mag = 0;
                    for (uint64_t c = 0; c < k; c++) {
                        double t = (double)fg_f16_to_f32_1(w[j * ldw + c]) * x[i * ldx + c];
                        e += t, mag += fabs(t);
                    }
                    TU_REQUIRE(fabs(y[i * ldy + j] - e) <= 0x1p-18 * mag + 0x1p-23 * fabs(e),
                            "%s (%llu, %llu) k %llu: %.9g vs %.12g", fg_quant_isa_name(k_isas[ii]),
                            (unsigned long long)i, (unsigned long long)j, (unsigned long long)k,
                            y[i * ldy + j], e);
                }
        }
        free(w), free(x), free(y);
    }
    fg_err err;
    uint16_t w1[4] = {0};
    float x1[4] = {0}, y1[4];
    ck_assert_int_eq(fg_f16_gemm(w1, 2, 2, 1, x1, 1, 2, y1, 2, FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_f16_gemm(w1, 2, 2, 2, x1, 2, 2, y1, 1, FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG);
}
END_TEST

/* The panel kernel (fg_quant_gemm_panel): activation rows in two ranges, panels from the
 * smallest to several slabs' worth, one to three k blocks, Q4 and Q8 (Q8 and groups under 64
 * take the row kernels), every scale layout; each output within the row kernel's tolerance of
 * the reference's, rows outside the range untouched; refusals. */
START_TEST(test_gemm_panel)
{
    static const uint32_t gs[] = {64, 128, 256, 32};
    for (int it = 0; it < 40; it++) {
        unsigned bits = it % 5 == 4 ? 8 : 4;
        uint32_t G = gs[it % 4];
        /* k past FG_QUANT_PANEL_COLS in every other case: several k blocks, y added to */
        uint64_t m = 1 + rnd() % 30, n = 1 + rnd() % 40;
        uint64_t k = 1 + rnd() % (3 * G + (it % 2 ? 1200 : FG_QUANT_PANEL_COLS * 2 + 300));
        int f32scale = rnd() % 3 == 0, hi = bits == 4 && rnd() % 2;
        uint32_t block = (uint32_t)(rnd() % 3) * G;
        float *bias = NULL;
        if (it % 3 == 1) {
            bias = malloc(n * 4);
            for (uint64_t j = 0; j < n; j++)
                bias[j] = gauss();
        }
        wcase wc;
        wcase_make(&wc, bits, G, f32scale, hi, n, k);
        float *x = make_x(m, k, k);
        act t;
        act_make(&t, &wc.c, m, k, block);
        act_quant(&t, x, 0, FG_QUANT_ISA_REF);
        float *yr = gemm(&wc, &t.a, FG_QUANT_ISA_REF);
        size_t min = fg_quant_gemm_panel_min(&wc.c, k);
        size_t pb = it % 3 == 0 ? min : min * (1 + rnd() % 9);
        void *panel = aligned_alloc(64, (pb + 63) / 64 * 64);
        uint64_t split = rnd() % (m + 1), n0 = rnd() % (n + 1);
        for (int ii = 0; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            fg_err err;
            float *y = malloc(m * n * 4);
            for (uint64_t q = 0; q < m * n; q++)
                y[q] = 777.0f;
            ck_assert_msg(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, n0, n, &t.a, split, m,
                                              bias, y, n, panel, pb, k_isas[ii], &err) == FG_OK,
                          "%s", err.msg);
            ck_assert_msg(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, n0, n, &t.a, 0, split,
                                              bias, y, n, panel, pb, k_isas[ii], &err) == FG_OK,
                          "%s", err.msg);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    float got = y[i * n + j];
                    if (j < n0) {
                        TU_REQUIRE(got == 777.0f, "column %llu outside [%llu, %llu) written",
                                (unsigned long long)j, (unsigned long long)n0,
                                (unsigned long long)n);
                        continue;
                    }
                    double mag, want = yr[i * n + j] + (bias ? (double)bias[j] : 0.0);
                    expect(&wc, &t.a, i, j, &mag);
                    mag += bias ? fabs(bias[j]) : 0.0;
                    TU_REQUIRE(fabs((double)got - want) <= 0x1p-17 * mag + 1e-30,
                            "%s q%u G %u hi %d f32s %d block %u m %llu n %llu k %llu (%llu, "
                            "%llu): %.9g vs ref %.9g (mag %g)", fg_quant_isa_name(k_isas[ii]),
                            bits, G, hi, f32scale, block, (unsigned long long)m,
                            (unsigned long long)n, (unsigned long long)k, (unsigned long long)i,
                            (unsigned long long)j, got, want, mag);
                }
            free(y);
        }
        fg_err err;
        float y1[1];
        ck_assert_int_eq(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, 0, n, &t.a, 0, m + 1,
                                             NULL, y1, n, panel, pb, FG_QUANT_ISA_REF, &err),
                         FG_ERR_INVALID_ARG);
        if (fg_quant_gemm_panel_fast(&wc.c) && m > 0)
            ck_assert_int_eq(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, 0, n, &t.a, 0, m,
                                                 NULL, y1, n, panel, min - 1, FG_QUANT_ISA_AUTO,
                                                 &err),
                             FG_ERR_INVALID_ARG);
        free(panel), free(yr), free(t.buf), free(x), free(bias);
        wcase_free(&wc);
    }
}
END_TEST

/* 16-bit weights x packed x (the prefill GEMM): F16 and BF16, odd shapes, x packed in two
 * ranges, rows computed in two ranges, panels from the smallest allowed to one slab; every ISA
 * within (KC + k / KC + 2) x 2^-24 of sum |w x| of the binary64 sum; NaN in a weight reaches
 * exactly its column; refusals. */
static float w16_value(uint8_t codec, uint16_t h)
{
    if (codec == FG_CODEC_F16)
        return fg_f16_to_f32_1(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(test_w16_gemm)
{
    for (int it = 0; it < 40; it++) {
        uint8_t codec = it % 2 ? FG_CODEC_BF16 : FG_CODEC_F16;
        uint64_t m = 1 + rnd() % 40, n = 1 + rnd() % 50, k = 1 + rnd() % 700;
        if (it == 0)
            m = 6, n = 16, k = 256; /* whole tiles, one block */
        uint64_t ldw = k + rnd() % 3, ldx = k + rnd() % 3, ldy = n + rnd() % 3;
        uint16_t *w = malloc(n * ldw * 2);
        float *x = make_x(m, k, ldx), *y = malloc(m * ldy * 4), *bias = NULL;
        if (it % 4 == 1) {
            bias = malloc(n * 4);
            for (uint64_t j = 0; j < n; j++)
                bias[j] = gauss();
        }
        for (uint64_t i = 0; i < n * ldw; i++) {
            float v = gauss() * 0.05f;
            if (codec == FG_CODEC_F16) {
                w[i] = fg_f32_to_f16_1(v);
            } else {
                uint32_t u;
                memcpy(&u, &v, 4);
                w[i] = (uint16_t)(u >> 16);
            }
        }
        int nan_row = it % 5 == 4 ? (int)(rnd() % n) : -1;
        if (nan_row >= 0)
            w[(uint64_t)nan_row * ldw + rnd() % k] = codec == FG_CODEC_F16 ? 0x7E00 : 0x7FC0;
        uint64_t panels = (m + FG_XPACK_MR - 1) / FG_XPACK_MR, half = rnd() % (panels + 1);
        float *xp = malloc(fg_xpack_floats(m, k) * 4);
        memset(xp, 0xFF, fg_xpack_floats(m, k) * 4); /* NaN: every float must be written */
        fg_xpack(x, m, k, ldx, xp, half, panels + 3);
        fg_xpack(x, m, k, ldx, xp, 0, half);
        uint64_t pf = it % 3 == 0 ? fg_w16_panel_min_floats(k) : 1u << 18;
        float *panel = aligned_alloc(64, pf * 4);
        uint64_t split = (rnd() % (m + 1)) / FG_XPACK_MR * FG_XPACK_MR;
        for (int ii = 0; ii < N_ISAS; ii++) {
            if (!isa_ok(k_isas[ii]))
                continue;
            fg_err err;
            memset(y, 0xFF, m * ldy * 4);
            ck_assert_int_eq(fg_w16_gemm(codec, w, n, ldw, xp, m, k, split, m, bias, y, ldy,
                                         panel, pf, k_isas[ii], &err), FG_OK);
            ck_assert_int_eq(fg_w16_gemm(codec, w, n, ldw, xp, m, k, 0, split, bias, y, ldy,
                                         panel, pf, k_isas[ii], &err), FG_OK);
            for (uint64_t i = 0; i < m; i++)
                for (uint64_t j = 0; j < n; j++) {
                    double e = bias ? bias[j] : 0, mag = fabs(e);
                    for (uint64_t c = 0; c < k; c++) {
                        double t = (double)w16_value(codec, w[j * ldw + c]) * x[i * ldx + c];
                        e += t, mag += fabs(t);
                    }
                    float got = y[i * ldy + j];
                    if ((int)j == nan_row) {
                        TU_REQUIRE(isnan(got), "%s row %llu col %llu: %g, want NaN",
                                fg_quant_isa_name(k_isas[ii]), (unsigned long long)i,
                                (unsigned long long)j, got);
                        continue;
                    }
                    double tol = (FG_XPACK_KC + k / FG_XPACK_KC + 2) * 0x1p-24 * mag;
                    TU_REQUIRE(fabs(got - e) <= tol, "%s %s (%llu, %llu) m %llu n %llu k %llu: "
                            "%.9g vs %.12g", fg_quant_isa_name(k_isas[ii]),
                            codec == FG_CODEC_F16 ? "f16" : "bf16", (unsigned long long)i,
                            (unsigned long long)j, (unsigned long long)m, (unsigned long long)n,
                            (unsigned long long)k, got, e);
                }
        }
        free(w), free(x), free(y), free(xp), free(panel), free(bias);
    }
    fg_err err;
    uint16_t w1[64] = {0};
    float xp1[64] = {0}, y1[64];
    float *panel = aligned_alloc(64, fg_w16_panel_min_floats(2) * 4);
    ck_assert_int_eq(fg_w16_gemm(FG_CODEC_F16, w1, 2, 2, xp1, 8, 2, 3, 8, NULL, y1, 2, panel,
                                 fg_w16_panel_min_floats(2), FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG); /* i0 not a multiple of MR */
    ck_assert_int_eq(fg_w16_gemm(FG_CODEC_F32, w1, 2, 2, xp1, 8, 2, 0, 8, NULL, y1, 2, panel,
                                 fg_w16_panel_min_floats(2), FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_w16_gemm(FG_CODEC_F16, w1, 2, 1, xp1, 8, 2, 0, 8, NULL, y1, 2, panel,
                                 fg_w16_panel_min_floats(2), FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG); /* ldw < k */
    ck_assert_int_eq(fg_w16_gemm(FG_CODEC_F16, w1, 2, 2, xp1, 8, 2, 0, 9, NULL, y1, 2, panel,
                                 fg_w16_panel_min_floats(2), FG_QUANT_ISA_REF, &err),
                     FG_ERR_INVALID_ARG); /* i1 > m */
    if (isa_ok(FG_QUANT_ISA_AVX2))
        ck_assert_int_eq(fg_w16_gemm(FG_CODEC_F16, w1, 2, 2, xp1, 8, 2, 0, 8, NULL, y1, 2, panel,
                                     16, FG_QUANT_ISA_AVX2, &err),
                         FG_ERR_INVALID_ARG); /* panel too small */
    free(panel);
}
END_TEST

/* gemm16_avx512.c compiled on AVX2 alone, its zmm intrinsics emulated (quant_w16_emul2.c) */
void fgq_avx512_emul2_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw,
                               const float *xp, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                               const float *bias, float *y, uint64_t ldy, float *panel,
                               uint64_t panel_floats);

/* The AVX-512 kernel of the 16-bit GEMM sums each output in the AVX2 kernel's order: the same
 * bits, F16 and BF16, on shapes with edge strips (n not a multiple of 32), several kc blocks,
 * a bias, rows in two ranges. Its code on AVX2 alone (quant_w16_emul2.c, any CPU with AVX2),
 * with a large panel and its smallest (32-row strips of one kc block: several slabs); the
 * native kernel where the CPU has AVX-512, through fg_w16_gemm, which with a panel too small
 * for 32-row strips falls back to the AVX2 kernel (the same bits again). */
START_TEST(test_w16_avx512_same_bits)
{
    if (!isa_ok(FG_QUANT_ISA_AVX2)) {
        fprintf(stderr, "test_quant_gemm: no AVX2: the AVX-512 16-bit GEMM not tested\n");
        return;
    }
    int zmm = zmm_runs();
    if (!zmm)
        fprintf(stderr, "test_quant_gemm: no AVX-512: the AVX-512 16-bit GEMM on AVX2 alone\n");
    static const uint64_t shapes[][3] = {{6, 32, 256}, {37, 100, 600}, {96, 256, 520},
                                         {13, 33, 31}, {50, 64, 1100}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        uint64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        uint8_t codec = s % 2 ? FG_CODEC_BF16 : FG_CODEC_F16;
        uint16_t *w = malloc(n * k * 2);
        float *x = make_x(m, k, k), *bias = malloc(n * 4), *ya = malloc(m * n * 4);
        float *yb = malloc(m * n * 4), *xp = malloc(fg_xpack_floats(m, k) * 4);
        for (uint64_t i = 0; i < n * k; i++)
            w[i] = codec == FG_CODEC_F16 ? fg_f32_to_f16_1(gauss() * 0.05f)
                                         : (uint16_t)(0x3C00 + rnd() % 0x800);
        for (uint64_t j = 0; j < n; j++)
            bias[j] = gauss();
        fg_xpack(x, m, k, k, xp, 0, UINT64_MAX);
        uint64_t pf = 1u << 18, small = fg_w16_panel_min_floats(k);
        uint64_t zmin = (k < FG_XPACK_KC ? k : FG_XPACK_KC) * 32; /* the zmm kernel's smallest */
        float *panel = aligned_alloc(64, pf * 4);
        uint64_t split = m / 2 / FG_XPACK_MR * FG_XPACK_MR;
        fg_err err;
        ck_assert_int_eq(fg_w16_gemm(codec, w, n, k, xp, m, k, 0, m, bias, ya, n, panel, pf,
                                     FG_QUANT_ISA_AVX2, &err), FG_OK);
        for (int pass = 0; pass < 2 + 2 * zmm; pass++) {
            int native = pass >= 2;
            uint64_t use = pass % 2 == 0 ? pf : native ? small : zmin;
            memset(yb, 0xFF, m * n * 4);
            for (int half = 0; half < 2; half++) {
                uint64_t i0 = half ? 0 : split, i1 = half ? split : m;
                if (native)
                    ck_assert_int_eq(fg_w16_gemm(codec, w, n, k, xp, m, k, i0, i1, bias, yb, n,
                                                 panel, use, FG_QUANT_ISA_AVX512, &err), FG_OK);
                else
                    fgq_avx512_emul2_w16_gemm(codec == FG_CODEC_BF16, w, n, k, xp, m, k, i0, i1,
                                              bias, yb, n, panel, use);
            }
            for (uint64_t i = 0; i < m * n; i++)
                TU_REQUIRE(!memcmp(&ya[i], &yb[i], 4), "avx512 %s (panel %llu floats) m %llu "
                        "n %llu k %llu at %llu: %.9g, avx2 %.9g", native ? "native" :
                        "avx2-emulated", (unsigned long long)use, (unsigned long long)m,
                        (unsigned long long)n, (unsigned long long)k, (unsigned long long)i,
                        yb[i], ya[i]);
        }
        free(w), free(x), free(bias), free(ya), free(yb), free(xp), free(panel);
    }
}
END_TEST

/* The AVX512-VNNI Q4 panel kernel (gemm_q4p_kern512.h) gives the AVX2 panel kernel's bits: its
 * body on AVX2 alone (quant_q4p_emul2.c: VPDPBUSD and the zmm intrinsics emulated; any CPU with
 * AVX2), with VPDPBUSD emulated in AVX-512 (quant_q4p_emul.c, any AVX-512 CPU) and, where the
 * CPU has AVX512-VNNI, the native kernel through fg_quant_gemm_panel (ISA avx512, a panel of
 * four AVX2 strips, one activation scale a group); shapes with edge strips and tiles, several k
 * blocks, k under G, both nibble orders, F16/F32 scales, bias, rows in two ranges, columns from
 * n0. */
void fgq_q4p_emul512_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                                uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0,
                                uint64_t i1, const float *bias, float *y, uint64_t ldy,
                                void *panel, size_t panel_bytes);
void fgq_q4p_emul2_gemm_panel(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                              uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0,
                              uint64_t i1, const float *bias, float *y, uint64_t ldy, void *panel,
                              size_t panel_bytes);
static const char *const k_q4p_builds[] = {"avx2-emulated", "avx512-emulated", "native"};

static const struct { uint64_t m, n, k; uint32_t G; int hi, f32s, bias; } k_q4p512[] = {
    {13, 33, 200, 64, 0, 0, 1},  {37, 100, 4500, 128, 1, 0, 0}, {8, 64, 2048, 64, 0, 1, 1},
    {5, 7, 40, 256, 1, 1, 0},    {50, 70, 1000, 64, 1, 0, 1},   {4, 32, 64, 64, 0, 0, 0},
};

START_TEST(test_q4_panel_vnni512)
{
    if (!isa_ok(FG_QUANT_ISA_AVX2)) {
        fprintf(stderr, "test_quant_gemm: no AVX2: the zmm Q4 panel kernel not tested\n");
        return;
    }
    int zmm = zmm_runs();
    if (!zmm)
        fprintf(stderr, "test_quant_gemm: no AVX-512: the zmm Q4 panel kernel on AVX2 alone\n");
    for (size_t t = 0; t < sizeof k_q4p512 / sizeof *k_q4p512; t++) {
        uint64_t m = k_q4p512[t].m, n = k_q4p512[t].n, k = k_q4p512[t].k;
        uint32_t G = k_q4p512[t].G;
        wcase wc;
        wcase_make(&wc, 4, G, k_q4p512[t].f32s, k_q4p512[t].hi, n, k);
        float *x = make_x(m, k, k), *bias = NULL;
        if (k_q4p512[t].bias) {
            bias = malloc(n * 4);
            for (uint64_t j = 0; j < n; j++)
                bias[j] = gauss();
        }
        act ac;
        act_make(&ac, &wc.c, m, k, G);
        act_quant(&ac, x, 0, FG_QUANT_ISA_AVX2);
        size_t pb = 6 * fg_quant_gemm_panel_min(&wc.c, k);
        void *panel = aligned_alloc(64, (pb + 63) / 64 * 64);
        uint64_t split = m / 2, n0 = n / 5;
        float *want = malloc(m * n * 4), *got = malloc(m * n * 4);
        fg_err err;
        ck_assert_int_eq(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, n0, n, &ac.a, 0, m,
                                             bias, want, n, panel, pb, FG_QUANT_ISA_AVX2, &err),
                         FG_OK);
        fgq_params p;
        ck_assert_int_eq(fgq_check(&wc.c, &wc.v, FG_CODEC_F32, 0, wc.qlen, &p, &err), FG_OK);
        uint64_t row_bytes = (k + G - 1) / G * p.gbytes;
        for (int b = 0; b < 1 + 2 * zmm; b++) {
            for (uint64_t q = 0; q < m * n; q++) { /* columns before n0 untouched, the rest written */
                want[q] = q % n < n0 ? 777.0f : want[q];
                got[q] = q % n < n0 ? 777.0f : -12345.0f;
            }
            for (int half = 0; half < 2; half++) {
                uint64_t i0 = half ? split : 0, i1 = half ? m : split;
                if (b == 2)
                    ck_assert_int_eq(fg_quant_gemm_panel(&wc.c, &wc.v, wc.q, wc.qlen, n0, n,
                                                         &ac.a, i0, i1, bias, got, n, panel, pb,
                                                         FG_QUANT_ISA_AVX512, &err), FG_OK);
                else if (i0 < i1)
                    (b ? fgq_q4p_emul512_gemm_panel : fgq_q4p_emul2_gemm_panel)(
                        &p, wc.q, row_bytes, n0, n, &ac.a, i0, i1, bias, got, n, panel, pb);
            }
            for (uint64_t q = 0; q < m * n; q++)
                TU_REQUIRE(!memcmp(&got[q], &want[q], 4), "%s case %zu (%llu, %llu): %.9g, avx2 "
                        "%.9g", k_q4p_builds[b], t, (unsigned long long)(q / n),
                        (unsigned long long)(q % n), got[q], want[q]);
        }
        free(want), free(got), free(panel), free(bias), free(x), free(ac.buf);
        wcase_free(&wc);
    }
}
END_TEST

/* fg_w16_gemm_bf16 (--compute bf16) on x packed by fg_xpack_bf16, against a scalar reference
 * written here that rounds x and the weights to bfloat16 (nearest even) and sums the products in
 * binary64: within (KC + k / KC + 2) x 2^-24 of |bias| + sum |x w| of the rounded values; F16
 * and BF16 weights, odd k (a half pair), k past one KC block, edge strips and tiles, rows in two
 * ranges, the smallest panel and a large one. Both ISAs where the CPU has AVX512-BF16 (the
 * VDPBF16PS kernel, and the reference with isa REF), else the reference alone (what AUTO runs
 * there). fg_xpack_bf16's words (the AVX512-BF16 packer where the CPU has it) are checked bit
 * for bit against the rounding rule. */
static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* VCVTNEPS2BF16's rule (Intel's convert_fp32_to_bfloat16), written out: zero or denormal to
 * signed zero, NaN quieted (bit 6), else nearest even by the integer add. */
static uint16_t bf16_rule(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (!(u & 0x7F800000u))
        return (uint16_t)(u >> 16 & 0x8000u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)(u >> 16 | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float bf16_round(float f) { return bits_f((uint32_t)bf16_rule(f) << 16); }

START_TEST(test_w16_bf16)
{
    static const uint64_t shapes[][3] = {{6, 32, 256}, {37, 100, 601}, {13, 33, 31},
                                         {150, 64, 520}, {8, 7, 1}, {200, 40, 64}};
    int native = fg_w16_gemm_bf16_fast();
    if (!native)
        fprintf(stderr, "test_quant_gemm: no AVX512-BF16 (or not built): fg_w16_gemm_bf16's "
                        "reference path only\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        uint64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        uint8_t codec = s % 2 ? FG_CODEC_BF16 : FG_CODEC_F16;
        uint16_t *w = malloc(n * k * 2);
        float *x = make_x(m, k, k), *bias = s % 2 ? NULL : malloc(n * 4), *y = malloc(m * n * 4);
        uint64_t words = fg_xpack_bf16_words(m, k);
        uint32_t *xb = malloc(words * 4);
        for (uint64_t i = 0; i < n * k; i++) {
            float v = gauss() * 0.05f;
            uint32_t u;
            memcpy(&u, &v, 4);
            w[i] = codec == FG_CODEC_F16 ? fg_f32_to_f16_1(v) : (uint16_t)(u >> 16);
        }
        for (uint64_t j = 0; bias && j < n; j++)
            bias[j] = gauss();
        memset(xb, 0xAB, words * 4);
        uint64_t half = (m + FG_XPACK_MR - 1) / FG_XPACK_MR / 2;
        fg_xpack_bf16(x, m, k, k, xb, half, UINT64_MAX); /* two ranges, as threads pack it */
        fg_xpack_bf16(x, m, k, k, xb, 0, half);
        /* the layout, bit for bit: block p at p / 2 x mp words, panel b, pair, row */
        uint64_t mp = (m + FG_XPACK_MR - 1) / FG_XPACK_MR * FG_XPACK_MR;
        for (uint64_t i = 0; i < mp; i++)
            for (uint64_t c = 0; c < k; c++) {
                uint64_t p = c / FG_XPACK_KC * FG_XPACK_KC;
                uint64_t kc = k - p < FG_XPACK_KC ? k - p : FG_XPACK_KC;
                uint32_t word = xb[p / 2 * mp + i / FG_XPACK_MR * ((kc + 1) / 2) * FG_XPACK_MR +
                                   (c - p) / 2 * FG_XPACK_MR + i % FG_XPACK_MR];
                uint32_t got = (c - p) % 2 ? word >> 16 : word & 0xFFFFu, want = 0;
                if (i < m) {
                    float r = bf16_round(x[i * k + c]);
                    memcpy(&want, &r, 4);
                    want >>= 16;
                }
                TU_REQUIRE(got == want, "xpack_bf16 m %llu k %llu (%llu, %llu): %04x, want %04x",
                        (unsigned long long)m, (unsigned long long)k, (unsigned long long)i,
                        (unsigned long long)c, got, want);
                if ((c - p) % 2 == 0 && c + 1 == p + kc)
                    TU_REQUIRE((word >> 16) == 0, "xpack_bf16: the half pair's top not zero");
            }
        uint64_t kc2 = ((k < FG_XPACK_KC ? k : FG_XPACK_KC) + 1) / 2;
        for (int isa = 0; isa < 1 + native; isa++)
            for (int big = 0; big < 2; big++) {
                uint64_t pf = big ? 1u << 18 : kc2 * 32;
                ck_assert_uint_eq(pf >= fg_w16_bf16_panel_min_floats(k), 1);
                float *panel = aligned_alloc(64, (pf * 4 + 63) / 64 * 64);
                uint64_t split = m / 2 / FG_XPACK_MR * FG_XPACK_MR;
                fg_quant_isa q = isa ? FG_QUANT_ISA_AUTO : FG_QUANT_ISA_REF;
                fg_err err;
                memset(y, 0xFF, m * n * 4);
                ck_assert_int_eq(fg_w16_gemm_bf16(codec, w, n, k, xb, m, k, split, m, bias, y, n,
                                                  panel, pf, q, &err), FG_OK);
                ck_assert_int_eq(fg_w16_gemm_bf16(codec, w, n, k, xb, m, k, 0, split, bias, y, n,
                                                  panel, pf, q, &err), FG_OK);
                for (uint64_t i = 0; i < m; i++)
                    for (uint64_t j = 0; j < n; j++) {
                        double e = bias ? bias[j] : 0, mag = fabs(e);
                        for (uint64_t c = 0; c < k; c++) {
                            double t = (double)bf16_round(w16_value(codec, w[j * k + c])) *
                                       bf16_round(x[i * k + c]);
                            e += t, mag += fabs(t);
                        }
                        double tol = (FG_XPACK_KC + k / FG_XPACK_KC + 2) * 0x1p-24 * mag;
                        TU_REQUIRE(fabs(y[i * n + j] - e) <= tol, "bf16 gemm %s %s m %llu n %llu "
                                "k %llu panel %llu (%llu, %llu): %.9g vs %.12g",
                                isa ? "kernel" : "ref", codec == FG_CODEC_F16 ? "f16" : "bf16",
                                (unsigned long long)m, (unsigned long long)n,
                                (unsigned long long)k, (unsigned long long)pf,
                                (unsigned long long)i, (unsigned long long)j, y[i * n + j], e);
                    }
                free(panel);
            }
        /* a panel below the minimum is refused on the kernel's path */
        if (native) {
            float *panel = aligned_alloc(64, 64 * 64);
            fg_err err;
            ck_assert_int_eq(fg_w16_gemm_bf16(codec, w, n, k, xb, m, k, 0, m, bias, y, n, panel,
                                              fg_w16_bf16_panel_min_floats(k) - 16,
                                              FG_QUANT_ISA_AUTO, &err), FG_ERR_INVALID_ARG);
            free(panel);
        }
        free(w), free(x), free(bias), free(y), free(xb);
    }
}
END_TEST

#ifdef FG_TEST_BF16_EMUL
/* One VDPBF16PS step as Intel's pseudo-code states it, in scalar C: denormal inputs read as
 * signed zero, one binary32 FMA rounded to nearest even, a denormal result flushed. */
static float daz(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u & 0x7F800000u ? f : bits_f(u & 0x80000000u);
}
static float dp_step(float acc, float a, float b) { return daz(fmaf(daz(a), daz(b), daz(acc))); }

/* y rows [i0, i1) as the VDPBF16PS kernel computes them, one element at a time: per kc block a
 * binary32 sum from the bias (first block) or zero, per pair of columns the odd column's product
 * first (zero past the block's end), then stored (first block) or added to y. */
static void bf16_model(uint8_t codec, const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw,
                       const uint32_t *xb, uint64_t m, uint64_t i0, uint64_t i1,
                       const float *bias, float *y)
{
    for (uint64_t i = i0; i < i1; i++)
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t p = 0; p < k; p += FG_XPACK_KC) {
                uint64_t e = k - p < FG_XPACK_KC ? k : p + FG_XPACK_KC;
                float c = p == 0 && bias ? bias[j] : 0.0f;
                for (uint64_t q = p; q < e; q += 2) {
                    float xh = 0, wh = 0;
                    if (q + 1 < e) {
                        xh = fgq_xpack_bf16_at(xb, m, k, i, q + 1);
                        wh = bf16_round(w16_value(codec, w[j * ldw + q + 1]));
                    }
                    c = dp_step(c, xh, wh);
                    c = dp_step(c, fgq_xpack_bf16_at(xb, m, k, i, q),
                                bf16_round(w16_value(codec, w[j * ldw + q])));
                }
                y[i * n + j] = p == 0 ? c : y[i * n + j] + c;
            }
}

/* x [m, k] (stride ldx, the columns past k NaN: never read) with the rounding's and the flushes'
 * corners: exact ties (low half 0x8000), denormals, and rows scaled by 2^-118 whose sums fall
 * under 2^-126 (flushed by FTZ). */
static float *bf16_corner_x(uint64_t m, uint64_t k, uint64_t ldx)
{
    float *x = make_x(m, k, ldx);
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t c = k; c < ldx; c++)
            x[i * ldx + c] = NAN;
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t c = 0; c < k; c++) {
            float *v = &x[i * ldx + c];
            uint32_t u;
            memcpy(&u, v, 4);
            if (c % 7 == 3)
                *v = bits_f((u & 0xFFFF0000u) | 0x8000u);
            else if (c % 11 == 4)
                *v = bits_f(u & 0x807FFFFFu);
            if (i % 5 == 3)
                *v *= 0x1p-118f;
        }
    return x;
}

/* weights [n, k] (stride ldw, the columns past k Inf: never read): F16 (subnormal halves
 * included) or BF16 (denormal bfloat16 included) */
static uint16_t *bf16_corner_w(uint8_t codec, uint64_t n, uint64_t k, uint64_t ldw)
{
    uint16_t *w = malloc(n * ldw * 2);
    for (uint64_t q = 0; q < n * ldw; q++) {
        float v = gauss() * 0.05f;
        uint32_t u;
        memcpy(&u, &v, 4);
        w[q] = codec == FG_CODEC_F16 ? fg_f32_to_f16_1(q % 13 == 2 ? v * 0x1p-12f : v)
                                     : (uint16_t)(u >> 16);
        if (codec == FG_CODEC_BF16 && q % 13 == 2)
            w[q] &= 0x807F;
        if (q % ldw >= k)
            w[q] = codec == FG_CODEC_F16 ? 0x7C00 : 0x7F80;
    }
    return w;
}

/* The three builds of fg_w16_gemm_bf16's VDPBF16PS body (gemm16_bf16_kern.h) and its x packer:
 * with the bfloat16 instructions emulated on AVX2 alone (quant_bf16_emul2.c: the zmm intrinsics
 * emulated too), in AVX-512 (quant_bf16_emul.c), and the native one (gemm16_bf16.c). */
typedef void bf16_gemm_fn(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw,
                          const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                          const float *bias, float *y, uint64_t ldy, float *panel,
                          uint64_t panel_floats);
typedef void bf16_xpack_fn(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                           uint64_t b0, uint64_t b1);
bf16_gemm_fn fgq_bf16_emul2_w16_gemm;
bf16_xpack_fn fgq_bf16_emul2_xpack;

static void bf16_native_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw,
                             const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                             const float *bias, float *y, uint64_t ldy, float *panel,
                             uint64_t panel_floats)
{
    fg_err err;
    ck_assert_int_eq(fg_w16_gemm_bf16(bf16 ? FG_CODEC_BF16 : FG_CODEC_F16, w, n, ldw, xb, m, k,
                                      i0, i1, bias, y, ldy, panel, panel_floats,
                                      FG_QUANT_ISA_AUTO, &err), FG_OK);
}

/* build b runs here (b: 0 on AVX2 alone, 1 emulated in AVX-512, 2 native) */
static int bf16_build_runs(int b)
{
    return b == 0 ? 1 : b == 1 ? zmm_runs() : fg_w16_gemm_bf16_fast();
}

static const struct {
    const char *name;
    bf16_gemm_fn *gemm;
    bf16_xpack_fn *xpack;
} k_bf16_builds[] = {
    {"avx2-emulated", fgq_bf16_emul2_w16_gemm, fgq_bf16_emul2_xpack},
    {"avx512-emulated", fgq_bf16_emul_w16_gemm, fgq_bf16_emul_xpack},
    {"native", bf16_native_gemm, fg_xpack_bf16},
};

/* x packed by each build that runs here (two ranges, as threads pack it) against VCVTNEPS2BF16's
 * rule value for value and fg_xpack_bf16 word for word; xb: the AVX2 build's words. */
static void bf16_check_xpack(size_t t, const float *x, uint64_t m, uint64_t k, uint64_t ldx,
                             uint32_t *xb)
{
    uint64_t words = fg_xpack_bf16_words(m, k), np = (m + FG_XPACK_MR - 1) / FG_XPACK_MR;
    uint32_t *xo = malloc(words * 4), *xl = malloc(words * 4);
    fg_xpack_bf16(x, m, k, ldx, xl, 0, np);
    for (int b = 0; b < 3; b++) {
        if (!bf16_build_runs(b))
            continue;
        uint32_t *d = b ? xo : xb;
        memset(d, 0xAB, words * 4);
        k_bf16_builds[b].xpack(x, m, k, ldx, d, np / 2, np);
        k_bf16_builds[b].xpack(x, m, k, ldx, d, 0, np / 2);
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t c = 0; c < k; c++) {
                float got = fgq_xpack_bf16_at(d, m, k, i, c), want = bf16_round(x[i * ldx + c]);
                TU_REQUIRE(got == want && signbit(got) == signbit(want),
                        "%s xpack case %zu (%llu, %llu): %a, want %a", k_bf16_builds[b].name, t,
                        (unsigned long long)i, (unsigned long long)c, got, want);
            }
        TU_REQUIRE(!memcmp(d, xl, words * 4), "%s xpack case %zu: not fg_xpack_bf16's",
                   k_bf16_builds[b].name, t);
    }
    free(xo), free(xl);
}

/* Each build that runs here (the AVX2 one on every CPU with AVX2; the AVX-512 emulated one where
 * the CPU has AVX-512; the native one where it has AVX512-BF16) against bf16_model bit for bit,
 * so against each other, with the smallest panel (several slabs) and a large one; their x
 * packers against VCVTNEPS2BF16's rule and fg_xpack_bf16 word for word. Shapes with tails in m
 * (not a multiple of 6 rows, row ranges split), n (edge strips, several slabs with the smallest
 * panel) and k (odd: a half pair; past one and two kc blocks), row strides past k (Inf and NaN
 * there: a read past k shows), F16 and BF16 weights, with and without bias. */
START_TEST(test_w16_bf16_emulated)
{
    static const struct { uint64_t m, n, k; uint8_t codec; int bias; } cases[] = {
        {13, 33, 31, FG_CODEC_F16, 1},   {37, 100, 601, FG_CODEC_BF16, 0},
        {7, 65, 513, FG_CODEC_F16, 1},   {150, 64, 520, FG_CODEC_BF16, 1},
        {8, 7, 1, FG_CODEC_F16, 0},      {6, 32, 256, FG_CODEC_BF16, 1},
        {19, 97, 258, FG_CODEC_F16, 0},
    };
    if (!isa_ok(FG_QUANT_ISA_AVX2)) {
        fprintf(stderr, "test_quant_gemm: no AVX2: the BF16 kernel body not tested\n");
        return;
    }
    if (!zmm_runs())
        fprintf(stderr, "test_quant_gemm: no AVX-512: the BF16 kernel body on AVX2 alone\n");
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        uint64_t m = cases[t].m, n = cases[t].n, k = cases[t].k;
        uint8_t codec = cases[t].codec;
        uint64_t ldw = k + 1 + t % 3, ldx = k + 2;
        uint16_t *w = bf16_corner_w(codec, n, k, ldw);
        float *x = bf16_corner_x(m, k, ldx), *bias = NULL;
        if (cases[t].bias) {
            bias = malloc(n * 4);
            for (uint64_t j = 0; j < n; j++)
                bias[j] = gauss();
        }
        uint32_t *xb = malloc(fg_xpack_bf16_words(m, k) * 4);
        bf16_check_xpack(t, x, m, k, ldx, xb);
        float *want = malloc(m * n * 4), *got = malloc(m * n * 4);
        uint64_t split = m / 2 / FG_XPACK_MR * FG_XPACK_MR;
        bf16_model(codec, w, n, k, ldw, xb, m, 0, m, bias, want);
        for (int run = 0; run < 6; run++) {
            int b = run / 2;
            if (!bf16_build_runs(b))
                continue;
            uint64_t pf = run % 2 ? 1u << 18 : fg_w16_bf16_panel_min_floats(k);
            float *panel = aligned_alloc(64, (pf * 4 + 63) / 64 * 64);
            memset(got, 0xFF, m * n * 4);
            for (int half = 0; half < 2; half++) {
                uint64_t i0 = half ? split : 0, i1 = half ? m : split;
                k_bf16_builds[b].gemm(codec == FG_CODEC_BF16, w, n, ldw, xb, m, k, i0, i1, bias,
                                      got, n, panel, pf);
            }
            for (uint64_t q = 0; q < m * n; q++)
                TU_REQUIRE(!memcmp(&got[q], &want[q], 4), "bf16 %s case %zu panel %llu (%llu, "
                        "%llu): %a, model %a", k_bf16_builds[b].name, t, (unsigned long long)pf,
                        (unsigned long long)(q / n), (unsigned long long)(q % n), got[q], want[q]);
            free(panel);
        }
        free(w), free(x), free(bias), free(xb), free(want), free(got);
    }
}
END_TEST

/* quant_zmm_emul.h's emulations against the AVX-512 instructions, intrinsic by intrinsic, on
 * random and corner operands (quant_zmm_emul_check.c): where the CPU has AVX-512. */
int fgz_emul_check(uint64_t seed, int rounds, const char **first);

START_TEST(test_zmm_emulation)
{
    if (!zmm_runs()) {
        fprintf(stderr, "test_quant_gemm: no AVX-512: the zmm emulation not checked against it\n");
        return;
    }
    const char *first = NULL;
    int bad = fgz_emul_check(0x9E3779B97F4A7C15ull, 20000, &first);
    TU_REQUIRE(bad == 0, "the zmm emulation: %d mismatches, the first in _mm512_%s", bad,
               first ? first : "?");
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("quant_gemm");
    TCase *tc = tcase_create("quant_gemm");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_isa_equals_ref, 0, 4);
    tcase_add_loop_test(tc, test_ref_definition, 0, 2);
    tcase_add_test(tc, test_exact_integers);
    tcase_add_test(tc, test_chunks_and_ranges);
    tcase_add_test(tc, test_windows);
    tcase_add_test(tc, test_large_groups);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_zero_and_tiny_blocks);
    tcase_add_test(tc, test_f16_gemm);
    tcase_add_test(tc, test_w16_gemm);
    tcase_add_test(tc, test_w16_avx512_same_bits);
    tcase_add_test(tc, test_q4_panel_vnni512);
    tcase_add_test(tc, test_w16_bf16);
    tcase_add_test(tc, test_gemm_panel);
    tcase_add_test(tc, test_random_chunk_bytes);
#ifdef FG_TEST_VNNI_EMUL
    tcase_add_test(tc, test_vnni_kernel_emulated);
#endif
#ifdef FG_TEST_BF16_EMUL
    tcase_add_test(tc, test_w16_bf16_emulated);
    tcase_add_test(tc, test_zmm_emulation);
#endif
    suite_add_tcase(s, tc);
    return tu_run(s);
}
