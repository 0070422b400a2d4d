/* safetensors.c - the safetensors header: u64 length, JSON table, checked extents.
 *
 * Layout (https://github.com/huggingface/safetensors): 8 bytes little-endian N, then N bytes of
 * UTF-8 JSON, then the data section (the rest of the file). The JSON is an object mapping each
 * tensor name to {"dtype": str, "shape": [u64...], "data_offsets": [begin, end]} with offsets
 * relative to the data section, plus an optional "__metadata__" object of string -> string.
 *
 * We accept what the reference reader (the Rust crate's SafeTensors::read_metadata and
 * Metadata::validate) accepts and refuse what it refuses, except where the format's own text
 * is stricter than the crate (marked "spec"). Checks, in order, before anything is reported:
 *   1. N <= 100,000,000 (the crate's MAX_HEADER_SIZE) and 8 + N <= file size;
 *   2. the header's first byte is '{' (spec: "MUST begin with {"; the crate lets JSON
 *      whitespace through); trailing JSON whitespace (the writers' 8-byte padding) is fine;
 *   3. the header parses as one JSON object, valid UTF-8, no duplicate keys at any level (spec:
 *      "Duplicate keys are disallowed"; the crate's map keeps the last);
 *   4. "__metadata__", when present, is null or an object of string values;
 *   5. per tensor: an object (other fields ignored, as the crate does) with a known dtype, shape
 *      a list of <= FG_CKPT_MAX_DIMS non-negative integers, data_offsets exactly two non-negative
 *      integers with begin <= end <= data section size, and end - begin == product(shape) x
 *      dtype size (overflow-checked);
 *   6. sorted by (begin, end), the tensors tile the data section exactly: the first begins at 0,
 *      each begins where the previous ended (a gap or an overlap is refused, empty tensors
 *      included), and the last ends at the end of the file: no byte is left that no tensor
 *      accounts for (the crate's "file not fully covered"; the README: "no holes", which
 *      prevents polyglot files). A file without tensors has an empty data section.
 * Tensors are listed in data-offset order.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fg_json.h"
#include "ckpt_int.h"
#include "fg_bytes.h"

static int st_dtype(const char *s, uint8_t *out)
{
    static const struct { const char *name; uint8_t dt; } tab[] = {
        {"F32", FG_CKPT_F32}, {"F16", FG_CKPT_F16}, {"BF16", FG_CKPT_BF16},
        {"F64", FG_CKPT_F64}, {"I64", FG_CKPT_I64}, {"U8", FG_CKPT_U8},
        {"F8_E4M3", FG_CKPT_F8_E4M3},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i].name) == 0) {
            *out = tab[i].dt;
            return 0;
        }
    return -1;
}

static int get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int st_metadata(const char *label, json_t *meta, ck_list *out, fg_err *err)
{
    if (json_is_null(meta))
        return FG_OK; /* the crate reads it as "no metadata" */
    if (!json_is_object(meta))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: __metadata__ is not an object", label);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: __metadata__ value for '%s' is not a string",
                              label, k);
        int rc = ck_list_add_meta(out, k, json_string_value(v), err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* One tensor entry; *begin and *end return its data-section range. */
static int st_tensor(const char *label, const char *name, json_t *v, uint64_t data_len,
                     uint64_t data_start, ck_list *out, fg_err *err)
{
    if (!json_is_object(v))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s: entry is not an object", label, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s: needs string dtype, list shape and "
                          "list data_offsets", label, name);
    uint8_t dt;
    if (st_dtype(json_string_value(jd), &dt))
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s: dtype %s is not one fg reads "
                          "(F32, F16, BF16, F64, I64, U8, F8_E4M3)", label, name, json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > FG_CKPT_MAX_DIMS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor %s: %zu dims (limit %u)", label, name, nd,
                          FG_CKPT_MAX_DIMS);
    uint64_t dims[FG_CKPT_MAX_DIMS] = {0}, b, e, n_elem, bytes;
    for (size_t d = 0; d < nd; d++)
        if (get_u64(json_array_get(js, d), &dims[d]))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s: shape[%zu] is not a "
                              "non-negative integer", label, name, d);
    if (json_array_size(jo) != 2 || get_u64(json_array_get(jo, 0), &b) ||
        get_u64(json_array_get(jo, 1), &e) || b > e)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s: data_offsets must be [begin, end] "
                          "with 0 <= begin <= end", label, name);
    if (e > data_len)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: tensor %s: data_offsets end %llu is past "
                          "the data section (%llu bytes)", label, name, (unsigned long long)e,
                          (unsigned long long)data_len);
    if (ck_shape_bytes((uint32_t)nd, dims, fg_ckpt_dtype_size(dt), &n_elem, &bytes))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor %s: element count x size overflows",
                          label, name);
    if (bytes != e - b)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s: shape x dtype is %llu bytes "
                          "but data_offsets span %llu", label, name, (unsigned long long)bytes,
                          (unsigned long long)(e - b));
    return ck_list_add(out, name, strlen(name), dt, (uint32_t)nd, dims, data_start + b, label, err);
}

static int cmp_off(const void *a, const void *b)
{
    const fg_ckpt_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->length < y->length ? -1 : x->length > y->length;
}

/* Sort the tensors added since `first` by (begin, end) and require them to tile the data
 * section [data_start, data_start + data_len) exactly. */
static int st_check_tiling(const char *label, ck_list *out, uint32_t first, uint64_t data_start,
                           uint64_t data_len, fg_err *err)
{
    uint32_t n = out->n - first;
    fg_ckpt_tensor *t = n ? out->t + first : NULL; /* out->t is NULL while the list is empty */
    if (n)
        qsort(t, n, sizeof *t, cmp_off);
    uint64_t at = 0; /* data-section offset where the next tensor must begin */
    for (uint32_t i = 0; i < n; i++) {
        uint64_t b = t[i].offset - data_start;
        if (b < at)
            return fg_err_set(err, FG_ERR_OVERLAP, "%s: tensors %s and %s overlap in the data "
                              "section (%s begins at data offset %llu, before %llu)", label,
                              t[i - 1].name, t[i].name, t[i].name, (unsigned long long)b,
                              (unsigned long long)at);
        if (b > at)
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s begins at data offset %llu: "
                              "bytes %llu..%llu belong to no tensor (safetensors allows no gaps)",
                              label, t[i].name, (unsigned long long)b, (unsigned long long)at,
                              (unsigned long long)b);
        at = b + t[i].length;
    }
    if (at != data_len)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: %llu bytes after the last tensor at data "
                          "offset %llu belong to no tensor (safetensors requires the tensors to "
                          "cover the data section)", label, (unsigned long long)(data_len - at),
                          (unsigned long long)at);
    return FG_OK;
}

static int st_table(const char *label, json_t *root, uint64_t data_len, uint64_t data_start,
                    ck_list *out, fg_err *err)
{
    if (!json_is_object(root))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: safetensors header is not a JSON object", label);
    uint32_t first = out->n;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        int rc = strcmp(k, "__metadata__") == 0
                     ? st_metadata(label, v, out, err)
                     : st_tensor(label, k, v, data_len, data_start, out, err);
        if (rc)
            return rc;
    }
    return st_check_tiling(label, out, first, data_start, data_len, err);
}

int ck_st_parse(const ck_src *src, ck_list *out, fg_err *err)
{
    uint8_t b8[8];
    int rc = ck_src_read(src, 0, b8, 8, "safetensors header length", err);
    if (rc)
        return rc;
    uint64_t n = fg_le64(b8);
    if (n > CK_ST_MAX_HEADER)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: safetensors header of %llu bytes (limit %llu)",
                          src->label, (unsigned long long)n, (unsigned long long)CK_ST_MAX_HEADER);
    if (n > src->size - 8)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: safetensors header of %llu bytes runs past "
                          "the end of the file", src->label, (unsigned long long)n);
    if (n == 0)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: safetensors header is empty", src->label);
    char *h = malloc((size_t)n);
    if (!h)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the header", src->label);
    rc = ck_src_read(src, 8, h, (size_t)n, "safetensors header", err);
    if (rc) {
        free(h);
        return rc;
    }
    unsigned char first = (unsigned char)h[0];
    if (first != '{') {
        free(h);
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: safetensors header does not begin with '{' "
                          "(byte 8 is 0x%02x)", src->label, first);
    }
    json_error_t je;
    json_t *root = fg_json_loadb(h, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    free(h);
    if (!root)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: safetensors header is not valid JSON: %s "
                          "(byte %d)", src->label, je.text, je.position);
    rc = st_table(src->label, root, src->size - 8 - n, 8 + n, out, err);
    json_decref(root);
    return rc;
}
