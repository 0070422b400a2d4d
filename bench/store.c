/* bench/store.c - catalog rates: tensor lookups, KV page lookups and KV page writes
 * (allocation + data + catalog commit), next to the raw data path they sit beside.
 *
 * Prints operations per second for:
 *   lookup       fg_store_tensor_get + free of a random name, 1 and 2 threads
 *   kv lookup    fg_store_kv_lookup of a random key
 *   kv write/1   one page per fg_store_kv_write (write, fdatasync, publish commit; slots are
 *                reserved 64 at a time, one more commit per 64 pages)
 *   kv write/64  64 pages per call, counted in pages
 *   raw/64       the data path alone: the same 64 page writes (header + 16 KiB payload at a
 *                64 KiB stride) + one fdatasync, counted in pages
 * Usage: bench_store [DIR [N_TENSORS [SECONDS_PER_FIGURE]]]; defaults $TMPDIR, 2000, 1.
 * The machine is shared, so compare ratios within one run, not figures across runs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const fg_err *e)
{
    fprintf(stderr, "bench_store: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct lk_arg {
    fg_store *s;
    int n_tensors;
    double seconds;
    unsigned seed;
    uint64_t ops;
} lk_arg;

static void *lookup_loop(void *p)
{
    lk_arg *a = p;
    fg_err e;
    double end = now() + a->seconds;
    while (now() < end) {
        for (int i = 0; i < 256; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.weight", rand_r(&a->seed) % a->n_tensors);
            fg_store_tensor *t;
            if (fg_store_tensor_get(a->s, name, &t, &e))
                die("lookup", &e);
            fg_store_tensor_free(t);
        }
        a->ops += 256;
    }
    return NULL;
}

static double lookups(fg_store *s, int n_tensors, double secs, int threads)
{
    pthread_t th[8];
    lk_arg a[8];
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        a[i] = (lk_arg){s, n_tensors, secs, (unsigned)i + 1, 0};
        pthread_create(&th[i], NULL, lookup_loop, &a[i]);
    }
    uint64_t ops = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ops += a[i].ops;
    }
    return ops / (now() - t0);
}

static void import(fg_store *s, int n)
{
    fg_err e;
    fg_store_batch *b;
    static float row[4][256];
    uint64_t dims[2] = {16, 256};
    if (fg_store_batch_begin(s, &b, &e))
        die("batch", &e);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.weight", i);
        fg_fgt_tensor_desc d = {name, fg_codec_float(FG_CODEC_F32), 2, dims, NULL, 0};
        if (fg_store_batch_begin_tensor(b, &d, &e))
            die("tensor", &e);
        for (int c = 0; c < 4; c++)
            if (fg_store_batch_add_chunk(b, 4, row, sizeof row, &e))
                die("chunk", &e);
        if (fg_store_batch_end_tensor(b, &e))
            die("tensor", &e);
    }
    if (fg_store_batch_commit(b, &e))
        die("commit", &e);
}

static uint32_t g_rounds; /* calls made by the last kv_writes */

static double kv_writes(fg_store *s, size_t per_call, double secs, uint64_t job)
{
    static uint8_t payload[64][16384];
    fg_store_kv_write_req r[64];
    fg_err e;
    uint64_t pages = 0;
    double t0 = now(), end = t0 + secs;
    for (uint32_t round = 0; now() < end; round++) {
        for (size_t i = 0; i < per_call; i++)
            r[i] = (fg_store_kv_write_req){{job, round % 64, (uint32_t)i, 0}, 0, 16, FG_CODEC_F16,
                                           payload[i], sizeof payload[i]};
        if (fg_store_kv_write(s, per_call, r, NULL, &e))
            die("kv write", &e);
        pages += per_call;
        g_rounds = round + 1;
    }
    return pages / (now() - t0);
}

static double kv_lookups(fg_store *s, double secs)
{
    fg_err e;
    uint64_t ops = 0;
    unsigned seed = 7;
    double t0 = now(), end = t0 + secs;
    while (now() < end) {
        for (int i = 0; i < 256; i++) {
            uint32_t seqs = g_rounds < 64 ? g_rounds : 64;
            fg_store_kv_key k = {2, (uint32_t)rand_r(&seed) % seqs, (uint32_t)rand_r(&seed) % 64, 0};
            fg_store_kv_page p;
            if (fg_store_kv_lookup(s, &k, &p, &e))
                die("kv lookup", &e);
        }
        ops += 256;
    }
    return ops / (now() - t0);
}

static double raw_writes(const char *dir, double secs)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/raw.bin", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    static uint8_t page[65536];
    uint64_t pages = 0;
    double t0 = now(), end = t0 + secs;
    for (uint64_t round = 0; now() < end; round++) {
        for (int i = 0; i < 64; i++)
            if (pwrite(fd, page, FG_STORE_KV_HEADER_SIZE + 16384,
                       (off_t)((round % 8) * 64 + i) * 65536) < 0)
                return 0;
        fdatasync(fd);
        pages += 64;
    }
    close(fd);
    unlink(path);
    return pages / (now() - t0);
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int n = argc > 2 ? atoi(argv[2]) : 2000;
    double secs = argc > 3 ? atof(argv[3]) : 1.0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fgbench-store-%d", base, (int)getpid());
    fg_store_opts o = {.kv_page_size = 65536};
    fg_store *s;
    fg_err e;
    if (fg_store_create(dir, &o, &s, &e))
        die("create", &e);
    double t0 = now();
    import(s, n);
    double t_imp = now() - t0;
    printf("store bench: %d tensors x 4 chunks imported in %.3f s; KV page 64 KiB\n", n, t_imp);
    printf("  lookup (1 thread)   %10.0f ops/s\n", lookups(s, n, secs, 1));
    printf("  lookup (2 threads)  %10.0f ops/s\n", lookups(s, n, secs, 2));
    double w1 = kv_writes(s, 1, secs, 1);
    double w64 = kv_writes(s, 64, secs, 2);
    double raw = raw_writes(dir, secs);
    printf("  kv lookup           %10.0f ops/s\n", kv_lookups(s, secs));
    printf("  kv write/1          %10.0f pages/s (write + fdatasync + publish commit; a reserve commit per 64)\n", w1);
    printf("  kv write/64         %10.0f pages/s (%.1f MB/s of payload)\n", w64,
           w64 * 16384 / 1e6);
    printf("  raw/64              %10.0f pages/s (same bytes: pwrite x64 + fdatasync, no catalog)\n",
           raw);
    printf("  kv write/64 runs at %.2f of the raw data path\n", w64 / raw);
    fg_store_info info;
    if (fg_store_info_get(s, &info, &e))
        die("info", &e);
    printf("  catalog map %llu bytes, %llu used; %llu KV slots\n",
           (unsigned long long)info.map_size, (unsigned long long)info.map_used,
           (unsigned long long)info.kv_slots);
    fg_store_close(s);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) ? 1 : 0;
}
