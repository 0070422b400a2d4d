/* inspect_prefix.h - fg-inspect's view of a prefix KV cache (tools/inspect_prefix.c). */
#ifndef FG_INSPECT_PREFIX_H
#define FG_INSPECT_PREFIX_H

#include "prefix.h"

/* 1 when dir is a store holding a prefix cache's identity page (info filled), else 0. */
int is_prefix_cache(const char *dir, fg_prefix_info *info);
/* Print info about the cache at dir (table or JSON); verify: fg_store_verify first. Returns the
 * exit status. */
int inspect_prefix(const char *dir, const fg_prefix_info *info, int json, int verify);

#endif
