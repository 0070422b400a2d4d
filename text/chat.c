/* chat.c - the public face of the chat-template interpreter (chat.h): parse once, render per
 * conversation with the variables transformers passes.
 *
 * A parsed template owns an arena holding its tree; each render has an arena of its own for
 * values and text (freed when the render returns), so a template is never written after
 * parsing and renders may share it across threads. What apply_chat_template does to the
 * inputs before rendering is done here too: message keys whose value is null are dropped, and
 * a message's reasoning (reasoning_content, thinking or reasoning, first non-null) is copied
 * to both "thinking" and "reasoning_content" (transformers' _alias_reasoning_fields).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "chat.h"
#include "fg_json.h"
#include "jinja_int.h"

struct fg_chat_template {
    jarena arena;
    jnode *body;
};

void fg_chat_template_free(fg_chat_template *t)
{
    if (!t)
        return;
    ja_free(&t->arena);
    free(t);
}

static int parse_guarded(fg_chat_template *t, const char *src, size_t len)
{
    jmp_buf jb;
    t->arena.jb = &jb;
    if (setjmp(jb))
        return FG_ERR_INVALID_ARG;
    jtoks toks = {0};
    jinja_lex(&t->arena, src, len, &toks);
    t->body = jinja_parse(&t->arena, &toks);
    return FG_OK;
}

int fg_chat_template_parse(const char *src, size_t len, fg_chat_template **out, fg_err *err)
{
    *out = NULL;
    if (!src && len)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "chat template: no source");
    if (len > FG_CHAT_MAX_TEMPLATE)
        return fg_err_set(err, FG_ERR_LIMIT, "chat template: %zu bytes, more than the %u allowed",
                          len, FG_CHAT_MAX_TEMPLATE);
    fg_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return fg_err_set(err, FG_ERR_NOMEM, "chat template: out of memory");
    fg_err local;
    t->arena.limit = 64u * len + (1u << 20);
    t->arena.err = err ? err : &local;
    int rc = parse_guarded(t, src ? src : "", len);
    t->arena.jb = NULL;
    t->arena.err = NULL;
    if (rc) {
        fg_chat_template_free(t);
        return rc;
    }
    *out = t;
    return FG_OK;
}

/* One message as transformers hands it over: null-valued keys dropped, reasoning aliased. */
static jv *normalize_message(jarena *a, json_t *m)
{
    jv *d = jv_dict(a);
    static const char *const reasoning[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *r = NULL;
    for (int i = 0; i < 3 && !r; i++) {
        json_t *x = json_object_get(m, reasoning[i]);
        r = x && !json_is_null(x) ? x : NULL;
    }
    if (r) /* {"thinking": r, **message, "reasoning_content": r} */
        jv_dict_set(a, d, jv_strz(a, "thinking"), jv_from_json(a, r));
    const char *k;
    json_t *x;
    json_object_foreach(m, k, x)
        if (!json_is_null(x))
            jv_dict_set(a, d, jv_strz(a, k), jv_from_json(a, x));
    if (r)
        jv_dict_set(a, d, jv_strz(a, "reasoning_content"), jv_from_json(a, r));
    return d;
}

static jv *load_messages(jarena *a, const char *text, size_t len)
{
    json_error_t je;
    json_t *j = fg_json_loadb(text, len, 0, &je);
    if (!j)
        ja_fail(a, 0, "messages: not JSON (%s, line %d column %d)", je.text, je.line, je.column);
    if (!json_is_array(j)) {
        json_decref(j);
        ja_fail(a, 0, "messages: expected a JSON array of message objects");
    }
    jv *l = jv_list(a, json_array_size(j));
    for (size_t i = 0; i < json_array_size(j); i++) {
        json_t *m = json_array_get(j, i);
        if (!json_is_object(m)) {
            json_decref(j);
            ja_fail(a, 0, "messages: item %zu is not an object", i);
        }
        jv_list_push(a, l, normalize_message(a, m));
    }
    json_decref(j);
    return l;
}

static void set_var(jctx *c, const char *name, jv *v) { jctx_set(c, name, v); }

static void load_extra(jctx *c, const char *text, size_t len)
{
    json_error_t je;
    json_t *j = fg_json_loadb(text, len, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        ja_fail(c->a, 0, "template variables: expected a JSON object");
    }
    const char *k;
    json_t *x;
    json_object_foreach(j, k, x)
        set_var(c, k, jv_from_json(c->a, x));
    json_decref(j);
}

/* the variables transformers passes: special tokens, then kwargs, messages, tools, ... */
static void bind_inputs(jctx *c, const fg_chat_opts *o, const char *msgs, size_t mlen)
{
    const char *names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    const char *vals[] = {o->bos_token, o->eos_token, o->pad_token, o->unk_token};
    for (int i = 0; i < 4; i++)
        if (vals[i])
            set_var(c, names[i], jv_strz(c->a, vals[i]));
    set_var(c, "tools", jv_none());
    set_var(c, "documents", jv_none());
    if (o->extra_json)
        load_extra(c, o->extra_json, o->extra_len);
    set_var(c, "messages", load_messages(c->a, msgs, mlen));
    set_var(c, "add_generation_prompt", jv_bool(o->add_generation_prompt));
}

typedef struct render_job {
    const fg_chat_template *t;
    const fg_chat_opts *o;
    const char *msgs;
    size_t mlen;
    jctx c;
    jbuf buf;
    jarena a;
} render_job;

/* The render proper, with its unwinding point; returns 0 or FG_ERR_INVALID_ARG (r->a.err set). */
static int render_guarded(render_job *r)
{
    jmp_buf jb;
    r->a.jb = &jb;
    if (setjmp(jb))
        return FG_ERR_INVALID_ARG;
    jinja_begin(&r->c);
    bind_inputs(&r->c, r->o, r->msgs, r->mlen);
    jinja_render(&r->c, r->t->body);
    return FG_OK;
}

int fg_chat_render(const fg_chat_template *t, const char *messages_json, size_t messages_len,
                   const fg_chat_opts *opts, char **out, size_t *out_len, fg_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    static const fg_chat_opts dflt;
    fg_err local;
    render_job *r = calloc(1, sizeof *r);
    if (!r)
        return fg_err_set(err, FG_ERR_NOMEM, "chat template: out of memory");
    r->t = t, r->o = opts ? opts : &dflt;
    r->msgs = messages_json ? messages_json : "[]";
    r->mlen = messages_json ? messages_len : 2;
    size_t max_out = r->o->max_output ? r->o->max_output : FG_CHAT_MAX_OUTPUT;
    r->a.err = err ? err : &local;
    r->a.limit = 8 * max_out + (64u << 20);
    r->buf = (jbuf){.a = &r->a, .limit = max_out};
    r->c = (jctx){.a = &r->a, .out = &r->buf,
                  .max_iters = r->o->max_iterations ? r->o->max_iterations : FG_CHAT_MAX_ITERATIONS,
                  .max_depth = 32, .now = r->o->now ? r->o->now : (int64_t)time(NULL)};
    int rc = render_guarded(r);
    char *s = rc == FG_OK ? malloc(r->buf.n + 1) : NULL;
    if (rc == FG_OK && !s)
        rc = fg_err_set(err, FG_ERR_NOMEM, "chat template: out of memory for %zu bytes", r->buf.n);
    if (s) {
        if (r->buf.n)
            memcpy(s, r->buf.p, r->buf.n);
        s[r->buf.n] = 0;
        *out = s;
        if (out_len)
            *out_len = r->buf.n;
    }
    ja_free(&r->a);
    free(r);
    return rc;
}

static int dup_out(const char *p, size_t n, char **src, fg_err *err)
{
    *src = malloc(n + 1);
    if (!*src)
        return fg_err_set(err, FG_ERR_NOMEM, "chat template: out of memory");
    memcpy(*src, p, n);
    (*src)[n] = 0;
    return FG_OK;
}

/* tokenizer_config.json's chat_template: a string, or [{"name", "template"}, ...] */
static int from_config_value(json_t *v, int want_tools, const char *file, char **src, fg_err *err)
{
    if (json_is_string(v))
        return dup_out(json_string_value(v), json_string_length(v), src, err);
    if (!json_is_array(v))
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: chat_template is neither a string nor a "
                          "list of named templates", file);
    json_t *pick = NULL, *item;
    size_t i;
    json_array_foreach(v, i, item) {
        const char *nm = json_string_value(json_object_get(item, "name"));
        json_t *tpl = json_object_get(item, "template");
        if (!nm || !json_is_string(tpl))
            return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: chat_template[%zu] needs a string "
                              "name and template", file, i);
        if ((!pick && !strcmp(nm, "default")) || (want_tools && !strcmp(nm, "tool_use")))
            pick = tpl;
    }
    if (!pick)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: no chat template named \"default\"", file);
    return dup_out(json_string_value(pick), json_string_length(pick), src, err);
}

static int from_json_file(const char *text, size_t len, const char *file, int want_tools,
                          char **src, fg_err *err)
{
    json_error_t je;
    json_t *j = fg_json_loadb(text, len, 0, &je);
    if (!j)
        return fg_err_set(err, FG_ERR_TOK_JSON, "%s: %s (line %d, column %d)", file, je.text,
                          je.line, je.column);
    json_t *v = json_object_get(j, "chat_template");
    int rc = v && !json_is_null(v) ? from_config_value(v, want_tools, file, src, err)
                                   : FG_ERR_NOT_FOUND;
    json_decref(j);
    return rc;
}

int fg_chat_template_select(const char *jinja, size_t jinja_len, const char *chat_json,
                            size_t chat_json_len, const char *tok_config, size_t tok_config_len,
                            int want_tools, char **src, fg_err *err)
{
    *src = NULL;
    if (jinja)
        return dup_out(jinja, jinja_len, src, err);
    int rc = FG_ERR_NOT_FOUND;
    if (chat_json)
        rc = from_json_file(chat_json, chat_json_len, "chat_template.json", want_tools, src, err);
    if (rc == FG_ERR_NOT_FOUND && tok_config)
        rc = from_json_file(tok_config, tok_config_len, "tokenizer_config.json", want_tools, src,
                            err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "the checkpoint has no chat template");
    return rc;
}

static json_t *load_obj(const char *text, size_t len, const char *file, fg_err *err)
{
    json_error_t je;
    json_t *j = fg_json_loadb(text, len, 0, &je);
    if (!j)
        fg_err_set(err, FG_ERR_TOK_JSON, "%s: %s (line %d, column %d)", file, je.text, je.line,
                   je.column);
    else if (!json_is_object(j)) {
        json_decref(j);
        j = NULL;
        fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: not a JSON object", file);
    }
    return j;
}

/* key's token text in j: a string, or an AddedToken's "content"; NULL when absent or null */
static const char *token_text(json_t *j, const char *key)
{
    json_t *v = j ? json_object_get(j, key) : NULL;
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

int fg_chat_tokens_read(const char *tok_config, size_t tok_config_len, const char *special_map,
                        size_t special_map_len, fg_chat_tokens *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *cfg = NULL, *map = NULL;
    if (tok_config && !(cfg = load_obj(tok_config, tok_config_len, "tokenizer_config.json", err)))
        return err ? err->code : FG_ERR_TOK_JSON;
    if (special_map &&
        !(map = load_obj(special_map, special_map_len, "special_tokens_map.json", err))) {
        json_decref(cfg);
        return err ? err->code : FG_ERR_TOK_JSON;
    }
    static const char *const keys[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    char **dst[] = {&out->bos, &out->eos, &out->pad, &out->unk};
    int rc = FG_OK;
    for (int i = 0; i < 4 && rc == FG_OK; i++) {
        const char *t = token_text(cfg, keys[i]);
        t = t ? t : token_text(map, keys[i]);
        if (t && !(*dst[i] = strdup(t)))
            rc = fg_err_set(err, FG_ERR_NOMEM, "chat template: out of memory");
    }
    json_decref(cfg);
    json_decref(map);
    if (rc)
        fg_chat_tokens_free(out);
    return rc;
}

void fg_chat_tokens_free(fg_chat_tokens *t)
{
    if (!t)
        return;
    free(t->bos), free(t->eos), free(t->pad), free(t->unk);
    memset(t, 0, sizeof *t);
}
