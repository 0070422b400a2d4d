/* fg_membw.h - the machine's memory read bandwidth: the roofline of a decode step that streams
 * the weights from RAM (batch 1 reads every weight byte once a token).
 *
 * A plain read loop (four sequential streams per thread, XOR-folded so nothing is optimized
 * away; 256-bit loads where the CPU has AVX2, 64-bit ones otherwise) over `bytes` split evenly
 * across `threads` threads, repeated for `seconds` (at least 4 passes); each pass is timed from
 * a barrier to the last thread's finish, the first (which warms the TLB) dropped. The buffer is
 * written once first so its pages exist. Used by the calibration (policy/calib.c: the figure
 * fg-infer's summary puts a decode's weight traffic against) and bench_membw.
 */
#ifndef FG_MEMBW_H
#define FG_MEMBW_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_membw {
    double best, median; /* bytes/s (the pass's bytes over its time) */
    int passes;
} fg_membw;

/* 0, or -1 (errno set) when the buffer or the threads cannot be had; threads 1..256, bytes >=
 * 64 KiB a thread. */
int fg_membw_measure(int threads, size_t bytes, double seconds, fg_membw *out);

/* One pass of the loop over p[0, n) on the calling thread (p 32-byte aligned; the last
 * n % 256 bytes are not read): the XOR of what it read, to be kept by the caller. */
unsigned long long fg_membw_read(const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
