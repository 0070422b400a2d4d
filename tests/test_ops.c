/* test_ops.c - the cross-backend op test (ggml's test-backend-ops, for fg): every op of every
 * backend present runs on random inputs of odd shapes and is compared with the scalar
 * reference (fg_ops_ref) by normalized mean squared error. A new backend adds itself to
 * backends() and inherits every case: the simulated device always, CUDA where a GPU is visible
 * (test_backend_cuda covers its F16 path and skips without a GPU).
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
#include "par.h"
#include "quant.h"
#include "sample.h"
#include "testutil.h"

/* The backends under test (the reference itself included: it must agree with itself). */
static int backends(fg_backend **out)
{
    fg_err err;
    int n = 0;
    ck_assert_int_eq(fg_backend_cpu_create(3, &out[n++], &err), FG_OK);
    ck_assert_int_eq(fg_backend_ref_create(&out[n++], &err), FG_OK);
    /* the simulated device: every operand crosses its link (host memory staged per op) */
    fg_backend_sim_opts so = {2, FG_COMPUTE_F32, 64u << 20, 0, 0, 0};
    ck_assert_int_eq(fg_backend_sim_create(&so, &out[n++], &err), FG_OK);
    /* the CUDA backend where a GPU is visible (F32 compute: the reference's bounds hold); under
     * the emulated runtime (test_ops_emu: FG_TEST_EXPECT_CUDA) it must be there */
    fg_backend_cuda_opts co = {0, 2, FG_COMPUTE_F32, 0};
    if (fg_backend_cuda_create(&co, &out[n], &err) == FG_OK)
        n++;
    else if (getenv("FG_TEST_EXPECT_CUDA"))
        ck_abort_msg("the CUDA backend did not open under the emulated runtime: %s", err.msg);
    return n;
}

static void free_all(fg_backend **b, int n)
{
    for (int i = 0; i < n; i++)
        fg_backend_free(b[i]);
}

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
    int nb = backends(be);
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
    free_all(be, nb);
}
END_TEST

START_TEST(gather_every_codec_every_backend)
{
    enum { N = 150, K = 64, M = 9 };
    int32_t ids[M] = {0, 149, 64, 63, 7, 7, 100, 128, 65};
    fg_backend *be[4];
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
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
    free_all(be, nb);
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

/* n bytes of src in d's device memory (or src itself when `dev` is 0). */
static void *place(fg_device *d, int dev, const void *src, size_t n)
{
    fg_err err;
    if (!dev)
        return (void *)src;
    void *p;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, n, &p, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, p, FG_BUFT_DEVICE, src, FG_BUFT_HOST, n, NULL, &err),
                     FG_OK);
    return p;
}

static void unplace(fg_device *d, int dev, void *p)
{
    if (dev)
        d->iface->free(d, FG_BUFT_DEVICE, p);
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
        y = place(d, 1, io->y0, yb);
    else
        memcpy(got, io->y0, yb);
    const float *x = place(d, where & 2, io->x, SC_N * SC_W * 4);
    const int32_t *idx = place(d, where & 4, io->idx, SC_N * 4);
    const float *s = place(d, where & 8, io->s, SC_N * 4);
    int rc = be->iface->scatter(be, y, SC_Y, x, idx, s, SC_N, SC_W, io->accumulate, err);
    fg_err e2;
    if (where & 1)
        ck_assert_int_eq(d->iface->copy(d, got, FG_BUFT_HOST, y, FG_BUFT_DEVICE, yb, NULL, &e2),
                         FG_OK);
    unplace(d, where & 1, y);
    unplace(d, where & 2, (void *)x);
    unplace(d, where & 4, (void *)idx);
    unplace(d, where & 8, (void *)s);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
    fg_err err;
    for (int b = 0; b < nb; b++) {
        fg_device *d = be[b]->dev;
        const char *name = be[b]->iface->name;
        int dev = strcmp(d->iface->name, "host") != 0;
        for (int on_dev = 0; on_dev <= dev; on_dev++) {
            fg_weight w = {place(d, on_dev, act, sizeof act), 0, NULL, NULL, NULL, NULL, NULL};
            memset(out, 0xff, sizeof out);
            ck_assert_msg(be[b]->iface->gather(be[b], &w, T, ids, M, out, W, &err) == FG_OK,
                          "%s: %s", name, err.msg);
            ck_assert_msg(!memcmp(out, want, sizeof out), "%s, activations on the device %d",
                          name, on_dev);
            if (on_dev) { /* into device memory too (the expert's input rows) */
                float *dout = place(d, 1, out, sizeof out);
                ck_assert_int_eq(be[b]->iface->gather(be[b], &w, T, ids, M, dout, W, &err),
                                 FG_OK);
                memset(out, 0xff, sizeof out);
                ck_assert_int_eq(d->iface->copy(d, out, FG_BUFT_HOST, dout, FG_BUFT_DEVICE,
                                                sizeof out, NULL, &err), FG_OK);
                ck_assert_msg(!memcmp(out, want, sizeof out), "%s, device to device", name);
                unplace(d, 1, dout);
            }
            int32_t bad[2] = {2, T};
            ck_assert_int_eq(be[b]->iface->gather(be[b], &w, T, bad, 2, out, W, &err),
                             FG_ERR_INVALID_ARG);
            unplace(d, on_dev, (void *)w.f32);
        }
    }
    free_all(be, nb);
}
END_TEST

/* RoPE against a direct evaluation of transformers' formula (rotate-half, f32 inv_freq). */
/* ReLU against its formula x > 0 ? x : 0 (times up when gated) on values that tell vector and
 * scalar code apart: NaN and -0 give +0, infinities, denormals; lengths not a multiple of 4. */
START_TEST(relu_matches_its_formula_on_special_values)
{
    enum { N = 23 };
    fg_backend *be[4];
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
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
            float *px = place(d, 1, x, sizeof x), *pu = place(d, 1, up, sizeof up);
            ck_assert_int_eq(f->act(bx, fn, px, pu, N, &err), FG_OK);
            ck_assert_int_eq(d->iface->copy(d, dy, FG_BUFT_HOST, px, FG_BUFT_DEVICE, sizeof dy,
                                            NULL, &err), FG_OK);
            ck_assert_msg(!memcmp(dy, hy, sizeof dy), "%s: from device memory", f->name);
            unplace(d, 1, px), unplace(d, 1, pu);
        }
    }
    free_all(be, nb);
}
END_TEST

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
    int nb = backends(be);
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
    free_all(be, nb);
}
END_TEST

/* Head dims beside the 16 above: the CUDA kernel sums V over the keys in blockDim / head_dim
 * groups of threads (96: two groups and idle threads; 256: one group; 320: more dims than
 * threads, each thread several) */
START_TEST(attention_head_dims_every_backend)
{
    fg_backend *be[4];
    int nb = backends(be);
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
    free_all(be, nb);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
    x.q = place(d, 1, a->q, qn * 4);
    x.out = place(d, 1, out, on * 4);
    ck_assert_msg(b->iface->attention(b, &x, &err) == FG_OK, "%s: %s", b->iface->name, err.msg);
    ck_assert_int_eq(d->iface->copy(d, out, FG_BUFT_HOST, x.out, FG_BUFT_DEVICE, on * 4, NULL,
                                    &err), FG_OK);
    unplace(d, 1, (void *)x.q);
    unplace(d, 1, x.out);
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
    int nb = backends(be), nd = 0;
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
    free_all(be, nb + nd);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
            x.sinks = place(d, where & 1, sinks, sizeof sinks);
            x.q = place(d, where & 2, q, sizeof q);
            x.valid = place(d, where & 2, valid, sizeof valid);
            x.out = o2;
            memset(o2, 0, sizeof o2);
            ck_assert_msg(be[b]->iface->attention(be[b], &x, &err) == FG_OK, "%s", err.msg);
            ck_assert_msg(!memcmp(o1, o2, sizeof o1), "%s (backend %d): operands %d differ",
                          be[b]->iface->name, b, where);
            unplace(d, where & 1, (void *)x.sinks);
            unplace(d, where & 2, (void *)x.q);
            unplace(d, where & 2, (void *)x.valid);
        }
    }
    free_all(be, nb);
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
    int nb = backends(be);
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
    free_all(be, nb);
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
    tcase_add_test(tc, attention_every_variant_every_backend);
    tcase_add_test(tc, attention_head_dims_every_backend);
    tcase_add_test(tc, attention_decode_split_every_codec);
    tcase_add_test(tc, attention_value_width_every_backend);
    tcase_add_test(tc, attention_sinks_match_the_formula);
    tcase_add_test(tc, attention_sinks_device_memory_and_beside_the_cache);
    tcase_add_test(tc, swiglu_oai_matches_its_formula_every_backend);
    tcase_add_test(tc, gqa_and_window_match_their_definitions);
    tcase_add_test(tc, memory_ops);
    tcase_add_test(tc, par_dyn_runs_each_chunk_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
