/* opt.c - OPT (Zhang et al. 2022; transformers' modeling_opt.py) as a table entry.
 *
 * config.json: model_type "opt"; required vocab_size, hidden_size, num_hidden_layers, ffn_dim,
 * num_attention_heads, max_position_embeddings; word_embed_proj_dim (default hidden_size),
 * do_layer_norm_before (1), _remove_final_layer_norm (0), enable_bias (1),
 * layer_norm_elementwise_affine (1; false is refused), tie_word_embeddings (1), activation_function "relu" (the
 * default; "gelu" also runs), bos/eos/pad ids (2/2/1). LayerNorm eps is 1e-5 (OPT's value).
 *
 * Tensors (canonical names are OPTForCausalLM's): embed_tokens [vocab, word_embed_proj_dim];
 * embed_positions [max_position_embeddings + 2, hidden] (learned positions offset by 2);
 * project_in [hidden, proj] and project_out [proj, hidden], no bias, only when proj != hidden
 * (opt-350m); final_layer_norm only when do_layer_norm_before and not _remove_final_layer_norm;
 * per layer q/k/v/out_proj [hidden, hidden] (+ bias when enable_bias), self_attn_layer_norm and
 * final_layer_norm [hidden] (when affine), fc1 [ffn, hidden], fc2 [hidden, ffn] (+ biases);
 * lm_head [vocab, proj], optional when tied (it is the token embedding).
 *
 * Names: a checkpoint may spell them without "model." (OPTModel checkpoints and FlexGen's numpy
 * directories), and FlexGen calls model.decoder.final_layer_norm decoder.layer_norm.
 */
#include <stdio.h>
#include <string.h>

#include "model_int.h"

static int parse_root(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    static const char *const acts[] = {"relu", "gelu"};
    int rc, act = 0;
    if ((rc = fgm_enum(root, label, "activation_function", acts, 2, 0, &act, err)) < 0)
        return rc;
    const struct { const char *key; uint32_t *dst; uint32_t max; } req[] = {
        {"vocab_size", &hp->vocab_size, FG_MODEL_MAX_DIM},
        {"hidden_size", &hp->hidden, FG_MODEL_MAX_DIM},
        {"num_hidden_layers", &hp->n_layers, FG_MODEL_MAX_LAYERS},
        {"ffn_dim", &hp->ffn, FG_MODEL_MAX_DIM},
        {"num_attention_heads", &hp->n_heads, FG_MODEL_MAX_DIM},
        {"max_position_embeddings", &hp->max_pos, FG_MODEL_MAX_DIM},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if ((rc = fgm_uint(root, label, req[i].key, 1, req[i].max, req[i].dst, err)))
            return rc;
    if (hp->hidden % hp->n_heads)
        return fgm_key_err(err, label, "num_attention_heads", "does not divide hidden_size");
    hp->embed_dim = hp->hidden;
    if ((rc = fgm_uint(root, label, "word_embed_proj_dim", 0, FG_MODEL_MAX_DIM, &hp->embed_dim,
                       err)) < 0)
        return rc;
    int pre, remove_final, bias, affine;
    if ((rc = fgm_bool(root, label, "do_layer_norm_before", 1, &pre, err)) ||
        (rc = fgm_bool(root, label, "_remove_final_layer_norm", 0, &remove_final, err)) ||
        (rc = fgm_bool(root, label, "enable_bias", 1, &bias, err)) ||
        (rc = fgm_bool(root, label, "layer_norm_elementwise_affine", 1, &affine, err)) ||
        (rc = fgm_bool(root, label, "tie_word_embeddings", 1, &hp->tied_head, err)))
        return rc;
    if (!affine)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key layer_norm_elementwise_affine: "
                          "false (LayerNorms without weights) is not supported", label);
    uint32_t n;
    if ((rc = fgm_tokens(root, label, "bos_token_id", 2, &hp->bos_id, 1, &n, err)) ||
        (rc = fgm_tokens(root, label, "eos_token_id", 2, hp->eos_ids, FG_MODEL_MAX_EOS,
                         &hp->n_eos, err)) ||
        (rc = fgm_tokens(root, label, "pad_token_id", 1, &hp->pad_id, 1, &n, err)))
        return rc;
    hp->eos_id = hp->eos_ids[0];
    hp->n_kv_heads = hp->n_heads;
    hp->head_dim = hp->hidden / hp->n_heads;
    hp->norm = FG_NORM_LAYER;
    hp->norm_eps = 1e-5f;
    hp->act = act ? FG_ACT_GELU : FG_ACT_RELU;
    hp->pos = FG_POS_LEARNED;
    hp->pos_offset = 2;
    hp->pre_norm = pre;
    hp->final_norm = pre && !remove_final;
    hp->qkv_bias = hp->out_bias = hp->mlp_bias = bias;
    return fgm_dtype(root, label, hp, err);
}

static int parse_config(const char *json, size_t len, const char *label, fg_hparams *hp,
                        fg_err *err)
{
    return fgm_parse(json, len, label, parse_root, hp, err);
}

static void linear(fg_tensor_spec *o, uint32_t *n, const char *p, fg_role w, int bias, fg_access a,
                   uint64_t out, uint64_t in)
{
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", p);
    fgm_spec(o, n, name, w, a, out, in);
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", p);
        fgm_spec(o, n, name, (fg_role)(w + 1), FG_ACCESS_SMALL, out, 0);
    }
}

static void norm(fg_tensor_spec *o, uint32_t *n, const fg_hparams *hp, const char *p)
{
    linear(o, n, p, FG_ROLE_NORM_W, 1, FG_ACCESS_SMALL, hp->hidden, 0);
}

static uint32_t unit_tensors(const fg_hparams *hp, fg_unit_kind kind, uint32_t l, fg_tensor_spec *o)
{
    uint32_t n = 0;
    uint64_t h = hp->hidden, e = hp->embed_dim;
    char p[FG_TENSOR_NAME_MAX];
    static const char *proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    static const fg_role roles[] = {FG_ROLE_WQ, FG_ROLE_WK, FG_ROLE_WV, FG_ROLE_WO};
    switch (kind) {
    case FG_UNIT_EMBED:
        fgm_spec(o, &n, "model.decoder.embed_tokens.weight", FG_ROLE_TOK_EMBED, FG_ACCESS_GATHER,
                 hp->vocab_size, e);
        fgm_spec(o, &n, "model.decoder.embed_positions.weight", FG_ROLE_POS_EMBED,
                 FG_ACCESS_SMALL, (uint64_t)hp->max_pos + 2, h);
        if (e != h)
            fgm_spec(o, &n, "model.decoder.project_in.weight", FG_ROLE_PROJ_IN, FG_ACCESS_SMALL,
                     h, e);
        break;
    case FG_UNIT_ATTN:
        snprintf(p, sizeof p, "model.decoder.layers.%u.self_attn_layer_norm", l);
        norm(o, &n, hp, p);
        for (int k = 0; k < 4; k++) {
            snprintf(p, sizeof p, "model.decoder.layers.%u.self_attn.%s", l, proj[k]);
            linear(o, &n, p, roles[k], hp->qkv_bias, FG_ACCESS_LINEAR, h, h);
        }
        break;
    case FG_UNIT_MLP:
        snprintf(p, sizeof p, "model.decoder.layers.%u.final_layer_norm", l);
        norm(o, &n, hp, p);
        snprintf(p, sizeof p, "model.decoder.layers.%u.fc1", l);
        linear(o, &n, p, FG_ROLE_W_UP, hp->mlp_bias, FG_ACCESS_LINEAR, hp->ffn, h);
        snprintf(p, sizeof p, "model.decoder.layers.%u.fc2", l);
        linear(o, &n, p, FG_ROLE_W_DOWN, hp->mlp_bias, FG_ACCESS_LINEAR, h, hp->ffn);
        break;
    case FG_UNIT_HEAD:
        if (hp->final_norm)
            norm(o, &n, hp, "model.decoder.final_layer_norm");
        if (e != h)
            fgm_spec(o, &n, "model.decoder.project_out.weight", FG_ROLE_PROJ_OUT, FG_ACCESS_SMALL,
                     e, h);
        fgm_spec(o, &n, "lm_head.weight", FG_ROLE_LM_HEAD, FG_ACCESS_STREAM, hp->vocab_size, e);
        if (hp->tied_head) {
            o[n - 1].optional = 1;
            snprintf(o[n - 1].fallback, sizeof o[n - 1].fallback, "%s",
                     "model.decoder.embed_tokens.weight");
        }
        break;
    }
    return n;
}

static const char *canonical_name(const char *name, char *buf, size_t cap)
{
    const char *rest = name;
    if (strncmp(name, "model.decoder.", 14) == 0)
        rest = name + 6;
    if (strncmp(rest, "decoder.", 8) != 0) {
        int k = snprintf(buf, cap, "%s", name);
        return k >= 0 && (size_t)k < cap ? buf : NULL;
    }
    /* FlexGen's numpy directories call the final layer norm decoder.layer_norm */
    const char *fl = strncmp(rest, "decoder.layer_norm.", 19) == 0 ? rest + 19 : NULL;
    int k = fl ? snprintf(buf, cap, "model.decoder.final_layer_norm.%s", fl)
               : snprintf(buf, cap, "model.%s", rest);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

const fg_arch fg_arch_opt = {
    "opt", "an OPT", parse_config, unit_tensors, canonical_name, fg_model_embed, fg_model_attn_pre,
    fg_model_attn_core, fg_model_attn_post, fg_model_mlp, fg_model_head,
};
