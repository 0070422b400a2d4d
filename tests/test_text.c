/* test_text.c - the GPT-2 BPE tokenizer against Hugging Face `tokenizers` reference ids
 * (tests/fixtures/tokenizer/, made by make_tokenizer_fixtures.py), the pre-tokenizer's class of
 * every assigned code point, byte round trips (random and invalid UTF-8), merge-order rules on
 * tiny vocabularies, OPT-style renumbered vocabularies with config files, and one test per
 * load error asserting its code and the file/line/key in the message. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "testutil.h"
#include "tok_int.h"
#include "tokenizer.h"

#define GPT2_DIR FG_SOURCE_DIR "/data/gpt2-tokenizer"
#define FIX_DIR FG_SOURCE_DIR "/tests/fixtures/tokenizer"

static fg_tok *gpt2(void)
{
    fg_tok *t;
    fg_err err;
    ck_assert_msg(fg_tok_load_dir(GPT2_DIR, &t, &err) == FG_OK, "%s", err.msg);
    return t;
}

/* ---- fixture cases */

typedef struct fcase { const char *s; size_t len; int32_t *ids; size_t n; } fcase;

/* Parse a case file (format in make_tokenizer_fixtures.py); returns the case count. */
static size_t parse_cases(char *buf, size_t len, fcase **out)
{
    size_t n = 0, cap = 0, pos = 0;
    fcase *v = NULL;
    while (pos < len && buf[pos] == '#')
        pos = (size_t)(strchr(buf + pos, '\n') - buf) + 1;
    while (pos < len) {
        char *p = buf + pos;
        unsigned long nb = strtoul(p, &p, 10);
        ck_assert_int_eq(*p, ' ');
        unsigned long ni = strtoul(p + 1, &p, 10);
        ck_assert_int_eq(*p, '\n');
        pos = (size_t)(p - buf) + 1;
        if (n == cap)
            v = realloc(v, (cap = cap ? 2 * cap : 1024) * sizeof *v);
        v[n] = (fcase){buf + pos, nb, malloc((ni + 1) * sizeof(int32_t)), ni};
        pos += nb;
        ck_assert_int_eq(buf[pos], '\n');
        pos++;
        p = buf + pos;
        for (size_t i = 0; i < ni; i++)
            v[n].ids[i] = (int32_t)strtol(p, &p, 10);
        ck_assert_int_eq(*p, '\n');
        pos = (size_t)(p - buf) + 1;
        n++;
    }
    *out = v;
    return n;
}

static void check_case(fg_tok *t, const fcase *c, size_t k, unsigned flags)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes back = {0};
    fg_err err;
    char q[200];
    ck_assert_int_eq(fg_tok_encode(t, c->s, c->len, flags, &ids, &err), FG_OK);
    size_t i = 0;
    while (i < ids.n && i < c->n && ids.ids[i] == c->ids[i])
        i++;
    ck_assert_msg(i == ids.n && i == c->n,
                  "case %zu \"%s\" (%zu bytes): ids differ at %zu: fg %d, HF %d (fg %zu ids, HF %zu)",
                  k, tok_quote(q, sizeof q, c->s, c->len), c->len, i, i < ids.n ? ids.ids[i] : -1,
                  i < c->n ? c->ids[i] : -1, ids.n, c->n);
    ck_assert_int_eq(fg_tok_decode(t, ids.ids, ids.n, 0, &back, &err), FG_OK);
    ck_assert_msg(back.len == c->len && (c->len == 0 || memcmp(back.data, c->s, c->len) == 0),
                  "case %zu: decode(encode(s)) != s", k);
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&back);
}

static void run_fixture(const char *file, int special)
{
    size_t len;
    char *buf = tu_slurp(file, &len);
    fcase *cases;
    size_t n = parse_cases(buf, len, &cases);
    fg_tok *t = gpt2();
    if (special)
        ck_assert_int_eq(fg_tok_add_special(t, "<|endoftext|>", 13, NULL, NULL), FG_OK);
    for (int pass = 0; pass < 2; pass++)  /* the second pass runs from the word cache */
        for (size_t k = 0; k < n; k++)
            check_case(t, &cases[k], k, special ? FG_TOK_SPECIAL : 0);
    if (!special)
        ck_assert_uint_ge(n, 1000);
    for (size_t k = 0; k < n; k++)
        free(cases[k].ids);
    free(cases);
    free(buf);
    fg_tok_free(t);
}

START_TEST(fixture_cases) { run_fixture(FIX_DIR "/gpt2_cases.txt", 0); }
END_TEST

START_TEST(fixture_special) { run_fixture(FIX_DIR "/gpt2_special.txt", 1); }
END_TEST

/* ---- pre-tokenizer classes of every assigned code point */

static size_t utf8_put(uint32_t cp, unsigned char *b)
{
    if (cp < 0x80) { b[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        b[2] = (unsigned char)(0x80 | (cp & 63)); return 3;
    }
    b[0] = (unsigned char)(0xF0 | cp >> 18); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)); b[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

static int one_piece(fg_tok *t, char first, uint32_t cp)
{
    unsigned char b[5] = {(unsigned char)first};
    size_t n = 1 + utf8_put(cp, b + 1), end;
    if (tok_next_piece(t, b, n, 0, &end) != FG_OK)  /* no ck_assert in hot loops: each one */
        ck_abort_msg("tok_next_piece failed");     /* logs a location in fork mode */
    return end == n;
}

START_TEST(codepoint_classes)
{
    size_t len;
    char *buf = tu_slurp(FIX_DIR "/gpt2_classes.txt", &len);
    fg_tok *t = gpt2();
    size_t checked = 0, bad = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned a, z;
        char k;
        if (line[0] == '#')
            continue;
        ck_assert_int_eq(sscanf(line, "%x %x %c", &a, &z, &k), 3);
        for (uint32_t cp = a; cp <= z; cp++, checked++) {
            char got = one_piece(t, 'a', cp) ? 'L' : one_piece(t, '1', cp) ? 'N'
                     : one_piece(t, '!', cp) ? 'O' : 'S';
            if (got != k && bad++ < 5)
                fprintf(stderr, "U+%04X: fg %c, HF %c\n", cp, got, k);
        }
    }
    ck_assert_uint_gt(checked, 200000);
    ck_assert_msg(bad == 0, "%zu of %zu code points classified differently", bad, checked);
    free(buf);
    fg_tok_free(t);
}
END_TEST

/* ---- round trips */

static void roundtrip(fg_tok *t, const void *s, size_t n)
{
    fg_tok_ids ids = {0};
    fg_tok_bytes back = {0};
    ck_assert_int_eq(fg_tok_encode(t, s, n, 0, &ids, NULL), FG_OK);
    ck_assert_int_eq(fg_tok_decode(t, ids.ids, ids.n, 0, &back, NULL), FG_OK);
    ck_assert_msg(back.len == n && (n == 0 || memcmp(back.data, s, n) == 0),
                  "round trip of %zu bytes gave %zu bytes", n, back.len);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= fg_tok_vocab_size(t))
            ck_abort_msg("id %d out of range", ids.ids[i]);
    fg_tok_ids_free(&ids);
    fg_tok_bytes_free(&back);
}

START_TEST(random_bytes_roundtrip)
{
    fg_tok *t = gpt2();
    static const char *frags[] = {"a", " the", "'s", "1", "\xc3\xa9", "\xe4\xb8\xad",
                                  "\xf0\x9f\x98\x80", " ", "\n", "\t", "\xe2\x80\xa8",
                                  "\xc3", "\x80", "\xff", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                  "\xc0\xaf", "\xe2\x82", "\xf0\x9f\x98"};
    unsigned char buf[4096];
    for (int r = 0; r < 3000; r++) {
        size_t n = 0, want = (size_t)(r % 97) * 13 % 600;
        if (r % 2 == 0) {  /* raw random bytes */
            tu_fill(buf, want, (uint64_t)r);
            n = want;
        } else {  /* fragments: valid and invalid UTF-8, white space, contractions */
            unsigned char pick[600];
            tu_fill(pick, sizeof pick, (uint64_t)r);
            for (size_t i = 0; i < want / 3; i++) {
                const char *f = frags[pick[i] % (sizeof frags / sizeof *frags)];
                memcpy(buf + n, f, strlen(f));
                n += strlen(f);
            }
        }
        roundtrip(t, buf, n);
    }
    for (int b = 0; b < 256; b++) {  /* every single byte is its own token */
        unsigned char c = (unsigned char)b;
        fg_tok_ids ids = {0};
        ck_assert_int_eq(fg_tok_encode(t, &c, 1, 0, &ids, NULL), FG_OK);
        ck_assert_uint_eq(ids.n, 1);
        ck_assert_int_eq(ids.ids[0], t->byte_id[b]);
        fg_tok_ids_free(&ids);
    }
    fg_tok_free(t);
}
END_TEST

START_TEST(long_inputs)
{
    fg_tok *t = gpt2();
    size_t n = 1 << 20;
    char *s = malloc(n);
    memset(s, 'x', n);  /* one megabyte-long piece: the heap merge path */
    roundtrip(t, s, n);
    memset(s, ' ', n);  /* white space run */
    roundtrip(t, s, n);
    for (size_t i = 0; i < n; i++)  /* invalid UTF-8 only: one long gap piece */
        s[i] = (char)(0x80 | (i % 64));
    roundtrip(t, s, n);
    size_t alen;
    char *austen = tu_slurp(FG_SOURCE_DIR "/data/austen/persuasion.txt", &alen);
    roundtrip(t, austen, alen);
    free(austen);
    free(s);
    fg_tok_free(t);
}
END_TEST

/* Invalid bytes split pieces; valid text around them encodes as it would alone. */
START_TEST(invalid_utf8_pieces)
{
    fg_tok *t = gpt2();
    fg_tok_ids a = {0}, b = {0};
    ck_assert_int_eq(fg_tok_encode(t, "Hello\xff world", 12, 0, &a, NULL), FG_OK);
    ck_assert_int_eq(fg_tok_encode(t, "Hello", 5, 0, &b, NULL), FG_OK);
    ck_assert_int_eq(fg_tok_encode(t, "\xff", 1, 0, &b, NULL), FG_OK);
    ck_assert_int_eq(fg_tok_encode(t, " world", 6, 0, &b, NULL), FG_OK);
    ck_assert_uint_eq(a.n, b.n);
    ck_assert_int_eq(memcmp(a.ids, b.ids, a.n * sizeof *a.ids), 0);
    fg_tok_ids_free(&a);
    fg_tok_ids_free(&b);
    fg_tok_free(t);
}
END_TEST

/* ---- the GPT-2 files as such */

START_TEST(gpt2_basics)
{
    fg_tok *t = gpt2(), *m;
    fg_err err;
    ck_assert_int_eq(fg_tok_vocab_size(t), 50257);
    ck_assert_uint_eq(fg_tok_merge_count(t), 50000);
    ck_assert_int_eq(fg_tok_lookup(t, "\xc4\xa0the", 5), 262);  /* "Ġthe" */
    ck_assert_int_eq(fg_tok_lookup(t, "nope-not-a-token", 16), -1);
    const char *b;
    size_t n;
    ck_assert_int_eq(fg_tok_token_bytes(t, 262, &b, &n), FG_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(b, " the", 4), 0);
    /* an id past the vocabulary is nothing (issue 38: embedding rows beyond the tokens) */
    ck_assert_int_eq(fg_tok_token_bytes(t, 50257, &b, &n), FG_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(fg_tok_token_bytes(t, INT32_MAX, &b, &n), FG_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(fg_tok_token_bytes(t, -1, &b, &n), FG_ERR_TOK_BAD_ID);
    ck_assert_int_eq(fg_tok_special_id(t, FG_TOK_BOS), -1);
    ck_assert_int_eq(fg_tok_adds_bos(t), 0);
    fg_tok_ids ids = {0};
    ck_assert_int_eq(fg_tok_encode(t, "Hello world", 11, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &ids, NULL), 0);
    ck_assert_uint_eq(ids.n, 2);
    ck_assert_int_eq(ids.ids[0], 15496);
    ck_assert_int_eq(ids.ids[1], 995);
    /* loading from memory gives the same tokenizer as from files */
    size_t vl, ml;
    char *v = tu_slurp(GPT2_DIR "/vocab.json", &vl), *mg = tu_slurp(GPT2_DIR "/merges.txt", &ml);
    fg_tok_files f = {.vocab_json = v, .vocab_len = vl, .merges_txt = mg, .merges_len = ml};
    ck_assert_msg(fg_tok_load_mem(&f, &m, &err) == FG_OK, "%s", err.msg);
    fg_tok_ids ids2 = {0};
    ck_assert_int_eq(fg_tok_encode(m, "Hello world", 11, 0, &ids2, NULL), 0);
    ck_assert_int_eq(memcmp(ids.ids, ids2.ids, 2 * sizeof(int32_t)), 0);
    /* decode: ids past the vocabulary decode as nothing; a negative id is refused with the
     * index and id, output untouched */
    fg_tok_bytes out = {0};
    int32_t bad[3] = {15496, 50257, 995};
    ck_assert_msg(fg_tok_decode(t, bad, 3, 0, &out, &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_eq(out.len, 11);
    ck_assert_int_eq(memcmp(out.data, "Hello world", 11), 0);
    bad[1] = INT32_MAX;
    ck_assert_int_eq(fg_tok_decode(t, bad + 1, 1, FG_TOK_SKIP_SPECIAL, &out, &err), FG_OK);
    ck_assert_uint_eq(out.len, 11);
    out.len = 0;
    bad[1] = -1;
    ck_assert_int_eq(fg_tok_decode(t, bad, 3, 0, &out, &err), FG_ERR_TOK_BAD_ID);
    ck_assert_ptr_nonnull(strstr(err.msg, "ids[1] = -1"));
    ck_assert_uint_eq(out.len, 0);
    fg_tok_bytes_free(&out);
    fg_tok_ids_free(&ids);
    fg_tok_ids_free(&ids2);
    free(v);
    free(mg);
    fg_tok_free(m);
    fg_tok_free(t);
}
END_TEST

/* ---- tiny vocabularies: the 256 byte symbols as ids 0..255 plus the given tokens */

static char *tiny_vocab(const char *const *extra, int n_extra)
{
    json_t *o = json_object();
    for (int b = 0; b < 256; b++) {
        char u[3] = {0};
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        if (cp < 0x80)
            u[0] = (char)cp;
        else {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 63));
        }
        json_object_set_new(o, u, json_integer(b));
    }
    for (int i = 0; i < n_extra; i++)
        json_object_set_new(o, extra[i], json_integer(256 + i));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static int load_tiny(const char *vocab, const char *merges, const char *config, fg_tok **t,
                     fg_err *err)
{
    fg_tok_files f = {vocab, strlen(vocab), NULL, merges, strlen(merges), NULL,
                      config, config ? strlen(config) : 0, NULL, NULL, 0, NULL};
    return fg_tok_load_mem(&f, t, err);
}

static void expect_ids(fg_tok *t, const char *s, const int32_t *want, size_t n)
{
    fg_tok_ids ids = {0};
    ck_assert_int_eq(fg_tok_encode(t, s, strlen(s), FG_TOK_SPECIAL, &ids, NULL), FG_OK);
    ck_assert_msg(ids.n == n, "\"%s\": %zu ids, want %zu", s, ids.n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids.ids[i] == want[i], "\"%s\": id %zu is %d, want %d", s, i, ids.ids[i], want[i]);
    fg_tok_ids_free(&ids);
}

START_TEST(merge_rules)
{
    static const char *extra[] = {"aa", "bc", "ab", "aaaa", "abc"};
    char *v = tiny_vocab(extra, 5);
    fg_tok *t;
    fg_err err;
    /* CRLF lines and a #version header; ranks: aa 0, bc 1, ab 2, aa+aa 3, ab+c 4 */
    ck_assert_msg(load_tiny(v, "#version: 0.2\r\na a\r\nb c\r\na b\r\naa aa\r\nab c\r\n", NULL, &t,
                            &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_eq(fg_tok_merge_count(t), 5);
    expect_ids(t, "aaa", (int32_t[]){256, 'a'}, 2);           /* leftmost pair first */
    expect_ids(t, "aaaa", (int32_t[]){259}, 1);               /* aa aa -> aaaa */
    expect_ids(t, "aaaaa", (int32_t[]){259, 'a'}, 2);
    expect_ids(t, "abc", (int32_t[]){'a', 257}, 2);           /* bc (rank 1) beats ab (rank 2) */
    expect_ids(t, "ab", (int32_t[]){258}, 1);
    fg_tok_free(t);
    /* a repeated pair keeps its last rank (GPT-2's dict, Hugging Face's HashMap) */
    ck_assert_int_eq(load_tiny(v, "a b\nb c\na b\nab c\n", NULL, &t, &err), FG_OK);
    expect_ids(t, "abc", (int32_t[]){'a', 257}, 2);
    fg_tok_free(t);
    ck_assert_int_eq(load_tiny(v, "a b\nab c\nb c\n", NULL, &t, &err), FG_OK);
    expect_ids(t, "abc", (int32_t[]){260}, 1);
    fg_tok_free(t);
    free(v);
}
END_TEST

/* ---- OPT numbering: same merges, different ids, specials from the config files */

START_TEST(opt_style_vocab)
{
    size_t vl, ml;
    char *v = tu_slurp(GPT2_DIR "/vocab.json", &vl), *mg = tu_slurp(GPT2_DIR "/merges.txt", &ml);
    json_t *src = json_loadb(v, vl, 0, NULL), *dst = json_object();
    const char *key;
    json_t *val;
    json_object_foreach(src, key, val) {
        json_int_t id = json_integer_value(val);
        json_object_set_new(dst, key, json_integer(4 + (id * 7919) % 50257));
    }
    static const char *sp[4] = {"<s>", "<pad>", "</s>", "<unk>"};
    for (int i = 0; i < 4; i++)
        json_object_set_new(dst, sp[i], json_integer(i));
    char *ov = json_dumps(dst, JSON_COMPACT);
    const char *cfg = "{\"add_bos_token\": true, \"add_prefix_space\": false, \"errors\": \"replace\","
                      " \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"</s>\", \"lstrip\": false},"
                      " \"eos_token\": {\"content\": \"</s>\"}, \"unk_token\": \"</s>\", \"pad_token\": null,"
                      " \"tokenizer_class\": \"GPT2Tokenizer\"}";
    const char *map = "{\"pad_token\": {\"content\": \"<pad>\", \"single_word\": false}, \"unk_token\": \"<unk>\"}";
    fg_tok_files f = {ov, strlen(ov), NULL, mg, ml, NULL, cfg, strlen(cfg), NULL, map, strlen(map), NULL};
    fg_tok *opt, *g = gpt2();
    fg_err err;
    ck_assert_msg(fg_tok_load_mem(&f, &opt, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_tok_special_id(opt, FG_TOK_BOS), 2);
    ck_assert_int_eq(fg_tok_special_id(opt, FG_TOK_EOS), 2);
    ck_assert_int_eq(fg_tok_special_id(opt, FG_TOK_UNK), 3);
    ck_assert_int_eq(fg_tok_special_id(opt, FG_TOK_PAD), 1);
    ck_assert_int_eq(fg_tok_adds_bos(opt), 1);
    ck_assert_int_eq(fg_tok_vocab_size(opt), 50257 + 4);
    const char *text = "Anne Elliot's 27 letters</s> \xe2\x80\x94 caf\xc3\xa9\xff!";
    fg_tok_ids a = {0}, b = {0};
    ck_assert_int_eq(fg_tok_encode(g, text, strlen(text), 0, &a, NULL), FG_OK);
    ck_assert_int_eq(fg_tok_encode(opt, text, strlen(text), 0, &b, NULL), FG_OK);
    ck_assert_uint_eq(a.n, b.n);  /* without special matching, "</s>" is plain text */
    for (size_t i = 0; i < a.n; i++)
        ck_assert_int_eq(b.ids[i], 4 + (a.ids[i] * 7919) % 50257);
    b.n = 0;
    ck_assert_int_eq(fg_tok_encode(opt, text, strlen(text), FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &b, NULL), 0);
    ck_assert_int_eq(b.ids[0], 2);
    int found = 0;
    for (size_t i = 1; i < b.n; i++)
        found += b.ids[i] == 2;
    ck_assert_int_eq(found, 1);
    fg_tok_bytes out = {0};
    ck_assert_int_eq(fg_tok_decode(opt, b.ids, b.n, FG_TOK_SKIP_SPECIAL, &out, NULL), FG_OK);
    ck_assert_uint_eq(out.len, strlen(text) - 4);
    out.len = 0;
    ck_assert_int_eq(fg_tok_decode(opt, b.ids, b.n, 0, &out, NULL), FG_OK);
    ck_assert_uint_eq(out.len, strlen(text) + 4);
    ck_assert_int_eq(memcmp(out.data + 4, text, strlen(text)), 0);
    fg_tok_bytes_free(&out);
    fg_tok_ids_free(&a);
    fg_tok_ids_free(&b);
    fg_tok_free(opt);
    fg_tok_free(g);
    free(ov);
    json_decref(src);
    json_decref(dst);
    free(v);
    free(mg);
}
END_TEST

START_TEST(added_tokens)
{
    static const char *extra[] = {"ab"};
    char *v = tiny_vocab(extra, 1);
    fg_tok *t;
    fg_err err;
    const char *cfg = "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<|x|>\", \"special\": true},"
                      " \"301\": {\"content\": \"<|xy|>\", \"special\": false}},"
                      " \"additional_special_tokens\": [\"<|q|>\", {\"content\": \"ab\"}]}";
    ck_assert_msg(load_tiny(v, "a b\n", cfg, &t, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_tok_vocab_size(t), 303);  /* <|q|> appended after 301 */
    ck_assert_int_eq(fg_tok_is_special(t, 300), 1);
    ck_assert_int_eq(fg_tok_is_special(t, 301), 0);
    ck_assert_int_eq(fg_tok_is_special(t, 256), 1);  /* "ab" from the vocab, made special */
    /* leftmost, then longest: "<|xy|>" is not cut as "<|x" ... */
    expect_ids(t, "z<|xy|><|x|>ab<|q|>", (int32_t[]){'z', 301, 300, 256, 302}, 5);
    int32_t id;
    ck_assert_int_eq(fg_tok_add_special(t, "<|x|>", 5, &id, &err), FG_OK);
    ck_assert_int_eq(id, 300);
    ck_assert_int_eq(fg_tok_add_special(t, "", 0, &id, &err), FG_ERR_INVALID_ARG);
    fg_tok_free(t);
    free(v);
}
END_TEST

/* ---- load errors: exact code, and the message names the file and line or key */

static void expect_err(const char *vocab, const char *merges, const char *config, int code,
                       const char *needle)
{
    fg_tok *t = (fg_tok *)1;
    fg_err err;
    fg_err_clear(&err);
    int rc = load_tiny(vocab, merges, config, &t, &err);
    ck_assert_msg(rc == code, "want %d (%s), got %d: %s", code, fg_strerror(code), rc, err.msg);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.msg, needle), "message \"%s\" lacks \"%s\"", err.msg, needle);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

START_TEST(vocab_errors)
{
    char *v = tiny_vocab(NULL, 0);
    expect_err("{\"a\": 1,", "", NULL, FG_ERR_TOK_JSON, "vocab.json:1:");
    expect_err("{\"a\\\n\": 1}", "", NULL, FG_ERR_TOK_JSON, "vocab.json:2:");  /* fuzz: jansson
                                                      quotes the newline; the message stays one line */
    expect_err("[1, 2]", "", NULL, FG_ERR_TOK_VOCAB, "vocab.json: expected");
    expect_err("{}", "", NULL, FG_ERR_TOK_VOCAB, "vocab.json: expected");
    expect_err("{\"a\": \"1\"}", "", NULL, FG_ERR_TOK_VOCAB, "token \"a\": id is not an integer");
    expect_err("{\"a\": 1.5}", "", NULL, FG_ERR_TOK_VOCAB, "token \"a\"");
    expect_err("{\"a\": -1}", "", NULL, FG_ERR_TOK_VOCAB, "token \"a\": id -1 outside");
    expect_err("{\"a\": 16777216}", "", NULL, FG_ERR_TOK_VOCAB, "id 16777216 outside");
    expect_err("{\"a\": 5, \"b\": 5}", "", NULL, FG_ERR_TOK_VOCAB, "\"a\" and \"b\" share id 5");
    expect_err("{\"a\": 5, \"a\": 6}", "", NULL, FG_ERR_TOK_VOCAB, "duplicate");
    expect_err("{\"a\": 0}", "", NULL, FG_ERR_TOK_VOCAB, "no token for byte 0x00");
    /* a vocabulary with byte 'q' renamed: that byte has no token */
    char *w = strdup(v), *q = strstr(w, "\"q\"");
    q[1] = 0x7f;  /* DEL is not a byte-level symbol */
    expect_err(w, "", NULL, FG_ERR_TOK_VOCAB, "no token for byte 0x71");
    free(w);
    free(v);
    fg_tok *t;
    fg_err err;
    ck_assert_int_eq(fg_tok_load_dir("/nonexistent-fg-dir", &t, &err), FG_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-fg-dir/vocab.json"));
    ck_assert_int_eq(fg_tok_load_files(GPT2_DIR "/vocab.json", "/nonexistent-fg-merges", NULL, NULL,
                                       &t, &err), FG_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-fg-merges"));
    ck_assert_int_eq(fg_tok_load_files(GPT2_DIR, GPT2_DIR "/merges.txt", NULL, NULL, &t, &err),
                     FG_ERR_IO);
}
END_TEST

START_TEST(merges_errors)
{
    static const char *extra[] = {"ab"};
    char *v = tiny_vocab(extra, 1);
    expect_err(v, "a b\nab\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:2: expected two tokens");
    expect_err(v, "#version: 0.2\na b c\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:2:");
    expect_err(v, "a  b\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:1:");
    expect_err(v, "a b\n\na b\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:2:");
    expect_err(v, " a\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:1:");
    expect_err(v, "a b\nx zz\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:2: token \"zz\" is not in");
    expect_err(v, "a c\n", NULL, FG_ERR_TOK_MERGES, "merges.txt:1: token \"ac\" is not in");
    expect_err(v, "a b\n\xff b\n", NULL, FG_ERR_TOK_MERGES, "token \"\\xff\"");
    free(v);
}
END_TEST

START_TEST(config_errors)
{
    char *v = tiny_vocab(NULL, 0);
    expect_err(v, "", "{\"bos_token\": ", FG_ERR_TOK_JSON, "tokenizer_config.json:1:");
    expect_err(v, "", "[]", FG_ERR_TOK_CONFIG, "tokenizer_config.json: expected a JSON object");
    expect_err(v, "", "{\"bos_token\": 5}", FG_ERR_TOK_CONFIG, "\"bos_token\"");
    expect_err(v, "", "{\"eos_token\": {\"content\": 5}}", FG_ERR_TOK_CONFIG, "\"eos_token\"");
    expect_err(v, "", "{\"pad_token\": \"\"}", FG_ERR_TOK_CONFIG, "\"pad_token\"");
    expect_err(v, "", "{\"add_bos_token\": \"yes\"}", FG_ERR_TOK_CONFIG, "\"add_bos_token\"");
    expect_err(v, "", "{\"additional_special_tokens\": \"<x>\"}", FG_ERR_TOK_CONFIG,
               "\"additional_special_tokens\"");
    expect_err(v, "", "{\"added_tokens_decoder\": []}", FG_ERR_TOK_CONFIG, "\"added_tokens_decoder\"");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"x1\": {\"content\": \"<x>\"}}}",
               FG_ERR_TOK_CONFIG, "key \"x1\"");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"16777216\": {\"content\": \"<x>\"}}}",
               FG_ERR_TOK_CONFIG, "key \"16777216\"");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"300\": {\"special\": true}}}",
               FG_ERR_TOK_CONFIG, "\"300\"");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\", \"special\": 1}}}",
               FG_ERR_TOK_CONFIG, "\"300\"");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"7\": {\"content\": \"<x>\"}}}",
               FG_ERR_TOK_CONFIG, "id 7 already belongs");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"300\": {\"content\": \"a\"}}}",
               FG_ERR_TOK_CONFIG, "has id 97 in the vocabulary, not 300");
    expect_err(v, "", "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"}, \"301\": {\"content\": \"<x>\"}}}",
               FG_ERR_TOK_CONFIG, "given ids 30");
    free(v);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fixture_cases);
    tcase_add_test(tc, fixture_special);
    tcase_add_test(tc, codepoint_classes);
    tcase_add_test(tc, random_bytes_roundtrip);
    tcase_add_test(tc, long_inputs);
    tcase_add_test(tc, invalid_utf8_pieces);
    tcase_add_test(tc, gpt2_basics);
    tcase_add_test(tc, merge_rules);
    tcase_add_test(tc, opt_style_vocab);
    tcase_add_test(tc, added_tokens);
    tcase_add_test(tc, vocab_errors);
    tcase_add_test(tc, merges_errors);
    tcase_add_test(tc, config_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
