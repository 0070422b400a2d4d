/* test_cudaemu.c - the emulated runtime's own rules (tests/cudaemu/runtime.cc, cublas.cc): the
 * instrument the *_emu tests rely on must keep catching what it claims to catch (cuBLAS's
 * batched GEMMs and its call count included).
 *
 * Linked against the toolkit's libcudart like every CUDA binary; run with LD_LIBRARY_PATH at
 * the emulator (ctest does). Exits 77 under a real runtime (no fgemu_device_range symbol). */
#include <check.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MIB (1024.0 * 1024.0)

START_TEST(memory_rules)
{
    size_t free0, total, free1;
    ck_assert_int_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    unsigned char *d = NULL, h[4096];
    ck_assert_int_eq(cudaMalloc((void **)&d, 4000), cudaSuccess);
    ck_assert_int_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
    ck_assert_uint_ge(free0 - free1, 4000);
    /* never written: 0xff bytes (NaN as floats) */
    ck_assert_int_eq(cudaMemcpy(h, d, 4000, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 4000; i++)
        ck_assert_uint_eq(h[i], 0xff);
    memset(h, 7, sizeof h);
    ck_assert_int_eq(cudaMemcpy(d, h, 4000, cudaMemcpyHostToDevice), cudaSuccess);
    memset(h, 0, sizeof h);
    ck_assert_int_eq(cudaMemcpy(h, d + 3000, 1000, cudaMemcpyDefault), cudaSuccess);
    ck_assert_uint_eq(h[999], 7);
    /* past the allocation's end, the wrong kind, a free of an interior pointer */
    ck_assert_int_eq(cudaMemcpy(d + 3000, h, 1001, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaMemcpy(h, d, 10, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue); /* kept until read */
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    ck_assert_int_eq(cudaFree(d + 16), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaFree(d), cudaSuccess);
    /* more than the device has (FGEMU_DEVICE_MEM) */
    void *big = NULL;
    ck_assert_int_eq(cudaMalloc(&big, total + 1), cudaErrorMemoryAllocation);
    cudaGetLastError();
    /* pinned memory is host memory the device also sees */
    struct cudaPointerAttributes a;
    float *p = NULL;
    ck_assert_int_eq(cudaHostAlloc((void **)&p, 64, cudaHostAllocDefault), cudaSuccess);
    p[3] = 1.0f;
    ck_assert_int_eq(cudaPointerGetAttributes(&a, p), cudaSuccess);
    ck_assert_int_eq(a.type, cudaMemoryTypeHost);
    ck_assert_int_eq(cudaPointerGetAttributes(&a, h), cudaSuccess);
    ck_assert_int_eq(a.type, cudaMemoryTypeUnregistered);
    ck_assert_int_eq(cudaFreeHost(p), cudaSuccess);
}
END_TEST

/* Host code dereferencing device memory dies with a message (where the CPU has protection
 * keys; elsewhere the emulator cannot see it). */
START_TEST(host_touching_device_memory_dies)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int pku = 0;
    while (f && !pku && fgets(line, sizeof line, f))
        pku = strncmp(line, "flags", 5) == 0 && strstr(line, " pku") != NULL;
    if (f)
        fclose(f);
    if (!pku)
        return;
    float *d = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&d, 256), cudaSuccess);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        volatile float *v = d;
        v[1] = 2.0f;
        _exit(0);
    }
    close(fds[1]);
    char msg[256] = {0};
    ssize_t n = read(fds[0], msg, sizeof msg - 1);
    (void)n;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %d", st);
    ck_assert_msg(strstr(msg, "host code touched device memory") != NULL, "%s", msg);
    cudaFree(d);
}
END_TEST

/* A stream held by an event waits for the other stream's earlier work: a long memset on one
 * stream, then (after the event) a copy of its last bytes on another. */
START_TEST(event_orders_streams)
{
    size_t n = 64u << 20;
    unsigned char *d = NULL, *h = NULL;
    cudaStream_t a, b;
    cudaEvent_t e;
    ck_assert_int_eq(cudaMalloc((void **)&d, n), cudaSuccess);
    ck_assert_int_eq(cudaHostAlloc((void **)&h, 16, 0), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    for (int round = 0; round < 4; round++) {
        int v = 0x10 + round;
        ck_assert_int_eq(cudaMemsetAsync(d, v, n, a), cudaSuccess);
        ck_assert_int_eq(cudaEventRecord(e, a), cudaSuccess);
        ck_assert_int_eq(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
        ck_assert_int_eq(cudaMemcpyAsync(h, d + n - 16, 16, cudaMemcpyDeviceToHost, b),
                         cudaSuccess);
        ck_assert_int_eq(cudaStreamSynchronize(b), cudaSuccess);
        for (int i = 0; i < 16; i++)
            ck_assert_uint_eq(h[i], (unsigned)v);
    }
    ck_assert_int_eq(cudaStreamQuery(a), cudaSuccess);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaFreeHost(h);
    cudaFree(d);
}
END_TEST

/* binary16 of a float that is exact in it (normal or zero) */
static uint16_t h16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) == 0)
        return (uint16_t)(u >> 16);
    return (uint16_t)((u >> 16 & 0x8000u) | ((((u >> 23) & 0xffu) - 112u) << 10) |
                      ((u >> 13) & 0x3ffu));
}

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                   int, int, const float *, const float *, int, const float *,
                                   int, const float *, float *, int);
typedef cublasStatus_t (*gemmex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                    int, int, const void *, const void *, cudaDataType, int,
                                    const void *, cudaDataType, int, const void *, void *,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* cuBLAS's column-major GEMM and its argument rules (the libcublas next to the runtime). */
START_TEST(cublas_rules)
{
    char so[64];
    snprintf(so, sizeof so, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(so, RTLD_NOW);
    ck_assert_msg(lib != NULL, "%s", dlerror());
    create_fn create = (create_fn)dlsym(lib, "cublasCreate_v2");
    sgemm_fn sgemm = (sgemm_fn)dlsym(lib, "cublasSgemm_v2");
    gemmex_fn gemmex = (gemmex_fn)dlsym(lib, "cublasGemmEx");
    ck_assert(create && sgemm && gemmex);
    cublasHandle_t hd;
    ck_assert_int_eq(create(&hd), CUBLAS_STATUS_SUCCESS);
    /* y[m=2, rows=3] = x[2, k=4] W^T with W [3, 4] row-major: gemm(T, N, 3, 2, 4), ld 4, 4, 5
     * (y's row stride 5: columns [0, 3) of a wider output) */
    float w[12], x[8], y[10], want[10];
    for (int i = 0; i < 12; i++)
        w[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 8; i++)
        x[i] = 0.5f * (float)i - 1.0f;
    for (int i = 0; i < 10; i++)
        want[i] = 9.0f; /* columns 3, 4 untouched */
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) {
            float s = 0.0f;
            for (int l = 0; l < 4; l++)
                s += x[r * 4 + l] * w[c * 4 + l];
            want[r * 5 + c] = s;
        }
    float *dw, *dx, *dy;
    ck_assert_int_eq(cudaMalloc((void **)&dw, sizeof w), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dx, sizeof x), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dy, sizeof y), cudaSuccess);
    for (int i = 0; i < 10; i++)
        y[i] = 9.0f;
    cudaMemcpy(dw, w, sizeof w, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y, sizeof y, cudaMemcpyHostToDevice);
    const float one = 1.0f, zero = 0.0f;
    ck_assert_int_eq(sgemm(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dw, 4, dx, 4, &zero, dy,
                           5),
                     CUBLAS_STATUS_SUCCESS);
    cudaDeviceSynchronize();
    cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 10; i++)
        ck_assert_msg(y[i] == want[i], "y[%d] %g, want %g", i, y[i], want[i]);
    /* a leading dimension below its rows; an operand past its allocation; host operands */
    ck_assert_int_eq(sgemm(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dw, 3, dx, 4, &zero, dy,
                           5),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(sgemm(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dw, 4, dx, 4, &zero, dy,
                           8),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(sgemm(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, w, 4, dx, 4, &zero, dy,
                           5),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* GemmEx: F16 in, F32 out, F32 compute; mixed input types are not a combination */
    uint16_t hw[12], hx[8];
    for (int i = 0; i < 12; i++)
        hw[i] = h16(w[i]);
    for (int i = 0; i < 8; i++)
        hx[i] = h16(x[i]);
    void *dhw, *dhx;
    cudaMalloc(&dhw, sizeof hw);
    cudaMalloc(&dhx, sizeof hx);
    cudaMemcpy(dhw, hw, sizeof hw, cudaMemcpyHostToDevice);
    cudaMemcpy(dhx, hx, sizeof hx, cudaMemcpyHostToDevice);
    ck_assert_int_eq(gemmex(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dhw, CUDA_R_16F, 4, dhx,
                            CUDA_R_16F, 4, &zero, dy, CUDA_R_32F, 5, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaDeviceSynchronize();
    cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 10; i++) /* the inputs are exact in binary16 */
        ck_assert_msg(y[i] == want[i], "f16: y[%d] %g, want %g", i, y[i], want[i]);
    ck_assert_int_eq(gemmex(hd, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, dhw, CUDA_R_16F, 4, dhx,
                            CUDA_R_16BF, 4, &zero, dy, CUDA_R_32F, 5, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    cudaFree(dhw);
    cudaFree(dhx);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
}
END_TEST

typedef void (*pinned_stats_fn)(size_t *now, size_t *peak, unsigned long long *staged);

/* cudaHostRegister / cudaHostUnregister as the runtime has them: an overlapping registration,
 * an unregister of what is not one, a cudaFreeHost of a registration and a registration of
 * unmapped memory fail with the runtime's errors; adjacent registrations are fine; pinned bytes
 * are counted; an asynchronous copy from a range not all in one registration (across two, or
 * from memory never registered) is staged, and counted, while one inside a registration is not;
 * bytes arrive either way. */
START_TEST(host_register_rules)
{
    pinned_stats_fn stats = (pinned_stats_fn)dlsym(RTLD_DEFAULT, "fgemu_pinned_stats");
    ck_assert_ptr_nonnull(stats);
    const size_t k64 = 64 << 10;
    unsigned char *a = aligned_alloc(4096, 3 * k64), *back = malloc(2 * k64), *d = NULL;
    for (size_t i = 0; i < 3 * k64; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    size_t now0, now, peak;
    unsigned long long staged0, staged;
    stats(&now0, &peak, &staged0);
    ck_assert_int_eq(cudaHostRegister(a, k64, cudaHostRegisterDefault), cudaSuccess);
    ck_assert_int_eq(cudaHostRegister(a + k64 / 2, k64, cudaHostRegisterDefault),
                     cudaErrorHostMemoryAlreadyRegistered);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
    ck_assert_int_eq(cudaHostRegister(a + k64, k64, cudaHostRegisterDefault), cudaSuccess);
    stats(&now, &peak, &staged);
    ck_assert_uint_eq(now - now0, 2 * k64);
    ck_assert_int_eq(cudaFreeHost(a + k64), cudaErrorInvalidValue);
    cudaGetLastError();

    cudaStream_t s;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&d, 2 * k64), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(d, a, k64, cudaMemcpyHostToDevice, s), cudaSuccess);
    stats(&now, &peak, &staged);
    ck_assert_uint_eq(staged, staged0); /* inside one registration: asynchronous */
    ck_assert_int_eq(cudaMemcpyAsync(d + k64, a + k64 / 2, k64, cudaMemcpyDefault, s),
                     cudaSuccess);
    stats(&now, &peak, &staged);
    ck_assert_uint_eq(staged, staged0 + 1); /* across two registrations: staged */
    ck_assert_int_eq(cudaMemcpyAsync(d, a + 2 * k64, 4096, cudaMemcpyHostToDevice, s),
                     cudaSuccess);
    stats(&now, &peak, &staged);
    ck_assert_uint_eq(staged, staged0 + 2); /* never registered: staged */
    ck_assert_int_eq(cudaMemcpyAsync(back, d, 2 * k64, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_int_eq(memcmp(back, a + 2 * k64, 4096), 0);
    ck_assert_int_eq(memcmp(back + 4096, a + 4096, k64 - 4096), 0);
    ck_assert_int_eq(memcmp(back + k64, a + k64 / 2, k64), 0);

    ck_assert_int_eq(cudaHostUnregister(a + 4096), cudaErrorHostMemoryNotRegistered);
    ck_assert_int_eq(cudaHostUnregister(a), cudaSuccess);
    ck_assert_int_eq(cudaHostUnregister(a), cudaErrorHostMemoryNotRegistered);
    ck_assert_int_eq(cudaHostUnregister(a + k64), cudaSuccess);
    cudaGetLastError();
    stats(&now, &peak, &staged);
    ck_assert_uint_eq(now, now0);
    ck_assert_uint_ge(peak, now0 + 2 * k64);

    void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(gone, MAP_FAILED);
    munmap(gone, 8192);
    ck_assert_int_eq(cudaHostRegister(gone, 8192, cudaHostRegisterDefault),
                     cudaErrorInvalidValue);
    cudaGetLastError();
    cudaFree(d);
    cudaStreamDestroy(s);
    free(a);
    free(back);
}
END_TEST

typedef cublasStatus_t (*sgemm_batched_fn)(cublasHandle_t, cublasOperation_t,
                                           cublasOperation_t, int, int, int, const float *,
                                           const float *const[], int, const float *const[], int,
                                           const float *, float *const[], int, int);
typedef cublasStatus_t (*gemm_batched_ex_fn)(cublasHandle_t, cublasOperation_t,
                                             cublasOperation_t, int, int, int, const void *,
                                             const void *const[], cudaDataType, int,
                                             const void *const[], cudaDataType, int,
                                             const void *, void *const[], cudaDataType, int, int,
                                             cublasComputeType_t, cublasGemmAlgo_t);
typedef unsigned long long (*calls_fn)(void);

/* y[2, 6] = x[2, 4] W^T with W [6, 4] in two pieces of 3 rows, each its own allocation: member
 * j is gemm(T, N, 3, 2, 4) on piece j into y's columns [3j, 3j + 3), ldc 6 (the members' C
 * interleave in memory without sharing an element). */
typedef struct bfix {
    void *lib;
    cublasHandle_t h;
    float w[24], x[8], want[12];
    float *dw[2], *dx, *dy;
    void **dp;            /* device pointer arrays: A[2], B[2], C[2] */
} bfix;

static void bfix_make(bfix *f)
{
    char so[64];
    snprintf(so, sizeof so, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    f->lib = dlopen(so, RTLD_NOW);
    ck_assert_msg(f->lib != NULL, "%s", dlerror());
    create_fn create = (create_fn)dlsym(f->lib, "cublasCreate_v2");
    ck_assert_int_eq(create(&f->h), CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 24; i++)
        f->w[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 8; i++)
        f->x[i] = 0.5f * (float)i - 1.5f;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 6; c++) {
            float s = 0.0f;
            for (int l = 0; l < 4; l++)
                s += f->x[r * 4 + l] * f->w[c * 4 + l];
            f->want[r * 6 + c] = s;
        }
    for (int j = 0; j < 2; j++) {
        ck_assert_int_eq(cudaMalloc((void **)&f->dw[j], 12 * 4), cudaSuccess);
        cudaMemcpy(f->dw[j], f->w + 12 * j, 12 * 4, cudaMemcpyHostToDevice);
    }
    ck_assert_int_eq(cudaMalloc((void **)&f->dx, sizeof f->x), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&f->dy, 12 * 4), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&f->dp, 6 * sizeof(void *)), cudaSuccess);
    cudaMemcpy(f->dx, f->x, sizeof f->x, cudaMemcpyHostToDevice);
}

/* the pointer arrays: A = {a0, a1}, B = {b, b}, C = {c0, c1} */
static void bfix_ptrs(bfix *f, const void *a0, const void *a1, const void *b, void *c0, void *c1)
{
    const void *p[6] = {a0, a1, b, b, c0, c1};
    ck_assert_int_eq(cudaMemcpy(f->dp, p, sizeof p, cudaMemcpyHostToDevice), cudaSuccess);
}

static void bfix_check(bfix *f, const char *what)
{
    float y[12];
    cudaDeviceSynchronize();
    cudaMemcpy(y, f->dy, sizeof y, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 12; i++)
        ck_assert_msg(y[i] == f->want[i], "%s: y[%d] %g, want %g", what, i, y[i], f->want[i]);
}

static cublasStatus_t bfix_sgemm(bfix *f, void **arrays, int count)
{
    sgemm_batched_fn sb = (sgemm_batched_fn)dlsym(f->lib, "cublasSgemmBatched");
    ck_assert(sb != NULL);
    const float one = 1.0f, zero = 0.0f;
    return sb(f->h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, (const float *const *)arrays, 4,
              (const float *const *)(arrays + 2), 4, &zero, (float *const *)(arrays + 4), 6,
              count);
}

/* cuBLAS's batched GEMMs: the members' results, the argument rules, the call count. */
START_TEST(cublas_batched_rules)
{
    bfix f;
    bfix_make(&f);
    calls_fn calls = (calls_fn)dlsym(f.lib, "fgemu_cublas_calls");
    ck_assert(calls != NULL);
    unsigned long long c0 = calls();
    bfix_ptrs(&f, f.dw[0], f.dw[1], f.dx, f.dy, f.dy + 3);
    ck_assert_int_eq(bfix_sgemm(&f, f.dp, 2), CUBLAS_STATUS_SUCCESS);
    bfix_check(&f, "sgemm batched");
    ck_assert_uint_eq(calls() - c0, 1);
    /* GemmBatchedEx on F16 copies (exact in binary16) */
    uint16_t hw[24], hx[8];
    for (int i = 0; i < 24; i++)
        hw[i] = h16(f.w[i]);
    for (int i = 0; i < 8; i++)
        hx[i] = h16(f.x[i]);
    void *dhw[2], *dhx;
    for (int j = 0; j < 2; j++) {
        cudaMalloc(&dhw[j], 24);
        cudaMemcpy(dhw[j], hw + 12 * j, 24, cudaMemcpyHostToDevice);
    }
    cudaMalloc(&dhx, sizeof hx);
    cudaMemcpy(dhx, hx, sizeof hx, cudaMemcpyHostToDevice);
    cudaMemset(f.dy, 0xff, 12 * 4);
    bfix_ptrs(&f, dhw[0], dhw[1], dhx, f.dy, f.dy + 3);
    gemm_batched_ex_fn gb = (gemm_batched_ex_fn)dlsym(f.lib, "cublasGemmBatchedEx");
    ck_assert(gb != NULL);
    const float one = 1.0f, zero = 0.0f;
    void **a = f.dp;
    ck_assert_int_eq(gb(f.h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, (const void *const *)a,
                        CUDA_R_16F, 4, (const void *const *)(a + 2), CUDA_R_16F, 4, &zero,
                        (void *const *)(a + 4), CUDA_R_32F, 6, 2, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    bfix_check(&f, "gemm batched ex, f16");
    ck_assert_int_eq(gb(f.h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, (const void *const *)a,
                        CUDA_R_16F, 4, (const void *const *)(a + 2), CUDA_R_16BF, 4, &zero,
                        (void *const *)(a + 4), CUDA_R_32F, 6, 2, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    /* pointer arrays in host memory; a negative count; none */
    void *hp[6] = {f.dw[0], f.dw[1], f.dx, f.dx, f.dy, f.dy + 3};
    ck_assert_int_eq(bfix_sgemm(&f, hp, 2), CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(bfix_sgemm(&f, f.dp, -1), CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(bfix_sgemm(&f, f.dp, 0), CUBLAS_STATUS_SUCCESS);
    cudaDeviceSynchronize();
}
END_TEST

/* A member the GPU would fault on or race over stops the program when the call runs: one
 * operand past its allocation (piece 0's rows 1..4 of 3), or a C sharing elements with another
 * member's (columns [0, 3) and [2, 5) of y). */
static void batched_dies(int overlap, const char *want)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) { /* the whole emulator in the child: its stream threads are not forked */
        dup2(fds[1], 2);
        bfix f;
        bfix_make(&f);
        if (overlap)
            bfix_ptrs(&f, f.dw[0], f.dw[1], f.dx, f.dy, f.dy + 2);
        else
            bfix_ptrs(&f, f.dw[0], f.dw[0] + 4, f.dx, f.dy, f.dy + 3);
        bfix_sgemm(&f, f.dp, 2);
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(fds[1]);
    char msg[512] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof msg - 1 && (n = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %d: %s", st, msg);
    ck_assert_msg(strstr(msg, want) != NULL, "%s", msg);
}

START_TEST(cublas_batched_member_faults)
{
    batched_dies(0, "member 1: an operand is not inside one device allocation");
    batched_dies(1, "member 1: its C shares elements with another member's");
}
END_TEST

int main(void)
{
    if (!dlsym(RTLD_DEFAULT, "fgemu_device_range")) {
        printf("not under the emulated runtime (tests/cudaemu): skipped\n");
        return 77;
    }
    Suite *s = suite_create("cudaemu");
    TCase *tc = tcase_create("cudaemu");
    tcase_add_test(tc, memory_rules);
    tcase_add_test(tc, host_touching_device_memory_dies);
    tcase_add_test(tc, event_orders_streams);
    tcase_add_test(tc, cublas_rules);
    tcase_add_test(tc, cublas_batched_rules);
    tcase_add_test(tc, cublas_batched_member_faults);
    tcase_add_test(tc, host_register_rules);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
