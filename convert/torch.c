/* torch.c - a torch.save zip archive (pytorch_model.bin) as a list of contiguous tensors.
 *
 * torch.save (>= 1.6) writes a stored zip with one top-level folder P (the file's stem or
 * "archive"): P/data.pkl (the pickled state dict), P/data/<key> (one entry per storage, raw
 * little-endian elements), P/byteorder ("little"; absent in older files), P/version (or
 * P/.data/version) and a few more. We open the zip (zip.c) and apply torch.load's own layout
 * rules (PyTorchStreamReader::init and getAllRecords, torch/serialization.py _load):
 *   - a file starting "PYTORCH1" is the preview-release format: refused;
 *   - P is the part before the first '/' of the first entry in the central directory, which
 *     must have one; every entry must lie under P/ (torch.load lists all records and throws
 *     otherwise);
 *   - P/data.pkl exists; P/.data/version, else P/version, exists and reads (as C++ stoull does:
 *     leading blanks, an optional '+', decimal digits, anything after them ignored) as a
 *     version torch reads today, 1..FG_TORCH_MAX_VERSION;
 *   - P/byteorder, when present, is "little" ("big" is valid torch, but fg does not byte-swap)
 *     and nothing else.
 * Then P/data.pkl is read into memory (bounded by CK_PKL_MAX_BYTES), run through the restricted
 * unpickler (pickle.c), and every tensor is resolved against its storage entry:
 *   - the entry P/data/<key> must exist and hold exactly numel x element size bytes (torch checks
 *     the record size against the storage's byte count the same way);
 *   - the tensor's strides must be the row-major contiguous ones (dims of size 1 excepted;
 *     fg streams row-major runs and never gathers);
 *   - storage_offset + element count <= storage numel (overflow-checked).
 * The tensor is then the byte range entry.data_off + storage_offset x size, length numel x size.
 * Tensors sharing a storage (tied weights, views) simply point into the same entry.
 * Where fg is narrower than torch.load, on purpose: compressed entries (torch inflates them; fg
 * reads stored bytes in place, zip.c refuses them), big-endian archives, non-contiguous strides.
 * torch.save aligns each entry's data to 64 bytes; torch.load does not require it, nor do we.
 * The legacy (pre-1.6, non-zip) torch format is refused with a message saying so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

#define FG_TORCH_MAX_VERSION 10 /* caffe2/serialize/versions.h kMaxSupportedFileFormatVersion */

/* P/ from the archive's first entry, and every entry under it. */
static int archive_prefix(const ck_src *src, const ck_zip *z, char *prefix, size_t cap,
                          fg_err *err)
{
    const char *first = NULL;
    for (uint32_t i = 0; i < z->n && !first; i++)
        if (z->e[i].cd_index == 0)
            first = z->e[i].name;
    if (!first)
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: zip archive has no entries", src->label);
    const char *slash = strchr(first, '/');
    if (!slash || slash == first || (size_t)(slash - first) + 2 > cap)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: first zip entry %s is not in a folder (a "
                          "torch.save archive keeps everything under one)", src->label, first);
    size_t plen = (size_t)(slash - first) + 1;
    memcpy(prefix, first, plen);
    prefix[plen] = '\0';
    for (uint32_t i = 0; i < z->n; i++)
        if (strncmp(z->e[i].name, prefix, plen) != 0)
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s is outside the archive "
                              "folder %s (torch.load refuses it)", src->label, z->e[i].name,
                              prefix);
    return FG_OK;
}

static int find_pickle(const ck_src *src, const ck_zip *z, const char *prefix,
                       const ck_zip_entry **pkl, fg_err *err)
{
    char name[CK_ZIP_MAX_NAME + 16];
    snprintf(name, sizeof name, "%sdata.pkl", prefix);
    if (!(*pkl = ck_zip_find(z, name)))
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: zip archive has no %s (not a torch.save "
                          "file)", src->label, name);
    return FG_OK;
}

/* The version record, read as stoull reads it. */
static int check_version(const ck_src *src, const ck_zip *z, const char *prefix, fg_err *err)
{
    char name[CK_ZIP_MAX_NAME + 16], buf[33] = {0};
    snprintf(name, sizeof name, "%s.data/version", prefix);
    const ck_zip_entry *e = ck_zip_find(z, name);
    if (!e) {
        snprintf(name, sizeof name, "%sversion", prefix);
        if (!(e = ck_zip_find(z, name)))
            return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: zip archive has no %sversion or "
                              "%s.data/version record (torch.load needs one)", src->label, prefix,
                              prefix);
    }
    size_t n = e->size < 32 ? (size_t)e->size : 32;
    int rc = ck_src_read(src, e->data_off, buf, n, name, err);
    if (rc)
        return rc;
    const char *p = buf + strspn(buf, " \t\n\v\f\r");
    p += *p == '+';
    uint64_t v = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 19; p++, digits++)
        v = v * 10 + (uint64_t)(*p - '0');
    if (!digits || (*p >= '0' && *p <= '9'))
        return fg_err_set(err, FG_ERR_VERSION, "%s: %s does not hold a version number",
                          src->label, name);
    if (v < 1 || v > FG_TORCH_MAX_VERSION)
        return fg_err_set(err, FG_ERR_VERSION, "%s: %s is %llu; torch reads versions 1..%d",
                          src->label, name, (unsigned long long)v, FG_TORCH_MAX_VERSION);
    return FG_OK;
}

static int check_byteorder(const ck_src *src, const ck_zip *z, const char *prefix, fg_err *err)
{
    char name[CK_ZIP_MAX_NAME + 16], buf[8] = {0};
    snprintf(name, sizeof name, "%sbyteorder", prefix);
    const ck_zip_entry *e = ck_zip_find(z, name);
    if (!e)
        return FG_OK; /* torch < 2.1 wrote none: little-endian */
    int rc = e->size <= 6 ? ck_src_read(src, e->data_off, buf, (size_t)e->size, name, err) : FG_OK;
    if (rc)
        return rc;
    if (e->size == 6 && !memcmp(buf, "little", 6))
        return FG_OK;
    if (e->size == 3 && !memcmp(buf, "big", 3))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: %s says big-endian; fg reads "
                          "little-endian archives only", src->label, name);
    return fg_err_set(err, FG_ERR_BAD_ENDIAN, "%s: %s is neither \"little\" nor \"big\"",
                      src->label, name);
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
    uint8_t b[8];
    if (src->size > 8 && ck_src_read(src, 0, b, 8, "magic", NULL) == FG_OK &&
        !memcmp(b, "PYTORCH1", 8))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: the preview-release torch format "
                          "(PYTORCH1); torch.load refuses it too", src->label);
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
    const ck_zip_entry *pkl = NULL;
    ck_pkl_result res = {0};
    char prefix[CK_ZIP_MAX_NAME + 1];
    rc = archive_prefix(src, &z, prefix, sizeof prefix, err);
    if (rc == FG_OK)
        rc = find_pickle(src, &z, prefix, &pkl, err);
    if (rc == FG_OK)
        rc = check_version(src, &z, prefix, err);
    if (rc == FG_OK)
        rc = check_byteorder(src, &z, prefix, err);
    if (rc == FG_OK)
        rc = load_pickle(src, pkl, &res, err);
    for (uint32_t i = 0; i < res.n && rc == FG_OK; i++)
        rc = resolve(src, &z, prefix, &res.t[i], out, err);
    ck_pkl_free(&res);
    ck_zip_free(&z);
    return rc;
}
