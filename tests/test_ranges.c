/* test_ranges.c - fg_ranges (core/fg_ranges.h): sorted disjoint ranges, as the devices keep
 * their pinned host memory. */
#include "fg_ranges.h"
#include "testutil.h"

START_TEST(add_find_cover_run_del)
{
    fg_ranges s = {0};
    /* out of order, then adjacent: kept sorted */
    ck_assert_int_eq(fg_ranges_add(&s, 3000, 1000, 0), FG_OK);
    ck_assert_int_eq(fg_ranges_add(&s, 1000, 1000, 1), FG_OK);
    ck_assert_int_eq(fg_ranges_add(&s, 2000, 1000, 0), FG_OK);
    ck_assert_uint_eq(s.n, 3);
    ck_assert(s.r[0].at == 1000 && s.r[1].at == 2000 && s.r[2].at == 3000);
    /* overlaps refused, nothing added */
    ck_assert_int_eq(fg_ranges_add(&s, 2500, 10, 0), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_ranges_add(&s, 500, 501, 0), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_ranges_add(&s, 3999, 5, 0), FG_ERR_INVALID_ARG);
    ck_assert_uint_eq(s.n, 3);
    ck_assert_uint_eq(fg_ranges_find(&s, 999), 0);
    ck_assert_uint_eq(fg_ranges_find(&s, 2000), 1);
    ck_assert_uint_eq(fg_ranges_find(&s, 4000), 3);
    /* cover: across adjacent ranges yes, past the end or from a gap no */
    ck_assert(fg_ranges_cover(&s, 1500, 2500));
    ck_assert(!fg_ranges_cover(&s, 1500, 2501));
    ck_assert(!fg_ranges_cover(&s, 999, 10));
    /* run: up to the end of the range p lies in; all of n outside */
    ck_assert_uint_eq(fg_ranges_run(&s, 1500, 2000), 500);
    ck_assert_uint_eq(fg_ranges_run(&s, 1500, 400), 400);
    ck_assert_uint_eq(fg_ranges_run(&s, 5000, 777), 777);
    /* del by start and tag */
    uint64_t len = 0;
    ck_assert(!fg_ranges_del(&s, 1000, 0, &len));
    ck_assert(!fg_ranges_del(&s, 1001, -1, &len));
    ck_assert(fg_ranges_del(&s, 1000, 1, &len) && len == 1000);
    ck_assert(fg_ranges_del(&s, 3000, -1, NULL));
    ck_assert_uint_eq(s.n, 1);
    ck_assert(!fg_ranges_cover(&s, 2000, 1001));
    fg_ranges_free(&s);
    ck_assert(s.n == 0 && s.r == NULL);
}
END_TEST

START_TEST(many_ranges_stay_sorted)
{
    fg_ranges s = {0};
    for (uint32_t i = 0; i < 1000; i++) /* a permutation of 1000 slots of 64 bytes */
        ck_assert_int_eq(fg_ranges_add(&s, 4096 + (uintptr_t)((i * 617u) % 1000) * 64, 64, 0), FG_OK);
    for (uint32_t i = 1; i < s.n; i++)
        ck_assert(s.r[i - 1].at + s.r[i - 1].len <= s.r[i].at);
    ck_assert(fg_ranges_cover(&s, 4096, 64000));
    fg_ranges_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ranges");
    TCase *tc = tcase_create("ranges");
    tcase_add_test(tc, add_find_cover_run_del);
    tcase_add_test(tc, many_ranges_stay_sorted);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
