/* store_sample - test helper: create a small store at argv[1] (3 tensors over 2 weight files,
 * 2 metadata blobs, 5 KV pages of 2 jobs) for the fg-inspect end-to-end test. With a second
 * argument "big", a second batch replaces tokenizer.json by a value of FG_STORE_META_INLINE +
 * 4096 bytes (a metadata file of its own, meta-000004-0.blob). */
#include <stdio.h>
#include <string.h>

#include "store_testlib.h"

int main(int argc, char **argv)
{
    if (argc != 2 && (argc != 3 || strcmp(argv[2], "big"))) {
        fprintf(stderr, "usage: store_sample DIR [big]\n");
        return 2;
    }
    fg_store_opts o = {.kv_page_size = 8192, .max_file_bytes = 16384};
    fg_store *s;
    fg_store_batch *b;
    fg_err err;
    static uint8_t buf[5][1000];
    fg_store_kv_write_req r[5];
    for (int i = 0; i < 5; i++) {
        fg_store_kv_key k = {i < 3 ? 11 : 12, 0, (uint32_t)i, 0};
        st_kv_fill(buf[i], sizeof buf[i], &k, 0);
        r[i] = (fg_store_kv_write_req){k, 0, 16, FG_CODEC_F16, buf[i], sizeof buf[i]};
    }
    if (fg_store_create(argv[1], &o, &s, &err) || fg_store_batch_begin(s, &b, &err) ||
        st_put_tensor(b, "tok_embd.weight", 64, 64, 32, &err) ||
        st_put_tensor(b, "blk.0.attn_q.weight", 16, 64, 16, &err) ||
        st_put_tensor(b, "output_norm.weight", 1, 64, 1, &err) ||
        fg_store_batch_meta(b, "config.json", "{\"n_layer\": 1}", 14, &err) ||
        fg_store_batch_meta(b, "tokenizer.json", "{}", 2, &err) ||
        fg_store_batch_commit(b, &err) || fg_store_kv_write(s, 5, r, NULL, &err)) {
        fprintf(stderr, "store_sample: %s\n", err.msg);
        return 1;
    }
    if (argc == 3) {
        size_t n = FG_STORE_META_INLINE + 4096;
        uint8_t *v = malloc(n);
        tu_fill(v, n, 38);
        if (!v || fg_store_batch_begin(s, &b, &err) ||
            fg_store_batch_meta(b, "tokenizer.json", v, n, &err) || fg_store_batch_commit(b, &err)) {
            fprintf(stderr, "store_sample: %s\n", v ? err.msg : "out of memory");
            return 1;
        }
        free(v);
    }
    fg_store_close(s);
    return 0;
}
