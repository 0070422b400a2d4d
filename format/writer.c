/* writer.c - streaming .fgt writer.
 *
 * Chunks go to the file as they arrive (pwrite at the next aligned offset, zero padding to the
 * alignment), so no tensor is ever held whole in memory; only the index entries (names, shapes,
 * 40 bytes per chunk) are kept. finish() makes the new state durable in this order:
 *   1. fdatasync: every chunk is on disk;
 *   2. write the index after the last chunk, fdatasync;
 *   3. write the superblock for generation g+1 into slot (g+1) % 2, fdatasync (and, for a new
 *      file, fsync the directory).
 * A crash before 3 completes leaves the previous superblock (or none, for a new file) as the
 * newest valid one, so no reader ever sees a half-written tensor. An appended generation writes
 * only past the previous data end, never over bytes an older generation references.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_bytes.h"
#include "fgt_int.h"

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

typedef struct wtensor {
    char *name, *source;
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[FG_FGT_MAX_DIMS];
    uint64_t source_hash;
    size_t first_chunk, n_chunks;
} wtensor;

struct fg_fgt_writer {
    int fd;
    char *path;
    int appending;
    uint64_t orig_size;     /* file size at open (append), restored by abort */
    uint64_t alignment;
    uint64_t generation;    /* of the previous superblock; 0 for a new file */
    uint64_t pos;           /* next chunk offset, aligned */
    wbuf meta;              /* encoded metadata entries */
    uint32_t n_meta;
    char **meta_keys;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    fg_fgt_chunk_info *chunks;
    size_t n_chunks, cap_chunks;
    int in_tensor;
    uint64_t rows_done, rows_total, row_quantum;
    /* name set: open addressing over tensor indices + 1 (0 = empty) */
    uint32_t *set;
    size_t set_cap;
    /* XXH3 of len zero bytes for the hole chunks' sizes (add_chunk with data NULL), computed
     * once a size: a tensor's chunks share one or two sizes */
    uint64_t zero_len[4], zero_hash[4];
    unsigned zero_next;
};

static int buf_reserve(wbuf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(wbuf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int buf_u8(wbuf *b, uint8_t v) { return buf_put(b, &v, 1); }
static int buf_u16(wbuf *b, uint16_t v) { uint8_t t[2]; fg_put16(t, v); return buf_put(b, t, 2); }
static int buf_u32(wbuf *b, uint32_t v) { uint8_t t[4]; fg_put32(t, v); return buf_put(b, t, 4); }
static int buf_u64(wbuf *b, uint64_t v) { uint8_t t[8]; fg_put64(t, v); return buf_put(b, t, 8); }

static int buf_name(wbuf *b, const char *s)
{
    size_t n = strlen(s);
    return buf_u16(b, (uint16_t)n) || buf_put(b, s, n);
}

static int write_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int io_fail(fg_fgt_writer *w, fg_err *err, int neg_errno, const char *what)
{
    int code = neg_errno == -ENOSPC ? FG_ERR_NO_SPACE : FG_ERR_IO;
    return fg_err_sys(err, code, -neg_errno, "%s: %s", w->path, what);
}

/* ---- name set (duplicate detection) ---- */

static size_t name_slot(const fg_fgt_writer *w, const char *name, int *found)
{
    size_t mask = w->set_cap - 1, i = (size_t)XXH3_64bits(name, strlen(name)) & mask;
    *found = 0;
    while (w->set[i]) {
        if (!strcmp(w->tensors[w->set[i] - 1].name, name)) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
    return i;
}

static int set_grow(fg_fgt_writer *w)
{
    size_t cap = w->set_cap ? w->set_cap * 2 : 64;
    uint32_t *old = w->set;
    size_t old_cap = w->set_cap;
    w->set = calloc(cap, sizeof *w->set);
    if (!w->set) {
        w->set = old;
        return -1;
    }
    w->set_cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i]) {
            int f;
            w->set[name_slot(w, w->tensors[old[i] - 1].name, &f)] = old[i];
        }
    }
    free(old);
    return 0;
}

/* Register tensor index t (already in w->tensors) in the name set. */
static int set_insert(fg_fgt_writer *w, size_t t)
{
    if ((t + 1) * 2 > w->set_cap && set_grow(w))
        return -1;
    int f;
    w->set[name_slot(w, w->tensors[t].name, &f)] = (uint32_t)(t + 1);
    return 0;
}

/* ---- create / append ---- */

static fg_fgt_writer *writer_new(const char *path)
{
    fg_fgt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = -1;
    w->path = strdup(path);
    if (!w->path) {
        free(w);
        return NULL;
    }
    return w;
}

static void writer_free(fg_fgt_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].source);
    }
    for (uint32_t i = 0; i < w->n_meta; i++)
        free(w->meta_keys[i]);
    free(w->meta_keys);
    free(w->tensors);
    free(w->chunks);
    free(w->meta.p);
    free(w->set);
    free(w->path);
    free(w);
}

int fg_fgt_writer_create(const char *path, const fg_fgt_writer_opts *opts, fg_fgt_writer **out,
                         fg_err *err)
{
    uint64_t align = opts && opts->alignment ? opts->alignment : 4096;
    if (align < (1u << FG_FGT_ALIGN_LOG2_MIN) || align > (1u << FG_FGT_ALIGN_LOG2_MAX) ||
        (align & (align - 1)))
        return fg_err_set(err, FG_ERR_BAD_ALIGN,
                          "%s: alignment %llu must be a power of two in [4096, 16777216]", path,
                          (unsigned long long)align);
    fg_fgt_writer *w = writer_new(path);
    if (!w)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    w->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        writer_free(w);
        return fg_err_sys(err, e == EEXIST ? FG_ERR_EXISTS : FG_ERR_IO, e, "%s: cannot create",
                          path);
    }
    w->alignment = align;
    w->pos = fgt_data_start(align);
    *out = w;
    return FG_OK;
}

/* Copy one metadata entry of the previous generation into w. */
static int append_copy_meta(fg_fgt_writer *w, const fg_meta_info *m, fg_err *err)
{
    switch (m->type) {
    case FG_META_U64: return fg_fgt_writer_meta_u64(w, m->key, m->u64, err);
    case FG_META_I64: return fg_fgt_writer_meta_i64(w, m->key, m->i64, err);
    case FG_META_F64: return fg_fgt_writer_meta_f64(w, m->key, m->f64, err);
    case FG_META_STRING: return fg_fgt_writer_meta_str(w, m->key, m->data, err);
    case FG_META_BYTES: return fg_fgt_writer_meta_bytes(w, m->key, m->data, m->len, err);
    default: break;
    }
    /* ARRAY: the encoded elements are copied verbatim (validated at open). */
    char *key = strdup(m->key);
    char **keys = realloc(w->meta_keys, (w->n_meta + 1) * sizeof *keys);
    if (!key || !keys) {
        free(key);
        if (keys)
            w->meta_keys = keys;
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta_keys = keys;
    if (buf_name(&w->meta, m->key) || buf_u8(&w->meta, FG_META_ARRAY) ||
        buf_u8(&w->meta, m->elem_type) || buf_u32(&w->meta, (uint32_t)m->len) ||
        buf_put(&w->meta, m->data, m->data_bytes)) {
        free(key);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta_keys[w->n_meta++] = key;
    return FG_OK;
}

static int append_copy_tensor(fg_fgt_writer *w, const fg_fgt_reader *r, uint32_t i, fg_err *err)
{
    fg_fgt_tensor_info ti;
    fg_fgt_tensor(r, i, &ti);
    fg_fgt_tensor_desc d = {ti.name, ti.codec, ti.n_dims, ti.dims, ti.source_name,
                            ti.source_hash};
    int rc = fg_fgt_writer_begin_tensor(w, &d, err);
    for (uint32_t c = 0; rc == FG_OK && c < ti.n_chunks; c++) {
        fg_fgt_chunk_info ci;
        fg_fgt_chunk(r, i, c, &ci);
        if (w->n_chunks == w->cap_chunks) {
            size_t cap = w->cap_chunks ? w->cap_chunks * 2 : 64;
            fg_fgt_chunk_info *p = realloc(w->chunks, cap * sizeof *p);
            if (!p)
                return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
            w->chunks = p;
            w->cap_chunks = cap;
        }
        w->chunks[w->n_chunks++] = ci;
        w->tensors[w->n_tensors - 1].n_chunks++;
        w->rows_done += ci.n_rows;
    }
    return rc ? rc : fg_fgt_writer_end_tensor(w, err);
}

int fg_fgt_writer_append(const char *path, fg_fgt_writer **out, fg_err *err)
{
    fg_fgt_reader *r;
    int rc = fg_fgt_open(path, 0, &r, err);
    if (rc)
        return rc;
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    fg_fgt_writer *w = writer_new(path);
    if (!w) {
        fg_fgt_close(r);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    }
    w->appending = 1;
    w->alignment = fi.alignment;
    w->generation = fi.generation;
    w->orig_size = fi.file_size;
    fg_align_up_u64(fi.data_end, fi.alignment, &w->pos);
    for (uint32_t i = 0; rc == FG_OK && i < fi.n_meta; i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        rc = append_copy_meta(w, &m, err);
    }
    for (uint32_t i = 0; rc == FG_OK && i < fi.n_tensors; i++)
        rc = append_copy_tensor(w, r, i, err);
    fg_fgt_close(r);
    if (rc == FG_OK) {
        w->fd = open(path, O_RDWR | O_CLOEXEC);
        if (w->fd < 0)
            rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for append", path);
    }
    if (rc) {
        writer_free(w);
        return rc;
    }
    *out = w;
    return FG_OK;
}

/* ---- metadata ---- */

static int meta_begin(fg_fgt_writer *w, const char *key, uint8_t type, fg_err *err)
{
    int rc = fgt_check_name((const uint8_t *)key, strlen(key), 0);
    if (rc)
        return fg_err_set(err, rc, "%s: metadata key '%.64s' is empty, too long or not UTF-8",
                          w->path, key);
    if (w->n_meta >= FG_FGT_MAX_META)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u metadata entries", w->path,
                          FG_FGT_MAX_META);
    for (uint32_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta_keys[i], key))
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: metadata key '%s' set twice", w->path,
                              key);
    char **keys = realloc(w->meta_keys, (w->n_meta + 1) * sizeof *keys);
    if (!keys)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    w->meta_keys = keys;
    if (!(keys[w->n_meta] = strdup(key)) || buf_name(&w->meta, key) || buf_u8(&w->meta, type)) {
        free(keys[w->n_meta]);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->n_meta++;
    return FG_OK;
}

static int meta_scalar(fg_fgt_writer *w, const char *key, uint8_t type, uint64_t v, fg_err *err)
{
    int rc = meta_begin(w, key, type, err);
    if (rc == FG_OK && buf_u64(&w->meta, v))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    return rc;
}

int fg_fgt_writer_meta_u64(fg_fgt_writer *w, const char *key, uint64_t v, fg_err *err)
{
    return meta_scalar(w, key, FG_META_U64, v, err);
}

int fg_fgt_writer_meta_i64(fg_fgt_writer *w, const char *key, int64_t v, fg_err *err)
{
    return meta_scalar(w, key, FG_META_I64, (uint64_t)v, err);
}

int fg_fgt_writer_meta_f64(fg_fgt_writer *w, const char *key, double v, fg_err *err)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    return meta_scalar(w, key, FG_META_F64, bits, err);
}

static int meta_blob(fg_fgt_writer *w, const char *key, uint8_t type, const void *p, size_t len,
                     fg_err *err)
{
    if (len > FG_FGT_MAX_BLOB)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s' is %zu bytes (limit %u)",
                          w->path, key, len, FG_FGT_MAX_BLOB);
    if (type == FG_META_STRING && !fgt_utf8_valid(p, len))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: metadata '%s' is not valid UTF-8",
                          w->path, key);
    int rc = meta_begin(w, key, type, err);
    if (rc == FG_OK && (buf_u32(&w->meta, (uint32_t)len) || buf_put(&w->meta, p, len)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    return rc;
}

int fg_fgt_writer_meta_str(fg_fgt_writer *w, const char *key, const char *s, fg_err *err)
{
    return meta_blob(w, key, FG_META_STRING, s, strlen(s), err);
}

int fg_fgt_writer_meta_bytes(fg_fgt_writer *w, const char *key, const void *p, size_t len,
                             fg_err *err)
{
    return meta_blob(w, key, FG_META_BYTES, p, len, err);
}

int fg_fgt_writer_meta_array(fg_fgt_writer *w, const char *key, uint8_t elem_type,
                             const uint64_t *v, size_t count, fg_err *err)
{
    if (elem_type < FG_META_U64 || elem_type > FG_META_F64)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: metadata '%s': array element type %u",
                          w->path, key, elem_type);
    if (count > FG_FGT_MAX_ARRAY)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s': %zu elements (limit %u)",
                          w->path, key, count, FG_FGT_MAX_ARRAY);
    int rc = meta_begin(w, key, FG_META_ARRAY, err);
    if (rc)
        return rc;
    int bad = buf_u8(&w->meta, elem_type) || buf_u32(&w->meta, (uint32_t)count);
    for (size_t i = 0; !bad && i < count; i++)
        bad = buf_u64(&w->meta, v[i]);
    return bad ? fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path) : FG_OK;
}

int fg_fgt_writer_meta_str_array(fg_fgt_writer *w, const char *key, const char *const *s,
                                 size_t count, fg_err *err)
{
    if (count > FG_FGT_MAX_ARRAY)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s': %zu elements (limit %u)",
                          w->path, key, count, FG_FGT_MAX_ARRAY);
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(s[i]);
        if (n > FG_FGT_MAX_BLOB || !fgt_utf8_valid((const uint8_t *)s[i], n))
            return fg_err_set(err, FG_ERR_INVALID_ARG,
                              "%s: metadata '%s': element %zu too long or not UTF-8", w->path,
                              key, i);
    }
    int rc = meta_begin(w, key, FG_META_ARRAY, err);
    if (rc)
        return rc;
    int bad = buf_u8(&w->meta, FG_META_STRING) || buf_u32(&w->meta, (uint32_t)count);
    for (size_t i = 0; !bad && i < count; i++) {
        size_t n = strlen(s[i]);
        bad = buf_u32(&w->meta, (uint32_t)n) || buf_put(&w->meta, s[i], n);
    }
    return bad ? fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path) : FG_OK;
}

/* ---- tensors ---- */

static int check_desc(fg_fgt_writer *w, const fg_fgt_tensor_desc *d, uint64_t *rows, fg_err *err)
{
    const char *src = d->source_name ? d->source_name : "";
    if (fgt_check_name((const uint8_t *)d->name, strlen(d->name), 0) ||
        fgt_check_name((const uint8_t *)src, strlen(src), 1))
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor name '%.64s' or its source name is "
                          "empty, too long or not UTF-8", w->path, d->name);
    if (d->n_dims > FG_FGT_MAX_DIMS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s' has %u dims (limit %u)", w->path,
                          d->name, d->n_dims, FG_FGT_MAX_DIMS);
    uint64_t n = 1;
    for (uint32_t i = 0; i < d->n_dims; i++) {
        if (d->dims[i] > FG_FGT_MAX_DIM || fg_mul_u64(n, d->dims[i], &n) ||
            n > FG_FGT_MAX_ELEMENTS)
            return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s' is too large", w->path,
                              d->name);
    }
    fg_err cerr;
    if (fg_codec_validate(&d->codec, d->n_dims, &cerr))
        return fg_err_set(err, cerr.code, "%s: tensor '%s': %s", w->path, d->name, cerr.msg);
    if (w->n_tensors >= FG_FGT_MAX_TENSORS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u tensors", w->path,
                          FG_FGT_MAX_TENSORS);
    *rows = n == 0 ? 0 : d->n_dims ? d->dims[0] : 1;
    return FG_OK;
}

int fg_fgt_writer_begin_tensor(fg_fgt_writer *w, const fg_fgt_tensor_desc *d, fg_err *err)
{
    if (w->in_tensor)
        return fg_err_set(err, FG_ERR_STATE, "%s: begin_tensor('%s') inside another tensor",
                          w->path, d->name);
    uint64_t rows;
    int rc = check_desc(w, d, &rows, err);
    if (rc)
        return rc;
    if (w->set_cap) {
        int found;
        name_slot(w, d->name, &found);
        if (found)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor '%s' added twice", w->path,
                              d->name);
    }
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor *p = realloc(w->tensors, cap * sizeof *p);
        if (!p)
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
        w->tensors = p;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(d->name);
    t->source = strdup(d->source_name ? d->source_name : "");
    if (!t->name || !t->source) {
        free(t->name);
        free(t->source);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    t->codec = d->codec;
    t->n_dims = d->n_dims;
    memcpy(t->dims, d->dims, d->n_dims * sizeof *d->dims);
    t->source_hash = d->source_hash;
    t->first_chunk = w->n_chunks;
    w->n_tensors++;
    if (set_insert(w, w->n_tensors - 1)) {
        w->n_tensors--;
        free(t->name);
        free(t->source);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->in_tensor = 1;
    w->rows_done = 0;
    w->rows_total = rows;
    w->row_quantum = fg_codec_row_quantum(&d->codec, d->n_dims);
    return FG_OK;
}

static int check_chunk(fg_fgt_writer *w, const wtensor *t, uint64_t n_rows, size_t len,
                       fg_err *err)
{
    if (!w->in_tensor)
        return fg_err_set(err, FG_ERR_STATE, "%s: add_chunk outside a tensor", w->path);
    if (n_rows == 0 || n_rows > w->rows_total - w->rows_done)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "%s: tensor '%s': chunk of %llu rows at row %llu of %llu", w->path,
                          t->name, (unsigned long long)n_rows, (unsigned long long)w->rows_done,
                          (unsigned long long)w->rows_total);
    if (w->rows_done + n_rows < w->rows_total && n_rows % w->row_quantum)
        return fg_err_set(err, FG_ERR_BAD_ALIGN,
                          "%s: tensor '%s': chunk rows %llu not a multiple of the group size %llu",
                          w->path, t->name, (unsigned long long)n_rows,
                          (unsigned long long)w->row_quantum);
    uint64_t want;
    int rc = fg_codec_chunk_bytes(&t->codec, t->n_dims, t->dims, n_rows, &want, err);
    if (rc)
        return rc;
    if (want != len)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH,
                          "%s: tensor '%s': chunk of %llu rows must be %llu bytes, got %zu",
                          w->path, t->name, (unsigned long long)n_rows,
                          (unsigned long long)want, len);
    if (len > FG_FGT_MAX_CHUNK_BYTES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s': chunk of %zu bytes (limit %llu)",
                          w->path, t->name, len, (unsigned long long)FG_FGT_MAX_CHUNK_BYTES);
    if (w->n_chunks >= FG_FGT_MAX_CHUNKS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %u chunks", w->path,
                          FG_FGT_MAX_CHUNKS);
    return FG_OK;
}

static int write_padding(fg_fgt_writer *w, uint64_t from, uint64_t to)
{
    static const uint8_t zeros[65536];
    while (from < to) {
        size_t n = to - from > sizeof zeros ? sizeof zeros : (size_t)(to - from);
        int e = write_all(w->fd, zeros, n, from);
        if (e)
            return e;
        from += n;
    }
    return 0;
}

/* XXH3 of len zero bytes into *h, from w's cache or hashed once (calloc's zero pages);
 * -1 when out of memory. */
static int zero_hash(fg_fgt_writer *w, size_t len, uint64_t *h)
{
    for (unsigned i = 0; i < 4; i++)
        if (w->zero_len[i] == len && w->zero_hash[i]) {
            *h = w->zero_hash[i];
            return 0;
        }
    void *z = calloc(1, len ? len : 1);
    if (!z)
        return -1;
    *h = XXH3_64bits(z, len);
    free(z);
    unsigned k = w->zero_next++ % 4;
    w->zero_len[k] = len;
    w->zero_hash[k] = *h;
    return 0;
}

int fg_fgt_writer_add_chunk(fg_fgt_writer *w, uint64_t n_rows, const void *data, size_t len,
                            fg_err *err)
{
    wtensor *t = w->in_tensor ? &w->tensors[w->n_tensors - 1] : NULL;
    int rc = check_chunk(w, t, n_rows, len, err);
    if (rc)
        return rc;
    if (w->n_chunks == w->cap_chunks) {
        size_t cap = w->cap_chunks ? w->cap_chunks * 2 : 64;
        fg_fgt_chunk_info *p = realloc(w->chunks, cap * sizeof *p);
        if (!p)
            return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
        w->chunks = p;
        w->cap_chunks = cap;
    }
    uint64_t end, h = 0;
    if (fg_align_up_u64(w->pos + len, w->alignment, &end))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: file offset overflows", w->path);
    if (!data && zero_hash(w, len, &h))
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    /* data NULL: len zero bytes left as a hole (nothing written; the index written after it
     * extends the file over it), which reads back as zeros */
    int e = data ? write_all(w->fd, data, len, w->pos) : 0;
    if (!e && data)
        e = write_padding(w, w->pos + len, end);
    if (e)
        return io_fail(w, err, e, "writing a chunk");
    fg_fgt_chunk_info *c = &w->chunks[w->n_chunks++];
    c->offset = w->pos;
    c->length = len;
    c->first_row = w->rows_done;
    c->n_rows = n_rows;
    c->xxh3 = data ? XXH3_64bits(data, len) : h;
    t->n_chunks++;
    w->rows_done += n_rows;
    w->pos = end;
    return FG_OK;
}

int fg_fgt_writer_end_tensor(fg_fgt_writer *w, fg_err *err)
{
    if (!w->in_tensor)
        return fg_err_set(err, FG_ERR_STATE, "%s: end_tensor without begin_tensor", w->path);
    const wtensor *t = &w->tensors[w->n_tensors - 1];
    if (w->rows_done != w->rows_total)
        return fg_err_set(err, FG_ERR_STATE, "%s: tensor '%s' ended after %llu of %llu rows",
                          w->path, t->name, (unsigned long long)w->rows_done,
                          (unsigned long long)w->rows_total);
    w->in_tensor = 0;
    return FG_OK;
}

int fg_fgt_writer_reserve(fg_fgt_writer *w, uint64_t bytes, fg_err *err)
{
    uint64_t end;
    if (fg_add_u64(w->pos, bytes, &end) || fg_align_up_u64(end, w->alignment, &end))
        return fg_err_set(err, FG_ERR_OVERFLOW, "%s: file offset overflows", w->path);
    w->pos = end;
    return FG_OK;
}

/* ---- finish ---- */

static int encode_index(const fg_fgt_writer *w, wbuf *b)
{
    uint8_t hdr[FGT_INDEX_HEADER_SIZE] = {0};
    memcpy(hdr, FGT_INDEX_MAGIC, 4);
    fg_put32(hdr + 8, w->n_meta);
    fg_put32(hdr + 12, (uint32_t)w->n_tensors);
    fg_put64(hdr + 16, w->n_chunks);
    if (buf_put(b, hdr, sizeof hdr) || buf_put(b, w->meta.p, w->meta.len))
        return -1;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint8_t codec[FGT_CODEC_SIZE];
        fgt_codec_encode(&t->codec, codec);
        if (buf_name(b, t->name) || buf_put(b, codec, sizeof codec) || buf_u8(b, (uint8_t)t->n_dims))
            return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (buf_u64(b, t->dims[d]))
                return -1;
        if (buf_name(b, t->source) || buf_u64(b, t->source_hash) ||
            buf_u32(b, (uint32_t)t->n_chunks))
            return -1;
        for (size_t c = t->first_chunk; c < t->first_chunk + t->n_chunks; c++) {
            const fg_fgt_chunk_info *ci = &w->chunks[c];
            if (buf_u64(b, ci->offset) || buf_u64(b, ci->length) || buf_u64(b, ci->first_row) ||
                buf_u64(b, ci->n_rows) || buf_u64(b, ci->xxh3))
                return -1;
        }
    }
    return 0;
}

static void encode_superblock(const fg_fgt_writer *w, const wbuf *index, uint8_t sb[128])
{
    memset(sb, 0, FG_FGT_SUPERBLOCK_SIZE);
    memcpy(sb + SB_MAGIC, FGT_MAGIC, 8);
    fg_put32(sb + SB_ENDIAN, FGT_ENDIAN_MARKER);
    fg_put16(sb + SB_VMAJOR, FG_FGT_VERSION_MAJOR);
    fg_put16(sb + SB_VMINOR, FG_FGT_VERSION_MINOR);
    fg_put32(sb + SB_SIZE, FG_FGT_SUPERBLOCK_SIZE);
    fg_put32(sb + SB_ALIGN_LOG2, (uint32_t)__builtin_ctzll(w->alignment));
    fg_put64(sb + SB_GENERATION, w->generation + 1);
    fg_put64(sb + SB_INDEX_OFF, w->pos);
    fg_put64(sb + SB_INDEX_LEN, index->len);
    fg_put64(sb + SB_INDEX_XXH3, XXH3_64bits(index->p, index->len));
    fg_put64(sb + SB_DATA_END, w->pos + index->len);
    fg_put64(sb + SB_XXH3, XXH3_64bits(sb, SB_XXH3));
}

static int sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -ENOMEM;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

static int publish(fg_fgt_writer *w, fg_err *err)
{
    wbuf index = {0};
    if (encode_index(w, &index)) {
        free(index.p);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    if (index.len > FG_FGT_MAX_INDEX) {
        free(index.p);
        return fg_err_set(err, FG_ERR_LIMIT, "%s: index of %zu bytes (limit %llu)", w->path,
                          index.len, (unsigned long long)FG_FGT_MAX_INDEX);
    }
    uint8_t sb[FG_FGT_SUPERBLOCK_SIZE];
    encode_superblock(w, &index, sb);
    uint64_t slot = ((w->generation + 1) % 2) * FG_FGT_SLOT_SIZE;
    int e = fdatasync(w->fd) ? -errno : 0;
    if (!e)
        e = write_all(w->fd, index.p, index.len, w->pos);
    if (!e)
        e = fdatasync(w->fd) ? -errno : 0;
    if (!e)
        e = write_all(w->fd, sb, sizeof sb, slot);
    if (!e)
        e = fdatasync(w->fd) ? -errno : 0;
    if (!e && !w->appending)
        e = sync_dir(w->path);
    free(index.p);
    return e ? io_fail(w, err, e, "publishing") : FG_OK;
}

int fg_fgt_writer_finish(fg_fgt_writer *w, fg_err *err)
{
    if (!w)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "finish: NULL writer");
    int rc;
    if (w->in_tensor)
        rc = fg_err_set(err, FG_ERR_STATE, "%s: finish inside tensor '%s'", w->path,
                        w->tensors[w->n_tensors - 1].name);
    else
        rc = publish(w, err);
    if (rc) {
        fg_fgt_writer_abort(w);
        return rc;
    }
    writer_free(w);
    return FG_OK;
}

void fg_fgt_writer_abort(fg_fgt_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        if (w->appending) {
            if (ftruncate(w->fd, (off_t)w->orig_size) == 0)
                (void)fdatasync(w->fd);
        } else {
            unlink(w->path);
        }
    }
    writer_free(w);
}
