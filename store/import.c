/* import.c - batches: tensors and metadata written to new weight files, then made visible by
 * one catalog commit.
 *
 * A batch never modifies an existing file. It streams tensors into new .fgt files through
 * format/'s writer (a new file, "part", starts at a tensor boundary once the current one passes
 * max_file_bytes). At commit:
 *   1. each part gets its identity metadata (fg.store.uuid, file_id, batch, part, parts; the
 *      batch's metadata blobs go into part 0 as fg.store.meta.<key>, or, over
 *      FG_STORE_META_INLINE, are written and fdatasynced as files of their own first, part 0
 *      holding fg.store.metafile.<key>, see metafile.c) and is published by
 *      fg_fgt_writer_finish: data fdatasync, index, superblock, fdatasync, directory fsync;
 *   2. each part is reopened with the validating reader and its catalog records are built
 *      from what the file says (the same code reindex runs, so both give the same records);
 *   3. one LMDB write transaction puts every record and the new counters, and commits.
 * The commit point is step 3. A crash before it leaves files the catalog does not list; the
 * next writable open removes them (store.c), and reindex ignores a batch unless all its parts
 * are present. Any failure inside a batch is sticky: later calls refuse, commit aborts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "store_int.h"

typedef struct bpart {
    uint32_t file_id;
    fg_fgt_writer *w;
    uint64_t bytes;      /* estimate of the file size so far */
    uint32_t n_tensors;
} bpart;

typedef struct bmeta {
    char *key;
    void *data;
    size_t len;
    int in_file;    /* its metafile was written (removed again if the batch fails) */
} bmeta;

struct fg_store_batch {
    fg_store *s;
    uint64_t id;
    bpart *parts;
    size_t n_parts;
    bmeta *meta;
    size_t n_meta;
    char **set;          /* open-addressing set of the batch's tensor names */
    size_t set_cap, set_n;
    int in_tensor;
    int failed;          /* sticky: an earlier call failed */
};

/* ---- name set ---- */

static char **set_slot(fg_store_batch *b, const char *name)
{
    size_t mask = b->set_cap - 1, i = (size_t)XXH3_64bits(name, strlen(name)) & mask;
    while (b->set[i] && strcmp(b->set[i], name))
        i = (i + 1) & mask;
    return &b->set[i];
}

static int set_add(fg_store_batch *b, const char *name)
{
    if ((b->set_n + 1) * 2 > b->set_cap) {
        size_t cap = b->set_cap ? b->set_cap * 2 : 64;
        char **old = b->set;
        size_t old_cap = b->set_cap;
        if (!(b->set = calloc(cap, sizeof *b->set))) {
            b->set = old;
            return FG_ERR_NOMEM;
        }
        b->set_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i])
                *set_slot(b, old[i]) = old[i];
        free(old);
    }
    char **slot = set_slot(b, name);
    if (*slot)
        return FG_ERR_DUPLICATE;
    if (!(*slot = strdup(name)))
        return FG_ERR_NOMEM;
    b->set_n++;
    return FG_OK;
}

/* ---- batch life cycle ---- */

int fg_store_batch_begin(fg_store *s, fg_store_batch **out, fg_err *err)
{
    if (s->rdonly)
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: store opened read-only", s->dir);
    pthread_mutex_lock(&s->write_lock);
    int busy = s->batch != NULL;
    fg_store_batch *b = busy ? NULL : calloc(1, sizeof *b);
    if (b) {
        b->s = s;
        b->id = s->st.next_batch;
        s->batch = b;
    }
    pthread_mutex_unlock(&s->write_lock);
    if (busy)
        return fg_err_set(err, FG_ERR_STATE, "%s: a batch is already open", s->dir);
    if (!b)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    *out = b;
    return FG_OK;
}

static void batch_free(fg_store_batch *b, int remove_files)
{
    fg_store *s = b->s;
    for (size_t i = 0; i < b->n_parts; i++) {
        if (b->parts[i].w) {
            fg_fgt_writer_abort(b->parts[i].w); /* unlinks the new file */
        } else if (remove_files) {
            char path[4200];
            fg_store_file_path(s, b->parts[i].file_id, 0, path, sizeof path);
            unlink(path);
        }
    }
    for (size_t i = 0; i < b->n_meta; i++) {
        if (remove_files && b->meta[i].in_file) {
            metaref r = {b->parts[0].file_id, (uint32_t)i, 0, 0};
            metafile_remove(s, &r);
        }
        free(b->meta[i].key);
        free(b->meta[i].data);
    }
    for (size_t i = 0; i < b->set_cap; i++)
        free(b->set[i]);
    free(b->set);
    free(b->meta);
    free(b->parts);
    pthread_mutex_lock(&s->write_lock);
    s->batch = NULL;
    pthread_mutex_unlock(&s->write_lock);
    free(b);
}

void fg_store_batch_abort(fg_store_batch *b)
{
    if (b)
        batch_free(b, 1);
}

/* Sticky failure. The .fgt writer reports only ENOSPC as no-space; EFBIG and EDQUOT are the
 * same condition for a store (no room for the file), so they are reported alike. */
static int fail(fg_store_batch *b, int rc, fg_err *err)
{
    b->failed = 1;
    if (rc == FG_ERR_IO && err && (err->sys_errno == EFBIG || err->sys_errno == EDQUOT))
        rc = err->code = FG_ERR_NO_SPACE;
    return rc;
}

static int check_usable(fg_store_batch *b, fg_err *err)
{
    if (b->failed)
        return fg_err_set(err, FG_ERR_STATE, "%s: batch %llu failed earlier; abort it",
                          b->s->dir, (unsigned long long)b->id);
    return FG_OK;
}

/* Start a new part (weight file). */
static int part_open(fg_store_batch *b, fg_err *err)
{
    fg_store *s = b->s;
    if (s->st.next_file_id > STORE_MAX_FILES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u files", s->dir, STORE_MAX_FILES);
    bpart *p = realloc(b->parts, (b->n_parts + 1) * sizeof *p);
    if (!p)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    b->parts = p;
    bpart *np = &p[b->n_parts];
    memset(np, 0, sizeof *np);
    pthread_mutex_lock(&s->write_lock);
    np->file_id = s->st.next_file_id++;
    pthread_mutex_unlock(&s->write_lock);
    char path[4200];
    fg_store_file_path(s, np->file_id, 0, path, sizeof path);
    int rc = fg_fgt_writer_create(path, NULL, &np->w, err);
    if (rc)
        return rc;
    np->bytes = FG_FGT_HEADER_SIZE;
    b->n_parts++;
    return FG_OK;
}

static int name_in_catalog(fg_store *s, const char *name, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_val v;
    rc = cat_get(s, t, s->db_tensors, name, strlen(name), &v, err);
    cat_read_end(s, t);
    if (rc == FG_OK)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor '%s' is already in the store",
                          s->dir, name);
    return rc == FG_ERR_NOT_FOUND ? FG_OK : rc;
}

int fg_store_batch_begin_tensor(fg_store_batch *b, const fg_fgt_tensor_desc *d, fg_err *err)
{
    int rc = check_usable(b, err);
    if (rc || (rc = name_in_catalog(b->s, d->name, err)))
        return rc;
    if (b->set_cap && *set_slot(b, d->name))
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor '%s' added twice in one batch",
                          b->s->dir, d->name);
    bpart *cur = b->n_parts ? &b->parts[b->n_parts - 1] : NULL;
    if (!cur || (cur->n_tensors && cur->bytes >= b->s->max_file_bytes)) {
        if ((rc = part_open(b, err)))
            return fail(b, rc, err);
        cur = &b->parts[b->n_parts - 1];
    }
    /* A refused descriptor leaves the writer as it was, so it is not a sticky failure. */
    if ((rc = fg_fgt_writer_begin_tensor(cur->w, d, err)))
        return rc;
    if ((rc = set_add(b, d->name)))
        return fail(b, fg_err_set(err, rc, "%s: out of memory", b->s->dir), err);
    cur->n_tensors++;
    b->in_tensor = 1;
    return FG_OK;
}

int fg_store_batch_add_chunk(fg_store_batch *b, uint64_t n_rows, const void *data, size_t len,
                             fg_err *err)
{
    int rc = check_usable(b, err);
    if (rc)
        return rc;
    if (!b->in_tensor)
        return fg_err_set(err, FG_ERR_STATE, "%s: add_chunk outside a tensor", b->s->dir);
    bpart *cur = &b->parts[b->n_parts - 1];
    rc = fg_fgt_writer_add_chunk(cur->w, n_rows, data, len, err);
    if (rc)
        return fail(b, rc, err);
    cur->bytes += (len + 4095) & ~(uint64_t)4095;
    return FG_OK;
}

int fg_store_batch_end_tensor(fg_store_batch *b, fg_err *err)
{
    int rc = check_usable(b, err);
    if (rc)
        return rc;
    if (!b->in_tensor)
        return fg_err_set(err, FG_ERR_STATE, "%s: end_tensor without begin_tensor", b->s->dir);
    rc = fg_fgt_writer_end_tensor(b->parts[b->n_parts - 1].w, err);
    if (rc)
        return fail(b, rc, err);
    b->in_tensor = 0;
    return FG_OK;
}

int fg_store_batch_meta(fg_store_batch *b, const char *key, const void *data, size_t len,
                        fg_err *err)
{
    int rc = check_usable(b, err);
    if (rc)
        return rc;
    size_t kn = strlen(key);
    if (!kn || kn + strlen(STORE_META_PREFIX) > FG_FGT_MAX_NAME)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: metadata key '%.64s' is empty or longer than "
                          "%zu bytes", b->s->dir, key, FG_FGT_MAX_NAME - strlen(STORE_META_PREFIX));
    if (len > FG_STORE_META_MAX)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s' is %zu bytes (limit %u)",
                          b->s->dir, key, len, FG_STORE_META_MAX);
    if (len > FG_STORE_META_INLINE && kn + strlen(STORE_METAFILE_PREFIX) > FG_FGT_MAX_NAME)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: metadata key '%.64s' of a value over %u "
                          "bytes is longer than %zu bytes", b->s->dir, key, FG_STORE_META_INLINE,
                          FG_FGT_MAX_NAME - strlen(STORE_METAFILE_PREFIX));
    for (size_t i = 0; i < b->n_meta; i++)
        if (!strcmp(b->meta[i].key, key))
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: metadata '%s' set twice in one batch",
                              b->s->dir, key);
    bmeta *m = realloc(b->meta, (b->n_meta + 1) * sizeof *m);
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", b->s->dir);
    b->meta = m;
    m = &m[b->n_meta];
    m->key = strdup(key);
    m->data = malloc(len ? len : 1);
    if (!m->key || !m->data) {
        free(m->key);
        free(m->data);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", b->s->dir);
    }
    if (len)
        memcpy(m->data, data, len);
    m->len = len;
    m->in_file = 0;
    b->n_meta++;
    return FG_OK;
}

/* ---- commit ---- */

/* Metadata value m into part 0: inline, or its own file (written and fdatasynced before part
 * 0 is published, whose directory fsync then makes its name durable) and a reference. */
static int part_meta(fg_store_batch *b, size_t m, fg_err *err)
{
    bmeta *v = &b->meta[m];
    char key[FG_FGT_MAX_NAME + 1];
    if (v->len <= FG_STORE_META_INLINE) {
        snprintf(key, sizeof key, STORE_META_PREFIX "%s", v->key);
        return fg_fgt_writer_meta_bytes(b->parts[0].w, key, v->data, v->len, err);
    }
    metaref r = {b->parts[0].file_id, (uint32_t)m, v->len, 0};
    int rc = metafile_write(b->s, v->key, v->data, &r, err);
    if (rc)
        return rc;
    v->in_file = 1;
    uint8_t ref[METAREF_SIZE];
    metaref_encode(&r, ref);
    snprintf(key, sizeof key, STORE_METAFILE_PREFIX "%s", v->key);
    return fg_fgt_writer_meta_bytes(b->parts[0].w, key, ref, sizeof ref, err);
}

/* Step 1 for one part: identity metadata, then publish. */
static int part_publish(fg_store_batch *b, size_t i, fg_err *err)
{
    bpart *p = &b->parts[i];
    fg_fgt_writer *w = p->w;
    int rc = fg_fgt_writer_meta_str(w, "fg.store.uuid", b->s->uuid_hex, err);
    if (!rc)
        rc = fg_fgt_writer_meta_u64(w, "fg.store.file_id", p->file_id, err);
    if (!rc)
        rc = fg_fgt_writer_meta_u64(w, "fg.store.batch", b->id, err);
    if (!rc)
        rc = fg_fgt_writer_meta_u64(w, "fg.store.part", i, err);
    if (!rc)
        rc = fg_fgt_writer_meta_u64(w, "fg.store.parts", b->n_parts, err);
    for (size_t m = 0; i == 0 && !rc && m < b->n_meta; m++)
        rc = part_meta(b, m, err);
    if (rc)
        return rc;
    p->w = NULL; /* finish frees the writer whether or not it succeeds */
    rc = fg_fgt_writer_finish(w, err);
    return rc;
}

typedef struct commit_ctx {
    fg_store_batch *b;
    fg_fgt_reader **readers;
} commit_ctx;

static int commit_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    commit_ctx *c = vctx;
    store_state st;
    int rc = cat_state_get(s, t, &st, err);
    for (size_t i = 0; i < c->b->n_parts && !rc; i++)
        rc = weights_index_file(s, t, c->readers[i], c->b->parts[i].file_id, err);
    if (rc)
        return rc;
    uint32_t last = c->b->parts[c->b->n_parts - 1].file_id;
    st.next_batch = c->b->id + 1;
    if (st.next_file_id <= last)
        st.next_file_id = last + 1;
    return cat_state_put(s, t, &st, err);
}

static int commit_parts(fg_store_batch *b, fg_err *err)
{
    fg_store *s = b->s;
    if (b->n_parts == 0) {
        int rc = part_open(b, err); /* a metadata-only batch still needs a file */
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < b->n_parts; i++) {
        int rc = part_publish(b, i, err);
        if (rc)
            return rc;
    }
    commit_ctx c = {b, calloc(b->n_parts, sizeof *c.readers)};
    if (!c.readers)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    int rc = FG_OK;
    for (size_t i = 0; i < b->n_parts && !rc; i++) {
        char path[4200];
        fg_store_file_path(s, b->parts[i].file_id, 0, path, sizeof path);
        rc = fg_fgt_open(path, 0, &c.readers[i], err);
    }
    if (!rc)
        rc = cat_write(s, commit_txn, &c, err);
    if (!rc) {
        pthread_mutex_lock(&s->write_lock);
        s->st.next_batch = b->id + 1;
        pthread_mutex_unlock(&s->write_lock);
    }
    for (size_t i = 0; i < b->n_parts; i++)
        fg_fgt_close(c.readers[i]);
    free(c.readers);
    return rc;
}

int fg_store_batch_commit(fg_store_batch *b, fg_err *err)
{
    if (!b)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "batch_commit: NULL batch");
    int rc = check_usable(b, err);
    if (!rc && b->in_tensor)
        rc = fg_err_set(err, FG_ERR_STATE, "%s: commit inside a tensor", b->s->dir);
    if (!rc)
        rc = commit_parts(b, err);
    batch_free(b, rc != FG_OK);
    return rc;
}

/* ---- records of one published weight file (batch commit and reindex) ---- */

static int meta_u64(const fg_fgt_reader *r, const char *key, uint64_t *v)
{
    fg_meta_info m;
    if (fg_fgt_meta_find(r, key, &m) || m.type != FG_META_U64)
        return -1;
    *v = m.u64;
    return 0;
}

int weights_file_ident(fg_store *s, const fg_fgt_reader *r, const char *path, file_rec *f,
                       uint32_t *file_id, fg_err *err)
{
    fg_meta_info m;
    if (fg_fgt_meta_find(r, "fg.store.uuid", &m) || m.type != FG_META_STRING)
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s: not a weight file of a store (no "
                          "fg.store.uuid): remove it or move it out of %s", path, s->dir);
    if (strcmp(m.data, s->uuid_hex))
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s: file belongs to another store (its "
                          "fg.store.uuid is %.32s, this store is %s): remove it or move it out "
                          "of %s", path, (const char *)m.data, s->uuid_hex, s->dir);
    uint64_t id, batch, part, parts;
    if (meta_u64(r, "fg.store.file_id", &id) || meta_u64(r, "fg.store.batch", &batch) ||
        meta_u64(r, "fg.store.part", &part) || meta_u64(r, "fg.store.parts", &parts) ||
        !id || id > STORE_MAX_FILES || !batch || part >= parts || parts > STORE_MAX_FILES)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: store identity metadata missing or out of "
                          "range", path);
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    memset(f, 0, sizeof *f);
    f->kind = FILE_WEIGHTS;
    f->size = fi.file_size;
    f->generation = fi.generation;
    f->batch = batch;
    f->part = (uint32_t)part;
    f->parts = (uint32_t)parts;
    *file_id = (uint32_t)id;
    return FG_OK;
}

static int put_tensor(fg_store *s, MDB_txn *t, const fg_fgt_reader *r, uint32_t file_id,
                      uint32_t i, uint64_t batch, fg_err *err)
{
    fg_fgt_tensor_info ti;
    fg_fgt_tensor(r, i, &ti);
    fg_store_tensor st = {ti.name, file_id, i, batch, ti.codec, ti.n_dims, {0}, ti.payload_bytes,
                          0, ti.n_chunks, NULL};
    memcpy(st.dims, ti.dims, sizeof st.dims);
    fg_fgt_chunk_info *ch = malloc((ti.n_chunks ? ti.n_chunks : 1) * sizeof *ch);
    if (!ch)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    for (uint32_t c = 0; c < ti.n_chunks; c++)
        fg_fgt_chunk(r, i, c, &ch[c]);
    st.chunks = ch;
    st.digest = rec_tensor_digest(ch, ti.n_chunks);
    uint8_t *rec;
    size_t len;
    int rc = rec_tensor_encode(&st, &rec, &len);
    free(ch);
    if (rc)
        return fg_err_set(err, rc, "%s: out of memory", s->dir);
    MDB_val k = {strlen(ti.name), (void *)ti.name}, v = {len, rec};
    int mrc = mdb_put(t, s->db_tensors, &k, &v, MDB_NOOVERWRITE);
    free(rec);
    if (mrc == MDB_KEYEXIST)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor '%s' of weights-%06u.fgt is already "
                          "in the store", s->dir, ti.name, file_id);
    return mrc ? cat_fail(s, err, mrc, "writing a tensor record") : FG_OK;
}

/* Metadata blob of batch `batch`: replaces a value from an older batch, never a newer one.
 * A fg.store.metafile.<key> reference (owner: this file) becomes a version 3 record. */
static int put_meta(fg_store *s, MDB_txn *t, const fg_meta_info *m, uint64_t batch,
                    uint32_t owner, fg_err *err)
{
    int in_file = !strncmp(m->key, STORE_METAFILE_PREFIX, strlen(STORE_METAFILE_PREFIX));
    const char *key = m->key + strlen(in_file ? STORE_METAFILE_PREFIX : STORE_META_PREFIX);
    metaref ref;
    if (in_file && metaref_decode(m->data, m->len, owner, &ref))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: weights-%06u.fgt: metadata '%s': bad file "
                          "reference", s->dir, owner, key);
    MDB_val old;
    uint64_t old_batch;
    const void *od;
    size_t ol;
    int rc = cat_get(s, t, s->db_meta, key, strlen(key), &old, err);
    if (rc == FG_OK && rec_meta_decode(&old, &old_batch, &od, &ol) == FG_OK && old_batch > batch)
        return FG_OK;
    if (rc && rc != FG_ERR_NOT_FOUND)
        return rc;
    if (in_file) {
        uint8_t fr[REC_META_FILE_SIZE];
        rec_meta_file_encode(batch, &ref, fr);
        return cat_put(s, t, s->db_meta, key, strlen(key), fr, sizeof fr, err);
    }
    uint8_t *rec;
    size_t n;
    if (rec_meta_encode(batch, m->data, m->len, &rec, &n))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    rc = cat_put(s, t, s->db_meta, key, strlen(key), rec, n, err);
    free(rec);
    return rc;
}

int weights_index_file(fg_store *s, MDB_txn *t, const fg_fgt_reader *r, uint32_t file_id,
                       fg_err *err)
{
    char path[4200];
    fg_store_file_path(s, file_id, 0, path, sizeof path);
    file_rec f;
    uint32_t id;
    int rc = weights_file_ident(s, r, path, &f, &id, err);
    if (!rc && id != file_id)
        rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: says it is file %u", path, id);
    uint8_t k[4], v[48];
    rec_file_key(file_id, k);
    if (!rc)
        rc = cat_put(s, t, s->db_files, k, 4, v, rec_file_encode(&f, v), err);
    for (uint32_t i = 0; !rc && i < fg_fgt_tensor_count(r); i++)
        rc = put_tensor(s, t, r, file_id, i, f.batch, err);
    size_t plen = strlen(STORE_META_PREFIX);
    for (uint32_t i = 0; !rc && i < fg_fgt_meta_count(r); i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        if ((!strncmp(m.key, STORE_META_PREFIX, plen) ||
             !strncmp(m.key, STORE_METAFILE_PREFIX, strlen(STORE_METAFILE_PREFIX))) &&
            m.type == FG_META_BYTES)
            rc = put_meta(s, t, &m, f.batch, file_id, err);
    }
    return rc;
}
