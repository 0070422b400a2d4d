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
 * - Types: F32, F16 and BF16 are listed as such (copied bit for bit, as from safetensors);
 *   Q8_0, Q4_0, Q4_K and Q6_K as FG_CKPT_Q8_0 ... Q6_K, whose blocks ck_gguf_read_f16
 *   dequantizes exactly as ggml's reference (f32 products of the F16 scales and the integers)
 *   and rounds to F16 (to nearest even: at most half an F16 ulp, 2^-11 relative, far below the
 *   quantization step; Q4_0's values are exact). Other ggml types are refused at open, naming
 *   the tensor and its type.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fg_file.h"
#include "gguf.h"

/* GGUF name pieces -> Hugging Face's, per layer ("blk.N.<gguf>" -> "model.layers.N.<hf>") */
static const struct { const char *gguf, *hf; } layer_names[] = {
    {"attn_norm", "input_layernorm"},        {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},          {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},     {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},           {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
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

int ck_gguf_hf_name(const char *name, char *out, size_t cap)
{
    size_t stem;
    const char *suf;
    if (!split_suffix(name, &stem, &suf))
        return 0;
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (strlen(top_names[i].gguf) == stem && !strncmp(name, top_names[i].gguf, stem))
            return snprintf(out, cap, "%s%s", top_names[i].hf, suf) < (int)cap;
    if (strncmp(name, "blk.", 4) || !isdigit((unsigned char)name[4]) ||
        (name[4] == '0' && name[5] != '.'))
        return 0;
    const char *p = name + 4;
    unsigned long layer = 0; /* decimal, no sign or leading zero, at most 2^20 */
    while (isdigit((unsigned char)*p) && layer <= (1ul << 20))
        layer = layer * 10 + (unsigned long)(*p++ - '0');
    if (*p != '.' || layer > (1ul << 20))
        return 0;
    size_t at = (size_t)(p + 1 - name);
    if (at > stem)
        return 0;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (strlen(layer_names[i].gguf) == stem - at &&
            !strncmp(name + at, layer_names[i].gguf, stem - at))
            return snprintf(out, cap, "model.layers.%lu.%s%s", layer, layer_names[i].hf, suf) <
                   (int)cap;
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
    default: return 0;
    }
}

int ck_gguf_list(const ck_gguf *g, const char *label, ck_list *out, fg_err *err)
{
    for (uint32_t i = 0; i < g->n_ti; i++) {
        const ck_gguf_ti *t = &g->ti[i];
        uint8_t dt = dtype_of(t->type);
        if (!dt)
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s is %s, which fg does not "
                              "read yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)", label, t->name,
                              ck_ggml_type_name(t->type));
        char hf[FG_CKPT_MAX_NAME + 64];
        const char *name = ck_gguf_hf_name(t->name, hf, sizeof hf) ? hf : t->name;
        uint64_t dims[CK_GGUF_MAX_DIMS];
        for (uint32_t d = 0; d < t->n_dims; d++) /* ggml's ne[0] is the fastest-varying */
            dims[d] = t->ne[t->n_dims - 1 - d];
        int rc = ck_list_add(out, name, strlen(name), dt, t->n_dims, dims, g->data_off + t->offset,
                             label, err);
        if (rc)
            return rc;
        fg_ckpt_tensor *o = &out->t[out->n - 1];
        o->length = t->bytes; /* (blocks: ck_list_add cannot size them) */
        char *src;
        if (asprintf(&src, "%s %s", t->name, ck_ggml_type_name(t->type)) < 0)
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", label);
        o->source = src;
    }
    return FG_OK;
}

int ck_gguf_read_f16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     void **scratch, size_t *cap, fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    uint32_t be, bb;
    ck_dtype_block(t->dtype, &be, &bb);
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
    int rc = fg_ckpt_read(ck, i, b0 * be, nb * be, raw, err);
    if (rc)
        return rc;
    switch (t->dtype) {
    case FG_CKPT_Q8_0: ck_gguf_dequant_q8_0(raw, nb, f); break;
    case FG_CKPT_Q4_0: ck_gguf_dequant_q4_0(raw, nb, f); break;
    case FG_CKPT_Q4_K: ck_gguf_dequant_q4_k(raw, nb, f); break;
    default: ck_gguf_dequant_q6_k(raw, nb, f); break;
    }
    size_t bad = 0;
    if (fg_ckpt_to_f16(FG_CKPT_F32, f + (first - b0 * be), (size_t)n, out, &bad))
        return fg_err_set(err, FG_ERR_NONFINITE, "%s: tensor '%s' element %llu is not finite in "
                          "F16", t->path, t->name, (unsigned long long)(first + bad));
    return FG_OK;
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
