/* names.c - the checkpoint spellings of the Llama-style families' tensors (fg_arch's
 * canonical_name, derived, fused, stacked and unused): the *ForCausalLM names are canonical,
 * a base model's (LlamaModel: no "model.") gains the prefix, and each other spelling maps onto
 * them by suffix (map_suffix) or infix (Mixtral's block_sparse_moe). A row of families.c names
 * the ones its checkpoints use; none reads a family, only fg_hparams.
 *
 * model.layers.N.self_attn.rotary_emb.inv_freq [rot_dim / 2], which checkpoints written by
 * transformers before 4.31 carry, is accepted and skipped (fg_arch.derived): the frequencies
 * come from config.json, as in transformers since.
 */
#include <stdio.h>
#include <string.h>

#include "families.h"

/* Names are the *ForCausalLM ones; a base-model checkpoint (LlamaModel) lacks "model.". */
const char *fgm_names_hf(const char *name, char *buf, size_t cap)
{
    int base = strncmp(name, "model.", 6) && strcmp(name, "lm_head.weight") &&
               (!strncmp(name, "layers.", 7) || !strncmp(name, "embed_tokens.", 13) ||
                !strncmp(name, "norm.", 5));
    int k = snprintf(buf, cap, "%s%s", base ? "model." : "", name);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* A decimal index at d (1 to 8 digits, no leading zero) into *v: the end of it, or NULL. */
static const char *index_at(const char *d, uint64_t *v)
{
    const char *p = d;
    *v = 0;
    while (*p >= '0' && *p <= '9' && p - d < 8)
        *v = *v * 10 + (uint64_t)(*p++ - '0');
    return p == d || (*d == '0' && p - d > 1) ? NULL : p;
}

/* The layer of a canonical "model.layers.N.<post>" name (N < layers), or -1. */
static int64_t layer_of(const fg_hparams *hp, const char *name, const char *post)
{
    static const char pre[] = "model.layers.";
    uint64_t layer;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &layer);
    return !p || strcmp(p, post) || layer >= hp->n_layers ? -1 : (int64_t)layer;
}

/* model.layers.N.self_attn.rotary_emb.inv_freq, N < layers: [rot_dim / 2] (transformers before
 * 4.31 kept inv_freq a persistent buffer; later versions skip it on load, as fg does). */
uint64_t fgm_derived_inv_freq(const fg_hparams *hp, const char *name)
{
    return layer_of(hp, name, ".self_attn.rotary_emb.inv_freq") < 0 ? 0 : hp->rope.rot_dim / 2;
}

/* A fused checkpoint tensor model.layers.N.<post> and the canonical tensors it holds, in row
 * order: model.layers.N.<parts[i]>, laid out as `layout` says (FG_FUSE_*). */
typedef struct fuse_rule {
    const char *post;
    uint32_t n;
    const char *parts[3];
    uint32_t layout;
} fuse_rule;

/* The parts of `name` by the first rule whose <post> it ends in (0: none); sparse: only in a
 * sparse layer. */
static uint32_t fuse_by(const fg_hparams *hp, const char *name, const fuse_rule *rules,
                        size_t n_rules, int sparse, char (*parts)[FG_TENSOR_NAME_MAX],
                        uint32_t *layout)
{
    for (size_t r = 0; r < n_rules; r++) {
        int64_t l = layer_of(hp, name, rules[r].post);
        if (l < 0)
            continue;
        if (sparse && !fg_model_layer_sparse(hp, (uint32_t)l))
            return 0;
        for (uint32_t i = 0; i < rules[r].n; i++)
            snprintf(parts[i], FG_TENSOR_NAME_MAX, "model.layers.%u.%s", (unsigned)l,
                     rules[r].parts[i]);
        if (layout)
            *layout = rules[r].layout;
        return rules[r].n;
    }
    return 0;
}

/* Phi-3's fused projections: self_attn.qkv_proj holds q, k and v (Phi3Attention slices them in
 * that order), mlp.gate_up_proj holds gate and up (Phi3MLP's chunk(2): gate first). */
uint32_t fgm_fused_qkv_gate_up(const fg_hparams *hp, const char *name,
                               char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".self_attn.qkv_proj.weight", 3,
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}, 0},
        {".mlp.gate_up_proj.weight", 2, {"mlp.gate_proj.weight", "mlp.up_proj.weight"}, 0}};
    return fuse_by(hp, name, k_rules, 2, 0, parts, layout);
}

/* An expert's weight, model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (N a sparse layer,
 * E < n_experts): block E of model.layers.N.mlp.experts.<proj>.weight */
int fgm_stacked_experts(const fg_hparams *hp, const char *name, char out[FG_TENSOR_NAME_MAX],
                        uint32_t *block)
{
    static const char *const projs[] = {"gate_proj.weight", "up_proj.weight",
                                        "down_proj.weight"};
    static const char pre[] = "model.layers.", mid[] = ".mlp.experts.";
    uint64_t l, e;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &l);
    if (!p || strncmp(p, mid, sizeof mid - 1) || !(p = index_at(p + sizeof mid - 1, &e)) ||
        *p++ != '.' || l >= hp->n_layers || e >= hp->n_experts || !fg_model_layer_sparse(hp, l))
        return 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(p, projs[i])) {
            snprintf(out, FG_TENSOR_NAME_MAX, "model.layers.%u.mlp.experts.%s", (unsigned)l,
                     projs[i]);
            *block = (uint32_t)e;
            return 1;
        }
    return 0;
}

/* Every expert of a sparse layer in one tensor, [experts, rows, cols], as transformers 5 holds
 * them (and writes them with save_original_format=False) and GraniteMoE ships them:
 * model.layers.N.mlp.experts.gate_up_proj holds each expert's gate then up rows,
 * ...experts.down_proj its down rows (model_check.c take_batched). */
uint32_t fgm_fused_experts(const fg_hparams *hp, const char *name,
                           char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".mlp.experts.gate_up_proj", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"}, 0},
        {".mlp.experts.down_proj", 1, {"mlp.experts.down_proj.weight"}, 0}};
    return fuse_by(hp, name, k_rules, 2, 1, parts, layout);
}

/* gpt-oss's experts, every expert of a layer in one tensor as x . W multiplies them:
 * mlp.experts.gate_up_proj [experts, hidden, 2 x width], each expert's gate and up columns
 * alternating (GptOssExperts: gate_up[..., ::2], gate_up[..., 1::2]), its bias
 * gate_up_proj_bias [experts, 2 x width] alike, down_proj [experts, width, hidden] and
 * down_proj_bias [experts, hidden] (model_check.c take_batched); or, as OpenAI ships them, in
 * MXFP4: gate_up_proj_blocks [experts, 2 x width, hidden / 32, 16] (gate and up rows
 * alternating) with gate_up_proj_scales [experts, 2 x width, hidden / 32], down_proj_blocks
 * [experts, hidden, width / 32, 16] with down_proj_scales */
uint32_t fgm_fused_experts_xw(const fg_hparams *hp, const char *name,
                              char (*parts)[FG_TENSOR_NAME_MAX], uint32_t *layout)
{
    static const fuse_rule k_rules[] = {
        {".mlp.experts.gate_up_proj", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_TRANSPOSED},
        {".mlp.experts.gate_up_proj_bias", 2,
         {"mlp.experts.gate_proj.bias", "mlp.experts.up_proj.bias"}, FG_FUSE_INTERLEAVED},
        {".mlp.experts.down_proj", 1, {"mlp.experts.down_proj.weight"}, FG_FUSE_TRANSPOSED},
        {".mlp.experts.down_proj_bias", 1, {"mlp.experts.down_proj.bias"}, 0},
        /* OpenAI's files: MXFP4, each expert's [rows, cols] as its model multiplies it */
        {".mlp.experts.gate_up_proj_blocks", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_MXFP4},
        {".mlp.experts.gate_up_proj_scales", 2,
         {"mlp.experts.gate_proj.weight", "mlp.experts.up_proj.weight"},
         FG_FUSE_INTERLEAVED | FG_FUSE_MXFP4_SCALES},
        {".mlp.experts.down_proj_blocks", 1, {"mlp.experts.down_proj.weight"}, FG_FUSE_MXFP4},
        {".mlp.experts.down_proj_scales", 1, {"mlp.experts.down_proj.weight"},
         FG_FUSE_MXFP4_SCALES}};
    return fuse_by(hp, name, k_rules, sizeof k_rules / sizeof k_rules[0], 1, parts, layout);
}

/* A suffix spelling: the first of map's suffixes that ends base's name (fgm_names_hf's,
 * Mixtral's ...) replaced by its own; other names as base gives them. */
typedef struct suffix_rule {
    const char *from, *to;
} suffix_rule;

static const char *map_suffix(const char *(*base)(const char *, char *, size_t),
                              const char *name, const suffix_rule *map, size_t n_map, char *buf,
                              size_t cap)
{
    char tmp[FG_TENSOR_NAME_MAX];
    if (!base(name, tmp, sizeof tmp))
        return NULL;
    size_t n = strlen(tmp);
    const char *to = "";
    for (size_t i = 0; i < n_map; i++) {
        size_t nf = strlen(map[i].from);
        if (n > nf && !strcmp(tmp + n - nf, map[i].from)) {
            tmp[n - nf] = '\0';
            to = map[i].to;
            break;
        }
    }
    int k = snprintf(buf, cap, "%s%s", tmp, to);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* GraniteMoE's spelling: block_sparse_moe.router.layer (the router), input_linear (every
 * expert's gate and up: transformers 5's mlp.experts.gate_up_proj) and output_linear (their
 * down), or transformers 5's own in-memory names under block_sparse_moe */
const char *fgm_names_io_linear(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".block_sparse_moe.router.layer.weight", ".mlp.gate.weight"},
        {".block_sparse_moe.input_linear.weight", ".mlp.experts.gate_up_proj"},
        {".block_sparse_moe.output_linear.weight", ".mlp.experts.down_proj"},
        /* transformers 5's in-memory names (a state_dict saved with torch.save) */
        {".block_sparse_moe.router.weight", ".mlp.gate.weight"},
        {".block_sparse_moe.experts.gate_up_proj", ".mlp.experts.gate_up_proj"},
        {".block_sparse_moe.experts.down_proj", ".mlp.experts.down_proj"}};
    return map_suffix(fgm_names_hf, name, k_map, sizeof k_map / sizeof k_map[0], buf, cap);
}

/* GLM-4 MoE's multi-token prediction layers, model.layers.N.* for N in [layers, layers +
 * num_nextn_predict_layers): a module transformers does not run either (its
 * _keys_to_ignore_on_load_unexpected); and with n_shared_experts 0, the shared experts of width
 * 0 transformers still writes (empty: 2) */
int fgm_unused_mtp(const fg_hparams *hp, const char *name)
{
    static const char pre[] = "model.layers.", sh[] = ".mlp.shared_experts.";
    uint64_t l;
    const char *p = strncmp(name, pre, sizeof pre - 1) ? NULL
                  : index_at(name + sizeof pre - 1, &l);
    if (p && l < hp->n_layers && !hp->shared_ffn && fg_model_layer_sparse(hp, (uint32_t)l) &&
        !strncmp(p, sh, sizeof sh - 1))
        return 2;
    return p && *p == '.' && l >= hp->n_layers && l < (uint64_t)hp->n_layers + hp->mtp_layers;
}

/* Mixtral's spelling: block_sparse_moe for mlp, its experts' w1 (gate), w2 (down), w3 (up) */
const char *fgm_names_block_sparse_moe(const char *name, char *buf, size_t cap)
{
    static const struct { const char *from, *to; } k_map[] = {
        {".block_sparse_moe.", ".mlp."}, {".w1.weight", ".gate_proj.weight"},
        {".w2.weight", ".down_proj.weight"}, {".w3.weight", ".up_proj.weight"}};
    char tmp[FG_TENSOR_NAME_MAX * 2];
    if (!fgm_names_hf(name, tmp, sizeof tmp / 2))
        return NULL;
    for (size_t i = 0; i < sizeof k_map / sizeof k_map[0]; i++) {
        char *at = strstr(tmp, k_map[i].from);
        size_t nf = strlen(k_map[i].from), nt = strlen(k_map[i].to);
        if (at && (i == 0 || (strstr(tmp, ".mlp.experts.") && !at[nf]))) {
            memmove(at + nt, at + nf, strlen(at + nf) + 1);
            memcpy(at, k_map[i].to, nt);
        }
    }
    int k = snprintf(buf, cap, "%s", tmp);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

/* MiniMax-M2's spelling: Mixtral's, and its router's choice bias beside the router
 * (block_sparse_moe.e_score_correction_bias, transformers' mlp.e_score_correction_bias) */
const char *fgm_names_block_sparse_moe_corr(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".mlp.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"}};
    return map_suffix(fgm_names_block_sparse_moe, name, k_map, 1, buf, cap);
}

/* ERNIE 4.5 MoE's hub spelling of the router's choice bias: mlp.moe_statics (transformers:
 * mlp.gate.moe_statics) */
const char *fgm_names_moe_statics(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {{".mlp.moe_statics.e_score_correction_bias",
                                         ".mlp.gate.moe_statics.e_score_correction_bias"}};
    return map_suffix(fgm_names_hf, name, k_map, 1, buf, cap);
}

/* GLM-4's spelling of the sandwich norms, as Gemma's canonical names: post_self_attn_layernorm
 * (the attention's output norm), post_attention_layernorm (the MLP's input norm),
 * post_mlp_layernorm (the MLP's output norm); one suffix each, so the first match is the one */
const char *fgm_names_post_mlp_norm(const char *name, char *buf, size_t cap)
{
    static const suffix_rule k_map[] = {
        {".post_self_attn_layernorm.weight", ".post_attention_layernorm.weight"},
        {".post_attention_layernorm.weight", ".pre_feedforward_layernorm.weight"},
        {".post_mlp_layernorm.weight", ".post_feedforward_layernorm.weight"}};
    return map_suffix(fgm_names_hf, name, k_map, sizeof k_map / sizeof k_map[0], buf, cap);
}
