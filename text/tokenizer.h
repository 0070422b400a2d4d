/* tokenizer.h - BPE tokenizers from Hugging Face files: encode text to token ids, decode ids.
 *
 * Four classes (fg_tok_class):
 *   "gpt2-bpe"           vocab.json + merges.txt (+ tokenizer_config.json,
 *                        special_tokens_map.json): GPT-2's byte-level BPE (GPT-2, OPT).
 *   "bytelevel-bpe"      a tokenizer.json whose pre-tokenizer ends in ByteLevel, usually after
 *                        a model-specific Split regex (Llama 3, Qwen2).
 *   "sentencepiece-bpe"  a tokenizer.json BPE over characters, '\u2581' for spaces (Metaspace
 *                        pre-tokenizer or Prepend/Replace normalizer), <0xNN> byte fallback
 *                        (Llama 2, Mistral).
 *   "tiktoken-bpe"       a tiktoken ranks file (tiktoken.model: base64 token + rank a line) with
 *                        the split pattern and reserved special tokens of Kimi's
 *                        TikTokenTokenizer (tokenization_kimi.py) and tokenizer_config.json
 *                        (Kimi K2); encodes as tiktoken does (text/tok_tiktoken.c).
 * Ids always come from the files (OPT numbers its tokens differently from GPT-2).
 *
 * gpt2-bpe encodes as Hugging Face `tokenizers` does with ByteLevel(add_prefix_space = false):
 * special tokens are cut out first (when asked), the rest is split by GPT-2's regex, each
 * piece's bytes are mapped to byte-level symbols and merged by rank. Every byte string
 * round-trips: decode(encode(s)) == s, including invalid UTF-8.
 * The tokenizer.json classes run the file's own pipeline (added tokens, normalizer,
 * pre-tokenizer, BPE model, post-processor; decoder chain for decode) as `tokenizers` does;
 * text/tok_json.c lists what is supported and SPEC.md section 14 the rules. Prompts
 * (FG_TOK_SPECIAL | FG_TOK_ADD_BOS) tokenize as transformers' tokenizer(text) does, which for
 * some tokenizer_class values means the pipeline transformers rebuilds (see FG_TOK_ADD_BOS).
 * tests/test_realtok.c checks both views on the published files of ten models.
 *
 * Lifecycle: fg_tok_load_* -> fg_tok_encode / fg_tok_decode ... -> fg_tok_free.
 * Threads: a tokenizer keeps a word cache and scratch, so encode on one fg_tok must not run on
 * two threads at once; decode and the lookups only read and may run concurrently with each
 * other. Load one tokenizer per thread for parallel encoding.
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
/* Longest added token accepted (tokenizer.json's added_tokens, the config files' tokens): the
 * text scan for added tokens costs up to text length x token length. */
#define FG_TOK_MAX_ADDED 4096
#define FG_TOK_MAX_ADDED_STR "4096"

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

/* Load the tokenizer of a checkpoint directory: DIR/tokenizer.json when that file exists
 * (fg_tok_load_json_dir), else DIR/tiktoken.model when that exists (fg_tok_load_tiktoken_dir),
 * otherwise DIR/vocab.json and DIR/merges.txt, and
 * DIR/tokenizer_config.json and DIR/special_tokens_map.json when they exist. (Before
 * tokenizer.json support a directory holding both kinds loaded vocab.json + merges.txt; use
 * fg_tok_load_files to get that.) Adds FG_ERR_NOT_FOUND / FG_ERR_IO. */
int fg_tok_load_dir(const char *dir, fg_tok **out, fg_err *err);

/* A tokenizer.json (required) and the optional config files as memory buffers: borrowed for
 * the duration of fg_tok_load_json_mem only, no NUL terminator needed, NULL = absent; names
 * are for error messages (NULL gives the usual file name). */
typedef struct fg_tok_json_files {
    const void *tokenizer_json; size_t tokenizer_len; const char *tokenizer_name;
    const void *config_json;    size_t config_len;    const char *config_name;
    const void *special_json;   size_t special_len;   const char *special_name;
    /* config.json's "model_type" (NUL-terminated; NULL = unknown): transformers picks the
     * tokenizer class by it too (mistral, mixtral, phi3, olmo2, ...: the file as it is, whatever
     * tokenizer_class says; see FG_TOK_ADD_BOS). Borrowed like the buffers. */
    const char *model_type;
} fg_tok_json_files;

/* Build a "bytelevel-bpe" or "sentencepiece-bpe" tokenizer from tokenizer.json, then apply
 * tokenizer_config.json and special_tokens_map.json as for gpt2-bpe (roles, extra special
 * tokens; add_bos_token / add_eos_token, when given, replace the post-processor's template as
 * transformers does). On success *out is a new tokenizer owned by the caller (fg_tok_free).
 * Errors: FG_ERR_TOK_JSON (syntax, file:line:column), FG_ERR_TOK_VOCAB, FG_ERR_TOK_MERGES,
 * FG_ERR_TOK_CONFIG (a field of the wrong shape; the message names its JSON path),
 * FG_ERR_UNSUPPORTED (a model, normalizer, pre-tokenizer, post-processor or decoder type fg
 * does not implement, named), FG_ERR_LIMIT, FG_ERR_NOMEM. */
int fg_tok_load_json_mem(const fg_tok_json_files *files, fg_tok **out, fg_err *err);

/* The same from files; config_path and special_path may be NULL or missing (absent). */
int fg_tok_load_json_files(const char *tokenizer_path, const char *config_path,
                           const char *special_path, fg_tok **out, fg_err *err);

/* DIR/tokenizer.json with DIR/tokenizer_config.json and DIR/special_tokens_map.json if present,
 * and DIR/config.json's "model_type" when that file is there (a config.json fg cannot read as
 * JSON is an error naming it). */
int fg_tok_load_json_dir(const char *dir, fg_tok **out, fg_err *err);

/* A tiktoken-format tokenizer (the "tiktoken-bpe" class): tiktoken.model (required), the split
 * pattern (required; NUL-terminated, tiktoken's (Rust regex) syntax) and tokenizer_config.json
 * (NULL = absent). Buffers are borrowed for the call only; names are for messages. */
typedef struct fg_tok_tiktoken_files {
    const void *model;        size_t model_len;   const char *model_name;
    const void *config_json;  size_t config_len;  const char *config_name;
    const char *pattern;      const char *pattern_name;
} fg_tok_tiktoken_files;

/* Build a "tiktoken-bpe" tokenizer: ranks 0..n-1 from the file, tokens n..n+257 special (named by
 * added_tokens_decoder, else <|reserved_token_ID|>), roles from the config. Errors:
 * FG_ERR_TOK_VOCAB (a bad line: file:line and what is wrong), FG_ERR_TOK_JSON, FG_ERR_TOK_CONFIG
 * (the config, or a pattern PCRE2 cannot compile), FG_ERR_UNSUPPORTED (a regex construct fg
 * cannot translate), FG_ERR_LIMIT, FG_ERR_NOMEM. */
int fg_tok_load_tiktoken_mem(const fg_tok_tiktoken_files *files, fg_tok **out, fg_err *err);

/* The split pattern a tokenization_kimi.py configures: its `pat_str = "|".join([r"""...""", ...])`
 * (or a single literal), read as text, never run. *pattern (malloc'd, NUL-terminated) is the
 * caller's. Errors: FG_ERR_NOT_FOUND (no pat_str), FG_ERR_TOK_CONFIG (not literals fg reads). */
int fg_tok_tiktoken_pattern(const char *py, size_t len, const char *name, char **pattern,
                            fg_err *err);

/* DIR/tiktoken.model + DIR/tokenization_kimi.py (its pattern) + DIR/tokenizer_config.json when
 * present. */
int fg_tok_load_tiktoken_dir(const char *dir, fg_tok **out, fg_err *err);

/* "gpt2-bpe", "bytelevel-bpe", "sentencepiece-bpe" or "tiktoken-bpe"; a static string. */
const char *fg_tok_class(const fg_tok *tok);

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

/* Encode flags. FG_TOK_SPECIAL | FG_TOK_ADD_BOS is transformers' tokenizer(text)["input_ids"]
 * (what a prompt needs); 0 is the `tokenizers` library's encode(text, add_special_tokens=False)
 * with special tokens split as text (encode_special_tokens = true).
 * FG_TOK_SPECIAL: match special tokens in the text (leftmost-longest). gpt2-bpe matches no
 *   added token without it; the tokenizer.json classes always match their non-special added
 *   tokens, as `tokenizers` does (the flag off is its encode_special_tokens = true).
 * FG_TOK_ADD_BOS: encode as transformers does, adding the special tokens of the sequence:
 *   gpt2-bpe prepends the BOS id when the config defines one; the tokenizer.json classes add
 *   what the post-processor's single template (or add_bos_token / add_eos_token) puts around
 *   the text, and where tokenizer_config.json's tokenizer_class is one whose transformers
 *   __init__ rebuilds the pipeline (LlamaTokenizer: Metaspace per legacy / add_prefix_space
 *   instead of the file's normalizer; GPT2Tokenizer: GPT-2's ByteLevel), encode with that
 *   pipeline, as transformers 5 does (Llama 2: " Hello" and "<s>Hello" differ from the
 *   `tokenizers` library's ids), unless config.json's model_type makes transformers load the
 *   file as it is (Mistral, Mixtral, Phi-3, OLMo 2, ...; text/tok_json.c). */
#define FG_TOK_SPECIAL 1u
#define FG_TOK_ADD_BOS 2u

/* Append the ids of text[0..len) (any bytes) to *out. Errors: FG_ERR_NOMEM, and FG_ERR_LIMIT
 * should PCRE2 hit its match limits (not seen with the GPT-2 pattern); on error out->n is
 * unchanged. */
int fg_tok_encode(fg_tok *tok, const void *text, size_t len, unsigned flags, fg_tok_ids *out,
                  fg_err *err);

/* Decode flags. FG_TOK_SKIP_SPECIAL leaves special tokens out. FG_TOK_REPLACE_INVALID
 * (tokenizer.json classes) replaces ill-formed UTF-8 with U+FFFD exactly where `tokenizers`
 * does; without it the raw bytes come out (what a streaming caller wants). */
#define FG_TOK_SKIP_SPECIAL 1u
#define FG_TOK_REPLACE_INVALID 2u

/* Append the bytes of ids[0..n) to *out (no terminator): the tokens' bytes concatenated for
 * gpt2-bpe, the decoder chain's text for the tokenizer.json classes. An id >= 0 that names no
 * token decodes as nothing, as in `tokenizers` and transformers: a model's embedding may have
 * more rows than its tokenizer has tokens (Qwen2.5: 151,936 rows for 151,665 tokens; Phi-3,
 * OLMo 2), and a sampled id past the vocabulary must not end a job. A negative id is no id at
 * all (tokenizers takes u32 ids and refuses it too): FG_ERR_TOK_BAD_ID naming the index and id,
 * out->len unchanged. Other errors: FG_ERR_NOMEM. */
int fg_tok_decode(const fg_tok *tok, const int32_t *ids, size_t n, unsigned flags,
                  fg_tok_bytes *out, fg_err *err);

/* The bytes of one token, for streaming output: *bytes stays valid until fg_tok_free. For the
 * tokenizer.json classes, the token decoded alone by the decoder chain minus its context rules
 * (Strip, Metaspace's first-token rule): "\u2581the" gives " the", "<0x0A>" a newline.
 * An id >= 0 with no token (see fg_tok_decode) gives FG_OK and zero bytes (*bytes = "");
 * a negative id returns FG_ERR_TOK_BAD_ID. */
int fg_tok_token_bytes(const fg_tok *tok, int32_t id, const char **bytes, size_t *len);

/* Id of a token given as its vocabulary string (byte-level form, e.g. "\u0120the", or
 * "\u2581the"), or an added token's content; -1 when none. */
int32_t fg_tok_lookup(const fg_tok *tok, const char *token, size_t len);

/* One past the largest id (vocab and added tokens), and the number of merges. */
int32_t fg_tok_vocab_size(const fg_tok *tok);
uint32_t fg_tok_merge_count(const fg_tok *tok);

/* Special token roles read from the config files; -1 when undefined. For the tokenizer.json
 * classes a role the config leaves out comes from the template (its one token before $A is
 * BOS, after it EOS) and UNK from the model's unk_token. */
typedef enum fg_tok_role { FG_TOK_BOS, FG_TOK_EOS, FG_TOK_UNK, FG_TOK_PAD, FG_TOK_N_ROLES } fg_tok_role;
int32_t fg_tok_special_id(const fg_tok *tok, fg_tok_role role);
/* gpt2-bpe: 1 when tokenizer_config.json says add_bos_token: true (OPT does), else 0.
 * tokenizer.json classes: 1 when FG_TOK_ADD_BOS adds any token. */
int fg_tok_adds_bos(const fg_tok *tok);
/* 1 when id is a special (added) token. */
int fg_tok_is_special(const fg_tok *tok, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
