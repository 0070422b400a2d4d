/* check.c - fg_pager_check: asserts the invariants numbered at the top of pager.c.
 *
 * It returns FG_ERR_CORRUPT naming the first broken invariant instead of aborting, so a test
 * prints what broke. O(chunks log chunks + free extents); meant for tests and debug builds.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "pager_int.h"

static int cmp_ext(const void *a, const void *b)
{
    const fg_extent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int holds(const pchunk *c, int t, fg_extent *e)
{
    int host = c->state == CS_LOADING || c->state == CS_HOST || c->state == CS_WRITING_BACK ||
               c->state == CS_UPLOADING;
    if (t == FG_TIER_HOST && host)
        *e = (fg_extent){c->host_off, c->d.padded};
    else if (t == FG_TIER_DEVICE && (c->state == CS_DEVICE || c->state == CS_UPLOADING))
        *e = (fg_extent){c->dev_off, c->d.padded};
    else
        return 0;
    return 1;
}

/* I1, I2: chunk extents and free extents tile the pool. */
static int check_tier(const fg_pager *p, int t, fg_err *err)
{
    const fg_arena *a = &p->arena[t];
    fg_extent *all = malloc((p->n_chunks + a->n_free + 1) * sizeof *all);
    if (!all)
        return fg_err_set(err, FG_ERR_NOMEM, "check: out of memory");
    size_t n = 0;
    uint64_t held = 0;
    for (uint32_t i = 0; i < a->n_free; i++) {
        const fg_extent *f = &a->free[i];
        if (f->len == 0 || f->off % FG_PAGE || f->len % FG_PAGE ||
            (i && a->free[i - 1].off + a->free[i - 1].len >= f->off)) {
            free(all);
            return fg_err_set(err, FG_ERR_CORRUPT, "I2: %s free list not sorted, coalesced and "
                              "aligned at entry %u", fg_tier_name((fg_tier)t), i);
        }
        all[n++] = *f;
    }
    for (uint32_t i = 0; i < p->n_chunks; i++)
        if (holds(&p->chunks[i], t, &all[n]))
            held += all[n++].len;
    qsort(all, n, sizeof *all, cmp_ext);
    uint64_t pos = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        ok = all[i].off == pos;
        pos += all[i].len;
    }
    free(all);
    if (!ok || pos != a->size || held != a->used || a->peak > a->size)
        return fg_err_set(err, FG_ERR_CORRUPT, "I1: %s extents do not tile the %llu-byte pool "
                          "(held %llu, used %llu, peak %llu)", fg_tier_name((fg_tier)t),
                          (unsigned long long)a->size, (unsigned long long)held,
                          (unsigned long long)a->used, (unsigned long long)a->peak);
    return FG_OK;
}

/* I10: HOST memory is committed where used, and never past the budget. */
static int check_committed(const fg_pager *p, fg_err *err)
{
    const fg_hostpool *h = &p->hp;
    uint64_t sum = 0;
    for (uint32_t g = 0; g < h->n_gran; g++)
        if (h->committed[g])
            sum += h->size - (uint64_t)g * h->granule < h->granule
                       ? h->size - (uint64_t)g * h->granule : h->granule;
    if (sum != h->committed_bytes || sum > p->cfg.budget[FG_TIER_HOST])
        return fg_err_set(err, FG_ERR_CORRUPT, "I10: %llu bytes committed, granules say %llu, "
                          "budget %llu", (unsigned long long)h->committed_bytes,
                          (unsigned long long)sum,
                          (unsigned long long)p->cfg.budget[FG_TIER_HOST]);
    fg_extent e;
    for (uint32_t i = 0; i < p->n_chunks; i++) {
        if (!holds(&p->chunks[i], FG_TIER_HOST, &e))
            continue;
        for (uint64_t g = e.off / h->granule; g <= (e.off + e.len - 1) / h->granule; g++)
            if (!h->committed[g])
                return fg_err_set(err, FG_ERR_CORRUPT, "I10: chunk %u holds HOST bytes in "
                                  "granule %llu, not committed", i, (unsigned long long)g);
    }
    return FG_OK;
}

static int check_chunk(const fg_pager *p, uint32_t i, uint64_t *pending, uint32_t *uploading,
                       fg_err *err)
{
    const pchunk *c = &p->chunks[i];
    int resident = c->state == CS_HOST || c->state == CS_DEVICE;
    uint8_t pin_state = c->pin_tier == FG_TIER_HOST ? CS_HOST : CS_DEVICE;
    *pending += c->pending;
    *uploading += c->state == CS_UPLOADING;
    if (c->pins && (!resident || c->state != pin_state))
        return fg_err_set(err, FG_ERR_CORRUPT, "I3: chunk %u pinned in state %d", i, c->state);
    if ((c->queued || c->pending) && c->state != CS_LOADING && c->state != CS_WRITING_BACK)
        return fg_err_set(err, FG_ERR_CORRUPT, "I4: chunk %u has I/O in state %d", i, c->state);
    if (c->state == CS_ERROR && (c->err >= 0 || c->pins || c->pending))
        return fg_err_set(err, FG_ERR_CORRUPT, "I5: chunk %u in ERROR with err %d", i, c->err);
    if (p->sticky.code && c->queued)
        return fg_err_set(err, FG_ERR_CORRUPT, "I6: chunk %u queued after a sticky error", i);
    if (c->dirty && ((!resident && c->state != CS_UPLOADING) || !p->files[c->d.file].writable))
        return fg_err_set(err, FG_ERR_CORRUPT, "I7: chunk %u dirty in state %d", i, c->state);
    if (c->home == FG_TIER_DEVICE && !p->dev_base)
        return fg_err_set(err, FG_ERR_CORRUPT, "I8: chunk %u homed on an absent DEVICE", i);
    if (c->hold)
        return fg_err_set(err, FG_ERR_CORRUPT, "I3: chunk %u still held between calls", i);
    return FG_OK;
}

int fg_pager_check(const fg_pager *p, fg_err *err)
{
    int rc = FG_OK;
    uint64_t pending = 0;
    uint32_t uploading = 0;
    for (int t = FG_TIER_HOST; t < FG_TIER_COUNT && rc == FG_OK; t++)
        rc = check_tier(p, t, err);
    if (rc == FG_OK)
        rc = check_committed(p, err);
    for (uint32_t i = 0; i < p->n_chunks && rc == FG_OK; i++)
        rc = check_chunk(p, i, &pending, &uploading, err);
    if (rc == FG_OK && uploading != p->uploading)
        rc = fg_err_set(err, FG_ERR_CORRUPT, "I9: %u chunks uploading, the pager counts %u",
                        uploading, p->uploading);
    if (rc == FG_OK && (pending != p->inflight || p->inflight > p->depth ||
                        p->n_free_ops + p->inflight != p->depth))
        rc = fg_err_set(err, FG_ERR_CORRUPT, "I4: %llu ops pending in chunks, %u in flight, "
                        "%u free slots, depth %u", (unsigned long long)pending, p->inflight,
                        p->n_free_ops, p->depth);
    return rc;
}
