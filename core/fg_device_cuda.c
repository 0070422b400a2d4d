/* fg_device_cuda.c - the CUDA device object (see fg_device_cuda.h). Runtime API only; compiled
 * when the build has CUDA. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fg_device_cuda.h"
#include "fg_ranges.h"

struct fg_event {
    cudaEvent_t e;
};


typedef struct cuda_dev {
    int ordinal, refs;
    cudaStream_t copy;       /* the asynchronous copies' stream (the pager's prefetches) */
    cudaStream_t now;        /* the synchronous copies' stream: not queued behind `copy` */
    uint64_t link[2];        /* bytes copied host -> device, device -> host (atomics) */
    pthread_mutex_t mu;      /* guards after and fence (copies come from several threads) */
    cudaStream_t after;      /* every copy waits for the work queued here so far (NULL: none) */
    cudaEvent_t fence;       /* recorded on `after`, waited on by the copy's stream */
    fg_ranges pins;          /* pin()'s ranges (cudaHostRegister); guarded by mu */
} cuda_dev;

static const fg_device_iface k_cuda;

static int cu_fail(fg_err *err, cudaError_t e, const char *what, uint64_t n)
{
    return fg_err_set(err, FG_ERR_IO, "cuda: %s (%llu bytes): %s", what, (unsigned long long)n,
                      cudaGetErrorString(e));
}

static int d_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    cuda_dev *c = d->ctx;
    cudaSetDevice(c->ordinal);
    cudaError_t e = cudaSuccess;
    if (t == FG_BUFT_DEVICE)
        e = cudaMalloc(ptr, n ? n : 1);
    else if (t == FG_BUFT_PINNED)
        e = cudaHostAlloc(ptr, n ? n : 1, cudaHostAllocDefault);
    else if (!(*ptr = aligned_alloc(4096, n ? (n + 4095) & ~(uint64_t)4095 : 4096)))
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        return FG_OK;
    *ptr = NULL;
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    return fg_err_set(err, FG_ERR_NOMEM, "cuda: cannot allocate %llu bytes of %s memory: %s",
                      (unsigned long long)n, t == FG_BUFT_DEVICE ? "device"
                      : t == FG_BUFT_PINNED ? "pinned" : "host", cudaGetErrorString(e));
}

static void d_free(fg_device *d, fg_buft t, void *ptr)
{
    if (!ptr)
        return;
    cudaSetDevice(((cuda_dev *)d->ctx)->ordinal);
    if (t == FG_BUFT_DEVICE)
        cudaFree(ptr);
    else if (t == FG_BUFT_PINNED)
        cudaFreeHost(ptr);
    else
        free(ptr);
}

/* Bytes of [p, p + n) a single copy may take: up to the end of the pinned range p lies in (a
 * copy spanning two registrations would be staged through pageable memory, synchronously);
 * all n when p lies in none (cudaHostAlloc memory). */
static uint64_t pinned_run(cuda_dev *c, const char *p, uint64_t n)
{
    pthread_mutex_lock(&c->mu);
    n = fg_ranges_run(&c->pins, (uintptr_t)p, n);
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* cudaHostRegister outside the lock (it pins pages: not quick), then the range is recorded. */
static int d_pin(fg_device *d, void *p, uint64_t len, fg_err *err)
{
    cuda_dev *c = d->ctx;
    cudaSetDevice(c->ordinal);
    cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* a refusal is not sticky */
        return fg_err_set(err, FG_ERR_NOMEM, "cuda: cudaHostRegister of %llu bytes at %p: %s",
                          (unsigned long long)len, p, cudaGetErrorString(e));
    }
    pthread_mutex_lock(&c->mu);
    int rc = fg_ranges_add(&c->pins, (uintptr_t)p, len, 0);
    pthread_mutex_unlock(&c->mu);
    if (rc) { /* no memory to record it (cudaHostRegister already refused an overlap) */
        cudaHostUnregister(p);
        return fg_err_set(err, rc, "cuda: recording a pinned range: %s", fg_strerror(rc));
    }
    return FG_OK;
}

static void d_unpin(fg_device *d, void *p)
{
    cuda_dev *c = d->ctx;
    cudaSetDevice(c->ordinal);
    pthread_mutex_lock(&c->mu);
    fg_ranges_del(&c->pins, (uintptr_t)p, -1, NULL);
    pthread_mutex_unlock(&c->mu);
    if (cudaHostUnregister(p) != cudaSuccess)
        cudaGetLastError();
}

static int d_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    cuda_dev *c = d->ctx;
    cudaSetDevice(c->ordinal);
    cudaStream_t s = ev ? c->copy : c->now;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&c->mu);
    if (c->after) { /* after what the compute stream has queued: it may read or write these */
        e = cudaEventRecord(c->fence, c->after);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(s, c->fence, 0);
    }
    pthread_mutex_unlock(&c->mu);
    if (e != cudaSuccess)
        return cu_fail(err, e, "ordering a copy after the compute stream", n);
    /* the host side (named PINNED or not: the engine copies pager views as HOST) */
    const char *host = (dt == FG_BUFT_DEVICE) == (st == FG_BUFT_DEVICE) ? NULL
                       : dt == FG_BUFT_DEVICE ? src : dst;
    for (uint64_t done = 0, k; done < n; done += k) { /* one copy per pinned range */
        k = host ? pinned_run(c, host + done, n - done) : n;
        e = cudaMemcpyAsync((char *)dst + done, (const char *)src + done, k,
                            cudaMemcpyDefault, s);
        if (e != cudaSuccess)
            return cu_fail(err, e, "cudaMemcpyAsync", k);
    }
    if ((dt == FG_BUFT_DEVICE) != (st == FG_BUFT_DEVICE))
        __atomic_add_fetch(&c->link[dt == FG_BUFT_DEVICE ? 0 : 1], n, __ATOMIC_RELAXED);
    if (!ev)
        return (e = cudaStreamSynchronize(s)) == cudaSuccess
                   ? FG_OK : cu_fail(err, e, "synchronous copy", n);
    fg_event *x = calloc(1, sizeof *x);
    if (!x) {
        cudaStreamSynchronize(c->copy); /* nothing to wait on later: complete it now */
        *ev = NULL;
        return FG_OK;
    }
    if ((e = cudaEventCreateWithFlags(&x->e, cudaEventDisableTiming)) != cudaSuccess) {
        free(x);
        return cu_fail(err, e, "cudaEventCreate", n);
    }
    if ((e = cudaEventRecord(x->e, c->copy)) != cudaSuccess) {
        cudaEventDestroy(x->e);
        free(x);
        return cu_fail(err, e, "cudaEventRecord", n);
    }
    *ev = x;
    return FG_OK;
}

static int d_event_wait(fg_device *d, fg_event *ev, fg_err *err)
{
    if (!ev)
        return FG_OK;
    cudaSetDevice(((cuda_dev *)d->ctx)->ordinal);
    cudaError_t e = cudaEventSynchronize(ev->e);
    cudaEventDestroy(ev->e);
    free(ev);
    return e == cudaSuccess ? FG_OK : cu_fail(err, e, "cudaEventSynchronize", 0);
}

static int d_sync(fg_device *d, fg_err *err)
{
    cudaSetDevice(((cuda_dev *)d->ctx)->ordinal);
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? FG_OK : cu_fail(err, e, "cudaDeviceSynchronize", 0);
}

static void d_destroy(fg_device *d)
{
    cuda_dev *c = d->ctx;
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        cudaSetDevice(c->ordinal);
        cudaStreamDestroy(c->copy);
        cudaStreamDestroy(c->now);
        if (c->fence)
            cudaEventDestroy(c->fence);
        pthread_mutex_destroy(&c->mu);
        fg_ranges_free(&c->pins);
        free(c);
    }
    free(d);
}

static fg_device *d_retain(fg_device *d)
{
    fg_device *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    __atomic_add_fetch(&((cuda_dev *)d->ctx)->refs, 1, __ATOMIC_ACQ_REL);
    *r = *d;
    return r;
}

static const fg_device_iface k_cuda = {
    "cuda", d_alloc, d_free, d_copy, d_event_wait, d_sync, d_destroy, d_retain, d_pin, d_unpin,
};

int fg_device_cuda_create(int ordinal, fg_device **out, fg_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || ordinal < 0 || ordinal >= n) {
        cudaGetLastError();
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda: no GPU %d visible (%s)", ordinal,
                          e == cudaSuccess ? "not that many devices" : cudaGetErrorString(e));
    }
    cuda_dev *c = calloc(1, sizeof *c);
    fg_device *d = calloc(1, sizeof *d);
    e = c && d ? cudaSetDevice(ordinal) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking);
    if (e == cudaSuccess && (e = cudaStreamCreateWithFlags(&c->now, cudaStreamNonBlocking)) !=
                                cudaSuccess)
        cudaStreamDestroy(c->copy);
    if (e != cudaSuccess) {
        free(c);
        free(d);
        return cu_fail(err, e, "creating the device's copy streams", 0);
    }
    c->ordinal = ordinal;
    c->refs = 1;
    pthread_mutex_init(&c->mu, NULL);
    d->iface = &k_cuda;
    d->ctx = c;
    *out = d;
    return FG_OK;
}

int fg_device_is_cuda(const fg_device *d) { return d && d->iface == &k_cuda; }

int fg_device_cuda_order_after(fg_device *d, void *stream, fg_err *err)
{
    cuda_dev *c = d->ctx;
    cudaSetDevice(c->ordinal);
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&c->mu);
    if (stream && !c->fence)
        e = cudaEventCreateWithFlags(&c->fence, cudaEventDisableTiming);
    if (e == cudaSuccess)
        c->after = (cudaStream_t)stream;
    pthread_mutex_unlock(&c->mu);
    return e == cudaSuccess ? FG_OK : cu_fail(err, e, "cudaEventCreate", 0);
}


uint64_t fg_device_cuda_pinned_run(fg_device *d, const void *p, uint64_t n)
{
    return pinned_run(d->ctx, p, n);
}

void fg_device_cuda_link(const fg_device *d, uint64_t out[2])
{
    cuda_dev *c = d->ctx;
    out[0] = __atomic_load_n(&c->link[0], __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&c->link[1], __ATOMIC_RELAXED);
}
