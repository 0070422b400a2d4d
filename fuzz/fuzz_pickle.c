/* fuzz_pickle.c - libFuzzer target for torch .bin files: an input starting with "PK" goes
 * through the zip layer, the restricted unpickler and the storage resolution (ck_torch_parse);
 * any other input is fed to the unpickler directly, so mutations reach it without having to keep
 * a zip archive intact. Every accepted tensor is checked to lie inside the input. */
#include <stdint.h>
#include <stdlib.h>

#include "ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_err err;
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        ck_src src = {.mem = data, .fd = -1, .size = size, .label = "fuzz.bin"};
        ck_list l = {0};
        if (ck_torch_parse(&src, &l, &err) == FG_OK)
            for (uint32_t i = 0; i < l.n; i++)
                if (l.t[i].offset > size || l.t[i].length > size - l.t[i].offset)
                    abort();
        ck_list_free(&l);
        return 0;
    }
    ck_pkl_result r;
    if (ck_pkl_load(data, size, "fuzz.pkl", &r, &err) == FG_OK)
        for (uint32_t i = 0; i < r.n; i++)
            if (!r.t[i].name || !r.t[i].storage_key || r.t[i].n_dims > FG_CKPT_MAX_DIMS)
                abort();
    ck_pkl_free(&r);
    return 0;
}
