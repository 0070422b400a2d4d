/* fg_ranges.h - a sorted set of disjoint address ranges: the pinned host memory a device keeps
 * track of (the CUDA device's cudaHostRegister'ed runs, the simulated devices' pins and PINNED
 * allocations). Not thread-safe: the owner holds its own lock around every call. Lookups are a
 * binary search; an insert or removal moves the ranges after it (a pool pins a few hundred
 * runs at most). */
#ifndef FG_RANGES_H
#define FG_RANGES_H

#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_range {
    uintptr_t at;
    uint64_t len; /* bytes; > 0 */
    int tag;      /* the owner's kind of range (e.g. an allocation, or a pin of other memory) */
} fg_range;

/* Zero-initialized is empty. */
typedef struct fg_ranges {
    fg_range *r; /* sorted by at, disjoint */
    uint32_t n, cap;
} fg_ranges;

/* Index of the first range ending after p (n when none). */
uint32_t fg_ranges_find(const fg_ranges *s, uintptr_t p);
/* Adds [at, at + len) with tag: FG_OK; FG_ERR_INVALID_ARG when it overlaps a range (nothing
 * added; no message: the owner names the fault); FG_ERR_NOMEM. */
int fg_ranges_add(fg_ranges *s, uintptr_t at, uint64_t len, int tag);
/* Removes the range starting at `at` whose tag is `tag` (any tag when tag < 0): 1 and its
 * length in *len (when len is not NULL), or 0 when there is none. */
int fg_ranges_del(fg_ranges *s, uintptr_t at, int tag, uint64_t *len);
/* 1 when [p, p + n) lies in ranges (adjacent ones count as one), else 0. */
int fg_ranges_cover(const fg_ranges *s, uintptr_t p, uint64_t n);
/* Bytes of [p, p + n) before the end of the range p lies in; all n when p lies in none. */
uint64_t fg_ranges_run(const fg_ranges *s, uintptr_t p, uint64_t n);
void fg_ranges_free(fg_ranges *s);

#ifdef __cplusplus
}
#endif
#endif
