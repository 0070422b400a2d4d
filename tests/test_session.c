/* test_session.c - the session API (runner/session.h) on the fixture models.
 *
 *  - greedy: each family's fixture prompt (ids) gives transformers' greedy tokens
 *    (tests/fixtures/<family>/<name>.ref), alone and packed among other requests;
 *  - log-probs, a table of every fixture with transformers logits x every placement the infer
 *    tables cover (in RAM; weights, cache and activations on disk; half of each; the 4-bit
 *    cache and 4-bit weights within their tables' bounds): echo's prompt log-probs and the top
 *    alternatives = log_softmax of transformers' logits within 1e-3, a generated token's
 *    log-prob = the prefill's;
 *  - scoring: context + continuation pairs = transformers' summed log-probs; rolling windows;
 *  - seeded samples: a request's n choices differ from one another, and are the same whatever
 *    the packing (alone, among other requests, a session of one sequence a block);
 *  - error responses: malformed, empty, too long, chat without a template; the rest answered;
 *  - streaming (the shipped Austen model, its own tokenizer): the pieces concatenate to each
 *    choice's text, whole UTF-8, a stop string cut, a cancel gives status 499;
 *  - tokenize / detokenize round trip.
 * Each store is converted once per run and shared by the cases (convert_shared, infer_common.h).
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_common.h"
#include "session.h"

/* The stores are converted once per run of this program and shared by its cases (convert_shared,
 * infer_common.h): read-only here. */
static const char *austen_store(void)
{
    fg_convert_opts o = {0, 64, -1, NULL, 4096, NULL, NULL};
    return convert_shared(FG_SOURCE_DIR "/models/austen-opt", "austen", &o);
}

/* A store of the fixture checkpoint with its own tokenizer (OPT's: GPT-2's). The Llama family's
 * are small (512 ids); loading GPT-2's 50,257 at every session open was most of this program's
 * time. */
static const char *fixture_store(const char *layout) { return convert_as(layout, 0, 0); }

/* A session over store; eo: the engine's options (placement, 4-bit forms), defaults() when NULL */
static fg_session *open_session_eo(const char *store, uint32_t ctx, uint32_t seqs,
                                   const fg_engine_opts *eo)
{
    fg_session_opts so = {0};
    so.run.model = store;
    so.run.eo = eo ? *eo : defaults();
    so.run.sample = (fg_sample_params){0, 0, 1, 0};
    so.run.max_new = 16;
    so.run.policy_auto = 0;
    so.run.quiet = 1;
    so.run.eo.policy.gbs = seqs ? seqs : 4;
    so.run.eo.policy.ngb = 1;
    so.max_ctx = ctx;
    so.max_seqs = seqs;
    fg_session *s;
    fg_err err;
    ck_assert_msg(fg_session_open(&so, &s, &err) == 0, "%s: %s", infer_now, err.msg);
    return s;
}

static fg_session *open_session(const char *store, uint32_t ctx, uint32_t seqs)
{
    return open_session_eo(store, ctx, seqs, NULL);
}

static fg_request greedy_req(const int32_t *ids, uint32_t n, uint32_t max)
{
    fg_request q = {0};
    q.prompt_ids = ids;
    q.n_prompt_ids = n;
    q.max_tokens = max;
    q.sample = (fg_sample_params){0, 0, 1, 0};
    q.set = FG_REQ_SET_TEMPERATURE | FG_REQ_SET_TOP_P | FG_REQ_SET_TOP_K;
    q.logprobs = -1;
    q.ignore_eos = 1;
    return q;
}

static const struct {
    const char *layout, *ref;
} families[] = {
    {"opt-tiny-safetensors", "opt-tiny"},
    {"llama3-tiny-bf16", "llama3-tiny"},
    {"qwen2-tiny-bf16", "qwen2-tiny"},
    {"gemma2-tiny-bf16", "gemma2-tiny"},
    {"mixtral-tiny-bf16", "mixtral-tiny"},
};


/* ---- log-probs: every family with transformers fixture logits, every placement ---- */

/* The engine options of a placement (the infer tables' cases: test_infer_placements,
 * test_infer_compute); the 4-bit weights come from the store (lp_row.q4). */
enum { PL_RAM, PL_DISK, PL_MIXED, PL_Q4_CACHE, PL_Q4_WEIGHTS, PL_N_EXACT = PL_Q4_CACHE };
static const char *const place_name[] = {
    "in RAM", "weights, cache and activations on disk", "half of each in RAM, half on disk",
    "4-bit cache, weights and cache on disk", "4-bit weights"};

static fg_engine_opts place_opts(int place)
{
    fg_engine_opts o = defaults();
    static const fg_pager_policy pol[] = {
        {{0, 0, 1}, {0, 0, 1}, {0, 0, 1}},
        {{0, 0.5, 0.5}, {0, 0.5, 0.5}, {0, 0.5, 0.5}},
        {{0, 0, 1}, {0, 0, 1}, {0, 1, 0}},
    };
    if (place == PL_DISK || place == PL_MIXED || place == PL_Q4_CACHE) {
        o.policy.have_fractions = 1;
        o.policy.frac = pol[place - PL_DISK];
        o.offload_dir = tu_path("");
    }
    o.policy.compress_cache = place == PL_Q4_CACHE;
    o.policy.compress_weight = place == PL_Q4_WEIGHTS;
    return o;
}

/* A family x placement. bound, agree: a lossy placement's bounds, the ones its infer table gives
 * the logits (kv_on_disk's 4-bit cache nmse; q4_rows' and moe_q4_rows' nmse and argmax
 * agreement). */
typedef struct lp_row {
    const char *layout, *ref;
    int place, q4; /* q4: the store's 4-bit weights (convert_as) */
    double bound, agree;
} lp_row;

/* Every fixture with transformers logits (tests/fixtures/<opt|llama>/<ref>.ref) */
static const struct {
    const char *layout, *ref;
} lp_families[] = {
    {"opt-tiny-safetensors", "opt-tiny"},
    {"opt-tiny-bf16-bin", "opt-tiny-bf16"},
    {"opt-350m-style-safetensors", "opt-350m-style"},
    {"deepseek-v2-lite-tiny-bf16", "deepseek-v2-lite-tiny"},
    {"deepseek-v2-tiny-bf16", "deepseek-v2-tiny"},
    {"deepseek-v3-tiny-bf16", "deepseek-v3-tiny"},
    {"dots1-tiny-bf16", "dots1-tiny"},
    {"ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny"},
    {"ernie4_5-tiny-bf16", "ernie4_5-tiny"},
    {"exaone4-tiny-bf16", "exaone4-tiny"},
    {"gemma-tiny-bf16", "gemma-tiny"},
    {"gemma2-tiny-bf16", "gemma2-tiny"},
    {"gemma3-tiny-bf16", "gemma3-tiny"},
    {"glm4-moe-tiny-bf16", "glm4-moe-tiny"},
    {"glm4-tiny-bf16", "glm4-tiny"},
    {"gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny"},
    {"gpt-oss-tiny-bf16", "gpt-oss-tiny"},
    {"granite-tiny-bf16", "granite-tiny"},
    {"granitemoe-tiny-bf16", "granitemoe-tiny"},
    {"kimi-k2-tiny-bf16", "kimi-k2-tiny"},
    {"llama-linear-tiny-f16", "llama-linear-tiny"},
    {"llama2-tiny-bf16", "llama2-tiny"},
    {"llama3-tiny-bf16", "llama3-tiny"},
    {"minimax-m2-tiny-bf16", "minimax-m2-tiny"},
    {"ministral-tiny-bf16", "ministral-tiny"},
    {"ministral3-tiny-bf16", "ministral3-tiny"},
    {"mistral-tiny-bf16", "mistral-tiny"},
    {"mixtral-tiny-bf16", "mixtral-tiny"},
    {"olmo2-tiny-bf16", "olmo2-tiny"},
    {"olmo3-tiny-bf16", "olmo3-tiny"},
    {"olmoe-tiny-bf16", "olmoe-tiny"},
    {"phi3-longrope-short-tiny-bf16", "phi3-longrope-short-tiny"},
    {"phi3-longrope-tiny-bf16", "phi3-longrope-tiny"},
    {"phi3-tiny-bf16", "phi3-tiny"},
    {"qwen2-moe-tiny-bf16", "qwen2-moe-tiny"},
    {"qwen2-tiny-bf16", "qwen2-tiny"},
    {"qwen2-window-tiny-bf16", "qwen2-window-tiny"},
    {"qwen3-moe-tiny-bf16", "qwen3-moe-tiny"},
    {"qwen3-tiny-bf16", "qwen3-tiny"},
    {"qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny"},
    {"seed-oss-tiny-bf16", "seed-oss-tiny"},
    {"smollm3-tiny-bf16", "smollm3-tiny"},
};

/* The lossy rows: the infer tables' 4-bit cache rows (kv_on_disk) and 4-bit weight rows (q4_rows,
 * axis 0; moe_q4_rows, axis 1), with their bounds */
static const lp_row lp_lossy[] = {
    {"opt-tiny-safetensors", "opt-tiny", PL_Q4_CACHE, 0, 0.05, 0},
    {"mistral-tiny-bf16", "mistral-tiny", PL_Q4_CACHE, 0, 0.05, 0},
    {"qwen2-tiny-bf16", "qwen2-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"qwen3-tiny-bf16", "qwen3-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"phi3-tiny-bf16", "phi3-tiny", PL_Q4_CACHE, 0, 0.12, 0},
    {"gemma3-tiny-bf16", "gemma3-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"gpt-oss-tiny-bf16", "gpt-oss-tiny", PL_Q4_CACHE, 0, 0.25, 0},
    {"olmo3-tiny-bf16", "olmo3-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"exaone4-tiny-bf16", "exaone4-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"ernie4_5-tiny-bf16", "ernie4_5-tiny", PL_Q4_CACHE, 0, 0.12, 0},
    {"gemma2-tiny-bf16", "gemma2-tiny", PL_Q4_CACHE, 0, 0.08, 0},
    {"deepseek-v3-tiny-bf16", "deepseek-v3-tiny", PL_Q4_CACHE, 0, 0.6, 0},
    {"deepseek-v2-tiny-bf16", "deepseek-v2-tiny", PL_Q4_CACHE, 0, 0.35, 0},
    {"opt-tiny-safetensors", "opt-tiny", PL_Q4_WEIGHTS, 1, 0.15, 0.6},
    {"llama3-tiny-bf16", "llama3-tiny", PL_Q4_WEIGHTS, 1, 0.35, 0.4},
    {"qwen2-tiny-bf16", "qwen2-tiny", PL_Q4_WEIGHTS, 1, 0.35, 0.4},
    {"qwen3-tiny-bf16", "qwen3-tiny", PL_Q4_WEIGHTS, 1, 0.35, 0.4},
    {"mixtral-tiny-bf16", "mixtral-tiny", PL_Q4_WEIGHTS, 2, 0.45, 0.1},
    {"qwen2-moe-tiny-bf16", "qwen2-moe-tiny", PL_Q4_WEIGHTS, 2, 0.4, 0.25},
    {"qwen3-moe-tiny-bf16", "qwen3-moe-tiny", PL_Q4_WEIGHTS, 2, 0.3, 0.25},
    {"olmoe-tiny-bf16", "olmoe-tiny", PL_Q4_WEIGHTS, 2, 0.4, 0.25},
    {"gpt-oss-tiny-bf16", "gpt-oss-tiny", PL_Q4_WEIGHTS, 2, 0.4, 0.25},
    {"glm4-moe-tiny-bf16", "glm4-moe-tiny", PL_Q4_WEIGHTS, 2, 0.6, 0.25},
};

/* log(sum exp x) in double */
static double ref_lse(const float *x, uint32_t V)
{
    double m = -INFINITY, s = 0;
    for (uint32_t i = 0; i < V; i++)
        m = x[i] > m ? x[i] : m;
    for (uint32_t i = 0; i < V; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

/* log_softmax(x)[id] in double */
static double ref_lp(const float *x, uint32_t V, int32_t id) { return x[id] - ref_lse(x, V); }

/* the k-th largest of x (k < 2) */
static float kth_largest(const float *x, uint32_t V, int k)
{
    uint32_t a = argmax(x, V), b = a ? 0 : 1;
    for (uint32_t i = 0; i < V; i++)
        if (i != a && x[i] > x[b])
            b = i;
    return x[k ? b : a];
}

/* Log-probs of one family x placement (infer_now names it in every failure):
 *  - echo's prompt log-probs of the fixture's 3 rows (left padding dropped) = log_softmax of
 *    transformers' logits within 1e-3, and each of the 2 top alternatives is its token's
 *    log-prob and they are the 2 largest. A lossy row: the same against log_softmax of the
 *    engine's logits in that placement (fixture_logits), and those within the row's bounds of
 *    transformers' (the nmse and argmax agreement of its infer table);
 *  - a generated token's log-prob (the decode's logits) = the same token's when the output is
 *    echoed as a prompt (the prefill's), the greedy token the top alternative. */
static void lp_check(const lp_row *c)
{
    ref r;
    load_ref(c->ref, &r);
    const uint32_t V = r.vocab;
    int exact = c->place < PL_N_EXACT;
    fg_engine_opts eo = place_opts(c->place);
    const char *store = convert_as(c->layout, c->q4, 0);
    float *mine = NULL;
    if (!exact) {
        fg_engine_opts lo = eo;
        lo.policy.gbs = 4, lo.policy.ngb = 1; /* as the session's */
        mine = fixture_logits(store, &r, lo, NULL);
        result res = compare_logits(mine, &r);
        printf("%s: logits vs transformers: nmse %.4f (bound %g), argmax agreement %.3f (bound "
               "%g)\n", infer_now, res.nmse, c->bound, res.agree, c->agree);
        ck_assert_msg(res.nmse < c->bound && res.agree >= c->agree, "%s: logits nmse %g (bound "
                      "%g), argmax agreement %g (bound %g)", infer_now, res.nmse, c->bound,
                      res.agree, c->agree);
    }
    fg_session *s = open_session_eo(store, 64, 4, &eo);
    fg_request q[3];
    uint32_t pad[3];
    for (int b = 0; b < 3; b++) {
        for (pad[b] = 0; pad[b] < 12 && !r.mask[b][pad[b]];)
            pad[b]++;
        ck_assert_uint_lt(pad[b], 11);
        q[b] = greedy_req(r.ids[b] + pad[b], 12 - pad[b], 1);
        q[b].echo = 1, q[b].logprobs = 2;
    }
    fg_response resp[3];
    fg_err err;
    ck_assert_msg(fg_session_generate(s, q, 3, NULL, NULL, resp, &err) == 0, "%s: %s", infer_now,
                  err.msg);
    const char *what = exact ? "transformers" : "the engine's logits";
    for (int b = 0; b < 3; b++) {
        ck_assert_msg(resp[b].status == 0, "%s: row %d: status %d", infer_now, b, resp[b].status);
        ck_assert(isnan(resp[b].prompt_logprob[0]));
        ck_assert_int_eq(resp[b].prompt_top[0].id, -1);
        for (uint32_t t = 1; t < 12 - pad[b]; t++) {
            const float *x = exact ? r.logits + ((size_t)b * 12 + pad[b] + t - 1) * V
                                   : mine + ((size_t)b * 12 + t - 1) * V;
            double want = ref_lp(x, V, r.ids[b][pad[b] + t]);
            double got = resp[b].prompt_logprob[t];
            ck_assert_msg(fabs(got - want) < 1e-3, "%s: row %d pos %u: %f vs %s %f", infer_now,
                          b, t, got, what, want);
            const fg_token_lp *top = &resp[b].prompt_top[t * 2];
            ck_assert_msg(top[0].logprob >= top[1].logprob, "%s: row %d pos %u: top not sorted",
                          infer_now, b, t);
            for (int j = 0; j < 2; j++) {
                double its = ref_lp(x, V, top[j].id);
                double kth = kth_largest(x, V, j) - ref_lse(x, V);
                ck_assert_msg(fabs(top[j].logprob - its) < 1e-3 && fabs(top[j].logprob - kth) < 1e-3,
                              "%s: row %d pos %u: alternative %d (token %d) %f: %s %f, its %d-th "
                              "best %f", infer_now, b, t, j, top[j].id, top[j].logprob, what, its,
                              j + 1, kth);
            }
        }
        fg_response_clear(&resp[b]);
    }
    free(r.logits);
    free(mine);
    /* decode vs prefill */
    fg_request g = greedy_req(r.prompt, r.n_prompt, 6);
    g.logprobs = 1;
    ck_assert_msg(fg_session_generate(s, &g, 1, NULL, NULL, resp, &err) == 0, "%s: %s",
                  infer_now, err.msg);
    ck_assert_uint_eq(resp[0].choices[0].n_top, 1);
    int32_t all[80];
    memcpy(all, r.prompt, r.n_prompt * 4);
    memcpy(all + r.n_prompt, resp[0].choices[0].tokens, 6 * 4);
    fg_request e = greedy_req(all, r.n_prompt + 6, 1);
    e.echo = 1, e.logprobs = 0;
    ck_assert_msg(fg_session_generate(s, &e, 1, NULL, NULL, &resp[1], &err) == 0, "%s: %s",
                  infer_now, err.msg);
    for (uint32_t t = 0; t < 6; t++) {
        float a = resp[0].choices[0].logprob[t], b = resp[1].prompt_logprob[r.n_prompt + t];
        ck_assert_msg(fabs(a - b) < 1e-3, "%s: token %u: decode %f, prefill %f", infer_now, t, a,
                      b);
        /* greedy: the chosen token is the top alternative */
        ck_assert_int_eq(resp[0].choices[0].top[t].id, resp[0].choices[0].tokens[t]);
    }
    fg_response_clear(&resp[0]);
    fg_response_clear(&resp[1]);
    fg_session_close(s);
}

static char lp_name[256];

static void lp_row_begin(int i, const lp_row *c)
{
    snprintf(lp_name, sizeof lp_name, "logprobs %s (%s), %s", c->ref, c->layout,
             place_name[c->place]);
    infer_now = lp_name;
    printf("case %d: %s\n", i, lp_name);
    fflush(stdout);
}

/* Each family in every exact placement (one store, a session each) */
START_TEST(logprobs_fixtures)
{
    for (int p = 0; p < PL_N_EXACT; p++) {
        lp_row c = {lp_families[_i].layout, lp_families[_i].ref, p, 0, 0, 0};
        lp_row_begin(_i, &c);
        lp_check(&c);
    }
}
END_TEST

START_TEST(logprobs_lossy)
{
    lp_row_begin(_i, &lp_lossy[_i]);
    lp_check(&lp_lossy[_i]);
}
END_TEST

START_TEST(greedy_fixtures)
{
    ref r;
    load_ref(families[_i].ref, &r);
    free(r.logits);
    fg_session *s = open_session(fixture_store(families[_i].layout), 64, 4);
    ck_assert_uint_eq(fg_session_info_get(s)->max_ctx, 64);
    int32_t other[5] = {5, 6, 7, 8, 9};
    fg_request q[3] = {greedy_req(other, 5, 3), greedy_req(r.prompt, r.n_prompt, r.n_greedy),
                       greedy_req(other, 2, 30)};
    fg_response resp[3];
    fg_err err;
    for (int packed = 0; packed < 2; packed++) {
        const fg_request *qs = packed ? q : &q[1];
        uint32_t nq = packed ? 3 : 1;
        ck_assert_msg(fg_session_generate(s, qs, nq, NULL, NULL, resp, &err) == 0, "%s", err.msg);
        fg_response *g = &resp[packed];
        ck_assert_int_eq(g->status, 0);
        ck_assert_uint_eq(g->n_choices, 1);
        ck_assert_uint_eq(g->choices[0].n_tokens, r.n_greedy);
        for (uint32_t i = 0; i < r.n_greedy; i++)
            ck_assert_msg(g->choices[0].tokens[i] == r.greedy[i], "%s: token %u: %d vs %d",
                          families[_i].ref, i, g->choices[0].tokens[i], r.greedy[i]);
        ck_assert_int_eq(g->choices[0].finish, FG_FINISH_LENGTH);
        for (uint32_t i = 0; i < nq; i++)
            fg_response_clear(&resp[i]);
    }
    fg_session_stats st;
    fg_session_stats_get(s, &st);
    ck_assert_uint_eq(st.requests, 4);
    fg_session_close(s);
}
END_TEST

static void sampled(fg_session *s, const fg_request *q, uint32_t n, uint32_t which,
                    int32_t out[3][8])
{
    fg_response resp[4];
    fg_err err;
    ck_assert_msg(fg_session_generate(s, q, n, NULL, NULL, resp, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(resp[which].status, 0);
    ck_assert_uint_eq(resp[which].n_choices, 3);
    for (int c = 0; c < 3; c++) {
        ck_assert_uint_eq(resp[which].choices[c].n_tokens, 8);
        memcpy(out[c], resp[which].choices[c].tokens, 8 * sizeof(int32_t));
    }
    for (uint32_t i = 0; i < n; i++)
        fg_response_clear(&resp[i]);
}

/* Scoring: each split of the fixture's rows into context + continuation (ids) gives the sum of
 * log_softmax of transformers' logits over the continuation within 1e-3, and is_greedy as its
 * argmax says; equal windows are scored once (the same answers). */
START_TEST(score_fixtures)
{
    ref r;
    load_ref(families[_i].ref, &r);
    fg_session *s = open_session(fixture_store(families[_i].layout), 64, 4);
    fg_score_req q[8];
    fg_score_res out[8];
    double want[8];
    int greedy[8];
    for (int i = 0; i < 8; i++) {
        int row = i & 1, k = 2 + i; /* context r.ids[row][0..k), continuation the rest */
        q[i] = (fg_score_req){NULL, r.ids[row], (uint32_t)k, NULL, r.ids[row] + k,
                              (uint32_t)(12 - k)};
        want[i] = 0;
        greedy[i] = 1;
        for (int t = k - 1; t < 11; t++) {
            const float *x = r.logits + ((size_t)row * 12 + t) * r.vocab;
            want[i] += ref_lp(x, r.vocab, r.ids[row][t + 1]);
            greedy[i] &= (int32_t)argmax(x, r.vocab) == r.ids[row][t + 1];
        }
    }
    q[7] = q[5]; /* a duplicate */
    want[7] = want[5], greedy[7] = greedy[5];
    fg_err err;
    ck_assert_msg(fg_session_score(s, q, 8, out, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(out[i].status, 0);
        ck_assert_uint_eq(out[i].n_tokens, 12 - (2 + (i == 7 ? 5 : i)));
        ck_assert_msg(fabs(out[i].logprob - want[i]) < 1e-3, "%s pair %d: %f vs %f",
                      families[_i].ref, i, out[i].logprob, want[i]);
        ck_assert_int_eq(out[i].is_greedy, greedy[i]);
    }
    /* an empty continuation is refused by that pair alone */
    q[1].n_cont_ids = 0;
    ck_assert(fg_session_score(s, q, 2, out, &err) == 0);
    ck_assert_int_eq(out[0].status, 0);
    ck_assert_int_eq(out[1].status, 400);
    free(r.logits);
    fg_session_close(s);
}
END_TEST

/* Rolling: lm-eval's windows. With a context of 8 tokens, a 20-token text is 3 windows (7, 7,
 * 6 predictions); the sum equals scoring each token from the window's own prefix as pairs. */
START_TEST(score_rolling_windows)
{
    fg_session *s = open_session(austen_store(), 8, 4);
    const char *text = "It is a truth universally acknowledged, that a single man in possession "
                       "of a good fortune";
    int32_t *ids;
    uint32_t n;
    fg_err err;
    ck_assert(fg_session_tokenize(s, text, 0, &ids, &n, &err) == 0);
    ck_assert_uint_gt(n, 14);
    double lp, want = 0;
    uint64_t nt;
    ck_assert_msg(fg_session_score_rolling(s, text, &lp, &nt, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(nt, n);
    int32_t bos = fg_session_info_get(s)->bos_id, first[8];
    first[0] = bos;
    memcpy(first + 1, ids, 6 * 4);
    fg_score_req q = {NULL, first, 1, NULL, first + 1, 6};
    fg_score_res o;
    ck_assert(fg_session_score(s, &q, 1, &o, &err) == 0);
    want += o.logprob;
    q = (fg_score_req){NULL, ids, 0, NULL, ids + 6, 1}; /* token 6 from BOS + 0..5 */
    fg_score_req q1 = {NULL, first, 7, NULL, ids + 6, 1};
    ck_assert(fg_session_score(s, &q1, 1, &o, &err) == 0);
    want += o.logprob;
    for (uint32_t end = 14; ; end += 7) { /* windows predicting [end - 7, end) */
        uint32_t e = end < n ? end : n, pl = e - (end - 7);
        fg_score_req w = {NULL, ids + e - 8, 8 - pl, NULL, ids + e - pl, pl};
        ck_assert(fg_session_score(s, &w, 1, &o, &err) == 0);
        ck_assert_int_eq(o.status, 0);
        want += o.logprob;
        if (end >= n)
            break;
    }
    (void)q;
    ck_assert_msg(fabs(lp - want) < 1e-4, "rolling %f, windows %f", lp, want);
    free(ids);
    fg_session_close(s);
}
END_TEST

START_TEST(seeded_packing)
{
    const char *store = fixture_store("llama3-tiny-bf16");
    int32_t p[6] = {1, 20, 30, 40, 50, 60}, o1[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, o2[2] = {1, 9};
    fg_request q = greedy_req(p, 6, 8);
    q.sample = (fg_sample_params){1.0f, 0, 1, 1234};
    q.set |= FG_REQ_SET_SEED;
    q.n = 3;
    fg_request mix[3] = {greedy_req(o1, 9, 4), q, greedy_req(o2, 2, 8)};
    mix[2].sample.temperature = 0.7f;
    mix[2].n = 2;
    int32_t a[3][8], b[3][8], c[3][8];
    fg_session *s = open_session(store, 32, 4);
    sampled(s, &q, 1, 0, a);
    sampled(s, mix, 3, 1, b);
    fg_session_close(s);
    s = open_session(store, 32, 1);
    ck_assert_uint_eq(fg_session_info_get(s)->block_seqs, 1);
    sampled(s, mix, 3, 1, c);
    fg_session_close(s);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_mem_eq(a, c, sizeof a);
    ck_assert(memcmp(a[0], a[1], sizeof a[0]) || memcmp(a[1], a[2], sizeof a[1]));
}
END_TEST

/* Penalties reach the sampler: greedy with a strong repetition penalty never repeats a token of
 * its prompt or output while plain greedy on the fixture does; min_tokens holds EOS back. */
START_TEST(penalties_apply)
{
    ref r;
    load_ref("opt-350m-style", &r);
    free(r.logits);
    fg_session *s = open_session(fixture_store("opt-350m-style-safetensors"), 64, 4);
    fg_request q[2] = {greedy_req(r.prompt, r.n_prompt, 12), greedy_req(r.prompt, r.n_prompt, 12)};
    q[1].repetition_penalty = 1e6f;
    q[1].set |= FG_REQ_SET_REPETITION;
    fg_response resp[2];
    fg_err err;
    ck_assert_msg(fg_session_generate(s, q, 2, NULL, NULL, resp, &err) == 0, "%s", err.msg);
    const fg_choice *a = &resp[0].choices[0], *b = &resp[1].choices[0];
    int rep_a = 0, rep_b = 0;
    for (uint32_t i = 0; i < 12; i++)
        for (uint32_t j = 0; j < i; j++) {
            rep_a += a->tokens[i] == a->tokens[j];
            rep_b += b->tokens[i] == b->tokens[j];
        }
    ck_assert_int_gt(rep_a, 0);
    ck_assert_int_eq(rep_b, 0);
    fg_response_clear(&resp[0]);
    fg_response_clear(&resp[1]);
    fg_session_close(s);
}
END_TEST

START_TEST(error_responses)
{
    fg_session *s = open_session(fixture_store("opt-tiny-safetensors"), 24, 2);
    int32_t ok[3] = {2, 50, 60}, big[20] = {2}, bad[2] = {2, 1 << 20};
    fg_request q[6] = {greedy_req(ok, 3, 4), greedy_req(big, 20, 10), greedy_req(ok, 3, 4),
                       greedy_req(bad, 2, 4), greedy_req(ok, 3, 4), greedy_req(ok, 3, 2)};
    q[2].messages = "[{\"role\": \"user\", \"content\": \"hi\"}]"; /* and ids: both */
    q[4].prompt_ids = NULL, q[4].messages = q[2].messages;        /* no chat template */
    q[5].logprobs = 99;
    fg_response r[6];
    fg_err err;
    ck_assert_msg(fg_session_generate(s, q, 6, NULL, NULL, r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r[0].status, 0);
    ck_assert_uint_eq(r[0].choices[0].n_tokens, 4);
    ck_assert_int_eq(r[1].status, 413);
    ck_assert_str_eq(r[1].error_type, "context_length_exceeded");
    ck_assert_int_eq(r[2].status, 400);
    ck_assert_int_eq(r[3].status, 400);
    ck_assert_ptr_nonnull(strstr(r[3].error, "1048576"));
    ck_assert_int_eq(r[4].status, 400);
    ck_assert_int_eq(r[5].status, 400);
    ck_assert_ptr_nonnull(strstr(r[5].error, "logprobs"));
    for (int i = 0; i < 6; i++) {
        if (i)
            ck_assert_uint_eq(r[i].n_choices, 0);
        fg_response_clear(&r[i]);
    }
    fg_session_stats st;
    fg_session_stats_get(s, &st);
    ck_assert_uint_eq(st.errors, 5);
    fg_session_close(s);
}
END_TEST

/* ---- streaming ---- */

typedef struct stream_log {
    char text[4][2048];
    uint32_t ids[4];
    int finish[4], calls, cancel_req;
} stream_log;

static int whole_utf8(const char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + l > n)
            return 0;
        i += l;
    }
    return 1;
}

static int on_piece(void *ctx, uint32_t req, uint32_t choice, const char *piece, size_t len,
                    const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids, int finish)
{
    stream_log *l = ctx;
    uint32_t k = req * 2 + choice;
    (void)ids, (void)lp;
    ck_assert(k < 4);
    ck_assert_int_eq(l->finish[k], FG_FINISH_NONE); /* nothing after the last call */
    ck_assert(whole_utf8(piece, len));
    strncat(l->text[k], piece, len);
    l->ids[k] += n_ids;
    l->finish[k] = finish;
    l->calls++;
    return (int)req == l->cancel_req && l->ids[k] >= 3;
}

START_TEST(streaming)
{
    fg_session *s = open_session(austen_store(), 128, 4);
    fg_request q[2] = {0};
    q[0].prompt = "It is a truth universally acknowledged";
    q[0].max_tokens = 40;
    q[0].sample = (fg_sample_params){0.9f, 0, 1, 5};
    q[0].set = FG_REQ_SET_TEMPERATURE | FG_REQ_SET_SEED;
    q[0].n = 2;
    q[0].logprobs = -1;
    q[1] = q[0];
    q[1].prompt = "Mr. Darcy";
    q[1].stops[0] = ",";
    q[1].stops[1] = "the";
    q[1].n_stops = 2;
    fg_response r[2], r2[2];
    fg_err err;
    stream_log l = {0};
    l.cancel_req = -1;
    ck_assert_msg(fg_session_generate(s, q, 2, on_piece, &l, r, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++) {
            fg_choice *ch = &r[i].choices[c];
            ck_assert_int_eq(r[i].status, 0);
            ck_assert_str_eq(l.text[i * 2 + c], ch->text);
            ck_assert_uint_eq(l.ids[i * 2 + c], ch->n_tokens);
            ck_assert_int_eq(l.finish[i * 2 + c], ch->finish);
            if (i == 1) {
                ck_assert(!strstr(ch->text, ",") && !strstr(ch->text, "the"));
                if (ch->finish == FG_FINISH_STOP) {
                    char *full;
                    ck_assert(fg_session_detokenize(s, ch->tokens, ch->n_tokens, 1, &full,
                                                    &err) == 0);
                    ck_assert(strstr(full, ",") || strstr(full, "the"));
                    free(full);
                }
            }
        }
    ck_assert_int_eq(r[1].choices[0].finish, FG_FINISH_STOP); /* the seed makes it so */
    ck_assert_int_gt(l.calls, 20);                             /* pieces, not one text */
    /* the same without streaming: the same texts */
    ck_assert_msg(fg_session_generate(s, q, 2, NULL, NULL, r2, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++)
            ck_assert_str_eq(r2[i].choices[c].text, r[i].choices[c].text);
    for (int i = 0; i < 2; i++)
        fg_response_clear(&r2[i]);
    /* a cancel: 499, the other request answered as before */
    memset(&l, 0, sizeof l);
    l.cancel_req = 0;
    ck_assert_msg(fg_session_generate(s, q, 2, on_piece, &l, r2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r2[0].status, 499);
    ck_assert_int_eq(r2[1].status, 0);
    ck_assert_str_eq(r2[1].choices[1].text, r[1].choices[1].text);
    for (int i = 0; i < 2; i++) {
        fg_response_clear(&r[i]);
        fg_response_clear(&r2[i]);
    }
    fg_session_close(s);
}
END_TEST

/* A choice whose last token ends inside a UTF-8 character (Llama 2's byte-fallback pieces): the
 * held-back bytes and their ids come with the last piece, after the block (fill_choice read the
 * ids after handing them to the choice: a crash under fg-serve). */
START_TEST(streaming_held_bytes)
{
    fg_err err;
    fg_session *s = open_session(convert_as("llama2-tiny-f32", 0, 0), 32, 2); /* its own tokenizer */
    static const int32_t ids[] = {1, 306, 471};
    fg_request q = {0};
    q.prompt_ids = ids;
    q.n_prompt_ids = 3;
    q.max_tokens = 1;
    q.logprobs = 1;
    q.echo = 1;
    fg_response r;
    stream_log l = {0};
    l.cancel_req = -1;
    ck_assert_msg(fg_session_generate(s, &q, 1, on_piece, &l, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.status, 0);
    ck_assert_uint_eq(l.ids[0], r.choices[0].n_tokens);
    ck_assert_uint_eq(r.choices[0].n_tokens, 1);
    ck_assert_str_eq(l.text[0], r.choices[0].text);
    ck_assert_int_eq(l.finish[0], r.choices[0].finish);
    fg_response_clear(&r);
    fg_session_close(s);
}
END_TEST

START_TEST(tokenizer_calls)
{
    fg_session *s = open_session(austen_store(), 64, 2);
    const fg_session_info *in = fg_session_info_get(s);
    ck_assert_str_eq(in->model_name, "austen");
    ck_assert_int_eq(in->has_chat_template, 0);
    int32_t *ids;
    uint32_t n;
    char *text;
    fg_err err;
    ck_assert(fg_session_tokenize(s, "Emma Woodhouse, handsome", 0, &ids, &n, &err) == 0);
    ck_assert_uint_ge(n, 3);
    ck_assert(fg_session_detokenize(s, ids, n, 1, &text, &err) == 0);
    ck_assert_str_eq(text, "Emma Woodhouse, handsome");
    free(text);
    free(ids);
    /* a special token written in the text is one id with or without add_special, as
     * transformers' tokenizer(text, add_special_tokens=False) gives it; add_special adds BOS */
    ck_assert(fg_session_tokenize(s, "Emma</s>", 0, &ids, &n, &err) == 0);
    ck_assert_uint_ge(n, 2);
    ck_assert_int_eq(ids[n - 1], in->eos_id);
    ck_assert_int_ne(ids[0], in->bos_id);
    free(ids);
    ck_assert(fg_session_tokenize(s, "Emma</s>", 1, &ids, &n, &err) == 0);
    ck_assert_int_eq(ids[0], in->bos_id);
    ck_assert_int_eq(ids[n - 1], in->eos_id);
    free(ids);
    ck_assert(fg_session_chat_render(s, "[]", NULL, &text, &err) != 0);
    fg_session_close(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("session");
    TCase *tc = infer_tcase("session", 300);
    tcase_add_loop_test(tc, greedy_fixtures, 0, INFER_ROWS(families));
    tcase_add_loop_test(tc, logprobs_fixtures, 0, INFER_ROWS(lp_families));
    tcase_add_loop_test(tc, logprobs_lossy, 0, INFER_ROWS(lp_lossy));
    tcase_add_loop_test(tc, score_fixtures, 0, INFER_ROWS(families));
    tcase_add_test(tc, score_rolling_windows);
    tcase_add_test(tc, seeded_packing);
    tcase_add_test(tc, penalties_apply);
    tcase_add_test(tc, error_responses);
    tcase_add_test(tc, streaming);
    tcase_add_test(tc, streaming_held_bytes);
    tcase_add_test(tc, tokenizer_calls);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
