/* inspect_util.h - printing helpers shared by fg-inspect's file and store views. */
#ifndef FG_INSPECT_UTIL_H
#define FG_INSPECT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fgt.h"

/* s as a JSON string literal on stdout (quotes, backslashes and control bytes escaped). */
void iu_json_str(const char *s);
/* "[d0, d1, ...]" into b. */
void iu_shape(uint32_t n_dims, const uint64_t *dims, char *b, size_t n);
/* "f16", or "q4/g64/ax0[/f16]" (scale dtype when with_scale) into b. */
void iu_codec(const fg_codec *c, int with_scale, char *b, size_t n);

#endif
