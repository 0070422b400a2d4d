/* test_tiktoken.c - the "tiktoken-bpe" class (text/tok_tiktoken.c) beyond the id checks of
 * test_realtok (moonshotai__Kimi-K2-derived against tiktoken):
 *   - what Kimi's tokenizer sets up: 258 reserved specials after the ranks, named by the config
 *     or <|reserved_token_ID|>, roles, no BOS added;
 *   - the pattern read from tokenization_kimi.py text (a join list, a single literal, neither);
 *   - hostile ranks files and configs refused in one line naming the file and line;
 *   - a checkpoint with tiktoken.model and no tokenizer.json through fg-convert into a store and
 *     back (fg_model_tokenizer): the same ids as the directory's tokenizer.
 * The corpus directory comes from the real_tok fixture (FG_REAL_TOK_DIR), the tiny checkpoint
 * from the assembled fixtures (FG_FIXTURE_DIR). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "model_open.h"
#include "store.h"
#include "testutil.h"
#include "tokenizer.h"

#define KIMI FG_REAL_TOK_DIR "/moonshotai__Kimi-K2-derived"
#define PAT "[\\p{Han}]+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+|\\p{L}+"

static void enc(fg_tok *t, const char *s, unsigned fl, fg_tok_ids *out)
{
    out->n = 0;
    ck_assert_int_eq(fg_tok_encode(t, s, strlen(s), fl, out, NULL), FG_OK);
}

START_TEST(kimi_specials)
{
    fg_tok *t;
    fg_err err;
    ck_assert_msg(fg_tok_load_dir(KIMI, &t, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(fg_tok_class(t), "tiktoken-bpe");
    ck_assert_int_eq(fg_tok_vocab_size(t), 128000 + 258);
    ck_assert_int_eq(fg_tok_special_id(t, FG_TOK_BOS), 128000);      /* [BOS] */
    ck_assert_int_eq(fg_tok_special_id(t, FG_TOK_EOS), 128001);      /* [EOS] */
    ck_assert_int_eq(fg_tok_special_id(t, FG_TOK_PAD), 128255);      /* [PAD] */
    ck_assert_int_eq(fg_tok_lookup(t, "<|im_end|>", 10), 128002);
    ck_assert_int_eq(fg_tok_lookup(t, "<|reserved_token_128005|>", 25), 128005);
    ck_assert_int_eq(fg_tok_lookup(t, "<|reserved_token_128257|>", 25), 128257);
    ck_assert(fg_tok_is_special(t, 128257) && !fg_tok_is_special(t, 127999));
    ck_assert_int_eq(fg_tok_adds_bos(t), 0);
    fg_tok_ids ids = {0};
    enc(t, "[BOS]hi<|reserved_token_128100|>", FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &ids);
    ck_assert(ids.n == 3 && ids.ids[0] == 128000 && ids.ids[2] == 128100);
    enc(t, "[BOS]", 0, &ids);  /* encode_ordinary: the text of a special is text */
    ck_assert(ids.n > 1 && ids.ids[0] != 128000);
    /* every byte string round-trips (raw decode) */
    const char bytes[] = "\xff\xfe caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xed\xa0\x80 \x00 end";
    ids.n = 0;
    ck_assert_int_eq(fg_tok_encode(t, bytes, sizeof bytes - 1, 0, &ids, NULL), FG_OK);
    fg_tok_bytes out = {0};
    ck_assert_int_eq(fg_tok_decode(t, ids.ids, ids.n, 0, &out, NULL), FG_OK);
    ck_assert(out.len == sizeof bytes - 1 && memcmp(out.data, bytes, out.len) == 0);
    fg_tok_bytes_free(&out);
    fg_tok_ids_free(&ids);
    fg_tok_free(t);
}
END_TEST

START_TEST(pattern_from_python)
{
    char *p;
    fg_err err;
    const char *py1 = "class T:\n    # pat_str is below\n    pat_str = \"|\".join(\n        [\n"
                      "            r\"\"\"[\\p{Han}]+\"\"\",  # han\n            r'\\s+',\n        ]\n    )\n"
                      "    def f(self):\n        return E(pat_str=self.pat_str)\n";
    ck_assert_int_eq(fg_tok_tiktoken_pattern(py1, strlen(py1), NULL, &p, &err), FG_OK);
    ck_assert_str_eq(p, "[\\p{Han}]+|\\s+");
    free(p);
    const char *py2 = "pat_str = r\"\\p{L}+|\\s+\"\n";
    ck_assert_int_eq(fg_tok_tiktoken_pattern(py2, strlen(py2), NULL, &p, &err), FG_OK);
    ck_assert_str_eq(p, "\\p{L}+|\\s+");
    free(p);
    const char *py3 = "x = Encoding(pat_str=self.pat_str)\n";
    ck_assert_int_eq(fg_tok_tiktoken_pattern(py3, strlen(py3), "k.py", &p, &err), FG_ERR_TOK_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "k.py"));
    ck_assert_int_eq(fg_tok_tiktoken_pattern("x = 1\n", 6, "k.py", &p, &err), FG_ERR_NOT_FOUND);
    const char *py4 = "pat_str = \"a\\\\|b\"\n";  /* escapes in a non-raw string are not read */
    ck_assert_int_eq(fg_tok_tiktoken_pattern(py4, strlen(py4), "k.py", &p, &err), FG_ERR_TOK_CONFIG);
    ck_assert_ptr_null(p);
}
END_TEST

/* A valid ranks file: the 256 bytes, then "ab" (rank 256) and "abc" (257). */
static char *good_ranks(size_t *len)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 256 * 16 + 64, n = 0;
    char *s = malloc(cap);
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(s + n, cap - n, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    n += (size_t)snprintf(s + n, cap - n, "YWI= 256\nYWJj 257\n");
    *len = n;
    return s;
}

static int load(const char *ranks, size_t len, const char *cfg, fg_tok **t, fg_err *err)
{
    fg_tok_tiktoken_files f = {ranks, len, "tiktoken.model", cfg, cfg ? strlen(cfg) : 0,
                               "tokenizer_config.json", PAT, "pat"};
    return fg_tok_load_tiktoken_mem(&f, t, err);
}

START_TEST(hostile_files)
{
    size_t n;
    char *good = good_ranks(&n);
    fg_tok *t;
    fg_err err;
    ck_assert_msg(load(good, n, NULL, &t, &err) == FG_OK, "%s", err.msg);
    fg_tok_ids ids = {0};
    enc(t, "abc ab a", 0, &ids);  /* "abc" whole, " " + "ab" merged, " " "a" */
    ck_assert_int_eq(ids.n, 5);
    ck_assert(ids.ids[0] == 257 && ids.ids[2] == 256 && ids.ids[4] == 'a');
    ck_assert_int_eq(fg_tok_merge_count(t), 2);  /* (a, b) and (ab, c) */
    fg_tok_ids_free(&ids);
    fg_tok_free(t);
    static const struct { const char *tail; int code; const char *msg; } cases[] = {
        {"YW*= 258\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: \"YW*=\" is not canonical base64"},
        {"YWJ= 258\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: \"YWJ=\" is not canonical base64"},
        {"YWJjZA== 257\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: rank 257 is given twice"},
        {"YWI= 300\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: token \"ab\" is given twice (ranks 256 and 300)"},
        {"YWJjZA==  258\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: expected \"BASE64 RANK\""},
        {"YWJjZA== -1\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: rank \"-1\" is not a number"},
        {"YWJjZA== 99999999999\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: rank \"99999999999\""},
        {"YWJjZA== 260\n", FG_ERR_TOK_VOCAB, "tiktoken.model: rank 258 is missing"},
        {"= 258\n", FG_ERR_TOK_VOCAB, "tiktoken.model:259: \"=\" is not canonical base64"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        size_t tl = strlen(cases[k].tail);
        char *s = malloc(n + tl);
        memcpy(s, good, n);
        memcpy(s + n, cases[k].tail, tl);
        int rc = load(s, n + tl, NULL, &t, &err);
        ck_assert_msg(rc == cases[k].code && strstr(err.msg, cases[k].msg) && !strchr(err.msg, '\n'),
                      "case %zu: rc %d: %s", k, rc, err.msg);
        free(s);
    }
    /* a huge line, a missing byte, nothing at all */
    size_t hl = n + 70000;
    char *s = malloc(hl);
    memcpy(s, good, n);
    memset(s + n, 'A', hl - n - 1);
    s[hl - 1] = '\n';
    ck_assert_int_eq(load(s, hl, NULL, &t, &err), FG_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "tiktoken.model:259: line of 69999 bytes"));
    free(s);
    const char *no_a = strstr(good, "YQ== 97\n");
    s = malloc(n + 4);  /* "YQ== 97" (8 bytes) becomes "YWJjZGVm 97" (12) */
    size_t pre = (size_t)(no_a - good);
    memcpy(s, good, pre);
    memcpy(s + pre, "YWJjZGVm 97\n", 12);
    memcpy(s + pre + 12, no_a + 8, n - pre - 8);
    ck_assert_int_eq(load(s, n + 4, NULL, &t, &err), FG_ERR_TOK_VOCAB);
    ck_assert_msg(strstr(err.msg, "no token for the byte 0x61"), "%s", err.msg);
    free(s);
    ck_assert_int_eq(load("\n\r\n", 3, NULL, &t, &err), FG_ERR_TOK_VOCAB);
    ck_assert_ptr_nonnull(strstr(err.msg, "tiktoken.model: no tokens"));
    /* the config: specials outside the reserved range, a bad shape, bad JSON */
    ck_assert_int_eq(load(good, n, "{\"added_tokens_decoder\": {\"100\": {\"content\": \"<x>\"}}}", &t, &err),
                     FG_ERR_TOK_CONFIG);
    ck_assert_msg(strstr(err.msg, "tokenizer_config.json: \"added_tokens_decoder\": id 100 is outside"), "%s", err.msg);
    ck_assert_int_eq(load(good, n, "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"}}, "
                                   "\"bos_token\": \"<x>\"}", &t, &err), FG_OK);
    ck_assert_int_eq(fg_tok_special_id(t, FG_TOK_BOS), 300);
    ck_assert_int_eq(fg_tok_lookup(t, "<|reserved_token_258|>", 22), 258);
    fg_tok_free(t);
    ck_assert_int_eq(load(good, n, "{\"bos_token\": 5}", &t, &err), FG_ERR_TOK_CONFIG);
    ck_assert_int_eq(load(good, n, "{\"a\": ", &t, &err), FG_ERR_TOK_JSON);
    ck_assert_ptr_nonnull(strstr(err.msg, "tokenizer_config.json:1:"));
    /* a pattern PCRE2 cannot take, one fg cannot translate */
    fg_tok_tiktoken_files f = {good, n, NULL, NULL, 0, NULL, "(", "pat_str"};
    ck_assert_int_eq(fg_tok_load_tiktoken_mem(&f, &t, &err), FG_ERR_TOK_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "pat_str"));
    f.pattern = "[^a&&b]";
    ck_assert_int_eq(fg_tok_load_tiktoken_mem(&f, &t, &err), FG_ERR_UNSUPPORTED);
    free(good);
}
END_TEST

static void copy(const char *from, const char *to)
{
    size_t n;
    char *b = tu_slurp(from, &n);
    FILE *fp = fopen(to, "wb");
    ck_assert(fp && fwrite(b, 1, n, fp) == n && fclose(fp) == 0);
    free(b);
}

START_TEST(store_round_trip)
{
    const char *tmp = tu_tmpdir_create();
    char ck[1024], st[1024], a[1200], b[1200];
    snprintf(ck, sizeof ck, "%s/ckpt", tmp);
    snprintf(st, sizeof st, "%s/store", tmp);
    ck_assert_int_eq(mkdir(ck, 0755), 0);
    static const char *const tiny[2] = {"config.json", "model.safetensors"};
    static const char *const kimi[3] = {"tiktoken.model", "tokenizer_config.json", "tokenization_kimi.py"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/llama/llama3-tiny-bf16/%s", FG_FIXTURE_DIR, tiny[i]);
        snprintf(b, sizeof b, "%s/%s", ck, tiny[i]);
        copy(a, b);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", KIMI, kimi[i]);
        snprintf(b, sizeof b, "%s/%s", ck, kimi[i]);
        copy(a, b);
    }
    fg_convert_opts o = {0};
    o.group_axis = -1;
    fg_err err;
    ck_assert_msg(fg_convert_import(ck, st, &o, NULL, &err) == FG_OK, "%s", err.msg);
    fg_store *s;
    fg_model *m;
    fg_tok *t1, *t2;
    ck_assert_msg(fg_store_open(st, FG_STORE_RDONLY, NULL, &s, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_model_open(s, &m, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_model_tokenizer(m, &t1, &err) == FG_OK, "%s", err.msg);
    ck_assert_msg(fg_tok_load_dir(ck, &t2, &err) == FG_OK, "%s", err.msg);
    ck_assert_str_eq(fg_tok_class(t1), "tiktoken-bpe");
    const char *text = "<|im_user|>user<|im_middle|>HelloWorld 東京 don't 12345<|im_end|>";
    fg_tok_ids x = {0}, y = {0};
    enc(t1, text, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &x);
    enc(t2, text, FG_TOK_SPECIAL | FG_TOK_ADD_BOS, &y);
    ck_assert(x.n == y.n && x.n > 5 && memcmp(x.ids, y.ids, x.n * sizeof *x.ids) == 0);
    ck_assert_int_eq(fg_tok_special_id(t1, FG_TOK_EOS), 128001);
    fg_tok_ids_free(&x);
    fg_tok_ids_free(&y);
    fg_tok_free(t1);
    fg_tok_free(t2);
    fg_model_close(m);
    fg_store_close(s);
    /* without tokenization_kimi.py the pattern is missing: the conversion names the file */
    snprintf(b, sizeof b, "%s/tokenization_kimi.py", ck);
    ck_assert_int_eq(unlink(b), 0);
    snprintf(st, sizeof st, "%s/store2", tmp);
    ck_assert_int_ne(fg_convert_import(ck, st, &o, NULL, &err), FG_OK);
    ck_assert_msg(strstr(err.msg, "tokenization_kimi.py"), "%s", err.msg);
    tu_tmpdir_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tiktoken");
    TCase *tc = tcase_create("tiktoken");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, kimi_specials);
    tcase_add_test(tc, pattern_from_python);
    tcase_add_test(tc, hostile_files);
    tcase_add_test(tc, store_round_trip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
