/* calib_int.h - what the machine's calibration (calib.c) and a device's (calib_dev.c,
 * calib_dev_file.c) share: a weight matrix handed to a backend's linear in two row pieces, as the
 * engine hands it chunks, the median of repeated timings, a JSON file written atomically. */
#ifndef FG_CALIB_INT_H
#define FG_CALIB_INT_H

#include "backend.h"

/* A [n, k] weight of n rows of row_bytes at data (host or device memory), in two pieces. */
typedef struct fg_calib_pieces {
    const uint8_t *data;
    size_t row_bytes;
    fg_codec codec;
    uint32_t n, k;
    uint64_t rows[3];       /* piece rows: {0, n / 2, n} */
} fg_calib_pieces;

/* The two-piece weight over data (p borrowed, must outlive the returned weight's use). */
fg_calib_pieces fg_calib_pieces_of(const uint8_t *data, size_t row_bytes, fg_codec codec,
                                   uint32_t n, uint32_t k);
fg_weight fg_calib_weight(fg_calib_pieces *p);

/* The median of r[0..n) (r is sorted; 0 when n is 0). */
double fg_calib_median(double *r, int n);

/* o (consumed: decref'd) written to path atomically (a temporary file beside it, renamed);
 * what names the file in messages ("calibration", "device profile"); o NULL: out of memory. */
typedef struct json_t json_t;
int fg_calib_write_json(const char *path, json_t *o, const char *what, fg_err *err);

#endif
