/* jinja_eval.c - walk a parsed template: statements render into the output buffer,
 * expressions evaluate to values.
 *
 * Scopes follow Jinja: the template scope (root) holds the caller's variables (messages,
 * add_generation_prompt, bos_token, ...) and what top-level {% set %} assigns, also from inside
 * an {% if %}; each for-loop iteration and each macro call gets a scope of its own, so a set
 * inside them is gone when they end (templates carry state out through namespace(), whose
 * attributes are assigned in place). A macro sees its own scope, then the scope it was defined
 * in. Names not found anywhere are the globals (range, namespace, dict, raise_exception,
 * strftime_now) or else undefined, which prints as nothing, iterates as empty and is false;
 * reading an attribute of it fails, as with Jinja's default Undefined.
 * Limits: loop iterations over the whole render (max_iters), macro call depth (max_depth), the
 * output size (the buffer's ceiling) and the arena's bytes; each fails with a message.
 */
#include <string.h>

#include "jinja_int.h"

struct jframe { jframe *parent; jv *vars; };

enum { ST_OK, ST_BREAK, ST_CONTINUE };

static int render_body(jctx *c, const jnode *n);

static jframe *frame_new(jctx *c, jframe *parent)
{
    jframe *f = ja_alloc(c->a, sizeof *f);
    f->parent = parent;
    f->vars = jv_dict(c->a);
    return f;
}

jv *jctx_lookup(jctx *c, const char *name)
{
    size_t n = strlen(name);
    for (jframe *f = c->top; f; f = f->parent) {
        jv *v = jv_dict_get(f->vars, name, n);
        if (v)
            return v;
    }
    if (jinja_has_global(name)) {
        jv *v = ja_alloc(c->a, sizeof *v);
        v->t = JV_FUNC;
        v->u.func = name;
        return v;
    }
    return jv_undef(c->a, name);
}

void jctx_set(jctx *c, const char *name, jv *v)
{
    jv_dict_set(c->a, c->top->vars, jv_strz(c->a, name), v);
}

/* ---- calls ---- */
typedef struct args { jv **pos; size_t npos; const char **kwn; jv **kwv; size_t nkw; } args;

static args eval_args(jctx *c, const jnode *n)
{
    args r = {0};
    r.npos = n->nkids, r.nkw = n->nk2, r.kwn = n->names;
    if (r.npos)
        r.pos = ja_alloc(c->a, r.npos * sizeof(jv *));
    if (r.nkw)
        r.kwv = ja_alloc(c->a, r.nkw * sizeof(jv *));
    for (size_t i = 0; i < r.npos; i++)
        r.pos[i] = jinja_eval(c, n->kids[i]);
    for (size_t i = 0; i < r.nkw; i++)
        r.kwv[i] = jinja_eval(c, n->kids2[i]);
    return r;
}

static jv *render_to_str(jctx *c, const jnode *body, jframe *scope)
{
    jbuf *save = c->out;
    jframe *top = c->top;
    jbuf b = {.a = c->a, .limit = save->limit};
    c->out = &b;
    c->top = scope;
    render_body(c, body);
    c->out = save;
    c->top = top;
    return jv_str_own(c->a, b.p ? b.p : "", b.n);
}

static void bind_params(jctx *c, const jnode *m, jframe *f, const args *r, int line)
{
    if (r->npos > m->nnames)
        ja_fail(c->a, line, "macro '%s' takes %zu arguments, %zu given", m->s, m->nnames, r->npos);
    jframe *top = c->top;
    for (size_t i = 0; i < m->nnames; i++) {
        jv *v = i < r->npos ? r->pos[i] : NULL;
        for (size_t k = 0; k < r->nkw && !v; k++)
            if (!strcmp(r->kwn[k], m->names[i]))
                v = r->kwv[k];
        if (!v && m->defaults[i]) {
            c->top = f; /* defaults see earlier parameters */
            v = jinja_eval(c, m->defaults[i]);
            c->top = top;
        }
        jv_dict_set(c->a, f->vars, jv_strz(c->a, m->names[i]), v ? v : jv_undef(c->a, m->names[i]));
    }
    for (size_t k = 0; k < r->nkw; k++) {
        int found = 0;
        for (size_t i = 0; i < m->nnames; i++)
            found |= !strcmp(r->kwn[k], m->names[i]);
        if (!found)
            ja_fail(c->a, line, "macro '%s' takes no keyword argument '%s'", m->s, r->kwn[k]);
    }
}

/* Call macro value mv with arguments r; caller (a {% call %} body as a macro value) or NULL. */
static jv *call_macro(jctx *c, jv *mv, const args *r, jv *caller, int line)
{
    if (++c->depth > c->max_depth)
        ja_fail(c->a, line, "macro calls nest deeper than %d", c->max_depth);
    const jnode *m = mv->u.macro;
    jframe *f = frame_new(c, mv->env ? mv->env : c->root);
    if (m->k == JN_CALLBLOCK) { /* caller(): the call block's body in its own scope */
        jv *s = render_to_str(c, m->b, f);
        c->depth--;
        return s;
    }
    bind_params(c, m, f, r, line);
    if (caller)
        jv_dict_set(c->a, f->vars, jv_strz(c->a, "caller"), caller);
    jv *s = render_to_str(c, m->b, f);
    c->depth--;
    return s;
}

static jv *call_value(jctx *c, jv *fn, args *r, int line, const char *name, jv *caller)
{
    if (fn->t == JV_FUNC)
        return jinja_global(c, fn->u.func, r->pos, r->npos, r->kwn, r->kwv, r->nkw, line);
    if (fn->t == JV_MACRO)
        return call_macro(c, fn, r, caller, line);
    if (fn->t == JV_UNDEF)
        ja_fail(c->a, line, "'%s' is undefined", name ? name : "value");
    ja_fail(c->a, line, "'%s' object is not callable", jv_type_name(fn));
}

static jv *eval_call(jctx *c, const jnode *n, jv *caller)
{
    const jnode *f = n->a;
    if (f->k == JN_GETATTR) {
        jv *obj = jinja_eval(c, f->a);
        args r = eval_args(c, n);
        if (obj->t == JV_NS || (obj->t == JV_DICT && jv_dict_get(obj, f->s, strlen(f->s)) &&
                                jv_dict_get(obj, f->s, strlen(f->s))->t == JV_MACRO))
            return call_value(c, jinja_getattr(c, obj, f->s, n->line), &r, n->line, f->s, caller);
        return jinja_method(c, obj, f->s, r.pos, r.npos, r.kwn, r.kwv, r.nkw, n->line);
    }
    jv *fn = jinja_eval(c, f);
    args r = eval_args(c, n);
    return call_value(c, fn, &r, n->line, f->k == JN_NAME ? f->s : NULL, caller);
}

/* ---- expressions ---- */
static jv *eval_compare(jctx *c, const jnode *n)
{
    jv *x = jinja_eval(c, n->a);
    for (size_t i = 0; i < n->nkids; i++) {
        jv *y = jinja_eval(c, n->kids[i]);
        if (!jinja_compare(c, n->names[i], x, y, n->line))
            return jv_bool(0);
        x = y;
    }
    return jv_bool(1);
}

static jv *eval_collection(jctx *c, const jnode *n)
{
    if (n->k == JN_LIST) {
        jv *l = jv_list(c->a, n->nkids);
        for (size_t i = 0; i < n->nkids; i++)
            jv_list_push(c->a, l, jinja_eval(c, n->kids[i]));
        l->tuple = n->s != NULL;
        return l;
    }
    jv *d = jv_dict(c->a);
    for (size_t i = 0; i < n->nkids; i++)
        jv_dict_set(c->a, d, jinja_eval(c, n->kids[i]), jinja_eval(c, n->kids2[i]));
    return d;
}

static jv *eval_unary(jctx *c, const jnode *n)
{
    jv *x = jinja_eval(c, n->a);
    if (n->s[0] == '+' && (x->t == JV_INT || x->t == JV_FLOAT))
        return x;
    if (x->t == JV_INT)
        return jv_int(c->a, -x->u.i);
    if (x->t == JV_FLOAT)
        return jv_float(c->a, -x->u.f);
    if (x->t == JV_BOOL)
        return jv_int(c->a, n->s[0] == '-' ? -x->u.b : x->u.b);
    ja_fail(c->a, n->line, "bad operand type for unary %s: '%s'", n->s, jv_type_name(x));
}

static jv *eval_slice(jctx *c, const jnode *n)
{
    jv *obj = jinja_eval(c, n->a);
    jv *lo = n->b ? jinja_eval(c, n->b) : NULL;
    jv *hi = n->c ? jinja_eval(c, n->c) : NULL;
    jv *st = n->d ? jinja_eval(c, n->d) : NULL;
    return jinja_slice(c, obj, lo, hi, st, n->line);
}

static jv *eval_filter(jctx *c, const jnode *n)
{
    jv *x = jinja_eval(c, n->a);
    args r = eval_args(c, n);
    return jinja_filter(c, n->s, x, r.pos, r.npos, r.kwn, r.kwv, r.nkw, n->line);
}

jv *jinja_eval(jctx *c, const jnode *n)
{
    c->a->line = n->line;
    switch (n->k) {
    case JN_LIT: return n->lit;
    case JN_NAME: return jctx_lookup(c, n->s);
    case JN_LIST: case JN_DICT: return eval_collection(c, n);
    case JN_GETATTR: return jinja_getattr(c, jinja_eval(c, n->a), n->s, n->line);
    case JN_GETITEM: {
        jv *obj = jinja_eval(c, n->a);
        return jinja_getitem(c, obj, jinja_eval(c, n->b), n->line);
    }
    case JN_SLICE: return eval_slice(c, n);
    case JN_CALL: return eval_call(c, n, NULL);
    case JN_FILTER: return eval_filter(c, n);
    case JN_TEST: {
        jv *x = jinja_eval(c, n->a);
        args r = eval_args(c, n);
        return jv_bool(jinja_test(c, n->s, x, r.pos, r.npos, n->line));
    }
    case JN_UNARY: return eval_unary(c, n);
    case JN_BINARY: {
        jv *x = jinja_eval(c, n->a);
        return jinja_binop(c, n->s, x, jinja_eval(c, n->b), n->line);
    }
    case JN_AND: {
        jv *x = jinja_eval(c, n->a);
        return jv_truthy(x) ? jinja_eval(c, n->b) : x;
    }
    case JN_OR: {
        jv *x = jinja_eval(c, n->a);
        return jv_truthy(x) ? x : jinja_eval(c, n->b);
    }
    case JN_NOT: return jv_bool(!jv_truthy(jinja_eval(c, n->a)));
    case JN_COND:
        if (jv_truthy(jinja_eval(c, n->a)))
            return jinja_eval(c, n->b);
        return n->c ? jinja_eval(c, n->c) : jv_undef(c->a, NULL);
    case JN_COMPARE: return eval_compare(c, n);
    default: ja_fail(c->a, n->line, "statement used as an expression");
    }
}

/* ---- statements ---- */
static void bind_targets(jctx *c, const jnode *n, jv *item)
{
    if (n->nnames == 1) {
        jctx_set(c, n->names[0], item);
        return;
    }
    jv *l = jinja_iter_list(c, item, n->line);
    if (l->u.l.n != n->nnames)
        ja_fail(c->a, n->line, "cannot unpack %zu values into %zu names", l->u.l.n, n->nnames);
    for (size_t i = 0; i < n->nnames; i++)
        jctx_set(c, n->names[i], l->u.l.items[i]);
}

static void count_iter(jctx *c, int line)
{
    if (++c->iters > c->max_iters)
        ja_fail(c->a, line, "loops ran more than %ld iterations", c->max_iters);
}

/* the items the loop visits: the iterable, less those its "if" filter rejects */
static jv *loop_items(jctx *c, const jnode *n)
{
    jv *all = jinja_iter_list(c, jinja_eval(c, n->a), n->line);
    if (!n->d)
        return all;
    jv *keep = jv_list(c->a, all->u.l.n);
    jframe *top = c->top;
    for (size_t i = 0; i < all->u.l.n; i++) {
        count_iter(c, n->line);
        c->top = frame_new(c, top);
        bind_targets(c, n, all->u.l.items[i]);
        if (jv_truthy(jinja_eval(c, n->d)))
            jv_list_push(c->a, keep, all->u.l.items[i]);
        c->top = top;
    }
    return keep;
}

static int render_for(jctx *c, const jnode *n)
{
    jv *items = loop_items(c, n);
    jframe *top = c->top;
    for (size_t i = 0; i < items->u.l.n; i++) {
        count_iter(c, n->line);
        c->top = frame_new(c, top);
        jv *loop = ja_alloc(c->a, sizeof *loop);
        loop->t = JV_LOOP;
        loop->u.loop.index0 = (int64_t)i, loop->u.loop.length = (int64_t)items->u.l.n;
        loop->u.loop.list = items;
        jctx_set(c, "loop", loop);
        bind_targets(c, n, items->u.l.items[i]);
        int st = render_body(c, n->b);
        c->top = top;
        if (st == ST_BREAK)
            break;
    }
    if (!items->u.l.n && n->c)
        return render_body(c, n->c);
    return ST_OK;
}

static void render_set(jctx *c, const jnode *n)
{
    jv *v = jinja_eval(c, n->a);
    if (n->s) {
        jv *ns = jctx_lookup(c, n->s);
        if (ns->t != JV_NS)
            ja_fail(c->a, n->line, "cannot assign attribute '%s' on a %s, only on a namespace",
                    n->names[0], jv_type_name(ns));
        jv_dict_set(c->a, ns, jv_strz(c->a, n->names[0]), v);
        return;
    }
    bind_targets(c, n, v);
}

static int render_stmt(jctx *c, const jnode *n)
{
    c->a->line = n->line;
    switch (n->k) {
    case JN_LIT: jv_to_str(c->out, n->lit); return ST_OK;
    case JN_OUTPUT: jv_to_str(c->out, jinja_eval(c, n->a)); return ST_OK;
    case JN_BODY: return render_body(c, n);
    case JN_IF:
        if (jv_truthy(jinja_eval(c, n->a)))
            return render_body(c, n->b);
        return n->c ? render_stmt(c, n->c) : ST_OK;
    case JN_FOR: return render_for(c, n);
    case JN_SET: render_set(c, n); return ST_OK;
    case JN_SETBLOCK: jctx_set(c, n->names[0], render_to_str(c, n->b, c->top)); return ST_OK;
    case JN_MACRO: {
        jv *m = ja_alloc(c->a, sizeof *m);
        m->t = JV_MACRO, m->u.macro = n, m->env = c->top;
        jctx_set(c, n->s, m);
        return ST_OK;
    }
    case JN_CALLBLOCK: {
        jv *cv = ja_alloc(c->a, sizeof *cv);
        cv->t = JV_MACRO, cv->u.macro = n, cv->env = c->top;
        jv_to_str(c->out, eval_call(c, n->a, cv));
        return ST_OK;
    }
    case JN_FILTERBLOCK: {
        jv *s = render_to_str(c, n->b, c->top);
        const jnode *f = n->a;
        args r = eval_args(c, f);
        jv_to_str(c->out, jinja_filter(c, f->s, s, r.pos, r.npos, r.kwn, r.kwv, r.nkw, n->line));
        return ST_OK;
    }
    case JN_BREAK: return ST_BREAK;
    case JN_CONTINUE: return ST_CONTINUE;
    default: jv_to_str(c->out, jinja_eval(c, n)); return ST_OK;
    }
}

static int render_body(jctx *c, const jnode *n)
{
    for (size_t i = 0; i < n->nkids; i++) {
        int st = render_stmt(c, n->kids[i]);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

void jinja_begin(jctx *c)
{
    c->root = c->top = frame_new(c, NULL);
}

void jinja_render(jctx *c, const jnode *body)
{
    render_body(c, body);
}
