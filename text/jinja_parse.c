/* jinja_parse.c - tokens to a tree, with Jinja's grammar and precedence.
 *
 * Expressions, loosest first: inline if-else; or; and; not; comparisons (== != < <= > >= in,
 * not in; chained); + -; ~; * / // %; **; unary - +; then a primary with its postfixes (.name,
 * [index], [a:b:c], (call)) and its filters (|f, |f(args)) and tests (is [not] t, is t arg,
 * is t(args)), which bind tighter than any operator, as in Jinja.
 * Statements: if/elif/else, for (targets, "if" filter, else), set (one or more targets, dotted
 * namespace target, block set), macro, call (with caller()), break, continue, filter blocks,
 * and transformers' generation/endgeneration (rendered as its body).
 * What the interpreter cannot run is refused here, naming it: an unknown statement, filter or
 * test, a method no value type has, a call of a name that is neither a global nor a macro.
 * Nesting is bounded (MAX_NEST) so a hostile template cannot exhaust the C stack.
 */
#include <string.h>

#include "jinja_int.h"

#define MAX_NEST 100

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int nest;
    const char **macros; /* macro names defined anywhere in the template */
    size_t nmacros;
    jnode **calls;       /* calls of bare names, checked once all macros are known */
    size_t ncalls, capcalls;
} parser;

static const jtok *peek(parser *P) { return &P->t[P->i]; }
static const jtok *next(parser *P)
{
    const jtok *t = &P->t[P->i];
    if (t->t != JT_EOF)
        P->i++;
    return t;
}

static int is_op(const jtok *t, const char *op)
{
    return t->t == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static int is_name(const jtok *t, const char *nm)
{
    return t->t == JT_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}

static const char *tok_desc(parser *P, const jtok *t)
{
    switch (t->t) {
    case JT_EOF: return "end of template";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_END: return "end of print statement";
    case JT_STRING: return "string";
    case JT_DATA: return "template data";
    default: return ja_strndup(P->a, t->p, t->n);
    }
}

static void expect_op(parser *P, const char *op)
{
    const jtok *t = next(P);
    if (!is_op(t, op))
        ja_fail(P->a, t->line, "expected '%s', got '%s'", op, tok_desc(P, t));
}

static const char *expect_name(parser *P)
{
    const jtok *t = next(P);
    if (t->t != JT_NAME)
        ja_fail(P->a, t->line, "expected a name, got '%s'", tok_desc(P, t));
    return ja_strndup(P->a, t->p, t->n);
}

static jnode *node(parser *P, jnode_kind k, int line)
{
    jnode *n = ja_alloc(P->a, sizeof *n);
    n->k = k, n->line = line;
    return n;
}

/* growable node arrays */
typedef struct nvec { jnode **v; size_t n, cap; } nvec;
static void nv_push(parser *P, nvec *v, jnode *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **q = ja_alloc(P->a, cap * sizeof *q);
        if (v->n)
            memcpy(q, v->v, v->n * sizeof *q);
        v->v = q, v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void enter(parser *P, int line)
{
    if (++P->nest > MAX_NEST)
        ja_fail(P->a, line, "the template nests deeper than %d", MAX_NEST);
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

static jnode *lit(parser *P, jv *v, int line)
{
    jnode *n = node(P, JN_LIT, line);
    n->lit = v;
    return n;
}

/* "(a, b=1)" after the "(" : positional into kids, keywords into names/kids2 */
static void parse_args(parser *P, jnode *n)
{
    nvec pos = {0}, kw = {0};
    nvec names = {0};
    while (!is_op(peek(P), ")")) {
        if (pos.n + kw.n)
            expect_op(P, ",");
        if (is_op(peek(P), ")"))
            break;
        if (peek(P)->t == JT_NAME && is_op(&P->t[P->i + 1], "=")) {
            const char *k = expect_name(P);
            next(P);
            nv_push(P, &names, (jnode *)k);
            nv_push(P, &kw, parse_expr(P));
        } else {
            if (kw.n)
                ja_fail(P->a, peek(P)->line, "positional argument after a keyword argument");
            nv_push(P, &pos, parse_expr(P));
        }
    }
    expect_op(P, ")");
    n->kids = pos.v, n->nkids = pos.n;
    n->kids2 = kw.v, n->nk2 = kw.n;
    n->names = (const char **)names.v, n->nnames = names.n;
}

static jnode *parse_list_or_tuple(parser *P, const char *close, int line)
{
    jnode *n = node(P, JN_LIST, line);
    nvec items = {0};
    int comma = 0;
    while (!is_op(peek(P), close)) {
        if (items.n) {
            expect_op(P, ",");
            comma = 1;
        }
        if (is_op(peek(P), close))
            break;
        nv_push(P, &items, parse_expr(P));
    }
    expect_op(P, close);
    n->kids = items.v, n->nkids = items.n;
    if (!strcmp(close, ")") && items.n == 1 && !comma)
        return items.v[0]; /* parenthesized expression */
    if (!strcmp(close, ")"))
        n->s = "tuple";
    return n;
}

static jnode *parse_dict(parser *P, int line)
{
    jnode *n = node(P, JN_DICT, line);
    nvec keys = {0}, vals = {0};
    while (!is_op(peek(P), "}")) {
        if (keys.n)
            expect_op(P, ",");
        if (is_op(peek(P), "}"))
            break;
        nv_push(P, &keys, parse_expr(P));
        expect_op(P, ":");
        nv_push(P, &vals, parse_expr(P));
    }
    expect_op(P, "}");
    n->kids = keys.v, n->nkids = keys.n;
    n->kids2 = vals.v, n->nk2 = vals.n;
    return n;
}

static jnode *parse_primary(parser *P)
{
    const jtok *t = next(P);
    jnode *n;
    if (t->t == JT_NAME) {
        const char *s = ja_strndup(P->a, t->p, t->n);
        if (!strcmp(s, "true") || !strcmp(s, "True")) return lit(P, jv_bool(1), t->line);
        if (!strcmp(s, "false") || !strcmp(s, "False")) return lit(P, jv_bool(0), t->line);
        if (!strcmp(s, "none") || !strcmp(s, "None")) return lit(P, jv_none(), t->line);
        n = node(P, JN_NAME, t->line);
        n->s = s;
        return n;
    }
    if (t->t == JT_STRING) {
        jbuf b = {.a = P->a};
        jb_put(&b, t->p, t->n);
        while (peek(P)->t == JT_STRING) { /* adjacent literals concatenate */
            const jtok *u = next(P);
            jb_put(&b, u->p, u->n);
        }
        return lit(P, jv_str_own(P->a, b.p ? b.p : "", b.n), t->line);
    }
    if (t->t == JT_INT) return lit(P, jv_int(P->a, t->i), t->line);
    if (t->t == JT_FLOAT) return lit(P, jv_float(P->a, t->f), t->line);
    if (is_op(t, "(")) return parse_list_or_tuple(P, ")", t->line);
    if (is_op(t, "[")) return parse_list_or_tuple(P, "]", t->line);
    if (is_op(t, "{")) return parse_dict(P, t->line);
    ja_fail(P->a, t->line, "unexpected '%s'", tok_desc(P, t));
}

static jnode *parse_subscript(parser *P, jnode *obj, int line)
{
    jnode *parts[3] = {0};
    int colons = 0;
    while (!is_op(peek(P), "]")) {
        if (is_op(peek(P), ":")) {
            if (++colons > 2)
                ja_fail(P->a, line, "too many ':' in a slice");
            next(P);
            continue;
        }
        parts[colons] = parse_expr(P);
        if (!colons && !is_op(peek(P), ":"))
            break;
    }
    expect_op(P, "]");
    if (!colons && !parts[0])
        ja_fail(P->a, line, "expected an index inside '[]'");
    jnode *n = node(P, colons ? JN_SLICE : JN_GETITEM, line);
    n->a = obj, n->b = parts[0], n->c = parts[1], n->d = parts[2];
    return n;
}

static void note_call(parser *P, jnode *call)
{
    if (P->ncalls == P->capcalls) {
        size_t cap = P->capcalls ? P->capcalls * 2 : 16;
        jnode **q = ja_alloc(P->a, cap * sizeof *q);
        if (P->ncalls)
            memcpy(q, P->calls, P->ncalls * sizeof *q);
        P->calls = q, P->capcalls = cap;
    }
    P->calls[P->ncalls++] = call;
}

static jnode *parse_postfix(parser *P, jnode *n)
{
    for (;;) {
        const jtok *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            const jtok *u = next(P);
            if (u->t != JT_NAME && u->t != JT_INT)
                ja_fail(P->a, u->line, "expected an attribute name after '.'");
            jnode *g = node(P, u->t == JT_INT ? JN_GETITEM : JN_GETATTR, u->line);
            g->a = n;
            if (u->t == JT_INT)
                g->b = lit(P, jv_int(P->a, u->i), u->line);
            else
                g->s = ja_strndup(P->a, u->p, u->n);
            n = g;
        } else if (is_op(t, "[")) {
            next(P);
            n = parse_subscript(P, n, t->line);
        } else if (is_op(t, "(")) {
            next(P);
            jnode *c = node(P, JN_CALL, t->line);
            c->a = n;
            parse_args(P, c);
            if (n->k == JN_GETATTR && !jinja_has_method(n->s))
                ja_fail(P->a, t->line, "method '%s' is not supported", n->s);
            if (n->k == JN_NAME)
                note_call(P, c);
            n = c;
        } else
            return n;
    }
}

static jnode *parse_filter_or_test(parser *P, jnode *n)
{
    for (;;) {
        const jtok *t = peek(P);
        if (is_op(t, "|")) {
            next(P);
            jnode *f = node(P, JN_FILTER, t->line);
            f->a = n;
            f->s = expect_name(P);
            if (!jinja_has_filter(f->s))
                ja_fail(P->a, t->line, "filter '%s' is not supported", f->s);
            if (is_op(peek(P), "(")) {
                next(P);
                parse_args(P, f);
            }
            n = f;
        } else if (is_name(t, "is")) {
            next(P);
            int neg = is_name(peek(P), "not");
            if (neg)
                next(P);
            jnode *f = node(P, JN_TEST, t->line);
            f->a = n;
            const jtok *u = next(P);
            if (u->t != JT_NAME)
                ja_fail(P->a, u->line, "expected a test name after 'is'");
            f->s = ja_strndup(P->a, u->p, u->n);
            if (!jinja_has_test(f->s))
                ja_fail(P->a, t->line, "test '%s' is not supported", f->s);
            if (is_op(peek(P), "(")) {
                next(P);
                parse_args(P, f);
            } else {
                const jtok *v = peek(P); /* "is divisibleby 3", "is equalto 'x'" */
                if (v->t == JT_STRING || v->t == JT_INT || v->t == JT_FLOAT ||
                    (v->t == JT_NAME && !is_name(v, "and") && !is_name(v, "or") &&
                     !is_name(v, "else") && !is_name(v, "if") && !is_name(v, "in") &&
                     !is_name(v, "is") && !is_name(v, "not"))) {
                    f->kids = ja_alloc(P->a, sizeof(jnode *));
                    f->kids[0] = parse_primary(P);
                    f->kids[0] = parse_postfix(P, f->kids[0]);
                    f->nkids = 1;
                }
            }
            if (neg) {
                jnode *x = node(P, JN_NOT, t->line);
                x->a = f;
                f = x;
            }
            n = f;
        } else
            return n;
    }
}

static jnode *parse_unary(parser *P, int with_filter)
{
    const jtok *t = peek(P);
    enter(P, t->line);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        n = node(P, JN_UNARY, t->line);
        n->s = is_op(t, "-") ? "-" : "+";
        n->a = parse_unary(P, 0);
    } else
        n = parse_postfix(P, parse_primary(P));
    if (with_filter)
        n = parse_filter_or_test(P, n);
    P->nest--;
    return n;
}

static jnode *binary(parser *P, const char *op, jnode *x, jnode *y, int line)
{
    jnode *n = node(P, JN_BINARY, line);
    n->s = op, n->a = x, n->b = y;
    return n;
}

static jnode *parse_pow(parser *P)
{
    jnode *n = parse_unary(P, 1);
    while (is_op(peek(P), "**")) {
        int line = next(P)->line;
        n = binary(P, "**", n, parse_unary(P, 1), line);
    }
    return n;
}

static jnode *parse_math2(parser *P)
{
    jnode *n = parse_pow(P);
    for (;;) {
        const jtok *t = peek(P);
        const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//"
                       : is_op(t, "%") ? "%" : NULL;
        if (!op)
            return n;
        next(P);
        n = binary(P, op, n, parse_pow(P), t->line);
    }
}

static jnode *parse_concat(parser *P)
{
    jnode *n = parse_math2(P);
    while (is_op(peek(P), "~")) {
        int line = next(P)->line;
        n = binary(P, "~", n, parse_math2(P), line);
    }
    return n;
}

static jnode *parse_math1(parser *P)
{
    jnode *n = parse_concat(P);
    for (;;) {
        const jtok *t = peek(P);
        const char *op = is_op(t, "+") ? "+" : is_op(t, "-") ? "-" : NULL;
        if (!op)
            return n;
        next(P);
        n = binary(P, op, n, parse_concat(P), t->line);
    }
}

static const char *compare_op(parser *P)
{
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
    const jtok *t = peek(P);
    for (int i = 0; ops[i]; i++)
        if (is_op(t, ops[i])) {
            next(P);
            return ops[i];
        }
    if (is_name(t, "in")) {
        next(P);
        return "in";
    }
    if (is_name(t, "not") && is_name(&P->t[P->i + 1], "in")) {
        P->i += 2;
        return "notin";
    }
    return NULL;
}

/* a < b < c is a < b and b < c (b once) */
static jnode *parse_compare(parser *P)
{
    int line = peek(P)->line;
    jnode *n = parse_math1(P);
    const char *op;
    nvec rest = {0}, opsv = {0};
    while ((op = compare_op(P))) {
        nv_push(P, &opsv, (jnode *)op);
        nv_push(P, &rest, parse_math1(P));
    }
    if (!rest.n)
        return n;
    jnode *c = node(P, JN_COMPARE, line);
    c->a = n;
    c->kids = rest.v, c->nkids = rest.n;
    c->names = (const char **)opsv.v, c->nnames = opsv.n;
    return c;
}

static jnode *parse_not(parser *P)
{
    const jtok *t = peek(P);
    if (is_name(t, "not")) {
        next(P);
        enter(P, t->line);
        jnode *n = node(P, JN_NOT, t->line);
        n->a = parse_not(P);
        P->nest--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P)
{
    jnode *n = parse_not(P);
    while (is_name(peek(P), "and")) {
        int line = next(P)->line;
        jnode *x = node(P, JN_AND, line);
        x->a = n, x->b = parse_not(P);
        n = x;
    }
    return n;
}

static jnode *parse_or(parser *P)
{
    jnode *n = parse_and(P);
    while (is_name(peek(P), "or")) {
        int line = next(P)->line;
        jnode *x = node(P, JN_OR, line);
        x->a = n, x->b = parse_and(P);
        n = x;
    }
    return n;
}

static jnode *parse_expr(parser *P)
{
    enter(P, peek(P)->line);
    jnode *n = parse_or(P);
    while (is_name(peek(P), "if")) {
        int line = next(P)->line;
        jnode *c = node(P, JN_COND, line);
        c->a = parse_or(P);
        c->b = n;
        if (is_name(peek(P), "else")) {
            next(P);
            c->c = parse_expr(P);
        }
        n = c;
    }
    P->nest--;
    return n;
}

/* ---- statements ---- */
static jnode *parse_body(parser *P, const char *const *ends, const char **which);

static void expect_block_end(parser *P)
{
    const jtok *t = next(P);
    if (t->t != JT_BLOCK_END)
        ja_fail(P->a, t->line, "expected end of statement block, got '%s'", tok_desc(P, t));
}

static jnode *parse_if(parser *P, int line)
{
    jnode *n = node(P, JN_IF, line);
    n->a = parse_expr(P);
    expect_block_end(P);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *w;
    n->b = parse_body(P, ends, &w);
    if (!strcmp(w, "elif"))
        n->c = parse_if(P, peek(P)->line);
    else if (!strcmp(w, "else")) {
        expect_block_end(P);
        static const char *const end2[] = {"endif", NULL};
        n->c = parse_body(P, end2, &w);
        expect_block_end(P);
    } else
        expect_block_end(P);
    return n;
}

/* one or more comma-separated names (for / set targets) */
static void parse_targets(parser *P, jnode *n)
{
    nvec v = {0};
    do {
        nv_push(P, &v, (jnode *)expect_name(P));
    } while (is_op(peek(P), ",") && (next(P), 1));
    n->names = (const char **)v.v, n->nnames = v.n;
}

static jnode *parse_for(parser *P, int line)
{
    jnode *n = node(P, JN_FOR, line);
    int paren = is_op(peek(P), "(");
    if (paren)
        next(P);
    parse_targets(P, n);
    if (paren)
        expect_op(P, ")");
    const jtok *t = next(P);
    if (!is_name(t, "in"))
        ja_fail(P->a, t->line, "expected 'in' in a for loop");
    n->a = parse_or(P); /* no inline if: "if" here filters the loop */
    if (is_name(peek(P), "if")) {
        next(P);
        n->d = parse_expr(P);
    }
    if (is_name(peek(P), "recursive"))
        ja_fail(P->a, line, "'for ... recursive' is not supported");
    expect_block_end(P);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *w;
    n->b = parse_body(P, ends, &w);
    expect_block_end(P);
    if (!strcmp(w, "else")) {
        static const char *const end2[] = {"endfor", NULL};
        n->c = parse_body(P, end2, &w);
        expect_block_end(P);
    }
    return n;
}

static jnode *parse_set(parser *P, int line)
{
    jnode *n = node(P, JN_SET, line);
    const char *first = expect_name(P);
    if (is_op(peek(P), ".")) { /* {% set ns.attr = value %} */
        next(P);
        n->s = first;
        n->names = ja_alloc(P->a, sizeof(char *));
        n->names[0] = expect_name(P), n->nnames = 1;
    } else {
        nvec v = {0};
        nv_push(P, &v, (jnode *)first);
        while (is_op(peek(P), ",")) {
            next(P);
            nv_push(P, &v, (jnode *)expect_name(P));
        }
        n->names = (const char **)v.v, n->nnames = v.n;
    }
    if (peek(P)->t == JT_BLOCK_END && !n->s && n->nnames == 1) { /* block set */
        next(P);
        n->k = JN_SETBLOCK;
        static const char *const ends[] = {"endset", NULL};
        const char *w;
        n->b = parse_body(P, ends, &w);
        expect_block_end(P);
        return n;
    }
    expect_op(P, "=");
    n->a = parse_expr(P);
    expect_block_end(P);
    return n;
}

static void parse_params(parser *P, jnode *n)
{
    expect_op(P, "(");
    nvec names = {0}, defs = {0};
    while (!is_op(peek(P), ")")) {
        if (names.n)
            expect_op(P, ",");
        nv_push(P, &names, (jnode *)expect_name(P));
        jnode *d = NULL;
        if (is_op(peek(P), "=")) {
            next(P);
            d = parse_expr(P);
        }
        nv_push(P, &defs, d);
    }
    expect_op(P, ")");
    n->names = (const char **)names.v, n->nnames = names.n;
    n->defaults = defs.v;
}

static jnode *parse_macro(parser *P, int line)
{
    jnode *n = node(P, JN_MACRO, line);
    n->s = expect_name(P);
    parse_params(P, n);
    expect_block_end(P);
    static const char *const ends[] = {"endmacro", NULL};
    const char *w;
    n->b = parse_body(P, ends, &w);
    if (peek(P)->t == JT_NAME)
        next(P); /* {% endmacro name %} */
    expect_block_end(P);
    if (P->nmacros % 16 == 0) {
        const char **q = ja_alloc(P->a, (P->nmacros + 16) * sizeof *q);
        if (P->nmacros)
            memcpy(q, P->macros, P->nmacros * sizeof *q);
        P->macros = q;
    }
    P->macros[P->nmacros++] = n->s;
    return n;
}

static jnode *parse_call_block(parser *P, int line)
{
    jnode *n = node(P, JN_CALLBLOCK, line);
    if (is_op(peek(P), "("))
        ja_fail(P->a, line, "call block parameters are not supported");
    n->a = parse_expr(P);
    if (n->a->k != JN_CALL)
        ja_fail(P->a, line, "expected a call after 'call'");
    expect_block_end(P);
    static const char *const ends[] = {"endcall", NULL};
    const char *w;
    n->b = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

static jnode *parse_filter_block(parser *P, int line)
{
    jnode *n = node(P, JN_FILTERBLOCK, line);
    jnode *f = node(P, JN_FILTER, line);
    f->s = expect_name(P);
    if (!jinja_has_filter(f->s))
        ja_fail(P->a, line, "filter '%s' is not supported", f->s);
    if (is_op(peek(P), "(")) {
        next(P);
        parse_args(P, f);
    }
    n->a = f;
    expect_block_end(P);
    static const char *const ends[] = {"endfilter", NULL};
    const char *w;
    n->b = parse_body(P, ends, &w);
    expect_block_end(P);
    return n;
}

static jnode *parse_statement(parser *P)
{
    const jtok *t = next(P);
    if (t->t != JT_NAME)
        ja_fail(P->a, t->line, "expected a statement name, got '%s'", tok_desc(P, t));
    const char *s = ja_strndup(P->a, t->p, t->n);
    if (!strcmp(s, "if")) return parse_if(P, t->line);
    if (!strcmp(s, "for")) return parse_for(P, t->line);
    if (!strcmp(s, "set")) return parse_set(P, t->line);
    if (!strcmp(s, "macro")) return parse_macro(P, t->line);
    if (!strcmp(s, "call")) return parse_call_block(P, t->line);
    if (!strcmp(s, "filter")) return parse_filter_block(P, t->line);
    if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        expect_block_end(P);
        return node(P, s[0] == 'b' ? JN_BREAK : JN_CONTINUE, t->line);
    }
    if (!strcmp(s, "generation")) { /* transformers' assistant-mask tag: its body as is */
        expect_block_end(P);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *w;
        jnode *b = parse_body(P, ends, &w);
        expect_block_end(P);
        return b;
    }
    ja_fail(P->a, t->line, "statement '%s' is not supported", s);
}

/* Statements until one of ends (returned in *which, its name consumed, its block end not) or
 * the end of the template when ends is NULL. */
static jnode *parse_body(parser *P, const char *const *ends, const char **which)
{
    int line = peek(P)->line;
    enter(P, line);
    jnode *body = node(P, JN_BODY, line);
    nvec v = {0};
    for (;;) {
        const jtok *t = peek(P);
        if (t->t == JT_EOF) {
            if (ends) { /* name the block's closing tag, the last of ends */
                size_t k = 0;
                while (ends[k + 1])
                    k++;
                ja_fail(P->a, t->line, "unexpected end of template, expected '%s'", ends[k]);
            }
            break;
        }
        if (t->t == JT_DATA) {
            next(P);
            nv_push(P, &v, lit(P, jv_str_own(P->a, t->p, t->n), t->line));
        } else if (t->t == JT_VAR_BEGIN) {
            next(P);
            jnode *o = node(P, JN_OUTPUT, t->line);
            o->a = parse_expr(P);
            const jtok *e = next(P);
            if (e->t != JT_VAR_END)
                ja_fail(P->a, e->line, "expected end of print statement, got '%s'", tok_desc(P, e));
            nv_push(P, &v, o);
        } else if (t->t == JT_BLOCK_BEGIN) {
            const jtok *nm = &P->t[P->i + 1];
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(nm, ends[i])) {
                    P->i += 2;
                    *which = ends[i];
                    goto done;
                }
            next(P);
            nv_push(P, &v, parse_statement(P));
        } else
            ja_fail(P->a, t->line, "unexpected '%s'", tok_desc(P, t));
    }
done:
    body->kids = v.v, body->nkids = v.n;
    P->nest--;
    return body;
}

jnode *jinja_parse(jarena *a, const jtoks *t)
{
    parser P = {.a = a, .t = t->v, .n = t->n};
    jnode *body = parse_body(&P, NULL, NULL);
    for (size_t i = 0; i < P.ncalls; i++) {
        const jnode *c = P.calls[i];
        const char *nm = c->a->s;
        int ok = jinja_has_global(nm) || !strcmp(nm, "caller");
        for (size_t k = 0; !ok && k < P.nmacros; k++)
            ok = !strcmp(P.macros[k], nm);
        if (!ok)
            ja_fail(a, c->line, "function '%s' is not supported", nm);
    }
    return body;
}
