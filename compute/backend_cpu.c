/* backend_cpu.c - the CPU compute backend: Linear layers through OpenBLAS sgemm (fp32), the
 * small kernels from kernels_cpu.c. Synchronous; `sync` is a no-op. */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend.h"

static int cpu_linear(fg_backend *be, const float *a, const float *w, const float *bias, float *c,
                      uint32_t m, uint32_t n, uint32_t k)
{
    (void)be;
    float beta = 0.0f;
    if (bias) {
        for (uint32_t i = 0; i < m; i++)
            memcpy(c + (size_t)i * n, bias, n * sizeof *c);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k,
                w, (int)k, beta, c, (int)n);
    return FG_OK;
}

static int cpu_layernorm(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                         uint32_t rows, uint32_t n, float eps)
{
    (void)be;
    for (uint32_t r = 0; r < rows; r++)
        fg_cpu_layernorm(x + (size_t)r * n, g, b, y + (size_t)r * n, n, eps);
    return FG_OK;
}

static int cpu_relu(fg_backend *be, float *x, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return FG_OK;
}

static int cpu_add(fg_backend *be, float *y, const float *x, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return FG_OK;
}

static int cpu_attention(fg_backend *be, const fg_attn_args *a)
{
    (void)be;
    fg_cpu_attention(a);
    return FG_OK;
}

static int cpu_sync(fg_backend *be)
{
    (void)be;
    return FG_OK;
}

static void cpu_free(fg_backend *be)
{
    free(be);
}

static const fg_backend_iface k_cpu = {
    "cpu", cpu_linear, cpu_layernorm, cpu_relu, cpu_add, cpu_attention, cpu_sync, cpu_free,
};

int fg_backend_cpu_create(int threads, fg_backend **out, fg_err *err)
{
    fg_backend *be = calloc(1, sizeof *be);
    if (!be)
        return fg_err_set(err, FG_ERR_NOMEM, "cpu backend: out of memory");
    if (threads > 0)
        openblas_set_num_threads(threads);
    be->iface = &k_cpu;
    *out = be;
    return FG_OK;
}

void fg_backend_free(fg_backend *be)
{
    if (be)
        be->iface->free(be);
}
