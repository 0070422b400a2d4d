/* cuBLAS loaded on first use (dlopen), not at program start.
 *
 * Linking libcublas costs every process about 216 MB of resident memory at load (its relocations),
 * GPU or not: that alone broke fg-infer's --ram-budget on CPU-only runs. The CUDA backend is the
 * only user, so it resolves the seven entry points it calls when a CUDA backend is created. */
#ifndef FG_CUBLAS_DL_H
#define FG_CUBLAS_DL_H

#include <cublas_v2.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cublas_fns {
    cublasStatus_t (*create)(cublasHandle_t *h);
    cublasStatus_t (*destroy)(cublasHandle_t h);
    cublasStatus_t (*set_stream)(cublasHandle_t h, cudaStream_t s);
    cublasStatus_t (*sgemm)(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const float *alpha, const float *a, int lda,
                            const float *b, int ldb, const float *beta, float *c, int ldc);
    cublasStatus_t (*gemm_ex)(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const void *alpha, const void *a,
                              cudaDataType at, int lda, const void *b, cudaDataType bt, int ldb,
                              const void *beta, void *c, cudaDataType ct, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t algo);
    /* batched: member i is C[i] = alpha op(A[i]) op(B[i]) + beta C[i], the pointer arrays
     * (batch of them each) in device memory */
    cublasStatus_t (*sgemm_batched)(cublasHandle_t h, cublasOperation_t ta,
                                    cublasOperation_t tb, int m, int n, int k,
                                    const float *alpha, const float *const a[], int lda,
                                    const float *const b[], int ldb, const float *beta,
                                    float *const c[], int ldc, int batch);
    cublasStatus_t (*gemm_batched_ex)(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      const void *alpha, const void *const a[], cudaDataType at,
                                      int lda, const void *const b[], cudaDataType bt, int ldb,
                                      const void *beta, void *const c[], cudaDataType ct,
                                      int ldc, int batch, cublasComputeType_t compute,
                                      cublasGemmAlgo_t algo);
} fg_cublas_fns;

/* The process-wide table (loaded once, thread-safe); NULL with err set naming the library or
 * the missing symbol. The library stays loaded until exit. */
const fg_cublas_fns *fg_cublas(fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
