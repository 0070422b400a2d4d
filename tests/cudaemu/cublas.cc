/* cublas.cc - libcublas.so.<major> for the emulated runtime (runtime.cc): the entry points
 * compute/cublas_dl.c resolves, with cuBLAS's argument rules and its column-major GEMM.
 *
 * C = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n, C m x n, all column-major with
 * leading dimensions lda, ldb, ldc; op N or T. Arguments are checked as cuBLAS documents
 * (m, n, k >= 0; lda >= max(1, rows of A as stored); the same for B and C) and every operand's
 * extent must lie inside one device allocation (cuBLAS would read or write past it silently).
 * With beta == 0, C is not read (it may hold NaN). Scalars are host pointers (the default
 * pointer mode), read at the call. GemmEx takes A and B as 16F, 16BF or 32F and C as 32F or
 * the type of A and B, with CUBLAS_COMPUTE_32F (or its TF32/fast variants, computed in f32);
 * other combinations are CUBLAS_STATUS_NOT_SUPPORTED, as in cuBLAS's table. The product is
 * accumulated in f32, l = 0..k-1 in order, on the handle's stream.
 *
 * Batched (cublasSgemmBatched, cublasGemmBatchedEx, the types of Sgemm's and GemmEx's): member i
 * is the GEMM above on Aarray[i], Barray[i], Carray[i], with one m, n, k, lda, ldb, ldc;
 * batchCount >= 0. The pointer arrays are device memory (batchCount pointers each), written by
 * the stream's earlier work, so they are read when the call runs on the stream, not at the
 * call: a member whose operand is not inside one device allocation, or whose C shares an element
 * with another member's C (cuBLAS computes the members independently, in any order), stops the
 * program with a message, as the GPU would fault or race.
 *
 * fgemu_cublas_calls() counts the GEMM calls accepted (one per call, batched or not), for a test
 * to see how many a Linear issued.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "fgemu_int.h"

#define API extern "C" __attribute__((visibility("default")))

struct cublasContext {
    cudaStream_t stream;
};

namespace {

struct gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *a, *b;
    void *c;
    cudaDataType at, bt, ct;
    int lda, ldb, ldc;
};

size_t esize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float load(const void *p, cudaDataType t, size_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    default: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    }
}

void store(void *p, cudaDataType t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = v; break;
    case CUDA_R_16F: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    }
}

void compute(const gemm *g)
{
    size_t k = (size_t)g->k;
    /* op(A) row i and op(B) column j as contiguous floats: op(A)(i, l) is A[i + l lda] (N) or
     * A[l + i lda] (T); op(B)(l, j) is B[l + j ldb] (N) or B[j + l ldb] (T) */
    float *bt = (float *)malloc(sizeof(float) * (k ? k : 1) * (size_t)g->n);
    float *ar = (float *)malloc(sizeof(float) * (k ? k : 1));
    for (int j = 0; j < g->n; j++)
        for (size_t l = 0; l < k; l++)
            bt[(size_t)j * k + l] = load(g->b, g->bt, g->tb == CUBLAS_OP_N
                                                          ? l + (size_t)j * g->ldb
                                                          : (size_t)j + l * g->ldb);
    for (int i = 0; i < g->m; i++) {
        for (size_t l = 0; l < k; l++)
            ar[l] = load(g->a, g->at, g->ta == CUBLAS_OP_N ? (size_t)i + l * g->lda
                                                           : l + (size_t)i * g->lda);
        for (int j = 0; j < g->n; j++) {
            const float *bj = bt + (size_t)j * k;
            float s = 0.0f;
            for (size_t l = 0; l < k; l++)
                s += ar[l] * bj[l];
            size_t ci = (size_t)i + (size_t)j * g->ldc;
            float v = g->alpha * s;
            if (g->beta != 0.0f)
                v += g->beta * load(g->c, g->ct, ci);
            store(g->c, g->ct, ci, v);
        }
    }
    free(ar);
    free(bt);
}

void run(void *arg)
{
    gemm *g = (gemm *)arg;
    compute(g);
    delete g;
}

std::atomic<unsigned long long> g_calls{0};

bool op_ok(cublasOperation_t o) { return o == CUBLAS_OP_N || o == CUBLAS_OP_T; }

/* rows x cols column-major with leading dimension ld: its extent in bytes */
bool inside(const void *p, int rows, int cols, int ld, size_t es, const char *what)
{
    if (rows == 0 || cols == 0)
        return true;
    size_t n = ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * es;
    if (fgemu_device_range(p, n))
        return true;
    fprintf(stderr, "fgemu: cublas gemm: %s (%d x %d, ld %d) is not inside one device "
            "allocation\n", what, rows, cols, ld);
    return false;
}

/* op(A) and op(B) as stored: rows and columns */
void stored(const gemm &g, int *ar, int *ac, int *br, int *bc)
{
    *ar = g.ta == CUBLAS_OP_N ? g.m : g.k, *ac = g.ta == CUBLAS_OP_N ? g.k : g.m;
    *br = g.tb == CUBLAS_OP_N ? g.k : g.n, *bc = g.tb == CUBLAS_OP_N ? g.n : g.k;
}

/* The arguments every GEMM call shares (the operands' pointers aside). */
cublasStatus_t args_ok(cublasHandle_t h, const gemm &g)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(g.ta) || !op_ok(g.tb) || g.m < 0 || g.n < 0 || g.k < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    int ar, ac, br, bc;
    stored(g, &ar, &ac, &br, &bc);
    if (g.lda < (ar > 1 ? ar : 1) || g.ldb < (br > 1 ? br : 1) || g.ldc < (g.m > 1 ? g.m : 1)) {
        fprintf(stderr, "fgemu: cublas gemm: a leading dimension is below its rows (m %d n %d "
                "k %d lda %d ldb %d ldc %d)\n", g.m, g.n, g.k, g.lda, g.ldb, g.ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* g's operands each inside one device allocation (and not empty) */
bool operands_inside(const gemm &g)
{
    int ar, ac, br, bc;
    stored(g, &ar, &ac, &br, &bc);
    return inside(g.c, g.m, g.n, g.ldc, esize(g.ct), "C") &&
           (!g.k || (inside(g.a, ar, ac, g.lda, esize(g.at), "A") &&
                     inside(g.b, br, bc, g.ldb, esize(g.bt), "B")));
}

cublasStatus_t submit(cublasHandle_t h, gemm g)
{
    cublasStatus_t st = args_ok(h, g);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    g_calls++;
    if (g.m == 0 || g.n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!operands_inside(g))
        return CUBLAS_STATUS_INVALID_VALUE;
    fgemu_enqueue(h->stream, run, new gemm(g));
    return CUBLAS_STATUS_SUCCESS;
}

/* A batched call: the shared arguments, and the pointer arrays read on the stream. */
struct batch {
    gemm g;
    const void *const *a, *const *b;
    void *const *c;
    int count;
};

/* Do members i and j's C (m x n, ld ldc, elements of es bytes) share an element? Element (r, q)
 * of C_i is at byte c_i + es (r + q ldc); with d = c_j - c_i they meet when d - es (e + t ldc)
 * is within (-es, es) for some e in (-m, m) and t in (-n, n): when |d / es - t ldc| < m for
 * the t nearest d / (es ldc) (ldc >= m). */
bool c_meet(const gemm &g, const void *ci, const void *cj)
{
    double d = ((double)(uintptr_t)cj - (double)(uintptr_t)ci) / (double)esize(g.ct);
    double t0 = floor(d / g.ldc);
    for (double t = t0; t <= t0 + 1; t++)
        if (fabs(t) < g.n && fabs(d - t * g.ldc) < g.m)
            return true;
    return false;
}

[[noreturn]] void fault(const char *what, int i)
{
    fprintf(stderr, "fgemu: cublas batched gemm: member %d: %s\n", i, what);
    abort();
}

void run_batch(void *arg)
{
    batch *b = (batch *)arg;
    for (int i = 0; i < b->count; i++) {
        gemm g = b->g;
        g.a = b->a[i], g.b = b->b[i], g.c = b->c[i];
        if (!operands_inside(g))
            fault("an operand is not inside one device allocation", i);
        for (int j = 0; j < i; j++)
            if (c_meet(g, b->c[j], g.c))
                fault("its C shares elements with another member's", i);
    }
    for (int i = 0; i < b->count; i++) {
        gemm g = b->g;
        g.a = b->a[i], g.b = b->b[i], g.c = b->c[i];
        compute(&g);
    }
    delete b;
}

cublasStatus_t submit_batch(cublasHandle_t h, const gemm &g, const void *const *a,
                            const void *const *b, void *const *c, int count)
{
    cublasStatus_t st = args_ok(h, g);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t bytes = sizeof(void *) * (size_t)count;
    if (count && (!fgemu_device_range(a, bytes) || !fgemu_device_range(b, bytes) ||
                  !fgemu_device_range(c, bytes))) {
        fprintf(stderr, "fgemu: cublas batched gemm: a pointer array (%d pointers) is not "
                "inside one device allocation\n", count);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    g_calls++;
    if (g.m == 0 || g.n == 0 || count == 0)
        return CUBLAS_STATUS_SUCCESS;
    fgemu_enqueue(h->stream, run_batch, new batch{g, a, b, c, count});
    return CUBLAS_STATUS_SUCCESS;
}

bool ex_types_ok(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute)
{
    bool f32 = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
               compute == CUBLAS_COMPUTE_32F_FAST_16F || compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    bool types = at == bt && (at == CUDA_R_16F || at == CUDA_R_16BF || at == CUDA_R_32F) &&
                 (ct == CUDA_R_32F || ct == at);
    if (!f32 || !types)
        fprintf(stderr, "fgemu: cublasGemm(Batched)Ex: types %d x %d -> %d with compute type "
                "%d: not a combination cuBLAS supports\n", (int)at, (int)bt, (int)ct,
                (int)compute);
    return f32 && types;
}

} // namespace

API cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    int n = 0;
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    *h = new cublasContext{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaDeviceSynchronize();
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const float *alpha, const float *a,
                                  int lda, const float *b, int ldb, const float *beta, float *c,
                                  int ldc)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return submit(h, gemm{ta, tb, m, n, k, *alpha, *beta, a, b, c, CUDA_R_32F, CUDA_R_32F,
                          CUDA_R_32F, lda, ldb, ldc});
}

API cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                int m, int n, int k, const void *alpha, const void *a,
                                cudaDataType at, int lda, const void *b, cudaDataType bt,
                                int ldb, const void *beta, void *c, cudaDataType ct, int ldc,
                                cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!ex_types_ok(at, bt, ct, compute))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return submit(h, gemm{ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, a, b, c,
                          at, bt, ct, lda, ldb, ldc});
}

API cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      const float *alpha, const float *const a[], int lda,
                                      const float *const b[], int ldb, const float *beta,
                                      float *const c[], int ldc, int count)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return submit_batch(h, gemm{ta, tb, m, n, k, *alpha, *beta, nullptr, nullptr, nullptr,
                                CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, lda, ldb, ldc},
                        (const void *const *)a, (const void *const *)b, (void *const *)c,
                        count);
}

API cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                       cublasOperation_t tb, int m, int n, int k,
                                       const void *alpha, const void *const a[],
                                       cudaDataType at, int lda, const void *const b[],
                                       cudaDataType bt, int ldb, const void *beta,
                                       void *const c[], cudaDataType ct, int ldc, int count,
                                       cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!ex_types_ok(at, bt, ct, compute))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return submit_batch(h, gemm{ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta,
                                nullptr, nullptr, nullptr, at, bt, ct, lda, ldb, ldc},
                        a, b, c, count);
}

/* GEMM calls accepted so far, process-wide (batched or not, one each). */
extern "C" __attribute__((visibility("default"))) unsigned long long fgemu_cublas_calls(void)
{
    return g_calls.load();
}
