/* test_ops.c - the cross-backend op test (ggml's test-backend-ops, for fg): every op of every
 * backend present runs on random inputs of odd shapes and is compared with the scalar
 * reference (fg_ops_ref) by normalized mean squared error. A new backend adds itself to
 * ops_backends() and inherits every case: the simulated device always, CUDA where a GPU is visible
 * (test_backend_cuda covers its F16 path and skips without a GPU).
 *
 * Attention has its own file (test_ops_attn.c); the backends and the device-memory helpers both
 * use are in ops_backends.c.
 *
 * Typed weights are built here the way a store holds them: rows cut into chunks of whole row
 * quanta, each chunk encoded in F32/F16/BF16/Q4/Q8 (groups along either axis), handed out as
 * pieces; every acquire must be matched by a release.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops_backends.h"
#include "par.h"
#include "quant.h"
#include "sample.h"
#include "testutil.h"

/* ---- typed weights ---- */

typedef struct tw {
    fg_codec codec;
    uint64_t dims[2];
    uint32_t n_pieces;
    uint64_t rows[64];
    void *data[64];
    size_t len[64];
    int held;
} tw;

static int tw_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    tw *t = ctx;
    if (i >= t->n_pieces)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "piece %u", i);
    t->held++;
    *p = (fg_wpiece){t->data[i], t->len[i], t->codec, 2, {t->dims[0], t->dims[1]}, t->rows[i],
                     t->rows[i + 1] - t->rows[i], t};
    return FG_OK;
}

static int tw_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)err, (void)p;
    ((tw *)ctx)->held--;
    return FG_OK;
}

/* w [n, k] f32 encoded in codec, in chunks of about `chunk` rows (whole quanta). */
static void tw_make(tw *t, const float *w, uint32_t n, uint32_t k, fg_codec codec, uint32_t chunk)
{
    memset(t, 0, sizeof *t);
    t->codec = codec;
    t->dims[0] = n;
    t->dims[1] = k;
    uint64_t q = fg_codec_row_quantum(&codec, 2);
    chunk = (uint32_t)((chunk + q - 1) / q * q);
    for (uint32_t r = 0; r < n; r += chunk) {
        uint32_t rows = n - r < chunk ? n - r : chunk, i = t->n_pieces++;
        t->rows[i] = r;
        const float *src = w + (size_t)r * k;
        size_t cnt = (size_t)rows * k;
        if (codec.id == FG_CODEC_F32) {
            t->len[i] = cnt * 4;
            t->data[i] = malloc(t->len[i]);
            memcpy(t->data[i], src, t->len[i]);
        } else if (codec.id == FG_CODEC_F16 || codec.id == FG_CODEC_BF16) {
            uint16_t *d = malloc(cnt * 2);
            for (size_t j = 0; j < cnt; j++) {
                uint32_t bits;
                memcpy(&bits, &src[j], 4);
                d[j] = codec.id == FG_CODEC_F16 ? fg_f32_to_f16_1(src[j]) : (uint16_t)(bits >> 16);
            }
            t->data[i] = d;
            t->len[i] = cnt * 2;
        } else {
            fg_qview v;
            fg_err err;
            ck_assert_int_eq(fg_codec_qview(&codec, 2, t->dims, rows, &v, &err), FG_OK);
            ck_assert_int_eq(fg_quant_chunk_bytes(&v, &t->len[i], &err), FG_OK);
            t->data[i] = malloc(t->len[i]);
            ck_assert_msg(fg_quant_encode(&codec, &v, src, FG_CODEC_F32, 0, t->data[i], t->len[i],
                                          FG_QUANT_ISA_REF, &err) == FG_OK, "%s", err.msg);
        }
    }
    t->rows[t->n_pieces] = n;
}

static fg_weight tw_weight(tw *t)
{
    return (fg_weight){NULL, t->n_pieces, t->rows, tw_acquire, tw_release, NULL, t};
}

static void tw_free(tw *t)
{
    for (uint32_t i = 0; i < t->n_pieces; i++)
        free(t->data[i]);
}

static fg_codec codec_of(int c)
{
    switch (c) {
    case 0: return fg_codec_float(FG_CODEC_F32);
    case 1: return fg_codec_float(FG_CODEC_F16);
    case 2: return fg_codec_float(FG_CODEC_BF16);
    case 3: return fg_codec_quant(4, 64, 0);
    case 4: return fg_codec_quant(4, 32, 1);
    default: return fg_codec_quant(8, 64, 1);
    }
}

/* ---- linear and gather ---- */

START_TEST(linear_every_codec_every_backend)
{
    static const uint32_t shapes[][3] = {{1, 5, 7},   {3, 130, 64}, {17, 33, 96},
                                         {8, 200, 130}, {48, 40, 96}, {49, 40, 64},
                                         {131, 300, 520}};
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int c = 0; c < 6; c++) {
            uint32_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float *x = malloc((size_t)m * k * 4), *w = malloc((size_t)n * k * 4);
            float *bias = malloc((size_t)n * 4), *ref = malloc((size_t)m * n * 4);
            float *y = malloc((size_t)m * n * 4);
            tu_randf(x, (size_t)m * k, s * 7 + 1, 1.0f);
            tu_randf(w, (size_t)n * k, s * 7 + 2, 0.5f);
            tu_randf(bias, n, s * 7 + 3, 1.0f);
            tw t;
            tw_make(&t, w, n, k, codec_of(c), 24 + (uint32_t)s * 11);
            fg_weight wt = tw_weight(&t);
            fg_backend *r;
            ck_assert_int_eq(fg_backend_ref_create(&r, &err), FG_OK);
            ck_assert_int_eq(r->iface->reserve(r, (uint64_t)n * k, &err), FG_OK);
            ck_assert_int_eq(r->iface->linear(r, x, &wt, c & 1 ? bias : NULL, ref, m, n, k, &err),
                             FG_OK);
            fg_backend_free(r);
            for (int b = 0; b < nb; b++) {
                ck_assert_int_eq(be[b]->iface->reserve(be[b], (uint64_t)n * k, &err), FG_OK);
                memset(y, 0xff, (size_t)m * n * 4);
                ck_assert_msg(be[b]->iface->linear(be[b], x, &wt, c & 1 ? bias : NULL, y, m, n, k,
                                                   &err) == FG_OK, "%s", err.msg);
                double e = tu_nmse(y, ref, (size_t)m * n);
                ck_assert_msg(e < 1e-10, "%s linear %ux%ux%u codec %d: nmse %g",
                              be[b]->iface->name, m, n, k, c, e);
                ck_assert_int_eq(t.held, 0);
            }
            /* the typed weight against the plain f32 product of its decoded rows */
            if (c == 0) {
                fg_weight whole = {w, 0, NULL, NULL, NULL, NULL, NULL};
                ck_assert_int_eq(be[0]->iface->linear(be[0], x, &whole, NULL, y, m, n, k, &err),
                                 FG_OK);
                ck_assert_msg(tu_nmse(y, ref, (size_t)m * n) < 1e-10, "f32 whole vs pieces");
            }
            tw_free(&t);
            free(x), free(w), free(bias), free(ref), free(y);
        }
    ops_free_all(be, nb);
}
END_TEST

START_TEST(gather_every_codec_every_backend)
{
    enum { N = 150, K = 64, M = 9 };
    int32_t ids[M] = {0, 149, 64, 63, 7, 7, 100, 128, 65};
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    float *w = malloc(N * K * 4), *ref = malloc(M * K * 4), *y = malloc(M * K * 4);
    tu_randf(w, N * K, 5, 1.0f);
    for (int c = 0; c < 6; c++) {
        tw t;
        tw_make(&t, w, N, K, codec_of(c), 40);
        fg_weight wt = tw_weight(&t);
        fg_backend *r;
        ck_assert_int_eq(fg_backend_ref_create(&r, &err), FG_OK);
        ck_assert_int_eq(r->iface->reserve(r, N * K, &err), FG_OK);
        ck_assert_int_eq(r->iface->gather(r, &wt, N, ids, M, ref, K, &err), FG_OK);
        fg_backend_free(r);
        for (int b = 0; b < nb; b++) {
            ck_assert_int_eq(be[b]->iface->reserve(be[b], N * K, &err), FG_OK);
            ck_assert_int_eq(be[b]->iface->gather(be[b], &wt, N, ids, M, y, K, &err), FG_OK);
            ck_assert_msg(!memcmp(y, ref, M * K * 4), "%s gather codec %d", be[b]->iface->name, c);
            ck_assert_int_eq(t.held, 0);
            int32_t bad = N;
            ck_assert_int_eq(be[b]->iface->gather(be[b], &wt, N, &bad, 1, y, K, &err),
                             FG_ERR_INVALID_ARG);
            ck_assert_msg(strstr(err.msg, "outside the vocabulary"), "%s", err.msg);
        }
        tw_free(&t);
    }
    free(w), free(ref), free(y);
    ops_free_all(be, nb);
}
END_TEST

/* ---- the small ops ---- */

/* The CPU backend splits norm rows and activation elements across its helpers at prefill
 * sizes (>= 65,536 elements): the result equals the same op run a few rows at a time (below the
 * split) bit for bit, and the reference within rounding. 3 threads, so parts are uneven. */
START_TEST(cpu_small_ops_split_across_helpers)
{
    enum { R = 97, W = 1031, N = R * W };
    fg_backend *be;
    fg_err err;
    ck_assert_int_eq(fg_backend_cpu_create(3, &be, &err), FG_OK);
    const fg_backend_iface *f = be->iface, *r = &fg_ops_ref;
    float *x = malloc(N * 4), *g = malloc(W * 4), *b = malloc(W * 4), *up = malloc(N * 4);
    float *y = malloc(N * 4), *one = malloc(N * 4), *ref = malloc(N * 4);
    tu_randf(x, N, 21, 3.0f);
    tu_randf(g, W, 22, 1.0f);
    tu_randf(b, W, 23, 1.0f);
    tu_randf(up, N, 24, 1.0f);
    ck_assert_int_eq(f->layernorm(be, x, g, b, y, R, W, 1e-5f, &err), FG_OK);
    for (uint32_t i = 0; i < R; i += 8) /* 8 x 1031 elements a call: not split */
        f->layernorm(be, x + (size_t)i * W, g, b, one + (size_t)i * W, R - i < 8 ? R - i : 8, W,
                     1e-5f, &err);
    ck_assert(!memcmp(y, one, N * 4));
    r->layernorm(NULL, x, g, b, ref, R, W, 1e-5f, &err);
    ck_assert_msg(tu_nmse(y, ref, N) < 1e-12, "layernorm nmse %g", tu_nmse(y, ref, N));
    ck_assert_int_eq(f->rmsnorm(be, x, g, y, R, W, 1e-6f, &err), FG_OK);
    for (uint32_t i = 0; i < R; i += 8)
        f->rmsnorm(be, x + (size_t)i * W, g, one + (size_t)i * W, R - i < 8 ? R - i : 8, W, 1e-6f,
                   &err);
    ck_assert(!memcmp(y, one, N * 4));
    r->rmsnorm(NULL, x, g, ref, R, W, 1e-6f, &err);
    ck_assert_msg(tu_nmse(y, ref, N) < 1e-12, "rmsnorm nmse %g", tu_nmse(y, ref, N));
    for (int a = FG_ACT_RELU; a <= FG_ACT_SWIGLU_OAI; a++) /* the clamped SwiGLU gated only */
        for (int gated = a == FG_ACT_SWIGLU_OAI; gated < 2; gated++) {
            fg_act_fn fn = {(fg_act)a, 1.702f, 2.5f}; /* a limit inside x's +-3: the clamp bites */
            memcpy(y, x, N * 4), memcpy(one, x, N * 4), memcpy(ref, x, N * 4);
            ck_assert_int_eq(f->act(be, fn, y, gated ? up : NULL, N, &err), FG_OK);
            for (size_t i = 0; i < N; i += 4099)
                f->act(be, fn, one + i, gated ? up + i : NULL, N - i < 4099 ? N - i : 4099, &err);
            ck_assert_msg(!memcmp(y, one, N * 4), "act %d gated %d: split differs", a, gated);
            r->act(NULL, fn, ref, gated ? up : NULL, N, &err);
            ck_assert_msg(tu_nmse(y, ref, N) < 1e-12, "act %d", a);
        }
    free(x), free(g), free(b), free(up), free(y), free(one), free(ref);
    fg_backend_free(be);
}
END_TEST

START_TEST(norms_rope_act_add_scale_every_backend)
{
    enum { R = 5, H = 3, D = 18, W = H * D };
    fg_backend *be[4];
    int nb = ops_backends(be);
    const fg_backend_iface *r = &fg_ops_ref;
    fg_err err;
    float x[R * W], g[W], bb[W], ref[R * W], y[R * W], up[R * W];
    tu_randf(x, R * W, 11, 2.0f);
    tu_randf(g, W, 12, 1.0f);
    tu_randf(bb, W, 13, 1.0f);
    tu_randf(up, R * W, 14, 1.0f);
    int32_t pos[R] = {0, 1, 7, 300, -1};
    fg_rope ropes[6] = {{.theta = 10000.0f, .rot_dim = D},
                        {.theta = 500000.0f, .scaling = FG_ROPE_LLAMA3, .factor = 8.0f,
                         .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .orig_max_pos = 64,
                         .rot_dim = D},
                        {.theta = 10000.0f, .scaling = FG_ROPE_LINEAR, .factor = 2.0f,
                         .rot_dim = D - 6},
                        {.theta = 1e6f, .scaling = FG_ROPE_YARN, .factor = 4.0f,
                         .orig_max_pos = 128, .beta_fast = 32.0f, .beta_slow = 1.0f,
                         .truncate = 1, .attn_factor = 1.1386f, .rot_dim = D},
                        {.theta = 10000.0f, .scaling = FG_ROPE_LONGROPE, .rot_dim = D - 6,
                         .use_long = 1, .long_factor = {1.5f, 2.5f, 4, 6, 9, 13},
                         .rot_scale = 1.44f},
                        {.theta = 1e6f, .scaling = FG_ROPE_YARN, .factor = 16.0f,
                         .orig_max_pos = 4, .beta_fast = 32.0f, .beta_slow = 1.0f,
                         .truncate = 1, .attn_factor = 1.0f, .rot_dim = D, .pos_beta = 0.2f}};
    for (int b = 0; b < nb; b++) {
        const fg_backend_iface *f = be[b]->iface;
        r->layernorm(NULL, x, g, bb, ref, R, W, 1e-5f, &err);
        f->layernorm(be[b], x, g, bb, y, R, W, 1e-5f, &err);
        ck_assert_msg(tu_nmse(y, ref, R * W) < 1e-12, "%s layernorm", f->name);
        r->rmsnorm(NULL, x, g, ref, R, W, 1e-6f, &err);
        f->rmsnorm(be[b], x, g, y, R, W, 1e-6f, &err);
        ck_assert_msg(tu_nmse(y, ref, R * W) < 1e-12, "%s rmsnorm", f->name);
        for (int k = 0; k < 6; k++) {
            memcpy(ref, x, sizeof x);
            memcpy(y, x, sizeof x);
            ck_assert_int_eq(r->rope(NULL, ref, R, H, D, pos, &ropes[k], &err), FG_OK);
            ck_assert_int_eq(f->rope(be[b], y, R, H, D, pos, &ropes[k], &err), FG_OK);
            ck_assert_msg(tu_nmse(y, ref, R * W) < 1e-12, "%s rope %d", f->name, k);
        }
        fg_rope odd = {.theta = 10000.0f, .rot_dim = D + 1};
        ck_assert_int_eq(f->rope(be[b], y, R, H, D, pos, &odd, &err), FG_ERR_INVALID_ARG);
        for (int a = FG_ACT_RELU; a <= FG_ACT_SWIGLU_OAI; a++)
            for (int gated = a == FG_ACT_SWIGLU_OAI; gated < 2; gated++) {
                fg_act_fn fn = {(fg_act)a, 1.702f, 1.5f};
                memcpy(ref, x, sizeof x);
                memcpy(y, x, sizeof x);
                ck_assert_int_eq(r->act(NULL, fn, ref, gated ? up : NULL, R * W, &err), FG_OK);
                ck_assert_int_eq(f->act(be[b], fn, y, gated ? up : NULL, R * W, &err), FG_OK);
                ck_assert_msg(tu_nmse(y, ref, R * W) < 1e-12, "%s act %d", f->name, a);
            }
        memcpy(ref, x, sizeof x);
        memcpy(y, x, sizeof x);
        r->add(NULL, ref, up, R * W, &err);
        f->add(be[b], y, up, R * W, &err);
        ck_assert(!memcmp(y, ref, sizeof y));
        memcpy(ref, x, sizeof x); /* the decoder's query scaling: the same bits everywhere */
        memcpy(y, x, sizeof x);
        ck_assert_int_eq(r->scale(NULL, ref, 0.2357f, R * W, &err), FG_OK);
        ck_assert_int_eq(f->scale(be[b], y, 0.2357f, R * W, &err), FG_OK);
        ck_assert_msg(!memcmp(y, ref, sizeof y), "%s scale", f->name);
    }
    ops_free_all(be, nb);
}
END_TEST

/* The heads op (multi-head latent attention's absorbed W_UK and W_UV, its strided copies) on
 * every backend against the reference, which is checked against the formula itself: a copy, W x
 * and W^T x over heads of strided rows, the values between the heads left as they were; a copy
 * of unequal widths refused. */
START_TEST(heads_every_backend)
{
    enum { N = 3, NH = 4, K = 6, M = 10, XHS = 9, XLD = NH * XHS + 2, YHS = 13, YLD = NH * YHS,
           WLD = 11, WHS = 12 * WLD };
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    float x[N * XLD], w[NH * WHS], want[N * YLD], got[N * YLD], y0[N * YLD];
    tu_randf(x, N * XLD, 31, 1.0f);
    tu_randf(w, NH * WHS, 32, 1.0f);
    tu_randf(y0, N * YLD, 33, 1.0f);
    for (int mode = 0; mode < 3; mode++) { /* copy, W x, W^T x */
        uint32_t k = mode ? K : M, m = M;
        fg_heads_op o = {x, XLD, XHS - (mode ? 0 : 0), mode ? w : NULL, WHS, WLD, mode == 2,
                         want, YLD, YHS, N, NH, k, m};
        if (!mode)
            o.x_hs = XHS, o.k = M, o.x_ld = XLD; /* (rows of M from XHS apart: overlapping reads) */
        memcpy(want, y0, sizeof want);
        ck_assert_int_eq(fg_ops_ref.heads(NULL, &o, &err), FG_OK);
        for (uint32_t t = 0; t < N; t++) /* the reference is the formula */
            for (uint32_t h = 0; h < NH; h++)
                for (uint32_t j = 0; j < YHS; j++) {
                    float v = y0[t * YLD + h * YHS + j];
                    if (j < m && !mode)
                        v = x[t * XLD + h * XHS + j];
                    else if (j < m) {
                        double acc = 0;
                        for (uint32_t i = 0; i < k; i++)
                            acc += (double)w[h * WHS + (mode == 2 ? i * WLD + j : j * WLD + i)] *
                                   x[t * XLD + h * XHS + i];
                        ck_assert_msg(fabs(want[t * YLD + h * YHS + j] - acc) < 1e-5,
                                      "ref heads mode %d", mode);
                        continue;
                    }
                    ck_assert(want[t * YLD + h * YHS + j] == v);
                }
        for (int b = 0; b < nb; b++) {
            memcpy(got, y0, sizeof got);
            o.y = got;
            ck_assert_msg(be[b]->iface->heads(be[b], &o, &err) == FG_OK, "%s: %s",
                          be[b]->iface->name, err.msg);
            be[b]->iface->sync(be[b], &err);
            ck_assert_msg(tu_nmse(got, want, N * YLD) < 1e-12, "%s heads mode %d",
                          be[b]->iface->name, mode);
            o.y = want;
        }
    }
    fg_heads_op bad = {x, XLD, XHS, NULL, 0, 0, 0, got, YLD, YHS, N, NH, K, M};
    for (int b = 0; b < nb; b++) {
        ck_assert_int_eq(be[b]->iface->heads(be[b], &bad, &err), FG_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, "heads") && !strchr(err.msg, '\n'), "%s", err.msg);
    }
    ops_free_all(be, nb);
}
END_TEST

/* Greedy sampling's argmax on every backend, from host memory and from device memory: the
 * same ids as fg_sample at temperature 0 on rows built to break a careless reduction (equal
 * maxima far apart, in different threads' strides and at the ends; NaN first, NaN elsewhere,
 * NaN only; +-inf; -0 against +0; one value; a row just over a CUDA block's width). */
START_TEST(argmax_matches_the_sampler_every_backend)
{
    enum { R = 14, N = 1031 };
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    static float x[R * N];
    tu_randf(x, R * N, 21, 3.0f);
    float *v = x, nan = NAN, inf = INFINITY;
    v[0 * N + 5] = v[0 * N + 700] = v[0 * N + 1030] = 9.0f;          /* ties: 5 wins */
    v[1 * N + 1030] = 9.0f;                                           /* the last */
    v[2 * N + 0] = 9.0f, v[2 * N + 256] = 9.0f;                       /* the first */
    v[3 * N + 0] = nan, v[3 * N + 9] = 50.0f;                         /* NaN first: 0 */
    v[4 * N + 3] = nan, v[4 * N + 4] = 7.0f, v[4 * N + 600] = nan;    /* NaNs skipped: 4 */
    for (int i = 0; i < N; i++)
        v[5 * N + i] = nan, v[6 * N + i] = -inf, v[7 * N + i] = i % 2 ? -0.0f : 0.0f;
    v[8 * N + 17] = inf, v[8 * N + 900] = inf;                        /* +inf tie: 17 */
    for (int i = 1; i < N; i++)
        v[9 * N + i] = nan;                                           /* one real value */
    v[9 * N + 0] = -1e30f;
    v[10 * N + 1] = nan, v[10 * N + 2] = inf;
    for (int i = 0; i < N; i++)
        v[11 * N + i] = 1.0f;                                         /* all equal: 0 */
    v[12 * N + 300] = 5.0f, v[12 * N + 44] = 5.0f;                   /* stride order: 44 */
    fg_sample_params greedy = {0, 0, 1, 0};
    int32_t want[R + 1], got[R + 1];
    for (int r = 0; r < R; r++)
        want[r] = fg_sample(x + (size_t)r * N, N, &greedy, NULL, NULL);
    const int32_t fixed[R] = {5, 1030, 0, 0, 4, 0, 0, 0, 17, 0, 2, 0, 44, want[13]};
    ck_assert(!memcmp(want, fixed, sizeof fixed)); /* the rows are what they claim to be */
    ck_assert_int_eq(fg_ops_ref.argmax(NULL, x, R, N, got, &err), FG_OK);
    ck_assert(!memcmp(got, want, R * 4));
    for (int b = 0; b < nb; b++) {
        const fg_backend_iface *f = be[b]->iface;
        fg_device *d = be[b]->dev;
        memset(got, 0xff, sizeof got);
        ck_assert_int_eq(f->argmax(be[b], x, R, N, got, &err), FG_OK);
        for (int r = 0; r < R; r++)
            ck_assert_msg(got[r] == want[r], "%s row %d: %d, want %d", f->name, r, got[r],
                          want[r]);
        ck_assert_int_eq(f->argmax(be[b], x + 9 * N, 1, 1, got, &err), FG_OK); /* n = 1 */
        ck_assert_int_eq(got[0], 0);
        ck_assert_int_eq(f->argmax(be[b], x, 1, 0, got, &err), FG_ERR_INVALID_ARG);
        void *dx, *di;
        if (!strcmp(d->iface->name, "host"))
            continue;
        /* logits on the device, ids to the host (the engine's greedy step) and to the device */
        ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, sizeof x, &dx, &err), FG_OK);
        ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, sizeof got, &di, &err), FG_OK);
        ck_assert_int_eq(d->iface->copy(d, dx, FG_BUFT_DEVICE, x, FG_BUFT_HOST, sizeof x, NULL,
                                        &err), FG_OK);
        memset(got, 0xff, sizeof got);
        ck_assert_int_eq(f->argmax(be[b], dx, R, N, got, &err), FG_OK);
        ck_assert_msg(!memcmp(got, want, R * 4), "%s, device logits", f->name);
        ck_assert_int_eq(f->argmax(be[b], dx, R, N, di, &err), FG_OK);
        memset(got, 0xff, sizeof got);
        ck_assert_int_eq(d->iface->copy(d, got, FG_BUFT_HOST, di, FG_BUFT_DEVICE, R * 4, NULL,
                                        &err), FG_OK);
        ck_assert_msg(!memcmp(got, want, R * 4), "%s, device ids", f->name);
        d->iface->free(d, FG_BUFT_DEVICE, dx);
        d->iface->free(d, FG_BUFT_DEVICE, di);
    }
    ops_free_all(be, nb);
}
END_TEST

/* ---- scatter (a mixture of experts' rows back into their tokens' rows) ---- */

/* y[idx[i], :] = s[i] * x[i, :] (or +=) by its definition, written apart from the reference's
 * code: the product correctly rounded to f32 (two floats' product is exact in double), then
 * added in f32. */
static void scatter_want(float *y, const float *x, const int32_t *idx, const float *s, uint32_t n,
                         uint32_t width, int accumulate)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t c = 0; c < width; c++) {
            float p = (float)((double)s[i] * x[(size_t)i * width + c]);
            float *yc = &y[(size_t)idx[i] * width + c];
            *yc = accumulate ? *yc + p : p;
        }
}

/* The first of n floats whose bits differ (any NaN equals any NaN: a GPU's arithmetic gives
 * the canonical one), or -1. */
static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i])))
            return (long)i;
    return -1;
}

enum { SC_Y = 23, SC_W = 133, SC_N = 9 }; /* SC_W: a CUDA block's 128 threads and a few more */

typedef struct scatter_io {
    const float *y0, *x, *s, *want;
    const int32_t *idx;
    int accumulate;
} scatter_io;

/* One call with y, x, idx, s in device memory where bits 0..3 of `where` say so: rc, and y
 * (downloaded) in got. */
static int scatter_run(fg_backend *be, unsigned where, const scatter_io *io, float *got,
                       fg_err *err)
{
    fg_device *d = be->dev;
    size_t yb = SC_Y * SC_W * 4;
    float *y = got;
    if (where & 1)
        y = ops_place(d, 1, io->y0, yb);
    else
        memcpy(got, io->y0, yb);
    const float *x = ops_place(d, where & 2, io->x, SC_N * SC_W * 4);
    const int32_t *idx = ops_place(d, where & 4, io->idx, SC_N * 4);
    const float *s = ops_place(d, where & 8, io->s, SC_N * 4);
    int rc = be->iface->scatter(be, y, SC_Y, x, idx, s, SC_N, SC_W, io->accumulate, err);
    fg_err e2;
    if (where & 1)
        ck_assert_int_eq(d->iface->copy(d, got, FG_BUFT_HOST, y, FG_BUFT_DEVICE, yb, NULL, &e2),
                         FG_OK);
    ops_unplace(d, where & 1, y);
    ops_unplace(d, where & 2, (void *)x);
    ops_unplace(d, where & 4, (void *)idx);
    ops_unplace(d, where & 8, (void *)s);
    return rc;
}

/* A bad index (negative, then y's row count) in entry 4: refused with one line naming scatter.
 * Host indices are checked before anything is written; indices in device memory (checked by
 * the CUDA kernel) may let the good rows through, never a row the call does not name. */
static void scatter_refusals(fg_backend *be, unsigned where, const scatter_io *io)
{
    static const int32_t bad[2] = {-1, SC_Y};
    float got[SC_Y * SC_W];
    for (int k = 0; k < 2; k++) {
        int32_t idx[SC_N];
        memcpy(idx, io->idx, sizeof idx);
        idx[4] = bad[k];
        scatter_io b = *io;
        b.idx = idx;
        fg_err err;
        err.msg[0] = 0;
        ck_assert_int_eq(scatter_run(be, where, &b, got, &err), FG_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, "scatter") && !strchr(err.msg, '\n'), "%s: %s",
                      be->iface->name, err.msg);
        for (uint32_t r = 0; r < SC_Y; r++) {
            int named = 0;
            for (int i = 0; i < SC_N; i++)
                named |= idx[i] == (int32_t)r && (where & 4);
            if (!named)
                ck_assert_msg(first_diff(got + r * SC_W, io->y0 + r * SC_W, SC_W) < 0,
                              "%s, where %u, index %d: row %u written", be->iface->name, where,
                              bad[k], r);
        }
    }
}

/* Every backend against the definition, bit for bit, with each operand in host or device
 * memory (16 placements on a device backend), accumulate 0 and 1; the rows idx does not name
 * keep their values (a NaN among them), a named row's NaN is replaced (0) or kept (1); n = 0
 * does nothing; bad indices are refused. */
START_TEST(scatter_every_backend_host_and_device_operands)
{
    static const int32_t idx[SC_N] = {3, 22, 0, 7, 15, 4, 11, 21, 9};
    static const float s[SC_N] = {0.37f, -1.25f, 1.0f, 0.0f, 3.1f, -0.001f, 0.7071f, 1e-3f, 2.0f};
    static float y0[SC_Y * SC_W], x[SC_N * SC_W], want[SC_Y * SC_W], got[SC_Y * SC_W];
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    tu_randf(y0, SC_Y * SC_W, 31, 2.0f);
    tu_randf(x, SC_N * SC_W, 32, 3.0f);
    y0[3 * SC_W + 5] = NAN; /* named: replaced, or kept by the add */
    y0[5 * SC_W + 1] = NAN; /* not named */
    /* the values tell a fused multiply-add from the rounded product and the add */
    int fused_differs = 0;
    for (int i = 0; i < SC_N; i++)
        for (int c = 0; c < SC_W; c++) {
            float yv = y0[idx[i] * SC_W + c], xv = x[i * SC_W + c];
            float p = (float)((double)s[i] * xv), sum = yv + p, fused = fmaf(s[i], xv, yv);
            fused_differs += !isnan(yv) && memcmp(&sum, &fused, 4) != 0;
        }
    ck_assert_int_gt(fused_differs, 10);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(want, y0, sizeof want);
        scatter_want(want, x, idx, s, SC_N, SC_W, acc);
        ck_assert(isnan(want[3 * SC_W + 5]) == acc && isnan(want[5 * SC_W + 1]));
        scatter_io io = {y0, x, s, want, idx, acc};
        memcpy(got, y0, sizeof got);
        ck_assert_int_eq(fg_ops_ref.scatter(NULL, got, SC_Y, x, idx, s, SC_N, SC_W, acc, &err),
                         FG_OK);
        ck_assert_int_lt(first_diff(got, want, SC_Y * SC_W), 0);
        for (int b = 0; b < nb; b++) {
            const char *name = be[b]->iface->name;
            unsigned places = strcmp(be[b]->dev->iface->name, "host") ? 16 : 1;
            for (unsigned where = 0; where < places; where++) {
                memset(got, 0xff, sizeof got);
                ck_assert_msg(scatter_run(be[b], where, &io, got, &err) == FG_OK, "%s: %s", name,
                              err.msg);
                long at = first_diff(got, want, SC_Y * SC_W);
                ck_assert_msg(at < 0, "%s, accumulate %d, operands on the device %#x: y[%ld] = "
                              "%a, want %a", name, acc, where, at, (double)got[at < 0 ? 0 : at],
                              (double)want[at < 0 ? 0 : at]);
                scatter_refusals(be[b], where, &io);
            }
            memcpy(got, y0, sizeof got); /* n = 0: nothing read, nothing written */
            ck_assert_int_eq(be[b]->iface->scatter(be[b], got, SC_Y, NULL, NULL, NULL, 0, SC_W,
                                                   acc, &err), FG_OK);
            ck_assert_int_lt(first_diff(got, y0, SC_Y * SC_W), 0);
        }
    }
    ops_free_all(be, nb);
}
END_TEST

/* The mixture-of-experts gather: the rows of the tokens routed to one expert taken from the
 * activations (an fg_weight whose f32 is them, in host or device memory) by host-memory ids,
 * into host or device memory, on every backend; an id past the tokens is refused. */
START_TEST(gather_activation_rows_every_backend)
{
    enum { T = 11, W = 133, M = 6 };
    const int32_t ids[M] = {5, 0, 10, 3, 7, 5};
    static float act[T * W], want[M * W], out[M * W];
    tu_randf(act, T * W, 41, 1.0f);
    for (int m = 0; m < M; m++)
        memcpy(want + m * W, act + ids[m] * W, W * 4);
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    for (int b = 0; b < nb; b++) {
        fg_device *d = be[b]->dev;
        const char *name = be[b]->iface->name;
        int dev = strcmp(d->iface->name, "host") != 0;
        for (int on_dev = 0; on_dev <= dev; on_dev++) {
            fg_weight w = {ops_place(d, on_dev, act, sizeof act), 0, NULL, NULL, NULL, NULL, NULL};
            memset(out, 0xff, sizeof out);
            ck_assert_msg(be[b]->iface->gather(be[b], &w, T, ids, M, out, W, &err) == FG_OK,
                          "%s: %s", name, err.msg);
            ck_assert_msg(!memcmp(out, want, sizeof out), "%s, activations on the device %d",
                          name, on_dev);
            if (on_dev) { /* into device memory too (the expert's input rows) */
                float *dout = ops_place(d, 1, out, sizeof out);
                ck_assert_int_eq(be[b]->iface->gather(be[b], &w, T, ids, M, dout, W, &err),
                                 FG_OK);
                memset(out, 0xff, sizeof out);
                ck_assert_int_eq(d->iface->copy(d, out, FG_BUFT_HOST, dout, FG_BUFT_DEVICE,
                                                sizeof out, NULL, &err), FG_OK);
                ck_assert_msg(!memcmp(out, want, sizeof out), "%s, device to device", name);
                ops_unplace(d, 1, dout);
            }
            int32_t bad[2] = {2, T};
            ck_assert_int_eq(be[b]->iface->gather(be[b], &w, T, bad, 2, out, W, &err),
                             FG_ERR_INVALID_ARG);
            ops_unplace(d, on_dev, (void *)w.f32);
        }
    }
    ops_free_all(be, nb);
}
END_TEST

/* RoPE against a direct evaluation of transformers' formula (rotate-half, f32 inv_freq). */
/* ReLU against its formula x > 0 ? x : 0 (times up when gated) on values that tell vector and
 * scalar code apart: NaN and -0 give +0, infinities, denormals; lengths not a multiple of 4. */
START_TEST(relu_matches_its_formula_on_special_values)
{
    enum { N = 23 };
    fg_backend *be[4];
    int nb = ops_backends(be);
    float x[N], up[N], y[N];
    const float sp[] = {NAN, -NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 2.5f, -3.0f};
    for (int i = 0; i < N; i++) {
        x[i] = sp[i % 10] * (i < 10 ? 1.0f : 0.5f);
        up[i] = (float)(i % 7) - 2.5f;
    }
    fg_err err;
    for (int b = 0; b < nb; b++)
        for (uint32_t n = 1; n <= N; n += 3)
            for (int gated = 0; gated < 2; gated++) {
                memcpy(y, x, sizeof x);
                ck_assert_int_eq(be[b]->iface->act(be[b], (fg_act_fn){FG_ACT_RELU, 0, 0}, y,
                                                   gated ? up : NULL, n, &err), FG_OK);
                for (uint32_t i = 0; i < n; i++) {
                    float want = x[i] > 0.0f ? x[i] : 0.0f;
                    want = gated ? want * up[i] : want;
                    ck_assert_msg(!memcmp(&y[i], &want, 4), "%s relu n %u gated %d: x[%u] = %g "
                                  "gave %g, want %g", be[b]->iface->name, n, gated, i,
                                  (double)x[i], (double)y[i], (double)want);
                }
                ck_assert(!memcmp(y + n, x + n, (N - n) * 4)); /* nothing past n */
            }
    ops_free_all(be, nb);
}
END_TEST

START_TEST(rope_matches_the_formula)
{
    enum { D = 8 };
    float x[D], y[D];
    tu_randf(x, D, 3, 1.0f);
    memcpy(y, x, sizeof x);
    int32_t p = 5;
    fg_rope r = {.theta = 10000.0f, .rot_dim = D};
    fg_err err;
    ck_assert_int_eq(fg_ops_ref.rope(NULL, y, 1, 1, D, &p, &r, &err), FG_OK);
    for (int i = 0; i < D / 2; i++) {
        double f = 1.0 / pow(10000.0, 2.0 * i / D), c = cos(p * f), s = sin(p * f);
        ck_assert(fabs(y[i] - (x[i] * c - x[i + D / 2] * s)) < 1e-5);
        ck_assert(fabs(y[i + D / 2] - (x[i + D / 2] * c + x[i] * s)) < 1e-5);
    }
}
END_TEST

/* YaRN's frequencies against transformers 5.24's _compute_yarn_parameters (head_dim 32): Qwen's
 * model-card setting (factor 4, 128 original positions, theta 1e6), and the optional keys
 * (beta_fast 16, beta_slow 2, truncate false, theta 1e4, factor 8 over 32); their
 * attention_factor 1.13863 and 0.949561 are model/'s (test_model). */
START_TEST(yarn_inv_freq_matches_transformers)
{
    static const float want[2][16] = {
        {1, 0.342628419f, 0.111142464f, 0.0328078717f, 0.00790569466f, 0.00333380373f,
         0.00140585331f, 0.000592843455f, 0.000250000012f, 0.000105424122f, 4.44569851e-05f,
         1.87473561e-05f, 7.90569356e-06f, 3.33380353e-06f, 1.40585337e-06f, 5.92843435e-07f},
        {1, 0.259310991f, 0.0395284705f, 0.0222284924f, 0.0125000002f, 0.0070292661f,
         0.00395284733f, 0.00222284929f, 0.00124999997f, 0.000702926656f, 0.000395284733f,
         0.000222284929f, 0.000125000006f, 7.02926627e-05f, 3.95284733e-05f, 2.22284925e-05f}};
    const fg_rope r[2] = {{.theta = 1e6f, .scaling = FG_ROPE_YARN, .factor = 4.0f,
                           .orig_max_pos = 128, .rot_dim = 32, .beta_fast = 32.0f,
                           .beta_slow = 1.0f, .truncate = 1},
                          {.theta = 1e4f, .scaling = FG_ROPE_YARN, .factor = 8.0f,
                           .orig_max_pos = 32, .rot_dim = 32, .beta_fast = 16.0f,
                           .beta_slow = 2.0f, .truncate = 0}};
    ck_assert_str_eq(fg_rope_scaling_name(FG_ROPE_YARN), "yarn");
    ck_assert_str_eq(fg_rope_scaling_name(FG_ROPE_DYNAMIC), "dynamic");
    ck_assert_str_eq(fg_rope_scaling_name((fg_rope_scaling)99), "?");
    for (int k = 0; k < 2; k++) {
        float f[16];
        fg_rope_inv_freq(&r[k], f);
        for (int i = 0; i < 16; i++)
            ck_assert_msg(fabsf(f[i] - want[k][i]) <= 2e-6f * want[k][i], "case %d dim %d: %.9g, "
                          "transformers %.9g", k, i, (double)f[i], (double)want[k][i]);
    }
}
END_TEST

/* LongRoPE's frequencies are the default ones divided by the chosen list's factors (transformers'
 * _compute_longrope_parameters), and rot_scale multiplies the rotated dims alone: transformers
 * scales cos and sin, so with partial rotary the dims past rot_dim keep their values. */
START_TEST(longrope_and_rot_scale)
{
    enum { H = 2, D = 16, RD = 12 };
    fg_rope r = {.theta = 10000.0f, .scaling = FG_ROPE_LONGROPE, .rot_dim = RD,
                 .short_factor = {1, 1.25f, 2, 3, 5, 8}, .long_factor = {2, 4, 8, 16, 32, 64}};
    float f[RD / 2];
    ck_assert_str_eq(fg_rope_scaling_name(FG_ROPE_LONGROPE), "longrope");
    for (int use_long = 0; use_long < 2; use_long++) {
        r.use_long = use_long;
        fg_rope_inv_freq(&r, f);
        for (int i = 0; i < RD / 2; i++) {
            float ext = use_long ? r.long_factor[i] : r.short_factor[i];
            float want = 1.0f / (ext * powf(10000.0f, (float)(2 * i) / (float)RD));
            ck_assert_msg(f[i] == want, "%d %d: %g, want %g", use_long, i, (double)f[i],
                          (double)want);
        }
    }
    float x[H * D], plain[H * D], scaled[H * D];
    tu_randf(x, H * D, 21, 1.0f);
    int32_t pos = 37;
    fg_err err;
    memcpy(plain, x, sizeof x);
    memcpy(scaled, x, sizeof x);
    ck_assert_int_eq(fg_ops_ref.rope(NULL, plain, 1, H, D, &pos, &r, &err), FG_OK);
    /* rot_scale 1.25 times Llama 4's position factor 1 + beta ln(1 + floor(37 / 8)), 1.2 for
     * beta 0.2 / ln 5: 1.5 in all */
    r.rot_scale = 1.25f;
    r.orig_max_pos = 8;
    r.pos_beta = 0.2f / logf(5.0f);
    ck_assert_int_eq(fg_ops_ref.rope(NULL, scaled, 1, H, D, &pos, &r, &err), FG_OK);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) {
            int i = h * D + d;
            float want = d < RD ? plain[i] * 1.5f : x[i];
            ck_assert_msg(fabsf(scaled[i] - want) <= 1e-5f * fabsf(want) + 1e-7f,
                          "head %d dim %d: %g, want %g", h, d, (double)scaled[i], (double)want);
            if (d >= RD)
                ck_assert(plain[i] == x[i]);
        }
}
END_TEST

/* ---- gpt-oss's clamped SwiGLU ---- */

/* transformers' GptOssExperts._apply_gate in double: g = min(gate, limit), u = clamp(up, -limit,
 * limit), g sigmoid(alpha g) (u + 1). */
static double swiglu_oai_want(double x, double up, double alpha, double limit)
{
    double g = x > limit ? limit : x, u = up < -limit ? -limit : up > limit ? limit : up;
    return g / (1.0 + exp(-alpha * g)) * (u + 1.0);
}

/* The clamped SwiGLU against its formula on every backend and the reference, for several
 * (alpha, limit), gpt-oss's 1.702 and 7 among them: gates and ups drawn past +-limit on both
 * sides (the clamps must bite: counted), infinite ones, values at the limits, a gate whose
 * sigmoid underflows; from device memory as from host memory. Without up the op is refused,
 * with one line, before it touches x. */
START_TEST(swiglu_oai_matches_its_formula_every_backend)
{
    enum { N = 301 };
    static const float al[][2] = {{1.702f, 7.0f}, {1.0f, 3.0f}, {0.5f, 1.25f}, {2.5f, 10.0f}};
    fg_backend *be[4];
    int nb = ops_backends(be);
    float x[N], up[N], y[N], ref[N], hy[N], dy[N];
    tu_randf(x, N, 31, 14.0f);
    tu_randf(up, N, 32, 14.0f);
    x[0] = INFINITY, up[1] = INFINITY, up[2] = -INFINITY, x[3] = -60.0f;
    x[4] = 7.0f, up[4] = -7.0f, x[5] = -7.0f, up[5] = 7.0f;
    fg_err err;
    for (size_t k = 0; k < sizeof al / sizeof al[0]; k++) {
        fg_act_fn fn = {FG_ACT_SWIGLU_OAI, al[k][0], al[k][1]};
        int over[3] = {0, 0, 0}; /* gates above limit, ups above it, ups below -limit */
        for (int i = 0; i < N; i++)
            over[0] += x[i] > fn.limit, over[1] += up[i] > fn.limit, over[2] += up[i] < -fn.limit;
        ck_assert(over[0] > 10 && over[1] > 10 && over[2] > 10);
        for (int b = -1; b < nb; b++) {
            const fg_backend_iface *f = b < 0 ? &fg_ops_ref : be[b]->iface;
            fg_backend *bx = b < 0 ? NULL : be[b];
            memcpy(y, x, sizeof x);
            ck_assert_msg(f->act(bx, fn, y, up, N, &err) == FG_OK, "%s", err.msg);
            for (int i = 0; i < N; i++) {
                double w = swiglu_oai_want(x[i], up[i], fn.alpha, fn.limit);
                ck_assert_msg(fabs(y[i] - w) <= 1e-5 * fabs(w) + 1e-6, "%s alpha %g limit %g: "
                              "gate %g up %g gave %g, want %g", f->name, (double)fn.alpha,
                              (double)fn.limit, (double)x[i], (double)up[i], (double)y[i], w);
            }
            if (b < 0)
                memcpy(ref, y, sizeof y);
            else
                ck_assert_msg(tu_nmse(y, ref, N) < 1e-12, "%s: %g", f->name, tu_nmse(y, ref, N));
            memcpy(hy, y, sizeof y);
            memcpy(y, x, sizeof x);
            ck_assert_int_eq(f->act(bx, fn, y, NULL, N, &err), FG_ERR_INVALID_ARG);
            ck_assert_msg(err.msg[0] && !strchr(err.msg, '\n'), "%s: '%s'", f->name, err.msg);
            ck_assert_msg(!memcmp(y, x, sizeof x), "%s: a refused act wrote x", f->name);
            fg_device *d = b < 0 ? NULL : be[b]->dev;
            if (!d || !strcmp(d->iface->name, "host"))
                continue;
            float *px = ops_place(d, 1, x, sizeof x), *pu = ops_place(d, 1, up, sizeof up);
            ck_assert_int_eq(f->act(bx, fn, px, pu, N, &err), FG_OK);
            ck_assert_int_eq(d->iface->copy(d, dy, FG_BUFT_HOST, px, FG_BUFT_DEVICE, sizeof dy,
                                            NULL, &err), FG_OK);
            ck_assert_msg(!memcmp(dy, hy, sizeof dy), "%s: from device memory", f->name);
            ops_unplace(d, 1, px), ops_unplace(d, 1, pu);
        }
    }
    ops_free_all(be, nb);
}
END_TEST

/* fg_par_run_dyn: every chunk runs exactly once per run, whichever thread claims it, with the
 * job struct reused at once by the next run (as the CPU backend does) and static fg_par_run
 * calls in between; a late helper must never run a chunk of a run it did not see start. */
typedef struct par_job {
    uint32_t hits[64];
} par_job;

static void par_chunk(void *arg, uint32_t chunk, uint32_t n)
{
    par_job *j = arg;
    ck_assert_uint_lt(chunk, n);
    __atomic_add_fetch(&j->hits[chunk], 1, __ATOMIC_RELAXED);
    for (volatile int i = 0; i < (int)(chunk % 7) * 50; i++) /* uneven chunks */
        ;
}

static void par_static(void *arg, uint32_t part, uint32_t n)
{
    par_job *j = arg;
    __atomic_add_fetch(&j->hits[part], 1, __ATOMIC_RELAXED);
    (void)n;
}

START_TEST(par_dyn_runs_each_chunk_once)
{
    static const uint32_t threads[] = {1, 2, 4};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        fg_par *p;
        fg_err err;
        ck_assert_int_eq(fg_par_create(threads[t], &p, &err), FG_OK);
        par_job jobs[2]; /* alternated: a stale write into the other one shows at its reuse */
        uint32_t last_n[2] = {0, 0};
        memset(jobs, 0, sizeof jobs);
        for (uint32_t run = 0; run < 3000; run++) {
            par_job *j = &jobs[run % 2];
            for (uint32_t k = 0; k < 64; k++) /* untouched since its last run returned */
                ck_assert_msg(j->hits[k] == (k < last_n[run % 2]), "threads %u run %u: chunk %u "
                              "written after its run returned", threads[t], run, k);
            memset(j, 0, sizeof *j);
            uint32_t n = 1 + (run * 7919u) % 64;
            if (run % 10 == 9) {
                fg_par_run(p, par_static, j);
                for (uint32_t k = 0; k < fg_par_threads(p); k++)
                    ck_assert_uint_eq(j->hits[k], 1);
                last_n[run % 2] = fg_par_threads(p);
                continue;
            }
            fg_par_run_dyn(p, par_chunk, j, n);
            for (uint32_t k = 0; k < 64; k++)
                ck_assert_msg(j->hits[k] == (k < n), "threads %u run %u: chunk %u of %u ran %u "
                              "times", threads[t], run, k, n, j->hits[k]);
            last_n[run % 2] = n;
        }
        fg_par_free(p);
    }
}
END_TEST

START_TEST(memory_ops)
{
    fg_backend *be[4];
    int nb = ops_backends(be);
    fg_err err;
    for (int b = 0; b < nb; b++) {
        fg_device *d = be[b]->dev;
        void *p, *q;
        ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_HOST, 1000, &p, &err), FG_OK);
        ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_HOST, 1000, &q, &err), FG_OK);
        memset(p, 7, 1000);
        fg_event *ev = NULL;
        ck_assert_int_eq(d->iface->copy(d, q, FG_BUFT_HOST, p, FG_BUFT_HOST, 1000, &ev, &err),
                         FG_OK);
        ck_assert_int_eq(d->iface->event_wait(d, ev, &err), FG_OK);
        ck_assert(!memcmp(p, q, 1000));
        ck_assert_int_eq(d->iface->sync(d, &err), FG_OK);
        ck_assert_int_eq(be[b]->iface->sync(be[b], &err), FG_OK);
        void *x;
        if (strcmp(d->iface->name, "host")) { /* device memory there and back, an event */
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 1000, &x, &err), FG_OK);
            ck_assert_int_eq(d->iface->copy(d, x, FG_BUFT_DEVICE, p, FG_BUFT_HOST, 1000, &ev,
                                            &err), FG_OK);
            ck_assert_int_eq(d->iface->event_wait(d, ev, &err), FG_OK);
            memset(q, 0, 1000);
            ck_assert_int_eq(d->iface->copy(d, q, FG_BUFT_HOST, x, FG_BUFT_DEVICE, 1000, NULL,
                                            &err), FG_OK);
            ck_assert(!memcmp(p, q, 1000));
            d->iface->free(d, FG_BUFT_DEVICE, x);
        } else {
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 1000, &x, &err),
                             FG_ERR_UNSUPPORTED); /* the CPU backends' host device */
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_PINNED, 1000, &x, &err),
                             FG_ERR_UNSUPPORTED);
        }
        d->iface->free(d, FG_BUFT_HOST, p);
        d->iface->free(d, FG_BUFT_HOST, q);
    }
    ops_free_all(be, nb);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, linear_every_codec_every_backend);
    tcase_add_test(tc, gather_every_codec_every_backend);
    tcase_add_test(tc, norms_rope_act_add_scale_every_backend);
    tcase_add_test(tc, heads_every_backend);
    tcase_add_test(tc, cpu_small_ops_split_across_helpers);
    tcase_add_test(tc, argmax_matches_the_sampler_every_backend);
    tcase_add_test(tc, scatter_every_backend_host_and_device_operands);
    tcase_add_test(tc, gather_activation_rows_every_backend);
    tcase_add_test(tc, relu_matches_its_formula_on_special_values);
    tcase_add_test(tc, rope_matches_the_formula);
    tcase_add_test(tc, yarn_inv_freq_matches_transformers);
    tcase_add_test(tc, longrope_and_rot_scale);
    tcase_add_test(tc, swiglu_oai_matches_its_formula_every_backend);
    tcase_add_test(tc, memory_ops);
    tcase_add_test(tc, par_dyn_runs_each_chunk_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
