/* test_policy.c - the policy search (policy/policy_search.h): the GLPK wrapper on LPs whose
 * optimum is known; the search's answers fit every budget (a property over random model
 * shapes and budgets, checked with fg_plan_make and the pager's placement rule) and a refusal
 * names a budget that does fit; the search's model view of a real store gives the engine's own
 * plan, and the engine opens under the chosen policy; calibration files round-trip and a file
 * of another version or machine is refused; a quick measurement gives positive rates.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "engine.h"
#include "policy_search.h"
#include "testutil.h"

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A calibration with figures of the order this kind of machine measures. */
static fg_calib calib_fixed(void)
{
    fg_calib c;
    memset(&c, 0, sizeof c);
    c.version = FG_CALIB_VERSION;
    fg_calib_machine(c.machine, sizeof c.machine);
    c.threads = 2;
    c.disk_read = 800e6, c.disk_write = 500e6;
    c.dec_f16 = 6e9, c.dec_q4 = 5e9;
    for (int i = 0; i < FG_CALIB_NM; i++) {
        c.m[i] = 1u << i;
        c.gflops[i] = 4.0 * (i + 1);
        c.gflops_i8[i] = 7.0 * (i + 1);
        c.gflops_bf16[i] = 6.0 * (i + 1);
    }
    c.attn_s = 2e-9, c.attn_q4_s = 3e-9, c.overlap = 0.5;
    return c;
}

/* A device calibration of this order (the simulated device's rates matter not here: bytes). */
static fg_calib_dev calib_dev_fixed(void)
{
    fg_calib_dev d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "sim");
    d.up = d.down = 10e9;
    for (int i = 0; i < FG_CALIB_NM; i++)
        d.m[i] = 1u << i, d.gflops[i] = 50.0 * (i + 1);
    d.attn_s = 1e-10, d.attn_q4_s = 1.5e-10, d.overlap = 0.8;
    return d;
}

/* ---- the LP wrapper ---- */

START_TEST(lp_known_optimum)
{
    /* max x + y s.t. x + 2y <= 4, 3x + y <= 6: x = 8/5, y = 6/5 */
    double c[2] = {-1, -1}, A[4] = {1, 2, 3, 1}, rlo[2] = {-HUGE_VAL, -HUGE_VAL}, rhi[2] = {4, 6};
    double lo[2] = {0, 0}, hi[2] = {HUGE_VAL, HUGE_VAL}, x[2], obj;
    fg_err err;
    ck_assert_int_eq(fg_lp_solve(2, 2, c, A, rlo, rhi, lo, hi, x, &obj, &err), FG_OK);
    ck_assert(fabs(x[0] - 1.6) < 1e-9 && fabs(x[1] - 1.2) < 1e-9 && fabs(obj + 2.8) < 1e-9);
    /* min max(2, 3a) as T >= 2 (bound), T - 3a >= 0, with a + b = 1, a >= 0.5 (the shape of
     * the search's rows): a = 0.5, b = 0.5, T = 2 */
    double c2[3] = {1, 0, 0}, A2[6] = {1, -3, 0, 0, 1, 1}, rlo2[2] = {0, 1};
    double rhi2[2] = {HUGE_VAL, 1};
    double lo2[3] = {2, 0.5, 0}, hi2[3] = {HUGE_VAL, 1, 1}, x2[3];
    ck_assert_int_eq(fg_lp_solve(3, 2, c2, A2, rlo2, rhi2, lo2, hi2, x2, &obj, &err), FG_OK);
    ck_assert(fabs(x2[0] - 2) < 1e-9 && fabs(x2[1] - 0.5) < 1e-9 && fabs(obj - 2) < 1e-9);
    /* a fixed variable and no rows */
    double c3[1] = {5}, lo3[1] = {0.25}, hi3[1] = {0.25}, x3[1];
    ck_assert_int_eq(fg_lp_solve(1, 0, c3, NULL, NULL, NULL, lo3, hi3, x3, &obj, &err), FG_OK);
    ck_assert(fabs(x3[0] - 0.25) < 1e-12 && fabs(obj - 1.25) < 1e-12);
}
END_TEST

START_TEST(lp_refusals)
{
    double c[1] = {1}, A[1] = {1}, rlo[1] = {2}, rhi[1] = {HUGE_VAL}, lo[1] = {0}, hi[1] = {1};
    double x[1], obj;
    fg_err err;
    ck_assert_int_eq(fg_lp_solve(1, 1, c, A, rlo, rhi, lo, hi, x, &obj, &err), FG_ERR_NO_SPACE);
    double cu[1] = {-1}, hu[1] = {HUGE_VAL}, rl[1] = {0};
    ck_assert_int_eq(fg_lp_solve(1, 1, cu, A, rl, rhi, lo, hu, x, &obj, &err),
                     FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "unbounded"));
    double bad_lo[1] = {2};
    ck_assert_int_eq(fg_lp_solve(1, 1, c, A, rl, rhi, bad_lo, hi, x, &obj, &err),
                     FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_lp_solve(0, 0, c, A, rl, rhi, lo, hi, x, &obj, &err), FG_ERR_INVALID_ARG);
}
END_TEST

/* ---- the search over random shapes ---- */

typedef struct rmodel {
    fg_policy_model m;
    fg_plan_unit units[64];
    uint64_t chunk[4096];
    uint32_t first[65];
} rmodel;

static void json_model(const char *json, int q4, rmodel *r);

/* A random decoder (OPT or Llama shapes) stored in F16 or Q4 chunks of <= 4 MiB, described as
 * model_view.c describes a store. */
static void random_model(uint64_t *s, rmodel *r)
{
    char json[1024];
    uint32_t heads = 1u << (rnd(s) % 5), hd = 16u << (rnd(s) % 3), kv = heads >> (rnd(s) % 2);
    uint32_t hidden = heads * hd, layers = 1 + rnd(s) % 6, ffn = hidden * (2 + rnd(s) % 3);
    uint32_t vocab = 256 + rnd(s) % 4000;
    int q4 = rnd(s) % 2;
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
    json_model(json, q4, r);
}

/* The model of config.json text `json`, stored in F16 (q4 0) or Q4 chunks of <= 4 MiB. */
static void json_model(const char *json, int q4, rmodel *r)
{
    memset(r, 0, sizeof *r);
    fg_err err;
    ck_assert_msg(fg_model_config_parse(json, strlen(json), "t", &r->m.hp, &err) == FG_OK, "%s",
                  err.msg);
    uint32_t n = fg_model_n_units(&r->m.hp), k = 0;
    ck_assert_uint_le(n, 64);
    uint64_t weights = 0, max_floats = 0;
    for (uint32_t u = 0; u < n; u++) {
        fg_tensor_spec spec[FG_UNIT_MAX_TENSORS];
        uint32_t nt = fg_model_unit_tensors(&r->m.hp, u, spec);
        r->first[u] = k;
        for (uint32_t i = 0; i < nt; i++) {
            uint64_t cols = spec[i].n_dims > 1 ? spec[i].dims[1] : 1, rows = spec[i].dims[0];
            double bpv = q4 && spec[i].n_dims > 1 ? 0.5625 : 2;
            uint64_t per = (uint64_t)((4u << 20) / (cols * bpv));
            per = per ? per : 1;
            max_floats = per * cols > max_floats ? per * cols : max_floats;
            if (spec[i].fallback[0])
                continue; /* tied: the embedding's bytes */
            uint64_t bytes = 0, stream = 0;
            for (uint64_t r0 = 0; r0 < rows; r0 += per) {
                uint64_t nr = rows - r0 < per ? rows - r0 : per;
                uint64_t c = ((uint64_t)(nr * cols * bpv) + 4095) & ~4095ull;
                ck_assert_uint_lt(k, 4096);
                r->chunk[k++] = c;
                bytes += c;
                stream = c > stream ? c : stream;
            }
            r->units[u].stored += bytes;
            weights += bytes;
            if (spec[i].access == FG_ACCESS_SMALL || spec[i].access == FG_ACCESS_LINEAR)
                r->units[u].resident += bytes;
            else if (stream > r->units[u].stream_chunk)
                r->units[u].stream_chunk = stream;
            if (spec[i].access == FG_ACCESS_SMALL)
                r->units[u].small_floats += rows * cols;
            if (spec[i].access == FG_ACCESS_LINEAR || spec[i].access == FG_ACCESS_STREAM)
                r->m.linear_floats += rows * cols;
        }
    }
    r->first[n] = k;
    r->m.pm = (fg_plan_model){&r->m.hp, n, r->units, weights, max_floats, r->chunk, r->first};
    r->m.codec = q4 ? FG_CODEC_Q4 : FG_CODEC_F16;
    r->m.all_q4 = q4;
    fg_policy_sweep_bytes(&r->m, 0, &r->m.sweep);
}

/* What the pager and the engine will hold under p within budget (and the GPU's, and the
 * offload dir's). */
static void check_fits(const rmodel *r, const fg_policy *p, const fg_policy_job *job)
{
    fg_plan pl;
    fg_err err;
    uint32_t ctx = job->prompt_len + job->gen_len;
    ctx = job->max_ctx > ctx ? job->max_ctx : ctx; /* what the engine sizes the cache for */
    ck_assert_msg(fg_plan_make(&r->m.pm, p, ctx, job->ram_budget, &pl, &err) == FG_OK, "%s",
                  err.msg);
    ck_assert_uint_le(pl.total_host, job->ram_budget);
    ck_assert_uint_le(pl.homed[0] + pl.homed[1] + pl.homed[2] + pl.window, pl.pool);
    /* the pager's own placement: weights per unit by its midpoint rule, each KV and activation
     * chunk whole */
    double g = p->frac.w[0];
    uint64_t kv = pl.dev_homed[1] + pl.homed[1] + pl.on_disk[1];
    uint64_t act = pl.dev_homed[2] + pl.homed[2] + pl.on_disk[2];
    uint64_t dev = fg_policy_weights_homed(&r->m, g) + (p->frac.c[0] > 0.5 ? kv : 0) +
                   (p->frac.h[0] > 0.5 ? act : 0);
    uint64_t real = fg_policy_weights_homed(&r->m, g + p->frac.w[1]) -
                    fg_policy_weights_homed(&r->m, g) +
                    (p->frac.c[0] <= 0.5 && p->frac.c[0] + p->frac.c[1] > 0.5 ? kv : 0) +
                    (p->frac.h[0] <= 0.5 && p->frac.h[0] + p->frac.h[1] > 0.5 ? act : 0);
    uint64_t disk = (p->frac.c[0] + p->frac.c[1] <= 0.5 ? kv : 0) +
                    (p->frac.h[0] + p->frac.h[1] <= 0.5 ? act : 0);
    ck_assert_uint_le(real + pl.window, pl.pool);
    ck_assert_uint_le(dev, pl.dev_pool);
    ck_assert(!job->disk_free || disk <= job->disk_free);
    if (!job->dev)
        ck_assert(p->frac.w[0] == 0 && p->frac.c[0] == 0 && p->frac.h[0] == 0);
    else
        ck_assert(pl.dev_reserve + pl.dev_pool <= p->gpu_budget);
    ck_assert(p->have_fractions && p->gbs >= 1 && p->ngb >= 1);
    ck_assert(!job->max_seqs || (uint64_t)p->gbs * p->ngb <= job->max_seqs);
    ck_assert_int_eq(p->compress_weight, r->m.all_q4);
}

/* _i >= 3: with a device (the GPU's budget random too). The offload dir's room (none, or from
 * nothing to more than a cache) and the context the engine sizes for (the job's, or more) are
 * random too. A refusal names the budget that holds no block and the least that would; with
 * that much the search answers. */
START_TEST(search_fits_every_budget)
{
    fg_calib c = calib_fixed();
    fg_calib_dev d = calib_dev_fixed();
    uint64_t s = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    static rmodel r;
    int found = 0, refused = 0, device = _i >= 3, on_gpu = 0, disk_refused = 0;
    for (int trial = 0; trial < 40; trial++) {
        random_model(&s, &r);
        fg_policy base = fg_policy_default(), out;
        fg_policy_job job = {1 + (uint32_t)(rnd(&s) % 64), 1 + (uint32_t)(rnd(&s) % 16),
                             (uint32_t)(rnd(&s) % 3 ? 0 : 1 + rnd(&s) % 40), 0,
                             (int)(rnd(&s) % 3) - 1, 0, device ? &d : NULL};
        if (device)
            base.gpu_budget = (uint64_t)((double)(rnd(&s) % 1000) / 500.0 *
                                         (double)r.m.pm.weights) + (rnd(&s) % 64) * 65536;
        /* budgets from far too small to more than everything */
        double frac = (double)(rnd(&s) % 1000) / 500.0;
        job.ram_budget = (uint64_t)(frac * (double)r.m.pm.weights) + (rnd(&s) % 64) * 65536;
        if (rnd(&s) % 2)
            job.disk_free = 1 + (r.m.pm.weights >> (rnd(&s) % 16));
        job.disk_dir = "/offload";
        job.ram_measured = rnd(&s) % 4 == 0; /* no --ram-budget: the RAM available */
        if (rnd(&s) % 3 == 0)
            job.max_ctx = job.prompt_len + job.gen_len + (uint32_t)(rnd(&s) % 200);
        fg_prediction pred;
        fg_search_stats st;
        fg_err err;
        int rc = fg_policy_search(&c, &r.m, &base, &job, &out, &pred, &st, &err);
        if (rc == FG_OK) {
            found++;
            on_gpu += out.frac.w[0] > 0;
            check_fits(&r, &out, &job);
            ck_assert(pred.tok_s > 0 && pred.prefill_s > 0 && isfinite(pred.decode_s));
            ck_assert(job.cache_choice < 0 || out.compress_cache == job.cache_choice);
            continue;
        }
        refused++;
        /* each refusal names one budget and the least that fits; raised to it, the search
         * answers or names another */
        for (int retry = 0; rc != FG_OK; retry++) {
            ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
            ck_assert_int_lt(retry, 6);
            if (strstr(err.msg, "--offload-dir /offload")) {
                ck_assert_uint_gt(st.min_disk, job.disk_free);
                job.disk_free = st.min_disk + (1u << 20);
                disk_refused++;
            } else if (strstr(err.msg, "--gpu-budget")) { /* the device's holds no block */
                ck_assert(device && st.min_gpu > base.gpu_budget);
                base.gpu_budget = st.min_gpu;
            } else {
                ck_assert_msg(job.ram_measured ? strstr(err.msg, "of RAM available") &&
                                                     !strstr(err.msg, "--ram-budget")
                                               : strstr(err.msg, "--ram-budget") != NULL,
                              "%s", err.msg);
                ck_assert_uint_gt(st.min_budget, job.ram_budget);
                job.ram_budget = (st.min_budget + (1u << 20) - 1) & ~((1ull << 20) - 1);
            }
            rc = fg_policy_search(&c, &r.m, &base, &job, &out, &pred, &st, &err);
        }
        check_fits(&r, &out, &job);
    }
    ck_assert_int_gt(found, 0);
    ck_assert_int_gt(found + refused, 0);
    ck_assert(!device || on_gpu > 0);
    printf("search_fits_every_budget %d: %d answered, %d refused, %d for the offload dir\n", _i,
           found, refused, disk_refused);
}
END_TEST

/* The search covers the hand grid bench/policy.sh runs: under the model, no fixed policy the
 * plan accepts (blocks 2x1 ... 8x1, 4x2, 2x4; weights 0..100% in RAM; the cache and
 * activations in RAM or on disk) predicts more tokens per second than the search's answer
 * (beyond the 2% within which the search prefers fewer batches). _i >= 3: with a device, whose
 * grid adds the weights' GPU share and the GPU tier for the cache and activations. */
START_TEST(search_beats_the_grid)
{
    fg_calib c = calib_fixed();
    fg_calib_dev d = calib_dev_fixed();
    int device = _i >= 3;
    uint64_t s = 777 + (uint64_t)_i;
    static rmodel r;
    static const uint32_t blocks[][2] = {{2, 1}, {8, 1}, {4, 2}, {2, 4}, {4, 1}, {1, 8}};
    int compared = 0;
    for (int trial = 0; trial < 12; trial++) {
        random_model(&s, &r);
        fg_policy base = fg_policy_default(), out;
        fg_policy_job job = {8 + (uint32_t)(rnd(&s) % 32), 2 + (uint32_t)(rnd(&s) % 8), 8, 0, 0,
                             0, device ? &d : NULL};
        double gshare = 0.3 + (double)(rnd(&s) % 1000) / 1000.0;
        if (device)
            base.gpu_budget = UINT64_MAX / 4; /* for the plans of the RAM budget's range */
        fg_prediction best;
        fg_err err;
        /* budgets between what a 2x1 block needs all on disk and everything in RAM */
        fg_policy lo = base, hi = base;
        lo.gbs = 2, lo.ngb = 1, lo.have_fractions = hi.have_fractions = 1;
        lo.frac = (fg_pager_policy){{0, 0, 1}, {0, 0, 1}, {0, 0, 1}};
        hi.gbs = 8, hi.ngb = 1;
        hi.frac = (fg_pager_policy){{0, 1, 0}, {0, 1, 0}, {0, 1, 0}};
        fg_plan pl_lo, pl_hi;
        ck_assert_int_eq(fg_plan_make(&r.m.pm, &lo, job.prompt_len + job.gen_len, 0, &pl_lo,
                                      &err), FG_OK);
        ck_assert_int_eq(fg_plan_make(&r.m.pm, &hi, job.prompt_len + job.gen_len, 0, &pl_hi,
                                      &err), FG_OK);
        double u = (double)(rnd(&s) % 1000) / 1000.0;
        job.ram_budget = pl_lo.total_host + (uint64_t)(u * (double)(pl_hi.total_host -
                                                                     pl_lo.total_host));
        if (device) /* the largest block's device buffers and a third to all of the weights */
            base.gpu_budget = pl_hi.dev_reserve + (1u << 20) +
                              (uint64_t)(gshare * (double)r.m.pm.weights);
        if (fg_policy_search(&c, &r.m, &base, &job, &out, &best, NULL, &err))
            continue;
        uint32_t ctx = job.prompt_len + job.gen_len;
        int tiers = device ? 3 : 2;
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
            for (int g = 0; g <= (device ? 10 : 0); g++)
                for (int w = 0; w <= 20; w++)
                    for (int tier = 0; tier < tiers * tiers; tier++) {
                        fg_policy p = base;
                        p.gbs = blocks[b][0], p.ngb = blocks[b][1], p.have_fractions = 1;
                        int ct = tier % tiers + !device, ht = tier / tiers + !device;
                        double wg = g / 10.0, wr = (1 - wg) * w / 20.0;
                        double cg = ct == 0, cc = ct == 1, hg = ht == 0, hc = ht == 1;
                        p.frac = (fg_pager_policy){{wg, wr, 1 - wg - wr < 0 ? 0 : 1 - wg - wr},
                                                   {cg, cc, 1 - cg - cc}, {hg, hc, 1 - hg - hc}};
                        fg_plan pl;
                        if (fg_plan_make(&r.m.pm, &p, ctx, job.ram_budget, &pl, &err))
                            continue;
                        fg_prediction pr;
                        fg_policy_predict(&c, &r.m, &pl, &p, &job, &pr);
                        compared++;
                        ck_assert_msg(pr.tok_s <= best.tok_s * 1.021, "%ux%u w %.2f/%.2f c %d "
                                      "h %d predicts %.4g tok/s, the search's answer %.4g",
                                      p.gbs, p.ngb, wg, wr, ct, ht, pr.tok_s, best.tok_s);
                    }
    }
    ck_assert_int_gt(compared, 50);
}
END_TEST

/* The bound (fg_policy_bound) is a floor under the cost model's own prediction for every block
 * and placement of the grid (_i >= 2: with a device); each phase is the greatest of its three
 * times; its FLOPs are the model's (every position through the Linear layers, the last of each
 * sequence through the head); with a flat GEMM table the compute time is the FLOPs at that rate. */
START_TEST(bound_is_below_the_prediction)
{
    fg_calib c = calib_fixed();
    fg_calib_dev d = calib_dev_fixed();
    int device = _i >= 2, flat = _i % 2;
    if (flat)
        for (int i = 0; i < FG_CALIB_NM; i++)
            c.gflops[i] = c.gflops_i8[i] = c.gflops_bf16[i] = 10.0, d.gflops[i] = 50.0;
    uint64_t s = 4646 + (uint64_t)_i;
    static rmodel r;
    static const uint32_t blocks[][2] = {{2, 1}, {8, 1}, {4, 2}, {1, 8}};
    int compared = 0;
    for (int trial = 0; trial < 6; trial++) {
        random_model(&s, &r);
        fg_policy_job job = {8 + (uint32_t)(rnd(&s) % 32), 2 + (uint32_t)(rnd(&s) % 8), 0, 0, 0,
                             0, device ? &d : NULL};
        const fg_hparams *hp = &r.m.hp;
        double fpt = fg_model_flops_per_token(hp), fh = 2.0 * hp->vocab_size * hp->embed_dim;
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
            for (int w = 0; w <= 4; w++)
                for (int tier = 0; tier < (device ? 9 : 4); tier++) {
                    fg_policy p = fg_policy_default();
                    p.gbs = blocks[b][0], p.ngb = blocks[b][1], p.have_fractions = 1;
                    p.gpu_budget = device ? UINT64_MAX / 4 : 0;
                    int tiers = device ? 3 : 2, ct = tier % tiers + !device;
                    int ht = tier / tiers + !device;
                    double wg = device ? w / 8.0 : 0, wr = (1 - wg) * (w % 3) / 2.0;
                    p.frac = (fg_pager_policy){{wg, wr, 1 - wg - wr}, {ct == 0, ct == 1, ct == 2},
                                               {ht == 0, ht == 1, ht == 2}};
                    fg_plan pl;
                    fg_err err;
                    if (fg_plan_make(&r.m.pm, &p, job.prompt_len + job.gen_len, 0, &pl, &err))
                        continue;
                    fg_prediction pr;
                    fg_bound bd;
                    fg_policy_predict(&c, &r.m, &pl, &p, &job, &pr);
                    fg_policy_bound(&c, &r.m, &pl, &p, &job, &bd);
                    compared++;
                    double t = pr.prefill_s + pr.decode_s, n = (double)p.gbs * p.ngb;
                    ck_assert_msg(bd.s > 0 && bd.s <= t * (1 + 1e-9), "%ux%u w %.2f/%.2f c %d h "
                                  "%d: bound %.6g s above the prediction %.6g s", p.gbs, p.ngb,
                                  wg, wr, ct, ht, bd.s, t);
                    ck_assert(fabs(bd.s - bd.ph[0].s - bd.ph[1].s) <= 1e-12 * bd.s);
                    ck_assert_uint_eq(bd.tokens, pr.tokens);
                    for (int k = 0; k < 2; k++) {
                        const fg_bound_phase *f = &bd.ph[k];
                        double hi = fmax(f->compute_s, fmax(f->link_s, f->disk_s));
                        ck_assert(f->s == hi && f->compute_s > 0);
                        ck_assert(device || (f->link_up == 0 && f->link_s == 0));
                    }
                    double fp = n * job.prompt_len * (fpt - fh) + n * fh;
                    double fd = (job.gen_len - 1) * n * fpt;
                    ck_assert(fabs(bd.ph[0].flops - fp) <= 1e-9 * fp);
                    ck_assert(fabs(bd.ph[1].flops - fd) <= 1e-9 * fd + 1e-9);
                    if (flat) {
                        double rate = device ? 50e9 : 10e9;
                        ck_assert(fabs(bd.ph[0].compute_s - fp / rate) <= 1e-9 * fp / rate);
                        ck_assert(fabs(bd.ph[0].rate - rate) <= 1e-6 * rate);
                    }
                }
    }
    ck_assert_int_gt(compared, 40);
}
END_TEST

/* MLA (DeepSeek-V2-Lite's config, cut down): the prefill's attention is priced at the width it
 * runs at, the expanded heads' ((qk_nope + qk_rope + v) / 2 a head: keys of 192 dims, values
 * of 128) with an f32 cache, the absorbed latent's (kv_lora_rank + qk_rope) with the 4-bit
 * cache, which stays absorbed; with FG_MLA_PREFILL=absorb's setting both are absorbed. The
 * decode's attention is absorbed. */
START_TEST(mla_prefill_priced_at_its_width)
{
    const char *cfg = "{\"model_type\":\"deepseek_v2\",\"vocab_size\":1000,\"hidden_size\":256,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":512,"
                      "\"moe_intermediate_size\":64,\"num_attention_heads\":16,"
                      "\"num_key_value_heads\":16,\"kv_lora_rank\":512,\"q_lora_rank\":null,"
                      "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,"
                      "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"n_shared_experts\":1,"
                      "\"first_k_dense_replace\":2,\"max_position_embeddings\":4096,"
                      "\"topk_method\":\"greedy\",\"n_group\":1,\"topk_group\":1}";
    static rmodel r;
    json_model(cfg, 0, &r);
    ck_assert(r.m.hp.mla);
    fg_calib c = calib_fixed();
    c.disk_read = c.disk_write = 1e18; /* the prefill is its compute */
    c.attn_s = c.attn_q4_s = 1e-6;     /* ... and that its attention */
    fg_policy p = fg_policy_default();
    p.gbs = 1, p.ngb = 1, p.have_fractions = 1;
    p.frac = (fg_pager_policy){{0, 1, 0}, {0, 1, 0}, {0, 1, 0}};
    fg_policy_job job = {256, 2, 1};
    fg_plan pl;
    fg_err err;
    ck_assert_int_eq(fg_plan_make(&r.m.pm, &p, 258, 0, &pl, &err), FG_OK);
    /* absorbed: scores over the 576-value rows, values the 512 latent ones (the pe dims are a
     * whole 4-bit group, so the 4-bit cache's too); expanded: 192-value keys, 128-value values */
    double pairs = 2.0 * 256 * 257 / 2, H = 16, wide = H * (576 + 512) / 2;
    double narrow = H * (192 + 128) / 2;
    fg_prediction f32, q4, absorb;
    fg_policy_predict(&c, &r.m, &pl, &p, &job, &f32);
    fg_policy pq = p;
    pq.compress_cache = 1;
    fg_policy_predict(&c, &r.m, &pl, &pq, &job, &q4);
    r.m.hp.mla_prefill = FG_MLA_PREFILL_ABSORB;
    fg_policy_predict(&c, &r.m, &pl, &p, &job, &absorb);
    /* the three differ by their attention alone, each pair x width x 1 us */
    double d = absorb.prefill_s - f32.prefill_s, want = pairs * (wide - narrow) * 1e-6;
    ck_assert_msg(fabs(d - want) <= 1e-6 * want, "absorbed - expanded prefill %.6g s, the "
                  "widths' difference %.6g s", d, want);
    ck_assert(fabs(q4.prefill_s - absorb.prefill_s) <= 1e-9 * absorb.prefill_s);
    ck_assert(fabs(absorb.decode_s - f32.decode_s) <= 1e-9 * f32.decode_s);
    /* a decode step attends absorbed: 2 layers x a context of 257 x the same width */
    fg_calib c0 = c;
    c0.attn_s = c0.attn_q4_s = 0;
    fg_prediction none;
    fg_policy_predict(&c0, &r.m, &pl, &p, &job, &none);
    d = f32.decode_s - none.decode_s, want = 2.0 * 257 * wide * 1e-6;
    ck_assert_msg(fabs(d - want) <= 1e-6 * want, "decode attention %.6g s, want %.6g s", d,
                  want);
}
END_TEST

/* attn_search: where the KV cache is off the GPU, the search puts attention on the CPU when
 * the link is slow and the CPU's attention fast (FlexGen's --cpu-cache-compute case), on the
 * device in the opposite case; without it the base policy's choice stays; searching both never
 * predicts less than either alone (beyond the search's 2% preference for fewer batches). */
START_TEST(search_places_attention)
{
    uint64_t s = 0x51ed2701u;
    static rmodel r;
    int cpu_picked = 0, dev_picked = 0;
    for (int trial = 0; trial < 12; trial++) {
        random_model(&s, &r);
        int slow_link = trial % 2;
        fg_calib c = calib_fixed();
        fg_calib_dev d = calib_dev_fixed();
        c.attn_s = c.attn_q4_s = slow_link ? 1e-13 : 1e-6;
        d.up = d.down = slow_link ? 1e7 : 1e13;
        fg_policy base = fg_policy_default(), out, fixed;
        base.gpu_budget = r.m.pm.weights / 4 + (1u << 20);
        fg_policy_job job = {16 + (uint32_t)(rnd(&s) % 32), 4 + (uint32_t)(rnd(&s) % 8), 0, 0,
                             0, 0, &d};
        job.attn_search = 1;
        fg_prediction pred, pf;
        fg_search_stats st;
        fg_err err;
        int rc = fg_policy_search(&c, &r.m, &base, &job, &out, &pred, &st, &err);
        if (rc == FG_ERR_NO_SPACE && st.min_gpu) { /* the device's least, and a quarter more */
            base.gpu_budget = st.min_gpu + st.min_gpu / 4;
            rc = fg_policy_search(&c, &r.m, &base, &job, &out, &pred, &st, &err);
        }
        ck_assert_msg(rc == FG_OK, "%s", err.msg);
        if (out.frac.c[0] < 0.5) {
            ck_assert_int_eq(out.cpu_attention, slow_link);
            cpu_picked += slow_link, dev_picked += !slow_link;
        }
        char line[256];
        fg_policy_describe(&out, line, sizeof line);
        ck_assert(out.frac.c[0] >= 0.5 || strstr(line, slow_link ? "attention on the CPU"
                                                                  : "attention on the GPU"));
        job.attn_search = 0;
        for (int ca = 0; ca < 2; ca++) {
            base.cpu_attention = ca;
            ck_assert_msg(fg_policy_search(&c, &r.m, &base, &job, &fixed, &pf, NULL, &err) ==
                          FG_OK, "%s", err.msg);
            ck_assert_int_eq(fixed.cpu_attention, ca);
            ck_assert_msg(pred.tok_s >= pf.tok_s * (1 - 0.021), "trial %d: searched %g tok/s, "
                          "attention %s alone %g", trial, pred.tok_s, ca ? "CPU" : "GPU",
                          pf.tok_s);
        }
    }
    ck_assert_int_gt(cpu_picked, 0);
    ck_assert_int_gt(dev_picked, 0);
}
END_TEST

START_TEST(cost_model_orders)
{
    fg_calib c = calib_fixed();
    uint64_t s = 12345;
    static rmodel r;
    random_model(&s, &r);
    fg_policy p = fg_policy_default();
    p.gbs = 4, p.ngb = 2, p.have_fractions = 1;
    fg_policy_job job = {32, 8, 0, 0, -1};
    fg_plan ram, disk;
    fg_err err;
    p.frac = (fg_pager_policy){{0, 1, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(fg_plan_make(&r.m.pm, &p, 40, 0, &ram, &err), FG_OK);
    fg_prediction a, b;
    fg_policy_predict(&c, &r.m, &ram, &p, &job, &a);
    fg_policy q = p;
    q.frac = (fg_pager_policy){{0, 0, 1}, {0, 0, 1}, {0, 0, 1}};
    ck_assert_int_eq(fg_plan_make(&r.m.pm, &q, 40, 0, &disk, &err), FG_OK);
    fg_policy_predict(&c, &r.m, &disk, &q, &job, &b);
    ck_assert(b.prefill_s > a.prefill_s);
    /* a decode step streams what is on disk unless the streaming room holds it all */
    uint64_t streamed = disk.on_disk[0] + disk.on_disk[1] + disk.on_disk[2];
    if (streamed > disk.pool)
        ck_assert(b.decode_s > a.decode_s && b.read_bytes > r.m.pm.weights);
    else
        ck_assert(b.decode_s == a.decode_s && b.read_bytes == r.m.pm.weights);
    ck_assert_double_eq_tol(a.io_decode_s, 0, 1e-12);
    ck_assert_uint_eq(a.tokens, 4 * 2 * 8);
    /* one sequence in the block: its tokens only, less compute */
    fg_policy_job one = job;
    one.max_seqs = 1;
    fg_prediction a1;
    fg_policy_predict(&c, &r.m, &ram, &p, &one, &a1);
    ck_assert_uint_eq(a1.tokens, 8);
    ck_assert(a1.compute_decode_s < a.compute_decode_s);
    /* without overlap a step is never shorter */
    q.overlap = 0;
    fg_prediction d;
    fg_policy_predict(&c, &r.m, &disk, &q, &job, &d);
    ck_assert(d.decode_s >= b.decode_s && d.prefill_s >= b.prefill_s);
    /* the pager's rule homes nothing at 0, everything at 1, more as the fraction grows */
    /* --compute int8 prices a q4_int8 model's Linear layers at the int8 curve, without the
     * decode to f32; any other model, or f32 compute, as before */
    fg_policy_job j8 = job;
    j8.int8 = 1;
    fg_prediction f32p, i8p;
    r.m.q4_int8 = 0;
    fg_policy_predict(&c, &r.m, &ram, &p, &j8, &i8p);
    ck_assert(i8p.prefill_s == a.prefill_s && i8p.decode_s == a.decode_s);
    r.m.q4_int8 = 1;
    fg_policy_predict(&c, &r.m, &ram, &p, &job, &f32p);
    ck_assert(f32p.prefill_s == a.prefill_s && f32p.decode_s == a.decode_s);
    fg_policy_predict(&c, &r.m, &ram, &p, &j8, &i8p);
    ck_assert(i8p.compute_decode_s < a.compute_decode_s && i8p.prefill_s < a.prefill_s);
    fg_calib same = c; /* the int8 curve equal to the f16 one: only the decode term differs */
    memcpy(same.gflops_i8, same.gflops, sizeof same.gflops);
    same.dec_q4 = same.dec_f16 = 1e9;
    fg_policy_predict(&same, &r.m, &ram, &p, &j8, &i8p);
    fg_policy_predict(&same, &r.m, &ram, &p, &job, &f32p);
    ck_assert_double_eq_tol(i8p.compute_decode_s, f32p.compute_decode_s,
                            1e-12 * f32p.compute_decode_s);
    r.m.q4_int8 = 0;
    /* --compute bf16 prices an F16/BF16 model's Linear layers at the bf16 curve; a Q4 model's
     * at the int8 one as int8 does (bf16 implies int8 for them); other models as before */
    fg_policy_job jb = job;
    jb.bf16 = 1;
    fg_prediction bp;
    int codec0 = r.m.codec;
    r.m.codec = FG_CODEC_F16;
    fg_policy_predict(&c, &r.m, &ram, &p, &jb, &bp);
    fg_policy_predict(&c, &r.m, &ram, &p, &job, &f32p);
    ck_assert(bp.prefill_s < f32p.prefill_s && bp.compute_decode_s < f32p.compute_decode_s);
    fg_calib flat = c; /* the bf16 curve equal to the f16 one: the same prediction */
    memcpy(flat.gflops_bf16, flat.gflops, sizeof flat.gflops);
    fg_policy_predict(&flat, &r.m, &ram, &p, &jb, &bp);
    fg_policy_predict(&flat, &r.m, &ram, &p, &job, &f32p);
    ck_assert(bp.prefill_s == f32p.prefill_s && bp.decode_s == f32p.decode_s);
    r.m.codec = FG_CODEC_F32;
    fg_policy_predict(&c, &r.m, &ram, &p, &jb, &bp);
    fg_policy_predict(&c, &r.m, &ram, &p, &job, &f32p);
    ck_assert(bp.prefill_s == f32p.prefill_s && bp.decode_s == f32p.decode_s);
    r.m.codec = codec0;
    /* on a device, the weights homed on the GPU go up once in the prefill: prefetched on the
     * copy stream while the spans before compute (hidden while computing dominates), or waited
     * for without --overlap (their link time added); the decode is the same either way */
    fg_calib_dev dv = calib_dev_fixed();
    dv.up = 1e9; /* 1 GB/s: the homed weights' upload is the larger part of the prefill */
    fg_policy_job jd = job;
    jd.dev = &dv;
    fg_policy g = p;
    g.gpu_budget = 4 * r.m.pm.weights + (256ull << 20);
    g.frac = (fg_pager_policy){{1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    fg_plan gpl;
    ck_assert_int_eq(fg_plan_make(&r.m.pm, &g, 40, 0, &gpl, &err), FG_OK);
    ck_assert_uint_gt(gpl.dev_homed[0], 0);
    fg_prediction on, off;
    fg_policy_predict(&c, &r.m, &gpl, &g, &jd, &on);
    g.overlap = 0;
    fg_policy_predict(&c, &r.m, &gpl, &g, &jd, &off);
    double wh = (double)gpl.dev_homed[0] / dv.up;
    ck_assert_msg(off.prefill_s > on.prefill_s && off.prefill_s - on.prefill_s <= wh * 1.0001,
                  "prefill %g s overlapped, %g s not, homed upload %g s", on.prefill_s,
                  off.prefill_s, wh);
    ck_assert_double_eq_tol(off.decode_s, on.decode_s, 1e-12 * on.decode_s);
    ck_assert_uint_eq(off.up_bytes, on.up_bytes);
    ck_assert_uint_ge(on.up_bytes, gpl.dev_homed[0]);
    ck_assert_uint_eq(fg_policy_weights_homed(&r.m, 0), 0);
    ck_assert_uint_eq(fg_policy_weights_homed(&r.m, 1), r.m.pm.weights);
    uint64_t prev = 0;
    for (int i = 1; i <= 20; i++) {
        uint64_t h = fg_policy_weights_homed(&r.m, i / 20.0);
        ck_assert_uint_ge(h, prev);
        prev = h;
    }
}
END_TEST

/* ---- a real store: the view equals the engine's, the engine opens under the answer ---- */

/* Engine options for a test run: policy p, contexts of ctx, one thread, the offload dir the
 * test's temp dir. */
static fg_engine_opts test_opts(const fg_policy *p, uint32_t ctx)
{
    fg_engine_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.policy = *p;
    eo.max_ctx = ctx;
    eo.threads = 1;
    eo.offload_dir = tu_path("");
    return eo;
}

/* The tiny OPT fixture converted into dir/NAME (F16, or bits 4/8 with groups along axis): the
 * open store into *st. */
static void tiny_store_as(fg_store **st, fg_model **md, const char *name, int bits, int axis)
{
    char src[4096], tok[4096];
    snprintf(src, sizeof src, "%s/opt/opt-tiny-safetensors", FG_FIXTURE_DIR);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    const char *dst = tu_path(name);
    fg_convert_opts co = {bits, 64, axis, tok, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &co, &rep, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_store_open(dst, FG_STORE_RDONLY, NULL, st, &err), FG_OK);
    ck_assert_msg(fg_model_open(*st, md, &err) == FG_OK, "%s", err.msg);
}

static void tiny_store(fg_store **st, fg_model **md) { tiny_store_as(st, md, "store", 0, -1); }

START_TEST(store_view_matches_engine)
{
    tu_tmpdir_create();
    fg_store *st;
    fg_model *md;
    fg_err err;
    tiny_store(&st, &md);
    fg_policy_model m;
    ck_assert_msg(fg_policy_model_build(md, &m, &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_gt(m.linear_floats, 0);
    ck_assert_uint_eq(fg_policy_weights_homed(&m, 1), m.pm.weights);
    ck_assert(!m.q4_int8 && m.codec == FG_CODEC_F16);
    /* the int8 kernels' weights: Q4 grouped along the input axis (not the output axis, not Q8) */
    static const int kinds[3][3] = {{4, 1, 1}, {4, 0, 0}, {8, 1, 0}}; /* bits, axis, q4_int8 */
    for (int i = 0; i < 3; i++) {
        fg_store *qs;
        fg_model *qmd;
        char name[32];
        snprintf(name, sizeof name, "store-q%d-%d", kinds[i][0], kinds[i][1]);
        tiny_store_as(&qs, &qmd, name, kinds[i][0], kinds[i][1]);
        fg_policy_model qm;
        ck_assert_msg(fg_policy_model_build(qmd, &qm, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(qm.q4_int8 == kinds[i][2], "%s: q4_int8 %d", name, qm.q4_int8);
        fg_policy_model_free(&qm);
        fg_model_close(qmd);
        fg_store_close(qs);
    }
    fg_calib c = calib_fixed();
    fg_policy_job job = {8, 4, 6, 0, -1};
    fg_plan all;
    fg_policy base = fg_policy_default(), out;
    ck_assert_int_eq(fg_plan_make(&m.pm, &base, 12, 0, &all, &err), FG_OK);
    /* budgets from the least that fits to everything in RAM */
    for (int i = 0; i < 4; i++) {
        fg_search_stats ss;
        fg_prediction pred;
        job.ram_budget = 1ull << 40;
        ck_assert_int_eq(fg_policy_search(&c, &m, &base, &job, &out, &pred, &ss, &err), FG_OK);
        job.ram_budget = ss.min_budget + (uint64_t)i * (all.total_host / 3);
        ck_assert_msg(fg_policy_search(&c, &m, &base, &job, &out, &pred, &ss, &err) == FG_OK,
                      "%s", err.msg);
        fg_engine_opts eo = test_opts(&out, 12);
        eo.ram_budget = job.ram_budget;
        fg_engine *e;
        ck_assert_msg(fg_engine_open(md, &eo, &e, &err) == FG_OK, "budget %llu: %s",
                      (unsigned long long)job.ram_budget, err.msg);
        fg_plan mine;
        ck_assert_int_eq(fg_plan_make(&m.pm, &out, 12, job.ram_budget, &mine, &err), FG_OK);
        ck_assert_int_eq(memcmp(&mine, fg_engine_plan(e), sizeof mine), 0);
        ck_assert_int_eq(fg_engine_close(e, &err), FG_OK);
    }
    fg_policy_model_free(&m);
    fg_model_close(md);
    fg_store_close(st);
    tu_tmpdir_remove();
}
END_TEST

/* Generate G tokens for 4 prompts of P <= 8 ids (fixed ones, or drawn from *ids when given)
 * as one block, and read the engine's counters into *es. */
static void four_prompts(fg_engine *e, uint32_t P, uint32_t G, uint64_t *ids,
                         fg_engine_stats *es)
{
    int32_t prompt[4][8], out[4][8];
    fg_gen_seq seqs[4];
    uint32_t vocab = fg_engine_hparams(e)->vocab_size;
    for (int k = 0; k < 4; k++) {
        for (uint32_t t = 0; t < P; t++)
            prompt[k][t] = ids ? (int32_t)(rnd(ids) % vocab) : (int32_t)(5 + 7 * k + 3 * t);
        seqs[k] = (fg_gen_seq){prompt[k], P, G, {0, 0, 1, 0}, (uint64_t)k, out[k], 0, 0};
    }
    fg_gen_stats gs;
    fg_err err;
    ck_assert_msg(fg_engine_generate(e, seqs, 4, NULL, &gs, &err) == FG_OK, "%s", err.msg);
    fg_engine_stats_get(e, es);
}

/* ---- the predicted disk traffic is the pager's ---- */

/* Runs a block under placements that put weights, the KV cache and the activations on disk (in
 * RAM budgets that keep the streaming room small, so every step streams) and compares the
 * bytes the model predicts with the pager's own counters of bytes read and written. */
START_TEST(predicted_io_is_the_pagers)
{
    tu_tmpdir_create();
    fg_store *st;
    fg_model *md;
    tiny_store(&st, &md);
    fg_policy_model m;
    fg_err err;
    ck_assert_msg(fg_policy_model_build(md, &m, &err) == FG_OK, "%s", err.msg);
    fg_calib c = calib_fixed();
    const uint32_t P = 8, G = 5, ctx = P + G;
    static const double place[][3] = {{0, 1, 1}, {0.5, 1, 1}, {0, 0, 1}, {0.5, 0, 0}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof place / sizeof place[0]; i++) {
        fg_policy p = fg_policy_default();
        p.gbs = 2, p.ngb = 2, p.have_fractions = 1;
        p.frac = (fg_pager_policy){{0, place[i][0], 1 - place[i][0]},
                                   {0, place[i][1], 1 - place[i][1]},
                                   {0, place[i][2], 1 - place[i][2]}};
        fg_plan least;
        fg_policy q = p;
        q.frac = (fg_pager_policy){{0, 0, 1}, {0, 0, 1}, {0, 0, 1}};
        ck_assert_int_eq(fg_plan_make(&m.pm, &q, ctx, 0, &least, &err), FG_OK);
        fg_engine_opts eo = test_opts(&p, ctx);
        fg_plan pl;
        /* the smallest budget this placement fits (steps of 4 KiB) */
        for (eo.ram_budget = least.fixed + least.window - (FG_PLAN_AHEAD - 1) * least.max_span;
             fg_plan_make(&m.pm, &p, ctx, eo.ram_budget, &pl, &err); eo.ram_budget += 4096)
            ;
        fg_engine *e;
        ck_assert_msg(fg_engine_open(md, &eo, &e, &err) == FG_OK, "%s", err.msg);
        fg_engine_stats es;
        four_prompts(e, P, G, NULL, &es);
        fg_policy_job job = {P, G, 4, eo.ram_budget, -1};
        fg_prediction pred;
        fg_policy_predict(&c, &m, fg_engine_plan(e), &p, &job, &pred);
        uint64_t rd = es.pager.moved[FG_TIER_DISK][FG_TIER_HOST];
        uint64_t wr = es.pager.moved[FG_TIER_HOST][FG_TIER_DISK];
        fprintf(stderr, "placement w %.1f c %.0f h %.0f, budget %llu: read %llu predicted %llu, "
                "written %llu predicted %llu\n", place[i][0], place[i][1], place[i][2],
                (unsigned long long)eo.ram_budget, (unsigned long long)rd,
                (unsigned long long)pred.read_bytes, (unsigned long long)wr,
                (unsigned long long)pred.write_bytes);
        /* reads within 5% (and a few chunks); writes: the last chunks still in the pool at the
         * end are never written back, so the model may count a few more. Under load the
         * write-behind lags: a KV or activation chunk still in the pool when it is needed
         * again, written back or not, is not read back, so reads may fall short of the
         * prediction by up to the bytes the model writes (never exceed it; weights are never
         * written, so a weights-only placement keeps the 5% bound both ways). Seen under load
         * 7 on 2 cores: w 0.5 c 0 h 0 read 552960 of 643071 predicted, wrote 155648 of 172032:
         * 74 KiB more than the unwritten 16 KiB, the old lower bound. */
        ck_assert((double)rd <= (double)pred.read_bytes + 0.05 * (double)rd + 16384);
        ck_assert((double)rd >= (double)pred.read_bytes - (double)pred.write_bytes -
                                    0.05 * (double)rd - 16384);
        ck_assert(wr <= pred.write_bytes + 16384);
        ck_assert((double)pred.write_bytes <= 1.3 * (double)wr + 16384);
        ck_assert_int_eq(fg_engine_close(e, &err), FG_OK);
    }
    fg_policy_model_free(&m);
    fg_model_close(md);
    fg_store_close(st);
    tu_tmpdir_remove();
}
END_TEST

/* A mixture of experts (mixtral-tiny: 4 experts, top 2) with its weights on disk, one
 * sequence: a decode step reads only the experts its token chose (engine.c), so the model
 * predicts (G - 1) x half the experts' bytes fewer than with --experts all (the prefill's 8
 * tokens choose nearly all: prefetched whole either way), and the pager reads no more than
 * predicted (the streaming room, sized for a whole layer, keeps some chosen experts from step
 * to step: fewer). */
START_TEST(moe_reads_chosen_experts)
{
    tu_tmpdir_create();
    char src[4096];
    snprintf(src, sizeof src, "%s/llama/mixtral-tiny-bf16", FG_FIXTURE_DIR);
    const char *dst = tu_path("moe");
    fg_convert_opts co = {0, 64, -1, NULL, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &co, &rep, &err) == FG_OK, "%s", err.msg);
    fg_store *st;
    fg_model *md;
    ck_assert_int_eq(fg_store_open(dst, FG_STORE_RDONLY, NULL, &st, &err), FG_OK);
    ck_assert_msg(fg_model_open(st, &md, &err) == FG_OK, "%s", err.msg);
    fg_policy_model m;
    ck_assert_msg(fg_policy_model_build(md, &m, &err) == FG_OK, "%s", err.msg);
    /* 2 layers x 3 stacked tensors x 4 experts of 32 x 64 BF16: one 4 KiB chunk each */
    ck_assert_uint_eq(m.experts, 2 * 3 * 4 * 4096);
    ck_assert_uint_eq(m.sweep.experts, m.experts);
    ck_assert_uint_eq(m.expert_floats, 2 * 3 * 4 * 32 * 64);
    fg_calib c = calib_fixed();
    const uint32_t P = 8, G = 5, ctx = P + G;
    fg_policy p = fg_policy_default();
    p.gbs = 1, p.ngb = 1, p.have_fractions = 1;
    p.frac = (fg_pager_policy){{0, 0, 1}, {0, 1, 0}, {0, 1, 0}};
    fg_policy all = p;
    all.experts = FG_EXPERTS_ALL;
    fg_plan pl;
    ck_assert_int_eq(fg_plan_make(&m.pm, &p, ctx, 0, &pl, &err), FG_OK);
    fg_policy_job job = {P, G, 1, 0, -1};
    fg_prediction pr, pa;
    fg_policy_predict(&c, &m, &pl, &p, &job, &pr);
    fg_policy_predict(&c, &m, &pl, &all, &job, &pa);
    double saved = (G - 1) * 0.5 * (double)m.experts;
    ck_assert_msg(fabs((double)(pa.read_bytes - pr.read_bytes) - saved) < 16, "%llu - %llu",
                  (unsigned long long)pa.read_bytes, (unsigned long long)pr.read_bytes);
    fg_engine_opts eo = test_opts(&p, ctx);
    fg_engine *e;
    ck_assert_msg(fg_engine_open(md, &eo, &e, &err) == FG_OK, "%s", err.msg);
    int32_t prompt[8] = {5, 17, 33, 42, 61, 77, 90, 101}, out[8];
    fg_gen_seq seq = {prompt, P, G, {0, 0, 1, 0}, 0, out, 0, 0};
    fg_gen_stats gs;
    ck_assert_msg(fg_engine_generate(e, &seq, 1, NULL, &gs, &err) == FG_OK, "%s", err.msg);
    fg_engine_stats es;
    fg_engine_stats_get(e, &es);
    uint64_t rd = es.pager.moved[FG_TIER_DISK][FG_TIER_HOST];
    fprintf(stderr, "mixtral-tiny, weights on disk: read %llu, predicted %llu (%llu with "
            "--experts all)\n", (unsigned long long)rd, (unsigned long long)pr.read_bytes,
            (unsigned long long)pa.read_bytes);
    ck_assert_uint_le(rd, pr.read_bytes + 16384);
    ck_assert_int_eq(fg_engine_close(e, &err), FG_OK);
    /* ranks: RAM for the share of the weights every step reads homes all of those and no
     * expert (nor the untied embedding); a step then reads only chosen experts, fewer bytes
     * than the same share homed unit by unit, and the engine's pager agrees (homes_agree) */
    uint64_t rb[FG_PLACE_RANKS];
    fg_plan_rank_bytes(&m.pm, rb);
    ck_assert_uint_eq(rb[1], m.experts);
    ck_assert_uint_gt(rb[2], 0); /* mixtral-tiny's embedding is untied */
    double f = (double)rb[0] / (double)m.pm.weights;
    fg_policy d = p;
    d.frac.w[1] = f, d.frac.w[2] = 1 - f;
    fg_plan pd;
    ck_assert_int_eq(fg_plan_make(&m.pm, &d, ctx, 0, &pd, &err), FG_OK);
    ck_assert_uint_eq(pd.homed[0], rb[0]);
    fg_sweep_bytes sb;
    fg_policy_sweep_bytes(&m, f, &sb);
    ck_assert_uint_eq((uint64_t)sb.experts, m.experts); /* every expert on disk */
    ck_assert_uint_eq((uint64_t)sb.lin, m.experts);     /* and no other Linear */
    eo = test_opts(&d, ctx);
    ck_assert_msg(fg_engine_open(md, &eo, &e, &err) == FG_OK, "%s", err.msg);
    int32_t out2[8];
    uint32_t n1 = seq.n_out;
    seq.out = out2;
    ck_assert_msg(fg_engine_generate(e, &seq, 1, NULL, &gs, &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_eq(seq.n_out, n1);
    ck_assert_mem_eq(out, out2, n1 * sizeof *out);
    ck_assert_int_eq(fg_engine_close(e, &err), FG_OK);
    /* the fixed rule under a budget below the weights: RAM homes what every step reads before
     * any expert; at one sequence (a step chooses half the experts) it homes no expert while
     * the chosen ones fit the streaming room left (the LRU keeps them), at 32 (every expert
     * chosen) it homes experts too once that room is short; never more than the room holds */
    int dense_only = 0, with_experts = 0;
    for (uint64_t budget = 8 << 20; budget >= (256 << 10); budget -= 4096) {
        for (uint32_t gbs = 1; gbs <= 32; gbs += 31) {
            fg_policy fx = fg_policy_default();
            fx.gbs = gbs, fx.ngb = 1;
            fg_plan q;
            if (fg_plan_make(&m.pm, &fx, ctx, budget, &q, &err))
                continue;
            ck_assert_uint_le(q.total_host, budget);
            if (q.frac.w[1] == 1.0 || q.homed[0] == 0)
                continue;
            fg_policy_sweep_bytes(&m, q.frac.w[1], &sb); /* on disk: every expert, until all
                                                             that every step reads is homed */
            ck_assert(q.homed[0] >= rb[0] || (uint64_t)sb.experts == m.experts);
            double room = (double)q.pool - (double)(q.homed[1] + q.homed[2] + rb[0]);
            double beside = 0.5 * (double)m.experts > (double)q.max_span
                                ? 0.5 * (double)m.experts : (double)q.max_span;
            if (gbs == 1 && room >= (double)q.window + beside) {
                ck_assert_uint_eq(q.homed[0], rb[0]); /* a step's chosen experts fit: none */
                dense_only++;
            }
            with_experts += gbs == 32 && q.homed[0] > rb[0];
        }
    }
    ck_assert_int_gt(dense_only, 0);
    ck_assert_int_gt(with_experts, 0);
    fg_policy_model_free(&m);
    fg_model_close(md);
    fg_store_close(st);
    tu_tmpdir_remove();
}
END_TEST

/* ---- the predicted link traffic is the device backend's ---- */

/* Runs a block on the simulated device under placements that put weights, the KV cache and the
 * activations on the GPU, in RAM and on disk (with attention on the device, and on the CPU
 * beside a cache in RAM) and compares the link bytes the model predicts with the backend's own
 * counters. */
START_TEST(predicted_link_is_the_backends)
{
    tu_tmpdir_create();
    fg_store *st;
    fg_model *md;
    tiny_store(&st, &md);
    fg_policy_model m;
    fg_err err;
    ck_assert_msg(fg_policy_model_build(md, &m, &err) == FG_OK, "%s", err.msg);
    fg_calib c = calib_fixed();
    fg_calib_dev d = calib_dev_fixed();
    const uint32_t P = 8, G = 5, ctx = P + G;
    /* wg, wc, cg, cc, hg, hc, cpu attention */
    static const double place[][7] = {
        {1, 0, 1, 0, 1, 0, 0}, {0.5, 0.5, 1, 0, 1, 0, 0}, {0, 1, 1, 0, 1, 0, 0},
        {1, 0, 0, 1, 1, 0, 0}, {1, 0, 0, 1, 1, 0, 1}, {1, 0, 1, 0, 0, 1, 0},
        {0, 0.5, 0, 0, 0, 0, 0}, {0.5, 0, 0, 1, 0, 1, 1}};
    for (size_t i = 0; i < sizeof place / sizeof place[0]; i++) {
        const double *f = place[i];
        fg_policy p = fg_policy_default();
        p.gbs = 2, p.ngb = 2, p.have_fractions = 1, p.cpu_attention = (int)f[6];
        p.frac = (fg_pager_policy){{f[0], f[1], 1 - f[0] - f[1]}, {f[2], f[3], 1 - f[2] - f[3]},
                                   {f[4], f[5], 1 - f[4] - f[5]}};
        fg_engine_opts eo = test_opts(&p, ctx);
        eo.backend = FG_BACKEND_SIM;
        eo.gpu_budget = 64u << 20;
        fg_engine *e;
        ck_assert_msg(fg_engine_open(md, &eo, &e, &err) == FG_OK, "%s", err.msg);
        fg_engine_stats es;
        uint64_t ids = 0x9e3779b97f4a7c15ull; /* the model prices ids at random */
        four_prompts(e, P, G, &ids, &es);
        fg_policy_job job = {P, G, 4, 0, -1, 0, &d};
        fg_prediction pred;
        const fg_plan *pl = fg_engine_plan(e);
        fg_policy_predict(&c, &m, pl, &p, &job, &pred);
        fprintf(stderr, "placement %zu (w %.1f/%.1f c %.0f/%.0f h %.0f/%.0f%s): up %llu "
                "predicted %llu, down %llu predicted %llu\n", i, f[0], f[1], f[2], f[3], f[4],
                f[5], f[6] ? ", CPU attention" : "", (unsigned long long)es.link_bytes[0],
                (unsigned long long)pred.up_bytes, (unsigned long long)es.link_bytes[1],
                (unsigned long long)pred.down_bytes);
        /* the model leaves out the ids, positions, validity and next ids (tens of bytes a
         * sequence and step) and prices the chunks a gather touches for ids at random */
        double slack = 4096 + 0.05 * (double)es.link_bytes[0];
        ck_assert(fabs((double)pred.up_bytes - (double)es.link_bytes[0]) <= slack);
        slack = 1024 + 0.02 * (double)es.link_bytes[1];
        ck_assert(fabs((double)pred.down_bytes - (double)es.link_bytes[1]) <= slack);
        ck_assert_int_eq(fg_engine_close(e, &err), FG_OK);
    }
    fg_policy_model_free(&m);
    fg_model_close(md);
    fg_store_close(st);
    tu_tmpdir_remove();
}
END_TEST

/* ---- calibration files ---- */

static void rewrite(const char *path, const char *key, json_t *v)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(o);
    json_object_set_new(o, key, v);
    ck_assert_int_eq(json_dump_file(o, path, 0), 0);
    json_decref(o);
}

START_TEST(calib_round_trip_and_refusals)
{
    tu_tmpdir_create();
    fg_calib c = calib_fixed(), back;
    c.quick = 1, c.seconds = 1.5, c.mem_read = 21.5e9;
    const char *path = tu_path("sub/dir/calibration.json");
    fg_err err;
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(fg_calib_save(path, &c, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_calib_load(path, &back, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(back.machine, c.machine);
    ck_assert(back.disk_read == c.disk_read && back.disk_write == c.disk_write &&
              back.dec_f16 == c.dec_f16 && back.dec_q4 == c.dec_q4 && back.attn_s == c.attn_s &&
              back.attn_q4_s == c.attn_q4_s && back.overlap == c.overlap && back.quick == 1 &&
              back.threads == 2 && back.mem_read == c.mem_read);
    for (int i = 0; i < FG_CALIB_NM; i++)
        ck_assert(back.m[i] == c.m[i] && back.gflops[i] == c.gflops[i] &&
                  back.gflops_i8[i] == c.gflops_i8[i] && back.gflops_bf16[i] == c.gflops_bf16[i]);
    ck_assert(fg_calib_flops(&back, 3) > fg_calib_flops(&back, 2) &&
              fg_calib_flops(&back, 1000) == back.gflops[FG_CALIB_NM - 1] * 1e9);
    ck_assert(fg_calib_flops_at(&back, 1, 1000) == back.gflops_i8[FG_CALIB_NM - 1] * 1e9 &&
              fg_calib_flops_at(&back, 1, 1) == back.gflops_i8[0] * 1e9 &&
              fg_calib_flops_at(&back, 0, 6) == fg_calib_flops(&back, 6) &&
              fg_calib_flops_at(&back, FG_CALIB_BF16, 1) == back.gflops_bf16[0] * 1e9);
    rewrite(path, "gemm_bf16_gflops", json_array()); /* a version 6 file had none */
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "gemm_bf16_gflops"));
    ck_assert_int_eq(fg_calib_save(path, &c, &err), FG_OK);
    rewrite(path, "gemm_int8_q4_gflops", json_array()); /* a version 3 file had none */
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "gemm_int8_q4_gflops"));
    ck_assert_int_eq(fg_calib_save(path, &c, &err), FG_OK);
    rewrite(path, "version", json_integer(FG_CALIB_VERSION + 1));
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "version"));
    ck_assert_int_eq(fg_calib_save(path, &c, &err), FG_OK);
    rewrite(path, "machine", json_string("a computer elsewhere x 1024"));
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "another machine"));
    ck_assert_int_eq(fg_calib_save(path, &c, &err), FG_OK);
    rewrite(path, "disk_read_bps", json_real(-1));
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    /* the memory read loop: optional (a file from before it was kept has none), and when
     * present a positive number */
    c.mem_read = 0;
    ck_assert_int_eq(fg_calib_save(path, &c, &err), FG_OK);
    ck_assert_msg(fg_calib_load(path, &back, &err) == FG_OK, "%s", err.msg);
    ck_assert(back.mem_read == 0);
    rewrite(path, "mem_read_bps", json_string("fast"));
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "mem_read_bps"));
    rewrite(path, "mem_read_bps", json_real(0));
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    FILE *f = fopen(path, "w");
    fputs("not json", f);
    fclose(f);
    ck_assert_int_eq(fg_calib_load(path, &back, &err), FG_ERR_CORRUPT);
    tu_tmpdir_remove();
}
END_TEST

/* A device profile (calib_dev_file.c): written and read back the same; each field at fault
 * refused naming itself and the file. */
START_TEST(device_profile_round_trip_and_refusals)
{
    tu_tmpdir_create();
    fg_calib_dev d = calib_dev_fixed(), back;
    d.q4 = 1, d.attn_pre_s = 3e-11, d.attn_pre_q4_s = 4e-11, d.seconds = 2.5;
    const char *path = tu_path("h100.json");
    fg_err err;
    ck_assert_int_eq(fg_calib_dev_load(path, &back, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(fg_calib_dev_save(path, &d, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_calib_dev_load(path, &back, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(back.name, d.name);
    ck_assert(back.up == d.up && back.down == d.down && back.attn_s == d.attn_s &&
              back.attn_q4_s == d.attn_q4_s && back.attn_pre_s == d.attn_pre_s &&
              back.attn_pre_q4_s == d.attn_pre_q4_s && back.overlap == d.overlap &&
              back.q4 == 1 && back.seconds == d.seconds);
    for (int i = 0; i < FG_CALIB_NM; i++)
        ck_assert(back.m[i] == d.m[i] && back.gflops[i] == d.gflops[i]);
    static const struct { const char *key; int code; const char *says; } bad[] = {
        {"kind", FG_ERR_CORRUPT, "not a device profile"},
        {"version", FG_ERR_STATE, "version"},
        {"weights", FG_ERR_CORRUPT, "weights"},
        {"link_up_bps", FG_ERR_CORRUPT, "link_up_bps"},
        {"attn_pre_s", FG_ERR_CORRUPT, "attn_pre_s"},
        {"overlap", FG_ERR_CORRUPT, "overlap"},
        {"gemm_gflops", FG_ERR_CORRUPT, "gemm_gflops"},
        {"gemm_rows", FG_ERR_CORRUPT, "gemm_rows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(fg_calib_dev_save(path, &d, &err), FG_OK);
        json_t *v = !strcmp(bad[i].key, "kind") ? json_string("fg-calibration")
                    : !strcmp(bad[i].key, "version") ? json_integer(2)
                    : !strcmp(bad[i].key, "weights") ? json_string("q8")
                    : !strcmp(bad[i].key, "overlap") ? json_real(1.5)
                    : !strcmp(bad[i].key, "gemm_rows") ? json_pack("[i,i,i,i,i,i,i,i,i]", 2, 2, 4,
                                                                   8, 16, 32, 64, 128, 256)
                    : !strcmp(bad[i].key, "gemm_gflops") ? json_array()
                    : json_real(-1);
        rewrite(path, bad[i].key, v);
        ck_assert_int_eq(fg_calib_dev_load(path, &back, &err), bad[i].code);
        ck_assert_msg(strstr(err.msg, bad[i].says) && strstr(err.msg, "h100.json"), "%s: %s",
                      bad[i].key, err.msg);
    }
    ck_assert_int_ne(fg_calib_dev_load(tu_path(""), &back, &err), FG_OK); /* a directory */
    ck_assert_ptr_nonnull(strstr(err.msg, "directory"));
    tu_tmpdir_remove();
}
END_TEST

START_TEST(calib_quick_measure)
{
    const char *dir = tu_tmpdir_create();
    fg_calib c;
    fg_err err;
    ck_assert_msg(fg_calib_measure(dir, 1, 1, NULL, &c, &err) == FG_OK, "%s", err.msg);
    ck_assert(c.disk_read > 0 && c.disk_write > 0 && c.dec_f16 > 0 && c.dec_q4 > 0 &&
              c.attn_s > 0 && c.attn_q4_s > 0 && c.overlap >= 0 && c.overlap <= 1 && c.quick == 1 &&
              c.seconds > 0); /* how long it takes is bench's business (~9 s), not a test's */
    for (int i = 0; i < FG_CALIB_NM; i++)
        ck_assert(c.m[i] == 1u << i && c.gflops[i] > 0 && c.gflops_i8[i] > 0 &&
                  c.gflops_bf16[i] > 0);
    /* the temporary file is gone */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    ck_assert_int_eq(system(cmd), 0);
    tu_tmpdir_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("lp");
    tcase_add_test(tc, lp_known_optimum);
    tcase_add_test(tc, lp_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("search");
    tcase_add_loop_test(tc, search_fits_every_budget, 0, 6);
    tcase_add_loop_test(tc, search_beats_the_grid, 0, 6);
    tcase_add_loop_test(tc, bound_is_below_the_prediction, 0, 4);
    tcase_add_test(tc, search_places_attention);
    tcase_add_test(tc, mla_prefill_priced_at_its_width);
    tcase_add_test(tc, cost_model_orders);
    tcase_add_test(tc, store_view_matches_engine);
    tcase_add_test(tc, predicted_io_is_the_pagers);
    tcase_add_test(tc, moe_reads_chosen_experts);
    tcase_add_test(tc, predicted_link_is_the_backends);
    suite_add_tcase(s, tc);
    tc = tcase_create("calibration");
    tcase_add_test(tc, calib_round_trip_and_refusals);
    tcase_add_test(tc, device_profile_round_trip_and_refusals);
    tcase_add_test(tc, calib_quick_measure);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
