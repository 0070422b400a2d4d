/* fuzz_opt_config.c - libFuzzer target for config.json: parse, and for an accepted config build
 * the expected OPT tensor list (bounded by the config limits). */
#include <stdint.h>
#include <stdlib.h>

#include "opt_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_opt_config c;
    fg_err err;
    if (fg_opt_config_parse((const char *)data, size, "fuzz/config.json", &c, &err) != FG_OK)
        return 0;
    fg_opt_tensor_spec *spec;
    uint32_t n;
    if (fg_opt_expected_tensors(&c, &spec, &n, &err) == FG_OK) {
        if (n < 2 || n > c.num_hidden_layers * 16u + 8u)
            abort();
        free(spec);
    }
    return 0;
}
