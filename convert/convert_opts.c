/* convert_opts.c - fg_convert_opts_check (convert_opts.h): what fg-convert refuses between its
 * flags, said by the library that owns the options, so a library caller gets the same
 * refusal in the same words. The fields' own ranges (group size 8 to 4096, axis 0 or 1) are
 * the tool's to read; this is about fields that only mean something together. */
#include "convert_opts.h"

int fg_convert_opts_check(const fg_convert_opts *o, fg_err *err)
{
    if (!o->compress_weight && o->group_size)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "--group-size needs --compress-weight or --weight-bits");
    if (!o->compress_weight && o->group_axis >= 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "--group-axis needs --compress-weight or --weight-bits");
    return FG_OK;
}
