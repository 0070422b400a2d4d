/* tok_pipe.c - encoding for the tokenizer.json classes, step for step as `tokenizers` does:
 *
 *   1. Added tokens whose `normalized` is false are cut out of the raw text (AddedVocabulary::
 *      find_matches): the leftmost match, the longest there, searching on after each match
 *      even when the match is then dropped (a special token without FG_TOK_SPECIAL, the
 *      encode_special_tokens switch; a single_word token touching a word character). lstrip /
 *      rstrip widen a kept match over the white space before / after it.
 *   2. Each remaining gap is normalized (tok_normalize), then cut again at the added tokens
 *      whose `normalized` is true, matched as the normalizer rewrote their content.
 *   3. Each gap goes through the pre-tokenizer steps (pre_level, one recursion level per step,
 *      each with its own scratch so a parent's pieces stay valid while its children run):
 *      Split (regex ranges + behavior), ByteLevel (optional leading space, GPT-2 regex, then
 *      the model sees bytes as byte-level symbols), Metaspace (' ' -> replacement, the
 *      replacement prepended per prepend_scheme, where "first" means the piece starts at
 *      offset 0 of the input, then optionally split before each replacement).
 *   4. The BPE model (model_word): ignore_merges looks the whole piece up first; else each
 *      character (each byte for byte-level) becomes its vocab id, or with byte_fallback the ids
 *      of its <0xNN> tokens, or the unk id (fused with a preceding unk when fuse_unk), or
 *      nothing; then merges by rank (tok_merge_all). Pieces up to 64 bytes are cached. A long
 *      SentencePiece-style piece (Llama 2's whole text is one) is cut into words first when
 *      that cannot change the result (model_piece, sp_cuttable), which makes it linear.
 * Empty pieces are dropped at every stage, as PreTokenizedString::split does. Invalid UTF-8
 * (which `tokenizers` cannot be given) is carried byte by byte: regexes never match it, and the
 * model treats each invalid byte as a character of its own (byte fallback, unk or dropped).
 */
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

static int aput(tok_arena *a, const void *p, size_t n)
{
    uint32_t off;
    return tok_arena_put(a, p, n, &off);
}

/* ---- normalizers */

/* Normalize the valid UTF-8 run s[0..len) with utf8proc. */
static int norm_run(const tok_step *st, const unsigned char *s, size_t len, tok_arena *o)
{
    static const utf8proc_option_t opt[4] = {
        UTF8PROC_STABLE | UTF8PROC_COMPOSE, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map(s, (utf8proc_ssize_t)len, &res, opt[st->kind - ST_NFC]);
    int rc = n < 0 ? (n == UTF8PROC_ERROR_NOMEM ? FG_ERR_NOMEM : FG_ERR_LIMIT) : aput(o, res, (size_t)n);
    free(res);
    return rc;
}

/* NFC / NFD / NFKC / NFKD. ASCII is invariant under all four and never combines with what
 * precedes it, so only the stretches from the ASCII character before a non-ASCII run to the
 * next ASCII character go through utf8proc; an invalid byte is copied and splits runs too. */
static int unicode_norm(const tok_step *st, const unsigned char *s, size_t len, tok_arena *o)
{
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] < 0x80)
            j++;
        if (j == len)
            return aput(o, s + i, len - i);
        size_t start = j > i ? j - 1 : j;  /* the ASCII character a mark may combine with */
        if (start > i && aput(o, s + i, start - i))
            return FG_ERR_NOMEM;
        uint32_t cp = 0;
        size_t k = j;
        while (k < len && s[k] >= 0x80) {
            size_t w = tok_utf8_next(s + k, len - k, &cp);
            if (cp == UINT32_MAX)
                break;
            k += w;
        }
        int rc = norm_run(st, s + start, k - start, o);
        if (!rc && k < len && s[k] >= 0x80)  /* an invalid byte */
            rc = aput(o, s + k++, 1);
        if (rc)
            return rc;
        i = k;
    }
    return FG_OK;
}

static int norm_step(fg_tok *t, const tok_step *st, const unsigned char *s, size_t len, tok_arena *o)
{
    o->len = 0;
    if (st->kind == ST_PREPEND) {
        if (len && aput(o, st->a, st->a_len))
            return FG_ERR_NOMEM;
        return aput(o, s, len);
    }
    if (st->kind != ST_REPLACE)
        return unicode_norm(st, s, len, o);
    int rc = tok_step_ranges(st, st->md, s, len, &t->nlv);
    for (size_t i = 0; i < t->nlv.n && !rc; i++) {
        const tok_range *r = &t->nlv.r[i];
        rc = r->match ? aput(o, st->a, st->a_len) : aput(o, s + r->a, r->b - r->a);
    }
    return rc;
}

int tok_normalize(fg_tok *t, const unsigned char *s, size_t len, const unsigned char **res,
                  size_t *res_len)
{
    const unsigned char *cur = s;
    size_t n = len;
    for (int i = 0; i < t->n_norm; i++) {
        tok_arena *o = &t->nbuf[i & 1];
        int rc = norm_step(t, &t->norm[i], cur, n, o);
        if (rc)
            return rc;
        cur = (const unsigned char *)(o->p ? o->p : "");
        n = o->len;
    }
    *res = cur;
    *res_len = n;
    return FG_OK;
}

/* ---- the model */

typedef struct unkst { int32_t id; int pending; } unkst;

static void add_sym(fg_tok *t, size_t *n, int32_t id)
{
    t->sym[*n] = (tok_sym){id, (int32_t)*n - 1, -1, 1};
    if (*n)
        t->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
}

/* One character of the piece, spelled s[0..k); id is its vocab id when already known. */
static void add_unit(fg_tok *t, size_t *n, unkst *u, const unsigned char *s, size_t k, int32_t id)
{
    if (id < 0)
        id = tok_strmap_get(&t->vocab, (const char *)s, k);
    if (id >= 0) {
        if (u->pending)
            add_sym(t, n, u->id);
        u->pending = 0;
        add_sym(t, n, id);
        return;
    }
    if (t->byte_fallback) {
        size_t j = 0;
        while (j < k && t->fb_id[s[j]] >= 0)
            j++;
        if (j == k) {  /* as tokenizers does: a pending unk is not flushed first */
            for (j = 0; j < k; j++)
                add_sym(t, n, t->fb_id[s[j]]);
            return;
        }
    }
    if (t->unk_id < 0)
        return;
    if (u->pending && !t->fuse_unk)
        add_sym(t, n, u->id);
    u->pending = 1;
    u->id = t->unk_id;
}

/* The byte-level spelling of p[0..n) (each byte as its symbol's UTF-8) in t->scratch. */
static int bytelevel_key(fg_tok *t, const unsigned char *p, size_t n)
{
    t->scratch.len = 0;
    for (size_t i = 0; i < n; i++)
        if (aput(&t->scratch, t->bl_sym[p[i]], t->bl_sym[p[i]][2]))
            return FG_ERR_NOMEM;
    return FG_OK;
}

static int initial_symbols(fg_tok *t, const unsigned char *p, size_t n, size_t *ns)
{
    unkst u = {-1, 0};
    *ns = 0;
    for (size_t i = 0; i < n;) {
        if (t->byte_level) {
            if (t->byte_id[p[i]] >= 0) {
                if (u.pending)
                    add_sym(t, ns, u.id);
                u.pending = 0;
                add_sym(t, ns, t->byte_id[p[i]]);
            } else {
                int rc = bytelevel_key(t, p + i, 1);
                if (rc)
                    return rc;
                add_unit(t, ns, &u, (const unsigned char *)t->scratch.p, t->scratch.len, -1);
            }
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = tok_utf8_next(p + i, n - i, &cp);
        add_unit(t, ns, &u, p + i, k, cp < 128 ? t->ascii_id[cp] : -1);
        i += k;
    }
    if (u.pending)
        add_sym(t, ns, u.id);
    return FG_OK;
}

static int model_word(fg_tok *t, const unsigned char *p, size_t n, fg_tok_ids *out)
{
    size_t k;
    const int32_t *hit = n <= TOK_WCACHE_MAX_WORD ? tok_wcache_get(&t->cache, (const char *)p, n, &k)
                                                  : NULL;
    if (hit) {
        if (k == 0)  /* every character dropped (no unk, no byte fallback) */
            return FG_OK;
        if (tok_ids_reserve(out, k))
            return FG_ERR_NOMEM;
        memcpy(out->ids + out->n, hit, k * sizeof *hit);
        out->n += k;
        return FG_OK;
    }
    size_t first = out->n, ns;
    int32_t whole = -1;
    int rc;
    if (t->ignore_merges) {
        if (t->byte_level && (rc = bytelevel_key(t, p, n)))
            return rc;
        whole = t->byte_level ? tok_strmap_get(&t->vocab, t->scratch.p, t->scratch.len)
                              : tok_strmap_get(&t->vocab, (const char *)p, n);
    }
    if (whole >= 0) {
        if ((rc = tok_ids_push(out, whole)))
            return rc;
    } else {
        /* a byte-level symbol missing from the vocabulary may fall back to the 2 byte tokens
         * of its UTF-8 spelling: at most 2 symbols per input byte */
        if (n > INT32_MAX / 2 || tok_scratch_reserve(t, t->byte_level ? 2 * n : n) ||
            (rc = initial_symbols(t, p, n, &ns)))
            return FG_ERR_NOMEM;
        if (ns)
            tok_merge_all(t, ns);
        for (int32_t i = ns ? 0 : -1; i >= 0; i = t->sym[i].next)
            if ((rc = tok_ids_push(out, t->sym[i].id)))
                return rc;
    }
    if (n <= TOK_WCACHE_MAX_WORD)
        tok_wcache_put(&t->cache, (const char *)p, n, out->n > first ? out->ids + first : &whole,
                       out->n - first);
    return FG_OK;
}

static int is_meta(const unsigned char *p) { return p[0] == 0xE2 && p[1] == 0x96 && p[2] == 0x81; }

/* A piece through the model; with sp_cut, word by word (see sp_cuttable in tok_json.c). */
static int model_piece(fg_tok *t, const unsigned char *p, size_t n, fg_tok_ids *out)
{
    if (!t->sp_cut || n <= TOK_WCACHE_MAX_WORD)
        return model_word(t, p, n, out);
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++)
        if (is_meta(p + i) && !(i >= 3 && is_meta(p + i - 3))) {
            int rc = model_word(t, p + start, i - start, out);
            if (rc)
                return rc;
            start = i;
        }
    return model_word(t, p + start, n - start, out);
}

/* ---- pre-tokenizers */

/* Merge ranges per SplitDelimiterBehavior (NormalizedString::split), in place. */
static void apply_behavior(tok_level *lv, int behavior, int invert)
{
    size_t m = 0;
    int prev = 0;
    if (invert)
        for (size_t i = 0; i < lv->n; i++)
            lv->r[i].match = !lv->r[i].match;
    if (behavior == SPLIT_NEXT) {  /* right to left, then the kept ones moved down */
        size_t w = lv->n;
        for (size_t i = lv->n; i-- > 0;) {
            tok_range r = lv->r[i];
            if (r.match && !prev && w < lv->n)
                lv->r[w].a = r.a;
            else
                lv->r[--w] = r;
            prev = r.match;
        }
        memmove(lv->r, lv->r + w, (lv->n - w) * sizeof *lv->r);
        lv->n -= w;
        return;
    }
    for (size_t i = 0; i < lv->n; i++) {
        tok_range r = lv->r[i];
        int join = behavior == SPLIT_PREVIOUS ? r.match && !prev
                 : behavior == SPLIT_CONTIGUOUS ? r.match == prev : 0;
        if (behavior == SPLIT_REMOVED && r.match)
            ;
        else if (join && m)
            lv->r[m - 1].b = r.b;
        else
            lv->r[m++] = r;
        prev = r.match;
    }
    lv->n = m;
}

static int pre_level(fg_tok *t, int k, const unsigned char *s, size_t n, int origin, fg_tok_ids *out);

static int each_range(fg_tok *t, int k, tok_level *lv, const unsigned char *s, int origin,
                      fg_tok_ids *out)
{
    for (size_t i = 0; i < lv->n; i++) {
        size_t a = lv->r[i].a, b = lv->r[i].b;
        int rc = pre_level(t, k + 1, s + a, b - a, origin && a == 0, out);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* Ranges: every occurrence of the replacement string is a match of its own. */
static int char_ranges(const tok_step *st, const unsigned char *s, size_t n, tok_level *lv)
{
    size_t prev = 0;
    lv->n = 0;
    for (size_t i = 0; i + st->a_len <= n;) {
        if (memcmp(s + i, st->a, st->a_len) != 0) {
            i++;
            continue;
        }
        if ((prev < i && tok_range_push(lv, prev, i, 0)) || tok_range_push(lv, i, i + st->a_len, 1))
            return FG_ERR_NOMEM;
        i = prev = i + st->a_len;
    }
    return prev < n ? tok_range_push(lv, prev, n, 0) : FG_OK;
}

static int metaspace(fg_tok *t, int k, const unsigned char *s, size_t n, int origin, fg_tok_ids *out)
{
    const tok_step *st = &t->pre[k];
    tok_level *lv = &t->lvl[k];
    lv->buf.len = 0;
    /* after ' ' -> replacement, does the text start with the replacement? */
    int starts = s[0] == ' ' || (n >= st->a_len && memcmp(s, st->a, st->a_len) == 0);
    if (!starts && (st->scheme == PREPEND_ALWAYS || (st->scheme == PREPEND_FIRST && origin)) &&
        aput(&lv->buf, st->a, st->a_len))
        return FG_ERR_NOMEM;
    for (size_t i = 0; i < n;) {
        const unsigned char *sp = memchr(s + i, ' ', n - i);
        size_t j = sp ? (size_t)(sp - s) : n;
        if (aput(&lv->buf, s + i, j - i) || (sp && aput(&lv->buf, st->a, st->a_len)))
            return FG_ERR_NOMEM;
        i = j + (sp != NULL);
    }
    const unsigned char *b = (const unsigned char *)lv->buf.p;
    if (!st->split)
        return pre_level(t, k + 1, b, lv->buf.len, origin, out);
    int rc = char_ranges(st, b, lv->buf.len, lv);
    if (rc)
        return rc;
    apply_behavior(lv, SPLIT_NEXT, 0);
    return each_range(t, k, lv, b, origin, out);
}

static int pre_level(fg_tok *t, int k, const unsigned char *s, size_t n, int origin, fg_tok_ids *out)
{
    if (n == 0)
        return FG_OK;
    if (k == t->n_pre)
        return model_piece(t, s, n, out);
    const tok_step *st = &t->pre[k];
    tok_level *lv = &t->lvl[k];
    int rc;
    switch (st->kind) {
    case ST_SPLIT:
        if ((rc = tok_step_ranges(st, st->md, s, n, lv)))
            return rc;
        apply_behavior(lv, st->behavior, st->invert);
        return each_range(t, k, lv, s, origin, out);
    case ST_BYTELEVEL:
        if (st->prefix_space && s[0] != ' ') {
            lv->buf.len = 0;
            if (aput(&lv->buf, " ", 1) || aput(&lv->buf, s, n))
                return FG_ERR_NOMEM;
            s = (const unsigned char *)lv->buf.p;
            n++;
        }
        if (!st->re)
            return pre_level(t, k + 1, s, n, origin, out);
        if ((rc = tok_regex_ranges(st->re, st->md, s, n, lv)))
            return rc;
        return each_range(t, k, lv, s, origin, out);
    default:
        return metaspace(t, k, s, n, origin, out);
    }
}

/* ---- added tokens */

static int is_word(uint32_t cp)
{
    if (cp == UINT32_MAX)
        return 0;
    if (cp == 0x200C || cp == 0x200D)
        return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
           c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

/* The character ending at s[i) (i > 0). */
static uint32_t char_before(const unsigned char *s, size_t i, size_t *start)
{
    for (size_t k = 1; k <= 4 && k <= i; k++) {
        uint32_t cp;
        if ((s[i - k] & 0xC0) != 0x80 || k == 4 || k == i) {
            if (tok_utf8_next(s + i - k, k, &cp) == k) {
                *start = i - k;
                return cp;
            }
            break;
        }
    }
    *start = i - 1;
    return UINT32_MAX;
}

static int single_word_ok(const unsigned char *s, size_t len, size_t a, size_t b)
{
    size_t st;
    uint32_t cp;
    if (a > 0 && is_word(char_before(s, a, &st)))
        return 0;
    if (b < len) {
        tok_utf8_next(s + b, len - b, &cp);
        if (is_word(cp))
            return 0;
    }
    return 1;
}

typedef int (*gap_fn)(fg_tok *t, const unsigned char *s, size_t len, int origin, unsigned flags,
                      fg_tok_ids *out);

static int split_added(fg_tok *t, const unsigned char *s, size_t len, int set, unsigned flags,
                       int origin, gap_fn gap, fg_tok_ids *out)
{
    size_t start_offset = 0, from = 0;
    int rc;
    while (from < len) {
        size_t mlen = 0, k = 0, at = tok_find_added(t, s, len, from, set, &mlen, &k);
        if (at >= len)
            break;
        from = at + mlen;
        const tok_special *sp = &t->special[k];
        size_t a = at, b = at + mlen, st;
        if ((sp->special && !(flags & FG_TOK_SPECIAL)) || (sp->single_word && !single_word_ok(s, len, a, b)))
            continue;
        if (sp->lstrip) {
            while (a > 0 && tok_is_ws(char_before(s, a, &st)))
                a = st;
            a = a > start_offset ? a : start_offset;
        }
        uint32_t cp;
        size_t w;
        while (sp->rstrip && b < len && (w = tok_utf8_next(s + b, len - b, &cp)) && tok_is_ws(cp))
            b += w;
        if (start_offset < a && (rc = gap(t, s + start_offset, a - start_offset,
                                          origin && start_offset == 0, flags, out)))
            return rc;
        if ((rc = tok_ids_push(out, sp->id)))
            return rc;
        start_offset = b;
    }
    return start_offset < len ? gap(t, s + start_offset, len - start_offset,
                                    origin && start_offset == 0, flags, out) : FG_OK;
}

static int gap_pretok(fg_tok *t, const unsigned char *s, size_t len, int origin, unsigned flags,
                      fg_tok_ids *out)
{
    (void)flags;
    return pre_level(t, 0, s, len, origin, out);
}

/* Python's str.isspace (Kimi's chunking rule below): White_Space plus U+001C..U+001F. */
static int py_isspace(uint32_t c)
{
    return tok_is_ws(c) || (c >= 0x1C && c <= 0x1F);
}

/* Kimi's TikTokenTokenizer.encode, what transformers' tokenizer(text) runs on each stretch between
 * added tokens: cut into 400,000-character slices, each cut again before the 25,001st character
 * of a run of only-space or only-non-space characters (_split_whitespaces_or_nonwhitespaces), and
 * each piece encoded on its own. Characters are code points (an invalid byte counts as one). */
#define KIMI_MAX_SLICE 400000
#define KIMI_MAX_RUN 25000
static int kimi_chunks(fg_tok *t, const unsigned char *s, size_t len, int origin, fg_tok_ids *out)
{
    size_t slice = 0;
    while (slice < len || (slice == 0 && len == 0)) {
        size_t end = slice, nchar = 0;
        while (end < len && nchar < KIMI_MAX_SLICE) {
            uint32_t cp;
            end += tok_utf8_next(s + end, len - end, &cp);
            nchar++;
        }
        size_t start = slice, run = 0;
        int cur = -1;
        for (size_t i = slice; i < end;) {
            uint32_t cp;
            size_t k = tok_utf8_next(s + i, end - i, &cp);
            int sp = cp != UINT32_MAX && py_isspace(cp);
            if (cur < 0)
                cur = sp;
            if (cur != sp) {
                run = 1;
                cur = sp;
            } else if (++run > KIMI_MAX_RUN) {
                int rc = pre_level(t, 0, s + start, i - start, origin && start == 0, out);
                if (rc)
                    return rc;
                start = i;
                run = 1;
            }
            i += k;
        }
        int rc = pre_level(t, 0, s + start, end - start, origin && start == 0, out);
        if (rc || end >= len)
            return rc;
        slice = end;
    }
    return FG_OK;
}

static int gap_normalize(fg_tok *t, const unsigned char *s, size_t len, int origin, unsigned flags,
                         fg_tok_ids *out)
{
    if (t->cls == TOK_TIKTOKEN && (flags & FG_TOK_ADD_BOS) && len > KIMI_MAX_RUN)
        return kimi_chunks(t, s, len, origin, out);  /* no normalizer in this class */
    const unsigned char *ns;
    size_t nl;
    int rc = tok_normalize(t, s, len, &ns, &nl);
    if (rc)
        return rc;
    if (t->n_normalized == 0)
        return pre_level(t, 0, ns, nl, origin, out);
    return split_added(t, ns, nl, 1, flags, origin, gap_pretok, out);
}

static int encode_view(fg_tok *t, const unsigned char *s, size_t len, unsigned flags, fg_tok_ids *out);

/* FG_TOK_ADD_BOS asks for transformers' tokenizer(text): its view of the pipeline when the
 * config's tokenizer_class rebuilds it (tok_json.c), swapped in for this encode only. The word
 * cache stays valid: it maps model pieces to ids, and the model is the same in both views. */
int tok_json_encode(fg_tok *t, const unsigned char *s, size_t len, unsigned flags, fg_tok_ids *out)
{
    int hf = (flags & FG_TOK_ADD_BOS) && t->has_hf;
    if (hf)
        tok_hf_swap(t);
    int rc = encode_view(t, s, len, flags, out);
    if (hf)
        tok_hf_swap(t);
    return rc;
}

static int encode_view(fg_tok *t, const unsigned char *s, size_t len, unsigned flags, fg_tok_ids *out)
{
    int rc;
    if ((flags & FG_TOK_ADD_BOS) && t->n_post_pre && (rc = tok_ids_reserve(out, t->n_post_pre)))
        return rc;
    if (flags & FG_TOK_ADD_BOS)
        for (size_t i = 0; i < t->n_post_pre; i++)
            out->ids[out->n++] = t->post_pre[i];
    if ((rc = split_added(t, s, len, 0, flags, 1, gap_normalize, out)))
        return rc;
    for (size_t i = 0; (flags & FG_TOK_ADD_BOS) && i < t->n_post_suf; i++)
        if ((rc = tok_ids_push(out, t->post_suf[i])))
            return rc;
    return FG_OK;
}
