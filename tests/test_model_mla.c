/* test_model_mla.c - multi-head latent attention's two prefill paths against each other
 * (model/decoder.c: absorbed over the latent, or expanded through kv_b into per-head keys and
 * values), on long prompts, on the CPU and the simulated device backend, and on the CUDA
 * backend where a GPU or the emulated runtime (test_model_mla_emu) is there.
 *
 * Each row runs one fixture model (tests/fixtures/make_deepseek_fixtures.py: 4 heads, rope 8,
 * nope 16, v 12, kv_lora 32) over three windows of 96 to 120 random ids that share their first
 * 64 (fg_engine_score computes that run as a prefill of its own and copies its KV rows, so the
 * windows' prefill is a step at 64 cached rows: the expanded path expands the prefix's latent
 * rows from the cache), once with FG_MLA_PREFILL=absorb and once with =expand, and compares
 * the logits of every position from 70 on:
 *  - f32 cache: within 1e-3 of each other (measured: 2.7e-5 to 6.9e-5 of logits up to 9.9:
 *    f32 rounding, the two paths associate the products differently), and not bit-identical (the
 *    two paths round differently: equal bits would mean expand silently ran absorbed);
 *  - 4-bit cache: bit-identical (a quantized cache always attends absorbed);
 *  - and FG_MLA_PREFILL=auto (the FLOP rule) within the same bound of absorbed.
 * The fixtures' transformers logits on each path: test_infer_layouts / _placements / _device
 * as they are (FG_MLA_PREFILL unset: auto, which expands a prompt with no prefix) and under
 * FG_MLA_PREFILL=absorb (the ctest entries test_infer_*_mla_absorb). */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_common.h"

enum { NW = 3, FROM = 70, SHARED = 64, MAXLEN = 120 };

typedef struct mla_case {
    const char *name, *layout;
    fg_backend_kind backend;
    int cache_on_gpu, q4_cache;
} mla_case;

static const mla_case k_rows[] = {
    {"v2_lite_cpu", "deepseek-v2-lite-tiny-bf16", FG_BACKEND_CPU, 0, 0},
    {"v2_cpu", "deepseek-v2-tiny-bf16", FG_BACKEND_CPU, 0, 0},
    {"v3_yarn_cpu", "deepseek-v3-tiny-bf16", FG_BACKEND_CPU, 0, 0},
    {"kimi_k2_cpu", "kimi-k2-tiny-bf16", FG_BACKEND_CPU, 0, 0},
    {"v3_sim_all_on_gpu", "deepseek-v3-tiny-bf16", FG_BACKEND_SIM, 1, 0},
    {"v2_lite_sim_cache_in_ram", "deepseek-v2-lite-tiny-bf16", FG_BACKEND_SIM, 0, 0},
    {"v3_cpu_q4_cache", "deepseek-v3-tiny-bf16", FG_BACKEND_CPU, 0, 1},
    /* the CUDA backend: a GPU, or the emulated runtime (test_model_mla_emu); else skipped */
    {"v3_cuda_all_on_gpu", "deepseek-v3-tiny-bf16", FG_BACKEND_CUDA, 1, 0},
    {"v2_lite_cuda_cache_in_ram", "deepseek-v2-lite-tiny-bf16", FG_BACKEND_CUDA, 0, 0},
};

/* The windows: SHARED ids in common, then each its own (deterministic LCG, ids 3..499). */
static void windows(int32_t ids[NW][MAXLEN], uint32_t lens[NW])
{
    uint32_t x = 12345;
    static const uint32_t len[NW] = {120, 104, 96};
    for (int w = 0; w < NW; w++) {
        lens[w] = len[w];
        for (uint32_t t = 0; t < len[w]; t++) {
            x = x * 1664525u + 1013904223u;
            ids[w][t] = t < SHARED && w ? ids[0][t] : (int32_t)(3 + (x >> 8) % 497);
        }
    }
}

/* The logits of positions FROM.. of each window under FG_MLA_PREFILL=mode (out: NW x
 * (MAXLEN - FROM) x vocab); the engine's stats into *st. */
static void run(const char *store, const mla_case *c, const char *mode, uint32_t vocab,
                float *out, fg_engine_stats *st)
{
    ck_assert_int_eq(setenv("FG_MLA_PREFILL", mode, 1), 0);
    fg_engine_opts o = defaults();
    o.max_ctx = 128;
    o.threads = 2;
    o.backend = c->backend;
    o.policy.gbs = NW, o.policy.ngb = 1;
    o.policy.compress_cache = c->q4_cache;
    if (c->backend == FG_BACKEND_CUDA)
        o.gpu_budget = 1ull << 30;
    if (c->backend != FG_BACKEND_CPU) {
        fg_pager_policy gpu = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
        fg_pager_policy ram = {{1, 0, 0}, {0, 1, 0}, {1, 0, 0}};
        o.policy.have_fractions = 1;
        o.policy.frac = c->cache_on_gpu ? gpu : ram;
    }
    eng x;
    fg_err err;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s: %s: %s", c->name, mode, err.msg);
    int32_t ids[NW][MAXLEN];
    uint32_t lens[NW], from[NW];
    const int32_t *win[NW];
    windows(ids, lens);
    for (int w = 0; w < NW; w++)
        win[w] = ids[w], from[w] = FROM;
    size_t stride = (size_t)(MAXLEN - FROM) * vocab;
    ck_assert_msg(fg_engine_score(x.e, win, lens, from, NW, NULL, NULL, out, stride, &err) == 0,
                  "%s: %s: %s", c->name, mode, err.msg);
    fg_engine_stats_get(x.e, st);
    eng_close(&x);
    unsetenv("FG_MLA_PREFILL");
}

/* The greatest |a - b| over the positions each window has */
static double max_diff(const float *a, const float *b, uint32_t vocab)
{
    static const uint32_t len[NW] = {120, 104, 96};
    double d = 0;
    for (int w = 0; w < NW; w++)
        for (size_t i = 0; i < (size_t)(len[w] - FROM) * vocab; i++) {
            size_t at = (size_t)w * (MAXLEN - FROM) * vocab + i;
            double e = fabs((double)a[at] - b[at]);
            d = e > d || isnan(e) ? (isnan(e) ? INFINITY : e) : d;
        }
    return d;
}

START_TEST(paths_agree)
{
    const mla_case *c = &k_rows[_i];
    printf("case %s\n", c->name);
    if (c->backend == FG_BACKEND_CUDA && fg_cuda_device_count() == 0) {
        ck_assert_msg(!getenv("FG_TEST_EXPECT_CUDA"), "%s: no CUDA device", c->name);
        printf("%s: skipped, no CUDA device\n", c->name);
        return;
    }
    const char *store = convert(c->layout, 0);
    uint32_t vocab = 512;
    size_t n = (size_t)NW * (MAXLEN - FROM) * vocab;
    float *ab = calloc(n, 4), *ex = calloc(n, 4), *au = calloc(n, 4);
    ck_assert(ab && ex && au);
    fg_engine_stats st;
    run(store, c, "absorb", vocab, ab, &st);
    ck_assert_msg(st.rows_shared > 0, "%s: the windows' common run was not shared", c->name);
    run(store, c, "expand", vocab, ex, &st);
    run(store, c, "auto", vocab, au, &st);
    double d = max_diff(ab, ex, vocab), da = max_diff(ab, au, vocab);
    double big = 0;
    for (size_t i = 0; i < n; i++)
        big = fabs(ab[i]) > big ? fabs(ab[i]) : big;
    printf("%s: absorb vs expand max diff %g, vs auto %g (logits up to %g)\n", c->name, d, da,
           big);
    if (c->q4_cache) {
        ck_assert_msg(d == 0 && da == 0, "%s: a 4-bit cache must attend absorbed: diff %g, %g",
                      c->name, d, da);
    } else {
        ck_assert_msg(d > 0 && d < 1e-3, "%s: absorb vs expand: max diff %g (bound 1e-3, and "
                      "not 0)", c->name, d);
        ck_assert_msg(da < 1e-3, "%s: absorb vs auto: max diff %g", c->name, da);
    }
    free(ab);
    free(ex);
    free(au);
}
END_TEST

/* A value FG_MLA_PREFILL does not know is refused at open, naming the variable */
START_TEST(bad_mode_refused)
{
    const char *store = convert("deepseek-v3-tiny-bf16", 0);
    ck_assert_int_eq(setenv("FG_MLA_PREFILL", "expanded", 1), 0);
    fg_engine_opts o = defaults();
    o.max_ctx = 64;
    eng x;
    fg_err err;
    ck_assert_int_ne(eng_open(store, &o, &x, &err), 0);
    ck_assert_msg(strstr(err.msg, "FG_MLA_PREFILL=expanded") != NULL, "%s", err.msg);
    unsetenv("FG_MLA_PREFILL");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_mla");
    TCase *tc = infer_tcase("mla", 300);
    tcase_add_loop_test(tc, paths_agree, 0, (int)(sizeof k_rows / sizeof k_rows[0]));
    tcase_add_test(tc, bad_mode_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
