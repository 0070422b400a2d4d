/* tok_json.c - read a Hugging Face tokenizer.json into an fg_tok (the "bytelevel-bpe" and
 * "sentencepiece-bpe" classes), following the `tokenizers` crate's deserializers.
 *
 * What is read (anything else is refused with FG_ERR_UNSUPPORTED naming the JSON path):
 *   model          BPE only: vocab (object), merges ("a b" strings or [a, b] pairs), unk_token,
 *                  fuse_unk, byte_fallback, ignore_merges; dropout must be null/0 and
 *                  continuing_subword_prefix / end_of_word_suffix null or "" (Llama, Mistral and
 *                  Qwen2 leave them so)
 *   added_tokens   content, special, lstrip, rstrip, single_word, normalized. Ids are assigned
 *                  as `tokenizers` assigns them when it loads the file (the "id" field is only
 *                  a hint there too): the model's id when the content is a vocab key, else the
 *                  next id after the model vocabulary, in file order
 *   normalizer     Sequence, Prepend, Replace (String or Regex), NFC, NFD, NFKC, NFKD, null
 *   pre_tokenizer  Sequence, Split (String or Regex; all five behaviors; invert), Digits
 *                  (char::is_numeric, here \p{N}: each digit isolated with individual_digits, else
 *                  runs of them, Contiguous; as a Split of \p{N} or \p{N}+, Isolated), ByteLevel
 *                  (must come last: it hands byte-level symbols to the model), Metaspace
 *                  (prepend_scheme first/always/never or the older add_prefix_space; split), null
 *   post_processor Sequence, ByteLevel (offsets only: nothing to do), TemplateProcessing (the
 *                  single template), RobertaProcessing / BertProcessing (cls $A sep), null
 *   decoder        Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, null
 * truncation and padding are batch settings of the Python API and are ignored.
 *
 * The class is "bytelevel-bpe" when the pre-tokenizer has a ByteLevel step, else
 * "sentencepiece-bpe" (character-level BPE, typically with '\u2581' and byte fallback).
 * Patterns are written for Oniguruma; tok_regex.c translates them for PCRE2.
 * In these classes t->vocab holds the model's vocabulary only (the BPE model never sees added
 * tokens); added tokens live in t->special with their flags.
 */
#include "fg_json.h"
#include "tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define NO_TOKEN UINT32_MAX

typedef struct jctx { fg_tok *t; const char *file; fg_err *err; } jctx;

static int bad(jctx *c, int code, const char *path, const char *what)
{
    return fg_err_set(c->err, code, "%s: %s: %s", c->file, path, what);
}

/* Optional boolean member: absent or null gives def. */
static int get_bool(jctx *c, json_t *o, const char *key, int def, int *v, const char *path)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) {
        *v = def;
        return FG_OK;
    }
    if (!json_is_boolean(x)) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad(c, FG_ERR_TOK_CONFIG, p, "expected a boolean");
    }
    *v = json_is_true(x);
    return FG_OK;
}

static const char *get_type(json_t *o)
{
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : NULL;
}

static char *dup_str(json_t *s, size_t *len)
{
    *len = json_string_length(s);
    char *p = malloc(*len + 1);
    if (p) {
        memcpy(p, json_string_value(s), *len);
        p[*len] = '\0';
    }
    return p;
}

/* A one-character string (Metaspace replacement, Strip content). */
static int one_char(jctx *c, json_t *o, const char *key, const char *path, char **a, size_t *len)
{
    json_t *x = json_object_get(o, key);
    uint32_t cp;
    if (!json_is_string(x) || json_string_length(x) == 0 ||
        tok_utf8_next((const unsigned char *)json_string_value(x), json_string_length(x), &cp) !=
            json_string_length(x)) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad(c, FG_ERR_TOK_CONFIG, p, "expected a one-character string");
    }
    if (!(*a = dup_str(x, len)))
        return bad(c, FG_ERR_NOMEM, path, "out of memory");
    return FG_OK;
}

/* {"String": s} or {"Regex": r}: compile into st->re / st->md. */
static int get_pattern(jctx *c, json_t *o, const char *path, tok_step *st)
{
    json_t *p = json_object_get(o, "pattern"), *s = json_object_get(p, "String"),
           *r = json_object_get(p, "Regex");
    json_t *v = s ? s : r;
    char where[200];
    snprintf(where, sizeof where, "%s: %s.pattern", c->file, path);
    if (!json_is_object(p) || !json_is_string(v) || (s && r))
        return bad(c, FG_ERR_TOK_CONFIG, path, "pattern: expected {\"String\": s} or {\"Regex\": r}");
    if (json_string_length(v) == 0)
        return bad(c, FG_ERR_UNSUPPORTED, path, "pattern: an empty pattern is not supported");
    if (s && !(st->lit = dup_str(v, &st->lit_len)))
        return bad(c, FG_ERR_NOMEM, path, "out of memory");
    return tok_regex_compile(json_string_value(v), json_string_length(v), s != NULL, &st->re,
                             &st->md, where, c->err);
}

static tok_step *new_step(jctx *c, tok_step *arr, int *n, const char *path, int *rc)
{
    if (*n == TOK_MAX_STEPS) {
        *rc = bad(c, FG_ERR_LIMIT, path, "more than 16 steps");
        return NULL;
    }
    tok_step *st = &arr[(*n)++];
    memset(st, 0, sizeof *st);
    *rc = FG_OK;
    return st;
}

static int scheme_of(jctx *c, json_t *o, const char *path, int *scheme)
{
    json_t *ps = json_object_get(o, "prepend_scheme"), *aps = json_object_get(o, "add_prefix_space");
    *scheme = PREPEND_ALWAYS;
    if (ps && !json_is_null(ps)) {
        const char *v = json_is_string(ps) ? json_string_value(ps) : "";
        if (strcmp(v, "first") == 0)
            *scheme = PREPEND_FIRST;
        else if (strcmp(v, "never") == 0)
            *scheme = PREPEND_NEVER;
        else if (strcmp(v, "always") != 0)
            return bad(c, FG_ERR_TOK_CONFIG, path, "prepend_scheme: expected first, always or never");
    }
    if (json_is_false(aps)) {
        if (*scheme != PREPEND_NEVER && ps && !json_is_null(ps))
            return bad(c, FG_ERR_TOK_CONFIG, path, "add_prefix_space does not match prepend_scheme");
        *scheme = PREPEND_NEVER;
    }
    return FG_OK;
}

/* A "Sequence" of steps: each element of o[key] parsed by fn, its path "PATH.key[i]". */
typedef int (*step_fn)(jctx *c, json_t *o, const char *path);
static int parse_sequence(jctx *c, json_t *o, const char *key, const char *path, step_fn fn)
{
    json_t *arr = json_object_get(o, key), *x;
    size_t i;
    if (!json_is_array(arr)) {
        char what[64];
        snprintf(what, sizeof what, "%s: expected an array", key);
        return bad(c, FG_ERR_TOK_CONFIG, path, what);
    }
    json_array_foreach(arr, i, x) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s[%zu]", path, key, i);
        int rc = fn(c, x, p);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* ---- normalizer */

static int parse_normalizer(jctx *c, json_t *o, const char *path)
{
    fg_tok *t = c->t;
    if (!o || json_is_null(o))
        return FG_OK;
    const char *ty = json_is_object(o) ? get_type(o) : NULL;
    if (!ty)
        return bad(c, FG_ERR_TOK_CONFIG, path, "expected an object with a \"type\"");
    int rc;
    if (strcmp(ty, "Sequence") == 0) {
        return parse_sequence(c, o, "normalizers", path, parse_normalizer);
    }
    tok_step *st = new_step(c, t->norm, &t->n_norm, path, &rc);
    if (!st)
        return rc;
    if (strcmp(ty, "Prepend") == 0) {
        json_t *s = json_object_get(o, "prepend");
        st->kind = ST_PREPEND;
        if (!json_is_string(s))
            return bad(c, FG_ERR_TOK_CONFIG, path, "prepend: expected a string");
        return (st->a = dup_str(s, &st->a_len)) ? FG_OK : bad(c, FG_ERR_NOMEM, path, "out of memory");
    }
    if (strcmp(ty, "Replace") == 0) {
        json_t *s = json_object_get(o, "content");
        st->kind = ST_REPLACE;
        if (!json_is_string(s))
            return bad(c, FG_ERR_TOK_CONFIG, path, "content: expected a string");
        if (!(st->a = dup_str(s, &st->a_len)))
            return bad(c, FG_ERR_NOMEM, path, "out of memory");
        return get_pattern(c, o, path, st);
    }
    static const char *uni[4] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int k = 0; k < 4; k++)
        if (strcmp(ty, uni[k]) == 0) {
            st->kind = ST_NFC + k;
            return FG_OK;
        }
    char msg[120];
    snprintf(msg, sizeof msg, "normalizer type \"%.40s\" is not supported", ty);
    return bad(c, FG_ERR_UNSUPPORTED, path, msg);
}

/* ---- pre-tokenizer */

static int parse_split(jctx *c, json_t *o, const char *path, tok_step *st)
{
    static const char *names[5] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                   "Contiguous"};
    json_t *b = json_object_get(o, "behavior");
    st->kind = ST_SPLIT;
    st->behavior = -1;
    for (int k = 0; k < 5 && json_is_string(b); k++)
        if (strcmp(json_string_value(b), names[k]) == 0)
            st->behavior = k;
    if (st->behavior < 0)
        return bad(c, FG_ERR_TOK_CONFIG, path, "behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
    int rc = get_bool(c, o, "invert", 0, &st->invert, path);
    return rc ? rc : get_pattern(c, o, path, st);
}

static int parse_pre(jctx *c, json_t *o, const char *path)
{
    fg_tok *t = c->t;
    if (!o || json_is_null(o))
        return FG_OK;
    const char *ty = json_is_object(o) ? get_type(o) : NULL;
    if (!ty)
        return bad(c, FG_ERR_TOK_CONFIG, path, "expected an object with a \"type\"");
    int rc;
    if (strcmp(ty, "Sequence") == 0) {
        return parse_sequence(c, o, "pretokenizers", path, parse_pre);
    }
    if (t->byte_level)
        return bad(c, FG_ERR_UNSUPPORTED, path, "a pre-tokenizer after ByteLevel is not supported");
    tok_step *st = new_step(c, t->pre, &t->n_pre, path, &rc);
    if (!st)
        return rc;
    if (strcmp(ty, "Split") == 0)
        return parse_split(c, o, path, st);
    if (strcmp(ty, "Digits") == 0) {  /* DeepSeek LLM / V2: numbers one digit a piece */
        int one;
        if ((rc = get_bool(c, o, "individual_digits", 0, &one, path)))
            return rc;
        st->kind = ST_SPLIT;
        st->behavior = SPLIT_ISOLATED;
        return one ? tok_regex_compile("\\p{N}", 5, 0, &st->re, &st->md, path, c->err)
                   : tok_regex_compile("\\p{N}+", 6, 0, &st->re, &st->md, path, c->err);
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        int use_regex;
        st->kind = ST_BYTELEVEL;
        t->byte_level = 1;
        if ((rc = get_bool(c, o, "add_prefix_space", 1, &st->prefix_space, path)) ||
            (rc = get_bool(c, o, "use_regex", 1, &use_regex, path)))
            return rc;
        if (!use_regex)
            return FG_OK;
        static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
        return tok_regex_compile(gpt2, sizeof gpt2 - 1, 0, &st->re, &st->md, "ByteLevel", c->err);
    }
    if (strcmp(ty, "Metaspace") == 0) {
        st->kind = ST_METASPACE;
        if ((rc = one_char(c, o, "replacement", path, &st->a, &st->a_len)) ||
            (rc = scheme_of(c, o, path, &st->scheme)))
            return rc;
        return get_bool(c, o, "split", 1, &st->split, path);
    }
    char msg[120];
    snprintf(msg, sizeof msg, "pre-tokenizer type \"%.40s\" is not supported", ty);
    return bad(c, FG_ERR_UNSUPPORTED, path, msg);
}

/* ---- decoder */

static int get_uint(jctx *c, json_t *o, const char *key, const char *path, unsigned *v)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1 << 20)
    {
        char p[160];
        snprintf(p, sizeof p, "%s.%s", path, key);
        return bad(c, FG_ERR_TOK_CONFIG, p, "expected an integer 0..1048576");
    }
    *v = (unsigned)json_integer_value(x);
    return FG_OK;
}

static int parse_decoder(jctx *c, json_t *o, const char *path)
{
    fg_tok *t = c->t;
    if (!o || json_is_null(o))
        return FG_OK;
    const char *ty = json_is_object(o) ? get_type(o) : NULL;
    if (!ty)
        return bad(c, FG_ERR_TOK_CONFIG, path, "expected an object with a \"type\"");
    int rc;
    t->has_decoder = 1;
    if (strcmp(ty, "Sequence") == 0) {
        return parse_sequence(c, o, "decoders", path, parse_decoder);
    }
    tok_step *st = new_step(c, t->dec, &t->n_dec, path, &rc);
    if (!st)
        return rc;
    if (strcmp(ty, "ByteLevel") == 0) {
        st->kind = ST_D_BYTELEVEL;
        return FG_OK;
    }
    if (strcmp(ty, "ByteFallback") == 0 || strcmp(ty, "Fuse") == 0) {
        st->kind = ty[0] == 'B' ? ST_D_BYTEFALLBACK : ST_D_FUSE;
        return FG_OK;
    }
    if (strcmp(ty, "Replace") == 0) {
        json_t *s = json_object_get(o, "content");
        st->kind = ST_D_REPLACE;
        if (!json_is_string(s))
            return bad(c, FG_ERR_TOK_CONFIG, path, "content: expected a string");
        if (!(st->a = dup_str(s, &st->a_len)))
            return bad(c, FG_ERR_NOMEM, path, "out of memory");
        return get_pattern(c, o, path, st);
    }
    if (strcmp(ty, "Strip") == 0) {
        st->kind = ST_D_STRIP;
        if ((rc = one_char(c, o, "content", path, &st->a, &st->a_len)) ||
            (rc = get_uint(c, o, "start", path, &st->start)))
            return rc;
        return get_uint(c, o, "stop", path, &st->stop);
    }
    if (strcmp(ty, "Metaspace") == 0) {
        st->kind = ST_D_METASPACE;
        if ((rc = one_char(c, o, "replacement", path, &st->a, &st->a_len)))
            return rc;
        return scheme_of(c, o, path, &st->scheme);
    }
    char msg[120];
    snprintf(msg, sizeof msg, "decoder type \"%.40s\" is not supported", ty);
    return bad(c, FG_ERR_UNSUPPORTED, path, msg);
}

/* ---- model */

static int vocab_entries(jctx *c, json_t *vocab)
{
    fg_tok *t = c->t;
    const char *key;
    json_t *val;
    char q[200], q2[200];
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return bad(c, FG_ERR_TOK_VOCAB, "model.vocab", "expected a non-empty object of token -> id");
    t->n_model = (int32_t)json_object_size(vocab);
    json_object_foreach(vocab, key, val) {
        size_t klen = strlen(key);
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > FG_TOK_MAX_ID)
            return fg_err_set(c->err, FG_ERR_TOK_VOCAB, "%s: model.vocab: token \"%s\": id is not an integer 0..%d",
                              c->file, tok_quote(q, sizeof q, key, klen), FG_TOK_MAX_ID);
        int32_t id = (int32_t)json_integer_value(val);
        if (id < t->n_ids && t->id_len[id] != NO_TOKEN)
            return fg_err_set(c->err, FG_ERR_TOK_VOCAB, "%s: model.vocab: tokens \"%s\" and \"%s\" share id %d",
                              c->file, tok_quote(q, sizeof q, t->id_str.p + t->id_soff[id], t->id_slen[id]),
                              tok_quote(q2, sizeof q2, key, klen), id);
        int rc = tok_strmap_put(&t->vocab, key, klen, id, NULL);
        if (!rc)
            rc = tok_set_id(t, id, "", 0, 0);
        if (!rc)
            rc = tok_set_str(t, id, key, klen);
        if (rc)
            return bad(c, rc, "model.vocab", fg_strerror(rc));
    }
    return FG_OK;
}

static int one_merge(jctx *c, const char *a, size_t la, const char *b, size_t lb, size_t i,
                     char *cat)
{
    fg_tok *t = c->t;
    char q[200];
    int32_t ia = tok_strmap_get(&t->vocab, a, la), ib = tok_strmap_get(&t->vocab, b, lb);
    memcpy(cat, a, la);
    memcpy(cat + la, b, lb);
    int32_t m = tok_strmap_get(&t->vocab, cat, la + lb);
    const char *miss = ia < 0 ? a : ib < 0 ? b : m < 0 ? cat : NULL;
    if (miss)
        return fg_err_set(c->err, FG_ERR_TOK_MERGES, "%s: model.merges[%zu]: token \"%s\" is not in the vocabulary",
                          c->file, i, tok_quote(q, sizeof q, miss, ia < 0 ? la : ib < 0 ? lb : la + lb));
    if (tok_pairmap_put(&t->merges, ia, ib, t->n_merges, m))
        return bad(c, FG_ERR_NOMEM, "model.merges", "out of memory");
    t->n_merges++;
    return FG_OK;
}

static int merge_entry(jctx *c, json_t *x, size_t i, char **cat, size_t *cat_cap)
{
    const char *a, *b;
    size_t la, lb;
    char q[200];
    if (json_is_string(x)) {  /* legacy "a b": split at every space, exactly two parts */
        const char *s = json_string_value(x), *sp = strchr(s, ' ');
        size_t n = json_string_length(x);
        if (n >= 8 && memcmp(s, "#version", 8) == 0)
            return 1;
        if (!sp || strchr(sp + 1, ' ') || memchr(s, 0, n))
            return fg_err_set(c->err, FG_ERR_TOK_MERGES, "%s: model.merges[%zu]: expected \"a b\" (two tokens, one space), got \"%s\"",
                              c->file, i, tok_quote(q, sizeof q, s, n));
        a = s, la = (size_t)(sp - s), b = sp + 1, lb = n - la - 1;
    } else if (json_is_array(x) && json_array_size(x) == 2 &&
               json_is_string(json_array_get(x, 0)) && json_is_string(json_array_get(x, 1))) {
        a = json_string_value(json_array_get(x, 0)), la = json_string_length(json_array_get(x, 0));
        b = json_string_value(json_array_get(x, 1)), lb = json_string_length(json_array_get(x, 1));
    } else {
        return fg_err_set(c->err, FG_ERR_TOK_MERGES, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]",
                          c->file, i);
    }
    if (la + lb > *cat_cap) {
        char *p = realloc(*cat, la + lb);
        if (!p)
            return bad(c, FG_ERR_NOMEM, "model.merges", "out of memory");
        *cat = p;
        *cat_cap = la + lb;
    }
    return one_merge(c, a, la, b, lb, i, *cat);
}

static int model_merges(jctx *c, json_t *merges)
{
    if (!json_is_array(merges))
        return bad(c, FG_ERR_TOK_MERGES, "model.merges", "expected an array");
    char *cat = NULL;
    size_t cap = 0, i;
    json_t *x;
    int rc = FG_OK;
    json_array_foreach(merges, i, x) {
        if (c->t->n_merges == UINT32_MAX)
            rc = bad(c, FG_ERR_LIMIT, "model.merges", "too many merges");
        else
            rc = merge_entry(c, x, i, &cat, &cap);
        if (rc == 1)
            rc = FG_OK;
        if (rc)
            break;
    }
    free(cat);
    return rc;
}

static int parse_model(jctx *c, json_t *m)
{
    fg_tok *t = c->t;
    int rc;
    if (!json_is_object(m))
        return bad(c, FG_ERR_TOK_CONFIG, "model", "expected an object");
    const char *ty = get_type(m);
    if (ty && strcmp(ty, "BPE") != 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "model type \"%.40s\" is not supported (only BPE)", ty);
        return bad(c, FG_ERR_UNSUPPORTED, "model.type", msg);
    }
    json_t *d = json_object_get(m, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0.0))
        return bad(c, FG_ERR_UNSUPPORTED, "model.dropout", "BPE dropout is not supported");
    static const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(m, affix[k]);
        if (a && !json_is_null(a) && !(json_is_string(a) && json_string_length(a) == 0)) {
            char p[64];
            snprintf(p, sizeof p, "model.%s", affix[k]);
            return bad(c, FG_ERR_UNSUPPORTED, p, "subword affixes are not supported");
        }
    }
    if ((rc = get_bool(c, m, "fuse_unk", 0, &t->fuse_unk, "model")) ||
        (rc = get_bool(c, m, "byte_fallback", 0, &t->byte_fallback, "model")) ||
        (rc = get_bool(c, m, "ignore_merges", 0, &t->ignore_merges, "model")))
        return rc;
    if ((rc = vocab_entries(c, json_object_get(m, "vocab"))) ||
        (rc = model_merges(c, json_object_get(m, "merges"))))
        return rc;
    json_t *unk = json_object_get(m, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk))
            return bad(c, FG_ERR_TOK_CONFIG, "model.unk_token", "expected a string or null");
        t->unk_id = tok_strmap_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return bad(c, FG_ERR_TOK_VOCAB, "model.unk_token", "not in the vocabulary");
    }
    return FG_OK;
}

/* ---- added tokens */

static int find_added(const fg_tok *t, const char *s, size_t len)
{
    return tok_strmap_get(&t->special_index, s, len);
}

static int push_added(jctx *c, const char *s, size_t len, int32_t id, const uint8_t fl[5])
{
    fg_tok *t = c->t;
    if (t->n_special == t->special_cap) {
        size_t cap = t->special_cap ? 2 * t->special_cap : 16;
        tok_special *sp = realloc(t->special, cap * sizeof *sp);
        if (!sp)
            return FG_ERR_NOMEM;
        t->special = sp;
        t->special_cap = cap;
    }
    uint32_t off, moff = 0, mlen = (uint32_t)len;
    int rc = tok_arena_put(&t->special_text, s, len, &off);
    if (rc)
        return rc;
    moff = off;
    if (fl[4] && t->n_norm) {  /* normalized: match the content as the normalizer writes it */
        const unsigned char *ns;
        size_t nl;
        if ((rc = tok_normalize(t, (const unsigned char *)s, len, &ns, &nl)) ||
            (rc = tok_arena_put(&t->special_text, ns, nl, &moff)))
            return rc;
        mlen = (uint32_t)nl;
    }
    if ((rc = tok_strmap_put(&t->special_index, s, len, (int32_t)t->n_special, NULL)) ||
        (mlen && (rc = tok_trie_put(&t->added[fl[4]], (const unsigned char *)t->special_text.p + moff,
                                    mlen, (int32_t)t->n_special))))
        return rc;
    t->special[t->n_special++] = (tok_special){off, (uint32_t)len, moff, mlen, id, fl[0], fl[1],
                                               fl[2], fl[3], fl[4]};
    if (mlen)
        t->added_first[fl[4]][(unsigned char)t->special_text.p[moff]] = 1;
    t->n_normalized += fl[4];
    return FG_OK;
}

static int added_entry(jctx *c, json_t *x, size_t i, int32_t *next_id)
{
    fg_tok *t = c->t;
    static const char *keys[5] = {"special", "lstrip", "rstrip", "single_word", "normalized"};
    char path[64], q[200];
    uint8_t fl[5];
    int rc;
    snprintf(path, sizeof path, "added_tokens[%zu]", i);
    json_t *ct = json_object_get(x, "content");
    if (!json_is_object(x) || !json_is_string(ct))
        return bad(c, FG_ERR_TOK_CONFIG, path, "expected an object with a string \"content\"");
    for (int k = 0; k < 5; k++) {
        int v;
        if ((rc = get_bool(c, x, keys[k], k == 4 ? !fl[0] : 0, &v, path)))
            return rc;
        fl[k] = (uint8_t)v;
    }
    const char *s = json_string_value(ct);
    size_t len = json_string_length(ct);
    if (len > FG_TOK_MAX_ADDED) /* matching in text costs text length x token length */
        return bad(c, FG_ERR_LIMIT, path, "content over " FG_TOK_MAX_ADDED_STR " bytes");
    if (len == 0 || find_added(t, s, len) >= 0)
        return FG_OK;  /* tokenizers ignores empty tokens; a repeat keeps its first id */
    int32_t id = tok_strmap_get(&t->vocab, s, len);
    if (id < 0) {
        id = (*next_id)++;
        if (id > FG_TOK_MAX_ID)
            return bad(c, FG_ERR_LIMIT, path, "no free id");
        if (id < t->n_ids && t->id_len[id] != NO_TOKEN)
            return fg_err_set(c->err, FG_ERR_TOK_CONFIG, "%s: %s: token \"%s\" would get id %d, which the vocabulary already uses",
                              c->file, path, tok_quote(q, sizeof q, s, len), id);
        if ((rc = tok_set_id(t, id, "", 0, 0)) || (rc = tok_set_str(t, id, s, len)))
            return bad(c, rc, path, fg_strerror(rc));
    } else if ((rc = tok_set_str(t, id, s, len))) {
        return bad(c, rc, path, fg_strerror(rc));
    }
    t->id_special[id] = fl[0];
    if ((rc = push_added(c, s, len, id, fl)))
        return bad(c, rc, path, fg_strerror(rc));
    /* decoding sees a normalized token as the normalizer wrote it (simple_id_to_token) */
    const tok_special *sp = &t->special[t->n_special - 1];
    if (sp->normalized && (rc = tok_set_str(t, id, t->special_text.p + sp->moff, sp->mlen)))
        return bad(c, rc, path, fg_strerror(rc));
    return FG_OK;
}

static int parse_added(jctx *c, json_t *arr)
{
    if (!arr || json_is_null(arr))
        return FG_OK;
    if (!json_is_array(arr))
        return bad(c, FG_ERR_TOK_CONFIG, "added_tokens", "expected an array");
    int32_t next_id = c->t->n_model;  /* tokenizers: the model's vocabulary size (entries) */
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        int rc = added_entry(c, x, i, &next_id);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* ---- post-processor: the ids the single template puts around $A */

static int push_ids(int32_t **v, size_t *n, const int32_t *ids, size_t k, int front)
{
    if (k == 0)
        return FG_OK;
    int32_t *p = realloc(*v, (*n + k + 1) * sizeof *p);
    if (!p)
        return FG_ERR_NOMEM;
    if (front) {
        memmove(p + k, p, *n * sizeof *p);
        memcpy(p, ids, k * sizeof *p);
    } else {
        memcpy(p + *n, ids, k * sizeof *p);
    }
    *v = p;
    *n += k;
    return FG_OK;
}

static int special_ids(jctx *c, json_t *specials, const char *name, const char *path, int32_t **ids,
                       size_t *n)
{
    json_t *e = json_object_get(specials, name), *arr = json_object_get(e, "ids"), *x;
    size_t i;
    *n = 0;
    if (!json_is_array(arr) || json_array_size(arr) > 64)
        return bad(c, FG_ERR_TOK_CONFIG, path, "special_tokens: a template token has no \"ids\" array");
    *ids = malloc((json_array_size(arr) + 1) * sizeof **ids);
    if (!*ids)
        return bad(c, FG_ERR_NOMEM, path, "out of memory");
    json_array_foreach(arr, i, x) {
        json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (v < 0 || v >= c->t->n_ids || c->t->id_len[v] == NO_TOKEN)
            return bad(c, FG_ERR_TOK_CONFIG, path, "special_tokens: an id is not a token");
        (*ids)[(*n)++] = (int32_t)v;
    }
    return FG_OK;
}

static int parse_template(jctx *c, json_t *o, const char *path)
{
    fg_tok *t = c->t;
    json_t *single = json_object_get(o, "single"), *specials = json_object_get(o, "special_tokens"), *x;
    int32_t *pre = NULL, *suf = NULL;
    size_t npre = 0, nsuf = 0, i;
    int seen_a = 0, rc = FG_OK;
    if (!json_is_array(single))
        return bad(c, FG_ERR_TOK_CONFIG, path, "single: expected an array");
    json_array_foreach(single, i, x) {
        json_t *sp = json_object_get(x, "SpecialToken"), *sq = json_object_get(x, "Sequence");
        if (sq && json_is_string(json_object_get(sq, "id")) &&
            strcmp(json_string_value(json_object_get(sq, "id")), "A") == 0 && !seen_a) {
            seen_a = 1;
            continue;
        }
        if (!sp || !json_is_string(json_object_get(sp, "id"))) {
            rc = bad(c, FG_ERR_TOK_CONFIG, path, "single: expected SpecialToken items and one Sequence A");
            break;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        rc = special_ids(c, specials, json_string_value(json_object_get(sp, "id")), path, &ids, &n);
        if (!rc)
            rc = seen_a ? push_ids(&suf, &nsuf, ids, n, 0) : push_ids(&pre, &npre, ids, n, 0);
        free(ids);
        if (rc)
            break;
    }
    if (!rc && !seen_a)
        rc = bad(c, FG_ERR_TOK_CONFIG, path, "single: no Sequence A");
    /* a later processor wraps what the earlier ones produced */
    if (!rc && ((rc = push_ids(&t->post_pre, &t->n_post_pre, pre, npre, 1)) ||
                (rc = push_ids(&t->post_suf, &t->n_post_suf, suf, nsuf, 0))))
        rc = bad(c, rc, path, fg_strerror(rc));
    free(pre);
    free(suf);
    return rc;
}

static int pair_id(jctx *c, json_t *o, const char *key, const char *path, int32_t *id)
{
    json_t *p = json_object_get(o, key), *v = json_array_get(p, 1);
    if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(v) ||
        json_integer_value(v) < 0 || json_integer_value(v) >= c->t->n_ids ||
        c->t->id_len[json_integer_value(v)] == NO_TOKEN)
        return bad(c, FG_ERR_TOK_CONFIG, path, "cls/sep: expected [token, id] naming a token");
    *id = (int32_t)json_integer_value(v);
    return FG_OK;
}

static int parse_post(jctx *c, json_t *o, const char *path)
{
    fg_tok *t = c->t;
    if (!o || json_is_null(o))
        return FG_OK;
    const char *ty = json_is_object(o) ? get_type(o) : NULL;
    if (!ty)
        return bad(c, FG_ERR_TOK_CONFIG, path, "expected an object with a \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        json_t *arr = json_object_get(o, "processors"), *x;
        size_t i;
        if (!json_is_array(arr))
            return bad(c, FG_ERR_TOK_CONFIG, path, "processors: expected an array");
        json_array_foreach(arr, i, x) {
            char p[160];
            snprintf(p, sizeof p, "%s.processors[%zu]", path, i);
            int rc = parse_post(c, x, p);
            if (rc)
                return rc;
        }
        return FG_OK;
    }
    if (strcmp(ty, "ByteLevel") == 0)
        return FG_OK;
    if (strcmp(ty, "TemplateProcessing") == 0)
        return parse_template(c, o, path);
    if (strcmp(ty, "RobertaProcessing") == 0 || strcmp(ty, "BertProcessing") == 0) {
        int32_t cls, sep;
        int rc = pair_id(c, o, "cls", path, &cls);
        if (!rc)
            rc = pair_id(c, o, "sep", path, &sep);
        if (!rc && ((rc = push_ids(&t->post_pre, &t->n_post_pre, &cls, 1, 1)) ||
                    (rc = push_ids(&t->post_suf, &t->n_post_suf, &sep, 1, 0))))
            rc = bad(c, rc, path, fg_strerror(rc));
        return rc;
    }
    char msg[120];
    snprintf(msg, sizeof msg, "post-processor type \"%.40s\" is not supported", ty);
    return bad(c, FG_ERR_UNSUPPORTED, path, msg);
}

/* ---- the whole file */

int tok_load_json(fg_tok *t, const char *buf, size_t len, const char *name, fg_err *err)
{
    json_error_t je;
    json_t *root = fg_json_loadb(buf, len, 0, &je);
    if (!root)
        return tok_json_error(err, FG_ERR_TOK_JSON, name, je.line, je.column, je.text);
    jctx c = {t, name, err};
    int rc = FG_OK;
    t->cls = TOK_SPBPE;
    t->unk_id = -1;
    t->cfg_add_bos = t->cfg_add_eos = t->cfg_legacy = t->cfg_prefix_space = -1;
    if (!json_is_object(root))
        rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: expected a JSON object", name);
    else if (!json_object_get(root, "model"))
        rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: no \"model\"", name);
    if (!rc)
        rc = parse_model(&c, json_object_get(root, "model"));
    if (!rc)
        rc = parse_normalizer(&c, json_object_get(root, "normalizer"), "normalizer");
    if (!rc)
        rc = parse_pre(&c, json_object_get(root, "pre_tokenizer"), "pre_tokenizer");
    if (!rc)
        rc = parse_added(&c, json_object_get(root, "added_tokens"));
    if (!rc)
        rc = parse_post(&c, json_object_get(root, "post_processor"), "post_processor");
    if (!rc)
        rc = parse_decoder(&c, json_object_get(root, "decoder"), "decoder");
    if (t->byte_level)
        t->cls = TOK_BYTELEVEL;
    json_decref(root);
    return rc;
}

/* The byte-level decoding of a token string: its bytes when every character is a byte-level
 * symbol, else the string itself (the ByteLevel decoder's rule). */
size_t tok_bytelevel_bytes(const char *s, size_t len, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += tok_utf8_next(u + i, len - i, &cp);
        int b = cp == UINT32_MAX ? -1 : tok_cp_to_byte(cp);
        if (b < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[o++] = (char)b;
    }
    return o;
}

static int model_tables(fg_tok *t)
{
    char key[8];
    for (int b = 0; b < 256; b++) {
        snprintf(key, sizeof key, "<0x%02X>", b);
        t->fb_id[b] = tok_strmap_get(&t->vocab, key, 6);
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        char u[2] = {(char)cp, 0};
        size_t n = 1;
        if (cp >= 0x80) {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        t->byte_id[b] = tok_strmap_get(&t->vocab, u, n);
        memcpy(t->bl_sym[b], u, 2);
        t->bl_sym[b][2] = (uint8_t)n;
        if (b < 128) {
            key[0] = (char)b;
            t->ascii_id[b] = tok_strmap_get(&t->vocab, key, 1);
        }
    }
    return FG_OK;
}

/* Each id's bytes for fg_tok_token_bytes and the fast decode path. */
static int id_bytes_all(fg_tok *t, fg_err *err)
{
    tok_arena tmp = {0};
    int rc = FG_OK;
    for (int32_t id = 0; id < t->n_ids && !rc; id++) {
        if (t->id_len[id] == NO_TOKEN)
            continue;
        uint32_t off;
        if (t->fast_decode) {  /* the common case, without the chain's allocations */
            tmp.len = 0;
            rc = tok_arena_put(&tmp, t->id_str.p + t->id_soff[id], t->id_slen[id], &off);
            if (!rc)
                tmp.len = tok_bytelevel_bytes(t->id_str.p + t->id_soff[id], t->id_slen[id], tmp.p);
        } else {
            rc = tok_json_token_alone(t, id, &tmp);
        }
        if (!rc)
            rc = tok_set_id(t, id, tmp.p, tmp.len, t->id_special[id]);
    }
    tok_arena_free(&tmp);
    return rc ? fg_err_set(err, rc, "tokenizer: %s", fg_strerror(rc)) : FG_OK;
}

static int all_meta(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 3)
        if (n - i < 3 || memcmp(s + i, "\xe2\x96\x81", 3) != 0)
            return 0;
    return 1;
}

/* Whether a long SentencePiece-style piece may be cut before every U+2581 that follows
 * another character (so that each word is merged, and cached, on its own): exact when U+2581 is
 * a token (no unk or byte fallback run reaches across) and every merge whose right token
 * starts with U+2581 has a left token made only of U+2581 (SentencePiece vocabularies: words
 * start with it, runs of it merge). Not with ignore_merges, which looks whole pieces up. */
static int sp_cuttable(const fg_tok *t)
{
    if (t->cls != TOK_SPBPE || t->ignore_merges || tok_strmap_get(&t->vocab, "\xe2\x96\x81", 3) < 0)
        return 0;
    for (size_t i = 0; i < t->merges.cap; i++) {
        const pairmap_ent *e = &t->merges.ent[i];
        if (e->key == TOK_PAIR_EMPTY)
            continue;
        int32_t a = (int32_t)(e->key >> 32), b = (int32_t)(uint32_t)e->key;
        const char *sb = t->id_str.p + t->id_soff[b];
        if (t->id_slen[b] >= 3 && memcmp(sb, "\xe2\x96\x81", 3) == 0 &&
            !all_meta(t->id_str.p + t->id_soff[a], t->id_slen[a]))
            return 0;
    }
    return 1;
}

int tok_json_finish(fg_tok *t, const char *name, fg_err *err)
{
    if (t->role[FG_TOK_BOS] < 0 && t->n_post_pre == 1)
        t->role[FG_TOK_BOS] = t->post_pre[0];
    if (t->role[FG_TOK_EOS] < 0 && t->n_post_suf == 1)
        t->role[FG_TOK_EOS] = t->post_suf[0];
    if (t->role[FG_TOK_UNK] < 0)
        t->role[FG_TOK_UNK] = t->unk_id;
    /* transformers' update_post_processor: an explicit add_bos_token / add_eos_token decides
     * that side of the template; the side it does not mention stays as tokenizer.json has it */
    for (int side = 0; side < 2; side++) {
        int want = side ? t->cfg_add_eos : t->cfg_add_bos, role = side ? FG_TOK_EOS : FG_TOK_BOS;
        if (want < 0)
            continue;
        if (want && t->role[role] < 0)
            return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: add_%s_token is true but no %s_token is set",
                              name, side ? "eos" : "bos", side ? "eos" : "bos");
        int32_t **v = side ? &t->post_suf : &t->post_pre;
        size_t *n = side ? &t->n_post_suf : &t->n_post_pre;
        *n = 0;
        if (want && push_ids(v, n, &t->role[role], 1, 0))
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    t->add_bos = t->n_post_pre + t->n_post_suf > 0;
    t->fast_decode = t->n_dec == 1 && t->dec[0].kind == ST_D_BYTELEVEL;
    t->sp_cut = sp_cuttable(t);
    model_tables(t);
    int rc = tok_hf_build(t, err);
    return rc ? rc : id_bytes_all(t, err);
}

static void step_free(tok_step *st)
{
    free(st->a);
    free(st->lit);
    pcre2_match_data_free(st->md);
    pcre2_code_free(st->re);
}

void tok_json_free(fg_tok *t)
{
    for (int i = 0; i < t->n_norm; i++)
        step_free(&t->norm[i]);
    for (int i = 0; i < t->n_pre; i++)
        step_free(&t->pre[i]);
    for (int i = 0; i < t->n_dec; i++)
        step_free(&t->dec[i]);
    for (int i = 0; i < t->n_hf_norm; i++)
        step_free(&t->hf_norm[i]);
    for (int i = 0; i < t->n_hf_pre; i++)
        step_free(&t->hf_pre[i]);
    tok_trie_free(&t->hf_added);
    for (int i = 0; i < TOK_MAX_STEPS; i++) {
        tok_arena_free(&t->lvl[i].buf);
        free(t->lvl[i].r);
    }
    tok_arena_free(&t->nbuf[0]);
    tok_arena_free(&t->nbuf[1]);
    tok_arena_free(&t->nlv.buf);
    free(t->nlv.r);
    tok_arena_free(&t->scratch);
    tok_arena_free(&t->id_str);
    free(t->id_soff);
    free(t->id_slen);
    free(t->post_pre);
    free(t->post_suf);
}

/* ---- transformers' view: the pipeline transformers 5 builds for the tokenizer_class that
 * tokenizer_config.json names, used by fg_tok_encode with FG_TOK_ADD_BOS (prompts must tokenize as
 * transformers' tokenizer(text) does).
 *
 * transformers 5 loads tokenizer.json as it is (the `tokenizers` library's view, fg_tok_encode
 * without FG_TOK_ADD_BOS) only for PreTrainedTokenizerFast / TokenizersBackend and classes
 * without an __init__ of their own. Others take the vocabulary, merges, added tokens and
 * post-processor from the file but build the normalizer and pre-tokenizer in __init__:
 *   LlamaTokenizer   (Llama 2, TinyLlama, Mistral, Mixtral, Phi-3): no normalizer; Metaspace
 *                    ("\u2581", split = false) with prepend_scheme from add_prefix_space
 *                    (absent = true) and legacy (absent = false): "never" when
 *                    add_prefix_space is false, else "first" unless legacy is true ("always").
 *                    The published Llama 2 file's legacy normalizer (Prepend "\u2581" +
 *                    Replace " ") instead gives " Hello" two leading "\u2581" and prefixes
 *                    every piece between special tokens: "<s>Hello" -> [1, 15043] in
 *                    `tokenizers`, [1, 10994] in transformers.
 *   GPT2Tokenizer    (phi-4, GPT-2): no normalizer; ByteLevel(add_prefix_space from the config,
 *                    absent = false) with GPT-2's regex; only for a byte-level file.
 * Qwen2Tokenizer rebuilds exactly the pipeline Qwen's files carry (NFC, Split + ByteLevel), so
 * it needs nothing here. config.json's model_type can overrule tokenizer_class: transformers
 * loads the file as it is for the model types whose registered tokenizer is TokenizersBackend
 * (tok_hf_file_model: Mistral, Mixtral, Phi-3, phi-4 (model_type phi3), OLMo 2, Granite), so a
 * Mixtral or Phi-3 checkpoint keeps its file's legacy normalizer. The BPE model settings the classes pass (byte_fallback, fuse_unk) are
 * those of the files they are published with; the decoder is the file's.
 */

static void steps_swap(tok_step *a, int *na, tok_step *b, int *nb)
{
    int n = *na > *nb ? *na : *nb, k = *na;
    for (int i = 0; i < n; i++) {
        tok_step x = a[i];
        a[i] = b[i];
        b[i] = x;
    }
    *na = *nb;
    *nb = k;
}

void tok_hf_swap(fg_tok *t)
{
    steps_swap(t->norm, &t->n_norm, t->hf_norm, &t->n_hf_norm);
    steps_swap(t->pre, &t->n_pre, t->hf_pre, &t->n_hf_pre);
    trie tr = t->added[1];
    t->added[1] = t->hf_added;
    t->hf_added = tr;
    uint8_t first[256];
    memcpy(first, t->added_first[1], 256);
    memcpy(t->added_first[1], t->hf_first, 256);
    memcpy(t->hf_first, first, 256);
}

/* Added tokens with normalized = true are matched after the normalizer, as it writes them; the
 * views built here have none, so there they are matched as their content. */
static int hf_added_tokens(fg_tok *t)
{
    for (size_t k = 0; k < t->n_special; k++) {
        const tok_special *sp = &t->special[k];
        const unsigned char *s = (const unsigned char *)t->special_text.p + sp->off;
        if (!sp->normalized)
            continue;
        int rc = tok_trie_put(&t->hf_added, s, sp->len, (int32_t)k);
        if (rc)
            return rc;
        t->hf_first[s[0]] = 1;
    }
    return FG_OK;
}

static int llama_view(fg_tok *t, fg_err *err)
{
    tok_step *st = &t->hf_pre[t->n_hf_pre++];
    memset(st, 0, sizeof *st);
    st->kind = ST_METASPACE;
    st->split = 0;
    st->scheme = t->cfg_prefix_space == 0 ? PREPEND_NEVER
               : t->cfg_legacy == 1      ? PREPEND_ALWAYS : PREPEND_FIRST;
    if (!(st->a = malloc(4)))
        return fg_err_set(err, FG_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(st->a, "\xe2\x96\x81", 4);
    st->a_len = 3;
    return FG_OK;
}

static int gpt2_view(fg_tok *t, fg_err *err)
{
    static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    tok_step *st = &t->hf_pre[t->n_hf_pre++];
    memset(st, 0, sizeof *st);
    st->kind = ST_BYTELEVEL;
    st->prefix_space = t->cfg_prefix_space == 1;
    return tok_regex_compile(gpt2, sizeof gpt2 - 1, 0, &st->re, &st->md, "GPT2Tokenizer", err);
}

int tok_hf_file_model(const char *mt)
{
    /* transformers 5.25's TOKENIZER_MAPPING_NAMES entries "TokenizersBackend" (or
     * MistralCommonBackend, which falls back to it) among the families fg runs, and the model
     * types it lists as having an incorrect hub tokenizer_class (phi3, phimoe) */
    static const char *const file[] = {"mistral", "mixtral", "ministral", "ministral3", "mistral3",
                                       "phi3", "phi3_v", "phimoe", "olmo2", "olmo3", "granite",
                                       "granitemoe", "granitemoeshared", "granitemoehybrid"};
    for (size_t i = 0; mt && i < sizeof file / sizeof *file; i++)
        if (strcmp(mt, file[i]) == 0)
            return 1;
    return 0;
}

int tok_hf_build(fg_tok *t, fg_err *err)
{
    int rc = FG_OK;
    if (t->model_file_view)
        return FG_OK;
    if (t->cfg_class == TOK_HF_LLAMA && t->cls == TOK_SPBPE)
        rc = llama_view(t, err);
    else if (t->cfg_class == TOK_HF_GPT2 && t->cls == TOK_BYTELEVEL)
        rc = gpt2_view(t, err);
    else
        return FG_OK;
    if (!rc && (rc = hf_added_tokens(t)))
        rc = fg_err_set(err, rc, "tokenizer: %s", fg_strerror(rc));
    t->has_hf = rc == FG_OK;
    return rc;
}
