/* pool.c - the memory behind the HOST and DEVICE tiers.
 *
 * Each tier is one allocation of exactly its budget, made once at open: the budget is a
 * physical bound, not a counter that could drift. Inside it, fg_arena hands out page-granular
 * extents first-fit from a sorted, coalesced free list (O(free extents) per call; the list
 * stays short because chunks of a stream have similar sizes and frees coalesce). Fragmentation
 * can make an allocation fail while enough bytes are free in total; the pager then evicts more
 * (see make_room in pager.c).
 *
 * The HOST pool is, in order of preference: the device backend's pinned host allocation
 * (cudaHostAlloc), else anonymous mmap memory aligned to 2 MiB, advised for huge pages (see
 * map_huge_aligned) and locked with mlock (refused under a small RLIMIT_MEMLOCK; the pool still
 * works, unlocked, and a notice says so).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pager_int.h"

int fg_arena_init(fg_arena *a, uint64_t size)
{
    memset(a, 0, sizeof *a);
    a->size = size;
    if (size == 0)
        return 0;
    a->free = malloc(16 * sizeof *a->free);
    if (!a->free)
        return -1;
    a->cap_free = 16;
    a->free[0] = (fg_extent){0, size};
    a->n_free = 1;
    return 0;
}

void fg_arena_fini(fg_arena *a)
{
    free(a->free);
    memset(a, 0, sizeof *a);
}

int fg_arena_alloc(fg_arena *a, uint64_t len, uint64_t *off)
{
    for (uint32_t i = 0; i < a->n_free; i++) {
        fg_extent *e = &a->free[i];
        if (e->len < len)
            continue;
        *off = e->off;
        e->off += len;
        e->len -= len;
        if (e->len == 0) {
            memmove(e, e + 1, (a->n_free - i - 1) * sizeof *e);
            a->n_free--;
        }
        a->used += len;
        if (a->used > a->peak)
            a->peak = a->used;
        return 0;
    }
    return -1;
}

int fg_arena_alloc_in(fg_arena *a, uint64_t len, uint64_t lo, uint64_t hi, int high,
                      uint64_t *off)
{
    for (uint32_t k = 0; k < a->n_free; k++) {
        uint32_t i = high ? a->n_free - 1 - k : k;
        fg_extent *e = &a->free[i];
        uint64_t s = e->off > lo ? e->off : lo;
        uint64_t end = e->off + e->len < hi ? e->off + e->len : hi;
        if (end <= s || end - s < len)
            continue;
        uint64_t take = high ? end - len : s;
        uint64_t left = take - e->off, right = e->off + e->len - (take + len);
        if (left && right) { /* split the extent in two */
            if (a->n_free == a->cap_free) {
                fg_extent *n = realloc(a->free, 2 * a->cap_free * sizeof *n);
                if (!n)
                    return -1;
                a->free = n;
                a->cap_free *= 2;
                e = &a->free[i];
            }
            memmove(e + 2, e + 1, (a->n_free - i - 1) * sizeof *e);
            a->n_free++;
            e[1] = (fg_extent){take + len, right};
            e->len = left;
        } else if (left) {
            e->len = left;
        } else if (right) {
            e->off = take + len;
            e->len = right;
        } else {
            memmove(e, e + 1, (a->n_free - i - 1) * sizeof *e);
            a->n_free--;
        }
        *off = take;
        a->used += len;
        if (a->used > a->peak)
            a->peak = a->used;
        return 0;
    }
    return -1;
}

int fg_arena_free(fg_arena *a, uint64_t off, uint64_t len)
{
    uint32_t i = 0;
    while (i < a->n_free && a->free[i].off < off)
        i++;
    int join_prev = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
    int join_next = i < a->n_free && off + len == a->free[i].off;
    if (join_prev && join_next) {
        a->free[i - 1].len += len + a->free[i].len;
        memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof *a->free);
        a->n_free--;
    } else if (join_prev) {
        a->free[i - 1].len += len;
    } else if (join_next) {
        a->free[i].off = off;
        a->free[i].len += len;
    } else {
        if (a->n_free == a->cap_free) {
            fg_extent *n = realloc(a->free, 2 * a->cap_free * sizeof *n);
            if (!n)
                return -1;
            a->free = n;
            a->cap_free *= 2;
        }
        memmove(&a->free[i + 1], &a->free[i], (a->n_free - i) * sizeof *a->free);
        a->free[i] = (fg_extent){off, len};
        a->n_free++;
    }
    a->used -= len;
    return 0;
}

uint64_t fg_arena_free_bytes(const fg_arena *a)
{
    uint64_t s = 0;
    for (uint32_t i = 0; i < a->n_free; i++)
        s += a->free[i].len;
    return s;
}

/* Anonymous memory aligned to 2 MiB and advised for transparent huge pages: an O_DIRECT
 * read of 1 MiB into 4 KiB pages needs 256 scatter-gather segments, more than many block
 * devices take in one request (virtio-blk: 254), so the kernel splits it; in huge pages it is
 * one segment. NULL (errno set) on failure. */
static void *map_huge_aligned(uint64_t n)
{
    const uint64_t huge = 2ull << 20;
    uint8_t *m = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (m + n + huge > a + n)
        munmap(a + n, (size_t)(m + n + huge - (a + n)));
    madvise(a, n, MADV_HUGEPAGE); /* advice only: fine when THP is off */
    return a;
}

int fg_pager_host_pool(fg_pager *p, fg_err *err)
{
    uint64_t n = p->cfg.budget[FG_TIER_HOST];
    if (p->dev) {
        void *ptr = NULL;
        fg_err perr;
        int rc = p->dev->iface->alloc(p->dev, FG_BUFT_PINNED, n, &ptr, &perr);
        if (rc == FG_OK) {
            p->host_base = ptr;
            p->host_how = 2;
            return FG_OK;
        }
        if (rc != FG_ERR_UNSUPPORTED) /* a device with pinned memory that refused this much */
            fg_pager_notice(p, "pager: pinned host allocation of %llu bytes refused; using mmap",
                            (unsigned long long)n);
    }
    void *m = map_huge_aligned(n);
    if (!m)
        return fg_err_sys(err, FG_ERR_NOMEM, errno, "pager: HOST pool of %llu bytes",
                          (unsigned long long)n);
    p->host_base = m;
    p->host_how = 0;
    if (!(p->cfg.flags & FG_PAGER_NO_MLOCK)) {
        if (mlock(m, n) == 0)
            p->host_how = 1;
        else
            fg_pager_notice(p, "pager: HOST pool of %llu bytes not locked (mlock: %s)",
                            (unsigned long long)n, strerror(errno));
    }
    return FG_OK;
}

void fg_pager_host_pool_free(fg_pager *p)
{
    if (!p->host_base)
        return;
    if (p->host_how == 2)
        p->dev->iface->free(p->dev, FG_BUFT_PINNED, p->host_base);
    else
        munmap(p->host_base, p->cfg.budget[FG_TIER_HOST]);
    p->host_base = NULL;
}
