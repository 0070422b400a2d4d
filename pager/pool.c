/* pool.c - the memory behind the HOST and DEVICE tiers.
 *
 * A budget is a ceiling, never an allocation. The HOST pool is one address range of exactly its
 * budget, reserved at open (MAP_NORESERVE: no memory yet), so an extent's address is
 * base + offset for the pager's whole life; memory arrives as extents are first used. The
 * range is cut into granules (a multiple of 2 MiB, >= io_block, at most FG_POOL_MAX_GRANULES);
 * fg_hostpool_commit, called for every extent the pager takes, commits the granules it covers
 * plus one of slack the first time: mlock (when locking; refused under a small RLIMIT_MEMLOCK,
 * then the pool works unlocked and a notice says so) and registration with the I/O engine
 * (engine piece g spans granules g and g + 1, so every op, <= io_block <= one granule, lies in
 * one registered piece). Committed memory only grows (bounded by the budget): the steady state
 * makes no system call. Untouched pages of a granule cost nothing until touched. When the
 * device offers pinned memory the pool is one allocation of it instead (cudaHostAlloc cannot
 * grow in place, so on a GPU the whole budget is resident from open: a known limit, SPEC
 * "Pager"); its granules are committed (registered) with use all the same.
 *
 * Inside a pool, fg_arena hands out page-granular extents first-fit from a sorted, coalesced
 * free list (O(free extents) per call; the list stays short because chunks of a stream have
 * similar sizes and frees coalesce). First fit from the bottom (and the streaming region from
 * the top of the pool) keeps the committed span close to the peak in use. Fragmentation can make
 * an allocation fail while enough bytes are free in total; the pager then evicts more (see
 * make_room in pager.c).
 *
 * pool.c calls nothing in pager.c: what it has to say comes back as a notice string the caller
 * prints, so pager.c -> pool.c is the only direction.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
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

/* ---------------------------------------------------------------- the HOST pool */

/* Anonymous memory aligned to 2 MiB, reserved without commit (MAP_NORESERVE: no page exists
 * until it is touched) and advised for transparent huge pages: an O_DIRECT read of 1 MiB into
 * 4 KiB pages needs 256 scatter-gather segments, more than many block devices take in one
 * request (virtio-blk: 254), so the kernel splits it; in huge pages it is one segment. NULL
 * (errno set) on failure. */
static void *map_huge_aligned(uint64_t n)
{
    const uint64_t huge = 2ull << 20;
    uint8_t *m = mmap(NULL, n + huge, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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

/* Granule bytes: a multiple of 2 MiB, at least io_block (so an op that starts in granule g
 * ends in g or g + 1, inside engine piece g), and at most FG_POOL_MAX_GRANULES of them. */
static uint64_t granule_of(uint64_t size, uint64_t io_block)
{
    const uint64_t huge = 2ull << 20;
    uint64_t g = (size + FG_POOL_MAX_GRANULES - 1) / FG_POOL_MAX_GRANULES;
    if (g < io_block)
        g = io_block;
    return (g + huge - 1) / huge * huge;
}

int fg_hostpool_open(fg_hostpool *h, fg_device *dev, uint64_t size, uint64_t io_block, int lock,
                     char *note, size_t note_n, fg_err *err)
{
    memset(h, 0, sizeof *h);
    h->size = size;
    h->granule = granule_of(size, io_block);
    h->n_gran = (uint32_t)((size + h->granule - 1) / h->granule);
    h->committed = calloc(h->n_gran, 1);
    if (!h->committed)
        return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    if (dev) {
        fg_err perr;
        int rc = dev->iface->alloc(dev, FG_BUFT_PINNED, size, (void **)&h->base, &perr);
        if (rc == FG_OK) {
            h->how = FG_POOL_PINNED;
            return FG_OK;
        }
        h->base = NULL;
        if (rc != FG_ERR_UNSUPPORTED) /* a device with pinned memory that refused this much */
            snprintf(note, note_n, "pager: pinned host allocation of the %.1f MiB HOST budget "
                     "refused (%s); using mmap", size / 1048576.0, perr.msg);
    }
    h->base = map_huge_aligned(size);
    if (!h->base)
        return fg_err_sys(err, FG_ERR_NOMEM, errno, "pager: HOST budget of %.1f MiB: cannot "
                          "reserve its address space", size / 1048576.0);
    h->how = lock ? FG_POOL_LOCKED : FG_POOL_MMAP;
    return FG_OK;
}

/* Offer the pool to the engine for fixed-buffer I/O (nothing is registered until committed). */
void fg_hostpool_attach(fg_hostpool *h, fg_pager_io *io, char *note, size_t note_n)
{
    fg_err e;
    h->io = io;
    h->registered = io->m->register_memory &&
                    io->m->register_memory(io, h->base, h->size, h->granule, &e) == FG_OK;
    if (io->m->register_memory && !h->registered)
        snprintf(note, note_n, "pager: HOST pool not registered with the engine (%s)", e.msg);
}

static void commit_one(fg_hostpool *h, uint32_t g, char *note, size_t note_n)
{
    uint64_t off = (uint64_t)g * h->granule;
    uint64_t n = h->size - off < h->granule ? h->size - off : h->granule;
    if (h->how == FG_POOL_LOCKED && mlock(h->base + off, n) != 0) {
        snprintf(note, note_n, "pager: HOST pool not locked past %.1f MiB (mlock: %s)",
                 h->committed_bytes / 1048576.0, strerror(errno));
        h->how = FG_POOL_MMAP; /* unlocked from here on; what is locked stays locked */
    }
    h->committed[g] = 1;
    h->committed_bytes += n;
}

/* Engine piece g covers granules g and g + 1 (an op never spans more): registered once both
 * are committed. A refusal stops registration; the ops outside registered pieces run plain. */
static void register_piece(fg_hostpool *h, uint32_t g, char *note, size_t note_n)
{
    fg_err e;
    if (!h->registered || h->committed[g] != 1 || (g + 1 < h->n_gran && !h->committed[g + 1]))
        return;
    if (h->io->m->register_piece(h->io, g, &e) != FG_OK) {
        snprintf(note, note_n, "pager: HOST pool piece %u not registered with the engine (%s)",
                 g, e.msg);
        h->registered = 0;
        return;
    }
    h->committed[g] = 2;
}

void fg_hostpool_commit(fg_hostpool *h, uint64_t off, uint64_t len, char *note, size_t note_n)
{
    uint32_t first = (uint32_t)(off / h->granule);
    uint32_t last = (uint32_t)((off + len - 1) / h->granule) + 1; /* one granule of slack */
    if (last >= h->n_gran)
        last = h->n_gran - 1;
    for (uint32_t g = first; g <= last; g++)
        if (!h->committed[g])
            commit_one(h, g, note, note_n);
    for (uint32_t g = first ? first - 1 : 0; g <= last; g++)
        register_piece(h, g, note, note_n);
}

void fg_hostpool_close(fg_hostpool *h, fg_device *dev)
{
    if (h->base && h->how == FG_POOL_PINNED)
        dev->iface->free(dev, FG_BUFT_PINNED, h->base);
    else if (h->base)
        munmap(h->base, h->size);
    free(h->committed);
    memset(h, 0, sizeof *h);
}
