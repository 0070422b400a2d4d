/* tokenizer.h - GPT-2 byte-level BPE tokenizer (encode text to token ids, decode ids to bytes).
 *
 * A tokenizer is built from the Hugging Face file set of a checkpoint: vocab.json (token string
 * -> id), merges.txt (ranked merges) and, when present, tokenizer_config.json and
 * special_tokens_map.json (special/added tokens such as "</s>" and the BOS/EOS/UNK/PAD roles).
 * Ids always come from the given vocab.json: OPT numbers its tokens differently from GPT-2.
 *
 * Encoding follows GPT-2 / Hugging Face `tokenizers` (ByteLevel, add_prefix_space = false):
 * special tokens are cut out first (when asked), the rest is split by GPT-2's pre-tokenization
 * regex, each piece's bytes are mapped to byte-level symbols and merged by rank. Every byte
 * string round-trips: decode(encode(s)) == s, including invalid UTF-8 (such bytes become pieces
 * of their own; see text/README-section.md).
 *
 * Lifecycle: fg_tok_load_* -> fg_tok_encode / fg_tok_decode ... -> fg_tok_free.
 * Threads: a tokenizer keeps a word cache and regex scratch, so encode on one fg_tok must not
 * run on two threads at once; decode and the lookups only read and may run concurrently with
 * each other. Load one tokenizer per thread for parallel encoding.
 */
#ifndef FG_TOKENIZER_H
#define FG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_tok fg_tok;

/* Largest token id accepted in vocab.json or the config files (ids are dense-indexed). */
#define FG_TOK_MAX_ID ((1 << 24) - 1)

/* The file set as memory buffers (the store keeps them as metadata blobs). Buffers are
 * borrowed for the duration of fg_tok_load_mem only; they need no NUL terminator. A NULL
 * config or special map means "absent". Names are used in error messages only (NULL gives
 * the usual file name). */
typedef struct fg_tok_files {
    const void *vocab_json;   size_t vocab_len;   const char *vocab_name;
    const void *merges_txt;   size_t merges_len;  const char *merges_name;
    const void *config_json;  size_t config_len;  const char *config_name;
    const void *special_json; size_t special_len; const char *special_name;
} fg_tok_files;

/* Build a tokenizer from buffers. On success *out is a new tokenizer owned by the caller
 * (fg_tok_free). Errors: FG_ERR_TOK_JSON, FG_ERR_TOK_VOCAB, FG_ERR_TOK_MERGES,
 * FG_ERR_TOK_CONFIG, FG_ERR_LIMIT, FG_ERR_NOMEM; err names the file and line or key. */
int fg_tok_load_mem(const fg_tok_files *files, fg_tok **out, fg_err *err);

/* Read DIR/vocab.json and DIR/merges.txt, and DIR/tokenizer_config.json and
 * DIR/special_tokens_map.json when they exist. Adds FG_ERR_NOT_FOUND / FG_ERR_IO. */
int fg_tok_load_dir(const char *dir, fg_tok **out, fg_err *err);

/* Read the named files; config_path and special_path may be NULL (absent). */
int fg_tok_load_files(const char *vocab_path, const char *merges_path, const char *config_path,
                      const char *special_path, fg_tok **out, fg_err *err);

/* NULL is accepted. */
void fg_tok_free(fg_tok *tok);

/* Register `content` (UTF-8, len bytes, non-empty) as a special token, matched before
 * pre-tokenization by fg_tok_encode with FG_TOK_SPECIAL. Its id is the vocab id when content
 * is in vocab.json, otherwise the next free id (as Hugging Face appends added tokens). *id_out
 * (may be NULL) receives the id. Errors: FG_ERR_INVALID_ARG, FG_ERR_LIMIT, FG_ERR_NOMEM. */
int fg_tok_add_special(fg_tok *tok, const char *content, size_t len, int32_t *id_out,
                       fg_err *err);

/* Growable id and byte vectors that encode/decode append to. Zero-initialise them; the caller
 * owns the memory and releases it with fg_tok_ids_free / fg_tok_bytes_free. */
typedef struct fg_tok_ids { int32_t *ids; size_t n, cap; } fg_tok_ids;
typedef struct fg_tok_bytes { char *data; size_t len, cap; } fg_tok_bytes;
void fg_tok_ids_free(fg_tok_ids *v);
void fg_tok_bytes_free(fg_tok_bytes *v);

/* Encode flags. */
#define FG_TOK_SPECIAL 1u  /* match special tokens in the text (leftmost-longest) */
#define FG_TOK_ADD_BOS 2u  /* prepend the BOS id when the config defines one */

/* Append the ids of text[0..len) (any bytes) to *out. Errors: FG_ERR_NOMEM, and FG_ERR_LIMIT
 * should PCRE2 hit its match limits (not seen with the GPT-2 pattern); on error out->n is
 * unchanged. */
int fg_tok_encode(fg_tok *tok, const void *text, size_t len, unsigned flags, fg_tok_ids *out,
                  fg_err *err);

/* Decode flags. */
#define FG_TOK_SKIP_SPECIAL 1u  /* leave special tokens out of the bytes */

/* Append the bytes of ids[0..n) to *out (no terminator). Errors: FG_ERR_TOK_BAD_ID (naming the
 * index and id; out->len unchanged), FG_ERR_NOMEM. */
int fg_tok_decode(const fg_tok *tok, const int32_t *ids, size_t n, unsigned flags,
                  fg_tok_bytes *out, fg_err *err);

/* The bytes of one token, for streaming output: *bytes stays valid until fg_tok_free.
 * Returns FG_ERR_TOK_BAD_ID for an id with no token. */
int fg_tok_token_bytes(const fg_tok *tok, int32_t id, const char **bytes, size_t *len);

/* Id of a token given as its vocab.json string (byte-level form, e.g. "\u0120the"), or -1. */
int32_t fg_tok_lookup(const fg_tok *tok, const char *token, size_t len);

/* One past the largest id (vocab and added tokens), and the number of merges. */
int32_t fg_tok_vocab_size(const fg_tok *tok);
uint32_t fg_tok_merge_count(const fg_tok *tok);

/* Special token roles read from the config files; -1 when undefined. */
typedef enum fg_tok_role { FG_TOK_BOS, FG_TOK_EOS, FG_TOK_UNK, FG_TOK_PAD, FG_TOK_N_ROLES } fg_tok_role;
int32_t fg_tok_special_id(const fg_tok *tok, fg_tok_role role);
/* 1 when tokenizer_config.json says add_bos_token: true (OPT does), else 0. */
int fg_tok_adds_bos(const fg_tok *tok);
/* 1 when id is a special (added) token. */
int fg_tok_is_special(const fg_tok *tok, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
