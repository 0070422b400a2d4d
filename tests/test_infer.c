/* test_infer.c - the whole path against transformers: each fixture checkpoint layout is
 * converted into a store (fg_convert_import), opened by the engine, and its logits for the
 * fixture batch (left padding included) and its greedy continuation are compared with what
 * transformers computed (tests/fixtures/make_opt_fixtures.py). The placement/schedule matrix
 * runs over the same model: all in RAM, weights on disk under a tight budget, several gbs x ngb
 * splits, overlap on and off, the row-by-row schedule; 4-bit weights within a stated bound. The
 * device placements (GPU fractions, CPU or device attention) run through the simulated device
 * backend here, and through the CUDA backend in test_infer_cuda (this file with
 * FG_TEST_INFER_CUDA), which skips without a GPU; on the sim device a decode step's bytes over
 * the link are bounded by the shapes of what must cross (token ids, positions, validity,
 * logits; with a host cache and CPU attention, each layer's queries and outputs and new K/V).
 * The fixture batch replicated to 15 sequences (180 prompt rows) runs the CPU's prefill panel
 * GEMMs: 16-bit weights against transformers, Q4 int8 against the row kernel.
 *
 * Tolerances: F16 weights are exact (the fixtures are f16-representable), so logits differ by
 * f32 accumulation order only: max |diff| <= 1e-3 (measured: about 3e-6). Q4 (group 64, axis
 * 0): normalized MSE of the logits <= 0.15 and argmax agreement >= 60% (measured: 0.085 and
 * 71%). That bound is loose on purpose: these fixtures have random weights with a wide spread
 * (std 0.25) and a 32-wide hidden state, the worst case for 4-bit groups; the accuracy that
 * matters is the perplexity of a trained model (README's accuracy table).
 */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "engine.h"
#include "quant.h"
#include "testutil.h"

/* Fixture families: tests/fixtures/opt (make_opt_fixtures.py) and tests/fixtures/llama
 * (make_llama_fixtures.py: Llama 2/3, linear RoPE, Mistral, Qwen2, with their tokenizer.json). */
static const char *family_dir(const char *name)
{
    return strncmp(name, "opt", 3) ? FG_FIXTURE_DIR "/llama" : FG_FIXTURE_DIR "/opt";
}

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

typedef struct ref {
    const char *dir;
    uint32_t batch, seq, vocab;
    char prompt_text[1024];
    int32_t ids[3][12];
    int mask[3][12];
    float *logits;
    int32_t prompt[64], greedy[64];
    uint32_t n_prompt, n_greedy;
} ref;

static void read_ints(const char *path, int *out, int n)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(fscanf(f, "%d", &out[i]), 1);
    fclose(f);
}

static int read_line_ids(FILE *f, const char *key, int32_t *out)
{
    char line[4096];
    ck_assert(fgets(line, sizeof line, f) != NULL);
    ck_assert(!strncmp(line, key, strlen(key)));
    int n = 0, off = (int)strlen(key), used;
    while (sscanf(line + off, "%d%n", &out[n], &used) == 1) {
        n++;
        off += used;
    }
    return n;
}

/* meta.txt: vocab and the prompt text (Llama fixtures) */
static void read_meta(const char *path, ref *r)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    char line[1024];
    r->prompt_text[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "vocab ", 6))
            r->vocab = (uint32_t)atoi(line + 6);
        if (!strncmp(line, "prompt_text ", 12)) {
            snprintf(r->prompt_text, sizeof r->prompt_text, "%s", line + 12);
            r->prompt_text[strcspn(r->prompt_text, "\n")] = '\0';
        }
    }
    fclose(f);
}

static void load_ref(const char *name, ref *r)
{
    char p[4096];
    const char *fix = family_dir(name);
    r->dir = fix;
    r->batch = 3, r->seq = 12;
    snprintf(p, sizeof p, "%s/%s.ref/meta.txt", fix, name);
    read_meta(p, r);
    snprintf(p, sizeof p, "%s/%s.ref/ids.txt", fix, name);
    read_ints(p, &r->ids[0][0], 36);
    snprintf(p, sizeof p, "%s/%s.ref/mask.txt", fix, name);
    read_ints(p, &r->mask[0][0], 36);
    snprintf(p, sizeof p, "%s/%s.ref/logits.f32", fix, name);
    FILE *f = fopen(p, "rb");
    ck_assert(f != NULL);
    r->logits = malloc((size_t)36 * r->vocab * 4);
    ck_assert_int_eq(fread(r->logits, 4, 36 * r->vocab, f), 36 * r->vocab);
    fclose(f);
    snprintf(p, sizeof p, "%s/%s.ref/greedy.txt", fix, name);
    f = fopen(p, "r");
    r->n_prompt = (uint32_t)read_line_ids(f, "prompt:", r->prompt);
    r->n_greedy = (uint32_t)read_line_ids(f, "output:", r->greedy);
    fclose(f);
}

/* Convert a fixture checkpoint (OPT ones take the GPT-2 tokenizer; the Llama family's have
 * their tokenizer.json) into a store in the test's temp dir; q4 = 2: 4-bit grouped along the
 * input axis (what the int8 kernels take). */
static const char *convert(const char *layout, int q4)
{
    static char dst[4096];
    snprintf(dst, sizeof dst, "%s", tu_path(q4 ? "store-q4" : "store"));
    char src[4096], tok[4096];
    int opt = !strncmp(layout, "opt", 3);
    snprintf(src, sizeof src, "%s/%s", family_dir(layout), layout);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts o = {q4 != 0, 64, q4 == 2 ? 1 : -1, opt ? tok : NULL, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &o, &rep, &err) == 0, "%s: %s", layout, err.msg);
    return dst;
}

typedef struct result {
    double max_diff;
    double agree; /* fraction of positions whose argmax matches */
    double nmse;  /* sum (mine - ref)^2 / sum ref^2 over the compared logits */
} result;

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* An engine with the store and model it borrows. */
typedef struct eng {
    fg_store *s;
    fg_model *m;
    fg_engine *e;
} eng;

static int eng_open(const char *dir, const fg_engine_opts *o, eng *x, fg_err *err)
{
    x->e = NULL;
    x->m = NULL;
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &x->s, err);
    if (rc == FG_OK && (rc = fg_model_open(x->s, &x->m, err)))
        fg_store_close(x->s);
    else if (rc == FG_OK && (rc = fg_engine_open(x->m, o, &x->e, err))) {
        fg_model_close(x->m);
        fg_store_close(x->s);
    }
    return rc;
}

static void eng_close(eng *x)
{
    ck_assert_int_eq(fg_engine_close(x->e, NULL), FG_OK);
    fg_model_close(x->m);
    fg_store_close(x->s);
}

/* Logits of the fixture batch through an engine opened with o, against the reference; the
 * engine's stats into *st when asked. */
static result check_logits_st(const char *store, const ref *r, fg_engine_opts o,
                              fg_engine_stats *st)
{
    eng x;
    fg_err err;
    o.max_ctx = 64;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
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
    uint32_t V = r->vocab;
    float *out = calloc((size_t)3 * 12 * V, 4);
    ck_assert_msg(fg_engine_logits(x.e, win, lens, 3, NULL, NULL, out, 12 * V, &err) == 0, "%s",
                  err.msg);
    result res = {0, 0, 0};
    int n = 0, same = 0;
    double num = 0, den = 0;
    for (int b = 0; b < 3; b++) {
        int pad = 12 - (int)lens[b];
        for (uint32_t t = 0; t < lens[b]; t++) {
            const float *mine = out + (b * 12 + t) * V;
            const float *want = r->logits + (b * 12 + pad + t) * V;
            for (uint32_t v = 0; v < V; v++) {
                res.max_diff = fmax(res.max_diff, fabs(mine[v] - want[v]));
                num += (mine[v] - want[v]) * (double)(mine[v] - want[v]);
                den += (double)want[v] * want[v];
            }
            same += argmax(mine, V) == argmax(want, V);
            n++;
        }
    }
    res.agree = (double)same / n;
    res.nmse = num / den;
    free(out);
    if (st)
        fg_engine_stats_get(x.e, st);
    eng_close(&x);
    return res;
}

static result check_logits(const char *store, const ref *r, fg_engine_opts o)
{
    return check_logits_st(store, r, o, NULL);
}

static void check_greedy(const char *store, const ref *r, fg_engine_opts o)
{
    eng x;
    fg_err err;
    o.max_ctx = 64;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    int32_t out[64];
    fg_gen_seq s = {r->prompt, r->n_prompt, r->n_greedy, {0, 0, 1, 0}, 0, out, 0, 0};
    fg_gen_stats st;
    ck_assert_msg(fg_engine_generate(x.e, &s, 1, NULL, &st, &err) == 0, "%s",
                  err.msg);
    /* transformers generated min_new_tokens, so EOS may appear inside its output; ours stops */
    uint32_t n = s.n_out;
    ck_assert_uint_ge(n, 1);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == r->greedy[i], "token %u: %d vs %d", i, out[i], r->greedy[i]);
    const fg_hparams *hp = fg_engine_hparams(x.e);
    int eos = 0;
    for (uint32_t i = 0; i < hp->n_eos; i++)
        eos |= out[n - 1] == hp->eos_ids[i];
    if (s.finish == FG_FINISH_EOS)
        ck_assert(eos);
    else
        ck_assert_uint_eq(n, r->n_greedy);
    /* ignore_eos (--ignore-eos, synthetic runs) changes nothing for a run without an EOS */
    fg_gen_seq all = {r->prompt, r->n_prompt, r->n_greedy, {0, 0, 1, 0}, 0, out, 0, 0, 1};
    ck_assert_msg(fg_engine_generate(x.e, &all, 1, NULL, &st, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(all.n_out, r->n_greedy);
    ck_assert_int_eq(all.finish, FG_FINISH_LENGTH);
    for (uint32_t i = 0; i < r->n_greedy; i++)
        ck_assert_msg(out[i] == r->greedy[i], "ignore_eos: token %u: %d vs %d", i, out[i],
                      r->greedy[i]);
    eng_close(&x);
}

static fg_engine_opts defaults(void)
{
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.threads = 1;
    return o;
}

/* The store's tokenizer (tokenizer.json) encodes the fixture's prompt text to the ids
 * transformers' tokenizer gave, BOS as the family adds it. */
static void check_prompt_ids(const char *store, const ref *r)
{
    fg_store *s;
    fg_model *m;
    fg_tok *tok;
    fg_err err;
    fg_tok_ids ids = {0};
    ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
    ck_assert_msg(fg_model_open(s, &m, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_model_tokenizer(m, &tok, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_tok_encode(tok, r->prompt_text, strlen(r->prompt_text), FG_TOK_ADD_BOS,
                                   &ids, &err), FG_OK);
    ck_assert_uint_eq(ids.n, r->n_prompt);
    for (uint32_t i = 0; i < r->n_prompt; i++)
        ck_assert_int_eq(ids.ids[i], r->prompt[i]);
    fg_tok_ids_free(&ids);
    fg_tok_free(tok);
    fg_model_close(m);
    fg_store_close(s);
}

/* A layout against its reference: logits within 1e-3, argmax and greedy tokens identical, and
 * (Llama fixtures, which record their prompt text) the prompt ids of the stored tokenizer. */
static void layout_case(const char *layout, const char *refname)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
    if (r.prompt_text[0])
        check_prompt_ids(store, &r);
    result res = check_logits(store, &r, defaults());
    ck_assert_msg(res.max_diff < 1e-3, "%s: max |logit diff| %g", layout, res.max_diff);
    ck_assert_msg(res.agree == 1.0, "%s: argmax agreement %g", layout, res.agree);
    check_greedy(store, &r, defaults());
    free(r.logits);
}

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

/* 16-bit weights: every copy's logits within 1e-3 of transformers'. */
static void prefill_gemm_case(const char *layout, const char *refname)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
    uint32_t V = r.vocab;
    float *out = calloc((size_t)NREP * 12 * V, 4);
    fg_engine_stats st;
    replicated_logits(store, &r, defaults(), out, &st);
    double worst = 0;
    for (int q = 0; q < NREP; q++) {
        int b = q % 3;
        uint32_t len = 0;
        for (int t = 0; t < 12; t++)
            len += r.mask[b][t] != 0;
        int pad = 12 - (int)len;
        for (uint32_t t = 0; t < len; t++)
            for (uint32_t v = 0; v < V; v++)
                worst = fmax(worst, fabs(out[(q * 12 + t) * V + v] -
                                         r.logits[(b * 12 + pad + t) * V + v]));
    }
    if (fg_w16_gemm_fast()) /* else the CPU has no kernel for it and sgemm runs */
        ck_assert_msg(st.weight_bytes_panel > 0, "%s: the prefill GEMM did not run", layout);
    ck_assert_msg(worst < 1e-3, "%s: max |logit diff| %g", layout, worst);
    free(out);
    free(r.logits);
}

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

START_TEST(prefill_gemm_opt) { prefill_gemm_case("opt-tiny-safetensors", "opt-tiny"); }
END_TEST
START_TEST(prefill_gemm_llama3_bf16) { prefill_gemm_case("llama3-tiny-bf16", "llama3-tiny"); }
END_TEST
START_TEST(prefill_gemm_qwen2_bf16) { prefill_gemm_case("qwen2-tiny-bf16", "qwen2-tiny"); }
END_TEST
START_TEST(prefill_gemm_qwen3_bf16) { prefill_gemm_case("qwen3-tiny-bf16", "qwen3-tiny"); }
END_TEST

/* Copy src's text file to dst with the first `from` replaced by `to`. */
static void copy_edit(const char *src, const char *dst, const char *from, const char *to)
{
    FILE *f = fopen(src, "rb");
    ck_assert_msg(f != NULL, "%s", src);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *at = strstr(buf, from);
    ck_assert_msg(at != NULL, "%s: no %s", src, from);
    f = fopen(dst, "wb");
    ck_assert(f != NULL);
    fprintf(f, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    ck_assert_int_eq(fclose(f), 0);
}

/* issue 38 (8): ignore_eos. The opt-tiny checkpoint with its EOS id made the third token of
 * transformers' greedy output: without ignore_eos generation stops there (finish EOS, 3
 * tokens); with it the whole reference comes out, the EOS a token like any other. */
START_TEST(ignore_eos_generates_past_eos)
{
    ref r;
    load_ref("opt-tiny", &r);
    char dir[4096], src[4200], dst[4200], to[64], tok[4096];
    snprintf(dir, sizeof dir, "%s", tu_path("eos-ckpt"));
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    const char *fix = FG_FIXTURE_DIR "/opt/opt-tiny-safetensors";
    snprintf(to, sizeof to, "\"eos_token_id\": %d", r.greedy[2]);
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "generation_config.json" : "config.json";
        snprintf(src, sizeof src, "%s/%s", fix, name);
        snprintf(dst, sizeof dst, "%s/%s", dir, name);
        copy_edit(src, dst, "\"eos_token_id\": 2", to);
    }
    snprintf(src, sizeof src, "%s/model.safetensors", fix);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    ck_assert_int_eq(symlink(src, dst), 0);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts co = {0, 64, -1, tok, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    const char *store = tu_path("eos-store");
    ck_assert_msg(fg_convert_import(dir, store, &co, &rep, &err) == 0, "%s", err.msg);
    fg_engine_opts o = defaults();
    o.max_ctx = 64;
    eng x;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_engine_hparams(x.e)->eos_id, r.greedy[2]);
    int32_t out[64];
    for (int ignore = 0; ignore < 2; ignore++) {
        fg_gen_seq s = {r.prompt, r.n_prompt, r.n_greedy, {0, 0, 1, 0}, 0, out, 0, 0, ignore};
        fg_gen_stats st;
        ck_assert_msg(fg_engine_generate(x.e, &s, 1, NULL, &st, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(s.n_out, ignore ? r.n_greedy : 3);
        ck_assert_int_eq(s.finish, ignore ? FG_FINISH_LENGTH : FG_FINISH_EOS);
        for (uint32_t i = 0; i < s.n_out; i++)
            ck_assert_msg(out[i] == r.greedy[i], "ignore_eos %d: token %u: %d vs %d", ignore, i,
                          out[i], r.greedy[i]);
    }
    eng_close(&x);
    free(r.logits);
}
END_TEST

START_TEST(layout_safetensors) { layout_case("opt-tiny-safetensors", "opt-tiny"); }
END_TEST
START_TEST(layout_sharded) { layout_case("opt-tiny-sharded", "opt-tiny"); }
END_TEST
START_TEST(layout_bin) { layout_case("opt-tiny-bin", "opt-tiny"); }
END_TEST
START_TEST(layout_npy) { layout_case("opt-tiny-npy", "opt-tiny"); }
END_TEST
START_TEST(layout_bf16_bin) { layout_case("opt-tiny-bf16-bin", "opt-tiny-bf16"); }
END_TEST
START_TEST(layout_350m_style) { layout_case("opt-350m-style-safetensors", "opt-350m-style"); }
END_TEST

/* The KV cache and activations homed on disk (streamed through the pager's offload file), and
 * mixed fractions, give the same numbers as everything in RAM. */
/* q4_nmse: the bound for the 4-bit cache (0.05 on OPT; Qwen2's tied 512-wide head has logits
 * twice as wide, measured 0.055, bound 0.08) */
static void kv_matrix(const char *refname, const char *layout, double q4_nmse)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
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
                          "policy %zu, 4-bit cache %d: max diff %g nmse %g", i, q, res.max_diff,
                          res.nmse);
            if (!q)
                check_greedy(store, &r, o);
        }
    free(r.logits);
}

START_TEST(kv_cache_on_disk_and_mixed_fractions) { kv_matrix("opt-tiny", "opt-tiny-safetensors", 0.05); }
END_TEST

/* Every placement and schedule gives the same numbers. */
static void placement_matrix(const char *refname, const char *layout)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
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
        ck_assert_msg(res.max_diff < 1e-3 && res.agree == 1.0, "case %zu: %g %g", i,
                      res.max_diff, res.agree);
        check_greedy(store, &r, o);
    }
    free(r.logits);
}

/* The placements through the simulated device backend (compute/backend_sim.c): chunks homed
 * on the GPU live in device memory host code cannot touch, the rest is staged per op over the
 * link; every placement gives the reference's logits (1e-3) and greedy tokens, and the GPU
 * tier is really used where the fractions put data on it. */
static void device_matrix(fg_backend_kind kind, const char *refname, const char *layout,
                          double q4_nmse)
{
    ref r;
    load_ref(refname, &r);
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
                      "sim case %zu: max diff %g agree %g nmse %g", i, res.max_diff, res.agree,
                      res.nmse);
        double g = m[i].frac.w[0] + m[i].frac.c[0] + m[i].frac.h[0];
        if (g > 0 || !m[i].fractions)
            ck_assert_msg(st.pager.peak[FG_TIER_DEVICE] > 0, "sim case %zu: nothing on the GPU", i);
        if (!m[i].q4_cache)
            check_greedy(store, &r, o);
        if (kind != FG_BACKEND_CUDA || i != 3) /* weights half resident, half streamed */
            continue;
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
        o.compute = FG_COMPUTE_F16;
        res = check_logits_st(store, &r, o, &st);
        int f16_store = !strstr(layout, "bf16");
        ck_assert_msg(res.nmse < 0.05 && res.agree >= 0.85 &&
                          (res.agree < 1.0 || res.nmse < 1e-3) &&
                          (!f16_store || (res.max_diff < 2e-2 && res.agree == 1.0)),
                      "cuda f16 case %zu: max diff %g agree %g nmse %g", i, res.max_diff,
                      res.agree, res.nmse);
        if (f16_store)
            check_greedy(store, &r, o);
    }
    free(r.logits);
}

static void sim_matrix(const char *refname, const char *layout)
{
    device_matrix(FG_BACKEND_SIM, refname, layout, 0.08);
}

START_TEST(sim_placements_opt) { sim_matrix("opt-tiny", "opt-tiny-safetensors"); }
END_TEST
START_TEST(sim_placements_llama3) { sim_matrix("llama3-tiny", "llama3-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_mistral) { sim_matrix("mistral-tiny", "mistral-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_qwen2) { sim_matrix("qwen2-tiny", "qwen2-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_qwen3) { sim_matrix("qwen3-tiny", "qwen3-tiny-bf16"); }
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
static void decode_link_bound(const char *refname, const char *layout)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
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

START_TEST(sim_decode_moves_only_logits_opt)
{
    decode_link_bound("opt-tiny", "opt-tiny-safetensors");
}
END_TEST
START_TEST(sim_decode_moves_only_logits_llama3)
{
    decode_link_bound("llama3-tiny", "llama3-tiny-bf16");
}
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
static void experts_paged(const char *refname, const char *layout)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 0);
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
           "(the model %llu; bound %llu)\n", refname, n[1], (unsigned long long)routed,
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

/* The same placements on a GPU (test_infer_cuda: this file built with FG_TEST_INFER_CUDA). */
static void cuda_matrix(const char *refname, const char *layout)
{
    device_matrix(FG_BACKEND_CUDA, refname, layout, 0.08);
}

START_TEST(cuda_placements_opt) { cuda_matrix("opt-tiny", "opt-tiny-safetensors"); }
END_TEST
/* llama2-tiny's 4-bit cache is further from the reference than the others' (nmse 0.098, the
 * same on the simulated device: the first run of this test, under tests/cudaemu, found the
 * shared 0.08 too tight for it) */
START_TEST(cuda_placements_llama2)
{
    device_matrix(FG_BACKEND_CUDA, "llama2-tiny", "llama2-tiny-f16-sharded", 0.12);
}
END_TEST
START_TEST(cuda_placements_llama3) { cuda_matrix("llama3-tiny", "llama3-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_mistral) { cuda_matrix("mistral-tiny", "mistral-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_qwen2) { cuda_matrix("qwen2-tiny", "qwen2-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_qwen3) { cuda_matrix("qwen3-tiny", "qwen3-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_yarn) { cuda_matrix("qwen3-yarn-tiny", "qwen3-yarn-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_gemma3) { cuda_matrix("gemma3-tiny", "gemma3-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_gemma2) { cuda_matrix("gemma2-tiny", "gemma2-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_glm4_moe)
{
    device_matrix(FG_BACKEND_CUDA, "glm4-moe-tiny", "glm4-moe-tiny-bf16", 0.25);
}
END_TEST
START_TEST(cuda_placements_minimax_m2)
{
    device_matrix(FG_BACKEND_CUDA, "minimax-m2-tiny", "minimax-m2-tiny-bf16", 0.25);
}
END_TEST
START_TEST(cuda_placements_olmo3) { cuda_matrix("olmo3-tiny", "olmo3-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_dots1) { cuda_matrix("dots1-tiny", "dots1-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_exaone4) { cuda_matrix("exaone4-tiny", "exaone4-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_ernie4_5)
{
    device_matrix(FG_BACKEND_CUDA, "ernie4_5-tiny", "ernie4_5-tiny-bf16", 0.12);
}
END_TEST
START_TEST(cuda_placements_ernie4_5_moe)
{
    device_matrix(FG_BACKEND_CUDA, "ernie4_5-moe-tiny", "ernie4_5-moe-tiny-bf16", 0.25);
}
END_TEST
START_TEST(cuda_placements_gemma)
{
    device_matrix(FG_BACKEND_CUDA, "gemma-tiny", "gemma-tiny-bf16", 0.15);
}
END_TEST
START_TEST(cuda_placements_gpt_oss)
{
    device_matrix(FG_BACKEND_CUDA, "gpt-oss-tiny", "gpt-oss-tiny-bf16", 0.25);
}
END_TEST
START_TEST(cuda_placements_granite) { cuda_matrix("granite-tiny", "granite-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_smollm3) { cuda_matrix("smollm3-tiny", "smollm3-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_olmo2) { cuda_matrix("olmo2-tiny", "olmo2-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_mixtral) /* (4-bit cache bound: sim_placements_mixtral) */
{
    device_matrix(FG_BACKEND_CUDA, "mixtral-tiny", "mixtral-tiny-bf16", 0.2);
}
END_TEST
START_TEST(cuda_placements_olmoe) { cuda_matrix("olmoe-tiny", "olmoe-tiny-bf16"); }
END_TEST
START_TEST(cuda_placements_granitemoe)
{
    cuda_matrix("granitemoe-tiny", "granitemoe-tiny-bf16");
}
END_TEST
START_TEST(cuda_placements_qwen2_moe)
{
    device_matrix(FG_BACKEND_CUDA, "qwen2-moe-tiny", "qwen2-moe-tiny-bf16", 0.2);
}
END_TEST
START_TEST(cuda_placements_ministral3)
{
    cuda_matrix("ministral3-tiny", "ministral3-tiny-bf16");
}
END_TEST
START_TEST(cuda_placements_phi3)
{
    cuda_matrix("phi3-longrope-tiny", "phi3-longrope-tiny-bf16");
}
END_TEST
START_TEST(cuda_placements_windows)
{
    cuda_matrix("qwen2-window-tiny", "qwen2-window-tiny-bf16");
}
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

START_TEST(placements_and_schedules_agree)
{
    placement_matrix("opt-tiny", "opt-tiny-safetensors");
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
    ck_assert_msg(res.nmse < nmse && res.agree >= agree, "%s q4: nmse %g, max diff %g, agreement "
                  "%g", refname, res.nmse, res.max_diff, res.agree);
}

static void q4_case(const char *layout, const char *refname, double nmse, double agree)
{
    ref r;
    load_ref(refname, &r);
    q4_check(convert(layout, 1), &r, refname, 0, nmse, agree);
    free(r.logits);
}

START_TEST(q4_weights_within_bound) { q4_case("opt-tiny-safetensors", "opt-tiny", 0.15, 0.6); }
END_TEST

/* A mixture of experts in 4 bits (groups of 64 along the input axis: the experts' 32 rows
 * cannot hold axis-0 groups of 64): its routers stay 16-bit (fg_role_stays_wide). Measured
 * (nmse, argmax agreement): mixtral-tiny 0.360, 0.161; qwen2-moe-tiny 0.293, 0.355;
 * qwen3-moe-tiny 0.197, 0.387 (with 4-bit routers 0.354, 0.161; 0.326, 0.387; 0.213, 0.355:
 * on these random 64-wide models the experts' own error dominates). */
static void moe_q4_case(const char *layout, const char *refname, double nmse, double agree)
{
    ref r;
    load_ref(refname, &r);
    const char *store = convert(layout, 2);
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
    ck_assert_int_eq(t->codec.id, FG_CODEC_Q4);
    fg_store_tensor_free(t);
    fg_store_close(st);
    q4_check(store, &r, refname, 1, nmse, agree);
    free(r.logits);
}
START_TEST(mixtral_q4_weights)
{
    moe_q4_case("mixtral-tiny-bf16", "mixtral-tiny", 0.45, 0.1);
}
END_TEST
START_TEST(qwen2_moe_q4_weights)
{
    moe_q4_case("qwen2-moe-tiny-bf16", "qwen2-moe-tiny", 0.4, 0.25);
}
END_TEST
START_TEST(qwen3_moe_q4_weights)
{
    moe_q4_case("qwen3-moe-tiny-bf16", "qwen3-moe-tiny", 0.3, 0.25);
}
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

/* ---- the Llama family (tests/fixtures/llama, made by make_llama_fixtures.py) ---- */

START_TEST(llama2_bf16) { layout_case("llama2-tiny-bf16", "llama2-tiny"); }
END_TEST
START_TEST(llama2_f16_sharded) { layout_case("llama2-tiny-f16-sharded", "llama2-tiny"); }
END_TEST
START_TEST(llama2_f32) { layout_case("llama2-tiny-f32", "llama2-tiny"); }
END_TEST
/* pytorch_model.bin with rotary_emb.inv_freq buffers, as Llama 2's hub checkpoints */
START_TEST(llama2_bin_inv_freq) { layout_case("llama2-tiny-f16-bin", "llama2-tiny"); }
END_TEST
START_TEST(llama3_tied_gqa_scaled) { layout_case("llama3-tiny-bf16", "llama3-tiny"); }
END_TEST
START_TEST(llama3_transformers5_config) { layout_case("llama3-tiny-hf5", "llama3-tiny"); }
END_TEST
START_TEST(llama_linear_mqa) { layout_case("llama-linear-tiny-f16", "llama-linear-tiny"); }
END_TEST
START_TEST(mistral_sliding_window) { layout_case("mistral-tiny-bf16", "mistral-tiny"); }
END_TEST
START_TEST(qwen2_biases_tied) { layout_case("qwen2-tiny-bf16", "qwen2-tiny"); }
END_TEST
/* Qwen3: per-head q/k RMSNorms, heads x head_dim != hidden; hub-style and transformers 5's
 * own config.json (rope_parameters, layer_types) */
START_TEST(qwen3_qk_norm) { layout_case("qwen3-tiny-bf16", "qwen3-tiny"); }
END_TEST
START_TEST(qwen3_transformers5_config) { layout_case("qwen3-tiny-hf5", "qwen3-tiny"); }
END_TEST
/* YaRN (factor 4 over 128 original positions): ramped frequencies, q.k scaled by mscale^2 */
START_TEST(qwen3_yarn) { layout_case("qwen3-yarn-tiny-bf16", "qwen3-yarn-tiny"); }
END_TEST
START_TEST(sim_placements_yarn) { sim_matrix("qwen3-yarn-tiny", "qwen3-yarn-tiny-bf16"); }
END_TEST
/* Qwen's per-layer windows: layer 0 attends everything, layer 1 the last 5 tokens (from
 * max_window_layers, and from transformers 5's layer_types) */
START_TEST(qwen2_layer_windows) { layout_case("qwen2-window-tiny-bf16", "qwen2-window-tiny"); }
END_TEST
START_TEST(qwen2_layer_types) { layout_case("qwen2-window-tiny-hf5", "qwen2-window-tiny"); }
END_TEST
/* Ministral: Mistral's layer with layer_types (a window of 5 on layer 0 only) */
START_TEST(ministral_layer_types) { layout_case("ministral-tiny-bf16", "ministral-tiny"); }
END_TEST
START_TEST(sim_placements_ministral) { sim_matrix("ministral-tiny", "ministral-tiny-bf16"); }
END_TEST
START_TEST(qwen2_window_placements)
{
    placement_matrix("qwen2-window-tiny", "qwen2-window-tiny-bf16");
}
END_TEST
START_TEST(sim_placements_windows)
{
    sim_matrix("qwen2-window-tiny", "qwen2-window-tiny-bf16");
}
END_TEST

/* 4-bit weights (--compress-weight, from a BF16 checkpoint) on Llama 3 and Qwen2: a sanity
 * bound (measured: nmse 0.24 and 0.25, argmax agreement 0.45 and 0.52). These random models
 * have 64-wide rows, so each row is one group of 64, and tied heads with logits of std ~4: the
 * worst case for 4-bit groups; the accuracy that matters is a trained model's perplexity
 * (README's table). */
START_TEST(llama_q4_weights) { q4_case("llama3-tiny-bf16", "llama3-tiny", 0.35, 0.4); }
END_TEST
START_TEST(qwen2_q4_weights) { q4_case("qwen2-tiny-bf16", "qwen2-tiny", 0.35, 0.4); }
END_TEST
START_TEST(qwen3_q4_weights) { q4_case("qwen3-tiny-bf16", "qwen3-tiny", 0.35, 0.4); }
END_TEST

/* Every placement, schedule and batch split, and the KV cache on disk, for the window and the
 * scaled, tied, grouped-query family members. */
START_TEST(mistral_placements) { placement_matrix("mistral-tiny", "mistral-tiny-bf16"); }
END_TEST
START_TEST(mistral_kv_on_disk) { kv_matrix("mistral-tiny", "mistral-tiny-bf16", 0.05); }
END_TEST
START_TEST(llama3_placements) { placement_matrix("llama3-tiny", "llama3-tiny-bf16"); }
END_TEST
START_TEST(qwen2_kv_on_disk) { kv_matrix("qwen2-tiny", "qwen2-tiny-bf16", 0.08); }
END_TEST
START_TEST(qwen3_placements) { placement_matrix("qwen3-tiny", "qwen3-tiny-bf16"); }
END_TEST
START_TEST(qwen3_kv_on_disk) { kv_matrix("qwen3-tiny", "qwen3-tiny-bf16", 0.08); }
END_TEST

/* Phi-3: fused qkv_proj / gate_up_proj stored apart by fg-convert, a window on every layer
 * (hub-style, and as transformers 5 saves it); LongRoPE with partial rotary (0.75) past the
 * original positions (long_factor) and within them (short_factor), the attention factor on the
 * rotated dims only */
START_TEST(phi3_fused_window) { layout_case("phi3-tiny-bf16", "phi3-tiny"); }
END_TEST
START_TEST(phi3_transformers5_config) { layout_case("phi3-tiny-hf5", "phi3-tiny"); }
END_TEST
START_TEST(phi3_longrope_long) { layout_case("phi3-longrope-tiny-bf16", "phi3-longrope-tiny"); }
END_TEST
START_TEST(phi3_longrope_short)
{
    layout_case("phi3-longrope-short-tiny-bf16", "phi3-longrope-short-tiny");
}
END_TEST
START_TEST(phi3_placements) { placement_matrix("phi3-longrope-tiny", "phi3-longrope-tiny-bf16"); }
END_TEST
/* its 4-bit cache gives nmse 0.0877 against the exact logits (measured, cache in RAM) */
START_TEST(phi3_kv_on_disk) { kv_matrix("phi3-tiny", "phi3-tiny-bf16", 0.12); }
END_TEST
/* Gemma 3 (text): sandwich norms scaling by 1 + w, sqrt(hidden) embeddings, q/k norms,
 * query_pre_attn_scalar, a window with the local rotary base on layer 0 and the global one
 * (linear scaling) on layer 1; hub-style and as transformers 5 saves it (rope_parameters per
 * layer type) */
START_TEST(gemma3_sandwich_local_rope) { layout_case("gemma3-tiny-bf16", "gemma3-tiny"); }
END_TEST
START_TEST(gemma3_transformers5_config) { layout_case("gemma3-tiny-hf5", "gemma3-tiny"); }
END_TEST
/* Gemma 3 4B-27B's checkpoint layout (Gemma3ForConditionalGeneration): the text model read from
 * beside a vision tower and projector, as transformers 5 saves it and with the hub's names and
 * config keys; the same logits */
START_TEST(gemma3_multimodal_transformers5) { layout_case("gemma3-mm-tiny-hf5", "gemma3-tiny"); }
END_TEST
START_TEST(gemma3_multimodal_hub) { layout_case("gemma3-mm-tiny-hub", "gemma3-tiny"); }
END_TEST
/* Mistral Small 3.x's (Mistral3ForConditionalGeneration, a Pixtral tower): mistral-tiny's text
 * model, untied */
START_TEST(mistral3_multimodal_transformers5)
{
    layout_case("mistral3-mm-tiny-hf5", "mistral-tiny");
}
END_TEST
START_TEST(mistral3_multimodal_hub) { layout_case("mistral3-mm-tiny-hub", "mistral-tiny"); }
END_TEST
/* Qwen2.5-VL's (its hub file flat: the text keys at the top level, rope_scaling mrope) and
 * Qwen3-VL's: qwen2-tiny's and qwen3-tiny's text models; for text, every mrope section sees one
 * position, so the frequencies are the default ones */
START_TEST(qwen2_5_vl_transformers5) { layout_case("qwen2.5-vl-tiny-hf5", "qwen2-tiny"); }
END_TEST
START_TEST(qwen2_5_vl_flat_hub) { layout_case("qwen2.5-vl-tiny-hub", "qwen2-tiny"); }
END_TEST
START_TEST(qwen3_vl_transformers5) { layout_case("qwen3-vl-tiny-hf5", "qwen3-tiny"); }
END_TEST
/* Ministral 3: YaRN and Llama 4's q scaling by position past original_max_position_embeddings
 * (8 here: the prompts and generation cross several such spans) */
START_TEST(ministral3_llama4_scaling) { layout_case("ministral3-tiny-bf16", "ministral3-tiny"); }
END_TEST
START_TEST(ministral3_transformers5_config)
{
    layout_case("ministral3-tiny-hf5", "ministral3-tiny");
}
END_TEST
/* Granite 3.x: embedding, attention and residual multipliers, logits / logits_scaling */
START_TEST(granite_multipliers) { layout_case("granite-tiny-bf16", "granite-tiny"); }
END_TEST
START_TEST(granite_transformers5_config) { layout_case("granite-tiny-hf5", "granite-tiny"); }
END_TEST
START_TEST(sim_placements_granite) { sim_matrix("granite-tiny", "granite-tiny-bf16"); }
END_TEST
/* OLMo 2: norms after the blocks only, q/k norms over the whole projections */
START_TEST(olmo2_post_norms) { layout_case("olmo2-tiny-bf16", "olmo2-tiny"); }
END_TEST
START_TEST(olmo2_transformers5_config) { layout_case("olmo2-tiny-hf5", "olmo2-tiny"); }
END_TEST
START_TEST(olmo2_placements) { placement_matrix("olmo2-tiny", "olmo2-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_olmo2) { sim_matrix("olmo2-tiny", "olmo2-tiny-bf16"); }
END_TEST
/* Mixtral: a mixture of 4 experts, top 2 renormalized; the hub's block_sparse_moe names, and
 * transformers 5's own save */
START_TEST(mixtral_experts) { layout_case("mixtral-tiny-bf16", "mixtral-tiny"); }
END_TEST
START_TEST(mixtral_transformers5) { layout_case("mixtral-tiny-hf5", "mixtral-tiny"); }
END_TEST
START_TEST(mixtral_placements) { placement_matrix("mixtral-tiny", "mixtral-tiny-bf16"); }
END_TEST
/* (the 4-bit cache's error moves tokens near a tie between experts to another expert, a
 * discrete change: measured nmse 0.15 here, 0.10 on qwen2-moe-tiny, bound 0.2) */
START_TEST(sim_placements_mixtral)
{
    device_matrix(FG_BACKEND_SIM, "mixtral-tiny", "mixtral-tiny-bf16", 0.2);
}
END_TEST
/* Qwen3-MoE: 8 experts, top 3 renormalized, a dense layer (mlp_only_layers) */
START_TEST(qwen3_moe_experts) { layout_case("qwen3-moe-tiny-bf16", "qwen3-moe-tiny"); }
END_TEST
START_TEST(qwen3_moe_transformers5) { layout_case("qwen3-moe-tiny-hf5", "qwen3-moe-tiny"); }
END_TEST
START_TEST(qwen3_moe_placements) { placement_matrix("qwen3-moe-tiny", "qwen3-moe-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_qwen3_moe) { sim_matrix("qwen3-moe-tiny", "qwen3-moe-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_qwen3_moe) { experts_paged("qwen3-moe-tiny", "qwen3-moe-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_mixtral) { experts_paged("mixtral-tiny", "mixtral-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_qwen2_moe) { experts_paged("qwen2-moe-tiny", "qwen2-moe-tiny-bf16"); }
END_TEST
/* Qwen2-MoE: 6 experts, top 2 as the softmax gives them, a gated shared expert */
START_TEST(qwen2_moe_shared_expert) { layout_case("qwen2-moe-tiny-bf16", "qwen2-moe-tiny"); }
END_TEST
START_TEST(qwen2_moe_transformers5) { layout_case("qwen2-moe-tiny-hf5", "qwen2-moe-tiny"); }
END_TEST
START_TEST(qwen2_moe_placements) { placement_matrix("qwen2-moe-tiny", "qwen2-moe-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_qwen2_moe)
{
    device_matrix(FG_BACKEND_SIM, "qwen2-moe-tiny", "qwen2-moe-tiny-bf16", 0.2);
}
END_TEST
/* GraniteMoE: 4 experts, top 2, every expert of a layer in one checkpoint tensor
 * (block_sparse_moe.input_linear / output_linear), Granite's multipliers */
START_TEST(granitemoe_experts) { layout_case("granitemoe-tiny-bf16", "granitemoe-tiny"); }
END_TEST
START_TEST(granitemoe_transformers5) { layout_case("granitemoe-tiny-hf5", "granitemoe-tiny"); }
END_TEST
START_TEST(granitemoe_placements) { placement_matrix("granitemoe-tiny", "granitemoe-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_granitemoe) { sim_matrix("granitemoe-tiny", "granitemoe-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_granitemoe)
{
    experts_paged("granitemoe-tiny", "granitemoe-tiny-bf16");
}
END_TEST
/* Mixtral as transformers 5 holds it in memory (save_original_format=False): mlp.experts.
 * gate_up_proj [4, 64, 64] and down_proj [4, 64, 32] */
START_TEST(mixtral_transformers5_raw) { layout_case("mixtral-tiny-hf5-raw", "mixtral-tiny"); }
END_TEST
/* OLMoE: 8 experts on every layer, top 3 as the softmax gives them; OLMo 2's whole-projection
 * q/k norms inside Llama's pre-norm layer */
START_TEST(olmoe_experts) { layout_case("olmoe-tiny-bf16", "olmoe-tiny"); }
END_TEST
START_TEST(olmoe_transformers5) { layout_case("olmoe-tiny-hf5", "olmoe-tiny"); }
END_TEST
START_TEST(olmoe_placements) { placement_matrix("olmoe-tiny", "olmoe-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_olmoe) { sim_matrix("olmoe-tiny", "olmoe-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_olmoe) { experts_paged("olmoe-tiny", "olmoe-tiny-bf16"); }
END_TEST
START_TEST(olmoe_q4_weights) { moe_q4_case("olmoe-tiny-bf16", "olmoe-tiny", 0.4, 0.25); }
END_TEST
/* SmolLM3: no rotary positions on layer 1 (no_rope_layers) */
START_TEST(smollm3_nope_layers) { layout_case("smollm3-tiny-bf16", "smollm3-tiny"); }
END_TEST
START_TEST(smollm3_transformers5_config) { layout_case("smollm3-tiny-hf5", "smollm3-tiny"); }
END_TEST
START_TEST(smollm3_placements) { placement_matrix("smollm3-tiny", "smollm3-tiny-bf16"); }
END_TEST
START_TEST(ministral3_placements) { placement_matrix("ministral3-tiny", "ministral3-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_ministral3)
{
    sim_matrix("ministral3-tiny", "ministral3-tiny-bf16");
}
END_TEST
START_TEST(gemma3_placements) { placement_matrix("gemma3-tiny", "gemma3-tiny-bf16"); }
END_TEST
START_TEST(gemma3_kv_on_disk) { kv_matrix("gemma3-tiny", "gemma3-tiny-bf16", 0.08); }
END_TEST
START_TEST(sim_placements_gemma3) { sim_matrix("gemma3-tiny", "gemma3-tiny-bf16"); }
END_TEST
/* Gemma 2: soft-capped attention scores (cap 2) and logits (cap 6), every other layer
 * windowed by Gemma2Config's default layer_types (hub-style: no layer_types key) */
/* gpt-oss: attention sinks, every other layer sliding, YaRN without truncation; experts with
 * biases and the clamped SwiGLU, stored x . W with gate and up columns alternating */
START_TEST(gpt_oss_sinks_experts) { layout_case("gpt-oss-tiny-bf16", "gpt-oss-tiny"); }
END_TEST
START_TEST(gpt_oss_transformers5) { layout_case("gpt-oss-tiny-hf5", "gpt-oss-tiny"); }
END_TEST
/* as OpenAI ships it: the experts in MXFP4 (blocks and scales), read as the BF16 values they
 * hold; transformers' logits from its own dequantization */
START_TEST(gpt_oss_mxfp4) { layout_case("gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny"); }
END_TEST
START_TEST(experts_paged_gpt_oss_mxfp4)
{
    experts_paged("gpt-oss-mxfp4-tiny", "gpt-oss-mxfp4-tiny");
}
END_TEST
START_TEST(gpt_oss_placements) { placement_matrix("gpt-oss-tiny", "gpt-oss-tiny-bf16"); }
END_TEST
/* (its 4-bit cache: nmse 0.175 measured, where the other fixtures stay under 0.08: YaRN's
 * 1.3 on the scores sharpens this random model's attention, so a quantized key changes which
 * keys dominate; the f32 cache placements match within 1e-3) */
START_TEST(gpt_oss_kv_on_disk) { kv_matrix("gpt-oss-tiny", "gpt-oss-tiny-bf16", 0.25); }
END_TEST
START_TEST(sim_placements_gpt_oss)
{
    device_matrix(FG_BACKEND_SIM, "gpt-oss-tiny", "gpt-oss-tiny-bf16", 0.25);
}
END_TEST
START_TEST(experts_paged_gpt_oss) { experts_paged("gpt-oss-tiny", "gpt-oss-tiny-bf16"); }
END_TEST
START_TEST(gpt_oss_q4_weights) { moe_q4_case("gpt-oss-tiny-bf16", "gpt-oss-tiny", 0.4, 0.25); }
END_TEST
/* Gemma (1): Llama's layer, RMSNorms by 1 + w, sqrt(hidden) embeddings, the tanh GELU from
 * the released files' hidden_act "gelu", MQA, heads x head_dim != hidden */
START_TEST(gemma_layers) { layout_case("gemma-tiny-bf16", "gemma-tiny"); }
END_TEST
START_TEST(gemma_transformers5) { layout_case("gemma-tiny-hf5", "gemma-tiny"); }
END_TEST
START_TEST(gemma_placements) { placement_matrix("gemma-tiny", "gemma-tiny-bf16"); }
END_TEST
/* (its 4-bit cache on the device: nmse 0.116 measured, over the 0.08 the fixtures with several
 * KV heads stay under: one KV head serves all 4 query heads, so its rounding reaches all) */
START_TEST(sim_placements_gemma)
{
    device_matrix(FG_BACKEND_SIM, "gemma-tiny", "gemma-tiny-bf16", 0.15);
}
END_TEST
/* GLM-4 MoE: a dense first layer, sigmoid routing with the choice bias within 2 of 4 groups,
 * routed_scaling_factor, ungated shared experts, partial rotary, per-head q/k norms; its
 * multi-token prediction layer (hub-style) skipped */
START_TEST(glm4_moe_routing) { layout_case("glm4-moe-tiny-bf16", "glm4-moe-tiny"); }
END_TEST
START_TEST(glm4_moe_transformers5) { layout_case("glm4-moe-tiny-hf5", "glm4-moe-tiny"); }
END_TEST
START_TEST(glm4_moe_placements) { placement_matrix("glm4-moe-tiny", "glm4-moe-tiny-bf16"); }
END_TEST
/* (its 4-bit cache on the device: nmse 0.172 measured; the other fixtures' range from 0.013 to
 * 0.079 in the same run, gpt-oss-tiny's 0.175, gemma-tiny's 0.116: these random models' own
 * sensitivity, their f32 placements all within 1e-3) */
START_TEST(sim_placements_glm4_moe)
{
    device_matrix(FG_BACKEND_SIM, "glm4-moe-tiny", "glm4-moe-tiny-bf16", 0.25);
}
END_TEST
START_TEST(experts_paged_glm4_moe) { experts_paged("glm4-moe-tiny", "glm4-moe-tiny-bf16"); }
END_TEST
START_TEST(glm4_moe_q4_weights) /* (nmse 0.468 measured: three layers, one more than the rest) */
{
    moe_q4_case("glm4-moe-tiny-bf16", "glm4-moe-tiny", 0.6, 0.25);
}
END_TEST
/* MiniMax-M2: whole-projection q/k norms, half of each head rotated
 * (rotary_dim), sigmoid routing with the choice bias; the hub's Mixtral names, transformers 5's
 * and its in-memory layout */
START_TEST(minimax_m2_routing) { layout_case("minimax-m2-tiny-bf16", "minimax-m2-tiny"); }
END_TEST
START_TEST(minimax_m2_transformers5) { layout_case("minimax-m2-tiny-hf5", "minimax-m2-tiny"); }
END_TEST
START_TEST(minimax_m2_raw) { layout_case("minimax-m2-tiny-hf5-raw", "minimax-m2-tiny"); }
END_TEST
START_TEST(minimax_m2_placements)
{
    placement_matrix("minimax-m2-tiny", "minimax-m2-tiny-bf16");
}
END_TEST
START_TEST(sim_placements_minimax_m2) /* (its 4-bit cache: nmse 0.168 measured) */
{
    device_matrix(FG_BACKEND_SIM, "minimax-m2-tiny", "minimax-m2-tiny-bf16", 0.25);
}
END_TEST
START_TEST(experts_paged_minimax_m2)
{
    experts_paged("minimax-m2-tiny", "minimax-m2-tiny-bf16");
}
END_TEST
/* OLMo 3: 3 of 4 layers sliding with plain rotary positions, the full one with YaRN */
START_TEST(olmo3_layers) { layout_case("olmo3-tiny-bf16", "olmo3-tiny"); }
END_TEST
START_TEST(olmo3_transformers5) { layout_case("olmo3-tiny-hf5", "olmo3-tiny"); }
END_TEST
START_TEST(olmo3_placements) { placement_matrix("olmo3-tiny", "olmo3-tiny-bf16"); }
END_TEST
START_TEST(olmo3_kv_on_disk) { kv_matrix("olmo3-tiny", "olmo3-tiny-bf16", 0.08); }
END_TEST
START_TEST(sim_placements_olmo3) { sim_matrix("olmo3-tiny", "olmo3-tiny-bf16"); }
END_TEST
/* dots.llm1: Qwen3's attention with a window from max_window_layers on, GLM's router in 2
 * groups, a shared expert, a dense layer 0 */
START_TEST(dots1_routing) { layout_case("dots1-tiny-bf16", "dots1-tiny"); }
END_TEST
START_TEST(dots1_transformers5) { layout_case("dots1-tiny-hf5", "dots1-tiny"); }
END_TEST
START_TEST(dots1_placements) { placement_matrix("dots1-tiny", "dots1-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_dots1) { sim_matrix("dots1-tiny", "dots1-tiny-bf16"); }
END_TEST
START_TEST(experts_paged_dots1) { experts_paged("dots1-tiny", "dots1-tiny-bf16"); }
END_TEST
/* Seed-OSS: biases on q/k/v and not on o, heads x head_dim != hidden */
START_TEST(seed_oss_biases) { layout_case("seed-oss-tiny-bf16", "seed-oss-tiny"); }
END_TEST
START_TEST(seed_oss_transformers5) { layout_case("seed-oss-tiny-hf5", "seed-oss-tiny"); }
END_TEST
START_TEST(seed_oss_placements) { placement_matrix("seed-oss-tiny", "seed-oss-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_seed_oss) /* (its 4-bit cache: nmse 0.081 measured) */
{
    device_matrix(FG_BACKEND_SIM, "seed-oss-tiny", "seed-oss-tiny-bf16", 0.12);
}
END_TEST
/* EXAONE 4: norms after the blocks, per-head q/k norms, 3 of 4 layers sliding, the global one
 * without rotary positions */
START_TEST(exaone4_layers) { layout_case("exaone4-tiny-bf16", "exaone4-tiny"); }
END_TEST
START_TEST(exaone4_transformers5) { layout_case("exaone4-tiny-hf5", "exaone4-tiny"); }
END_TEST
START_TEST(exaone4_placements) { placement_matrix("exaone4-tiny", "exaone4-tiny-bf16"); }
END_TEST
START_TEST(exaone4_kv_on_disk) { kv_matrix("exaone4-tiny", "exaone4-tiny-bf16", 0.08); }
END_TEST
START_TEST(sim_placements_exaone4) { sim_matrix("exaone4-tiny", "exaone4-tiny-bf16"); }
END_TEST
/* ERNIE 4.5: rotary positions on (even, odd) pairs, its q/k rows (and biases) reordered at
 * conversion into rotate-half's layout; biases on every Linear layer */
START_TEST(ernie4_5_pairs) { layout_case("ernie4_5-tiny-bf16", "ernie4_5-tiny"); }
END_TEST
START_TEST(ernie4_5_transformers5) { layout_case("ernie4_5-tiny-hf5", "ernie4_5-tiny"); }
END_TEST
START_TEST(ernie4_5_placements) { placement_matrix("ernie4_5-tiny", "ernie4_5-tiny-bf16"); }
END_TEST
/* (its 4-bit cache: nmse 0.084 measured) */
START_TEST(ernie4_5_kv_on_disk) { kv_matrix("ernie4_5-tiny", "ernie4_5-tiny-bf16", 0.12); }
END_TEST
START_TEST(sim_placements_ernie4_5)
{
    device_matrix(FG_BACKEND_SIM, "ernie4_5-tiny", "ernie4_5-tiny-bf16", 0.12);
}
END_TEST
/* ERNIE 4.5 MoE: its attention with the softmax router's choice bias ([1, experts]), a shared
 * expert and the LM head's bias (use_bias) */
START_TEST(ernie4_5_moe_routing) { layout_case("ernie4_5-moe-tiny-bf16", "ernie4_5-moe-tiny"); }
END_TEST
START_TEST(ernie4_5_moe_transformers5)
{
    layout_case("ernie4_5-moe-tiny-hf5", "ernie4_5-moe-tiny");
}
END_TEST
START_TEST(ernie4_5_moe_placements)
{
    placement_matrix("ernie4_5-moe-tiny", "ernie4_5-moe-tiny-bf16");
}
END_TEST
START_TEST(sim_placements_ernie4_5_moe)
{
    device_matrix(FG_BACKEND_SIM, "ernie4_5-moe-tiny", "ernie4_5-moe-tiny-bf16", 0.25);
}
END_TEST
START_TEST(experts_paged_ernie4_5_moe)
{
    experts_paged("ernie4_5-moe-tiny", "ernie4_5-moe-tiny-bf16");
}
END_TEST
/* GLM-4: half of each head rotated on (even, odd) pairs, sandwich norms under GLM's names,
 * the MLP's gate and up fused */
START_TEST(glm4_dense) { layout_case("glm4-tiny-bf16", "glm4-tiny"); }
END_TEST
START_TEST(glm4_transformers5) { layout_case("glm4-tiny-hf5", "glm4-tiny"); }
END_TEST
START_TEST(glm4_placements) { placement_matrix("glm4-tiny", "glm4-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_glm4) { sim_matrix("glm4-tiny", "glm4-tiny-bf16"); }
END_TEST
START_TEST(gemma2_softcap) { layout_case("gemma2-tiny-bf16", "gemma2-tiny"); }
END_TEST
START_TEST(gemma2_transformers5) { layout_case("gemma2-tiny-hf5", "gemma2-tiny"); }
END_TEST
START_TEST(gemma2_placements) { placement_matrix("gemma2-tiny", "gemma2-tiny-bf16"); }
END_TEST
START_TEST(gemma2_kv_on_disk) { kv_matrix("gemma2-tiny", "gemma2-tiny-bf16", 0.08); }
END_TEST
START_TEST(sim_placements_gemma2) { sim_matrix("gemma2-tiny", "gemma2-tiny-bf16"); }
END_TEST
START_TEST(sim_placements_phi3)
{
    sim_matrix("phi3-longrope-tiny", "phi3-longrope-tiny-bf16");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("infer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, layout_safetensors);
    tcase_add_test(tc, ignore_eos_generates_past_eos);
    tcase_add_test(tc, prefill_gemm_opt);
    tcase_add_test(tc, prefill_gemm_llama3_bf16);
    tcase_add_test(tc, prefill_gemm_qwen2_bf16);
    tcase_add_test(tc, prefill_gemm_qwen3_bf16);
    tcase_add_test(tc, prefill_gemm_q4_int8);
    tcase_add_test(tc, layout_sharded);
    tcase_add_test(tc, layout_bin);
    tcase_add_test(tc, layout_npy);
    tcase_add_test(tc, layout_bf16_bin);
    tcase_add_test(tc, layout_350m_style);
    tcase_add_test(tc, placements_and_schedules_agree);
    tcase_add_test(tc, q4_weights_within_bound);
    tcase_add_test(tc, compressed_cache_and_sparse_attention);
    tcase_add_test(tc, kv_cache_on_disk_and_mixed_fractions);
    tcase_add_test(tc, bad_requests_are_refused);
    tcase_add_test(tc, int8_compute_within_bound);
    tcase_add_test(tc, llama2_bf16);
    tcase_add_test(tc, llama2_f16_sharded);
    tcase_add_test(tc, llama2_f32);
    tcase_add_test(tc, llama2_bin_inv_freq);
    tcase_add_test(tc, llama3_tied_gqa_scaled);
    tcase_add_test(tc, llama3_transformers5_config);
    tcase_add_test(tc, llama_linear_mqa);
    tcase_add_test(tc, mistral_sliding_window);
    tcase_add_test(tc, qwen2_biases_tied);
    tcase_add_test(tc, qwen3_qk_norm);
    tcase_add_test(tc, qwen3_transformers5_config);
    tcase_add_test(tc, qwen3_yarn);
    tcase_add_test(tc, sim_placements_yarn);
    tcase_add_test(tc, qwen2_layer_windows);
    tcase_add_test(tc, qwen2_layer_types);
    tcase_add_test(tc, qwen2_window_placements);
    tcase_add_test(tc, ministral_layer_types);
    tcase_add_test(tc, sim_placements_ministral);
    tcase_add_test(tc, sim_placements_windows);
    tcase_add_test(tc, mistral_placements);
    tcase_add_test(tc, mistral_kv_on_disk);
    tcase_add_test(tc, llama3_placements);
    tcase_add_test(tc, qwen2_kv_on_disk);
    tcase_add_test(tc, qwen3_placements);
    tcase_add_test(tc, qwen3_kv_on_disk);
    tcase_add_test(tc, phi3_fused_window);
    tcase_add_test(tc, phi3_transformers5_config);
    tcase_add_test(tc, phi3_longrope_long);
    tcase_add_test(tc, phi3_longrope_short);
    tcase_add_test(tc, phi3_placements);
    tcase_add_test(tc, phi3_kv_on_disk);
    tcase_add_test(tc, sim_placements_phi3);
    tcase_add_test(tc, gemma3_sandwich_local_rope);
    tcase_add_test(tc, gemma3_transformers5_config);
    tcase_add_test(tc, gemma3_placements);
    tcase_add_test(tc, gemma3_multimodal_transformers5);
    tcase_add_test(tc, gemma3_multimodal_hub);
    tcase_add_test(tc, mistral3_multimodal_transformers5);
    tcase_add_test(tc, mistral3_multimodal_hub);
    tcase_add_test(tc, qwen2_5_vl_transformers5);
    tcase_add_test(tc, qwen2_5_vl_flat_hub);
    tcase_add_test(tc, qwen3_vl_transformers5);
    tcase_add_test(tc, ministral3_llama4_scaling);
    tcase_add_test(tc, ministral3_transformers5_config);
    tcase_add_test(tc, ministral3_placements);
    tcase_add_test(tc, granite_multipliers);
    tcase_add_test(tc, granite_transformers5_config);
    tcase_add_test(tc, sim_placements_granite);
    tcase_add_test(tc, smollm3_nope_layers);
    tcase_add_test(tc, olmo2_post_norms);
    tcase_add_test(tc, olmo2_transformers5_config);
    tcase_add_test(tc, olmo2_placements);
    tcase_add_test(tc, sim_placements_olmo2);
    tcase_add_test(tc, smollm3_transformers5_config);
    tcase_add_test(tc, smollm3_placements);
    tcase_add_test(tc, mixtral_experts);
    tcase_add_test(tc, mixtral_transformers5);
    tcase_add_test(tc, mixtral_placements);
    tcase_add_test(tc, sim_placements_mixtral);
    tcase_add_test(tc, qwen3_moe_experts);
    tcase_add_test(tc, experts_paged_qwen3_moe);
    tcase_add_test(tc, mixtral_q4_weights);
    tcase_add_test(tc, qwen2_moe_q4_weights);
    tcase_add_test(tc, qwen3_moe_q4_weights);
    tcase_add_test(tc, experts_paged_mixtral);
    tcase_add_test(tc, experts_paged_qwen2_moe);
    tcase_add_test(tc, qwen3_moe_transformers5);
    tcase_add_test(tc, qwen3_moe_placements);
    tcase_add_test(tc, sim_placements_qwen3_moe);
    tcase_add_test(tc, qwen2_moe_shared_expert);
    tcase_add_test(tc, olmoe_experts);
    tcase_add_test(tc, granitemoe_experts);
    tcase_add_test(tc, granitemoe_transformers5);
    tcase_add_test(tc, granitemoe_placements);
    tcase_add_test(tc, sim_placements_granitemoe);
    tcase_add_test(tc, experts_paged_granitemoe);
    tcase_add_test(tc, mixtral_transformers5_raw);
    tcase_add_test(tc, olmoe_transformers5);
    tcase_add_test(tc, olmoe_placements);
    tcase_add_test(tc, sim_placements_olmoe);
    tcase_add_test(tc, experts_paged_olmoe);
    tcase_add_test(tc, olmoe_q4_weights);
    tcase_add_test(tc, qwen2_moe_transformers5);
    tcase_add_test(tc, qwen2_moe_placements);
    tcase_add_test(tc, sim_placements_qwen2_moe);
    tcase_add_test(tc, sim_placements_ministral3);
    tcase_add_test(tc, gemma3_kv_on_disk);
    tcase_add_test(tc, sim_placements_gemma3);
    tcase_add_test(tc, glm4_moe_routing);
    tcase_add_test(tc, glm4_moe_transformers5);
    tcase_add_test(tc, glm4_moe_placements);
    tcase_add_test(tc, sim_placements_glm4_moe);
    tcase_add_test(tc, experts_paged_glm4_moe);
    tcase_add_test(tc, glm4_moe_q4_weights);
    tcase_add_test(tc, minimax_m2_routing);
    tcase_add_test(tc, minimax_m2_transformers5);
    tcase_add_test(tc, minimax_m2_raw);
    tcase_add_test(tc, minimax_m2_placements);
    tcase_add_test(tc, sim_placements_minimax_m2);
    tcase_add_test(tc, experts_paged_minimax_m2);
    tcase_add_test(tc, olmo3_layers);
    tcase_add_test(tc, olmo3_transformers5);
    tcase_add_test(tc, olmo3_placements);
    tcase_add_test(tc, olmo3_kv_on_disk);
    tcase_add_test(tc, sim_placements_olmo3);
    tcase_add_test(tc, dots1_routing);
    tcase_add_test(tc, dots1_transformers5);
    tcase_add_test(tc, dots1_placements);
    tcase_add_test(tc, sim_placements_dots1);
    tcase_add_test(tc, experts_paged_dots1);
    tcase_add_test(tc, seed_oss_biases);
    tcase_add_test(tc, seed_oss_transformers5);
    tcase_add_test(tc, seed_oss_placements);
    tcase_add_test(tc, sim_placements_seed_oss);
    tcase_add_test(tc, exaone4_layers);
    tcase_add_test(tc, exaone4_transformers5);
    tcase_add_test(tc, exaone4_placements);
    tcase_add_test(tc, exaone4_kv_on_disk);
    tcase_add_test(tc, sim_placements_exaone4);
    tcase_add_test(tc, ernie4_5_pairs);
    tcase_add_test(tc, ernie4_5_transformers5);
    tcase_add_test(tc, ernie4_5_placements);
    tcase_add_test(tc, ernie4_5_kv_on_disk);
    tcase_add_test(tc, sim_placements_ernie4_5);
    tcase_add_test(tc, ernie4_5_moe_routing);
    tcase_add_test(tc, ernie4_5_moe_transformers5);
    tcase_add_test(tc, ernie4_5_moe_placements);
    tcase_add_test(tc, sim_placements_ernie4_5_moe);
    tcase_add_test(tc, experts_paged_ernie4_5_moe);
    tcase_add_test(tc, glm4_dense);
    tcase_add_test(tc, glm4_transformers5);
    tcase_add_test(tc, glm4_placements);
    tcase_add_test(tc, sim_placements_glm4);
    tcase_add_test(tc, gemma_layers);
    tcase_add_test(tc, gemma_transformers5);
    tcase_add_test(tc, gemma_placements);
    tcase_add_test(tc, sim_placements_gemma);
    tcase_add_test(tc, gemma2_softcap);
    tcase_add_test(tc, gemma2_transformers5);
    tcase_add_test(tc, gemma2_placements);
    tcase_add_test(tc, gemma2_kv_on_disk);
    tcase_add_test(tc, sim_placements_gemma2);
    tcase_add_test(tc, gpt_oss_sinks_experts);
    tcase_add_test(tc, gpt_oss_transformers5);
    tcase_add_test(tc, gpt_oss_mxfp4);
    tcase_add_test(tc, experts_paged_gpt_oss_mxfp4);
    tcase_add_test(tc, gpt_oss_placements);
    tcase_add_test(tc, gpt_oss_kv_on_disk);
    tcase_add_test(tc, sim_placements_gpt_oss);
    tcase_add_test(tc, experts_paged_gpt_oss);
    tcase_add_test(tc, gpt_oss_q4_weights);
    tcase_add_test(tc, llama_q4_weights);
    tcase_add_test(tc, qwen2_q4_weights);
    tcase_add_test(tc, qwen3_q4_weights);
    tcase_add_test(tc, sim_placements_opt);
    tcase_add_test(tc, sim_placements_llama3);
    tcase_add_test(tc, sim_placements_mistral);
    tcase_add_test(tc, sim_placements_qwen2);
    tcase_add_test(tc, sim_placements_qwen3);
    tcase_add_test(tc, sim_bad_requests_are_refused);
    tcase_add_test(tc, sim_decode_moves_only_logits_opt);
    tcase_add_test(tc, sim_decode_moves_only_logits_llama3);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("infer_cuda");
    TCase *tc = tcase_create("infer_cuda");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, cuda_placements_opt);
    tcase_add_test(tc, cuda_placements_llama2);
    tcase_add_test(tc, cuda_placements_llama3);
    tcase_add_test(tc, cuda_placements_mistral);
    tcase_add_test(tc, cuda_placements_qwen2);
    tcase_add_test(tc, cuda_placements_qwen3);
    tcase_add_test(tc, cuda_placements_yarn);
    tcase_add_test(tc, cuda_placements_phi3);
    tcase_add_test(tc, cuda_placements_gemma3);
    tcase_add_test(tc, cuda_placements_gemma2);
    tcase_add_test(tc, cuda_placements_gpt_oss);
    tcase_add_test(tc, cuda_placements_gemma);
    tcase_add_test(tc, cuda_placements_ernie4_5_moe);
    tcase_add_test(tc, cuda_placements_ernie4_5);
    tcase_add_test(tc, cuda_placements_exaone4);
    tcase_add_test(tc, cuda_placements_dots1);
    tcase_add_test(tc, cuda_placements_olmo3);
    tcase_add_test(tc, cuda_placements_minimax_m2);
    tcase_add_test(tc, cuda_placements_glm4_moe);
    tcase_add_test(tc, cuda_placements_ministral3);
    tcase_add_test(tc, cuda_placements_granite);
    tcase_add_test(tc, cuda_placements_smollm3);
    tcase_add_test(tc, cuda_placements_olmo2);
    tcase_add_test(tc, cuda_placements_mixtral);
    tcase_add_test(tc, cuda_placements_qwen2_moe);
    tcase_add_test(tc, cuda_placements_olmoe);
    tcase_add_test(tc, cuda_placements_granitemoe);
    tcase_add_test(tc, cuda_placements_windows);
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
