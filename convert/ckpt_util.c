/* ckpt_util.c - the pieces every checkpoint parser shares: bounded reads from a ck_src, the
 * tensor list, shape arithmetic, dtype names and the F32/BF16/F16 -> F16 conversion.
 *
 * Conversion: F32 -> F16 rounds to nearest, ties to even, on the bit pattern (no FPU mode
 * dependence), producing subnormals and signed zeros exactly as IEEE 754 says; BF16 widens to
 * F32 exactly and then rounds once. A finite input whose magnitude rounds past 65504 becomes
 * inf: fg_ckpt_to_f16 reports the first such element (and any NaN/inf input) so the converter
 * can refuse the tensor by name instead of silently storing inf.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_int.h"
#include "quant.h"
#include "fg_bytes.h"

int ck_src_read(const ck_src *s, uint64_t off, void *buf, size_t n, const char *what, fg_err *err)
{
    uint64_t end;
    if (fg_add_u64(off, n, &end) || end > s->size)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %s runs past the end of the file (%llu bytes)",
                          s->label, what, (unsigned long long)s->size);
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return FG_OK;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(s->fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: reading %s", s->label, what);
        if (r == 0)
            return fg_err_set(err, FG_ERR_TRUNCATED, "%s: file shrank while reading %s", s->label,
                              what);
        done += (size_t)r;
    }
    return FG_OK;
}

void ck_list_free(ck_list *l)
{
    if (!l)
        return;
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->t[i].source != l->t[i].name)
            free((char *)l->t[i].source);
        free((char *)l->t[i].name);
    }
    for (uint32_t i = 0; i < l->n_meta; i++)
        free(l->meta[i]);
    free(l->t);
    free(l->meta);
    free(l->meta_slot);
    memset(l, 0, sizeof *l);
}

int ck_shape_bytes(uint32_t n_dims, const uint64_t *dims, size_t elsize, uint64_t *n_elem,
                   uint64_t *bytes)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if (fg_mul_u64(n, dims[d], &n))
            return FG_ERR_OVERFLOW;
    if (fg_mul_u64(n, elsize, bytes))
        return FG_ERR_OVERFLOW;
    *n_elem = n;
    return FG_OK;
}

static int name_ok(const char *name, size_t len)
{
    if (len == 0 || len > FG_CKPT_MAX_NAME)
        return 0;
    return memchr(name, '\0', len) == NULL;
}

int ck_list_add(ck_list *l, const char *name, size_t name_len, uint8_t dtype, uint32_t n_dims,
                const uint64_t *dims, uint64_t offset, const char *label, fg_err *err)
{
    if (!name_ok(name, name_len))
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor name empty, longer than %u bytes or "
                          "holding a NUL byte", label, FG_CKPT_MAX_NAME);
    if (n_dims > FG_CKPT_MAX_DIMS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor %.*s has %u dims (limit %u)", label,
                          (int)name_len, name, n_dims, FG_CKPT_MAX_DIMS);
    if (l->n >= FG_CKPT_MAX_TENSORS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u tensors", label, FG_CKPT_MAX_TENSORS);
    fg_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++)
        t.dims[d] = dims[d];
    if (ck_shape_bytes(n_dims, dims, fg_ckpt_dtype_size(dtype), &t.n_elements, &t.length))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor %.*s: element count x size overflows",
                          label, (int)name_len, name);
    t.offset = offset;
    t.file = l->file;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 64;
        fg_ckpt_tensor *nt = realloc(l->t, (size_t)cap * sizeof *nt);
        if (!nt)
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the tensor table", label);
        l->t = nt;
        l->cap = cap;
    }
    char *copy = strndup(name, name_len);
    if (!copy)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", label);
    t.name = t.source = copy;
    l->t[l->n++] = t;
    return FG_OK;
}

static uint32_t key_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The slot holding key, or the empty slot where it would go. */
static uint32_t *meta_slot(const ck_list *l, const char *key, uint32_t h)
{
    uint32_t mask = l->n_slots - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t *s = &l->meta_slot[i];
        if (*s == 0 || strcmp(l->meta[2 * (*s - 1)], key) == 0)
            return s;
    }
}

/* Keep the index at most half full: rebuild it at twice the size when one more pair would
 * pass that. */
static int meta_index_grow(ck_list *l)
{
    uint32_t pairs = l->n_meta / 2;
    if (2 * (pairs + 1) <= l->n_slots)
        return FG_OK;
    uint32_t n = l->n_slots ? 2 * l->n_slots : 64;
    uint32_t *slot = calloc(n, sizeof *slot);
    if (!slot)
        return FG_ERR_NOMEM;
    free(l->meta_slot);
    l->meta_slot = slot;
    l->n_slots = n;
    for (uint32_t i = 0; i < pairs; i++)
        *meta_slot(l, l->meta[2 * i], key_hash(l->meta[2 * i])) = i + 1;
    return FG_OK;
}

int ck_list_add_meta(ck_list *l, const char *key, const char *value, fg_err *err)
{
    uint32_t h = key_hash(key);
    if (l->n_slots && *meta_slot(l, key, h))
        return FG_OK; /* first wins (shards repeat their metadata) */
    if (l->n_meta >= 2 * CK_MAX_META)
        return fg_err_set(err, FG_ERR_LIMIT, "more than %u __metadata__ entries", CK_MAX_META);
    if (meta_index_grow(l))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory for metadata");
    if (l->n_meta + 2 > l->meta_cap) {
        uint32_t cap = l->meta_cap ? l->meta_cap * 2 : 16;
        char **nm = realloc(l->meta, (size_t)cap * sizeof *nm);
        if (!nm)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory for metadata");
        l->meta = nm;
        l->meta_cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory for metadata");
    }
    l->meta[l->n_meta++] = k;
    l->meta[l->n_meta++] = v;
    *meta_slot(l, k, h) = l->n_meta / 2;
    return FG_OK;
}

static int cmp_name_ptr(const void *a, const void *b)
{
    const fg_ckpt_tensor *x = *(const fg_ckpt_tensor *const *)a;
    const fg_ckpt_tensor *y = *(const fg_ckpt_tensor *const *)b;
    return strcmp(x->name, y->name);
}

int ck_list_check_unique(const ck_list *l, const char *label, fg_err *err)
{
    if (l->n < 2)
        return FG_OK;
    const fg_ckpt_tensor **v = malloc((size_t)l->n * sizeof *v);
    if (!v)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", label);
    for (uint32_t i = 0; i < l->n; i++)
        v[i] = &l->t[i];
    qsort(v, l->n, sizeof *v, cmp_name_ptr);
    int rc = FG_OK;
    for (uint32_t i = 1; i < l->n && rc == FG_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s appears twice", label, v[i]->name);
    free(v);
    return rc;
}

size_t fg_ckpt_dtype_size(uint8_t dtype)
{
    switch (dtype) {
    case FG_CKPT_F32: return 4;
    case FG_CKPT_F16: return 2;
    case FG_CKPT_BF16: return 2;
    case FG_CKPT_F64: return 8;
    case FG_CKPT_I64: return 8;
    case FG_CKPT_U8: return 1;
    case FG_CKPT_F8_E4M3: return 1;
    default: return 0;
    }
}

int ck_dtype_block(uint8_t dtype, uint32_t *elems, uint32_t *bytes)
{
    switch (dtype) {
    case FG_CKPT_Q8_0: *elems = 32, *bytes = 34; break;
    case FG_CKPT_Q4_0: *elems = 32, *bytes = 18; break;
    case FG_CKPT_Q4_K: *elems = 256, *bytes = 144; break;
    case FG_CKPT_Q6_K: *elems = 256, *bytes = 210; break;
    case FG_CKPT_Q4_1: *elems = 32, *bytes = 20; break;
    case FG_CKPT_Q5_0: *elems = 32, *bytes = 22; break;
    case FG_CKPT_Q5_1: *elems = 32, *bytes = 24; break;
    case FG_CKPT_Q2_K: *elems = 256, *bytes = 84; break;
    case FG_CKPT_Q3_K: *elems = 256, *bytes = 110; break;
    case FG_CKPT_Q5_K: *elems = 256, *bytes = 176; break;
    case FG_CKPT_IQ4_NL: *elems = 32, *bytes = 18; break;
    case FG_CKPT_IQ4_XS: *elems = 256, *bytes = 136; break;
    case FG_CKPT_MXFP4: *elems = 32, *bytes = 17; break;
    default:
        *bytes = (uint32_t)fg_ckpt_dtype_size(dtype);
        *elems = *bytes ? 1 : 0;
    }
    return *elems != 0;
}

int ck_dtype_is_block(uint8_t dtype)
{
    return dtype >= FG_CKPT_Q8_0 && dtype <= FG_CKPT_MXFP4;
}

const char *fg_ckpt_dtype_name(uint8_t dtype)
{
    switch (dtype) {
    case FG_CKPT_F32: return "F32";
    case FG_CKPT_F16: return "F16";
    case FG_CKPT_BF16: return "BF16";
    case FG_CKPT_F64: return "F64";
    case FG_CKPT_I64: return "I64";
    case FG_CKPT_U8: return "U8";
    case FG_CKPT_Q8_0: return "Q8_0";
    case FG_CKPT_Q4_0: return "Q4_0";
    case FG_CKPT_Q4_K: return "Q4_K";
    case FG_CKPT_Q6_K: return "Q6_K";
    case FG_CKPT_Q4_1: return "Q4_1";
    case FG_CKPT_Q5_0: return "Q5_0";
    case FG_CKPT_Q5_1: return "Q5_1";
    case FG_CKPT_Q2_K: return "Q2_K";
    case FG_CKPT_Q3_K: return "Q3_K";
    case FG_CKPT_Q5_K: return "Q5_K";
    case FG_CKPT_IQ4_NL: return "IQ4_NL";
    case FG_CKPT_IQ4_XS: return "IQ4_XS";
    case FG_CKPT_MXFP4: return "MXFP4";
    case FG_CKPT_F8_E4M3: return "F8_E4M3";
    default: return "?";
    }
}

/* ---- half precision (quant/'s conversions: one implementation in the house) ---- */

float fg_ckpt_bf16_to_f32(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

int fg_ckpt_to_f16(uint8_t dtype, const void *src, size_t n, uint16_t *dst, size_t *first_bad)
{
    const uint8_t *p = src;
    size_t bad = n;
    if (dtype != FG_CKPT_F32 && dtype != FG_CKPT_BF16 && dtype != FG_CKPT_F16)
        return FG_ERR_UNSUPPORTED;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (dtype == FG_CKPT_F32) {
            uint32_t x = fg_le32(p + 4 * i);
            float f;
            memcpy(&f, &x, 4);
            h = fg_f32_to_f16_1(f);
        } else if (dtype == FG_CKPT_BF16) {
            h = fg_f32_to_f16_1(fg_ckpt_bf16_to_f32(fg_le16(p + 2 * i)));
        } else {
            h = fg_le16(p + 2 * i);
        }
        if ((h & 0x7c00u) == 0x7c00u && bad == n)
            bad = i;
        dst[i] = h;
    }
    if (first_bad)
        *first_bad = bad;
    return bad == n ? FG_OK : FG_ERR_NONFINITE;
}
