/* synth.c - fg_convert_synth: random weights at a real model's shape (OPT, Llama 2/3, Mistral,
 * Qwen2.5, Qwen3, Phi, Gemma 2 and 3, and the mixtures of experts Mixtral, Qwen1.5-MoE,
 * Qwen3-MoE, DeepSeek-V2-Lite and DeepSeek-V3), written straight into a store for benchmarks (no checkpoint needed). The shape's
 * config.json is written and parsed by model/'s table, which lists the tensors. Values are
 * deterministic in (seed, tensor index, element): norm weights 1, biases 0, matrices uniform
 * with the standard deviation of the usual init (0.02), drawn into a 64 Ki-element block per
 * tensor that the tensor's elements repeat at pseudo-random rotations, so producing the data
 * costs far less than writing it. OPT shapes are F16 as OPT ships; the others BF16.
 *
 * --zero-weights (o->zero_weights) writes every matrix and bias as zeros left as holes in
 * sparse files (format/'s add_chunk with no data: nothing written, no disk space, the zero
 * chunk's checksum computed once a size), norms still 1, and marks the store (metadata
 * FG_SYNTH_WEIGHTS_KEY = "zero", which fg-inspect shows): a store of any size, DeepSeek-V3's
 * 671B included, for --dry-run plans. It is a valid store and a run may read it: a hole reads
 * as zero bytes, which checksum as written and decode to 0 in every codec (x = min + code x
 * scale), so the engine computes on zeros; only the run's read times are not a real model's
 * (holes cost no disk I/O). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert_int.h"
#include "quant.h"

typedef struct shape {
    const char *name;
    uint32_t hidden, layers, heads, ffn, embed_proj;
    int pre_ln;
} shape;

/* Llama-family shapes: the fields of their published config.json files. */
typedef struct lshape {
    const char *name, *type;
    uint32_t vocab, hidden, layers, heads, kv_heads, ffn, max_pos;
    double theta;
    int tied, qkv_bias;
    uint32_t window;          /* mistral's sliding_window (0: none) */
    const char *extra;        /* more config.json members, or "" */
    int32_t bos, eos;
} lshape;

static const lshape k_llama[] = {
    {"llama-2-7b", "llama", 32000, 4096, 32, 32, 32, 11008, 4096, 1e4, 0, 0, 0, "", 1, 2},
    {"llama-3.2-1b", "llama", 128256, 2048, 16, 32, 8, 8192, 131072, 5e5, 1, 0, 0,
     ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
     "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", 128000, 128001},
    {"llama-3-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 8192, 5e5, 0, 0, 0, "", 128000,
     128001},
    {"llama-3-70b", "llama", 128256, 8192, 80, 64, 8, 28672, 8192, 5e5, 0, 0, 0, "", 128000,
     128001},
    {"mistral-7b", "mistral", 32000, 4096, 32, 32, 8, 14336, 32768, 1e4, 0, 0, 4096, "", 1, 2},
    {"qwen2.5-7b", "qwen2", 152064, 3584, 28, 28, 4, 18944, 32768, 1e6, 0, 1, 0,
     ", \"use_sliding_window\": false, \"sliding_window\": 131072", 151643, 151645},
    {"qwen2.5-72b", "qwen2", 152064, 8192, 80, 64, 8, 29568, 32768, 1e6, 0, 1, 0,
     ", \"use_sliding_window\": false, \"sliding_window\": 131072", 151643, 151645},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 3072, 40960, 1e6, 1, 0, 0,
     ", \"head_dim\": 128, \"use_sliding_window\": false", 151643, 151645},
    {"qwen3-8b", "qwen3", 151936, 4096, 36, 32, 8, 12288, 40960, 1e6, 0, 0, 0,
     ", \"head_dim\": 128, \"use_sliding_window\": false", 151643, 151645},
    {"qwen3-32b", "qwen3", 151936, 5120, 64, 64, 8, 25600, 40960, 1e6, 0, 0, 0,
     ", \"head_dim\": 128, \"use_sliding_window\": false", 151643, 151645},
    {"phi-3-mini", "phi3", 32064, 3072, 32, 32, 32, 8192, 4096, 1e4, 0, 0, 2047,
     ", \"original_max_position_embeddings\": 4096", 1, 32000},
    {"phi-4", "phi3", 100352, 5120, 40, 40, 10, 17920, 16384, 2.5e5, 0, 0, 0,
     ", \"original_max_position_embeddings\": 16384", 100257, 100265},
    {"gemma-3-1b", "gemma3_text", 262144, 1152, 26, 4, 1, 6912, 32768, 1e6, 1, 0, 512,
     ", \"head_dim\": 256, \"query_pre_attn_scalar\": 256, \"rope_local_base_freq\": 10000.0, "
     "\"hidden_activation\": \"gelu_pytorch_tanh\"", 2, 1},
    {"gemma-2b", "gemma", 256000, 2048, 18, 8, 1, 16384, 8192, 1e4, 1, 0, 0,
     ", \"head_dim\": 256", 2, 1},
    {"gemma-7b", "gemma", 256000, 3072, 28, 16, 16, 24576, 8192, 1e4, 1, 0, 0,
     ", \"head_dim\": 256", 2, 1},
#define GEMMA2_KEYS                                                                             \
    ", \"head_dim\": 256, \"query_pre_attn_scalar\": 256, "                                   \
    "\"hidden_activation\": \"gelu_pytorch_tanh\", \"attn_logit_softcapping\": 50.0, "          \
    "\"final_logit_softcapping\": 30.0"
    {"gemma-2-2b", "gemma2", 256000, 2304, 26, 8, 4, 9216, 8192, 1e4, 1, 0, 4096, GEMMA2_KEYS, 2,
     1},
    {"gemma-2-9b", "gemma2", 256000, 3584, 42, 16, 8, 14336, 8192, 1e4, 1, 0, 4096, GEMMA2_KEYS,
     2, 1},
#undef GEMMA2_KEYS
    /* mixtures of experts: the experts' gate/up/down stacked as fg-convert stores them */
    {"mixtral-8x7b", "mixtral", 32000, 4096, 32, 32, 8, 14336, 32768, 1e6, 0, 0, 0,
     ", \"num_local_experts\": 8, \"num_experts_per_tok\": 2", 1, 2},
    {"qwen1.5-moe-a2.7b", "qwen2_moe", 151936, 2048, 24, 16, 16, 5632, 8192, 1e6, 0, 1, 0,
     ", \"moe_intermediate_size\": 1408, \"shared_expert_intermediate_size\": 5632, "
     "\"num_experts\": 60, \"num_experts_per_tok\": 4, \"norm_topk_prob\": false, "
     "\"use_sliding_window\": false", 151643, 151643},
    {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 48, 32, 4, 6144, 40960, 1e6, 0, 0, 0,
     ", \"head_dim\": 128, \"moe_intermediate_size\": 768, \"num_experts\": 128, "
     "\"num_experts_per_tok\": 8, \"norm_topk_prob\": true, \"use_sliding_window\": false",
     151643, 151645},
    {"qwen3-235b-a22b", "qwen3_moe", 151936, 4096, 94, 64, 4, 12288, 40960, 1e6, 0, 0, 0,
     ", \"head_dim\": 128, \"moe_intermediate_size\": 1536, \"num_experts\": 128, "
     "\"num_experts_per_tok\": 8, \"norm_topk_prob\": true, \"use_sliding_window\": false",
     151643, 151645},
    {"glm-4.5-air", "glm4_moe", 151552, 4096, 46, 96, 8, 10944, 131072, 1e6, 0, 0, 0,
     ", \"head_dim\": 128, \"partial_rotary_factor\": 0.5, \"attention_bias\": true, "
     "\"n_routed_experts\": 128, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 1408, "
     "\"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"routed_scaling_factor\": 1.0, "
     "\"num_nextn_predict_layers\": 1", 151329, 151329},
    {"minimax-m2", "minimax_m2", 200064, 3072, 62, 48, 8, 1536, 196608, 5e6, 0, 0, 0,
     ", \"head_dim\": 128, \"rotary_dim\": 64, \"num_local_experts\": 256, "
     "\"num_experts_per_tok\": 8", 200034, 200020},
#define GPT_OSS_KEYS(experts)                                                                   \
    ", \"head_dim\": 64, \"num_local_experts\": " #experts ", \"num_experts_per_tok\": 4, "     \
    "\"attention_bias\": true, \"swiglu_limit\": 7.0, \"rope_scaling\": {\"rope_type\": "       \
    "\"yarn\", \"factor\": 32.0, \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"truncate\": false, " \
    "\"original_max_position_embeddings\": 4096}"
    {"gpt-oss-20b", "gpt_oss", 201088, 2880, 24, 64, 8, 2880, 131072, 1.5e5, 0, 0, 128,
     GPT_OSS_KEYS(32), 199998, 200002},
    {"gpt-oss-120b", "gpt_oss", 201088, 2880, 36, 64, 8, 2880, 131072, 1.5e5, 0, 0, 128,
     GPT_OSS_KEYS(128), 199998, 200002},
#undef GPT_OSS_KEYS
    /* multi-head latent attention: DeepSeek-V2-Lite (16B-A2.4B: no q_lora, the softmax's top 6
     * of 64 experts) and DeepSeek-V3 / R1 (671B-A37B; Kimi K2 is this layer at 384 experts) */
#define DEEPSEEK_MLA(q_lora)                                                                    \
    ", \"q_lora_rank\": " #q_lora ", \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "       \
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"rope_scaling\": {\"type\": \"yarn\", "    \
    "\"factor\": 40, \"beta_fast\": 32, \"beta_slow\": 1, \"original_max_position_embeddings\": " \
    "4096, "
    {"deepseek-v2-lite", "deepseek_v2", 102400, 2048, 27, 16, 16, 10944, 163840, 1e4, 0, 0, 0,
     DEEPSEEK_MLA(null) "\"mscale\": 0.707, \"mscale_all_dim\": 0.707}, \"n_routed_experts\": 64, "
     "\"num_experts_per_tok\": 6, \"moe_intermediate_size\": 1408, \"n_shared_experts\": 2, "
     "\"first_k_dense_replace\": 1, \"topk_method\": \"greedy\", \"n_group\": 1, "
     "\"topk_group\": 1, \"routed_scaling_factor\": 1.0, \"norm_topk_prob\": false",
     100000, 100001},
    {"deepseek-v3", "deepseek_v3", 129280, 7168, 61, 128, 128, 18432, 163840, 1e4, 0, 0, 0,
     DEEPSEEK_MLA(1536) "\"mscale\": 1.0, \"mscale_all_dim\": 1.0}, \"n_routed_experts\": 256, "
     "\"num_experts_per_tok\": 8, \"moe_intermediate_size\": 2048, \"n_shared_experts\": 1, "
     "\"first_k_dense_replace\": 3, \"topk_method\": \"noaux_tc\", \"n_group\": 8, "
     "\"topk_group\": 4, \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true, "
     "\"scoring_func\": \"sigmoid\", \"num_nextn_predict_layers\": 1", 0, 1},
#undef DEEPSEEK_MLA
    /* not a released size: Qwen3-MoE's layer at a 15 MB shape for tests (16 experts, top 4) */
    {"qwen3-moe-tiny", "qwen3_moe", 50272, 64, 2, 4, 2, 128, 2048, 1e6, 0, 0, 0,
     ", \"head_dim\": 16, \"moe_intermediate_size\": 32, \"num_experts\": 16, "
     "\"num_experts_per_tok\": 4, \"norm_topk_prob\": true, \"use_sliding_window\": false",
     2, 2},
    {"gemma-3-27b", "gemma3_text", 262208, 5376, 62, 32, 16, 21504, 131072, 1e6, 1, 0, 1024,
     ", \"head_dim\": 128, \"query_pre_attn_scalar\": 168, \"rope_local_base_freq\": 10000.0, "
     "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}, "
     "\"hidden_activation\": \"gelu_pytorch_tanh\"", 2, 1},
};

static const shape k_shapes[] = {
    {"opt-tiny", 64, 2, 4, 256, 64, 1}, /* not a released size: a 7 MB shape for tests */
    {"opt-125m", 768, 12, 12, 3072, 768, 1},     {"opt-350m", 1024, 24, 16, 4096, 512, 0},
    {"opt-1.3b", 2048, 24, 32, 8192, 2048, 1},   {"opt-2.7b", 2560, 32, 32, 10240, 2560, 1},
    {"opt-6.7b", 4096, 32, 32, 16384, 4096, 1},  {"opt-13b", 5120, 40, 40, 20480, 5120, 1},
    {"opt-30b", 7168, 48, 56, 28672, 7168, 1},   {"opt-66b", 9216, 64, 72, 36864, 9216, 1},
    {"opt-175b", 12288, 96, 96, 49152, 12288, 1},
};

#define SYNTH_BLOCK 65536u

typedef struct synth_ctx {
    uint64_t seed, tensor;
    int kind; /* 0 matrix, 1 ones, 2 zeros */
    int bf16; /* values are BF16 bit patterns (else F16) */
    uint16_t table[256];
    uint16_t block[SYNTH_BLOCK]; /* this tensor's random values, drawn once */
} synth_ctx;

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Draw the tensor's block: 8 table lookups per splitmix64 draw of (seed, tensor, index). */
static void fill_block(synth_ctx *c)
{
    for (uint32_t i = 0; i < SYNTH_BLOCK; i += 8) {
        uint64_t z = mix(c->seed ^ (c->tensor << 40) ^ i);
        for (uint32_t k = 0; k < 8; k++)
            c->block[i + k] = c->table[(z >> (8 * k)) & 255];
    }
}

/* Element e of a matrix is block[(e + rot(e / SYNTH_BLOCK)) mod SYNTH_BLOCK]: every 64 Ki
 * elements reuse the tensor's block at a pseudo-random rotation, so producing the data is a
 * memcpy (the writer, not the generator, sets the pace) and stays deterministic. */
static int synth_read(void *ctx, uint64_t first, uint64_t n, uint16_t *out, fg_err *err)
{
    (void)err;
    synth_ctx *c = ctx;
    if (c->kind) {
        uint16_t v = c->kind == 1 ? (c->bf16 ? 0x3F80 : 0x3C00) : 0;
        for (uint64_t i = 0; i < n; i++)
            out[i] = v;
        return FG_OK;
    }
    uint64_t e = first, end = first + n;
    while (e < end) {
        uint64_t seg = e / SYNTH_BLOCK, seg_end = (seg + 1) * SYNTH_BLOCK;
        uint64_t stop = seg_end < end ? seg_end : end;
        uint32_t pos = (uint32_t)((e + mix(c->seed ^ seg)) % SYNTH_BLOCK);
        while (e < stop) {
            uint64_t run = SYNTH_BLOCK - pos < stop - e ? SYNTH_BLOCK - pos : stop - e;
            memcpy(out + (e - first), c->block + pos, run * sizeof *out);
            e += run;
            pos = 0;
        }
    }
    return FG_OK;
}

static void make_table(uint16_t table[256], int bf16)
{
    /* 256 evenly spaced values of U(-a, a) with a = 0.02 * sqrt(3): std 0.02 */
    float a = 0.02f * sqrtf(3.0f);
    for (int i = 0; i < 256; i++) {
        float v = a * ((float)i + 0.5f) / 128.0f - a;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        table[i] = bf16 ? (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)
                        : fg_f32_to_f16_1(v);
    }
}

/* A Llama-family shape's config.json into buf. */
static int llama_config(const lshape *s, char *buf, size_t cap)
{
    char window[64] = "";
    if (s->window)
        snprintf(window, sizeof window, ", \"sliding_window\": %u", s->window);
    return snprintf(buf, cap,
                    "{\"model_type\": \"%s\", \"vocab_size\": %u, \"hidden_size\": %u, "
                    "\"num_hidden_layers\": %u, \"num_attention_heads\": %u, "
                    "\"num_key_value_heads\": %u, \"intermediate_size\": %u, "
                    "\"max_position_embeddings\": %u, \"rope_theta\": %.1f, "
                    "\"rms_norm_eps\": 1e-05, \"hidden_act\": \"%s\", "
                    "\"tie_word_embeddings\": %s, \"bos_token_id\": %d, \"eos_token_id\": %d, "
                    "\"torch_dtype\": \"bfloat16\", \"fg_synthetic\": true%s%s}\n",
                    s->type, s->vocab, s->hidden, s->layers, s->heads, s->kv_heads, s->ffn,
                    s->max_pos, s->theta, strcmp(s->type, "gemma") ? "silu" : "gelu",
                    s->tied ? "true" : "false", s->bos, s->eos, window, s->extra);
}

/* config.json of the shape (s, or else ls) into the batch, and parsed into hp (one source of
 * truth). */
static int write_config(fgc_job *j, const shape *s, const lshape *ls, fg_hparams *hp, fg_err *err)
{
    char buf[1024];
    int n = ls ? llama_config(ls, buf, sizeof buf) : snprintf(buf, sizeof buf,
                     "{\"model_type\": \"opt\", \"architectures\": [\"OPTForCausalLM\"], "
                     "\"vocab_size\": 50272, \"hidden_size\": %u, \"num_hidden_layers\": %u, "
                     "\"num_attention_heads\": %u, \"ffn_dim\": %u, "
                     "\"max_position_embeddings\": 2048, \"word_embed_proj_dim\": %u, "
                     "\"do_layer_norm_before\": %s, \"activation_function\": \"relu\", "
                     "\"enable_bias\": true, \"layer_norm_elementwise_affine\": true, "
                     "\"tie_word_embeddings\": true, \"pad_token_id\": 1, \"bos_token_id\": 2, "
                     "\"eos_token_id\": 2, \"torch_dtype\": \"float16\", "
                     "\"fg_synthetic\": true}\n",
                     s->hidden, s->layers, s->heads, s->ffn, s->embed_proj,
                     s->pre_ln ? "true" : "false");
    int rc = fg_model_config_parse(buf, (size_t)n, "synthetic config.json", hp, err);
    return rc ? rc : fg_store_batch_meta(j->batch, "model.config_json", buf, (size_t)n, err);
}

void fg_convert_synth_names(char *buf, size_t cap)
{
    char names[2][1024] = {"", ""};
    size_t k[2] = {0, 0};
    size_t n_opt = sizeof k_shapes / sizeof k_shapes[0];
    size_t n = n_opt + sizeof k_llama / sizeof k_llama[0];
    for (size_t i = 0; i < n; i++) {
        const char *nm = i < n_opt ? k_shapes[i].name : k_llama[i - n_opt].name;
        size_t len = strlen(nm);
        int t = len > 5 && !strcmp(nm + len - 5, "-tiny");
        if (k[t] < sizeof names[t])
            k[t] += (size_t)snprintf(names[t] + k[t], sizeof names[t] - k[t], "%s%s",
                                     k[t] ? ", " : "", nm);
    }
    snprintf(buf, cap, "%s (tests: %s)", names[0], names[1]);
}

int fg_convert_synth(const char *model, const char *dst, uint64_t seed, const fg_convert_opts *o,
                     fg_convert_report *rep, fg_err *err)
{
    const shape *s = NULL;
    const lshape *ls = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(model, k_shapes[i].name))
            s = &k_shapes[i];
    for (size_t i = 0; i < sizeof k_llama / sizeof k_llama[0]; i++)
        if (!strcmp(model, k_llama[i].name))
            ls = &k_llama[i];
    if (!s && !ls) /* (the list is longer than a message: fg-convert --help prints it) */
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--model %s: not a shape fg-convert synth "
                          "knows (fg-convert --help lists them)", model);
    if (!o->tokenizer_dir)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "synth needs --tokenizer DIR (vocab.json, "
                          "merges.txt)");
    fgc_job j;
    fg_hparams hp;
    fg_tensor_spec *spec = NULL;
    uint32_t n_spec = 0;
    int rc = fgc_begin(&j, dst, o, err);
    if (rc == FG_OK)
        rc = write_config(&j, s, ls, &hp, err);
    if (rc == FG_OK)
        rc = fgc_tokenizer_meta(&j, o->tokenizer_dir, err);
    if (rc == FG_OK && o->zero_weights)
        rc = fg_store_batch_meta(j.batch, FG_SYNTH_WEIGHTS_KEY, "zero", 4, err);
    if (rc == FG_OK)
        rc = fg_model_tensors(&hp, &spec, &n_spec, err);
    synth_ctx *c = calloc(1, sizeof *c); /* 128 KiB: not on the stack */
    if (!c && rc == FG_OK)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (c) {
        c->seed = seed;
        c->bf16 = ls != NULL;
        make_table(c->table, c->bf16);
    }
    for (uint32_t i = 0; rc == FG_OK && i < n_spec; i++)
        if (!spec[i].fallback[0])
            j.total += spec[i].dims[0] * (spec[i].n_dims > 1 ? spec[i].dims[1] : 1) * 2;
    for (uint32_t i = 0; rc == FG_OK && i < n_spec; i++) {
        if (spec[i].fallback[0])
            continue; /* tied LM head */
        const char *nm = spec[i].name;
        fg_role r = spec[i].role;
        c->tensor = i;
        c->kind = r == FG_ROLE_NORM_W || r == FG_ROLE_Q_NORM || r == FG_ROLE_K_NORM ? 1
                : r == FG_ROLE_NORM_B || r == FG_ROLE_BQ || r == FG_ROLE_BK || r == FG_ROLE_BV ||
                  r == FG_ROLE_BO || r == FG_ROLE_B_UP || r == FG_ROLE_B_GATE ||
                  r == FG_ROLE_B_DOWN || r == FG_ROLE_SINKS || r == FG_ROLE_B_ROUTER ||
                  r == FG_ROLE_EXP_B_GATE || r == FG_ROLE_EXP_B_UP || r == FG_ROLE_EXP_B_DOWN ||
                  r == FG_ROLE_ROUTER_CORR
                ? 2 : 0;
        int hole = o->zero_weights && c->kind != 1;
        if (c->kind == 0 && !hole)
            fill_block(c);
        fgc_tensor_src src = {nm, "", 0, spec[i].n_dims, {spec[i].dims[0], spec[i].dims[1]}, 2,
                              c->bf16 ? FG_CODEC_BF16 : FG_CODEC_F16, hole ? NULL : synth_read,
                              c, spec[i].blocks, fg_role_stays_wide(r)};
        rc = fgc_write_tensor(&j, &src, err);
        j.tensors += rc == FG_OK;
    }
    free(spec);
    free(c);
    return fgc_end(&j, rc, rep, err);
}
