/* backend_cuda.cu - the CUDA compute backend (backend.h): cuBLAS for Linear layers, kernels for
 * the rest, over the same operand rules as the simulated device backend (backend_sim.c), which
 * is how its data path is tested on machines without a GPU.
 *
 * Device and memory: the backend's device object (core/fg_device_cuda.c, the one the pager
 * makes when used on its own) allocates DEVICE memory with cudaMalloc, PINNED with
 * cudaHostAlloc (the pager's HOST pool when it shares this device), and copies on its own copy
 * stream, an event per asynchronous copy. It is reference-counted so the pager's DEVICE tier and
 * the backend share it (retain). The backend's Linear pieces upload on a stream of its own, so
 * they neither queue behind the pager's prefetches on the device's copy stream nor hold them
 * up behind a piece's GEMM.
 *
 * Operands: a pointer an op receives is device memory (cudaPointerGetAttributes says so) and
 * used in place, or host memory, which the op stages in stream-ordered allocations
 * (cudaMallocAsync on the compute stream): inputs uploaded before the kernels, outputs
 * downloaded after, then the compute stream is synchronized (the caller's host code reads the
 * outputs next and may reuse the inputs). An op whose operands are all device memory returns
 * with its kernels queued: the device object orders every copy after the compute stream
 * (fg_device_cuda_order_after), so what the pager or the engine copies out sees them done and
 * what it copies in waits for them; the Linear's pieces and the gather's are still waited for
 * before their owner gets them back (released), and a kernel's fault shows at the next
 * synchronization. (Each op used to wait for its kernels; what that cost on a GPU is not yet
 * measured: gpu-check.sh's next run.)
 *
 * Linear: y[m, n] = x[m, k] W^T + b, W in pieces. Column-major cuBLAS sees row-major W [rows, k]
 * as W^T, so each piece is gemm(T, N, rows, m, k) into y's columns [first, first + rows) with
 * ld n. With FG_COMPUTE_F16, F16/BF16 pieces multiply as stored (cublasGemmEx, the activations
 * rounded once per Linear to the piece's type, F32 accumulation and output) and Q4/Q8 pieces are
 * dequantized to F16 on the device (quant_cuda.h); otherwise every piece is widened to F32 on the
 * device and multiplied by cublasSgemm (default math: no TF32), which matches the CPU backend to
 * accumulation order. A piece in host memory uploads on the upload stream into one of two slots
 * while the previous piece multiplies (the compute stream waits on the upload's event; the slot
 * is reused only after the compute stream's event for its previous piece), and goes back to its
 * owner once uploaded; a piece in device memory goes back as soon as its GEMM is queued (the
 * device's copies are ordered after the compute stream), so the GEMMs of a Linear on the GPU
 * queue back to back (they had waited for each other: on an H200 a Linear on GPU-resident F16
 * pieces of 4 MiB ran at 14% of one cuBLAS call over the whole weight, 23 us a piece).
 *
 * Kernels (kernels_cuda.cuh, which tests/cudaemu also compiles for the host; each has the
 * scalar reference of compute/ops_ref.c as its definition): LayerNorm and RMSNorm one block a
 * row; RoPE one thread per (row, frequency) with cos/sin in double as ops_common.c; activations
 * and add elementwise; argmax one block a row; scatter (a mixture of experts' rows into their
 * tokens' rows) one block per row, the product rounded apart from the add (__fmul_rn) as in the
 * reference, row indices checked on the host when they are host memory and by the kernel when
 * they are device memory (the first bad one reported, as gather's device ids); the 4-bit KV
 * store encodes on the device (fg_quant_cuda_encode).
 *
 * Attention (causal, grouped-query, sliding window, soft-cap, sinks, top-k) has two kernels.
 * Decode (at most 4 queries, dense keys, head_dim a multiple of 8 up to 1024, an F32 cache
 * 16-byte aligned or Q4/Q8 grouped along the row: adec_plan) is split over the keys,
 * flash-decoding style: k_attn_split, one block per (KV head with up to 4 of its query heads,
 * split, query) of head_dim / 8 threads a row times as many rows as fit in 128, reads its
 * split's cache rows in their codec (no f32 copy of the cache: 4-bit KV is read as 4 bits), a
 * tile of up to 64 rows at a time (the next tile's loads issued while this one is computed),
 * each KV row once for all its query heads, and keeps the decoded values, q and the weighted V
 * sums in registers (decoded f32 in shared memory would move 8 times the bytes of the 4-bit
 * codes through it, more than its bandwidth); only the dot products' partial sums, the scores
 * and the softmax state go through shared memory. It writes a partial (max, sum of exp, V sum)
 * per split to stream-ordered scratch; k_attn_combine adds the splits with the sink's term.
 * The split length comes from the context so that a step launches about 512 blocks (one wave
 * on an H100's 132 SMs: 16 splits of 128 keys at 1 sequence x 32 KV heads x 2048 positions),
 * never under 64 keys. Its sums run in another order than the reference's (test_ops: within
 * 2e-5 of it). Everything else (prefill, top-k) runs k_attention, one block of 256 threads per
 * (query, head) over scores in global scratch, V's weighted sum split over the keys by groups of
 * head_dim threads, a quantized cache decoded to f32 first; top-k's threshold is the largest
 * score with at least k scores >= it (a 32-pass radix select). The split kernel is not measured
 * on a GPU yet (bench_gpu's attention lines); one op a sequence means a launch pair a sequence.
 *
 * --cpu-cache-compute: attention whose cache is host memory runs on the CPU backend this one
 * keeps for it, beside the cache; its device operands (the engine's device workspace) come down
 * to host room and its output goes back up.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend_int.h"
#include "cublas_dl.h"
#include "fg_device_cuda.h"
#include "quant_cuda.h"
}

#define MAX_STAGED 16

/* ------------------------------------------------------------------ the device object */

/* The device is core/fg_device_cuda.c's (the pager used on its own makes the same one). */

static int cu_fail(fg_err *err, cudaError_t e, const char *what)
{
    return fg_err_set(err, FG_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static int is_dev(const void *p)
{
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unregistered host pointer is not an error to keep */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* ------------------------------------------------------------------ kernels */

#include "kernels_cuda.cuh"

namespace {

unsigned grid_of(size_t n, unsigned block)
{
    size_t g = (n + block - 1) / block;
    return (unsigned)(g > 65535 ? 65535 : g ? g : 1);
}

} // namespace

/* ------------------------------------------------------------------ the backend */

typedef struct slot {
    void *buf;                /* an uploaded piece's bytes */
    size_t cap;
    cudaEvent_t up, done;     /* its upload; the compute that last read it */
} slot;

typedef struct cuda_ctx {
    int ordinal, cpu_attention;
    fg_compute compute;
    cudaStream_t cs;          /* compute */
    cudaStream_t us;          /* the Linear pieces' uploads: not the device's copy stream, where
                                 the pager's prefetches queue (a piece would wait behind them,
                                 and they behind the piece's GEMM) */
    cublasHandle_t blas;
    const fg_cublas_fns *bl;  /* cuBLAS, loaded on first use */
    fg_backend *cpu;          /* delegated attention */
    slot sl[2];
    void *dq;                 /* a decoded piece: f32 or 16-bit */
    size_t dq_cap;
    void *x16;                /* a Linear's activations in 16 bits */
    size_t x16_cap;
    fgb_room room;            /* host room of attention beside a host cache (grown, kept) */
    fg_backend_stats st;
    fg_device *dev;           /* the backend's device: its pinned runs (upload()) */
} cuda_ctx;

typedef struct staged {
    void *host, *dev;
    size_t n;
} staged;

typedef struct op {
    cuda_ctx *c;
    staged s[MAX_STAGED];
    int n, host_out;
} op;

static int ck(cudaError_t e, const char *what, fg_err *err)
{
    return e == cudaSuccess ? FG_OK : cu_fail(err, e, what);
}

/* Host -> device on stream s, one cudaMemcpyAsync per pinned run of the host side (a copy
 * spanning two of the pager's registrations would be staged, synchronously, by the driver). */
static int upload(cuda_ctx *c, void *dst, const void *src, size_t n, cudaStream_t s,
                  const char *what, fg_err *err)
{
    for (size_t done = 0, k; done < n; done += k) {
        k = (size_t)fg_device_cuda_pinned_run(c->dev, (const char *)src + done, n - done);
        int rc = ck(cudaMemcpyAsync((char *)dst + done, (const char *)src + done, k,
                                    cudaMemcpyHostToDevice, s), what, err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

static int ckb(cublasStatus_t s, const char *what, fg_err *err)
{
    return s == CUBLAS_STATUS_SUCCESS ? FG_OK
                                      : fg_err_set(err, FG_ERR_IO, "cublas: %s: status "
                                                   "%d", what, (int)s);
}

/* n bytes of stream-ordered device memory freed at op_end (downloaded to host_out then). */
static int stage(op *o, size_t n, void *host_out, void **dp, fg_err *err)
{
    if (o->n == MAX_STAGED)
        return fg_err_set(err, FG_ERR_LIMIT, "cuda backend: more than %d staged operands",
                          MAX_STAGED);
    int rc = ck(cudaMallocAsync(dp, n ? n : 1, o->c->cs), "cudaMallocAsync", err);
    if (rc)
        return rc;
    staged *st = &o->s[o->n++];
    st->host = host_out;
    st->dev = *dp;
    st->n = n;
    o->host_out |= host_out != NULL;
    return FG_OK;
}

/* Operand p of n bytes on the device: p itself when device memory, else staged (uploaded when
 * `in`, downloaded at op_end when `out`). */
static int opnd(op *o, const void *p, size_t n, int in, int out, void **dp, fg_err *err)
{
    *dp = NULL;
    if (!p)
        return FG_OK;
    if (is_dev(p)) {
        *dp = (void *)p;
        return FG_OK;
    }
    int rc = stage(o, n, out ? (void *)p : NULL, dp, err);
    if (rc == FG_OK && in && n) {
        rc = upload(o->c, *dp, p, n, o->c->cs, "upload", err);
        o->c->st.link_bytes[0] += n;
    }
    return rc;
}

/* Device scratch of n bytes: p itself when device memory, else staged room. */
static int scratch(op *o, const void *p, size_t n, void **dp, fg_err *err)
{
    if (p && is_dev(p)) {
        *dp = (void *)p;
        return FG_OK;
    }
    return stage(o, n, NULL, dp, err);
}

static int op_end(op *o, int rc, fg_err *err)
{
    cudaError_t le = cudaGetLastError(); /* a kernel launch that failed */
    if (rc == FG_OK && le != cudaSuccess)
        rc = cu_fail(err, le, "kernel launch");
    for (int i = 0; i < o->n; i++) {
        staged *s = &o->s[i];
        if (rc == FG_OK && s->host && s->n) {
            rc = ck(cudaMemcpyAsync(s->host, s->dev, s->n, cudaMemcpyDeviceToHost, o->c->cs),
                    "download", err);
            o->c->st.link_bytes[1] += s->n;
        }
        cudaFreeAsync(s->dev, o->c->cs);
    }
    /* the caller reads host outputs and may reuse host inputs next: those wait; an op whose
     * operands are all device memory stays queued (the device's copies are ordered after the
     * compute stream: fg_device_cuda_order_after) */
    int r2 = rc || o->n ? ck(cudaStreamSynchronize(o->c->cs), "compute stream", rc ? NULL : err)
                        : FG_OK;
    o->n = 0;
    return rc ? rc : r2;
}

static op op_begin(fg_backend *be)
{
    op o;
    memset(&o, 0, sizeof o);
    o.c = (cuda_ctx *)be->ctx;
    cudaSetDevice(o.c->ordinal);
    return o;
}

/* A buffer of at least n bytes (grown with the stream drained). */
static int grow(cuda_ctx *c, void **p, size_t *cap, size_t n, fg_err *err)
{
    if (n <= *cap)
        return FG_OK;
    cudaSetDevice(c->ordinal); /* reserve may run on a thread whose current device is another */
    cudaStreamSynchronize(c->cs);
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    int rc = ck(cudaMalloc(p, n), "cudaMalloc", err);
    if (rc == FG_OK)
        *cap = n;
    return rc;
}

/* ---- linear ---- */

/* Piece p (its bytes at data, on the device) into y's columns, on the compute stream. */
static int gemm_piece(cuda_ctx *c, const fg_wpiece *p, const void *data, const float *x,
                      const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
                      fg_err *err)
{
    uint64_t rows = p->n, cnt = rows * k;
    int id = p->codec.id, f16 = c->compute == FG_COMPUTE_F16;
    int half = id == FG_CODEC_F16 || id == FG_CODEC_BF16 || id == FG_CODEC_Q4 || id == FG_CODEC_Q8;
    int use16 = f16 && half, bf16 = id == FG_CODEC_BF16;
    const void *w = data;
    int rc = FG_OK;
    if (id == FG_CODEC_Q4 || id == FG_CODEC_Q8) { /* dequantize on the device */
        fg_qview v;
        rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, rows, &v, err);
        if (rc == FG_OK)
            rc = grow(c, &c->dq, &c->dq_cap, cnt * (use16 ? 2 : 4), err);
        if (rc == FG_OK)
            rc = fg_quant_cuda_decode(&p->codec, &v, data, p->len, c->dq,
                                      use16 ? FG_CODEC_F16 : FG_CODEC_F32, k, c->cs, err);
        w = c->dq;
    } else if (half && !use16) { /* widened to f32 */
        rc = grow(c, &c->dq, &c->dq_cap, cnt * 4, err);
        if (rc == FG_OK)
            k_from16<<<grid_of(cnt, 256), 256, 0, c->cs>>>((const uint16_t *)data, (float *)c->dq,
                                                           cnt, bf16);
        w = c->dq;
    }
    if (rc)
        return rc;
    c->st.decoded_bytes += id != FG_CODEC_F32 ? cnt * 4 : 0;
    const float one = 1.0f, zero = 0.0f;
    float *yc = y + p->first;
    cublasStatus_t s;
    if (use16) {
        cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
        s = c->bl->gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)m, (int)k, &one,
                           w, t, (int)k, c->x16, t, (int)k, &zero, yc, CUDA_R_32F, (int)n,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
        s = c->bl->sgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)m, (int)k, &one,
                         (const float *)w, (int)k, x, (int)k, &zero, yc, (int)n);
    }
    if ((rc = ckb(s, "gemm", err)))
        return rc;
    if (bias)
        k_bias<<<grid_of((size_t)m * rows, 256), 256, 0, c->cs>>>(y, bias, m, rows, n, p->first);
    return FG_OK;
}

/* x in the 16-bit type of piece p's GEMM (once per Linear and type). */
static int cast_x(cuda_ctx *c, const fg_wpiece *p, const float *x, uint32_t m, uint32_t k,
                  int *have, fg_err *err)
{
    int bf16 = p->codec.id == FG_CODEC_BF16, want = bf16 ? 2 : 1;
    if (c->compute != FG_COMPUTE_F16 || p->codec.id == FG_CODEC_F32 || *have == want)
        return FG_OK;
    size_t cnt = (size_t)m * k;
    int rc = grow(c, &c->x16, &c->x16_cap, cnt * 2, err);
    if (rc == FG_OK)
        k_to16<<<grid_of(cnt, 256), 256, 0, c->cs>>>(x, c->x16, cnt, bf16);
    *have = want;
    return rc;
}

/* One piece: device-resident ones are used in place (held until their GEMM finishes); host
 * ones upload into slot i % 2 on the upload stream while earlier GEMMs run. */
static int linear_piece(fg_backend *be, const fg_weight *w, uint32_t i, const float *x,
                        const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
                        int *have16, fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    cudaStream_t copy = c->us;
    fg_wpiece p;
    int rc = w->acquire(w->ctx, i, &p, err);
    if (rc)
        return rc;
    rc = fgb_check_piece(&p, n, k, err);
    const void *data = p.data;
    slot *s = &c->sl[i % 2];
    int dev = is_dev(p.data), queued = 0;
    if (rc == FG_OK && !dev) {
        rc = grow(c, &s->buf, &s->cap, p.len, err);
        if (rc == FG_OK)
            rc = ck(cudaStreamWaitEvent(copy, s->done, 0), "wait", err);
        if (rc == FG_OK) {
            rc = upload(c, s->buf, p.data, p.len, copy, "weight upload", err);
            queued = rc == FG_OK;
        }
        c->st.link_bytes[0] += p.len;
        if (rc == FG_OK)
            rc = ck(cudaEventRecord(s->up, copy), "event", err);
        if (rc == FG_OK)
            rc = ck(cudaStreamWaitEvent(c->cs, s->up, 0), "wait", err);
        data = s->buf;
    }
    if (rc == FG_OK)
        rc = cast_x(c, &p, x, m, k, have16, err);
    if (rc == FG_OK)
        rc = gemm_piece(c, &p, data, x, bias, y, m, n, k, err);
    if (rc == FG_OK && !dev) /* the slot is free again once this GEMM has read it */
        rc = ck(cudaEventRecord(s->done, c->cs), "event", err);
    /* the owner's bytes: host ones free once uploaded (after a failure too, while a queued
     * upload may still read them); device ones at once, the GEMM queued: whatever next writes
     * that memory is a device copy, ordered after the compute stream (fg_device_cuda_order_after),
     * or a kernel behind it on the compute stream */
    if (rc == FG_OK && !dev)
        rc = ck(cudaEventSynchronize(s->up), "event", err);
    else if (rc != FG_OK && queued)
        cudaStreamSynchronize(copy);
    int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
    return rc ? rc : rc2;
}

static int cu_linear(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                     float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    op o = op_begin(be);
    void *dx, *db, *dy, *dw = NULL;
    int rc = opnd(&o, x, (size_t)m * k * 4, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, bias, (size_t)n * 4, 1, 0, &db, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, (size_t)m * n * 4, 0, 1, &dy, err);
    if (rc == FG_OK && w->f32)
        rc = opnd(&o, w->f32, (size_t)n * k * 4, 1, 0, &dw, err);
    if (rc == FG_OK && w->f32) {
        fg_wpiece p;
        memset(&p, 0, sizeof p);
        p.data = dw;
        p.len = (size_t)n * k * 4;
        p.codec = fg_codec_float(FG_CODEC_F32);
        p.n_dims = 2;
        p.dims[0] = n;
        p.dims[1] = k;
        p.n = n;
        rc = gemm_piece(c, &p, dw, (const float *)dx, (const float *)db, (float *)dy, m, n, k,
                        err);
    }
    int have16 = 0;
    for (uint32_t i = 0; rc == FG_OK && !w->f32 && i < w->n_pieces; i++)
        rc = linear_piece(be, w, i, (const float *)dx, (const float *)db, (float *)dy, m, n, k,
                          &have16, err);
    return op_end(&o, rc, err);
}

/* ---- gather ---- */

/* Piece p widened to f32 in c->dq (its bytes on the device at data). */
static int piece_f32(cuda_ctx *c, const fg_wpiece *p, const void *data, uint64_t cols, fg_err *err)
{
    uint64_t cnt = p->n * cols;
    int rc = grow(c, &c->dq, &c->dq_cap, cnt * 4, err);
    if (rc)
        return rc;
    if (p->codec.id == FG_CODEC_F32)
        return ck(cudaMemcpyAsync(c->dq, data, cnt * 4, cudaMemcpyDeviceToDevice, c->cs), "copy",
                  err);
    if (p->codec.id == FG_CODEC_F16 || p->codec.id == FG_CODEC_BF16) {
        k_from16<<<grid_of(cnt, 256), 256, 0, c->cs>>>((const uint16_t *)data, (float *)c->dq, cnt,
                                                       p->codec.id == FG_CODEC_BF16);
        return FG_OK;
    }
    fg_qview v;
    rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, p->n, &v, err);
    return rc ? rc : fg_quant_cuda_decode(&p->codec, &v, data, p->len, c->dq, FG_CODEC_F32, cols,
                                          c->cs, err);
}

static int gather_piece(fg_backend *be, const fg_weight *w, uint32_t i, const int32_t *dids,
                        uint32_t n, float *dout, uint32_t width, uint64_t total, int32_t *bad,
                        fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    fg_wpiece p;
    int rc = w->acquire(w->ctx, i, &p, err);
    if (rc)
        return rc;
    const void *data = p.data;
    uint64_t cols = p.n_dims > 1 ? p.dims[1] : 1; /* as the reference reads a piece */
    if (p.n_dims > 2 || cols != width) /* a bad read on the device poisons the context */
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "cuda backend: gather of rows %u wide from a "
                        "tensor %llu wide", width, (unsigned long long)cols);
    if (rc == FG_OK && !is_dev(p.data)) {
        rc = grow(c, &c->sl[0].buf, &c->sl[0].cap, p.len, err);
        if (rc == FG_OK)
            rc = upload(c, c->sl[0].buf, p.data, p.len, c->cs, "upload", err);
        c->st.link_bytes[0] += p.len;
        data = c->sl[0].buf;
    }
    if (rc == FG_OK)
        rc = piece_f32(c, &p, data, width, err);
    if (rc == FG_OK)
        k_gather<<<n, 128, 0, c->cs>>>((const float *)c->dq, p.first, p.n, dids, n, dout, width,
                                       total, bad);
    if (rc == FG_OK && data != p.data) /* uploaded from the owner's host bytes: wait for it */
        rc = ck(cudaStreamSynchronize(c->cs), "compute stream", err);
    int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
    return rc ? rc : rc2;
}

static int cu_gather(fg_backend *be, const fg_weight *w, uint64_t rows, const int32_t *ids,
                     uint32_t n, float *out, uint32_t width, fg_err *err)
{
    if (!n) /* nothing to gather (a grid of no blocks is a launch error) */
        return FG_OK;
    op o = op_begin(be);
    int32_t *hids = (int32_t *)malloc((size_t)n * 4 + 4);
    if (!hids)
        return fg_err_set(err, FG_ERR_NOMEM, "cuda backend: out of memory");
    /* ids in device memory (the engine's row indices of a SMALL tensor) are not read back over
     * the link: every piece is gathered, the kernel skipping the ids outside it and flagging
     * those outside the table in `bad` (two ints staged, downloaded by op_end) */
    int dev_ids = is_dev(ids);
    int32_t hbad[2] = {0, 0};
    int32_t *bad = NULL;
    int rc = dev_ids ? FG_OK : ck(cudaMemcpy(hids, ids, (size_t)n * 4, cudaMemcpyDefault), "ids",
                                  err);
    for (uint32_t r = 0; rc == FG_OK && !dev_ids && r < n; r++)
        if (hids[r] < 0 || (uint64_t)hids[r] >= rows)
            rc = fg_err_set(err, FG_ERR_INVALID_ARG, "token id %d outside the vocabulary of %llu",
                            hids[r], (unsigned long long)rows);
    void *di, *dout, *dw;
    if (rc == FG_OK)
        rc = opnd(&o, ids, (size_t)n * 4, 1, 0, &di, err);
    if (rc == FG_OK)
        rc = opnd(&o, out, (size_t)n * width * 4, 0, 1, &dout, err);
    if (rc == FG_OK && dev_ids && (rc = stage(&o, sizeof hbad, hbad, (void **)&bad, err)) == FG_OK)
        rc = ck(cudaMemsetAsync(bad, 0, sizeof hbad, o.c->cs), "memset", err);
    if (rc == FG_OK && w->f32 && (rc = opnd(&o, w->f32, rows * width * 4, 1, 0, &dw, err)) == FG_OK)
        k_gather<<<n ? n : 1, 128, 0, o.c->cs>>>((const float *)dw, 0, rows, (const int32_t *)di,
                                                 n, (float *)dout, width, rows, bad);
    for (uint32_t i = 0; rc == FG_OK && !w->f32 && i < w->n_pieces; i++) {
        int need = dev_ids;
        for (uint32_t r = 0; r < n && !need; r++)
            need = (uint64_t)hids[r] >= w->piece_rows[i] &&
                   (uint64_t)hids[r] < w->piece_rows[i + 1];
        if (need)
            rc = gather_piece(be, w, i, (const int32_t *)di, n, (float *)dout, width, rows, bad,
                              err);
    }
    free(hids);
    rc = op_end(&o, rc, err);
    if (rc == FG_OK && hbad[0])
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "token id %d outside the vocabulary of %llu "
                        "(ids in device memory)", hbad[1], (unsigned long long)rows);
    return rc;
}

/* ---- small ops ---- */

static int cu_layernorm(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                        uint32_t rows, uint32_t n, float eps, fg_err *err)
{
    op o = op_begin(be);
    void *dx, *dg, *db, *dy;
    size_t bytes = (size_t)rows * n * 4;
    int rc = opnd(&o, x, bytes, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, g, (size_t)n * 4, 1, 0, &dg, err);
    if (rc == FG_OK)
        rc = opnd(&o, b, (size_t)n * 4, 1, 0, &db, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, bytes, 0, 1, &dy, err);
    if (rc == FG_OK && rows)
        k_layernorm<<<rows, 256, 0, o.c->cs>>>((const float *)dx, (const float *)dg,
                                               (const float *)db, (float *)dy, n, eps);
    return op_end(&o, rc, err);
}

static int cu_rmsnorm(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                      uint32_t n, float eps, fg_err *err)
{
    op o = op_begin(be);
    void *dx, *dg, *dy;
    size_t bytes = (size_t)rows * n * 4;
    int rc = opnd(&o, x, bytes, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, g, (size_t)n * 4, 1, 0, &dg, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, bytes, 0, 1, &dy, err);
    if (rc == FG_OK && rows)
        k_rmsnorm<<<rows, 256, 0, o.c->cs>>>((const float *)dx, (const float *)dg, (float *)dy, n,
                                             eps);
    return op_end(&o, rc, err);
}

static int cu_rope(fg_backend *be, float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                   const int32_t *positions, const fg_rope *r, fg_err *err)
{
    int rc = fgb_rope_check(r, head_dim, err);
    if (rc)
        return rc;
    uint32_t half = r->rot_dim / 2;
    float *f = (float *)malloc(half * sizeof *f + 4);
    if (!f)
        return fg_err_set(err, FG_ERR_NOMEM, "cuda backend: out of memory");
    fg_rope_inv_freq(r, f);
    op o = op_begin(be);
    void *dx, *dp, *df;
    rc = opnd(&o, x, (size_t)rows * n_heads * head_dim * 4, 1, 1, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, positions, (size_t)rows * 4, 1, 0, &dp, err);
    if (rc == FG_OK)
        rc = opnd(&o, f, half * 4, 1, 0, &df, err);
    if (rc == FG_OK && rows)
        k_rope<<<grid_of((size_t)rows * half, 128), 128, 0, o.c->cs>>>(
            (float *)dx, rows, n_heads, head_dim, (const int32_t *)dp, (const float *)df, half,
            r->rot_scale > 0 ? r->rot_scale : 1.0f, r->pos_beta, r->orig_max_pos);
    rc = op_end(&o, rc, err); /* f is read by the upload before op_end returns */
    free(f);
    return rc;
}

static int cu_act(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n, fg_err *err)
{
    int rc = fgb_act_check(a, up, err); /* before x is staged */
    if (rc)
        return rc;
    op o = op_begin(be);
    void *dx, *du;
    rc = opnd(&o, x, n * 4, 1, 1, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, up, n * 4, 1, 0, &du, err);
    if (rc == FG_OK && n)
        k_act<<<grid_of(n, 256), 256, 0, o.c->cs>>>(a, (float *)dx, (const float *)du, n);
    return op_end(&o, rc, err);
}

static int cu_add(fg_backend *be, float *y, const float *x, size_t n, fg_err *err)
{
    op o = op_begin(be);
    void *dy, *dx;
    int rc = opnd(&o, y, n * 4, 1, 1, &dy, err);
    if (rc == FG_OK)
        rc = opnd(&o, x, n * 4, 1, 0, &dx, err);
    if (rc == FG_OK && n)
        k_add<<<grid_of(n, 256), 256, 0, o.c->cs>>>((float *)dy, (const float *)dx, n);
    return op_end(&o, rc, err);
}

static int cu_heads(fg_backend *be, const fg_heads_op *h, fg_err *err)
{
    int rc = fgb_heads_check(h, err);
    if (rc || !h->n || !h->n_heads)
        return rc;
    op o = op_begin(be);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    fg_heads_op d = *h;
    rc = opnd(&o, h->x, fg_heads_span(h, 0) * 4, 1, 0, &dx, err);
    if (rc == FG_OK && h->w)
        rc = opnd(&o, h->w, fg_heads_span(h, 1) * 4, 1, 0, &dw, err);
    if (rc == FG_OK) /* (in and out: the values between the heads stay) */
        rc = opnd(&o, h->y, fg_heads_span(h, 2) * 4, 1, 1, &dy, err);
    d.x = (const float *)dx, d.w = (const float *)dw, d.y = (float *)dy;
    size_t total = (size_t)h->n * h->n_heads * h->m;
    if (rc == FG_OK)
        k_heads<<<grid_of(total, 256), 256, 0, o.c->cs>>>(d);
    return op_end(&o, rc, err);
}

static int cu_scale(fg_backend *be, float *x, float s, size_t n, fg_err *err)
{
    op o = op_begin(be);
    void *dx;
    int rc = opnd(&o, x, n * 4, 1, 1, &dx, err);
    if (rc == FG_OK && n)
        k_scale<<<grid_of(n, 256), 256, 0, o.c->cs>>>((float *)dx, s, n);
    return op_end(&o, rc, err);
}

/* Greedy sampling where the logits are: only the ids come down when they are host memory. */
static int cu_argmax(fg_backend *be, const float *x, uint32_t rows, uint32_t n, int32_t *ids,
                     fg_err *err)
{
    if (!n)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "argmax over rows of 0 values");
    op o = op_begin(be);
    void *dx, *di;
    int rc = opnd(&o, x, (size_t)rows * n * 4, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, ids, (size_t)rows * 4, 0, 1, &di, err);
    if (rc == FG_OK && rows)
        k_argmax<<<rows, ARGMAX_T, 0, o.c->cs>>>((const float *)dx, n, (int32_t *)di);
    return op_end(&o, rc, err);
}

/* A mixture of experts' rows into their tokens' rows. y is in and out whatever accumulate is
 * (the rows idx does not name keep their values). Host indices are checked here, before
 * anything runs (a refused call leaves y as it was); indices in device memory are not read back
 * over the link: the kernel skips a bad one and reports it in `bad` (two ints staged,
 * downloaded by op_end), after the rows of the good ones are written. */
static int cu_scatter(fg_backend *be, float *y, uint32_t y_rows, const float *x,
                      const int32_t *idx, const float *s, uint32_t n, uint32_t width,
                      int accumulate, fg_err *err)
{
    if (!n) /* nothing to scatter (a grid of no blocks is a launch error) */
        return FG_OK;
    int dev_idx = is_dev(idx), rc = dev_idx ? FG_OK : fgb_scatter_check(idx, n, y_rows, err);
    if (rc)
        return rc;
    op o = op_begin(be);
    int32_t hbad[2] = {0, 0};
    int32_t *bad = NULL;
    void *dy, *dx, *di, *ds;
    size_t row = (size_t)width * 4;
    rc = opnd(&o, y, (size_t)y_rows * row, 1, 1, &dy, err);
    if (rc == FG_OK)
        rc = opnd(&o, x, (size_t)n * row, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, idx, (size_t)n * 4, 1, 0, &di, err);
    if (rc == FG_OK)
        rc = opnd(&o, s, (size_t)n * 4, 1, 0, &ds, err);
    if (rc == FG_OK && dev_idx && (rc = stage(&o, sizeof hbad, hbad, (void **)&bad, err)) == FG_OK)
        rc = ck(cudaMemsetAsync(bad, 0, sizeof hbad, o.c->cs), "memset", err);
    if (rc == FG_OK)
        k_scatter<<<n, 128, 0, o.c->cs>>>((float *)dy, y_rows, (const float *)dx,
                                          (const int32_t *)di, (const float *)ds, width,
                                          accumulate, bad);
    rc = op_end(&o, rc, err);
    if (rc == FG_OK && hbad[0])
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "scatter: row index %d is outside y's %u rows "
                        "(indices in device memory)", hbad[1], y_rows);
    return rc;
}

/* ---- KV cache and attention ---- */

/* Rows [row, row + n) of one cache array: in place when device memory (*at = row), else staged
 * (*at = 0). */
static int kv_side(op *o, void *base, const fg_kv_view *kv, uint32_t row, uint32_t n, int in,
                   int out, void **dbase, uint32_t *at, fg_err *err)
{
    if (is_dev(base)) {
        *dbase = base;
        *at = row;
        return FG_OK;
    }
    *at = 0;
    return opnd(o, (uint8_t *)base + (size_t)row * kv->row_bytes, (size_t)n * kv->row_bytes, in,
                out, dbase, err);
}

static int cu_kv_store(fg_backend *be, const fg_kv_view *kv, uint32_t row, const float *k,
                       const float *v, uint32_t n, fg_err *err)
{
    if ((uint64_t)row + n > kv->cap)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "KV rows %u..%u beyond the cache's %u", row,
                          row + n, kv->cap);
    op o = op_begin(be);
    void *dk, *dv, *kb = NULL, *vb = NULL;
    uint32_t at = 0, at2 = 0;
    size_t in = (size_t)n * kv->width * 4, len = (size_t)n * kv->row_bytes;
    int rc = opnd(&o, k, in, 1, 0, &dk, err);
    if (rc == FG_OK)
        rc = opnd(&o, v, in, 1, 0, &dv, err);
    if (rc == FG_OK)
        rc = kv_side(&o, kv->k, kv, row, n, 0, 1, &kb, &at, err);
    if (rc == FG_OK)
        rc = kv_side(&o, kv->v, kv, row, n, 0, 1, &vb, &at2, err);
    uint8_t *kd = (uint8_t *)kb + (size_t)at * kv->row_bytes;
    uint8_t *vd = (uint8_t *)vb + (size_t)at2 * kv->row_bytes;
    if (rc == FG_OK && kv->codec.id == FG_CODEC_F32) {
        rc = ck(cudaMemcpyAsync(kd, dk, len, cudaMemcpyDeviceToDevice, o.c->cs), "kv", err);
        if (rc == FG_OK)
            rc = ck(cudaMemcpyAsync(vd, dv, len, cudaMemcpyDeviceToDevice, o.c->cs), "kv", err);
    } else if (rc == FG_OK) {
        uint64_t dims[2] = {n, kv->width};
        fg_qview q;
        rc = fg_codec_qview(&kv->codec, 2, dims, n, &q, err);
        if (rc == FG_OK)
            rc = fg_quant_cuda_encode(&kv->codec, &q, dk, FG_CODEC_F32, kv->width, kd, len,
                                      o.c->cs, err);
        if (rc == FG_OK)
            rc = fg_quant_cuda_encode(&kv->codec, &q, dv, FG_CODEC_F32, kv->width, vd, len,
                                      o.c->cs, err);
    }
    return op_end(&o, rc, err);
}

static int on_cuda_device(const fg_device *d, const void *p)
{
    (void)d;
    return is_dev(p);
}

/* The cache's rows [0, ctx) as f32 on the device (decoded into staged room when quantized). */
static int kv_f32(op *o, const fg_attn_op *a, uint32_t ctx, const float **k, const float **v,
                  fg_err *err)
{
    void *kb, *vb;
    uint32_t at;
    int rc = kv_side(o, a->kv.k, &a->kv, 0, ctx, 1, 0, &kb, &at, err);
    if (rc == FG_OK)
        rc = kv_side(o, a->kv.v, &a->kv, 0, ctx, 1, 0, &vb, &at, err);
    if (rc || a->kv.codec.id == FG_CODEC_F32) {
        *k = (const float *)kb;
        *v = (const float *)vb;
        return rc;
    }
    void *kf, *vf;
    size_t f = (size_t)ctx * a->kv.width * 4;
    uint64_t dims[2] = {ctx, a->kv.width};
    fg_qview q;
    rc = scratch(o, a->k_tmp, f, &kf, err);
    if (rc == FG_OK)
        rc = scratch(o, a->v_tmp, f, &vf, err);
    if (rc == FG_OK)
        rc = fg_codec_qview(&a->kv.codec, 2, dims, ctx, &q, err);
    size_t len = (size_t)ctx * a->kv.row_bytes;
    if (rc == FG_OK)
        rc = fg_quant_cuda_decode(&a->kv.codec, &q, kb, len, kf, FG_CODEC_F32, a->kv.width,
                                  o->c->cs, err);
    if (rc == FG_OK)
        rc = fg_quant_cuda_decode(&a->kv.codec, &q, vb, len, vf, FG_CODEC_F32, a->kv.width,
                                  o->c->cs, err);
    *k = (const float *)kf;
    *v = (const float *)vf;
    return rc;
}

/* k_attention's block: q's head and the V sums' groups in its shared memory */
#define ATTN_THREADS 256
/* the split kernel's blocks in flight: 4 on each of an H100's 132 SMs, about; the split length
 * is chosen from ctx so that a decode step launches this many (512 at 1 sequence x 32 KV heads x
 * 2048 positions: 16 splits of 128 keys), never under 64 keys a split */
#define ADEC_BLOCKS 512
#define ADEC_MIN_SPLIT 64
#define ADEC_MAX_SPLITS 4096
#define ADEC_MAX_T 128 /* threads a block at most: a whole number of rows of head_dim / 8 */
#define ADEC_MAX_TK 64

/* k_attn_split's shared memory */
static size_t adec_smem(const attn_dec_k *p)
{
    return 4 * ((size_t)adec_dots(p->hpb, p->tk, p->cpr, p->kpp, p->head_dim) +
                (size_t)p->hpb * p->tk + 3 * p->hpb);
}

/* The split kernel's parameters for op a (all but the pointers and the codec's kernel), or 0
 * when it does not cover a (more than 4 queries, top-k, a head_dim not a multiple of 8 or over
 * 1024, a codec it does not read): k_attention runs those. */
static int adec_plan(const fg_attn_op *a, attn_dec_k *p)
{
    const fg_codec *c = &a->kv.codec;
    uint32_t d = a->head_dim, grp = a->n_heads / a->n_kv_heads;
    if (a->n_q > 4 || (a->keep > 0.0f && a->keep < 1.0f) || d % 8 || !d || d / 8 > ADEC_MAX_T)
        return 0;
    memset(p, 0, sizeof *p);
    if (c->id == FG_CODEC_Q4 || c->id == FG_CODEC_Q8) {
        uint64_t dims[2] = {1, a->kv.width};
        fg_qview v;
        if (c->group_axis != 1 || fg_codec_qview(c, 2, dims, 1, &v, NULL) ||
            v.n_groups * v.group_bytes != a->kv.row_bytes)
            return 0;
        p->G = c->group_size;
        p->gbytes = v.group_bytes;
        p->f16scale = c->scale_dtype == FG_SCALE_F16;
        p->hdr = p->f16scale ? 4 : 8;
        p->hi_first = c->nibble_order == FG_NIBBLE_HI_FIRST;
    } else if (c->id != FG_CODEC_F32 || a->kv.row_bytes % 16 ||
               ((uintptr_t)a->kv.k | (uintptr_t)a->kv.v) % 16) { /* 16-byte loads */
        return 0;
    }
    p->hpb = grp < ADEC_HG ? grp : ADEC_HG;
    p->cpr = d / 8;
    p->kpp = ADEC_MAX_T / p->cpr;
    p->tk = ADEC_CH * p->kpp < ADEC_MAX_TK ? ADEC_CH * p->kpp : ADEC_MAX_TK;
    uint32_t ctx = a->q_pos0 + a->n_q, w = a->window;
    p->lo = w && a->q_pos0 + 1 > w ? a->q_pos0 + 1 - w : 0; /* query 0's first key */
    uint64_t range = ctx - p->lo, per = (uint64_t)a->n_kv_heads * ((grp + p->hpb - 1) / p->hpb) *
                                         a->n_q;
    uint64_t split = (range * per + ADEC_BLOCKS - 1) / ADEC_BLOCKS;
    uint64_t least = (range + ADEC_MAX_SPLITS - 1) / ADEC_MAX_SPLITS;
    split = split > ADEC_MIN_SPLIT ? split : ADEC_MIN_SPLIT;
    split = split > least ? split : least;
    p->split = (uint32_t)((split + 31) / 32 * 32);
    p->n_split = (uint32_t)((range + p->split - 1) / p->split);
    p->row_bytes = a->kv.row_bytes;
    p->n_heads = a->n_heads, p->grp = grp, p->head_dim = d, p->q_pos0 = a->q_pos0;
    p->window = w, p->softcap = a->softcap;
    return 1;
}

/* Decode attention by k_attn_split and k_attn_combine over the cache as stored (plan p). */
static int attention_split(op *o, const fg_attn_op *a, attn_dec_k *p, const float *dq,
                           const uint8_t *dvalid, const float *dsinks, float *dout, fg_err *err)
{
    uint32_t ctx = a->q_pos0 + a->n_q, at;
    void *kb, *vb, *part = NULL;
    int rc = kv_side(o, a->kv.k, &a->kv, 0, ctx, 1, 0, &kb, &at, err);
    if (rc == FG_OK)
        rc = kv_side(o, a->kv.v, &a->kv, 0, ctx, 1, 0, &vb, &at, err);
    size_t n = (size_t)a->n_q * a->n_heads * p->n_split * (a->head_dim + 2) * 4;
    if (rc == FG_OK) /* stream-ordered, not staged: an op on device operands stays queued */
        rc = ck(cudaMallocAsync(&part, n, o->c->cs), "cudaMallocAsync", err);
    if (rc)
        return rc;
    p->q = dq, p->k = (const uint8_t *)kb, p->v = (const uint8_t *)vb, p->valid = dvalid;
    p->part = (float *)part;
    uint32_t groups = (p->grp + p->hpb - 1) / p->hpb, id = a->kv.codec.id;
    dim3 grid(a->n_kv_heads * groups, p->n_split, a->n_q);
    unsigned threads = p->kpp * p->cpr;
    size_t sm = adec_smem(p);
    void (*const ks[2][3])(attn_dec_k) = {{k_attn_split_f32, k_attn_split_q4, k_attn_split_q8},
                                          {k_attn_split_f32_h1, k_attn_split_q4_h1,
                                           k_attn_split_q8_h1}};
    ks[p->hpb == 1][id == FG_CODEC_Q4 ? 1 : id == FG_CODEC_Q8 ? 2 : 0]<<<grid, threads, sm,
                                                                        o->c->cs>>>(*p);
    k_attn_combine<<<dim3(a->n_heads, a->n_q), ADEC_MAX_T, p->n_split * 4, o->c->cs>>>(
        p->part, dsinks, dout, a->n_heads, a->head_dim, p->n_split);
    cudaFreeAsync(part, o->c->cs);
    return FG_OK;
}

static int cu_attention(fg_backend *be, const fg_attn_op *a, fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    int rc = fgb_attn_check(a, err);
    if (rc)
        return rc;
    if (!a->n_q) /* no queries: nothing to compute (and no context to size scores by) */
        return FG_OK;
    if (c->cpu_attention && !is_dev(a->kv.k) && !is_dev(a->kv.v)) /* where the cache lives */
        return fgb_attention_on_host(c->cpu, be->dev, on_cuda_device, &c->room, a, err);
    op o = op_begin(be);
    uint32_t ctx = a->q_pos0 + a->n_q, qw = a->n_heads * a->head_dim;
    const float *k = NULL, *v = NULL;
    void *dq, *dvalid, *dsinks = NULL, *dout, *sc = NULL;
    rc = opnd(&o, a->q, (size_t)a->n_q * qw * 4, 1, 0, &dq, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->valid, a->kv.cap, 1, 0, &dvalid, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->sinks, (size_t)a->n_heads * 4, 1, 0, &dsinks, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->out, (size_t)a->n_q * qw * 4, 0, 1, &dout, err);
    attn_dec_k plan;
    if (rc == FG_OK && adec_plan(a, &plan))
        return op_end(&o, attention_split(&o, a, &plan, (const float *)dq,
                                          (const uint8_t *)dvalid, (const float *)dsinks,
                                          (float *)dout, err), err);
    if (rc == FG_OK)
        rc = kv_f32(&o, a, ctx, &k, &v, err);
    uint32_t problems = a->n_q * a->n_heads, batch = (uint32_t)((64u << 20) / 4 / ctx);
    batch = batch ? (batch < problems ? batch : problems) : 1;
    if (rc == FG_OK)
        rc = ck(cudaMallocAsync(&sc, (size_t)batch * ctx * 4, o.c->cs), "cudaMallocAsync", err);
    attn_k p = {(const float *)dq, k, v, (const uint8_t *)dvalid, (float *)dout, (float *)sc,
                a->kv.width, a->n_q, a->q_pos0, a->n_heads, a->head_dim,
                a->n_heads / a->n_kv_heads, a->window, ctx, 0, a->keep, a->softcap,
                (const float *)dsinks};
    for (uint32_t j0 = 0; rc == FG_OK && j0 < problems; j0 += batch) {
        p.j0 = j0;
        uint32_t nb = problems - j0 < batch ? problems - j0 : batch;
        k_attention<<<nb, ATTN_THREADS, (a->head_dim + ATTN_THREADS) * 4, o.c->cs>>>(p);
    }
    if (sc)
        cudaFreeAsync(sc, o.c->cs);
    return op_end(&o, rc, err);
}

/* ---- the rest ---- */

static int cu_sync(fg_backend *be, fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    cudaSetDevice(c->ordinal);
    return ck(cudaStreamSynchronize(c->cs), "compute stream", err);
}

static int cu_reserve(fg_backend *be, uint64_t floats, fg_err *err)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    int rc = grow(c, &c->dq, &c->dq_cap, floats * 4, err);
    return rc ? rc : c->cpu->iface->reserve(c->cpu, floats, err);
}

static void cu_stats(const fg_backend *be, fg_backend_stats *out)
{
    *out = ((const cuda_ctx *)be->ctx)->st;
    uint64_t link[2]; /* the device's copies: the pager's, the engine's */
    fg_device_cuda_link(be->dev, link);
    out->link_bytes[0] += link[0];
    out->link_bytes[1] += link[1];
}

static void cu_destroy(fg_backend *be)
{
    cuda_ctx *c = (cuda_ctx *)be->ctx;
    if (c) {
        cudaSetDevice(c->ordinal);
        if (be->dev) /* the device (the pager may keep it) no longer orders after c->cs */
            fg_device_cuda_order_after(be->dev, NULL, NULL);
        if (c->cs)
            cudaStreamSynchronize(c->cs);
        if (c->us)
            cudaStreamSynchronize(c->us);
        for (int i = 0; i < 2; i++) {
            cudaFree(c->sl[i].buf);
            if (c->sl[i].up)
                cudaEventDestroy(c->sl[i].up);
            if (c->sl[i].done)
                cudaEventDestroy(c->sl[i].done);
        }
        cudaFree(c->dq);
        cudaFree(c->x16);
        if (c->blas)
            c->bl->destroy(c->blas);
        if (c->cs)
            cudaStreamDestroy(c->cs);
        if (c->us)
            cudaStreamDestroy(c->us);
        fg_backend_free(c->cpu);
        free(c->room.p);
        free(c);
    }
    fg_device_free(be->dev);
    free(be);
}

static const fg_backend_iface k_cuda = {
    "cuda", cu_sync, cu_reserve,
    cu_linear, cu_gather, cu_layernorm, cu_rmsnorm, cu_rope, cu_act, cu_add, cu_scale,
    cu_argmax, cu_scatter, cu_kv_store, cu_attention, cu_stats, cu_destroy, cu_heads,
};

static int visible(int ordinal, fg_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || ordinal >= n) {
        cudaGetLastError();
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "--backend cuda: no GPU %d visible (%s)",
                          ordinal, e == cudaSuccess ? "too few devices" : cudaGetErrorString(e));
    }
    return FG_OK;
}

static int ctx_init(cuda_ctx *c, const fg_backend_cuda_opts *o, fg_err *err)
{
    int rc = ck(cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking), "stream", err);
    if (rc == FG_OK)
        rc = ck(cudaStreamCreateWithFlags(&c->us, cudaStreamNonBlocking), "stream", err);
    /* the per-op staging (cudaMallocAsync) keeps its pool between ops: with the default
     * release threshold of 0 every synchronize hands it back to the driver, and every op
     * (every attention's score buffer) maps it again */
    cudaMemPool_t pool;
    if (rc == FG_OK && cudaDeviceGetDefaultMemPool(&pool, c->ordinal) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    cudaGetLastError();
    for (int i = 0; rc == FG_OK && i < 2; i++) {
        rc = ck(cudaEventCreateWithFlags(&c->sl[i].up, cudaEventDisableTiming), "event", err);
        if (rc == FG_OK)
            rc = ck(cudaEventCreateWithFlags(&c->sl[i].done, cudaEventDisableTiming), "event",
                    err);
        if (rc == FG_OK) /* "done" before any piece used the slot */
            rc = ck(cudaEventRecord(c->sl[i].done, c->cs), "event", err);
    }
    if (rc == FG_OK && !(c->bl = fg_cublas(err)))
        rc = err ? err->code : FG_ERR_UNSUPPORTED;
    if (rc == FG_OK)
        rc = ckb(c->bl->create(&c->blas), "cublasCreate", err);
    if (rc == FG_OK)
        rc = ckb(c->bl->set_stream(c->blas, c->cs), "cublasSetStream", err);
    fg_backend_cpu_opts co = {o->threads, FG_COMPUTE_F32};
    if (rc == FG_OK)
        rc = fg_backend_cpu_create_opts(&co, &c->cpu, err);
    return rc;
}

extern "C" int fg_backend_cuda_create(const fg_backend_cuda_opts *o, fg_backend **out,
                                      fg_err *err)
{
    *out = NULL;
    if (o->compute == FG_COMPUTE_BF16)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "cuda backend: compute bf16 is the CPU's "
                          "16-bit path; the CUDA backend's is f16");
    int rc = visible(o->device, err);
    if (rc)
        return rc;
    fg_backend *be = (fg_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return fg_err_set(err, FG_ERR_NOMEM, "cuda backend: out of memory");
    }
    be->iface = &k_cuda;
    be->ctx = c;
    c->ordinal = o->device;
    c->compute = o->compute;
    c->cpu_attention = o->cpu_attention;
    rc = fg_device_cuda_create(o->device, &be->dev, err);
    c->dev = be->dev;
    if (rc == FG_OK)
        rc = ctx_init(c, o, err);
    if (rc == FG_OK)
        rc = fg_device_cuda_order_after(be->dev, c->cs, err);
    if (rc) {
        cu_destroy(be);
        return rc;
    }
    *out = be;
    return FG_OK;
}

extern "C" int fg_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int fg_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes,
                                fg_err *err)
{
    *free_bytes = *total_bytes = 0;
    int rc = visible(device, err);
    if (rc)
        return rc;
    size_t f = 0, t = 0;
    cudaSetDevice(device);
    rc = ck(cudaMemGetInfo(&f, &t), "cudaMemGetInfo", err);
    *free_bytes = f;
    *total_bytes = t;
    return rc;
}
