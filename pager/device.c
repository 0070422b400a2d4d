/* device.c - device objects (core/fg_device.h) for the DEVICE tier: a simulated device in host
 * memory, and CUDA (when built with it).
 *
 * The simulated device keeps its DEVICE buffers in aligned host memory and copies with memcpy,
 * so the test suite drives every DEVICE transition (HOST -> DEVICE, DEVICE -> HOST, eviction,
 * budgets) on a machine without a GPU; it has no PINNED memory (the pager then maps its HOST
 * pool itself). The CUDA device uses the runtime API only (cudaMalloc, cudaHostAlloc for PINNED
 * buffers, cudaMemcpy); it refuses with FG_ERR_UNSUPPORTED when no GPU is visible, so callers
 * need no #ifdef. The engine gives the pager its compute backend's device instead (the CUDA
 * backend's, with a copy stream and events, or the sim backend's: compute/), so both use one
 * memory; these two serve a pager used on its own.
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
#include <cuda_runtime_api.h>

static int cuda_fail(fg_err *err, cudaError_t e, const char *what, uint64_t n)
{
    return fg_err_set(err, FG_ERR_PAGER_DEVICE, "cuda: %s (%llu bytes): %s", what,
                      (unsigned long long)n, cudaGetErrorString(e));
}

static int c_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    cudaError_t e = t == FG_BUFT_DEVICE ? cudaMalloc(ptr, n)
                  : t == FG_BUFT_PINNED ? cudaHostAlloc(ptr, n, cudaHostAllocDefault)
                  : (*ptr = aligned_alloc(FG_PAGE, (n + FG_PAGE - 1) / FG_PAGE * FG_PAGE))
                      ? cudaSuccess : cudaErrorMemoryAllocation;
    return e == cudaSuccess ? FG_OK
                            : cuda_fail(err, e, t == FG_BUFT_DEVICE ? "cudaMalloc"
                                              : t == FG_BUFT_PINNED ? "cudaHostAlloc"
                                                                    : "host allocation", n);
}

static void c_free(fg_device *d, fg_buft t, void *ptr)
{
    (void)d;
    if (t == FG_BUFT_DEVICE)
        cudaFree(ptr);
    else if (t == FG_BUFT_PINNED)
        cudaFreeHost(ptr);
    else
        free(ptr);
}

static int c_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    (void)d;
    enum cudaMemcpyKind k = dt == FG_BUFT_DEVICE
                                ? (st == FG_BUFT_DEVICE ? cudaMemcpyDeviceToDevice
                                                        : cudaMemcpyHostToDevice)
                                : (st == FG_BUFT_DEVICE ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyHostToHost);
    cudaError_t e = cudaMemcpy(dst, src, n, k);
    if (ev)
        *ev = NULL; /* synchronous: streams and events come with the CUDA backend */
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaMemcpy", n);
}

static int c_sync(fg_device *d, fg_err *err)
{
    (void)d;
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaDeviceSynchronize", 0);
}

static const fg_device_iface cuda_iface = {
    "cuda", c_alloc, c_free, c_copy, s_event_wait, c_sync, s_destroy,
};

int fg_pager_device_cuda_create(fg_device **out, fg_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: no GPU visible (%s)",
                          e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    fg_device *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "cuda device: out of memory");
    d->iface = &cuda_iface;
    *out = d;
    return FG_OK;
}
#else
int fg_pager_device_cuda_create(fg_device **out, fg_err *err)
{
    *out = NULL;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: this build has no CUDA support");
}
#endif
