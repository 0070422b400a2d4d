/* fgt.h - the .fgt chunked tensor container: codec descriptors, streaming writer, mmap reader.
 *
 * SPEC.md is normative for every byte of the file; this header is the C view of it.
 *
 * A .fgt file holds named tensors. Each tensor is split along its first dimension into chunks;
 * every chunk's payload starts on the file's alignment (>= 4096, so O_DIRECT and registered-
 * buffer reads need no read-around) and carries its own XXH3-64. Quantized codecs (Q4/Q8) keep
 * their scales inside the chunk next to their groups, so the unit of I/O is the unit of compute.
 *
 * Lifetimes and threads:
 * - fg_fgt_reader is immutable after fg_fgt_open*: any number of threads may call its const
 *   functions at once. Every pointer it hands out (names, metadata, chunk data views) stays valid
 *   until fg_fgt_close.
 * - fg_fgt_writer is single-threaded. Data written through it becomes visible to readers only
 *   when fg_fgt_writer_finish publishes a new superblock; until then the file (new) has no valid
 *   superblock, or (append) still shows the previous generation. A crash at any point leaves
 *   one of those two states.
 */
#ifndef FG_FGT_H
#define FG_FGT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Limits (SPEC.md section "Limits"); the reader refuses anything beyond them. ---- */
#define FG_FGT_VERSION_MAJOR 1
#define FG_FGT_VERSION_MINOR 0
#define FG_FGT_SUPERBLOCK_SIZE 128u
#define FG_FGT_SLOT_SIZE 4096u            /* each superblock slot occupies one 4 KiB page */
#define FG_FGT_HEADER_SIZE 8192u          /* two slots; data starts at align_up(8192, alignment) */
#define FG_FGT_ALIGN_LOG2_MIN 12          /* 4 KiB */
#define FG_FGT_ALIGN_LOG2_MAX 24          /* 16 MiB */
#define FG_FGT_MAX_NAME 512u              /* bytes in a tensor name, source name or metadata key */
#define FG_FGT_MAX_DIMS 8u
#define FG_FGT_MAX_DIM (1ull << 40)       /* largest single dimension */
#define FG_FGT_MAX_ELEMENTS (1ull << 48)  /* largest element count of one tensor */
#define FG_FGT_MAX_TENSORS (1u << 20)
#define FG_FGT_MAX_CHUNKS (1u << 24)      /* per file, all tensors together */
#define FG_FGT_MAX_CHUNK_BYTES (1ull << 30) /* payload of one chunk */
#define FG_FGT_MAX_META (1u << 16)        /* metadata entries */
#define FG_FGT_MAX_BLOB (1u << 24)        /* bytes in one string/bytes value or array string */
#define FG_FGT_MAX_ARRAY (1u << 24)       /* elements in one metadata array */
#define FG_FGT_MAX_INDEX (1ull << 30)     /* bytes in the index */
#define FG_FGT_GROUP_MIN 8u
#define FG_FGT_GROUP_MAX 4096u

/* ---- Codecs ---- */
typedef enum fg_codec_id {
    FG_CODEC_F32 = 1,
    FG_CODEC_F16 = 2,
    FG_CODEC_BF16 = 3,
    FG_CODEC_Q4 = 4, /* group-wise asymmetric 4-bit: x = min + code * scale */
    FG_CODEC_Q8 = 5, /* group-wise asymmetric 8-bit */
} fg_codec_id;

typedef enum fg_scale_dtype {
    FG_SCALE_F32 = 1,
    FG_SCALE_F16 = 2,
} fg_scale_dtype;

/* Nibble order of Q4 codes: element 2i in the low (LO_FIRST) or the high nibble of byte i. */
enum { FG_NIBBLE_LO_FIRST = 0, FG_NIBBLE_HI_FIRST = 1 };

#define FG_QUANT_LAYOUT_VERSION 1

/* Codec descriptor, 12 bytes on disk. For F32/F16/BF16 every field but id is zero. */
typedef struct fg_codec {
    uint8_t id;             /* fg_codec_id */
    uint8_t bits;           /* 4 for Q4, 8 for Q8, else 0 */
    uint8_t group_axis;     /* Q: 0 or n_dims-1 (the contiguous axis) */
    uint8_t scale_dtype;    /* Q: fg_scale_dtype of the stored min and scale */
    uint8_t nibble_order;   /* Q4: FG_NIBBLE_*; Q8: 0 */
    uint8_t layout_version; /* Q: FG_QUANT_LAYOUT_VERSION */
    uint32_t group_size;    /* Q: power of two in [FG_FGT_GROUP_MIN, FG_FGT_GROUP_MAX] */
} fg_codec;

/* Plain float codec descriptor. */
fg_codec fg_codec_float(fg_codec_id id);
/* Quantized descriptor: bits 4 or 8, group along axis (0 or n_dims-1), F16 scales, LO_FIRST. */
fg_codec fg_codec_quant(unsigned bits, uint32_t group_size, unsigned group_axis);

/* Short name ("f32", "q4"). */
const char *fg_codec_name(uint8_t id);

/* Validate a codec for a tensor of n_dims dimensions (SPEC rules C1-C6). */
int fg_codec_validate(const fg_codec *c, uint32_t n_dims, fg_err *err);

/* Bytes of a chunk holding rows [first_row, first_row+n_rows) of dim 0 of a tensor of shape
 * dims[n_dims] (a 0-d tensor has one row). Validates the codec first. Overflow -> FG_ERR_OVERFLOW. */
int fg_codec_chunk_bytes(const fg_codec *c, uint32_t n_dims, const uint64_t *dims, uint64_t n_rows,
                         uint64_t *out, fg_err *err);

/* Dim-0 granularity a chunk boundary must respect: group_size when groups run along axis 0
 * (and for 1-d quantized tensors), else 1. */
uint64_t fg_codec_row_quantum(const fg_codec *c, uint32_t n_dims);

/* Quantized matrix view of a chunk of n_rows (SPEC "Quantized layout"): groups run along the
 * columns of [rows, cols] when along_rows == 0, down the rows when along_rows == 1. */
typedef struct fg_qview {
    uint64_t rows, cols;
    int along_rows;
    uint64_t n_groups;
    uint32_t group_bytes; /* 2 * scale size + group_size * bits / 8 */
} fg_qview;
int fg_codec_qview(const fg_codec *c, uint32_t n_dims, const uint64_t *dims, uint64_t n_rows,
                   fg_qview *out, fg_err *err);

/* ---- Metadata ---- */
typedef enum fg_meta_type {
    FG_META_U64 = 1,
    FG_META_I64 = 2,
    FG_META_F64 = 3,
    FG_META_STRING = 4, /* valid UTF-8 */
    FG_META_BYTES = 5,
    FG_META_ARRAY = 6,  /* of U64, I64, F64 or STRING */
} fg_meta_type;

typedef struct fg_meta_info {
    const char *key;     /* NUL-terminated, owned by the reader */
    uint8_t type;        /* fg_meta_type */
    uint8_t elem_type;   /* ARRAY only */
    uint64_t u64;        /* U64 */
    int64_t i64;         /* I64 */
    double f64;          /* F64 */
    const void *data;    /* STRING (NUL-terminated copy), BYTES (view), ARRAY (encoded elements) */
    uint64_t len;        /* STRING/BYTES: bytes; ARRAY: element count */
    uint64_t data_bytes; /* ARRAY: bytes of the encoded elements */
} fg_meta_info;

/* ---- Reader ---- */
typedef struct fg_fgt_reader fg_fgt_reader;

enum {
    FG_FGT_OPEN_VERIFY = 1, /* check every chunk checksum during open */
};

typedef struct fg_fgt_tensor_info {
    const char *name;        /* NUL-terminated, owned by the reader */
    const char *source_name; /* provenance: key in the source checkpoint ("" when unknown) */
    uint64_t source_hash;    /* provenance: XXH3-64 of the source file (0 when unknown) */
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[FG_FGT_MAX_DIMS];
    uint64_t n_elements;
    uint32_t n_chunks;
    uint64_t payload_bytes;  /* sum of chunk lengths */
} fg_fgt_tensor_info;

typedef struct fg_fgt_chunk_info {
    uint64_t offset;    /* file offset, multiple of the alignment */
    uint64_t length;    /* payload bytes (the padding to the alignment is not counted) */
    uint64_t first_row; /* first dim-0 row held */
    uint64_t n_rows;
    uint64_t xxh3;      /* XXH3-64 of the payload */
} fg_fgt_chunk_info;

typedef struct fg_fgt_file_info {
    uint16_t version_major, version_minor;
    uint32_t alignment;
    uint64_t generation;
    int slot;             /* superblock slot in use, 0 or 1 */
    uint64_t index_offset, index_length, data_end, file_size;
    uint32_t n_tensors, n_meta;
    uint64_t n_chunks;
} fg_fgt_file_info;

/* Open and fully validate a file (mmap'd read-only). On success *out is owned by the caller
 * until fg_fgt_close. Errors name the path and the part at fault. */
int fg_fgt_open(const char *path, unsigned flags, fg_fgt_reader **out, fg_err *err);

/* Same over bytes in memory (used by the fuzzer and tests). buf must outlive the reader;
 * label names the source in messages (may be NULL). */
int fg_fgt_open_mem(const void *buf, size_t len, const char *label, unsigned flags,
                    fg_fgt_reader **out, fg_err *err);

void fg_fgt_close(fg_fgt_reader *r); /* NULL accepted */

void fg_fgt_file(const fg_fgt_reader *r, fg_fgt_file_info *out);
uint32_t fg_fgt_tensor_count(const fg_fgt_reader *r);
/* Index i in [0, count), in file order. */
int fg_fgt_tensor(const fg_fgt_reader *r, uint32_t i, fg_fgt_tensor_info *out);
/* Lookup by name: O(log n). FG_ERR_NOT_FOUND when absent. */
int fg_fgt_find(const fg_fgt_reader *r, const char *name, uint32_t *index);
int fg_fgt_chunk(const fg_fgt_reader *r, uint32_t tensor, uint32_t chunk, fg_fgt_chunk_info *out);
/* Zero-copy view of a chunk's payload, valid until close. With verify != 0 the checksum is
 * checked first and a mismatch returns FG_ERR_CHECKSUM naming tensor and chunk. */
int fg_fgt_chunk_data(const fg_fgt_reader *r, uint32_t tensor, uint32_t chunk, int verify,
                      const void **data, fg_err *err);
/* Check every chunk checksum; the first bad one is reported (bad_tensor and bad_chunk are set
 * when non-NULL). */
int fg_fgt_verify(const fg_fgt_reader *r, uint32_t *bad_tensor, uint32_t *bad_chunk, fg_err *err);

uint32_t fg_fgt_meta_count(const fg_fgt_reader *r);
int fg_fgt_meta(const fg_fgt_reader *r, uint32_t i, fg_meta_info *out);
int fg_fgt_meta_find(const fg_fgt_reader *r, const char *key, fg_meta_info *out);
/* Element i of a numeric ARRAY (read as the raw 64-bit pattern). */
uint64_t fg_meta_array_u64(const fg_meta_info *m, uint64_t i);
/* Walk a STRING array: *cur starts at m->data; returns 0 and the next string (not
 * NUL-terminated) until the array is exhausted, then -1. Safe: validated at open. */
int fg_meta_array_next_str(const fg_meta_info *m, const uint8_t **cur, uint64_t *seen,
                           const char **s, uint32_t *len);

/* ---- Writer ---- */
typedef struct fg_fgt_writer fg_fgt_writer;

typedef struct fg_fgt_writer_opts {
    uint32_t alignment; /* 0 = 4096; else a power of two in [4 KiB, 16 MiB] */
} fg_fgt_writer_opts;

/* Create a new file (refuses an existing path with FG_ERR_EXISTS). opts may be NULL. */
int fg_fgt_writer_create(const char *path, const fg_fgt_writer_opts *opts, fg_fgt_writer **out,
                         fg_err *err);
/* Open an existing, valid file to add tensors and metadata; finish publishes generation + 1
 * in the other superblock slot, so the previous generation stays readable until then. */
int fg_fgt_writer_append(const char *path, fg_fgt_writer **out, fg_err *err);

/* Metadata (a later value for an existing key is refused: FG_ERR_DUPLICATE). Strings must be
 * valid UTF-8. Copies its inputs. */
int fg_fgt_writer_meta_u64(fg_fgt_writer *w, const char *key, uint64_t v, fg_err *err);
int fg_fgt_writer_meta_i64(fg_fgt_writer *w, const char *key, int64_t v, fg_err *err);
int fg_fgt_writer_meta_f64(fg_fgt_writer *w, const char *key, double v, fg_err *err);
int fg_fgt_writer_meta_str(fg_fgt_writer *w, const char *key, const char *s, fg_err *err);
int fg_fgt_writer_meta_bytes(fg_fgt_writer *w, const char *key, const void *p, size_t len,
                             fg_err *err);
/* Numeric array: elem_type U64/I64/F64, values as raw 64-bit patterns. */
int fg_fgt_writer_meta_array(fg_fgt_writer *w, const char *key, uint8_t elem_type,
                             const uint64_t *v, size_t count, fg_err *err);
int fg_fgt_writer_meta_str_array(fg_fgt_writer *w, const char *key, const char *const *s,
                                 size_t count, fg_err *err);

typedef struct fg_fgt_tensor_desc {
    const char *name;
    fg_codec codec;
    uint32_t n_dims;
    const uint64_t *dims;
    const char *source_name; /* may be NULL */
    uint64_t source_hash;    /* 0 when unknown */
} fg_fgt_tensor_desc;

/* Begin a tensor; then add its chunks in row order; then end it. Copies the descriptor. */
int fg_fgt_writer_begin_tensor(fg_fgt_writer *w, const fg_fgt_tensor_desc *d, fg_err *err);
/* Write the next n_rows rows; len must equal the codec's size for them. The bytes are written
 * to the file at once (nothing of the tensor is buffered). data NULL: the chunk is len zero
 * bytes, left as a hole in a sparse file (nothing written, no disk space; its checksum is
 * XXH3 of zeros, computed once a size): zeros read back, in every codec value 0. */
int fg_fgt_writer_add_chunk(fg_fgt_writer *w, uint64_t n_rows, const void *data, size_t len,
                            fg_err *err);
int fg_fgt_writer_end_tensor(fg_fgt_writer *w, fg_err *err);

/* Leave a hole of at least bytes before the next chunk (space for in-place growth; also how
 * tests place chunks past 4 GiB in a sparse file). */
int fg_fgt_writer_reserve(fg_fgt_writer *w, uint64_t bytes, fg_err *err);

/* fsync the data, write the index, fsync, publish the superblock, fsync, close. Frees w
 * whether or not it succeeds. On failure the file shows its previous state. */
int fg_fgt_writer_finish(fg_fgt_writer *w, fg_err *err);
/* Drop everything added: a created file is removed, an appended one truncated back.
 * Frees w (NULL accepted). */
void fg_fgt_writer_abort(fg_fgt_writer *w);

#ifdef __cplusplus
}
#endif
#endif
