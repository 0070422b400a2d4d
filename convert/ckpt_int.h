/* ckpt_int.h - private pieces shared by the checkpoint parsers (not installed, not public).
 *
 * Every parser reads through a ck_src: either a memory buffer (fuzzers, tests) or a file
 * descriptor (pread). A parser never trusts a length before checking it against src->size, and
 * reads only headers into memory, into buffers bounded by the limits below. Parsed tensors are
 * appended to a ck_list, which owns copies of their names; the directory layer (ckpt.c) turns
 * the list into an fg_ckpt.
 */
#ifndef FG_CKPT_INT_H
#define FG_CKPT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

/* ---- limits (SPEC "Checkpoint inputs: limits") ---- */
#define CK_ST_MAX_HEADER 100000000ull     /* safetensors JSON header bytes (the crate's limit) */
#define CK_INDEX_MAX_BYTES (64ull << 20)  /* *.index.json */
#define CK_CONFIG_MAX_BYTES (1ull << 20)  /* config.json */
#define CK_ZIP_MAX_CD (256ull << 20)      /* zip central directory bytes */
#define CK_ZIP_MAX_ENTRIES (1u << 21)
#define CK_ZIP_MAX_NAME 1024u             /* bytes in a zip entry name */
#define CK_PKL_MAX_BYTES (256ull << 20)   /* data.pkl */
#define CK_PKL_MAX_STACK (1u << 20)       /* pickle stack + mark depth */
#define CK_PKL_MAX_MEMO (1u << 22)        /* memo slots */
#define CK_PKL_MAX_OBJECTS (1u << 22)
#define CK_NPY_MAX_HEADER 10000u          /* .npy header dict bytes (numpy's max_header_size) */
#define CK_MAX_META 4096u                 /* safetensors __metadata__ entries */

typedef struct ck_src {
    const uint8_t *mem; /* non-NULL: read from memory */
    int fd;             /* else: pread from fd */
    uint64_t size;      /* bytes in the source */
    const char *label;  /* file name for messages */
} ck_src;

/* Read n bytes at off. Past the end -> FG_ERR_TRUNCATED naming `what`. */
int ck_src_read(const ck_src *s, uint64_t off, void *buf, size_t n, const char *what, fg_err *err);

/* Growing list of parsed tensors. t[i].name is owned (malloc'd); t[i].path is NULL until the
 * directory layer fills it; t[i].file is set by the parser's caller through `file`. */
typedef struct ck_list {
    fg_ckpt_tensor *t;
    uint32_t n, cap;
    uint32_t file;      /* file index stamped on every tensor added */
    char **meta;        /* safetensors __metadata__: key, value, key, value ... (owned) */
    uint32_t n_meta, meta_cap;
    uint32_t *meta_slot; /* open-addressing index of the keys: pair number + 1, 0 = empty */
    uint32_t n_slots;    /* a power of two, at least twice the pairs (0 before the first key) */
} ck_list;

void ck_list_free(ck_list *l);
/* Append a tensor (name copied; it must be 1..FG_CKPT_MAX_NAME bytes without NUL). Computes
 * n_elements and length with overflow checks. */
int ck_list_add(ck_list *l, const char *name, size_t name_len, uint8_t dtype, uint32_t n_dims,
                const uint64_t *dims, uint64_t offset, const char *label, fg_err *err);
/* Append a __metadata__ pair (both copied) unless the key is already there: the first wins, as
 * shards repeat their metadata. A hash index keeps it linear in the keys' bytes, whatever
 * prefix they share. */
int ck_list_add_meta(ck_list *l, const char *key, const char *value, fg_err *err);
/* Elements and bytes of one block of dtype: 1 and the element size for plain types, GGUF's
 * blocks (Q8_0 32/34, Q4_0 32/18, Q4_K 256/144, Q6_K 256/210, ... MXFP4 32/17); 0 when unknown. */
int ck_dtype_block(uint8_t dtype, uint32_t *elems, uint32_t *bytes);
/* 1 for GGUF's block dtypes (Q8_0 ... MXFP4): dequantized on import */
int ck_dtype_is_block(uint8_t dtype);
/* Sort helpers: FG_ERR_DUPLICATE naming the tensor when two share a name. */
int ck_list_check_unique(const ck_list *l, const char *label, fg_err *err);

/* Element count and byte size of a shape, overflow-checked (FG_ERR_OVERFLOW). */
int ck_shape_bytes(uint32_t n_dims, const uint64_t *dims, size_t elsize, uint64_t *n_elem,
                   uint64_t *bytes);

/* A sharded checkpoint's *.index.json: its weight_map (tensor -> shard file; every value a
 * plain file name, no '/', not "." or "..") and the distinct shard files it names, sorted. */
typedef struct ck_index {
    void *root;         /* the parsed JSON (jansson), owned */
    void *weight_map;   /* inside root */
    const char **files; /* distinct shard names, sorted (strings inside root) */
    uint32_t n_files;
} ck_index;
int ck_index_parse(const char *json, size_t len, const char *label, ck_index *ix, fg_err *err);
/* The shard the index maps tensor to, or NULL. */
const char *ck_index_shard_of(const ck_index *ix, const char *tensor);
void ck_index_free(ck_index *ix);
/* A shard name the index may give: a plain file name of this directory. */
int ck_shard_name_ok(const char *s);

/* ---- parsers ---- */
/* safetensors: header + bounds of every tensor against src->size. */
int ck_st_parse(const ck_src *src, ck_list *out, fg_err *err);
/* torch.save zip archive: zip directory, data.pkl through the restricted unpickler, each tensor
 * resolved to its storage entry and checked against it. */
int ck_torch_parse(const ck_src *src, ck_list *out, fg_err *err);
/* One .npy file holding the tensor `name`. */
int ck_npy_parse(const ck_src *src, const char *name, ck_list *out, fg_err *err);

/* ---- zip layer (zip.c) ---- */
typedef struct ck_zip_entry {
    char *name;          /* owned, NUL-terminated */
    uint64_t data_off;   /* first byte of the stored data */
    uint64_t size;       /* stored (== uncompressed) bytes */
    uint32_t cd_index;   /* position in the central directory (0: the archive's first entry) */
} ck_zip_entry;

typedef struct ck_zip {
    ck_zip_entry *e;
    uint32_t n;
} ck_zip;

int ck_zip_open(const ck_src *src, ck_zip *out, fg_err *err);
void ck_zip_free(ck_zip *z);
/* Entry with exactly this name, or NULL. */
const ck_zip_entry *ck_zip_find(const ck_zip *z, const char *name);

/* ---- restricted unpickler (pickle.c) ---- */
typedef struct ck_pkl_tensor {
    char *name;              /* state-dict key (owned) */
    char *storage_key;       /* archive/data/<key> (owned) */
    uint8_t dtype;           /* from the storage type global */
    uint64_t storage_numel;  /* elements the storage holds, per the pickle */
    uint64_t storage_offset; /* elements */
    uint32_t n_dims;
    uint64_t size[FG_CKPT_MAX_DIMS];
    uint64_t stride[FG_CKPT_MAX_DIMS];
} ck_pkl_tensor;

typedef struct ck_pkl_result {
    ck_pkl_tensor *t;
    uint32_t n;
} ck_pkl_result;

/* Run the restricted unpickler over a torch state-dict pickle. */
int ck_pkl_load(const uint8_t *p, size_t n, const char *label, ck_pkl_result *out, fg_err *err);
void ck_pkl_free(ck_pkl_result *r);

/* ---- FP8 block-scaled checkpoints (fp8.c) ---- */
/* Pair every F8_E4M3 tensor of l (the list of ck, whose name index is built) with its
 * "<name>_scale_inv" block scales, the block size from DIR/config.json's quantization_config:
 * t->scales, t->block set, the scales marked is_scale. An F8 tensor without scales, scales of
 * the wrong shape or dtype, or no fp8 quantization_config: refused in one line naming them. */
int ck_fp8_pair(fg_ckpt *ck, ck_list *l, const char *dir, fg_err *err);
/* Elements [first, first + n) of F8_E4M3 tensor i as BF16 bits: bf16_rne(e4m3(x) x scale),
 * as DeepSeek's weight_dequant; *scratch (*cap bytes) a buffer reused across calls (caller
 * frees). NaN or a product past BF16's range: FG_ERR_NONFINITE naming the element. */
int ck_fp8_read_bf16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     void **scratch, size_t *cap, fg_err *err);
float ck_fp8_e4m3_to_f32(uint8_t b); /* exact; NaN for 0x7f / 0xff */
/* 1 when ck holds FP8 tensors with block scales */
int ck_fp8_has(const fg_ckpt *ck);
/* DIR/config.json without its quantization_config (what the BF16 store holds), malloc'd */
int ck_fp8_config(const char *dir, char **json, size_t *len, fg_err *err);

#endif
