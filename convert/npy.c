/* npy.c - one NumPy .npy file (format 1.0, 2.0 or 3.0) as one tensor.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.x, u32 LE for 2.x/3.x),
 * the header (a Python dict literal, padded with spaces and '\n'), then the raw data to the end
 * of the file. The header is parsed by a small strict tokenizer, not by evaluating anything:
 *   { 'descr': <str>, 'fortran_order': <True|False>, 'shape': (<int>, ...) [,] }
 * with single- or double-quoted keys in any order, each exactly once, optional trailing comma,
 * and nothing but spaces and newlines after the closing brace. descr must be one of '<f4'
 * (F32), '<f2' (F16), '<f8' (F64), '<i8' (I64) ('=' and '|' are not accepted: explicit little
 * endian only); fortran_order must be False; the data length must equal the file's remainder.
 * Header length <= CK_NPY_MAX_HEADER (10,000: numpy.load's default max_header_size refuses a
 * longer one as unsafe), format minor version 0 (numpy reads (1,0), (2,0), (3,0), nothing else).
 * numpy.load ignores bytes after the data; we refuse them, as safetensors does: no byte may be
 * left that the tensor does not account for (np.save never writes any).
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

typedef struct hp {
    const char *p, *e;
    const char *label;
    fg_err *err;
} hp;

static void skip_ws(hp *h)
{
    while (h->p < h->e && (*h->p == ' ' || *h->p == '\n' || *h->p == '\t'))
        h->p++;
}

static int bad(hp *h, const char *what)
{
    return fg_err_set(h->err, FG_ERR_CORRUPT, "%s: .npy header: %s", h->label, what);
}

static int expect(hp *h, char c)
{
    skip_ws(h);
    if (h->p >= h->e || *h->p != c)
        return -1;
    h->p++;
    return 0;
}

/* A quoted string without escapes, copied into buf (cap bytes). */
static int str(hp *h, char *buf, size_t cap)
{
    skip_ws(h);
    if (h->p >= h->e || (*h->p != '\'' && *h->p != '"'))
        return -1;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->e && *h->p != q) {
        if (*h->p == '\\' || n + 1 >= cap)
            return -1;
        buf[n++] = *h->p++;
    }
    if (h->p >= h->e)
        return -1;
    h->p++;
    buf[n] = '\0';
    return 0;
}

static int word(hp *h, const char *w)
{
    size_t n = strlen(w);
    skip_ws(h);
    if ((size_t)(h->e - h->p) < n || memcmp(h->p, w, n) != 0)
        return -1;
    h->p += n;
    return 0;
}

static int uint_lit(hp *h, uint64_t *out)
{
    skip_ws(h);
    if (h->p >= h->e || *h->p < '0' || *h->p > '9')
        return -1;
    uint64_t v = 0;
    while (h->p < h->e && *h->p >= '0' && *h->p <= '9') {
        if (fg_mul_u64(v, 10, &v) || fg_add_u64(v, (uint64_t)(*h->p - '0'), &v))
            return -1;
        h->p++;
    }
    if (h->p < h->e && *h->p == 'L')
        h->p++; /* Python 2 long suffix, as old numpy wrote */
    *out = v;
    return 0;
}

static int shape(hp *h, uint32_t *n_dims, uint64_t *dims)
{
    if (expect(h, '('))
        return -1;
    *n_dims = 0;
    for (;;) {
        skip_ws(h);
        if (h->p < h->e && *h->p == ')') {
            h->p++;
            return 0;
        }
        if (*n_dims >= FG_CKPT_MAX_DIMS || uint_lit(h, &dims[*n_dims]))
            return -1;
        (*n_dims)++;
        skip_ws(h);
        if (h->p < h->e && *h->p == ',')
            h->p++;
        else if (!(h->p < h->e && *h->p == ')'))
            return -1;
    }
}

static int descr_dtype(const char *d, uint8_t *dt)
{
    static const struct { const char *s; uint8_t dt; } tab[] = {
        {"<f4", FG_CKPT_F32}, {"<f2", FG_CKPT_F16}, {"<f8", FG_CKPT_F64}, {"<i8", FG_CKPT_I64},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(d, tab[i].s) == 0) {
            *dt = tab[i].dt;
            return 0;
        }
    return -1;
}

typedef struct npy_hdr {
    uint8_t dtype;
    int fortran;
    uint32_t n_dims;
    uint64_t dims[FG_CKPT_MAX_DIMS];
} npy_hdr;

static int one_item(hp *h, npy_hdr *o, unsigned *seen)
{
    char key[32], val[32];
    if (str(h, key, sizeof key) || expect(h, ':'))
        return bad(h, "expected 'key': value");
    if (strcmp(key, "descr") == 0 && !(*seen & 1)) {
        *seen |= 1;
        if (str(h, val, sizeof val))
            return bad(h, "descr is not a plain string");
        if (descr_dtype(val, &o->dtype))
            return fg_err_set(h->err, FG_ERR_BAD_ENUM, "%s: .npy descr '%s' is not one fg reads "
                              "('<f4', '<f2', '<f8', '<i8')", h->label, val);
    } else if (strcmp(key, "fortran_order") == 0 && !(*seen & 2)) {
        *seen |= 2;
        if (word(h, "False") == 0)
            o->fortran = 0;
        else if (word(h, "True") == 0)
            o->fortran = 1;
        else
            return bad(h, "fortran_order is not True or False");
    } else if (strcmp(key, "shape") == 0 && !(*seen & 4)) {
        *seen |= 4;
        if (shape(h, &o->n_dims, o->dims))
            return bad(h, "shape is not a tuple of at most 8 non-negative integers");
    } else {
        return bad(h, "unknown or repeated key");
    }
    return FG_OK;
}

static int parse_dict(hp *h, npy_hdr *o)
{
    unsigned seen = 0;
    if (expect(h, '{'))
        return bad(h, "does not start with '{'");
    for (;;) {
        skip_ws(h);
        if (h->p < h->e && *h->p == '}')
            break;
        int rc = one_item(h, o, &seen);
        if (rc)
            return rc;
        skip_ws(h);
        if (h->p < h->e && *h->p == ',')
            h->p++;
        else if (!(h->p < h->e && *h->p == '}'))
            return bad(h, "expected ',' or '}'");
    }
    h->p++;
    skip_ws(h);
    if (h->p != h->e)
        return bad(h, "bytes after the closing '}'");
    if (seen != 7)
        return bad(h, "needs descr, fortran_order and shape");
    if (o->fortran)
        return fg_err_set(h->err, FG_ERR_UNSUPPORTED, "%s: .npy fortran_order is True; fg reads "
                          "only C-order arrays", h->label);
    return FG_OK;
}

int ck_npy_parse(const ck_src *src, const char *name, ck_list *out, fg_err *err)
{
    uint8_t pre[12];
    int rc = ck_src_read(src, 0, pre, 10, ".npy preamble", err);
    if (rc)
        return rc;
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: not a .npy file", src->label);
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0) /* numpy knows (1,0), (2,0), (3,0) only */
        return fg_err_set(err, FG_ERR_VERSION, "%s: .npy format %u.%u is not 1.0, 2.0 or 3.0",
                          src->label, pre[6], pre[7]);
    uint64_t hl, start = pre[6] == 1 ? 10 : 12;
    if (pre[6] == 1) {
        hl = fg_le16(pre + 8);
    } else {
        if ((rc = ck_src_read(src, 0, pre, 12, ".npy preamble", err)))
            return rc;
        hl = fg_le32(pre + 8);
    }
    if (hl > CK_NPY_MAX_HEADER)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: .npy header of %llu bytes (limit %u)", src->label,
                          (unsigned long long)hl, CK_NPY_MAX_HEADER);
    char *buf = malloc(hl ? (size_t)hl : 1);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", src->label);
    npy_hdr o = {0};
    hp h = {buf, buf + hl, src->label, err};
    rc = ck_src_read(src, start, buf, (size_t)hl, ".npy header", err);
    if (rc == FG_OK)
        rc = parse_dict(&h, &o);
    free(buf);
    if (rc)
        return rc;
    uint64_t n_elem, bytes, data_off = start + hl;
    if (ck_shape_bytes(o.n_dims, o.dims, fg_ckpt_dtype_size(o.dtype), &n_elem, &bytes))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: .npy shape x dtype overflows", src->label);
    if (bytes > src->size - data_off)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: .npy data needs %llu bytes, the file has %llu",
                          src->label, (unsigned long long)bytes,
                          (unsigned long long)(src->size - data_off));
    if (bytes != src->size - data_off)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: %llu bytes after the .npy data",
                          src->label, (unsigned long long)(src->size - data_off - bytes));
    return ck_list_add(out, name, strlen(name), o.dtype, o.n_dims, o.dims, data_off, src->label, err);
}
