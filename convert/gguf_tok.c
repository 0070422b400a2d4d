/* gguf_tok.c - a GGUF file's tokenizer (tokenizer.ggml.*) as fg's tokenizer form.
 *
 * fg has one tokenizer implementation, read from tokenizer.json (text/tok_json.c). A GGUF file
 * carries the same facts as metadata: tokenizer.ggml.model "gpt2" (byte-level BPE), its tokens,
 * token types, merges, bos/eos/padding ids, add_bos_token, tokenizer.ggml.pre (llama.cpp's
 * name for the pre-tokenizer's split regex) and tokenizer.chat_template. ck_gguf_tokenizer
 * writes them back as the tokenizer.json + tokenizer_config.json that convert_hf_to_gguf.py
 * read, so the store holds the usual tokenizer keys and nothing downstream knows the source.
 *
 * Decisions:
 * - A pre-tokenizer name maps onto the regex of the Hugging Face file it came from (PRE below:
 *   llama-bpe / llama3 = Llama 3's, qwen2 = Qwen2's with its NFC normalizer, which llama.cpp
 *   leaves out but the original tokenizer.json has; gpt-4o = o200k_base's (gpt-oss: tiktoken's
 *   pattern as transformers' TikTokenConverter wrote it, ignore_merges); gpt-2 / default =
 *   GPT-2's). An unknown name is refused, named: a wrong regex would tokenize silently
 *   differently. (llama.cpp gives llama4's name the same regex; fg does not map it until a
 *   Llama 4 tokenizer.json's other steps are checked.)
 * - Tokens of type CONTROL (3) become special added tokens, USER_DEFINED (4) non-special
 *   (normalized) added ones, as convert_hf_to_gguf.py typed them; every token stays in the
 *   vocab too, so a merge producing one still resolves.
 * - The text read from the file (token strings, the template) is JSON-escaped byte for byte;
 *   the one loader then validates it all (a merge naming an unknown token, duplicate tokens,
 *   ...), its message naming "FILE: tokenizer.ggml.* as tokenizer.json" and the JSON path,
 *   whose indices are the metadata arrays' (model.merges[5] is tokenizer.ggml.merges[5]).
 * - What tokenizer.ggml.* has no place for is not recovered: an added token's lstrip, rstrip
 *   and single_word (false), a normalizer other than qwen2's NFC.
 * - tokenizer.ggml.model "llama" (SentencePiece BPE: Llama 2, Mistral, ...) has tokens, scores
 *   and types but no merges. They are derived as transformers' SentencePieceExtractor derives
 *   them when it writes a Llama tokenizer.json (every split of a piece into two pieces, by the
 *   piece's score, highest first), and the pipeline is Llama's legacy one: U+2581 prepended
 *   (tokenizer.ggml.add_space_prefix, default true) and replacing spaces, byte fallback when
 *   there are BYTE tokens, <unk> (UNKNOWN or unknown_token_id) fused, BOS added by default
 *   (add_bos_token absent) and EOS when add_eos_token; tokenizer_config.json names the class
 *   LlamaTokenizer (legacy), transformers' view of such a file and llama.cpp's tokenization.
 *   Tokens of type CONTROL / USER_DEFINED after the last other one were added past the
 *   SentencePiece model: added tokens only, not in the BPE vocabulary. Not recovered: a
 *   Metaspace "first" pre-tokenizer (Mistral v0.3's tokenizer.json), whose prefix after a
 *   special token differs from the legacy form.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "gguf.h"
#include "tokenizer.h"

typedef struct pre_rule {
    const char *name;  /* tokenizer.ggml.pre */
    const char *regex; /* the Split pattern, JSON-escaped */
    int nfc;           /* the original tokenizer.json's NFC normalizer */
    int ignore_merges; /* BPE ignore_merges (Llama 3) */
} pre_rule;

#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|" \
                  "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|" \
                  "\\\\s+(?!\\\\S)|\\\\s+"
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|" \
                 "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|" \
                 "\\\\s+(?!\\\\S)|\\\\s+"
/* o200k_base's split (tiktoken's openai_public.py; gpt-oss's tokenizer.json, which transformers'
 * GptOssConverter wrote from it; the regex llama.cpp quotes for LLAMA_VOCAB_PRE_TYPE_GPT4O) */
#define RE_GPT4O "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*" \
                 "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
                 "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+" \
                 "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
                 "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|" \
                 "\\\\s+(?!\\\\S)|\\\\s+"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\\\p{L}+| ?\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|" \
                "\\\\s+(?!\\\\S)|\\\\s+"

static const pre_rule PRE[] = {
    {"llama-bpe", RE_LLAMA3, 0, 1}, {"llama3", RE_LLAMA3, 0, 1},
    {"qwen2", RE_QWEN2, 1, 0},      {"gpt-2", RE_GPT2, 0, 0},
    {"default", RE_GPT2, 0, 0},     {"gpt-4o", RE_GPT4O, 0, 1},
};

/* ---- a growing byte buffer ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(sbuf *b, const char *fmt, long long v)
{
    char t[64];
    snprintf(t, sizeof t, fmt, v);
    puts_(b, t);
}

/* s[0..n) as a JSON string, quotes included (bytes >= 0x80 copied: the loader checks UTF-8) */
static void put_jstr(sbuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\')
            e[0] = '\\', e[1] = (char)c, put(b, e, 2);
        else if (c < 0x20)
            snprintf(e, sizeof e, "\\u%04x", c), put(b, e, 6);
        else
            put(b, &s[i], 1);
    }
    put(b, "\"", 1);
}

/* ---- the arrays, read from the file through a buffer ---- */

typedef struct arr_rd {
    const ck_src *src;
    uint64_t pos;
    uint8_t buf[1 << 14];
    uint64_t at;  /* file offset of buf[0] */
    size_t have;  /* valid bytes in buf */
} arr_rd;

static int rd(arr_rd *r, void *out, uint64_t n, const char *key, fg_err *err)
{
    if (r->pos >= r->at && r->pos + n <= r->at + r->have) {
        memcpy(out, r->buf + (r->pos - r->at), (size_t)n);
        r->pos += n;
        return FG_OK;
    }
    if (n > sizeof r->buf) { /* a long string: read directly */
        int rc = ck_src_read(r->src, r->pos, out, (size_t)n, key, err);
        r->pos += n;
        return rc;
    }
    uint64_t left = r->src->size - r->pos;
    r->have = (size_t)(left < sizeof r->buf ? left : sizeof r->buf);
    r->at = r->pos;
    int rc = ck_src_read(r->src, r->at, r->buf, r->have, key, err);
    if (rc)
        return rc;
    if (n > r->have)
        return ck_src_read(r->src, r->pos, out, (size_t)n, key, err);
    return rd(r, out, n, key, err);
}

/* The next string of the array (malloc'd into *s, NUL-terminated; parse checked its bounds) */
static int rd_str(arr_rd *r, char **s, uint64_t *n, const char *key, fg_err *err)
{
    uint8_t b[8];
    int rc = rd(r, b, 8, key, err);
    if (rc)
        return rc;
    *n = fg_le64(b);
    if (*n > CK_GGUF_MAX_STR || !(*s = malloc((size_t)*n + 1)))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for %s", r->src->label, key);
    (*s)[*n] = 0;
    rc = rd(r, *s, *n, key, err);
    if (rc)
        free(*s), *s = NULL;
    return rc;
}

/* The array named key, of element type want, or an error naming it */
static const ck_gguf_kv *array_of(const ck_gguf *g, const char *key, uint32_t want,
                                  const char *label, fg_err *err)
{
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    if (!kv || kv->type != CK_GGUF_ARRAY || kv->arr_type != want) {
        fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: %s is %s (an array of %s)", label, key,
                   !kv ? "missing" : "of the wrong type",
                   want == CK_GGUF_STRING ? "strings" : "int32");
        return NULL;
    }
    return kv;
}

/* The tokens (tokens[i], lens[i], malloc'd) and their types (0 when absent) */
typedef struct vocab {
    char **tok;
    uint64_t *len;
    int32_t *type;
    uint64_t n;
} vocab;

static void vocab_free(vocab *v)
{
    for (uint64_t i = 0; v->tok && i < v->n; i++)
        free(v->tok[i]);
    free(v->tok), free(v->len), free(v->type);
}

static int read_vocab(const ck_gguf *g, const ck_src *src, vocab *v, fg_err *err)
{
    const ck_gguf_kv *kt = array_of(g, "tokenizer.ggml.tokens", CK_GGUF_STRING, src->label, err);
    if (!kt)
        return FG_ERR_TOK_CONFIG;
    v->n = kt->arr_n;
    v->tok = calloc(v->n + 1, sizeof *v->tok);
    v->len = calloc(v->n + 1, sizeof *v->len);
    v->type = calloc(v->n + 1, sizeof *v->type);
    if (!v->tok || !v->len || !v->type)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the tokens", src->label);
    arr_rd r = {.src = src, .pos = kt->arr_off};
    int rc = FG_OK;
    for (uint64_t i = 0; i < v->n && rc == FG_OK; i++)
        rc = rd_str(&r, &v->tok[i], &v->len[i], kt->key, err);
    const ck_gguf_kv *ky = ck_gguf_get(g, "tokenizer.ggml.token_type");
    if (rc || !ky)
        return rc;
    if (!array_of(g, ky->key, CK_GGUF_I32, src->label, err))
        return FG_ERR_TOK_CONFIG;
    if (ky->arr_n != v->n)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: tokenizer.ggml.token_type has %llu "
                          "entries for %llu tokens", src->label,
                          (unsigned long long)ky->arr_n, (unsigned long long)v->n);
    r = (arr_rd){.src = src, .pos = ky->arr_off};
    for (uint64_t i = 0; i < v->n && rc == FG_OK; i++) {
        uint8_t b[4];
        rc = rd(&r, b, 4, ky->key, err);
        v->type[i] = (int32_t)fg_le32(b);
    }
    return rc;
}

/* ---- tokenizer.json ---- */

static void put_added(sbuf *b, const vocab *v)
{
    int first = 1;
    puts_(b, "\"added_tokens\":[");
    for (uint64_t i = 0; i < v->n; i++) {
        if (v->type[i] != 2 && v->type[i] != 3 && v->type[i] != 4)
            continue;
        puts_(b, first ? "{\"id\":" : ",{\"id\":");
        first = 0;
        putf(b, "%lld,\"content\":", (long long)i);
        put_jstr(b, v->tok[i], v->len[i]);
        puts_(b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":");
        puts_(b, v->type[i] == 4 ? "true,\"special\":false}" : "false,\"special\":true}");
    }
    puts_(b, "],");
}

static void put_pipeline(sbuf *b, const pre_rule *p, const vocab *v, long long bos, int add_bos)
{
    puts_(b, p->nfc ? "\"normalizer\":{\"type\":\"NFC\"}," : "\"normalizer\":null,");
    puts_(b, "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"");
    puts_(b, p->regex);
    puts_(b, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
             "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},");
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,"
                     "\"use_regex\":true}";
    if (add_bos && bos >= 0) {
        puts_(b, "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[");
        puts_(b, bl);
        puts_(b, ",{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":");
        put_jstr(b, v->tok[bos], v->len[bos]);
        puts_(b, ",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":"
                 "[{\"SpecialToken\":{\"id\":");
        put_jstr(b, v->tok[bos], v->len[bos]);
        puts_(b, ",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"Sequence\":"
                 "{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{");
        put_jstr(b, v->tok[bos], v->len[bos]);
        puts_(b, ":{\"id\":");
        put_jstr(b, v->tok[bos], v->len[bos]);
        putf(b, ",\"ids\":[%lld],\"tokens\":[", bos);
        put_jstr(b, v->tok[bos], v->len[bos]);
        puts_(b, "]}}}]},");
    } else {
        puts_(b, "\"post_processor\":");
        puts_(b, bl);
        puts_(b, ",");
    }
    puts_(b, "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
             "\"use_regex\":true},");
}

static int put_model(sbuf *b, const ck_gguf *g, const ck_src *src, const pre_rule *p,
                     const vocab *v, fg_err *err)
{
    puts_(b, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
             "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
             "\"byte_fallback\":false,\"ignore_merges\":");
    puts_(b, p->ignore_merges ? "true,\"vocab\":{" : "false,\"vocab\":{");
    for (uint64_t i = 0; i < v->n; i++) {
        if (i)
            put(b, ",", 1);
        put_jstr(b, v->tok[i], v->len[i]);
        putf(b, ":%lld", (long long)i);
    }
    puts_(b, "},\"merges\":[");
    const ck_gguf_kv *km = array_of(g, "tokenizer.ggml.merges", CK_GGUF_STRING, src->label, err);
    if (!km)
        return FG_ERR_TOK_CONFIG;
    arr_rd r = {.src = src, .pos = km->arr_off};
    int rc = FG_OK;
    for (uint64_t i = 0; i < km->arr_n && rc == FG_OK; i++) {
        char *s = NULL;
        uint64_t n;
        rc = rd_str(&r, &s, &n, km->key, err);
        if (rc == FG_OK && i)
            put(b, ",", 1);
        if (rc == FG_OK)
            put_jstr(b, s, n);
        free(s);
    }
    puts_(b, "]}}");
    return rc;
}

/* ---- SentencePiece (tokenizer.ggml.model "llama") ---- */

/* A piece -> id index over the tokens (open addressing; FNV-1a) */
typedef struct piece_ix {
    uint64_t *slot; /* id + 1, 0 empty */
    uint64_t mask;
} piece_ix;

static uint64_t fnv(const char *s, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int ix_build(piece_ix *x, const vocab *v)
{
    uint64_t cap = 16;
    while (cap < 2 * v->n + 2)
        cap *= 2;
    if (!(x->slot = calloc(cap, sizeof *x->slot)))
        return -1;
    x->mask = cap - 1;
    for (uint64_t i = 0; i < v->n; i++) {
        uint64_t h = fnv(v->tok[i], v->len[i]) & x->mask;
        while (x->slot[h]) {
            uint64_t j = x->slot[h] - 1;
            if (v->len[j] == v->len[i] && !memcmp(v->tok[j], v->tok[i], v->len[i]))
                break; /* a duplicate keeps the first id (the loader refuses it, named) */
            h = (h + 1) & x->mask;
        }
        if (!x->slot[h])
            x->slot[h] = i + 1;
    }
    return 0;
}

static int64_t ix_find(const piece_ix *x, const vocab *v, const char *s, uint64_t n)
{
    for (uint64_t h = fnv(s, n) & x->mask; x->slot[h]; h = (h + 1) & x->mask) {
        uint64_t j = x->slot[h] - 1;
        if (v->len[j] == n && !memcmp(v->tok[j], s, n))
            return (int64_t)j;
    }
    return -1;
}

typedef struct merge { float score; uint64_t seq; uint32_t l, r; } merge;

static int merge_cmp(const void *a, const void *b)
{
    const merge *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The merges a SentencePiece BPE vocabulary implies, as transformers' SentencePieceExtractor
 * derives them (the tokenizer.json of every Llama / Mistral HF release was made so): for each
 * token by id, every split at a UTF-8 character boundary into two tokens, those of one token
 * ordered by the two ids; then all by the token's score, highest first, stably. */
static int spm_merges(const vocab *v, uint64_t n_model, const float *score, merge **out,
                      uint64_t *n_out)
{
    piece_ix x = {0};
    uint64_t n = 0, cap = 0;
    merge *m = NULL;
    vocab mv = *v;
    mv.n = n_model;
    if (ix_build(&x, &mv))
        return -1;
    for (uint64_t i = 0; i < n_model; i++) {
        uint64_t first = n;
        for (uint64_t k = 1; k < v->len[i]; k++) {
            if (((uint8_t)v->tok[i][k] & 0xc0) == 0x80)
                continue; /* inside a character */
            int64_t l = ix_find(&x, &mv, v->tok[i], k);
            int64_t r = l < 0 ? -1 : ix_find(&x, &mv, v->tok[i] + k, v->len[i] - k);
            if (r < 0)
                continue;
            if (n == cap) {
                merge *g = realloc(m, (cap = cap ? 2 * cap : 1024) * sizeof *m);
                if (!g) {
                    free(m), free(x.slot);
                    return -1;
                }
                m = g;
            }
            m[n++] = (merge){score[i], 0, (uint32_t)l, (uint32_t)r};
        }
        for (uint64_t a = first + 1; a < n; a++) /* (by ids: insertion, a token's few splits) */
            for (uint64_t b = a; b > first && (m[b - 1].l > m[b].l ||
                                               (m[b - 1].l == m[b].l && m[b - 1].r > m[b].r));
                 b--) {
                merge t = m[b];
                m[b] = m[b - 1], m[b - 1] = t;
            }
    }
    for (uint64_t k = 0; k < n; k++)
        m[k].seq = k;
    qsort(m, n, sizeof *m, merge_cmp);
    free(x.slot);
    *out = m, *n_out = n;
    return 0;
}

/* tokenizer.ggml.scores as floats (one per token) */
static int read_scores(const ck_gguf *g, const ck_src *src, const vocab *v, float **out,
                       fg_err *err)
{
    const ck_gguf_kv *k = ck_gguf_get(g, "tokenizer.ggml.scores");
    if (!k || k->type != CK_GGUF_ARRAY || k->arr_type != CK_GGUF_F32 || k->arr_n != v->n)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: tokenizer.ggml.scores is %s (an array of "
                          "float32, one per token)", src->label, !k ? "missing"
                          : "of the wrong type or length");
    float *s = malloc((size_t)(v->n + 1) * sizeof *s);
    if (!s)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the scores", src->label);
    arr_rd r = {.src = src, .pos = k->arr_off};
    int rc = FG_OK;
    for (uint64_t i = 0; i < v->n && rc == FG_OK; i++) {
        uint8_t b[4];
        rc = rd(&r, b, 4, k->key, err);
        uint32_t u = fg_le32(b);
        memcpy(&s[i], &u, 4);
        s[i] = s[i] != s[i] ? -INFINITY : s[i]; /* (a NaN ranks last: a total order to sort by) */
    }
    if (rc)
        free(s), s = NULL;
    *out = s;
    return rc;
}

/* Llama's (legacy) SentencePiece pipeline as its tokenizer.json spells it: U+2581 prepended
 * (add_space_prefix) and spaces replaced by it, no pre-tokenizer, BOS (and EOS) added by a
 * template, the decoder undoing it with byte fallback */
static void put_spm_pipeline(sbuf *b, const vocab *v, long long bos, int add_bos, long long eos,
                             int add_eos, int space)
{
    puts_(b, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[");
    if (space)
        puts_(b, "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},");
    puts_(b, "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
             "\"pre_tokenizer\":null,\"post_processor\":");
    if ((add_bos && bos >= 0) || (add_eos && eos >= 0)) {
        long long ids[2] = {add_bos ? bos : -1, add_eos ? eos : -1};
        puts_(b, "{\"type\":\"TemplateProcessing\",\"single\":[");
        for (int k = 0, first = 1; k < 3; k++) {
            if (k != 1 && ids[k / 2] < 0)
                continue;
            puts_(b, first ? "" : ","), first = 0;
            if (k == 1) {
                puts_(b, "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}");
                continue;
            }
            puts_(b, "{\"SpecialToken\":{\"id\":");
            put_jstr(b, v->tok[ids[k / 2]], v->len[ids[k / 2]]);
            puts_(b, ",\"type_id\":0}}");
        }
        puts_(b, "],\"pair\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"Sequence\":"
                 "{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{");
        for (int k = 0, first = 1; k < 2; k++) {
            if (ids[k] < 0 || (k == 1 && ids[1] == ids[0]))
                continue;
            puts_(b, first ? "" : ","), first = 0;
            put_jstr(b, v->tok[ids[k]], v->len[ids[k]]);
            puts_(b, ":{\"id\":");
            put_jstr(b, v->tok[ids[k]], v->len[ids[k]]);
            putf(b, ",\"ids\":[%lld],\"tokens\":[", ids[k]);
            put_jstr(b, v->tok[ids[k]], v->len[ids[k]]);
            puts_(b, "]}");
        }
        puts_(b, "}},");
    } else {
        puts_(b, "null,");
    }
    puts_(b, "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
             "\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":"
             "\"ByteFallback\"},{\"type\":\"Fuse\"}");
    puts_(b, space ? ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
                   : "]},");
}

static int put_spm_model(sbuf *b, const ck_gguf *g, const ck_src *src, const vocab *v,
                         fg_err *err)
{
    float *score = NULL;
    merge *m = NULL;
    uint64_t n = 0, unk_id, n_model = v->n;
    while (n_model && (v->type[n_model - 1] == 3 || v->type[n_model - 1] == 4))
        n_model--; /* (tokens added past the SentencePiece model: added tokens only) */
    int rc = read_scores(g, src, v, &score, err);
    if (rc == FG_OK && spm_merges(v, n_model, score, &m, &n))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the merges", src->label);
    free(score);
    if (rc)
        return rc;
    int64_t unk = ck_gguf_uint(g, "tokenizer.ggml.unknown_token_id", &unk_id) == FG_OK &&
                  unk_id < v->n ? (int64_t)unk_id : -1;
    int bytes = 0;
    for (uint64_t i = 0; i < v->n; i++) {
        unk = unk < 0 && v->type[i] == 2 ? (int64_t)i : unk; /* UNKNOWN */
        bytes |= v->type[i] == 6; /* BYTE: <0xXX> */
    }
    puts_(b, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
    if (unk >= 0)
        put_jstr(b, v->tok[unk], v->len[unk]);
    puts_(b, unk >= 0 ? "," : "null,");
    puts_(b, "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
             "\"byte_fallback\":");
    puts_(b, bytes ? "true" : "false");
    puts_(b, ",\"ignore_merges\":false,\"vocab\":{");
    for (uint64_t i = 0; i < n_model; i++) {
        if (i)
            put(b, ",", 1);
        put_jstr(b, v->tok[i], v->len[i]);
        putf(b, ":%lld", (long long)i);
    }
    puts_(b, "},\"merges\":[");
    for (uint64_t k = 0; k < n; k++) {
        puts_(b, k ? ",[" : "[");
        put_jstr(b, v->tok[m[k].l], v->len[m[k].l]);
        put(b, ",", 1);
        put_jstr(b, v->tok[m[k].r], v->len[m[k].r]);
        put(b, "]", 1);
    }
    puts_(b, "]}}");
    free(m);
    return FG_OK;
}

/* ---- tokenizer_config.json ---- */

/* The token id under key as a JSON string ("null" when absent); -1 into *id then */
static int put_role(sbuf *b, const ck_gguf *g, const vocab *v, const char *role, const char *key,
                    long long *id, const char *label, fg_err *err)
{
    uint64_t u;
    *id = -1;
    puts_(b, "\""), puts_(b, role), puts_(b, "\":");
    if (ck_gguf_uint(g, key, &u) != FG_OK) {
        puts_(b, "null,");
        return FG_OK;
    }
    if (u >= v->n)
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: %s %llu is not a token id (%llu tokens)",
                          label, key, (unsigned long long)u, (unsigned long long)v->n);
    *id = (long long)u;
    put_jstr(b, v->tok[u], v->len[u]);
    puts_(b, ",");
    return FG_OK;
}

static int put_config(sbuf *c, const ck_gguf *g, const vocab *v, long long *bos, int *add_bos,
                      long long *eos, const char *label, fg_err *err)
{
    long long pad;
    int spm = !strcmp(ck_gguf_str(g, "tokenizer.ggml.model"), "llama");
    puts_(c, "{");
    int rc = put_role(c, g, v, "bos_token", "tokenizer.ggml.bos_token_id", bos, label, err);
    if (rc == FG_OK)
        rc = put_role(c, g, v, "eos_token", "tokenizer.ggml.eos_token_id", eos, label, err);
    if (rc == FG_OK)
        rc = put_role(c, g, v, "pad_token", "tokenizer.ggml.padding_token_id", &pad, label, err);
    uint64_t ab = 0; /* (llama.cpp adds BOS by default to a SentencePiece vocabulary) */
    int has = ck_gguf_uint(g, "tokenizer.ggml.add_bos_token", &ab) == FG_OK;
    *add_bos = has ? ab != 0 : spm;
    puts_(c, *add_bos ? "\"add_bos_token\":true" : "\"add_bos_token\":false");
    if (spm) /* transformers' view of a SentencePiece Llama vocabulary (the legacy pipeline,
              * which is also how llama.cpp tokenizes it: U+2581 prepended after specials) */
        puts_(c, ",\"tokenizer_class\":\"LlamaTokenizer\",\"legacy\":true");
    const ck_gguf_kv *t = ck_gguf_get(g, "tokenizer.chat_template");
    if (t && t->type == CK_GGUF_STRING) {
        puts_(c, ",\"chat_template\":");
        put_jstr(c, t->str, t->str_len);
    }
    puts_(c, "}");
    return rc;
}

/* Loaded as the store will load it; *tok the tokenizer (caller frees) when tok != NULL */
static int load(const char *label, const sbuf *t, const sbuf *c, fg_tok **tok, fg_err *err)
{
    char tname[4200], cname[4200];
    snprintf(tname, sizeof tname, "%s: tokenizer.ggml.* as tokenizer.json", label);
    snprintf(cname, sizeof cname, "%s: tokenizer.ggml.* as tokenizer_config.json", label);
    fg_tok_json_files f = {t->p, t->n, tname, c->p, c->n, cname, NULL, 0, NULL, NULL};
    fg_tok *k = NULL;
    int rc = fg_tok_load_json_mem(&f, &k, err);
    if (rc == FG_OK && tok)
        *tok = k;
    else
        fg_tok_free(k);
    return rc;
}

int ck_gguf_tokenizer(const ck_gguf *g, const ck_src *src, char **tok_json, size_t *tok_len,
                      char **cfg_json, size_t *cfg_len, fg_tok **tok, fg_err *err)
{
    *tok_json = *cfg_json = NULL;
    const char *model = ck_gguf_str(g, "tokenizer.ggml.model");
    if (!model)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no tokenizer.ggml.model: name the "
                          "directory of the model's tokenizer.json with --tokenizer DIR",
                          src->label);
    int spm = !strcmp(model, "llama");
    if (strcmp(model, "gpt2") != 0 && !spm)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model \"%s\": fg converts "
                          "\"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece BPE): name the "
                          "directory of the model's tokenizer.json with --tokenizer DIR",
                          src->label, model);
    const char *pre = ck_gguf_str(g, "tokenizer.ggml.pre");
    const pre_rule *p = NULL;
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE && !p; i++)
        p = strcmp(pre ? pre : "default", PRE[i].name) == 0 ? &PRE[i] : NULL;
    if (!p && !spm) /* (SentencePiece has no split regex: the name is not read) */
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre \"%s\": fg knows the "
                          "split regex of llama-bpe, llama3, qwen2, gpt-4o, gpt-2 and default", src->label,
                          pre);
    vocab v = {0};
    sbuf t = {0}, c = {0};
    long long bos, eos;
    int add_bos;
    uint64_t flag;
    int rc = read_vocab(g, src, &v, err);
    if (rc == FG_OK)
        rc = put_config(&c, g, &v, &bos, &add_bos, &eos, src->label, err);
    if (rc == FG_OK) {
        puts_(&t, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,");
        put_added(&t, &v);
    }
    if (rc == FG_OK && spm) {
        int add_eos = ck_gguf_uint(g, "tokenizer.ggml.add_eos_token", &flag) == FG_OK && flag;
        int space = ck_gguf_uint(g, "tokenizer.ggml.add_space_prefix", &flag) != FG_OK || flag;
        put_spm_pipeline(&t, &v, bos, add_bos, eos, add_eos, space);
        rc = put_spm_model(&t, g, src, &v, err);
    } else if (rc == FG_OK) {
        put_pipeline(&t, p, &v, bos, add_bos);
        rc = put_model(&t, g, src, p, &v, err);
    }
    if (rc == FG_OK && (t.oom || c.oom))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the tokenizer", src->label);
    if (rc == FG_OK)
        rc = load(src->label, &t, &c, tok, err);
    vocab_free(&v);
    if (rc) {
        free(t.p), free(c.p);
        return rc;
    }
    *tok_json = t.p, *tok_len = t.n, *cfg_json = c.p, *cfg_len = c.n;
    return FG_OK;
}
