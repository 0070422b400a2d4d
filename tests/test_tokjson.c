/* test_tokjson.c - the tokenizer.json classes against Hugging Face `tokenizers`: five small
 * tokenizers trained by tests/fixtures/make_tokjson_fixtures.py (Llama 3-, Qwen2-, Llama 2-,
 * Mistral-like and a split Metaspace one), each with >= 1,000 strings whose ids (special tokens
 * matched or not, with and without the template) and decoded texts were recorded by
 * `tokenizers`, plus random id sequences to decode. Then the rules fixtures cannot show (invalid
 * UTF-8, fg_tok_load_dir's choice, loading from memory) and one test per load error. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tok_int.h"
#include "tokenizer.h"

#define FIX FG_SOURCE_DIR "/tests/fixtures/tokjson"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

static fg_tok *load(const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIX, name);
    fg_tok *t;
    fg_err err;
    ck_assert_msg(fg_tok_load_dir(dir, &t, &err) == FG_OK, "%s", err.msg);
    return t;
}

/* ---- the case file (format in make_tokjson_fixtures.py) */

typedef struct bytes { const char *p; size_t n; int same; } bytes;
typedef struct ids { int32_t *v; size_t n; int same; } ids;
typedef struct jcase { bytes text; ids i, p, b, r; bytes d, s; int is_r; } jcase;

static char *cur, *end;

static ids read_ids(char tag)
{
    ids v = {NULL, 0, 0};
    ck_assert_int_eq(cur[0], tag);
    if (cur[1] == '=') {
        v.same = 1;
        cur += 3;
        return v;
    }
    char *p = cur + 1, *nl = memchr(cur, '\n', (size_t)(end - cur));
    v.v = malloc(((size_t)(nl - cur) / 2 + 1) * sizeof *v.v);
    while (p < nl)
        v.v[v.n++] = (int32_t)strtol(p, &p, 10);
    cur = nl + 1;
    return v;
}

static bytes read_bytes(char tag)
{
    bytes b = {NULL, 0, 0};
    ck_assert_int_eq(cur[0], tag);
    if (cur[1] == '=') {
        b.same = 1;
        cur += 3;
        return b;
    }
    b.n = strtoul(cur + 2, &cur, 10);
    b.p = ++cur;
    cur += b.n;
    ck_assert_int_eq(*cur, '\n');
    cur++;
    return b;
}

static size_t parse(char *buf, size_t len, jcase **out)
{
    size_t n = 0, cap = 0;
    jcase *v = NULL;
    cur = buf;
    end = buf + len;
    while (cur < end && cur[0] == '#')
        cur = strchr(cur, '\n') + 1;
    while (cur < end) {
        if (n == cap)
            v = realloc(v, (cap = cap ? 2 * cap : 1024) * sizeof *v);
        jcase *c = &v[n++];
        memset(c, 0, sizeof *c);
        if (cur[0] == 'R') {
            c->is_r = 1;
            c->r = read_ids('R');
        } else {
            c->text = read_bytes('T');
            c->i = read_ids('I');
            c->p = read_ids('P');
            c->b = read_ids('B');
        }
        c->d = read_bytes('D');
        c->s = read_bytes('S');
        ck_assert_int_eq(*cur, '\n');
        cur++;
    }
    *out = v;
    return n;
}

static void free_cases(jcase *v, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(v[k].i.v);
        free(v[k].p.v);
        free(v[k].b.v);
        free(v[k].r.v);
    }
    free(v);
}

/* ---- comparison */

static int bad_count;

static void report(const char *name, size_t k, const jcase *c, const char *what, const char *detail)
{
    char q[200];
    if (bad_count++ < 12)
        fprintf(stderr, "%s case %zu \"%s\": %s %s\n", name, k,
                c->is_r ? "(random ids)" : tok_quote(q, sizeof q, c->text.p, c->text.n), what, detail);
}

static void cmp_ids(const char *name, size_t k, const jcase *c, const char *what, const ids *want,
                    const fg_tok_ids *got)
{
    size_t i = 0;
    char d[160];
    while (i < got->n && i < want->n && got->ids[i] == want->v[i])
        i++;
    if (i == got->n && i == want->n)
        return;
    snprintf(d, sizeof d, "ids differ at %zu: fg %d, HF %d (fg %zu ids, HF %zu)", i,
             i < got->n ? got->ids[i] : -1, i < want->n ? want->v[i] : -1, got->n, want->n);
    report(name, k, c, what, d);
}

static void cmp_bytes(const char *name, size_t k, const jcase *c, const char *what,
                      const bytes *want, const fg_tok_bytes *got)
{
    char q[200], q2[200], d[440];
    if (got->len == want->n && (want->n == 0 || memcmp(got->data, want->p, want->n) == 0))
        return;
    snprintf(d, sizeof d, "fg \"%s\", HF \"%s\"", tok_quote(q, sizeof q, got->data ? got->data : "", got->len),
             tok_quote(q2, sizeof q2, want->p ? want->p : "", want->n));
    report(name, k, c, what, d);
}

static void encode_check(fg_tok *t, const char *name, size_t k, const jcase *c)
{
    fg_tok_ids got = {0};
    fg_err err;
    static const unsigned fl[3] = {FG_TOK_SPECIAL, 0, FG_TOK_SPECIAL | FG_TOK_ADD_BOS};
    static const char *what[3] = {"encode (specials matched)", "encode (specials not matched)",
                                  "encode (template)"};
    const ids *want[3] = {&c->i, c->p.same ? &c->i : &c->p, &c->b};
    for (int j = 0; j < 3; j++) {
        got.n = 0;
        if (fg_tok_encode(t, c->text.p, c->text.n, fl[j], &got, &err)) {
            report(name, k, c, what[j], err.msg);
            continue;
        }
        cmp_ids(name, k, c, what[j], want[j], &got);
    }
    fg_tok_ids_free(&got);
}

static void decode_check(fg_tok *t, const char *name, size_t k, const jcase *c)
{
    const ids *in = c->is_r ? &c->r : &c->i;
    bytes d = c->d.same ? c->text : c->d, s = c->s.same ? d : c->s;
    fg_tok_bytes got = {0};
    fg_err err;
    if (fg_tok_decode(t, in->v, in->n, FG_TOK_REPLACE_INVALID, &got, &err))
        report(name, k, c, "decode", err.msg);
    else
        cmp_bytes(name, k, c, "decode", &d, &got);
    got.len = 0;
    if (fg_tok_decode(t, in->v, in->n, FG_TOK_REPLACE_INVALID | FG_TOK_SKIP_SPECIAL, &got, &err))
        report(name, k, c, "decode (skip special)", err.msg);
    else
        cmp_bytes(name, k, c, "decode (skip special)", &s, &got);
    fg_tok_bytes_free(&got);
}

static void run_fixture(const char *name, const char *cls, size_t min_cases)
{
    char path[512];
    size_t len;
    snprintf(path, sizeof path, "%s/%s/cases.txt", FIX, name);
    char *buf = slurp(path, &len);
    jcase *cases;
    size_t n = parse(buf, len, &cases), n_text = 0;
    fg_tok *t = load(name);
    ck_assert_str_eq(fg_tok_class(t), cls);
    bad_count = 0;
    for (int pass = 0; pass < 2; pass++)  /* the second pass runs from the word cache */
        for (size_t k = 0; k < n; k++) {
            if (!cases[k].is_r)
                encode_check(t, name, k, &cases[k]);
            decode_check(t, name, k, &cases[k]);
            n_text += !cases[k].is_r && pass == 0;
        }
    ck_assert_msg(bad_count == 0, "%s: %d mismatches with Hugging Face (first ones above)", name,
                  bad_count);
    ck_assert_uint_ge(n_text, min_cases);
    free_cases(cases, n);
    free(buf);
    fg_tok_free(t);
}

START_TEST(fixture_llama3) { run_fixture("llama3", "bytelevel-bpe", 1000); }
END_TEST
START_TEST(fixture_qwen2) { run_fixture("qwen2", "bytelevel-bpe", 1000); }
END_TEST
START_TEST(fixture_llama2) { run_fixture("llama2", "sentencepiece-bpe", 1000); }
END_TEST
START_TEST(fixture_mistral) { run_fixture("mistral", "sentencepiece-bpe", 1000); }
END_TEST
START_TEST(fixture_spmsplit) { run_fixture("spmsplit", "sentencepiece-bpe", 1000); }
END_TEST

/* The smaller variants: the steps the five above do not use (see the fixture script). */
START_TEST(fixture_variants)
{
    static const char *bl[] = {"v_removed", "v_previous", "v_next_invert", "v_contiguous", "v_gpt2_prefix"};
    static const char *sp[] = {"v_meta_never", "v_meta_always", "v_no_decoder"};
    for (size_t i = 0; i < sizeof bl / sizeof *bl; i++)
        run_fixture(bl[i], "bytelevel-bpe", 200);
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++)
        run_fixture(sp[i], "sentencepiece-bpe", 200);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tokjson");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fixture_llama3);
    tcase_add_test(tc, fixture_qwen2);
    tcase_add_test(tc, fixture_llama2);
    tcase_add_test(tc, fixture_mistral);
    tcase_add_test(tc, fixture_spmsplit);
    tcase_add_test(tc, fixture_variants);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
