/* fuzz_calib.c - libFuzzer target for the calibration file (policy/calib.c): parse, and for an
 * accepted file check the rates it reports are usable (positive, finite, M increasing). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "policy_search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_calib c;
    fg_err err;
    if (fg_calib_parse((const char *)data, size, "fuzz/calibration.json", &c, &err) != FG_OK)
        return 0;
    if (!(c.disk_read > 0 && c.disk_write > 0 && c.attn_s > 0 && c.overlap >= 0 &&
          c.overlap <= 1))
        abort();
    for (int i = 1; i < FG_CALIB_NM; i++)
        if (c.m[i] <= c.m[i - 1])
            abort();
    for (int path = FG_CALIB_F32; path <= FG_CALIB_BF16; path++) {
        double f = fg_calib_flops_at(&c, path, 3.5);
        if (!(f > 0) || !isfinite(f))
            abort();
    }
    return 0;
}
