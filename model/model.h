/* model.h - the architecture table: what a model family is, as data and a forward pass written
 * only against backend ops (llama.cpp's per-architecture tables and builders, in C).
 *
 * An entry (fg_arch) knows, for its config.json model_type:
 *  - config.json -> generic hyperparameters (fg_hparams), strictly (errors name the key);
 *  - the tensors of each unit kind (embedding, a layer's attention, a layer's MLP, head), with
 *    canonical names, roles, shapes and how the engine should hand them over (fg_access);
 *  - the canonical spelling of a checkpoint's tensor names;
 *  - the forward of each unit kind (by default the generic pre/post-norm decoder of
 *    model/decoder.c, which covers learned or rotary positions, LayerNorm or RMSNorm, plain or
 *    gated MLPs, grouped-query and sliding-window attention).
 * The engine, the schedules, the pager and the tools know units and roles, never a family, and
 * this header names none: an entry is found by its model_type (fg_arch_find). A Llama-style
 * family is a row of model/families.c (its config class's defaults and named features, at most
 * one hook for a quirk), so adding one is that row plus its fixture and tests.
 *
 * A "unit" is what FlexGen calls a layer with --sep-layer: the input embedding, each decoder
 * layer's attention block, each layer's MLP block, the output head. Units are numbered 0 (embed),
 * 1 + 2l (attention of layer l), 2 + 2l (MLP of layer l), 2L + 1 (head).
 *
 * Nothing here allocates during the forward pass: fg_model_ws_create sizes every scratch buffer
 * once for the largest step (tokens per batch) and the longest context.
 */
#ifndef FG_MODEL_H
#define FG_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_norm_kind { FG_NORM_LAYER = 0, FG_NORM_RMS = 1 } fg_norm_kind;
/* fg_hparams.qk_norm: none, each head's row (Qwen3, Gemma 3), the whole projection (OLMo 2) */
enum { FG_QK_NORM_HEAD = 1, FG_QK_NORM_WHOLE = 2 };
/* fg_hparams.sandwich: none, a norm before and after each block (Gemma), after only (OLMo 2) */
enum { FG_SANDWICH_BOTH = 1, FG_SANDWICH_AFTER = 2 };
typedef enum fg_pos_kind { FG_POS_LEARNED = 0, FG_POS_ROPE = 1 } fg_pos_kind;

#define FG_MODEL_MAX_LAYERS 1024u
#define FG_MODEL_MAX_DIM (1u << 20) /* any one of vocab/hidden/ffn/positions */
#define FG_MODEL_MAX_EOS 8
#define FG_MODEL_MAX_EXPERTS 1024u

/* Generic hyperparameters (shapes in elements). */
/* How MLA's prefill steps attend (FG_MLA_PREFILL=auto|absorb|expand): by the FLOP rule,
 * always over the latent, or always expanded (the last two for tests and comparisons). */
typedef enum fg_mla_prefill {
    FG_MLA_PREFILL_AUTO = 0, FG_MLA_PREFILL_ABSORB, FG_MLA_PREFILL_EXPAND
} fg_mla_prefill;

typedef struct fg_hparams {
    char arch[24];          /* config.json model_type ("opt") */
    uint32_t vocab_size;
    uint32_t hidden;        /* residual width */
    uint32_t n_layers;
    uint32_t n_heads, n_kv_heads, head_dim; /* q width n_heads * head_dim; KV row n_kv_heads * head_dim */
    uint32_t ffn;           /* MLP inner width */
    uint32_t max_pos;       /* positions the model was trained for */
    uint32_t embed_dim;     /* token embedding width (== hidden unless project_in/out exist) */
    fg_norm_kind norm;
    float norm_eps;
    fg_act act;             /* MLP activation */
    float act_alpha, act_limit; /* FG_ACT_SWIGLU_OAI's (gpt-oss: swiglu_alpha, swiglu_limit) */
    int gated;              /* MLP is down(act(gate(x)) * up(x)) */
    fg_pos_kind pos;
    uint32_t pos_offset;    /* learned: table row = position + offset (OPT: 2) */
    fg_rope rope;           /* rotary positions */
    uint32_t sliding_window;/* 0: attend the whole context */
    uint64_t full_layers[FG_MODEL_MAX_LAYERS / 64]; /* bit l: layer l attends the whole context
                             * even so (Qwen's max_window_layers / layer_types) */
    int pre_norm;           /* norm before each block (else after the residual) */
    int final_norm;         /* a norm before the head */
    int tied_head;          /* the LM head is the token embedding */
    int qkv_bias, out_bias, mlp_bias;
    int head_bias;          /* the LM head has a bias (FG_ROLE_B_LM_HEAD) */
    int rope_interleaved;   /* the checkpoint rotates (even, odd) pairs of each head's dims:
                             * its q/k rows are reordered at conversion (fg_tensor_spec.perm_*),
                             * so the engine's rotate-half gives the same scores */
    int qk_norm;            /* RMSNorm (norm_eps) of q and k after the projections, before RoPE:
                             * FG_QK_NORM_HEAD over each head, weights [head_dim];
                             * FG_QK_NORM_WHOLE over each row, weights [n_heads * head_dim] and
                             * [KV row] */
    uint64_t nope_layers[FG_MODEL_MAX_LAYERS / 64]; /* bit l: layer l has no rotary positions
                             * (SmolLM3's no_rope_layers 0) */
    fg_rope rope_local;     /* the rotary settings of the layers that full_layers does not mark,
                             * when local_rope (Gemma 3's sliding layers: rope_local_base_freq) */
    int local_rope;
    int sandwich;           /* FG_SANDWICH_BOTH (Gemma): a norm after each block too
                             * (POST_NORM_W), the MLP's input norm its own
                             * (pre_feedforward_layernorm); FG_SANDWICH_AFTER (OLMo 2): the norm
                             * after each block only (no input norms) */
    int norm_plus_one;      /* Gemma: RMSNorms scale by 1 + w (fg_tensor_spec.add 1) */
    float embed_scale;      /* the token embedding rows times this (Gemma: sqrt(hidden)); 0: 1 */
    float llama4_beta;      /* > 0: q at position p times 1 + beta ln(1 + floor(p /
                             * rope.orig_max_pos)) after its rotation (Ministral 3's
                             * llama_4_scaling_beta) */
    float attn_scale;       /* q's scale before the dot products (Gemma 3:
                             * query_pre_attn_scalar^-1/2, Granite: attention_multiplier);
                             * 0: head_dim^-1/2 */
    float residual_scale;   /* a block's output times this before the residual add (Granite's
                             * residual_multiplier); 0: 1 */
    float logit_scale;      /* the logits times this (Granite: 1 / logits_scaling); 0: 1 */
    float attn_softcap;     /* > 0: attention scores s become cap * tanh(s / cap) (Gemma 2's
                             * attn_logit_softcapping); 0: none */
    float final_softcap;    /* > 0: the logits likewise (final_logit_softcapping) */
    int attn_sinks;         /* each attention layer has sinks (FG_ROLE_SINKS: gpt-oss) */
    /* a mixture of experts (Mixtral, Qwen MoE): the MLP of a sparse layer routes each token to
     * top_k of n_experts gated MLPs of width moe_ffn by the softmax of a router's logits (the
     * top_k probabilities renormalized to sum 1 when norm_topk) and sums their outputs weighted
     * so; with shared_ffn, a gated MLP of that width over every token (the unit's W_GATE /
     * W_UP / W_DOWN) adds its output times sigmoid(SHARED_GATE . x) (Qwen2-MoE) */
    uint32_t n_experts;     /* 0: every MLP dense */
    uint32_t top_k, moe_ffn, shared_ffn;
    int norm_topk;
    int shared_plain;       /* the shared experts' output added whole (GLM-4 MoE: no gate) */
    /* GLM-4 MoE's (DeepSeek-V3's) router: scores sigmoid(logits) (else the softmax); the top_k
     * chosen by score + ROUTER_CORR[e] among the topk_group of n_group groups whose two best
     * such sums are greatest; weighted by their plain scores (renormalized when norm_topk,
     * the sum + topk_eps) times routed_scale (MiniMax-M2: one group, no eps, no scale) */
    int router_sigmoid;
    uint32_t n_group, topk_group;
    float routed_scale;     /* 0: 1 */
    float topk_eps;         /* added to the renormalizing sum (GLM: 1e-20) */
    int router_corr;        /* a choice bias (ROUTER_CORR): 1 [n_experts] (GLM, MiniMax-M2),
                             * 2 [1, n_experts] (ERNIE 4.5 MoE's moe_statics) */
    uint32_t mtp_layers;    /* layers past n_layers whose tensors a checkpoint may carry, unused
                             * (GLM-4 MoE's multi-token prediction: num_nextn_predict_layers) */
    int moe_bias;           /* the router and the experts have biases (gpt-oss) */
    uint64_t dense_layers[FG_MODEL_MAX_LAYERS / 64]; /* bit l: layer l's MLP is dense even so
                             * (width ffn: Qwen's mlp_only_layers, decoder_sparse_step) */
    int router_group_max;   /* groups ranked by their best score (DeepSeek-V2's
                             * group_limited_greedy), not the sum of their two best */
    /* multi-head latent attention (mla: DeepSeek-V2/V3, Kimi K2): q = q_b(norm(q_a(x))) (or
     * q_proj(x) without q_lora_rank), each head [qk_nope_dim | qk_rope_dim]; the layer's KV row is
     * the latent c = norm(kv_a(x)[0 .. kv_lora_rank)) and the rotary key k_pe = kv_a(x)[rest],
     * shared by the heads; kv_b [n_heads * (qk_nope_dim + v_head_dim), kv_lora_rank] holds each
     * head's W_UK (its nope rows) and W_UV (its v rows). The attention runs absorbed, as DeepSeek's
     * and vLLM's MLA decode: query head h = [rope(q_pe) | q_nope . W_UK_h] against cache rows
     * [rope(k_pe) | c] (one KV head of head_dim = qk_rope_dim + kv_lora_rank, the values the
     * latent part c of the same rows: fg_model_kv_planes 1, the attention op's value width and
     * offset), then W_UV_h over its output, then o_proj.
     * With mla, n_kv_heads is 1, head_dim kv_lora_rank + qk_rope_dim (the absorbed head),
     * rope.rot_dim qk_rope_dim, attn_scale (qk_nope_dim + qk_rope_dim)^-1/2 (times YaRN's
     * mscale(factor, mscale_all_dim)^2 where the family corrects the softmax scale).
     * A step of several new tokens a sequence (a prefill) may instead expand the latent rows
     * through kv_b into per-head keys [rope(k_pe) | c . W_UK_h] and values c . W_UV_h and attend
     * over them (decoder.c says when: mla_prefill, and the FLOP rule); the cache is the same. */
    int mla;
    uint32_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    fg_mla_prefill mla_prefill; /* the environment's FG_MLA_PREFILL at config load (mla.c) */
    int32_t pad_id, bos_id, eos_id;          /* -1 when none; eos_id = eos_ids[0] */
    int32_t eos_ids[FG_MODEL_MAX_EOS];
    uint32_t n_eos;
    char dtype[16];         /* torch_dtype: "float16", "bfloat16", "float32" or "" */
} fg_hparams;

typedef enum fg_unit_kind { FG_UNIT_EMBED = 0, FG_UNIT_ATTN, FG_UNIT_MLP, FG_UNIT_HEAD } fg_unit_kind;

/* What a tensor is to the forward pass. */
typedef enum fg_role {
    FG_ROLE_TOK_EMBED = 0, FG_ROLE_POS_EMBED, FG_ROLE_PROJ_IN,
    FG_ROLE_NORM_W, FG_ROLE_NORM_B,
    FG_ROLE_WQ, FG_ROLE_BQ, FG_ROLE_WK, FG_ROLE_BK, FG_ROLE_WV, FG_ROLE_BV, FG_ROLE_WO, FG_ROLE_BO,
    FG_ROLE_W_UP, FG_ROLE_B_UP, FG_ROLE_W_GATE, FG_ROLE_B_GATE, FG_ROLE_W_DOWN, FG_ROLE_B_DOWN,
    FG_ROLE_PROJ_OUT, FG_ROLE_LM_HEAD,
    FG_ROLE_Q_NORM, FG_ROLE_K_NORM, /* per-head q/k RMSNorm weights [head_dim] (hp->qk_norm) */
    FG_ROLE_POST_NORM_W,    /* a norm of the block's output before the residual (Gemma's
                             * post_attention / post_feedforward_layernorm) */
    FG_ROLE_ROUTER,         /* a sparse MLP's router [n_experts, hidden] */
    FG_ROLE_EXP_GATE, FG_ROLE_EXP_UP, /* the experts' gate and up weights stacked by rows:
                             * [n_experts * moe_ffn, hidden], expert e rows e * moe_ffn on */
    FG_ROLE_EXP_DOWN,       /* their down weights stacked: [n_experts * hidden, moe_ffn] */
    FG_ROLE_SHARED_GATE,    /* the shared expert's gate [1, hidden] (Qwen2-MoE) */
    FG_ROLE_SINKS,          /* attention sinks [n_heads]: a logit per query head that its
                             * softmax counts and that adds no value (gpt-oss) */
    FG_ROLE_B_ROUTER,       /* the router's bias [n_experts] (gpt-oss) */
    FG_ROLE_EXP_B_GATE, FG_ROLE_EXP_B_UP, /* the experts' biases stacked as their weights:
                             * [n_experts * moe_ffn] (gpt-oss) */
    FG_ROLE_EXP_B_DOWN,     /* [n_experts * hidden] */
    FG_ROLE_ROUTER_CORR,    /* the router's choice bias [n_experts] (GLM-4 MoE's
                             * e_score_correction_bias: chooses, does not weigh) */
    FG_ROLE_B_LM_HEAD,      /* the LM head's bias [vocab] (ERNIE 4.5 MoE with use_bias) */
    /* multi-head latent attention (hp->mla): WQ is q_b_proj (or q_proj) */
    FG_ROLE_WQ_A,           /* q_a_proj [q_lora_rank, hidden] */
    FG_ROLE_Q_A_NORM,       /* q_a_layernorm [q_lora_rank] */
    FG_ROLE_WKV_A,          /* kv_a_proj_with_mqa [kv_lora_rank + qk_rope_dim, hidden] */
    FG_ROLE_KV_A_NORM,      /* kv_a_layernorm [kv_lora_rank] */
    FG_ROLE_WKV_B,          /* kv_b_proj [n_heads * (qk_nope_dim + v_head_dim), kv_lora_rank],
                             * SMALL: f32 in the backend's memory, each head's W_UK / W_UV
                             * multiplied in place (backend heads op) */
    FG_ROLE_COUNT
} fg_role;

/* Kept in its 16-bit type when the weights are quantized (fg-convert --compress-weight, and
 * what fg-infer --compress-weight takes for a 4-bit store): a mixture's router, its choice
 * bias and Qwen2-MoE's shared-expert gate, a few KB a layer whose 4-bit error would send
 * tokens near a tie to other experts (a discrete change of the output). */
int fg_role_stays_wide(fg_role r);

/* A mixture's stacked experts (a step reads only the chosen experts' rows). */
int fg_role_is_expert(fg_role r);

/* How the engine hands a tensor to the forward pass. */
typedef enum fg_access {
    FG_ACCESS_SMALL = 0, /* decoded whole to f32 when the unit loads (norms, biases, positions) */
    FG_ACCESS_LINEAR,    /* a typed weight, piece by piece; prefetched whole with its unit */
    FG_ACCESS_GATHER,    /* rows picked by token id (the embedding table): never read whole */
    FG_ACCESS_STREAM,    /* a typed weight read piece by piece with read-ahead (the LM head) */
} fg_access;

#define FG_UNIT_MAX_TENSORS 16
#define FG_TENSOR_NAME_MAX 96

typedef struct fg_tensor_spec {
    char name[FG_TENSOR_NAME_MAX];     /* canonical name */
    fg_role role;
    fg_access access;
    uint32_t n_dims;                   /* 1 or 2 */
    uint64_t dims[2];
    int optional;                      /* a checkpoint may lack it (the tied LM head) */
    char fallback[FG_TENSOR_NAME_MAX]; /* used instead when absent ("" = none) */
    float add;                         /* SMALL: added to every decoded value (Gemma's norms
                                        * store w and scale by 1 + w) */
    uint32_t blocks;                   /* > 1: the rows are this many equal blocks (the
                                        * experts of a stacked tensor), which a stored chunk
                                        * may not straddle (each is used alone) */
    /* > 0: the checkpoint holds this tensor's rows (values, for a vector) in an interleaved
     * rotary layout, each head of perm_head rows with its first perm_rot as (even, odd) pairs
     * (ERNIE 4.5: rotate-every-two); fg-convert stores them in rotate-half's order (row i <
     * perm_rot / 2 from row 2i, row perm_rot / 2 + i from 2i + 1), so the scores are the same;
     * the rotated rows start perm_off rows into each head (MLA's q heads [nope | rope] and its
     * kv_a rows [latent | rope]: DeepSeek's rotary dims come last) */
    uint32_t perm_head, perm_rot, perm_off;
} fg_tensor_spec;

/* Values per row of a tensor: dims[1], or 1 for a vector. */
uint64_t fg_tensor_spec_cols(const fg_tensor_spec *s);

/* A unit's weights as the forward pass sees them, indexed by role: SMALL tensors as f32
 * (NULL when absent), the others as typed weights (n_pieces 0 and f32 NULL when absent). */
typedef struct fg_unit_w {
    const float *f[FG_ROLE_COUNT];
    fg_weight w[FG_ROLE_COUNT];
    uint64_t rows[FG_ROLE_COUNT];      /* dims[0] of each tensor present */
    uint32_t layer;                    /* the decoder layer of an ATTN or MLP unit */
} fg_unit_w;

/* One step of one batch: n_seq sequences, n_new new tokens each, at cache rows [pos0, pos0 +
 * n_new). Left padding is expressed through `valid`. */
typedef struct fg_step {
    uint32_t n_seq, n_new, pos0;
    /* ids, positions, valid and hidden are read by the backend's ops only: host memory, or
     * memory of the backend's device, used in place */
    const int32_t *ids;        /* [n_seq, n_new] token ids */
    const int32_t *positions;  /* [n_seq, n_new] token positions (padding -1; fg_model_positions) */
    const uint8_t *valid;      /* [n_seq, kv cap] 0 where the cache row is padding; rows past
                                * the queries (never read: causal) may be 1 already */
    float *hidden;             /* [n_seq * n_new, hidden] activations, in and out */
    float attn_keep;           /* sparse attention: fraction of keys kept (0 or 1 = dense) */
    const int32_t *positions_host; /* positions in host memory (the learned-position rows are
                                      picked by host code); NULL: positions is host memory */
} fg_step;

/* The KV cache of one layer for one batch: sequence b's rows start at k + b * cap * row_bytes. */
typedef struct fg_kv_batch {
    void *k, *v;
    fg_codec codec;            /* F32, or Q4/Q8 along the row (--compress-cache) */
    size_t row_bytes;          /* fg_kv_row_bytes(codec, width) */
    uint32_t width, cap;       /* width = n_kv_heads * head_dim */
    uint32_t layer;            /* whose cache: its attention window (fg_model_layer_window) */
} fg_kv_batch;

typedef struct fg_model_ws fg_model_ws;

typedef struct fg_arch {
    const char *name; /* config.json model_type */
    const char *noun; /* for messages: "an OPT" */
    /* config.json bytes -> hp; label names the source in messages */
    int (*parse_config)(const char *json, size_t len, const char *label, fg_hparams *hp,
                        fg_err *err);
    /* the tensors of unit `kind` (layer for ATTN/MLP) into out[FG_UNIT_MAX_TENSORS] */
    uint32_t (*unit_tensors)(const fg_hparams *hp, fg_unit_kind kind, uint32_t layer,
                             fg_tensor_spec *out);
    /* a checkpoint's spelling of a tensor name -> canonical (NULL when it does not fit) */
    const char *(*canonical_name)(const char *name, char *buf, size_t cap);
    /* forward of each unit kind (attention in three parts: see fg_model_attn_*) */
    int (*embed)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                 fg_model_ws *ws, fg_err *err);
    int (*attn_pre)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                    fg_model_ws *ws, fg_err *err);
    int (*attn_core)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                     const fg_kv_batch *kv, uint32_t row0, fg_model_ws *ws, fg_err *err);
    int (*attn_post)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                     fg_model_ws *ws, fg_err *err);
    int (*mlp)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
               fg_model_ws *ws, fg_err *err);
    int (*head)(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *hidden,
                uint32_t n, float *logits, fg_model_ws *ws, fg_err *err);
    /* A buffer a checkpoint may carry that fg derives from config.json itself, as transformers
     * does (Llama's rotary_emb.inv_freq: Llama 2's hub checkpoints saved it): the element count
     * of its one dimension, for a canonical name; 0 for any other name. NULL: none. */
    uint64_t (*derived)(const fg_hparams *hp, const char *canonical);
    /* A checkpoint tensor that holds several canonical ones stacked along its first dimension
     * (Phi-3's self_attn.qkv_proj is q_proj, k_proj, v_proj; mlp.gate_up_proj is gate_proj,
     * up_proj), which fg-convert stores apart: for a canonical name, its parts' canonical names
     * in row order into parts[0 .. FG_FUSED_MAX); returns how many, 0 for any other name;
     * *layout (FG_FUSE_* flags, 0 for rows one part after another) says how they are laid
     * out. NULL: none. */
    uint32_t (*fused)(const fg_hparams *hp, const char *canonical,
                      char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout);
    /* The inverse: a checkpoint tensor that is one block of a canonical tensor stacked from
     * several (an expert's weight of a mixture of experts, which fg-convert stacks by rows into
     * one tensor of fg_tensor_spec.blocks blocks): for a canonical name, the stacked tensor's
     * name into `stacked` and the block's index into *block, returning 1; 0 for any other
     * name. NULL: none. */
    int (*stacked)(const fg_hparams *hp, const char *canonical,
                   char stacked[FG_TENSOR_NAME_MAX], uint32_t *block);
    /* A checkpoint tensor of a part of the model fg does not run (a multimodal checkpoint's
     * vision tower and projector: fg runs its text model): 1 for such a canonical name, which
     * fg-convert then accepts unread and does not store; 2 for a tensor of a part the config
     * says is empty, accepted only when it holds no value (GLM's shared experts of width 0).
     * NULL: none. */
    int (*unused)(const fg_hparams *hp, const char *canonical);
} fg_arch;

#define FG_FUSED_MAX 4
/* fg_arch.fused's layouts: the parts' rows alternate (row r of part p is row r * parts + p:
 * gpt-oss's gate and up); each part (each expert's block of it) is stored transposed, [cols,
 * rows], the weight x . W multiplies (gpt-oss's experts); MXFP4 (OpenAI's gpt-oss files): the
 * tensor holds the parts' 4-bit E2M1 codes, [experts, rows, cols / 32, 16] bytes (two values a
 * byte, the even one in the low nibble), and MXFP4_SCALES names its companion of E8M0
 * exponents, [experts, rows, cols / 32] bytes (2^(e - 127) per 32 values of a row) */
#define FG_FUSE_INTERLEAVED 1u
#define FG_FUSE_TRANSPOSED 2u
#define FG_FUSE_MXFP4 4u
#define FG_FUSE_MXFP4_SCALES 8u

/* ---- the table ---- */

/* The entry for model_type, or NULL. */
const fg_arch *fg_arch_find(const char *model_type);
/* The entry of hp (by hp->arch); NULL when unknown. */
const fg_arch *fg_model_arch(const fg_hparams *hp);
/* Comma-separated list of the supported model_types (for messages). */
const char *fg_arch_names(void);

/* Parse config.json (bytes, or the file at path): reads model_type, dispatches to its entry.
 * Unknown model_type -> FG_ERR_UNSUPPORTED naming it and the supported ones. */
int fg_model_config_parse(const char *json, size_t len, const char *label, fg_hparams *hp,
                          fg_err *err);
int fg_model_config_load(const char *path, fg_hparams *hp, fg_err *err);
/* generation_config.json over a parsed config: its eos_token_id (an id or a list of up to
 * FG_MODEL_MAX_EOS), when present and not null, replaces config.json's stop set, as
 * transformers' generate() takes it from there (Qwen2.5 Instruct stops at <|im_end|> only by
 * it). Other keys (sampling defaults) are not read. */
int fg_model_generation_config_parse(const char *json, size_t len, const char *label,
                                     fg_hparams *hp, fg_err *err);
/* Sizes and divisibility of hp; messages name the field. */
int fg_hparams_check(const fg_hparams *hp, fg_err *err);

/* Units: 2 * n_layers + 2. */
uint32_t fg_model_n_units(const fg_hparams *hp);
fg_unit_kind fg_model_unit_kind(const fg_hparams *hp, uint32_t unit, uint32_t *layer);
/* The tensors of unit u (out[FG_UNIT_MAX_TENSORS]); returns how many. */
uint32_t fg_model_unit_tensors(const fg_hparams *hp, uint32_t unit, fg_tensor_spec *out);
/* Every tensor a checkpoint of hp holds, in model order (units in order, each tensor once).
 * *out is malloc'd, owned by the caller (free()). */
int fg_model_tensors(const fg_hparams *hp, fg_tensor_spec **out, uint32_t *n, fg_err *err);
/* The spec named `name` among spec[0 .. n), NULL when none is. */
const fg_tensor_spec *fg_model_spec_find(const fg_tensor_spec *spec, uint32_t n,
                                         const char *name);

/* The keys layer `layer` attends (sliding_window, or 0 for the whole context). */
uint32_t fg_model_layer_window(const fg_hparams *hp, uint32_t layer);
/* The rotary settings of layer `layer`: NULL for a layer without positions (nope_layers),
 * rope_local for a layer full_layers does not mark when local_rope (Gemma 3's sliding layers),
 * else rope. */
const fg_rope *fg_model_layer_rope(const fg_hparams *hp, uint32_t layer);
/* 1 when layer `layer`'s MLP is a mixture of experts. */
int fg_model_layer_sparse(const fg_hparams *hp, uint32_t layer);
/* The expected share of a sparse layer's experts that `tokens` routed tokens choose at least
 * once, were each token's top_k drawn uniformly: 1 - (1 - top_k / n_experts)^tokens (1 for a
 * dense model). What the engine reads of the experts homed on disk in a step (engine/engine.c
 * pages in only the experts routed to), and what the policy search prices. Real routers are
 * skewed, so a real model touches fewer. */
double fg_model_expert_share(const fg_hparams *hp, double tokens);
/* How many layers attend through the window (0 without one). */
uint32_t fg_model_windowed_layers(const fg_hparams *hp);

/* The KV row: values per cached token per layer (K and V each; with MLA the latent and the
 * rotary key, kv_lora_rank + qk_rope_dim, once). */
uint32_t fg_model_kv_width(const fg_hparams *hp);
/* Rows a layer caches per token: 2 (K and V) or 1 (MLA: the values are the keys' latent part,
 * so a KV chunk holds the K rows only and its V view is the same memory). */
uint32_t fg_model_kv_planes(const fg_hparams *hp);
/* FLOPs of the Linear layers and LM head for one token (what a decode step computes). */
double fg_model_flops_per_token(const fg_hparams *hp);
/* Whether an MLA model's step of n_new tokens a sequence, pos0 rows cached, attends expanded
 * (per-head keys and values from the latent through kv_b, head width qk_nope + qk_rope) rather
 * than absorbed (over the latent, head width kv_lora_rank + qk_rope): decoder.c's FLOP rule,
 * FG_MLA_PREFILL, and a cache in cache_codec (FG_CODEC_*: only an f32 cache expands). 0 for a
 * model without mla. */
int fg_model_mla_expands(const fg_hparams *hp, int cache_codec, uint32_t n_new, uint32_t pos0);
/* Query width a head's attention costs, keys and values averaged (a (query, key) pair costs the
 * scores over the keys' width plus the weighted sum over the values'): head_dim, or for an MLA
 * model's absorbed attention (kv_lora_rank + qk_rope + kv_lora_rank) / 2 where the values are
 * the latent alone (an f32 cache, or one whose groups begin at qk_rope: decoder.c), else the
 * whole row's head_dim. */
double fg_model_attn_width(const fg_hparams *hp, const fg_codec *cache);

/* Token positions from a validity mask, as transformers computes them from the attention mask:
 * position = (number of valid tokens up to and including this one) - 1, and -1 for padding. */
void fg_model_positions(const uint8_t *valid, uint32_t n, int32_t *positions);

/* Scratch for steps of up to max_tokens tokens (n_seq * n_new) and contexts up to max_ctx, of
 * buffer type buft: FG_BUFT_HOST (malloc; dev may be NULL), or FG_BUFT_DEVICE from dev (the
 * backend's device, borrowed until fg_model_ws_free), which a device backend's ops use in place.
 * Owned by the caller (fg_model_ws_free; NULL accepted). */
int fg_model_ws_create(const fg_hparams *hp, uint32_t max_tokens, uint32_t max_ctx,
                       fg_device *dev, fg_buft buft, fg_model_ws **out, fg_err *err);
void fg_model_ws_free(fg_model_ws *ws);
/* What a workspace's sparse MLPs ran: units (sparse layers x steps x batches), distinct
 * experts computed and token-expert pairs routed, summed over the units. */
typedef struct fg_moe_stats {
    uint64_t units, experts, pairs;
} fg_moe_stats;
/* out[0]: steps of several new tokens a sequence (prefills), out[1]: of one (decode steps). */
void fg_model_ws_moe_stats(const fg_model_ws *ws, fg_moe_stats out[2]);
/* The bytes fg_model_ws_create allocates for these sizes (the plan counts them). */
uint64_t fg_model_ws_bytes(const fg_hparams *hp, uint32_t max_tokens, uint32_t max_ctx);

/* ---- the generic decoder (model/decoder.c): the forward functions entries point at ----
 *   embed:     x = tok[id] (. proj_in^T) (+ pos[position + offset])
 *   embed:     (times embed_scale when set: Gemma's sqrt(hidden))
 *   attention: pre-norm:  x += o(attn(norm(x)));  post-norm: x = norm(x + o(attn(x)));
 *              sandwich (POST_NORM_W present): x += post_norm(o(attn(norm(x))))
 *              q, k each head RMS-normalized (qk_norm), then rotated (RoPE, the layer's:
 *              fg_model_layer_rope); q scaled by head_dim^-1/2 (or attn_scale) before the dot
 *              products, its rotated dims also by YaRN's or LongRoPE's attn_factor^2; the
 *              scores soft-capped when attn_softcap (Gemma 2); each head's softmax also
 *              counting exp(SINKS[h]) when attn_sinks (gpt-oss)
 *   mlp:       pre-norm:  x += down(act(up(norm(x))))  or down(act(gate(.)) * up(.)) when gated
 *              (a sparse layer: x += sum over the token's top_k experts e of p_e * expert_e(.),
 *              p the router's softmax (renormalized over the top_k when norm_topk), summed in
 *              the order of e as transformers' index_add_, plus sigmoid(shared_gate . x) *
 *              shared(x) when shared_ffn; moe_bias: the router's and each expert's Linear
 *              layers add their biases, gpt-oss's)
 *              (sandwich: normalized by POST_NORM_W before the residual; either block's output
 *              times residual_scale when set)
 *   head:      ... the logits times logit_scale when set, soft-capped when final_softcap
 *   head:      final norm, proj_out, x . lm_head^T
 *   mla:       (hp->mla) the attention over the latent cache row, absorbed (the fields'
 *              comment above; the backend's heads op multiplies each head by its kv_b rows),
 *              or for a prefill step expanded (decoder.c's rule): pre then leaves the queries
 *              to core, which alone sees the cache's codec, and core's expanded output is
 *              already each head's values for post's o_proj
 * Attention in three parts, for a caller that projects many batches at once and attends batch
 * by batch (the zig-zag schedule's merged decode step):
 *   pre:  norm (pre-norm) and the q/k/v projections (+ q/k norms, RoPE) of all of s's rows;
 *   core: for the sequences of one batch (s; its hidden is not used), their new keys and
 *         values (workspace rows from row0) into the batch's cache, and attention into the
 *         context rows from row0 (w: the unit's, for its sinks);
 *   post: the output projection of the context, the residual into s->hidden, post-norm. */
int fg_model_embed(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                   fg_model_ws *ws, fg_err *err);
int fg_model_attn_pre(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                      fg_model_ws *ws, fg_err *err);
int fg_model_attn_core(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                       const fg_step *s, const fg_kv_batch *kv, uint32_t row0, fg_model_ws *ws,
                       fg_err *err);
int fg_model_attn_post(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w,
                       const fg_step *s, fg_model_ws *ws, fg_err *err);
int fg_model_mlp(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const fg_step *s,
                 fg_model_ws *ws, fg_err *err);
int fg_model_head(fg_backend *be, const fg_hparams *hp, const fg_unit_w *w, const float *hidden,
                  uint32_t n, float *logits, fg_model_ws *ws, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
