/* test_compute.c - CPU backend kernels against their scalar references (every ISA this CPU has),
 * the Linear layer against a naive loop, and position indices for left-padded sequences.
 * The full OPT forward pass is checked against transformers' logits in test_infer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include <stdio.h>
#include "testutil.h"

static void randf(float *x, size_t n, uint64_t seed, float scale)
{
    uint32_t *u = malloc(n * sizeof *u);
    tu_fill(u, n * sizeof *u, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = ((float)(u[i] >> 8) / (float)(1u << 24) - 0.5f) * 2.0f * scale;
    free(u);
}

START_TEST(dot_matches_reference)
{
    float a[257], b[257];
    randf(a, 257, 1, 1.0f);
    randf(b, 257, 2, 1.0f);
    for (uint32_t n = 0; n <= 257; n++) {
        float r = fg_cpu_dot_ref(a, b, n), y = fg_cpu_dot(a, b, n);
        ck_assert_msg(fabsf(y - r) <= 1e-5f * (1.0f + fabsf(r)), "n=%u %g vs %g", n, y, r);
    }
}
END_TEST

START_TEST(layernorm_matches_reference)
{
    enum { N = 1000 };
    float x[N], g[N], b[N], y[N], r[N];
    randf(x, N, 3, 4.0f);
    randf(g, N, 4, 1.0f);
    randf(b, N, 5, 1.0f);
    for (uint32_t n = 1; n <= N; n += 37) {
        fg_cpu_layernorm_ref(x, g, b, r, n, 1e-5f);
        fg_cpu_layernorm(x, g, b, y, n, 1e-5f);
        ck_assert_msg(tu_nmse(y, r, n) < 1e-12, "n=%u nmse %g", n, tu_nmse(y, r, n));
    }
    /* constant row: variance 0, output is the bias */
    for (int i = 0; i < 64; i++)
        x[i] = 3.0f;
    fg_cpu_layernorm(x, g, b, y, 64, 1e-5f);
    for (int i = 0; i < 64; i++)
        ck_assert(fabsf(y[i] - b[i]) < 1e-6f);
}
END_TEST

/* Every head size the SIMD paths treat differently: 24 (per-key dot and axpy), 64 (four keys a
 * pass, 64 output columns in registers), 80 (both, and an axpy tail), 128; 41 keys, so the
 * four-key blocks leave a remainder. */
START_TEST(attention_matches_reference_with_padding)
{
    static const int dims[] = {24, 64, 80, 128};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        enum { CTX = 41, HEADS = 4, NQ = 7 };
        const int D = dims[di], W = HEADS * D;
        float *k = malloc(CTX * W * 4), *v = malloc(CTX * W * 4), *q = malloc(NQ * W * 4);
        float *o1 = malloc(NQ * W * 4), *o2 = malloc(NQ * W * 4), scratch[2 * CTX];
        uint8_t valid[CTX];
        randf(k, CTX * W, 6, 1.0f);
        randf(v, CTX * W, 7, 1.0f);
        randf(q, NQ * W, 8, 1.0f);
        for (int t = 0; t < CTX; t++)
            valid[t] = t >= 5; /* left padding */
        fg_attn_args a = {q, k, v, W, valid, NQ, CTX - NQ, HEADS, (uint32_t)D, o1, scratch};
        fg_cpu_attention_ref(&a);
        a.out = o2;
        fg_cpu_attention(&a);
        ck_assert_msg(tu_nmse(o2, o1, NQ * W) < 1e-12, "d %d: nmse %g", D,
                      tu_nmse(o2, o1, NQ * W));
        /* against a direct softmax for query 0, head 1 */
        double s[CTX], mx = -1e30, sum = 0;
        int last = CTX - NQ;
        for (int t = 0; t <= last; t++) {
            s[t] = -1e30;
            if (!valid[t])
                continue;
            double d = 0;
            for (int j = 0; j < D; j++)
                d += (double)q[D + j] * k[t * W + D + j];
            s[t] = d;
            mx = d > mx ? d : mx;
        }
        for (int t = 0; t <= last; t++)
            sum += valid[t] ? exp(s[t] - mx) : 0;
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int t = 0; t <= last; t++)
                acc += valid[t] ? exp(s[t] - mx) / sum * v[t * W + D + j] : 0;
            ck_assert_msg(fabs(acc - o1[D + j]) < 1e-5, "d %d j=%d %g vs %g", D, j, acc,
                          o1[D + j]);
            ck_assert_msg(fabs(acc - o2[D + j]) < 1e-5, "d %d j=%d %g vs %g", D, j, acc,
                          o2[D + j]);
        }
        /* a query whose keys are all masked yields zeros */
        memset(valid, 0, sizeof valid);
        a.n_q = 1;
        a.q_pos0 = 3;
        fg_cpu_attention(&a);
        for (int j = 0; j < W; j++)
            ck_assert(o2[j] == 0.0f);
        free(k), free(v), free(q), free(o1), free(o2);
    }
}
END_TEST

/* be's Linear on random [m, k] x [n, k]^T + bias (seeds from seed) equals a double sum. */
static void check_linear(fg_backend *be, int m, int n, int k, uint64_t seed, double tol)
{
    float *a = malloc((size_t)m * k * 4), *w = malloc((size_t)n * k * 4);
    float *bias = malloc((size_t)n * 4), *c = malloc((size_t)m * n * 4);
    randf(a, (size_t)m * k, seed, 1.0f);
    randf(w, (size_t)n * k, seed + 1, 1.0f);
    randf(bias, (size_t)n, seed + 2, 1.0f);
    fg_weight wt = {w, 0, NULL, NULL, NULL, NULL, NULL};
    fg_err err;
    ck_assert_int_eq(be->iface->linear(be, a, &wt, bias, c, (uint32_t)m, (uint32_t)n,
                                       (uint32_t)k, &err), 0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double r = bias[j];
            for (int t = 0; t < k; t++)
                r += (double)a[i * k + t] * w[j * k + t];
            ck_assert_msg(fabs(r - c[i * n + j]) < tol, "(%d, %d): %g vs %g", i, j, r,
                          c[i * n + j]);
        }
    free(a), free(w), free(bias), free(c);
}

START_TEST(linear_matches_naive)
{
    fg_backend *be;
    fg_err err;
    ck_assert_int_eq(fg_backend_cpu_create(1, &be, &err), 0);
    check_linear(be, 5, 7, 33, 9, 1e-4);
    fg_backend_free(be);
}
END_TEST

/* The backend splits Linear columns and attention (query, head) problems across its threads:
 * the results equal the single-threaded ones bit for bit (attention) or the naive sum (Linear),
 * for part counts that divide nothing evenly. */
START_TEST(threaded_backend_matches_single)
{
    enum { CTX = 80, HEADS = 4, D = 32, W = HEADS * D, NQ = 40, P = 5 };
    fg_backend *be;
    fg_err err;
    ck_assert_int_eq(fg_backend_cpu_create(3, &be, &err), 0);
    check_linear(be, 9, 203, 300, 21, 1e-3); /* large enough to be split */
    float *k = malloc(CTX * W * 4), *v = malloc(CTX * W * 4), *q = malloc(NQ * W * 4);
    float *o1 = malloc(NQ * W * 4), *o2 = malloc(NQ * W * 4), *sc = malloc(P * 2 * CTX * 4);
    uint8_t valid[CTX];
    randf(k, CTX * W, 24, 1.0f);
    randf(v, CTX * W, 25, 1.0f);
    randf(q, NQ * W, 26, 1.0f);
    for (int t = 0; t < CTX; t++)
        valid[t] = t >= 3;
    /* (40 queries over 3 threads: each part copies its KV head together first, kv_pack;
     * with a sliding window and grouped KV heads too) */
    for (int c = 0; c < 8; c++) {
        float keep = c & 1 ? 0.5f : 0.0f;
        uint32_t window = c & 2 ? 7 : 0, kvh = c & 4 ? 2 : HEADS;
        fg_attn_args one = {q, k, v, kvh * D, valid, NQ, CTX - NQ, HEADS, D, o1, sc, keep, 0, 0,
                            kvh, window};
        fg_cpu_attention(&one);
        fg_kv_view kv = {k, v, fg_codec_float(FG_CODEC_F32), kvh * D * 4, kvh * D, CTX};
        fg_attn_op many = {q, kv, valid, NQ, CTX - NQ, HEADS, kvh, D, window, keep, o2, sc,
                           2 * CTX, P, NULL, NULL};
        ck_assert_msg(be->iface->attention(be, &many, &err) == 0, "%s", err.msg);
        ck_assert_msg(!memcmp(o1, o2, NQ * W * 4), "threaded attention differs (keep %g, "
                      "window %u, %u KV heads)", (double)keep, window, kvh);
    }
    fg_backend_free(be);
    free(k), free(v), free(q), free(o1), free(o2), free(sc);
}
END_TEST

START_TEST(positions_follow_transformers)
{
    uint8_t valid[8] = {0, 0, 0, 1, 1, 0, 1, 1};
    int32_t pos[8];
    fg_model_positions(valid, 8, pos);
    int32_t want[8] = {-1, -1, -1, 0, 1, -1, 2, 3};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(pos[i], want[i]);
    fg_hparams c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "opt");
    c.vocab_size = 16, c.hidden = 30, c.n_layers = 1, c.ffn = 8, c.n_heads = 4, c.max_pos = 8;
    c.n_kv_heads = 3, c.head_dim = 8, c.embed_dim = 30;
    fg_err err;
    ck_assert_int_eq(fg_hparams_check(&c, &err), FG_ERR_INVALID_ARG); /* 4 % 3 */
}
END_TEST

/* Sparse attention keeps exactly the top-k keys of each head; keep = 1 is dense. */
START_TEST(sparse_attention_keeps_top_keys)
{
    enum { CTX = 30, HEADS = 2, D = 16, W = HEADS * D };
    float k[CTX * W], v[CTX * W], q[W], dense[W], sparse[W], ref[W], scratch[2 * CTX];
    uint8_t valid[CTX];
    randf(k, CTX * W, 21, 1.0f);
    randf(v, CTX * W, 22, 1.0f);
    randf(q, W, 23, 2.0f);
    memset(valid, 1, sizeof valid);
    valid[0] = valid[1] = 0;
    fg_attn_args a = {q, k, v, W, valid, 1, CTX - 1, HEADS, D, dense, scratch, 1.0f};
    fg_cpu_attention_ref(&a);
    a.keep = 0.0f;
    a.out = ref;
    fg_cpu_attention_ref(&a);
    ck_assert_int_eq(memcmp(dense, ref, sizeof dense), 0);
    a.keep = 0.25f; /* 28 valid keys -> 7 kept */
    a.out = sparse;
    fg_cpu_attention(&a);
    for (int h = 0; h < HEADS; h++) {
        double s[CTX], sorted[CTX];
        int n = 0;
        for (int t = 2; t < CTX; t++) {
            s[t] = 0;
            for (int j = 0; j < D; j++)
                s[t] += (double)q[h * D + j] * k[t * W + h * D + j];
            sorted[n++] = s[t];
        }
        for (int i = 0; i < n; i++) /* descending selection of the 7th largest */
            for (int j = i + 1; j < n; j++)
                if (sorted[j] > sorted[i]) {
                    double t = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = t;
                }
        double thr = sorted[6], mx = sorted[0], z = 0, out[D] = {0};
        for (int t = 2; t < CTX; t++)
            if (s[t] >= thr)
                z += exp(s[t] - mx);
        for (int t = 2; t < CTX; t++)
            if (s[t] >= thr)
                for (int j = 0; j < D; j++)
                    out[j] += exp(s[t] - mx) / z * v[t * W + h * D + j];
        for (int j = 0; j < D; j++)
            ck_assert_msg(fabs(out[j] - sparse[h * D + j]) < 1e-4, "h%d j%d %g vs %g", h, j,
                          out[j], sparse[h * D + j]);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("compute");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, dot_matches_reference);
    tcase_add_test(tc, layernorm_matches_reference);
    tcase_add_test(tc, attention_matches_reference_with_padding);
    tcase_add_test(tc, sparse_attention_keeps_top_keys);
    tcase_add_test(tc, linear_matches_naive);
    tcase_add_test(tc, threaded_backend_matches_single);
    tcase_add_test(tc, positions_follow_transformers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
