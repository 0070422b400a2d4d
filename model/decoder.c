/* decoder.c - the generic decoder forward pass over backend ops (see model.h for the math) and
 * its workspace. Every family whose layers are "norm -> attention -> residual, norm -> MLP ->
 * residual" (pre- or post-norm) runs through here: OPT, and the Llama family through its
 * hyperparameters alone (RMSNorm, RoPE, gated SiLU, grouped-query and sliding-window attention,
 * Qwen3's per-head q/k norms are switches of fg_hparams), and mixtures of experts: a unit with
 * a router runs each token through its top_k experts, gathering the rows routed to one expert
 * (backend gather), multiplying only that expert's rows of the stacked weights (a view of
 * the pieces that hold them: an expert is whole stored chunks) and scattering the outputs back
 * weighted (backend scatter); the routing itself is host code over the router's logits copied
 * down (n x n_experts floats a step).
 *
 * Memory: the workspace comes from the backend's device (fg_model_ws_create's dev and buft): on
 * a device backend its buffers are device memory the ops use in place, so a step's activations
 * never cross the host <-> device link; nothing here dereferences them (the query scaling is the
 * backend's scale op). Host code reads only the step's positions_host (the learned-position
 * rows to add).
 *
 * Multi-head latent attention (hp->mla) attends over its latent cache rows absorbed, or in a
 * prefill step expanded into per-head keys and values when that costs fewer multiply-adds: with
 * n new tokens a sequence at p cached rows (T = p + n, pairs = n p + n (n + 1) / 2), expanded
 * costs T r (nope + v) + (qk + v) pairs a head, absorbed n r (nope + v) + (pe + 2 r) pairs (r
 * kv_lora_rank, pe / nope the rotary / plain key dims, qk their sum, v v_head_dim); the section
 * "multi-head latent attention" below says why and what else decides (FG_MLA_PREFILL, the
 * cache's codec).
 *
 * Numerics follow transformers: q is scaled by head_dim^-1/2 before the dot products
 * (transformers scales the products; the difference is rounding); a padding query attends
 * nothing and gets zeros (its outputs are never used).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define ATTN_PARTS 16 /* attention problems a backend may run at once (scratch regions) */
#define MOE_MAX_PIECES 4096 /* stored chunks of one expert's weight (4 MiB chunks: 16 GiB) */

struct fg_model_ws {
    uint32_t max_tokens, max_ctx;
    fg_device *dev;   /* borrowed: where the buffers below come from */
    fg_buft buft;     /* FG_BUFT_HOST or FG_BUFT_DEVICE */
    float *x_ln;    /* [max_tokens, max(hidden, embed_dim)] */
    float *q, *ctx; /* [max_tokens, n_heads * head_dim] */
    float *tmp;     /* [max_tokens, max(hidden, embed_dim)] block outputs */
    float *ffn, *up;/* [max_tokens, ffn] (up: gated MLPs) */
    float *scores;  /* [ATTN_PARTS][2 * max_ctx] */
    float *kbuf, *vbuf; /* [max_tokens, kv width]: new keys/values before they go to the cache */
    float *k_tmp, *v_tmp; /* [max_ctx, kv width]: a quantized cache decoded for attention */
    float *mla;      /* hp->mla: [max_tokens, mla_width]: q_a's rows, kv_a's, W_UV's output */
    /* a mixture of experts (hp->n_experts): in the workspace's memory */
    float *ex, *ey;  /* [max_tokens, hidden]: an expert's rows in, out */
    float *rlog;     /* [max_tokens, n_experts + 1]: router (and shared gate) logits */
    /* ... and in host memory (routing is host code over the logits copied down) */
    float *h_log;    /* [max_tokens, n_experts + 1] */
    int32_t *sel;    /* [max_tokens, top_k]: each token's experts */
    float *prob;     /* [max_tokens, top_k]: their weights */
    int32_t *idx;    /* [max_tokens, top_k]: the experts' token lists, one after another */
    float *sv;       /* [max_tokens, top_k + 1]: their weights, then the shared expert's */
    int32_t *ident;  /* [max_tokens]: 0, 1, ... */
    uint32_t *nf, *at, *cur; /* [n_experts], [n_experts + 1], [2 * (n_experts + 1)]: lists() */
    uint64_t *prow;  /* [3][MOE_MAX_PIECES + 1]: an expert's piece rows, gate, up, down */
    fg_moe_stats moe_st[2]; /* sparse MLPs run: [0] steps of several new tokens a sequence
                               (prefills), [1] of one (decode steps) */
    /* MLA: pre left its mla_rows queries raw in ctx for core (mla_defer; their positions
     * mla_pos, pre's step's), and how core attended (mla_expanded: the heads' values are in
     * ws->mla, [rows, n_heads * v_head_dim]) */
    int mla_defer, mla_expanded;
    int mla_apart;   /* absorbed: core attended the latent alone as the values (ctx rows
                      * [n_heads * kv_lora_rank]), else the whole rows (n_heads * head_dim) */
    uint32_t mla_rows;
    const int32_t *mla_pos;
};

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

/* MLA's own rows (ws->mla): q_a's, kv_a's, W_UV's output, whichever is widest (0 without MLA) */
static uint64_t mla_width(const fg_hparams *hp)
{
    if (!hp->mla)
        return 0;
    return maxz(hp->q_lora_rank, maxz((uint64_t)hp->kv_lora_rank + hp->qk_rope_dim,
                                      (uint64_t)hp->n_heads * hp->v_head_dim));
}

/* ws->q's and ws->ctx's rows: the attention's queries, and with MLA the projected q too */
static uint64_t q_width(const fg_hparams *hp)
{
    uint64_t qw = (uint64_t)hp->n_heads * hp->head_dim;
    return hp->mla ? maxz(qw, (uint64_t)hp->n_heads * (hp->qk_nope_dim + hp->qk_rope_dim)) : qw;
}

/* The widest MLP: dense, an expert, the shared expert. */
static uint64_t ffn_max(const fg_hparams *hp)
{
    return maxz(hp->ffn, maxz(hp->n_experts ? hp->moe_ffn : 0, hp->shared_ffn));
}

/* A mixture of experts' buffers: the workspace's memory ([0]) and host memory ([1]). */
static void moe_bytes(const fg_hparams *hp, uint64_t t, uint64_t out[2])
{
    uint64_t e = hp->n_experts + 1;
    out[0] = hp->n_experts ? 4 * (t * hp->hidden * 2 + t * e) : 0;
    out[1] = hp->n_experts ? 4 * (t * e + t * hp->top_k * 4 + t * 2 + e * 4) +
                             8 * 3 * (MOE_MAX_PIECES + 1) : 0;
}

uint64_t fg_model_ws_bytes(const fg_hparams *hp, uint32_t max_tokens, uint32_t max_ctx)
{
    uint64_t t = max_tokens, wide = maxz(hp->hidden, hp->embed_dim), moe[2];
    uint64_t qw = q_width(hp), kw = fg_model_kv_width(hp);
    moe_bytes(hp, t, moe);
    return 4 * (t * wide * 2 + t * qw * 2 + t * ffn_max(hp) * (hp->gated ? 2 : 1) +
                ATTN_PARTS * 2 * (uint64_t)max_ctx + t * kw * 2 + (uint64_t)max_ctx * kw * 2 +
                t * mla_width(hp)) +
           moe[0] + moe[1];
}

/* n bytes of the workspace's memory into *p (host: malloc; else the device's) */
static int ws_alloc(fg_model_ws *ws, size_t n, float **p, fg_err *err)
{
    if (ws->buft == FG_BUFT_HOST) {
        *p = malloc(n ? n : 1);
        return *p ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    void *v = NULL;
    int rc = ws->dev->iface->alloc(ws->dev, ws->buft, n ? n : 1, &v, err);
    *p = v;
    return rc;
}

static void ws_release(fg_model_ws *ws, float *p)
{
    if (ws->buft == FG_BUFT_HOST)
        free(p);
    else if (p)
        ws->dev->iface->free(ws->dev, ws->buft, p);
}

int fg_model_ws_create(const fg_hparams *hp, uint32_t max_tokens, uint32_t max_ctx,
                       fg_device *dev, fg_buft buft, fg_model_ws **out, fg_err *err)
{
    int rc = fg_hparams_check(hp, err);
    if (rc)
        return rc;
    if (buft != FG_BUFT_HOST && !dev)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "model workspace: device memory without a "
                          "device");
    fg_model_ws *ws = calloc(1, sizeof *ws);
    if (!ws)
        return fg_err_set(err, FG_ERR_NOMEM, "model workspace: out of memory");
    size_t t = max_tokens, wide = maxz(hp->hidden, hp->embed_dim), f = ffn_max(hp);
    size_t qw = q_width(hp), kw = fg_model_kv_width(hp);
    size_t me = hp->n_experts ? t : 0, ne = hp->n_experts + 1;
    ws->max_tokens = max_tokens;
    ws->max_ctx = max_ctx;
    ws->dev = dev;
    ws->buft = buft;
    struct { float **p; size_t n; } b[] = {
        {&ws->x_ln, t * wide * 4}, {&ws->q, t * qw * 4}, {&ws->ctx, t * qw * 4},
        {&ws->tmp, t * wide * 4}, {&ws->ffn, t * f * 4},
        {&ws->up, hp->gated ? t * f * 4 : 0},
        {&ws->scores, ATTN_PARTS * 2 * (size_t)max_ctx * 4},
        {&ws->kbuf, t * kw * 4}, {&ws->vbuf, t * kw * 4},
        {&ws->k_tmp, (size_t)max_ctx * kw * 4}, {&ws->v_tmp, (size_t)max_ctx * kw * 4},
        {&ws->ex, me * hp->hidden * 4}, {&ws->ey, me * hp->hidden * 4},
        {&ws->rlog, me * ne * 4}, {&ws->mla, t * mla_width(hp) * 4},
    };
    for (size_t i = 0; rc == FG_OK && i < sizeof b / sizeof b[0]; i++)
        if (b[i].n)
            rc = ws_alloc(ws, b[i].n, b[i].p, err);
    if (rc == FG_OK && me) { /* host memory whatever the workspace's */
        ws->h_log = malloc(me * ne * 4);
        ws->sel = malloc(me * hp->top_k * 4);
        ws->prob = malloc(me * hp->top_k * 4);
        ws->idx = malloc(me * hp->top_k * 4);
        ws->sv = malloc(me * (hp->top_k + 1) * 4);
        ws->ident = malloc(me * 4);
        ws->nf = malloc(ne * 4 * 4); /* nf, at, cur */
        ws->at = ws->nf ? ws->nf + ne : NULL;
        ws->cur = ws->nf ? ws->at + ne : NULL;
        ws->prow = malloc(3 * (MOE_MAX_PIECES + 1) * sizeof *ws->prow);
        if (!ws->h_log || !ws->sel || !ws->prob || !ws->idx || !ws->sv || !ws->ident ||
            !ws->nf || !ws->prow)
            rc = FG_ERR_NOMEM;
        for (size_t i = 0; rc == FG_OK && i < me; i++)
            ws->ident[i] = (int32_t)i;
    }
    if (rc) {
        fg_model_ws_free(ws);
        return fg_err_set(err, rc, "model workspace (%u tokens, context %u): out of %s memory",
                          max_tokens, max_ctx, buft == FG_BUFT_HOST ? "host" : "device");
    }
    *out = ws;
    return FG_OK;
}

void fg_model_ws_free(fg_model_ws *ws)
{
    if (!ws)
        return;
    float *b[] = {ws->x_ln, ws->q, ws->ctx, ws->tmp, ws->ffn, ws->up, ws->scores, ws->kbuf,
                  ws->vbuf, ws->k_tmp, ws->v_tmp, ws->ex, ws->ey, ws->rlog, ws->mla};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        ws_release(ws, b[i]);
    free(ws->h_log);
    free(ws->sel);
    free(ws->prob);
    free(ws->idx);
    free(ws->sv);
    free(ws->ident);
    free(ws->nf);
    free(ws->prow);
    free(ws);
}

static int check_step(const fg_model_ws *ws, const fg_step *s, uint32_t kv_cap, fg_err *err)
{
    uint64_t tokens = (uint64_t)s->n_seq * s->n_new;
    if (tokens > ws->max_tokens || s->pos0 + s->n_new > ws->max_ctx || s->pos0 + s->n_new > kv_cap)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "step of %u x %u tokens at %u exceeds the "
                          "workspace (%u tokens, context %u, cache %u)", s->n_seq, s->n_new,
                          s->pos0, ws->max_tokens, ws->max_ctx, kv_cap);
    return FG_OK;
}

/* y = x . W[wr]^T + bias (role br; -1 for none) */
static int linear(fg_backend *be, const float *x, const fg_unit_w *w, fg_role wr, int br,
                  float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    return be->iface->linear(be, x, &w->w[wr], br < 0 ? NULL : w->f[br], y, m, n, k, err);
}

static int norm(fg_backend *be, const fg_hparams *hp, const float *x, const float *g,
                const float *b, float *y, uint32_t rows, fg_err *err)
{
    if (hp->norm == FG_NORM_RMS)
        return be->iface->rmsnorm(be, x, g, y, rows, hp->hidden, hp->norm_eps, err);
    return be->iface->layernorm(be, x, g, b, y, rows, hp->hidden, hp->norm_eps, err);
}

int fg_model_embed(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                   fg_model_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    uint32_t n = s->n_seq * s->n_new, h = hp->hidden, e = hp->embed_dim;
    float *rows = w->w[FG_ROLE_PROJ_IN].f32 ? ws->x_ln : s->hidden;
    rc = be->iface->gather(be, &w->w[FG_ROLE_TOK_EMBED], w->rows[FG_ROLE_TOK_EMBED], s->ids, n,
                           rows, e, err);
    if (rc == FG_OK && w->w[FG_ROLE_PROJ_IN].f32)
        rc = linear(be, rows, w, FG_ROLE_PROJ_IN, -1, s->hidden, n, h, e, err);
    if (rc == FG_OK && hp->embed_scale > 0) /* Gemma: sqrt(hidden), in f32 */
        rc = be->iface->scale(be, s->hidden, hp->embed_scale, (size_t)n * h, err);
    if (rc || hp->pos != FG_POS_LEARNED)
        return rc;
    const float *pos = w->f[FG_ROLE_POS_EMBED];
    const int32_t *at = s->positions_host ? s->positions_host : s->positions;
    for (uint32_t i = 0; i < n && rc == FG_OK; i++) {
        int64_t p = (int64_t)at[i] + hp->pos_offset;
        if (p < 0 || p >= (int64_t)hp->max_pos + hp->pos_offset)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "position %d beyond the %u learned "
                              "positions", at[i], hp->max_pos);
        rc = be->iface->add(be, s->hidden + (size_t)i * h, pos + (size_t)p * h, h, err);
    }
    return rc;
}

/* What a block reads: norm(hidden) into ws->x_ln when pre-norm, else (or without an input norm:
 * OLMo 2) hidden itself. */
static const float *block_in(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                             const fg_step *s, fg_model_ws *ws, int *rc, fg_err *err)
{
    if (!hp->pre_norm || !w->f[FG_ROLE_NORM_W])
        return s->hidden;
    *rc = norm(be, hp, s->hidden, w->f[FG_ROLE_NORM_W], w->f[FG_ROLE_NORM_B], ws->x_ln,
               s->n_seq * s->n_new, err);
    return ws->x_ln;
}

/* The residual: hidden += y (y normalized first when the unit has a POST_NORM_W, Gemma's
 * sandwich), then the norm when post-norm. y is the workspace's, overwritten. */
static int block_out(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                     float *y, fg_err *err)
{
    uint32_t n = s->n_seq * s->n_new;
    int rc = FG_OK;
    if (w->f[FG_ROLE_POST_NORM_W])
        rc = norm(be, hp, y, w->f[FG_ROLE_POST_NORM_W], NULL, y, n, err);
    if (rc == FG_OK && hp->residual_scale > 0) /* Granite */
        rc = be->iface->scale(be, y, hp->residual_scale, (size_t)n * hp->hidden, err);
    if (rc == FG_OK)
        rc = be->iface->add(be, s->hidden, y, (size_t)n * hp->hidden, err);
    if (rc == FG_OK && !hp->pre_norm)
        rc = norm(be, hp, s->hidden, w->f[FG_ROLE_NORM_W], w->f[FG_ROLE_NORM_B], s->hidden, n,
                  err);
    return rc;
}

/* A strided copy or per-head product (backend heads op): n tokens x heads of k -> m values */
static int heads(fg_backend *be, const float *x, size_t x_ld, size_t x_hs, const float *w,
                 size_t w_hs, size_t w_ld, int trans, float *y, size_t y_ld, size_t y_hs,
                 uint32_t n, uint32_t nh, uint32_t k, uint32_t m, fg_err *err)
{
    fg_heads_op o = {x, x_ld, x_hs, w, w_hs, w_ld, trans, y, y_ld, y_hs, n, nh, k, m};
    return be->iface->heads(be, &o, err);
}

/* ---- multi-head latent attention (hp->mla) ----
 *
 * The cache row is [rope(k_pe) | c] (kv_lora_rank + qk_rope_dim = kw values a token, 576 for
 * DeepSeek-V2/V3), whichever way a step attends:
 *  - absorbed (model.h; every decode step): query head h [rope(q_pe) | q_nope . W_UK_h] against
 *    the rows as one KV head of kw dims, the values the rows' latent part c alone (the attention
 *    op's value width r and offset pe: the rows are read where they are, the keys' memory), then
 *    W_UV_h over its output. Per new token and head: r (nope + v) multiply-adds for W_UK and
 *    W_UV, and per (query, key) pair pe + 2r (the scores over kw = pe + r dims, the weighted sum
 *    over r). A quantized cache whose groups straddle pe (pe not a whole number of them: the op
 *    refuses such an offset) attends the whole rows as values instead, 2 kw a pair, and post
 *    drops the rope dims' outputs (mla_values_apart; fg's 4-bit cache has groups of 64, which
 *    DeepSeek's pe = 64 is).
 *  - expanded (DeepSeek's and vLLM's MLA prefill): every context row of the step, the cached
 *    prefix's included (a prefix from an earlier step or the prefix cache is latent rows like
 *    any other), through kv_b: per head the keys [rope(k_pe) | c . W_UK_h] (qk = nope + pe
 *    dims) and values c . W_UV_h (v dims: the op's value width, no padding), and ordinary
 *    attention of queries [rope(q_pe) | q_nope] over them. Per context row and head: r (nope +
 *    v) for the expansion, and per pair qk + v (the scores over qk, the weighted sum over v).
 * The rule: with n new tokens a sequence at p cached rows, T = p + n rows, pairs = n p +
 * n (n + 1) / 2 (causal), a step expands when T r (nope + v) + (qk + v) pairs < n r (nope + v)
 * + (pe + 2r) pairs (both per head; a sequence's left padding counts as rows). For DeepSeek's
 * dims (r 512, pe 64, nope 128, v 128): expanded costs 131072 T + 320 pairs, absorbed 131072 n
 * + 1088 pairs, so a prompt with no prefix always expands, and with a prefix of p rows a step
 * expands once 768 pairs > 131072 p, about n > 170 new tokens for a long prefix (186 when the
 * expanded values were padded to qk dims, 2 qk = 384 a pair). A decode step (n = 1, p > 0)
 * never does: it stays absorbed whatever FG_MLA_PREFILL says.
 * Expanded needs an f32 cache: the latent of a 4-bit or 8-bit cache is decoded only inside the
 * attention op (no op hands it back), so a quantized cache always attends absorbed. The
 * expanded keys and values of G heads at a time (the most heads dividing n_heads whose qk key
 * values and v values a row each fit in kw: 2 for DeepSeek's dims) go in the workspace's k_tmp
 * ([T, G qk] of its [max_ctx, kw]) and v_tmp ([T, G v]), which attention over an f32 cache
 * does not use: no memory beyond the absorbed path's. FG_MLA_PREFILL (hp->mla_prefill) forces
 * either path for steps of several new tokens (expand still needs an f32 cache). */

/* RoPE of MLA's queries: YaRN's attn_factor on the rotated dims of q and k, q's squared */
static fg_rope mla_q_rope(const fg_hparams *hp)
{
    fg_rope rq = hp->rope;
    rq.rot_scale = rq.scaling == FG_ROPE_YARN ? rq.attn_factor * rq.attn_factor : 1.0f;
    return rq;
}

/* pre's rows' absorbed queries [rope(q_pe) | q_nope . W_UK_h] (ws->q, n_heads x head_dim a row),
 * scaled, from the raw ones (ws->ctx, each head [nope | rope]) */
static int mla_q_absorbed(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                          fg_model_ws *ws, fg_err *err)
{
    uint32_t n = ws->mla_rows, H = hp->n_heads, r = hp->kv_lora_rank, pe = hp->qk_rope_dim;
    uint32_t nope = hp->qk_nope_dim, qk = nope + pe, hd = hp->head_dim;
    size_t qrow = (size_t)H * qk, arow = (size_t)H * hd, bhs = (size_t)(nope + hp->v_head_dim) * r;
    fg_rope rq = mla_q_rope(hp);
    /* each query head: q_pe, then q_nope . W_UK_h (W_UK_h^T q_nope) */
    int rc = heads(be, ws->ctx + nope, qrow, qk, NULL, 0, 0, 0, ws->q, arow, hd, n, H, pe, pe,
                   err);
    if (rc == FG_OK)
        rc = heads(be, ws->ctx, qrow, qk, w->f[FG_ROLE_WKV_B], bhs, r, 1, ws->q + pe, arow, hd,
                   n, H, nope, r, err);
    if (rc == FG_OK)
        rc = be->iface->rope(be, ws->q, n, H, hd, ws->mla_pos, &rq, err);
    return rc ? rc : be->iface->scale(be, ws->q, hp->attn_scale, (size_t)n * arow, err);
}

/* Heads a group of the expanded attention attends at once: the most dividing n_heads whose
 * keys (qk values each) fit a row of k_tmp and whose values (v_head_dim each) a row of v_tmp
 * (kw values each); 0 when not even one's do. */
static uint32_t mla_group(const fg_hparams *hp)
{
    uint32_t qk = hp->qk_nope_dim + hp->qk_rope_dim, vd = hp->v_head_dim;
    uint32_t g = hp->head_dim / (qk > vd ? qk : vd);
    while (g > 1 && hp->n_heads % g)
        g--;
    return g;
}

/* Expanded queries: group g's rows [rope(q_pe) | q_nope] (qk values a head, G heads a row) from
 * ws->q + g * (max_tokens G qk), scaled; its outputs (v_head_dim values a head, G heads a row)
 * from ws->ctx + g * (max_tokens G v_head_dim) */
static size_t mla_gstride(const fg_hparams *hp, const fg_model_ws *ws)
{
    return (size_t)ws->max_tokens * mla_group(hp) * (hp->qk_nope_dim + hp->qk_rope_dim);
}

static size_t mla_ostride(const fg_hparams *hp, const fg_model_ws *ws)
{
    return (size_t)ws->max_tokens * mla_group(hp) * hp->v_head_dim;
}

/* Whether the absorbed attention over a cache in codec c reads its values apart from the keys:
 * the latent c alone (r dims from pe), which an f32 cache always allows and a quantized one
 * when pe is a whole number of its groups (backend.h fg_attn_op: a value offset inside a group
 * is refused); else the values are the whole rows (kw dims) and post drops the rope dims'
 * outputs. */
static int mla_values_apart(const fg_hparams *hp, const fg_codec *c)
{
    return c->id == FG_CODEC_F32 ||
           (c->group_axis == 1 && c->group_size && hp->qk_rope_dim % c->group_size == 0);
}

double fg_model_attn_width(const fg_hparams *hp, const fg_codec *cache)
{
    if (!hp->mla || !mla_values_apart(hp, cache))
        return hp->head_dim;
    return (hp->head_dim + hp->kv_lora_rank) / 2.0;
}

static int mla_q_expanded(fg_backend *be, const fg_hparams *hp, fg_model_ws *ws, fg_err *err)
{
    uint32_t n = ws->mla_rows, H = hp->n_heads, pe = hp->qk_rope_dim, nope = hp->qk_nope_dim;
    uint32_t qk = nope + pe, G = mla_group(hp);
    size_t qrow = (size_t)H * qk, gs = mla_gstride(hp, ws);
    fg_rope rq = mla_q_rope(hp);
    int rc = FG_OK;
    for (uint32_t g = 0; g < H / G && rc == FG_OK; g++) {
        float *qg = ws->q + g * gs;
        const float *x = ws->ctx + (size_t)g * G * qk;
        rc = heads(be, x + nope, qrow, qk, NULL, 0, 0, 0, qg, (size_t)G * qk, qk, n, G, pe, pe,
                   err);
        if (rc == FG_OK)
            rc = heads(be, x, qrow, qk, NULL, 0, 0, 0, qg + pe, (size_t)G * qk, qk, n, G, nope,
                       nope, err);
        if (rc == FG_OK)
            rc = be->iface->rope(be, qg, n, G, qk, ws->mla_pos, &rq, err);
        if (rc == FG_OK)
            rc = be->iface->scale(be, qg, hp->attn_scale, (size_t)n * G * qk, err);
    }
    return rc;
}

int fg_model_mla_expands(const fg_hparams *hp, int cache_codec, uint32_t n_new, uint32_t pos0)
{
    double r = hp->kv_lora_rank, pe = hp->qk_rope_dim, qk = hp->qk_nope_dim + pe;
    double vd = hp->v_head_dim, up = r * (hp->qk_nope_dim + vd), n = n_new, p = pos0;
    double pairs = n * p + n * (n + 1) / 2;
    if (!hp->mla || cache_codec != FG_CODEC_F32 || !mla_group(hp) ||
        hp->mla_prefill == FG_MLA_PREFILL_ABSORB)
        return 0;
    return hp->mla_prefill == FG_MLA_PREFILL_EXPAND ||
           (p + n) * up + (qk + vd) * pairs < n * up + (pe + 2 * r) * pairs;
}

/* The expanded attention of sequence b of the step (its cache v, f32; its queries and outputs
 * from workspace row row): each group's keys and values from the cache's rows [0, pos0 + n_new)
 * into k_tmp / v_tmp, attention into ctx (the queries' layout), each head's values into ws->mla
 * (row row, [n_heads * v_head_dim]) */
static int mla_attend_expanded(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                               const fg_step *s, const fg_kv_view *v, const uint8_t *valid,
                               size_t row, fg_model_ws *ws, fg_err *err)
{
    uint32_t H = hp->n_heads, r = hp->kv_lora_rank, pe = hp->qk_rope_dim, nope = hp->qk_nope_dim;
    uint32_t vd = hp->v_head_dim, qk = nope + pe, kw = hp->head_dim, G = mla_group(hp);
    uint32_t T = s->pos0 + s->n_new, gw = G * qk, gv = G * vd;
    size_t bhs = (size_t)(nope + vd) * r, gs = mla_gstride(hp, ws), os = mla_ostride(hp, ws);
    const float *lat = v->k; /* [T, kw]: rope(k_pe), then c */
    int rc = FG_OK;
    for (uint32_t g = 0; g < H / G && rc == FG_OK; g++) {
        const float *wk = w->f[FG_ROLE_WKV_B] + (size_t)g * G * bhs;
        float *k = ws->k_tmp, *vv = ws->v_tmp; /* [T, G qk], [T, G vd] */
        rc = heads(be, lat, kw, 0, NULL, 0, 0, 0, k, gw, qk, T, G, pe, pe, err);
        if (rc == FG_OK) /* c . W_UK_h, c . W_UV_h */
            rc = heads(be, lat + pe, kw, 0, wk, bhs, r, 0, k + pe, gw, qk, T, G, r, nope, err);
        if (rc == FG_OK)
            rc = heads(be, lat + pe, kw, 0, wk + (size_t)nope * r, bhs, r, 0, vv, gv, vd, T, G, r,
                       vd, err);
        fg_kv_view xv = {k, vv, v->codec, (size_t)gw * 4, gw, T};
        float *out = ws->ctx + g * os + row * gv; /* [n_new, G vd] */
        fg_attn_op a = {ws->q + g * gs + row * gw, xv, valid, s->n_new, s->pos0, G, G, qk, 0,
                        s->attn_keep, out, ws->scores, 2 * (size_t)ws->max_ctx, ATTN_PARTS,
                        NULL, NULL, hp->attn_softcap, NULL, vd, 0};
        if (rc == FG_OK)
            rc = be->iface->attention(be, &a, err);
        if (rc == FG_OK)
            rc = heads(be, out, gv, vd, NULL, 0, 0, 0, ws->mla + row * H * vd + (size_t)g * gv,
                       (size_t)H * vd, vd, s->n_new, G, vd, vd, err);
    }
    return rc;
}

/* MLA's projections (model.h): q (ws->ctx, each head [nope | rope]), the cache rows [rope(k_pe)
 * | norm(c)] (ws->kbuf; ws->vbuf holds c contiguous while it is normalized), and for a decode
 * step the absorbed queries (mla_q_absorbed); a prefill's queries wait for core, which chooses
 * how it attends. x: the block's input. */
static int mla_pre(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                   const float *x, fg_model_ws *ws, fg_err *err)
{
    uint32_t n = s->n_seq * s->n_new, h = hp->hidden, H = hp->n_heads, ql = hp->q_lora_rank;
    uint32_t r = hp->kv_lora_rank, pe = hp->qk_rope_dim, hd = hp->head_dim, kva = r + pe;
    size_t qrow = (size_t)H * (hp->qk_nope_dim + pe);
    int rc = FG_OK;
    if (!w->f[FG_ROLE_WKV_B] || !w->f[FG_ROLE_KV_A_NORM] || (ql && !w->f[FG_ROLE_Q_A_NORM]))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "latent attention of layer %u: kv_b_proj or "
                          "a norm is missing", w->layer);
    if (ql) {
        rc = linear(be, x, w, FG_ROLE_WQ_A, -1, ws->mla, n, ql, h, err);
        if (rc == FG_OK)
            rc = be->iface->rmsnorm(be, ws->mla, w->f[FG_ROLE_Q_A_NORM], ws->mla, n, ql,
                                    hp->norm_eps, err);
        if (rc == FG_OK)
            rc = linear(be, ws->mla, w, FG_ROLE_WQ, -1, ws->ctx, n, (uint32_t)qrow, ql, err);
    } else {
        rc = linear(be, x, w, FG_ROLE_WQ, -1, ws->ctx, n, (uint32_t)qrow, h, err);
    }
    if (rc == FG_OK)
        rc = linear(be, x, w, FG_ROLE_WKV_A, -1, ws->mla, n, kva, h, err);
    if (rc == FG_OK) /* k_pe first, the latent after it (normalized) */
        rc = heads(be, ws->mla + r, kva, 0, NULL, 0, 0, 0, ws->kbuf, hd, 0, n, 1, pe, pe, err);
    if (rc == FG_OK)
        rc = heads(be, ws->mla, kva, 0, NULL, 0, 0, 0, ws->vbuf, r, 0, n, 1, r, r, err);
    if (rc == FG_OK)
        rc = be->iface->rmsnorm(be, ws->vbuf, w->f[FG_ROLE_KV_A_NORM], ws->vbuf, n, r,
                                hp->norm_eps, err);
    if (rc == FG_OK)
        rc = heads(be, ws->vbuf, r, 0, NULL, 0, 0, 0, ws->kbuf + pe, hd, 0, n, 1, r, r, err);
    if (rc == FG_OK)
        rc = be->iface->rope(be, ws->kbuf, n, 1, hd, s->positions, &hp->rope, err);
    ws->mla_expanded = 0;
    ws->mla_defer = s->n_new > 1; /* a prefill: core chooses, knowing the cache's codec */
    ws->mla_rows = n;
    ws->mla_pos = s->positions;
    return rc || ws->mla_defer ? rc : mla_q_absorbed(be, hp, w, ws, err);
}

int fg_model_attn_pre(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                      fg_model_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    if (hp->mla) {
        const float *x = block_in(be, hp, w, s, ws, &rc, err);
        return rc ? rc : mla_pre(be, hp, w, s, x, ws, err);
    }
    uint32_t n = s->n_seq * s->n_new, h = hp->hidden;
    uint32_t qw = hp->n_heads * hp->head_dim, kw = fg_model_kv_width(hp);
    const float *x = block_in(be, hp, w, s, ws, &rc, err);
    if (rc == FG_OK)
        rc = linear(be, x, w, FG_ROLE_WQ, FG_ROLE_BQ, ws->q, n, qw, h, err);
    if (rc == FG_OK)
        rc = linear(be, x, w, FG_ROLE_WK, FG_ROLE_BK, ws->kbuf, n, kw, h, err);
    if (rc == FG_OK)
        rc = linear(be, x, w, FG_ROLE_WV, FG_ROLE_BV, ws->vbuf, n, kw, h, err);
    if (rc == FG_OK && hp->qk_norm) { /* each head's row of head_dim values (or each whole
                                          * row), in place */
        uint32_t qh = hp->qk_norm == FG_QK_NORM_WHOLE ? 1 : hp->n_heads;
        uint32_t kh = hp->qk_norm == FG_QK_NORM_WHOLE ? 1 : hp->n_kv_heads;
        rc = be->iface->rmsnorm(be, ws->q, w->f[FG_ROLE_Q_NORM], ws->q, n * qh, qw / qh,
                                hp->norm_eps, err);
        if (rc == FG_OK)
            rc = be->iface->rmsnorm(be, ws->kbuf, w->f[FG_ROLE_K_NORM], ws->kbuf, n * kh,
                                    kw / kh, hp->norm_eps, err);
    }
    const fg_rope *rk = fg_model_layer_rope(hp, w->layer);
    if (rc == FG_OK && hp->pos == FG_POS_ROPE && rk) { /* (SmolLM3's NoPE layers: none) */
        /* YaRN and LongRoPE scale the rotated dims of q and k by attn_factor each: q's rotation
         * carries its square (the dims past rot_dim keep theirs; the cached keys are plain) */
        fg_rope rq = *rk;
        int scaled = rq.scaling == FG_ROPE_YARN || rq.scaling == FG_ROPE_LONGROPE;
        rq.rot_scale = scaled ? rq.attn_factor * rq.attn_factor : 1.0f;
        rq.pos_beta = hp->llama4_beta; /* q only */
        rc = be->iface->rope(be, ws->q, n, hp->n_heads, hp->head_dim, s->positions, &rq, err);
        if (rc == FG_OK)
            rc = be->iface->rope(be, ws->kbuf, n, hp->n_kv_heads, hp->head_dim, s->positions, rk,
                                 err);
    }
    if (rc)
        return rc;
    float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim);
    return be->iface->scale(be, ws->q, scale, (size_t)n * qw, err);
}

/* Sequence b's cache inside the batch's. */
static fg_kv_view seq_kv(const fg_kv_batch *kv, uint32_t b)
{
    size_t off = (size_t)b * kv->cap * kv->row_bytes;
    return (fg_kv_view){(uint8_t *)kv->k + off, (uint8_t *)kv->v + off, kv->codec, kv->row_bytes,
                        kv->width, kv->cap};
}

int fg_model_attn_core(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                       const fg_step *s, const fg_kv_batch *kv, uint32_t row0, fg_model_ws *ws,
                       fg_err *err)
{
    int rc = check_step(ws, s, kv->cap, err);
    if (rc)
        return rc;
    uint32_t qw = hp->n_heads * hp->head_dim, kw = kv->width;
    if ((uint64_t)row0 + (uint64_t)s->n_seq * s->n_new > ws->max_tokens || kw != fg_model_kv_width(hp))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "attention rows %u..%llu exceed the workspace "
                          "(%u tokens) or the cache width %u is not %u", row0,
                          (unsigned long long)row0 + (uint64_t)s->n_seq * s->n_new,
                          ws->max_tokens, kw, fg_model_kv_width(hp));
    uint32_t window = fg_model_layer_window(hp, kv->layer);
    if (hp->mla && ws->mla_defer) { /* a prefill's queries, in the form it attends with */
        ws->mla_defer = 0;
        ws->mla_expanded = fg_model_mla_expands(hp, kv->codec.id, s->n_new, s->pos0);
        rc = ws->mla_expanded ? mla_q_expanded(be, hp, ws, err) : mla_q_absorbed(be, hp, w, ws,
                                                                                 err);
    }
    if (hp->mla)
        ws->mla_apart = mla_values_apart(hp, &kv->codec);
    for (uint32_t b = 0; b < s->n_seq && rc == FG_OK; b++) {
        size_t r = (size_t)row0 + (size_t)b * s->n_new;
        fg_kv_view v = seq_kv(kv, b);
        /* (MLA: the values are the keys' rows, the cache's V view the same memory) */
        rc = be->iface->kv_store(be, &v, s->pos0, ws->kbuf + r * kw,
                                 (hp->mla ? ws->kbuf : ws->vbuf) + r * kw, s->n_new, err);
        if (rc == FG_OK && ws->mla_expanded) {
            rc = mla_attend_expanded(be, hp, w, s, &v, s->valid + (size_t)b * kv->cap, r, ws,
                                     err);
            continue;
        }
        fg_attn_op a = {ws->q + r * qw, v, s->valid + (size_t)b * kv->cap, s->n_new, s->pos0,
                        hp->n_heads, hp->n_kv_heads, hp->head_dim, window,
                        s->attn_keep, ws->ctx + r * qw, ws->scores, 2 * (size_t)ws->max_ctx,
                        ATTN_PARTS, ws->k_tmp, ws->v_tmp, hp->attn_softcap,
                        w->f[FG_ROLE_SINKS], 0, 0};
        if (hp->mla && ws->mla_apart) {
            /* the latent alone as the values: outputs [n_new, n_heads x kv_lora_rank] */
            a.v_dim = hp->kv_lora_rank, a.v_off = hp->qk_rope_dim;
            a.out = ws->ctx + r * hp->n_heads * hp->kv_lora_rank;
        }
        if (rc == FG_OK)
            rc = be->iface->attention(be, &a, err);
    }
    return rc;
}

int fg_model_attn_post(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                       const fg_step *s, fg_model_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    uint32_t n = s->n_seq * s->n_new, qw = hp->n_heads * hp->head_dim;
    if (rc == FG_OK && hp->mla && ws->mla_expanded) /* the heads' values already in ws->mla */
        rc = linear(be, ws->mla, w, FG_ROLE_WO, FG_ROLE_BO, ws->tmp, n, hp->hidden,
                    hp->n_heads * hp->v_head_dim, err);
    if (hp->mla && ws->mla_expanded)
        return rc ? rc : block_out(be, hp, w, s, ws->tmp, err);
    if (rc == FG_OK && hp->mla) { /* each head's latent output through its W_UV, then o */
        uint32_t r = hp->kv_lora_rank, pe = hp->qk_rope_dim, vd = hp->v_head_dim;
        uint32_t H = hp->n_heads, hd = ws->mla_apart ? r : hp->head_dim; /* a head's output */
        size_t bhs = (size_t)(hp->qk_nope_dim + vd) * r;
        rc = heads(be, ws->ctx + (ws->mla_apart ? 0 : pe), (size_t)H * hd, hd,
                   w->f[FG_ROLE_WKV_B] + (size_t)hp->qk_nope_dim * r, bhs, r, 0, ws->mla,
                   (size_t)H * vd, vd, n, H, r, vd, err);
        if (rc == FG_OK)
            rc = linear(be, ws->mla, w, FG_ROLE_WO, FG_ROLE_BO, ws->tmp, n, hp->hidden, H * vd,
                        err);
        return rc ? rc : block_out(be, hp, w, s, ws->tmp, err);
    }
    if (rc == FG_OK)
        rc = linear(be, ws->ctx, w, FG_ROLE_WO, FG_ROLE_BO, ws->tmp, n, hp->hidden, qw, err);
    return rc ? rc : block_out(be, hp, w, s, ws->tmp, err);
}

/* ---- a mixture of experts ---- */

/* Rows [r0, r0 + rows) of a typed weight [*, cols] as a weight of its own: the f32 rows, or the
 * pieces that hold exactly them (fg-convert stores no chunk across an expert's rows:
 * fg_tensor_spec.blocks), renumbered from 0 through the ctx below. */
typedef struct wslice {
    const fg_weight *w;
    uint32_t p0;
    uint64_t r0, rows;
} wslice;

static int slice_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    const wslice *v = ctx;
    int rc = v->w->acquire(v->w->ctx, v->p0 + i, p, err);
    if (rc == FG_OK) {
        p->first -= v->r0;
        p->dims[0] = v->rows;
    }
    return rc;
}

static int slice_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    const wslice *v = ctx;
    fg_wpiece q = *p; /* the owner's numbering (the caller may read p after: not changed) */
    q.first += v->r0;
    return v->w->release(v->w->ctx, &q, err);
}

static void slice_prefetch(void *ctx, uint32_t i)
{
    const wslice *v = ctx;
    if (v->w->prefetch)
        v->w->prefetch(v->w->ctx, v->p0 + i);
}

/* The piece of w that starts at row r (w->n_pieces when none does). */
static uint32_t piece_at(const fg_weight *w, uint64_t r)
{
    uint32_t lo = 0, hi = w->n_pieces;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (w->piece_rows[mid] < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->n_pieces && w->piece_rows[lo] == r ? lo : w->n_pieces;
}

/* The pieces [*p0, *p1) of w that hold exactly its rows [r0, r0 + rows); 0 when no run of whole
 * pieces does (at most MOE_MAX_PIECES). */
static int piece_span(const fg_weight *w, uint64_t r0, uint64_t rows, uint32_t *p0,
                      uint32_t *p1)
{
    *p0 = piece_at(w, r0);
    *p1 = r0 + rows == w->piece_rows[w->n_pieces] ? w->n_pieces : piece_at(w, r0 + rows);
    return *p0 < w->n_pieces && *p1 <= w->n_pieces && *p1 > *p0 &&
           *p1 - *p0 <= MOE_MAX_PIECES;
}

static int slice(const fg_weight *w, uint64_t r0, uint64_t rows, uint64_t cols, wslice *v,
                 fg_weight *out, uint64_t *prow, fg_err *err)
{
    memset(out, 0, sizeof *out);
    if (w->f32) {
        out->f32 = w->f32 + r0 * cols;
        return FG_OK;
    }
    uint32_t p0, p1;
    if (!piece_span(w, r0, rows, &p0, &p1))
        return fg_err_set(err, FG_ERR_CORRUPT, "an expert's rows %llu..%llu are not whole "
                          "stored chunks (at most %u; convert the checkpoint with this "
                          "fg-convert)", (unsigned long long)r0,
                          (unsigned long long)(r0 + rows), MOE_MAX_PIECES);
    for (uint32_t i = p0; i <= p1; i++)
        prow[i - p0] = w->piece_rows[i] - r0;
    *v = (wslice){w, p0, r0, rows};
    *out = (fg_weight){NULL, p1 - p0, prow, slice_acquire, slice_release,
                       w->prefetch ? slice_prefetch : NULL, v};
    return FG_OK;
}

/* Ask for the pieces of w's rows [r0, r0 + rows) to be read (best effort, no wait; rows that
 * are not whole pieces are left to slice's error). */
static void prefetch_rows(const fg_weight *w, uint64_t r0, uint64_t rows)
{
    uint32_t p0, p1;
    if (w->f32 || !w->prefetch || !piece_span(w, r0, rows, &p0, &p1))
        return;
    for (uint32_t i = p0; i < p1; i++)
        w->prefetch(w->ctx, i);
}

/* The MLP's three weights and their biases (NULL: none); gate NULL for a plain MLP. */
typedef struct mlp_w {
    const fg_weight *gate, *up, *down;
    const float *b_gate, *b_up, *b_down;
} mlp_w;

/* y [m, hidden] = down(act(gate(x)) * up(x)) or down(act(up(x))), f the inner width: the dense
 * MLP, an expert (its rows of the stacked weights) and Qwen2-MoE's shared expert alike */
static int mlp_core(fg_backend *be, const fg_hparams *hp, const mlp_w *mw, const float *x,
                    uint32_t m, uint32_t f, float *y, fg_model_ws *ws, fg_err *err)
{
    const fg_backend_iface *b = be->iface;
    uint32_t h = hp->hidden;
    int rc = FG_OK;
    if (mw->gate)
        rc = b->linear(be, x, mw->gate, mw->b_gate, ws->ffn, m, f, h, err);
    if (rc == FG_OK)
        rc = b->linear(be, x, mw->up, mw->b_up, mw->gate ? ws->up : ws->ffn, m, f, h, err);
    if (rc == FG_OK)
        rc = b->act(be, (fg_act_fn){hp->act, hp->act_alpha, hp->act_limit}, ws->ffn,
                    mw->gate ? ws->up : NULL, (size_t)m * f, err);
    return rc ? rc : b->linear(be, ws->ffn, mw->down, mw->b_down, y, m, h, f, err);
}

/* The greatest of x[0 .. n) not yet in sel[0 .. j) (equal ones: the lowest index), or -1. */
static int32_t best_of(const float *x, uint32_t n, const int32_t *sel, uint32_t j)
{
    int32_t best = -1;
    for (uint32_t i = 0; i < n; i++) {
        int taken = x[i] == -INFINITY;
        for (uint32_t q = 0; q < j && !taken; q++)
            taken = sel[q] == (int32_t)i;
        if (!taken && (best < 0 || x[i] > x[best]))
            best = (int32_t)i;
    }
    return best;
}

/* A token's top_k experts and weights from its router logits p (overwritten with the scores):
 * transformers' softmax in f32 (or, router_sigmoid, the sigmoid of each logit: GLM-4 MoE,
 * DeepSeek-V3), then torch.topk (the greatest first, equal ones by index) of the scores, or
 * with a choice bias corr (host memory; NULL: none) of score + corr[e] among the topk_group
 * groups of experts whose two best such sums are greatest; each weighted by its score,
 * renormalized to sum 1 when norm_topk (the sum + topk_eps: GLM's 1e-20), times
 * routed_scale when set. router_group_max ranks the groups by their best score alone
 * (DeepSeek-V2's group_limited_greedy over the softmax). */
static void route(const fg_hparams *hp, float *p, const float *corr, int32_t *sel, float *prob)
{
    uint32_t e = hp->n_experts, k = hp->top_k;
    float ch[FG_MODEL_MAX_EXPERTS], top = 0;
    if (hp->router_sigmoid) {
        for (uint32_t i = 0; i < e; i++)
            p[i] = 1.0f / (1.0f + expf(-p[i]));
    } else {
        float mx = p[0], sum = 0;
        for (uint32_t i = 1; i < e; i++)
            mx = p[i] > mx ? p[i] : mx;
        for (uint32_t i = 0; i < e; i++)
            sum += (p[i] = expf(p[i] - mx));
        for (uint32_t i = 0; i < e; i++)
            p[i] /= sum;
    }
    for (uint32_t i = 0; i < e; i++)
        ch[i] = corr ? p[i] + corr[i] : p[i];
    uint32_t ng = hp->n_group > 1 ? hp->n_group : 1, gs = e / ng;
    if (ng > 1) { /* the topk_group groups by the sum of their two best; the rest out */
        float gsc[FG_MODEL_MAX_EXPERTS];
        int32_t gsel[FG_MODEL_MAX_EXPERTS], two[2];
        for (uint32_t g = 0; g < ng; g++) {
            two[0] = best_of(ch + g * gs, gs, two, 0);
            two[1] = best_of(ch + g * gs, gs, two, 1);
            gsc[g] = two[0] < 0 || two[1] < 0 ? -INFINITY /* (a non-finite choice bias) */
                   : hp->router_group_max ? ch[g * gs + two[0]] /* (DeepSeek-V2's) */
                   : ch[g * gs + two[0]] + ch[g * gs + two[1]];
        }
        for (uint32_t j = 0; j < hp->topk_group; j++)
            gsel[j] = best_of(gsc, ng, gsel, j);
        for (uint32_t g = 0; g < ng; g++) {
            int kept = 0;
            for (uint32_t j = 0; j < hp->topk_group; j++)
                kept |= gsel[j] == (int32_t)g;
            for (uint32_t i = 0; !kept && i < gs; i++)
                ch[g * gs + i] = -INFINITY;
        }
    }
    for (uint32_t j = 0; j < k; j++) {
        sel[j] = best_of(ch, e, sel, j);
        if (sel[j] < 0) /* every choice left -inf (a non-finite bias): by the scores alone */
            sel[j] = best_of(p, e, sel, j);
        top += (prob[j] = p[sel[j]]);
    }
    top += hp->topk_eps; /* (GLM's 1e-20) */
    for (uint32_t j = 0; hp->norm_topk && j < k; j++)
        prob[j] /= top;
    for (uint32_t j = 0; hp->routed_scale > 0 && hp->routed_scale != 1.0f && j < k; j++)
        prob[j] *= hp->routed_scale;
}

/* The lowest of a token's k experts (the one that assigns its row of the sum). */
static int32_t lowest(const int32_t *sel, uint32_t k)
{
    int32_t lo = sel[0];
    for (uint32_t j = 1; j < k; j++)
        lo = sel[j] < lo ? sel[j] : lo;
    return lo;
}

/* The n tokens' (expert, weight) choices (ws->sel, ws->prob) as one list per expert, experts in
 * index order (a counting sort): expert e's tokens at ws->idx / ws->sv from ws->at[e], first
 * ws->nf[e] tokens whose lowest expert e is (they assign their row of the sum), then the
 * others (they add to it), each part in token order. */
static void lists(const fg_hparams *hp, uint32_t n, fg_model_ws *ws)
{
    uint32_t e = hp->n_experts, k = hp->top_k, *nf = ws->nf, *at = ws->at;
    memset(nf, 0, e * sizeof *nf);
    memset(at, 0, (e + 1) * sizeof *at);
    for (uint32_t r = 0; r < n; r++) {
        const int32_t *sel = ws->sel + (size_t)r * k;
        int32_t lo = lowest(sel, k);
        for (uint32_t j = 0; j < k; j++) /* at[] counts for now */
            (sel[j] == lo ? nf : at)[sel[j]]++;
    }
    uint32_t run = 0;
    for (uint32_t x = 0; x <= e; x++) { /* counts -> starts; cur: each part's next slot */
        uint32_t c = x < e ? nf[x] + at[x] : 0;
        at[x] = run;
        ws->cur[2 * x] = run;
        ws->cur[2 * x + 1] = run + (x < e ? nf[x] : 0);
        run += c;
    }
    for (uint32_t r = 0; r < n; r++) {
        const int32_t *sel = ws->sel + (size_t)r * k;
        int32_t lo = lowest(sel, k);
        for (uint32_t j = 0; j < k; j++) {
            uint32_t slot = ws->cur[2 * sel[j] + (sel[j] != lo)]++;
            ws->idx[slot] = (int32_t)r;
            ws->sv[slot] = ws->prob[(size_t)r * k + j];
        }
    }
}

/* The experts' stacked weights and their biases (gpt-oss), by projection */
static const fg_role k_exp_roles[3] = {FG_ROLE_EXP_GATE, FG_ROLE_EXP_UP, FG_ROLE_EXP_DOWN};
static const fg_role k_exp_broles[3] = {FG_ROLE_EXP_B_GATE, FG_ROLE_EXP_B_UP,
                                        FG_ROLE_EXP_B_DOWN};

/* The router over x's n rows: its logits (and Qwen2-MoE's shared gate, column e) to the host
 * (ws->h_log), each row's top_k experts and weights (route), their token lists (lists) */
static int router(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *x,
                  uint32_t n, fg_model_ws *ws, fg_err *err)
{
    uint32_t h = hp->hidden, e = hp->n_experts, k = hp->top_k;
    int gated = hp->shared_ffn && !hp->shared_plain; /* Qwen2-MoE's sigmoid(gate . x) */
    uint32_t ne = e + (gated ? 1 : 0);
    int rc = linear(be, x, w, FG_ROLE_ROUTER, FG_ROLE_B_ROUTER, ws->rlog, n, e, h, err);
    if (rc == FG_OK && gated) /* the shared expert's gate: column e */
        rc = linear(be, x, w, FG_ROLE_SHARED_GATE, -1, ws->rlog + (size_t)n * e, n, 1, h, err);
    if (rc == FG_OK)
        rc = be->iface->sync(be, err);
    /* the logits to the host, and the router's choice bias (GLM), which the workspace's
     * memory holds as every decoded vector */
    float corr[FG_MODEL_MAX_EXPERTS];
    const float *cb = w->f[FG_ROLE_ROUTER_CORR];
    if (rc == FG_OK && ws->buft == FG_BUFT_HOST) {
        memcpy(ws->h_log, ws->rlog, (size_t)n * ne * 4);
        if (cb)
            memcpy(corr, cb, (size_t)e * 4);
    } else if (rc == FG_OK) {
        rc = ws->dev->iface->copy(ws->dev, ws->h_log, FG_BUFT_HOST, ws->rlog, ws->buft,
                                  (uint64_t)n * ne * 4, NULL, err);
        if (rc == FG_OK && cb)
            rc = ws->dev->iface->copy(ws->dev, corr, FG_BUFT_HOST, cb, ws->buft,
                                      (uint64_t)e * 4, NULL, err);
    }
    if (rc)
        return rc;
    for (uint32_t r = 0; r < n; r++)
        route(hp, ws->h_log + (size_t)r * e, cb ? corr : NULL, ws->sel + (size_t)r * k,
              ws->prob + (size_t)r * k);
    lists(hp, n, ws);
    return FG_OK;
}

/* Expert ex over its tokens (ws->idx / ws->sv from ws->at[ex]): gathered from x, its MLP,
 * scattered into ws->tmp (its first ws->nf[ex] tokens assign their row, the rest add) */
static int one_expert(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *x,
                      uint32_t n, uint32_t ex, fg_model_ws *ws, fg_err *err)
{
    uint32_t h = hp->hidden, f = hp->moe_ffn;
    const uint64_t er[3] = {f, f, h}, ec[3] = {h, h, f}; /* an expert's rows, cols of each */
    uint32_t at = ws->at[ex], cnt = ws->at[ex + 1] - at, first = ws->nf[ex];
    int32_t *idx = ws->idx + at;
    float *sv = ws->sv + at;
    wslice v[3];
    fg_weight sw[3];
    int rc = FG_OK;
    for (int i = 0; i < 3 && rc == FG_OK; i++) /* this expert's rows of each */
        rc = slice(&w->w[k_exp_roles[i]], ex * er[i], er[i], ec[i], &v[i], &sw[i],
                   ws->prow + i * (MOE_MAX_PIECES + 1), err);
    fg_weight xw = {x, 0, NULL, NULL, NULL, NULL, NULL};
    const float *eb[3] = {NULL, NULL, NULL}; /* its biases (gpt-oss) */
    for (int i = 0; i < 3; i++)
        eb[i] = w->f[k_exp_broles[i]] ? w->f[k_exp_broles[i]] + (size_t)ex * er[i] : NULL;
    mlp_w mw = {&sw[0], &sw[1], &sw[2], eb[0], eb[1], eb[2]};
    if (rc == FG_OK)
        rc = be->iface->gather(be, &xw, n, idx, cnt, ws->ex, h, err);
    if (rc == FG_OK)
        rc = mlp_core(be, hp, &mw, ws->ex, cnt, f, ws->ey, ws, err);
    if (rc == FG_OK && first)
        rc = be->iface->scatter(be, ws->tmp, n, ws->ey, idx, sv, first, h, 0, err);
    if (rc == FG_OK && cnt > first)
        rc = be->iface->scatter(be, ws->tmp, n, ws->ey + (size_t)first * h, idx + first,
                                sv + first, cnt - first, h, 1, err);
    return rc;
}

/* x (the unit's input, normalized) -> ws->tmp: the sum of each token's experts (and the shared
 * expert's share), expert by expert in index order as transformers' loop over the experts
 * hit. Every token's row is written by its first expert (its top_k >= 1) and added to by the
 * rest. Each expert's token list has its own stretch of ws->idx / ws->sv, so no op is waited
 * for inside the unit (the router's sync waits for the previous unit's readers of them). */
static int moe(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *x,
               uint32_t n, int decode, fg_model_ws *ws, fg_err *err)
{
    uint32_t h = hp->hidden, f = hp->moe_ffn, e = hp->n_experts, k = hp->top_k;
    int gated = hp->shared_ffn && !hp->shared_plain; /* Qwen2-MoE's sigmoid(gate . x) */
    const uint64_t er[3] = {f, f, h};
    int rc = router(be, hp, w, x, n, ws, err);
    if (rc)
        return rc;
    /* the chosen experts counted, and their chunks asked for at once, in the order they
     * multiply: read at full queue depth, each while the experts before it compute (the engine
     * prefetches a layer's experts with it only when a step's tokens are expected to choose
     * most of them: an expert no token chose is never read) */
    fg_moe_stats *ms = &ws->moe_st[decode != 0];
    ms->units++;
    ms->pairs += (uint64_t)n * k;
    for (uint32_t ex = 0; ex < e; ex++) {
        if (ws->at[ex + 1] == ws->at[ex])
            continue;
        ms->experts++;
        for (int i = 0; i < 3; i++)
            prefetch_rows(&w->w[k_exp_roles[i]], ex * er[i], er[i]);
    }
    for (uint32_t ex = 0; ex < e && rc == FG_OK; ex++)
        if (ws->at[ex + 1] != ws->at[ex])
            rc = one_expert(be, hp, w, x, n, ex, ws, err);
    if (rc || !hp->shared_ffn)
        return rc;
    float *sg = ws->sv + (size_t)n * k; /* + sigmoid(gate . x) * shared(x), or shared(x) */
    for (uint32_t r = 0; r < n; r++)
        sg[r] = gated ? 1.0f / (1.0f + expf(-ws->h_log[(size_t)n * e + r])) : 1.0f;
    mlp_w mw = {&w->w[FG_ROLE_W_GATE], &w->w[FG_ROLE_W_UP], &w->w[FG_ROLE_W_DOWN],
                w->f[FG_ROLE_B_GATE], w->f[FG_ROLE_B_UP], w->f[FG_ROLE_B_DOWN]}; /* (ERNIE's) */
    rc = mlp_core(be, hp, &mw, x, n, hp->shared_ffn, ws->ey, ws, err);
    return rc ? rc : be->iface->scatter(be, ws->tmp, n, ws->ey, ws->ident, sg, n, h, 1, err);
}

int fg_model_mlp(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                 fg_model_ws *ws, fg_err *err)
{
    int rc = check_step(ws, s, ws->max_ctx, err);
    if (rc)
        return rc;
    uint32_t n = s->n_seq * s->n_new;
    uint32_t f = w->rows[FG_ROLE_W_UP] ? (uint32_t)w->rows[FG_ROLE_W_UP] : hp->ffn;
    const float *x = block_in(be, hp, w, s, ws, &rc, err);
    int sparse = w->w[FG_ROLE_ROUTER].f32 || w->w[FG_ROLE_ROUTER].n_pieces;
    if (rc == FG_OK && sparse && !hp->n_experts)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "a router without experts in the config");
    if (rc == FG_OK && sparse) {
        rc = moe(be, hp, w, x, n, s->n_new == 1, ws, err);
    } else if (rc == FG_OK) {
        mlp_w mw = {hp->gated ? &w->w[FG_ROLE_W_GATE] : NULL, &w->w[FG_ROLE_W_UP],
                    &w->w[FG_ROLE_W_DOWN], w->f[FG_ROLE_B_GATE], w->f[FG_ROLE_B_UP],
                    w->f[FG_ROLE_B_DOWN]};
        rc = mlp_core(be, hp, &mw, x, n, f, ws->tmp, ws, err);
    }
    return rc ? rc : block_out(be, hp, w, s, ws->tmp, err);
}

int fg_model_head(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *hidden,
                  uint32_t n, float *logits, fg_model_ws *ws, fg_err *err)
{
    if (n > ws->max_tokens)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "logits for %u rows exceed the workspace (%u)",
                          n, ws->max_tokens);
    uint32_t h = hp->hidden, e = hp->embed_dim;
    const float *x = hidden;
    int rc = FG_OK;
    if (hp->final_norm) {
        rc = norm(be, hp, hidden, w->f[FG_ROLE_NORM_W], w->f[FG_ROLE_NORM_B], ws->tmp, n, err);
        x = ws->tmp;
    }
    if (rc == FG_OK && w->w[FG_ROLE_PROJ_OUT].f32) {
        rc = linear(be, x, w, FG_ROLE_PROJ_OUT, -1, ws->x_ln, n, e, h, err);
        x = ws->x_ln;
    }
    if (rc == FG_OK)
        rc = linear(be, x, w, FG_ROLE_LM_HEAD, FG_ROLE_B_LM_HEAD, logits, n, hp->vocab_size, e,
                    err);
    size_t m = (size_t)n * hp->vocab_size;
    if (rc == FG_OK && hp->logit_scale > 0) /* Granite: / logits_scaling */
        rc = be->iface->scale(be, logits, hp->logit_scale, m, err);
    if (rc == FG_OK && hp->final_softcap > 0) /* Gemma 2: cap * tanh(logits / cap) */
        rc = be->iface->scale(be, logits, 1.0f / hp->final_softcap, m, err);
    if (rc == FG_OK && hp->final_softcap > 0)
        rc = be->iface->act(be, (fg_act_fn){FG_ACT_TANH, 0, 0}, logits, NULL, m, err);
    if (rc == FG_OK && hp->final_softcap > 0)
        rc = be->iface->scale(be, logits, hp->final_softcap, m, err);
    return rc;
}

void fg_model_ws_moe_stats(const fg_model_ws *ws, fg_moe_stats out[2])
{
    out[0] = ws->moe_st[0];
    out[1] = ws->moe_st[1];
}
