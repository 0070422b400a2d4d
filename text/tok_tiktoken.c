/* tok_tiktoken.c - the "tiktoken-bpe" class: a tiktoken ranks file (tiktoken.model) with the
 * split pattern and special tokens of Kimi's TikTokenTokenizer (Kimi K2, Moonlight, Kimi-VL),
 * built into the same fg_tok as the tokenizer.json classes and run by their pipeline.
 *
 * tiktoken.model, as tiktoken's load_tiktoken_bpe reads it: one token a line, "BASE64 RANK"
 * (standard alphabet, '=' padding; CR LF accepted; empty lines skipped). fg is stricter than the
 * Python reader, whose b64decode and split() would accept damaged lines: one space exactly,
 * canonical base64 of a non-empty token, a decimal rank, no token or rank twice, ranks exactly
 * 0..n-1 (Kimi numbers its special tokens from n), a token for every single byte (tiktoken
 * cannot encode a byte without one), lines of at most TT_MAX_LINE bytes. Each refusal is one
 * line naming the file and line.
 *
 * Encoding is tiktoken's CoreBPE: special tokens matched first (encode(allowed_special="all"),
 * which is FG_TOK_SPECIAL; flags 0 is encode_ordinary), the pattern's matches as pieces, a
 * piece that is itself a token is that token, else its bytes merged by the rank of the merged
 * token, lowest rank first and leftmost among equals. fg runs that as the tokenizer.json
 * pipeline Split(pattern, Isolated) + ByteLevel(use_regex = false) + BPE with ignore_merges,
 * where the pair table holds every pair (a, b) of tokens whose concatenation is a token T, with
 * T's rank: the heap merge (tok_merge_all) then picks exactly tiktoken's pair at every step.
 * Decoding concatenates the tokens' bytes (tiktoken's decode_bytes); FG_TOK_REPLACE_INVALID
 * gives Python's bytes.decode("utf-8", "replace") as Kimi's decode does. With FG_TOK_ADD_BOS (the
 * prompt view: transformers' tokenizer(text), which runs Kimi's encode) each stretch between added
 * tokens is first cut as Kimi's encode cuts it: 400,000-character slices, and a cut before the
 * 25,001st character of a run of only-space or only-non-space characters (str.isspace); each
 * piece is encoded alone (tok_pipe.c, kimi_chunks). Shorter texts are unaffected.
 *
 * Special tokens, as tokenization_kimi.py builds them: ids n .. n + 257 (num_reserved_special_
 * tokens = 256, plus 2), each named by tokenizer_config.json's added_tokens_decoder or else
 * "<|reserved_token_ID|>"; an added_tokens_decoder id outside that range is refused. Then the
 * config's roles (bos_token, eos_token, unk_token, pad_token) as for the other classes. The
 * tokenizer adds no token around a prompt (PreTrainedTokenizer's default), so FG_TOK_ADD_BOS adds
 * nothing; add_bos_token / add_eos_token are not TikTokenTokenizer's and are ignored.
 *
 * The split pattern lives in Python code (tokenization_kimi.py: pat_str = "|".join([r"""...""",
 * ...]) or a single literal); fg_tok_tiktoken_pattern reads it from the file's text without
 * running it. Its syntax is Rust regex's (tiktoken uses fancy-regex), including class
 * intersection [A&&[^B]] which tok_regex.c translates for PCRE2.
 */
#include "fg_json.h"
#include "fg_file.h"
#include "tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define NO_TOKEN UINT32_MAX
#define TT_MAX_LINE 65536
#define TT_RESERVED 258  /* num_reserved_special_tokens + 2 */

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Canonical base64 of s[0..n) into out; returns the byte count, or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4)
        return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            int last = i + 4 == n;
            if (last && k >= 4 - (int)pad) {
                v[k] = 0;
                continue;
            }
            if ((v[k] = b64_val((unsigned char)s[i + k])) < 0)
                return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (i + 4 < n || pad < 2)
            out[o++] = (unsigned char)(w >> 8);
        if (i + 4 < n || pad < 1)
            out[o++] = (unsigned char)w;
        /* canonical: the bits padding drops must be zero */
        if (i + 4 == n && ((pad == 2 && (w & 0xFFFF)) || (pad == 1 && (w & 0xFF))))
            return -1;
    }
    return o;
}

/* The byte-level string of bytes p[0..n) into out (at most 2n bytes); its length. */
static size_t to_bytelevel(const fg_tok *t, const unsigned char *p, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + o, t->bl_sym[p[i]], t->bl_sym[p[i]][2]);
        o += t->bl_sym[p[i]][2];
    }
    return o;
}

static void bl_table(fg_tok *t)
{
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        t->bl_sym[b][0] = (uint8_t)(cp < 0x80 ? cp : 0xC0 | cp >> 6);
        t->bl_sym[b][1] = (uint8_t)(cp < 0x80 ? 0 : 0x80 | (cp & 0x3F));
        t->bl_sym[b][2] = cp < 0x80 ? 1 : 2;
    }
}

/* One "BASE64 RANK" line s[0..n). raw: token bytes -> rank. */
static int rank_line(fg_tok *t, strmap *raw, const char *s, size_t n, const char *name,
                     unsigned line, unsigned char *tok, char *bl, fg_err *err)
{
    char q[200];
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: expected \"BASE64 RANK\" (one space), got \"%s\"",
                          name, line, tok_quote(q, sizeof q, s, n));
    long tn = b64_decode(s, (size_t)(sp - s), tok);
    if (tn <= 0)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: \"%s\" is not canonical base64 of a token",
                          name, line, tok_quote(q, sizeof q, s, (size_t)(sp - s)));
    long long r = 0;
    const char *d = sp + 1, *e = s + n;
    if (e - d > 9)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: rank \"%s\" is not a number 0..%d", name,
                          line, tok_quote(q, sizeof q, d, (size_t)(e - d)), FG_TOK_MAX_ID - TT_RESERVED);
    for (const char *c = d; c < e; c++) {
        if (*c < '0' || *c > '9' || (c == d && *c == '0' && e - d > 1))
            return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: rank \"%s\" is not a number 0..%d",
                              name, line, tok_quote(q, sizeof q, d, (size_t)(e - d)),
                              FG_TOK_MAX_ID - TT_RESERVED);
        r = r * 10 + (*c - '0');
    }
    if (r > FG_TOK_MAX_ID - TT_RESERVED)
        return fg_err_set(err, FG_ERR_LIMIT, "%s:%u: rank %lld is over %d", name, line, r,
                          FG_TOK_MAX_ID - TT_RESERVED);
    int32_t id = (int32_t)r, old;
    if (id < t->n_ids && t->id_len[id] != NO_TOKEN)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: rank %d is given twice", name, line, id);
    int rc = tok_strmap_put(raw, (const char *)tok, (size_t)tn, id, &old);
    if (rc == FG_ERR_DUPLICATE)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s:%u: token \"%s\" is given twice (ranks %d and %d)",
                          name, line, tok_quote(q, sizeof q, (const char *)tok, (size_t)tn), old, id);
    size_t bn = to_bytelevel(t, tok, (size_t)tn, bl);
    if (!rc)
        rc = tok_strmap_put(&t->vocab, bl, bn, id, NULL);
    if (!rc)
        rc = tok_set_id(t, id, tok, (size_t)tn, 0);
    if (!rc)
        rc = tok_set_str(t, id, bl, bn);
    if (rc)
        return fg_err_set(err, rc, "%s:%u: %s", name, line, fg_strerror(rc));
    return FG_OK;
}

static int load_ranks(fg_tok *t, strmap *raw, const char *buf, size_t len, const char *name,
                      fg_err *err)
{
    unsigned char *tok = malloc(TT_MAX_LINE);
    char *bl = malloc(2 * TT_MAX_LINE);
    if (!tok || !bl) {
        free(tok);
        free(bl);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    int rc = FG_OK;
    unsigned line = 0;
    int32_t n = 0;
    for (size_t pos = 0; pos < len && rc == FG_OK;) {
        const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
        size_t k = nl ? (size_t)(nl - s) : len - pos;
        pos += k + (nl != NULL);
        line++;
        if (k && s[k - 1] == '\r')
            k--;
        if (k == 0)
            continue;
        if (k > TT_MAX_LINE)
            rc = fg_err_set(err, FG_ERR_LIMIT, "%s:%u: line of %zu bytes (at most %d)", name, line,
                            k, TT_MAX_LINE);
        else if ((rc = rank_line(t, raw, s, k, name, line, tok, bl, err)) == FG_OK)
            n++;
    }
    free(tok);
    free(bl);
    if (rc)
        return rc;
    if (n == 0)
        return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: no tokens", name);
    for (int32_t id = 0; id < n; id++)
        if (id >= t->n_ids || t->id_len[id] == NO_TOKEN)
            return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: rank %d is missing (the %d ranks must be 0..%d)",
                              name, id, n, n - 1);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if ((t->byte_id[b] = tok_strmap_get(raw, &c, 1)) < 0)
            return fg_err_set(err, FG_ERR_TOK_VOCAB, "%s: no token for the byte 0x%02x", name, b);
    }
    t->n_model = n;
    return FG_OK;
}

/* Every pair of tokens whose concatenation is a token, with that token's rank. */
static int pair_table(fg_tok *t, const strmap *raw, const char *name, fg_err *err)
{
    for (int32_t id = 0; id < t->n_model; id++) {
        const char *p = t->id_bytes.p + t->id_off[id];
        uint32_t n = t->id_len[id];
        for (uint32_t k = 1; k < n; k++) {
            int32_t a = tok_strmap_get(raw, p, k), b;
            if (a < 0 || (b = tok_strmap_get(raw, p + k, n - k)) < 0)
                continue;
            if (tok_pairmap_put(&t->merges, a, b, (uint32_t)id, id))
                return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
            t->n_merges++;
        }
    }
    return FG_OK;
}

/* The reserved special tokens n .. n + 257, named by added_tokens_decoder where it names them. */
static int reserved_tokens(fg_tok *t, const void *cfg, size_t cfg_len, const char *cname,
                           fg_err *err)
{
    json_t *root = NULL, *dec = NULL;
    if (cfg) {
        json_error_t je;
        if (!(root = fg_json_loadb(cfg, cfg_len, 0, &je)))
            return tok_json_error(err, FG_ERR_TOK_JSON, cname, je.line, je.column, je.text);
        dec = json_is_object(root) ? json_object_get(root, "added_tokens_decoder") : NULL;
        if (dec && !json_is_object(dec))
            dec = NULL;  /* tok_load_config names the wrong shape */
    }
    int rc = FG_OK;
    const char *key;
    json_t *v;
    if (dec)
        json_object_foreach(dec, key, v) {
            char *end;
            long id = strtol(key, &end, 10);
            if (*key && !*end && (id < t->n_model || id >= t->n_model + TT_RESERVED)) {
                rc = fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: \"added_tokens_decoder\": id %ld is outside "
                                "the special token ids %d..%d that follow the %d ranks of tiktoken.model",
                                cname, id, t->n_model, t->n_model + TT_RESERVED - 1, t->n_model);
                break;
            }
        }
    for (int32_t i = 0; i < TT_RESERVED && !rc; i++) {
        int32_t id = t->n_model + i;
        char k[16], name[48];
        snprintf(k, sizeof k, "%d", id);
        json_t *e = dec ? json_object_get(dec, k) : NULL, *c = json_is_object(e) ? json_object_get(e, "content") : NULL;
        const char *s = name;
        size_t len;
        if (json_is_string(c) && json_string_length(c) > 0) {
            s = json_string_value(c);
            len = json_string_length(c);
        } else {
            len = (size_t)snprintf(name, sizeof name, "<|reserved_token_%d|>", id);
        }
        rc = tok_add_token(t, s, len, id, 1, NULL, cname, err);
    }
    json_decref(root);
    return rc;
}

int fg_tok_load_tiktoken_mem(const fg_tok_tiktoken_files *f, fg_tok **out, fg_err *err)
{
    *out = NULL;
    if (!f || !f->model || !f->pattern)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tokenizer: tiktoken.model and the split pattern are required");
    const char *name = f->model_name ? f->model_name : "tiktoken.model";
    const char *cname = f->config_name ? f->config_name : "tokenizer_config.json";
    fg_tok *t = calloc(1, sizeof *t);
    if (!t)
        return fg_err_set(err, FG_ERR_NOMEM, "tokenizer: out of memory");
    for (int r = 0; r < FG_TOK_N_ROLES; r++)
        t->role[r] = -1;
    t->cls = TOK_TIKTOKEN;
    t->unk_id = -1;
    t->cfg_add_bos = t->cfg_add_eos = t->cfg_legacy = t->cfg_prefix_space = -1;
    t->byte_level = t->ignore_merges = t->has_decoder = 1;
    bl_table(t);
    strmap raw = {0};
    int rc = load_ranks(t, &raw, f->model, f->model_len, name, err);
    if (!rc)
        rc = pair_table(t, &raw, name, err);
    tok_strmap_free(&raw);
    if (!rc) {
        tok_step *sp = &t->pre[0], *bl = &t->pre[1];
        sp->kind = ST_SPLIT;
        sp->behavior = SPLIT_ISOLATED;
        bl->kind = ST_BYTELEVEL;
        t->n_pre = 2;
        t->dec[0].kind = ST_D_BYTELEVEL;
        t->n_dec = 1;
        char where[96];
        snprintf(where, sizeof where, "%s", f->pattern_name ? f->pattern_name : "the split pattern");
        rc = tok_regex_compile(f->pattern, strlen(f->pattern), 0, &sp->re, &sp->md, where, err);
    }
    if (!rc)
        rc = reserved_tokens(t, f->config_json, f->config_len, cname, err);
    if (!rc && f->config_json)
        rc = tok_load_config(t, f->config_json, f->config_len, cname, err);
    if (!rc) {
        t->cfg_add_bos = t->cfg_add_eos = -1;  /* not TikTokenTokenizer's keys */
        t->cfg_class = TOK_HF_NONE;
        rc = tok_json_finish(t, cname, err);
    }
    if (rc) {
        fg_tok_free(t);
        return rc;
    }
    *out = t;
    return FG_OK;
}

/* ---- the pattern in tokenization_kimi.py */

/* A Python string literal at s[*i] (prefix r/R optional; ' " ''' """); raw, or plain without
 * backslashes. Appends its text to *acc. */
static int py_literal(const char *s, size_t n, size_t *i, char **acc, size_t *alen)
{
    size_t p = *i;
    int raw = 0;
    if (p < n && (s[p] == 'r' || s[p] == 'R')) {
        raw = 1;
        p++;
    }
    if (p >= n || (s[p] != '"' && s[p] != '\''))
        return -1;
    char q = s[p];
    size_t ql = p + 2 < n && s[p + 1] == q && s[p + 2] == q ? 3 : 1;
    p += ql;
    size_t a = p;
    for (;; p++) {
        if (p + ql > n || (ql == 1 && s[p] == '\n'))
            return -1;
        if (s[p] == '\\' && !raw)
            return -1;  /* escapes: not read (Kimi writes raw strings) */
        if (s[p] == '\\') {  /* a raw string still cannot end on an escaped quote */
            p++;
            continue;
        }
        if (s[p] == q && (ql == 1 || (s[p + 1] == q && s[p + 2] == q)))
            break;
    }
    char *g = realloc(*acc, *alen + (p - a) + 2);
    if (!g)
        return -2;
    memcpy(g + *alen, s + a, p - a);
    *alen += p - a;
    g[*alen] = '\0';
    *acc = g;
    *i = p + ql;
    return 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n) {
        if (s[i] == '#') {
            while (i < n && s[i] != '\n')
                i++;
        } else if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
            i++;
        } else {
            break;
        }
    }
    return i;
}

int fg_tok_tiktoken_pattern(const char *py, size_t len, const char *name, char **pattern,
                            fg_err *err)
{
    *pattern = NULL;
    const char *nm = name ? name : "tokenization_kimi.py";
    int seen = 0;
    for (size_t at = 0; at + 7 < len; at++) {
        if (memcmp(py + at, "pat_str", 7) != 0 ||
            (at && (py[at - 1] == '_' || py[at - 1] == '.' || (unsigned)((py[at - 1] | 32) - 'a') < 26u ||
                    (unsigned)(py[at - 1] - '0') < 10u)))
            continue;
        size_t i = skip_ws(py, len, at + 7);
        if (i >= len || py[i] != '=' || (i + 1 < len && py[i + 1] == '='))
            continue;
        i = skip_ws(py, len, i + 1);
        char *acc = NULL;
        size_t alen = 0;
        int rc = 0;
        if (len - i > 10 && memcmp(py + i, "\"|\".join(", 9) == 0) {
            i = skip_ws(py, len, i + 9);
            if (i < len && py[i] == '[')
                i = skip_ws(py, len, i + 1);
            else
                rc = -1;
            for (int k = 0; !rc; k++) {
                if (i < len && py[i] == ']')
                    break;
                if (k) {
                    char *g = realloc(acc, alen + 2);
                    if (!g) {
                        rc = -2;
                        break;
                    }
                    acc = g;
                    acc[alen++] = '|';
                    acc[alen] = '\0';
                }
                if ((rc = py_literal(py, len, &i, &acc, &alen)))
                    break;
                i = skip_ws(py, len, i);
                if (i < len && py[i] == ',')
                    i = skip_ws(py, len, i + 1);
                else if (i >= len || py[i] != ']')
                    rc = -1;
            }
        } else {
            rc = py_literal(py, len, &i, &acc, &alen);
        }
        if (rc == -2) {
            free(acc);
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", nm);
        }
        if (rc || !acc || alen == 0) {  /* another assignment (pat_str=self.pat_str): go on */
            free(acc);
            seen = 1;
            continue;
        }
        *pattern = acc;
        return FG_OK;
    }
    if (seen)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: pat_str is not a string literal or \"|\".join([...]) "
                          "of literals fg can read (raw strings, or strings without backslashes)", nm);
    return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no pat_str = ... (the split pattern of the tiktoken "
                      "tokenizer) found", nm);
}

/* ---- from a directory */

int fg_tok_load_tiktoken_dir(const char *dir, fg_tok **out, fg_err *err)
{
    static const char *names[3] = {"tiktoken.model", "tokenizer_config.json", "tokenization_kimi.py"};
    char *p[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL}, *pat = NULL;
    size_t n[3] = {0, 0, 0};
    *out = NULL;
    int rc = FG_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        size_t k = strlen(dir) + strlen(names[i]) + 2;
        if (!(p[i] = malloc(k)))
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", dir);
        else
            snprintf(p[i], k, "%s/%s", dir, names[i]);
        if (!rc)
            rc = tok_read_file(p[i], i == 1, &b[i], &n[i], err);
    }
    if (!rc)
        rc = fg_tok_tiktoken_pattern(b[2], n[2], p[2], &pat, err);
    if (!rc) {
        fg_tok_tiktoken_files f = {b[0], n[0], p[0], b[1], n[1], p[1], pat, p[2]};
        rc = fg_tok_load_tiktoken_mem(&f, out, err);
    }
    free(pat);
    for (int i = 0; i < 3; i++) {
        free(p[i]);
        free(b[i]);
    }
    return rc;
}
