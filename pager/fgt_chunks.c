/* fgt_chunks.c - register every chunk of a .fgt file with the pager.
 *
 * The format guarantees each chunk starts on the file's alignment (>= 4096) and is zero-padded
 * to it, so [offset, align_up(length, 4096)) is a valid O_DIRECT read with no read-around.
 * The reader validates the file (structure and bounds) and is closed before returning.
 */
#define _GNU_SOURCE
#include "pager_int.h"

int fg_pager_add_fgt(fg_pager *p, const char *path, int writable, fg_chunk_kind kind,
                     uint32_t *first, uint32_t *count, fg_err *err)
{
    fg_fgt_reader *r;
    uint32_t file, id, n = 0;
    int rc = fg_fgt_open(path, 0, &r, err);
    if (rc)
        return rc;
    rc = fg_pager_add_file(p, path, writable, &file, err);
    *first = fg_pager_chunk_count(p);
    for (uint32_t t = 0; rc == FG_OK && t < fg_fgt_tensor_count(r); t++) {
        fg_fgt_tensor_info ti;
        rc = fg_fgt_tensor(r, t, &ti);
        for (uint32_t j = 0; rc == FG_OK && j < ti.n_chunks; j++) {
            fg_fgt_chunk_info ci;
            rc = fg_fgt_chunk(r, t, j, &ci);
            if (rc)
                break;
            fg_pager_chunk_desc d = {file, ci.offset, ci.length,
                                     (ci.length + FG_PAGE - 1) & ~(FG_PAGE - 1), ci.xxh3, 1,
                                     ((uint64_t)t << 32) | j, ti.codec, kind, t};
            rc = fg_pager_add_chunk(p, &d, &id, err);
            n += rc == FG_OK;
        }
    }
    fg_fgt_close(r);
    *count = n;
    return rc;
}
