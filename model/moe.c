/* moe.c - a mixture of experts' config keys (traits.moe: which keys and router the config class
 * has) into fg_hparams: the experts, top k, widths, the router's kind (softmax or sigmoid
 * scores, the choice bias, groups), shared experts, and which layers are sparse.
 *
 * Mixtral's keys (MOE_TOPK): num_local_experts or num_experts (either spelling, the same value
 * when both), num_experts_per_tok, the experts intermediate_size wide on every layer, the top k
 * renormalized; Qwen's (MOE_SPARSE_STEP): moe_intermediate_size (intermediate_size being the
 * dense layers'), norm_topk_prob, mlp_only_layers and decoder_sparse_step, Qwen2-MoE's gated
 * shared expert (shared_expert_intermediate_size); DeepSeek-V3's router (MOE_GROUPED: GLM-4
 * MoE, dots.llm1); ERNIE 4.5's layer range (MOE_LAYER_RANGE); gpt-oss's biased experts with the
 * clamped SwiGLU (MOE_TOPK_BIASED).
 */
#include "families.h"

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
static int biased_experts(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
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
/* topk_method and scoring_func of a DeepSeek-style router: MOE_GROUPED_SOFTMAX's greedy or
 * group_limited_greedy (DeepseekV2Moe) with softmax scores, MOE_GROUPED's traits.topk_method
 * (noaux_tc: DeepseekV3MoE) with sigmoid ones; a file naming another is refused by key. */
static int topk_method(json_t *root, const char *label, const traits *t, int *method,
                       fg_err *err)
{
    static const char *const v2[] = {"greedy", "group_limited_greedy"};
    static const char *const sm[] = {"softmax"}, *const sg[] = {"sigmoid"};
    int soft = t->moe == MOE_GROUPED_SOFTMAX, which, rc;
    *method = 0;
    if (!soft && !t->topk_method)
        return FG_OK;
    if ((rc = fgm_enum(root, label, "scoring_func", soft ? sm : sg, 1, 0, &which, err)) < 0)
        return rc;
    if (soft)
        return fgm_enum(root, label, "topk_method", v2, 2, 0, method, err) < 0 ? FG_ERR_CORRUPT
                                                                                : FG_OK;
    const char *const mine[] = {t->topk_method};
    return fgm_enum(root, label, "topk_method", mine, 1, 0, &which, err) < 0 ? FG_ERR_CORRUPT
                                                                              : FG_OK;
}

/* MOE_GROUPED_SOFTMAX's router (DeepseekV2Moe): the softmax's top k of every expert (greedy) or
 * of the topk_group groups (n_group, both required) with the best single scores
 * (group_limited_greedy), no choice bias, times routed_scaling_factor; renormalized (the sum +
 * 1e-20) only with norm_topk_prob true, as DeepSeek's own code (transformers 5 ignores the key;
 * the published files have false). */
static int softmax_router(json_t *root, const char *label, int method, fg_hparams *hp,
                          fg_err *err)
{
    hp->router_sigmoid = 0;
    hp->router_corr = 0;
    hp->router_group_max = method == 1;
    if (method == 0) {
        hp->n_group = hp->topk_group = 1;
        return FG_OK;
    }
    json_t *g = json_object_get(root, "n_group"), *k = json_object_get(root, "topk_group");
    if (!g || json_is_null(g) || !k || json_is_null(k))
        return fgm_key_err(err, label, "n_group", "group_limited_greedy needs n_group and "
                           "topk_group");
    return FG_OK;
}

static int grouped_experts(json_t *root, const char *label, const traits *t, fg_hparams *hp,
                       fg_err *err)
{
    uint32_t shared = t->n_shared ? t->n_shared : 1, dense = t->first_dense;
    int rc, method;
    if ((rc = topk_method(root, label, t, &method, err)))
        return rc;
    if (json_is_null(json_object_get(root, "n_shared_experts")))
        shared = 0; /* (DeepseekV2Moe: none) */
    hp->n_experts = t->experts, hp->top_k = t->top_k, hp->moe_ffn = t->moe_ffn;
    hp->n_group = t->n_group ? t->n_group : 1, hp->topk_group = t->topk_group ? t->topk_group : 1;
    hp->routed_scale = t->routed_scale > 0 ? t->routed_scale : 1.0f, hp->norm_topk = t->norm_topk;
    hp->mtp_layers = t->mtp;
    /* (Dots1Config has no expert counts of its own: transformers fails without them) */
    if (t->experts_required && !json_object_get(root, "n_shared_experts"))
        return fgm_key_err(err, label, "n_shared_experts", "missing");
    int req = t->experts_required;
    if ((rc = fgm_uint(root, label, "n_routed_experts", req, FG_MODEL_MAX_EXPERTS,
                       &hp->n_experts, err)) < 0 ||
        (rc = fgm_uint(root, label, "num_experts_per_tok", req, FG_MODEL_MAX_EXPERTS, &hp->top_k,
                       err)) < 0 ||
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
    return t->moe == MOE_GROUPED_SOFTMAX ? softmax_router(root, label, method, hp, err) : FG_OK;
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
static int layer_range_experts(json_t *root, const char *label, const traits *t, fg_hparams *hp,
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

int fgm_moe(json_t *root, const char *label, const traits *t, fg_hparams *hp, fg_err *err)
{
    static const char *const keys[] = {"num_local_experts", "num_experts"};
    uint32_t v[2] = {0, 0};
    int rc;
    int topk = t->moe == MOE_TOPK || t->moe == MOE_TOPK_NORM_KEY || t->moe == MOE_TOPK_BIASED ||
               t->moe == MOE_TOPK_SIGMOID; /* the experts intermediate_size wide */
    if (t->moe == MOE_GROUPED || t->moe == MOE_GROUPED_SOFTMAX)
        return grouped_experts(root, label, t, hp, err);
    if (t->moe == MOE_LAYER_RANGE)
        return layer_range_experts(root, label, t, hp, err);
    if (t->moe == MOE_TOPK_SIGMOID) /* sigmoid scores, the choice bias, renormalized */
        hp->router_sigmoid = 1, hp->router_corr = 1, hp->n_group = hp->topk_group = 1;
    for (int i = 0; i < 2; i++) {
        json_t *k = json_object_get(root, keys[i]);
        if (k && json_is_integer(k) && json_integer_value(k) == 0 && !topk)
            return FG_OK; /* Qwen: num_experts 0, every layer dense (n_experts stays 0) */
        if ((rc = fgm_uint(root, label, keys[i], 0, FG_MODEL_MAX_EXPERTS, &v[i], err)) < 0)
            return rc;
    }
    if (v[0] && v[1] && v[0] != v[1])
        return fgm_key_err(err, label, "num_experts", "differs from num_local_experts");
    hp->n_experts = v[0] ? v[0] : v[1] ? v[1] : t->experts;
    hp->top_k = t->top_k;
    hp->moe_ffn = topk ? hp->ffn : t->moe_ffn;
    hp->shared_ffn = t->moe == MOE_SPARSE_STEP_SHARED ? t->shared_ffn : 0;
    hp->norm_topk = t->norm_topk;
    if ((rc = fgm_uint(root, label, "num_experts_per_tok", 0, FG_MODEL_MAX_EXPERTS, &hp->top_k,
                       err)) < 0)
        return rc;
    if (hp->top_k > hp->n_experts)
        return fgm_key_err(err, label, "num_experts_per_tok", "exceeds the experts");
    if (t->moe == MOE_TOPK || t->moe == MOE_TOPK_SIGMOID)
        return FG_OK;
    if (t->moe == MOE_TOPK_BIASED)
        return biased_experts(root, label, hp, err);
    if (t->moe == MOE_TOPK_NORM_KEY) /* every layer sparse, the experts intermediate_size wide */
        return fgm_bool(root, label, "norm_topk_prob", hp->norm_topk, &hp->norm_topk, err);
    if ((rc = fgm_uint(root, label, "moe_intermediate_size", 0, FG_MODEL_MAX_DIM, &hp->moe_ffn,
                       err)) < 0 ||
        (t->moe == MOE_SPARSE_STEP_SHARED &&
         (rc = fgm_uint(root, label, "shared_expert_intermediate_size", 0, FG_MODEL_MAX_DIM,
                        &hp->shared_ffn, err)) < 0) ||
        (rc = fgm_bool(root, label, "norm_topk_prob", 0, &hp->norm_topk, err)))
        return rc;
    return dense_layers(root, label, hp, err);
}
