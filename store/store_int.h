/* store_int.h - private to store/: the handle, the catalog encodings and helpers shared by the
 * store's .c files. SPEC-section.md describes the same records in prose, byte by byte. */
#ifndef FG_STORE_INT_H
#define FG_STORE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"

#define STORE_ID_FILE "store.id"
#define STORE_ID_SIZE 64u
#define STORE_ID_MAGIC "FGSTORE\x01"
#define STORE_CATALOG_DIR "catalog"
#define STORE_CATALOG_VERSION 1u
#define KVF_MAGIC "FGKVFILE"
#define KVF_HEADER_SIZE 4096u   /* the first 4 KiB of a KV page file; slots follow */
#define KVF_HEADER_USED 64u
#define KVP_MAGIC 0x504b4746u   /* "FGKP" */
#define KVP_VERSION 1u
#define REC_VERSION 1u          /* every catalog value starts with this byte */
#define REC_META_VERSION 2u     /* a metadata value with its blob's checksum (SPEC "meta") */
#define REC_META_HEADER 24u     /* its bytes before the blob */
#define REC_META_FILE_VERSION 3u /* a metadata value kept in a file (metafile.c) */
#define REC_META_FILE_SIZE 40u
#define STORE_METAFILE_PREFIX "fg.store.metafile."
#define KV_KEY_SIZE 20u
#define FREE_KEY_SIZE 8u
#define FREE_DIRTY 1u           /* kv_free flag: the slot's header may still parse */
#define STORE_MAX_FILES 999999u

/* Store-wide counters, catalog "store"/"state" record. */
typedef struct store_state {
    uint32_t next_file_id; /* ids below this were handed out (file ids start at 1) */
    uint64_t next_batch;   /* batch ids start at 1 */
    uint64_t kv_gen;       /* last KV generation handed out */
} store_state;

typedef struct kv_slot_ref {
    uint32_t file_id, slot;
} kv_slot_ref;

typedef struct kv_file {
    uint32_t id;
    int fd;
    uint32_t n_slots;      /* committed slot count (catalog "files" record) */
} kv_file;

typedef struct reader_ent {
    uint32_t id;
    fg_fgt_reader *r;
} reader_ent;

struct fg_store {
    char *dir;
    int rdonly;
    int ready;                   /* open or create succeeded (close may then write) */
    int stale_readers;           /* mdb_reader_check's count at open */
    int no_lock;                 /* read-only without LMDB's lock file (MDB_NOLOCK) */
    int lock_fd;                 /* store.id, flock'd LOCK_EX by a writer; -1 for readers */
    uint8_t uuid[16];
    char uuid_hex[33];
    uint32_t page_size, pages_per_file;
    uint64_t max_file_bytes;
    uint64_t map_max;
    fg_store_io io;
    dev_t dev;
    ino_t ino;
    const char *cat_name;        /* catalog directory: STORE_CATALOG_DIR, or its reindex twin */
    MDB_env *env;
    MDB_dbi db_store, db_tensors, db_files, db_meta, db_kv, db_free;
    pthread_rwlock_t map_lock;   /* shared around every txn, exclusive to resize the map */
    pthread_mutex_t write_lock;  /* serializes writers in this process */
    pthread_mutex_t cache_lock;  /* readers[] and kvf[] */
    store_state st;              /* writer's view; committed by each write txn */
    reader_ent *readers;
    size_t n_readers;
    kv_file *kvf;
    size_t n_kvf;
    fg_store_batch *batch;       /* the open batch, if any */
    kv_slot_ref *pool;           /* KV slots reserved (dirty in kv_free) and not yet used */
    size_t pool_pos, pool_len;   /* pool[pool_pos..pool_len) are available */
    uint64_t pool_gen;           /* generation of pool[pool_pos]; one per pooled slot */
};

/* ---- catalog.c: LMDB environment and transactions ---- */
int cat_env_open(fg_store *s, int create, uint64_t map_initial, fg_err *err);
void cat_env_close(fg_store *s);
/* Map an LMDB return code to an fg_status with a message about what. */
int cat_fail(fg_store *s, fg_err *err, int mdb_rc, const char *what);
typedef int (*cat_txn_fn)(fg_store *s, MDB_txn *t, void *ctx, fg_err *err);
/* Run fn in a write txn and commit; on a full map grow it (up to map_max) and rerun fn.
 * fn must only touch the txn and ctx, so a rerun is safe. */
int cat_write(fg_store *s, cat_txn_fn fn, void *ctx, fg_err *err);
int cat_read_begin(fg_store *s, MDB_txn **t, fg_err *err);
void cat_read_end(fg_store *s, MDB_txn *t);
/* Call fn on every record of db, in key order, inside one read transaction; a non-zero return
 * stops the walk and is returned. fn must not write to the store. */
typedef int (*cat_walk_fn)(void *ctx, const MDB_val *k, const MDB_val *v, fg_err *err);
int cat_walk(fg_store *s, MDB_dbi db, cat_walk_fn fn, void *ctx, fg_err *err);
int cat_put(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, const void *v,
            size_t vn, fg_err *err);
int cat_del(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, fg_err *err);
/* 0 found, FG_ERR_NOT_FOUND, or another error. */
int cat_get(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, MDB_val *v,
            fg_err *err);
int cat_state_get(fg_store *s, MDB_txn *t, store_state *st, fg_err *err);
int cat_state_put(fg_store *s, MDB_txn *t, const store_state *st, fg_err *err);
int cat_version_put(fg_store *s, MDB_txn *t, fg_err *err);
int cat_version_check(fg_store *s, MDB_txn *t, fg_err *err);

/* ---- lmdb_check.c: a data.mdb checked with reads before LMDB maps it ---- */
/* Read n bytes at off into buf: 0, or -1 when they cannot all be read. */
typedef int (*lc_read_fn)(void *ctx, void *buf, size_t n, uint64_t off);
/* 0 when the LMDB data file of size bytes (read through rd) is whole and well formed enough for
 * LMDB to open and read it without touching anything outside the file; else -1 and a one-line
 * reason in why ("main tree: page 9 says it is page 0 (overwritten or zeroed)"). */
int cat_file_check(lc_read_fn rd, void *ctx, uint64_t size, char *why, size_t why_n);

/* A metadata value kept in a file (metafile.c). */
typedef struct metaref {
    uint32_t owner;  /* the batch's part-0 weight file id */
    uint32_t k;      /* index of the value in its batch */
    uint64_t len;    /* payload bytes */
    uint64_t xxh3;   /* of the payload */
} metaref;

/* ---- records.c: catalog value encodings ---- */
typedef struct file_rec {
    uint8_t kind;          /* 1 weights, 2 kv */
    uint64_t size;         /* weights: file size at commit; kv: committed slot count */
    uint64_t generation;   /* weights: .fgt superblock generation */
    uint64_t batch;        /* weights: batch that wrote it */
    uint32_t part, parts;  /* weights: position in its batch */
} file_rec;
enum { FILE_WEIGHTS = 1, FILE_KV = 2 };

void rec_file_key(uint32_t id, uint8_t out[4]);
size_t rec_file_encode(const file_rec *f, uint8_t *out); /* out >= 48 bytes */
int rec_file_decode(const MDB_val *v, file_rec *f);
/* Tensor record: heap buffer *out of *len bytes. */
int rec_tensor_encode(const fg_store_tensor *t, uint8_t **out, size_t *len);
/* Decode v into *t; chunks point into v (valid during the txn). name is set by the caller. */
int rec_tensor_decode(const MDB_val *v, fg_store_tensor *t);
void rec_kv_key(const fg_store_kv_key *k, uint8_t out[KV_KEY_SIZE]);
void rec_kv_key_decode(const uint8_t in[KV_KEY_SIZE], fg_store_kv_key *k);
size_t rec_kv_encode(const fg_store_kv_page *p, uint8_t *out); /* out >= 48 bytes */
int rec_kv_decode(const MDB_val *v, fg_store_kv_page *p);
void rec_free_key(uint32_t file_id, uint32_t slot, uint8_t out[FREE_KEY_SIZE]);
/* Meta record: header + blob; *out heap. */
int rec_meta_encode(uint64_t batch, const void *data, size_t len, uint8_t **out, size_t *n);
/* A value in a file: the 40-byte version 3 record. */
void rec_meta_file_encode(uint64_t batch, const metaref *r, uint8_t out[REC_META_FILE_SIZE]);
/* Inline values: *data points into v. A version 3 record: *data = NULL, *len its length, and
 * ref (may be NULL) receives the reference. */
int rec_meta_decode(const MDB_val *v, uint64_t *batch, const void **data, size_t *len);
int rec_meta_decode_ref(const MDB_val *v, uint64_t *batch, const void **data, size_t *len,
                        metaref *ref);
void rec_tensor_chunks(const MDB_val *v, const fg_store_tensor *t, fg_fgt_chunk_info *out);
/* Tensor digest: XXH3-64 over the chunk checksums (8 bytes LE each). */
uint64_t rec_tensor_digest(const fg_fgt_chunk_info *c, uint32_t n);

/* ---- metafile.c: a metadata value over FG_STORE_META_INLINE, as a file ---- */
#define METAREF_SIZE 24u /* part 0's fg.store.metafile.<key>: u32 k, u32 0, u64 len, u64 xxh3 */
void metafile_name(uint32_t owner, uint32_t k, char *buf, size_t n); /* "meta-000004-0.blob" */
uint32_t metafile_parse(const char *name); /* its owner file id, 0 when not a metafile name */
/* Write the file of r (owner, k, len set; xxh3 computed) and fdatasync it. */
int metafile_write(fg_store *s, const char *key, const void *data, metaref *r, fg_err *err);
void metafile_remove(const fg_store *s, const metaref *r);
/* Read and check the file of r: *data (may be NULL: check only) is malloc'd for the caller. */
int metafile_read(fg_store *s, const char *key, const metaref *r, void **data, fg_err *err);
void metaref_encode(const metaref *r, uint8_t out[METAREF_SIZE]);
int metaref_decode(const void *in, size_t n, uint32_t owner, metaref *r);

/* ---- import.c ---- */
#define STORE_META_PREFIX "fg.store.meta."
/* Read a weight file's store identity (uuid must be ours) into *f and *file_id. */
int weights_file_ident(fg_store *s, const fg_fgt_reader *r, const char *path, file_rec *f,
                       uint32_t *file_id, fg_err *err);
/* Put the catalog records of one published weight file: its files record, one tensor record
 * per tensor (FG_ERR_DUPLICATE when a name exists), and its metadata blobs. */
int weights_index_file(fg_store *s, MDB_txn *t, const fg_fgt_reader *r, uint32_t file_id,
                       fg_err *err);

/* ---- io.c ---- */
extern const fg_store_io store_posix_io;
/* Full write/read through the table; returns 0 or -errno (EIO for a zero-length result). */
int io_write_all(const fg_store *s, int fd, const void *p, size_t n, uint64_t off);
/* *got (may be NULL) receives the bytes read before a failure; -ENODATA at end of file. */
int io_read_all(const fg_store *s, int fd, void *p, size_t n, uint64_t off, size_t *got);
/* io_fail, with "short read: got N of M bytes" for -ENODATA. */
int io_read_fail(fg_err *err, int neg_errno, const char *path, const char *what, size_t got,
                 size_t want);
int io_sync(const fg_store *s, int fd);
int io_sync_dir(const char *dir);
/* FG_ERR_NO_SPACE for ENOSPC/EDQUOT/EFBIG, FG_ERR_IO otherwise, message "path: what: strerror". */
int io_fail(fg_err *err, int neg_errno, const char *path, const char *what);
void store_path(const fg_store *s, char *buf, size_t n, const char *name);
void store_file_name(uint32_t id, int kv, char *buf, size_t n);
/* Parse "weights-NNNNNN.fgt" / "kv-NNNNNN.pages": returns id > 0 and sets *kv, else 0. */
uint32_t store_parse_name(const char *name, int *kv);

/* ---- store.c ---- */
int store_id_read(const char *dir, fg_store *s, fg_err *err);
int store_reader_get(fg_store *s, uint32_t file_id, fg_fgt_reader **r, fg_err *err);
int store_reindex_handle(const char *dir, const fg_store_opts *o, fg_store **out, fg_err *err);

/* ---- kv.c ---- */
void kvp_header_encode(const fg_store_kv_page *p, uint8_t out[FG_STORE_KV_HEADER_SIZE]);
/* Decode and check a header (magic, version, checksum, reserved); FG_ERR_STORE_STALE on failure. */
int kvp_header_decode(const uint8_t in[FG_STORE_KV_HEADER_SIZE], fg_store_kv_page *p);
void kvf_header_encode(const fg_store *s, uint32_t file_id, uint8_t out[KVF_HEADER_USED]);
int kvf_header_check(const fg_store *s, const uint8_t in[KVF_HEADER_USED], uint32_t file_id,
                     const char *path, fg_err *err);
uint64_t kv_slot_offset(const fg_store *s, uint32_t slot);
int kv_file_fd(fg_store *s, uint32_t file_id, int *fd, fg_err *err);
/* Writable open and close: drop the slot pool, wipe the headers of dirty free slots, clear
 * their flag. */
int kv_recover(fg_store *s, fg_err *err);
/* Read and check the page catalog record p names (header, key, generation, checksums). */
int kv_read_page(fg_store *s, const fg_store_kv_page *p, void *buf, size_t cap, fg_err *err);
void kv_files_close(fg_store *s);

#endif
