/* engine_dev.c - the engine on a device backend: which backend computes (--backend cpu|sim|cuda),
 * the device budget the plan divides (--gpu-budget), the device object the pager's DEVICE tier
 * shares with the backend, the engine's buffers on that device, and the few places engine code
 * moves rows itself.
 *
 * The data path: chunks homed on the GPU (--percent's GPU fractions, or the plan's default of
 * as many weights as fit) live in the pager's DEVICE pool, carved from the backend's device, so
 * weight pieces, KV caches and activation chunks reach the backend's ops as device pointers and
 * are used in place. On a device backend the engine's own buffers are device memory too (e->buft
 * = FG_BUFT_DEVICE): the model workspace, the decode step's block rows (the residual stream),
 * the rows staged for the head and its logits, the SMALL tensors (decoded on the device by the
 * backend's gather, by row indices kept there), and the positions and validity the ops read. So
 * with weights, KV cache and activations homed on the GPU a decode step moves over the link
 * only its token ids and positions (up, O(batch)) and, when the batch samples greedily, the
 * next ids the backend's argmax finds where the logits are (down, O(batch)); the validity goes
 * up once a block, with the prompts (positions from the prompt's end on are set from the start:
 * causal attention reads a row only once its token is written, schedule.c setup_prompts); a batch that samples otherwise (temperature,
 * top-k/top-p) or a logits hook brings the live sequences' logits down (O(batch x vocab)).
 * Never a layer's activations; what is homed in RAM or on disk (weights, caches, activation chunks) is
 * staged per op by the backend. Host code never dereferences a device pointer: every crossing
 * is a synchronous copy of the device (fg_engine_up/down/dcopy, fg_engine_rows_copy,
 * fg_engine_small_bytes), counted in the backend's link_bytes; those do not queue behind the
 * pager's prefetch uploads (fg_device.h), so a cold pass's ids and positions are not held up. In a pipeline (stage.h) the rows a
 * stage sends come down into host room first (e->sc.stage_host) and the rows it receives go up.
 * On the CPU backend every buffer is host memory and the d_* twins alias the host arrays.
 */
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "engine_int.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
/* Of a CUDA --gpu-budget, what the plan does not count: cuBLAS's workspace, attention's score
 * batches (64 MiB), the backend's upload slots and 16-bit activations. */
#define CUDA_SCRATCH (256ull << 20)

/* The CUDA device ordinal o names. */
static int gpu_of(const fg_engine_opts *o)
{
    int n = fg_cuda_device_count();
    return n > 0 && o->gpu_index > 0 ? o->gpu_index % n : 0;
}

int fg_engine_gpu_budget(const fg_engine_opts *o, uint64_t *out, fg_err *err)
{
    *out = 0;
    if (o->backend == FG_BACKEND_CPU)
        return o->gpu_budget ? fg_err_set(err, FG_ERR_INVALID_ARG, "--gpu-budget needs a "
                                          "device (--backend cuda or sim)") : FG_OK;
    if (o->backend == FG_BACKEND_SIM) {
        *out = o->gpu_budget ? o->gpu_budget : (uint64_t)GIB;
        return FG_OK;
    }
    uint64_t free_b, total_b;
    int rc = fg_cuda_mem_info(gpu_of(o), &free_b, &total_b, err);
    if (rc)
        return rc;
    if (o->gpu_budget > free_b)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.1f GiB: the GPU has %.1f GiB "
                          "free of %.1f", o->gpu_budget / GIB, free_b / GIB, total_b / GIB);
    uint64_t margin = 1ull << 30, b = o->gpu_budget ? o->gpu_budget
                                     : free_b > 2 * margin ? free_b - margin : free_b / 2;
    if (b <= CUDA_SCRATCH && o->gpu_budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.1f MiB: the CUDA backend "
                          "keeps %.0f MiB for cuBLAS and its kernels' scratch", b / 1048576.0,
                          CUDA_SCRATCH / 1048576.0);
    if (b <= CUDA_SCRATCH)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--backend cuda: GPU %d has %.1f MiB free, "
                          "and the CUDA backend keeps %.0f MiB for cuBLAS and its kernels' "
                          "scratch", gpu_of(o), free_b / 1048576.0, CUDA_SCRATCH / 1048576.0);
    *out = b - CUDA_SCRATCH;
    return FG_OK;
}

/* The policy's gpu_budget for the plan: the flag, or the device's default. */
int fg_engine_device_budget(fg_engine *e, fg_err *err)
{
    return fg_engine_gpu_budget(&e->o, &e->o.policy.gpu_budget, err);
}

int fg_engine_backend_new(const fg_engine_opts *o, uint64_t capacity, fg_backend **out,
                          fg_err *err)
{
    if (o->backend == FG_BACKEND_SIM) {
        fg_backend_sim_opts so = {o->threads, o->compute, capacity, o->sim_link_gbps,
                                  o->policy.cpu_attention, 0};
        return fg_backend_sim_create(&so, out, err);
    }
    if (o->backend == FG_BACKEND_CUDA) {
        fg_backend_cuda_opts co = {gpu_of(o), o->threads, o->compute, o->policy.cpu_attention};
        return fg_backend_cuda_create(&co, out, err);
    }
    fg_backend_cpu_opts bo = {o->threads, o->compute};
    return fg_backend_cpu_create_opts(&bo, out, err);
}

int fg_engine_backend_create(fg_engine *e, fg_err *err)
{
    e->buft = e->o.backend == FG_BACKEND_CPU ? FG_BUFT_HOST : FG_BUFT_DEVICE;
    return fg_engine_backend_new(&e->o, e->o.policy.gpu_budget, &e->be, err);
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

static fg_buft tier_buft(fg_tier t) { return t == FG_TIER_DEVICE ? FG_BUFT_DEVICE : FG_BUFT_HOST; }

static int copy(fg_engine *e, void *dst, fg_buft dt, const void *src, fg_buft st, size_t n,
                fg_err *err)
{
    if (!n || dst == src)
        return FG_OK;
    if (dt != FG_BUFT_DEVICE && st != FG_BUFT_DEVICE) {
        memcpy(dst, src, n);
        return FG_OK;
    }
    fg_device *d = e->be->dev;
    return d->iface->copy(d, dst, dt, src, st, n, NULL, err);
}

int fg_engine_xcopy(fg_engine *e, void *dst, fg_buft dt, const void *src, fg_buft st, size_t n,
                    fg_err *err)
{
    return copy(e, dst, dt, src, st, n, err);
}

fg_buft fg_engine_view_buft(const fg_pager_view *v)
{
    return tier_buft(v->tier);
}

int fg_engine_up(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err)
{
    return copy(e, dst, e->buft, src, FG_BUFT_HOST, n, err);
}

int fg_engine_down(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err)
{
    return copy(e, dst, FG_BUFT_HOST, src, e->buft, n, err);
}

int fg_engine_dcopy(fg_engine *e, void *dst, const void *src, size_t n, fg_err *err)
{
    return copy(e, dst, e->buft, src, e->buft, n, err);
}

int fg_engine_rows_copy(fg_engine *e, void *dst, const void *src, fg_tier src_tier, size_t n,
                        fg_err *err)
{
    return copy(e, dst, e->buft, src, tier_buft(src_tier), n, err);
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
    return copy(e, *tmp, FG_BUFT_HOST, v->ptr, FG_BUFT_DEVICE, v->length, err);
}

int fg_engine_small_gather(fg_engine *e, const fg_weight *w, uint64_t rows, uint64_t cols,
                           float *dst, fg_err *err)
{
    if (rows > e->n_small_rows)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "a SMALL tensor of %llu rows: the engine "
                          "indexes %u", (unsigned long long)rows, e->n_small_rows);
    return e->be->iface->gather(e->be, w, rows, e->small_rows, (uint32_t)rows, dst,
                                (uint32_t)cols, err);
}

/* ---- the engine's buffers of type e->buft ---- */

int fg_engine_buf_alloc(fg_engine *e, uint64_t n, void **p, fg_err *err)
{
    *p = NULL;
    if (e->buft == FG_BUFT_HOST) {
        *p = malloc(n ? n : 1);
        return *p ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory for the engine's "
                                       "buffers (%.0f MiB planned)", e->plan.total_host / FG_MIB);
    }
    fg_device *d = e->be->dev;
    int rc = d->iface->alloc(d, FG_BUFT_DEVICE, n ? n : 1, p, err);
    if (rc)
        *p = NULL;
    return rc ? fg_err_set(err, rc, "%llu bytes of the engine's device buffers: %s "
                           "(--gpu-budget)", (unsigned long long)n, fg_strerror(rc)) : FG_OK;
}

void fg_engine_buf_free(fg_engine *e, void *p)
{
    if (e->buft == FG_BUFT_HOST)
        free(p);
    else if (p)
        e->be->dev->iface->free(e->be->dev, FG_BUFT_DEVICE, p);
}

/* The most rows of any SMALL tensor (the row indices a device backend gathers them by). */
static uint32_t small_rows(const fg_engine *e)
{
    uint64_t m = 1;
    for (uint32_t i = 0; i < e->n_tensors; i++)
        if (e->tensors[i].spec.access == FG_ACCESS_SMALL && e->tensors[i].spec.dims[0] > m)
            m = e->tensors[i].spec.dims[0];
    return (uint32_t)m;
}

/* The device twins: positions, validity, block positions, row indices; the logits' host rows
 * and the greedy ids' host array. */
static int twins(fg_engine *e, fg_err *err)
{
    uint64_t tok = (uint64_t)e->gbs * e->max_ctx, bls = (uint64_t)e->gbs * e->ngb;
    e->sc.greedy_ids = malloc((uint64_t)e->plan.logit_rows * 4);
    if (!e->sc.greedy_ids)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (e->buft == FG_BUFT_HOST) {
        e->sc.d_valid = e->sc.valid;
        e->sc.d_pos = e->sc.pos;
        e->sc.d_blk_pos = e->sc.blk_pos;
        e->sc.logits_host = e->sc.logits;
        return FG_OK;
    }
    e->n_small_rows = small_rows(e);
    e->sc.logits_host = malloc((uint64_t)e->plan.logit_rows * e->hp.vocab_size * 4);
    int32_t *iota = malloc((size_t)e->n_small_rows * 4);
    int rc = e->sc.logits_host && iota ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, e->ngb * tok, (void **)&e->sc.d_valid, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, e->ngb * tok * 4, (void **)&e->sc.d_pos, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, bls * 4, (void **)&e->sc.d_blk_pos, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, (uint64_t)e->n_small_rows * 4, (void **)&e->small_rows, err);
    for (uint32_t i = 0; rc == FG_OK && i < e->n_small_rows; i++)
        iota[i] = (int32_t)i;
    if (rc == FG_OK)
        rc = fg_engine_up(e, e->small_rows, iota, (size_t)e->n_small_rows * 4, err);
    free(iota);
    return rc;
}

int fg_engine_buffers_dev(fg_engine *e, fg_err *err)
{
    const fg_plan *p = &e->plan;
    uint64_t h = e->hp.hidden, bls = (uint64_t)e->gbs * e->ngb;
    e->small_kept = 0; /* nothing decoded into the new room yet */
    int rc = fg_engine_buf_alloc(e, p->small_f32 + 4, (void **)&e->small_f32, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, bls * h * 4, (void **)&e->sc.blk_hidden, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, (uint64_t)p->logit_rows * e->hp.vocab_size * 4,
                                 (void **)&e->sc.logits, err);
    if (rc == FG_OK)
        rc = fg_engine_buf_alloc(e, (uint64_t)p->logit_rows * h * 4, (void **)&e->sc.head_x, err);
    if (rc == FG_OK)
        rc = twins(e, err);
    if (rc == FG_OK)
        rc = fg_model_ws_create(&e->hp, e->ws_rows, e->max_ctx, e->be->dev, e->buft, &e->sc.ws,
                                err);
    if (rc == FG_OK && e->link && e->buft == FG_BUFT_DEVICE &&
        !(e->sc.stage_host = malloc(fg_stage_max_rows(e))))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    return rc;
}

void fg_engine_buffers_dev_free(fg_engine *e)
{
    if (!e->be)
        return;
    fg_model_ws_free(e->sc.ws);
    e->sc.ws = NULL;
    free(e->sc.stage_host);
    e->sc.stage_host = NULL;
    free(e->sc.greedy_ids);
    e->sc.greedy_ids = NULL;
    void *b[] = {e->small_f32, e->sc.blk_hidden, e->sc.logits, e->sc.head_x};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        fg_engine_buf_free(e, b[i]);
    if (e->buft != FG_BUFT_HOST) {
        void *t[] = {e->sc.d_valid, e->sc.d_pos, e->sc.d_blk_pos, e->small_rows};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            fg_engine_buf_free(e, t[i]);
        free(e->sc.logits_host);
    }
    e->small_f32 = e->sc.logits = e->sc.head_x = e->sc.blk_hidden = e->sc.logits_host = NULL;
    e->sc.d_valid = NULL;
    e->sc.d_pos = e->sc.d_blk_pos = e->small_rows = NULL;
}
