/* test_infer_layouts.c - every fixture checkpoint layout against transformers: each row of
 * the table below is converted into a store (fg_convert_import), opened by the engine, and its
 * logits for the fixture batch (left padding included) are within 1e-3 of what transformers
 * computed (tests/fixtures/make_opt_fixtures.py, make_llama_fixtures.py), with the same argmax
 * everywhere, the same greedy continuation and (Llama fixtures, which record their prompt text)
 * the same prompt ids from the stored tokenizer. OPT's layouts (safetensors, sharded, .bin,
 * .npy, BF16 .bin, 350m-style), then one row per Llama-family family x checkpoint variant
 * (hub-style config, transformers 5's, multimodal wrappers, raw expert layouts). F16 weights are
 * exact (the fixtures are f16-representable), so the logits differ by f32 accumulation order
 * only (measured: about 3e-6). And ignore_eos against an EOS moved into the reference's output.
 */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infer_common.h"

/* A layout against its reference: logits within 1e-3, argmax and greedy tokens identical, and
 * (Llama fixtures, which record their prompt text) the prompt ids of the stored tokenizer. */
static void layout_case(const infer_case *c)
{
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(c->layout, 0);
    if (r.prompt_text[0])
        check_prompt_ids(store, &r);
    result res = check_logits(store, &r, defaults());
    ck_assert_msg(res.max_diff < 1e-3, "%s: %s: max |logit diff| %g", c->name, c->layout,
                  res.max_diff);
    ck_assert_msg(res.agree == 1.0, "%s: %s: argmax agreement %g", c->name, c->layout, res.agree);
    check_greedy(store, &r, defaults());
    free(r.logits);
}

/* {case, layout, reference} */
static const infer_case layouts[] = {
    {"layout_safetensors", "opt-tiny-safetensors", "opt-tiny"},
    {"layout_sharded", "opt-tiny-sharded", "opt-tiny"},
    {"layout_bin", "opt-tiny-bin", "opt-tiny"},
    {"layout_npy", "opt-tiny-npy", "opt-tiny"},
    {"layout_bf16_bin", "opt-tiny-bf16-bin", "opt-tiny-bf16"},
    {"layout_350m_style", "opt-350m-style-safetensors", "opt-350m-style"},
    /* ---- the Llama family (tests/fixtures/llama, made by make_llama_fixtures.py) ---- */
    {"llama2_bf16", "llama2-tiny-bf16", "llama2-tiny"},
    {"llama2_f16_sharded", "llama2-tiny-f16-sharded", "llama2-tiny"},
    {"llama2_f32", "llama2-tiny-f32", "llama2-tiny"},
    /* pytorch_model.bin with rotary_emb.inv_freq buffers, as Llama 2's hub checkpoints */
    {"llama2_bin_inv_freq", "llama2-tiny-f16-bin", "llama2-tiny"},
    {"llama3_tied_gqa_scaled", "llama3-tiny-bf16", "llama3-tiny"},
    {"llama3_transformers5_config", "llama3-tiny-hf5", "llama3-tiny"},
    {"llama_linear_mqa", "llama-linear-tiny-f16", "llama-linear-tiny"},
    {"mistral_sliding_window", "mistral-tiny-bf16", "mistral-tiny"},
    {"qwen2_biases_tied", "qwen2-tiny-bf16", "qwen2-tiny"},
    /* Qwen3: per-head q/k RMSNorms, heads x head_dim != hidden; hub-style and transformers 5's
     * own config.json (rope_parameters, layer_types) */
    {"qwen3_qk_norm", "qwen3-tiny-bf16", "qwen3-tiny"},
    {"qwen3_transformers5_config", "qwen3-tiny-hf5", "qwen3-tiny"},
    /* YaRN (factor 4 over 128 original positions): ramped frequencies, q.k scaled by mscale^2 */
    {"qwen3_yarn", "qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny"},
    /* Qwen's per-layer windows: layer 0 attends everything, layer 1 the last 5 tokens (from
     * max_window_layers, and from transformers 5's layer_types) */
    {"qwen2_layer_windows", "qwen2-window-tiny-bf16", "qwen2-window-tiny"},
    {"qwen2_layer_types", "qwen2-window-tiny-hf5", "qwen2-window-tiny"},
    /* Ministral: Mistral's layer with layer_types (a window of 5 on layer 0 only) */
    {"ministral_layer_types", "ministral-tiny-bf16", "ministral-tiny"},
    /* Phi-3: fused qkv_proj / gate_up_proj stored apart by fg-convert, a window on every layer
     * (hub-style, and as transformers 5 saves it); LongRoPE with partial rotary (0.75) past the
     * original positions (long_factor) and within them (short_factor), the attention factor on the
     * rotated dims only */
    {"phi3_fused_window", "phi3-tiny-bf16", "phi3-tiny"},
    {"phi3_transformers5_config", "phi3-tiny-hf5", "phi3-tiny"},
    {"phi3_longrope_long", "phi3-longrope-tiny-bf16", "phi3-longrope-tiny"},
    {"phi3_longrope_short", "phi3-longrope-short-tiny-bf16", "phi3-longrope-short-tiny"},
    /* Gemma 3 (text): sandwich norms scaling by 1 + w, sqrt(hidden) embeddings, q/k norms,
     * query_pre_attn_scalar, a window with the local rotary base on layer 0 and the global one
     * (linear scaling) on layer 1; hub-style and as transformers 5 saves it (rope_parameters per
     * layer type) */
    {"gemma3_sandwich_local_rope", "gemma3-tiny-bf16", "gemma3-tiny"},
    {"gemma3_transformers5_config", "gemma3-tiny-hf5", "gemma3-tiny"},
    /* Gemma 3 4B-27B's checkpoint layout (Gemma3ForConditionalGeneration): the text model read from
     * beside a vision tower and projector, as transformers 5 saves it and with the hub's names and
     * config keys; the same logits */
    {"gemma3_multimodal_transformers5", "gemma3-mm-tiny-hf5", "gemma3-tiny"},
    {"gemma3_multimodal_hub", "gemma3-mm-tiny-hub", "gemma3-tiny"},
    /* Mistral Small 3.x's (Mistral3ForConditionalGeneration, a Pixtral tower): mistral-tiny's text
     * model, untied */
    {"mistral3_multimodal_transformers5", "mistral3-mm-tiny-hf5", "mistral-tiny"},
    {"mistral3_multimodal_hub", "mistral3-mm-tiny-hub", "mistral-tiny"},
    /* Qwen2.5-VL's (its hub file flat: the text keys at the top level, rope_scaling mrope) and
     * Qwen3-VL's: qwen2-tiny's and qwen3-tiny's text models; for text, every mrope section sees one
     * position, so the frequencies are the default ones */
    {"qwen2_5_vl_transformers5", "qwen2.5-vl-tiny-hf5", "qwen2-tiny"},
    {"qwen2_5_vl_flat_hub", "qwen2.5-vl-tiny-hub", "qwen2-tiny"},
    {"qwen3_vl_transformers5", "qwen3-vl-tiny-hf5", "qwen3-tiny"},
    /* Ministral 3: YaRN and Llama 4's q scaling by position past original_max_position_embeddings
     * (8 here: the prompts and generation cross several such spans) */
    {"ministral3_llama4_scaling", "ministral3-tiny-bf16", "ministral3-tiny"},
    {"ministral3_transformers5_config", "ministral3-tiny-hf5", "ministral3-tiny"},
    /* Granite 3.x: embedding, attention and residual multipliers, logits / logits_scaling */
    {"granite_multipliers", "granite-tiny-bf16", "granite-tiny"},
    {"granite_transformers5_config", "granite-tiny-hf5", "granite-tiny"},
    /* OLMo 2: norms after the blocks only, q/k norms over the whole projections */
    {"olmo2_post_norms", "olmo2-tiny-bf16", "olmo2-tiny"},
    {"olmo2_transformers5_config", "olmo2-tiny-hf5", "olmo2-tiny"},
    /* Mixtral: a mixture of 4 experts, top 2 renormalized; the hub's block_sparse_moe names, and
     * transformers 5's own save */
    {"mixtral_experts", "mixtral-tiny-bf16", "mixtral-tiny"},
    {"mixtral_transformers5", "mixtral-tiny-hf5", "mixtral-tiny"},
    /* Qwen3-MoE: 8 experts, top 3 renormalized, a dense layer (mlp_only_layers) */
    {"qwen3_moe_experts", "qwen3-moe-tiny-bf16", "qwen3-moe-tiny"},
    {"qwen3_moe_transformers5", "qwen3-moe-tiny-hf5", "qwen3-moe-tiny"},
    /* Qwen2-MoE: 6 experts, top 2 as the softmax gives them, a gated shared expert */
    {"qwen2_moe_shared_expert", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny"},
    {"qwen2_moe_transformers5", "qwen2-moe-tiny-hf5", "qwen2-moe-tiny"},
    /* GraniteMoE: 4 experts, top 2, every expert of a layer in one checkpoint tensor
     * (block_sparse_moe.input_linear / output_linear), Granite's multipliers */
    {"granitemoe_experts", "granitemoe-tiny-bf16", "granitemoe-tiny"},
    {"granitemoe_transformers5", "granitemoe-tiny-hf5", "granitemoe-tiny"},
    /* Mixtral as transformers 5 holds it in memory (save_original_format=False): mlp.experts.
     * gate_up_proj [4, 64, 64] and down_proj [4, 64, 32] */
    {"mixtral_transformers5_raw", "mixtral-tiny-hf5-raw", "mixtral-tiny"},
    /* OLMoE: 8 experts on every layer, top 3 as the softmax gives them; OLMo 2's whole-projection
     * q/k norms inside Llama's pre-norm layer */
    {"olmoe_experts", "olmoe-tiny-bf16", "olmoe-tiny"},
    {"olmoe_transformers5", "olmoe-tiny-hf5", "olmoe-tiny"},
    /* SmolLM3: no rotary positions on layer 1 (no_rope_layers) */
    {"smollm3_nope_layers", "smollm3-tiny-bf16", "smollm3-tiny"},
    {"smollm3_transformers5_config", "smollm3-tiny-hf5", "smollm3-tiny"},
    /* Gemma 2: soft-capped attention scores (cap 2) and logits (cap 6), every other layer
     * windowed by Gemma2Config's default layer_types (hub-style: no layer_types key) */
    /* gpt-oss: attention sinks, every other layer sliding, YaRN without truncation; experts with
     * biases and the clamped SwiGLU, stored x . W with gate and up columns alternating */
    {"gpt_oss_sinks_experts", "gpt-oss-tiny-bf16", "gpt-oss-tiny"},
    {"gpt_oss_transformers5", "gpt-oss-tiny-hf5", "gpt-oss-tiny"},
    /* as OpenAI ships it: the experts in MXFP4 (blocks and scales), read as the BF16 values they
     * hold; transformers' logits from its own dequantization */
    {"gpt_oss_mxfp4", "gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny"},
    /* Gemma (1): Llama's layer, RMSNorms by 1 + w, sqrt(hidden) embeddings, the tanh GELU from
     * the released files' hidden_act "gelu", MQA, heads x head_dim != hidden */
    {"gemma_layers", "gemma-tiny-bf16", "gemma-tiny"},
    {"gemma_transformers5", "gemma-tiny-hf5", "gemma-tiny"},
    /* GLM-4 MoE: a dense first layer, sigmoid routing with the choice bias within 2 of 4 groups,
     * routed_scaling_factor, ungated shared experts, partial rotary, per-head q/k norms; its
     * multi-token prediction layer (hub-style) skipped */
    {"glm4_moe_routing", "glm4-moe-tiny-bf16", "glm4-moe-tiny"},
    {"glm4_moe_transformers5", "glm4-moe-tiny-hf5", "glm4-moe-tiny"},
    /* MiniMax-M2: whole-projection q/k norms, half of each head rotated
     * (rotary_dim), sigmoid routing with the choice bias; the hub's Mixtral names, transformers 5's
     * and its in-memory layout */
    {"minimax_m2_routing", "minimax-m2-tiny-bf16", "minimax-m2-tiny"},
    {"minimax_m2_transformers5", "minimax-m2-tiny-hf5", "minimax-m2-tiny"},
    {"minimax_m2_raw", "minimax-m2-tiny-hf5-raw", "minimax-m2-tiny"},
    /* OLMo 3: 3 of 4 layers sliding with plain rotary positions, the full one with YaRN */
    {"olmo3_layers", "olmo3-tiny-bf16", "olmo3-tiny"},
    {"olmo3_transformers5", "olmo3-tiny-hf5", "olmo3-tiny"},
    /* dots.llm1: Qwen3's attention with a window from max_window_layers on, GLM's router in 2
     * groups, a shared expert, a dense layer 0 */
    {"dots1_routing", "dots1-tiny-bf16", "dots1-tiny"},
    {"dots1_transformers5", "dots1-tiny-hf5", "dots1-tiny"},
    /* Seed-OSS: biases on q/k/v and not on o, heads x head_dim != hidden */
    {"seed_oss_biases", "seed-oss-tiny-bf16", "seed-oss-tiny"},
    {"seed_oss_transformers5", "seed-oss-tiny-hf5", "seed-oss-tiny"},
    /* EXAONE 4: norms after the blocks, per-head q/k norms, 3 of 4 layers sliding, the global one
     * without rotary positions */
    {"exaone4_layers", "exaone4-tiny-bf16", "exaone4-tiny"},
    {"exaone4_transformers5", "exaone4-tiny-hf5", "exaone4-tiny"},
    /* ERNIE 4.5: rotary positions on (even, odd) pairs, its q/k rows (and biases) reordered at
     * conversion into rotate-half's layout; biases on every Linear layer */
    {"ernie4_5_pairs", "ernie4_5-tiny-bf16", "ernie4_5-tiny"},
    {"ernie4_5_transformers5", "ernie4_5-tiny-hf5", "ernie4_5-tiny"},
    /* ERNIE 4.5 MoE: its attention with the softmax router's choice bias ([1, experts]), a shared
     * expert and the LM head's bias (use_bias) */
    {"ernie4_5_moe_routing", "ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny"},
    {"ernie4_5_moe_transformers5", "ernie4_5-moe-tiny-hf5", "ernie4_5-moe-tiny"},
    /* GLM-4: half of each head rotated on (even, odd) pairs, sandwich norms under GLM's names,
     * the MLP's gate and up fused */
    {"glm4_dense", "glm4-tiny-bf16", "glm4-tiny"},
    {"glm4_transformers5", "glm4-tiny-hf5", "glm4-tiny"},
    {"gemma2_softcap", "gemma2-tiny-bf16", "gemma2-tiny"},
    {"gemma2_transformers5", "gemma2-tiny-hf5", "gemma2-tiny"},
    /* multi-head latent attention (tests/fixtures/make_deepseek_fixtures.py): the cache holds the
     * latent and the rotary key, the attention absorbed over it. V2-Lite: no q_lora, the
     * softmax's greedy top k; V2: q_lora, group_limited_greedy; V3: the sigmoid router in
     * groups, YaRN with the softmax scale's mscale, its MTP layer skipped; Kimi K2's config */
    {"deepseek_v2_lite_mla", "deepseek-v2-lite-tiny-bf16", "deepseek-v2-lite-tiny"},
    {"deepseek_v2_mla", "deepseek-v2-tiny-bf16", "deepseek-v2-tiny"},
    {"deepseek_v3_mla", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny"},
    {"kimi_k2_mla", "kimi-k2-tiny-bf16", "kimi-k2-tiny"},
};

START_TEST(layout) { layout_case(infer_row(layouts, _i)); }
END_TEST

/* Copy src's text file to dst with the first `from` replaced by `to`. */
static void copy_edit(const char *src, const char *dst, const char *from, const char *to)
{
    FILE *f = fopen(src, "rb");
    ck_assert_msg(f != NULL, "%s", src);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *at = strstr(buf, from);
    ck_assert_msg(at != NULL, "%s: no %s", src, from);
    f = fopen(dst, "wb");
    ck_assert(f != NULL);
    fprintf(f, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    ck_assert_int_eq(fclose(f), 0);
}

/* issue 38 (8): ignore_eos. The opt-tiny checkpoint with its EOS id made the third token of
 * transformers' greedy output: without ignore_eos generation stops there (finish EOS, 3
 * tokens); with it the whole reference comes out, the EOS a token like any other. */
START_TEST(ignore_eos_generates_past_eos)
{
    ref r;
    load_ref("opt-tiny", &r);
    char dir[4096], src[4200], dst[4200], to[64], tok[4096];
    snprintf(dir, sizeof dir, "%s", tu_path("eos-ckpt"));
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    const char *fix = FG_FIXTURE_DIR "/opt/opt-tiny-safetensors";
    snprintf(to, sizeof to, "\"eos_token_id\": %d", r.greedy[2]);
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "generation_config.json" : "config.json";
        snprintf(src, sizeof src, "%s/%s", fix, name);
        snprintf(dst, sizeof dst, "%s/%s", dir, name);
        copy_edit(src, dst, "\"eos_token_id\": 2", to);
    }
    snprintf(src, sizeof src, "%s/model.safetensors", fix);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    ck_assert_int_eq(symlink(src, dst), 0);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts co = {0, 64, -1, tok, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    const char *store = tu_path("eos-store");
    ck_assert_msg(fg_convert_import(dir, store, &co, &rep, &err) == 0, "%s", err.msg);
    fg_engine_opts o = defaults();
    o.max_ctx = 64;
    eng x;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_engine_hparams(x.e)->eos_id, r.greedy[2]);
    int32_t out[64];
    for (int ignore = 0; ignore < 2; ignore++) {
        fg_gen_seq s = {r.prompt, r.n_prompt, r.n_greedy, {0, 0, 1, 0}, 0, out, 0, 0, ignore};
        fg_gen_stats st;
        ck_assert_msg(fg_engine_generate(x.e, &s, 1, NULL, &st, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(s.n_out, ignore ? r.n_greedy : 3);
        ck_assert_int_eq(s.finish, ignore ? FG_FINISH_LENGTH : FG_FINISH_EOS);
        for (uint32_t i = 0; i < s.n_out; i++)
            ck_assert_msg(out[i] == r.greedy[i], "ignore_eos %d: token %u: %d vs %d", ignore, i,
                          out[i], r.greedy[i]);
    }
    eng_close(&x);
    free(r.logits);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("infer_layouts");
    TCase *tc = infer_tcase("layouts", 120);
    tcase_add_loop_test(tc, layout, 0, INFER_ROWS_ONLY(layouts));
    tcase_add_test(tc, ignore_eos_generates_past_eos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
