/* fg_device.h - the device object: memory of a compute device and the copies between it and the
 * host, shared by the pager (its DEVICE tier and pinned HOST pool) and the compute backend that
 * computes on that memory (ggml-backend's buffer types and events, in C).
 *
 * A device is { iface, ctx }. Buffer types: HOST (ordinary memory), PINNED (host memory the
 * device copies from and to asynchronously: cudaHostAlloc), DEVICE (memory host code may not
 * touch). A device offers what it has and answers FG_ERR_UNSUPPORTED for the rest: the host
 * device (fg_device_host_create) has HOST only. Copies with an event pointer may run
 * asynchronously (a stream, in the order issued); event_wait completes and frees the event,
 * sync waits for all. A copy without one is complete when the call returns and is not ordered
 * after the asynchronous copies in flight (it may pass them: the engine's small copies of ids
 * and rows do not wait behind the pager's prefetches), so a caller first completes, by their
 * events, the copies whose bytes it reads or overwrites.
 *
 * Pinning (optional: pin/unpin NULL where a device has none): pin makes [p, p + len) of host
 * memory the caller already owns PINNED in place (page-locked and known to the device:
 * cudaHostRegister), so a pool can reserve address space and pin it piece by piece as it fills
 * instead of allocating its whole budget pinned. Pinned ranges must not overlap; each is
 * unpinned, whole and by its start, before its memory goes (after the copies through it are
 * complete). A copy may name as PINNED a range made of adjacent pinned ranges (or lying in one
 * PINNED allocation): the device splits it where it must, and it is asynchronous all the same.
 *
 * Implementations: the host device (core/fg_device.c); the CUDA device (core/fg_device_cuda.c:
 * a copy stream, events), which the CUDA backend and a pager given no device both use; the
 * pager's plain simulated device (pager/device.c, synchronous copies, pinned memory whose
 * rules it checks and counts); the simulated
 * accelerator of the sim backend (compute/device_sim.c: memory host code cannot touch, a
 * copy-engine thread). A backend shares its device with the pager through `retain`.
 * Thread-safety: alloc/free/copy may be called from one thread at a time per device.
 */
#ifndef FG_DEVICE_H
#define FG_DEVICE_H

#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_buft {
    FG_BUFT_HOST = 0,
    FG_BUFT_PINNED = 1,
    FG_BUFT_DEVICE = 2,
} fg_buft;

typedef struct fg_device fg_device;
typedef struct fg_event fg_event;

typedef struct fg_device_iface {
    const char *name;
    /* bytes of buffer type t into *ptr (owned by the caller until free) */
    int (*alloc)(fg_device *d, fg_buft t, uint64_t bytes, void **ptr, fg_err *err);
    void (*free)(fg_device *d, fg_buft t, void *ptr); /* NULL ptr accepted */
    /* copy n bytes from src (of type st) to dst (of type dt); with ev non-NULL the copy may be
     * asynchronous and *ev (possibly NULL: already complete) completes it */
    int (*copy)(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st, uint64_t n,
                fg_event **ev, fg_err *err);
    int (*event_wait)(fg_device *d, fg_event *ev, fg_err *err); /* NULL ev: complete */
    int (*sync)(fg_device *d, fg_err *err);
    void (*destroy)(fg_device *d);
    /* optional (NULL: not shared): another handle on the same device and memory, destroyed
     * separately (the pager and a backend share a simulated device's arena this way) */
    fg_device *(*retain)(fg_device *d);
    /* optional (NULL: no pinning in place; see "Pinning" above): pin [p, p + len) (page-aligned,
     * not overlapping a pinned range); FG_ERR_NOMEM when the device or the OS refuses */
    int (*pin)(fg_device *d, void *p, uint64_t len, fg_err *err);
    void (*unpin)(fg_device *d, void *p); /* p: the start given to pin */
} fg_device_iface;

struct fg_device {
    const fg_device_iface *iface;
    void *ctx;
};

/* Host memory only (HOST; PINNED and DEVICE are FG_ERR_UNSUPPORTED): what a CPU backend has.
 * Owned by the caller (fg_device_free). */
int fg_device_host_create(fg_device **out, fg_err *err);
void fg_device_free(fg_device *d); /* NULL accepted */

#ifdef __cplusplus
}
#endif
#endif
