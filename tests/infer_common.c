/* infer_common.c - the shared part of the test_infer_*.c suites (see infer_common.h): a
 * fixture's transformers reference, its checkpoint converted into a store, an engine over it and
 * the checks of its logits and greedy tokens against the reference. Every check's failure
 * message starts with the current case's name (infer_now). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer_common.h"

/* Fixture families: tests/fixtures/opt (make_opt_fixtures.py) and tests/fixtures/llama
 * (make_llama_fixtures.py: Llama 2/3, linear RoPE, Mistral, Qwen2, with their tokenizer.json). */
const char *family_dir(const char *name)
{
    return strncmp(name, "opt", 3) ? FG_FIXTURE_DIR "/llama" : FG_FIXTURE_DIR "/opt";
}

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

/* Converted stores shared by a TCase's cases (convert_as): Check runs each case in a child of the
 * suite's process, so they live in a directory that process makes before the TCase's first case
 * and removes after its last (an unchecked fixture). A case converts a layout the first time one
 * asks for it, into a name of its own renamed into place whole: a case that fails converting
 * leaves nothing the next one would trust. Every user opens them read-only. */
static char g_stores[4096];

static void stores_setup(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(g_stores, sizeof g_stores, "%s/fgstores-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_stores))
        g_stores[0] = '\0'; /* each case converts into its own temp dir, as before */
}

static void stores_teardown(void)
{
    if (g_stores[0])
        tu_rmtree(g_stores);
    g_stores[0] = '\0';
}

const char *infer_now = "";

/* The row maps infer_rows_only made (at registration, before Check forks a test). */
typedef struct row_map {
    const infer_case *rows;
    int n, map[256];
} row_map;
static row_map g_maps[16];
static int g_n_maps;

int infer_rows_only(const infer_case *rows, int n)
{
    const char *only = getenv("FG_INFER_ONLY");
    if (!only || !*only)
        return n;
    if (g_n_maps >= 16 || n > 256) { /* at registration: no Check assertion here */
        fprintf(stderr, "infer_rows_only: more than 16 tables or 256 rows\n");
        abort();
    }
    row_map *m = &g_maps[g_n_maps++];
    m->rows = rows, m->n = 0;
    for (int i = 0; i < n; i++) {
        char words[256];
        snprintf(words, sizeof words, "%s", only);
        for (char *save = NULL, *w = strtok_r(words, ",", &save); w;
             w = strtok_r(NULL, ",", &save))
            if (*w && strstr(rows[i].layout, w)) {
                m->map[m->n++] = i;
                break;
            }
    }
    return m->n;
}

const infer_case *infer_row(const infer_case *rows, int i)
{
    for (int q = 0; q < g_n_maps; q++)
        if (g_maps[q].rows == rows) {
            i = g_maps[q].map[i];
            break;
        }
    infer_now = rows[i].name;
    printf("case %d: %s (%s, %s)\n", i, rows[i].name, rows[i].layout, rows[i].ref);
    fflush(stdout);
    return &rows[i];
}

TCase *infer_tcase(const char *name, int timeout)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_unchecked_fixture(tc, stores_setup, stores_teardown);
    tcase_set_timeout(tc, timeout);
    return tc;
}

static void read_ints(const char *path, int *out, int n)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", infer_now, path);
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
    ck_assert_msg(f != NULL, "%s: %s", infer_now, path);
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

void load_ref(const char *name, ref *r)
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

/* src converted with o into the store named key, once per TCase (g_stores above; in the test's
 * temp dir outside infer_tcase). */
const char *convert_shared(const char *src, const char *key, const fg_convert_opts *o)
{
    static char bufs[4][4096];
    static int k;
    char *dst = bufs[k++ & 3], tmp[4200];
    if (g_stores[0]) {
        snprintf(dst, sizeof bufs[0], "%.3500s/%.500s", g_stores, key);
        if (access(dst, F_OK) == 0)
            return dst;
        snprintf(tmp, sizeof tmp, "%s.tmp%d", dst, (int)getpid());
        tu_rmtree(tmp);
    } else {
        snprintf(dst, sizeof bufs[0], "%.4000s", tu_path(key));
        snprintf(tmp, sizeof tmp, "%s", dst);
    }
    fg_convert_opts oo = *o;
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, tmp, &oo, &rep, &err) == 0, "%s: %s: %s", infer_now, src,
                  err.msg);
    ck_assert_msg(strcmp(tmp, dst) == 0 || rename(tmp, dst) == 0, "%s: rename %s", infer_now, tmp);
    return dst;
}

/* Convert a fixture checkpoint (OPT ones take the GPT-2 tokenizer; the Llama family's have
 * their tokenizer.json, or GPT-2's with gpt2_tok) into a store; q4 = 2: 4-bit grouped along the
 * input axis (what the int8 kernels take). */
const char *convert_as(const char *layout, int q4, int gpt2_tok)
{
    char src[4096], tok[4096], key[512];
    gpt2_tok |= !strncmp(layout, "opt", 3);
    snprintf(src, sizeof src, "%s/%s", family_dir(layout), layout);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    snprintf(key, sizeof key, "%.400s.q%d.%s", layout, q4, gpt2_tok ? "gpt2" : "own");
    fg_convert_opts o = {q4 != 0, 64, q4 == 2 ? 1 : -1, gpt2_tok ? tok : NULL, 4096, NULL, NULL};
    return convert_shared(src, key, &o);
}

const char *convert(const char *layout, int q4) { return convert_as(layout, q4, 0); }

uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

int eng_open(const char *dir, const fg_engine_opts *o, eng *x, fg_err *err)
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

void eng_close(eng *x)
{
    ck_assert_int_eq(fg_engine_close(x->e, NULL), FG_OK);
    fg_model_close(x->m);
    fg_store_close(x->s);
}

/* Logits of the fixture batch (left padding dropped) through an engine opened with o: row b's
 * t-th unpadded token at out + (b * 12 + t) * vocab (malloc'd; the caller frees it); the
 * engine's stats into *st when asked. */
float *fixture_logits(const char *store, const ref *r, fg_engine_opts o, fg_engine_stats *st)
{
    eng x;
    fg_err err;
    o.max_ctx = 64;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s: %s", infer_now, err.msg);
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
    ck_assert_msg(fg_engine_logits(x.e, win, lens, 3, NULL, NULL, out, 12 * V, &err) == 0,
                  "%s: %s", infer_now, err.msg);
    if (st)
        fg_engine_stats_get(x.e, st);
    eng_close(&x);
    return out;
}

/* Logits of the fixture batch through an engine opened with o, against the reference; the
 * engine's stats into *st when asked. */
result check_logits_st(const char *store, const ref *r, fg_engine_opts o,
                              fg_engine_stats *st)
{
    float *out = fixture_logits(store, r, o, st);
    result res = compare_logits(out, r);
    free(out);
    return res;
}

/* Logits laid out as fixture_logits gives them against the reference */
result compare_logits(const float *out, const ref *r)
{
    uint32_t V = r->vocab;
    result res = {0, 0, 0};
    int n = 0, same = 0;
    double num = 0, den = 0;
    for (int b = 0; b < 3; b++) {
        int pad = 12;
        for (int t = 0; t < 12; t++)
            pad -= r->mask[b][t] != 0;
        for (int t = 0; t < 12 - pad; t++) {
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
    return res;
}

result check_logits(const char *store, const ref *r, fg_engine_opts o)
{
    return check_logits_st(store, r, o, NULL);
}

void check_greedy(const char *store, const ref *r, fg_engine_opts o)
{
    eng x;
    fg_err err;
    o.max_ctx = 64;
    ck_assert_msg(eng_open(store, &o, &x, &err) == 0, "%s: %s", infer_now, err.msg);
    int32_t out[64];
    fg_gen_seq s = {r->prompt, r->n_prompt, r->n_greedy, {0, 0, 1, 0}, 0, out, 0, 0};
    fg_gen_stats st;
    ck_assert_msg(fg_engine_generate(x.e, &s, 1, NULL, &st, &err) == 0, "%s: %s", infer_now,
                  err.msg);
    /* transformers generated min_new_tokens, so EOS may appear inside its output; ours stops */
    uint32_t n = s.n_out;
    ck_assert_uint_ge(n, 1);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == r->greedy[i], "%s: token %u: %d vs %d", infer_now, i, out[i],
                      r->greedy[i]);
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
    ck_assert_msg(fg_engine_generate(x.e, &all, 1, NULL, &st, &err) == 0, "%s: %s", infer_now,
                  err.msg);
    ck_assert_uint_eq(all.n_out, r->n_greedy);
    ck_assert_int_eq(all.finish, FG_FINISH_LENGTH);
    for (uint32_t i = 0; i < r->n_greedy; i++)
        ck_assert_msg(out[i] == r->greedy[i], "%s: ignore_eos: token %u: %d vs %d", infer_now, i,
                      out[i], r->greedy[i]);
    eng_close(&x);
}

fg_engine_opts defaults(void)
{
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.threads = 1;
    return o;
}

/* The store's tokenizer (tokenizer.json) encodes the fixture's prompt text to the ids
 * transformers' tokenizer gave, BOS as the family adds it. */
void check_prompt_ids(const char *store, const ref *r)
{
    fg_store *s;
    fg_model *m;
    fg_tok *tok;
    fg_err err;
    fg_tok_ids ids = {0};
    ck_assert_int_eq(fg_store_open(store, FG_STORE_RDONLY, NULL, &s, &err), FG_OK);
    ck_assert_msg(fg_model_open(s, &m, &err) == FG_OK, "%s: %s", infer_now, err.msg);
    ck_assert_msg(fg_model_tokenizer(m, &tok, &err) == FG_OK, "%s: %s", infer_now, err.msg);
    ck_assert_int_eq(fg_tok_encode(tok, r->prompt_text, strlen(r->prompt_text), FG_TOK_ADD_BOS,
                                   &ids, &err), FG_OK);
    ck_assert_msg(ids.n == r->n_prompt, "%s: %zu prompt ids, transformers' %u", infer_now, ids.n,
                  r->n_prompt);
    for (uint32_t i = 0; i < r->n_prompt; i++)
        ck_assert_msg(ids.ids[i] == r->prompt[i], "%s: prompt id %u: %d vs %d", infer_now, i,
                      ids.ids[i], r->prompt[i]);
    fg_tok_ids_free(&ids);
    fg_tok_free(tok);
    fg_model_close(m);
    fg_store_close(s);
}
