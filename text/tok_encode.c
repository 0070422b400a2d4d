/* tok_encode.c - GPT-2 byte-level BPE: special-token split, pre-tokenization, merges, decode.
 * The merge loop, the output vectors and added-token search are shared with the tokenizer.json
 * classes, whose encode (tok_pipe.c) and decode (tok_decode.c) fg_tok_encode / fg_tok_decode
 * hand over to.
 *
 * Encoding a byte string, as Hugging Face `tokenizers` does for GPT-2 (ByteLevel,
 * add_prefix_space = false, no normalizer):
 *   1. With FG_TOK_SPECIAL, cut the text at added tokens (leftmost, then longest match); each
 *      match is one id, the text between is encoded by steps 2-3.
 *   2. Pre-tokenize with GPT-2's regex
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      run by PCRE2 in UTF + UCP mode (JIT when available). \s is spelled out as the Unicode
 *      White_Space property (25 code points), which is what Oniguruma (Hugging Face) and
 *      Python's `regex` (GPT-2) use; PCRE2's own \s adds U+180E, which since Unicode 6.3 is
 *      not white space. \p{L} and \p{N} come from PCRE2's tables (Unicode 14 in PCRE2 10.42):
 *      code points assigned after Unicode 14 may split differently from a newer reference.
 *   3. Each piece's bytes become byte-level symbols (one id per byte), merged by rank exactly as
 *      Hugging Face's Word::merge_all: a min-heap of candidate pairs ordered by (rank,
 *      position); a popped candidate whose pair has changed is stale and skipped; a merge keeps
 *      the left position and offers the new pairs with its neighbours. O(n log n) per piece,
 *      so a megabyte-long piece (a run of letters) costs no more than its size suggests.
 *      Pieces up to 64 bytes are memoised in the word cache.
 * Invalid UTF-8: PCRE2_MATCH_INVALID_UTF makes the regex treat ill-formed sequences as
 * characters that match nothing, so matches never contain them; each maximal run of bytes
 * between matches (only invalid bytes can be there, since the regex's alternatives together
 * match every valid character) is one more piece for step 3. Every byte has a token, so
 * decode(encode(s)) == s for every byte string.
 */
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

/* Unicode White_Space (PropList.txt), as a PCRE2 class body. */
#define WS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
           "\\x{205F}\\x{3000}"
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS
    "])|[" WS "]+";

int tok_regex_init(fg_tok *t, fg_err *err)
{
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "tokenizer: PCRE2 cannot compile the GPT-2 regex at %zu: %s",
                          (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);  /* the interpreter is the fallback */
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md)
        return fg_err_set(err, FG_ERR_NOMEM, "tokenizer: out of memory");
    return FG_OK;
}

/* ---- output vectors */

int tok_ids_reserve(fg_tok_ids *v, size_t extra)
{
    if (v->n + extra <= v->cap)
        return FG_OK;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + extra)
        cap *= 2;
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p)
        return FG_ERR_NOMEM;
    v->ids = p;
    v->cap = cap;
    return FG_OK;
}

int tok_ids_push(fg_tok_ids *v, int32_t id)
{
    if (v->n == v->cap && tok_ids_reserve(v, 1))
        return FG_ERR_NOMEM;
    v->ids[v->n++] = id;
    return FG_OK;
}

void fg_tok_ids_free(fg_tok_ids *v)
{
    if (v) {
        free(v->ids);
        memset(v, 0, sizeof *v);
    }
}

void fg_tok_bytes_free(fg_tok_bytes *v)
{
    if (v) {
        free(v->data);
        memset(v, 0, sizeof *v);
    }
}

/* ---- BPE merge of one piece */

static int cand_less(const tok_cand *a, const tok_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_cand *h, size_t *n, tok_cand c)
{
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static tok_cand heap_pop(tok_cand *h, size_t *n)
{
    tok_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
            c++;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Offer the pair starting at symbol `left` (if it has a right neighbour and a merge). */
static void offer(const fg_tok *t, tok_cand *h, size_t *n, const tok_sym *s, int32_t left)
{
    if (left < 0 || s[left].next < 0)
        return;
    const pairmap_ent *e = tok_pairmap_get(&t->merges, s[left].id, s[s[left].next].id);
    if (e)
        heap_push(h, n, (tok_cand){e->rank, (uint32_t)left, e->merged});
}

int tok_scratch_reserve(fg_tok *t, size_t n)
{
    if (n > t->sym_cap) {
        tok_sym *s = realloc(t->sym, n * sizeof *s);
        if (!s)
            return FG_ERR_NOMEM;
        t->sym = s;
        t->sym_cap = n;
    }
    if (3 * n > t->heap_cap) {
        tok_cand *h = realloc(t->heap, 3 * n * sizeof *h);
        if (!h)
            return FG_ERR_NOMEM;
        t->heap = h;
        t->heap_cap = 3 * n;
    }
    return FG_OK;
}

void tok_merge_all(fg_tok *t, size_t n)
{
    tok_sym *s = t->sym;
    tok_cand *h = t->heap;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        offer(t, h, &nh, s, (int32_t)i);
    while (nh) {
        tok_cand c = heap_pop(h, &nh);
        tok_sym *l = &s[c.pos];
        if (l->len == 0 || l->next < 0)
            continue;
        tok_sym *r = &s[l->next];
        const pairmap_ent *e = tok_pairmap_get(&t->merges, l->id, r->id);
        if (!e || e->merged != c.merged)
            continue;  /* stale candidate */
        l->id = c.merged;
        l->len += r->len;
        l->next = r->next;
        r->len = 0;
        if (l->next >= 0)
            s[l->next].prev = (int32_t)c.pos;
        offer(t, h, &nh, s, l->prev);
        offer(t, h, &nh, s, (int32_t)c.pos);
    }
}

static int bpe_piece(fg_tok *t, const unsigned char *p, size_t n, fg_tok_ids *out)
{
    if (n == 1)
        return tok_ids_push(out, t->byte_id[p[0]]);
    size_t k;
    const int32_t *hit = n <= TOK_WCACHE_MAX_WORD ? tok_wcache_get(&t->cache, (const char *)p, n, &k)
                                                  : NULL;
    if (hit) {
        if (tok_ids_reserve(out, k))
            return FG_ERR_NOMEM;
        memcpy(out->ids + out->n, hit, k * sizeof *hit);
        out->n += k;
        return FG_OK;
    }
    if (n > INT32_MAX || tok_scratch_reserve(t, n))
        return FG_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        t->sym[i] = (tok_sym){t->byte_id[p[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    tok_merge_all(t, n);
    size_t first = out->n;
    for (int32_t i = 0; i >= 0; i = t->sym[i].next)
        if (tok_ids_push(out, t->sym[i].id))
            return FG_ERR_NOMEM;
    if (n <= TOK_WCACHE_MAX_WORD)
        tok_wcache_put(&t->cache, (const char *)p, n, out->ids + first, out->n - first);
    return FG_OK;
}

/* ---- pre-tokenization */

int tok_next_piece(fg_tok *t, const unsigned char *s, size_t len, size_t pos, size_t *end)
{
    int rc = pcre2_match(t->re, s, len, pos, 0, t->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) {
        *end = len;  /* only invalid UTF-8 is left */
        return FG_OK;
    }
    if (rc < 0)
        return rc == PCRE2_ERROR_NOMEMORY ? FG_ERR_NOMEM : FG_ERR_LIMIT;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    *end = ov[0] > pos ? ov[0] : ov[1];  /* invalid UTF-8 before the match is a piece */
    return FG_OK;
}

static int encode_ordinary(fg_tok *t, const unsigned char *s, size_t len, fg_tok_ids *out)
{
    for (size_t pos = 0, end; pos < len; pos = end) {
        int rc = tok_next_piece(t, s, len, pos, &end);
        if (!rc)
            rc = bpe_piece(t, s + pos, end - pos, out);
        if (rc)
            return rc;
    }
    return FG_OK;
}

size_t tok_find_added(const fg_tok *t, const unsigned char *s, size_t len, size_t from, int set,
                      size_t *mlen, size_t *k)
{
    const uint8_t *first = t->added_first[set];
    for (size_t i = from; i < len; i++) {
        if (!first[s[i]])
            continue;
        int32_t j = tok_trie_longest(&t->added[set], s + i, len - i, mlen);
        if (j >= 0) {
            *k = (size_t)j;
            return i;
        }
    }
    return len;
}

static int encode_all(fg_tok *t, const unsigned char *s, size_t len, unsigned flags,
                      fg_tok_ids *out)
{
    int rc;
    if (t->cls != TOK_GPT2)
        return tok_json_encode(t, s, len, flags, out);
    if ((flags & FG_TOK_ADD_BOS) && t->role[FG_TOK_BOS] >= 0 &&
        (rc = tok_ids_push(out, t->role[FG_TOK_BOS])))
        return rc;
    if (!(flags & FG_TOK_SPECIAL) || t->n_special == 0)
        return encode_ordinary(t, s, len, out);
    size_t pos = 0;
    while (pos < len) {
        size_t mlen = 0, k = 0;
        size_t at = tok_find_added(t, s, len, pos, 0, &mlen, &k);
        if ((rc = encode_ordinary(t, s + pos, at - pos, out)))
            return rc;
        if (at < len && (rc = tok_ids_push(out, t->special[k].id)))
            return rc;
        pos = at + mlen;
    }
    return FG_OK;
}

int fg_tok_encode(fg_tok *t, const void *text, size_t len, unsigned flags, fg_tok_ids *out,
                  fg_err *err)
{
    if (!t || !out || (!text && len))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "fg_tok_encode: NULL argument");
    size_t n0 = out->n;
    int rc = encode_all(t, (const unsigned char *)text, len, flags, out);
    if (rc) {
        out->n = n0;
        return fg_err_set(err, rc, "fg_tok_encode: %zu bytes of text: %s", len, fg_strerror(rc));
    }
    return FG_OK;
}

int fg_tok_decode(const fg_tok *t, const int32_t *ids, size_t n, unsigned flags,
                  fg_tok_bytes *out, fg_err *err)
{
    if (!t || !out || (!ids && n))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "fg_tok_decode: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0)
            return fg_err_set(err, FG_ERR_TOK_BAD_ID, "fg_tok_decode: ids[%zu] = %d is negative (token ids are 0 or more)",
                              i, ids[i]);
    if (t->cls != TOK_GPT2 && !(t->fast_decode && !(flags & FG_TOK_REPLACE_INVALID)))
        return tok_json_decode(t, ids, n, flags, out, err);  /* else: the bytes concatenated */
    size_t total = 0;
    for (size_t i = 0; i < n; i++)  /* an id without a token decodes as nothing */
        if (tok_has_token(t, ids[i]) && !((flags & FG_TOK_SKIP_SPECIAL) && t->id_special[ids[i]]))
            total += t->id_len[ids[i]];
    if (total == 0)
        return FG_OK;
    if (out->len + total > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + total)
            cap *= 2;
        char *p = realloc(out->data, cap);
        if (!p)
            return fg_err_set(err, FG_ERR_NOMEM, "fg_tok_decode: out of memory for %zu bytes", total);
        out->data = p;
        out->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (!tok_has_token(t, id) || ((flags & FG_TOK_SKIP_SPECIAL) && t->id_special[id]))
            continue;
        memcpy(out->data + out->len, t->id_bytes.p + t->id_off[id], t->id_len[id]);
        out->len += t->id_len[id];
    }
    return FG_OK;
}
