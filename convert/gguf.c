/* gguf.c - the validating GGUF parser (see gguf.h; SPEC "Checkpoint inputs: GGUF").
 *
 * Why our own and not ggml's gguf.cpp: it would bring C++ and ggml's allocator into convert/,
 * its reader has had several out-of-bounds CVEs (GHSA-8947-pfff-2f3c and others: counts and
 * string lengths trusted before being checked against the file), and the format is small.
 * This one reads through a ck_src (a file by pread, or memory for the fuzzer) with a buffered
 * cursor; nothing is trusted before it is checked:
 *   1. every read is checked against the source's size first (truncation names the field);
 *   2. every count is bounded twice: by a limit of gguf.h and by the bytes left in the file
 *      (each element takes at least its encoded size), so no allocation is larger than the
 *      file could describe; all size arithmetic goes through fg_add_u64 / fg_mul_u64;
 *   3. tensors lie in the data section (which starts at the header's end rounded up to the
 *      alignment), their offsets on the alignment, their row length a whole number of blocks,
 *      and no two overlap; names and keys are unique.
 * Array values are walked (string arrays element by element) to find their end but not
 * kept: gguf.h's ck_gguf_kv records where they are.
 */
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "gguf.h"
#include "quant.h"

typedef struct cur {
    const ck_src *s;
    uint64_t pos;      /* the next byte's offset in the source */
    uint8_t *buf;      /* a window of the source: [buf_off, buf_off + buf_len) */
    uint64_t buf_off;
    size_t buf_len;
} cur;

enum { CUR_BUF = 1 << 16 };

static uint64_t left(const cur *c) { return c->s->size - c->pos; }

/* n bytes at the cursor into dst (NULL: skipped), advancing it. */
static int get(cur *c, void *dst, uint64_t n, const char *what, fg_err *err)
{
    if (n > left(c))
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %s at byte %llu runs past the end of the "
                          "file (%llu bytes)", c->s->label, what, (unsigned long long)c->pos,
                          (unsigned long long)c->s->size);
    uint8_t *d = dst;
    while (n && d) {
        if (c->pos < c->buf_off || c->pos >= c->buf_off + c->buf_len) { /* refill */
            uint64_t m = left(c) < CUR_BUF ? left(c) : CUR_BUF;
            int rc = ck_src_read(c->s, c->pos, c->buf, (size_t)m, what, err);
            if (rc)
                return rc;
            c->buf_off = c->pos, c->buf_len = (size_t)m;
        }
        size_t at = (size_t)(c->pos - c->buf_off), k = c->buf_len - at;
        k = k < n ? k : (size_t)n;
        memcpy(d, c->buf + at, k);
        d += k, c->pos += k, n -= k;
    }
    c->pos += d ? 0 : n;
    return FG_OK;
}

static int get_u32(cur *c, uint32_t *v, const char *what, fg_err *err)
{
    uint8_t b[4];
    int rc = get(c, b, 4, what, err);
    *v = rc ? 0 : fg_le32(b);
    return rc;
}

static int get_u64(cur *c, uint64_t *v, const char *what, fg_err *err)
{
    uint8_t b[8];
    int rc = get(c, b, 8, what, err);
    *v = rc ? 0 : fg_le64(b);
    return rc;
}

/* A length-prefixed string of at most max bytes, copied (NUL-terminated) when out != NULL. */
static int get_str(cur *c, uint64_t max, char **out, uint64_t *len, const char *what, fg_err *err)
{
    uint64_t n;
    int rc = get_u64(c, &n, what, err);
    if (rc)
        return rc;
    if (n > max || n > left(c))
        return fg_err_set(err, n > left(c) ? FG_ERR_TRUNCATED : FG_ERR_LIMIT, "%s: %s at byte "
                          "%llu is %llu bytes long (%s %llu)", c->s->label, what,
                          (unsigned long long)(c->pos - 8), (unsigned long long)n,
                          n > left(c) ? "past the end of the file: bytes left" : "limit",
                          (unsigned long long)(n > left(c) ? left(c) : max));
    if (len)
        *len = n;
    if (!out)
        return get(c, NULL, n, what, err);
    if (!(*out = malloc((size_t)n + 1)))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for %s", c->s->label, what);
    (*out)[n] = 0;
    return get(c, *out, n, what, err);
}

static const uint8_t scalar_size[CK_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* A scalar of type t into kv->v. */
static int get_scalar(cur *c, uint32_t t, ck_gguf_kv *kv, fg_err *err)
{
    uint8_t b[8] = {0};
    int rc = get(c, b, scalar_size[t], kv->key, err);
    if (rc)
        return rc;
    uint64_t u = fg_le64(b);
    switch (t) {
    case CK_GGUF_I8: kv->v.i = (int8_t)b[0]; break;
    case CK_GGUF_I16: kv->v.i = (int16_t)fg_le16(b); break;
    case CK_GGUF_I32: kv->v.i = (int32_t)fg_le32(b); break;
    case CK_GGUF_I64: kv->v.i = (int64_t)u; break;
    case CK_GGUF_F32: { float f; uint32_t x = fg_le32(b); memcpy(&f, &x, 4); kv->v.f = f; break; }
    case CK_GGUF_F64: memcpy(&kv->v.f, &u, 8); break;
    case CK_GGUF_BOOL:
        if (b[0] > 1)
            return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: key %s: bool value %u (0 or 1)",
                              c->s->label, kv->key, b[0]);
        kv->v.u = b[0];
        break;
    default: kv->v.u = u; break; /* unsigned: the unused high bytes are zero */
    }
    return FG_OK;
}

/* An array: its element type and count, its elements walked to find its end. */
static int get_array(cur *c, ck_gguf_kv *kv, fg_err *err)
{
    int rc = get_u32(c, &kv->arr_type, kv->key, err);
    if (rc == FG_OK)
        rc = get_u64(c, &kv->arr_n, kv->key, err);
    if (rc)
        return rc;
    uint32_t t = kv->arr_type;
    if (t == CK_GGUF_ARRAY || t >= CK_GGUF_NTYPES)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: key %s: array of %s%u (fg reads arrays of "
                          "scalars and strings, not nested arrays)", c->s->label, kv->key,
                          t == CK_GGUF_ARRAY ? "arrays, type " : "unknown type ", t);
    uint64_t min = t == CK_GGUF_STRING ? 8 : scalar_size[t];
    if (kv->arr_n > CK_GGUF_MAX_ARR || kv->arr_n > left(c) / min)
        return fg_err_set(err, kv->arr_n > CK_GGUF_MAX_ARR ? FG_ERR_LIMIT : FG_ERR_TRUNCATED,
                          "%s: key %s: array of %llu elements (%s)", c->s->label, kv->key,
                          (unsigned long long)kv->arr_n, kv->arr_n > CK_GGUF_MAX_ARR ?
                          "limit 67108864" : "more than the bytes left in the file");
    kv->arr_off = c->pos;
    if (t != CK_GGUF_STRING)
        return get(c, NULL, kv->arr_n * min, kv->key, err);
    for (uint64_t i = 0; i < kv->arr_n && rc == FG_OK; i++)
        rc = get_str(c, CK_GGUF_MAX_STR, NULL, NULL, kv->key, err);
    return rc;
}

static int get_kv(cur *c, ck_gguf_kv *kv, fg_err *err)
{
    uint64_t n;
    int rc = get_str(c, CK_GGUF_MAX_KEY, &kv->key, &n, "a metadata key", err);
    if (rc)
        return rc;
    if (n == 0 || strlen(kv->key) != n)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: metadata key at byte %llu is %s",
                          c->s->label, (unsigned long long)(c->pos - n), n ? "holds a NUL byte"
                                                                            : "empty");
    if ((rc = get_u32(c, &kv->type, kv->key, err)))
        return rc;
    if (kv->type >= CK_GGUF_NTYPES)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: key %s: unknown value type %u",
                          c->s->label, kv->key, kv->type);
    if (kv->type == CK_GGUF_STRING)
        return get_str(c, CK_GGUF_MAX_STR, &kv->str, &kv->str_len, kv->key, err);
    return kv->type == CK_GGUF_ARRAY ? get_array(c, kv, err) : get_scalar(c, kv->type, kv, err);
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const ck_gguf_kv *)a)->key, ((const ck_gguf_kv *)b)->key);
}

/* The key/values, sorted by key (ck_gguf_get bisects), no key twice, general.alignment valid. */
static int get_kvs(cur *c, ck_gguf *g, uint64_t n, fg_err *err)
{
    if (n > CK_GGUF_MAX_KV || n > left(c) / 13) /* a key/value takes at least 8 + 1 + 4 bytes */
        return fg_err_set(err, n > CK_GGUF_MAX_KV ? FG_ERR_LIMIT : FG_ERR_TRUNCATED, "%s: "
                          "header: %llu metadata key/values (%s)", c->s->label,
                          (unsigned long long)n, n > CK_GGUF_MAX_KV ? "limit 65536"
                                                  : "more than the file could hold");
    if (n && !(g->kv = calloc((size_t)n, sizeof *g->kv)))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the metadata", c->s->label);
    int rc = FG_OK;
    for (; g->n_kv < n && rc == FG_OK; g->n_kv++)
        rc = get_kv(c, &g->kv[g->n_kv], err);
    if (rc)
        return rc;
    if (g->n_kv) /* (qsort of NULL is undefined, even of nothing) */
        qsort(g->kv, g->n_kv, sizeof *g->kv, cmp_kv);
    for (uint32_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kv[i - 1].key, g->kv[i].key) == 0)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: metadata key %s appears twice",
                              c->s->label, g->kv[i].key);
    g->alignment = 32;
    const ck_gguf_kv *a = ck_gguf_get(g, "general.alignment");
    if (a && (a->type != CK_GGUF_U32 || a->v.u == 0 || (a->v.u & (a->v.u - 1)) ||
              a->v.u > CK_GGUF_MAX_ALIGN))
        return fg_err_set(err, FG_ERR_BAD_ALIGN, "%s: general.alignment must be a u32 power of "
                          "two up to %u", c->s->label, CK_GGUF_MAX_ALIGN);
    g->alignment = a ? (uint32_t)a->v.u : 32;
    return FG_OK;
}

static const struct { const char *name; uint32_t elems, bytes; } ggml_types[] = {
    [0] = {"F32", 1, 4}, [1] = {"F16", 1, 2}, [2] = {"Q4_0", 32, 18}, [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22}, [7] = {"Q5_1", 32, 24}, [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 40}, [10] = {"Q2_K", 256, 84}, [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144}, [13] = {"Q5_K", 256, 176}, [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292}, [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82}, [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1}, [25] = {"I16", 1, 2}, [26] = {"I32", 1, 4}, [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8}, [29] = {"IQ1_M", 256, 56}, [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 256, 54}, [35] = {"TQ2_0", 256, 66}, [39] = {"MXFP4", 32, 17},
};

int ck_ggml_block(uint32_t type, uint32_t *elems, uint32_t *bytes)
{
    int ok = type < sizeof ggml_types / sizeof ggml_types[0] && ggml_types[type].elems;
    *elems = ok ? ggml_types[type].elems : 0;
    *bytes = ok ? ggml_types[type].bytes : 0;
    return ok;
}

const char *ck_ggml_type_name(uint32_t type)
{
    uint32_t e, b;
    return ck_ggml_block(type, &e, &b) ? ggml_types[type].name : "?";
}

/* A tensor info's shape and type: the stored bytes, overflow-checked. */
static int ti_shape(const cur *c, ck_gguf_ti *t, fg_err *err)
{
    const char *l = c->s->label;
    uint32_t be, bb;
    if (!ck_ggml_block(t->type, &be, &bb))
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s: unknown ggml type %u", l, t->name,
                          t->type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX || fg_mul_u64(n, t->ne[d], &n) || n > INT64_MAX)
            return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor %s: dimension %u is %llu (zero, "
                              "or the element count overflows)", l, t->name, d,
                              (unsigned long long)t->ne[d]);
    if (t->ne[0] % be)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s: a row of %llu elements is "
                          "not a whole number of %s blocks of %u", l, t->name,
                          (unsigned long long)t->ne[0], ggml_types[t->type].name, be);
    if (fg_mul_u64(n / be, bb, &t->bytes))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor %s: its size overflows", l, t->name);
    return FG_OK;
}

static int get_ti(cur *c, ck_gguf_ti *t, uint32_t alignment, fg_err *err)
{
    uint64_t n;
    int rc = get_str(c, FG_CKPT_MAX_NAME, &t->name, &n, "a tensor name", err);
    if (rc)
        return rc;
    if (n == 0 || strlen(t->name) != n)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor name at byte %llu is %s",
                          c->s->label, (unsigned long long)(c->pos - n),
                          n ? "holds a NUL byte" : "empty");
    if ((rc = get_u32(c, &t->n_dims, t->name, err)))
        return rc;
    if (t->n_dims == 0 || t->n_dims > CK_GGUF_MAX_DIMS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor %s: %u dimensions (1 to %u)",
                          c->s->label, t->name, t->n_dims, CK_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < t->n_dims && rc == FG_OK; d++)
        rc = get_u64(c, &t->ne[d], t->name, err);
    if (rc == FG_OK)
        rc = get_u32(c, &t->type, t->name, err);
    if (rc == FG_OK)
        rc = get_u64(c, &t->offset, t->name, err);
    if (rc == FG_OK && t->offset % alignment)
        rc = fg_err_set(err, FG_ERR_BAD_ALIGN, "%s: tensor %s: offset %llu is not a multiple of "
                        "the alignment %u", c->s->label, t->name, (unsigned long long)t->offset,
                        alignment);
    return rc ? rc : ti_shape(c, t, err);
}

static int cmp_ti_name(const void *a, const void *b)
{
    return strcmp((*(const ck_gguf_ti *const *)a)->name, (*(const ck_gguf_ti *const *)b)->name);
}

static int cmp_ti_off(const void *a, const void *b)
{
    uint64_t x = (*(const ck_gguf_ti *const *)a)->offset;
    uint64_t y = (*(const ck_gguf_ti *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Names unique; each tensor inside the data section; no two overlapping. */
static int check_tis(const ck_src *s, const ck_gguf *g, fg_err *err)
{
    const ck_gguf_ti **v = malloc((g->n_ti ? g->n_ti : 1) * sizeof *v);
    if (!v)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->label);
    for (uint32_t i = 0; i < g->n_ti; i++)
        v[i] = &g->ti[i];
    qsort(v, g->n_ti, sizeof *v, cmp_ti_name);
    int rc = FG_OK;
    for (uint32_t i = 1; i < g->n_ti && rc == FG_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s appears twice", s->label,
                            v[i]->name);
    qsort(v, g->n_ti, sizeof *v, cmp_ti_off);
    uint64_t room = s->size - g->data_off, end = 0;
    for (uint32_t i = 0; i < g->n_ti && rc == FG_OK; i++) {
        const ck_gguf_ti *t = v[i];
        if (t->offset > room || t->bytes > room - t->offset)
            rc = fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: tensor %s: %llu bytes at offset %llu "
                            "of the data section run past the end of the file", s->label,
                            t->name, (unsigned long long)t->bytes, (unsigned long long)t->offset);
        else if (t->offset < end)
            rc = fg_err_set(err, FG_ERR_OVERLAP, "%s: tensor %s overlaps %s", s->label, t->name,
                            v[i - 1]->name);
        end = t->offset + t->bytes;
    }
    free(v);
    return rc;
}

static int get_tis(cur *c, ck_gguf *g, uint64_t n, fg_err *err)
{
    if (n > FG_CKPT_MAX_TENSORS || n > left(c) / 33) /* name (8 + 1), n_dims, ne[0], type, offset */
        return fg_err_set(err, n > FG_CKPT_MAX_TENSORS ? FG_ERR_LIMIT : FG_ERR_TRUNCATED, "%s: "
                          "header: %llu tensors (%s)", c->s->label, (unsigned long long)n,
                          n > FG_CKPT_MAX_TENSORS ? "limit 1048576"
                                                  : "more than the file could hold");
    if (n && !(g->ti = calloc((size_t)n, sizeof *g->ti)))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the tensor infos",
                          c->s->label);
    int rc = FG_OK;
    for (; g->n_ti < n && rc == FG_OK; g->n_ti++)
        rc = get_ti(c, &g->ti[g->n_ti], g->alignment, err);
    if (rc)
        return rc;
    if (fg_align_up_u64(c->pos, g->alignment, &g->data_off) || (n && g->data_off > c->s->size))
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: the data section (at byte %llu, the header's "
                          "end aligned to %u) starts past the end of the file", c->s->label,
                          (unsigned long long)c->pos, g->alignment);
    if (g->data_off > c->s->size)
        g->data_off = c->s->size; /* no tensors: no data section */
    return check_tis(c->s, g, err);
}

static int get_header(cur *c, ck_gguf *g, uint64_t *n_ti, uint64_t *n_kv, fg_err *err)
{
    uint8_t magic[4];
    int rc = get(c, magic, 4, "the GGUF magic", err);
    if (rc == FG_OK && memcmp(magic, "GGUF", 4) != 0)
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: not a GGUF file (no GGUF magic)",
                          c->s->label);
    if (rc == FG_OK)
        rc = get_u32(c, &g->version, "the GGUF version", err);
    if (rc == FG_OK && (g->version < 2 || g->version > 3))
        return fg_err_set(err, g->version >= 0x01000000 ? FG_ERR_BAD_ENDIAN : FG_ERR_VERSION,
                          "%s: GGUF version %u%s (fg reads versions 2 and 3)", c->s->label,
                          g->version, g->version >= 0x01000000 ? ", a big-endian file?" : "");
    if (rc == FG_OK)
        rc = get_u64(c, n_ti, "the GGUF tensor count", err);
    if (rc == FG_OK)
        rc = get_u64(c, n_kv, "the GGUF metadata count", err);
    return rc;
}

int ck_gguf_parse(const ck_src *src, ck_gguf *g, fg_err *err)
{
    memset(g, 0, sizeof *g);
    cur c = {src, 0, malloc(CUR_BUF), 0, 0};
    if (!c.buf)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", src->label);
    uint64_t n_ti = 0, n_kv = 0;
    int rc = get_header(&c, g, &n_ti, &n_kv, err);
    if (rc == FG_OK)
        rc = get_kvs(&c, g, n_kv, err);
    if (rc == FG_OK)
        rc = get_tis(&c, g, n_ti, err);
    free(c.buf);
    return rc;
}

void ck_gguf_free(ck_gguf *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
    }
    for (uint32_t i = 0; i < g->n_ti; i++)
        free(g->ti[i].name);
    free(g->kv);
    free(g->ti);
    memset(g, 0, sizeof *g);
}

const ck_gguf_kv *ck_gguf_get(const ck_gguf *g, const char *key)
{
    uint32_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[mid].key, key);
        if (c == 0)
            return &g->kv[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int ck_gguf_uint(const ck_gguf *g, const char *key, uint64_t *out)
{
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    if (!kv)
        return FG_ERR_NOT_FOUND;
    switch (kv->type) {
    case CK_GGUF_U8: case CK_GGUF_U16: case CK_GGUF_U32: case CK_GGUF_U64: case CK_GGUF_BOOL:
        *out = kv->v.u;
        return FG_OK;
    case CK_GGUF_I8: case CK_GGUF_I16: case CK_GGUF_I32: case CK_GGUF_I64:
        *out = (uint64_t)kv->v.i;
        return kv->v.i < 0 ? FG_ERR_BAD_ENUM : FG_OK;
    default:
        return FG_ERR_BAD_ENUM;
    }
}

int ck_gguf_float(const ck_gguf *g, const char *key, double *out)
{
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    if (!kv)
        return FG_ERR_NOT_FOUND;
    if (kv->type != CK_GGUF_F32 && kv->type != CK_GGUF_F64)
        return FG_ERR_BAD_ENUM;
    *out = kv->v.f;
    return FG_OK;
}

const char *ck_gguf_str(const ck_gguf *g, const char *key)
{
    const ck_gguf_kv *kv = ck_gguf_get(g, key);
    return kv && kv->type == CK_GGUF_STRING ? kv->str : NULL;
}
