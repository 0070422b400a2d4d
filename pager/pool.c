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
 * makes no system call. Untouched pages of a granule cost nothing until touched.
 *
 * Committing ahead: place knows the homed region, the bottom of the pool that its chunks fill
 * first fit as they first load; fg_hostpool_prefault commits those granules (plus one) at once
 * and a helper thread faults them in (mlock, or MADV_POPULATE_WRITE when not locking), bottom
 * up. The kernel zeroes a fresh huge page on its first touch, and on a VM whose free memory
 * went back to the host that first touch also waits for the host: measured, 56% of a lazy
 * pool's first batch-1 prefill was clear_page under mlock and io_uring registration. The
 * helper does it beside the engine's open and its first reads and compute; a granule the
 * caller reaches first it faults itself, as before (the kernel serialises the two). The
 * accounting stays the caller's: committed bytes are counted when place commits them, so RSS
 * <= committed <= budget holds throughout (I10), and nothing past the homed region is touched
 * ahead (the streaming region stays committed as used). Pinned pools (the device's pin entry,
 * or one pinned allocation) are not committed ahead: pinning is the device's call, made from
 * the caller's thread. FG_PAGER_NO_PREFAULT (or FG_PAGER_PREFAULT=0) turns it off.
 *
 * When the
 * device pins memory in place (its optional pin entry: cudaHostRegister) granules are pinned
 * through it when committed, instead of mlock'ed (pinning locks the pages), and unpinned at
 * close after the device's copies are complete: on a GPU the budget is a ceiling for pinned
 * memory too. They are pinned in runs, one pin() range each, as long as the pinned memory so
 * far (at most FG_POOL_PIN_RUN_MAX): a copy whose host range spans two ranges is staged by the
 * CUDA driver, synchronously, unless split (the device's copy splits it, fg_device.h; a caller
 * copying a view with cudaMemcpyAsync itself does not), so few runs keep few extents across
 * two, at the price of pinning up to twice the span used (never past the budget). An extent is
 * named PINNED only when every granule it spans is pinned (fg_hostpool_buft: a refusal to pin,
 * as an OS short of lockable memory gives, leaves the rest of the pool locked or plain, copied
 * synchronously, with a notice). A device
 * with pinned memory but no pin entry gets the pool as one allocation of it (the whole budget
 * resident from open), its granules committed (registered) with use all the same.
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
    atomic_init(&h->pre_next, 0);
    atomic_init(&h->pre_stop, 0);
    atomic_init(&h->pre_errno, 0);
    h->size = size;
    h->granule = granule_of(size, io_block);
    h->n_gran = (uint32_t)((size + h->granule - 1) / h->granule);
    h->committed = calloc(h->n_gran, 1);
    if (!h->committed)
        return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    if (dev && !dev->iface->pin) { /* pinned memory only whole: allocate it so */
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
    h->how = dev && dev->iface->pin ? FG_POOL_PIN_LAZY : lock ? FG_POOL_LOCKED : FG_POOL_MMAP;
    h->pin_dev = h->how == FG_POOL_PIN_LAZY ? dev : NULL;
    h->lock = lock;
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

static uint64_t gran_bytes(const fg_hostpool *h, uint32_t g)
{
    uint64_t off = (uint64_t)g * h->granule;
    return h->size - off < h->granule ? h->size - off : h->granule;
}

/* The run of uncommitted granules [*lo, *hi) around g that is pinned as one range: up from g,
 * then down, to as many granules as are pinned already (a run doubles the pinned memory: few
 * runs, so few extents span two of them; a copy across two is split, fg_device.h), at least
 * FG_POOL_PIN_RUN_MIN and at most FG_POOL_PIN_RUN_MAX bytes (or one granule). */
static void pin_run(const fg_hostpool *h, uint32_t g, uint32_t *lo, uint32_t *hi)
{
    uint64_t cap = FG_POOL_PIN_RUN_MAX / h->granule, least = FG_POOL_PIN_RUN_MIN / h->granule;
    uint64_t want = h->pinned_gran < cap ? h->pinned_gran : cap;
    want = want > least ? want : least > 1 ? least : 1;
    *lo = g;
    *hi = g + 1;
    while (*hi - *lo < want && *hi < h->n_gran && !h->committed[*hi])
        (*hi)++;
    while (*hi - *lo < want && *lo > 0 && !h->committed[*lo - 1])
        (*lo)--;
}

/* Pin the run around granule g through the device (a page-aligned length: the range's tail
 * page is mapped, see map_huge_aligned) and commit its granules; a refusal leaves g and the
 * rest of the pool locked or plain. 1 when pinned. */
static int pin_one(fg_hostpool *h, uint32_t g, char *note, size_t note_n)
{
    fg_err e;
    uint32_t lo, hi;
    pin_run(h, g, &lo, &hi);
    uint64_t off = (uint64_t)lo * h->granule, n = 0;
    for (uint32_t k = lo; k < hi; k++)
        n += gran_bytes(h, k);
    if (h->pin_dev->iface->pin(h->pin_dev, h->base + off, (n + FG_PAGE - 1) & ~(FG_PAGE - 1),
                               &e) != FG_OK) {
        snprintf(note, note_n, "pager: HOST pool not pinned past %.1f MiB (%s); copies from the "
                 "rest are synchronous", h->pinned_bytes / 1048576.0, e.msg);
        h->how = h->lock ? FG_POOL_LOCKED : FG_POOL_MMAP;
        return 0;
    }
    for (uint32_t k = lo; k < hi; k++)
        h->committed[k] = FG_GRAN_COMMITTED | FG_GRAN_PINNED | (k == lo ? FG_GRAN_PIN_START : 0);
    h->pinned_bytes += n;
    h->committed_bytes += n;
    h->pinned_gran += hi - lo;
    return 1;
}

static void commit_one(fg_hostpool *h, uint32_t g, char *note, size_t note_n)
{
    uint64_t off = (uint64_t)g * h->granule, n = gran_bytes(h, g);
    if (h->how == FG_POOL_PIN_LAZY && pin_one(h, g, note, note_n)) /* pinning locks too */
        return;
    if (h->how == FG_POOL_LOCKED && mlock(h->base + off, n) != 0) {
        snprintf(note, note_n, "pager: HOST pool not locked past %.1f MiB (mlock: %s)",
                 h->committed_bytes / 1048576.0, strerror(errno));
        h->how = FG_POOL_MMAP; /* unlocked from here on; what is locked stays locked */
    }
    h->committed[g] |= FG_GRAN_COMMITTED;
    h->committed_bytes += n;
}

/* Engine piece g covers granules g and g + 1 (an op never spans more): registered once both
 * are committed. A refusal stops registration; the ops outside registered pieces run plain. */
static void register_piece(fg_hostpool *h, uint32_t g, char *note, size_t note_n)
{
    fg_err e;
    uint8_t c = h->committed[g];
    if (!h->registered || !(c & FG_GRAN_COMMITTED) || (c & FG_GRAN_REGISTERED) ||
        (g + 1 < h->n_gran && !h->committed[g + 1]))
        return;
    if (h->io->m->register_piece(h->io, g, &e) != FG_OK) {
        snprintf(note, note_n, "pager: HOST pool piece %u not registered with the engine (%s)",
                 g, e.msg);
        h->registered = 0;
        return;
    }
    h->committed[g] |= FG_GRAN_REGISTERED;
}

void fg_hostpool_commit(fg_hostpool *h, uint64_t off, uint64_t len, char *note, size_t note_n)
{
    fg_hostpool_poll(h, note, note_n);
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

/* ---------------------------------------------------------------- committing ahead */

/* The helper thread: faults granules [pre_lo, pre_hi) in, bottom up (the order first fit hands
 * out the homed region), one granule a call so close can stop it between two.
 * MADV_POPULATE_WRITE (Linux 5.14) faults in without writing a byte (the caller's reads may
 * already be landing in these pages), then mlock locks them when locking (it would fault them
 * in too, but ASan's mlock does nothing); after a refusal (RLIMIT_MEMLOCK) the rest is faulted
 * in unlocked, as the caller's commit_one would go on. Where the kernel lacks
 * MADV_POPULATE_WRITE and nothing is locked, the helper stops and first touches fault the rest
 * in, as without a helper. */
static void *prefault_main(void *arg)
{
    fg_hostpool *h = arg;
    int lock = h->pre_lock;
    for (uint32_t g = h->pre_lo; g < h->pre_hi && !atomic_load(&h->pre_stop); g++) {
        uint8_t *a = h->base + (uint64_t)g * h->granule;
        size_t n = (size_t)gran_bytes(h, g);
#ifdef MADV_POPULATE_WRITE
        int populated = madvise(a, n, MADV_POPULATE_WRITE) == 0 || errno != EINVAL;
#else
        int populated = 0;
#endif
        if (lock && mlock(a, n) != 0) { /* locks what is faulted in, faults in the rest */
            atomic_store(&h->pre_errno, errno ? errno : EPERM);
            lock = 0;
        }
        if (!lock && !populated)
            break;
        atomic_store(&h->pre_next, g + 1);
    }
    return NULL;
}

static void prefault_join(fg_hostpool *h)
{
    if (!h->pre_running)
        return;
    pthread_join(h->pre_thread, NULL);
    h->pre_running = 0;
}

void fg_hostpool_poll(fg_hostpool *h, char *note, size_t note_n)
{
    int e = atomic_load(&h->pre_errno);
    if (!e || h->pre_noted)
        return;
    h->pre_noted = 1;
    snprintf(note, note_n, "pager: HOST pool not locked ahead of use (mlock: %s); the rest is "
             "plain", strerror(e));
    if (h->how == FG_POOL_LOCKED)
        h->how = FG_POOL_MMAP; /* unlocked from here on, as commit_one after a refusal */
}

void fg_hostpool_prefault(fg_hostpool *h, uint64_t off, uint64_t len, char *note, size_t note_n)
{
    if (len == 0 || (h->how != FG_POOL_MMAP && h->how != FG_POOL_LOCKED))
        return;
    prefault_join(h);
    fg_hostpool_poll(h, note, note_n);
    uint32_t first = (uint32_t)(off / h->granule);
    uint32_t last = (uint32_t)((off + len - 1) / h->granule) + 1; /* one of slack, as commit */
    if (last >= h->n_gran)
        last = h->n_gran - 1;
    uint32_t lo = first, hi = first;
    while (lo <= last && h->committed[lo])
        lo++;
    for (uint32_t g = lo; g <= last; g++) /* counted now: what can be resident (I10) */
        if (!h->committed[g]) {
            h->committed[g] |= FG_GRAN_COMMITTED;
            h->committed_bytes += gran_bytes(h, g);
            hi = g + 1;
        }
    if (hi <= lo)
        return;
    h->pre_lo = lo;
    h->pre_hi = hi;
    h->pre_lock = h->how == FG_POOL_LOCKED;
    atomic_store(&h->pre_next, lo);
    atomic_store(&h->pre_stop, 0);
    h->pre_running = pthread_create(&h->pre_thread, NULL, prefault_main, h) == 0;
    if (!h->pre_running) /* no thread: fault them in here, so what is counted is held */
        prefault_main(h);
}

int fg_hostpool_locked(const fg_hostpool *h)
{
    int helper_refused = atomic_load((atomic_int *)&h->pre_errno) != 0;
    return (h->how != FG_POOL_MMAP && !(h->how == FG_POOL_LOCKED && helper_refused)) ||
           h->pinned_bytes;
}

fg_buft fg_hostpool_buft(const fg_hostpool *h, uint64_t off, uint64_t len)
{
    if (h->how == FG_POOL_PINNED)
        return FG_BUFT_PINNED;
    if (!h->pinned_bytes || len == 0)
        return FG_BUFT_HOST;
    for (uint64_t g = off / h->granule; g <= (off + len - 1) / h->granule; g++)
        if (!(h->committed[g] & FG_GRAN_PINNED))
            return FG_BUFT_HOST; /* past a refusal to pin: a synchronous copy */
    return FG_BUFT_PINNED;
}

void fg_hostpool_close(fg_hostpool *h, fg_device *dev)
{
    atomic_store(&h->pre_stop, 1);
    prefault_join(h);
    if (h->pinned_bytes) { /* the copies through pinned memory complete before it is unpinned */
        h->pin_dev->iface->sync(h->pin_dev, NULL);
        for (uint32_t g = 0; g < h->n_gran; g++)
            if (h->committed[g] & FG_GRAN_PIN_START)
                h->pin_dev->iface->unpin(h->pin_dev, h->base + (uint64_t)g * h->granule);
    }
    if (h->base && h->how == FG_POOL_PINNED)
        dev->iface->free(dev, FG_BUFT_PINNED, h->base);
    else if (h->base)
        munmap(h->base, h->size);
    free(h->committed);
    memset(h, 0, sizeof *h);
}
