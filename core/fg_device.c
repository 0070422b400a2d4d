/* fg_device.c - the host device (fg_device.h): aligned host memory, memmove copies. */
#include <stdlib.h>
#include <string.h>

#include "fg_device.h"

static int h_alloc(fg_device *d, fg_buft t, uint64_t n, void **ptr, fg_err *err)
{
    (void)d;
    if (t != FG_BUFT_HOST)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "host device: no %s memory",
                          t == FG_BUFT_PINNED ? "pinned" : "device");
    *ptr = aligned_alloc(64, (n + 63) & ~(uint64_t)63);
    return *ptr ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "host device: cannot allocate %llu bytes",
                                     (unsigned long long)n);
}

static void h_free(fg_device *d, fg_buft t, void *ptr)
{
    (void)d, (void)t;
    free(ptr);
}

static int h_copy(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                  fg_event **ev, fg_err *err)
{
    (void)d;
    if (dt != FG_BUFT_HOST || st != FG_BUFT_HOST)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "host device: no device memory");
    memmove(dst, src, n);
    if (ev)
        *ev = NULL;
    return FG_OK;
}

static int h_event_wait(fg_device *d, fg_event *ev, fg_err *err)
{
    (void)d, (void)ev, (void)err;
    return FG_OK;
}

static int h_sync(fg_device *d, fg_err *err)
{
    (void)d, (void)err;
    return FG_OK;
}

static void h_destroy(fg_device *d)
{
    free(d);
}

static const fg_device_iface k_host = {
    "host", h_alloc, h_free, h_copy, h_event_wait, h_sync, h_destroy,
};

int fg_device_host_create(fg_device **out, fg_err *err)
{
    fg_device *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "host device: out of memory");
    d->iface = &k_host;
    *out = d;
    return FG_OK;
}

void fg_device_free(fg_device *d)
{
    if (d)
        d->iface->destroy(d);
}
