/* tok_regex.c - tokenizer.json patterns on PCRE2, and the UTF-8 helpers the pipelines share.
 *
 * `tokenizers` compiles Split and Replace patterns with Oniguruma (Ruby syntax). PCRE2 in UTF +
 * UCP mode reads the same syntax for everything the Llama 3 / Qwen2 / GPT-2 patterns use
 * (\p{L}, \p{N}, (?i:...), lookahead, {1,3}), with two translations made here:
 *   \s, \S  Oniguruma's \s is exactly Unicode White_Space; PCRE2's adds U+180E. Outside a
 *           class \s becomes [WS] and \S [^WS]; inside a class \s adds the WS ranges, and a
 *           class holding \S becomes (?:[rest]|[^WS]) or, negated, (?![rest])[WS].
 *   \h, \H  hex digit in Oniguruma, horizontal space in PCRE2: spelled [0-9a-fA-F] (\H only
 *           outside classes).
 *   \uHHHH  Oniguruma's code point escape (PCRE2 refuses \u): \x{HHHH}, in and out of classes.
 *   [A&&B]  class intersection (Oniguruma and Rust regex; Kimi's tiktoken pattern uses
 *           [\p{Lu}...&&[^\p{Han}]]): (?:(?=B)[A]), B a nested class or class items.
 * String patterns compile with PCRE2_LITERAL (regex::escape in tokenizers).
 * Invalid UTF-8 subjects: PCRE2_MATCH_INVALID_UTF makes ill-formed bytes match nothing, so
 * they end up in the gaps between matches, never inside one.
 * Iteration follows the onig crate's find_iter: after a match the search resumes at its end;
 * an empty match at the end of the previous match is skipped by advancing one character.
 */
#define _GNU_SOURCE  /* memmem */
#include "tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
           "\\x{205F}\\x{3000}"
#define HEX "0-9a-fA-F"

int tok_is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (k == 0 || k > n || s[1] < lo || s[1] > hi) {
        *cp = UINT32_MAX;
        return 1;
    }
    uint32_t v = c & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = UINT32_MAX;
            return 1;
        }
        v = v << 6 | (s[i] & 0x3Fu);
    }
    *cp = v;
    return k;
}

/* ---- Oniguruma -> PCRE2 */

typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
#define PUTS(b, s) put(b, s, strlen(s))

/* \uHHHH (Oniguruma's Ruby syntax; PCRE2 refuses \u): four hex digits at pat[i]? */
static int hex4(const char *pat, size_t len, size_t i)
{
    if (i + 4 > len)
        return 0;
    for (size_t k = i; k < i + 4; k++)
        if (!((pat[k] >= '0' && pat[k] <= '9') || ((pat[k] | 32) >= 'a' && (pat[k] | 32) <= 'f')))
            return 0;
    return 1;
}

static void put_u(sbuf *b, const char *h)
{
    PUTS(b, "\\x{");
    put(b, h, 4);
    PUTS(b, "}");
}

static size_t translate_class(const char *pat, size_t len, size_t i, sbuf *out, int *unsupported);

/* The right side of an intersection [A&&B] at pat[i] (after the &&): a nested class, or class
 * items up to the outer ']', translated as one class into *rhs; returns the index of the outer
 * ']' (or len). */
static size_t class_rhs(const char *pat, size_t len, size_t i, sbuf *rhs, int *unsupported)
{
    if (i < len && pat[i] == '[') {
        i = translate_class(pat, len, i, rhs, unsupported);
        return i;
    }
    size_t j = i;
    while (j < len && pat[j] != ']' && !(pat[j] == '[' || (pat[j] == '&' && j + 1 < len && pat[j + 1] == '&')))
        j += pat[j] == '\\' && j + 1 < len ? 2 : 1;
    if (j >= len || pat[j] != ']') {
        *unsupported = 1;
        return len;
    }
    sbuf tmp = {0};
    PUTS(&tmp, "[");
    put(&tmp, pat + i, j - i);
    PUTS(&tmp, "]");
    if (!tmp.oom)
        translate_class(tmp.p, tmp.n, 0, rhs, unsupported);
    rhs->oom |= tmp.oom;
    free(tmp.p);
    return j;
}

/* Translate the class starting at pat[i] == '['; returns the index after its ']' (or len).
 * An intersection [A&&B] (Oniguruma, and Rust regex's syntax that tiktoken patterns use) becomes
 * (?:(?=B)[A]): one character of A that B also matches. One && a class, not in a negated class. */
static size_t translate_class(const char *pat, size_t len, size_t i, sbuf *out, int *unsupported)
{
    sbuf body = {0}, rhs = {0};
    int neg = 0, has_S = 0, inter = 0;
    i++;
    if (i < len && pat[i] == '^') {
        neg = 1;
        i++;
    }
    if (i < len && pat[i] == ']')
        put(&body, pat + i++, 1);
    while (i < len && pat[i] != ']') {
        if (pat[i] == '[' && i + 1 < len && pat[i + 1] == ':') {  /* POSIX [:alpha:] */
            const char *e = strstr(pat + i, ":]");
            size_t n = e ? (size_t)(e - (pat + i)) + 2 : len - i;
            put(&body, pat + i, n);
            i += n;
        } else if (pat[i] == '&' && i + 1 < len && pat[i + 1] == '&' && !neg && !inter && body.n) {
            inter = 1;
            i = class_rhs(pat, len, i + 2, &rhs, unsupported);
            if (i < len && pat[i] != ']')
                *unsupported = 1;  /* [A&&[B]C]: more after the nested class */
        } else if (pat[i] == '[' || (pat[i] == '&' && i + 1 < len && pat[i + 1] == '&')) {
            *unsupported = 1;  /* other nested classes and intersections */
            i++;
        } else if (pat[i] == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            if (e == 's')
                PUTS(&body, WS);
            else if (e == 'S')
                has_S = 1;
            else if (e == 'h')
                PUTS(&body, HEX);
            else if (e == 'H')
                *unsupported = 1;
            else if (e == 'u' && hex4(pat, len, i + 2)) {
                put_u(&body, pat + i + 2);
                i += 4;
            } else
                put(&body, pat + i, 2);
            i += 2;
        } else {
            put(&body, pat + i++, 1);
        }
    }
    const char *bd = body.p ? body.p : "";
    if (inter) {
        PUTS(out, "(?:(?=");
        put(out, rhs.p ? rhs.p : "", rhs.n);
        PUTS(out, ")");
    }
    if (!has_S) {
        PUTS(out, neg ? "[^" : "[");
        PUTS(out, bd);
        PUTS(out, "]");
    } else if (body.n == 0) {
        PUTS(out, neg ? "[" WS "]" : "[^" WS "]");
    } else {
        PUTS(out, neg ? "(?![" : "(?:[");
        PUTS(out, bd);
        PUTS(out, neg ? "])[" WS "]" : "]|[^" WS "])");
    }
    if (inter)
        PUTS(out, ")");
    out->oom |= body.oom | rhs.oom;
    free(body.p);
    free(rhs.p);
    return i < len ? i + 1 : len;
}

static char *translate(const char *pat, size_t len, int *unsupported)
{
    sbuf out = {0};
    PUTS(&out, "");
    for (size_t i = 0; i < len;) {
        if (pat[i] == '[') {
            i = translate_class(pat, len, i, &out, unsupported);
        } else if (pat[i] == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            const char *r = e == 's' ? "[" WS "]" : e == 'S' ? "[^" WS "]" : e == 'h' ? "[" HEX "]"
                          : e == 'H' ? "[^" HEX "]" : NULL;
            if (r) {
                PUTS(&out, r);
            } else if (e == 'u' && hex4(pat, len, i + 2)) {
                put_u(&out, pat + i + 2);
                i += 4;
            } else {
                put(&out, pat + i, 2);
            }
            i += 2;
        } else {
            put(&out, pat + i++, 1);
        }
    }
    if (out.oom) {
        free(out.p);
        return NULL;
    }
    return out.p;
}

int tok_regex_compile(const char *pat, size_t len, int literal, pcre2_code **re,
                      pcre2_match_data **md, const char *where, fg_err *err)
{
    int unsupported = 0, code;
    PCRE2_SIZE at;
    char *tr = literal ? NULL : translate(pat, len, &unsupported);
    if (!literal && !tr)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", where);
    if (unsupported) {
        free(tr);
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: nested character classes (other than [A&&B]), a negated or second && and \\H in a class are not supported",
                          where);
    }
    uint32_t opt = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    *re = pcre2_compile((PCRE2_SPTR)(literal ? pat : tr), literal ? len : PCRE2_ZERO_TERMINATED,
                        opt, &code, &at, NULL);
    free(tr);
    if (!*re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return fg_err_set(err, FG_ERR_TOK_CONFIG, "%s: the pattern does not compile (PCRE2, at %zu): %s",
                          where, (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);
    *md = pcre2_match_data_create_from_pattern(*re, NULL);
    if (!*md)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", where);
    return FG_OK;
}

int tok_range_push(tok_level *lv, size_t a, size_t b, int match)
{
    if (lv->n == lv->cap) {
        size_t cap = lv->cap ? 2 * lv->cap : 64;
        tok_range *r = realloc(lv->r, cap * sizeof *r);
        if (!r)
            return FG_ERR_NOMEM;
        lv->r = r;
        lv->cap = cap;
    }
    lv->r[lv->n++] = (tok_range){a, b, match};
    return FG_OK;
}

int tok_regex_ranges(pcre2_code *re, pcre2_match_data *md, const unsigned char *s, size_t len,
                     tok_level *lv)
{
    size_t prev = 0, pos = 0, last_end = SIZE_MAX;
    lv->n = 0;
    while (pos <= len) {
        int rc = pcre2_match(re, s, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY ? FG_ERR_NOMEM : FG_ERR_LIMIT;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a == b && last_end == b) {  /* no empty match right after the last match */
            uint32_t cp;
            if (pos >= len)
                break;
            pos += tok_utf8_next(s + pos, len - pos, &cp);
            continue;
        }
        if (prev != a && tok_range_push(lv, prev, a, 0))
            return FG_ERR_NOMEM;
        if (tok_range_push(lv, a, b, 1))
            return FG_ERR_NOMEM;
        prev = pos = last_end = b;
    }
    if (prev != len && tok_range_push(lv, prev, len, 0))
        return FG_ERR_NOMEM;
    return FG_OK;
}

/* A literal pattern: non-overlapping occurrences, left to right (what the escaped regex finds). */
static int literal_ranges(const char *pat, size_t plen, const unsigned char *s, size_t len,
                          tok_level *lv)
{
    size_t prev = 0;
    lv->n = 0;
    for (const unsigned char *p = s; len - (size_t)(p - s) >= plen;) {
        const unsigned char *hit = memmem(p, len - (size_t)(p - s), pat, plen);
        if (!hit)
            break;
        size_t a = (size_t)(hit - s);
        if ((prev != a && tok_range_push(lv, prev, a, 0)) || tok_range_push(lv, a, a + plen, 1))
            return FG_ERR_NOMEM;
        prev = a + plen;
        p = hit + plen;
    }
    if (prev != len && tok_range_push(lv, prev, len, 0))
        return FG_ERR_NOMEM;
    return FG_OK;
}

int tok_step_ranges(const tok_step *st, pcre2_match_data *md, const unsigned char *s, size_t len,
                    tok_level *lv)
{
    if (st->lit)
        return literal_ranges(st->lit, st->lit_len, s, len, lv);
    return tok_regex_ranges(st->re, md, s, len, lv);
}
