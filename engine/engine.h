/* engine.h - generation over a store: any family of model/'s table, its weights streamed through
 * the pager under a RAM budget, computed by a backend, FlexGen's zig-zag block schedule (paper
 * Algorithm 1) or the row-by-row baseline, and perplexity scoring.
 *
 * Lifecycle: open a store (fg_store_open, read-only) and its model (fg_model_open),
 * fg_engine_open(model, opts) borrows both, fg_engine_generate / fg_engine_logits per block,
 * fg_engine_close, then close the model and the store. The
 * memory plan (plan.h) is made at open and every buffer is sized from it; a budget that cannot
 * hold the smallest block is refused naming the budget that would.
 *
 * Threads: one engine is used by one thread; its backend runs its own helper threads.
 */
#ifndef FG_ENGINE_H
#define FG_ENGINE_H

#include <stdint.h>

#include "fg_error.h"
#include "model.h"
#include "model_open.h"
#include "pager.h"
#include "plan.h"
#include "policy.h"
#include "sample.h"
#include "stage.h"
#include "store.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_engine fg_engine;

typedef struct fg_engine_opts {
    fg_policy policy;
    uint32_t max_ctx;         /* longest prompt + generation a block may need (0: the model's) */
    uint64_t ram_budget;      /* bytes for everything the engine allocates; 0 = no limit */
    int threads;              /* compute threads; 0 = online CPUs */
    fg_compute compute;       /* Linear arithmetic: f32 (exact), or int8 on Q4/Q8 weights
                                 grouped along the input axis (backend.h) */
    int no_verify;            /* skip checking chunk checksums as they are read */
    const char *trace_path;   /* Chrome trace events JSON written at close, or NULL */
    const char *offload_dir;  /* where the KV cache / activation file lives when homed on disk
                                 (NULL: $TMPDIR or /tmp); unlinked as soon as it is open */
    void (*notice)(void *ctx, const char *line); /* one-line notices (may be NULL) */
    void *notice_ctx;
    fg_backend_kind backend;  /* FG_BACKEND_CPU (the default), _SIM or _CUDA (backend.h) */
    uint64_t gpu_budget;      /* device bytes: the pager's DEVICE pool and the backend's per-op
                                 staging (0: CUDA's free memory less 1 GiB; sim 1 GiB) */
    double sim_link_gbps;     /* the simulated device's link (0: memcpy speed) */
    int gpu_index;            /* --backend cuda: the GPU, this index modulo the GPUs visible
                                 (pipeline ranks on one machine take them in turn) */
    const fg_link *link;      /* a pipeline stage (stage.h) of link->size ranks, borrowed; NULL
                                 or size 1: one process runs every unit */
    uint32_t micro_batch;     /* pipeline: batches a micro-batch holds (0: ceil(ngb / ranks)) */
    uint32_t gen_hint;        /* pipeline: new tokens a sequence (of max_ctx): the head's share
                                 of the FLOPs when the stages are split (0: every token) */
    int no_share;             /* fg_engine_score computes every window whole, shared prefixes
                                 too (to measure what sharing saves) */
    int score_room;           /* under a RAM budget, the plan leaves room for fg_engine_score's
                                 shared rows (the held run and the donors' rows, which live
                                 beside the plan): at most a quarter of the budget, as much as
                                 a context of max_ctx rows needs, when the plan still fits
                                 without it. Without it the pager's pool takes every byte the
                                 plan does not, and a budgeted score shares nothing */
    int plan_only;            /* open stops at the memory plan (--dry-run): no backend, pager
                                 or buffers, so a plan larger than the machine still prints;
                                 only fg_engine_plan, _hparams and _close may follow */
} fg_engine_opts;

/* Where the offload file goes under o: --offload-dir, else $TMPDIR, else /tmp. */
const char *fg_engine_offload_dir(const fg_engine_opts *o);
/* Bytes its file system has free for an unprivileged user; UINT64_MAX when statvfs cannot
 * tell. */
uint64_t fg_engine_offload_free(const fg_engine_opts *o);
/* Bytes of RAM the kernel says are available now (MemAvailable); 0 when it cannot tell. Without
 * --ram-budget a run whose plan needs more is refused at open (naming the block and the flags
 * that shrink it) rather than failing in an allocation or being killed mid-run. */
uint64_t fg_engine_mem_available(void);

/* The device bytes the plan may use under o (o->backend, o->gpu_budget): the flag, or the
 * default (sim: 1 GiB; CUDA: the free memory less 1 GiB), less what the CUDA backend keeps for
 * cuBLAS and its scratch; 0 on the CPU backend. Errors name --gpu-budget. */
int fg_engine_gpu_budget(const fg_engine_opts *o, uint64_t *out, fg_err *err);
/* A backend as fg_engine_open makes it from o (sim: of `capacity` device bytes), owned by the
 * caller (fg_backend_free): the policy search calibrates the device through one. */
int fg_engine_backend_new(const fg_engine_opts *o, uint64_t capacity, fg_backend **out,
                          fg_err *err);

/* Open an engine on a model (model_open.h; borrowed with its store: both must outlive the
 * engine). *out owned by the caller (fg_engine_close). */
int fg_engine_open(const fg_model *model, const fg_engine_opts *o, fg_engine **out,
                   fg_err *err);
/* Writes the trace (when asked: a failure is reported through notice and returned), frees
 * everything. NULL accepted (returns FG_OK). */
int fg_engine_close(fg_engine *e, fg_err *err);

const fg_hparams *fg_engine_hparams(const fg_engine *e);
const fg_plan *fg_engine_plan(const fg_engine *e);   /* valid until close */
uint32_t fg_engine_block_size(const fg_engine *e);   /* gbs * ngb */

enum { FG_FINISH_NONE = 0, FG_FINISH_LENGTH, FG_FINISH_EOS, FG_FINISH_STOP };

typedef struct fg_gen_seq {
    const int32_t *prompt;   /* ids, BOS included when the model wants one */
    uint32_t n_prompt;       /* >= 1 */
    uint32_t max_new;        /* >= 1 */
    fg_sample_params sample;
    uint64_t stream;         /* generator stream (e.g. the job's index): seeds per sequence */
    int32_t *out;            /* [max_new], caller-owned */
    uint32_t n_out;          /* tokens produced */
    int finish;              /* FG_FINISH_* */
    int ignore_eos;          /* an EOS id is a token like any other: max_new tokens always */
    uint32_t min_tokens;     /* before this many tokens the EOS ids' logits are -inf (as
                                transformers' MinNewTokensLengthLogitsProcessor, vLLM's
                                min_tokens); stop strings are the stop hook's to hold back */
} fg_gen_seq;

/* Asked after every new token of a sequence: non-zero stops it with FG_FINISH_STOP. */
typedef int (*fg_stop_fn)(void *ctx, uint32_t seq, const int32_t *out, uint32_t n_out);
/* Progress: tokens produced so far in this block. */
typedef void (*fg_tick_fn)(void *ctx, uint64_t tokens);

/* The logits sequence seq sampled its token n_out (0-based) from: [vocab] floats, valid during
 * the call. */
typedef void (*fg_logits_fn)(void *ctx, uint32_t seq, uint32_t n_out, const float *logits,
                             uint32_t vocab);

typedef struct fg_gen_hooks {
    fg_stop_fn stop;
    void *stop_ctx;
    fg_tick_fn tick;
    void *tick_ctx;
    fg_logits_fn logits;     /* may be NULL */
    void *logits_ctx;
} fg_gen_hooks;

typedef struct fg_gen_stats {
    double prefill_s, decode_s;
    uint64_t new_tokens;
    uint64_t prompt_cached;  /* prompt tokens whose KV rows came from the prefix cache */
    uint64_t prompt_computed; /* prompt tokens the prefill computed */
} fg_gen_stats;

/* Generate for seqs[0..n) (n <= block size) as one block. hooks may be NULL. */
int fg_engine_generate(fg_engine *e, fg_gen_seq *seqs, uint32_t n, const fg_gen_hooks *hooks,
                       fg_gen_stats *st, fg_err *err);

/* Negative log-likelihood (natural log, summed) of ids[1..n) given the preceding ids, for up
 * to block-size windows at once: windows[i] has lens[i] ids. *nll and *count accumulate (nll
 * NULL: none is computed). With out non-NULL every position's logits are copied too: window
 * w, position t at out[w * out_stride + t * vocab] (out_stride >= lens[w] * vocab floats). */
int fg_engine_logits(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                     uint32_t n, double *nll, uint64_t *count, float *out, size_t out_stride,
                     fg_err *err);

/* Scoring: fg_engine_logits for windows whose logits are wanted from position from[w] on
 * (from NULL: every position, as fg_engine_logits): out, when not NULL, holds window w's
 * position t >= from[w] at out[w * out_stride + (t - from[w]) * vocab], and *nll / *count cover
 * the predictions those positions make. Windows that begin with the same tokens (lm-eval's
 * choices of one context; a few-shot prefix) compute them once when that saves a quarter of
 * the prefill's rows: their longest common run before from[w] is a prefill of its own, whose KV
 * rows are copied into each window's cache; the windows' prefill computes the rest. The engine
 * keeps the run of the last window in token order (before its from) to the next call, whose
 * windows take what they begin with of it, and a run every window of a call begins with that
 * the kept one lacks may be a prefill of its own first: a caller that sorts its windows by
 * their tokens computes a few-shot prefix once for all its calls; with a prefix cache
 * (fg_engine_set_prefix) that run's cached pages are loaded and its new ones saved (across
 * jobs). The same numbers either way
 * (the rows of a prefix do not depend on what follows or on the padding). from NULL
 * (fg_engine_logits) or opts.no_share: nothing is shared, nor kept. */
int fg_engine_score(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                    const uint32_t *from, uint32_t n, double *nll, uint64_t *count, float *out,
                    size_t out_stride, fg_err *err);

/* ---- the prefix cache (prefix.h) ---- */
struct fg_prefix;
struct fg_prefix_ident;
/* The identity of this engine's KV rows (model content hash over the store's config and
 * tensor digests, KV codec and row size, compute mode, backend) for pages of page_tokens. */
int fg_engine_prefix_ident(fg_engine *e, uint32_t page_tokens, struct fg_prefix_ident *id,
                           fg_err *err);
/* Use p (borrowed; NULL: none) from the next fg_engine_generate on: cached prompt pages are
 * loaded instead of computed and the new whole pages saved. Results are unchanged. */
void fg_engine_set_prefix(fg_engine *e, struct fg_prefix *p);

typedef struct fg_engine_stats {
    fg_pager_stats pager;
    uint64_t weight_bytes_converted; /* f16/q4 -> f32 by the backend */
    uint64_t weight_bytes_panel;     /* weights repacked by the CPU's prefill GEMMs (f16/bf16
                                        widened to f32, Q4 codes unpacked) */
    double compute_s, load_wait_s;
    uint64_t ram_peak_planned;       /* the plan's total_host */
    uint64_t link_bytes[2];          /* over the host <-> device link: [0] host -> device,
                                        [1] device -> host (0 on the CPU backend) */
    uint64_t prefill_rows;           /* rows the prefills computed (sequence x position, the
                                        left padding included) */
    uint64_t rows_shared;            /* prompt rows fg_engine_score copied from a prefix shared
                                        by several windows instead of computing them */
    uint64_t disk_read[2];           /* bytes read from disk while fg_engine_generate ran its
                                        prefill steps [0] (prefix cache loads included) and its
                                        decode steps [1] (a step's prefetches of the next one's
                                        weights count to it) */
    fg_moe_stats moe[2];             /* a mixture of experts' sparse MLPs: [0] prefill steps,
                                        [1] decode steps (model.h) */
    uint64_t decode_sweeps;          /* decode steps fg_engine_generate ran, each one pass over
                                        the weights: of all the block's batches under zig-zag,
                                        of one batch under row-by-row */
} fg_engine_stats;
void fg_engine_stats_get(const fg_engine *e, fg_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif
