/* membw.c - the machine's memory read bandwidth, the roofline of batch-1 decode (bench/batch1.sh
 * prints fg's weight bytes per token x tok/s against it, measured in the same run).
 *
 * usage: bench_membw [THREADS] [MIB] [SECONDS]   (defaults 2, 1024, 2)
 * The read loop of core/fg_membw.h (the one the calibration measures for fg-infer's summary)
 * over MIB MiB split evenly across THREADS threads, repeated for SECONDS. Prints the best and
 * the median pass in GB/s (1e9 bytes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_membw.h"

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    double secs = argc > 3 ? atof(argv[3]) : 2.0;
    if (threads < 1 || threads > 256 || mib < 64 || !(secs > 0)) {
        fprintf(stderr, "usage: bench_membw [THREADS 1..256] [MIB >= 64] [SECONDS > 0]\n");
        return 2;
    }
    fg_membw m;
    if (fg_membw_measure(threads, mib << 20, secs, &m)) {
        fprintf(stderr, "bench_membw: %zu MiB over %d threads: %s\n", mib, threads,
                strerror(errno));
        return 1;
    }
    printf("read bandwidth, %d threads, %zu MiB: best %.1f GB/s, median %.1f GB/s (%d passes)\n",
           threads, mib, m.best / 1e9, m.median / 1e9, m.passes);
    return 0;
}
