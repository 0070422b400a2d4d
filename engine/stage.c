/* stage.c - the engine as a pipeline stage (stage.h): which layers this rank runs, its plan, the
 * stage's messages, and a follower's first word from rank 0 (fg_stage_await: OPEN or QUIT). The
 * schedules a stage runs are schedule.c's (fg_stage_serve and the lead's loop there); a follower
 * rank's life (await, open its engine, serve, its closing line) is the runner's
 * (runner/runner_follow.c), a floor above the engine.
 *
 * The split: each layer costs its share of the bytes a token step reads (a decode step on a
 * CPU is bound by reading the weights, from RAM or disk) plus its share of the FLOPs per token
 * (its Linear layers, and attention over half the context: what bounds the prefill); rank 0
 * carries the embedding (a few gathered rows) and the head (the whole table, its FLOPs only for
 * the generated share of the context: gen_hint / max_ctx) on top of its layers. Capacity is not balanced: a stage larger than its rank's budget streams from disk. Stages are whole
 * layers (a span of attention + MLP never straddles two ranks), balanced by fg_stage_split.
 * Every rank computes the same split from the same store and the same context, so no rank
 * tells another which layers it has.
 *
 * OPEN carries what rank 0 planned and every stage must share: the policy (block gbs x ngb,
 * cache compression, sparsity, schedule flags; the placement fractions only when --percent gave
 * them, else each rank places its own units in its own budget), the context, the compute mode.
 *
 * The link's buffers (three received: two posted ahead and one probed before the engine
 * opens; up to ngb + 2 in flight out; each at most a batch's prompt rows or a block's prompts;
 * on a device backend one more, where the rows sent come down from device memory) come out of
 * the rank's --ram-budget: the stage plans with the rest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "engine_int.h"
#include "fg_progress.h"

#define MSG_MAGIC 0x53504746u /* "FGPS" */

/* ---- the split ---- */

int fg_stage_split(const double *cost, uint32_t layers, double base0, uint32_t n, uint32_t *first,
                   fg_err *err)
{
    if (n < 1 || n - 1 > layers)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%u pipeline stages for %u layers: each rank "
                          "after the first needs a layer (at most %u ranks)", n, layers,
                          layers + 1);
    size_t L1 = (size_t)layers + 1;
    double *pre = malloc(L1 * sizeof *pre), *f = malloc((size_t)n * L1 * sizeof *f);
    uint32_t *cut = malloc((size_t)n * L1 * sizeof *cut);
    if (!pre || !f || !cut) {
        free(pre), free(f), free(cut);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    pre[0] = 0;
    for (uint32_t l = 0; l < layers; l++)
        pre[l + 1] = pre[l] + cost[l];
    /* f[s][j]: the least largest cost of stages 0..s covering layers [0, j) */
    for (uint32_t j = 0; j <= layers; j++)
        f[j] = base0 + pre[j], cut[j] = 0;
    for (uint32_t s = 1; s < n; s++)
        for (uint32_t j = 0; j <= layers; j++) {
            double best = -1;
            uint32_t at = 0;
            for (uint32_t i = 0; i + 1 <= j; i++) {
                double prev = f[(s - 1) * L1 + i], here = pre[j] - pre[i];
                double c = prev > here ? prev : here;
                if (prev >= 0 && (best < 0 || c < best))
                    best = c, at = i;
            }
            f[s * L1 + j] = best; /* -1: no way to give every stage a layer */
            cut[s * L1 + j] = at;
        }
    first[n] = layers;
    for (uint32_t s = n - 1; s > 0; s--)
        first[s] = cut[s * L1 + first[s + 1]];
    first[0] = 0;
    free(pre), free(f), free(cut);
    return FG_OK;
}

/* Bytes read and FLOPs a token step costs in unit u: a gathered table (the embedding) costs
 * only its few rows, a tied head reads the whole table again. */
static void unit_cost(const fg_engine *e, uint32_t u, double ctx, double *bytes, double *flops)
{
    const unit *un = &e->units[u];
    *bytes = *flops = 0;
    for (uint32_t i = 0; i < un->n_t; i++) {
        const wtensor *t = &e->tensors[un->t[i]];
        fg_access a = t->group == u ? t->spec.access : FG_ACCESS_STREAM;
        if (a != FG_ACCESS_GATHER)
            *bytes += (double)t->stored_bytes;
        if (a == FG_ACCESS_LINEAR || a == FG_ACCESS_STREAM)
            *flops += 2.0 * (double)t->spec.dims[0] * (double)t->spec.dims[1];
    }
    if (un->kind == FG_UNIT_ATTN) /* q.k and p.v over half the context */
        *flops += 4.0 * (ctx / 2) * e->hp.n_heads * e->hp.head_dim;
}

int fg_stage_setup(fg_engine *e, fg_err *err)
{
    uint32_t L = e->hp.n_layers;
    e->l0 = 0;
    e->l1 = L;
    if (!e->link)
        return FG_OK;
    double ctx = e->o.max_ctx ? e->o.max_ctx : e->hp.max_pos, tb = 0, tf = 0, b, f;
    double *lb = calloc(L + 1, sizeof *lb), *lf = calloc(L + 1, sizeof *lf), base_b = 0, base_f = 0;
    uint32_t *first = calloc((size_t)e->link->size + 1, sizeof *first);
    if (!lb || !lf || !first) {
        free(lb), free(lf), free(first);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    /* the layers compute every token of the context, the head only the generated ones */
    double head_share = e->o.gen_hint && e->o.gen_hint < ctx ? e->o.gen_hint / ctx : 1;
    for (uint32_t u = 0; u < e->n_units; u++) {
        unit_cost(e, u, ctx, &b, &f);
        int layer = e->units[u].kind == FG_UNIT_ATTN || e->units[u].kind == FG_UNIT_MLP;
        f *= layer ? 1 : head_share;
        *(layer ? &lb[e->units[u].layer] : &base_b) += b;
        *(layer ? &lf[e->units[u].layer] : &base_f) += f;
        tb += b, tf += f;
    }
    for (uint32_t l = 0; l < L; l++)
        lb[l] = lb[l] / (tb > 0 ? tb : 1) + lf[l] / (tf > 0 ? tf : 1);
    int rc = fg_stage_split(lb, L, base_b / (tb > 0 ? tb : 1) + base_f / (tf > 0 ? tf : 1),
                            (uint32_t)e->link->size, first, err);
    if (rc == FG_OK) {
        e->l0 = first[e->link->rank];
        e->l1 = first[e->link->rank + 1];
    }
    free(lb), free(lf), free(first);
    return rc;
}

/* ---- the plan ---- */

/* The most one message carries: a batch's prompt rows, or a block's prompts. */
static uint64_t max_rows(const fg_engine *e, uint32_t gbs, uint32_t ngb)
{
    uint64_t rows = (uint64_t)gbs * e->max_ctx * e->hp.hidden * 4;
    uint64_t n = (uint64_t)gbs * ngb, prompts = 4 * (1 + n + n * e->max_ctx);
    return rows > prompts ? rows : prompts;
}

static uint64_t max_message(const fg_engine *e, uint32_t gbs, uint32_t ngb)
{
    return sizeof(fg_stage_msg) + max_rows(e, gbs, ngb);
}

uint64_t fg_stage_max_rows(const fg_engine *e)
{
    return max_rows(e, e->plan.gbs, e->plan.ngb);
}

int fg_stage_plan(fg_engine *e, fg_err *err)
{
    uint64_t budget = e->o.ram_budget;
    int rc = fg_plan_make(&e->pm, &e->o.policy, e->max_ctx, budget, &e->plan, err);
    if (rc || !budget)
        return rc;
    /* the block fits the stage; now keep the link's buffers out of the budget */
    fg_policy p = e->o.policy;
    p.gbs = e->plan.gbs;
    p.ngb = e->plan.ngb;
    /* a device backend stages the rows it sends in host memory (e->sc.stage_host) */
    e->link_bytes = (p.ngb + 5 + (e->o.backend != FG_BACKEND_CPU)) * max_message(e, p.gbs, p.ngb);
    if (e->link_bytes >= budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB is too small for rank "
                          "%d: its link to the next stage alone needs %.0f MiB for gbs %u x ngb "
                          "%u", budget / FG_MIB, e->link->rank, e->link_bytes / FG_MIB, p.gbs, p.ngb);
    return fg_plan_make(&e->pm, &p, e->max_ctx, budget - e->link_bytes, &e->plan, err);
}

/* ---- messages ---- */

int fg_stage_send(const fg_link *l, uint32_t kind, uint32_t step, uint32_t batch, uint32_t first,
                  uint32_t end, const void *payload, size_t bytes, fg_err *err)
{
    fg_stage_msg h = {MSG_MAGIC, kind, step, batch, first, end, bytes};
    return l->send(l->ctx, &h, sizeof h, payload, bytes, err);
}

int fg_stage_msg_parse(const void *buf, size_t len, int rank, int from, fg_stage_msg *h,
                       const void **payload, fg_err *err)
{
    if (len >= sizeof *h)
        memcpy(h, buf, sizeof *h);
    if (len < sizeof *h || h->magic != MSG_MAGIC || h->kind < FG_MSG_OPEN ||
        h->kind > FG_MSG_QUIT || h->bytes != len - sizeof *h)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: a malformed pipeline message of %zu "
                          "bytes from rank %d", rank, len, from);
    *payload = (const uint8_t *)buf + sizeof *h;
    return FG_OK;
}

int fg_stage_recv(const fg_link *l, int forever, fg_stage_msg *h, const void **payload,
                  fg_err *err)
{
    const void *buf;
    size_t len;
    int rc = l->recv(l->ctx, forever, &buf, &len, err);
    return rc ? rc : fg_stage_msg_parse(buf, len, l->rank, (l->rank + l->size - 1) % l->size, h,
                                        payload, err);
}

int fg_stage_open_parse(const void *p, uint64_t bytes, int rank, fg_stage_open *o, fg_err *err)
{
    if (bytes != sizeof *o)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: an OPEN message of %llu bytes, not "
                          "%zu (the ranks run different builds?)", rank,
                          (unsigned long long)bytes, sizeof *o);
    memcpy(o, p, sizeof *o);
    const fg_policy *q = &o->policy;
    if (q->gbs < 1 || q->gbs > 4096 || q->ngb < 1 || q->ngb > 4096 || o->max_ctx < 2 ||
        o->gen_hint > o->max_ctx || (o->compute != FG_COMPUTE_F32 &&
                                     o->compute != FG_COMPUTE_INT8 &&
                                     o->compute != FG_COMPUTE_BF16))
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: an OPEN message out of range (block %u "
                          "x %u, context %u)", rank, q->gbs, q->ngb, o->max_ctx);
    return FG_OK;
}

int fg_stage_block_parse(const void *p, uint64_t bytes, uint32_t max_n, uint32_t max_ctx,
                         int rank, uint32_t *n, const uint32_t **lens, const int32_t **ids,
                         fg_err *err)
{
    const uint32_t *m = p;
    uint64_t words = bytes / 4, total = 0;
    *n = words ? m[0] : 0;
    if (bytes % 4 || !*n || *n > max_n || words < 1 + (uint64_t)*n)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: a malformed block message", rank);
    for (uint32_t s = 0; s < *n; s++) {
        if (m[1 + s] < 1 || m[1 + s] >= max_ctx)
            return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: a block message with a prompt of "
                              "%u ids (context %u)", rank, m[1 + s], max_ctx);
        total += m[1 + s];
    }
    if (total != words - 1 - *n)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: a block message whose prompts do not "
                          "add up", rank);
    *lens = m + 1;
    *ids = (const int32_t *)(m + 1 + *n);
    return FG_OK;
}

/* ---- OPEN ---- */

int fg_stage_ready(fg_engine *e, fg_err *err)
{
    size_t m = max_message(e, e->gbs, e->ngb);
    return e->link->expect ? e->link->expect(e->link->ctx, m, err) : FG_OK;
}

int fg_stage_announce(fg_engine *e, fg_err *err)
{
    fg_stage_open m;
    memset(&m, 0, sizeof m);
    m.policy = e->o.policy;
    m.policy.gbs = e->gbs;
    m.policy.ngb = e->ngb;
    m.max_ctx = e->max_ctx;
    m.gen_hint = e->o.gen_hint;
    m.compute = (int32_t)e->o.compute;
    m.have_fractions = e->o.policy.have_fractions;
    return fg_stage_send(e->link, FG_MSG_OPEN, 0, 0, 0, 0, &m, sizeof m, err);
}

int fg_stage_quit(const fg_link *link, fg_err *err)
{
    if (!link || link->size < 2)
        return FG_OK;
    return fg_stage_send(link, FG_MSG_QUIT, 0, 0, 0, 0, NULL, 0, err);
}

/* The last rank forwards nothing (its next is rank 0, which sent it). */
static int forward(const fg_link *l, const fg_stage_msg *h, const void *payload, fg_err *err)
{
    if (l->rank + 1 == l->size)
        return FG_OK;
    return fg_stage_send(l, h->kind, h->step, h->batch, h->first, h->end, payload, h->bytes,
                         err);
}

int fg_stage_await(const fg_link *link, fg_engine_opts *eo, int *quit, fg_err *err)
{
    fg_stage_msg h;
    const void *p;
    *quit = 0;
    /* rank 0 may take long before it opens (a job's first pass, quantizing): wait forever */
    int rc = fg_stage_recv(link, 1, &h, &p, err);
    if (rc == FG_OK && h.kind == FG_MSG_QUIT)
        *quit = 1;
    if (rc || h.kind == FG_MSG_QUIT)
        return rc ? rc : forward(link, &h, p, err);
    if (h.kind != FG_MSG_OPEN)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: expected the OPEN message first, got "
                          "kind %u", link->rank, h.kind);
    fg_stage_open m;
    if ((rc = fg_stage_open_parse(p, h.bytes, link->rank, &m, err)) ||
        (rc = forward(link, &h, p, err)))
        return rc;
    eo->policy = m.policy;
    if (!m.have_fractions)
        eo->policy.have_fractions = 0;
    eo->max_ctx = m.max_ctx;
    eo->gen_hint = m.gen_hint;
    eo->compute = (fg_compute)m.compute;
    eo->link = link;
    return FG_OK;
}

void fg_stage_info_get(const fg_engine *e, fg_stage_info *out)
{
    out->rank = e->link ? e->link->rank : 0;
    out->l0 = e->l0;
    out->l1 = e->l1;
    out->gbs = e->gbs;
    out->ngb = e->ngb;
    out->link_bytes = e->link_bytes;
}
