/* tok_int.h - private layout of fg_tok and the small hash maps it is built from.
 *
 * Three open-addressing maps (power-of-two tables, linear probing, never deleted from):
 *   strmap   token string -> id       (vocab.json keys; load time and fg_tok_lookup)
 *   pairmap  (left id, right id) -> (rank, merged id)   (merges.txt; the BPE inner loop)
 *   wcache   piece bytes -> ids       (encode's word cache; emptied wholesale when full)
 * Strings live in byte arenas the maps index by offset, so growing an arena never
 * invalidates an entry.
 */
#ifndef FG_TOK_INT_H
#define FG_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

/* A byte arena: append-only, offsets stay valid. */
typedef struct tok_arena { char *p; size_t len, cap; } tok_arena;
int tok_arena_put(tok_arena *a, const void *src, size_t n, uint32_t *off);
void tok_arena_free(tok_arena *a);

typedef struct strmap_ent { uint64_t hash; uint32_t off, len; int32_t id; } strmap_ent;
typedef struct strmap {
    strmap_ent *ent;  /* [cap], id = -1 marks an empty slot */
    size_t cap, n;
    tok_arena keys;
} strmap;
/* Insert key -> id. Returns FG_OK, FG_ERR_DUPLICATE (key present; *old_id gets its id) or
 * FG_ERR_NOMEM. */
int tok_strmap_put(strmap *m, const char *key, size_t len, int32_t id, int32_t *old_id);
int32_t tok_strmap_get(const strmap *m, const char *key, size_t len);
void tok_strmap_free(strmap *m);

typedef struct pairmap_ent { uint64_t key; uint32_t rank; int32_t merged; } pairmap_ent;
typedef struct pairmap { pairmap_ent *ent; size_t cap, n; } pairmap;
#define TOK_PAIR_EMPTY UINT64_MAX
/* Insert or overwrite (a, b) -> (rank, merged): the last merge listed wins, as in GPT-2's
 * dict(zip(merges, range(...))) and Hugging Face's HashMap collect. */
int tok_pairmap_put(pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged);
const pairmap_ent *tok_pairmap_get(const pairmap *m, int32_t a, int32_t b);
void tok_pairmap_free(pairmap *m);

/* A byte trie of the added tokens' match texts, for leftmost-longest matching in time bounded by
 * the longest token (not the number of tokens). Node 0 is the root; children are a linked list
 * (child, next); k >= 0 where a token ends: its index in fg_tok.special, the first one added. */
typedef struct trie_node { int32_t child, next, k; uint8_t byte; } trie_node;
typedef struct trie { trie_node *n; size_t len, cap; } trie;
/* Record that s[0..len) (len >= 1) matches token k unless a token already ends there. FG_OK,
 * FG_ERR_NOMEM or FG_ERR_LIMIT. */
int tok_trie_put(trie *tr, const unsigned char *s, size_t len, int32_t k);
/* The longest token that s starts with: its k and *mlen; -1 when none. */
int32_t tok_trie_longest(const trie *tr, const unsigned char *s, size_t len, size_t *mlen);
void tok_trie_free(trie *tr);

typedef struct wcache_ent { uint64_t hash; uint32_t off, len, ids_off, n_ids; } wcache_ent;
typedef struct wcache {
    wcache_ent *ent;  /* [TOK_WCACHE_SLOTS]; len = UINT32_MAX marks an empty slot */
    size_t n;
    tok_arena keys;
    int32_t *ids; size_t ids_len;  /* [TOK_WCACHE_IDS] */
} wcache;
#define TOK_WCACHE_SLOTS 65536u  /* table slots; the cache is emptied at half full */
#define TOK_WCACHE_IDS (1u << 20)
#define TOK_WCACHE_MAX_WORD 64u  /* longer pieces are not cached */
const int32_t *tok_wcache_get(const wcache *c, const char *w, size_t len, size_t *n_ids);
void tok_wcache_put(wcache *c, const char *w, size_t len, const int32_t *ids, size_t n_ids);
void tok_wcache_free(wcache *c);

uint64_t tok_hash(const void *p, size_t n);

/* An added token. off/len: its content in special_text; moff/mlen: what is matched (the content,
 * or for a tokenizer.json token with normalized = true, the content after the normalizer).
 * The flags are AddedToken's; the GPT-2 class leaves all but `special` zero. */
typedef struct tok_special {
    uint32_t off, len, moff, mlen;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_special;

/* ---- tokenizer.json pipelines (tok_json.c parses, tok_pipe.c encodes, tok_decode.c decodes) */

enum tok_class { TOK_GPT2 = 0, TOK_BYTELEVEL = 1, TOK_SPBPE = 2, TOK_TIKTOKEN = 3 };

enum tok_step_kind {
    ST_PREPEND, ST_REPLACE, ST_NFC, ST_NFD, ST_NFKC, ST_NFKD,  /* normalizers */
    ST_SPLIT, ST_BYTELEVEL, ST_METASPACE,                      /* pre-tokenizers */
    ST_D_BYTELEVEL, ST_D_REPLACE, ST_D_BYTEFALLBACK, ST_D_FUSE, ST_D_STRIP, ST_D_METASPACE,
};
enum tok_split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_PREVIOUS, SPLIT_NEXT, SPLIT_CONTIGUOUS };
enum tok_prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

/* One normalizer, pre-tokenizer or decoder of the chain (Sequences are flattened). */
typedef struct tok_step {
    int kind;
    pcre2_code *re;           /* Split / Replace / ByteLevel(use_regex): compiled pattern */
    pcre2_match_data *md;
    char *a; size_t a_len;    /* Prepend text, Replace content, Metaspace replacement, Strip content */
    char *lit; size_t lit_len;  /* a String pattern, matched without PCRE2 (NULL for a Regex) */
    int behavior, invert;     /* Split */
    int scheme, split;        /* Metaspace */
    int prefix_space;         /* ByteLevel add_prefix_space */
    unsigned start, stop;     /* Strip */
} tok_step;

/* A piece of text found by a splitting step: [a, b) of its parent, `match` for a pattern match. */
typedef struct tok_range { size_t a, b; int match; } tok_range;
#define TOK_MAX_STEPS 16
/* Per pre-tokenizer level scratch: rewritten text (Metaspace, ByteLevel prefix) and ranges. */
typedef struct tok_level { tok_arena buf; tok_range *r; size_t n, cap; } tok_level;

/* One BPE symbol in a piece being merged (a doubly linked list over an array). */
typedef struct tok_sym { int32_t id, prev, next; uint32_t len; } tok_sym;
/* A candidate merge in the heap: lowest rank first, then leftmost position. */
typedef struct tok_cand { uint32_t rank; uint32_t pos; int32_t merged; } tok_cand;

struct fg_tok {
    int32_t n_ids;            /* one past the largest id */
    int32_t id_cap;           /* allocated length of the id_* arrays */
    uint32_t *id_off;         /* [n_ids] offset of the id's bytes in id_bytes */
    uint32_t *id_len;         /* [n_ids] byte length; UINT32_MAX = no token has this id */
    uint8_t *id_special;      /* [n_ids] 1 for special (added) tokens */
    tok_arena id_bytes;       /* decoded bytes of every token */
    strmap vocab;             /* vocab.json string (and added token content) -> id */
    int32_t byte_id[256];     /* id of the single-byte token of each byte */
    pairmap merges;
    uint32_t n_merges;        /* merge lines read (ranks are 0..n_merges-1) */
    tok_special *special;     /* [n_special] added tokens matched before pre-tokenization */
    size_t n_special, special_cap;
    tok_arena special_text;
    strmap special_index;     /* added token content -> its index in special (the first one) */
    int32_t role[FG_TOK_N_ROLES];
    int add_bos;
    pcre2_code *re;
    pcre2_match_data *md;
    /* tokenizer.json classes (cls != TOK_GPT2) */
    int cls;
    tok_step norm[TOK_MAX_STEPS], pre[TOK_MAX_STEPS], dec[TOK_MAX_STEPS];
    int n_norm, n_pre, n_dec;
    int has_decoder;          /* 0: decode joins token strings with " " (HF without a decoder) */
    int fast_decode;          /* decoder is exactly ByteLevel: concatenate id bytes */
    int byte_level;           /* the model sees byte-level symbols (ByteLevel pre-tokenizer) */
    int byte_fallback, ignore_merges, fuse_unk;
    int sp_cut;               /* a piece may be cut before each U+2581 that follows another
                               * character: no merge can join across (tok_json_finish checks) */
    int32_t unk_id;           /* model unk_token id, -1 when none */
    int32_t n_model;          /* entries in the model's vocab (first id for new added tokens) */
    int32_t fb_id[256];       /* id of "<0xNN>" per byte, -1 when absent */
    int32_t ascii_id[128];    /* id of each one-character ASCII token, -1 when absent */
    uint8_t bl_sym[256][3];   /* each byte's byte-level symbol in UTF-8: [2] is its length */
    int32_t *post_pre, *post_suf;  /* ids the single template puts before / after $A */
    size_t n_post_pre, n_post_suf;
    int cfg_add_bos, cfg_add_eos;  /* tokenizer_config.json add_bos/eos_token: -1 absent, 0, 1 */
    /* transformers' view of the file (encode with FG_TOK_ADD_BOS): tokenizer_config.json's
     * tokenizer_class, legacy and add_prefix_space. transformers 5 rebuilds the normalizer and
     * pre-tokenizer of some classes from these keys, whatever tokenizer.json says (tok_json.c,
     * "transformers' view"); then has_hf is 1 and hf_norm / hf_pre hold that pipeline,
     * swapped in for the encode. */
    int cfg_class;                 /* TOK_HF_* */
    int model_file_view;           /* config.json's model_type maps to TokenizersBackend */
    int cfg_legacy, cfg_prefix_space;  /* -1 absent, 0, 1 */
    int has_hf, n_hf_norm, n_hf_pre;
    tok_step hf_norm[TOK_MAX_STEPS], hf_pre[TOK_MAX_STEPS];
    trie hf_added;                 /* added[1] for that view: normalized tokens as its (empty) */
    uint8_t hf_first[256];         /* normalizer writes them, and their first bytes */
    uint32_t *id_soff, *id_slen;   /* [id_cap] token string (vocab key / added content), json only */
    tok_arena id_str;
    int n_normalized;         /* added tokens matched after the normalizer */
    uint8_t added_first[2][256];   /* [normalized] 1 when an added token's pattern starts so */
    trie added[2];            /* [normalized] the added tokens' patterns */
    tok_level lvl[TOK_MAX_STEPS];
    tok_arena nbuf[2];        /* normalizer ping-pong */
    tok_level nlv;            /* normalizer Replace matches */
    tok_arena scratch;        /* byte-level key for ignore_merges, model units */
    wcache cache;
    tok_sym *sym; size_t sym_cap;     /* encode scratch */
    tok_cand *heap; size_t heap_cap;
};

/* 1 when id (>= 0) names a token; ids past the vocabulary or in its holes do not. */
static inline int tok_has_token(const fg_tok *t, int32_t id)
{
    return id < t->n_ids && t->id_len[id] != UINT32_MAX;
}

/* GPT-2's bytes_to_unicode: byte -> code point, and the inverse (-1 for other code points). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* ---- shared by tok_encode.c, tok_pipe.c, tok_decode.c, tok_json.c */

int tok_ids_push(fg_tok_ids *v, int32_t id);
int tok_ids_reserve(fg_tok_ids *v, size_t extra);
/* Ensure sym/heap scratch for n symbols. */
int tok_scratch_reserve(fg_tok *t, size_t n);
/* Merge t->sym[0..n) (a linked list, first symbol 0) by rank, Hugging Face's Word::merge_all. */
void tok_merge_all(fg_tok *t, size_t n);
/* Leftmost-longest added token among t->special[] with normalized == set, at or after `from`;
 * returns its start (len when none) and its index in *k. */
size_t tok_find_added(const fg_tok *t, const unsigned char *s, size_t len, size_t from, int set,
                      size_t *mlen, size_t *k);
/* Encode for the tokenizer.json classes (flags as fg_tok_encode). */
int tok_json_encode(fg_tok *t, const unsigned char *s, size_t len, unsigned flags, fg_tok_ids *out);
/* Decode for the tokenizer.json classes; errors as fg_tok_decode. */
int tok_json_decode(const fg_tok *t, const int32_t *ids, size_t n, unsigned flags,
                    fg_tok_bytes *out, fg_err *err);
/* The bytes of one token decoded alone (fg_tok_token_bytes) by the decoder chain without its
 * context rules (Strip, Metaspace's first token). Written to *out (reset first). */
int tok_json_token_alone(const fg_tok *t, int32_t id, tok_arena *out);
/* Compile a tokenizer.json (Oniguruma syntax) pattern for PCRE2; literal = a String pattern. */
int tok_regex_compile(const char *pat, size_t len, int literal, pcre2_code **re,
                      pcre2_match_data **md, const char *where, fg_err *err);
/* Append the range [a, b) to lv->r. */
int tok_range_push(tok_level *lv, size_t a, size_t b, int match);
/* The matches of st's pattern (literal or regex) in s[0..len) as ranges (tok_regex_ranges). */
int tok_step_ranges(const tok_step *st, pcre2_match_data *md, const unsigned char *s, size_t len,
                    tok_level *lv);
/* Every match of re in s[0..len) as ranges covering the text (matches and the gaps between),
 * Hugging Face's find_matches; appended to lv->r (lv->n reset first). */
int tok_regex_ranges(pcre2_code *re, pcre2_match_data *md, const unsigned char *s, size_t len,
                     tok_level *lv);
/* Apply a normalizer chain to s[0..len); res and res_len point into t->nbuf or at s itself. */
int tok_normalize(fg_tok *t, const unsigned char *s, size_t len, const unsigned char **res,
                  size_t *res_len);
/* Unicode White_Space (the \s of Oniguruma and of Rust's char::is_whitespace). */
int tok_is_ws(uint32_t cp);
/* Decode one UTF-8 sequence at s[0..n): its length (1 for an invalid byte, *cp = UINT32_MAX). */
size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* The ByteLevel decoder's bytes of one token string (at most len bytes to out). */
size_t tok_bytelevel_bytes(const char *s, size_t len, char *out);
/* Set id's token string (json classes). */
int tok_set_str(fg_tok *t, int32_t id, const char *s, size_t len);
/* tokenizer_config.json "tokenizer_class" values whose transformers __init__ rebuilds the
 * pipeline (tok_json.c, "transformers' view"); TOK_HF_NONE for any other (the file's pipeline
 * is transformers' too). */
enum { TOK_HF_NONE, TOK_HF_LLAMA, TOK_HF_GPT2 };
/* 1 when transformers 5 loads the tokenizer.json of this config.json model_type as it is
 * (its registered tokenizer is TokenizersBackend), whatever tokenizer_class says. */
int tok_hf_file_model(const char *model_type);
/* Build t's transformers view from cfg_class (called by tok_json_finish). */
int tok_hf_build(fg_tok *t, fg_err *err);
/* Swap the file's normalizer and pre-tokenizer with transformers' view (has_hf only). */
void tok_hf_swap(fg_tok *t);
/* Free everything the json loader added to t. */
void tok_json_free(fg_tok *t);
/* Load tokenizer.json into a fresh t (roles -1 already). */
int tok_load_json(fg_tok *t, const char *buf, size_t len, const char *name, fg_err *err);
/* After the config files: template vs add_bos/add_eos, roles from the template. */
int tok_json_finish(fg_tok *t, const char *name, fg_err *err);

/* Read a whole file (at most 1 GiB). optional: a missing file leaves *buf NULL and returns FG_OK. */
int tok_read_file(const char *path, int optional, char **buf, size_t *len, fg_err *err);

/* Compile the pre-tokenization regex into tok->re / tok->md. */
int tok_regex_init(fg_tok *tok, fg_err *err);

/* The pre-tokenization piece starting at s[pos] ends at *end (pos < *end <= len). */
int tok_next_piece(fg_tok *tok, const unsigned char *s, size_t len, size_t pos, size_t *end);

/* Set id's bytes (growing the id tables as needed) and mark it special or not. */
int tok_set_id(fg_tok *tok, int32_t id, const void *bytes, size_t len, int special);

/* Register an added token (see fg_tok_add_special). forced_id >= 0 is the id the config
 * gives it (added_tokens_decoder); special = 0 for an added token that is not special. */
int tok_add_token(fg_tok *tok, const char *content, size_t len, int32_t forced_id, int special,
                  int32_t *id_out, const char *file, fg_err *err);

/* Read tokenizer_config.json or special_tokens_map.json (same schema for the keys fg uses). */
int tok_load_config(fg_tok *tok, const void *buf, size_t len, const char *name, fg_err *err);

/* Set a JSON syntax error "file:line:column: text", control bytes in text escaped. */
int tok_json_error(fg_err *err, int code, const char *file, int line, int column,
                   const char *text);

/* Quote up to 40 bytes of s for an error message, escaping non-printable bytes. */
const char *tok_quote(char *buf, size_t cap, const char *s, size_t len);

#endif
