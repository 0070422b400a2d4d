/* engine_int.h - private to the engine: engine.c (open, weights through the pager, unit loads),
 * schedule.c (the schedules over a unit range), trace.c (Chrome trace events). */
#ifndef FG_ENGINE_INT_H
#define FG_ENGINE_INT_H

#include "backend.h"
#include "engine.h"
#include "plan_model.h"
#include "prefix.h"
#include "stage_int.h"

/* Chunks of a streamed tensor (the LM head) read ahead of the one multiplying (a 4 MiB chunk
 * multiplies in about as long as it takes to read). */
#define FG_HEAD_AHEAD 4

typedef struct wtensor {
    fg_tensor_spec spec;           /* name, role, access, shape (the store's) */
    fg_codec codec;
    uint32_t file_id, group;       /* store weight file; owning unit (pager group) */
    uint32_t first_id, n_chunks;   /* pager chunk ids [first_id, first_id + n_chunks) */
    fg_fgt_chunk_info *chunks;     /* [n_chunks] (rows and lengths) */
    uint64_t *piece_rows;          /* [n_chunks + 1] first row of each chunk, then the rows */
    uint64_t stored_bytes;
} wtensor;

typedef fg_plan_unit_tensors unit; /* kind, layer, tensor indices (plan_model.h) */

/* The source of a piecewise weight (fg_weight.ctx): tensor t of the engine and the pager view
 * of the piece being used. */
typedef struct wsrc {
    struct fg_engine *e;
    int t;
    fg_pager_view v;               /* the piece acquired (backends hold one at a time) */
} wsrc;

typedef struct span {
    const char *name;
    double t0, t1;
    int32_t unit, batch, step;
} span;

struct fg_engine {
    fg_engine_opts o;
    fg_hparams hp;
    const fg_arch *arch;
    const fg_model *model;         /* borrowed */
    fg_store *store;               /* borrowed: the model's */
    fg_pager *pager;
    fg_backend *be;
    wtensor *tensors;
    uint32_t n_tensors, cap_tensors;
    unit *units;
    uint32_t n_units;
    fg_plan_unit *plan_units;
    uint64_t *plan_chunk;          /* pm.chunk, pm.unit_first (plan_model.h) */
    uint32_t *plan_unit_first;
    fg_plan_model pm;
    fg_plan plan;
    uint32_t gbs, ngb, max_ctx;
    /* buffers, sized by the plan. Those marked (dev) are of buffer type `buft`: device memory
     * on a device backend (engine_dev.c), which host code never dereferences; their host twins
     * (d_* below) are the same pointers on the CPU backend. */
    fg_buft buft;                  /* FG_BUFT_DEVICE on a device backend, else FG_BUFT_HOST */
    float *small_f32;              /* (dev) SMALL tensors: the embedding span's, kept (plan
                                      small_keep), then the loaded span's */
    int small_kept;                /* the embedding span's are decoded */
    int32_t *small_rows;           /* (dev) [n_small_rows] 0, 1, 2, ...: the rows a SMALL tensor
                                      is gathered by on a device backend (NULL on the CPU) */
    uint32_t n_small_rows;
    wsrc *wsrc;                    /* [n_tensors] weight sources */
    uint32_t ws_rows;              /* rows of a step: max(gbs * max_ctx, gbs * ngb) */
    /* the zig-zag decode step computes the whole block at once (see schedule.c): its hidden
     * rows and new ids/positions, sequence s at row s */
    float *blk_hidden;             /* (dev) [gbs * ngb, hidden] */
    int32_t *blk_ids, *blk_pos;    /* [gbs * ngb] */
    int32_t *d_blk_pos;            /* (dev) blk_pos for the ops (RoPE) */
    uint64_t blk_key;              /* the (step, batches) d_blk_pos holds, + 1; 0: none */
    /* activations: one pager chunk per batch k (id act_first + k), [gbs * max_ctx, hidden] f32 */
    uint32_t act_first;
    /* KV cache: one pager chunk per (batch k, layer l), id kv_first + k * layers + l: K rows
     * then V rows, gbs * max_ctx rows each of plan.kv_row bytes */
    uint32_t kv_first;
    int write_behind;              /* KV chunks homed on disk are written behind after their
                                      attention: set with --overlap unless fg_plan_disk_cached
                                      (nothing is evicted; policy/search.c prices that rule) */
    fg_codec kv_codec;
    float *logits;                 /* (dev) [logit_rows, vocab] */
    float *logits_host;            /* [logit_rows, vocab]: the rows the sampler reads */
    int32_t *greedy_ids;           /* [logit_rows]: greedy batches' ids, the backend's argmax */
    float *head_x;                 /* (dev) [logit_rows, hidden] rows staged for the head */
    uint8_t *valid;                /* [ngb][gbs * max_ctx]: set once a block (setup_prompts) */
    int32_t *ids, *pos;            /* [ngb][gbs * max_ctx] */
    uint8_t *d_valid;              /* (dev) valid for the ops (attention) */
    int32_t *d_pos;                /* (dev) pos for the ops (RoPE) */
    fg_model_ws *ws;
    fg_sample_scratch *sampler;
    /* stats */
    double compute_s, wait_s;
    span *spans;
    size_t n_spans, cap_spans;
    double t_open;
    struct fg_prefix *prefix;      /* borrowed (fg_engine_set_prefix), or NULL */
    /* a pipeline stage (stage.c): layers [l0, l1) run here, and rank 0 also runs the embedding
     * and the head; without a link every unit (l0 = 0, l1 = n_layers). KV chunks exist only for
     * [l0, l1). */
    const fg_link *link;
    uint32_t l0, l1;
    uint64_t link_bytes;           /* the budget's share kept for the link's buffers */
    void *stage_host;              /* a device backend in a pipeline: host room for one
                                      message's rows, brought down from device memory to be
                                      sent (fg_stage_max_rows bytes; counted in link_bytes) */
};

/* prefix_kv.c: a block's prefix cache work between its load and its save */
typedef struct fg_pfx_block {
    uint32_t n, P;                 /* sequences, padded prompt length */
    fg_prefix_key **keys;          /* [n][n_prompt / page_tokens] chain keys */
    uint32_t *known;               /* [n] leading pages the cache held */
    uint32_t *cached;              /* [n] tokens loaded into the KV cache */
    uint64_t tok_cached, tok_computed; /* prompt tokens taken from the cache / computed */
} fg_pfx_block;
/* Look up each prompt's cached pages and copy them into the block's KV chunks; *s0 receives
 * the first cache slot the prefill must compute (0 without a cache). pb is freed by
 * fg_pfx_block_free, also on failure. */
int fg_engine_prefix_load(fg_engine *e, const fg_gen_seq *seqs, uint32_t n, uint32_t P,
                          fg_pfx_block *pb, uint32_t *s0, fg_err *err);
/* Save the block's whole prompt pages the cache did not hold (after the prefill). */
int fg_engine_prefix_save(fg_engine *e, const fg_gen_seq *seqs, fg_pfx_block *pb, fg_err *err);
void fg_pfx_block_free(fg_pfx_block *pb);

/* Does this process run unit u? */
static inline int fg_engine_runs(const fg_engine *e, uint32_t u)
{
    const unit *un = &e->units[u];
    if (!e->link)
        return 1;
    if (un->kind == FG_UNIT_EMBED || un->kind == FG_UNIT_HEAD)
        return e->link->rank == 0;
    return un->layer >= e->l0 && un->layer < e->l1;
}

/* The pager chunk of the KV cache of (batch k, layer). */
static inline uint32_t fg_engine_kv_id(const fg_engine *e, uint32_t k, uint32_t layer)
{
    return e->kv_first + k * (e->l1 - e->l0) + (layer - e->l0);
}

/* stage.c: the stage's messages (stage_int.h) over the link. */
/* Bytes of the most rows one pipeline message carries (a batch's prompt rows, or a block's
 * prompts) under the engine's block. */
uint64_t fg_stage_max_rows(const fg_engine *e);
int fg_stage_send(const fg_link *l, uint32_t kind, uint32_t step, uint32_t batch, uint32_t first,
                  uint32_t end, const void *payload, size_t bytes, fg_err *err);
/* The next message; *payload valid until the next receive. A malformed one is an error. */
int fg_stage_recv(const fg_link *l, int forever, fg_stage_msg *h, const void **payload,
                  fg_err *err);
/* After build_units: this rank's layers (the split balanced by bytes and FLOPs), the plan's
 * view restricted to them. */
int fg_stage_setup(fg_engine *e, fg_err *err);
/* The plan of a stage: the budget less the link's buffers. */
int fg_stage_plan(fg_engine *e, fg_err *err);
/* Once the engine is open: the link's receives posted ahead, sized for the largest message. */
int fg_stage_ready(fg_engine *e, fg_err *err);
/* Rank 0, once its engine is open: OPEN to the followers. */
int fg_stage_announce(fg_engine *e, fg_err *err);

/* schedule.c: a follower: run the blocks rank 0 sends until QUIT. */
int fg_stage_serve(fg_engine *e, fg_err *err);

/* engine.c */
/* Start reading the units of the span at u (best effort), for a step of `tokens` tokens: a
 * sparse MLP's experts only when they are expected to be mostly chosen (policy.h
 * fg_expert_paging). */
void fg_engine_span_prefetch(fg_engine *e, uint32_t u, uint64_t tokens);
/* Prefetch the KV chunk of (batch k, layer) (best effort). */
void fg_engine_kv_prefetch(fg_engine *e, uint32_t k, uint32_t layer);
/* Acquire/release a pager chunk, counting the wait. release folds its error into rc. */
int fg_engine_acquire(fg_engine *e, uint32_t id, fg_pager_view *v, fg_err *err);
/* dirty: 0 clean, 1 modified, FG_ENGINE_STORE modified and not needed again soon (a batch's
 * KV chunk after its attention: written behind when homed on disk). */
enum { FG_ENGINE_STORE = 2 };
int fg_engine_release(fg_engine *e, const fg_pager_view *v, int dirty, int rc, fg_err *err);
/* Load unit u's SMALL tensors into dst (f32) and fill w with every tensor's view. */
/* decoded: the unit's SMALL tensors are already at dst (the kept embedding span): only the
 * pointers are set */
int fg_engine_unit_load(fg_engine *e, uint32_t u, fg_unit_w *w, float *dst, int decoded,
                        fg_err *err);
void fg_engine_span(fg_engine *e, const char *name, double t0, int32_t u, int32_t batch,
                    int32_t step);

/* engine_dev.c: the backend and its device (see the file's comment) */
int fg_engine_device_budget(fg_engine *e, fg_err *err);   /* before the plan */
int fg_engine_backend_create(fg_engine *e, fg_err *err);
int fg_engine_pager_device(fg_engine *e, fg_pager_config *pc, fg_err *err);
/* The engine's buffers of type e->buft ((dev) above): alloc (*p owned by the engine until
 * fg_engine_buf_free; NULL accepted there) and the host twins of those that have one. */
int fg_engine_buf_alloc(fg_engine *e, uint64_t n, void **p, fg_err *err);
void fg_engine_buf_free(fg_engine *e, void *p);
int fg_engine_buffers_dev(fg_engine *e, fg_err *err);
void fg_engine_buffers_dev_free(fg_engine *e);
/* n bytes from host src to dst of type e->buft (up), from src of type e->buft to host dst
 * (down), within e->buft (dcopy); nothing when the two are the same memory. */
int fg_engine_up(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
int fg_engine_down(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
int fg_engine_dcopy(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err);
/* n bytes from src (of type st) to dst (of type dt), through the device when either is
 * device memory. */
int fg_engine_xcopy(fg_engine *e, void *dst, fg_buft dt, const void *src, fg_buft st, size_t n,
                    fg_err *err);
/* The buffer type of a pager view's bytes. */
fg_buft fg_engine_view_buft(const fg_pager_view *v);
/* n bytes from src (a chunk in src_tier) to dst, a buffer of type e->buft. */
int fg_engine_rows_copy(fg_engine *e, void *dst, const void *src, fg_tier src_tier, size_t n,
                        fg_err *err);
/* Decode SMALL tensor t (its pieces through w, a weight over its chunks) into dst (of type
 * e->buft) by the backend's gather: on a device backend the f32 rows never cross the link. */
int fg_engine_small_gather(fg_engine *e, const fg_weight *w, uint64_t rows, uint64_t cols,
                           float *dst, fg_err *err);
/* A view's bytes readable by host code: v->ptr, or a copy in *tmp (the caller frees it). */
int fg_engine_small_bytes(fg_engine *e, const fg_pager_view *v, const void **bytes, void **tmp,
                          fg_err *err);

/* trace.c */
int fg_trace_write(const fg_engine *e, const char *path, fg_err *err);

#endif
