/* fuzz_store_records.c - libFuzzer target for the store's decoders of bytes it did not write
 * in this process: KV page headers and KV file headers (read from page files) and every
 * catalog record encoding (a damaged catalog must give an error, never a bad read), and the
 * reference to a metadata file that part 0 of a batch carries (fg.store.metafile.<key>). The first
 * input byte picks the decoder; the rest is its input. Decoded records are re-encoded where
 * an encoder exists and must round-trip. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void kv_header(const uint8_t *p, size_t n)
{
    uint8_t h[FG_STORE_KV_HEADER_SIZE] = {0}, again[FG_STORE_KV_HEADER_SIZE];
    memcpy(h, p, n < sizeof h ? n : sizeof h);
    fg_store_kv_page pg;
    if (kvp_header_decode(h, &pg) == FG_OK) {
        kvp_header_encode(&pg, again);
        if (memcmp(h, again, sizeof h))
            abort(); /* a header that decodes must be the one its fields encode */
    }
}

static void tensor_rec(const uint8_t *p, size_t n)
{
    MDB_val v = {n, (void *)p};
    fg_store_tensor t;
    if (rec_tensor_decode(&v, &t))
        return;
    fg_fgt_chunk_info *c = malloc((t.n_chunks ? t.n_chunks : 1) * sizeof *c);
    if (!c)
        return;
    rec_tensor_chunks(&v, &t, c);
    t.chunks = c;
    uint8_t *enc;
    size_t len;
    if (rec_tensor_encode(&t, &enc, &len) == FG_OK) {
        if (len != n)
            abort();
        free(enc);
    }
    free(c);
}

static void small_recs(uint8_t which, const uint8_t *p, size_t n)
{
    MDB_val v = {n, (void *)p};
    fg_store_kv_page pg;
    file_rec f;
    uint64_t batch;
    const void *d;
    size_t len;
    uint8_t out[48];
    if (which == 2 && rec_kv_decode(&v, &pg) == FG_OK && rec_kv_encode(&pg, out) != n)
        abort();
    if (which == 3 && rec_file_decode(&v, &f) == FG_OK && rec_file_encode(&f, out) != n)
        abort();
    metaref r;
    uint8_t fr[REC_META_FILE_SIZE], ref[METAREF_SIZE];
    if (which == 4 && rec_meta_decode_ref(&v, &batch, &d, &len, &r) == FG_OK) {
        if (d && (const uint8_t *)d + len != p + n)
            abort();
        if (!d) { /* a value kept in a file: the record is the one its fields encode */
            rec_meta_file_encode(batch, &r, fr);
            if (n != sizeof fr || memcmp(fr, p, n) || len != r.len)
                abort();
        }
    }
    if (which == 4 && metaref_decode(p, n, 1, &r) == FG_OK) { /* part 0's reference */
        metaref_encode(&r, ref);
        if (n != sizeof ref || memcmp(ref, p, n))
            abort();
    }
    if (which == 5 && n >= KV_KEY_SIZE) {
        fg_store_kv_key k;
        uint8_t back[KV_KEY_SIZE];
        rec_kv_key_decode(p, &k);
        rec_kv_key(&k, back);
        if (memcmp(back, p, KV_KEY_SIZE))
            abort();
    }
}

static void kv_file_header(const uint8_t *p, size_t n)
{
    fg_store s;
    memset(&s, 0, sizeof s);
    s.page_size = 65536;
    s.pages_per_file = 16384;
    uint8_t h[KVF_HEADER_USED] = {0};
    memcpy(h, p, n < sizeof h ? n : sizeof h);
    (void)kvf_header_check(&s, h, 1, "fuzz", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] % 7) {
    case 0: kv_header(p, n); break;
    case 1: tensor_rec(p, n); break;
    case 6: kv_file_header(p, n); break;
    default: small_recs(data[0] % 7, p, n); break;
    }
    return 0;
}
