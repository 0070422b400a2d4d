/* torch.c - a torch.save zip archive (pytorch_model.bin) as a list of contiguous tensors.
 *
 * torch.save (>= 1.6) writes a stored zip with one top-level folder P (the file's stem or
 * "archive"): P/data.pkl (the pickled state dict), P/data/<key> (one entry per storage, raw
 * little-endian elements), P/byteorder ("little"; absent in older files), P/version and a few
 * more. We open the zip (zip.c), read P/data.pkl into memory (bounded by CK_PKL_MAX_BYTES), run
 * the restricted unpickler (pickle.c), and resolve every tensor against its storage entry:
 *   - the entry P/data/<key> must exist and hold exactly numel x element size bytes;
 *   - the tensor's strides must be the row-major contiguous ones (dims of size 1 excepted;
 *     fg streams row-major runs and never gathers);
 *   - storage_offset + element count <= storage numel (overflow-checked).
 * The tensor is then the byte range entry.data_off + storage_offset x size, length numel x size.
 * Tensors sharing a storage (tied weights, views) simply point into the same entry.
 * The legacy (pre-1.6, non-zip) torch format is refused with a message saying so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

/* The single P/data.pkl entry; *plen gets strlen(P/). */
static int find_pickle(const ck_src *src, const ck_zip *z, const ck_zip_entry **pkl, size_t *plen,
                       fg_err *err)
{
    *pkl = NULL;
    for (uint32_t i = 0; i < z->n; i++) {
        const char *nm = z->e[i].name, *slash = strchr(nm, '/');
        if (!slash || strcmp(slash + 1, "data.pkl") != 0)
            continue;
        if (*pkl)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: two data.pkl entries (%s, %s)",
                              src->label, (*pkl)->name, nm);
        *pkl = &z->e[i];
        *plen = (size_t)(slash - nm) + 1;
    }
    if (!*pkl)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: zip archive has no <folder>/data.pkl (not a "
                          "torch.save file)", src->label);
    return FG_OK;
}

static int check_byteorder(const ck_src *src, const ck_zip *z, const char *prefix, fg_err *err)
{
    char name[CK_ZIP_MAX_NAME + 16], buf[16];
    snprintf(name, sizeof name, "%sbyteorder", prefix);
    const ck_zip_entry *e = ck_zip_find(z, name);
    if (!e)
        return FG_OK;
    int rc;
    if (e->size != 6 || (rc = ck_src_read(src, e->data_off, buf, 6, name, err)) != FG_OK ||
        memcmp(buf, "little", 6) != 0)
        return fg_err_set(err, FG_ERR_BAD_ENDIAN, "%s: %s is not \"little\"", src->label, name);
    return FG_OK;
}

static int contiguous(const ck_pkl_tensor *t)
{
    uint64_t expect = 1;
    for (uint32_t d = t->n_dims; d-- > 0;) {
        if (t->size[d] == 0)
            return 1; /* empty: nothing is read */
        if (t->size[d] != 1 && t->stride[d] != expect)
            return 0;
        expect *= t->size[d]; /* bounded: the shape's byte size was overflow-checked */
    }
    return 1;
}

static int resolve(const ck_src *src, const ck_zip *z, const char *prefix, const ck_pkl_tensor *t,
                   ck_list *out, fg_err *err)
{
    char name[CK_ZIP_MAX_NAME + 96];
    snprintf(name, sizeof name, "%sdata/%s", prefix, t->storage_key);
    const ck_zip_entry *e = ck_zip_find(z, name);
    size_t el = fg_ckpt_dtype_size(t->dtype);
    uint64_t st_bytes, n_elem, bytes, end;
    if (!e)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %s: storage entry %s is missing",
                          src->label, t->name, name);
    if (fg_mul_u64(t->storage_numel, el, &st_bytes) || st_bytes != e->size)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s: storage %s holds %llu bytes, "
                          "the pickle says %llu elements of %s", src->label, t->name, name,
                          (unsigned long long)e->size, (unsigned long long)t->storage_numel,
                          fg_ckpt_dtype_name(t->dtype));
    if (ck_shape_bytes(t->n_dims, t->size, el, &n_elem, &bytes))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor %s: element count x size overflows",
                          src->label, t->name);
    if (!contiguous(t))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s has non-contiguous strides; "
                          "save it with .contiguous()", src->label, t->name);
    if (n_elem && (fg_add_u64(t->storage_offset, n_elem, &end) || end > t->storage_numel))
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: tensor %s: offset %llu + %llu elements "
                          "run past its storage of %llu", src->label, t->name,
                          (unsigned long long)t->storage_offset, (unsigned long long)n_elem,
                          (unsigned long long)t->storage_numel);
    uint64_t off = e->data_off + (n_elem ? t->storage_offset * el : 0);
    return ck_list_add(out, t->name, strlen(t->name), t->dtype, t->n_dims, t->size, off, src->label,
                       err);
}

static int load_pickle(const ck_src *src, const ck_zip_entry *pkl, ck_pkl_result *res, fg_err *err)
{
    if (pkl->size > CK_PKL_MAX_BYTES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: %s is %llu bytes (limit %llu)", src->label,
                          pkl->name, (unsigned long long)pkl->size,
                          (unsigned long long)CK_PKL_MAX_BYTES);
    uint8_t *buf = malloc(pkl->size ? (size_t)pkl->size : 1);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for %s", src->label, pkl->name);
    int rc = ck_src_read(src, pkl->data_off, buf, (size_t)pkl->size, pkl->name, err);
    if (rc == FG_OK)
        rc = ck_pkl_load(buf, (size_t)pkl->size, src->label, res, err);
    free(buf);
    return rc;
}

static int legacy_check(const ck_src *src, fg_err *err)
{
    uint8_t b[2];
    if (src->size >= 2 && ck_src_read(src, 0, b, 2, "magic", NULL) == FG_OK && b[0] == 0x80 &&
        b[1] <= 5)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: legacy (pre-1.6, non-zip) torch format; "
                          "re-save it with a current torch.save", src->label);
    return FG_OK;
}

int ck_torch_parse(const ck_src *src, ck_list *out, fg_err *err)
{
    ck_zip z;
    int rc = legacy_check(src, err);
    if (rc || (rc = ck_zip_open(src, &z, err)))
        return rc;
    const ck_zip_entry *pkl;
    size_t plen = 0;
    ck_pkl_result res = {0};
    char prefix[CK_ZIP_MAX_NAME + 1];
    rc = find_pickle(src, &z, &pkl, &plen, err);
    if (rc == FG_OK) {
        memcpy(prefix, pkl->name, plen);
        prefix[plen] = '\0';
        rc = check_byteorder(src, &z, prefix, err);
    }
    if (rc == FG_OK)
        rc = load_pickle(src, pkl, &res, err);
    for (uint32_t i = 0; i < res.n && rc == FG_OK; i++)
        rc = resolve(src, &z, prefix, &res.t[i], out, err);
    ck_pkl_free(&res);
    ck_zip_free(&z);
    return rc;
}
