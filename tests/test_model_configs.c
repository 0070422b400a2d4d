/* test_model_configs.c - the Llama-style families' config.json as table rows: each accepted row
 * a config and what the parse must give ("key=value" facts of fg_hparams and per-layer facts,
 * read by check_facts), with a function for the tensor lists and checkpoint names a few rows
 * also check; each refused row a config, the error code and a piece of its one-line message.
 * A new family adds its rows here. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "families.h" /* (model/'s private rows: the table is data) */
#include "model.h"
#include "testutil.h"

/* ---- facts: "key=value" (exact, floats as float) or "key~value" (within 1e-6) ---- */

typedef struct field {
    const char *key;
    size_t off;
    char type; /* u: uint32_t, i: int (and enums), I: int32_t, f: float */
} field;

#define F(k, m, t) {k, offsetof(fg_hparams, m), t}
static const field k_fields[] = {
    F("vocab", vocab_size, 'u'), F("hidden", hidden, 'u'), F("layers", n_layers, 'u'),
    F("heads", n_heads, 'u'), F("kv", n_kv_heads, 'u'), F("head_dim", head_dim, 'u'),
    F("ffn", ffn, 'u'), F("max_pos", max_pos, 'u'), F("norm", norm, 'i'),
    F("eps", norm_eps, 'f'), F("act", act, 'i'), F("gated", gated, 'i'),
    F("tied", tied_head, 'i'), F("qkv_bias", qkv_bias, 'i'), F("out_bias", out_bias, 'i'),
    F("mlp_bias", mlp_bias, 'i'), F("head_bias", head_bias, 'i'),
    F("interleaved", rope_interleaved, 'i'), F("qk_norm", qk_norm, 'i'),
    F("local_rope", local_rope, 'i'), F("sandwich", sandwich, 'i'),
    F("plus_one", norm_plus_one, 'i'), F("embed_scale", embed_scale, 'f'),
    F("llama4_beta", llama4_beta, 'f'), F("attn_scale", attn_scale, 'f'),
    F("residual_scale", residual_scale, 'f'), F("logit_scale", logit_scale, 'f'),
    F("attn_softcap", attn_softcap, 'f'), F("final_softcap", final_softcap, 'f'),
    F("window", sliding_window, 'u'), F("experts", n_experts, 'u'), F("top_k", top_k, 'u'),
    F("moe_ffn", moe_ffn, 'u'), F("shared_ffn", shared_ffn, 'u'),
    F("norm_topk", norm_topk, 'i'), F("shared_plain", shared_plain, 'i'),
    F("router_sigmoid", router_sigmoid, 'i'), F("n_group", n_group, 'u'),
    F("topk_group", topk_group, 'u'), F("routed_scale", routed_scale, 'f'),
    F("topk_eps", topk_eps, 'f'), F("router_corr", router_corr, 'i'),
    F("mtp", mtp_layers, 'u'), F("bos", bos_id, 'I'), F("eos", eos_id, 'I'),
    F("mla", mla, 'i'), F("q_lora", q_lora_rank, 'u'), F("kv_lora", kv_lora_rank, 'u'),
    F("qk_nope", qk_nope_dim, 'u'), F("qk_rope", qk_rope_dim, 'u'), F("v_dim", v_head_dim, 'u'),
    F("group_max", router_group_max, 'i'), F("attn_scale", attn_scale, 'f'),
    F("interleaved", rope_interleaved, 'i'),
    F("pad", pad_id, 'I'), F("n_eos", n_eos, 'u'), F("theta", rope.theta, 'f'),
    F("scaling", rope.scaling, 'i'), F("factor", rope.factor, 'f'),
    F("orig_max_pos", rope.orig_max_pos, 'u'), F("attn_factor", rope.attn_factor, 'f'),
    F("rot_dim", rope.rot_dim, 'u'), F("beta_fast", rope.beta_fast, 'f'),
    F("beta_slow", rope.beta_slow, 'f'), F("truncate", rope.truncate, 'i'),
    F("use_long", rope.use_long, 'i'), F("local_theta", rope_local.theta, 'f'),
    F("local_scaling", rope_local.scaling, 'i'),
};
#undef F

/* rope<l>'s values */
enum { ROPE_NOPE = -1, ROPE_FULL = 1, ROPE_LOCAL = 2 };

static const struct { const char *name; double v; } k_symbols[] = {
    {"silu", FG_ACT_SILU}, {"gelu", FG_ACT_GELU}, {"gelu_tanh", FG_ACT_GELU_TANH},
    {"rms", FG_NORM_RMS}, {"head", FG_QK_NORM_HEAD}, {"whole", FG_QK_NORM_WHOLE},
    {"both", FG_SANDWICH_BOTH}, {"after", FG_SANDWICH_AFTER}, {"none", FG_ROPE_NONE},
    {"linear", FG_ROPE_LINEAR}, {"llama3", FG_ROPE_LLAMA3}, {"yarn", FG_ROPE_YARN},
    {"dynamic", FG_ROPE_DYNAMIC}, {"longrope", FG_ROPE_LONGROPE}, {"nope", ROPE_NOPE},
    {"full", ROPE_FULL}, {"local", ROPE_LOCAL},
};

static double symbol(const char *v)
{
    for (size_t i = 0; i < sizeof k_symbols / sizeof k_symbols[0]; i++)
        if (!strcmp(k_symbols[i].name, v))
            return k_symbols[i].v;
    char *end;
    double d = strtod(v, &end);
    ck_assert_msg(*v && !*end, "fact value '%s' is neither a number nor a symbol", v);
    return d;
}

/* A per-layer fact (win<l>, rope<l>, sparse<l>, eosid<i>) or a count (windowed) into *v;
 * 0 when key is none of them. */
static int layer_fact(const fg_hparams *c, const char *key, double *v)
{
    static const char *const pre[] = {"win", "rope", "sparse", "eosid"};
    if (!strcmp(key, "windowed")) {
        *v = fg_model_windowed_layers(c);
        return 1;
    }
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(pre[i]);
        if (strncmp(key, pre[i], n) || key[n] < '0' || key[n] > '9')
            continue;
        uint32_t l = (uint32_t)atoi(key + n);
        const fg_rope *r = i == 1 ? fg_model_layer_rope(c, l) : NULL;
        *v = i == 0 ? (double)fg_model_layer_window(c, l)
           : i == 1 ? (!r ? ROPE_NOPE : r == &c->rope ? ROPE_FULL : ROPE_LOCAL)
           : i == 2 ? fg_model_layer_sparse(c, l) : c->eos_ids[l];
        return 1;
    }
    return 0;
}

/* Field key of c into *v (as its type: *is_float for floats) */
static void fact(const fg_hparams *c, const char *key, double *v, int *is_float)
{
    *is_float = 0;
    if (layer_fact(c, key, v))
        return;
    for (size_t i = 0; i < sizeof k_fields / sizeof k_fields[0]; i++) {
        if (strcmp(k_fields[i].key, key))
            continue;
        const char *p = (const char *)c + k_fields[i].off;
        switch (k_fields[i].type) {
        case 'u': *v = *(const uint32_t *)p; return;
        case 'i': *v = *(const int *)p; return;
        case 'I': *v = *(const int32_t *)p; return;
        default: *v = *(const float *)p, *is_float = 1; return;
        }
    }
    ck_abort_msg("unknown fact '%s'", key);
}

/* Every fact of want ("k=v k~v ...") holds for c; arch and dtype compare as strings. */
static void check_facts(const fg_hparams *c, const char *want, int row)
{
    char buf[1024], *save = NULL;
    snprintf(buf, sizeof buf, "%s", want);
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strpbrk(tok, "=~");
        ck_assert_msg(eq != NULL, "row %d: fact '%s' has no = or ~", row, tok);
        int approx = *eq == '~';
        *eq = '\0';
        const char *val = eq + 1;
        if (!strcmp(tok, "arch") || !strcmp(tok, "dtype")) {
            const char *got = !strcmp(tok, "arch") ? c->arch : c->dtype;
            ck_assert_msg(!strcmp(got, val), "row %d: %s is '%s', want '%s'", row, tok, got, val);
            continue;
        }
        double got, exp = symbol(val);
        int is_float;
        fact(c, tok, &got, &is_float);
        int ok = approx ? fabs(got - exp) < 1e-6
               : is_float ? (float)got == (float)exp : got == exp;
        ck_assert_msg(ok, "row %d: %s is %.9g, want %s%s", row, tok, got, approx ? "~" : "", val);
    }
}

/* ---- checks beyond the facts: tensor lists and checkpoint names ---- */

static char g_name[FG_TENSOR_NAME_MAX];

static const char *canon(const char *type, const char *name)
{
    return fg_arch_find(type)->canonical_name(name, g_name, sizeof g_name);
}

/* Qwen3's per-head q/k norms with head_dim 16, after the input norm and 4 + 4 projections */
static void more_qwen3_norms(const fg_hparams *c)
{
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    uint32_t nt = fg_model_unit_tensors(c, 1, t), norms = 0;
    for (uint32_t i = 0; i < nt; i++)
        if (t[i].role == FG_ROLE_Q_NORM || t[i].role == FG_ROLE_K_NORM) {
            ck_assert(t[i].n_dims == 1 && t[i].dims[0] == 16 && t[i].access == FG_ACCESS_SMALL);
            norms++;
        }
    ck_assert_uint_eq(nt, 11); /* input norm, 4 weights, 4 biases, 2 q/k norms */
    ck_assert_uint_eq(norms, 2);
    ck_assert_str_eq(t[9].name, "model.layers.0.self_attn.q_norm.weight");
}

/* dynamic NTK: the default frequencies */
static void more_dynamic(const fg_hparams *c)
{
    fg_rope r = c->rope;
    float f0[4], f1[4];
    fg_rope_inv_freq(&r, f0);
    r.scaling = FG_ROPE_NONE;
    fg_rope_inv_freq(&r, f1);
    ck_assert(!memcmp(f0, f1, sizeof f0));
}

/* Phi-3: longrope's lists; self_attn.qkv_proj and mlp.gate_up_proj fused (of layers < 2) */
static void more_phi3(const fg_hparams *c)
{
    const fg_arch *a = fg_arch_find("phi3");
    char parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
    ck_assert(c->rope.long_factor[5] == 7.5f);
    ck_assert_uint_eq(a->fused(c, "model.layers.1.self_attn.qkv_proj.weight", parts, NULL), 3);
    ck_assert_str_eq(parts[2], "model.layers.1.self_attn.v_proj.weight");
    ck_assert_uint_eq(a->fused(c, "model.layers.0.mlp.gate_up_proj.weight", parts, NULL), 2);
    ck_assert_str_eq(parts[0], "model.layers.0.mlp.gate_proj.weight");
    ck_assert_uint_eq(a->fused(c, "model.layers.2.mlp.gate_up_proj.weight", parts, NULL), 0);
    ck_assert_uint_eq(a->fused(c, "model.layers.01.mlp.gate_up_proj.weight", parts, NULL), 0);
    ck_assert(fg_arch_find("llama")->fused == NULL);
}

/* Gemma 3: the MLP's input norm pre_feedforward_layernorm, every norm by 1 + w, one post norm */
static void more_gemma3_mlp(const fg_hparams *c)
{
    fg_tensor_spec gt[FG_UNIT_MAX_TENSORS];
    uint32_t ng = fg_model_unit_tensors(c, 2, gt), posts = 0; /* layer 0's MLP */
    for (uint32_t i = 0; i < ng; i++) {
        if (gt[i].role == FG_ROLE_NORM_W)
            ck_assert_str_eq(gt[i].name, "model.layers.0.pre_feedforward_layernorm.weight");
        if (gt[i].access == FG_ACCESS_SMALL)
            ck_assert(gt[i].add == 1.0f);
        posts += gt[i].role == FG_ROLE_POST_NORM_W;
    }
    ck_assert_uint_eq(posts, 1);
}

/* ERNIE 4.5: q's and k's rows (and biases) reordered from (even, odd) pairs, not v's or o's */
static void more_ernie(const fg_hparams *c)
{
    fg_tensor_spec es[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 1, es), 9);
    ck_assert(es[1].role == FG_ROLE_WQ && es[1].perm_head == 128 && es[1].perm_rot == 128);
    ck_assert(es[2].role == FG_ROLE_BQ && es[2].perm_head == 128);
    ck_assert(es[5].role == FG_ROLE_WV && !es[5].perm_head && !es[7].perm_head); /* v, o */
}

/* ERNIE 4.5 MoE: the choice bias [1, experts]; the head's bias beside a tied weight */
static void more_ernie_moe(const fg_hparams *c)
{
    fg_tensor_spec es[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 4, es), 12); /* layer 1's MLP */
    ck_assert(es[2].role == FG_ROLE_ROUTER_CORR && es[2].dims[0] == 1 && es[2].dims[1] == 64);
    ck_assert_uint_eq(fg_model_unit_tensors(c, 9, es), 3); /* the head: norm, head, bias */
    ck_assert(es[2].role == FG_ROLE_B_LM_HEAD && es[1].optional);
}

/* GLM-4: its sandwich norms' names */
static void more_glm4(const fg_hparams *c)
{
    (void)c;
    ck_assert_str_eq(canon("glm4", "model.layers.0.post_attention_layernorm.weight"),
                     "model.layers.0.pre_feedforward_layernorm.weight");
    ck_assert_str_eq(canon("glm4", "model.layers.0.post_mlp_layernorm.weight"),
                     "model.layers.0.post_feedforward_layernorm.weight");
}

/* Gemma 3 multimodal: the text model's names, the vision tower and projector unused */
static void more_gemma3_wrapper(const fg_hparams *c)
{
    const fg_arch *a = fg_arch_find("gemma3");
    ck_assert_str_eq(canon("gemma3", "language_model.model.norm.weight"), "model.norm.weight");
    ck_assert_str_eq(canon("gemma3", "model.language_model.layers.3.mlp.up_proj.weight"),
                     "model.layers.3.mlp.up_proj.weight");
    ck_assert_str_eq(canon("gemma3", "language_model.lm_head.weight"), "lm_head.weight");
    ck_assert(a->unused(c, "vision_tower.vision_model.post_layernorm.weight"));
    ck_assert(a->unused(c, "model.multi_modal_projector.mm_input_projection_weight"));
    ck_assert(!a->unused(c, "model.norm.weight"));
}

static void more_qwen3_vl(const fg_hparams *c)
{
    ck_assert_str_eq(canon("qwen3_vl", "model.language_model.norm.weight"), "model.norm.weight");
    ck_assert(fg_arch_find("qwen3_vl")->unused(c, "model.visual.blocks.0.attn.qkv.weight"));
}

/* OLMo 2: no input norm; q/k norms over the whole projections (q 32, k 16 wide) */
static void more_olmo2(const fg_hparams *c)
{
    fg_tensor_spec ot[FG_UNIT_MAX_TENSORS];
    uint32_t no = fg_model_unit_tensors(c, 1, ot), whole = 0; /* layer 0's attention */
    for (uint32_t i = 0; i < no; i++) {
        ck_assert(ot[i].role != FG_ROLE_NORM_W);
        if (ot[i].role == FG_ROLE_Q_NORM || ot[i].role == FG_ROLE_K_NORM)
            whole += ot[i].dims[0] == (ot[i].role == FG_ROLE_Q_NORM ? 32u : 16u);
    }
    ck_assert_uint_eq(whole, 2);
}

/* Mixtral: the share of experts a step reads, the experts stacked in blocks, its spelling */
static void more_mixtral(const fg_hparams *c)
{
    const fg_arch *a = fg_arch_find("mixtral");
    /* the share of 8 experts top 2 chooses: a token 1/4, two 1 - (3/4)^2 */
    ck_assert(fabs(fg_model_expert_share(c, 1) - 0.25) < 1e-12);
    ck_assert(fabs(fg_model_expert_share(c, 2) - 0.4375) < 1e-12);
    ck_assert(fg_model_expert_share(c, 0) == 0 && fg_model_expert_share(c, 64) > 0.9999);
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    uint32_t n = fg_model_unit_tensors(c, 2, t), blocks = 0; /* layer 0's MLP */
    ck_assert_uint_eq(n, 5);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[1].dims[0] == 8 && t[1].dims[1] == c->hidden);
    for (uint32_t i = 2; i < 5; i++)
        blocks += t[i].blocks == 8 && t[i].dims[0] == 8ull * (i == 4 ? c->hidden : c->ffn);
    ck_assert_uint_eq(blocks, 3);
    ck_assert_str_eq(t[2].name, "model.layers.0.mlp.experts.gate_proj.weight");
    char buf[FG_TENSOR_NAME_MAX], st[FG_TENSOR_NAME_MAX];
    uint32_t b = 0;
    ck_assert_str_eq(a->canonical_name("model.layers.1.block_sparse_moe.experts.7.w3.weight", buf,
                                       sizeof buf),
                     "model.layers.1.mlp.experts.7.up_proj.weight");
    ck_assert(a->stacked(c, buf, st, &b) && b == 7);
    ck_assert_str_eq(st, "model.layers.1.mlp.experts.up_proj.weight");
    ck_assert(!a->stacked(c, "model.layers.1.mlp.experts.8.up_proj.weight", st, &b));
    ck_assert(!a->stacked(c, "model.layers.1.mlp.experts.07.up_proj.weight", st, &b));
    ck_assert(!a->stacked(c, "model.layers.1.mlp.experts.+7.up_proj.weight", st, &b));
    ck_assert(!a->stacked(c, "model.layers.1.mlp.experts.7.w3.weight", st, &b));
}

/* Qwen3-MoE with decoder_sparse_step 2: layer 0 dense, no experts to stack */
static void more_qwen3_moe(const fg_hparams *c)
{
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    char st[FG_TENSOR_NAME_MAX];
    uint32_t b;
    ck_assert_uint_eq(fg_model_unit_tensors(c, 2, t), 4); /* layer 0: dense */
    ck_assert(t[1].role == FG_ROLE_W_GATE && t[1].dims[0] == c->ffn && !t[1].blocks);
    ck_assert(!fg_arch_find("qwen3_moe")->stacked(c, "model.layers.0.mlp.experts.1.up_proj.weight",
                                                  st, &b)); /* a dense layer has no experts */
}

/* Qwen2-MoE: the shared expert and its gate */
static void more_qwen2_moe(const fg_hparams *c)
{
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 2, t), 9);
    ck_assert(t[5].role == FG_ROLE_W_GATE && t[5].dims[0] == 40 && t[8].dims[0] == 1);
    ck_assert_str_eq(t[8].name, "model.layers.0.mlp.shared_expert_gate.weight");
}

/* GraniteMoE's spelling (input_linear: every expert's gate and up); Mixtral's batched layout */
static void more_granitemoe(const fg_hparams *c)
{
    const fg_arch *a = fg_arch_find("granitemoe");
    char parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
    ck_assert_str_eq(canon("granitemoe", "model.layers.1.block_sparse_moe.router.layer.weight"),
                     "model.layers.1.mlp.gate.weight");
    ck_assert_str_eq(canon("granitemoe", "model.layers.1.block_sparse_moe.input_linear.weight"),
                     "model.layers.1.mlp.experts.gate_up_proj");
    ck_assert_uint_eq(a->fused(c, g_name, parts, NULL), 2);
    ck_assert_str_eq(parts[1], "model.layers.1.mlp.experts.up_proj.weight");
    ck_assert_uint_eq(a->fused(c, "model.layers.2.mlp.experts.down_proj", parts, NULL),
                      0); /* past the layers */
    uint32_t layout = 9;
    ck_assert_uint_eq(fg_arch_find("mixtral")->fused(c, "model.layers.0.mlp.experts.down_proj",
                                                     parts, &layout), 1);
    ck_assert_uint_eq(layout, 0);
}

/* OLMoE: whole-projection q/k norms after the input norm; 64 experts stacked */
static void more_olmoe(const fg_hparams *c)
{
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 1, t), 7); /* layer 0's attention */
    ck_assert(t[0].role == FG_ROLE_NORM_W && t[5].role == FG_ROLE_Q_NORM);
    ck_assert_uint_eq(t[5].dims[0], (uint64_t)c->n_heads * c->head_dim);
    ck_assert_uint_eq(fg_model_unit_tensors(c, 2, t), 5);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[2].blocks == 64);
}

/* GLM-4 MoE: the choice bias, ungated shared experts; its prediction layer (3) unused */
static void more_glm4_moe(const fg_hparams *c)
{
    const fg_arch *a = fg_arch_find("glm4_moe");
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 4, t), 9); /* layer 1's MLP */
    ck_assert(t[2].role == FG_ROLE_ROUTER_CORR && t[2].dims[0] == 128);
    ck_assert_str_eq(t[2].name, "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(t[6].name, "model.layers.1.mlp.shared_experts.gate_proj.weight");
    ck_assert(t[8].role == FG_ROLE_W_DOWN); /* no shared gate */
    ck_assert(a->unused(c, "model.layers.3.eh_proj.weight"));
    ck_assert(!a->unused(c, "model.layers.4.eh_proj.weight"));
    ck_assert(!a->unused(c, "model.layers.2.eh_proj.weight"));
}

/* (num_nextn_predict_layers 0: layer 3 is no prediction layer) */
static void more_glm4_moe_no_mtp(const fg_hparams *c)
{
    ck_assert(!fg_arch_find("glm4_moe")->unused(c, "model.layers.3.eh_proj.weight"));
}

/* MiniMax-M2: the choice bias under its hub and transformers names, Mixtral's experts */
static void more_minimax(const fg_hparams *c)
{
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    ck_assert_uint_eq(fg_model_unit_tensors(c, 2, t), 6);
    ck_assert(t[2].role == FG_ROLE_ROUTER_CORR);
    ck_assert_str_eq(canon("minimax_m2", "model.layers.1.block_sparse_moe.e_score_correction_bias"),
                     "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(canon("minimax_m2", "model.layers.1.mlp.e_score_correction_bias"),
                     "model.layers.1.mlp.gate.e_score_correction_bias");
    ck_assert_str_eq(canon("minimax_m2", "model.layers.1.block_sparse_moe.experts.3.w2.weight"),
                     "model.layers.1.mlp.experts.3.down_proj.weight");
}

/* ---- the rows ---- */

#define L "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2," \
          "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64"
#define T(type) "{\"model_type\":\"" type "\","
/* 64 wide, 8 heads, 128 positions (GLM-4 MoE, MiniMax-M2, dots.llm1) */
#define W64 "\"vocab_size\":64,\"hidden_size\":64,\"intermediate_size\":48," \
            "\"num_attention_heads\":8,\"max_position_embeddings\":128"

typedef struct ok_case {
    const char *json;
    const char *want;                   /* facts (check_facts) */
    void (*more)(const fg_hparams *c);  /* checks beyond them, or NULL */
} ok_case;

/* DeepSeek's (and Kimi K2's) keys as their hub files spell them */
#define DS "\"vocab_size\":64,\"hidden_size\":64,\"intermediate_size\":48," \
           "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":4," \
           "\"max_position_embeddings\":128,\"n_routed_experts\":8,\"num_experts_per_tok\":2," \
           "\"n_shared_experts\":2,\"moe_intermediate_size\":16,\"kv_lora_rank\":32," \
           "\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,\"v_head_dim\":12"
#define YARN40 ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"beta_fast\":32," \
               "\"beta_slow\":1,\"mscale\":1.0,\"mscale_all_dim\":1.0," \
               "\"original_max_position_embeddings\":4096}"

static void more_mla(const fg_hparams *c)
{
    fg_tensor_spec sp[FG_UNIT_MAX_TENSORS];
    uint32_t n = fg_model_unit_tensors(c, 1, sp);
    ck_assert(fg_model_kv_width(c) == c->kv_lora_rank + c->qk_rope_dim &&
              fg_model_kv_planes(c) == 1);
    const fg_tensor_spec *b = fg_model_spec_find(sp, n, "model.layers.0.self_attn.kv_b_proj.weight");
    ck_assert(b && b->access == FG_ACCESS_SMALL && b->role == FG_ROLE_WKV_B &&
              b->dims[0] == 4u * (c->qk_nope_dim + c->v_head_dim) && b->dims[1] == c->kv_lora_rank);
    const fg_tensor_spec *a =
        fg_model_spec_find(sp, n, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
    ck_assert(a && a->dims[0] == c->kv_lora_rank + c->qk_rope_dim &&
              a->perm_off == (c->rope_interleaved ? c->kv_lora_rank : 0) &&
              a->perm_rot == (c->rope_interleaved ? c->qk_rope_dim : 0));
    ck_assert(!!fg_model_spec_find(sp, n, "model.layers.0.self_attn.q_a_proj.weight") ==
              !!c->q_lora_rank);
    ck_assert(fg_model_arch(c)->unused(c, "model.layers.4.eh_proj.weight") == (c->mtp_layers > 0));
}

static const ok_case k_ok[] = {
    /* DeepSeek-V2-Lite: no q_lora, the softmax's greedy top k, no softmax scale correction */
    {T("deepseek_v2") DS ",\"q_lora_rank\":null,\"first_k_dense_replace\":1,"
     "\"topk_method\":\"greedy\",\"n_group\":1,\"topk_group\":1" YARN40 "}",
     "mla=1 q_lora=0 kv_lora=32 qk_nope=16 qk_rope=8 v_dim=12 head_dim=40 kv=1 rot_dim=8 "
     "interleaved=1 router_sigmoid=0 router_corr=0 group_max=0 n_group=1 norm_topk=0 "
     "shared_ffn=32 sparse0=0 sparse1=1 scaling=yarn attn_scale~0.3824988883120412 bos=1 "
     "eos=2 mtp=0", more_mla},
    /* DeepSeek-V2: q_lora (1536 by default), group_limited_greedy */
    {T("deepseek_v2") DS ",\"topk_method\":\"group_limited_greedy\",\"n_group\":4,"
     "\"topk_group\":2,\"routed_scaling_factor\":16.0}", "q_lora=1536 group_max=1 n_group=4 "
     "topk_group=2 routed_scale=16 sparse0=1 scaling=none", more_mla},
    /* DeepSeek-V3: DeepseekV3Config's router defaults, the softmax scale times mscale^2 */
    {T("deepseek_v3") DS ",\"q_lora_rank\":24,\"first_k_dense_replace\":1,"
     "\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\",\"n_group\":4,"
     "\"topk_group\":2,\"num_nextn_predict_layers\":1" YARN40 "}", "mla=1 q_lora=24 "
     "router_sigmoid=1 router_corr=1 n_group=4 topk_group=2 routed_scale=2.5 norm_topk=1 mtp=1 "
     "interleaved=1 attn_scale~0.3824988883120412 bos=0 eos=1 sparse0=0 sparse1=1", more_mla},
    /* Kimi K2's config.json: DeepSeek-V3's class under its own model_type, one group */
    {T("kimi_k2") DS ",\"q_lora_rank\":24,\"n_group\":1,\"topk_group\":1,"
     "\"routed_scaling_factor\":2.827,\"rope_interleave\":false}", "n_group=1 "
     "routed_scale=2.827 interleaved=0 sparse2=0 sparse3=1 scaling=none "
     "attn_scale~0.2041241452319315", more_mla},
    /* Llama: LlamaConfig's defaults; llama3 rope, an eos list */
    {T("llama") L "}", "kv=4 head_dim=8 theta=10000 scaling=none norm=rms gated=1 act=silu "
     "tied=0 bos=1 eos=2 pad=-1 window=0", NULL},
    {T("llama") L ",\"num_key_value_heads\":2,\"head_dim\":16,\"tie_word_embeddings\":true,"
     "\"eos_token_id\":[5,6,7],\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
     "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":32}}",
     "kv=2 head_dim=16 tied=1 n_eos=3 eosid2=7 scaling=llama3 orig_max_pos=32", NULL},
    /* Mistral: named KV heads win over MistralConfig's 8; absent: 8 and a window of 4096 on
     * every layer; null: none */
    {T("mistral") L ",\"num_key_value_heads\":4,\"sliding_window\":16}", "window=16 kv=4", NULL},
    {T("mistral") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":16,\"max_position_embeddings\":64}",
     "kv=8 window=4096 windowed=2", NULL},
    {T("mistral") L ",\"num_key_value_heads\":4,\"sliding_window\":null}", "window=0 windowed=0",
     NULL},
    /* Ministral: Mistral's layer with layer_types (default: every layer windowed);
     * max_window_layers is not its key, nor Mistral's */
    {T("ministral") L ",\"num_key_value_heads\":4,\"sliding_window\":7,\"max_window_layers\":2}",
     "windowed=2 bos=1 eos=2 qkv_bias=0", NULL},
    {T("ministral") L ",\"num_key_value_heads\":4,"
     "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}", "win0=0 win1=4096", NULL},
    {T("mistral") L ",\"num_key_value_heads\":4,\"sliding_window\":3,\"max_window_layers\":1}",
     "windowed=2", NULL},
    /* Qwen2: q/k/v biases; num_key_value_heads null is one per head */
    {T("qwen2") L ",\"num_key_value_heads\":null,\"sliding_window\":null}",
     "qkv_bias=1 out_bias=0 window=0 bos=-1 kv=4 eos=-1 qk_norm=0", NULL},
    /* Qwen3: q/k norms, head_dim 128 unless named, attention_bias on all four projections */
    {T("qwen3") L ",\"num_key_value_heads\":2,\"eos_token_id\":9}", "qk_norm=head head_dim=128 "
     "qkv_bias=0 out_bias=0 mlp_bias=0 bos=-1 eos=9 kv=2 window=0", NULL},
    {T("qwen3") L ",\"num_key_value_heads\":2,\"head_dim\":16,\"attention_bias\":true,"
     "\"mlp_bias\":true}", "head_dim=16 qkv_bias=1 out_bias=1 mlp_bias=0", more_qwen3_norms},
    /* Qwen's per-layer windows: from max_window_layers (28) on, or as layer_types names them */
    {T("qwen3") L ",\"num_key_value_heads\":4,\"use_sliding_window\":true,\"sliding_window\":5,"
     "\"max_window_layers\":1}", "win0=0 win1=5 windowed=1", NULL},
    {T("qwen2") L ",\"num_key_value_heads\":4,\"use_sliding_window\":true,\"sliding_window\":5,"
     "\"max_window_layers\":1,\"layer_types\":[\"sliding_attention\",\"full_attention\"]}",
     "win0=5 win1=0", NULL},
    {T("qwen2") L ",\"num_key_value_heads\":4,\"use_sliding_window\":true,\"sliding_window\":5}",
     "windowed=0", NULL},
    {T("qwen3") L ",\"num_key_value_heads\":4,\"use_sliding_window\":true,"
     "\"max_window_layers\":0}", "window=4096 windowed=2", NULL},
    /* YaRN as Qwen's model cards enable it, and its defaults as transformers 5 takes them; the
     * top-level original_max_position_embeddings wins; null factor: 64 / 8 */
    {T("qwen2") L ",\"num_key_value_heads\":2,\"rope_scaling\":{\"rope_type\":\"yarn\","
     "\"factor\":4.0,\"original_max_position_embeddings\":16}}", "scaling=yarn factor=4 "
     "truncate=1 orig_max_pos=16 beta_fast=32 beta_slow=1 attn_factor~1.138629436111989", NULL},
    {T("llama") L ",\"original_max_position_embeddings\":8,\"rope_parameters\":{\"rope_type\":"
     "\"yarn\",\"factor\":null,\"rope_theta\":1e4,\"beta_fast\":null,\"beta_slow\":2,"
     "\"mscale\":0.707,\"mscale_all_dim\":1.0,\"truncate\":false,"
     "\"original_max_position_embeddings\":32}}", "orig_max_pos=8 factor=8 truncate=0 "
     "beta_fast=32 beta_slow=2 attn_factor~0.9495608824621653", NULL},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
     "\"attention_factor\":1.5}}", "attn_factor=1.5 orig_max_pos=64", NULL},
    {T("llama") L ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}}",
     "scaling=dynamic theta=10000", more_dynamic},
    /* Phi-3: Phi3Config's defaults (one KV head per head, eps 1e-5, bos 1, eos / pad 32000, no
     * window unless named), partial rotary, LongRoPE ("su" its old name) with
     * original_max_position_embeddings top-level only (default 4096: the object's is not
     * Phi-3's, so the factor is 16384 / 4096) */
    {T("phi3") L "}", "kv=4 head_dim=8 rot_dim=8 window=0 bos=1 eos=32000 pad=32000 eps=1e-5 "
     "scaling=none qkv_bias=0 mlp_bias=0 tied=0", NULL},
    {T("phi3") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":16384,"
     "\"partial_rotary_factor\":0.75,\"sliding_window\":9,\"rope_scaling\":{\"type\":\"su\","
     "\"original_max_position_embeddings\":8,\"short_factor\":[1,2,3,4,5,6],"
     "\"long_factor\":[2,3,4,5,6,7.5]}}", "scaling=longrope rot_dim=12 use_long=0 "
     "orig_max_pos=4096 attn_factor~1.0801234497346435 windowed=2 window=9", more_phi3},
    /* Gemma 3: Gemma3TextConfig's defaults (head_dim 256, 4 KV heads, bos 2 / eos 1 / pad 0,
     * tied, gelu_pytorch_tanh, query_pre_attn_scalar 256, window 4096 on all but every 6th
     * layer, rotary bases 1e6 global and 1e4 local), sandwich norms scaling by 1 + w */
    {T("gemma3_text") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":7,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64}",
     "head_dim=256 kv=4 tied=1 qk_norm=head bos=2 eos=1 pad=0 act=gelu_tanh sandwich=both "
     "plus_one=1 local_rope=1 window=4096 attn_scale=0.0625 embed_scale=5.656854249492381 "
     "theta=1e6 local_theta=1e4 windowed=6 win5=0 rope5=full rope4=local", more_gemma3_mlp},
    /* transformers 5's rope_parameters per layer type */
    {T("gemma3_text") L ",\"head_dim\":8,\"sliding_window\":3,\"layer_types\":["
     "\"full_attention\",\"sliding_attention\"],\"rope_parameters\":{\"full_attention\":"
     "{\"rope_type\":\"linear\",\"factor\":8.0,\"rope_theta\":1e6},\"sliding_attention\":"
     "{\"rope_type\":\"default\",\"rope_theta\":5e3}}}", "scaling=linear factor=8 theta=1e6 "
     "local_scaling=none local_theta=5e3 windowed=1 rope1=local win1=3 rope0=full", NULL},
    /* Gemma 2: Gemma2Config's defaults (8192 positions, window 4096 on every other layer from
     * layer 0, caps 50 on the scores and 30 on the logits), no q/k norms or local rotary base;
     * a null cap is none; sliding_window_pattern is Gemma 3's (not read) */
    {T("gemma2") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":5,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"sliding_window_pattern\":3}",
     "head_dim=256 kv=4 tied=1 qk_norm=0 max_pos=8192 sandwich=both plus_one=1 local_rope=0 "
     "attn_softcap=50 final_softcap=30 theta=1e4 windowed=3 win0=4096 win1=0 win4=4096 bos=2 "
     "eos=1 act=gelu_tanh", NULL},
    {T("gemma2") L ",\"attn_logit_softcapping\":null,\"final_logit_softcapping\":12.5}",
     "attn_softcap=0 final_softcap=12.5", NULL},
    /* Gemma (1): GemmaConfig's defaults (head_dim 256, KV heads = heads, tied, bos 2, eos 1),
     * Llama's layer (no sandwich, head_dim^-1/2), 1 + w norms, sqrt(hidden) embeddings, the
     * released files' hidden_act "gelu" as the tanh GELU; no caps, no window; every size
     * GemmaConfig's (gemma-7b) when absent */
    {T("gemma") L ",\"hidden_act\":\"gelu\"}", "head_dim=256 kv=4 tied=1 sandwich=0 plus_one=1 "
     "embed_scale=5.656854249492381 attn_scale=0 act=gelu_tanh bos=2 eos=1 pad=0 windowed=0 "
     "attn_softcap=0 qkv_bias=0", NULL},
    {"{\"model_type\":\"gemma\"}", "hidden=3072 layers=28 ffn=24576 kv=16", NULL},
    /* Seed-OSS: SeedOssConfig's defaults (q/k/v biases, none on o, head_dim 128, 8 KV heads) */
    {T("seed_oss") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":8,\"max_position_embeddings\":64}",
     "qkv_bias=1 out_bias=0 mlp_bias=0 head_dim=128 kv=8 bos=0 eos=2 pad=1", NULL},
    {T("seed_oss") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":8,\"max_position_embeddings\":64,"
     "\"attention_bias\":false,\"attention_out_bias\":true}", "qkv_bias=0 out_bias=1", NULL},
    /* EXAONE 4: every 4th layer global (full, no rotary positions) by default, or by the
     * pattern's letters; without a window every layer full and rotated */
    {T("exaone4") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":8,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
     "\"max_position_embeddings\":64}", "windowed=6 win3=0 rope3=nope rope2=full sandwich=after "
     "qk_norm=head", NULL},
    {T("exaone4") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":4,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
     "\"max_position_embeddings\":64,\"sliding_window_pattern\":\"LG\"}",
     "win0=4096 win1=0 win2=4096 rope3=nope", NULL},
    {T("exaone4") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":4,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
     "\"max_position_embeddings\":64,\"sliding_window\":null}", "windowed=0 rope3=full", NULL},
    /* ERNIE 4.5: Ernie4_5Config's defaults (tied, head_dim 128, 2 KV heads, theta 5e5), use_bias
     * on every Linear layer; q's and k's rows (and biases) reordered from (even, odd) pairs */
    {T("ernie4_5") L ",\"use_bias\":true}", "tied=1 head_dim=128 kv=2 theta=5e5 qkv_bias=1 "
     "out_bias=1 mlp_bias=1 interleaved=1", more_ernie},
    /* ERNIE 4.5 MoE: Ernie4_5_MoeConfig's defaults (64 experts, top 6, 2 shared, sparse from
     * layer 1 to the last), the choice bias [1, experts], the head's bias with use_bias */
    {T("ernie4_5_moe") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":4,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64,"
     "\"use_bias\":true,\"moe_layer_interval\":2}", "experts=64 top_k=6 shared_ffn=3072 "
     "shared_plain=1 sparse0=0 sparse1=1 sparse2=0 sparse3=1 router_corr=2 router_sigmoid=0 "
     "head_bias=1 interleaved=1", more_ernie_moe},
    /* GLM-4 (dense): Glm4Config's defaults (half the head rotated, pairs, q/k/v biases and not
     * o, plain sandwich norms under GLM's names, gate_up fused) */
    {T("glm4") L "}", "head_dim=128 rot_dim=64 interleaved=1 qkv_bias=1 out_bias=0 sandwich=both "
     "plus_one=0 pad=151329 kv=2 eps=1.5625e-7", more_glm4},
    /* the Gemma 3 multimodal wrapper: text_config as the hub's 4B names it (Gemma3TextConfig's
     * defaults for the rest), the top level's eos list and dtype */
    {T("gemma3") "\"eos_token_id\":[1,106],\"torch_dtype\":\"bfloat16\",\"text_config\":{"
     "\"hidden_size\":2560,\"intermediate_size\":10240,\"model_type\":\"gemma3_text\","
     "\"num_hidden_layers\":34,\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},"
     "\"sliding_window\":1024},\"vision_config\":{\"model_type\":\"siglip_vision_model\"}}",
     "arch=gemma3 vocab=262208 heads=8 kv=4 head_dim=256 max_pos=131072 hidden=2560 layers=34 "
     "tied=1 n_eos=2 eosid1=106 bos=2 dtype=bfloat16 scaling=linear local_theta=1e4 windowed=29 "
     "window=1024", more_gemma3_wrapper},
    /* Mistral Small 3.x: a mistral text_config (model_type absent: mistral); the top level's
     * tie_word_embeddings decides, true by default as in transformers 5 */
    {T("mistral3") "\"text_config\":{" L ",\"sliding_window\":null,\"num_key_value_heads\":4,"
     "\"tie_word_embeddings\":false}}", "arch=mistral3 tied=1 kv=4 window=0", NULL},
    {T("mistral3") "\"tie_word_embeddings\":false,\"text_config\":{\"model_type\":\"mistral\","
     L ",\"num_key_value_heads\":2}}", "tied=0 kv=2 window=4096", NULL},
    /* Qwen2.5-VL as the hub ships it (flat, rope_scaling mrope, no kv heads named: the text
     * class's 8; its theta 1e6 and max_window_layers 80); Qwen3-VL (theta 5e5 when absent);
     * pre-5 files' text_config tie_word_embeddings true carries */
    {T("qwen2_5_vl") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":16,\"max_position_embeddings\":64,"
     "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[1,1,0]},"
     "\"vision_config\":{\"depth\":32}}", "arch=qwen2_5_vl kv=8 theta=1e6 scaling=none "
     "qkv_bias=1 tied=0 eos=151645", NULL},
    {T("qwen3_vl") "\"text_config\":{\"model_type\":\"qwen3_vl_text\"," L ","
     "\"num_key_value_heads\":2,\"tie_word_embeddings\":true,\"rope_scaling\":{\"rope_type\":"
     "\"default\",\"mrope_section\":[24,20,20],\"mrope_interleaved\":true}}}",
     "qk_norm=head head_dim=128 theta=5e5 tied=1", more_qwen3_vl},
    /* OLMo 2: no input norms, q/k norms over the whole projections, Olmo2Config's ids */
    {T("olmo2") L ",\"num_key_value_heads\":2}", "qk_norm=whole sandwich=after bos=-1 eos=50279",
     more_olmo2},
    /* SmolLM3: NoPE every 4th layer by default, or as no_rope_layers says */
    {T("smollm3") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":8,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":64}",
     "kv=4 tied=1 bos=128000 pad=128004 rope3=nope rope7=nope rope0=full rope4=full", NULL},
    {T("smollm3") L ",\"no_rope_layers\":[0,1]}", "rope0=nope rope1=full", NULL},
    /* Granite: the four multipliers, each 1 by default (attention_multiplier is q's scale) */
    {T("granite") L ",\"embedding_multiplier\":12,\"residual_multiplier\":0.22,"
     "\"logits_scaling\":8}", "embed_scale=12 attn_scale=1 residual_scale=0.22 "
     "logit_scale=0.125 bos=1 tied=0", NULL},
    /* Ministral 3: Ministral3Config's defaults, YaRN with Llama 4's q scaling when the file has
     * no rope settings */
    {T("ministral3") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":16,\"max_position_embeddings\":64}",
     "head_dim=128 kv=8 pad=11 eps=1e-5 scaling=yarn factor=16 theta=1e6 orig_max_pos=16384 "
     "attn_factor=1 llama4_beta=0.1 window=0 tied=0", NULL},
    {T("ministral3") L ",\"num_key_value_heads\":4,\"rope_parameters\":{\"rope_type\":"
     "\"default\",\"rope_theta\":1e4}}", "scaling=none llama4_beta=0", NULL},
    /* Mixtral: 8 experts top 2 renormalized, intermediate_size wide, on every layer */
    {T("mixtral") L ",\"num_key_value_heads\":2}", "experts=8 top_k=2 norm_topk=1 moe_ffn=48 "
     "shared_ffn=0 window=0 eps=1e-5 sparse0=1 sparse1=1", more_mixtral},
    /* Qwen3-MoE: every decoder_sparse_step-th layer sparse, less mlp_only_layers */
    {T("qwen3_moe") L ",\"decoder_sparse_step\":2,\"moe_intermediate_size\":24,"
     "\"num_experts\":16}", "experts=16 top_k=8 norm_topk=0 moe_ffn=24 sparse0=0 sparse1=1",
     more_qwen3_moe},
    {T("qwen3_moe") L ",\"mlp_only_layers\":[1],\"norm_topk_prob\":true}",
     "sparse0=1 sparse1=0 norm_topk=1", NULL},
    /* Qwen2-MoE: q/k/v biases by default, the shared expert and its gate; num_experts 0 */
    {T("qwen2_moe") L ",\"num_key_value_heads\":2,\"shared_expert_intermediate_size\":40}",
     "experts=60 top_k=4 shared_ffn=40 qkv_bias=1 out_bias=0 moe_ffn=1408", more_qwen2_moe},
    {T("qwen2_moe") L ",\"num_key_value_heads\":2,\"num_experts\":0,\"qkv_bias\":false}",
     "experts=0 sparse0=0 qkv_bias=0", NULL},
    /* GraniteMoE: GraniteMoeConfig's defaults (8 experts, top 2 renormalized, each
     * intermediate_size wide, on every layer), Granite's multipliers; its checkpoint names */
    {T("granitemoe") L ",\"residual_multiplier\":0.5}", "experts=8 top_k=2 norm_topk=1 "
     "moe_ffn=48 residual_scale=0.5 kv=4 tied=0 sparse0=1 sparse1=1", more_granitemoe},
    /* OLMoE: OlmoeConfig's defaults, experts intermediate_size wide on every layer, whole q/k
     * norms; clip_qkv only null */
    {T("olmoe") L ",\"clip_qkv\":null}", "experts=64 top_k=8 norm_topk=0 moe_ffn=48 kv=4 "
     "eos=50279 bos=-1 pad=1 qk_norm=whole sandwich=0 eps=1e-5 sparse0=1 sparse1=1", more_olmoe},
    {T("olmoe") L ",\"num_experts\":4,\"num_experts_per_tok\":2,\"norm_topk_prob\":true}",
     "experts=4 top_k=2 norm_topk=1", NULL},
    /* GLM-4 MoE: Glm4MoeConfig's defaults (DeepSeek-V3's router, one group, 1 shared expert,
     * the first layer dense, one prediction layer, half the head rotated, o without a bias) */
    {T("glm4_moe") W64 ",\"num_hidden_layers\":3,\"attention_bias\":true}",
     "experts=128 top_k=8 moe_ffn=1408 shared_ffn=1408 router_sigmoid=1 shared_plain=1 "
     "norm_topk=1 n_group=1 qkv_bias=1 out_bias=0 qk_norm=0 rot_dim=4 sparse0=0 sparse1=1 mtp=1",
     more_glm4_moe},
    {T("glm4_moe") W64 ",\"num_hidden_layers\":3,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,\"routed_scaling_factor\":2.5,"
     "\"n_shared_experts\":0,\"first_k_dense_replace\":0,\"use_qk_norm\":true,"
     "\"partial_rotary_factor\":1.0,\"num_nextn_predict_layers\":0}", "n_group=4 topk_group=2 "
     "routed_scale=2.5 shared_ffn=0 sparse0=1 qk_norm=head rot_dim=8", more_glm4_moe_no_mtp},
    /* dots.llm1: Dots1Config's defaults (not renormalized, no dense layer, a window on the
     * layers from 62 on), Qwen3's q/k norms */
    {T("dots1") W64 ",\"num_hidden_layers\":64,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_shared_experts\":2,\"num_key_value_heads\":2}",
     "norm_topk=0 sparse0=1 shared_ffn=2816 qk_norm=head router_sigmoid=1 shared_plain=1 mtp=0 "
     "win61=0 win62=4096", NULL},
    /* MiniMax-M2: MiniMaxM2Config's defaults (256 experts top 8 by sigmoid scores with the
     * choice bias, theta 5e6, whole-projection q/k norms, head_dim 128), the released files'
     * rotary_dim */
    {T("minimax_m2") W64 ",\"num_hidden_layers\":2,\"rotary_dim\":64}", "experts=256 top_k=8 "
     "moe_ffn=48 router_sigmoid=1 norm_topk=1 topk_eps=0 n_group=1 shared_ffn=0 head_dim=128 "
     "rot_dim=64 theta=5e6 qk_norm=whole qkv_bias=0 bos=200034", more_minimax},
    /* OLMo 3: Olmo3Config's sliding layers (3 of every 4, window 4096) rotated with rope_theta
     * (default 5e5) unscaled, rope_scaling the full layers' only; or nested rope_parameters */
    {T("olmo3") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":8,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":128,"
     "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8,"
     "\"original_max_position_embeddings\":16}}", "windowed=6 win0=4096 win3=0 win7=0 "
     "local_rope=1 local_theta=5e5 local_scaling=none theta=5e5 scaling=yarn sandwich=after "
     "qk_norm=whole eos=50279", NULL},
    {T("olmo3") "\"vocab_size\":64,\"hidden_size\":64,\"num_hidden_layers\":2,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"max_position_embeddings\":128,"
     "\"layer_types\":[\"full_attention\",\"sliding_attention\"],"
     "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\","
     "\"factor\":2,\"rope_theta\":1000},\"sliding_attention\":"
     "{\"rope_type\":\"default\",\"rope_theta\":1000}}}",
     "win0=0 win1=4096 scaling=linear local_theta=1000", NULL},
};

typedef struct fail_case {
    const char *json;
    int code;
    const char *needle; /* in the one-line message */
} fail_case;

#define GM T("gemma3_text") L ",\"head_dim\":8"
#define PHI T("phi3") L
#define G T("glm4_moe") W64 ",\"num_hidden_layers\":2,\"n_routed_experts\":16," \
          "\"num_experts_per_tok\":4"
static const fail_case k_fail[] = {
    {T("deepseek_v3") DS ",\"index_topk\":2048}", FG_ERR_UNSUPPORTED,
     "key index_topk: DeepSeek-V3.2's sparse attention"},
    {T("deepseek_v3") DS ",\"topk_method\":\"greedy\"}", FG_ERR_CORRUPT, "topk_method"},
    {T("deepseek_v2") DS ",\"topk_method\":\"group_limited_greedy\"}", FG_ERR_CORRUPT,
     "group_limited_greedy needs n_group"},
    {T("deepseek_v2") DS ",\"attention_bias\":true}", FG_ERR_UNSUPPORTED, "attention_bias"},
    {T("deepseek_v2") DS ",\"qk_rope_head_dim\":7}", FG_ERR_CORRUPT, "qk_rope_head_dim"},
    /* windows */
    {T("qwen2") L ",\"num_key_value_heads\":4,\"layer_types\":[\"sliding_attention\","
     "\"full_attention\"]}", FG_ERR_CORRUPT,
     "key layer_types: a sliding_attention layer needs use_sliding_window true"},
    {T("qwen2") L ",\"num_key_value_heads\":4,\"layer_types\":[\"full_attention\"]}",
     FG_ERR_CORRUPT, "key layer_types: must be a list of one entry per layer"},
    {T("qwen3") L ",\"num_key_value_heads\":4,\"layer_types\":[\"full_attention\","
     "\"chunked_attention\"]}", FG_ERR_CORRUPT, "key layer_types: entries must be"},
    {T("qwen3") L ",\"num_key_value_heads\":4,\"max_window_layers\":-1}", FG_ERR_CORRUPT,
     "key max_window_layers"},
    /* sizes, activation */
    {T("qwen2") L "}", FG_ERR_CORRUPT, "key num_key_value_heads: missing, and the family's "
     "default 32 does not divide num_attention_heads 4"},
    {T("llama") L ",\"hidden_act\":\"gelu\"}", FG_ERR_UNSUPPORTED, "key hidden_act: is \"gelu\""},
    {T("llama") L ",\"num_key_value_heads\":3}", FG_ERR_CORRUPT,
     "key num_key_value_heads: does not divide"},
    {T("llama") L ",\"head_dim\":7}", FG_ERR_CORRUPT, "key head_dim"},
    /* rotary settings */
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":4}}",
     FG_ERR_UNSUPPORTED, "rope_scaling.rope_type: \"longrope\""},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"dynamic\"}}", FG_ERR_CORRUPT,
     "key rope_scaling.factor: must be a positive number"},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"yarn\"}}", FG_ERR_CORRUPT,
     "key rope_scaling: yarn needs factor"},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"truncate\":1}}",
     FG_ERR_CORRUPT, "truncate true or false"},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"beta_fast\":-1}}",
     FG_ERR_CORRUPT, "must be numbers >= 0"},
    {T("llama") L ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}", FG_ERR_CORRUPT,
     "key rope_scaling: llama3 needs"},
    /* quantized checkpoints (MXFP4 is read for gpt-oss's experts only); unknown families (the
     * list is fg-convert --help's: it outgrew an error message) */
    {T("llama") L ",\"quantization_config\":{\"bits\":4,\"quant_method\":\"gptq\"}}",
     FG_ERR_UNSUPPORTED, "key quantization_config: a checkpoint quantized by another tool "
     "(quant_method \"gptq\")"},
    {T("llama") L ",\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", FG_ERR_UNSUPPORTED,
     "(quant_method \"mxfp4\")"},
    {"{\"model_type\":\"gemma4\"}", FG_ERR_UNSUPPORTED,
     "key model_type: \"gemma4\" is not a family fg runs (fg-convert --help lists them)"},
    /* Phi-3 */
    {PHI ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}}", FG_ERR_UNSUPPORTED,
     "\"linear\" is not Phi-3's (default, longrope)"},
    {PHI ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,2],"
     "\"long_factor\":[1,2,3,4]}}", FG_ERR_CORRUPT,
     "key rope_scaling.short_factor: longrope needs a list of 4 numbers"},
    {PHI ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,2,3,4],"
     "\"long_factor\":[1,2,0,4]}}", FG_ERR_CORRUPT,
     "key rope_scaling.long_factor: entries must be positive numbers"},
    {PHI ",\"partial_rotary_factor\":0.1}", FG_ERR_CORRUPT,
     "key partial_rotary_factor: must leave an even number"},
    {PHI ",\"partial_rotary_factor\":1.5}", FG_ERR_CORRUPT,
     "key partial_rotary_factor: must be a number in"},
    /* the Gemmas */
    {GM ",\"sliding_window\":null}", FG_ERR_CORRUPT,
     "key sliding_window: null, but a layer is a sliding one"},
    {GM ",\"final_logit_softcapping\":30.0}", FG_ERR_UNSUPPORTED, "key final_logit_softcapping: "
     "logit soft-capping in a Gemma 3 (Gemma 2's) is not supported"},
    {GM ",\"attn_logit_softcapping\":50.0}", FG_ERR_UNSUPPORTED, "key attn_logit_softcapping"},
    {GM ",\"use_bidirectional_attention\":true}", FG_ERR_UNSUPPORTED, "bidirectional attention"},
    {GM ",\"hidden_activation\":\"silu\"}", FG_ERR_UNSUPPORTED,
     "key hidden_activation: is \"silu\"; fg supports \"gelu_pytorch_tanh\", \"gelu\""},
    {GM ",\"query_pre_attn_scalar\":0}", FG_ERR_CORRUPT, "key query_pre_attn_scalar"},
    {T("gemma2") L ",\"attn_logit_softcapping\":0}", FG_ERR_CORRUPT,
     "key attn_logit_softcapping: must be a number"},
    {T("gemma2") L ",\"use_bidirectional_attention\":true}", FG_ERR_UNSUPPORTED,
     "bidirectional attention"},
    {T("gemma") L ",\"hidden_act\":\"silu\"}", FG_ERR_UNSUPPORTED, "key hidden_act"},
    {T("gemma") L ",\"final_logit_softcapping\":30}", FG_ERR_UNSUPPORTED,
     "logit soft-capping in a Gemma (Gemma 2's)"},
    /* EXAONE 4, SmolLM3, Granite, Ministral 3 */
    {T("exaone4") "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":4,"
     "\"intermediate_size\":48,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
     "\"max_position_embeddings\":64,\"sliding_window_pattern\":\"LXG\"}", FG_ERR_CORRUPT,
     "key sliding_window_pattern"},
    {T("smollm3") L ",\"no_rope_layers\":[1,2]}", FG_ERR_CORRUPT,
     "key no_rope_layers: entries must be 0 or 1"},
    {T("smollm3") L ",\"no_rope_layers\":[1]}", FG_ERR_CORRUPT,
     "key no_rope_layers: must be a list of one 0 or 1 per layer"},
    {T("granite") L ",\"logits_scaling\":0}", FG_ERR_CORRUPT,
     "key logits_scaling: must be a number in"},
    {T("ministral3") L ",\"num_key_value_heads\":4,\"rope_parameters\":{\"rope_type\":"
     "\"default\",\"llama_4_scaling_beta\":0.1}}", FG_ERR_CORRUPT,
     "llama_4_scaling_beta needs original_max_position_embeddings"},
    /* the multimodal wrappers */
    {"{\"model_type\":\"gemma3\"}", FG_ERR_CORRUPT, "key text_config: must be an object"},
    {T("mistral3") "\"text_config\":{\"model_type\":\"gemma3_text\"}}", FG_ERR_CORRUPT,
     "key text_config.model_type: must be \"mistral\" or \"ministral3\""},
    {T("gemma3") "\"text_config\":{\"model_type\":\"llama\"}}", FG_ERR_CORRUPT,
     "key text_config.model_type: must be \"gemma3_text\""},
    {T("gemma3") "\"text_config\":{\"final_logit_softcapping\":30}}", FG_ERR_UNSUPPORTED,
     "text_config: key final_logit_softcapping"},
    /* mixtures of experts */
    {T("mixtral") L ",\"num_key_value_heads\":2,\"num_local_experts\":4,\"num_experts\":8}",
     FG_ERR_CORRUPT, "key num_experts: differs from num_local_experts"},
    {T("mixtral") L ",\"num_key_value_heads\":2,\"num_local_experts\":2,"
     "\"num_experts_per_tok\":3}", FG_ERR_CORRUPT, "key num_experts_per_tok: exceeds the experts"},
    {T("mixtral") L ",\"num_key_value_heads\":2,\"num_local_experts\":0}", FG_ERR_CORRUPT,
     "key num_local_experts: must be an integer in [1, 1024]"},
    {T("qwen3_moe") L ",\"mlp_only_layers\":[2]}", FG_ERR_CORRUPT,
     "key mlp_only_layers: entries must be layer indices below num_hidden_layers"},
    {T("olmoe") L ",\"clip_qkv\":8.0}", FG_ERR_CORRUPT, "key clip_qkv: is not supported"},
    {T("olmoe") L ",\"num_experts\":0}", FG_ERR_CORRUPT,
     "key num_experts: must be an integer in [1, 1024]"},
    {G ",\"n_group\":3}", FG_ERR_CORRUPT, "key n_group: must divide n_routed_experts"},
    {G ",\"n_group\":4,\"topk_group\":5}", FG_ERR_CORRUPT, "key topk_group: exceeds"},
    {G ",\"n_group\":8,\"topk_group\":1}", FG_ERR_CORRUPT,
     "key num_experts_per_tok: exceeds the experts of topk_group groups"},
    {G ",\"routed_scaling_factor\":0}", FG_ERR_CORRUPT, "key routed_scaling_factor"},
    {T("dots1") W64 ",\"num_hidden_layers\":2,\"n_routed_experts\":16,"
     "\"num_key_value_heads\":2,\"num_experts_per_tok\":4}", FG_ERR_CORRUPT,
     "key n_shared_experts: missing"},
    {T("minimax_m2") W64 ",\"num_hidden_layers\":2,\"rotary_dim\":200}", FG_ERR_CORRUPT,
     "key rotary_dim"},
};
#undef GM
#undef PHI
#undef G

#define N_OK (int)(sizeof k_ok / sizeof k_ok[0])
#define N_FAIL (int)(sizeof k_fail / sizeof k_fail[0])

START_TEST(config_ok)
{
    const ok_case *k = &k_ok[_i];
    fg_hparams c;
    fg_err err;
    int rc = fg_model_config_parse(k->json, strlen(k->json), NULL, &c, &err);
    ck_assert_msg(rc == FG_OK, "row %d: %s: %s", _i, k->json, err.msg);
    check_facts(&c, k->want, _i);
    if (k->more)
        k->more(&c);
}
END_TEST

START_TEST(config_fail)
{
    const fail_case *k = &k_fail[_i];
    fg_hparams c;
    fg_err err;
    int rc = fg_model_config_parse(k->json, strlen(k->json), "x/config.json", &c, &err);
    ck_assert_msg(rc == k->code, "row %d: %s: %d %s", _i, k->json, rc, err.msg);
    ck_assert_msg(strstr(err.msg, k->needle) != NULL, "row %d: '%s' lacks '%s'", _i, err.msg,
                  k->needle);
}
END_TEST

/* The table's order, which fg-convert --help prints */
START_TEST(table_names)
{
    ck_assert_str_eq(fg_arch_names(),
                     "opt, llama, mistral, ministral, qwen2, qwen3, phi3, gemma3_text, gemma3, "
                     "mistral3, ministral3, qwen2_5_vl, qwen3_vl, granite, smollm3, olmo2, "
                     "mixtral, "
                     "qwen2_moe, qwen3_moe, olmoe, gemma2, granitemoe, gpt_oss, gemma, glm4_moe, "
                     "minimax_m2, olmo3, dots1, seed_oss, exaone4, ernie4_5, ernie4_5_moe, "
                     "glm4, deepseek_v2, deepseek_v3, kimi_k2");
}
END_TEST

/* The table is data: every row found by its model_type, OPT's entry apart; a wrapper's text
 * types read by family rows; the installed model.h names no family (fg_arch_find does). */
START_TEST(rows_are_data)
{
    ck_assert(fg_arch_find("opt") != NULL && !fgm_row_find("opt"));
    for (size_t i = 0; i < fgm_n_rows; i++) {
        const fgm_family *f = &fgm_rows[i];
        ck_assert_ptr_eq(fg_arch_find(f->arch.name), &f->arch);
        ck_assert(f->arch.noun[0] && f->arch.parse_config && f->arch.canonical_name);
        for (int k = 0; k < 2 && f->w.text[k][0]; k++) {
            const fgm_family *t = fgm_row_find(f->w.text[k][1]);
            ck_assert_msg(t && !t->w.text[0][0], "%s: %s", f->arch.name, f->w.text[k][1]);
        }
    }
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/model/model.h", FG_SOURCE_DIR);
    FILE *h = fopen(path, "r");
    ck_assert_msg(h != NULL, "%s", path);
    while (fgets(line, sizeof line, h)) {
        ck_assert_msg(!strstr(line, "extern const fg_arch"), "model.h: %s", line);
        for (size_t i = 0; i < fgm_n_rows; i++) {
            char sym[64];
            snprintf(sym, sizeof sym, "fg_arch_%s", fgm_rows[i].arch.name);
            ck_assert_msg(!strstr(line, sym), "model.h names %s", sym);
        }
    }
    fclose(h);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_configs");
    TCase *tc = tcase_create("configs");
    tcase_add_loop_test(tc, config_ok, 0, N_OK);
    tcase_add_loop_test(tc, config_fail, 0, N_FAIL);
    tcase_add_test(tc, table_names);
    tcase_add_test(tc, rows_are_data);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
