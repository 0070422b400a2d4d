/* ops_ref.c - the scalar reference of every backend op (fg_ops_ref), and a backend that runs
 * them (fg_backend_ref_create).
 *
 * These are the definitions: plain loops, one thread, no SIMD, the reference ISA for every
 * codec. tests/test_ops.c runs each op of every backend present against them on odd shapes.
 * Its device is the host device: host memory only.
 *
 * The ops: linear, gather, LayerNorm, RMSNorm, RoPE, activations, add, scale, argmax, scatter
 * (a mixture of experts' rows back into their tokens' rows), KV store, attention. Where an op's
 * arithmetic is specified step by step (scatter's product rounded before the add) the code
 * keeps the steps apart whatever -ffp-contract the build uses: a fused multiply-add would round
 * once and differ from torch and from the other backends in the last bit.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_int.h"

typedef struct ref_ctx {
    float *wbuf;          /* one decoded weight piece */
    uint64_t wcap;        /* floats */
    fg_backend_stats st;
} ref_ctx;

static int ref_sync(fg_backend *be, fg_err *err)
{
    (void)be, (void)err;
    return FG_OK;
}

static int ref_reserve(fg_backend *be, uint64_t floats, fg_err *err)
{
    ref_ctx *c = be->ctx;
    if (floats <= c->wcap)
        return FG_OK;
    float *p = realloc(c->wbuf, floats * 4);
    if (!p)
        return fg_err_set(err, FG_ERR_NOMEM, "reference backend: %llu floats of decode room",
                          (unsigned long long)floats);
    c->wbuf = p;
    c->wcap = floats;
    return FG_OK;
}

/* y[m, n] (row stride ldy) = x[m, k] . w[n, k]^T + bias */
static void gemm_ref(const float *x, const float *w, const float *bias, float *y, size_t ldy,
                     uint32_t m, uint32_t n, uint32_t k)
{
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t j = 0; j < n; j++) {
            double s = bias ? bias[j] : 0.0;
            for (uint32_t t = 0; t < k; t++)
                s += (double)x[(size_t)i * k + t] * w[(size_t)j * k + t];
            y[(size_t)i * ldy + j] = (float)s;
        }
}

static int ref_linear(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                      float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    ref_ctx *c = be->ctx;
    if (w->f32) {
        gemm_ref(x, w->f32, bias, y, n, m, n, k);
        return FG_OK;
    }
    for (uint32_t i = 0; i < w->n_pieces; i++) {
        fg_wpiece p;
        int rc = w->acquire(w->ctx, i, &p, err);
        if (rc)
            return rc;
        rc = fgb_check_piece(&p, n, k, err);
        if (rc == FG_OK && p.n * k > c->wcap)
            rc = fg_err_set(err, FG_ERR_INVALID_ARG, "reference backend: a piece of %llu floats "
                            "over the reserved %llu", (unsigned long long)(p.n * k),
                            (unsigned long long)c->wcap);
        if (rc == FG_OK)
            rc = fgb_decode_rows(&p, 0, p.n, c->wbuf, FG_QUANT_ISA_REF, err);
        int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
        if (rc || (rc = rc2))
            return rc;
        c->st.decoded_bytes += p.n * k * 4;
        gemm_ref(x, c->wbuf, bias ? bias + p.first : NULL, y + p.first, n, m, (uint32_t)p.n, k);
    }
    return FG_OK;
}

static int ref_gather(fg_backend *be, const fg_weight *w, uint64_t rows, const int32_t *ids,
                      uint32_t n, float *out, uint32_t width, fg_err *err)
{
    ref_ctx *c = be->ctx;
    for (uint32_t r = 0; r < n; r++) {
        if (ids[r] < 0 || (uint64_t)ids[r] >= rows)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "token id %d outside the vocabulary of "
                              "%llu", ids[r], (unsigned long long)rows);
        if (w->f32) {
            memcpy(out + (size_t)r * width, w->f32 + (size_t)ids[r] * width, (size_t)width * 4);
            continue;
        }
        uint32_t i = 0;
        while (i + 1 < w->n_pieces && w->piece_rows[i + 1] <= (uint64_t)ids[r])
            i++;
        fg_wpiece p;
        int rc = w->acquire(w->ctx, i, &p, err);
        if (rc)
            return rc;
        uint64_t q = fgb_quantum(&p), at = (uint64_t)ids[r] - p.first, r0 = at / q * q;
        uint64_t r1 = r0 + q < p.n ? r0 + q : p.n;
        if ((r1 - r0) * width > c->wcap)
            rc = fg_err_set(err, FG_ERR_INVALID_ARG, "reference backend: gather needs %llu "
                            "floats of decode room", (unsigned long long)((r1 - r0) * width));
        if (rc == FG_OK)
            rc = fgb_decode_rows(&p, r0, r1, c->wbuf, FG_QUANT_ISA_REF, err);
        if (rc == FG_OK)
            memcpy(out + (size_t)r * width, c->wbuf + (at - r0) * width, (size_t)width * 4);
        int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
        if (rc || (rc = rc2))
            return rc;
    }
    return FG_OK;
}

static int ref_layernorm(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                         uint32_t rows, uint32_t n, float eps, fg_err *err)
{
    (void)be, (void)err;
    for (uint32_t r = 0; r < rows; r++)
        fg_cpu_layernorm_ref(x + (size_t)r * n, g, b, y + (size_t)r * n, n, eps);
    return FG_OK;
}

int fgb_ref_rmsnorm(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                       uint32_t n, float eps, fg_err *err)
{
    (void)be, (void)err;
    for (uint32_t r = 0; r < rows; r++)
        fgb_rmsnorm_row(x + (size_t)r * n, g, y + (size_t)r * n, n, eps);
    return FG_OK;
}

int fgb_ref_rope(fg_backend *be, float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                    const int32_t *positions, const fg_rope *r, fg_err *err)
{
    (void)be;
    int rc = fgb_rope_check(r, head_dim, err);
    if (rc)
        return rc;
    float f[r->rot_dim / 2];
    fg_rope_inv_freq(r, f);
    fgb_rope_rows(x, rows, n_heads, head_dim, positions, f, r);
    return FG_OK;
}

int fgb_ref_act(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n, fg_err *err)
{
    (void)be;
    int rc = fgb_act_check(a, up, err);
    if (rc == FG_OK)
        fgb_act(a, x, up, n);
    return rc;
}

int fgb_ref_add(fg_backend *be, float *y, const float *x, size_t n, fg_err *err)
{
    (void)be, (void)err;
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return FG_OK;
}

int fgb_ref_heads(fg_backend *be, const fg_heads_op *o, fg_err *err)
{
    (void)be;
    int rc = fgb_heads_check(o, err);
    for (uint32_t t = 0; rc == FG_OK && t < o->n; t++)
        for (uint32_t h = 0; h < o->n_heads; h++) {
            const float *x = o->x + t * o->x_ld + h * o->x_hs;
            const float *w = o->w ? o->w + h * o->w_hs : NULL;
            float *y = o->y + t * o->y_ld + h * o->y_hs;
            for (uint32_t j = 0; j < o->m; j++) {
                float acc = 0;
                for (uint32_t i = 0; w && i < o->k; i++)
                    acc += (o->trans ? w[(size_t)i * o->w_ld + j] : w[(size_t)j * o->w_ld + i]) *
                           x[i];
                y[j] = w ? acc : x[j];
            }
        }
    return rc;
}

int fgb_ref_scale(fg_backend *be, float *x, float s, size_t n, fg_err *err)
{
    (void)be, (void)err;
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return FG_OK;
}

/* fg_sample's argmax (compute/sample.c), row by row: the scan keeps the first strict maximum,
 * so ties go to the lower index and a NaN is never greater; a NaN at 0 is never displaced. */
int fgb_ref_argmax(fg_backend *be, const float *x, uint32_t rows, uint32_t n, int32_t *ids,
                   fg_err *err)
{
    (void)be;
    if (!n)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "argmax over rows of 0 values");
    for (uint32_t r = 0; r < rows; r++) {
        const float *v = x + (size_t)r * n;
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
            if (v[i] > v[best])
                best = i;
        ids[r] = (int32_t)best;
    }
    return FG_OK;
}

/* y[idx[i], :] = s[i] * x[i, :], or += with accumulate, for i < n: the product rounded to f32
 * (a volatile, so no compiler fuses it into the add), then added, as torch's index_add_ of a
 * scaled tensor. Every index is checked before any row is written: a refused call leaves y as
 * it was. With accumulate 0 a row's old values (NaN included) are replaced, not scaled by 0. */
int fgb_ref_scatter(fg_backend *be, float *y, uint32_t y_rows, const float *x, const int32_t *idx,
                    const float *s, uint32_t n, uint32_t width, int accumulate, fg_err *err)
{
    (void)be;
    int rc = fgb_scatter_check(idx, n, y_rows, err);
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        const float *xr = x + (size_t)i * width;
        float *yr = y + (size_t)idx[i] * width;
        for (uint32_t c = 0; c < width; c++) {
            volatile float p = s[i] * xr[c];
            yr[c] = accumulate ? yr[c] + p : p;
        }
    }
    return rc;
}

static int ref_kv_store(fg_backend *be, const fg_kv_view *kv, uint32_t row, const float *k,
                        const float *v, uint32_t n, fg_err *err)
{
    (void)be;
    return fgb_kv_encode(kv, row, k, v, n, FG_QUANT_ISA_REF, err);
}

static int ref_attention(fg_backend *be, const fg_attn_op *a, fg_err *err)
{
    (void)be;
    const float *k, *v;
    int rc = fgb_attn_check(a, err);
    if (rc == FG_OK)
        rc = fgb_kv_f32(a, &k, &v, FG_QUANT_ISA_REF, err);
    if (rc == FG_OK) {
        fg_attn_args args = fgb_attn_args(a, k, v);
        fg_cpu_attention_ref(&args);
    }
    return rc;
}

static void ref_stats(const fg_backend *be, fg_backend_stats *out)
{
    *out = ((const ref_ctx *)be->ctx)->st;
}

static void ref_destroy(fg_backend *be)
{
    ref_ctx *c = be->ctx;
    if (c)
        free(c->wbuf);
    free(c);
    fg_device_free(be->dev);
    free(be);
}

const fg_backend_iface fg_ops_ref = {
    "ref", ref_sync, ref_reserve,
    ref_linear, ref_gather, ref_layernorm, fgb_ref_rmsnorm, fgb_ref_rope, fgb_ref_act, fgb_ref_add,
    fgb_ref_scale, fgb_ref_argmax, fgb_ref_scatter, ref_kv_store, ref_attention, ref_stats,
    ref_destroy, fgb_ref_heads,
};

int fg_backend_ref_create(fg_backend **out, fg_err *err)
{
    fg_backend *be = calloc(1, sizeof *be);
    ref_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return fg_err_set(err, FG_ERR_NOMEM, "reference backend: out of memory");
    }
    be->iface = &fg_ops_ref;
    be->ctx = c;
    int rc = fg_device_host_create(&be->dev, err);
    if (rc) {
        ref_destroy(be);
        return rc;
    }
    *out = be;
    return FG_OK;
}

void fg_backend_free(fg_backend *be)
{
    if (be)
        be->iface->destroy(be);
}
