/* prefix.h - a persistent prefix KV cache: the KV rows of prompt prefixes, kept in the KV pages
 * of a store of their own (SPEC "Prefix cache"), so that prompts sharing a few-shot prefix
 * compute it once, within a job and across jobs and runs.
 *
 * A prompt is cut into pages of page_tokens tokens. Page j of a prompt has a key made by a hash
 * chain: key_j = XXH3-128(key_{j-1} || token ids of page j), key_{-1} = XXH3-128 of the cache's
 * identity (model content hash, KV codec and row size, layers, page size, compute mode,
 * backend). A page's entry is one KV page per layer (K rows then V rows, as the engine's KV
 * cache holds them, encoded by the KV codec) plus a meta page (its tokens, parent key, hits),
 * all written by one fg_store_kv_write: an entry is whole or absent after a crash.
 *
 * Life cycle: fg_prefix_open -> lookups and reads; fg_prefix_write_begin, fg_prefix_put...,
 * fg_prefix_write_end -> fg_prefix_close. The store is held read-only between writes; a write
 * reopens it for writing (waiting while another process writes) and closes it again, so any
 * number of processes share one cache. A cache made for another identity is refused at open
 * (FG_ERR_STORE_FOREIGN naming both), so it is never used.
 *
 * Threads: one thread uses a handle.
 */
#ifndef FG_PREFIX_H
#define FG_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_PREFIX_IDENT_SIZE 160u /* bytes of an encoded identity */
#define FG_PREFIX_META_HEAD 64u   /* bytes of a meta payload before its token ids */
#define FG_PREFIX_MAX_PAGE_TOKENS 4096u
#define FG_PREFIX_META_LAYER 0xFFFFFFFFu  /* kv key layer of an entry's meta page */
#define FG_PREFIX_IDENT_LAYER 0xFFFFFFFEu /* kv key (0, 0, this, 0): the identity page */

/* What the cached KV rows depend on; two caches with different identities never share a key. */
typedef struct fg_prefix_ident {
    uint64_t model;          /* XXH3 over the model store's config and tensor digests */
    uint32_t n_layers;
    uint32_t row_bytes;      /* bytes of one K (or V) row of one layer */
    uint32_t width;          /* floats of a row before encoding (n_kv_heads * head_dim) */
    uint32_t page_tokens;    /* tokens per page, 1..FG_PREFIX_MAX_PAGE_TOKENS */
    uint8_t codec_id, codec_bits, codec_axis; /* the KV codec (fg_codec) */
    uint8_t compute;         /* fg_compute of the Linear layers */
    uint8_t kv_single;       /* 1: a page holds the K rows alone (MLA: the values are the keys'
                              * latent part); 0: K rows then V rows */
    uint32_t codec_group;
    char backend[16];        /* NUL-terminated backend name ("cpu") */
    char label[96];          /* for messages: model type and store; not part of the key */
} fg_prefix_ident;

/* Encode id into out[FG_PREFIX_IDENT_SIZE]; decode checks magic, version, reserved bytes,
 * ranges and terminators (untrusted bytes: a cache's identity page). */
void fg_prefix_ident_encode(const fg_prefix_ident *id, uint8_t *out);
int fg_prefix_ident_decode(const uint8_t *buf, size_t len, fg_prefix_ident *out, fg_err *err);

/* A page's meta payload, FG_PREFIX_META_HEAD + 4 * n_tokens bytes. */
typedef struct fg_prefix_meta {
    uint64_t parent_job;     /* the previous page's key (0, 0 for page 0) */
    uint32_t parent_seq;
    uint32_t page;           /* page number in the prompt (tokens [page * G, (page + 1) * G)) */
    uint32_t n_tokens;       /* = page_tokens */
    uint64_t hits;           /* times the page was loaded instead of computed */
    uint64_t created, used;  /* unix seconds: first written, last loaded or written */
    uint64_t ident;          /* low 64 bits of key_{-1}: the identity it was made under */
    const uint8_t *tokens;   /* [n_tokens] int32 LE ids, pointing into the decoded buffer */
} fg_prefix_meta;
int fg_prefix_meta_decode(const uint8_t *buf, size_t len, fg_prefix_meta *out, fg_err *err);

typedef struct fg_prefix_key {
    uint64_t job;
    uint32_t seq;
} fg_prefix_key;

typedef struct fg_prefix_opts {
    uint64_t budget;          /* bytes of pages in use; least recently used entries evicted
                                 past it (0: no bound) */
    double busy_wait_s;       /* how long a write waits for another writer (0: 30 s) */
} fg_prefix_opts;

typedef struct fg_prefix fg_prefix;

/* Open (creating when dir is missing or empty) the cache at dir for identity id. opts may be
 * NULL. *out owned by the caller (fg_prefix_close). */
int fg_prefix_open(const char *dir, const fg_prefix_ident *id, const fg_prefix_opts *opts,
                   fg_prefix **out, fg_err *err);
/* Writes the pending hit counts (best effort), closes the store. NULL accepted. */
void fg_prefix_close(fg_prefix *p);
uint32_t fg_prefix_page_tokens(const fg_prefix *p);
/* Bytes of one layer's payload of a page: 2 * page_tokens * row_bytes. */
size_t fg_prefix_payload_bytes(const fg_prefix *p);

/* Keys of the first n_pages pages of ids (ids holds at least n_pages * page_tokens). */
void fg_prefix_keys(const fg_prefix *p, const int32_t *ids, uint32_t n_pages, fg_prefix_key *keys);
/* How many leading pages of keys (ids) the cache holds: each page's meta must be intact and
 * repeat its tokens, parent and identity. Found pages are counted as hits (written at the next
 * fg_prefix_write_end or close). */
int fg_prefix_lookup(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys,
                     uint32_t n_pages, uint32_t *found, fg_err *err);
/* As fg_prefix_lookup, without counting hits. */
int fg_prefix_probe(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys,
                    uint32_t n_pages, uint32_t *found, fg_err *err);
/* Layer `layer` of the page with key (page number j) into buf[fg_prefix_payload_bytes]:
 * FG_ERR_NOT_FOUND or FG_ERR_STORE_STALE when it went away (evicted by another process). */
int fg_prefix_read(fg_prefix *p, const fg_prefix_key *key, uint32_t j, uint32_t layer, void *buf,
                   fg_err *err);

/* One page to save: layers[l] is its layer l payload (fg_prefix_payload_bytes each). */
typedef struct fg_prefix_entry {
    fg_prefix_key key, parent;  /* parent {0, 0} for page 0 */
    uint32_t page;
    const int32_t *tokens;      /* [page_tokens] */
    const void *const *layers;  /* [n_layers] */
} fg_prefix_entry;

/* Writes: begin reopens the store for writing (waiting up to busy_wait_s while another
 * process writes: FG_ERR_STORE_BUSY after that); put writes n entries in one crash-safe
 * commit; end writes the hit counts, evicts past the budget and reopens read-only. end must
 * follow a successful begin, also after a failed put. */
int fg_prefix_write_begin(fg_prefix *p, fg_err *err);
int fg_prefix_put(fg_prefix *p, const fg_prefix_entry *e, size_t n, fg_err *err);
int fg_prefix_write_end(fg_prefix *p, fg_err *err);

/* A job's shared prefixes (prefix_share.c): for prompts[0..n) (lens[i] ids each), the deepest
 * whole-page prefixes that two or more prompts share and the cache does not hold whole, one per
 * branch: computing them first (as prompts of their own) lets every prompt load them. *out
 * (malloc'd, the caller frees) lists them by depth: prompt i's first n_tokens ids. */
typedef struct fg_prefix_span {
    size_t prompt;
    uint32_t n_tokens;
} fg_prefix_span;
int fg_prefix_shared(fg_prefix *p, const int32_t *const *prompts, const uint32_t *lens, size_t n,
                     fg_prefix_span **out, size_t *n_out, fg_err *err);

typedef struct fg_prefix_stats {
    uint64_t pages_hit;       /* pages found by lookups */
    uint64_t pages_saved;     /* entries written */
    uint64_t bytes_written;   /* payload bytes written */
    uint64_t pages_evicted;   /* entries evicted for the budget */
    uint64_t busy_skips;      /* writes skipped because another process held the cache */
} fg_prefix_stats;
void fg_prefix_stats_get(const fg_prefix *p, fg_prefix_stats *out);

/* What a cache holds (fg-inspect), read through a read-only handle; a store without the
 * identity page (has_ident 0) is not a cache and is not walked. */
typedef struct fg_prefix_info {
    int has_ident;
    fg_prefix_ident ident;
    uint64_t entries;         /* meta pages (cached prompt pages) */
    uint64_t kv_pages;        /* layer pages */
    uint64_t bytes;           /* bytes of the slots in use */
    uint64_t file_bytes;      /* bytes of the page files (slots kept for reuse included) */
    uint64_t hits;            /* sum of the entries' hit counts */
    uint32_t deepest;         /* highest page number + 1 */
    uint64_t bad;             /* meta pages that fail to read or decode */
} fg_prefix_info;
int fg_prefix_info_get(const char *dir, fg_prefix_info *out, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
