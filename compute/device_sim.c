/* device_sim.c - a simulated accelerator's memory and copy engine (core/fg_device.h), so the
 * device data path (the pager's DEVICE tier, a device backend's staging, overlapped copies) runs
 * and is tested on a machine without a GPU.
 *
 * Memory host code may not touch: DEVICE buffers are handed out as addresses in a PROT_NONE
 * reservation (`base`, `cap` bytes), so any host load or store through a device pointer faults
 * at once, as it would on a GPU. The bytes live in a second, private mapping (`alias`) at the
 * same offsets, which only the copy engine and the simulated backend's ops (backend_sim.c,
 * through fg_device_sim_alias) use. Allocation is first-fit over [0, cap) in 256-byte units;
 * freed ranges of 64 MiB or more are given back to the OS (MADV_DONTNEED; smaller ones stay
 * mapped, so the per-op staging buffers that come and go do not fault their pages in again).
 *
 * Copies: asynchronous ones run on streams, a worker thread each, in the order they were issued:
 * the copy engine (a copy with an event pointer: the pager's prefetches, a GPU's copy stream) and
 * the upload stream (fg_device_sim_upload: the sim backend's weight pieces, as the CUDA backend
 * uploads them on a stream of its own). A host <-> device copy takes at least bytes / link_bps
 * seconds (the worker sleeps the rest, so a slow link costs no CPU and overlap with compute is
 * visible in wall time); device -> device and host -> host run at memcpy speed. A copy with an
 * event pointer returns at once and event_wait completes it. A copy without one, and
 * fg_device_sim_copy_inline (the compute stream, where the CUDA backend stages an op's
 * operands), is done by the calling thread, not behind the streams' queues (fg_device.h: it may
 * pass the copies in flight, as the CUDA device's synchronous copies do on a stream of their
 * own). While several transfers cross the link each gets its share of the bandwidth (1/k of it
 * for k transfers on the link when it starts: an approximation of the two DMA engines of a GPU
 * sharing PCIe). PINNED buffers are ordinary host memory (a simulated link needs no page
 * locking), but the rules of pinned memory are kept as a GPU's driver keeps them: PINNED
 * allocations and the ranges pin() registers in place (cudaHostRegister's part) are recorded,
 * a pin overlapping a pinned range is refused, and a copy that names as PINNED host memory not
 * all pinned (adjacent ranges allowed) is refused (a GPU would stage it, synchronously: a
 * silent loss of overlap).
 *
 * The device is reference-counted (retain/destroy) so a backend and the pager share one arena:
 * the backend tells device pointers from host ones by the address range.
 * Thread-safety: alloc/free/copy/event_wait/sync may be called from any thread (one mutex).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend_int.h"
#include "fg_progress.h"
#include "fg_ranges.h"

#define UNIT 256u
#define GIVE_BACK (64u << 20)

struct fg_event {
    int done;
};

typedef struct job {
    void *dst;
    const void *src;
    uint64_t n;
    int link;            /* crosses the host <-> device link */
    fg_event *ev;        /* NULL: the issuer waits on `seq` */
    uint64_t seq;
    struct job *next;
} job;

typedef struct ext { uint64_t off, len; } ext;


enum { LANE_COPY, LANE_UPLOAD, N_LANES };

/* A stream: its queue, worker thread and sequence numbers. */
typedef struct lane {
    struct sim_dev *s;
    job *head, *tail;
    uint64_t issued, completed;
    pthread_t worker;
    pthread_cond_t work;     /* signalled when a job arrives on this stream (or stop) */
    int started;
} lane;

typedef struct sim_dev {
    uint8_t *base, *alias;   /* [cap]: the untouchable addresses, the bytes */
    uint64_t cap;
    double link_bps;         /* 0: unlimited */
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* broadcast when a job completes */
    pthread_t worker;
    int stop, refs;
    lane lanes[N_LANES];
    int on_link;             /* transfers crossing the link now (the engine's, inline ones) */
    ext *used;               /* allocated extents, sorted by offset */
    uint32_t n_used, cap_used;
    fg_ranges pin;           /* PINNED allocations (tag 1) and pin() ranges (tag 0) */
    fg_device_sim_stats st;
} sim_dev;

/* Sleep out the rest of n bytes' link time from t0, at the link's bandwidth shared by `share`
 * transfers (the copy engine's and a compute-stream copy's overlap). */
static void link_wait(const sim_dev *s, uint64_t n, double t0, int share)
{
    if (s->link_bps <= 0)
        return;
    double left = (double)n * share / s->link_bps - (fg_now() - t0);
    if (left <= 0)
        return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* Copy n bytes (at their host addresses: device ones through the alias), a link transfer
 * sharing the link with the others on it; called and returning with s->mu held, released
 * meanwhile. Seconds it took. */
static double move_bytes(sim_dev *s, void *dst, const void *src, uint64_t n, int link)
{
    int share = link ? ++s->on_link : 0;
    pthread_mutex_unlock(&s->mu);
    double t0 = fg_now();
    memcpy(dst, src, n);
    if (link)
        link_wait(s, n, t0, share);
    double dt = fg_now() - t0;
    pthread_mutex_lock(&s->mu);
    s->on_link -= link;
    return dt;
}

static void *worker_main(void *arg)
{
    lane *l = arg;
    sim_dev *s = l->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!l->head && !s->stop)
            pthread_cond_wait(&l->work, &s->mu);
        if (!l->head)
            break;
        job *j = l->head;
        double dt = move_bytes(s, j->dst, j->src, j->n, j->link);
        l->head = j->next;
        if (!l->head)
            l->tail = NULL;
        s->st.busy_s += dt;
        l->completed = j->seq;
        if (j->ev)
            j->ev->done = 1;
        free(j);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int is_dev(const sim_dev *s, const void *p)
{
    return (const uint8_t *)p >= s->base && (const uint8_t *)p < s->base + s->cap;
}

/* ---- allocation: first fit over sorted extents ---- */

static int ext_insert(sim_dev *s, uint32_t at, ext e)
{
    if (s->n_used == s->cap_used) {
        uint32_t cap = s->cap_used ? 2 * s->cap_used : 64;
        ext *p = realloc(s->used, cap * sizeof *p);
        if (!p)
            return -1;
        s->used = p;
        s->cap_used = cap;
    }
    memmove(&s->used[at + 1], &s->used[at], (s->n_used - at) * sizeof *s->used);
    s->used[at] = e;
    s->n_used++;
    return 0;
}

/* ---- pinned host memory: sorted, disjoint ranges (s->mu held) ---- */

static int pin_add(sim_dev *s, void *p, uint64_t n, int alloc, fg_err *err)
{
    int rc = fg_ranges_add(&s->pin, (uintptr_t)p, n, alloc);
    if (rc == FG_ERR_INVALID_ARG)
        return fg_err_set(err, rc, "simulated device: pinning %llu bytes at %p: overlaps a "
                          "pinned range", (unsigned long long)n, p);
    return rc ? fg_err_set(err, rc, "simulated device: out of memory") : FG_OK;
}

static int d_pin(fg_device *d, void *p, uint64_t len, fg_err *err)
{
    sim_dev *s = d->ctx;
    pthread_mutex_lock(&s->mu);
    int rc = pin_add(s, p, len, 0, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void d_unpin(fg_device *d, void *p)
{
    sim_dev *s = d->ctx;
    pthread_mutex_lock(&s->mu);
    fg_ranges_del(&s->pin, (uintptr_t)p, 0, NULL);
    pthread_mutex_unlock(&s->mu);
}

/* ---- allocation ---- */

static int host_alloc(sim_dev *s, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    uint64_t len = n ? (n + 4095) & ~(uint64_t)4095 : 4096;
    *ptr = aligned_alloc(4096, len);
    if (!*ptr)
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: cannot allocate %llu bytes of "
                          "host memory", (unsigned long long)n);
    if (t != FG_BUFT_PINNED)
        return FG_OK;
    pthread_mutex_lock(&s->mu);
    int rc = pin_add(s, *ptr, len, 1, err);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        free(*ptr);
        *ptr = NULL;
    }
    return rc;
}

static int d_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    sim_dev *s = d->ctx;
    if (t != FG_BUFT_DEVICE)
        return host_alloc(s, t, n, ptr, err);
    uint64_t len = n ? (n + UNIT - 1) / UNIT * UNIT : UNIT, at = 0;
    pthread_mutex_lock(&s->mu);
    uint32_t i = 0;
    for (; i < s->n_used && s->used[i].off - at < len; i++)
        at = s->used[i].off + s->used[i].len;
    int ok = at + len <= s->cap && ext_insert(s, i, (ext){at, len}) == 0;
    if (ok) {
        s->st.used += len;
        s->st.peak = s->st.used > s->st.peak ? s->st.used : s->st.peak;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ok)
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: no room for %llu bytes (%llu of "
                          "%llu in use)", (unsigned long long)n, (unsigned long long)s->st.used,
                          (unsigned long long)s->cap);
    *ptr = s->base + at;
    return FG_OK;
}

static void d_free(fg_device *d, fg_buft t, void *ptr)
{
    sim_dev *s = d->ctx;
    if (!ptr)
        return;
    if (t != FG_BUFT_DEVICE) {
        if (t == FG_BUFT_PINNED) {
            pthread_mutex_lock(&s->mu);
            fg_ranges_del(&s->pin, (uintptr_t)ptr, 1, NULL);
            pthread_mutex_unlock(&s->mu);
        }
        free(ptr);
        return;
    }
    uint64_t off = (uint64_t)((uint8_t *)ptr - s->base);
    pthread_mutex_lock(&s->mu);
    uint32_t lo = 0, hi = s->n_used;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (s->used[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t len = 0;
    if (lo < s->n_used && s->used[lo].off == off) {
        len = s->used[lo].len;
        memmove(&s->used[lo], &s->used[lo + 1], (s->n_used - lo - 1) * sizeof *s->used);
        s->n_used--;
        s->st.used -= len;
    }
    pthread_mutex_unlock(&s->mu);
    if (len >= GIVE_BACK)
        madvise(s->alias + off, len, MADV_DONTNEED);
}

/* ---- copies ---- */

static int check_copy(const sim_dev *s, void *dst, int dd, const void *src, int sd, uint64_t n,
                      fg_err *err)
{
    if ((dd && (!is_dev(s, dst) || (uint8_t *)dst + n > s->base + s->cap)) ||
        (sd && (!is_dev(s, src) || (const uint8_t *)src + n > s->base + s->cap)) ||
        (!dd && is_dev(s, dst)) || (!sd && is_dev(s, src)))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "simulated device: a copy of %llu bytes "
                          "names memory outside the device as device memory, or the reverse",
                          (unsigned long long)n);
    return FG_OK;
}

/* Where the bytes at p live: the alias of a device address, else p. */
static uint8_t *bytes_at(const sim_dev *s, const void *p, int dev)
{
    return dev ? s->alias + ((const uint8_t *)p - s->base) : (uint8_t *)p;
}

/* A copy by the calling thread (not queued on a stream). */
static int copy_now(sim_dev *s, void *dst, int dd, const void *src, int sd, uint64_t n,
                    fg_err *err)
{
    if (check_copy(s, dst, dd, src, sd, n, err))
        return FG_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->mu);
    s->st.bytes[sd][dd] += n;
    s->st.busy_s += move_bytes(s, bytes_at(s, dst, dd), bytes_at(s, src, sd), n, dd != sd);
    pthread_mutex_unlock(&s->mu);
    return FG_OK;
}

/* A copy queued on stream l; *ev completes it. */
static int copy_async(sim_dev *s, lane *l, void *dst, int dd, const void *src, int sd,
                      uint64_t n, fg_event **ev, fg_err *err)
{
    if (check_copy(s, dst, dd, src, sd, n, err))
        return FG_ERR_INVALID_ARG;
    job *j = calloc(1, sizeof *j);
    fg_event *e = calloc(1, sizeof *e);
    if (!j || !e) {
        free(j);
        free(e);
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: out of memory");
    }
    j->dst = bytes_at(s, dst, dd);
    j->src = bytes_at(s, src, sd);
    j->n = n;
    j->link = dd != sd;
    j->ev = e;
    pthread_mutex_lock(&s->mu);
    j->seq = ++l->issued;
    s->st.bytes[sd][dd] += n;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    pthread_cond_signal(&l->work);
    pthread_mutex_unlock(&s->mu);
    *ev = e;
    return FG_OK;
}

static int d_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    sim_dev *s = d->ctx;
    int dd = dt == FG_BUFT_DEVICE, sd = st == FG_BUFT_DEVICE;
    const void *host = st == FG_BUFT_PINNED ? src : dt == FG_BUFT_PINNED ? dst : NULL;
    if (host) {
        pthread_mutex_lock(&s->mu);
        int ok = fg_ranges_cover(&s->pin, (uintptr_t)host, n);
        pthread_mutex_unlock(&s->mu);
        if (!ok)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "simulated device: a copy names %llu "
                              "bytes at %p as pinned host memory, and they are not all pinned",
                              (unsigned long long)n, host);
    }
    return ev ? copy_async(s, &s->lanes[LANE_COPY], dst, dd, src, sd, n, ev, err)
              : copy_now(s, dst, dd, src, sd, n, err);
}

int fg_device_sim_upload(fg_device *d, void *dst, const void *src, uint64_t n, fg_event **ev,
                         fg_err *err)
{
    sim_dev *s = d->ctx;
    return copy_async(s, &s->lanes[LANE_UPLOAD], dst, 1, src, 0, n, ev, err);
}

int fg_device_sim_copy_inline(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st,
                              uint64_t n, fg_err *err)
{
    return copy_now(d->ctx, dst, dt == FG_BUFT_DEVICE, src, st == FG_BUFT_DEVICE, n, err);
}

static int d_event_wait(fg_device *d, fg_event *ev, fg_err *err)
{
    (void)err;
    sim_dev *s = d->ctx;
    if (!ev)
        return FG_OK;
    pthread_mutex_lock(&s->mu);
    while (!ev->done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    free(ev);
    return FG_OK;
}

static int d_sync(fg_device *d, fg_err *err)
{
    (void)err;
    sim_dev *s = d->ctx;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < N_LANES; i++)
        while (s->lanes[i].completed < s->lanes[i].issued)
            pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return FG_OK;
}

/* Stop the streams (after their queues drain) and free everything. */
static void sim_free(sim_dev *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    for (int i = 0; i < N_LANES; i++)
        pthread_cond_signal(&s->lanes[i].work);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < N_LANES; i++)
        if (s->lanes[i].started)
            pthread_join(s->lanes[i].worker, NULL);
    for (int i = 0; i < N_LANES; i++)
        pthread_cond_destroy(&s->lanes[i].work);
    if (s->base)
        munmap(s->base, s->cap);
    if (s->alias)
        munmap(s->alias, s->cap);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->used);
    fg_ranges_free(&s->pin);
    free(s);
}

static void d_destroy(fg_device *d)
{
    sim_dev *s = d->ctx;
    pthread_mutex_lock(&s->mu);
    int last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) {
        free(d);
        return;
    }
    sim_free(s);
    free(d);
}

static const fg_device_iface k_sim;

static fg_device *d_retain(fg_device *d)
{
    sim_dev *s = d->ctx;
    fg_device *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_lock(&s->mu);
    s->refs++;
    pthread_mutex_unlock(&s->mu);
    *r = *d;
    return r;
}

static const fg_device_iface k_sim = {
    "sim", d_alloc, d_free, d_copy, d_event_wait, d_sync, d_destroy, d_retain, d_pin, d_unpin,
};

int fg_device_sim_create(uint64_t capacity, double link_gbps, fg_device **out, fg_err *err)
{
    if (!(link_gbps >= 0) || capacity == 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "simulated device: %llu bytes, link %g GB/s",
                          (unsigned long long)capacity, link_gbps);
    sim_dev *s = calloc(1, sizeof *s);
    fg_device *d = calloc(1, sizeof *d);
    if (!s || !d) {
        free(s);
        free(d);
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < N_LANES; i++)
        pthread_cond_init(&s->lanes[i].work, NULL);
    s->cap = (capacity + 4095) & ~(uint64_t)4095;
    s->link_bps = link_gbps * 1e9;
    s->refs = 1;
    s->base = mmap(NULL, s->cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    s->alias = mmap(NULL, s->cap, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    int rc = s->base == MAP_FAILED || s->alias == MAP_FAILED
                 ? fg_err_sys(err, FG_ERR_NOMEM, errno, "simulated device: cannot map %llu bytes",
                              (unsigned long long)s->cap)
                 : FG_OK;
    if (s->base == MAP_FAILED)
        s->base = NULL;
    if (s->alias == MAP_FAILED)
        s->alias = NULL;
    for (int i = 0; i < N_LANES && rc == FG_OK; i++) {
        s->lanes[i].s = s;
        if (pthread_create(&s->lanes[i].worker, NULL, worker_main, &s->lanes[i]))
            rc = fg_err_set(err, FG_ERR_NOMEM, "simulated device: cannot start its streams");
        else
            s->lanes[i].started = 1;
    }
    if (rc) {
        sim_free(s);
        free(d);
        return rc;
    }
    d->iface = &k_sim;
    d->ctx = s;
    *out = d;
    return FG_OK;
}

int fg_device_is_sim(const fg_device *d) { return d && d->iface == &k_sim; }

void *fg_device_sim_alias(const fg_device *d, const void *p)
{
    const sim_dev *s = d->ctx;
    return is_dev(s, p) ? bytes_at(s, p, 1) : NULL;
}

int fg_device_sim_owns(const fg_device *d, const void *p, uint64_t n)
{
    const sim_dev *s = d->ctx;
    return is_dev(s, p) && (uint64_t)((const uint8_t *)p - s->base) + n <= s->cap;
}

void fg_device_sim_stats_get(const fg_device *d, fg_device_sim_stats *out)
{
    sim_dev *s = d->ctx;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}
