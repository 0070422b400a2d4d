/* gguf_config.c - config.json synthesized from a GGUF file's metadata (see gguf.h).
 *
 * A row per general.architecture fg maps: its Hugging Face model_type and class, whether
 * llama.cpp permuted its Q/K rows, and the features whose keys it reads. Each key below is the
 * GGUF key (under "{arch}.") that gives a config.json key, as convert_hf_to_gguf.py writes them;
 * model/ then reads the result as it reads any config.json, with the family's defaults for what is
 * absent. Where llama.cpp runs a GGUF file by a rule of its own rather than a key, the config
 * says that rule, so fg runs the file as llama.cpp does:
 *   - Qwen3-MoE's router weights renormalized, Qwen2-MoE's not (expert_weights_norm when
 *     present); the sparse layers are those holding a router (blk.N.ffn_gate_inp), the others
 *     mlp_only_layers;
 *   - Gemma 2 / 3: q scaled by attention.scale when present, else by 1 / sqrt(head_dim) (by
 *     1 / sqrt(hidden / heads) for the 27B shapes: 46 layers of 4608, 62 of 5376); Gemma 3's
 *     sliding layers all but every 6th unless attention.sliding_window_pattern (a count, or a
 *     bool per layer) says otherwise, rotated with rope.freq_base_swa (else 10000); Gemma 2's
 *     every other layer from layer 0;
 *   - attention biases (attention_bias / qkv_bias) from the presence of blk.0.attn_q.bias.
 *   - glm4moe: the MTP layers counted in block_count taken off (put_glm_moe);
 *   - deepseek2: multi-head latent attention in both of the converter's forms, V2's or V3's
 *     router by the gating function, YaRN with mscale = mscale_all_dim (put_mla).
 *   - llama: Llama 3's rope scaling from its rope_freqs tensor (put_rope_freqs);
 *   - YaRN by its keys on any architecture (put_rope_scaling); Phi-3's longrope from its
 *     rope_factors_long / _short tensors (put_longrope);
 *   - gpt-oss: its experts, the SwiGLU clamp (7, or swiglu_clamp_exp), the sliding window on
 *     every other layer, YaRN untruncated as transformers runs it (put_oss, put_rope_scaling).
 * What the mapping cannot express yet is refused by name rather than guessed: rope scaling
 * types other than linear and yarn, YaRN's yarn_ext_factor other than 1 or a
 * yarn_log_multiplier (but deepseek2's), rope factors other than Llama 3's and Phi-3's forms, a
 * partial rotary dimension but for phi3 and glm4 (partial_rotary_factor), a swiglu_clamp_exp
 * that differs between layers.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "gguf.h"

enum {
    F_MOE = 1,      /* expert_count ... */
    F_GEMMA = 2,    /* the tanh GELU, soft-capping, q's scale */
    F_WINDOW = 4,   /* attention.sliding_window (0: none) */
    F_GRANITE = 8,  /* the four multipliers */
    F_NORM_TOPK = 16, /* llama.cpp renormalizes the chosen experts' weights */
    F_PARTIAL = 32, /* rope.dimension_count below the head dimension: partial_rotary_factor */
    F_MLA = 64,     /* deepseek2: multi-head latent attention, its experts and YaRN (put_mla) */
    F_GLM_MOE = 128, /* glm4moe: V3's router, shared experts, the MTP layer (put_glm_moe) */
    F_OSS = 256,    /* gpt-oss: biased experts, the clamped SwiGLU, sinks, its YaRN (put_oss) */
};

static const struct arch_row {
    const char *arch, *model_type, *hf_class;
    int permuted; /* convert_hf_to_gguf.py's LlamaModel permutes q_proj and k_proj */
    unsigned features;
} arch_rows[] = {
    {"llama", "llama", "LlamaForCausalLM", 1, 0},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", 0, 0},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", 0, 0},
    {"qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", 0, F_MOE},
    {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", 0, F_MOE | F_NORM_TOPK},
    {"gemma", "gemma", "GemmaForCausalLM", 0, F_GEMMA},
    {"gemma2", "gemma2", "Gemma2ForCausalLM", 0, F_GEMMA | F_WINDOW},
    {"gemma3", "gemma3_text", "Gemma3ForCausalLM", 0, F_GEMMA | F_WINDOW},
    {"phi3", "phi3", "Phi3ForCausalLM", 0, F_WINDOW | F_PARTIAL},
    {"glm4", "glm4", "Glm4ForCausalLM", 0, F_PARTIAL},
    {"olmo2", "olmo2", "Olmo2ForCausalLM", 0, 0},
    {"granite", "granite", "GraniteForCausalLM", 1, F_GRANITE},
    /* (deepseek_v3 / DeepseekV3ForCausalLM when the gating is sigmoid: put_mla) */
    {"deepseek2", "deepseek_v2", "DeepseekV2ForCausalLM", 0, F_MLA},
    {"glm4moe", "glm4_moe", "Glm4MoeForCausalLM", 0, F_GLM_MOE | F_PARTIAL},
    {"gpt-oss", "gpt_oss", "GptOssForCausalLM", 0, F_OSS},
};

static const struct { const char *gguf, *hf; int required; } uint_keys[] = {
    {"block_count", "num_hidden_layers", 1},
    {"embedding_length", "hidden_size", 1},
    {"feed_forward_length", "intermediate_size", 1},
    {"attention.head_count", "num_attention_heads", 1},
    {"attention.head_count_kv", "num_key_value_heads", 0},
    {"context_length", "max_position_embeddings", 1},
    {"attention.key_length", "head_dim", 0},
};

static const struct { const char *gguf, *hf; unsigned features; } float_keys[] = {
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", 0},
    {"rope.freq_base", "rope_theta", 0},
    {"attn_logit_softcapping", "attn_logit_softcapping", F_GEMMA},
    {"final_logit_softcapping", "final_logit_softcapping", F_GEMMA},
    {"attention.scale", "attention_multiplier", F_GRANITE},
    {"embedding_scale", "embedding_multiplier", F_GRANITE},
    {"residual_scale", "residual_multiplier", F_GRANITE},
    {"logit_scale", "logits_scaling", F_GRANITE},
};

static const struct { const char *gguf, *hf; } token_keys[] = {
    {"tokenizer.ggml.bos_token_id", "bos_token_id"},
    {"tokenizer.ggml.eos_token_id", "eos_token_id"},
    {"tokenizer.ggml.padding_token_id", "pad_token_id"},
};

static int key_err(fg_err *err, const char *label, const char *key, const char *why)
{
    return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s %s", label, key, why);
}

/* The integer and float keys of row r into cfg. */
static int put_numbers(const ck_gguf *g, const struct arch_row *r, const char *label, json_t *cfg,
                       fg_err *err)
{
    const char *arch = r->arch;
    char key[128];
    for (size_t i = 0; i < sizeof uint_keys / sizeof uint_keys[0]; i++) {
        uint64_t v;
        if ((r->features & F_MLA) && !uint_keys[i].required)
            continue; /* (MLA's key length and one KV head are put_mla's) */
        snprintf(key, sizeof key, "%s.%s", arch, uint_keys[i].gguf);
        int rc = ck_gguf_uint(g, key, &v);
        if (rc == FG_ERR_NOT_FOUND && !uint_keys[i].required)
            continue;
        if (rc || v > UINT32_MAX)
            return key_err(err, label, key, rc == FG_ERR_NOT_FOUND ? "is missing"
                                            : "must be an integer from 0 to 2^32 - 1");
        json_object_set_new(cfg, uint_keys[i].hf, json_integer((json_int_t)v));
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof float_keys[0]; i++) {
        double v;
        if (float_keys[i].features && !(float_keys[i].features & r->features))
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, float_keys[i].gguf);
        int rc = ck_gguf_float(g, key, &v);
        if (rc == FG_ERR_BAD_ENUM)
            return key_err(err, label, key, "must be a float");
        if (rc == FG_OK) /* (an F32 widened exactly: the config reader narrows it back) */
            json_object_set_new(cfg, float_keys[i].hf, json_real(v));
    }
    for (size_t i = 0; i < sizeof token_keys / sizeof token_keys[0]; i++) {
        uint64_t v;
        int rc = ck_gguf_uint(g, token_keys[i].gguf, &v);
        if (rc == FG_ERR_BAD_ENUM || (rc == FG_OK && v > INT32_MAX))
            return key_err(err, label, token_keys[i].gguf, "must be a token id");
        if (rc == FG_OK)
            json_object_set_new(cfg, token_keys[i].hf, json_integer((json_int_t)v));
    }
    return FG_OK;
}

/* What the mapping does not express yet, refused by its key. */
static int refuse_unmapped(const ck_gguf *g, const struct arch_row *r, const char *label,
                           fg_err *err)
{
    const char *arch = r->arch;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *s = ck_gguf_str(g, key);
    if (s && strcmp(s, "none") != 0 && strcmp(s, "linear") != 0 && strcmp(s, "yarn") != 0)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s is '%.40s': fg maps GGUF rope "
                          "scaling 'linear' and 'yarn' (and Phi-3's longrope, by its "
                          "rope_factors tensors) so far", label, key, s);
    if (r->features & F_MLA)
        return FG_OK; /* (put_mla reads its experts and rotary dims) */
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if (!(r->features & (F_MOE | F_GLM_MOE | F_OSS)) && ck_gguf_get(g, key))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s: fg maps GGUF mixtures of "
                          "experts for qwen2moe, qwen3moe, glm4moe, deepseek2 and gpt-oss so far",
                          label, key);
    uint64_t rot, heads, hidden, hd = 0;
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    if (ck_gguf_uint(g, key, &rot) != FG_OK)
        return FG_OK;
    char k2[128], k3[128], k4[128];
    snprintf(k2, sizeof k2, "%s.attention.head_count", arch);
    snprintf(k3, sizeof k3, "%s.embedding_length", arch);
    snprintf(k4, sizeof k4, "%s.attention.key_length", arch);
    if (ck_gguf_uint(g, k2, &heads) || ck_gguf_uint(g, k3, &hidden) || !heads)
        return FG_OK; /* (put_numbers names them) */
    if (ck_gguf_uint(g, k4, &hd) != FG_OK)
        hd = hidden / heads;
    if (rot != hd && (!(r->features & F_PARTIAL) || rot > hd || rot % 2 || !rot))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s is %llu, not the head "
                          "dimension %llu: fg maps partial rotary from GGUF for phi3 and glm4 "
                          "(an even count up to the head dimension)", label, key,
                          (unsigned long long)rot, (unsigned long long)hd);
    return FG_OK;
}

/* vocab_size from the embedding's rows; tie_word_embeddings when there is no output tensor */
static int put_shapes(const fg_ckpt *ck, const char *label, json_t *cfg, fg_err *err)
{
    uint32_t i;
    const fg_ckpt_tensor *emb = fg_ckpt_find(ck, "model.embed_tokens.weight", &i) == FG_OK
                                    ? fg_ckpt_tensor_at(ck, i) : NULL;
    int head = fg_ckpt_find(ck, "lm_head.weight", &i) == FG_OK;
    if (!emb || emb->n_dims != 2)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no 2-dimensional tensor token_embd.weight",
                          label);
    json_object_set_new(cfg, "vocab_size", json_integer((json_int_t)emb->dims[0]));
    json_object_set_new(cfg, "tie_word_embeddings", json_boolean(!head));
    return FG_OK;
}


/* An optional u32 key {arch}.<k> as config key hf (absent: nothing; present: v <= max) */
static int put_uint(const ck_gguf *g, const char *arch, const char *k, const char *hf,
                    uint64_t max, const char *label, json_t *cfg, uint64_t *out, fg_err *err)
{
    char key[128];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, k);
    int rc = ck_gguf_uint(g, key, &v);
    if (rc == FG_ERR_NOT_FOUND)
        return FG_ERR_NOT_FOUND;
    if (rc || v > max)
        return key_err(err, label, key, "must be an integer in range");
    if (hf)
        json_object_set_new(cfg, hf, json_integer((json_int_t)v));
    if (out)
        *out = v;
    return FG_OK;
}

/* The router's expert groups (DeepSeek-V3's and GLM-4.5's group-limited choice): n_group and
 * topk_group from expert_group_count / expert_group_used_count, 1 each when absent. */
static int put_groups(const ck_gguf *g, const char *a, const char *label, json_t *cfg,
                      uint64_t *groups, fg_err *err)
{
    uint64_t used = 1;
    int rc;
    *groups = 1;
    if ((rc = put_uint(g, a, "expert_group_count", NULL, UINT32_MAX, label, cfg, groups, err)) &&
        rc != FG_ERR_NOT_FOUND)
        return rc;
    if ((rc = put_uint(g, a, "expert_group_used_count", NULL, UINT32_MAX, label, cfg, &used,
                       err)) && rc != FG_ERR_NOT_FOUND)
        return rc;
    json_object_set_new(cfg, "n_group", json_integer((json_int_t)*groups));
    json_object_set_new(cfg, "topk_group", json_integer((json_int_t)used));
    return FG_OK;
}

static int has_tensor(const fg_ckpt *ck, const char *name)
{
    uint32_t i;
    return fg_ckpt_find(ck, name, &i) == FG_OK;
}

/* Qwen's mixtures: the counts, the widths, the renormalization, the dense layers */
static int put_moe(const ck_gguf *g, const struct arch_row *r, const fg_ckpt *ck,
                   const char *label, json_t *cfg, fg_err *err)
{
    static const struct { const char *k, *hf; int required; } keys[] = {
        {"expert_count", "num_experts", 1}, {"expert_used_count", "num_experts_per_tok", 1},
        {"expert_feed_forward_length", "moe_intermediate_size", 1},
        {"expert_shared_feed_forward_length", "shared_expert_intermediate_size", 0},
    };
    uint64_t layers = 0, norm;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int rc = put_uint(g, r->arch, keys[i].k, keys[i].hf, UINT32_MAX, label, cfg, NULL, err);
        if (rc == FG_ERR_NOT_FOUND && keys[i].required) {
            char key[128];
            snprintf(key, sizeof key, "%s.%s", r->arch, keys[i].k);
            return key_err(err, label, key, "is missing");
        }
        if (rc && rc != FG_ERR_NOT_FOUND)
            return rc;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", r->arch);
    int rc = ck_gguf_uint(g, key, &norm);
    if (rc == FG_ERR_BAD_ENUM)
        return key_err(err, label, key, "must be a bool");
    json_object_set_new(cfg, "norm_topk_prob",
                        json_boolean(rc == FG_OK ? norm != 0 : (r->features & F_NORM_TOPK) != 0));
    snprintf(key, sizeof key, "%s.block_count", r->arch);
    (void)ck_gguf_uint(g, key, &layers); /* (put_numbers checked it) */
    json_t *dense = json_array();
    for (uint64_t l = 0; l < layers && layers <= (1u << 16); l++) { /* (more: refused by model/) */
        snprintf(key, sizeof key, "model.layers.%llu.mlp.gate.weight", (unsigned long long)l);
        if (!has_tensor(ck, key))
            json_array_append_new(dense, json_integer((json_int_t)l));
    }
    json_object_set_new(cfg, "mlp_only_layers", dense);
    json_object_set_new(cfg, "decoder_sparse_step", json_integer(1));
    return FG_OK;
}

/* attention.sliding_window (0: none) as sliding_window */
static int put_window(const ck_gguf *g, const struct arch_row *r, const char *label, json_t *cfg,
                      fg_err *err)
{
    uint64_t w;
    int rc = put_uint(g, r->arch, "attention.sliding_window", NULL, UINT32_MAX, label, cfg, &w,
                      err);
    if (rc == FG_OK)
        json_object_set_new(cfg, "sliding_window", w ? json_integer((json_int_t)w) : json_null());
    return rc == FG_ERR_NOT_FOUND ? FG_OK : rc;
}

/* Gemma 3's sliding layers: attention.sliding_window_pattern as a count or a bool per layer */
static int put_gemma_pattern(const ck_gguf *g, const struct arch_row *r, const ck_src *src,
                             const char *label, json_t *cfg, fg_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", r->arch);
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    if (!kv) {
        if (!strcmp(r->arch, "gemma3")) /* llama.cpp's rule for Gemma 3 */
            json_object_set_new(cfg, "sliding_window_pattern", json_integer(6));
        return FG_OK;
    }
    if (kv->type != CK_GGUF_ARRAY) {
        uint64_t n;
        if (ck_gguf_uint(g, key, &n) || n < 1 || n > 4096)
            return key_err(err, label, key, "must be a count from 1 to 4096 or a bool array");
        json_object_set_new(cfg, "sliding_window_pattern", json_integer((json_int_t)n));
        return FG_OK;
    }
    if (kv->arr_type != CK_GGUF_BOOL || kv->arr_n > 4096)
        return key_err(err, label, key, "must be a count or an array of at most 4096 bools");
    uint8_t *b = malloc(kv->arr_n ? kv->arr_n : 1);
    if (!b)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    int rc = ck_src_read(src, kv->arr_off, b, (size_t)kv->arr_n, key, err);
    json_t *types = json_array();
    for (uint64_t i = 0; rc == FG_OK && i < kv->arr_n; i++)
        json_array_append_new(types, json_string(b[i] ? "sliding_attention" : "full_attention"));
    free(b);
    json_object_set_new(cfg, "layer_types", types);
    return rc;
}

/* Gemma: the tanh GELU, q's scale, Gemma 3's local rotary base and window pattern */
static int put_gemma(const ck_gguf *g, const struct arch_row *r, const ck_src *src,
                     const char *label, json_t *cfg, fg_err *err)
{
    json_object_set_new(cfg, "hidden_act", json_string("gelu_pytorch_tanh"));
    json_object_set_new(cfg, "hidden_activation", json_string("gelu_pytorch_tanh"));
    char key[128];
    double scale, base;
    uint64_t layers = 0, hidden = 0, heads = 1, hd = 0;
    snprintf(key, sizeof key, "%s.attention.scale", r->arch);
    int rc = ck_gguf_float(g, key, &scale);
    if (rc == FG_ERR_BAD_ENUM || (rc == FG_OK && !(scale > 0)))
        return key_err(err, label, key, "must be a positive float");
    put_uint(g, r->arch, "block_count", NULL, UINT32_MAX, label, cfg, &layers, err);
    put_uint(g, r->arch, "embedding_length", NULL, UINT32_MAX, label, cfg, &hidden, err);
    put_uint(g, r->arch, "attention.head_count", NULL, UINT32_MAX, label, cfg, &heads, err);
    if (put_uint(g, r->arch, "attention.key_length", NULL, UINT32_MAX, label, cfg, &hd, err))
        hd = heads ? hidden / heads : 0;
    double q = (double)hd; /* llama.cpp: 1 / sqrt(head_dim), the 27B shapes hidden / heads */
    if (rc == FG_OK) /* 1 / scale^2, an integer in every published config (f32 rounding undone) */
        q = fabs(1 / (scale * scale) - nearbyint(1 / (scale * scale))) < 1e-4 * (1 / (scale *
            scale)) ? nearbyint(1 / (scale * scale)) : 1 / (scale * scale);
    else if (heads && ((!strcmp(r->arch, "gemma2") && layers == 46 && hidden == 4608) ||
                       (!strcmp(r->arch, "gemma3") && layers == 62 && hidden == 5376)))
        q = (double)hidden / (double)heads;
    if (strcmp(r->arch, "gemma") != 0)
        json_object_set_new(cfg, "query_pre_attn_scalar", json_real(q));
    if (!strcmp(r->arch, "gemma3")) {
        snprintf(key, sizeof key, "%s.rope.freq_base_swa", r->arch);
        rc = ck_gguf_float(g, key, &base);
        if (rc == FG_ERR_BAD_ENUM)
            return key_err(err, label, key, "must be a float");
        json_object_set_new(cfg, "rope_local_base_freq", json_real(rc == FG_OK ? base : 10000.0));
    }
    return strcmp(r->arch, "gemma") ? put_gemma_pattern(g, r, src, label, cfg, err) : FG_OK;
}

/* An optional float key {arch}.<k> into *v (absent: def); FG_ERR_CORRUPT if not a float */
static int get_float(const ck_gguf *g, const char *arch, const char *k, double def,
                     const char *label, double *v, fg_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    int rc = ck_gguf_float(g, key, v);
    if (rc == FG_ERR_NOT_FOUND)
        *v = def;
    else if (rc)
        return key_err(err, label, key, "must be a float");
    return FG_OK;
}

/* A required u32 key {arch}.<k> as config key hf (NULL: none), into *out */
static int need_uint(const ck_gguf *g, const char *arch, const char *k, const char *hf,
                     const char *label, json_t *cfg, uint64_t *out, fg_err *err)
{
    int rc = put_uint(g, arch, k, hf, UINT32_MAX, label, cfg, out, err);
    if (rc == FG_ERR_NOT_FOUND) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", arch, k);
        return key_err(err, label, key, "is missing");
    }
    return rc;
}

/* A float rounded to 6 significant digits: the f32 the converter wrote of a decimal in the
 * checkpoint's config.json (0.1 x 0.707 -> 0.0707000032 -> 0.707) back as that decimal */
static double decimal6(double v)
{
    char b[32];
    snprintf(b, sizeof b, "%.6g", v);
    return strtod(b, NULL);
}

/* deepseek2 (llama.cpp's DeepseekV2Model): multi-head latent attention, the routed and shared
 * experts, YaRN. The attention in either of the two forms convert_hf_to_gguf.py has written:
 * older files keep attn_kv_b with key_length = qk_nope + qk_rope and value_length = v_head_dim;
 * newer ones (MLA absorption) split it into attn_k_b / attn_v_b (gguf_import.c joins them
 * back) with key_length_mla / value_length_mla for those and key_length / value_length for the
 * latent (kv_lora_rank + qk_rope, kv_lora_rank), head_count_kv 1. The gating function (1
 * softmax, 2 sigmoid; llama.cpp's default softmax) picks the family: sigmoid is DeepSeek-V3's
 * router (noaux_tc, the exp_probs_b choice bias), softmax V2's (greedy, or group_limited_greedy
 * over expert_group_count groups). YaRN's mscale and mscale_all_dim are both
 * yarn_log_multiplier / 0.1 (what the converter writes; llama.cpp runs mscale = mscale_all_dim,
 * so a checkpoint with two different values is another model through GGUF). */
static int put_mla(const ck_gguf *g, const struct arch_row *r, const char *label, json_t *cfg,
                   fg_err *err)
{
    const char *a = r->arch;
    uint64_t heads, rope, kvl, kl, v, lead, gate = 1, groups = 1;
    int rc = need_uint(g, a, "attention.head_count", NULL, label, cfg, &heads, err);
    if (rc == FG_OK)
        rc = need_uint(g, a, "rope.dimension_count", "qk_rope_head_dim", label, cfg, &rope, err);
    if (rc == FG_OK)
        rc = need_uint(g, a, "attention.kv_lora_rank", "kv_lora_rank", label, cfg, &kvl, err);
    int split = rc == FG_OK && put_uint(g, a, "attention.key_length_mla", NULL, UINT32_MAX, label,
                                         cfg, &kl, err) == FG_OK;
    if (rc == FG_OK && !split)
        rc = need_uint(g, a, "attention.key_length", NULL, label, cfg, &kl, err);
    if (rc == FG_OK)
        rc = need_uint(g, a, split ? "attention.value_length_mla" : "attention.value_length",
                       "v_head_dim", label, cfg, &v, err);
    if (rc)
        return rc;
    if (kl <= rope)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s.attention.key_length%s %llu is "
                          "not more than rope.dimension_count %llu", label, a, split ? "_mla" : "",
                          (unsigned long long)kl, (unsigned long long)rope);
    json_object_set_new(cfg, "qk_nope_head_dim", json_integer((json_int_t)(kl - rope)));
    json_object_set_new(cfg, "num_key_value_heads", json_integer((json_int_t)heads));
    uint64_t ql;
    rc = put_uint(g, a, "attention.q_lora_rank", "q_lora_rank", UINT32_MAX, label, cfg, &ql, err);
    if (rc == FG_ERR_NOT_FOUND)
        json_object_set_new(cfg, "q_lora_rank", json_null()); /* V2-Lite: q_proj */
    else if (rc)
        return rc;
    static const struct { const char *k, *hf; } moe[] = {
        {"expert_count", "n_routed_experts"}, {"expert_used_count", "num_experts_per_tok"},
        {"expert_feed_forward_length", "moe_intermediate_size"},
        {"expert_shared_count", "n_shared_experts"},
    };
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if ((rc = need_uint(g, a, moe[i].k, moe[i].hf, label, cfg, NULL, err)))
            return rc;
    if ((rc = put_uint(g, a, "leading_dense_block_count", "first_k_dense_replace", UINT32_MAX,
                       label, cfg, &lead, err)) == FG_ERR_NOT_FOUND)
        json_object_set_new(cfg, "first_k_dense_replace", json_integer(0));
    else if (rc)
        return rc;
    if ((rc = put_uint(g, a, "expert_gating_func", NULL, 2, label, cfg, &gate, err)) &&
        rc != FG_ERR_NOT_FOUND)
        return rc;
    if ((rc = put_groups(g, a, label, cfg, &groups, err)))
        return rc;
    int v3 = gate == 2;
    json_object_set_new(cfg, "model_type", json_string(v3 ? "deepseek_v3" : "deepseek_v2"));
    json_object_set_new(cfg, "architectures",
                        json_pack("[s]", v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"));
    json_object_set_new(cfg, "scoring_func", json_string(v3 ? "sigmoid" : "softmax"));
    json_object_set_new(cfg, "topk_method", json_string(v3 ? "noaux_tc" : groups > 1
                                                        ? "group_limited_greedy" : "greedy"));
    char key[128];
    uint64_t norm = 0;
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    rc = ck_gguf_uint(g, key, &norm);
    if (rc == FG_ERR_BAD_ENUM)
        return key_err(err, label, key, "must be a bool");
    json_object_set_new(cfg, "norm_topk_prob", json_boolean(rc == FG_OK && norm));
    double scale, factor, bf, bs, logmul;
    if ((rc = get_float(g, a, "expert_weights_scale", 1.0, label, &scale, err)))
        return rc;
    json_object_set_new(cfg, "routed_scaling_factor", json_real(decimal6(scale)));
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const char *st = ck_gguf_str(g, key);
    if (!st || strcmp(st, "yarn"))
        return FG_OK; /* (refuse_unmapped let only none and linear through besides) */
    uint64_t orig;
    if ((rc = get_float(g, a, "rope.scaling.factor", 0, label, &factor, err)) ||
        (rc = need_uint(g, a, "rope.scaling.original_context_length", NULL, label, cfg, &orig,
                        err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_beta_fast", 32, label, &bf, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_beta_slow", 1, label, &bs, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_log_multiplier", 0, label, &logmul, err)))
        return rc;
    if (!(factor >= 1))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s.rope.scaling.factor must be a "
                          "float >= 1 with yarn", label, a);
    double ms = decimal6(logmul / 0.1);
    json_object_set_new(cfg, "rope_scaling",
                        json_pack("{s:s, s:f, s:I, s:f, s:f, s:f, s:f}", "type", "yarn", "factor",
                                  decimal6(factor), "original_max_position_embeddings",
                                  (json_int_t)orig, "beta_fast", decimal6(bf), "beta_slow",
                                  decimal6(bs), "mscale", ms, "mscale_all_dim", ms));
    return FG_OK;
}

/* glm4moe (llama.cpp's Glm4MoeModel): block_count counts the multi-token prediction layers
 * (nextn_predict_layers) after the model's, whose tensors the file holds (imported as the
 * checkpoint's MTP layer: not stored); the sigmoid router in groups with its choice bias,
 * shared experts, leading dense layers; q/k norms when blk.0.attn_q_norm is there. */
static int put_glm_moe(const ck_gguf *g, const struct arch_row *r, const fg_ckpt *ck,
                       const char *label, json_t *cfg, fg_err *err)
{
    const char *a = r->arch;
    uint64_t blocks, nextn = 0, groups = 1, norm = 0;
    int rc = need_uint(g, a, "block_count", NULL, label, cfg, &blocks, err);
    if (rc == FG_OK && (rc = put_uint(g, a, "nextn_predict_layers", "num_nextn_predict_layers",
                                      UINT32_MAX, label, cfg, &nextn, err)) == FG_ERR_NOT_FOUND)
        rc = FG_OK;
    if (rc)
        return rc;
    if (nextn >= blocks)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s.nextn_predict_layers %llu leaves "
                          "no layer of %s.block_count %llu", label, a, (unsigned long long)nextn,
                          a, (unsigned long long)blocks);
    json_object_set_new(cfg, "num_hidden_layers", json_integer((json_int_t)(blocks - nextn)));
    static const struct { const char *k, *hf; } moe[] = {
        {"expert_count", "n_routed_experts"}, {"expert_used_count", "num_experts_per_tok"},
        {"expert_feed_forward_length", "moe_intermediate_size"},
        {"expert_shared_count", "n_shared_experts"},
        {"leading_dense_block_count", "first_k_dense_replace"},
    };
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if ((rc = need_uint(g, a, moe[i].k, moe[i].hf, label, cfg, NULL, err)))
            return rc;
    if ((rc = put_groups(g, a, label, cfg, &groups, err)))
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    rc = ck_gguf_uint(g, key, &norm);
    if (rc == FG_ERR_BAD_ENUM)
        return key_err(err, label, key, "must be a bool");
    json_object_set_new(cfg, "norm_topk_prob", json_boolean(rc == FG_OK && norm));
    double scale;
    if ((rc = get_float(g, a, "expert_weights_scale", 1.0, label, &scale, err)))
        return rc;
    json_object_set_new(cfg, "routed_scaling_factor", json_real(decimal6(scale)));
    json_object_set_new(cfg, "use_qk_norm",
                        json_boolean(has_tensor(ck, "model.layers.0.self_attn.q_norm.weight")));
    return FG_OK;
}

/* Llama 3's rope factor for the pair of wavelength wl (float, as the converter's torch
 * float32 arithmetic computes it) under (factor, low 1, high 4, original context orig) */
static float llama3_factor(float wl, float factor, float orig)
{
    if (wl < orig / 4.0f)
        return 1.0f;
    if (wl > orig)
        return factor;
    float smooth = (orig / wl - 1.0f) / 3.0f;
    return 1.0f / ((1.0f - smooth) / factor + smooth);
}

/* rope_freqs.weight (F32, a factor per rotary pair): how llama.cpp's LlamaModel writes Llama 3's
 * rope_type llama3 (no rope scaling key). Mapped back onto rope_scaling llama3 with Meta's
 * low_freq_factor 1 and high_freq_factor 4 (every Llama 3.1 / 3.2 / 3.3 release): factor = the
 * largest value, original_max_position_embeddings solved from the first value between 1 and it
 * (8192 when none is), then every value checked against the rule (within 1e-5); factors of
 * another form are refused by name, as the tensor is on another architecture. */
static int put_rope_freqs(const struct arch_row *r, const fg_ckpt *ck, const char *label,
                          json_t *cfg, fg_err *err)
{
    uint32_t i;
    if (fg_ckpt_find(ck, "rope_freqs.weight", &i) != FG_OK)
        return FG_OK;
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    json_t *jt = json_object_get(cfg, "rope_theta"), *jd = json_object_get(cfg, "head_dim");
    uint64_t hidden = (uint64_t)json_integer_value(json_object_get(cfg, "hidden_size"));
    uint64_t heads = (uint64_t)json_integer_value(json_object_get(cfg, "num_attention_heads"));
    uint64_t dim = jd ? (uint64_t)json_integer_value(jd) : heads ? hidden / heads : 0;
    double base = jt ? json_number_value(jt) : 10000.0;
    if (strcmp(r->arch, "llama"))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor rope_freqs.weight: fg maps GGUF "
                          "rope factors for llama (Llama 3's rope scaling) so far", label);
    if (t->dtype != FG_CKPT_F32 || t->n_dims != 1 || !dim || dim % 2 || t->dims[0] != dim / 2 ||
        !(base > 1))
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor rope_freqs.weight must be F32 "
                          "[%llu] (a factor per rotary pair)", label, (unsigned long long)(dim / 2));
    uint64_t n = dim / 2;
    uint8_t *raw = malloc(n * 4);
    float *f = malloc(n * sizeof *f);
    int rc = raw && f ? fg_ckpt_read(ck, i, 0, n, raw, err)
                      : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    float factor = 1, orig = 8192;
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) {
        uint32_t b = fg_le32(raw + 4 * k);
        memcpy(&f[k], &b, 4);
        factor = f[k] > factor ? f[k] : factor;
    }
    float pi2 = (float)(2 * 3.14159265358979323846);
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) { /* the first value between 1 and factor */
        float freq = 1.0f / powf((float)base, (float)(2 * k) / (float)dim), wl = pi2 / freq;
        if (f[k] > 1 && f[k] < factor) {
            float smooth = (1 / f[k] - 1 / factor) / (1 - 1 / factor);
            orig = nearbyintf(wl * (3 * smooth + 1)); /* (an integer in every release) */
            break;
        }
    }
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) {
        float freq = 1.0f / powf((float)base, (float)(2 * k) / (float)dim);
        float want = llama3_factor(pi2 / freq, factor, orig);
        if (!(fabsf(f[k] - want) <= 1e-5f * want))
            rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor rope_freqs.weight element %llu "
                            "is %g, not Llama 3's rope factor %g (factor %g, low 1, high 4, "
                            "original context %g): fg maps that form only", label,
                            (unsigned long long)k, f[k], want, factor, orig);
    }
    free(raw);
    free(f);
    if (rc == FG_OK && factor > 1)
        json_object_set_new(cfg, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor",
                                      (double)factor, "low_freq_factor", 1.0, "high_freq_factor",
                                      4.0, "original_max_position_embeddings", (json_int_t)orig));
    return rc;
}

/* {arch}.rope.scaling.type "linear" (its factor) or "yarn" (TextModel.set_gguf_parameters'
 * keys: factor and original_context_length, and where the checkpoint had them yarn_beta_fast,
 * yarn_beta_slow and yarn_attn_factor: transformers' beta_fast, beta_slow, attention_factor).
 * llama.cpp's extrapolation mix (yarn_ext_factor) has no transformers counterpart but 1, and
 * yarn_log_multiplier means mscale_all_dim x 0.1 from one converter (deepseek2's, put_mla)
 * and mscale_all_dim itself from another (Mistral's): either other than 1 and 0 is refused by
 * its key. gpt-oss's YaRN is GptOssConfig's, not truncated (the correction range is not rounded
 * to whole dims, as transformers runs every gpt-oss release; ggml rounds it). */
static int put_rope_scaling(const ck_gguf *g, const struct arch_row *r, const char *label,
                            json_t *cfg, fg_err *err)
{
    const char *a = r->arch;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const char *s = ck_gguf_str(g, key);
    if (!s || (r->features & F_MLA) || (strcmp(s, "linear") && strcmp(s, "yarn")))
        return FG_OK; /* (put_mla's; refuse_unmapped let no other through) */
    double f, bf, bs, af, ext, lm;
    uint64_t orig;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    if (ck_gguf_float(g, key, &f) != FG_OK || !(f >= 1))
        return key_err(err, label, key, "must be a float >= 1 with linear or yarn rope scaling");
    if (!strcmp(s, "linear")) {
        json_object_set_new(cfg, "rope_scaling",
                            json_pack("{s:s, s:f}", "rope_type", "linear", "factor", f));
        return FG_OK;
    }
    int rc;
    if ((rc = need_uint(g, a, "rope.scaling.original_context_length", NULL, label, cfg, &orig,
                        err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_beta_fast", 0, label, &bf, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_beta_slow", 0, label, &bs, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_attn_factor", 0, label, &af, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_ext_factor", 1, label, &ext, err)) ||
        (rc = get_float(g, a, "rope.scaling.yarn_log_multiplier", 0, label, &lm, err)))
        return rc;
    const char *bad = ext != 1 ? "yarn_ext_factor" : lm != 0 ? "yarn_log_multiplier" : NULL;
    if (bad)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s.rope.scaling.%s is %g: fg "
                          "maps GGUF YaRN with %s only (but deepseek2's)", label, a, bad,
                          ext != 1 ? ext : lm, ext != 1 ? "an extrapolation factor of 1"
                                                        : "no log multiplier");
    if (!orig || bf < 0 || bs < 0 || af < 0)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s.rope.scaling: YaRN needs a "
                          "positive original_context_length, betas and attn_factor", label, a);
    json_t *y = json_pack("{s:s, s:f, s:I}", "rope_type", "yarn", "factor", decimal6(f),
                          "original_max_position_embeddings", (json_int_t)orig);
    if (bf > 0)
        json_object_set_new(y, "beta_fast", json_real(decimal6(bf)));
    if (bs > 0)
        json_object_set_new(y, "beta_slow", json_real(decimal6(bs)));
    if (af > 0)
        json_object_set_new(y, "attention_factor", json_real(af));
    if (r->features & F_OSS)
        json_object_set_new(y, "truncate", json_false());
    json_object_set_new(cfg, "rope_scaling", y);
    return FG_OK;
}

/* F32 tensor `name` [n] into f (n floats); FG_ERR_SIZE_MISMATCH naming it otherwise */
static int read_f32_vec(const fg_ckpt *ck, const char *name, uint64_t n, const char *label,
                        float *f, fg_err *err)
{
    uint32_t i;
    const fg_ckpt_tensor *t = fg_ckpt_find(ck, name, &i) == FG_OK ? fg_ckpt_tensor_at(ck, i) : NULL;
    if (!t || t->dtype != FG_CKPT_F32 || t->n_dims != 1 || t->dims[0] != n)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s must be F32 [%llu] (a "
                          "factor per rotary pair)", label, name, (unsigned long long)n);
    uint8_t *raw = malloc(n * 4 + 1);
    int rc = raw ? fg_ckpt_read(ck, i, 0, n, raw, err) : fg_err_set(err, FG_ERR_NOMEM, "out of "
                                                                     "memory");
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) {
        uint32_t b = fg_le32(raw + 4 * k);
        memcpy(&f[k], &b, 4);
        if (!(f[k] > 0 && f[k] < 1e9f))
            rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s element %llu is %g: rope factors "
                            "must be positive", label, name, (unsigned long long)k, f[k]);
    }
    free(raw);
    return rc;
}

/* Phi-3's longrope (Phi3MiniModel.generate_extra_tensors): rope_factors_long.weight and
 * rope_factors_short.weight (F32, a factor per rotary pair) with no rope scaling key, read back
 * as rope_scaling {type longrope, long_factor, short_factor}; original_max_position_embeddings
 * from rope.scaling.original_context_length; rope.scaling.attn_factor as attention_factor where
 * it is not the converter's own default sqrt(1 + ln s / ln original) (s = context_length /
 * original; 1 when s <= 1), which transformers then computes itself. The tensors on another
 * architecture, or one without the other, are refused by name. */
static int put_longrope(const ck_gguf *g, const struct arch_row *r, const fg_ckpt *ck,
                        const char *label, json_t *cfg, fg_err *err)
{
    int hl = has_tensor(ck, "rope_factors_long.weight");
    int hs = has_tensor(ck, "rope_factors_short.weight");
    if (!hl && !hs)
        return FG_OK;
    if (strcmp(r->arch, "phi3") || hl != hs)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s: fg maps GGUF rope factors "
                          "long and short together for phi3 (Phi-3's longrope) so far", label,
                          hl ? "rope_factors_long.weight" : "rope_factors_short.weight");
    uint64_t rot = 0, orig, ctx = 0;
    int rc = need_uint(g, r->arch, "rope.dimension_count", NULL, label, cfg, &rot, err);
    if (rc == FG_OK)
        rc = need_uint(g, r->arch, "rope.scaling.original_context_length", NULL, label, cfg, &orig,
                       err);
    if (rc)
        return rc;
    put_uint(g, r->arch, "context_length", NULL, UINT32_MAX, label, cfg, &ctx, err);
    if (!rot || rot % 2 || rot > 512 || orig < 2)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata %s.rope.dimension_count %llu / "
                          "rope.scaling.original_context_length %llu do not fit longrope",
                          label, r->arch, (unsigned long long)rot, (unsigned long long)orig);
    float lf[256], sf[256];
    if ((rc = read_f32_vec(ck, "rope_factors_long.weight", rot / 2, label, lf, err)) ||
        (rc = read_f32_vec(ck, "rope_factors_short.weight", rot / 2, label, sf, err)))
        return rc;
    json_t *jl = json_array(), *js = json_array();
    for (uint64_t k = 0; k < rot / 2; k++) {
        json_array_append_new(jl, json_real(lf[k]));
        json_array_append_new(js, json_real(sf[k]));
    }
    json_t *lr = json_pack("{s:s, s:o, s:o}", "type", "longrope", "long_factor", jl,
                           "short_factor", js);
    double af, scale = (double)ctx / (double)orig;
    double dflt = scale > 1 ? sqrt(1 + log(scale) / log((double)orig)) : 1.0;
    if ((rc = get_float(g, r->arch, "rope.scaling.attn_factor", dflt, label, &af, err))) {
        json_decref(lr);
        return rc;
    }
    if (fabs(af - dflt) > 1e-6 * dflt) /* (the default in f32: transformers computes its own) */
        json_object_set_new(lr, "attention_factor", json_real(af));
    json_object_set_new(cfg, "rope_scaling", lr);
    json_object_set_new(cfg, "original_max_position_embeddings", json_integer((json_int_t)orig));
    return FG_OK;
}

/* gpt-oss (llama.cpp's GptOssModel): expert_count / expert_used_count experts of
 * expert_feed_forward_length, the sliding window (every other layer from layer 0, llama.cpp's
 * fixed pattern and GptOssConfig's), the SwiGLU clamp: 7 in llama.cpp's graph and GptOssConfig
 * (the family's default, no key written), or swiglu_clamp_exp (a value per layer: one value for
 * every layer) where a file carries it. Sinks, biases and YaRN: by their tensors and
 * put_rope_scaling. */
static int put_oss(const ck_gguf *g, const struct arch_row *r, const ck_src *src,
                   const char *label, json_t *cfg, fg_err *err)
{
    const char *a = r->arch;
    uint64_t w;
    int rc;
    if ((rc = need_uint(g, a, "expert_count", "num_local_experts", label, cfg, NULL, err)) ||
        (rc = need_uint(g, a, "expert_used_count", "num_experts_per_tok", label, cfg, NULL, err)) ||
        (rc = need_uint(g, a, "expert_feed_forward_length", "intermediate_size", label, cfg, NULL,
                        err)))
        return rc;
    rc = put_uint(g, a, "attention.sliding_window", NULL, UINT32_MAX, label, cfg, &w, err);
    if (rc == FG_OK)
        json_object_set_new(cfg, "sliding_window", w ? json_integer((json_int_t)w) : json_null());
    else if (rc != FG_ERR_NOT_FOUND)
        return rc;
    char key[128];
    snprintf(key, sizeof key, "%s.swiglu_clamp_exp", a);
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    if (!kv)
        return FG_OK;
    if (kv->type != CK_GGUF_ARRAY || kv->arr_type != CK_GGUF_F32 || !kv->arr_n ||
        kv->arr_n > 4096)
        return key_err(err, label, key, "must be an array of F32 (a value per layer)");
    uint8_t *b = malloc(kv->arr_n * 4);
    if (!b)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    rc = ck_src_read(src, kv->arr_off, b, (size_t)kv->arr_n * 4, key, err);
    float v0 = 0, v;
    for (uint64_t i = 0; rc == FG_OK && i < kv->arr_n; i++) {
        uint32_t u = fg_le32(b + 4 * i);
        memcpy(&v, &u, 4);
        v0 = i ? v0 : v;
        if (!(v > 0 && v < 1e9f) || v != v0)
            rc = key_err(err, label, key, "must hold one positive value for every layer (fg "
                         "clamps every layer's experts alike)");
    }
    free(b);
    if (rc == FG_OK)
        json_object_set_new(cfg, "swiglu_limit", json_real(v0));
    return rc;
}

/* The family's features */
static int put_features(const ck_gguf *g, const struct arch_row *r, const fg_ckpt *ck,
                        const ck_src *src, const char *label, json_t *cfg, fg_err *err)
{
    int bias = has_tensor(ck, "model.layers.0.self_attn.q_proj.bias");
    json_object_set_new(cfg, "attention_bias", json_boolean(bias));
    if (!strcmp(r->arch, "qwen2moe"))
        json_object_set_new(cfg, "qkv_bias", json_boolean(bias));
    int rc = FG_OK;
    if (r->features & F_MOE)
        rc = put_moe(g, r, ck, label, cfg, err);
    if (r->features & F_MLA)
        rc = put_mla(g, r, label, cfg, err);
    if (r->features & F_GLM_MOE)
        rc = put_glm_moe(g, r, ck, label, cfg, err);
    if (r->features & F_OSS)
        rc = put_oss(g, r, src, label, cfg, err);
    if (rc == FG_OK && (r->features & F_WINDOW))
        rc = put_window(g, r, label, cfg, err);
    if (rc == FG_OK && (r->features & F_GEMMA))
        rc = put_gemma(g, r, src, label, cfg, err);
    uint64_t rot, hd = 0, hidden = 0, heads = 0;
    if (rc == FG_OK && (r->features & F_PARTIAL) &&
        put_uint(g, r->arch, "rope.dimension_count", NULL, UINT32_MAX, label, cfg, &rot, err) ==
            FG_OK) { /* (refuse_unmapped checked it: even, up to the head dimension) */
        put_uint(g, r->arch, "embedding_length", NULL, UINT32_MAX, label, cfg, &hidden, err);
        put_uint(g, r->arch, "attention.head_count", NULL, UINT32_MAX, label, cfg, &heads, err);
        if (put_uint(g, r->arch, "attention.key_length", NULL, UINT32_MAX, label, cfg, &hd, err))
            hd = heads ? hidden / heads : 0;
        if (hd) /* (a ratio of two integers; the family takes int(head_dim x factor) back) */
            json_object_set_new(cfg, "partial_rotary_factor", json_real((double)rot / hd));
    }
    return rc;
}

int ck_gguf_config(const ck_gguf *g, const fg_ckpt *ck, const ck_src *src, const char *label,
                   char **json, size_t *len, int *interleaved, fg_err *err)
{
    *json = NULL;
    const char *arch = ck_gguf_str(g, "general.architecture");
    if (!arch)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no string general.architecture", label);
    const struct arch_row *r = NULL;
    for (size_t i = 0; i < sizeof arch_rows / sizeof arch_rows[0]; i++)
        r = !r && !strcmp(arch, arch_rows[i].arch) ? &arch_rows[i] : r;
    if (!r)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: general.architecture '%.40s': fg maps "
                          "llama (mistral), qwen2, qwen3, qwen2moe, qwen3moe, gemma, gemma2, "
                          "gemma3, phi3, olmo2, granite, glm4, glm4moe, deepseek2 and gpt-oss "
                          "from GGUF so far", label, arch);
    json_t *cfg = json_object();
    if (!cfg)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    json_object_set_new(cfg, "model_type", json_string(r->model_type));
    json_object_set_new(cfg, "architectures", json_pack("[s]", r->hf_class));
    json_object_set_new(cfg, "hidden_act", json_string("silu"));
    int rc = refuse_unmapped(g, r, label, err);
    if (rc == FG_OK)
        rc = put_numbers(g, r, label, cfg, err);
    if (rc == FG_OK)
        rc = put_features(g, r, ck, src, label, cfg, err);
    if (rc == FG_OK)
        rc = put_rope_scaling(g, r, label, cfg, err);
    if (rc == FG_OK)
        rc = put_shapes(ck, label, cfg, err);
    if (rc == FG_OK)
        rc = put_rope_freqs(r, ck, label, cfg, err);
    if (rc == FG_OK)
        rc = put_longrope(g, r, ck, label, cfg, err);
    if (rc == FG_OK && !(*json = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    json_decref(cfg);
    *len = *json ? strlen(*json) : 0;
    *interleaved = r->permuted;
    return rc;
}
