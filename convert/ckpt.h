/* ckpt.h - read-only access to a model checkpoint directory, whatever format wrote it.
 *
 * A checkpoint source (fg_ckpt) is a directory holding one of:
 *   - model.safetensors                                   (FG_CKPT_SAFETENSORS)
 *   - model.safetensors.index.json + the shards it names  (FG_CKPT_SAFETENSORS_SHARDED)
 *   - pytorch_model.bin (torch.save zip archive)          (FG_CKPT_TORCH)
 *   - pytorch_model.bin.index.json + the shards it names  (FG_CKPT_TORCH_SHARDED)
 *   - one .npy-format file per tensor, named by its state-dict key, with or without the
 *     ".npy" suffix, as FlexGen's download_opt_weights writes them     (FG_CKPT_NUMPY)
 * Detection tries them in that order (the index files win over a single file).
 * A regular file instead of a directory is read as llama.cpp's GGUF (FG_CKPT_GGUF: gguf.h), its
 * tensors listed under Hugging Face names.
 *
 * fg_ckpt_open parses every header (safetensors JSON, zip central directory + restricted
 * unpickler, .npy header) and validates every tensor's extent against its file before it
 * returns; after that, each tensor is a contiguous row-major run of bytes in one source file,
 * described by fg_ckpt_tensor. fg_ckpt_read preads any element range of it in the source
 * dtype, so a converter streams a tensor in pieces: memory held by an open fg_ckpt is the
 * tensor table and names (O(number of tensors)), never tensor data. No mmap is used.
 *
 * Threads: an open fg_ckpt is immutable; any number of threads may call the const functions
 * (fg_ckpt_read included: it uses pread on descriptors opened once) at the same time.
 * Errors: every fallible call returns an fg_status and fills err with one line naming the
 * file (and tensor) at fault. SPEC section "Checkpoint inputs" lists every rule and limit.
 */
#ifndef FG_CKPT_H
#define FG_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CKPT_MAX_DIMS 8u
#define FG_CKPT_MAX_NAME 512u      /* bytes in a tensor name */
#define FG_CKPT_MAX_TENSORS (1u << 20)
#define FG_CKPT_MAX_FILES 4096u    /* shard files (or .npy files) in one checkpoint */

typedef enum fg_ckpt_kind {
    FG_CKPT_SAFETENSORS = 1,
    FG_CKPT_SAFETENSORS_SHARDED = 2,
    FG_CKPT_TORCH = 3,
    FG_CKPT_TORCH_SHARDED = 4,
    FG_CKPT_NUMPY = 5,
    FG_CKPT_GGUF = 6,
} fg_ckpt_kind;

/* Source element types. F64 and I64 are listed (a checkpoint holding them still opens) but
 * fg_ckpt_to_f16 refuses them; everything else is refused at open. */
typedef enum fg_ckpt_dtype {
    FG_CKPT_F32 = 1,
    FG_CKPT_F16 = 2,
    FG_CKPT_BF16 = 3,
    FG_CKPT_F64 = 4,
    FG_CKPT_I64 = 5,
    FG_CKPT_U8 = 6,   /* bytes: gpt-oss's MXFP4 blocks and scales (fg-convert reads them as such) */
    /* GGUF blocks of 32 or 256 values (ggml's layout): fg_ckpt_dtype_size is 0 (a block is not a whole
     * number of bytes per element); fg_ckpt_read takes whole blocks and copies their bytes */
    FG_CKPT_Q8_0 = 7, /* an F16 scale + 32 int8 (34 bytes) */
    FG_CKPT_Q4_0 = 8, /* an F16 scale + 32 4-bit values, offset 8 (18 bytes) */
    FG_CKPT_Q4_K = 9, /* blocks of 256: F16 scale and min, 8 6-bit sub-scales/mins, nibbles (144) */
    FG_CKPT_Q6_K = 10, /* blocks of 256: 6-bit values, 16 int8 sub-scales, an F16 scale (210) */
    FG_CKPT_Q4_1 = 11, /* an F16 scale and min + 32 4-bit values (20 bytes) */
    FG_CKPT_Q5_0 = 12, /* an F16 scale + 32 5-bit values, offset 16 (22 bytes) */
    FG_CKPT_Q5_1 = 13, /* an F16 scale and min + 32 5-bit values (24 bytes) */
    FG_CKPT_Q2_K = 14, /* blocks of 256: 2-bit values, 16 4-bit sub-scales/mins (84) */
    FG_CKPT_Q3_K = 15, /* blocks of 256: 3-bit values, 16 6-bit sub-scales (110) */
    FG_CKPT_Q5_K = 16, /* blocks of 256: as Q4_K with a fifth bit per value (176) */
    FG_CKPT_IQ4_NL = 17, /* an F16 scale + 32 4-bit indices into a fixed non-linear table (18) */
    FG_CKPT_IQ4_XS = 18, /* blocks of 256: IQ4_NL's table, 8 6-bit sub-scales (136) */
    FG_CKPT_MXFP4 = 19, /* an E8M0 scale + 32 E2M1 values (17 bytes; GGUF's MXFP4 blocks) */
    FG_CKPT_F8_E4M3 = 20, /* safetensors F8_E4M3 (float8_e4m3fn: no infinities, 0x7f/0xff NaN), a
                           * byte per element; with block scales (fp8.c) */
} fg_ckpt_dtype;

/* One tensor: a contiguous, row-major, little-endian run of n_elements elements of dtype,
 * starting at byte `offset` of file `file` (index into fg_ckpt_file_path). All strings are
 * owned by the fg_ckpt and stay valid until fg_ckpt_close. */
typedef struct fg_ckpt_tensor {
    const char *name;      /* key as stored in the checkpoint (e.g. "model.decoder.layers.0.fc1.weight") */
    uint8_t dtype;         /* fg_ckpt_dtype */
    uint32_t n_dims;       /* 0 (scalar) .. FG_CKPT_MAX_DIMS */
    uint64_t dims[FG_CKPT_MAX_DIMS]; /* dims[0] is the slowest-varying; unused entries are 0 */
    uint64_t n_elements;   /* product of dims (1 for a scalar) */
    uint32_t file;         /* source file index */
    const char *path;      /* == fg_ckpt_file_path(ck, file) */
    uint64_t offset;       /* byte offset of element 0 in that file */
    uint64_t length;       /* n_elements * fg_ckpt_dtype_size(dtype) (GGUF's blocks: their bytes) */
    const char *source;    /* the key in the file, for provenance: == name, but where the listing
                            * renames (GGUF's "blk.0.attn_q.weight" is listed by its Hugging Face
                            * name), followed by the GGUF type ("blk.0.attn_q.weight Q8_0") */
    float shift;           /* subtracted from every value as it is read (0 but for a GGUF file's
                            * Gemma norms, which llama.cpp stores as 1 + w) */
    uint32_t scales;       /* F8_E4M3: 1 + the index of its block scales ("<name>_scale_inv"),
                            * each the multiplier of a block[0] x block[1] block; else 0 */
    uint32_t block[2];     /* F8_E4M3: quantization_config.weight_block_size (rows, cols) */
    uint8_t is_scale;      /* 1: the block scales of an F8_E4M3 tensor, or a GGUF deepseek2
                            * attn_v_b: read through another entry */
    uint32_t join;         /* GGUF deepseek2's kv_b_proj joined from attn_k_b (this entry's
                            * bytes) and attn_v_b (entry join - 1): see ck_gguf_join; else 0 */
    uint32_t join_nope, join_v; /* its qk_nope_head_dim and v_head_dim rows a head */
    uint64_t run, stride;  /* 0: the elements lie in one run from offset; else in runs of `run`
                            * elements, each `stride` elements after the one before (a view of
                            * some rows of every expert: GGUF's fused gate_up experts) */
} fg_ckpt_tensor;

typedef struct fg_ckpt fg_ckpt;

/* Detect the format of directory `dir`, open and validate it. On success *out is owned by the
 * caller until fg_ckpt_close. Order of the tensor list: shards (and .npy files) by file name;
 * within a safetensors file by data offset; within a torch file in state-dict order. Errors:
 * FG_ERR_NOT_FOUND (no checkpoint, missing shard), and the parser errors of SPEC "Checkpoint
 * inputs" (FG_ERR_DISALLOWED for a refused pickle global/opcode or a compressed zip entry). */
int fg_ckpt_open(const char *dir, fg_ckpt **out, fg_err *err);
/* 1 when path names a llama.cpp GGUF file: a name ending in .gguf (either case), or a regular
 * file starting with the GGUF magic (only a regular file is opened, so a FIFO never blocks);
 * else 0. fg_ckpt_open reads such a file; fg-infer says to convert it. */
int fg_ckpt_is_gguf(const char *path);

/* Close every descriptor and free everything (NULL accepted). */
void fg_ckpt_close(fg_ckpt *ck);

fg_ckpt_kind fg_ckpt_kind_of(const fg_ckpt *ck);
const char *fg_ckpt_dir(const fg_ckpt *ck); /* the directory given to fg_ckpt_open */
const char *fg_ckpt_kind_name(fg_ckpt_kind kind); /* "safetensors", "torch-sharded", ... */

uint32_t fg_ckpt_count(const fg_ckpt *ck);
/* Tensor i in [0, count); NULL when out of range. The pointer lives until close. */
const fg_ckpt_tensor *fg_ckpt_tensor_at(const fg_ckpt *ck, uint32_t i);
/* Index of the tensor named `name`: FG_OK, or FG_ERR_NOT_FOUND. O(log n). */
int fg_ckpt_find(const fg_ckpt *ck, const char *name, uint32_t *index);

/* Source files (shards, or the single file, or every .npy file). */
uint32_t fg_ckpt_file_count(const fg_ckpt *ck);
const char *fg_ckpt_file_path(const fg_ckpt *ck, uint32_t file); /* NULL when out of range */
uint64_t fg_ckpt_file_size(const fg_ckpt *ck, uint32_t file);

/* XXH3-64 of the whole source file `file`, streamed through a bounded buffer (provenance). */
int fg_ckpt_file_xxh3(const fg_ckpt *ck, uint32_t file, uint64_t *out, fg_err *err);
/* Same for any path (used by tools for config.json, vocab.json ...). */
int fg_ckpt_hash_path(const char *path, uint64_t *out, fg_err *err);

/* safetensors "__metadata__" string pairs (all shards together, first wins); 0 for other
 * kinds. Strings owned by ck. */
uint32_t fg_ckpt_meta_count(const fg_ckpt *ck);
int fg_ckpt_meta(const fg_ckpt *ck, uint32_t i, const char **key, const char **value);

/* Copy elements [first_elem, first_elem + n_elems) of tensor i, in its source dtype (raw
 * little-endian bytes), into dst (n_elems * dtype size bytes, caller-owned). A short read
 * (file truncated after open) is FG_ERR_TRUNCATED naming the file and tensor. */
int fg_ckpt_read(const fg_ckpt *ck, uint32_t i, uint64_t first_elem, uint64_t n_elems, void *dst,
                 fg_err *err);

size_t fg_ckpt_dtype_size(uint8_t dtype);      /* 0 for an unknown dtype */
const char *fg_ckpt_dtype_name(uint8_t dtype); /* "F32", "BF16", ...; "?" when unknown */

/* Convert n source elements of dtype (F32, BF16 or F16) to IEEE half, rounding to nearest
 * even. Returns FG_OK when every result is finite; otherwise converts everything anyway and
 * returns FG_ERR_NONFINITE with *first_bad (when non-NULL) set to the index of the first
 * non-finite result (overflow to inf, or a NaN/inf input) so the caller can name the tensor
 * and element. F64/I64 -> FG_ERR_UNSUPPORTED (nothing written). */
int fg_ckpt_to_f16(uint8_t dtype, const void *src, size_t n, uint16_t *dst, size_t *first_bad);

/* Scalar helpers behind fg_ckpt_to_f16 (exposed for tests and other modules). */
float fg_ckpt_bf16_to_f32(uint16_t b); /* F16 <-> F32: quant.h's fg_*_to_*_1 */

#ifdef __cplusplus
}
#endif
#endif
