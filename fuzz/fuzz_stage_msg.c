/* fuzz_stage_msg.c - libFuzzer target for the pipeline's messages (engine/stage_int.h), which
 * come from another process, over a network between machines: the header, then an OPEN or a
 * BLOCK payload. An accepted BLOCK's lengths and ids must lie inside the message and add up. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stage_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* aligned, as the link's buffers are */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    fg_stage_msg h;
    const void *p;
    fg_err err;
    if (fg_stage_msg_parse(buf, size, 1, 0, &h, &p, &err) == FG_OK) {
        if ((const uint8_t *)p + h.bytes != buf + size)
            abort();
        fg_stage_open o;
        uint32_t n;
        const uint32_t *lens;
        const int32_t *ids;
        if (h.kind == FG_MSG_OPEN && fg_stage_open_parse(p, h.bytes, 1, &o, &err) == FG_OK &&
            (o.policy.gbs < 1 || o.policy.ngb < 1 || o.max_ctx < 2))
            abort();
        if (h.kind == FG_MSG_BLOCK &&
            fg_stage_block_parse(p, h.bytes, 64, 512, 1, &n, &lens, &ids, &err) == FG_OK) {
            uint64_t total = 0, sum = 0;
            for (uint32_t s = 0; s < n; s++)
                total += lens[s];
            for (uint64_t i = 0; i < total; i++) /* every id inside the message (ASan) */
                sum += (uint32_t)ids[i];
            if ((const uint8_t *)(ids + total) != buf + size || n > 64 || (sum & 0) != 0)
                abort();
        }
    }
    free(buf);
    return 0;
}
