/* tensors.c - the tensors of each unit of a Llama-style decoder (fg_arch.unit_tensors of every
 * family row), read from fg_hparams alone: the features decide which exist.
 *
 * Canonical names are *ForCausalLM's: model.embed_tokens.weight [vocab, hidden]; per layer
 * model.layers.N.input_layernorm.weight [hidden] (none with post_norms_only: FG_SANDWICH_AFTER),
 * self_attn.{q,k,v,o}_proj.weight ([heads*hd, hidden], [kv*hd, hidden] twice, [hidden,
 * heads*hd]) and their biases where the config has them, self_attn.sinks [heads], q_norm /
 * k_norm ([head_dim], or the whole projection's), post_attention_layernorm.weight (the MLP's
 * input norm, or with sandwich norms the attention's output norm, the MLP's then
 * pre_feedforward_layernorm and post_feedforward_layernorm), mlp.{gate,up}_proj.weight [ffn,
 * hidden], mlp.down_proj.weight [hidden, ffn] (a sparse layer: the router, the stacked experts,
 * the shared ones); model.norm.weight; lm_head.weight [vocab, hidden] (absent when tied: the
 * embedding is used) and its bias.
 */
#include <stdio.h>
#include <string.h>

#include "families.h"

static void proj(fg_tensor_spec *o, uint32_t *n, uint32_t l, const char *sub, const char *nm,
                 fg_role w, int bias, uint64_t out, uint64_t in)
{
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%u.%s.%s.weight", l, sub, nm);
    fgm_spec(o, n, name, w, FG_ACCESS_LINEAR, out, in);
    if (bias) {
        snprintf(name, sizeof name, "model.layers.%u.%s.%s.bias", l, sub, nm);
        fgm_spec(o, n, name, (fg_role)(w + 1), FG_ACCESS_SMALL, out, 0);
    }
}

/* An RMSNorm's weight (Gemma's scale by 1 + w: the spec adds 1 to it) */
static void norm_w(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, const char *name,
                   fg_role r, uint64_t h)
{
    fgm_spec(o, n, name, r, FG_ACCESS_SMALL, h, 0);
    o[*n - 1].add = hp->norm_plus_one ? 1.0f : 0.0f;
}

static void norm(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, uint32_t l,
                 const char *nm, fg_role r, uint64_t h)
{
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, nm);
    norm_w(hp, o, n, name, r, h);
}

/* A sparse layer's MLP: the router, the experts' weights stacked by rows (fg-convert stacks a
 * checkpoint's experts.E.<proj> tensors: fg_arch.stacked), Qwen2-MoE's shared expert and its
 * gate */
static void experts(const fg_hparams *hp, fg_tensor_spec *o, uint32_t *n, uint32_t l)
{
    uint64_t h = hp->hidden, e = hp->n_experts, f = hp->moe_ffn, sf = hp->shared_ffn;
    static const char *const nm[3] = {"gate_proj", "up_proj", "down_proj"};
    static const fg_role wr[3] = {FG_ROLE_EXP_GATE, FG_ROLE_EXP_UP, FG_ROLE_EXP_DOWN};
    static const fg_role br[3] = {FG_ROLE_EXP_B_GATE, FG_ROLE_EXP_B_UP, FG_ROLE_EXP_B_DOWN};
    const uint64_t rows[3] = {f, f, h}, cols[3] = {h, h, f};
    char name[FG_TENSOR_NAME_MAX];
    proj(o, n, l, "mlp", hp->moe_bias ? "router" : "gate", FG_ROLE_ROUTER, 0, e, h);
    if (hp->moe_bias) { /* gpt-oss */
        snprintf(name, sizeof name, "model.layers.%u.mlp.router.bias", l);
        fgm_spec(o, n, name, FG_ROLE_B_ROUTER, FG_ACCESS_SMALL, e, 0);
    }
    if (hp->router_corr) { /* GLM-4 MoE's, MiniMax-M2's; ERNIE 4.5's [1, experts] */
        snprintf(name, sizeof name, "model.layers.%u.mlp.gate.%se_score_correction_bias", l,
                 hp->router_corr == 2 ? "moe_statics." : "");
        fgm_spec(o, n, name, FG_ROLE_ROUTER_CORR, FG_ACCESS_SMALL, hp->router_corr == 2 ? 1 : e,
                 hp->router_corr == 2 ? e : 0);
    }
    for (int i = 0; i < 3; i++) { /* each expert a block of rows (its bias a block too) */
        proj(o, n, l, "mlp.experts", nm[i], wr[i], 0, e * rows[i], cols[i]);
        o[*n - 1].blocks = hp->n_experts;
        if (!hp->moe_bias)
            continue;
        snprintf(name, sizeof name, "model.layers.%u.mlp.experts.%s.bias", l, nm[i]);
        fgm_spec(o, n, name, br[i], FG_ACCESS_SMALL, e * rows[i], 0);
        o[*n - 1].blocks = hp->n_experts;
    }
    const char *sh = hp->shared_plain ? "mlp.shared_experts" : "mlp.shared_expert";
    if (sf) { /* Qwen2-MoE's gated shared expert, or GLM's shared experts */
        proj(o, n, l, sh, "gate_proj", FG_ROLE_W_GATE, hp->mlp_bias, sf, h); /* (ERNIE's) */
        proj(o, n, l, sh, "up_proj", FG_ROLE_W_UP, hp->mlp_bias, sf, h);
        proj(o, n, l, sh, "down_proj", FG_ROLE_W_DOWN, hp->mlp_bias, h, sf);
        if (!hp->shared_plain)
            proj(o, n, l, "mlp", "shared_expert_gate", FG_ROLE_SHARED_GATE, 0, 1, h);
    }
}

/* A layer's multi-head latent attention (hp->mla): its input norm, q_proj or q_a_proj,
 * q_a_layernorm and q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj (SMALL: f32 in the
 * backend's memory, each head's W_UK and W_UV multiplied in place), o_proj. q's rotary rows (the
 * last qk_rope_dim of each head) and kv_a's (after the latent's) are reordered from (even, odd)
 * pairs when rope_interleaved. */
static uint32_t mla_tensors(const fg_hparams *hp, uint32_t l, fg_tensor_spec *o)
{
    uint32_t n = 0, qk = hp->qk_nope_dim + hp->qk_rope_dim, ql = hp->q_lora_rank;
    uint64_t h = hp->hidden, H = hp->n_heads, r = hp->kv_lora_rank;
    norm(hp, o, &n, l, "input_layernorm", FG_ROLE_NORM_W, h);
    if (ql) {
        proj(o, &n, l, "self_attn", "q_a_proj", FG_ROLE_WQ_A, 0, ql, h);
        norm(hp, o, &n, l, "self_attn.q_a_layernorm", FG_ROLE_Q_A_NORM, ql);
    }
    proj(o, &n, l, "self_attn", ql ? "q_b_proj" : "q_proj", FG_ROLE_WQ, 0, H * qk, ql ? ql : h);
    if (hp->rope_interleaved)
        o[n - 1].perm_head = qk, o[n - 1].perm_off = hp->qk_nope_dim,
        o[n - 1].perm_rot = hp->qk_rope_dim;
    proj(o, &n, l, "self_attn", "kv_a_proj_with_mqa", FG_ROLE_WKV_A, 0, r + hp->qk_rope_dim, h);
    if (hp->rope_interleaved)
        o[n - 1].perm_head = (uint32_t)(r + hp->qk_rope_dim), o[n - 1].perm_off = (uint32_t)r,
        o[n - 1].perm_rot = hp->qk_rope_dim;
    norm(hp, o, &n, l, "self_attn.kv_a_layernorm", FG_ROLE_KV_A_NORM, r);
    char name[FG_TENSOR_NAME_MAX];
    snprintf(name, sizeof name, "model.layers.%u.self_attn.kv_b_proj.weight", l);
    fgm_spec(o, &n, name, FG_ROLE_WKV_B, FG_ACCESS_SMALL,
             H * (hp->qk_nope_dim + hp->v_head_dim), r);
    proj(o, &n, l, "self_attn", "o_proj", FG_ROLE_WO, 0, h, H * hp->v_head_dim);
    return n;
}

/* A layer's attention: its input norm, q/k/v/o, sinks, q/k norms (q's and k's rows reordered
 * from (even, odd) pairs when rope_interleaved), the output norm of a sandwich */
static uint32_t attn_tensors(const fg_hparams *hp, uint32_t l, fg_tensor_spec *o)
{
    uint32_t n = 0;
    uint64_t h = hp->hidden, q = (uint64_t)hp->n_heads * hp->head_dim;
    uint64_t kv = (uint64_t)hp->n_kv_heads * hp->head_dim;
    if (hp->sandwich != FG_SANDWICH_AFTER)
        norm(hp, o, &n, l, "input_layernorm", FG_ROLE_NORM_W, h);
    proj(o, &n, l, "self_attn", "q_proj", FG_ROLE_WQ, hp->qkv_bias, q, h);
    proj(o, &n, l, "self_attn", "k_proj", FG_ROLE_WK, hp->qkv_bias, kv, h);
    proj(o, &n, l, "self_attn", "v_proj", FG_ROLE_WV, hp->qkv_bias, kv, h);
    proj(o, &n, l, "self_attn", "o_proj", FG_ROLE_WO, hp->out_bias, h, q);
    if (hp->attn_sinks) { /* gpt-oss */
        char name[FG_TENSOR_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%u.self_attn.sinks", l);
        fgm_spec(o, &n, name, FG_ROLE_SINKS, FG_ACCESS_SMALL, hp->n_heads, 0);
    }
    if (hp->qk_norm) { /* per head, or over the whole projection */
        uint64_t qn = hp->qk_norm == FG_QK_NORM_WHOLE ? q : hp->head_dim;
        uint64_t kn = hp->qk_norm == FG_QK_NORM_WHOLE ? kv : hp->head_dim;
        norm(hp, o, &n, l, "self_attn.q_norm", FG_ROLE_Q_NORM, qn);
        norm(hp, o, &n, l, "self_attn.k_norm", FG_ROLE_K_NORM, kn);
    }
    for (uint32_t i = 0; hp->rope_interleaved && i < n; i++) { /* (ERNIE 4.5, GLM-4) */
        fg_role r = o[i].role; /* q's and k's rows, biases and norm weights, by heads */
        if (r == FG_ROLE_WQ || r == FG_ROLE_BQ || r == FG_ROLE_WK || r == FG_ROLE_BK ||
            r == FG_ROLE_Q_NORM || r == FG_ROLE_K_NORM)
            o[i].perm_head = hp->head_dim, o[i].perm_rot = hp->rope.rot_dim;
    }
    if (hp->sandwich) /* Gemma, OLMo 2: the attention's output norm */
        norm(hp, o, &n, l, "post_attention_layernorm", FG_ROLE_POST_NORM_W, h);
    return n;
}

uint32_t fgm_decoder_tensors(const fg_hparams *hp, fg_unit_kind kind, uint32_t l,
                             fg_tensor_spec *o)
{
    uint32_t n = 0;
    uint64_t h = hp->hidden, f = hp->ffn;
    switch (kind) {
    case FG_UNIT_EMBED:
        fgm_spec(o, &n, "model.embed_tokens.weight", FG_ROLE_TOK_EMBED, FG_ACCESS_GATHER,
                 hp->vocab_size, h);
        break;
    case FG_UNIT_ATTN:
        return hp->mla ? mla_tensors(hp, l, o) : attn_tensors(hp, l, o);
    case FG_UNIT_MLP:
        if (hp->sandwich != FG_SANDWICH_AFTER) /* (OLMo 2 has no input norm) */
            norm(hp, o, &n, l, hp->sandwich ? "pre_feedforward_layernorm"
                                            : "post_attention_layernorm", FG_ROLE_NORM_W, h);
        if (fg_model_layer_sparse(hp, l)) {
            experts(hp, o, &n, l);
            break;
        }
        proj(o, &n, l, "mlp", "gate_proj", FG_ROLE_W_GATE, hp->mlp_bias, f, h);
        proj(o, &n, l, "mlp", "up_proj", FG_ROLE_W_UP, hp->mlp_bias, f, h);
        proj(o, &n, l, "mlp", "down_proj", FG_ROLE_W_DOWN, hp->mlp_bias, h, f);
        if (hp->sandwich)
            norm(hp, o, &n, l, "post_feedforward_layernorm", FG_ROLE_POST_NORM_W, h);
        break;
    case FG_UNIT_HEAD:
        norm_w(hp, o, &n, "model.norm.weight", FG_ROLE_NORM_W, h);
        fgm_spec(o, &n, "lm_head.weight", FG_ROLE_LM_HEAD, FG_ACCESS_STREAM, hp->vocab_size, h);
        if (hp->tied_head) {
            o[n - 1].optional = 1;
            snprintf(o[n - 1].fallback, sizeof o[n - 1].fallback, "model.embed_tokens.weight");
        }
        if (hp->head_bias) /* (ERNIE 4.5 MoE's, beside a tied weight too) */
            fgm_spec(o, &n, "lm_head.bias", FG_ROLE_B_LM_HEAD, FG_ACCESS_SMALL, hp->vocab_size, 0);
        break;
    }
    return n;
}
