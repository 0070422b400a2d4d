/* test_chat.c - chat templates rendered as transformers renders them (text/chat.h).
 *
 * The tables are in tests/fixtures/chat/manifest.json, written by make_chat_fixtures.py with
 * transformers itself: "cases" are published templates (templates/, sources.tsv) on the
 * conversations of conversations.json, "snippets" are small templates (snippets.json) that
 * pin one construct each (whitespace control, loop variables, filters, tests, methods,
 * undefined). Each row's text must come out byte for byte; a row transformers refused must
 * fail here too. The limits (output size, iterations, recursion, nesting) and the parse-time
 * refusals are checked by hand below.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "chat.h"
#include "convert.h"
#include "store.h"
#include "testutil.h"

#define FIX FG_SOURCE_DIR "/tests/fixtures/chat"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert(fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    return j;
}

/* templates/<name>.jinja, or the chat_template of a tokenizer_config.json (config non-NULL) */
static fg_chat_template *parse_file(const char *name, const char *config)
{
    char path[1024];
    size_t n;
    char *src;
    if (config) {
        snprintf(path, sizeof path, FIX "/%s", config);
        char *cfg = slurp(path, &n);
        fg_err e = {0};
        int rc = fg_chat_template_select(NULL, 0, NULL, 0, cfg, n, 0, &src, &e);
        ck_assert_msg(rc == FG_OK, "%s: %s", path, e.msg);
        n = strlen(src);
        free(cfg);
    } else {
        snprintf(path, sizeof path, FIX "/templates/%s.jinja", name);
        src = slurp(path, &n);
    }
    fg_chat_template *t;
    fg_err e = {0};
    int rc = fg_chat_template_parse(src, n, &t, &e);
    ck_assert_msg(rc == FG_OK, "%s: %s", name, e.msg);
    free(src);
    return t;
}

/* render a row: kwargs (special tokens + extra) as extra_json */
static int render_row(const fg_chat_template *t, json_t *msgs, json_t *kwargs, int add_gen,
                      int64_t now, char **out, fg_err *e)
{
    char *m = json_dumps(msgs, JSON_COMPACT);
    char *k = json_dumps(kwargs, JSON_COMPACT);
    fg_chat_opts o = {.add_generation_prompt = add_gen, .extra_json = k, .extra_len = strlen(k),
                      .now = now};
    int rc = fg_chat_render(t, m, strlen(m), &o, out, NULL, e);
    free(m);
    free(k);
    return rc;
}

START_TEST(published_templates_render_as_transformers)
{
    json_t *man = load_json(FIX "/manifest.json");
    json_t *convs = load_json(FIX "/conversations.json");
    int64_t now = json_integer_value(json_object_get(man, "now"));
    json_t *cases = json_object_get(man, "cases");
    size_t i, same = 0, templates = 0;
    json_t *row;
    const char *last = "";
    fg_chat_template *t = NULL;
    json_array_foreach(cases, i, row) {
        const char *name = json_string_value(json_object_get(row, "template"));
        const char *cs = json_string_value(json_object_get(row, "case"));
        if (strcmp(name, last)) {
            fg_chat_template_free(t);
            t = parse_file(name, json_string_value(json_object_get(row, "config")));
            last = name;
            templates++;
        }
        json_t *msgs = json_object_get(convs, json_string_value(json_object_get(row, "conversation")));
        char *out = NULL;
        fg_err e = {0};
        int rc = render_row(t, msgs, json_object_get(row, "kwargs"),
                            json_is_true(json_object_get(row, "add_generation_prompt")), now, &out, &e);
        const char *exp = json_string_value(json_object_get(row, "expected"));
        if (!exp) {
            ck_assert_msg(rc != FG_OK, "%s/%s: transformers refused it (%s), fg rendered it",
                          name, cs, json_string_value(json_object_get(row, "error")));
            ck_assert_msg(strstr(e.msg, "chat template line ") == e.msg, "%s", e.msg);
            same++;
            continue;
        }
        ck_assert_msg(rc == FG_OK, "%s/%s: %s", name, cs, e.msg);
        char path[1024];
        snprintf(path, sizeof path, FIX "/%s", exp);
        size_t n;
        char *want = slurp(path, &n);
        if (n != strlen(out) || memcmp(want, out, n)) {
            size_t k = 0;
            while (k < n && out[k] == want[k])
                k++;
            ck_abort_msg("%s/%s: differs at byte %zu: want \"%.60s\" got \"%.60s\"", name, cs, k,
                         want + k, out + k);
        }
        same++;
        free(want);
        free(out);
    }
    fg_chat_template_free(t);
    printf("chat templates: %zu templates, %zu of %zu renderings identical to transformers\n",
           templates, same, json_array_size(cases));
    json_decref(man);
    json_decref(convs);
}
END_TEST

START_TEST(snippets_render_as_jinja)
{
    json_t *man = load_json(FIX "/manifest.json");
    json_t *rows = json_object_get(man, "snippets");
    ck_assert(json_array_size(rows) > 0);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *name = json_string_value(json_object_get(row, "name"));
        const char *src = json_string_value(json_object_get(row, "template"));
        const char *exp = json_string_value(json_object_get(row, "expected"));
        fg_chat_template *t;
        fg_err e = {0};
        int rc = fg_chat_template_parse(src, strlen(src), &t, &e);
        char *out = NULL;
        if (rc == FG_OK) {
            json_t *vars = json_object_get(row, "vars");
            json_t *msgs = json_object_get(vars, "messages"), *none = json_array();
            rc = render_row(t, msgs ? msgs : none, vars, 0, 1768478400, &out, &e);
            json_decref(none);
            fg_chat_template_free(t);
        }
        if (!exp) {
            ck_assert_msg(rc != FG_OK, "snippet %s: jinja refused it (%s), fg rendered \"%s\"",
                          name, json_string_value(json_object_get(row, "error")), out);
            ck_assert_msg(strstr(e.msg, "chat template line ") == e.msg, "%s", e.msg);
            continue;
        }
        ck_assert_msg(rc == FG_OK, "snippet %s: %s", name, e.msg);
        ck_assert_msg(!strcmp(out, exp), "snippet %s: want \"%s\" got \"%s\"", name, exp, out);
        free(out);
    }
    json_decref(man);
}
END_TEST

static void expect_parse_error(const char *src, const char *msg)
{
    fg_chat_template *t = (fg_chat_template *)1;
    fg_err e = {0};
    ck_assert_int_ne(fg_chat_template_parse(src, strlen(src), &t, &e), FG_OK);
    ck_assert_ptr_null(t);
    ck_assert_msg(!strcmp(e.msg, msg), "want \"%s\" got \"%s\"", msg, e.msg);
}

START_TEST(unsupported_constructs_fail_at_parse_naming_them)
{
    expect_parse_error("hello\n{{ x | foo }}", "chat template line 2: filter 'foo' is not supported");
    expect_parse_error("{% if x is weird %}{% endif %}", "chat template line 1: test 'weird' is not supported");
    expect_parse_error("\n\n{% include 'x' %}", "chat template line 3: statement 'include' is not supported");
    expect_parse_error("{{ s.zfill(3) }}", "chat template line 1: method 'zfill' is not supported");
    expect_parse_error("{{ lipsum() }}", "chat template line 1: function 'lipsum' is not supported");
    expect_parse_error("{% for x in y %}", "chat template line 1: unexpected end of template, expected 'endfor'");
    expect_parse_error("{{ 'abc }}", "chat template line 1: unterminated string");
    expect_parse_error("{# open", "chat template line 1: missing end of comment tag");
}
END_TEST

static int render_src(const char *src, const fg_chat_opts *o, char **out, fg_err *e)
{
    fg_chat_template *t;
    int rc = fg_chat_template_parse(src, strlen(src), &t, e);
    ck_assert_msg(rc == FG_OK, "%s", e->msg);
    rc = fg_chat_render(t, "[]", 2, o, out, NULL, e);
    fg_chat_template_free(t);
    return rc;
}

START_TEST(limits_fail_the_render_with_a_message)
{
    fg_err e = {0};
    char *out;
    fg_chat_opts o = {.max_output = 1000};
    ck_assert_int_ne(render_src("{% for i in range(100) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", &o, &out, &e), FG_OK);
    ck_assert_str_eq(e.msg, "chat template line 1: the output exceeds 1000 bytes");
    o = (fg_chat_opts){.max_iterations = 50};
    ck_assert_int_ne(render_src("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", &o, &out, &e), FG_OK);
    ck_assert_msg(strstr(e.msg, "more than 50 iterations") != NULL, "%s", e.msg);
    ck_assert_int_ne(render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &out, &e), FG_OK);
    ck_assert_str_eq(e.msg, "chat template line 1: macro calls nest deeper than 32");
    char deep[4096] = "{{ ";
    for (int i = 0; i < 500; i++)
        strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 500; i++)
        strcat(deep, ")");
    strcat(deep, " }}");
    fg_chat_template *t;
    ck_assert_int_ne(fg_chat_template_parse(deep, strlen(deep), &t, &e), FG_OK);
    ck_assert_msg(strstr(e.msg, "nests deeper than") != NULL, "%s", e.msg);
    ck_assert_int_ne(render_src("\n{{ raise_exception('Only user and assistant roles') }}", NULL, &out, &e), FG_OK);
    ck_assert_str_eq(e.msg, "chat template line 2: raise_exception: Only user and assistant roles");
    ck_assert_int_ne(render_src("{{ x.y }}", NULL, &out, &e), FG_OK);
    ck_assert_str_eq(e.msg, "chat template line 1: 'x' is undefined");
}
END_TEST

START_TEST(bad_messages_are_refused)
{
    fg_chat_template *t;
    fg_err e = {0};
    ck_assert_int_eq(fg_chat_template_parse("{{ messages|length }}", 21, &t, &e), FG_OK);
    char *out;
    ck_assert_int_ne(fg_chat_render(t, "{\"role\": 1}", 11, NULL, &out, NULL, &e), FG_OK);
    ck_assert_ptr_null(out);
    ck_assert_int_ne(fg_chat_render(t, "[1]", 3, NULL, &out, NULL, &e), FG_OK);
    ck_assert_int_ne(fg_chat_render(t, "[{", 2, NULL, &out, NULL, &e), FG_OK);
    size_t n;
    ck_assert_int_eq(fg_chat_render(t, "[{\"role\": \"user\", \"content\": null}]", 35, NULL, &out, &n, &e), FG_OK);
    ck_assert_str_eq(out, "1");
    ck_assert_uint_eq(n, 1);
    free(out);
    fg_chat_template_free(t);
}
END_TEST

START_TEST(template_is_selected_from_the_checkpoint_files)
{
    char *src;
    fg_err e = {0};
    const char *cfg = "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, "
                      "{\"name\": \"tool_use\", \"template\": \"T\"}]}";
    ck_assert_int_eq(fg_chat_template_select(NULL, 0, NULL, 0, cfg, strlen(cfg), 0, &src, &e), FG_OK);
    ck_assert_str_eq(src, "D");
    free(src);
    ck_assert_int_eq(fg_chat_template_select(NULL, 0, NULL, 0, cfg, strlen(cfg), 1, &src, &e), FG_OK);
    ck_assert_str_eq(src, "T");
    free(src);
    const char *cj = "{\"chat_template\": \"J\"}";
    ck_assert_int_eq(fg_chat_template_select(NULL, 0, cj, strlen(cj), cfg, strlen(cfg), 0, &src, &e), FG_OK);
    ck_assert_str_eq(src, "J");
    free(src);
    ck_assert_int_eq(fg_chat_template_select("F", 1, cj, strlen(cj), cfg, strlen(cfg), 0, &src, &e), FG_OK);
    ck_assert_str_eq(src, "F");
    free(src);
    ck_assert_int_eq(fg_chat_template_select(NULL, 0, NULL, 0, "{}", 2, 0, &src, &e), FG_ERR_NOT_FOUND);
    ck_assert_str_eq(e.msg, "the checkpoint has no chat template");
}
END_TEST

static void put_file(const char *dir, const char *name, const char *text, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(text, 1, n, f) == n);
    fclose(f);
}

/* a tokenizer directory: GPT-2's files plus the given chat-template file */
static const char *tok_dir(const char *sub, const char *file, const char *text, size_t n)
{
    const char *dir = tu_path(sub);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    const char *gpt2[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        char src[4096];
        snprintf(src, sizeof src, FG_SOURCE_DIR "/data/gpt2-tokenizer/%s", gpt2[i]);
        size_t len;
        char *b = slurp(src, &len);
        put_file(dir, gpt2[i], b, len);
        free(b);
    }
    put_file(dir, file, text, n);
    return dir;
}

static int convert_with(const char *tok, const char *dst, fg_err *e)
{
    fg_convert_opts o = {0, 64, -1, tok, 0, NULL, NULL};
    fg_convert_report rep;
    return fg_convert_import(FG_SOURCE_DIR "/tests/fixtures/opt/opt-tiny-safetensors", dst, &o,
                             &rep, e);
}

/* the special tokens of each published tokenizer_config.json row are what transformers passed */
START_TEST(special_tokens_are_read_as_transformers_passes_them)
{
    json_t *man = load_json(FIX "/manifest.json");
    size_t i, checked = 0;
    json_t *row;
    json_array_foreach(json_object_get(man, "cases"), i, row) {
        const char *config = json_string_value(json_object_get(row, "config"));
        if (!config)
            continue;
        char path[1024];
        snprintf(path, sizeof path, FIX "/%s", config);
        size_t n;
        char *cfg = slurp(path, &n);
        fg_chat_tokens tk;
        fg_err e = {0};
        ck_assert_msg(fg_chat_tokens_read(cfg, n, NULL, 0, &tk, &e) == FG_OK, "%s", e.msg);
        json_t *kw = json_object_get(row, "kwargs");
        const char *keys[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
        const char *got[] = {tk.bos, tk.eos, tk.pad, tk.unk};
        for (int k = 0; k < 4; k++) {
            const char *want = json_string_value(json_object_get(kw, keys[k]));
            ck_assert_msg((!want && !got[k]) || (want && got[k] && !strcmp(want, got[k])),
                          "%s %s: want %s got %s", config, keys[k], want, got[k]);
        }
        fg_chat_tokens_free(&tk);
        free(cfg);
        checked++;
    }
    ck_assert_uint_gt(checked, 0);
    fg_chat_tokens tk;
    fg_err e = {0};
    const char *map = "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\"}";
    const char *cfg = "{\"eos_token\": \"<|eot|>\"}";
    ck_assert_int_eq(fg_chat_tokens_read(cfg, strlen(cfg), map, strlen(map), &tk, &e), FG_OK);
    ck_assert_str_eq(tk.bos, "<s>");
    ck_assert_str_eq(tk.eos, "<|eot|>");
    ck_assert_ptr_null(tk.pad);
    fg_chat_tokens_free(&tk);
    ck_assert_int_eq(fg_chat_tokens_read("[1]", 3, NULL, 0, &tk, &e), FG_ERR_TOK_CONFIG);
    ck_assert_str_eq(e.msg, "tokenizer_config.json: not a JSON object");
    json_decref(man);
}
END_TEST

START_TEST(convert_stores_the_template_and_refuses_one_it_cannot_run)
{
    tu_tmpdir_create();
    size_t n;
    char *llama = slurp(FIX "/templates/meta-llama-Llama-3.1-8B-Instruct.jinja", &n);
    const char *good = tok_dir("good", "chat_template.jinja", llama, n);
    fg_err e = {0};
    ck_assert_msg(convert_with(good, tu_path("s1"), &e) == FG_OK, "%s", e.msg);
    fg_store *s;
    ck_assert_int_eq(fg_store_open(tu_path("s1"), FG_STORE_RDONLY, NULL, &s, &e), FG_OK);
    void *data;
    size_t len;
    ck_assert_int_eq(fg_store_meta_get(s, "tokenizer.chat_template_jinja", &data, &len, &e), FG_OK);
    ck_assert(len == n && !memcmp(data, llama, n));
    free(data);
    fg_store_close(s);
    free(llama);

    const char *bad = "{{ bos_token }}\n{% for m in messages %}{{ m.content|wrap }}{% endfor %}";
    const char *d = tok_dir("bad", "chat_template.jinja", bad, strlen(bad));
    ck_assert_int_ne(convert_with(d, tu_path("s2"), &e), FG_OK);
    char want[8192];
    snprintf(want, sizeof want, "%s/chat_template.jinja: chat template line 2: filter 'wrap' is "
             "not supported (fg's template interpreter cannot run it)", d);
    ck_assert_str_eq(e.msg, want);
    ck_assert_int_ne(access(tu_path("s2"), F_OK), 0); /* nothing left behind */

    const char *cfg = "{\"chat_template\": \"{% include 'other.jinja' %}\"}";
    d = tok_dir("badcfg", "tokenizer_config.json", cfg, strlen(cfg));
    ck_assert_int_ne(convert_with(d, tu_path("s3"), &e), FG_OK);
    snprintf(want, sizeof want, "%s/tokenizer_config.json: chat template line 1: statement "
             "'include' is not supported (fg's template interpreter cannot run it)", d);
    ck_assert_str_eq(e.msg, want);
    tu_tmpdir_remove();
}
END_TEST

int main(void)
{
    setenv("TZ", "UTC", 1); /* the fixtures pin strftime_now to a UTC instant */
    tzset();
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("chat");
    tcase_add_test(tc, published_templates_render_as_transformers);
    tcase_add_test(tc, snippets_render_as_jinja);
    tcase_add_test(tc, unsupported_constructs_fail_at_parse_naming_them);
    tcase_add_test(tc, limits_fail_the_render_with_a_message);
    tcase_add_test(tc, bad_messages_are_refused);
    tcase_add_test(tc, template_is_selected_from_the_checkpoint_files);
    tcase_add_test(tc, convert_stores_the_template_and_refuses_one_it_cannot_run);
    tcase_add_test(tc, special_tokens_are_read_as_transformers_passes_them);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
