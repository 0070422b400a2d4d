/* backend_cpu.c - the CPU compute backend: Linear layers through OpenBLAS sgemm (fp32), the
 * small kernels from kernels_cpu.c. Synchronous; `sync` is a no-op.
 *
 * Threads: OpenBLAS runs single-threaded and the backend splits each Linear's output columns
 * (rows of W) across its own helper threads (par.h), one sgemm per part. OpenBLAS's own pool
 * spins in sched_yield between calls (its thread timeout is fixed when the library loads), which
 * on a small machine steals the cores from everything the engine runs between GEMMs (weight
 * conversion, attention, LayerNorm): perf on opt-1.3b decode showed 13% of the time in
 * sched_yield. Our helpers sleep on a condition variable instead. */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend.h"
#include "par.h"

typedef struct cpu_ctx {
    fg_par *par;
} cpu_ctx;

typedef struct linear_job {
    const float *a, *w, *bias;
    float *c;
    uint32_t m, n, k;
} linear_job;

/* Output columns [n0, n1) of part `part`: whole 16-column groups (parts past the end idle). */
static void linear_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const linear_job *j = arg;
    uint32_t per = ((j->n + n_parts - 1) / n_parts + 15) & ~15u, n0 = per * part;
    uint32_t n1 = n0 + per > j->n ? j->n : n0 + per;
    if (n0 >= n1)
        return;
    float beta = 0.0f;
    if (j->bias) {
        for (uint32_t i = 0; i < j->m; i++)
            memcpy(j->c + (size_t)i * j->n + n0, j->bias + n0, (n1 - n0) * sizeof *j->c);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->m, (int)(n1 - n0), (int)j->k,
                1.0f, j->a, (int)j->k, j->w + (size_t)n0 * j->k, (int)j->k, beta, j->c + n0,
                (int)j->n);
}

static int cpu_linear(fg_backend *be, const float *a, const float *w, const float *bias, float *c,
                      uint32_t m, uint32_t n, uint32_t k)
{
    cpu_ctx *x = be->ctx;
    linear_job j = {a, w, bias, c, m, n, k};
    /* small problems are not worth waking a helper for */
    if ((uint64_t)m * n * k < (1u << 18) || n < 32)
        linear_part(&j, 0, 1);
    else
        fg_par_run(x->par, linear_part, &j);
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

static void attention_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const fg_attn_args *a = arg;
    uint32_t parts = a->scratch_parts < n_parts ? a->scratch_parts : n_parts;
    if (part < parts)
        fg_cpu_attention_part(a, part, parts);
}

static int cpu_attention(fg_backend *be, const fg_attn_args *a)
{
    cpu_ctx *x = be->ctx;
    /* a decode step's one query over a short context is not worth waking a helper for */
    uint64_t work = (uint64_t)a->n_q * a->n_heads * (a->q_pos0 + a->n_q) * a->head_dim;
    if (a->scratch_parts > 1 && work >= (1u << 16))
        fg_par_run(x->par, attention_part, (void *)a);
    else
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
    cpu_ctx *x = be->ctx;
    if (x)
        fg_par_free(x->par);
    free(x);
    free(be);
}

static const fg_backend_iface k_cpu = {
    "cpu", cpu_linear, cpu_layernorm, cpu_relu, cpu_add, cpu_attention, cpu_sync, cpu_free,
};

int fg_backend_cpu_create(int threads, fg_backend **out, fg_err *err)
{
    fg_backend *be = calloc(1, sizeof *be);
    cpu_ctx *x = calloc(1, sizeof *x);
    if (!be || !x) {
        free(be);
        free(x);
        return fg_err_set(err, FG_ERR_NOMEM, "cpu backend: out of memory");
    }
    be->iface = &k_cpu;
    be->ctx = x;
    int rc = fg_par_create(threads > 0 ? (uint32_t)threads : 0, &x->par, err);
    if (rc) {
        cpu_free(be);
        return rc;
    }
    openblas_set_num_threads(1);
    *out = be;
    return FG_OK;
}

void fg_backend_free(fg_backend *be)
{
    if (be)
        be->iface->free(be);
}
