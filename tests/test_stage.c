/* test_stage.c - the pipeline's split of layers into stages (engine/stage.h): against an
 * exhaustive search over every split on random costs (the least largest stage, every stage
 * after the first with a layer, contiguous and covering), and the edges: one stage, as many
 * stages as layers + 1, too many stages, a heavy first stage left without layers.
 * The pipeline itself (ranks, messages, failures) is tests/tool_mpi.sh, under mpirun.
 */
#include <stdlib.h>
#include <string.h>

#include "stage.h"
#include "testutil.h"

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static double largest(const double *cost, double base0, uint32_t n, const uint32_t *first)
{
    double worst = 0;
    for (uint32_t s = 0; s < n; s++) {
        double c = s == 0 ? base0 : 0;
        for (uint32_t l = first[s]; l < first[s + 1]; l++)
            c += cost[l];
        worst = c > worst ? c : worst;
    }
    return worst;
}

/* The best largest stage over every split (cuts chosen recursively). */
static double brute(const double *cost, uint32_t layers, double base0, uint32_t n,
                    uint32_t *first, uint32_t s)
{
    if (s == n) {
        first[n] = layers;
        for (uint32_t k = 1; k < n; k++)
            if (first[k + 1] <= first[k])
                return 1e300;
        return largest(cost, base0, n, first);
    }
    double best = 1e300;
    for (uint32_t c = first[s - 1] + (s > 1); c <= layers; c++) {
        first[s] = c;
        double v = brute(cost, layers, base0, n, first, s + 1);
        best = v < best ? v : best;
    }
    return best;
}

START_TEST(split_is_optimal_and_well_formed)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    for (int trial = 0; trial < 300; trial++) {
        uint32_t layers = 1 + rnd(&seed) % 9, n = 1 + rnd(&seed) % (layers + 1);
        double cost[16], base0 = (double)(rnd(&seed) % 100) / 10;
        for (uint32_t l = 0; l < layers; l++)
            cost[l] = (double)(1 + rnd(&seed) % 50) / 10;
        uint32_t first[18], bf[18] = {0};
        fg_err err;
        ck_assert_int_eq(fg_stage_split(cost, layers, base0, n, first, &err), FG_OK);
        ck_assert_uint_eq(first[0], 0);
        ck_assert_uint_eq(first[n], layers);
        for (uint32_t s = 1; s < n; s++)
            ck_assert_msg(first[s + 1] > first[s], "stage %u of %u has no layer", s, n);
        ck_assert_uint_le(first[1], layers);
        double got = largest(cost, base0, n, first), best = brute(cost, layers, base0, n, bf, 1);
        ck_assert_msg(got <= best + 1e-9, "trial %d: %u layers in %u stages: largest %g, best %g",
                      trial, layers, n, got, best);
    }
}
END_TEST

START_TEST(split_edges)
{
    double cost[4] = {1, 1, 1, 1};
    uint32_t first[8];
    fg_err err;
    ck_assert_int_eq(fg_stage_split(cost, 4, 0, 1, first, &err), FG_OK);
    ck_assert_uint_eq(first[0], 0);
    ck_assert_uint_eq(first[1], 4);
    ck_assert_int_eq(fg_stage_split(cost, 4, 0, 2, first, &err), FG_OK); /* 2 + 2 */
    ck_assert_uint_eq(first[1], 2);
    ck_assert_int_eq(fg_stage_split(cost, 4, 10, 2, first, &err), FG_OK); /* a heavy rank 0 */
    ck_assert_uint_eq(first[1], 0);
    ck_assert_int_eq(fg_stage_split(cost, 4, 0, 5, first, &err), FG_OK); /* rank 0 none */
    ck_assert_uint_eq(first[1], 0);
    for (uint32_t s = 1; s <= 4; s++)
        ck_assert_uint_eq(first[s + 1] - first[s], 1);
    ck_assert_int_eq(fg_stage_split(cost, 4, 0, 6, first, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "at most 5 ranks"));
    ck_assert_int_eq(fg_stage_split(cost, 4, 0, 0, first, &err), FG_ERR_INVALID_ARG);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stage");
    TCase *tc = tcase_create("split");
    tcase_add_loop_test(tc, split_is_optimal_and_well_formed, 0, 4);
    tcase_add_test(tc, split_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
