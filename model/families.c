/* families.c - the Llama-style families and the multimodal checkpoints whose text model fg
 * runs, one row each (families.h): model_type, noun, checkpoint spelling, the config class's
 * defaults and the features it switches on, after transformers' modeling_<family>.py and
 * configuration_<family>.py. The table (model.c: fg_arch_find, fg_arch_names) is OPT's entry
 * then these rows in this order.
 *
 * What each row's transformers class means, feature by feature:
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
 *   deepseek_v2: multi-head latent attention (mla.c: q_lora_rank, null for V2-Lite's q_proj,
 *            kv_lora_rank, qk_nope / qk_rope / v head dims; the rotary dims (even, odd) pairs,
 *            the softmax scale times YaRN's mscale(factor, mscale_all_dim)^2) and DeepseekV2Moe:
 *            the softmax's top k (topk_method greedy, or group_limited_greedy: the topk_group of
 *            n_group groups with the best single scores) times routed_scaling_factor,
 *            n_shared_experts (2) ungated, first_k_dense_replace dense layers, DeepseekV2Config's
 *            defaults (bos 1, eos 2, 64 experts of width 1407; num_experts_per_tok required);
 *   deepseek_v3, kimi_k2: the same attention with rope_interleave (default true) and
 *            DeepseekV3Config's defaults (bos 0, eos 1, 256 experts of width 2048, top 8, 8
 *            groups best 4, routed_scaling_factor 2.5, renormalized, 1 shared expert, 3 dense
 *            layers), GLM-4 MoE's router (topk_method noaux_tc, scoring_func sigmoid: any other
 *            refused), the multi-token prediction layer skipped; Kimi K2's config.json is this
 *            class under its own model_type;
 * The multimodal rows (gemma3, mistral3, qwen2_5_vl, qwen3_vl) read their text_config through
 * the rows above (wrappers.c).
 */
#include <math.h>
#include <string.h>

#include "families.h"

static int parse_row(const char *json, size_t len, const char *label, fg_hparams *hp,
                     fg_err *err);

/* Granite's four multipliers (GraniteConfig: each default 1; attention_multiplier replaces
 * head_dim^-1/2 outright): a hook, as no other family has them */
static int granite_multipliers(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
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

/* The sizes GemmaConfig (gemma-7b's), Gemma2Config and Gemma3TextConfig give a file without
 * them (the hub's Gemma 3 4B-27B text_config names few keys) */
static const uint32_t k_gemma_sizes[6] = {256000, 3072, 28, 24576, 16, 8192};
static const uint32_t k_gemma2_sizes[6] = {256000, 2304, 26, 9216, 8, 8192};
static const uint32_t k_gemma3_sizes[6] = {262208, 2304, 26, 9216, 8, 131072};

/* The rope objects Ministral3Config and GptOssConfig hold by default */
static const char k_ministral3_rope[] =
    "{\"rope_type\":\"yarn\",\"rope_theta\":1000000.0,\"factor\":16.0,"
    "\"original_max_position_embeddings\":16384,\"beta_fast\":32.0,\"beta_slow\":1.0,"
    "\"mscale\":1.0,\"mscale_all_dim\":1.0,\"llama_4_scaling_beta\":0.1}";
static const char k_gpt_oss_rope[] =
    "{\"rope_type\":\"yarn\",\"factor\":32.0,\"original_max_position_embeddings\":4096,"
    "\"beta_fast\":32.0,\"beta_slow\":1.0,\"truncate\":false}";

/* An entry of the generic decoder: its spelling and fg_arch's optional hooks */
#define ARCH(type, noun, names, fused, unused, stacked)                                     \
    {type, noun, parse_row, fgm_decoder_tensors, names, fg_model_embed, fg_model_attn_pre,  \
     fg_model_attn_core, fg_model_attn_post, fg_model_mlp, fg_model_head,                   \
     fgm_derived_inv_freq, fused, stacked, unused}
/* A dense family under the *ForCausalLM names */
#define DENSE(type, noun) ARCH(type, noun, fgm_names_hf, NULL, NULL, fgm_stacked_experts)
/* A mixture of experts: its spelling, each expert's tensors or transformers 5's batched ones */
#define MOE(type, noun, names, unused)                                                      \
    ARCH(type, noun, names, fgm_fused_experts, unused, fgm_stacked_experts)
/* A multimodal checkpoint: its text model under the wrapper's names, the towers unused */
#define WRAPPER(type, noun)                                                                 \
    {type, noun, parse_row, fgm_decoder_tensors, fgm_wrapped_name, fg_model_embed,          \
     fg_model_attn_pre, fg_model_attn_core, fg_model_attn_post, fg_model_mlp, fg_model_head, \
     NULL, NULL, NULL, fgm_wrapped_unused}
#define NO_IDS .bos = -1, .eos = -1, .pad = -1
/* Gemma's layer: 1 + w norms, sqrt(hidden) embeddings, tied, soft-capping keys checked */
#define GEMMA_LAYER .tied = 1, .norm_plus_one = 1, .scaled_embedding = 1, .attention_bias = 1

/* DeepseekV3Config's layer (Kimi K2's files name the same class): MLA with the softmax scale's
 * mscale correction and rope_interleave, the sigmoid router with the choice bias in groups
 * (topk_method noaux_tc), dense first layers, one multi-token prediction layer skipped */
#define DEEPSEEK_V3                                                                          \
    {.bos = 0, .eos = 1, .pad = -1, .eps = 1e-6f, .mla = 1, .mla_mscale = 1,                 \
     .rope_interleave_key = 1, .moe = MOE_GROUPED, .topk_method = "noaux_tc", .experts = 256, \
     .top_k = 8, .moe_ffn = 2048, .n_shared = 1, .first_dense = 3, .n_group = 8,             \
     .topk_group = 4, .routed_scale = 2.5f, .norm_topk = 1, .mtp = 1}

const fgm_family fgm_rows[] = {
    {DENSE("llama", "a Llama"),
     .t = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1, .mlp_bias = 1, .eps = 1e-6f}},
    {DENSE("mistral", "a Mistral"),
     .t = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_ALL, .window = 4096,
           .eps = 1e-6f}},
    {DENSE("ministral", "a Ministral"),
     .t = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_LAYER_TYPES,
           .window = 4096, .eps = 1e-6f}},
    {DENSE("qwen2", "a Qwen2"),
     .t = {.kv_heads = 32, NO_IDS, .qkv_bias = 1, .windows = WIN_FROM, .window = 4096,
           .window_from = 28, .eps = 1e-6f}},
    {DENSE("qwen3", "a Qwen3"),
     .t = {.kv_heads = 32, .head_dim = 128, NO_IDS, .attention_bias = 1,
           .qk_norm = FG_QK_NORM_HEAD, .windows = WIN_FROM, .window = 4096, .window_from = 28,
           .eps = 1e-6f}},
    {ARCH("phi3", "a Phi-3", fgm_names_hf, fgm_fused_qkv_gate_up, NULL, fgm_stacked_experts),
     .t = {.bos = 1, .eos = 32000, .pad = 32000, .windows = WIN_ALL, .eps = 1e-5f,
           .partial_rotary = 1.0f, .longrope = 1}},
    {DENSE("gemma3_text", "a Gemma 3"),
     .t = {.sizes = k_gemma3_sizes, .kv_heads = 4, .head_dim = 256, .bos = 2, .eos = 1, .pad = 0,
           GEMMA_LAYER, .act = ACT_GELU_KEY, .softcap = SOFTCAP_REFUSED, .query_scalar = 1,
           .sandwich_norms = 1, .qk_norm = FG_QK_NORM_HEAD, .windows = WIN_PATTERN,
           .window = 4096, .pattern = 6, .pattern_key = 1, .eps = 1e-6f,
           .local_rope = "rope_local_base_freq"}},
    {WRAPPER("gemma3", "a Gemma 3"), .w = {{{"gemma3_text", "gemma3_text"}}, NULL, 0, 1}},
    /* (Mistral3Config's text defaults apply only without a text_config, which fg requires: a
     * text_config object is its model_type's config, MistralConfig's defaults and all) */
    {WRAPPER("mistral3", "a Mistral 3"),
     .w = {{{"mistral", "mistral"}, {"ministral3", "ministral3"}}, NULL, 0, 1}},
    {DENSE("ministral3", "a Ministral 3"),
     .t = {.kv_heads = 8, .head_dim = 128, .bos = 1, .eos = 2, .pad = 11, .windows = WIN_ALL,
           .eps = 1e-5f, .rope_dflt = k_ministral3_rope, .llama4_scaling = 1}},
    {WRAPPER("qwen2_5_vl", "a Qwen2.5-VL"),
     .w = {{{"qwen2_5_vl_text", "qwen2"}},
           "{\"vocab_size\":152064,\"hidden_size\":8192,\"intermediate_size\":29568,"
           "\"num_hidden_layers\":80,\"num_attention_heads\":64,\"num_key_value_heads\":8,"
           "\"max_position_embeddings\":32768,\"rms_norm_eps\":1e-05,\"max_window_layers\":80,"
           "\"rope_theta\":1e6,\"bos_token_id\":151643,\"eos_token_id\":151645}", 1, -1}},
    {WRAPPER("qwen3_vl", "a Qwen3-VL"),
     .w = {{{"qwen3_vl_text", "qwen3"}},
           "{\"vocab_size\":151936,\"hidden_size\":4096,\"intermediate_size\":22016,"
           "\"num_hidden_layers\":32,\"num_attention_heads\":32,\"max_position_embeddings\":128000,"
           "\"rope_theta\":500000.0}", 0, -1}},
    {DENSE("granite", "a Granite"),
     .t = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1, .mlp_bias = 1, .eps = 1e-6f},
     .hook = granite_multipliers},
    {DENSE("smollm3", "a SmolLM3"),
     .t = {.kv_heads = 4, .bos = 128000, .eos = 128001, .pad = 128004, .attention_bias = 1,
           .mlp_bias = 1, .windows = WIN_NOPE, .eps = 1e-6f, .nope_layers = 1, .tied = 1}},
    {DENSE("olmo2", "an OLMo 2"),
     .t = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1, .qk_norm = FG_QK_NORM_WHOLE,
           .eps = 1e-5f, .post_norms_only = 1}},
    {MOE("mixtral", "a Mixtral", fgm_names_block_sparse_moe, NULL),
     .t = {.kv_heads = 8, .bos = 1, .eos = 2, .pad = -1, .windows = WIN_ALL, .eps = 1e-5f,
           .moe = MOE_TOPK, .experts = 8, .top_k = 2, .norm_topk = 1}},
    {MOE("qwen2_moe", "a Qwen2-MoE", fgm_names_hf, NULL),
     .t = {.kv_heads = 16, NO_IDS, .qkv_bias = 1, .qkv_bias_key = 1, .windows = WIN_ODD_BELOW,
           .window = 4096, .window_from = 28, .eps = 1e-6f, .moe = MOE_SPARSE_STEP_SHARED,
           .experts = 60, .top_k = 4, .moe_ffn = 1408, .shared_ffn = 5632}},
    {MOE("qwen3_moe", "a Qwen3-MoE", fgm_names_hf, NULL),
     .t = {.kv_heads = 4, NO_IDS, .attention_bias = 1, .qk_norm = FG_QK_NORM_HEAD,
           .windows = WIN_USE_ALL, .window = 4096, .eps = 1e-6f, .moe = MOE_SPARSE_STEP,
           .experts = 128, .top_k = 8, .moe_ffn = 768}},
    {MOE("olmoe", "an OLMoE", fgm_names_hf, NULL),
     .t = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1, .qk_norm = FG_QK_NORM_WHOLE,
           .eps = 1e-5f, .moe = MOE_TOPK_NORM_KEY, .experts = 64, .top_k = 8}},
    {DENSE("gemma2", "a Gemma 2"),
     .t = {.sizes = k_gemma2_sizes, .kv_heads = 4, .head_dim = 256, .bos = 2, .eos = 1, .pad = 0,
           GEMMA_LAYER, .act = ACT_GELU_KEY, .softcap = SOFTCAP_READ, .query_scalar = 1,
           .sandwich_norms = 1, .windows = WIN_PATTERN, .window = 4096, .pattern = 2,
           .eps = 1e-6f}},
    {MOE("granitemoe", "a GraniteMoE", fgm_names_io_linear, NULL),
     .t = {.bos = 1, .eos = 2, .pad = -1, .attention_bias = 1, .eps = 1e-6f, .moe = MOE_TOPK,
           .experts = 8, .top_k = 2, .norm_topk = 1},
     .hook = granite_multipliers},
    {ARCH("gpt_oss", "a gpt-oss", fgm_names_hf, fgm_fused_experts_xw, NULL, NULL),
     .t = {.kv_heads = 8, .head_dim = 64, NO_IDS, .attention_bias = 2, .windows = WIN_PATTERN,
           .window = 128, .pattern = 2, .eps = 1e-5f, .theta = 1.5e5f,
           .rope_dflt = k_gpt_oss_rope, .attn_sinks = 1, .mxfp4 = 1, .moe = MOE_TOPK_BIASED,
           .experts = 128, .top_k = 4, .norm_topk = 1}},
    {DENSE("gemma", "a Gemma"),
     .t = {.sizes = k_gemma_sizes, .head_dim = 256, .bos = 2, .eos = 1, .pad = 0, GEMMA_LAYER,
           .act = ACT_GELU_TANH, .softcap = SOFTCAP_REFUSED, .eps = 1e-6f}},
    {MOE("glm4_moe", "a GLM-4 MoE", fgm_names_hf, fgm_unused_mtp),
     .t = {.kv_heads = 8, NO_IDS, .attention_bias = 1, .out_bias = OUT_BIAS_NONE, .eps = 1e-5f,
           .partial_rotary = 0.5f, .qk_norm_key = 1, .moe = MOE_GROUPED, .experts = 128,
           .top_k = 8, .moe_ffn = 1408, .norm_topk = 1, .first_dense = 1, .mtp = 1}},
    {MOE("minimax_m2", "a MiniMax-M2", fgm_names_block_sparse_moe_corr, NULL),
     .t = {.kv_heads = 8, .head_dim = 128, .bos = 200034, .eos = 200020, .pad = -1,
           .qk_norm = FG_QK_NORM_WHOLE, .eps = 1e-6f, .partial_rotary = 1.0f, .theta = 5e6f,
           .moe = MOE_TOPK_SIGMOID, .experts = 256, .top_k = 8, .norm_topk = 1}},
    {DENSE("olmo3", "an OLMo 3"),
     .t = {.bos = -1, .eos = 50279, .pad = 1, .attention_bias = 1, .qk_norm = FG_QK_NORM_WHOLE,
           .windows = WIN_PATTERN, .window = 4096, .pattern = 4, .eps = 1e-5f,
           .post_norms_only = 1, .theta = 5e5f, .local_rope = "rope_theta"}},
    {MOE("dots1", "a dots.llm1", fgm_names_hf, fgm_unused_mtp),
     .t = {.kv_heads = 32, NO_IDS, .attention_bias = 1, .qk_norm = FG_QK_NORM_HEAD,
           .windows = WIN_FROM_ALWAYS, .window = 4096, .window_from = 62, .eps = 1e-6f,
           .moe = MOE_GROUPED, .moe_ffn = 1408, .experts_required = 1}},
    {DENSE("seed_oss", "a Seed-OSS"),
     .t = {.kv_heads = 8, .head_dim = 128, .bos = 0, .eos = 2, .pad = 1, .attention_bias = 2,
           .out_bias = OUT_BIAS_KEY, .mlp_bias = 1, .eps = 1e-6f}},
    {DENSE("exaone4", "an EXAONE 4"),
     .t = {.kv_heads = 32, .bos = 0, .eos = 2, .pad = -1, .qk_norm = FG_QK_NORM_HEAD,
           .windows = WIN_PATTERN_IF_SET, .window = 4096, .pattern = 4, .eps = 1e-5f,
           .post_norms_only = 1, .nope_global = 1}},
    {DENSE("ernie4_5", "an ERNIE 4.5"),
     .t = {.kv_heads = 2, .head_dim = 128, .bos = 1, .eos = 2, .pad = 0, .eps = 1e-5f,
           .theta = 5e5f, .use_bias = 1, .rope_interleaved = 1, .tied = 1}},
    {MOE("ernie4_5_moe", "an ERNIE 4.5 MoE", fgm_names_moe_statics, fgm_unused_mtp),
     .t = {.kv_heads = 4, .bos = 1, .eos = 2, .pad = 0, .eps = 1e-5f, .theta = 5e5f,
           .use_bias = 1, .rope_interleaved = 1, .tied = 1, .moe = MOE_LAYER_RANGE,
           .experts = 64, .top_k = 6, .moe_ffn = 1536, .norm_topk = 1}},
    {ARCH("glm4", "a GLM-4", fgm_names_post_mlp_norm, fgm_fused_qkv_gate_up, NULL, NULL),
     .t = {.kv_heads = 2, .head_dim = 128, .bos = -1, .eos = -1, .pad = 151329,
           .attention_bias = 2, .out_bias = OUT_BIAS_NONE, .eps = 1.5625e-7f,
           .partial_rotary = 0.5f, .qk_norm_key = 1, .sandwich_norms = 1,
           .rope_interleaved = 1}},
    {MOE("deepseek_v2", "a DeepSeek-V2", fgm_names_hf, fgm_unused_mtp),
     .t = {.bos = 1, .eos = 2, .pad = -1, .eps = 1e-6f, .mla = 1, .mla_mscale = 1,
           .rope_interleaved = 1,
           .moe = MOE_GROUPED_SOFTMAX, .experts = 64, .moe_ffn = 1407, .n_shared = 2,
           .experts_required = 1}},
    {MOE("deepseek_v3", "a DeepSeek-V3", fgm_names_hf, fgm_unused_mtp), .t = DEEPSEEK_V3},
    {MOE("kimi_k2", "a Kimi K2", fgm_names_hf, fgm_unused_mtp), .t = DEEPSEEK_V3},
};
#undef NO_IDS
#undef DEEPSEEK_V3
#undef GEMMA_LAYER
const size_t fgm_n_rows = sizeof fgm_rows / sizeof fgm_rows[0];

const fgm_family *fgm_row_find(const char *model_type)
{
    for (size_t i = 0; model_type && i < fgm_n_rows; i++)
        if (!strcmp(fgm_rows[i].arch.name, model_type))
            return &fgm_rows[i];
    return NULL;
}

/* A row's config: its model_type names the row (fg_model_config_parse read it first) */
static int root_row(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    const fgm_family *f = fgm_row_find(json_string_value(json_object_get(root, "model_type")));
    if (!f)
        return fgm_key_err(err, label, "model_type", "names no family row");
    return f->w.text[0][0] ? fgm_wrapped_parse(root, label, f, hp, err)
                           : fgm_family_parse(root, label, f, hp, err);
}

static int parse_row(const char *json, size_t len, const char *label, fg_hparams *hp,
                     fg_err *err)
{
    return fgm_parse(json, len, label, root_row, hp, err);
}
