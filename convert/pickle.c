/* pickle.c - a restricted unpickler that understands exactly what torch.save writes for a
 * state dict, and nothing else.
 *
 * It is a plain loop over opcodes driving a value stack, a mark stack and a memo; there is no
 * recursion anywhere (building, walking or freeing), so nesting depth cannot blow the C stack.
 * Every value lives in a registry and is freed from it in one pass, which also makes cycles
 * (a list appended to itself through the memo) harmless.
 *
 * Allowed opcodes: PROTO(2..5) FRAME STOP MARK POP POP_MARK DUP NONE NEWTRUE NEWFALSE BININT
 * BININT1 BININT2 LONG1 BINFLOAT BINUNICODE SHORT_BINUNICODE BINUNICODE8 EMPTY_TUPLE TUPLE
 * TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST APPEND APPENDS EMPTY_DICT SETITEM SETITEMS GLOBAL STACK_GLOBAL
 * REDUCE BUILD BINPERSID BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET. Any other opcode is
 * refused by name and offset.
 *
 * Allowed globals: collections.OrderedDict, torch._utils._rebuild_tensor_v2,
 * torch._utils._rebuild_parameter, and the storage types torch.{Half,Float,BFloat16,Double,Long}
 * Storage, which only ever appear inside a persistent id. torch 2.x (checked with 2.15) still
 * writes this typed-storage form. Anything else - os.system, builtins.eval, even torch.IntStorage -
 * is refused with FG_ERR_DISALLOWED naming module.name, before it could be "called".
 *
 * REDUCE is evaluated only for those callables: OrderedDict() -> empty dict; _rebuild_tensor_v2
 * (storage, offset, size, stride, requires_grad, hooks[, metadata]) -> tensor record;
 * _rebuild_parameter(tensor, requires_grad, hooks) -> that tensor. BINPERSID accepts only
 * ('storage', <storage type>, key, location, numel). BUILD is accepted on a dict (the
 * OrderedDict's _metadata state) and ignored. The result must be a dict of str -> tensor.
 *
 * Bounds: stack and mark depth <= CK_PKL_MAX_STACK, memo index < min(CK_PKL_MAX_MEMO, input
 * length), objects <= CK_PKL_MAX_OBJECTS (each opcode makes at most one, so also <= input
 * length), container items <= CK_PKL_MAX_OBJECTS. An object is ~100 bytes (tensors carry a
 * separate shape record), so the worst case is about 0.5 GiB; a real state dict of N tensors
 * makes about 15 N objects.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

enum vtype { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE,
             V_TENSOR };
enum gid { G_ODICT = 1, G_REBUILD_TENSOR, G_REBUILD_PARAM, G_STORAGE };

typedef struct val {
    uint8_t type;
    uint8_t gid;      /* V_GLOBAL: enum gid */
    uint8_t dtype;    /* V_GLOBAL(G_STORAGE), V_STORAGE, V_TENSOR */
    int64_t i;        /* V_INT, V_BOOL */
    char *s;          /* V_STR (NUL-terminated copy), V_STORAGE: key */
    size_t slen;
    struct val **items; /* V_TUPLE, V_LIST; V_DICT: k0, v0, k1, v1, ... */
    uint64_t n;
    size_t cap;
    struct val *storage; /* V_TENSOR */
    uint64_t numel;      /* V_STORAGE */
    uint64_t offset;     /* V_TENSOR: storage offset (elements) */
    struct tshape *shape; /* V_TENSOR (owned) */
} val;

typedef struct tshape {
    uint32_t n_dims;
    uint64_t size[FG_CKPT_MAX_DIMS], stride[FG_CKPT_MAX_DIMS];
} tshape;

typedef struct um {
    const uint8_t *p;
    size_t n, pos;
    const char *label;
    fg_err *err;
    val **reg;  /* every allocated value */
    size_t n_reg, reg_cap;
    val **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t n_marks, marks_cap;
    val **memo;
    size_t memo_cap, memo_count;
    uint64_t n_items; /* container items, all containers together */
} um;

static int fail(um *u, int code, const char *what)
{
    return fg_err_set(u->err, code, "%s: pickle: %s (at byte %zu)", u->label, what, u->pos);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elsize, size_t limit)
{
    if (need <= *cap)
        return 0;
    if (need > limit)
        return -1;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    if (nc > limit)
        nc = limit;
    void *p = realloc(*arr, nc * elsize);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

static val *newval(um *u, uint8_t type)
{
    if (grow((void **)&u->reg, &u->reg_cap, u->n_reg + 1, sizeof *u->reg, CK_PKL_MAX_OBJECTS)) {
        fail(u, FG_ERR_LIMIT, "too many objects");
        return NULL;
    }
    val *v = calloc(1, sizeof *v);
    if (!v) {
        fail(u, FG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->type = type;
    u->reg[u->n_reg++] = v;
    return v;
}

static int push(um *u, val *v)
{
    if (!v)
        return u->err ? u->err->code : FG_ERR_NOMEM;
    if (grow((void **)&u->stack, &u->stack_cap, u->sp + 1, sizeof *u->stack, CK_PKL_MAX_STACK))
        return fail(u, FG_ERR_LIMIT, "stack deeper than the limit");
    u->stack[u->sp++] = v;
    return FG_OK;
}

static int pop(um *u, val **out)
{
    size_t floor = u->n_marks ? u->marks[u->n_marks - 1] : 0;
    if (u->sp <= floor)
        return fail(u, FG_ERR_CORRUPT, "stack underflow");
    *out = u->stack[--u->sp];
    return FG_OK;
}

static int top(um *u, val **out)
{
    size_t floor = u->n_marks ? u->marks[u->n_marks - 1] : 0;
    if (u->sp <= floor)
        return fail(u, FG_ERR_CORRUPT, "stack underflow");
    *out = u->stack[u->sp - 1];
    return FG_OK;
}

/* Pop to the last mark: items are stack[*first .. sp). */
static int pop_mark(um *u, size_t *first)
{
    if (!u->n_marks)
        return fail(u, FG_ERR_CORRUPT, "no mark on the stack");
    *first = u->marks[--u->n_marks];
    return FG_OK;
}

static int add_items(um *u, val *c, val **items, size_t k)
{
    if (k == 0)
        return FG_OK;
    if (u->n_items + k > CK_PKL_MAX_OBJECTS)
        return fail(u, FG_ERR_LIMIT, "too many container items");
    if (grow((void **)&c->items, &c->cap, c->n + k, sizeof *c->items, CK_PKL_MAX_OBJECTS))
        return fail(u, FG_ERR_NOMEM, "out of memory for container items");
    memcpy(c->items + c->n, items, k * sizeof *items);
    c->n += k;
    u->n_items += k;
    return FG_OK;
}

static int need(um *u, size_t k)
{
    if (u->n - u->pos < k)
        return fail(u, FG_ERR_TRUNCATED, "opcode argument runs past the end");
    return FG_OK;
}

static int make_tuple(um *u, size_t first)
{
    val *t = newval(u, V_TUPLE);
    if (!t)
        return u->err ? u->err->code : FG_ERR_NOMEM;
    int rc = u->sp > first ? add_items(u, t, u->stack + first, u->sp - first) : FG_OK;
    u->sp = first;
    return rc ? rc : push(u, t);
}

static int op_tuple_n(um *u, size_t k)
{
    size_t floor = u->n_marks ? u->marks[u->n_marks - 1] : 0;
    if (u->sp - floor < k)
        return fail(u, FG_ERR_CORRUPT, "stack underflow");
    return make_tuple(u, u->sp - k);
}

static int op_string(um *u, size_t len_bytes)
{
    int rc = need(u, len_bytes);
    if (rc)
        return rc;
    uint64_t len = len_bytes == 1 ? u->p[u->pos] : len_bytes == 4 ? fg_le32(u->p + u->pos)
                                                                  : fg_le64(u->p + u->pos);
    u->pos += len_bytes;
    if ((rc = need(u, len > SIZE_MAX ? SIZE_MAX : (size_t)len)))
        return rc;
    val *v = newval(u, V_STR);
    if (!v)
        return u->err ? u->err->code : FG_ERR_NOMEM;
    v->s = malloc((size_t)len + 1);
    if (!v->s)
        return fail(u, FG_ERR_NOMEM, "out of memory for a string");
    memcpy(v->s, u->p + u->pos, (size_t)len);
    v->s[len] = '\0';
    v->slen = (size_t)len;
    u->pos += (size_t)len;
    return push(u, v);
}

static int op_int(um *u, int64_t x)
{
    val *v = newval(u, V_INT);
    if (v)
        v->i = x;
    return push(u, v);
}

static int op_long1(um *u)
{
    int rc = need(u, 1);
    if (rc)
        return rc;
    size_t k = u->p[u->pos++];
    if (k > 8)
        return fail(u, FG_ERR_LIMIT, "LONG1 wider than 64 bits");
    if ((rc = need(u, k)))
        return rc;
    uint64_t x = 0;
    for (size_t i = 0; i < k; i++)
        x |= (uint64_t)u->p[u->pos + i] << (8 * i);
    if (k > 0 && k < 8 && (u->p[u->pos + k - 1] & 0x80))
        x |= ~0ull << (8 * k); /* sign-extend */
    u->pos += k;
    return op_int(u, (int64_t)x);
}

/* GLOBAL / STACK_GLOBAL: resolve against the allow list or refuse by name. */
static int resolve_global(um *u, const char *mod, const char *name)
{
    static const struct { const char *mod, *name; uint8_t gid, dtype; } allow[] = {
        {"collections", "OrderedDict", G_ODICT, 0},
        {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR, 0},
        {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAM, 0},
        {"torch", "HalfStorage", G_STORAGE, FG_CKPT_F16},
        {"torch", "FloatStorage", G_STORAGE, FG_CKPT_F32},
        {"torch", "BFloat16Storage", G_STORAGE, FG_CKPT_BF16},
        {"torch", "DoubleStorage", G_STORAGE, FG_CKPT_F64},
        {"torch", "LongStorage", G_STORAGE, FG_CKPT_I64},
    };
    for (size_t i = 0; i < sizeof allow / sizeof allow[0]; i++)
        if (strcmp(mod, allow[i].mod) == 0 && strcmp(name, allow[i].name) == 0) {
            val *v = newval(u, V_GLOBAL);
            if (v) {
                v->gid = allow[i].gid;
                v->dtype = allow[i].dtype;
            }
            return push(u, v);
        }
    return fg_err_set(u->err, FG_ERR_DISALLOWED, "%s: pickle reaches for disallowed global "
                      "%.100s.%.100s (at byte %zu)", u->label, mod, name, u->pos);
}

static int op_global(um *u)
{
    const uint8_t *s = u->p + u->pos, *e = u->p + u->n;
    const uint8_t *nl1 = memchr(s, '\n', (size_t)(e - s));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(e - nl1 - 1)) : NULL;
    if (!nl2)
        return fail(u, FG_ERR_TRUNCATED, "GLOBAL without two newline-terminated lines");
    char mod[128], name[128];
    size_t ml = (size_t)(nl1 - s), nml = (size_t)(nl2 - nl1 - 1);
    if (ml >= sizeof mod || nml >= sizeof name)
        return fail(u, FG_ERR_DISALLOWED, "GLOBAL name longer than any allowed global");
    memcpy(mod, s, ml);
    mod[ml] = '\0';
    memcpy(name, nl1 + 1, nml);
    name[nml] = '\0';
    u->pos = (size_t)(nl2 + 1 - u->p);
    return resolve_global(u, mod, name);
}

static int op_stack_global(um *u)
{
    val *name = NULL, *mod = NULL;
    int rc = pop(u, &name);
    if (rc || (rc = pop(u, &mod)))
        return rc;
    if (name->type != V_STR || mod->type != V_STR || strlen(mod->s) != mod->slen ||
        strlen(name->s) != name->slen)
        return fail(u, FG_ERR_CORRUPT, "STACK_GLOBAL needs two strings");
    return resolve_global(u, mod->s, name->s);
}

static int get_dims(um *u, const val *t, uint32_t *n_dims, uint64_t *out)
{
    if (t->type != V_TUPLE)
        return fail(u, FG_ERR_CORRUPT, "tensor size/stride is not a tuple");
    if (t->n > FG_CKPT_MAX_DIMS)
        return fail(u, FG_ERR_LIMIT, "tensor has more dims than the limit");
    for (uint64_t d = 0; d < t->n; d++) {
        if (t->items[d]->type != V_INT || t->items[d]->i < 0)
            return fail(u, FG_ERR_CORRUPT, "tensor size/stride entry is not a non-negative int");
        out[d] = (uint64_t)t->items[d]->i;
    }
    *n_dims = (uint32_t)t->n;
    return FG_OK;
}

static int rebuild_tensor(um *u, const val *args)
{
    if (args->n < 6 || args->n > 7)
        return fail(u, FG_ERR_CORRUPT, "_rebuild_tensor_v2 takes 6 or 7 arguments");
    val *st = args->items[0], *off = args->items[1];
    if (st->type != V_STORAGE || off->type != V_INT || off->i < 0)
        return fail(u, FG_ERR_CORRUPT, "_rebuild_tensor_v2 needs (storage, offset, ...)");
    val *t = newval(u, V_TENSOR);
    if (!t)
        return u->err ? u->err->code : FG_ERR_NOMEM;
    if (!(t->shape = calloc(1, sizeof *t->shape)))
        return fail(u, FG_ERR_NOMEM, "out of memory");
    uint32_t nd_stride;
    int rc = get_dims(u, args->items[2], &t->shape->n_dims, t->shape->size);
    if (rc || (rc = get_dims(u, args->items[3], &nd_stride, t->shape->stride)))
        return rc;
    if (nd_stride != t->shape->n_dims)
        return fail(u, FG_ERR_CORRUPT, "tensor size and stride have different lengths");
    t->storage = st;
    t->dtype = st->dtype;
    t->offset = (uint64_t)off->i;
    return push(u, t);
}

static int op_reduce(um *u)
{
    val *args = NULL, *fn = NULL;
    int rc = pop(u, &args);
    if (rc || (rc = pop(u, &fn)))
        return rc;
    if (fn->type != V_GLOBAL || args->type != V_TUPLE)
        return fail(u, FG_ERR_DISALLOWED, "REDUCE on something other than an allowed global");
    switch (fn->gid) {
    case G_ODICT:
        if (args->n != 0)
            return fail(u, FG_ERR_CORRUPT, "OrderedDict called with arguments");
        return push(u, newval(u, V_DICT));
    case G_REBUILD_TENSOR:
        return rebuild_tensor(u, args);
    case G_REBUILD_PARAM:
        if (args->n < 1 || args->items[0]->type != V_TENSOR)
            return fail(u, FG_ERR_CORRUPT, "_rebuild_parameter needs a tensor");
        return push(u, args->items[0]);
    default:
        return fail(u, FG_ERR_DISALLOWED, "REDUCE calls a storage type");
    }
}

static int op_persid(um *u)
{
    val *pid = NULL;
    int rc = pop(u, &pid);
    if (rc)
        return rc;
    if (pid->type != V_TUPLE || pid->n != 5 || pid->items[0]->type != V_STR ||
        strcmp(pid->items[0]->s, "storage") != 0 || pid->items[1]->type != V_GLOBAL ||
        pid->items[1]->gid != G_STORAGE || pid->items[2]->type != V_STR ||
        pid->items[4]->type != V_INT || pid->items[4]->i < 0)
        return fail(u, FG_ERR_DISALLOWED, "persistent id is not ('storage', type, key, location, "
                    "numel)");
    const val *key = pid->items[2];
    if (key->slen == 0 || key->slen > 64 || strlen(key->s) != key->slen || strchr(key->s, '/'))
        return fail(u, FG_ERR_BAD_NAME, "storage key empty, too long or holding '/' or NUL");
    val *s = newval(u, V_STORAGE);
    if (!s)
        return u->err ? u->err->code : FG_ERR_NOMEM;
    s->s = key->s; /* borrowed: both live in the registry until the end */
    s->dtype = pid->items[1]->dtype;
    s->numel = (uint64_t)pid->items[4]->i;
    return push(u, s);
}

static size_t cur_floor(const um *u) { return u->n_marks ? u->marks[u->n_marks - 1] : 0; }

/* Pop the operands of SETITEM(S)/APPEND(S): with a mark (many) everything above it, else the
 * top `k`; the container sits right below them and above the (remaining) mark floor, as in
 * Python's unpickler where a mark hides everything under it. */
static int container_args(um *u, int many, size_t k, size_t *first)
{
    if (many) {
        int rc = pop_mark(u, first);
        if (rc)
            return rc;
    } else {
        if (u->sp < cur_floor(u) + k)
            return fail(u, FG_ERR_CORRUPT, "stack underflow");
        *first = u->sp - k;
    }
    if (*first <= cur_floor(u))
        return fail(u, FG_ERR_CORRUPT, "SETITEM(S)/APPEND(S) without a container below");
    return FG_OK;
}

static int op_setitems(um *u, int many)
{
    size_t first = 0;
    int rc = container_args(u, many, 2, &first);
    if (rc)
        return rc;
    if ((u->sp - first) & 1)
        return fail(u, FG_ERR_CORRUPT, "SETITEMS with an odd number of keys and values");
    val *d = u->stack[first - 1];
    if (d->type != V_DICT)
        return fail(u, FG_ERR_CORRUPT, "SETITEM(S) on a non-dict");
    rc = add_items(u, d, u->stack + first, u->sp - first);
    u->sp = first;
    return rc;
}

static int op_appends(um *u, int many)
{
    size_t first = 0;
    int rc = container_args(u, many, 1, &first);
    if (rc)
        return rc;
    if (u->stack[first - 1]->type != V_LIST)
        return fail(u, FG_ERR_CORRUPT, "APPEND(S) on a non-list");
    rc = add_items(u, u->stack[first - 1], u->stack + first, u->sp - first);
    u->sp = first;
    return rc;
}

static int op_build(um *u)
{
    val *state = NULL, *obj = NULL;
    int rc = pop(u, &state);
    if (rc || (rc = top(u, &obj)))
        return rc;
    if (obj->type != V_DICT || (state->type != V_DICT && state->type != V_NONE))
        return fail(u, FG_ERR_DISALLOWED, "BUILD on something other than a dict");
    return FG_OK;
}

static int memo_put(um *u, uint64_t idx)
{
    val *v = NULL;
    int rc = top(u, &v);
    if (rc)
        return rc;
    if (idx >= CK_PKL_MAX_MEMO || idx >= u->n)
        return fail(u, FG_ERR_LIMIT, "memo index beyond the limit");
    size_t old = u->memo_cap;
    if (grow((void **)&u->memo, &u->memo_cap, (size_t)idx + 1, sizeof *u->memo, CK_PKL_MAX_MEMO))
        return fail(u, FG_ERR_NOMEM, "out of memory for the memo");
    memset(u->memo + old, 0, (u->memo_cap - old) * sizeof *u->memo);
    if (!u->memo[idx])
        u->memo_count++;
    u->memo[idx] = v;
    return FG_OK;
}

static int memo_get(um *u, uint64_t idx)
{
    if (idx >= u->memo_cap || !u->memo[idx])
        return fail(u, FG_ERR_CORRUPT, "memo lookup of an unset slot");
    return push(u, u->memo[idx]);
}

static int op_arg(um *u, size_t k, uint64_t *out)
{
    int rc = need(u, k);
    if (rc)
        return rc;
    *out = k == 1 ? u->p[u->pos] : k == 2 ? fg_le16(u->p + u->pos) : k == 4 ? fg_le32(u->p + u->pos)
                                                                             : fg_le64(u->p + u->pos);
    u->pos += k;
    return FG_OK;
}

static int op_mark(um *u)
{
    if (grow((void **)&u->marks, &u->marks_cap, u->n_marks + 1, sizeof *u->marks, CK_PKL_MAX_STACK))
        return fail(u, FG_ERR_LIMIT, "marks deeper than the limit");
    u->marks[u->n_marks++] = u->sp;
    return FG_OK;
}

static int op_simple(um *u, uint8_t type, int64_t i)
{
    val *v = newval(u, type);
    if (v)
        v->i = i;
    return push(u, v);
}

static int op_float(um *u)
{
    int rc = need(u, 8);
    if (rc)
        return rc;
    u->pos += 8; /* the value (big-endian double) is never needed */
    return op_simple(u, V_FLOAT, 0);
}

/* One opcode with its argument; returns 1 after STOP. */
static int step(um *u)
{
    uint64_t a;
    size_t m = 0;
    int rc;
    val *v = NULL;
    uint8_t op = u->p[u->pos++];
    switch (op) {
    case 0x80: /* PROTO */
        if ((rc = op_arg(u, 1, &a)))
            return rc;
        return a >= 2 && a <= 5 ? FG_OK : fail(u, FG_ERR_VERSION, "pickle protocol outside 2..5");
    case 0x95: return op_arg(u, 8, &a); /* FRAME: length ignored, opcodes follow inline */
    case '.': return 1;
    case '(': return op_mark(u);
    case '0': return pop(u, &v);
    case '1': return pop_mark(u, &u->sp);
    case '2': return (rc = top(u, &v)) ? rc : push(u, v);
    case 'N': return op_simple(u, V_NONE, 0);
    case 0x88: return op_simple(u, V_BOOL, 1);
    case 0x89: return op_simple(u, V_BOOL, 0);
    case 'J': return (rc = op_arg(u, 4, &a)) ? rc : op_int(u, (int32_t)(uint32_t)a);
    case 'K': return (rc = op_arg(u, 1, &a)) ? rc : op_int(u, (int64_t)a);
    case 'M': return (rc = op_arg(u, 2, &a)) ? rc : op_int(u, (int64_t)a);
    case 0x8a: return op_long1(u);
    case 'G': return op_float(u);
    case 'X': return op_string(u, 4);
    case 0x8c: return op_string(u, 1);
    case 0x8d: return op_string(u, 8);
    case ')': return op_simple(u, V_TUPLE, 0);
    case 't': return (rc = pop_mark(u, &m)) ? rc : make_tuple(u, m);
    case 0x85: return op_tuple_n(u, 1);
    case 0x86: return op_tuple_n(u, 2);
    case 0x87: return op_tuple_n(u, 3);
    case ']': return op_simple(u, V_LIST, 0);
    case 'a': return op_appends(u, 0);
    case 'e': return op_appends(u, 1);
    case '}': return op_simple(u, V_DICT, 0);
    case 's': return op_setitems(u, 0);
    case 'u': return op_setitems(u, 1);
    case 'c': return op_global(u);
    case 0x93: return op_stack_global(u);
    case 'R': return op_reduce(u);
    case 'b': return op_build(u);
    case 'Q': return op_persid(u);
    case 'q': return (rc = op_arg(u, 1, &a)) ? rc : memo_put(u, a);
    case 'r': return (rc = op_arg(u, 4, &a)) ? rc : memo_put(u, a);
    case 0x94: return memo_put(u, u->memo_count);
    case 'h': return (rc = op_arg(u, 1, &a)) ? rc : memo_get(u, a);
    case 'j': return (rc = op_arg(u, 4, &a)) ? rc : memo_get(u, a);
    default:
        u->pos--;
        return fg_err_set(u->err, FG_ERR_DISALLOWED, "%s: pickle opcode 0x%02x at byte %zu is not "
                          "allowed in a state dict", u->label, op, u->pos);
    }
}

static int collect(um *u, const val *d, ck_pkl_result *out)
{
    if (d->type != V_DICT)
        return fail(u, FG_ERR_CORRUPT, "the pickle's result is not a dict");
    out->t = calloc(d->n / 2 ? (size_t)(d->n / 2) : 1, sizeof *out->t);
    if (!out->t)
        return fail(u, FG_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < d->n; i += 2) {
        const val *k = d->items[i], *t = d->items[i + 1];
        if (k->type != V_STR)
            return fail(u, FG_ERR_CORRUPT, "state dict key is not a string");
        if (t->type != V_TENSOR)
            return fg_err_set(u->err, FG_ERR_CORRUPT, "%s: state dict entry %.200s is not a tensor",
                              u->label, k->s);
        ck_pkl_tensor *o = &out->t[out->n++];
        o->name = strndup(k->s, k->slen);
        o->storage_key = strdup(t->storage->s);
        if (!o->name || !o->storage_key)
            return fail(u, FG_ERR_NOMEM, "out of memory");
        o->dtype = t->dtype;
        o->storage_numel = t->storage->numel;
        o->storage_offset = t->offset;
        o->n_dims = t->shape->n_dims;
        memcpy(o->size, t->shape->size, sizeof o->size);
        memcpy(o->stride, t->shape->stride, sizeof o->stride);
    }
    return FG_OK;
}

static void um_free(um *u)
{
    for (size_t i = 0; i < u->n_reg; i++) {
        if (u->reg[i]->type == V_STR)
            free(u->reg[i]->s);
        free(u->reg[i]->items);
        free(u->reg[i]->shape);
        free(u->reg[i]);
    }
    free(u->reg);
    free(u->stack);
    free(u->marks);
    free(u->memo);
}

int ck_pkl_load(const uint8_t *p, size_t n, const char *label, ck_pkl_result *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    fg_err local;
    um u = {.p = p, .n = n, .label = label, .err = err ? err : &local};
    int rc = FG_OK;
    while (rc == FG_OK) {
        if (u.pos >= u.n) {
            rc = fail(&u, FG_ERR_TRUNCATED, "ends without STOP");
            break;
        }
        rc = step(&u);
    }
    if (rc == 1) {
        val *res = NULL;
        rc = pop(&u, &res);
        if (rc == FG_OK && (u.sp != 0 || u.n_marks != 0))
            rc = fail(&u, FG_ERR_CORRUPT, "stack not empty at STOP");
        if (rc == FG_OK)
            rc = collect(&u, res, out);
    }
    um_free(&u);
    if (rc)
        ck_pkl_free(out);
    return rc;
}

void ck_pkl_free(ck_pkl_result *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->n; i++) {
        free(r->t[i].name);
        free(r->t[i].storage_key);
    }
    free(r->t);
    r->t = NULL;
    r->n = 0;
}
