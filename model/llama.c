/* llama.c - the Llama family as table entries: Llama 2 and 3.x (model_type "llama"), Mistral
 * ("mistral"), Ministral ("ministral"), Qwen2 / Qwen2.5 ("qwen2"), Qwen3 ("qwen3", the dense
 * models), Phi-3 / Phi-3.5 / Phi-4 ("phi3") and Gemma 3's text model ("gemma3_text"), after
 * transformers' modeling_llama.py, modeling_mistral.py, modeling_ministral.py,
 * modeling_qwen2.py, modeling_qwen3.py, modeling_phi3.py and modeling_gemma3.py.
 *
 * They share one layer: x += o(attn(rmsnorm(x))) with rotary positions (rotate-half) and
 * grouped-query attention, then x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))); a final
 * RMSNorm and the LM head (tied to the embedding when tie_word_embeddings). They differ in
 * config keys and defaults, and Qwen3 in one step of the layer:
 *   llama:   attention_bias / mlp_bias (default false), rope_scaling "linear" or "llama3",
 *            head_dim (default hidden / heads), tie_word_embeddings (default false);
 *   mistral: sliding_window on every layer (an integer, null for none; absent 4096, as
 *            MistralConfig);
 *   ministral: Mistral with layer_types (default: every layer windowed when sliding_window);
 *   olmo2:   Llama's projections with an RMSNorm after each block only (post_attention_ and
 *            post_feedforward_layernorm; no input norms), q_norm / k_norm over the whole q and
 *            k projections, Olmo2Config's defaults (no BOS, eos 50279, pad 1, eps 1e-5);
 *   olmo3:   OLMo 2's layer with Olmo3Config's sliding layers (layer_types, default 3 of every
 *            4 from layer 0, window 4096) rotated unscaled with rope_theta (default 5e5), the
 *            full ones with rope_scaling too (or rope_parameters per layer type, as Gemma 3);
 *   smollm3: Llama with no rotary positions on the layers no_rope_layers marks 0 (default every
 *            4th: no_rope_layer_interval), SmolLM3Config's defaults (4 KV heads, tied, bos
 *            128000, eos 128001, pad 128004), windows as Qwen's but on the NoPE layers;
 *   granite: Llama with GraniteConfig's four multipliers (embeddings, q's scale itself, the
 *            blocks' outputs before the residual, 1 / logits_scaling on the logits);
 *   ministral3: Mistral with Ministral3Config's defaults (head_dim 128, pad 11, eps 1e-5, no
 *            window unless named), YaRN by default, and the rope object's
 *            llama_4_scaling_beta: q times 1 + beta ln(1 + floor(p / original positions));
 *   qwen2:   biases on q/k/v (not o), tie_word_embeddings as given; with use_sliding_window
 *            true, sliding_window (absent 4096) on the layers layer_types names
 *            "sliding_attention", or without layer_types on layers from max_window_layers
 *            (default 28) on;
 *   qwen3:   an RMSNorm over each head of q and of k (weights self_attn.q_norm / k_norm
 *            [head_dim], eps rms_norm_eps) between the projections and RoPE; attention_bias
 *            (default false) on q/k/v and o alike, never an MLP bias; head_dim defaults to 128
 *            as Qwen3Config's does (every published config names it); windows as qwen2;
 *   phi3:    Phi3Config's defaults (eps 1e-5, bos 1, eos / pad 32000, no window unless
 *            sliding_window names one, then on every layer); partial_rotary_factor (top-level or
 *            in the rope object) rotates int(head_dim * factor) dims; rope types default and
 *            longrope ("su", "yarn": its old names), whose short_factor / long_factor divide the
 *            frequencies and whose attention factor scales the rotated dims of q and k; the
 *            checkpoint's self_attn.qkv_proj and mlp.gate_up_proj hold q/k/v and gate/up stacked
 *            by rows, which fg-convert stores apart under Llama's names (fg_arch.fused);
 *   gemma3_text: Gemma3TextConfig's defaults (head_dim 256, 4 KV heads, bos 2, eos 1, pad 0,
 *            tied, and the sizes when absent); sandwich norms (post_attention_layernorm is the
 *            attention's output norm, pre_ / post_feedforward_layernorm the MLP's) and q/k
 *            norms, all scaling by 1 + w
 *            (the specs add 1 at load); embeddings times sqrt(hidden); q scaled by
 *            query_pre_attn_scalar^-1/2; hidden_activation gelu_pytorch_tanh; sliding layers
 *            (layer_types, or all but every sliding_window_pattern-th) windowed and rotated with
 *            rope_local_base_freq, the full ones with rope_theta and rope_scaling (or
 *            rope_parameters per layer type); soft-capping and bidirectional attention refused.
 *   gemma:   Gemma (1): Llama's layer with GemmaConfig's defaults (head_dim 256, tied, bos 2,
 *            eos 1, pad 0, gemma-7b's sizes), RMSNorms scaling by 1 + w, embeddings times
 *            sqrt(hidden), the tanh GELU (hidden_act, whose legacy "gelu" GemmaConfig takes so);
 *   gemma2:  Gemma 3's layer without q/k norms or a local rotary base, every other layer sliding
 *            (layer_types, default from layer 0), Gemma2Config's defaults (sliding_window 4096,
 *            8192 positions), and logit soft-capping: each attention score and each logit
 *            becomes cap * tanh(x / cap) (attn_logit_softcapping 50, final_logit_softcapping
 *            30 by default; null: none);
 *   mixtral, qwen2_moe, qwen3_moe: Mistral's, Qwen2's and Qwen3's attention with a mixture of
 *            experts as the MLP of the sparse layers (every Mixtral layer; Qwen's less
 *            mlp_only_layers and those decoder_sparse_step skips): the router's softmax picks
 *            num_experts_per_tok experts (renormalized: Mixtral, norm_topk_prob), Qwen2-MoE adds
 *            a shared expert gated by sigmoid(shared_expert_gate . x); the checkpoint's
 *            experts.E.<proj> tensors (Mixtral's block_sparse_moe.experts.E.w1/w3/w2) are the
 *            blocks of one stacked tensor per projection (fg_arch.stacked, SPEC 15);
 *   granitemoe: Granite's layer and multipliers with a mixture of experts intermediate_size
 *            wide on every layer (GraniteMoeConfig's defaults: 8 experts, top 2, the softmax
 *            over the top 2 logits, which is the renormalized top 2 of the softmax); the
 *            checkpoint's block_sparse_moe.input_linear [experts, 2 x width, hidden] holds every
 *            expert's gate and up rows, output_linear its down rows, router.layer the router;
 *            the Mixtral and Qwen MoE entries read transformers 5's in-memory layout
 *            (mlp.experts.gate_up_proj / down_proj, written with save_original_format=False)
 *            the same way (fg_arch.fused, model_check.c);
 *   olmoe:   Llama's layer with OLMo 2's q/k norms over the whole projections and a mixture of
 *            experts intermediate_size wide on every layer (Qwen's names, norm_topk_prob default
 *            false), OlmoeConfig's defaults (64 experts, top 8, no BOS, eos 50279, pad 1, eps
 *            1e-5); clip_qkv refused unless null;
 *   glm4_moe: Llama's layer with Glm4MoeConfig's defaults (8 KV heads, eps 1e-5), biases on
 *            q/k/v only (attention_bias), per-head q/k norms by use_qk_norm, half of each head
 *            rotated (partial_rotary_factor 0.5), dense layers below first_k_dense_replace,
 *            then experts chosen by DeepSeek-V3's router (sigmoid scores, the choice biased by
 *            mlp.gate.e_score_correction_bias within groups: glm_experts) beside ungated shared
 *            experts (mlp.shared_experts); the multi-token prediction layers after the last
 *            accepted unread (fg_arch.unused);
 *   minimax_m2: Llama's layer without biases, MiniMaxM2Config's defaults (theta 5e6, head_dim
 *            128), OLMo 2's whole-projection q/k norms, rotary_dim (the released files') or
 *            partial_rotary_factor, and on every layer experts chosen by sigmoid scores plus
 *            the choice bias (GLM's router with one group), Mixtral's checkpoint names;
 *   glm4:    GLM-4 (9B, 32B-0414): GLM-4 MoE's attention (q/k/v biases, half of each head
 *            rotated) with the rotary on (even, odd) pairs (rows reordered at conversion, as
 *            ERNIE 4.5's), Gemma's sandwich of plain RMSNorms under GLM's names (glm4_name), the
 *            MLP's gate_up_proj fused as Phi-3's, Glm4Config's defaults (head_dim 128, 2 KV
 *            heads, eps 1.5625e-7, pad 151329);
 *   ernie4_5: Llama's layer with Ernie4_5Config's defaults (head_dim 128, 2 KV heads, tied,
 *            bos 1, eos 2, pad 0, theta 5e5), use_bias on every Linear layer, and rotary
 *            positions on (even, odd) pairs of dims, which fg-convert turns into rotate-half's
 *            by reordering q's and k's rows (fg_tensor_spec.perm_*);
 *   exaone4: OLMo 2's layer (norms after the blocks only) with per-head q/k norms and
 *            Exaone4Config's defaults (KV heads 32, bos 0, eos 2, eps 1e-5); with sliding_window
 *            (4096) set, all but every sliding_window_pattern-th (4, or the letters of "LLLG")
 *            layer sliding (or layer_types) and the full ones without rotary positions;
 *   seed_oss: Llama's layer with SeedOssConfig's defaults (head_dim 128, 8 KV heads, bos 0,
 *            eos 2, pad 1, eps 1e-6), q/k/v biases by attention_bias (default true), o's by
 *            attention_out_bias (default false);
 *   dots1:   Qwen3's attention (per-head q/k norms, attention_bias on q/k/v/o) and GLM's MoE
 *            with Dots1Config's defaults (norm_topk_prob false, no dense layers, the expert
 *            counts required), windows on the layers from max_window_layers (62) on whenever
 *            sliding_window (4096) is not null, or layer_types;
 *   gpt_oss: Llama's layer with GptOssConfig's defaults (8 KV heads, head_dim 64, q/k/v/o
 *            biases unless attention_bias false, eps 1e-5, every other layer sliding at 128,
 *            YaRN factor 32 over 4096 positions untruncated, theta 150000), attention sinks
 *            (self_attn.sinks: a logit per head each softmax counts), and a mixture of experts
 *            intermediate_size wide on every layer (128, top 4) with a biased router
 *            (mlp.router), the softmax of the top k logits, biased experts and the clamped
 *            SwiGLU (swiglu_limit 7, swiglu_alpha 1.702: FG_ACT_SWIGLU_OAI); the checkpoint's
 *            experts are x . W with gate and up columns alternating (mlp.experts.gate_up_proj
 *            [experts, hidden, 2 x width]), which fg-convert reads transposed and de-interleaved
 *            into the stacked experts (fg_arch.fused's layouts);
 * The multimodal checkpoints whose text model fg runs (gemma3, mistral3, qwen2_5_vl, qwen3_vl)
 * are entries at the end of this file, reading their text_config through the entries above.
 * Rotary settings are read from rope_theta / rope_scaling, or from transformers 5's
 * rope_parameters object, whichever the file has: rope_type default, linear, dynamic (the default
 * frequencies within max_position_embeddings, which bounds every fg context), llama3 or yarn
 * (original_max_position_embeddings, where they need it, defaults to max_position_embeddings and
 * yields to a top-level key, as transformers 5 settles it). hidden_act must be "silu".
 *
 * Tensors (canonical names are *ForCausalLM's): model.embed_tokens.weight [vocab, hidden];
 * per layer model.layers.N.input_layernorm.weight [hidden], self_attn.{q,k,v,o}_proj.weight
 * ([heads*hd, hidden], [kv*hd, hidden] twice, [hidden, heads*hd]) and their biases where the
 * config has them, post_attention_layernorm.weight, mlp.{gate,up}_proj.weight [ffn, hidden],
 * mlp.down_proj.weight [hidden, ffn]; model.norm.weight; lm_head.weight [vocab, hidden]
 * (absent when tied: the embedding is used). model.layers.N.self_attn.rotary_emb.inv_freq
 * [rot_dim / 2], which checkpoints written by transformers before 4.31 carry, is accepted and
 * skipped (fg_arch.derived): the frequencies come from config.json, as in transformers since.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_int.h"

typedef enum {
    FAM_LLAMA, FAM_MISTRAL, FAM_MINISTRAL, FAM_QWEN2, FAM_QWEN3, FAM_PHI3, FAM_GEMMA3,
    FAM_MINISTRAL3, FAM_GRANITE, FAM_SMOLLM3, FAM_OLMO2, FAM_MIXTRAL, FAM_QWEN2_MOE,
    FAM_QWEN3_MOE, FAM_OLMOE, FAM_GEMMA2, FAM_GRANITEMOE, FAM_GPT_OSS, FAM_GEMMA, FAM_GLM4_MOE,
    FAM_MINIMAX_M2, FAM_OLMO3, FAM_DOTS1, FAM_SEED_OSS, FAM_EXAONE4, FAM_ERNIE45,
    FAM_ERNIE45_MOE, FAM_GLM4
} family;

/* Where the families differ: their transformers config class's defaults and switches. */
typedef enum {
    WIN_NONE, WIN_ALL, WIN_USE_ALL, WIN_LAYER_TYPES, WIN_QWEN, WIN_QWEN2_MOE, WIN_GEMMA, WIN_SMOL,
    WIN_OSS, /* layer_types, by default every other layer from layer 0 sliding (Gemma 2's) */
    WIN_DOTS, /* layer_types, by default the layers from max_window_layers (62) on, whenever
               * sliding_window (4096) is not null (Dots1Config: no use_sliding_window) */
    WIN_EXAONE /* layer_types, by default all but every sliding_window_pattern-th (4; or its
                * letters, "LLLG": L local) while sliding_window (4096) is not null */
} window_kind;
/* a mixture of experts: none, Mixtral's keys, Qwen's (sparse layers, moe_intermediate_size),
 * Qwen's with Qwen2-MoE's shared expert, OLMoE's (Mixtral's with norm_topk_prob), gpt-oss's
 * (Mixtral's with biases and the clamped SwiGLU) */
typedef enum {
    MOE_NONE, MOE_MIXTRAL, MOE_QWEN, MOE_QWEN_SHARED, MOE_OLMOE, MOE_OSS, MOE_GLM, MOE_MINIMAX,
    MOE_ERNIE
} moe_kind;
typedef struct traits {
    uint32_t kv_heads;   /* num_key_value_heads when absent (0: one per query head) */
    uint32_t head_dim;   /* head_dim when absent (0: hidden / heads) */
    int32_t bos, eos;    /* bos_token_id / eos_token_id when absent (-1: none) */
    int qkv_bias;        /* q/k/v biases always (Qwen2), or by default when qkv_bias_key */
    int qkv_bias_key;    /* reads qkv_bias: q/k/v biases (Qwen2-MoE) */
    int attention_bias;  /* reads attention_bias: q/k/v and o biases (2: true by default) */
    int mlp_bias;        /* reads mlp_bias */
    int qk_norm;         /* q/k RMSNorms (fg_hparams.qk_norm's values) */
    /* sliding_window on: every layer; layer_types' (default every layer); with
     * use_sliding_window, layer_types' or those from max_window_layers on */
    window_kind windows;
    uint32_t window;     /* sliding_window when absent (where windows are on) */
    int32_t pad;         /* pad_token_id when absent */
    float eps;           /* rms_norm_eps when absent */
    /* Phi-3: partial_rotary_factor read; rope types default and longrope ("su" and "yarn" are
     * its old names), original_max_position_embeddings the top-level key (default 4096) alone */
    int phi;
    /* Gemma (1), Gemma 2 (2) and 3 (3): RMSNorms scaling by 1 + w, sqrt(hidden) embeddings,
     * GELU (tanh), tied embeddings by default; Gemma 2 and 3: sandwich norms,
     * query_pre_attn_scalar, hidden_activation, every other layer (Gemma 3: 5 of 6) sliding;
     * Gemma 3's local rotary settings for the sliding layers and q/k norms, Gemma 2's logit
     * soft-capping */
    int gemma;
    /* Ministral 3: YaRN by default, rope's llama_4_scaling_beta read (hp->llama4_beta) */
    int ministral3;
    /* Granite: embedding_multiplier, attention_multiplier (q's scale itself), residual_multiplier,
     * logits_scaling (the logits divided by it); each default 1 */
    int granite;
    /* SmolLM3: no_rope_layers (0 = no rotary positions; default every no_rope_layer_interval-th,
     * 4), windows only with use_sliding_window, on layer_types' or the NoPE layers */
    int smol;
    /* OLMo 2: an RMSNorm after each block only (no input norms), q/k norms over the whole
     * projections */
    int olmo2;
    /* OLMo 3: OLMo 2's layer with 3 of 4 layers sliding (layer_types, window 4096) and the
     * sliding layers' rotary settings their own (rope_theta unscaled; rope_scaling the full
     * layers'), as Gemma 3's two (gemma_rope) */
    int olmo3;
    /* gpt-oss: attention sinks, YaRN by default (GptOssConfig's: factor 32 over 4096 positions,
     * theta 150000, truncate false) */
    int oss;
    /* GLM-4 MoE: partial rotary (default half the head), q/k norms by use_qk_norm, biases on
     * q/k/v only, its router (glm_experts), the multi-token prediction layers skipped */
    int glm;
    /* dots.llm1: GLM's router with Dots1Config's defaults (norm_topk_prob false, no dense
     * layers, the expert counts required), Qwen3's attention */
    int dots;
    /* Seed-OSS: o's bias by attention_out_bias (default false), q/k/v's by attention_bias */
    int seed;
    /* EXAONE 4: OLMo 2's norms after the blocks with per-head q/k norms; with a window, the
     * full layers without rotary positions (its "global NoPE") */
    int exaone;
    /* ERNIE 4.5: rotary positions on (even, odd) pairs (its q/k rows reordered at conversion:
     * hp->rope_interleaved), use_bias for every Linear layer, tied embeddings by default */
    int ernie;
    /* GLM-4 (dense): GLM's attention (half of each head rotated, q/k/v biases) with its
     * rotary on (even, odd) pairs, and sandwich norms (plain, not 1 + w) under its own names
     * (glm4_name: post_self_attn_layernorm, post_attention_layernorm before the MLP,
     * post_mlp_layernorm), the MLP's gate and up fused as Phi-3's */
    int glm4;
    /* MiniMax-M2: partial rotary by the legacy rotary_dim (or partial_rotary_factor, default
     * all), its router (sigmoid scores, the choice bias, renormalized) */
    int minimax;
    float theta;         /* rope_theta when absent (0: 10000) */
    moe_kind moe;
    uint32_t experts, top_k, moe_ffn, shared_ffn; /* the MoE keys' defaults */
} traits;

/* Designated per field: a family names what is not zero (bos, eos, pad -1: none). */
#define NO_IDS .bos = -1, .eos = -1, .pad = -1
static const traits k_traits[] = {
    [FAM_LLAMA] = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1, .mlp_bias = 1,
                   .windows = WIN_NONE, .eps = 1e-6f},
    [FAM_MISTRAL] = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_ALL,
                     .window = 4096, .eps = 1e-6f},
    [FAM_MINISTRAL] = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_LAYER_TYPES,
                       .window = 4096, .eps = 1e-6f},
    [FAM_QWEN2] = {.kv_heads = 32, NO_IDS, .qkv_bias = 1, .windows = WIN_QWEN, .window = 4096,
                   .eps = 1e-6f},
    [FAM_QWEN3] = {.kv_heads = 32, .head_dim = 128, NO_IDS, .attention_bias = 1,
                   .qk_norm = FG_QK_NORM_HEAD, .windows = WIN_QWEN, .window = 4096, .eps = 1e-6f},
    [FAM_PHI3] = {.bos = 1, .eos = 32000, .pad = 32000, .windows = WIN_ALL, .eps = 1e-5f,
                  .phi = 1},
    [FAM_GEMMA3] = {.kv_heads = 4, .head_dim = 256, .bos = 2, .eos = 1, .pad = 0,
                    .attention_bias = 1, .qk_norm = FG_QK_NORM_HEAD, .windows = WIN_GEMMA,
                    .window = 4096, .eps = 1e-6f, .gemma = 3},
    [FAM_MINISTRAL3] = {.kv_heads = 8, .head_dim = 128, .bos = 1, .eos = 2, .pad = 11,
                        .windows = WIN_ALL, .eps = 1e-5f, .ministral3 = 1},
    [FAM_GRANITE] = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1, .mlp_bias = 1,
                     .windows = WIN_NONE, .eps = 1e-6f, .granite = 1},
    [FAM_SMOLLM3] = {.kv_heads = 4, .bos = 128000, .eos = 128001, .pad = 128004,
                     .attention_bias = 1, .mlp_bias = 1, .windows = WIN_SMOL, .eps = 1e-6f,
                     .smol = 1},
    [FAM_OLMO2] = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1,
                   .qk_norm = FG_QK_NORM_WHOLE, .windows = WIN_NONE, .eps = 1e-5f, .olmo2 = 1},
    [FAM_MIXTRAL] = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_ALL,
                     .eps = 1e-5f, .moe = MOE_MIXTRAL, .experts = 8, .top_k = 2},
    [FAM_QWEN2_MOE] = {.kv_heads = 16, NO_IDS, .qkv_bias = 1, .qkv_bias_key = 1,
                       .windows = WIN_QWEN2_MOE, .window = 4096, .eps = 1e-6f,
                       .moe = MOE_QWEN_SHARED, .experts = 60, .top_k = 4, .moe_ffn = 1408,
                       .shared_ffn = 5632},
    [FAM_QWEN3_MOE] = {.kv_heads = 4, NO_IDS, .attention_bias = 1, .qk_norm = FG_QK_NORM_HEAD,
                       .windows = WIN_USE_ALL, .window = 4096, .eps = 1e-6f, .moe = MOE_QWEN,
                       .experts = 128, .top_k = 8, .moe_ffn = 768},
    [FAM_OLMOE] = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1,
                   .qk_norm = FG_QK_NORM_WHOLE, .windows = WIN_NONE, .eps = 1e-5f,
                   .moe = MOE_OLMOE, .experts = 64, .top_k = 8},
    [FAM_GRANITEMOE] = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1,
                        .windows = WIN_NONE, .eps = 1e-6f, .granite = 1, .moe = MOE_MIXTRAL,
                        .experts = 8, .top_k = 2},
    [FAM_GEMMA2] = {.kv_heads = 4, .head_dim = 256, .bos = 2, .eos = 1, .pad = 0,
                    .attention_bias = 1, .windows = WIN_GEMMA, .window = 4096, .eps = 1e-6f,
                    .gemma = 2},
    [FAM_GLM4_MOE] = {.kv_heads = 8, NO_IDS, .attention_bias = 1, .windows = WIN_NONE,
                      .eps = 1e-5f, .glm = 1, .moe = MOE_GLM, .experts = 128, .top_k = 8,
                      .moe_ffn = 1408},
    [FAM_ERNIE45] = {.kv_heads = 2, .head_dim = 128, .bos = 1, .eos = 2, .pad = 0,
                     .windows = WIN_NONE, .eps = 1e-5f, .ernie = 1, .theta = 5e5f},
    [FAM_GLM4] = {.kv_heads = 2, .head_dim = 128, .bos = -1, .eos = -1, .pad = 151329,
                  .attention_bias = 2, .windows = WIN_NONE, .eps = 1.5625e-7f, .glm = 1,
                  .glm4 = 1},
    [FAM_ERNIE45_MOE] = {.kv_heads = 4, .bos = 1, .eos = 2, .pad = 0, .windows = WIN_NONE,
                         .eps = 1e-5f, .ernie = 1, .theta = 5e5f, .moe = MOE_ERNIE,
                         .experts = 64, .top_k = 6, .moe_ffn = 1536},
    [FAM_EXAONE4] = {.kv_heads = 32, .bos = 0, .eos = 2, .pad = -1,
                     .qk_norm = FG_QK_NORM_HEAD, .windows = WIN_EXAONE, .window = 4096,
                     .eps = 1e-5f, .olmo2 = 1, .exaone = 1},
    [FAM_SEED_OSS] = {.kv_heads = 8, .head_dim = 128, .bos = 0, .eos = 2, .pad = 1,
                      .attention_bias = 2, .mlp_bias = 1, .windows = WIN_NONE, .eps = 1e-6f,
                      .seed = 1},
    [FAM_DOTS1] = {.kv_heads = 32, NO_IDS, .attention_bias = 1, .qk_norm = FG_QK_NORM_HEAD,
                   .windows = WIN_DOTS, .window = 4096, .eps = 1e-6f, .dots = 1, .moe = MOE_GLM,
                   .moe_ffn = 1408},
    [FAM_OLMO3] = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1,
                   .qk_norm = FG_QK_NORM_WHOLE, .windows = WIN_GEMMA, .window = 4096,
                   .eps = 1e-5f, .olmo2 = 1, .olmo3 = 1, .theta = 5e5f},
    [FAM_MINIMAX_M2] = {.kv_heads = 8, .head_dim = 128, .bos = 200034, .eos = 200020,
                        .pad = -1, .qk_norm = FG_QK_NORM_WHOLE, .windows = WIN_NONE,
                        .eps = 1e-6f, .minimax = 1, .theta = 5e6f, .moe = MOE_MINIMAX,
                        .experts = 256, .top_k = 8},
    [FAM_GEMMA] = {.head_dim = 256, .bos = 2, .eos = 1, .pad = 0, .attention_bias = 1,
                   .windows = WIN_NONE, .eps = 1e-6f, .gemma = 1},
    [FAM_GPT_OSS] = {.kv_heads = 8, .head_dim = 64, NO_IDS, .attention_bias = 2,
                     .windows = WIN_OSS, .window = 128, .eps = 1e-5f, .oss = 1, .theta = 1.5e5f,
                     .moe = MOE_OSS, .experts = 128, .top_k = 4},
};
#undef NO_IDS

static int sizes(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    const struct { const char *key; uint32_t *dst; uint32_t max; } req[] = {
        {"vocab_size", &hp->vocab_size, FG_MODEL_MAX_DIM},
        {"hidden_size", &hp->hidden, FG_MODEL_MAX_DIM},
        {"num_hidden_layers", &hp->n_layers, FG_MODEL_MAX_LAYERS},
        {"intermediate_size", &hp->ffn, FG_MODEL_MAX_DIM},
        {"num_attention_heads", &hp->n_heads, FG_MODEL_MAX_DIM},
        {"max_position_embeddings", &hp->max_pos, FG_MODEL_MAX_DIM},
    };
    /* GemmaConfig's defaults, Gemma2Config's and Gemma3TextConfig's (the hub's Gemma 3 4B-27B
     * text_config names few keys) */
    static const uint32_t gemma_dflt[3][6] = {{256000, 3072, 28, 24576, 16, 8192},
                                              {256000, 2304, 26, 9216, 8, 8192},
                                              {262208, 2304, 26, 9216, 8, 131072}};
    int rc;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (t->gemma)
            *req[i].dst = gemma_dflt[t->gemma - 1][i];
        rc = req[i].dst == &hp->max_pos /* a bound: rotary positions size nothing */
           ? fgm_limit(root, label, req[i].key, !t->gemma, req[i].max, req[i].dst, err)
           : fgm_uint(root, label, req[i].key, !t->gemma, req[i].max, req[i].dst, err);
        if (rc < 0)
            return rc;
    }
    /* absent: the config class's default; null: one per query head */
    hp->n_kv_heads = json_object_get(root, "num_key_value_heads") || !t->kv_heads
                   ? hp->n_heads : t->kv_heads;
    if ((rc = fgm_uint(root, label, "num_key_value_heads", 0, FG_MODEL_MAX_DIM, &hp->n_kv_heads,
                       err)) < 0)
        return rc;
    if (hp->n_heads % hp->n_kv_heads && !json_object_get(root, "num_key_value_heads"))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: key num_key_value_heads: missing, and the "
                          "family's default %u does not divide num_attention_heads %u",
                          label, hp->n_kv_heads, hp->n_heads);
    if (hp->n_heads % hp->n_kv_heads)
        return fgm_key_err(err, label, "num_key_value_heads", "does not divide "
                           "num_attention_heads");
    if (!t->head_dim && hp->hidden % hp->n_heads && !json_object_get(root, "head_dim"))
        return fgm_key_err(err, label, "num_attention_heads", "does not divide hidden_size "
                           "(and there is no head_dim)");
    hp->head_dim = t->head_dim ? t->head_dim : hp->hidden / hp->n_heads;
    if ((rc = fgm_uint(root, label, "head_dim", 0, 1u << 16, &hp->head_dim, err)) < 0)
        return rc;
    if (hp->head_dim % 2)
        return fgm_key_err(err, label, "head_dim", "must be even (rotary positions)");
    hp->embed_dim = hp->hidden;
    return FG_OK;
}

/* original_max_position_embeddings of llama3 and yarn, as transformers 5 settles it: a top-level
 * key first (Phi-3 style files), then the rope object's, then max_position_embeddings. */
static int orig_max_pos(json_t *root, json_t *s, const char *label, fg_hparams *hp, fg_err *err)
{
    static const char k[] = "original_max_position_embeddings";
    hp->rope.orig_max_pos = hp->max_pos;
    int rc = fgm_uint(json_object_get(root, k) ? root : s, label, k, 0, FG_MODEL_MAX_DIM,
                      &hp->rope.orig_max_pos, err);
    return rc < 0 ? rc : FG_OK;
}

/* YaRN's mscale: 1 + 0.1 m ln(scale), 1 for scale <= 1 */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* rope_type "yarn" (transformers' _compute_yarn_parameters): factor (null: max_position_embeddings
 * / original), beta_fast / beta_slow (absent, null or 0: 32 / 1), truncate (absent: true),
 * attention_factor (absent or null: from factor, and mscale / mscale_all_dim when both are set). */
static int yarn(json_t *root, json_t *s, const char *label, const char *key, fg_hparams *hp,
                fg_err *err)
{
    fg_rope *r = &hp->rope; /* zeroed by fg_model_config_parse: beta_* 0 until read */
    float m = 0, m_all = 0, af = 0;
    int rc = orig_max_pos(root, s, label, hp, err);
    if (rc)
        return rc;
    r->scaling = FG_ROPE_YARN;
    json_t *f = json_object_get(s, "factor"), *t = json_object_get(s, "truncate");
    if (json_is_null(f))
        r->factor = (float)((double)hp->max_pos / r->orig_max_pos);
    else if (fgm_float(s, label, "factor", 1e-6, 1e6, 1, &r->factor, NULL))
        return fgm_key_err(err, label, key, "yarn needs factor, a positive number");
    if (fgm_float(s, label, "beta_fast", 0, 1e6, 0, &r->beta_fast, NULL) < 0 ||
        fgm_float(s, label, "beta_slow", 0, 1e6, 0, &r->beta_slow, NULL) < 0 ||
        fgm_float(s, label, "mscale", 0, 1e6, 0, &m, NULL) < 0 ||
        fgm_float(s, label, "mscale_all_dim", 0, 1e6, 0, &m_all, NULL) < 0 ||
        (rc = fgm_float(s, label, "attention_factor", 1e-6, 1e6, 0, &af, NULL)) < 0 ||
        (t && !json_is_boolean(t) && !json_is_null(t)))
        return fgm_key_err(err, label, key, "yarn's beta_fast, beta_slow, mscale, mscale_all_dim "
                           "must be numbers >= 0, attention_factor > 0, truncate true or false");
    r->beta_fast = r->beta_fast > 0 ? r->beta_fast : 32.0f; /* absent, null or 0 */
    r->beta_slow = r->beta_slow > 0 ? r->beta_slow : 1.0f;
    r->truncate = !t || json_is_true(t);
    double a = yarn_mscale(r->factor, 1.0);
    if (rc == FG_OK)
        a = af;
    else if (m > 0 && m_all > 0)
        a = yarn_mscale(r->factor, m) / yarn_mscale(r->factor, m_all);
    r->attn_factor = (float)a;
    return FG_OK;
}

/* partial_rotary_factor (Phi-3, GLM-4 MoE), top-level or in the rope object (absent: dflt): the
 * rotated dims are int(head_dim * factor), as transformers truncates them. */
static int partial_rotary(json_t *root, json_t *s, const char *label, float dflt,
                          fg_hparams *hp, fg_err *err)
{
    static const char k[] = "partial_rotary_factor";
    float f = dflt;
    int rc = fgm_float(json_object_get(root, k) || !json_is_object(s) ? root : s, label, k,
                       1e-6, 1, 0, &f, err);
    if (rc < 0)
        return rc;
    hp->rope.rot_dim = (uint32_t)((double)hp->head_dim * f);
    /* MiniMax-M2's released files: rotary_dim, which MiniMaxM2Config turns into the factor */
    int dim = rc == 1 && json_object_get(root, "rotary_dim");
    if (dim && (rc = fgm_uint(root, label, "rotary_dim", 0, hp->head_dim, &hp->rope.rot_dim,
                              err)) < 0)
        return rc;
    if (hp->rope.rot_dim < 2 || hp->rope.rot_dim % 2)
        return fgm_key_err(err, label, dim ? "rotary_dim" : k, "must leave an even number "
                           "(>= 2) of rotated dims per head");
    return FG_OK;
}

/* A list of n positive numbers into out (longrope's short_factor / long_factor). */
static int factors(json_t *s, const char *label, const char *key, const char *sub, uint32_t n,
                   float *out, fg_err *err)
{
    json_t *a = json_object_get(s, sub);
    char k[64];
    snprintf(k, sizeof k, "%s.%s", key, sub);
    if (!json_is_array(a) || json_array_size(a) != n)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: key %s: longrope needs a list of %u numbers "
                          "(rotated dims / 2)%s", label, k, n, n > FG_ROPE_MAX_EXT ? ", and fg "
                          "takes at most 128" : "");
    for (uint32_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        double x = json_is_number(v) ? json_number_value(v) : 0;
        if (!(x > 0 && x < 1e9))
            return fgm_key_err(err, label, k, "entries must be positive numbers");
        out[i] = (float)x;
    }
    return FG_OK;
}

/* rope_type "longrope" (Phi-3's; transformers' _compute_longrope_parameters): short_factor and
 * long_factor, one per rotated frequency; factor (absent or null: max_position_embeddings /
 * original); attention_factor (absent or null: sqrt(1 + ln factor / ln original), 1 when factor
 * <= 1). original_max_position_embeddings is Phi-3's top-level key (default 4096): Phi3Config
 * puts it over the object's. Which list applies is the engine's choice (fg_rope.use_long). */
static int longrope(json_t *root, json_t *s, const char *label, const char *key, fg_hparams *hp,
                    fg_err *err)
{
    fg_rope *r = &hp->rope;
    uint32_t n = r->rot_dim / 2;
    int rc;
    r->scaling = FG_ROPE_LONGROPE;
    r->orig_max_pos = 4096;
    if ((rc = fgm_uint(root, label, "original_max_position_embeddings", 0, FG_MODEL_MAX_DIM,
                       &r->orig_max_pos, err)) < 0)
        return rc;
    if (r->orig_max_pos < 2)
        return fgm_key_err(err, label, "original_max_position_embeddings", "must be >= 2");
    if ((rc = factors(s, label, key, "short_factor", n, r->short_factor, err)) ||
        (rc = factors(s, label, key, "long_factor", n, r->long_factor, err)))
        return rc;
    float af = 0;
    r->factor = (float)((double)hp->max_pos / r->orig_max_pos);
    char sub[64];
    snprintf(sub, sizeof sub, "%s.factor", key);
    if (fgm_float(s, label, "factor", 1e-6, 1e6, 0, &r->factor, NULL) < 0)
        return fgm_key_err(err, label, sub, "must be a positive number");
    snprintf(sub, sizeof sub, "%s.attention_factor", key);
    if ((rc = fgm_float(s, label, "attention_factor", 1e-6, 1e6, 0, &af, NULL)) < 0)
        return fgm_key_err(err, label, sub, "must be a positive number");
    double f = r->factor;
    r->attn_factor = rc == FG_OK ? af
                   : f <= 1 ? 1.0f : (float)sqrt(1 + log(f) / log((double)r->orig_max_pos));
    return FG_OK;
}

static int rope_in(json_t *root, json_t *s, const char *key, const char *theta_key,
                   const char *label, const traits *t, fg_hparams *hp, fg_err *err);

/* rope_scaling (or rope_parameters) -> hp->rope; theta from rope_theta or the object.
 * Ministral 3: without either, Ministral3Config's YaRN (factor 16 over 16384 positions, theta
 * 1e6, llama_4_scaling_beta 0.1); its llama_4_scaling_beta read (hp->llama4_beta). */
static int rope(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    const char *key = json_object_get(root, "rope_parameters") ? "rope_parameters"
                                                               : "rope_scaling";
    json_t *s = json_object_get(root, key), *dflt = NULL;
    int own = t->ministral3 || t->oss; /* the config class's rope when the file has none */
    if (t->ministral3 && (!s || json_is_null(s)))
        s = dflt = json_pack("{s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f}", "rope_type", "yarn",
                             "rope_theta", 1e6, "factor", 16.0,
                             "original_max_position_embeddings", 16384, "beta_fast", 32.0,
                             "beta_slow", 1.0, "mscale", 1.0, "mscale_all_dim", 1.0,
                             "llama_4_scaling_beta", 0.1);
    else if (t->oss && (!s || json_is_null(s)))
        s = dflt = json_pack("{s:s, s:f, s:i, s:f, s:f, s:b}", "rope_type", "yarn", "factor", 32.0,
                             "original_max_position_embeddings", 4096, "beta_fast", 32.0,
                             "beta_slow", 1.0, "truncate", 0);
    if (t->theta > 0)
        hp->rope.theta = t->theta; /* the config class's default_theta (gpt-oss, MiniMax-M2) */
    int rc = own && !s ? fg_err_set(err, FG_ERR_NOMEM, "out of memory")
                       : rope_in(root, s, key, "rope_theta", label, t, hp, err);
    if (rc == FG_OK && t->ministral3 && /* absent (1): none */
        fgm_float(s, label, "llama_4_scaling_beta", 0, 1e6, 0, &hp->llama4_beta, NULL) < 0)
        rc = fgm_key_err(err, label, key, "llama_4_scaling_beta must be a number >= 0");
    if (rc == FG_OK && hp->llama4_beta > 0 && !hp->rope.orig_max_pos)
        rc = fgm_key_err(err, label, key, "llama_4_scaling_beta needs "
                         "original_max_position_embeddings (a llama3 or yarn rope_type)");
    json_decref(dflt);
    return rc;
}

/* Gemma 3's two rotary settings: the full layers' (rope_theta, default 1e6, and rope_scaling) and
 * the sliding layers' (rope_local_base_freq, default 1e4, no scaling), or transformers 5's
 * rope_parameters with one object for each layer type. The local ones land in rope_local.
 * OLMo 3's alike: rope_theta (default 5e5) for both, rope_scaling the full layers' only. */
static int gemma_rope(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                      fg_err *err)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    int nested = json_is_object(rp) && (json_object_get(rp, "full_attention") ||
                                        json_object_get(rp, "sliding_attention"));
    hp->rope.theta = t->olmo3 ? 5e5f : 10000.0f;
    int rc = nested ? rope_in(root, json_object_get(rp, "sliding_attention"),
                              "rope_parameters.sliding_attention", NULL, label, t, hp, err)
                    : rope_in(root, NULL, "", t->olmo3 ? "rope_theta" : "rope_local_base_freq",
                              label, t, hp, err);
    if (rc)
        return rc;
    hp->rope_local = hp->rope;
    hp->local_rope = 1;
    memset(&hp->rope, 0, sizeof hp->rope);
    hp->rope.theta = 1e6f; /* (OLMo 3: traits.theta, which rope() sets) */
    if (!nested)
        return rope(root, label, t, hp, err);
    rc = rope_in(root, json_object_get(rp, "full_attention"), "rope_parameters.full_attention",
                 NULL, label, t, hp, err);
    /* YaRN's truncate, as transformers 5.25 reads it for a file with an object per layer type:
     * from the top level only (none there: true), never from the layer type's object */
    json_t *tr = json_object_get(rp, "truncate");
    hp->rope.truncate = hp->rope_local.truncate = !json_is_false(tr);
    return rc;
}

/* The rope object s (NULL or null: none; named key in messages) -> hp->rope, theta from the
 * top-level theta_key (when not NULL), then the object's rope_theta. */
static int rope_in(json_t *root, json_t *s, const char *key, const char *theta_key,
                   const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    hp->rope.rot_dim = hp->head_dim;
    int rc = theta_key ? fgm_float(root, label, theta_key, 1e-3, 1e12, 0, &hp->rope.theta, err)
                       : FG_OK;
    if (rc < 0)
        return rc;
    if (s && !json_is_null(s) && !json_is_object(s))
        return fgm_key_err(err, label, key, "must be an object or null");
    if ((t->phi || t->glm || t->minimax) &&
        (rc = partial_rotary(root, s, label, t->glm ? 0.5f : 1.0f, hp, err)))
        return rc;
    if (!s || json_is_null(s))
        return FG_OK;
    char sub[64];
    snprintf(sub, sizeof sub, "%s.rope_theta", key);
    if ((rc = fgm_float(s, label, "rope_theta", 1e-3, 1e12, 0, &hp->rope.theta, err)) < 0)
        return fg_err_set(err, rc, "%s: key %s: must be a positive number", label, sub);
    json_t *ty = json_object_get(s, "rope_type");
    if (!ty)
        ty = json_object_get(s, "type"); /* older files */
    const char *type = json_is_string(ty) ? json_string_value(ty) : NULL;
    if (!type || !strcmp(type, "default"))
        return type || t->phi ? FG_OK : fgm_key_err(err, label, key, "rope_type missing");
    if (t->phi) { /* Phi3Config: "su" and "yarn" are longrope's old names; nothing else runs */
        if (strcmp(type, "longrope") && strcmp(type, "su") && strcmp(type, "yarn"))
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s.rope_type: \"%.32s\" is not "
                              "Phi-3's (default, longrope)", label, key, type);
        return longrope(root, s, label, key, hp, err);
    }
    if (!strcmp(type, "yarn"))
        return yarn(root, s, label, key, hp, err);
    snprintf(sub, sizeof sub, "%s.factor", key);
    if (fgm_float(s, label, "factor", 1e-6, 1e6, 1, &hp->rope.factor, NULL))
        return fgm_key_err(err, label, sub, "must be a positive number");
    if (!strcmp(type, "linear")) {
        hp->rope.scaling = FG_ROPE_LINEAR;
        return FG_OK;
    }
    /* Dynamic NTK rescales theta only once a sequence grows past max_position_embeddings
     * (transformers' _compute_dynamic_ntk_parameters gives theta itself up to there), and the
     * engine refuses a longer context for it: its frequencies are the default ones, exactly. */
    if (!strcmp(type, "dynamic")) {
        hp->rope.scaling = FG_ROPE_DYNAMIC;
        return FG_OK;
    }
    if (strcmp(type, "llama3"))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s.rope_type: \"%.32s\" is not "
                          "supported (default, linear, dynamic, llama3, yarn)", label, key, type);
    hp->rope.scaling = FG_ROPE_LLAMA3;
    if (fgm_float(s, label, "low_freq_factor", 1e-6, 1e6, 1, &hp->rope.low_freq_factor, NULL) ||
        fgm_float(s, label, "high_freq_factor", 1e-6, 1e6, 1, &hp->rope.high_freq_factor, NULL) ||
        !(hp->rope.high_freq_factor > hp->rope.low_freq_factor))
        return fgm_key_err(err, label, key, "llama3 needs factor and low_freq_factor < "
                           "high_freq_factor");
    return orig_max_pos(root, s, label, hp, err);
}

/* Per-layer windows (transformers' Qwen2Config, Qwen3Config, MinistralConfig): layer_types when
 * the file has it ("full_attention" / "sliding_attention" per layer), else Qwen's layers from
 * max_window_layers (default 28) on, or all of Ministral's, are windowed. A windowed layer
 * without a window is refused, as transformers refuses it. Sets hp->full_layers for the others. */
static int layer_windows(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                         fg_err *err)
{
    int qwen = t->windows == WIN_QWEN || t->windows == WIN_QWEN2_MOE || t->windows == WIN_DOTS;
    int gemma = t->windows == WIN_GEMMA || t->windows == WIN_OSS;
    int qmoe = t->windows == WIN_QWEN2_MOE;
    int smol = t->windows == WIN_SMOL; /* the NoPE layers (nope_layers, set first) */
    int exa = t->windows == WIN_EXAONE;
    json_t *pat = exa ? json_object_get(root, "sliding_window_pattern") : NULL;
    const char *letters = json_is_string(pat) ? json_string_value(pat) : NULL;
    json_t *mwl = qwen ? json_object_get(root, "max_window_layers") : NULL;
    json_t *lt = json_object_get(root, "layer_types");
    json_int_t from = t->windows == WIN_DOTS ? 62 : qwen ? 28 : 0;
    /* Gemma: every pattern-th layer full (Gemma 3's sliding_window_pattern; Gemma 2: every
     * other, as Gemma2Config's layer_types default) */
    uint32_t pattern = t->gemma == 2 || t->oss ? 2 : t->olmo3 ? 4 : 6;
    if (mwl && !json_is_null(mwl) &&
        (!json_is_integer(mwl) || (from = json_integer_value(mwl)) < 0))
        return fgm_key_err(err, label, "max_window_layers", "must be an integer >= 0");
    if (exa) /* (0, which transformers writes beside a null window: no sliding layer) */
        pattern = 4;
    if (exa && !letters &&
        fgm_count(root, label, "sliding_window_pattern", FG_MODEL_MAX_LAYERS, &pattern, err) < 0)
        return FG_ERR_CORRUPT;
    if (t->gemma == 3 &&
        fgm_uint(root, label, "sliding_window_pattern", 0, FG_MODEL_MAX_LAYERS, &pattern,
                 err) < 0)
        return FG_ERR_CORRUPT;
    if (letters && (!letters[0] || strspn(letters, "LG") != strlen(letters)))
        return fgm_key_err(err, label, "sliding_window_pattern", "must be a count or letters "
                           "L (local) and G (global)");
    if (lt && !json_is_null(lt) && (!json_is_array(lt) || json_array_size(lt) != hp->n_layers))
        return fgm_key_err(err, label, "layer_types", "must be a list of one entry per layer");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        int windowed = exa ? hp->sliding_window && (letters ? letters[l % strlen(letters)] == 'L'
                                                            : pattern && (l + 1) % pattern != 0)
                     : gemma ? (l + 1) % pattern != 0
                     : smol ? hp->sliding_window && ((hp->nope_layers[l / 64] >> (l % 64)) & 1)
                     : qmoe ? hp->sliding_window && (l + 1) % 2 && l < from /* (sic) */
                            : hp->sliding_window && l >= from;
        if (lt && !json_is_null(lt)) {
            const char *type = json_string_value(json_array_get(lt, l));
            if (!type || (strcmp(type, "full_attention") && strcmp(type, "sliding_attention")))
                return fgm_key_err(err, label, "layer_types", "entries must be "
                                   "\"full_attention\" or \"sliding_attention\"");
            windowed = !strcmp(type, "sliding_attention");
        }
        if (exa && !hp->sliding_window) /* (no window: every layer full, and rotated) */
            windowed = 0;
        if (windowed && !hp->sliding_window) /* (transformers fails there too) */
            return fgm_key_err(err, label, gemma ? "sliding_window" : "layer_types",
                               gemma ? "null, but a layer is a sliding one"
                                     : "a sliding_attention layer needs use_sliding_window "
                                       "true and a sliding_window");
        if (!windowed)
            hp->full_layers[l / 64] |= 1ull << (l % 64);
        if (exa && !windowed && hp->sliding_window) /* EXAONE 4's global NoPE */
            hp->nope_layers[l / 64] |= 1ull << (l % 64);
    }
    return FG_OK;
}

/* sliding_window: absent 4096 (every config class's default), null none; Qwen's only with
 * use_sliding_window. Mistral windows every layer (its model ignores layer_types). hp's window
 * fields start zeroed (fg_model_config_parse). */
static int window(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    int use = t->windows == WIN_ALL || t->windows == WIN_LAYER_TYPES || t->windows == WIN_GEMMA ||
              t->windows == WIN_OSS || t->windows == WIN_DOTS || t->windows == WIN_EXAONE;
    int rc;
    if ((t->windows == WIN_QWEN || t->windows == WIN_SMOL || t->windows == WIN_USE_ALL ||
         t->windows == WIN_QWEN2_MOE) &&
        (rc = fgm_bool(root, label, "use_sliding_window", 0, &use, err)))
        return rc;
    if (use && !json_object_get(root, "sliding_window"))
        hp->sliding_window = t->window;
    if (use && (rc = fgm_limit(root, label, "sliding_window", 0, UINT32_MAX / 2,
                               &hp->sliding_window, err)) < 0)
        return rc;
    return t->windows >= WIN_LAYER_TYPES ? layer_windows(root, label, t, hp, err) : FG_OK;
}

/* Gemma's own keys (Gemma2Config, Gemma3TextConfig): hidden_activation (gelu_pytorch_tanh by
 * default), query_pre_attn_scalar (256), causal attention only; embeddings times sqrt(hidden)
 * in f32, sandwich norms scaling by 1 + w. Logit soft-capping: Gemma 2's
 * attn_logit_softcapping (default 50) and final_logit_softcapping (default 30), null for none;
 * refused in a Gemma 3 file (its model has none). Gemma (1, GemmaConfig): hidden_act, the
 * embeddings' and norms' scaling, Llama's layer and q scale. */
static int gemma(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    static const char *const acts[] = {"gelu_pytorch_tanh", "gelu"};
    static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping",
                                       "use_bidirectional_attention"};
    float *cap[2] = {&hp->attn_softcap, &hp->final_softcap};
    int act = 0, rc;
    float q = 256.0f;
    /* Gemma (1): hidden_act, whose "gelu" (the released files') GemmaConfig takes for the tanh
     * approximation; Gemma 2 and 3: hidden_activation */
    if ((rc = fgm_enum(root, label, t->gemma == 1 ? "hidden_act" : "hidden_activation", acts, 2,
                       0, &act, err)) < 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(root, caps[i]);
        if (i < 2 && t->gemma == 2) {
            *cap[i] = i ? 30.0f : 50.0f;
            if (v && json_is_null(v))
                *cap[i] = 0;
            else if ((rc = fgm_float(root, label, caps[i], 1e-6, 1e9, 0, cap[i], err)) < 0)
                return rc;
            continue;
        }
        if (v && !json_is_null(v) && !json_is_false(v))
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s: %s is not supported", label,
                              caps[i],
                              i == 2 ? "bidirectional attention (an embedding model)"
                              : t->gemma == 3 ? "logit soft-capping in a Gemma 3 (Gemma 2's)"
                                              : "logit soft-capping in a Gemma (Gemma 2's)");
    }
    hp->embed_scale = (float)sqrt((double)hp->hidden);
    hp->norm_plus_one = 1;
    if (t->gemma == 1) { /* Llama's layer otherwise */
        hp->act = FG_ACT_GELU_TANH;
        return FG_OK;
    }
    if ((rc = fgm_float(root, label, "query_pre_attn_scalar", 1e-6, 1e9, 0, &q, err)) < 0)
        return rc;
    hp->act = act ? FG_ACT_GELU : FG_ACT_GELU_TANH;
    hp->attn_scale = (float)(1.0 / sqrt((double)q));
    hp->sandwich = FG_SANDWICH_BOTH;
    return FG_OK;
}

/* Granite's four multipliers (GraniteConfig: each default 1; attention_multiplier replaces
 * head_dim^-1/2 outright) */
static int granite(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    float e = 1, a = 1, r = 1, l = 1;
    int rc;
    if ((rc = fgm_float(root, label, "embedding_multiplier", 1e-9, 1e9, 0, &e, err)) < 0 ||
        (rc = fgm_float(root, label, "attention_multiplier", 1e-9, 1e9, 0, &a, err)) < 0 ||
        (rc = fgm_float(root, label, "residual_multiplier", 1e-9, 1e9, 0, &r, err)) < 0 ||
        (rc = fgm_float(root, label, "logits_scaling", 1e-9, 1e9, 0, &l, err)) < 0)
        return rc;
    hp->embed_scale = e;
    hp->attn_scale = a;
    hp->residual_scale = r;
    hp->logit_scale = 1.0f / l;
    return FG_OK;
}

/* SmolLM3's no_rope_layers: a list of one 0 (no rotary positions) or 1 per layer, or without it
 * every no_rope_layer_interval-th layer (default 4) without; into hp->nope_layers */
static int no_rope(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    json_t *v = json_object_get(root, "no_rope_layers");
    uint32_t every = 4;
    int rc = fgm_uint(root, label, "no_rope_layer_interval", 0, FG_MODEL_MAX_LAYERS, &every, err);
    if (rc < 0)
        return rc;
    if (v && !json_is_null(v) && (!json_is_array(v) || json_array_size(v) != hp->n_layers))
        return fgm_key_err(err, label, "no_rope_layers", "must be a list of one 0 or 1 per layer");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        json_t *e = v && !json_is_null(v) ? json_array_get(v, l) : NULL;
        if (e && (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 1))
            return fgm_key_err(err, label, "no_rope_layers", "entries must be 0 or 1");
        int rope = e ? (int)json_integer_value(e) : (l + 1) % every != 0;
        if (!rope)
            hp->nope_layers[l / 64] |= 1ull << (l % 64);
    }
    return FG_OK;
}

/* The layers of mlp_only_layers (a list of layer indices) and, with decoder_sparse_step k, all
 * but every k-th are dense (Qwen2MoeDecoderLayer's rule) */
static int dense_layers(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    uint32_t step = 1;
    json_t *v = json_object_get(root, "mlp_only_layers");
    int rc = fgm_uint(root, label, "decoder_sparse_step", 0, FG_MODEL_MAX_LAYERS, &step, err);
    if (rc < 0)
        return rc;
    if (v && !json_is_null(v) && !json_is_array(v))
        return fgm_key_err(err, label, "mlp_only_layers", "must be a list of layer indices");
    for (size_t i = 0; v && i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= (json_int_t)hp->n_layers)
            return fgm_key_err(err, label, "mlp_only_layers", "entries must be layer indices "
                               "below num_hidden_layers");
        uint32_t l = (uint32_t)json_integer_value(e);
        hp->dense_layers[l / 64] |= 1ull << (l % 64);
    }
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if ((l + 1) % step)
            hp->dense_layers[l / 64] |= 1ull << (l % 64);
    return FG_OK;
}

/* gpt-oss's experts (GptOssConfig): biases on the router and the experts, and the clamped
 * SwiGLU: gate clamped above and up on both sides at swiglu_limit (7), gate * sigmoid(
 * swiglu_alpha (1.702) * gate) * (up + 1); the router's softmax over its top k logits (the
 * renormalized top k of the softmax) */
static int oss_experts(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    int rc;
    hp->act = FG_ACT_SWIGLU_OAI;
    hp->act_alpha = 1.702f;
    hp->act_limit = 7.0f;
    hp->moe_bias = 1;
    if ((rc = fgm_float(root, label, "swiglu_alpha", 1e-6, 1e6, 0, &hp->act_alpha, err)) < 0 ||
        (rc = fgm_float(root, label, "swiglu_limit", 1e-6, 1e9, 0, &hp->act_limit, err)) < 0)
        return rc;
    return FG_OK;
}

/* GLM-4 MoE's (Glm4MoeConfig; DeepSeek-V3's router): n_routed_experts (128) chosen by
 * sigmoid scores plus e_score_correction_bias (a tensor), within the topk_group of n_group
 * groups with the greatest sums of their two best (1 of 1), weighted by the plain scores,
 * renormalized (norm_topk_prob, true) and times routed_scaling_factor (1); n_shared_experts
 * (1) ungated shared experts moe_intermediate_size (1408) wide each; the first
 * first_k_dense_replace (1) layers dense; num_nextn_predict_layers (1) multi-token prediction
 * layers after the last, whose tensors fg skips. */
static int glm_experts(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                       fg_err *err)
{
    uint32_t shared = 1, dense = t->dots ? 0 : 1;
    int rc;
    hp->n_experts = t->experts, hp->top_k = t->top_k, hp->moe_ffn = t->moe_ffn;
    hp->n_group = hp->topk_group = 1, hp->routed_scale = 1.0f, hp->norm_topk = !t->dots;
    hp->mtp_layers = t->dots ? 0 : 1;
    /* (Dots1Config has no expert counts of its own: transformers fails without them) */
    if (t->dots && !json_object_get(root, "n_shared_experts"))
        return fgm_key_err(err, label, "n_shared_experts", "missing");
    if ((rc = fgm_uint(root, label, "n_routed_experts", t->dots, FG_MODEL_MAX_EXPERTS,
                       &hp->n_experts, err)) < 0 ||
        (rc = fgm_uint(root, label, "num_experts_per_tok", t->dots, FG_MODEL_MAX_EXPERTS,
                       &hp->top_k, err)) < 0 ||
        (rc = fgm_uint(root, label, "moe_intermediate_size", 0, FG_MODEL_MAX_DIM, &hp->moe_ffn,
                       err)) < 0 ||
        (rc = fgm_count(root, label, "n_shared_experts", 64, &shared, err)) < 0 ||
        (rc = fgm_count(root, label, "first_k_dense_replace", FG_MODEL_MAX_LAYERS, &dense,
                        err)) < 0 ||
        (rc = fgm_uint(root, label, "n_group", 0, FG_MODEL_MAX_EXPERTS, &hp->n_group, err)) < 0 ||
        (rc = fgm_uint(root, label, "topk_group", 0, FG_MODEL_MAX_EXPERTS, &hp->topk_group,
                       err)) < 0 ||
        (rc = fgm_count(root, label, "num_nextn_predict_layers", 64, &hp->mtp_layers,
                        err)) < 0 ||
        (rc = fgm_float(root, label, "routed_scaling_factor", 1e-6, 1e6, 0, &hp->routed_scale,
                        err)) < 0 ||
        (rc = fgm_bool(root, label, "norm_topk_prob", hp->norm_topk, &hp->norm_topk, err)))
        return rc;
    if (hp->n_experts % hp->n_group || hp->n_experts / hp->n_group < 2)
        return fgm_key_err(err, label, "n_group", "must divide n_routed_experts into groups of "
                           "two or more");
    if (hp->topk_group > hp->n_group)
        return fgm_key_err(err, label, "topk_group", "exceeds n_group");
    if (hp->top_k > hp->topk_group * (hp->n_experts / hp->n_group))
        return fgm_key_err(err, label, "num_experts_per_tok", "exceeds the experts of "
                           "topk_group groups");
    hp->shared_ffn = hp->moe_ffn * shared;
    hp->shared_plain = 1;
    hp->router_sigmoid = 1;
    hp->router_corr = 1;
    hp->topk_eps = 1e-20f;
    for (uint32_t l = 0; l < hp->n_layers && l < dense; l++)
        hp->dense_layers[l / 64] |= 1ull << (l % 64);
    return FG_OK;
}

/* A mixture of experts' keys: the experts (num_local_experts, Mixtral's, or num_experts:
 * either spelling, the same value when both), num_experts_per_tok, the expert width (Mixtral:
 * intermediate_size; Qwen: moe_intermediate_size, intermediate_size being the dense layers'),
 * norm_topk_prob (Mixtral always renormalizes), Qwen2-MoE's shared_expert_intermediate_size. */
/* ERNIE 4.5's (Ernie4_5_MoeConfig): moe_num_experts (64) chosen by the softmax plus the
 * router's choice bias (mlp.gate.moe_statics.e_score_correction_bias, [1, experts]), moe_k (6)
 * of them weighted by their probabilities renormalized (divided by their sum, at least
 * moe_norm_min, 1e-12: the sum itself for any real model); moe_num_shared_experts (2) ungated
 * shared experts moe_intermediate_size (1536) wide each; the sparse layers those from
 * moe_layer_start_index (1) to moe_layer_end_index (-1: the last) whose l + 1 is a multiple of
 * moe_layer_interval (1) */
static int ernie_experts(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                         fg_err *err)
{
    static const char *const keys[2][2] = {{"moe_num_experts", "num_experts"},
                                           {"moe_k", "num_experts_per_tok"}};
    uint32_t *dst[2] = {&hp->n_experts, &hp->top_k}, shared = 2, start = 1, every = 1;
    int rc;
    hp->n_experts = t->experts, hp->top_k = t->top_k, hp->moe_ffn = t->moe_ffn;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if ((rc = fgm_uint(root, label, keys[i][j], 0, FG_MODEL_MAX_EXPERTS, dst[i],
                               err)) < 0)
                return rc;
    json_t *end = json_object_get(root, "moe_layer_end_index");
    json_int_t last = json_is_integer(end) ? json_integer_value(end) : -1;
    if ((end && !json_is_null(end) && !json_is_integer(end)) || last < -1)
        return fgm_key_err(err, label, "moe_layer_end_index", "must be a layer index or -1");
    if ((rc = fgm_uint(root, label, "moe_intermediate_size", 0, FG_MODEL_MAX_DIM, &hp->moe_ffn,
                       err)) < 0 ||
        (rc = fgm_count(root, label, "moe_num_shared_experts", 64, &shared, err)) < 0 ||
        (rc = fgm_count(root, label, "moe_layer_start_index", FG_MODEL_MAX_LAYERS, &start,
                        err)) < 0 ||
        (rc = fgm_uint(root, label, "moe_layer_interval", 0, FG_MODEL_MAX_LAYERS, &every,
                       err)) < 0)
        return rc;
    if (hp->top_k > hp->n_experts)
        return fgm_key_err(err, label, "moe_k", "exceeds the experts");
    if (last == -1)
        last = (json_int_t)hp->n_layers - 1;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if ((l + 1) % every || l < start || (json_int_t)l > last)
            hp->dense_layers[l / 64] |= 1ull << (l % 64);
    hp->shared_ffn = hp->moe_ffn * shared;
    hp->shared_plain = 1;
    hp->norm_topk = 1;
    hp->router_corr = 2;
    hp->n_group = hp->topk_group = 1;
    return FG_OK;
}

static int moe(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    static const char *const keys[] = {"num_local_experts", "num_experts"};
    uint32_t v[2] = {0, 0};
    int rc;
    if (t->moe == MOE_GLM)
        return glm_experts(root, label, t, hp, err);
    if (t->moe == MOE_ERNIE)
        return ernie_experts(root, label, t, hp, err);
    if (t->moe == MOE_MINIMAX) /* sigmoid scores, the choice bias, renormalized */
        hp->router_sigmoid = 1, hp->router_corr = 1, hp->n_group = hp->topk_group = 1;
    for (int i = 0; i < 2; i++) {
        json_t *k = json_object_get(root, keys[i]);
        if (k && json_is_integer(k) && json_integer_value(k) == 0 &&
            (t->moe == MOE_QWEN || t->moe == MOE_QWEN_SHARED))
            return FG_OK; /* Qwen: num_experts 0, every layer dense (n_experts stays 0) */
        if ((rc = fgm_uint(root, label, keys[i], 0, FG_MODEL_MAX_EXPERTS, &v[i], err)) < 0)
            return rc;
    }
    if (v[0] && v[1] && v[0] != v[1])
        return fgm_key_err(err, label, "num_experts", "differs from num_local_experts");
    hp->n_experts = v[0] ? v[0] : v[1] ? v[1] : t->experts;
    hp->top_k = t->top_k;
    hp->moe_ffn = t->moe == MOE_MIXTRAL || t->moe == MOE_OLMOE || t->moe == MOE_OSS ||
                  t->moe == MOE_MINIMAX ? hp->ffn : t->moe_ffn;
    hp->shared_ffn = t->moe == MOE_QWEN_SHARED ? t->shared_ffn : 0;
    hp->norm_topk = t->moe == MOE_MIXTRAL || t->moe == MOE_OSS || t->moe == MOE_MINIMAX;
    if ((rc = fgm_uint(root, label, "num_experts_per_tok", 0, FG_MODEL_MAX_EXPERTS, &hp->top_k,
                       err)) < 0)
        return rc;
    if (hp->top_k > hp->n_experts)
        return fgm_key_err(err, label, "num_experts_per_tok", "exceeds the experts");
    if (t->moe == MOE_MIXTRAL || t->moe == MOE_MINIMAX)
        return FG_OK;
    if (t->moe == MOE_OSS)
        return oss_experts(root, label, hp, err);
    if (t->moe == MOE_OLMOE) /* every layer sparse, the experts intermediate_size wide */
        return fgm_bool(root, label, "norm_topk_prob", 0, &hp->norm_topk, err);
    if ((rc = fgm_uint(root, label, "moe_intermediate_size", 0, FG_MODEL_MAX_DIM, &hp->moe_ffn,
                       err)) < 0 ||
        (t->moe == MOE_QWEN_SHARED &&
         (rc = fgm_uint(root, label, "shared_expert_intermediate_size", 0, FG_MODEL_MAX_DIM,
                        &hp->shared_ffn, err)) < 0) ||
        (rc = fgm_bool(root, label, "norm_topk_prob", 0, &hp->norm_topk, err)))
        return rc;
    return dense_layers(root, label, hp, err);
}

static int parse_family(json_t *root, const char *label, fg_hparams *hp, family fam,
                        fg_err *err)
{
    static const char *const acts[] = {"silu"};
    const traits *t = &k_traits[fam];
    int rc, act = 0, attn_bias = t->qkv_bias, mlp_bias = 0;
    if ((rc = sizes(root, label, t, hp, err)) ||
        (t->smol && (rc = no_rope(root, label, hp, err))) ||
        (rc = t->gemma == 3 || t->olmo3 ? gemma_rope(root, label, t, hp, err)
                                        : rope(root, label, t, hp, err)) ||
        (rc = window(root, label, t, hp, err)))
        return rc;
    hp->act = FG_ACT_SILU;
    if (t->gemma && (rc = gemma(root, label, t, hp, err)))
        return rc;
    if (t->granite && (rc = granite(root, label, hp, err)))
        return rc;
    if (!t->gemma && (rc = fgm_enum(root, label, "hidden_act", acts, 1, 0, &act, err)) < 0)
        return rc;
    hp->norm_eps = t->eps;
    if ((rc = fgm_float(root, label, "rms_norm_eps", 0, 1, 0, &hp->norm_eps, err)) < 0 ||
        (rc = fgm_bool(root, label, "tie_word_embeddings", t->gemma || t->smol || t->ernie,
                       &hp->tied_head, err)))
        return rc;
    if (t->attention_bias &&
        (rc = fgm_bool(root, label, "attention_bias", t->attention_bias == 2, &attn_bias, err)))
        return rc;
    if (t->mlp_bias && (rc = fgm_bool(root, label, "mlp_bias", 0, &mlp_bias, err)))
        return rc;
    if (t->qkv_bias_key && (rc = fgm_bool(root, label, "qkv_bias", 1, &attn_bias, err)))
        return rc;
    if (t->moe && (rc = moe(root, label, t, hp, err)))
        return rc;
    hp->attn_sinks = t->oss;
    json_t *clip = json_object_get(root, "clip_qkv"); /* OLMo's; OLMoE's releases have null */
    if (clip && !json_is_null(clip))
        return fgm_key_err(err, label, "clip_qkv", "is not supported (q, k and v clamped): "
                           "only null");
    uint32_t n;
    if ((rc = fgm_tokens(root, label, "bos_token_id", t->bos, &hp->bos_id, 1, &n, err)) ||
        (rc = fgm_tokens(root, label, "eos_token_id", t->eos, hp->eos_ids, FG_MODEL_MAX_EOS,
                         &hp->n_eos, err)) ||
        (rc = fgm_tokens(root, label, "pad_token_id", t->pad, &hp->pad_id, 1, &n, err)))
        return rc;
    hp->eos_id = hp->eos_ids[0];
    hp->norm = FG_NORM_RMS;
    hp->gated = 1;
    hp->pos = FG_POS_ROPE;
    if (!(hp->rope.theta > 0))
        hp->rope.theta = 10000.0f;
    hp->pre_norm = hp->final_norm = 1;
    hp->qkv_bias = attn_bias;
    hp->out_bias = t->attention_bias && attn_bias && !t->glm && !t->seed; /* (GLM: o none) */
    if (t->seed && (rc = fgm_bool(root, label, "attention_out_bias", 0, &hp->out_bias, err)))
        return rc;
    if (t->ernie) { /* use_bias: every Linear layer's (q/k/v/o, gate/up/down) */
        if ((rc = fgm_bool(root, label, "use_bias", 0, &hp->qkv_bias, err)))
            return rc;
        hp->out_bias = hp->qkv_bias;
        mlp_bias = hp->qkv_bias;
        hp->rope_interleaved = 1;
        hp->head_bias = hp->qkv_bias && t->moe; /* (Ernie4_5_MoeForCausalLM's lm_head) */
    }
    hp->qk_norm = t->qk_norm;
    int qkn = 0;
    if (t->glm && (rc = fgm_bool(root, label, "use_qk_norm", 0, &qkn, err)))
        return rc;
    if (qkn)
        hp->qk_norm = FG_QK_NORM_HEAD;
    if (t->olmo2)
        hp->sandwich = FG_SANDWICH_AFTER;
    if (t->glm4) /* (plain norms: no 1 + w, no embedding scale) */
        hp->sandwich = FG_SANDWICH_BOTH, hp->rope_interleaved = 1;
    hp->mlp_bias = mlp_bias;
    return fgm_dtype(root, label, hp, err);
}

static void proj(fg_tensor_spec *o, uint32_t *n, uint32_t l, const char *sub, const char *nm,
                 fg_role w, int bias, uint64_t out, uint64_t in)
{
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%u.%s.%s.weight", l, sub, nm);
    fgm_spec(o, n, name, w, FG_ACCESS_LINEAR, out, in);
    if (bias) {
        snprintf(name, sizeof name, "model.layers.%u.%s.%s.bias", l, sub, nm);
        fgm_spec(o, n, name, (fg_role)(w + 1), FG_ACCESS_SMALL, out, 0);
    }
}

/* An RMSNorm's weight (Gemma's scale by 1 + w: the spec adds 1 to it) */
static void norm_w(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, const char *name,
                   fg_role r, uint64_t h)
{
    fgm_spec(o, n, name, r, FG_ACCESS_SMALL, h, 0);
    o[*n - 1].add = hp->norm_plus_one ? 1.0f : 0.0f;
}

static void norm(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, uint32_t l,
                 const char *nm, fg_role r, uint64_t h)
{
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, nm);
    norm_w(hp, o, n, name, r, h);
}

/* A sparse layer's MLP: the router, the experts' weights stacked by rows (fg-convert stacks a
 * checkpoint's experts.E.<proj> tensors: fg_arch.stacked), Qwen2-MoE's shared expert and its
 * gate */
static void experts(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, uint32_t l)
{
    uint64_t h = hp->hidden, e = hp->n_experts, f = hp->moe_ffn, sf = hp->shared_ffn;
    static const char *const nm[3] = {"gate_proj", "up_proj", "down_proj"};
    static const fg_role wr[3] = {FG_ROLE_EXP_GATE, FG_ROLE_EXP_UP, FG_ROLE_EXP_DOWN};
    static const fg_role br[3] = {FG_ROLE_EXP_B_GATE, FG_ROLE_EXP_B_UP, FG_ROLE_EXP_B_DOWN};
    const uint64_t rows[3] = {f, f, h}, cols[3] = {h, h, f};
    char name[FG_TENSOR_NAME_MAX];
    proj(o, n, l, "mlp", hp->moe_bias ? "router" : "gate", FG_ROLE_ROUTER, 0, e, h);
    if (hp->moe_bias) { /* gpt-oss */
        snprintf(name, sizeof name, "model.layers.%u.mlp.router.bias", l);
        fgm_spec(o, n, name, FG_ROLE_B_ROUTER, FG_ACCESS_SMALL, e, 0);
    }
    if (hp->router_corr) { /* GLM-4 MoE's, MiniMax-M2's; ERNIE 4.5's [1, experts] */
        snprintf(name, sizeof name, "model.layers.%u.mlp.gate.%se_score_correction_bias", l,
                 hp->router_corr == 2 ? "moe_statics." : "");
        fgm_spec(o, n, name, FG_ROLE_ROUTER_CORR, FG_ACCESS_SMALL, hp->router_corr == 2 ? 1 : e,
                 hp->router_corr == 2 ? e : 0);
    }
    for (int i = 0; i < 3; i++) { /* each expert a block of rows (its bias a block too) */
        proj(o, n, l, "mlp.experts", nm[i], wr[i], 0, e * rows[i], cols[i]);
        o[*n - 1].blocks = hp->n_experts;
        if (!hp->moe_bias)
            continue;
        snprintf(name, sizeof name, "model.layers.%u.mlp.experts.%s.bias", l, nm[i]);
        fgm_spec(o, n, name, br[i], FG_ACCESS_SMALL, e * rows[i], 0);
        o[*n - 1].blocks = hp->n_experts;
    }
    const char *sh = hp->shared_plain ? "mlp.shared_experts" : "mlp.shared_expert";
    if (sf) { /* Qwen2-MoE's gated shared expert, or GLM's shared experts */
        proj(o, n, l, sh, "gate_proj", FG_ROLE_W_GATE, hp->mlp_bias, sf, h); /* (ERNIE's) */
        proj(o, n, l, sh, "up_proj", FG_ROLE_W_UP, hp->mlp_bias, sf, h);
        proj(o, n, l, sh, "down_proj", FG_ROLE_W_DOWN, hp->mlp_bias, h, sf);
        if (!hp->shared_plain)
            proj(o, n, l, "mlp", "shared_expert_gate", FG_ROLE_SHARED_GATE, 0, 1, h);
    }
}

static uint32_t unit_tensors(const fg_hparams *hp, fg_unit_kind kind, uint32_t l, fg_tensor_spec *o)
{
    uint32_t n = 0;
    uint64_t h = hp->hidden, q = (uint64_t)hp->n_heads * hp->head_dim;
    uint64_t kv = (uint64_t)hp->n_kv_heads * hp->head_dim, f = hp->ffn;
    switch (kind) {
    case FG_UNIT_EMBED:
        fgm_spec(o, &n, "model.embed_tokens.weight", FG_ROLE_TOK_EMBED, FG_ACCESS_GATHER,
                 hp->vocab_size, h);
        break;
    case FG_UNIT_ATTN:
        if (hp->sandwich != FG_SANDWICH_AFTER)
            norm(hp, o, &n, l, "input_layernorm", FG_ROLE_NORM_W, h);
        proj(o, &n, l, "self_attn", "q_proj", FG_ROLE_WQ, hp->qkv_bias, q, h);
        proj(o, &n, l, "self_attn", "k_proj", FG_ROLE_WK, hp->qkv_bias, kv, h);
        proj(o, &n, l, "self_attn", "v_proj", FG_ROLE_WV, hp->qkv_bias, kv, h);
        proj(o, &n, l, "self_attn", "o_proj", FG_ROLE_WO, hp->out_bias, h, q);
        if (hp->attn_sinks) { /* gpt-oss */
            char name[FG_TENSOR_NAME_MAX];
            snprintf(name, sizeof name, "model.layers.%u.self_attn.sinks", l);
            fgm_spec(o, &n, name, FG_ROLE_SINKS, FG_ACCESS_SMALL, hp->n_heads, 0);
        }
        if (hp->qk_norm) { /* per head, or over the whole projection */
            uint64_t qn = hp->qk_norm == FG_QK_NORM_WHOLE ? q : hp->head_dim;
            uint64_t kn = hp->qk_norm == FG_QK_NORM_WHOLE ? kv : hp->head_dim;
            norm(hp, o, &n, l, "self_attn.q_norm", FG_ROLE_Q_NORM, qn);
            norm(hp, o, &n, l, "self_attn.k_norm", FG_ROLE_K_NORM, kn);
        }
        for (uint32_t i = 0; hp->rope_interleaved && i < n; i++) { /* (ERNIE 4.5) */
            fg_role r = o[i].role; /* q's and k's rows, biases and norm weights, by heads */
            if (r == FG_ROLE_WQ || r == FG_ROLE_BQ || r == FG_ROLE_WK || r == FG_ROLE_BK ||
                r == FG_ROLE_Q_NORM || r == FG_ROLE_K_NORM)
                o[i].perm_head = hp->head_dim, o[i].perm_rot = hp->rope.rot_dim;
        }
        if (hp->sandwich) /* Gemma, OLMo 2: the attention's output norm */
            norm(hp, o, &n, l, "post_attention_layernorm", FG_ROLE_POST_NORM_W, h);
        break;
    case FG_UNIT_MLP:
        if (hp->sandwich != FG_SANDWICH_AFTER) /* (OLMo 2 has no input norm) */
            norm(hp, o, &n, l, hp->sandwich ? "pre_feedforward_layernorm"
                                            : "post_attention_layernorm", FG_ROLE_NORM_W, h);
        if (fg_model_layer_sparse(hp, l)) {
            experts(hp, o, &n, l);
            break;
        }
        proj(o, &n, l, "mlp", "gate_proj", FG_ROLE_W_GATE, hp->mlp_bias, f, h);
        proj(o, &n, l, "mlp", "up_proj", FG_ROLE_W_UP, hp->mlp_bias, f, h);
        proj(o, &n, l, "mlp", "down_proj", FG_ROLE_W_DOWN, hp->mlp_bias, h, f);
        if (hp->sandwich)
            norm(hp, o, &n, l, "post_feedforward_layernorm", FG_ROLE_POST_NORM_W, h);
        break;
    case FG_UNIT_HEAD:
        norm_w(hp, o, &n, "model.norm.weight", FG_ROLE_NORM_W, h);
        fgm_spec(o, &n, "lm_head.weight", FG_ROLE_LM_HEAD, FG_ACCESS_STREAM, hp->vocab_size, h);
        if (hp->tied_head) {
            o[n - 1].optional = 1;
            snprintf(o[n - 1].fallback, sizeof o[n - 1].fallback, "model.embed_tokens.weight");
        }
        if (hp->head_bias) /* (ERNIE 4.5 MoE's, beside a tied weight too) */
            fgm_spec(o, &n, "lm_head.bias", FG_ROLE_B_LM_HEAD, FG_ACCESS_SMALL, hp->vocab_size, 0);
        break;
    }
    return n;
}

/* Names are the *ForCausalLM ones; a base-model checkpoint (LlamaModel) lacks "model.". */
static const char *canonical_name(const char *name, char *buf, size_t cap)
{
    int base = strncmp(name, "model.", 6) && strcmp(name, "lm_head.weight") &&
               (!strncmp(name, "layers.", 7) || !strncmp(name, "embed_tokens.", 13) ||
                !strncmp(name, "norm.", 5));
    int k = snprintf(buf, cap, "%s%s", base ? "model." : "", name);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* A decimal index at d (1 to 8 digits, no leading zero) into *v: the end of it, or NULL. */
static const char *index_at(const char *d, uint64_t *v)
{
    const char *p = d;
    *v = 0;
    while (*p >= '0' && *p <= '9' && p - d < 8)
        *v = *v * 10 + (uint64_t)(*p++ - '0');
    return p == d || (*d == '0' && p - d > 1) ? NULL : p;
}

/* The layer of a canonical "model.layers.N.<post>" name (N < layers), or -1. */
static int64_t layer_of(const fg_hparams *hp, const char *name, const char *post)
{
    static const char pre[] = "model.layers.";
    uint64_t layer;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &layer);
    return !p || strcmp(p, post) || layer >= hp->n_layers ? -1 : (int64_t)layer;
}

/* model.layers.N.self_attn.rotary_emb.inv_freq, N < layers: [rot_dim / 2] (transformers before
 * 4.31 kept inv_freq a persistent buffer; later versions skip it on load, as fg does). */
static uint64_t derived(const fg_hparams *hp, const char *name)
{
    return layer_of(hp, name, ".self_attn.rotary_emb.inv_freq") < 0 ? 0 : hp->rope.rot_dim / 2;
}

/* A fused checkpoint tensor model.layers.N.<post> and the canonical tensors it holds, in row
 * order: model.layers.N.<parts[i]>, laid out as `layout` says (FG_FUSE_*). */
typedef struct fuse_rule {
    const char *post;
    uint32_t n;
    const char *parts[3];
    uint32_t layout;
} fuse_rule;

/* The parts of `name` by the first rule whose <post> it ends in (0: none); sparse: only in a
 * sparse layer. */
static uint32_t fuse_by(const fg_hparams *hp, const char *name, const fuse_rule *rules,
                        size_t n_rules, int sparse, char (*parts)[FG_TENSOR_NAME_MAX],
                        uint32_t *layout)
{
    for (size_t r = 0; r < n_rules; r++) {
        int64_t l = layer_of(hp, name, rules[r].post);
        if (l < 0)
            continue;
        if (sparse && !fg_model_layer_sparse(hp, (uint32_t)l))
            return 0;
        for (uint32_t i = 0; i < rules[r].n; i++)
            snprintf(parts[i], FG_TENSOR_NAME_MAX, "model.layers.%u.%s", (unsigned)l,
                     rules[r].parts[i]);
        if (layout)
            *layout = rules[r].layout;
        return rules[r].n;
    }
    return 0;
}

/* Phi-3's fused projections: self_attn.qkv_proj holds q, k and v (Phi3Attention slices them in
 * that order), mlp.gate_up_proj holds gate and up (Phi3MLP's chunk(2): gate first). */
static uint32_t fused(const fg_hparams *hp, const char *name, char (*parts)[FG_TENSOR_NAME_MAX],
                      uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".self_attn.qkv_proj.weight", 3,
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}, 0},
        {".mlp.gate_up_proj.weight", 2, {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, 0}};
    return fuse_by(hp, name, k_rules, 2, 0, parts, layout);
}

/* An expert's weight, model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (N a sparse layer,
 * E < n_experts): block E of model.layers.N.mlp.experts.<proj>.weight */
static int stacked(const fg_hparams *hp, const char *name, char out[FG_TENSOR_NAME_MAX],
                   uint32_t *block)
{
    static const char *const projs[] = {"gate_proj.weight", "up_proj.weight",
                                        "down_proj.weight"};
    static const char pre[] = "model.layers.", mid[] = ".mlp.experts.";
    uint64_t l, e;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &l);
    if (!p || strncmp(p, mid, sizeof mid - 1) || !(p = index_at(p + sizeof mid - 1, &e)) ||
        *p++ != '.' || l >= hp->n_layers || e >= hp->n_experts || !fg_model_layer_sparse(hp, l))
        return 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(p, projs[i])) {
            snprintf(out, FG_TENSOR_NAME_MAX, "model.layers.%u.mlp.experts.%s", (unsigned)l,
                     projs[i]);
            *block = (uint32_t)e;
            return 1;
        }
    return 0;
}

/* Every expert of a sparse layer in one tensor, [experts, rows, cols], as transformers 5 holds
 * them (and writes them with save_original_format=False) and GraniteMoE ships them:
 * model.layers.N.mlp.experts.gate_up_proj holds each expert's gate then up rows,
 * ...experts.down_proj its down rows (model_check.c take_batched). */
static uint32_t moe_fused(const fg_hparams *hp, const char *name,
                          char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".mlp.experts.gate_up_proj", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"}, 0},
        {".mlp.experts.down_proj", 1, {"mlp.experts.down_proj.weight"}, 0}};
    return fuse_by(hp, name, k_rules, 2, 1, parts, layout);
}

/* gpt-oss's experts, every expert of a layer in one tensor as x . W multiplies them:
 * mlp.experts.gate_up_proj [experts, hidden, 2 x width], each expert's gate and up columns
 * alternating (GptOssExperts: gate_up[..., ::2], gate_up[..., 1::2]), its bias
 * gate_up_proj_bias [experts, 2 x width] alike, down_proj [experts, width, hidden] and
 * down_proj_bias [experts, hidden] (model_check.c take_batched); or, as OpenAI ships them, in
 * MXFP4: gate_up_proj_blocks [experts, 2 x width, hidden / 32, 16] (gate and up rows
 * alternating) with gate_up_proj_scales [experts, 2 x width, hidden / 32], down_proj_blocks
 * [experts, hidden, width / 32, 16] with down_proj_scales */
static uint32_t oss_fused(const fg_hparams *hp, const char *name,
                          char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".mlp.experts.gate_up_proj", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_TRANSPOSED},
        {".mlp.experts.gate_up_proj_bias", 2,
         {"mlp.experts.gate_proj.bias", "mlp.experts.up_proj.bias"}, FG_FUSE_INTERLEAVED},
        {".mlp.experts.down_proj", 1, {"mlp.experts.down_proj.weight"}, FG_FUSE_TRANSPOSED},
        {".mlp.experts.down_proj_bias", 1, {"mlp.experts.down_proj.bias"}, 0},
        /* OpenAI's files: MXFP4, each expert's [rows, cols] as its model multiplies it */
        {".mlp.experts.gate_up_proj_blocks", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_MXFP4},
        {".mlp.experts.gate_up_proj_scales", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_MXFP4_SCALES},
        {".mlp.experts.down_proj_blocks", 1, {"mlp.experts.down_proj.weight"}, FG_FUSE_MXFP4},
        {".mlp.experts.down_proj_scales", 1, {"mlp.experts.down_proj.weight"},
         FG_FUSE_MXFP4_SCALES}};
    return fuse_by(hp, name, k_rules, sizeof k_rules / sizeof k_rules[0], 1, parts, layout);
}

/* A suffix spelling: the first of map's suffixes that ends base's name (canonical_name's,
 * Mixtral's ...) replaced by its own; other names as base gives them. */
typedef struct suffix_rule {
    const char *from, *to;
} suffix_rule;

static const char *map_suffix(const char *(*base)(const char *, char *, size_t),
                              const char *name, const suffix_rule *map, size_t n_map, char *buf,
                              size_t cap)
{
    char tmp[FG_TENSOR_NAME_MAX];
    if (!base(name, tmp, sizeof tmp))
        return NULL;
    size_t n = strlen(tmp);
    const char *to = "";
    for (size_t i = 0; i < n_map; i++) {
        size_t nf = strlen(map[i].from);
        if (n > nf && !strcmp(tmp + n - nf, map[i].from)) {
            tmp[n - nf] = '\0';
            to = map[i].to;
            break;
        }
    }
    int k = snprintf(buf, cap, "%s%s", tmp, to);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* GraniteMoE's spelling: block_sparse_moe.router.layer (the router), input_linear (every
 * expert's gate and up: transformers 5's mlp.experts.gate_up_proj) and output_linear (their
 * down), or transformers 5's own in-memory names under block_sparse_moe */
static const char *granitemoe_name(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".block_sparse_moe.router.layer.weight", ".mlp.gate.weight"},
        {".block_sparse_moe.input_linear.weight", ".mlp.experts.gate_up_proj"},
        {".block_sparse_moe.output_linear.weight", ".mlp.experts.down_proj"},
        /* transformers 5's in-memory names (a state_dict saved with torch.save) */
        {".block_sparse_moe.router.weight", ".mlp.gate.weight"},
        {".block_sparse_moe.experts.gate_up_proj", ".mlp.experts.gate_up_proj"},
        {".block_sparse_moe.experts.down_proj", ".mlp.experts.down_proj"}};
    return map_suffix(canonical_name, name, k_map, sizeof k_map / sizeof k_map[0], buf, cap);
}

/* GLM-4 MoE's multi-token prediction layers, model.layers.N.* for N in [layers, layers +
 * num_nextn_predict_layers): a module transformers does not run either (its
 * _keys_to_ignore_on_load_unexpected); and with n_shared_experts 0, the shared experts of width
 * 0 transformers still writes (empty: 2) */
static int glm_unused(const fg_hparams *hp, const char *name)
{
    static const char pre[] = "model.layers.", sh[] = ".mlp.shared_experts.";
    uint64_t l;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &l);
    if (p && l < hp->n_layers && !hp->shared_ffn && fg_model_layer_sparse(hp, (uint32_t)l) &&
        !strncmp(p, sh, sizeof sh - 1))
        return 2;
    return p && *p == '.' && l >= hp->n_layers && l < (uint64_t)hp->n_layers + hp->mtp_layers;
}

/* Mixtral's spelling: block_sparse_moe for mlp, its experts' w1 (gate), w2 (down), w3 (up) */
static const char *mixtral_name(const char *name, char *buf, size_t cap)
{
    static const struct { const char *from, *to; } k_map[] = {
        {".block_sparse_moe.", ".mlp."}, {".w1.weight", ".gate_proj.weight"},
        {".w2.weight", ".down_proj.weight"}, {".w3.weight", ".up_proj.weight"}};
    char tmp[FG_TENSOR_NAME_MAX * 2];
    if (!canonical_name(name, tmp, sizeof tmp / 2))
        return NULL;
    for (size_t i = 0; i < sizeof k_map / sizeof k_map[0]; i++) {
        char *at = strstr(tmp, k_map[i].from);
        size_t nf = strlen(k_map[i].from), nt = strlen(k_map[i].to);
        if (at && (i == 0 || (strstr(tmp, ".mlp.experts.") && !at[nf]))) {
            memmove(at + nt, at + nf, strlen(at + nf) + 1);
            memcpy(at, k_map[i].to, nt);
        }
    }
    int k = snprintf(buf, cap, "%s", tmp);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* MiniMax-M2's spelling: Mixtral's, and its router's choice bias beside the router
 * (block_sparse_moe.e_score_correction_bias, transformers' mlp.e_score_correction_bias) */
static const char *minimax_name(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".mlp.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"}};
    return map_suffix(mixtral_name, name, k_map, 1, buf, cap);
}

/* ERNIE 4.5 MoE's hub spelling of the router's choice bias: mlp.moe_statics (transformers:
 * mlp.gate.moe_statics) */
static const char *ernie_name(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {{".mlp.moe_statics.e_score_correction_bias",
                                         ".mlp.gate.moe_statics.e_score_correction_bias"}};
    return map_suffix(canonical_name, name, k_map, 1, buf, cap);
}

/* GLM-4's spelling of the sandwich norms, as Gemma's canonical names: post_self_attn_layernorm
 * (the attention's output norm), post_attention_layernorm (the MLP's input norm),
 * post_mlp_layernorm (the MLP's output norm); one suffix each, so the first match is the one */
static const char *glm4_name(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".post_self_attn_layernorm.weight", ".post_attention_layernorm.weight"},
        {".post_attention_layernorm.weight", ".pre_feedforward_layernorm.weight"},
        {".post_mlp_layernorm.weight", ".post_feedforward_layernorm.weight"}};
    return map_suffix(canonical_name, name, k_map, sizeof k_map / sizeof k_map[0], buf, cap);
}

/* A table entry fg_arch_<nm>: its config parser pair (fg_arch's parser has no context argument,
 * so each entry gets its own two-line pair, root_<nm> evaluating `root` over r, l, hp, e), its
 * name hooks and the generic decoder's forward. FAMILY: a family above; WRAPPER: a multimodal
 * checkpoint's text model (below). */
#define ENTRY(nm, noun, root, name_fn, derived_fn, fused_fn, unused_fn, stacked_fn)            \
    static int root_##nm(json_t *r, const char *l, fg_hparams *hp, fg_err *e)                  \
    {                                                                                          \
        return root;                                                                           \
    }                                                                                          \
    static int parse_##nm(const char *j, size_t n, const char *l, fg_hparams *hp, fg_err *e)   \
    {                                                                                          \
        return fgm_parse(j, n, l, root_##nm, hp, e);                                           \
    }                                                                                          \
    const fg_arch fg_arch_##nm = {#nm, noun, parse_##nm, unit_tensors, name_fn,                \
                                  fg_model_embed, fg_model_attn_pre, fg_model_attn_core,       \
                                  fg_model_attn_post, fg_model_mlp, fg_model_head, derived_fn, \
                                  fused_fn, stacked_fn, unused_fn}
#define FAMILY(nm, noun, fam, fused_fn)                                                        \
    ENTRY(nm, noun, parse_family(r, l, hp, fam, e), canonical_name, derived, fused_fn, NULL,    \
          stacked)
#define WRAPPER(nm, noun, i)                                                                   \
    ENTRY(nm, noun, root_wrapped(r, l, &k_wrappers[i], hp, e), wrapped_name, NULL, NULL,       \
          wrapped_unused, NULL)

FAMILY(llama, "a Llama", FAM_LLAMA, NULL);
FAMILY(mistral, "a Mistral", FAM_MISTRAL, NULL);
FAMILY(ministral, "a Ministral", FAM_MINISTRAL, NULL);
FAMILY(qwen2, "a Qwen2", FAM_QWEN2, NULL);
FAMILY(qwen3, "a Qwen3", FAM_QWEN3, NULL);
FAMILY(phi3, "a Phi-3", FAM_PHI3, fused);
FAMILY(gemma3_text, "a Gemma 3", FAM_GEMMA3, NULL);
FAMILY(gemma2, "a Gemma 2", FAM_GEMMA2, NULL);
FAMILY(gemma, "a Gemma", FAM_GEMMA, NULL);
FAMILY(ministral3, "a Ministral 3", FAM_MINISTRAL3, NULL);
FAMILY(granite, "a Granite", FAM_GRANITE, NULL);
FAMILY(smollm3, "a SmolLM3", FAM_SMOLLM3, NULL);
FAMILY(olmo2, "an OLMo 2", FAM_OLMO2, NULL);
FAMILY(olmo3, "an OLMo 3", FAM_OLMO3, NULL);
FAMILY(seed_oss, "a Seed-OSS", FAM_SEED_OSS, NULL);
FAMILY(exaone4, "an EXAONE 4", FAM_EXAONE4, NULL);
FAMILY(ernie4_5, "an ERNIE 4.5", FAM_ERNIE45, NULL);
ENTRY(glm4, "a GLM-4", parse_family(r, l, hp, FAM_GLM4, e), glm4_name, derived, fused, NULL,
      NULL);
ENTRY(ernie4_5_moe, "an ERNIE 4.5 MoE", parse_family(r, l, hp, FAM_ERNIE45_MOE, e), ernie_name,
      derived, moe_fused, glm_unused, stacked);
ENTRY(dots1, "a dots.llm1", parse_family(r, l, hp, FAM_DOTS1, e), canonical_name, derived,
      moe_fused, glm_unused, stacked);
FAMILY(qwen2_moe, "a Qwen2-MoE", FAM_QWEN2_MOE, moe_fused);
FAMILY(qwen3_moe, "a Qwen3-MoE", FAM_QWEN3_MOE, moe_fused);
FAMILY(olmoe, "an OLMoE", FAM_OLMOE, moe_fused);
ENTRY(mixtral, "a Mixtral", parse_family(r, l, hp, FAM_MIXTRAL, e), mixtral_name, derived,
      moe_fused, NULL, stacked);
ENTRY(granitemoe, "a GraniteMoE", parse_family(r, l, hp, FAM_GRANITEMOE, e), granitemoe_name,
      derived, moe_fused, NULL, stacked);
ENTRY(minimax_m2, "a MiniMax-M2", parse_family(r, l, hp, FAM_MINIMAX_M2, e), minimax_name,
      derived, moe_fused, NULL, stacked);
ENTRY(glm4_moe, "a GLM-4 MoE", parse_family(r, l, hp, FAM_GLM4_MOE, e), canonical_name, derived,
      moe_fused, glm_unused, stacked);
ENTRY(gpt_oss, "a gpt-oss", parse_family(r, l, hp, FAM_GPT_OSS, e), canonical_name, derived,
      oss_fused, NULL, NULL);

/* ---- multimodal checkpoints whose text model fg runs: Gemma 3 4B-27B ("gemma3"), Mistral Small
 * 3.x ("mistral3"), Qwen2.5-VL ("qwen2_5_vl") and Qwen3-VL ("qwen3_vl", the dense ones). The
 * text model's config is text_config (Qwen2.5-VL's hub files: the top level itself), read by the
 * fg entry its model_type maps to (absent: the wrapper's first), with the keys it lacks taken
 * from the wrapper config class's text defaults where they differ from that entry's; a rope
 * type "mrope" (the VL models' multimodal positions: for text, every section sees the same
 * position, so the frequencies are the default ones) reads as default. The top level's bos/eos/
 * pad ids and dtype, when present, win; its tie_word_embeddings decides the head (transformers
 * 5 ties there; absent: the class's default, or for the Qwen ones text_config's true, as
 * transformers carries pre-5 files; fg uses an lm_head.weight a checkpoint holds either way,
 * as transformers does). Tensors: the text model's under "model.language_model."
 * (transformers 5), "language_model.model." (Gemma's and Mistral's hub files) or "model." (Qwen's),
 * the head as "lm_head." or "language_model.lm_head."; the vision towers and projectors are
 * accepted unread (fg_arch.unused). Known gap: the config classes' other text defaults are the
 * fg entry's (the released configs name them). */

typedef struct wrapper {
    const char *type;
    const char *text[2][2];  /* text_config model_type -> the fg entry reading it ([0] default) */
    const char *defaults;    /* JSON: the class's text defaults, for the first text type */
    int flat;                /* text keys at the top level when there is no text_config */
    int tie;                 /* tie_word_embeddings when the top level lacks it */
} wrapper;

static const wrapper k_wrappers[] = {
    {"gemma3", {{"gemma3_text", "gemma3_text"}, {NULL, NULL}}, NULL, 0, 1},
    /* (Mistral3Config's text defaults apply only without a text_config, which fg requires: a
     * text_config object is its model_type's config, MistralConfig's defaults and all) */
    {"mistral3", {{"mistral", "mistral"}, {"ministral3", "ministral3"}}, NULL, 0, 1},
    {"qwen2_5_vl", {{"qwen2_5_vl_text", "qwen2"}, {NULL, NULL}},
     "{\"vocab_size\":152064,\"hidden_size\":8192,\"intermediate_size\":29568,"
     "\"num_hidden_layers\":80,\"num_attention_heads\":64,\"num_key_value_heads\":8,"
     "\"max_position_embeddings\":32768,\"rms_norm_eps\":1e-05,\"max_window_layers\":80,"
     "\"rope_theta\":1e6,\"bos_token_id\":151643,\"eos_token_id\":151645}", 1, -1},
    {"qwen3_vl", {{"qwen3_vl_text", "qwen3"}, {NULL, NULL}},
     "{\"vocab_size\":151936,\"hidden_size\":4096,\"intermediate_size\":22016,"
     "\"num_hidden_layers\":32,\"num_attention_heads\":32,\"max_position_embeddings\":128000,"
     "\"rope_theta\":500000.0}", 0, -1},
};

/* rope_type / type "mrope" -> "default" in the rope object of the text config t (in place) */
static void mrope_default(json_t *t)
{
    static const char *const keys[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        json_t *o = json_object_get(t, keys[i]), *ty;
        if (!json_is_object(o))
            continue;
        ty = json_object_get(o, "rope_type") ? json_object_get(o, "rope_type")
                                              : json_object_get(o, "type");
        if (json_is_string(ty) && !strcmp(json_string_value(ty), "mrope")) {
            json_object_del(o, "type");
            json_object_set_new(o, "rope_type", json_string("default"));
        }
    }
}

/* The text config of root as JSON bytes naming the fg entry that reads it (*txt, the caller's
 * to free). */
static int text_config(json_t *root, const char *label, const wrapper *w, char **txt,
                       fg_err *err)
{
    json_t *tc = json_object_get(root, "text_config");
    if (!json_is_object(tc) && !(w->flat && !tc))
        return fgm_key_err(err, label, "text_config", "must be an object (the text model's "
                           "config)");
    json_t *mt = json_object_get(tc, "model_type");
    int which = -1; /* the text type named (absent: the first) */
    for (int i = 0; i < 2 && which < 0; i++)
        if (w->text[i][0] && (mt ? json_is_string(mt) &&
                                       !strcmp(json_string_value(mt), w->text[i][0])
                                 : i == 0))
            which = i;
    if (which < 0) {
        char what[96];
        snprintf(what, sizeof what, "must be \"%s\"%s%s%s", w->text[0][0],
                 w->text[1][0] ? " or \"" : "", w->text[1][0] ? w->text[1][0] : "",
                 w->text[1][0] ? "\"" : "");
        return fgm_key_err(err, label, "text_config.model_type", what);
    }
    json_t *copy = json_deep_copy(tc ? tc : root);
    json_t *dflt = w->defaults && !which ? json_loads(w->defaults, 0, NULL) : NULL;
    *txt = NULL;
    if (copy && (!w->defaults || which || dflt)) {
        if (!tc) { /* a flat file: the top level, less the other parts */
            json_object_del(copy, "vision_config");
            json_object_del(copy, "text_config");
        }
        if (dflt)
            json_object_update_missing(copy, dflt);
        mrope_default(copy);
        if (!json_object_set_new(copy, "model_type", json_string(w->text[which][1])))
            *txt = json_dumps(copy, JSON_COMPACT);
    }
    json_decref(dflt);
    json_decref(copy);
    return *txt ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

static int root_wrapped(json_t *root, const char *label, const wrapper *w, fg_hparams *hp,
                        fg_err *err)
{
    char *txt, sub[160];
    int rc = text_config(root, label, w, &txt, err);
    if (rc)
        return rc;
    json_t *tc = json_object_get(root, "text_config");
    snprintf(sub, sizeof sub, "%.140s%s", label ? label : "config.json", tc ? " text_config" : "");
    rc = fg_model_config_parse(txt, strlen(txt), sub, hp, err);
    free(txt);
    snprintf(hp->arch, sizeof hp->arch, "%s", w->type); /* its tensor names are the wrapper's */
    uint32_t n;
    if (rc == FG_OK)
        rc = fgm_tokens(root, label, "bos_token_id", hp->bos_id, &hp->bos_id, 1, &n, err);
    if (rc == FG_OK && json_object_get(root, "eos_token_id"))
        rc = fgm_tokens(root, label, "eos_token_id", -1, hp->eos_ids, FG_MODEL_MAX_EOS,
                        &hp->n_eos, err);
    if (rc == FG_OK)
        rc = fgm_tokens(root, label, "pad_token_id", hp->pad_id, &hp->pad_id, 1, &n, err);
    int tie = w->tie >= 0 ? w->tie : tc && json_is_true(json_object_get(tc, "tie_word_embeddings"));
    if (rc == FG_OK)
        rc = fgm_bool(root, label, "tie_word_embeddings", tie, &hp->tied_head, err);
    hp->eos_id = hp->eos_ids[0];
    return rc ? rc : fgm_dtype(root, label, hp, err);
}

static const char *wrapped_name(const char *name, char *buf, size_t cap)
{
    static const struct { const char *from, *to; } k_map[] = {
        {"model.language_model.", "model."}, {"language_model.model.", "model."},
        {"language_model.lm_head.", "lm_head."}};
    const char *to = "", *rest = name;
    for (size_t i = 0; i < sizeof k_map / sizeof k_map[0]; i++)
        if (!strncmp(name, k_map[i].from, strlen(k_map[i].from))) {
            to = k_map[i].to;
            rest = name + strlen(k_map[i].from);
            break;
        }
    int k = snprintf(buf, cap, "%s%s", to, rest);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

static int wrapped_unused(const fg_hparams *hp, const char *name)
{
    static const char *const pre[] = {"model.vision_tower.", "vision_tower.",
                                      "model.multi_modal_projector.", "multi_modal_projector.",
                                      "model.visual.", "visual."};
    (void)hp;
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(name, pre[i], strlen(pre[i])))
            return 1;
    return 0;
}

WRAPPER(gemma3, "a Gemma 3", 0);
WRAPPER(mistral3, "a Mistral 3", 1);
WRAPPER(qwen2_5_vl, "a Qwen2.5-VL", 2);
WRAPPER(qwen3_vl, "a Qwen3-VL", 3);
