/* bench_gpu - the GPU tier's figures, each beside its ceiling measured in the same run
 * (scripts/gpu-check.sh runs it):
 *  (a) host -> device GB/s of the pager's HOST -> DEVICE promotion (pinned HOST pool, the CUDA
 *      backend's device), acquired one by one and prefetched (uploads queued on the copy
 *      stream with events), vs cudaMemcpy from pinned memory, 1 GiB in 16 MiB chunks;
 *  (b) Linear TFLOP/s of the CUDA backend (FG_COMPUTE_F16, F16 weight pieces of 4 MiB) for a
 *      prefill (M = 512) and a decode block (M = 64) shape, as a fraction of one cublasGemmEx
 *      over the same whole weight: weights resident on the device in one buffer (the pieces
 *      adjacent: one GEMM) and apart (one allocation a piece: one batched GEMM); and the same
 *      Linear with its pieces in pinned RAM (uploaded while the previous piece multiplies) as a
 *      fraction of its min(link, GEMM) bound: the FLOPs over max(upload time at the link rate
 *      measured in (a), GEMM time at cuBLAS alone's rate). Issue 46 wants >= 0.8 of each.
 *  (c) decode attention (one query a sequence, 32 sequences x 2048 positions, each its own op
 *      as the engine calls it) over a 4-bit and an f32 KV cache, opt-6.7b's heads (32 x 128)
 *      and Llama-3-8B's (32 query heads over 8 KV heads): the KV bytes read / time, beside the
 *      device's memory bandwidth measured in the same run (device-to-device cudaMemcpy, bytes
 *      read + written); and one op over 1 sequence x 65536 positions, the kernels' own rate
 *      (the engine's op a sequence costs a launch pair each on the host).
 * Under the emulated cuBLAS (tests/cudaemu) it also checks that a Linear over the device pieces
 * made one cuBLAS call (fgemu_cublas_calls).
 * usage: bench_gpu [--smoke]   (exits 77 without a GPU; --smoke: every path on small shapes,
 * figures meaningless, for the emulated runtime of tests/cudaemu to run it) */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fg_progress.h"
#include "pager.h"

#define MIB (1u << 20)

static void attention_figures(fg_backend *be, int smoke); /* (c), after main */

/* the shapes: opt-6.7b's fc1 in 4 MiB pieces and 1 GiB of copies, or --smoke's */
static uint32_t g_n = 16384, g_k = 4096, g_rows = 512, g_ms[2] = {512, 64};
static uint64_t g_copy = 1024ull * MIB, g_chunk = 16 * MIB;
static uint32_t g_chunks = 64;

static void die(const char *what, const fg_err *err)
{
    fprintf(stderr, "bench_gpu: %s: %s\n", what, err ? err->msg : "failed");
    exit(1);
}

static void cu(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* (a) the ceiling: best of 3 pinned cudaMemcpy of n bytes. */
static double memcpy_gbs(uint64_t n)
{
    void *h, *d;
    cu(cudaHostAlloc(&h, n, cudaHostAllocDefault), "cudaHostAlloc");
    cu(cudaMalloc(&d, n), "cudaMalloc");
    memset(h, 1, n);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = fg_now();
        cu(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "cudaMemcpy");
        double gbs = (double)n / (fg_now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    cudaFree(d);
    cudaFreeHost(h);
    return best;
}

/* (a) the pager: chunks resident in its pinned HOST pool promoted to DEVICE, acquired one by
 * one (each upload waited for), or prefetched all at once (uploads queued on the copy stream,
 * each with its event) and then waited for, as the engine's prefetch does. */
static void pager_gbs(fg_backend *be, uint32_t n_chunks, uint64_t chunk, double *acq,
                      double *pre)
{
    fg_err err;
    fg_pager_config c;
    memset(&c, 0, sizeof c);
    c.budget[FG_TIER_HOST] = n_chunks * chunk + 64 * MIB;
    c.budget[FG_TIER_DEVICE] = n_chunks * chunk + 64 * MIB;
    c.device = be->dev->iface->retain(be->dev);
    c.flags = FG_PAGER_NO_VERIFY;
    fg_pager *p;
    uint32_t file, id;
    if (fg_pager_open(&c, &p, &err) || fg_pager_add_file(p, NULL, 1, &file, &err))
        die("pager", &err);
    for (uint32_t i = 0; i < n_chunks; i++) {
        fg_pager_chunk_desc d = {file, i * chunk, chunk, chunk, 0, 0, i, {0}, FG_CHUNK_KV, i, 1};
        if (fg_pager_add_chunk(p, &d, &id, &err))
            die("add_chunk", &err);
    }
    fg_pager_view v;
    fg_pager_ticket *tk = calloc(n_chunks, sizeof *tk);
    *acq = *pre = 0;
    for (int r = 0; r < 4; r++) { /* acquired, prefetched, acquired, prefetched: best of 2 */
        for (uint32_t i = 0; i < n_chunks; i++) /* resident in HOST first */
            if (fg_pager_acquire(p, i, FG_TIER_HOST, &v, &err) ||
                fg_pager_release(p, &v, 0, &err))
                die("acquire HOST", &err);
        double t0 = fg_now();
        for (uint32_t i = 0; i < n_chunks; i++)
            if (r % 2 ? fg_pager_prefetch(p, i, FG_TIER_DEVICE, &tk[i], &err)
                      : fg_pager_acquire(p, i, FG_TIER_DEVICE, &v, &err) ||
                            fg_pager_release(p, &v, 0, &err))
                die(r % 2 ? "prefetch DEVICE" : "acquire DEVICE", &err);
        for (uint32_t i = 0; i < n_chunks && r % 2; i++)
            if (fg_pager_wait(p, tk[i], &err))
                die("wait", &err);
        double gbs = (double)n_chunks * chunk / (fg_now() - t0) / 1e9, *best = r % 2 ? pre : acq;
        *best = gbs > *best ? gbs : *best;
    }
    free(tk);
    fg_pager_close(p);
}

/* ---- (b) Linear ---- */

typedef struct pieces {
    void *data[64];
    uint64_t rows[65];
    uint32_t n, k, total;
} pieces;

static int p_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)err;
    pieces *s = ctx;
    uint64_t r = s->rows[i + 1] - s->rows[i];
    *p = (fg_wpiece){s->data[i], r * s->k * 2, fg_codec_float(FG_CODEC_F16), 2,
                     {s->total, s->k}, s->rows[i], r, NULL};
    return FG_OK;
}

static int p_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)ctx, (void)p, (void)err;
    return FG_OK;
}

/* The emulated cuBLAS's GEMM call count (NULL under a real cuBLAS). */
typedef unsigned long long (*calls_fn)(void);

static double backend_tflops(fg_backend *be, pieces *s, uint32_t m, const void *x, void *y,
                             unsigned long long *calls)
{
    fg_weight w = {NULL, s->n, s->rows, p_acquire, p_release, NULL, s};
    calls_fn count = (calls_fn)dlsym(RTLD_DEFAULT, "fgemu_cublas_calls");
    fg_err err;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        unsigned long long c0 = count ? count() : 0;
        double t0 = fg_now();
        if (be->iface->linear(be, x, &w, NULL, y, m, s->total, s->k, &err) ||
            be->iface->sync(be, &err))
            die("linear", &err);
        double t = fg_now() - t0;
        best = t < best ? t : best;
        *calls = count ? count() - c0 : 0;
    }
    return 2.0 * m * s->total * s->k / best / 1e12;
}

static double cublas_tflops(const void *w, uint32_t n, uint32_t k, uint32_t m)
{
    cublasHandle_t h;
    void *x, *y;
    cublasCreate(&h);
    cu(cudaMalloc(&x, (size_t)m * k * 2), "cudaMalloc");
    cu(cudaMalloc(&y, (size_t)m * n * 4), "cudaMalloc");
    cudaMemset(x, 0, (size_t)m * k * 2);
    const float one = 1.0f, zero = 0.0f;
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        cudaDeviceSynchronize();
        double t0 = fg_now();
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, w, CUDA_R_16F,
                     (int)k, x, CUDA_R_16F, (int)k, &zero, y, CUDA_R_32F, (int)n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaDeviceSynchronize();
        double t = fg_now() - t0;
        best = r && t < best ? t : best; /* the first call warms cuBLAS up */
    }
    cudaFree(x);
    cudaFree(y);
    cublasDestroy(h);
    return 2.0 * m * n * k / best / 1e12;
}

/* Under the emulated cuBLAS: a Linear over device pieces of equal rows is one call. */
static void check_calls(const char *what, unsigned long long calls)
{
    if (dlsym(RTLD_DEFAULT, "fgemu_cublas_calls") && calls != 1) {
        fprintf(stderr, "bench_gpu: a Linear over device pieces %s made %llu cuBLAS calls, not "
                "1\n", what, calls);
        exit(1);
    }
}

static void linear_figures(fg_backend *be, double h2d_gbs)
{
    const uint32_t N = g_n, K = g_k, ROWS = g_rows;
    const size_t piece = (size_t)ROWS * K * 2;
    fg_device *d = be->dev;
    fg_err err;
    pieces dev = {.n = N / ROWS, .k = K, .total = N}, apart = dev, pin = dev;
    void *whole, *x, *y;
    cu(cudaMalloc(&whole, (size_t)N * K * 2), "cudaMalloc");
    cudaMemset(whole, 0, (size_t)N * K * 2);
    for (uint32_t i = 0; i <= dev.n; i++)
        dev.rows[i] = apart.rows[i] = pin.rows[i] = (uint64_t)i * ROWS;
    for (uint32_t i = 0; i < dev.n; i++) {
        dev.data[i] = (char *)whole + i * piece;
        cu(cudaMalloc(&apart.data[i], piece), "cudaMalloc");
        cudaMemset(apart.data[i], 0, piece);
        if (d->iface->alloc(d, FG_BUFT_PINNED, piece, &pin.data[i], &err))
            die("pinned", &err);
        memset(pin.data[i], 0, piece);
    }
    if (be->iface->reserve(be, (uint64_t)ROWS * K, &err) ||
        d->iface->alloc(d, FG_BUFT_DEVICE, (size_t)512 * K * 4, &x, &err) ||
        d->iface->alloc(d, FG_BUFT_DEVICE, (size_t)512 * N * 4, &y, &err))
        die("alloc", &err);
    cudaMemset(x, 0, (size_t)512 * K * 4);
    for (int i = 0; i < 2; i++) {
        uint32_t m = g_ms[i];
        unsigned long long c1, c2, c3;
        double cub = cublas_tflops(whole, N, K, m);
        double one = backend_tflops(be, &dev, m, x, y, &c1);
        double sep = backend_tflops(be, &apart, m, x, y, &c2);
        printf("linear %ux%ux%u F16, weights on the GPU, one buffer:  %7.1f TFLOP/s = %.2f of "
               "cuBLAS alone (%7.1f)\n", m, N, K, one, one / cub, cub);
        printf("linear %ux%ux%u F16, weights on the GPU, pieces apart: %7.1f TFLOP/s = %.2f of "
               "cuBLAS alone (batched)\n", m, N, K, sep, sep / cub);
        check_calls("in one buffer", c1);
        check_calls("apart", c2);
        double streamed = backend_tflops(be, &pin, m, x, y, &c3);
        double flop = 2.0 * m * N * K, copy_s = (double)N * K * 2 / (h2d_gbs * 1e9);
        double gemm_s = flop / (cub * 1e12), bound = flop / fmax(copy_s, gemm_s) / 1e12;
        printf("linear %ux%ux%u F16, pieces in pinned RAM: %7.1f TFLOP/s = %.2f of min(link, "
               "GEMM) %7.1f   (link %.1f GB/s: %.1f TFLOP/s; copy then GEMM %.1f)\n", m, N, K,
               streamed, streamed / bound, bound, h2d_gbs, flop / copy_s / 1e12,
               flop / (copy_s + gemm_s) / 1e12);
    }
    for (uint32_t i = 0; i < pin.n; i++) {
        d->iface->free(d, FG_BUFT_PINNED, pin.data[i]);
        cudaFree(apart.data[i]);
    }
    d->iface->free(d, FG_BUFT_DEVICE, x);
    d->iface->free(d, FG_BUFT_DEVICE, y);
    cudaFree(whole);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--smoke") == 0) {
        g_n = 1024, g_k = 256, g_rows = 128, g_ms[0] = 32, g_ms[1] = 8;
        g_copy = 16 * MIB, g_chunk = MIB, g_chunks = 8;
        printf("bench_gpu --smoke: small shapes, the figures mean nothing\n");
    } else if (argc > 1) {
        fprintf(stderr, "usage: bench_gpu [--smoke]\n");
        return 2;
    }
    fg_backend_cuda_opts o = {0, 0, FG_COMPUTE_F16, 0};
    fg_backend *be;
    fg_err err;
    if (fg_backend_cuda_create(&o, &be, &err)) {
        printf("bench_gpu: skip: %s\n", err.msg);
        return 77;
    }
    double h2d = memcpy_gbs(g_copy), acq, pre;
    pager_gbs(be, g_chunks, g_chunk, &acq, &pre);
    printf("H2D: pager HOST -> DEVICE %6.1f GB/s acquired one by one, %6.1f GB/s prefetched "
           "(copy stream, events)   (pinned cudaMemcpy %6.1f GB/s)\n", acq, pre, h2d);
    linear_figures(be, h2d);
    attention_figures(be, argc > 1);
    fg_backend_free(be);
    return 0;
}

/* ---- (c) decode attention ---- */

/* the shapes: sequences, positions, query heads and head_dim, and the positions of the one
 * sequence whose single op shows the kernels' own rate (--smoke: small ones) */
static uint32_t g_att_seqs = 32, g_att_ctx = 2048, g_att_heads = 32, g_att_d = 128;
static uint32_t g_att_long = 65536;

/* The device's memory bandwidth: best of 3 device-to-device cudaMemcpy of n bytes, counting
 * the bytes read and written. */
static double d2d_gbs(uint64_t n)
{
    void *a, *b;
    cu(cudaMalloc(&a, n), "cudaMalloc");
    cu(cudaMalloc(&b, n), "cudaMalloc");
    cudaMemset(a, 1, n);
    double best = 0;
    for (int r = 0; r < 4; r++) {
        cudaDeviceSynchronize();
        double t0 = fg_now();
        cu(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
        cudaDeviceSynchronize();
        double gbs = 2.0 * n / (fg_now() - t0) / 1e9;
        best = r && gbs > best ? gbs : best; /* the first copy warms up */
    }
    cudaFree(a);
    cudaFree(b);
    return best;
}

/* GB/s of KV bytes read by one decode step's attention over S sequences of ctx positions (one
 * op a sequence, every operand on the device, one sync at the end). */
static double attention_gbs(fg_backend *be, uint32_t S, uint32_t ctx, uint32_t kvh, fg_codec c)
{
    uint32_t H = g_att_heads, D = g_att_d, kw = kvh * D;
    size_t rb = fg_kv_row_bytes(&c, kw), cache = (size_t)ctx * rb;
    char *kv;
    float *q, *out;
    uint8_t *valid;
    cu(cudaMalloc((void **)&kv, 2 * S * cache), "cudaMalloc");
    cu(cudaMalloc((void **)&q, (size_t)S * H * D * 4), "cudaMalloc");
    cu(cudaMalloc((void **)&out, (size_t)S * H * D * 4), "cudaMalloc");
    cu(cudaMalloc((void **)&valid, ctx), "cudaMalloc");
    cudaMemset(kv, 0x3c, 2 * S * cache); /* finite values in every codec */
    cudaMemset(q, 0x3c, (size_t)S * H * D * 4);
    cudaMemset(valid, 1, ctx);
    fg_err err;
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = fg_now();
        for (uint32_t s = 0; s < S; s++) {
            fg_kv_view v = {kv + 2 * s * cache, kv + (2 * s + 1) * cache, c, rb, kw, ctx};
            fg_attn_op a = {q + (size_t)s * H * D, v, valid, 1, ctx - 1, H, kvh, D, 0, 0,
                            out + (size_t)s * H * D, NULL, 2 * (size_t)ctx, 1, NULL, NULL, 0,
                            NULL};
            if (be->iface->attention(be, &a, &err))
                die("attention", &err);
        }
        if (be->iface->sync(be, &err))
            die("attention sync", &err);
        double t = fg_now() - t0;
        best = r && t < best ? t : best; /* the first run warms up */
    }
    cudaFree(kv);
    cudaFree(q);
    cudaFree(out);
    cudaFree(valid);
    return 2.0 * S * cache / best / 1e9;
}

/* Each shape and KV codec: g_att_seqs x g_att_ctx as the engine calls it (an op a sequence: a
 * launch pair each, whose host-side cost the GPU may outrun), and one op over g_att_long
 * positions (the kernels' own rate, launches amortized). */
static void attention_figures(fg_backend *be, int smoke)
{
    if (smoke)
        g_att_seqs = 2, g_att_ctx = 150, g_att_heads = 8, g_att_d = 64, g_att_long = 700;
    double bw = d2d_gbs(g_copy);
    const uint32_t kvhs[2] = {g_att_heads, g_att_heads / 4};
    const char *names[2] = {"opt-6.7b", "llama-3-8b"};
    for (int i = 0; i < 2; i++)
        for (int bits = 4; bits >= 0; bits -= 4) {
            fg_codec c = bits ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F32);
            double gbs = attention_gbs(be, g_att_seqs, g_att_ctx, kvhs[i], c);
            double one = attention_gbs(be, 1, g_att_long, kvhs[i], c);
            printf("attention decode %ux%u, %s heads %ux%u over %u KV, %s KV: %7.1f GB/s of KV "
                   "= %.2f of the device's %7.1f GB/s (d2d cudaMemcpy); 1x%u in one op %7.1f "
                   "GB/s = %.2f\n", g_att_seqs, g_att_ctx, names[i], g_att_heads, g_att_d,
                   kvhs[i], bits ? "Q4" : "F32", gbs, gbs / bw, bw, g_att_long, one, one / bw);
        }
}
