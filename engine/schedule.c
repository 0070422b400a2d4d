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
 * The unit range is how a pipeline stage (stage.h, the end of this file) reuses this: a stage
 * sweeps its own units for one micro-batch (a group of batches) at a time, its rows received
 * before the sweep and sent after it. A single process runs [0, n_units).
 *
 * A block's prompts are left-padded to the longest; the validity mask and positions follow
 * transformers (padding is never attended; positions count real tokens only). Finished
 * sequences keep their slot until the whole block is done (their outputs are ignored), so
 * shapes stay fixed and nothing is allocated per step.
 *
 * With a prefix cache (prefix_kv.c) the prefill is chunked: the cached rows of every sequence
 * are loaded into its KV cache first and the prefill computes cache slots [s0, P) only, the
 * attention reading rows [0, s0) as it reads the rows of earlier steps in a decode. Scoring
 * (fg_engine_score) chunks its prefill the same way with rows of shared contexts: the run held
 * from the previous call, a level-0 pass (the run all its windows begin with), the donors'
 * pass (each group's context); "the prefill passes of a scoring call" below.
 *
 * A schedule sees the engine through one context, fg_sched (sched_int.h), and the engine's
 * calls declared beside it; it never sees struct fg_engine, and nothing below calls back up
 * into this file (engine.c's top comment has the order of the engine's files).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"
#include "fg_progress.h"

typedef struct block {
    uint32_t n, nb, P, G;  /* sequences, batches, padded prompt length, steps */
    uint32_t s0;           /* the prefill computes cache slots [s0, P): the rows before came
                              from the prefix cache (prefix_kv.c) */
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

static uint32_t batch_size(const fg_sched *sc, const block *b, uint32_t k)
{
    uint32_t start = k * sc->gbs;
    return b->n - start < sc->gbs ? b->n - start : sc->gbs;
}

/* The sequences of batches [k0, k1): [*first, *end) of the block's. */
static void seq_range(const fg_sched *sc, const block *b, const sweep_args *a, uint32_t *first,
                      uint32_t *end)
{
    *first = a->k0 * sc->gbs;
    *end = a->k1 * sc->gbs < b->n ? a->k1 * sc->gbs : b->n;
}

static size_t tok_off(const fg_sched *sc, uint32_t k) { return (size_t)k * sc->gbs * sc->max_ctx; }

/* The step of batch k: ids/positions laid out [nseq, n_new]; validity [nseq, max_ctx]. The ops
 * read the device twins of positions and validity; the ids (a gather's few rows) are uploaded
 * by the embedding's gather. */
static fg_step step_of(const fg_sched *sc, const block *b, uint32_t k, uint32_t i, void *hidden)
{
    size_t o = tok_off(sc, k);
    uint32_t n_new = i == 0 ? b->P - b->s0 : 1, pos0 = i == 0 ? b->s0 : b->P + i - 1;
    return (fg_step){batch_size(sc, b, k), n_new, pos0, sc->ids + o, sc->d_pos + o, sc->d_valid + o,
                     hidden, sc->policy->attn_sparsity, sc->pos + o};
}

/* Attention core of batch k (its rows from workspace row row0): its KV chunk acquired (loaded
 * from disk when homed there; the next batch's prefetched meanwhile), used, released dirty
 * (and, homed on disk, written behind while the next batches compute). */
static int attend(fg_sched *sc, const fg_unit_w *w, const fg_step *s, uint32_t k,
                  uint32_t layer, uint32_t k_end, uint32_t row0, fg_err *err)
{
    fg_pager_view v;
    int rc = fg_engine_kv_acquire(sc->e, k, layer, &v, err);
    if (rc)
        return rc;
    if (k + 1 < k_end)
        fg_engine_kv_prefetch(sc->e, k + 1, layer);
    fg_kv_batch kv = fg_engine_kv_view(sc->e, v.ptr, layer);
    rc = sc->arch->attn_core(sc->be, sc->hp, w, s, &kv, row0, sc->ws, err);
    return fg_engine_release(sc->e, &v, FG_ENGINE_STORE, rc, err);
}

/* The prefill's ids and positions of slots [s0, P), [nseq, P - s0]; validity of the whole
 * context; the positions and validity of the block's batches copied to their device twins.
 * Validity is final here: [0, P) marks the prompt (left padding 0), and every position from P
 * on is 1, because each decode step writes the row of position P + i and attention reads rows
 * only up to its query's position (causal), so a row is read only once it is a real token.
 * Hence no step uploads validity again. */
static int setup_prompts(fg_sched *sc, block *b, fg_err *err)
{
    uint32_t W = b->P - b->s0;
    for (uint32_t s = 0; s < b->n; s++) {
        uint32_t k = s / sc->gbs, r = s % sc->gbs, pad = b->P - b->seqs[s].n_prompt;
        size_t o = tok_off(sc, k);
        int32_t *ids = sc->ids + o + (size_t)r * W, *pos = sc->pos + o + (size_t)r * W;
        uint8_t *valid = sc->valid + o + (size_t)r * sc->max_ctx;
        memset(valid, 0, sc->max_ctx);
        for (uint32_t t = 0; t < b->P; t++) {
            if (t >= b->s0)
                ids[t - b->s0] = t < pad ? (sc->hp->pad_id >= 0 ? sc->hp->pad_id : 0)
                                 : b->seqs[s].prompt[t - pad];
            valid[t] = t >= pad;
        }
        memset(valid + b->P, 1, sc->max_ctx - b->P);
        /* rows are set up in order: row r's positions may spill into row r + 1's, not yet set */
        fg_model_positions(valid, b->P, pos);
        memmove(pos, pos + b->s0, (size_t)W * sizeof *pos);
        b->last_pos[s] = (int32_t)b->seqs[s].n_prompt - 1;
        b->seqs[s].n_out = 0;
        b->seqs[s].finish = FG_FINISH_NONE;
    }
    size_t n = (size_t)b->nb * sc->gbs * sc->max_ctx;
    sc->blk_key = 0;
    int rc = fg_engine_up(sc->e, sc->d_valid, sc->valid, n, err);
    return rc ? rc : fg_engine_up(sc->e, sc->d_pos, sc->pos, n * 4, err);
}

static int is_eos(const fg_hparams *hp, int32_t id)
{
    for (uint32_t i = 0; i < hp->n_eos; i++)
        if (hp->eos_ids[i] == id && id >= 0)
            return 1;
    return 0;
}

/* Whether every live sequence of batch k draws its next token as the argmax of its raw logits
 * (temperature 0, fg_sample's greedy case, no penalty, no EOS held back by min_tokens, and no
 * hook that reads the logits): then the
 * backend takes the argmax where the logits are and only the ids cross the link. */
static int batch_greedy(const fg_sched *sc, const block *b, uint32_t k, uint32_t nseq)
{
    if (b->hooks && b->hooks->logits)
        return 0;
    for (uint32_t r = 0; r < nseq; r++) {
        const fg_gen_seq *q = &b->seqs[k * sc->gbs + r];
        if (q->finish == FG_FINISH_NONE && sc->hp->vocab_size > 1 &&
            (q->sample.temperature != 0.0f || fg_sample_uses_hist(&q->sample) ||
             (q->n_out < q->min_tokens && !q->ignore_eos)))
            return 0;
    }
    return 1;
}

/* The next token of live sequence s (batch row r, logits row `row`): from the argmax the
 * backend returned for a greedy batch, else sampled from its logits brought to the host. */
static int next_token(fg_sched *sc, block *b, uint32_t s, uint32_t row, int greedy,
                      int32_t *next, fg_err *err)
{
    fg_gen_seq *q = &b->seqs[s];
    const fg_gen_hooks *h = b->hooks;
    uint32_t V = sc->hp->vocab_size;
    if (greedy) {
        *next = sc->greedy_ids[row];
        return FG_OK;
    }
    float *lg = sc->logits_host + (size_t)row * V;
    int rc = fg_engine_down(sc->e, lg, sc->logits + (size_t)row * V, (size_t)V * 4, err);
    if (rc)
        return rc;
    fg_rng rng;
    fg_rng_seed(&rng, q->sample.seed, q->stream * 1000003ull + q->n_out);
    if (h && h->logits) /* the raw logits: log-probs are the model's */
        h->logits(h->logits_ctx, s, q->n_out, lg, V);
    for (uint32_t i = 0; q->n_out < q->min_tokens && !q->ignore_eos && i < sc->hp->n_eos; i++)
        if (sc->hp->eos_ids[i] >= 0 && (uint32_t)sc->hp->eos_ids[i] < V)
            lg[sc->hp->eos_ids[i]] = -INFINITY;
    fg_sample_hist hist = {q->prompt, q->n_prompt, q->out, q->n_out};
    *next = fg_sample_hist_pick(lg, V, &q->sample, &hist, &rng, sc->sampler);
    return FG_OK;
}

/* After a step: the next token of each live sequence of batch k (its logits at row `row` + r),
 * then the next ids and positions (the validity of the new position is already set: see
 * setup_prompts). */
static int advance(fg_sched *sc, block *b, uint32_t k, uint32_t row, fg_err *err)
{
    uint32_t nseq = batch_size(sc, b, k), V = sc->hp->vocab_size;
    size_t o = tok_off(sc, k);
    const fg_gen_hooks *h = b->hooks;
    int greedy = batch_greedy(sc, b, k, nseq), rc = FG_OK;
    if (greedy)
        rc = sc->be->iface->argmax(sc->be, sc->logits + (size_t)row * V, nseq, V,
                                  sc->greedy_ids + row, err);
    for (uint32_t r = 0; rc == FG_OK && r < nseq; r++) {
        uint32_t s = k * sc->gbs + r;
        fg_gen_seq *q = &b->seqs[s];
        int32_t next = sc->hp->eos_id >= 0 ? sc->hp->eos_id : 0;
        if (q->finish == FG_FINISH_NONE &&
            (rc = next_token(sc, b, s, row + r, greedy, &next, err)))
            break;
        if (q->finish == FG_FINISH_NONE) {
            q->out[q->n_out++] = next;
            if (!q->ignore_eos && is_eos(sc->hp, next))
                q->finish = FG_FINISH_EOS;
            else if (h && h->stop && h->stop(h->stop_ctx, s, q->out, q->n_out))
                q->finish = FG_FINISH_STOP;
            else if (q->n_out >= q->max_new)
                q->finish = FG_FINISH_LENGTH;
        }
        /* the token fed at step i + 1 sits at cache position P + i */
        sc->ids[o + r] = next;
        sc->pos[o + r] = ++b->last_pos[s];
    }
    return rc;
}

/* Load the span starting at u (one unit, or attention + MLP), after starting the prefetch of
 * what comes next in [u0, u1); w[0..n) receive the units' weights. tok: the tokens of this
 * step over the range, then of the next step (what a span prefetched past the range's end
 * computes), which decide whether a sparse MLP's experts are prefetched with it. */
static int load_span(fg_sched *sc, fg_unit_w *w, const sweep_args *a, uint32_t u,
                     const uint64_t tok[2], uint32_t *n, fg_err *err)
{
    double t0 = fg_now();
    *n = fg_engine_span_len(sc->e, u);
    if (sc->units[u].kind == FG_UNIT_ATTN)
        fg_engine_kv_prefetch(sc->e, a->k0, sc->units[u].layer);
    uint32_t len = a->u1 - a->u0;
    for (uint32_t d = 0, v = u + *n; sc->policy->overlap && d < sc->ahead; d++) {
        uint32_t at = a->u0 + (v - a->u0) % len; /* the range repeats at the next step */
        fg_engine_span_prefetch(sc->e, at, tok[at <= u]);
        v = at + fg_engine_span_len(sc->e, at);
    }
    int rc = fg_engine_span_load(sc->e, u, *n, w, err);
    fg_engine_span(sc->e, "load", t0, (int32_t)u, -1, (int32_t)a->i);
    return rc;
}

/* Prefill of unit u for batch k on its activations (acquired from the pager, the next batch's
 * prefetched; released dirty). */
static int prefill_unit(fg_sched *sc, block *b, const fg_unit_w *w, uint32_t u, uint32_t k,
                        const sweep_args *a, fg_err *err)
{
    const fg_plan_unit_tensors *un = &sc->units[u];
    fg_pager_view hv;
    int rc = fg_engine_act_acquire(sc->e, k, &hv, err);
    if (rc)
        return rc;
    if (k + 1 < a->k1)
        fg_engine_act_prefetch(sc->e, k + 1);
    fg_step s = step_of(sc, b, k, 0, hv.ptr);
    switch (un->kind) {
    case FG_UNIT_EMBED: rc = sc->arch->embed(sc->be, sc->hp, w, &s, sc->ws, err); break;
    case FG_UNIT_ATTN:
        rc = sc->arch->attn_pre(sc->be, sc->hp, w, &s, sc->ws, err);
        if (rc == FG_OK)
            rc = attend(sc, w, &s, k, un->layer, a->k1, 0, err);
        if (rc == FG_OK)
            rc = sc->arch->attn_post(sc->be, sc->hp, w, &s, sc->ws, err);
        break;
    case FG_UNIT_MLP: rc = sc->arch->mlp(sc->be, sc->hp, w, &s, sc->ws, err); break;
    default: /* stage the last position of each sequence for the head (rows k * gbs + r) */
        for (uint32_t r = 0; rc == FG_OK && r < s.n_seq; r++)
            rc = fg_engine_rows_copy(sc->e, sc->head_x + (size_t)(k * sc->gbs + r) * sc->hp->hidden,
                                     s.hidden + ((size_t)r * s.n_new + s.n_new - 1) * sc->hp->hidden,
                                     hv.tier, (size_t)sc->hp->hidden * 4, err);
        break;
    }
    return fg_engine_release(sc->e, &hv, un->kind != FG_UNIT_HEAD, rc, err);
}

/* The decode step's rows of batches [k0, k1): sequence k0 * gbs + q at row q. The positions'
 * device twin is written once per (step, batches), not once per span. */
static int block_step(fg_sched *sc, const block *b, const sweep_args *a, fg_step *bs,
                      fg_err *err)
{
    uint32_t first, end;
    seq_range(sc, b, a, &first, &end);
    for (uint32_t q = first; q < end; q++) {
        size_t o = tok_off(sc, q / sc->gbs) + q % sc->gbs;
        sc->blk_ids[q - first] = sc->ids[o];
        sc->blk_pos[q - first] = sc->pos[o];
    }
    *bs = (fg_step){end - first, 1, b->P + a->i - 1, sc->blk_ids, sc->d_blk_pos, NULL,
                    sc->blk_hidden, sc->policy->attn_sparsity, sc->blk_pos};
    uint64_t key = ((uint64_t)a->i << 40 | (uint64_t)a->k0 << 20 | a->k1) + 1;
    if (key == sc->blk_key)
        return FG_OK;
    sc->blk_key = key;
    return fg_engine_up(sc->e, sc->d_blk_pos, sc->blk_pos, (size_t)(end - first) * 4, err);
}

/* Decode of unit u over the whole range at once (the head is done by head_range). */
static int decode_unit(fg_sched *sc, block *b, const fg_unit_w *w, uint32_t u, const fg_step *bs,
                       const sweep_args *a, fg_err *err)
{
    const fg_plan_unit_tensors *un = &sc->units[u];
    int rc = FG_OK;
    switch (un->kind) {
    case FG_UNIT_EMBED: rc = sc->arch->embed(sc->be, sc->hp, w, bs, sc->ws, err); break;
    case FG_UNIT_ATTN:
        rc = sc->arch->attn_pre(sc->be, sc->hp, w, bs, sc->ws, err);
        for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++) {
            fg_step s = step_of(sc, b, k, a->i, NULL);
            rc = attend(sc, w, &s, k, un->layer, a->k1, (k - a->k0) * sc->gbs, err);
        }
        if (rc == FG_OK)
            rc = sc->arch->attn_post(sc->be, sc->hp, w, bs, sc->ws, err);
        break;
    case FG_UNIT_MLP: rc = sc->arch->mlp(sc->be, sc->hp, w, bs, sc->ws, err); break;
    default: /* the rows for the head: one copy on the device */
        rc = fg_engine_dcopy(sc->e, sc->head_x + (size_t)a->k0 * sc->gbs * sc->hp->hidden, bs->hidden,
                             (size_t)bs->n_seq * sc->hp->hidden * 4, err);
        break;
    }
    return rc;
}

/* The head over the staged rows of batches [k0, k1), then each batch samples. */
static int head_range(fg_sched *sc, block *b, const fg_unit_w *w, const sweep_args *a,
                      fg_err *err)
{
    uint32_t first = a->k0 * sc->gbs, end = a->k1 * sc->gbs < b->n ? a->k1 * sc->gbs : b->n;
    int rc = sc->arch->head(sc->be, sc->hp, w, sc->head_x + (size_t)first * sc->hp->hidden,
                           end - first, sc->logits, sc->ws, err);
    for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++)
        rc = advance(sc, b, k, (k - a->k0) * sc->gbs, err);
    return rc;
}

static int compute_span(fg_sched *sc, block *b, const fg_unit_w *w, uint32_t u, uint32_t n,
                        const sweep_args *a, fg_err *err)
{
    double t0 = fg_now();
    int rc = FG_OK;
    fg_step bs = {0};
    if (a->i > 0)
        rc = block_step(sc, b, a, &bs, err);
    for (uint32_t j = 0; rc == FG_OK && j < n; j++) {
        if (a->i > 0)
            rc = decode_unit(sc, b, &w[j], u + j, &bs, a, err);
        else
            for (uint32_t k = a->k0; rc == FG_OK && k < a->k1; k++)
                rc = prefill_unit(sc, b, &w[j], u + j, k, a, err);
        if (rc == FG_OK && sc->units[u + j].kind == FG_UNIT_HEAD && !b->scoring)
            rc = head_range(sc, b, &w[j], a, err);
    }
    /* a traced span ends when its kernels are done, not queued (a device backend's ops on
     * device memory return queued): the trace is for where the time goes */
    if (rc == FG_OK && sc->sync_spans)
        rc = sc->be->iface->sync(sc->be, err);
    sc->compute_s += fg_now() - t0;
    fg_engine_span(sc->e, "compute", t0, (int32_t)u, a->k1 - a->k0 == 1 ? (int32_t)a->k0 : -1,
                   (int32_t)a->i);
    return rc;
}

/* One token step over units [u0, u1) and batches [k0, k1): the loop both schedules share. */
static int sweep(fg_sched *sc, block *b, const sweep_args *a, fg_unit_w *last_head, fg_err *err)
{
    fg_unit_w w[2];
    uint32_t first, end;
    seq_range(sc, b, a, &first, &end);
    uint64_t seqs = end > first ? end - first : 0;
    uint64_t tok[2] = {a->i == 0 ? seqs * (b->P - b->s0) : seqs, seqs};
    if (a->i == 0 && a->u0 == 0)
        sc->prefill_rows += tok[0];
    for (uint32_t u = a->u0, n = 1; u < a->u1; u += n) {
        int rc = load_span(sc, w, a, u, tok, &n, err);
        if (rc == FG_OK)
            rc = compute_span(sc, b, w, u, n, a, err);
        if (rc)
            return rc;
        if (sc->link && sc->link->poll) /* a pipeline stage: its transfers move meanwhile */
            sc->link->poll(sc->link->ctx);
        if (last_head && sc->units[u + n - 1].kind == FG_UNIT_HEAD)
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

/* Step i ended: its time and the bytes read from disk since the last step ended go to the
 * prefill (i = 0) or the decode; report the tokens so far. */
static void end_step(fg_sched *sc, const block *b, uint32_t i, double *t_step, fg_gen_stats *st)
{
    double now = fg_now();
    *(i == 0 ? &st->prefill_s : &st->decode_s) += now - *t_step;
    *t_step = now;
    uint64_t rd = fg_engine_disk_read(sc->e);
    sc->disk_read[i > 0] += rd - sc->disk_mark;
    sc->disk_mark = rd;
    sc->decode_sweeps += i > 0;
    if (b->hooks && b->hooks->tick)
        b->hooks->tick(b->hooks->tick_ctx, produced(b));
}

/* Batches [k0, k1) through every step: zig-zag calls it once with all batches, row-by-row once
 * per batch. */
static int run_batches(fg_sched *sc, block *b, uint32_t k0, uint32_t k1, fg_gen_stats *st,
                       fg_err *err)
{
    double t_step = fg_now();
    for (uint32_t i = 0; i < b->G && live(b, k0 * sc->gbs, k1 * sc->gbs); i++) {
        sweep_args a = {i, k0, k1, 0, sc->n_units};
        int rc = sweep(sc, b, &a, NULL, err);
        if (rc)
            return rc;
        end_step(sc, b, i, &t_step, st);
    }
    return FG_OK;
}

/* scoring: only the prompts must fit the context (nothing is generated) */
static int check_block(fg_sched *sc, fg_gen_seq *seqs, uint32_t n, int scoring, block *b,
                       fg_err *err)
{
    if (n == 0 || n > sc->gbs * sc->ngb)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "a block holds 1..%u sequences, not %u",
                          sc->gbs * sc->ngb, n);
    memset(b, 0, sizeof *b);
    b->n = n;
    b->seqs = seqs;
    b->nb = (n + sc->gbs - 1) / sc->gbs;
    b->scoring = scoring;
    for (uint32_t s = 0; s < n; s++) {
        if (seqs[s].n_prompt == 0 || seqs[s].max_new == 0)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "sequence %u: empty prompt or no tokens "
                              "to generate", s);
        b->P = seqs[s].n_prompt > b->P ? seqs[s].n_prompt : b->P;
        b->G = seqs[s].max_new > b->G ? seqs[s].max_new : b->G;
    }
    if ((uint64_t)b->P + (scoring ? 0 : b->G) > sc->max_ctx)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prompt of %u tokens + %u new exceeds the "
                          "context of %u (--max-context, model limit %u)", b->P, b->G,
                          sc->max_ctx, sc->hp->max_pos);
    return FG_OK;
}

static int stage_lead(fg_sched *sc, block *b, fg_gen_stats *st, fg_err *err);

int fg_engine_generate(fg_engine *e, fg_gen_seq *seqs, uint32_t n, const fg_gen_hooks *hooks,
                       fg_gen_stats *st, fg_err *err)
{
    fg_sched *sc = fg_engine_sched(e);
    block b;
    memset(st, 0, sizeof *st);
    int rc = check_block(sc, seqs, n, 0, &b, err);
    if (rc)
        return rc;
    int32_t *last_pos = malloc((size_t)n * sizeof *last_pos);
    if (!last_pos)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    b.last_pos = last_pos;
    b.hooks = hooks;
    fg_pfx_block pb;
    double t0 = fg_now();
    sc->disk_mark = fg_engine_disk_read(sc->e); /* (the cache's loads count to the prefill) */
    rc = fg_engine_prefix_load(sc->e, seqs, n, b.P, &pb, &b.s0, err); /* no cache: s0 = 0 */
    st->prefill_s += fg_now() - t0;
    if (rc == FG_OK)
        rc = setup_prompts(sc, &b, err);
    if (rc == FG_OK && sc->link)
        rc = stage_lead(sc, &b, st, err);
    else if (rc == FG_OK && sc->policy->schedule == FG_SCHEDULE_ROW)
        for (uint32_t k = 0; rc == FG_OK && k < b.nb; k++)
            rc = run_batches(sc, &b, k, k + 1, st, err);
    else if (rc == FG_OK)
        rc = run_batches(sc, &b, 0, b.nb, st, err);
    t0 = fg_now();
    if (rc == FG_OK) /* saving is prompt work: its time counts to the prefill */
        rc = fg_engine_prefix_save(sc->e, seqs, &pb, err);
    st->prefill_s += fg_now() - t0;
    st->new_tokens = produced(&b);
    st->prompt_cached = pb.tok_cached;
    st->prompt_computed = pb.tok_computed; /* 0 without a cache */
    fg_pfx_block_free(&pb);
    free(last_pos);
    return rc;
}

/* ---- scoring ---- */

/* The head over positions [from, n_prompt) of batch k's windows in slices of logit_rows rows
 * (window position t at its row pad + t - s0 of the prefill's P - s0): accumulate the NLL of
 * each next id when nll is not NULL, and copy the logits out when asked (position t at
 * (t - from) * vocab). */
static int score_batch(fg_sched *sc, block *b, const fg_unit_w *w, uint32_t k,
                       const uint32_t *from, double *nll, uint64_t *count, float *out,
                       size_t out_stride, fg_err *err)
{
    fg_pager_view hv;
    int rc = fg_engine_act_acquire(sc->e, k, &hv, err);
    if (rc)
        return rc;
    fg_step s = step_of(sc, b, k, 0, hv.ptr);
    uint32_t V = sc->hp->vocab_size, L = sc->logit_rows;
    for (uint32_t r = 0; rc == FG_OK && r < s.n_seq; r++) {
        uint32_t seq = k * sc->gbs + r, f = from ? from[seq] : 0;
        const fg_gen_seq *q = &b->seqs[seq];
        uint32_t pad = b->P - q->n_prompt;
        /* position t predicts position t + 1 */
        for (uint32_t t0 = f; rc == FG_OK && t0 < q->n_prompt; t0 += L) {
            uint32_t m = q->n_prompt - t0 < L ? q->n_prompt - t0 : L;
            size_t row = (size_t)r * s.n_new + pad + t0 - b->s0;
            rc = fg_engine_rows_copy(sc->e, sc->head_x, s.hidden + row * sc->hp->hidden,
                                     hv.tier, (size_t)m * sc->hp->hidden * 4, err);
            if (rc == FG_OK)
                rc = sc->arch->head(sc->be, sc->hp, w, sc->head_x, m, sc->logits, sc->ws, err);
            if (rc == FG_OK)
                rc = fg_engine_down(sc->e, sc->logits_host, sc->logits, (size_t)m * V * 4, err);
            for (uint32_t j = 0; rc == FG_OK && j < m; j++) {
                const float *lg = sc->logits_host + (size_t)j * V;
                if (out)
                    memcpy(out + seq * out_stride + (size_t)(t0 + j - f) * V, lg, (size_t)V * 4);
                if (nll && t0 + j + 1 < q->n_prompt) {
                    *nll -= fg_log_prob(lg, V, q->prompt[t0 + j + 1]);
                    (*count)++;
                }
            }
        }
    }
    return fg_engine_release(sc->e, &hv, 0, rc, err);
}

/* ---- the prefill passes of a scoring call ----
 *
 * A window's first rows can come from elsewhere instead of its own prefill: from the held run
 * (prefix_kv.c: rows kept from the previous call, copied in), from a level-0 pass (the run
 * every window of the call begins with, a prefill of one sequence, which then becomes the
 * held run; with a prefix cache its cached pages loaded and its new pages saved, for the next
 * job), or from its group's donor (a prefill of the donors' runs, each taking what the held run
 * has of it). The windows' prefill then computes slots [s0, P), s0 the least of
 * pad + rows taken. Each extra pass sweeps the weights again, so a plan's rows count 4/3 a
 * pass: the pairwise rule of sharing only where it saves a quarter of the rows. */

typedef struct score_plan {
    fg_share_plan sp;      /* the groups, less what the held run gives (fg_engine_share_trim) */
    uint32_t *hw, *hd;     /* [n] rows window s takes from the held run; [nd] donor d */
    uint32_t hm0, hc0;     /* the level-0 pass: rows of the common run the held run has, and
                              the prefix cache (fg_engine_set_prefix; 0 without one) */
    int level0, donors;    /* the passes run before the windows' */
    uint32_t s0;           /* the windows' prefill computes slots [s0, P) */
    uint64_t rows;         /* rows the passes compute, padding included */
} score_plan;

static void score_plan_free(score_plan *pl)
{
    fg_share_plan_free(&pl->sp);
    free(pl->hw);
    free(pl->hd);
    memset(pl, 0, sizeof *pl);
}

static uint32_t pad_of(const block *b, uint32_t s) { return b->P - b->seqs[s].n_prompt; }

/* The rows of plan pl (its sp, hw, hd filled): the donors' pass where asked, the windows'. */
static uint64_t plan_rows(const block *b, score_plan *pl, int donors)
{
    const fg_share_plan *sp = &pl->sp;
    uint32_t had = pl->hm0 > pl->hc0 ? pl->hm0 : pl->hc0;
    uint64_t rows = pl->level0 ? sp->common - had : 0;
    uint32_t P1 = 0, s1 = UINT32_MAX, lo = b->P;
    for (uint32_t d = 0; donors && d < sp->nd; d++)
        P1 = sp->dlen[d] > P1 ? sp->dlen[d] : P1;
    for (uint32_t d = 0; donors && d < sp->nd; d++)
        s1 = P1 - sp->dlen[d] + pl->hd[d] < s1 ? P1 - sp->dlen[d] + pl->hd[d] : s1;
    rows += donors && sp->nd ? (uint64_t)sp->nd * (P1 - s1) : 0;
    for (uint32_t s = 0; s < b->n; s++) {
        uint32_t r = donors && sp->donor[s] != FG_SHARE_NONE ? sp->c[s] : pl->hw[s];
        lo = pad_of(b, s) + r < lo ? pad_of(b, s) + r : lo;
    }
    pl->s0 = lo;
    pl->donors = donors && sp->nd;
    return rows + (uint64_t)b->n * (b->P - lo);
}

/* Plan pl with or without the level-0 pass, from the call's groups sp: each window's rows of
 * the held run (the common run after a level-0 pass), the groups trimmed to what donors give
 * beyond it, and the cheaper of the donors' pass or none. */
static int plan_with(fg_sched *sc, const block *b, const fg_share_plan *sp,
                     const uint32_t *from, int level0, uint32_t hc0, score_plan *pl,
                     fg_err *err)
{
    uint32_t n = b->n, *mw = malloc(((size_t)n + 1) * sizeof *mw);
    memset(pl, 0, sizeof *pl);
    pl->hw = malloc(((size_t)n + 1) * sizeof *pl->hw);
    pl->hd = malloc(((size_t)sp->nd + 1) * sizeof *pl->hd);
    int rc = mw && pl->hw && pl->hd ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    pl->level0 = level0;
    pl->hc0 = hc0;
    pl->hm0 = n ? fg_engine_held_match(sc->e, b->seqs[sp->last].prompt, sp->common) : 0;
    for (uint32_t s = 0; rc == FG_OK && s < n; s++) {
        const fg_gen_seq *q = &b->seqs[s];
        uint32_t cap = from[s] < q->n_prompt - 1 ? from[s] : q->n_prompt - 1;
        mw[s] = level0 ? sp->common : fg_engine_held_match(sc->e, q->prompt, q->n_prompt);
        pl->hw[s] = mw[s] < cap ? mw[s] : cap;
    }
    if (rc == FG_OK)
        rc = fg_engine_share_trim(sp, pl->hw, mw, &pl->sp, pl->hd, err);
    if (rc == FG_OK) {
        uint64_t alone = plan_rows(b, pl, 0), with = plan_rows(b, pl, 1);
        pl->rows = with * 4 < alone * 3 ? with : alone;
        plan_rows(b, pl, with * 4 < alone * 3);
    }
    free(mw);
    return rc;
}

/* The way to prefill the call's windows whose rows count least, 4/3 a pass. With a prefix cache
 * a tie goes to the level-0 pass, whose pages are saved there for the next job. */
static int score_plan_make(fg_sched *sc, const block *b, const fg_share_plan *sp,
                           const uint32_t *from, score_plan *pl, fg_err *err)
{
    score_plan l0;
    uint32_t hc0 = 0;
    int rc = plan_with(sc, b, sp, from, 0, 0, pl, err);
    if (rc || sp->common <= pl->hm0 || !fg_engine_held_fits(sc->e, sp->common))
        return rc; /* (a level-0 run the budget cannot hold is not planned) */
    if ((rc = fg_engine_prefix_cached(sc->e, b->seqs[sp->last].prompt, sp->common, &hc0, err)))
        return rc;
    if ((rc = plan_with(sc, b, sp, from, 1, hc0, &l0, err))) {
        score_plan_free(&l0);
        return rc;
    }
    double a = (double)pl->rows * (pl->donors ? 4 : 3);
    double c = (double)l0.rows * (l0.donors ? 16 : 12) / 3;
    if (c < a || (c == a && fg_engine_has_prefix(sc->e))) {
        score_plan_free(pl);
        *pl = l0;
    } else {
        score_plan_free(&l0);
    }
    return FG_OK;
}

/* Prefill seqs[0..n) as a block of their own (no head), slots [s0, P) computed after the held
 * run's rows r[s] are copied in; the rows taken counted. */
static int prefill_pass(fg_sched *sc, fg_gen_seq *seqs, uint32_t n, const uint32_t *r,
                        uint32_t s0, uint32_t *P, fg_err *err)
{
    int32_t *last_pos = calloc(n + 1, sizeof *last_pos);
    block b1;
    int rc = last_pos ? check_block(sc, seqs, n, 1, &b1, err)
                      : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = fg_engine_held_load(sc->e, seqs, n, b1.P, r, err);
    if (rc == FG_OK) {
        b1.last_pos = last_pos;
        b1.s0 = s0;
        *P = b1.P;
        rc = setup_prompts(sc, &b1, err);
    }
    sweep_args a = {0, 0, b1.nb, 0, sc->n_units - 1}; /* the head unit is last */
    if (rc == FG_OK)
        rc = sweep(sc, &b1, &a, NULL, err);
    for (uint32_t s = 0; rc == FG_OK && s < n; s++)
        sc->rows_shared += s0 > pad_of(&b1, s) ? s0 - pad_of(&b1, s) : 0;
    free(last_pos);
    return rc;
}

/* The level-0 pass: the run every window begins with, which becomes the held run; with a
 * prefix cache its cached pages are loaded (the held run's rows too where it has more) and its
 * new whole pages saved, as a generated block's are. */
static int level0_pass(fg_sched *sc, const block *b, const score_plan *pl, fg_err *err)
{
    uint32_t H = pl->sp.common, P, c0 = 0, r = 0;
    int32_t dummy;
    fg_gen_seq q = {b->seqs[pl->sp.last].prompt, H, 1, {0, 0, 1, 0}, 0, &dummy, 0, 0};
    fg_pfx_block pb;
    int rc = fg_engine_prefix_load(sc->e, &q, 1, H, &pb, &c0, err); /* no cache: c0 = 0 */
    r = pl->hm0 > c0 ? pl->hm0 : 0;
    if (rc == FG_OK)
        rc = prefill_pass(sc, &q, 1, &r, r > c0 ? r : c0, &P, err);
    if (rc == FG_OK)
        rc = fg_engine_prefix_save(sc->e, &q, &pb, err);
    fg_pfx_block_free(&pb);
    return rc ? rc : fg_engine_held_keep(sc->e, 0, 0, q.prompt, H, err);
}

/* The donors' runs as a prefill of their own, their rows then copied into the windows' block
 * (prefix_kv.c). */
static int donor_pass(fg_sched *sc, const block *b, const score_plan *pl, fg_err *err)
{
    const fg_share_plan *sp = &pl->sp;
    fg_gen_seq *seqs = calloc(sp->nd + 1, sizeof *seqs);
    int32_t *dummy = calloc(sp->nd + 1, sizeof *dummy);
    uint32_t *lens = malloc(((size_t)b->n + 1) * sizeof *lens), P1 = 0, s1 = UINT32_MAX;
    int rc = seqs && dummy && lens ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t d = 0; rc == FG_OK && d < sp->nd; d++) {
        seqs[d] = (fg_gen_seq){b->seqs[sp->dwin[d]].prompt, sp->dlen[d], 1, {0, 0, 1, 0}, d,
                               &dummy[d], 0, 0};
        P1 = sp->dlen[d] > P1 ? sp->dlen[d] : P1;
    }
    for (uint32_t d = 0; rc == FG_OK && d < sp->nd; d++)
        s1 = P1 - sp->dlen[d] + pl->hd[d] < s1 ? P1 - sp->dlen[d] + pl->hd[d] : s1;
    if (rc == FG_OK)
        rc = prefill_pass(sc, seqs, sp->nd, pl->hd, s1, &P1, err);
    for (uint32_t s = 0; rc == FG_OK && s < b->n; s++)
        lens[s] = b->seqs[s].n_prompt;
    if (rc == FG_OK)
        rc = fg_engine_share_rows(sc->e, sp, P1, b->P, lens, err);
    free(lens);
    free(seqs);
    free(dummy);
    return rc;
}

/* Before the windows' prefill: the passes of the plan, then the held run's rows into the
 * windows that take no donor's. */
static int score_passes(fg_sched *sc, const block *b, const score_plan *pl, fg_err *err)
{
    int rc = pl->level0 ? level0_pass(sc, b, pl, err) : FG_OK;
    if (rc == FG_OK && pl->donors)
        rc = donor_pass(sc, b, pl, err);
    uint32_t *r = calloc(b->n + 1, sizeof *r);
    for (uint32_t s = 0; r && s < b->n; s++)
        r[s] = pl->donors && pl->sp.donor[s] != FG_SHARE_NONE ? 0 : pl->hw[s];
    if (rc == FG_OK)
        rc = r ? fg_engine_held_load(sc->e, b->seqs, b->n, b->P, r, err)
               : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    free(r);
    return rc;
}

/* The windows' prefill from pl->s0 and their head, then the run of the window last in token
 * order kept for the next call. */
static int score_block(fg_sched *sc, block *b, const score_plan *pl, const uint32_t *from,
                       double *nll, uint64_t *count, float *out, size_t out_stride, fg_err *err)
{
    fg_unit_w head;
    b->s0 = pl ? pl->s0 : 0;
    int rc = setup_prompts(sc, b, err);
    sweep_args a = {0, 0, b->nb, 0, sc->n_units};
    if (rc == FG_OK) /* the head unit loads last; its w stays valid */
        rc = sweep(sc, b, &a, &head, err);
    for (uint32_t s = 0; rc == FG_OK && pl && s < b->n; s++) /* the rows not computed again */
        sc->rows_shared += b->s0 > pad_of(b, s) ? b->s0 - pad_of(b, s) : 0;
    uint64_t dc = 0;
    for (uint32_t k = 0; rc == FG_OK && k < b->nb; k++) /* (no NLL asked for: none computed) */
        rc = score_batch(sc, b, &head, k, from, nll, count ? count : &dc, out, out_stride,
                         err);
    if (rc == FG_OK && pl) {
        uint32_t s = pl->sp.last, cap = b->seqs[s].n_prompt - 1;
        cap = from[s] < cap ? from[s] : cap;
        fg_err e2;
        if (cap) /* (no room to keep it: the next call holds nothing, and is right) */
            rc = fg_engine_held_keep(sc->e, s, pad_of(b, s), b->seqs[s].prompt, cap, &e2);
        if (rc && rc != FG_ERR_NOMEM)
            *err = e2;
        rc = rc == FG_ERR_NOMEM ? FG_OK : rc;
    }
    return rc;
}

int fg_engine_score(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                    const uint32_t *from, uint32_t n, double *nll, uint64_t *count, float *out,
                    size_t out_stride, fg_err *err)
{
    fg_sched *sc = fg_engine_sched(e);
    if (sc->link)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "perplexity runs in one process, not as a "
                          "pipeline of %d ranks", sc->link->size);
    fg_gen_seq *seqs = calloc(n + 1, sizeof *seqs);
    int32_t *dummy = calloc(n + 1, sizeof *dummy), *last_pos = calloc(n + 1, sizeof *last_pos);
    int rc = seqs && dummy && last_pos ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; rc == FG_OK && s < n; s++) {
        seqs[s] = (fg_gen_seq){windows[s], lens[s], 1, {0, 0, 1, 0}, s, &dummy[s], 0, 0};
        if (from && lens[s] && from[s] >= lens[s])
            rc = fg_err_set(err, FG_ERR_INVALID_ARG, "window %u: logits from position %u of %u",
                            s, from[s], lens[s]);
    }
    block b;
    if (rc == FG_OK)
        rc = check_block(sc, seqs, n, 1, &b, err);
    fg_share_plan sp = {0};
    score_plan pl = {0};
    int share = rc == FG_OK && from && !sc->no_share;
    if (share)
        rc = fg_engine_share_plan(windows, lens, from, n, &sp, err);
    if (share && rc == FG_OK && !fg_engine_share_fits(sc->e, &sp))
        share = 0; /* its rows' buffer would pass the RAM budget */
    if (share && rc == FG_OK)
        rc = score_plan_make(sc, &b, &sp, from, &pl, err);
    if (share && rc == FG_OK)
        rc = score_passes(sc, &b, &pl, err);
    if (rc == FG_OK) {
        b.last_pos = last_pos;
        rc = score_block(sc, &b, share ? &pl : NULL, from, nll, count, out, out_stride, err);
    }
    fg_share_plan_free(&sp);
    score_plan_free(&pl);
    free(seqs);
    free(dummy);
    free(last_pos);
    return rc;
}

int fg_engine_logits(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                     uint32_t n, double *nll, uint64_t *count, float *out, size_t out_stride,
                     fg_err *err)
{
    return fg_engine_score(e, windows, lens, NULL, n, nll, count, out, out_stride, err);
}

/* ---- the pipeline (stage.h) ----
 *
 * A micro-batch is a group of consecutive batches [k0, k1) of the block (FlexGen's inner
 * iteration: ceil(ngb / ranks) batches unless --micro-batch says, so there are as many
 * micro-batches as stages to keep each busy, and each weight load serves k1 - k0 batches).
 * Each rank sweeps its units for (step i, group) and sends the rows on, so while rank r
 * computes one group its send of the last one and the arrival of the next are under way.
 * Rank 0 leads: it sends the prompts (BLOCK), runs every group's prefill through its front
 * units and sends it, then, as each group's rows come back from the last rank, runs the head
 * on them, samples (the same advance as one process), and starts that group's next step at
 * once. A group whose sequences are all finished stops there (one process would carry it to
 * the block's end; its outputs are the same). Followers run whatever arrives, in order, until
 * END.
 *
 * DATA messages: a decode step's rows of a group in one message (blk_hidden, sequence
 * k0 * gbs + q at row q); the prefill's one message per batch (its activation chunk; to rank 0
 * only each sequence's last position, all the head needs), the group swept when its last
 * batch is in.
 */

/* First unit of `layer` (the head's unit for layer == n_layers). */
static uint32_t layer_unit(const fg_sched *sc, uint32_t layer)
{
    for (uint32_t u = 0; u < sc->n_units; u++)
        if (sc->units[u].kind == FG_UNIT_ATTN && sc->units[u].layer == layer)
            return u;
    return sc->n_units - 1;
}

static int last_rank(const fg_sched *sc) { return sc->link->rank + 1 == sc->link->size; }

static int forward_ctl(const fg_sched *sc, const fg_stage_msg *h, const void *p, fg_err *err)
{
    return last_rank(sc) ? FG_OK
                        : fg_stage_send(sc->link, h->kind, h->step, h->batch, h->first, h->end,
                                        p, h->bytes, err);
}

/* Sequences of batches [k0, k1). */
static size_t group_rows(const fg_sched *sc, const block *b, uint32_t k0, uint32_t k1)
{
    uint32_t end = k1 * sc->gbs < b->n ? k1 * sc->gbs : b->n;
    return end - k0 * sc->gbs;
}

/* Send n bytes of rows at src (of type st): device memory comes down into sc->stage_host
 * first (the link copies host bytes). */
static int send_rows(fg_sched *sc, uint32_t i, uint32_t k, uint32_t k0, uint32_t k1,
                     const void *src, fg_buft st, size_t n, fg_err *err)
{
    int rc = FG_OK;
    if (st == FG_BUFT_DEVICE) {
        rc = fg_engine_xcopy(sc->e, sc->stage_host, FG_BUFT_HOST, src, st, n, err);
        src = sc->stage_host;
    }
    return rc ? rc : fg_stage_send(sc->link, FG_MSG_DATA, i, k, k0, k1, src, n, err);
}

/* The prefill's rows of batch k (all, or to rank 0 each sequence's last position). */
static int send_prefill(fg_sched *sc, const block *b, uint32_t k, uint32_t k0, uint32_t k1,
                        fg_err *err)
{
    size_t nseq = batch_size(sc, b, k), H = sc->hp->hidden;
    fg_pager_view v;
    int rc = fg_engine_act_acquire(sc->e, k, &v, err);
    if (rc)
        return rc;
    const float *x = v.ptr;
    fg_buft xt = fg_engine_view_buft(&v);
    if (last_rank(sc)) { /* head_x is free on a follower: stage the last rows there */
        for (size_t r = 0; rc == FG_OK && r < nseq; r++)
            rc = fg_engine_xcopy(sc->e, sc->head_x + r * H, sc->buft, x + (r * b->P + b->P - 1) * H,
                                 xt, H * 4, err);
        if (rc == FG_OK)
            rc = send_rows(sc, 0, k, k0, k1, sc->head_x, sc->buft, nseq * H * 4, err);
    } else {
        rc = send_rows(sc, 0, k, k0, k1, x, xt, nseq * b->P * H * 4, err);
    }
    return fg_engine_release(sc->e, &v, 0, rc, err);
}

/* Send group [k0, k1)'s rows after step i's sweep. */
static int rows_send(fg_sched *sc, const block *b, uint32_t i, uint32_t k0, uint32_t k1,
                     fg_err *err)
{
    if (i > 0)
        return send_rows(sc, i, k0, k0, k1, sc->blk_hidden, sc->buft,
                         group_rows(sc, b, k0, k1) * sc->hp->hidden * 4, err);
    int rc = FG_OK;
    for (uint32_t k = k0; rc == FG_OK && k < k1; k++)
        rc = send_prefill(sc, b, k, k0, k1, err);
    return rc;
}

/* Put the rows of a DATA message where step h->step reads them (up to the device when that is
 * where they live). */
static int rows_place(fg_sched *sc, const block *b, const fg_stage_msg *h, const void *p,
                      fg_err *err)
{
    uint32_t k = h->batch, i = h->step, from_last = sc->link->rank == 0;
    if (k < h->first || k >= h->end || h->end > b->nb || (i > 0 && k != h->first) ||
        (uint64_t)b->P + i >= sc->max_ctx)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: rows for step %u batch %u of batches "
                          "%u..%u of a block of %u batches", sc->link->rank, i, k, h->first,
                          h->end, b->nb);
    size_t H = sc->hp->hidden, nseq = i > 0 ? group_rows(sc, b, k, h->end) : batch_size(sc, b, k);
    size_t want = (i > 0 || from_last ? nseq : nseq * b->P) * H * 4;
    if (h->bytes != want)
        return fg_err_set(err, FG_ERR_CORRUPT, "rank %d: step %u batch %u: %llu bytes of rows, "
                          "expected %zu", sc->link->rank, i, k, (unsigned long long)h->bytes, want);
    if (i > 0)
        return fg_engine_xcopy(sc->e, sc->blk_hidden, sc->buft, p, FG_BUFT_HOST, want, err);
    fg_pager_view v;
    int rc = fg_engine_act_acquire(sc->e, k, &v, err);
    if (rc)
        return rc;
    float *x = v.ptr;
    fg_buft xt = fg_engine_view_buft(&v);
    if (from_last)
        for (size_t r = 0; rc == FG_OK && r < nseq; r++)
            rc = fg_engine_xcopy(sc->e, x + (r * b->P + b->P - 1) * H, xt,
                                 (const float *)p + r * H, FG_BUFT_HOST, H * 4, err);
    else
        rc = fg_engine_xcopy(sc->e, x, xt, p, FG_BUFT_HOST, want, err);
    return fg_engine_release(sc->e, &v, 1, rc, err);
}

/* The next DATA message, which must be for step i of group [k0, k1), batch k. */
static int recv_rows(fg_sched *sc, block *b, uint32_t i, uint32_t k, uint32_t k0, uint32_t k1,
                     fg_err *err)
{
    fg_stage_msg h;
    const void *p;
    int rc = fg_stage_recv(sc->link, 0, &h, &p, err);
    if (rc == FG_OK && (h.kind != FG_MSG_DATA || h.step != i || h.batch != k || h.first != k0 ||
                        h.end != k1))
        rc = fg_err_set(err, FG_ERR_CORRUPT, "rank %d: expected the rows of step %u batch %u "
                        "from rank %d, got message kind %u (step %u batch %u)", sc->link->rank,
                        i, k, sc->link->size - 1, h.kind, h.step, h.batch);
    return rc ? rc : rows_place(sc, b, &h, p, err);
}

/* Rank 0: step i of group [k0, k1) through the embedding and its layers, sent on. */
static int lead_front(fg_sched *sc, block *b, uint32_t i, uint32_t k0, uint32_t k1, fg_err *err)
{
    sweep_args a = {i, k0, k1, 0, layer_unit(sc, sc->l1)};
    int rc = sweep(sc, b, &a, NULL, err);
    return rc ? rc : rows_send(sc, b, i, k0, k1, err);
}

/* Rank 0: the group's rows of step i back from the last rank: the head, then sampling. */
static int lead_back(fg_sched *sc, block *b, uint32_t i, uint32_t k0, uint32_t k1, fg_err *err)
{
    int rc = FG_OK;
    for (uint32_t k = k0; rc == FG_OK && k < (i == 0 ? k1 : k0 + 1); k++)
        rc = recv_rows(sc, b, i, k, k0, k1, err);
    sweep_args a = {i, k0, k1, sc->n_units - 1, sc->n_units};
    return rc ? rc : sweep(sc, b, &a, NULL, err);
}

/* BLOCK: n, the prompt lengths [n], the prompts' ids one after another. */
static int send_block(fg_sched *sc, const block *b, fg_err *err)
{
    size_t n_ids = 0;
    for (uint32_t s = 0; s < b->n; s++)
        n_ids += b->seqs[s].n_prompt;
    uint32_t *m = malloc((1 + b->n + n_ids) * 4), *q = m + 1 + b->n;
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    m[0] = b->n;
    for (uint32_t s = 0; s < b->n; s++) {
        m[1 + s] = b->seqs[s].n_prompt;
        memcpy(q, b->seqs[s].prompt, b->seqs[s].n_prompt * 4);
        q += b->seqs[s].n_prompt;
    }
    int rc = fg_stage_send(sc->link, FG_MSG_BLOCK, 0, 0, 0, 0, m, (1 + b->n + n_ids) * 4, err);
    free(m);
    return rc;
}

/* Batches a micro-batch holds. */
static uint32_t group_size(const fg_sched *sc, const block *b)
{
    uint32_t g = sc->micro_batch ? sc->micro_batch
                                  : (b->nb + (uint32_t)sc->link->size - 1) / (uint32_t)sc->link->size;
    return g ? g : 1;
}

static int stage_lead(fg_sched *sc, block *b, fg_gen_stats *st, fg_err *err)
{
    uint32_t g = group_size(sc, b), ng = (b->nb + g - 1) / g;
    uint8_t *active = calloc(ng, 1);
    int rc = active ? send_block(sc, b, err) : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    double t_step = fg_now();
    for (uint32_t j = 0; rc == FG_OK && j < ng; j++) {
        rc = lead_front(sc, b, 0, j * g, j * g + g < b->nb ? j * g + g : b->nb, err);
        active[j] = 1;
    }
    for (uint32_t i = 1, any = 1; rc == FG_OK && any; i++) {
        any = 0;
        for (uint32_t j = 0; rc == FG_OK && j < ng; j++) {
            uint32_t k0 = j * g, k1 = k0 + g < b->nb ? k0 + g : b->nb;
            if (!active[j])
                continue;
            rc = lead_back(sc, b, i - 1, k0, k1, err);
            active[j] = rc == FG_OK && i < b->G && live(b, k0 * sc->gbs, k1 * sc->gbs);
            if (active[j]) {
                rc = lead_front(sc, b, i, k0, k1, err);
                any = 1;
            }
        }
        end_step(sc, b, i - 1, &t_step, st);
    }
    free(active);
    return rc ? rc : fg_stage_send(sc->link, FG_MSG_END, 0, 0, 0, 0, NULL, 0, err);
}

/* A follower's block from its BLOCK message (ids copied into *ids, seqs into *seqs). */
static int parse_block(fg_sched *sc, const fg_stage_msg *h, const void *p, fg_gen_seq **seqs,
                       int32_t **ids, uint32_t *n, fg_err *err)
{
    const uint32_t *lens;
    const int32_t *src;
    int rc = fg_stage_block_parse(p, h->bytes, sc->gbs * sc->ngb, sc->max_ctx, sc->link->rank, n,
                                  &lens, &src, err);
    if (rc)
        return rc;
    size_t total = h->bytes / 4 - 1 - *n;
    *seqs = calloc(*n, sizeof **seqs);
    *ids = malloc(total * 4 + 4);
    if (!*seqs || !*ids)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    memcpy(*ids, src, total * 4);
    for (uint32_t s = 0, at = 0; s < *n; at += lens[s], s++)
        (*seqs)[s] = (fg_gen_seq){*ids + at, lens[s], 1, {0}, s, NULL, 0, 0};
    return FG_OK;
}

/* A follower after step i of batch k: the positions one process's advance writes (the token
 * itself only rank 0 knows, and only its embedding needs; validity is set from the start). */
static void follow_advance(fg_sched *sc, block *b, uint32_t k)
{
    size_t o = tok_off(sc, k);
    for (uint32_t r = 0; r < batch_size(sc, b, k); r++)
        sc->pos[o + r] = ++b->last_pos[k * sc->gbs + r];
}

/* One DATA message: its rows placed; once the group's rows are all in, this stage's units
 * swept over the group and the rows sent on. */
static int serve_rows(fg_sched *sc, block *b, const fg_stage_msg *h, const void *p, fg_err *err)
{
    int rc = rows_place(sc, b, h, p, err);
    if (rc || (h->step == 0 && h->batch + 1 < h->end))
        return rc;
    uint32_t k0 = h->first, k1 = h->end;
    sweep_args a = {h->step, k0, k1, layer_unit(sc, sc->l0), layer_unit(sc, sc->l1)};
    rc = sweep(sc, b, &a, NULL, err);
    if (rc == FG_OK)
        rc = rows_send(sc, b, h->step, k0, k1, err);
    for (uint32_t k = k0; rc == FG_OK && k < k1; k++)
        follow_advance(sc, b, k);
    return rc;
}

static int serve_block(fg_sched *sc, const fg_stage_msg *bh, const void *bp, fg_err *err)
{
    fg_gen_seq *seqs = NULL;
    int32_t *ids = NULL, *last_pos = NULL;
    uint32_t n;
    block b;
    int rc = parse_block(sc, bh, bp, &seqs, &ids, &n, err);
    if (rc == FG_OK)
        rc = forward_ctl(sc, bh, bp, err);
    if (rc == FG_OK)
        rc = check_block(sc, seqs, n, 0, &b, err);
    if (rc == FG_OK && !(last_pos = malloc((size_t)n * sizeof *last_pos)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK) {
        b.last_pos = last_pos;
        rc = setup_prompts(sc, &b, err);
    }
    while (rc == FG_OK) {
        fg_stage_msg h;
        const void *p;
        if ((rc = fg_stage_recv(sc->link, 0, &h, &p, err)))
            break;
        if (h.kind == FG_MSG_END) {
            rc = forward_ctl(sc, &h, p, err);
            break;
        }
        rc = h.kind == FG_MSG_DATA ? serve_rows(sc, &b, &h, p, err)
                                   : fg_err_set(err, FG_ERR_CORRUPT, "rank %d: message kind %u "
                                                "inside a block", sc->link->rank, h.kind);
    }
    free(seqs);
    free(ids);
    free(last_pos);
    return rc;
}

int fg_stage_serve(fg_engine *e, fg_err *err)
{
    fg_sched *sc = fg_engine_sched(e);
    for (;;) {
        fg_stage_msg h;
        const void *p;
        int rc = fg_stage_recv(sc->link, 0, &h, &p, err);
        if (rc == FG_OK && h.kind == FG_MSG_QUIT)
            return forward_ctl(sc, &h, p, err);
        if (rc == FG_OK && h.kind != FG_MSG_BLOCK)
            rc = fg_err_set(err, FG_ERR_CORRUPT, "rank %d: message kind %u between blocks",
                            sc->link->rank, h.kind);
        if (rc == FG_OK)
            rc = serve_block(sc, &h, p, err);
        if (rc)
            return rc;
    }
}
