/* test_gguf.c - GGUF import (convert/gguf*.c) against files written by llama.cpp's gguf-py
 * (tests/fixtures/gguf, made by make_gguf_fixtures.py from the transformers Llama fixtures):
 *   - hostile files, one table row each, refused with one line naming the field or tensor;
 *   - the metadata and tensor infos of a real file as gguf-py wrote them;
 *   - Q8_0 / Q4_0 dequantization bit for bit with gguf-py's (ggml's reference arithmetic);
 *   - a GGUF file converted stores exactly what its safetensors source converts to (the Q/K
 *     permutation of llama.cpp undone, names and config mapped), for F16, BF16, qwen2, qwen3;
 *   - the engine's logits from GGUF stores against transformers' (F16/BF16 as close as from
 *     the safetensors source, Q8_0 and Q4_0 within the tolerances stated in the table);
 *   - the tokenizer of a file's tokenizer.ggml.* metadata (make_gguf_tok_fixtures.py) gives the
 *     ids of the tokenizer.json it was written from (tests/fixtures/tokjson) on its text set,
 *     the same roles and template; a gpt-oss-form one (tokenizer.ggml.pre "gpt-4o", a small
 *     vocabulary) gives the ids and texts Hugging Face tokenizers recorded for it
 *     (tok-gpt4o.cases); hostile tokenizer metadata refused in one line.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ckpt.h"
#include "convert.h"
#include "engine.h"
#include "fg_bytes.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "store.h"
#include "testutil.h"
#include "tokenizer.h"
#include <fcntl.h>
#include <sys/stat.h>

#ifndef FG_FIXTURE_DIR
#error "FG_FIXTURE_DIR must name tests/fixtures"
#endif

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static const char *fx(const char *rel)
{
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", FG_FIXTURE_DIR, rel);
    return buf[k];
}

/* ---- a tiny assembler for hostile files ----
 * Space-separated tokens: raw:TEXT (its bytes), u8:N u16:N u32:N u64:N (little-endian; N in C syntax),
 * s:TEXT (a GGUF string: u64 length + bytes), pad (zeros to a multiple of 32), z:N (N zeros). */
static uint8_t *assemble(const char *prog, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *p = calloc(1, cap);
    char *copy = strdup(prog), *save = NULL;
    for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *arg = strchr(t, ':');
        arg = arg ? arg + 1 : t;
        uint64_t v = strtoull(arg, NULL, 0);
        ck_assert(n + 4096 < cap);
        if (!strncmp(t, "raw:", 4) || !strncmp(t, "s:", 2)) {
            size_t l = strlen(arg);
            if (t[0] == 's')
                fg_put64(p + n, l), n += 8;
            memcpy(p + n, arg, l), n += l;
        } else if (!strncmp(t, "u8:", 3)) {
            p[n++] = (uint8_t)v;
        } else if (!strncmp(t, "u16:", 4)) {
            fg_put16(p + n, (uint16_t)v), n += 2;
        } else if (!strncmp(t, "u32:", 4)) {
            fg_put32(p + n, (uint32_t)v), n += 4;
        } else if (!strncmp(t, "u64:", 4)) {
            fg_put64(p + n, v), n += 8;
        } else if (!strcmp(t, "pad")) {
            n = (n + 31) & ~(size_t)31;
        } else {
            ck_assert_msg(!strncmp(t, "z:", 2) && v < cap - n - 4096, "bad token %s", t);
            n += (size_t)v;
        }
    }
    free(copy);
    *len = n;
    return p;
}

#define HDR(nti, nkv) "raw:GGUF u32:3 u64:" #nti " u64:" #nkv " "
#define ARCH "s:general.architecture u32:8 s:llama "
#define TI_F32(name, ne0, off) "s:" name " u32:1 u64:" #ne0 " u32:0 u64:" #off " "

static const struct hostile {
    const char *what, *prog;
    int rc;
    const char *msg; /* a part of the one-line message */
} hostile[] = {
    {"valid (the table's control)", HDR(1, 1) ARCH TI_F32("w", 32, 0) "pad z:128", FG_OK, ""},
    {"no tensors, no data", HDR(0, 1) ARCH, FG_OK, ""},
    {"bad magic", "raw:GGUX u32:3 u64:0 u64:0", FG_ERR_BAD_MAGIC, "not a GGUF file"},
    {"version 1", "raw:GGUF u32:1 u64:0 u64:0", FG_ERR_VERSION, "GGUF version 1 (fg reads"},
    {"big-endian", "raw:GGUF u32:0x03000000 u64:0 u64:0", FG_ERR_BAD_ENDIAN, "big-endian"},
    {"truncated header", "raw:GGUF u32:3 u64:0", FG_ERR_TRUNCATED, "the GGUF metadata count at byte 16"},
    {"key/value count over the limit", HDR(0, 0x8000000000000000), FG_ERR_LIMIT,
     "9223372036854775808 metadata key/values (limit"},
    {"key/value count past the file", HDR(0, 1000) ARCH, FG_ERR_TRUNCATED,
     "1000 metadata key/values (more than the file could hold)"},
    {"tensor count that overflows", HDR(0xffffffffffffffff, 1) ARCH, FG_ERR_LIMIT,
     "18446744073709551615 tensors (limit"},
    {"tensor count past the file", HDR(100, 1) ARCH TI_F32("w", 32, 0), FG_ERR_TRUNCATED,
     "100 tensors (more than the file could hold)"},
    {"key length 2^64 - 1", HDR(0, 1) "u64:0xffffffffffffffff z:16", FG_ERR_TRUNCATED,
     "a metadata key at byte 24 is 18446744073709551615 bytes long"},
    {"empty key", HDR(0, 1) "s: u32:4 u32:1", FG_ERR_BAD_NAME, "metadata key at byte 32 is empty"},
    {"huge string value", HDR(0, 1) "s:k u32:8 u64:0x10000000000 raw:abc", FG_ERR_TRUNCATED,
     "k at byte 37 is 1099511627776 bytes long"},
    {"unknown value type", HDR(0, 1) "s:k u32:13 u32:0", FG_ERR_BAD_ENUM,
     "key k: unknown value type 13"},
    {"bool that is 2", HDR(0, 1) "s:k u32:7 u8:2", FG_ERR_BAD_ENUM, "key k: bool value 2"},
    {"nested array", HDR(0, 1) "s:k u32:9 u32:9 u64:1 u32:0 u64:0", FG_ERR_BAD_ENUM,
     "not nested arrays"},
    {"array count that overflows", HDR(0, 1) "s:k u32:9 u32:10 u64:0x4000000000000000",
     FG_ERR_LIMIT, "key k: array of 4611686018427387904 elements (limit"},
    {"array past the file", HDR(0, 1) "s:k u32:9 u32:4 u64:1000 z:8", FG_ERR_TRUNCATED,
     "key k: array of 1000 elements (more than the bytes left"},
    {"string array element past the file", HDR(0, 1) "s:k u32:9 u32:8 u64:2 s:a u64:99 raw:b",
     FG_ERR_TRUNCATED, "k at byte 58 is 99 bytes long"},
    {"duplicate key", HDR(0, 2) ARCH ARCH, FG_ERR_DUPLICATE,
     "metadata key general.architecture appears twice"},
    {"alignment not a power of two", HDR(0, 1) "s:general.alignment u32:4 u32:48",
     FG_ERR_BAD_ALIGN, "general.alignment must be a u32 power of two"},
    {"alignment of the wrong type", HDR(0, 1) "s:general.alignment u32:10 u64:32",
     FG_ERR_BAD_ALIGN, "general.alignment must be a u32"},
    {"tensor name with a NUL", HDR(1, 0) "u64:2 raw:a u8:0 u32:1 u64:32 u32:0 u64:0",
     FG_ERR_BAD_NAME, "holds a NUL byte"},
    {"five dimensions", HDR(1, 0) "s:w u32:5 u64:1 u64:1 u64:1 u64:1 u64:1 u32:0 u64:0",
     FG_ERR_LIMIT, "tensor w: 5 dimensions (1 to 4)"},
    {"a dimension of zero", HDR(1, 0) "s:w u32:2 u64:32 u64:0 u32:0 u64:0 pad",
     FG_ERR_OVERFLOW, "tensor w: dimension 1 is 0"},
    {"element count that overflows", HDR(1, 0) "s:w u32:2 u64:0x100000000 u64:0x100000000 "
     "u32:0 u64:0 pad", FG_ERR_OVERFLOW, "tensor w: dimension 1 is 4294967296"},
    {"unknown ggml type", HDR(1, 0) "s:w u32:1 u64:32 u32:99 u64:0 pad", FG_ERR_BAD_ENUM,
     "tensor w: unknown ggml type 99"},
    {"row not whole Q8_0 blocks", HDR(1, 0) "s:w u32:1 u64:33 u32:8 u64:0 pad z:64",
     FG_ERR_SIZE_MISMATCH, "a row of 33 elements is not a whole number of Q8_0 blocks"},
    {"misaligned data offset", HDR(1, 0) TI_F32("w", 32, 4) "pad z:256", FG_ERR_BAD_ALIGN,
     "tensor w: offset 4 is not a multiple of the alignment 32"},
    {"offset past the end", HDR(1, 0) TI_F32("w", 32, 0x7fffffffffffffe0) "pad z:128",
     FG_ERR_OUT_OF_BOUNDS, "tensor w: 128 bytes at offset 9223372036854775776"},
    {"data cut short", HDR(1, 0) TI_F32("w", 32, 0) "pad z:100", FG_ERR_OUT_OF_BOUNDS,
     "tensor w: 128 bytes at offset 0 of the data section run past the end"},
    {"data section past the end", HDR(1, 0) TI_F32("w", 32, 0), FG_ERR_TRUNCATED,
     "the data section (at byte"},
    {"overlapping tensors", HDR(2, 0) TI_F32("a", 32, 0) TI_F32("b", 32, 96) "pad z:256",
     FG_ERR_OVERLAP, "tensor b overlaps a"},
    {"duplicate tensor names", HDR(2, 0) TI_F32("w", 32, 0) TI_F32("w", 32, 128) "pad z:256",
     FG_ERR_DUPLICATE, "tensor w appears twice"},
};

START_TEST(test_hostile)
{
    const struct hostile *h = &hostile[_i];
    size_t n;
    uint8_t *p = assemble(h->prog, &n);
    ck_src src = {.mem = p, .fd = -1, .size = n, .label = "hostile.gguf"};
    ck_gguf g;
    fg_err err = {0};
    int rc = ck_gguf_parse(&src, &g, &err);
    ck_assert_msg(rc == h->rc, "%s: rc %d (%s), want %d", h->what, rc, err.msg, h->rc);
    if (rc) {
        ck_assert_msg(strstr(err.msg, h->msg) && !strncmp(err.msg, "hostile.gguf: ", 14) &&
                      !strchr(err.msg, '\n'), "%s: message '%s' lacks '%s'", h->what, err.msg,
                      h->msg);
    }
    ck_gguf_free(&g);
    free(p);
}
END_TEST

/* The tensor infos and metadata of a file gguf-py wrote, as fg_ckpt lists them. */
START_TEST(test_metadata)
{
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx("gguf/llama2-tiny-q8_0.gguf"), &ck, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_GGUF);
    ck_assert_str_eq(fg_ckpt_kind_name(FG_CKPT_GGUF), "gguf");
    ck_assert_uint_eq(fg_ckpt_count(ck), 3 + 2 * 9);
    static const struct { const char *name, *source; uint8_t dtype; uint64_t d0, d1; } want[] = {
        {"model.embed_tokens.weight", "token_embd.weight Q8_0", FG_CKPT_Q8_0, 512, 64},
        {"lm_head.weight", "output.weight Q8_0", FG_CKPT_Q8_0, 512, 64},
        {"model.norm.weight", "output_norm.weight F32", FG_CKPT_F32, 64, 0},
        {"model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight Q8_0", FG_CKPT_Q8_0, 64,
         64},
        {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight Q8_0", FG_CKPT_Q8_0, 64,
         128},
        {"model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight Q8_0", FG_CKPT_Q8_0, 128,
         64},
        {"model.layers.1.post_attention_layernorm.weight", "blk.1.ffn_norm.weight F32",
         FG_CKPT_F32, 64, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        uint32_t k;
        ck_assert_msg(fg_ckpt_find(ck, want[i].name, &k) == 0, "%s", want[i].name);
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, k);
        ck_assert_int_eq(t->dtype, want[i].dtype);
        ck_assert_str_eq(t->source, want[i].source); /* provenance: GGUF's name and type */
        ck_assert_uint_eq(t->dims[0], want[i].d0);
        ck_assert_uint_eq(t->dims[1], want[i].d1);
        ck_assert_uint_eq(t->length, t->dtype == FG_CKPT_F32 ? t->n_elements * 4
                                                             : t->n_elements / 32 * 34);
        ck_assert_uint_eq(t->offset % 32, 0);
    }
    const ck_gguf *g = ck_gguf_of(ck);
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->alignment, 32);
    ck_assert_str_eq(ck_gguf_str(g, "general.architecture"), "llama");
    uint64_t v;
    ck_assert_int_eq(ck_gguf_uint(g, "llama.block_count", &v), 0);
    ck_assert_uint_eq(v, 2);
    ck_assert_int_eq(ck_gguf_uint(g, "llama.attention.head_count_kv", &v), 0);
    ck_assert_uint_eq(v, 4);
    double eps;
    ck_assert_int_eq(ck_gguf_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    ck_assert(eps == (double)1e-5f);
    ck_assert_int_eq(ck_gguf_uint(g, "general.architecture", &v), FG_ERR_BAD_ENUM);
    ck_assert_int_eq(ck_gguf_uint(g, "no.such.key", &v), FG_ERR_NOT_FOUND);
    fg_ckpt_close(ck);
}
END_TEST

/* Names mapped (and the ones that must not be). */
START_TEST(test_names)
{
    static const char *const rows[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output.weight", "lm_head.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"blk.17.attn_k.bias", "model.layers.17.self_attn.k_proj.bias"},
        {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
        {"blk.3.attn_q_norm.weight", "model.layers.3.self_attn.q_norm.weight"},
        {"blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
        {"rope_freqs.weight", NULL}, {"blk.01.attn_q.weight", NULL},
        {"blk.-1.attn_q.weight", NULL}, {"blk.1.attn_qq.weight", NULL},
        {"blk.1.attn_q", NULL}, {"blk. 1.attn_q.weight", NULL}, {"blk.+1.attn_q.weight", NULL},
        {"blk.99999999999.attn_q.weight", NULL}, {"blk.x.attn_q.weight", NULL}, {"output.scale", NULL},
        {"blk.2.ffn_gate_inp.weight", "model.layers.2.mlp.gate.weight"},
        {"blk.2.ffn_gate_inp_shexp.weight", "model.layers.2.mlp.shared_expert_gate.weight"},
        {"blk.2.ffn_up_shexp.weight", "model.layers.2.mlp.shared_expert.up_proj.weight"},
        {"blk.2.ffn_up_exps.weight", NULL}, /* (split per expert: ck_gguf_expert_name) */
        {"gemma2 blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
        {"gemma3 blk.1.post_attention_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"olmo2 blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"},
        {"phi3 blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight"},
        {"phi3 blk.0.ffn_up.weight", "model.layers.0.mlp.gate_up_proj.weight"},
        {"llama blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"},
        {"llama blk.0.attn_qkv.weight", NULL},
        {"gpt-oss blk.1.attn_sinks.weight", "model.layers.1.self_attn.sinks"},
        {"gpt-oss blk.1.attn_sinks.bias", NULL},
        {"gpt-oss blk.1.ffn_gate_inp.bias", "model.layers.1.mlp.router.bias"},
        {"gpt-oss blk.1.post_attention_norm.weight",
         "model.layers.1.post_attention_layernorm.weight"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char out[256], arch[16] = "";
        const char *name = rows[i][0], *sp = strchr(name, ' ');
        if (sp) /* "<arch> <name>" */
            snprintf(arch, sizeof arch, "%.*s", (int)(sp - name), name), name = sp + 1;
        int ok = ck_gguf_hf_name(sp ? arch : NULL, name, out, sizeof out);
        ck_assert_msg(ok == (rows[i][1] != NULL), "%s", rows[i][0]);
        if (ok)
            ck_assert_str_eq(out, rows[i][1]);
    }
    char out[256];
    ck_assert(ck_gguf_expert_name("blk.12.ffn_down_exps.weight", 63, out, sizeof out));
    ck_assert_str_eq(out, "model.layers.12.mlp.experts.63.down_proj.weight");
    ck_assert(!ck_gguf_expert_name("blk.12.ffn_down.weight", 0, out, sizeof out));
    ck_assert(!ck_gguf_expert_name("blk.12.ffn_down_exps.weight", 0, out, 20));
}
END_TEST

/* Blocks dequantized bit for bit as gguf-py's (ggml's arithmetic) for the first n values of a
 * tensor; a piece that starts and ends inside blocks, rounded to F16 as fg stores it. */
static const struct dq_row {
    const char *file, *tensor, *ref;
    void (*fn)(const uint8_t *, uint64_t, float *);
    uint32_t block;
} dq_rows[] = {
    {"gguf/llama2-tiny-q8_0.gguf", "model.layers.0.self_attn.q_proj.weight",
     "gguf/llama2-tiny-q8_0.attn_q.f32", ck_gguf_dequant_q8_0, 32},
    {"gguf/llama2-tiny-q4_0.gguf", "model.layers.0.self_attn.q_proj.weight",
     "gguf/llama2-tiny-q4_0.attn_q.f32", ck_gguf_dequant_q4_0, 32},
    {"gguf/llama-k-tiny.gguf", "model.layers.0.self_attn.q_proj.weight",
     "gguf/llama-k-tiny.attn_q.f32", ck_gguf_dequant_q4_k, 256},
    {"gguf/llama-k-tiny.gguf", "model.layers.0.self_attn.v_proj.weight",
     "gguf/llama-k-tiny.attn_v.f32", ck_gguf_dequant_q6_k, 256},
};

START_TEST(test_dequant)
{
    const struct dq_row *r = &dq_rows[_i];
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx(r->file), &ck, &err) == 0, "%s", err.msg);
    uint32_t k;
    ck_assert_int_eq(fg_ckpt_find(ck, r->tensor, &k), 0);
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, k);
    size_t len;
    char *ref = tu_slurp(fx(r->ref), &len);
    uint64_t n = len / 4, blocks = n / r->block;
    ck_assert_uint_eq(n % r->block, 0);
    ck_assert_uint_le(n, t->n_elements);
    uint8_t *raw = malloc(t->length);
    float *mine = malloc(n * 4);
    ck_assert_int_eq(fg_ckpt_read(ck, k, 0, n, raw, &err), 0);
    r->fn(raw, blocks, mine);
    ck_assert_msg(memcmp(mine, ref, len) == 0, "%s: not bit for bit", r->ref);
    ck_assert_int_eq(fg_ckpt_read(ck, k, 16, r->block, raw, &err), FG_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "not whole blocks of"));
    void *scratch = NULL;
    size_t cap = 0;
    uint16_t h[300], want[300];
    ck_assert_int_eq(ck_gguf_read_f16(ck, k, 45, 300, h, &scratch, &cap, &err), 0);
    ck_assert_int_eq(fg_ckpt_to_f16(FG_CKPT_F32, (const float *)(void *)ref + 45, 300, want,
                                    NULL), 0);
    ck_assert_mem_eq(h, want, sizeof h);
    free(scratch);
    free(ref);
    free(raw);
    free(mine);
    fg_ckpt_close(ck);
}
END_TEST

/* Every block type, one tensor each in gguf/types.gguf (make_gguf_types.py: gguf-py's quantizers
 * where it has them, random blocks where not), dequantized bit for bit as gguf-py's
 * gguf.quants.dequantize (gguf/types.<type>.f32), whole and through ck_gguf_read_f16 (a piece
 * starting and ending inside blocks, rounded to F16 as fg stores it; values past F16's range
 * refused as not finite). */
static const struct type_row { const char *name; uint8_t dtype; } type_rows[] = {
    {"q4_0", FG_CKPT_Q4_0},     {"q4_1", FG_CKPT_Q4_1},     {"q5_0", FG_CKPT_Q5_0},
    {"q5_1", FG_CKPT_Q5_1},     {"q8_0", FG_CKPT_Q8_0},     {"q2_k", FG_CKPT_Q2_K},
    {"q3_k", FG_CKPT_Q3_K},     {"q5_k", FG_CKPT_Q5_K},     {"iq4_nl", FG_CKPT_IQ4_NL},
    {"iq4_xs", FG_CKPT_IQ4_XS}, {"mxfp4", FG_CKPT_MXFP4},   {"mxfp4_raw", FG_CKPT_MXFP4},
};

START_TEST(test_dequant_types)
{
    const struct type_row *r = &type_rows[_i];
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx("gguf/types.gguf"), &ck, &err) == 0, "%s", err.msg);
    char name[64], ref_path[64];
    snprintf(name, sizeof name, "%s.weight", r->name);
    snprintf(ref_path, sizeof ref_path, "gguf/types.%s.f32", r->name);
    uint32_t k, be, bb;
    ck_assert_int_eq(fg_ckpt_find(ck, name, &k), 0);
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, k);
    ck_assert_uint_eq(t->dtype, r->dtype);
    ck_assert(ck_dtype_is_block(t->dtype) && ck_dtype_block(t->dtype, &be, &bb));
    const char *dn = fg_ckpt_dtype_name(t->dtype);
    ck_assert_msg(!strncasecmp(dn, r->name, strlen(dn)), "%s is %s", r->name, dn);
    size_t len;
    char *ref = tu_slurp(fx(ref_path), &len);
    ck_assert_uint_eq(len, t->n_elements * 4);
    ck_assert_uint_eq(t->length, t->n_elements / be * bb);
    uint8_t *raw = malloc(t->length);
    float *mine = malloc(len);
    ck_assert_int_eq(fg_ckpt_read(ck, k, 0, t->n_elements, raw, &err), 0);
    ck_assert_int_eq(ck_gguf_dequant(t->dtype, raw, t->n_elements / be, mine), 0);
    for (uint64_t i = 0; i < t->n_elements; i++)
        ck_assert_msg(!memcmp(mine + i, ref + 4 * i, 4), "%s: value %llu is %a, gguf-py's %a",
                      r->name, (unsigned long long)i, mine[i], ((float *)(void *)ref)[i]);
    void *scratch = NULL;
    size_t cap = 0;
    uint64_t first = be / 2 + 3, n = 3 * be + 5; /* inside a block to inside another */
    uint16_t *h = malloc(n * 2), *want = malloc(n * 2);
    size_t bad = 0;
    int frc = t->dtype == FG_CKPT_MXFP4
                  ? FG_OK : fg_ckpt_to_f16(FG_CKPT_F32, (const float *)(void *)ref + first, n, want,
                                           &bad);
    for (uint64_t i = 0; t->dtype == FG_CKPT_MXFP4 && i < n; i++) { /* BF16: exact, or not finite */
        float v = ((const float *)(void *)ref)[first + i];
        uint32_t b;
        memcpy(&b, &v, 4);
        ck_assert_uint_eq(b & 0xffff, 0);
        want[i] = (uint16_t)(b >> 16);
        frc = isfinite(v) ? frc : FG_ERR_NONFINITE;
    }
    int rc = ck_gguf_read_f16(ck, k, first, n, h, &scratch, &cap, &err);
    if (frc == FG_OK) {
        ck_assert_msg(rc == 0, "%s", err.msg);
        ck_assert_mem_eq(h, want, n * 2);
    } else { /* values past F16's range (BF16's, MXFP4's): refused by name, not stored as inf */
        ck_assert_int_eq(rc, FG_ERR_NONFINITE);
        ck_assert_msg(strstr(err.msg, name) && strstr(err.msg, "not finite"), "%s", err.msg);
    }
    free(h);
    free(want);
    free(scratch);
    free(ref);
    free(raw);
    free(mine);
    fg_ckpt_close(ck);
}
END_TEST

static const char *convert(const char *src, const char *tok, const char *name)
{
    const char *dst = tu_path(name);
    fg_convert_opts o = {0, 64, -1, tok, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &o, &rep, &err) == 0, "%s: %s", src, err.msg);
    return dst;
}

/* A GGUF file and the safetensors checkpoint it was written from store the same tensors, bit
 * for bit: names and config mapped, llama.cpp's Q/K permutation undone exactly (and a split
 * file the same as the whole one). */
static const struct same_row { const char *gguf, *ckpt; uint32_t tensors; const char *other; }
same_rows[] = {
    {"gguf/llama2-tiny-f16.gguf", "llama/llama2-tiny-f32", 21},
    {"gguf/llama2-tiny-bf16.gguf", "llama/llama2-tiny-bf16", 21},
    {"gguf/qwen3-tiny-bf16.gguf", "llama/qwen3-tiny-bf16", 24},
    {"gguf/qwen2-tiny-bf16.gguf", "llama/qwen2-tiny-bf16", 26},
    {"gguf/llama-linear-tiny-f16.gguf", "llama/llama-linear-tiny-f16", 21},
    /* make_gguf_arch_fixtures.py: experts merged by layer (split back per expert), Gemma's
     * norms stored as 1 + w, Phi-3's fused qkv / gate_up, OLMo 2's and Gemma's post norms,
     * Granite's and Mistral's (as llama) permuted q/k */
    {"gguf/qwen2-moe-tiny-bf16.gguf", "llama/qwen2-moe-tiny-bf16", 37},
    {"gguf/qwen3-moe-tiny-bf16.gguf", "llama/qwen3-moe-tiny-bf16", 26},
    {"gguf/gemma-tiny-bf16.gguf", "llama/gemma-tiny-bf16", 20},
    {"gguf/gemma2-tiny-bf16.gguf", "llama/gemma2-tiny-bf16", 24},
    {"gguf/gemma3-tiny-bf16.gguf", "llama/gemma3-tiny-bf16", 28},
    {"gguf/phi3-tiny-bf16.gguf", "llama/phi3-tiny-bf16", 21},
    {"gguf/olmo2-tiny-bf16.gguf", "llama/olmo2-tiny-bf16", 25},
    {"gguf/granite-tiny-bf16.gguf", "llama/granite-tiny-bf16", 20},
    {"gguf/mistral-tiny-bf16.gguf", "llama/mistral-tiny-bf16", 21},
    {"gguf/glm4-tiny-bf16.gguf", "llama/glm4-tiny-bf16", 31},
    /* make_gguf_deepseek_fixtures.py: deepseek2 with attn_kv_b, and with it split into attn_k_b
     * (transposed per head) and attn_v_b, joined back (V3's MTP layer not in the file) */
    {"gguf/deepseek-v2-lite-tiny-bf16.gguf", "llama/deepseek-v2-lite-tiny-bf16", 27},
    {"gguf/deepseek-v2-lite-tiny-split-bf16.gguf", "llama/deepseek-v2-lite-tiny-bf16", 27},
    {"gguf/deepseek-v3-tiny-split-bf16.gguf", "llama/deepseek-v3-tiny-bf16", 49},
    /* Llama 3's rope scaling as rope_freqs.weight (read into the config, not stored) */
    {"gguf/llama3-tiny-bf16.gguf", "llama/llama3-tiny-bf16", 20},
    /* glm4moe: its block_count counts the MTP layer, whose tensors are in the file */
    {"gguf/glm4-moe-tiny-bf16.gguf", "llama/glm4-moe-tiny-bf16", 55},
    /* YaRN by its keys; Phi-3's longrope by its rope_factors tensors (read, not stored) */
    {"gguf/qwen3-yarn-tiny-bf16.gguf", "llama/qwen3-yarn-tiny-bf16", 24},
    {"gguf/phi3-longrope-tiny-bf16.gguf", "llama/phi3-longrope-tiny-bf16", 20},
    /* make_gguf_oss_fixtures.py: gpt-oss's experts as the model table stacks them, read in
     * place (gate and up apart, or fused: a view of each half), sinks, router; MXFP4 experts
     * stored BF16 as the safetensors MXFP4 import stores them: bit for bit */
    {"gguf/gpt-oss-tiny-bf16.gguf", "llama/gpt-oss-tiny-bf16", 41},
    {"gguf/gpt-oss-tiny-fused-bf16.gguf", "llama/gpt-oss-tiny-bf16", 41},
    {"gguf/gpt-oss-mxfp4-tiny.gguf", "llama/gpt-oss-mxfp4-tiny", 41},
    {"gguf/gpt-oss-mxfp4-tiny-fused.gguf", "llama/gpt-oss-mxfp4-tiny", 41},
    /* split in 3 parts by gguf-py, against the single file */
    {"gguf/llama2-tiny-q4_0-split-00001-of-00003.gguf", "llama/llama2-tiny-f32", 21,
     "gguf/llama2-tiny-q4_0.gguf"},
};

typedef struct cmp_ctx {
    fg_store *self, *other;
    uint32_t n;
} cmp_ctx;

static float value_at(const void *p, uint8_t codec, uint64_t i)
{
    uint16_t h = fg_le16((const uint8_t *)p + 2 * i);
    return codec == FG_CODEC_BF16 ? fg_ckpt_bf16_to_f32(h) : fg_f16_to_f32_1(h);
}

/* Two 16-bit float tensors of one chunk each hold the same values. */
static int same_values(cmp_ctx *c, const fg_store_tensor *t, const fg_store_tensor *o)
{
    const void *a, *b;
    fg_err err;
    ck_assert(t->n_chunks == 1 && o->n_chunks == 1);
    ck_assert_int_eq(fg_store_chunk_data(c->self, t, 0, 1, &a, &err), 0);
    ck_assert_int_eq(fg_store_chunk_data(c->other, o, 0, 1, &b, &err), 0);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->dims[d];
    for (uint64_t i = 0; i < n; i++)
        if (value_at(a, t->codec.id, i) != value_at(b, o->codec.id, i))
            return 0;
    return 1;
}

static int cmp_tensor(void *ctx, const fg_store_tensor *t)
{
    cmp_ctx *c = ctx;
    fg_store_tensor *o;
    fg_err err;
    ck_assert_msg(fg_store_tensor_get(c->other, t->name, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(t->n_dims, o->n_dims);
    for (uint32_t d = 0; d < t->n_dims; d++)
        ck_assert_uint_eq(t->dims[d], o->dims[d]);
    if (t->codec.id == o->codec.id)
        ck_assert_msg(t->digest == o->digest, "tensor %s differs", t->name);
    else /* a BF16 norm that llama.cpp widened to F32 is stored F16: the same values */
        ck_assert_msg(same_values(c, t, o), "tensor %s differs", t->name);
    fg_store_tensor_free(o);
    c->n++;
    return 0;
}

START_TEST(test_same_store)
{
    const struct same_row *r = &same_rows[_i];
    const char *tok = fx(r->ckpt);
    const char *a = convert(fx(r->gguf), tok, "from-gguf");
    const char *b = r->other ? convert(fx(r->other), tok, "from-other")
                             : convert(tok, NULL, "from-safetensors");
    fg_store *sa, *sb;
    fg_err err;
    ck_assert_int_eq(fg_store_open(a, FG_STORE_RDONLY, NULL, &sa, &err), 0);
    ck_assert_int_eq(fg_store_open(b, FG_STORE_RDONLY, NULL, &sb, &err), 0);
    cmp_ctx c = {sa, sb, 0};
    ck_assert_int_eq(fg_store_tensor_iter(sa, cmp_tensor, &c, &err), 0);
    ck_assert_uint_eq(c.n, r->tensors);
    c.self = sb, c.other = sa, c.n = 0; /* and nothing more on the other side */
    ck_assert_int_eq(fg_store_tensor_iter(sb, cmp_tensor, &c, &err), 0);
    ck_assert_uint_eq(c.n, r->tensors);
    fg_store_close(sa);
    fg_store_close(sb);
}
END_TEST

/* ---- logits against transformers' (tests/fixtures/llama/<ref>.ref) ---- */
typedef struct ref {
    int32_t ids[3][12], mask[3][12], prompt[64], greedy[64];
    uint32_t n_prompt, n_greedy;
    float *logits; /* [3][12][512] */
} ref;

static void read_ints(const char *path, int32_t *v, size_t n)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(fscanf(f, "%d", &v[i]), 1);
    fclose(f);
}

static uint32_t read_tagged(FILE *f, const char *tag, int32_t *v)
{
    char line[4096];
    ck_assert(fgets(line, sizeof line, f) && !strncmp(line, tag, strlen(tag)));
    uint32_t n = 0;
    for (char *p = line + strlen(tag), *e; n < 64; p = e, n++) {
        long x = strtol(p, &e, 10);
        if (e == p)
            break;
        v[n] = (int32_t)x;
    }
    return n;
}

static void load_ref(const char *name, ref *r)
{
    char p[512];
    snprintf(p, sizeof p, "llama/%s.ref/ids.txt", name);
    read_ints(fx(p), &r->ids[0][0], 36);
    snprintf(p, sizeof p, "llama/%s.ref/mask.txt", name);
    read_ints(fx(p), &r->mask[0][0], 36);
    snprintf(p, sizeof p, "llama/%s.ref/logits.f32", name);
    size_t len;
    r->logits = (float *)(void *)tu_slurp(fx(p), &len);
    ck_assert_uint_eq(len, 36 * 512 * 4);
    snprintf(p, sizeof p, "llama/%s.ref/greedy.txt", name);
    FILE *f = fopen(fx(p), "r");
    ck_assert(f != NULL);
    r->n_prompt = read_tagged(f, "prompt:", r->prompt);
    r->n_greedy = read_tagged(f, "output:", r->greedy);
    fclose(f);
}

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

/* nmse: sum (fg - reference)^2 / sum reference^2 over the batch's logits; agree: the share of
 * positions whose argmax is the reference's; greedy: the 20 greedy tokens must be equal. The
 * reference is transformers' on the source checkpoint (<ref>.ref/logits.f32), or for a quantized
 * file (dq) transformers' on the source with the file's weights dequantized by gguf-py: an
 * exact import differs from it only by fg's F16 storage of those weights. Against the source
 * (the quantization's own loss) a quantized file is held to the loose bounds of src_nmse.
 * Q4_0's values (a 4-bit integer times an F16 scale) are exact in F16 (nmse ~1e-12, the
 * engine's arithmetic); Q8_0's products need up to 19 bits and are rounded to F16's 11 (3e-6
 * measured, held to 1e-5) until Q8_0 maps onto fg's own 8-bit codec; Q4_K's and Q6_K's
 * (sub-scale x scale x integer, less a min) likewise. */
static const struct logit_row {
    const char *gguf, *ckpt, *ref, *dq;
    double max_nmse, min_agree, src_nmse;
    int greedy;
} logit_rows[] = {
    {"gguf/llama2-tiny-f16.gguf", "llama/llama2-tiny-f32", "llama2-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/llama2-tiny-bf16.gguf", "llama/llama2-tiny-bf16", "llama2-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/qwen3-tiny-bf16.gguf", "llama/qwen3-tiny-bf16", "qwen3-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/qwen2-tiny-bf16.gguf", "llama/qwen2-tiny-bf16", "qwen2-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/llama-linear-tiny-f16.gguf", "llama/llama-linear-tiny-f16", "llama-linear-tiny", NULL,
     1e-6, 1, 1e-6, 1},
    {"gguf/llama2-tiny-q8_0.gguf", "llama/llama2-tiny-f32", "llama2-tiny",
     "gguf/llama2-tiny-q8_0.logits.f32", 1e-5, 1, 5e-3, 0},
    {"gguf/llama2-tiny-q4_0.gguf", "llama/llama2-tiny-f32", "llama2-tiny",
     "gguf/llama2-tiny-q4_0.logits.f32", 1e-6, 1, 0.5, 0},
    /* make_gguf_arch_fixtures.py's (mistral-tiny-bf16.gguf is not here: a GGUF llama runs
     * without Mistral's window, which the 12-token batch exceeds; its tensors are same_rows') */
    {"gguf/qwen2-moe-tiny-bf16.gguf", "llama/qwen2-moe-tiny-bf16", "qwen2-moe-tiny", NULL, 1e-6, 1,
     1e-6, 1},
    {"gguf/qwen3-moe-tiny-bf16.gguf", "llama/qwen3-moe-tiny-bf16", "qwen3-moe-tiny", NULL, 1e-6, 1,
     1e-6, 1},
    {"gguf/gemma-tiny-bf16.gguf", "llama/gemma-tiny-bf16", "gemma-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/gemma2-tiny-bf16.gguf", "llama/gemma2-tiny-bf16", "gemma2-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/gemma3-tiny-bf16.gguf", "llama/gemma3-tiny-bf16", "gemma3-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/phi3-tiny-bf16.gguf", "llama/phi3-tiny-bf16", "phi3-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/olmo2-tiny-bf16.gguf", "llama/olmo2-tiny-bf16", "olmo2-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/granite-tiny-bf16.gguf", "llama/granite-tiny-bf16", "granite-tiny", NULL, 1e-6, 1, 1e-6,
     1},
    {"gguf/glm4-tiny-bf16.gguf", "llama/glm4-tiny-bf16", "glm4-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/deepseek-v2-lite-tiny-bf16.gguf", "llama/deepseek-v2-lite-tiny-bf16",
     "deepseek-v2-lite-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/deepseek-v2-lite-tiny-split-bf16.gguf", "llama/deepseek-v2-lite-tiny-bf16",
     "deepseek-v2-lite-tiny", NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/deepseek-v3-tiny-split-bf16.gguf", "llama/deepseek-v3-tiny-bf16", "deepseek-v3-tiny",
     NULL, 1e-6, 1, 1e-6, 1},
    {"gguf/glm4-moe-tiny-bf16.gguf", "llama/glm4-moe-tiny-bf16", "glm4-moe-tiny", NULL, 1e-6, 1,
     1e-6, 1},
    {"gguf/llama3-tiny-bf16.gguf", "llama/llama3-tiny-bf16", "llama3-tiny", NULL, 1e-6, 1, 1e-6,
     1},
    /* rope scaling from the metadata: dropped, each fails (the nmse of a run without it is in
     * docs/import.md) */
    {"gguf/qwen3-yarn-tiny-bf16.gguf", "llama/qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny", NULL, 1e-6,
     1, 1e-6, 1},
    /* every YaRN key away from its default (betas 8 / 2, attention factor 1.25): transformers'
     * logits of that model (make_gguf_yarn_fixtures.py) */
    {"gguf/qwen3-yarn-params-tiny-bf16.gguf", "llama/qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny",
     "gguf/qwen3-yarn-params-tiny.logits.f32", 1e-6, 1, INFINITY, 0},
    {"gguf/phi3-longrope-tiny-bf16.gguf", "llama/phi3-longrope-tiny-bf16", "phi3-longrope-tiny",
     NULL, 1e-6, 1, 1e-6, 1}, /* (12 tokens past 8: the long factors) */
    {"gguf/phi3-longrope-short-tiny-bf16.gguf", "llama/phi3-longrope-short-tiny-bf16",
     "phi3-longrope-short-tiny", NULL, 1e-6, 1, 1e-6, 1}, /* (within 64: the short ones) */
    /* gpt-oss: sinks, biased experts, the clamp (swiglu_clamp_exp), untruncated YaRN */
    {"gguf/gpt-oss-tiny-bf16.gguf", "llama/gpt-oss-tiny-bf16", "gpt-oss-tiny", NULL, 1e-6, 1, 1e-6,
     1},
    {"gguf/gpt-oss-tiny-fused-bf16.gguf", "llama/gpt-oss-tiny-bf16", "gpt-oss-tiny", NULL, 1e-6, 1,
     1e-6, 1},
    {"gguf/gpt-oss-mxfp4-tiny.gguf", "llama/gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny", NULL, 1e-6,
     1, 1e-6, 1},
    {"gguf/gpt-oss-mxfp4-tiny-fused.gguf", "llama/gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny", NULL,
     1e-6, 1, 1e-6, 1},
    /* Q8_0 experts and router against the BF16 source (no dequantized reference without torch
     * here): the quantization's own loss, 8.2e-4 measured; the greedy tokens part at token 3 */
    {"gguf/qwen3-moe-tiny-q8_0.gguf", "llama/qwen3-moe-tiny-bf16", "qwen3-moe-tiny", NULL, 2e-3,
     0.9, 2e-3, 0},
    /* Q4_K + Q6_K (a model of its own: transformers' logits on its dequantized weights only) */
    {"gguf/llama-k-tiny.gguf", "llama/llama2-tiny-f32", "llama2-tiny",
     "gguf/llama-k-tiny.logits.f32", 1e-5, 1, INFINITY, 0},
};

static void engine_logits(fg_engine *e, const ref *r, double *nmse, double *agree)
{
    int32_t seqs[3][12];
    const int32_t *win[3];
    uint32_t lens[3];
    for (int b = 0; b < 3; b++) {
        lens[b] = 0;
        for (int t = 0; t < 12; t++)
            if (r->mask[b][t])
                seqs[b][lens[b]++] = r->ids[b][t];
        win[b] = seqs[b];
    }
    float *out = calloc(36 * 512, 4);
    fg_err err;
    ck_assert_msg(fg_engine_logits(e, win, lens, 3, NULL, NULL, out, 12 * 512, &err) == 0, "%s",
                  err.msg);
    double num = 0, den = 0;
    int n = 0, same = 0;
    for (int b = 0; b < 3; b++)
        for (uint32_t t = 0, pad = 12 - lens[b]; t < lens[b]; t++, n++) {
            const float *mine = out + (b * 12 + t) * 512, *want = r->logits + (b * 12 + pad + t) * 512;
            for (int v = 0; v < 512; v++)
                num += (mine[v] - want[v]) * (double)(mine[v] - want[v]),
                den += (double)want[v] * want[v];
            same += argmax(mine, 512) == argmax(want, 512);
        }
    *nmse = num / den;
    *agree = (double)same / n;
    free(out);
}

START_TEST(test_logits)
{
    const struct logit_row *row = &logit_rows[_i];
    ref r;
    load_ref(row->ref, &r);
    const char *dir = convert(fx(row->gguf), fx(row->ckpt), "store");
    fg_store *s;
    fg_model *m;
    fg_engine *e;
    fg_err err;
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.threads = 1;
    o.max_ctx = 64;
    ck_assert_int_eq(fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, &err), 0);
    ck_assert_msg(fg_model_open(s, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(fg_engine_open(m, &o, &e, &err) == 0, "%s", err.msg);
    double nmse, agree, src_nmse, src_agree;
    engine_logits(e, &r, &src_nmse, &src_agree);
    if (row->dq) {
        size_t len;
        free(r.logits);
        r.logits = (float *)(void *)tu_slurp(fx(row->dq), &len);
        ck_assert_uint_eq(len, 36 * 512 * 4);
        engine_logits(e, &r, &nmse, &agree);
    } else {
        nmse = src_nmse, agree = src_agree;
    }
    fprintf(stderr, "%s: nmse %.3g (argmax agreement %.3f) against %s", row->gguf, nmse, agree,
            row->dq ? row->dq : "transformers on the source");
    if (row->dq && isfinite(row->src_nmse))
        fprintf(stderr, "; %.3g (%.3f) against transformers on the source", src_nmse, src_agree);
    fprintf(stderr, "\n");
    ck_assert_msg(nmse <= row->max_nmse && agree >= row->min_agree && src_nmse <= row->src_nmse,
                  "%s: nmse %g agree %g; against the source %g", row->gguf, nmse, agree, src_nmse);
    if (row->greedy) {
        int32_t out[64];
        fg_gen_seq q = {r.prompt, r.n_prompt, r.n_greedy, {0, 0, 1, 0}, 0, out, 0, 0, 1};
        fg_gen_stats st;
        ck_assert_msg(fg_engine_generate(e, &q, 1, NULL, &st, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(q.n_out, r.n_greedy);
        for (uint32_t i = 0; i < r.n_greedy; i++)
            ck_assert_msg(out[i] == r.greedy[i], "token %u: %d vs %d", i, out[i], r.greedy[i]);
    }
    ck_assert_int_eq(fg_engine_close(e, NULL), 0);
    fg_model_close(m);
    fg_store_close(s);
    free(r.logits);
}
END_TEST

/* Q8_0 and Q4_0 stored as fg's Q8 / Q4 groups of 32 along the row (--compress-weight 8 or 4
 * --group-size 32 --group-axis 1): the blocks mapped, not re-quantized (ck_qread), so the
 * engine's logits are transformers' on gguf-py's dequantized weights up to arithmetic (the F16
 * path: Q8_0 3e-6, its products rounded to F16). */
static const struct lossless_row { const char *gguf, *dq; int bits; uint8_t codec; }
lossless_rows[] = {
    {"gguf/llama2-tiny-q8_0.gguf", "gguf/llama2-tiny-q8_0.logits.f32", 8, FG_CODEC_Q8},
    {"gguf/llama2-tiny-q4_0.gguf", "gguf/llama2-tiny-q4_0.logits.f32", 4, FG_CODEC_Q4},
};

static int codec_of(void *ctx, const fg_store_tensor *t)
{
    if (!strcmp(t->name, "model.layers.0.self_attn.q_proj.weight"))
        *(fg_codec *)ctx = t->codec;
    return 0;
}

START_TEST(test_lossless)
{
    const struct lossless_row *row = &lossless_rows[_i];
    ref r;
    load_ref("llama2-tiny", &r);
    size_t len;
    free(r.logits);
    r.logits = (float *)(void *)tu_slurp(fx(row->dq), &len);
    const char *dir = tu_path("store");
    fg_convert_opts co = {row->bits, 32, 1, fx("llama/llama2-tiny-f32"), 4096, NULL, NULL};
    fg_convert_report rep;
    fg_store *s;
    fg_model *m;
    fg_engine *e;
    fg_err err;
    ck_assert_msg(fg_convert_import(fx(row->gguf), dir, &co, &rep, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, &err), 0);
    fg_codec c = {0};
    ck_assert_int_eq(fg_store_tensor_iter(s, codec_of, &c, &err), 0);
    ck_assert(c.id == row->codec && c.group_size == 32 && c.group_axis == 1);
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.threads = 1;
    o.max_ctx = 64;
    ck_assert_msg(fg_model_open(s, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(fg_engine_open(m, &o, &e, &err) == 0, "%s", err.msg);
    double nmse, agree;
    engine_logits(e, &r, &nmse, &agree);
    fprintf(stderr, "%s as %s groups of 32: nmse %.3g against the dequantized weights\n",
            row->gguf, row->bits == 8 ? "Q8" : "Q4", nmse);
    ck_assert_msg(nmse <= 1e-10 && agree == 1, "%s: nmse %g", row->gguf, nmse);
    ck_assert_int_eq(fg_engine_close(e, NULL), 0);
    fg_model_close(m);
    fg_store_close(s);
    free(r.logits);
}
END_TEST

/* Files the reader accepts but the import refuses, in one line naming what. LLAMA_KEYS: the
 * five required keys (2 layers of 32, 4 heads, 64 positions, ffn 128); EMB_TI: an F32 token_embd
 * [16, 32] (a rope factor vector [16] before it); OSS_KEYS: gpt-oss's required keys (8) */
#define LLAMA_KEYS "s:llama.block_count u32:4 u32:2 s:llama.embedding_length u32:4 u32:32 " \
    "s:llama.attention.head_count u32:4 u32:4 s:llama.context_length u32:4 u32:64 " \
    "s:llama.feed_forward_length u32:4 u32:128 "
#define EMB_TI "s:token_embd.weight u32:2 u64:32 u64:16 u32:0 u64:0 pad z:2048"
#define OSS_KEYS "s:gpt-oss.block_count u32:4 u32:2 s:gpt-oss.embedding_length u32:4 u32:32 " \
    "s:gpt-oss.attention.head_count u32:4 u32:4 s:gpt-oss.context_length u32:4 u32:64 " \
    "s:gpt-oss.feed_forward_length u32:4 u32:32 s:gpt-oss.expert_count u32:4 u32:4 " \
    "s:gpt-oss.expert_used_count u32:4 u32:2 s:gpt-oss.expert_feed_forward_length u32:4 u32:32 "
static const struct refuse_row { const char *prog; int tok; const char *msg, *fixture; }
refuse_rows[] = {
    {NULL, 0, "no tokenizer.ggml.model: name the directory of the model's tokenizer.json with "
              "--tokenizer DIR"},
    {HDR(1, 1) "s:general.architecture u32:8 s:gpt2 " TI_F32("token_embd.weight", 32, 0)
     "pad z:128", 1, "general.architecture 'gpt2': fg maps llama (mistral), qwen2, qwen3, "
     "qwen2moe, qwen3moe, gemma, gemma2, gemma3, phi3, olmo2, granite, glm4, glm4moe, "
     "deepseek2 and gpt-oss"},
    {HDR(1, 1) ARCH "s:blk.0.ffn_down.weight u32:2 u64:256 u64:2 u32:16 u64:0 pad z:160", 1,
     "tensor blk.0.ffn_down.weight is IQ2_XXS, which fg does not read yet"},
    {HDR(1, 2) ARCH "s:llama.expert_count u32:4 u32:8 "
     "s:token_embd.weight u32:2 u64:32 u64:2 u32:0 u64:0 pad z:256", 1,
     "metadata llama.expert_count: fg maps GGUF mixtures of experts for qwen2moe, qwen3moe, "
     "glm4moe, deepseek2 and gpt-oss"},
    {HDR(1, 1) ARCH "s:token_embd.weight u32:2 u64:32 u64:2 u32:0 u64:0 pad z:256", 1,
     "metadata llama.block_count is missing"},
    {HDR(1, 2) ARCH "s:llama.rope.scaling.type u32:8 s:longrope "
     "s:token_embd.weight u32:2 u64:32 u64:2 u32:0 u64:0 pad z:256", 1,
     "metadata llama.rope.scaling.type is 'longrope': fg maps GGUF rope scaling 'linear' and "
     "'yarn'"},
    /* YaRN: what transformers has no counterpart for, or a key missing */
    {HDR(1, 10) ARCH LLAMA_KEYS "s:llama.rope.scaling.type u32:8 s:yarn "
     "s:llama.rope.scaling.factor u32:6 u32:0x40800000 "
     "s:llama.rope.scaling.original_context_length u32:4 u32:32 "
     "s:llama.rope.scaling.yarn_ext_factor u32:6 u32:0x3f000000 " EMB_TI, 1,
     "metadata llama.rope.scaling.yarn_ext_factor is 0.5: fg maps GGUF YaRN with an "
     "extrapolation factor of 1 only"},
    {HDR(1, 8) ARCH LLAMA_KEYS "s:llama.rope.scaling.type u32:8 s:yarn "
     "s:llama.rope.scaling.factor u32:6 u32:0x40800000 " EMB_TI, 1,
     "metadata llama.rope.scaling.original_context_length is missing"},
    /* rope factors on an architecture that has none; Phi-3's long without its short */
    {HDR(2, 6) ARCH LLAMA_KEYS "s:rope_factors_long.weight u32:1 u64:16 u32:0 u64:0 "
     "s:token_embd.weight u32:2 u64:32 u64:16 u32:0 u64:64 pad z:2112", 1,
     "tensor rope_factors_long.weight: fg maps GGUF rope factors long and short together for "
     "phi3"},
    /* gpt-oss: a clamp per layer that differs; fused experts with odd rows */
    {HDR(1, 10) "s:general.architecture u32:8 s:gpt-oss " OSS_KEYS
     "s:gpt-oss.swiglu_clamp_exp u32:9 u32:6 u64:2 u32:0x40e00000 u32:0x40000000 " EMB_TI, 1,
     "metadata gpt-oss.swiglu_clamp_exp must hold one positive value for every layer"},
    {HDR(1, 1) "s:general.architecture u32:8 s:gpt-oss "
     "s:blk.0.ffn_gate_up_exps.weight u32:3 u64:32 u64:3 u64:2 u32:0 u64:0 pad z:768", 1,
     "tensor blk.0.ffn_gate_up_exps.weight must be [experts, rows, cols] with as many gate as up "
     "rows"},
    {HDR(1, 1) ARCH "s:blk.0.ffn_up_exps.weight u32:3 u64:1 u64:1 u64:5000 u32:0 u64:0 pad "
     "z:20000", 1, "tensor blk.0.ffn_up_exps.weight: 5000 experts (limit 4096)"},
    {NULL, 1, "part 2 of 3 of a split GGUF file: name its first part (-00001-of-00003.gguf)",
     "gguf/llama2-tiny-q4_0-split-00002-of-00003.gguf"},
    {HDR(0, 2) ARCH "s:split.count u32:2 u16:3", 1, "metadata split.count is 3: a part of a "
     "split GGUF file, but not named <prefix>-00001-of-00003.gguf"},
    /* deepseek2's split kv_b_proj: a half alone, halves that do not pair up */
    {HDR(1, 1) "s:general.architecture u32:8 s:deepseek2 "
     "s:blk.0.attn_k_b.weight u32:3 u64:2 u64:4 u64:2 u32:0 u64:0 pad z:64", 1,
     "tensor blk.0.attn_k_b.weight without blk.0.attn_v_b.weight"},
    {HDR(2, 1) "s:general.architecture u32:8 s:deepseek2 "
     "s:blk.0.attn_v_b.weight u32:3 u64:5 u64:3 u64:2 u32:0 u64:0 "
     "s:blk.0.attn_k_b.weight u32:3 u64:2 u64:4 u64:2 u32:0 u64:128 pad z:192", 1,
     "tensors blk.0.attn_k_b.weight and blk.0.attn_v_b.weight are not [heads, kv_lora, nope] "
     "and [heads, v, kv_lora]"},
};

START_TEST(test_refuse)
{
    const struct refuse_row *row = &refuse_rows[_i];
    char src[4096];
    snprintf(src, sizeof src, "%s", row->prog ? tu_path("bad.gguf")
                                   : fx(row->fixture ? row->fixture : "gguf/llama2-tiny-f16.gguf"));
    if (row->prog) {
        size_t n;
        uint8_t *p = assemble(row->prog, &n);
        FILE *f = fopen(src, "wb");
        ck_assert(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
        free(p);
    }
    fg_convert_opts o = {0, 64, -1, row->tok ? fx("llama/llama2-tiny-f32") : NULL, 4096, NULL,
                         NULL};
    fg_err err = {0};
    const char *dst = tu_path("refused");
    ck_assert_int_ne(fg_convert_import(src, dst, &o, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, row->msg) && !strncmp(err.msg, src, strlen(src)),
                  "message '%s' lacks '%s'", err.msg, row->msg);
    ck_assert_int_ne(access(dst, F_OK), 0); /* no half store left */
}
END_TEST

/* A split file with a part missing or from another file names the part. */
START_TEST(test_split_parts)
{
    char from[128], to[4096];
    for (int k = 1; k <= 3; k++) {
        snprintf(from, sizeof from, "gguf/llama2-tiny-q4_0-split-%05d-of-00003.gguf", k);
        snprintf(to, sizeof to, "m-%05d-of-00003.gguf", k);
        size_t n;
        char *b = tu_slurp(fx(from), &n);
        FILE *f = fopen(tu_path(to), "wb");
        ck_assert(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
        free(b);
    }
    snprintf(to, sizeof to, "%s", tu_path("m-00001-of-00003.gguf"));
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(to, &ck, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(fg_ckpt_file_count(ck), 3);
    ck_assert_uint_eq(fg_ckpt_count(ck), 21);
    fg_ckpt_close(ck);
    /* part 2 replaced by part 3: its split.no says so */
    ck_assert_int_eq(rename(tu_path("m-00003-of-00003.gguf"), tu_path("m-00002-of-00003.gguf")), 0);
    ck_assert_int_ne(fg_ckpt_open(to, &ck, &err), 0);
    ck_assert_msg(strstr(err.msg, "m-00002-of-00003.gguf: metadata split.no / split.count are "
                         "not 1 / 3 (part 2 of 3 by its name)"), "%s", err.msg);
    ck_assert_int_eq(unlink(tu_path("m-00002-of-00003.gguf")), 0);
    ck_assert_int_ne(fg_ckpt_open(to, &ck, &err), 0);
    ck_assert_msg(strstr(err.msg, "m-00002-of-00003.gguf"), "%s", err.msg);
}
END_TEST

/* ---- the tokenizer from the metadata ---- */

/* g's tokenizer (ck_gguf_tokenizer) loaded as the import loads it; FG_OK or the error */
static int gguf_tok_load(const char *rel, fg_tok **tok, char **cfg, fg_err *err)
{
    const char *path = fx(rel);
    int fd = open(path, O_RDONLY);
    struct stat st;
    ck_assert(fd >= 0 && fstat(fd, &st) == 0);
    ck_src src = {.fd = fd, .size = (uint64_t)st.st_size, .label = path};
    ck_gguf g;
    char *json = NULL;
    size_t jn = 0, cn = 0;
    (void)jn, (void)cn;
    int rc = ck_gguf_parse(&src, &g, err);
    ck_assert_msg(rc == FG_OK, "%s", err->msg);
    rc = ck_gguf_tokenizer(&g, &src, &json, &jn, cfg, &cn, tok, err);
    free(json);
    ck_gguf_free(&g);
    close(fd);
    return rc;
}

/* Every line of text (and the text in 2,000-byte pieces) encoded by both, three ways */
static size_t same_ids(fg_tok *a, fg_tok *b, const char *text, size_t len)
{
    static const unsigned fl[3] = {FG_TOK_SPECIAL, 0, FG_TOK_SPECIAL | FG_TOK_ADD_BOS};
    fg_tok_ids x = {0}, y = {0};
    size_t n = 0;
    for (size_t at = 0, end; at < len; at = end + 1, n++) {
        const char *nl = memchr(text + at, '\n', len - at);
        end = nl ? (size_t)(nl - text) : len;
        size_t m = n % 8 == 7 && len - at > 2000 ? 2000 : end - at;
        for (int j = 0; j < 3; j++) {
            x.n = y.n = 0;
            ck_assert_int_eq(fg_tok_encode(a, text + at, m, fl[j], &x, NULL), FG_OK);
            ck_assert_int_eq(fg_tok_encode(b, text + at, m, fl[j], &y, NULL), FG_OK);
            for (size_t k = 0; (x.n != y.n || memcmp(x.ids, y.ids, x.n * sizeof *x.ids)) &&
                               k < (x.n > y.n ? x.n : y.n); k++) /* (where they part) */
                fprintf(stderr, "%zu: %d %d\n", k, k < x.n ? x.ids[k] : -1,
                        k < y.n ? y.ids[k] : -1);
            ck_assert_msg(x.n == y.n && !memcmp(x.ids, y.ids, x.n * sizeof *x.ids),
                          "ids differ (flags %u) on \"%.*s\"", fl[j], (int)(m > 80 ? 80 : m),
                          text + at);
        }
    }
    fg_tok_ids_free(&x);
    fg_tok_ids_free(&y);
    return n;
}

static const struct tok_row { const char *gguf, *dir; int template; } tok_rows[] = {
    {"gguf/tok-llama2.gguf", "tokjson/llama2", 0}, /* SentencePiece: merges from the scores */
    {"gguf/tok-llama3.gguf", "tokjson/llama3", 0},
    {"gguf/tok-qwen2.gguf", "tokjson/qwen2", 1},
};

/* dir's tokenizer.json as GGUF can carry it: an added token's lstrip, rstrip and single_word
 * (which tokenizer.ggml.* has no place for) false; with dir's tokenizer_config.json */
static fg_tok *load_carried(const char *dir)
{
    static const char *const keys[] = {"\"lstrip\": true", "\"rstrip\": true",
                                       "\"single_word\": true"};
    char path[4096];
    size_t n, cn, o = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *in = tu_slurp(path, &n), *out = malloc(2 * n + 1);
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        while (k < 3 && strncmp(in + i, keys[k], strlen(keys[k])) != 0)
            k++;
        if (k < 3) {
            size_t key = strlen(keys[k]) - 4; /* up to "true" */
            memcpy(out + o, in + i, key);
            memcpy(out + o + key, "false", 5);
            o += key + 5, i += key + 4;
        } else {
            out[o++] = in[i++];
        }
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *cfg = tu_slurp(path, &cn);
    fg_tok_json_files f = {out, o, NULL, cfg, cn, NULL, NULL, 0, NULL, NULL};
    fg_tok *tok = NULL;
    fg_err err;
    ck_assert_msg(fg_tok_load_json_mem(&f, &tok, &err) == FG_OK, "%s", err.msg);
    free(in), free(out), free(cfg);
    return tok;
}

START_TEST(test_tokenizer)
{
    const struct tok_row *row = &tok_rows[_i];
    fg_tok *mine = NULL, *want = NULL;
    char *cfg = NULL, path[4096];
    fg_err err;
    ck_assert_msg(gguf_tok_load(row->gguf, &mine, &cfg, &err) == FG_OK, "%s", err.msg);
    want = load_carried(fx(row->dir));
    ck_assert_str_eq(fg_tok_class(mine), fg_tok_class(want));
    ck_assert_int_eq(fg_tok_vocab_size(mine), fg_tok_vocab_size(want));
    ck_assert_int_eq(fg_tok_adds_bos(mine), fg_tok_adds_bos(want));
    for (int r = FG_TOK_BOS; r <= FG_TOK_PAD; r++)
        ck_assert_int_eq(fg_tok_special_id(mine, (fg_tok_role)r),
                         fg_tok_special_id(want, (fg_tok_role)r));
    snprintf(path, sizeof path, "%s/cases.txt", fx(row->dir));
    size_t len;
    char *text = tu_slurp(path, &len);
    ck_assert_uint_ge(same_ids(mine, want, text, len), 1000);
    ck_assert_int_eq(!!strstr(cfg, "\"chat_template\":\"{% for m in messages %}"), row->template);
    free(text);
    free(cfg);
    fg_tok_free(mine);
    fg_tok_free(want);
}
END_TEST

/* ---- a GGUF tokenizer against what Hugging Face tokenizers did with the same vocabulary ---- */

/* A case file record's "TAG n\n<n bytes>\n" (its bytes, length into *n) or "TAG=\n" (NULL) */
static const char *case_bytes(char **p, char tag, size_t *n)
{
    char *c = *p;
    ck_assert_int_eq(c[0], tag);
    if (c[1] == '=') {
        *p = c + 3;
        return NULL;
    }
    *n = strtoul(c + 2, &c, 10);
    ck_assert_int_eq(c[*n + 1], '\n');
    *p = c + *n + 2;
    return c + 1;
}

/* "TAG id id ...\n" into v (1), or "TAG=\n" (0: as the record's I line) */
static int case_ids(char **p, char tag, fg_tok_ids *v)
{
    char *c = *p, *nl = strchr(c, '\n');
    ck_assert(nl && c[0] == tag);
    *p = nl + 1;
    if (c[1] == '=')
        return 0;
    v->n = 0;
    for (c++; c < nl; v->n++) {
        if (v->n == v->cap)
            v->ids = realloc(v->ids, (v->cap = v->cap ? 2 * v->cap : 256) * sizeof *v->ids);
        v->ids[v->n] = (int32_t)strtol(c, &c, 10);
    }
    return 1;
}

static int same(const fg_tok_ids *a, const fg_tok_ids *b)
{
    return a->n == b->n && (!a->n || !memcmp(a->ids, b->ids, a->n * sizeof *a->ids));
}

/* Every record of the case file: encode with special tokens matched (I), not matched (P) and
 * with the template (B), decode of I's ids (D; S with special tokens skipped); the count */
static size_t check_cases(fg_tok *tok, char *c, const char *end)
{
    static const unsigned fl[3] = {FG_TOK_SPECIAL, 0, FG_TOK_SPECIAL | FG_TOK_ADD_BOS};
    fg_tok_ids want[3] = {{0}}, got = {0};
    fg_tok_bytes dec = {0};
    size_t n = 0, tn = 0, dn = 0, sn = 0;
    for (; c < end; n++) {
        const char *text = case_bytes(&c, 'T', &tn);
        const fg_tok_ids *w[3];
        for (int j = 0; j < 3; j++)
            w[j] = case_ids(&c, "IPB"[j], &want[j]) ? &want[j] : &want[0];
        for (int j = 0; j < 3; j++) {
            got.n = 0;
            ck_assert_int_eq(fg_tok_encode(tok, text, tn, fl[j], &got, NULL), FG_OK);
            ck_assert_msg(same(&got, w[j]), "case %zu (%c): ids differ on \"%.*s\"", n,
                          "IPB"[j], (int)(tn > 80 ? 80 : tn), text);
        }
        const char *d = case_bytes(&c, 'D', &dn), *sk = case_bytes(&c, 'S', &sn);
        d = d ? d : text, dn = d == text ? tn : dn;
        sk = sk ? sk : d, sn = sk == d ? dn : sn;
        for (int j = 0; j < 2; j++) {
            dec.len = 0;
            ck_assert_int_eq(fg_tok_decode(tok, want[0].ids, want[0].n, FG_TOK_REPLACE_INVALID |
                                           (j ? FG_TOK_SKIP_SPECIAL : 0), &dec, NULL), FG_OK);
            ck_assert_msg(dec.len == (j ? sn : dn) &&
                              (!dec.len || !memcmp(dec.data, j ? sk : d, dec.len)),
                          "case %zu: decode%s differs", n, j ? " (skip special)" : "");
        }
        ck_assert_int_eq(*c++, '\n');
    }
    for (int j = 0; j < 3; j++)
        fg_tok_ids_free(&want[j]);
    fg_tok_ids_free(&got);
    fg_tok_bytes_free(&dec);
    return n;
}

START_TEST(test_tokenizer_hf)
{
    fg_tok *tok = NULL;
    char *cfg = NULL;
    size_t len;
    fg_err err;
    int bos, eos, pad;
    ck_assert_msg(gguf_tok_load("gguf/tok-gpt4o.gguf", &tok, &cfg, &err) == FG_OK, "%s", err.msg);
    char *buf = tu_slurp(fx("gguf/tok-gpt4o.cases"), &len), *c = strchr(buf, '\n') + 1;
    ck_assert_int_eq(sscanf(c, "# roles bos %d eos %d pad %d", &bos, &eos, &pad), 3);
    ck_assert_int_eq(fg_tok_special_id(tok, FG_TOK_BOS), bos);
    ck_assert_int_eq(fg_tok_special_id(tok, FG_TOK_EOS), eos);
    ck_assert_int_eq(fg_tok_special_id(tok, FG_TOK_PAD), pad);
    ck_assert_int_eq(fg_tok_adds_bos(tok), 0);
    ck_assert_uint_ge(check_cases(tok, strchr(c, '\n') + 1, buf + len), 1000);
    free(buf);
    free(cfg);
    fg_tok_free(tok);
}
END_TEST

static const struct tok_bad { const char *gguf, *msg; } tok_bad[] = {
    {"gguf/tok-bad-type.gguf", "tok-bad-type.gguf: tokenizer.ggml.tokens is of the wrong type (an "
     "array of strings)"},
    {"gguf/tok-bad-merge.gguf", "tok-bad-merge.gguf: tokenizer.ggml.* as tokenizer.json: "
     "model.merges[5]: token \"Zq\xc3\xa9\" is not in the vocabulary"},
    {"gguf/llama2-tiny-f16.gguf", "llama2-tiny-f16.gguf: no tokenizer.ggml.model"},
};

START_TEST(test_tokenizer_bad)
{
    fg_tok *tok = NULL;
    char *cfg = NULL;
    fg_err err = {0};
    ck_assert_int_ne(gguf_tok_load(tok_bad[_i].gguf, &tok, &cfg, &err), FG_OK);
    ck_assert_msg(strstr(err.msg, tok_bad[_i].msg) && !strchr(err.msg, '\n'), "'%s' lacks '%s'",
                  err.msg, tok_bad[_i].msg);
    free(cfg);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_hostile, 0, sizeof hostile / sizeof hostile[0]);
    tcase_add_test(tc, test_metadata);
    tcase_add_test(tc, test_names);
    tcase_add_loop_test(tc, test_dequant, 0, sizeof dq_rows / sizeof dq_rows[0]);
    tcase_add_loop_test(tc, test_dequant_types, 0, sizeof type_rows / sizeof type_rows[0]);
    tcase_add_test(tc, test_split_parts);
    tcase_add_loop_test(tc, test_tokenizer, 0, sizeof tok_rows / sizeof tok_rows[0]);
    tcase_add_test(tc, test_tokenizer_hf);
    tcase_add_loop_test(tc, test_tokenizer_bad, 0, sizeof tok_bad / sizeof tok_bad[0]);
    suite_add_tcase(s, tc);
    tc = tcase_create("import");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_same_store, 0, sizeof same_rows / sizeof same_rows[0]);
    tcase_add_loop_test(tc, test_logits, 0, sizeof logit_rows / sizeof logit_rows[0]);
    tcase_add_loop_test(tc, test_lossless, 0, sizeof lossless_rows / sizeof lossless_rows[0]);
    tcase_add_loop_test(tc, test_refuse, 0, sizeof refuse_rows / sizeof refuse_rows[0]);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
