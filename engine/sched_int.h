/* sched_int.h - private to engine/: what a schedule (schedule.c) sees of the engine. A schedule
 * gets one context, fg_sched, with the few things a token step needs (the model's compute, the
 * block's shape, the unit list, the stage's link and the schedule's own row buffers), and calls
 * into the engine for everything else: weights (span loads and prefetches), KV and activation
 * chunks through the pager, copies across the host <-> device link, the prefix cache, trace
 * spans. It never sees struct fg_engine (engine_int.h), so the engine may change its insides
 * without touching the schedules, and the calls run one way: schedule.c calls the engine's
 * files, never the reverse (engine.c's top comment lists the order).
 *
 * The engine makes the context at open (engine.c sched_bind) and owns every buffer it points
 * at: they are sized by the plan, allocated at open (engine.c alloc_buffers, engine_dev.c
 * fg_engine_buffers_dev) and freed at close. Buffers marked (dev) are of type `buft`: device
 * memory on a device backend, never dereferenced by host code; on the CPU the d_* twins alias
 * their host arrays.
 */
#ifndef FG_SCHED_INT_H
#define FG_SCHED_INT_H

#include "backend.h"
#include "engine.h"
#include "plan_model.h"
#include "stage_int.h"

typedef struct fg_sched {
    struct fg_engine *e;           /* the engine, for the calls below */
    /* fixed at open (copies of the engine's) */
    const fg_hparams *hp;          /* the engine's (LongRoPE's use_long set) */
    const fg_arch *arch;
    fg_backend *be;
    const fg_policy *policy;       /* the options' policy (schedule, overlap, sparsity) */
    uint32_t micro_batch;          /* pipeline: batches a micro-batch holds (0: ceil(ngb/ranks)) */
    int sync_spans;                /* traced on a device backend: a span ends when its kernels
                                      are done, not queued */
    int no_share;                  /* fg_engine_score computes every window whole */
    uint32_t gbs, ngb, max_ctx;    /* the block gbs x ngb; the longest prompt + generation */
    uint32_t logit_rows, ahead;    /* the plan's head rows; spans prefetched ahead */
    const fg_plan_unit_tensors *units; /* [n_units]: kind, layer (plan_model.h) */
    uint32_t n_units;
    const fg_link *link;           /* a pipeline stage, or NULL */
    uint32_t l0, l1;               /* this stage's layers [l0, l1) */
    fg_buft buft;                  /* the (dev) buffers' type */
    /* the schedule's buffers, owned by the engine */
    fg_model_ws *ws;
    fg_sample_scratch *sampler;
    /* the zig-zag decode step computes the whole block at once: its hidden rows and new
     * ids/positions, sequence s at row s */
    float *blk_hidden;             /* (dev) [gbs * ngb, hidden] */
    int32_t *blk_ids, *blk_pos;    /* [gbs * ngb] */
    int32_t *d_blk_pos;            /* (dev) blk_pos for the ops (RoPE) */
    uint8_t *valid;                /* [ngb][gbs * max_ctx]: set once a block (setup_prompts) */
    int32_t *ids, *pos;            /* [ngb][gbs * max_ctx] */
    uint8_t *d_valid;              /* (dev) valid for the ops (attention) */
    int32_t *d_pos;                /* (dev) pos for the ops (RoPE) */
    float *logits;                 /* (dev) [logit_rows, vocab] */
    float *logits_host;            /* [logit_rows, vocab]: the rows the sampler reads */
    int32_t *greedy_ids;           /* [logit_rows]: greedy batches' ids, the backend's argmax */
    float *head_x;                 /* (dev) [logit_rows, hidden] rows staged for the head */
    void *stage_host;              /* a device backend in a pipeline: host room for one
                                      message's rows, brought down from device memory to be
                                      sent (fg_stage_max_rows bytes) */
    /* the schedule's state */
    uint64_t blk_key;              /* the (step, batches) d_blk_pos holds, + 1; 0: none */
    double compute_s;              /* seconds computing (fg_engine_stats) */
    uint64_t prefill_rows;         /* rows the prefill steps computed, padding included */
    uint64_t rows_shared;          /* prompt rows fg_engine_score took from a shared prefix */
    uint64_t disk_read[2];         /* bytes read from disk in fg_engine_generate's prefill [0]
                                      and decode [1] steps (fg_engine_stats) */
    uint64_t disk_mark;            /* fg_engine_disk_read when the last step ended */
    uint64_t decode_sweeps;        /* decode steps run, one a pass over the weights (of all the
                                      block's batches under zig-zag, of one under row-by-row) */
} fg_sched;

/* ---- the engine's calls a schedule makes (engine.c unless marked) ---- */

/* The context of e (valid until close). */
fg_sched *fg_engine_sched(struct fg_engine *e);
/* Bytes the pager has read from disk so far (into RAM and the device). */
uint64_t fg_engine_disk_read(struct fg_engine *e);
/* Units in the span starting at u (one, or a layer's attention + MLP: plan.h fg_plan_span). */
uint32_t fg_engine_span_len(const struct fg_engine *e, uint32_t u);
/* Load units [u, u + n) (a span): w[0..n) receive their weights' views; their SMALL tensors
 * are decoded into the engine's room (the embedding span's once, and kept). */
int fg_engine_span_load(struct fg_engine *e, uint32_t u, uint32_t n, fg_unit_w *w, fg_err *err);
/* Start reading the units of the span at u (best effort), for a step of `tokens` tokens: a
 * sparse MLP's experts only when they are expected to be mostly chosen (policy.h
 * fg_expert_paging). */
void fg_engine_span_prefetch(struct fg_engine *e, uint32_t u, uint64_t tokens);
/* The KV chunk of (batch k, layer) and batch k's activation chunk, acquired from the pager
 * (loaded when homed on disk; the wait counted); prefetches are best effort. */
int fg_engine_kv_acquire(struct fg_engine *e, uint32_t k, uint32_t layer, fg_pager_view *v,
                         fg_err *err);
void fg_engine_kv_prefetch(struct fg_engine *e, uint32_t k, uint32_t layer);
int fg_engine_act_acquire(struct fg_engine *e, uint32_t k, fg_pager_view *v, fg_err *err);
void fg_engine_act_prefetch(struct fg_engine *e, uint32_t k);
/* Release a chunk acquired above, folding its error into rc. dirty: 0 clean, 1 modified,
 * FG_ENGINE_STORE modified and not needed again soon (a batch's KV chunk after its attention:
 * written behind when homed on disk). */
enum { FG_ENGINE_STORE = 2 };
int fg_engine_release(struct fg_engine *e, const fg_pager_view *v, int dirty, int rc,
                      fg_err *err);
/* The KV cache of `layer` inside its acquired chunk (K rows, then V rows). */
fg_kv_batch fg_engine_kv_view(const struct fg_engine *e, void *chunk, uint32_t layer);
/* A trace span (when tracing) from t0 to now. */
void fg_engine_span(struct fg_engine *e, const char *name, double t0, int32_t u, int32_t batch,
                    int32_t step);

/* engine_dev.c: n bytes from host src to dst of type buft (up), from src of type buft to host
 * dst (down), within buft (dcopy); nothing when the two are the same memory. xcopy: from src
 * (of type st) to dst (of type dt), through the device when either is device memory. rows_copy:
 * from src (a chunk in src_tier) to dst of type buft. view_buft: the type of a view's bytes. */
int fg_engine_up(struct fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
int fg_engine_down(struct fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
int fg_engine_dcopy(struct fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
int fg_engine_xcopy(struct fg_engine *e, void *dst, fg_buft dt, const void *src, fg_buft st,
                    size_t n, fg_err *err);
int fg_engine_rows_copy(struct fg_engine *e, void *dst, const void *src, fg_tier src_tier,
                        size_t n, fg_err *err);
fg_buft fg_engine_view_buft(const fg_pager_view *v);

/* prefix_kv.c: a block's prefix cache work between its load and its save */
typedef struct fg_pfx_block {
    uint32_t n, P;                 /* sequences, padded prompt length */
    struct fg_prefix_key **keys;   /* [n][n_prompt / page_tokens] chain keys */
    uint32_t *known;               /* [n] leading pages the cache held */
    uint32_t *cached;              /* [n] tokens loaded into the KV cache */
    uint64_t tok_cached, tok_computed; /* prompt tokens taken from the cache / computed (both 0
                                          without a cache) */
} fg_pfx_block;
/* Look up each prompt's cached pages and copy them into the block's KV chunks; *s0 receives
 * the first cache slot the prefill must compute (0 without a cache). pb is freed by
 * fg_pfx_block_free, also on failure. */
int fg_engine_prefix_load(struct fg_engine *e, const fg_gen_seq *seqs, uint32_t n, uint32_t P,
                          fg_pfx_block *pb, uint32_t *s0, fg_err *err);
/* Save the block's whole prompt pages the cache did not hold (after the prefill). */
int fg_engine_prefix_save(struct fg_engine *e, const fg_gen_seq *seqs, fg_pfx_block *pb,
                          fg_err *err);
void fg_pfx_block_free(fg_pfx_block *pb);

/* prefix_kv.c: prefixes shared by the windows of one scoring call (fg_engine_score). Window s
 * takes its first c[s] rows from donor donor[s] (FG_SHARE_NONE and c[s] 0: none), a prefill of
 * the first dlen[d] tokens of window dwin[d]; c[s] <= cap(s) = min(from[s], lens[s] - 1), so
 * every row whose logits are wanted is computed. common: the run every window begins with (at
 * most every cap); last: the window last in token order. */
#define FG_SHARE_NONE UINT32_MAX
typedef struct fg_share_plan {
    uint32_t n, nd;                /* windows, donors */
    uint32_t *donor, *c;           /* [n] */
    uint32_t *dwin, *dlen;         /* [nd] */
    uint32_t common, last;
} fg_share_plan;
int fg_engine_share_plan(const int32_t *const *windows, const uint32_t *lens,
                         const uint32_t *from, uint32_t n, fg_share_plan *sp, fg_err *err);
/* *out: sp less what the held run gives (window s can take hw[s] rows from it, donor d's run
 * min(mw[dwin[d]], its length)): a member whose donor gives no more than the held run leaves
 * its group, a group left with fewer than two members is dropped, the donors renumbered and
 * their runs cut to their members' longest; hd[out->nd] (room for sp->nd) the rows each donor
 * takes from the held run. */
int fg_engine_share_trim(const fg_share_plan *sp, const uint32_t *hw, const uint32_t *mw,
                         fg_share_plan *out, uint32_t *hd, fg_err *err);
void fg_share_plan_free(fg_share_plan *sp);
/* Whether share_rows' buffer (one layer's rows of every donor, K and V, outside the plan) fits
 * the RAM budget beside the plan's total and the held run (always without a budget): sharing
 * that would pass the budget is not done (the windows are computed whole). The plan leaves
 * room for both only under fg_engine_opts.score_room. */
int fg_engine_share_fits(const struct fg_engine *e, const fg_share_plan *sp);
/* After the donors' prefill (donor d its sequence d, prompts padded to P1): each member's rows
 * copied into its slots of the windows' block (window s its sequence s, padded to P2). */
int fg_engine_share_rows(struct fg_engine *e, const fg_share_plan *sp, uint32_t P1, uint32_t P2,
                         const uint32_t *lens, fg_err *err);

/* prefix_kv.c: the held run, KV rows kept from one scoring call to the next (the run of the
 * last window in token order: the next call's windows, sorted on from there, begin with a
 * part of it, a few-shot prefix, or the whole context of an item whose choices the calls
 * split). The rows of ids[0..m) do not depend on what follows, so they are the rows any
 * window beginning with those ids would compute. */
/* Whether a prefix cache is set (fg_engine_set_prefix). */
int fg_engine_has_prefix(const struct fg_engine *e);
/* Tokens of ids[0..n) the prefix cache (fg_engine_set_prefix) holds: whole pages, at most
 * n - 1 tokens (as fg_engine_prefix_load finds them); 0 without a cache. */
int fg_engine_prefix_cached(struct fg_engine *e, const int32_t *ids, uint32_t n, uint32_t *got,
                            fg_err *err);
/* How many of ids[0..n) the held run's tokens begin with. */
uint32_t fg_engine_held_match(const struct fg_engine *e, const int32_t *ids, uint32_t n);
/* The held run's rows [0, r[s]) into slots [P - n_prompt, ...) of sequence s of a block of
 * n (r[s] <= what fg_engine_held_match gave for its prompt). */
int fg_engine_held_load(struct fg_engine *e, const fg_gen_seq *seqs, uint32_t n, uint32_t P,
                        const uint32_t *r, fg_err *err);
/* Whether a held run of m rows fits the RAM budget beside the plan's total (always without a
 * budget, or when the held room already holds m): fg_engine_held_keep keeps nothing otherwise,
 * so a level-0 pass, whose rows the windows take from the held run, is planned only then. */
int fg_engine_held_fits(const struct fg_engine *e, uint32_t m);
/* The held run becomes ids[0..m), its rows copied out of slots [slot, slot + m) of sequence s's
 * KV cache; FG_ERR_NOMEM when its room cannot be had, and then nothing is held; FG_OK holding
 * nothing when it does not fit the budget (fg_engine_held_fits). */
int fg_engine_held_keep(struct fg_engine *e, uint32_t s, uint32_t slot, const int32_t *ids,
                        uint32_t m, fg_err *err);

#endif
