/* fg_device_cuda.h - the CUDA device object (fg_device.h): one implementation for the CUDA
 * compute backend and the pager used on its own (built only with CUDA: FG_HAVE_CUDA).
 *
 * Memory: DEVICE with cudaMalloc, PINNED with cudaHostAlloc, HOST page-aligned; pin/unpin
 * (fg_device.h) register host memory in place (cudaHostRegister / cudaHostUnregister) and keep
 * the ranges, so a copy whose host side spans several registrations is issued as one
 * cudaMemcpyAsync per range (one that spanned them would be staged, synchronously), whatever
 * type it names that side (the engine names the pager's views HOST). Copies run on
 * the device's own streams (non-blocking, so the backend's compute stream never waits on them
 * unless told to): a copy given an event pointer goes on the copy stream, records a CUDA event
 * after it and returns, and event_wait synchronizes and frees it; one without goes on a second
 * stream, synchronized before the call returns, so it does not wait behind the prefetches queued
 * on the copy stream (fg_device.h: the caller completes the copies it depends on). With the
 * compute backend's stream named (fg_device_cuda_order_after), every copy also waits for the
 * kernels queued there before it. Reference-counted (retain), so the pager's DEVICE tier and
 * the backend share one device and its counters. Every call sets the device's ordinal first (a process may hold
 * several: pipeline ranks on one host). Bytes crossing the link through copy() are counted.
 */
#ifndef FG_DEVICE_CUDA_H
#define FG_DEVICE_CUDA_H

#include <stdint.h>

#include "fg_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device of CUDA ordinal `ordinal` (its copy stream created): FG_ERR_UNSUPPORTED when no
 * GPU of that ordinal is visible, FG_ERR_IO naming the CUDA error otherwise. */
int fg_device_cuda_create(int ordinal, fg_device **out, fg_err *err);
int fg_device_is_cuda(const fg_device *d);
/* Order every later copy() of d (either stream) after the work queued on `stream` (a
 * cudaStream_t) at the time of the copy: a copy out of device memory sees what the kernels
 * queued before it wrote, a copy into device memory waits for the kernels queued before it that
 * may still read what it overwrites. So the compute backend's ops need not synchronize their
 * stream when they stage nothing for the host. NULL: no order (the backend's stream is going).
 * One stream per device. */
int fg_device_cuda_order_after(fg_device *d, void *stream, fg_err *err);
/* Bytes copy() moved host -> device ([0]) and device -> host ([1]) so far. */
void fg_device_cuda_link(const fg_device *d, uint64_t out[2]);
/* Bytes of host memory [p, p + n) that one cudaMemcpyAsync may take without being staged by the
 * driver: up to the end of the pinned range (the pager's cudaHostRegister'ed runs) p lies in, or
 * all n when it lies in none. A caller copying pager views itself (the CUDA backend's weight
 * uploads) issues one copy per run, as the device's copy() does. */
uint64_t fg_device_cuda_pinned_run(fg_device *d, const void *p, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
