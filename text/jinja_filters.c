/* jinja_filters.c - the filters and the str / dict / list methods chat templates call.
 *
 * Filters are Jinja's (trim, length, join, default, map, selectattr, ...) plus transformers'
 * own tojson (json.dumps with ensure_ascii=False; indent, separators and sort_keys honoured).
 * Methods are Python's, for the value types a template sees: str (strip, split, startswith,
 * replace, ...), dict (items, keys, values, get) and list (index, count); transformers renders
 * in an ImmutableSandboxedEnvironment, so mutating methods (append, update, pop) are refused
 * there as here. Case mapping uses utf8proc's simple (one code point to one) mappings.
 * Every name below is also in the parse-time tables, so a template naming anything else fails
 * at parse, naming it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja_int.h"

static const char *const filters[] = {
    "trim", "tojson", "length", "count", "items", "join", "upper", "lower", "replace",
    "default", "d", "first", "last", "list", "map", "selectattr", "rejectattr", "select",
    "reject", "string", "int", "float", "safe", "capitalize", "title", "abs", "unique",
    "reverse", "sum", "min", "max", "wordcount", "indent", "escape", "e", "dictsort", "sort",
    "round", "batch", NULL};

static const char *const methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "replace", "find", "rfind", "count", "join", "splitlines", "isdigit",
    "isalpha", "isspace", "isalnum", "removeprefix", "removesuffix", "items", "keys", "values",
    "get", "index", "cycle",
    /* mutators: parsed, refused when run, as transformers' ImmutableSandboxedEnvironment does */
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
    "sort", "reverse", NULL};

static int is_mutator(const char *name)
{
    static const char *const m[] = {"append", "extend", "insert", "pop", "remove", "clear",
                                    "update", "setdefault", "popitem", "sort", "reverse", NULL};
    for (int i = 0; m[i]; i++)
        if (!strcmp(m[i], name))
            return 1;
    return 0;
}

static int in_table(const char *const *t, const char *name)
{
    for (int i = 0; t[i]; i++)
        if (!strcmp(t[i], name))
            return 1;
    return 0;
}

int jinja_has_filter(const char *name) { return in_table(filters, name); }
int jinja_has_method(const char *name) { return in_table(methods, name); }

typedef struct call {
    jctx *c;
    const char *name;
    jv **pos; size_t npos;
    const char **kwn; jv **kwv; size_t nkw;
    int line;
} call;

/* argument i, or keyword kw, or NULL */
static jv *arg(const call *k, size_t i, const char *kw)
{
    if (i < k->npos)
        return k->pos[i];
    for (size_t j = 0; kw && j < k->nkw; j++)
        if (!strcmp(k->kwn[j], kw))
            return k->kwv[j];
    return NULL;
}

static jv *str_arg(const call *k, size_t i, const char *kw)
{
    jv *v = arg(k, i, kw);
    if (v && v->t != JV_STR && v->t != JV_NONE)
        ja_fail(k->c->a, k->line, "%s: argument %zu must be a string, not %s", k->name, i + 1,
                jv_type_name(v));
    return v && v->t == JV_STR ? v : NULL;
}

/* ---- strings ---- */
static int py_space(unsigned char ch)
{
    return ch == ' ' || (ch >= 9 && ch <= 13) || (ch >= 28 && ch <= 31);
}

/* the n-byte code point at p is Python whitespace (ASCII ones, U+0085, U+00A0) */
static int py_space_cp(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    return (n == 1 && py_space(u[0])) || (n == 2 && u[0] == 0xC2 && (u[1] == 0x85 || u[1] == 0xA0));
}

static int in_chars(const jv *chars, const char *p, size_t n)
{
    for (size_t i = 0; i + n <= chars->u.s.n; i++)
        if (!memcmp(chars->u.s.p + i, p, n))
            return 1;
    return 0;
}

static size_t cp_len_at(const char *p, size_t left)
{
    size_t n = 1;
    while (n < left && ((unsigned char)p[n] & 0xC0) == 0x80)
        n++;
    return n;
}

static size_t cp_start_before(const char *p, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)p[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* strip(chars): left when mode & 1, right when mode & 2; chars NULL = whitespace */
static jv *strip(jctx *c, const jv *s, const jv *chars, int mode)
{
    const char *p = s->u.s.p;
    size_t a = 0, b = s->u.s.n;
    while ((mode & 1) && a < b) {
        size_t n = cp_len_at(p + a, b - a);
        int hit = chars ? in_chars(chars, p + a, n) : py_space_cp(p + a, n);
        if (!hit)
            break;
        a += n;
    }
    while ((mode & 2) && b > a) {
        size_t st = cp_start_before(p, b);
        size_t n = b - st;
        int hit = chars ? in_chars(chars, p + st, n) : py_space_cp(p + st, n);
        if (!hit)
            break;
        b = st;
    }
    return jv_str_own(c->a, p + a, b - a);
}

/* mode: 0 lower, 1 upper, 2 title, 3 capitalize */
static jv *recase(jctx *c, const jv *s, int mode)
{
    jbuf b = {.a = c->a};
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s->u.s.p;
    utf8proc_ssize_t left = (utf8proc_ssize_t)s->u.s.n;
    int prev_cased = 0, first = 1;
    while (left > 0) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, left, &cp);
        if (k <= 0) { /* invalid UTF-8: copy the byte */
            jb_put(&b, (const char *)p, 1);
            p++, left--;
            continue;
        }
        int up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && first);
        utf8proc_int32_t m = up ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        if (mode == 2 || mode == 3) {
            utf8proc_category_t cat = utf8proc_category(cp);
            prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                         cat == UTF8PROC_CATEGORY_LT;
        }
        utf8proc_uint8_t enc[4];
        jb_put(&b, (const char *)enc, (size_t)utf8proc_encode_char(m, enc));
        p += k, left -= k, first = 0;
    }
    return jv_str_own(c->a, b.p ? b.p : "", b.n);
}

static const char *find_sub(const jv *s, size_t from, const jv *sub)
{
    if (sub->u.s.n == 0)
        return s->u.s.p + from;
    for (size_t i = from; i + sub->u.s.n <= s->u.s.n; i++)
        if (!memcmp(s->u.s.p + i, sub->u.s.p, sub->u.s.n))
            return s->u.s.p + i;
    return NULL;
}

static jv *replace(const call *k, jv *s)
{
    jv *old = str_arg(k, 0, "old"), *new = str_arg(k, 1, "new");
    jv *cnt = arg(k, 2, "count");
    if (!old || !new)
        ja_fail(k->c->a, k->line, "replace() needs two strings");
    int64_t max = cnt && cnt->t == JV_INT ? cnt->u.i : -1;
    jbuf b = {.a = k->c->a};
    size_t i = 0;
    if (old->u.s.n == 0) { /* Python inserts new between every code point */
        for (; i < s->u.s.n && max != 0; max--) {
            jb_put(&b, new->u.s.p, new->u.s.n);
            size_t n = cp_len_at(s->u.s.p + i, s->u.s.n - i);
            jb_put(&b, s->u.s.p + i, n);
            i += n;
        }
        if (i >= s->u.s.n && max != 0)
            jb_put(&b, new->u.s.p, new->u.s.n);
    }
    const char *hit;
    while (old->u.s.n && max != 0 && (hit = find_sub(s, i, old))) {
        jb_put(&b, s->u.s.p + i, (size_t)(hit - s->u.s.p) - i);
        jb_put(&b, new->u.s.p, new->u.s.n);
        i = (size_t)(hit - s->u.s.p) + old->u.s.n;
        max--;
    }
    jb_put(&b, s->u.s.p + i, s->u.s.n - i);
    return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
}

static jv *split_ws(jctx *c, const jv *s, int64_t max)
{
    jv *l = jv_list(c->a, 4);
    size_t i = 0, n = s->u.s.n;
    const char *p = s->u.s.p;
    for (;;) {
        while (i < n && py_space((unsigned char)p[i]))
            i++;
        if (i >= n)
            break;
        if (max >= 0 && (int64_t)l->u.l.n == max) {
            size_t e = n;
            while (e > i && py_space((unsigned char)p[e - 1]))
                e--;
            jv_list_push(c->a, l, jv_str_own(c->a, p + i, e - i));
            break;
        }
        size_t j = i;
        while (j < n && !py_space((unsigned char)p[j]))
            j++;
        jv_list_push(c->a, l, jv_str_own(c->a, p + i, j - i));
        i = j;
    }
    return l;
}

static jv *split(const call *k, jv *s, int right)
{
    jv *sep = str_arg(k, 0, "sep");
    jv *mx = arg(k, 1, "maxsplit");
    int64_t max = mx && mx->t == JV_INT ? mx->u.i : -1;
    if (!sep) {
        if (right && max >= 0)
            ja_fail(k->c->a, k->line, "rsplit() with maxsplit and no separator is not supported");
        return split_ws(k->c, s, max);
    }
    if (!sep->u.s.n)
        ja_fail(k->c->a, k->line, "empty separator");
    jv *l = jv_list(k->c->a, 4);
    if (right && max >= 0) { /* from the right */
        size_t e = s->u.s.n;
        jv *rev = jv_list(k->c->a, 4);
        while (max-- > 0) {
            size_t i = e;
            const char *hit = NULL;
            while (i >= sep->u.s.n) {
                i--;
                if (i + sep->u.s.n <= e && !memcmp(s->u.s.p + i, sep->u.s.p, sep->u.s.n)) {
                    hit = s->u.s.p + i;
                    break;
                }
            }
            if (!hit)
                break;
            jv_list_push(k->c->a, rev, jv_str_own(k->c->a, hit + sep->u.s.n, e - i - sep->u.s.n));
            e = i;
        }
        jv_list_push(k->c->a, l, jv_str_own(k->c->a, s->u.s.p, e));
        for (size_t i = rev->u.l.n; i-- > 0;)
            jv_list_push(k->c->a, l, rev->u.l.items[i]);
        return l;
    }
    size_t i = 0;
    const char *hit;
    while (max != 0 && (hit = find_sub(s, i, sep))) {
        jv_list_push(k->c->a, l, jv_str_own(k->c->a, s->u.s.p + i, (size_t)(hit - s->u.s.p) - i));
        i = (size_t)(hit - s->u.s.p) + sep->u.s.n;
        max--;
    }
    jv_list_push(k->c->a, l, jv_str_own(k->c->a, s->u.s.p + i, s->u.s.n - i));
    return l;
}

static int affix(const jv *s, const jv *x, int end)
{
    if (x->t != JV_STR || x->u.s.n > s->u.s.n)
        return 0;
    return !memcmp(s->u.s.p + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.p, x->u.s.n);
}

static jv *starts_ends(const call *k, jv *s, int end)
{
    jv *x = arg(k, 0, NULL);
    if (!x)
        ja_fail(k->c->a, k->line, "%s() takes one argument", k->name);
    if (x->t == JV_LIST) {
        for (size_t i = 0; i < x->u.l.n; i++)
            if (affix(s, x->u.l.items[i], end))
                return jv_bool(1);
        return jv_bool(0);
    }
    if (x->t != JV_STR)
        ja_fail(k->c->a, k->line, "%s() needs a string or a tuple of strings", k->name);
    return jv_bool(affix(s, x, end));
}

static jv *join(const call *k, jv *sep, jv *items, const char *attr)
{
    jv *l = jinja_iter_list(k->c, items, k->line);
    jbuf b = {.a = k->c->a};
    for (size_t i = 0; i < l->u.l.n; i++) {
        if (i && sep)
            jb_put(&b, sep->u.s.p, sep->u.s.n);
        jv *x = l->u.l.items[i];
        if (attr)
            x = jinja_getattr(k->c, x, attr, k->line);
        jv_to_str(&b, x);
    }
    return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
}

static jv *char_class(const call *k, jv *s)
{
    if (!s->u.s.n)
        return jv_bool(0);
    for (size_t i = 0; i < s->u.s.n; i++) {
        unsigned char ch = (unsigned char)s->u.s.p[i];
        int ok = !strcmp(k->name, "isdigit") ? ch >= '0' && ch <= '9'
               : !strcmp(k->name, "isspace") ? py_space(ch)
               : !strcmp(k->name, "isalpha") ? (ch | 32) >= 'a' && (ch | 32) <= 'z'
               : ((ch | 32) >= 'a' && (ch | 32) <= 'z') || (ch >= '0' && ch <= '9');
        if (!ok)
            return jv_bool(0);
    }
    return jv_bool(1);
}

static jv *find_count(const call *k, jv *s)
{
    jv *sub = str_arg(k, 0, NULL);
    if (!sub)
        ja_fail(k->c->a, k->line, "%s() needs a string", k->name);
    if (!strcmp(k->name, "count")) {
        int64_t n = 0;
        size_t i = 0;
        const char *hit;
        if (!sub->u.s.n)
            return jv_int(k->c->a, (int64_t)jv_utf8_len(s->u.s.p, s->u.s.n) + 1);
        while ((hit = find_sub(s, i, sub))) {
            n++;
            i = (size_t)(hit - s->u.s.p) + sub->u.s.n;
        }
        return jv_int(k->c->a, n);
    }
    const char *hit = NULL;
    if (!strcmp(k->name, "rfind")) {
        for (size_t i = s->u.s.n + 1; i-- > 0 && !hit;)
            if (i + sub->u.s.n <= s->u.s.n && !memcmp(s->u.s.p + i, sub->u.s.p, sub->u.s.n))
                hit = s->u.s.p + i;
    } else
        hit = find_sub(s, 0, sub);
    if (!hit)
        return jv_int(k->c->a, -1);
    return jv_int(k->c->a, (int64_t)jv_utf8_len(s->u.s.p, (size_t)(hit - s->u.s.p)));
}

static jv *splitlines(jctx *c, const jv *s)
{
    jv *l = jv_list(c->a, 4);
    size_t i = 0, st = 0, n = s->u.s.n;
    while (i < n) {
        char ch = s->u.s.p[i];
        if (ch == '\n' || ch == '\r') {
            jv_list_push(c->a, l, jv_str_own(c->a, s->u.s.p + st, i - st));
            i += ch == '\r' && i + 1 < n && s->u.s.p[i + 1] == '\n' ? 2 : 1;
            st = i;
        } else
            i++;
    }
    if (st < n)
        jv_list_push(c->a, l, jv_str_own(c->a, s->u.s.p + st, n - st));
    return l;
}

static jv *str_method(const call *k, jv *s)
{
    const char *m = k->name;
    jctx *c = k->c;
    if (!strcmp(m, "strip")) return strip(c, s, str_arg(k, 0, "chars"), 3);
    if (!strcmp(m, "lstrip")) return strip(c, s, str_arg(k, 0, "chars"), 1);
    if (!strcmp(m, "rstrip")) return strip(c, s, str_arg(k, 0, "chars"), 2);
    if (!strcmp(m, "split")) return split(k, s, 0);
    if (!strcmp(m, "rsplit")) return split(k, s, 1);
    if (!strcmp(m, "startswith")) return starts_ends(k, s, 0);
    if (!strcmp(m, "endswith")) return starts_ends(k, s, 1);
    if (!strcmp(m, "upper")) return recase(c, s, 1);
    if (!strcmp(m, "lower")) return recase(c, s, 0);
    if (!strcmp(m, "title")) return recase(c, s, 2);
    if (!strcmp(m, "capitalize")) return recase(c, s, 3);
    if (!strcmp(m, "replace")) return replace(k, s);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) return find_count(k, s);
    if (!strcmp(m, "join")) {
        jv *items = arg(k, 0, NULL);
        if (!items)
            ja_fail(c->a, k->line, "join() takes one argument");
        return join(k, s, items, NULL);
    }
    if (!strcmp(m, "splitlines")) return splitlines(c, s);
    if (!strncmp(m, "is", 2)) return char_class(k, s);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        jv *x = str_arg(k, 0, NULL);
        int end = m[6] == 's';
        if (!x || !affix(s, x, end))
            return s;
        return jv_str_own(c->a, s->u.s.p + (end ? 0 : x->u.s.n), s->u.s.n - x->u.s.n);
    }
    ja_fail(c->a, k->line, "'str' object has no attribute '%s'", m);
}

static jv *pairs(jctx *c, const jv *d)
{
    jv *l = jv_list(c->a, d->u.l.n);
    for (size_t i = 0; i < d->u.l.n; i++) {
        jv *p = jv_list(c->a, 2);
        p->tuple = 1;
        jv_list_push(c->a, p, d->u.l.items[i]);
        jv_list_push(c->a, p, d->vals[i]);
        jv_list_push(c->a, l, p);
    }
    return l;
}

static jv *dict_method(const call *k, jv *d)
{
    jctx *c = k->c;
    if (!strcmp(k->name, "items"))
        return pairs(c, d);
    if (!strcmp(k->name, "keys"))
        return jinja_iter_list(c, d, k->line);
    if (!strcmp(k->name, "values")) {
        jv *l = jv_list(c->a, d->u.l.n);
        for (size_t i = 0; i < d->u.l.n; i++)
            jv_list_push(c->a, l, d->vals[i]);
        return l;
    }
    if (!strcmp(k->name, "get")) {
        jv *key = arg(k, 0, NULL), *def = arg(k, 1, NULL);
        if (!key)
            ja_fail(c->a, k->line, "get() takes a key");
        jv *v = jv_dict_getv(d, key);
        return v ? v : def ? def : jv_none();
    }
    ja_fail(c->a, k->line, "'dict' object has no attribute '%s'", k->name);
}

static jv *list_method(const call *k, jv *l)
{
    jv *x = arg(k, 0, NULL);
    if (!x)
        ja_fail(k->c->a, k->line, "%s() takes one argument", k->name);
    int64_t n = 0;
    for (size_t i = 0; i < l->u.l.n; i++)
        if (jv_equal(l->u.l.items[i], x)) {
            if (!strcmp(k->name, "index"))
                return jv_int(k->c->a, (int64_t)i);
            n++;
        }
    if (!strcmp(k->name, "index"))
        ja_fail(k->c->a, k->line, "index(): value is not in the list");
    return jv_int(k->c->a, n);
}

jv *jinja_method(jctx *c, jv *obj, const char *name, jv **pos, size_t npos, const char **kwn,
                 jv **kwv, size_t nkw, int line)
{
    call k = {c, name, pos, npos, kwn, kwv, nkw, line};
    if ((obj->t == JV_LIST || obj->t == JV_DICT) && is_mutator(name))
        ja_fail(c->a, line, "access to attribute '%s' of '%s' object is unsafe (a chat template "
                "may not change its inputs)", name, jv_type_name(obj));
    switch (obj->t) {
    case JV_STR: return str_method(&k, obj);
    case JV_DICT: return dict_method(&k, obj);
    case JV_LIST:
        if (!strcmp(name, "index") || !strcmp(name, "count"))
            return list_method(&k, obj);
        break;
    case JV_LOOP:
        if (!strcmp(name, "cycle") && npos)
            return pos[obj->u.loop.index0 % (int64_t)npos];
        break;
    case JV_UNDEF:
        ja_fail(c->a, line, "'%s' is undefined", obj->name ? obj->name : "value");
    default: break;
    }
    ja_fail(c->a, line, "'%s' object has no attribute '%s'", jv_type_name(obj), name);
}

/* ---- filters ---- */
static jv *f_tojson(const call *k, jv *x)
{
    jv *ind = arg(k, 0, "indent"), *sk = arg(k, -1, "sort_keys"), *ea = arg(k, -1, "ensure_ascii");
    jv *sep = arg(k, -1, "separators");
    if (ea && jv_truthy(ea))
        ja_fail(k->c->a, k->line, "tojson: ensure_ascii=True is not supported");
    const char *is = NULL, *ks = NULL;
    if (sep && sep->t == JV_LIST && sep->u.l.n == 2 && sep->u.l.items[0]->t == JV_STR &&
        sep->u.l.items[1]->t == JV_STR) {
        is = ja_strndup(k->c->a, sep->u.l.items[0]->u.s.p, sep->u.l.items[0]->u.s.n);
        ks = ja_strndup(k->c->a, sep->u.l.items[1]->u.s.p, sep->u.l.items[1]->u.s.n);
    } else if (sep && sep->t != JV_NONE)
        ja_fail(k->c->a, k->line, "tojson: separators must be a pair of strings");
    int indent = -1;
    if (ind && ind->t == JV_INT)
        indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
    else if (ind && ind->t != JV_NONE)
        ja_fail(k->c->a, k->line, "tojson: indent must be an integer");
    jbuf b = {.a = k->c->a, .limit = k->c->out->limit};
    jv_tojson(&b, x, indent, sk && jv_truthy(sk), is, ks, k->line);
    return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
}

static jv *f_length(const call *k, jv *x)
{
    if (x->t == JV_STR)
        return jv_int(k->c->a, (int64_t)jv_utf8_len(x->u.s.p, x->u.s.n));
    if (x->t == JV_LIST || x->t == JV_DICT || x->t == JV_NS)
        return jv_int(k->c->a, (int64_t)x->u.l.n);
    if (x->t == JV_UNDEF)
        return jv_int(k->c->a, 0);
    ja_fail(k->c->a, k->line, "object of type '%s' has no len()", jv_type_name(x));
}

static jv *f_first_last(const call *k, jv *x, int last)
{
    jv *l = jinja_iter_list(k->c, x, k->line);
    if (!l->u.l.n)
        return jv_undef(k->c->a, NULL);
    return l->u.l.items[last ? l->u.l.n - 1 : 0];
}

static jv *f_int(const call *k, jv *x)
{
    jv *def = arg(k, 0, "default");
    switch (x->t) {
    case JV_INT: return x;
    case JV_BOOL: return jv_int(k->c->a, x->u.b);
    case JV_FLOAT:
        if (x->u.f > -9.2e18 && x->u.f < 9.2e18)
            return jv_int(k->c->a, (int64_t)x->u.f);
        break;
    case JV_STR: {
        char tmp[64];
        jv *t = strip(k->c, x, NULL, 3);
        if (t->u.s.n && t->u.s.n < sizeof tmp) {
            memcpy(tmp, t->u.s.p, t->u.s.n);
            tmp[t->u.s.n] = 0;
            char *end;
            long long v = strtoll(tmp, &end, 10);
            if (!*end)
                return jv_int(k->c->a, v);
            double d = strtod(tmp, &end);
            if (!*end && d > -9.2e18 && d < 9.2e18)
                return jv_int(k->c->a, (int64_t)d);
        }
        break;
    }
    default: break;
    }
    return def ? def : jv_int(k->c->a, 0);
}

static jv *f_float(const call *k, jv *x)
{
    jv *def = arg(k, 0, "default");
    if (x->t == JV_FLOAT)
        return x;
    if (x->t == JV_INT || x->t == JV_BOOL)
        return jv_float(k->c->a, x->t == JV_INT ? (double)x->u.i : x->u.b);
    if (x->t == JV_STR) {
        char tmp[64];
        jv *t = strip(k->c, x, NULL, 3);
        if (t->u.s.n && t->u.s.n < sizeof tmp) {
            memcpy(tmp, t->u.s.p, t->u.s.n);
            tmp[t->u.s.n] = 0;
            char *end;
            double d = strtod(tmp, &end);
            if (!*end)
                return jv_float(k->c->a, d);
        }
    }
    return def ? def : jv_float(k->c->a, 0);
}

static jv *attr_path(const call *k, jv *x, const jv *attr)
{
    if (attr->t == JV_INT)
        return jinja_getitem(k->c, x, (jv *)attr, k->line);
    const char *p = attr->u.s.p, *e = p + attr->u.s.n;
    while (p < e) { /* "a.b" walks into nested dicts, as Jinja's make_attrgetter */
        const char *dot = memchr(p, '.', (size_t)(e - p));
        const char *q = dot ? dot : e;
        size_t n = (size_t)(q - p);
        x = jinja_getitem(k->c, x, jv_str_own(k->c->a, ja_strndup(k->c->a, p, n), n), k->line);
        p = dot ? dot + 1 : e;
    }
    return x;
}

/* select/reject(test, args...), selectattr/rejectattr(attr, test, args...) */
static jv *f_select(const call *k, jv *x, int by_attr, int keep)
{
    jv *l = jinja_iter_list(k->c, x, k->line);
    size_t t0 = by_attr ? 1 : 0;
    jv *attr = by_attr ? str_arg(k, 0, NULL) : NULL;
    if (by_attr && !attr)
        ja_fail(k->c->a, k->line, "%s needs an attribute name", k->name);
    jv *test = k->npos > t0 ? k->pos[t0] : NULL;
    if (test && test->t != JV_STR)
        ja_fail(k->c->a, k->line, "%s: the test must be named by a string", k->name);
    const char *tn = test ? ja_strndup(k->c->a, test->u.s.p, test->u.s.n) : NULL;
    if (tn && !jinja_has_test(tn))
        ja_fail(k->c->a, k->line, "%s: test '%s' is not supported", k->name, tn);
    jv *out = jv_list(k->c->a, l->u.l.n);
    for (size_t i = 0; i < l->u.l.n; i++) {
        jv *v = attr ? attr_path(k, l->u.l.items[i], attr) : l->u.l.items[i];
        int r = tn ? jinja_test(k->c, tn, v, k->pos + t0 + 1, k->npos - t0 - 1, k->line)
                   : jv_truthy(v);
        if (r == keep)
            jv_list_push(k->c->a, out, l->u.l.items[i]);
    }
    return out;
}

static jv *f_map(const call *k, jv *x)
{
    jv *l = jinja_iter_list(k->c, x, k->line);
    jv *attr = arg(k, -1, "attribute"), *def = arg(k, -1, "default");
    jv *out = jv_list(k->c->a, l->u.l.n);
    if (attr) {
        for (size_t i = 0; i < l->u.l.n; i++) {
            jv *v = attr_path(k, l->u.l.items[i], attr);
            jv_list_push(k->c->a, out, v->t == JV_UNDEF && def ? def : v);
        }
        return out;
    }
    jv *f = arg(k, 0, NULL);
    if (!f || f->t != JV_STR)
        ja_fail(k->c->a, k->line, "map needs a filter name or attribute=");
    const char *fn = ja_strndup(k->c->a, f->u.s.p, f->u.s.n);
    if (!jinja_has_filter(fn) || !strcmp(fn, "map"))
        ja_fail(k->c->a, k->line, "map: filter '%s' is not supported", fn);
    for (size_t i = 0; i < l->u.l.n; i++)
        jv_list_push(k->c->a, out, jinja_filter(k->c, fn, l->u.l.items[i], k->pos + 1,
                                                k->npos - 1, k->kwn, k->kwv, k->nkw, k->line));
    return out;
}

static jv *f_list(const call *k, jv *x)
{
    jv *l = jinja_iter_list(k->c, x, k->line);
    if (l != x)
        return l;
    jv *out = jv_list(k->c->a, l->u.l.n);
    for (size_t i = 0; i < l->u.l.n; i++)
        jv_list_push(k->c->a, out, l->u.l.items[i]);
    return out;
}

static jv *f_unique_reverse(const call *k, jv *x, int unique)
{
    if (!unique && x->t == JV_STR) {
        jv *l = jinja_iter_list(k->c, x, k->line);
        jbuf b = {.a = k->c->a};
        for (size_t i = l->u.l.n; i-- > 0;)
            jb_put(&b, l->u.l.items[i]->u.s.p, l->u.l.items[i]->u.s.n);
        return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
    }
    jv *l = jinja_iter_list(k->c, x, k->line);
    jv *out = jv_list(k->c->a, l->u.l.n);
    for (size_t i = 0; i < l->u.l.n; i++) {
        jv *v = l->u.l.items[unique ? i : l->u.l.n - 1 - i];
        int seen = 0;
        for (size_t j = 0; unique && j < out->u.l.n && !seen; j++)
            seen = jv_equal(out->u.l.items[j], v);
        if (!seen)
            jv_list_push(k->c->a, out, v);
    }
    return out;
}

static jv *f_sum_min_max(const call *k, jv *x, int which)
{
    jv *l = jinja_iter_list(k->c, x, k->line);
    jv *attr = arg(k, -1, "attribute");
    if (which == 0) {
        jv *acc = arg(k, -1, "start");
        acc = acc ? acc : jv_int(k->c->a, 0);
        for (size_t i = 0; i < l->u.l.n; i++)
            acc = jinja_binop(k->c, "+", acc, attr ? attr_path(k, l->u.l.items[i], attr)
                                                   : l->u.l.items[i], k->line);
        return acc;
    }
    jv *best = NULL;
    for (size_t i = 0; i < l->u.l.n; i++) {
        jv *v = attr ? attr_path(k, l->u.l.items[i], attr) : l->u.l.items[i];
        if (!best || jinja_compare(k->c, which == 1 ? "<" : ">", v, best, k->line))
            best = v;
    }
    return best ? best : jv_undef(k->c->a, NULL);
}

static jv *f_indent(const call *k, jv *x)
{
    jv *w = arg(k, 0, "width"), *first = arg(k, 1, "first"), *blank = arg(k, 2, "blank");
    jbuf pad = {.a = k->c->a};
    if (w && w->t == JV_STR)
        jb_put(&pad, w->u.s.p, w->u.s.n);
    else
        for (int64_t i = 0; i < (w && w->t == JV_INT ? (w->u.i > 256 ? 256 : w->u.i) : 4); i++)
            jb_put(&pad, " ", 1);
    jv *s = jv_stringify(k->c->a, x);
    jv *lines = splitlines(k->c, s);
    jbuf b = {.a = k->c->a};
    for (size_t i = 0; i < lines->u.l.n; i++) {
        jv *ln = lines->u.l.items[i];
        if (i)
            jb_put(&b, "\n", 1);
        if ((i || (first && jv_truthy(first))) && (ln->u.s.n || (blank && jv_truthy(blank))))
            jb_put(&b, pad.p, pad.n);
        jb_put(&b, ln->u.s.p, ln->u.s.n);
    }
    if (s->u.s.n && (s->u.s.p[s->u.s.n - 1] == '\n'))
        jb_put(&b, "\n", 1);
    return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
}

static jv *f_escape(const call *k, jv *x)
{
    jv *s = jv_stringify(k->c->a, x);
    jbuf b = {.a = k->c->a};
    for (size_t i = 0; i < s->u.s.n; i++) {
        char ch = s->u.s.p[i];
        const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;"
                      : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        if (r)
            jb_puts(&b, r);
        else
            jb_put(&b, &ch, 1);
    }
    return jv_str_own(k->c->a, b.p ? b.p : "", b.n);
}

static jv *f_sort(const call *k, jv *x, int dictsort)
{
    jv *l = dictsort ? pairs(k->c, x) : f_list(k, x);
    if (dictsort && l == x)
        ja_fail(k->c->a, k->line, "dictsort needs a mapping");
    jv *rev = arg(k, dictsort ? 99 : 0, "reverse"), *attr = arg(k, -1, "attribute");
    int r = rev && jv_truthy(rev);
    for (size_t i = 1; i < l->u.l.n; i++) /* stable insertion sort, as Python's sort is stable */
        for (size_t j = i; j > 0; j--) {
            jv *a = l->u.l.items[j - 1], *b = l->u.l.items[j];
            jv *ka = dictsort ? a->u.l.items[0] : attr ? attr_path(k, a, attr) : a;
            jv *kb = dictsort ? b->u.l.items[0] : attr ? attr_path(k, b, attr) : b;
            if (!jinja_compare(k->c, r ? "<" : ">", ka, kb, k->line))
                break;
            l->u.l.items[j - 1] = b, l->u.l.items[j] = a;
            if (++k->c->iters > k->c->max_iters)
                ja_fail(k->c->a, k->line, "sort exceeds %ld steps", k->c->max_iters);
        }
    return l;
}

static jv *f_default(const call *k, jv *x)
{
    jv *def = arg(k, 0, "default_value"), *boolean = arg(k, 1, "boolean");
    if (x->t == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(x)))
        return def ? def : jv_str(k->c->a, "", 0);
    return x;
}

static jv *f_number(const call *k, jv *x)
{
    if (!strcmp(k->name, "abs")) {
        if (x->t == JV_INT)
            return x->u.i < 0 ? jv_int(k->c->a, -x->u.i) : x;
        if (x->t == JV_FLOAT)
            return jv_float(k->c->a, x->u.f < 0 ? -x->u.f : x->u.f);
        ja_fail(k->c->a, k->line, "bad operand type for abs(): '%s'", jv_type_name(x));
    }
    jv *prec = arg(k, 0, "precision"), *method = str_arg(k, 1, "method");
    if (x->t != JV_INT && x->t != JV_FLOAT)
        ja_fail(k->c->a, k->line, "round needs a number");
    double f = x->t == JV_INT ? (double)x->u.i : x->u.f, m = 1;
    for (int64_t i = 0; prec && prec->t == JV_INT && i < prec->u.i && i < 15; i++)
        m *= 10;
    double v = f * m; /* Python's round(): halves to even */
    v = method && jv_is_str(method, "floor") ? floor(v)
      : method && jv_is_str(method, "ceil") ? ceil(v) : nearbyint(v);
    return jv_float(k->c->a, v / m);
}

static jv *f_wordcount(const call *k, jv *x)
{
    jv *s = jv_stringify(k->c->a, x);
    return jv_int(k->c->a, (int64_t)split_ws(k->c, s, -1)->u.l.n);
}

static jv *f_batch(const call *k, jv *x)
{
    jv *l = jinja_iter_list(k->c, x, k->line), *n = arg(k, 0, "linecount");
    if (!n || n->t != JV_INT || n->u.i <= 0)
        ja_fail(k->c->a, k->line, "batch needs a positive count");
    jv *out = jv_list(k->c->a, 4), *cur = NULL;
    for (size_t i = 0; i < l->u.l.n; i++) {
        if (!cur || (int64_t)cur->u.l.n == n->u.i) {
            cur = jv_list(k->c->a, (size_t)(n->u.i < 64 ? n->u.i : 64));
            jv_list_push(k->c->a, out, cur);
        }
        jv_list_push(k->c->a, cur, l->u.l.items[i]);
    }
    return out;
}

static jv *filter_str(const call *k, jv *x)
{
    const char *f = k->name;
    jv *s = jv_stringify(k->c->a, x);
    if (!strcmp(f, "trim")) return strip(k->c, s, str_arg(k, 0, "chars"), 3);
    if (!strcmp(f, "upper")) return recase(k->c, s, 1);
    if (!strcmp(f, "lower")) return recase(k->c, s, 0);
    if (!strcmp(f, "capitalize")) return recase(k->c, recase(k->c, s, 0), 3);
    if (!strcmp(f, "title")) return recase(k->c, s, 2);
    if (!strcmp(f, "replace")) return replace(k, s);
    if (!strcmp(f, "escape") || !strcmp(f, "e")) return f_escape(k, s);
    if (!strcmp(f, "indent")) return f_indent(k, s);
    if (!strcmp(f, "wordcount")) return f_wordcount(k, s);
    return s; /* string, safe */
}

jv *jinja_filter(jctx *c, const char *name, jv *x, jv **pos, size_t npos, const char **kwn,
                 jv **kwv, size_t nkw, int line)
{
    call k = {c, name, pos, npos, kwn, kwv, nkw, line};
    if (!strcmp(name, "default") || !strcmp(name, "d")) return f_default(&k, x);
    if (!strcmp(name, "tojson")) return f_tojson(&k, x);
    if (!strcmp(name, "length") || !strcmp(name, "count")) return f_length(&k, x);
    if (!strcmp(name, "items")) {
        if (x->t == JV_UNDEF)
            return jv_list(c->a, 1);
        if (x->t != JV_DICT && x->t != JV_NS)
            ja_fail(c->a, line, "items needs a mapping, not %s", jv_type_name(x));
        return pairs(c, x);
    }
    if (!strcmp(name, "join")) {
        jv *sep = str_arg(&k, 0, "d"), *attr = str_arg(&k, 1, "attribute");
        return join(&k, sep, x, attr ? ja_strndup(c->a, attr->u.s.p, attr->u.s.n) : NULL);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) return f_first_last(&k, x, name[0] == 'l');
    if (!strcmp(name, "list")) return f_list(&k, x);
    if (!strcmp(name, "map")) return f_map(&k, x);
    if (!strcmp(name, "selectattr")) return f_select(&k, x, 1, 1);
    if (!strcmp(name, "rejectattr")) return f_select(&k, x, 1, 0);
    if (!strcmp(name, "select")) return f_select(&k, x, 0, 1);
    if (!strcmp(name, "reject")) return f_select(&k, x, 0, 0);
    if (!strcmp(name, "int")) return f_int(&k, x);
    if (!strcmp(name, "float")) return f_float(&k, x);
    if (!strcmp(name, "unique")) return f_unique_reverse(&k, x, 1);
    if (!strcmp(name, "reverse")) return f_unique_reverse(&k, x, 0);
    if (!strcmp(name, "sum")) return f_sum_min_max(&k, x, 0);
    if (!strcmp(name, "min")) return f_sum_min_max(&k, x, 1);
    if (!strcmp(name, "max")) return f_sum_min_max(&k, x, 2);
    if (!strcmp(name, "sort")) return f_sort(&k, x, 0);
    if (!strcmp(name, "dictsort")) return f_sort(&k, x, 1);
    if (!strcmp(name, "abs") || !strcmp(name, "round")) return f_number(&k, x);
    if (!strcmp(name, "batch")) return f_batch(&k, x);
    if (!strcmp(name, "safe") && x->t != JV_UNDEF) return x;
    return filter_str(&k, x);
}
