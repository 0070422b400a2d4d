/* test_backend_cuda.c - the CUDA backend on a GPU (compute/backend_cuda.cu), beyond what
 * test_ops checks of every backend against the reference (its F32 path):
 *  - FG_COMPUTE_F16: F16/BF16 pieces multiplied as stored and Q4/Q8 dequantized to F16 on the
 *    device, within the bound 16-bit activations allow, against the f32 reference;
 *  - a Linear over device-resident pieces multiplies each run of them together (one GEMM over
 *    adjacent pieces, one batched GEMM over pieces apart, one GEMM over a run decoded into one
 *    buffer), with host pieces streamed between runs: the bits of the piece-by-piece path, the
 *    reference within its bound, and the cuBLAS calls counted (under the emulated cuBLAS, which
 *    counts them: fgemu_cublas_calls);
 *  - operands resident in device memory give the same bits as host operands (staged per op),
 *    and weight pieces in pinned memory (uploaded while the previous piece multiplies);
 *  - the 4-bit KV store encodes on the device the same bytes as the CPU;
 *  - the device object: pinned and device memory, copies with events, retain;
 *  - a gather by ids in device memory, an id outside the table reported;
 *  - --cpu-cache-compute's delegation gives the CPU's bits;
 *  - decode attention (the split kernels) over a cache in device memory, read in place, gives
 *    the bits of the same cache staged from the host, every codec (and runs under
 *    gpu-check.sh's memcheck).
 * Exits 77 (skip) where the build has no CUDA or no GPU is visible.
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "quant.h"
#include "testutil.h"

static fg_backend *cuda(fg_compute c, int cpu_attention)
{
    fg_backend_cuda_opts o = {0, 2, c, cpu_attention};
    fg_backend *be;
    fg_err err;
    ck_assert_msg(fg_backend_cuda_create(&o, &be, &err) == FG_OK, "%s", err.msg);
    return be;
}

/* ---- pieces of one encoded weight, in host, pinned or device memory ---- */

typedef struct pieces {
    fg_codec codec;
    uint64_t dims[2], rows[9];
    void *data[8];
    size_t len[8];
    uint32_t n;
    int held;
} pieces;

static int p_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)err;
    pieces *s = ctx;
    s->held++;
    *p = (fg_wpiece){s->data[i], s->len[i], s->codec, 2, {s->dims[0], s->dims[1]}, s->rows[i],
                     s->rows[i + 1] - s->rows[i], NULL};
    return FG_OK;
}

static int p_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)p, (void)err;
    ((pieces *)ctx)->held--;
    return FG_OK;
}

/* w [n, k] in codec, 4 pieces, placed in buffers of type t of be's device. */
static void make(pieces *s, fg_backend *be, fg_buft t, const float *w, uint32_t n, uint32_t k,
                 fg_codec codec)
{
    memset(s, 0, sizeof *s);
    s->codec = codec;
    s->dims[0] = n;
    s->dims[1] = k;
    s->n = 4;
    uint64_t q = fg_codec_row_quantum(&codec, 2);
    fg_err err;
    for (uint32_t i = 0; i <= s->n; i++)
        s->rows[i] = i == s->n ? n : (uint64_t)i * n / s->n / q * q;
    for (uint32_t i = 0; i < s->n; i++) {
        uint64_t rows = s->rows[i + 1] - s->rows[i], cnt = rows * k;
        const float *src = w + s->rows[i] * k;
        void *host;
        if (codec.id == FG_CODEC_F16 || codec.id == FG_CODEC_BF16) {
            uint16_t *h = malloc(cnt * 2);
            for (uint64_t j = 0; j < cnt; j++) {
                uint32_t bits;
                memcpy(&bits, &src[j], 4);
                h[j] = codec.id == FG_CODEC_F16 ? fg_f32_to_f16_1(src[j]) : (uint16_t)(bits >> 16);
            }
            host = h;
            s->len[i] = cnt * 2;
        } else {
            fg_qview v;
            ck_assert_int_eq(fg_codec_qview(&codec, 2, s->dims, rows, &v, &err), FG_OK);
            ck_assert_int_eq(fg_quant_chunk_bytes(&v, &s->len[i], &err), FG_OK);
            host = malloc(s->len[i]);
            ck_assert_int_eq(fg_quant_encode(&codec, &v, src, FG_CODEC_F32, 0, host, s->len[i],
                                             FG_QUANT_ISA_REF, &err), FG_OK);
        }
        fg_device *d = be->dev;
        ck_assert_int_eq(d->iface->alloc(d, t, s->len[i], &s->data[i], &err), FG_OK);
        ck_assert_int_eq(d->iface->copy(d, s->data[i], t, host, FG_BUFT_HOST, s->len[i], NULL,
                                        &err), FG_OK);
        free(host);
    }
}

static void unmake(pieces *s, fg_backend *be, fg_buft t)
{
    for (uint32_t i = 0; i < s->n; i++)
        be->dev->iface->free(be->dev, t, s->data[i]);
}

START_TEST(f16_compute_within_bound)
{
    enum { M = 9, N = 256, K = 192 };
    fg_backend *be = cuda(FG_COMPUTE_F16, 0), *ref;
    fg_err err;
    ck_assert_int_eq(fg_backend_ref_create(&ref, &err), FG_OK);
    float *w = malloc(N * K * 4), *x = malloc(M * K * 4), bias[N];
    float *y = malloc(M * N * 4), *yr = malloc(M * N * 4), *y2 = malloc(M * N * 4);
    tu_randf(w, N * K, 1, 0.5f);
    tu_randf(x, M * K, 2, 1.0f);
    tu_randf(bias, N, 3, 1.0f);
    fg_codec codecs[4] = {fg_codec_float(FG_CODEC_F16), fg_codec_float(FG_CODEC_BF16),
                          fg_codec_quant(4, 64, 0), fg_codec_quant(8, 64, 1)};
    fg_buft where[3] = {FG_BUFT_HOST, FG_BUFT_PINNED, FG_BUFT_DEVICE};
    for (int c = 0; c < 4; c++) {
        pieces s;
        make(&s, be, FG_BUFT_HOST, w, N, K, codecs[c]);
        fg_weight wt = {NULL, s.n, s.rows, p_acquire, p_release, NULL, &s};
        ck_assert_int_eq(ref->iface->reserve(ref, N * K, &err), FG_OK);
        ck_assert_int_eq(ref->iface->linear(ref, x, &wt, bias, yr, M, N, K, &err), FG_OK);
        ck_assert_int_eq(be->iface->reserve(be, N * K, &err), FG_OK);
        ck_assert_msg(be->iface->linear(be, x, &wt, bias, y, M, N, K, &err) == FG_OK, "%s",
                      err.msg);
        double e = tu_nmse(y, yr, M * N);
        printf("f16 compute, codec %d: nmse %.3g\n", c, e);
        ck_assert_msg(e < 1e-5, "codec %d: nmse %g", c, e); /* 16-bit activations: ~1e-7 */
        unmake(&s, be, FG_BUFT_HOST);
        /* the same pieces from pinned and from device memory: the same bits */
        for (int t = 1; t < 3; t++) {
            make(&s, be, where[t], w, N, K, codecs[c]);
            ck_assert_int_eq(be->iface->linear(be, x, &wt, bias, y2, M, N, K, &err), FG_OK);
            ck_assert_msg(!memcmp(y, y2, M * N * 4), "codec %d from buffer type %d", c, t);
            ck_assert_int_eq(s.held, 0);
            unmake(&s, be, where[t]);
        }
    }
    free(w), free(x), free(y), free(yr), free(y2);
    fg_backend_free(ref);
    fg_backend_free(be);
}
END_TEST

START_TEST(device_operands_and_the_device_object)
{
    enum { R = 7, W = 96 };
    fg_backend *be = cuda(FG_COMPUTE_F32, 0);
    fg_device *d = be->dev;
    fg_err err;
    float x[R * W], g[W], y1[R * W], y2[R * W];
    tu_randf(x, R * W, 5, 2.0f);
    tu_randf(g, W, 6, 1.0f);
    ck_assert_int_eq(be->iface->rmsnorm(be, x, g, y1, R, W, 1e-6f, &err), FG_OK);
    void *dx, *dg, *p;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, sizeof x, &dx, &err), FG_OK);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, sizeof g, &dg, &err), FG_OK);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_PINNED, sizeof x, &p, &err), FG_OK);
    memcpy(p, x, sizeof x);
    fg_event *ev;
    ck_assert_int_eq(d->iface->copy(d, dx, FG_BUFT_DEVICE, p, FG_BUFT_PINNED, sizeof x, &ev, &err),
                     FG_OK);
    ck_assert_int_eq(d->iface->event_wait(d, ev, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dg, FG_BUFT_DEVICE, g, FG_BUFT_HOST, sizeof g, NULL, &err),
                     FG_OK);
    ck_assert_int_eq(be->iface->rmsnorm(be, dx, dg, dx, R, W, 1e-6f, &err), FG_OK); /* in place */
    ck_assert_int_eq(d->iface->copy(d, y2, FG_BUFT_HOST, dx, FG_BUFT_DEVICE, sizeof y2, NULL,
                                    &err), FG_OK);
    ck_assert(!memcmp(y1, y2, sizeof y1));
    fg_device *d2 = d->iface->retain(d);
    ck_assert_ptr_nonnull(d2);
    ck_assert_int_eq(d2->iface->sync(d2, &err), FG_OK);
    fg_device_free(d2);
    d->iface->free(d, FG_BUFT_DEVICE, dx);
    d->iface->free(d, FG_BUFT_DEVICE, dg);
    d->iface->free(d, FG_BUFT_PINNED, p);
    fg_backend_free(be);
}
END_TEST

/* A gather by ids in device memory (the engine's SMALL rows) gives the rows host ids give, from
 * pieces on the host and an f32 table on the device; an id outside the table, which the host
 * never reads, is reported by the kernel. */
START_TEST(gather_by_device_ids)
{
    enum { N = 64, K = 40, M = 5 };
    fg_backend *be = cuda(FG_COMPUTE_F32, 0);
    fg_device *d = be->dev;
    fg_err err;
    float *w = malloc(N * K * 4), o1[M * K], o2[M * K];
    tu_randf(w, N * K, 11, 1.0f);
    pieces s;
    make(&s, be, FG_BUFT_HOST, w, N, K, fg_codec_float(FG_CODEC_F16));
    fg_weight wt = {NULL, s.n, s.rows, p_acquire, p_release, NULL, &s};
    int32_t ids[M] = {3, 63, 0, 17, 40}, bad[M] = {3, 64, 0, 17, 40};
    void *dids, *dw;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, sizeof ids, &dids, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dids, FG_BUFT_DEVICE, ids, FG_BUFT_HOST, sizeof ids, NULL,
                                    &err), FG_OK);
    ck_assert_int_eq(be->iface->gather(be, &wt, N, ids, M, o1, K, &err), FG_OK);
    ck_assert_int_eq(be->iface->gather(be, &wt, N, dids, M, o2, K, &err), FG_OK);
    ck_assert(!memcmp(o1, o2, sizeof o1));
    ck_assert_int_eq(d->iface->copy(d, dids, FG_BUFT_DEVICE, bad, FG_BUFT_HOST, sizeof bad, NULL,
                                    &err), FG_OK);
    ck_assert_int_eq(be->iface->gather(be, &wt, N, dids, M, o2, K, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "token id 64 outside the vocabulary of 64"), "%s", err.msg);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, N * K * 4, &dw, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dw, FG_BUFT_DEVICE, w, FG_BUFT_HOST, N * K * 4, NULL, &err),
                     FG_OK);
    fg_weight tw = {dw, 0, NULL, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(be->iface->gather(be, &tw, N, dids, M, o2, K, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(be->iface->gather(be, &tw, N, ids, M, o2, K, &err), FG_OK);
    for (int i = 0; i < M; i++)
        ck_assert(!memcmp(o2 + i * K, w + ids[i] * K, K * 4));
    ck_assert_int_eq(s.held, 0);
    d->iface->free(d, FG_BUFT_DEVICE, dids);
    d->iface->free(d, FG_BUFT_DEVICE, dw);
    unmake(&s, be, FG_BUFT_HOST);
    free(w);
    fg_backend_free(be);
}
END_TEST

/* A 4-bit cache written on the device holds the CPU's bytes; attention over it, and the
 * CPU-delegated attention, agree with the CPU backend. */
START_TEST(q4_cache_and_delegated_attention)
{
    enum { H = 8, KVH = 2, D = 64, CAP = 40, NQ = 3, POS = 30 };
    uint32_t kw = KVH * D, qw = H * D, ctx = POS + NQ;
    fg_codec c = fg_codec_quant(4, 64, 1);
    size_t rb = fg_kv_row_bytes(&c, kw);
    fg_backend *be = cuda(FG_COMPUTE_F32, 0), *del = cuda(FG_COMPUTE_F32, 1), *cpu;
    fg_err err;
    ck_assert_int_eq(fg_backend_cpu_create(1, &cpu, &err), FG_OK);
    uint8_t *kc = calloc(CAP, rb), *vc = calloc(CAP, rb), *kc2 = calloc(CAP, rb);
    uint8_t *vc2 = calloc(CAP, rb), valid[CAP];
    float *k = malloc(ctx * kw * 4), *v = malloc(ctx * kw * 4), *q = malloc(NQ * qw * 4);
    float *o1 = malloc(NQ * qw * 4), *o2 = malloc(NQ * qw * 4), *o3 = malloc(NQ * qw * 4);
    float *sc = malloc(4 * 2 * CAP * 4), *kt = malloc(CAP * kw * 4), *vt = malloc(CAP * kw * 4);
    tu_randf(k, ctx * kw, 7, 1.0f);
    tu_randf(v, ctx * kw, 8, 1.0f);
    tu_randf(q, NQ * qw, 9, 1.0f);
    for (int t = 0; t < CAP; t++)
        valid[t] = t != 4;
    fg_kv_view gpu = {kc, vc, c, rb, kw, CAP}, host = {kc2, vc2, c, rb, kw, CAP};
    ck_assert_int_eq(be->iface->kv_store(be, &gpu, 0, k, v, ctx, &err), FG_OK);
    ck_assert_int_eq(cpu->iface->kv_store(cpu, &host, 0, k, v, ctx, &err), FG_OK);
    ck_assert(!memcmp(kc, kc2, ctx * rb) && !memcmp(vc, vc2, ctx * rb));
    for (int sparse = 0; sparse < 2; sparse++) {
        float keep = sparse ? 0.5f : 0.0f;
        fg_attn_op a = {q, host, valid, NQ, POS, H, KVH, D, 16, keep, o1, sc, 2 * CAP, 4, kt, vt};
        ck_assert_int_eq(cpu->iface->attention(cpu, &a, &err), FG_OK);
        a.out = o2;
        ck_assert_msg(be->iface->attention(be, &a, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(tu_nmse(o2, o1, NQ * qw) < 1e-10, "sparse %d: %g", sparse,
                      tu_nmse(o2, o1, NQ * qw));
        a.out = o3;
        ck_assert_int_eq(del->iface->attention(del, &a, &err), FG_OK);
        ck_assert(!memcmp(o3, o1, NQ * qw * 4));
    }
    free(kc), free(vc), free(kc2), free(vc2), free(k), free(v), free(q), free(o1), free(o2);
    free(o3), free(sc), free(kt), free(vt);
    fg_backend_free(cpu);
    fg_backend_free(del);
    fg_backend_free(be);
}
END_TEST

/* ---- a Linear over runs of device pieces ---- */

/* The emulated cuBLAS's count of GEMM calls (tests/cudaemu/cublas.cc), found in the libcublas
 * the backend loaded; NULL under a real cuBLAS. */
typedef unsigned long long (*calls_fn)(void);

static int find_cublas(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    if (!strstr(info->dlpi_name, "/libcublas.so"))
        return 0;
    void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    *(calls_fn *)out = h ? (calls_fn)dlsym(h, "fgemu_cublas_calls") : NULL;
    return 1;
}

static calls_fn cublas_counter(void)
{
    calls_fn f = NULL;
    dl_iterate_phdr(find_cublas, &f);
    if (getenv("FG_TEST_EXPECT_CUDA")) /* the _emu run: the emulated cuBLAS counts */
        ck_assert_msg(f != NULL, "no fgemu_cublas_calls in the loaded libcublas");
    return f;
}

enum { RN = 448, RK = 128, RM = 5, RMAX = 8 };

/* How a case lays out its pieces: their rows, which stay in host memory ('H') or go to the
 * device ('D'), device pieces in one allocation in row order (adjacent) or one each, and the
 * cuBLAS calls a Linear over them makes when the pieces multiply as stored (F32; F16 and BF16
 * under FG_COMPUTE_F16) and when they are decoded first (Q4, Q8; F16 and BF16 otherwise). */
typedef struct run_case {
    const char *name;
    uint32_t rows[RMAX];    /* per piece, 0-terminated, summing to RN */
    const char *where;
    int adjacent;
    int calls_stored, calls_decoded;
} run_case;

static const run_case k_runs[] = {
    {"7 equal, adjacent", {64, 64, 64, 64, 64, 64, 64}, "DDDDDDD", 1, 1, 1},
    {"7 equal, apart (batched)", {64, 64, 64, 64, 64, 64, 64}, "DDDDDDD", 0, 1, 1},
    {"3 equal + an odd last, apart", {128, 128, 128, 64}, "DDDD", 0, 2, 1},
    {"3 equal + an odd last, adjacent", {128, 128, 128, 64}, "DDDD", 1, 1, 1},
    {"unequal, apart", {192, 64, 128, 64}, "DDDD", 0, 3, 1},
    {"host between runs, apart", {64, 64, 64, 64, 64, 64, 64}, "DDHDDDH", 0, 4, 4},
    {"host between runs, adjacent", {64, 64, 64, 64, 64, 64, 64}, "DDHDDDH", 1, 4, 4},
    {"one device piece between hosts", {128, 64, 256}, "HDH", 0, 3, 3},
    {"all host (streamed)", {64, 64, 64, 64, 64, 64, 64}, "HHHHHHH", 0, 7, 7},
};

typedef struct rw {
    fg_codec codec;
    uint64_t dims[2], rows[RMAX + 1];
    void *data[RMAX], *block;   /* block: the one allocation of adjacent device pieces */
    size_t len[RMAX];
    int dev[RMAX];
    uint32_t n;
    int held, host_held, host_overlap; /* a piece acquired while a host piece was held */
} rw;

static int rw_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)err;
    rw *s = ctx;
    s->host_overlap |= s->host_held > 0;
    s->held++;
    s->host_held += !s->dev[i];
    *p = (fg_wpiece){s->data[i], s->len[i], s->codec, 2, {s->dims[0], s->dims[1]}, s->rows[i],
                     s->rows[i + 1] - s->rows[i], &s->dev[i]};
    return FG_OK;
}

static int rw_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)err;
    rw *s = ctx;
    s->held--;
    s->host_held -= !*(int *)p->token;
    return FG_OK;
}

/* Piece bytes of w's rows [r0, r0 + rows) in codec (malloc'd), *len set. */
static void *encode_rows(const float *w, uint64_t r0, uint64_t rows, const uint64_t *dims,
                         fg_codec codec, size_t *len)
{
    uint64_t cnt = rows * dims[1];
    const float *src = w + r0 * dims[1];
    fg_err err;
    if (codec.id == FG_CODEC_F32) {
        *len = cnt * 4;
        void *d = malloc(*len);
        memcpy(d, src, *len);
        return d;
    }
    if (codec.id == FG_CODEC_F16 || codec.id == FG_CODEC_BF16) {
        uint16_t *h = malloc(cnt * 2);
        for (uint64_t j = 0; j < cnt; j++) {
            uint32_t bits;
            memcpy(&bits, &src[j], 4);
            h[j] = codec.id == FG_CODEC_F16 ? fg_f32_to_f16_1(src[j]) : (uint16_t)(bits >> 16);
        }
        *len = cnt * 2;
        return h;
    }
    fg_qview v;
    ck_assert_int_eq(fg_codec_qview(&codec, 2, dims, rows, &v, &err), FG_OK);
    ck_assert_int_eq(fg_quant_chunk_bytes(&v, len, &err), FG_OK);
    void *d = malloc(*len);
    ck_assert_int_eq(fg_quant_encode(&codec, &v, src, FG_CODEC_F32, 0, d, *len,
                                     FG_QUANT_ISA_REF, &err), FG_OK);
    return d;
}

/* w [RN, RK] in codec laid out as case rc says on be's device. */
static void rw_make(rw *s, fg_backend *be, const float *w, fg_codec codec, const run_case *rc)
{
    fg_device *d = be->dev;
    fg_err err;
    memset(s, 0, sizeof *s);
    s->codec = codec;
    s->dims[0] = RN;
    s->dims[1] = RK;
    void *host[RMAX];
    size_t total = 0;
    for (uint32_t i = 0; i < RMAX && rc->rows[i]; i++, s->n++) {
        s->rows[i + 1] = s->rows[i] + rc->rows[i];
        host[i] = encode_rows(w, s->rows[i], rc->rows[i], s->dims, codec, &s->len[i]);
        s->dev[i] = rc->where[i] == 'D';
        total += s->dev[i] ? s->len[i] : 0;
    }
    ck_assert_int_eq(s->rows[s->n], RN);
    if (rc->adjacent && total)
        ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, total, &s->block, &err), FG_OK);
    for (uint32_t i = 0, at = 0; i < s->n; i++) {
        if (!s->dev[i]) {
            s->data[i] = host[i];
            continue;
        }
        if (s->block) {
            s->data[i] = (char *)s->block + at;
            at += (uint32_t)s->len[i];
        } else {
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, s->len[i], &s->data[i], &err),
                             FG_OK);
        }
        ck_assert_int_eq(d->iface->copy(d, s->data[i], FG_BUFT_DEVICE, host[i], FG_BUFT_HOST,
                                        s->len[i], NULL, &err), FG_OK);
        free(host[i]);
    }
}

static void rw_free(rw *s, fg_backend *be)
{
    fg_device *d = be->dev;
    for (uint32_t i = 0; i < s->n; i++)
        if (!s->dev[i])
            free(s->data[i]);
        else if (!s->block)
            d->iface->free(d, FG_BUFT_DEVICE, s->data[i]);
    if (s->block)
        d->iface->free(d, FG_BUFT_DEVICE, s->block);
}

/* Every case, codec and compute: the bits of the same weight streamed from host memory piece
 * by piece, the reference within the bound of the compute, every piece released, no host piece
 * held beside another piece, and the cuBLAS calls the case expects (the per-piece path made one
 * a piece). */
START_TEST(linear_runs_of_device_pieces)
{
    fg_err err;
    fg_backend *ref;
    ck_assert_int_eq(fg_backend_ref_create(&ref, &err), FG_OK);
    float *w = malloc(RN * RK * 4), *x = malloc(RM * RK * 4), bias[RN];
    float *yr = malloc(RM * RN * 4), *ys = malloc(RM * RN * 4), *y = malloc(RM * RN * 4);
    tu_randf(w, RN * RK, 21, 0.5f);
    tu_randf(x, RM * RK, 22, 1.0f);
    tu_randf(bias, RN, 23, 1.0f);
    fg_codec codecs[5] = {fg_codec_float(FG_CODEC_F16), fg_codec_float(FG_CODEC_BF16),
                          fg_codec_float(FG_CODEC_F32), fg_codec_quant(4, 64, 0),
                          fg_codec_quant(8, 64, 1)};
    const run_case *streamed = &k_runs[sizeof k_runs / sizeof k_runs[0] - 1];
    for (int f16 = 0; f16 < 2; f16++) {
        fg_backend *be = cuda(f16 ? FG_COMPUTE_F16 : FG_COMPUTE_F32, 0);
        calls_fn calls = cublas_counter();
        for (int ci = 0; ci < 5; ci++) {
            fg_codec_id id = codecs[ci].id;
            int stored = id == FG_CODEC_F32 || (f16 && (id == FG_CODEC_F16 ||
                                                        id == FG_CODEC_BF16));
            rw s;
            rw_make(&s, be, w, codecs[ci], streamed);
            fg_weight wt = {NULL, s.n, s.rows, rw_acquire, rw_release, NULL, &s};
            ck_assert_int_eq(ref->iface->reserve(ref, RN * RK, &err), FG_OK);
            ck_assert_int_eq(ref->iface->linear(ref, x, &wt, bias, yr, RM, RN, RK, &err), FG_OK);
            ck_assert_msg(be->iface->linear(be, x, &wt, bias, ys, RM, RN, RK, &err) == FG_OK,
                          "%s", err.msg);
            double e = tu_nmse(ys, yr, RM * RN), bound = f16 ? 1e-5 : 1e-10;
            ck_assert_msg(e < bound, "compute %s, codec %d: nmse %g", f16 ? "f16" : "f32", ci, e);
            rw_free(&s, be);
            for (size_t r = 0; r < sizeof k_runs / sizeof k_runs[0]; r++) {
                const run_case *rc = &k_runs[r];
                rw_make(&s, be, w, codecs[ci], rc);
                wt = (fg_weight){NULL, s.n, s.rows, rw_acquire, rw_release, NULL, &s};
                unsigned long long c0 = calls ? calls() : 0;
                ck_assert_msg(be->iface->linear(be, x, &wt, bias, y, RM, RN, RK, &err) == FG_OK,
                              "%s: %s", rc->name, err.msg);
                unsigned long long made = calls ? calls() - c0 : 0;
                int want = stored ? rc->calls_stored : rc->calls_decoded;
                printf("compute %s, codec %d, %s: %llu cuBLAS calls\n", f16 ? "f16" : "f32", ci,
                       rc->name, made);
                ck_assert_msg(!memcmp(y, ys, RM * RN * 4), "compute %s, codec %d, %s: not the "
                              "streamed bits", f16 ? "f16" : "f32", ci, rc->name);
                ck_assert_msg(s.held == 0 && !s.host_overlap, "%s: held %d, overlap %d",
                              rc->name, s.held, s.host_overlap);
                ck_assert_msg(!calls || made == (unsigned long long)want,
                              "compute %s, codec %d, %s: %llu cuBLAS calls, want %d",
                              f16 ? "f16" : "f32", ci, rc->name, made, want);
                rw_free(&s, be);
            }
        }
        fg_backend_free(be);
    }
    free(w), free(x), free(yr), free(ys), free(y);
    fg_backend_free(ref);
}
END_TEST

/* Decode attention over a KV cache in device memory (read in place by k_attn_split) gives the
 * bits of the same cache in host memory (staged per op), and the CPU's result within the
 * split's rounding: F32, Q4 and Q8, one query head a KV head (the _h1 kernels) and four, several
 * tiles and splits (300 keys of 128 dims), sinks on one layout. */
START_TEST(split_attention_device_cache_every_codec)
{
    enum { D = 128, CAP = 300 };
    static const uint32_t hk[][2] = {{4, 4}, {8, 2}};
    fg_backend *be = cuda(FG_COMPUTE_F32, 0), *cpu;
    fg_device *d = be->dev;
    fg_err err;
    ck_assert_int_eq(fg_backend_cpu_create(1, &cpu, &err), FG_OK);
    uint8_t valid[CAP];
    for (int t = 0; t < CAP; t++)
        valid[t] = t % 11 != 5;
    for (int codec = 0; codec < 3; codec++)
        for (int l = 0; l < 2; l++) {
            uint32_t h = hk[l][0], kvh = hk[l][1], kw = kvh * D, qw = h * D;
            fg_codec c = codec ? fg_codec_quant(codec == 1 ? 4 : 8, 64, 1)
                               : fg_codec_float(FG_CODEC_F32);
            size_t rb = fg_kv_row_bytes(&c, kw);
            float *k = malloc(CAP * kw * 4), *v = malloc(CAP * kw * 4), *q = malloc(qw * 4);
            float *o1 = malloc(qw * 4), *o2 = malloc(qw * 4), *o3 = malloc(qw * 4);
            float *sc = malloc(2 * CAP * 4), *kt = malloc(CAP * kw * 4), *vt = malloc(CAP * kw * 4);
            float sinks[8] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 0.25f, 1.5f};
            uint8_t *hk_ = calloc(CAP, rb), *hv = calloc(CAP, rb);
            void *dk, *dv;
            tu_randf(k, CAP * kw, 11 + codec, 1.0f);
            tu_randf(v, CAP * kw, 12 + codec, 1.0f);
            tu_randf(q, qw, 13 + codec, 0.3f);
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, CAP * rb, &dk, &err), FG_OK);
            ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, CAP * rb, &dv, &err), FG_OK);
            fg_kv_view dev = {dk, dv, c, rb, kw, CAP}, host = {hk_, hv, c, rb, kw, CAP};
            ck_assert_int_eq(be->iface->kv_store(be, &dev, 0, k, v, CAP, &err), FG_OK);
            ck_assert_int_eq(cpu->iface->kv_store(cpu, &host, 0, k, v, CAP, &err), FG_OK);
            fg_attn_op a = {q, host, valid, 1, CAP - 1, h, kvh, D, 0, 0, o1, sc, 2 * CAP, 1, kt,
                            vt, 0, l ? sinks : NULL};
            ck_assert_int_eq(cpu->iface->attention(cpu, &a, &err), FG_OK);
            a.out = o2;
            ck_assert_msg(be->iface->attention(be, &a, &err) == FG_OK, "%s", err.msg);
            a.kv = dev, a.out = o3;
            ck_assert_msg(be->iface->attention(be, &a, &err) == FG_OK, "%s", err.msg);
            ck_assert_msg(!memcmp(o2, o3, qw * 4), "codec %d, %u/%u heads: the device cache's "
                          "result differs from the staged one's", codec, h, kvh);
            ck_assert_msg(tu_nmse(o2, o1, qw) < 1e-10, "codec %d, %u/%u heads: %g", codec, h,
                          kvh, tu_nmse(o2, o1, qw));
            d->iface->free(d, FG_BUFT_DEVICE, dk);
            d->iface->free(d, FG_BUFT_DEVICE, dv);
            free(k), free(v), free(q), free(o1), free(o2), free(o3), free(sc), free(kt), free(vt);
            free(hk_), free(hv);
        }
    fg_backend_free(cpu);
    fg_backend_free(be);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("backend_cuda");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, f16_compute_within_bound);
    tcase_add_test(tc, device_operands_and_the_device_object);
    tcase_add_test(tc, q4_cache_and_delegated_attention);
    tcase_add_test(tc, split_attention_device_cache_every_codec);
    tcase_add_test(tc, gather_by_device_ids);
    tcase_add_test(tc, linear_runs_of_device_pieces);
    suite_add_tcase(s, tc);
    return s;
}

/* Can a backend be made? Asked in a child (tu_probe): a context made here would not survive
 * the fork of each test. */
static int gpu_probe(char *msg, size_t cap)
{
    fg_backend_cuda_opts o = {0, 1, FG_COMPUTE_F32, 0};
    fg_backend *be;
    fg_err err;
    if (fg_backend_cuda_create(&o, &be, &err) != FG_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    fg_backend_free(be);
    return 0;
}

int main(void)
{
    char msg[512];
    if (tu_probe(gpu_probe, msg, sizeof msg) != 0) {
        printf("skip: %s\n", msg);
        return 77;
    }
    return tu_run(suite());
}
