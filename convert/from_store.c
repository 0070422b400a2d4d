/* from_store.c - a store into a new store (fg_convert_store): re-encode the weights of an F16
 * (or F32) store, typically to 4-bit groups, without going back to the checkpoint. fg-convert
 * takes a store directory as its input this way, and fg-infer --compress-weight uses it to
 * quantize an F16 store at load, into a temporary store beside its offload file.
 *
 * Each tensor is read chunk by chunk with pread from the source's weight files (checksums
 * verified; not through the store's mmap views, which would keep the whole source resident) and
 * written by the same streaming writer as an import (fgc_write_tensor),
 * so memory stays a few chunks. Every metadata blob is copied. A source tensor that is already
 * quantized is refused, naming it: quantizing quantized values twice loses accuracy silently.
 * Provenance of each new tensor: the source tensor's name and its digest in the source store.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_file.h"
#include "convert_int.h"
#include "quant.h"

typedef struct names {
    char **v;
    uint32_t n, cap;
} names;

/* 0, or 1 when out of memory (a positive code: the store's walks return the callback's) */
static int add_name(names *l, const char *s)
{
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return 1;
        l->v = v, l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s)))
        return 1;
    l->n++;
    return 0;
}

static void free_names(names *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static int tensor_name(void *ctx, const fg_store_tensor *t) { return add_name(ctx, t->name); }
static int meta_key(void *ctx, const char *key, size_t len) { return (void)len, add_name(ctx, key); }

typedef struct st_ctx {
    fg_store *s;
    const fg_store_tensor *t;
    uint64_t cols;
    int fd;                 /* the tensor's weight file */
    char path[4096];
    uint8_t *buf;           /* the chunk in buf (index cur, UINT32_MAX: none) */
    size_t cap;
    uint32_t cur;
} st_ctx;

/* Chunk k's payload into c->buf with pread (not the store's mmap views: those would keep the
 * whole source resident), its checksum verified. */
static int load_chunk(st_ctx *c, uint32_t k, fg_err *err)
{
    const fg_fgt_chunk_info *ci = &c->t->chunks[k];
    if (c->cap < ci->length) {
        uint8_t *b = realloc(c->buf, ci->length);
        if (!b)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", c->t->name);
        c->buf = b, c->cap = ci->length;
    }
    for (uint64_t got = 0; got < ci->length;) {
        ssize_t r = pread(c->fd, c->buf + got, ci->length - got, (off_t)(ci->offset + got));
        if (r < 0)
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: reading chunk %u of tensor '%s'",
                              c->path, k, c->t->name);
        if (r == 0)
            return fg_err_set(err, FG_ERR_TRUNCATED, "%s: chunk %u of tensor '%s': short read: "
                              "got %llu of %llu bytes", c->path, k, c->t->name,
                              (unsigned long long)got, (unsigned long long)ci->length);
        got += (uint64_t)r;
    }
    if (XXH3_64bits(c->buf, ci->length) != ci->xxh3)
        return fg_err_set(err, FG_ERR_CHECKSUM, "%s: chunk %u of tensor '%s' fails its checksum",
                          c->path, k, c->t->name);
    c->cur = k;
    return FG_OK;
}

/* Elements [first, first + n) of the tensor as F16 (BF16 ones as they are); the writer asks
 * for whole rows. */
static int st_read(void *ctx, uint64_t first, uint64_t n, uint16_t *out, fg_err *err)
{
    st_ctx *c = ctx;
    const fg_store_tensor *t = c->t;
    uint64_t esz = t->codec.id == FG_CODEC_F32 ? 4 : 2, end = first + n;
    for (uint32_t k = 0; k < t->n_chunks && first < end; k++) {
        const fg_fgt_chunk_info *ci = &t->chunks[k];
        uint64_t c0 = ci->first_row * c->cols, c1 = c0 + ci->n_rows * c->cols;
        if (c1 <= first || c0 >= end)
            continue;
        int rc = c->cur == k ? FG_OK : load_chunk(c, k, err);
        if (rc)
            return rc;
        uint64_t a = first > c0 ? first : c0, b = end < c1 ? end : c1;
        const uint8_t *src = c->buf + (a - c0) * esz;
        if (esz == 2)
            memcpy(out + (a - first), src, (b - a) * 2);
        else
            fg_f32_to_f16((const float *)src, out + (a - first), b - a, FG_QUANT_ISA_AUTO);
    }
    return FG_OK;
}

/* The model's tensors, from the store's config, when it holds a mixture of experts (the
 * tensors whose chunks must keep each expert whole, the routers kept 16-bit); *spec NULL and
 * *n 0 otherwise, or for a store without a model. */
static void moe_specs(fg_store *s, fg_tensor_spec **spec, uint32_t *n)
{
    void *data;
    size_t len;
    fg_hparams hp;
    fg_err e;
    *spec = NULL;
    *n = 0;
    if (fg_store_meta_get(s, "model.config_json", &data, &len, &e) != FG_OK)
        return;
    if (fg_model_config_parse(data, len, "model.config_json", &hp, &e) == FG_OK && hp.n_experts &&
        fg_model_tensors(&hp, spec, n, &e) != FG_OK)
        *spec = NULL, *n = 0;
    free(data);
}

static int copy_tensor(fgc_job *j, fg_store *s, const char *name, const fg_tensor_spec *sp,
                       fg_err *err)
{
    uint32_t blocks = sp ? sp->blocks : 0;
    fg_store_tensor *t;
    int rc = fg_store_tensor_get(s, name, &t, err);
    if (rc)
        return rc;
    if (t->codec.id != FG_CODEC_F16 && t->codec.id != FG_CODEC_F32 &&
        t->codec.id != FG_CODEC_BF16) {
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor '%s' is stored as %s; only F16, BF16 "
                        "and F32 tensors convert (re-quantizing 4-bit weights would lose accuracy "
                        "silently: convert the checkpoint instead)", fg_store_dir(s), name,
                        fg_codec_name(t->codec.id));
        fg_store_tensor_free(t);
        return rc;
    }
    st_ctx c = {s, t, 1, -1, "", NULL, 0, UINT32_MAX};
    for (uint32_t d = 1; d < t->n_dims; d++)
        c.cols *= t->dims[d];
    rc = fg_store_file_path(s, t->file_id, 0, c.path, sizeof c.path);
    if (rc == FG_OK)
        rc = fg_open_regular(c.path, O_RDONLY, &c.fd, err);
    else
        rc = fg_err_set(err, rc, "%s: tensor '%s': no path for weight file %u", fg_store_dir(s),
                        name, t->file_id);
    fgc_tensor_src src = {t->name, t->name, t->digest, t->n_dims,
                          {t->n_dims ? t->dims[0] : 1, t->n_dims > 1 ? t->dims[1] : 1},
                          t->codec.id == FG_CODEC_F32 ? 4 : 2,
                          t->codec.id == FG_CODEC_BF16 ? FG_CODEC_BF16 : FG_CODEC_F16, st_read,
                          &c, t->n_dims > 1 ? blocks : 0, sp && fg_role_stays_wide(sp->role)};
    if (rc == FG_OK && t->n_dims > 2)
        rc = fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor '%s' has %u dimensions (at most 2 "
                        "convert)", fg_store_dir(s), name, t->n_dims);
    if (rc == FG_OK)
        rc = fgc_write_tensor(j, &src, err);
    j->tensors += rc == FG_OK;
    if (c.fd >= 0)
        close(c.fd);
    free(c.buf);
    fg_store_tensor_free(t);
    return rc;
}

static int copy_meta(fgc_job *j, fg_store *s, const char *key, fg_err *err)
{
    void *data;
    size_t len;
    int rc = fg_store_meta_get(s, key, &data, &len, err);
    if (rc == FG_OK)
        rc = fg_store_batch_meta(j->batch, key, data, len, err);
    free(data);
    return rc;
}

int fg_convert_store(const char *src, const char *dst, const fg_convert_opts *o,
                     fg_convert_report *rep, fg_err *err)
{
    fg_store *s;
    int rc = fg_store_open(src, FG_STORE_RDONLY, NULL, &s, err);
    if (rc)
        return rc;
    names tn = {0}, mk = {0};
    rc = fg_store_tensor_iter(s, tensor_name, &tn, err);
    if (rc == FG_OK)
        rc = fg_store_meta_iter(s, meta_key, &mk, err);
    if (rc == 1)
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory listing the store", src);
    fg_store_info info;
    if (rc == FG_OK && (rc = fg_store_info_get(s, &info, err)) == FG_OK && tn.n == 0)
        rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: the store holds no tensors", src);
    fgc_job j;
    if (rc == FG_OK) {
        rc = fgc_begin(&j, dst, o, err);
        j.total = info.weight_bytes;
        for (uint32_t i = 0; rc == FG_OK && i < mk.n; i++)
            rc = copy_meta(&j, s, mk.v[i], err);
        fg_tensor_spec *spec;
        uint32_t n_spec;
        moe_specs(s, &spec, &n_spec);
        for (uint32_t i = 0; rc == FG_OK && i < tn.n; i++)
            rc = copy_tensor(&j, s, tn.v[i], fg_model_spec_find(spec, n_spec, tn.v[i]), err);
        free(spec);
        rc = fgc_end(&j, rc, rep, err);
    }
    free_names(&tn);
    free_names(&mk);
    fg_store_close(s);
    return rc;
}
