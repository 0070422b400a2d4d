/* fg_ranges.c - sorted disjoint address ranges (fg_ranges.h). */
#include "fg_ranges.h"

#include <stdlib.h>
#include <string.h>

uint32_t fg_ranges_find(const fg_ranges *s, uintptr_t p)
{
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->r[mid].at + s->r[mid].len <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int fg_ranges_add(fg_ranges *s, uintptr_t at, uint64_t len, int tag)
{
    uint32_t i = fg_ranges_find(s, at);
    if (i < s->n && s->r[i].at < at + len)
        return FG_ERR_INVALID_ARG;
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 64;
        fg_range *r = realloc(s->r, cap * sizeof *r);
        if (!r)
            return FG_ERR_NOMEM;
        s->r = r;
        s->cap = cap;
    }
    memmove(&s->r[i + 1], &s->r[i], (s->n - i) * sizeof *s->r);
    s->r[i] = (fg_range){at, len, tag};
    s->n++;
    return FG_OK;
}

int fg_ranges_del(fg_ranges *s, uintptr_t at, int tag, uint64_t *len)
{
    uint32_t i = fg_ranges_find(s, at);
    if (i == s->n || s->r[i].at != at || (tag >= 0 && s->r[i].tag != tag))
        return 0;
    if (len)
        *len = s->r[i].len;
    memmove(&s->r[i], &s->r[i + 1], (s->n - i - 1) * sizeof *s->r);
    s->n--;
    return 1;
}

int fg_ranges_cover(const fg_ranges *s, uintptr_t p, uint64_t n)
{
    uintptr_t a = p, end = p + n;
    for (uint32_t i = fg_ranges_find(s, a); a < end; i++) {
        if (i == s->n || s->r[i].at > a)
            return 0;
        a = s->r[i].at + s->r[i].len;
    }
    return 1;
}

uint64_t fg_ranges_run(const fg_ranges *s, uintptr_t p, uint64_t n)
{
    uint32_t i = fg_ranges_find(s, p);
    if (i < s->n && s->r[i].at <= p && p + n > s->r[i].at + s->r[i].len)
        return s->r[i].at + s->r[i].len - p;
    return n;
}

void fg_ranges_free(fg_ranges *s)
{
    free(s->r);
    *s = (fg_ranges){0};
}
