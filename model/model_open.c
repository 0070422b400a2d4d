/* model_open.c - the model handle (model_open.h): a store's model metadata read and parsed once.
 *
 * config.json is parsed twice over from the same bytes at open, once by model/'s reader into the
 * hyperparameters and once for its model_type string (kept as written: the reader maps aliases);
 * the tokenizer's files are read from the store when a tokenizer is asked for, since only the
 * runner and the tools that encode text need one. The chat template is read and parsed at open
 * (small, and the handle stays immutable: no lazy state shared between readers); its absence or
 * a parse failure is kept as an error that fg_model_chat returns, so a run that asks for no chat
 * never sees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_json.h"
#include "model_open.h"

struct fg_model {
    fg_store *store; /* borrowed */
    fg_hparams hp;
    const fg_arch *arch;
    char model_type[64];
    void *config;    /* model.config_json's bytes as stored (the prefix cache hashes them) */
    size_t config_len;
    int stop_from_generation; /* generation_config.json changed the stop set */
    fg_chat_template *chat;   /* the parsed chat template, or NULL: chat_err says why */
    fg_chat_tokens chat_toks; /* the special tokens the template is given */
    fg_err chat_err;
};

/* Metadata value by key (optional keys may be absent: *data NULL). */
static int meta(fg_store *store, const char *key, int optional, void **data, size_t *len,
                fg_err *err)
{
    *data = NULL;
    *len = 0;
    int rc = fg_store_meta_get(store, key, data, len, err);
    if (rc == FG_ERR_NOT_FOUND && optional)
        return FG_OK;
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, rc, "%s: the store has no %s (convert the checkpoint with its "
                          "tokenizer files)", fg_store_dir(store), key);
    return rc;
}

/* config.json's top-level "model_type" into buf (empty when it has no string one). */
static void config_model_type(const void *data, size_t len, char *buf, size_t cap)
{
    json_error_t je;
    json_t *root = fg_json_loadb(data, len, 0, &je);
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    buf[0] = 0;
    if (mt && strlen(mt) < cap)
        memcpy(buf, mt, strlen(mt) + 1);
    json_decref(root);
}

static int read_config(fg_model *m, fg_err *err)
{
    void *data;
    size_t len;
    int rc = fg_store_meta_get(m->store, "model.config_json", &data, &len, err);
    if (rc == FG_ERR_NOT_FOUND)
        return fg_err_set(err, rc, "%s: the store has no model.config_json (not a converted "
                          "model, or a conversion that did not finish)", fg_store_dir(m->store));
    if (rc)
        return rc;
    rc = fg_model_config_parse(data, len, "model.config_json (store metadata)", &m->hp, err);
    if (rc == FG_OK)
        config_model_type(data, len, m->model_type, sizeof m->model_type);
    m->config = data;
    m->config_len = len;
    if (rc) /* the stop set of transformers' generate(): generation_config.json's when it has one */
        return rc;
    rc = fg_store_meta_get(m->store, "model.generation_config_json", &data, &len, err);
    if (rc == FG_ERR_NOT_FOUND)
        return FG_OK;
    if (rc)
        return rc;
    fg_hparams before = m->hp;
    rc = fg_model_generation_config_parse(data, len, "model.generation_config_json (store "
                                          "metadata)", &m->hp, err);
    m->stop_from_generation = before.n_eos != m->hp.n_eos ||
                              memcmp(before.eos_ids, m->hp.eos_ids, sizeof m->hp.eos_ids);
    free(data);
    return rc;
}

/* The template's source as fg_chat_template_select picks it from the three metadata keys. */
static int chat_source(fg_model *m, void *d[3], size_t n[3], char **src, fg_err *err)
{
    static const char *keys[3] = {"tokenizer.chat_template_jinja",
                                  "tokenizer.chat_template_json", "tokenizer.config_json"};
    int rc = FG_OK;
    for (int i = 0; i < 3 && rc == FG_OK; i++)
        rc = meta(m->store, keys[i], 1, &d[i], &n[i], err);
    if (rc == FG_OK)
        rc = fg_chat_template_select(d[0], n[0], d[1], n[1], d[2], n[2], 0, src, err);
    if (rc == FG_ERR_NOT_FOUND)
        rc = fg_err_set(err, rc, "%s: the model has no chat template (tokenizer_config.json "
                        "chat_template, chat_template.jinja)", fg_store_dir(m->store));
    return rc;
}

/* The chat template parsed and its special tokens read, or the reason kept in m->chat_err. */
static void read_chat(fg_model *m)
{
    void *d[4] = {0};
    size_t n[4] = {0};
    char *src = NULL;
    fg_err *e = &m->chat_err;
    int rc = chat_source(m, d, n, &src, e);
    if (rc == FG_OK)
        rc = meta(m->store, "tokenizer.special_tokens_map_json", 1, &d[3], &n[3], e);
    if (rc == FG_OK)
        rc = fg_chat_tokens_read(d[2], n[2], d[3], n[3], &m->chat_toks, e);
    if (rc == FG_OK && fg_chat_template_parse(src, strlen(src), &m->chat, e)) {
        char msg[FG_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", e->msg);
        rc = fg_err_set(e, e->code, "%s: %s", fg_store_dir(m->store), msg);
    }
    if (rc == FG_OK)
        e->code = FG_OK;
    free(src);
    for (int i = 0; i < 4; i++)
        free(d[i]);
}

int fg_model_chat(const fg_model *m, const fg_chat_template **tpl, const fg_chat_tokens **toks,
                  fg_err *err)
{
    *tpl = m->chat;
    *toks = &m->chat_toks;
    if (m->chat)
        return FG_OK;
    if (err)
        *err = m->chat_err;
    return m->chat_err.code ? m->chat_err.code : FG_ERR_NOT_FOUND;
}

int fg_model_open(fg_store *store, fg_model **out, fg_err *err)
{
    *out = NULL;
    fg_model *m = calloc(1, sizeof *m);
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the model handle",
                          fg_store_dir(store));
    m->store = store;
    int rc = read_config(m, err);
    if (rc) {
        fg_model_close(m);
        return rc;
    }
    m->arch = fg_model_arch(&m->hp);
    read_chat(m);
    *out = m;
    return FG_OK;
}

void fg_model_close(fg_model *m)
{
    if (m) {
        free(m->config);
        fg_chat_template_free(m->chat);
        fg_chat_tokens_free(&m->chat_toks);
    }
    free(m);
}

const fg_hparams *fg_model_hparams(const fg_model *m)
{
    return &m->hp;
}

const fg_arch *fg_model_arch_of(const fg_model *m)
{
    return m->arch;
}

fg_store *fg_model_store(const fg_model *m)
{
    return m->store;
}

const char *fg_model_type(const fg_model *m)
{
    return m->model_type;
}

int fg_model_stop_from_generation(const fg_model *m)
{
    return m->stop_from_generation;
}

const void *fg_model_config_json(const fg_model *m, size_t *len)
{
    *len = m->config_len;
    return m->config;
}

/* The class named by metadata tokenizer.model: 0 gpt2-bpe (also when absent), 1 a tokenizer.json
 * class, 2 tiktoken-bpe (tokenizer.tiktoken_model + tokenizer.tiktoken_pattern, Kimi K2); an
 * unknown name is an error naming the store. */
static int tok_class(fg_store *store, int *json, fg_err *err)
{
    void *cls = NULL;
    size_t cn = 0;
    int rc = meta(store, "tokenizer.model", 1, &cls, &cn, err);
    *json = 0;
    if (rc == FG_OK && cls && ((cn == 13 && !memcmp(cls, "bytelevel-bpe", 13)) ||
                               (cn == 17 && !memcmp(cls, "sentencepiece-bpe", 17))))
        *json = 1;
    else if (rc == FG_OK && cls && cn == 12 && !memcmp(cls, "tiktoken-bpe", 12))
        *json = 2;
    else if (rc == FG_OK && cls && !(cn == 8 && !memcmp(cls, "gpt2-bpe", 8)))
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: metadata tokenizer.model \"%.*s\" is not "
                        "a tokenizer class fg reads", fg_store_dir(store), (int)(cn < 40 ? cn : 40),
                        (const char *)cls);
    free(cls);
    return rc;
}

int fg_model_tokenizer(const fg_model *m, fg_tok **out, fg_err *err)
{
    static const char *keys[5] = {"tokenizer.tokenizer_json", "tokenizer.vocab_json",
                                  "tokenizer.merges_txt", "tokenizer.config_json",
                                  "tokenizer.special_tokens_map_json"};
    void *d[5] = {0};
    size_t n[5] = {0};
    int json;
    int rc = tok_class(m->store, &json, err);
    if (rc == FG_OK && json == 2) { /* text/tok_tiktoken.c */
        rc = meta(m->store, "tokenizer.tiktoken_model", 0, &d[1], &n[1], err);
        if (rc == FG_OK)
            rc = meta(m->store, "tokenizer.tiktoken_pattern", 0, &d[2], &n[2], err);
        if (rc == FG_OK)
            rc = meta(m->store, keys[3], 1, &d[3], &n[3], err);
        char *pat = rc == FG_OK ? malloc(n[2] + 1) : NULL;
        if (pat) {
            memcpy(pat, d[2], n[2]);
            pat[n[2]] = '\0';
        }
        if (rc == FG_OK && !pat)
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", fg_store_dir(m->store));
        if (rc == FG_OK) {
            fg_tok_tiktoken_files f = {d[1], n[1], "tokenizer.tiktoken_model", d[3], n[3], keys[3],
                                       pat, "tokenizer.tiktoken_pattern"};
            rc = fg_tok_load_tiktoken_mem(&f, out, err);
        }
        free(pat);
        json = -1; /* loaded (or failed): neither branch below */
    }
    for (int i = json ? 0 : 1; i < 5 && rc == FG_OK && json >= 0; i++)
        if (!json || i == 0 || i >= 3)
            rc = meta(m->store, keys[i], i >= 3, &d[i], &n[i], err);
    if (rc == FG_OK && json == 1) {
        fg_tok_json_files f = {d[0], n[0], keys[0], d[3], n[3], keys[3], d[4], n[4], keys[4],
                               m->model_type[0] ? m->model_type : NULL};
        rc = fg_tok_load_json_mem(&f, out, err);
    } else if (rc == FG_OK && json == 0) {
        fg_tok_files f = {d[1], n[1], keys[1], d[2], n[2], keys[2], d[3], n[3], keys[3],
                          d[4], n[4], keys[4]};
        rc = fg_tok_load_mem(&f, out, err);
    }
    for (int i = 0; i < 5; i++)
        free(d[i]);
    return rc;
}
