/* opt.h - the OPT decoder (Zhang et al. 2022) as FlexGen schedules it: separate sub-layers for
 * the input embedding, each self-attention block, each MLP block, and the output head, so the
 * zig-zag schedule can load, compute and evict them one at a time.
 *
 * The model layer describes tensors and the forward pass; it never touches files. Weights come
 * in as f32 views, the Linear matrices possibly piece by piece (fg_weight: the loader decodes
 * one F16/Q4 chunk at a time and the Linear multiplies each piece as it comes). Shapes follow Hugging Face
 * (Linear weights are [out, in]). Numerics follow transformers' OPT: learned positions with
 * offset 2 computed from the attention mask, pre- or post-LayerNorm, ReLU, tied LM head,
 * opt-350m's project_in/project_out.
 *
 * Nothing here allocates during the forward pass: fg_opt_ws_create sizes every scratch buffer
 * once for the largest step (tokens per batch) and the longest context.
 */
#ifndef FG_OPT_H
#define FG_OPT_H

#include <stdint.h>

#include "backend.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_opt_hparams {
    uint32_t vocab_size;
    uint32_t hidden;        /* h */
    uint32_t n_layers;
    uint32_t ffn;           /* ffn_dim */
    uint32_t n_heads;
    uint32_t max_pos;       /* max_position_embeddings (the table has max_pos + 2 rows) */
    uint32_t embed_dim;     /* word_embed_proj_dim (== hidden unless project_in/out exist) */
    int pre_ln;             /* do_layer_norm_before */
    int final_ln;           /* a final LayerNorm after the last layer */
    int32_t pad_id, bos_id, eos_id;
} fg_opt_hparams;

typedef struct fg_opt_embed_w {
    const float *tok_rows; /* [n_seq * n_new, embed_dim]: the embedding row of each step token,
                              gathered by the caller (the table itself never needs to be f32) */
    const float *pos;      /* [max_pos + 2, hidden] */
    const float *proj_in;  /* [hidden, embed_dim], NULL when embed_dim == hidden */
} fg_opt_embed_w;

typedef struct fg_opt_attn_w {
    const float *ln_w, *ln_b;     /* [hidden] self_attn_layer_norm */
    fg_weight wq;                 /* [hidden, hidden], biases [hidden] */
    const float *bq;
    fg_weight wk;
    const float *bk;
    fg_weight wv;
    const float *bv;
    fg_weight wo;
    const float *bo;
} fg_opt_attn_w;

typedef struct fg_opt_mlp_w {
    const float *ln_w, *ln_b;     /* [hidden] final_layer_norm of the layer */
    fg_weight w1;                 /* fc1 [ffn, hidden] */
    const float *b1;              /* [ffn] */
    fg_weight w2;                 /* fc2 [hidden, ffn] */
    const float *b2;              /* [hidden] */
} fg_opt_mlp_w;

typedef struct fg_opt_head_w {
    const float *ln_w, *ln_b;     /* [hidden] decoder final_layer_norm, NULL when !final_ln */
    const float *proj_out;        /* [embed_dim, hidden], NULL when embed_dim == hidden */
    const float *lm_head;         /* [vocab, embed_dim] (tied: the token embedding) */
} fg_opt_head_w;

/* One step of one batch: n_seq sequences, n_new new tokens each, at cache positions
 * [pos0, pos0 + n_new). Left padding is expressed through `valid`. */
typedef struct fg_opt_step {
    uint32_t n_seq, n_new, pos0;
    const int32_t *ids;        /* [n_seq, n_new] token ids */
    const int32_t *positions;  /* [n_seq, n_new] learned-position index before the +2 offset */
    const uint8_t *valid;      /* [n_seq, kv_cap] 1 where the cache position holds a real token */
    float *hidden;             /* [n_seq * n_new, hidden] activations, in and out */
    float attn_keep;           /* sparse attention: fraction of keys kept (0 or 1 = dense) */
} fg_opt_step;

/* The KV cache of one layer for one batch, kv_cap rows a sequence. Either f32 rows of width
 * hidden (k, v), or, with a codec (--compress-cache), 4-bit rows: each row of hidden values is
 * quantized in groups along the head dimension (FlexGen's choice) into row_bytes, and the rows
 * a step attends to are decoded into k_tmp/v_tmp ([kv_cap, hidden] f32, one sequence at a time). */
typedef struct fg_opt_kv {
    float *k, *v;              /* f32: [n_seq, kv_cap, hidden]; NULL when compressed */
    uint32_t kv_cap;
    const fg_codec *codec;     /* NULL: f32 cache; else Q4/Q8 along the last axis */
    uint8_t *qk, *qv;          /* compressed: [n_seq, kv_cap, row_bytes] */
    size_t row_bytes;
    float *k_tmp, *v_tmp;      /* compressed: decode scratch [kv_cap, hidden] */
} fg_opt_kv;

/* Bytes of one compressed KV row of `hidden` values under codec c (Q4/Q8, last axis). */
size_t fg_opt_kv_row_bytes(const fg_codec *c, uint32_t hidden);

typedef struct fg_opt_ws fg_opt_ws;

/* Scratch for steps of up to max_tokens tokens (n_seq * n_new), contexts up to max_ctx, and
 * weight pieces (fg_weight) of up to max_piece_rows rows (0: weights are whole f32). */
int fg_opt_ws_create(const fg_opt_hparams *cfg, uint32_t max_tokens, uint32_t max_ctx,
                     uint32_t max_piece_rows, fg_opt_ws **out, fg_err *err);
void fg_opt_ws_free(fg_opt_ws *ws);

/* Validate a config (sizes, heads dividing hidden); messages name the field. */
int fg_opt_hparams_check(const fg_opt_hparams *cfg, fg_err *err);

/* Learned-position indices from a validity mask, as transformers computes them:
 * position = (number of valid tokens up to and including this one) - 1, and -1 for padding. */
void fg_opt_positions(const uint8_t *valid, uint32_t n, int32_t *positions);

int fg_opt_embed(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_embed_w *w,
                 const fg_opt_step *s, fg_opt_ws *ws, fg_err *err);
int fg_opt_attention(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                     const fg_opt_step *s, const fg_opt_kv *kv, fg_opt_ws *ws, fg_err *err);
/* The attention sub-layer in three parts, for a caller that projects many batches at once and
 * attends batch by batch (the zig-zag schedule's merged decode step):
 *   pre:  LayerNorm (pre-LN) and the q/k/v projections of all of s's rows into the workspace;
 *   core: for the sequences of one batch (s; its hidden is not used), their new keys and values
 *         (workspace rows from row0) into the batch's cache, and attention into the context
 *         rows from row0;
 *   post: out_proj of the context, the residual into s->hidden, LayerNorm (post-LN).
 * fg_opt_attention is pre + core (row0 0) + post on one batch. */
int fg_opt_attn_pre(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                    const fg_opt_step *s, fg_opt_ws *ws, fg_err *err);
int fg_opt_attn_core(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_step *s,
                     const fg_opt_kv *kv, uint32_t row0, fg_opt_ws *ws, fg_err *err);
int fg_opt_attn_post(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_attn_w *w,
                     const fg_opt_step *s, fg_opt_ws *ws, fg_err *err);
int fg_opt_mlp(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_mlp_w *w,
               const fg_opt_step *s, fg_opt_ws *ws, fg_err *err);
/* Logits for n rows of hidden states (e.g. the last token of each sequence): [n, vocab]. */
int fg_opt_logits(fg_backend *be, const fg_opt_hparams *cfg, const fg_opt_head_w *w,
                  const float *hidden, uint32_t n, float *logits, fg_opt_ws *ws, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
