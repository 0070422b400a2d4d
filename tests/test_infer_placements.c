/* test_infer_placements.c - every placement, schedule and batch split gives transformers'
 * numbers, over a table of families: all in RAM, weights on disk under a tight budget, several
 * gbs x ngb splits, overlap on and off, the row-by-row schedule, merged layers; the KV cache and
 * activations homed on disk and mixed fractions (its 4-bit form within the row's bound); a
 * mixture of experts with its weights on disk reading only the experts its tokens chose; and
 * the requests the engine refuses. Each table row is one family x case (infer_common.h). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_common.h"

/* Every placement and schedule gives the same numbers. */
static void placement_matrix(const infer_case *c)
{
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(c->layout, 0);
    struct {
        uint32_t gbs, ngb;
        int disk, overlap, row;
        uint64_t budget;
        int merged; /* --sep-layer false */
    } m[] = {
        {1, 3, 0, 1, 0, 0, 0},       {2, 2, 0, 1, 0, 0, 0},       {3, 1, 0, 0, 0, 0, 0},
        {1, 3, 1, 1, 0, 0, 0},       {2, 2, 1, 0, 0, 0, 0},       {1, 3, 1, 1, 1, 0, 0},
        {3, 1, 0, 1, 1, 0, 0},       {2, 2, 0, 1, 0, 8 << 20, 0}, /* budget below all-in-RAM */
        {1, 3, 1, 1, 0, 0, 1},       {2, 2, 0, 1, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        fg_engine_opts o = defaults();
        o.policy.gbs = m[i].gbs;
        o.policy.ngb = m[i].ngb;
        o.policy.overlap = m[i].overlap;
        o.policy.schedule = m[i].row ? FG_SCHEDULE_ROW : FG_SCHEDULE_ZIGZAG;
        o.ram_budget = m[i].budget;
        o.policy.sep_layer = !m[i].merged;
        if (m[i].disk) {
            o.policy.have_fractions = 1;
            o.policy.frac = (fg_pager_policy){{0, 0, 1}, {0, 1, 0}, {0, 1, 0}};
        }
        result res = check_logits(store, &r, o);
        ck_assert_msg(res.max_diff < 1e-3 && res.agree == 1.0, "%s: case %zu: %g %g", c->name, i,
                      res.max_diff, res.agree);
        check_greedy(store, &r, o);
    }
    free(r.logits);
}

/* {case, layout, reference} */
static const infer_case placements[] = {
    {"placements_and_schedules_agree", "opt-tiny-safetensors", "opt-tiny"},
    {"qwen2_window_placements", "qwen2-window-tiny-bf16", "qwen2-window-tiny"},
    /* Every placement, schedule and batch split, and the KV cache on disk, for the window and the
     * scaled, tied, grouped-query family members. */
    {"mistral_placements", "mistral-tiny-bf16", "mistral-tiny"},
    {"llama3_placements", "llama3-tiny-bf16", "llama3-tiny"},
    {"qwen3_placements", "qwen3-tiny-bf16", "qwen3-tiny"},
    {"phi3_placements", "phi3-longrope-tiny-bf16", "phi3-longrope-tiny"},
    {"olmo2_placements", "olmo2-tiny-bf16", "olmo2-tiny"},
    {"mixtral_placements", "mixtral-tiny-bf16", "mixtral-tiny"},
    {"qwen3_moe_placements", "qwen3-moe-tiny-bf16", "qwen3-moe-tiny"},
    {"qwen2_moe_placements", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny"},
    {"granitemoe_placements", "granitemoe-tiny-bf16", "granitemoe-tiny"},
    {"olmoe_placements", "olmoe-tiny-bf16", "olmoe-tiny"},
    {"smollm3_placements", "smollm3-tiny-bf16", "smollm3-tiny"},
    {"ministral3_placements", "ministral3-tiny-bf16", "ministral3-tiny"},
    {"gemma3_placements", "gemma3-tiny-bf16", "gemma3-tiny"},
    {"gpt_oss_placements", "gpt-oss-tiny-bf16", "gpt-oss-tiny"},
    {"gemma_placements", "gemma-tiny-bf16", "gemma-tiny"},
    {"glm4_moe_placements", "glm4-moe-tiny-bf16", "glm4-moe-tiny"},
    {"minimax_m2_placements", "minimax-m2-tiny-bf16", "minimax-m2-tiny"},
    {"olmo3_placements", "olmo3-tiny-bf16", "olmo3-tiny"},
    {"dots1_placements", "dots1-tiny-bf16", "dots1-tiny"},
    {"seed_oss_placements", "seed-oss-tiny-bf16", "seed-oss-tiny"},
    {"exaone4_placements", "exaone4-tiny-bf16", "exaone4-tiny"},
    {"ernie4_5_placements", "ernie4_5-tiny-bf16", "ernie4_5-tiny"},
    {"ernie4_5_moe_placements", "ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny"},
    {"glm4_placements", "glm4-tiny-bf16", "glm4-tiny"},
    {"gemma2_placements", "gemma2-tiny-bf16", "gemma2-tiny"},
    {"deepseek_v3_placements", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny"},
    {"deepseek_v2_lite_placements", "deepseek-v2-lite-tiny-bf16", "deepseek-v2-lite-tiny"},
};

START_TEST(placement) { placement_matrix(infer_row(placements, _i)); }
END_TEST

/* The KV cache and activations homed on disk (streamed through the pager's offload file), and
 * mixed fractions, give the same numbers as everything in RAM. */
/* q4_nmse: the bound for the 4-bit cache (0.05 on OPT; Qwen2's tied 512-wide head has logits
 * twice as wide, measured 0.055, bound 0.08) */
static void kv_matrix(const infer_case *c)
{
    double q4_nmse = c->bound;
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(c->layout, 0);
    fg_pager_policy pols[] = {
        {{0, 1, 0}, {0, 0, 1}, {0, 1, 0}},       /* cache on disk */
        {{0, 0, 1}, {0, 0, 1}, {0, 1, 0}},       /* weights and cache on disk */
        {{0, 0.5, 0.5}, {0, 0.5, 0.5}, {0, 1, 0}}, /* half and half */
        {{0, 0, 1}, {0, 0, 1}, {0, 0, 1}},       /* weights, cache and activations on disk */
        {{0, 0.5, 0.5}, {0, 0.5, 0.5}, {0, 0.5, 0.5}},
    };
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++)
        for (int q = 0; q < 2; q++) {
            fg_engine_opts o = defaults();
            o.policy.have_fractions = 1;
            o.policy.frac = pols[i];
            o.policy.gbs = 1;
            o.policy.ngb = 3;
            o.policy.compress_cache = q;
            o.offload_dir = tu_path("");
            result res = check_logits(store, &r, o);
            ck_assert_msg(q ? res.nmse < q4_nmse : res.max_diff < 1e-3 && res.agree == 1.0,
                          "%s: policy %zu, 4-bit cache %d: max diff %g nmse %g", c->name, i, q,
                          res.max_diff, res.nmse);
            if (!q)
                check_greedy(store, &r, o);
        }
    free(r.logits);
}

/* {case, layout, reference, the 4-bit cache's nmse bound} */
static const infer_case kv_on_disk[] = {
    {"kv_cache_on_disk_and_mixed_fractions", "opt-tiny-safetensors", "opt-tiny", 0.05},
    {"mistral_kv_on_disk", "mistral-tiny-bf16", "mistral-tiny", 0.05},
    {"qwen2_kv_on_disk", "qwen2-tiny-bf16", "qwen2-tiny", 0.08},
    {"qwen3_kv_on_disk", "qwen3-tiny-bf16", "qwen3-tiny", 0.08},
    /* its 4-bit cache gives nmse 0.0877 against the exact logits (measured, cache in RAM) */
    {"phi3_kv_on_disk", "phi3-tiny-bf16", "phi3-tiny", 0.12},
    {"gemma3_kv_on_disk", "gemma3-tiny-bf16", "gemma3-tiny", 0.08},
    /* (its 4-bit cache: nmse 0.175 measured, where the other fixtures stay under 0.08: YaRN's
     * 1.3 on the scores sharpens this random model's attention, so a quantized key changes which
     * keys dominate; the f32 cache placements match within 1e-3) */
    {"gpt_oss_kv_on_disk", "gpt-oss-tiny-bf16", "gpt-oss-tiny", 0.25},
    {"olmo3_kv_on_disk", "olmo3-tiny-bf16", "olmo3-tiny", 0.08},
    {"exaone4_kv_on_disk", "exaone4-tiny-bf16", "exaone4-tiny", 0.08},
    /* (its 4-bit cache: nmse 0.084 measured) */
    {"ernie4_5_kv_on_disk", "ernie4_5-tiny-bf16", "ernie4_5-tiny", 0.12},
    {"gemma2_kv_on_disk", "gemma2-tiny-bf16", "gemma2-tiny", 0.08},
    /* (MLA: the latent rows on disk, one plane a token; the f32 cache within 1e-3. Its 4-bit
     * cache: nmse 0.514 (V3) and 0.288 (V2) measured: the one 40-value latent row a token feeds
     * every head's scores and values, so its rounding reaches all of them, and here one group of
     * 64 spans the unnormalized rotary key and the normed latent alike; in the real models' 576
     * values the rotary key, first, is a group of its own) */
    {"deepseek_v3_kv_on_disk", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny", 0.6},
    {"deepseek_v2_kv_on_disk", "deepseek-v2-tiny-bf16", "deepseek-v2-tiny", 0.35},
};

START_TEST(kv) { kv_matrix(infer_row(kv_on_disk, _i)); }
END_TEST

/* Bytes read from disk generating up to max_new greedy tokens of the fixture prompt, batch 1,
 * the weights homed on disk and a mixture's experts paged as `experts` says; out receives the
 * tokens (*n_out of them), *hp the model's hyperparameters. */
static uint64_t disk_of_generate(const char *store, const ref *r, uint32_t max_new,
                                 fg_expert_paging experts, int32_t *out, uint32_t *n_out,
                                 fg_hparams *hp)
{
    fg_engine_opts o = defaults();
    o.max_ctx = 64;
    o.policy.gbs = 1;
    o.policy.ngb = 1;
    o.policy.experts = experts;
    o.policy.have_fractions = 1;
    o.policy.frac = (fg_pager_policy){{0, 0, 1}, {0, 1, 0}, {0, 1, 0}};
    eng x;
    fg_err err;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    *hp = *fg_engine_hparams(x.e);
    fg_gen_seq s = {r->prompt, r->n_prompt, max_new, {0, 0, 1, 0}, 0, out, 0, 0};
    fg_gen_stats gs;
    ck_assert_msg(fg_engine_generate(x.e, &s, 1, NULL, &gs, &err) == 0, "%s", err.msg);
    fg_engine_stats st;
    fg_engine_stats_get(x.e, &st);
    *n_out = s.n_out;
    eng_close(&x);
    return st.pager.moved[FG_TIER_DISK][FG_TIER_HOST];
}

/* A mixture of experts with its weights on disk, one sequence: a decode step's token chooses
 * top_k experts a sparse layer, and the engine reads only those (engine/engine.c prefetches a
 * layer's experts with it only when a step's tokens are expected to choose most of them;
 * model/decoder.c asks for the chosen ones after routing). So a decode step reads at most
 * every weight but the n_experts - top_k experts no token chose, in every sparse layer, and
 * the tokens are transformers' either way. The prefill of a run of one token (every expert
 * prefetched: --experts all) reads each weight once: the model's stored bytes. With fewer
 * experts read, the streaming room (sized for a whole layer) also keeps more of them from
 * step to step: mixtral-tiny read 0.59 MB in 20 tokens, 3.2 MB with --experts all. */
static void experts_paged(const infer_case *c)
{
    const char *refname = c->name;
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(c->layout, 0);
    int32_t out[2][64];
    uint32_t n[3];
    fg_hparams hp;
    uint64_t whole = disk_of_generate(store, &r, 1, FG_EXPERTS_ALL, out[0], &n[2], &hp);
    uint64_t all = disk_of_generate(store, &r, r.n_greedy, FG_EXPERTS_ALL, out[0], &n[0], &hp);
    uint64_t routed = disk_of_generate(store, &r, r.n_greedy, FG_EXPERTS_ROUTED, out[1], &n[1],
                                       &hp);
    for (int m = 0; m < 2; m++) {
        ck_assert_uint_ge(n[m], 2);
        for (uint32_t i = 0; i < n[m]; i++)
            ck_assert_msg(out[m][i] == r.greedy[i], "%s, experts %s: token %u: %d vs %d",
                          refname, m ? "routed" : "all", i, out[m][i], r.greedy[i]);
    }
    uint32_t sparse = 0;
    for (uint32_t l = 0; l < hp.n_layers; l++)
        sparse += fg_model_layer_sparse(&hp, l) != 0;
    uint64_t expert = 3 * (((uint64_t)hp.moe_ffn * hp.hidden * 2 + 4095) & ~4095ull);
    uint64_t unchosen = (uint64_t)sparse * (hp.n_experts - hp.top_k) * expert;
    ck_assert_uint_gt(whole, unchosen);
    uint64_t bound = whole + (n[1] - 1) * (whole - unchosen);
    printf("%s: %u tokens read %llu bytes from disk with --experts routed, %llu with all "
           "(the model %llu; bound %llu)\n", c->ref, n[1], (unsigned long long)routed,
           (unsigned long long)all, (unsigned long long)whole, (unsigned long long)bound);
    ck_assert_msg(routed <= bound, "%s: %u tokens read %llu bytes, above %llu", refname, n[1],
                  (unsigned long long)routed, (unsigned long long)bound);
    /* where the streaming room did not keep the model (--experts all read it again: the new
     * tokens' embedding rows alone add a little), reading only the chosen experts reads less */
    if (all >= 2 * whole)
        ck_assert_msg(routed < all, "%s: --experts routed read %llu bytes, all %llu", refname,
                      (unsigned long long)routed, (unsigned long long)all);
    else
        ck_assert_uint_le(routed, all);
    free(r.logits);
}

/* {case, layout, reference}: the mixtures of experts */
static const infer_case experts[] = {
    {"experts_paged_qwen3_moe", "qwen3-moe-tiny-bf16", "qwen3-moe-tiny"},
    {"experts_paged_mixtral", "mixtral-tiny-bf16", "mixtral-tiny"},
    {"experts_paged_qwen2_moe", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny"},
    {"experts_paged_granitemoe", "granitemoe-tiny-bf16", "granitemoe-tiny"},
    {"experts_paged_olmoe", "olmoe-tiny-bf16", "olmoe-tiny"},
    {"experts_paged_gpt_oss_mxfp4", "gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny"},
    {"experts_paged_gpt_oss", "gpt-oss-tiny-bf16", "gpt-oss-tiny"},
    {"experts_paged_glm4_moe", "glm4-moe-tiny-bf16", "glm4-moe-tiny"},
    {"experts_paged_minimax_m2", "minimax-m2-tiny-bf16", "minimax-m2-tiny"},
    {"experts_paged_dots1", "dots1-tiny-bf16", "dots1-tiny"},
    {"experts_paged_ernie4_5_moe", "ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny"},
    {"experts_paged_deepseek_v3", "deepseek-v3-tiny-bf16", "deepseek-v3-tiny"},
    {"experts_paged_deepseek_v2", "deepseek-v2-tiny-bf16", "deepseek-v2-tiny"},
    {"experts_paged_kimi_k2", "kimi-k2-tiny-bf16", "kimi-k2-tiny"},
};

START_TEST(expert_paging) { experts_paged(infer_row(experts, _i)); }
END_TEST

START_TEST(bad_requests_are_refused)
{
    const char *store = convert("opt-tiny-safetensors", 0);
    fg_engine_opts o = defaults();
    eng x;
    fg_err err;
    o.max_ctx = 1000; /* > 64 positions */
    ck_assert_int_eq(eng_open(store, &o, &x, &err), FG_ERR_INVALID_ARG);
    o = defaults();
    o.ram_budget = 4096;
    ck_assert_int_eq(eng_open(store, &o, &x, &err), FG_ERR_NO_SPACE);
    ck_assert_msg(strstr(err.msg, "--ram-budget"), "%s", err.msg);
    o = defaults();
    o.policy.have_fractions = 1;
    o.policy.frac = (fg_pager_policy){{0, 1, 0}, {0, 1, 2}, {0, 1, 0}}; /* not fractions */
    ck_assert_int_ne(eng_open(store, &o, &x, &err), 0);
    o.policy.frac = (fg_pager_policy){{1, 0, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_ne(eng_open(store, &o, &x, &err), 0);
    ck_assert_int_ne(eng_open(tu_path("nope"), &o, &x, &err), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("infer_placements");
    TCase *tc = infer_tcase("placements", 120);
    tcase_add_loop_test(tc, placement, 0, INFER_ROWS_ONLY(placements));
    tcase_add_loop_test(tc, kv, 0, INFER_ROWS_ONLY(kv_on_disk));
    tcase_add_loop_test(tc, expert_paging, 0, INFER_ROWS_ONLY(experts));
    tcase_add_test(tc, bad_requests_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
