/* engine_int.h - private to the engine (engine.c: open, planning, weights; generate.c: the
 * schedules; trace.c: Chrome trace events). */
#ifndef FG_ENGINE_INT_H
#define FG_ENGINE_INT_H

#include "engine.h"
#include "opt_config.h"
#include "store.h"

/* Roles of a sub-layer's tensors, in the order of the fg_opt_*_w structs. */
enum { U_EMBED, U_ATTN, U_MLP, U_HEAD };
#define UNIT_MAX_TENSORS 10
/* Units (spans of units loaded together) prefetched ahead of the one computing, when the pool
 * has the room: with one, the disk idles whenever a unit's reads end before the current unit's
 * compute does (opt-1.3b decode from disk read at 1.0 GB/s of the disk's 1.7). */
#define FG_PREFETCH_AHEAD 2
/* Chunks of the streamed LM head read ahead of the one multiplying (a 4 MiB chunk multiplies
 * in about as long as it takes to read). */
#define FG_HEAD_AHEAD 4

typedef struct wtensor {
    char name[96];
    uint32_t n_dims;
    uint64_t dims[2];
    fg_codec codec;
    uint32_t file_id, group;       /* store weight file; owning unit (pager group) */
    uint32_t first_id, n_chunks;   /* pager chunk ids [first_id, first_id + n_chunks) */
    fg_fgt_chunk_info *chunks;     /* [n_chunks] (rows and lengths) */
    uint64_t stored_bytes;
} wtensor;

typedef struct unit {
    int kind;
    uint32_t layer;
    int t[UNIT_MAX_TENSORS];       /* tensor indices, -1 when the model lacks that tensor */
    uint32_t n_t;
    uint64_t f32_floats;           /* floats materialized (gathered/streamed tensors excluded) */
    uint64_t stored_bytes;
    uint64_t resident_bytes;       /* materialized tensors' stored bytes */
    uint64_t stream_chunk;         /* largest chunk of a gathered/streamed tensor */
} unit;

/* The source of a piecewise Linear weight (fg_weight.ctx): tensor t of the engine. */
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
    fg_opt_hparams hp;
    fg_opt_config cfg;
    fg_store *store;
    fg_tok *tok;
    fg_pager *pager;
    fg_backend *be;
    struct fg_par *par;            /* helper threads (--threads) for weight conversion */
    wtensor *tensors;
    uint32_t n_tensors;
    unit *units;
    uint32_t n_units;
    uint32_t gbs, ngb, max_ctx;
    uint32_t ahead;                /* spans prefetched ahead: FG_PREFETCH_AHEAD, or 1 when tight */
    uint32_t max_chunk_rows;       /* largest chunk of any weight tensor, in rows */
    uint64_t max_chunk_floats;
    /* buffers, sized once at open */
    float *unit_f32;               /* [max unit f32 floats] */
    float *chunk_f32;              /* [max chunk floats] for streamed and piecewise tensors */
    wsrc wsrc[2 * UNIT_MAX_TENSORS]; /* piecewise weights of the (at most two) loaded units */
    float *tok_rows;               /* [ws_rows, embed_dim] */
    uint32_t ws_rows;              /* rows of a step: max(gbs * max_ctx, gbs * ngb) */
    /* the zig-zag decode step computes the whole block at once (see generate.c): its hidden
     * rows and new ids/positions, sequence s at row s */
    float *blk_hidden;             /* [gbs * ngb, hidden] */
    int32_t *blk_ids, *blk_pos;    /* [gbs * ngb] */
    /* activations: one pager chunk per batch k (id act_first + k), [gbs * max_ctx, hidden] f32,
     * in the same offload file, homed in RAM or on disk by (hg, hc, hd) */
    uint32_t act_first;
    uint64_t act_chunk;
    /* KV cache: one pager chunk per (batch k, layer l), id kv_first + k * layers + l, in an
     * offload file: K rows then V rows, gbs * max_ctx rows each of kv_row_bytes; homed in RAM
     * or on disk by the policy's (cg, cc, cd) */
    uint32_t kv_first;
    uint64_t kv_chunk;             /* padded bytes of one chunk */
    fg_codec kv_codec;
    size_t kv_row;                 /* bytes of one compressed row; 0 = f32 cache */
    float *kv_tmp;                 /* [2][max_ctx * hidden] decode scratch (4-bit cache) */
    float *logits;                 /* [logit_rows, vocab] */
    uint32_t logit_rows;
    float *head_tmp;               /* [logit_rows, max chunk rows] */
    float *head_x;                 /* [logit_rows, hidden + embed_dim] */
    uint8_t *valid;                /* [ngb][gbs * max_ctx] */
    int32_t *ids, *pos;            /* [ngb][gbs * max_ctx] */
    fg_opt_ws *ws;
    fg_sample_scratch *sampler;
    uint64_t planned;
    /* stats */
    uint64_t converted;
    double compute_s, wait_s;
    span *spans;
    size_t n_spans, cap_spans;
    double t_open;
};

/* engine.c */
int fg_engine_unit_prefetch(fg_engine *e, uint32_t u);
/* Prefetch the KV chunk of (batch k, layer l) (best effort). */
void fg_engine_kv_prefetch(fg_engine *e, uint32_t k, uint32_t layer);
/* Acquire batch k's activations (loading them when homed on disk) and prefetch the next
 * batch's when next < n_batches; release with dirty when they were written. */
int fg_engine_act_acquire(fg_engine *e, uint32_t k, uint32_t n_batches, fg_pager_view *v,
                          fg_err *err);
int fg_engine_act_release(fg_engine *e, const fg_pager_view *v, int dirty, int rc, fg_err *err);
/* Materialize unit u's small and Linear tensors into dst (inside e->unit_f32) and fill the
 * weight views. */
int fg_engine_unit_load(fg_engine *e, uint32_t u, void *wstruct, float *dst, fg_err *err);
/* How many units are loaded together starting at u: 2 for attention + MLP when sub-layers are
 * not separate (--sep-layer false), else 1. */
uint32_t fg_engine_span_of(const fg_engine *e, uint32_t u);
/* Gather embedding rows for ids[0..n) into e->tok_rows. */
int fg_engine_gather(fg_engine *e, const int32_t *ids, uint32_t n, fg_err *err);
/* The LM head over rows [row0, row0 + n) of the staging area (fg_engine_head_put) into the
 * same rows of e->logits, streaming the head's weights chunk by chunk: each chunk is decoded
 * once for all the rows, so the zig-zag schedule converts the head once per step for the whole
 * block. Uses the head unit's small tensors, already loaded into hw. */
void fg_engine_head_put(fg_engine *e, uint32_t row, const float *hidden);
int fg_engine_head(fg_engine *e, const fg_opt_head_w *hw, uint32_t row0, uint32_t n, fg_err *err);
void fg_engine_span(fg_engine *e, const char *name, double t0, int32_t u, int32_t batch,
                    int32_t step);

/* trace.c */
int fg_trace_write(const fg_engine *e, const char *path, fg_err *err);

#endif
