/* generate.c - the schedules over the engine's units (paper Algorithm 1 and its baseline).
 *
 * Zig-zag block schedule: for token step i, unit j (embed, attention/MLP of each layer, head),
 * batch k: the weights of j are loaded once (prefetched while j-1 computed, when overlap is on)
 * and used for every batch of the block before j+1. The prefill runs batch by batch (each
 * batch's activations and KV cache acquired from the pager, the next batch's prefetched); a
 * decode step runs the Linear layers once over the whole block and attention per batch (see
 * "the zig-zag decode step" below). Row-by-row (--schedule row, what Accelerate and DeepSpeed do):
 * for each batch, for each step, every unit loads its weights again.
 *
 * A block's prompts are left-padded to the longest; the validity mask and learned positions
 * follow transformers (padding is never attended; positions count real tokens only). Finished
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
} block;

static uint32_t batch_size(const fg_engine *e, const block *b, uint32_t k)
{
    uint32_t start = k * e->gbs;
    return b->n - start < e->gbs ? b->n - start : e->gbs;
}

static size_t tok_off(const fg_engine *e, uint32_t k) { return (size_t)k * e->gbs * e->max_ctx; }

/* The KV cache of (batch k, layer) inside its acquired pager chunk (K rows, then V rows). */
static fg_opt_kv kv_view(const fg_engine *e, void *chunk)
{
    size_t rows = (size_t)e->gbs * e->max_ctx;
    if (e->kv_row) {
        uint8_t *base = chunk;
        return (fg_opt_kv){NULL, NULL, e->max_ctx, &e->kv_codec, base, base + rows * e->kv_row,
                           e->kv_row, e->kv_tmp, e->kv_tmp + (size_t)e->max_ctx * e->hp.hidden};
    }
    float *base = chunk;
    return (fg_opt_kv){base, base + rows * e->hp.hidden, e->max_ctx, NULL, NULL, NULL, 0, NULL,
                       NULL};
}

/* Attention core of batch k (step s, its rows from workspace row row0): its KV chunk acquired
 * (loaded from disk when homed there; the next batch's prefetched meanwhile), used, released
 * dirty (written back when evicted). */
static int attend(fg_engine *e, const fg_opt_step *s, uint32_t k, uint32_t layer, uint32_t nb,
                  uint32_t row0, fg_err *err)
{
    uint32_t id = e->kv_first + k * e->hp.n_layers + layer;
    fg_pager_view v;
    double t0 = fg_now();
    int rc = fg_pager_acquire(e->pager, id, FG_TIER_DISK, &v, err);
    e->wait_s += fg_now() - t0;
    if (rc)
        return rc;
    if (k + 1 < nb)
        fg_engine_kv_prefetch(e, k + 1, layer);
    fg_opt_kv kv = kv_view(e, v.ptr);
    rc = fg_opt_attn_core(e->be, &e->hp, s, &kv, row0, e->ws, err);
    fg_err rerr;
    int rc2 = fg_pager_release(e->pager, &v, FG_PAGER_DIRTY, &rerr);
    if (rc == FG_OK && rc2) {
        if (err)
            *err = rerr;
        rc = rc2;
    }
    return rc;
}

/* Attention of batch k: projections, the core on its cache, out_proj. */
static int attention(fg_engine *e, const fg_opt_attn_w *w, const fg_opt_step *s, uint32_t k,
                     uint32_t layer, uint32_t nb, fg_err *err)
{
    int rc = fg_opt_attn_pre(e->be, &e->hp, w, s, e->ws, err);
    if (rc == FG_OK)
        rc = attend(e, s, k, layer, nb, 0, err);
    if (rc == FG_OK)
        rc = fg_opt_attn_post(e->be, &e->hp, w, s, e->ws, err);
    return rc;
}

/* The step of batch k: ids/positions laid out [nseq, n_new]; validity [nseq, max_ctx]. */
static fg_opt_step step_of(const fg_engine *e, const block *b, uint32_t k, uint32_t i,
                           void *hidden)
{
    size_t o = tok_off(e, k);
    uint32_t n_new = i == 0 ? b->P : 1, pos0 = i == 0 ? 0 : b->P + i - 1;
    return (fg_opt_step){batch_size(e, b, k), n_new, pos0, e->ids + o, e->pos + o, e->valid + o,
                         hidden, e->o.attn_sparsity};
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
            ids[t] = t < pad ? e->hp.pad_id : b->seqs[s].prompt[t - pad];
            valid[t] = t >= pad;
        }
        fg_opt_positions(valid, b->P, e->pos + o + (size_t)r * b->P);
        b->last_pos[s] = (int32_t)b->seqs[s].n_prompt - 1;
        b->seqs[s].n_out = 0;
        b->seqs[s].finish = FG_FINISH_NONE;
    }
}

/* After step i: sample each sequence of batch k, write the next ids/positions/validity. */
static void advance(fg_engine *e, block *b, uint32_t k, uint32_t i, fg_stop_fn stop, void *ctx)
{
    uint32_t nseq = batch_size(e, b, k);
    size_t o = tok_off(e, k);
    for (uint32_t r = 0; r < nseq; r++) {
        uint32_t s = k * e->gbs + r;
        fg_gen_seq *q = &b->seqs[s];
        const float *lg = e->logits + (size_t)s * e->hp.vocab_size;
        int32_t next = e->hp.eos_id;
        if (q->finish == FG_FINISH_NONE) {
            fg_rng rng;
            fg_rng_seed(&rng, q->sample.seed, q->stream * 1000003ull + q->n_out);
            next = fg_sample(lg, e->hp.vocab_size, &q->sample, &rng, e->sampler);
            q->out[q->n_out++] = next;
            if (next == e->hp.eos_id)
                q->finish = FG_FINISH_EOS;
            else if (stop && stop(ctx, s, q->out, q->n_out))
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

typedef struct weights {
    fg_opt_embed_w embed;
    fg_opt_attn_w attn;
    fg_opt_mlp_w mlp;
    fg_opt_head_w head;
} weights;

static void *wslot(weights *w, int kind)
{
    return kind == U_EMBED ? (void *)&w->embed : kind == U_ATTN ? (void *)&w->attn
         : kind == U_MLP ? (void *)&w->mlp : (void *)&w->head;
}

/* Stage the last position of each sequence of batch k for the LM head (rows k * gbs + r). */
static void stage_last_rows(fg_engine *e, const fg_opt_step *s, uint32_t k)
{
    for (uint32_t r = 0; r < s->n_seq; r++)
        fg_engine_head_put(e, k * e->gbs + r,
                           s->hidden + ((size_t)r * s->n_new + s->n_new - 1) * e->hp.hidden);
}

/* Compute unit u for batch k at step i (weights already loaded into w) on the batch's
 * activations, acquired from the pager (the next batch's prefetched) and released dirty. */
static int compute(fg_engine *e, block *b, weights *w, uint32_t u, uint32_t k, uint32_t i,
                   fg_err *err)
{
    const unit *un = &e->units[u];
    fg_pager_view hv;
    int rc = fg_engine_act_acquire(e, k, b->nb, &hv, err);
    if (rc)
        return rc;
    fg_opt_step s = step_of(e, b, k, i, hv.ptr);
    uint32_t n = s.n_seq * s.n_new;
    switch (un->kind) {
    case U_EMBED:
        rc = fg_engine_gather(e, s.ids, n, err);
        w->embed.tok_rows = e->tok_rows;
        if (rc == FG_OK)
            rc = fg_opt_embed(e->be, &e->hp, &w->embed, &s, e->ws, err);
        break;
    case U_ATTN: rc = attention(e, &w->attn, &s, k, un->layer, b->nb, err); break;
    case U_MLP: rc = fg_opt_mlp(e->be, &e->hp, &w->mlp, &s, e->ws, err); break;
    default: /* logits of each sequence's last position */
        stage_last_rows(e, &s, k);
        rc = fg_engine_head(e, &w->head, k * e->gbs, s.n_seq, err);
        break;
    }
    return fg_engine_act_release(e, &hv, un->kind != U_HEAD, rc, err);
}

/* Load the units starting at u that compute together (one, or attention + MLP), after
 * starting the prefetch of what comes next. Returns how many were loaded in *span. */
static int load_unit(fg_engine *e, weights *w, uint32_t u, uint32_t i, uint32_t *loaded,
                     fg_err *err)
{
    double t0 = fg_now();
    uint32_t n = fg_engine_span_of(e, u);
    if (e->units[u].kind == U_ATTN)
        fg_engine_kv_prefetch(e, 0, e->units[u].layer);
    for (uint32_t d = 0, v = (u + n) % e->n_units; e->o.overlap && d < e->ahead; d++) {
        uint32_t sp = fg_engine_span_of(e, v);
        for (uint32_t k = 0; k < sp; k++)
            fg_engine_unit_prefetch(e, (v + k) % e->n_units);
        v = (v + sp) % e->n_units;
    }
    float *dst = e->unit_f32;
    int rc = FG_OK;
    for (uint32_t k = 0; rc == FG_OK && k < n; k++) {
        rc = fg_engine_unit_load(e, u + k, wslot(w, e->units[u + k].kind), dst, err);
        dst += e->units[u + k].f32_floats;
    }
    fg_engine_span(e, "load", t0, (int32_t)u, -1, (int32_t)i);
    if (loaded)
        *loaded = n;
    return rc;
}

static int run_unit(fg_engine *e, block *b, weights *w, uint32_t u, uint32_t k, uint32_t i,
                    fg_stop_fn stop, void *ctx, fg_err *err)
{
    double t0 = fg_now();
    int rc = compute(e, b, w, u, k, i, err);
    e->compute_s += fg_now() - t0;
    fg_engine_span(e, "compute", t0, (int32_t)u, (int32_t)k, (int32_t)i);
    if (rc == FG_OK && e->units[u].kind == U_HEAD)
        advance(e, b, k, i, stop, ctx);
    return rc;
}

static int all_done(const block *b)
{
    for (uint32_t s = 0; s < b->n; s++)
        if (b->seqs[s].finish == FG_FINISH_NONE)
            return 0;
    return 1;
}

static uint64_t produced(const block *b)
{
    uint64_t t = 0;
    for (uint32_t s = 0; s < b->n; s++)
        t += b->seqs[s].n_out;
    return t;
}

/* Step i ended: its time goes to prefill (i = 0) or decode; report the tokens so far. */
static void end_step(const block *b, uint32_t i, double *t_step, fg_tick_fn tick, void *tctx,
                     fg_gen_stats *st)
{
    double now = fg_now();
    *(i == 0 ? &st->prefill_s : &st->decode_s) += now - *t_step;
    *t_step = now;
    if (tick)
        tick(tctx, produced(b));
}

/* The head of the zig-zag schedule: every batch's last rows staged, the LM head streamed once
 * for the whole block, then each batch samples. */
static int head_block(fg_engine *e, block *b, weights *w, uint32_t i, fg_stop_fn stop, void *ctx,
                      fg_err *err)
{
    double t0 = fg_now();
    int rc = FG_OK;
    for (uint32_t k = 0; rc == FG_OK && k < b->nb; k++) {
        fg_pager_view hv;
        rc = fg_engine_act_acquire(e, k, b->nb, &hv, err);
        if (rc)
            break;
        fg_opt_step s = step_of(e, b, k, i, hv.ptr);
        stage_last_rows(e, &s, k);
        rc = fg_engine_act_release(e, &hv, 0, rc, err);
    }
    if (rc == FG_OK)
        rc = fg_engine_head(e, &w->head, 0, b->n, err);
    e->compute_s += fg_now() - t0;
    fg_engine_span(e, "compute", t0, (int32_t)(e->n_units - 1), -1, (int32_t)i);
    for (uint32_t k = 0; rc == FG_OK && k < b->nb; k++)
        advance(e, b, k, i, stop, ctx);
    return rc;
}

/* ---- the zig-zag decode step, one GEMM per Linear for the whole block ----
 *
 * At a decode step every batch of the block is at the same (step, unit), each with one new token
 * a sequence, so the Linear layers (q/k/v/out projections, fc1, fc2) run once over all
 * gbs x ngb rows: the weights stream through the caches once per block instead of once per
 * batch, which is the zig-zag schedule's weight reuse carried from disk -> RAM down to
 * RAM -> cache (at M = 8 sgemm is bound by reading the weights; at M = 64 it runs 4x faster).
 * Attention stays per batch on that batch's KV chunk, acquired and prefetched as before. The
 * block's decode rows (gbs x ngb x hidden f32) live in e->blk_hidden, in RAM, for the step;
 * the activation chunks carry the prefill's rows (gbs x prompt per batch), which are what the
 * policy's activation fractions are about. The row-by-row schedule cannot do this: its
 * batches are never at the same step. */

static fg_opt_step block_step(fg_engine *e, const block *b, uint32_t i)
{
    for (uint32_t q = 0; q < b->n; q++) {
        size_t o = tok_off(e, q / e->gbs) + q % e->gbs;
        e->blk_ids[q] = e->ids[o];
        e->blk_pos[q] = e->pos[o];
    }
    return (fg_opt_step){b->n, 1, b->P + i - 1, e->blk_ids, e->blk_pos, NULL, e->blk_hidden,
                         e->o.attn_sparsity};
}

static int block_unit(fg_engine *e, block *b, weights *w, uint32_t u, uint32_t i,
                      const fg_opt_step *bs, fg_stop_fn stop, void *ctx, fg_err *err)
{
    const unit *un = &e->units[u];
    double t0 = fg_now();
    int rc = FG_OK;
    switch (un->kind) {
    case U_EMBED:
        rc = fg_engine_gather(e, bs->ids, bs->n_seq, err);
        w->embed.tok_rows = e->tok_rows;
        if (rc == FG_OK)
            rc = fg_opt_embed(e->be, &e->hp, &w->embed, bs, e->ws, err);
        break;
    case U_ATTN:
        rc = fg_opt_attn_pre(e->be, &e->hp, &w->attn, bs, e->ws, err);
        for (uint32_t k = 0; rc == FG_OK && k < b->nb; k++) {
            fg_opt_step s = step_of(e, b, k, i, NULL);
            rc = attend(e, &s, k, un->layer, b->nb, k * e->gbs, err);
        }
        if (rc == FG_OK)
            rc = fg_opt_attn_post(e->be, &e->hp, &w->attn, bs, e->ws, err);
        break;
    case U_MLP: rc = fg_opt_mlp(e->be, &e->hp, &w->mlp, bs, e->ws, err); break;
    default:
        for (uint32_t q = 0; q < b->n; q++)
            fg_engine_head_put(e, q, bs->hidden + (size_t)q * e->hp.hidden);
        rc = fg_engine_head(e, &w->head, 0, b->n, err);
        break;
    }
    e->compute_s += fg_now() - t0;
    fg_engine_span(e, "compute", t0, (int32_t)u, -1, (int32_t)i);
    for (uint32_t k = 0; rc == FG_OK && un->kind == U_HEAD && k < b->nb; k++)
        advance(e, b, k, i, stop, ctx);
    return rc;
}

static int zigzag(fg_engine *e, block *b, fg_stop_fn stop, void *sctx, fg_tick_fn tick,
                  void *tctx, fg_gen_stats *st, fg_err *err)
{
    weights w;
    memset(&w, 0, sizeof w);
    double t_step = fg_now();
    for (uint32_t i = 0; i < b->G && !all_done(b); i++) {
        fg_opt_step bs = i > 0 ? block_step(e, b, i) : (fg_opt_step){0};
        for (uint32_t u = 0, n = 1; u < e->n_units; u += n) {
            int rc = load_unit(e, &w, u, i, &n, err);
            if (i > 0) /* decode: the block at once */
                for (uint32_t j = 0; rc == FG_OK && j < n; j++)
                    rc = block_unit(e, b, &w, u + j, i, &bs, stop, sctx, err);
            else if (rc == FG_OK && u + 1 == e->n_units)
                rc = head_block(e, b, &w, i, stop, sctx, err);
            else /* prefill: batch by batch */
                for (uint32_t k = 0; rc == FG_OK && k < b->nb; k++)
                    for (uint32_t j = 0; rc == FG_OK && j < n; j++)
                        rc = run_unit(e, b, &w, u + j, k, i, stop, sctx, err);
            if (rc)
                return rc;
        }
        end_step(b, i, &t_step, tick, tctx, st);
    }
    return FG_OK;
}

static int row_by_row(fg_engine *e, block *b, fg_stop_fn stop, void *sctx, fg_tick_fn tick,
                      void *tctx, fg_gen_stats *st, fg_err *err)
{
    weights w;
    memset(&w, 0, sizeof w);
    for (uint32_t k = 0; k < b->nb; k++) {
        double t_step = fg_now();
        for (uint32_t i = 0; i < b->G; i++) {
            int live = 0;
            for (uint32_t r = 0; r < batch_size(e, b, k); r++)
                live |= b->seqs[k * e->gbs + r].finish == FG_FINISH_NONE;
            if (!live)
                break;
            for (uint32_t u = 0, n = 1; u < e->n_units; u += n) {
                int rc = load_unit(e, &w, u, i, &n, err);
                for (uint32_t j = 0; rc == FG_OK && j < n; j++)
                    rc = run_unit(e, b, &w, u + j, k, i, stop, sctx, err);
                if (rc)
                    return rc;
            }
            end_step(b, i, &t_step, tick, tctx, st);
        }
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

int fg_engine_generate(fg_engine *e, fg_gen_seq *seqs, uint32_t n, fg_stop_fn stop,
                       void *stop_ctx, fg_tick_fn tick, void *tick_ctx, fg_gen_stats *st,
                       fg_err *err)
{
    block b;
    int rc = check_block(e, seqs, n, 0, &b, err);
    if (rc)
        return rc;
    int32_t last_pos[n];
    b.last_pos = last_pos;
    memset(st, 0, sizeof *st);
    setup_prompts(e, &b);
    rc = e->o.row_schedule ? row_by_row(e, &b, stop, stop_ctx, tick, tick_ctx, st, err)
                           : zigzag(e, &b, stop, stop_ctx, tick, tick_ctx, st, err);
    st->new_tokens = produced(&b);
    return rc;
}

/* ---- perplexity ---- */

/* Head over every position of batch k's windows in slices of logit_rows rows: accumulate the
 * NLL of each next id, and copy the logits out when asked (out[w * out_stride + t * V]). */
static int score_batch(fg_engine *e, block *b, weights *w, uint32_t k, double *nll,
                       uint64_t *count, float *out, size_t out_stride, fg_err *err)
{
    fg_pager_view hv;
    int rc = fg_engine_act_acquire(e, k, b->nb, &hv, err);
    if (rc)
        return rc;
    fg_opt_step s = step_of(e, b, k, 0, hv.ptr);
    uint32_t V = e->hp.vocab_size;
    for (uint32_t r = 0; rc == FG_OK && r < s.n_seq; r++) {
        uint32_t seq = k * e->gbs + r;
        const fg_gen_seq *q = &b->seqs[seq];
        uint32_t pad = b->P - q->n_prompt;
        /* row pad + t holds window position t; it predicts position t + 1 */
        for (uint32_t t0 = 0; rc == FG_OK && t0 < q->n_prompt; t0 += e->logit_rows) {
            uint32_t m = q->n_prompt - t0 < e->logit_rows ? q->n_prompt - t0 : e->logit_rows;
            const float *hid = s.hidden + ((size_t)r * b->P + pad + t0) * e->hp.hidden;
            for (uint32_t j = 0; j < m; j++)
                fg_engine_head_put(e, j, hid + (size_t)j * e->hp.hidden);
            rc = fg_engine_head(e, &w->head, 0, m, err);
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
    return fg_engine_act_release(e, &hv, 0, rc, err);
}

int fg_engine_logits(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                     uint32_t n, double *nll, uint64_t *count, float *out, size_t out_stride,
                     fg_err *err)
{
    fg_gen_seq seqs[n];
    int32_t dummy[n];
    for (uint32_t s = 0; s < n; s++)
        seqs[s] = (fg_gen_seq){windows[s], lens[s], 1, {0, 0, 1, 0}, s, &dummy[s], 0, 0};
    block b;
    int rc = check_block(e, seqs, n, 1, &b, err);
    if (rc)
        return rc;
    int32_t last_pos[n];
    b.last_pos = last_pos;
    setup_prompts(e, &b);
    weights w;
    memset(&w, 0, sizeof w);
    for (uint32_t u = 0, nu = 1; u + 1 < e->n_units && rc == FG_OK; u += nu) {
        rc = load_unit(e, &w, u, 0, &nu, err);
        for (uint32_t k = 0; rc == FG_OK && k < b.nb; k++)
            for (uint32_t j = 0; rc == FG_OK && j < nu; j++)
                rc = compute(e, &b, &w, u + j, k, 0, err);
    }
    if (rc == FG_OK)
        rc = load_unit(e, &w, e->n_units - 1, 0, NULL, err);
    double dn = 0;
    uint64_t dc = 0;
    for (uint32_t k = 0; rc == FG_OK && k < b.nb; k++)
        rc = score_batch(e, &b, &w, k, nll ? nll : &dn, count ? count : &dc, out, out_stride, err);
    return rc;
}

int fg_engine_score(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                    uint32_t n, double *nll, uint64_t *count, fg_err *err)
{
    return fg_engine_logits(e, windows, lens, n, nll, count, NULL, 0, err);
}
