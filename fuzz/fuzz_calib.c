/* fuzz_calib.c - libFuzzer target for the calibration file (policy/calib.c) and the device
 * profile (policy/calib_dev_file.c): the same bytes parsed as each, and for an accepted file the
 * rates it reports checked usable (positive, finite, M increasing). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "policy_search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_calib c;
    fg_calib_dev d;
    fg_err err;
    if (fg_calib_dev_parse((const char *)data, size, "fuzz/device.json", &d, &err) == FG_OK) {
        if (!(d.up > 0 && d.down > 0 && d.attn_s > 0 && d.attn_q4_s > 0 && d.overlap >= 0 &&
              d.overlap <= 1 && d.m[0] == 1))
            abort();
        for (int i = 1; i < FG_CALIB_NM; i++)
            if (d.m[i] <= d.m[i - 1])
                abort();
        double f = fg_calib_dev_flops(&d, 3.5);
        if (!(f > 0) || !isfinite(f))
            abort();
    }
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
