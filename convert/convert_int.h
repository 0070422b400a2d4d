/* convert_int.h - private to convert/: the streaming tensor writer shared by import and synth. */
#ifndef FG_CONVERT_INT_H
#define FG_CONVERT_INT_H

#include "ckpt.h"
#include "convert.h"
#include "fgt.h"
#include "model.h"
#include "store.h"

/* The default grouping axis of --compress-weight, settled by the accuracy table in README
 * (bench/accuracy.sh): 0 = along the output channels (FlexGen's choice). */
#define FG_CONVERT_DEFAULT_AXIS 0

typedef struct fgc_job {
    const fg_convert_opts *o;
    const char *dst;
    int created_dir;
    fg_store *store;
    fg_store_batch *batch;
    uint64_t done, total, stored;
    uint32_t tensors, skipped, unused;
    uint32_t ggml_requant; /* GGUF Q4_0/Q8_0 tensors re-quantized where a layout keeps them */
    double t0;
    uint16_t *f16;
    size_t f16_cap;
    uint8_t *q;
    size_t q_cap;
    void *raw;
    float *f32;            /* BF16 rows widened for quantizing */
    size_t f32_cap;
    size_t raw_cap;
} fgc_job;

/* Where a tensor's elements come from: read(ctx, first, n, out) writes n 16-bit values of type
 * elem (F16, or BF16 kept as the checkpoint has it). */
typedef struct fgc_tensor_src {
    const char *name, *source_name;
    uint64_t source_hash;
    uint32_t n_dims;
    uint64_t dims[2];
    size_t src_elem_bytes; /* for progress: source bytes per element (per src_per of them) */
    uint8_t elem;          /* what read produces: FG_CODEC_F16 or FG_CODEC_BF16 (kept bit for
                              bit: a BF16 checkpoint is stored as BF16) */
    int (*read)(void *ctx, uint64_t first, uint64_t n, uint16_t *out, fg_err *err);
                           /* NULL: every value 0, each chunk a hole (synth --zero-weights) */
    void *ctx;
    uint32_t blocks;       /* > 1: no chunk may straddle these equal blocks of rows */
    int wide;              /* kept 16-bit under --compress-weight (fg_role_stays_wide) */
    uint32_t src_per;      /* > 1: src_elem_bytes are the source bytes of this many elements
                              (GGUF's blocks hold a fractional number of bytes per element) */
    /* optional: rows [first_row, first_row + n_rows) as the payload of codec c (out: its
     * fg_quant_chunk_bytes) straight from the source's own blocks (GGUF's Q8_0 / Q4_0 as fg's
     * Q8 / Q4 groups of 32 along the row: lossless); FG_ERR_UNSUPPORTED when this codec or these
     * rows cannot be so written, and the chunk is read and quantized as any other */
    int (*qread)(void *ctx, const fg_codec *c, uint64_t first_row, uint64_t n_rows, uint8_t *out,
                 fg_err *err);
} fgc_tensor_src;

/* The stored codec of a tensor: F16 (BF16 kept), or with --compress-weight Q4/Q8 groups for
 * one of two or more dimensions that is not kept wide (fg_role_stays_wide). */
fg_codec fgc_codec_for(const fg_convert_opts *o, uint32_t n_dims, uint8_t elem, int wide);
int fgc_write_tensor(fgc_job *j, const fgc_tensor_src *src, fg_err *err);
int fgc_meta_file(fgc_job *j, const char *key, const char *dir, const char *file, int optional,
                  fg_err *err);
int fgc_tokenizer_meta(fgc_job *j, const char *dir, fg_err *err);
int fgc_begin(fgc_job *j, const char *dst, const fg_convert_opts *o, fg_err *err);
/* Commit (rc == FG_OK) or abort; removes a store directory this job created when failing. */
int fgc_end(fgc_job *j, int rc, fg_convert_report *rep, fg_err *err);

/* Where a canonical tensor comes from: checkpoint tensor `index` (FGC_NONE: absent), its rows
 * [row0, row0 + the spec's dims[0]) (row0 > 0 only for a part of a fused tensor); or, index
 * FGC_STACKED, its rows block by block (fg_tensor_spec.blocks: an expert's weight each), block
 * b from checkpoint tensor parts[b].index: its element (r, c) (r < the block's rows, c < cols)
 * at element first + r * rs + c * cs of that tensor, or with rs 0 its rows one after another
 * from element first (one tensor per expert: first 0; a tensor of every expert, [experts,
 * rows, cols] as GraniteMoE's input_linear: the expert's rows of it; gpt-oss's transposed,
 * interleaved gate_up_proj: strided) (malloc'd: fgc_sources_free). mxfp4: the elements are
 * the values of an MXFP4 tensor (index: its _blocks, two a byte; scales: its _scales, one
 * exponent a 32 values), counted as the values it holds. */
#define FGC_NONE UINT32_MAX
#define FGC_STACKED (UINT32_MAX - 1)
typedef struct fgc_part {
    uint32_t index;
    uint64_t first;
    uint64_t rs, cs;
    uint32_t scales;  /* MXFP4: the _scales tensor (FGC_NONE until matched) */
    int mxfp4;
} fgc_part;
typedef struct fgc_source {
    uint32_t index;
    uint64_t row0;
    fgc_part *parts;
} fgc_source;
/* Frees what fg_convert_check_ckpt allocated in src[0 .. n) (the parts), not src. */
void fgc_sources_free(fgc_source *src, uint32_t n);

/* Checkpoint tensors accepted and not stored: buffers fg derives from config.json
 * (fg_arch.derived) and tensors of parts fg does not run (fg_arch.unused). */
typedef struct fgc_skips {
    uint32_t derived, unused;
} fgc_skips;

/* A checkpoint against the tensors hp implies (model_check.c): each present once under a
 * spelling the family accepts, or as a part of a fused tensor the family names (fg_arch.fused),
 * with the expected shape and an F32/F16/BF16 dtype, and no other tensor but the family's
 * derived buffers (fg_arch.derived) and unused parts (fg_arch.unused). src (fg_model_tensors'
 * count, may be NULL) receives where each spec comes from; *skips (may be NULL) what is accepted
 * and not stored. Errors name the tensor and its file. */
int fg_convert_check_ckpt(const fg_hparams *hp, const fg_ckpt *ck, fgc_source *src,
                          fgc_skips *skips, fg_err *err);

#endif
