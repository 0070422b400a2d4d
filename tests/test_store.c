/* test_store.c - Check suite for store/: create/open, batches and lookups, rotation, metadata,
 * KV pages (copy-on-write, torn and stale detection, persistence), verify, reindex (same
 * answers as the catalog it replaces), LMDB map growth and map-full, read-only directories (as
 * nobody when root: no write access, no lock file) and concurrent read-only readers, the write
 * lock, missing and foreign files (another store's file of the same layout, a file copied over
 * another, a moved catalog offset), damaged catalogs (truncated, zeroed, random: an error, never
 * a signal), short-read messages, and fault injection (EIO, ENOSPC, short writes) through the
 * store's I/O table (metadata checksums and values over 16 MiB: test_store_meta.c). Each test
 * runs in its own forked process with its own temp dir. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lmdb.h>

#include "store_testlib.h"

#include "store_fixture.h"

static int count_cb(void *ctx, const fg_store_tensor *t)
{
    (void)t;
    (*(int *)ctx)++;
    return 0;
}

static int check_cb(void *ctx, const fg_store_tensor *t)
{
    return st_check_tensor(ctx, t, &g_err);
}

/* ---- create / open ---- */

START_TEST(test_create_open)
{
    fg_store_opts o = {.kv_page_size = 8192, .max_file_bytes = 1 << 20};
    fg_store *s = make(&o);
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.kv_page_size, 8192);
    ck_assert_uint_eq(info.n_tensors, 0);
    ck_assert_int_eq(strlen(info.uuid), 32);
    s = reopen(s, 0);
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.max_file_bytes, 1 << 20);
    fg_store_close(s);
    /* not a store, non-empty dir, bad options */
    fg_store *t;
    ck_assert_int_eq(fg_store_open(tu_path(""), 0, NULL, &t, &g_err), FG_ERR_STORE_NOT_STORE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "not an fg store"));
    ck_assert_int_eq(fg_store_create(g_dir, NULL, &t, &g_err), FG_ERR_EXISTS);
    fg_store_opts bad = {.kv_page_size = 5000};
    ck_assert_int_eq(fg_store_create(tu_path("x"), &bad, &t, &g_err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "kv_page_size"));
    /* damaged store.id */
    int fd = open(tu_path("store/store.id"), O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "X", 1, 20), 1);
    close(fd);
    ck_assert_int_eq(fg_store_open(g_dir, 0, NULL, &t, &g_err), FG_ERR_STORE_NOT_STORE);
    ck_assert_str_ne(fg_strerror(FG_ERR_STORE_NOT_STORE), "unknown error");
    for (int c = -48; c <= -40; c++)
        ck_assert_str_ne(fg_strerror(c), "unknown error");
}
END_TEST

START_TEST(test_one_handle_and_write_lock)
{
    fg_store *s = make(NULL), *t;
    ck_assert_int_eq(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &t, &g_err), FG_ERR_STORE_BUSY);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "this process"));
    pid_t pid = fork();
    if (pid == 0) {
        int rc = fg_store_open(g_dir, 0, NULL, &t, &g_err);
        int ro = fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &t, &g_err);
        _exit(rc == FG_ERR_STORE_BUSY && ro == FG_OK ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "second writer not refused");
    fg_store_close(s);
}
END_TEST

static int die_cb(void *ctx, const fg_store_tensor *t)
{
    (void)ctx;
    (void)t;
    kill(getpid(), SIGKILL); /* dies inside a read transaction: a stale reader slot */
    return 0;
}

START_TEST(test_stale_readers_cleared)
{
    fg_store *s = make(NULL);
    add_batch(s, "r", 1, 16);
    fg_store_close(s);
    /* A live reader keeps the environment open (else the next opener resets the reader table
     * and there is nothing to clear); a second reader dies inside a transaction. */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t holder = fork();
    if (holder == 0) {
        if (fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err) == FG_OK)
            ck_assert_int_eq(write(fds[1], "r", 1), 1);
        pause();
        _exit(0);
    }
    char c;
    ck_assert_int_eq(read(fds[0], &c, 1), 1);
    pid_t pid = fork();
    if (pid == 0) {
        if (fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err) == FG_OK)
            fg_store_tensor_iter(s, die_cb, NULL, &g_err);
        _exit(1);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    kill(holder, SIGKILL);
    waitpid(holder, &st, 0);
    ck_assert_uint_eq(info.stale_readers, 1);
    fg_store_close(s);
}
END_TEST

/* ---- tensors ---- */

START_TEST(test_import_lookup)
{
    fg_store *s = make(NULL);
    add_batch(s, "layer0", 3, 40);
    fg_store_tensor *t;
    OK(fg_store_tensor_get(s, "layer0.1", &t, &g_err));
    ck_assert_str_eq(t->name, "layer0.1");
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_uint_eq(t->dims[0], 40);
    ck_assert_uint_eq(t->dims[1], 64);
    ck_assert_uint_eq(t->n_chunks, 3);
    ck_assert_uint_eq(t->chunks[2].n_rows, 8);
    ck_assert_uint_eq(t->payload_bytes, 40 * 64 * 4);
    ck_assert_int_eq(t->codec.id, FG_CODEC_F32);
    ck_assert_int_eq(st_check_tensor(s, t, &g_err), 0);
    fg_store_tensor_free(t);
    ck_assert_int_eq(fg_store_tensor_get(s, "nope", &t, &g_err), FG_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "'nope'"));
    void *m;
    size_t len;
    OK(fg_store_meta_get(s, "cfg.layer0", &m, &len, &g_err));
    ck_assert_uint_eq(len, 6);
    ck_assert_int_eq(memcmp(m, "layer0", 6), 0);
    free(m);
    /* duplicate across batches, and within one */
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    ck_assert_int_eq(st_put_tensor(b, "layer0.0", 4, 64, 4, &g_err), FG_ERR_DUPLICATE);
    OK(st_put_tensor(b, "new", 4, 64, 4, &g_err));
    ck_assert_int_eq(st_put_tensor(b, "new", 4, 64, 4, &g_err), FG_ERR_DUPLICATE);
    fg_store_batch_abort(b);
    ck_assert_int_eq(fg_store_tensor_get(s, "new", &t, &g_err), FG_ERR_NOT_FOUND);
    /* a refused descriptor is not fatal to the batch */
    OK(fg_store_batch_begin(s, &b, &g_err));
    uint64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    fg_fgt_tensor_desc bad = {"nine.dims", fg_codec_float(FG_CODEC_F32), 9, dims, NULL, 0};
    ck_assert_int_eq(fg_store_batch_begin_tensor(b, &bad, &g_err), FG_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "nine.dims"));
    OK(st_put_tensor(b, "fine", 4, 64, 4, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    OK(fg_store_tensor_get(s, "fine", &t, &g_err));
    fg_store_tensor_free(t);
    s = reopen(s, FG_STORE_RDONLY);
    int n = 0;
    OK(fg_store_tensor_iter(s, count_cb, &n, &g_err));
    ck_assert_int_eq(n, 4);
    OK(fg_store_tensor_iter(s, check_cb, s, &g_err));
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.tensors, 4);
    ck_assert_uint_eq(rep.orphan_files, 0);
    /* writes through a read-only handle */
    ck_assert_int_eq(fg_store_batch_begin(s, &b, &g_err), FG_ERR_STORE_READONLY);
    fg_store_close(s);
}
END_TEST

START_TEST(test_rotation_and_meta_override)
{
    fg_store_opts o = {.max_file_bytes = 64 << 10};
    fg_store *s = make(&o);
    add_batch(s, "a", 10, 64); /* 16 KiB each: several files */
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_ge(info.n_weight_files, 3);
    ck_assert_uint_eq(info.n_tensors, 10);
    ck_assert_uint_eq(info.n_chunks, 40);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(fg_store_batch_meta(b, "cfg.a", "v2", 2, &g_err));
    ck_assert_int_eq(fg_store_batch_meta(b, "cfg.a", "v3", 2, &g_err), FG_ERR_DUPLICATE);
    OK(fg_store_batch_commit(b, &g_err));
    void *m;
    size_t len;
    OK(fg_store_meta_get(s, "cfg.a", &m, &len, &g_err));
    ck_assert_int_eq(memcmp(m, "v2", 2), 0);
    free(m);
    OK(fg_store_tensor_iter(s, check_cb, s, &g_err));
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

/* ---- KV pages ---- */

static fg_store_kv_write_req req(uint64_t job, uint32_t seq, uint32_t layer, uint32_t page,
                                 uint32_t first, uint32_t n, void *buf, size_t len)
{
    fg_store_kv_write_req r = {{job, seq, layer, page}, first, n, FG_CODEC_F16, buf, len};
    st_kv_fill(buf, len, &r.key, first);
    return r;
}

START_TEST(test_kv_pages)
{
    fg_store_opts o = {.kv_page_size = 8192, .kv_pages_per_file = 300};
    fg_store *s = make(&o);
    static uint8_t bufs[4][8064], back[8064];
    fg_store_kv_write_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = req(7, 1, (uint32_t)i, 0, 0, 16, bufs[i], 1000 + (size_t)i);
    fg_store_kv_page pg[4];
    OK(fg_store_kv_write(s, 4, r, pg, &g_err));
    ck_assert_uint_lt(pg[0].generation, pg[3].generation);
    fg_store_kv_page p;
    OK(fg_store_kv_read(s, &r[2].key, back, sizeof back, &p, &g_err));
    ck_assert_uint_eq(p.payload_len, 1002);
    ck_assert_int_eq(memcmp(back, bufs[2], 1002), 0);
    /* rewrite layer 2 with more tokens: new slot, newer generation, old slot freed */
    fg_store_kv_write_req w = req(7, 1, 2, 0, 0, 32, bufs[2], 8064);
    fg_store_kv_page np;
    OK(fg_store_kv_write(s, 1, &w, &np, &g_err));
    ck_assert_uint_gt(np.generation, pg[2].generation);
    ck_assert_uint_ne(np.slot, pg[2].slot);
    fg_store_kv_write_req big = req(7, 1, 2, 0, 0, 32, bufs[2], 8064);
    big.len = 8065;
    ck_assert_int_eq(fg_store_kv_write(s, 1, &big, NULL, &g_err), FG_ERR_LIMIT);
    /* survives restart */
    s = reopen(s, 0);
    OK(fg_store_kv_read(s, &w.key, back, sizeof back, &p, &g_err));
    ck_assert_uint_eq(p.n_tokens, 32);
    ck_assert_int_eq(memcmp(back, bufs[2], 8064), 0);
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.kv_used, 4);
    ck_assert_uint_eq(info.kv_dirty, 0); /* the writable open wiped the rewritten page's slot */
    ck_assert_uint_eq(info.kv_used + info.kv_free, info.kv_slots);
    /* enough pages to need a second page file */
    static uint8_t small[64];
    fg_store_kv_write_req many[400];
    for (int i = 0; i < 400; i++)
        many[i] = req(8, (uint32_t)i, 0, 0, 0, 1, small, sizeof small);
    OK(fg_store_kv_write(s, 400, many, NULL, &g_err));
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.n_kv_files, 2);
    OK(fg_store_verify(s, NULL, &g_err));
    /* free a sequence, then a job */
    uint64_t freed;
    fg_store_kv_key k = {7, 1, 0, 0};
    OK(fg_store_kv_free(s, &k, 3, &freed, &g_err));
    ck_assert_uint_eq(freed, 1);
    k.job = 8;
    OK(fg_store_kv_free(s, &k, 1, &freed, &g_err));
    ck_assert_uint_eq(freed, 400);
    ck_assert_int_eq(fg_store_kv_lookup(s, &many[5].key, &p, &g_err), FG_ERR_NOT_FOUND);
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.kv_used, 3);
    ck_assert_uint_eq(info.kv_dirty, 0);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

static void flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

START_TEST(test_kv_torn_and_stale)
{
    fg_store_opts o = {.kv_page_size = 4096};
    fg_store *s = make(&o);
    static uint8_t buf[3968], back[3968];
    fg_store_kv_write_req r = req(1, 2, 3, 4, 100, 8, buf, sizeof buf);
    fg_store_kv_page p;
    OK(fg_store_kv_write(s, 1, &r, &p, &g_err));
    char path[4200];
    fg_store_file_path(s, p.file_id, 1, path, sizeof path);
    fg_store_close(s);
    flip(path, p.offset + FG_STORE_KV_HEADER_SIZE + 500); /* torn payload */
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_kv_read(s, &r.key, back, sizeof back, NULL, &g_err),
                     FG_ERR_STORE_STALE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "payload checksum"));
    ck_assert_int_eq(fg_store_verify(s, NULL, &g_err), FG_ERR_STORE_STALE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "kv-"));
    /* a rewrite puts a good page in a new slot; now make the catalog's page look stale by
     * copying the old slot's bytes over the new one */
    OK(fg_store_kv_write(s, 1, &r, &p, &g_err));
    OK(fg_store_kv_read(s, &r.key, back, sizeof back, NULL, &g_err));
    fg_store_kv_write_req r2 = req(1, 2, 3, 5, 100, 8, buf, sizeof buf);
    fg_store_kv_page p2;
    OK(fg_store_kv_write(s, 1, &r2, &p2, &g_err));
    fg_store_close(s);
    int fd = open(path, O_RDWR);
    static uint8_t page[4096];
    ck_assert_int_eq(pread(fd, page, 4096, (off_t)p.offset), 4096);
    ck_assert_int_eq(pwrite(fd, page, 4096, (off_t)p2.offset), 4096);
    close(fd);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_kv_read(s, &r2.key, back, sizeof back, NULL, &g_err),
                     FG_ERR_STORE_STALE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "stale"));
    fg_store_close(s);
}
END_TEST

/* ---- verify, reindex ---- */

START_TEST(test_verify_detects_chunk_corruption)
{
    fg_store *s = make(NULL);
    add_batch(s, "w", 2, 32);
    fg_store_tensor *t;
    OK(fg_store_tensor_get(s, "w.1", &t, &g_err));
    char path[4200];
    fg_store_file_path(s, t->file_id, 0, path, sizeof path);
    uint64_t off = t->chunks[1].offset + 10;
    fg_store_tensor_free(t);
    fg_store_close(s);
    flip(path, off);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_verify(s, NULL, &g_err), FG_ERR_CHECKSUM);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "'w.1' chunk 1"));
    fg_store_close(s);
}
END_TEST

/* Everything a reader can ask, serialized: tensors (records), metadata, KV records. */
typedef struct snap {
    char *buf;
    size_t len, cap;
} snap;

static void snap_add(snap *sn, const void *p, size_t n)
{
    if (sn->len + n > sn->cap) {
        sn->cap = (sn->len + n) * 2;
        sn->buf = realloc(sn->buf, sn->cap);
    }
    memcpy(sn->buf + sn->len, p, n);
    sn->len += n;
}

static void snap_u64(snap *sn, uint64_t v)
{
    snap_add(sn, &v, sizeof v);
}

static int snap_tensor(void *ctx, const fg_store_tensor *t)
{
    snap *sn = ctx;
    snap_add(sn, t->name, strlen(t->name) + 1);
    uint64_t f[] = {t->file_id, t->file_index, t->batch, t->codec.id, t->codec.bits,
                    t->codec.group_size, t->n_dims, t->dims[0], t->dims[1], t->payload_bytes,
                    t->digest, t->n_chunks};
    snap_add(sn, f, sizeof f);
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        snap_u64(sn, t->chunks[c].offset);
        snap_u64(sn, t->chunks[c].length);
        snap_u64(sn, t->chunks[c].first_row);
        snap_u64(sn, t->chunks[c].n_rows);
        snap_u64(sn, t->chunks[c].xxh3);
    }
    return 0;
}

static fg_store *g_snap_store;

static int snap_meta(void *ctx, const char *key, size_t len)
{
    void *m;
    size_t n;
    OK(fg_store_meta_get(g_snap_store, key, &m, &n, &g_err));
    ck_assert_uint_eq(n, len);
    snap_add(ctx, key, strlen(key) + 1);
    snap_add(ctx, m, n);
    free(m);
    return 0;
}

static int snap_kv(void *ctx, const fg_store_kv_page *p)
{
    uint64_t f[] = {p->key.job, p->key.seq, p->key.layer, p->key.page, p->token_first,
                    p->n_tokens, p->codec, p->payload_len, p->generation, p->payload_xxh3,
                    p->file_id, p->slot, p->offset};
    snap_add(ctx, f, sizeof f);
    return 0;
}

static snap take_snap(fg_store *s)
{
    snap sn = {0};
    g_snap_store = s;
    OK(fg_store_tensor_iter(s, snap_tensor, &sn, &g_err));
    OK(fg_store_meta_iter(s, snap_meta, &sn, &g_err));
    OK(fg_store_kv_iter(s, UINT64_MAX, snap_kv, &sn, &g_err));
    return sn;
}

START_TEST(test_reindex_same_answers)
{
    fg_store_opts o = {.max_file_bytes = 48 << 10, .kv_page_size = 4096};
    fg_store *s = make(&o);
    add_batch(s, "emb", 5, 48);
    add_batch(s, "blk", 7, 16);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(fg_store_batch_meta(b, "cfg.emb", "override", 8, &g_err));
    OK(fg_store_batch_meta(b, "tokenizer.json", "{\"v\":1}", 7, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    static uint8_t buf[3000];
    for (uint32_t i = 0; i < 50; i++) {
        fg_store_kv_write_req r = req(1 + i % 3, i % 5, i % 4, i / 20, i, 1, buf, 100 + i);
        OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    }
    fg_store_kv_key k = {2, 0, 0, 0};
    OK(fg_store_kv_free(s, &k, 1, NULL, &g_err));
    for (uint32_t i = 0; i < 10; i++) { /* rewrites leave dirty slots behind */
        fg_store_kv_write_req r = req(1, i % 5, 0, 9, i, 2, buf, 2000);
        OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    }
    snap a = take_snap(s);
    fg_store_close(s);
    ck_assert_int_eq(system(NULL) != 0, 1);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/catalog'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(fg_store_open(g_dir, 0, NULL, &s, &g_err), FG_ERR_STORE_CATALOG);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "reindex"));
    OK(fg_store_reindex(g_dir, NULL, &g_err));
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    snap c = take_snap(s);
    ck_assert_uint_eq(a.len, c.len);
    ck_assert_int_eq(memcmp(a.buf, c.buf, a.len), 0);
    OK(fg_store_verify(s, NULL, &g_err));
    /* and the store keeps working: new ids do not collide */
    add_batch(s, "later", 2, 16);
    fg_store_kv_write_req r = req(9, 0, 0, 0, 0, 1, buf, 10);
    OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
    free(a.buf);
    free(c.buf);
}
END_TEST

START_TEST(test_missing_and_foreign_files)
{
    fg_store *s = make(NULL);
    add_batch(s, "x", 1, 16);
    fg_store_close(s);
    /* a second store's file dropped into this directory under an unused name */
    set_dir("other");
    s = make(NULL);
    add_batch(s, "y", 1, 16);
    fg_store_close(s);
    set_dir("store");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_path("other/weights-000001.fgt"),
             tu_path("store/weights-000077.fgt"));
    ck_assert_int_eq(system(cmd), 0);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err)); /* recovery leaves a foreign file alone */
    ck_assert_int_eq(fg_store_verify(s, NULL, &g_err), FG_ERR_STORE_FOREIGN);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "weights-000077.fgt"));
    fg_store_close(s);
    ck_assert_int_eq(fg_store_reindex(g_dir, NULL, &g_err), FG_ERR_STORE_FOREIGN);
    unlink(tu_path("store/weights-000077.fgt"));
    /* a listed file replaced by another store's */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_path("other/weights-000001.fgt"),
             tu_path("store/weights-000001.fgt"));
    ck_assert_int_eq(system(cmd), 0);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    fg_store_tensor *t;
    ck_assert_int_eq(fg_store_tensor_get(s, "x.0", &t, &g_err), FG_ERR_STORE_FOREIGN);
    ck_assert_msg(strstr(g_err.msg, "weights-000001.fgt: file belongs to another store"),
                  "%s", g_err.msg);
    ck_assert_int_eq(fg_store_verify(s, NULL, &g_err), FG_ERR_STORE_FOREIGN);
    fg_store_close(s);
    /* a listed file missing */
    unlink(tu_path("store/weights-000001.fgt"));
    ck_assert_int_eq(fg_store_open(g_dir, 0, NULL, &s, &g_err), FG_ERR_STORE_MISSING);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "weights-000001.fgt"));
}
END_TEST

/* Rewrite chunk c's offset in tensor name's catalog record (as a damaged or hand-edited
 * catalog would have it), with LMDB directly. */
static void shift_chunk_offset(const char *name, uint32_t c, uint64_t delta)
{
    MDB_env *env;
    MDB_txn *t;
    MDB_dbi db;
    MDB_val k = {strlen(name), (void *)name}, v;
    char path[8400];
    snprintf(path, sizeof path, "%s/catalog", g_dir);
    ck_assert_int_eq(mdb_env_create(&env), 0);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, 8), 0);
    ck_assert_int_eq(mdb_env_open(env, path, 0, 0644), 0);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &t), 0);
    ck_assert_int_eq(mdb_dbi_open(t, "tensors", 0, &db), 0);
    ck_assert_int_eq(mdb_get(t, db, &k, &v), 0);
    uint8_t *rec = malloc(v.mv_size);
    memcpy(rec, v.mv_data, v.mv_size);
    uint8_t *off = rec + 64 + 8 * rec[1] + 40 * c; /* SPEC "tensors": dims, then chunks */
    uint64_t o;
    memcpy(&o, off, 8);
    o += delta;
    memcpy(off, &o, 8);
    MDB_val nv = {v.mv_size, rec};
    ck_assert_int_eq(mdb_put(t, db, &k, &nv, 0), 0);
    ck_assert_int_eq(mdb_txn_commit(t), 0);
    mdb_env_close(env);
    free(rec);
}

/* A weight file from another store with the same layout (same names, shapes and bytes: only the
 * store id differs) is refused at lookup, naming the file; so is a file of this store copied
 * over another of its files, and a catalog whose chunk offset moved (naming tensor and chunk). */
START_TEST(test_identity_and_shifted_offset)
{
    fg_store *s = make(NULL);
    add_batch(s, "x", 1, 64);
    add_batch(s, "y", 1, 64);
    fg_store_close(s);
    set_dir("other");
    s = make(NULL);
    add_batch(s, "x", 1, 64);
    fg_store_close(s);
    set_dir("store");
    char cmd[8400];
    const char *mine = tu_path("store/weights-000001.fgt");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.keep' && cp '%s' '%s'", mine, mine,
             tu_path("other/weights-000001.fgt"), mine);
    ck_assert_int_eq(system(cmd), 0);
    fg_store_tensor *t;
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_tensor_get(s, "x.0", &t, &g_err), FG_ERR_STORE_FOREIGN);
    ck_assert_msg(strstr(g_err.msg, "store/weights-000001.fgt: file belongs to another store") &&
                  !strchr(g_err.msg, '\n'), "%s", g_err.msg);
    fg_store_close(s);
    /* this store's file 2 copied over its file 1 */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_path("store/weights-000002.fgt"),
             tu_path("store/weights-000001.fgt"));
    ck_assert_int_eq(system(cmd), 0);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_tensor_get(s, "x.0", &t, &g_err), FG_ERR_STORE_CATALOG);
    ck_assert_msg(strstr(g_err.msg, "says it is weights-000002.fgt"), "%s", g_err.msg);
    fg_store_close(s);
    /* the right file back, then a chunk offset moved in the catalog */
    snprintf(cmd, sizeof cmd, "mv '%s.keep' '%s'", tu_path("store/weights-000001.fgt"),
             tu_path("store/weights-000001.fgt"));
    ck_assert_int_eq(system(cmd), 0);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    OK(fg_store_tensor_get(s, "x.0", &t, &g_err));
    fg_store_tensor_free(t);
    fg_store_close(s);
    shift_chunk_offset("x.0", 1, 4096);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    ck_assert_int_eq(fg_store_tensor_get(s, "x.0", &t, &g_err), FG_ERR_STORE_CATALOG);
    ck_assert_msg(strstr(g_err.msg, "tensor 'x.0' chunk 1: the catalog says offset") &&
                  strstr(g_err.msg, "fg-inspect --reindex"), "%s", g_err.msg);
    OK(fg_store_tensor_get(s, "y.0", &t, &g_err)); /* the rest of the store still reads */
    fg_store_tensor_free(t);
    fg_store_close(s);
    OK(fg_store_reindex(g_dir, NULL, &g_err)); /* and reindex repairs it */
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    OK(fg_store_tensor_get(s, "x.0", &t, &g_err));
    OK(st_check_tensor(s, t, &g_err));
    fg_store_tensor_free(t);
    fg_store_close(s);
}
END_TEST

static int first_kv_file(void *ctx, const fg_store_file *f)
{
    if (f->kv)
        *(uint32_t *)ctx = f->id;
    return f->kv;
}

/* A file that ends early is reported as "short read: got N of M bytes", never with the
 * strerror of errno 0 ("Success"). */
START_TEST(test_short_read_messages)
{
    fg_store_opts o = {.kv_page_size = 8192};
    fg_store *s = make(&o);
    static uint8_t pay[100];
    fg_store_kv_write_req r = req(1, 0, 0, 0, 0, 4, pay, sizeof pay);
    OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    uint32_t id = 0;
    ck_assert_int_eq(fg_store_file_iter(s, first_kv_file, &id, &g_err), 1);
    char path[8400];
    fg_store_file_path(s, id, 1, path, sizeof path);
    fg_store_close(s);
    ck_assert_int_eq(truncate(path, 30), 0);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    uint8_t back[100];
    ck_assert_int_eq(fg_store_kv_read(s, &r.key, back, sizeof back, NULL, &g_err),
                     FG_ERR_TRUNCATED);
    ck_assert_msg(strstr(g_err.msg, "short read: got 30 of 64 bytes") &&
                  !strstr(g_err.msg, "Success"), "%s", g_err.msg);
    fg_store_close(s);
    ck_assert_int_eq(truncate(tu_path("store/store.id"), 10), 0);
    ck_assert_int_eq(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err),
                     FG_ERR_STORE_NOT_STORE);
    ck_assert_msg(strstr(g_err.msg, "short read: got 10 of 64 bytes"), "%s", g_err.msg);
}
END_TEST

/* ---- damaged catalog: an error naming data.mdb and reindex, never a signal ---- */

typedef struct damage_count {
    int refused, opened;
} damage_count;

/* Open the store (read-only, then writable) with data.mdb as given: either a one-line
 * FG_ERR_STORE_CATALOG naming data.mdb and reindex, or an open store whose every lookup ends
 * (ok or an error) without a signal. must_refuse: the damage hits pages LMDB reads. */
static void try_open(const uint8_t *b, size_t n, int must_refuse, damage_count *dc)
{
    write_file(tu_path("store/catalog/data.mdb"), b, n);
    unlink(tu_path("store/catalog/lock.mdb"));
    for (int writable = 0; writable < 2; writable++) {
        fg_store *s;
        int rc = fg_store_open(g_dir, writable ? 0 : FG_STORE_RDONLY, NULL, &s, &g_err);
        if (rc == FG_OK) {
            ck_assert_msg(!must_refuse, "damaged catalog (%zu bytes) opened", n);
            int count = 0;
            (void)fg_store_tensor_iter(s, count_cb, &count, &g_err);
            fg_store_tensor *t;
            for (int i = 0; i < 3; i++) {
                char name[16];
                snprintf(name, sizeof name, "d.%d", i);
                if (fg_store_tensor_get(s, name, &t, &g_err) == FG_OK)
                    fg_store_tensor_free(t);
            }
            fg_store_close(s);
            dc->opened++;
            continue;
        }
        ck_assert_msg(strstr(g_err.msg, "data.mdb") || strstr(g_err.msg, "catalog"), "%s",
                      g_err.msg);
        ck_assert_msg(!strchr(g_err.msg, '\n'), "%s", g_err.msg);
        if (rc == FG_ERR_STORE_CATALOG)
            ck_assert_msg(strstr(g_err.msg, "fg-inspect --reindex"), "%s", g_err.msg);
        dc->refused++;
    }
}

/* Truncated at several sizes, each page zeroed, each page overwritten with random bytes, the
 * whole file random: the store refuses the catalog with one line (or, when only pages nothing
 * reads were hit, opens and reads), never dies of a signal (this test runs in a forked process:
 * a SIGBUS or SIGSEGV fails it). Reindex then restores everything. */
START_TEST(test_damaged_catalog)
{
    fg_store_opts o = {.kv_page_size = 8192, .kv_pages_per_file = 64};
    fg_store *s = make(&o);
    add_batch(s, "d", 3, 64);
    for (int b = 0; b < 6; b++) {
        char p[16];
        snprintf(p, sizeof p, "m%d", b);
        add_batch(s, p, 20, 16);
    }
    static uint8_t pay[2000];
    fg_store_kv_write_req r[40];
    for (uint32_t i = 0; i < 40; i++)
        r[i] = req(3, i % 4, i, 0, 0, 8, pay, sizeof pay);
    OK(fg_store_kv_write(s, 40, r, NULL, &g_err));
    fg_store_close(s);
    size_t n;
    uint8_t *orig = read_file(tu_path("store/catalog/data.mdb"), &n);
    ck_assert_uint_ge(n, 8 * 4096);
    uint8_t *b = malloc(n);
    damage_count dc = {0, 0};
    size_t cuts[] = {0, 1, 100, 4095, 4096, 8191, 8192, 12288, n / 2, n - 4096, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        try_open(orig, cuts[i], cuts[i] < 8192, &dc);
    uint64_t seed = 12345;
    for (size_t pg = 0; pg < n / 4096; pg++) {
        memcpy(b, orig, n);
        memset(b + pg * 4096, 0, 4096);
        try_open(b, n, pg < 2, &dc); /* LMDB needs both meta pages */
        memcpy(b, orig, n);
        for (size_t k = 0; k < 4096; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            b[pg * 4096 + k] = (uint8_t)(seed >> 56);
        }
        try_open(b, n, pg < 2, &dc);
    }
    for (size_t k = 0; k < n; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[k] = (uint8_t)(seed >> 56);
    }
    try_open(b, n, 1, &dc);
    ck_assert_int_gt(dc.refused, (int)(n / 4096)); /* most damage is seen */
    free(b);
    free(orig);
    OK(fg_store_reindex(g_dir, NULL, &g_err));
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    fg_store_tensor *t;
    OK(fg_store_tensor_get(s, "d.2", &t, &g_err));
    OK(st_check_tensor(s, t, &g_err));
    fg_store_tensor_free(t);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

/* ---- LMDB map ---- */

START_TEST(test_map_grows_then_fills)
{
    fg_store_opts o = {.map_initial = 64 << 10, .map_max = 64ull << 20};
    fg_store *s = make(&o);
    fg_store_info i0, i1;
    OK(fg_store_info_get(s, &i0, &g_err));
    ck_assert_uint_eq(i0.map_size, 64 << 10);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    for (int i = 0; i < 600; i++) {
        char name[64];
        snprintf(name, sizeof name, "t%04d", i);
        OK(st_put_tensor(b, name, 1, 64, 1, &g_err));
    }
    OK(fg_store_batch_commit(b, &g_err));
    OK(fg_store_info_get(s, &i1, &g_err));
    ck_assert_uint_gt(i1.map_size, i0.map_size);
    ck_assert_uint_eq(i1.n_tensors, 600);
    fg_store_close(s);
    /* a map capped small fills up: clear error, earlier data intact, store reopens */
    fg_store_opts cap = {.map_max = 160 << 10};
    OK(fg_store_open(g_dir, 0, &cap, &s, &g_err));
    int rc = FG_OK;
    for (int round = 0; round < 40 && rc == FG_OK; round++) {
        OK(fg_store_batch_begin(s, &b, &g_err));
        for (int i = 0; i < 50; i++) {
            char name[80];
            snprintf(name, sizeof name, "r%02d.%02d.a-rather-long-tensor-name-to-fill-pages", round, i);
            OK(st_put_tensor(b, name, 1, 64, 1, &g_err));
        }
        rc = fg_store_batch_commit(b, &g_err);
    }
    ck_assert_int_eq(rc, FG_ERR_STORE_MAP_FULL);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "map_max"));
    s = reopen(s, 0);
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_ge(rep.tensors, 600);
    ck_assert_uint_eq(rep.orphan_files, 0); /* the failed batch's files are gone */
    fg_store_close(s);
}
END_TEST

/* ---- permissions and concurrency ---- */

/* A store the user may read but not write: writable opens are refused; a read-only open, a
 * lookup, chunk reads and verify all work without creating or writing anything (LMDB opened
 * MDB_RDONLY, and MDB_NOLOCK since the lock file cannot be written). Root ignores modes, so as
 * root the check runs as nobody (setuid in the test's forked process). */
START_TEST(test_readonly_dir)
{
    fg_store *s = make(NULL);
    add_batch(s, "ro", 2, 48);
    fg_store_close(s);
    char cmd[32800];
    snprintf(cmd, sizeof cmd, "chmod 755 '%s' && chmod 555 '%s' '%s/catalog'", tu_path(""), g_dir,
             g_dir);
    ck_assert_int_eq(system(cmd), 0);
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw)
            return;
        ck_assert_int_eq(setgid(pw->pw_gid), 0);
        ck_assert_int_eq(setuid(pw->pw_uid), 0);
    }
    ck_assert_int_ne(access(g_dir, W_OK), 0); /* the premise: we may not write */
    ck_assert_int_eq(fg_store_open(g_dir, 0, NULL, &s, &g_err), FG_ERR_STORE_READONLY);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "not writable"));
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_int_eq(info.no_lock, 1);
    ck_assert_uint_eq(info.n_tensors, 2);
    fg_store_tensor *t;
    OK(fg_store_tensor_get(s, "ro.1", &t, &g_err));
    OK(st_check_tensor(s, t, &g_err));
    fg_store_tensor_free(t);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

/* Without a lock file and without the right to create one (e.g. a store copied to read-only
 * media without lock.mdb). */
START_TEST(test_readonly_no_lock_file)
{
    fg_store *s = make(NULL);
    add_batch(s, "ro", 1, 16);
    fg_store_close(s);
    char cmd[32800];
    snprintf(cmd, sizeof cmd, "rm '%s/catalog/lock.mdb' && chmod 755 '%s' && chmod 555 '%s' "
             "'%s/catalog'", g_dir, tu_path(""), g_dir, g_dir);
    ck_assert_int_eq(system(cmd), 0);
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw)
            return;
        ck_assert_int_eq(setgid(pw->pw_gid), 0);
        ck_assert_int_eq(setuid(pw->pw_uid), 0);
    }
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    fg_store_tensor *t;
    OK(fg_store_tensor_get(s, "ro.0", &t, &g_err));
    OK(st_check_tensor(s, t, &g_err));
    fg_store_tensor_free(t);
    fg_store_close(s);
    ck_assert_int_ne(access(tu_path("store/catalog/lock.mdb"), F_OK), 0); /* nothing created */
}
END_TEST

START_TEST(test_reader_while_writer_commits)
{
    fg_store *s = make(NULL);
    add_batch(s, "b000", 4, 16);
    fg_store_close(s);
    pid_t pid = fork();
    if (pid == 0) {
        fg_store *w;
        if (fg_store_open(g_dir, 0, NULL, &w, &g_err))
            _exit(2);
        for (int i = 1; i < 30; i++) {
            char p[16];
            snprintf(p, sizeof p, "b%03d", i);
            add_batch(w, p, 4, 16);
        }
        fg_store_close(w);
        _exit(0);
    }
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    int last = 0, st, done = 0;
    while (!done) {
        done = waitpid(pid, &st, WNOHANG) == pid;
        int n = 0;
        OK(fg_store_tensor_iter(s, count_cb, &n, &g_err));
        ck_assert_int_eq(n % 4, 0); /* batches appear whole */
        ck_assert_int_ge(n, last);
        last = n;
        OK(fg_store_tensor_iter(s, check_cb, s, &g_err));
    }
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int n = 0;
    OK(fg_store_tensor_iter(s, count_cb, &n, &g_err));
    ck_assert_int_eq(n, 120);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

typedef struct rd_arg {
    fg_store *s;
    int *stop;
    long lookups;
    int bad;
} rd_arg;

static void *reader_thread(void *p)
{
    rd_arg *a = p;
    fg_err e;
    while (!__atomic_load_n(a->stop, __ATOMIC_RELAXED)) {
        fg_store_tensor *t;
        if (fg_store_tensor_get(a->s, "base.0", &t, &e) || st_check_tensor(a->s, t, &e))
            a->bad++;
        fg_store_tensor_free(t);
        a->lookups++;
    }
    return NULL;
}

START_TEST(test_threads_lookup_while_map_grows)
{
    /* Lookups on three threads while the writer's commits grow the map many times. */
    fg_store_opts o = {.map_initial = 64 << 10};
    fg_store *s = make(&o);
    add_batch(s, "base", 1, 16);
    int stop = 0;
    pthread_t th[3];
    rd_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (rd_arg){s, &stop, 0, 0};
        pthread_create(&th[i], NULL, reader_thread, &a[i]);
    }
    fg_store_info i0, i1;
    OK(fg_store_info_get(s, &i0, &g_err));
    for (int round = 0; round < 6; round++) {
        fg_store_batch *b;
        OK(fg_store_batch_begin(s, &b, &g_err));
        for (int i = 0; i < 150; i++) {
            char name[128];
            snprintf(name, sizeof name, "grow.%d.%03d.padding-padding-padding-padding-padding",
                     round, i);
            OK(st_put_tensor(b, name, 1, 16, 1, &g_err));
        }
        OK(fg_store_batch_commit(b, &g_err));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
        ck_assert_int_gt(a[i].lookups, 0);
    }
    OK(fg_store_info_get(s, &i1, &g_err));
    ck_assert_uint_gt(i1.map_size, i0.map_size);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

/* ---- fault injection through the I/O table ---- */

typedef struct faults {
    int pwrite_fail_at;  /* fail the Nth pwrite (1-based), 0 = never */
    int pwrite_errno;
    int short_writes;    /* every pwrite writes at most half (rounded up) */
    int armed;           /* count and fail only once armed (after the open) */
    int sync_fail_at;
    int truncate_errno;  /* every ftruncate fails with this when armed, 0 = never */
    int n_pwrite, n_sync;
} faults;

static ssize_t f_pwrite(void *ctx, int fd, const void *b, size_t n, off_t off)
{
    faults *f = ctx;
    if (f->armed && f->pwrite_fail_at && ++f->n_pwrite == f->pwrite_fail_at) {
        errno = f->pwrite_errno;
        return -1;
    }
    if (f->short_writes && n > 1)
        n = (n + 1) / 2;
    return pwrite(fd, b, n, off);
}

static ssize_t f_pread(void *ctx, int fd, void *b, size_t n, off_t off)
{
    (void)ctx;
    return pread(fd, b, n, off);
}

static int f_fdatasync(void *ctx, int fd)
{
    faults *f = ctx;
    if (f->armed && f->sync_fail_at && ++f->n_sync == f->sync_fail_at) {
        errno = EIO;
        return -1;
    }
    return fdatasync(fd);
}

static int f_ftruncate(void *ctx, int fd, off_t len)
{
    faults *f = ctx;
    if (f->armed && f->truncate_errno) {
        errno = f->truncate_errno;
        return -1;
    }
    return ftruncate(fd, len);
}

/* A batch whose second large metadata value fails to reach the disk (EIO on its fdatasync, or
 * ENOSPC on a write) fails whole: an error naming the file, no metadata file left behind, the
 * store unchanged and clean. */
START_TEST(test_meta_large_fault)
{
    const size_t n = FG_STORE_META_INLINE + 1;
    uint8_t *v = calloc(1, n);
    static const struct { faults f; int rc; } cases[] = {
        {{.sync_fail_at = 2}, FG_ERR_IO},
        {{.pwrite_fail_at = 3, .pwrite_errno = ENOSPC}, FG_ERR_NO_SPACE},
    };
    fg_store *s = make(NULL);
    add_batch(s, "a", 1, 4);
    fg_store_close(s);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        faults f = cases[c].f;
        fg_store_io io = {f_pwrite, f_pread, f_fdatasync, f_ftruncate, &f};
        fg_store_opts fo = {.io = &io};
        OK(fg_store_open(g_dir, 0, &fo, &s, &g_err));
        f.armed = 1;
        fg_store_batch *b;
        OK(fg_store_batch_begin(s, &b, &g_err));
        OK(st_put_tensor(b, "t.0", 4, 64, 4, &g_err));
        OK(fg_store_batch_meta(b, "one.json", v, n, &g_err));
        OK(fg_store_batch_meta(b, "two.json", v, n, &g_err));
        ck_assert_int_eq(fg_store_batch_commit(b, &g_err), cases[c].rc);
        ck_assert_msg(strstr(g_err.msg, "meta-000002-1.blob") && !strchr(g_err.msg, '\n'), "%s",
                      g_err.msg);
        ck_assert_int_ne(access(tu_path("store/meta-000002-0.blob"), F_OK), 0);
        ck_assert_int_ne(access(tu_path("store/meta-000002-1.blob"), F_OK), 0);
        void *m;
        size_t len;
        ck_assert_int_eq(fg_store_meta_get(s, "one.json", &m, &len, &g_err), FG_ERR_NOT_FOUND);
        fg_store_verify_report rep;
        OK(fg_store_verify(s, &rep, &g_err));
        ck_assert_uint_eq(rep.orphan_files, 0);
        fg_store_close(s);
    }
    free(v);
}
END_TEST

/* Write page 0 of job 5 once, then rewrite it through a faulty table; the old page must stay
 * readable and the store verify clean after reopening with plain I/O. */
static void kv_fault_case(faults f, int want_rc, const char *want_msg)
{
    fg_store_opts o = {.kv_page_size = 4096};
    fg_store *s;
    if (access(g_dir, F_OK)) {
        s = make(&o);
    } else {
        OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    }
    static uint8_t a[2000], b[2000], back[2000];
    fg_store_kv_write_req r = req(5, 0, 0, 0, 0, 4, a, sizeof a);
    OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    fg_store_close(s);
    fg_store_io io = {f_pwrite, f_pread, f_fdatasync, f_ftruncate, &f};
    fg_store_opts fo = {.io = &io};
    OK(fg_store_open(g_dir, 0, &fo, &s, &g_err));
    f.armed = 1;
    fg_store_kv_write_req r2 = req(5, 0, 0, 0, 4, 8, b, sizeof b);
    int rc = fg_store_kv_write(s, 1, &r2, NULL, &g_err);
    ck_assert_int_eq(rc, want_rc);
    if (want_msg)
        ck_assert_msg(strstr(g_err.msg, want_msg), "message '%s' lacks '%s'", g_err.msg, want_msg);
    fg_store_close(s);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    fg_store_kv_page p;
    OK(fg_store_kv_read(s, &r.key, back, sizeof back, &p, &g_err));
    ck_assert_int_eq(memcmp(back, rc ? a : b, sizeof back), 0);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}

START_TEST(test_fault_enospc)
{
    kv_fault_case((faults){.pwrite_fail_at = 1, .pwrite_errno = ENOSPC}, FG_ERR_NO_SPACE,
                  "No space left");
}
END_TEST

START_TEST(test_fault_eio)
{
    kv_fault_case((faults){.pwrite_fail_at = 1, .pwrite_errno = EIO}, FG_ERR_IO, "kv-000001.pages");
}
END_TEST

START_TEST(test_fault_short_writes)
{
    kv_fault_case((faults){.short_writes = 1}, FG_OK, NULL);
    kv_fault_case((faults){.short_writes = 1, .pwrite_fail_at = 2, .pwrite_errno = ENOSPC},
                  FG_ERR_NO_SPACE, "writing a KV page");
}
END_TEST

START_TEST(test_fault_fsync)
{
    kv_fault_case((faults){.sync_fail_at = 1}, FG_ERR_IO, "fdatasync");
}
END_TEST

START_TEST(test_fault_wipe_during_free)
{
    /* The header wipe after a free fails: the free itself is committed (the key is gone), the
     * error names the file, and the next writable open finishes the wipe. */
    fg_store_opts o = {.kv_page_size = 4096};
    fg_store *s = make(&o);
    static uint8_t a[1000];
    fg_store_kv_write_req r = req(3, 0, 0, 0, 0, 4, a, sizeof a);
    OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    fg_store_close(s);
    faults f = {.pwrite_fail_at = 1, .pwrite_errno = EIO};
    fg_store_io io = {f_pwrite, f_pread, f_fdatasync, f_ftruncate, &f};
    fg_store_opts fo = {.io = &io};
    OK(fg_store_open(g_dir, 0, &fo, &s, &g_err));
    f.armed = 1;
    fg_store_kv_key k = {3, 0, 0, 0};
    ck_assert_int_eq(fg_store_kv_free(s, &k, 1, NULL, &g_err), FG_ERR_IO);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "wiping"));
    fg_store_kv_page p;
    ck_assert_int_eq(fg_store_kv_lookup(s, &k, &p, &g_err), FG_ERR_NOT_FOUND);
    f.pwrite_fail_at = 0;
    fg_store_close(s);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    fg_store_info info;
    OK(fg_store_info_get(s, &info, &g_err));
    ck_assert_uint_eq(info.kv_dirty, 0);
    ck_assert_uint_eq(info.kv_used, 0);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
}
END_TEST

START_TEST(test_fault_extend_and_create)
{
    /* No room to extend a page file: FG_ERR_NO_SPACE, nothing mapped, store reopens clean. */
    fg_store_opts o = {.kv_page_size = 4096};
    faults f = {.truncate_errno = ENOSPC, .armed = 1};
    fg_store_io io = {f_pwrite, f_pread, f_fdatasync, f_ftruncate, &f};
    o.io = &io;
    fg_store *s = make(&o);
    static uint8_t a[100];
    fg_store_kv_write_req r = req(4, 0, 0, 0, 0, 1, a, sizeof a);
    ck_assert_int_eq(fg_store_kv_write(s, 1, &r, NULL, &g_err), FG_ERR_NO_SPACE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "kv-000001.pages"));
    fg_store_close(s);
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.orphan_files, 0);
    OK(fg_store_kv_write(s, 1, &r, NULL, &g_err));
    fg_store_close(s);
    /* store.id cannot be written: create fails naming it, and leaves no store behind */
    faults g = {.pwrite_fail_at = 1, .pwrite_errno = ENOSPC, .armed = 1};
    fg_store_io io2 = {f_pwrite, f_pread, f_fdatasync, f_ftruncate, &g};
    fg_store_opts o2 = {.io = &io2};
    set_dir("second");
    ck_assert_int_eq(fg_store_create(g_dir, &o2, &s, &g_err), FG_ERR_NO_SPACE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "store.id"));
    ck_assert_int_eq(fg_store_open(g_dir, 0, NULL, &s, &g_err), FG_ERR_STORE_NOT_STORE);
}
END_TEST

START_TEST(test_fault_file_size_limit_import)
{
    /* A real EFBIG from the kernel during import (RLIMIT_FSIZE): the batch fails with a
     * no-space error, nothing of it is visible, and the store reopens clean. */
    fg_store *s = make(NULL);
    add_batch(s, "ok", 2, 16);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256 << 10, 256 << 10};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    int rc = st_put_tensor(b, "huge", 256, 1024, 16, &g_err);
    ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "weights-"));
    ck_assert_int_eq(fg_store_batch_commit(b, &g_err), FG_ERR_STATE);
    s = reopen(s, 0);
    fg_store_tensor *t;
    ck_assert_int_eq(fg_store_tensor_get(s, "huge", &t, &g_err), FG_ERR_NOT_FOUND);
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.tensors, 2);
    ck_assert_uint_eq(rep.orphan_files, 0);
    fg_store_close(s);
}
END_TEST

START_TEST(test_catalog_disk_full)
{
    /* The catalog file itself hits the size limit (RLIMIT_FSIZE -> EFBIG, as a full disk):
     * the commit fails with FG_ERR_NO_SPACE naming the catalog, nothing of the batch shows. */
    fg_store_opts o = {.max_file_bytes = 512 << 10};
    fg_store *s = make(&o);
    add_batch(s, "ok", 2, 16);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rlim_t hard = rl.rlim_max;
    rl.rlim_cur = 1 << 20;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    char pad[201];
    memset(pad, 'x', 200);
    pad[200] = '\0';
    for (int i = 0; i < 5000; i++) {
        char name[256];
        snprintf(name, sizeof name, "many.%05d.%s", i, pad);
        OK(st_put_tensor(b, name, 1, 16, 1, &g_err));
    }
    int rc = fg_store_batch_commit(b, &g_err);
    ck_assert_msg(rc == FG_ERR_NO_SPACE, "rc %d: %s", rc, g_err.msg);
    ck_assert_ptr_nonnull(strstr(g_err.msg, "catalog"));
    rl.rlim_cur = hard;
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    s = reopen(s, 0);
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.tensors, 2);
    ck_assert_uint_eq(rep.orphan_files, 0);
    add_batch(s, "after", 1, 16);
    fg_store_close(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *su = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_create_open);
    tcase_add_test(tc, test_one_handle_and_write_lock);
    tcase_add_test(tc, test_stale_readers_cleared);
    tcase_add_test(tc, test_import_lookup);
    tcase_add_test(tc, test_rotation_and_meta_override);
    tcase_add_test(tc, test_kv_pages);
    tcase_add_test(tc, test_kv_torn_and_stale);
    tcase_add_test(tc, test_verify_detects_chunk_corruption);
    tcase_add_test(tc, test_reindex_same_answers);
    tcase_add_test(tc, test_missing_and_foreign_files);
    tcase_add_test(tc, test_identity_and_shifted_offset);
    tcase_add_test(tc, test_damaged_catalog);
    tcase_add_test(tc, test_meta_large_fault);
    tcase_add_test(tc, test_short_read_messages);
    tcase_add_test(tc, test_map_grows_then_fills);
    tcase_add_test(tc, test_readonly_dir);
    tcase_add_test(tc, test_readonly_no_lock_file);
    tcase_add_test(tc, test_reader_while_writer_commits);
    tcase_add_test(tc, test_threads_lookup_while_map_grows);
    tcase_add_test(tc, test_fault_enospc);
    tcase_add_test(tc, test_fault_eio);
    tcase_add_test(tc, test_fault_short_writes);
    tcase_add_test(tc, test_fault_fsync);
    tcase_add_test(tc, test_fault_wipe_during_free);
    tcase_add_test(tc, test_fault_extend_and_create);
    tcase_add_test(tc, test_fault_file_size_limit_import);
    tcase_add_test(tc, test_catalog_disk_full);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    return tu_run(suite());
}
