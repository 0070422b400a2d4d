/* engine.h - OPT generation over a store: weights streamed through the pager under a RAM
 * budget, FlexGen's zig-zag block schedule (paper Algorithm 1) or the row-by-row baseline,
 * sampling, perplexity scoring.
 *
 * A block of up to gbs * ngb sequences is generated together. For every token step, every
 * sub-layer's weights are loaded once (disk -> HOST through the pager, while the previous
 * sub-layer computes when overlap is on), converted to f32, and used for all ngb batches
 * before the next sub-layer: weights are read once per step for the whole block instead of
 * once per sequence batch (row-by-row).
 *
 * Memory (all counted against ram_budget): the pager's HOST pool (weights homed in RAM plus a
 * streaming window of two sub-layers for those on disk), one f32 sub-layer buffer, the KV cache
 * and activations of the block, the workspace. fg_engine_open refuses a budget that cannot hold
 * the smallest configuration and says by how much.
 *
 * Threads: one engine is used by one thread; the CPU backend splits each GEMM, and the engine
 * each weight conversion, across `threads` helper threads of their own (OpenBLAS runs
 * single-threaded inside each part).
 */
#ifndef FG_ENGINE_H
#define FG_ENGINE_H

#include <stdint.h>

#include "fg_error.h"
#include "opt.h"
#include "pager.h"
#include "sample.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_engine fg_engine;

typedef struct fg_engine_opts {
    int have_policy;          /* 1: use policy (--percent); 0: the default policy */
    fg_pager_policy policy;   /* weights, KV cache, activations: [GPU, CPU, disk] fractions */
    uint32_t gbs, ngb;        /* GPU batch size and number of GPU batches; 0 = choose */
    uint32_t max_ctx;         /* longest prompt + generation a block may need (for sizing) */
    uint64_t ram_budget;      /* bytes for everything above; 0 = no limit */
    int overlap;              /* prefetch the next sub-layer's weights during compute */
    int row_schedule;         /* row-by-row baseline instead of zig-zag */
    int sep_layer;            /* FlexGen's --sep-layer: attention and MLP are separate units
                                 (loaded, prefetched and evicted apart); 0 loads each layer's
                                 two together */
    int threads;              /* compute threads (GEMM parts, conversion); 0 = online CPUs */
    int verify;               /* check chunk checksums on every load */
    int compress_cache;       /* 4-bit KV cache, groups of 64 along the head dimension */
    int compress_weight;      /* --compress-weight: 4-bit weight matrices, the store's when it
                                 holds them, else quantized at load (groups of 64 along the
                                 output channels) into a temporary store in offload_dir, which
                                 is removed once the engine is open */
    float attn_sparsity;      /* top-k sparse attention: fraction of keys kept; 0 = dense */
    const char *trace_path;   /* Chrome trace events JSON, or NULL */
    const char *offload_dir;  /* where the KV cache file lives (NULL: $TMPDIR or /tmp); the
                                 file is unlinked as soon as the pager has it open */
    void (*notice)(void *ctx, const char *line); /* one-line notices (may be NULL) */
    /* progress of long work at open (quantizing at load): bytes done of total (may be NULL) */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    void *notice_ctx;
} fg_engine_opts;

/* Open the store at dir read-only, load config and tokenizer from its metadata, register every
 * weight chunk with a pager and size all buffers. *out owned by the caller (fg_engine_close). */
int fg_engine_open(const char *dir, const fg_engine_opts *o, fg_engine **out, fg_err *err);
/* Writes the trace (when asked), frees everything. NULL accepted. */
void fg_engine_close(fg_engine *e);

/* The store's tokenizer alone (to size a run before opening the engine); the caller owns *out
 * (fg_tok_free). The store is opened and closed within the call. */
int fg_engine_tokenizer_open(const char *dir, fg_tok **out, fg_err *err);

const fg_opt_hparams *fg_engine_hparams(const fg_engine *e);
fg_tok *fg_engine_tokenizer(fg_engine *e);     /* owned by the engine */
uint32_t fg_engine_block_size(const fg_engine *e); /* gbs * ngb chosen at open */
void fg_engine_batching(const fg_engine *e, uint32_t *gbs, uint32_t *ngb);

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
} fg_gen_seq;

/* Asked after every new token of a sequence: non-zero stops it with FG_FINISH_STOP. */
typedef int (*fg_stop_fn)(void *ctx, uint32_t seq, const int32_t *out, uint32_t n_out);
/* Progress: tokens produced so far in this block. */
typedef void (*fg_tick_fn)(void *ctx, uint64_t tokens);

typedef struct fg_gen_stats {
    double prefill_s, decode_s;
    uint64_t new_tokens;
} fg_gen_stats;

/* Generate for seqs[0..n) (n <= block size) as one block. */
int fg_engine_generate(fg_engine *e, fg_gen_seq *seqs, uint32_t n, fg_stop_fn stop,
                       void *stop_ctx, fg_tick_fn tick, void *tick_ctx, fg_gen_stats *st,
                       fg_err *err);

/* Negative log-likelihood (natural log, summed) of ids[1..n) given the preceding ids, for up
 * to block-size windows at once: windows[i] has lens[i] ids (each starting with BOS).
 * *nll and *count accumulate. */
int fg_engine_score(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                    uint32_t n, double *nll, uint64_t *count, fg_err *err);

/* Like fg_engine_score, and also copies every position's logits: window w, position t at
 * out[w * out_stride + t * vocab] (out_stride >= lens[w] * vocab floats). nll/count may be NULL. */
int fg_engine_logits(fg_engine *e, const int32_t *const *windows, const uint32_t *lens,
                     uint32_t n, double *nll, uint64_t *count, float *out, size_t out_stride,
                     fg_err *err);

typedef struct fg_engine_stats {
    fg_pager_stats pager;
    uint64_t weight_bytes_converted; /* f16/q4 -> f32 */
    double compute_s, load_wait_s;
    uint64_t ram_peak_planned;       /* bytes the plan reserves (pool + buffers + cache) */
} fg_engine_stats;
void fg_engine_stats_get(const fg_engine *e, fg_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif
