/* bench/pager.c - stream a large .fgt file through the pager and compare with fio.
 *
 * In one run on one file (created once, reused; default 4 GiB, on the real disk): the pager
 * (io_uring, O_DIRECT, registered buffers and files) streams every chunk through a 256 MiB
 * HOST budget, prefetching as far ahead as the budget allows; fio (ioengine=io_uring,
 * direct=1, same block size and queue depth) reads the same file when fio is on PATH, once as
 * specified and once with --fixedbufs --registerfiles (the kernel features the pager uses); the
 * pager with the pread engine (O_DIRECT pread, one op at a time) reads it too. All three use
 * O_DIRECT, so the page cache does not help any of them. The machine is shared and noisy:
 * the three are interleaved rep by rep and every figure is printed, with min/median/max and
 * the pager/fio ratio per rep.
 *
 * usage: bench_pager [--file PATH] [--gib N] [--chunk-mib N] [--bs-kib N] [--qd N]
 *                    [--budget-mib N] [--reps N] [--read-gib N (read only the first N GiB)]
 *
 * --verify-cost: the cost of checking every chunk's XXH3 (the pager's default) on an existing
 * .fgt file, e.g. a store's weights-000001.fgt: the io_uring pager reads the whole file with
 * verification and with FG_PAGER_NO_VERIFY, alternating which goes first, rep by rep; prints
 * GB/s of both and their ratio, and the XXH3 rate on its own (from RAM). Never writes the file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "pager.h"
#include "pager_int.h"

typedef struct opts {
    const char *file;
    uint64_t gib, chunk_mib, bs_kib, budget_mib, read_gib;
    unsigned qd, reps;
    int verify_cost;
    unsigned flags; /* extra FG_PAGER_* flags of run_pager */
} opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const fg_err *e)
{
    fprintf(stderr, "bench_pager: %s: %s\n", what, e->msg);
    exit(1);
}

/* One f32 tensor [rows, 4 Mi floats per 16 MiB...] chunked in chunk_mib pieces. */
static void create_file(const opts *o)
{
    struct stat st;
    uint64_t want = o->gib << 30;
    if (stat(o->file, &st) == 0 && (uint64_t)st.st_size >= want)
        return;
    unlink(o->file);
    fprintf(stderr, "bench_pager: creating %s (%llu GiB, once)\n", o->file,
            (unsigned long long)o->gib);
    uint64_t cols = 1024, row_bytes = cols * 4, rows_per_chunk = (o->chunk_mib << 20) / row_bytes;
    uint64_t dims[2] = {want / row_bytes, cols};
    fg_err err;
    fg_fgt_writer *w;
    if (fg_fgt_writer_create(o->file, NULL, &w, &err))
        die("create", &err);
    fg_fgt_tensor_desc d = {"stream", fg_codec_float(FG_CODEC_F32), 2, dims, NULL, 0};
    if (fg_fgt_writer_begin_tensor(w, &d, &err))
        die("begin_tensor", &err);
    size_t len = rows_per_chunk * row_bytes;
    uint64_t *buf = malloc(len);
    for (uint64_t r = 0; r < dims[0]; r += rows_per_chunk) {
        uint64_t n = dims[0] - r < rows_per_chunk ? dims[0] - r : rows_per_chunk;
        for (size_t i = 0; i < n * row_bytes / 8; i++)
            buf[i] = (r + i) * 0x9E3779B97F4A7C15ull;
        if (fg_fgt_writer_add_chunk(w, n, buf, n * row_bytes, &err))
            die("add_chunk", &err);
    }
    free(buf);
    if (fg_fgt_writer_end_tensor(w, &err) || fg_fgt_writer_finish(w, &err))
        die("finish", &err);
}

static double g_cpu; /* CPU seconds of the last run_pager loop */

static void notice(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "%s\n", line);
}

/* Stream every chunk: prefetch ahead while the budget allows, acquire, touch, release. */
static double run_pager(const opts *o, fg_pager_engine eng, uint64_t *bytes, char *desc,
                        size_t desc_len, fg_pager_stats *st)
{
    fg_err err;
    fg_pager_config c = {{0, o->budget_mib << 20, 0}, o->qd, o->bs_kib << 10, eng, NULL, NULL,
                         FG_PAGER_NO_CUDA | o->flags, notice, NULL, NULL, NULL};
    fg_pager *p;
    uint32_t first, n;
    if (fg_pager_open(&c, &p, &err))
        die("fg_pager_open", &err);
    if (fg_pager_add_fgt(p, o->file, 0, FG_CHUNK_WEIGHT, &first, &n, &err))
        die("fg_pager_add_fgt", &err);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = now_s();
    uint64_t sum = 0, total = 0;
    uint32_t ahead = first;
    if (o->read_gib && (o->read_gib << 30) / (o->chunk_mib << 20) < n)
        n = (uint32_t)((o->read_gib << 30) / (o->chunk_mib << 20));
    for (uint32_t i = first; i < first + n; i++) {
        fg_pager_ticket tk;
        if (ahead < i)
            ahead = i;
        while (ahead < first + n && fg_pager_prefetch(p, ahead, FG_TIER_HOST, &tk, NULL) == 0)
            ahead++;
        fg_pager_view v;
        if (fg_pager_acquire(p, i, FG_TIER_HOST, &v, &err))
            die("fg_pager_acquire", &err);
        for (uint64_t k = 0; k < v.length; k += 4096)
            sum += ((const uint8_t *)v.ptr)[k];
        total += v.padded;
        if (fg_pager_release(p, &v, 0, &err))
            die("fg_pager_release", &err);
    }
    double dt = now_s() - t0;
    getrusage(RUSAGE_SELF, &ru1);
    g_cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                     ru0.ru_stime.tv_sec) +
            (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                     ru0.ru_stime.tv_usec) * 1e-6;
    fg_pager_stats_get(p, st);
    snprintf(desc, desc_len, "%s", st->engine);
    fg_pager_close(p);
    *bytes = total + (sum & 0); /* sum keeps the touch loop alive */
    if (sum == 1)
        fprintf(stderr, " ");
    return (double)total / dt / 1e9;
}

static int have_fio(void) { return system("command -v fio >/dev/null 2>&1") == 0; }

static double run_fio(const opts *o, uint64_t bytes, const char *extra)
{
    char cmd[8600];
    snprintf(cmd, sizeof cmd,
             "fio --name=seqread --filename='%s' --rw=read --bs=%lluk --iodepth=%u "
             "--ioengine=io_uring --direct=1 --size=%llu --numjobs=1 %s --output-format=json "
             "2>/dev/null",
             o->file, (unsigned long long)o->bs_kib, o->qd, (unsigned long long)bytes, extra);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    pclose(f);
    char *r = strstr(out, "\"read\"");
    char *b = r ? strstr(r, "\"bw_bytes\"") : NULL;
    char *colon = b ? strchr(b, ':') : NULL;
    return colon ? strtod(colon + 1, NULL) / 1e9 : -1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summary(const char *name, double *v, unsigned n)
{
    qsort(v, n, sizeof *v, cmp_d);
    printf("%-16s min %.3f  median %.3f  max %.3f  (spread %.1f%%)\n", name, v[0], v[n / 2],
           v[n - 1], v[n / 2] > 0 ? 100 * (v[n - 1] - v[0]) / v[n / 2] : 0);
}

static void parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"file", 1, 0, 'f'}, {"gib", 1, 0, 'g'}, {"chunk-mib", 1, 0, 'c'}, {"bs-kib", 1, 0, 'b'},
        {"qd", 1, 0, 'q'},   {"budget-mib", 1, 0, 'm'}, {"reps", 1, 0, 'r'}, {"read-gib", 1, 0, 'R'},
        {"verify-cost", 0, 0, 'V'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        unsigned long long v = optarg ? strtoull(optarg, NULL, 10) : 0;
        switch (ch) {
        case 'f': o->file = optarg; break;
        case 'g': o->gib = v; break;
        case 'c': o->chunk_mib = v; break;
        case 'b': o->bs_kib = v; break;
        case 'q': o->qd = (unsigned)v; break;
        case 'm': o->budget_mib = v; break;
        case 'r': o->reps = (unsigned)v; break;
        case 'R': o->read_gib = v; break;
        case 'V': o->verify_cost = 1; break;
        default: fprintf(stderr, "bench_pager: unknown flag (see the file-top comment)\n"); exit(2);
        }
    }
    if (!o->gib || !o->chunk_mib || !o->bs_kib || o->bs_kib % 4 || !o->qd || !o->reps ||
        o->reps > 64 || o->budget_mib < 2 * o->chunk_mib) {
        fprintf(stderr, "bench_pager: flags out of range (--bs-kib multiple of 4, "
                        "--budget-mib >= 2 x --chunk-mib, --reps 1..64)\n");
        exit(2);
    }
}

/* XXH3 over a RAM buffer (64 MiB: not cache-resident, like a chunk fresh from the disk), as
 * libxxhash computes it (pager = 0) or as the pager does (pager = 1: AVX2 when available). */
static double xxh3_rate(int pager)
{
    size_t n = 64u << 20;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 131);
    uint64_t h = 0;
    double t0 = now_s();
    for (int r = 0; r < 8; r++)
        h ^= pager ? fg_pager_xxh3(b, n) : XXH3_64bits(b, n);
    double dt = now_s() - t0;
    free(b);
    if (h == 1)
        fprintf(stderr, " ");
    return 8.0 * (double)n / dt / 1e9;
}

static int verify_cost(opts *o)
{
    struct stat st;
    if (stat(o->file, &st)) {
        fprintf(stderr, "bench_pager: --verify-cost: %s: no such file\n", o->file);
        return 1;
    }
    o->read_gib = 0;
    double on[64], off[64], ratio[64];
    char desc[96];
    fg_pager_stats s;
    uint64_t bytes = 0;
    printf("file %s (%.2f GiB), bs %llu KiB, qd %u, HOST budget %llu MiB, %u reps\n", o->file,
           (double)st.st_size / (1 << 30), (unsigned long long)o->bs_kib, o->qd,
           (unsigned long long)o->budget_mib, o->reps);
    for (unsigned r = 0; r < o->reps; r++) {
        for (int k = 0; k < 2; k++) {
            int verify = (int)(r + (unsigned)k) % 2 == 0; /* alternate who goes first */
            o->flags = verify ? 0 : FG_PAGER_NO_VERIFY;
            double g = run_pager(o, FG_PAGER_ENGINE_URING, &bytes, desc, sizeof desc, &s);
            *(verify ? &on[r] : &off[r]) = g;
            if (s.sticky)
                fprintf(stderr, "bench_pager: pager error %d\n", s.sticky);
        }
        ratio[r] = on[r] / off[r];
        printf("rep %u: verify %.3f GB/s  no-verify %.3f GB/s  ratio %.3f  (%.2f GiB)\n", r,
               on[r], off[r], ratio[r], (double)bytes / (1 << 30));
        fflush(stdout);
    }
    printf("engine: %s; XXH3 alone: libxxhash %.1f GB/s, the pager's %.1f GB/s\n", desc,
           xxh3_rate(0), xxh3_rate(1));
    summary("verify", on, o->reps);
    summary("no-verify", off, o->reps);
    summary("verify/no", ratio, o->reps);
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {"bench-pager.fgt", 4, 16, 1024, 256, 0, 32, 3, 0, 0};
    parse(argc, argv, &o);
    if (o.verify_cost)
        return verify_cost(&o);
    create_file(&o);
    int fio = have_fio();
    double pg[64], fi[64], fx[64], pr[64], ratio[64], ratio_x[64];
    char desc[96], pdesc[96];
    fg_pager_stats st, pst;
    uint64_t bytes = (o.gib << 30) - (o.gib << 30) % (o.chunk_mib << 20); /* refined by pager */
    printf("file %s, chunks %llu MiB, bs %llu KiB, qd %u, HOST budget %llu MiB, %u reps\n",
           o.file, (unsigned long long)o.chunk_mib, (unsigned long long)o.bs_kib, o.qd,
           (unsigned long long)o.budget_mib, o.reps);
    for (unsigned r = 0; r < o.reps; r++) {
        if (r % 2 && fio) /* alternate who goes first: the disk's state drifts */
            fi[r] = run_fio(&o, bytes, "");
        pg[r] = run_pager(&o, FG_PAGER_ENGINE_URING, &bytes, desc, sizeof desc, &st);
        double cpu = g_cpu;
        if (r % 2 == 0 || !fio)
            fi[r] = fio ? run_fio(&o, bytes, "") : -1;
        /* fio with the same kernel features the pager uses, for an exact comparison */
        fx[r] = fio ? run_fio(&o, bytes, "--fixedbufs --registerfiles") : -1;
        pr[r] = run_pager(&o, FG_PAGER_ENGINE_PREAD, &bytes, pdesc, sizeof pdesc, &pst);
        ratio[r] = fi[r] > 0 ? pg[r] / fi[r] : 0;
        ratio_x[r] = fx[r] > 0 ? pg[r] / fx[r] : 0;
        printf("rep %u: pager %.3f GB/s  fio %.3f GB/s  fio-fixed %.3f GB/s  pread %.3f GB/s  "
               "pager/fio %.3f  "
               "(%.2f GiB; pager cpu %.2f s, stalled %.2f s, mean depth %.1f, wasted prefetches %llu, peak HOST %llu MiB)\n",
               r, pg[r], fi[r], fx[r], pr[r], ratio[r], (double)bytes / (1 << 30), cpu,
               (double)st.stall_ns * 1e-9,
               st.io_ops ? (double)st.inflight_sum / (double)st.io_ops : 0,
               (unsigned long long)st.wasted, (unsigned long long)(st.peak[FG_TIER_HOST] >> 20));
        fflush(stdout);
    }
    printf("pager engine: %s; pread engine: %s%s\n", desc, pdesc,
           fio ? "" : "; fio not on PATH: no fio figure");
    summary("pager", pg, o.reps);
    if (fio) {
        summary("fio", fi, o.reps);
        summary("fio-fixed", fx, o.reps);
    }
    summary("pread", pr, o.reps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("max RSS of this process %.1f MiB (HOST budget %llu MiB; fio runs as a child)\n",
           (double)ru.ru_maxrss / 1024, (unsigned long long)o.budget_mib);
    if (fio) {
        summary("pager/fio", ratio, o.reps);
        summary("pager/fio-fixed", ratio_x, o.reps);
    }
    return 0;
}
