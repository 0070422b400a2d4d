/* opt.c - the OPT forward pass over the backend interface (see opt.h for the contract).
 *
 * Sub-layers and where the numbers come from (transformers' modeling_opt.py):
 *   embed:     x = tok[id] (. proj_in^T) + pos[position + 2]  (rows tok[id] gathered by the caller)
 *   attention: pre-LN:  x += out_proj(attn(LN(x)));  post-LN: x = LN(x + out_proj(attn(x)))
 *              q is scaled by head_dim^-1/2 before the dot products (transformers scales the
 *              products; the difference is rounding)
 *   mlp:       pre-LN:  x += fc2(relu(fc1(LN(x))));  post-LN: x = LN(x + fc2(relu(fc1(x))))
 *   head:      LN_final (when present), proj_out, x . lm_head^T
 * LayerNorm eps is 1e-5 everywhere (OPT's value).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "opt.h"
#include "quant.h"

#define LN_EPS 1e-5f
#define ATTN_PARTS 16 /* attention problems a backend may run at once (scratch regions) */

struct fg_opt_ws {
    uint32_t max_tokens, max_ctx;
    float *x_ln;    /* [max_tokens, max(hidden, embed_dim)] */
    float *q, *ctx; /* [max_tokens, hidden] */
    float *ffn;     /* [max_tokens, ffn] */
    float *scores;  /* [ATTN_PARTS][2 * max_ctx]: attention scores and the sparse-attention
                       copy, one region per problem the backend runs at once */
    float *kbuf, *vbuf; /* [max_tokens, hidden]: new keys/values before they go to the cache */
    uint32_t max_piece_rows;
    float *piece;   /* [max_tokens, max_piece_rows]: one weight piece's output columns */
};

int fg_opt_hparams_check(const fg_opt_hparams *c, fg_err *err)
{
    if (!c->vocab_size || !c->hidden || !c->n_layers || !c->ffn || !c->n_heads || !c->max_pos ||
        !c->embed_dim)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "OPT config: a size is zero (vocab %u, hidden "
                          "%u, layers %u, ffn %u, heads %u, positions %u, embed %u)",
                          c->vocab_size, c->hidden, c->n_layers, c->ffn, c->n_heads, c->max_pos,
                          c->embed_dim);
    if (c->hidden % c->n_heads)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "OPT config: hidden_size %u is not a multiple of num_attention_heads %u",
                          c->hidden, c->n_heads);
    return FG_OK;
}

int fg_opt_ws_create(const fg_opt_hparams *cfg, uint32_t max_tokens, uint32_t max_ctx,
                     uint32_t max_piece_rows, fg_opt_ws **out, fg_err *err)
{
    int rc = fg_opt_hparams_check(cfg, err);
    if (rc)
        return rc;
    fg_opt_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return fg_err_set(err, FG_ERR_NOMEM, "OPT workspace: out of memory");
    size_t t = max_tokens, h = cfg->hidden;
    size_t wide = cfg->embed_dim > h ? cfg->embed_dim : h;
    ws->max_tokens = max_tokens;
    ws->max_ctx = max_ctx;
    ws->x_ln = malloc(t * wide * sizeof(float));
    ws->q = malloc(t * h * sizeof(float));
    ws->ctx = malloc(t * h * sizeof(float));
    ws->kbuf = malloc(t * h * sizeof(float));
    ws->vbuf = malloc(t * h * sizeof(float));
    ws->ffn = malloc(t * cfg->ffn * sizeof(float));
    ws->scores = malloc(ATTN_PARTS * 2 * (size_t)max_ctx * sizeof(float));
    ws->max_piece_rows = max_piece_rows;
    ws->piece = malloc(t * max_piece_rows * sizeof(float) + 4);
    if (!ws->x_ln || !ws->q || !ws->ctx || !ws->kbuf || !ws->vbuf || !ws->ffn || !ws->scores ||
        !ws->piece) {
        fg_opt_ws_free(ws);
        return fg_err_set(err, FG_ERR_NOMEM, "OPT workspace (%u tokens, context %u): out of memory",
                          max_tokens, max_ctx);
    }
    *out = ws;
    return FG_OK;
}

void fg_opt_ws_free(fg_opt_ws *ws)
{
    if (!ws)
        return;
    free(ws->x_ln);
    free(ws->q);
    free(ws->ctx);
    free(ws->kbuf);
    free(ws->vbuf);
    free(ws->ffn);
    free(ws->scores);
    free(ws->piece);
    free(ws);
}

void fg_opt_positions(const uint8_t *valid, uint32_t n, int32_t *positions)
{
    int32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        count += valid[i] ? 1 : 0;
        positions[i] = valid[i] ? count - 1 : -1;
    }
}

static int check_step(const fg_opt_ws *ws, const fg_opt_step *s, uint32_t kv_cap, fg_err *err)
{
    uint64_t tokens = (uint64_t)s->n_seq * s->n_new;
    if (tokens > ws->max_tokens || s->pos0 + s->n_new > ws->max_ctx || s->pos0 + s->n_new > kv_cap)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "OPT step of %u x %u tokens at %u exceeds the "
                          "workspace (%u tokens, context %u, cache %u)", s->n_seq, s->n_new,
                          s->pos0, ws->max_tokens, ws->max_ctx, kv_cap);
    return FG_OK;
}

int fg_opt_embed(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_embed_w *w,
                 const fg_opt_step *s, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    uint32_t n = s->n_seq * s->n_new, h = cfg->hidden, e = cfg->embed_dim;
    if (!w->proj_in)
        memcpy(s->hidden, w->tok_rows, (size_t)n * h * sizeof(float));
    if (w->proj_in && (rc = be->iface->linear(be, w->tok_rows, w->proj_in, NULL, s->hidden, n, h, e)))
        return fg_err_set(err, rc, "project_in failed");
    for (uint32_t i = 0; i < n; i++) {
        int64_t p = (int64_t)s->positions[i] + 2;
        if (p < 0 || p >= (int64_t)cfg->max_pos + 2)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "position %d beyond the %u learned positions",
                              s->positions[i], cfg->max_pos);
        be->iface->add(be, s->hidden + (size_t)i * h, w->pos + (size_t)p * h, h);
    }
    return FG_OK;
}

/* out[m, n] = x[m, k] . W^T (+ bias): W whole in f32, or piece by piece, each piece's output
 * columns computed into ws->piece and copied into place. */
static int linear_w(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                    float *out, uint32_t m, uint32_t n, uint32_t k, fg_opt_ws *ws, fg_err *err)
{
    if (w->f32) {
        int rc = be->iface->linear(be, x, w->f32, bias, out, m, n, k);
        return rc ? fg_err_set(err, rc, "Linear [%u x %u] failed", n, k) : FG_OK;
    }
    for (uint32_t i = 0; i < w->n_pieces; i++) {
        const float *rows;
        uint64_t first, cnt;
        int rc = w->piece(w->ctx, i, &rows, &first, &cnt, err);
        if (rc)
            return rc;
        if (first + cnt > n || cnt > ws->max_piece_rows)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "weight piece of rows %llu..%llu outside "
                              "[0, %u) or over the workspace's %u rows",
                              (unsigned long long)first, (unsigned long long)(first + cnt), n,
                              ws->max_piece_rows);
        if ((rc = be->iface->linear(be, x, rows, bias ? bias + first : NULL, ws->piece, m,
                                    (uint32_t)cnt, k)))
            return fg_err_set(err, rc, "Linear [%u x %u] failed", n, k);
        for (uint32_t r = 0; r < m; r++)
            memcpy(out + (size_t)r * n + first, ws->piece + (size_t)r * cnt, cnt * sizeof *out);
    }
    return FG_OK;
}

/* q, k, v projections of the (normalized) input x, all n rows; q pre-scaled. */
static int project_qkv(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                       uint32_t n, const float *x, fg_opt_ws *ws, fg_err *err)
{
    uint32_t h = cfg->hidden;
    int rc = linear_w(be, x, &w->wq, w->bq, ws->q, n, h, h, ws, err);
    if (!rc)
        rc = linear_w(be, x, &w->wk, w->bk, ws->kbuf, n, h, h, ws, err);
    if (!rc)
        rc = linear_w(be, x, &w->wv, w->bv, ws->vbuf, n, h, h, ws, err);
    if (rc)
        return rc;
    float scale = 1.0f / sqrtf((float)(h / cfg->n_heads));
    for (size_t i = 0; i < (size_t)n * h; i++)
        ws->q[i] *= scale;
    return FG_OK;
}

/* The new keys/values of the step's sequences (workspace rows from row0) into the cache. */
static int store_kv(const fg_opt_hparams *cfg, const fg_opt_step *s, const fg_opt_kv *kv,
                    uint32_t row0, fg_opt_ws *ws)
{
    uint32_t h = cfg->hidden;
    for (uint32_t b = 0; b < s->n_seq; b++) {
        size_t row = (size_t)b * kv->kv_cap + s->pos0, src = (size_t)row0 + (size_t)b * s->n_new;
        const float *kn = ws->kbuf + src * h, *vn = ws->vbuf + src * h;
        if (!kv->codec) {
            memcpy(kv->k + row * h, kn, (size_t)s->n_new * h * 4);
            memcpy(kv->v + row * h, vn, (size_t)s->n_new * h * 4);
            continue;
        }
        uint64_t dims[2] = {s->n_new, h};
        fg_qview v;
        fg_codec_qview(kv->codec, 2, dims, s->n_new, &v, NULL);
        size_t len = (size_t)s->n_new * kv->row_bytes;
        int rc = fg_quant_encode(kv->codec, &v, kn, FG_CODEC_F32, 0, kv->qk + row * kv->row_bytes,
                                 len, FG_QUANT_ISA_AUTO, NULL);
        if (rc == FG_OK)
            rc = fg_quant_encode(kv->codec, &v, vn, FG_CODEC_F32, 0,
                                 kv->qv + row * kv->row_bytes, len, FG_QUANT_ISA_AUTO, NULL);
        if (rc)
            return rc;
    }
    return FG_OK;
}

size_t fg_opt_kv_row_bytes(const fg_codec *c, uint32_t hidden)
{
    uint64_t dims[2] = {1, hidden};
    fg_qview v;
    if (fg_codec_qview(c, 2, dims, 1, &v, NULL))
        return 0;
    return (size_t)(v.n_groups * v.group_bytes);
}

/* The cache rows [0, n_ctx) of sequence b as f32: the cache itself, or decoded into k_tmp. */
static int kv_rows(const fg_opt_kv *kv, uint32_t b, uint32_t n_ctx, uint32_t h, const float **k,
                   const float **v)
{
    size_t row = (size_t)b * kv->kv_cap;
    if (!kv->codec) {
        *k = kv->k + row * h;
        *v = kv->v + row * h;
        return FG_OK;
    }
    uint64_t dims[2] = {n_ctx, h};
    fg_qview q;
    fg_codec_qview(kv->codec, 2, dims, n_ctx, &q, NULL);
    size_t len = (size_t)n_ctx * kv->row_bytes;
    int rc = fg_quant_decode(kv->codec, &q, kv->qk + row * kv->row_bytes, len, kv->k_tmp,
                             FG_CODEC_F32, 0, FG_QUANT_ISA_AUTO, NULL);
    if (rc == FG_OK)
        rc = fg_quant_decode(kv->codec, &q, kv->qv + row * kv->row_bytes, len, kv->v_tmp,
                             FG_CODEC_F32, 0, FG_QUANT_ISA_AUTO, NULL);
    *k = kv->k_tmp;
    *v = kv->v_tmp;
    return rc;
}

/* What a sub-layer reads: LN(hidden) into ws->x_ln when pre-LN, else hidden itself. */
static const float *block_in(fg_backend *be, const fg_opt_hparams *cfg, const float *ln_w,
                             const float *ln_b, const fg_opt_step *s, fg_opt_ws *ws)
{
    if (!cfg->pre_ln)
        return s->hidden;
    be->iface->layernorm(be, s->hidden, ln_w, ln_b, ws->x_ln, s->n_seq * s->n_new, cfg->hidden,
                         LN_EPS);
    return ws->x_ln;
}

/* The residual: hidden += y, then the LayerNorm when post-LN. */
static void block_out(fg_backend *be, const fg_opt_hparams *cfg, const float *ln_w,
                      const float *ln_b, const fg_opt_step *s, const float *y)
{
    uint32_t n = s->n_seq * s->n_new, h = cfg->hidden;
    be->iface->add(be, s->hidden, y, (size_t)n * h);
    if (!cfg->pre_ln)
        be->iface->layernorm(be, s->hidden, ln_w, ln_b, s->hidden, n, h, LN_EPS);
}

int fg_opt_attn_pre(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                    const fg_opt_step *s, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    const float *x = block_in(be, cfg, w->ln_w, w->ln_b, s, ws);
    return project_qkv(be, cfg, w, s->n_seq * s->n_new, x, ws, err);
}

int fg_opt_attn_core(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_step *s,
                     const fg_opt_kv *kv, uint32_t row0, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, kv->kv_cap, err);
    if (rc)
        return rc;
    uint32_t h = cfg->hidden;
    if ((uint64_t)row0 + (uint64_t)s->n_seq * s->n_new > ws->max_tokens)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "attention rows %u..%llu exceed the workspace "
                          "(%u tokens)", row0,
                          (unsigned long long)row0 + (uint64_t)s->n_seq * s->n_new, ws->max_tokens);
    if ((rc = store_kv(cfg, s, kv, row0, ws)))
        return fg_err_set(err, rc, "writing the KV cache failed");
    for (uint32_t b = 0; b < s->n_seq; b++) {
        size_t row = (size_t)b * kv->kv_cap, r = (size_t)row0 + (size_t)b * s->n_new;
        const float *k, *v;
        if ((rc = kv_rows(kv, b, s->pos0 + s->n_new, h, &k, &v)))
            return fg_err_set(err, rc, "decoding the compressed KV cache failed");
        fg_attn_args a = {ws->q + r * h, k, v, h, s->valid + row, s->n_new, s->pos0,
                          cfg->n_heads, h / cfg->n_heads, ws->ctx + r * h, ws->scores,
                          s->attn_keep, 2 * (size_t)ws->max_ctx, ATTN_PARTS};
        if ((rc = be->iface->attention(be, &a)))
            return fg_err_set(err, rc, "attention failed");
    }
    return FG_OK;
}

int fg_opt_attn_post(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                     const fg_opt_step *s, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    uint32_t n = s->n_seq * s->n_new, h = cfg->hidden;
    /* out_proj into q's buffer, then the residual */
    if ((rc = linear_w(be, ws->ctx, &w->wo, w->bo, ws->q, n, h, h, ws, err)))
        return rc;
    block_out(be, cfg, w->ln_w, w->ln_b, s, ws->q);
    return FG_OK;
}

int fg_opt_attention(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                     const fg_opt_step *s, const fg_opt_kv *kv, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, kv->kv_cap, err);
    if (rc == FG_OK)
        rc = fg_opt_attn_pre(be, cfg, w, s, ws, err);
    if (rc == FG_OK)
        rc = fg_opt_attn_core(be, cfg, s, kv, 0, ws, err);
    if (rc == FG_OK)
        rc = fg_opt_attn_post(be, cfg, w, s, ws, err);
    return rc;
}

int fg_opt_mlp(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_mlp_w *w,
               const fg_opt_step *s, fg_opt_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    uint32_t n = s->n_seq * s->n_new, h = cfg->hidden;
    const float *x = block_in(be, cfg, w->ln_w, w->ln_b, s, ws);
    rc = linear_w(be, x, &w->w1, w->b1, ws->ffn, n, cfg->ffn, h, ws, err);
    if (!rc && (rc = be->iface->relu(be, ws->ffn, (size_t)n * cfg->ffn)))
        fg_err_set(err, rc, "MLP relu failed");
    if (!rc)
        rc = linear_w(be, ws->ffn, &w->w2, w->b2, ws->q, n, h, cfg->ffn, ws, err);
    if (rc)
        return rc;
    block_out(be, cfg, w->ln_w, w->ln_b, s, ws->q);
    return FG_OK;
}

int fg_opt_logits(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_head_w *w,
                  const float *hidden, uint32_t n, float *logits, fg_opt_ws *ws, fg_err *err)
{
    if (n > ws->max_tokens)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "logits for %u rows exceed the workspace (%u)",
                          n, ws->max_tokens);
    uint32_t h = cfg->hidden, e = cfg->embed_dim;
    const float *x = hidden;
    if (w->ln_w) {
        be->iface->layernorm(be, hidden, w->ln_w, w->ln_b, ws->q, n, h, LN_EPS);
        x = ws->q;
    }
    int rc = FG_OK;
    if (w->proj_out) {
        rc = be->iface->linear(be, x, w->proj_out, NULL, ws->x_ln, n, e, h);
        x = ws->x_ln;
    }
    if (!rc)
        rc = be->iface->linear(be, x, w->lm_head, NULL, logits, n, cfg->vocab_size, e);
    return rc ? fg_err_set(err, rc, "LM head failed") : FG_OK;
}
