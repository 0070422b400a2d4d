/* store_testlib.h - helpers shared by the store tests (test_store.c, test_store_crash.c):
 * deterministic tensor contents derived from the name, so any reader can check a tensor it
 * finds without knowing how it got there, and the same for KV page payloads. */
#ifndef FG_STORE_TESTLIB_H
#define FG_STORE_TESTLIB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store.h"
#include "testutil.h"

/* f32 tensor [rows, cols] written in chunks of chunk_rows; contents = tu_fill(hash(name)). */
static inline int st_put_tensor(fg_store_batch *b, const char *name, uint64_t rows, uint64_t cols,
                                uint64_t chunk_rows, fg_err *err)
{
    uint64_t dims[2] = {rows, cols};
    fg_fgt_tensor_desc d = {name, fg_codec_float(FG_CODEC_F32), 2, dims, NULL, 0};
    int rc = fg_store_batch_begin_tensor(b, &d, err);
    size_t total = (size_t)(rows * cols * 4);
    uint8_t *buf = malloc(total ? total : 1);
    tu_fill(buf, total, XXH3_64bits(name, strlen(name)));
    for (uint64_t r = 0; !rc && r < rows; r += chunk_rows) {
        uint64_t n = rows - r < chunk_rows ? rows - r : chunk_rows;
        rc = fg_store_batch_add_chunk(b, n, buf + r * cols * 4, (size_t)(n * cols * 4), err);
    }
    free(buf);
    return rc ? rc : fg_store_batch_end_tensor(b, err);
}

/* 0 when every chunk of t holds the bytes st_put_tensor wrote for its name. */
static inline int st_check_tensor(fg_store *s, const fg_store_tensor *t, fg_err *err)
{
    size_t total = (size_t)t->payload_bytes;
    uint8_t *want = malloc(total ? total : 1);
    tu_fill(want, total, XXH3_64bits(t->name, strlen(t->name)));
    int rc = 0;
    uint64_t off = 0;
    for (uint32_t c = 0; c < t->n_chunks && !rc; c++) {
        const void *p;
        rc = fg_store_chunk_data(s, t, c, 1, &p, err);
        if (!rc && (off + t->chunks[c].length > total || memcmp(p, want + off, t->chunks[c].length)))
            rc = -1;
        off += t->chunks[c].length;
    }
    if (!rc && off != total)
        rc = -1;
    free(want);
    return rc;
}

/* KV payload of len bytes for key and token range. */
static inline void st_kv_fill(void *p, size_t len, const fg_store_kv_key *k, uint32_t first)
{
    uint64_t seed = k->job * 1000003u ^ (uint64_t)k->seq << 40 ^ (uint64_t)k->layer << 20 ^
                    k->page ^ (uint64_t)first << 50;
    tu_fill(p, len, seed);
}

#endif
