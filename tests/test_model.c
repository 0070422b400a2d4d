/* test_model.c - model/'s table: config.json parsing (strict, errors name the key), the tensor
 * sets a config implies, canonical names, and checkpoints checked against them (convert/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "fg_bytes.h"
#include "convert_int.h"
#include "model.h"
#include "testutil.h"

static const char *fx(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", FG_CKPT_FIXTURES, name);
    return buf;
}

static fg_ckpt *open_ok(const char *name)
{
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx(name), &ck, &err) == FG_OK, "%s: %s", name, err.msg);
    return ck;
}

static void load_cfg(const char *name, fg_hparams *c)
{
    char p[1100];
    fg_err err;
    snprintf(p, sizeof p, "%s/config.json", fx(name));
    ck_assert_msg(fg_model_config_load(p, c, &err) == FG_OK, "%s", err.msg);
}

static void check_opt(const char *name, int want, const char *needle)
{
    fg_hparams c;
    load_cfg(name, &c);
    fg_ckpt *ck = open_ok(name);
    fgc_source *from = calloc((size_t)fg_model_n_units(&c) * FG_UNIT_MAX_TENSORS, sizeof *from);
    fg_err err;
    int rc = fg_convert_check_ckpt(&c, ck, from, NULL, &err);
    ck_assert_msg(rc == want, "%s: %d %s", name, rc, err.msg);
    if (needle)
        ck_assert_msg(strstr(err.msg, needle) != NULL, "%s: '%s' lacks '%s'", name, err.msg, needle);
    if (rc == FG_OK) { /* each spec comes from the tensor of its canonical name, or is absent */
        fg_tensor_spec *spec;
        uint32_t n, used = 0;
        ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
        for (uint32_t s = 0; s < n; s++) {
            char buf[128];
            if (from[s].index == FGC_NONE) {
                ck_assert_msg(spec[s].optional, "%s missing", spec[s].name);
                continue;
            }
            used++;
            ck_assert_uint_lt(from[s].index, fg_ckpt_count(ck));
            ck_assert_uint_eq(from[s].row0, 0);
            ck_assert_str_eq(fg_arch_find("opt")->canonical_name(
                                 fg_ckpt_tensor_at(ck, from[s].index)->name, buf, sizeof buf),
                             spec[s].name);
        }
        ck_assert_uint_eq(used, fg_ckpt_count(ck));
        free(spec);
    }
    free(from);
    fg_ckpt_close(ck);
}

START_TEST(opt_configs_and_tensor_sets)
{
    fg_hparams c;
    load_cfg("opt_tiny", &c);
    ck_assert_uint_eq(c.vocab_size, 16);
    ck_assert_uint_eq(c.hidden, 8);
    ck_assert_uint_eq(c.embed_dim, 8);
    ck_assert_int_eq(c.pre_norm, 1);
    ck_assert_int_eq(c.eos_id, 2);
    ck_assert_int_eq(c.pad_id, 1);
    ck_assert_str_eq(c.dtype, "float32");
    fg_tensor_spec *spec;
    uint32_t n;
    fg_err err;
    ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
    ck_assert_uint_eq(n, 2 + 2 + 2 * 16 + 1);
    ck_assert_str_eq(spec[1].name, "model.decoder.embed_positions.weight");
    ck_assert_uint_eq(spec[1].dims[0], 8 + 2);
    ck_assert_int_eq(spec[n - 1].optional, 1);
    free(spec);
    load_cfg("opt_tiny_350m", &c);
    ck_assert_uint_eq(c.embed_dim, 4);
    ck_assert_int_eq(c.pre_norm, 0);
    ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
    ck_assert_uint_eq(n, 2 + 2 + 2 * 16 + 1); /* project_in/out, no final layer norm */
    uint32_t po = 0; /* project_out [proj, hidden] */
    while (po < n && strcmp(spec[po].name, "model.decoder.project_out.weight"))
        po++;
    ck_assert_uint_lt(po, n);
    ck_assert_uint_eq(spec[po].dims[0], 4);
    ck_assert_uint_eq(spec[po].dims[1], 8);
    free(spec);

    check_opt("opt_tiny", FG_OK, NULL);
    check_opt("opt_tiny_np", FG_OK, NULL);
    check_opt("opt_tiny_350m", FG_OK, NULL);
    check_opt("opt_tiny_350m_np", FG_OK, NULL);
    check_opt("opt_tiny_badshape", FG_ERR_SIZE_MISMATCH,
              "tensor model.decoder.layers.1.fc1.weight has shape [16, 7], config.json implies "
              "[16, 8]");
    check_opt("opt_tiny_extra", FG_ERR_BAD_NAME,
              "tensor model.decoder.project_in.weight is not an OPT tensor for this config.json");
    check_opt("opt_tiny_missing", FG_ERR_NOT_FOUND,
              "tensor model.decoder.layers.0.self_attn.k_proj.bias (required by config.json) is "
              "missing");
}
END_TEST

static void cfg_fail(const char *json, int code, const char *needle)
{
    fg_hparams c;
    fg_err err;
    int rc = fg_model_config_parse(json, strlen(json), "x/config.json", &c, &err);
    ck_assert_msg(rc == code, "%s: %d %s", json, rc, err.msg);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

START_TEST(opt_config_errors)
{
#define BASE "\"model_type\":\"opt\",\"vocab_size\":16,\"num_hidden_layers\":2,\"ffn_dim\":16," \
             "\"num_attention_heads\":2,\"max_position_embeddings\":8"
    fg_hparams c;
    fg_err err;
    const char *ok = "{" BASE ",\"hidden_size\":8}";
    ck_assert_int_eq(fg_model_config_parse(ok, strlen(ok), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(c.embed_dim, 8);
    ck_assert_int_eq(c.qkv_bias, 1);
    ck_assert_int_eq(c.tied_head, 1);
    cfg_fail("{" BASE "}", FG_ERR_CORRUPT, "x/config.json: key hidden_size: missing");
    cfg_fail("{" BASE ",\"hidden_size\":\"8\"}", FG_ERR_CORRUPT, "key hidden_size: must be an integer");
    cfg_fail("{" BASE ",\"hidden_size\":9}", FG_ERR_CORRUPT, "key num_attention_heads: does not divide");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"activation_function\":\"silu\"}", FG_ERR_UNSUPPORTED,
             "key activation_function: is \"silu\"; fg supports \"relu\", \"gelu\"");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"enable_bias\":1}", FG_ERR_CORRUPT,
             "key enable_bias: must be true or false");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"layer_norm_elementwise_affine\":false}",
             FG_ERR_UNSUPPORTED, "key layer_norm_elementwise_affine: false");
    cfg_fail("{\"model_type\":\"gpt2\"}", FG_ERR_UNSUPPORTED, "key model_type");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"hidden_size\":8}", FG_ERR_CORRUPT, "invalid JSON");
    cfg_fail("[1]", FG_ERR_CORRUPT, "not a JSON object");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"torch_dtype\":\"int8\"}", FG_ERR_CORRUPT, "torch_dtype");
#undef BASE
}
END_TEST

START_TEST(canonical_names)
{
    char b[96];
    ck_assert_str_eq(fg_arch_find("opt")->canonical_name("decoder.layer_norm.weight", b, sizeof b),
                     "model.decoder.final_layer_norm.weight");
    ck_assert_str_eq(fg_arch_find("opt")->canonical_name("decoder.layers.3.fc1.bias", b, sizeof b),
                     "model.decoder.layers.3.fc1.bias");
    ck_assert_str_eq(fg_arch_find("opt")->canonical_name("model.decoder.final_layer_norm.bias", b, sizeof b),
                     "model.decoder.final_layer_norm.bias");
    ck_assert_str_eq(fg_arch_find("opt")->canonical_name("lm_head.weight", b, sizeof b), "lm_head.weight");
    ck_assert_ptr_null(fg_arch_find("opt")->canonical_name("decoder.layers.3.fc1.bias", b, 8));
}
END_TEST

/* The Llama family's keys: defaults as transformers has them, and each unsupported or malformed
 * input named by its key. */
START_TEST(llama_family_configs)
{
#define L "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2," \
          "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64"
    fg_hparams c;
    fg_err err;
    const char *llama2 = "{\"model_type\":\"llama\"," L "}";
    ck_assert_int_eq(fg_model_config_parse(llama2, strlen(llama2), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(c.n_kv_heads, 4);
    ck_assert_uint_eq(c.head_dim, 8);
    ck_assert(c.rope.theta == 10000.0f && c.rope.scaling == FG_ROPE_NONE);
    ck_assert(c.norm == FG_NORM_RMS && c.gated && c.act == FG_ACT_SILU && !c.tied_head);
    ck_assert(c.bos_id == 1 && c.eos_id == 2 && c.pad_id == -1 && !c.sliding_window);
    const char *l3 = "{\"model_type\":\"llama\"," L ",\"num_key_value_heads\":2,\"head_dim\":16,"
                     "\"tie_word_embeddings\":true,\"eos_token_id\":[5,6,7],\"rope_scaling\":"
                     "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":32}}";
    ck_assert_int_eq(fg_model_config_parse(l3, strlen(l3), NULL, &c, &err), FG_OK);
    ck_assert(c.n_kv_heads == 2 && c.head_dim == 16 && c.tied_head && c.n_eos == 3 &&
              c.eos_ids[2] == 7 && c.rope.scaling == FG_ROPE_LLAMA3 && c.rope.orig_max_pos == 32);
    const char *mis = "{\"model_type\":\"mistral\"," L ",\"num_key_value_heads\":4,"
                      "\"sliding_window\":16}";
    ck_assert_int_eq(fg_model_config_parse(mis, strlen(mis), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(c.sliding_window, 16);
    ck_assert_uint_eq(c.n_kv_heads, 4); /* named: not MistralConfig's default 8 */
    const char *mis8 = "{\"model_type\":\"mistral\",\"vocab_size\":64,\"hidden_size\":64,"
                       "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                       "\"num_attention_heads\":16,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(mis8, strlen(mis8), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(c.n_kv_heads, 8); /* absent: MistralConfig's default */
    ck_assert_uint_eq(c.sliding_window, 4096); /* absent: MistralConfig's default too */
    ck_assert_uint_eq(fg_model_windowed_layers(&c), 2);
    const char *mis0 = "{\"model_type\":\"mistral\"," L ",\"num_key_value_heads\":4,"
                       "\"sliding_window\":null}";
    ck_assert_int_eq(fg_model_config_parse(mis0, strlen(mis0), NULL, &c, &err), FG_OK);
    ck_assert(c.sliding_window == 0 && fg_model_windowed_layers(&c) == 0);
    /* Ministral: Mistral's layer with layer_types (default: every layer windowed) */
    const char *mn = "{\"model_type\":\"ministral\"," L ",\"num_key_value_heads\":4,"
                     "\"sliding_window\":7,\"max_window_layers\":2}"; /* not its key */
    ck_assert_int_eq(fg_model_config_parse(mn, strlen(mn), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_windowed_layers(&c) == 2 && c.bos_id == 1 && c.eos_id == 2 && !c.qkv_bias);
    const char *mn2 = "{\"model_type\":\"ministral\"," L ",\"num_key_value_heads\":4,"
                      "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}";
    ck_assert_int_eq(fg_model_config_parse(mn2, strlen(mn2), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_window(&c, 0) == 0 && fg_model_layer_window(&c, 1) == 4096);
    const char *qw = "{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":null,"
                     "\"sliding_window\":null}";
    ck_assert_int_eq(fg_model_config_parse(qw, strlen(qw), NULL, &c, &err), FG_OK);
    ck_assert(c.qkv_bias && !c.out_bias && !c.sliding_window && c.bos_id == -1);
    ck_assert(c.n_kv_heads == 4 && c.eos_id == -1 && !c.qk_norm); /* null: one per head */
    /* Qwen3: q/k norms, head_dim 128 unless named, attention_bias on all four projections */
    const char *q3 = "{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":2,"
                     "\"eos_token_id\":9}";
    ck_assert_int_eq(fg_model_config_parse(q3, strlen(q3), NULL, &c, &err), FG_OK);
    ck_assert(c.qk_norm && c.head_dim == 128 && !c.qkv_bias && !c.out_bias && !c.mlp_bias);
    ck_assert(c.bos_id == -1 && c.eos_id == 9 && c.n_kv_heads == 2 && !c.sliding_window);
    const char *q3b = "{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":2,"
                      "\"head_dim\":16,\"attention_bias\":true,\"mlp_bias\":true}";
    ck_assert_int_eq(fg_model_config_parse(q3b, strlen(q3b), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 16 && c.qkv_bias && c.out_bias && !c.mlp_bias);
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    uint32_t nt = fg_model_unit_tensors(&c, 1, t), norms = 0;
    for (uint32_t i = 0; i < nt; i++)
        if (t[i].role == FG_ROLE_Q_NORM || t[i].role == FG_ROLE_K_NORM) {
            ck_assert(t[i].n_dims == 1 && t[i].dims[0] == 16 && t[i].access == FG_ACCESS_SMALL);
            norms++;
        }
    ck_assert_uint_eq(nt, 11); /* input norm, 4 weights, 4 biases, 2 q/k norms */
    ck_assert_uint_eq(norms, 2);
    ck_assert_str_eq(t[9].name, "model.layers.0.self_attn.q_norm.weight");
    /* Qwen's per-layer windows: from max_window_layers on, or as layer_types names them */
    const char *w1 = "{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":4,"
                     "\"use_sliding_window\":true,\"sliding_window\":5,\"max_window_layers\":1}";
    ck_assert_int_eq(fg_model_config_parse(w1, strlen(w1), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_window(&c, 0) == 0 && fg_model_layer_window(&c, 1) == 5);
    ck_assert_uint_eq(fg_model_windowed_layers(&c), 1);
    const char *w2 = "{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":4,"
                     "\"use_sliding_window\":true,\"sliding_window\":5,\"max_window_layers\":1,"
                     "\"layer_types\":[\"sliding_attention\",\"full_attention\"]}";
    ck_assert_int_eq(fg_model_config_parse(w2, strlen(w2), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_window(&c, 0) == 5 && fg_model_layer_window(&c, 1) == 0);
    const char *w3 = "{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":4,"
                     "\"use_sliding_window\":true,\"sliding_window\":5}";
    ck_assert_int_eq(fg_model_config_parse(w3, strlen(w3), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(fg_model_windowed_layers(&c), 0); /* max_window_layers 28 > 2 layers */
    const char *w5 = "{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":4,"
                     "\"use_sliding_window\":true,\"max_window_layers\":0}";
    ck_assert_int_eq(fg_model_config_parse(w5, strlen(w5), NULL, &c, &err), FG_OK);
    ck_assert(c.sliding_window == 4096 && fg_model_windowed_layers(&c) == 2); /* absent: 4096 */
    const char *w4 = "{\"model_type\":\"mistral\"," L ",\"num_key_value_heads\":4,"
                     "\"sliding_window\":3,\"max_window_layers\":1}"; /* not Mistral's key */
    ck_assert_int_eq(fg_model_config_parse(w4, strlen(w4), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(fg_model_windowed_layers(&c), 2);
    cfg_fail("{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":4,"
             "\"layer_types\":[\"sliding_attention\",\"full_attention\"]}", FG_ERR_CORRUPT,
             "key layer_types: a sliding_attention layer needs use_sliding_window true");
    cfg_fail("{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":4,"
             "\"layer_types\":[\"full_attention\"]}", FG_ERR_CORRUPT,
             "key layer_types: must be a list of one entry per layer");
    cfg_fail("{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":4,"
             "\"layer_types\":[\"full_attention\",\"chunked_attention\"]}", FG_ERR_CORRUPT,
             "key layer_types: entries must be");
    cfg_fail("{\"model_type\":\"qwen3\"," L ",\"num_key_value_heads\":4,"
             "\"max_window_layers\":-1}", FG_ERR_CORRUPT, "key max_window_layers");
    cfg_fail("{\"model_type\":\"qwen2\"," L "}", FG_ERR_CORRUPT,
             "key num_key_value_heads: missing, and the family's default 32 does not divide "
             "num_attention_heads 4");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"hidden_act\":\"gelu\"}", FG_ERR_UNSUPPORTED,
             "key hidden_act: is \"gelu\"");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"longrope\","
             "\"factor\":4}}", FG_ERR_UNSUPPORTED, "rope_scaling.rope_type: \"longrope\"");
    /* YaRN as Qwen's model cards enable it, and its defaults as transformers 5 takes them */
    const char *y = "{\"model_type\":\"qwen2\"," L ",\"num_key_value_heads\":2,"
                    "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,"
                    "\"original_max_position_embeddings\":16}}";
    ck_assert_int_eq(fg_model_config_parse(y, strlen(y), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.scaling == FG_ROPE_YARN && c.rope.factor == 4.0f && c.rope.truncate &&
              c.rope.orig_max_pos == 16 && c.rope.beta_fast == 32.0f && c.rope.beta_slow == 1.0f);
    ck_assert_float_eq_tol(c.rope.attn_factor, 0.1 * log(4.0) + 1.0, 1e-6);
    const char *y2 = "{\"model_type\":\"llama\"," L ",\"original_max_position_embeddings\":8,"
                     "\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":null,"
                     "\"rope_theta\":1e4,\"beta_fast\":null,\"beta_slow\":2,"
                     "\"mscale\":0.707,\"mscale_all_dim\":1.0,\"truncate\":false,"
                     "\"original_max_position_embeddings\":32}}";
    ck_assert_int_eq(fg_model_config_parse(y2, strlen(y2), NULL, &c, &err), FG_OK);
    /* the top-level original_max_position_embeddings wins; null factor: 64 / 8 */
    ck_assert(c.rope.orig_max_pos == 8 && c.rope.factor == 8.0f && !c.rope.truncate &&
              c.rope.beta_fast == 32.0f && c.rope.beta_slow == 2.0f);
    ck_assert_float_eq_tol(c.rope.attn_factor, (0.0707 * log(8.0) + 1) / (0.1 * log(8.0) + 1),
                           1e-6);
    const char *y3 = "{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"yarn\","
                     "\"factor\":2,\"attention_factor\":1.5}}";
    ck_assert_int_eq(fg_model_config_parse(y3, strlen(y3), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.attn_factor == 1.5f && c.rope.orig_max_pos == 64);
    const char *dyn = "{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"type\":\"dynamic\","
                      "\"factor\":2.0}}";
    ck_assert_int_eq(fg_model_config_parse(dyn, strlen(dyn), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.scaling == FG_ROPE_DYNAMIC && c.rope.theta == 10000.0f);
    float f0[4], f1[4];
    fg_rope_inv_freq(&c.rope, f0);
    c.rope.scaling = FG_ROPE_NONE;
    fg_rope_inv_freq(&c.rope, f1);
    ck_assert(!memcmp(f0, f1, sizeof f0)); /* the default frequencies */
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"dynamic\"}}",
             FG_ERR_CORRUPT, "key rope_scaling.factor: must be a positive number");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
             FG_ERR_CORRUPT, "key rope_scaling: yarn needs factor");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"yarn\","
             "\"factor\":2,\"truncate\":1}}", FG_ERR_CORRUPT, "truncate true or false");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"yarn\","
             "\"factor\":2,\"beta_fast\":-1}}", FG_ERR_CORRUPT, "must be numbers >= 0");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"rope_scaling\":{\"rope_type\":\"llama3\","
             "\"factor\":8}}", FG_ERR_CORRUPT, "key rope_scaling: llama3 needs");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"num_key_value_heads\":3}", FG_ERR_CORRUPT,
             "key num_key_value_heads: does not divide");

    cfg_fail("{\"model_type\":\"llama\"," L ",\"head_dim\":7}", FG_ERR_CORRUPT, "key head_dim");
    cfg_fail("{\"model_type\":\"llama\"," L ",\"quantization_config\":{\"bits\":4,"
             "\"quant_method\":\"gptq\"}}", FG_ERR_UNSUPPORTED,
             "key quantization_config: a checkpoint quantized by another tool (quant_method "
             "\"gptq\")");
    /* (MXFP4 is read for gpt-oss's experts only) */
    cfg_fail("{\"model_type\":\"llama\"," L ",\"quantization_config\":{"
             "\"quant_method\":\"mxfp4\"}}", FG_ERR_UNSUPPORTED, "(quant_method \"mxfp4\")");
    /* the list is fg-convert --help's (it outgrew an error message: fg_arch_names whole) */
    cfg_fail("{\"model_type\":\"gemma4\"}", FG_ERR_UNSUPPORTED,
             "key model_type: \"gemma4\" is not a family fg runs (fg-convert --help lists them)");
    ck_assert_str_eq(fg_arch_names(),
                     "opt, llama, mistral, ministral, qwen2, qwen3, phi3, gemma3_text, gemma3, "
                     "mistral3, ministral3, qwen2_5_vl, qwen3_vl, granite, smollm3, olmo2, "
                     "mixtral, "
                     "qwen2_moe, qwen3_moe, olmoe, gemma2, granitemoe, gpt_oss, gemma, glm4_moe, "
                     "minimax_m2, olmo3, dots1, seed_oss, exaone4, ernie4_5, ernie4_5_moe, "
                     "glm4");
}
END_TEST

/* Phi-3's config.json (model/llama.c) */
START_TEST(phi3_configs)
{
    fg_hparams c;
    fg_err err;
    /* Phi-3: Phi3Config's defaults (one KV head per head, eps 1e-5, bos 1, eos / pad 32000, no
     * window unless named), partial rotary, LongRoPE ("su" and "yarn" are its old names) with
     * original_max_position_embeddings top-level only (default 4096) */
    const char *phi = "{\"model_type\":\"phi3\"," L "}";
    ck_assert_int_eq(fg_model_config_parse(phi, strlen(phi), NULL, &c, &err), FG_OK);
    ck_assert(c.n_kv_heads == 4 && c.head_dim == 8 && c.rope.rot_dim == 8 && !c.sliding_window);
    ck_assert(c.bos_id == 1 && c.eos_id == 32000 && c.pad_id == 32000 && c.norm_eps == 1e-5f);
    ck_assert(c.rope.scaling == FG_ROPE_NONE && !c.qkv_bias && !c.mlp_bias && !c.tied_head);
    const char *phl = "{\"model_type\":\"phi3\",\"vocab_size\":64,\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":4,\"max_position_embeddings\":16384,"
                      "\"partial_rotary_factor\":0.75,\"sliding_window\":9,"
                      "\"rope_scaling\":{\"type\":\"su\",\"original_max_position_embeddings\":8,"
                      "\"short_factor\":[1,2,3,4,5,6],\"long_factor\":[2,3,4,5,6,7.5]}}";
    ck_assert_int_eq(fg_model_config_parse(phl, strlen(phl), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.scaling == FG_ROPE_LONGROPE && c.rope.rot_dim == 12 && !c.rope.use_long);
    ck_assert(c.rope.orig_max_pos == 4096 && c.rope.long_factor[5] == 7.5f);
    /* the object's original_max_position_embeddings is not Phi-3's: factor 16384 / 4096 */
    ck_assert(fabs(c.rope.attn_factor - sqrt(1 + log(4.0) / log(4096.0))) < 1e-6);
    ck_assert(fg_model_windowed_layers(&c) == 2 && c.sliding_window == 9);
    char parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
    ck_assert_uint_eq(fg_arch_find("phi3")->fused(&c, "model.layers.1.self_attn.qkv_proj.weight", parts,
                                         NULL),
                      3);
    ck_assert_str_eq(parts[2], "model.layers.1.self_attn.v_proj.weight");
    ck_assert_uint_eq(fg_arch_find("phi3")->fused(&c, "model.layers.0.mlp.gate_up_proj.weight", parts,
                                         NULL), 2);
    ck_assert_str_eq(parts[0], "model.layers.0.mlp.gate_proj.weight");
    ck_assert_uint_eq(fg_arch_find("phi3")->fused(&c, "model.layers.2.mlp.gate_up_proj.weight", parts,
                                         NULL), 0);
    ck_assert_uint_eq(fg_arch_find("phi3")->fused(&c, "model.layers.01.mlp.gate_up_proj.weight", parts,
                                         NULL), 0);
    ck_assert(fg_arch_find("llama")->fused == NULL);
#define PHI "{\"model_type\":\"phi3\"," L
    cfg_fail(PHI ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}}",
             FG_ERR_UNSUPPORTED, "\"linear\" is not Phi-3's (default, longrope)");
    cfg_fail(PHI ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,2],"
             "\"long_factor\":[1,2,3,4]}}", FG_ERR_CORRUPT,
             "key rope_scaling.short_factor: longrope needs a list of 4 numbers");
    cfg_fail(PHI ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,2,3,4],"
             "\"long_factor\":[1,2,0,4]}}", FG_ERR_CORRUPT,
             "key rope_scaling.long_factor: entries must be positive numbers");
    cfg_fail(PHI ",\"partial_rotary_factor\":0.1}", FG_ERR_CORRUPT,
             "key partial_rotary_factor: must leave an even number");
    cfg_fail(PHI ",\"partial_rotary_factor\":1.5}", FG_ERR_CORRUPT,
             "key partial_rotary_factor: must be a number in");
#undef PHI
}
END_TEST

/* Gemma 3's: the text model's and the multimodal wrapper's */
START_TEST(gemma3_configs)
{
    fg_hparams c;
    fg_err err;
    /* Gemma 3: Gemma3TextConfig's defaults (head_dim 256, 4 KV heads, bos 2 / eos 1 / pad 0,
     * tied, gelu_pytorch_tanh, query_pre_attn_scalar 256, window 4096 on all but every 6th
     * layer, rotary bases 1e6 global and 1e4 local), sandwich norms scaling by 1 + w */
    const char *gm = "{\"model_type\":\"gemma3_text\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":7,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(gm, strlen(gm), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 256 && c.n_kv_heads == 4 && c.tied_head && c.qk_norm);
    ck_assert(c.bos_id == 2 && c.eos_id == 1 && c.pad_id == 0 && c.act == FG_ACT_GELU_TANH);
    ck_assert(c.sandwich && c.norm_plus_one && c.local_rope && c.sliding_window == 4096);
    ck_assert(c.attn_scale == 1.0f / 16 && fabsf(c.embed_scale - sqrtf(32)) < 1e-6f);
    ck_assert(c.rope.theta == 1e6f && c.rope_local.theta == 1e4f);
    ck_assert(fg_model_windowed_layers(&c) == 6 && fg_model_layer_window(&c, 5) == 0);
    ck_assert(fg_model_layer_rope(&c, 5) == &c.rope && fg_model_layer_rope(&c, 4) == &c.rope_local);
    fg_tensor_spec gt[FG_UNIT_MAX_TENSORS];
    uint32_t ng = fg_model_unit_tensors(&c, 2, gt), posts = 0; /* layer 0's MLP */
    for (uint32_t i = 0; i < ng; i++) {
        if (gt[i].role == FG_ROLE_NORM_W)
            ck_assert_str_eq(gt[i].name, "model.layers.0.pre_feedforward_layernorm.weight");
        if (gt[i].access == FG_ACCESS_SMALL)
            ck_assert(gt[i].add == 1.0f);
        posts += gt[i].role == FG_ROLE_POST_NORM_W;
    }
    ck_assert_uint_eq(posts, 1);
    /* transformers 5's rope_parameters per layer type */
    const char *gm5 = "{\"model_type\":\"gemma3_text\"," L ",\"head_dim\":8,"
                      "\"sliding_window\":3,\"layer_types\":[\"full_attention\","
                      "\"sliding_attention\"],\"rope_parameters\":{\"full_attention\":"
                      "{\"rope_type\":\"linear\",\"factor\":8.0,\"rope_theta\":1e6},"
                      "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":5e3}}}";
    ck_assert_int_eq(fg_model_config_parse(gm5, strlen(gm5), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.scaling == FG_ROPE_LINEAR && c.rope.factor == 8.0f && c.rope.theta == 1e6f);
    ck_assert(c.rope_local.scaling == FG_ROPE_NONE && c.rope_local.theta == 5e3f);
    ck_assert(fg_model_windowed_layers(&c) == 1 && fg_model_layer_rope(&c, 1) == &c.rope_local);
    ck_assert(fg_model_layer_window(&c, 1) == 3 && fg_model_layer_rope(&c, 0) == &c.rope);
#define GM "{\"model_type\":\"gemma3_text\"," L ",\"head_dim\":8"
    cfg_fail(GM ",\"sliding_window\":null}", FG_ERR_CORRUPT,
             "key sliding_window: null, but a layer is a sliding one");
    cfg_fail(GM ",\"final_logit_softcapping\":30.0}", FG_ERR_UNSUPPORTED,
             "key final_logit_softcapping: logit soft-capping in a Gemma 3 (Gemma 2's) is not "
             "supported");
    cfg_fail(GM ",\"attn_logit_softcapping\":50.0}", FG_ERR_UNSUPPORTED,
             "key attn_logit_softcapping");
    cfg_fail(GM ",\"use_bidirectional_attention\":true}", FG_ERR_UNSUPPORTED,
             "bidirectional attention");
    cfg_fail(GM ",\"hidden_activation\":\"silu\"}", FG_ERR_UNSUPPORTED,
             "key hidden_activation: is \"silu\"; fg supports \"gelu_pytorch_tanh\", \"gelu\"");
    cfg_fail(GM ",\"query_pre_attn_scalar\":0}", FG_ERR_CORRUPT, "key query_pre_attn_scalar");
#undef GM
    /* Gemma 2: Gemma2Config's defaults (8192 positions, window 4096 on every other layer from
     * layer 0, caps 50 on the scores and 30 on the logits), no q/k norms or local rotary base;
     * a null cap is none; sliding_window_pattern is Gemma 3's (not read) */
    const char *g2 = "{\"model_type\":\"gemma2\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":5,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"sliding_window_pattern\":3}";
    ck_assert_int_eq(fg_model_config_parse(g2, strlen(g2), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 256 && c.n_kv_heads == 4 && c.tied_head && !c.qk_norm);
    ck_assert(c.max_pos == 8192 && c.sandwich && c.norm_plus_one && !c.local_rope);
    ck_assert(c.attn_softcap == 50.0f && c.final_softcap == 30.0f && c.rope.theta == 1e4f);
    ck_assert(fg_model_windowed_layers(&c) == 3 && fg_model_layer_window(&c, 0) == 4096);
    ck_assert(fg_model_layer_window(&c, 1) == 0 && fg_model_layer_window(&c, 4) == 4096);
    ck_assert(c.bos_id == 2 && c.eos_id == 1 && c.act == FG_ACT_GELU_TANH);
    const char *g2n = "{\"model_type\":\"gemma2\"," L ",\"attn_logit_softcapping\":null,"
                      "\"final_logit_softcapping\":12.5}";
    ck_assert_int_eq(fg_model_config_parse(g2n, strlen(g2n), NULL, &c, &err), FG_OK);
    ck_assert(c.attn_softcap == 0 && c.final_softcap == 12.5f);
    cfg_fail("{\"model_type\":\"gemma2\"," L ",\"attn_logit_softcapping\":0}", FG_ERR_CORRUPT,
             "key attn_logit_softcapping: must be a number");
    cfg_fail("{\"model_type\":\"gemma2\"," L ",\"use_bidirectional_attention\":true}",
             FG_ERR_UNSUPPORTED, "bidirectional attention");
    /* Seed-OSS: SeedOssConfig's defaults (q/k/v biases, none on o, head_dim 128, 8 KV heads) */
    const char *so = "{\"model_type\":\"seed_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                     "\"num_attention_heads\":8,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(so, strlen(so), NULL, &c, &err), FG_OK);
    ck_assert(c.qkv_bias && !c.out_bias && !c.mlp_bias && c.head_dim == 128 && c.n_kv_heads == 8);
    ck_assert(c.bos_id == 0 && c.eos_id == 2 && c.pad_id == 1);
    const char *so2 = "{\"model_type\":\"seed_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":8,\"max_position_embeddings\":64,"
                      "\"attention_bias\":false,\"attention_out_bias\":true}";
    ck_assert_int_eq(fg_model_config_parse(so2, strlen(so2), NULL, &c, &err), FG_OK);
    ck_assert(!c.qkv_bias && c.out_bias);
    /* EXAONE 4: every 4th layer global (full, no rotary positions) by default, or by the
     * pattern's letters; without a window every layer full and rotated */
    const char *ex = "{\"model_type\":\"exaone4\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":8,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                     "\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(ex, strlen(ex), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_windowed_layers(&c) == 6 && fg_model_layer_window(&c, 3) == 0);
    ck_assert(fg_model_layer_rope(&c, 3) == NULL && fg_model_layer_rope(&c, 2) != NULL);
    ck_assert(c.sandwich == FG_SANDWICH_AFTER && c.qk_norm == FG_QK_NORM_HEAD);
    const char *ex2 = "{\"model_type\":\"exaone4\",\"vocab_size\":64,\"hidden_size\":32,"
                      "\"num_hidden_layers\":4,\"intermediate_size\":48,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                      "\"max_position_embeddings\":64,\"sliding_window_pattern\":\"LG\"}";
    ck_assert_int_eq(fg_model_config_parse(ex2, strlen(ex2), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_window(&c, 0) == 4096 && fg_model_layer_window(&c, 1) == 0);
    ck_assert(fg_model_layer_window(&c, 2) == 4096 && fg_model_layer_rope(&c, 3) == NULL);
    const char *ex3 = "{\"model_type\":\"exaone4\",\"vocab_size\":64,\"hidden_size\":32,"
                      "\"num_hidden_layers\":4,\"intermediate_size\":48,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                      "\"max_position_embeddings\":64,\"sliding_window\":null}";
    ck_assert_int_eq(fg_model_config_parse(ex3, strlen(ex3), NULL, &c, &err), FG_OK);
    ck_assert(!fg_model_windowed_layers(&c) && fg_model_layer_rope(&c, 3) != NULL);
    cfg_fail("{\"model_type\":\"exaone4\",\"vocab_size\":64,\"hidden_size\":32,"
             "\"num_hidden_layers\":4,\"intermediate_size\":48,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"max_position_embeddings\":64,"
             "\"sliding_window_pattern\":\"LXG\"}", FG_ERR_CORRUPT, "key sliding_window_pattern");
    /* ERNIE 4.5: Ernie4_5Config's defaults (tied, head_dim 128, 2 KV heads, theta 5e5), use_bias
     * on every Linear layer; q's and k's rows (and biases) reordered from (even, odd) pairs */
    const char *er = "{\"model_type\":\"ernie4_5\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"max_position_embeddings\":64,"
                     "\"use_bias\":true}";
    ck_assert_int_eq(fg_model_config_parse(er, strlen(er), NULL, &c, &err), FG_OK);
    ck_assert(c.tied_head && c.head_dim == 128 && c.n_kv_heads == 2 && c.rope.theta == 5e5f);
    ck_assert(c.qkv_bias && c.out_bias && c.mlp_bias && c.rope_interleaved);
    fg_tensor_spec es[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 1, es), 9);
    ck_assert(es[1].role == FG_ROLE_WQ && es[1].perm_head == 128 && es[1].perm_rot == 128);
    ck_assert(es[2].role == FG_ROLE_BQ && es[2].perm_head == 128);
    ck_assert(es[5].role == FG_ROLE_WV && !es[5].perm_head && !es[7].perm_head); /* v, o */
    /* ERNIE 4.5 MoE: Ernie4_5_MoeConfig's defaults (64 experts, top 6, 2 shared, sparse from
     * layer 1 to the last), the choice bias [1, experts], the head's bias with use_bias */
    const char *em = "{\"model_type\":\"ernie4_5_moe\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":4,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"max_position_embeddings\":64,"
                     "\"use_bias\":true,\"moe_layer_interval\":2}";
    ck_assert_int_eq(fg_model_config_parse(em, strlen(em), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 64 && c.top_k == 6 && c.shared_ffn == 2 * 1536 && c.shared_plain);
    ck_assert(!fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1));
    ck_assert(!fg_model_layer_sparse(&c, 2) && fg_model_layer_sparse(&c, 3));
    ck_assert(c.router_corr == 2 && !c.router_sigmoid && c.head_bias && c.rope_interleaved);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 4, es), 12); /* layer 1's MLP */
    ck_assert(es[2].role == FG_ROLE_ROUTER_CORR && es[2].dims[0] == 1 && es[2].dims[1] == 64);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 9, es), 3); /* the head: norm, head, bias */
    ck_assert(es[2].role == FG_ROLE_B_LM_HEAD && es[1].optional);
    /* GLM-4 (dense): Glm4Config's defaults (half the head rotated, pairs, q/k/v biases and not
     * o, plain sandwich norms under GLM's names, gate_up fused) */
    const char *g4 = "{\"model_type\":\"glm4\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(g4, strlen(g4), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 128 && c.rope.rot_dim == 64 && c.rope_interleaved && c.qkv_bias);
    ck_assert(!c.out_bias && c.sandwich == FG_SANDWICH_BOTH && !c.norm_plus_one);
    ck_assert(c.pad_id == 151329 && c.n_kv_heads == 2 && c.norm_eps == 1.5625e-7f);
    char gn4[FG_TENSOR_NAME_MAX];
    ck_assert_str_eq(fg_arch_find("glm4")->canonical_name("model.layers.0.post_attention_layernorm.weight",
                                                 gn4, sizeof gn4),
                     "model.layers.0.pre_feedforward_layernorm.weight");
    ck_assert_str_eq(fg_arch_find("glm4")->canonical_name("model.layers.0.post_mlp_layernorm.weight",
                                                 gn4, sizeof gn4),
                     "model.layers.0.post_feedforward_layernorm.weight");
    /* Gemma (1): GemmaConfig's defaults (head_dim 256, KV heads = heads, tied, bos 2, eos 1),
     * Llama's layer (no sandwich, head_dim^-1/2), 1 + w norms, sqrt(hidden) embeddings, the
     * released files' hidden_act "gelu" as the tanh GELU; no caps, no window */
    const char *g1 = "{\"model_type\":\"gemma\"," L ",\"hidden_act\":\"gelu\"}";
    ck_assert_int_eq(fg_model_config_parse(g1, strlen(g1), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 256 && c.n_kv_heads == 4 && c.tied_head && !c.sandwich);
    ck_assert(c.norm_plus_one && c.embed_scale == sqrtf(32.0f) && c.attn_scale == 0);
    ck_assert(c.act == FG_ACT_GELU_TANH && c.bos_id == 2 && c.eos_id == 1 && c.pad_id == 0);
    ck_assert(!fg_model_windowed_layers(&c) && !c.attn_softcap && !c.qkv_bias);
    const char *g1d = "{\"model_type\":\"gemma\"}"; /* every size GemmaConfig's: gemma-7b */
    ck_assert_int_eq(fg_model_config_parse(g1d, strlen(g1d), NULL, &c, &err), FG_OK);
    ck_assert(c.hidden == 3072 && c.n_layers == 28 && c.ffn == 24576 && c.n_kv_heads == 16);
    cfg_fail("{\"model_type\":\"gemma\"," L ",\"hidden_act\":\"silu\"}", FG_ERR_UNSUPPORTED,
             "key hidden_act");
    cfg_fail("{\"model_type\":\"gemma\"," L ",\"final_logit_softcapping\":30}",
             FG_ERR_UNSUPPORTED, "logit soft-capping in a Gemma (Gemma 2's)");
    /* the multimodal wrapper: text_config as the hub's 4B names it (Gemma3TextConfig's defaults
     * for the rest), the top level's eos list and dtype */
    const char *mm = "{\"model_type\":\"gemma3\",\"eos_token_id\":[1,106],"
                     "\"torch_dtype\":\"bfloat16\",\"text_config\":{\"hidden_size\":2560,"
                     "\"intermediate_size\":10240,\"model_type\":\"gemma3_text\","
                     "\"num_hidden_layers\":34,\"rope_scaling\":{\"factor\":8.0,"
                     "\"rope_type\":\"linear\"},\"sliding_window\":1024},"
                     "\"vision_config\":{\"model_type\":\"siglip_vision_model\"}}";
    ck_assert_int_eq(fg_model_config_parse(mm, strlen(mm), NULL, &c, &err), FG_OK);
    ck_assert_str_eq(c.arch, "gemma3");
    ck_assert(c.vocab_size == 262208 && c.n_heads == 8 && c.n_kv_heads == 4 && c.head_dim == 256);
    ck_assert(c.max_pos == 131072 && c.hidden == 2560 && c.n_layers == 34 && c.tied_head);
    ck_assert(c.n_eos == 2 && c.eos_ids[1] == 106 && c.bos_id == 2 && !strcmp(c.dtype, "bfloat16"));
    ck_assert(c.rope.scaling == FG_ROPE_LINEAR && c.rope_local.theta == 1e4f);
    ck_assert(fg_model_windowed_layers(&c) == 34 - 5 && c.sliding_window == 1024);
    char nb[FG_TENSOR_NAME_MAX];
    ck_assert_str_eq(fg_arch_find("gemma3")->canonical_name("language_model.model.norm.weight", nb,
                                                   sizeof nb), "model.norm.weight");
    ck_assert_str_eq(fg_arch_find("gemma3")->canonical_name("model.language_model.layers.3.mlp.up_proj."
                                                   "weight", nb, sizeof nb),
                     "model.layers.3.mlp.up_proj.weight");
    ck_assert_str_eq(fg_arch_find("gemma3")->canonical_name("language_model.lm_head.weight", nb, sizeof nb),
                     "lm_head.weight");
    ck_assert(fg_arch_find("gemma3")->unused(&c, "vision_tower.vision_model.post_layernorm.weight"));
    ck_assert(fg_arch_find("gemma3")->unused(&c, "model.multi_modal_projector.mm_input_projection_weight"));
    ck_assert(!fg_arch_find("gemma3")->unused(&c, "model.norm.weight"));
    cfg_fail("{\"model_type\":\"gemma3\"}", FG_ERR_CORRUPT, "key text_config: must be an object");
    /* Mistral Small 3.x: a mistral text_config (model_type absent: mistral); the top level's
     * tie_word_embeddings decides, true by default as in transformers 5 */
    const char *m3 = "{\"model_type\":\"mistral3\",\"text_config\":{" L ",\"sliding_window\":null,"
                     "\"num_key_value_heads\":4,\"tie_word_embeddings\":false}}";
    ck_assert_int_eq(fg_model_config_parse(m3, strlen(m3), NULL, &c, &err), FG_OK);
    ck_assert(!strcmp(c.arch, "mistral3") && c.tied_head && c.n_kv_heads == 4 && !c.sliding_window);
    const char *m3u = "{\"model_type\":\"mistral3\",\"tie_word_embeddings\":false,"
                      "\"text_config\":{\"model_type\":\"mistral\"," L ","
                      "\"num_key_value_heads\":2}}";
    ck_assert_int_eq(fg_model_config_parse(m3u, strlen(m3u), NULL, &c, &err), FG_OK);
    ck_assert(!c.tied_head && c.n_kv_heads == 2 && c.sliding_window == 4096);
    cfg_fail("{\"model_type\":\"mistral3\",\"text_config\":{\"model_type\":\"gemma3_text\"}}",
             FG_ERR_CORRUPT, "key text_config.model_type: must be \"mistral\" or \"ministral3\"");
    /* Qwen2.5-VL as the hub ships it (flat, rope_scaling mrope, no kv heads named: the text
     * class's 8; its theta 1e6 and max_window_layers 80); Qwen3-VL (theta 5e5 when absent);
     * pre-5 files' text_config tie_word_embeddings true carries */
    const char *qv2 = "{\"model_type\":\"qwen2_5_vl\",\"vocab_size\":64,\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":16,\"max_position_embeddings\":64,"
                      "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[1,1,0]},"
                      "\"vision_config\":{\"depth\":32}}";
    ck_assert_int_eq(fg_model_config_parse(qv2, strlen(qv2), NULL, &c, &err), FG_OK);
    ck_assert(!strcmp(c.arch, "qwen2_5_vl") && c.n_kv_heads == 8 && c.rope.theta == 1e6f);
    ck_assert(c.rope.scaling == FG_ROPE_NONE && c.qkv_bias && !c.tied_head && c.eos_id == 151645);
    const char *q3v = "{\"model_type\":\"qwen3_vl\",\"text_config\":{\"model_type\":"
                      "\"qwen3_vl_text\"," L ",\"num_key_value_heads\":2,"
                      "\"tie_word_embeddings\":true,"
                      "\"rope_scaling\":{\"rope_type\":\"default\",\"mrope_section\":[24,20,20],"
                      "\"mrope_interleaved\":true}}}";
    ck_assert_int_eq(fg_model_config_parse(q3v, strlen(q3v), NULL, &c, &err), FG_OK);
    ck_assert(c.qk_norm && c.head_dim == 128 && c.rope.theta == 5e5f && c.tied_head);
    char qn[FG_TENSOR_NAME_MAX];
    ck_assert_str_eq(fg_arch_find("qwen3_vl")->canonical_name("model.language_model.norm.weight", qn,
                                                     sizeof qn), "model.norm.weight");
    ck_assert(fg_arch_find("qwen3_vl")->unused(&c, "model.visual.blocks.0.attn.qkv.weight"));
    /* OLMo 2: no input norms, q/k norms over the whole projections, Olmo2Config's ids */
    const char *ol = "{\"model_type\":\"olmo2\"," L ",\"num_key_value_heads\":2}";
    ck_assert_int_eq(fg_model_config_parse(ol, strlen(ol), NULL, &c, &err), FG_OK);
    ck_assert(c.qk_norm == FG_QK_NORM_WHOLE && c.sandwich == FG_SANDWICH_AFTER);
    ck_assert(c.bos_id == -1 && c.eos_id == 50279);
    fg_tensor_spec ot[FG_UNIT_MAX_TENSORS];
    uint32_t no = fg_model_unit_tensors(&c, 1, ot), whole = 0; /* layer 0's attention */
    for (uint32_t i = 0; i < no; i++) {
        ck_assert(ot[i].role != FG_ROLE_NORM_W);
        if (ot[i].role == FG_ROLE_Q_NORM || ot[i].role == FG_ROLE_K_NORM)
            whole += ot[i].dims[0] == (ot[i].role == FG_ROLE_Q_NORM ? 32u : 16u);
    }
    ck_assert_uint_eq(whole, 2);
    /* SmolLM3: NoPE every 4th layer by default, or as no_rope_layers says */
    const char *sm = "{\"model_type\":\"smollm3\",\"vocab_size\":64,\"hidden_size\":32,"
                     "\"num_hidden_layers\":8,\"intermediate_size\":48,"
                     "\"num_attention_heads\":4,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(sm, strlen(sm), NULL, &c, &err), FG_OK);
    ck_assert(c.n_kv_heads == 4 && c.tied_head && c.bos_id == 128000 && c.pad_id == 128004);
    ck_assert(fg_model_layer_rope(&c, 3) == NULL && fg_model_layer_rope(&c, 7) == NULL);
    ck_assert(fg_model_layer_rope(&c, 0) == &c.rope && fg_model_layer_rope(&c, 4) == &c.rope);
    const char *sm2 = "{\"model_type\":\"smollm3\"," L ",\"no_rope_layers\":[0,1]}";
    ck_assert_int_eq(fg_model_config_parse(sm2, strlen(sm2), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_rope(&c, 0) == NULL && fg_model_layer_rope(&c, 1) == &c.rope);
    cfg_fail("{\"model_type\":\"smollm3\"," L ",\"no_rope_layers\":[1,2]}", FG_ERR_CORRUPT,
             "key no_rope_layers: entries must be 0 or 1");
    cfg_fail("{\"model_type\":\"smollm3\"," L ",\"no_rope_layers\":[1]}", FG_ERR_CORRUPT,
             "key no_rope_layers: must be a list of one 0 or 1 per layer");
    /* Granite: the four multipliers, each 1 by default (attention_multiplier is q's scale) */
    const char *gr = "{\"model_type\":\"granite\"," L ",\"embedding_multiplier\":12,"
                     "\"residual_multiplier\":0.22,\"logits_scaling\":8}";
    ck_assert_int_eq(fg_model_config_parse(gr, strlen(gr), NULL, &c, &err), FG_OK);
    ck_assert(c.embed_scale == 12.0f && c.attn_scale == 1.0f && c.residual_scale == 0.22f);
    ck_assert(c.logit_scale == 0.125f && c.bos_id == 1 && !c.tied_head);
    cfg_fail("{\"model_type\":\"granite\"," L ",\"logits_scaling\":0}", FG_ERR_CORRUPT,
             "key logits_scaling: must be a number in");
    /* Ministral 3: Ministral3Config's defaults, YaRN with Llama 4's q scaling when the file has
     * no rope settings */
    const char *mi3 = "{\"model_type\":\"ministral3\",\"vocab_size\":64,\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":16,\"max_position_embeddings\":64}";
    ck_assert_int_eq(fg_model_config_parse(mi3, strlen(mi3), NULL, &c, &err), FG_OK);
    ck_assert(c.head_dim == 128 && c.n_kv_heads == 8 && c.pad_id == 11 && c.norm_eps == 1e-5f);
    ck_assert(c.rope.scaling == FG_ROPE_YARN && c.rope.factor == 16.0f && c.rope.theta == 1e6f);
    ck_assert(c.rope.orig_max_pos == 16384 && c.rope.attn_factor == 1.0f);
    ck_assert(c.llama4_beta == 0.1f && !c.sliding_window && !c.tied_head);
    const char *mi3d = "{\"model_type\":\"ministral3\"," L ",\"num_key_value_heads\":4,"
                       "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e4}}";
    ck_assert_int_eq(fg_model_config_parse(mi3d, strlen(mi3d), NULL, &c, &err), FG_OK);
    ck_assert(c.rope.scaling == FG_ROPE_NONE && c.llama4_beta == 0);
    cfg_fail("{\"model_type\":\"ministral3\"," L ",\"num_key_value_heads\":4,\"rope_parameters\":"
             "{\"rope_type\":\"default\",\"llama_4_scaling_beta\":0.1}}", FG_ERR_CORRUPT,
             "llama_4_scaling_beta needs original_max_position_embeddings");
    cfg_fail("{\"model_type\":\"gemma3\",\"text_config\":{\"model_type\":\"llama\"}}",
             FG_ERR_CORRUPT, "key text_config.model_type: must be \"gemma3_text\"");
    cfg_fail("{\"model_type\":\"gemma3\",\"text_config\":{\"final_logit_softcapping\":30}}",
             FG_ERR_UNSUPPORTED, "text_config: key final_logit_softcapping");
#undef L
}
END_TEST

/* generation_config.json's eos_token_id replaces config.json's stop set when present and not null;
 * a malformed one is refused naming the key, and leaves the config as it was. */
START_TEST(generation_config_eos)
{
    const char *cfg = "{\"model_type\":\"llama\",\"vocab_size\":64,\"hidden_size\":32,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":4,\"max_position_embeddings\":64,"
                      "\"eos_token_id\":[5,6]}";
    fg_hparams c;
    fg_err err;
    ck_assert_int_eq(fg_model_config_parse(cfg, strlen(cfg), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 2 && c.eos_ids[1] == 6);
    const char *keep[] = {"{}", "{\"eos_token_id\":null,\"do_sample\":true}"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(fg_model_generation_config_parse(keep[i], strlen(keep[i]), NULL, &c, &err),
                         FG_OK);
        ck_assert(c.n_eos == 2 && c.eos_ids[0] == 5 && c.eos_id == 5);
    }
    const char *list = "{\"eos_token_id\":[9,10,11],\"temperature\":0.6}";
    ck_assert_int_eq(fg_model_generation_config_parse(list, strlen(list), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 3 && c.eos_ids[2] == 11 && c.eos_id == 9);
    const char *one = "{\"eos_token_id\":12}";
    ck_assert_int_eq(fg_model_generation_config_parse(one, strlen(one), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 1 && c.eos_id == 12);
    const char *bad[] = {"{\"eos_token_id\":\"x\"}", "{\"eos_token_id\":[1,null]}", "[1]", "{",
                         "{\"eos_token_id\":[]}"};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_ne(fg_model_generation_config_parse(bad[i], strlen(bad[i]), NULL, &c, &err),
                         FG_OK);
        ck_assert_msg(strstr(err.msg, "generation_config.json"), "%s", err.msg);
        ck_assert(c.n_eos == 1 && c.eos_id == 12);
    }
}
END_TEST

static const char k_llama_cfg[] = "{\"model_type\":\"llama\",\"vocab_size\":16,"
                                 "\"hidden_size\":8,\"num_hidden_layers\":2,"
                                 "\"intermediate_size\":8,\"num_attention_heads\":2,"
                                 "\"max_position_embeddings\":32}";

/* A checkpoint written here as safetensors (config cfg): every tensor config.json implies
 * (zeros) but those whose names hold one of omit[] (NULL-terminated; NULL: none), and extra tensors
 * extra[0..n_extra): "NAME" 1-D F32 of extra_len elements, "NAME@D0xD1" 2-D F16,
 * "NAME@D0xD1xD2" 3-D F16. */
static const char *write_ckpt(const char *dir, const char *cfg, const char *const *omit,
                              const char *const *extra, uint32_t n_extra, uint64_t extra_len,
                              fg_hparams *c)
{
    char p[4096];
    fg_err err;
    snprintf(p, sizeof p, "%s", tu_path(dir));
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/config.json", tu_path(dir));
    FILE *f = fopen(p, "w");
    ck_assert(f && fputs(cfg, f) >= 0 && fclose(f) == 0);
    ck_assert_int_eq(fg_model_config_parse(cfg, strlen(cfg), NULL, c, &err), FG_OK);
    fg_tensor_spec *spec;
    uint32_t n;
    ck_assert_int_eq(fg_model_tensors(c, &spec, &n, &err), FG_OK);
    char *hdr = malloc(1 << 16);
    size_t k = (size_t)sprintf(hdr, "{");
    uint64_t off = 0;
    for (uint32_t i = 0; i < n + n_extra; i++) { /* the model's F16, the extras F32 */
        char name[128];
        snprintf(name, sizeof name, "%s", i < n ? spec[i].name : extra[i - n]);
        char *at = strchr(name, '@'), *u8 = strstr(name, ":U8"); /* name@AxB[xC[xD]][:U8] */
        unsigned long long e0 = 0, e1 = 0, e2 = 0, e3 = 0;
        if (at && sscanf(at + 1, "%llux%llux%llux%llu", &e0, &e1, &e2, &e3) >= 2)
            *at = 0;
        int drop = 0;
        for (const char *const *o = omit; i < n && o && *o; o++)
            drop |= strstr(name, *o) != NULL;
        if (drop)
            continue;
        int two = (i < n && spec[i].n_dims == 2) || e1, f16 = i < n || e1;
        uint64_t d0 = i < n ? spec[i].dims[0] : e1 ? e0 : extra_len;
        uint64_t d1 = i < n ? (two ? spec[i].dims[1] : 1) : e1 ? e1 : 1;
        uint64_t bytes = d0 * d1 * (e2 ? e2 : 1) * (e3 ? e3 : 1) * (u8 ? 1 : f16 ? 2 : 4);
        char shape[80];
        snprintf(shape, sizeof shape, e3 ? "%llu,%llu,%llu,%llu" : e2 ? "%llu,%llu,%llu"
                                      : two ? "%llu,%llu" : "%llu",
                 (unsigned long long)d0, (unsigned long long)d1, e2, e3);
        k += (size_t)sprintf(hdr + k, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],"
                             "\"data_offsets\":[%llu,%llu]}", k > 1 ? "," : "", name,
                             u8 ? "U8" : f16 ? "F16" : "F32", shape, (unsigned long long)off,
                             (unsigned long long)(off + bytes));
        off += bytes;
    }
    k += (size_t)sprintf(hdr + k, "}");
    snprintf(p, sizeof p, "%s/model.safetensors", tu_path(dir));
    f = fopen(p, "wb");
    uint8_t hl[8];
    fg_put64(hl, k);
    char *zeros = calloc(1, off + 1);
    ck_assert(f && fwrite(hl, 8, 1, f) == 1 && fwrite(hdr, 1, k, f) == k &&
              fwrite(zeros, 1, off, f) == off && fclose(f) == 0);
    free(zeros);
    free(hdr);
    free(spec);
    return tu_path(dir);
}

/* write_ckpt, then the check of the checkpoint against its config (src and skips may be NULL) */
static int check_written(const char *dir, const char *cfg, const char *const *omit,
                         const char *const *extra, uint32_t n_extra, uint64_t len,
                         fgc_source *src, fgc_skips *skips, fg_err *err)
{
    fg_hparams c;
    const char *path = write_ckpt(dir, cfg, omit, extra, n_extra, len, &c);
    fg_ckpt *ck;
    ck_assert_msg(fg_ckpt_open(path, &ck, err) == FG_OK, "%s", err->msg);
    int rc = fg_convert_check_ckpt(&c, ck, src, skips, err);
    fg_ckpt_close(ck);
    return rc;
}

static int check_llama(const char *dir, const char *const *extra, uint32_t n_extra,
                       uint64_t len, uint32_t *skipped, fg_err *err)
{
    fgc_skips sk = {0, 0};
    int rc = check_written(dir, k_llama_cfg, NULL, extra, n_extra, len, NULL, &sk, err);
    *skipped = sk.derived;
    ck_assert_uint_eq(sk.unused, 0);
    return rc;
}

/* Llama 2's hub checkpoints carry each layer's rotary_emb.inv_freq (transformers < 4.31 saved
 * the buffer): accepted with its shape checked ([head_dim / 2]) and skipped; the same name for a
 * layer the config does not have, or spelled otherwise, is an unexpected tensor. */
START_TEST(llama_inv_freq_buffers)
{
    tu_tmpdir_create();
    static const char *const two[] = {"model.layers.0.self_attn.rotary_emb.inv_freq",
                                      "layers.1.self_attn.rotary_emb.inv_freq"};
    static const char *const past[] = {"model.layers.2.self_attn.rotary_emb.inv_freq"};
    static const char *const zero[] = {"model.layers.01.self_attn.rotary_emb.inv_freq"};
    static const char *const other[] = {"model.layers.0.self_attn.rotary_emb.cos_cached"};
    uint32_t skipped;
    fg_err err;
    ck_assert_int_eq(check_llama("ok", two, 2, 2, &skipped, &err), FG_OK);
    ck_assert_uint_eq(skipped, 2);
    ck_assert_int_eq(check_llama("shape", two, 2, 4, &skipped, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.self_attn.rotary_emb.inv_freq has shape "
                         "[4], config.json implies [2]"), "%s", err.msg);
    ck_assert_int_eq(check_llama("past", past, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "layers.2.self_attn.rotary_emb.inv_freq is not a Llama"), "%s",
                  err.msg);
    ck_assert_int_eq(check_llama("zero", zero, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    ck_assert_int_eq(check_llama("other", other, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    tu_tmpdir_remove();
}
END_TEST

/* Phi-3's fused qkv_proj [q + 2 kv rows, hidden] and gate_up_proj [2 ffn, hidden] are taken
 * apart: each part from its rows; a wrong row count is named with the shape the parts add up
 * to; the same projection fused and split is a second spelling; a fused tensor of a layer the
 * config does not have is not a Phi-3 tensor. */
static int check_phi3(const char *dir, const char *const *omit, const char *const *extra,
                      uint32_t n, fgc_source *src, fg_err *err)
{
    static const char cfg[] = "{\"model_type\":\"phi3\",\"vocab_size\":16,\"hidden_size\":8,"
                              "\"num_hidden_layers\":1,\"intermediate_size\":6,"
                              "\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                              "\"max_position_embeddings\":32}";
    return check_written(dir, cfg, omit, extra, n, 0, src, NULL, err);
}

START_TEST(phi3_fused_tensors)
{
    tu_tmpdir_create();
    static const char *const fused[] = {"model.layers.0.self_attn.qkv_proj.weight@16x8",
                                        "model.layers.0.mlp.gate_up_proj.weight@12x8"};
    static const char *const short_qkv[] = {"model.layers.0.self_attn.qkv_proj.weight@15x8",
                                            "model.layers.0.mlp.gate_up_proj.weight@12x8"};
    static const char *const past[] = {"model.layers.0.self_attn.qkv_proj.weight@16x8",
                                       "model.layers.0.mlp.gate_up_proj.weight@12x8",
                                       "model.layers.1.mlp.gate_up_proj.weight@12x8"};
    static const char *const split[] = {".q_proj", ".k_proj", ".v_proj", ".gate_proj", ".up_proj",
                                        NULL};
    static const char *const split_up[] = {".q_proj", ".k_proj", ".v_proj", ".gate_proj", NULL};
    fgc_source src[16];
    fg_err err;
    /* q 8 rows, k 4, v 4 (2 heads, 1 KV head, head_dim 4); gate 6, up 6; the specs in the
     * model's order: embed | norm, q, k, v, o | norm, gate, up, down | norm, lm_head */
    ck_assert_int_eq(check_phi3("ok", split, fused, 2, src, &err), FG_OK);
    ck_assert(src[2].index == src[3].index && src[3].index == src[4].index);
    ck_assert(src[2].row0 == 0 && src[3].row0 == 8 && src[4].row0 == 12 && src[5].row0 == 0);
    ck_assert(src[7].index == src[8].index && src[7].row0 == 0 && src[8].row0 == 6);
    ck_assert(src[7].index != src[2].index && src[5].index != src[2].index);
    ck_assert_int_eq(check_phi3("split", NULL, NULL, 0, src, &err), FG_OK); /* stored apart */
    ck_assert(src[3].row0 == 0 && src[3].index != src[2].index);
    ck_assert_int_eq(check_phi3("rows", split, short_qkv, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.self_attn.qkv_proj.weight has shape "
                         "[15, 8], config.json implies [16, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_phi3("twice", split_up, fused, 2, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "is a second spelling of model.layers.0.mlp.up_proj.weight"),
                  "%s", err.msg);
    ck_assert_int_eq(check_phi3("past", split, past, 3, NULL, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "layers.1.mlp.gate_up_proj.weight is not a Phi-3 tensor"), "%s",
                  err.msg);
    tu_tmpdir_remove();
}
END_TEST

/* A mixture of experts' config.json: Mixtral's keys and defaults, Qwen's sparse layers and
 * moe_intermediate_size, Qwen2-MoE's shared expert; the MLP unit's tensors (the experts stacked
 * by rows in blocks); the refusals name the key. */
#define L "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2," \
          "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64"
START_TEST(moe_configs)
{
    fg_hparams c;
    fg_err err;
    const char *mx = "{\"model_type\":\"mixtral\"," L ",\"num_key_value_heads\":2}";
    ck_assert_int_eq(fg_model_config_parse(mx, strlen(mx), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 8 && c.top_k == 2 && c.norm_topk && c.moe_ffn == c.ffn);
    ck_assert(!c.shared_ffn && !c.sliding_window && c.norm_eps == 1e-5f);
    ck_assert(fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1));
    /* the share of 8 experts top 2 chooses: a token 1/4, two 1 - (3/4)^2 */
    ck_assert(fabs(fg_model_expert_share(&c, 1) - 0.25) < 1e-12);
    ck_assert(fabs(fg_model_expert_share(&c, 2) - 0.4375) < 1e-12);
    ck_assert(fg_model_expert_share(&c, 0) == 0 && fg_model_expert_share(&c, 64) > 0.9999);
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    uint32_t n = fg_model_unit_tensors(&c, 2, t), blocks = 0; /* layer 0's MLP */
    ck_assert_uint_eq(n, 5);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[1].dims[0] == 8 && t[1].dims[1] == c.hidden);
    for (uint32_t i = 2; i < 5; i++)
        blocks += t[i].blocks == 8 && t[i].dims[0] == 8ull * (i == 4 ? c.hidden : c.ffn);
    ck_assert_uint_eq(blocks, 3);
    ck_assert_str_eq(t[2].name, "model.layers.0.mlp.experts.gate_proj.weight");
    char buf[FG_TENSOR_NAME_MAX], st[FG_TENSOR_NAME_MAX];
    uint32_t b = 0;
    ck_assert_str_eq(fg_arch_find("mixtral")->canonical_name("model.layers.1.block_sparse_moe.experts.7."
                                                    "w3.weight", buf, sizeof buf),
                     "model.layers.1.mlp.experts.7.up_proj.weight");
    ck_assert(fg_arch_find("mixtral")->stacked(&c, buf, st, &b) && b == 7);
    ck_assert_str_eq(st, "model.layers.1.mlp.experts.up_proj.weight");
    ck_assert(!fg_arch_find("mixtral")->stacked(&c, "model.layers.1.mlp.experts.8.up_proj.weight", st,
                                       &b));
    ck_assert(!fg_arch_find("mixtral")->stacked(&c, "model.layers.1.mlp.experts.07.up_proj.weight", st,
                                       &b));
    ck_assert(!fg_arch_find("mixtral")->stacked(&c, "model.layers.1.mlp.experts.+7.up_proj.weight", st,
                                       &b));
    ck_assert(!fg_arch_find("mixtral")->stacked(&c, "model.layers.1.mlp.experts.7.w3.weight", st, &b));
    cfg_fail("{\"model_type\":\"mixtral\"," L ",\"num_key_value_heads\":2,"
             "\"num_local_experts\":4,\"num_experts\":8}", FG_ERR_CORRUPT,
             "key num_experts: differs from num_local_experts");
    cfg_fail("{\"model_type\":\"mixtral\"," L ",\"num_key_value_heads\":2,\"num_local_experts\":2,"
             "\"num_experts_per_tok\":3}", FG_ERR_CORRUPT,
             "key num_experts_per_tok: exceeds the experts");
    cfg_fail("{\"model_type\":\"mixtral\"," L ",\"num_key_value_heads\":2,"
             "\"num_local_experts\":0}", FG_ERR_CORRUPT,
             "key num_local_experts: must be an integer in [1, 1024]");
    /* Qwen3-MoE: every decoder_sparse_step-th layer sparse, less mlp_only_layers */
    const char *q3 = "{\"model_type\":\"qwen3_moe\"," L ",\"decoder_sparse_step\":2,"
                     "\"moe_intermediate_size\":24,\"num_experts\":16}";
    ck_assert_int_eq(fg_model_config_parse(q3, strlen(q3), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 16 && c.top_k == 8 && !c.norm_topk && c.moe_ffn == 24);
    ck_assert(!fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1));
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 4); /* layer 0: dense */
    ck_assert(t[1].role == FG_ROLE_W_GATE && t[1].dims[0] == c.ffn && !t[1].blocks);
    ck_assert(!fg_arch_find("qwen3_moe")->stacked(&c, "model.layers.0.mlp.experts.1.up_proj.weight", st,
                                         &b)); /* a dense layer has no experts */
    const char *q3b = "{\"model_type\":\"qwen3_moe\"," L ",\"mlp_only_layers\":[1],"
                      "\"norm_topk_prob\":true}";
    ck_assert_int_eq(fg_model_config_parse(q3b, strlen(q3b), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_sparse(&c, 0) && !fg_model_layer_sparse(&c, 1) && c.norm_topk);
    cfg_fail("{\"model_type\":\"qwen3_moe\"," L ",\"mlp_only_layers\":[2]}", FG_ERR_CORRUPT,
             "key mlp_only_layers: entries must be layer indices below num_hidden_layers");
    /* Qwen2-MoE: q/k/v biases by default, the shared expert and its gate; num_experts 0 */
    const char *q2 = "{\"model_type\":\"qwen2_moe\"," L ",\"num_key_value_heads\":2,"
                     "\"shared_expert_intermediate_size\":40}";
    ck_assert_int_eq(fg_model_config_parse(q2, strlen(q2), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 60 && c.top_k == 4 && c.shared_ffn == 40 && c.qkv_bias);
    ck_assert(!c.out_bias && c.moe_ffn == 1408);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 9);
    ck_assert(t[5].role == FG_ROLE_W_GATE && t[5].dims[0] == 40 && t[8].dims[0] == 1);
    ck_assert_str_eq(t[8].name, "model.layers.0.mlp.shared_expert_gate.weight");
    const char *q2d = "{\"model_type\":\"qwen2_moe\"," L ",\"num_key_value_heads\":2,"
                      "\"num_experts\":0,\"qkv_bias\":false}";
    ck_assert_int_eq(fg_model_config_parse(q2d, strlen(q2d), NULL, &c, &err), FG_OK);
    ck_assert(!c.n_experts && !fg_model_layer_sparse(&c, 0) && !c.qkv_bias);
    /* GraniteMoE: GraniteMoeConfig's defaults (8 experts, top 2 renormalized, each
     * intermediate_size wide, on every layer), Granite's multipliers; its checkpoint names */
    const char *gmo = "{\"model_type\":\"granitemoe\"," L ",\"residual_multiplier\":0.5}";
    ck_assert_int_eq(fg_model_config_parse(gmo, strlen(gmo), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 8 && c.top_k == 2 && c.norm_topk && c.moe_ffn == c.ffn);
    ck_assert(c.residual_scale == 0.5f && c.n_kv_heads == c.n_heads && !c.tied_head);
    ck_assert(fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1));
    char gn[FG_TENSOR_NAME_MAX], parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
    ck_assert_str_eq(fg_arch_find("granitemoe")->canonical_name(
                         "model.layers.1.block_sparse_moe.router.layer.weight", gn, sizeof gn),
                     "model.layers.1.mlp.gate.weight");
    ck_assert_str_eq(fg_arch_find("granitemoe")->canonical_name(
                         "model.layers.1.block_sparse_moe.input_linear.weight", gn, sizeof gn),
                     "model.layers.1.mlp.experts.gate_up_proj");
    ck_assert_uint_eq(fg_arch_find("granitemoe")->fused(&c, gn, parts, NULL), 2);
    ck_assert_str_eq(parts[1], "model.layers.1.mlp.experts.up_proj.weight");
    ck_assert_uint_eq(fg_arch_find("granitemoe")->fused(&c, "model.layers.2.mlp.experts.down_proj",
                                               parts, NULL), 0); /* past the layers */
    uint32_t layout = 9;
    ck_assert_uint_eq(fg_arch_find("mixtral")->fused(&c, "model.layers.0.mlp.experts.down_proj", parts,
                                            &layout), 1);
    ck_assert_uint_eq(layout, 0);
    /* OLMoE: OlmoeConfig's defaults, experts intermediate_size wide on every layer, whole q/k
     * norms; clip_qkv only null; num_experts 0 is no dense model here */
    const char *oe = "{\"model_type\":\"olmoe\"," L ",\"clip_qkv\":null}";
    ck_assert_int_eq(fg_model_config_parse(oe, strlen(oe), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 64 && c.top_k == 8 && !c.norm_topk && c.moe_ffn == c.ffn);
    ck_assert(c.n_kv_heads == c.n_heads && c.eos_id == 50279 && c.bos_id < 0 && c.pad_id == 1);
    ck_assert(c.qk_norm == FG_QK_NORM_WHOLE && !c.sandwich && c.norm_eps == 1e-5f);
    ck_assert(fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1));
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 1, t), 7); /* layer 0's attention */
    ck_assert(t[0].role == FG_ROLE_NORM_W && t[5].role == FG_ROLE_Q_NORM);
    ck_assert_uint_eq(t[5].dims[0], (uint64_t)c.n_heads * c.head_dim);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 5);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[2].blocks == 64);
    const char *oe2 = "{\"model_type\":\"olmoe\"," L ",\"num_experts\":4,"
                      "\"num_experts_per_tok\":2,\"norm_topk_prob\":true}";
    ck_assert_int_eq(fg_model_config_parse(oe2, strlen(oe2), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 4 && c.top_k == 2 && c.norm_topk);
    cfg_fail("{\"model_type\":\"olmoe\"," L ",\"clip_qkv\":8.0}", FG_ERR_CORRUPT,
             "key clip_qkv: is not supported");
    cfg_fail("{\"model_type\":\"olmoe\"," L ",\"num_experts\":0}", FG_ERR_CORRUPT,
             "key num_experts: must be an integer in [1, 1024]");
}
END_TEST
#undef L

/* A mixture's experts, one checkpoint tensor per expert and projection, are the blocks of one
 * stacked tensor each: every block present once with an expert's shape; a missing one is named
 * by its block, the whole tensor beside its blocks is a second spelling. */
static int check_moe(const char *dir, const char *const *omit, const char *const *extra,
                     uint32_t n, fgc_source *src, fg_err *err)
{
    static const char cfg[] = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":16,\"hidden_size\":8,"
                              "\"num_hidden_layers\":1,\"intermediate_size\":6,"
                              "\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                              "\"head_dim\":4,\"max_position_embeddings\":32,"
                              "\"num_experts\":2,\"num_experts_per_tok\":1,"
                              "\"moe_intermediate_size\":4}";
    return check_written(dir, cfg, omit, extra, n, 0, src, NULL, err);
}

/* Every expert of a layer in one tensor, [experts, rows, cols] (GraniteMoE's input_linear and
 * output_linear, transformers 5's mlp.experts.gate_up_proj / down_proj): block e of each stacked
 * spec comes from its rows e * rows + (the parts before it); a wrong shape, the same experts
 * also one by one, or a missing down are one line each. */
/* gpt-oss: GptOssConfig's defaults (q/k/v/o biases, sinks, every other layer sliding at 128,
 * YaRN factor 32 over 4096 positions untruncated, theta 150000, 128 experts top 4 renormalized
 * with biases, the clamped SwiGLU 1.702 / 7); its experts as transformers holds them, x . W:
 * gate_up_proj [experts, hidden, 2 x width] with gate and up columns alternating, read strided;
 * the untransposed shape refused by its shape. */
START_TEST(gpt_oss_experts)
{
    fg_hparams c;
    fg_err err;
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    const char *d = "{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":16,\"max_position_embeddings\":131072}";
    ck_assert_int_eq(fg_model_config_parse(d, strlen(d), NULL, &c, &err), FG_OK);
    ck_assert(c.qkv_bias && c.out_bias && c.attn_sinks && c.moe_bias && c.norm_topk);
    ck_assert(c.n_kv_heads == 8 && c.head_dim == 64 && c.n_experts == 128 && c.top_k == 4);
    ck_assert(c.moe_ffn == 48 && c.act == FG_ACT_SWIGLU_OAI);
    ck_assert(c.act_alpha == 1.702f && c.act_limit == 7.0f);
    ck_assert(c.rope.scaling == FG_ROPE_YARN && c.rope.factor == 32.0f && !c.rope.truncate);
    ck_assert(c.rope.orig_max_pos == 4096 && c.rope.theta == 150000.0f);
    ck_assert(fg_model_layer_window(&c, 0) == 128 && fg_model_layer_window(&c, 1) == 0);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 1, t), 10); /* layer 0's attention */
    ck_assert(t[9].role == FG_ROLE_SINKS && t[9].dims[0] == 16 && t[8].role == FG_ROLE_BO);
    ck_assert_str_eq(t[9].name, "model.layers.0.self_attn.sinks");
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 9);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[2].role == FG_ROLE_B_ROUTER);
    ck_assert(t[4].role == FG_ROLE_EXP_B_GATE && t[4].dims[0] == 128 * 48 && t[4].blocks == 128);
    ck_assert(t[8].role == FG_ROLE_EXP_B_DOWN && t[8].dims[0] == 128 * 32);
    ck_assert_str_eq(t[1].name, "model.layers.0.mlp.router.weight");
    const char *g = "{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":8,\"max_position_embeddings\":64,"
                    "\"attention_bias\":false,\"swiglu_limit\":3.5,\"swiglu_alpha\":2,"
                    "\"layer_types\":[\"full_attention\",\"sliding_attention\"],"
                    "\"sliding_window\":8,\"rope_theta\":1000,\"num_local_experts\":8,"
                    "\"rope_scaling\":null}";
    ck_assert_int_eq(fg_model_config_parse(g, strlen(g), NULL, &c, &err), FG_OK);
    ck_assert(!c.qkv_bias && !c.out_bias && c.act_limit == 3.5f && c.act_alpha == 2.0f);
    ck_assert(fg_model_layer_window(&c, 0) == 0 && fg_model_layer_window(&c, 1) == 8);
    ck_assert(c.n_experts == 8 && c.rope.theta == 1000.0f && c.rope.scaling == FG_ROPE_YARN);
    cfg_fail("{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
             "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8,"
             "\"max_position_embeddings\":64,\"swiglu_limit\":-1}", FG_ERR_CORRUPT,
             "key swiglu_limit");
    tu_tmpdir_create();
    static const char *const cfg = "{\"model_type\":\"gpt_oss\",\"vocab_size\":16,"
                                   "\"hidden_size\":8,\"num_hidden_layers\":1,"
                                   "\"intermediate_size\":6,\"num_attention_heads\":2,"
                                   "\"num_key_value_heads\":1,\"head_dim\":4,"
                                   "\"max_position_embeddings\":32,\"num_local_experts\":2,"
                                   "\"num_experts_per_tok\":1}";
    static const char *const omit[] = {".experts.", NULL};
    static const char *const ok[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x12",
                                     "model.layers.0.mlp.experts.gate_up_proj_bias@2x12",
                                     "model.layers.0.mlp.experts.down_proj@2x6x8",
                                     "model.layers.0.mlp.experts.down_proj_bias@2x8"};
    static const char *const untransposed[] = {
        "model.layers.0.mlp.experts.gate_up_proj@2x12x8",
        "model.layers.0.mlp.experts.gate_up_proj_bias@2x12",
        "model.layers.0.mlp.experts.down_proj@2x6x8",
        "model.layers.0.mlp.experts.down_proj_bias@2x8"};
    fgc_source src[24] = {{0, 0, NULL}}; /* 22 specs: embed | 10 | 9 | norm, head */
    ck_assert_int_eq(check_written("oss", cfg, omit, ok, 4, 0, src, NULL, &err), FG_OK);
    /* expert e's gate (spec 14): element (r, c) at e * 96 + 2r + 12c; up (16) one column on;
     * down (18): e * 48 + r + 8c; the biases: gate (15) e * 12 + 2r, down (19) contiguous */
    for (uint32_t e = 0; e < 2; e++) {
        const fgc_part *gw = &src[14].parts[e], *uw = &src[16].parts[e];
        const fgc_part *dw = &src[18].parts[e], *gb = &src[15].parts[e];
        const fgc_part *db = &src[19].parts[e];
        ck_assert(gw->first == e * 96 && gw->rs == 2 && gw->cs == 12);
        ck_assert(uw->first == e * 96 + 1 && uw->rs == 2 && uw->cs == 12);
        ck_assert(dw->first == e * 48 && dw->rs == 1 && dw->cs == 8);
        ck_assert(gb->first == e * 12 && gb->rs == 2 && src[17].parts[e].first == e * 12 + 1);
        ck_assert(db->first == e * 8 && db->rs == 0);
    }
    ck_assert(src[9].index != FGC_NONE && src[12].index != FGC_NONE); /* sinks, router bias */
    fgc_sources_free(src, 22);
    ck_assert_int_eq(check_written("oss-t", cfg, omit, untransposed, 4, 0, NULL, NULL, &err),
                     FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [2, 12, 8], config.json implies "
                         "[2, 8, 12]"), "%s", err.msg);
    /* OpenAI's MXFP4 files: [experts, rows, cols / 32, 16] codes, [experts, rows, cols / 32]
     * exponents, either first; the codes' rows as the model multiplies them (gate and up
     * alternating); each needs the other, as U8 */
    static const char *const mcfg = "{\"model_type\":\"gpt_oss\",\"vocab_size\":16,"
                                    "\"hidden_size\":64,\"num_hidden_layers\":1,"
                                    "\"intermediate_size\":32,\"num_attention_heads\":2,"
                                    "\"num_key_value_heads\":1,\"head_dim\":4,"
                                    "\"max_position_embeddings\":32,\"num_local_experts\":2,"
                                    "\"num_experts_per_tok\":1,\"quantization_config\":"
                                    "{\"quant_method\":\"mxfp4\"}}";
#define MX(n, shape) "model.layers.0.mlp.experts." n "@" shape
    static const char *const mx[] = {MX("gate_up_proj_scales", "2x64x2:U8"),
                                     MX("gate_up_proj_blocks", "2x64x2x16:U8"),
                                     MX("gate_up_proj_bias", "2x64"),
                                     MX("down_proj_blocks", "2x64x1x16:U8"),
                                     MX("down_proj_scales", "2x64x1:U8"),
                                     MX("down_proj_bias", "2x64")};
    static const char *const noscale[] = {MX("gate_up_proj_blocks", "2x64x2x16:U8"),
                                          MX("gate_up_proj_bias", "2x64"),
                                          MX("down_proj_blocks", "2x64x1x16:U8"),
                                          MX("down_proj_scales", "2x64x1:U8"),
                                          MX("down_proj_bias", "2x64")};
    static const char *const f16[] = {MX("gate_up_proj_scales", "2x64x2:U8"),
                                      MX("gate_up_proj_blocks", "2x64x2x16"),
                                      MX("gate_up_proj_bias", "2x64"),
                                      MX("down_proj_blocks", "2x64x1x16:U8"),
                                      MX("down_proj_scales", "2x64x1:U8"),
                                      MX("down_proj_bias", "2x64")};
#undef MX
    ck_assert_int_eq(check_written("mx", mcfg, omit, mx, 6, 0, src, NULL, &err), FG_OK);
    for (uint32_t e = 0; e < 2; e++) { /* up: the odd rows of 64 values; down: contiguous */
        const fgc_part *u = &src[16].parts[e], *dn = &src[18].parts[e];
        ck_assert(u->mxfp4 && u->first == e * 4096 + 64 && u->rs == 128 && u->cs == 1);
        ck_assert(u->scales != FGC_NONE && u->scales != u->index);
        ck_assert(dn->mxfp4 && dn->first == e * 2048 && dn->rs == 32 && dn->scales != FGC_NONE);
    }
    fgc_sources_free(src, 22);
    ck_assert_int_eq(check_written("mx-noscale", mcfg, omit, noscale, 5, 0, NULL, NULL, &err),
                     FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "the MXFP4 scales of tensor "
                         "model.layers.0.mlp.experts.gate_proj.weight are missing "
                         "(model.layers.0.mlp.experts.gate_up_proj_blocks)"), "%s", err.msg);
    ck_assert_int_eq(check_written("mx-f16", mcfg, omit, f16, 6, 0, NULL, NULL, &err),
                     FG_ERR_BAD_ENUM);
    ck_assert_msg(strstr(err.msg, "gate_up_proj_blocks has dtype F16; MXFP4 blocks are U8"),
                  "%s", err.msg);
    tu_tmpdir_remove();
}
END_TEST

/* GLM-4 MoE: Glm4MoeConfig's defaults (128 routed experts top 8 by sigmoid scores, one shared
 * expert, layer 0 dense, half the head rotated, biases on q/k/v only), its group and scaling
 * keys checked; the multi-token prediction layer's tensors after the last layer skipped, one
 * layer further refused */
START_TEST(glm4_moe_configs)
{
    fg_hparams c;
    fg_err err;
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    const char *d = "{\"model_type\":\"glm4_moe\",\"vocab_size\":64,\"hidden_size\":64,"
                    "\"num_hidden_layers\":3,\"intermediate_size\":48,"
                    "\"num_attention_heads\":8,\"max_position_embeddings\":128,"
                    "\"attention_bias\":true}";
    ck_assert_int_eq(fg_model_config_parse(d, strlen(d), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 128 && c.top_k == 8 && c.moe_ffn == 1408 && c.shared_ffn == 1408);
    ck_assert(c.router_sigmoid && c.shared_plain && c.norm_topk && c.n_group == 1);
    ck_assert(c.qkv_bias && !c.out_bias && !c.qk_norm && c.rope.rot_dim == 4);
    ck_assert(!fg_model_layer_sparse(&c, 0) && fg_model_layer_sparse(&c, 1) && c.mtp_layers == 1);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 4, t), 9); /* layer 1's MLP */
    ck_assert(t[2].role == FG_ROLE_ROUTER_CORR && t[2].dims[0] == 128);
    ck_assert_str_eq(t[2].name, "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(t[6].name, "model.layers.1.mlp.shared_experts.gate_proj.weight");
    ck_assert(t[8].role == FG_ROLE_W_DOWN); /* no shared gate */
    ck_assert(fg_arch_find("glm4_moe")->unused(&c, "model.layers.3.eh_proj.weight"));
    ck_assert(!fg_arch_find("glm4_moe")->unused(&c, "model.layers.4.eh_proj.weight"));
    ck_assert(!fg_arch_find("glm4_moe")->unused(&c, "model.layers.2.eh_proj.weight"));
    const char *g = "{\"model_type\":\"glm4_moe\",\"vocab_size\":64,\"hidden_size\":64,"
                    "\"num_hidden_layers\":3,\"intermediate_size\":48,"
                    "\"num_attention_heads\":8,\"max_position_embeddings\":128,"
                    "\"n_routed_experts\":16,\"num_experts_per_tok\":4,\"n_group\":4,"
                    "\"topk_group\":2,\"routed_scaling_factor\":2.5,\"n_shared_experts\":0,"
                    "\"first_k_dense_replace\":0,\"use_qk_norm\":true,"
                    "\"partial_rotary_factor\":1.0,\"num_nextn_predict_layers\":0}";
    ck_assert_int_eq(fg_model_config_parse(g, strlen(g), NULL, &c, &err), FG_OK);
    ck_assert(c.n_group == 4 && c.topk_group == 2 && c.routed_scale == 2.5f && !c.shared_ffn);
    ck_assert(fg_model_layer_sparse(&c, 0) && c.qk_norm == FG_QK_NORM_HEAD && c.rope.rot_dim == 8);
    ck_assert(!fg_arch_find("glm4_moe")->unused(&c, "model.layers.3.eh_proj.weight"));
#define G "{\"model_type\":\"glm4_moe\",\"vocab_size\":64,\"hidden_size\":64," \
          "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8," \
          "\"max_position_embeddings\":128,\"n_routed_experts\":16,\"num_experts_per_tok\":4"
    cfg_fail(G ",\"n_group\":3}", FG_ERR_CORRUPT, "key n_group: must divide n_routed_experts");
    cfg_fail(G ",\"n_group\":4,\"topk_group\":5}", FG_ERR_CORRUPT, "key topk_group: exceeds");
    cfg_fail(G ",\"n_group\":8,\"topk_group\":1}", FG_ERR_CORRUPT,
             "key num_experts_per_tok: exceeds the experts of topk_group groups");
    cfg_fail(G ",\"routed_scaling_factor\":0}", FG_ERR_CORRUPT, "key routed_scaling_factor");
    /* dots.llm1: Dots1Config's defaults (not renormalized, no dense layer, a window on the
     * layers from 62 on), Qwen3's q/k norms, its expert counts required */
    const char *d1 = "{\"model_type\":\"dots1\",\"vocab_size\":64,\"hidden_size\":64,"
                     "\"num_hidden_layers\":64,\"intermediate_size\":48,"
                     "\"num_attention_heads\":8,\"max_position_embeddings\":128,"
                     "\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
                     "\"n_shared_experts\":2,\"num_key_value_heads\":2}";
    ck_assert_int_eq(fg_model_config_parse(d1, strlen(d1), NULL, &c, &err), FG_OK);
    ck_assert(!c.norm_topk && fg_model_layer_sparse(&c, 0) && c.shared_ffn == 2 * 1408);
    ck_assert(c.qk_norm == FG_QK_NORM_HEAD && c.router_sigmoid && c.shared_plain && !c.mtp_layers);
    ck_assert(fg_model_layer_window(&c, 61) == 0 && fg_model_layer_window(&c, 62) == 4096);
    cfg_fail("{\"model_type\":\"dots1\",\"vocab_size\":64,\"hidden_size\":64,"
             "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8,"
             "\"max_position_embeddings\":128,\"n_routed_experts\":16,\"num_key_value_heads\":2,"
             "\"num_experts_per_tok\":4}", FG_ERR_CORRUPT, "key n_shared_experts: missing");
    /* n_shared_experts 0: transformers still writes the shared experts, 0 wide: accepted
     * empty, refused holding values */
    tu_tmpdir_create();
    static const char *const cfg = G ",\"n_shared_experts\":0,\"first_k_dense_replace\":1}";
    static const char *const empty[] = {"model.layers.1.mlp.shared_experts.gate_proj.weight@0x64",
                                        "model.layers.1.mlp.shared_experts.down_proj.weight@64x0"};
    static const char *const full[] = {"model.layers.1.mlp.shared_experts.gate_proj.weight@8x64"};
    ck_assert_int_eq(check_written("empty", cfg, NULL, empty, 2, 0, NULL, NULL, &err), FG_OK);
    ck_assert_int_eq(check_written("full", cfg, NULL, full, 1, 0, NULL, NULL, &err),
                     FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "shared_experts.gate_proj.weight holds 512 values; config.json "
                         "implies none"), "%s", err.msg);
    tu_tmpdir_remove();
#undef G
}
END_TEST

/* MiniMax-M2: MiniMaxM2Config's defaults (256 experts top 8 by sigmoid scores with the choice
 * bias, theta 5e6, whole-projection q/k norms, head_dim 128), the released files' rotary_dim;
 * the choice bias under its hub and transformers names */
START_TEST(minimax_m2_configs)
{
    fg_hparams c;
    fg_err err;
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    char nm[FG_TENSOR_NAME_MAX];
    const char *d = "{\"model_type\":\"minimax_m2\",\"vocab_size\":64,\"hidden_size\":64,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":8,\"max_position_embeddings\":128,"
                    "\"rotary_dim\":64}";
    ck_assert_int_eq(fg_model_config_parse(d, strlen(d), NULL, &c, &err), FG_OK);
    ck_assert(c.n_experts == 256 && c.top_k == 8 && c.moe_ffn == 48 && c.router_sigmoid);
    ck_assert(c.norm_topk && c.topk_eps == 0 && c.n_group == 1 && !c.shared_ffn);
    ck_assert(c.head_dim == 128 && c.rope.rot_dim == 64 && c.rope.theta == 5e6f);
    ck_assert(c.qk_norm == FG_QK_NORM_WHOLE && !c.qkv_bias && c.bos_id == 200034);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 6);
    ck_assert(t[2].role == FG_ROLE_ROUTER_CORR);
    ck_assert_str_eq(fg_arch_find("minimax_m2")->canonical_name(
                         "model.layers.1.block_sparse_moe.e_score_correction_bias", nm, sizeof nm),
                     "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(fg_arch_find("minimax_m2")->canonical_name(
                         "model.layers.1.mlp.e_score_correction_bias", nm, sizeof nm),
                     "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(fg_arch_find("minimax_m2")->canonical_name(
                         "model.layers.1.block_sparse_moe.experts.3.w2.weight", nm, sizeof nm),
                     "model.layers.1.mlp.experts.3.down_proj.weight");
    cfg_fail("{\"model_type\":\"minimax_m2\",\"vocab_size\":64,\"hidden_size\":64,"
             "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8,"
             "\"max_position_embeddings\":128,\"rotary_dim\":200}", FG_ERR_CORRUPT,
             "key rotary_dim");
}
END_TEST

/* OLMo 3: Olmo3Config's sliding layers (3 of every 4, window 4096) rotated with rope_theta
 * (default 5e5) unscaled, rope_scaling the full layers' only; or nested rope_parameters */
START_TEST(olmo3_configs)
{
    fg_hparams c;
    fg_err err;
    const char *d = "{\"model_type\":\"olmo3\",\"vocab_size\":64,\"hidden_size\":64,"
                    "\"num_hidden_layers\":8,\"intermediate_size\":48,"
                    "\"num_attention_heads\":4,\"max_position_embeddings\":128,"
                    "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8,"
                    "\"original_max_position_embeddings\":16}}";
    ck_assert_int_eq(fg_model_config_parse(d, strlen(d), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_windowed_layers(&c) == 6 && fg_model_layer_window(&c, 0) == 4096);
    ck_assert(fg_model_layer_window(&c, 3) == 0 && fg_model_layer_window(&c, 7) == 0);
    ck_assert(c.local_rope && c.rope_local.theta == 5e5f && c.rope_local.scaling == FG_ROPE_NONE);
    ck_assert(c.rope.theta == 5e5f && c.rope.scaling == FG_ROPE_YARN);
    ck_assert(c.sandwich == FG_SANDWICH_AFTER && c.qk_norm == FG_QK_NORM_WHOLE);
    ck_assert(c.eos_id == 50279);
    const char *n = "{\"model_type\":\"olmo3\",\"vocab_size\":64,\"hidden_size\":64,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":4,\"max_position_embeddings\":128,"
                    "\"layer_types\":[\"full_attention\",\"sliding_attention\"],"
                    "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\","
                    "\"factor\":2,\"rope_theta\":1000},\"sliding_attention\":"
                    "{\"rope_type\":\"default\",\"rope_theta\":1000}}}";
    ck_assert_int_eq(fg_model_config_parse(n, strlen(n), NULL, &c, &err), FG_OK);
    ck_assert(fg_model_layer_window(&c, 0) == 0 && fg_model_layer_window(&c, 1) == 4096);
    ck_assert(c.rope.scaling == FG_ROPE_LINEAR && c.rope_local.theta == 1000.0f);
}
END_TEST

START_TEST(moe_batched_tensors)
{
    tu_tmpdir_create();
    static const char *const stacked[] = {".experts.", NULL};
    static const char *const ok[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x8",
                                     "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const shape[] = {"model.layers.0.mlp.experts.gate_up_proj@2x6x8",
                                        "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const flat[] = {"model.layers.0.mlp.experts.gate_up_proj@16x8",
                                       "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const twice[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x8",
                                        "model.layers.0.mlp.experts.down_proj@2x8x4",
                                        "model.layers.0.mlp.experts.1.up_proj.weight@4x8"};
    fgc_source src[16] = {{0, 0, NULL}}; /* 15 specs */
    fg_err err;
    ck_assert_int_eq(check_moe("ok", stacked, ok, 2, src, &err), FG_OK);
    /* gate (spec 10): rows 0 and 8 (elements 0 and 64); up (11): 4 and 12; down (12): 0 and 8
     * (of 4 values), one tensor each, the rows contiguous (rs 0) */
    ck_assert(src[10].index == FGC_STACKED && src[10].parts[0].first == 0 &&
              src[10].parts[1].first == 64 && src[10].parts[0].index == src[11].parts[1].index);
    ck_assert(src[11].parts[0].first == 32 && src[11].parts[1].first == 96);
    ck_assert(src[12].parts[1].first == 32 && src[12].parts[0].index != src[10].parts[0].index);
    ck_assert(!src[10].parts[1].rs && !src[11].parts[0].rs && !src[12].parts[1].rs);
    fgc_sources_free(src, 15);
    ck_assert_int_eq(check_moe("shape", stacked, shape, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [2, 6, 8], config.json implies "
                         "[2, 8, 8]"), "%s", err.msg);
    /* the experts flattened into 2-D rows: refused by its shape, never read part after part */
    ck_assert_int_eq(check_moe("flat", stacked, flat, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [16, 8], config.json implies "
                         "[2, 8, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_moe("twice", stacked, twice, 3, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "second spelling of block 1 of "
                         "model.layers.0.mlp.experts.up_proj.weight"), "%s", err.msg);
    ck_assert_int_eq(check_moe("nodown", stacked, ok, 1, NULL, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.mlp.experts.down_proj.weight "
                         "(required by config.json) is missing"), "%s", err.msg);
    tu_tmpdir_remove();
}
END_TEST

START_TEST(moe_stacked_tensors)
{
    tu_tmpdir_create();
    static const char *const stacked[] = {".experts.gate_proj", ".experts.up_proj",
                                          ".experts.down_proj", NULL};
    static const char *const gate[] = {".experts.gate_proj", NULL};
#define EX(e, p, shape) "model.layers.0.mlp.experts." #e "." #p ".weight@" shape
    static const char *const all[] = {EX(0, gate_proj, "4x8"), EX(1, gate_proj, "4x8"),
                                      EX(0, up_proj, "4x8"), EX(1, up_proj, "4x8"),
                                      EX(0, down_proj, "8x4"), EX(1, down_proj, "8x4")};
    static const char *const bad_shape[] = {EX(0, gate_proj, "5x8"), EX(1, gate_proj, "4x8"),
                                            EX(0, up_proj, "4x8"), EX(1, up_proj, "4x8"),
                                            EX(0, down_proj, "8x4"), EX(1, down_proj, "8x4")};
    static const char *const past[] = {EX(2, gate_proj, "4x8")};
#undef EX
    fgc_source src[16] = {{0, 0, NULL}}; /* 15 specs */
    fg_err err;
    /* embed | norm, q, k, v, o, q_norm, k_norm | norm, router, gate, up, down | norm, head */
    ck_assert_int_eq(check_moe("ok", stacked, all, 6, src, &err), FG_OK);
    for (int i = 10; i <= 12; i++)
        ck_assert(src[i].index == FGC_STACKED && src[i].parts &&
                  src[i].parts[0].index != src[i].parts[1].index && !src[i].parts[1].first);
    fgc_sources_free(src, 15);
    ck_assert_int_eq(check_moe("whole", NULL, NULL, 0, src, &err), FG_OK); /* stacked as given */
    ck_assert(src[10].index != FGC_STACKED && !src[10].parts);
    ck_assert_int_eq(check_moe("missing", stacked, all, 5, src, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "block 1 of tensor model.layers.0.mlp.experts.down_proj.weight"),
                  "%s", err.msg);
    ck_assert_int_eq(check_moe("shape", stacked, bad_shape, 6, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "experts.0.gate_proj.weight has shape [5, 8], config.json "
                         "implies [4, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_moe("twice", gate + 1, all, 6, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "second spelling"), "%s", err.msg);
    ck_assert_int_eq(check_moe("past", stacked, past, 1, NULL, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "experts.2.gate_proj.weight is not a Qwen3-MoE tensor"), "%s",
                  err.msg);
    tu_tmpdir_remove();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, opt_configs_and_tensor_sets);
    tcase_add_test(tc, phi3_fused_tensors);
    tcase_add_test(tc, moe_configs);
    tcase_add_test(tc, moe_stacked_tensors);
    tcase_add_test(tc, moe_batched_tensors);
    tcase_add_test(tc, gpt_oss_experts);
    tcase_add_test(tc, glm4_moe_configs);
    tcase_add_test(tc, minimax_m2_configs);
    tcase_add_test(tc, olmo3_configs);
    tcase_add_test(tc, phi3_configs);
    tcase_add_test(tc, gemma3_configs);
    tcase_add_test(tc, opt_config_errors);
    tcase_add_test(tc, canonical_names);
    tcase_add_test(tc, llama_family_configs);
    tcase_add_test(tc, llama_inv_freq_buffers);
    tcase_add_test(tc, generation_config_eos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
