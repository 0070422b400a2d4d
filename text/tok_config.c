/* tok_config.c - special (added) tokens: tokenizer_config.json, special_tokens_map.json and
 * fg_tok_add_special.
 *
 * fg reads only the keys that change encoding or that generation needs, and ignores the rest:
 *   bos_token, eos_token, unk_token, pad_token   a string, an AddedToken object {"content": ...}
 *                                                or null; registers the token and its role
 *   additional_special_tokens                    array of strings or AddedToken objects
 *   added_tokens_decoder                         object "id" -> {"content": s, "special": b}
 *   add_bos_token                                boolean (OPT: true, prepend BOS)
 *   add_eos_token                                boolean (tokenizer.json classes only)
 *   tokenizer_class, legacy, add_prefix_space    (tokenizer.json classes only) the pipeline
 *                                                transformers builds (tok_json.c)
 * A key of the wrong type is an error naming the file and key, never silently skipped. The two
 * files share the schema; special_tokens_map.json is read second, so its roles win.
 *
 * An added token's id is its vocab.json id when the content is a vocab key (OPT's "</s>" = 2),
 * the id added_tokens_decoder gives, or else the next free id, as Hugging Face appends added
 * tokens after the vocabulary. The lstrip/rstrip/single_word/normalized flags of a config's
 * AddedToken are not applied (OPT and GPT-2 leave them false); tokenizer.json's own
 * added_tokens carry them (tok_json.c). With a tokenizer.json the model's vocabulary is left
 * alone: a new token only gets an id, a string and a place in the match list.
 */
#include "fg_json.h"
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static int find_special(const fg_tok *t, const char *s, size_t len)
{
    return tok_strmap_get(&t->special_index, s, len);
}

static int push_special(fg_tok *t, const char *s, size_t len, int32_t id, int special)
{
    if (t->n_special == t->special_cap) {
        size_t cap = t->special_cap ? 2 * t->special_cap : 16;
        tok_special *sp = realloc(t->special, cap * sizeof *sp);
        if (!sp)
            return FG_ERR_NOMEM;
        t->special = sp;
        t->special_cap = cap;
    }
    uint32_t off;
    int rc = tok_arena_put(&t->special_text, s, len, &off);
    if (rc || (rc = tok_strmap_put(&t->special_index, s, len, (int32_t)t->n_special, NULL)) ||
        (rc = tok_trie_put(&t->added[0], (const unsigned char *)s, len, (int32_t)t->n_special)))
        return rc;
    t->special[t->n_special++] = (tok_special){off, (uint32_t)len, off, (uint32_t)len, id, (uint8_t)special, 0, 0, 0, 0};
    t->added_first[0][(unsigned char)s[0]] = 1;
    return FG_OK;
}

/* Decide the id of a new added token; FG_OK or a config error. */
static int pick_id(fg_tok *t, const char *s, size_t len, int32_t forced, int32_t *id,
                   const char *file, fg_err *err)
{
    char q[200];
    int32_t v = tok_strmap_get(&t->vocab, s, len);
    if (forced < 0) {
        *id = v >= 0 ? v : t->n_ids;
        if (*id > FG_TOK_MAX_ID)
            return fg_err_set(err, FG_ERR_LIMIT, "%s: no free id for token \"%s\"", file,
                              tok_quote(q, sizeof q, s, len));
        return FG_OK;
    }
    if (v >= 0 && v != forced)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: token \"%s\" has id %d in the vocabulary, not %d",
                          file, tok_quote(q, sizeof q, s, len), v, forced);
    if (v < 0 && forced < t->n_ids && t->id_len[forced] != UINT32_MAX)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: token \"%s\": id %d already belongs to another token",
                          file, tok_quote(q, sizeof q, s, len), forced);
    *id = forced;
    return FG_OK;
}

int tok_add_token(fg_tok *t, const char *s, size_t len, int32_t forced, int special,
                  int32_t *id_out, const char *file, fg_err *err)
{
    char q[200];
    if (!s || len == 0 || len > FG_TOK_MAX_ADDED)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: added token must be 1..4096 bytes", file);
    int k = find_special(t, s, len);
    if (k >= 0) {
        int32_t id = t->special[k].id;
        if (forced >= 0 && forced != id)
            return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: token \"%s\" given ids %d and %d", file,
                              tok_quote(q, sizeof q, s, len), id, forced);
        t->id_special[id] |= (uint8_t)special;
        t->special[k].special |= (uint8_t)special;
        if (id_out)
            *id_out = id;
        return FG_OK;
    }
    int32_t id = -1;
    int rc = pick_id(t, s, len, forced, &id, file, err);
    if (rc)
        return rc;
    if (t->cls != TOK_GPT2) {  /* tokenizer.json: the model's vocabulary stays as it is */
        if (tok_strmap_get(&t->vocab, s, len) < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX)
            rc = tok_set_id(t, id, s, len, special);
        else
            t->id_special[id] |= (uint8_t)special;
        if (!rc)
            rc = tok_set_str(t, id, s, len);
    } else if (tok_strmap_get(&t->vocab, s, len) < 0) {
        rc = tok_strmap_put(&t->vocab, s, len, id, NULL);
        if (!rc)
            rc = tok_set_id(t, id, s, len, special);
    } else {
        t->id_special[id] |= (uint8_t)special;
    }
    if (!rc)
        rc = push_special(t, s, len, id, special);
    if (rc)
        return fg_err_set(err, rc, "%s: token \"%s\": %s", file, tok_quote(q, sizeof q, s, len),
                          fg_strerror(rc));
    if (id_out)
        *id_out = id;
    return FG_OK;
}

int fg_tok_add_special(fg_tok *t, const char *content, size_t len, int32_t *id_out, fg_err *err)
{
    if (!t || !content || len == 0 || len > FG_TOK_MAX_ADDED)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "fg_tok_add_special: token must be 1..4096 bytes");
    int32_t id;
    int rc = tok_add_token(t, content, len, -1, 1, &id, "fg_tok_add_special", err);
    if (!rc && t->cls != TOK_GPT2) {  /* its bytes as the decoder chain gives them */
        tok_arena tmp = {0};
        rc = tok_json_token_alone(t, id, &tmp);
        if (!rc)
            rc = tok_set_id(t, id, tmp.p, tmp.len, 1);
        tok_arena_free(&tmp);
        if (rc)
            return fg_err_set(err, rc, "fg_tok_add_special: %s", fg_strerror(rc));
    }
    if (!rc && id_out)
        *id_out = id;
    return rc;
}

/* The content of a string or {"content": string} value; 1 for null (absent). */
static int token_content(json_t *v, const char *file, const char *key, const char **s,
                         size_t *len, fg_err *err)
{
    if (json_is_null(v))
        return 1;
    json_t *c = json_is_object(v) ? json_object_get(v, "content") : v;
    if (!json_is_string(c) || json_string_length(c) == 0)
        return fg_err_set(err, FG_ERR_TOK_CONFIG,
                          "%s: \"%s\": expected a non-empty string or an object with \"content\"",
                          file, key);
    *s = json_string_value(c);
    *len = json_string_length(c);
    return FG_OK;
}

static int load_roles(fg_tok *t, json_t *root, const char *file, fg_err *err)
{
    static const char *keys[FG_TOK_N_ROLES] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (int r = 0; r < FG_TOK_N_ROLES; r++) {
        json_t *v = json_object_get(root, keys[r]);
        const char *s = NULL;
        size_t len = 0;
        if (!v)
            continue;
        int rc = token_content(v, file, keys[r], &s, &len, err);
        if (rc == 1)
            continue;
        if (rc || (rc = tok_add_token(t, s, len, -1, 1, &t->role[r], file, err)))
            return rc;
    }
    return FG_OK;
}

static int load_additional(fg_tok *t, json_t *root, const char *file, fg_err *err)
{
    json_t *arr = json_object_get(root, "additional_special_tokens");
    if (!arr || json_is_null(arr))
        return FG_OK;
    if (!json_is_array(arr))
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: \"additional_special_tokens\" is not an array",
                          file);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        const char *s = NULL;
        size_t len = 0;
        int rc = token_content(v, file, "additional_special_tokens", &s, &len, err);
        if (rc == 1)
            continue;
        if (rc || (rc = tok_add_token(t, s, len, -1, 1, NULL, file, err)))
            return rc;
    }
    return FG_OK;
}

static int parse_id(const char *s, int32_t *id)
{
    long long v = 0;
    if (!*s || strlen(s) > 9)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
    }
    if (v > FG_TOK_MAX_ID)
        return -1;
    *id = (int32_t)v;
    return 0;
}

static int load_decoder(fg_tok *t, json_t *root, const char *file, fg_err *err)
{
    json_t *obj = json_object_get(root, "added_tokens_decoder");
    if (!obj || json_is_null(obj))
        return FG_OK;
    if (!json_is_object(obj))
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: \"added_tokens_decoder\" is not an object", file);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int32_t id;
        json_t *sp = json_object_get(v, "special"), *c = json_object_get(v, "content");
        if (parse_id(key, &id))
            return fg_err_set(err, FG_ERR_TOK_CONFIG,
                              "%s: \"added_tokens_decoder\": key \"%.40s\" is not an id 0..%d", file,
                              key, FG_TOK_MAX_ID);
        if (!json_is_string(c) || json_string_length(c) == 0 || (sp && !json_is_boolean(sp)))
            return fg_err_set(err, FG_ERR_TOK_CONFIG,
                              "%s: \"added_tokens_decoder\": \"%s\": expected {\"content\": non-empty string, \"special\": bool}",
                              file, key);
        int rc = tok_add_token(t, json_string_value(c), json_string_length(c), id,
                               sp ? json_is_true(sp) : 1, NULL, file, err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* The keys transformers' tokenizer classes build their pipeline from (tok_json.c, "transformers'
 * view"): tokenizer_class, legacy, add_prefix_space. Values of another type count as absent, as
 * Python's truthiness would make most of them mean something else entirely. */
static void hf_class_keys(fg_tok *t, json_t *root)
{
    static const struct { const char *name; int cls; } classes[] = {
        {"LlamaTokenizer", TOK_HF_LLAMA}, {"LlamaTokenizerFast", TOK_HF_LLAMA},
        {"GPT2Tokenizer", TOK_HF_GPT2},   {"GPT2TokenizerFast", TOK_HF_GPT2}};
    json_t *c = json_object_get(root, "tokenizer_class"), *lg = json_object_get(root, "legacy"),
           *ps = json_object_get(root, "add_prefix_space");
    if (json_is_string(c)) {
        t->cfg_class = TOK_HF_NONE;
        for (size_t i = 0; i < sizeof classes / sizeof *classes; i++)
            if (strcmp(json_string_value(c), classes[i].name) == 0)
                t->cfg_class = classes[i].cls;
    }
    if (json_is_boolean(lg))
        t->cfg_legacy = json_is_true(lg);
    if (json_is_boolean(ps))
        t->cfg_prefix_space = json_is_true(ps);
}

int tok_load_config(fg_tok *t, const void *buf, size_t len, const char *file, fg_err *err)
{
    json_error_t je;
    json_t *root = fg_json_loadb(buf, len, 0, &je);
    if (!root)
        return tok_json_error(err, FG_ERR_TOK_JSON, file, je.line, je.column, je.text);
    int rc = FG_OK;
    json_t *bos = json_object_get(root, "add_bos_token"), *eos = json_object_get(root, "add_eos_token");
    if (!json_is_object(root))
        rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: expected a JSON object", file);
    else if (bos && !json_is_boolean(bos))
        rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: \"add_bos_token\" is not a boolean", file);
    else if (eos && !json_is_boolean(eos))
        rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: \"add_eos_token\" is not a boolean", file);
    else if (t->cls != TOK_GPT2) {  /* tokenizer.json classes: tok_json_finish applies them */
        if (json_is_boolean(bos))
            t->cfg_add_bos = json_is_true(bos);
        if (json_is_boolean(eos))
            t->cfg_add_eos = json_is_true(eos);
        hf_class_keys(t, root);
    } else if (json_is_boolean(bos))
        t->add_bos = json_is_true(bos);
    if (!rc)
        rc = load_decoder(t, root, file, err);
    if (!rc)
        rc = load_roles(t, root, file, err);
    if (!rc)
        rc = load_additional(t, root, file, err);
    json_decref(root);
    return rc;
}
