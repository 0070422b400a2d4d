/* backend_sim.c - the simulated device backend (backend.h): the device data path of a GPU
 * backend, run on the CPU so it is tested without one.
 *
 * Its memory is a simulated device (device_sim.c): device pointers fault when host code touches
 * them, copies go through the copy-engine thread at the link's bandwidth. Its ops run the CPU
 * backend's kernels (an inner fg_backend_cpu) on the device's own bytes, reached through
 * fg_device_sim_alias, which nothing outside the device and this file uses.
 *
 * Operands: each pointer an op receives is either device memory (the pager's DEVICE tier, a
 * buffer the caller allocated with be->dev) and used in place, or host memory, which the op
 * stages: inputs are uploaded into a device buffer first, outputs are computed in one and
 * downloaded after, every staged buffer is freed when the op returns; those copies run on the
 * compute stream (fg_device_sim_copy_inline: the calling thread, not behind the copy engine's
 * queue of prefetches), as the CUDA backend stages on its compute stream. The CUDA backend
 * follows the same rules, so the sim exercises the same traffic: weight pieces, KV rows and activation
 * chunks homed in RAM cross the link exactly when they would cross PCIe, and what the engine
 * keeps on the device (its model workspace, the residual stream of a decode step, the head's
 * rows and logits: engine/engine_dev.c) never does.
 *
 * Overlap: a piecewise Linear uploads piece i + 1 (asynchronously, on the device's upload
 * stream: fg_device_sim_upload, as the CUDA backend's own stream `us`) while piece i
 * multiplies, holding at most one piece of its owner at a time (the engine's weight sources
 * hold one view); a piece already in device memory is used where it is. With a slow link the
 * test suite measures the wall time below the sum of copy and compute (tests/test_backend_sim.c).
 *
 * --cpu-cache-compute: with cpu_attention, attention whose cache is in host memory runs on the
 * CPU beside it (FlexGen computes attention where the cache lives instead of moving the cache
 * over the link); its operands in device memory (the engine's device workspace) come down to
 * host room and its output goes back up.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_int.h"
#include "fg_progress.h"

#define MAX_STAGED 16

typedef struct sim_ctx {
    fg_backend *cpu;        /* the kernels */
    int cpu_attention, no_overlap;
    double compute_s;
    fgb_room room;          /* host room of attention beside a host cache (grown, kept) */
} sim_ctx;

typedef struct staged {
    void *host;             /* where an output goes back to (NULL: input or scratch) */
    void *dev;              /* the device buffer */
    size_t n;
} staged;

/* The operands one op staged. */
typedef struct op {
    fg_device *d;
    staged s[MAX_STAGED];
    int n;
} op;

/* Operand p of n bytes on the device: *alias is where the op's kernels reach it. Host memory is
 * staged (uploaded when `in`; downloaded at op_end when `out`). */
static int opnd(op *o, const void *p, size_t n, int in, int out, void **alias, fg_err *err)
{
    *alias = NULL;
    if (!p)
        return FG_OK;
    if ((*alias = fg_device_sim_alias(o->d, p)))
        return fg_device_sim_owns(o->d, p, n)
                   ? FG_OK
                   : fg_err_set(err, FG_ERR_INVALID_ARG, "sim backend: a device operand of %zu "
                                "bytes runs past the device's memory", n);
    if (o->n == MAX_STAGED)
        return fg_err_set(err, FG_ERR_LIMIT, "sim backend: more than %d staged operands",
                          MAX_STAGED);
    void *dev;
    int rc = o->d->iface->alloc(o->d, FG_BUFT_DEVICE, n, &dev, err);
    if (rc)
        return rc;
    o->s[o->n++] = (staged){out ? (void *)p : NULL, dev, n};
    if (in && n) /* on the compute stream, as CUDA stages (not behind queued uploads) */
        rc = fg_device_sim_copy_inline(o->d, dev, FG_BUFT_DEVICE, p, FG_BUFT_HOST, n, err);
    *alias = fg_device_sim_alias(o->d, dev);
    return rc;
}

/* Download the outputs (when rc is FG_OK) and free every staged buffer. */
static int op_end(op *o, int rc, fg_err *err)
{
    for (int i = 0; i < o->n; i++) {
        staged *s = &o->s[i];
        if (rc == FG_OK && s->host && s->n)
            rc = fg_device_sim_copy_inline(o->d, s->host, FG_BUFT_HOST, s->dev,
                                           FG_BUFT_DEVICE, s->n, err);
        o->d->iface->free(o->d, FG_BUFT_DEVICE, s->dev);
    }
    o->n = 0;
    return rc;
}

static op op_begin(fg_backend *be)
{
    op o;
    o.d = be->dev;
    o.n = 0;
    return o;
}

/* ---- weight pieces: on the device, or uploaded into a slot ---- */

typedef struct slot {
    fg_wpiece src;          /* the owner's piece (held while `held`) */
    int held;
    void *buf;              /* device buffer of an uploaded piece, or NULL */
    fg_event *ev;           /* its upload */
    fg_wpiece dev;          /* the piece as the kernels see it (data: device bytes) */
} slot;

/* Acquire piece i; start its upload when it is in host memory (asynchronous unless sync). */
static int piece_get(fg_backend *be, const fg_weight *w, uint32_t i, slot *s, int sync,
                     fg_err *err)
{
    fg_device *d = be->dev;
    memset(s, 0, sizeof *s);
    int rc = w->acquire(w->ctx, i, &s->src, err);
    if (rc)
        return rc;
    s->held = 1;
    s->dev = s->src;
    void *alias = fg_device_sim_alias(d, s->src.data);
    if (alias) {
        s->dev.data = alias;
        return fg_device_sim_owns(d, s->src.data, s->src.len)
                   ? FG_OK
                   : fg_err_set(err, FG_ERR_INVALID_ARG, "sim backend: a weight piece of %zu "
                                "bytes runs past the device's memory", s->src.len);
    }
    rc = d->iface->alloc(d, FG_BUFT_DEVICE, s->src.len, &s->buf, err);
    if (rc == FG_OK)
        rc = sync ? d->iface->copy(d, s->buf, FG_BUFT_DEVICE, s->src.data, FG_BUFT_HOST,
                                   s->src.len, NULL, err)
                  : fg_device_sim_upload(d, s->buf, s->src.data, s->src.len, &s->ev, err);
    s->dev.data = s->buf ? fg_device_sim_alias(d, s->buf) : NULL;
    return rc;
}

/* The piece's bytes are on the device: an uploaded piece's owner copy is released. */
static int piece_ready(fg_backend *be, const fg_weight *w, slot *s, fg_err *err)
{
    if (!s->buf)
        return FG_OK;
    int rc = be->dev->iface->event_wait(be->dev, s->ev, err);
    s->ev = NULL;
    int rc2 = w->release(w->ctx, &s->src, rc ? NULL : err);
    s->held = 0;
    return rc ? rc : rc2;
}

static int piece_done(fg_backend *be, const fg_weight *w, slot *s, int rc, fg_err *err)
{
    if (s->ev)
        be->dev->iface->event_wait(be->dev, s->ev, NULL);
    if (s->held) {
        int rc2 = w->release(w->ctx, &s->src, rc ? NULL : err);
        rc = rc ? rc : rc2;
    }
    be->dev->iface->free(be->dev, FG_BUFT_DEVICE, s->buf);
    memset(s, 0, sizeof *s);
    return rc;
}

/* A one-piece weight handing the kernels a device piece. */
static int one_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)i, (void)err;
    *p = *(const fg_wpiece *)ctx;
    return FG_OK;
}

static int one_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)ctx, (void)p, (void)err;
    return FG_OK;
}

/* Kernels on a piece in device memory: y's columns [first, first + n). */
static int linear_one(fg_backend *be, const float *x, const fg_wpiece *p, const float *bias,
                      float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    sim_ctx *c = be->ctx;
    uint64_t rows[2] = {p->first, p->first + p->n};
    fg_weight one = {NULL, 1, rows, one_acquire, one_release, NULL, (void *)p};
    double t0 = fg_now();
    int rc = c->cpu->iface->linear(c->cpu, x, &one, bias, y, m, n, k, err);
    c->compute_s += fg_now() - t0;
    return rc;
}

/* Pieces one by one; piece i + 1 uploads while piece i multiplies (unless no_overlap). */
static int linear_pieces(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                         float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    sim_ctx *c = be->ctx;
    slot sl[2];
    memset(sl, 0, sizeof sl);
    int rc = w->n_pieces ? piece_get(be, w, 0, &sl[0], c->no_overlap, err) : FG_OK;
    for (uint32_t i = 0; rc == FG_OK && i < w->n_pieces; i++) {
        slot *cur = &sl[i % 2], *nxt = &sl[(i + 1) % 2];
        int more = i + 1 < w->n_pieces, early = 0;
        rc = piece_ready(be, w, cur, err);
        if (rc == FG_OK && more && !cur->held && !c->no_overlap) {
            early = 1; /* the owner holds nothing now: start the next upload */
            rc = piece_get(be, w, i + 1, nxt, 0, err);
        }
        if (rc == FG_OK)
            rc = linear_one(be, x, &cur->dev, bias, y, m, n, k, err);
        rc = piece_done(be, w, cur, rc, err);
        if (rc == FG_OK && more && !early)
            rc = piece_get(be, w, i + 1, nxt, c->no_overlap, err);
    }
    rc = piece_done(be, w, &sl[0], rc, err);
    return piece_done(be, w, &sl[1], rc, err);
}

static int sim_linear(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                      float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx, *dw = NULL, *db, *dy;
    int rc = opnd(&o, x, (size_t)m * k * 4, 1, 0, &dx, err);
    if (rc == FG_OK && w->f32)
        rc = opnd(&o, w->f32, (size_t)n * k * 4, 1, 0, &dw, err);
    if (rc == FG_OK)
        rc = opnd(&o, bias, (size_t)n * 4, 1, 0, &db, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, (size_t)m * n * 4, 0, 1, &dy, err);
    if (rc == FG_OK && w->f32) {
        fg_weight dev = *w;
        dev.f32 = dw;
        double t0 = fg_now();
        rc = c->cpu->iface->linear(c->cpu, dx, &dev, db, dy, m, n, k, err);
        c->compute_s += fg_now() - t0;
    } else if (rc == FG_OK) {
        rc = linear_pieces(be, dx, w, db, dy, m, n, k, err);
    }
    return op_end(&o, rc, err);
}

/* ---- gather: a weight whose pieces are uploaded as the kernels acquire them ---- */

typedef struct wrap {
    fg_backend *be;
    const fg_weight *w;
    slot s;
} wrap;

static int wrap_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    wrap *x = ctx;
    int rc = piece_get(x->be, x->w, i, &x->s, 1, err);
    if (rc == FG_OK)
        rc = piece_ready(x->be, x->w, &x->s, err);
    if (rc)
        return piece_done(x->be, x->w, &x->s, rc, err);
    *p = x->s.dev;
    return FG_OK;
}

static int wrap_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)p;
    wrap *x = ctx;
    return piece_done(x->be, x->w, &x->s, FG_OK, err);
}

static void wrap_prefetch(void *ctx, uint32_t i)
{
    wrap *x = ctx;
    if (x->w->prefetch)
        x->w->prefetch(x->w->ctx, i);
}

static int sim_gather(fg_backend *be, const fg_weight *w, uint64_t rows, const int32_t *ids,
                      uint32_t n, float *out, uint32_t width, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *di, *dout, *dw = NULL;
    int rc = opnd(&o, ids, (size_t)n * 4, 1, 0, &di, err);
    if (rc == FG_OK)
        rc = opnd(&o, out, (size_t)n * width * 4, 0, 1, &dout, err);
    if (rc == FG_OK && w->f32)
        rc = opnd(&o, w->f32, (size_t)rows * width * 4, 1, 0, &dw, err);
    wrap x;
    memset(&x, 0, sizeof x);
    x.be = be;
    x.w = w;
    fg_weight dev = *w;
    dev.f32 = dw;
    if (!w->f32) {
        dev.acquire = wrap_acquire;
        dev.release = wrap_release;
        dev.prefetch = wrap_prefetch;
        dev.ctx = &x;
    }
    if (rc == FG_OK)
        rc = c->cpu->iface->gather(c->cpu, &dev, rows, di, n, dout, width, err);
    return op_end(&o, rc, err);
}

/* ---- small ops ---- */

static int sim_layernorm(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                         uint32_t rows, uint32_t n, float eps, fg_err *err)
{
    sim_ctx *c = be->ctx;
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
    if (rc == FG_OK)
        rc = c->cpu->iface->layernorm(c->cpu, dx, dg, db, dy, rows, n, eps, err);
    return op_end(&o, rc, err);
}

static int sim_rmsnorm(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                       uint32_t n, float eps, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx, *dg, *dy;
    size_t bytes = (size_t)rows * n * 4;
    int rc = opnd(&o, x, bytes, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, g, (size_t)n * 4, 1, 0, &dg, err);
    if (rc == FG_OK)
        rc = opnd(&o, y, bytes, 0, 1, &dy, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->rmsnorm(c->cpu, dx, dg, dy, rows, n, eps, err);
    return op_end(&o, rc, err);
}

static int sim_rope(fg_backend *be, float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                    const int32_t *positions, const fg_rope *r, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx, *dp;
    int rc = opnd(&o, x, (size_t)rows * n_heads * head_dim * 4, 1, 1, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, positions, (size_t)rows * 4, 1, 0, &dp, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->rope(c->cpu, dx, rows, n_heads, head_dim, dp, r, err);
    return op_end(&o, rc, err);
}

static int sim_act(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n,
                   fg_err *err)
{
    sim_ctx *c = be->ctx;
    int rc = fgb_act_check(a, up, err); /* before x is staged */
    if (rc)
        return rc;
    op o = op_begin(be);
    void *dx, *du;
    rc = opnd(&o, x, n * 4, 1, 1, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, up, n * 4, 1, 0, &du, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->act(c->cpu, a, dx, du, n, err);
    return op_end(&o, rc, err);
}

static int sim_add(fg_backend *be, float *y, const float *x, size_t n, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dy, *dx;
    int rc = opnd(&o, y, n * 4, 1, 1, &dy, err);
    if (rc == FG_OK)
        rc = opnd(&o, x, n * 4, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->add(c->cpu, dy, dx, n, err);
    return op_end(&o, rc, err);
}

static int sim_scale(fg_backend *be, float *x, float s, size_t n, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx;
    int rc = opnd(&o, x, n * 4, 1, 1, &dx, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->scale(c->cpu, dx, s, n, err);
    return op_end(&o, rc, err);
}

/* Greedy sampling where the logits are: only the ids cross the link when they are host memory. */
static int sim_argmax(fg_backend *be, const float *x, uint32_t rows, uint32_t n, int32_t *ids,
                      fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx, *di;
    int rc = opnd(&o, x, (size_t)rows * n * 4, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, ids, (size_t)rows * 4, 0, 1, &di, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->argmax(c->cpu, dx, rows, n, di, err);
    return op_end(&o, rc, err);
}

/* A mixture of experts' rows into their tokens' rows: y is in and out whatever accumulate is
 * (the rows idx does not name keep their values), so a host y crosses the link both ways. */
static int sim_scatter(fg_backend *be, float *y, uint32_t y_rows, const float *x,
                       const int32_t *idx, const float *s, uint32_t n, uint32_t width,
                       int accumulate, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dy, *dx, *di, *ds;
    size_t row = (size_t)width * 4;
    int rc = opnd(&o, y, (size_t)y_rows * row, 1, 1, &dy, err);
    if (rc == FG_OK)
        rc = opnd(&o, x, (size_t)n * row, 1, 0, &dx, err);
    if (rc == FG_OK)
        rc = opnd(&o, idx, (size_t)n * 4, 1, 0, &di, err);
    if (rc == FG_OK)
        rc = opnd(&o, s, (size_t)n * 4, 1, 0, &ds, err);
    if (rc == FG_OK)
        rc = c->cpu->iface->scatter(c->cpu, dy, y_rows, dx, di, ds, n, width, accumulate, err);
    return op_end(&o, rc, err);
}

/* ---- KV cache and attention ---- */

/* One of the cache's K/V arrays for rows [row, row + n): device memory in place (the view
 * keeps its rows), or those rows staged (the view starts at `row`). */
static int kv_side(op *o, void *base, const fg_kv_view *kv, uint32_t row, uint32_t n, int in,
                   int out, void **view_base, fg_err *err)
{
    if (fg_device_sim_alias(o->d, base))
        return opnd(o, base, (size_t)kv->cap * kv->row_bytes, 0, 0, view_base, err);
    return opnd(o, (uint8_t *)base + (size_t)row * kv->row_bytes, (size_t)n * kv->row_bytes, in,
                out, view_base, err);
}

static int sim_kv_store(fg_backend *be, const fg_kv_view *kv, uint32_t row, const float *k,
                        const float *v, uint32_t n, fg_err *err)
{
    sim_ctx *c = be->ctx;
    if ((uint64_t)row + n > kv->cap)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "KV rows %u..%u beyond the cache's %u", row,
                          row + n, kv->cap);
    op o = op_begin(be);
    fg_kv_view dv = *kv;
    void *dk, *dvv, *kb = NULL, *vb = NULL;
    size_t in = (size_t)n * kv->width * 4;
    int rc = opnd(&o, k, in, 1, 0, &dk, err);
    if (rc == FG_OK)
        rc = opnd(&o, v, in, 1, 0, &dvv, err);
    if (rc == FG_OK)
        rc = kv_side(&o, kv->k, kv, row, n, 0, 1, &kb, err);
    if (rc == FG_OK)
        rc = kv_side(&o, kv->v, kv, row, n, 0, 1, &vb, err);
    uint32_t at = row;
    if (rc == FG_OK && !fg_device_sim_alias(o.d, kv->k)) {
        at = 0;
        dv.cap = n;
    }
    dv.k = kb;
    dv.v = vb;
    if (rc == FG_OK && !fg_device_sim_alias(o.d, kv->k) != !fg_device_sim_alias(o.d, kv->v))
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "sim backend: a KV cache half on the device");
    if (rc == FG_OK)
        rc = c->cpu->iface->kv_store(c->cpu, &dv, at, dk, dvv, n, err);
    return op_end(&o, rc, err);
}

static int on_sim_device(const fg_device *d, const void *p)
{
    return fg_device_sim_alias(d, p) != NULL;
}

static int sim_attention(fg_backend *be, const fg_attn_op *a, fg_err *err)
{
    sim_ctx *c = be->ctx;
    int rc = fgb_attn_check(a, err);
    if (rc)
        return rc;
    if (c->cpu_attention && !fg_device_sim_alias(be->dev, a->kv.k) &&
        !fg_device_sim_alias(be->dev, a->kv.v)) /* where the cache lives */
        return fgb_attention_on_host(c->cpu, be->dev, on_sim_device, &c->room, a, err);
    op o = op_begin(be);
    fg_attn_op d = *a;
    uint32_t ctx = a->q_pos0 + a->n_q, qw = a->n_heads * a->head_dim;
    uint32_t ow = a->n_heads * fgb_attn_vdim(a);
    fg_kv_view vrows = a->kv; /* the value rows' shape */
    vrows.row_bytes = fgb_attn_vrow_bytes(a);
    void *p;
    int quant = a->kv.codec.id != FG_CODEC_F32;
    rc = opnd(&o, a->q, (size_t)a->n_q * qw * 4, 1, 0, &p, err);
    d.q = p;
    if (rc == FG_OK && (rc = kv_side(&o, a->kv.k, &a->kv, 0, ctx, 1, 0, &p, err)) == FG_OK)
        d.kv.k = d.kv.v = p; /* the values in the keys' rows (MLA) cross the link once */
    if (rc == FG_OK && !fgb_attn_v_is_k(a) &&
        (rc = kv_side(&o, a->kv.v, &vrows, 0, ctx, 1, 0, &p, err)) == FG_OK)
        d.kv.v = p;
    if (rc == FG_OK && (rc = opnd(&o, a->valid, a->kv.cap, 1, 0, &p, err)) == FG_OK)
        d.valid = p;
    if (rc == FG_OK && (rc = opnd(&o, a->sinks, (size_t)a->n_heads * 4, 1, 0, &p, err)) == FG_OK)
        d.sinks = p;
    if (rc == FG_OK && (rc = opnd(&o, a->out, (size_t)a->n_q * ow * 4, 0, 1, &p, err)) == FG_OK)
        d.out = p;
    if (rc == FG_OK && (rc = opnd(&o, a->scratch, a->scratch_parts * a->scratch_stride * 4, 0, 0,
                                  &p, err)) == FG_OK)
        d.scratch = p;
    size_t tmp = (size_t)ctx * a->kv.width * 4, vtmp = (size_t)ctx * fgb_attn_vwidth(a) * 4;
    if (rc == FG_OK && quant && (rc = opnd(&o, a->k_tmp, tmp, 0, 0, &p, err)) == FG_OK)
        d.k_tmp = p;
    if (rc == FG_OK && quant && !fgb_attn_v_is_k(a) &&
        (rc = opnd(&o, a->v_tmp, vtmp, 0, 0, &p, err)) == FG_OK)
        d.v_tmp = p;
    if (rc == FG_OK) {
        double t0 = fg_now();
        rc = c->cpu->iface->attention(c->cpu, &d, err);
        c->compute_s += fg_now() - t0;
    }
    return op_end(&o, rc, err);
}

/* ---- the rest ---- */

static int sim_heads(fg_backend *be, const fg_heads_op *h, fg_err *err)
{
    sim_ctx *c = be->ctx;
    op o = op_begin(be);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    fg_heads_op d = *h;
    int rc = fgb_heads_check(h, err);
    if (rc == FG_OK)
        rc = opnd(&o, h->x, fg_heads_span(h, 0) * 4, 1, 0, &dx, err);
    if (rc == FG_OK && h->w)
        rc = opnd(&o, h->w, fg_heads_span(h, 1) * 4, 1, 0, &dw, err);
    if (rc == FG_OK) /* (in and out: the rows between the heads stay) */
        rc = opnd(&o, h->y, fg_heads_span(h, 2) * 4, 1, 1, &dy, err);
    d.x = dx, d.w = dw, d.y = dy;
    if (rc == FG_OK)
        rc = c->cpu->iface->heads(c->cpu, &d, err);
    return op_end(&o, rc, err);
}

static int sim_sync(fg_backend *be, fg_err *err)
{
    return be->dev->iface->sync(be->dev, err);
}

static int sim_reserve(fg_backend *be, uint64_t floats, fg_err *err)
{
    sim_ctx *c = be->ctx;
    return c->cpu->iface->reserve(c->cpu, floats, err);
}

static void sim_stats(const fg_backend *be, fg_backend_stats *out)
{
    const sim_ctx *c = be->ctx;
    c->cpu->iface->stats(c->cpu, out);
    fg_device_sim_stats st;
    fg_device_sim_stats_get(be->dev, &st);
    out->link_bytes[0] = st.bytes[0][1];
    out->link_bytes[1] = st.bytes[1][0];
}

static void sim_destroy(fg_backend *be)
{
    sim_ctx *c = be->ctx;
    if (c) {
        fg_backend_free(c->cpu);
        free(c->room.p);
    }
    free(c);
    fg_device_free(be->dev);
    free(be);
}

static const fg_backend_iface k_sim_backend = {
    "sim", sim_sync, sim_reserve,
    sim_linear, sim_gather, sim_layernorm, sim_rmsnorm, sim_rope, sim_act, sim_add, sim_scale,
    sim_argmax, sim_scatter, sim_kv_store, sim_attention, sim_stats, sim_destroy, sim_heads,
};

int fg_backend_sim_create(const fg_backend_sim_opts *o, fg_backend **out, fg_err *err)
{
    fg_backend *be = calloc(1, sizeof *be);
    sim_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return fg_err_set(err, FG_ERR_NOMEM, "sim backend: out of memory");
    }
    be->iface = &k_sim_backend;
    be->ctx = c;
    c->cpu_attention = o->cpu_attention;
    c->no_overlap = o->no_overlap;
    fg_backend_cpu_opts co = {o->threads, o->compute};
    int rc = fg_device_sim_create(o->capacity, o->link_gbps, &be->dev, err);
    if (rc == FG_OK)
        rc = fg_backend_cpu_create_opts(&co, &c->cpu, err);
    if (rc) {
        sim_destroy(be);
        return rc;
    }
    *out = be;
    return FG_OK;
}

double fg_backend_sim_compute_s(const fg_backend *be)
{
    return ((const sim_ctx *)be->ctx)->compute_s;
}
