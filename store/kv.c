/* kv.c - KV-cache pages: fixed-size slots in kv-NNNNNN.pages files, mapped by the catalog.
 *
 * A page file is a 4 KiB file header followed by slots of page_size bytes; slot i starts at
 * 4096 + i * page_size. Each page starts with a 128-byte header (SPEC "KV page header") that
 * names its key (job, sequence, layer, page number), token range, generation and payload
 * checksum, and carries its own checksum; the payload follows it.
 *
 * Writes are copy-on-write, in three steps (fg_store_kv_write):
 *   1. reserve: one txn takes slots from kv_free (extending or creating a page file when the
 *      list runs short), marks them dirty and reserves as many generations; commit. Slots are
 *      reserved KV_POOL at a time and handed out from an in-memory pool, so most writes skip
 *      this commit; unused pooled slots are just dirty free slots, wiped like any other.
 *   2. write the pages to their slots and fdatasync every file touched.
 *   3. publish: one txn maps each key to its new slot, moves the key's previous slot (if any) to
 *      kv_free as dirty, and removes the new slots from kv_free; commit.
 * A crash before 3 commits leaves every key on its previous page, which was never touched.
 *
 * "Dirty" marks a free slot whose header may still parse (an old generation, or a reserved
 * slot written before a crash). Dirty slots are harmless to the catalog, but reindex reads
 * headers, so a freed key must not survive in one: fg_store_kv_free and every writable open
 * wipe the headers of all dirty slots, fdatasync, then clear the flags. A key's older pages
 * therefore never outlive its newest one (SPEC invariant K3).
 *
 * All writes hold s->write_lock; the slots reserved in step 1 are private to the caller until
 * step 3 because no other writer can run in between.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_file.h"
#include "fg_bytes.h"
#include "store_int.h"

#define KV_GROW_SLOTS 256u /* a page file grows by at least this many slots at a time */
#define KV_POOL 64u        /* slots reserved per reserve commit (more when one call needs more) */

/* ---- headers ---- */

void kvp_header_encode(const fg_store_kv_page *p, uint8_t h[FG_STORE_KV_HEADER_SIZE])
{
    memset(h, 0, FG_STORE_KV_HEADER_SIZE);
    fg_put32(h, KVP_MAGIC);
    fg_put16(h + 4, KVP_VERSION);
    fg_put16(h + 6, FG_STORE_KV_HEADER_SIZE);
    fg_put64(h + 8, p->key.job);
    fg_put32(h + 16, p->key.seq);
    fg_put32(h + 20, p->key.layer);
    fg_put32(h + 24, p->key.page);
    fg_put32(h + 28, p->slot);
    fg_put32(h + 32, p->token_first);
    fg_put32(h + 36, p->n_tokens);
    fg_put64(h + 40, p->generation);
    fg_put32(h + 48, p->payload_len);
    h[52] = p->codec;
    fg_put32(h + 56, p->file_id);
    fg_put64(h + 64, p->payload_xxh3);
    fg_put64(h + 120, XXH3_64bits(h, 120));
}

int kvp_header_decode(const uint8_t h[FG_STORE_KV_HEADER_SIZE], fg_store_kv_page *p)
{
    if (fg_le32(h) != KVP_MAGIC || fg_le64(h + 120) != XXH3_64bits(h, 120) ||
        fg_le16(h + 4) != KVP_VERSION || fg_le16(h + 6) != FG_STORE_KV_HEADER_SIZE)
        return FG_ERR_STORE_STALE;
    for (int i = 72; i < 120; i++)
        if (h[i])
            return FG_ERR_STORE_STALE;
    if (h[53] || h[54] || h[55] || fg_le32(h + 60))
        return FG_ERR_STORE_STALE;
    memset(p, 0, sizeof *p);
    p->key.job = fg_le64(h + 8);
    p->key.seq = fg_le32(h + 16);
    p->key.layer = fg_le32(h + 20);
    p->key.page = fg_le32(h + 24);
    p->slot = fg_le32(h + 28);
    p->token_first = fg_le32(h + 32);
    p->n_tokens = fg_le32(h + 36);
    p->generation = fg_le64(h + 40);
    p->payload_len = fg_le32(h + 48);
    p->codec = h[52];
    p->file_id = fg_le32(h + 56);
    p->payload_xxh3 = fg_le64(h + 64);
    return FG_OK;
}

void kvf_header_encode(const fg_store *s, uint32_t file_id, uint8_t h[KVF_HEADER_USED])
{
    memset(h, 0, KVF_HEADER_USED);
    memcpy(h, KVF_MAGIC, 8);
    fg_put16(h + 8, 1);
    fg_put16(h + 10, KVF_HEADER_USED);
    fg_put32(h + 12, s->page_size);
    fg_put32(h + 16, file_id);
    fg_put32(h + 20, s->pages_per_file);
    memcpy(h + 24, s->uuid, 16);
    fg_put64(h + 56, XXH3_64bits(h, 56));
}

int kvf_header_check(const fg_store *s, const uint8_t h[KVF_HEADER_USED], uint32_t file_id,
                     const char *path, fg_err *err)
{
    if (memcmp(h, KVF_MAGIC, 8) || fg_le64(h + 56) != XXH3_64bits(h, 56))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: not a KV page file (bad magic or header "
                          "checksum)", path);
    if (fg_le16(h + 8) != 1)
        return fg_err_set(err, FG_ERR_VERSION, "%s: KV page file version %u", path,
                          fg_le16(h + 8));
    if (memcmp(h + 24, s->uuid, 16))
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s: file belongs to another store", path);
    if (fg_le32(h + 12) != s->page_size || fg_le32(h + 16) != file_id ||
        fg_le32(h + 20) != s->pages_per_file)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: header says file %u, page size %u; expected "
                          "file %u, page size %u", path, fg_le32(h + 16), fg_le32(h + 12),
                          file_id, s->page_size);
    return FG_OK;
}

uint64_t kv_slot_offset(const fg_store *s, uint32_t slot)
{
    return KVF_HEADER_SIZE + (uint64_t)slot * s->page_size;
}

/* ---- file descriptors ---- */

static int kv_open_checked(fg_store *s, uint32_t id, int *fd, fg_err *err)
{
    char path[4200];
    fg_store_file_path(s, id, 1, path, sizeof path);
    int rc = fg_open_regular(path, s->rdonly ? O_RDONLY : O_RDWR, fd, err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, FG_ERR_STORE_MISSING, "%s: listed in the catalog but missing",
                          path);
    if (rc)
        return rc;
    uint8_t h[KVF_HEADER_USED];
    size_t got;
    int e = io_read_all(s, *fd, h, sizeof h, 0, &got);
    rc = e ? io_read_fail(err, e, path, "reading the header", got, sizeof h)
           : kvf_header_check(s, h, id, path, err);
    if (rc) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

int kv_file_fd(fg_store *s, uint32_t id, int *fd, fg_err *err)
{
    pthread_mutex_lock(&s->cache_lock);
    int rc = FG_OK;
    size_t i;
    for (i = 0; i < s->n_kvf && s->kvf[i].id != id; i++)
        ;
    if (i == s->n_kvf) {
        kv_file *p = realloc(s->kvf, (s->n_kvf + 1) * sizeof *p);
        if (!p)
            rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        else
            s->kvf = p;
        int nfd = -1;
        if (!rc)
            rc = kv_open_checked(s, id, &nfd, err);
        if (!rc)
            s->kvf[s->n_kvf++] = (kv_file){id, nfd, 0};
    }
    if (!rc)
        *fd = s->kvf[i].fd;
    pthread_mutex_unlock(&s->cache_lock);
    return rc;
}

void kv_files_close(fg_store *s)
{
    for (size_t i = 0; i < s->n_kvf; i++)
        close(s->kvf[i].fd);
    free(s->kvf);
    s->kvf = NULL;
    s->n_kvf = 0;
}

/* Make page file id exist with at least n_slots slots (idempotent: a rerun after a map-full
 * retry finds the work done). New files get their header and a directory fsync. */
static int kv_file_ensure(fg_store *s, uint32_t id, uint32_t n_slots, fg_err *err)
{
    char path[4200];
    fg_store_file_path(s, id, 1, path, sizeof path);
    int fd, e = 0;
    if (access(path, F_OK)) {
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            return io_fail(err, -errno, path, "cannot create");
        uint8_t h[KVF_HEADER_USED];
        kvf_header_encode(s, id, h);
        e = io_write_all(s, fd, h, sizeof h, 0);
        if (!e && s->io.ftruncate(s->io.ctx, fd, (off_t)kv_slot_offset(s, n_slots)))
            e = -errno;
        if (!e)
            e = io_sync(s, fd);
        if (!e)
            e = io_sync_dir(s->dir);
        close(fd);
        if (e)
            unlink(path);
        return e ? io_fail(err, e, path, "creating a KV page file") : FG_OK;
    }
    int rc = kv_file_fd(s, id, &fd, err);
    if (rc)
        return rc;
    struct stat sb;
    if (fstat(fd, &sb))
        return io_fail(err, -errno, path, "stat");
    uint64_t want = kv_slot_offset(s, n_slots);
    if ((uint64_t)sb.st_size < want) {
        if (s->io.ftruncate(s->io.ctx, fd, (off_t)want))
            e = -errno;
        if (!e)
            e = io_sync(s, fd);
    }
    return e ? io_fail(err, e, path, "extending a KV page file") : FG_OK;
}

/* ---- step 1: reserve ---- */

typedef kv_slot_ref slot_ref;

typedef struct reserve_ctx {
    size_t n;
    slot_ref *out;      /* [n] */
    uint64_t gen0;      /* first generation reserved */
} reserve_ctx;

static int free_put(fg_store *s, MDB_txn *t, uint32_t file_id, uint32_t slot, int dirty,
                    fg_err *err)
{
    uint8_t k[FREE_KEY_SIZE], v[2] = {REC_VERSION, dirty ? FREE_DIRTY : 0};
    rec_free_key(file_id, slot, k);
    return cat_put(s, t, s->db_free, k, sizeof k, v, sizeof v, err);
}

static uint32_t be32v(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* The page file with the highest id and its committed slot count (0/0 when none). */
static int last_kv_file(fg_store *s, MDB_txn *t, uint32_t *id, uint32_t *n_slots, fg_err *err)
{
    MDB_cursor *c;
    MDB_val k, v;
    *id = *n_slots = 0;
    mdb_cursor_open(t, s->db_files, &c);
    int m;
    for (m = mdb_cursor_get(c, &k, &v, MDB_LAST); !m; m = mdb_cursor_get(c, &k, &v, MDB_PREV)) {
        file_rec f;
        if (k.mv_size != 4 || rec_file_decode(&v, &f)) {
            mdb_cursor_close(c);
            return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged files record", s->dir);
        }
        if (f.kind == FILE_KV) {
            *id = be32v(k.mv_data);
            *n_slots = (uint32_t)f.size;
            break;
        }
    }
    mdb_cursor_close(c);
    return FG_OK;
}

/* Add at least `need` slots: grow the last page file, or start a new one. */
static int kv_extend(fg_store *s, MDB_txn *t, size_t need, store_state *st, fg_err *err)
{
    uint32_t id, have;
    int rc = last_kv_file(s, t, &id, &have, err);
    if (rc)
        return rc;
    if (!id || have == s->pages_per_file) {
        if (st->next_file_id > STORE_MAX_FILES)
            return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u files", s->dir,
                              STORE_MAX_FILES);
        id = st->next_file_id++;
        have = 0;
    }
    uint64_t grow = need > KV_GROW_SLOTS ? need : KV_GROW_SLOTS;
    if (grow > s->pages_per_file - have)
        grow = s->pages_per_file - have;
    uint32_t n = have + (uint32_t)grow;
    if ((rc = kv_file_ensure(s, id, n, err)))
        return rc;
    file_rec f = {FILE_KV, n, 0, 0, 0, 0};
    uint8_t k[4], v[48];
    rec_file_key(id, k);
    rc = cat_put(s, t, s->db_files, k, 4, v, rec_file_encode(&f, v), err);
    for (uint32_t i = have; i < n && !rc; i++)
        rc = free_put(s, t, id, i, 0, err);
    return rc;
}

static int reserve_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    reserve_ctx *c = vctx;
    store_state st;
    int rc = cat_state_get(s, t, &st, err);
    if (st.next_file_id < s->st.next_file_id)
        st.next_file_id = s->st.next_file_id; /* ids a batch holds in memory */
    size_t got = 0;
    while (!rc && got < c->n) {
        MDB_cursor *cur;
        MDB_val k, v;
        mdb_cursor_open(t, s->db_free, &cur);
        got = 0;
        for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !m && got < c->n;
             m = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
            c->out[got++] = (slot_ref){be32v(k.mv_data), be32v((uint8_t *)k.mv_data + 4)};
        mdb_cursor_close(cur);
        if (got < c->n)
            rc = kv_extend(s, t, c->n - got, &st, err);
    }
    for (size_t i = 0; i < c->n && !rc; i++)
        rc = free_put(s, t, c->out[i].file_id, c->out[i].slot, 1, err);
    c->gen0 = st.kv_gen + 1;
    st.kv_gen += c->n;
    return rc ? rc : cat_state_put(s, t, &st, err);
}

/* ---- step 2: write ---- */

static int write_pages(fg_store *s, size_t n, const fg_store_kv_write_req *r, fg_store_kv_page *pg,
                       fg_err *err)
{
    uint8_t *buf = malloc(s->page_size);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    int rc = FG_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        int fd;
        if ((rc = kv_file_fd(s, pg[i].file_id, &fd, err)))
            break;
        kvp_header_encode(&pg[i], buf);
        if (r[i].len)
            memcpy(buf + FG_STORE_KV_HEADER_SIZE, r[i].payload, r[i].len);
        int e = io_write_all(s, fd, buf, FG_STORE_KV_HEADER_SIZE + r[i].len, pg[i].offset);
        if (e) {
            char path[4200];
            fg_store_file_path(s, pg[i].file_id, 1, path, sizeof path);
            rc = io_fail(err, e, path, "writing a KV page");
        }
    }
    free(buf);
    return rc;
}

/* fdatasync each distinct file among pg[0..n). */
static int sync_files(fg_store *s, size_t n, const fg_store_kv_page *pg, fg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = pg[j].file_id == pg[i].file_id;
        if (seen)
            continue;
        int fd, rc = kv_file_fd(s, pg[i].file_id, &fd, err);
        if (rc)
            return rc;
        int e = io_sync(s, fd);
        if (e) {
            char path[4200];
            fg_store_file_path(s, pg[i].file_id, 1, path, sizeof path);
            return io_fail(err, e, path, "fdatasync");
        }
    }
    return FG_OK;
}

/* ---- step 3: publish ---- */

typedef struct publish_ctx {
    size_t n;
    const fg_store_kv_page *pg;
} publish_ctx;

static int publish_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    publish_ctx *c = vctx;
    int rc = FG_OK;
    for (size_t i = 0; i < c->n && !rc; i++) {
        const fg_store_kv_page *p = &c->pg[i];
        uint8_t k[KV_KEY_SIZE], fk[FREE_KEY_SIZE], v[48];
        rec_kv_key(&p->key, k);
        MDB_val old;
        rc = cat_get(s, t, s->db_kv, k, sizeof k, &old, err);
        fg_store_kv_page op;
        if (rc == FG_OK && rec_kv_decode(&old, &op) == FG_OK)
            rc = free_put(s, t, op.file_id, op.slot, 1, err);
        else if (rc == FG_ERR_NOT_FOUND)
            rc = FG_OK;
        rec_free_key(p->file_id, p->slot, fk);
        if (!rc)
            rc = cat_del(s, t, s->db_free, fk, sizeof fk, err);
        if (!rc)
            rc = cat_put(s, t, s->db_kv, k, sizeof k, v, rec_kv_encode(p, v), err);
    }
    return rc;
}

static int check_reqs(fg_store *s, size_t n, const fg_store_kv_write_req *r, fg_err *err)
{
    if (n == 0 || n > (1u << 20))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: kv_write of %zu pages", s->dir, n);
    for (size_t i = 0; i < n; i++)
        if (r[i].len > s->page_size - FG_STORE_KV_HEADER_SIZE || (r[i].len && !r[i].payload))
            return fg_err_set(err, FG_ERR_LIMIT, "%s: KV page job %llu seq %u layer %u page %u: "
                              "payload of %zu bytes exceeds %u", s->dir,
                              (unsigned long long)r[i].key.job, r[i].key.seq, r[i].key.layer,
                              r[i].key.page, r[i].len, s->page_size - FG_STORE_KV_HEADER_SIZE);
    return FG_OK;
}

/* Refill the pool with at least n reserved slots and generations (one reserve commit).
 * Leftover pooled slots are dropped: they stay dirty in kv_free and may be reserved again. */
static int pool_refill(fg_store *s, size_t n, fg_err *err)
{
    size_t k = n > KV_POOL ? n : KV_POOL;
    reserve_ctx c = {k, calloc(k, sizeof(slot_ref)), 0};
    if (!c.out)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    int rc = cat_write(s, reserve_txn, &c, err);
    if (rc) {
        free(c.out);
        return rc;
    }
    free(s->pool);
    s->pool = c.out;
    s->pool_pos = 0;
    s->pool_len = k;
    s->pool_gen = c.gen0;
    s->st.kv_gen = c.gen0 + k - 1;
    for (size_t i = 0; i < k; i++)
        if (s->st.next_file_id <= c.out[i].file_id)
            s->st.next_file_id = c.out[i].file_id + 1;
    return FG_OK;
}

static void pool_drop(fg_store *s)
{
    s->pool_pos = s->pool_len = 0;
}

static void page_fill(fg_store *s, fg_store_kv_page *p, const fg_store_kv_write_req *r)
{
    memset(p, 0, sizeof *p);
    p->key = r->key;
    p->token_first = r->token_first;
    p->n_tokens = r->n_tokens;
    p->codec = r->codec;
    p->payload_len = (uint32_t)r->len;
    p->payload_xxh3 = XXH3_64bits(r->payload, r->len);
    p->file_id = s->pool[s->pool_pos].file_id;
    p->slot = s->pool[s->pool_pos].slot;
    p->offset = kv_slot_offset(s, p->slot);
    p->generation = s->pool_gen++;
    s->pool_pos++;
}

static int kv_write_locked(fg_store *s, size_t n, const fg_store_kv_write_req *r,
                           fg_store_kv_page *pg, fg_err *err)
{
    int rc = s->pool_len - s->pool_pos < n ? pool_refill(s, n, err) : FG_OK;
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        page_fill(s, &pg[i], &r[i]);
    rc = write_pages(s, n, r, pg, err);
    if (!rc)
        rc = sync_files(s, n, pg, err);
    publish_ctx pc = {n, pg};
    if (!rc)
        rc = cat_write(s, publish_txn, &pc, err);
    return rc;
}

int fg_store_kv_write(fg_store *s, size_t n, const fg_store_kv_write_req *reqs,
                      fg_store_kv_page *out, fg_err *err)
{
    if (s->rdonly)
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: store opened read-only", s->dir);
    int rc = check_reqs(s, n, reqs, err);
    if (rc)
        return rc;
    fg_store_kv_page *pg = out ? out : calloc(n, sizeof *pg);
    if (!pg)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    pthread_mutex_lock(&s->write_lock);
    rc = kv_write_locked(s, n, reqs, pg, err);
    pthread_mutex_unlock(&s->write_lock);
    if (!out)
        free(pg);
    return rc;
}

/* ---- lookup, read, iterate ---- */

static int kv_get(fg_store *s, MDB_txn *t, const fg_store_kv_key *key, fg_store_kv_page *out,
                  fg_err *err)
{
    uint8_t k[KV_KEY_SIZE];
    rec_kv_key(key, k);
    MDB_val v;
    int rc = cat_get(s, t, s->db_kv, k, sizeof k, &v, err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, rc, "%s: no KV page job %llu seq %u layer %u page %u", s->dir,
                          (unsigned long long)key->job, key->seq, key->layer, key->page);
    if (rc == FG_OK && rec_kv_decode(&v, out))
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged KV record", s->dir);
    out->key = *key;
    out->offset = kv_slot_offset(s, out->slot);
    return rc;
}

int fg_store_kv_lookup(fg_store *s, const fg_store_kv_key *key, fg_store_kv_page *out,
                       fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    rc = kv_get(s, t, key, out, err);
    cat_read_end(s, t);
    return rc;
}

static int stale(fg_store *s, const fg_store_kv_page *p, const char *why, fg_err *err)
{
    return fg_err_set(err, FG_ERR_STORE_STALE, "%s/kv-%06u.pages slot %u (job %llu seq %u layer "
                      "%u page %u, generation %llu): %s", s->dir, p->file_id, p->slot,
                      (unsigned long long)p->key.job, p->key.seq, p->key.layer, p->key.page,
                      (unsigned long long)p->generation, why);
}

/* Read and check the page the catalog record p names; payload into buf (cap bytes). */
int kv_read_page(fg_store *s, const fg_store_kv_page *p, void *buf, size_t cap, fg_err *err)
{
    if (cap < p->payload_len)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: KV page payload is %u bytes, buffer %zu",
                          s->dir, p->payload_len, cap);
    int fd, rc = kv_file_fd(s, p->file_id, &fd, err);
    if (rc)
        return rc;
    uint8_t h[FG_STORE_KV_HEADER_SIZE];
    char path[4200];
    fg_store_file_path(s, p->file_id, 1, path, sizeof path);
    int e = io_read_all(s, fd, h, sizeof h, p->offset, NULL);
    if (e == -ENODATA)
        return stale(s, p, "page lies past the end of the file", err);
    if (e)
        return io_fail(err, e, path, "reading a KV page");
    fg_store_kv_page hp;
    if (kvp_header_decode(h, &hp))
        return stale(s, p, "header checksum mismatch (torn or never written)", err);
    if (hp.key.job != p->key.job || hp.key.seq != p->key.seq || hp.key.layer != p->key.layer ||
        hp.key.page != p->key.page || hp.generation != p->generation ||
        hp.slot != p->slot || hp.file_id != p->file_id)
        return stale(s, p, "header names another page or generation (stale)", err);
    if (hp.payload_len != p->payload_len || hp.payload_xxh3 != p->payload_xxh3)
        return stale(s, p, "header disagrees with the catalog on the payload", err);
    e = io_read_all(s, fd, buf, p->payload_len, p->offset + FG_STORE_KV_HEADER_SIZE, NULL);
    if (e == -ENODATA)
        return stale(s, p, "payload runs past the end of the file", err);
    if (e)
        return io_fail(err, e, path, "reading a KV page");
    if (XXH3_64bits(buf, p->payload_len) != p->payload_xxh3)
        return stale(s, p, "payload checksum mismatch (torn write)", err);
    return FG_OK;
}

int fg_store_kv_read(fg_store *s, const fg_store_kv_key *key, void *buf, size_t cap,
                     fg_store_kv_page *out, fg_err *err)
{
    fg_store_kv_page p;
    int rc = fg_store_kv_lookup(s, key, &p, err);
    if (!rc)
        rc = kv_read_page(s, &p, buf, cap, err);
    if (!rc && out)
        *out = p;
    return rc;
}

int fg_store_kv_iter(fg_store *s, uint64_t job, int (*cb)(void *ctx, const fg_store_kv_page *p),
                     void *ctx, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_cursor *c;
    mdb_cursor_open(t, s->db_kv, &c);
    fg_store_kv_key k0 = {job == UINT64_MAX ? 0 : job, 0, 0, 0};
    uint8_t kb[KV_KEY_SIZE];
    rec_kv_key(&k0, kb);
    MDB_val k = {sizeof kb, kb}, v;
    for (int m = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        fg_store_kv_page p;
        if (k.mv_size != KV_KEY_SIZE || rec_kv_decode(&v, &p)) {
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged KV record", s->dir);
            break;
        }
        rec_kv_key_decode(k.mv_data, &p.key);
        if (job != UINT64_MAX && p.key.job != job)
            break;
        p.offset = kv_slot_offset(s, p.slot);
        rc = cb(ctx, &p);
    }
    mdb_cursor_close(c);
    cat_read_end(s, t);
    return rc;
}

/* ---- free and wipe ---- */

typedef struct free_ctx {
    fg_store_kv_key key;
    int n_fields;
    uint64_t freed;
} free_ctx;

static int key_match(const fg_store_kv_key *a, const fg_store_kv_key *b, int n)
{
    return a->job == b->job && (n < 2 || a->seq == b->seq) && (n < 3 || a->layer == b->layer) &&
           (n < 4 || a->page == b->page);
}

static int free_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    free_ctx *c = vctx;
    c->freed = 0;
    MDB_cursor *cur;
    int m = mdb_cursor_open(t, s->db_kv, &cur);
    if (m)
        return cat_fail(s, err, m, "opening a cursor");
    fg_store_kv_key k0 = c->key;
    if (c->n_fields < 2)
        k0.seq = 0;
    if (c->n_fields < 3)
        k0.layer = 0;
    if (c->n_fields < 4)
        k0.page = 0;
    uint8_t kb[KV_KEY_SIZE];
    rec_kv_key(&k0, kb);
    MDB_val k = {sizeof kb, kb}, v;
    int rc = FG_OK;
    for (m = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); !m && !rc;
         m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        fg_store_kv_key key;
        fg_store_kv_page p;
        rec_kv_key_decode(k.mv_data, &key);
        if (!key_match(&key, &c->key, c->n_fields))
            break;
        if (rec_kv_decode(&v, &p))
            rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged KV record", s->dir);
        if (!rc)
            rc = free_put(s, t, p.file_id, p.slot, 1, err);
        if (!rc && (m = mdb_cursor_del(cur, 0)))
            rc = cat_fail(s, err, m, "deleting a KV record");
        c->freed++;
    }
    mdb_cursor_close(cur);
    return rc;
}

typedef struct wipe_ctx {
    slot_ref *slots;
    size_t n;
} wipe_ctx;

static int clear_txn(fg_store *s, MDB_txn *t, void *vctx, fg_err *err)
{
    wipe_ctx *c = vctx;
    int rc = FG_OK;
    for (size_t i = 0; i < c->n && !rc; i++)
        rc = free_put(s, t, c->slots[i].file_id, c->slots[i].slot, 0, err);
    return rc;
}

static int collect_dirty(fg_store *s, wipe_ctx *w, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_cursor *c;
    MDB_val k, v;
    size_t cap = 0;
    mdb_cursor_open(t, s->db_free, &c);
    for (int m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (v.mv_size < 2 || !(((uint8_t *)v.mv_data)[1] & FREE_DIRTY))
            continue;
        if (w->n == cap) {
            cap = cap ? cap * 2 : 64;
            slot_ref *p = realloc(w->slots, cap * sizeof *p);
            if (!p) {
                rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
                break;
            }
            w->slots = p;
        }
        w->slots[w->n++] = (slot_ref){be32v(k.mv_data), be32v((uint8_t *)k.mv_data + 4)};
    }
    mdb_cursor_close(c);
    cat_read_end(s, t);
    return rc;
}

/* Wipe the header of every dirty free slot, fdatasync, clear the flags. write_lock held. */
static int wipe_dirty(fg_store *s, fg_err *err)
{
    wipe_ctx w = {NULL, 0};
    int rc = collect_dirty(s, &w, err);
    static const uint8_t zero[FG_STORE_KV_HEADER_SIZE];
    fg_store_kv_page *pg = rc || !w.n ? NULL : calloc(w.n, sizeof *pg);
    if (!rc && w.n && !pg)
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    for (size_t i = 0; !rc && i < w.n; i++) {
        int fd;
        pg[i].file_id = w.slots[i].file_id;
        if ((rc = kv_file_fd(s, w.slots[i].file_id, &fd, err)))
            break;
        int e = io_write_all(s, fd, zero, sizeof zero, kv_slot_offset(s, w.slots[i].slot));
        if (e) {
            char path[4200];
            fg_store_file_path(s, w.slots[i].file_id, 1, path, sizeof path);
            rc = io_fail(err, e, path, "wiping a freed KV page header");
        }
    }
    if (!rc && w.n)
        rc = sync_files(s, w.n, pg, err);
    if (!rc && w.n)
        rc = cat_write(s, clear_txn, &w, err);
    free(pg);
    free(w.slots);
    return rc;
}

int fg_store_kv_free(fg_store *s, const fg_store_kv_key *key, int n_fields, uint64_t *freed,
                     fg_err *err)
{
    if (s->rdonly)
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: store opened read-only", s->dir);
    if (n_fields < 1 || n_fields > 4)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: kv_free: n_fields %d not in 1..4",
                          s->dir, n_fields);
    free_ctx c = {*key, n_fields, 0};
    pthread_mutex_lock(&s->write_lock);
    pool_drop(s); /* the wipe below cleans pooled slots too; reserve afresh afterwards */
    int rc = cat_write(s, free_txn, &c, err);
    if (!rc)
        rc = wipe_dirty(s, err);
    pthread_mutex_unlock(&s->write_lock);
    if (freed)
        *freed = c.freed;
    return rc;
}

int kv_recover(fg_store *s, fg_err *err)
{
    pthread_mutex_lock(&s->write_lock);
    pool_drop(s);
    int rc = wipe_dirty(s, err);
    pthread_mutex_unlock(&s->write_lock);
    return rc;
}
