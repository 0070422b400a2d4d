/* codec.c - codec descriptors: validation, chunk sizes and the quantized matrix view.
 *
 * The format carries, validates and sizes the codecs; the quantization arithmetic lives in
 * quant/. A chunk holds whole dim-0 rows. For Q4/Q8 the chunk is viewed as a matrix:
 *  - groups along the contiguous axis (group_axis == n_dims-1, n_dims >= 2):
 *      rows = n_rows * dims[1] * ... * dims[n-2], cols = dims[n-1], groups run along cols;
 *  - groups along axis 0 (group_axis == 0, which is also the only axis of a 1-d tensor):
 *      rows = n_rows, cols = dims[1] * ... * dims[n-1] (1 for 1-d), groups run down rows,
 *      so a chunk boundary must fall on a multiple of group_size rows (except the last).
 * A partial last group is padded to group_size with code 0 (SPEC 6).
 */
#include <string.h>

#include "fg_bytes.h"
#include "fgt_int.h"

fg_codec fg_codec_float(fg_codec_id id)
{
    fg_codec c;
    memset(&c, 0, sizeof c);
    c.id = (uint8_t)id;
    return c;
}

fg_codec fg_codec_quant(unsigned bits, uint32_t group_size, unsigned group_axis)
{
    fg_codec c;
    memset(&c, 0, sizeof c);
    c.id = bits == 4 ? FG_CODEC_Q4 : FG_CODEC_Q8;
    c.bits = (uint8_t)bits;
    c.group_axis = (uint8_t)group_axis;
    c.scale_dtype = FG_SCALE_F16;
    c.nibble_order = FG_NIBBLE_LO_FIRST;
    c.layout_version = FG_QUANT_LAYOUT_VERSION;
    c.group_size = group_size;
    return c;
}

const char *fg_codec_name(uint8_t id)
{
    switch (id) {
    case FG_CODEC_F32: return "f32";
    case FG_CODEC_F16: return "f16";
    case FG_CODEC_BF16: return "bf16";
    case FG_CODEC_Q4: return "q4";
    case FG_CODEC_Q8: return "q8";
    default: return "?";
    }
}

static int is_quant(uint8_t id)
{
    return id == FG_CODEC_Q4 || id == FG_CODEC_Q8;
}

static int validate_float(const fg_codec *c, fg_err *err)
{
    if (c->bits || c->group_axis || c->scale_dtype || c->nibble_order || c->layout_version ||
        c->group_size)
        return fg_err_set(err, FG_ERR_RESERVED, "codec %s: quantization fields must be zero",
                          fg_codec_name(c->id));
    return FG_OK;
}

static int validate_quant(const fg_codec *c, uint32_t n_dims, fg_err *err)
{
    const char *nm = fg_codec_name(c->id);
    unsigned want_bits = c->id == FG_CODEC_Q4 ? 4 : 8;
    if (c->bits != want_bits)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "codec %s: bits %u (must be %u)", nm, c->bits,
                          want_bits);
    if (c->layout_version != FG_QUANT_LAYOUT_VERSION)
        return fg_err_set(err, FG_ERR_VERSION, "codec %s: quant layout version %u unknown", nm,
                          c->layout_version);
    if (c->scale_dtype != FG_SCALE_F32 && c->scale_dtype != FG_SCALE_F16)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "codec %s: scale dtype %u unknown", nm,
                          c->scale_dtype);
    if (c->nibble_order > (c->id == FG_CODEC_Q4 ? 1 : 0))
        return fg_err_set(err, FG_ERR_BAD_ENUM, "codec %s: nibble order %u invalid", nm,
                          c->nibble_order);
    uint32_t g = c->group_size;
    if (g < FG_FGT_GROUP_MIN || g > FG_FGT_GROUP_MAX || (g & (g - 1)))
        return fg_err_set(err, FG_ERR_LIMIT,
                          "codec %s: group size %u (must be a power of two in [%u, %u])", nm, g,
                          FG_FGT_GROUP_MIN, FG_FGT_GROUP_MAX);
    if (n_dims == 0)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "codec %s: a 0-d tensor cannot be quantized",
                          nm);
    if (c->group_axis != 0 && c->group_axis != n_dims - 1)
        return fg_err_set(err, FG_ERR_BAD_ENUM,
                          "codec %s: group axis %u (must be 0 or %u for %u dims)", nm,
                          c->group_axis, n_dims - 1, n_dims);
    return FG_OK;
}

int fg_codec_validate(const fg_codec *c, uint32_t n_dims, fg_err *err)
{
    switch (c->id) {
    case FG_CODEC_F32:
    case FG_CODEC_F16:
    case FG_CODEC_BF16: return validate_float(c, err);
    case FG_CODEC_Q4:
    case FG_CODEC_Q8: return validate_quant(c, n_dims, err);
    default: return fg_err_set(err, FG_ERR_BAD_ENUM, "codec id %u unknown", c->id);
    }
}

uint64_t fg_codec_row_quantum(const fg_codec *c, uint32_t n_dims)
{
    (void)n_dims;
    return is_quant(c->id) && c->group_axis == 0 ? c->group_size : 1;
}

/* Product of dims[lo..hi) with overflow check. */
static int dim_product(const uint64_t *dims, uint32_t lo, uint32_t hi, uint64_t *out)
{
    uint64_t p = 1;
    for (uint32_t i = lo; i < hi; i++)
        if (fg_mul_u64(p, dims[i], &p))
            return -1;
    *out = p;
    return 0;
}

int fg_codec_qview(const fg_codec *c, uint32_t n_dims, const uint64_t *dims, uint64_t n_rows,
                   fg_qview *out, fg_err *err)
{
    int rc = fg_codec_validate(c, n_dims, err);
    if (rc)
        return rc;
    if (!is_quant(c->id))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "codec %s is not quantized",
                          fg_codec_name(c->id));
    memset(out, 0, sizeof *out);
    uint64_t ssize = c->scale_dtype == FG_SCALE_F32 ? 4 : 2;
    out->group_bytes = (uint32_t)(2 * ssize + (uint64_t)c->group_size * c->bits / 8);
    uint64_t inner = 0, groups_per_line, lines;
    int ovf;
    if (c->group_axis == 0) {
        out->along_rows = 1;
        out->rows = n_rows;
        ovf = dim_product(dims, 1, n_dims, &inner);
        out->cols = inner;
        groups_per_line = (n_rows + c->group_size - 1) / c->group_size;
        lines = inner;
    } else {
        ovf = dim_product(dims, 1, n_dims - 1, &inner) || fg_mul_u64(inner, n_rows, &inner);
        out->rows = inner;
        out->cols = dims[n_dims - 1];
        groups_per_line = (out->cols + c->group_size - 1) / c->group_size;
        lines = inner;
    }
    if (ovf || fg_mul_u64(groups_per_line, lines, &out->n_groups))
        return fg_err_set(err, FG_ERR_OVERFLOW, "codec %s: group count overflows",
                          fg_codec_name(c->id));
    return FG_OK;
}

int fg_codec_chunk_bytes(const fg_codec *c, uint32_t n_dims, const uint64_t *dims, uint64_t n_rows,
                         uint64_t *out, fg_err *err)
{
    int rc = fg_codec_validate(c, n_dims, err);
    if (rc)
        return rc;
    if (is_quant(c->id)) {
        fg_qview v;
        rc = fg_codec_qview(c, n_dims, dims, n_rows, &v, err);
        if (rc)
            return rc;
        if (fg_mul_u64(v.n_groups, v.group_bytes, out))
            return fg_err_set(err, FG_ERR_OVERFLOW, "codec %s: chunk size overflows",
                              fg_codec_name(c->id));
        return FG_OK;
    }
    uint64_t esize = c->id == FG_CODEC_F32 ? 4 : 2, n;
    if (dim_product(dims, n_dims ? 1 : 0, n_dims, &n) || fg_mul_u64(n, n_rows, &n) ||
        fg_mul_u64(n, esize, out))
        return fg_err_set(err, FG_ERR_OVERFLOW, "codec %s: chunk size overflows",
                          fg_codec_name(c->id));
    return FG_OK;
}

void fgt_codec_encode(const fg_codec *c, uint8_t out[FGT_CODEC_SIZE])
{
    out[0] = c->id;
    out[1] = c->bits;
    out[2] = c->group_axis;
    out[3] = c->scale_dtype;
    out[4] = c->nibble_order;
    out[5] = c->layout_version;
    fg_put16(out + 6, 0);
    fg_put32(out + 8, c->group_size);
}

void fgt_codec_decode(const uint8_t in[FGT_CODEC_SIZE], fg_codec *c, uint16_t *reserved)
{
    c->id = in[0];
    c->bits = in[1];
    c->group_axis = in[2];
    c->scale_dtype = in[3];
    c->nibble_order = in[4];
    c->layout_version = in[5];
    *reserved = fg_le16(in + 6);
    c->group_size = fg_le32(in + 8);
}

int fgt_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if ((b & 0xE0) == 0xC0) n = 1, cp = b & 0x1F, min = 0x80;
        else if ((b & 0xF0) == 0xE0) n = 2, cp = b & 0x0F, min = 0x800;
        else if ((b & 0xF8) == 0xF0) n = 3, cp = b & 0x07, min = 0x10000;
        else return 0;
        if (len - i - 1 < n)
            return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

int fgt_check_name(const uint8_t *s, size_t len, int allow_empty)
{
    if (len == 0 && !allow_empty)
        return FG_ERR_BAD_NAME;
    if (len > FG_FGT_MAX_NAME)
        return FG_ERR_LIMIT;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] == 0x7F)
            return FG_ERR_BAD_NAME;
    return fgt_utf8_valid(s, len) ? FG_OK : FG_ERR_BAD_NAME;
}
