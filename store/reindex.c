/* reindex.c - rebuild the catalog from the files alone, and verify files against the catalog.
 *
 * The catalog is a derived index (DESIGN 5). Reindex derives it again:
 *   - weight files: each valid weights-NNNNNN.fgt of this store names its batch, its part and
 *     the batch's part count; a batch counts only when all its parts are present (a crash during
 *     commit can leave some), and its files are indexed by the code a commit uses
 *     (weights_index_file), in batch order so a newer metadata blob wins;
 *   - KV page files: every slot's header is read; a slot whose header and payload checksums
 *     hold is a candidate, the highest generation per key wins and is mapped, every other slot
 *     goes to kv_free (dirty when its header still parses).
 * Files without a valid header or of an incomplete batch are leftovers and are removed, and so
 * is a metadata file (meta-NNNNNN-K.blob) whose owner weight file is not indexed; a file of
 * another store stops reindex with FG_ERR_STORE_FOREIGN naming it. A metadata file's record
 * comes from its owner's fg.store.metafile.<key> reference, like every other record.
 *
 * Verify reads the catalog in one snapshot and checks every checksum in every listed file
 * (chunk XXH3s through the .fgt reader, KV page header and payload checksums), that each file
 * carries this store's id, and that catalog and files agree record by record.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_file.h"
#include "fg_bytes.h"
#include "store_int.h"

typedef struct wfile {
    uint32_t id;
    file_rec f;
    fg_fgt_reader *r;
} wfile;

typedef struct scan {
    wfile *w;
    size_t n_w;
    uint32_t *kv;   /* page file ids */
    size_t n_kv;
    uint32_t max_id;
    uint64_t max_batch;
} scan;

static void scan_free(scan *sc)
{
    for (size_t i = 0; i < sc->n_w; i++)
        fg_fgt_close(sc->w[i].r);
    free(sc->w);
    free(sc->kv);
}

static int scan_weights(fg_store *s, scan *sc, uint32_t id, const char *path, fg_err *err)
{
    fg_fgt_reader *r;
    if (fg_fgt_open(path, 0, &r, NULL)) {
        unlink(path); /* no valid superblock: a file whose batch never published */
        return FG_OK;
    }
    wfile w = {id, {0}, r};
    uint32_t said;
    int rc = weights_file_ident(s, r, path, &w.f, &said, err);
    if (!rc && said != id)
        rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: says it is file %u", path, said);
    wfile *p = rc ? NULL : realloc(sc->w, (sc->n_w + 1) * sizeof *p);
    if (!rc && !p)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc) {
        fg_fgt_close(r);
        return rc;
    }
    sc->w = p;
    sc->w[sc->n_w++] = w;
    return FG_OK;
}

static int scan_kv(fg_store *s, scan *sc, uint32_t id, const char *path, fg_err *err)
{
    int fd;
    uint8_t h[KVF_HEADER_USED];
    int rc = fg_open_regular(path, O_RDONLY, &fd, err);
    if (rc && rc != FG_ERR_NOT_FOUND) /* not a file the store made: left for the user to see */
        return rc;
    if (fd < 0 || pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        if (fd >= 0)
            close(fd);
        unlink(path); /* created but never given a header */
        return FG_OK;
    }
    close(fd);
    rc = kvf_header_check(s, h, id, path, err);
    if (rc == FG_ERR_BAD_MAGIC) {
        unlink(path);
        return FG_OK;
    }
    uint32_t *p = rc ? NULL : realloc(sc->kv, (sc->n_kv + 1) * sizeof *p);
    if (!rc && !p)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (!rc) {
        sc->kv = p;
        sc->kv[sc->n_kv++] = id;
    }
    return rc;
}

static int scan_dir(fg_store *s, scan *sc, fg_err *err)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot read", s->dir);
    struct dirent *e;
    int rc = FG_OK;
    while (!rc && (e = readdir(d))) {
        int kv;
        uint32_t id = store_parse_name(e->d_name, &kv);
        if (!id)
            continue;
        char path[4200];
        store_path(s, path, sizeof path, e->d_name);
        rc = kv ? scan_kv(s, sc, id, path, err) : scan_weights(s, sc, id, path, err);
        if (id > sc->max_id)
            sc->max_id = id;
    }
    closedir(d);
    return rc;
}

static int cmp_wfile(const void *a, const void *b)
{
    const wfile *x = a, *y = b;
    if (x->f.batch != y->f.batch)
        return x->f.batch < y->f.batch ? -1 : 1;
    return x->f.part < y->f.part ? -1 : x->f.part > y->f.part;
}

/* Drop batches with missing parts (sorted input); their files are removed. */
static void drop_incomplete(fg_store *s, scan *sc)
{
    size_t out = 0;
    for (size_t i = 0; i < sc->n_w;) {
        size_t j = i;
        while (j < sc->n_w && sc->w[j].f.batch == sc->w[i].f.batch)
            j++;
        int whole = j - i == sc->w[i].f.parts;
        for (size_t k = i; k < j && whole; k++)
            whole = sc->w[k].f.part == k - i && sc->w[k].f.parts == sc->w[i].f.parts;
        for (size_t k = i; k < j; k++) {
            if (whole) {
                sc->w[out++] = sc->w[k];
                if (sc->w[k].f.batch > sc->max_batch)
                    sc->max_batch = sc->w[k].f.batch;
            } else {
                char path[4200];
                fg_store_file_path(s, sc->w[k].id, 0, path, sizeof path);
                fg_fgt_close(sc->w[k].r);
                unlink(path);
            }
        }
        i = j;
    }
    sc->n_w = out;
}

/* Metadata files whose owner weight file was not kept are leftovers of a batch that never
 * committed (or was dropped above). */
static void drop_orphan_metafiles(fg_store *s, const scan *sc)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint32_t owner = metafile_parse(e->d_name);
        int kept = 0;
        for (size_t i = 0; owner && i < sc->n_w && !kept; i++)
            kept = sc->w[i].id == owner;
        if (owner && !kept) {
            char path[4200];
            store_path(s, path, sizeof path, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* ---- KV page files ---- */

typedef struct kv_ctx {
    const scan *sc;
    uint64_t max_gen;
} kv_ctx;

static int kv_index_file(fg_store *s, MDB_txn *t, uint32_t id, uint64_t *max_gen, fg_err *err)
{
    char path[4200];
    fg_store_file_path(s, id, 1, path, sizeof path);
    int fd, rc = kv_file_fd(s, id, &fd, err);
    struct stat sb;
    if (rc)
        return rc;
    if (fstat(fd, &sb))
        return io_fail(err, -errno, path, "stat");
    uint64_t n = sb.st_size > KVF_HEADER_SIZE ? (sb.st_size - KVF_HEADER_SIZE) / s->page_size : 0;
    if (n > s->pages_per_file)
        n = s->pages_per_file;
    file_rec f = {FILE_KV, n, 0, 0, 0, 0};
    uint8_t fk[4], fv[48];
    rec_file_key(id, fk);
    rc = cat_put(s, t, s->db_files, fk, 4, fv, rec_file_encode(&f, fv), err);
    uint8_t *buf = malloc(s->page_size);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t slot = 0; slot < n && !rc; slot++) {
        fg_store_kv_page p;
        size_t got;
        int e = io_read_all(s, fd, buf, s->page_size, kv_slot_offset(s, slot), &got);
        if (e) {
            rc = io_read_fail(err, e, path, "reading a KV page", got, s->page_size);
            break;
        }
        int valid = kvp_header_decode(buf, &p) == FG_OK && p.slot == slot && p.file_id == id &&
                    p.payload_len <= s->page_size - FG_STORE_KV_HEADER_SIZE &&
                    XXH3_64bits(buf + FG_STORE_KV_HEADER_SIZE, p.payload_len) == p.payload_xxh3;
        uint8_t k[KV_KEY_SIZE], v[48], sk[FREE_KEY_SIZE];
        uint8_t dirty[2] = {REC_VERSION, FREE_DIRTY}, clean[2] = {REC_VERSION, 0};
        rec_free_key(id, slot, sk);
        if (!valid) {
            rc = cat_put(s, t, s->db_free, sk, sizeof sk, clean, 2, err);
            continue;
        }
        if (p.generation > *max_gen)
            *max_gen = p.generation;
        rec_kv_key(&p.key, k);
        MDB_val old;
        fg_store_kv_page op;
        int g = cat_get(s, t, s->db_kv, k, sizeof k, &old, err);
        if (g == FG_OK && rec_kv_decode(&old, &op) == FG_OK && op.generation > p.generation) {
            rc = cat_put(s, t, s->db_free, sk, sizeof sk, dirty, 2, err);
            continue;
        }
        if (g == FG_OK) { /* the previous winner loses */
            uint8_t ok[FREE_KEY_SIZE];
            rec_free_key(op.file_id, op.slot, ok);
            rc = cat_put(s, t, s->db_free, ok, sizeof ok, dirty, 2, err);
        } else if (g != FG_ERR_NOT_FOUND) {
            rc = g;
        }
        if (!rc)
            rc = cat_put(s, t, s->db_kv, k, sizeof k, v, rec_kv_encode(&p, v), err);
    }
    free(buf);
    return rc;
}

static int reindex_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    const scan *sc = vctx;
    int rc = cat_version_put(s, t, err);
    for (size_t i = 0; i < sc->n_w && !rc; i++)
        rc = weights_index_file(s, t, sc->w[i].r, sc->w[i].id, err);
    uint64_t max_gen = 0;
    for (size_t i = 0; i < sc->n_kv && !rc; i++)
        rc = kv_index_file(s, t, sc->kv[i], &max_gen, err);
    store_state st = {sc->max_id + 1, sc->max_batch + 1, max_gen};
    return rc ? rc : cat_state_put(s, t, &st, err);
}

#define CATALOG_NEW STORE_CATALOG_DIR ".new"

static int remove_env_dir(fg_store *s, const char *name, fg_err *err)
{
    static const char *files[] = {"data.mdb", "lock.mdb"};
    char path[4300];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s/%s", s->dir, name, files[i]);
        if (unlink(path) && errno != ENOENT)
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot remove", path);
    }
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (rmdir(path) && errno != ENOENT)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot remove", path);
    return FG_OK;
}

/* The new catalog replaces the old one only once it is complete: a failed reindex leaves the
 * old catalog as it was. A crash between the removal and the rename leaves no catalog, which
 * open reports ("run reindex"). */
static int swap_catalog(fg_store *s, fg_err *err)
{
    char from[4200], to[4200];
    store_path(s, from, sizeof from, CATALOG_NEW);
    store_path(s, to, sizeof to, STORE_CATALOG_DIR);
    int rc = remove_env_dir(s, STORE_CATALOG_DIR, err);
    if (!rc && rename(from, to))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot rename to %s", from, to);
    if (!rc)
        (void)io_sync_dir(s->dir);
    return rc;
}

int fg_store_reindex(const char *dir, const fg_store_opts *o, fg_err *err)
{
    fg_store_opts ro = o ? *o : (fg_store_opts){0};
    fg_store *s;
    int rc = store_reindex_handle(dir, &ro, &s, err);
    if (rc)
        return rc;
    s->cat_name = CATALOG_NEW;
    scan sc = {0};
    rc = remove_env_dir(s, CATALOG_NEW, err);
    if (!rc)
        rc = cat_env_open(s, 1, ro.map_initial ? ro.map_initial : 1u << 20, err);
    if (!rc)
        rc = scan_dir(s, &sc, err);
    if (!rc) {
        if (sc.n_w)
            qsort(sc.w, sc.n_w, sizeof *sc.w, cmp_wfile);
        drop_incomplete(s, &sc);
        drop_orphan_metafiles(s, &sc);
        rc = cat_write(s, reindex_txn, &sc, err);
    }
    scan_free(&sc);
    cat_env_close(s);
    if (!rc)
        rc = swap_catalog(s, err);
    else
        remove_env_dir(s, CATALOG_NEW, NULL);
    fg_store_close(s);
    return rc;
}
