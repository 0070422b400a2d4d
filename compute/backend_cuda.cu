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
 * what it copies in waits for them; the Linear's host pieces and the gather's are still waited for
 * before their owner gets them back (released), and a kernel's fault shows at the next
 * synchronization. (Each op used to wait for its kernels; what that cost on a GPU is not yet
 * measured: gpu-check.sh's next run.)
 *
 * Linear: y[m, n] = x[m, k] W^T + b, W in pieces. Column-major cuBLAS sees row-major W [rows, k]
 * as W^T, so rows [first, first + rows) of W are gemm(T, N, rows, m, k) into y's columns
 * [first, first + rows) with ld n. A piece multiplies as stored (F32 by cublasSgemm, default
 * math: no TF32; F16/BF16 under FG_COMPUTE_F16 by cublasGemmEx, the activations rounded once
 * per Linear to the piece's type, F32 accumulation and output) or is decoded on the device first
 * (Q4/Q8 to F16 under FG_COMPUTE_F16, quant_cuda.h; F16/BF16/Q4/Q8 widened to f32 otherwise,
 * which matches the CPU backend to accumulation order).
 * Pieces are acquired in order. Consecutive pieces in device memory of one kind (as stored in
 * one type, or decoded to one) form a run, held (at most RUN_MAX) and multiplied together: one
 * GEMM when they are adjacent in device memory (each next piece's rows right after the last's:
 * a tensor in one device buffer), else one batched GEMM (cublasGemmBatchedEx or
 * cublasSgemmBatched: member j reads piece j and writes y + first_j, the pointer arrays uploaded
 * once per run from pinned room on the compute stream) over the pieces of the run's most
 * common row count and one GEMM for each other (the odd-sized last piece); pieces to decode are
 * decoded one after the other into one device buffer (c->dq) and multiplied by one GEMM per
 * DQ_RUN_MAX bytes of it. The bias is added once per run. The run goes back to its owner as
 * soon as its GEMMs are queued (the device's copies are ordered after the compute stream). On
 * an H200 a Linear on GPU-resident F16 pieces of 4 MiB, one GEMM a piece, ran at 14% of one
 * cuBLAS call over the whole weight at 512 rows and 8% at 64 (bench_gpu measures the runs:
 * gpu-check.sh's next run).
 * A piece in host memory ends the run and streams: it uploads on the upload stream into one of
 * two slots while the previous piece multiplies (the compute stream waits on the upload's event;
 * the slot is reused only after the compute stream's event for its previous piece), multiplies
 * on its own, and goes back to its owner once uploaded, before the next piece is acquired (a
 * host piece is never held beside another: backend.h fg_weight).
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
#define RUN_MAX 64              /* device pieces of a Linear held at once: one run's GEMMs */
#define DQ_RUN_MAX (64u << 20)  /* bytes of decoded weights one GEMM of a run covers at most */

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
    void *ptr_h, *ptr_d;      /* a Linear's batched GEMM pointer arrays: pinned, device */
    size_t ptr_cap, ptr_dcap;
    cudaEvent_t ptr_ev;       /* the last upload from ptr_h */
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

/* How a piece multiplies: its bytes as stored, by cublasSgemm (F32) or cublasGemmEx (F16 and
 * BF16 under FG_COMPUTE_F16), or decoded first into c->dq (Q4/Q8 to F16 under FG_COMPUTE_F16;
 * F16/BF16/Q4/Q8 to f32 otherwise). Consecutive pieces of one kind form a run. */
enum { K_F32, K_F16, K_BF16, K_DEC16, K_DEC32 };

static int piece_kind(const cuda_ctx *c, int id)
{
    int f16 = c->compute == FG_COMPUTE_F16;
    switch (id) {
    case FG_CODEC_F32: return K_F32;
    case FG_CODEC_F16: return f16 ? K_F16 : K_DEC32;
    case FG_CODEC_BF16: return f16 ? K_BF16 : K_DEC32;
    default: return f16 ? K_DEC16 : K_DEC32;
    }
}

static int kind_decoded(int kind) { return kind == K_DEC16 || kind == K_DEC32; }

/* bytes of one value of the weight as the GEMM reads it */
static size_t kind_esize(int kind) { return kind == K_F32 || kind == K_DEC32 ? 4 : 2; }

/* One Linear call over pieces. */
typedef struct lin {
    cuda_ctx *c;
    const fg_weight *w;
    const float *x, *bias;    /* on the device */
    float *y;
    uint32_t m, n, k;
    int have16;               /* c->x16 holds x in F16 (1) or BF16 (2) */
    uint32_t hosts;           /* host pieces streamed so far (slot hosts % 2) */
    uint32_t ptr_at;          /* pointer-array entries this call's batches used */
    int ptrs_ready;           /* the previous call's pointer upload is done */
    fg_wpiece run[RUN_MAX];   /* device pieces held: rows [run[0].first, run_end) */
    uint32_t n_run;
    int run_kind;
    uint64_t run_end;
} lin;

/* x in the 16-bit type of a `kind` GEMM (once per Linear and type). */
static int cast_x(lin *l, int kind, fg_err *err)
{
    cuda_ctx *c = l->c;
    int want = kind == K_BF16 ? 2 : 1;
    if (kind == K_F32 || kind == K_DEC32 || l->have16 == want)
        return FG_OK;
    size_t cnt = (size_t)l->m * l->k;
    int rc = grow(c, &c->x16, &c->x16_cap, cnt * 2, err);
    if (rc == FG_OK)
        k_to16<<<grid_of(cnt, 256), 256, 0, c->cs>>>(l->x, c->x16, cnt, want == 2);
    l->have16 = want;
    return rc;
}

/* One GEMM: `rows` rows of the weight at w (device, kind's type, ld k) into y's columns
 * [first, first + rows). */
static int gemm_one(lin *l, int kind, const void *w, uint64_t first, uint64_t rows, fg_err *err)
{
    cuda_ctx *c = l->c;
    const float one = 1.0f, zero = 0.0f;
    int k = (int)l->k, n = (int)l->n;
    float *yc = l->y + first;
    cublasStatus_t s;
    if (kind == K_F32 || kind == K_DEC32) {
        s = c->bl->sgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)l->m, k, &one,
                         (const float *)w, k, l->x, k, &zero, yc, n);
    } else {
        cudaDataType t = kind == K_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        s = c->bl->gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)l->m, k, &one, w,
                           t, k, c->x16, t, k, &zero, yc, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
    }
    return ckb(s, "gemm", err);
}

/* Room for this call's pointer arrays (3 per piece, pinned and on the device); the first use
 * in a call waits for the previous call's upload from the pinned side. */
static int ptrs_room(lin *l, fg_err *err)
{
    cuda_ctx *c = l->c;
    size_t need = 3 * (size_t)l->w->n_pieces * sizeof(void *);
    int rc = l->ptrs_ready ? FG_OK : ck(cudaEventSynchronize(c->ptr_ev), "event", err);
    l->ptrs_ready = 1;
    if (rc || need <= c->ptr_cap)
        return rc;
    cudaFreeHost(c->ptr_h);
    c->ptr_h = NULL;
    c->ptr_cap = 0;
    rc = grow(c, &c->ptr_d, &c->ptr_dcap, need, err); /* (drains the compute stream) */
    if (rc == FG_OK)
        rc = ck(cudaHostAlloc(&c->ptr_h, need, cudaHostAllocDefault), "cudaHostAlloc", err);
    if (rc == FG_OK)
        c->ptr_cap = need;
    return rc;
}

/* Pieces ps[j] with ps[j].n == rows (cnt >= 2, not adjacent) as one batched GEMM: member j
 * reads ps[j]'s rows and writes y's columns [ps[j].first, + rows), ld n. */
static int gemm_batch(lin *l, int kind, const fg_wpiece *const *ps, uint32_t cnt, uint64_t rows,
                      fg_err *err)
{
    cuda_ctx *c = l->c;
    int rc = ptrs_room(l, err);
    if (rc)
        return rc;
    const void *b = kind == K_F32 ? (const void *)l->x : c->x16;
    void **h = (void **)c->ptr_h + l->ptr_at, **d = (void **)c->ptr_d + l->ptr_at;
    for (uint32_t j = 0; j < cnt; j++) {
        h[j] = (void *)ps[j]->data;
        h[cnt + j] = (void *)b;
        h[2 * cnt + j] = l->y + ps[j]->first;
    }
    l->ptr_at += 3 * cnt;
    size_t bytes = 3 * (size_t)cnt * sizeof(void *);
    rc = ck(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, c->cs), "pointer upload", err);
    c->st.link_bytes[0] += bytes;
    if (rc == FG_OK)
        rc = ck(cudaEventRecord(c->ptr_ev, c->cs), "event", err);
    if (rc)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    int k = (int)l->k, n = (int)l->n, m = (int)l->m;
    cublasStatus_t s;
    if (kind == K_F32) {
        s = c->bl->sgemm_batched(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, m, k, &one,
                                 (const float *const *)d, k, (const float *const *)(d + cnt), k,
                                 &zero, (float *const *)(d + 2 * cnt), n, (int)cnt);
    } else {
        cudaDataType t = kind == K_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        s = c->bl->gemm_batched_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, m, k, &one,
                                   (const void *const *)d, t, k, (const void *const *)(d + cnt),
                                   t, k, &zero, (void *const *)(d + 2 * cnt), CUDA_R_32F, n,
                                   (int)cnt, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    return ckb(s, "batched gemm", err);
}

/* Pieces of a kind multiplied as stored: one GEMM when they are adjacent in device memory (each
 * next piece's rows right after the last one's), else one batched GEMM over the pieces of the
 * most common row count and one GEMM for each other (the odd-sized last piece). */
static int gemm_stored(lin *l, int kind, const fg_wpiece *ps, uint32_t cnt, fg_err *err)
{
    size_t row = (size_t)l->k * kind_esize(kind);
    uint64_t rows = ps[0].n;
    int adjacent = 1;
    for (uint32_t j = 1; j < cnt; j++) {
        adjacent &= ps[j].data == (const char *)ps[j - 1].data + ps[j - 1].n * row;
        rows += ps[j].n;
    }
    if (adjacent)
        return gemm_one(l, kind, ps[0].data, ps[0].first, rows, err);
    uint64_t common = ps[0].n;
    for (uint32_t j = 0, best = 0; j < cnt; j++) {
        uint32_t same = 0;
        for (uint32_t i = 0; i < cnt; i++)
            same += ps[i].n == ps[j].n;
        if (same > best)
            best = same, common = ps[j].n;
    }
    const fg_wpiece *members[RUN_MAX];
    uint32_t nm = 0;
    int rc = FG_OK;
    for (uint32_t j = 0; j < cnt; j++)
        if (ps[j].n == common)
            members[nm++] = &ps[j];
    if (nm >= 2)
        rc = gemm_batch(l, kind, members, nm, common, err);
    for (uint32_t j = 0; rc == FG_OK && j < cnt; j++)
        if (nm < 2 || ps[j].n != common)
            rc = gemm_one(l, kind, ps[j].data, ps[j].first, ps[j].n, err);
    return rc;
}

/* Piece p (its bytes on the device at p->data) decoded into dst: 16 bits (K_DEC16) or f32. */
static int decode_piece(lin *l, int kind, const fg_wpiece *p, void *dst, fg_err *err)
{
    cuda_ctx *c = l->c;
    uint64_t cnt = p->n * l->k;
    int id = p->codec.id;
    if (id == FG_CODEC_F16 || id == FG_CODEC_BF16) { /* widened to f32 */
        k_from16<<<grid_of(cnt, 256), 256, 0, c->cs>>>((const uint16_t *)p->data, (float *)dst,
                                                       cnt, id == FG_CODEC_BF16);
        return FG_OK;
    }
    fg_qview v;
    int rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, p->n, &v, err);
    return rc ? rc : fg_quant_cuda_decode(&p->codec, &v, p->data, p->len, dst,
                                          kind == K_DEC16 ? FG_CODEC_F16 : FG_CODEC_F32, l->k,
                                          c->cs, err);
}

/* Pieces decoded one after the other into c->dq, one GEMM over each group of at most
 * DQ_RUN_MAX decoded bytes (a piece at least). */
static int gemm_decoded(lin *l, int kind, const fg_wpiece *ps, uint32_t cnt, fg_err *err)
{
    cuda_ctx *c = l->c;
    size_t row = (size_t)l->k * kind_esize(kind), most = 0;
    for (uint32_t j0 = 0, j; j0 < cnt; j0 = j) { /* the largest group */
        size_t bytes = ps[j0].n * row;
        for (j = j0 + 1; j < cnt && bytes + ps[j].n * row <= DQ_RUN_MAX; j++)
            bytes += ps[j].n * row;
        most = bytes > most ? bytes : most;
    }
    int rc = grow(c, &c->dq, &c->dq_cap, most, err);
    for (uint32_t j0 = 0, j; rc == FG_OK && j0 < cnt; j0 = j) {
        uint64_t rows = 0;
        for (j = j0; rc == FG_OK && j < cnt && (j == j0 || (rows + ps[j].n) * row <= DQ_RUN_MAX);
             j++) {
            rc = decode_piece(l, kind, &ps[j], (char *)c->dq + rows * row, err);
            rows += ps[j].n;
        }
        if (rc == FG_OK)
            rc = gemm_one(l, kind, c->dq, ps[j0].first, rows, err);
    }
    return rc;
}

/* Pieces ps (consecutive rows, one kind, bytes on the device) into y's columns, then the bias
 * over them once, on the compute stream. */
static int multiply(lin *l, int kind, const fg_wpiece *ps, uint32_t cnt, fg_err *err)
{
    cuda_ctx *c = l->c;
    uint64_t rows = 0;
    for (uint32_t j = 0; j < cnt; j++) {
        rows += ps[j].n;
        c->st.decoded_bytes += ps[j].codec.id != FG_CODEC_F32 ? ps[j].n * l->k * 4 : 0;
    }
    int rc = cast_x(l, kind, err);
    if (rc == FG_OK)
        rc = kind_decoded(kind) ? gemm_decoded(l, kind, ps, cnt, err)
                                : gemm_stored(l, kind, ps, cnt, err);
    if (rc == FG_OK && l->bias)
        k_bias<<<grid_of((size_t)l->m * rows, 256), 256, 0, c->cs>>>(l->y, l->bias, l->m, rows,
                                                                   l->n, ps[0].first);
    return rc;
}

/* The held run multiplied, then given back: its GEMMs are queued, and whatever next writes
 * that memory is a device copy, ordered after the compute stream (fg_device_cuda_order_after),
 * or a kernel behind them on the compute stream. */
static int run_flush(lin *l, int rc, fg_err *err)
{
    if (rc == FG_OK && l->n_run)
        rc = multiply(l, l->run_kind, l->run, l->n_run, err);
    for (uint32_t j = 0; j < l->n_run; j++) {
        int rc2 = l->w->release(l->w->ctx, &l->run[j], rc ? NULL : err);
        rc = rc ? rc : rc2;
    }
    l->n_run = 0;
    return rc;
}

/* A host piece: uploaded on the upload stream into slot (hosts % 2) once the GEMM that last
 * read the slot is done, multiplied after its upload, and given back once uploaded (after a
 * failure too, while a queued upload may still read it), so the next piece's upload overlaps
 * this one's GEMM. */
static int host_piece(lin *l, fg_wpiece *p, int kind, fg_err *err)
{
    cuda_ctx *c = l->c;
    slot *s = &c->sl[l->hosts++ % 2];
    int queued = 0, rc = grow(c, &s->buf, &s->cap, p->len, err);
    if (rc == FG_OK)
        rc = ck(cudaStreamWaitEvent(c->us, s->done, 0), "wait", err);
    if (rc == FG_OK) {
        rc = upload(c, s->buf, p->data, p->len, c->us, "weight upload", err);
        queued = rc == FG_OK;
    }
    c->st.link_bytes[0] += p->len;
    if (rc == FG_OK)
        rc = ck(cudaEventRecord(s->up, c->us), "event", err);
    if (rc == FG_OK)
        rc = ck(cudaStreamWaitEvent(c->cs, s->up, 0), "wait", err);
    fg_wpiece q = *p;
    q.data = s->buf;
    if (rc == FG_OK)
        rc = multiply(l, kind, &q, 1, err);
    if (rc == FG_OK) /* the slot is free again once this GEMM has read it */
        rc = ck(cudaEventRecord(s->done, c->cs), "event", err);
    if (rc == FG_OK)
        rc = ck(cudaEventSynchronize(s->up), "event", err);
    else if (queued)
        cudaStreamSynchronize(c->us);
    int rc2 = l->w->release(l->w->ctx, p, rc ? NULL : err);
    return rc ? rc : rc2;
}

/* The rows as stored must be there (a GEMM past a piece reads another's memory). */
static int piece_ok(const lin *l, const fg_wpiece *p, fg_err *err)
{
    int rc = fgb_check_piece(p, l->n, l->k, err), id = p->codec.id;
    size_t es = id == FG_CODEC_F32 ? 4 : id == FG_CODEC_F16 || id == FG_CODEC_BF16 ? 2 : 0;
    if (rc == FG_OK && p->len < p->n * l->k * es)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "weight piece rows %llu..%llu: %zu bytes, not "
                        "%llu rows of %u", (unsigned long long)p->first,
                        (unsigned long long)(p->first + p->n), p->len,
                        (unsigned long long)p->n, l->k);
    return rc;
}

/* Piece i: a device piece joins the run (held) when it continues it (its kind, its next rows,
 * room), else the run is flushed first; a host piece flushes the run and streams. */
static int linear_piece(lin *l, uint32_t i, fg_err *err)
{
    fg_wpiece p;
    int rc = l->w->acquire(l->w->ctx, i, &p, err);
    if (rc)
        return run_flush(l, rc, err);
    rc = piece_ok(l, &p, err);
    int kind = piece_kind(l->c, p.codec.id);
    if (rc == FG_OK && is_dev(p.data)) {
        if (l->n_run && (kind != l->run_kind || p.first != l->run_end || l->n_run == RUN_MAX))
            rc = run_flush(l, rc, err);
        if (rc == FG_OK) {
            l->run[l->n_run++] = p;
            l->run_kind = kind;
            l->run_end = p.first + p.n;
            return FG_OK;
        }
    } else {
        rc = run_flush(l, rc, err);
    }
    if (rc == FG_OK)
        return host_piece(l, &p, kind, err);
    int rc2 = l->w->release(l->w->ctx, &p, NULL);
    (void)rc2;
    return rc;
}

static int cu_linear(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                     float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    op o = op_begin(be);
    void *dx = NULL, *db = NULL, *dy = NULL, *dw = NULL;
    int rc = opnd(&o, x, (size_t)m * k * 4, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, bias, (size_t)n * 4, 1, 0, &db, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, (size_t)m * n * 4, 0, 1, &dy, err);
    if (rc == FG_OK && w->f32)
        rc = opnd(&o, w->f32, (size_t)n * k * 4, 1, 0, &dw, err);
    lin l; /* (on the stack: no allocation in the forward pass) */
    memset(&l, 0, sizeof l);
    l.c = o.c, l.w = w, l.x = (const float *)dx, l.bias = (const float *)db, l.y = (float *)dy;
    l.m = m, l.n = n, l.k = k, l.run_kind = -1;
    if (rc == FG_OK && w->f32) {
        fg_wpiece p;
        memset(&p, 0, sizeof p);
        p.data = dw;
        p.len = (size_t)n * k * 4;
        p.codec = fg_codec_float(FG_CODEC_F32);
        p.n = n;
        rc = multiply(&l, K_F32, &p, 1, err);
    }
    for (uint32_t i = 0; rc == FG_OK && !w->f32 && i < w->n_pieces; i++)
        rc = linear_piece(&l, i, err);
    rc = run_flush(&l, rc, err);
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

/* Rows [0, ctx) of `width` values (row_bytes each, staged or on the device at src) decoded to
 * f32 into dst (device room for ctx x width floats). */
static int kv_decode_plane(op *o, const fg_codec *c, const void *src, uint32_t width,
                           size_t row_bytes, uint32_t ctx, void *dst, fg_err *err)
{
    uint64_t dims[2] = {ctx, width};
    fg_qview q;
    int rc = fg_codec_qview(c, 2, dims, ctx, &q, err);
    return rc ? rc : fg_quant_cuda_decode(c, &q, src, (size_t)ctx * row_bytes, dst, FG_CODEC_F32,
                                          width, o->c->cs, err);
}

/* The cache's rows [0, ctx) as f32 on the device (decoded into staged room when quantized), *v
 * at the first value (v_off into the value rows; rows the keys' memory are read once). */
static int kv_f32(op *o, const fg_attn_op *a, uint32_t ctx, const float **k, const float **v,
                  fg_err *err)
{
    void *kb, *vb;
    uint32_t at, vw = fgb_attn_vwidth(a);
    int same = fgb_attn_v_is_k(a);
    fg_kv_view vrows = a->kv;
    vrows.row_bytes = fgb_attn_vrow_bytes(a);
    int rc = kv_side(o, a->kv.k, &a->kv, 0, ctx, 1, 0, &kb, &at, err);
    vb = kb;
    if (rc == FG_OK && !same)
        rc = kv_side(o, a->kv.v, &vrows, 0, ctx, 1, 0, &vb, &at, err);
    if (rc || a->kv.codec.id == FG_CODEC_F32) {
        *k = (const float *)kb;
        *v = (const float *)vb + a->v_off;
        return rc;
    }
    void *kf, *vf = NULL;
    rc = scratch(o, a->k_tmp, (size_t)ctx * a->kv.width * 4, &kf, err);
    if (rc == FG_OK && !same)
        rc = scratch(o, a->v_tmp, (size_t)ctx * vw * 4, &vf, err);
    if (rc == FG_OK)
        rc = kv_decode_plane(o, &a->kv.codec, kb, a->kv.width, a->kv.row_bytes, ctx, kf, err);
    if (rc == FG_OK && !same)
        rc = kv_decode_plane(o, &a->kv.codec, vb, vw, vrows.row_bytes, ctx, vf, err);
    *k = (const float *)kf;
    *v = (const float *)(same ? kf : vf) + a->v_off;
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
    return 4 * ((size_t)adec_dots(p->hpb, p->tk, p->cpr, p->kpp, p->v_dim) +
                (size_t)p->hpb * p->tk + 3 * p->hpb);
}

/* The split kernel's parameters for op a (all but the pointers and the codec's kernel), or 0
 * when it does not cover a (more than 4 queries, top-k, a head_dim not a multiple of 8 or over
 * 1024, values wider than the keys or not a multiple of 8, a codec it does not read):
 * k_attention runs those. A thread owns the same 8 columns of a key row and of a value row
 * (fewer value chunks: the threads past them read no values). */
static int adec_plan(const fg_attn_op *a, attn_dec_k *p)
{
    const fg_codec *c = &a->kv.codec;
    uint32_t d = a->head_dim, grp = a->n_heads / a->n_kv_heads, vd = fgb_attn_vdim(a);
    if (a->n_q > 4 || (a->keep > 0.0f && a->keep < 1.0f) || d % 8 || !d || d / 8 > ADEC_MAX_T ||
        vd % 8 || vd > d)
        return 0;
    memset(p, 0, sizeof *p);
    p->v_row_bytes = fgb_attn_vrow_bytes(a);
    if (c->id == FG_CODEC_Q4 || c->id == FG_CODEC_Q8) {
        uint64_t dims[2] = {1, a->kv.width};
        fg_qview v;
        if (c->group_axis != 1 || c->group_size % 8 || fg_codec_qview(c, 2, dims, 1, &v, NULL) ||
            v.n_groups * v.group_bytes != a->kv.row_bytes)
            return 0;
        p->G = c->group_size;
        p->gbytes = v.group_bytes;
        p->f16scale = c->scale_dtype == FG_SCALE_F16;
        p->hdr = p->f16scale ? 4 : 8;
        p->hi_first = c->nibble_order == FG_NIBBLE_HI_FIRST;
        p->v_at = (size_t)a->v_off / c->group_size * v.group_bytes; /* (a whole group in) */
    } else if (c->id != FG_CODEC_F32 || a->kv.row_bytes % 16 || p->v_row_bytes % 16 ||
               a->v_off % 4 || ((uintptr_t)a->kv.k | (uintptr_t)a->kv.v) % 16) {
        return 0; /* 16-byte loads */
    } else {
        p->v_at = (size_t)a->v_off * 4;
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
    p->v_dim = vd, p->cprv = vd / 8;
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
    fg_kv_view vrows = a->kv;
    vrows.row_bytes = p->v_row_bytes;
    int rc = kv_side(o, a->kv.k, &a->kv, 0, ctx, 1, 0, &kb, &at, err);
    vb = kb; /* the values in the keys' rows (MLA) cross the link once */
    if (rc == FG_OK && !fgb_attn_v_is_k(a))
        rc = kv_side(o, a->kv.v, &vrows, 0, ctx, 1, 0, &vb, &at, err);
    size_t n = (size_t)a->n_q * a->n_heads * p->n_split * (p->v_dim + 2) * 4;
    if (rc == FG_OK) /* stream-ordered, not staged: an op on device operands stays queued */
        rc = ck(cudaMallocAsync(&part, n, o->c->cs), "cudaMallocAsync", err);
    if (rc)
        return rc;
    p->q = dq, p->k = (const uint8_t *)kb, p->v = (const uint8_t *)vb + p->v_at;
    p->valid = dvalid;
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
        p->part, dsinks, dout, a->n_heads, p->v_dim, p->n_split);
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
    uint32_t ctx = a->q_pos0 + a->n_q, qw = a->n_heads * a->head_dim, vd = fgb_attn_vdim(a);
    const float *k = NULL, *v = NULL;
    void *dq, *dvalid, *dsinks = NULL, *dout, *sc = NULL;
    rc = opnd(&o, a->q, (size_t)a->n_q * qw * 4, 1, 0, &dq, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->valid, a->kv.cap, 1, 0, &dvalid, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->sinks, (size_t)a->n_heads * 4, 1, 0, &dsinks, err);
    if (rc == FG_OK)
        rc = opnd(&o, a->out, (size_t)a->n_q * a->n_heads * vd * 4, 0, 1, &dout, err);
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
                (const float *)dsinks, fgb_attn_vwidth(a), vd};
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
        cudaFree(c->ptr_d);
        cudaFreeHost(c->ptr_h);
        if (c->ptr_ev)
            cudaEventDestroy(c->ptr_ev);
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
    if (rc == FG_OK)
        rc = ck(cudaEventCreateWithFlags(&c->ptr_ev, cudaEventDisableTiming), "event", err);
    if (rc == FG_OK) /* no pointer upload pending */
        rc = ck(cudaEventRecord(c->ptr_ev, c->cs), "event", err);
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
