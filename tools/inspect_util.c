/* inspect_util.c - see inspect_util.h. */
#include "inspect_util.h"

#include <inttypes.h>
#include <stdio.h>

void iu_json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

void iu_shape(uint32_t n_dims, const uint64_t *dims, char *b, size_t n)
{
    size_t o = (size_t)snprintf(b, n, "[");
    for (uint32_t d = 0; d < n_dims && o < n; d++)
        o += (size_t)snprintf(b + o, n - o, d ? ", %" PRIu64 : "%" PRIu64, dims[d]);
    if (o < n)
        snprintf(b + o, n - o, "]");
}

void iu_codec(const fg_codec *c, int with_scale, char *b, size_t n)
{
    if (!c->bits)
        snprintf(b, n, "%s", fg_codec_name(c->id));
    else if (with_scale)
        snprintf(b, n, "%s/g%u/ax%u/%s", fg_codec_name(c->id), c->group_size, c->group_axis,
                 c->scale_dtype == FG_SCALE_F16 ? "f16" : "f32");
    else
        snprintf(b, n, "%s/g%u/ax%u", fg_codec_name(c->id), c->group_size, c->group_axis);
}
