/* ops_common.c - what the backends share (backend_int.h): typed row decoding, KV encode and
 * decode, and the scalar small ops.
 *
 * Numerics follow transformers: RMSNorm computes mean(x^2) in f32 and scales by rsqrt(ms + eps)
 * before the weight; RoPE's inverse frequencies are theta^(-2i/d) computed as transformers
 * does in f32 (1 / theta^(arange(0, d, 2) / d)), then rescaled for llama3/linear scaling; the
 * angle is position * inv_freq in f32, cos/sin in double then rounded (torch computes them in
 * f32 on f32 angles; both round to within an ulp of each other, far below the 1e-3 logits
 * bound). GELU is the exact erf form, gelu-tanh the tanh approximation, SiLU x * sigmoid(x);
 * gpt-oss's clamped SwiGLU takes transformers' steps in f32 (ops_scalar.h fgb_act2).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include "backend_int.h"
#include "ops_scalar.h"

uint64_t fgb_quantum(const fg_wpiece *p)
{
    return fg_codec_row_quantum(&p->codec, p->n_dims);
}

int fgb_check_piece(const fg_wpiece *p, uint32_t n, uint32_t k, fg_err *err)
{
    uint64_t cols = p->n_dims > 1 ? p->dims[1] : 1;
    if (p->first + p->n > n || cols != k || p->n_dims > 2)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "weight piece rows %llu..%llu x %llu does not "
                          "fit a [%u, %u] Linear", (unsigned long long)p->first,
                          (unsigned long long)(p->first + p->n), (unsigned long long)cols, n, k);
    return FG_OK;
}

int fgb_decode_rows(const fg_wpiece *p, uint64_t r0, uint64_t r1, float *dst, fg_quant_isa isa,
                    fg_err *err)
{
    uint64_t cols = p->n_dims > 1 ? p->dims[1] : 1, n = (r1 - r0) * cols;
    switch (p->codec.id) {
    case FG_CODEC_F32:
        memcpy(dst, (const float *)p->data + r0 * cols, n * 4);
        return FG_OK;
    case FG_CODEC_F16:
        fg_f16_to_f32((const uint16_t *)p->data + r0 * cols, dst, n, isa);
        return FG_OK;
    case FG_CODEC_BF16: {
        const uint16_t *s = (const uint16_t *)p->data + r0 * cols;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return FG_OK;
    }
    default: break;
    }
    uint64_t q = fgb_quantum(p);
    fg_qview one, v;
    int rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, q, &one, err);
    if (rc == FG_OK)
        rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, r1 - r0, &v, err);
    if (rc)
        return rc;
    uint64_t off = r0 / q * one.n_groups * one.group_bytes, len = v.n_groups * v.group_bytes;
    if (r0 % q || off + len > p->len)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "weight piece: rows %llu..%llu outside its "
                          "%zu bytes", (unsigned long long)r0, (unsigned long long)r1, p->len);
    return fg_quant_decode(&p->codec, &v, (const uint8_t *)p->data + off, len, dst, FG_CODEC_F32,
                           0, isa, err);
}

size_t fg_kv_row_bytes(const fg_codec *c, uint32_t width)
{
    if (c->id == FG_CODEC_F32)
        return (size_t)width * 4;
    uint64_t dims[2] = {1, width};
    fg_qview v;
    if (fg_codec_qview(c, 2, dims, 1, &v, NULL))
        return 0;
    return (size_t)(v.n_groups * v.group_bytes);
}

static int kv_view(const fg_kv_view *kv, uint32_t n, fg_qview *v, fg_err *err)
{
    uint64_t dims[2] = {n, kv->width};
    return fg_codec_qview(&kv->codec, 2, dims, n, v, err);
}

int fgb_kv_encode(const fg_kv_view *kv, uint32_t row, const float *k, const float *v, uint32_t n,
                  fg_quant_isa isa, fg_err *err)
{
    if ((uint64_t)row + n > kv->cap)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "KV rows %u..%u beyond the cache's %u", row,
                          row + n, kv->cap);
    uint8_t *kd = (uint8_t *)kv->k + (size_t)row * kv->row_bytes;
    uint8_t *vd = (uint8_t *)kv->v + (size_t)row * kv->row_bytes;
    if (kv->codec.id == FG_CODEC_F32) {
        memcpy(kd, k, (size_t)n * kv->row_bytes);
        memcpy(vd, v, (size_t)n * kv->row_bytes);
        return FG_OK;
    }
    fg_qview q;
    int rc = kv_view(kv, n, &q, err);
    size_t len = (size_t)n * kv->row_bytes;
    if (rc == FG_OK)
        rc = fg_quant_encode(&kv->codec, &q, k, FG_CODEC_F32, 0, kd, len, isa, err);
    if (rc == FG_OK)
        rc = fg_quant_encode(&kv->codec, &q, v, FG_CODEC_F32, 0, vd, len, isa, err);
    return rc;
}

/* Rows [0, n) of one plane of rows of `width` values (row_bytes each) decoded to f32 */
static int kv_decode_plane(const fg_kv_view *kv, const void *src, uint32_t width, size_t row_bytes,
                           uint32_t n, float *dst, fg_quant_isa isa, fg_err *err)
{
    fg_kv_view one = *kv;
    one.width = width;
    fg_qview q;
    int rc = kv_view(&one, n, &q, err);
    return rc ? rc : fg_quant_decode(&kv->codec, &q, src, (size_t)n * row_bytes, dst,
                                     FG_CODEC_F32, 0, isa, err);
}

uint32_t fgb_attn_vdim(const fg_attn_op *a)
{
    return a->v_dim ? a->v_dim : a->head_dim;
}

uint32_t fgb_attn_vwidth(const fg_attn_op *a)
{
    return a->v_off + a->n_kv_heads * fgb_attn_vdim(a);
}

size_t fgb_attn_vrow_bytes(const fg_attn_op *a)
{
    return fg_kv_row_bytes(&a->kv.codec, fgb_attn_vwidth(a));
}

int fgb_attn_v_is_k(const fg_attn_op *a)
{
    return a->kv.v == a->kv.k && fgb_attn_vwidth(a) == a->kv.width;
}

/* The values' place: fits 32 bits, a row the codec can hold, a quantized cache's offset at a
 * group boundary along the row (backend.h: where the values' own quantized row starts) */
static int attn_values_ok(const fg_attn_op *a)
{
    const fg_codec *c = &a->kv.codec;
    uint64_t vw = (uint64_t)a->v_off + (uint64_t)a->n_kv_heads * fgb_attn_vdim(a);
    if (vw > UINT32_MAX || !fgb_attn_vrow_bytes(a))
        return 0;
    return c->id == FG_CODEC_F32 || !a->v_off ||
           (c->group_axis == 1 && c->group_size && a->v_off % c->group_size == 0);
}

int fgb_attn_check(const fg_attn_op *a, fg_err *err)
{
    uint32_t kvh = a->n_kv_heads;
    if (!a->n_heads || !kvh || a->n_heads % kvh || kvh * a->head_dim != a->kv.width ||
        (uint64_t)a->q_pos0 + a->n_q > a->kv.cap ||
        a->scratch_stride < 2 * ((size_t)a->q_pos0 + a->n_q) || !a->scratch_parts)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "attention: %u heads over %u KV heads of %u, "
                          "cache rows %u of width %u, %u queries at %u", a->n_heads, kvh,
                          a->head_dim, a->kv.cap, a->kv.width, a->n_q, a->q_pos0);
    if (!attn_values_ok(a))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "attention: values of %u dims a head from "
                          "%u in rows of %s (a quantized row's offset must be a whole number of "
                          "its groups of %u)", fgb_attn_vdim(a), a->v_off,
                          fg_codec_name(a->kv.codec.id), a->kv.codec.group_size);
    return FG_OK;
}

int fgb_scatter_check(const int32_t *idx, uint32_t n, uint32_t y_rows, fg_err *err)
{
    for (uint32_t i = 0; i < n; i++)
        if (idx[i] < 0 || (uint32_t)idx[i] >= y_rows)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "scatter: row index %d (entry %u of %u) "
                              "is outside y's %u rows", idx[i], i, n, y_rows);
    return FG_OK;
}

int fgb_kv_f32(const fg_attn_op *a, const float **k, const float **v, fg_quant_isa isa,
               fg_err *err)
{
    if (a->kv.codec.id == FG_CODEC_F32) {
        *k = a->kv.k;
        *v = (const float *)a->kv.v + a->v_off;
        return FG_OK;
    }
    uint32_t n = a->q_pos0 + a->n_q;
    int same = fgb_attn_v_is_k(a);
    *k = a->k_tmp;
    *v = (same ? a->k_tmp : a->v_tmp) + a->v_off;
    int rc = kv_decode_plane(&a->kv, a->kv.k, a->kv.width, a->kv.row_bytes, n, a->k_tmp, isa,
                             err);
    return rc || same ? rc : kv_decode_plane(&a->kv, a->kv.v, fgb_attn_vwidth(a),
                                             fgb_attn_vrow_bytes(a), n, a->v_tmp, isa, err);
}

fg_attn_args fgb_attn_args(const fg_attn_op *a, const float *k, const float *v)
{
    return (fg_attn_args){a->q, k, v, a->kv.width, a->valid, a->n_q, a->q_pos0, a->n_heads,
                          a->head_dim, a->out, a->scratch, a->keep, a->scratch_stride,
                          a->scratch_parts, a->n_kv_heads, a->window, a->softcap, a->sinks,
                          fgb_attn_vwidth(a), fgb_attn_vdim(a)};
}

void fgb_rmsnorm_row(const float *x, const float *g, float *y, uint32_t n, float eps)
{
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = g[i] * (x[i] * inv);
}

/* LongRoPE's chosen list: rot_dim / 2 positive factors */
static int longrope_ok(const fg_rope *r)
{
    const float *ext = r->use_long ? r->long_factor : r->short_factor;
    for (uint32_t i = 0; i < r->rot_dim / 2 && i < FG_ROPE_MAX_EXT; i++)
        if (!(ext[i] > 0))
            return 0;
    return r->rot_dim / 2 <= FG_ROPE_MAX_EXT;
}

int fgb_rope_check(const fg_rope *r, uint32_t head_dim, fg_err *err)
{
    int scaled = r->scaling != FG_ROPE_NONE && r->scaling != FG_ROPE_LONGROPE;
    if (!(r->theta > 0) || r->rot_dim == 0 || r->rot_dim > head_dim || r->rot_dim % 2 ||
        (scaled && !(r->factor > 0)) || !(r->rot_scale >= 0) ||
        (r->scaling == FG_ROPE_YARN && !(r->beta_fast > 0 && r->beta_slow > 0 && r->orig_max_pos)) ||
        (r->scaling == FG_ROPE_LONGROPE && !longrope_ok(r)))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "rope: theta %g, %u of %u dims, factor %g",
                          (double)r->theta, r->rot_dim, head_dim, (double)r->factor);
    return FG_OK;
}

/* The dim (of rot_dim) whose frequency turns `rotations` times over orig_max_pos positions. */
static double yarn_dim(double rotations, const fg_rope *r)
{
    return (double)r->rot_dim * log((double)r->orig_max_pos / (rotations * 2.0 * M_PI)) /
           (2.0 * log((double)r->theta));
}

/* transformers' _compute_yarn_parameters: below dim `lo` the frequencies are kept (extrapolated),
 * past `hi` divided by factor (interpolated), with a linear ramp between. */
static void yarn_inv_freq(const fg_rope *r, float *f)
{
    double lo = yarn_dim(r->beta_fast, r), hi = yarn_dim(r->beta_slow, r);
    if (r->truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    lo = lo > 0 ? lo : 0;
    hi = hi < r->rot_dim - 1 ? hi : r->rot_dim - 1;
    if (lo == hi)
        hi += 0.001;
    for (uint32_t i = 0; i < r->rot_dim / 2; i++) { /* f32 steps in transformers' order */
        float ramp = ((float)i - (float)lo) / (float)(hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp, pos = powf(r->theta, (float)(2 * i) / (float)r->rot_dim);
        f[i] = 1.0f / (r->factor * pos) * (1.0f - keep) + 1.0f / pos * keep;
    }
}

const char *fg_rope_scaling_name(fg_rope_scaling s)
{
    static const char *const names[] = {
        [FG_ROPE_NONE] = "none", [FG_ROPE_LINEAR] = "linear", [FG_ROPE_LLAMA3] = "llama3",
        [FG_ROPE_YARN] = "yarn", [FG_ROPE_DYNAMIC] = "dynamic", [FG_ROPE_LONGROPE] = "longrope"};
    return (unsigned)s < sizeof names / sizeof names[0] && names[s] ? names[s] : "?";
}

void fg_rope_inv_freq(const fg_rope *r, float *f)
{
    uint32_t half = r->rot_dim / 2;
    for (uint32_t i = 0; i < half; i++)
        f[i] = 1.0f / powf(r->theta, (float)(2 * i) / (float)r->rot_dim);
    if (r->scaling == FG_ROPE_LINEAR) {
        for (uint32_t i = 0; i < half; i++)
            f[i] /= r->factor;
    } else if (r->scaling == FG_ROPE_LLAMA3) {
        /* transformers' _compute_llama3_parameters */
        float low_wl = (float)r->orig_max_pos / r->low_freq_factor;
        float high_wl = (float)r->orig_max_pos / r->high_freq_factor;
        for (uint32_t i = 0; i < half; i++) {
            float wl = 2.0f * (float)M_PI / f[i];
            if (wl > low_wl) {
                f[i] /= r->factor;
            } else if (wl >= high_wl) {
                float s = ((float)r->orig_max_pos / wl - r->low_freq_factor) /
                          (r->high_freq_factor - r->low_freq_factor);
                f[i] = (1.0f - s) * f[i] / r->factor + s * f[i];
            }
        }
    } else if (r->scaling == FG_ROPE_YARN) {
        yarn_inv_freq(r, f);
    } else if (r->scaling == FG_ROPE_LONGROPE) { /* _compute_longrope_parameters: 1 / (ext * pos) */
        const float *ext = r->use_long ? r->long_factor : r->short_factor;
        for (uint32_t i = 0; i < half && i < FG_ROPE_MAX_EXT; i++)
            f[i] = 1.0f / (ext[i] * powf(r->theta, (float)(2 * i) / (float)r->rot_dim));
    }
}

void fgb_rope_rows(float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                   const int32_t *positions, const float *inv_freq, const fg_rope *rp)
{
    uint32_t rot_dim = rp->rot_dim;
    float scale0 = rp->rot_scale > 0 ? rp->rot_scale : 1.0f;
    uint32_t half = rot_dim / 2;
    for (uint32_t r = 0; r < rows; r++) {
        float *row = x + (size_t)r * n_heads * head_dim;
        float pos = (float)(positions[r] > 0 ? positions[r] : 0);
        float sc = fgb_rope_row_scale(scale0, rp->pos_beta, rp->orig_max_pos, pos);
        for (uint32_t i = 0; i < half; i++)
            fgb_rope_pair(row, n_heads, head_dim, i, half, pos, inv_freq[i], sc);
    }
}

int fgb_act_check(fg_act_fn a, const float *up, fg_err *err)
{
    if (a.kind == FG_ACT_SWIGLU_OAI && !up)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "act: the clamped SwiGLU (gpt-oss) is gated "
                          "only, and up is NULL");
    return FG_OK;
}

void fgb_act(fg_act_fn a, float *x, const float *up, size_t n)
{
    size_t i = 0;
#ifdef __SSE__
    /* ReLU four at a time: gcc -O2 compiled fgb_act1's x > 0 ? x : 0 to a compare and a branch,
     * mispredicted on half of the activations (3% of a 4-bit decode); MAXPS(x, 0) is it exactly
     * (NaN and -0 give the second operand, +0). The tail, and every other kind, below. */
    const __m128 z = _mm_setzero_ps();
    for (; a.kind == FG_ACT_RELU && i + 4 <= n; i += 4) {
        __m128 v = _mm_max_ps(_mm_loadu_ps(x + i), z);
        _mm_storeu_ps(x + i, up ? _mm_mul_ps(v, _mm_loadu_ps(up + i)) : v);
    }
#endif
    for (; i < n; i++)
        x[i] = up ? fgb_act2(a, x[i], up[i]) : fgb_act1(a.kind, x[i]);
}

/* ---- attention beside a host cache, for device backends ---- */

/* Operand p of fgb_attention_on_host: p itself when host memory, else room (filled when in). */
static int host_side(fg_device *d, int (*on_device)(const fg_device *, const void *),
                     const void *p, size_t n, int in, void *room, void **out, fg_err *err)
{
    *out = (void *)p;
    if (!p || !on_device(d, p))
        return FG_OK;
    *out = room;
    return in && n ? d->iface->copy(d, room, FG_BUFT_HOST, p, FG_BUFT_DEVICE, n, NULL, err)
                   : FG_OK;
}

int fgb_attention_on_host(fg_backend *cpu, fg_device *d,
                          int (*on_device)(const fg_device *d, const void *p), fgb_room *room,
                          const fg_attn_op *a, fg_err *err)
{
    size_t qb = (size_t)a->n_q * a->n_heads * a->head_dim * 4;
    size_t ob = (size_t)a->n_q * a->n_heads * fgb_attn_vdim(a) * 4;
    size_t sb = (size_t)a->scratch_parts * a->scratch_stride * 4;
    int quant = a->kv.codec.id != FG_CODEC_F32;
    size_t tb = quant ? (size_t)(a->q_pos0 + a->n_q) * a->kv.width * 4 : 0;
    size_t vb = quant ? (size_t)(a->q_pos0 + a->n_q) * fgb_attn_vwidth(a) * 4 : 0;
    size_t hb = a->sinks ? (size_t)a->n_heads * 4 : 0;
    /* room: q, out, scratch, k_tmp, v_tmp, sinks (each a multiple of 4 bytes, so the floats
     * stay aligned), then the validity bytes */
    size_t need = qb + ob + sb + tb + vb + hb + a->kv.cap;
    if (need > room->cap) {
        uint8_t *r = realloc(room->p, need);
        if (!r)
            return fg_err_set(err, FG_ERR_NOMEM, "attention beside the cache: out of memory");
        room->p = r;
        room->cap = need;
    }
    uint8_t *h = room->p;
    fg_attn_op x = *a;
    void *p[7];
    size_t at[7] = {0, qb, qb + ob, qb + ob + sb, qb + ob + sb + tb}; /* q out sc kt vt hs vl */
    at[5] = at[4] + vb, at[6] = at[5] + hb;
    int rc = host_side(d, on_device, a->q, qb, 1, h, &p[0], err);
    if (rc == FG_OK)
        rc = host_side(d, on_device, a->valid, a->kv.cap, 1, h + at[6], &p[1], err);
    if (rc == FG_OK)
        rc = host_side(d, on_device, a->out, ob, 0, h + at[1], &p[2], err);
    if (rc == FG_OK)
        rc = host_side(d, on_device, a->scratch, sb, 0, h + at[2], &p[3], err);
    if (rc == FG_OK && quant)
        rc = host_side(d, on_device, a->k_tmp, tb, 0, h + at[3], &p[4], err);
    if (rc == FG_OK && quant)
        rc = host_side(d, on_device, a->v_tmp, vb, 0, h + at[4], &p[5], err);
    if (rc == FG_OK)
        rc = host_side(d, on_device, a->sinks, hb, 1, h + at[5], &p[6], err);
    if (rc)
        return rc;
    x.q = p[0], x.valid = p[1], x.out = p[2], x.scratch = p[3], x.sinks = p[6];
    if (quant)
        x.k_tmp = p[4], x.v_tmp = p[5];
    rc = cpu->iface->attention(cpu, &x, err);
    if (rc == FG_OK && x.out != a->out)
        rc = d->iface->copy(d, a->out, FG_BUFT_DEVICE, x.out, FG_BUFT_HOST, ob, NULL, err);
    return rc;
}

size_t fg_heads_span(const fg_heads_op *o, int which)
{
    if (!o->n || !o->n_heads)
        return 0;
    size_t t = o->n - 1, h = o->n_heads - 1;
    switch (which) {
    case 0:
        return t * o->x_ld + h * o->x_hs + o->k;
    case 1:
        return o->w ? h * o->w_hs + (size_t)((o->trans ? o->k : o->m) - 1) * o->w_ld +
                      (o->trans ? o->m : o->k) : 0;
    default:
        return t * o->y_ld + h * o->y_hs + o->m;
    }
}

int fgb_heads_check(const fg_heads_op *o, fg_err *err)
{
    if (!o->k || !o->m || (!o->w && o->m != o->k) ||
        (o->w && o->w_ld < (o->trans ? o->m : o->k)))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "heads: %u x %u heads of %u -> %u values "
                          "(a copy needs equal widths; a weight's rows at least as long)", o->n,
                          o->n_heads, o->k, o->m);
    return FG_OK;
}
