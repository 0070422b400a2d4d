/* pager.c - chunk residency across DISK, HOST and DEVICE: the state machine and its invariants.
 *
 * A chunk is a byte range of a registered file. The pager keeps, per chunk, one state:
 *
 *            t_load_begin            t_load_done (target HOST)
 *    DISK ------------------> LOADING ---------------------------> HOST <------------+
 *     ^  ^                      |  \   t_load_done (target DEVICE)   |  ^            |
 *     |  |          t_fail      |   +-------------+    t_to_device   |  |            |
 *     |  |   ERROR <------------+                 v <---------------+  |            |
 *     |  |                                    UPLOADING                 |            |
 *     |  |                       t_upload_done    |                     |            |
 *     |  |                                        v        t_to_host    |            |
 *     |  +------ t_drop (clean HOST or DEVICE) DEVICE -------------------+            |
 *     |                                    t_write_begin                             |
 *     +-- (evict: write back, then drop)   HOST -------> WRITING_BACK -- t_write_done-+
 *
 * DISK          only on disk; no memory held.
 * LOADING       reads in flight (or queued) into a HOST buffer; target says where it ends up.
 * HOST          in the HOST pool.                 DEVICE   in the DEVICE pool only.
 * UPLOADING     a HOST -> DEVICE copy in flight on the device's copy engine (its stream): holds
 *               both extents and the copy's event. Prefetches and loads bound for DEVICE start
 *               uploads this way and return; acquire, wait, evict and write_back complete them
 *               (t_upload_done waits on the event and frees the HOST extent), and make_room
 *               completes them all when it finds no victim. A synchronous acquire passes through
 *               UPLOADING within one call.
 * WRITING_BACK  writes in flight from its HOST buffer; the bytes stay valid. A write-back the
 *               pager needs (eviction, write_back) waits for them; a write-behind (release
 *               with FG_PAGER_WRITE_BEHIND) returns at once, and the chunk is clean HOST once
 *               they land (reaped like reads), so evicting it later is a drop.
 * ERROR         a read failed or the checksum did not match; no memory held; acquire reports
 *               the error. (Either also makes the whole pager sticky: nothing read after it is
 *               trusted.)
 *
 * Checksums: a load is checked against the chunk's XXH3 (unless FG_PAGER_NO_VERIFY) before the
 * chunk leaves LOADING; a write-back records the XXH3 of what it wrote, so KV cache and
 * activation chunks of a writable file are checked when read back like weights are.
 * A DEVICE chunk is written back through a staging HOST buffer and stays DEVICE meanwhile.
 *
 * Invariants (fg_pager_check asserts each; numbers appear in its messages):
 *  I1  Per tier T in {HOST, DEVICE}: the extents held by chunks in T (LOADING, HOST,
 *      WRITING_BACK hold a HOST extent of `padded` bytes; DEVICE holds a DEVICE extent;
 *      UPLOADING one of each) and the arena's free list tile [0, budget[T]) exactly: no
 *      overlap, no leak. Hence used[T] <= budget[T] always, and peak[T] <= budget[T].
 *  I2  The free list is sorted by offset, coalesced, and page-aligned.
 *  I3  pins > 0 implies state is HOST or DEVICE and pin_tier equals it: a pinned chunk is never
 *      evicted, moved or in flight.
 *  I4  Between calls, queued > 0 or pending > 0 implies state LOADING or WRITING_BACK (a
 *      write-behind); the pending counts sum to the number of ops in flight, which never
 *      exceeds the engine's queue depth.
 *  I5  ERROR implies err < 0, no pins, nothing in flight.
 *  I6  A sticky error implies no chunk has queued bytes (nothing new is ever submitted).
 *  I7  dirty implies the chunk's file is writable and the chunk is HOST, UPLOADING or DEVICE.
 *  I8  home DEVICE implies the DEVICE tier is present.
 *  I9  The count of UPLOADING chunks is the pager's `uploading`.
 *  I10 Every HOST extent a chunk holds lies in committed granules of the pool (pool.c): the
 *      pool's memory arrives with first use (the homed region: at place, faulted in by a
 *      helper thread ahead of use), and committed bytes (the granules' sum, what can be
 *      resident) never exceed budget[HOST]. A budget is a ceiling, never an allocation.
 *  I11 Pinned granules (the device's pin entry, in runs of granules as they are committed,
 *      pool.c) are committed granules, their bytes never exceed the committed bytes, and the pool's
 *      pinned_bytes is their sum: on a GPU the budget is a ceiling for pinned memory too. A
 *      HOST extent is handed to the device's copies as PINNED only when every granule it spans
 *      is pinned (or the pool is one PINNED allocation, a device without pin): those copies are
 *      asynchronous, the others synchronous.
 *
 * Transitions each have one function (t_*); nothing else assigns state. Loads are split into
 * io_block-sized ops and fed to the engine from a FIFO of chunks with queued bytes as slots
 * free up, so a prefetch of many chunks keeps queue_depth ops in flight. Completions are reaped
 * by pump(), which acquire and wait call while they block (time counted as stall), and which
 * prefetch and release call without blocking (progress), so a finished load bound for DEVICE
 * starts its upload while the caller computes. Room is made
 * by evicting least-recently-used unpinned chunks: used ones not homed in the tier first, then
 * used ones homed there, and prefetched-but-never-acquired ones last, never for another prefetch
 * (see evictable); a blocking call (acquire, write_back, evict) with nothing evictable but
 * loads in flight waits for them (they become evictable); prefetch never waits. Once placed, a
 * pool is two regions: the bottom holds exactly the chunks homed in the tier, the top is the
 * streaming room for the others (see make_room), so streaming never evicts a homed chunk nor
 * fragments their space. If room still cannot be made the call fails with FG_ERR_PAGER_BUDGET
 * and nothing is exceeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pager_int.h"

#define NONE UINT32_MAX

/* Debug builds (FG_PAGER_DEBUG, on in sanitizer builds) check every invariant after each
 * public call that changes state; a broken invariant is a bug in the pager, so it aborts. The
 * check sorts every extent (O(chunks log chunks) a call), which dominated long end-to-end runs
 * under ASan, so FG_PAGER_CHECK_EVERY=N (environment, read at open) runs it after every N-th
 * such call instead: the suite's long runs take 64, test_pager and the short tests every call. */
#ifdef FG_PAGER_DEBUG
#define DEBUG_CHECK(p)                                                                          \
    do {                                                                                        \
        fg_err ce_;                                                                             \
        if (++(p)->dbg_calls % (p)->dbg_every == 0 && fg_pager_check((p), &ce_)) {              \
            fprintf(stderr, "fg pager invariant broken: %s\n", ce_.msg);                        \
            abort();                                                                            \
        }                                                                                       \
    } while (0)
#else
#define DEBUG_CHECK(p) ((void)0)
#endif

static int pump(fg_pager *p, unsigned min, fg_err *err);
static int finish_uploads(fg_pager *p, fg_err *err);
static int make_room(fg_pager *p, fg_tier t, uint64_t len, int homed, uint64_t *off,
                     fg_err *err);

const char *fg_tier_name(fg_tier t)
{
    return t == FG_TIER_DISK ? "disk" : t == FG_TIER_HOST ? "host" : "device";
}

void fg_pager_notice(fg_pager *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->st.notice, sizeof p->st.notice, fmt, ap);
    va_end(ap);
    if (p->cfg.notice)
        p->cfg.notice(p->cfg.notice_ctx, p->st.notice);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int device_present(const fg_pager *p) { return p->dev_base != NULL; }

/* The HOST pool's buffer type, for the device's copies. */
/* The buffer type of the HOST extent [off, off+len), for the device's copies (I11). */
static fg_buft host_buft(const fg_pager *p, uint64_t off, uint64_t len)
{
    return fg_hostpool_buft(&p->hp, off, len);
}

/* "pager chunk 7", or "tensor 'w' chunk 3 (pager chunk 7)" with the caller's label. */
static const char *chunk_name(const fg_pager *p, uint32_t id, char *buf, size_t n)
{
    char label[200] = "";
    if (p->cfg.label)
        p->cfg.label(p->cfg.label_ctx, p->chunks[id].d.tag, label, sizeof label);
    label[sizeof label - 1] = '\0';
    if (label[0])
        snprintf(buf, n, "%s (pager chunk %u)", label, id);
    else
        snprintf(buf, n, "pager chunk %u", id);
    return buf;
}

/* Enter the sticky state (first error wins) and stop every queued transfer. */
static int set_sticky(fg_pager *p, const fg_err *e)
{
    if (!p->sticky.code) {
        p->sticky = *e;
        p->st.sticky = e->code;
    }
    return e->code;
}

static int sticky_check(const fg_pager *p, fg_err *err)
{
    if (!p->sticky.code)
        return FG_OK;
    if (p->sticky.code == FG_ERR_CHECKSUM) /* names the file and chunk already */
        fg_err_set(err, p->sticky.code, "%s", p->sticky.msg);
    else
        fg_err_set(err, p->sticky.code, "pager stopped by an earlier I/O error: %s",
                   p->sticky.msg);
    if (err)
        err->sys_errno = p->sticky.sys_errno;
    return p->sticky.code;
}

/* ---------------------------------------------------------------- open / close */

static int open_engine(fg_pager *p, fg_err *err)
{
    const fg_pager_config *c = &p->cfg;
    if (c->io) {
        p->io = c->io;
        return FG_OK;
    }
    if (c->engine != FG_PAGER_ENGINE_PREAD) {
        int rc = fg_pager_io_uring_create(c->queue_depth, &p->io, err);
        if (rc == FG_OK || c->engine == FG_PAGER_ENGINE_URING)
            return rc;
        fg_pager_notice(p, "pager: io_uring unavailable (%s); using pread", err ? err->msg : "");
    }
    return fg_pager_io_pread_create(c->queue_depth, 1, &p->io, err);
}

static int open_device(fg_pager *p, fg_err *err)
{
    uint64_t n = p->cfg.budget[FG_TIER_DEVICE];
    if (!p->dev && n && !(p->cfg.flags & FG_PAGER_NO_CUDA))
        fg_pager_device_cuda_create(&p->dev, NULL);
    if (!p->dev || !n)
        return FG_OK;
    fg_err e;
    int rc = p->dev->iface->alloc(p->dev, FG_BUFT_DEVICE, n, &p->dev_base, &e);
    if (rc) { /* one line naming the tier and its budget */
        p->dev_base = NULL;
        fg_err_set(err, rc, "pager: DEVICE budget of %.1f MiB: %s", n / 1048576.0, e.msg);
        if (err)
            err->sys_errno = e.sys_errno;
    }
    return rc;
}

static int check_config(const fg_pager_config *c, fg_err *err)
{
    if (!c || c->budget[FG_TIER_HOST] < FG_PAGE)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "pager: HOST budget must be >= 4096 bytes");
    if (c->io_block % FG_PAGE || c->io_block > (1ull << 30))
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "pager: io_block %llu must be a multiple of 4096 and <= 1 GiB",
                          (unsigned long long)c->io_block);
    if (c->queue_depth > 4096)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "pager: queue_depth %u > 4096",
                          c->queue_depth);
    return FG_OK;
}

/* A notice from pool.c, printed here (pool.c calls nothing in pager.c). */
static void pool_note(fg_pager *p, const char *note)
{
    if (note[0])
        fg_pager_notice(p, "%s", note);
}

static int open_pools(fg_pager *p, fg_err *err)
{
    char note[160] = "";
    fg_hostpool *h = &p->hp;
    int rc = fg_hostpool_open(h, p->dev, p->cfg.budget[FG_TIER_HOST], p->cfg.io_block,
                              !(p->cfg.flags & FG_PAGER_NO_MLOCK), note, sizeof note, err);
    pool_note(p, note);
    if (rc)
        return rc;
    if (fg_arena_init(&p->arena[FG_TIER_HOST], p->cfg.budget[FG_TIER_HOST]) ||
        fg_arena_init(&p->arena[FG_TIER_DEVICE], p->dev_base ? p->cfg.budget[FG_TIER_DEVICE] : 0))
        return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    note[0] = '\0';
    fg_hostpool_attach(h, p->io, note, sizeof note);
    pool_note(p, note);
    p->depth = p->io->m->depth(p->io);
    p->ops = calloc(p->depth, sizeof *p->ops);
    p->free_ops = calloc(p->depth, sizeof *p->free_ops);
    if (!p->ops || !p->free_ops)
        return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    for (uint32_t i = 0; i < p->depth; i++)
        p->free_ops[p->n_free_ops++] = p->depth - 1 - i;
    return FG_OK;
}

int fg_pager_open(const fg_pager_config *cfg, fg_pager **out, fg_err *err)
{
    int rc = check_config(cfg, err);
    fg_pager *p = rc ? NULL : calloc(1, sizeof *p);
    if (!p) {
        if (cfg && cfg->io)
            cfg->io->m->destroy(cfg->io);
        if (cfg && cfg->device)
            cfg->device->iface->destroy(cfg->device);
        return rc ? rc : fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    }
    p->cfg = *cfg;
    const char *pf = getenv("FG_PAGER_PREFAULT"); /* 0: as used only (benches compare) */
    if (pf && strcmp(pf, "0") == 0)
        p->cfg.flags |= FG_PAGER_NO_PREFAULT;
    const char *ce = getenv("FG_PAGER_CHECK_EVERY"); /* debug builds: the check's stride */
    unsigned long every = ce ? strtoul(ce, NULL, 10) : 1;
    p->dbg_every = every >= 1 && every <= UINT32_MAX ? (uint32_t)every : 1;
    p->cfg.budget[FG_TIER_HOST] &= ~(FG_PAGE - 1);
    p->cfg.budget[FG_TIER_DEVICE] &= ~(FG_PAGE - 1);
    if (!p->cfg.io_block)
        p->cfg.io_block = 1ull << 20;
    p->q_head = p->q_tail = NONE;
    p->dev = cfg->device; /* owned from here, so a failed open destroys it */
    if ((rc = open_engine(p, err)) || (rc = open_device(p, err)) || (rc = open_pools(p, err))) {
        fg_pager_close(p);
        return rc;
    }
    *out = p;
    return FG_OK;
}

void fg_pager_close(fg_pager *p)
{
    if (!p)
        return;
    while (p->inflight && pump(p, 1, NULL) == FG_OK)
        ;
    finish_uploads(p, NULL);
    for (uint32_t i = 0; i < p->n_files; i++) {
        if (p->files[i].io)
            p->files[i].io->m->close(p->files[i].io, p->files[i].handle);
        free(p->files[i].path);
    }
    free(p->files);
    free(p->chunks);
    free(p->ops);
    free(p->free_ops);
    if (p->fallback) /* engines first: the rings hold the registered pool */
        p->fallback->m->destroy(p->fallback);
    if (p->io)
        p->io->m->destroy(p->io);
    fg_arena_fini(&p->arena[FG_TIER_HOST]);
    fg_arena_fini(&p->arena[FG_TIER_DEVICE]);
    fg_hostpool_close(&p->hp, p->dev);
    if (p->dev_base)
        p->dev->iface->free(p->dev, FG_BUFT_DEVICE, p->dev_base);
    if (p->dev)
        p->dev->iface->destroy(p->dev);
    free(p);
}

/* ---------------------------------------------------------------- registration */

static int open_fallback(fg_pager *p, const char *path, int writable, pfile *f, fg_err *err)
{
    int rc = FG_OK;
    if (!p->fallback)
        rc = fg_pager_io_pread_create(p->depth, 0, &p->fallback, err);
    if (rc == FG_OK)
        rc = p->fallback->m->open(p->fallback, path, writable, &f->handle, err);
    if (rc == FG_OK) {
        f->io = p->fallback;
        p->st.fallback_files++;
        fg_pager_notice(p, "pager: %s refuses O_DIRECT; reading it with buffered pread", path);
    }
    return rc;
}

int fg_pager_add_file(fg_pager *p, const char *path, int writable, uint32_t *file, fg_err *err)
{
    int rc = sticky_check(p, err);
    if (rc)
        return rc;
    if (p->n_files == p->cap_files) {
        uint32_t cap = p->cap_files ? 2 * p->cap_files : 8;
        pfile *n = realloc(p->files, cap * sizeof *n);
        if (!n)
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
        p->files = n;
        p->cap_files = cap;
    }
    pfile *f = &p->files[p->n_files];
    memset(f, 0, sizeof *f);
    f->writable = writable;
    f->handle = -1;
    f->path = strdup(path ? path : "(memory only)");
    if (!f->path)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path ? path : "(memory)");
    if (!path) { /* memory only: no I/O engine, submit_op refuses it */
        *file = p->n_files++;
        return FG_OK;
    }
    fg_err e2;
    rc = p->io->m->open(p->io, path, writable, &f->handle, &e2);
    if (rc == FG_OK)
        f->io = p->io;
    else if (rc == FG_ERR_UNSUPPORTED && e2.sys_errno == EINVAL)
        rc = open_fallback(p, path, writable, f, &e2);
    if (rc) {
        free(f->path);
        if (err)
            *err = e2;
        return rc;
    }
    *file = p->n_files++;
    return FG_OK;
}

int fg_pager_add_chunk(fg_pager *p, const fg_pager_chunk_desc *d, uint32_t *id, fg_err *err)
{
    int rc = sticky_check(p, err);
    if (rc)
        return rc;
    if (d->file >= p->n_files || d->length == 0 || d->padded < d->length ||
        d->padded % FG_PAGE || d->offset % FG_PAGE || (unsigned)d->kind >= FG_CHUNK_KIND_COUNT ||
        d->offset + d->padded < d->offset || d->rank >= FG_PLACE_RANKS)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "pager: chunk (file %u, offset %llu, length %llu, padded %llu, rank %u) "
                          "invalid: offset and padded must be multiples of 4096, padded >= length "
                          "> 0, rank < %d", d->file, (unsigned long long)d->offset,
                          (unsigned long long)d->length, (unsigned long long)d->padded, d->rank,
                          FG_PLACE_RANKS);
    if (p->n_chunks == p->cap_chunks) {
        uint32_t cap = p->cap_chunks ? 2 * p->cap_chunks : 64;
        pchunk *n = realloc(p->chunks, (size_t)cap * sizeof *n);
        if (!n)
            return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
        p->chunks = n;
        p->cap_chunks = cap;
    }
    pchunk *c = &p->chunks[p->n_chunks];
    memset(c, 0, sizeof *c);
    c->d = *d;
    c->next_q = NONE;
    c->fresh = d->fresh && p->files[d->file].writable;
    *id = p->n_chunks++;
    return FG_OK;
}

int fg_pager_chunk(const fg_pager *p, uint32_t id, fg_pager_chunk_desc *out)
{
    if (id >= p->n_chunks)
        return FG_ERR_INVALID_ARG;
    *out = p->chunks[id].d;
    return FG_OK;
}

uint32_t fg_pager_chunk_count(const fg_pager *p) { return p->n_chunks; }

fg_tier fg_pager_home(const fg_pager *p, uint32_t id)
{
    return id < p->n_chunks ? (fg_tier)p->chunks[id].home : FG_TIER_DISK;
}

/* ---------------------------------------------------------------- the I/O queue */

static void enqueue(fg_pager *p, uint32_t id)
{
    pchunk *c = &p->chunks[id];
    c->next_q = NONE;
    c->in_q = 1;
    if (p->q_tail == NONE)
        p->q_head = id;
    else
        p->chunks[p->q_tail].next_q = id;
    p->q_tail = id;
}

static void dequeue_head(fg_pager *p)
{
    pchunk *c = &p->chunks[p->q_head];
    p->q_head = c->next_q;
    if (p->q_head == NONE)
        p->q_tail = NONE;
    c->in_q = 0;
    c->next_q = NONE;
}

static uint8_t *chunk_xfer_buf(fg_pager *p, const pchunk *c)
{
    return c->xfer ? c->xfer : p->hp.base + c->host_off;
}

/* Submit one op of [off, off+len) of chunk id; a failure to submit is an I/O failure. */
static int submit_op(fg_pager *p, uint32_t id, uint64_t off, uint64_t len, int write, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    pfile *f = &p->files[c->d.file];
    if (!f->io) {
        char name[256];
        return fg_err_set(err, FG_ERR_STATE, "pager: %s would be %s, but it lives in memory only "
                          "(registered without a file)", chunk_name(p, id, name, sizeof name),
                          write ? "written back" : "read");
    }
    uint32_t s = p->free_ops[--p->n_free_ops];
    p->ops[s] = (op_slot){id, off, len, (uint8_t)write, 1, f->io};
    fg_pager_io_op op = {f->handle, write, chunk_xfer_buf(p, c) + off, len, c->d.offset + off, s};
    int rc = f->io->m->submit(f->io, &op, err);
    if (rc) {
        p->ops[s].used = 0;
        p->free_ops[p->n_free_ops++] = s;
        return rc;
    }
    c->pending++;
    p->inflight++;
    p->st.io_ops++;
    p->st.inflight_sum += p->inflight;
    return FG_OK;
}

static void fail_chunk(fg_pager *p, uint32_t id, const fg_err *e);

/* Feed queued bytes to the engines while op slots are free (never after a sticky error). */
static void submit_queued(fg_pager *p)
{
    while (p->q_head != NONE && p->n_free_ops && !p->sticky.code) {
        uint32_t id = p->q_head;
        pchunk *c = &p->chunks[id];
        uint64_t off = c->d.padded - c->queued;
        uint64_t len = c->queued < p->cfg.io_block ? c->queued : p->cfg.io_block;
        fg_err e;
        if (submit_op(p, id, off, len, c->xfer_write, &e)) {
            fg_err_set(&e, e.code, "%s: submitting %s of %llu bytes at %llu: %s",
                       p->files[c->d.file].path, c->xfer_write ? "write" : "read",
                       (unsigned long long)len, (unsigned long long)(c->d.offset + off), e.msg);
            fail_chunk(p, id, &e);
            continue;
        }
        c->queued -= len;
        if (!c->queued)
            dequeue_head(p);
    }
}

/* ---------------------------------------------------------------- transitions */

static void t_error_final(fg_pager *p, pchunk *c)
{
    if (c->xfer_write) { /* a failed write leaves the bytes valid: back to HOST, still dirty */
        c->state = CS_HOST;
        c->xfer_write = 0;
        c->xfer = NULL;
        c->dirty = 1;
        return;
    }
    fg_arena_free(&p->arena[FG_TIER_HOST], c->host_off, c->d.padded);
    c->state = CS_ERROR;
}

/* Any transfer failure: the chunk ends in ERROR (reads) once its ops drain; I/O failures make
 * the pager sticky, and every chunk with queued bytes fails with it (I6). */
static void fail_one(fg_pager *p, uint32_t id, const fg_err *e)
{
    pchunk *c = &p->chunks[id];
    if (!c->err)
        c->err = e->code;
    set_sticky(p, e);
    if (c->in_q) { /* unlink from the queue (it is usually the head) */
        uint32_t prev = NONE;
        for (uint32_t i = p->q_head; i != id; i = p->chunks[i].next_q)
            prev = i;
        if (prev == NONE)
            p->q_head = c->next_q;
        else
            p->chunks[prev].next_q = c->next_q;
        if (p->q_tail == id)
            p->q_tail = prev;
        c->in_q = 0;
    }
    c->queued = 0;
    if (c->pending == 0 && (c->state == CS_LOADING || c->state == CS_WRITING_BACK))
        t_error_final(p, c);
}

static void fail_chunk(fg_pager *p, uint32_t id, const fg_err *e)
{
    fail_one(p, id, e);
    if (p->sticky.code)
        while (p->q_head != NONE)
            fail_one(p, p->q_head, e);
}

/* DISK -> LOADING: take a HOST extent and queue the reads. */
static void t_load_done(fg_pager *p, uint32_t id);

static int t_load_begin(fg_pager *p, uint32_t id, fg_tier target, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    int rc = make_room(p, FG_TIER_HOST, c->d.padded, c->home == FG_TIER_HOST, &c->host_off, err);
    if (rc)
        return rc;
    if (c->fresh) { /* nothing was ever written: no read, zeros */
        memset(p->hp.base + c->host_off, 0, c->d.padded);
        c->state = CS_LOADING;
        c->used = 0;
        c->lru = ++p->tick;
        c->target = (uint8_t)target;
        c->err = 0;
        c->gen++;
        t_load_done(p, id);
        return FG_OK;
    }
    c->state = CS_LOADING;
    c->used = 0;
    c->lru = ++p->tick;
    c->target = (uint8_t)target;
    c->err = 0;
    c->xfer = NULL;
    c->xfer_write = 0;
    c->queued = c->d.padded;
    c->gen++;
    enqueue(p, id);
    submit_queued(p);
    return FG_OK;
}

/* HOST -> DEVICE: copy into a DEVICE extent; the HOST one is freed when the copy completes.
 * With async the copy goes to the device's copy engine (a stream) and the chunk is UPLOADING
 * until t_upload_done waits on its event; a device that completes it at once skips UPLOADING. */
static int t_upload_done(fg_pager *p, uint32_t id, fg_err *err);

static int t_to_device(fg_pager *p, uint32_t id, int async, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    uint64_t off;
    int rc = make_room(p, FG_TIER_DEVICE, c->d.padded, c->home == FG_TIER_DEVICE, &off, err);
    if (rc)
        return rc;
    fg_event *ev = NULL;
    rc = p->dev->iface->copy(p->dev, (char *)p->dev_base + off, FG_BUFT_DEVICE,
                             p->hp.base + c->host_off, host_buft(p, c->host_off, c->d.padded),
                             c->d.padded, async ? &ev : NULL, err);
    if (rc) {
        fg_arena_free(&p->arena[FG_TIER_DEVICE], off, c->d.padded);
        return rc;
    }
    c->dev_off = off;
    c->ev = ev;
    c->state = CS_UPLOADING;
    p->uploading++;
    if (ev) {
        p->st.async_uploads++;
        return FG_OK;
    }
    return t_upload_done(p, id, err);
}

/* UPLOADING -> DEVICE (the copy completed: the HOST extent is freed), or back to HOST when
 * the device reports the copy failed (a device fault: the pager turns sticky). */
static int t_upload_done(fg_pager *p, uint32_t id, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    fg_err e;
    int rc = p->dev->iface->event_wait(p->dev, c->ev, &e);
    c->ev = NULL;
    p->uploading--;
    if (rc) {
        char name[256];
        fg_err_set(&e, FG_ERR_PAGER_DEVICE, "pager: uploading %s to the device: %s",
                   chunk_name(p, id, name, sizeof name), e.msg);
        fg_arena_free(&p->arena[FG_TIER_DEVICE], c->dev_off, c->d.padded);
        c->state = CS_HOST;
        set_sticky(p, &e);
        if (err)
            *err = e;
        return e.code;
    }
    fg_arena_free(&p->arena[FG_TIER_HOST], c->host_off, c->d.padded);
    c->state = CS_DEVICE;
    p->st.moved[FG_TIER_HOST][FG_TIER_DEVICE] += c->d.padded;
    return FG_OK;
}

/* Complete every upload in flight (they free HOST room and become evictable DEVICE chunks). */
static int finish_uploads(fg_pager *p, fg_err *err)
{
    int rc = FG_OK;
    for (uint32_t i = 0; i < p->n_chunks && p->uploading; i++)
        if (p->chunks[i].state == CS_UPLOADING) {
            int r = t_upload_done(p, i, err);
            rc = rc ? rc : r;
        }
    return rc;
}

/* DEVICE -> HOST. */
static int t_to_host(fg_pager *p, uint32_t id, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    uint64_t off;
    int rc = make_room(p, FG_TIER_HOST, c->d.padded, c->home == FG_TIER_HOST, &off, err);
    if (rc)
        return rc;
    rc = p->dev->iface->copy(p->dev, p->hp.base + off, host_buft(p, off, c->d.padded),
                             (char *)p->dev_base + c->dev_off, FG_BUFT_DEVICE, c->d.padded, NULL,
                             err);
    if (rc) {
        fg_arena_free(&p->arena[FG_TIER_HOST], off, c->d.padded);
        return rc;
    }
    fg_arena_free(&p->arena[FG_TIER_DEVICE], c->dev_off, c->d.padded);
    c->host_off = off;
    c->state = CS_HOST;
    p->st.moved[FG_TIER_DEVICE][FG_TIER_HOST] += c->d.padded;
    return FG_OK;
}

/* LOADING -> HOST (or on to DEVICE), after the last read; ERROR on a checksum mismatch. */
static void t_load_done(fg_pager *p, uint32_t id)
{
    pchunk *c = &p->chunks[id];
    if (!c->fresh)
        p->st.moved[FG_TIER_DISK][FG_TIER_HOST] += c->d.padded;
    c->state = CS_HOST;
    int check = !c->fresh && !(p->cfg.flags & FG_PAGER_NO_VERIFY) && c->d.has_xxh3 &&
                !((p->cfg.flags & FG_PAGER_VERIFY_ONCE) && c->verified);
    if (check && fg_pager_xxh3(p->hp.base + c->host_off, c->d.length) != c->d.xxh3) {
        fg_err e;
        char name[256];
        fg_err_set(&e, FG_ERR_CHECKSUM, "%s: %s at offset %llu (%llu bytes): checksum mismatch: "
                   "%s", p->files[c->d.file].path, chunk_name(p, id, name, sizeof name),
                   (unsigned long long)c->d.offset, (unsigned long long)c->d.length,
                   p->files[c->d.file].writable
                       ? "the bytes written back changed on disk (a disk or file-system fault)"
                       : "the file is damaged or not the one described (check it with "
                         "fg-inspect --verify)");
        c->state = CS_LOADING;
        fail_chunk(p, id, &e);
        return;
    }
    c->verified |= check;
    if (c->target == FG_TIER_DEVICE) {
        c->hold++;
        fg_err e;
        if (t_to_device(p, id, 1, &e)) /* no room on DEVICE now: stays HOST, acquire retries */
            c->target = FG_TIER_HOST;
        c->hold--;
    }
}

/* HOST or DEVICE -> DISK for a clean, unpinned chunk. */
static void t_drop(fg_pager *p, pchunk *c)
{
    if (c->state == CS_DEVICE)
        fg_arena_free(&p->arena[FG_TIER_DEVICE], c->dev_off, c->d.padded);
    else
        fg_arena_free(&p->arena[FG_TIER_HOST], c->host_off, c->d.padded);
    c->state = CS_DISK;
    p->st.evictions++;
    p->st.wasted += !c->used;
}

/* A write records the XXH3 of what it writes, checked when the bytes are read back (unless
 * FG_PAGER_NO_VERIFY and the chunk was registered without one). */
static int records_xxh3(const fg_pager *p, const pchunk *c)
{
    return c->d.has_xxh3 || !(p->cfg.flags & FG_PAGER_NO_VERIFY);
}

/* The last write of a chunk landed: the file holds its bytes, whose XXH3 (taken when the write
 * began) is checked when they are read back. WRITING_BACK -> HOST; a DEVICE chunk written
 * through a staging buffer stays DEVICE. */
static void t_write_done(fg_pager *p, uint32_t id)
{
    pchunk *c = &p->chunks[id];
    if (c->state == CS_WRITING_BACK)
        c->state = CS_HOST;
    c->xfer = NULL;
    c->xfer_write = 0;
    c->fresh = 0;
    if (records_xxh3(p, c)) {
        c->d.xxh3 = c->wr_xxh3;
        c->d.has_xxh3 = 1;
        c->verified = 0; /* new bytes on disk: the next load is checked again */
    }
    p->st.moved[FG_TIER_HOST][FG_TIER_DISK] += c->d.padded;
    p->st.write_backs++;
}

/* One completed op: account it, resubmit the rest of a short transfer, finish the chunk. */
static void complete(fg_pager *p, const fg_pager_io_done *d)
{
    op_slot s = p->ops[d->user];
    p->ops[d->user].used = 0;
    p->free_ops[p->n_free_ops++] = (uint32_t)d->user;
    p->inflight--;
    pchunk *c = &p->chunks[s.chunk];
    c->pending--;
    fg_err e;
    const char *path = p->files[c->d.file].path;
    char name[256];
    if (d->res < 0) {
        fg_err_sys(&e, FG_ERR_IO, (int)-d->res, "%s: %s of %s (%llu bytes at %llu)", path,
                   s.write ? "write" : "read", chunk_name(p, s.chunk, name, sizeof name),
                   (unsigned long long)s.len, (unsigned long long)(c->d.offset + s.off));
        if (d->res == -ENOSPC)
            e.code = FG_ERR_NO_SPACE;
        fail_chunk(p, s.chunk, &e);
    } else if ((uint64_t)d->res < s.len && !c->err) {
        p->st.short_reads++;
        uint64_t got = (uint64_t)d->res;
        if (got == 0 || got % FG_PAGE) {
            fg_err_set(&e, FG_ERR_PAGER_SHORT,
                       "%s: %s: end of file at %llu inside the chunk (%llu bytes at %llu)",
                       path, chunk_name(p, s.chunk, name, sizeof name),
                       (unsigned long long)(c->d.offset + s.off + got),
                       (unsigned long long)c->d.padded, (unsigned long long)c->d.offset);
            fail_chunk(p, s.chunk, &e);
        } else if (submit_op(p, s.chunk, s.off + got, s.len - got, s.write, &e)) {
            fail_chunk(p, s.chunk, &e);
        }
    }
    if (c->pending || c->queued)
        return;
    if (c->err && (c->state == CS_LOADING || c->state == CS_WRITING_BACK)) {
        t_error_final(p, c);
    } else if (c->state == CS_LOADING) {
        submit_queued(p); /* refill the freed slots first: the disk works while we hash */
        t_load_done(p, s.chunk);
    }
    else if (c->xfer_write)
        t_write_done(p, s.chunk);
}

/* Reap completions from both engines, blocking for at least min of them; feed the queue. */
static int pump(fg_pager *p, unsigned min, fg_err *err)
{
    fg_pager_io_done done[64];
    unsigned n = 0, total = 0;
    int rc = FG_OK;
    p->in_pump++;
    if (p->fallback) {
        rc = p->fallback->m->reap(p->fallback, 0, done, 64, &n, err);
        for (unsigned i = 0; i < n; i++)
            complete(p, &done[i]);
        total += n;
    }
    if (rc == FG_OK && p->inflight) {
        unsigned want = total >= min ? 0 : 1;
        rc = p->io->m->reap(p->io, want, done, 64, &n, err);
        for (unsigned i = 0; i < n; i++)
            complete(p, &done[i]);
        total += n;
    }
    p->in_pump--;
    if (rc) {
        fg_err e = err ? *err : (fg_err){rc, 0, "pager: reaping completions failed"};
        return set_sticky(p, &e);
    }
    submit_queued(p);
    if (total < min && !p->inflight && p->q_head == NONE)
        return fg_err_set(err, FG_ERR_STATE, "pager: waiting with no I/O in flight");
    return FG_OK;
}

/* Reap whatever I/O has completed without blocking: finished loads bound for DEVICE start
 * their uploads now (the copy engine works while the caller computes) rather than when their
 * acquire comes; freed op slots take queued reads. Errors turn sticky and are reported by the
 * next call that needs the pager. */
static void progress(fg_pager *p)
{
    if (p->inflight && !p->in_pump && !p->sticky.code)
        pump(p, 0, NULL);
}

/* Block until chunk id has no transfer in progress (I/O, then an upload its load started);
 * time counted as stall. */
static int wait_chunk(fg_pager *p, uint32_t id, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    if (!c->pending && !c->queued && c->state != CS_UPLOADING)
        return FG_OK;
    uint64_t t0 = now_ns();
    int rc = FG_OK;
    while ((c->pending || c->queued) && rc == FG_OK)
        rc = pump(p, 1, err);
    if (rc == FG_OK && c->state == CS_UPLOADING)
        rc = t_upload_done(p, id, err);
    p->st.stall_ns += now_ns() - t0;
    return rc;
}

/* Start writing chunk id's padded bytes from buf (its HOST extent, or a staging copy of a
 * DEVICE chunk); the chunk is clean from here (a failed write makes it dirty again). A HOST
 * chunk is WRITING_BACK until the writes land (t_write_done). */
static void t_write_begin(fg_pager *p, uint32_t id, uint8_t *buf)
{
    pchunk *c = &p->chunks[id];
    if (c->state == CS_HOST)
        c->state = CS_WRITING_BACK;
    c->xfer = buf;
    c->xfer_write = 1;
    c->err = 0;
    c->dirty = 0;
    if (records_xxh3(p, c))
        c->wr_xxh3 = fg_pager_xxh3(buf, c->d.length);
    c->queued = c->d.padded;
    enqueue(p, id);
    submit_queued(p);
}

/* Write chunk id's padded bytes from buf (its HOST extent or a staging copy), synchronously. */
static int write_chunk(fg_pager *p, uint32_t id, uint8_t *buf, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    uint8_t prev = c->state;
    c->hold++; /* once written it is HOST again, and a nested make_room must not drop it */
    t_write_begin(p, id, buf);
    int rc = wait_chunk(p, id, err);
    c->hold--;
    if (prev == CS_DEVICE) /* a failed staged write ends as HOST in t_error_final */
        c->state = CS_DEVICE;
    if (rc == FG_OK && (c->err || p->sticky.code))
        rc = sticky_check(p, err);
    return rc;
}

/* Write back a resident chunk (a DEVICE one through a staging HOST extent). */
static int write_back(fg_pager *p, uint32_t id, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    if (c->state == CS_HOST)
        return write_chunk(p, id, p->hp.base + c->host_off, err);
    uint64_t off;
    c->hold++;
    int rc = make_room(p, FG_TIER_HOST, c->d.padded, 0, &off, err); /* a staging buffer */
    c->hold--;
    if (rc)
        return rc;
    uint8_t *stage = p->hp.base + off;
    rc = p->dev->iface->copy(p->dev, stage, FG_BUFT_HOST, (char *)p->dev_base + c->dev_off,
                             FG_BUFT_DEVICE, c->d.padded, NULL, err);
    if (rc == FG_OK) {
        p->st.moved[FG_TIER_DEVICE][FG_TIER_HOST] += c->d.padded;
        c->hold++;
        rc = write_chunk(p, id, stage, err);
        c->hold--;
    }
    fg_arena_free(&p->arena[FG_TIER_HOST], off, c->d.padded);
    return rc;
}

/* ---------------------------------------------------------------- eviction */

/* Victim classes: 0 = used chunks not homed in t, 1 = used chunks homed in t, 2 = prefetched
 * chunks nobody has acquired yet (evicting those wastes the read and, when streaming, thrashes:
 * the next acquire would miss). LRU within a class. */
static int evictable(const fg_pager *p, const pchunk *c, fg_tier t, int pass)
{
    uint8_t want = t == FG_TIER_HOST ? CS_HOST : CS_DEVICE;
    if (c->state != want || c->pins || c->hold)
        return 0;
    (void)p;
    if (pass == 0)
        return c->used && c->home != t;
    if (pass == 1)
        return c->used && c->home == t;
    return !c->used;
}

/* Least recently used chunk of the first class (in pass order 0, 1, 2; a prefetch stops
 * before 2: it never evicts another unused prefetch) with bytes inside [lo, hi) of t's pool. */
static uint32_t pick_victim(const fg_pager *p, fg_tier t, uint64_t lo, uint64_t hi)
{
    int passes = p->no_wait ? 2 : 3;
    for (int pass = 0; pass < passes; pass++) {
        uint32_t best = NONE;
        for (uint32_t i = 0; i < p->n_chunks; i++) {
            const pchunk *c = &p->chunks[i];
            uint64_t off = t == FG_TIER_HOST ? c->host_off : c->dev_off;
            if (evictable(p, c, t, pass) && off < hi && off + c->d.padded > lo &&
                (best == NONE || c->lru < p->chunks[best].lru))
                best = i;
        }
        if (best != NONE)
            return best;
    }
    return NONE;
}

/* Evict one chunk: a dirty HOST chunk is written back first; a dirty DEVICE chunk moves to
 * HOST (it becomes a HOST victim later). */
static int evict_one(fg_pager *p, uint32_t id, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    int rc = FG_OK;
    c->hold++;
    if (c->dirty && c->state == CS_DEVICE)
        rc = t_to_host(p, id, err);
    else if (c->dirty)
        rc = write_chunk(p, id, p->hp.base + c->host_off, err);
    c->hold--;
    if (rc == FG_OK && !c->dirty)
        t_drop(p, c);
    return rc;
}

/* Room for len bytes in tier t: a chunk homed there takes it from the bottom region
 * [0, split), one passing through from the top region [split, size) (see p->split), so
 * streaming never evicts or fragments what is homed; a region too small for len falls back to
 * the whole pool (before place, or for a chunk homed since a re-place). */
static int make_room(fg_pager *p, fg_tier t, uint64_t len, int homed, uint64_t *off, fg_err *err)
{
    fg_arena *a = &p->arena[t];
    uint64_t lo = homed ? 0 : p->split[t], hi = homed && p->split[t] ? p->split[t] : a->size;
    if (hi - lo < len)
        lo = 0, hi = a->size;
    while (fg_arena_alloc_in(a, len, lo, hi, !homed, off)) {
        uint32_t v = pick_victim(p, t, lo, hi);
        if (v == NONE && t == FG_TIER_HOST && p->inflight && !p->in_pump && !p->no_wait) {
            int rc = pump(p, 1, err); /* blocking call: in-flight loads become evictable */
            if (rc)
                return rc;
            continue;
        }
        if (v == NONE && p->uploading && !p->no_wait) { /* their HOST extents free, their */
            int rc = finish_uploads(p, err);           /* DEVICE chunks become victims */
            if (rc)
                return rc;
            continue;
        }
        if (v == NONE)
            return fg_err_set(err, FG_ERR_PAGER_BUDGET,
                              "pager: %s budget of %llu bytes exhausted: need %llu contiguous "
                              "bytes, %llu free, the rest pinned or in flight",
                              fg_tier_name(t), (unsigned long long)a->size,
                              (unsigned long long)len, (unsigned long long)fg_arena_free_bytes(a));
        int rc = evict_one(p, v, err);
        if (rc)
            return rc;
    }
    if (t == FG_TIER_HOST) { /* memory arrives with first use (I10) */
        char note[160] = "";
        fg_hostpool_commit(&p->hp, *off, len, note, sizeof note);
        pool_note(p, note);
    }
    return FG_OK;
}

/* ---------------------------------------------------------------- public calls */

static int check_id(const fg_pager *p, uint32_t id, fg_err *err)
{
    if (id >= p->n_chunks)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "pager: no chunk %u (%u registered)", id,
                          p->n_chunks);
    return FG_OK;
}

static int resolve_tier(const fg_pager *p, const pchunk *c, fg_tier *t, fg_err *err)
{
    if (*t == FG_TIER_DISK)
        *t = c->home == FG_TIER_DEVICE ? FG_TIER_DEVICE : FG_TIER_HOST;
    if (*t == FG_TIER_DEVICE && !device_present(p))
        return fg_err_set(err, FG_ERR_PAGER_NO_TIER,
                          "pager: no DEVICE tier (no GPU, no device backend, or a 0 budget)");
    if ((unsigned)*t >= FG_TIER_COUNT)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "pager: tier %d invalid", (int)*t);
    return FG_OK;
}

static fg_pager_ticket ticket_of(const pchunk *c, uint32_t id)
{
    return ((uint64_t)c->gen << 32) | id;
}

static int prefetch_call(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_ticket *ticket,
                         fg_err *err)
{
    int rc;
    *ticket = 0;
    if ((rc = sticky_check(p, err)) || (rc = check_id(p, id, err)))
        return rc;
    pchunk *c = &p->chunks[id];
    if ((rc = resolve_tier(p, c, &tier, err)))
        return rc;
    p->st.prefetches++;
    progress(p);
    if (c->state == CS_LOADING || c->state == CS_UPLOADING) {
        p->st.dedup++;
        if (tier == FG_TIER_DEVICE)
            c->target = FG_TIER_DEVICE;
        *ticket = ticket_of(c, id);
        return FG_OK;
    }
    if (c->state == CS_DISK || c->state == CS_ERROR) {
        p->no_wait++;
        rc = t_load_begin(p, id, tier, err);
        p->no_wait--;
        if (rc == FG_OK)
            *ticket = ticket_of(c, id);
        return rc;
    }
    if (c->state == CS_HOST && tier == FG_TIER_DEVICE && !c->pins) {
        c->hold++;
        p->no_wait++;
        rc = t_to_device(p, id, 1, err);
        p->no_wait--;
        c->hold--;
        if (rc == FG_OK && c->state == CS_UPLOADING)
            *ticket = ticket_of(c, id);
    }
    return rc;
}

static int wait_call(fg_pager *p, fg_pager_ticket ticket, fg_err *err)
{
    uint32_t id = (uint32_t)ticket;
    int rc;
    if (ticket == 0)
        return FG_OK;
    if ((rc = check_id(p, id, err)))
        return rc;
    pchunk *c = &p->chunks[id];
    if (c->gen == (uint32_t)(ticket >> 32) && (rc = wait_chunk(p, id, err)))
        return rc;
    if (c->gen == (uint32_t)(ticket >> 32) && c->state == CS_ERROR && !p->sticky.code)
        return fg_err_set(err, c->err, "pager: chunk %u failed to load", id);
    return sticky_check(p, err);
}

/* Bring a held chunk to tier t, looping through whatever transitions that takes. */
static int bring(fg_pager *p, uint32_t id, fg_tier t, fg_err *err)
{
    pchunk *c = &p->chunks[id];
    uint8_t want = t == FG_TIER_HOST ? CS_HOST : CS_DEVICE;
    int rc = FG_OK;
    for (int guard = 0; rc == FG_OK && c->state != want && guard < 8; guard++) {
        switch (c->state) {
        case CS_LOADING:
        case CS_UPLOADING:
        case CS_WRITING_BACK: rc = wait_chunk(p, id, err); break;
        case CS_DISK: rc = t_load_begin(p, id, t, err); break;
        case CS_HOST: rc = t_to_device(p, id, 0, err); break;
        case CS_DEVICE: rc = t_to_host(p, id, err); break;
        default: /* CS_ERROR: every failure is sticky, so this repeats the first */
            rc = p->sticky.code ? sticky_check(p, err)
                                : fg_err_set(err, c->err, "pager: chunk %u failed to load", id);
        }
        if (rc == FG_OK && p->sticky.code)
            rc = sticky_check(p, err);
    }
    if (rc == FG_OK && c->state != want)
        rc = fg_err_set(err, FG_ERR_STATE, "pager: chunk %u did not reach %s", id,
                        fg_tier_name(t));
    return rc;
}

static int acquire_call(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_view *view, fg_err *err)
{
    int rc;
    if ((rc = sticky_check(p, err)) || (rc = check_id(p, id, err)))
        return rc;
    pchunk *c = &p->chunks[id];
    if ((rc = resolve_tier(p, c, &tier, err)))
        return rc;
    if (c->pins && c->pin_tier != tier)
        return fg_err_set(err, FG_ERR_PAGER_PINNED, "pager: chunk %u is pinned in %s, not %s",
                          id, fg_tier_name((fg_tier)c->pin_tier), fg_tier_name(tier));
    uint8_t want = tier == FG_TIER_HOST ? CS_HOST : CS_DEVICE;
    if (c->state == want)
        p->st.hits++;
    else
        p->st.misses++;
    c->hold++;
    rc = bring(p, id, tier, err);
    c->hold--;
    if (rc)
        return rc;
    c->pins++;
    c->used = 1;
    c->pin_tier = (uint8_t)tier;
    c->lru = ++p->tick;
    *view = (fg_pager_view){
        tier == FG_TIER_HOST ? (void *)(p->hp.base + c->host_off)
                             : (void *)((char *)p->dev_base + c->dev_off),
        c->d.length, c->d.padded, c->d.tag, c->d.codec, tier, id};
    return FG_OK;
}

static int release_call(fg_pager *p, const fg_pager_view *v, unsigned flags, fg_err *err)
{
    int rc = check_id(p, v->id, err);
    if (rc)
        return rc;
    pchunk *c = &p->chunks[v->id];
    if (!c->pins || c->pin_tier != v->tier)
        return fg_err_set(err, FG_ERR_STATE, "pager: release of chunk %u, which is not acquired "
                          "in %s", v->id, fg_tier_name(v->tier));
    if ((flags & FG_PAGER_DIRTY) && !p->files[c->d.file].writable)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: chunk %u released dirty, but the file "
                          "was registered read-only", p->files[c->d.file].path, v->id);
    c->pins--;
    if (flags & FG_PAGER_DIRTY)
        c->dirty = 1;
    c->lru = ++p->tick;
    if ((flags & FG_PAGER_WRITE_BEHIND) && c->dirty && !c->pins && c->state == CS_HOST &&
        p->files[c->d.file].io && !p->sticky.code)
        t_write_begin(p, v->id, p->hp.base + c->host_off); /* store it while others compute */
    progress(p);
    return FG_OK;
}

static int write_back_call(fg_pager *p, uint32_t id, fg_err *err)
{
    int rc;
    if ((rc = sticky_check(p, err)) || (rc = check_id(p, id, err)))
        return rc;
    pchunk *c = &p->chunks[id];
    if (!p->files[c->d.file].writable)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: chunk %u: file registered read-only",
                          p->files[c->d.file].path, id);
    if ((rc = wait_chunk(p, id, err)))
        return rc;
    if (c->state != CS_HOST && c->state != CS_DEVICE)
        return fg_err_set(err, FG_ERR_STATE, "pager: write_back of chunk %u, which is not "
                          "resident", id);
    return write_back(p, id, err);
}

static int evict_call(fg_pager *p, uint32_t id, fg_err *err)
{
    int rc;
    if ((rc = sticky_check(p, err)) || (rc = check_id(p, id, err)))
        return rc;
    pchunk *c = &p->chunks[id];
    if (c->pins)
        return fg_err_set(err, FG_ERR_PAGER_PINNED, "pager: chunk %u is pinned", id);
    if ((rc = wait_chunk(p, id, err)))
        return rc;
    if (c->state != CS_HOST && c->state != CS_DEVICE)
        return FG_OK;
    while (rc == FG_OK && c->state != CS_DISK)
        rc = evict_one(p, id, err);
    return rc;
}

void fg_pager_stats_get(const fg_pager *p, fg_pager_stats *out)
{
    *out = p->st;
    for (int t = FG_TIER_HOST; t < FG_TIER_COUNT; t++) {
        out->used[t] = p->arena[t].used;
        out->peak[t] = p->arena[t].peak;
        out->budget[t] = p->arena[t].size;
    }
    out->host_committed = p->hp.committed_bytes;
    out->host_pinned = p->hp.how == FG_POOL_PINNED ? p->hp.size : p->hp.pinned_bytes;
    out->host_locked = fg_hostpool_locked(&p->hp);
    out->device_present = device_present(p);
    const char *d = p->io->m->describe ? p->io->m->describe(p->io) : p->io->m->name;
    snprintf(out->engine, sizeof out->engine, "%s", d);
}

/* ---------------------------------------------------------------- entry points */

int fg_pager_prefetch(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_ticket *ticket,
                      fg_err *err)
{
    int rc = prefetch_call(p, id, tier, ticket, err);
    DEBUG_CHECK(p);
    return rc;
}

int fg_pager_wait(fg_pager *p, fg_pager_ticket ticket, fg_err *err)
{
    int rc = wait_call(p, ticket, err);
    DEBUG_CHECK(p);
    return rc;
}

int fg_pager_acquire(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_view *view, fg_err *err)
{
    int rc = acquire_call(p, id, tier, view, err);
    DEBUG_CHECK(p);
    return rc;
}

int fg_pager_release(fg_pager *p, const fg_pager_view *view, unsigned flags, fg_err *err)
{
    int rc = release_call(p, view, flags, err);
    DEBUG_CHECK(p);
    return rc;
}

int fg_pager_write_back(fg_pager *p, uint32_t id, fg_err *err)
{
    int rc = write_back_call(p, id, err);
    DEBUG_CHECK(p);
    return rc;
}

int fg_pager_evict(fg_pager *p, uint32_t id, fg_err *err)
{
    int rc = evict_call(p, id, err);
    DEBUG_CHECK(p);
    return rc;
}
