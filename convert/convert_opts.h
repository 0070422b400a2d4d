/* convert_opts.h - the rules between fg_convert_opts' fields (convert_opts.c). */
#ifndef FG_CONVERT_OPTS_H
#define FG_CONVERT_OPTS_H

#include "convert.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FG_OK, or FG_ERR_INVALID_ARG with one line naming the fg-convert flag at fault: a group
 * size or axis without compress_weight (it would do nothing: refused, not ignored). Checked
 * before anything is read or written; fg-convert calls it after reading its flags. group_axis
 * -1 is "not given" (a zeroed struct says axis 0: call this only on options set field by
 * field, as a tool does). */
int fg_convert_opts_check(const fg_convert_opts *o, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
