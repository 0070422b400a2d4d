/* test_plan.c - the memory plan's invariants (engine/plan.h), as properties over random model
 * shapes, policies and budgets: the plan adds up, fits its budget or says what would, keeps the
 * streaming window, is deterministic; and the default placement rule; and the homes the plan
 * counts are the ones a real pager gives the same chunks, so a plan never passes and then fails
 * in the pager.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager.h"
#include "plan.h"
#include "testutil.h"

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A random decoder of one of the families and its stored sizes (F16 chunks of <= 4 MiB). */
/* Room for a random model's weight chunks (random_model's shapes stay well below it). */
#define MAX_CHUNKS 4096
static uint64_t g_chunk[MAX_CHUNKS];
static uint8_t g_rank[MAX_CHUNKS];
static uint32_t g_first[2 * 6 + 3];

static void random_model(uint64_t *s, fg_hparams *hp, fg_plan_unit *units, fg_plan_model *m)
{
    char json[1024];
    uint32_t heads = 1u << (rnd(s) % 5), hd = 16u << (rnd(s) % 3), kv = heads >> (rnd(s) % 2);
    uint32_t hidden = heads * hd, layers = 1 + rnd(s) % 6, ffn = hidden * (2 + rnd(s) % 3);
    uint32_t vocab = 256 + rnd(s) % 4000;
    if (rnd(s) % 2)
        snprintf(json, sizeof json, "{\"model_type\":\"opt\",\"vocab_size\":%u,\"hidden_size\":%u,"
                 "\"num_hidden_layers\":%u,\"ffn_dim\":%u,\"num_attention_heads\":%u,"
                 "\"max_position_embeddings\":512}", vocab, hidden, layers, ffn, heads);
    else
        snprintf(json, sizeof json, "{\"model_type\":\"llama\",\"vocab_size\":%u,"
                 "\"hidden_size\":%u,\"num_hidden_layers\":%u,\"intermediate_size\":%u,"
                 "\"num_attention_heads\":%u,\"num_key_value_heads\":%u,"
                 "\"max_position_embeddings\":512}", vocab, hidden, layers, ffn, heads,
                 kv ? kv : 1);
    fg_err err;
    ck_assert_msg(fg_model_config_parse(json, strlen(json), "t", hp, &err) == FG_OK, "%s",
                  err.msg);
    uint32_t n = fg_model_n_units(hp), nc = 0;
    uint64_t weights = 0, max_floats = 0;
    for (uint32_t u = 0; u < n; u++) {
        fg_tensor_spec spec[FG_UNIT_MAX_TENSORS];
        uint32_t k = fg_model_unit_tensors(hp, u, spec);
        memset(&units[u], 0, sizeof units[u]);
        g_first[u] = nc;
        for (uint32_t i = 0; i < k; i++) {
            uint64_t cols = spec[i].n_dims > 1 ? spec[i].dims[1] : 1;
            uint64_t bytes = (spec[i].dims[0] * cols * 2 + 4095) & ~4095ull;
            uint64_t rows = (4u << 20) / (cols * 2) ? (4u << 20) / (cols * 2) : 1;
            uint64_t chunk = ((rows < spec[i].dims[0] ? rows : spec[i].dims[0]) * cols * 2 + 4095)
                             & ~4095ull;
            max_floats = rows * cols > max_floats ? rows * cols : max_floats;
            if (spec[i].fallback[0])
                continue; /* tied: the embedding's bytes */
            /* placement ranks (plan_model.c): a gathered table last; half the time any */
            uint8_t rank = rnd(s) % 2 ? (uint8_t)(rnd(s) % 3)
                                      : spec[i].access == FG_ACCESS_GATHER ? 2 : 0;
            for (uint64_t r0 = 0; r0 < spec[i].dims[0]; r0 += rows) {
                uint64_t nr = spec[i].dims[0] - r0 < rows ? spec[i].dims[0] - r0 : rows;
                ck_assert_uint_lt(nc, MAX_CHUNKS);
                g_rank[nc] = rank;
                g_chunk[nc++] = (nr * cols * 2 + 4095) & ~4095ull;
            }
            units[u].stored += bytes;
            weights += bytes;
            if (spec[i].access == FG_ACCESS_SMALL || spec[i].access == FG_ACCESS_LINEAR)
                units[u].resident += bytes;
            else if (chunk > units[u].stream_chunk)
                units[u].stream_chunk = chunk;
            if (spec[i].access == FG_ACCESS_SMALL)
                units[u].small_floats += spec[i].dims[0] * cols;
        }
    }
    g_first[n] = nc;
    /* the sum of padded chunks, as a store counts a tensor's stored bytes */
    weights = 0;
    for (uint32_t c = 0; c < nc; c++)
        weights += g_chunk[c];
    for (uint32_t u = 0; u < n; u++) {
        uint64_t own = 0;
        for (uint32_t c = g_first[u]; c < g_first[u + 1]; c++)
            own += g_chunk[c];
        if (units[u].resident == units[u].stored)
            units[u].resident = own;
        units[u].stored = own;
    }
    *m = (fg_plan_model){hp, n, units, weights, max_floats, g_chunk, g_first, 0, g_rank};
}

static void check_sums(const fg_plan *p)
{
    if (p->dev_pool) /* the engine's buffers are device memory but for their host sides */
        ck_assert_uint_eq(p->fixed, p->head_host + p->block_host + p->sampler);
    else
        ck_assert_uint_eq(p->fixed, p->small_f32 + p->wdecode + p->lscratch + p->workspace +
                                        p->head + p->block + p->sampler);
    ck_assert_uint_eq(p->total_host, p->fixed + p->pool);
    for (int k = 0; k < 3; k++) {
        const double *f = k == 0 ? p->frac.w : k == 1 ? p->frac.c : p->frac.h;
        ck_assert(f[0] >= 0 && f[1] >= 0 && f[2] >= 0 && f[0] + f[1] + f[2] > 0.999 &&
                  f[0] + f[1] + f[2] < 1.001);
    }
    ck_assert_uint_ge(p->gbs, 1);
    ck_assert_uint_ge(p->ngb, 1);
    ck_assert(p->ahead == 1 || p->ahead == 2);
}

START_TEST(plans_add_up_and_fit_their_budgets)
{
    uint64_t s = 88172645463325252ull;
    fg_hparams hp;
    fg_plan_unit units[2 * 6 + 2];
    int fitted = 0, refused = 0;
    for (int trial = 0; trial < 2000; trial++) {
        fg_plan_model m;
        random_model(&s, &hp, units, &m);
        fg_policy p = fg_policy_default();
        p.gbs = rnd(&s) % 3 ? 0 : 1 + (uint32_t)(rnd(&s) % 16);
        p.ngb = rnd(&s) % 3 ? 0 : 1 + (uint32_t)(rnd(&s) % 8);
        p.sep_layer = rnd(&s) % 2;
        p.compress_cache = rnd(&s) % 2;
        uint32_t ctx = 8 + (uint32_t)(rnd(&s) % 500);
        uint64_t span = rnd(&s) % 2 ? (uint64_t)64 << 20 : (uint64_t)2 << 30;
        uint64_t budget = rnd(&s) % 4 ? (1u << 20) + rnd(&s) % span : 0;
        fg_plan a, b;
        fg_err err;
        int rc = fg_plan_make(&m, &p, ctx, budget, &a, &err);
        if (rc) {
            ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
            ck_assert_msg(budget && strstr(err.msg, "--ram-budget") && strstr(err.msg, "at least"),
                          "%s", err.msg);
            refused++;
            continue;
        }
        fitted++;
        check_sums(&a);
        if (budget)
            ck_assert_uint_le(a.total_host, budget);
        else /* the pool holds what is homed in RAM plus the window */
            ck_assert_uint_eq(a.pool, a.homed[0] + a.homed[1] + a.homed[2] + a.window);
        if (p.gbs)
            ck_assert_uint_eq(a.gbs, p.gbs);
        if (p.ngb)
            ck_assert_uint_eq(a.ngb, p.ngb);
        ck_assert_uint_eq(a.max_ctx, ctx);
        ck_assert_uint_eq(fg_plan_make(&m, &p, ctx, budget, &b, &err), FG_OK);
        ck_assert_msg(!memcmp(&a, &b, sizeof a), "the same inputs gave another plan");
    }
    ck_assert_int_gt(fitted, 100);
    ck_assert_int_gt(refused, 10);
}
END_TEST

/* A budget that is refused names a size that is then accepted. */
START_TEST(refusals_name_a_budget_that_fits)
{
    uint64_t s = 1234567;
    fg_hparams hp;
    fg_plan_unit units[2 * 6 + 2];
    for (int trial = 0; trial < 300; trial++) {
        fg_plan_model m;
        random_model(&s, &hp, units, &m);
        fg_policy p = fg_policy_default();
        p.gbs = 1 + (uint32_t)(rnd(&s) % 8);
        p.ngb = 1 + (uint32_t)(rnd(&s) % 4);
        fg_plan a;
        fg_err err;
        if (fg_plan_make(&m, &p, 64, 1u << 20, &a, &err) != FG_ERR_NO_SPACE)
            continue;
        const char *at = strstr(err.msg, "at least ");
        ck_assert_ptr_nonnull(at);
        double mib = atof(at + 9);
        uint64_t need = (uint64_t)((mib + 1) * 1024 * 1024);
        ck_assert_msg(fg_plan_make(&m, &p, 64, need, &a, &err) == FG_OK, "%s", err.msg);
        ck_assert_uint_le(a.total_host, need);
    }
}
END_TEST

/* Without fractions: all in RAM when it fits; weights to disk first, then the KV cache. */
START_TEST(default_placement_rule)
{
    uint64_t s = 99;
    fg_hparams hp;
    fg_plan_unit units[2 * 6 + 2];
    fg_plan_model m;
    random_model(&s, &hp, units, &m);
    fg_policy p = fg_policy_default();
    p.gbs = 4;
    p.ngb = 2;
    fg_plan a;
    fg_err err;
    ck_assert_int_eq(fg_plan_make(&m, &p, 128, 0, &a, &err), FG_OK);
    ck_assert(a.frac.w[1] == 1.0 && a.frac.c[1] == 1.0 && a.frac.h[1] == 1.0);
    ck_assert_uint_eq(a.on_disk[0] + a.on_disk[1] + a.on_disk[2], 0);
    /* a budget between the all-in-RAM need and the streaming minimum: the weights go to disk
     * but for the share the room left beside the window and one more span holds, homed */
    uint64_t all = a.total_host, chunk = 0;
    for (uint32_t c = 0; c < m.unit_first[m.n_units]; c++)
        chunk = m.chunk[c] > chunk ? m.chunk[c] : chunk;
    int partial = 0;
    for (uint64_t b = all - 4096; b > a.fixed; b -= (all - a.fixed) / 16) {
        fg_plan q;
        if (fg_plan_make(&m, &p, 128, b, &q, &err))
            break;
        ck_assert(q.frac.w[1] == 1.0 || q.frac.w[1] + q.frac.w[2] == 1.0);
        if (q.frac.w[1] == 1.0) {
            ck_assert(q.frac.c[1] == 1.0 && q.frac.h[1] == 1.0);
            continue;
        }
        ck_assert(q.frac.c[1] == 1.0 || q.frac.w[1] < 1.0); /* the cache leaves after them */
        uint64_t others = q.homed[1] + q.homed[2];
        uint64_t spare = q.pool > q.window + others + q.max_span
                             ? q.pool - q.window - others - q.max_span : 0;
        ck_assert_uint_le(q.homed[0], spare);
        ck_assert_uint_ge(q.homed[0] + (uint64_t)m.n_units * chunk, spare);
        if (q.homed[0]) /* the span left keeps the prefetch */
            ck_assert_uint_eq(q.ahead, FG_PLAN_AHEAD);
        partial += q.homed[0] > 0;
    }
    ck_assert_int_gt(partial, 0);
    p.have_fractions = 1;
    p.frac = (fg_pager_policy){{0.5, 0.5, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(fg_plan_make(&m, &p, 128, 0, &a, &err), FG_ERR_PAGER_NO_TIER);
}
END_TEST

/* The plan's homes are the pager's: for random placements and budgets, a plan fg_plan_make
 * accepts is accepted by a real pager given the same chunks (weights grouped by unit, one group
 * per KV and activation chunk, as the engine registers them) and a pool of plan.pool bytes, and
 * the pager homes exactly the bytes the plan counts. No plan passes here and fails there. */
START_TEST(placements_the_pager_accepts)
{
    uint64_t s = 4242;
    fg_hparams hp;
    fg_plan_unit units[2 * 6 + 2];
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 120; trial++) {
        fg_plan_model m;
        random_model(&s, &hp, units, &m);
        fg_policy p = fg_policy_default();
        p.gbs = 1 + (uint32_t)(rnd(&s) % 4);
        p.ngb = 1 + (uint32_t)(rnd(&s) % 3);
        p.have_fractions = 1;
        double f[3];
        for (int k = 0; k < 3; k++) /* often exactly 0, 1/2 or 1: the rule's edges */
            f[k] = rnd(&s) % 3 ? (double)(rnd(&s) % 5) / 4 : (double)(rnd(&s) % 1000) / 999;
        p.frac = (fg_pager_policy){{0, f[0], 1 - f[0]}, {0, f[1], 1 - f[1]}, {0, f[2], 1 - f[2]}};
        fg_plan all, pl;
        fg_err err;
        ck_assert_int_eq(fg_plan_make(&m, &p, 48, 0, &all, &err), FG_OK);
        uint64_t budget = all.fixed + all.window / 2 + rnd(&s) % (all.total_host + 1);
        int rc = fg_plan_make(&m, &p, 48, budget, &pl, &err);
        if (rc) {
            ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
            refused++;
            continue;
        }
        accepted++;
        fg_pager_config pc;
        memset(&pc, 0, sizeof pc);
        pc.budget[FG_TIER_HOST] = pl.pool;
        pc.flags = FG_PAGER_NO_CUDA | FG_PAGER_NO_MLOCK;
        fg_pager *pg;
        uint32_t file, id;
        ck_assert_int_eq(fg_pager_open(&pc, &pg, &err), FG_OK);
        ck_assert_int_eq(fg_pager_add_file(pg, NULL, 1, &file, &err), FG_OK);
        uint64_t off = 0;
        for (uint32_t u = 0; u < m.n_units; u++)
            for (uint32_t c = m.unit_first[u]; c < m.unit_first[u + 1]; c++, off += m.chunk[c]) {
                fg_pager_chunk_desc d = {file, off, m.chunk[c], m.chunk[c], 0, 0, c, {0},
                                         FG_CHUNK_WEIGHT, u, 1, m.chunk_rank[c]};
                ck_assert_int_eq(fg_pager_add_chunk(pg, &d, &id, &err), FG_OK);
            }
        uint32_t nkv = pl.ngb * hp.n_layers;
        for (uint32_t i = 0; i < nkv + pl.ngb; i++) {
            uint64_t len = i < nkv ? pl.kv_chunk : pl.act_chunk;
            fg_pager_chunk_desc d = {file, off, len, len, 0, 0, i, {0},
                                     i < nkv ? FG_CHUNK_KV : FG_CHUNK_ACT, i, 1};
            ck_assert_int_eq(fg_pager_add_chunk(pg, &d, &id, &err), FG_OK);
            off += len;
        }
        ck_assert_msg(fg_pager_place(pg, &pl.frac, &err) == FG_OK, "the plan passed, the pager "
                      "refused: %s", err.msg);
        uint64_t homed[3] = {0, 0, 0};
        for (uint32_t c = 0; c < fg_pager_chunk_count(pg); c++) {
            fg_pager_chunk_desc d;
            ck_assert_int_eq(fg_pager_chunk(pg, c, &d), FG_OK);
            if (fg_pager_home(pg, c) == FG_TIER_HOST)
                homed[d.kind == FG_CHUNK_WEIGHT ? 0 : d.kind == FG_CHUNK_KV ? 1 : 2] += d.padded;
        }
        for (int k = 0; k < 3; k++)
            ck_assert_uint_eq(homed[k], pl.homed[k]);
        fg_pager_close(pg);
    }
    ck_assert_int_gt(accepted, 20);
    ck_assert_int_gt(refused, 5);
}
END_TEST

/* With a GPU (gpu_budget): the budget is the staging room plus the pager's DEVICE pool; each
 * kind's bytes are split GPU + RAM + disk; the default puts weights on the GPU first and no
 * more than the pool holds (the pager's midpoint rule included); GPU data leaves the RAM pool;
 * a budget below the staging room is refused naming --gpu-budget. */
START_TEST(gpu_share_of_the_plan)
{
    uint64_t s = 4242;
    fg_hparams hp;
    fg_plan_unit units[2 * 6 + 2];
    int on_gpu = 0, split = 0, refused = 0;
    for (int trial = 0; trial < 500; trial++) {
        fg_plan_model m;
        random_model(&s, &hp, units, &m);
        fg_policy p = fg_policy_default();
        p.gbs = 1 + (uint32_t)(rnd(&s) % 8);
        p.ngb = 1 + (uint32_t)(rnd(&s) % 4);
        p.gpu_budget = (1u << 20) + rnd(&s) % ((uint64_t)256 << 20);
        fg_plan a, cpu;
        fg_err err;
        int rc = fg_plan_make(&m, &p, 64, 0, &a, &err);
        if (rc) {
            ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
            ck_assert_ptr_nonnull(strstr(err.msg, "--gpu-budget"));
            refused++;
            continue;
        }
        check_sums(&a);
        on_gpu += a.frac.w[0] > 0;
        split += a.frac.w[0] > 0 && a.frac.w[0] < 1;
        ck_assert_uint_le(a.dev_reserve + a.dev_pool, p.gpu_budget);
        ck_assert(a.frac.w[0] >= 0 && a.frac.w[0] <= 1);
        /* what the default homes on the GPU, counted as the pager places it (its midpoint
         * rule), fits the pool */
        ck_assert_uint_le(a.dev_homed[0] + a.dev_homed[1] + a.dev_homed[2], a.dev_pool);
        uint64_t total = m.weights;
        ck_assert_uint_le(a.dev_homed[0] + a.homed[0] + a.on_disk[0], total);
        ck_assert_uint_ge(a.dev_homed[0] + a.homed[0] + a.on_disk[0] + 2, total);
        fg_policy q = p;
        q.gpu_budget = 0;
        ck_assert_int_eq(fg_plan_make(&m, &q, 64, 0, &cpu, &err), FG_OK);
        ck_assert_uint_le(a.pool, cpu.pool); /* the GPU's share leaves the RAM pool */
        if (a.frac.w[0] > 0)
            ck_assert_uint_lt(a.homed[0], cpu.homed[0]);
    }
    ck_assert_msg(on_gpu > 50 && split > 5 && refused > 5, "%d on the GPU, %d split, %d refused",
                  on_gpu, split, refused);
    /* --percent's GPU fractions with a GPU */
    fg_plan_model m;
    random_model(&s, &hp, units, &m);
    fg_policy p = fg_policy_default();
    p.gbs = p.ngb = 1;
    p.have_fractions = 1;
    p.frac = (fg_pager_policy){{1, 0, 0}, {0.5, 0.5, 0}, {1, 0, 0}};
    p.gpu_budget = (uint64_t)4 << 30;
    fg_plan a;
    fg_err err;
    ck_assert_int_eq(fg_plan_make(&m, &p, 64, 0, &a, &err), FG_OK);
    ck_assert_uint_eq(a.homed[0], 0);
    ck_assert_uint_eq(a.dev_homed[2], (uint64_t)a.ngb * a.act_chunk);
    p.gpu_budget = 4096;
    ck_assert_int_eq(fg_plan_make(&m, &p, 64, 0, &a, &err), FG_ERR_NO_SPACE);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, plans_add_up_and_fit_their_budgets);
    tcase_add_test(tc, refusals_name_a_budget_that_fits);
    tcase_add_test(tc, default_placement_rule);
    tcase_add_test(tc, placements_the_pager_accepts);
    tcase_add_test(tc, gpu_share_of_the_plan);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
