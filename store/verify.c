/* verify.c - check every checksum in every file the catalog lists, and that catalog and files
 * agree (SPEC "Verify").
 *
 * Runs in one read snapshot, so it works on a read-only handle while a writer commits. Checks:
 *   V1 every listed file exists and carries this store's id;
 *   V2 weight files: every chunk checksum (fg_fgt_verify), the file's identity metadata and
 *      generation match the files record, and each tensor of the file has a catalog record that
 *      names this file and index and repeats its codec, shape and chunk table exactly, and the
 *      catalog has no tensor record beyond those;
 *   V3 metadata: each blob of a part-0 file whose batch the catalog record names is identical
 *      (a reference to a metadata file: the same reference); every metadata file the catalog
 *      names has an intact header and its payload's XXH3 (V3b);
 *   V4 KV: each mapped page's header and payload checksums hold and name the key, slot and
 *      generation of its record; every slot of every page file is mapped or free, never both;
 *   V5 no file of another store sits in the directory (a leftover of ours is only counted).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_int.h"

typedef struct vstate {
    fg_store *s;
    MDB_txn *t;
    fg_store_verify_report *rep;
    uint64_t kv_slots;
} vstate;

static int tensor_matches(const fg_store_tensor *c, const fg_fgt_reader *r, uint32_t i,
                          uint32_t file_id, const MDB_val *v)
{
    fg_fgt_tensor_info ti;
    fg_fgt_tensor(r, i, &ti);
    if (c->file_id != file_id || c->file_index != i || c->n_chunks != ti.n_chunks ||
        c->n_dims != ti.n_dims || memcmp(&c->codec, &ti.codec, sizeof c->codec) ||
        c->payload_bytes != ti.payload_bytes ||
        memcmp(c->dims, ti.dims, ti.n_dims * sizeof *c->dims))
        return 0;
    fg_fgt_chunk_info *ch = malloc((ti.n_chunks ? ti.n_chunks : 1) * sizeof *ch);
    if (!ch)
        return 0;
    rec_tensor_chunks(v, c, ch);
    int ok = rec_tensor_digest(ch, ti.n_chunks) == c->digest;
    for (uint32_t k = 0; k < ti.n_chunks && ok; k++) {
        fg_fgt_chunk_info fc;
        fg_fgt_chunk(r, i, k, &fc);
        ok = !memcmp(&fc, &ch[k], sizeof fc);
    }
    free(ch);
    return ok;
}

static int verify_meta(vstate *vs, const fg_fgt_reader *r, uint64_t batch, const char *path,
                       fg_err *err)
{
    size_t plen = strlen(STORE_META_PREFIX), flen = strlen(STORE_METAFILE_PREFIX);
    for (uint32_t i = 0; i < fg_fgt_meta_count(r); i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        int in_file = !strncmp(m.key, STORE_METAFILE_PREFIX, flen);
        if ((strncmp(m.key, STORE_META_PREFIX, plen) && !in_file) || m.type != FG_META_BYTES)
            continue;
        const char *key = m.key + (in_file ? flen : plen);
        MDB_val v;
        uint64_t b;
        const void *d;
        size_t len;
        metaref cref = {0}, fref = {0};
        int rc = cat_get(vs->s, vs->t, vs->s->db_meta, key, strlen(key), &v, err);
        int same = 0;
        if (!rc && rec_meta_decode_ref(&v, &b, &d, &len, &cref) == FG_OK && in_file)
            same = !d && metaref_decode(m.data, m.len, cref.owner, &fref) == FG_OK &&
                   !memcmp(&cref, &fref, sizeof cref);
        else if (!rc)
            same = d && len == m.len && !memcmp(d, m.data, len);
        if (rc || rec_meta_decode(&v, &b, &d, &len) || b < batch || (b == batch && !same))
            return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: metadata '%s' of batch %llu is "
                              "missing from the catalog or differs", path, key,
                              (unsigned long long)batch);
    }
    return FG_OK;
}

static int verify_weights(vstate *vs, uint32_t id, const file_rec *f, fg_err *err)
{
    fg_store *s = vs->s;
    char path[4200];
    fg_store_file_path(s, id, 0, path, sizeof path);
    fg_fgt_reader *r;
    int rc = store_reader_get(s, id, &r, err);
    file_rec ff;
    uint32_t said;
    if (!rc)
        rc = weights_file_ident(s, r, path, &ff, &said, err);
    if (!rc && (said != id || ff.batch != f->batch || ff.part != f->part ||
                ff.parts != f->parts || ff.generation != f->generation))
        rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: identity or generation differs from the "
                        "catalog's files record", path);
    uint32_t bt, bc;
    if (!rc && (rc = fg_fgt_verify(r, &bt, &bc, err)) == FG_OK)
        rc = FG_OK;
    for (uint32_t i = 0; !rc && i < fg_fgt_tensor_count(r); i++) {
        fg_fgt_tensor_info ti;
        fg_fgt_tensor(r, i, &ti);
        MDB_val v;
        fg_store_tensor c;
        int g = cat_get(s, vs->t, s->db_tensors, ti.name, strlen(ti.name), &v, err);
        if (g || rec_tensor_decode(&v, &c) || !tensor_matches(&c, r, i, id, &v))
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: tensor '%s': catalog record missing "
                            "or different from the file", path, ti.name);
        vs->rep->tensors++;
        vs->rep->chunks += ti.n_chunks;
        vs->rep->chunk_bytes += ti.payload_bytes;
    }
    if (!rc && f->part == 0)
        rc = verify_meta(vs, r, f->batch, path, err);
    return rc;
}

/* V3b: every metadata value kept in a file reads back whole. */
static int verify_metafiles(vstate *vs, fg_err *err)
{
    MDB_cursor *c;
    int mrc = mdb_cursor_open(vs->t, vs->s->db_meta, &c);
    if (mrc)
        return cat_fail(vs->s, err, mrc, "reading metadata records");
    MDB_val k, v;
    int rc = FG_OK;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc && mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        char key[FG_FGT_MAX_NAME + 1];
        size_t kn = k.mv_size > FG_FGT_MAX_NAME ? FG_FGT_MAX_NAME : k.mv_size, len;
        memcpy(key, k.mv_data, kn);
        key[kn] = '\0';
        uint64_t b;
        const void *d;
        metaref ref;
        if (rec_meta_decode_ref(&v, &b, &d, &len, &ref) == FG_OK && !d)
            rc = metafile_read(vs->s, key, &ref, NULL, err);
    }
    mdb_cursor_close(c);
    return rc;
}

static int verify_kv_file(vstate *vs, uint32_t id, const file_rec *f, fg_err *err)
{
    fg_store *s = vs->s;
    int fd, rc = kv_file_fd(s, id, &fd, err);
    if (rc)
        return rc;
    struct stat sb;
    char path[4200];
    fg_store_file_path(s, id, 1, path, sizeof path);
    if (fstat(fd, &sb))
        return io_fail(err, -errno, path, "stat");
    if (f->size > s->pages_per_file || (uint64_t)sb.st_size < kv_slot_offset(s, (uint32_t)f->size))
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %llu bytes, too short for the %llu slots "
                          "the catalog lists", path, (unsigned long long)sb.st_size,
                          (unsigned long long)f->size);
    vs->kv_slots += f->size;
    return FG_OK;
}

static uint32_t be32v(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int verify_files(vstate *vs, fg_err *err)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = FG_OK;
    mdb_cursor_open(vs->t, vs->s->db_files, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        file_rec f;
        if (k.mv_size != 4 || rec_file_decode(&v, &f)) {
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged files record", vs->s->dir);
            break;
        }
        uint32_t id = be32v(k.mv_data);
        rc = f.kind == FILE_KV ? verify_kv_file(vs, id, &f, err) : verify_weights(vs, id, &f, err);
        vs->rep->files++;
    }
    mdb_cursor_close(c);
    return rc;
}

/* Slot (file_id, slot) must lie in a page file the catalog lists. */
static int slot_in_range(vstate *vs, uint32_t id, uint32_t slot)
{
    uint8_t k[4];
    MDB_val v;
    file_rec f;
    rec_file_key(id, k);
    return cat_get(vs->s, vs->t, vs->s->db_files, k, 4, &v, NULL) == FG_OK &&
           rec_file_decode(&v, &f) == FG_OK && f.kind == FILE_KV && slot < f.size;
}

static int verify_kv_pages(vstate *vs, fg_err *err)
{
    fg_store *s = vs->s;
    uint8_t *buf = malloc(s->page_size);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    MDB_cursor *c;
    MDB_val k, v;
    int rc = FG_OK;
    mdb_cursor_open(vs->t, s->db_kv, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        fg_store_kv_page p;
        uint8_t fk[FREE_KEY_SIZE];
        MDB_val fv;
        if (k.mv_size != KV_KEY_SIZE || rec_kv_decode(&v, &p)) {
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged KV record", s->dir);
            break;
        }
        rec_kv_key_decode(k.mv_data, &p.key);
        p.offset = kv_slot_offset(s, p.slot);
        rec_free_key(p.file_id, p.slot, fk);
        if (!slot_in_range(vs, p.file_id, p.slot) ||
            cat_get(s, vs->t, s->db_free, fk, sizeof fk, &fv, NULL) == FG_OK)
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: KV page job %llu seq %u layer %u page "
                            "%u: slot %u of kv-%06u.pages is outside the file or also free",
                            s->dir, (unsigned long long)p.key.job, p.key.seq, p.key.layer,
                            p.key.page, p.slot, p.file_id);
        if (!rc)
            rc = kv_read_page(s, &p, buf, s->page_size, err);
        vs->rep->kv_pages++;
    }
    mdb_cursor_close(c);
    free(buf);
    return rc;
}

static int verify_kv_free(vstate *vs, fg_err *err)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = FG_OK;
    mdb_cursor_open(vs->t, vs->s->db_free, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        uint32_t id = be32v(k.mv_data), slot = be32v((uint8_t *)k.mv_data + 4);
        if (k.mv_size != FREE_KEY_SIZE || v.mv_size != 2 || !slot_in_range(vs, id, slot))
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: free slot %u of kv-%06u.pages is "
                            "damaged or outside the file", vs->s->dir, slot, id);
        vs->rep->kv_free++;
        vs->rep->kv_dirty += v.mv_size == 2 && (((uint8_t *)v.mv_data)[1] & FREE_DIRTY);
    }
    mdb_cursor_close(c);
    if (!rc && vs->rep->kv_free + vs->rep->kv_pages != vs->kv_slots)
        rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: %llu mapped + %llu free KV slots, but the "
                        "page files hold %llu", vs->s->dir, (unsigned long long)vs->rep->kv_pages,
                        (unsigned long long)vs->rep->kv_free, (unsigned long long)vs->kv_slots);
    return rc;
}

/* V5: files in the directory the catalog does not list. */
static int verify_strays(vstate *vs, fg_err *err)
{
    DIR *d = opendir(vs->s->dir);
    if (!d)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot read", vs->s->dir);
    struct dirent *e;
    int rc = FG_OK;
    while (!rc && (e = readdir(d))) {
        int kv;
        uint32_t id = store_parse_name(e->d_name, &kv);
        uint8_t k[4];
        MDB_val v;
        uint32_t owner = metafile_parse(e->d_name); /* a leftover: its weight file unlisted */
        rec_file_key(owner, k);
        if (owner && cat_get(vs->s, vs->t, vs->s->db_files, k, 4, &v, NULL) != FG_OK)
            vs->rep->orphan_files++;
        rec_file_key(id, k);
        if (!id || cat_get(vs->s, vs->t, vs->s->db_files, k, 4, &v, NULL) == FG_OK)
            continue;
        vs->rep->orphan_files++;
        char path[4200];
        store_path(vs->s, path, sizeof path, e->d_name);
        if (!kv) {
            fg_fgt_reader *r;
            fg_meta_info m;
            if (fg_fgt_open(path, 0, &r, NULL) == FG_OK) {
                if (fg_fgt_meta_find(r, "fg.store.uuid", &m) || m.type != FG_META_STRING ||
                    strcmp(m.data, vs->s->uuid_hex))
                    rc = fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s: file of another store in "
                                    "this store's directory", path);
                fg_fgt_close(r);
            }
        }
    }
    closedir(d);
    return rc;
}

int fg_store_verify(fg_store *s, fg_store_verify_report *rep, fg_err *err)
{
    fg_store_verify_report local;
    vstate vs = {s, NULL, rep ? rep : &local, 0};
    memset(vs.rep, 0, sizeof *vs.rep);
    int rc = cat_read_begin(s, &vs.t, err);
    if (rc)
        return rc;
    MDB_stat st;
    rc = verify_files(&vs, err);
    if (!rc && mdb_stat(vs.t, s->db_tensors, &st) == 0 && st.ms_entries != vs.rep->tensors)
        rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog lists %zu tensors, its files hold "
                        "%llu", s->dir, st.ms_entries, (unsigned long long)vs.rep->tensors);
    if (!rc)
        rc = verify_metafiles(&vs, err);
    if (!rc)
        rc = verify_kv_pages(&vs, err);
    if (!rc)
        rc = verify_kv_free(&vs, err);
    if (!rc)
        rc = verify_strays(&vs, err);
    if (!rc && mdb_stat(vs.t, s->db_meta, &st) == 0)
        vs.rep->meta = st.ms_entries;
    cat_read_end(s, vs.t);
    return rc;
}
