/* engine_int.h - private to the engine's own files: engine.c (open, weights through the pager,
 * unit loads), engine_dev.c (the device side), stage.c (the stage's split, plan and messages),
 * prefix_kv.c (the prefix cache's KV rows), trace.c (Chrome trace events). The schedules
 * (schedule.c) do not include it: they see the engine through sched_int.h. */
#ifndef FG_ENGINE_INT_H
#define FG_ENGINE_INT_H

#include "backend.h"
#include "engine.h"
#include "plan_model.h"
#include "prefix.h"
#include "sched_int.h"
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
    uint32_t rank;                 /* placement rank (plan_model.h) */
} wtensor;

typedef fg_plan_unit_tensors unit; /* kind, layer, tensor indices (plan_model.h) */

/* The source of a piecewise weight (fg_weight.ctx): tensor t of the engine; each acquired
 * piece's pager view is its chunk's own (engine wviews, fg_wpiece.token: the CUDA backend
 * holds a run of device-resident pieces at once). */
typedef struct wsrc {
    struct fg_engine *e;
    int t;
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
    uint64_t *plan_chunk;          /* pm.chunk, pm.unit_first, pm.chunk_rank (plan_model.h) */
    uint32_t *plan_unit_first;
    uint8_t *plan_chunk_rank;
    fg_plan_model pm;
    fg_plan plan;
    uint32_t gbs, ngb, max_ctx;
    /* buffers, sized by the plan. Those marked (dev) are of buffer type `buft`: device memory
     * on a device backend (engine_dev.c), which host code never dereferences; their host twins
     * (sc's d_*) are the same pointers on the CPU backend. */
    fg_buft buft;                  /* FG_BUFT_DEVICE on a device backend, else FG_BUFT_HOST */
    fg_sched sc;                   /* what the schedules see (sched_int.h): the row buffers, the
                                      workspace and the sampler live there, with stage_host (a
                                      device backend in a pipeline: host room for one message's
                                      rows, counted in link_bytes) and compute_s */
    float *small_f32;              /* (dev) SMALL tensors: the embedding span's, kept (plan
                                      small_keep), then the loaded span's */
    int small_kept;                /* the embedding span's are decoded */
    int32_t *small_rows;           /* (dev) [n_small_rows] 0, 1, 2, ...: the rows a SMALL tensor
                                      is gathered by on a device backend (NULL on the CPU) */
    uint32_t n_small_rows;
    wsrc *wsrc;                    /* [n_tensors] weight sources */
    fg_pager_view *wviews;         /* [weight chunk ids] the view of each acquired piece,
                                      allocated once (no allocation per acquire) */
    uint32_t ws_rows;              /* rows of a step: max(gbs * max_ctx, gbs * ngb) */
    /* activations: one pager chunk per batch k (id act_first + k), [gbs * max_ctx, hidden] f32 */
    uint32_t act_first;
    /* KV cache: one pager chunk per (batch k, layer l), id kv_first + k * layers + l: K rows
     * then V rows, gbs * max_ctx rows each of plan.kv_row bytes */
    uint32_t kv_first;
    int write_behind;              /* KV chunks homed on disk are written behind after their
                                      attention: set with --overlap unless fg_plan_disk_cached
                                      (nothing is evicted; policy/search.c prices that rule) */
    fg_codec kv_codec;
    /* stats */
    double wait_s;
    span *spans;
    size_t n_spans, cap_spans;
    double t_open;
    struct fg_prefix *prefix;      /* borrowed (fg_engine_set_prefix), or NULL */
    /* the held run (prefix_kv.c): the KV rows of tokens ids[0..n) kept from one
     * fg_engine_score call to the next, layer l's K rows at rows + l * 2 * cap * kv_row and its V
     * rows cap * kv_row further; at most max_ctx rows, one sequence's cache, outside the plan */
    struct {
        int32_t *ids;
        uint8_t *rows;
        uint32_t n, cap;
    } held;
    /* a pipeline stage (stage.c): layers [l0, l1) run here, and rank 0 also runs the embedding
     * and the head; without a link every unit (l0 = 0, l1 = n_layers). KV chunks exist only for
     * [l0, l1). */
    const fg_link *link;
    uint32_t l0, l1;
    uint64_t link_bytes;           /* the budget's share kept for the link's buffers */
};

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

/* stage.c: the stage's split and plan (its messages: stage_int.h) */
/* Bytes of the most rows one pipeline message carries (a batch's prompt rows, or a block's
 * prompts) under the engine's block. */
uint64_t fg_stage_max_rows(const fg_engine *e);
/* After build_units: this rank's layers (the split balanced by bytes and FLOPs), the plan's
 * view restricted to them. */
int fg_stage_setup(fg_engine *e, fg_err *err);
/* The plan of a stage: the budget less the link's buffers. */
int fg_stage_plan(fg_engine *e, fg_err *err);
/* Once the engine is open: the link's receives posted ahead, sized for the largest message. */
int fg_stage_ready(fg_engine *e, fg_err *err);
/* Rank 0, once its engine is open: OPEN to the followers. */
int fg_stage_announce(fg_engine *e, fg_err *err);

/* engine.c */
/* Acquire a pager chunk, counting the wait (released by fg_engine_release, sched_int.h). */
int fg_engine_acquire(fg_engine *e, uint32_t id, fg_pager_view *v, fg_err *err);

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
