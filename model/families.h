/* families.h - the Llama-style families as data rows (private to model/).
 *
 * A row (fgm_family, model/families.c's k_rows) is a table entry (its fg_arch: model_type,
 * noun, checkpoint-spelling hooks) plus what its transformers config class means: the defaults
 * of the keys it lacks and the named features it switches on (traits). The readers of
 * config.c (sizes, windows, biases, norms), rope.c (rotary settings), moe.c (routers) and
 * wrappers.c (multimodal checkpoints' text models) test features, never a family; the tensor
 * lists (tensors.c) and the spellings (names.c) read only fg_hparams. A family with a quirk no
 * feature describes names one hook, run while its config is read (Granite's multipliers).
 *
 * Adding a family: a row in families.c (+ a hook or a spelling in names.c if it needs code) and
 * its fixture entry; model.h and the engine do not change.
 */
#ifndef FG_MODEL_FAMILIES_H
#define FG_MODEL_FAMILIES_H

#include "model_int.h"

/* Sliding windows: which keys the config class reads, which layers slide by default. */
typedef enum {
    WIN_NONE,          /* no window keys */
    WIN_ALL,           /* sliding_window (absent: traits.window) on every layer */
    WIN_USE_ALL,       /* WIN_ALL only with use_sliding_window true */
    /* from here on layer_types ("full_attention" / "sliding_attention" per layer) wins; the
     * default rule: */
    WIN_LAYER_TYPES,   /* every layer */
    WIN_FROM,          /* with use_sliding_window, the layers from max_window_layers
                        * (traits.window_from) on */
    WIN_ODD_BELOW,     /* with use_sliding_window, the even-numbered ones below
                        * max_window_layers ((l + 1) % 2 && l < it: Qwen2MoeConfig's, sic) */
    WIN_PATTERN,       /* all but every traits.pattern-th (sliding_window_pattern when
                        * pattern_key); a null window beside a sliding layer refused */
    WIN_NOPE,          /* with use_sliding_window, the layers without rotary positions */
    WIN_FROM_ALWAYS,   /* WIN_FROM without use_sliding_window: on unless sliding_window null */
    WIN_PATTERN_IF_SET /* while sliding_window is not null, all but every sliding_window_pattern-th
                        * (a count, traits.pattern by default, or letters: "LLLG", L local);
                        * without a window every layer full */
} window_kind;

/* A mixture of experts: which keys and which router the config class has. */
typedef enum {
    MOE_NONE,
    MOE_TOPK,          /* num_local_experts / num_experts, num_experts_per_tok: experts
                        * intermediate_size wide on every layer, the softmax's top k */
    MOE_TOPK_NORM_KEY, /* MOE_TOPK with norm_topk_prob read */
    MOE_TOPK_SIGMOID,  /* MOE_TOPK by sigmoid scores plus the choice bias (one group) */
    MOE_TOPK_BIASED,   /* MOE_TOPK with biases on the router and the experts and the clamped
                        * SwiGLU (swiglu_alpha, swiglu_limit) */
    MOE_SPARSE_STEP,   /* moe_intermediate_size experts on the layers mlp_only_layers and
                        * decoder_sparse_step leave sparse; num_experts 0: dense; norm_topk_prob */
    MOE_SPARSE_STEP_SHARED, /* ... and a gated shared expert (shared_expert_intermediate_size) */
    MOE_GROUPED,       /* sigmoid scores plus the choice bias within groups (n_group,
                        * topk_group), ungated shared experts, first_k_dense_replace dense
                        * layers, multi-token prediction layers skipped */
    MOE_GROUPED_SOFTMAX, /* MOE_GROUPED's keys with the softmax's scores and no choice bias,
                        * topk_method greedy (every expert) or group_limited_greedy (the
                        * topk_group groups of the best single scores), routed_scaling_factor,
                        * norm_topk_prob (default false) */
    MOE_LAYER_RANGE    /* moe_num_experts / moe_k by the softmax plus the choice bias [1,
                        * experts], ungated shared experts, moe_layer_{start,end}_index and
                        * moe_layer_interval */
} moe_kind;

/* hidden_act "silu"; hidden_act "gelu_pytorch_tanh" or "gelu", both the tanh GELU;
 * hidden_activation (default "gelu_pytorch_tanh"; "gelu" the exact one) */
typedef enum { ACT_SILU, ACT_GELU_TANH, ACT_GELU_KEY } act_kind;
/* o's bias: by attention_bias (with q/k/v's), never, or by attention_out_bias (default false) */
typedef enum { OUT_BIAS_ATTN, OUT_BIAS_NONE, OUT_BIAS_KEY } out_bias_kind;
/* attn_logit_softcapping / final_logit_softcapping: ignored; refused (with
 * use_bidirectional_attention); read (50 and 30 by default, null: none) */
typedef enum { SOFTCAP_IGNORED, SOFTCAP_REFUSED, SOFTCAP_READ } softcap_kind;

/* Designated per field: a row names what is not zero (bos, eos, pad -1: none). */
typedef struct traits {
    /* the config class's defaults */
    const uint32_t *sizes; /* vocab_size, hidden_size, num_hidden_layers, intermediate_size,
                            * num_attention_heads, max_position_embeddings when absent (NULL:
                            * each required) */
    uint32_t kv_heads;   /* num_key_value_heads when absent (0: one per query head) */
    uint32_t head_dim;   /* head_dim when absent (0: hidden / heads) */
    int32_t bos, eos, pad; /* the ids when absent (-1: none) */
    float eps;           /* rms_norm_eps when absent */
    float theta;         /* rope_theta when absent (0: 10000) */
    int tied;            /* tie_word_embeddings when absent */
    act_kind act;
    /* biases */
    int qkv_bias;        /* q/k/v biases always, or by default when qkv_bias_key */
    int qkv_bias_key;    /* reads qkv_bias */
    int attention_bias;  /* reads attention_bias: q/k/v (and o: out_bias) (2: true by default) */
    out_bias_kind out_bias;
    int mlp_bias;        /* reads mlp_bias */
    int use_bias;        /* reads use_bias: every Linear layer's; with experts the head's too */
    /* attention */
    int qk_norm;         /* q/k RMSNorms (fg_hparams.qk_norm's values) */
    int qk_norm_key;     /* reads use_qk_norm: per-head q/k norms */
    window_kind windows;
    uint32_t window;     /* sliding_window when absent (where windows are on) */
    uint32_t window_from;/* max_window_layers when absent (WIN_FROM, _ODD_BELOW, _FROM_ALWAYS) */
    uint32_t pattern;    /* WIN_PATTERN's, WIN_PATTERN_IF_SET's every pattern-th layer full */
    int pattern_key;     /* WIN_PATTERN: reads sliding_window_pattern */
    int attn_sinks;      /* a logit per head each softmax counts (self_attn.sinks) */
    int mxfp4;           /* quantization_config quant_method "mxfp4" accepted (the experts read
                          * from MXFP4 as the 16-bit values they hold) */
    int query_scalar;    /* q scaled by query_pre_attn_scalar^-1/2 (default 256) */
    softcap_kind softcap;
    /* rotary positions */
    float partial_rotary;/* > 0: partial_rotary_factor (or rotary_dim) read, this its default */
    int longrope;        /* rope types default (rope_type may be absent) and longrope ("su" and
                          * "yarn" its old names); original_max_position_embeddings top-level */
    const char *rope_dflt; /* JSON: the class's rope object when the file has none */
    int llama4_scaling;  /* reads the rope object's llama_4_scaling_beta (hp->llama4_beta) */
    const char *local_rope; /* the sliding layers' own rotary settings, unscaled, their theta
                          * by this key (or rope_parameters per layer type) */
    int rope_interleaved;/* rotary on (even, odd) pairs (q/k rows reordered at conversion) */
    int nope_layers;     /* no_rope_layers (0: no rotary positions) or every
                          * no_rope_layer_interval-th (4) layer without */
    int nope_global;     /* with a window, the full layers without rotary positions */
    /* norms and scales */
    int post_norms_only; /* a norm after each block, none before (FG_SANDWICH_AFTER) */
    int sandwich_norms;  /* a norm before and after each block (FG_SANDWICH_BOTH) */
    int norm_plus_one;   /* RMSNorms scale by 1 + w */
    int scaled_embedding;/* the embeddings times sqrt(hidden) */
    /* a mixture of experts: the keys' defaults */
    moe_kind moe;
    uint32_t experts, top_k, moe_ffn, shared_ffn;
    int norm_topk;       /* norm_topk_prob when absent (or always, where not read) */
    uint32_t first_dense;/* MOE_GROUPED: first_k_dense_replace when absent */
    uint32_t n_shared;   /* MOE_GROUPED: n_shared_experts when absent (0: 1) */
    uint32_t n_group, topk_group; /* MOE_GROUPED: when absent (0: 1) */
    float routed_scale;  /* MOE_GROUPED: routed_scaling_factor when absent (0: 1) */
    uint32_t mtp;        /* MOE_GROUPED: num_nextn_predict_layers when absent */
    const char *topk_method; /* MOE_GROUPED: the one topk_method the class computes (a file
                          * naming another is refused; NULL: the key unread) */
    /* multi-head latent attention (fg_hparams.mla) */
    int mla;             /* q_lora_rank (null: none), kv_lora_rank, qk_nope_head_dim,
                          * qk_rope_head_dim, v_head_dim read (the class's defaults: V2's);
                          * DeepSeek-V3.2's sparse-attention keys (index_*) refused */
    int mla_mscale;      /* the softmax scale times mscale(factor, mscale_all_dim)^2 of a
                          * scaled rope object (transformers' yarn_apply_mscale) */
    int rope_interleave_key; /* rope_interleave (default true) says whether the rotary dims
                          * are (even, odd) pairs (else rope_interleaved says) */
    int experts_required;/* MOE_GROUPED: n_routed_experts, num_experts_per_tok and
                          * n_shared_experts required (the class has no defaults) */
} traits;

/* A multimodal checkpoint whose text model fg runs (wrappers.c). */
typedef struct wrapper {
    const char *text[2][2];  /* text_config model_type -> the fg entry reading it ([0] default) */
    const char *defaults;    /* JSON: the class's text defaults, for the first text type */
    int flat;                /* text keys at the top level when there is no text_config */
    int tie;                 /* tie_word_embeddings when the top level lacks it (-1: the text
                              * config's true carries) */
} wrapper;

typedef int (*fgm_hook)(json_t *root, const char *label, fg_hparams *hp, fg_err *err);

typedef struct fgm_family {
    fg_arch arch;   /* model_type, noun, spelling hooks, the generic decoder */
    traits t;       /* a family: defaults and features */
    wrapper w;      /* a wrapper (w.text[0][0] set): its text model's entries */
    fgm_hook hook;  /* a quirk no feature describes, run after the windows (NULL: none) */
} fgm_family;

/* The rows in model_type order (families.c) and the row of model_type (NULL: none). */
extern const fgm_family fgm_rows[];
extern const size_t fgm_n_rows;
const fgm_family *fgm_row_find(const char *model_type);

/* config.c: a family row's config (root) into hp. */
int fgm_family_parse(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                     fg_err *err);
/* rope.c: rotary settings (rope_theta, rope_scaling / rope_parameters) into hp->rope; with
 * t->local_rope, the sliding layers' into hp->rope_local as well. */
int fgm_rope(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err);
/* moe.c: a mixture of experts' keys (t->moe) into hp. */
int fgm_moe(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err);
/* mla.c: multi-head latent attention's keys (t->mla) before the rotary settings (hp->head_dim
 * the rotary dims then), and after them hp's attention as the absorbed MLA runs it. */
int fgm_mla(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err);
int fgm_mla_finish(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                   fg_err *err);
/* wrappers.c: a multimodal config's text model into hp, hp->arch the wrapper's type. */
int fgm_wrapped_parse(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                      fg_err *err);
const char *fgm_wrapped_name(const char *name, char *buf, size_t cap);
int fgm_wrapped_unused(const fg_hparams *hp, const char *name);
/* tensors.c: the tensors of a unit of a Llama-style decoder (fg_arch.unit_tensors). */
uint32_t fgm_decoder_tensors(const fg_hparams *hp, fg_unit_kind kind, uint32_t l,
                             fg_tensor_spec *o);
/* names.c: checkpoint spellings (fg_arch.canonical_name): the *ForCausalLM names ("model."
 * added to a base model's), and each of the others over them */
const char *fgm_names_hf(const char *name, char *buf, size_t cap);
const char *fgm_names_block_sparse_moe(const char *name, char *buf, size_t cap);
const char *fgm_names_block_sparse_moe_corr(const char *name, char *buf, size_t cap);
const char *fgm_names_moe_statics(const char *name, char *buf, size_t cap);
const char *fgm_names_post_mlp_norm(const char *name, char *buf, size_t cap);
const char *fgm_names_io_linear(const char *name, char *buf, size_t cap);
/* names.c: fg_arch.derived, .fused, .stacked and .unused of the rows */
uint64_t fgm_derived_inv_freq(const fg_hparams *hp, const char *name);
uint32_t fgm_fused_qkv_gate_up(const fg_hparams *hp, const char *name,
                               char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout);
uint32_t fgm_fused_experts(const fg_hparams *hp, const char *name,
                           char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout);
uint32_t fgm_fused_experts_xw(const fg_hparams *hp, const char *name,
                              char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout);
int fgm_stacked_experts(const fg_hparams *hp, const char *name, char out[FG_TENSOR_NAME_MAX],
                        uint32_t *block);
int fgm_unused_mtp(const fg_hparams *hp, const char *name);

#endif
