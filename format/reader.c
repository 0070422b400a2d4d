/* reader.c - validating .fgt reader over an mmap'd file or a memory buffer.
 *
 * Nothing read from the file is trusted before it is checked. The order is fixed (SPEC 7):
 * superblock slots (pick the valid one with the highest generation), index checksum, index
 * header counts against the bytes that remain (before any allocation sized by them), then each
 * metadata entry and tensor entry through a bounds-checked cursor, then the cross-entry rules
 * (duplicate names, overlapping ranges). All size arithmetic is overflow-checked. Every
 * failure returns an fg_status with a message naming the file, tensor and chunk; nothing
 * asserts or aborts on file content.
 *
 * Memory: the reader allocates tables bounded by the index length (itself bounded by the file),
 * and copies names and strings into one arena so the API can hand out NUL-terminated strings.
 * Chunk data are zero-copy views into the mapping.
 *
 * The mapping is MAP_SHARED and read-only: a file truncated by another process while mapped
 * makes later accesses fault (SIGBUS), as with every mmap reader; fg's writers never truncate a
 * published file (append only adds bytes past data_end).
 *
 * Fuzzing builds (FG_FUZZING) still compute checksums but ignore mismatches, so the fuzzer can
 * reach the structural checks behind them; production builds never do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_file.h"
#include "fg_bytes.h"
#include "fgt_int.h"

#ifdef FG_FUZZING
#define CHECKSUM_BAD(a, b) ((void)((a) != (b)), 0)
#else
#define CHECKSUM_BAD(a, b) ((a) != (b))
#endif

typedef struct rtensor {
    const char *name, *source;
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[FG_FGT_MAX_DIMS];
    uint64_t n_elements, payload_bytes, source_hash;
    uint32_t n_chunks;
    uint64_t first_chunk;
} rtensor;

struct fg_fgt_reader {
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we own an mmap */
    char label[256];
    fg_fgt_file_info info;
    fg_meta_info *meta;
    rtensor *tensors;
    uint32_t *sorted;      /* tensor indices sorted by name */
    uint32_t *meta_sorted; /* metadata indices sorted by key */
    fg_fgt_chunk_info *chunks;
    char *arena;
    size_t arena_len, arena_cap;
};

/* ---- bounded cursor over the index ---- */

typedef struct cursor {
    const uint8_t *p, *start, *end;
} cursor;

static int need(fg_fgt_reader *r, cursor *c, uint64_t n, const char *what, fg_err *err)
{
    if ((uint64_t)(c->end - c->p) < n)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: index truncated reading %s at index byte %zu",
                          r->label, what, (size_t)(c->p - c->start));
    return FG_OK;
}

static char *arena_copy(fg_fgt_reader *r, const uint8_t *s, size_t n)
{
    char *d = r->arena + r->arena_len;
    memcpy(d, s, n);
    d[n] = '\0';
    r->arena_len += n + 1;
    return d;
}

/* Read a u16-length name; kind names it in messages. */
static int read_name(fg_fgt_reader *r, cursor *c, int allow_empty, const char *kind,
                     const char **out, fg_err *err)
{
    int rc = need(r, c, 2, kind, err);
    if (rc)
        return rc;
    uint16_t n = fg_le16(c->p);
    c->p += 2;
    if ((rc = need(r, c, n, kind, err)))
        return rc;
    rc = fgt_check_name(c->p, n, allow_empty);
    if (rc)
        return fg_err_set(err, rc, "%s: %s at index byte %zu: %s (%u bytes, limit %u, UTF-8, "
                          "no control characters)", r->label, kind, (size_t)(c->p - c->start),
                          rc == FG_ERR_LIMIT ? "too long" : "invalid", n, FG_FGT_MAX_NAME);
    *out = arena_copy(r, c->p, n);
    c->p += n;
    return FG_OK;
}

/* ---- superblock ---- */

typedef struct sbinfo {
    uint32_t align_log2;
    uint64_t generation, index_off, index_len, index_xxh3, data_end;
    uint16_t vmajor, vminor;
} sbinfo;

static int sb_fields(const uint8_t *sb, uint64_t file_size, sbinfo *s, fg_err *err)
{
    s->align_log2 = fg_le32(sb + SB_ALIGN_LOG2);
    s->generation = fg_le64(sb + SB_GENERATION);
    s->index_off = fg_le64(sb + SB_INDEX_OFF);
    s->index_len = fg_le64(sb + SB_INDEX_LEN);
    s->index_xxh3 = fg_le64(sb + SB_INDEX_XXH3);
    s->data_end = fg_le64(sb + SB_DATA_END);
    if (fg_le64(sb + SB_FLAGS))
        return fg_err_set(err, FG_ERR_BAD_ENUM, "unknown flags 0x%llx",
                          (unsigned long long)fg_le64(sb + SB_FLAGS));
    for (int i = SB_RESERVED; i < SB_XXH3; i++)
        if (sb[i])
            return fg_err_set(err, FG_ERR_RESERVED, "reserved byte %d not zero", i);
    if (s->align_log2 < FG_FGT_ALIGN_LOG2_MIN || s->align_log2 > FG_FGT_ALIGN_LOG2_MAX)
        return fg_err_set(err, FG_ERR_BAD_ALIGN, "alignment 2^%u outside [2^%d, 2^%d]",
                          s->align_log2, FG_FGT_ALIGN_LOG2_MIN, FG_FGT_ALIGN_LOG2_MAX);
    if (s->generation == 0)
        return fg_err_set(err, FG_ERR_CORRUPT, "generation 0");
    uint64_t align = 1ull << s->align_log2, iend;
    if (s->index_off % align)
        return fg_err_set(err, FG_ERR_BAD_ALIGN, "index offset %llu not a multiple of %llu",
                          (unsigned long long)s->index_off, (unsigned long long)align);
    if (s->index_len < FGT_INDEX_HEADER_SIZE)
        return fg_err_set(err, FG_ERR_TRUNCATED, "index length %llu",
                          (unsigned long long)s->index_len);
    if (s->index_len > FG_FGT_MAX_INDEX)
        return fg_err_set(err, FG_ERR_LIMIT, "index length %llu (limit %llu)",
                          (unsigned long long)s->index_len, (unsigned long long)FG_FGT_MAX_INDEX);
    if (fg_add_u64(s->index_off, s->index_len, &iend))
        return fg_err_set(err, FG_ERR_OVERFLOW, "index offset + length overflows");
    if (s->index_off < fgt_data_start(align) || iend > s->data_end)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "index [%llu, %llu) outside the data region "
                          "[%llu, %llu)", (unsigned long long)s->index_off,
                          (unsigned long long)iend, (unsigned long long)fgt_data_start(align),
                          (unsigned long long)s->data_end);
    if (s->data_end > file_size)
        return fg_err_set(err, FG_ERR_TRUNCATED, "data end %llu past the file's %llu bytes",
                          (unsigned long long)s->data_end, (unsigned long long)file_size);
    return FG_OK;
}

static int parse_slot(const uint8_t *sb, uint64_t file_size, sbinfo *s, fg_err *err)
{
    if (memcmp(sb + SB_MAGIC, FGT_MAGIC, 8))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "bad magic");
    if (fg_le32(sb + SB_ENDIAN) != FGT_ENDIAN_MARKER)
        return fg_err_set(err, FG_ERR_BAD_ENDIAN, "endianness marker 0x%08x",
                          fg_le32(sb + SB_ENDIAN));
    if (CHECKSUM_BAD(fg_le64(sb + SB_XXH3), XXH3_64bits(sb, SB_XXH3)))
        return fg_err_set(err, FG_ERR_CHECKSUM, "superblock checksum mismatch (torn write?)");
    s->vmajor = fg_le16(sb + SB_VMAJOR);
    s->vminor = fg_le16(sb + SB_VMINOR);
    if (s->vmajor != FG_FGT_VERSION_MAJOR)
        return fg_err_set(err, FG_ERR_VERSION, "format version %u.%u (this reader reads %d.x)",
                          s->vmajor, s->vminor, FG_FGT_VERSION_MAJOR);
    if (fg_le32(sb + SB_SIZE) != FG_FGT_SUPERBLOCK_SIZE)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "superblock size %u",
                          fg_le32(sb + SB_SIZE));
    return sb_fields(sb, file_size, s, err);
}

static int pick_superblock(fg_fgt_reader *r, sbinfo *s, fg_err *err)
{
    sbinfo cand[2];
    fg_err e[2];
    int ok[2];
    for (int i = 0; i < 2; i++)
        ok[i] = parse_slot(r->base + (size_t)i * FG_FGT_SLOT_SIZE, r->size, &cand[i], &e[i]) == 0;
    int pick = ok[0] && ok[1] ? (cand[1].generation > cand[0].generation) : ok[1] ? 1 : 0;
    if (!ok[pick]) {
        /* Report the more informative failure: one that got past the magic. */
        int code = e[0].code != FG_ERR_BAD_MAGIC ? e[0].code : e[1].code;
        return fg_err_set(err, code, "%s: no valid superblock (slot 0: %s; slot 1: %s)", r->label,
                          e[0].msg, e[1].msg);
    }
    *s = cand[pick];
    r->info.slot = pick;
    return FG_OK;
}

/* ---- metadata ---- */

static int read_meta_value(fg_fgt_reader *r, cursor *c, fg_meta_info *m, uint8_t type, fg_err *err)
{
    int rc;
    if (type <= FG_META_F64) {
        if ((rc = need(r, c, 8, m->key, err)))
            return rc;
        m->u64 = fg_le64(c->p);
        m->i64 = (int64_t)m->u64;
        memcpy(&m->f64, &m->u64, 8);
        c->p += 8;
        return FG_OK;
    }
    if ((rc = need(r, c, 4, m->key, err)))
        return rc;
    uint32_t n = fg_le32(c->p);
    c->p += 4;
    if (n > FG_FGT_MAX_BLOB)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s': %u bytes (limit %u)", r->label,
                          m->key, n, FG_FGT_MAX_BLOB);
    if ((rc = need(r, c, n, m->key, err)))
        return rc;
    if (type == FG_META_STRING && !fgt_utf8_valid(c->p, n))
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: metadata '%s': string is not UTF-8",
                          r->label, m->key);
    m->data = type == FG_META_STRING ? (const void *)arena_copy(r, c->p, n) : c->p;
    m->len = n;
    c->p += n;
    return FG_OK;
}

static int read_meta_array(fg_fgt_reader *r, cursor *c, fg_meta_info *m, fg_err *err)
{
    int rc = need(r, c, 5, m->key, err);
    if (rc)
        return rc;
    m->elem_type = c->p[0];
    uint32_t count = fg_le32(c->p + 1);
    c->p += 5;
    if (m->elem_type < FG_META_U64 || m->elem_type > FG_META_STRING)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: metadata '%s': array element type %u",
                          r->label, m->key, m->elem_type);
    if (count > FG_FGT_MAX_ARRAY)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s': %u elements (limit %u)",
                          r->label, m->key, count, FG_FGT_MAX_ARRAY);
    m->data = c->p;
    m->len = count;
    if (m->elem_type != FG_META_STRING) {
        /* count <= 2^24, so count * 8 cannot overflow */
        if ((rc = need(r, c, (uint64_t)count * 8, m->key, err)))
            return rc;
        c->p += (size_t)count * 8;
    } else {
        for (uint32_t i = 0; i < count; i++) {
            if ((rc = need(r, c, 4, m->key, err)))
                return rc;
            uint32_t n = fg_le32(c->p);
            c->p += 4;
            if (n > FG_FGT_MAX_BLOB)
                return fg_err_set(err, FG_ERR_LIMIT, "%s: metadata '%s': element %u of %u bytes",
                                  r->label, m->key, i, n);
            if ((rc = need(r, c, n, m->key, err)))
                return rc;
            if (!fgt_utf8_valid(c->p, n))
                return fg_err_set(err, FG_ERR_BAD_NAME,
                                  "%s: metadata '%s': element %u is not UTF-8", r->label, m->key, i);
            c->p += n;
        }
    }
    m->data_bytes = (uint64_t)(c->p - (const uint8_t *)m->data);
    return FG_OK;
}

static int read_meta(fg_fgt_reader *r, cursor *c, fg_meta_info *m, fg_err *err)
{
    memset(m, 0, sizeof *m);
    int rc = read_name(r, c, 0, "metadata key", &m->key, err);
    if (rc || (rc = need(r, c, 1, m->key, err)))
        return rc;
    m->type = *c->p++;
    if (m->type < FG_META_U64 || m->type > FG_META_ARRAY)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: metadata '%s': type %u unknown", r->label,
                          m->key, m->type);
    return m->type == FG_META_ARRAY ? read_meta_array(r, c, m, err)
                                    : read_meta_value(r, c, m, m->type, err);
}

/* ---- tensors and chunks ---- */

static int read_shape(fg_fgt_reader *r, cursor *c, rtensor *t, fg_err *err)
{
    uint8_t codec[FGT_CODEC_SIZE];
    uint16_t reserved;
    int rc = need(r, c, FGT_CODEC_SIZE + 1, t->name, err);
    if (rc)
        return rc;
    memcpy(codec, c->p, sizeof codec);
    fgt_codec_decode(codec, &t->codec, &reserved);
    t->n_dims = c->p[FGT_CODEC_SIZE];
    c->p += FGT_CODEC_SIZE + 1;
    if (reserved)
        return fg_err_set(err, FG_ERR_RESERVED, "%s: tensor '%s': codec reserved field not zero",
                          r->label, t->name);
    if (t->n_dims > FG_FGT_MAX_DIMS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s': %u dims (limit %u)", r->label,
                          t->name, t->n_dims, FG_FGT_MAX_DIMS);
    if ((rc = need(r, c, 8ull * t->n_dims, t->name, err)))
        return rc;
    t->n_elements = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        t->dims[d] = fg_le64(c->p + 8 * d);
        if (t->dims[d] > FG_FGT_MAX_DIM)
            return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s': dim %u is %llu (limit 2^40)",
                              r->label, t->name, d, (unsigned long long)t->dims[d]);
        if (fg_mul_u64(t->n_elements, t->dims[d], &t->n_elements))
            return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor '%s': element count overflows",
                              r->label, t->name);
    }
    c->p += 8 * t->n_dims;
    if (t->n_elements > FG_FGT_MAX_ELEMENTS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: tensor '%s': %llu elements (limit 2^48)",
                          r->label, t->name, (unsigned long long)t->n_elements);
    fg_err cerr;
    if ((rc = fg_codec_validate(&t->codec, t->n_dims, &cerr)))
        return fg_err_set(err, rc, "%s: tensor '%s': %s", r->label, t->name, cerr.msg);
    return FG_OK;
}

static int check_chunk(fg_fgt_reader *r, const rtensor *t, uint32_t i, const fg_fgt_chunk_info *ch,
                       uint64_t expect_row, uint64_t rows, fg_err *err)
{
    uint64_t align = r->info.alignment, end, want;
#define CHUNK_ERR(code, ...)                                                                     \
    do {                                                                                         \
        char why_[FG_ERR_MSG_MAX];                                                                          \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                \
        return fg_err_set(err, code, "%s: tensor '%s' chunk %u: %s", r->label, t->name, i,      \
                          why_);                                                                 \
    } while (0)
    if (ch->offset % align)
        CHUNK_ERR(FG_ERR_BAD_ALIGN, "offset %llu not a multiple of %llu",
                  (unsigned long long)ch->offset, (unsigned long long)align);
    if (ch->length == 0)
        CHUNK_ERR(FG_ERR_SIZE_MISMATCH, "length 0");
    if (ch->length > FG_FGT_MAX_CHUNK_BYTES)
        CHUNK_ERR(FG_ERR_LIMIT, "length %llu (limit 2^30)", (unsigned long long)ch->length);
    if (fg_add_u64(ch->offset, ch->length, &end))
        CHUNK_ERR(FG_ERR_OVERFLOW, "offset + length overflows");
    if (ch->offset < fgt_data_start(align) || end > r->info.data_end)
        CHUNK_ERR(FG_ERR_OUT_OF_BOUNDS, "[%llu, %llu) outside the data region",
                  (unsigned long long)ch->offset, (unsigned long long)end);
    if (ch->first_row != expect_row)
        CHUNK_ERR(FG_ERR_CORRUPT, "first row %llu, expected %llu",
                  (unsigned long long)ch->first_row, (unsigned long long)expect_row);
    if (ch->n_rows == 0 || ch->n_rows > rows - expect_row)
        CHUNK_ERR(FG_ERR_OUT_OF_BOUNDS, "%llu rows from row %llu of %llu",
                  (unsigned long long)ch->n_rows, (unsigned long long)expect_row,
                  (unsigned long long)rows);
    uint64_t q = fg_codec_row_quantum(&t->codec, t->n_dims);
    if (expect_row + ch->n_rows < rows && ch->n_rows % q)
        CHUNK_ERR(FG_ERR_BAD_ALIGN, "%llu rows, not a multiple of the group size %llu",
                  (unsigned long long)ch->n_rows, (unsigned long long)q);
    fg_err cerr;
    int rc = fg_codec_chunk_bytes(&t->codec, t->n_dims, t->dims, ch->n_rows, &want, &cerr);
    if (rc)
        CHUNK_ERR(rc, "%s", cerr.msg);
    if (want != ch->length)
        CHUNK_ERR(FG_ERR_SIZE_MISMATCH, "length %llu, codec %s needs %llu for %llu rows",
                  (unsigned long long)ch->length, fg_codec_name(t->codec.id),
                  (unsigned long long)want, (unsigned long long)ch->n_rows);
#undef CHUNK_ERR
    return FG_OK;
}

static int read_chunks(fg_fgt_reader *r, cursor *c, rtensor *t, uint64_t *chunk_pos,
                       fg_err *err)
{
    int rc = need(r, c, 4, t->name, err);
    if (rc)
        return rc;
    t->n_chunks = fg_le32(c->p);
    c->p += 4;
    if (t->n_chunks > r->info.n_chunks - *chunk_pos)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH,
                          "%s: tensor '%s': %u chunks exceed the header's total of %llu", r->label,
                          t->name, t->n_chunks, (unsigned long long)r->info.n_chunks);
    if ((rc = need(r, c, (uint64_t)t->n_chunks * FGT_CHUNK_ENTRY_SIZE, t->name, err)))
        return rc;
    uint64_t rows = t->n_elements == 0 ? 0 : t->n_dims ? t->dims[0] : 1, row = 0;
    t->first_chunk = *chunk_pos;
    t->payload_bytes = 0;
    for (uint32_t i = 0; i < t->n_chunks; i++) {
        fg_fgt_chunk_info *ch = &r->chunks[*chunk_pos + i];
        ch->offset = fg_le64(c->p);
        ch->length = fg_le64(c->p + 8);
        ch->first_row = fg_le64(c->p + 16);
        ch->n_rows = fg_le64(c->p + 24);
        ch->xxh3 = fg_le64(c->p + 32);
        c->p += FGT_CHUNK_ENTRY_SIZE;
        if ((rc = check_chunk(r, t, i, ch, row, rows, err)))
            return rc;
        row += ch->n_rows;
        if (fg_add_u64(t->payload_bytes, ch->length, &t->payload_bytes))
            return fg_err_set(err, FG_ERR_OVERFLOW, "%s: tensor '%s': total size overflows",
                              r->label, t->name);
    }
    if (row != rows)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor '%s': chunks cover %llu of %llu rows",
                          r->label, t->name, (unsigned long long)row, (unsigned long long)rows);
    *chunk_pos += t->n_chunks;
    return FG_OK;
}

static int read_tensor(fg_fgt_reader *r, cursor *c, rtensor *t, uint64_t *chunk_pos, fg_err *err)
{
    memset(t, 0, sizeof *t);
    int rc = read_name(r, c, 0, "tensor name", &t->name, err);
    if (rc || (rc = read_shape(r, c, t, err)))
        return rc;
    if ((rc = read_name(r, c, 1, "source name", &t->source, err)) ||
        (rc = need(r, c, 8, t->name, err)))
        return rc;
    t->source_hash = fg_le64(c->p);
    c->p += 8;
    return read_chunks(r, c, t, chunk_pos, err);
}

/* ---- cross-entry rules ---- */

/* Sort idx[0..n) by names[idx[i]] and report the first duplicate (index into names) or -1. */
static int cmp_name_r(const void *a, const void *b, void *ctx)
{
    const char *const *names = ctx;
    return strcmp(names[*(const uint32_t *)a], names[*(const uint32_t *)b]);
}

static int64_t sort_names(const char **names, uint32_t *idx, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof *idx, cmp_name_r, (void *)names);
    for (uint32_t i = 1; i < n; i++)
        if (!strcmp(names[idx[i]], names[idx[i - 1]]))
            return idx[i];
    return -1;
}

static int check_duplicates(fg_fgt_reader *r, fg_err *err)
{
    uint32_t nt = r->info.n_tensors, nm = r->info.n_meta;
    const char **names = malloc(((nt > nm ? nt : nm) + 1) * sizeof *names);
    if (!names)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", r->label);
    for (uint32_t i = 0; i < nt; i++)
        names[i] = r->tensors[i].name;
    int64_t dup = sort_names(names, r->sorted, nt);
    int rc = FG_OK;
    if (dup >= 0)
        rc = fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor '%s' appears twice", r->label,
                        names[dup]);
    for (uint32_t i = 0; rc == FG_OK && i < nm; i++)
        names[i] = r->meta[i].key;
    if (rc == FG_OK && (dup = sort_names(names, r->meta_sorted, nm)) >= 0)
        rc = fg_err_set(err, FG_ERR_DUPLICATE, "%s: metadata key '%s' appears twice", r->label,
                        names[dup]);
    free(names);
    return rc;
}

typedef struct range {
    uint64_t start, end;
    uint32_t tensor; /* UINT32_MAX = the index */
    uint32_t chunk;
} range;

static int cmp_range(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static const char *range_owner(const fg_fgt_reader *r, const range *g, char *buf, size_t n)
{
    if (g->tensor == UINT32_MAX)
        snprintf(buf, n, "the index");
    else
        snprintf(buf, n, "tensor '%s' chunk %u", r->tensors[g->tensor].name, g->chunk);
    return buf;
}

static int check_overlaps(fg_fgt_reader *r, fg_err *err)
{
    uint64_t n = r->info.n_chunks + 1, align = r->info.alignment;
    range *g = malloc(n * sizeof *g);
    if (!g)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", r->label);
    g[0] = (range){r->info.index_offset, r->info.index_offset + r->info.index_length,
                   UINT32_MAX, 0};
    uint64_t k = 1;
    for (uint32_t t = 0; t < r->info.n_tensors; t++)
        for (uint32_t c = 0; c < r->tensors[t].n_chunks; c++) {
            const fg_fgt_chunk_info *ch = &r->chunks[r->tensors[t].first_chunk + c];
            uint64_t end = ch->offset + ch->length; /* checked in check_chunk */
            uint64_t padded = (end + align - 1) & ~(align - 1);
            g[k++] = (range){ch->offset, padded < end ? end : padded, t, c};
        }
    qsort(g, n, sizeof *g, cmp_range);
    int rc = FG_OK;
    for (uint64_t i = 1; i < n && rc == FG_OK; i++) {
        if (g[i].start < g[i - 1].end) {
            char a[FG_FGT_MAX_NAME + 32], b[FG_FGT_MAX_NAME + 32];
            rc = fg_err_set(err, FG_ERR_OVERLAP, "%s: %s overlaps %s", r->label,
                            range_owner(r, &g[i], a, sizeof a),
                            range_owner(r, &g[i - 1], b, sizeof b));
        }
    }
    free(g);
    return rc;
}

/* ---- index ---- */

static int alloc_tables(fg_fgt_reader *r, cursor *c, fg_err *err)
{
    fg_fgt_file_info *fi = &r->info;
    uint64_t left = (uint64_t)(c->end - c->p), need_min;
    /* count x size: every entry has a minimum encoded size, so the counts cannot claim more
     * entries than the index bytes hold; checked before allocating anything sized by them. */
    need_min = (uint64_t)fi->n_meta * 12 + (uint64_t)fi->n_tensors * 30 +
               fi->n_chunks * FGT_CHUNK_ENTRY_SIZE;
    if (need_min > left)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: index header claims %u metadata entries, "
                          "%u tensors and %llu chunks, more than its %llu bytes can hold",
                          r->label, fi->n_meta, fi->n_tensors, (unsigned long long)fi->n_chunks,
                          (unsigned long long)left);
    /* names and strings are copied with a NUL each: at most 2 per entry */
    r->arena_cap = (size_t)left + 2ull * fi->n_meta + 2ull * fi->n_tensors + 1;
    r->arena = malloc(r->arena_cap);
    r->meta = calloc(fi->n_meta + 1, sizeof *r->meta);
    r->tensors = calloc(fi->n_tensors + 1, sizeof *r->tensors);
    r->sorted = calloc(fi->n_tensors + 1, sizeof *r->sorted);
    r->meta_sorted = calloc(fi->n_meta + 1, sizeof *r->meta_sorted);
    r->chunks = calloc(fi->n_chunks + 1, sizeof *r->chunks);
    if (!r->arena || !r->meta || !r->tensors || !r->sorted || !r->meta_sorted || !r->chunks)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", r->label);
    return FG_OK;
}

static int read_index_header(fg_fgt_reader *r, cursor *c, fg_err *err)
{
    fg_fgt_file_info *fi = &r->info;
    const uint8_t *h = c->p;
    if (memcmp(h, FGT_INDEX_MAGIC, 4))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: index magic is not FGIX", r->label);
    if (fg_le32(h + 4) || fg_le64(h + 24))
        return fg_err_set(err, FG_ERR_RESERVED, "%s: index header reserved field not zero",
                          r->label);
    fi->n_meta = fg_le32(h + 8);
    fi->n_tensors = fg_le32(h + 12);
    fi->n_chunks = fg_le64(h + 16);
    c->p += FGT_INDEX_HEADER_SIZE;
    if (fi->n_meta > FG_FGT_MAX_META || fi->n_tensors > FG_FGT_MAX_TENSORS ||
        fi->n_chunks > FG_FGT_MAX_CHUNKS)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: index claims %u metadata entries, %u tensors, "
                          "%llu chunks (limits %u, %u, %u)", r->label, fi->n_meta, fi->n_tensors,
                          (unsigned long long)fi->n_chunks, FG_FGT_MAX_META, FG_FGT_MAX_TENSORS,
                          FG_FGT_MAX_CHUNKS);
    return alloc_tables(r, c, err);
}

static int read_index(fg_fgt_reader *r, const sbinfo *s, fg_err *err)
{
    cursor c = {r->base + s->index_off, r->base + s->index_off, r->base + s->index_off + s->index_len};
    if (CHECKSUM_BAD(XXH3_64bits(c.p, (size_t)s->index_len), s->index_xxh3))
        return fg_err_set(err, FG_ERR_CHECKSUM, "%s: index checksum mismatch", r->label);
    int rc = read_index_header(r, &c, err);
    for (uint32_t i = 0; rc == FG_OK && i < r->info.n_meta; i++)
        rc = read_meta(r, &c, &r->meta[i], err);
    uint64_t chunk_pos = 0;
    for (uint32_t i = 0; rc == FG_OK && i < r->info.n_tensors; i++)
        rc = read_tensor(r, &c, &r->tensors[i], &chunk_pos, err);
    if (rc)
        return rc;
    if (chunk_pos != r->info.n_chunks)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: index header claims %llu chunks, "
                          "tensors hold %llu", r->label, (unsigned long long)r->info.n_chunks,
                          (unsigned long long)chunk_pos);
    if (c.p != c.end)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: %zu trailing bytes after the index",
                          r->label, (size_t)(c.end - c.p));
    if ((rc = check_duplicates(r, err)))
        return rc;
    return check_overlaps(r, err);
}

static int parse(fg_fgt_reader *r, unsigned flags, fg_err *err)
{
    if (r->size < FG_FGT_HEADER_SIZE)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %zu bytes, shorter than the %u-byte header",
                          r->label, r->size, FG_FGT_HEADER_SIZE);
    sbinfo s;
    int rc = pick_superblock(r, &s, err);
    if (rc)
        return rc;
    fg_fgt_file_info *fi = &r->info;
    fi->version_major = s.vmajor;
    fi->version_minor = s.vminor;
    fi->alignment = 1u << s.align_log2;
    fi->generation = s.generation;
    fi->index_offset = s.index_off;
    fi->index_length = s.index_len;
    fi->data_end = s.data_end;
    fi->file_size = r->size;
    if ((rc = read_index(r, &s, err)))
        return rc;
    if (flags & FG_FGT_OPEN_VERIFY)
        return fg_fgt_verify(r, NULL, NULL, err);
    return FG_OK;
}

/* ---- open / close ---- */

static int open_common(fg_fgt_reader *r, unsigned flags, fg_fgt_reader **out, fg_err *err)
{
    int rc = parse(r, flags, err);
    if (rc) {
        fg_fgt_close(r);
        return rc;
    }
    *out = r;
    return FG_OK;
}

int fg_fgt_open_mem(const void *buf, size_t len, const char *label, unsigned flags,
                    fg_fgt_reader **out, fg_err *err)
{
    fg_fgt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    r->base = buf;
    r->size = len;
    snprintf(r->label, sizeof r->label, "%s", label ? label : "<memory>");
    return open_common(r, flags, out, err);
}

int fg_fgt_open(const char *path, unsigned flags, fg_fgt_reader **out, fg_err *err)
{
    int fd, rc = fg_open_regular(path, O_RDONLY, &fd, err); /* a FIFO is refused, not waited on */
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return fg_err_sys(err, FG_ERR_IO, e, "%s: stat", path);
    }
    if ((uint64_t)st.st_size < FG_FGT_HEADER_SIZE) {
        close(fd);
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %lld bytes, shorter than the %u-byte header",
                          path, (long long)st.st_size, FG_FGT_HEADER_SIZE);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return fg_err_sys(err, FG_ERR_IO, e, "%s: mmap", path);
    fg_fgt_reader *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(map, (size_t)st.st_size);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    }
    r->map = map;
    r->base = map;
    r->size = (size_t)st.st_size;
    snprintf(r->label, sizeof r->label, "%s", path);
    return open_common(r, flags, out, err);
}

void fg_fgt_close(fg_fgt_reader *r)
{
    if (!r)
        return;
    if (r->map)
        munmap(r->map, r->size);
    free(r->meta);
    free(r->tensors);
    free(r->sorted);
    free(r->meta_sorted);
    free(r->chunks);
    free(r->arena);
    free(r);
}

/* ---- queries ---- */

void fg_fgt_file(const fg_fgt_reader *r, fg_fgt_file_info *out)
{
    *out = r->info;
}

uint32_t fg_fgt_tensor_count(const fg_fgt_reader *r)
{
    return r->info.n_tensors;
}

int fg_fgt_tensor(const fg_fgt_reader *r, uint32_t i, fg_fgt_tensor_info *out)
{
    if (i >= r->info.n_tensors)
        return FG_ERR_NOT_FOUND;
    const rtensor *t = &r->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->source_name = t->source;
    out->source_hash = t->source_hash;
    out->codec = t->codec;
    out->n_dims = t->n_dims;
    memcpy(out->dims, t->dims, sizeof t->dims);
    out->n_elements = t->n_elements;
    out->n_chunks = t->n_chunks;
    out->payload_bytes = t->payload_bytes;
    return FG_OK;
}

/* Binary search of key among names reached through idx (sorted); -1 when absent. */
static int64_t bsearch_idx(const uint32_t *idx, uint32_t n, const char *key,
                           const char *(*name_of)(const fg_fgt_reader *, uint32_t),
                           const fg_fgt_reader *r)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name_of(r, idx[mid]), key);
        if (c == 0)
            return idx[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static const char *tensor_name(const fg_fgt_reader *r, uint32_t i) { return r->tensors[i].name; }
static const char *meta_key(const fg_fgt_reader *r, uint32_t i) { return r->meta[i].key; }

int fg_fgt_find(const fg_fgt_reader *r, const char *name, uint32_t *index)
{
    int64_t i = bsearch_idx(r->sorted, r->info.n_tensors, name, tensor_name, r);
    if (i < 0)
        return FG_ERR_NOT_FOUND;
    *index = (uint32_t)i;
    return FG_OK;
}

int fg_fgt_chunk(const fg_fgt_reader *r, uint32_t tensor, uint32_t chunk, fg_fgt_chunk_info *out)
{
    if (tensor >= r->info.n_tensors || chunk >= r->tensors[tensor].n_chunks)
        return FG_ERR_NOT_FOUND;
    *out = r->chunks[r->tensors[tensor].first_chunk + chunk];
    return FG_OK;
}

int fg_fgt_chunk_data(const fg_fgt_reader *r, uint32_t tensor, uint32_t chunk, int verify,
                      const void **data, fg_err *err)
{
    fg_fgt_chunk_info ci;
    if (fg_fgt_chunk(r, tensor, chunk, &ci))
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no chunk %u of tensor %u", r->label, chunk,
                          tensor);
    const uint8_t *p = r->base + ci.offset;
    if (verify && CHECKSUM_BAD(XXH3_64bits(p, (size_t)ci.length), ci.xxh3))
        return fg_err_set(err, FG_ERR_CHECKSUM, "%s: tensor '%s' chunk %u: checksum mismatch "
                          "(bytes %llu..%llu)", r->label, r->tensors[tensor].name, chunk,
                          (unsigned long long)ci.offset,
                          (unsigned long long)(ci.offset + ci.length));
    *data = p;
    return FG_OK;
}

int fg_fgt_verify(const fg_fgt_reader *r, uint32_t *bad_tensor, uint32_t *bad_chunk, fg_err *err)
{
    for (uint32_t t = 0; t < r->info.n_tensors; t++)
        for (uint32_t c = 0; c < r->tensors[t].n_chunks; c++) {
            const void *p;
            int rc = fg_fgt_chunk_data(r, t, c, 1, &p, err);
            if (rc) {
                if (bad_tensor)
                    *bad_tensor = t;
                if (bad_chunk)
                    *bad_chunk = c;
                return rc;
            }
        }
    return FG_OK;
}

uint32_t fg_fgt_meta_count(const fg_fgt_reader *r)
{
    return r->info.n_meta;
}

int fg_fgt_meta(const fg_fgt_reader *r, uint32_t i, fg_meta_info *out)
{
    if (i >= r->info.n_meta)
        return FG_ERR_NOT_FOUND;
    *out = r->meta[i];
    return FG_OK;
}

int fg_fgt_meta_find(const fg_fgt_reader *r, const char *key, fg_meta_info *out)
{
    int64_t i = bsearch_idx(r->meta_sorted, r->info.n_meta, key, meta_key, r);
    if (i < 0)
        return FG_ERR_NOT_FOUND;
    *out = r->meta[i];
    return FG_OK;
}

uint64_t fg_meta_array_u64(const fg_meta_info *m, uint64_t i)
{
    return fg_le64((const uint8_t *)m->data + 8 * i);
}

int fg_meta_array_next_str(const fg_meta_info *m, const uint8_t **cur, uint64_t *seen,
                           const char **s, uint32_t *len)
{
    if (*seen >= m->len)
        return -1;
    uint32_t n = fg_le32(*cur);
    *s = (const char *)*cur + 4;
    *len = n;
    *cur += 4 + (size_t)n;
    (*seen)++;
    return 0;
}
