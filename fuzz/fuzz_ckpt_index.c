/* fuzz_ckpt_index.c - libFuzzer target for a sharded checkpoint's index
 * (model.safetensors.index.json, pytorch_model.bin.index.json): the input is the file's bytes.
 * Whatever is accepted must name only plain files of the checkpoint directory (the shard list is
 * what fg-convert opens), sorted and distinct, and map every tensor into that list. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_index ix;
    fg_err err;
    if (ck_index_parse((const char *)data, size, "fuzz.index.json", &ix, &err) != FG_OK)
        return 0;
    for (uint32_t i = 0; i < ix.n_files; i++) {
        const char *f = ix.files[i];
        if (!ck_shard_name_ok(f) || (i && strcmp(ix.files[i - 1], f) >= 0))
            abort(); /* a path outside the directory, or an unsorted / repeated list */
    }
    const char *s = ck_index_shard_of(&ix, "model.embed_tokens.weight");
    if (s) {
        uint32_t i = 0;
        while (i < ix.n_files && strcmp(ix.files[i], s))
            i++;
        if (i == ix.n_files)
            abort(); /* a tensor mapped to a file the list does not hold */
    }
    ck_index_free(&ix);
    return 0;
}
