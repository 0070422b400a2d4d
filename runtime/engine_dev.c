/* engine_dev.c - the engine on a device backend: which backend computes (--backend cpu|sim|cuda),
 * the device budget the plan divides (--gpu-budget), the device object the pager's DEVICE tier
 * shares with the backend, and the few places engine code moves rows itself.
 *
 * The data path: chunks homed on the GPU (--percent's GPU fractions, or the plan's default of
 * as many weights as fit) live in the pager's DEVICE pool, carved from the backend's device, so
 * weight pieces, KV caches and activation chunks reach the backend's ops as device pointers and
 * are used in place; everything else (the model workspace, RAM-homed chunks) is host memory,
 * which a device backend stages per op. Host code never dereferences a device pointer: the rows
 * the schedule copies out of an activation chunk and the SMALL tensors decoded at unit load go
 * through the device's copy engine (fg_engine_rows_copy, fg_engine_small_bytes).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
/* Of a CUDA --gpu-budget, what the plan does not count: cuBLAS's workspace, attention's score
 * batches (64 MiB), the backend's upload slots and 16-bit activations. */
#define CUDA_SCRATCH (256ull << 20)

/* The policy's gpu_budget for the plan: the flag, or the device's default. */
int fg_engine_device_budget(fg_engine *e, fg_err *err)
{
    e->o.policy.gpu_budget = 0;
    if (e->o.backend == FG_BACKEND_CPU)
        return e->o.gpu_budget ? fg_err_set(err, FG_ERR_INVALID_ARG, "--gpu-budget needs a "
                                            "device (--backend cuda or sim)") : FG_OK;
    if (e->o.backend == FG_BACKEND_SIM) {
        e->o.policy.gpu_budget = e->o.gpu_budget ? e->o.gpu_budget : (uint64_t)GIB;
        return FG_OK;
    }
    uint64_t free_b, total_b;
    int rc = fg_cuda_mem_info(0, &free_b, &total_b, err);
    if (rc)
        return rc;
    if (e->o.gpu_budget > free_b)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.1f GiB: the GPU has %.1f GiB "
                          "free of %.1f", e->o.gpu_budget / GIB, free_b / GIB, total_b / GIB);
    uint64_t margin = 1ull << 30, b = e->o.gpu_budget ? e->o.gpu_budget
                                     : free_b > 2 * margin ? free_b - margin : free_b / 2;
    if (b <= CUDA_SCRATCH)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.2f GiB: the CUDA backend "
                          "keeps %.2f GiB for cuBLAS and its kernels' scratch", b / GIB,
                          CUDA_SCRATCH / GIB);
    e->o.policy.gpu_budget = b - CUDA_SCRATCH;
    return FG_OK;
}

int fg_engine_backend_create(fg_engine *e, fg_err *err)
{
    const fg_engine_opts *o = &e->o;
    if (o->backend == FG_BACKEND_SIM) {
        fg_backend_sim_opts so = {o->threads, o->compute, o->policy.gpu_budget,
                                  o->sim_link_gbps, o->policy.cpu_attention, 0};
        return fg_backend_sim_create(&so, &e->be, err);
    }
    if (o->backend == FG_BACKEND_CUDA) {
        fg_backend_cuda_opts co = {0, o->threads, o->compute, o->policy.cpu_attention};
        return fg_backend_cuda_create(&co, &e->be, err);
    }
    fg_backend_cpu_opts bo = {o->threads, o->compute};
    return fg_backend_cpu_create_opts(&bo, &e->be, err);
}

/* The pager's DEVICE tier: the backend's device (shared), the plan's pool. */
int fg_engine_pager_device(fg_engine *e, fg_pager_config *pc, fg_err *err)
{
    if (!e->plan.dev_pool)
        return FG_OK;
    fg_device *d = e->be->dev->iface->retain ? e->be->dev->iface->retain(e->be->dev) : NULL;
    if (!d)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "backend %s: its device cannot be shared "
                          "with the pager", e->be->iface->name);
    pc->device = d;
    pc->budget[FG_TIER_DEVICE] = e->plan.dev_pool;
    return FG_OK;
}

int fg_engine_rows_copy(fg_engine *e, void *dst, const void *src, fg_tier src_tier, size_t n,
                        fg_err *err)
{
    if (src_tier != FG_TIER_DEVICE) {
        memcpy(dst, src, n);
        return FG_OK;
    }
    fg_device *d = e->be->dev;
    return d->iface->copy(d, dst, FG_BUFT_HOST, src, FG_BUFT_DEVICE, n, NULL, err);
}

int fg_engine_small_bytes(fg_engine *e, const fg_pager_view *v, const void **bytes, void **tmp,
                          fg_err *err)
{
    *tmp = NULL;
    *bytes = v->ptr;
    if (v->tier != FG_TIER_DEVICE)
        return FG_OK;
    *tmp = malloc(v->length ? v->length : 1);
    if (!*tmp)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    *bytes = *tmp;
    return fg_engine_rows_copy(e, *tmp, v->ptr, v->tier, v->length, err);
}
