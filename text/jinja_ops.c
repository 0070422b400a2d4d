/* jinja_ops.c - operators, attribute and item access, slicing, tests and global functions of
 * the chat-template interpreter, with Python's semantics where Jinja defers to Python:
 * // and % floor, / is true division, 1 == 1.0 == True, strings compare by code point
 * (UTF-8 byte order is code point order), indexing and slicing a string count code points,
 * negative indices count from the end, an index past the end is undefined (Jinja's getitem).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>
#include <time.h>

#include "jinja_int.h"

static int is_num(const jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }
static double num(const jv *v)
{
    return v->t == JV_FLOAT ? v->u.f : (double)(v->t == JV_INT ? v->u.i : v->u.b);
}
static int64_t ival(const jv *v) { return v->t == JV_INT ? v->u.i : v->u.b; }

static _Noreturn void undefined_fail(jctx *c, const jv *v, int line)
{
    if (v->name)
        ja_fail(c->a, line, "'%s' is undefined", v->name);
    ja_fail(c->a, line, "an undefined value is used");
}

/* byte offsets of each code point of s, plus the end */
static size_t *cp_offsets(jctx *c, const jv *s, size_t *ncp)
{
    size_t n = jv_utf8_len(s->u.s.p, s->u.s.n);
    size_t *o = ja_alloc(c->a, (n + 1) * sizeof *o);
    size_t k = 0;
    for (size_t i = 0; i < s->u.s.n; i++)
        if (((unsigned char)s->u.s.p[i] & 0xC0) != 0x80)
            o[k++] = i;
    o[k] = s->u.s.n;
    *ncp = n;
    return o;
}

jv *jinja_iter_list(jctx *c, jv *v, int line)
{
    if (v->t == JV_LIST)
        return v;
    if (v->t == JV_UNDEF)
        return jv_list(c->a, 1);
    if (v->t == JV_DICT || v->t == JV_NS) {
        jv *l = jv_list(c->a, v->u.l.n);
        for (size_t i = 0; i < v->u.l.n; i++)
            jv_list_push(c->a, l, v->u.l.items[i]);
        return l;
    }
    if (v->t == JV_STR) {
        size_t n, *o = cp_offsets(c, v, &n);
        jv *l = jv_list(c->a, n);
        for (size_t i = 0; i < n; i++)
            jv_list_push(c->a, l, jv_str_own(c->a, v->u.s.p + o[i], o[i + 1] - o[i]));
        return l;
    }
    ja_fail(c->a, line, "'%s' object is not iterable", jv_type_name(v));
}

static jv *loop_attr(jctx *c, const jv *l, const char *name)
{
    int64_t i = l->u.loop.index0, n = l->u.loop.length;
    if (!strcmp(name, "index0")) return jv_int(c->a, i);
    if (!strcmp(name, "index")) return jv_int(c->a, i + 1);
    if (!strcmp(name, "revindex0")) return jv_int(c->a, n - i - 1);
    if (!strcmp(name, "revindex")) return jv_int(c->a, n - i);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(c->a, n);
    if (!strcmp(name, "depth")) return jv_int(c->a, 1);
    if (!strcmp(name, "depth0")) return jv_int(c->a, 0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->u.loop.list->u.l.items[i - 1] : jv_undef(c->a, "previtem");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->u.loop.list->u.l.items[i + 1] : jv_undef(c->a, "nextitem");
    return jv_undef(c->a, name);
}

jv *jinja_getattr(jctx *c, jv *obj, const char *name, int line)
{
    if (obj->t == JV_UNDEF)
        undefined_fail(c, obj, line);
    if (obj->t == JV_DICT || obj->t == JV_NS) {
        jv *v = jv_dict_get(obj, name, strlen(name));
        return v ? v : jv_undef(c->a, name);
    }
    if (obj->t == JV_LOOP)
        return loop_attr(c, obj, name);
    return jv_undef(c->a, name);
}

jv *jinja_getitem(jctx *c, jv *obj, jv *key, int line)
{
    if (obj->t == JV_UNDEF)
        undefined_fail(c, obj, line);
    if (obj->t == JV_DICT || obj->t == JV_NS) {
        jv *v = jv_dict_getv(obj, key);
        if (v)
            return v;
        return jv_undef(c->a, key->t == JV_STR ? ja_strndup(c->a, key->u.s.p, key->u.s.n) : NULL);
    }
    if (key->t == JV_STR)
        return jinja_getattr(c, obj, ja_strndup(c->a, key->u.s.p, key->u.s.n), line);
    if ((obj->t == JV_LIST || obj->t == JV_STR) && (key->t == JV_INT || key->t == JV_BOOL)) {
        size_t n, *o = NULL;
        if (obj->t == JV_STR)
            o = cp_offsets(c, obj, &n);
        else
            n = obj->u.l.n;
        int64_t i = ival(key);
        if (i < 0)
            i += (int64_t)n;
        if (i < 0 || i >= (int64_t)n)
            return jv_undef(c->a, NULL);
        if (obj->t == JV_LIST)
            return obj->u.l.items[i];
        return jv_str_own(c->a, obj->u.s.p + o[i], o[i + 1] - o[i]);
    }
    return jv_undef(c->a, NULL);
}

static int64_t clamp_index(int64_t i, int64_t n, int64_t step, int is_lo)
{
    if (i < 0) {
        i += n;
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= n)
        i = step < 0 ? n - 1 : n;
    (void)is_lo;
    return i;
}

jv *jinja_slice(jctx *c, jv *obj, jv *lo, jv *hi, jv *st, int line)
{
    if (obj->t == JV_UNDEF)
        undefined_fail(c, obj, line);
    jv *items = obj->t == JV_STR ? jinja_iter_list(c, obj, line) : obj;
    if (items->t != JV_LIST)
        ja_fail(c->a, line, "'%s' object is not subscriptable", jv_type_name(obj));
    for (jv **p = (jv *[]){lo, hi, st}, **e = p + 3; p < e; p++)
        if (*p && (*p)->t != JV_NONE && (*p)->t != JV_INT && (*p)->t != JV_BOOL)
            ja_fail(c->a, line, "slice indices must be integers or None");
    int64_t n = (int64_t)items->u.l.n;
    int64_t step = st && st->t != JV_NONE ? ival(st) : 1;
    if (step == 0)
        ja_fail(c->a, line, "slice step cannot be zero");
    int64_t a = lo && lo->t != JV_NONE ? clamp_index(ival(lo), n, step, 1) : step < 0 ? n - 1 : 0;
    int64_t b = hi && hi->t != JV_NONE ? clamp_index(ival(hi), n, step, 0) : step < 0 ? -1 : n;
    jv *out = jv_list(c->a, 4);
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        jv_list_push(c->a, out, items->u.l.items[i]);
    if (obj->t != JV_STR)
        return out;
    jbuf buf = {.a = c->a};
    for (size_t i = 0; i < out->u.l.n; i++)
        jb_put(&buf, out->u.l.items[i]->u.s.p, out->u.l.items[i]->u.s.n);
    return jv_str_own(c->a, buf.p ? buf.p : "", buf.n);
}

static jv *concat_seq(jctx *c, jv *x, jv *y)
{
    if (x->t == JV_STR) {
        jbuf b = {.a = c->a};
        jb_put(&b, x->u.s.p, x->u.s.n);
        jb_put(&b, y->u.s.p, y->u.s.n);
        return jv_str_own(c->a, b.p ? b.p : "", b.n);
    }
    jv *l = jv_list(c->a, x->u.l.n + y->u.l.n);
    for (size_t i = 0; i < x->u.l.n; i++)
        jv_list_push(c->a, l, x->u.l.items[i]);
    for (size_t i = 0; i < y->u.l.n; i++)
        jv_list_push(c->a, l, y->u.l.items[i]);
    return l;
}

static jv *repeat_seq(jctx *c, jv *s, int64_t k)
{
    jv *r = s->t == JV_STR ? jv_str(c->a, "", 0) : jv_list(c->a, 4);
    for (int64_t i = 0; i < k; i++) {
        if (++c->iters > c->max_iters)
            ja_fail(c->a, c->a->line, "repetition exceeds %ld items", c->max_iters);
        r = concat_seq(c, r, s);
    }
    return r;
}

static jv *arith(jctx *c, char op, jv *x, jv *y, int line)
{
    int ints = x->t != JV_FLOAT && y->t != JV_FLOAT;
    if (op == '/' || op == 'f' || op == '%') {
        if (num(y) == 0)
            ja_fail(c->a, line, "division by zero");
    }
    if (ints && op != '/') {
        int64_t a = ival(x), b = ival(y), r;
        switch (op) {
        case '+': if (__builtin_add_overflow(a, b, &r)) goto ovf; return jv_int(c->a, r);
        case '-': if (__builtin_sub_overflow(a, b, &r)) goto ovf; return jv_int(c->a, r);
        case '*': if (__builtin_mul_overflow(a, b, &r)) goto ovf; return jv_int(c->a, r);
        case 'f': case '%':
            if (a == INT64_MIN && b == -1) goto ovf;
            r = a / b;
            if ((a % b != 0) && ((a < 0) != (b < 0)))
                r--;
            return jv_int(c->a, op == 'f' ? r : a - r * b);
        case 'p':
            if (b >= 0) {
                int64_t acc = 1;
                for (int64_t i = 0; i < b; i++)
                    if (__builtin_mul_overflow(acc, a, &acc)) goto ovf;
                return jv_int(c->a, acc);
            }
            return jv_float(c->a, pow((double)a, (double)b));
        }
    }
    double a = num(x), b = num(y);
    switch (op) {
    case '+': return jv_float(c->a, a + b);
    case '-': return jv_float(c->a, a - b);
    case '*': return jv_float(c->a, a * b);
    case '/': return jv_float(c->a, a / b);
    case 'f': return jv_float(c->a, floor(a / b));
    case '%': {
        double m = fmod(a, b);
        return jv_float(c->a, m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
    }
    default: return jv_float(c->a, pow(a, b));
    }
ovf:
    ja_fail(c->a, line, "integer overflow");
}

jv *jinja_binop(jctx *c, const char *op, jv *x, jv *y, int line)
{
    if (op[0] == '~') {
        jbuf b = {.a = c->a};
        jv_to_str(&b, x);
        jv_to_str(&b, y);
        return jv_str_own(c->a, b.p ? b.p : "", b.n);
    }
    if (x->t == JV_UNDEF)
        undefined_fail(c, x, line);
    if (y->t == JV_UNDEF)
        undefined_fail(c, y, line);
    char o = !strcmp(op, "//") ? 'f' : !strcmp(op, "**") ? 'p' : op[0];
    if (is_num(x) && is_num(y))
        return arith(c, o, x, y, line);
    if (o == '+' && x->t == y->t && (x->t == JV_STR || x->t == JV_LIST))
        return concat_seq(c, x, y);
    if (o == '*' && (x->t == JV_STR || x->t == JV_LIST) && (y->t == JV_INT || y->t == JV_BOOL))
        return repeat_seq(c, x, ival(y));
    if (o == '*' && (y->t == JV_STR || y->t == JV_LIST) && (x->t == JV_INT || x->t == JV_BOOL))
        return repeat_seq(c, y, ival(x));
    ja_fail(c->a, line, "unsupported operand types for %s: '%s' and '%s'", op, jv_type_name(x),
            jv_type_name(y));
}

static int contains(jctx *c, jv *x, jv *y, int line)
{
    if (y->t == JV_STR) {
        if (x->t != JV_STR)
            ja_fail(c->a, line, "'in <string>' requires string as left operand, not %s",
                    jv_type_name(x));
        if (!x->u.s.n)
            return 1;
        for (size_t i = 0; i + x->u.s.n <= y->u.s.n; i++)
            if (!memcmp(y->u.s.p + i, x->u.s.p, x->u.s.n))
                return 1;
        return 0;
    }
    if (y->t == JV_DICT || y->t == JV_NS)
        return jv_dict_getv(y, x) != NULL;
    if (y->t == JV_LIST) {
        for (size_t i = 0; i < y->u.l.n; i++)
            if (jv_equal(x, y->u.l.items[i]))
                return 1;
        return 0;
    }
    if (y->t == JV_UNDEF)
        return 0;
    ja_fail(c->a, line, "argument of type '%s' is not iterable", jv_type_name(y));
}

static int order(jctx *c, jv *x, jv *y, int line)
{
    if (is_num(x) && is_num(y)) {
        double a = num(x), b = num(y);
        return (a > b) - (a < b);
    }
    if (x->t == JV_STR && y->t == JV_STR) {
        size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
        int r = memcmp(x->u.s.p, y->u.s.p, n);
        return r ? (r > 0) - (r < 0) : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
    }
    if (x->t == JV_LIST && y->t == JV_LIST) {
        for (size_t i = 0; i < x->u.l.n && i < y->u.l.n; i++)
            if (!jv_equal(x->u.l.items[i], y->u.l.items[i]))
                return order(c, x->u.l.items[i], y->u.l.items[i], line);
        return (x->u.l.n > y->u.l.n) - (x->u.l.n < y->u.l.n);
    }
    if (x->t == JV_UNDEF)
        undefined_fail(c, x, line);
    if (y->t == JV_UNDEF)
        undefined_fail(c, y, line);
    ja_fail(c->a, line, "'<' not supported between instances of '%s' and '%s'",
            jv_type_name(x), jv_type_name(y));
}

int jinja_compare(jctx *c, const char *op, jv *x, jv *y, int line)
{
    if (!strcmp(op, "==")) return jv_equal(x, y);
    if (!strcmp(op, "!=")) return !jv_equal(x, y);
    if (!strcmp(op, "in")) return contains(c, x, y, line);
    if (!strcmp(op, "notin")) return !contains(c, x, y, line);
    int r = order(c, x, y, line);
    if (!strcmp(op, "<")) return r < 0;
    if (!strcmp(op, "<=")) return r <= 0;
    if (!strcmp(op, ">")) return r > 0;
    return r >= 0;
}

/* ---- tests ---- */
static const char *const tests[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
    "integer", "float", "boolean", "true", "false", "callable", "equalto", "eq", "==", "ne",
    "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby",
    "lower", "upper", "sameas", NULL};

int jinja_has_test(const char *name)
{
    for (int i = 0; tests[i]; i++)
        if (!strcmp(tests[i], name))
            return 1;
    return 0;
}

static int case_test(const jv *x, int upper)
{
    if (x->t != JV_STR)
        return 0;
    int cased = 0;
    for (size_t i = 0; i < x->u.s.n; i++) {
        char ch = x->u.s.p[i];
        if ((upper && ch >= 'a' && ch <= 'z') || (!upper && ch >= 'A' && ch <= 'Z'))
            return 0;
        cased |= (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    }
    return cased;
}

static int test_cmp(jctx *c, const char *name, jv *x, jv *y, int line)
{
    static const char *const map[][2] = {{"equalto", "=="}, {"eq", "=="}, {"==", "=="},
        {"ne", "!="}, {"!=", "!="}, {"lt", "<"}, {"<", "<"}, {"le", "<="}, {"<=", "<="},
        {"gt", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}, {"in", "in"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], name))
            return jinja_compare(c, map[i][1], x, y, line);
    if (!strcmp(name, "sameas"))
        return x == y || (x->t == y->t && (x->t == JV_NONE || x->t == JV_BOOL) && jv_equal(x, y));
    if (!is_num(x) || !is_num(y) || ival(y) == 0)
        ja_fail(c->a, line, "test '%s' needs numbers", name);
    return ival(x) % ival(y) == 0;
}

int jinja_test(jctx *c, const char *name, jv *x, jv **args, size_t nargs, int line)
{
    jv_type t = x->t;
    if (!strcmp(name, "defined")) return t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return t == JV_UNDEF;
    if (!strcmp(name, "none")) return t == JV_NONE;
    if (!strcmp(name, "string")) return t == JV_STR;
    if (!strcmp(name, "mapping")) return t == JV_DICT;
    if (!strcmp(name, "iterable"))
        return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    if (!strcmp(name, "sequence")) return t == JV_STR || t == JV_LIST || t == JV_DICT;
    if (!strcmp(name, "number")) return t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    if (!strcmp(name, "integer")) return t == JV_INT;
    if (!strcmp(name, "float")) return t == JV_FLOAT;
    if (!strcmp(name, "boolean")) return t == JV_BOOL;
    if (!strcmp(name, "true")) return t == JV_BOOL && x->u.b;
    if (!strcmp(name, "false")) return t == JV_BOOL && !x->u.b;
    if (!strcmp(name, "callable")) return t == JV_MACRO || t == JV_FUNC;
    if (!strcmp(name, "lower")) return case_test(x, 0);
    if (!strcmp(name, "upper")) return case_test(x, 1);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (t != JV_INT && t != JV_BOOL)
            ja_fail(c->a, line, "test '%s' needs an integer", name);
        return (ival(x) % 2 != 0) == (name[0] == 'o');
    }
    if (nargs != 1)
        ja_fail(c->a, line, "test '%s' takes one argument", name);
    return test_cmp(c, name, x, args[0], line);
}

/* ---- globals ---- */
static const char *const globals[] = {"range", "namespace", "dict", "raise_exception",
                                      "strftime_now", NULL};

int jinja_has_global(const char *name)
{
    for (int i = 0; globals[i]; i++)
        if (!strcmp(globals[i], name))
            return 1;
    return 0;
}

static jv *g_range(jctx *c, jv **args, size_t nargs, int line)
{
    int64_t a = 0, b, s = 1;
    for (size_t i = 0; i < nargs; i++)
        if (args[i]->t != JV_INT && args[i]->t != JV_BOOL)
            ja_fail(c->a, line, "range() needs integers, got %s", jv_type_name(args[i]));
    if (nargs == 1)
        b = ival(args[0]);
    else if (nargs == 2 || nargs == 3) {
        a = ival(args[0]), b = ival(args[1]);
        s = nargs == 3 ? ival(args[2]) : 1;
    } else
        ja_fail(c->a, line, "range() takes 1 to 3 arguments");
    if (s == 0)
        ja_fail(c->a, line, "range() step must not be zero");
    jv *l = jv_list(c->a, 8);
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
        if (++c->iters > c->max_iters)
            ja_fail(c->a, line, "range() longer than %ld items", c->max_iters);
        jv_list_push(c->a, l, jv_int(c->a, i));
    }
    return l;
}

static jv *g_dict(jctx *c, jv **args, size_t nargs, const char **kwn, jv **kwv, size_t nkw,
                  int line, jv_type t)
{
    jv *d = jv_dict(c->a);
    d->t = t;
    if (nargs > 1 || (nargs == 1 && args[0]->t != JV_DICT && args[0]->t != JV_NS))
        ja_fail(c->a, line, "%s() takes a mapping and keyword arguments",
                t == JV_NS ? "namespace" : "dict");
    if (nargs)
        for (size_t i = 0; i < args[0]->u.l.n; i++)
            jv_dict_set(c->a, d, args[0]->u.l.items[i], args[0]->vals[i]);
    for (size_t i = 0; i < nkw; i++)
        jv_dict_set(c->a, d, jv_strz(c->a, kwn[i]), kwv[i]);
    return d;
}

static jv *g_strftime(jctx *c, jv **args, size_t nargs, int line)
{
    if (nargs != 1 || args[0]->t != JV_STR)
        ja_fail(c->a, line, "strftime_now() takes a format string");
    time_t t = (time_t)c->now;
    struct tm tm;
    localtime_r(&t, &tm);
    char fmt[256], out[512];
    size_t n = args[0]->u.s.n < sizeof fmt - 1 ? args[0]->u.s.n : sizeof fmt - 1;
    memcpy(fmt, args[0]->u.s.p, n);
    fmt[n] = 0;
    size_t k = n ? strftime(out, sizeof out, fmt, &tm) : 0;
    return jv_str(c->a, out, k);
}

jv *jinja_global(jctx *c, const char *name, jv **args, size_t nargs, const char **kwn,
                 jv **kwv, size_t nkw, int line)
{
    if (!strcmp(name, "range"))
        return g_range(c, args, nargs, line);
    if (!strcmp(name, "namespace"))
        return g_dict(c, args, nargs, kwn, kwv, nkw, line, JV_NS);
    if (!strcmp(name, "dict"))
        return g_dict(c, args, nargs, kwn, kwv, nkw, line, JV_DICT);
    if (!strcmp(name, "strftime_now"))
        return g_strftime(c, args, nargs, line);
    /* raise_exception(message): the template refuses this input */
    jbuf b = {.a = c->a};
    if (nargs)
        jv_to_str(&b, args[0]);
    ja_fail(c->a, line, "raise_exception: %s", b.p ? b.p : "");
}
