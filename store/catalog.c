/* catalog.c - the LMDB environment of a store, used the way LMDB's authors advise.
 *
 * - One environment per process per store (store.c keeps a registry and refuses a second
 *   open); MDB_NOTLS so read transactions are not tied to threads.
 * - mdb_reader_check at every open clears reader slots left by dead processes, which would
 *   otherwise pin old pages and make the map grow without bound.
 * - The map starts small and grows in steps: when a write transaction hits MDB_MAP_FULL it is
 *   aborted, the map is enlarged (doubling, at most +1 GiB a step, never past map_max) while no
 *   transaction of this process is open (map_lock held exclusively), and the transaction's
 *   function is run again. A reader that meets MDB_MAP_RESIZED (another process grew the map)
 *   adopts the new size with mdb_env_set_mapsize(env, 0) and retries.
 * - A read-only handle on a catalog whose lock file it cannot write (a store the user may read
 *   but not write, or a read-only file system) opens with MDB_NOLOCK: no reader slot, so a
 *   writer in another process is not held back from reusing pages this reader may still read.
 * - Before LMDB maps an existing data.mdb, lmdb_check.c reads and checks it: a truncated or
 *   damaged catalog is FG_ERR_STORE_CATALOG telling to reindex, never a SIGBUS.
 * - Errors are mapped to fg codes: MDB_MAP_FULL at the limit -> FG_ERR_STORE_MAP_FULL,
 *   ENOSPC -> FG_ERR_NO_SPACE, EACCES/EROFS -> FG_ERR_STORE_READONLY, others -> STORE_LMDB.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fg_file.h"
#include "fg_bytes.h"
#include "store_int.h"

#define MAP_STEP_MAX (1ull << 30)
#define STATE_KEY "state"
#define VERSION_KEY "version"

/* LMDB reports a short write as EIO, which is what a full disk or a file-size limit produces.
 * Tell that case apart by looking: under 1 MiB free, or data.mdb at the RLIMIT_FSIZE limit. */
static int space_exhausted(fg_store *s)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s/data.mdb", s->dir, s->cat_name);
    struct statvfs vf;
    struct stat sb;
    struct rlimit rl;
    if (statvfs(path, &vf) == 0 && (uint64_t)vf.f_bavail * vf.f_frsize < (1u << 20))
        return 1;
    return getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
           stat(path, &sb) == 0 && (uint64_t)sb.st_size + (1u << 20) >= rl.rlim_cur;
}

int cat_fail(fg_store *s, fg_err *err, int rc, const char *what)
{
    if (rc == EIO && space_exhausted(s))
        return fg_err_sys(err, FG_ERR_NO_SPACE, ENOSPC, "%s/%s: %s: short write, the disk or the "
                          "file-size limit is full", s->dir, s->cat_name, what);
    if (rc == MDB_MAP_FULL)
        return fg_err_set(err, FG_ERR_STORE_MAP_FULL,
                          "%s/" STORE_CATALOG_DIR ": %s: catalog map full at its limit of %llu "
                          "bytes (raise map_max)", s->dir, what, (unsigned long long)s->map_max);
    if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG)
        return fg_err_sys(err, FG_ERR_NO_SPACE, rc, "%s/" STORE_CATALOG_DIR ": %s", s->dir, what);
    if (rc == EACCES || rc == EROFS || rc == EPERM)
        return fg_err_sys(err, FG_ERR_STORE_READONLY, rc, "%s/" STORE_CATALOG_DIR ": %s", s->dir,
                          what);
    if (rc == MDB_NOTFOUND)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: %s: not found", s->dir, what);
    if (rc > 0)
        return fg_err_sys(err, FG_ERR_IO, rc, "%s/" STORE_CATALOG_DIR ": %s", s->dir, what);
    return fg_err_set(err, FG_ERR_STORE_LMDB, "%s/" STORE_CATALOG_DIR ": %s: %s", s->dir, what,
                      mdb_strerror(rc));
}

static int open_dbis(fg_store *s, int create, fg_err *err)
{
    MDB_txn *t;
    unsigned fl = create ? MDB_CREATE : 0;
    int rc = mdb_txn_begin(s->env, NULL, s->rdonly ? MDB_RDONLY : 0, &t);
    if (rc)
        return cat_fail(s, err, rc, "begin");
    static const char *names[] = {"store", "tensors", "files", "meta", "kv_pages", "kv_free"};
    MDB_dbi *dbis[] = {&s->db_store, &s->db_tensors, &s->db_files, &s->db_meta, &s->db_kv,
                       &s->db_free};
    for (int i = 0; i < 6 && !rc; i++)
        rc = mdb_dbi_open(t, names[i], fl, dbis[i]);
    if (rc) {
        mdb_txn_abort(t);
        if (rc == MDB_NOTFOUND)
            return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s/" STORE_CATALOG_DIR ": database "
                              "missing: not a store catalog (run reindex)", s->dir);
        return cat_fail(s, err, rc, "opening databases");
    }
    rc = mdb_txn_commit(t);
    return rc ? cat_fail(s, err, rc, "opening databases") : FG_OK;
}

static int fd_read(void *ctx, void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(*(int *)ctx, (uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* data.mdb checked before LMDB maps it (lmdb_check.c): a truncated or damaged catalog is an
 * error that says to reindex, never a SIGBUS inside LMDB. */
static int check_data_file(fg_store *s, const char *data, fg_err *err)
{
    fg_err oe;
    int fd; /* not a regular file (a FIFO is not waited on): damaged, below */
    if (fg_open_regular(data, O_RDONLY, &fd, &oe) && oe.sys_errno)
        return fg_err_sys(err, oe.sys_errno == EACCES ? FG_ERR_STORE_READONLY : FG_ERR_IO,
                          oe.sys_errno, "%s: cannot open", data);
    struct stat sb;
    char why[256] = "";
    int bad = fd < 0 || fstat(fd, &sb) ||
              cat_file_check(fd_read, &fd, (uint64_t)sb.st_size, why, sizeof why);
    if (fd >= 0)
        close(fd);
    if (bad)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: damaged catalog (%s): rebuild it from "
                          "the store's files with fg-inspect --reindex %s", data,
                          why[0] ? why : "not a regular file", s->dir);
    return FG_OK;
}

/* Whether LMDB can open (or create) the lock file of the catalog in dir for writing: a reader
 * needs it to take a reader slot. access() asks with the real ids, which is what open uses
 * for a program that is not set-user-id. */
static int lock_writable(const char *dir)
{
    char lock[4300];
    snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
    if (access(lock, F_OK) == 0)
        return access(lock, W_OK) == 0;
    return access(dir, W_OK) == 0;
}

int cat_env_open(fg_store *s, int create, uint64_t map_initial, fg_err *err)
{
    char path[4200];
    store_path(s, path, sizeof path, s->cat_name);
    if (create && mkdir(path, 0755) && errno != EEXIST)
        return fg_err_sys(err, errno == ENOSPC ? FG_ERR_NO_SPACE : FG_ERR_IO, errno,
                          "%s: cannot create", path);
    struct stat sb;
    char data[4300];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    if (!create && stat(data, &sb))
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog missing: rebuild it from the "
                          "store's files with fg-inspect --reindex %s", path, s->dir);
    int rc = create ? FG_OK : check_data_file(s, data, err);
    if (rc)
        return rc;
    rc = mdb_env_create(&s->env);
    if (!rc)
        rc = mdb_env_set_maxdbs(s->env, 8);
    if (!rc && create)
        rc = mdb_env_set_mapsize(s->env, map_initial);
    unsigned fl = MDB_NOTLS | (s->rdonly ? MDB_RDONLY : 0);
    if (s->rdonly && !lock_writable(path)) {
        fl |= MDB_NOLOCK; /* a store we may read but not write: no reader slot to take */
        s->no_lock = 1;
    }
    if (!rc)
        rc = mdb_env_open(s->env, path, fl, 0644);
    if (rc) {
        mdb_env_close(s->env);
        s->env = NULL;
        if (rc == EACCES && !s->rdonly)
            return fg_err_sys(err, FG_ERR_STORE_READONLY, rc, "%s: cannot open the catalog for "
                              "writing (open the store read-only)", path);
        return cat_fail(s, err, rc, "opening the catalog");
    }
    int dead = 0;
    mdb_reader_check(s->env, &dead);
    s->stale_readers = dead;
    return open_dbis(s, create, err);
}

void cat_env_close(fg_store *s)
{
    if (s->env)
        mdb_env_close(s->env);
    s->env = NULL;
}

/* Enlarge the map one step; FG_ERR_STORE_MAP_FULL at the limit. map_lock held exclusively. */
static int grow_map(fg_store *s, fg_err *err)
{
    MDB_envinfo info;
    mdb_env_info(s->env, &info);
    uint64_t cur = info.me_mapsize;
    if (cur >= s->map_max)
        return cat_fail(s, err, MDB_MAP_FULL, "writing");
    uint64_t step = cur < MAP_STEP_MAX ? cur : MAP_STEP_MAX;
    uint64_t next = cur + step > s->map_max ? s->map_max : cur + step;
    int rc = mdb_env_set_mapsize(s->env, next);
    return rc ? cat_fail(s, err, rc, "growing the map") : FG_OK;
}

static int begin(fg_store *s, unsigned flags, MDB_txn **t, fg_err *err)
{
    int rc = mdb_txn_begin(s->env, NULL, flags, t);
    if (rc == MDB_MAP_RESIZED) {
        pthread_rwlock_unlock(&s->map_lock);
        pthread_rwlock_wrlock(&s->map_lock);
        rc = mdb_env_set_mapsize(s->env, 0);
        pthread_rwlock_unlock(&s->map_lock);
        pthread_rwlock_rdlock(&s->map_lock);
        if (!rc)
            rc = mdb_txn_begin(s->env, NULL, flags, t);
    }
    return rc ? cat_fail(s, err, rc, "beginning a transaction") : FG_OK;
}

int cat_write(fg_store *s, cat_txn_fn fn, void *ctx, fg_err *err)
{
    if (s->rdonly)
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: store opened read-only", s->dir);
    for (;;) {
        MDB_txn *t;
        pthread_rwlock_rdlock(&s->map_lock);
        int rc = begin(s, 0, &t, err);
        if (rc) {
            pthread_rwlock_unlock(&s->map_lock);
            return rc;
        }
        rc = fn(s, t, ctx, err);
        if (rc == FG_OK) {
            int mrc = mdb_txn_commit(t);
            rc = mrc ? cat_fail(s, err, mrc, "committing") : FG_OK;
        } else {
            mdb_txn_abort(t);
        }
        pthread_rwlock_unlock(&s->map_lock);
        if (rc != FG_ERR_STORE_MAP_FULL)
            return rc;
        pthread_rwlock_wrlock(&s->map_lock);
        rc = grow_map(s, err);
        pthread_rwlock_unlock(&s->map_lock);
        if (rc)
            return rc;
    }
}

int cat_read_begin(fg_store *s, MDB_txn **t, fg_err *err)
{
    pthread_rwlock_rdlock(&s->map_lock);
    int rc = begin(s, MDB_RDONLY, t, err);
    if (rc)
        pthread_rwlock_unlock(&s->map_lock);
    return rc;
}

void cat_read_end(fg_store *s, MDB_txn *t)
{
    mdb_txn_abort(t);
    pthread_rwlock_unlock(&s->map_lock);
}

int cat_walk(fg_store *s, MDB_dbi db, cat_walk_fn fn, void *ctx, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    MDB_cursor *c;
    MDB_val k, v;
    int m = mdb_cursor_open(t, db, &c);
    if (m) {
        cat_read_end(s, t);
        return cat_fail(s, err, m, "opening a cursor");
    }
    for (m = mdb_cursor_get(c, &k, &v, MDB_FIRST); !m && !rc;
         m = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        rc = fn(ctx, &k, &v, err);
    mdb_cursor_close(c);
    cat_read_end(s, t);
    return rc;
}

int cat_put(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, const void *v,
            size_t vn, fg_err *err)
{
    MDB_val key = {kn, (void *)k}, val = {vn, (void *)v};
    int rc = mdb_put(t, db, &key, &val, 0);
    return rc ? cat_fail(s, err, rc, "writing a record") : FG_OK;
}

int cat_del(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, fg_err *err)
{
    MDB_val key = {kn, (void *)k};
    int rc = mdb_del(t, db, &key, NULL);
    return rc && rc != MDB_NOTFOUND ? cat_fail(s, err, rc, "deleting a record") : FG_OK;
}

int cat_get(fg_store *s, MDB_txn *t, MDB_dbi db, const void *k, size_t kn, MDB_val *v,
            fg_err *err)
{
    MDB_val key = {kn, (void *)k};
    int rc = mdb_get(t, db, &key, v);
    if (rc == MDB_NOTFOUND)
        return FG_ERR_NOT_FOUND;
    return rc ? cat_fail(s, err, rc, "reading a record") : FG_OK;
}

int cat_state_get(fg_store *s, MDB_txn *t, store_state *st, fg_err *err)
{
    MDB_val v;
    int rc = cat_get(s, t, s->db_store, STATE_KEY, 5, &v, err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog has no state record", s->dir);
    if (rc)
        return rc;
    const uint8_t *p = v.mv_data;
    if (v.mv_size != 24 || p[0] != REC_VERSION)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog state record is damaged",
                          s->dir);
    st->next_file_id = fg_le32(p + 4);
    st->next_batch = fg_le64(p + 8);
    st->kv_gen = fg_le64(p + 16);
    return FG_OK;
}

int cat_state_put(fg_store *s, MDB_txn *t, const store_state *st, fg_err *err)
{
    uint8_t p[24] = {REC_VERSION};
    fg_put32(p + 4, st->next_file_id);
    fg_put64(p + 8, st->next_batch);
    fg_put64(p + 16, st->kv_gen);
    return cat_put(s, t, s->db_store, STATE_KEY, 5, p, sizeof p, err);
}

int cat_version_put(fg_store *s, MDB_txn *t, fg_err *err)
{
    uint8_t p[24] = {0};
    fg_put32(p, STORE_CATALOG_VERSION);
    memcpy(p + 8, s->uuid, 16);
    return cat_put(s, t, s->db_store, VERSION_KEY, 7, p, sizeof p, err);
}

int cat_version_check(fg_store *s, MDB_txn *t, fg_err *err)
{
    MDB_val v;
    int rc = cat_get(s, t, s->db_store, VERSION_KEY, 7, &v, err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog has no version record (run "
                          "reindex)", s->dir);
    if (rc)
        return rc;
    const uint8_t *p = v.mv_data;
    if (v.mv_size != 24)
        return fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: catalog version record damaged",
                          s->dir);
    if (fg_le32(p) != STORE_CATALOG_VERSION)
        return fg_err_set(err, FG_ERR_VERSION, "%s: catalog version %u, this library reads %u",
                          s->dir, fg_le32(p), STORE_CATALOG_VERSION);
    if (memcmp(p + 8, s->uuid, 16))
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s/" STORE_CATALOG_DIR ": catalog belongs "
                          "to another store (id differs from store.id)", s->dir);
    return FG_OK;
}
