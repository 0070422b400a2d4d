/* fuzz_torch.c - libFuzzer target for the torch.save reader: the zip layer (zip.c), torch.load's
 * layout rules and the storage resolution (torch.c), with the restricted unpickler behind them.
 * The input is a whole pytorch_model.bin in memory; every tensor accepted must lie inside it. */
#include <stdint.h>
#include <stdlib.h>

#include "ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_src src = {.mem = data, .fd = -1, .size = size, .label = "fuzz.bin"};
    ck_list l = {0};
    fg_err err;
    if (ck_torch_parse(&src, &l, &err) == FG_OK) {
        for (uint32_t i = 0; i < l.n; i++)
            if (l.t[i].offset > size || l.t[i].length > size - l.t[i].offset)
                abort(); /* the parser promised every extent is inside the file */
    }
    ck_list_free(&l);
    return 0;
}
