/* mla.c - multi-head latent attention's config keys (traits.mla: DeepSeek-V2/V3, Kimi K2) into
 * fg_hparams (model.h's mla fields say what they mean and how the decoder runs them).
 *
 * DeepseekV2Config's and DeepseekV3Config's keys: q_lora_rank (1536; null: q_proj straight from
 * the hidden state, V2-Lite's), kv_lora_rank (512), qk_nope_head_dim (128), qk_rope_head_dim
 * (64), v_head_dim (128). transformers' config sets head_dim to qk_rope_head_dim, the dims its
 * rotary embedding rotates (YaRN's ramp is over them): fgm_mla sets hp->head_dim so before the
 * rotary settings are read, and fgm_mla_finish turns hp into the absorbed attention's shape
 * afterwards (one KV head of kv_lora_rank + qk_rope_head_dim, the rotated dims its first
 * qk_rope_head_dim). The rotary dims are (even, odd) pairs in the checkpoint (V2's complex
 * rotation; V3's rope_interleave, default true), reordered at conversion as ERNIE's.
 *
 * The softmax scale is (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times mscale(factor,
 * mscale_all_dim)^2 for a rope object of a type other than default with a non-zero
 * mscale_all_dim (traits.mla_mscale: transformers' yarn_apply_mscale, which DeepseekV2Attention
 * and DeepseekV3Attention both apply, as DeepSeek's own code does). YaRN's own
 * attention factor (mscale / mscale_all_dim, 1 for DeepSeek-V3's and Kimi K2's files) scales the
 * rotated dims of q and k as rope.c reads it.
 *
 * FG_MLA_PREFILL (the environment at config load: auto, the default; absorb; expand) becomes
 * hp->mla_prefill, how prefill steps attend (decoder.c); any other value is refused naming it.
 *
 * Refused: DeepSeek-V3.2's sparse attention (index_topk, index_n_heads, index_head_dim), biases
 * on the projections (attention_bias true; no published MLA model has them).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "families.h"

int fgm_mla(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    static const char *const sparse[] = {"index_topk", "index_n_heads", "index_head_dim"};
    int rc, bias = 0;
    (void)t;
    for (size_t i = 0; i < sizeof sparse / sizeof sparse[0]; i++) {
        json_t *v = json_object_get(root, sparse[i]);
        if (v && !json_is_null(v))
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s: DeepSeek-V3.2's sparse "
                              "attention (its lightning indexer) is not supported", label,
                              sparse[i]);
    }
    if ((rc = fgm_bool(root, label, "attention_bias", 0, &bias, err)))
        return rc;
    if (bias)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key attention_bias: biases on the latent "
                          "attention's projections are not supported (only false)", label);
    hp->q_lora_rank = 1536, hp->kv_lora_rank = 512;
    hp->qk_nope_dim = 128, hp->qk_rope_dim = 64, hp->v_head_dim = 128;
    json_t *ql = json_object_get(root, "q_lora_rank");
    if (ql && json_is_null(ql))
        hp->q_lora_rank = 0;
    else if ((rc = fgm_uint(root, label, "q_lora_rank", 0, FG_MODEL_MAX_DIM, &hp->q_lora_rank,
                            err)) < 0)
        return rc;
    if ((rc = fgm_uint(root, label, "kv_lora_rank", 0, FG_MODEL_MAX_DIM, &hp->kv_lora_rank,
                       err)) < 0 ||
        (rc = fgm_uint(root, label, "qk_nope_head_dim", 0, FG_MODEL_MAX_DIM, &hp->qk_nope_dim,
                       err)) < 0 ||
        (rc = fgm_uint(root, label, "qk_rope_head_dim", 0, FG_MODEL_MAX_DIM, &hp->qk_rope_dim,
                       err)) < 0 ||
        (rc = fgm_uint(root, label, "v_head_dim", 0, FG_MODEL_MAX_DIM, &hp->v_head_dim,
                       err)) < 0)
        return rc;
    if (!hp->kv_lora_rank || !hp->qk_nope_dim || !hp->v_head_dim)
        return fgm_key_err(err, label, "kv_lora_rank", "kv_lora_rank, qk_nope_head_dim and "
                           "v_head_dim must be > 0");
    if (hp->qk_rope_dim < 2 || hp->qk_rope_dim % 2 || hp->qk_rope_dim > 2 * FG_ROPE_MAX_EXT)
        return fgm_key_err(err, label, "qk_rope_head_dim", "must be even, 2 to 256");
    hp->head_dim = hp->qk_rope_dim; /* the rotary settings' dims (DeepseekV2Config's head_dim) */
    return FG_OK;
}

/* YaRN's mscale: 1 + 0.1 m ln(scale), 1 for scale <= 1 */
static double mscale(double scale, double m)
{
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* FG_MLA_PREFILL into hp->mla_prefill (unset or empty: auto) */
static int prefill_mode(fg_hparams *hp, fg_err *err)
{
    static const char *const names[] = {"auto", "absorb", "expand"};
    const char *v = getenv("FG_MLA_PREFILL");
    hp->mla_prefill = FG_MLA_PREFILL_AUTO;
    for (int i = 0; v && *v && i < 3; i++)
        if (!strcmp(v, names[i])) {
            hp->mla_prefill = (fg_mla_prefill)i;
            return FG_OK;
        }
    if (v && *v)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "FG_MLA_PREFILL=%s: not auto, absorb or "
                          "expand", v);
    return FG_OK;
}

int fgm_mla_finish(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                   fg_err *err)
{
    int rc, inter = t->rope_interleaved;
    if (t->rope_interleave_key &&
        (rc = fgm_bool(root, label, "rope_interleave", 1, &inter, err)))
        return rc;
    double scale = 1.0 / sqrt((double)hp->qk_nope_dim + hp->qk_rope_dim);
    json_t *s = json_object_get(root, "rope_parameters");
    if (!s)
        s = json_object_get(root, "rope_scaling");
    float m_all = 0;
    if (t->mla_mscale && json_is_object(s) && hp->rope.scaling != FG_ROPE_NONE &&
        fgm_float(s, label, "mscale_all_dim", 0, 1e6, 0, &m_all, NULL) < 0)
        return fgm_key_err(err, label, "rope_scaling", "mscale_all_dim must be a number >= 0");
    if (m_all > 0) {
        double m = mscale(hp->rope.factor, m_all);
        scale *= m * m;
    }
    if ((rc = prefill_mode(hp, err)))
        return rc;
    hp->mla = 1;
    hp->rope_interleaved = inter;
    hp->rope.rot_dim = hp->qk_rope_dim;
    hp->head_dim = hp->kv_lora_rank + hp->qk_rope_dim;
    hp->n_kv_heads = 1;
    hp->attn_scale = (float)scale;
    if ((uint64_t)hp->n_heads * (hp->qk_nope_dim + hp->v_head_dim) > FG_MODEL_MAX_DIM ||
        (uint64_t)hp->n_heads * hp->head_dim > FG_MODEL_MAX_DIM)
        return fgm_key_err(err, label, "num_attention_heads", "times the heads' widths exceeds "
                           "fg's limits");
    return FG_OK;
}
