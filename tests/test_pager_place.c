/* test_pager_place.c - the pager's placement rule with ranks (SPEC.md "Placement"), on a
 * memory-only file (placement reads nothing): fg_pager_place's homes against the rule written
 * out here. The midpoint rule of one rank, the budgets and the tiers at acquire are
 * test_pager.c's t_placement. */
#include <check.h>
#include <string.h>

#include "pager.h"
#include "testutil.h"

/* A pager with HOST and, when dev > 0, a DEVICE tier (host memory standing in for a GPU). */
static fg_pager *open_mem(uint64_t host, uint64_t dev)
{
    fg_err err;
    fg_pager_config c;
    memset(&c, 0, sizeof c);
    c.budget[FG_TIER_HOST] = host;
    c.budget[FG_TIER_DEVICE] = dev;
    c.flags = FG_PAGER_NO_CUDA | FG_PAGER_NO_MLOCK | FG_PAGER_NO_PREFAULT;
    if (dev)
        ck_assert_int_eq(fg_pager_device_host_create(&c.device, &err), FG_OK);
    fg_pager *p;
    ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    return p;
}

/* Ranks: a kind's lower ranks are homed before any chunk of a higher one; each (rank, group)
 * run is split by the midpoint rule under thresholds moved onto its rank's bytes. Random
 * chunks of three ranks and five groups under random fractions, checked against the rule
 * written out here, and the ordering: no chunk of a rank homes nearer than DISK while one of a
 * lower rank stays on disk, none on DEVICE while a lower one is off it. A bad rank is refused. */
START_TEST(t_placement_ranks)
{
    fg_err err;
    uint64_t s = 77;
    for (int trial = 0; trial < 200; trial++) {
        fg_pager *p = open_mem(64 << 20, 64 << 20);
        uint32_t file, id, n = 1 + (uint32_t)(tu_xorshift(&s) % 40);
        ck_assert_int_eq(fg_pager_add_file(p, NULL, 1, &file, &err), FG_OK);
        uint64_t size[40], bytes[FG_PLACE_RANKS] = {0}, off = 0;
        uint32_t rank[40], group[40];
        for (uint32_t i = 0; i < n; i++) {
            size[i] = 4096 * (1 + tu_xorshift(&s) % 8);
            rank[i] = trial % 4 == 0 ? 0 : (uint32_t)(tu_xorshift(&s) % 3);
            group[i] = (uint32_t)(tu_xorshift(&s) % 5);
            bytes[rank[i]] += size[i];
            fg_pager_chunk_desc d = {file, off, size[i], size[i], 0, 0, i, {0},
                                     FG_CHUNK_WEIGHT, group[i], 1, rank[i]};
            off += size[i];
            ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
        }
        double g = (double)(tu_xorshift(&s) % 5) / 4, c = (double)(tu_xorshift(&s) % 1000) / 999;
        c = g + c > 1 ? 1 - g : c;
        fg_pager_policy pol = {{g, c, 1 - g - c}, {0, 1, 0}, {0, 1, 0}};
        ck_assert_msg(fg_pager_place(p, &pol, &err) == FG_OK, "%s", err.msg);
        uint64_t total = bytes[0] + bytes[1] + bytes[2];
        for (uint32_t i = 0; i < n; i++) {
            uint64_t below = 0, run = 0, before = 0;
            for (uint32_t r = 0; r < rank[i]; r++)
                below += bytes[r];
            for (uint32_t j = 0; j < n; j++)
                if (rank[j] == rank[i] && group[j] == group[i]) {
                    before += j < i ? size[j] : 0;
                    run += size[j];
                }
            double t[2] = {g, g + c};
            for (int k = 0; k < 2 && bytes[rank[i]] != total; k++) {
                t[k] = (t[k] * (double)total - (double)below) / (double)bytes[rank[i]];
                t[k] = t[k] < 0 ? 0 : t[k] > 1 ? 1 : t[k];
            }
            double mid = ((double)before + (double)size[i] / 2) / (double)run;
            fg_tier want = mid < t[0] ? FG_TIER_DEVICE : mid < t[1] ? FG_TIER_HOST : FG_TIER_DISK;
            ck_assert_int_eq(fg_pager_home(p, i), want);
            for (uint32_t j = 0; j < n; j++)
                if (rank[j] < rank[i])
                    ck_assert_int_ge(fg_pager_home(p, j), fg_pager_home(p, i));
        }
        fg_pager_close(p);
    }
    fg_pager *p = open_mem(1 << 20, 0);
    uint32_t file, id;
    ck_assert_int_eq(fg_pager_add_file(p, NULL, 1, &file, &err), FG_OK);
    fg_pager_chunk_desc d = {file, 0, 4096, 4096, 0, 0, 0, {0}, FG_CHUNK_WEIGHT, 0, 1,
                             FG_PLACE_RANKS};
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "rank 4"), "%s", err.msg);
    fg_pager_close(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pager_place");
    TCase *tc = tcase_create("place");
    tcase_add_test(tc, t_placement_ranks);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
