/* test_quant.c - quant/: every ISA against the scalar reference (quantized bytes and dequantized
 * bits), the half-step error bound, tails and padding, constant groups, binary16 special values,
 * NaN/Inf and range refusals, argument checks, ISA selection, and a chunk stored through the
 * .fgt writer and read back. ISAs this CPU lacks are skipped with a note on stderr. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fg_bytes.h"
#include "fgt.h"
#include "quant.h"
#include "testutil.h"

/* Check's ck_assert sends a message to the parent per passing call in fork mode; element loops
 * use this instead, which only talks on failure. */
static const fg_quant_isa k_isas[] = {FG_QUANT_ISA_REF, FG_QUANT_ISA_AVX2, FG_QUANT_ISA_AVX512};
#define N_ISAS 3

/* ---- deterministic data ---- */
static uint64_t g_rng;
static uint64_t rnd(void) { return tu_xorshift(&g_rng); }
static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }
static float gauss(void)
{
    double u = unif() + 1e-300, v = unif();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int isa_ok(fg_quant_isa isa)
{
    if (fg_quant_isa_supported(isa))
        return 1;
    static int told[4];
    if (!told[isa]++)
        fprintf(stderr, "test_quant: ISA %s not supported on this CPU: not tested\n",
                fg_quant_isa_name(isa));
    return 0;
}

/* ---- a test case: codec + dense matrix ---- */
typedef struct qcase {
    fg_codec c;
    fg_qview v;
    uint64_t rows, cols, ld;
    uint8_t dtype;  /* dense source dtype */
    void *src;      /* rows x ld */
    size_t qlen;
} qcase;

static void qcase_view(qcase *q)
{
    uint64_t dims[2] = {q->rows, q->cols};
    fg_err err;
    ck_assert_msg(fg_codec_qview(&q->c, 2, dims, q->rows, &q->v, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_quant_chunk_bytes(&q->v, &q->qlen, &err), FG_OK);
}

/* Fill with weight-like data: Gaussian * scale with offset, some constant groups, outliers. */
static void qcase_fill(qcase *q, float scale, float offset)
{
    size_t n = (size_t)q->rows * q->ld, es = q->dtype == FG_CODEC_F32 ? 4 : 2;
    q->src = calloc(n ? n : 1, es);
    for (uint64_t r = 0; r < q->rows; r++)
        for (uint64_t c = 0; c < q->cols; c++) {
            float x = gauss() * scale + offset;
            if (rnd() % 97 == 0)
                x *= 20.0f;
            if ((r / 8) % 5 == 3) /* blocks of identical values: constant groups */
                x = offset;
            if (q->dtype == FG_CODEC_F32)
                ((float *)q->src)[r * q->ld + c] = x;
            else
                ((uint16_t *)q->src)[r * q->ld + c] = fg_f32_to_f16_1(x);
        }
}

static float src_at(const qcase *q, uint64_t r, uint64_t c)
{
    if (q->dtype == FG_CODEC_F32)
        return ((const float *)q->src)[r * q->ld + c];
    return fg_f16_to_f32_1(((const uint16_t *)q->src)[r * q->ld + c]);
}

/* Group index and position of element (r, c). */
static uint64_t group_of(const qcase *q, uint64_t r, uint64_t c, uint32_t *t)
{
    uint32_t G = q->c.group_size;
    if (q->v.along_rows) {
        *t = (uint32_t)(r % G);
        return (r / G) * q->cols + c;
    }
    *t = (uint32_t)(c % G);
    return r * ((q->cols + G - 1) / G) + c / G;
}

static void group_ms(const qcase *q, const uint8_t *chunk, uint64_t g, float *m, float *s)
{
    const uint8_t *p = chunk + g * q->v.group_bytes;
    if (q->c.scale_dtype == FG_SCALE_F16) {
        *m = fg_f16_to_f32_1(fg_le16(p));
        *s = fg_f16_to_f32_1(fg_le16(p + 2));
    } else {
        *m = f32_of(fg_le32(p));
        *s = f32_of(fg_le32(p + 4));
    }
}

static uint32_t group_code(const qcase *q, const uint8_t *chunk, uint64_t g, uint32_t t)
{
    const uint8_t *codes =
        chunk + g * q->v.group_bytes + (q->c.scale_dtype == FG_SCALE_F16 ? 4 : 8);
    if (q->c.bits == 8)
        return codes[t];
    uint32_t b = codes[t / 2], hi = (t & 1u) ^ q->c.nibble_order;
    return hi ? b >> 4 : b & 15u;
}

static uint8_t *encode(const qcase *q, fg_quant_isa isa)
{
    uint8_t *out = malloc(q->qlen + 1);
    memset(out, 0xA5, q->qlen + 1);
    fg_err err;
    int rc = fg_quant_encode(&q->c, &q->v, q->src, q->dtype, q->ld, out, q->qlen, isa, &err);
    ck_assert_msg(rc == FG_OK, "encode %s: %s", fg_quant_isa_name(isa), err.msg);
    ck_assert_uint_eq(out[q->qlen], 0xA5); /* nothing past the chunk */
    return out;
}

static void *decode(const qcase *q, const uint8_t *chunk, uint8_t dtype, uint64_t ld,
                    fg_quant_isa isa)
{
    size_t es = dtype == FG_CODEC_F32 ? 4 : 2, n = (size_t)q->rows * ld;
    uint8_t *out = malloc(n * es + 1);
    memset(out, 0x5A, n * es + 1);
    fg_err err;
    int rc = fg_quant_decode(&q->c, &q->v, chunk, q->qlen, out, dtype, ld, isa, &err);
    ck_assert_msg(rc == FG_OK, "decode %s: %s", fg_quant_isa_name(isa), err.msg);
    ck_assert_uint_eq(out[n * es], 0x5A);
    return out;
}

/* Every element within half a stored step (plus binary32 evaluation slack); padding codes 0;
 * a zero step reproduces the element exactly. */
static void check_error_bound(const qcase *q, const uint8_t *chunk, const float *y)
{
    float L = (float)((1u << q->c.bits) - 1);
    for (uint64_t r = 0; r < q->rows; r++)
        for (uint64_t c = 0; c < q->cols; c++) {
            uint32_t t;
            uint64_t g = group_of(q, r, c, &t);
            float m, s, x = src_at(q, r, c), got = y[r * q->cols + c];
            group_ms(q, chunk, g, &m, &s);
            double tol = 0.5 * s + 4.0 * FLT_EPSILON * (fabs(m) + (double)L * s + fabs(x));
            if (s == 0.0f)
                tol = 0;
            TU_REQUIRE(fabs((double)x - got) <= tol,
                          "(%llu, %llu): x %.9g decoded %.9g, m %.9g s %.9g",
                          (unsigned long long)r, (unsigned long long)c, x, got, m, s);
        }
    uint32_t G = q->c.group_size;
    uint64_t along = q->v.along_rows ? q->rows : q->cols;
    if (along % G)
        for (uint64_t g = 0; g < q->v.n_groups; g++) {
            int last = q->v.along_rows ? g / q->cols == along / G
                                       : g % ((q->cols + G - 1) / G) == along / G;
            for (uint32_t t = (uint32_t)(along % G); last && t < G; t++)
                TU_REQUIRE(group_code(q, chunk, g, t) == 0, "padding code not 0 in group %llu",
                        (unsigned long long)g);
        }
}

static void random_case(qcase *q, int i)
{
    static const uint32_t gs[] = {32, 64, 128, 256};
    memset(q, 0, sizeof *q);
    unsigned bits = rnd() & 1 ? 4 : 8;
    uint32_t G = i % 11 == 10 ? (rnd() & 1 ? 8 : 4096) : gs[rnd() % 4];
    int along_rows = (int)(rnd() & 1);
    q->c = fg_codec_quant(bits, G, along_rows ? 0 : 1);
    if (rnd() % 3 == 0)
        q->c.scale_dtype = FG_SCALE_F32;
    if (bits == 4 && rnd() % 3 == 0)
        q->c.nibble_order = FG_NIBBLE_HI_FIRST;
    q->rows = 1 + rnd() % (along_rows ? 3 * G : 40);
    q->cols = 1 + rnd() % (along_rows ? 70 : 3 * G);
    if (i % 7 == 0) { /* exact multiples */
        if (along_rows)
            q->rows = G * (1 + rnd() % 2);
        else
            q->cols = G * (1 + rnd() % 2);
    }
    q->ld = q->cols + (rnd() % 3 == 0 ? rnd() % 9 : 0);
    q->dtype = rnd() % 3 == 0 ? FG_CODEC_F16 : FG_CODEC_F32;
    qcase_view(q);
    qcase_fill(q, (float)(0.01 + unif() * 3), (float)(unif() * 2 - 1));
}

/* ---- tests ---- */

START_TEST(test_isa_equals_ref)
{
    g_rng = 0x1234567ull + (uint64_t)_i * 7919;
    for (int i = 0; i < 60; i++) {
        qcase q;
        random_case(&q, i);
        uint8_t *ref = encode(&q, FG_QUANT_ISA_REF);
        float *yref = decode(&q, ref, FG_CODEC_F32, q.cols, FG_QUANT_ISA_REF);
        uint16_t *href = decode(&q, ref, FG_CODEC_F16, q.cols, FG_QUANT_ISA_REF);
        check_error_bound(&q, ref, yref);
        for (size_t e = 0; e < (size_t)q.rows * q.cols; e++)
            TU_REQUIRE(href[e] == fg_f32_to_f16_1(fminf(fmaxf(yref[e], -65504), 65504)),
                    "f16 output %zu is not the saturated f32 output", e);
        for (int k = 1; k < N_ISAS; k++) {
            if (!isa_ok(k_isas[k]))
                continue;
            uint8_t *got = encode(&q, k_isas[k]);
            ck_assert_msg(memcmp(got, ref, q.qlen) == 0, "%s encode differs (G %u bits %u axis %d)",
                          fg_quant_isa_name(k_isas[k]), q.c.group_size, q.c.bits, q.v.along_rows);
            float *y = decode(&q, ref, FG_CODEC_F32, q.cols, k_isas[k]);
            ck_assert_int_eq(memcmp(y, yref, (size_t)q.rows * q.cols * 4), 0);
            uint16_t *h = decode(&q, ref, FG_CODEC_F16, q.cols, k_isas[k]);
            ck_assert_int_eq(memcmp(h, href, (size_t)q.rows * q.cols * 2), 0);
            free(got), free(y), free(h);
        }
        free(ref), free(yref), free(href), free(q.src);
    }
}
END_TEST

/* Wide and tall matrices: more columns than the axis-0 kernels' staging (128) and min/scale
 * blocks (1024), and the largest group size down the rows. */
START_TEST(test_wide_and_tall)
{
    static const struct { uint64_t rows, cols; uint32_t G; unsigned axis, bits; } cs[] = {
        {67, 2085, 32, 0, 4}, {67, 2085, 32, 0, 8}, {64, 1031, 64, 0, 4}, {5, 3001, 256, 1, 4},
        {4100, 3, 4096, 0, 4}, {4100, 3, 4096, 1, 8},
    };
    g_rng = 3;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        qcase q;
        memset(&q, 0, sizeof q);
        q.c = fg_codec_quant(cs[i].bits, cs[i].G, cs[i].axis);
        q.c.nibble_order = i == 2 ? FG_NIBBLE_HI_FIRST : FG_NIBBLE_LO_FIRST;
        q.rows = cs[i].rows, q.cols = cs[i].cols, q.ld = cs[i].cols + 5;
        q.dtype = i % 2 ? FG_CODEC_F16 : FG_CODEC_F32;
        qcase_view(&q);
        qcase_fill(&q, 0.5f, 0.25f);
        uint8_t *ref = encode(&q, FG_QUANT_ISA_REF);
        float *yref = decode(&q, ref, FG_CODEC_F32, q.cols, FG_QUANT_ISA_REF);
        uint16_t *href = decode(&q, ref, FG_CODEC_F16, q.ld, FG_QUANT_ISA_REF);
        check_error_bound(&q, ref, yref);
        for (int k = 1; k < N_ISAS; k++) {
            if (!isa_ok(k_isas[k]))
                continue;
            uint8_t *got = encode(&q, k_isas[k]);
            ck_assert_msg(memcmp(got, ref, q.qlen) == 0, "case %zu: %s encode differs", i,
                          fg_quant_isa_name(k_isas[k]));
            float *y = decode(&q, ref, FG_CODEC_F32, q.cols, k_isas[k]);
            uint16_t *h = decode(&q, ref, FG_CODEC_F16, q.ld, k_isas[k]);
            ck_assert_msg(memcmp(y, yref, (size_t)q.rows * q.cols * 4) == 0, "case %zu f32", i);
            ck_assert_msg(memcmp(h, href, (size_t)q.rows * q.ld * 2) == 0, "case %zu f16", i);
            free(got), free(y), free(h);
        }
        free(ref), free(yref), free(href), free(q.src);
    }
}
END_TEST

/* The worked examples of SPEC "Quantized chunk layout and arithmetic", byte for byte. */
START_TEST(test_spec_examples)
{
    static const float x1[10] = {-1.0f, -0.5f, 0.0f, 0.1f, 0.2f, 0.3f, 0.7f, 2.0f, 3.0f, 3.0f};
    static const uint8_t b1[16] = {0x00, 0xBC, 0x67, 0x32, 0x20, 0x55, 0x66, 0xF8,
                                   0x00, 0x42, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    static const float x2[6] = {1, 2, 3, 4, 5, 6};
    static const uint8_t b2[24] = {0x00, 0x3C, 0x05, 0x24, 0x00, 0x7F, 0xFF, 0, 0, 0, 0, 0,
                                   0x00, 0x40, 0x05, 0x24, 0x00, 0x7F, 0xFF, 0, 0, 0, 0, 0};
    for (int k = 0; k < N_ISAS; k++) {
        if (!isa_ok(k_isas[k]))
            continue;
        qcase q;
        memset(&q, 0, sizeof q);
        q.c = fg_codec_quant(4, 8, 1);
        q.rows = 1, q.cols = 10, q.ld = 10, q.dtype = FG_CODEC_F32, q.src = (void *)x1;
        qcase_view(&q);
        ck_assert_uint_eq(q.qlen, sizeof b1);
        uint8_t *got = encode(&q, k_isas[k]);
        ck_assert_int_eq(memcmp(got, b1, sizeof b1), 0);
        float *y = decode(&q, got, FG_CODEC_F32, 10, k_isas[k]);
        ck_assert(y[1] == -1.0f + 2 * 0.2000732421875f && y[9] == 3.0f);
        free(got), free(y);
        q.c = fg_codec_quant(8, 8, 0);
        q.rows = 3, q.cols = 2, q.ld = 2, q.src = (void *)x2;
        qcase_view(&q);
        ck_assert_uint_eq(q.qlen, sizeof b2);
        got = encode(&q, k_isas[k]);
        ck_assert_int_eq(memcmp(got, b2, sizeof b2), 0);
        free(got);
    }
}
END_TEST

/* Random chunk bytes (finite F16 min/scale, random codes) decode identically on every ISA,
 * including values that saturate the F16 output. */
START_TEST(test_decode_random_bytes)
{
    g_rng = 99;
    for (int i = 0; i < 40; i++) {
        qcase q;
        memset(&q, 0, sizeof q);
        q.c = fg_codec_quant(i & 1 ? 4 : 8, 32u << (i % 4), (unsigned)(i / 2 % 2));
        q.c.nibble_order = (i & 1) && (i % 3 == 0) ? FG_NIBBLE_HI_FIRST : FG_NIBBLE_LO_FIRST;
        q.rows = 1 + rnd() % 300;
        q.cols = 1 + rnd() % 300;
        qcase_view(&q);
        uint8_t *chunk = malloc(q.qlen);
        tu_fill(chunk, q.qlen, (uint64_t)i);
        for (uint64_t g = 0; g < q.v.n_groups; g++) { /* keep min and scale finite */
            uint8_t *p = chunk + g * q.v.group_bytes;
            if ((p[1] & 0x7C) == 0x7C)
                p[1] ^= 0x40;
            if ((p[3] & 0x7C) == 0x7C)
                p[3] ^= 0x40;
        }
        uint64_t ld = q.cols + 3;
        float *yref = decode(&q, chunk, FG_CODEC_F32, ld, FG_QUANT_ISA_REF);
        uint16_t *href = decode(&q, chunk, FG_CODEC_F16, ld, FG_QUANT_ISA_REF);
        for (int k = 1; k < N_ISAS; k++) {
            if (!isa_ok(k_isas[k]))
                continue;
            float *y = decode(&q, chunk, FG_CODEC_F32, ld, k_isas[k]);
            uint16_t *h = decode(&q, chunk, FG_CODEC_F16, ld, k_isas[k]);
            ck_assert_int_eq(memcmp(y, yref, (size_t)q.rows * ld * 4), 0);
            ck_assert_int_eq(memcmp(h, href, (size_t)q.rows * ld * 2), 0);
            free(y), free(h);
        }
        for (uint64_t r = 0; r < q.rows; r++)
            for (uint64_t c = 0; c < q.cols; c++)
                TU_REQUIRE((href[r * ld + c] & 0x7FFFu) != 0x7C00u, "f16 Inf, not saturated");
        free(yref), free(href), free(chunk);
    }
}
END_TEST

START_TEST(test_f16_conversions)
{
    uint16_t all[65536];
    float ref[65536], got[65536];
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    fg_f16_to_f32(all, ref, 65536, FG_QUANT_ISA_REF);
    for (uint32_t i = 0; i < 65536; i++) {
        if (((i >> 10) & 31) != 31) { /* non-NaN, non-Inf: exact round trip */
            TU_REQUIRE(fg_f32_to_f16_1(ref[i]) == i, "f16 %04x round trip", i);
            TU_REQUIRE((double)ref[i] == ldexp((double)((i & 0x3FF) | (((i >> 10) & 31) ? 0x400 : 0)),
                                              (((i >> 10) & 31) ? (int)((i >> 10) & 31) : 1) - 25) *
                                           ((i & 0x8000) ? -1 : 1), "f16 %04x value", i);
        }
    }
    /* Rounding edges. */
    ck_assert_uint_eq(fg_f32_to_f16_1(65504.0f), 0x7BFF);
    ck_assert_uint_eq(fg_f32_to_f16_1(65519.99f), 0x7BFF);
    ck_assert_uint_eq(fg_f32_to_f16_1(65520.0f), 0x7C00);
    ck_assert_uint_eq(fg_f32_to_f16_1(-INFINITY), 0xFC00);
    ck_assert_uint_eq(fg_f32_to_f16_1(-0.0f), 0x8000);
    ck_assert_uint_eq(fg_f32_to_f16_1(0x1p-24f), 0x0001);
    ck_assert_uint_eq(fg_f32_to_f16_1(0x1p-25f), 0x0000);         /* tie to even: 0 */
    ck_assert_uint_eq(fg_f32_to_f16_1(0x1.8p-24f), 0x0002);       /* tie to even: 2 */
    ck_assert_uint_eq(fg_f32_to_f16_1(0x1.000002p-25f), 0x0001);  /* just above the tie */
    ck_assert_uint_eq(fg_f32_to_f16_1(1.0f + 0x1p-11f), 0x3C00);  /* tie to even down */
    ck_assert_uint_eq(fg_f32_to_f16_1(1.0f + 0x1.8p-10f), 0x3C02);/* tie to even up */
    ck_assert_uint_eq(fg_f32_to_f16_1(0x1.ffcp-15f), 0x0400);     /* rounds up into normals */
    /* Random binary32 patterns, all specials, against each ISA. */
    enum { N = 1 << 16 };
    static float f[N];
    static uint16_t href[N], hgot[N];
    g_rng = 7;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t u = (uint32_t)rnd();
        if (i % 4 == 1) /* concentrate on the binary16 range */
            u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        f[i] = f32_of(u);
    }
    f[0] = NAN, f[1] = -NAN, f[2] = f32_of(0x7F800001u), f[3] = f32_of(0xFFBFFFFFu);
    fg_f32_to_f16(f, href, N, FG_QUANT_ISA_REF);
    for (int k = 1; k < N_ISAS; k++) {
        if (!isa_ok(k_isas[k]))
            continue;
        fg_f32_to_f16(f, hgot, N, k_isas[k]);
        for (uint32_t i = 0; i < N; i++)
            TU_REQUIRE(hgot[i] == href[i], "%s f32 %08x -> %04x, ref %04x",
                          fg_quant_isa_name(k_isas[k]), bits_of(f[i]), hgot[i], href[i]);
        /* A sweep over the whole binary32 space, every 251st pattern (17 million values). */
        for (uint64_t base = 0; base < (1ull << 32); base += 251ull * N) {
            uint32_t n = 0;
            for (; n < N && base + 251ull * n < (1ull << 32); n++)
                f[n] = f32_of((uint32_t)(base + 251ull * n));
            fg_f32_to_f16(f, href, n, FG_QUANT_ISA_REF);
            fg_f32_to_f16(f, hgot, n, k_isas[k]);
            TU_REQUIRE(memcmp(href, hgot, n * 2) == 0, "%s f32 -> f16 differs near %08llx",
                    fg_quant_isa_name(k_isas[k]), (unsigned long long)base);
        }
        fg_f16_to_f32(all, got, 65536, k_isas[k]);
        for (uint32_t i = 0; i < 65536; i++)
            TU_REQUIRE(bits_of(got[i]) == bits_of(ref[i]), "%s f16 %04x -> %08x, ref %08x",
                          fg_quant_isa_name(k_isas[k]), i, bits_of(got[i]), bits_of(ref[i]));
    }
}
END_TEST

/* F16 source holding subnormals, +-max, -0 and the smallest subnormal; both axes. */
START_TEST(test_f16_special_values)
{
    static const uint16_t sp[] = {0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x8000,
                                  0x0000, 0x3C00, 0x0200, 0x83FF, 0x7BFE};
    for (int axis = 0; axis < 2; axis++)
        for (int bits = 4; bits <= 8; bits += 4) {
            qcase q;
            memset(&q, 0, sizeof q);
            q.c = fg_codec_quant((unsigned)bits, 32, axis ? 0 : 1);
            q.rows = 40, q.cols = 45, q.ld = 45, q.dtype = FG_CODEC_F16;
            qcase_view(&q);
            uint16_t *h = malloc(q.rows * q.cols * 2);
            for (size_t i = 0; i < q.rows * q.cols; i++) /* tiny groups, huge groups, mixes */
                h[i] = sp[(i * 7 + i / 13) % 12];
            for (size_t i = 0; i < 32 && i < q.cols; i++) /* a row of subnormals only */
                h[i] = (uint16_t)(0x0001 + i);
            q.src = h;
            uint8_t *ref = encode(&q, FG_QUANT_ISA_REF);
            float *y = decode(&q, ref, FG_CODEC_F32, q.cols, FG_QUANT_ISA_REF);
            check_error_bound(&q, ref, y);
            for (int k = 1; k < N_ISAS; k++) {
                if (!isa_ok(k_isas[k]))
                    continue;
                uint8_t *got = encode(&q, k_isas[k]);
                ck_assert_int_eq(memcmp(got, ref, q.qlen), 0);
                free(got);
            }
            free(ref), free(y), free(h);
        }
}
END_TEST

/* Constant groups: representable -> scale 0, codes 0, exact; not representable in F16 ->
 * within half a (tiny) step. */
START_TEST(test_constant_groups)
{
    const float vals[] = {1.0f, -3.5f, 0.0f, 0.1f, -1e-3f, 60000.0f, 70000.0f};
    for (size_t vi = 0; vi < sizeof vals / sizeof vals[0]; vi++)
        for (int axis = 0; axis < 2; axis++) {
            qcase q;
            memset(&q, 0, sizeof q);
            q.c = fg_codec_quant(4, 64, axis ? 0 : 1);
            q.rows = 70, q.cols = 70, q.ld = 70, q.dtype = FG_CODEC_F32;
            qcase_view(&q);
            float *x = malloc(q.rows * q.cols * 4);
            for (size_t i = 0; i < q.rows * q.cols; i++)
                x[i] = vals[vi];
            q.src = x;
            for (int k = 0; k < N_ISAS; k++) {
                if (!isa_ok(k_isas[k]))
                    continue;
                uint8_t *chunk = encode(&q, k_isas[k]);
                float *y = decode(&q, chunk, FG_CODEC_F32, q.cols, k_isas[k]);
                check_error_bound(&q, chunk, y);
                int exact = fg_f16_to_f32_1(fg_f32_to_f16_1(vals[vi])) == vals[vi];
                for (uint64_t g = 0; exact && g < q.v.n_groups; g++) {
                    const uint8_t *p = chunk + g * q.v.group_bytes;
                    TU_REQUIRE(fg_le16(p + 2) == 0, "constant group %llu: scale not 0",
                            (unsigned long long)g);
                    for (uint32_t b = 4; b < q.v.group_bytes; b++)
                        TU_REQUIRE(p[b] == 0, "constant group %llu: code byte not 0",
                                (unsigned long long)g);
                }
                for (size_t i = 0; exact && i < q.rows * q.cols; i++)
                    TU_REQUIRE(y[i] == vals[vi], "constant %g decoded %g", vals[vi], y[i]);
                free(chunk), free(y);
            }
            free(x);
        }
}
END_TEST

static void expect_refusal(const qcase *q, int want, const char *needle)
{
    uint8_t *out = malloc(q->qlen);
    for (int k = 0; k < N_ISAS; k++) {
        if (!isa_ok(k_isas[k]))
            continue;
        fg_err err;
        fg_err_clear(&err);
        int rc = fg_quant_encode(&q->c, &q->v, q->src, q->dtype, q->ld, out, q->qlen, k_isas[k],
                                 &err);
        ck_assert_msg(rc == want, "%s: rc %d want %d (%s)", fg_quant_isa_name(k_isas[k]), rc, want,
                      err.msg);
        ck_assert_msg(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    }
    free(out);
}

START_TEST(test_nonfinite_refused)
{
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const uint16_t badh[] = {0x7E00, 0x7C00, 0xFC00, 0x7C01};
    for (int axis = 0; axis < 2; axis++)
        for (int which = 0; which < 4; which++) {
            qcase q;
            memset(&q, 0, sizeof q);
            q.c = fg_codec_quant(8, 64, axis ? 0 : 1);
            q.rows = 130, q.cols = 100, q.ld = 101;
            q.dtype = which == 3 ? FG_CODEC_F16 : FG_CODEC_F32;
            qcase_view(&q);
            g_rng = 5;
            qcase_fill(&q, 1.0f, 0.0f);
            if (which == 3)
                ((uint16_t *)q.src)[77 * q.ld + 91] = badh[axis * 2 + 1];
            else
                ((float *)q.src)[77 * q.ld + 91] = bad[which];
            expect_refusal(&q, FG_ERR_NONFINITE, "(77, 91)");
            free(q.src);
        }
    ck_assert_str_eq(fg_strerror(FG_ERR_NONFINITE), "NaN or Inf in data to quantize");
}
END_TEST

START_TEST(test_range)
{
    qcase q;
    memset(&q, 0, sizeof q);
    q.c = fg_codec_quant(4, 32, 1);
    q.rows = 2, q.cols = 64, q.ld = 64, q.dtype = FG_CODEC_F32;
    qcase_view(&q);
    float *x = calloc(128, 4);
    q.src = x;
    x[100] = -1e6f; /* below the F16 range: the stored min cannot be represented */
    expect_refusal(&q, FG_ERR_QUANT_RANGE, "(1, 32)");
    x[100] = 0, x[5] = 2e6f; /* scale 2e6/15 > 65504 */
    expect_refusal(&q, FG_ERR_QUANT_RANGE, "(0, 0)");
    /* F32 scales: a range past FLT_MAX (-3e38 .. 3e38) cannot decode its largest code... */
    q.c.scale_dtype = FG_SCALE_F32;
    qcase_view(&q);
    x[5] = 3e38f, x[6] = -3e38f, x[7] = 1.0f;
    expect_refusal(&q, FG_ERR_QUANT_RANGE, "(0, 0)");
    /* ...while a range just below it still quantizes within half a step. */
    x[5] = 1.6e38f, x[6] = -1.6e38f;
    uint8_t *chunk = encode(&q, FG_QUANT_ISA_REF);
    float *y = decode(&q, chunk, FG_CODEC_F32, q.cols, FG_QUANT_ISA_REF);
    check_error_bound(&q, chunk, y);
    for (int k = 1; k < N_ISAS; k++)
        if (isa_ok(k_isas[k])) {
            uint8_t *got = encode(&q, k_isas[k]);
            ck_assert_int_eq(memcmp(got, chunk, q.qlen), 0);
            free(got);
        }
    free(chunk), free(y), free(x);
}
END_TEST

START_TEST(test_bad_arguments)
{
    qcase q;
    memset(&q, 0, sizeof q);
    q.c = fg_codec_quant(4, 64, 1);
    q.rows = 3, q.cols = 100, q.ld = 100, q.dtype = FG_CODEC_F32;
    qcase_view(&q);
    float x[300] = {0};
    uint8_t out[1024];
    fg_err err;
    ck_assert_int_eq(fg_quant_encode(&q.c, &q.v, x, FG_CODEC_F32, 0, out, q.qlen - 1,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(fg_quant_encode(&q.c, &q.v, x, FG_CODEC_F32, 99, out, q.qlen,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "row stride"));
    ck_assert_int_eq(fg_quant_encode(&q.c, &q.v, x, FG_CODEC_BF16, 0, out, q.qlen,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    fg_qview bad = q.v;
    bad.n_groups++;
    ck_assert_int_eq(fg_quant_decode(&q.c, &bad, out, sizeof out, x, FG_CODEC_F32, 0,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_SIZE_MISMATCH);
    fg_codec c = q.c;
    c.group_size = 48;
    ck_assert_int_eq(fg_quant_decode(&c, &q.v, out, sizeof out, x, FG_CODEC_F32, 0,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_LIMIT);
    c = fg_codec_float(FG_CODEC_F16);
    ck_assert_int_eq(fg_quant_decode(&c, &q.v, out, sizeof out, x, FG_CODEC_F32, 0,
                                     FG_QUANT_ISA_REF, &err), FG_ERR_INVALID_ARG);
    /* An empty matrix is fine and writes nothing. */
    uint64_t dims[2] = {0, 100};
    fg_qview v0;
    ck_assert_int_eq(fg_codec_qview(&q.c, 2, dims, 0, &v0, &err), FG_OK);
    ck_assert_int_eq(fg_quant_encode(&q.c, &v0, x, FG_CODEC_F32, 0, out, 0, FG_QUANT_ISA_AUTO,
                                     &err), FG_OK);
}
END_TEST

START_TEST(test_isa_selection)
{
    fg_quant_isa isa;
    fg_err err;
    ck_assert_int_eq(fg_quant_isa_parse("avx2", &isa, &err), FG_OK);
    ck_assert_int_eq(isa, FG_QUANT_ISA_AVX2);
    ck_assert_int_eq(fg_quant_isa_parse("sse9", &isa, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "sse9"));
    ck_assert(fg_quant_isa_supported(FG_QUANT_ISA_REF));
    /* AUTO is resolved once per process: check the variable in a fresh child (this also holds
     * when Check runs without fork mode). */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv("FG_QUANT_ISA", "ref", 1);
        _exit(fg_quant_isa_default() == FG_QUANT_ISA_REF ? 0 : 1);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "FG_QUANT_ISA=ref did not select ref");
    fprintf(stderr, "test_quant: CPU runs avx2=%d avx512=%d\n",
            fg_quant_isa_supported(FG_QUANT_ISA_AVX2), fg_quant_isa_supported(FG_QUANT_ISA_AVX512));
}
END_TEST

/* Quantized chunks written through the .fgt writer, read back, dequantize to the same values. */
START_TEST(test_fgt_round_trip)
{
    const char *path = tu_path("q.fgt");
    fg_err err;
    fg_fgt_writer *w;
    ck_assert_msg(fg_fgt_writer_create(path, NULL, &w, &err) == FG_OK, "%s", err.msg);
    uint64_t dims[3] = {200, 3, 40}; /* axis 0 groups of 64; contiguous-axis groups of 32 */
    fg_codec codecs[2] = {fg_codec_quant(4, 64, 0), fg_codec_quant(8, 32, 2)};
    const char *names[2] = {"w.q4.axis0", "kv.q8.last"};
    float *x = malloc(200 * 120 * 4);
    g_rng = 11;
    for (int i = 0; i < 200 * 120; i++)
        x[i] = gauss();
    uint8_t *mem[2][4];
    uint64_t per_chunk = 128;
    for (int t = 0; t < 2; t++) {
        fg_fgt_tensor_desc d = {names[t], codecs[t], 3, dims, NULL, 0};
        ck_assert_msg(fg_fgt_writer_begin_tensor(w, &d, &err) == FG_OK, "%s", err.msg);
        for (uint64_t r = 0, k = 0; r < 200; r += per_chunk, k++) {
            uint64_t nr = 200 - r < per_chunk ? 200 - r : per_chunk, len;
            fg_qview v;
            ck_assert_int_eq(fg_codec_qview(&codecs[t], 3, dims, nr, &v, &err), FG_OK);
            ck_assert_int_eq(fg_codec_chunk_bytes(&codecs[t], 3, dims, nr, &len, &err), FG_OK);
            mem[t][k] = malloc(len);
            ck_assert_msg(fg_quant_encode(&codecs[t], &v, x + r * 120, FG_CODEC_F32, 0, mem[t][k],
                                          len, FG_QUANT_ISA_AUTO, &err) == FG_OK, "%s", err.msg);
            ck_assert_msg(fg_fgt_writer_add_chunk(w, nr, mem[t][k], len, &err) == FG_OK, "%s",
                          err.msg);
        }
        ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), FG_OK);
    }
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == FG_OK, "%s", err.msg);
    fg_fgt_reader *rd;
    ck_assert_msg(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &rd, &err) == FG_OK, "%s", err.msg);
    float *y = malloc(200 * 120 * 4), *ym = malloc(200 * 120 * 4);
    for (int t = 0; t < 2; t++) {
        uint32_t ti;
        fg_fgt_tensor_info info;
        ck_assert_int_eq(fg_fgt_find(rd, names[t], &ti), FG_OK);
        ck_assert_int_eq(fg_fgt_tensor(rd, ti, &info), FG_OK);
        for (uint32_t k = 0; k < info.n_chunks; k++) {
            fg_fgt_chunk_info ci;
            const void *data;
            fg_qview v;
            ck_assert_int_eq(fg_fgt_chunk(rd, ti, k, &ci), FG_OK);
            ck_assert_int_eq(fg_fgt_chunk_data(rd, ti, k, 1, &data, &err), FG_OK);
            ck_assert_int_eq(fg_codec_qview(&info.codec, info.n_dims, info.dims, ci.n_rows, &v,
                                            &err), FG_OK);
            ck_assert_int_eq(fg_quant_decode(&info.codec, &v, data, ci.length,
                                             y + ci.first_row * 120, FG_CODEC_F32, 0,
                                             FG_QUANT_ISA_AUTO, &err), FG_OK);
            ck_assert_int_eq(fg_quant_decode(&codecs[t], &v, mem[t][k], ci.length,
                                             ym + ci.first_row * 120, FG_CODEC_F32, 0,
                                             FG_QUANT_ISA_REF, &err), FG_OK);
            free(mem[t][k]);
        }
        ck_assert_int_eq(memcmp(y, ym, 200 * 120 * 4), 0);
        double worst = 0;
        for (int i = 0; i < 200 * 120; i++)
            worst = fmax(worst, fabs((double)y[i] - x[i]));
        ck_assert_msg(worst < (t == 0 ? 0.5 : 0.03), "%s: worst error %g", names[t], worst);
    }
    fg_fgt_close(rd);
    free(x), free(y), free(ym);
}
END_TEST

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_isa_equals_ref, 0, 4);
    tcase_add_test(tc, test_decode_random_bytes);
    tcase_add_test(tc, test_wide_and_tall);
    tcase_add_test(tc, test_spec_examples);
    tcase_add_test(tc, test_f16_conversions);
    tcase_add_test(tc, test_f16_special_values);
    tcase_add_test(tc, test_constant_groups);
    tcase_add_test(tc, test_nonfinite_refused);
    tcase_add_test(tc, test_range);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_isa_selection);
    tcase_add_test(tc, test_fgt_round_trip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
