/* lookup.c - read side of the catalog: tensors by name, iteration, chunk data, metadata blobs
 * and store-wide figures.
 *
 * A tensor looked up by name is checked against its weight file's index before it is handed
 * out (tensor_check_file): the catalog is derived data, and a caller such as the engine reads
 * chunks at the catalog's offsets through its own I/O, so a foreign or swapped file, or a
 * moved offset, must be caught here, naming the tensor and chunk. Iteration hands out catalog
 * records unchecked (fg-inspect lists a damaged store; verify checks everything).
 *
 * Every call runs in its own short read transaction (MDB_NOTLS), so lookups from many threads
 * proceed at once and each sees one committed snapshot. Records are copied out of the map
 * before the transaction ends: nothing handed to the caller points into LMDB's pages.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static int name_key(fg_store *s, const char *name, size_t *n, fg_err *err)
{
    *n = strlen(name);
    if (*n == 0 || *n > FG_FGT_MAX_NAME)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor name '%.64s' is empty or longer "
                          "than %u bytes", s->dir, name, FG_FGT_MAX_NAME);
    return FG_OK;
}

/* One allocation: struct, chunk table, name. */
static int tensor_copy(const MDB_val *k, const MDB_val *v, fg_store_tensor **out)
{
    fg_store_tensor t;
    if (rec_tensor_decode(v, &t))
        return FG_ERR_CORRUPT;
    size_t chunk_bytes = (size_t)t.n_chunks * sizeof(fg_fgt_chunk_info);
    fg_store_tensor *c = malloc(sizeof *c + chunk_bytes + k->mv_size + 1);
    if (!c)
        return FG_ERR_NOMEM;
    *c = t;
    fg_fgt_chunk_info *chunks = (fg_fgt_chunk_info *)(c + 1);
    rec_tensor_chunks(v, &t, chunks);
    char *name = (char *)chunks + chunk_bytes;
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = '\0';
    c->chunks = chunks;
    c->name = name;
    *out = c;
    return FG_OK;
}

/* The record against its weight file: the file is this store's and names itself as the record
 * does (open_reader), it was written by the record's batch, and its index holds this tensor at
 * the record's position with the same chunk table. Catches a weight file copied in from another
 * store (even with the same layout) and a catalog whose chunk offsets or checksums moved,
 * naming the tensor and chunk before a byte of it is read. Costs no I/O beyond the index. */
static int tensor_check_file(fg_store *s, const fg_store_tensor *t, fg_err *err)
{
    fg_fgt_reader *r;
    int rc = store_reader_get(s, t->file_id, &r, err);
    if (rc)
        return rc;
    char path[4200];
    fg_store_file_path(s, t->file_id, 0, path, sizeof path);
    uint64_t batch = 0;
    fg_meta_info m;
    if (fg_fgt_meta_find(r, "fg.store.batch", &m) == FG_OK && m.type == FG_META_U64)
        batch = m.u64;
    fg_fgt_tensor_info ti;
    if (batch != t->batch || t->file_index >= fg_fgt_tensor_count(r) ||
        fg_fgt_tensor(r, t->file_index, &ti) || strcmp(ti.name, t->name) ||
        ti.n_chunks != t->n_chunks)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: tensor '%s': the catalog and %s "
                          "disagree (file of batch %llu, catalog says batch %llu): run "
                          "fg-inspect --verify %s; fg-inspect --reindex %s rebuilds the catalog",
                          s->dir, t->name, path, (unsigned long long)batch,
                          (unsigned long long)t->batch, s->dir, s->dir);
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        fg_fgt_chunk_info ci;
        fg_fgt_chunk(r, t->file_index, c, &ci);
        if (memcmp(&ci, &t->chunks[c], sizeof ci))
            return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: tensor '%s' chunk %u: the catalog "
                              "says offset %llu, %llu bytes, xxh3 %016llx; %s says offset %llu, "
                              "%llu bytes, xxh3 %016llx: run fg-inspect --reindex %s", s->dir,
                              t->name, c, (unsigned long long)t->chunks[c].offset,
                              (unsigned long long)t->chunks[c].length,
                              (unsigned long long)t->chunks[c].xxh3, path,
                              (unsigned long long)ci.offset, (unsigned long long)ci.length,
                              (unsigned long long)ci.xxh3, s->dir);
    }
    return FG_OK;
}

int fg_store_tensor_get(fg_store *s, const char *name, fg_store_tensor **out, fg_err *err)
{
    size_t n;
    int rc = name_key(s, name, &n, err);
    MDB_txn *t;
    if (rc || (rc = cat_read_begin(s, &t, err)))
        return rc;
    MDB_val k = {n, (void *)name}, v;
    rc = cat_get(s, t, s->db_tensors, name, n, &v, err);
    if (rc == FG_ERR_NOT_FOUND)
        fg_err_set(err, rc, "%s: no tensor '%s' in the store", s->dir, name);
    else if (rc == FG_OK && (rc = tensor_copy(&k, &v, out)))
        fg_err_set(err, rc == FG_ERR_NOMEM ? rc : FG_ERR_STORE_CATALOG,
                   "%s: tensor '%s': %s", s->dir, name,
                   rc == FG_ERR_NOMEM ? "out of memory" : "damaged catalog record (run reindex)");
    if (rc == FG_ERR_CORRUPT)
        rc = FG_ERR_STORE_CATALOG;
    cat_read_end(s, t);
    if (rc == FG_OK && (rc = tensor_check_file(s, *out, err))) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

void fg_store_tensor_free(fg_store_tensor *t)
{
    free(t);
}

typedef struct tensor_walk {
    fg_store *s;
    int (*cb)(void *ctx, const fg_store_tensor *t);
    void *ctx;
} tensor_walk;

static int tensor_step(void *ctx, const MDB_val *k, const MDB_val *v, fg_err *err)
{
    tensor_walk *w = ctx;
    fg_store_tensor *copy;
    int rc = tensor_copy(k, v, &copy);
    if (rc)
        return fg_err_set(err, rc == FG_ERR_NOMEM ? rc : FG_ERR_STORE_CATALOG,
                          "%s: tensor '%.*s': damaged record or out of memory", w->s->dir,
                          (int)(k->mv_size > 200 ? 200 : k->mv_size), (const char *)k->mv_data);
    rc = w->cb(w->ctx, copy);
    free(copy);
    return rc;
}

int fg_store_tensor_iter(fg_store *s, int (*cb)(void *ctx, const fg_store_tensor *t), void *ctx,
                         fg_err *err)
{
    tensor_walk w = {s, cb, ctx};
    return cat_walk(s, s->db_tensors, tensor_step, &w, err);
}

int fg_store_chunk_data(fg_store *s, const fg_store_tensor *t, uint32_t c, int verify,
                        const void **data, fg_err *err)
{
    if (c >= t->n_chunks)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: tensor '%s': chunk %u of %u", s->dir,
                          t->name, c, t->n_chunks);
    fg_fgt_reader *r;
    int rc = store_reader_get(s, t->file_id, &r, err);
    if (rc)
        return rc;
    fg_fgt_chunk_info ci;
    if (t->file_index >= fg_fgt_tensor_count(r) || fg_fgt_chunk(r, t->file_index, c, &ci) ||
        ci.offset != t->chunks[c].offset || ci.xxh3 != t->chunks[c].xxh3)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: tensor '%s' chunk %u: catalog and "
                          "weights-%06u.fgt disagree (run verify/reindex)", s->dir, t->name, c,
                          t->file_id);
    return fg_fgt_chunk_data(r, t->file_index, c, verify, data, err);
}

int fg_store_meta_get(fg_store *s, const char *key, void **data, size_t *len, fg_err *err)
{
    size_t n = strlen(key);
    if (!n || n > FG_FGT_MAX_NAME)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: metadata key '%.64s' empty or too long",
                          s->dir, key);
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_val v;
    rc = cat_get(s, t, s->db_meta, key, n, &v, err);
    uint64_t batch;
    const void *p;
    metaref ref;
    if (rc == FG_ERR_NOT_FOUND)
        fg_err_set(err, rc, "%s: no metadata '%s' in the store", s->dir, key);
    else if (rc == FG_OK && (rc = rec_meta_decode_ref(&v, &batch, &p, len, &ref)))
        rc = fg_err_set(err, rc == FG_ERR_CHECKSUM ? FG_ERR_CHECKSUM : FG_ERR_STORE_CATALOG,
                        "%s: metadata '%s': %s in the catalog: rebuild it from the store's "
                        "files with fg-inspect --reindex %s", s->dir, key,
                        rc == FG_ERR_CHECKSUM ? "checksum mismatch" : "damaged record", s->dir);
    else if (rc == FG_OK && !p) /* a value kept in a file of its own */
        rc = metafile_read(s, key, &ref, data, err);
    else if (rc == FG_OK && !(*data = malloc(*len ? *len : 1)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    else if (rc == FG_OK && *len)
        memcpy(*data, p, *len);
    cat_read_end(s, t);
    return rc;
}

typedef struct meta_walk {
    int (*cb)(void *ctx, const char *key, size_t len);
    void *ctx;
} meta_walk;

static int meta_step(void *ctx, const MDB_val *k, const MDB_val *v, fg_err *err)
{
    (void)err;
    meta_walk *w = ctx;
    char key[FG_FGT_MAX_NAME + 1];
    size_t kn = k->mv_size > FG_FGT_MAX_NAME ? FG_FGT_MAX_NAME : k->mv_size;
    memcpy(key, k->mv_data, kn);
    key[kn] = '\0';
    uint64_t batch;
    const void *d;
    size_t len;
    int rc = rec_meta_decode(v, &batch, &d, &len); /* a damaged value lists as its bytes */
    return w->cb(w->ctx, key, rc == FG_OK || rc == FG_ERR_CHECKSUM ? len : v->mv_size);
}

int fg_store_meta_iter(fg_store *s, int (*cb)(void *ctx, const char *key, size_t len), void *ctx,
                       fg_err *err)
{
    meta_walk w = {cb, ctx};
    return cat_walk(s, s->db_meta, meta_step, &w, err);
}

typedef struct file_walk {
    fg_store *s;
    int (*cb)(void *ctx, const fg_store_file *f);
    void *ctx;
} file_walk;

static int file_step(void *ctx, const MDB_val *k, const MDB_val *v, fg_err *err)
{
    file_walk *w = ctx;
    file_rec f;
    if (k->mv_size != 4 || rec_file_decode(v, &f))
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged files record", w->s->dir);
    const uint8_t *kb = k->mv_data;
    fg_store_file o = {(uint32_t)kb[0] << 24 | (uint32_t)kb[1] << 16 | (uint32_t)kb[2] << 8 | kb[3],
                       f.kind == FILE_KV, f.size, f.generation, f.batch, f.part, f.parts, 0};
    if (o.kv) {
        o.slots = (uint32_t)f.size;
        o.size = kv_slot_offset(w->s, o.slots);
    }
    return w->cb(w->ctx, &o);
}

int fg_store_file_iter(fg_store *s, int (*cb)(void *ctx, const fg_store_file *f), void *ctx,
                       fg_err *err)
{
    file_walk w = {s, cb, ctx};
    return cat_walk(s, s->db_files, file_step, &w, err);
}

/* ---- figures ---- */

static uint64_t db_entries(MDB_txn *t, MDB_dbi db)
{
    MDB_stat st;
    return mdb_stat(t, db, &st) ? 0 : st.ms_entries;
}

static void count_files(fg_store *s, MDB_txn *t, fg_store_info *o)
{
    MDB_cursor *c;
    MDB_val k, v;
    mdb_cursor_open(t, s->db_files, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m; m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        file_rec f;
        if (rec_file_decode(&v, &f))
            continue;
        if (f.kind == FILE_KV) {
            o->n_kv_files++;
            o->kv_slots += f.size;
        } else {
            o->n_weight_files++;
            o->weight_bytes += f.size;
        }
    }
    mdb_cursor_close(c);
}

static void count_free(fg_store *s, MDB_txn *t, fg_store_info *o)
{
    MDB_cursor *c;
    MDB_val k, v;
    mdb_cursor_open(t, s->db_free, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m; m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        o->kv_free++;
        if (v.mv_size >= 2 && (((const uint8_t *)v.mv_data)[1] & FREE_DIRTY))
            o->kv_dirty++;
    }
    mdb_cursor_close(c);
}

static int sum_chunks(void *ctx, const fg_store_tensor *t)
{
    *(uint64_t *)ctx += t->n_chunks;
    return 0;
}

int fg_store_info_get(fg_store *s, fg_store_info *o, fg_err *err)
{
    memset(o, 0, sizeof *o);
    memcpy(o->uuid, s->uuid_hex, 33);
    o->kv_page_size = s->page_size;
    o->kv_pages_per_file = s->pages_per_file;
    o->max_file_bytes = s->max_file_bytes;
    o->read_only = s->rdonly;
    o->no_lock = s->no_lock;
    o->stale_readers = (uint32_t)s->stale_readers;
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_envinfo ei;
    MDB_stat es;
    mdb_env_info(s->env, &ei);
    mdb_env_stat(s->env, &es);
    o->map_size = ei.me_mapsize;
    o->map_used = (uint64_t)(ei.me_last_pgno + 1) * es.ms_psize;
    o->n_tensors = db_entries(t, s->db_tensors);
    o->n_meta = db_entries(t, s->db_meta);
    o->kv_used = db_entries(t, s->db_kv);
    store_state st;
    if (cat_state_get(s, t, &st, NULL) == FG_OK)
        o->kv_generation = st.kv_gen;
    count_files(s, t, o);
    count_free(s, t, o);
    cat_read_end(s, t);
    return fg_store_tensor_iter(s, sum_chunks, &o->n_chunks, err);
}
