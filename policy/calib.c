/* calib.c - the machine's calibration for the cost model (policy_search.h), measured through
 * the code paths a run uses, and its versioned JSON file.
 *
 * What is measured, each as a rate:
 *  - disk write and read bandwidth: a temporary file of 4 MiB chunks (the size stores and KV
 *    chunks use) registered writable with a pager (O_DIRECT, io_uring when available), every
 *    chunk acquired, filled, released dirty and written back; then each evicted and read back
 *    with prefetching two ahead, checksums verified (what a run does);
 *  - f16 -> f32 and q4 -> f32 decoding (quant/quant.h, the default ISA), the backend's cost of
 *    using a weight not stored in f32;
 *  - the CPU backend's linear at M = 1, 2, 4, ..., 256 rows on f16 weights of 2048 x 2048
 *    handed over in 4 MiB pieces, as the engine hands it the store's chunks (so the figure
 *    includes decoding each piece, or the fused F16 kernel), cycling through 64 MiB of weights
 *    (as a run reads them from RAM, not from cache), the row counts measured round-robin; and
 *    the same on Q4 weights (groups of 64 along the input axis) with an int8 backend
 *    (--compute int8: activations quantized per Linear, integer kernels, no decode to f32);
 *  - the backend's attention of one query over 2048 keys (32 heads of 64), over an f32 and a
 *    4-bit cache: seconds per query x key x query width;
 *  - the overlap of reading and computing: the disk read by a second thread while the backend
 *    runs GEMMs, against each alone (on a small VM the I/O path itself takes CPU);
 *  - the memory read bandwidth (core/fg_membw.h: a plain read loop over 1 GiB on the compute
 *    threads), what fg-infer's summary puts a decode's weight traffic against. Quick: 64 MiB,
 *    no more than the GEMM's weights, since a run without a calibration measures quickly in
 *    its own process and its peak RSS is held to its --ram-budget (a CPU whose last-level
 *    cache nears 64 MiB reads part of it from there: the figure is then high). Optional in the
 *    file (mem_read_bps): one written before it was kept loads with 0.
 * Each figure is the median of repeated timings (the machine is shared: a run meets its
 * typical load, not its best moment). The file records the machine ("model name x cores") and
 * FG_CALIB_VERSION; a file of another machine or version is refused (FG_ERR_STATE) so that a
 * caller recalibrates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "calib_int.h"
#include "fg_file.h"
#include "fg_membw.h"
#include "fg_progress.h"
#include "pager.h"
#include "policy_search.h"
#include "quant.h"

#define CHUNK (4u << 20)

void fg_calib_machine(char *buf, size_t cap)
{
    char model[160] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            char *v = strchr(line, ':') + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(model, sizeof model, "%s", v);
            break;
        }
    if (f)
        fclose(f);
    snprintf(buf, cap, "%s x %ld", model, sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---- measurements ---- */

/* Progress on a terminal: "calibrating 5/16: linear at M = 8". */
typedef struct meter {
    FILE *log;             /* NULL: silent */
    int steps, total;
} meter;

static void step(meter *m)
{
    if (m->log)
        fprintf(m->log, "\rcalibrating %d/%d   ", ++m->steps, m->total), fflush(m->log);
}

static int disk_pass(fg_pager *p, uint32_t n, int write, double *bps, fg_err *err)
{
    double t0 = fg_now();
    int rc = FG_OK;
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        fg_pager_view v;
        if (!write)
            for (uint32_t j = i + 1; j < i + 3 && j < n; j++)
                fg_pager_prefetch(p, j, FG_TIER_HOST, &(fg_pager_ticket){0}, NULL);
        if ((rc = fg_pager_acquire(p, i, FG_TIER_DISK, &v, err)))
            break;
        if (write)
            memset(v.ptr, (int)(i * 37 + 1), v.padded);
        rc = fg_pager_release(p, &v, write ? FG_PAGER_DIRTY : 0, err);
        if (rc == FG_OK && write)
            rc = fg_pager_write_back(p, i, err);
        if (rc == FG_OK && write)
            rc = fg_pager_evict(p, i, err);
    }
    double dt = fg_now() - t0;
    *bps = dt > 0 ? (double)n * CHUNK / dt : 0;
    return rc;
}

static int measure_overlap(fg_pager *p, uint32_t n, fg_backend *be, fg_calib *c, fg_err *err);

static int measure_disk(const char *dir, int quick, fg_backend *be, fg_calib *c, meter *m,
                        fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fg-calib-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "calibration: cannot create a file in %s", dir);
    uint32_t n = quick ? 6 : 96;
    int rc = ftruncate(fd, (off_t)n * CHUNK) ? fg_err_sys(err, FG_ERR_IO, errno, "%s", path) : 0;
    close(fd);
    fg_pager *p = NULL;
    fg_pager_config pc;
    memset(&pc, 0, sizeof pc);
    pc.budget[FG_TIER_HOST] = 4ull * CHUNK;
    pc.flags = FG_PAGER_NO_CUDA | FG_PAGER_NO_MLOCK;
    uint32_t file, id;
    if (rc == FG_OK)
        rc = fg_pager_open(&pc, &p, err);
    if (rc == FG_OK)
        rc = fg_pager_add_file(p, path, 1, &file, err);
    unlink(path);
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        fg_pager_chunk_desc d = {file, (uint64_t)i * CHUNK, CHUNK, CHUNK, 0, 0, i, {0},
                                 FG_CHUNK_KV, i};
        rc = fg_pager_add_chunk(p, &d, &id, err);
    }
    fg_pager_policy pol = {{0, 0, 1}, {0, 0, 1}, {0, 0, 1}};
    if (rc == FG_OK)
        rc = fg_pager_place(p, &pol, err);
    if (rc == FG_OK)
        rc = disk_pass(p, n, 1, &c->disk_write, err);
    step(m);
    if (rc == FG_OK)
        rc = disk_pass(p, n, 0, &c->disk_read, err);
    step(m);
    if (rc == FG_OK)
        rc = measure_overlap(p, n, be, c, err);
    step(m);
    fg_pager_close(p);
    return rc;
}

/* Median rate (units/s) of fn over repeats lasting at least `least` seconds in all (at least
 * 3, at most 64): the machine is shared, and a run meets its typical load, not its best. */
typedef int (*bench_fn)(void *ctx, fg_err *err);
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double fg_calib_median(double *r, int n)
{
    qsort(r, (size_t)n, sizeof *r, cmp_double);
    return n ? r[n / 2] : 0;
}

static int median_rate(bench_fn fn, void *ctx, double units, double least, double *rate,
                     fg_err *err)
{
    double r[64], start = fg_now();
    int reps = 0;
    do {
        double t0 = fg_now();
        int rc = fn(ctx, err);
        if (rc)
            return rc;
        double dt = fg_now() - t0;
        r[reps++] = dt > 0 ? units / dt : 0;
    } while (reps < 64 && (fg_now() - start < least || reps < 3));
    *rate = fg_calib_median(r, reps);
    return FG_OK;
}

typedef struct dec_ctx {
    const fg_codec *codec;
    const fg_qview *view;
    const void *src;
    size_t len, n;
    float *dst;
} dec_ctx;

static int dec_f16(void *ctx, fg_err *err)
{
    (void)err;
    dec_ctx *d = ctx;
    fg_f16_to_f32(d->src, d->dst, d->n, fg_quant_isa_default());
    return FG_OK;
}

static int dec_q4(void *ctx, fg_err *err)
{
    dec_ctx *d = ctx;
    return fg_quant_decode(d->codec, d->view, d->src, d->len, d->dst, FG_CODEC_F32, 0,
                           fg_quant_isa_default(), err);
}

static int measure_decode(int quick, fg_calib *c, meter *m, fg_err *err)
{
    const uint64_t rows = 1024, cols = 2048, n = rows * cols;
    float *f = malloc(n * 4), *dst = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    fg_codec q = fg_codec_quant(4, 64, 1);
    uint64_t dims[2] = {rows, cols};
    fg_qview v;
    size_t qlen = 0;
    void *qb = NULL;
    int rc = f && dst && h ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; rc == FG_OK && i < n; i++)
        f[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    if (rc == FG_OK) {
        fg_f32_to_f16(f, h, n, fg_quant_isa_default());
        rc = fg_codec_qview(&q, 2, dims, rows, &v, err);
    }
    if (rc == FG_OK)
        rc = fg_quant_chunk_bytes(&v, &qlen, err);
    if (rc == FG_OK && !(qb = malloc(qlen)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = fg_quant_encode(&q, &v, f, FG_CODEC_F32, 0, qb, qlen, fg_quant_isa_default(), err);
    double least = quick ? 0.05 : 0.5;
    dec_ctx d16 = {NULL, NULL, h, n * 2, n, dst}, d4 = {&q, &v, qb, qlen, n, dst};
    if (rc == FG_OK)
        rc = median_rate(dec_f16, &d16, (double)n, least, &c->dec_f16, err);
    step(m);
    if (rc == FG_OK)
        rc = median_rate(dec_q4, &d4, (double)n, least, &c->dec_q4, err);
    step(m);
    free(f), free(dst), free(h), free(qb);
    return rc;
}

typedef struct gemm_ctx {
    fg_backend *be;
    const float *x;
    fg_weight w;             /* over pc */
    float *y;
    uint32_t m;
    fg_calib_pieces pc;      /* the weight [n, k] (f16 or q4 rows) */
} gemm_ctx;

static int piece_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)err;
    const fg_calib_pieces *g = ctx;
    memset(p, 0, sizeof *p);
    p->data = g->data + g->rows[i] * g->row_bytes;
    p->n = g->rows[i + 1] - g->rows[i];
    p->len = p->n * g->row_bytes;
    p->codec = g->codec;
    p->n_dims = 2;
    p->dims[0] = g->n, p->dims[1] = g->k;
    p->first = g->rows[i];
    return FG_OK;
}

static int piece_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)ctx, (void)p, (void)err;
    return FG_OK;
}

fg_calib_pieces fg_calib_pieces_of(const uint8_t *data, size_t row_bytes, fg_codec codec,
                                   uint32_t n, uint32_t k)
{
    return (fg_calib_pieces){data, row_bytes, codec, n, k, {0, n / 2, n}};
}

fg_weight fg_calib_weight(fg_calib_pieces *p)
{
    return (fg_weight){NULL, 2, p->rows, piece_acquire, piece_release, NULL, p};
}

static int gemm_once(void *ctx, fg_err *err)
{
    gemm_ctx *g = ctx;
    return g->be->iface->linear(g->be, g->x, &g->w, NULL, g->y, g->m, g->pc.n, g->pc.k, err);
}

/* The backend's linear as the engine calls it on weights of 2048 x 2048 in two pieces (4 MiB
 * each in f16): f16 decoded and multiplied (the rate includes the f16 decode or the fused F16
 * kernel), or Q4 (groups of 64 along the input axis) on an int8 backend (activations quantized
 * per Linear, integer kernels). The weights cycle through copies filling GEMM_BYTES (64 MiB),
 * more than a last-level cache holds: a decode step reads each weight from RAM once, and one
 * 8 MiB matrix used again and again would stay in cache and run several times faster than a run
 * does. The row counts are measured round-robin, each round timing every M once over the same
 * work (256 rows: M = 1 is 256 calls; quick: 32 rows, M > 32 one call), so a burst of load on
 * the shared machine falls on every M alike and no M is timed in slices short enough to fit
 * between other processes' turns (which made small M look faster under load); each rate is the
 * median of its rounds. */
#define GEMM_BYTES (64u << 20)
#define GEMM_ROUNDS 64
static int gemm_rounds(fg_backend *be, const float *x, float *y, const uint8_t *data,
                       size_t row_bytes, fg_codec codec, uint32_t copies, int quick, double *r,
                       uint32_t *rounds, fg_err *err)
{
    const uint32_t n = 2048, k = 2048;
    double start = fg_now(), least = quick ? 0.3 : 3.0;
    uint32_t wi = 0;
    int rc = FG_OK;
    *rounds = 0;
    do {
        for (uint32_t i = 0; rc == FG_OK && i < FG_CALIB_NM; i++) {
            uint32_t mm = 1u << i, rows = quick ? 32 : 256, calls = mm < rows ? rows / mm : 1;
            double t0 = fg_now();
            for (uint32_t j = 0; rc == FG_OK && j < calls; j++, wi = (wi + 1) % copies) {
                gemm_ctx g = {be, x, {0}, y, mm,
                              fg_calib_pieces_of(data + (size_t)wi * n * row_bytes, row_bytes,
                                                 codec, n, k)};
                g.w = fg_calib_weight(&g.pc);
                rc = gemm_once(&g, err);
            }
            double dt = fg_now() - t0;
            r[i * GEMM_ROUNDS + *rounds] = dt > 0 ? 2.0 * calls * mm * n * k / dt : 0;
        }
        ++*rounds;
    } while (rc == FG_OK && *rounds < GEMM_ROUNDS && (fg_now() - start < least || *rounds < 3));
    return rc;
}

/* The weights for gemm_rounds into *out: copies of a 2048 x 2048 matrix as f16, or as Q4
 * (int8). */
static int gemm_weights(int int8, const float *w, uint8_t **out, size_t *row_bytes,
                        fg_codec *codec, uint32_t *copies, fg_err *err)
{
    const uint32_t n = 2048, k = 2048;
    uint64_t dims[2] = {n, k};
    size_t len = (size_t)n * k * 2;
    fg_qview v;
    *codec = int8 ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F16);
    int rc = int8 ? fg_codec_qview(codec, 2, dims, n, &v, err) : FG_OK;
    if (rc == FG_OK && int8)
        rc = fg_quant_chunk_bytes(&v, &len, err);
    if (rc)
        return rc;
    if (len % n) /* pieces are row ranges: rows must be whole groups of bytes */
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "calibration: a %s chunk of %u rows is %zu "
                          "bytes", fg_codec_name(codec->id), n, len);
    *row_bytes = len / n;
    *copies = (uint32_t)(GEMM_BYTES / len);
    uint8_t *d = *out = malloc(len * *copies);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (int8)
        rc = fg_quant_encode(codec, &v, w, FG_CODEC_F32, 0, d, len, fg_quant_isa_default(), err);
    else
        fg_f32_to_f16(w, (uint16_t *)d, (size_t)n * k, fg_quant_isa_default());
    for (uint32_t j = 1; rc == FG_OK && j < *copies; j++)
        memcpy(d + j * len, d, len);
    return rc; /* *out is freed by the caller either way */
}

/* path (FG_CALIB_*): which table the rates fill; INT8 runs Q4 weights, the others F16 ones. */
static int measure_gemm(fg_backend *be, int path, int quick, fg_calib *c, meter *m, fg_err *err)
{
    const uint32_t n = 2048, k = 2048, maxm = 256;
    float *w = malloc((size_t)n * k * 4), *x = malloc((size_t)maxm * k * 4);
    float *y = malloc((size_t)maxm * n * 4);
    double *r = malloc((size_t)FG_CALIB_NM * GEMM_ROUNDS * sizeof *r);
    uint8_t *data = NULL;
    size_t row_bytes = 0;
    fg_codec codec;
    uint32_t copies = 0;
    int rc = w && x && y && r ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < (size_t)n * k; i++)
        w[i] = (float)(i % 13) * 0.01f - 0.06f;
    for (size_t i = 0; rc == FG_OK && i < (size_t)maxm * k; i++)
        x[i] = (float)(i % 7) * 0.1f - 0.3f;
    if (rc == FG_OK)
        rc = gemm_weights(path == FG_CALIB_INT8, w, &data, &row_bytes, &codec, &copies, err);
    uint32_t rounds = 0;
    if (rc == FG_OK)
        rc = be->iface->reserve(be, (uint64_t)n / 2 * k, err);
    if (rc == FG_OK)
        rc = gemm_rounds(be, x, y, data, row_bytes, codec, copies, quick, r, &rounds, err);
    for (uint32_t i = 0; rc == FG_OK && i < FG_CALIB_NM; i++) {
        c->m[i] = 1u << i;
        (path == FG_CALIB_INT8   ? c->gflops_i8
         : path == FG_CALIB_BF16 ? c->gflops_bf16
                                 : c->gflops)[i] =
            fg_calib_median(r + i * GEMM_ROUNDS, (int)rounds) / 1e9;
    }
    step(m);
    free(w), free(x), free(y), free(r), free(data);
    return rc;
}

typedef struct attn_ctx {
    fg_backend *be;
    fg_attn_op op;
} attn_ctx;

static int attn_once(void *ctx, fg_err *err)
{
    attn_ctx *a = ctx;
    return a->be->iface->attention(a->be, &a->op, err);
}

static int measure_attn(fg_backend *be, int quick, int q4, double *out, meter *m, fg_err *err)
{
    const uint32_t heads = 32, hd = 64, width = heads * hd, ctx = 2048;
    fg_codec codec = q4 ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F32);
    size_t rb = fg_kv_row_bytes(&codec, width);
    uint8_t *k = calloc(ctx, rb), *v = calloc(ctx, rb), *valid = malloc(ctx);
    float *q = malloc(width * 4), *o = malloc(width * 4), *sc = malloc(16 * 2 * (size_t)ctx * 4);
    float *kt = malloc((size_t)ctx * width * 4), *vt = malloc((size_t)ctx * width * 4);
    float *row = malloc((size_t)width * 4);
    int rc = k && v && valid && q && o && sc && kt && vt && row
                 ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK) {
        memset(valid, 1, ctx);
        for (uint32_t i = 0; i < width; i++)
            q[i] = row[i] = (float)(i % 11) * 0.02f - 0.1f;
    }
    fg_kv_view kv = {k, v, codec, rb, width, ctx};
    for (uint32_t t = 0; rc == FG_OK && t < ctx; t++)
        rc = be->iface->kv_store(be, &kv, t, row, row, 1, err);
    attn_ctx a = {be, {q, kv, valid, 1, ctx - 1, heads, heads, hd, 0, 0, o, sc, 2 * (size_t)ctx,
                       16, kt, vt}};
    double rate = 0, units = (double)ctx * width;
    if (rc == FG_OK)
        rc = median_rate(attn_once, &a, units, quick ? 0.08 : 0.5, &rate, err);
    *out = rate > 0 ? 1.0 / rate : 0;
    step(m);
    free(k), free(v), free(valid), free(q), free(o), free(sc), free(kt), free(vt), free(row);
    return rc;
}

/* ---- how far reading overlaps computing ---- */

typedef struct reader {
    fg_pager *p;
    uint32_t n;
    double bps;
    int rc;
    fg_err err;
} reader;

static void *read_thread(void *arg)
{
    reader *r = arg;
    r->rc = disk_pass(r->p, r->n, 0, &r->bps, &r->err);
    return NULL;
}

/* GEMMs at M = 64 (f32 weight 2048 x 2048) for about `seconds`: the count run. */
static int gemm_loop(fg_backend *be, uint32_t count, double *seconds, fg_err *err)
{
    const uint32_t n = 2048, k = 2048, mm = 64;
    float *w = calloc((size_t)n * k, 4), *x = calloc((size_t)mm * k, 4), *y = malloc((size_t)mm * n * 4);
    int rc = w && x && y ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_weight wt = {w, 0, NULL, NULL, NULL, NULL, NULL};
    double t0 = fg_now();
    for (uint32_t i = 0; rc == FG_OK && i < count; i++)
        rc = be->iface->linear(be, x, &wt, NULL, y, mm, n, k, err);
    *seconds = fg_now() - t0;
    free(w), free(x), free(y);
    return rc;
}

/* The share of the shorter of reading and computing hidden under the longer when both run at
 * once (the disk read by a second thread while the backend computes): 1 = perfect overlap,
 * 0 = they take turns (on a small VM the I/O itself costs CPU). */
static int measure_overlap(fg_pager *p, uint32_t n, fg_backend *be, fg_calib *c, fg_err *err)
{
    int rc = FG_OK;
    for (uint32_t i = 0; rc == FG_OK && i < n; i++)
        rc = fg_pager_evict(p, i, err);
    double t_one = 0, t_c, t_r = (double)n * CHUNK / c->disk_read;
    if (rc == FG_OK)
        rc = gemm_loop(be, 1, &t_one, err);
    uint32_t count = t_one > 0 ? (uint32_t)(t_r / t_one) + 1 : 1;
    if (rc == FG_OK)
        rc = gemm_loop(be, count, &t_c, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; rc == FG_OK && i < n; i++)
        rc = fg_pager_evict(p, i, err);
    reader r = {p, n, 0, FG_OK, {0}};
    pthread_t th;
    double t0 = fg_now(), t_gemm;
    if (pthread_create(&th, NULL, read_thread, &r))
        return fg_err_set(err, FG_ERR_NOMEM, "calibration: cannot start a thread");
    rc = gemm_loop(be, count, &t_gemm, err);
    pthread_join(th, NULL);
    double t_both = fg_now() - t0;
    if (rc == FG_OK && r.rc) {
        *err = r.err;
        rc = r.rc;
    }
    double shorter = t_r < t_c ? t_r : t_c, phi = shorter > 0 ? (t_r + t_c - t_both) / shorter : 0;
    c->overlap = phi < 0 ? 0 : phi > 1 ? 1 : phi;
    return rc;
}

int fg_calib_measure(const char *dir, int threads, int quick, FILE *log, fg_calib *c,
                     fg_err *err)
{
    memset(c, 0, sizeof *c);
    c->version = FG_CALIB_VERSION;
    fg_calib_machine(c->machine, sizeof c->machine);
    c->threads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    c->quick = quick;
    double t0 = fg_now();
    meter m = {log && isatty(fileno(log)) ? log : NULL, 0, 9};
    fg_backend *be = NULL, *be8 = NULL, *be16 = NULL;
    fg_backend_cpu_opts o8 = {threads, FG_COMPUTE_INT8}, o16 = {threads, FG_COMPUTE_BF16};
    int rc = fg_backend_cpu_create(threads, &be, err);
    if (rc == FG_OK)
        rc = fg_backend_cpu_create_opts(&o8, &be8, err);
    if (rc == FG_OK && fg_w16_gemm_bf16_fast())
        rc = fg_backend_cpu_create_opts(&o16, &be16, err);
    if (rc == FG_OK)
        rc = measure_disk(dir && *dir ? dir : "/tmp", quick, be, c, &m, err);
    if (rc == FG_OK)
        rc = measure_decode(quick, c, &m, err);
    if (rc == FG_OK)
        rc = measure_gemm(be, FG_CALIB_F32, quick, c, &m, err);
    if (rc == FG_OK)
        rc = measure_gemm(be8, FG_CALIB_INT8, quick, c, &m, err);
    if (rc == FG_OK && be16) /* else bf16 computes as f32 */
        rc = measure_gemm(be16, FG_CALIB_BF16, quick, c, &m, err);
    else
        memcpy(c->gflops_bf16, c->gflops, sizeof c->gflops);
    fg_backend_free(be8);
    fg_backend_free(be16);
    if (rc == FG_OK)
        rc = measure_attn(be, quick, 0, &c->attn_s, &m, err);
    if (rc == FG_OK)
        rc = measure_attn(be, quick, 1, &c->attn_q4_s, &m, err);
    fg_backend_free(be);
    fg_membw mb;
    if (rc == FG_OK && fg_membw_measure(c->threads, quick ? 64u << 20 : 1u << 30,
                                        quick ? 0.5 : 2.0, &mb))
        rc = fg_err_sys(err, FG_ERR_NOMEM, errno, "calibration: the memory read loop");
    if (rc == FG_OK)
        c->mem_read = mb.median;
    if (m.log)
        fprintf(m.log, "\r%*s\r", 24, ""), fflush(m.log);
    c->seconds = fg_now() - t0;
    return rc;
}

/* Log-linear between the measured row counts. No envelope: the engine calls the backend with
 * exactly m rows, and the kernel depends on m (the fused F16 kernel up to 8 rows, decode +
 * sgemm above), so a rate lower at more rows is the machine's, not noise to smooth away. */
double fg_calib_flops(const fg_calib *c, double m)
{
    return fg_calib_flops_at(c, 0, m);
}

double fg_calib_flops_at(const fg_calib *c, int path, double m)
{
    return fg_calib_interp(c->m, path == FG_CALIB_INT8   ? c->gflops_i8
                                 : path == FG_CALIB_BF16 ? c->gflops_bf16
                                                         : c->gflops,
                           m);
}

double fg_calib_interp(const uint32_t *ms, const double *g, double m)
{
    if (m <= ms[0])
        return g[0] * 1e9;
    for (uint32_t i = 1; i < FG_CALIB_NM; i++)
        if (m <= ms[i]) {
            double t = (log(m) - log(ms[i - 1])) / (log(ms[i]) - log(ms[i - 1]));
            return (g[i - 1] + t * (g[i] - g[i - 1])) * 1e9;
        }
    return g[FG_CALIB_NM - 1] * 1e9;
}

/* ---- the file ---- */

int fg_calib_default_path(char *buf, size_t cap, fg_err *err)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (x && *x)
        n = snprintf(buf, cap, "%s/fg/calibration.json", x);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/fg/calibration.json", home);
    else
        return fg_err_set(err, FG_ERR_NOT_FOUND, "calibration: neither XDG_CACHE_HOME nor HOME "
                          "is set (give --calibration FILE)");
    if (n < 0 || (size_t)n >= cap)
        return fg_err_set(err, FG_ERR_LIMIT, "calibration: the cache path is too long");
    return FG_OK;
}

static int mkdirs(char *dir)
{
    for (char *s = dir + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            int rc = mkdir(dir, 0755);
            *s = '/';
            if (rc && errno != EEXIST)
                return -1;
        }
    return mkdir(dir, 0755) && errno != EEXIST ? -1 : 0;
}

int fg_calib_save(const char *path, const fg_calib *c, fg_err *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdirs(dir))
            return fg_err_sys(err, FG_ERR_IO, errno, "calibration: cannot create %s", dir);
    }
    json_t *ms = json_array(), *gf = json_array(), *g8 = json_array(), *gb = json_array();
    for (uint32_t i = 0; i < FG_CALIB_NM; i++) {
        json_array_append_new(ms, json_integer(c->m[i]));
        json_array_append_new(gf, json_real(c->gflops[i]));
        json_array_append_new(g8, json_real(c->gflops_i8[i]));
        json_array_append_new(gb, json_real(c->gflops_bf16[i]));
    }
    json_t *o = json_pack("{s:i, s:s, s:i, s:b, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:o, s:f, s:f, "
                          "s:f, s:f}",
                          "version", c->version, "machine", c->machine, "threads", c->threads,
                          "quick", c->quick, "disk_read_bps", c->disk_read, "disk_write_bps",
                          c->disk_write, "decode_f16_per_s", c->dec_f16, "decode_q4_per_s",
                          c->dec_q4, "gemm_rows", ms, "gemm_gflops", gf, "gemm_int8_q4_gflops",
                          g8, "gemm_bf16_gflops", gb, "attn_s", c->attn_s, "attn_q4_s",
                          c->attn_q4_s, "overlap", c->overlap, "seconds", c->seconds);
    if (o && c->mem_read > 0)
        json_object_set_new(o, "mem_read_bps", json_real(c->mem_read));
    return fg_calib_write_json(path, o, "calibration", err);
}

int fg_calib_write_json(const char *path, json_t *o, const char *what, fg_err *err)
{
    char tmp[4200];
    if (!o)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", what);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int rc = json_dump_file(o, tmp, JSON_INDENT(2));
    json_decref(o);
    if (rc || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return fg_err_sys(err, FG_ERR_IO, e, "%s: cannot write %s", what, path);
    }
    return FG_OK;
}

static int num(json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return isfinite(*out) && *out > 0 ? 0 : -1;
}

static int parse(const char *path, json_t *o, fg_calib *c, fg_err *err)
{
    json_t *ms = json_object_get(o, "gemm_rows"), *gf = json_object_get(o, "gemm_gflops");
    json_t *g8 = json_object_get(o, "gemm_int8_q4_gflops");
    json_t *gb = json_object_get(o, "gemm_bf16_gflops");
    json_t *mach = json_object_get(o, "machine"), *th = json_object_get(o, "threads");
    if (!json_is_string(mach) || !json_is_integer(th) || !json_is_array(ms) ||
        !json_is_array(gf) || !json_is_array(g8) || !json_is_array(gb) ||
        json_array_size(ms) != FG_CALIB_NM || json_array_size(gf) != FG_CALIB_NM ||
        json_array_size(g8) != FG_CALIB_NM || json_array_size(gb) != FG_CALIB_NM ||
        num(o, "disk_read_bps", &c->disk_read) ||
        num(o, "disk_write_bps", &c->disk_write) || num(o, "decode_f16_per_s", &c->dec_f16) ||
        num(o, "decode_q4_per_s", &c->dec_q4) || num(o, "attn_s", &c->attn_s) ||
        num(o, "attn_q4_s", &c->attn_q4_s))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: a calibration file needs machine, threads, "
                          "positive disk_*_bps, decode_*_per_s, attn_s, attn_q4_s and %d "
                          "gemm_rows/gemm_gflops/gemm_int8_q4_gflops/gemm_bf16_gflops", path,
                          FG_CALIB_NM);
    snprintf(c->machine, sizeof c->machine, "%s", json_string_value(mach));
    c->threads = (int)json_integer_value(th);
    c->quick = json_is_true(json_object_get(o, "quick"));
    json_t *ov = json_object_get(o, "overlap");
    c->overlap = json_is_number(ov) ? json_number_value(ov) : -1;
    if (!(c->overlap >= 0 && c->overlap <= 1))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: overlap must be a number in [0, 1]", path);
    num(o, "seconds", &c->seconds);
    json_t *mr = json_object_get(o, "mem_read_bps");
    if (mr && num(o, "mem_read_bps", &c->mem_read))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: mem_read_bps must be a positive number",
                          path);
    for (uint32_t i = 0; i < FG_CALIB_NM; i++) {
        json_t *mi = json_array_get(ms, i), *gi = json_array_get(gf, i);
        json_t *hi = json_array_get(g8, i), *bi = json_array_get(gb, i);
        double g = json_is_number(gi) ? json_number_value(gi) : -1;
        double h = json_is_number(hi) ? json_number_value(hi) : -1;
        double b = json_is_number(bi) ? json_number_value(bi) : -1;
        if (!json_is_integer(mi) || json_integer_value(mi) < 1 || json_integer_value(mi) > 65536 ||
            (i && json_integer_value(mi) <= (json_int_t)c->m[i - 1]) || !(g > 0 && isfinite(g)) ||
            !(h > 0 && isfinite(h)) || !(b > 0 && isfinite(b)))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: gemm_rows must increase from 1 and "
                              "gemm_gflops, gemm_int8_q4_gflops and gemm_bf16_gflops be "
                              "positive (entry %u)", path, i);
        c->m[i] = (uint32_t)json_integer_value(mi);
        c->gflops[i] = g;
        c->gflops_i8[i] = h;
        c->gflops_bf16[i] = b;
    }
    return FG_OK;
}

int fg_calib_parse(const char *data, size_t len, const char *path, fg_calib *c, fg_err *err)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *o = json_loadb(data, len, 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: not a calibration file (%s, line %d)", path,
                          o ? "not a JSON object" : je.text, o ? 1 : je.line);
    }
    json_t *ver = json_object_get(o, "version");
    char here[192];
    fg_calib_machine(here, sizeof here);
    int rc;
    if (!json_is_integer(ver) || json_integer_value(ver) != FG_CALIB_VERSION)
        rc = fg_err_set(err, FG_ERR_STATE, "%s: calibration version %lld, this fg writes %d "
                        "(run fg-infer calibrate)", path,
                        json_is_integer(ver) ? (long long)json_integer_value(ver) : -1LL,
                        FG_CALIB_VERSION);
    else if ((rc = parse(path, o, c, err)) == FG_OK && strcmp(c->machine, here))
        rc = fg_err_set(err, FG_ERR_STATE, "%s: calibrated on another machine (%s; this one is "
                        "%s): run fg-infer calibrate", path, c->machine, here);
    c->version = FG_CALIB_VERSION;
    json_decref(o);
    return rc;
}

int fg_calib_load(const char *path, fg_calib *c, fg_err *err)
{
    memset(c, 0, sizeof *c);
    fg_err e;
    FILE *f; /* a directory or a FIFO is named, not read */
    if (fg_fopen_regular(path, &f, &e))
        return fg_err_set(err, e.code, "calibration file %s", e.msg);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    int bad = ferror(f) ? errno : 0, big = !feof(f);
    fclose(f);
    if (bad)
        return fg_err_sys(err, FG_ERR_IO, bad, "calibration file %s", path);
    if (big)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: over 64 KiB: not a calibration file", path);
    return fg_calib_parse(buf, n, path, c, err);
}
