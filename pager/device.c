/* device.c - DEVICE backends: a host-memory test backend, and CUDA (when built with it).
 *
 * The test backend implements the interface with aligned host memory and memcpy, so the test
 * suite drives every DEVICE transition (HOST -> DEVICE, DEVICE -> HOST, eviction, budgets) on
 * a machine without a GPU. The CUDA backend uses the runtime API only (cudaMalloc, cudaMemcpy,
 * cudaHostAlloc for the pinned HOST pool); it refuses with FG_ERR_UNSUPPORTED when no GPU is
 * visible, so callers need no #ifdef.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "pager_int.h"

static int h_alloc(fg_pager_device *d, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    *ptr = aligned_alloc(FG_PAGE, n ? n : FG_PAGE);
    if (!*ptr)
        return fg_err_set(err, FG_ERR_NOMEM, "test device: cannot allocate %llu bytes",
                          (unsigned long long)n);
    return FG_OK;
}

static void h_free(fg_pager_device *d, void *ptr)
{
    (void)d;
    free(ptr);
}

static int h_copy(fg_pager_device *d, void *dst, const void *src, uint64_t n, fg_err *err)
{
    (void)d;
    (void)err;
    memcpy(dst, src, n);
    return FG_OK;
}

static void h_destroy(fg_pager_device *d) { free(d); }

static const fg_pager_device_iface host_iface = {
    "host-test", h_alloc, h_free, h_copy, h_copy, NULL, NULL, h_destroy,
};

int fg_pager_device_host_create(fg_pager_device **out, fg_err *err)
{
    fg_pager_device *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "test device: out of memory");
    d->iface = &host_iface;
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

static int c_alloc(fg_pager_device *d, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    cudaError_t e = cudaMalloc(ptr, n);
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaMalloc", n);
}

static void c_free(fg_pager_device *d, void *ptr)
{
    (void)d;
    cudaFree(ptr);
}

static int c_h2d(fg_pager_device *d, void *dst, const void *src, uint64_t n, fg_err *err)
{
    (void)d;
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaMemcpy host->device", n);
}

static int c_d2h(fg_pager_device *d, void *dst, const void *src, uint64_t n, fg_err *err)
{
    (void)d;
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaMemcpy device->host", n);
}

static int c_host_alloc(fg_pager_device *d, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    cudaError_t e = cudaHostAlloc(ptr, n, cudaHostAllocDefault);
    return e == cudaSuccess ? FG_OK : cuda_fail(err, e, "cudaHostAlloc", n);
}

static void c_host_free(fg_pager_device *d, void *ptr)
{
    (void)d;
    cudaFreeHost(ptr);
}

static const fg_pager_device_iface cuda_iface = {
    "cuda", c_alloc, c_free, c_h2d, c_d2h, c_host_alloc, c_host_free, h_destroy,
};

int fg_pager_device_cuda_create(fg_pager_device **out, fg_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: no GPU visible (%s)",
                          e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    fg_pager_device *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "cuda device: out of memory");
    d->iface = &cuda_iface;
    *out = d;
    return FG_OK;
}
#else
int fg_pager_device_cuda_create(fg_pager_device **out, fg_err *err)
{
    *out = NULL;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: this build has no CUDA support");
}
#endif
