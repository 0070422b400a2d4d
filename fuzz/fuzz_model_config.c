/* fuzz_model_config.c - libFuzzer target for config.json through model/'s table: parse, and for
 * an accepted config build every unit's tensor list (bounded by the config limits). */
#include <stdint.h>
#include <stdlib.h>

#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_hparams hp;
    fg_err err;
    if (fg_model_config_parse((const char *)data, size, "fuzz/config.json", &hp, &err) != FG_OK)
        return 0;
    fg_tensor_spec *spec;
    uint32_t n;
    if (fg_model_tensors(&hp, &spec, &n, &err) == FG_OK) {
        if (n < 2 || n > fg_model_n_units(&hp) * FG_UNIT_MAX_TENSORS)
            abort();
        free(spec);
    }
    return 0;
}
