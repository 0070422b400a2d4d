/* gguf.h - private to convert/: llama.cpp's GGUF files, read by a validating parser of our own.
 *
 * ck_gguf_parse reads a GGUF (version 2 or 3, little-endian) header through a ck_src: the
 * metadata key/values, the tensor infos, general.alignment and the data offset. Every count,
 * length, offset and size is checked against the source's size before it is used, with
 * overflow-safe arithmetic, and bounded (SPEC "Checkpoint inputs: GGUF"); nested arrays, duplicate
 * keys and duplicate tensor names are refused; tensors must lie inside the data section,
 * aligned, without overlapping. Strings and numeric scalars are copied into the ck_gguf; an
 * array is kept as (element type, count, offset in the file) and read on demand
 * later, so a 150,000-token vocabulary costs nothing until it is asked for.
 *
 * The glue (gguf_import.c) turns an open GGUF (one file, or the parts of a split one, each
 * parsed on its own) into what convert/ already knows: tensor names
 * mapped onto the Hugging Face names the model table expects, config.json synthesized from the
 * metadata, block types (Q4_0 ... Q6_K, IQ4_NL/XS, MXFP4) dequantized exactly as ggml's
 * reference does (gguf_dequant.c); and
 * gguf_tok.c writes the tokenizer.ggml.* metadata back as a tokenizer.json.
 */
#ifndef FG_GGUF_H
#define FG_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_int.h"
#include "tokenizer.h"

/* ---- limits ---- */
#define CK_GGUF_MAX_KV 65536u            /* metadata key/values */
#define CK_GGUF_MAX_KEY 65535u           /* bytes in a key */
#define CK_GGUF_MAX_STR (64u << 20)      /* bytes in a string value (chat templates are ~10 KB) */
#define CK_GGUF_MAX_ARR (1u << 26)       /* elements in one array (vocabularies are ~256 K) */
#define CK_GGUF_MAX_ALIGN (1u << 20)     /* general.alignment */
#define CK_GGUF_MAX_DIMS 4u              /* GGML_MAX_DIMS */

/* GGUF metadata value types (the file's numbering). */
enum {
    CK_GGUF_U8 = 0, CK_GGUF_I8, CK_GGUF_U16, CK_GGUF_I16, CK_GGUF_U32, CK_GGUF_I32, CK_GGUF_F32,
    CK_GGUF_BOOL, CK_GGUF_STRING, CK_GGUF_ARRAY, CK_GGUF_U64, CK_GGUF_I64, CK_GGUF_F64,
    CK_GGUF_NTYPES
};

/* ggml tensor types fg reads (the file's numbering); the others are recognised by their block
 * size so the file's layout is checked, and refused by name. */
enum {
    CK_GGML_F32 = 0, CK_GGML_F16 = 1, CK_GGML_Q4_0 = 2, CK_GGML_Q4_1 = 3, CK_GGML_Q5_0 = 6,
    CK_GGML_Q5_1 = 7, CK_GGML_Q8_0 = 8, CK_GGML_Q2_K = 10, CK_GGML_Q3_K = 11, CK_GGML_Q4_K = 12,
    CK_GGML_Q5_K = 13, CK_GGML_Q6_K = 14, CK_GGML_IQ4_NL = 20, CK_GGML_IQ4_XS = 23,
    CK_GGML_BF16 = 30, CK_GGML_MXFP4 = 39
};

typedef struct ck_gguf_kv {
    char *key;           /* owned, NUL-terminated */
    uint32_t type;       /* CK_GGUF_* */
    union {
        uint64_t u;      /* unsigned integers and bool */
        int64_t i;       /* signed integers */
        double f;        /* F32 (widened exactly) and F64 */
    } v;
    char *str;           /* STRING: owned, NUL-terminated (may hold NULs: str_len says) */
    uint64_t str_len;
    uint32_t arr_type;   /* ARRAY: element type (never ARRAY) */
    uint64_t arr_n;      /* ARRAY: elements */
    uint64_t arr_off;    /* ARRAY: byte offset of the first element in the source */
} ck_gguf_kv;

typedef struct ck_gguf_ti {
    char *name;          /* owned */
    uint32_t n_dims;     /* 1 .. CK_GGUF_MAX_DIMS */
    uint64_t ne[CK_GGUF_MAX_DIMS]; /* ggml order: ne[0] is the fastest-varying (a row) */
    uint32_t type;       /* ggml type */
    uint64_t offset;     /* from the data section's start (a multiple of the alignment) */
    uint64_t bytes;      /* stored bytes */
} ck_gguf_ti;

typedef struct ck_gguf {
    uint32_t version;
    ck_gguf_kv *kv;
    uint32_t n_kv;
    ck_gguf_ti *ti;
    uint32_t n_ti;
    uint32_t alignment;  /* general.alignment, 32 when absent */
    uint64_t data_off;   /* the data section's first byte in the file */
} ck_gguf;

/* Parse and validate src as a GGUF file into *g (zeroed first; ck_gguf_free it, also on error).
 * Errors name src->label and the key, tensor or field at fault. */
int ck_gguf_parse(const ck_src *src, ck_gguf *g, fg_err *err);
void ck_gguf_free(ck_gguf *g);

/* The key/value named key, or NULL. */
const ck_gguf_kv *ck_gguf_get(const ck_gguf *g, const char *key);
/* An integer value of any integer type (or bool) as uint64 (negatives refused): FG_OK, or
 * FG_ERR_NOT_FOUND / FG_ERR_BAD_ENUM (wrong type) without a message. */
int ck_gguf_uint(const ck_gguf *g, const char *key, uint64_t *out);
int ck_gguf_float(const ck_gguf *g, const char *key, double *out);
const char *ck_gguf_str(const ck_gguf *g, const char *key); /* NULL: absent or not a string */

/* ggml type: its name ("Q8_0"; "?" when unknown), elements per block and bytes per block (0 when
 * unknown). */
const char *ck_ggml_type_name(uint32_t type);
int ck_ggml_block(uint32_t type, uint32_t *elems, uint32_t *bytes);

/* ---- reference dequantization (gguf_dequant.c: ggml's dequantize_row_<type>) ---- */
/* n_blocks blocks of src into (32 or 256) * n_blocks floats, as ggml's C computes them with each
 * binary32 operation rounded in the order written (no fused multiply-add): bit for bit with
 * gguf-py's numpy dequantization. */
void ck_gguf_dequant_q8_0(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q4_0(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q4_1(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q5_0(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q5_1(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q2_k(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q3_k(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q4_k(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q5_k(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_q6_k(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_iq4_nl(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_iq4_xs(const uint8_t *src, uint64_t n_blocks, float *dst);
void ck_gguf_dequant_mxfp4(const uint8_t *src, uint64_t n_blocks, float *dst);
/* The one above for ckpt block dtype `dtype` (ck_dtype_is_block); FG_ERR_UNSUPPORTED for
 * another dtype. */
int ck_gguf_dequant(uint8_t dtype, const uint8_t *src, uint64_t n_blocks, float *dst);

/* ---- glue (gguf_import.c) ---- */
/* The Hugging Face name of GGUF tensor `name` of general.architecture arch (NULL: none)
 * (blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight) into out (cap bytes); 0 when
 * no rule matches (the name is then kept as it is, and the model check refuses it by name). */
int ck_gguf_hf_name(const char *arch, const char *name, char *out, size_t cap);
/* A merged experts tensor's name (blk.N.ffn_{gate,up,down}_exps.weight) as expert e's
 * (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight) into out; 0 for another name. */
int ck_gguf_expert_name(const char *name, uint64_t expert, char *out, size_t cap);
/* g's tensors appended to out under their Hugging Face names (ck_gguf_hf_name), dims in
 * fg_ckpt's order (the slowest-varying first), offsets in the file; a merged experts tensor
 * [experts, rows, cols] as one tensor per expert (ck_gguf_expert_name: a slice of the file); a
 * squeezed shared_expert_gate [hidden] as [1, hidden]; Gemma's norms with shift 1; a ggml type
 * fg does not read is refused, named. */
int ck_gguf_list(const ck_gguf *g, const char *label, ck_list *out, fg_err *err);
/* Elements [first, first + n) of tensor i of ck (a block type (ck_dtype_is_block), dequantized
 * by ggml's reference, or F32/F16/BF16), less its shift, rounded to F16 into out, but MXFP4's
 * as BF16, which holds every one of them exactly (ck_gguf_bf16); *scratch (*cap bytes) is a
 * buffer reused across calls (caller frees). A value F16 (BF16) cannot hold is refused by name. */
int ck_gguf_bf16(uint8_t dtype); /* 1: stored BF16 (BF16, MXFP4) */
int ck_gguf_read_f16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     void **scratch, size_t *cap, fg_err *err);
/* Split files: *part and *count from a name "<prefix>-KKKKK-of-NNNNN.gguf" (1 <= K <= N),
 * else 0; part k's path from the first's (malloc'd, NULL when out of memory); part i (0-based)
 * of count: its split.no / split.count must say so (count 1: a file not named as a part must
 * not have split.count > 1); split.tensors.count of the first part, when present, must be the
 * tensors of all parts. */
int ck_gguf_split_name(const char *path, uint32_t *part, uint32_t *count);
char *ck_gguf_split_path(const char *first, uint32_t part);
int ck_gguf_split_check(const ck_gguf *g, const char *label, uint32_t i, uint32_t count,
                        fg_err *err);
int ck_gguf_split_total(const ck_gguf *g, const char *label, uint32_t n, fg_err *err);
/* deepseek2 files of the newer converters split each layer's kv_b_proj [heads x (nope + v),
 * kv_lora] into blk.N.attn_k_b [heads, kv_lora, nope] (each head's nope rows transposed) and
 * blk.N.attn_v_b [heads, v, kv_lora]: the pair is listed back as one kv_b_proj (the k_b entry
 * renamed, join set; the v_b entry is_scale), read by ck_gguf_read_kvb. Shapes that do not pair
 * up, a half without the other, or BF16 beside another type are refused naming the tensor. */
int ck_gguf_join(const ck_gguf *g, ck_list *l, const char *label, fg_err *err);
/* Elements [first, first + n) (whole rows) of a joined kv_b_proj (entry i) into out: BF16 bits
 * kept when both halves are BF16, else F16 as ck_gguf_read_f16 makes them. */
int ck_gguf_read_kvb(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     fg_err *err);
/* The parsed header of a GGUF fg_ckpt (kind FG_CKPT_GGUF), else NULL (ckpt.c). */
const ck_gguf *ck_gguf_of(const fg_ckpt *ck);

/* config.json for g's general.architecture (gguf_config.c's rows: llama, qwen2, qwen3,
 * qwen2moe, qwen3moe, gemma, gemma2, gemma3, phi3, olmo2, granite, glm4), synthesized from its
 * metadata (array values read through src, the file g was parsed from) and the tensors of ck; *json
 * malloc'd (caller frees). *interleaved: the Q/K rows are in llama.cpp's permuted order (the
 * model table's interleaved rotary layout undoes it). Errors name label and the key. */
int ck_gguf_config(const ck_gguf *g, const fg_ckpt *ck, const ck_src *src, const char *label,
                   char **json, size_t *len, int *interleaved, fg_err *err);

/* The tokenizer of g (tokenizer.ggml.*, gguf_tok.c), read through src (the file g was parsed
 * from), as the tokenizer.json and tokenizer_config.json convert_hf_to_gguf.py read: both
 * malloc'd (caller frees; NULL on error). tokenizer.ggml.model "gpt2" only; its absence is
 * FG_ERR_NOT_FOUND, another model or an unknown tokenizer.ggml.pre FG_ERR_UNSUPPORTED, a key of
 * the wrong type or an id out of range FG_ERR_TOK_CONFIG; messages name src->label and the key.
 * Both are loaded here (fg_tok_load_json_mem) as the store will load them, its errors named
 * "<label>: tokenizer.ggml.* as tokenizer.json: <JSON path>"; *tok gets that tokenizer when tok
 * != NULL (caller fg_tok_frees it). */
int ck_gguf_tokenizer(const ck_gguf *g, const ck_src *src, char **tok_json, size_t *tok_len,
                      char **cfg_json, size_t *cfg_len, fg_tok **tok, fg_err *err);

#endif
