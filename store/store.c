/* store.c - store life cycle: create, open (with crash recovery), close; store.id; the
 * per-process registry; the cache of mmap'd weight-file readers.
 *
 * Invariants a writable open restores before it returns (SPEC "Crash safety"):
 *   1. Every file the catalog lists exists (else FG_ERR_STORE_MISSING).
 *   2. No file of ours outside the catalog: a weights-/kv- file the catalog does not list was
 *      left by a batch or KV-file creation that never committed; it is removed when it has no
 *      valid header or carries this store's id. A file with another store's id is left alone
 *      (verify reports it as foreign). A meta-NNNNNN-K.blob whose owner weights-NNNNNN.fgt is
 *      not listed is a leftover of such a batch too, and is removed.
 *   3. A KV file is no longer than its committed slot count (an uncommitted extension is cut).
 *   4. No free KV slot is dirty: headers of slots freed or reserved before the crash are wiped
 *      (kv.c), so reindex can never resurrect a freed or uncommitted page.
 * Read-only opens do none of this and need none of it: they see the last committed snapshot.
 * A writable close also wipes dirty slots (best effort), so a cleanly closed store has none and
 * reindex reproduces its catalog exactly.
 *
 * One handle per store per process (LMDB forbids opening one environment twice in a process);
 * the registry is keyed by the directory's device and inode. One writing handle per machine:
 * an flock on store.id, held until close.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_file.h"
#include "fg_bytes.h"
#include "store_int.h"

/* ---- registry: one handle per store per process ---- */
typedef struct reg_ent {
    dev_t dev;
    ino_t ino;
    pid_t pid; /* a forked child does not inherit its parent's handles */
} reg_ent;

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_ent g_reg[64];
static size_t g_reg_n;

static int reg_add(dev_t dev, ino_t ino)
{
    int rc = 0;
    pthread_mutex_lock(&g_reg_lock);
    for (size_t i = 0; i < g_reg_n && !rc; i++)
        if (g_reg[i].dev == dev && g_reg[i].ino == ino && g_reg[i].pid == getpid())
            rc = FG_ERR_STORE_BUSY;
    if (!rc && g_reg_n == sizeof g_reg / sizeof g_reg[0])
        rc = FG_ERR_LIMIT;
    if (!rc)
        g_reg[g_reg_n++] = (reg_ent){dev, ino, getpid()};
    pthread_mutex_unlock(&g_reg_lock);
    return rc;
}

static void reg_del(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&g_reg_lock);
    for (size_t i = 0; i < g_reg_n; i++) {
        if (g_reg[i].dev == dev && g_reg[i].ino == ino && g_reg[i].pid == getpid()) {
            g_reg[i] = g_reg[--g_reg_n];
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
}

/* ---- store.id ---- */

static void id_encode(const fg_store *s, uint8_t b[STORE_ID_SIZE])
{
    memset(b, 0, STORE_ID_SIZE);
    memcpy(b, STORE_ID_MAGIC, 8);
    fg_put16(b + 8, 1);
    fg_put16(b + 10, STORE_ID_SIZE);
    fg_put32(b + 12, s->page_size);
    fg_put32(b + 16, s->pages_per_file);
    fg_put64(b + 24, s->max_file_bytes);
    memcpy(b + 32, s->uuid, 16);
    fg_put64(b + 56, XXH3_64bits(b, 56));
}

static void hex_uuid(const uint8_t u[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", u[i]);
}

int store_id_read(const char *dir, fg_store *s, fg_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" STORE_ID_FILE, dir);
    uint8_t b[STORE_ID_SIZE];
    int fd, rc = fg_open_regular(path, O_RDONLY, &fd, err); /* a FIFO is named, not waited on */
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "%s: not an fg store (no " STORE_ID_FILE
                          ")", dir);
    if (rc)
        return rc;
    ssize_t n = pread(fd, b, sizeof b, 0);
    int e = errno;
    close(fd);
    if (n < 0)
        return fg_err_sys(err, FG_ERR_IO, e, "%s: reading", path);
    if (n != (ssize_t)sizeof b)
        return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "%s: not an fg store id file (short read: "
                          "got %zd of %u bytes)", path, n, STORE_ID_SIZE);
    if (memcmp(b, STORE_ID_MAGIC, 8) ||
        fg_le64(b + 56) != XXH3_64bits(b, 56))
        return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "%s: not an fg store id file (bad magic "
                          "or checksum)", path);
    if (fg_le16(b + 8) != 1)
        return fg_err_set(err, FG_ERR_VERSION, "%s: store format %u, this library reads 1", path,
                          fg_le16(b + 8));
    s->page_size = fg_le32(b + 12);
    s->pages_per_file = fg_le32(b + 16);
    s->max_file_bytes = fg_le64(b + 24);
    memcpy(s->uuid, b + 32, 16);
    hex_uuid(s->uuid, s->uuid_hex);
    if (s->page_size < FG_STORE_KV_PAGE_MIN || s->page_size > FG_STORE_KV_PAGE_MAX ||
        s->page_size % 4096 || !s->pages_per_file || s->pages_per_file > (1u << 24) ||
        !s->max_file_bytes)
        return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "%s: store parameters out of range", path);
    return FG_OK;
}

/* Write store.id atomically: tmp file, fdatasync, rename, fsync the directory. */
static int store_id_write(fg_store *s, fg_err *err)
{
    char tmp[4200], path[4200];
    store_path(s, tmp, sizeof tmp, STORE_ID_FILE ".tmp");
    store_path(s, path, sizeof path, STORE_ID_FILE);
    uint8_t b[STORE_ID_SIZE];
    id_encode(s, b);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return io_fail(err, -errno, tmp, "cannot create");
    int e = io_write_all(s, fd, b, sizeof b, 0);
    if (!e)
        e = io_sync(s, fd);
    close(fd);
    if (!e && rename(tmp, path))
        e = -errno;
    if (!e)
        e = io_sync_dir(s->dir);
    if (e) {
        unlink(tmp);
        return io_fail(err, e, path, "writing");
    }
    return FG_OK;
}

/* ---- handle ---- */

static fg_store *store_new(const char *dir, const fg_store_opts *o)
{
    fg_store *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return NULL;
    }
    size_t n = strlen(s->dir);
    while (n > 1 && s->dir[n - 1] == '/')
        s->dir[--n] = '\0';
    s->lock_fd = -1;
    s->cat_name = STORE_CATALOG_DIR;
    s->io = o && o->io ? *o->io : store_posix_io;
    s->map_max = o && o->map_max ? o->map_max : 64ull << 30;
    pthread_rwlock_init(&s->map_lock, NULL);
    pthread_mutex_init(&s->write_lock, NULL);
    pthread_mutex_init(&s->cache_lock, NULL);
    return s;
}

void fg_store_close(fg_store *s)
{
    if (!s)
        return;
    if (s->batch)
        fg_store_batch_abort(s->batch);
    if (s->ready && !s->rdonly && s->env && s->lock_fd >= 0)
        (void)kv_recover(s, NULL); /* best effort: a clean close leaves no dirty slot */
    for (size_t i = 0; i < s->n_readers; i++)
        fg_fgt_close(s->readers[i].r);
    free(s->readers);
    free(s->pool);
    kv_files_close(s);
    cat_env_close(s);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the flock */
    if (s->ino)
        reg_del(s->dev, s->ino);
    pthread_rwlock_destroy(&s->map_lock);
    pthread_mutex_destroy(&s->write_lock);
    pthread_mutex_destroy(&s->cache_lock);
    free(s->dir);
    free(s);
}

const char *fg_store_dir(const fg_store *s)
{
    return s->dir;
}

static int check_opts(const fg_store_opts *o, const char *dir, fg_err *err)
{
    if (o && o->kv_page_size && (o->kv_page_size % 4096 || o->kv_page_size < FG_STORE_KV_PAGE_MIN ||
                                 o->kv_page_size > FG_STORE_KV_PAGE_MAX))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: kv_page_size %u must be a multiple of "
                          "4096 in [4096, %u]", dir, o->kv_page_size, FG_STORE_KV_PAGE_MAX);
    if (o && o->kv_pages_per_file > (1u << 24))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: kv_pages_per_file %u exceeds 2^24", dir,
                          o->kv_pages_per_file);
    if (o && o->map_initial && (o->map_initial < 65536 || (o->map_max && o->map_initial > o->map_max)))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: map_initial must be >= 64 KiB and <= "
                          "map_max", dir);
    return FG_OK;
}

#define NFS_SUPER_MAGIC_ 0x6969

/* Register the handle and, for a writer, take the store's write lock. LMDB's locks do not
 * work over NFS, so a store there is refused. */
static int store_claim(fg_store *s, fg_err *err)
{
    struct stat sb;
    struct statfs fs;
    if (stat(s->dir, &sb))
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, errno, "%s",
                          s->dir);
    if (statfs(s->dir, &fs) == 0 && fs.f_type == NFS_SUPER_MAGIC_)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: store on NFS: LMDB's locking is not safe "
                          "there; use a local file system", s->dir);
    if (reg_add(sb.st_dev, sb.st_ino))
        return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: store already open in this process (one "
                          "handle per process)", s->dir);
    s->dev = sb.st_dev;
    s->ino = sb.st_ino;
    if (s->rdonly)
        return FG_OK;
    char cat[4200];
    store_path(s, cat, sizeof cat, STORE_CATALOG_DIR);
    if (access(s->dir, W_OK) || (access(cat, F_OK) == 0 && access(cat, W_OK)))
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: directory is not writable (open the "
                          "store with FG_STORE_RDONLY)", s->dir);
    char idp[4200];
    store_path(s, idp, sizeof idp, STORE_ID_FILE);
    s->lock_fd = open(idp, O_RDONLY | O_CLOEXEC);
    if (s->lock_fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open", idp);
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB))
        return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: another process has the store open for "
                          "writing", s->dir);
    return FG_OK;
}

static int init_catalog(fg_store *s, MDB_txn *t, void *ctx, fg_err *err)
{
    (void)ctx;
    store_state st = {1, 1, 0};
    int rc = cat_version_put(s, t, err);
    return rc ? rc : cat_state_put(s, t, &st, err);
}

static int dir_prepare(const char *dir, fg_err *err)
{
    if (mkdir(dir, 0755) == 0)
        return FG_OK;
    if (errno == EACCES || errno == EROFS)
        return fg_err_sys(err, FG_ERR_STORE_READONLY, errno, "%s: cannot create the store", dir);
    if (errno != EEXIST)
        return fg_err_sys(err, errno == ENOSPC ? FG_ERR_NO_SPACE : FG_ERR_IO, errno,
                          "%s: cannot create the store", dir);
    struct stat st;
    if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode) && stat(dir, &st))
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot create the store there: a "
                          "symbolic link to nothing", dir);
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return fg_err_set(err, FG_ERR_EXISTS, "%s: cannot create the store there: %s, not a "
                          "directory", dir, fg_file_kind(st.st_mode));
    DIR *d = opendir(dir);
    if (!d)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot read the directory", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    if (n)
        return fg_err_set(err, FG_ERR_EXISTS, "%s: directory is not empty; refusing to create a "
                          "store there", dir);
    if (access(dir, W_OK))
        return fg_err_set(err, FG_ERR_STORE_READONLY, "%s: directory is not writable", dir);
    return FG_OK;
}

int fg_store_create(const char *dir, const fg_store_opts *o, fg_store **out, fg_err *err)
{
    int rc = check_opts(o, dir, err);
    if (rc || (rc = dir_prepare(dir, err)))
        return rc;
    fg_store *s = store_new(dir, o);
    if (!s)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
    s->page_size = o && o->kv_page_size ? o->kv_page_size : 65536;
    s->pages_per_file = o && o->kv_pages_per_file ? o->kv_pages_per_file : 16384;
    s->max_file_bytes = o && o->max_file_bytes ? o->max_file_bytes : 4ull << 30;
    if (getrandom(s->uuid, 16, 0) != 16) {
        fg_store_close(s);
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: getrandom", dir);
    }
    hex_uuid(s->uuid, s->uuid_hex);
    uint64_t map0 = o && o->map_initial ? o->map_initial : 1u << 20;
    rc = store_id_write(s, err);
    if (!rc)
        rc = store_claim(s, err);
    if (!rc)
        rc = cat_env_open(s, 1, map0, err);
    if (!rc)
        rc = cat_write(s, init_catalog, NULL, err);
    if (rc) {
        fg_store_close(s);
        return rc;
    }
    s->st = (store_state){1, 1, 0};
    s->ready = 1;
    *out = s;
    return FG_OK;
}

/* ---- open and recovery ---- */

/* 1 when path is a file of this store, 0 when it is foreign, -1 when it has no valid header. */
static int file_owner(fg_store *s, const char *path, int kv)
{
    if (kv) {
        uint8_t b[KVF_HEADER_USED];
        int fd;
        if (fg_open_regular(path, O_RDONLY, &fd, NULL))
            return -1;
        ssize_t n = pread(fd, b, sizeof b, 0);
        close(fd);
        if (n != (ssize_t)sizeof b || memcmp(b, KVF_MAGIC, 8) ||
            fg_le64(b + 56) != XXH3_64bits(b, 56))
            return -1;
        return memcmp(b + 24, s->uuid, 16) == 0;
    }
    fg_fgt_reader *r;
    if (fg_fgt_open(path, 0, &r, NULL))
        return -1;
    fg_meta_info m;
    int own = fg_fgt_meta_find(r, "fg.store.uuid", &m) == FG_OK && m.type == FG_META_STRING &&
              strcmp(m.data, s->uuid_hex) == 0;
    fg_fgt_close(r);
    return own;
}

static int listed(fg_store *s, MDB_txn *t, uint32_t id, file_rec *f)
{
    uint8_t k[4];
    MDB_val v;
    rec_file_key(id, k);
    return cat_get(s, t, s->db_files, k, 4, &v, NULL) == FG_OK && rec_file_decode(&v, f) == FG_OK;
}

/* Invariants 2 and 3 (see the top of the file). */
static int recover_files(fg_store *s, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    DIR *d = opendir(s->dir);
    if (!d) {
        cat_read_end(s, t);
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot read", s->dir);
    }
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d))) {
        int kv;
        uint32_t id = store_parse_name(e->d_name, &kv);
        char path[4200];
        store_path(s, path, sizeof path, e->d_name);
        if (!strcmp(e->d_name, STORE_ID_FILE ".tmp")) {
            removed += unlink(path) == 0;
            continue;
        }
        file_rec f;
        uint32_t owner = metafile_parse(e->d_name); /* a batch's metadata file */
        if (owner && !listed(s, t, owner, &f))
            removed += unlink(path) == 0;
        if (!id)
            continue;
        if (listed(s, t, id, &f)) {
            uint64_t want = KVF_HEADER_SIZE + f.size * s->page_size;
            struct stat sb;
            if (kv && f.kind == FILE_KV && stat(path, &sb) == 0 && (uint64_t)sb.st_size > want)
                (void)truncate(path, (off_t)want);
            continue;
        }
        if (file_owner(s, path, kv) != 0)
            removed += unlink(path) == 0;
    }
    closedir(d);
    cat_read_end(s, t);
    if (removed)
        (void)io_sync_dir(s->dir);
    return FG_OK;
}

/* Invariant 1: every listed file exists. */
typedef struct missing_ctx {
    fg_store *s;
    char path[4200]; /* the first missing file */
} missing_ctx;

static int file_present(void *ctx, const fg_store_file *f)
{
    missing_ctx *m = ctx;
    fg_store_file_path(m->s, f->id, f->kv, m->path, sizeof m->path);
    return access(m->path, F_OK) ? FG_ERR_STORE_MISSING : 0;
}

static int check_missing(fg_store *s, fg_err *err)
{
    missing_ctx m = {s, ""};
    int rc = fg_store_file_iter(s, file_present, &m, err);
    if (rc == FG_ERR_STORE_MISSING)
        fg_err_set(err, rc, "%s: listed in the catalog but missing", m.path);
    return rc;
}

static int load_state(fg_store *s, fg_err *err)
{
    MDB_txn *t;
    int rc = cat_read_begin(s, &t, err);
    if (rc)
        return rc;
    rc = cat_version_check(s, t, err);
    if (!rc)
        rc = cat_state_get(s, t, &s->st, err);
    cat_read_end(s, t);
    return rc;
}

int fg_store_open(const char *dir, unsigned flags, const fg_store_opts *o, fg_store **out,
                  fg_err *err)
{
    int rc = check_opts(o, dir, err);
    if (rc)
        return rc;
    fg_store *s = store_new(dir, o);
    if (!s)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
    s->rdonly = (flags & FG_STORE_RDONLY) != 0;
    rc = store_id_read(s->dir, s, err);
    if (!rc)
        rc = store_claim(s, err);
    if (!rc)
        rc = cat_env_open(s, 0, 0, err);
    if (!rc)
        rc = load_state(s, err);
    if (!rc && !s->rdonly)
        rc = recover_files(s, err);
    if (!rc)
        rc = check_missing(s, err);
    if (!rc && !s->rdonly)
        rc = kv_recover(s, err);
    if (rc) {
        fg_store_close(s);
        return rc;
    }
    s->ready = 1;
    *out = s;
    return FG_OK;
}

/* ---- weight-file readers, opened on first use and kept until close ---- */

static int open_reader(fg_store *s, uint32_t file_id, fg_fgt_reader **r, fg_err *err)
{
    char path[4200];
    fg_store_file_path(s, file_id, 0, path, sizeof path);
    if (access(path, F_OK))
        return fg_err_set(err, FG_ERR_STORE_MISSING, "%s: listed in the catalog but missing",
                          path);
    int rc = fg_fgt_open(path, 0, r, err);
    if (rc)
        return rc;
    file_rec f;
    uint32_t said;
    rc = weights_file_ident(s, *r, path, &f, &said, err);
    if (rc == FG_OK && said != file_id)
        rc = fg_err_set(err, FG_ERR_STORE_CATALOG, "%s: the file says it is weights-%06u.fgt: "
                        "copied or renamed from elsewhere (run fg-inspect --verify %s)", path,
                        said, s->dir);
    if (rc) {
        fg_fgt_close(*r);
        *r = NULL;
    }
    return rc;
}

int store_reader_get(fg_store *s, uint32_t file_id, fg_fgt_reader **r, fg_err *err)
{
    pthread_mutex_lock(&s->cache_lock);
    for (size_t i = 0; i < s->n_readers; i++) {
        if (s->readers[i].id == file_id) {
            *r = s->readers[i].r;
            pthread_mutex_unlock(&s->cache_lock);
            return FG_OK;
        }
    }
    reader_ent *p = realloc(s->readers, (s->n_readers + 1) * sizeof *p);
    int rc = p ? open_reader(s, file_id, r, err) : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (p)
        s->readers = p;
    if (rc == FG_OK)
        s->readers[s->n_readers++] = (reader_ent){file_id, *r};
    pthread_mutex_unlock(&s->cache_lock);
    return rc;
}

int fg_store_file_path(const fg_store *s, uint32_t file_id, int kv, char *buf, size_t n)
{
    char name[64];
    store_file_name(file_id, kv, name, sizeof name);
    int len = snprintf(buf, n, "%s/%s", s->dir, name);
    return len < 0 || (size_t)len >= n ? FG_ERR_LIMIT : FG_OK;
}

/* A writable handle without a catalog, for reindex: store.id, registry, write lock. */
int store_reindex_handle(const char *dir, const fg_store_opts *o, fg_store **out, fg_err *err)
{
    fg_store *s = store_new(dir, o);
    if (!s)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
    int rc = store_id_read(s->dir, s, err);
    if (!rc)
        rc = store_claim(s, err);
    if (rc) {
        fg_store_close(s);
        return rc;
    }
    *out = s;
    return FG_OK;
}
