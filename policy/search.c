/* search.c - the cost model and the policy search (policy_search.h).
 *
 * The cost model is the FlexGen paper's (Appendix A.3) adapted to what this engine does
 * (runtime/schedule.c). A block is n = gbs x ngb sequences, P prompt tokens, G new tokens: one
 * prefill step then G - 1 decode steps, each sweeping the units once. Rates come from the
 * calibration (calib.c).
 *  - compute, prefill: batch by batch, every Linear at M = gbs * P rows (F_lin FLOPs a token at
 *    the GEMM rate for that M, measured on f16 pieces: decoding included; a q4 store adds what
 *    its decoder is slower), causal attention over P(P+1)/2 query-key pairs per sequence and
 *    layer; the LM head once at M = n rows;
 *  - compute, decode step: every Linear and the head once over the whole block (M = n rows),
 *    attention of each sequence over the mean context P + G/2 (the 4-bit cache's rate when
 *    compressed, never below the f32 one: its path decodes to f32 first);
 *  - I/O: the prefill reads every weight once (the pool starts empty); a decode step reads the
 *    weight bytes homed on disk once (a span's weights serve every batch) and reads and writes
 *    back each (batch, layer) KV chunk homed on disk; the prefill writes the cache homed on disk
 *    (fresh chunks: nothing read) and each activation chunk once (used by every unit, the LRU
 *    keeps it). When the pool's streaming room holds everything homed on disk, nothing is read
 *    again after the prefill (the LRU keeps it). Predicted bytes are checked against the
 *    pager's counters (tests/test_policy.c).
 * A step takes writes + max(compute, reads) + (1 - phi) min(compute, reads): write-backs block
 * the computing thread (the pager writes a dirty chunk when it evicts it), reads overlap compute
 * by the calibrated share phi, when the plan prefetches FG_PLAN_AHEAD spans ahead; with one
 * span ahead (homed data fills the pool, leaving room for two spans only) or without
 * --overlap, phi = 0 (measured: reading and computing then add up). Memory: the plan
 * (fg_plan_make) gives the fixed buffers, the streaming window and the totals of weights, KV
 * cache and activations; the budget constraint is linear in the fractions: fixed + window +
 * W wc + KV cc + ACT hc <= budget (less one more span in the overlapping regime).
 *
 * The search enumerates blocks (gbs, ngb), the 4-bit cache on or off, the two prefetch
 * regimes (room kept for FG_PLAN_AHEAD spans, overlapping; or the pool filled, not) and,
 * because the pager homes each KV chunk and each activation chunk whole (one chunk per
 * placement group: a fraction places it in RAM when above 1/2), the cache's and activations'
 * tier; for each, one LP over the nine fractions (GPU ones fixed at 0: no GPU tier) and the two
 * step times (the max linearized as two rows each) is solved with GLPK. The weights' fraction
 * is then checked with the pager's own midpoint rule (a unit's chunks are indivisible) and
 * lowered until the real bytes fit, and fg_plan_make must accept the result. The fastest per
 * token wins (within 2%, the one with fewer batches; a 4-bit cache, which changes the numbers,
 * only when nothing fits without it or it is 5% faster).
 * Weights are searched in the store's own codec: the search never quantizes at load.
 */
#include <math.h>
#include <string.h>

#include "policy_search.h"

#define MB (1024.0 * 1024.0)

/* Rates and sizes shared by the terms. */
typedef struct terms {
    double n, gbs, ngb, P, G, L;
    double f_lin, f_head, qw;
    double dec_s;        /* extra seconds to decode every LINEAR/STREAM weight once */
    int int8;            /* Linear layers on the int8 kernels (gflops_i8, no decode) */
    double attn;         /* seconds per query x key x query width */
    double kv_total, act_total, weights, n_units;
    double rd, wr;       /* seconds per byte read / written */
    double phi;          /* share of the shorter of reading and computing hidden (overlap) */
    int cached;          /* the streaming room holds everything homed on disk: decode reads none */
} terms;

/* Seconds per weight value decoded beyond what the GEMM rate holds (it was measured on f16
 * pieces): q4 minus f16 when slower; f32 and f16 nothing. */
static double decode_extra(const fg_calib *c, int codec)
{
    if (codec != FG_CODEC_Q4 && codec != FG_CODEC_Q8)
        return 0;
    double d = 1.0 / c->dec_q4 - 1.0 / c->dec_f16;
    return d > 0 ? d : 0;
}

/* Reading overlaps computing by the calibrated share only when the pager prefetches
 * FG_PLAN_AHEAD spans ahead (the plan's streaming room holds them): prefetching one span ahead,
 * what is left when homed data fills the pool, measured no overlap at all (opt-1.3b, weights
 * 40% homed under half their size: a decode step took the sum of reading and computing). A
 * spare span beyond the plan's threshold was tried and measured no better (opt-1.3b, 83.7%
 * against 85% and 87.8% of the weights homed under a budget of their size: all within noise). */
static double overlap_share(const fg_calib *c, const fg_plan *pl, const fg_policy *p)
{
    return p->overlap && pl->ahead >= FG_PLAN_AHEAD ? c->overlap : 0;
}

static void terms_of(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                     const fg_policy *p, const fg_policy_job *job, terms *t)
{
    const fg_hparams *hp = &m->hp;
    /* a block with fewer sequences than room computes only those (whole batches first) */
    double n = (double)pl->gbs * pl->ngb;
    n = job->max_seqs && job->max_seqs < n ? job->max_seqs : n;
    t->gbs = pl->gbs < n ? pl->gbs : n, t->ngb = ceil(n / t->gbs), t->n = n;
    t->P = job->prompt_len ? job->prompt_len : 1;
    t->G = job->gen_len ? job->gen_len : 1;
    t->L = hp->n_layers;
    t->f_head = 2.0 * hp->vocab_size * hp->embed_dim;
    t->f_lin = fg_model_flops_per_token(hp) - t->f_head;
    t->qw = (double)hp->n_heads * hp->head_dim;
    t->int8 = job->int8 && m->q4_int8;
    t->dec_s = t->int8 ? 0 : (double)m->linear_floats * decode_extra(c, m->codec);
    /* the 4-bit path decodes the cache to f32 and runs the same attention: never faster (a
     * lower figure is noise of the shared machine) */
    t->attn = p->compress_cache && c->attn_q4_s > c->attn_s ? c->attn_q4_s : c->attn_s;
    t->kv_total = (double)pl->homed[1] + (double)pl->on_disk[1];
    t->act_total = (double)pl->homed[2] + (double)pl->on_disk[2];
    t->weights = (double)m->pm.weights;
    t->n_units = m->pm.n_units;
    t->rd = 1.0 / c->disk_read;
    t->wr = 1.0 / c->disk_write;
    t->phi = overlap_share(c, pl, p);
    double streamed = (double)pl->on_disk[0] + (double)pl->on_disk[1] + (double)pl->on_disk[2];
    double room = (double)pl->pool - (double)(pl->homed[0] + pl->homed[1] + pl->homed[2]);
    t->cached = streamed > 0 && streamed <= room;
}

static double compute_prefill(const fg_calib *c, const terms *t)
{
    double m = t->gbs * t->P;
    double lin = m * t->f_lin / fg_calib_flops_at(c, t->int8, m) + t->dec_s;
    double att = t->L * t->gbs * t->P * (t->P + 1) / 2 * t->qw * t->attn;
    return t->ngb * (lin + att) + t->n * t->f_head / fg_calib_flops_at(c, t->int8, t->n);
}

static double compute_decode(const fg_calib *c, const terms *t)
{
    double ctx = t->P + t->G / 2;
    return t->n * (t->f_lin + t->f_head) / fg_calib_flops_at(c, t->int8, t->n) + t->dec_s +
           t->L * t->n * ctx * t->qw * t->attn;
}

/* I/O seconds per unit of each disk fraction [weights, cache, activations], reads and writes
 * apart: reads are prefetched while computing, but a dirty chunk is written back when it is
 * evicted, synchronously, by the computing thread (pager/pager.c evict_one). KV and activation
 * chunks are fresh (pager: never-written chunks load as zeros without a read): the prefill
 * writes the cache homed on disk and reads none of it. An activation chunk is used by every
 * unit, so the pager's LRU keeps it while the weights stream past: one write-back in all
 * (measured against the pager's counters, tests/test_policy.c). */
static void io_prefill(const terms *t, double rd[3], double wr[3])
{
    rd[0] = 0, wr[0] = 0; /* every weight is read in the prefill: see cold_read */
    rd[1] = 0, wr[1] = t->kv_total * t->wr;
    rd[2] = 0, wr[2] = t->act_total * t->wr;
}

/* The prefill reads every weight once whatever its home: the pool starts empty, and what is
 * homed in RAM is loaded by its first use. */
static double cold_read(const terms *t)
{
    return t->weights * t->rd;
}

/* A decode step reads the weights and the cache homed on disk and writes the cache back,
 * unless the streaming room holds all of it (then it stays resident after the prefill). */
static void io_decode(const terms *t, double rd[3], double wr[3])
{
    double k = t->cached ? 0 : 1;
    rd[0] = k * t->weights * t->rd, wr[0] = 0;
    rd[1] = k * t->kv_total * t->rd, wr[1] = k * t->kv_total * t->wr;
    rd[2] = wr[2] = 0;
}

/* A step: writes block the computing thread; reads overlap compute (when overlap is on) by
 * the calibrated share phi of the shorter: wr + max(c, r) + (1 - phi) min(c, r). */
static double step_time(double compute, double rd, double wr, double phi)
{
    double hi = compute > rd ? compute : rd, lo = compute > rd ? rd : compute;
    return wr + hi + (1 - phi) * lo;
}

static double dot3(const double k[3], const double x[3])
{
    return k[0] * x[0] + k[1] * x[1] + k[2] * x[2];
}

void fg_policy_predict(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                       const fg_policy *p, const fg_policy_job *job, fg_prediction *out)
{
    terms t;
    terms_of(c, m, pl, p, job, &t);
    double pr[3], pw[3], dr[3], dw[3];
    io_prefill(&t, pr, pw);
    io_decode(&t, dr, dw);
    /* disk fractions as the pager really places them (the plan counts its homes) */
    double x[3];
    for (int k = 0; k < 3; k++) {
        double total = (double)pl->homed[k] + (double)pl->on_disk[k];
        x[k] = total > 0 ? (double)pl->on_disk[k] / total : 0;
    }
    memset(out, 0, sizeof *out);
    out->compute_decode_s = compute_decode(c, &t);
    out->io_decode_s = dot3(dr, x) + dot3(dw, x);
    out->prefill_s = step_time(compute_prefill(c, &t), cold_read(&t) + dot3(pr, x), dot3(pw, x),
                               t.phi);
    out->decode_s = (t.G - 1) * step_time(out->compute_decode_s, dot3(dr, x), dot3(dw, x), t.phi);
    out->tokens = (uint64_t)(t.n * t.G);
    /* bytes: the seconds' terms at one second per byte */
    out->read_bytes = (uint64_t)((cold_read(&t) + dot3(pr, x) + (t.G - 1) * dot3(dr, x)) /
                                 t.rd);
    out->write_bytes = (uint64_t)((dot3(pw, x) + (t.G - 1) * dot3(dw, x)) / t.wr);
    double total = out->prefill_s + out->decode_s;
    out->tok_s = total > 0 ? (double)out->tokens / total : 0;
}

/* ---- the search ---- */

enum { X_WG, X_WC, X_WD, X_CG, X_CC, X_CD, X_HG, X_HC, X_HD, X_TP, X_TD, NX };
enum { R_W, R_C, R_H, R_PRE_IO, R_PRE_CPU, R_DEC_IO, R_DEC_CPU, R_MEM, NR };
#define TIE 1e-3 /* of the I/O time added to the objective: among equal times, less I/O */

/* The step time as two rows (the max of step_time linearized), r = cold + rd.x:
 *   row r:     T - (rd + wr).x         >= cold + (1 - phi) c      (reading dominates)
 *   row r + 1: T - ((1 - phi) rd + wr).x >= c + (1 - phi) cold    (computing dominates) */
static void step_rows(double *A, double *rlo, double *rhi, int r, int xt, const double rd[3],
                      const double wr[3], double compute, double cold, double phi)
{
    static const int disk[3] = {X_WD, X_CD, X_HD};
    A[r * NX + xt] = A[(r + 1) * NX + xt] = 1;
    for (int k = 0; k < 3; k++) {
        A[r * NX + disk[k]] = -(rd[k] + wr[k]);
        A[(r + 1) * NX + disk[k]] = -((1 - phi) * rd[k] + wr[k]);
    }
    rlo[r] = cold + (1 - phi) * compute, rlo[r + 1] = compute + (1 - phi) * cold;
    rhi[r] = rhi[r + 1] = HUGE_VAL;
}

/* The LP of one candidate: minimize Tp + (G - 1) Td over the nine fractions (GPU ones fixed at
 * 0, the cache's and activations' tiers fixed by cc, hc) and the step times, with at most cap
 * bytes homed in RAM. *w_ram gets the weights' RAM fraction. */
static int solve(const fg_calib *c, const terms *t, double phi, double cc, double hc,
                 double cap, double *w_ram, fg_err *err)
{
    double cost[NX] = {0}, A[NR * NX] = {0}, lo[NX] = {0}, hi[NX], rlo[NR], rhi[NR], x[NX], obj;
    for (int j = 0; j < NX; j++)
        hi[j] = 1;
    hi[X_WG] = hi[X_CG] = hi[X_HG] = 0; /* no GPU tier */
    lo[X_CC] = hi[X_CC] = cc, lo[X_CD] = hi[X_CD] = 1 - cc;
    lo[X_HC] = hi[X_HC] = hc, lo[X_HD] = hi[X_HD] = 1 - hc;
    hi[X_TP] = hi[X_TD] = HUGE_VAL;
    double pr[3], pw[3], dr[3], dw[3];
    io_prefill(t, pr, pw);
    io_decode(t, dr, dw);
    cost[X_TP] = 1, cost[X_TD] = t->G - 1;
    cost[X_WD] = TIE * (t->G - 1) * dr[0];
    for (int k = 0; k < 3; k++) {
        A[k * NX + 3 * k] = A[k * NX + 3 * k + 1] = A[k * NX + 3 * k + 2] = 1;
        rlo[k] = rhi[k] = 1;
    }
    step_rows(A, rlo, rhi, R_PRE_IO, X_TP, pr, pw, compute_prefill(c, t), cold_read(t), phi);
    step_rows(A, rlo, rhi, R_DEC_IO, X_TD, dr, dw, compute_decode(c, t), 0, phi);
    /* memory homed in RAM within what the budget leaves after buffers and the window */
    A[R_MEM * NX + X_WC] = t->weights, A[R_MEM * NX + X_CC] = t->kv_total;
    A[R_MEM * NX + X_HC] = t->act_total;
    rlo[R_MEM] = -HUGE_VAL;
    rhi[R_MEM] = cap;
    int rc = fg_lp_solve(NX, NR, cost, A, rlo, rhi, lo, hi, x, &obj, err);
    if (rc == FG_OK)
        *w_ram = x[X_WC] < 0 ? 0 : x[X_WC] > 1 ? 1 : x[X_WC];
    return rc;
}

static void set_fractions(fg_policy *p, double w_ram, double cc, double hc)
{
    p->have_fractions = 1;
    p->frac = (fg_pager_policy){{0, w_ram, 1 - w_ram}, {0, cc, 1 - cc}, {0, hc, 1 - hc}};
}

/* The least budget the block needs: its buffers and the streaming window, all else on disk. */
static uint64_t least_need(const fg_plan *pl)
{
    return pl->fixed + 2 * pl->max_span + 2 * pl->kv_chunk + 2 * pl->act_chunk;
}

/* Lower w_ram until the weights the pager really homes, with the cache and activations, fit;
 * then the plan must accept it. */
static int fit(const fg_policy_model *m, const fg_plan *pl0, fg_policy *p, uint32_t max_ctx,
               uint64_t budget, double room, double *w_ram, double cc, double hc, fg_plan *pl,
               fg_err *err)
{
    double other = cc * (double)(pl0->homed[1] + pl0->on_disk[1]) +
                   hc * (double)(pl0->homed[2] + pl0->on_disk[2]);
    for (int i = 0; i < 64 && *w_ram > 0; i++) {
        if ((double)fg_policy_weights_homed(m, *w_ram) + other <= room)
            break;
        *w_ram = *w_ram > 1e-3 ? *w_ram - 1.0 / 64 : 0;
        if (*w_ram < 0)
            *w_ram = 0;
    }
    if ((double)fg_policy_weights_homed(m, *w_ram) + other > room)
        return fg_err_set(err, FG_ERR_NO_SPACE, "does not fit");
    set_fractions(p, *w_ram, cc, hc);
    int rc = fg_plan_make(&m->pm, p, max_ctx, budget, pl, err);
    if (rc == FG_OK && pl->homed[0] + pl->homed[1] + pl->homed[2] + pl->window > pl->pool)
        rc = fg_err_set(err, FG_ERR_NO_SPACE, "the plan does not fit");
    return rc;
}

static const uint32_t GBS[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
static const uint32_t NGB[] = {1, 2, 3, 4, 6, 8, 12, 16};
#define MAX_BLOCK 256 /* the calibration's largest GEMM row count */

typedef struct best {
    fg_policy p;
    fg_prediction pred;
    int found;
} best;

/* A 4-bit cache changes the numbers: it is chosen only when nothing fits without it or it is
 * this much faster. */
#define LOSSY_GAIN 1.05

/* Predictions this close are a tie, won by the block with fewer batches (then more rows a
 * batch): the model does not price a batch's own costs (its KV and activation acquires, each
 * Linear called once per batch at fewer rows in the prefill), and measured 2 x 4 at 0.56 of
 * 8 x 1 (opt-1.3b, half the weights' budget) where it predicted them 0.5% apart. */
#define NEAR 0.02

static int better(const fg_prediction *pr, const fg_policy *p, const best *b)
{
    if (!b->found || pr->tok_s > b->pred.tok_s * (1 + NEAR))
        return 1;
    if (pr->tok_s < b->pred.tok_s * (1 - NEAR))
        return 0;
    if (p->ngb != b->p.ngb)
        return p->ngb < b->p.ngb;
    if (p->gbs != b->p.gbs)
        return p->gbs > b->p.gbs;
    return pr->tok_s > b->pred.tok_s * (1 + 1e-6);
}

/* Spans of streaming room the overlapping regime keeps beyond the window's two: the plan's
 * deeper prefetch (fg_plan_make's threshold for prefetching FG_PLAN_AHEAD spans). */
#define DEEP_SPARE (FG_PLAN_AHEAD - 1)

/* One candidate block with a cache codec: every tier of cache and activations. */
static void candidate(const fg_calib *c, const fg_policy_model *m, const fg_policy_job *job,
                      fg_policy *p, uint64_t budget, fg_search_stats *st, best *bests)
{
    best *b = &bests[p->compress_cache ? 1 : 0];
    uint32_t ctx = job->prompt_len + job->gen_len;
    fg_plan pl0, pl;
    fg_err e;
    set_fractions(p, 1, 1, 1);
    if (fg_plan_make(&m->pm, p, ctx, 0, &pl0, &e))
        return;
    uint64_t need = least_need(&pl0);
    if (!st->min_budget || need < st->min_budget)
        st->min_budget = need;
    set_fractions(p, 0, 0, 0); /* the buffers and window under the budget: all on disk */
    if (need > budget || fg_plan_make(&m->pm, p, ctx, budget, &pl0, &e))
        return;
    terms t;
    terms_of(c, m, &pl0, p, job, &t);
    /* two regimes: room left to prefetch FG_PLAN_AHEAD spans ahead (reading overlaps computing),
     * or the pool filled with homed data (one span ahead: no overlap) */
    double room = (double)budget - (double)(pl0.fixed + pl0.window);
    double deep = room - DEEP_SPARE * (double)pl0.max_span;
    for (int k = 0; k < 4 * (p->overlap ? 2 : 1); k++) {
        int tier = 3 - k % 4; /* RAM first: a tie keeps it */
        int shallow = k >= 4 || !p->overlap;
        double cc = tier & 1, hc = tier >> 1, w_ram, cap = shallow ? room : deep;
        st->lps++;
        if (cap < 0 || solve(c, &t, shallow ? 0 : c->overlap, cc, hc, cap, &w_ram, &e) ||
            fit(m, &pl0, p, ctx, budget, cap, &w_ram, cc, hc, &pl, &e))
            continue;
        st->feasible++;
        fg_prediction pr;
        fg_policy_predict(c, m, &pl, p, job, &pr);
        if (better(&pr, p, b)) {
            b->p = *p;
            b->pred = pr;
            b->found = 1;
        }
    }
}

int fg_policy_search(const fg_calib *c, const fg_policy_model *m, const fg_policy *base,
                     const fg_policy_job *job, fg_policy *out, fg_prediction *pred,
                     fg_search_stats *st, fg_err *err)
{
    fg_search_stats local;
    st = st ? st : &local;
    memset(st, 0, sizeof *st);
    best bs[2]; /* [0] f32 cache, [1] 4-bit cache */
    memset(bs, 0, sizeof bs);
    uint64_t budget = job->ram_budget ? job->ram_budget : UINT64_MAX / 4;
    uint32_t cap = job->max_seqs && job->max_seqs < MAX_BLOCK ? job->max_seqs : MAX_BLOCK;
    int have_cap = 0;
    for (size_t i = 0; i <= sizeof GBS / sizeof GBS[0]; i++)
        for (size_t j = 0; j < sizeof NGB / sizeof NGB[0]; j++) {
            /* the last row: one batch of exactly cap sequences, unless enumerated already */
            uint32_t g = i < sizeof GBS / sizeof GBS[0] ? GBS[i] : cap;
            if (i == sizeof GBS / sizeof GBS[0] && (j > 0 || have_cap))
                continue;
            if (g * NGB[j] > cap)
                continue;
            have_cap |= g * NGB[j] == cap;
            for (int cc = 0; cc < 2; cc++) {
                if (job->cache_choice >= 0 && cc != job->cache_choice)
                    continue;
                fg_policy p = *base;
                p.gbs = g;
                p.ngb = NGB[j];
                p.compress_cache = cc;
                p.compress_weight = m->all_q4;
                st->candidates++;
                candidate(c, m, job, &p, budget, st, bs);
            }
        }
    const best *b = bs[1].found && (!bs[0].found || bs[1].pred.tok_s > LOSSY_GAIN *
                                     bs[0].pred.tok_s) ? &bs[1] : &bs[0];
    if (!b->found)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB: no policy fits; the "
                          "smallest block needs %.0f MiB (--ram-budget %.0fM)",
                          (double)job->ram_budget / MB, (double)st->min_budget / MB,
                          ceil((double)st->min_budget / MB));
    *out = b->p;
    if (pred)
        *pred = b->pred;
    return FG_OK;
}

void fg_policy_describe(const fg_policy *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "block %u x %u (gbs x ngb), weights RAM %.1f%% disk %.1f%%, KV cache %s%s, "
             "activations %s, weights %s", p->gbs, p->ngb, 100 * p->frac.w[1],
             100 * p->frac.w[2], p->frac.c[1] > 0.5 ? "RAM" : "disk",
             p->compress_cache ? " (4-bit)" : "", p->frac.h[1] > 0.5 ? "RAM" : "disk",
             p->compress_weight ? "4-bit" : "as stored");
}
