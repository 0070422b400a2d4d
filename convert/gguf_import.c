/* gguf_import.c - a GGUF file as an fg_ckpt: names, config.json and block types (see gguf.h).
 *
 * Design:
 * - One model table. A GGUF file's metadata ({arch}.block_count, .embedding_length, ...) is
 *   turned into the config.json keys model/ already reads (as transformers' config would have
 *   them), and its tensor names into the Hugging Face names model/ expects; fg_model_config_parse
 *   and fg_convert_check_ckpt then do all the checking they do for safetensors. A name no rule
 *   maps is kept, so the check refuses it by its GGUF name.
 * - llama.cpp's convert_hf_to_gguf.py permutes the Q and K rows of a `llama` architecture (per
 *   head: rotate-half's halves interleaved, row 2i from row i, row 2i + 1 from row half + i),
 *   which is exactly the model table's interleaved rotary layout (fg_tensor_spec.perm_*): the
 *   config reports it, and fg-convert stores the rows back in rotate-half's order. qwen2 and
 *   qwen3 are not permuted.
 * - deepseek2: llama.cpp's names for MLA (attn_q_a, attn_kv_a_mqa, ...), shared experts
 *   (mlp.shared_experts) and V3's choice bias (exp_probs_b.bias); the newer converters' attn_k_b
 *   / attn_v_b pair (kv_b_proj split per head, k_b transposed) is joined back into kv_b_proj
 *   (ck_gguf_join, read by ck_gguf_read_kvb), so both forms give the safetensors import's store.
 * - gpt-oss: the sinks (blk.N.attn_sinks.weight: self_attn.sinks), the router (ffn_gate_inp:
 *   mlp.router) and the experts, whose merged tensors already lie as the model table stacks
 *   them (list_oss_experts: listed under the stacked names, read in place; the fused
 *   ffn_gate_up_exps as two views, each every expert's half of the rows).
 * - Types: F32, F16 and BF16 are listed as such (copied bit for bit, as from safetensors);
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 as the
 *   FG_CKPT_ block dtype of the same name, whose blocks ck_gguf_read_f16 dequantizes exactly as
 *   ggml's reference (gguf_dequant.c) and rounds to F16 (to nearest even: at most half an F16
 *   ulp, 2^-11 relative, far below the quantization step; Q4_0's values are exact), or for
 *   MXFP4 to BF16, which holds its values exactly (as the safetensors MXFP4 import). Other ggml
 *   types (IQ1/IQ2/IQ3, TQ, Q8_1/Q8_K, integers, F64) are refused at open, naming the tensor and
 *   its type.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fg_bytes.h"
#include "fg_file.h"
#include "gguf.h"
#include "quant.h"

/* GGUF name pieces -> Hugging Face's, per layer ("blk.N.<gguf>" -> "model.layers.N.<hf>"), as
 * gguf-py's tensor_mapping.py maps them; arch_names first: the pieces whose Hugging Face name
 * depends on the architecture (Gemma 2/3's ffn_norm is the pre-feedforward norm, Llama's the
 * post-attention one; Phi-3's ffn_up holds gate and up stacked). */
static const struct { const char *arch, *gguf, *hf; } arch_names[] = {
    {"gemma2", "ffn_norm", "pre_feedforward_layernorm"},
    {"gemma2", "post_attention_norm", "post_attention_layernorm"},
    {"gemma2", "post_ffw_norm", "post_feedforward_layernorm"},
    {"gemma3", "ffn_norm", "pre_feedforward_layernorm"},
    {"gemma3", "post_attention_norm", "post_attention_layernorm"},
    {"gemma3", "post_ffw_norm", "post_feedforward_layernorm"},
    {"olmo2", "post_attention_norm", "post_attention_layernorm"},
    {"olmo2", "post_ffw_norm", "post_feedforward_layernorm"},
    {"glm4", "ffn_up", "mlp.gate_up_proj"},
    {"glm4", "post_attention_norm", "post_self_attn_layernorm"},
    {"glm4", "post_ffw_norm", "post_mlp_layernorm"},
    {"phi3", "attn_qkv", "self_attn.qkv_proj"},
    {"phi3", "ffn_up", "mlp.gate_up_proj"},
    {"deepseek2", "attn_q_a", "self_attn.q_a_proj"},
    {"deepseek2", "attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"deepseek2", "attn_q_b", "self_attn.q_b_proj"},
    {"deepseek2", "attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"deepseek2", "attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"deepseek2", "attn_kv_b", "self_attn.kv_b_proj"},
    {"deepseek2", "ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"deepseek2", "ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"deepseek2", "ffn_down_shexp", "mlp.shared_experts.down_proj"},
    /* (".bias" after it: mlp.gate.e_score_correction_bias, see ck_gguf_hf_name) */
    {"deepseek2", "exp_probs_b", "mlp.gate.e_score_correction"},
    /* (gpt-oss's sinks are one vector a layer: "self_attn.sinks", no suffix; ck_gguf_hf_name) */
    {"gpt-oss", "post_attention_norm", "post_attention_layernorm"},
    {"gpt-oss", "ffn_gate_inp", "mlp.router"},
    {"gpt-oss", "attn_sinks", "self_attn.sinks"},
    {"glm4moe", "post_attention_norm", "post_attention_layernorm"},
    {"glm4moe", "ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"glm4moe", "ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"glm4moe", "ffn_down_shexp", "mlp.shared_experts.down_proj"},
    {"glm4moe", "exp_probs_b", "mlp.gate.e_score_correction"},
    /* the multi-token prediction layer's own pieces (not stored: the checkpoint's MTP layer) */
    {"glm4moe", "nextn.eh_proj", "eh_proj"},
    {"glm4moe", "nextn.enorm", "enorm"},
    {"glm4moe", "nextn.hnorm", "hnorm"},
    {"glm4moe", "nextn.embed_tokens", "embed_tokens"},
    {"glm4moe", "nextn.shared_head_head", "shared_head.head"},
    {"glm4moe", "nextn.shared_head_norm", "shared_head.norm"},
};

static const struct { const char *gguf, *hf; } layer_names[] = {
    {"attn_norm", "input_layernorm"},        {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},          {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},     {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},           {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},           {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
};

/* a mixture's experts merged into one tensor [experts, rows, cols] (ggml: ne[2] experts):
 * listed as one tensor per expert, "model.layers.N.mlp.experts.E.<hf>" */
static const struct { const char *gguf, *hf; } expert_names[] = {
    {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"},
};

static const struct { const char *gguf, *hf; } top_names[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"},
};

/* name = "<stem>.weight" or "<stem>.bias": the stem's length and the suffix */
static int split_suffix(const char *name, size_t *stem, const char **suffix)
{
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight"))
        *stem = n - 7, *suffix = name + n - 7;
    else if (n > 5 && !strcmp(name + n - 5, ".bias"))
        *stem = n - 5, *suffix = name + n - 5;
    else
        return 0;
    return 1;
}

/* "blk.N." at name: N (decimal, no sign or leading zero, at most 2^20) and the piece's start */
static int layer_of(const char *name, unsigned long *layer, size_t *at)
{
    if (strncmp(name, "blk.", 4) || !isdigit((unsigned char)name[4]) ||
        (name[4] == '0' && name[5] != '.'))
        return 0;
    const char *p = name + 4;
    unsigned long v = 0;
    while (isdigit((unsigned char)*p) && v <= (1ul << 20))
        v = v * 10 + (unsigned long)(*p++ - '0');
    if (*p != '.' || v > (1ul << 20))
        return 0;
    *layer = v, *at = (size_t)(p + 1 - name);
    return 1;
}

static int piece_is(const char *name, size_t at, size_t stem, const char *piece)
{
    return strlen(piece) == stem - at && !strncmp(name + at, piece, stem - at);
}

/* The Hugging Face piece of layer piece [at, stem) of name under arch, or NULL */
static const char *layer_piece(const char *arch, const char *name, size_t at, size_t stem)
{
    for (size_t i = 0; arch && i < sizeof arch_names / sizeof arch_names[0]; i++)
        if (!strcmp(arch, arch_names[i].arch) && piece_is(name, at, stem, arch_names[i].gguf))
            return arch_names[i].hf;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (piece_is(name, at, stem, layer_names[i].gguf))
            return layer_names[i].hf;
    return NULL;
}

int ck_gguf_hf_name(const char *arch, const char *name, char *out, size_t cap)
{
    size_t stem, at;
    const char *suf, *hf;
    unsigned long layer;
    if (!split_suffix(name, &stem, &suf))
        return 0;
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (strlen(top_names[i].gguf) == stem && !strncmp(name, top_names[i].gguf, stem))
            return snprintf(out, cap, "%s%s", top_names[i].hf, suf) < (int)cap;
    if (!layer_of(name, &layer, &at) || at > stem || !(hf = layer_piece(arch, name, at, stem)))
        return 0;
    if (!strcmp(hf, "mlp.gate.e_score_correction")) /* the bias is the whole name */
        return !strcmp(suf, ".bias") &&
               snprintf(out, cap, "model.layers.%lu.%s_bias", layer, hf) < (int)cap;
    if (!strcmp(hf, "self_attn.sinks")) /* (GptOssModel appends ".weight" to the bare name) */
        return !strcmp(suf, ".weight") &&
               snprintf(out, cap, "model.layers.%lu.%s", layer, hf) < (int)cap;
    return snprintf(out, cap, "model.layers.%lu.%s%s", layer, hf, suf) < (int)cap;
}

int ck_gguf_expert_name(const char *name, uint64_t expert, char *out, size_t cap)
{
    size_t stem, at;
    const char *suf;
    unsigned long layer;
    if (!split_suffix(name, &stem, &suf) || !layer_of(name, &layer, &at) || at > stem)
        return 0;
    for (size_t i = 0; i < sizeof expert_names / sizeof expert_names[0]; i++)
        if (piece_is(name, at, stem, expert_names[i].gguf))
            return snprintf(out, cap, "model.layers.%lu.mlp.experts.%llu.%s%s", layer,
                            (unsigned long long)expert, expert_names[i].hf, suf) < (int)cap;
    return 0;
}

/* The ckpt dtype of a ggml type fg reads, else 0. */
static uint8_t dtype_of(uint32_t type)
{
    switch (type) {
    case CK_GGML_F32: return FG_CKPT_F32;
    case CK_GGML_F16: return FG_CKPT_F16;
    case CK_GGML_BF16: return FG_CKPT_BF16;
    case CK_GGML_Q8_0: return FG_CKPT_Q8_0;
    case CK_GGML_Q4_0: return FG_CKPT_Q4_0;
    case CK_GGML_Q4_K: return FG_CKPT_Q4_K;
    case CK_GGML_Q6_K: return FG_CKPT_Q6_K;
    case CK_GGML_Q4_1: return FG_CKPT_Q4_1;
    case CK_GGML_Q5_0: return FG_CKPT_Q5_0;
    case CK_GGML_Q5_1: return FG_CKPT_Q5_1;
    case CK_GGML_Q2_K: return FG_CKPT_Q2_K;
    case CK_GGML_Q3_K: return FG_CKPT_Q3_K;
    case CK_GGML_Q5_K: return FG_CKPT_Q5_K;
    case CK_GGML_IQ4_NL: return FG_CKPT_IQ4_NL;
    case CK_GGML_IQ4_XS: return FG_CKPT_IQ4_XS;
    case CK_GGML_MXFP4: return FG_CKPT_MXFP4;
    default: return 0;
    }
}

/* Gemma's RMSNorms scale by 1 + w; convert_hf_to_gguf.py stores 1 + w (in F32) so that llama.cpp
 * scales by the weight: fg's table adds the 1 itself, so the import subtracts it back. */
static int norm_shifted(const char *arch, const char *hf)
{
    size_t n = strlen(hf);
    return arch && !strncmp(arch, "gemma", 5) && (!arch[5] || !strcmp(arch + 5, "2") ||
                                                  !strcmp(arch + 5, "3")) &&
           n >= 11 && !strcmp(hf + n - 11, "norm.weight");
}

/* One listed tensor: name, ggml tensor t's type and dims (in fg_ckpt's order), bytes [off,
 * off + bytes) of the file, its source ("blk.0.ffn_up_exps.weight[3] Q4_K") */
static int list_one(ck_list *out, const char *label, const char *name, const ck_gguf_ti *t,
                    uint8_t dt, uint32_t n_dims, const uint64_t *dims, uint64_t off,
                    uint64_t bytes, const char *part, float shift, fg_err *err)
{
    int rc = ck_list_add(out, name, strlen(name), dt, n_dims, dims, off, label, err);
    if (rc)
        return rc;
    fg_ckpt_tensor *o = &out->t[out->n - 1];
    o->length = bytes; /* (blocks: ck_list_add cannot size them) */
    o->shift = shift;
    char *src;
    if (asprintf(&src, "%s%s %s", t->name, part, ck_ggml_type_name(t->type)) < 0)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", label);
    o->source = src;
    return FG_OK;
}

/* A merged experts tensor [experts, rows, cols] as one [rows, cols] tensor per expert (each
 * expert's rows are contiguous in the file: ne[2] is the slowest-varying) */
static int list_experts(const ck_gguf *g, const ck_gguf_ti *t, uint8_t dt, const char *label,
                        ck_list *out, fg_err *err)
{
    uint64_t n_exp = t->ne[2], dims[2] = {t->ne[1], t->ne[0]}, each = t->bytes / n_exp;
    char hf[FG_CKPT_MAX_NAME + 64], part[32];
    if (n_exp > 4096)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor %s: %llu experts (limit 4096)", label,
                          t->name, (unsigned long long)n_exp);
    for (uint64_t e = 0; e < n_exp; e++) {
        if (!ck_gguf_expert_name(t->name, e, hf, sizeof hf))
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s: its expert name is too long",
                              label, t->name);
        snprintf(part, sizeof part, "[%llu]", (unsigned long long)e);
        int rc = list_one(out, label, hf, t, dt, 2, dims, g->data_off + t->offset + e * each,
                          each, part, 0, err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* gpt-oss's experts (GptOssModel): a layer's ffn_{gate,up,down}_exps.weight [experts, rows, cols]
 * and .bias [experts, rows] are the model table's stacked tensors as they lie
 * (model.layers.N.mlp.experts.gate_proj.weight [experts x rows, cols], ..._proj.bias [experts x
 * rows]): listed under those names, read in place. ffn_gate_up_exps (the converter's
 * --fuse-gate-up-exps) holds each expert's gate rows, then its up rows: listed as two such
 * tensors, each a view of every expert's half (runs of rows: fg_ckpt_tensor.run / stride). */
static const struct { const char *gguf, *hf[2]; } oss_experts[] = {
    {"ffn_gate_exps", {"gate_proj", NULL}}, {"ffn_up_exps", {"up_proj", NULL}},
    {"ffn_down_exps", {"down_proj", NULL}}, {"ffn_gate_up_exps", {"gate_proj", "up_proj"}},
};

/* *done 1 when t is one of oss_experts (listed, or refused by its shape) */
static int list_oss_experts(const ck_gguf *g, const ck_gguf_ti *t, uint8_t dt, const char *label,
                            ck_list *out, int *done, fg_err *err)
{
    size_t stem, at, k = sizeof oss_experts / sizeof oss_experts[0];
    const char *suf;
    unsigned long layer;
    *done = 0;
    if (!split_suffix(t->name, &stem, &suf) || !layer_of(t->name, &layer, &at) || at > stem)
        return FG_OK;
    for (size_t i = 0; i < sizeof oss_experts / sizeof oss_experts[0]; i++)
        k = piece_is(t->name, at, stem, oss_experts[i].gguf) ? i : k;
    if (k == sizeof oss_experts / sizeof oss_experts[0])
        return FG_OK;
    *done = 1;
    int bias = !strcmp(suf, ".bias");
    uint32_t parts = oss_experts[k].hf[1] ? 2 : 1, be = 1, bb = 1;
    uint64_t cols = bias ? 1 : t->ne[0], rows = bias ? t->ne[0] : t->ne[1];
    uint64_t n_exp = t->ne[t->n_dims - 1], each = rows / parts;
    ck_ggml_block(t->type, &be, &bb); /* (a type dtype_of reads: known) */
    if (t->n_dims != (bias ? 2u : 3u) || rows % parts || (each * cols) % be)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s must be [experts, rows%s]%s",
                          label, t->name, bias ? "" : ", cols", parts > 1 ? " with as many gate "
                          "as up rows, whole blocks each" : "");
    for (uint32_t p = 0; p < parts; p++) {
        char hf[FG_CKPT_MAX_NAME + 64];
        snprintf(hf, sizeof hf, "model.layers.%lu.mlp.experts.%s%s", layer, oss_experts[k].hf[p],
                 suf);
        uint64_t dims[2] = {n_exp * each, cols};
        int rc = list_one(out, label, hf, t, dt, bias ? 1 : 2, dims,
                          g->data_off + t->offset + p * each * cols / be * bb,
                          n_exp * each * cols / be * bb, parts < 2 ? "" : p ? "[up]" : "[gate]",
                          0, err);
        if (rc)
            return rc;
        if (parts > 1)
            out->t[out->n - 1].run = each * cols, out->t[out->n - 1].stride = rows * cols;
    }
    return FG_OK;
}

int ck_gguf_list(const ck_gguf *g, const char *label, ck_list *out, fg_err *err)
{
    const char *arch = ck_gguf_str(g, "general.architecture");
    for (uint32_t i = 0; i < g->n_ti; i++) {
        const ck_gguf_ti *t = &g->ti[i];
        uint8_t dt = dtype_of(t->type);
        if (!dt)
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s is %s, which fg does not "
                              "read yet (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. "
                              "Q6_K, IQ4_NL, IQ4_XS, MXFP4)", label, t->name,
                              ck_ggml_type_name(t->type));
        char hf[FG_CKPT_MAX_NAME + 64];
        int done = 0, rc = arch && !strcmp(arch, "gpt-oss")
                               ? list_oss_experts(g, t, dt, label, out, &done, err) : FG_OK;
        if (rc || done) {
            if (rc)
                return rc;
            continue;
        }
        if (t->n_dims == 3 && ck_gguf_expert_name(t->name, 0, hf, sizeof hf)) {
            if ((rc = list_experts(g, t, dt, label, out, err)))
                return rc;
            continue;
        }
        const char *name = ck_gguf_hf_name(arch, t->name, hf, sizeof hf) ? hf : t->name;
        uint64_t dims[CK_GGUF_MAX_DIMS];
        uint32_t nd = t->n_dims;
        for (uint32_t d = 0; d < nd; d++) /* ggml's ne[0] is the fastest-varying */
            dims[d] = t->ne[nd - 1 - d];
        size_t len = strlen(name), sg = strlen(".shared_expert_gate.weight");
        if (nd == 1 && len > sg && !strcmp(name + len - sg, ".shared_expert_gate.weight"))
            dims[1] = dims[0], dims[0] = 1, nd = 2; /* [1, hidden], squeezed by the converter */
        rc = list_one(out, label, name, t, dt, nd, dims, g->data_off + t->offset, t->bytes, "",
                      norm_shifted(arch, name) ? 1.0f : 0.0f, err);
        if (rc)
            return rc;
        if (!strcmp(name, "rope_freqs.weight") || !strcmp(name, "rope_factors_long.weight") ||
            !strcmp(name, "rope_factors_short.weight")) /* rope factors: read by the config */
            out->t[out->n - 1].is_scale = 1;
    }
    return FG_OK;
}

/* Elements [first, first + n) of F32/F16/BF16 tensor i as floats into f */
static int read_floats(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint8_t *raw,
                       float *f, fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    int rc = fg_ckpt_read(ck, i, first, n, raw, err);
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) {
        uint32_t b = t->dtype == FG_CKPT_F32 ? fg_le32(raw + 4 * k) : fg_le16(raw + 2 * k);
        if (t->dtype == FG_CKPT_F32)
            memcpy(&f[k], &b, 4);
        else
            f[k] = t->dtype == FG_CKPT_BF16 ? fg_ckpt_bf16_to_f32((uint16_t)b)
                                            : fg_f16_to_f32_1((uint16_t)b);
    }
    return rc;
}

int ck_gguf_read_f16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     void **scratch, size_t *cap, fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    uint32_t be, bb;
    if (!ck_dtype_block(t->dtype, &be, &bb) ||
        (!ck_dtype_is_block(t->dtype) && t->dtype != FG_CKPT_F32 && t->dtype != FG_CKPT_F16 &&
         t->dtype != FG_CKPT_BF16))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s", t->path,
                          t->name, fg_ckpt_dtype_name(t->dtype));
    uint64_t b0 = first / be, b1 = (first + n + be - 1) / be, nb = b1 - b0;
    size_t need = (size_t)(((nb * bb + 3) & ~3ull) + nb * be * sizeof(float));
    if (*cap < need) {
        void *p = realloc(*scratch, need);
        if (!p)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", t->name);
        *scratch = p, *cap = need;
    }
    uint8_t *raw = *scratch;
    float *f = (float *)(void *)(raw + ((nb * bb + 3) & ~3ull)); /* (aligned for floats) */
    int rc = ck_dtype_is_block(t->dtype) ? fg_ckpt_read(ck, i, b0 * be, nb * be, raw, err)
                                         : read_floats(ck, i, first, n, raw, f, err);
    if (rc)
        return rc;
    if (ck_dtype_is_block(t->dtype))
        ck_gguf_dequant(t->dtype, raw, nb, f);
    f += first - b0 * be;
    for (uint64_t k = 0; t->shift != 0 && k < n; k++)
        f[k] -= t->shift; /* (binary32, as the converter's 1 + w was: exact for |w| >= 2^-16) */
    size_t bad = 0;
    if (t->dtype == FG_CKPT_MXFP4) /* every MXFP4 value is a BF16 (2 bits, E8M0's exponents) */
        for (; bad < n && isfinite(f[bad]); bad++) {
            uint32_t b;
            memcpy(&b, &f[bad], 4);
            out[bad] = (uint16_t)(b >> 16);
        }
    if (t->dtype == FG_CKPT_MXFP4 ? bad < n
                                  : fg_ckpt_to_f16(FG_CKPT_F32, f, (size_t)n, out, &bad) != 0)
        return fg_err_set(err, FG_ERR_NONFINITE, "%s: tensor '%s' element %llu is not finite in "
                          "%s", t->path, t->name, (unsigned long long)(first + bad),
                          t->dtype == FG_CKPT_MXFP4 ? "BF16" : "F16");
    return FG_OK;
}

/* ---- deepseek2's kv_b_proj from attn_k_b and attn_v_b ---- */

/* The index of listed entry "blk.<layer>.<piece>.weight", or UINT32_MAX */
static uint32_t find_listed(const ck_list *l, unsigned long layer, const char *piece)
{
    char want[64];
    snprintf(want, sizeof want, "blk.%lu.%s.weight", layer, piece);
    for (uint32_t i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, want))
            return i;
    return UINT32_MAX;
}

int ck_gguf_join(const ck_gguf *g, ck_list *l, const char *label, fg_err *err)
{
    const char *arch = ck_gguf_str(g, "general.architecture");
    if (!arch || strcmp(arch, "deepseek2"))
        return FG_OK;
    for (uint32_t i = 0; i < l->n; i++) {
        fg_ckpt_tensor *t = &l->t[i];
        unsigned long layer;
        size_t at, stem;
        const char *suf;
        if (!split_suffix(t->name, &stem, &suf) || !layer_of(t->name, &layer, &at) ||
            !(piece_is(t->name, at, stem, "attn_k_b") || piece_is(t->name, at, stem, "attn_v_b")))
            continue;
        int is_k = piece_is(t->name, at, stem, "attn_k_b");
        if (!is_k && t->is_scale)
            continue; /* (joined from its k_b already) */
        uint32_t o = find_listed(l, layer, is_k ? "attn_v_b" : "attn_k_b");
        if (o == UINT32_MAX || strcmp(suf, ".weight"))
            return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %s without blk.%lu.%s.weight",
                              label, t->name, layer, is_k ? "attn_v_b" : "attn_k_b");
        fg_ckpt_tensor *v = &l->t[o];
        if (!is_k) /* a v_b listed before its k_b: joined from there */
            t = &l->t[o], v = &l->t[i];
        /* k_b [heads, kv_lora, nope], v_b [heads, v, kv_lora] (dims slowest first) */
        if (t->n_dims != 3 || v->n_dims != 3 || t->dims[0] != v->dims[0] ||
            t->dims[1] != v->dims[2] || !t->dims[0] || !t->dims[1] || !t->dims[2] ||
            !v->dims[1] || t->dims[2] + v->dims[1] > UINT32_MAX)
            return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensors %s and %s are not [heads, "
                              "kv_lora, nope] and [heads, v, kv_lora]", label, t->name, v->name);
        if (ck_gguf_bf16(t->dtype) != ck_gguf_bf16(v->dtype))
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensors %s (%s) and %s (%s): BF16 "
                              "beside another type cannot be joined into one kv_b_proj", label,
                              t->name, fg_ckpt_dtype_name(t->dtype), v->name,
                              fg_ckpt_dtype_name(v->dtype));
        char hf[96], *src;
        snprintf(hf, sizeof hf, "model.layers.%lu.self_attn.kv_b_proj.weight", layer);
        char *name = strdup(hf);
        if (!name || asprintf(&src, "%s + %s", t->source, v->source) < 0) {
            free(name);
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", label);
        }
        uint64_t heads = t->dims[0], kvl = t->dims[1], nope = t->dims[2], vd = v->dims[1];
        if (t->source != t->name)
            free((char *)t->source);
        free((char *)t->name);
        t->name = name;
        t->source = src;
        t->join = o + 1;
        t->join_nope = (uint32_t)nope;
        t->join_v = (uint32_t)vd;
        t->n_dims = 2;
        t->dims[0] = heads * (nope + vd);
        t->dims[1] = kvl;
        t->dims[2] = 0;
        t->n_elements = t->dims[0] * kvl;
        v->is_scale = 1;
    }
    return FG_OK;
}

int ck_gguf_bf16(uint8_t dtype)
{
    return dtype == FG_CKPT_BF16 || dtype == FG_CKPT_MXFP4;
}

/* n elements from first of entry i as out's 16-bit values: raw bits for BF16, else
 * ck_gguf_read_f16's */
static int read16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                  void **scratch, size_t *cap, fg_err *err)
{
    if (fg_ckpt_tensor_at(ck, i)->dtype == FG_CKPT_BF16)
        return fg_ckpt_read(ck, i, first, n, out, err);
    return ck_gguf_read_f16(ck, i, first, n, out, scratch, cap, err);
}

int ck_gguf_read_kvb(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    uint64_t kvl = t->dims[1], nope = t->join_nope, vd = t->join_v, per = nope + vd;
    if (first % kvl || n % kvl || first + n > t->n_elements)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: tensor %s: elements [%llu, +%llu) are not "
                          "whole rows", t->path, t->name, (unsigned long long)first,
                          (unsigned long long)n);
    /* (entry i read by k_b's own element order: its first H x kv_lora x nope elements, fewer than
     * the joined count its bounds are checked against) */
    uint16_t *head = malloc(kvl * nope * sizeof *head);
    void *scratch = NULL;
    size_t cap = 0;
    int rc = head ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", t->name);
    uint64_t loaded = UINT64_MAX;
    for (uint64_t r = first / kvl; rc == FG_OK && r < (first + n) / kvl; r++) {
        uint64_t h = r / per, j = r % per;
        uint16_t *row = out + (r - first / kvl) * kvl;
        if (j >= nope) { /* v_b[h][j - nope][:] */
            rc = read16(ck, t->join - 1, (h * vd + j - nope) * kvl, kvl, row, &scratch, &cap, err);
            continue;
        }
        if (loaded != h) /* k_b[h]: [kv_lora, nope], its column j is the row */
            rc = read16(ck, i, h * kvl * nope, kvl * nope, head, &scratch, &cap, err);
        loaded = h;
        for (uint64_t c = 0; rc == FG_OK && c < kvl; c++)
            row[c] = head[c * nope + j];
    }
    free(head);
    free(scratch);
    return rc;
}

/* ---- split files (llama.cpp's gguf-split and gguf-py: "<prefix>-00001-of-00003.gguf") ---- */

/* The 5 digits at s as a number, or -1 */
static long digits5(const char *s)
{
    long v = 0;
    for (int i = 0; i < 5; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

int ck_gguf_split_name(const char *path, uint32_t *part, uint32_t *count)
{
    size_t n = strlen(path);
    const char *t = n >= 20 ? path + n - 20 : NULL; /* "-KKKKK-of-NNNNN.gguf" */
    if (!t || t[0] != '-' || memcmp(t + 6, "-of-", 4) || strcmp(t + 15, ".gguf"))
        return 0;
    long k = digits5(t + 1), c = digits5(t + 10);
    if (k < 1 || c < 1 || k > c)
        return 0;
    *part = (uint32_t)k, *count = (uint32_t)c;
    return 1;
}

char *ck_gguf_split_path(const char *first, uint32_t part)
{
    char *p = strdup(first);
    if (p) {
        char *d = p + strlen(p) - 19;
        for (int i = 4; i >= 0; i--, part /= 10)
            d[i] = (char)('0' + part % 10);
    }
    return p;
}

int ck_gguf_split_check(const ck_gguf *g, const char *label, uint32_t i, uint32_t count,
                        fg_err *err)
{
    uint64_t no, n;
    int has_no = ck_gguf_uint(g, "split.no", &no) == FG_OK;
    int has_n = ck_gguf_uint(g, "split.count", &n) == FG_OK;
    if (count == 1 && (!has_n || n <= 1))
        return FG_OK;
    if (count == 1)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: metadata split.count is %llu: a part of a "
                          "split GGUF file, but not named <prefix>-00001-of-%05llu.gguf", label,
                          (unsigned long long)n, (unsigned long long)n);
    if (!has_no || !has_n || no != i || n != count)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: metadata split.no / split.count are not %u / "
                          "%u (part %u of %u by its name)", label, i, count, i + 1, count);
    return FG_OK;
}

int ck_gguf_split_total(const ck_gguf *g, const char *label, uint32_t n, fg_err *err)
{
    uint64_t want;
    if (ck_gguf_uint(g, "split.tensors.count", &want) == FG_OK && want != n)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: metadata split.tensors.count is %llu, the "
                          "parts hold %u tensors", label, (unsigned long long)want, n);
    return FG_OK;
}
