/* test_infer_device.c - the placements through a device backend, over a table of families:
 * the simulated device (compute/backend_sim.c) here, the CUDA backend in test_infer_cuda (this
 * file built with FG_TEST_INFER_CUDA), which skips without a GPU. GPU fractions, CPU or device
 * attention, the 4-bit cache on the device (within the row's nmse bound), the plan's default
 * under a small budget: the reference's logits (1e-3) and greedy tokens, the GPU tier used where
 * the fractions put data on it. On the sim device a decode step's bytes over the link are
 * bounded by the shapes of what must cross (token ids, positions, validity, logits; with a host
 * cache and CPU attention, each layer's queries and outputs and new K/V). A GPU fraction with no
 * device, or a budget the staging cannot fit in, is refused. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_common.h"

/* --compute f16 on the GPU: GEMM inputs in the weights' 16-bit type (F16, or BF16 for
 * BF16 weights: its range), f32 sums. Measured under tests/cudaemu (placements 0 and 3
 * alike): F16 stores max diff 0.0042 (opt) and 0.011 (llama2, nmse 1.1e-6); BF16 stores
 * nmse 1.7e-5 .. 1.9e-4 for dense families (BF16's 8-bit mantissa on the activations),
 * up to 0.018 where a router's near-tie flips an expert (dots1, glm4_moe), teacher-
 * forced argmaxes agreeing at 0.90 (mixtral) and above. So: every
 * case within 0.05 nmse (a transposed or misread weight gives about 1); where no argmax
 * flipped, within 1e-3; F16 stores within 2e-2 and the same greedy tokens (BF16 ones
 * not: llama3, phi3, ernie4_5 and olmoe part from transformers' greedy text by token 15
 * while no teacher-forced argmax flips) */
static void cuda_f16_case(const char *store, const ref *r, fg_engine_opts o, const infer_case *c,
                          size_t i)
{
    o.compute = FG_COMPUTE_F16;
    fg_engine_stats st;
    result res = check_logits_st(store, r, o, &st);
    int f16_store = !strstr(c->layout, "bf16");
    ck_assert_msg(res.nmse < 0.05 && res.agree >= 0.85 &&
                      (res.agree < 1.0 || res.nmse < 1e-3) &&
                      (!f16_store || (res.max_diff < 2e-2 && res.agree == 1.0)),
                  "%s: cuda f16 case %zu: max diff %g agree %g nmse %g", c->name, i,
                  res.max_diff, res.agree, res.nmse);
    if (f16_store)
        check_greedy(store, r, o);
}

/* The placements through the simulated device backend (compute/backend_sim.c): chunks homed
 * on the GPU live in device memory host code cannot touch, the rest is staged per op over the
 * link; every placement gives the reference's logits (1e-3) and greedy tokens, and the GPU
 * tier is really used where the fractions put data on it. */
static void device_matrix(fg_backend_kind kind, const infer_case *c)
{
    const char *layout = c->layout;
    double q4_nmse = c->bound;
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(layout, 0);
    struct {
        fg_pager_policy frac;
        int fractions, cpu_attention, q4_cache, zigzag_row;
        uint64_t gpu_budget;
    } m[] = {
        {{{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}, 1, 1, 0, 0, 0},       /* everything on the GPU */
        {{{1, 0, 0}, {0, 1, 0}, {0, 1, 0}}, 1, 1, 0, 0, 0},       /* cache in RAM, CPU attention */
        {{{1, 0, 0}, {0, 1, 0}, {0, 1, 0}}, 1, 0, 0, 1, 0},       /* ... attention on the device */
        {{{0.5, 0.5, 0}, {0.5, 0, 0.5}, {1, 0, 0}}, 1, 1, 0, 0, 0}, /* mixed, cache half on disk */
        {{{0, 0, 1}, {1, 0, 0}, {0, 0, 1}}, 1, 0, 0, 1, 0},       /* weights and acts on disk */
        {{{0, 1, 0}, {1, 0, 0}, {0, 1, 0}}, 1, 0, 1, 0, 0},       /* 4-bit cache on the GPU */
        {{{0}, {0}, {0}}, 0, 1, 0, 0, 0},                         /* the plan's default */
        {{{0}, {0}, {0}}, 0, 1, 0, 0, 24u << 20},                 /* default under a small budget */
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        fg_engine_opts o = defaults();
        o.backend = kind;
        /* CUDA: not the whole GPU, and 256 MiB more for cuBLAS and kernel scratch */
        o.gpu_budget = kind != FG_BACKEND_CUDA ? m[i].gpu_budget
                     : m[i].gpu_budget ? m[i].gpu_budget + (256ull << 20) : 1ull << 30;
        o.policy.gbs = 1 + (uint32_t)(i % 2);
        o.policy.ngb = i % 2 ? 2 : 3;
        o.policy.have_fractions = m[i].fractions;
        o.policy.frac = m[i].frac;
        o.policy.cpu_attention = m[i].cpu_attention;
        o.policy.compress_cache = m[i].q4_cache;
        o.policy.schedule = m[i].zigzag_row ? FG_SCHEDULE_ROW : FG_SCHEDULE_ZIGZAG;
        o.offload_dir = tu_path("");
        fg_engine_stats st;
        result res = check_logits_st(store, &r, o, &st);
        ck_assert_msg(m[i].q4_cache ? res.nmse < q4_nmse
                                    : res.max_diff < 1e-3 && res.agree == 1.0,
                      "%s: sim case %zu: max diff %g agree %g nmse %g", c->name, i, res.max_diff,
                      res.agree, res.nmse);
        double g = m[i].frac.w[0] + m[i].frac.c[0] + m[i].frac.h[0];
        if (g > 0 || !m[i].fractions)
            ck_assert_msg(st.pager.peak[FG_TIER_DEVICE] > 0, "%s: sim case %zu: nothing on the GPU",
                          c->name, i);
        if (!m[i].q4_cache)
            check_greedy(store, &r, o);
        if (kind != FG_BACKEND_CUDA || i != 3) /* weights half resident, half streamed */
            continue;
        cuda_f16_case(store, &r, o, c, i);
    }
    free(r.logits);
}

/* {case, layout, reference, the 4-bit cache's nmse bound} on the simulated device */
static const infer_case sim_rows[] = {
    {"sim_placements_opt", "opt-tiny-safetensors", "opt-tiny", 0.08},
    {"sim_placements_llama3", "llama3-tiny-bf16", "llama3-tiny", 0.08},
    {"sim_placements_mistral", "mistral-tiny-bf16", "mistral-tiny", 0.08},
    {"sim_placements_qwen2", "qwen2-tiny-bf16", "qwen2-tiny", 0.08},
    {"sim_placements_qwen3", "qwen3-tiny-bf16", "qwen3-tiny", 0.08},
    {"sim_placements_yarn", "qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny", 0.08},
    {"sim_placements_ministral", "ministral-tiny-bf16", "ministral-tiny", 0.08},
    {"sim_placements_windows", "qwen2-window-tiny-bf16", "qwen2-window-tiny", 0.08},
    {"sim_placements_granite", "granite-tiny-bf16", "granite-tiny", 0.08},
    {"sim_placements_olmo2", "olmo2-tiny-bf16", "olmo2-tiny", 0.08},
    /* (the 4-bit cache's error moves tokens near a tie between experts to another expert, a
     * discrete change: measured nmse 0.15 here, 0.10 on qwen2-moe-tiny, bound 0.2) */
    {"sim_placements_mixtral", "mixtral-tiny-bf16", "mixtral-tiny", 0.2},
    {"sim_placements_qwen3_moe", "qwen3-moe-tiny-bf16", "qwen3-moe-tiny", 0.08},
    {"sim_placements_qwen2_moe", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny", 0.2},
    {"sim_placements_granitemoe", "granitemoe-tiny-bf16", "granitemoe-tiny", 0.08},
    {"sim_placements_olmoe", "olmoe-tiny-bf16", "olmoe-tiny", 0.08},
    {"sim_placements_ministral3", "ministral3-tiny-bf16", "ministral3-tiny", 0.08},
    {"sim_placements_gemma3", "gemma3-tiny-bf16", "gemma3-tiny", 0.08},
    {"sim_placements_gpt_oss", "gpt-oss-tiny-bf16", "gpt-oss-tiny", 0.25},
    /* (its 4-bit cache on the device: nmse 0.116 measured, over the 0.08 the fixtures with several
     * KV heads stay under: one KV head serves all 4 query heads, so its rounding reaches all) */
    {"sim_placements_gemma", "gemma-tiny-bf16", "gemma-tiny", 0.15},
    /* (its 4-bit cache on the device: nmse 0.172 measured; the other fixtures' range from 0.013 to
     * 0.079 in the same run, gpt-oss-tiny's 0.175, gemma-tiny's 0.116: these random models' own
     * sensitivity, their f32 placements all within 1e-3) */
    {"sim_placements_glm4_moe", "glm4-moe-tiny-bf16", "glm4-moe-tiny", 0.25},
    /* (its 4-bit cache: nmse 0.168 measured) */
    {"sim_placements_minimax_m2", "minimax-m2-tiny-bf16", "minimax-m2-tiny", 0.25},
    {"sim_placements_olmo3", "olmo3-tiny-bf16", "olmo3-tiny", 0.08},
    {"sim_placements_dots1", "dots1-tiny-bf16", "dots1-tiny", 0.08},
    /* (its 4-bit cache: nmse 0.081 measured) */
    {"sim_placements_seed_oss", "seed-oss-tiny-bf16", "seed-oss-tiny", 0.12},
    {"sim_placements_exaone4", "exaone4-tiny-bf16", "exaone4-tiny", 0.08},
    {"sim_placements_ernie4_5", "ernie4_5-tiny-bf16", "ernie4_5-tiny", 0.12},
    {"sim_placements_ernie4_5_moe", "ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny", 0.25},
    {"sim_placements_glm4", "glm4-tiny-bf16", "glm4-tiny", 0.08},
    {"sim_placements_gemma2", "gemma2-tiny-bf16", "gemma2-tiny", 0.08},
    {"sim_placements_phi3", "phi3-longrope-tiny-bf16", "phi3-longrope-tiny", 0.08},
    /* (its 4-bit latent cache: nmse 0.514 measured, as with the cache on the host:
     * test_infer_placements' deepseek_v3_kv_on_disk) */
    {"sim_placements_deepseek_v3", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny", 0.6},
    {"sim_placements_deepseek_v2_lite", "deepseek-v2-lite-tiny-bf16", "deepseek-v2-lite-tiny",
     0.25},
};

START_TEST(sim_placements) { device_matrix(FG_BACKEND_SIM, infer_row(sim_rows, _i)); }
END_TEST

/* The same placements on a GPU (test_infer_cuda: this file built with FG_TEST_INFER_CUDA). */
static const infer_case cuda_rows[] = {
    {"cuda_placements_opt", "opt-tiny-safetensors", "opt-tiny", 0.08},
    /* llama2-tiny's 4-bit cache is further from the reference than the others' (nmse 0.098, the
     * same on the simulated device: the first run of this test, under tests/cudaemu, found the
     * shared 0.08 too tight for it) */
    {"cuda_placements_llama2", "llama2-tiny-f16-sharded", "llama2-tiny", 0.12},
    {"cuda_placements_llama3", "llama3-tiny-bf16", "llama3-tiny", 0.08},
    {"cuda_placements_mistral", "mistral-tiny-bf16", "mistral-tiny", 0.08},
    {"cuda_placements_qwen2", "qwen2-tiny-bf16", "qwen2-tiny", 0.08},
    {"cuda_placements_qwen3", "qwen3-tiny-bf16", "qwen3-tiny", 0.08},
    {"cuda_placements_yarn", "qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny", 0.08},
    {"cuda_placements_gemma3", "gemma3-tiny-bf16", "gemma3-tiny", 0.08},
    {"cuda_placements_gemma2", "gemma2-tiny-bf16", "gemma2-tiny", 0.08},
    {"cuda_placements_glm4_moe", "glm4-moe-tiny-bf16", "glm4-moe-tiny", 0.25},
    {"cuda_placements_deepseek_v3", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny", 0.6},
    {"cuda_placements_minimax_m2", "minimax-m2-tiny-bf16", "minimax-m2-tiny", 0.25},
    {"cuda_placements_olmo3", "olmo3-tiny-bf16", "olmo3-tiny", 0.08},
    {"cuda_placements_dots1", "dots1-tiny-bf16", "dots1-tiny", 0.08},
    {"cuda_placements_exaone4", "exaone4-tiny-bf16", "exaone4-tiny", 0.08},
    {"cuda_placements_ernie4_5", "ernie4_5-tiny-bf16", "ernie4_5-tiny", 0.12},
    {"cuda_placements_ernie4_5_moe", "ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny", 0.25},
    {"cuda_placements_gemma", "gemma-tiny-bf16", "gemma-tiny", 0.15},
    {"cuda_placements_gpt_oss", "gpt-oss-tiny-bf16", "gpt-oss-tiny", 0.25},
    {"cuda_placements_granite", "granite-tiny-bf16", "granite-tiny", 0.08},
    {"cuda_placements_smollm3", "smollm3-tiny-bf16", "smollm3-tiny", 0.08},
    {"cuda_placements_olmo2", "olmo2-tiny-bf16", "olmo2-tiny", 0.08},
    /* (4-bit cache bound: sim_placements_mixtral) */
    {"cuda_placements_mixtral", "mixtral-tiny-bf16", "mixtral-tiny", 0.2},
    {"cuda_placements_olmoe", "olmoe-tiny-bf16", "olmoe-tiny", 0.08},
    {"cuda_placements_granitemoe", "granitemoe-tiny-bf16", "granitemoe-tiny", 0.08},
    {"cuda_placements_qwen2_moe", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny", 0.2},
    {"cuda_placements_ministral3", "ministral3-tiny-bf16", "ministral3-tiny", 0.08},
    {"cuda_placements_phi3", "phi3-longrope-tiny-bf16", "phi3-longrope-tiny", 0.08},
    {"cuda_placements_windows", "qwen2-window-tiny-bf16", "qwen2-window-tiny", 0.08},
};

START_TEST(cuda_placements) { device_matrix(FG_BACKEND_CUDA, infer_row(cuda_rows, _i)); }
END_TEST

/* Bytes over the simulated link of generating up to max_new tokens for n copies of the
 * fixture prompt at `temperature` (0: greedy), with weights and activations homed on the GPU
 * and the KV cache there too, or in RAM attended by the CPU (cpu_cache); *steps receives the
 * decode steps run (the longest output less the prefill's token), *hp the model's
 * hyperparameters. */
static uint64_t link_of_generate(const char *store, const ref *r, uint32_t n, uint32_t max_new,
                                 int cpu_cache, float temperature, uint32_t *steps,
                                 fg_hparams *hp)
{
    fg_engine_opts o = defaults();
    o.backend = FG_BACKEND_SIM;
    o.max_ctx = 64;
    o.policy.gbs = 2;
    o.policy.ngb = 2;
    o.policy.have_fractions = 1;
    o.policy.frac = (fg_pager_policy){{1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    if (cpu_cache)
        o.policy.frac.c[0] = 0, o.policy.frac.c[1] = 1;
    o.policy.cpu_attention = cpu_cache;
    o.offload_dir = tu_path("");
    eng x;
    fg_err err;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    *hp = *fg_engine_hparams(x.e);
    int32_t out[4][64];
    fg_gen_seq s[4];
    for (uint32_t i = 0; i < n; i++)
        s[i] = (fg_gen_seq){r->prompt, r->n_prompt, max_new, {temperature, 0, 1, 7}, i, out[i],
                            0, 0};
    fg_gen_stats gs;
    ck_assert_msg(fg_engine_generate(x.e, s, n, NULL, &gs, &err) == 0, "%s", err.msg);
    fg_engine_stats st;
    fg_engine_stats_get(x.e, &st);
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++)
        longest = s[i].n_out > longest ? s[i].n_out : longest;
    *steps = longest - 1;
    eng_close(&x);
    return st.link_bytes[0] + st.link_bytes[1];
}

/* With weights, KV cache and activations on the (simulated) GPU, the workspace and the residual
 * stream are device memory too: a greedy decode step moves over the link only each sequence's
 * token id and position (4 + 4 bytes up) and its next id (4 bytes down: the backend's argmax
 * runs where the logits are), whatever the layers, the hidden width, the context and the
 * vocabulary (the validity went up once, with the prompts); a sampled step brings the logits down instead (4 x vocab
 * bytes a sequence). Activations staged per op (what the host workspace cost) would add layers
 * x hidden x rows bytes on top. With the cache in RAM and --cpu-cache-compute, each layer adds
 * per sequence its query down and attention output up (4 x q width each), its validity row
 * down and its new K and V rows down (4 x KV width each), never the cache's rows. */
static void decode_link_bound(const infer_case *c)
{
    const char *refname = c->ref;
    ref r;
    load_ref(refname, &r);
    const char *store = convert(c->layout, 0);
    const uint32_t n = 4, max_ctx = 64;
    for (int run = 0; run < 3; run++) {
        int cpu_cache = run == 1;
        float temperature = run == 2 ? 0.8f : 0.0f;
        uint32_t s1, s2;
        fg_hparams hp;
        uint64_t b1 = link_of_generate(store, &r, n, 1, cpu_cache, temperature, &s1, &hp);
        uint64_t b2 = link_of_generate(store, &r, n, 6, cpu_cache, temperature, &s2, &hp);
        ck_assert_uint_eq(s1, 0);
        ck_assert_uint_ge(s2, 1);
        uint64_t per_step = (uint64_t)n * (4 + 4 + (temperature > 0 ? 4ull * r.vocab : 4));
        uint64_t qw = (uint64_t)hp.n_heads * hp.head_dim, kw = fg_model_kv_width(&hp);
        if (cpu_cache)
            per_step += (uint64_t)hp.n_layers * n * (8 * qw + max_ctx + 8 * kw);
        ck_assert_uint_gt(b2, b1);
        printf("%s%s: a decode step of %u sequences moved %.0f bytes over the link (bound "
               "%llu)\n", refname, cpu_cache ? " (cache in RAM, CPU attention)" : temperature > 0
               ? " (sampled)" : "", n, (double)(b2 - b1) / s2, (unsigned long long)per_step);
        ck_assert_msg(b2 - b1 <= s2 * per_step, "%s, run %d: %u decode steps moved %llu bytes "
                      "over the link, above %llu (ids, positions and next ids, or logits when "
                      "sampled, of %u sequences, vocab %u; with the cache in RAM "
                      "each layer's queries, outputs, validity and new K/V rows)", refname, run,
                      s2, (unsigned long long)(b2 - b1), (unsigned long long)(s2 * per_step), n,
                      r.vocab);
        if (temperature > 0) /* a sampled step does bring the logits of live sequences down */
            ck_assert_uint_ge(b2 - b1, 4ull * r.vocab * s2);
    }
    free(r.logits);
}

/* {case, layout, reference} */
static const infer_case link_rows[] = {
    {"sim_decode_moves_only_logits_opt", "opt-tiny-safetensors", "opt-tiny"},
    {"sim_decode_moves_only_logits_llama3", "llama3-tiny-bf16", "llama3-tiny"},
};

START_TEST(sim_decode_moves_only_logits) { decode_link_bound(infer_row(link_rows, _i)); }
END_TEST

/* A GPU fraction without a device is refused, as is a budget the staging cannot fit in. */
START_TEST(sim_bad_requests_are_refused)
{
    const char *store = convert("opt-tiny-safetensors", 0);
    eng x;
    fg_err err;
    fg_engine_opts o = defaults();
    o.max_ctx = 64;
    o.policy.have_fractions = 1;
    o.policy.frac = (fg_pager_policy){{1, 0, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(eng_open(store, &o, &x, &err), FG_ERR_PAGER_NO_TIER);
    ck_assert_ptr_nonnull(strstr(err.msg, "--backend cuda or sim"));
    o.gpu_budget = 1 << 30;
    ck_assert_int_eq(eng_open(store, &o, &x, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "--gpu-budget needs a device"));
    o.backend = FG_BACKEND_SIM;
    o.gpu_budget = 64 << 10;
    ck_assert_int_eq(eng_open(store, &o, &x, &err), FG_ERR_NO_SPACE);
    ck_assert_ptr_nonnull(strstr(err.msg, "--gpu-budget"));
    o.backend = FG_BACKEND_CUDA; /* no GPU here, or no CUDA in this build: a clear refusal */
    o.gpu_budget = 0;
    int rc = eng_open(store, &o, &x, &err);
    if (rc == FG_OK)
        eng_close(&x);
    else
        ck_assert_ptr_nonnull(strstr(err.msg, "cuda"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("infer_device");
    TCase *tc = infer_tcase("device", 120);
    tcase_add_loop_test(tc, sim_placements, 0, INFER_ROWS_ONLY(sim_rows));
    tcase_add_loop_test(tc, sim_decode_moves_only_logits, 0, INFER_ROWS_ONLY(link_rows));
    tcase_add_test(tc, sim_bad_requests_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("infer_cuda");
    TCase *tc = infer_tcase("infer_cuda", 300);
    tcase_add_loop_test(tc, cuda_placements, 0, INFER_ROWS_ONLY(cuda_rows));
    suite_add_tcase(s, tc);
    return s;
}

#ifdef FG_TEST_INFER_CUDA
/* Is GPU 0 there? Asked in a child (tu_probe): a CUDA context made in this process would not
 * survive the fork of each test ("initialization error" in every one). */
static int gpu_probe(char *msg, size_t cap)
{
    uint64_t free_b, total_b;
    fg_err err;
    if (fg_cuda_mem_info(0, &free_b, &total_b, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    return 0;
}
#endif

int main(void)
{
#ifdef FG_TEST_INFER_CUDA
    char msg[512];
    if (tu_probe(gpu_probe, msg, sizeof msg) != 0) {
        printf("skip: %s\n", msg);
        return 77;
    }
    (void)suite;
    return tu_run(cuda_suite());
#else
    (void)cuda_suite;
    return tu_run(suite());
#endif
}
