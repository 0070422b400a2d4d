/* tok_decode.c - decoding for the tokenizer.json classes: the decoder chain of `tokenizers`
 * (Tokenizer::decode -> Decoder::decode_chain per step, then the pieces joined).
 *
 * The ids become their token strings (added token content or vocab key; special ones left out
 * with FG_TOK_SKIP_SPECIAL), a list of pieces that each step rewrites:
 *   ByteLevel     all pieces -> one: each piece's byte-level symbols as bytes (a piece with
 *                 any other character stays as it is)
 *   Replace       per piece, every match of the pattern -> content
 *   ByteFallback  runs of <0xNN> pieces -> their bytes as one piece
 *   Fuse          all pieces -> one
 *   Strip         per piece, up to `start` leading and `stop` trailing `content` characters off
 *   Metaspace     per piece, the replacement -> ' ', except in the first piece, where it is
 *                 removed (unless prepend_scheme is never) - every one of them, as tokenizers does
 * No decoder at all joins the token strings with single spaces.
 * Where `tokenizers` turns ill-formed UTF-8 into U+FFFD (ByteLevel: String::from_utf8_lossy;
 * ByteFallback: one U+FFFD per byte of an invalid run), fg keeps the raw bytes, so streamed
 * output can be reassembled; FG_TOK_REPLACE_INVALID asks for exactly the replacement text.
 * An id that names no token (one past the vocabulary: models such as Qwen2.5 or Phi-3 have more
 * embedding rows than tokens) is left out before the chain runs, as tokenizers' id_to_token
 * filter does; fg_tok_decode has already refused negative ids.
 */
#include "tok_int.h"

#include <stdlib.h>
#include <string.h>

typedef tok_level plist;  /* pieces [a, b) of buf */

static int piece(plist *l, const void *p, size_t n)
{
    uint32_t off;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        tok_range *r = realloc(l->r, cap * sizeof *r);
        if (!r)
            return FG_ERR_NOMEM;
        l->r = r;
        l->cap = cap;
    }
    if (tok_arena_put(&l->buf, p, n, &off))
        return FG_ERR_NOMEM;
    l->r[l->n++] = (tok_range){off, off + n, 0};
    return FG_OK;
}

/* Append to the last piece (creating it when there is none). */
static int extend(plist *l, const void *p, size_t n)
{
    uint32_t off;
    if (l->n == 0)
        return piece(l, p, n);
    if (tok_arena_put(&l->buf, p, n, &off))
        return FG_ERR_NOMEM;
    l->r[l->n - 1].b = off + n;  /* pieces are written in order, so the last one ends here */
    return FG_OK;
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Length of the maximal ill-formed subpart at s[0] (Unicode's "maximal subpart" rule, which
 * Rust's from_utf8_lossy follows): one U+FFFD replaces it. */
static size_t bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    size_t i = 1;
    if (need && i < n && s[i] >= lo && s[i] <= hi)
        for (i = 2; i <= need && i < n && (s[i] & 0xC0) == 0x80; i++)
            ;
    return i;
}

static int lossy(plist *o, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = tok_utf8_next(s + i, n - i, &cp);
        int rc;
        if (cp != UINT32_MAX) {
            size_t j = i + k;  /* copy the valid run at once */
            while (j < n && (k = tok_utf8_next(s + j, n - j, &cp)) && cp != UINT32_MAX)
                j += k;
            rc = extend(o, s + i, j - i);
            i = j;
        } else {
            rc = extend(o, FFFD, 3);
            i += bad_len(s + i, n - i);
        }
        if (rc)
            return rc;
    }
    return FG_OK;
}

static int d_bytelevel(const plist *in, plist *o, int replace)
{
    char *tmp = NULL;
    size_t cap = 0;
    int rc = piece(o, "", 0);
    tok_arena raw = {0};
    for (size_t i = 0; i < in->n && !rc; i++) {
        size_t n = in->r[i].b - in->r[i].a;
        if (n > cap && !(tmp = realloc(tmp, cap = n))) {
            rc = FG_ERR_NOMEM;
            break;
        }
        size_t k = tok_bytelevel_bytes(in->buf.p + in->r[i].a, n, tmp);
        uint32_t off;
        rc = replace ? tok_arena_put(&raw, tmp, k, &off) : extend(o, tmp, k);
    }
    if (!rc && replace)
        rc = lossy(o, (const unsigned char *)raw.p, raw.len);
    tok_arena_free(&raw);
    free(tmp);
    return rc;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int flush_bytes(plist *o, tok_arena *run, int replace)
{
    if (run->len == 0)
        return FG_OK;
    size_t i = 0;
    uint32_t cp;
    while (i < run->len) {
        size_t k = tok_utf8_next((const unsigned char *)run->p + i, run->len - i, &cp);
        if (cp == UINT32_MAX)
            break;
        i += k;
    }
    int rc = FG_OK;
    if (i == run->len || !replace)
        rc = piece(o, run->p, run->len);
    else
        for (size_t j = 0; j < run->len && !rc; j++)
            rc = piece(o, FFFD, 3);
    run->len = 0;
    return rc;
}

static int d_bytefallback(const plist *in, plist *o, int replace)
{
    tok_arena run = {0};
    int rc = FG_OK;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const char *s = in->buf.p + in->r[i].a;
        size_t n = in->r[i].b - in->r[i].a;
        int hi = n == 6 ? hexval(s[3]) : -1, lo = n == 6 ? hexval(s[4]) : -1;
        uint32_t off;
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hi >= 0 && lo >= 0) {
            unsigned char b = (unsigned char)(hi << 4 | lo);
            rc = tok_arena_put(&run, &b, 1, &off);
        } else if (!(rc = flush_bytes(o, &run, replace))) {
            rc = piece(o, s, n);
        }
    }
    if (!rc)
        rc = flush_bytes(o, &run, replace);
    tok_arena_free(&run);
    return rc;
}

static int d_replace(const tok_step *st, const plist *in, plist *o)
{
    tok_level m = {0};
    /* decode must not write the tokenizer (concurrent decodes): match data of its own */
    pcre2_match_data *md = st->lit ? NULL : pcre2_match_data_create_from_pattern(st->re, NULL);
    int rc = st->lit || md ? FG_OK : FG_ERR_NOMEM;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const unsigned char *s = (const unsigned char *)in->buf.p + in->r[i].a;
        size_t n = in->r[i].b - in->r[i].a;
        rc = tok_step_ranges(st, md, s, n, &m);
        if (!rc)
            rc = piece(o, "", 0);
        for (size_t j = 0; j < m.n && !rc; j++)
            rc = m.r[j].match ? extend(o, st->a, st->a_len) : extend(o, s + m.r[j].a, m.r[j].b - m.r[j].a);
    }
    pcre2_match_data_free(md);
    free(m.r);
    return rc;
}

static int d_strip(const tok_step *st, const plist *in, plist *o)
{
    int rc = FG_OK;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const char *s = in->buf.p + in->r[i].a;
        size_t n = in->r[i].b - in->r[i].a, a = 0, k = st->a_len;
        for (unsigned j = 0; j < st->start && n - a >= k && memcmp(s + a, st->a, k) == 0; j++)
            a += k;
        for (unsigned j = 0; j < st->stop && n - a >= k && memcmp(s + n - k, st->a, k) == 0; j++)
            n -= k;
        rc = piece(o, s + a, n - a);
    }
    return rc;
}

static int d_metaspace(const tok_step *st, const plist *in, plist *o, int alone)
{
    int rc = FG_OK;
    for (size_t i = 0; i < in->n && !rc; i++) {
        const char *s = in->buf.p + in->r[i].a;
        size_t n = in->r[i].b - in->r[i].a, k = st->a_len, prev = 0;
        int drop = i == 0 && st->scheme != PREPEND_NEVER && !alone;
        rc = piece(o, "", 0);
        for (size_t j = 0; j + k <= n && !rc;) {
            if (memcmp(s + j, st->a, k) != 0) {
                j++;
                continue;
            }
            rc = extend(o, s + prev, j - prev);
            if (!rc && !drop)
                rc = extend(o, " ", 1);
            j = prev = j + k;
        }
        if (!rc)
            rc = extend(o, s + prev, n - prev);
    }
    return rc;
}

static int d_join(const plist *in, plist *o, const char *sep)
{
    int rc = piece(o, "", 0);
    for (size_t i = 0; i < in->n && !rc; i++) {
        if (i && sep)
            rc = extend(o, sep, strlen(sep));
        if (!rc)
            rc = extend(o, in->buf.p + in->r[i].a, in->r[i].b - in->r[i].a);
    }
    return rc;
}

/* Run the chain over l[0]; the result ends in *res (one of l[0], l[1]). alone: one token decoded
 * for fg_tok_token_bytes (no Strip, no first-piece rule of Metaspace, raw bytes). */
static int run_chain(const fg_tok *t, plist l[2], unsigned flags, int alone, plist **res)
{
    int cur = 0, rc = FG_OK, replace = (flags & FG_TOK_REPLACE_INVALID) && !alone;
    for (int i = 0; i < t->n_dec && !rc; i++) {
        const tok_step *st = &t->dec[i];
        plist *in = &l[cur], *o = &l[!cur];
        o->n = 0;
        o->buf.len = 0;
        switch (st->kind) {
        case ST_D_BYTELEVEL: rc = d_bytelevel(in, o, replace); break;
        case ST_D_BYTEFALLBACK: rc = d_bytefallback(in, o, replace); break;
        case ST_D_FUSE: rc = d_join(in, o, NULL); break;
        case ST_D_REPLACE: rc = d_replace(st, in, o); break;
        case ST_D_STRIP: rc = alone ? d_join(in, o, NULL) : d_strip(st, in, o); break;
        default: rc = d_metaspace(st, in, o, alone); break;
        }
        cur = !cur;
    }
    if (!rc && !t->has_decoder) {
        plist *o = &l[!cur];
        o->n = 0;
        o->buf.len = 0;
        rc = d_join(&l[cur], o, " ");
        cur = !cur;
    }
    *res = &l[cur];
    return rc;
}

static void plist_free(plist l[2])
{
    for (int i = 0; i < 2; i++) {
        tok_arena_free(&l[i].buf);
        free(l[i].r);
    }
}

int tok_json_token_alone(const fg_tok *t, int32_t id, tok_arena *out)
{
    plist l[2] = {{{0}}, {{0}}}, *res;
    int rc = piece(&l[0], t->id_str.p + t->id_soff[id], t->id_slen[id]);
    if (!rc)
        rc = run_chain(t, l, 0, 1, &res);
    out->len = 0;
    for (size_t i = 0; !rc && i < res->n; i++) {
        uint32_t off;
        rc = tok_arena_put(out, res->buf.p + res->r[i].a, res->r[i].b - res->r[i].a, &off);
    }
    plist_free(l);
    return rc;
}

int tok_json_decode(const fg_tok *t, const int32_t *ids, size_t n, unsigned flags,
                    fg_tok_bytes *out, fg_err *err)
{
    plist l[2] = {{{0}}, {{0}}}, *res = NULL;
    int rc = FG_OK;
    for (size_t i = 0; i < n && !rc; i++)  /* ids without a token: left out, as tokenizers does */
        if (tok_has_token(t, ids[i]) && !((flags & FG_TOK_SKIP_SPECIAL) && t->id_special[ids[i]]))
            rc = piece(&l[0], t->id_str.p + t->id_soff[ids[i]], t->id_slen[ids[i]]);
    if (!rc)
        rc = run_chain(t, l, flags, 0, &res);
    size_t total = 0;
    for (size_t i = 0; !rc && i < res->n; i++)
        total += res->r[i].b - res->r[i].a;
    if (!rc && out->len + total > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + total)
            cap *= 2;
        char *p = realloc(out->data, cap);
        if (!p)
            rc = FG_ERR_NOMEM;
        else {
            out->data = p;
            out->cap = cap;
        }
    }
    for (size_t i = 0; !rc && i < res->n; i++) {
        size_t k = res->r[i].b - res->r[i].a;
        if (k)
            memcpy(out->data + out->len, res->buf.p + res->r[i].a, k);
        out->len += k;
    }
    plist_free(l);
    return rc ? fg_err_set(err, rc, "fg_tok_decode: %s", fg_strerror(rc)) : FG_OK;
}
