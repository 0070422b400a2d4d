/* fp8.c - FP8 block-scaled checkpoints: e4m3 weights with weight_scale_inv block scales.
 *
 * The form DeepSeek-V3/R1, Kimi K2 and the Qwen3 / GLM "-FP8" releases publish: config.json's
 * quantization_config {"quant_method": "fp8", "fmt": "e4m3" (optional), "weight_block_size":
 * [bh, bw]}, each quantized Linear weight W [R, C] stored as F8_E4M3 (float8_e4m3fn) beside
 * W_scale_inv [ceil(R / bh), ceil(C / bw)] (F32, or BF16): the value of element (r, c) is
 * e4m3(W[r][c]) x scale_inv[r / bh][c / bw] (the name notwithstanding, a multiplier: DeepSeek's
 * weight_dequant and transformers' FP8 dequantization multiply by it).
 *
 * Decisions:
 * - Pairing at open (ck_fp8_pair, after the listing): every F8_E4M3 tensor must have its scales,
 *   of the shape its block size implies, and a quantization_config to say the block size; an
 *   F8 tensor without them, or scales of another shape, is refused in one line naming both.
 *   The scale tensors stay listed (so indices hold) marked is_scale: the model check passes
 *   them over, the F8 tensor reads them.
 * - Values: binary32 e4m3(x) (exact: 4 significant bits, exponents -9 .. 8) times the scale
 *   widened to binary32, one rounded binary32 product, then rounded to BF16 to nearest even:
 *   what DeepSeek's fp8_cast_bf16.py (weight_dequant: x.float() * s, stored in the default
 *   dtype bfloat16) and transformers' dequantization give, bit for bit. fg stores BF16 (or with
 *   --compress-weight re-quantizes those BF16 values to its Q4/Q8 as for any BF16 checkpoint).
 * - e4m3fn has no infinity; 0x7f and 0xff are NaN: a NaN element, or a product that is not
 *   finite in BF16, is refused naming the tensor and the element (FG_ERR_NONFINITE), as fg
 *   refuses non-finite weights from any source. Subnormals (exponent field 0: m x 2^-9) are
 *   decoded exactly.
 * - Streaming: a read covers the rows asked for and the scale rows over them, two preads into
 *   a reused buffer; nothing is mapped or held beyond that, so the import's memory does not
 *   grow with the checkpoint.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

/* e4m3fn byte -> binary32 (exact); NaN for 0x7f / 0xff */
static float e4m3(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    float v = e == 15 && m == 7 ? NAN : e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return b & 0x80 ? -v : v;
}

float ck_fp8_e4m3_to_f32(uint8_t b) { return e4m3(b); }

/* quantization_config's weight_block_size from DIR/config.json into block; FG_ERR_NOT_FOUND
 * without one; errors name the file and key */
static int block_size(const char *dir, uint32_t block[2], fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: FP8 (F8_E4M3) tensors need config.json's "
                          "quantization_config: %s", path, je.text);
    json_t *q = json_object_get(root, "quantization_config");
    json_t *m = json_object_get(q, "quant_method"), *f = json_object_get(q, "fmt");
    json_t *b = json_object_get(q, "weight_block_size");
    int rc = FG_OK;
    if (!json_is_object(q) || !json_is_string(m) || strcmp(json_string_value(m), "fp8"))
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: F8_E4M3 tensors, but quantization_config."
                        "quant_method is not \"fp8\" (fg reads block-scaled FP8)", path);
    else if (f && (!json_is_string(f) || strcmp(json_string_value(f), "e4m3")))
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: quantization_config.fmt must be \"e4m3\"",
                        path);
    else if (!json_is_array(b) || json_array_size(b) != 2 ||
             !json_is_integer(json_array_get(b, 0)) || !json_is_integer(json_array_get(b, 1)) ||
             json_integer_value(json_array_get(b, 0)) < 1 ||
             json_integer_value(json_array_get(b, 1)) < 1 ||
             json_integer_value(json_array_get(b, 0)) > 65536 ||
             json_integer_value(json_array_get(b, 1)) > 65536)
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size must "
                        "be [rows, cols] from 1 to 65536 (per-tensor FP8 scales are not read)",
                        path);
    if (rc == FG_OK) {
        block[0] = (uint32_t)json_integer_value(json_array_get(b, 0));
        block[1] = (uint32_t)json_integer_value(json_array_get(b, 1));
    }
    json_decref(root);
    return rc;
}

/* F8 tensor t (index i) and its scales: shapes checked, t marked */
static int pair_one(fg_ckpt *ck, ck_list *l, uint32_t i, const uint32_t block[2], fg_err *err)
{
    fg_ckpt_tensor *t = &l->t[i];
    char name[FG_CKPT_MAX_NAME + 16];
    uint32_t s;
    snprintf(name, sizeof name, "%s_scale_inv", t->name);
    if (t->n_dims != 2)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: F8_E4M3 tensor %s has %u dimensions; "
                          "block scales need 2", t->path, t->name, t->n_dims);
    if (fg_ckpt_find(ck, name, &s) != FG_OK)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: F8_E4M3 tensor %s has no %s (its block "
                          "scales)", t->path, t->name, name);
    fg_ckpt_tensor *st = &l->t[s];
    uint64_t want[2] = {(t->dims[0] + block[0] - 1) / block[0],
                        (t->dims[1] + block[1] - 1) / block[1]};
    if ((st->dtype != FG_CKPT_F32 && st->dtype != FG_CKPT_BF16) || st->n_dims != 2 ||
        st->dims[0] != want[0] || st->dims[1] != want[1])
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s must be F32 or BF16 [%llu, "
                          "%llu] (%s [%llu, %llu] in blocks of %ux%u)", st->path, st->name,
                          (unsigned long long)want[0], (unsigned long long)want[1], t->name,
                          (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
                          block[0], block[1]);
    if (st->is_scale)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s scales two tensors", st->path,
                          st->name);
    st->is_scale = 1;
    t->scales = s + 1;
    t->block[0] = block[0], t->block[1] = block[1];
    return FG_OK;
}

int ck_fp8_pair(fg_ckpt *ck, ck_list *l, const char *dir, fg_err *err)
{
    uint32_t block[2] = {0, 0};
    int rc = FG_OK, have = 0;
    for (uint32_t i = 0; i < l->n && rc == FG_OK; i++) {
        if (l->t[i].dtype != FG_CKPT_F8_E4M3)
            continue;
        if (!have && (rc = block_size(dir, block, err)) != FG_OK)
            break;
        have = 1;
        rc = pair_one(ck, l, i, block, err);
    }
    return rc;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    void *q = realloc(*p, need);
    if (!q)
        return -1;
    *p = q, *cap = need;
    return 0;
}

/* v rounded to BF16, to nearest even (v finite, not NaN) */
static uint16_t to_bf16(float v)
{
    uint32_t x;
    memcpy(&x, &v, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

int ck_fp8_read_bf16(const fg_ckpt *ck, uint32_t i, uint64_t first, uint64_t n, uint16_t *out,
                     void **scratch, size_t *cap, fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    if (!t->scales)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s is F8_E4M3 without block "
                          "scales", t->path, t->name);
    const fg_ckpt_tensor *st = fg_ckpt_tensor_at(ck, t->scales - 1);
    uint64_t cols = t->dims[1], scols = st->dims[1];
    if (n == 0)
        return FG_OK;
    uint64_t r0 = first / cols, r1 = (first + n - 1) / cols;
    uint64_t s0 = r0 / t->block[0], s1 = r1 / t->block[0], ns = (s1 - s0 + 1) * scols;
    size_t es = fg_ckpt_dtype_size(st->dtype);
    size_t need = (size_t)(n + 8 + ns * (es + 4));
    if (grow(scratch, cap, need))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", t->name);
    uint8_t *codes = *scratch, *sraw = codes + n;
    float *scale = (float *)(void *)(codes + ((n + ns * es + 7) & ~7ull));
    int rc = fg_ckpt_read(ck, i, first, n, codes, err);
    if (rc == FG_OK)
        rc = fg_ckpt_read(ck, t->scales - 1, s0 * scols, ns, sraw, err);
    for (uint64_t k = 0; rc == FG_OK && k < ns; k++) {
        uint32_t b = st->dtype == FG_CKPT_F32 ? fg_le32(sraw + 4 * k)
                                               : (uint32_t)fg_le16(sraw + 2 * k) << 16;
        memcpy(&scale[k], &b, 4);
    }
    for (uint64_t k = 0; rc == FG_OK && k < n; k++) {
        uint64_t e = first + k, r = e / cols, c = e % cols;
        float v = e4m3(codes[k]) * scale[(r / t->block[0] - s0) * scols + c / t->block[1]];
        uint16_t h = isnan(v) ? 0x7fc0 : to_bf16(v);
        if ((h & 0x7f80u) == 0x7f80u)
            return fg_err_set(err, FG_ERR_NONFINITE, "%s: tensor '%s' element %llu (row %llu, "
                              "column %llu) is not finite: byte 0x%02x x scale %g", t->path,
                              t->name, (unsigned long long)e, (unsigned long long)r,
                              (unsigned long long)c, codes[k],
                              (double)scale[(r / t->block[0] - s0) * scols + c / t->block[1]]);
        out[k] = h;
    }
    return rc;
}

int ck_fp8_has(const fg_ckpt *ck)
{
    for (uint32_t i = 0; i < fg_ckpt_count(ck); i++)
        if (fg_ckpt_tensor_at(ck, i)->scales)
            return 1;
    return 0;
}

int ck_fp8_config(const char *dir, char **json, size_t *len, fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    *json = NULL;
    if (!root)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: %s", path, je.text);
    json_object_del(root, "quantization_config"); /* (the store holds BF16: fp8.c) */
    *json = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    *len = *json ? strlen(*json) : 0;
    return *json ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}
