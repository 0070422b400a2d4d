/* test_infer_compute.c - the compute paths against transformers, over tables of families: the
 * fixture batch replicated to 15 sequences (180 prompt rows) runs the CPU's prefill panel GEMMs
 * (16-bit weights within 1e-3 of transformers, Q4 int8 against the row kernel); 4-bit weights,
 * dense and mixtures of experts (routers kept 16-bit), within each row's bounds; int8
 * activations times 4-bit weights; the 4-bit KV cache and sparse attention.
 *
 * Tolerances: Q4 (group 64, axis 0) on OPT: normalized MSE of the logits <= 0.15 and argmax
 * agreement >= 60% (measured: 0.085 and 71%). That bound is loose on purpose: these fixtures
 * have random weights with a wide spread (std 0.25) and a 32-wide hidden state, the worst case
 * for 4-bit groups; the accuracy that matters is the perplexity of a trained model (README's
 * accuracy table). */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_common.h"

/* The fixture batch five times over in one block of 15 sequences: the prefill's Linear layers
 * then see over 48 rows (180), which the CPU backend computes with its panel GEMMs (16-bit
 * weights: fg_w16_gemm; Q4 under int8 compute: fg_quant_gemm_panel) instead of the kernels for
 * few rows. Logits of every copy into out [15][12][vocab]; the engine's stats into *st. */
enum { REPS = 5, NREP = 3 * REPS };

static void replicated_logits(const char *store, const ref *r, fg_engine_opts o, float *out,
                              fg_engine_stats *st)
{
    o.max_ctx = 64;
    o.threads = 2;
    o.policy.gbs = NREP, o.policy.ngb = 1;
    eng x;
    fg_err err;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    int32_t seqs[NREP][12];
    const int32_t *win[NREP];
    uint32_t lens[NREP];
    for (int q = 0; q < NREP; q++) {
        int b = q % 3;
        lens[q] = 0;
        for (int t = 0; t < 12; t++)
            if (r->mask[b][t])
                seqs[q][lens[q]++] = r->ids[b][t];
        win[q] = seqs[q];
    }
    ck_assert_msg(fg_engine_logits(x.e, win, lens, NREP, NULL, NULL, out, 12 * r->vocab, &err) ==
                      0, "%s", err.msg);
    fg_engine_stats_get(x.e, st);
    eng_close(&x);
}

/* Copy q's tokens (fixture row q % 3 without its left padding) and, in *pad, the padding before
 * them in transformers' rows. */
static uint32_t copy_len(const ref *r, int q, int *pad)
{
    uint32_t len = 0;
    for (int t = 0; t < 12; t++)
        len += r->mask[q % 3][t] != 0;
    *pad = 12 - (int)len;
    return len;
}

/* 16-bit weights: every copy's logits within 1e-3 of transformers'. */
static void prefill_gemm_case(const infer_case *c)
{
    const char *layout = c->layout;
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(layout, 0);
    uint32_t V = r.vocab;
    float *out = calloc((size_t)NREP * 12 * V, 4);
    fg_engine_stats st;
    replicated_logits(store, &r, defaults(), out, &st);
    double worst = 0;
    for (int q = 0; q < NREP; q++) {
        int b = q % 3, pad;
        uint32_t len = copy_len(&r, q, &pad);
        for (uint32_t t = 0; t < len; t++)
            for (uint32_t v = 0; v < V; v++)
                worst = fmax(worst, fabs(out[(q * 12 + t) * V + v] -
                                         r.logits[(b * 12 + pad + t) * V + v]));
    }
    if (fg_w16_gemm_fast()) /* else the CPU has no kernel for it and sgemm runs */
        ck_assert_msg(st.weight_bytes_panel > 0, "%s: the prefill GEMM did not run", c->name);
    ck_assert_msg(worst < 1e-3, "%s: %s: max |logit diff| %g", c->name, layout, worst);
    free(out);
    free(r.logits);
}

/* {case, layout, reference} */
static const infer_case prefill_rows[] = {
    {"prefill_gemm_opt", "opt-tiny-safetensors", "opt-tiny"},
    {"prefill_gemm_llama3_bf16", "llama3-tiny-bf16", "llama3-tiny"},
    {"prefill_gemm_qwen2_bf16", "qwen2-tiny-bf16", "qwen2-tiny"},
    {"prefill_gemm_qwen3_bf16", "qwen3-tiny-bf16", "qwen3-tiny"},
};

START_TEST(prefill_gemm) { prefill_gemm_case(infer_row(prefill_rows, _i)); }
END_TEST

/* --compute bf16: the same 16-bit rows with x and the weights rounded to bfloat16 in the prefill
 * GEMMs (on a CPU with AVX512-BF16; f32 elsewhere): against transformers' f32 logits, normalized
 * MSE <= 4e-4 and every argmax equal where transformers' top two logits differ by more than
 * 0.05 (measured on an AMD EPYC with AVX512-BF16: nmse 2.2e-5 opt, 3.7e-5 llama3, 8.8e-5 qwen2,
 * 2.5e-5 qwen3; x's 16-pair halves swapped in fg_xpack_bf16 gave nmse 1.2-2.0). */
START_TEST(prefill_gemm_bf16)
{
    const infer_case *c = infer_row(prefill_rows, _i);
    ref r;
    load_ref(c->ref, &r);
    const char *store = convert(c->layout, 0);
    uint32_t V = r.vocab;
    float *out = calloc((size_t)NREP * 12 * V, 4);
    fg_engine_opts o = defaults();
    o.compute = FG_COMPUTE_BF16;
    fg_engine_stats st;
    replicated_logits(store, &r, o, out, &st);
    double num = 0, den = 0;
    int flips = 0;
    for (int q = 0; q < NREP; q++) {
        int b = q % 3, pad;
        uint32_t len = copy_len(&r, q, &pad);
        for (uint32_t t = 0; t < len; t++) {
            const float *got = out + (size_t)(q * 12 + t) * V;
            const float *want = r.logits + (size_t)(b * 12 + pad + t) * V;
            uint32_t ga = 0, wa = 0, w2 = wa == 0 ? 1 : 0;
            for (uint32_t v = 0; v < V; v++) {
                double d = got[v] - want[v];
                num += d * d, den += (double)want[v] * want[v];
                ga = got[v] > got[ga] ? v : ga;
                wa = want[v] > want[wa] ? v : wa;
            }
            for (uint32_t v = 0; v < V; v++)
                if (v != wa && (w2 == wa || want[v] > want[w2]))
                    w2 = v;
            if (ga != wa && want[wa] - want[w2] > 0.05f)
                flips++;
        }
    }
    fprintf(stderr, "%s --compute bf16 vs transformers f32: nmse %.3g, argmax flips %d\n",
            c->name, num / den, flips);
    if (fg_w16_gemm_bf16_fast())
        ck_assert_msg(st.weight_bytes_panel > 0, "%s: the bf16 GEMM did not run", c->name);
    ck_assert_msg(num <= 4e-4 * den && flips == 0, "%s: bf16: nmse %g, argmax flips %d",
                  c->name, num / den, flips);
    free(out);
    free(r.logits);
}
END_TEST

/* Q4 along the input axis under int8 compute: the panel kernel's logits against the row
 * kernel's (FG_PANEL_GEMM=0): per layer the same integers with float sums in another order, but
 * a last-bit difference can move a later layer's activation across an int8 rounding boundary
 * (one code, a 1/127 step of that row's scale), so the two agree to nmse 1e-4 (measured 3e-6),
 * not to the last bit; a wrong row, column or scale gives nmse near 1. */
START_TEST(prefill_gemm_q4_int8)
{
    ref r;
    load_ref("opt-tiny", &r);
    const char *store = convert("opt-tiny-safetensors", 2);
    size_t n = (size_t)NREP * 12 * r.vocab;
    float *panel = calloc(n, 4), *rows = calloc(n, 4);
    fg_engine_opts o = defaults();
    o.compute = FG_COMPUTE_INT8;
    fg_engine_stats st;
    replicated_logits(store, &r, o, panel, &st);
    fg_codec q4 = fg_codec_quant(4, 64, 1);
    if (fg_quant_gemm_panel_fast(&q4))
        ck_assert_msg(st.weight_bytes_panel > 0, "the int8 panel kernel did not run");
    setenv("FG_PANEL_GEMM", "0", 1);
    replicated_logits(store, &r, o, rows, &st);
    unsetenv("FG_PANEL_GEMM");
    ck_assert_uint_eq(st.weight_bytes_panel, 0);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += (panel[i] - rows[i]) * (double)(panel[i] - rows[i]), den += (double)rows[i] * rows[i];
    size_t worst = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(panel[i] - rows[i]) > fabsf(panel[worst] - rows[worst]))
            worst = i;
    ck_assert_msg(num <= 1e-4 * den, "panel vs row kernel: nmse %g (worst at %zu: %g vs %g)",
                  num / den, worst, panel[worst], rows[worst]);
    free(panel), free(rows), free(r.logits);
}
END_TEST

/* 4-bit weights against transformers' f32 logits, within the stated bounds (see the file's top
 * comment for OPT, llama_q4 for the Llama family). */
static void q4_check(const char *store, const ref *r, const char *refname, int axis,
                     double nmse, double agree)
{
    fg_engine_opts o = defaults();
    o.policy.compress_weight = 1;
    result res = check_logits(store, r, o);
    fprintf(stderr, "%s q4 (g64, axis %d) vs transformers f32: nmse %.4g, max |diff| %.3g, "
            "argmax agreement %.3f\n", refname, axis, res.nmse, res.max_diff, res.agree);
    ck_assert_msg(res.nmse < nmse && res.agree >= agree, "%s: %s q4: nmse %g, max diff %g, "
                  "agreement %g", infer_now, refname, res.nmse, res.max_diff, res.agree);
}

static void q4_case(const infer_case *c)
{
    ref r;
    load_ref(c->ref, &r);
    q4_check(convert(c->layout, 1), &r, c->ref, 0, c->bound, c->agree);
    free(r.logits);
}

/* {case, layout, reference, nmse bound, argmax agreement bound} */
static const infer_case q4_rows[] = {
    {"q4_weights_within_bound", "opt-tiny-safetensors", "opt-tiny", 0.15, 0.6},
    /* 4-bit weights (--compress-weight, from a BF16 checkpoint) on Llama 3 and Qwen2: a sanity
     * bound (measured: nmse 0.24 and 0.25, argmax agreement 0.45 and 0.52). These random models
     * have 64-wide rows, so each row is one group of 64, and tied heads with logits of std ~4: the
     * worst case for 4-bit groups; the accuracy that matters is a trained model's perplexity
     * (README's table). */
    {"llama_q4_weights", "llama3-tiny-bf16", "llama3-tiny", 0.35, 0.4},
    {"qwen2_q4_weights", "qwen2-tiny-bf16", "qwen2-tiny", 0.35, 0.4},
    {"qwen3_q4_weights", "qwen3-tiny-bf16", "qwen3-tiny", 0.35, 0.4},
};

START_TEST(q4_weights) { q4_case(infer_row(q4_rows, _i)); }
END_TEST

/* A mixture of experts in 4 bits (groups of 64 along the input axis: the experts' 32 rows
 * cannot hold axis-0 groups of 64): its routers stay 16-bit (fg_role_stays_wide). Measured
 * (nmse, argmax agreement): mixtral-tiny 0.360, 0.161; qwen2-moe-tiny 0.293, 0.355;
 * qwen3-moe-tiny 0.197, 0.387 (with 4-bit routers 0.354, 0.161; 0.326, 0.387; 0.213, 0.355:
 * on these random 64-wide models the experts' own error dominates). */
static void moe_q4_case(const infer_case *c)
{
    const char *refname = c->ref;
    ref r;
    load_ref(refname, &r);
    const char *store = convert(c->layout, 2);
    fg_store *st;
    fg_err err;
    ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &st, &err), FG_OK);
    fg_store_tensor *t;
    int oss = !strncmp(refname, "gpt-oss", 7); /* (its router's own name) */
    int glm = !strncmp(refname, "glm4", 4);   /* (its layer 0 dense) */
    ck_assert_int_eq(fg_store_tensor_get(st, oss ? "model.layers.0.mlp.router.weight"
                                             : glm ? "model.layers.1.mlp.gate.weight"
                                                   : "model.layers.0.mlp.gate.weight", &t, &err),
                     FG_OK);
    ck_assert_msg(t->codec.id == FG_CODEC_BF16, "%s: the router is %s", refname,
                  fg_codec_name(t->codec.id));
    fg_store_tensor_free(t);
    ck_assert_int_eq(fg_store_tensor_get(st, glm ? "model.layers.1.mlp.experts.up_proj.weight"
                                             : "model.layers.0.mlp.experts.up_proj.weight", &t,
                                         &err), FG_OK);
    ck_assert_msg(t->codec.id == FG_CODEC_Q4, "%s: the experts are %s", c->name,
                  fg_codec_name(t->codec.id));
    fg_store_tensor_free(t);
    fg_store_close(st);
    q4_check(store, &r, refname, 1, c->bound, c->agree);
    free(r.logits);
}
/* {case, layout, reference, nmse bound, argmax agreement bound} */
static const infer_case moe_q4_rows[] = {
    {"mixtral_q4_weights", "mixtral-tiny-bf16", "mixtral-tiny", 0.45, 0.1},
    {"qwen2_moe_q4_weights", "qwen2-moe-tiny-bf16", "qwen2-moe-tiny", 0.4, 0.25},
    {"qwen3_moe_q4_weights", "qwen3-moe-tiny-bf16", "qwen3-moe-tiny", 0.3, 0.25},
    {"olmoe_q4_weights", "olmoe-tiny-bf16", "olmoe-tiny", 0.4, 0.25},
    {"gpt_oss_q4_weights", "gpt-oss-tiny-bf16", "gpt-oss-tiny", 0.4, 0.25},
    /* (nmse 0.468 measured: three layers, one more than the rest) */
    {"glm4_moe_q4_weights", "glm4-moe-tiny-bf16", "glm4-moe-tiny", 0.6, 0.25},
};

START_TEST(moe_q4_weights) { moe_q4_case(infer_row(moe_q4_rows, _i)); }
END_TEST

/* 4-bit KV cache and sparse attention: bounded changes to the logits; sparsity 1 is dense. */
START_TEST(compressed_cache_and_sparse_attention)
{
    ref r;
    load_ref("opt-tiny", &r);
    const char *store = convert("opt-tiny-safetensors", 0);
    fg_engine_opts o = defaults();
    o.policy.compress_cache = 1;
    result res = check_logits(store, &r, o);
    fprintf(stderr, "q4 KV cache vs transformers: nmse %.4g, max |diff| %.3g, agreement %.3f\n",
            res.nmse, res.max_diff, res.agree);
    ck_assert_msg(res.nmse < 0.05 && res.agree >= 0.8, "q4 cache: nmse %g agreement %g", res.nmse,
                  res.agree);
    o = defaults();
    o.policy.attn_sparsity = 1.0f;
    res = check_logits(store, &r, o);
    ck_assert_msg(res.max_diff < 1e-3 && res.agree == 1.0, "sparsity 1: %g", res.max_diff);
    o.policy.attn_sparsity = 0.5f;
    res = check_logits(store, &r, o);
    fprintf(stderr, "attention sparsity 0.5 vs transformers: nmse %.4g, agreement %.3f\n",
            res.nmse, res.agree);
    ck_assert_msg(res.nmse > 0 && res.nmse < 0.5, "sparsity 0.5: nmse %g", res.nmse);
    free(r.logits);
}
END_TEST

/* Int8 activations times 4-bit weights grouped along the input axis: the same store computed
 * in f32 and with --compute int8 agree closely, and both stay within the 4-bit bound. */
START_TEST(int8_compute_within_bound)
{
    ref r;
    load_ref("opt-tiny", &r);
    const char *store = convert("opt-tiny-safetensors", 2);
    fg_engine_opts o = defaults();
    result f32 = check_logits(store, &r, o);
    o.compute = FG_COMPUTE_INT8;
    fg_engine_stats st;
    result i8 = check_logits_st(store, &r, o, &st);
    fg_codec q4 = fg_codec_quant(4, 64, 1);
    (void)q4, (void)st; /* 36 prompt rows: the row kernel's (the panel's: prefill_gemm_q4) */
    fprintf(stderr, "q4 axis 1: f32 compute nmse %.4g agreement %.3f; int8 compute nmse %.4g "
            "agreement %.3f\n", f32.nmse, f32.agree, i8.nmse, i8.agree);
    ck_assert_msg(f32.nmse < 0.15 && i8.nmse < 0.15, "nmse f32 %g int8 %g", f32.nmse, i8.nmse);
    ck_assert_msg(i8.nmse < 1.25 * f32.nmse + 0.005, "int8 adds too much: %g vs %g", i8.nmse,
                  f32.nmse);
    ck_assert_msg(i8.agree >= 0.6, "int8 argmax agreement %g", i8.agree);
    o.policy.gbs = 2, o.policy.ngb = 2; /* decode steps through the int8 path too */
    check_logits(store, &r, o);
    free(r.logits);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("infer_compute");
    TCase *tc = infer_tcase("compute", 120);
    tcase_add_loop_test(tc, prefill_gemm, 0, INFER_ROWS(prefill_rows));
    tcase_add_loop_test(tc, prefill_gemm_bf16, 0, INFER_ROWS(prefill_rows));
    tcase_add_test(tc, prefill_gemm_q4_int8);
    tcase_add_loop_test(tc, q4_weights, 0, INFER_ROWS(q4_rows));
    tcase_add_loop_test(tc, moe_q4_weights, 0, INFER_ROWS(moe_q4_rows));
    tcase_add_test(tc, compressed_cache_and_sparse_attention);
    tcase_add_test(tc, int8_compute_within_bound);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
