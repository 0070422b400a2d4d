/* device.c - device objects (core/fg_device.h) for the DEVICE tier of a pager used on its own:
 * a simulated device in host memory, and CUDA (when built with it).
 *
 * The simulated device keeps its DEVICE buffers in aligned host memory and copies with memcpy,
 * synchronously, so the test suite drives every DEVICE transition (HOST -> DEVICE, DEVICE ->
 * HOST, eviction, budgets) on a machine without a GPU; it has no PINNED memory (the pager then
 * maps its HOST pool itself). The CUDA device is core/fg_device_cuda.c's, the one the CUDA
 * backend uses (cudaMalloc, cudaHostAlloc for PINNED buffers, a copy stream and an event per
 * asynchronous copy, so uploads overlap the caller); it refuses with FG_ERR_UNSUPPORTED when no
 * GPU is visible, so callers need no #ifdef. The engine gives the pager its compute backend's
 * device instead (compute/: CUDA's, or the sim backend's copy engine), so both use one memory.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pager_int.h"

static int s_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    if (t == FG_BUFT_PINNED)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "simulated device: no pinned memory");
    *ptr = aligned_alloc(FG_PAGE, n ? (n + FG_PAGE - 1) / FG_PAGE * FG_PAGE : FG_PAGE);
    if (!*ptr)
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: cannot allocate %llu bytes",
                          (unsigned long long)n);
    return FG_OK;
}

static void s_free(fg_device *d, fg_buft t, void *ptr)
{
    (void)d, (void)t;
    free(ptr);
}

static int s_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    (void)d, (void)dt, (void)st, (void)err;
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

static void s_destroy(fg_device *d) { free(d); }

static const fg_device_iface sim_iface = {
    "simulated", s_alloc, s_free, s_copy, s_event_wait, s_sync, s_destroy,
};

int fg_pager_device_host_create(fg_device **out, fg_err *err)
{
    fg_device *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "simulated device: out of memory");
    d->iface = &sim_iface;
    *out = d;
    return FG_OK;
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
