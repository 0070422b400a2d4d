/* jinja_value.c - the arena, the values of the chat-template interpreter, and how they print.
 *
 * Values mirror what transformers hands a template (JSON-like data: None, bool, int, float,
 * str, list, dict) plus the interpreter's own (undefined, namespace, macro, global function,
 * loop). Printing follows Python, because Jinja prints with str(): None -> "None", True ->
 * "True", 1.0 -> "1.0", lists and dicts as their repr ("['a', 1]"). tojson follows
 * transformers' filter: json.dumps(x, ensure_ascii=False, indent=..., sort_keys=...), whose
 * separators are ", " and ": " without indent and "," and ": " with it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jinja_int.h"

/* ---- arena ---- */
struct jchunk { jchunk *next; size_t size, used; _Alignas(16) unsigned char data[]; };

void *ja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > a->limit || a->used > a->limit - n)
        ja_fail(a, a->line, "the template needs more than %zu bytes of memory", a->limit);
    jchunk *h = a->head;
    if (!h || h->size - h->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        h = malloc(sizeof *h + sz);
        if (!h)
            ja_fail(a, a->line, "out of memory");
        h->next = a->head, h->size = sz, h->used = 0;
        a->head = h;
    }
    void *p = h->data + h->used;
    h->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n)
{
    char *p = ja_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    return p;
}

void ja_free(jarena *a)
{
    for (jchunk *h = a->head, *nx; h; h = nx) {
        nx = h->next;
        free(h);
    }
    a->head = NULL;
    a->used = 0;
}

void ja_fail(jarena *a, int line, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *q = msg; *q; q++) /* one line */
        if (*q == '\n' || *q == '\r')
            *q = ' ';
    if (line > 0)
        fg_err_set(a->err, FG_ERR_INVALID_ARG, "chat template line %d: %s", line, msg);
    else /* about the inputs, not a place in the template */
        fg_err_set(a->err, FG_ERR_INVALID_ARG, "chat template: %s", msg);
    longjmp(*a->jb, 1);
}

/* ---- constructors ---- */
static jv v_none = {.t = JV_NONE}, v_true = {.t = JV_BOOL, .u.b = 1}, v_false = {.t = JV_BOOL};

jv *jv_none(void) { return &v_none; }
jv *jv_bool(int b) { return b ? &v_true : &v_false; }

static jv *jv_new(jarena *a, jv_type t)
{
    jv *v = ja_alloc(a, sizeof *v);
    v->t = t;
    return v;
}

jv *jv_undef(jarena *a, const char *name)
{
    jv *v = jv_new(a, JV_UNDEF);
    v->name = name;
    return v;
}

jv *jv_int(jarena *a, int64_t i)
{
    jv *v = jv_new(a, JV_INT);
    v->u.i = i;
    return v;
}

jv *jv_float(jarena *a, double f)
{
    jv *v = jv_new(a, JV_FLOAT);
    v->u.f = f;
    return v;
}

jv *jv_str_own(jarena *a, const char *p, size_t n)
{
    jv *v = jv_new(a, JV_STR);
    v->u.s.p = p ? p : "";
    v->u.s.n = n;
    return v;
}

jv *jv_str(jarena *a, const char *p, size_t n) { return jv_str_own(a, ja_strndup(a, p, n), n); }
jv *jv_strz(jarena *a, const char *s) { return jv_str(a, s, strlen(s)); }

jv *jv_list(jarena *a, size_t cap)
{
    jv *v = jv_new(a, JV_LIST);
    v->u.l.cap = cap ? cap : 4;
    v->u.l.items = ja_alloc(a, v->u.l.cap * sizeof(jv *));
    return v;
}

static void grow(jarena *a, jv *l)
{
    size_t cap = l->u.l.cap * 2;
    jv **it = ja_alloc(a, cap * sizeof *it);
    memcpy(it, l->u.l.items, l->u.l.n * sizeof *it);
    l->u.l.items = it;
    if (l->vals) {
        jv **vs = ja_alloc(a, cap * sizeof *vs);
        memcpy(vs, l->vals, l->u.l.n * sizeof *vs);
        l->vals = vs;
    }
    l->u.l.cap = cap;
}

void jv_list_push(jarena *a, jv *l, jv *x)
{
    if (l->u.l.n == l->u.l.cap)
        grow(a, l);
    l->u.l.items[l->u.l.n++] = x;
}

jv *jv_dict(jarena *a)
{
    jv *d = jv_list(a, 4);
    d->t = JV_DICT;
    d->vals = ja_alloc(a, 4 * sizeof(jv *));
    return d;
}

jv *jv_dict_getv(const jv *d, const jv *key)
{
    for (size_t i = 0; i < d->u.l.n; i++)
        if (jv_equal(d->u.l.items[i], key))
            return d->vals[i];
    return NULL;
}

jv *jv_dict_get(const jv *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->u.l.n; i++) {
        const jv *k = d->u.l.items[i];
        if (k->t == JV_STR && k->u.s.n == n && memcmp(k->u.s.p, key, n) == 0)
            return d->vals[i];
    }
    return NULL;
}

void jv_dict_set(jarena *a, jv *d, jv *key, jv *val)
{
    for (size_t i = 0; i < d->u.l.n; i++)
        if (jv_equal(d->u.l.items[i], key)) {
            d->vals[i] = val;
            return;
        }
    if (d->u.l.n == d->u.l.cap)
        grow(a, d);
    d->vals[d->u.l.n] = val;
    d->u.l.items[d->u.l.n++] = key;
}

/* ---- predicates ---- */
int jv_truthy(const jv *v)
{
    switch (v->t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.n != 0;
    case JV_LIST: case JV_DICT: return v->u.l.n != 0;
    default: return 1;
    }
}

static int is_num(const jv *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }
static double num(const jv *v)
{
    return v->t == JV_FLOAT ? v->u.f : (double)(v->t == JV_INT ? v->u.i : v->u.b);
}

int jv_equal(const jv *x, const jv *y)
{
    if (is_num(x) && is_num(y)) {
        if (x->t != JV_FLOAT && y->t != JV_FLOAT)
            return (x->t == JV_INT ? x->u.i : x->u.b) == (y->t == JV_INT ? y->u.i : y->u.b);
        return num(x) == num(y);
    }
    if (x->t != y->t || (x->t == JV_LIST && x->tuple != y->tuple))
        return 0;
    switch (x->t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return x->u.s.n == y->u.s.n && !memcmp(x->u.s.p, y->u.s.p, x->u.s.n);
    case JV_LIST:
        if (x->u.l.n != y->u.l.n)
            return 0;
        for (size_t i = 0; i < x->u.l.n; i++)
            if (!jv_equal(x->u.l.items[i], y->u.l.items[i]))
                return 0;
        return 1;
    case JV_DICT:
        if (x->u.l.n != y->u.l.n)
            return 0;
        for (size_t i = 0; i < x->u.l.n; i++) {
            jv *o = jv_dict_getv(y, x->u.l.items[i]);
            if (!o || !jv_equal(x->vals[i], o))
                return 0;
        }
        return 1;
    default: return x == y;
    }
}

int jv_is_str(const jv *v, const char *s)
{
    return v->t == JV_STR && v->u.s.n == strlen(s) && !memcmp(v->u.s.p, s, v->u.s.n);
}

size_t jv_utf8_len(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

/* ---- text buffer ---- */
void jb_put(jbuf *b, const char *p, size_t n)
{
    if (b->limit && b->n + n > b->limit)
        ja_fail(b->a, b->a->line, "the output exceeds %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = ja_alloc(b->a, cap);
        if (b->n)
            memcpy(q, b->p, b->n);
        b->p = q, b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

void jb_printf(jbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jb_put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Python's repr(float): the shortest digits that read back, exponent form below 1e-4 and from
 * 1e16 on, otherwise positional with at least one decimal. */
void jv_format_float(jbuf *b, double f)
{
    if (isnan(f)) { jb_puts(b, "nan"); return; }
    if (isinf(f)) { jb_puts(b, f < 0 ? "-inf" : "inf"); return; }
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, f);
        if (strtod(t, NULL) == f)
            break;
    }
    char *e = strchr(t, 'e');
    int exp = atoi(e + 1);
    char dig[24];
    size_t nd = 0;
    for (char *q = t; q < e; q++)
        if (*q >= '0' && *q <= '9')
            dig[nd++] = *q;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    if (f < 0 || (f == 0 && signbit(f)))
        jb_put(b, "-", 1);
    if (exp < -4 || exp >= 16) {
        jb_put(b, dig, 1);
        if (nd > 1) {
            jb_put(b, ".", 1);
            jb_put(b, dig + 1, nd - 1);
        }
        jb_printf(b, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        jb_puts(b, "0.");
        for (int i = 0; i < -exp - 1; i++)
            jb_put(b, "0", 1);
        jb_put(b, dig, nd);
    } else {
        for (int i = 0; i <= exp; i++)
            jb_put(b, i < (int)nd ? &dig[i] : "0", 1);
        jb_put(b, ".", 1);
        if ((int)nd > exp + 1)
            jb_put(b, dig + exp + 1, nd - exp - 1);
        else
            jb_put(b, "0", 1);
    }
}

static void repr_str(jbuf *b, const char *p, size_t n)
{
    int sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\\') jb_puts(b, "\\\\");
        else if (ch == (unsigned char)q) { jb_put(b, "\\", 1); jb_put(b, &q, 1); }
        else if (ch == '\n') jb_puts(b, "\\n");
        else if (ch == '\r') jb_puts(b, "\\r");
        else if (ch == '\t') jb_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) jb_printf(b, "\\x%02x", ch);
        else jb_put(b, (const char *)&ch, 1);
    }
    jb_put(b, &q, 1);
}

static void seq_repr(jbuf *b, const jv *v)
{
    int dict = v->t == JV_DICT;
    jb_put(b, dict ? "{" : v->tuple ? "(" : "[", 1);
    for (size_t i = 0; i < v->u.l.n; i++) {
        if (i)
            jb_puts(b, ", ");
        jv_repr(b, v->u.l.items[i]);
        if (dict) {
            jb_puts(b, ": ");
            jv_repr(b, v->vals[i]);
        }
    }
    if (v->tuple && v->u.l.n == 1)
        jb_put(b, ",", 1);
    jb_put(b, dict ? "}" : v->tuple ? ")" : "]", 1);
}

void jv_repr(jbuf *b, const jv *v)
{
    if (v->t == JV_STR)
        repr_str(b, v->u.s.p, v->u.s.n);
    else if (v->t == JV_LIST || v->t == JV_DICT)
        seq_repr(b, v);
    else
        jv_to_str(b, v);
}

void jv_to_str(jbuf *b, const jv *v)
{
    switch (v->t) {
    case JV_UNDEF: break;
    case JV_NONE: jb_puts(b, "None"); break;
    case JV_BOOL: jb_puts(b, v->u.b ? "True" : "False"); break;
    case JV_INT: jb_printf(b, "%lld", (long long)v->u.i); break;
    case JV_FLOAT: jv_format_float(b, v->u.f); break;
    case JV_STR: jb_put(b, v->u.s.p, v->u.s.n); break;
    case JV_LIST: case JV_DICT: seq_repr(b, v); break;
    case JV_NS: jb_puts(b, "<Namespace>"); break;
    case JV_MACRO: jb_puts(b, "<Macro>"); break;
    case JV_FUNC: jb_puts(b, "<function>"); break;
    case JV_LOOP: jb_puts(b, "<LoopContext>"); break;
    }
}

jv *jv_stringify(jarena *a, const jv *v)
{
    if (v->t == JV_STR)
        return (jv *)v;
    jbuf b = {.a = a};
    jv_to_str(&b, v);
    return jv_str_own(a, b.p, b.n);
}

/* ---- tojson ---- */
static void json_str(jbuf *b, const char *p, size_t n)
{
    jb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        switch (ch) {
        case '"': jb_puts(b, "\\\""); break;
        case '\\': jb_puts(b, "\\\\"); break;
        case '\n': jb_puts(b, "\\n"); break;
        case '\r': jb_puts(b, "\\r"); break;
        case '\t': jb_puts(b, "\\t"); break;
        case '\b': jb_puts(b, "\\b"); break;
        case '\f': jb_puts(b, "\\f"); break;
        default:
            if (ch < 0x20)
                jb_printf(b, "\\u%04x", ch);
            else
                jb_put(b, (const char *)&ch, 1);
        }
    }
    jb_put(b, "\"", 1);
}

static void newline_indent(jbuf *b, int indent, int level)
{
    jb_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        jb_put(b, " ", 1);
}

static int key_cmp(const void *x, const void *y)
{
    const jv *p = **(jv *const *const *)x, *q = **(jv *const *const *)y;
    size_t n = p->u.s.n < q->u.s.n ? p->u.s.n : q->u.s.n;
    int c = memcmp(p->u.s.p, q->u.s.p, n);
    return c ? c : (p->u.s.n > q->u.s.n) - (p->u.s.n < q->u.s.n);
}

typedef struct jseps { const char *item, *key; } jseps;
static void tojson_at(jbuf *b, const jv *v, int indent, int sort, int level, int line,
                      const jseps *sp);

static void tojson_seq(jbuf *b, const jv *v, int indent, int sort, int level, int line,
                       const jseps *sp)
{
    int dict = v->t == JV_DICT;
    size_t n = v->u.l.n;
    if (n == 0) {
        jb_puts(b, dict ? "{}" : "[]");
        return;
    }
    jv ***order = ja_alloc(b->a, n * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = &v->u.l.items[i];
    if (dict && sort)
        for (size_t i = 0; i < n; i++)
            if (v->u.l.items[i]->t != JV_STR)
                ja_fail(b->a, line, "tojson: sort_keys needs string keys");
    if (dict && sort)
        qsort(order, n, sizeof *order, key_cmp);
    jb_put(b, dict ? "{" : "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            jb_puts(b, sp->item);
        if (indent >= 0)
            newline_indent(b, indent, level + 1);
        size_t k = (size_t)(order[i] - v->u.l.items);
        if (dict) {
            const jv *key = v->u.l.items[k];
            if (key->t == JV_STR)
                json_str(b, key->u.s.p, key->u.s.n);
            else { /* Python writes int/float/bool/None keys as strings */
                jbuf t = {.a = b->a};
                tojson_at(&t, key, -1, 0, 0, line, sp);
                json_str(b, t.p, t.n);
            }
            jb_puts(b, sp->key);
            tojson_at(b, v->vals[k], indent, sort, level + 1, line, sp);
        } else
            tojson_at(b, v->u.l.items[k], indent, sort, level + 1, line, sp);
    }
    if (indent >= 0)
        newline_indent(b, indent, level);
    jb_put(b, dict ? "}" : "]", 1);
}

static void tojson_at(jbuf *b, const jv *v, int indent, int sort, int level, int line,
                      const jseps *sp)
{
    if (level > 256)
        ja_fail(b->a, line, "tojson: value nested too deeply");
    switch (v->t) {
    case JV_NONE: jb_puts(b, "null"); break;
    case JV_BOOL: jb_puts(b, v->u.b ? "true" : "false"); break;
    case JV_INT: jb_printf(b, "%lld", (long long)v->u.i); break;
    case JV_FLOAT:
        if (isnan(v->u.f)) jb_puts(b, "NaN");
        else if (isinf(v->u.f)) jb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else jv_format_float(b, v->u.f);
        break;
    case JV_STR: json_str(b, v->u.s.p, v->u.s.n); break;
    case JV_LIST: case JV_DICT: tojson_seq(b, v, indent, sort, level, line, sp); break;
    default:
        ja_fail(b->a, line, "tojson: object of type %s is not JSON serializable",
                jv_type_name(v));
    }
}

void jv_tojson(jbuf *b, const jv *v, int indent, int sort_keys, const char *item_sep,
               const char *key_sep, int line)
{
    jseps sp = {item_sep ? item_sep : indent >= 0 ? "," : ", ", key_sep ? key_sep : ": "};
    tojson_at(b, v, indent, sort_keys, 0, line, &sp);
}

/* ---- from jansson ---- */
static jv *from_json_at(jarena *a, json_t *j, int depth)
{
    if (depth > 256)
        ja_fail(a, 0, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(1);
    case JSON_FALSE: return jv_bool(0);
    case JSON_INTEGER: return jv_int(a, json_integer_value(j));
    case JSON_REAL: return jv_float(a, json_real_value(j));
    case JSON_STRING: return jv_str(a, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv *l = jv_list(a, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            jv_list_push(a, l, from_json_at(a, json_array_get(j, i), depth + 1));
        return l;
    }
    default: {
        jv *d = jv_dict(a);
        const char *k;
        json_t *x;
        json_object_foreach(j, k, x)
            jv_dict_set(a, d, jv_strz(a, k), from_json_at(a, x, depth + 1));
        return d;
    }
    }
}

jv *jv_from_json(jarena *a, json_t *j) { return from_json_at(a, j, 0); }

const char *jv_type_name(const jv *v)
{
    static const char *n[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                              "dict", "Namespace", "Macro", "function", "LoopContext"};
    return n[v->t];
}
