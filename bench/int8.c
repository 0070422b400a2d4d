/* bench/int8.c - quant/'s int8 GEMM (Q4 and Q8 weights, int8 activations) against OpenBLAS
 * sgemm on f32 weights of the same shapes, and batch-1 weight streaming against the memory's
 * read bandwidth, all measured in one run.
 *
 * Usage: bench_int8 [--reps N] [--group G] [--block B] [--stream-mb N] [--quick] [--shape S]
 *        [--no-gemm]
 * (--quick: the first shape only; --shape 1..3: that shape only; --no-gemm: batch 1 only)
 * Shapes are opt-1.3b's Linear layers: k = 2048 -> n = 2048 (attention projections),
 * 2048 -> 8192 (fc1), 8192 -> 2048 (fc2), at m = 1, 8, 32, 64, 128 rows. For each, GFLOP/s
 * (2 m n k per call, activation quantization included in the int8 time) of: q4 and q8 on one
 * thread and on two (output rows split in halves, as the engine splits columns), sgemm on one
 * and two OpenBLAS threads. Weights: groups of G (64) along k, F16 min/scale; activation scale per
 * row (--block 0) or per block of B columns. Cached figures: the same weights every call (they
 * fit the 32 MiB L3 for the small shapes).
 * Then batch 1 from memory: enough copies of each weight (--stream-mb, default 256 MiB per
 * format) are cycled that every call reads its weights from DRAM; printed as weight GB/s next to
 * a plain AVX2 read loop (four sequential streams per thread) over the same copies, timed in
 * alternation with the kernel, on 1 and 2 threads, the ratio, and the 2-thread time per call. F16
 * weights go through fg_f16_gemm (F16C + FMA, fused) and, for comparison, through conversion to
 * f32 then sgemv. Each figure is the best of at least --reps timed calls and 0.3 s (after a
 * warm-up): on a shared machine the best call is the one that ran alone. One-thread figures are
 * timed with the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: waiting for a core taken by another
 * process is not counted), two-thread figures with the wall clock, so on a busy machine the
 * two-thread ones are the noisier. Compare within one run.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fg_membw.h"
#include "quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The clock a figure is timed with: this thread's CPU time for one-thread figures (a call that
 * lost the core to another process is not charged for the wait), wall time for two threads. */
static int g_cpu_clock;
static double tick(void)
{
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noreturn)) static void die(const char *what, const fg_err *err)
{
    fprintf(stderr, "bench_int8: %s: %s\n", what, err ? err->msg : "out of memory");
    exit(1);
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        die("alloc", NULL);
    return p;
}

static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
    return (float)((double)(g_s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* ---- a second thread that runs one job per call (the engine's column split) ---- */
typedef struct worker {
    pthread_t th;
    pthread_barrier_t start, done;
    void (*fn)(void *);
    void *arg;
    int quit;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    for (;;) {
        pthread_barrier_wait(&w->start);
        if (w->quit)
            return NULL;
        w->fn(w->arg);
        pthread_barrier_wait(&w->done);
    }
}

static worker g_w;

/* Run a(aa) here and b(bb) on the worker, return when both are done. */
static void run2(void (*a)(void *), void *aa, void (*b)(void *), void *bb)
{
    g_w.fn = b, g_w.arg = bb;
    pthread_barrier_wait(&g_w.start);
    a(aa);
    pthread_barrier_wait(&g_w.done);
}

/* ---- int8 GEMM calls ---- */
typedef struct qjob {
    fg_codec c;
    fg_qview v;
    const uint8_t *w;
    size_t wlen;
    uint64_t n0, n1, n;
    fg_quant_act *a;
    float *y;
} qjob;

static void qjob_run(void *p)
{
    qjob *j = p;
    fg_err err;
    if (fg_quant_gemm(&j->c, &j->v, j->w, j->wlen, j->n0, j->n1, j->a, j->y, j->n,
                      FG_QUANT_ISA_AUTO, &err))
        die("gemm", &err);
}

typedef struct qcall {
    qjob half[2];
    const float *x;
    int threads;
} qcall;

static void qcall_run(qcall *q)
{
    fg_err err;
    if (fg_quant_act_q8(q->half[0].a, q->x, 0, FG_QUANT_ISA_AUTO, &err))
        die("act", &err);
    if (q->threads == 1) {
        qjob j = q->half[0];
        j.n0 = 0, j.n1 = j.n;
        qjob_run(&j);
    } else {
        run2(qjob_run, &q->half[0], qjob_run, &q->half[1]);
    }
}

/* ---- timing ---- */
typedef void (*call_fn)(void *ctx, int rep);

static double best_time(call_fn f, void *ctx, int reps)
{
    double best = 1e30, t_all = now();
    f(ctx, 0); /* warm-up */
    for (int r = 1; r <= reps || now() - t_all < 0.3; r++) {
        double t = tick();
        f(ctx, r);
        t = tick() - t;
        best = t < best ? t : best;
        if (r > 1000)
            break;
    }
    return best;
}

typedef struct gctx {
    qcall q;
    const float *x, *wf;
    float *y;
    uint64_t m, n, k;
} gctx;

static void call_int8(void *p, int rep)
{
    (void)rep;
    qcall_run(&((gctx *)p)->q);
}

static void call_sgemm(void *p, int rep)
{
    (void)rep;
    gctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->m, (int)g->n, (int)g->k, 1.0f,
                g->x, (int)g->k, g->wf, (int)g->k, 0.0f, g->y, (int)g->n);
}

/* Quantize w [n, k] with groups along k into a new chunk buffer. */
static uint8_t *make_chunk(unsigned bits, uint32_t G, const float *w, uint64_t n, uint64_t k,
                           fg_codec *c, fg_qview *v, size_t *len)
{
    fg_err err;
    *c = fg_codec_quant(bits, G, 1);
    uint64_t dims[2] = {n, k};
    if (fg_codec_qview(c, 2, dims, n, v, &err) || fg_quant_chunk_bytes(v, len, &err))
        die("view", &err);
    uint8_t *q = xalloc(*len);
    if (fg_quant_encode(c, v, w, FG_CODEC_F32, 0, q, *len, FG_QUANT_ISA_AUTO, &err))
        die("encode", &err);
    return q;
}

static void setup_qcall(qcall *q, const fg_codec *c, const fg_qview *v, const uint8_t *w,
                        size_t wlen, fg_quant_act *a, const float *x, float *y, uint64_t n,
                        int threads)
{
    q->x = x;
    q->threads = threads;
    for (int h = 0; h < 2; h++)
        q->half[h] = (qjob){.c = *c, .v = *v, .w = w, .wlen = wlen, .n0 = h ? n / 2 : 0,
                            .n1 = h ? n : n / 2, .n = n, .a = a, .y = y};
}

typedef struct opts {
    int reps, quick, shape, no_gemm; /* shape: 0 all, 1..3 one of them */
    uint32_t G, block;
    uint64_t stream_mb;
} opts;

static void *act_new(const fg_codec *c, uint64_t m, uint64_t k, uint32_t block, fg_quant_act *a)
{
    fg_err err;
    size_t len;
    if (fg_quant_act_size(c, m, k, block, &len, &err))
        die("act size", &err);
    void *buf = xalloc(len);
    if (fg_quant_act_init(a, c, m, k, block, buf, len, &err))
        die("act init", &err);
    return buf;
}

static void bench_shape(const opts *o, uint64_t k, uint64_t n)
{
    static const uint64_t ms[] = {1, 8, 32, 64, 128};
    float *wf = xalloc(n * k * 4), *x = xalloc(128 * k * 4), *y = xalloc(128 * n * 4);
    for (uint64_t i = 0; i < n * k; i++)
        wf[i] = 0.02f * frand();
    for (uint64_t i = 0; i < 128 * k; i++)
        x[i] = frand();
    fg_codec c4, c8;
    fg_qview v4, v8;
    size_t l4, l8;
    uint8_t *q4 = make_chunk(4, o->G, wf, n, k, &c4, &v4, &l4);
    uint8_t *q8 = make_chunk(8, o->G, wf, n, k, &c8, &v8, &l8);
    for (int mi = 0; mi < 5; mi++) {
        uint64_t m = ms[mi];
        fg_quant_act a4, a8;
        void *b4 = act_new(&c4, m, k, o->block, &a4), *b8 = act_new(&c8, m, k, o->block, &a8);
        double flop = 2.0 * m * n * k, g[6];
        gctx ctx = {.x = x, .wf = wf, .y = y, .m = m, .n = n, .k = k};
        for (int t = 1; t <= 2; t++) {
            g_cpu_clock = t == 1;
            setup_qcall(&ctx.q, &c4, &v4, q4, l4, &a4, x, y, n, t);
            g[t == 1 ? 0 : 3] = flop / best_time(call_int8, &ctx, o->reps) / 1e9;
            setup_qcall(&ctx.q, &c8, &v8, q8, l8, &a8, x, y, n, t);
            g[t == 1 ? 1 : 4] = flop / best_time(call_int8, &ctx, o->reps) / 1e9;
            openblas_set_num_threads(t);
            g[t == 1 ? 2 : 5] = flop / best_time(call_sgemm, &ctx, o->reps) / 1e9;
        }
        printf("%5llu %5llu %4llu | %6.1f %6.1f %6.1f  %4.2f %4.2f | %6.1f %6.1f %6.1f  %4.2f "
               "%4.2f\n",
               (unsigned long long)k, (unsigned long long)n, (unsigned long long)m, g[0], g[1],
               g[2], g[0] / g[2], g[1] / g[2], g[3], g[4], g[5], g[3] / g[5], g[4] / g[5]);
        fflush(stdout);
        free(b4), free(b8);
    }
    free(wf), free(x), free(y), free(q4), free(q8);
}

/* ---- batch 1 from memory ---- */

static _Atomic uint64_t g_sink; /* keeps the read loop's loads alive */

typedef struct rd {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
} rd;

/* r->p[0 .. n) read as four sequential streams at once (quarters), as a kernel reading
 * four weight rows at a time does: more requests in flight than one stream (core/fg_membw.h,
 * the loop the calibration measures). */
static void read_loop(void *arg)
{
    rd *r = arg;
    r->sink += fg_membw_read(r->p, r->n);
    g_sink += r->sink;
}

/* A set of copies of one weight, cycled so every call misses the caches. */
typedef struct stream {
    int copies, threads;
    size_t bytes; /* per copy */
    uint8_t **w;
    /* int8 */
    fg_codec c;
    fg_qview v;
    fg_quant_act *a;
    /* f16 */
    float *conv; /* f32 conversion buffer for the convert + sgemv path */
    const float *x;
    float *y;
    uint64_t n, k;
    int f16_mode; /* 0: int8 chunk, 1: fused f16, 2: convert + sgemv */
} stream;

typedef struct f16job {
    const uint16_t *w;
    uint64_t n0, n1, k;
    const float *x;
    float *y;
} f16job;

static void f16job_run(void *p)
{
    f16job *j = p;
    fg_err err;
    if (fg_f16_gemm(j->w + j->n0 * j->k, j->n1 - j->n0, j->k, j->k, j->x, 1, j->k,
                    j->y + j->n0, j->n1 - j->n0, FG_QUANT_ISA_AUTO, &err))
        die("f16 gemv", &err);
}

static void f16conv_run(void *p)
{
    f16job *j = p;
    /* convert the rows into a buffer that stays in cache (one row block at a time), then sgemv */
    float buf[64 * 2048];
    uint64_t rows = sizeof buf / 4 / j->k;
    rows = rows ? rows : 1;
    for (uint64_t r = j->n0; r < j->n1; r += rows) {
        uint64_t nr = j->n1 - r < rows ? j->n1 - r : rows;
        fg_f16_to_f32(j->w + r * j->k, buf, nr * j->k, FG_QUANT_ISA_AUTO);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nr, (int)j->k, 1.0f, buf, (int)j->k, j->x,
                    1, 0.0f, j->y + r, 1);
    }
}

static void call_stream(void *p, int rep)
{
    stream *s = p;
    const uint8_t *w = s->w[rep % s->copies];
    if (s->f16_mode) {
        void (*fn)(void *) = s->f16_mode == 1 ? f16job_run : f16conv_run;
        f16job a = {(const uint16_t *)w, 0, s->threads == 1 ? s->n : s->n / 2, s->k, s->x, s->y};
        f16job b = {(const uint16_t *)w, s->n / 2, s->n, s->k, s->x, s->y};
        if (s->threads == 1)
            fn(&a);
        else
            run2(fn, &a, fn, &b);
        return;
    }
    qcall q;
    setup_qcall(&q, &s->c, &s->v, w, s->bytes, s->a, s->x, s->y, s->n, s->threads);
    qcall_run(&q);
}

/* Read one copy with the plain read loop (the baseline), on s->threads threads. */
static void read_copy(const stream *s, const uint8_t *w)
{
    rd a = {w, s->threads == 1 ? s->bytes : s->bytes / 2, 0};
    rd b = {w + s->bytes / 2, s->bytes - s->bytes / 2, 0};
    if (s->threads == 1)
        read_loop(&a);
    else
        run2(read_loop, &a, read_loop, &b);
}

/* Best weight GB/s of the kernel and of the read loop over the same copies, the two timed in
 * alternation (each call on a copy the previous call did not touch) so both see the same load. */
static void stream_bw(stream *s, int reps, double *kern, double *read)
{
    double bk = 1e30, br = 1e30, t_all = now();
    int n = reps > s->copies ? reps : s->copies;
    for (int r = 0; r < 2 * n || now() - t_all < 0.5; r++) {
        double t = tick();
        if (r % 2)
            read_copy(s, s->w[r % s->copies]);
        else
            call_stream(s, r);
        t = tick() - t;
        if (r >= 2 && r % 2)
            br = t < br ? t : br;
        else if (r >= 2)
            bk = t < bk ? t : bk;
        if (r > 20000)
            break;
    }
    *kern = s->bytes / bk / 1e9;
    *read = s->bytes / br / 1e9;
}

static void bench_stream(const opts *o, uint64_t k, uint64_t n)
{
    size_t total = (size_t)o->stream_mb << 20;
    if (total < ((size_t)64 << 20))
        total = (size_t)64 << 20; /* at least twice the L3 */
    float *wf = xalloc(n * k * 4), *x = xalloc(k * 4), *y = xalloc(n * 4);
    for (uint64_t i = 0; i < n * k; i++)
        wf[i] = 0.02f * frand();
    for (uint64_t i = 0; i < k; i++)
        x[i] = frand();
    printf("batch 1, k %llu n %llu, weights from DRAM (%llu MiB of copies cycled); weight GB/s of "
           "the kernel and of a plain read loop over the same bytes\n", (unsigned long long)k,
           (unsigned long long)n, (unsigned long long)o->stream_mb);
    printf("  %-26s %7s %7s %6s | %7s %7s %6s | %8s\n", "weights", "kern 1t", "read 1t", "ratio",
           "kern 2t", "read 2t", "ratio", "us/call");
    static const char *names[] = {"q4 int8 (fg_quant_gemm)", "q8 int8 (fg_quant_gemm)",
                                  "f16 fused (fg_f16_gemm)", "f16 -> f32 + sgemv"};
    for (int kind = 0; kind < 4; kind++) {
        stream s = {.threads = 1, .x = x, .y = y, .n = n, .k = k};
        fg_quant_act a;
        void *abuf = NULL;
        if (kind < 2) {
            uint8_t *q = make_chunk(kind ? 8 : 4, o->G, wf, n, k, &s.c, &s.v, &s.bytes);
            abuf = act_new(&s.c, 1, k, o->block, &a);
            s.a = &a;
            s.copies = (int)(total / s.bytes) + 1;
            s.w = malloc(s.copies * sizeof *s.w);
            for (int i = 0; i < s.copies; i++) {
                s.w[i] = xalloc(s.bytes);
                memcpy(s.w[i], q, s.bytes);
            }
            free(q);
        } else {
            s.f16_mode = kind - 1;
            s.bytes = n * k * 2;
            s.copies = (int)(total / s.bytes) + 1;
            s.w = malloc(s.copies * sizeof *s.w);
            for (int i = 0; i < s.copies; i++) {
                s.w[i] = xalloc(s.bytes);
                fg_f32_to_f16(wf, (uint16_t *)s.w[i], n * k, FG_QUANT_ISA_AUTO);
            }
        }
        double g[2], bw[2];
        openblas_set_num_threads(1);
        for (int t = 1; t <= 2; t++) {
            s.threads = t;
            g_cpu_clock = t == 1;
            stream_bw(&s, o->reps, &g[t - 1], &bw[t - 1]);
        }
        printf("  %-26s %7.1f %7.1f %6.2f | %7.1f %7.1f %6.2f | %8.0f\n", names[kind], g[0], bw[0],
               g[0] / bw[0], g[1], bw[1], g[1] / bw[1], s.bytes / g[1] / 1e3);
        fflush(stdout);
        for (int i = 0; i < s.copies; i++)
            free(s.w[i]);
        free(s.w), free(abuf);
    }
    free(wf), free(x), free(y);
}

int main(int argc, char **argv)
{
    opts o = {.reps = 5, .G = 64, .block = 0, .stream_mb = 256};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            o.G = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block") && i + 1 < argc)
            o.block = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stream-mb") && i + 1 < argc)
            o.stream_mb = (uint64_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            o.quick = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            o.shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-gemm"))
            o.no_gemm = 1;
        else {
            fprintf(stderr, "usage: bench_int8 [--reps N] [--group G] [--block B] "
                            "[--stream-mb N] [--quick] [--shape 1|2|3] [--no-gemm]\n");
            return 2;
        }
    }
    pthread_barrier_init(&g_w.start, NULL, 2);
    pthread_barrier_init(&g_w.done, NULL, 2);
    pthread_create(&g_w.th, NULL, worker_main, &g_w);
    printf("int8 GEMM, ISA %s, groups of %u along k (F16 min/scale), activation scale per %s; "
           "GFLOP/s\n", fg_quant_isa_name(fg_quant_isa_default()), o.G,
           o.block ? "block" : "row");
    printf("%5s %5s %4s | %6s %6s %6s  %4s %4s | %6s %6s %6s  %4s %4s\n", "k", "n", "m", "q4 1t",
           "q8 1t", "sg 1t", "q4/s", "q8/s", "q4 2t", "q8 2t", "sg 2t", "q4/s", "q8/s");
    static const uint64_t shapes[3][2] = {{2048, 2048}, {2048, 8192}, {8192, 2048}};
    for (int s = 0; s < (o.quick ? 1 : 3); s++)
        if (!o.no_gemm && (!o.shape || o.shape == s + 1))
            bench_shape(&o, shapes[s][0], shapes[s][1]);
    for (int s = 0; s < (o.quick ? 1 : 3); s++)
        if (!o.shape || o.shape == s + 1)
            bench_stream(&o, shapes[s][0], shapes[s][1]);
    g_w.quit = 1;
    pthread_barrier_wait(&g_w.start);
    pthread_join(g_w.th, NULL);
    return 0;
}
