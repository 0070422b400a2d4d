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
#include <unistd.h>

#include "testutil.h"
#include "tok_int.h"
#include "tokenizer.h"

#define FIX FG_SOURCE_DIR "/tests/fixtures/tokjson"

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
typedef struct idv { int32_t *v; size_t n; int same; } idv;
typedef struct jcase { bytes text; idv i, p, b, r; bytes d, s; int is_r; } jcase;

static char *cur, *end;

static idv read_ids(char tag)
{
    idv v = {NULL, 0, 0};
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

static void cmp_ids(const char *name, size_t k, const jcase *c, const char *what, const idv *want,
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
    const idv *want[3] = {&c->i, c->p.same ? &c->i : &c->p, &c->b};
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
    const idv *in = c->is_r ? &c->r : &c->i;
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
    char *buf = tu_slurp(path, &len);
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
    static const char *bl[] = {"v_removed", "v_previous", "v_next_invert", "v_contiguous", "v_gpt2_prefix",
                               "v_digits", "v_digits_runs"};
    static const char *sp[] = {"v_meta_never", "v_meta_always", "v_no_decoder"};
    for (size_t i = 0; i < sizeof bl / sizeof *bl; i++)
        run_fixture(bl[i], "bytelevel-bpe", 200);
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++)
        run_fixture(sp[i], "sentencepiece-bpe", 200);
}
END_TEST

/* ---- rules the fixtures cannot show */

static void enc(fg_tok *t, const char *s, unsigned flags, fg_tok_ids *ids)
{
    ids->n = 0;
    ck_assert_int_eq(fg_tok_encode(t, s, strlen(s), flags, ids, NULL), FG_OK);
}

START_TEST(roles_and_templates)
{
    fg_tok *l3 = load("llama3"), *qw = load("qwen2"), *l2 = load("llama2"), *ms = load("spmsplit");
    int32_t bot = fg_tok_lookup(l3, "<|begin_of_text|>", 17);
    ck_assert_int_ge(bot, 1000);
    ck_assert_int_eq(fg_tok_special_id(l3, FG_TOK_BOS), bot);
    ck_assert_int_eq(fg_tok_special_id(l3, FG_TOK_EOS), fg_tok_lookup(l3, "<|end_of_text|>", 15));
    ck_assert_int_eq(fg_tok_is_special(l3, bot), 1);
    ck_assert_int_eq(fg_tok_adds_bos(l3), 1);
    ck_assert_int_eq(fg_tok_special_id(qw, FG_TOK_BOS), -1);  /* "bos_token": null */
    ck_assert_int_eq(fg_tok_special_id(qw, FG_TOK_EOS), fg_tok_lookup(qw, "<|endoftext|>", 13));
    ck_assert_int_eq(fg_tok_special_id(qw, FG_TOK_PAD), fg_tok_special_id(qw, FG_TOK_EOS));
    ck_assert_int_eq(fg_tok_adds_bos(qw), 0);
    ck_assert_int_eq(fg_tok_special_id(l2, FG_TOK_BOS), 1);
    ck_assert_int_eq(fg_tok_special_id(l2, FG_TOK_EOS), 2);
    ck_assert_int_eq(fg_tok_special_id(l2, FG_TOK_UNK), 0);
    ck_assert_int_eq(fg_tok_special_id(ms, FG_TOK_BOS), -1);  /* template "$A </s>" */
    ck_assert_int_eq(fg_tok_adds_bos(ms), 1);
    fg_tok_ids ids = {0};
    enc(ms, "x", FG_TOK_ADD_BOS, &ids);
    ck_assert_int_eq(ids.ids[ids.n - 1], 2);
    /* bytes of single tokens: the decoder chain without its context rules */
    const char *b;
    size_t n;
    int32_t the = fg_tok_lookup(l2, "\xe2\x96\x81the", 6), nl = fg_tok_lookup(l2, "<0x0A>", 6);
    ck_assert_int_ge(the, 0);
    ck_assert_int_eq(fg_tok_token_bytes(l2, the, &b, &n), FG_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(b, " the", 4), 0);
    ck_assert_int_eq(fg_tok_token_bytes(l2, nl, &b, &n), FG_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(b[0], '\n');
    ck_assert_int_eq(fg_tok_token_bytes(l3, fg_tok_lookup(l3, "\xc4\xa0the", 5), &b, &n), FG_OK);
    ck_assert_int_eq(memcmp(b, " the", 4), 0);
    /* a special token added at run time gets the next id, is matched, and decodes */
    int32_t id;
    ck_assert_int_eq(fg_tok_add_special(l2, "<|new|>", 7, &id, NULL), FG_OK);
    ck_assert_int_eq(id, fg_tok_vocab_size(l2) - 1);
    enc(l2, "a<|new|>b", FG_TOK_SPECIAL, &ids);
    ck_assert_uint_ge(ids.n, 3);
    ck_assert_int_eq(ids.ids[ids.n - 2], id);
    fg_tok_bytes out = {0};
    ck_assert_int_eq(fg_tok_decode(l2, ids.ids, ids.n, 0, &out, NULL), FG_OK);
    ck_assert_uint_eq(out.len, 10);  /* the normalizer prepends U+2581 to "b" too (legacy Llama 2) */
    ck_assert_int_eq(memcmp(out.data, "a<|new|> b", 10), 0);
    fg_tok_bytes_free(&out);
    fg_tok_ids_free(&ids);
    fg_tok_free(l3);
    fg_tok_free(qw);
    fg_tok_free(l2);
    fg_tok_free(ms);
}
END_TEST

/* Issue 38: ids past the vocabulary (embedding rows beyond the tokens: Qwen2.5, Phi-3, OLMo 2)
 * decode as nothing, as in tokenizers, where they are dropped before the decoder chain: so an
 * unknown first id leaves the next token first (Strip / Metaspace apply to it). Negative ids
 * are refused, naming the index. */
static void dec_eq(fg_tok *t, const int32_t *ids, size_t n, unsigned flags, const char *want)
{
    fg_tok_bytes out = {0};
    fg_err err;
    ck_assert_msg(fg_tok_decode(t, ids, n, flags, &out, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(out.len == strlen(want) && (out.len == 0 || memcmp(out.data, want, out.len) == 0),
                  "decode: got \"%.*s\", want \"%s\"", (int)out.len, out.data ? out.data : "", want);
    fg_tok_bytes_free(&out);
}

START_TEST(ids_past_vocab)
{
    fg_tok *l2 = load("llama2"), *l3 = load("llama3");
    int32_t v2 = fg_tok_vocab_size(l2), v3 = fg_tok_vocab_size(l3);
    int32_t the2 = fg_tok_lookup(l2, "\xe2\x96\x81the", 6), the3 = fg_tok_lookup(l3, "\xc4\xa0the", 5);
    int32_t a[3] = {v2, the2, INT32_MAX}, b[3] = {the2, v2 + 271, the2}, c[2] = {the3, v3 + 5};
    dec_eq(l2, a, 3, 0, "the");
    dec_eq(l2, a, 3, FG_TOK_SKIP_SPECIAL | FG_TOK_REPLACE_INVALID, "the");
    dec_eq(l2, b, 3, 0, "the the");
    dec_eq(l2, a, 1, 0, "");
    dec_eq(l3, c, 2, 0, " the");
    dec_eq(l3, c, 2, FG_TOK_REPLACE_INVALID, " the");
    const char *p;
    size_t n = 99;
    ck_assert_int_eq(fg_tok_token_bytes(l3, v3 + 5, &p, &n), FG_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(fg_tok_token_bytes(l2, -3, &p, &n), FG_ERR_TOK_BAD_ID);
    ck_assert_int_eq(fg_tok_is_special(l2, v2 + 1), 0);
    fg_tok_bytes out = {0};
    fg_err err;
    c[1] = -7;
    ck_assert_int_eq(fg_tok_decode(l3, c, 2, 0, &out, &err), FG_ERR_TOK_BAD_ID);
    ck_assert_ptr_nonnull(strstr(err.msg, "ids[1] = -7"));
    ck_assert_uint_eq(out.len, 0);
    fg_tok_free(l2);
    fg_tok_free(l3);
}
END_TEST

/* add_bos_token / add_eos_token in tokenizer_config.json replace the template (transformers'
 * update_post_processor). */
START_TEST(config_overrides_template)
{
    size_t jl;
    char *js = tu_slurp(FIX "/llama2/tokenizer.json", &jl);
    const char *cfg[3] = {"{\"add_bos_token\": false, \"bos_token\": \"<s>\"}",
                          "{\"add_eos_token\": true, \"eos_token\": \"</s>\"}",
                          "{\"add_eos_token\": true}"};
    fg_tok *t;
    fg_tok_ids ids = {0};
    fg_err err;
    fg_tok_json_files f = {js, jl, NULL, cfg[0], strlen(cfg[0]), NULL, NULL, 0, NULL};
    ck_assert_msg(fg_tok_load_json_mem(&f, &t, &err) == FG_OK, "%s", err.msg);
    enc(t, "Anne", FG_TOK_ADD_BOS, &ids);
    ck_assert_int_ne(ids.ids[0], 1);
    ck_assert_int_eq(fg_tok_adds_bos(t), 0);
    fg_tok_free(t);
    f.config_json = cfg[1];
    f.config_len = strlen(cfg[1]);
    ck_assert_msg(fg_tok_load_json_mem(&f, &t, &err) == FG_OK, "%s", err.msg);
    enc(t, "Anne", FG_TOK_ADD_BOS, &ids);
    ck_assert_int_eq(ids.ids[0], 1);  /* add_bos_token absent: the template's BOS stays */
    ck_assert_int_eq(ids.ids[ids.n - 1], 2);
    fg_tok_free(t);
    f.config_json = cfg[2];
    f.config_len = strlen(cfg[2]);
    ck_assert_int_eq(fg_tok_load_json_mem(&f, &t, &err), FG_ERR_TOK_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "add_eos_token is true but no eos_token"));
    fg_tok_ids_free(&ids);
    free(js);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = tu_slurp(from, &n);
    FILE *f = fopen(to, "wb");
    ck_assert(f && fwrite(b, 1, n, f) == n);
    fclose(f);
    free(b);
}

/* fg_tok_load_dir prefers tokenizer.json; the GPT-2 files stay loadable by name. */
START_TEST(load_dir_choice)
{
    char dir[] = "/tmp/fg_tokjson_XXXXXX", p[4][256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *names[4] = {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++)
        snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    copy_file(FG_SOURCE_DIR "/data/gpt2-tokenizer/vocab.json", p[0]);
    copy_file(FG_SOURCE_DIR "/data/gpt2-tokenizer/merges.txt", p[1]);
    fg_tok *t;
    fg_err err;
    ck_assert_int_eq(fg_tok_load_dir(dir, &t, &err), FG_OK);
    ck_assert_str_eq(fg_tok_class(t), "gpt2-bpe");
    fg_tok_free(t);
    copy_file(FIX "/llama3/tokenizer.json", p[2]);
    copy_file(FIX "/llama3/tokenizer_config.json", p[3]);
    ck_assert_msg(fg_tok_load_dir(dir, &t, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(fg_tok_class(t), "bytelevel-bpe");
    ck_assert_int_ge(fg_tok_special_id(t, FG_TOK_EOS), 0);  /* the config was read too */
    fg_tok_free(t);
    ck_assert_int_eq(fg_tok_load_files(p[0], p[1], NULL, NULL, &t, &err), FG_OK);
    ck_assert_str_eq(fg_tok_class(t), "gpt2-bpe");
    fg_tok_free(t);
    ck_assert_int_eq(fg_tok_load_json_dir("/nonexistent-fg-dir", &t, &err), FG_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-fg-dir/tokenizer.json"));
    for (int i = 0; i < 4; i++)
        unlink(p[i]);
    rmdir(dir);
}
END_TEST

/* Invalid UTF-8 (no reference exists): every byte is kept; byte-level and byte-fallback
 * tokenizers round-trip arbitrary bytes; the replacing decode is valid UTF-8. */
START_TEST(invalid_utf8)
{
    fg_tok *l3 = load("llama3"), *l2 = load("llama2"), *sp = load("spmsplit");
    unsigned char buf[700];
    for (int r = 0; r < 1500; r++) {
        size_t n = (size_t)(r * 37) % sizeof buf;
        tu_fill(buf, n, (uint64_t)r + 99);
        for (size_t i = 0; i < n; i++)  /* no U+2581 (E2 96 81): it decodes as a space */
            if (buf[i] == 0xE2)
                buf[i] = 0xE3;
        fg_tok *ts[3] = {l3, l2, sp};
        for (int k = 0; k < 3; k++) {
            fg_tok_ids ids = {0};
            fg_tok_bytes back = {0};
            ck_assert_int_eq(fg_tok_encode(ts[k], buf, n, 0, &ids, NULL), FG_OK);
            ck_assert_int_eq(fg_tok_decode(ts[k], ids.ids, ids.n, k == 2 ? FG_TOK_REPLACE_INVALID : 0,
                                           &back, NULL), FG_OK);
            if (k < 2)
                ck_assert_msg(back.len == n && (n == 0 || memcmp(back.data, buf, n) == 0),
                              "%s: round trip of %zu random bytes gave %zu", fg_tok_class(ts[k]), n, back.len);
            for (size_t i = 0; k == 2 && i < back.len;) {  /* spmsplit has no byte fallback */
                uint32_t cp;
                size_t w = tok_utf8_next((const unsigned char *)back.data + i, back.len - i, &cp);
                if (cp == UINT32_MAX)
                    ck_abort_msg("replacing decode left invalid UTF-8 at %zu", i);
                i += w;
            }
            fg_tok_ids_free(&ids);
            fg_tok_bytes_free(&back);
        }
    }
    /* a lone invalid byte: its <0xNN> token; decoded raw, or as U+FFFD when asked */
    fg_tok_ids ids = {0};
    fg_tok_bytes out = {0};
    ck_assert_int_eq(fg_tok_encode(l2, "\xff", 1, 0, &ids, NULL), FG_OK);
    ck_assert_int_eq(ids.ids[ids.n - 1], fg_tok_lookup(l2, "<0xFF>", 6));
    ck_assert_int_eq(fg_tok_decode(l2, ids.ids, ids.n, FG_TOK_REPLACE_INVALID, &out, NULL), FG_OK);
    ck_assert_uint_eq(out.len, 3);
    ck_assert_int_eq(memcmp(out.data, "\xef\xbf\xbd", 3), 0);
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&out);
    fg_tok_free(l3);
    fg_tok_free(l2);
    fg_tok_free(sp);
}
END_TEST

/* Cutting a long SentencePiece-style piece into words (sp_cut) gives the ids of merging it
 * whole, on a whole novel; and the check that allows it refuses a merge across U+2581. */
START_TEST(sp_cut_exact)
{
    size_t len;
    char *text = tu_slurp(FG_SOURCE_DIR "/data/austen/persuasion.txt", &len);
    static const char *names[2] = {"llama2", "mistral"};
    for (int k = 0; k < 2; k++) {
        fg_tok *t = load(names[k]);
        fg_tok_ids a = {0}, b = {0};
        ck_assert_int_eq(t->sp_cut, 1);
        ck_assert_int_eq(fg_tok_encode(t, text, len / 4, FG_TOK_SPECIAL, &a, NULL), FG_OK);
        t->sp_cut = 0;
        tok_wcache_free(&t->cache);
        ck_assert_int_eq(fg_tok_encode(t, text, len / 4, FG_TOK_SPECIAL, &b, NULL), FG_OK);
        ck_assert_uint_eq(a.n, b.n);
        ck_assert_int_eq(memcmp(a.ids, b.ids, a.n * sizeof *a.ids), 0);
        fg_tok_ids_free(&a);
        fg_tok_ids_free(&b);
        fg_tok_free(t);
    }
    free(text);
    const char *cross = "{\"model\": {\"vocab\": {\"a\": 0, \"\xe2\x96\x81\": 1, \"a\xe2\x96\x81\": 2}, "
                        "\"merges\": [\"a \xe2\x96\x81\"]}}";
    const char *runs = "{\"model\": {\"vocab\": {\"a\": 0, \"\xe2\x96\x81\": 1, \"\xe2\x96\x81\xe2\x96\x81\": 2}, "
                       "\"merges\": [\"\xe2\x96\x81 \xe2\x96\x81\"]}}";
    fg_tok *t;
    fg_tok_json_files f = {cross, strlen(cross), NULL, NULL, 0, NULL, NULL, 0, NULL};
    ck_assert_int_eq(fg_tok_load_json_mem(&f, &t, NULL), FG_OK);
    ck_assert_int_eq(t->sp_cut, 0);
    fg_tok_free(t);
    f.tokenizer_json = runs;
    f.tokenizer_len = strlen(runs);
    ck_assert_int_eq(fg_tok_load_json_mem(&f, &t, NULL), FG_OK);
    ck_assert_int_eq(t->sp_cut, 1);
    fg_tok_free(t);
}
END_TEST

/* 256 KB runs of one class (one regex match or one piece each) through every pipeline:
 * PCRE2 must not hit its limits, byte-level ones round-trip. */
START_TEST(long_runs)
{
    static const char *names[] = {"llama3", "qwen2", "llama2", "mistral", "spmsplit", "v_previous",
                                  "v_contiguous", "v_gpt2_prefix", "v_meta_always"};
    static const char *unit[] = {"x", " ", "\n", "7", " \n", "\xc3\xa9", "!", "\t ", "e\xcc\x81"};
    size_t n = 1 << 18;
    char *s = malloc(n + 8);
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        fg_tok *t = load(names[k]);
        for (size_t u = 0; u < sizeof unit / sizeof *unit; u++) {
            size_t ul = strlen(unit[u]), len = 0;
            while (len + ul <= n) {
                memcpy(s + len, unit[u], ul);
                len += ul;
            }
            fg_tok_ids ids = {0};
            fg_tok_bytes back = {0};
            fg_err err;
            ck_assert_msg(fg_tok_encode(t, s, len, FG_TOK_SPECIAL, &ids, &err) == FG_OK, "%s: %s",
                          names[k], err.msg);
            ck_assert_int_eq(fg_tok_decode(t, ids.ids, ids.n, 0, &back, &err), FG_OK);
            if (k == 0)
                ck_assert_msg(back.len == len && memcmp(back.data, s, len) == 0, "llama3: unit %zu", u);
            fg_tok_ids_free(&ids);
            fg_tok_bytes_free(&back);
        }
        fg_tok_free(t);
    }
    free(s);
}
END_TEST

/* ---- load errors: exact code, one line naming the file and the JSON path */

static void expect_err(const char *json, const char *config, int code, const char *needle)
{
    fg_tok *t = (fg_tok *)1;
    fg_err err;
    fg_err_clear(&err);
    fg_tok_json_files f = {json, strlen(json), NULL, config, config ? strlen(config) : 0, NULL,
                           NULL, 0, NULL};
    int rc = fg_tok_load_json_mem(&f, &t, &err);
    ck_assert_msg(rc == code, "want %d (%s), got %d: %s", code, fg_strerror(code), rc, err.msg);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, needle), "message \"%s\" lacks \"%s\"", err.msg, needle);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

#define MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"<s>\": 3}, \"merges\": [\"a b\"]}"

START_TEST(load_errors)
{
    fg_tok *t;
    fg_err err;
    const char *ok = "{" MODEL ", \"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": true}]}";
    fg_tok_json_files f = {ok, strlen(ok), NULL, NULL, 0, NULL, NULL, 0, NULL};
    ck_assert_msg(fg_tok_load_json_mem(&f, &t, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(fg_tok_class(t), "sentencepiece-bpe");
    fg_tok_ids ids = {0};
    enc(t, "abba<s>", FG_TOK_SPECIAL, &ids);  /* no unk, no fallback: unknown chars vanish */
    ck_assert_uint_eq(ids.n, 4);
    ck_assert_int_eq(ids.ids[0], 2);
    ck_assert_int_eq(ids.ids[3], 3);
    fg_tok_ids_free(&ids);
    fg_tok_free(t);
    expect_err("{\"model\": ", NULL, FG_ERR_TOK_JSON, "tokenizer.json:1:");
    expect_err("[]", NULL, FG_ERR_TOK_CONFIG, "tokenizer.json: expected a JSON object");
    expect_err("{}", NULL, FG_ERR_TOK_CONFIG, "no \"model\"");
    expect_err("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", NULL, FG_ERR_UNSUPPORTED, "model.type");
    expect_err("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", NULL, FG_ERR_TOK_VOCAB, "model.vocab");
    expect_err("{\"model\": {\"vocab\": {\"a\": -1}, \"merges\": []}}", NULL, FG_ERR_TOK_VOCAB, "token \"a\"");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", NULL, FG_ERR_TOK_VOCAB, "share id 0");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", NULL, FG_ERR_TOK_MERGES,
               "model.merges[0]: token \"ab\" is not in the vocabulary");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b c\"]}}", NULL, FG_ERR_TOK_MERGES,
               "model.merges[0]: expected \"a b\"");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}", NULL, FG_ERR_TOK_MERGES, "model.merges[0]");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": {}}}", NULL, FG_ERR_TOK_MERGES, "model.merges");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}}", NULL, FG_ERR_UNSUPPORTED, "dropout");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}", NULL, FG_ERR_TOK_VOCAB,
               "model.unk_token");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [], \"byte_fallback\": 1}}", NULL, FG_ERR_TOK_CONFIG,
               "model.byte_fallback: expected a boolean");
    expect_err("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [], \"continuing_subword_prefix\": \"##\"}}", NULL,
               FG_ERR_UNSUPPORTED, "continuing_subword_prefix");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}}", NULL, FG_ERR_UNSUPPORTED,
               "pre_tokenizer: pre-tokenizer type \"WhitespaceSplit\"");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Digits\", \"individual_digits\": 1}}", NULL,
               FG_ERR_TOK_CONFIG, "pre_tokenizer.individual_digits: expected a boolean");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
               "{\"type\": \"Metaspace\", \"replacement\": \"_\"}]}}", NULL, FG_ERR_UNSUPPORTED, "pretokenizers[1]");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, "
               "\"behavior\": \"Isolated\", \"invert\": false}}", NULL, FG_ERR_TOK_CONFIG, "pattern does not compile");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
               "\"behavior\": \"Sideways\", \"invert\": false}}", NULL, FG_ERR_TOK_CONFIG, "behavior");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": \"a\", \"behavior\": \"Isolated\"}}",
               NULL, FG_ERR_TOK_CONFIG, "pattern: expected");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"ab\"}}", NULL,
               FG_ERR_TOK_CONFIG, "replacement: expected a one-character string");
    expect_err("{" MODEL ", \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"x\"}}",
               NULL, FG_ERR_TOK_CONFIG, "prepend_scheme");
    expect_err("{" MODEL ", \"normalizer\": {\"type\": \"Lowercase\"}}", NULL, FG_ERR_UNSUPPORTED, "Lowercase");
    expect_err("{" MODEL ", \"normalizer\": {\"type\": \"Prepend\"}}", NULL, FG_ERR_TOK_CONFIG, "normalizer: prepend");
    expect_err("{" MODEL ", \"decoder\": {\"type\": \"CTC\"}}", NULL, FG_ERR_UNSUPPORTED, "decoder type \"CTC\"");
    expect_err("{" MODEL ", \"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}}", NULL,
               FG_ERR_TOK_CONFIG, "decoder");
    expect_err("{" MODEL ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
               "[{\"SpecialToken\": {\"id\": \"<x>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
               "\"special_tokens\": {}}}", NULL, FG_ERR_TOK_CONFIG, "post_processor: special_tokens");
    expect_err("{" MODEL ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [], \"special_tokens\": {}}}",
               NULL, FG_ERR_TOK_CONFIG, "no Sequence A");
    expect_err("{" MODEL ", \"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"x\", 99], \"cls\": [\"<s>\", 3]}}",
               NULL, FG_ERR_TOK_CONFIG, "cls/sep");
    expect_err("{" MODEL ", \"post_processor\": {\"type\": \"Nope\"}}", NULL, FG_ERR_UNSUPPORTED, "Nope");
    expect_err("{" MODEL ", \"added_tokens\": [{\"id\": 9}]}", NULL, FG_ERR_TOK_CONFIG, "added_tokens[0]");
    expect_err("{" MODEL ", \"added_tokens\": [{\"content\": \"x\", \"lstrip\": \"yes\"}]}", NULL, FG_ERR_TOK_CONFIG,
               "added_tokens[0].lstrip");
    expect_err(ok, "{\"bos_token\": 5}", FG_ERR_TOK_CONFIG, "\"bos_token\"");
    expect_err(ok, "{\"add_bos_token\": true}", FG_ERR_TOK_CONFIG, "add_bos_token is true but no bos_token");
    expect_err(ok, "{\"add_bos_token\": ", FG_ERR_TOK_JSON, "tokenizer_config.json:1:");
}
END_TEST

/* 60,000 added tokens sharing a prefix: loading, fg_tok_lookup and matching them in text take
 * time bounded by the token length, not the token count (each was a scan of every added token:
 * about 20 s of loading for 80,000); the longest token at a position wins, a repeated content
 * keeps its first id. The tcase's 20 s timeout catches a return of the scans. */
START_TEST(many_added_tokens)
{
    enum { N = 60000 };
    size_t cap = (size_t)N * 64 + 4096, len = 0;
    char *js = malloc(cap);
    len += (size_t)snprintf(js + len, cap - len, "{" MODEL ", \"added_tokens\": [");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(js + len, cap - len, "{\"content\": \"<|x%07d|>\", \"special\": "
                                "true}, ", i);
    len += (size_t)snprintf(js + len, cap - len, "{\"content\": \"<|x0000001|>ab\", \"special\": "
                            "true}, {\"content\": \"<|x0000002|>\", \"special\": false}]}");
    fg_tok *t;
    fg_err err;
    fg_tok_json_files f = {js, len, NULL, NULL, 0, NULL, NULL, 0, NULL};
    ck_assert_msg(fg_tok_load_json_mem(&f, &t, &err) == FG_OK, "%s", err.msg);
    int32_t x1 = fg_tok_lookup(t, "<|x0000001|>", 12), x2 = fg_tok_lookup(t, "<|x0000002|>", 12);
    int32_t x1ab = fg_tok_lookup(t, "<|x0000001|>ab", 14), last = fg_tok_lookup(t, "<|x0059999|>", 12);
    ck_assert_int_ge(x1, 4);
    ck_assert_int_eq(x2, x1 + 1); /* the repeat kept the first id */
    ck_assert_int_eq(last, x1 + N - 2);
    ck_assert_int_eq(x1ab, x1 + N - 1);
    fg_tok_ids ids = {0};
    enc(t, "<|x0000001|>ab<|x0000001|>a<|x0059999|>", FG_TOK_SPECIAL, &ids);
    ck_assert_uint_eq(ids.n, 4);
    ck_assert_int_eq(ids.ids[0], x1ab); /* the longest token at a position */
    ck_assert_int_eq(ids.ids[1], x1);
    ck_assert_int_eq(ids.ids[2], 0);
    ck_assert_int_eq(ids.ids[3], last);
    size_t n = 200000; /* every byte a candidate start, none a token */
    char *lt = malloc(n + 1);
    memset(lt, '<', n);
    lt[n] = '\0';
    ids.n = 0;
    ck_assert_int_eq(fg_tok_encode(t, lt, n, FG_TOK_SPECIAL, &ids, NULL), FG_OK);
    for (size_t i = 0; i < ids.n; i++)
        ck_assert_int_lt(ids.ids[i], x1);
    fg_tok_ids_free(&ids);
    fg_tok_free(t);
    free(lt);
    /* one added token over 4096 bytes is refused by name (the text scan would cost text length x
     * its length) */
    len = (size_t)snprintf(js, cap, "{" MODEL ", \"added_tokens\": [{\"content\": \"<ok>\"}, "
                           "{\"content\": \"");
    memset(js + len, 'a', 4097);
    len += 4097;
    len += (size_t)snprintf(js + len, cap - len, "\"}]}");
    fg_tok_json_files g = {js, len, NULL, NULL, 0, NULL, NULL, 0, NULL};
    ck_assert_int_eq(fg_tok_load_json_mem(&g, &t, &err), FG_ERR_LIMIT);
    ck_assert_msg(strstr(err.msg, "added_tokens[1]: content over 4096 bytes"), "%s", err.msg);
    free(js);
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
    TCase *tr = tcase_create("rules");
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, roles_and_templates);
    tcase_add_test(tr, config_overrides_template);
    tcase_add_test(tr, ids_past_vocab);
    tcase_add_test(tr, load_dir_choice);
    tcase_add_test(tr, invalid_utf8);
    tcase_add_test(tr, sp_cut_exact);
    tcase_add_test(tr, long_runs);
    tcase_add_test(tr, load_errors);
    suite_add_tcase(s, tr);
    TCase *tm = tcase_create("many");
    tcase_set_timeout(tm, 20);
    tcase_add_test(tm, many_added_tokens);
    suite_add_tcase(s, tm);
    return s;
}

int main(void) { return tu_run(suite()); }
