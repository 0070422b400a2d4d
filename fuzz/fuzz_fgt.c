/* fuzz_fgt.c - libFuzzer target for the .fgt reader: open from memory, then walk everything
 * the reader exposes (metadata, tensors, chunks, data views, verify) so any pointer it hands
 * out is touched under ASan. */
#include <stdint.h>
#include <stddef.h>

#include "fgt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_fgt_reader *r;
    fg_err err;
    if (fg_fgt_open_mem(data, size, "fuzz", 0, &r, &err))
        return 0;
    volatile uint64_t sink = 0;
    for (uint32_t i = 0; i < fg_fgt_meta_count(r); i++) {
        fg_meta_info m;
        fg_fgt_meta(r, i, &m);
        if (m.type == FG_META_ARRAY && m.elem_type == FG_META_STRING) {
            const uint8_t *cur = m.data;
            uint64_t seen = 0;
            const char *s;
            uint32_t len;
            while (fg_meta_array_next_str(&m, &cur, &seen, &s, &len) == 0)
                sink += len ? (uint8_t)s[len - 1] : 0;
        } else if (m.type == FG_META_ARRAY && m.len) {
            sink += fg_meta_array_u64(&m, m.len - 1);
        } else if (m.type == FG_META_BYTES && m.len) {
            sink += ((const uint8_t *)m.data)[m.len - 1];
        }
    }
    for (uint32_t t = 0; t < fg_fgt_tensor_count(r); t++) {
        fg_fgt_tensor_info ti;
        uint32_t found;
        fg_fgt_tensor(r, t, &ti);
        if (fg_fgt_find(r, ti.name, &found) == 0)
            sink += found;
        for (uint32_t c = 0; c < ti.n_chunks; c++) {
            fg_fgt_chunk_info ci;
            const void *p;
            fg_fgt_chunk(r, t, c, &ci);
            if (fg_fgt_chunk_data(r, t, c, 0, &p, &err) == 0)
                sink += ((const uint8_t *)p)[ci.length - 1];
        }
    }
    fg_fgt_verify(r, NULL, NULL, &err);
    (void)sink;
    fg_fgt_close(r);
    return 0;
}
