/* store.h - a model store: a directory of .fgt weight files and KV-cache page files, indexed by
 * an LMDB catalog. SPEC.md ("Store") is normative for the directory layout, every catalog
 * record and the KV page header; this header is the C view.
 *
 * Life cycle: fg_store_create or fg_store_open -> lookups, batches, KV pages -> fg_store_close.
 * A store has at most one writing handle on the whole machine (an flock on store.id) and at
 * most one handle per process (LMDB allows one environment per process); read-only handles in
 * other processes see committed snapshots while the writer works.
 *
 * Crash safety: data reach the disk (fdatasync) before the catalog commit that makes them
 * visible, so after a crash at any instant a tensor is either wholly visible or absent, and a
 * KV page is either its new or its previous generation. A writable open cleans up what a crash
 * left (orphan files, reserved KV slots) before it returns.
 *
 * Threads: lookups and reads (fg_store_tensor_get, fg_store_chunk_data, fg_store_meta_get,
 * fg_store_kv_lookup, fg_store_kv_read, iterators) may run on many threads at once; writes
 * (batches, KV writes and frees) are serialized inside the store. An iterator callback may
 * call lookups and reads but must not write to the store (the iterator holds a read
 * transaction, and growing the map waits for every read transaction to end).
 */
#ifndef FG_STORE_H
#define FG_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fg_error.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_STORE_KV_HEADER_SIZE 128u          /* bytes of header at the start of each KV page */
#define FG_STORE_KV_PAGE_MIN 4096u
#define FG_STORE_KV_PAGE_MAX (64u << 20)
#define FG_STORE_META_MAX (1u << 30)         /* bytes in one metadata value */
#define FG_STORE_META_INLINE FG_FGT_MAX_BLOB  /* larger values are files of their own (SPEC "meta") */

/* File I/O the store performs on its own files (KV pages, KV file headers, store.id, fsyncs).
 * POSIX conventions: -1 and errno on failure; pwrite may return a short count. Tests replace
 * entries to inject EIO, ENOSPC and short writes. Weight files go through format/'s writer. */
typedef struct fg_store_io {
    ssize_t (*pwrite)(void *ctx, int fd, const void *buf, size_t n, off_t off);
    ssize_t (*pread)(void *ctx, int fd, void *buf, size_t n, off_t off);
    int (*fdatasync)(void *ctx, int fd);
    int (*ftruncate)(void *ctx, int fd, off_t len);
    void *ctx;
} fg_store_io;

typedef struct fg_store_opts {
    /* Fixed at create (kept in store.id): */
    uint32_t kv_page_size;      /* multiple of 4096 in [4096, 64 MiB]; 0 = 65536 */
    uint32_t kv_pages_per_file; /* slots per KV page file, 1..2^24; 0 = 16384 */
    uint64_t max_file_bytes;    /* a batch starts a new weight file past this size; 0 = 4 GiB */
    /* Per open: */
    uint64_t map_initial;       /* LMDB map size at create; 0 = 1 MiB (grown on demand) */
    uint64_t map_max;           /* the map never grows past this; 0 = 64 GiB */
    const fg_store_io *io;      /* NULL = POSIX; the table is copied */
} fg_store_opts;

enum {
    FG_STORE_RDONLY = 1, /* read-only handle (MDB_RDONLY); no recovery, no lock; needs no
                            write access to the store (MDB_NOLOCK when the lock file cannot
                            be written) */
};

typedef struct fg_store fg_store;

/* Create a store in dir (created when missing; must be empty otherwise) and open it for writing.
 * opts may be NULL. *out is owned by the caller until fg_store_close. */
int fg_store_create(const char *dir, const fg_store_opts *opts, fg_store **out, fg_err *err);
/* Open an existing store. A writable open takes the store's write lock (FG_ERR_STORE_BUSY when
 * held), clears stale LMDB readers, and recovers from a crash. opts may be NULL; only its
 * per-open fields are used. */
int fg_store_open(const char *dir, unsigned flags, const fg_store_opts *opts, fg_store **out,
                  fg_err *err);
/* Release everything; views handed out become invalid. NULL accepted. */
void fg_store_close(fg_store *s);

typedef struct fg_store_info {
    char uuid[33];               /* store id, 32 hex digits */
    uint32_t kv_page_size, kv_pages_per_file;
    uint64_t max_file_bytes;
    uint64_t map_size, map_used; /* bytes of the LMDB map, and of it in use */
    uint32_t n_weight_files, n_kv_files;
    uint64_t n_tensors, n_chunks, weight_bytes; /* weight_bytes: sum of weight file sizes */
    uint64_t n_meta;
    uint64_t kv_slots, kv_used, kv_free, kv_dirty; /* dirty: free slots awaiting a header wipe */
    uint64_t kv_generation;      /* last generation handed to a KV page */
    uint32_t stale_readers;      /* LMDB reader slots of dead processes cleared at open */
    int read_only;
    int no_lock;                 /* read-only handle that could not write the catalog's lock
                                    file (store not writable by this user, or a read-only file
                                    system): it reads without LMDB's reader table */
} fg_store_info;
int fg_store_info_get(fg_store *s, fg_store_info *out, fg_err *err);
const char *fg_store_dir(const fg_store *s); /* owned by s */

/* ---- tensors ---- */
typedef struct fg_store_tensor {
    const char *name;         /* NUL-terminated; owned with the record */
    uint32_t file_id;         /* weights-<file_id>.fgt */
    uint32_t file_index;      /* tensor index inside that file */
    uint64_t batch;           /* the batch that added it */
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[FG_FGT_MAX_DIMS];
    uint64_t payload_bytes;
    uint64_t digest;          /* XXH3-64 over the chunk checksums, in order */
    uint32_t n_chunks;
    const fg_fgt_chunk_info *chunks; /* [n_chunks], file offsets in weights-<file_id>.fgt */
} fg_store_tensor;

/* Look up name; *out is a heap copy owned by the caller (fg_store_tensor_free).
 * FG_ERR_NOT_FOUND when the catalog has no such tensor. The record is checked against its
 * weight file's index first (the file is opened and mapped on first use): a file of another
 * store is FG_ERR_STORE_FOREIGN, a file or chunk table that disagrees with the record (a file
 * copied in, a moved offset or checksum) FG_ERR_STORE_CATALOG naming the tensor and chunk. */
int fg_store_tensor_get(fg_store *s, const char *name, fg_store_tensor **out, fg_err *err);
void fg_store_tensor_free(fg_store_tensor *t); /* NULL accepted */
/* Call cb for every tensor in name order (the record is valid during the call only); a
 * non-zero return stops the walk and is returned. */
int fg_store_tensor_iter(fg_store *s, int (*cb)(void *ctx, const fg_store_tensor *t), void *ctx,
                         fg_err *err);
/* Zero-copy view of chunk c of t (mmap of its weight file), valid until fg_store_close. With
 * verify != 0 the chunk checksum is checked first. */
int fg_store_chunk_data(fg_store *s, const fg_store_tensor *t, uint32_t c, int verify,
                        const void **data, fg_err *err);
/* Path of a store file ("<dir>/weights-000001.fgt" or "<dir>/kv-000002.pages") into buf. */
int fg_store_file_path(const fg_store *s, uint32_t file_id, int kv, char *buf, size_t n);

/* Files the catalog lists, in id order. */
typedef struct fg_store_file {
    uint32_t id;
    int kv;               /* 0: weights-<id>.fgt, 1: kv-<id>.pages */
    uint64_t size;        /* weights: bytes at commit; kv: bytes of header + committed slots */
    uint64_t generation;  /* weights: .fgt superblock generation */
    uint64_t batch;       /* weights: batch that wrote it */
    uint32_t part, parts; /* weights: its place in that batch */
    uint32_t slots;       /* kv: committed slot count */
} fg_store_file;
int fg_store_file_iter(fg_store *s, int (*cb)(void *ctx, const fg_store_file *f), void *ctx,
                       fg_err *err);

/* ---- model metadata (config, tokenizer files): named blobs ---- */
/* *data is a malloc'd copy the caller frees. FG_ERR_NOT_FOUND when absent. Values up to
 * FG_STORE_META_INLINE live in the catalog; larger ones (up to FG_STORE_META_MAX) in a
 * checksummed file of their own (SPEC "meta"): a damaged one is FG_ERR_CHECKSUM, a missing one
 * FG_ERR_STORE_MISSING, with one line naming the key and the file. */
int fg_store_meta_get(fg_store *s, const char *key, void **data, size_t *len, fg_err *err);
int fg_store_meta_iter(fg_store *s, int (*cb)(void *ctx, const char *key, size_t len), void *ctx,
                       fg_err *err);

/* ---- batches: tensors and metadata that become visible all at once ---- */
typedef struct fg_store_batch fg_store_batch;

/* One batch at a time per store (FG_ERR_STATE otherwise). */
int fg_store_batch_begin(fg_store *s, fg_store_batch **out, fg_err *err);
/* As fg_fgt_writer_*: a name already in the catalog or the batch gives FG_ERR_DUPLICATE
 * (add_chunk with data NULL: a chunk of zeros left as a hole, as fg_fgt_writer_add_chunk). */
int fg_store_batch_begin_tensor(fg_store_batch *b, const fg_fgt_tensor_desc *d, fg_err *err);
int fg_store_batch_add_chunk(fg_store_batch *b, uint64_t n_rows, const void *data, size_t len,
                             fg_err *err);
int fg_store_batch_end_tensor(fg_store_batch *b, fg_err *err);
/* Set metadata blob key (replaces an earlier batch's value at commit). Copies its input.
 * len <= FG_STORE_META_MAX (1 GiB; FG_ERR_LIMIT otherwise); a value over FG_STORE_META_INLINE
 * is written to its own file at commit, before the catalog commit that makes it visible. */
int fg_store_batch_meta(fg_store_batch *b, const char *key, const void *data, size_t len,
                        fg_err *err);
/* Publish the batch's files (fdatasync), then commit the catalog. Frees b either way; on
 * failure nothing of the batch is visible. */
int fg_store_batch_commit(fg_store_batch *b, fg_err *err);
void fg_store_batch_abort(fg_store_batch *b); /* removes the batch's files; NULL accepted */

/* ---- KV-cache pages ---- */
typedef struct fg_store_kv_key {
    uint64_t job;
    uint32_t seq, layer, page;
} fg_store_kv_key;

typedef struct fg_store_kv_page {
    fg_store_kv_key key;
    uint32_t token_first, n_tokens; /* token range the page holds */
    uint8_t codec;                  /* fg_codec_id of the payload (0 = opaque bytes) */
    uint32_t payload_len;           /* <= page size - FG_STORE_KV_HEADER_SIZE */
    uint64_t generation;            /* store-wide, increases with every page write */
    uint64_t payload_xxh3;
    uint32_t file_id, slot;         /* kv-<file_id>.pages, slot index */
    uint64_t offset;                /* file offset of the page (header first) */
} fg_store_kv_page;

typedef struct fg_store_kv_write_req {
    fg_store_kv_key key;
    uint32_t token_first, n_tokens;
    uint8_t codec;
    const void *payload;
    size_t len;
} fg_store_kv_write_req;

/* Write n pages copy-on-write: new slots, data fdatasynced, then one catalog commit maps every
 * key to its new page (replacing any previous page of that key, whose slot is freed). After a
 * crash each key shows its old page or its new one. out (may be NULL) receives [n] records. */
int fg_store_kv_write(fg_store *s, size_t n, const fg_store_kv_write_req *reqs,
                      fg_store_kv_page *out, fg_err *err);
/* Catalog record of key; FG_ERR_NOT_FOUND when none. */
int fg_store_kv_lookup(fg_store *s, const fg_store_kv_key *key, fg_store_kv_page *out,
                       fg_err *err);
/* Read key's payload into buf (cap bytes): header and payload checksums are checked, and the
 * header must name the key and generation the catalog holds (else FG_ERR_STORE_STALE). */
int fg_store_kv_read(fg_store *s, const fg_store_kv_key *key, void *buf, size_t cap,
                     fg_store_kv_page *out, fg_err *err);
/* Free pages: of one job (n_fields 1), one sequence (2), one layer (3) or one page (4), taking
 * the first n_fields of key in the order job, seq, layer, page. *freed (may be NULL) counts. */
int fg_store_kv_free(fg_store *s, const fg_store_kv_key *key, int n_fields, uint64_t *freed,
                     fg_err *err);
/* Walk the pages of job in key order (job = UINT64_MAX: every job). */
int fg_store_kv_iter(fg_store *s, uint64_t job, int (*cb)(void *ctx, const fg_store_kv_page *p),
                     void *ctx, fg_err *err);

/* ---- maintenance ---- */
typedef struct fg_store_verify_report {
    uint32_t files, orphan_files;
    uint64_t tensors, chunks, chunk_bytes;
    uint64_t kv_pages, kv_free, kv_dirty;
    uint64_t meta;
} fg_store_verify_report;

/* Check every checksum of every file the catalog lists, and that catalog and files agree
 * (SPEC "verify"). The first failure is returned with a message naming file, tensor, chunk or
 * page. rep may be NULL. Works on read-only handles. */
int fg_store_verify(fg_store *s, fg_store_verify_report *rep, fg_err *err);

/* Rebuild the catalog of the store at dir from its files alone (SPEC "reindex"): the existing
 * catalog, if any, is replaced. Takes the write lock. opts as for fg_store_open. */
int fg_store_reindex(const char *dir, const fg_store_opts *opts, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
