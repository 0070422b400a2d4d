/* rope.c - rotary settings of a Llama-style config into fg_hparams (hp->rope, and with
 * traits.local_rope the sliding layers' hp->rope_local).
 *
 * They are read from rope_theta / rope_scaling, or from transformers 5's rope_parameters object
 * (one per layer type where the layers differ), whichever the file has: rope_type default,
 * linear, dynamic (the default frequencies within max_position_embeddings, which bounds every
 * fg context), llama3, yarn, or with traits.longrope Phi-3's longrope alone
 * (original_max_position_embeddings, where they need it, defaults to max_position_embeddings
 * and yields to a top-level key, as transformers 5 settles it). traits.partial_rotary reads
 * partial_rotary_factor (or MiniMax-M2's rotary_dim); traits.rope_dflt is the config class's
 * own rope object for a file without one; traits.llama4_scaling reads Llama 4's q scaling beta.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "families.h"

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

/* rope_scaling (or rope_parameters) -> hp->rope; theta from rope_theta or the object. Without
 * either, the class's own (traits.rope_dflt: Ministral3Config's YaRN, factor 16 over 16384
 * positions, theta 1e6, llama_4_scaling_beta 0.1; GptOssConfig's); with traits.llama4_scaling,
 * the object's llama_4_scaling_beta (hp->llama4_beta). */
static int rope(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    const char *key = json_object_get(root, "rope_parameters") ? "rope_parameters"
                                                               : "rope_scaling";
    json_t *s = json_object_get(root, key), *dflt = NULL;
    int own = t->rope_dflt && (!s || json_is_null(s)); /* the class's when the file has none */
    if (own)
        s = dflt = json_loads(t->rope_dflt, 0, NULL);
    if (t->theta > 0)
        hp->rope.theta = t->theta; /* the config class's default_theta (gpt-oss, MiniMax-M2) */
    int rc = own && !s ? fg_err_set(err, FG_ERR_NOMEM, "out of memory")
                       : rope_in(root, s, key, "rope_theta", label, t, hp, err);
    if (rc == FG_OK && t->llama4_scaling && /* absent (1): none */
        fgm_float(s, label, "llama_4_scaling_beta", 0, 1e6, 0, &hp->llama4_beta, NULL) < 0)
        rc = fgm_key_err(err, label, key, "llama_4_scaling_beta must be a number >= 0");
    if (rc == FG_OK && hp->llama4_beta > 0 && !hp->rope.orig_max_pos)
        rc = fgm_key_err(err, label, key, "llama_4_scaling_beta needs "
                         "original_max_position_embeddings (a llama3 or yarn rope_type)");
    json_decref(dflt);
    return rc;
}

/* Two rotary settings (traits.local_rope): the full layers' (rope_theta, default 1e6 or
 * traits.theta, and rope_scaling) and the sliding layers' (the local_rope key: Gemma 3's
 * rope_local_base_freq, default 1e4 or traits.theta; no scaling), or transformers 5's
 * rope_parameters with one object for each layer type. The local ones land in rope_local. OLMo
 * 3's: rope_theta (default 5e5) for both, rope_scaling the full layers' only. */
static int local_rope(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                      fg_err *err)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    int nested = json_is_object(rp) && (json_object_get(rp, "full_attention") ||
                                        json_object_get(rp, "sliding_attention"));
    hp->rope.theta = t->theta > 0 ? t->theta : 10000.0f;
    int rc = nested ? rope_in(root, json_object_get(rp, "sliding_attention"),
                              "rope_parameters.sliding_attention", NULL, label, t, hp, err)
                    : rope_in(root, NULL, "", t->local_rope, label, t, hp, err);
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
    if (t->partial_rotary > 0 &&
        (rc = partial_rotary(root, s, label, t->partial_rotary, hp, err)))
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
        return type || t->longrope ? FG_OK : fgm_key_err(err, label, key, "rope_type missing");
    if (t->longrope) { /* Phi3Config: "su" and "yarn" are longrope's old names; nothing else */
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

int fgm_rope(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    return t->local_rope ? local_rope(root, label, t, hp, err) : rope(root, label, t, hp, err);
}
