/* jinja_int.h - private types of the chat-template interpreter (jinja_*.c, chat.c).
 *
 * A template is lexed (jinja_lex.c) into tokens, parsed (jinja_parse.c) into a tree of jnode,
 * and the tree is walked (jinja_eval.c; operators, tests and globals in jinja_ops.c, filters
 * and methods in jinja_filters.c, values in jinja_value.c) to render text. Everything a parse
 * or a render allocates comes from one arena (jarena) with a byte ceiling, freed at once:
 * values are immutable (except namespace() objects, which templates assign through) and are
 * shared freely, so there is no reference counting. Errors unwind with longjmp to the entry
 * point (chat.c's parse_guarded / render_guarded), which turns them into an fg_err naming the
 * template line and the construct.
 */
#ifndef FG_JINJA_INT_H
#define FG_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

/* ---- arena: bump allocation in chunks; a ceiling on the total makes runaway renders fail ---- */
typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t used, limit; /* bytes handed out so far; the most allowed */
    jmp_buf *jb;        /* where an allocation failure unwinds to */
    fg_err *err;
    int line;           /* line being parsed or rendered, for messages */
} jarena;

void *ja_alloc(jarena *a, size_t n);            /* zeroed; unwinds on failure */
char *ja_strndup(jarena *a, const char *s, size_t n);
void ja_free(jarena *a);
/* Fill a->err with "chat template line N: ..." and unwind. */
_Noreturn void ja_fail(jarena *a, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- values ---- */
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO,
    JV_FUNC, JV_LOOP
} jv_type;

typedef struct jv jv;
typedef struct jnode jnode;
struct jv {
    jv_type t;
    union {
        int b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;         /* UTF-8 bytes, not NUL-terminated */
        struct { jv **items; size_t n, cap; } l;       /* JV_LIST; JV_DICT/JV_NS: keys+vals */
        const jnode *macro;                            /* JV_MACRO */
        const char *func;                              /* JV_FUNC: a global's name */
        struct { int64_t index0, length; jv *list; } loop;
    } u;
    jv **vals;         /* JV_DICT / JV_NS: values, parallel to u.l.items (the keys) */
    const char *name;  /* JV_UNDEF: the name that was missing (for messages), may be NULL */
    void *env;         /* JV_MACRO: the scope it was defined in (a jframe) */
    int tuple;         /* JV_LIST: a Python tuple (prints as (a, b); items() pairs, (a, b)) */
};

jv *jv_undef(jarena *a, const char *name);
jv *jv_none(void);
jv *jv_bool(int b);
jv *jv_int(jarena *a, int64_t i);
jv *jv_float(jarena *a, double f);
jv *jv_str(jarena *a, const char *p, size_t n); /* copies */
jv *jv_strz(jarena *a, const char *s);
jv *jv_str_own(jarena *a, const char *p, size_t n); /* keeps p (arena memory) */
jv *jv_list(jarena *a, size_t cap);
void jv_list_push(jarena *a, jv *l, jv *x);
jv *jv_dict(jarena *a);
void jv_dict_set(jarena *a, jv *d, jv *key, jv *val);
jv *jv_dict_get(const jv *d, const char *key, size_t n); /* NULL when absent */
jv *jv_dict_getv(const jv *d, const jv *key);
int jv_truthy(const jv *v);
int jv_equal(const jv *x, const jv *y);
int jv_is_str(const jv *v, const char *s);
size_t jv_utf8_len(const char *p, size_t n);

/* text buffer in the arena, with an optional ceiling (0 = none) */
typedef struct jbuf { char *p; size_t n, cap, limit; jarena *a; } jbuf;
void jb_put(jbuf *b, const char *p, size_t n);
void jb_puts(jbuf *b, const char *s);
void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Python's str(v) (what {{ v }} prints) and repr(v), appended to b. */
void jv_to_str(jbuf *b, const jv *v);
void jv_repr(jbuf *b, const jv *v);
jv *jv_stringify(jarena *a, const jv *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), separators=(item_sep, key_sep)
 * (NULL: Python's defaults), sort_keys) into b. */
void jv_tojson(jbuf *b, const jv *v, int indent, int sort_keys, const char *item_sep,
               const char *key_sep, int line);
/* A JSON text (jansson value) as a jv. */
struct json_t;
jv *jv_from_json(jarena *a, struct json_t *j);
void jv_format_float(jbuf *b, double f);

/* ---- tokens and tree ---- */
typedef enum {
    JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING,
    JT_INT, JT_FLOAT, JT_OP, JT_EOF
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line;
    const char *p; /* text (DATA, NAME, OP; STRING: unescaped) */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jtoks { jtok *v; size_t n, cap; } jtoks;
void jinja_lex(jarena *a, const char *src, size_t len, jtoks *out);

typedef enum {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_DICT, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER,
    JN_TEST, JN_UNARY, JN_BINARY, JN_AND, JN_OR, JN_NOT, JN_COND, JN_COMPARE, JN_CONCAT,
    /* statements */
    JN_BODY, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK, JN_BREAK,
    JN_CONTINUE, JN_FILTERBLOCK
} jnode_kind;

struct jnode {
    jnode_kind k;
    int line;
    const char *s;    /* name, attribute, filter/test name, operator */
    jv *lit;          /* JN_LIT */
    jnode *a, *b, *c; /* operands; JN_IF: cond/then/else; JN_FOR: iter/body/else (+d filter) */
    jnode *d;
    jnode **kids;     /* JN_BODY statements, call/filter args, list items, dict keys */
    size_t nkids;
    jnode **kids2;    /* dict values; keyword-argument values */
    const char **names; /* keyword names (kids2), for targets, macro params */
    size_t nnames;
    jnode **defaults; /* macro parameter defaults (NULL entries: none) */
    size_t nk2;
};

jnode *jinja_parse(jarena *a, const jtoks *t);

/* ---- rendering ---- */
typedef struct jframe jframe;
typedef struct jctx {
    jarena *a;
    jbuf *out;
    jframe *top;      /* innermost scope */
    jframe *root;     /* template scope (globals + caller's variables) */
    long iters, max_iters;
    int depth, max_depth;
    int64_t now;      /* strftime_now's instant (Unix seconds) */
} jctx;

void jinja_begin(jctx *c); /* the template scope (root), empty */
void jinja_render(jctx *c, const jnode *body);
jv *jinja_eval(jctx *c, const jnode *n);
jv *jctx_lookup(jctx *c, const char *name);
void jctx_set(jctx *c, const char *name, jv *v);

/* builtins (jinja_ops.c, jinja_filters.c): parse-time checks and render-time calls */
int jinja_has_filter(const char *name);
int jinja_has_test(const char *name);
int jinja_has_method(const char *name);
int jinja_has_global(const char *name);
jv *jinja_filter(jctx *c, const char *name, jv *x, jv **args, size_t nargs, const char **kwn,
                 jv **kwv, size_t nkw, int line);
int jinja_test(jctx *c, const char *name, jv *x, jv **args, size_t nargs, int line);
jv *jinja_method(jctx *c, jv *obj, const char *name, jv **args, size_t nargs, const char **kwn,
                 jv **kwv, size_t nkw, int line);
jv *jinja_global(jctx *c, const char *name, jv **args, size_t nargs, const char **kwn,
                 jv **kwv, size_t nkw, int line);
jv *jinja_getattr(jctx *c, jv *obj, const char *name, int line);
jv *jinja_getitem(jctx *c, jv *obj, jv *key, int line);
jv *jinja_slice(jctx *c, jv *obj, jv *lo, jv *hi, jv *step, int line);
jv *jinja_binop(jctx *c, const char *op, jv *x, jv *y, int line);
int jinja_compare(jctx *c, const char *op, jv *x, jv *y, int line);
const char *jv_type_name(const jv *v);
/* items of an iterable (list, dict keys, string characters); fails on anything else */
jv *jinja_iter_list(jctx *c, jv *v, int line);

#endif
