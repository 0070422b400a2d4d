/* test_prefix.c - the prefix KV cache (prefix/prefix.h, prefix_kv.c, prefix_share.c).
 *
 * Exactness: a block of left-padded prompts sharing prefixes is generated without a cache, with
 * an empty cache (cold: the pages are saved) and again with the filled cache (warm: the pages
 * are loaded and the prefill starts past them); greedy tokens must be identical, every sampled
 * step's logits bit-identical cold and within 1e-5 (relative to the largest logit) warm, for
 * each model family's fixture, the 4-bit KV cache, the
 * KV cache homed on disk, several blocks and both schedules. The fixture prompt's greedy
 * continuation through a warm cache must equal transformers' (tests/fixtures).
 *
 * The store below: identity refusal, LRU under a budget, two processes writing one cache, and a
 * seeded SIGKILL test (crash_trials) that kills a writer at random instants and checks that
 * the cache then opens, verifies, serves only whole entries with the bytes written, and takes
 * writes again.
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "convert.h"
#include "engine.h"
#include "prefix.h"
#include "testutil.h"

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static const char *family_dir(const char *name)
{
    return strncmp(name, "opt", 3) ? FG_FIXTURE_DIR "/llama" : FG_FIXTURE_DIR "/opt";
}

static const char *convert(const char *layout)
{
    static char dst[4096];
    snprintf(dst, sizeof dst, "%s", tu_path("store"));
    char src[4096], tok[4096];
    int opt = !strncmp(layout, "opt", 3);
    snprintf(src, sizeof src, "%s/%s", family_dir(layout), layout);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts o = {0, 64, -1, opt ? tok : NULL, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &o, &rep, &err) == 0, "%s: %s", layout, err.msg);
    return dst;
}

/* ---- a block through an engine, with or without a cache ---- */

#define NSEQ 6
#define MAXNEW 6
#define MAXP 40

typedef struct prompts {
    int32_t ids[NSEQ][MAXP];
    uint32_t n[NSEQ];
} prompts;

typedef struct outcome {
    int32_t out[NSEQ][MAXNEW];
    uint32_t n_out[NSEQ];
    float *logits;               /* [NSEQ][MAXNEW][V] */
    uint32_t V;
    fg_gen_stats st;
} outcome;

static void on_logits(void *ctx, uint32_t seq, uint32_t n_out, const float *lg, uint32_t V)
{
    outcome *o = ctx;
    ck_assert_uint_eq(V, o->V);
    memcpy(o->logits + ((size_t)seq * MAXNEW + n_out) * V, lg, (size_t)V * 4);
}

/* Prompts 0-3 share a 22-token prefix (3 and 4 share 30 tokens), 5 is its own; lengths differ,
 * so the block is left-padded. */
static void make_prompts(prompts *p, uint32_t vocab)
{
    uint64_t x = 12345;
    int32_t common[MAXP], other[MAXP];
    for (int i = 0; i < MAXP; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        common[i] = 4 + (int32_t)((x >> 33) % (vocab - 4));
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        other[i] = 4 + (int32_t)((x >> 33) % (vocab - 4));
    }
    const uint32_t shared[NSEQ] = {22, 22, 22, 30, 30, 0}, len[NSEQ] = {25, 31, 22, 34, 33, 17};
    for (int s = 0; s < NSEQ; s++) {
        p->n[s] = len[s];
        for (uint32_t t = 0; t < len[s]; t++)
            p->ids[s][t] = t < shared[s] ? common[t] : other[(t * 7 + (uint32_t)s * 5) % MAXP];
    }
}

static fg_engine_opts defaults(void)
{
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.policy.gbs = 3;
    o.policy.ngb = 2;
    o.threads = 1;
    o.max_ctx = 64;
    return o;
}

/* Generate the prompts' block; with cache != NULL through a prefix cache at that dir (page
 * tokens G), opened for this engine. */
static void run_block(const char *store, fg_engine_opts o, const char *cache, uint32_t G,
                      const prompts *p, outcome *res)
{
    fg_store *s;
    fg_model *md;
    fg_engine *e;
    fg_prefix *pfx = NULL;
    fg_err err;
    ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
    ck_assert_msg(fg_model_open(s, &md, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_engine_open(md, &o, &e, &err) == FG_OK, "%s", err.msg);
    if (cache) {
        fg_prefix_ident id;
        ck_assert_msg(fg_engine_prefix_ident(e, G, &id, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(fg_prefix_open(cache, &id, NULL, &pfx, &err) == FG_OK, "%s", err.msg);
        fg_engine_set_prefix(e, pfx);
    }
    res->V = fg_engine_hparams(e)->vocab_size;
    res->logits = calloc((size_t)NSEQ * MAXNEW * res->V, 4);
    fg_gen_seq seqs[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        seqs[i] = (fg_gen_seq){p->ids[i], p->n[i], MAXNEW, {0, 0, 1, 0}, (uint64_t)i,
                               res->out[i], 0, 0};
    fg_gen_hooks h = {NULL, NULL, NULL, NULL, on_logits, res};
    ck_assert_msg(fg_engine_generate(e, seqs, NSEQ, &h, &res->st, &err) == FG_OK, "%s", err.msg);
    for (int i = 0; i < NSEQ; i++)
        res->n_out[i] = seqs[i].n_out;
    ck_assert_int_eq(fg_engine_close(e, NULL), FG_OK);
    fg_prefix_close(pfx);
    fg_model_close(md);
    fg_store_close(s);
}

/* Greedy tokens identical; logits bit-identical when exact, else within 1e-5 of the logits'
 * scale (a warm prefill multiplies fewer rows at once, and the sgemm's blocking may round a
 * sum differently: measured up to 1.8e-6 relative). */
static void same(const outcome *a, const outcome *b, int exact, const char *what)
{
    double worst = 0, big = 0;
    for (int s = 0; s < NSEQ; s++) {
        ck_assert_msg(a->n_out[s] == b->n_out[s], "%s: sequence %d: %u vs %u tokens", what, s,
                      a->n_out[s], b->n_out[s]);
        for (uint32_t t = 0; t < a->n_out[s]; t++) {
            ck_assert_msg(a->out[s][t] == b->out[s][t], "%s: sequence %d token %u: %d vs %d",
                          what, s, t, a->out[s][t], b->out[s][t]);
            const float *x = a->logits + ((size_t)s * MAXNEW + t) * a->V;
            const float *y = b->logits + ((size_t)s * MAXNEW + t) * b->V;
            for (uint32_t v = 0; v < a->V; v++) {
                worst = fmax(worst, fabs((double)x[v] - y[v]));
                big = fmax(big, fabs((double)x[v]));
            }
        }
    }
    fprintf(stderr, "%s%s: max |logit diff| %g, max |logit| %g\n", what, exact ? " (cold)" : "",
            worst, big);
    ck_assert_msg(exact ? worst == 0 : worst <= 1e-5 * fmax(1.0, big),
                  "%s: max |logit diff| %g (max |logit| %g)", what, worst, big);
}

/* Without cache, cold, warm: identical; the warm run loads most prompt tokens. */
static void exact_case(const char *store, fg_engine_opts o, uint32_t G, const char *what)
{
    prompts p;
    fg_store *s;
    fg_model *md;
    ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &s, NULL), FG_OK);
    ck_assert_int_eq(fg_model_open(s, &md, NULL), FG_OK);
    fg_hparams hp = *fg_model_hparams(md);
    fg_model_close(md);
    fg_store_close(s);
    make_prompts(&p, hp.vocab_size);
    char cache[4096];
    static int n_cache;
    snprintf(cache, sizeof cache, "%s", tu_path(""));
    snprintf(cache + strlen(cache), sizeof cache - strlen(cache), "/cache%d", n_cache++);
    outcome ref = {0}, cold = {0}, warm = {0};
    run_block(store, o, NULL, G, &p, &ref);
    run_block(store, o, cache, G, &p, &cold);
    run_block(store, o, cache, G, &p, &warm);
    same(&ref, &cold, 1, what);
    same(&ref, &warm, 0, what);
    uint64_t total = 0;
    for (int i = 0; i < NSEQ; i++)
        total += p.n[i];
    ck_assert_uint_eq(cold.st.prompt_cached + cold.st.prompt_computed, total);
    ck_assert_uint_eq(warm.st.prompt_cached + warm.st.prompt_computed, total);
    /* warm: s0 = min(pad + cached) over the block's sequences */
    ck_assert_msg(warm.st.prompt_cached > (G <= 8 ? total / 2 : 0), "%s: warm run loaded %llu of "
                  "%llu tokens",
                  what, (unsigned long long)warm.st.prompt_cached, (unsigned long long)total);
    fprintf(stderr, "%s: cold %llu cached / %llu computed, warm %llu / %llu\n", what,
            (unsigned long long)cold.st.prompt_cached, (unsigned long long)cold.st.prompt_computed,
            (unsigned long long)warm.st.prompt_cached, (unsigned long long)warm.st.prompt_computed);
    free(ref.logits);
    free(cold.logits);
    free(warm.logits);
}

static void family_matrix(const char *layout)
{
    const char *store = convert(layout);
    fg_engine_opts o = defaults();
    exact_case(store, o, 4, "RAM, 3 x 2");
    o.policy.compress_cache = 1;
    exact_case(store, o, 4, "4-bit KV");
    o = defaults();
    o.policy.have_fractions = 1;
    o.policy.frac = (fg_pager_policy){{0, 1, 0}, {0, 0, 1}, {0, 1, 0}}; /* KV cache on disk */
    o.offload_dir = tu_path("");
    exact_case(store, o, 8, "KV on disk");
    o.policy.compress_cache = 1;
    o.policy.gbs = 2;
    o.policy.ngb = 3;
    o.policy.schedule = FG_SCHEDULE_ROW;
    exact_case(store, o, 4, "KV on disk, 4-bit, row-by-row 2 x 3");
    o = defaults();
    o.policy.gbs = 6;
    o.policy.ngb = 1;
    exact_case(store, o, 16, "one batch, 16-token pages");
}

START_TEST(exact_opt) { family_matrix("opt-tiny-safetensors"); }
END_TEST
START_TEST(exact_llama2) { family_matrix("llama2-tiny-f32"); }
END_TEST
START_TEST(exact_llama3) { family_matrix("llama3-tiny-bf16"); }
END_TEST
START_TEST(exact_mistral) { family_matrix("mistral-tiny-bf16"); }
END_TEST
START_TEST(exact_qwen2) { family_matrix("qwen2-tiny-bf16"); }
END_TEST
START_TEST(exact_qwen3) { family_matrix("qwen3-tiny-bf16"); }
END_TEST

/* multi-head latent attention: a page holds the latent rows alone (one plane a token) */
START_TEST(exact_deepseek_v3) { family_matrix("deepseek-v3-tiny-bf16"); }
END_TEST

/* The fixture prompt through a warm cache continues as transformers did. */
static void fixture_greedy(const char *layout, const char *refname)
{
    const char *store = convert(layout);
    char p[4096], line[4096];
    snprintf(p, sizeof p, "%s/%s.ref/greedy.txt", family_dir(refname), refname);
    FILE *f = fopen(p, "r");
    ck_assert(f != NULL);
    int32_t prompt[64], want[64];
    uint32_t np = 0, nw = 0;
    int off, used;
    ck_assert(fgets(line, sizeof line, f) && !strncmp(line, "prompt:", 7));
    for (off = 7; sscanf(line + off, "%d%n", &prompt[np], &used) == 1; off += used)
        np++;
    ck_assert(fgets(line, sizeof line, f) && !strncmp(line, "output:", 7));
    for (off = 7; sscanf(line + off, "%d%n", &want[nw], &used) == 1; off += used)
        nw++;
    fclose(f);
    ck_assert_uint_ge(np, 3);
    fg_engine_opts o = defaults();
    for (int run = 0; run < 2; run++) {
        fg_store *s;
        fg_model *md;
        fg_engine *e;
        fg_prefix *pfx;
        fg_prefix_ident id;
        fg_err err;
        ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
        ck_assert_msg(fg_model_open(s, &md, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(fg_engine_open(md, &o, &e, &err) == FG_OK, "%s", err.msg);
        ck_assert_int_eq(fg_engine_prefix_ident(e, 2, &id, &err), FG_OK);
        ck_assert_msg(fg_prefix_open(tu_path("fixcache"), &id, NULL, &pfx, &err) == FG_OK, "%s",
                      err.msg);
        fg_engine_set_prefix(e, pfx);
        int32_t out[64];
        fg_gen_seq sq = {prompt, np, nw, {0, 0, 1, 0}, 0, out, 0, 0};
        fg_gen_stats st;
        ck_assert_msg(fg_engine_generate(e, &sq, 1, NULL, &st, &err) == FG_OK, "%s", err.msg);
        for (uint32_t i = 0; i < sq.n_out; i++)
            ck_assert_msg(out[i] == want[i], "%s run %d token %u: %d vs %d", refname, run, i,
                          out[i], want[i]);
        if (run == 1)
            ck_assert_uint_eq(st.prompt_cached, (np - 1) / 2 * 2);
        fg_engine_close(e, NULL);
        fg_prefix_close(pfx);
        fg_model_close(md);
        fg_store_close(s);
    }
}

START_TEST(fixture_greedy_opt) { fixture_greedy("opt-tiny-safetensors", "opt-tiny"); }
END_TEST
START_TEST(fixture_greedy_llama3) { fixture_greedy("llama3-tiny-bf16", "llama3-tiny"); }
END_TEST

START_TEST(fixture_greedy_deepseek_v2_lite)
{
    fixture_greedy("deepseek-v2-lite-tiny-bf16", "deepseek-v2-lite-tiny");
}
END_TEST

/* ---- the cache's store, without a model ---- */

#define TL 3   /* layers */
#define TG 4   /* tokens a page */
#define TROW 64

static fg_prefix_ident test_ident(uint8_t codec)
{
    fg_prefix_ident id;
    memset(&id, 0, sizeof id);
    id.model = 0x1234;
    id.n_layers = TL;
    id.row_bytes = TROW;
    id.width = TROW / 4;
    id.page_tokens = TG;
    id.codec_id = codec;
    snprintf(id.backend, sizeof id.backend, "cpu");
    snprintf(id.label, sizeof id.label, "test model %u", codec);
    return id;
}

/* Entry i: a one-page prompt of tokens i*4.. with payloads derived from (i, layer). */
static void entry_tokens(uint32_t i, int32_t *t)
{
    for (int k = 0; k < TG; k++)
        t[k] = (int32_t)(i * TG + (uint32_t)k);
}

static void entry_payload(uint32_t i, uint32_t l, uint8_t *buf)
{
    tu_fill(buf, 2 * TG * TROW, (uint64_t)i * 131 + l);
}

static int put_entries(fg_prefix *p, uint32_t first, uint32_t n, fg_err *err)
{
    static uint8_t data[64][TL][2 * TG * TROW];
    int32_t toks[64][TG];
    const void *lp[64][TL];
    fg_prefix_entry e[64];
    for (uint32_t q = 0; q < n; q++) {
        entry_tokens(first + q, toks[q]);
        fg_prefix_key k;
        fg_prefix_keys(p, toks[q], 1, &k);
        for (uint32_t l = 0; l < TL; l++) {
            entry_payload(first + q, l, data[q][l]);
            lp[q][l] = data[q][l];
        }
        e[q] = (fg_prefix_entry){k, {0, 0}, 0, toks[q], lp[q]};
    }
    int rc = fg_prefix_write_begin(p, err);
    if (rc)
        return rc;
    rc = fg_prefix_put(p, e, n, err);
    int rc2 = fg_prefix_write_end(p, err);
    return rc ? rc : rc2;
}

/* Is entry i served whole and exact? 1 yes, 0 absent; fails the test on wrong bytes. */
static int entry_present(fg_prefix *p, uint32_t i)
{
    int32_t t[TG];
    entry_tokens(i, t);
    fg_prefix_key k;
    fg_prefix_keys(p, t, 1, &k);
    uint32_t found;
    fg_err err;
    ck_assert_int_eq(fg_prefix_probe(p, t, &k, 1, &found, &err), FG_OK);
    if (!found)
        return 0;
    for (uint32_t l = 0; l < TL; l++) {
        uint8_t got[2 * TG * TROW], want[2 * TG * TROW];
        ck_assert_msg(fg_prefix_read(p, &k, 0, l, got, &err) == FG_OK, "entry %u layer %u: %s",
                      i, l, err.msg);
        entry_payload(i, l, want);
        ck_assert_msg(!memcmp(got, want, sizeof got), "entry %u layer %u: wrong bytes", i, l);
    }
    return 1;
}

START_TEST(identity_refused)
{
    fg_prefix_ident a = test_ident(1), b = test_ident(2);
    fg_prefix *p;
    fg_err err;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &a, NULL, &p, &err), FG_OK);
    ck_assert_int_eq(put_entries(p, 0, 2, &err), FG_OK);
    fg_prefix_close(p);
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &b, NULL, &p, &err), FG_ERR_STORE_FOREIGN);
    ck_assert_msg(strstr(err.msg, "test model 1") && strstr(err.msg, "another directory"), "%s",
                  err.msg);
    a.model++; /* another model's content */
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &a, NULL, &p, &err), FG_ERR_STORE_FOREIGN);
    a.model--;
    a.page_tokens = 8;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &a, NULL, &p, &err), FG_ERR_STORE_FOREIGN);
    a.page_tokens = TG;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &a, NULL, &p, &err), FG_OK);
    ck_assert(entry_present(p, 0) && entry_present(p, 1) && !entry_present(p, 2));
    fg_prefix_close(p);
    /* a directory that is not empty and not a store */
    FILE *f = fopen(tu_path("junk"), "w");
    fclose(f);
    ck_assert_int_ne(fg_prefix_open(tu_path(""), &a, NULL, &p, &err), FG_OK);
    /* a KV store of another page size and no identity (another program's): refused, untouched */
    fg_store_opts so = {0};
    so.kv_page_size = 8192;
    so.kv_pages_per_file = 16;
    fg_store *s;
    ck_assert_int_eq(fg_store_create(tu_path("kv"), &so, &s, &err), FG_OK);
    fg_store_close(s);
    ck_assert_int_eq(fg_prefix_open(tu_path("kv"), &a, NULL, &p, &err), FG_ERR_STORE_FOREIGN);
    ck_assert_msg(strstr(err.msg, "a KV store of 8192-byte pages (0 in use) without a prefix "
                                  "cache's identity"), "%s", err.msg);
    fg_store_info info;
    ck_assert_int_eq(fg_store_open(tu_path("kv"), FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
    ck_assert_int_eq(fg_store_info_get(s, &info, &err), FG_OK);
    ck_assert_uint_eq(info.kv_used, 0);
    ck_assert_uint_eq(info.n_kv_files, 0);
    fg_store_close(s);
    /* a FIFO as store.id is named (its open blocked the sweep of a half-made cache forever) */
    ck_assert_int_eq(mkdir(tu_path("ff"), 0755), 0);
    ck_assert_int_eq(mkfifo(tu_path("ff/store.id"), 0644), 0);
    ck_assert_int_eq(fg_prefix_open(tu_path("ff"), &a, NULL, &p, &err), FG_ERR_IO);
    ck_assert_msg(strstr(err.msg, "ff/store.id: a FIFO, not a regular file"), "%s", err.msg);
}
END_TEST

/* The budget bounds the slots in use; the entries hit most recently stay. */
START_TEST(budget_evicts_lru)
{
    fg_prefix_ident id = test_ident(1);
    fg_prefix *p;
    fg_err err;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &id, NULL, &p, &err), FG_OK);
    fg_prefix_info info;
    ck_assert_int_eq(put_entries(p, 0, 10, &err), FG_OK);
    fg_prefix_close(p);
    ck_assert_int_eq(fg_prefix_info_get(tu_path("c"), &info, &err), FG_OK);
    ck_assert_uint_eq(info.entries, 10);
    ck_assert_uint_eq(info.kv_pages, 10 * TL);
    uint64_t per = info.bytes / (10 * (TL + 1) + 1); /* + the identity page */
    /* hit entries 0 and 1 (their meta pages are rewritten: most recent), then add 4 under a
     * budget of 8 entries and the identity page */
    fg_prefix_opts po = {(8 * (TL + 1) + 1) * per, 0};
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &id, &po, &p, &err), FG_OK);
    for (uint32_t i = 0; i < 2; i++) {
        int32_t t[TG];
        fg_prefix_key k;
        uint32_t found;
        entry_tokens(i, t);
        fg_prefix_keys(p, t, 1, &k);
        ck_assert_int_eq(fg_prefix_lookup(p, t, &k, 1, &found, &err), FG_OK);
        ck_assert_uint_eq(found, 1);
    }
    ck_assert_int_eq(put_entries(p, 10, 4, &err), FG_OK);
    fg_prefix_stats st;
    fg_prefix_stats_get(p, &st);
    ck_assert_uint_eq(st.pages_evicted, 6);
    ck_assert(entry_present(p, 0) && entry_present(p, 1));
    for (uint32_t i = 2; i < 8; i++)
        ck_assert_msg(!entry_present(p, i), "entry %u kept", i);
    for (uint32_t i = 8; i < 14; i++)
        ck_assert_msg(entry_present(p, i), "entry %u evicted", i);
    fg_prefix_close(p);
    ck_assert_int_eq(fg_prefix_info_get(tu_path("c"), &info, &err), FG_OK);
    ck_assert_uint_le(info.bytes, po.budget);
    ck_assert_uint_eq(info.entries, 8);
    ck_assert_uint_eq(info.hits, 2);
    ck_assert_uint_eq(info.bad, 0);
}
END_TEST

/* Two processes write one cache at once; every entry of both is there afterwards. */
START_TEST(two_processes_share)
{
    fg_prefix_ident id = test_ident(1);
    fg_prefix *p;
    fg_err err;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &id, NULL, &p, &err), FG_OK);
    fg_prefix_close(p);
    pid_t kid[2];
    for (int c = 0; c < 2; c++) {
        if ((kid[c] = fork()) == 0) {
            int bad = fg_prefix_open(tu_path("c"), &id, NULL, &p, &err) != FG_OK;
            for (uint32_t i = 0; !bad && i < 20; i++)
                bad = put_entries(p, 1000 * (uint32_t)(c + 1) + i, 1, &err) != FG_OK;
            if (bad)
                fprintf(stderr, "writer %d: %s\n", c, err.msg);
            fg_prefix_close(p);
            _exit(bad);
        }
        ck_assert_int_gt(kid[c], 0);
    }
    for (int c = 0; c < 2; c++) {
        int status;
        ck_assert_int_eq(waitpid(kid[c], &status, 0), kid[c]);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &id, NULL, &p, &err), FG_OK);
    for (uint32_t c = 1; c <= 2; c++)
        for (uint32_t i = 0; i < 20; i++)
            ck_assert_msg(entry_present(p, 1000 * c + i), "entry %u missing", 1000 * c + i);
    fg_prefix_close(p);
}
END_TEST

/* SIGKILL a writer (with evictions under a small budget) at seeded random instants; after each
 * kill the cache opens, the store verifies, every entry served is whole and exact, and it
 * takes writes again. Trials from FG_PREFIX_KILL_TRIALS (default 120). */
START_TEST(crash_trials)
{
    const char *env = getenv("FG_PREFIX_KILL_TRIALS");
    int trials = env ? atoi(env) : 120;
    srand(20261201);
    fg_prefix_ident id = test_ident(1);
    fg_prefix *p;
    fg_err err;
    ck_assert_int_eq(fg_prefix_open(tu_path("c"), &id, NULL, &p, &err), FG_OK);
    fg_prefix_close(p);
    uint32_t next = 0, served = 0;
    for (int t = 0; t < trials; t++) {
        uint32_t first = next;
        next += 100000;
        pid_t kid = fork();
        if (kid == 0) {
            fg_prefix_opts po = {256 * 1024, 0};
            if (fg_prefix_open(tu_path("c"), &id, &po, &p, &err))
                _exit(3);
            for (uint32_t i = 0;; i += 3)
                if (put_entries(p, first + i, 3, &err))
                    _exit(4);
        }
        ck_assert_int_gt(kid, 0);
        usleep((useconds_t)(rand() % 40000));
        kill(kid, SIGKILL);
        int status;
        ck_assert_int_eq(waitpid(kid, &status, 0), kid);
        ck_assert_msg(WIFSIGNALED(status), "trial %d: writer exited %d", t, WEXITSTATUS(status));
        fg_store *s;
        fg_store_verify_report vr;
        ck_assert_int_eq(fg_store_open(tu_path("c"), FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
        ck_assert_msg(fg_store_verify(s, &vr, &err) == FG_OK, "trial %d: %s", t, err.msg);
        fg_store_close(s);
        ck_assert_msg(fg_prefix_open(tu_path("c"), &id, NULL, &p, &err) == FG_OK, "trial %d: %s",
                      t, err.msg);
        for (uint32_t i = first; i < first + 600; i++)
            served += (uint32_t)entry_present(p, i);
        if (t % 10 == 9)
            ck_assert_msg(put_entries(p, 900000000u + (uint32_t)t, 2, &err) == FG_OK,
                          "trial %d: %s", t, err.msg);
        fg_prefix_close(p);
    }
    fprintf(stderr, "crash_trials: %d kills, %u entries served whole\n", trials, served);
    ck_assert_uint_gt(served, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("prefix");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, exact_opt);
    tcase_add_test(tc, exact_llama2);
    tcase_add_test(tc, exact_llama3);
    tcase_add_test(tc, exact_mistral);
    tcase_add_test(tc, exact_qwen2);
    tcase_add_test(tc, exact_qwen3);
    tcase_add_test(tc, exact_deepseek_v3);
    tcase_add_test(tc, fixture_greedy_opt);
    tcase_add_test(tc, fixture_greedy_llama3);
    tcase_add_test(tc, fixture_greedy_deepseek_v2_lite);
    tcase_add_test(tc, identity_refused);
    tcase_add_test(tc, budget_evicts_lru);
    tcase_add_test(tc, two_processes_share);
    tcase_add_test(tc, crash_trials);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
