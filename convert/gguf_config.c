/* gguf_config.c - config.json synthesized from a GGUF file's metadata (see gguf.h).
 *
 * A row per general.architecture fg maps: its Hugging Face model_type and class, and whether
 * llama.cpp permuted its Q/K rows. Each key below is the GGUF key (under "{arch}.") that
 * gives a config.json key, as convert_hf_to_gguf.py writes them; model/ then reads the result as
 * it reads any config.json, with the family's defaults for what is absent. What the mapping
 * cannot express yet is refused by name rather than guessed: rope scaling other than linear
 * (Llama 3's is a rope_freqs tensor, YaRN has parameters GGUF files spell in several ways), a
 * partial rotary dimension, experts.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static const struct arch_row {
    const char *arch, *model_type, *hf_class;
    int permuted; /* convert_hf_to_gguf.py's LlamaModel permutes q_proj and k_proj */
} arch_rows[] = {
    {"llama", "llama", "LlamaForCausalLM", 1},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", 0},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", 0},
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

static const struct { const char *gguf, *hf; } float_keys[] = {
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
    {"rope.freq_base", "rope_theta"},
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
static int put_numbers(const ck_gguf *g, const char *arch, const char *label, json_t *cfg,
                       fg_err *err)
{
    char key[128];
    for (size_t i = 0; i < sizeof uint_keys / sizeof uint_keys[0]; i++) {
        uint64_t v;
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
static int refuse_unmapped(const ck_gguf *g, const char *arch, const char *label, fg_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *s = ck_gguf_str(g, key);
    if (s && strcmp(s, "none") != 0 && strcmp(s, "linear") != 0)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s is '%.40s': fg maps GGUF rope "
                          "scaling 'linear' so far", label, key, s);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if (ck_gguf_get(g, key))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s: fg does not map GGUF "
                          "mixtures of experts yet", label, key);
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
    if (rot != hd)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata %s is %llu, not the head "
                          "dimension %llu: fg does not map partial rotary from GGUF yet", label,
                          key, (unsigned long long)rot, (unsigned long long)hd);
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

/* {arch}.rope.scaling.type "linear" (refuse_unmapped let no other through) with its factor */
static int put_rope_scaling(const ck_gguf *g, const char *arch, const char *label, json_t *cfg,
                            fg_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *s = ck_gguf_str(g, key);
    if (!s || strcmp(s, "linear") != 0)
        return FG_OK;
    double f;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if (ck_gguf_float(g, key, &f) != FG_OK || !(f >= 1))
        return key_err(err, label, key, "must be a float >= 1 with linear rope scaling");
    json_object_set_new(cfg, "rope_scaling",
                        json_pack("{s:s, s:f}", "rope_type", "linear", "factor", f));
    return FG_OK;
}

int ck_gguf_config(const ck_gguf *g, const fg_ckpt *ck, const char *label, char **json,
                   size_t *len, int *interleaved, fg_err *err)
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
                          "llama, qwen2 and qwen3 from GGUF so far", label, arch);
    json_t *cfg = json_object();
    if (!cfg)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    json_object_set_new(cfg, "model_type", json_string(r->model_type));
    json_object_set_new(cfg, "architectures", json_pack("[s]", r->hf_class));
    json_object_set_new(cfg, "hidden_act", json_string("silu"));
    int rc = refuse_unmapped(g, arch, label, err);
    if (rc == FG_OK)
        rc = put_numbers(g, arch, label, cfg, err);
    if (rc == FG_OK)
        rc = put_rope_scaling(g, arch, label, cfg, err);
    if (rc == FG_OK)
        rc = put_shapes(ck, label, cfg, err);
    if (rc == FG_OK && !(*json = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    json_decref(cfg);
    *len = *json ? strlen(*json) : 0;
    *interleaved = r->permuted;
    return rc;
}
