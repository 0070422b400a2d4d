/* test_model.c - model/'s table: config.json parsing (strict, errors name the key), the tensor
 * sets a config implies, canonical names, and checkpoints checked against them (convert/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "fg_bytes.h"
#include "convert_int.h"
#include "model.h"
#include "testutil.h"

static const char *fx(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", FG_CKPT_FIXTURES, name);
    return buf;
}

static fg_ckpt *open_ok(const char *name)
{
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx(name), &ck, &err) == FG_OK, "%s: %s", name, err.msg);
    return ck;
}

static void load_cfg(const char *name, fg_hparams *c)
{
    char p[1100];
    fg_err err;
    snprintf(p, sizeof p, "%s/config.json", fx(name));
    ck_assert_msg(fg_model_config_load(p, c, &err) == FG_OK, "%s", err.msg);
}

static void check_opt(const char *name, int want, const char *needle)
{
    fg_hparams c;
    load_cfg(name, &c);
    fg_ckpt *ck = open_ok(name);
    fgc_source *from = calloc((size_t)fg_model_n_units(&c) * FG_UNIT_MAX_TENSORS, sizeof *from);
    fg_err err;
    int rc = fg_convert_check_ckpt(&c, ck, from, NULL, &err);
    ck_assert_msg(rc == want, "%s: %d %s", name, rc, err.msg);
    if (needle)
        ck_assert_msg(strstr(err.msg, needle) != NULL, "%s: '%s' lacks '%s'", name, err.msg, needle);
    if (rc == FG_OK) { /* each spec comes from the tensor of its canonical name, or is absent */
        fg_tensor_spec *spec;
        uint32_t n, used = 0;
        ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
        for (uint32_t s = 0; s < n; s++) {
            char buf[128];
            if (from[s].index == FGC_NONE) {
                ck_assert_msg(spec[s].optional, "%s missing", spec[s].name);
                continue;
            }
            used++;
            ck_assert_uint_lt(from[s].index, fg_ckpt_count(ck));
            ck_assert_uint_eq(from[s].row0, 0);
            ck_assert_str_eq(fg_arch_find("opt")->canonical_name(
                                 fg_ckpt_tensor_at(ck, from[s].index)->name, buf, sizeof buf),
                             spec[s].name);
        }
        ck_assert_uint_eq(used, fg_ckpt_count(ck));
        free(spec);
    }
    free(from);
    fg_ckpt_close(ck);
}

START_TEST(opt_configs_and_tensor_sets)
{
    fg_hparams c;
    load_cfg("opt_tiny", &c);
    ck_assert_uint_eq(c.vocab_size, 16);
    ck_assert_uint_eq(c.hidden, 8);
    ck_assert_uint_eq(c.embed_dim, 8);
    ck_assert_int_eq(c.pre_norm, 1);
    ck_assert_int_eq(c.eos_id, 2);
    ck_assert_int_eq(c.pad_id, 1);
    ck_assert_str_eq(c.dtype, "float32");
    fg_tensor_spec *spec;
    uint32_t n;
    fg_err err;
    ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
    ck_assert_uint_eq(n, 2 + 2 + 2 * 16 + 1);
    ck_assert_str_eq(spec[1].name, "model.decoder.embed_positions.weight");
    ck_assert_uint_eq(spec[1].dims[0], 8 + 2);
    ck_assert_int_eq(spec[n - 1].optional, 1);
    free(spec);
    load_cfg("opt_tiny_350m", &c);
    ck_assert_uint_eq(c.embed_dim, 4);
    ck_assert_int_eq(c.pre_norm, 0);
    ck_assert_int_eq(fg_model_tensors(&c, &spec, &n, &err), FG_OK);
    ck_assert_uint_eq(n, 2 + 2 + 2 * 16 + 1); /* project_in/out, no final layer norm */
    uint32_t po = 0; /* project_out [proj, hidden] */
    while (po < n && strcmp(spec[po].name, "model.decoder.project_out.weight"))
        po++;
    ck_assert_uint_lt(po, n);
    ck_assert_uint_eq(spec[po].dims[0], 4);
    ck_assert_uint_eq(spec[po].dims[1], 8);
    free(spec);

    check_opt("opt_tiny", FG_OK, NULL);
    check_opt("opt_tiny_np", FG_OK, NULL);
    check_opt("opt_tiny_350m", FG_OK, NULL);
    check_opt("opt_tiny_350m_np", FG_OK, NULL);
    check_opt("opt_tiny_badshape", FG_ERR_SIZE_MISMATCH,
              "tensor model.decoder.layers.1.fc1.weight has shape [16, 7], config.json implies "
              "[16, 8]");
    check_opt("opt_tiny_extra", FG_ERR_BAD_NAME,
              "tensor model.decoder.project_in.weight is not an OPT tensor for this config.json");
    check_opt("opt_tiny_missing", FG_ERR_NOT_FOUND,
              "tensor model.decoder.layers.0.self_attn.k_proj.bias (required by config.json) is "
              "missing");
}
END_TEST

static void cfg_fail(const char *json, int code, const char *needle)
{
    fg_hparams c;
    fg_err err;
    int rc = fg_model_config_parse(json, strlen(json), "x/config.json", &c, &err);
    ck_assert_msg(rc == code, "%s: %d %s", json, rc, err.msg);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

START_TEST(opt_config_errors)
{
#define BASE "\"model_type\":\"opt\",\"vocab_size\":16,\"num_hidden_layers\":2,\"ffn_dim\":16," \
             "\"num_attention_heads\":2,\"max_position_embeddings\":8"
    fg_hparams c;
    fg_err err;
    const char *ok = "{" BASE ",\"hidden_size\":8}";
    ck_assert_int_eq(fg_model_config_parse(ok, strlen(ok), NULL, &c, &err), FG_OK);
    ck_assert_uint_eq(c.embed_dim, 8);
    ck_assert_int_eq(c.qkv_bias, 1);
    ck_assert_int_eq(c.tied_head, 1);
    cfg_fail("{" BASE "}", FG_ERR_CORRUPT, "x/config.json: key hidden_size: missing");
    cfg_fail("{" BASE ",\"hidden_size\":\"8\"}", FG_ERR_CORRUPT, "key hidden_size: must be an integer");
    cfg_fail("{" BASE ",\"hidden_size\":9}", FG_ERR_CORRUPT, "key num_attention_heads: does not divide");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"activation_function\":\"silu\"}", FG_ERR_UNSUPPORTED,
             "key activation_function: is \"silu\"; fg supports \"relu\", \"gelu\"");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"enable_bias\":1}", FG_ERR_CORRUPT,
             "key enable_bias: must be true or false");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"layer_norm_elementwise_affine\":false}",
             FG_ERR_UNSUPPORTED, "key layer_norm_elementwise_affine: false");
    cfg_fail("{\"model_type\":\"gpt2\"}", FG_ERR_UNSUPPORTED, "key model_type");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"hidden_size\":8}", FG_ERR_CORRUPT, "invalid JSON");
    cfg_fail("[1]", FG_ERR_CORRUPT, "not a JSON object");
    cfg_fail("{" BASE ",\"hidden_size\":8,\"torch_dtype\":\"int8\"}", FG_ERR_CORRUPT, "torch_dtype");
#undef BASE
}
END_TEST

START_TEST(canonical_names)
{
    const fg_arch *opt = fg_arch_find("opt");
    char b[96];
    ck_assert_str_eq(opt->canonical_name("decoder.layer_norm.weight", b, sizeof b),
                     "model.decoder.final_layer_norm.weight");
    ck_assert_str_eq(opt->canonical_name("decoder.layers.3.fc1.bias", b, sizeof b),
                     "model.decoder.layers.3.fc1.bias");
    ck_assert_str_eq(opt->canonical_name("model.decoder.final_layer_norm.bias", b, sizeof b),
                     "model.decoder.final_layer_norm.bias");
    ck_assert_str_eq(opt->canonical_name("lm_head.weight", b, sizeof b), "lm_head.weight");
    ck_assert_ptr_null(opt->canonical_name("decoder.layers.3.fc1.bias", b, 8));
}
END_TEST

/* generation_config.json's eos_token_id replaces config.json's stop set when present and not null;
 * a malformed one is refused naming the key, and leaves the config as it was. */
START_TEST(generation_config_eos)
{
    const char *cfg = "{\"model_type\":\"llama\",\"vocab_size\":64,\"hidden_size\":32,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                      "\"num_attention_heads\":4,\"max_position_embeddings\":64,"
                      "\"eos_token_id\":[5,6]}";
    fg_hparams c;
    fg_err err;
    ck_assert_int_eq(fg_model_config_parse(cfg, strlen(cfg), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 2 && c.eos_ids[1] == 6);
    const char *keep[] = {"{}", "{\"eos_token_id\":null,\"do_sample\":true}"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(fg_model_generation_config_parse(keep[i], strlen(keep[i]), NULL, &c, &err),
                         FG_OK);
        ck_assert(c.n_eos == 2 && c.eos_ids[0] == 5 && c.eos_id == 5);
    }
    const char *list = "{\"eos_token_id\":[9,10,11],\"temperature\":0.6}";
    ck_assert_int_eq(fg_model_generation_config_parse(list, strlen(list), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 3 && c.eos_ids[2] == 11 && c.eos_id == 9);
    const char *one = "{\"eos_token_id\":12}";
    ck_assert_int_eq(fg_model_generation_config_parse(one, strlen(one), NULL, &c, &err), FG_OK);
    ck_assert(c.n_eos == 1 && c.eos_id == 12);
    const char *bad[] = {"{\"eos_token_id\":\"x\"}", "{\"eos_token_id\":[1,null]}", "[1]", "{",
                         "{\"eos_token_id\":[]}"};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_ne(fg_model_generation_config_parse(bad[i], strlen(bad[i]), NULL, &c, &err),
                         FG_OK);
        ck_assert_msg(strstr(err.msg, "generation_config.json"), "%s", err.msg);
        ck_assert(c.n_eos == 1 && c.eos_id == 12);
    }
}
END_TEST

static const char k_llama_cfg[] = "{\"model_type\":\"llama\",\"vocab_size\":16,"
                                 "\"hidden_size\":8,\"num_hidden_layers\":2,"
                                 "\"intermediate_size\":8,\"num_attention_heads\":2,"
                                 "\"max_position_embeddings\":32}";

/* A checkpoint written here as safetensors (config cfg): every tensor config.json implies
 * (zeros) but those whose names hold one of omit[] (NULL-terminated; NULL: none), and extra tensors
 * extra[0..n_extra): "NAME" 1-D F32 of extra_len elements, "NAME@D0xD1" 2-D F16,
 * "NAME@D0xD1xD2" 3-D F16. */
static const char *write_ckpt(const char *dir, const char *cfg, const char *const *omit,
                              const char *const *extra, uint32_t n_extra, uint64_t extra_len,
                              fg_hparams *c)
{
    char p[4096];
    fg_err err;
    snprintf(p, sizeof p, "%s", tu_path(dir));
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/config.json", tu_path(dir));
    FILE *f = fopen(p, "w");
    ck_assert(f && fputs(cfg, f) >= 0 && fclose(f) == 0);
    ck_assert_int_eq(fg_model_config_parse(cfg, strlen(cfg), NULL, c, &err), FG_OK);
    fg_tensor_spec *spec;
    uint32_t n;
    ck_assert_int_eq(fg_model_tensors(c, &spec, &n, &err), FG_OK);
    char *hdr = malloc(1 << 16);
    size_t k = (size_t)sprintf(hdr, "{");
    uint64_t off = 0;
    for (uint32_t i = 0; i < n + n_extra; i++) { /* the model's F16, the extras F32 */
        char name[128];
        snprintf(name, sizeof name, "%s", i < n ? spec[i].name : extra[i - n]);
        char *at = strchr(name, '@'), *u8 = strstr(name, ":U8"); /* name@AxB[xC[xD]][:U8] */
        unsigned long long e0 = 0, e1 = 0, e2 = 0, e3 = 0;
        if (at && sscanf(at + 1, "%llux%llux%llux%llu", &e0, &e1, &e2, &e3) >= 2)
            *at = 0;
        int drop = 0;
        for (const char *const *o = omit; i < n && o && *o; o++)
            drop |= strstr(name, *o) != NULL;
        if (drop)
            continue;
        int two = (i < n && spec[i].n_dims == 2) || e1, f16 = i < n || e1;
        uint64_t d0 = i < n ? spec[i].dims[0] : e1 ? e0 : extra_len;
        uint64_t d1 = i < n ? (two ? spec[i].dims[1] : 1) : e1 ? e1 : 1;
        uint64_t bytes = d0 * d1 * (e2 ? e2 : 1) * (e3 ? e3 : 1) * (u8 ? 1 : f16 ? 2 : 4);
        char shape[80];
        snprintf(shape, sizeof shape, e3 ? "%llu,%llu,%llu,%llu" : e2 ? "%llu,%llu,%llu"
                                      : two ? "%llu,%llu" : "%llu",
                 (unsigned long long)d0, (unsigned long long)d1, e2, e3);
        k += (size_t)sprintf(hdr + k, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],"
                             "\"data_offsets\":[%llu,%llu]}", k > 1 ? "," : "", name,
                             u8 ? "U8" : f16 ? "F16" : "F32", shape, (unsigned long long)off,
                             (unsigned long long)(off + bytes));
        off += bytes;
    }
    k += (size_t)sprintf(hdr + k, "}");
    snprintf(p, sizeof p, "%s/model.safetensors", tu_path(dir));
    f = fopen(p, "wb");
    uint8_t hl[8];
    fg_put64(hl, k);
    char *zeros = calloc(1, off + 1);
    ck_assert(f && fwrite(hl, 8, 1, f) == 1 && fwrite(hdr, 1, k, f) == k &&
              fwrite(zeros, 1, off, f) == off && fclose(f) == 0);
    free(zeros);
    free(hdr);
    free(spec);
    return tu_path(dir);
}

/* write_ckpt, then the check of the checkpoint against its config (src and skips may be NULL) */
static int check_written(const char *dir, const char *cfg, const char *const *omit,
                         const char *const *extra, uint32_t n_extra, uint64_t len,
                         fgc_source *src, fgc_skips *skips, fg_err *err)
{
    fg_hparams c;
    const char *path = write_ckpt(dir, cfg, omit, extra, n_extra, len, &c);
    fg_ckpt *ck;
    ck_assert_msg(fg_ckpt_open(path, &ck, err) == FG_OK, "%s", err->msg);
    int rc = fg_convert_check_ckpt(&c, ck, src, skips, err);
    fg_ckpt_close(ck);
    return rc;
}

static int check_llama(const char *dir, const char *const *extra, uint32_t n_extra,
                       uint64_t len, uint32_t *skipped, fg_err *err)
{
    fgc_skips sk = {0, 0};
    int rc = check_written(dir, k_llama_cfg, NULL, extra, n_extra, len, NULL, &sk, err);
    *skipped = sk.derived;
    ck_assert_uint_eq(sk.unused, 0);
    return rc;
}

/* Llama 2's hub checkpoints carry each layer's rotary_emb.inv_freq (transformers < 4.31 saved
 * the buffer): accepted with its shape checked ([head_dim / 2]) and skipped; the same name for a
 * layer the config does not have, or spelled otherwise, is an unexpected tensor. */
START_TEST(llama_inv_freq_buffers)
{
    tu_tmpdir_create();
    static const char *const two[] = {"model.layers.0.self_attn.rotary_emb.inv_freq",
                                      "layers.1.self_attn.rotary_emb.inv_freq"};
    static const char *const past[] = {"model.layers.2.self_attn.rotary_emb.inv_freq"};
    static const char *const zero[] = {"model.layers.01.self_attn.rotary_emb.inv_freq"};
    static const char *const other[] = {"model.layers.0.self_attn.rotary_emb.cos_cached"};
    uint32_t skipped;
    fg_err err;
    ck_assert_int_eq(check_llama("ok", two, 2, 2, &skipped, &err), FG_OK);
    ck_assert_uint_eq(skipped, 2);
    ck_assert_int_eq(check_llama("shape", two, 2, 4, &skipped, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.self_attn.rotary_emb.inv_freq has shape "
                         "[4], config.json implies [2]"), "%s", err.msg);
    ck_assert_int_eq(check_llama("past", past, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "layers.2.self_attn.rotary_emb.inv_freq is not a Llama"), "%s",
                  err.msg);
    ck_assert_int_eq(check_llama("zero", zero, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    ck_assert_int_eq(check_llama("other", other, 1, 2, &skipped, &err), FG_ERR_BAD_NAME);
    tu_tmpdir_remove();
}
END_TEST

/* Phi-3's fused qkv_proj [q + 2 kv rows, hidden] and gate_up_proj [2 ffn, hidden] are taken
 * apart: each part from its rows; a wrong row count is named with the shape the parts add up
 * to; the same projection fused and split is a second spelling; a fused tensor of a layer the
 * config does not have is not a Phi-3 tensor. */
static int check_phi3(const char *dir, const char *const *omit, const char *const *extra,
                      uint32_t n, fgc_source *src, fg_err *err)
{
    static const char cfg[] = "{\"model_type\":\"phi3\",\"vocab_size\":16,\"hidden_size\":8,"
                              "\"num_hidden_layers\":1,\"intermediate_size\":6,"
                              "\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                              "\"max_position_embeddings\":32}";
    return check_written(dir, cfg, omit, extra, n, 0, src, NULL, err);
}

START_TEST(phi3_fused_tensors)
{
    tu_tmpdir_create();
    static const char *const fused[] = {"model.layers.0.self_attn.qkv_proj.weight@16x8",
                                        "model.layers.0.mlp.gate_up_proj.weight@12x8"};
    static const char *const short_qkv[] = {"model.layers.0.self_attn.qkv_proj.weight@15x8",
                                            "model.layers.0.mlp.gate_up_proj.weight@12x8"};
    static const char *const past[] = {"model.layers.0.self_attn.qkv_proj.weight@16x8",
                                       "model.layers.0.mlp.gate_up_proj.weight@12x8",
                                       "model.layers.1.mlp.gate_up_proj.weight@12x8"};
    static const char *const split[] = {".q_proj", ".k_proj", ".v_proj", ".gate_proj", ".up_proj",
                                        NULL};
    static const char *const split_up[] = {".q_proj", ".k_proj", ".v_proj", ".gate_proj", NULL};
    fgc_source src[16];
    fg_err err;
    /* q 8 rows, k 4, v 4 (2 heads, 1 KV head, head_dim 4); gate 6, up 6; the specs in the
     * model's order: embed | norm, q, k, v, o | norm, gate, up, down | norm, lm_head */
    ck_assert_int_eq(check_phi3("ok", split, fused, 2, src, &err), FG_OK);
    ck_assert(src[2].index == src[3].index && src[3].index == src[4].index);
    ck_assert(src[2].row0 == 0 && src[3].row0 == 8 && src[4].row0 == 12 && src[5].row0 == 0);
    ck_assert(src[7].index == src[8].index && src[7].row0 == 0 && src[8].row0 == 6);
    ck_assert(src[7].index != src[2].index && src[5].index != src[2].index);
    ck_assert_int_eq(check_phi3("split", NULL, NULL, 0, src, &err), FG_OK); /* stored apart */
    ck_assert(src[3].row0 == 0 && src[3].index != src[2].index);
    ck_assert_int_eq(check_phi3("rows", split, short_qkv, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.self_attn.qkv_proj.weight has shape "
                         "[15, 8], config.json implies [16, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_phi3("twice", split_up, fused, 2, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "is a second spelling of model.layers.0.mlp.up_proj.weight"),
                  "%s", err.msg);
    ck_assert_int_eq(check_phi3("past", split, past, 3, NULL, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "layers.1.mlp.gate_up_proj.weight is not a Phi-3 tensor"), "%s",
                  err.msg);
    tu_tmpdir_remove();
}
END_TEST

/* A mixture's experts, one checkpoint tensor per expert and projection, are the blocks of one
 * stacked tensor each: every block present once with an expert's shape; a missing one is named
 * by its block, the whole tensor beside its blocks is a second spelling. */
static int check_moe(const char *dir, const char *const *omit, const char *const *extra,
                     uint32_t n, fgc_source *src, fg_err *err)
{
    static const char cfg[] = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":16,\"hidden_size\":8,"
                              "\"num_hidden_layers\":1,\"intermediate_size\":6,"
                              "\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                              "\"head_dim\":4,\"max_position_embeddings\":32,"
                              "\"num_experts\":2,\"num_experts_per_tok\":1,"
                              "\"moe_intermediate_size\":4}";
    return check_written(dir, cfg, omit, extra, n, 0, src, NULL, err);
}

/* Every expert of a layer in one tensor, [experts, rows, cols] (GraniteMoE's input_linear and
 * output_linear, transformers 5's mlp.experts.gate_up_proj / down_proj): block e of each stacked
 * spec comes from its rows e * rows + (the parts before it); a wrong shape, the same experts
 * also one by one, or a missing down are one line each. */
/* gpt-oss: GptOssConfig's defaults (q/k/v/o biases, sinks, every other layer sliding at 128,
 * YaRN factor 32 over 4096 positions untruncated, theta 150000, 128 experts top 4 renormalized
 * with biases, the clamped SwiGLU 1.702 / 7); its experts as transformers holds them, x . W:
 * gate_up_proj [experts, hidden, 2 x width] with gate and up columns alternating, read strided;
 * the untransposed shape refused by its shape. */
START_TEST(gpt_oss_experts)
{
    fg_hparams c;
    fg_err err;
    fg_tensor_spec t[FG_UNIT_MAX_TENSORS];
    const char *d = "{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":16,\"max_position_embeddings\":131072}";
    ck_assert_int_eq(fg_model_config_parse(d, strlen(d), NULL, &c, &err), FG_OK);
    ck_assert(c.qkv_bias && c.out_bias && c.attn_sinks && c.moe_bias && c.norm_topk);
    ck_assert(c.n_kv_heads == 8 && c.head_dim == 64 && c.n_experts == 128 && c.top_k == 4);
    ck_assert(c.moe_ffn == 48 && c.act == FG_ACT_SWIGLU_OAI);
    ck_assert(c.act_alpha == 1.702f && c.act_limit == 7.0f);
    ck_assert(c.rope.scaling == FG_ROPE_YARN && c.rope.factor == 32.0f && !c.rope.truncate);
    ck_assert(c.rope.orig_max_pos == 4096 && c.rope.theta == 150000.0f);
    ck_assert(fg_model_layer_window(&c, 0) == 128 && fg_model_layer_window(&c, 1) == 0);
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 1, t), 10); /* layer 0's attention */
    ck_assert(t[9].role == FG_ROLE_SINKS && t[9].dims[0] == 16 && t[8].role == FG_ROLE_BO);
    ck_assert_str_eq(t[9].name, "model.layers.0.self_attn.sinks");
    ck_assert_uint_eq(fg_model_unit_tensors(&c, 2, t), 9);
    ck_assert(t[1].role == FG_ROLE_ROUTER && t[2].role == FG_ROLE_B_ROUTER);
    ck_assert(t[4].role == FG_ROLE_EXP_B_GATE && t[4].dims[0] == 128 * 48 && t[4].blocks == 128);
    ck_assert(t[8].role == FG_ROLE_EXP_B_DOWN && t[8].dims[0] == 128 * 32);
    ck_assert_str_eq(t[1].name, "model.layers.0.mlp.router.weight");
    const char *g = "{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
                    "\"num_hidden_layers\":2,\"intermediate_size\":48,"
                    "\"num_attention_heads\":8,\"max_position_embeddings\":64,"
                    "\"attention_bias\":false,\"swiglu_limit\":3.5,\"swiglu_alpha\":2,"
                    "\"layer_types\":[\"full_attention\",\"sliding_attention\"],"
                    "\"sliding_window\":8,\"rope_theta\":1000,\"num_local_experts\":8,"
                    "\"rope_scaling\":null}";
    ck_assert_int_eq(fg_model_config_parse(g, strlen(g), NULL, &c, &err), FG_OK);
    ck_assert(!c.qkv_bias && !c.out_bias && c.act_limit == 3.5f && c.act_alpha == 2.0f);
    ck_assert(fg_model_layer_window(&c, 0) == 0 && fg_model_layer_window(&c, 1) == 8);
    ck_assert(c.n_experts == 8 && c.rope.theta == 1000.0f && c.rope.scaling == FG_ROPE_YARN);
    cfg_fail("{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,"
             "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8,"
             "\"max_position_embeddings\":64,\"swiglu_limit\":-1}", FG_ERR_CORRUPT,
             "key swiglu_limit");
    tu_tmpdir_create();
    static const char *const cfg = "{\"model_type\":\"gpt_oss\",\"vocab_size\":16,"
                                   "\"hidden_size\":8,\"num_hidden_layers\":1,"
                                   "\"intermediate_size\":6,\"num_attention_heads\":2,"
                                   "\"num_key_value_heads\":1,\"head_dim\":4,"
                                   "\"max_position_embeddings\":32,\"num_local_experts\":2,"
                                   "\"num_experts_per_tok\":1}";
    static const char *const omit[] = {".experts.", NULL};
    static const char *const ok[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x12",
                                     "model.layers.0.mlp.experts.gate_up_proj_bias@2x12",
                                     "model.layers.0.mlp.experts.down_proj@2x6x8",
                                     "model.layers.0.mlp.experts.down_proj_bias@2x8"};
    static const char *const untransposed[] = {
        "model.layers.0.mlp.experts.gate_up_proj@2x12x8",
        "model.layers.0.mlp.experts.gate_up_proj_bias@2x12",
        "model.layers.0.mlp.experts.down_proj@2x6x8",
        "model.layers.0.mlp.experts.down_proj_bias@2x8"};
    fgc_source src[24] = {{0, 0, NULL}}; /* 22 specs: embed | 10 | 9 | norm, head */
    ck_assert_int_eq(check_written("oss", cfg, omit, ok, 4, 0, src, NULL, &err), FG_OK);
    /* expert e's gate (spec 14): element (r, c) at e * 96 + 2r + 12c; up (16) one column on;
     * down (18): e * 48 + r + 8c; the biases: gate (15) e * 12 + 2r, down (19) contiguous */
    for (uint32_t e = 0; e < 2; e++) {
        const fgc_part *gw = &src[14].parts[e], *uw = &src[16].parts[e];
        const fgc_part *dw = &src[18].parts[e], *gb = &src[15].parts[e];
        const fgc_part *db = &src[19].parts[e];
        ck_assert(gw->first == e * 96 && gw->rs == 2 && gw->cs == 12);
        ck_assert(uw->first == e * 96 + 1 && uw->rs == 2 && uw->cs == 12);
        ck_assert(dw->first == e * 48 && dw->rs == 1 && dw->cs == 8);
        ck_assert(gb->first == e * 12 && gb->rs == 2 && src[17].parts[e].first == e * 12 + 1);
        ck_assert(db->first == e * 8 && db->rs == 0);
    }
    ck_assert(src[9].index != FGC_NONE && src[12].index != FGC_NONE); /* sinks, router bias */
    fgc_sources_free(src, 22);
    ck_assert_int_eq(check_written("oss-t", cfg, omit, untransposed, 4, 0, NULL, NULL, &err),
                     FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [2, 12, 8], config.json implies "
                         "[2, 8, 12]"), "%s", err.msg);
    /* OpenAI's MXFP4 files: [experts, rows, cols / 32, 16] codes, [experts, rows, cols / 32]
     * exponents, either first; the codes' rows as the model multiplies them (gate and up
     * alternating); each needs the other, as U8 */
    static const char *const mcfg = "{\"model_type\":\"gpt_oss\",\"vocab_size\":16,"
                                    "\"hidden_size\":64,\"num_hidden_layers\":1,"
                                    "\"intermediate_size\":32,\"num_attention_heads\":2,"
                                    "\"num_key_value_heads\":1,\"head_dim\":4,"
                                    "\"max_position_embeddings\":32,\"num_local_experts\":2,"
                                    "\"num_experts_per_tok\":1,\"quantization_config\":"
                                    "{\"quant_method\":\"mxfp4\"}}";
#define MX(n, shape) "model.layers.0.mlp.experts." n "@" shape
    static const char *const mx[] = {MX("gate_up_proj_scales", "2x64x2:U8"),
                                     MX("gate_up_proj_blocks", "2x64x2x16:U8"),
                                     MX("gate_up_proj_bias", "2x64"),
                                     MX("down_proj_blocks", "2x64x1x16:U8"),
                                     MX("down_proj_scales", "2x64x1:U8"),
                                     MX("down_proj_bias", "2x64")};
    static const char *const noscale[] = {MX("gate_up_proj_blocks", "2x64x2x16:U8"),
                                          MX("gate_up_proj_bias", "2x64"),
                                          MX("down_proj_blocks", "2x64x1x16:U8"),
                                          MX("down_proj_scales", "2x64x1:U8"),
                                          MX("down_proj_bias", "2x64")};
    static const char *const f16[] = {MX("gate_up_proj_scales", "2x64x2:U8"),
                                      MX("gate_up_proj_blocks", "2x64x2x16"),
                                      MX("gate_up_proj_bias", "2x64"),
                                      MX("down_proj_blocks", "2x64x1x16:U8"),
                                      MX("down_proj_scales", "2x64x1:U8"),
                                      MX("down_proj_bias", "2x64")};
#undef MX
    ck_assert_int_eq(check_written("mx", mcfg, omit, mx, 6, 0, src, NULL, &err), FG_OK);
    for (uint32_t e = 0; e < 2; e++) { /* up: the odd rows of 64 values; down: contiguous */
        const fgc_part *u = &src[16].parts[e], *dn = &src[18].parts[e];
        ck_assert(u->mxfp4 && u->first == e * 4096 + 64 && u->rs == 128 && u->cs == 1);
        ck_assert(u->scales != FGC_NONE && u->scales != u->index);
        ck_assert(dn->mxfp4 && dn->first == e * 2048 && dn->rs == 32 && dn->scales != FGC_NONE);
    }
    fgc_sources_free(src, 22);
    ck_assert_int_eq(check_written("mx-noscale", mcfg, omit, noscale, 5, 0, NULL, NULL, &err),
                     FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "the MXFP4 scales of tensor "
                         "model.layers.0.mlp.experts.gate_proj.weight are missing "
                         "(model.layers.0.mlp.experts.gate_up_proj_blocks)"), "%s", err.msg);
    ck_assert_int_eq(check_written("mx-f16", mcfg, omit, f16, 6, 0, NULL, NULL, &err),
                     FG_ERR_BAD_ENUM);
    ck_assert_msg(strstr(err.msg, "gate_up_proj_blocks has dtype F16; MXFP4 blocks are U8"),
                  "%s", err.msg);
    tu_tmpdir_remove();
}
END_TEST

/* GLM-4 MoE with n_shared_experts 0: transformers still writes the shared experts, 0 wide:
 * accepted empty, refused holding values (its configs: test_model_configs.c) */
START_TEST(glm4_moe_empty_shared)
{
    fg_err err;
#define G "{\"model_type\":\"glm4_moe\",\"vocab_size\":64,\"hidden_size\":64," \
          "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":8," \
          "\"max_position_embeddings\":128,\"n_routed_experts\":16,\"num_experts_per_tok\":4"
    tu_tmpdir_create();
    static const char *const cfg = G ",\"n_shared_experts\":0,\"first_k_dense_replace\":1}";
    static const char *const empty[] = {"model.layers.1.mlp.shared_experts.gate_proj.weight@0x64",
                                        "model.layers.1.mlp.shared_experts.down_proj.weight@64x0"};
    static const char *const full[] = {"model.layers.1.mlp.shared_experts.gate_proj.weight@8x64"};
    ck_assert_int_eq(check_written("empty", cfg, NULL, empty, 2, 0, NULL, NULL, &err), FG_OK);
    ck_assert_int_eq(check_written("full", cfg, NULL, full, 1, 0, NULL, NULL, &err),
                     FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "shared_experts.gate_proj.weight holds 512 values; config.json "
                         "implies none"), "%s", err.msg);
    tu_tmpdir_remove();
#undef G
}
END_TEST

START_TEST(moe_batched_tensors)
{
    tu_tmpdir_create();
    static const char *const stacked[] = {".experts.", NULL};
    static const char *const ok[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x8",
                                     "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const shape[] = {"model.layers.0.mlp.experts.gate_up_proj@2x6x8",
                                        "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const flat[] = {"model.layers.0.mlp.experts.gate_up_proj@16x8",
                                       "model.layers.0.mlp.experts.down_proj@2x8x4"};
    static const char *const twice[] = {"model.layers.0.mlp.experts.gate_up_proj@2x8x8",
                                        "model.layers.0.mlp.experts.down_proj@2x8x4",
                                        "model.layers.0.mlp.experts.1.up_proj.weight@4x8"};
    fgc_source src[16] = {{0, 0, NULL}}; /* 15 specs */
    fg_err err;
    ck_assert_int_eq(check_moe("ok", stacked, ok, 2, src, &err), FG_OK);
    /* gate (spec 10): rows 0 and 8 (elements 0 and 64); up (11): 4 and 12; down (12): 0 and 8
     * (of 4 values), one tensor each, the rows contiguous (rs 0) */
    ck_assert(src[10].index == FGC_STACKED && src[10].parts[0].first == 0 &&
              src[10].parts[1].first == 64 && src[10].parts[0].index == src[11].parts[1].index);
    ck_assert(src[11].parts[0].first == 32 && src[11].parts[1].first == 96);
    ck_assert(src[12].parts[1].first == 32 && src[12].parts[0].index != src[10].parts[0].index);
    ck_assert(!src[10].parts[1].rs && !src[11].parts[0].rs && !src[12].parts[1].rs);
    fgc_sources_free(src, 15);
    ck_assert_int_eq(check_moe("shape", stacked, shape, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [2, 6, 8], config.json implies "
                         "[2, 8, 8]"), "%s", err.msg);
    /* the experts flattened into 2-D rows: refused by its shape, never read part after part */
    ck_assert_int_eq(check_moe("flat", stacked, flat, 2, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "gate_up_proj has shape [16, 8], config.json implies "
                         "[2, 8, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_moe("twice", stacked, twice, 3, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "second spelling of block 1 of "
                         "model.layers.0.mlp.experts.up_proj.weight"), "%s", err.msg);
    ck_assert_int_eq(check_moe("nodown", stacked, ok, 1, NULL, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "tensor model.layers.0.mlp.experts.down_proj.weight "
                         "(required by config.json) is missing"), "%s", err.msg);
    tu_tmpdir_remove();
}
END_TEST

START_TEST(moe_stacked_tensors)
{
    tu_tmpdir_create();
    static const char *const stacked[] = {".experts.gate_proj", ".experts.up_proj",
                                          ".experts.down_proj", NULL};
    static const char *const gate[] = {".experts.gate_proj", NULL};
#define EX(e, p, shape) "model.layers.0.mlp.experts." #e "." #p ".weight@" shape
    static const char *const all[] = {EX(0, gate_proj, "4x8"), EX(1, gate_proj, "4x8"),
                                      EX(0, up_proj, "4x8"), EX(1, up_proj, "4x8"),
                                      EX(0, down_proj, "8x4"), EX(1, down_proj, "8x4")};
    static const char *const bad_shape[] = {EX(0, gate_proj, "5x8"), EX(1, gate_proj, "4x8"),
                                            EX(0, up_proj, "4x8"), EX(1, up_proj, "4x8"),
                                            EX(0, down_proj, "8x4"), EX(1, down_proj, "8x4")};
    static const char *const past[] = {EX(2, gate_proj, "4x8")};
#undef EX
    fgc_source src[16] = {{0, 0, NULL}}; /* 15 specs */
    fg_err err;
    /* embed | norm, q, k, v, o, q_norm, k_norm | norm, router, gate, up, down | norm, head */
    ck_assert_int_eq(check_moe("ok", stacked, all, 6, src, &err), FG_OK);
    for (int i = 10; i <= 12; i++)
        ck_assert(src[i].index == FGC_STACKED && src[i].parts &&
                  src[i].parts[0].index != src[i].parts[1].index && !src[i].parts[1].first);
    fgc_sources_free(src, 15);
    ck_assert_int_eq(check_moe("whole", NULL, NULL, 0, src, &err), FG_OK); /* stacked as given */
    ck_assert(src[10].index != FGC_STACKED && !src[10].parts);
    ck_assert_int_eq(check_moe("missing", stacked, all, 5, src, &err), FG_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.msg, "block 1 of tensor model.layers.0.mlp.experts.down_proj.weight"),
                  "%s", err.msg);
    ck_assert_int_eq(check_moe("shape", stacked, bad_shape, 6, NULL, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "experts.0.gate_proj.weight has shape [5, 8], config.json "
                         "implies [4, 8]"), "%s", err.msg);
    ck_assert_int_eq(check_moe("twice", gate + 1, all, 6, NULL, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "second spelling"), "%s", err.msg);
    ck_assert_int_eq(check_moe("past", stacked, past, 1, NULL, &err), FG_ERR_BAD_NAME);
    ck_assert_msg(strstr(err.msg, "experts.2.gate_proj.weight is not a Qwen3-MoE tensor"), "%s",
                  err.msg);
    tu_tmpdir_remove();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, opt_configs_and_tensor_sets);
    tcase_add_test(tc, phi3_fused_tensors);
    tcase_add_test(tc, moe_stacked_tensors);
    tcase_add_test(tc, moe_batched_tensors);
    tcase_add_test(tc, gpt_oss_experts);
    tcase_add_test(tc, glm4_moe_empty_shared);
    tcase_add_test(tc, opt_config_errors);
    tcase_add_test(tc, canonical_names);
    tcase_add_test(tc, llama_inv_freq_buffers);
    tcase_add_test(tc, generation_config_eos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
