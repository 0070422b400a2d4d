/* records.c - encode and decode the catalog's values (SPEC "Catalog databases").
 *
 * Every value starts with a version byte (REC_VERSION) so a later library can read old
 * records or refuse new ones; integers are little-endian, except inside keys, which are
 * big-endian so LMDB's byte order sorts them numerically. Decoders check lengths before every
 * read: a damaged catalog yields FG_ERR_CORRUPT, never an out-of-bounds read.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fg_bytes.h"
#include "store_int.h"

#define TREC_HEAD 64u   /* fixed part of a tensor record */
#define TREC_CHUNK 40u

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void rec_file_key(uint32_t id, uint8_t out[4])
{
    put_be32(out, id);
}

size_t rec_file_encode(const file_rec *f, uint8_t *out)
{
    memset(out, 0, 40);
    out[0] = REC_VERSION;
    out[1] = f->kind;
    fg_put32(out + 4, f->part);
    fg_put64(out + 8, f->size);
    fg_put64(out + 16, f->generation);
    fg_put64(out + 24, f->batch);
    fg_put32(out + 32, f->parts);
    return 40;
}

int rec_file_decode(const MDB_val *v, file_rec *f)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != 40 || p[0] != REC_VERSION || (p[1] != FILE_WEIGHTS && p[1] != FILE_KV))
        return FG_ERR_CORRUPT;
    f->kind = p[1];
    f->part = fg_le32(p + 4);
    f->size = fg_le64(p + 8);
    f->generation = fg_le64(p + 16);
    f->batch = fg_le64(p + 24);
    f->parts = fg_le32(p + 32);
    return FG_OK;
}

static void codec_put(uint8_t *p, const fg_codec *c)
{
    p[0] = c->id;
    p[1] = c->bits;
    p[2] = c->group_axis;
    p[3] = c->scale_dtype;
    p[4] = c->nibble_order;
    p[5] = c->layout_version;
    p[6] = p[7] = 0;
    fg_put32(p + 8, c->group_size);
}

static void codec_get(const uint8_t *p, fg_codec *c)
{
    c->id = p[0];
    c->bits = p[1];
    c->group_axis = p[2];
    c->scale_dtype = p[3];
    c->nibble_order = p[4];
    c->layout_version = p[5];
    c->group_size = fg_le32(p + 8);
}

int rec_tensor_encode(const fg_store_tensor *t, uint8_t **out, size_t *len)
{
    size_t n = TREC_HEAD + (size_t)t->n_dims * 8 + (size_t)t->n_chunks * TREC_CHUNK;
    uint8_t *p = calloc(1, n);
    if (!p)
        return FG_ERR_NOMEM;
    p[0] = REC_VERSION;
    p[1] = (uint8_t)t->n_dims;
    fg_put32(p + 4, t->file_id);
    fg_put32(p + 8, t->file_index);
    fg_put32(p + 12, t->n_chunks);
    codec_put(p + 16, &t->codec);
    fg_put64(p + 32, t->batch);
    fg_put64(p + 40, t->payload_bytes);
    fg_put64(p + 48, t->digest);
    uint8_t *q = p + TREC_HEAD;
    for (uint32_t d = 0; d < t->n_dims; d++, q += 8)
        fg_put64(q, t->dims[d]);
    for (uint32_t c = 0; c < t->n_chunks; c++, q += TREC_CHUNK) {
        const fg_fgt_chunk_info *ci = &t->chunks[c];
        fg_put64(q, ci->offset);
        fg_put64(q + 8, ci->length);
        fg_put64(q + 16, ci->first_row);
        fg_put64(q + 24, ci->n_rows);
        fg_put64(q + 32, ci->xxh3);
    }
    *out = p;
    *len = n;
    return FG_OK;
}

/* The chunk table is decoded into a thread-local scratch array when the caller needs it
 * (rec_tensor_decode leaves chunks NULL; store.c copies them out with rec_tensor_chunks). */
int rec_tensor_decode(const MDB_val *v, fg_store_tensor *t)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size < TREC_HEAD || p[0] != REC_VERSION || p[1] > FG_FGT_MAX_DIMS)
        return FG_ERR_CORRUPT;
    memset(t, 0, sizeof *t);
    t->n_dims = p[1];
    t->file_id = fg_le32(p + 4);
    t->file_index = fg_le32(p + 8);
    t->n_chunks = fg_le32(p + 12);
    codec_get(p + 16, &t->codec);
    t->batch = fg_le64(p + 32);
    t->payload_bytes = fg_le64(p + 40);
    t->digest = fg_le64(p + 48);
    uint64_t want = TREC_HEAD + (uint64_t)t->n_dims * 8 + (uint64_t)t->n_chunks * TREC_CHUNK;
    if (v->mv_size != want)
        return FG_ERR_CORRUPT;
    for (uint32_t d = 0; d < t->n_dims; d++)
        t->dims[d] = fg_le64(p + TREC_HEAD + d * 8);
    return FG_OK;
}

/* Decode the chunk table of a record already checked by rec_tensor_decode into out[n_chunks]. */
void rec_tensor_chunks(const MDB_val *v, const fg_store_tensor *t, fg_fgt_chunk_info *out)
{
    const uint8_t *q = (const uint8_t *)v->mv_data + TREC_HEAD + t->n_dims * 8;
    for (uint32_t c = 0; c < t->n_chunks; c++, q += TREC_CHUNK) {
        out[c].offset = fg_le64(q);
        out[c].length = fg_le64(q + 8);
        out[c].first_row = fg_le64(q + 16);
        out[c].n_rows = fg_le64(q + 24);
        out[c].xxh3 = fg_le64(q + 32);
    }
}

uint64_t rec_tensor_digest(const fg_fgt_chunk_info *c, uint32_t n)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t b[8];
        fg_put64(b, c[i].xxh3);
        XXH3_64bits_update(st, b, 8);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

void rec_kv_key(const fg_store_kv_key *k, uint8_t out[KV_KEY_SIZE])
{
    put_be32(out, (uint32_t)(k->job >> 32));
    put_be32(out + 4, (uint32_t)k->job);
    put_be32(out + 8, k->seq);
    put_be32(out + 12, k->layer);
    put_be32(out + 16, k->page);
}

void rec_kv_key_decode(const uint8_t in[KV_KEY_SIZE], fg_store_kv_key *k)
{
    k->job = (uint64_t)be32(in) << 32 | be32(in + 4);
    k->seq = be32(in + 8);
    k->layer = be32(in + 12);
    k->page = be32(in + 16);
}

size_t rec_kv_encode(const fg_store_kv_page *p, uint8_t *out)
{
    memset(out, 0, 40);
    out[0] = REC_VERSION;
    out[1] = p->codec;
    fg_put32(out + 4, p->file_id);
    fg_put32(out + 8, p->slot);
    fg_put32(out + 12, p->token_first);
    fg_put32(out + 16, p->n_tokens);
    fg_put32(out + 20, p->payload_len);
    fg_put64(out + 24, p->generation);
    fg_put64(out + 32, p->payload_xxh3);
    return 40;
}

int rec_kv_decode(const MDB_val *v, fg_store_kv_page *p)
{
    const uint8_t *b = v->mv_data;
    if (v->mv_size != 40 || b[0] != REC_VERSION)
        return FG_ERR_CORRUPT;
    p->codec = b[1];
    p->file_id = fg_le32(b + 4);
    p->slot = fg_le32(b + 8);
    p->token_first = fg_le32(b + 12);
    p->n_tokens = fg_le32(b + 16);
    p->payload_len = fg_le32(b + 20);
    p->generation = fg_le64(b + 24);
    p->payload_xxh3 = fg_le64(b + 32);
    return FG_OK;
}

void rec_free_key(uint32_t file_id, uint32_t slot, uint8_t out[FREE_KEY_SIZE])
{
    put_be32(out, file_id);
    put_be32(out + 4, slot);
}

/* A metadata value: version 2 carries the blob's XXH3-64 (a damaged catalog page is caught when
 * the blob is read, not handed to the tokenizer or the model's config); version 1 (stores made
 * before) has none. */
int rec_meta_encode(uint64_t batch, const void *data, size_t len, uint8_t **out, size_t *n)
{
    uint8_t *p = malloc(REC_META_HEADER + len);
    if (!p)
        return FG_ERR_NOMEM;
    memset(p, 0, REC_META_HEADER);
    p[0] = REC_META_VERSION;
    fg_put64(p + 8, batch);
    fg_put64(p + 16, XXH3_64bits(data, len));
    if (len)
        memcpy(p + REC_META_HEADER, data, len);
    *out = p;
    *n = REC_META_HEADER + len;
    return FG_OK;
}

void rec_meta_file_encode(uint64_t batch, const metaref *r, uint8_t out[REC_META_FILE_SIZE])
{
    memset(out, 0, REC_META_FILE_SIZE);
    out[0] = REC_META_FILE_VERSION;
    fg_put64(out + 8, batch);
    fg_put64(out + 16, r->xxh3);
    fg_put32(out + 24, r->owner);
    fg_put32(out + 28, r->k);
    fg_put64(out + 32, r->len);
}

int rec_meta_decode(const MDB_val *v, uint64_t *batch, const void **data, size_t *len)
{
    return rec_meta_decode_ref(v, batch, data, len, NULL);
}

int rec_meta_decode_ref(const MDB_val *v, uint64_t *batch, const void **data, size_t *len,
                        metaref *ref)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size == REC_META_FILE_SIZE && p[0] == REC_META_FILE_VERSION) {
        metaref r = {fg_le32(p + 24), fg_le32(p + 28), fg_le64(p + 32), fg_le64(p + 16)};
        static const uint8_t zero[7];
        if (memcmp(p + 1, zero, 7) || !r.owner || r.owner > STORE_MAX_FILES ||
            r.len > FG_STORE_META_MAX)
            return FG_ERR_CORRUPT;
        *batch = fg_le64(p + 8);
        *data = NULL;
        *len = (size_t)r.len;
        if (ref)
            *ref = r;
        return FG_OK;
    }
    size_t head = v->mv_size && p[0] == REC_META_VERSION ? REC_META_HEADER
                  : v->mv_size && p[0] == REC_VERSION    ? 16
                                                         : 0;
    if (!head || v->mv_size < head)
        return FG_ERR_CORRUPT;
    *batch = fg_le64(p + 8);
    *data = p + head;
    *len = v->mv_size - head;
    if (head == REC_META_HEADER && fg_le64(p + 16) != XXH3_64bits(*data, *len))
        return FG_ERR_CHECKSUM;
    return FG_OK;
}
