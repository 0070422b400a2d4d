/* jinja_lex.c - template text to tokens, as Jinja's lexer does it in transformers' environment.
 *
 * transformers compiles chat templates with trim_blocks=True and lstrip_blocks=True (and the
 * defaults keep_trailing_newline=False, newline_sequence="\n"), so:
 *  - line ends (\r\n, \r, \n) become \n, and one final line end of the source is dropped;
 *  - "{%-" / "{{-" / "{#-" strip all whitespace before the tag; "-%}" / "-}}" / "-#}" all after;
 *  - "%}" and "#}" (not "}}") swallow one following "\n" (trim_blocks), "+%}" does not;
 *  - a "{%" or "{#" (not "{{", not "{%+") preceded on its line by nothing but whitespace has
 *    that whitespace removed (lstrip_blocks); "on its line" includes the start of a data run
 *    that follows a tag whose text ended in "\n".
 * Inside a tag: names, integers, floats, strings (Python escapes), and operators. Comments are
 * dropped. {% raw %} is not supported (refused at parse as an unknown statement).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    int line_starting;
    int depth; /* open ( [ { inside the tag: a tag cannot end while one is open, as in Jinja */
    jtoks *out;
} lexer;

static jtok *push(lexer *L, jtok_type t, const char *p, size_t n)
{
    jtoks *o = L->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        jtok *v = ja_alloc(L->a, cap * sizeof *v);
        if (o->n)
            memcpy(v, o->v, o->n * sizeof *v);
        o->v = v, o->cap = cap;
    }
    jtok *t0 = &o->v[o->n++];
    memset(t0, 0, sizeof *t0);
    t0->t = t, t0->p = p, t0->n = n, t0->line = L->line;
    return t0;
}

static int count_nl(const char *p, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* Normalize line ends and drop one final line end (keep_trailing_newline=False). */
static char *normalize(jarena *a, const char *src, size_t len, size_t *out)
{
    char *d = ja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else
            d[n++] = src[i];
    }
    if (n && d[n - 1] == '\n')
        n--;
    *out = n;
    return d;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int tag_start(const char *s, size_t i)
{
    return s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#');
}

/* Data up to the next tag start; applies "-" and lstrip_blocks to it. Returns the tag kind
 * ('{', '%', '#') or 0 at the end of the source. */
static char lex_data(lexer *L)
{
    const char *s = L->s;
    size_t i = L->pos;
    while (i + 1 < L->n && !tag_start(s, i))
        i++;
    if (i + 1 >= L->n)
        i = L->n;
    size_t dn = i - L->pos;
    char kind = i < L->n ? s[i + 1] : 0;
    char sign = kind && i + 2 < L->n ? s[i + 2] : 0;
    const char *d = s + L->pos;
    size_t keep = dn;
    if (kind && sign == '-') {
        while (keep && is_ws(d[keep - 1]))
            keep--;
    } else if (kind && kind != '{' && sign != '+') {
        size_t l = keep;
        while (l && d[l - 1] != '\n')
            l--;
        int all_ws = l < keep;
        for (size_t k = l; k < keep; k++)
            all_ws &= is_ws(d[k]);
        if ((l > 0 || L->line_starting) && all_ws)
            keep = l;
    }
    if (keep)
        push(L, JT_DATA, d, keep);
    L->line += count_nl(d, dn);
    L->pos = i;
    if (dn)
        L->line_starting = d[dn - 1] == '\n';
    return kind;
}

static size_t utf8_encode(uint32_t cp, unsigned char *u)
{
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        return 1;
    }
    size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        u[i] = (unsigned char)(0x80 | (cp & 63));
    u[0] = (unsigned char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
    return n;
}

static void lex_string(lexer *L)
{
    const char *s = L->s;
    char q = s[L->pos];
    int line0 = L->line;
    jbuf b = {.a = L->a};
    size_t i = L->pos + 1;
    for (; i < L->n && s[i] != q; i++) {
        if (s[i] != '\\' || i + 1 >= L->n) {
            L->line += s[i] == '\n';
            jb_put(&b, &s[i], 1);
            continue;
        }
        char e = s[++i];
        const char *m = strchr("nrt\\'\"0abfv", e);
        if (m && e) {
            static const char out[] = "\n\r\t\\'\"\0\a\b\f\v";
            jb_put(&b, &out[m - "nrt\\'\"0abfv"], 1);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            char hex[9] = {0};
            if (i + nd >= L->n)
                ja_fail(L->a, L->line, "truncated \\%c escape in a string", e);
            memcpy(hex, s + i + 1, (size_t)nd);
            char *end;
            unsigned long cp = strtoul(hex, &end, 16);
            if (end != hex + nd || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                ja_fail(L->a, L->line, "bad \\%c escape in a string", e);
            unsigned char u[4];
            size_t un = utf8_encode((uint32_t)cp, u);
            jb_put(&b, (const char *)u, un);
            i += (size_t)nd;
        } else if (e == '\n') {
            L->line++; /* line continuation */
        } else {
            jb_put(&b, "\\", 1);
            jb_put(&b, &e, 1);
        }
    }
    if (i >= L->n)
        ja_fail(L->a, line0, "unterminated string");
    jtok *t = push(L, JT_STRING, b.p ? b.p : "", b.n);
    t->line = line0;
    L->pos = i + 1;
}

static void lex_number(lexer *L)
{
    const char *s = L->s;
    size_t i = L->pos;
    while (i < L->n && (isdigit((unsigned char)s[i]) || s[i] == '_'))
        i++;
    int fl = 0;
    if (i + 1 < L->n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
        fl = 1;
        for (i++; i < L->n && (isdigit((unsigned char)s[i]) || s[i] == '_'); i++)
            ;
    }
    if (i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < L->n && isdigit((unsigned char)s[j])) {
            fl = 1;
            for (i = j; i < L->n && isdigit((unsigned char)s[i]); i++)
                ;
        }
    }
    char tmp[64];
    size_t k = 0;
    for (size_t j = L->pos; j < i && k < sizeof tmp - 1; j++)
        if (s[j] != '_')
            tmp[k++] = s[j];
    tmp[k] = 0;
    jtok *t = push(L, fl ? JT_FLOAT : JT_INT, s + L->pos, i - L->pos);
    if (fl)
        t->f = strtod(tmp, NULL);
    else {
        char *end;
        unsigned long long v = strtoull(tmp, &end, 10);
        if (v > INT64_MAX || k >= sizeof tmp - 1)
            ja_fail(L->a, L->line, "integer literal too large");
        t->i = (int64_t)v;
    }
    L->pos = i;
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                  "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                  ":", "|", ";", NULL};

/* One token inside a tag; returns 1 when the tag's end was consumed. */
static int lex_tag_token(lexer *L, char kind)
{
    const char *s = L->s;
    while (L->pos < L->n && is_ws(s[L->pos]))
        L->line += s[L->pos++] == '\n';
    if (L->pos >= L->n)
        ja_fail(L->a, L->line, "unexpected end of template inside a tag");
    const char *p = s + L->pos;
    size_t left = L->n - L->pos;
    char close = kind == '{' ? '}' : '%';
    int minus = p[0] == '-' && left >= 3 && p[1] == close && p[2] == '}';
    int plus = kind == '%' && p[0] == '+' && left >= 3 && p[1] == '%' && p[2] == '}';
    if (!L->depth && (minus || plus || (left >= 2 && p[0] == close && p[1] == '}'))) {
        push(L, kind == '{' ? JT_VAR_END : JT_BLOCK_END, p, 0);
        L->pos += minus || plus ? 3 : 2;
        if (minus)
            while (L->pos < L->n && is_ws(s[L->pos]))
                L->line += s[L->pos++] == '\n';
        else if (!plus && kind == '%' && L->pos < L->n && s[L->pos] == '\n') {
            L->pos++;
            L->line++;
        }
        L->line_starting = s[L->pos - 1] == '\n';
        return 1;
    }
    if (isalpha((unsigned char)p[0]) || p[0] == '_') {
        size_t k = 1;
        while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_'))
            k++;
        push(L, JT_NAME, p, k);
        L->pos += k;
    } else if (isdigit((unsigned char)p[0]))
        lex_number(L);
    else if (p[0] == '\'' || p[0] == '"')
        lex_string(L);
    else {
        for (int i = 0; ops[i]; i++) {
            size_t k = strlen(ops[i]);
            if (k <= left && !memcmp(p, ops[i], k)) {
                push(L, JT_OP, ops[i], k);
                L->pos += k;
                if (strchr("([{", ops[i][0]) && k == 1)
                    L->depth++;
                else if (strchr(")]}", ops[i][0]) && k == 1 && --L->depth < 0)
                    ja_fail(L->a, L->line, "unexpected '%c'", ops[i][0]);
                return 0;
            }
        }
        ja_fail(L->a, L->line, "unexpected character '%c'", p[0]);
    }
    return 0;
}

static void lex_comment(lexer *L)
{
    const char *s = L->s;
    int line0 = L->line;
    size_t i = L->pos;
    while (i + 1 < L->n && !(s[i] == '#' && s[i + 1] == '}'))
        i++;
    if (i + 1 >= L->n)
        ja_fail(L->a, line0, "missing end of comment tag");
    int minus = i > L->pos && s[i - 1] == '-', plus = i > L->pos && s[i - 1] == '+';
    L->line += count_nl(s + L->pos, i - L->pos);
    L->pos = i + 2;
    if (minus)
        while (L->pos < L->n && is_ws(s[L->pos]))
            L->line += s[L->pos++] == '\n';
    else if (!plus && L->pos < L->n && s[L->pos] == '\n') {
        L->pos++;
        L->line++;
    }
    L->line_starting = s[L->pos - 1] == '\n';
}

void jinja_lex(jarena *a, const char *src, size_t len, jtoks *out)
{
    lexer L = {.a = a, .line = 1, .line_starting = 1, .out = out};
    L.s = normalize(a, src, len, &L.n);
    char kind;
    while ((kind = lex_data(&L))) {
        L.pos += 2;
        if (L.pos < L.n && (L.s[L.pos] == '-' || (kind != '{' && L.s[L.pos] == '+')))
            L.pos++;
        a->line = L.line;
        if (kind == '#') {
            lex_comment(&L);
            continue;
        }
        push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, NULL, 0);
        L.depth = 0;
        while (!lex_tag_token(&L, kind))
            ;
    }
    push(&L, JT_EOF, NULL, 0);
}
