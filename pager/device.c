/* device.c - device objects (core/fg_device.h) for the DEVICE tier of a pager used on its own:
 * a simulated device in host memory, and CUDA (when built with it).
 *
 * The simulated device keeps its DEVICE buffers in aligned host memory and copies with memcpy,
 * synchronously, so the test suite drives every DEVICE transition (HOST -> DEVICE, DEVICE ->
 * HOST, eviction, budgets) on a machine without a GPU. It has pinned memory as a GPU does, with
 * a GPU's rules checked instead of a GPU's effects: PINNED allocations and pin/unpin ranges
 * (cudaHostAlloc, cudaHostRegister) are recorded and counted (fg_pager_device_host_stats); a pin
 * overlapping a pinned range is refused, an unpin of no pinned range and a copy naming as
 * PINNED host memory that is not all pinned count as misuse (the copy is refused, as a GPU's
 * driver would stage it through pageable memory, synchronously); pins past a limit
 * (fg_pager_device_host_pin_limit) are refused, as an OS out of lockable memory refuses them.
 * The CUDA device is core/fg_device_cuda.c's, the one the CUDA backend uses (cudaMalloc,
 * cudaHostRegister for the pool's granules, a copy stream and an event per asynchronous copy, so
 * uploads overlap the caller); it refuses with FG_ERR_UNSUPPORTED when no GPU is visible, so
 * callers need no #ifdef. The engine gives the pager its compute backend's device instead
 * (compute/: CUDA's, or the sim backend's copy engine), so both use one memory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fg_ranges.h"
#include "pager_int.h"

typedef struct sim_host {
    pthread_mutex_t mu;
    fg_ranges r;    /* PINNED allocations (tag 1) and pins (tag 0) */
    uint64_t limit; /* pin() refuses past this many pinned bytes (0: no limit) */
    int refs;       /* handles (retain) */
    fg_pager_device_stats st;
} sim_host;

/* Record [p, p + n) pinned; FG_ERR_INVALID_ARG when it overlaps a pinned range (mu held). */
static int range_add(sim_host *h, void *p, uint64_t n, int alloc, fg_err *err)
{
    int rc = fg_ranges_add(&h->r, (uintptr_t)p, n, alloc);
    if (rc == FG_ERR_INVALID_ARG) {
        h->st.misuse++;
        return fg_err_set(err, rc, "simulated device: pinning %llu bytes at %p: overlaps a "
                          "pinned range (cudaErrorHostMemoryAlreadyRegistered)",
                          (unsigned long long)n, p);
    }
    if (rc)
        return fg_err_set(err, rc, "simulated device: out of memory");
    h->st.pinned += n;
    h->st.pinned_peak = h->st.pinned > h->st.pinned_peak ? h->st.pinned : h->st.pinned_peak;
    return FG_OK;
}

/* Forget the range starting at p; 0 when there is none of that kind (misuse; mu held). */
static int range_del(sim_host *h, const void *p, int alloc)
{
    uint64_t len;
    if (!fg_ranges_del(&h->r, (uintptr_t)p, alloc, &len)) {
        h->st.misuse++;
        return 0;
    }
    h->st.pinned -= len;
    return 1;
}

static int s_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    sim_host *h = d->ctx;
    uint64_t len = n ? (n + FG_PAGE - 1) / FG_PAGE * FG_PAGE : FG_PAGE;
    *ptr = aligned_alloc(FG_PAGE, len);
    if (!*ptr)
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: cannot allocate %llu bytes",
                          (unsigned long long)n);
    if (t != FG_BUFT_PINNED)
        return FG_OK;
    pthread_mutex_lock(&h->mu);
    int rc = range_add(h, *ptr, len, 1, err);
    pthread_mutex_unlock(&h->mu);
    if (rc) {
        free(*ptr);
        *ptr = NULL;
    }
    return rc;
}

static void s_free(fg_device *d, fg_buft t, void *ptr)
{
    sim_host *h = d->ctx;
    if (ptr && t == FG_BUFT_PINNED) {
        pthread_mutex_lock(&h->mu);
        range_del(h, ptr, 1);
        pthread_mutex_unlock(&h->mu);
    }
    free(ptr);
}

static int s_pin(fg_device *d, void *p, uint64_t len, fg_err *err)
{
    sim_host *h = d->ctx;
    pthread_mutex_lock(&h->mu);
    int rc = h->limit && h->st.pinned + len > h->limit
                 ? fg_err_set(err, FG_ERR_NOMEM, "simulated device: pinning %llu bytes: over "
                              "the limit of %llu", (unsigned long long)len,
                              (unsigned long long)h->limit)
                 : range_add(h, p, len, 0, err);
    h->st.pins += rc == FG_OK;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static void s_unpin(fg_device *d, void *p)
{
    sim_host *h = d->ctx;
    pthread_mutex_lock(&h->mu);
    range_del(h, p, 0);
    pthread_mutex_unlock(&h->mu);
}

static int s_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    sim_host *h = d->ctx;
    const void *host = st == FG_BUFT_PINNED ? src : dt == FG_BUFT_PINNED ? dst : NULL;
    pthread_mutex_lock(&h->mu);
    int ok = !host || fg_ranges_cover(&h->r, (uintptr_t)host, n);
    h->st.misuse += !ok;
    h->st.pinned_copies += host && ok;
    pthread_mutex_unlock(&h->mu);
    if (!ok)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "simulated device: a copy names %llu bytes "
                          "at %p as pinned host memory, and they are not all pinned",
                          (unsigned long long)n, host);
    memcpy(dst, src, n);
    if (ev)
        *ev = NULL; /* complete */
    return FG_OK;
}

static int s_event_wait(fg_device *d, fg_event *ev, fg_err *err)
{
    (void)d, (void)ev, (void)err;
    return FG_OK;
}

static int s_sync(fg_device *d, fg_err *err)
{
    (void)d, (void)err;
    return FG_OK;
}

static void s_destroy(fg_device *d)
{
    sim_host *h = d->ctx;
    pthread_mutex_lock(&h->mu);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    free(d);
    if (!last)
        return;
    pthread_mutex_destroy(&h->mu);
    fg_ranges_free(&h->r);
    free(h);
}

/* Another handle on the same memory and counters (a test reads them after the pager closes). */
static fg_device *s_retain(fg_device *d)
{
    sim_host *h = d->ctx;
    fg_device *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
    *r = *d;
    return r;
}

static const fg_device_iface sim_iface = {
    "simulated", s_alloc, s_free, s_copy, s_event_wait, s_sync, s_destroy, s_retain, s_pin,
    s_unpin,
};

int fg_pager_device_host_create(fg_device **out, fg_err *err)
{
    fg_device *d = calloc(1, sizeof *d);
    sim_host *h = calloc(1, sizeof *h);
    if (!d || !h) {
        free(d);
        free(h);
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: out of memory");
    }
    pthread_mutex_init(&h->mu, NULL);
    h->refs = 1;
    d->iface = &sim_iface;
    d->ctx = h;
    *out = d;
    return FG_OK;
}

static sim_host *sim_of(const fg_device *d)
{
    return d && d->iface->copy == s_copy ? d->ctx : NULL;
}

void fg_pager_device_host_stats(const fg_device *d, fg_pager_device_stats *out)
{
    sim_host *h = sim_of(d);
    memset(out, 0, sizeof *out);
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    *out = h->st;
    pthread_mutex_unlock(&h->mu);
}

void fg_pager_device_host_pin_limit(fg_device *d, uint64_t bytes)
{
    sim_host *h = sim_of(d);
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->limit = bytes;
    pthread_mutex_unlock(&h->mu);
}

#ifdef FG_PAGER_CUDA
#include "fg_device_cuda.h"

int fg_pager_device_cuda_create(fg_device **out, fg_err *err)
{
    *out = NULL;
    return fg_device_cuda_create(0, out, err);
}
#else
int fg_pager_device_cuda_create(fg_device **out, fg_err *err)
{
    *out = NULL;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: this build has no CUDA support");
}
#endif
