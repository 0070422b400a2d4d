/* config.c - a Llama-style family's config.json into fg_hparams, by its row (families.h): the
 * sizes with the config class's defaults, sliding windows per layer, the activation, biases,
 * norms, scales, ids; rope.c reads the rotary settings and moe.c the experts. Every branch
 * tests a feature or a default of the row, never the family.
 *
 * The layer they share: x += o(attn(rmsnorm(x))) with rotary positions (rotate-half) and
 * grouped-query attention, then x += down(act(gate(rmsnorm(x))) * up(rmsnorm(x))); a final
 * RMSNorm and the LM head (tied to the embedding when tie_word_embeddings). hidden_act must be
 * "silu" unless the row's act says otherwise. clip_qkv (OLMo's) is refused unless null.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "families.h"

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
    int rc;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (t->sizes) /* (the class's default: Gemma's name few keys) */
            *req[i].dst = t->sizes[i];
        rc = req[i].dst == &hp->max_pos /* a bound: rotary positions size nothing */
           ? fgm_limit(root, label, req[i].key, !t->sizes, req[i].max, req[i].dst, err)
           : fgm_uint(root, label, req[i].key, !t->sizes, req[i].max, req[i].dst, err);
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

/* Whether layer l slides by the class's default rule (layer_types aside) */
static int slides_by_default(const traits *t, const fg_hparams *hp, uint32_t l,
                             uint32_t pattern, const char *letters, json_int_t from)
{
    uint32_t w = hp->sliding_window;
    switch (t->windows) {
    case WIN_PATTERN_IF_SET:
        return w && (letters ? letters[l % strlen(letters)] == 'L'
                             : pattern && (l + 1) % pattern != 0);
    case WIN_PATTERN:
        return (l + 1) % pattern != 0;
    case WIN_NOPE: /* the layers without rotary positions (nope_layers, set first) */
        return w && ((hp->nope_layers[l / 64] >> (l % 64)) & 1);
    case WIN_ODD_BELOW:
        return w && (l + 1) % 2 && (json_int_t)l < from; /* (sic) */
    default:
        return w && (json_int_t)l >= from;
    }
}

/* layer_types' entry for layer l, when the file has the list, into *windowed */
static int layer_type(json_t *lt, uint32_t l, const char *label, int *windowed, fg_err *err)
{
    if (!lt || json_is_null(lt))
        return FG_OK;
    const char *type = json_string_value(json_array_get(lt, l));
    if (!type || (strcmp(type, "full_attention") && strcmp(type, "sliding_attention")))
        return fgm_key_err(err, label, "layer_types", "entries must be "
                           "\"full_attention\" or \"sliding_attention\"");
    *windowed = !strcmp(type, "sliding_attention");
    return FG_OK;
}

/* The keys of the default rule: max_window_layers into *from, sliding_window_pattern (a count
 * into *pattern, or its letters into *letters) */
static int window_rule(json_t *root, const char *label, const traits *t, json_int_t *from,
                       uint32_t *pattern, const char **letters, fg_err *err)
{
    int from_key = t->windows == WIN_FROM || t->windows == WIN_ODD_BELOW ||
                   t->windows == WIN_FROM_ALWAYS;
    int if_set = t->windows == WIN_PATTERN_IF_SET;
    json_t *pat = if_set ? json_object_get(root, "sliding_window_pattern") : NULL;
    json_t *mwl = from_key ? json_object_get(root, "max_window_layers") : NULL;
    *letters = json_is_string(pat) ? json_string_value(pat) : NULL;
    if (mwl && !json_is_null(mwl) &&
        (!json_is_integer(mwl) || (*from = json_integer_value(mwl)) < 0))
        return fgm_key_err(err, label, "max_window_layers", "must be an integer >= 0");
    /* (a count of 0, which transformers writes beside a null window: no sliding layer) */
    if (if_set && !*letters &&
        fgm_count(root, label, "sliding_window_pattern", FG_MODEL_MAX_LAYERS, pattern, err) < 0)
        return FG_ERR_CORRUPT;
    if (t->pattern_key &&
        fgm_uint(root, label, "sliding_window_pattern", 0, FG_MODEL_MAX_LAYERS, pattern,
                 err) < 0)
        return FG_ERR_CORRUPT;
    if (*letters && (!(*letters)[0] || strspn(*letters, "LG") != strlen(*letters)))
        return fgm_key_err(err, label, "sliding_window_pattern", "must be a count or letters "
                           "L (local) and G (global)");
    return FG_OK;
}

/* Per-layer windows: layer_types when the file has it ("full_attention" / "sliding_attention"
 * per layer), else the class's default rule (traits.windows). A windowed layer without a
 * window is refused, as transformers refuses it. Sets hp->full_layers for the others (and with
 * nope_global, while there is a window, hp->nope_layers: EXAONE 4's global NoPE). */
static int layer_windows(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                         fg_err *err)
{
    int pat = t->windows == WIN_PATTERN, rc;
    json_t *lt = json_object_get(root, "layer_types");
    json_int_t from = t->window_from;
    uint32_t pattern = t->pattern, w = hp->sliding_window;
    const char *letters;
    if ((rc = window_rule(root, label, t, &from, &pattern, &letters, err)))
        return rc;
    if (lt && !json_is_null(lt) && (!json_is_array(lt) || json_array_size(lt) != hp->n_layers))
        return fgm_key_err(err, label, "layer_types", "must be a list of one entry per layer");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        int windowed = slides_by_default(t, hp, l, pattern, letters, from);
        if ((rc = layer_type(lt, l, label, &windowed, err)))
            return rc;
        if (t->windows == WIN_PATTERN_IF_SET && !w) /* (every layer full, and rotated) */
            windowed = 0;
        if (windowed && !w) /* (transformers fails there too) */
            return fgm_key_err(err, label, pat ? "sliding_window" : "layer_types",
                               pat ? "null, but a layer is a sliding one"
                                   : "a sliding_attention layer needs use_sliding_window "
                                     "true and a sliding_window");
        if (!windowed)
            hp->full_layers[l / 64] |= 1ull << (l % 64);
        if (t->nope_global && !windowed && w)
            hp->nope_layers[l / 64] |= 1ull << (l % 64);
    }
    return FG_OK;
}

/* sliding_window: absent traits.window (every config class's 4096 but gpt-oss's 128), null
 * none; read only with use_sliding_window where the class has that key. WIN_ALL windows every
 * layer (Mistral's model ignores layer_types). hp's window fields start zeroed
 * (fg_model_config_parse). */
static int window(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    int by_use = t->windows == WIN_USE_ALL || t->windows == WIN_FROM ||
                 t->windows == WIN_ODD_BELOW || t->windows == WIN_NOPE;
    int use = t->windows != WIN_NONE && !by_use, rc;
    if (by_use && (rc = fgm_bool(root, label, "use_sliding_window", 0, &use, err)))
        return rc;
    if (use && !json_object_get(root, "sliding_window"))
        hp->sliding_window = t->window;
    if (use && (rc = fgm_limit(root, label, "sliding_window", 0, UINT32_MAX / 2,
                               &hp->sliding_window, err)) < 0)
        return rc;
    return t->windows >= WIN_LAYER_TYPES ? layer_windows(root, label, t, hp, err) : FG_OK;
}

/* no_rope_layers (nope_layers): a list of one 0 (no rotary positions) or 1 per layer, or
 * without it every no_rope_layer_interval-th layer (default 4) without; into hp->nope_layers */
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

/* The activation (traits.act): hidden_act "silu"; hidden_act "gelu_pytorch_tanh" or "gelu"
 * (the released Gemma files' legacy name, which GemmaConfig takes for the tanh approximation);
 * hidden_activation, gelu_pytorch_tanh by default, "gelu" the exact GELU */
static int activation(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                      fg_err *err)
{
    static const char *const silu[] = {"silu"}, *const gelu[] = {"gelu_pytorch_tanh", "gelu"};
    int act = 0, rc = t->act == ACT_SILU
                    ? fgm_enum(root, label, "hidden_act", silu, 1, 0, &act, err)
                    : fgm_enum(root, label, t->act == ACT_GELU_TANH ? "hidden_act"
                                                                    : "hidden_activation",
                               gelu, 2, 0, &act, err);
    if (rc < 0)
        return rc;
    hp->act = t->act == ACT_SILU ? FG_ACT_SILU
            : t->act == ACT_GELU_KEY && act ? FG_ACT_GELU : FG_ACT_GELU_TANH;
    return FG_OK;
}

/* Logit soft-capping (traits.softcap): read, attn_logit_softcapping (default 50) and
 * final_logit_softcapping (default 30), null for none; or refused; causal attention only
 * (use_bidirectional_attention refused) either way */
static int softcap(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                   fg_err *err)
{
    static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping",
                                       "use_bidirectional_attention"};
    float *cap[2] = {&hp->attn_softcap, &hp->final_softcap};
    char what[96];
    int rc;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(root, caps[i]);
        if (i < 2 && f->t.softcap == SOFTCAP_READ) {
            *cap[i] = i ? 30.0f : 50.0f;
            if (v && json_is_null(v))
                *cap[i] = 0;
            else if ((rc = fgm_float(root, label, caps[i], 1e-6, 1e9, 0, cap[i], err)) < 0)
                return rc;
            continue;
        }
        if (v && !json_is_null(v) && !json_is_false(v)) {
            snprintf(what, sizeof what, "logit soft-capping in %s (Gemma 2's)", f->arch.noun);
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s: %s is not supported", label,
                              caps[i], i == 2 ? "bidirectional attention (an embedding model)"
                                              : what);
        }
    }
    return FG_OK;
}

/* The layer's activation and scales: soft-capping, q's scale by query_pre_attn_scalar (256),
 * embeddings times sqrt(hidden) in f32, RMSNorms by 1 + w */
static int layer_keys(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                      fg_err *err)
{
    const traits *t = &f->t;
    float q = 256.0f;
    int rc;
    if ((rc = activation(root, label, t, hp, err)) ||
        (t->softcap && (rc = softcap(root, label, f, hp, err))))
        return rc;
    if (t->scaled_embedding)
        hp->embed_scale = (float)sqrt((double)hp->hidden);
    hp->norm_plus_one = t->norm_plus_one;
    if (t->query_scalar &&
        (rc = fgm_float(root, label, "query_pre_attn_scalar", 1e-6, 1e9, 0, &q, err)) < 0)
        return rc;
    if (t->query_scalar)
        hp->attn_scale = (float)(1.0 / sqrt((double)q));
    hp->norm_eps = t->eps;
    if ((rc = fgm_float(root, label, "rms_norm_eps", 0, 1, 0, &hp->norm_eps, err)) < 0)
        return rc;
    return fgm_bool(root, label, "tie_word_embeddings", t->tied, &hp->tied_head, err);
}

/* attention_bias, mlp_bias, qkv_bias where the class reads them */
static int bias_keys(json_t *root, const char *label, const traits *t, int *attn, int *mlp,
                     fg_err *err)
{
    int rc;
    *attn = t->qkv_bias, *mlp = 0;
    if (t->attention_bias &&
        (rc = fgm_bool(root, label, "attention_bias", t->attention_bias == 2, attn, err)))
        return rc;
    if (t->mlp_bias && (rc = fgm_bool(root, label, "mlp_bias", 0, mlp, err)))
        return rc;
    if (t->qkv_bias_key && (rc = fgm_bool(root, label, "qkv_bias", 1, attn, err)))
        return rc;
    return FG_OK;
}

/* clip_qkv (OLMo's; OLMoE's releases have null) refused; the ids with the class's defaults */
static int ids(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    json_t *clip = json_object_get(root, "clip_qkv");
    uint32_t n;
    int rc;
    if (clip && !json_is_null(clip))
        return fgm_key_err(err, label, "clip_qkv", "is not supported (q, k and v clamped): "
                           "only null");
    if ((rc = fgm_tokens(root, label, "bos_token_id", t->bos, &hp->bos_id, 1, &n, err)) ||
        (rc = fgm_tokens(root, label, "eos_token_id", t->eos, hp->eos_ids, FG_MODEL_MAX_EOS,
                         &hp->n_eos, err)) ||
        (rc = fgm_tokens(root, label, "pad_token_id", t->pad, &hp->pad_id, 1, &n, err)))
        return rc;
    hp->eos_id = hp->eos_ids[0];
    return FG_OK;
}

/* The biases of q/k/v, o, the MLP (and the head) from the keys read (bias_keys) and the
 * class's o and use_bias rules */
static int biases(json_t *root, const char *label, const traits *t, int attn, int mlp,
                  fg_hparams *hp, fg_err *err)
{
    int rc;
    hp->qkv_bias = attn;
    hp->out_bias = t->attention_bias && attn && t->out_bias == OUT_BIAS_ATTN;
    if (t->out_bias == OUT_BIAS_KEY &&
        (rc = fgm_bool(root, label, "attention_out_bias", 0, &hp->out_bias, err)))
        return rc;
    if (t->use_bias) { /* every Linear layer's (q/k/v/o, gate/up/down) */
        if ((rc = fgm_bool(root, label, "use_bias", 0, &hp->qkv_bias, err)))
            return rc;
        hp->out_bias = hp->qkv_bias;
        mlp = hp->qkv_bias;
        hp->head_bias = hp->qkv_bias && t->moe; /* (with experts, the lm_head's too) */
    }
    hp->mlp_bias = mlp;
    return FG_OK;
}

/* The norms: q/k (use_qk_norm where read: per head), before and after each block */
static int norms(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    int qkn = 0, rc;
    hp->norm = FG_NORM_RMS;
    hp->pre_norm = hp->final_norm = 1;
    hp->qk_norm = t->qk_norm;
    if (t->qk_norm_key && (rc = fgm_bool(root, label, "use_qk_norm", 0, &qkn, err)))
        return rc;
    if (qkn)
        hp->qk_norm = FG_QK_NORM_HEAD;
    hp->sandwich = t->post_norms_only ? FG_SANDWICH_AFTER
                 : t->sandwich_norms ? FG_SANDWICH_BOTH : 0;
    return FG_OK;
}

int fgm_family_parse(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                     fg_err *err)
{
    const traits *t = &f->t;
    int rc, attn, mlp;
    if ((rc = sizes(root, label, t, hp, err)) ||
        (t->mla && (rc = fgm_mla(root, label, t, hp, err))) ||
        (t->nope_layers && (rc = no_rope(root, label, hp, err))) ||
        (rc = fgm_rope(root, label, t, hp, err)) ||
        (rc = window(root, label, t, hp, err)) ||
        (f->hook && (rc = f->hook(root, label, hp, err))) ||
        (rc = layer_keys(root, label, f, hp, err)) ||
        (rc = bias_keys(root, label, t, &attn, &mlp, err)) ||
        (t->moe && (rc = fgm_moe(root, label, t, hp, err))))
        return rc;
    hp->attn_sinks = t->attn_sinks;
    if ((rc = ids(root, label, t, hp, err)))
        return rc;
    hp->gated = 1;
    hp->pos = FG_POS_ROPE;
    if (!(hp->rope.theta > 0))
        hp->rope.theta = 10000.0f;
    hp->rope_interleaved = t->rope_interleaved;
    if ((rc = biases(root, label, t, attn, mlp, hp, err)) ||
        (rc = norms(root, label, t, hp, err)) ||
        (t->mla && (rc = fgm_mla_finish(root, label, t, hp, err))))
        return rc;
    return fgm_dtype(root, label, hp, err);
}
