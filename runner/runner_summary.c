/* runner_summary.c - the lines after a run (not with --quiet): tokens and times, the block,
 * memory, disk and pager traffic; a device's share and its link traffic; what the cost model
 * predicted beside what was measured, and a line when the two differ by more than 1.5x (a
 * calibration measured in a busy moment), and the bound with the share of it achieved; the
 * prefix cache's line; the experts a mixture's routers chose and their bytes beside the decode's
 * disk reads; the decode's weight bytes a second against the memory read loop; its GFLOP/s.
 * Each part is its own function, in the order printed.
 */
#include <inttypes.h>
#include <math.h>
#include <sys/resource.h>

#include "runner_int.h"

/* A phase whose time is off the cost model's by more than 1.5x (and that took, or was predicted
 * to take, a second or more: shorter ones are start-up and noise) gets a line that says so: a
 * calibration measured in a busy moment prices every later plan wrong (a quick one on this
 * machine once had the F16 GEMM at 77 GFLOP/s where 130 ran, and the prefill predicted at 1.9x
 * its time) and --policy auto then chooses with it. */
static void calib_off(const fgr_run *r, const char *phase, double predicted, double measured)
{
    double big = predicted > measured ? predicted : measured;
    if (big < 1.0 || predicted <= 0 || measured <= 0)
        return;
    double f = measured / predicted;
    if (f < 1.5 && f > 1 / 1.5)
        return;
    fprintf(r->log, "         calibration: the %s ran %.2fx %s than predicted; if that holds on "
            "a quiet machine, measure it again: fg-infer calibrate%s%s\n", phase,
            f > 1 ? f : 1 / f, f > 1 ? "slower" : "faster",
            r->o->calibration ? " --calibration " : "",
            r->o->calibration ? r->o->calibration : "");
}

/* Tokens and times, the block, memory, disk and the pager. */
static void main_lines(const fgr_run *r, const fg_engine_stats *st, const fg_plan *pl)
{
    const fg_run_report *p = &r->rep;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char rd[32], wr[32], peak[32], plan[32], budget[32];
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024;
    uint64_t disk = st->pager.moved[FG_TIER_DISK][FG_TIER_HOST];
    fprintf(r->log,
            "summary: %" PRIu64 " tokens generated in %.2f s (prefill %.2f s, decode %.2f s): "
            "%.2f tok/s\n"
            "         block %u x %u (gbs x ngb), schedule %s; peak RSS %s (%" PRIu64 " bytes; "
            "plan %s, budget %s)\n"
            "         read from disk %s (%" PRIu64 " bytes), written %s (KV cache and "
            "activations), pager hits %" PRIu64 " misses %" PRIu64 ", stalled %.2f s; %s\n",
            p->tokens, p->total_s, p->prefill_s, p->decode_s,
            p->total_s > 0 ? (double)p->tokens / p->total_s : 0.0, pl->gbs, pl->ngb,
            r->eo.policy.schedule == FG_SCHEDULE_ROW ? "row-by-row" : "zig-zag",
            fg_fmt_bytes((double)rss, peak, sizeof peak), rss,
            fg_fmt_bytes((double)st->ram_peak_planned, plan, sizeof plan),
            r->eo.ram_budget ? fg_fmt_bytes((double)r->eo.ram_budget, budget, sizeof budget)
                             : "none",
            fg_fmt_bytes((double)disk, rd, sizeof rd), disk,
            fg_fmt_bytes((double)st->pager.moved[FG_TIER_HOST][FG_TIER_DISK], wr, sizeof wr),
            st->pager.hits, st->pager.misses, (double)st->pager.stall_ns * 1e-9, st->pager.engine);
}

/* A device backend: the GPU's share, and the link's traffic. */
static void device_lines(const fgr_run *r, const fg_engine_stats *st, const fg_plan *pl)
{
    const fg_run_report *p = &r->rep;
    char g[32], w[32], m[32];
    fprintf(r->log, "         GPU: weights %.1f%%, KV cache %.1f%%, activations %.1f%%; "
            "pool peak %s of %s; host -> device %s\n", 100 * pl->frac.w[0],
            100 * pl->frac.c[0], 100 * pl->frac.h[0],
            fg_fmt_bytes((double)st->pager.peak[FG_TIER_DEVICE], g, sizeof g),
            fg_fmt_bytes((double)pl->dev_pool, w, sizeof w),
            fg_fmt_bytes((double)st->pager.moved[FG_TIER_HOST][FG_TIER_DEVICE], m, sizeof m));
    char up[32], dn[32], per[32];
    uint64_t link = st->link_bytes[0] + st->link_bytes[1];
    fprintf(r->log, "         link: host -> device %s (%" PRIu64 " bytes), device -> host "
            "%s (%" PRIu64 " bytes); %s a generated token\n",
            fg_fmt_bytes((double)st->link_bytes[0], up, sizeof up), st->link_bytes[0],
            fg_fmt_bytes((double)st->link_bytes[1], dn, sizeof dn), st->link_bytes[1],
            fg_fmt_bytes(p->tokens ? (double)link / (double)p->tokens : 0.0, per, sizeof per));
}

/* The cost model's figures for its block (full), times the blocks run, beside the measured. */
static void predicted_lines(const fgr_run *r, const fg_plan *pl)
{
    const fg_run_report *p = &r->rep;
    char rd[32], wr[32];
    double nb = ceil((double)p->prompts / fg_engine_block_size(r->e));
    nb = nb > 0 ? nb : 1;
    if (r->calib_note[0])
        fprintf(r->log, "         calibration: %s\n", r->calib_note);
    fprintf(r->log, "         policy %s\n", r->policy_line);
    if (r->dev_line[0])
        fprintf(r->log, "         device %s\n", r->dev_line);
    fprintf(r->log, "         predicted: prefill %.2f s, decode %.2f s, "
            "%.2f tok/s; measured %.2f s, %.2f s, %.2f tok/s\n", nb * p->pred_prefill_s,
            nb * p->pred_decode_s, p->pred_tok_s, p->prefill_s, p->decode_s,
            p->total_s > 0 ? (double)p->tokens / p->total_s : 0.0);
    fprintf(r->log, "         predicted disk traffic: read %s, written %s (measured above)\n",
            fg_fmt_bytes(nb * (double)p->pred_read, rd, sizeof rd),
            fg_fmt_bytes(nb * (double)p->pred_write, wr, sizeof wr));
    if (pl->dev_pool)
        fprintf(r->log, "         predicted link traffic: host -> device %s, device -> "
                "host %s (measured above)\n",
                fg_fmt_bytes(nb * (double)p->pred_up, rd, sizeof rd),
                fg_fmt_bytes(nb * (double)p->pred_down, wr, sizeof wr));
    if (p->bound_s > 0) { /* the hardware's bound on the same blocks, and how near it ran */
        double run = p->prefill_s + p->decode_s, a = run > 0 ? nb * p->bound_s / run : 0.0;
        fprintf(r->log, "         bound (the blocks run): %.2f s; achieved %.2f of it "
                "(%.2f tok/s of %.2f at most)%s\n", nb * p->bound_s, a,
                run > 0 ? (double)p->tokens / run : 0.0, p->bound_tok_s, a > 1.05 ?
                "; above 1: something ran faster than the calibration's rates (reads from the "
                "page cache, a calibration measured under load)" : "");
        fprintf(r->log, "         bound (a block): %s\n", r->bound_line);
    }
    calib_off(r, "prefill", nb * p->pred_prefill_s, p->prefill_s);
    calib_off(r, "decode", nb * p->pred_decode_s, p->decode_s);
}

/* Layers with a mixture of experts (the rest are dense). */
static uint32_t sparse_layers(const fg_hparams *hp)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        n += fg_model_layer_sparse(hp, l) != 0;
    return n;
}

/* The decode steps' routed experts beside what was read: each step's union of the experts its
 * tokens chose (the distinct ones a sparse layer computed, at the stored bytes of one expert of
 * that layer), the least a step must bring in when the experts are not in memory, and the
 * decode's disk reads as a share of it (below 1 when some sit in RAM or on the GPU, above when
 * dense weights homed on disk are read too). */
static void routed_line(fgr_run *r, const fg_engine_stats *st, uint64_t dec)
{
    const fg_hparams *hp = fg_engine_hparams(r->e);
    const fg_policy_model *m;
    fg_err e;
    uint32_t sparse = sparse_layers(hp);
    if (!sparse || !hp->n_experts || !(m = fgr_policy_model(r, &e)))
        return;
    double per = (double)m->experts / sparse / hp->n_experts; /* one expert of one layer */
    double all = (double)st->moe[1].experts * per, steps = (double)st->moe[1].units / sparse;
    char a[32], b[32];
    fprintf(r->log, "         routed experts (the union each decode step): %s a step, %s a "
            "decode token; read from disk %.2f of it\n",
            fg_fmt_bytes(steps > 0 ? all / steps : 0.0, a, sizeof a),
            fg_fmt_bytes(all / (double)dec, b, sizeof b),
            all > 0 ? (double)st->disk_read[1] / all : 0.0);
}

/* The weight bytes a decode step passes through its Linear layers and LM head (a mixture's
 * experts: the ones its tokens chose, the union of the step) over the decode's time, against
 * the calibration's memory read loop when it has one: how near a decode runs to the memory
 * wall (batch 1 reads every weight once a token; the embedding table's rows are not counted). */
static void weights_line(fgr_run *r, const fg_engine_stats *st)
{
    const fg_hparams *hp = fg_engine_hparams(r->e);
    const fg_policy_model *m;
    fg_err e;
    if (!st->decode_sweeps || !(r->rep.decode_s > 0) || !(m = fgr_policy_model(r, &e)))
        return;
    const fg_sweep_bytes *w = &m->sweep;
    double step = w->lin - w->experts + w->head + w->small;
    if (st->moe[1].units && w->experts > 0) {
        uint32_t sparse = sparse_layers(hp);
        if (sparse && hp->n_experts)
            step += (double)st->moe[1].experts * (w->experts / sparse / hp->n_experts) /
                    (double)st->decode_sweeps;
    }
    double bps = step * (double)st->decode_sweeps / r->rep.decode_s;
    char a[32];
    fprintf(r->log, "         decode: weights %s a step at %.1f GB/s", fg_fmt_bytes(step, a,
            sizeof a), bps / 1e9);
    if (r->rep.predicted && r->calib.mem_read > 0)
        fprintf(r->log, ", %.2f of the memory read loop's %.1f GB/s (calibration)",
                bps / r->calib.mem_read, r->calib.mem_read / 1e9);
    fputc('\n', r->log);
}

/* What a mixture's routers chose: experts computed a step; then the decode's GFLOP/s. */
static void model_lines(fgr_run *r, const fg_engine_stats *st)
{
    const fg_run_report *p = &r->rep;
    const fg_hparams *hp = fg_engine_hparams(r->e);
    if (st->moe[0].units || st->moe[1].units) {
        fprintf(r->log, "         experts computed by a sparse layer, of %u:", hp->n_experts);
        const char *sep = "";
        for (int k = 1; k >= 0; k--) { /* decode steps, then prefills */
            const fg_moe_stats *m = &st->moe[k];
            if (!m->units)
                continue;
            fprintf(r->log, "%s %.1f a %s step (%.1f tokens)", sep,
                    (double)m->experts / (double)m->units, k ? "decode" : "prefill",
                    (double)m->pairs / (double)m->units / hp->top_k);
            sep = ",";
        }
        fprintf(r->log, "\n");
    }
    uint64_t dec = p->tokens > p->prompts ? p->tokens - p->prompts : 0; /* (a prompt's first
                                                                            token: the prefill) */
    if (st->disk_read[0] || st->disk_read[1]) {
        char a[32], b[32], c[32];
        fprintf(r->log, "         read from disk: prefill %s, decode %s (%s a decode token)\n",
                fg_fmt_bytes((double)st->disk_read[0], a, sizeof a),
                fg_fmt_bytes((double)st->disk_read[1], b, sizeof b),
                fg_fmt_bytes(dec ? (double)st->disk_read[1] / (double)dec : 0.0, c, sizeof c));
    }
    if (st->moe[1].units && dec)
        routed_line(r, st, dec);
    weights_line(r, st);
    double f = fg_model_flops_per_token(hp);
    if (p->decode_s > 0 && p->tokens > p->prompts)
        fprintf(r->log, "         decode: %.1f GFLOP/s in Linear layers and LM head (%.2f GFLOP "
                "per token)\n", (double)(p->tokens - p->prompts) * f / p->decode_s / 1e9, f / 1e9);
}

/* The engine's counters since --warmup's block (peaks, budgets and the pager's state are the
 * whole run's). */
static void since_warmup(const fg_engine_stats *b, fg_engine_stats *s)
{
    for (int i = 0; i < FG_TIER_COUNT; i++)
        for (int j = 0; j < FG_TIER_COUNT; j++)
            s->pager.moved[i][j] -= b->pager.moved[i][j];
    uint64_t *pc[] = {&s->pager.hits, &s->pager.misses, &s->pager.prefetches, &s->pager.dedup,
                      &s->pager.evictions, &s->pager.write_backs, &s->pager.io_ops,
                      &s->pager.short_reads, &s->pager.wasted, &s->pager.inflight_sum,
                      &s->pager.stall_ns, &s->pager.async_uploads, &s->weight_bytes_converted,
                      &s->weight_bytes_panel, &s->link_bytes[0], &s->link_bytes[1],
                      &s->prefill_rows, &s->rows_shared, &s->disk_read[0], &s->disk_read[1],
                      &s->decode_sweeps};
    const uint64_t *pb[] = {&b->pager.hits, &b->pager.misses, &b->pager.prefetches,
                            &b->pager.dedup, &b->pager.evictions, &b->pager.write_backs,
                            &b->pager.io_ops, &b->pager.short_reads, &b->pager.wasted,
                            &b->pager.inflight_sum, &b->pager.stall_ns, &b->pager.async_uploads,
                            &b->weight_bytes_converted, &b->weight_bytes_panel,
                            &b->link_bytes[0], &b->link_bytes[1], &b->prefill_rows,
                            &b->rows_shared, &b->disk_read[0], &b->disk_read[1],
                            &b->decode_sweeps};
    for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++)
        *pc[i] -= *pb[i];
    for (int k = 0; k < 2; k++) {
        s->moe[k].units -= b->moe[k].units;
        s->moe[k].experts -= b->moe[k].experts;
        s->moe[k].pairs -= b->moe[k].pairs;
    }
    s->compute_s -= b->compute_s;
    s->load_wait_s -= b->load_wait_s;
}

void fgr_summary(fgr_run *r)
{
    if (r->o->quiet || !r->e)
        return;
    fg_engine_stats st;
    fg_engine_stats_get(r->e, &st);
    if (r->warm) {
        since_warmup(&r->base, &st);
        fprintf(r->log, "warmup: one block ran untimed first; the figures below are the timed "
                "run's alone\n");
    }
    const fg_plan *pl = fg_engine_plan(r->e);
    main_lines(r, &st, pl);
    if (pl->dev_pool)
        device_lines(r, &st, pl);
    if (r->rep.predicted)
        predicted_lines(r, pl);
    fg_runner_prefix_summary(r->log, r->o, r->pfx, &r->rep);
    model_lines(r, &st);
}
