/* tok_load.c - build an fg_tok from vocab.json + merges.txt (+ config files), from memory or
 * from disk, and the read-only queries.
 *
 * Load order: vocab.json (jansson; every key a token, every value an integer id in
 * 0..FG_TOK_MAX_ID, ids unique), then the 256 byte-level base tokens must all be present
 * (byte-level BPE cannot encode a byte without its token, and Hugging Face would silently drop
 * it), then merges.txt (Hugging Face rules: lines starting "#version" skipped, every other line
 * exactly "LEFT RIGHT" with one space, CR LF accepted; LEFT, RIGHT and LEFTRIGHT must all be
 * vocab tokens; the rank is the index among merge lines; a repeated pair keeps its last rank),
 * then tokenizer_config.json and special_tokens_map.json (tok_config.c), then the regex.
 *
 * tokenizer.json (fg_tok_load_json_*) is parsed by tok_json.c into the same struct, then the
 * same config files apply; fg_tok_load_dir takes that path when DIR/tokenizer.json exists, else
 * tok_tiktoken.c's when DIR/tiktoken.model does.
 *
 * Each token's decoded bytes are computed once here: a vocab string made only of byte-level
 * symbols decodes to those bytes; any other string (an added token like "</s>" is plain ASCII
 * and maps to itself either way) decodes to its own UTF-8, as Hugging Face's ByteLevel decoder
 * does. Errors name the file and the line (merges, JSON syntax) or key (vocab).
 */
#define _POSIX_C_SOURCE 200809L
#include "fg_json.h"
#include "fg_file.h"
#include "tok_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#define NO_TOKEN UINT32_MAX

static int grow_ids(fg_tok *t, int32_t id)
{
    if (id < t->id_cap)
        return FG_OK;
    int32_t cap = t->id_cap ? t->id_cap : 1024;
    while (cap <= id)
        cap = cap > FG_TOK_MAX_ID / 2 ? FG_TOK_MAX_ID + 1 : cap * 2;
    uint32_t *off = realloc(t->id_off, (size_t)cap * sizeof *off);
    if (off)
        t->id_off = off;
    uint32_t *ln = realloc(t->id_len, (size_t)cap * sizeof *ln);
    if (ln)
        t->id_len = ln;
    uint8_t *sp = realloc(t->id_special, (size_t)cap);
    if (sp)
        t->id_special = sp;
    uint32_t *so = realloc(t->id_soff, (size_t)cap * sizeof *so);
    if (so)
        t->id_soff = so;
    uint32_t *sl = realloc(t->id_slen, (size_t)cap * sizeof *sl);
    if (sl)
        t->id_slen = sl;
    if (!off || !ln || !sp || !so || !sl)
        return FG_ERR_NOMEM;
    for (int32_t i = t->id_cap; i < cap; i++) {
        t->id_len[i] = NO_TOKEN;
        t->id_special[i] = 0;
        t->id_soff[i] = t->id_slen[i] = 0;
    }
    t->id_cap = cap;
    return FG_OK;
}

int tok_set_id(fg_tok *t, int32_t id, const void *bytes, size_t len, int special)
{
    int rc = grow_ids(t, id);
    if (!rc)
        rc = tok_arena_put(&t->id_bytes, bytes, len, &t->id_off[id]);
    if (rc)
        return rc;
    t->id_len[id] = (uint32_t)len;
    t->id_special[id] = (uint8_t)special;
    if (id >= t->n_ids)
        t->n_ids = id + 1;
    return FG_OK;
}

int tok_set_str(fg_tok *t, int32_t id, const char *s, size_t len)
{
    int rc = grow_ids(t, id);
    if (!rc)
        rc = tok_arena_put(&t->id_str, s, len, &t->id_soff[id]);
    if (!rc)
        t->id_slen[id] = (uint32_t)len;
    return rc;
}

/* Map a vocab string to bytes: byte-level symbols to their bytes when every code point is one,
 * else the string's own UTF-8 (jansson hands out valid UTF-8). Writes at most len bytes. */
static size_t token_bytes(const char *s, size_t len, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        if (u[i] < 0x80) {
            cp = u[i++];
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < len) {
            cp = (u[i] & 0x1Fu) << 6 | (u[i + 1] & 0x3Fu);
            i += 2;
        } else {
            cp = UINT32_MAX;  /* 3- and 4-byte code points are never byte-level symbols */
        }
        int b = cp == UINT32_MAX ? -1 : tok_cp_to_byte(cp);
        if (b < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[o++] = (char)b;
    }
    return o;
}

static const char *key_of_id(const fg_tok *t, int32_t id, size_t *len)
{
    for (size_t i = 0; i < t->vocab.cap; i++)
        if (t->vocab.ent[i].id == id) {
            *len = t->vocab.ent[i].len;
            return t->vocab.keys.p + t->vocab.ent[i].off;
        }
    *len = 0;
    return "";
}

static int vocab_entry(fg_tok *t, const char *key, json_t *val, const char *name, char *scratch,
                       fg_err *err)
{
    char q[200], q2[200];
    size_t klen = strlen(key);
    if (!json_is_integer(val))
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: token \"%s\": id is not an integer", name,
                          tok_quote(q, sizeof q, key, klen));
    json_int_t v = json_integer_value(val);
    if (v < 0 || v > FG_TOK_MAX_ID)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: token \"%s\": id %lld outside 0..%d", name,
                          tok_quote(q, sizeof q, key, klen), (long long)v, FG_TOK_MAX_ID);
    int32_t id = (int32_t)v;
    if (id < t->n_ids && t->id_len[id] != NO_TOKEN) {
        size_t olen;
        const char *other = key_of_id(t, id, &olen);
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: tokens \"%s\" and \"%s\" share id %d", name,
                          tok_quote(q, sizeof q, other, olen), tok_quote(q2, sizeof q2, key, klen),
                          id);
    }
    int rc = tok_strmap_put(&t->vocab, key, klen, id, NULL);
    if (rc == FG_OK)
        rc = tok_set_id(t, id, scratch, token_bytes(key, klen, scratch), 0);
    if (rc)
        return fg_err_set(err, rc, "%s: token \"%s\": %s", name, tok_quote(q, sizeof q, key, klen),
                          fg_strerror(rc));
    return FG_OK;
}

int tok_json_error(fg_err *err, int code, const char *file, int line, int column,
                   const char *text)
{
    char clean[200];  /* jansson quotes the input near the error: escape control bytes */
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 5 < sizeof clean; p++)
        o += *p < 0x20 || *p == 0x7f ? (size_t)snprintf(clean + o, sizeof clean - o, "\\x%02x", *p)
                                     : (size_t)(clean[o] = (char)*p, 1);
    clean[o] = '\0';
    return fg_err_set(err, code, "%s:%d:%d: %s", file, line, column, clean);
}

static int load_vocab(fg_tok *t, const void *buf, size_t len, const char *name, fg_err *err)
{
    json_error_t je;
    json_t *root = fg_json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return tok_json_error(err,
                              json_error_code(&je) == json_error_duplicate_key ? FG_ERR_TOK_VOCAB
                                                                                : FG_ERR_TOK_JSON,
                              name, je.line, je.column, je.text);
    int rc = FG_OK;
    char *scratch = NULL;
    if (!json_is_object(root) || json_object_size(root) == 0) {
        rc = fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: expected a non-empty JSON object of token -> id",
                        name);
        goto out;
    }
    scratch = malloc(len + 1);
    if (!scratch) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if ((rc = vocab_entry(t, key, val, name, scratch, err)))
            break;
    }
out:
    free(scratch);
    json_decref(root);
    return rc;
}

static int check_byte_tokens(fg_tok *t, const char *name, fg_err *err)
{
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        char u[2];
        size_t n = cp < 0x80 ? 1 : 2;
        if (n == 1)
            u[0] = (char)cp;
        else {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
        }
        t->byte_id[b] = tok_strmap_get(&t->vocab, u, n);
        if (t->byte_id[b] < 0)
            return fg_err_set(err, FG_ERR_TOK_VOCAB,
                              "%s: no token for byte 0x%02x (byte-level symbol U+%04X)", name, b,
                              (unsigned)cp);
    }
    return FG_OK;
}

/* One merges.txt line s[0..n) (no newline); returns FG_OK or the error. */
static int merge_line(fg_tok *t, const char *s, size_t n, const char *name, unsigned line,
                      char *cat, fg_err *err)
{
    char q[200];
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return fg_err_set(err, FG_ERR_TOK_MERGES,
                          "%s:%u: expected two tokens separated by one space, got \"%s\"", name,
                          line, tok_quote(q, sizeof q, s, n));
    size_t la = (size_t)(sp - s), lb = n - la - 1;
    int32_t a = tok_strmap_get(&t->vocab, s, la), b = tok_strmap_get(&t->vocab, sp + 1, lb);
    memcpy(cat, s, la);
    memcpy(cat + la, sp + 1, lb);
    int32_t m = tok_strmap_get(&t->vocab, cat, la + lb);
    const char *bad = a < 0 ? s : b < 0 ? sp + 1 : m < 0 ? cat : NULL;
    if (bad)
        return fg_err_set(err, FG_ERR_TOK_MERGES, "%s:%u: token \"%s\" is not in the vocabulary",
                          name, line,
                          tok_quote(q, sizeof q, bad, a < 0 ? la : b < 0 ? lb : la + lb));
    if (tok_pairmap_put(&t->merges, a, b, t->n_merges, m))
        return fg_err_set(err, FG_ERR_NOMEM, "%s:%u: out of memory", name, line);
    t->n_merges++;
    return FG_OK;
}

static int load_merges(fg_tok *t, const char *buf, size_t len, const char *name, fg_err *err)
{
    char *cat = malloc(len + 1);
    if (!cat)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    int rc = FG_OK;
    unsigned line = 0;
    for (size_t pos = 0; pos < len && rc == FG_OK;) {
        const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        if (n && s[n - 1] == '\r')
            n--;
        if (n >= 8 && memcmp(s, "#version", 8) == 0)
            continue;
        if (t->n_merges == UINT32_MAX)
            rc = fg_err_set(err, FG_ERR_LIMIT, "%s:%u: too many merges", name, line);
        else
            rc = merge_line(t, s, n, name, line, cat, err);
    }
    free(cat);
    return rc;
}

void fg_tok_free(fg_tok *t)
{
    if (!t)
        return;
    free(t->id_off);
    free(t->id_len);
    free(t->id_special);
    tok_arena_free(&t->id_bytes);
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    free(t->special);
    tok_arena_free(&t->special_text);
    tok_strmap_free(&t->special_index);
    tok_trie_free(&t->added[0]);
    tok_trie_free(&t->added[1]);
    pcre2_match_data_free(t->md);
    pcre2_code_free(t->re);
    tok_wcache_free(&t->cache);
    tok_json_free(t);
    free(t->sym);
    free(t->heap);
    free(t);
}

static const char *or_default(const char *name, const char *def) { return name ? name : def; }

int fg_tok_load_mem(const fg_tok_files *f, fg_tok **out, fg_err *err)
{
    *out = NULL;
    if (!f || !f->vocab_json || !f->merges_txt)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tokenizer: vocab.json and merges.txt are required");
    fg_tok *t = calloc(1, sizeof *t);
    if (!t)
        return fg_err_set(err, FG_ERR_NOMEM, "tokenizer: out of memory");
    for (int r = 0; r < FG_TOK_N_ROLES; r++)
        t->role[r] = -1;
    const char *vname = or_default(f->vocab_name, "vocab.json");
    int rc = load_vocab(t, f->vocab_json, f->vocab_len, vname, err);
    if (!rc)
        rc = check_byte_tokens(t, vname, err);
    if (!rc)
        rc = load_merges(t, f->merges_txt, f->merges_len, or_default(f->merges_name, "merges.txt"),
                         err);
    if (!rc && f->config_json)
        rc = tok_load_config(t, f->config_json, f->config_len,
                             or_default(f->config_name, "tokenizer_config.json"), err);
    if (!rc && f->special_json)
        rc = tok_load_config(t, f->special_json, f->special_len,
                             or_default(f->special_name, "special_tokens_map.json"), err);
    if (!rc)
        rc = tok_regex_init(t, err);
    if (rc) {
        fg_tok_free(t);
        return rc;
    }
    *out = t;
    return FG_OK;
}

int tok_read_file(const char *path, int optional, char **buf, size_t *len, fg_err *err)
{
    *buf = NULL;
    *len = 0;
    if (!path)
        return FG_OK;
    FILE *fp;
    int rc = fg_fopen_regular(path, &fp, err); /* a FIFO is named, not waited on */
    if (rc)
        return rc == FG_ERR_NOT_FOUND && optional ? FG_OK : rc;
    struct stat st;
    size_t got;
    if (fstat(fileno(fp), &st))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", path);
    else if (st.st_size > (1 << 30))
        rc = fg_err_set(err, FG_ERR_LIMIT, "%s: larger than 1 GiB", path);
    else if (!(*buf = malloc((size_t)st.st_size + 1)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    else if ((got = fread(*buf, 1, (size_t)st.st_size, fp)) != (size_t)st.st_size)
        rc = ferror(fp) ? fg_err_sys(err, FG_ERR_IO, errno, "%s: reading", path)
                        : fg_err_set(err, FG_ERR_TRUNCATED, "%s: short read: got %zu of %lld "
                                     "bytes (the file shrank while read)", path, got,
                                     (long long)st.st_size);
    *len = (size_t)st.st_size;
    fclose(fp);
    if (rc) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int fg_tok_load_files(const char *vocab_path, const char *merges_path, const char *config_path,
                      const char *special_path, fg_tok **out, fg_err *err)
{
    *out = NULL;
    char *b[4] = {NULL, NULL, NULL, NULL};
    size_t n[4];
    int rc = tok_read_file(vocab_path, 0, &b[0], &n[0], err);
    if (!rc)
        rc = tok_read_file(merges_path, 0, &b[1], &n[1], err);
    if (!rc)
        rc = tok_read_file(config_path, 1, &b[2], &n[2], err);
    if (!rc)
        rc = tok_read_file(special_path, 1, &b[3], &n[3], err);
    if (!rc) {
        fg_tok_files f = {b[0], n[0], vocab_path, b[1], n[1], merges_path,
                          b[2], n[2], config_path, b[3], n[3], special_path};
        rc = fg_tok_load_mem(&f, out, err);
    }
    for (int i = 0; i < 4; i++)
        free(b[i]);
    return rc;
}

static int dir_paths(const char *dir, const char *const *names, int k, char **p, fg_err *err)
{
    for (int i = 0; i < k; i++) {
        size_t n = strlen(dir) + strlen(names[i]) + 2;
        if (!(p[i] = malloc(n)))
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
        snprintf(p[i], n, "%s/%s", dir, names[i]);
    }
    return FG_OK;
}

static int load_gpt2_dir(const char *dir, fg_tok **out, fg_err *err)
{
    static const char *names[4] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                   "special_tokens_map.json"};
    char *p[4] = {NULL, NULL, NULL, NULL};
    int rc = dir_paths(dir, names, 4, p, err);
    if (!rc)
        rc = fg_tok_load_files(p[0], p[1], p[2], p[3], out, err);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    return rc;
}

static int load_json_files(const char *tokenizer_path, const char *config_path,
                           const char *special_path, const char *model_type, fg_tok **out,
                           fg_err *err);

/* config.json's "model_type" into mt[cap] ("" when the file or the key is absent). */
static int model_type_of(const char *path, char *mt, size_t cap, fg_err *err)
{
    char *buf;
    size_t len;
    mt[0] = '\0';
    int rc = tok_read_file(path, 1, &buf, &len, err);
    if (rc || !buf)
        return rc;
    json_error_t je;
    json_t *root = fg_json_loadb(buf, len, 0, &je);
    free(buf);
    if (!root)
        return tok_json_error(err, FG_ERR_TOK_JSON, path, je.line, je.column, je.text);
    json_t *v = json_object_get(root, "model_type");
    if (json_is_string(v))
        snprintf(mt, cap, "%s", json_string_value(v));
    json_decref(root);
    return FG_OK;
}

int fg_tok_load_json_dir(const char *dir, fg_tok **out, fg_err *err)
{
    static const char *names[4] = {"tokenizer.json", "tokenizer_config.json",
                                   "special_tokens_map.json", "config.json"};
    char *p[4] = {NULL, NULL, NULL, NULL}, mt[64];
    *out = NULL;
    int rc = dir_paths(dir, names, 4, p, err);
    if (!rc)
        rc = model_type_of(p[3], mt, sizeof mt, err);
    if (!rc)
        rc = load_json_files(p[0], p[1], p[2], mt[0] ? mt : NULL, out, err);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    return rc;
}

int fg_tok_load_dir(const char *dir, fg_tok **out, fg_err *err)
{
    *out = NULL;
    size_t n = strlen(dir) + sizeof "/tokenizer.json";
    char *p = malloc(n);
    if (!p)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
    snprintf(p, n, "%s/tokenizer.json", dir);
    struct stat st;
    int json = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    if (json)
        return fg_tok_load_json_dir(dir, out, err);
    n = strlen(dir) + sizeof "/tiktoken.model";
    if (!(p = malloc(n)))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
    snprintf(p, n, "%s/tiktoken.model", dir);
    int tt = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return tt ? fg_tok_load_tiktoken_dir(dir, out, err) : load_gpt2_dir(dir, out, err);
}

/* ---- tokenizer.json */

int fg_tok_load_json_mem(const fg_tok_json_files *f, fg_tok **out, fg_err *err)
{
    *out = NULL;
    if (!f || !f->tokenizer_json)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tokenizer: tokenizer.json is required");
    fg_tok *t = calloc(1, sizeof *t);
    if (!t)
        return fg_err_set(err, FG_ERR_NOMEM, "tokenizer: out of memory");
    for (int r = 0; r < FG_TOK_N_ROLES; r++)
        t->role[r] = -1;
    const char *name = or_default(f->tokenizer_name, "tokenizer.json");
    t->model_file_view = tok_hf_file_model(f->model_type);
    int rc = tok_load_json(t, f->tokenizer_json, f->tokenizer_len, name, err);
    if (!rc && f->config_json)
        rc = tok_load_config(t, f->config_json, f->config_len,
                             or_default(f->config_name, "tokenizer_config.json"), err);
    if (!rc && f->special_json)
        rc = tok_load_config(t, f->special_json, f->special_len,
                             or_default(f->special_name, "special_tokens_map.json"), err);
    if (!rc)
        rc = tok_json_finish(t, or_default(f->config_name, "tokenizer_config.json"), err);
    if (rc) {
        fg_tok_free(t);
        return rc;
    }
    *out = t;
    return FG_OK;
}

int fg_tok_load_json_files(const char *tokenizer_path, const char *config_path,
                           const char *special_path, fg_tok **out, fg_err *err)
{
    return load_json_files(tokenizer_path, config_path, special_path, NULL, out, err);
}

static int load_json_files(const char *tokenizer_path, const char *config_path,
                           const char *special_path, const char *model_type, fg_tok **out,
                           fg_err *err)
{
    *out = NULL;
    char *b[3] = {NULL, NULL, NULL};
    size_t n[3];
    int rc = tok_read_file(tokenizer_path, 0, &b[0], &n[0], err);
    if (!rc)
        rc = tok_read_file(config_path, 1, &b[1], &n[1], err);
    if (!rc)
        rc = tok_read_file(special_path, 1, &b[2], &n[2], err);
    if (!rc) {
        fg_tok_json_files f = {b[0], n[0], tokenizer_path, b[1], n[1], config_path,
                               b[2], n[2], special_path, model_type};
        rc = fg_tok_load_json_mem(&f, out, err);
    }
    for (int i = 0; i < 3; i++)
        free(b[i]);
    return rc;
}

const char *fg_tok_class(const fg_tok *t)
{
    static const char *names[4] = {"gpt2-bpe", "bytelevel-bpe", "sentencepiece-bpe", "tiktoken-bpe"};
    return names[t->cls];
}

/* ---- queries */

int fg_tok_token_bytes(const fg_tok *t, int32_t id, const char **bytes, size_t *len)
{
    if (id < 0)
        return FG_ERR_TOK_BAD_ID;
    if (!tok_has_token(t, id)) {  /* past the vocabulary: nothing, as in fg_tok_decode */
        *bytes = "";
        *len = 0;
        return FG_OK;
    }
    *bytes = t->id_bytes.p + t->id_off[id];
    *len = t->id_len[id];
    return FG_OK;
}

int32_t fg_tok_lookup(const fg_tok *t, const char *token, size_t len)
{
    int32_t id = tok_strmap_get(&t->vocab, token, len);
    if (id < 0) { /* json classes: added tokens */
        int32_t k = tok_strmap_get(&t->special_index, token, len);
        id = k >= 0 ? t->special[k].id : -1;
    }
    return id;
}

int32_t fg_tok_vocab_size(const fg_tok *t) { return t->n_ids; }
uint32_t fg_tok_merge_count(const fg_tok *t) { return t->n_merges; }

int32_t fg_tok_special_id(const fg_tok *t, fg_tok_role role)
{
    return (unsigned)role < FG_TOK_N_ROLES ? t->role[role] : -1;
}

int fg_tok_adds_bos(const fg_tok *t) { return t->add_bos; }

int fg_tok_is_special(const fg_tok *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->id_special[id];
}
