/* test_sample.c - sampling: greedy ties, reproducible seeds, top-k/top-p support sets, the
 * empirical distribution at temperature 1 against the softmax, and the distribution drawn
 * from against transformers' logits processors (penalties, temperature, top-k, top-p, min-p:
 * tests/fixtures/sampling/make_sampling_ref.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "testutil.h"

START_TEST(greedy_takes_first_max)
{
    float l[5] = {1, 3, 3, -1, 2};
    fg_sample_params p = {0, 0, 1, 0};
    fg_rng r;
    fg_rng_seed(&r, 1, 0);
    ck_assert_int_eq(fg_sample(l, 5, &p, &r, NULL), 1);
}
END_TEST

static int draw_counts(const float *l, uint32_t n, fg_sample_params p, int draws, int *counts)
{
    fg_sample_scratch *s;
    fg_err err;
    ck_assert_int_eq(fg_sample_scratch_create(n, &s, &err), 0);
    fg_rng r;
    fg_rng_seed(&r, p.seed, 7);
    for (int i = 0; i < draws; i++)
        counts[fg_sample(l, n, &p, &r, s)]++;
    fg_sample_scratch_free(s);
    return 0;
}

START_TEST(temperature_one_follows_softmax)
{
    float l[4] = {0.0f, 1.0f, 2.0f, 0.5f};
    int c[4] = {0};
    fg_sample_params p = {1.0f, 0, 1.0f, 42};
    draw_counts(l, 4, p, 200000, c);
    double z = 0;
    for (int i = 0; i < 4; i++)
        z += exp(l[i]);
    for (int i = 0; i < 4; i++) {
        double want = exp(l[i]) / z, got = c[i] / 200000.0;
        ck_assert_msg(fabs(got - want) < 0.005, "token %d: %f vs %f", i, got, want);
    }
}
END_TEST

START_TEST(top_k_and_top_p_restrict_support)
{
    float l[6] = {5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f};
    int c[6] = {0};
    fg_sample_params p = {1.0f, 2, 1.0f, 1};
    draw_counts(l, 6, p, 20000, c);
    ck_assert(c[0] > 0 && c[1] > 0);
    for (int i = 2; i < 6; i++)
        ck_assert_int_eq(c[i], 0);
    /* p(0) = 0.636, p(1) = 0.234: top_p 0.8 keeps exactly tokens 0 and 1 */
    int d[6] = {0};
    fg_sample_params q = {1.0f, 0, 0.8f, 1};
    draw_counts(l, 6, q, 20000, d);
    ck_assert(d[0] > 0 && d[1] > 0);
    for (int i = 2; i < 6; i++)
        ck_assert_int_eq(d[i], 0);
    /* a tiny top_p still keeps one token */
    int e[6] = {0};
    fg_sample_params t = {1.0f, 0, 1e-6f, 1};
    draw_counts(l, 6, t, 1000, e);
    ck_assert_int_eq(e[0], 1000);
}
END_TEST

START_TEST(seeds_reproduce_and_differ)
{
    float l[50];
    for (int i = 0; i < 50; i++)
        l[i] = (float)((i * 37) % 11) * 0.3f;
    fg_sample_scratch *s;
    fg_err err;
    ck_assert_int_eq(fg_sample_scratch_create(50, &s, &err), 0);
    fg_sample_params p = {0.9f, 20, 0.95f, 123};
    int a[64], b[64], diff = 0;
    fg_rng r1, r2;
    fg_rng_seed(&r1, 123, 3);
    fg_rng_seed(&r2, 123, 3);
    for (int i = 0; i < 64; i++) {
        a[i] = fg_sample(l, 50, &p, &r1, s);
        b[i] = fg_sample(l, 50, &p, &r2, s);
        ck_assert_int_eq(a[i], b[i]);
    }
    fg_rng_seed(&r2, 123, 4); /* another sequence */
    for (int i = 0; i < 64; i++)
        diff += fg_sample(l, 50, &p, &r2, s) != a[i];
    ck_assert_int_gt(diff, 0);
    fg_sample_scratch_free(s);
    fg_sample_params bad = {-1.0f, 0, 1.0f, 0};
    ck_assert_int_eq(fg_sample_check(&bad, &err), FG_ERR_INVALID_ARG);
    bad.temperature = 1.0f;
    bad.top_p = 0.0f;
    ck_assert_int_eq(fg_sample_check(&bad, &err), FG_ERR_INVALID_ARG);
}
END_TEST

START_TEST(log_prob_is_log_softmax)
{
    float l[3] = {1000.0f, 1000.0f, -1000.0f}; /* large values: no overflow */
    ck_assert(fabs(fg_log_prob(l, 3, 0) - log(0.5)) < 1e-12);
    ck_assert(fg_log_prob(l, 3, 2) < -1999.0);
}
END_TEST

/* Read the numbers after a line's keyword; returns how many. */
static int read_nums(FILE *f, const char *key, double *v, int cap)
{
    static char line[65536];
    ck_assert(fgets(line, sizeof line, f) != NULL);
    size_t kl = strlen(key);
    ck_assert_msg(!strncmp(line, key, kl), "expected %s, got %.20s", key, line);
    int n = 0;
    char *p = line + kl, *e;
    for (double x; n < cap && (x = strtod(p, &e), e != p); p = e)
        v[n++] = x;
    return n;
}

START_TEST(processors_match_transformers)
{
    FILE *f = fopen(FG_SOURCE_DIR "/tests/fixtures/sampling/sampling_ref.txt", "r");
    ck_assert(f != NULL);
    char head[256];
    ck_assert(fgets(head, sizeof head, f) != NULL); /* the versions line */
    fg_sample_scratch *sc;
    fg_err err;
    ck_assert_int_eq(fg_sample_scratch_create(64, &sc, &err), 0);
    int cases = 0, c;
    while ((c = fgetc(f)) != EOF) {
        ungetc(c, f);
        double pr[7], pv[16], ov[16], lv[64], want[64], got[64];
        ck_assert_int_eq(read_nums(f, "params", pr, 7), 7);
        int np = read_nums(f, "prompt", pv, 16), no = read_nums(f, "out", ov, 16);
        ck_assert_int_eq(read_nums(f, "logits", lv, 64), 64);
        ck_assert_int_eq(read_nums(f, "probs", want, 64), 64);
        int32_t prompt[16], out[16];
        float lg[64];
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)pv[i];
        for (int i = 0; i < no; i++)
            out[i] = (int32_t)ov[i];
        for (int i = 0; i < 64; i++)
            lg[i] = (float)lv[i];
        fg_sample_params p = {(float)pr[0], (uint32_t)pr[1], (float)pr[2], 0, (float)pr[3],
                              (float)pr[4], (float)pr[5], (float)pr[6]};
        ck_assert_int_eq(fg_sample_check(&p, &err), 0);
        fg_sample_hist h = {prompt, (uint32_t)np, out, (uint32_t)no};
        fg_sample_probs(lg, 64, &p, &h, sc, got);
        for (int i = 0; i < 64; i++)
            ck_assert_msg(fabs(got[i] - want[i]) < 1e-5, "case %d token %d: %g, transformers "
                          "%g", cases, i, got[i], want[i]);
        /* draws stay inside the support */
        fg_rng r;
        fg_rng_seed(&r, 3, (uint64_t)cases);
        for (int i = 0; i < 200; i++)
            ck_assert(want[fg_sample_hist_pick(lg, 64, &p, &h, &r, sc)] > 0);
        cases++;
    }
    ck_assert_int_ge(cases, 7);
    fg_sample_scratch_free(sc);
    fclose(f);
}
END_TEST

START_TEST(penalty_ranges_refused)
{
    fg_err err;
    fg_sample_params p = {1, 0, 1, 0, 1.5f};
    ck_assert_int_ne(fg_sample_check(&p, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "--min-p"));
    p = (fg_sample_params){1, 0, 1, 0, 0, 3.0f};
    ck_assert_int_ne(fg_sample_check(&p, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "--presence-penalty"));
    p = (fg_sample_params){1, 0, 1, 0, 0, 0, 0, -1.0f};
    ck_assert_int_ne(fg_sample_check(&p, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "--repetition-penalty"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sample");
    TCase *tc = tcase_create("sample");
    tcase_add_test(tc, greedy_takes_first_max);
    tcase_add_test(tc, temperature_one_follows_softmax);
    tcase_add_test(tc, top_k_and_top_p_restrict_support);
    tcase_add_test(tc, seeds_reproduce_and_differ);
    tcase_add_test(tc, log_prob_is_log_softmax);
    tcase_add_test(tc, processors_match_transformers);
    tcase_add_test(tc, penalty_ranges_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
