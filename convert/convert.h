/* convert.h - checkpoints into stores: fg-convert's library entry points.
 *
 * fg_convert_import reads a Hugging Face OPT directory (safetensors single or sharded,
 * pytorch_model.bin single or sharded) or a FlexGen numpy directory, checks it against its
 * config.json (every tensor present once, with the right shape), and writes a new store: every
 * weight as F16 (F32/BF16 converted, round to nearest even; a value that does not fit F16 is an
 * error naming the tensor), or, with compress_weight, every tensor of two or more dimensions as
 * 4-bit groups (quant/) but a mixture of experts' routers (model.h fg_role_stays_wide: kept in
 * their 16-bit type). Tensors are streamed chunk by chunk: memory stays bounded by a few
 * chunk buffers whatever the checkpoint size. config.json and the tokenizer files become store
 * metadata ("model.config_json", "model.generation_config_json", "tokenizer.model",
 * "tokenizer.tokenizer_json" or "tokenizer.vocab_json" + "tokenizer.merges_txt",
 * "tokenizer.config_json", "tokenizer.special_tokens_map_json", "tokenizer.chat_template_jinja",
 * "tokenizer.chat_template_json": SPEC section 14; a chat template fg cannot parse fails the
 * conversion); every tensor records
 * its source key and the XXH3-64 of its source file.
 *
 * All of it is one store batch: on any error nothing becomes visible, and a store directory the
 * call created is removed again.
 */
#ifndef FG_CONVERT_H
#define FG_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_convert_opts {
    int compress_weight;        /* 0: F16; 4 (or any other nonzero): Q4, 8: Q8, for >= 2 dims */
    uint32_t group_size;        /* 0 = 64 */
    int group_axis;             /* 0 (FlexGen's, along the output channels) or 1; -1 = default */
    const char *tokenizer_dir;  /* tokenizer files from here; NULL = the checkpoint directory */
    uint64_t chunk_bytes;       /* target bytes per chunk (0 = 4 MiB): of F16 rows, or of stored
                                 * bytes for Q4/Q8 grouped along the input axis */
    /* progress: bytes of source read so far out of total (may be NULL) */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* interrupt (may be NULL): set nonzero from another thread (or a signal handler) to stop
     * the conversion at its next chunk; it then fails (FG_ERR_STATE, "interrupted") and, as
     * on any error, leaves no store behind */
    const volatile int *interrupt;
    int zero_weights;           /* synth only: matrices and biases all zero, each chunk a hole
                                 * in a sparse file (no data written, no disk space), the store
                                 * marked so (metadata synth.weights = "zero"); norms stay 1 */
} fg_convert_opts;

typedef struct fg_convert_report {
    uint32_t tensors;
    uint32_t skipped; /* checkpoint buffers fg derives itself (rotary_emb.inv_freq), not stored */
    uint32_t unused;  /* checkpoint tensors of parts fg does not run (a multimodal model's vision
                         tower and projector), not stored */
    uint64_t source_bytes, stored_bytes;
    double seconds;
    int unused_mtp;   /* the unused tensors are multi-token prediction layers (GLM-4 MoE's) */
    uint32_t ggml_requant; /* GGUF Q4_0 / Q8_0 tensors (not stacked experts) re-quantized into
                              fg's groups through F16, a second loss, where the layout of 4 / 8
                              bits, groups of 32 along the input axis would have kept their
                              blocks exactly (docs/import.md) */
} fg_convert_report;

/* Convert the checkpoint at src into a new store at dst (missing or empty). */
int fg_convert_import(const char *src, const char *dst, const fg_convert_opts *o,
                      fg_convert_report *rep, fg_err *err);

/* The tensors and metadata of the store at src into a new store at dst, re-encoded per o (F16,
 * or with compress_weight 4- or 8-bit groups for tensors of 2 dimensions). Source tensors must be
 * F16 or F32 (an already quantized one is refused, named). src is opened read-only. */
int fg_convert_store(const char *src, const char *dst, const fg_convert_opts *o,
                     fg_convert_report *rep, fg_err *err);

/* The store metadata key synth --zero-weights sets (value "zero"): its weights are holes. */
#define FG_SYNTH_WEIGHTS_KEY "synth.weights"

/* Deterministic random weights at a real model's shape (fg_convert_synth_names) straight into
 * a new store, for benchmarks; tokenizer files from o->tokenizer_dir (required). An unknown
 * model is FG_ERR_INVALID_ARG. */
int fg_convert_synth(const char *model, const char *dst, uint64_t seed, const fg_convert_opts *o,
                     fg_convert_report *rep, fg_err *err);
/* The shapes fg_convert_synth knows, ", "-separated into buf (cap bytes, NUL-terminated): the
 * released ones, then the test shapes (the "-tiny" ones, not a released size) after " (tests: ". */
void fg_convert_synth_names(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
