/* plan.h - the memory plan: a pure function (model sizes, policy, context, budget) -> every
 * byte the engine will allocate, per buffer and per tier, the block it runs and where each kind
 * of data is homed. The engine allocates by it (engine/engine.c takes each size from the plan,
 * never recomputes one) and the policy search evaluates candidate policies with it.
 *
 * Invariants (checked by tests/test_plan.c):
 *  1. total_host = fixed + pool, and fixed is the sum of the named host buffers;
 *  2. with a RAM budget, total_host <= budget, or fg_plan_make fails naming the smallest budget
 *     that fits and the block it tried;
 *  3. the pool holds what is homed in RAM plus the streaming window (two spans of units, two KV
 *     chunks, two activation chunks), so streaming never evicts a homed chunk; a placement
 *     (--percent) whose homed bytes do not fit is refused here, never later by the pager;
 *  5. homed bytes are the pager's (pager/place.c): weights by its per-unit midpoint rule over
 *     the model's chunks, rank by rank (what every step reads first, then a mixture's experts,
 *     then the embedding's rows), each KV and activation chunk (a group of its own) whole;
 *  4. the same inputs give the same plan (no clock, no environment, no I/O).
 */
#ifndef FG_PLAN_H
#define FG_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "fg_error.h"
#include "model.h"
#include "policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of one unit's weights as stored. */
typedef struct fg_plan_unit {
    uint64_t stored;       /* stored bytes (4 KiB padded chunks) the unit owns */
    uint64_t resident;     /* bytes resident while it computes (all but gathered/streamed) */
    uint64_t stream_chunk; /* largest chunk of a gathered or streamed tensor */
    uint64_t small_floats; /* f32 floats of its SMALL tensors (decoded when it loads) */
} fg_plan_unit;

/* What the plan needs to know of a model: hyperparameters and stored sizes. */
typedef struct fg_plan_model {
    const fg_hparams *hp;
    uint32_t n_units;            /* fg_model_n_units(hp) */
    const fg_plan_unit *units;   /* [n_units] */
    uint64_t weights;            /* stored bytes of every tensor */
    uint64_t max_chunk_floats;   /* largest decoded chunk of any tensor */
    const uint64_t *chunk;       /* padded weight chunks, unit by unit in pager id order; NULL:
                                    a fraction homes that share of the bytes */
    const uint32_t *unit_first;  /* [n_units + 1]: unit u's are chunk[first[u] .. first[u + 1]) */
    uint32_t kv_layers_off;      /* layers whose KV cache this process does not hold (0: it
                                    holds all; a pipeline stage holds only its own) */
    const uint8_t *chunk_rank;   /* [chunks]: each chunk's placement rank (pager.h
                                    FG_PLACE_RANKS), as registered; NULL: all 0 */
} fg_plan_model;

/* Spans prefetched ahead of the one computing when the pool's streaming room holds them all
 * (fg_plan.ahead; 1 otherwise). */
#define FG_PLAN_AHEAD 2

typedef struct fg_plan {
    uint32_t gbs, ngb, max_ctx;
    fg_pager_policy frac;        /* the placement (given, or the default rule's) */
    uint32_t ahead;              /* spans prefetched ahead of the one computing */
    uint32_t logit_rows;         /* rows the LM head computes at once */
    /* one chunk of each kind (padded to 4 KiB) */
    uint64_t kv_row;             /* bytes of one cached K (or V) row */
    uint64_t kv_chunk;           /* K and V of gbs sequences x max_ctx rows: one (batch, layer)
                                  * (MLA: the latent rows alone, fg_model_kv_planes 1) */
    uint64_t act_chunk;          /* one batch's activations: gbs x max_ctx x hidden f32 */
    uint64_t max_span;           /* most stored bytes one load keeps resident */
    /* host buffers outside the pager */
    uint64_t small_f32;          /* SMALL tensors, f32: the embedding unit's (small_keep bytes,
                                  * decoded once and kept: OPT's learned-position table is one,
                                  * and decoding it every step was 2.7% of a 4-bit batch-1
                                  * decode), then room for the largest other span's */
    uint64_t small_keep;
    uint64_t wdecode;            /* the backend's decode buffer: the largest chunk in f32 */
    uint64_t lscratch;           /* the CPU backend's per-Linear copies of x: packed for the
                                  * 16-bit GEMM or quantized to int8 (one buffer, the larger),
                                  * and the fused kernel's aligned copy */
    uint64_t workspace;          /* fg_model_ws */
    uint64_t head;               /* logits [logit_rows, vocab] + staged rows */
    uint64_t block;              /* ids, positions, validity; the decode step's block rows */
    uint64_t sampler;
    /* on a device backend (policy gpu_budget > 0) the buffers above live in device memory
     * (counted in dev_reserve) but for their host sides: the logits' rows the sampler reads and
     * the greedy ids (head_host), the block's ids, positions and validity (block_host), and the
     * sampler; on the CPU head_host = head, block_host = block */
    uint64_t head_host, block_host;
    uint64_t fixed;              /* host bytes: the sum of the seven above on the CPU; on a
                                    device head_host + block_host + sampler */
    /* the pager's HOST pool */
    uint64_t homed[3];           /* weights, KV cache, activations homed in RAM */
    uint64_t on_disk[3];         /* ... and on disk */
    uint64_t window;             /* streaming room */
    uint64_t pool;
    uint64_t total_host;         /* fixed + pool */
    /* the device (policy gpu_budget > 0): the engine's buffers a device backend keeps in
     * device memory (workspace, head, small f32 and their row indices, block; their host sides
     * are head_host and block_host) plus what the backend stages in one op at most (an
     * activation chunk, a KV chunk, two weight pieces), and the pager's DEVICE pool (the rest
     * of the budget), which holds what is homed on the GPU */
    uint64_t dev_homed[3];       /* weights, KV cache, activations homed on the GPU */
    uint64_t dev_reserve, dev_pool;
    uint64_t budget;             /* the RAM budget it was made for (0 = none) */
} fg_plan;

/* Make the plan for running m under policy p with contexts up to max_ctx tokens in ram_budget
 * bytes (0 = no limit). gbs/ngb left 0 in p are chosen: 8 x 4, shrunk (ngb first) until the
 * block's buffers and streaming room fit. Without fractions in p everything is homed in RAM
 * when it fits, else the weights on disk but for the share the room left beside one more span
 * holds (homed rank by rank: what every step reads first), then the KV cache on disk too; with
 * a GPU (p->gpu_budget) the weights go to its pool first, as much as surely fits, and RAM homes
 * the next share it holds. Errors: FG_ERR_NO_SPACE naming the
 * budget needed (RAM, or the GPU's); FG_ERR_PAGER_NO_TIER when p puts data on a GPU and none is
 * planned for. Bytes: dev_homed + homed + on_disk is each kind's total. */
int fg_plan_make(const fg_plan_model *m, const fg_policy *p, uint32_t max_ctx,
                 uint64_t ram_budget, fg_plan *out, fg_err *err);

/* Units loaded together starting at unit u: 2 (a layer's attention and MLP) without sep_layer,
 * else 1. */
uint32_t fg_plan_span(const fg_plan_model *m, const fg_policy *p, uint32_t u);

/* Weight bytes the pager homes at a midpoint below cumulative fraction f (pager/place.c: within
 * each unit and rank, chunk i has midpoint (S_<i + s_i / 2) / S, against f moved onto its rank,
 * fg_place_threshold): in RAM with f = the RAM fraction and no GPU; without a chunk list, that
 * share of the bytes. */
uint64_t fg_plan_homed_weights(const fg_plan_model *m, double w_ram);
/* The model's weight bytes per placement rank (all rank 0 without a chunk list or ranks). */
void fg_plan_rank_bytes(const fg_plan_model *m, uint64_t bytes[FG_PLACE_RANKS]);

/* Something is homed on disk and the pool's streaming room holds all of it: after the prefill
 * nothing is evicted (a decode reads none of it again, and a write-behind would only add
 * traffic). */
int fg_plan_disk_cached(const fg_plan *pl);

/* The plan as text (one "name bytes" line per figure, human units), for --dry-run. */
void fg_plan_print(const fg_plan *pl, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
