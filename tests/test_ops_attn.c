/* test_ops_attn.c - the cross-backend op test's attention cases (test_ops.c has the other
 * ops): every variant (heads, GQA, windows, soft-cap, top-k keep, sinks), head dims, the decode
 * split over the keys in each cache codec, values of another width and place than the keys
 * (multi-head latent attention), on every backend present against the scalar reference
 * (ops_backends.c), and the reference against the formulas.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_backends.h"
#include "quant.h"
#include "testutil.h"

/* ---- KV encode + attention ---- */

/* attention_case's sinks: none (NULL), of the scores' size (about +-1.3 here), or far above
 * them on every other head (almost all the mass goes to the sink) */
enum { SINK_NONE, SINK_SOME, SINK_HUGE };

/* attention_case's head_dim (16 unless a test sets another) */
static uint32_t g_attn_d = 16;

/* bits: 0 an f32 cache, else the quantized cache's (4 or 8) */
static void attention_case(fg_backend **be, int nb, uint32_t heads, uint32_t kvh, uint32_t window,
                           float keep, int bits, uint32_t nq, uint32_t pos0, float softcap,
                           int sink)
{
    enum { CAP = 48, P = 4 };
    const uint32_t D = g_attn_d;
    uint32_t kw = kvh * D, qw = heads * D, ctx = pos0 + nq;
    fg_codec c = bits ? fg_codec_quant(bits, 16, 1) : fg_codec_float(FG_CODEC_F32);
    float sinks[8];
    for (uint32_t h = 0; h < heads && h < 8; h++)
        sinks[h] = sink == SINK_HUGE && h % 2 ? 12.0f + (float)h : 0.6f * (float)h - 1.4f;
    size_t rb = fg_kv_row_bytes(&c, kw);
    uint8_t *kc = calloc(CAP, rb), *vc = calloc(CAP, rb), valid[CAP];
    float *k = malloc(ctx * kw * 4), *v = malloc(ctx * kw * 4), *q = malloc(nq * qw * 4);
    float *ref = malloc(nq * qw * 4), *out = malloc(nq * qw * 4), *sc = malloc(P * 2 * CAP * 4);
    float *kt = malloc(CAP * kw * 4), *vt = malloc(CAP * kw * 4);
    tu_randf(k, ctx * kw, heads * 3 + kvh, 1.0f);
    tu_randf(v, ctx * kw, heads * 5 + kvh, 1.0f);
    tu_randf(q, nq * qw, heads * 7 + kvh, 1.0f);
    for (uint32_t t = 0; t < CAP; t++)
        valid[t] = t >= 2 && t != 9;
    fg_kv_view kv = {kc, vc, c, rb, kw, CAP};
    fg_err err;
    for (int b = -1; b < nb; b++) {
        const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
        fg_backend *x = b < 0 ? NULL : be[b];
        memset(kc, 0, CAP * rb);
        memset(vc, 0, CAP * rb);
        ck_assert_int_eq(f->kv_store(x, &kv, 0, k, v, ctx, &err), FG_OK);
        fg_attn_op a = {q, kv, valid, nq, pos0, heads, kvh, D, window, keep, b < 0 ? ref : out,
                        sc, 2 * CAP, P, kt, vt, softcap, sink ? sinks : NULL};
        ck_assert_msg(f->attention(x, &a, &err) == FG_OK, "%s", err.msg);
        if (b >= 0) {
            double e = tu_nmse(out, ref, nq * qw);
            ck_assert_msg(e < 1e-10, "%s attention %u/%u heads, window %u, keep %g, %d-bit, "
                          "softcap %g, sinks %d: %g", f->name, heads, kvh, window, (double)keep,
                          bits, (double)softcap, sink, e);
        }
    }
    free(kc), free(vc), free(k), free(v), free(q), free(ref), free(out), free(sc), free(kt),
        free(vt);
}

START_TEST(attention_every_variant_every_backend)
{
    fg_backend *be[4];
    int nb = ops_backends(be);
    static const uint32_t hk[][2] = {{4, 4}, {6, 2}, {6, 3}, {4, 1}};
    for (size_t i = 0; i < sizeof hk / sizeof hk[0]; i++)
        for (int bits = 0; bits <= 8; bits += 4) {
            uint32_t h = hk[i][0], kvh = hk[i][1];
            if (bits < 8) {
                attention_case(be, nb, h, kvh, 0, 0.0f, bits, 7, 0, 0, 0);   /* prefill */
                attention_case(be, nb, h, kvh, 5, 0.0f, bits, 9, 13, 0, 0);  /* window */
                attention_case(be, nb, h, kvh, 0, 0.5f, bits, 1, 30, 0, 0);  /* sparse decode */
                attention_case(be, nb, h, kvh, 3, 0.3f, bits, 20, 20, 0, 0); /* both, threaded */
                /* Gemma 2's soft-capped scores (a cap near the scores' size, so it bends them) */
                attention_case(be, nb, h, kvh, 4, 0.0f, bits, 9, 13, 1.5f, 0);
                attention_case(be, nb, h, kvh, 0, 0.5f, bits, 1, 30, 1.5f, 0);
            }
            /* gpt-oss's sinks with each of those, over f32, Q4 and Q8 caches */
            attention_case(be, nb, h, kvh, 0, 0.0f, bits, 7, 0, 0, SINK_SOME);
            attention_case(be, nb, h, kvh, 5, 0.0f, bits, 9, 13, 0, SINK_SOME);
            attention_case(be, nb, h, kvh, 0, 0.5f, bits, 1, 30, 0, SINK_SOME);
            attention_case(be, nb, h, kvh, 3, 0.3f, bits, 20, 20, 0, SINK_SOME);
            attention_case(be, nb, h, kvh, 4, 0.0f, bits, 9, 13, 1.5f, SINK_SOME);
            attention_case(be, nb, h, kvh, 0, 0.0f, bits, 7, 0, 0, SINK_HUGE);
            attention_case(be, nb, h, kvh, 3, 0.3f, bits, 20, 20, 1.5f, SINK_HUGE);
        }
    ops_free_all(be, nb);
}
END_TEST

/* Head dims beside the 16 above: the CUDA kernel sums V over the keys in blockDim / head_dim
 * groups of threads (96: two groups and idle threads; 256: one group; 320: more dims than
 * threads, each thread several) */
START_TEST(attention_head_dims_every_backend)
{
    fg_backend *be[4];
    int nb = ops_backends(be);
    static const uint32_t dims[] = {96, 256, 320};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        g_attn_d = dims[i];
        for (int bits = 0; bits <= 4; bits += 4) {
            attention_case(be, nb, 4, 2, 0, 0.0f, bits, 7, 0, 0, 0);        /* prefill */
            attention_case(be, nb, 4, 2, 0, 0.0f, bits, 1, 30, 0, 0);       /* decode */
            attention_case(be, nb, 4, 2, 5, 0.5f, bits, 9, 13, 1.5f, SINK_SOME);
        }
    }
    g_attn_d = 16;
    ops_free_all(be, nb);
}
END_TEST

/* ---- decode attention split over the keys ----
 * The CUDA backend runs attention of up to 4 queries with dense keys as k_attn_split over
 * splits of the keys, reading the cache in its codec, and k_attn_combine (kernels_cuda.cuh):
 * its result differs from the reference's only in the order of the sums (a running max and sum
 * rescaled per tile and per split). Bound: normalized mean squared error under 1e-10 and every
 * value within DEC_TOL of the reference's (outputs are weighted means of values in [-1, 1]). */
#define DEC_TOL 2e-5
enum { DEC_F32, DEC_Q4, DEC_Q8, DEC_Q4_HI_F32SCALE }; /* dec_case.codec */
enum { DEC_MASK_SOME, DEC_MASK_FIRST_QUERY };          /* dec_case.mask */

typedef struct dec_case {
    uint32_t heads, kvh, d, ctx, nq, window;
    float softcap;
    int sink, codec, mask;
} dec_case;

/* Q4 groups of 16 or 64 (one per head, two a head), Q8 of 64 (four heads a group at d = 16, and
 * past the row's end with one KV head), groups of 8 with F32 scales, the high nibble first */
static fg_codec dec_codec(int codec, uint32_t d)
{
    uint32_t g = d >= 64 || codec == DEC_Q8 ? 64 : 16;
    fg_codec c = codec == DEC_F32 ? fg_codec_float(FG_CODEC_F32)
                                  : fg_codec_quant(codec == DEC_Q8 ? 8 : 4, g, 1);
    if (codec == DEC_Q4_HI_F32SCALE) {
        c.group_size = 8;
        c.nibble_order = FG_NIBBLE_HI_FIRST;
        c.scale_dtype = FG_SCALE_F32;
    }
    return c;
}

/* Case x on every backend against fg_ops_ref; the largest difference seen goes to *worst. */
static void dec_run(fg_backend **be, int nb, const dec_case *x, double *worst)
{
    uint32_t kw = x->kvh * x->d, qw = x->heads * x->d, cap = x->ctx + 3, pos0 = x->ctx - x->nq;
    fg_codec c = dec_codec(x->codec, x->d);
    size_t rb = fg_kv_row_bytes(&c, kw);
    uint8_t *kc = calloc(cap, rb), *vc = calloc(cap, rb), *valid = malloc(cap);
    float *k = malloc((size_t)x->ctx * kw * 4), *v = malloc((size_t)x->ctx * kw * 4);
    float *q = malloc(x->nq * qw * 4), *ref = malloc(x->nq * qw * 4), *out = malloc(x->nq * qw * 4);
    float *sc = malloc(4 * 2 * cap * 4), *kt = malloc((size_t)cap * kw * 4);
    float *vt = malloc((size_t)cap * kw * 4), *sinks = malloc(x->heads * 4);
    tu_randf(k, (size_t)x->ctx * kw, x->ctx * 3 + x->kvh, 1.0f);
    tu_randf(v, (size_t)x->ctx * kw, x->ctx * 5 + x->kvh, 1.0f);
    tu_randf(q, x->nq * qw, x->ctx * 7 + x->heads, 0.5f);
    for (uint32_t h = 0; h < x->heads; h++)
        sinks[h] = x->sink == SINK_HUGE && h % 2 ? 12.0f + (float)h : 0.6f * (float)h - 1.4f;
    for (uint32_t t = 0; t < cap; t++) /* left padding and scattered masked keys, or none valid
                                        * up to the first query's position */
        valid[t] = x->mask == DEC_MASK_FIRST_QUERY ? t > pos0 : t >= 2 && t % 7 != 3;
    fg_kv_view kv = {kc, vc, c, rb, kw, cap};
    fg_err err;
    for (int b = -1; b < nb; b++) {
        const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
        fg_backend *bx = b < 0 ? NULL : be[b];
        memset(kc, 0, cap * rb);
        memset(vc, 0, cap * rb);
        ck_assert_int_eq(f->kv_store(bx, &kv, 0, k, v, x->ctx, &err), FG_OK);
        fg_attn_op a = {q, kv, valid, x->nq, pos0, x->heads, x->kvh, x->d, x->window, 0,
                        b < 0 ? ref : out, sc, 2 * cap, 4, kt, vt, x->softcap,
                        x->sink ? sinks : NULL};
        memset(a.out, 0xff, x->nq * qw * 4); /* NaN: every value must be written */
        ck_assert_msg(f->attention(bx, &a, &err) == FG_OK, "%s", err.msg);
        if (b < 0)
            continue;
        double e = tu_nmse(out, ref, x->nq * qw), m = 0;
        for (uint32_t j = 0; j < x->nq * qw; j++) {
            double dj = fabs((double)out[j] - ref[j]);
            m = dj > m || dj != dj ? dj : m;
        }
        if (!strcmp(f->name, "cuda")) /* the split kernel's */
            *worst = m > *worst ? m : *worst;
        ck_assert_msg(e < 1e-10 && m <= DEC_TOL, "%s decode attention %u/%u heads of %u, ctx %u, "
                      "%u queries, window %u, softcap %g, sinks %d, codec %d, mask %d: nmse %g, "
                      "max diff %g", f->name, x->heads, x->kvh, x->d, x->ctx, x->nq, x->window,
                      (double)x->softcap, x->sink, x->codec, x->mask, e, m);
        for (uint32_t j = 0; x->mask == DEC_MASK_FIRST_QUERY && j < qw; j++)
            ck_assert_msg(out[j] == 0.0f, "%s: a query with no valid key: %g at %u", f->name,
                          (double)out[j], j);
    }
    free(kc), free(vc), free(valid), free(k), free(v), free(q), free(ref), free(out), free(sc);
    free(kt), free(vt), free(sinks);
}

/* Decode shapes over every codec: contexts from 1 key to past 2048 (splits of 64 keys and more,
 * none a multiple of them, partial tiles, several tiles a split at head_dim 128 and 256),
 * grouped-query ratios (a block serves up to 4 query heads of a KV head: 6 of one are read by
 * blocks of 4 and 2, 16 by four blocks), a window, soft-cap, sinks, masked keys, a query with
 * none. */
START_TEST(attention_decode_split_every_codec)
{
    fg_backend *be[4];
    int nb = ops_backends(be);
    static const uint32_t hk[][2] = {{4, 4}, {8, 2}, {6, 3}, {12, 2}, {16, 1}};
    static const uint32_t ctxs[] = {1, 2, 33, 64, 65, 200, 777};
    double worst = 0;
    for (int codec = DEC_F32; codec <= DEC_Q4_HI_F32SCALE; codec++)
        for (size_t i = 0; i < sizeof hk / sizeof hk[0]; i++)
            for (size_t j = 0; j < sizeof ctxs / sizeof ctxs[0]; j++) {
                uint32_t ctx = ctxs[j], nq = 1 + (uint32_t)(i + j) % 4;
                nq = nq > ctx ? ctx : nq;
                dec_case x = {hk[i][0], hk[i][1], 16, ctx, nq, 0, 0, 0, codec, DEC_MASK_SOME};
                dec_run(be, nb, &x, &worst);
                x.window = 50, x.softcap = 1.5f, x.sink = SINK_SOME;
                dec_run(be, nb, &x, &worst);
                x.window = 0, x.softcap = 0, x.sink = (int)j % 2 ? SINK_HUGE : SINK_SOME;
                x.mask = DEC_MASK_FIRST_QUERY;
                dec_run(be, nb, &x, &worst);
            }
    /* the benchmark's shapes at a context past 2048: opt-6.7b's 128-dim heads, Llama-3's 4:1 */
    static const dec_case big[] = {
        {8, 8, 128, 2085, 1, 0, 0, 0, DEC_Q4, DEC_MASK_SOME},
        {8, 2, 128, 2085, 1, 0, 0, SINK_SOME, DEC_Q8, DEC_MASK_SOME},
        {8, 2, 128, 2085, 1, 1000, 30.0f, 0, DEC_F32, DEC_MASK_SOME},
        {4, 1, 256, 2049, 2, 0, 0, 0, DEC_Q4, DEC_MASK_SOME},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        dec_run(be, nb, &big[i], &worst);
    if (nb > 3) /* the CUDA backend ran */
        printf("attention_decode_split_every_codec: the CUDA backend's largest difference from "
               "the reference %.3g (bound %g)\n", worst, DEC_TOL);
    ops_free_all(be, nb);
}
END_TEST

/* ---- values of another width and place than the keys (multi-head latent attention) ----
 * fg_attn_op's v_dim and v_off: each KV head's v_dim values at v_off + g * v_dim of value rows
 * of vw = v_off + n_kv_heads * v_dim values, either inside the key rows (kv.v = kv.k: MLA's
 * absorbed decode over [rope(k_pe) | c], the values c) or a plane of their own (the expanded
 * prefill's narrower value rows). Each case runs on every backend against fg_ops_ref (the
 * decode split bound: nmse under 1e-10, every value within DEC_TOL), and the reference itself
 * against vcase_want, the formula in double over the cache as stored (a quantized one decoded
 * by the codec): the output is n_heads x v_dim a query, every value written, nothing past. */
typedef struct vcase {
    uint32_t heads, kvh, d, vd, voff, ctx, nq, window;
    int bits;        /* 0: an f32 cache; 4 or 8: quantized in groups of `group` along the row */
    uint32_t group;
    int in_k;        /* the values inside the key rows (vw = kvh * d) */
    float softcap;
    int sink;
} vcase;

/* The cache's rows [0, n) of width w as f32 (decoded when quantized). */
static float *vcase_rows(const uint8_t *rows, fg_codec c, uint32_t n, uint32_t w)
{
    float *f = malloc((size_t)n * w * 4);
    if (c.id == FG_CODEC_F32) {
        memcpy(f, rows, (size_t)n * w * 4);
        return f;
    }
    uint64_t dims[2] = {n, w};
    fg_qview q;
    fg_err err;
    ck_assert_int_eq(fg_codec_qview(&c, 2, dims, n, &q, &err), FG_OK);
    ck_assert_msg(fg_quant_decode(&c, &q, rows, (size_t)n * fg_kv_row_bytes(&c, w), f,
                                  FG_CODEC_F32, 0, FG_QUANT_ISA_REF, &err) == FG_OK, "%s",
                  err.msg);
    return f;
}

/* Query i, head h of case x by the definition, in double (K [ctx, kvh d], V [ctx, vw]) */
static void vcase_want(const vcase *x, const float *q, const float *k, const float *v,
                       uint32_t vw, const uint8_t *valid, const float *sinks, uint32_t i,
                       uint32_t h, double *out)
{
    uint32_t pos = x->ctx - x->nq + i, g = h / (x->heads / x->kvh), kw = x->kvh * x->d;
    uint32_t t0 = x->window && pos + 1 > x->window ? pos + 1 - x->window : 0;
    double s[1024], m = -INFINITY, den = 0, sink = sinks ? sinks[h] : -INFINITY;
    for (uint32_t c = 0; c < x->vd; c++)
        out[c] = 0;
    for (uint32_t t = t0; t <= pos; t++) {
        s[t] = 0;
        for (uint32_t c = 0; c < x->d; c++)
            s[t] += (double)q[(size_t)i * x->heads * x->d + h * x->d + c] * k[(size_t)t * kw +
                                                                                g * x->d + c];
        s[t] = x->softcap > 0 ? x->softcap * tanh(s[t] / x->softcap) : s[t];
        m = valid[t] && s[t] > m ? s[t] : m;
    }
    if (m == -INFINITY)
        return;
    m = sink > m ? sink : m;
    for (uint32_t t = t0; t <= pos; t++)
        den += valid[t] ? exp(s[t] - m) : 0;
    den += exp(sink - m);
    for (uint32_t t = t0; t <= pos; t++)
        for (uint32_t c = 0; valid[t] && c < x->vd; c++)
            out[c] += exp(s[t] - m) / den * v[(size_t)t * vw + x->voff + g * x->vd + c];
}

/* The reference's output ref against vcase_want */
static void vcase_check_ref(const vcase *x, fg_codec c, const float *q, const uint8_t *kc,
                            const uint8_t *vc, uint32_t vw, const uint8_t *valid,
                            const float *sinks, const float *ref)
{
    float *k = vcase_rows(kc, c, x->ctx, x->kvh * x->d), *v = vcase_rows(vc, c, x->ctx, vw);
    double want[1024], m = 0;
    for (uint32_t i = 0; i < x->nq; i++)
        for (uint32_t h = 0; h < x->heads; h++) {
            vcase_want(x, q, k, v, vw, valid, sinks, i, h, want);
            for (uint32_t j = 0; j < x->vd; j++) {
                double dj = fabs(want[j] - ref[((size_t)i * x->heads + h) * x->vd + j]);
                m = dj > m || dj != dj ? dj : m;
            }
        }
    ck_assert_msg(m < 1e-5, "reference vs the formula: values %u of %u from %u, %d-bit: %g",
                  x->vd, x->d, x->voff, x->bits, m);
    free(k), free(v);
}

/* out (host) = backend b's attention a with its queries and output in b's device memory (the
 * cache where a has it: beside it, for a backend with cpu_attention) */
static void vcase_on_device(fg_backend *b, const fg_attn_op *a, size_t qn, size_t on, float *out)
{
    fg_device *d = b->dev;
    fg_attn_op x = *a;
    fg_err err;
    memset(out, 0xff, on * 4);
    x.q = ops_place(d, 1, a->q, qn * 4);
    x.out = ops_place(d, 1, out, on * 4);
    ck_assert_msg(b->iface->attention(b, &x, &err) == FG_OK, "%s: %s", b->iface->name, err.msg);
    ck_assert_int_eq(d->iface->copy(d, out, FG_BUFT_HOST, x.out, FG_BUFT_DEVICE, on * 4, NULL,
                                    &err), FG_OK);
    ops_unplace(d, 1, (void *)x.q);
    ops_unplace(d, 1, x.out);
}

/* Case x on the nb backends be (the last nd of them with their operands in device memory) */
static void vcase_run(fg_backend **be, int nb, int nd, const vcase *x)
{
    enum { GUARD = 16 };
    uint32_t kw = x->kvh * x->d, qw = x->heads * x->d, ow = x->heads * x->vd, cap = x->ctx + 2;
    uint32_t vw = x->voff + x->kvh * x->vd, pos0 = x->ctx - x->nq;
    ck_assert(!x->in_k || vw == kw);
    fg_codec c = x->bits ? fg_codec_quant((unsigned)x->bits, x->group, 1)
                         : fg_codec_float(FG_CODEC_F32);
    size_t rb = fg_kv_row_bytes(&c, kw), rbv = fg_kv_row_bytes(&c, vw);
    uint8_t *kc = calloc(cap, rb), *vc = x->in_k ? kc : calloc(cap, rbv), *valid = malloc(cap);
    float *k = malloc((size_t)x->ctx * kw * 4), *v = malloc((size_t)x->ctx * vw * 4);
    float *q = malloc((size_t)x->nq * qw * 4), *ref = malloc(((size_t)x->nq * ow + GUARD) * 4);
    float *out = malloc(((size_t)x->nq * ow + GUARD) * 4), *sc = malloc(4 * 2 * cap * 4);
    float *kt = malloc((size_t)cap * kw * 4), *vt = malloc((size_t)cap * vw * 4), sinks[16];
    tu_randf(k, (size_t)x->ctx * kw, x->ctx * 3 + x->d, 1.0f);
    tu_randf(v, (size_t)x->ctx * vw, x->ctx * 5 + x->vd, 1.0f);
    for (size_t j = 0; j < (size_t)x->ctx * vw; j++) /* before the values: far off, never read */
        v[j] = j % vw < x->voff ? 50.0f + (float)(j % 7) : v[j];
    tu_randf(q, (size_t)x->nq * qw, x->ctx * 7 + x->heads, 0.5f);
    for (uint32_t h = 0; h < x->heads && h < 16; h++)
        sinks[h] = 0.6f * (float)h - 1.4f;
    for (uint32_t t = 0; t < cap; t++)
        valid[t] = t >= 2 && t % 7 != 3;
    fg_err err;
    fg_kv_view kv = {kc, kc, c, rb, kw, cap}, vv = {vc, vc, c, rbv, vw, cap};
    ck_assert_int_eq(fg_ops_ref.kv_store(NULL, &kv, 0, k, k, x->ctx, &err), FG_OK);
    if (!x->in_k)
        ck_assert_int_eq(fg_ops_ref.kv_store(NULL, &vv, 0, v, v, x->ctx, &err), FG_OK);
    kv.v = vc;
    for (int b = -1; b < nb; b++) {
        const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
        fg_backend *bx = b < 0 ? NULL : be[b];
        fg_attn_op a = {q, kv, valid, x->nq, pos0, x->heads, x->kvh, x->d, x->window, 0,
                        b < 0 ? ref : out, sc, 2 * cap, 4, kt, vt, x->softcap,
                        x->sink ? sinks : NULL, x->vd, x->voff};
        memset(a.out, 0xff, (size_t)x->nq * ow * 4); /* NaN: every value must be written */
        for (int j = 0; j < GUARD; j++)
            a.out[(size_t)x->nq * ow + j] = 1234.0f;
        if (b >= nb - nd)
            vcase_on_device(bx, &a, (size_t)x->nq * qw, (size_t)x->nq * ow, out);
        else
            ck_assert_msg(f->attention(bx, &a, &err) == FG_OK, "%s: %s", f->name, err.msg);
        for (int j = 0; j < GUARD; j++)
            ck_assert_msg(a.out[(size_t)x->nq * ow + j] == 1234.0f, "%s wrote past its output",
                          f->name);
        if (b < 0) {
            vcase_check_ref(x, c, q, kc, vc, vw, valid, x->sink ? sinks : NULL, ref);
            continue;
        }
        double e = tu_nmse(out, ref, (size_t)x->nq * ow), m = 0;
        for (size_t j = 0; j < (size_t)x->nq * ow; j++) {
            double dj = fabs((double)out[j] - ref[j]);
            m = dj > m || dj != dj ? dj : m;
        }
        ck_assert_msg(e < 1e-10 && m <= DEC_TOL, "%s%s: %u/%u heads, keys of %u, values of %u "
                      "from %u (%s), ctx %u, %u queries, window %u, %d-bit: nmse %g, max %g",
                      f->name, b >= nb - nd ? " (beside the cache)" : "", x->heads, x->kvh, x->d,
                      x->vd, x->voff,
                      x->in_k ? "in the key rows" : "a plane", x->ctx, x->nq, x->window, x->bits,
                      e, m);
    }
    if (!x->in_k)
        free(vc);
    free(kc), free(valid), free(k), free(v), free(q), free(ref), free(out), free(sc), free(kt);
    free(vt);
}

/* MLA's two layouts and their neighbours on f32, Q4 and Q8 caches: decode (up to 4 queries:
 * the CUDA split kernels, reading the codec) and prefill shapes (k_attention), grouped-query
 * heads, windows, soft-cap, sinks, values wider than the keys (the split kernel leaves those
 * to k_attention), DeepSeek's own dims (keys 576 = rope 64 + latent 512, values the latent);
 * each also on the device backends with cpu_attention, the queries and output in device
 * memory and the cache in host memory (fgb_attention_on_host's room: the output's and the
 * value rows' sizes); and an offset inside a quantized group, refused by every backend. */
START_TEST(attention_value_width_every_backend)
{
    fg_backend *be[6];
    int nb = ops_backends(be), nd = 0;
    fg_err err;
    fg_backend_sim_opts so = {2, FG_COMPUTE_F32, 64u << 20, 0, 1, 0};
    ck_assert_int_eq(fg_backend_sim_create(&so, &be[nb + nd++], &err), FG_OK);
    fg_backend_cuda_opts co = {0, 2, FG_COMPUTE_F32, 1};
    if (fg_backend_cuda_create(&co, &be[nb + nd], &err) == FG_OK)
        nd++;
    static const vcase cases[] = {
        /* heads kvh d vd voff ctx nq window bits group in_k softcap sink */
        {4, 1, 40, 32, 8, 70, 1, 0, 0, 0, 1, 0, 0},        /* absorbed decode, f32 */
        {4, 1, 40, 32, 8, 70, 6, 9, 0, 0, 1, 1.5f, 0},     /* ... prefill, window, soft-cap */
        {8, 2, 24, 16, 0, 50, 3, 0, 0, 0, 0, 0, SINK_SOME}, /* expanded: a narrower plane */
        {6, 3, 16, 8, 4, 33, 9, 5, 0, 0, 0, 0, 0},         /* a plane from an offset */
        {4, 2, 16, 24, 0, 40, 2, 0, 0, 0, 0, 0, 0},        /* values wider than the keys */
        {4, 2, 16, 24, 0, 40, 5, 7, 0, 0, 0, 0, 0},
        {16, 1, 576, 512, 64, 130, 1, 0, 0, 0, 1, 0, 0},   /* DeepSeek's absorbed dims */
        {4, 1, 80, 64, 16, 70, 1, 0, 4, 16, 1, 0, 0},      /* Q4: the latent from a group */
        {4, 1, 80, 64, 16, 70, 7, 20, 8, 16, 1, 0, SINK_SOME}, /* Q8 prefill, window */
        {4, 2, 32, 24, 16, 45, 2, 0, 8, 16, 0, 0, 0},      /* Q8 plane, GQA */
        {4, 2, 32, 24, 16, 45, 8, 0, 4, 16, 0, 1.5f, 0},   /* Q4 plane, GQA, prefill */
        {16, 1, 576, 512, 64, 130, 2, 0, 4, 64, 1, 0, 0},  /* DeepSeek's, fg's 4-bit cache */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        vcase_run(be, nb + nd, nd, &cases[i]);
    /* an offset inside a group (8 of a group of 16): refused, whoever runs it */
    enum { CAP = 8, D = 32 };
    fg_codec c = fg_codec_quant(4, 16, 1);
    size_t rb = fg_kv_row_bytes(&c, D);
    uint8_t *kc = calloc(CAP, rb), valid[CAP] = {1, 1, 1, 1, 1, 1, 1, 1};
    float q[D] = {0}, out[D], sc[2 * CAP], kt[CAP * D];
    fg_kv_view kv = {kc, kc, c, rb, D, CAP};
    for (int b = -1; b < nb + nd; b++) {
        const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
        fg_attn_op a = {q, kv, valid, 1, 3, 1, 1, D, 0, 0, out, sc, 2 * CAP, 1, kt, kt, 0, NULL,
                        24, 8};
        ck_assert_msg(f->attention(b < 0 ? NULL : be[b], &a, &err) == FG_ERR_INVALID_ARG,
                      "%s took a value offset inside a group", f->name);
    }
    free(kc);
    ops_free_all(be, nb + nd);
}
END_TEST

/* Head h's output by transformers' eager attention with sinks (modeling_gpt_oss.py), written
 * out in double apart from the kernels: query i at cache position pos attends keys t <= pos
 * with valid[t] (scores q.k, soft-capped when cap > 0); the sink is one more column of the
 * softmax whose weight is dropped. A query with no valid key gets zeros. */
static void sink_want(const float *q, const float *k, const float *v, const uint8_t *valid,
                      uint32_t pos, uint32_t kw, uint32_t d, float cap, float sink, double *out)
{
    double s[64], m = -INFINITY, den = 0;
    int any = 0;
    for (uint32_t t = 0; t <= pos; t++) {
        s[t] = 0;
        for (uint32_t c = 0; c < d; c++)
            s[t] += (double)q[c] * k[(size_t)t * kw + c];
        s[t] = cap > 0 ? cap * tanh(s[t] / cap) : s[t];
        if (valid[t] && s[t] > m)
            m = s[t];
        any |= valid[t];
    }
    for (uint32_t c = 0; c < d; c++)
        out[c] = 0;
    if (!any)
        return;
    m = sink > m ? sink : m;
    for (uint32_t t = 0; t <= pos; t++)
        den += valid[t] ? exp(s[t] - m) : 0;
    den += exp(sink - m); /* exp(-inf) = 0: no sink */
    for (uint32_t t = 0; t <= pos; t++)
        for (uint32_t c = 0; valid[t] && c < d; c++)
            out[c] += exp(s[t] - m) / den * v[(size_t)t * kw + c];
}

/* Sinks against sink_want on every backend and the reference: grouped heads, left padding (its
 * queries get zeros, sink or not), a masked key, a sink near the scores, one far below, one so
 * far above that exp(sink) overflows f32 (only the max taken with the sink keeps it finite), one
 * of -inf (no sink: every backend's bits equal those of sinks = NULL); with and without a cap. */
START_TEST(attention_sinks_match_the_formula)
{
    enum { H = 4, KVH = 2, D = 8, NQ = 10, CAP = 12, KW = KVH * D, QW = H * D };
    fg_backend *be[4];
    int nb = ops_backends(be);
    float q[NQ * QW], k[NQ * KW], v[NQ * KW], out[NQ * QW], plain[NQ * QW], sc[4 * 2 * CAP];
    const float sinks[H] = {0.7f, -6.0f, 100.0f, -INFINITY}, none[H] = {-INFINITY, -INFINITY,
                                                                        -INFINITY, -INFINITY};
    uint8_t valid[CAP] = {0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    tu_randf(q, NQ * QW, 41, 1.0f);
    tu_randf(k, NQ * KW, 42, 1.0f);
    tu_randf(v, NQ * KW, 43, 1.0f);
    fg_kv_view kv = {k, v, fg_codec_float(FG_CODEC_F32), KW * 4, KW, CAP};
    fg_err err;
    for (int capped = 0; capped < 2; capped++)
        for (int b = -1; b < nb; b++) {
            const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
            fg_backend *x = b < 0 ? NULL : be[b];
            float cap = capped ? 2.0f : 0.0f;
            fg_attn_op a = {q, kv, valid, NQ, 0, H, KVH, D, 0, 0, out, sc, 2 * CAP, 4, NULL,
                            NULL, cap, sinks};
            ck_assert_msg(f->attention(x, &a, &err) == FG_OK, "%s", err.msg);
            for (uint32_t i = 0; i < NQ; i++)
                for (uint32_t h = 0; h < H; h++) {
                    double want[D];
                    sink_want(q + i * QW + h * D, k + h / 2 * D, v + h / 2 * D, valid, i, KW, D,
                              cap, sinks[h], want);
                    for (uint32_t c = 0; c < D; c++) {
                        float got = out[i * QW + h * D + c];
                        ck_assert_msg(fabs(got - want[c]) <= 1e-5 * (1 + fabs(want[c])) &&
                                      (i >= 3 || got == 0.0f), /* 0..2: padding, zeros */
                                      "%s cap %g query %u head %u dim %u: %g, want %g", f->name,
                                      (double)cap, i, h, c, (double)got, want[c]);
                    }
                }
            a.sinks = NULL, a.out = plain;
            ck_assert_int_eq(f->attention(x, &a, &err), FG_OK);
            a.sinks = none, a.out = out;
            ck_assert_int_eq(f->attention(x, &a, &err), FG_OK);
            ck_assert_msg(!memcmp(out, plain, sizeof out), "%s: sinks of -inf differ from none",
                          f->name);
        }
    ops_free_all(be, nb);
}
END_TEST

/* Sinks are an operand like q: in device memory they are used in place, in host memory staged
 * (sim, CUDA), and attention beside a host cache (cpu_attention) brings them down to the host,
 * whichever memory q and the validity are in. Every way gives the bits of the same backend
 * with host sinks, and the CPU backend's within rounding (its bits when the CPU computes). */
START_TEST(attention_sinks_device_memory_and_beside_the_cache)
{
    enum { H = 6, KVH = 2, D = 16, NQ = 3, POS = 17, CAP = 24, KW = KVH * D, QW = H * D };
    fg_backend *be[4], *cpu;
    fg_err err;
    int nb = 0;
    fg_backend_sim_opts so = {2, FG_COMPUTE_F32, 64u << 20, 0, 0, 0};
    for (int beside = 0; beside < 2; beside++) {
        so.cpu_attention = beside;
        ck_assert_int_eq(fg_backend_sim_create(&so, &be[nb++], &err), FG_OK);
        fg_backend_cuda_opts co = {0, 2, FG_COMPUTE_F32, beside};
        if (fg_backend_cuda_create(&co, &be[nb], &err) == FG_OK)
            nb++;
    }
    ck_assert_int_eq(fg_backend_cpu_create(2, &cpu, &err), FG_OK);
    float q[NQ * QW], k[CAP * KW], v[CAP * KW], sinks[H], want[NQ * QW], o1[NQ * QW];
    float o2[NQ * QW], sc[4 * 2 * CAP];
    uint8_t valid[CAP];
    tu_randf(q, NQ * QW, 51, 1.0f);
    tu_randf(k, CAP * KW, 52, 1.0f);
    tu_randf(v, CAP * KW, 53, 1.0f);
    tu_randf(sinks, H, 54, 3.0f);
    for (int t = 0; t < CAP; t++)
        valid[t] = t >= 2 && t != 7;
    fg_kv_view kv = {k, v, fg_codec_float(FG_CODEC_F32), KW * 4, KW, CAP};
    fg_attn_op a = {q, kv, valid, NQ, POS, H, KVH, D, 6, 0, want, sc, 2 * CAP, 4, NULL, NULL,
                    0, sinks};
    ck_assert_int_eq(cpu->iface->attention(cpu, &a, &err), FG_OK);
    for (int b = 0; b < nb; b++) {
        fg_device *d = be[b]->dev;
        fg_attn_op x = a;
        x.out = o1;
        ck_assert_msg(be[b]->iface->attention(be[b], &x, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(tu_nmse(o1, want, NQ * QW) < 1e-10, "%s (backend %d): %g",
                      be[b]->iface->name, b, tu_nmse(o1, want, NQ * QW));
        for (int where = 1; where < 4; where++) { /* bit 0: sinks, bit 1: q and valid */
            x.sinks = ops_place(d, where & 1, sinks, sizeof sinks);
            x.q = ops_place(d, where & 2, q, sizeof q);
            x.valid = ops_place(d, where & 2, valid, sizeof valid);
            x.out = o2;
            memset(o2, 0, sizeof o2);
            ck_assert_msg(be[b]->iface->attention(be[b], &x, &err) == FG_OK, "%s", err.msg);
            ck_assert_msg(!memcmp(o1, o2, sizeof o1), "%s (backend %d): operands %d differ",
                          be[b]->iface->name, b, where);
            ops_unplace(d, where & 1, (void *)x.sinks);
            ops_unplace(d, where & 2, (void *)x.q);
            ops_unplace(d, where & 2, (void *)x.valid);
        }
    }
    ops_free_all(be, nb);
    fg_backend_free(cpu);
}
END_TEST

/* Grouped-query attention equals multi-head attention with each KV head repeated, and a window
 * equals masking the keys before it. */
START_TEST(gqa_and_window_match_their_definitions)
{
    enum { H = 4, KVH = 2, D = 8, CTX = 12 };
    float q[H * D], k[CTX * KVH * D], v[CTX * KVH * D], kr[CTX * H * D], vr[CTX * H * D];
    float o1[H * D], o2[H * D], sc[2 * CTX];
    uint8_t valid[CTX], vw[CTX];
    tu_randf(q, sizeof q / 4, 1, 1.0f);
    tu_randf(k, sizeof k / 4, 2, 1.0f);
    tu_randf(v, sizeof v / 4, 3, 1.0f);
    for (int t = 0; t < CTX; t++)
        for (int h = 0; h < H; h++) {
            memcpy(kr + (t * H + h) * D, k + (t * KVH + h / 2) * D, D * 4);
            memcpy(vr + (t * H + h) * D, v + (t * KVH + h / 2) * D, D * 4);
        }
    for (int t = 0; t < CTX; t++) {
        valid[t] = 1;
        vw[t] = t > CTX - 1 - 4; /* the last 4 keys */
    }
    fg_attn_args g = {q, k, v, KVH * D, valid, 1, CTX - 1, H, D, o1, sc, 0, 2 * CTX, 1, KVH, 4};
    fg_attn_args m = {q, kr, vr, H * D, vw, 1, CTX - 1, H, D, o2, sc, 0, 2 * CTX, 1, 0, 0};
    fg_cpu_attention_ref(&g);
    fg_cpu_attention_ref(&m);
    ck_assert(tu_nmse(o1, o2, H * D) < 1e-12);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops_attn");
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, attention_every_variant_every_backend);
    tcase_add_test(tc, attention_head_dims_every_backend);
    tcase_add_test(tc, attention_decode_split_every_codec);
    tcase_add_test(tc, attention_value_width_every_backend);
    tcase_add_test(tc, attention_sinks_match_the_formula);
    tcase_add_test(tc, attention_sinks_device_memory_and_beside_the_cache);
    tcase_add_test(tc, gqa_and_window_match_their_definitions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
