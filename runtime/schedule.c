/* schedule.c - the schedules over a range of the engine's units (paper Algorithm 1 and its
 * baseline), as one loop.
 *
 * A block is gbs x ngb sequences in ngb batches. One pass (`sweep`) runs token step i over the
 * units [u0, u1) for the batches [k0, k1): each span of units (one, or a layer's attention and
 * MLP without --sep-layer) has its weights loaded once (prefetched while the previous span
 * computed, when overlap is on) and used for every batch of the range before the next span:
 *  - the prefill (i = 0) runs batch by batch: each batch's activations and KV cache are acquired
 *    from the pager (loaded when homed on disk, the next batch's prefetched) and released dirty;
 *  - a decode step (i > 0) runs each Linear once over all the range's rows (one token a
 *    sequence) and attention batch by batch on each batch's KV chunk. At M = 8 an sgemm is bound
 *    by reading the weights; at M = 64 it runs 4x faster: the zig-zag schedule's weight reuse
 *    carried from disk -> RAM down to RAM -> cache;
 *  - the head stages every batch's last rows, streams the LM head once for the range, samples.
 * The zig-zag schedule sweeps each step over all batches; row-by-row (--schedule row, what
 * Accelerate and DeepSpeed do) sweeps one batch through all its steps before the next, so every
 * batch loads every unit again. Both are the same sweep with another batch range.
 *
 * The unit range and the row hooks are how a pipeline stage reuses this: a stage that starts
 * past the embedding takes its rows from `rows_in`, one that ends before the head hands them to
 * `rows_out`. A single process runs [0, n_units) with neither.
 *
 * A block's prompts are left-padded to the longest; the validity mask and positions follow
 * transformers (padding is never attended; positions count real tokens only). Finished
 * sequences keep their slot until the whole block is done (their outputs are ignored), so
 * shapes stay fixed and nothing is allocated per step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "fg_progress.h"

typedef struct block {
    uint32_t n, nb, P, G;  /* sequences, batches, padded prompt length, steps */
    fg_gen_seq *seqs;
    int32_t *last_pos;     /* [n] position of each sequence's newest token */
    const fg_gen_hooks *hooks;
    int scoring;           /* fg_engine_logits: the prefill only, head per position */
} block;

/* What one sweep covers. */
typedef struct sweep_args {
    uint32_t i;            /* token step */
    uint32_t k0, k1;       /* batches */
    uint32_t u0, u1;       /* units */
} sweep_args;

static uint32_t batch_size(const fg_engine *e, const block *b, uint32_t k)
{
    uint32_t start = k * e->gbs;
    return b->n - start < e->gbs ? b->n - start : e->gbs;
}

static size_t tok_off(const fg_engine *e, uint32_t k) { return (size_t)k * e->gbs * e->max_ctx; }

/* The KV cache of (batch k, layer) inside its acquired pager chunk (K rows, then V rows). */
static fg_kv_batch kv_view(const fg_engine *e, void *chunk)
{
    size_t rows = (size_t)e->gbs * e->max_ctx, rb = e->plan.kv_row;
    uint8_t *base = chunk;
    return (fg_kv_batch){base, base + rows * rb, e->kv_codec, rb, fg_model_kv_width(&e->hp),
                         e->max_ctx};
}

/* The step of batch k: ids/positions laid out [nseq, n_new]; validity [nseq, max_ctx]. */
static fg_step step_of(const fg_engine *e, const block *b, uint32_t k, uint32_t i, void *hidden)
{
    size_t o = tok_off(e, k);
    uint32_t n_new = i == 0 ? b->P : 1, pos0 = i == 0 ? 0 : b->P + i - 1;
    return (fg_step){batch_size(e, b, k), n_new, pos0, e->ids + o, e->pos + o, e->valid + o,
                     hidden, e->o.policy.attn_sparsity};
}

/* Attention core of batch k (its rows from workspace row row0): its KV chunk acquired (loaded
 * from disk when homed there; the next batch's prefetched meanwhile), used, released dirty. */
static int attend(fg_engine *e, const fg_step *s, uint32_t k, uint32_t layer, uint32_t k_end,
                  uint32_t row0, fg_err *err)
{
    fg_pager_view v;
    int rc = fg_engine_acquire(e, e->kv_first + k * e->hp.n_layers + layer, &v, err);
    if (rc)
        return rc;
    if (k + 1 < k_end)
        fg_engine_kv_prefetch(e, k + 1, layer);
    fg_kv_batch kv = kv_view(e, v.ptr);
    rc = e->arch->attn_core(e->be, &e->hp, s, &kv, row0, e->ws, err);
    return fg_engine_release(e, &v, 1, rc, err);
}

static void setup_prompts(fg_engine *e, block *b)
{
    for (uint32_t s = 0; s < b->n; s++) {
        uint32_t k = s / e->gbs, r = s % e->gbs, pad = b->P - b->seqs[s].n_prompt;
        size_t o = tok_off(e, k);
        int32_t *ids = e->ids + o + (size_t)r * b->P;
        uint8_t *valid = e->valid + o + (size_t)r * e->max_ctx;
        memset(valid, 0, e->max_ctx);
        for (uint32_t t = 0; t < b->P; t++) {
            ids[t] = t < pad ? (e->hp.pad_id >= 0 ? e->hp.pad_id : 0) : b->seqs[s].prompt[t - pad];
            valid[t] = t >= pad;
        }
        fg_model_positions(valid, b->P, e->pos + o + (size_t)r * b->P);
        b->last_pos[s] = (int32_t)b->seqs[s].n_prompt - 1;
        b->seqs[s].n_out = 0;
        b->seqs[s].finish = FG_FINISH_NONE;
    }
}

static int is_eos(const fg_hparams *hp, int32_t id)
{
    for (uint32_t i = 0; i < hp->n_eos; i++)
        if (hp->eos_ids[i] == id && id >= 0)
            return 1;
    return 0;
}

/* After step i: sample each sequence of batch k (its logits at row `row`), write the next
 * ids/positions/validity. */
static void advance(fg_engine *e, block *b, uint32_t k, uint32_t i, uint32_t row)
{
    uint32_t nseq = batch_size(e, b, k);
    size_t o = tok_off(e, k);
    const fg_gen_hooks *h = b->hooks;
    for (uint32_t r = 0; r < nseq; r++) {
        uint32_t s = k * e->gbs + r;
        fg_gen_seq *q = &b->seqs[s];
        const float *lg = e->logits + (size_t)(row + r) * e->hp.vocab_size;
        int32_t next = e->hp.eos_id >= 0 ? e->hp.eos_id : 0;
        if (q->finish == FG_FINISH_NONE) {
            fg_rng rng;
            fg_rng_seed(&rng, q->sample.seed, q->stream * 1000003ull + q->n_out);
            next = fg_sample(lg, e->hp.vocab_size, &q->sample, &rng, e->sampler);
            q->out[q->n_out++] = next;
            if (is_eos(&e->hp, next))
                q->finish = FG_FINISH_EOS;
            else if (h && h->stop && h->stop(h->stop_ctx, s, q->out, q->n_out))
                q->finish = FG_FINISH_STOP;
            else if (q->n_out >= q->max_new)
                q->finish = FG_FINISH_LENGTH;
        }
        /* the token fed at step i + 1 sits at cache position P + i */
        e->ids[o + r] = next;
        e->pos[o + r] = ++b->last_pos[s];
        e->valid[o + (size_t)r * e->max_ctx + b->P + i] = 1;
    }
}

/* Load the span starting at u (one unit, or attention + MLP), after starting the prefetch of
 * what comes next in [u0, u1); w[0..n) receive the units' weights. */
static int load_span(fg_engine *e, fg_unit_w *w, const sweep_args *a, uint32_t u, uint32_t *n,
                     fg_err *err)
{
    double t0 = fg_now();
    *n = fg_plan_span(&e->pm, &e->o.policy, u);
    if (e->units[u].kind == FG_UNIT_ATTN)
        fg_engine_kv_prefetch(e, a->k0, e->units[u].layer);
    uint32_t len = a->u1 - a->u0;
    for (uint32_t d = 0, v = u + *n; e->o.policy.overlap && d < e->plan.ahead; d++) {
        uint32_t at = a->u0 + (v - a->u0) % len; /* the range repeats at the next step */
        fg_engine_span_prefetch(e, at);
        v = at + fg_plan_span(&e->pm, &e->o.policy, at);
    }
    float *dst = e->small_f32;
    int rc = FG_OK;
    for (uint32_t k = 0; rc == FG_OK && k < *n; k++) {
        rc = fg_engine_unit_load(e, u + k, &w[k], dst, err);
        dst += e->plan_units[u + k].small_floats;
    }
    fg_engine_span(e, "load", t0, (int32_t)u, -1, (int32_t)a->i);
    return rc;
}

/* Prefill of unit u for batch k on its activations (acquired from the pager, the next batch's
 * prefetched; released dirty). */
static int prefill_unit(fg_engine *e, block *b, const fg_unit_w *w, uint32_t u, uint32_t k,
                        const sweep_args *a, fg_err *err)
{
    const unit *un = &e->units[u];
    fg_pager_view hv;
    int rc = fg_engine_acquire(e, e->act_first + k, &hv, err);
    if (rc)
        return rc;
    if (k + 1 < a->k1) {
        fg_pager_ticket t;
        fg_pager_prefetch(e->pager, e->act_first + k + 1, FG_TIER_HOST, &t, NULL);
    }
    fg_step s = step_of(e, b, k, 0, hv.ptr);
    switch (un->kind) {
    case FG_UNIT_EMBED: rc = e->arch->embed(e->be, &e->hp, w, &s, e->ws, err); break;
    case FG_UNIT_ATTN:
        rc = e->arch->attn_pre(e->be, &e->hp, w, &s, e->ws, err);
        if (rc == FG_OK)
            rc = attend(e, &s, k, un->layer, a->k1, 0, err);
        if (rc == FG_OK)
            rc = e->arch->attn_post(e->be, &e->hp, w, &s, e->ws, err);
        break;
    case FG_UNIT_MLP: rc = e->arch->mlp(e->be, &e->hp, w, &s, e->ws, err); break;
    default: /* stage the last position of each sequence for the head (rows k * gbs + r) */
        for (uint32_t r = 0; rc == FG_OK && r < s.n_seq; r++)
            rc = fg_engine_rows_copy(e, e->head_x + (size_t)(k * e->gbs + r) * e->hp.hidden,
                                     s.hidden + ((size_t)r * s.n_new + s.n_new - 1) * e->hp.hidden,
                                     hv.tier, (size_t)e->hp.hidden * 4, err);
        break;
    }
    return fg_engine_release(e, &hv, un->kind != FG_UNIT_HEAD, rc, err);
}

/* The decode step's rows of batches [k0, k1): sequence k0 * gbs + q at row q. */
static fg_step block_step(fg_engine *e, const block *b, const sweep_args *a)
{
    uint32_t first = a->k0 * e->gbs, end = a->k1 * e->gbs < b->n ? a->k1 * e->gbs : b->n;
    for (uint32_t q = first; q < end; q++) {
        size_t o = tok_off(e, q / e->gbs) + q % e->gbs;
        e->blk_ids[q - first] = e->ids[o];
        e->blk_pos[q - first] = e->pos[o];
    }
    return (fg_step){end - first, 1, b->P + a->i - 1, e->blk_ids, e->blk_pos, NULL,
                     e->blk_hidden, e->o.policy.attn_sparsity};
}

/* Decode of unit u over the whole range at once (the head is done by head_range). */
static int decode_unit(fg_engine *e, block *b, const fg_unit_w *w, uint32_t u, const fg_step *bs,
                       const sweep_args *a, fg_err *err)
{
    const unit *un = &e->units[u];
    int rc = FG_OK;
    switch (un->kind) {
    case FG_UNIT_EMBED: rc = e->arch->embed(e->be, &e->hp, w, bs, e->ws, err); break;
    case FG_UNIT_ATTN:
        rc = e->arch->attn_pre(e->be, &e->hp, w, bs, e->ws, err);
        for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++) {
            fg_step s = step_of(e, b, k, a->i, NULL);
            rc = attend(e, &s, k, un->layer, a->k1, (k - a->k0) * e->gbs, err);
        }
        if (rc == FG_OK)
            rc = e->arch->attn_post(e->be, &e->hp, w, bs, e->ws, err);
        break;
    case FG_UNIT_MLP: rc = e->arch->mlp(e->be, &e->hp, w, bs, e->ws, err); break;
    default:
        for (uint32_t q = 0; q < bs->n_seq; q++)
            memcpy(e->head_x + (size_t)(a->k0 * e->gbs + q) * e->hp.hidden,
                   bs->hidden + (size_t)q * e->hp.hidden, (size_t)e->hp.hidden * 4);
        break;
    }
    return rc;
}

/* The head over the staged rows of batches [k0, k1), then each batch samples. */
static int head_range(fg_engine *e, block *b, const fg_unit_w *w, const sweep_args *a,
                      fg_err *err)
{
    uint32_t first = a->k0 * e->gbs, end = a->k1 * e->gbs < b->n ? a->k1 * e->gbs : b->n;
    int rc = e->arch->head(e->be, &e->hp, w, e->head_x + (size_t)first * e->hp.hidden,
                           end - first, e->logits, e->ws, err);
    for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++)
        advance(e, b, k, a->i, (k - a->k0) * e->gbs);
    return rc;
}

static int compute_span(fg_engine *e, block *b, const fg_unit_w *w, uint32_t u, uint32_t n,
                        const sweep_args *a, fg_err *err)
{
    double t0 = fg_now();
    int rc = FG_OK;
    fg_step bs = a->i > 0 ? block_step(e, b, a) : (fg_step){0};
    for (uint32_t j = 0; rc == FG_OK && j < n; j++) {
        if (a->i > 0)
            rc = decode_unit(e, b, &w[j], u + j, &bs, a, err);
        else
            for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++)
                rc = prefill_unit(e, b, &w[j], u + j, k, a, err);
        if (rc == FG_OK && e->units[u + j].kind == FG_UNIT_HEAD && !b->scoring)
            rc = head_range(e, b, &w[j], a, err);
    }
    e->compute_s += fg_now() - t0;
    fg_engine_span(e, "compute", t0, (int32_t)u, a->k1 - a->k0 == 1 ? (int32_t)a->k0 : -1,
                   (int32_t)a->i);
    return rc;
}

/* One token step over units [u0, u1) and batches [k0, k1): the loop both schedules share. */
static int sweep(fg_engine *e, block *b, const sweep_args *a, fg_unit_w *last_head, fg_err *err)
{
    fg_unit_w w[2];
    for (uint32_t u = a->u0, n = 1; u < a->u1; u += n) {
        int rc = load_span(e, w, a, u, &n, err);
        if (rc == FG_OK)
            rc = compute_span(e, b, w, u, n, a, err);
        if (rc)
            return rc;
        if (last_head && e->units[u + n - 1].kind == FG_UNIT_HEAD)
            *last_head = w[n - 1];
    }
    return FG_OK;
}

static int live(const block *b, uint32_t first, uint32_t end)
{
    for (uint32_t s = first; s < end && s < b->n; s++)
        if (b->seqs[s].finish == FG_FINISH_NONE)
            return 1;
    return 0;
}

static uint64_t produced(const block *b)
{
    uint64_t t = 0;
    for (uint32_t s = 0; s < b->n; s++)
        t += b->seqs[s].n_out;
    return t;
}

/* Step i ended: its time goes to prefill (i = 0) or decode; report the tokens so far. */
static void end_step(const block *b, uint32_t i, double *t_step, fg_gen_stats *st)
{
    double now = fg_now();
    *(i == 0 ? &st->prefill_s : &st->decode_s) += now - *t_step;
    *t_step = now;
    if (b->hooks && b->hooks->tick)
        b->hooks->tick(b->hooks->tick_ctx, produced(b));
}

/* Batches [k0, k1) through every step: zig-zag calls it once with all batches, row-by-row once
 * per batch. */
static int run_batches(fg_engine *e, block *b, uint32_t k0, uint32_t k1, fg_gen_stats *st,
                       fg_err *err)
{
    double t_step = fg_now();
    for (uint32_t i = 0; i < b->G && live(b, k0 * e->gbs, k1 * e->gbs); i++) {
        sweep_args a = {i, k0, k1, 0, e->n_units};
        int rc = sweep(e, b, &a, NULL, err);
        if (rc)
            return rc;
        end_step(b, i, &t_step, st);
    }
    return FG_OK;
}

/* scoring: only the prompts must fit the context (nothing is generated) */
static int check_block(fg_engine *e, fg_gen_seq *seqs, uint32_t n, int scoring, block *b,
                       fg_err *err)
{
    if (n == 0 || n > e->gbs * e->ngb)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "a block holds 1..%u sequences, not %u",
                          e->gbs * e->ngb, n);
    memset(b, 0, sizeof *b);
    b->n = n;
    b->seqs = seqs;
    b->nb = (n + e->gbs - 1) / e->gbs;
    b->scoring = scoring;
    for (uint32_t s = 0; s < n; s++) {
        if (seqs[s].n_prompt == 0 || seqs[s].max_new == 0)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "sequence %u: empty prompt or no tokens "
                              "to generate", s);
        b->P = seqs[s].n_prompt > b->P ? seqs[s].n_prompt : b->P;
        b->G = seqs[s].max_new > b->G ? seqs[s].max_new : b->G;
    }
    if ((uint64_t)b->P + (scoring ? 0 : b->G) > e->max_ctx)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prompt of %u tokens + %u new exceeds the "
                          "context of %u (--max-context, model limit %u)", b->P, b->G,
                          e->max_ctx, e->hp.max_pos);
    return FG_OK;
}

int fg_engine_generate(fg_engine *e, fg_gen_seq *seqs, uint32_t n, const fg_gen_hooks *hooks,
                       fg_gen_stats *st, fg_err *err)
{
    block b;
    memset(st, 0, sizeof *st);
    int rc = check_block(e, seqs, n, 0, &b, err);
    if (rc)
        return rc;
    int32_t *last_pos = malloc((size_t)n * sizeof *last_pos);
    if (!last_pos)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    b.last_pos = last_pos;
    b.hooks = hooks;
    setup_prompts(e, &b);
    if (e->o.policy.schedule == FG_SCHEDULE_ROW)
        for (uint32_t k = 0; rc == FG_OK && k < b.nb; k++)
            rc = run_batches(e, &b, k, k + 1, st, err);
    else
        rc = run_batches(e, &b, 0, b.nb, st, err);
    st->new_tokens = produced(&b);
    free(last_pos);
    return rc;
}

/* ---- scoring ---- */

/* The head over every position of batch k's windows in slices of logit_rows rows: accumulate
 * the NLL of each next id, and copy the logits out when asked. */
static int score_batch(fg_engine *e, block *b, const fg_unit_w *w, uint32_t k, double *nll,
                       uint64_t *count, float *out, size_t out_stride, fg_err *err)
{
    fg_pager_view hv;
    int rc = fg_engine_acquire(e, e->act_first + k, &hv, err);
    if (rc)
        return rc;
    fg_step s = step_of(e, b, k, 0, hv.ptr);
    uint32_t V = e->hp.vocab_size, L = e->plan.logit_rows;
    for (uint32_t r = 0; rc == FG_OK && r < s.n_seq; r++) {
        uint32_t seq = k * e->gbs + r;
        const fg_gen_seq *q = &b->seqs[seq];
        uint32_t pad = b->P - q->n_prompt;
        /* row pad + t holds window position t; it predicts position t + 1 */
        for (uint32_t t0 = 0; rc == FG_OK && t0 < q->n_prompt; t0 += L) {
            uint32_t m = q->n_prompt - t0 < L ? q->n_prompt - t0 : L;
            rc = fg_engine_rows_copy(e, e->head_x,
                                     s.hidden + ((size_t)r * b->P + pad + t0) * e->hp.hidden,
                                     hv.tier, (size_t)m * e->hp.hidden * 4, err);
            if (rc == FG_OK)
                rc = e->arch->head(e->be, &e->hp, w, e->head_x, m, e->logits, e->ws, err);
            for (uint32_t j = 0; rc == FG_OK && j < m; j++) {
                const float *lg = e->logits + (size_t)j * V;
                if (out)
                    memcpy(out + seq * out_stride + (size_t)(t0 + j) * V, lg, (size_t)V * 4);
                if (t0 + j + 1 < q->n_prompt) {
                    *nll -= fg_log_prob(lg, V, q->prompt[t0 + j + 1]);
                    (*count)++;
                }
            }
        }
    }
    return fg_engine_release(e, &hv, 0, rc, err);
}

int fg_engine_logits(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                     uint32_t n, double *nll, uint64_t *count, float *out, size_t out_stride,
                     fg_err *err)
{
    fg_gen_seq *seqs = calloc(n + 1, sizeof *seqs);
    int32_t *dummy = calloc(n + 1, sizeof *dummy), *last_pos = calloc(n + 1, sizeof *last_pos);
    int rc = seqs && dummy && last_pos ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; rc == FG_OK && s < n; s++)
        seqs[s] = (fg_gen_seq){windows[s], lens[s], 1, {0, 0, 1, 0}, s, &dummy[s], 0, 0};
    block b;
    if (rc == FG_OK)
        rc = check_block(e, seqs, n, 1, &b, err);
    fg_unit_w head;
    if (rc == FG_OK) {
        b.last_pos = last_pos;
        setup_prompts(e, &b);
        sweep_args a = {0, 0, b.nb, 0, e->n_units};
        rc = sweep(e, &b, &a, &head, err); /* the head unit loads last; its w stays valid */
    }
    double dn = 0;
    uint64_t dc = 0;
    for (uint32_t k = 0; rc == FG_OK && k < b.nb; k++)
        rc = score_batch(e, &b, &head, k, nll ? nll : &dn, count ? count : &dc, out, out_stride,
                         err);
    free(seqs);
    free(dummy);
    free(last_pos);
    return rc;
}
