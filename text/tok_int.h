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

typedef struct tok_special { uint32_t off, len; int32_t id; } tok_special;

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
    uint8_t special_first[256]; /* 1 when some special token starts with this byte */
    int32_t role[FG_TOK_N_ROLES];
    int add_bos;
    pcre2_code *re;
    pcre2_match_data *md;
    wcache cache;
    tok_sym *sym; size_t sym_cap;     /* encode scratch */
    tok_cand *heap; size_t heap_cap;
};

/* GPT-2's bytes_to_unicode: byte -> code point, and the inverse (-1 for other code points). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

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
