/* place.c - home tiers from FlexGen's placement fractions, and the pager's invariant checker.
 *
 * Placement rule (normative text in SPEC.md "Placement"): chunks of one kind are split per group
 * by the cumulative-midpoint rule FlexGen uses for a layer's weights (get_choice in
 * flex_opt.py): within a group, in id order, chunk i with padded size s_i and bytes S_<i
 * before it has midpoint m_i = (S_<i + s_i / 2) / S; its home is DEVICE when m_i < g, HOST when
 * m_i < g + c, else DISK. Granularity comes from what a group is: a layer for weights (each
 * layer split by the fractions, tensors indivisible), a tensor for KV cache and activations
 * (each tensor's pages split by the fractions).
 *
 * Ranks order the bytes a fraction covers: a kind's chunks of rank 0 (read every step) take the
 * tiers before those of rank 1 (a mixture's experts, read when routed), and so on. Each rank's
 * groups are split as above by thresholds moved onto the rank's own bytes (fg_place_threshold):
 * with weights 30% in RAM and a fifth of them rank 0, every rank-0 group is homed whole and each
 * rank-1 group's first eighth. With one rank it is FlexGen's rule exactly.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pager_int.h"

typedef struct gkey {
    uint8_t kind, rank;
    uint32_t group, id;
} gkey;

static int cmp_gkey(const void *a, const void *b)
{
    const gkey *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int check_fractions(const double *f, const char *what, fg_err *err)
{
    for (int i = 0; i < 3; i++)
        if (!(f[i] >= 0 && f[i] <= 1))
            return fg_err_set(err, FG_ERR_INVALID_ARG,
                              "pager: placement fraction %s[%d] = %g outside [0, 1]", what, i,
                              f[i]);
    if (fabs(f[0] + f[1] + f[2] - 1) > 1e-6)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "pager: placement fractions %s = (%g, %g, %g) do not sum to 1", what,
                          f[0], f[1], f[2]);
    return FG_OK;
}

static const double *fractions(const fg_pager_policy *pol, int kind)
{
    return kind == FG_CHUNK_WEIGHT ? pol->w : kind == FG_CHUNK_KV ? pol->c : pol->h;
}

static const char *kind_name(int kind)
{
    return kind == FG_CHUNK_WEIGHT ? "weights" : kind == FG_CHUNK_KV ? "KV cache" : "activations";
}

double fg_place_threshold(const uint64_t bytes[FG_PLACE_RANKS], uint32_t r, double t)
{
    uint64_t below = 0, total = 0;
    for (uint32_t q = 0; q < FG_PLACE_RANKS; q++) {
        below += q < r ? bytes[q] : 0;
        total += bytes[q];
    }
    if (r >= FG_PLACE_RANKS || !bytes[r] || bytes[r] == total)
        return t;
    double x = (t * (double)total - (double)below) / (double)bytes[r];
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

fg_tier fg_place_tier(uint64_t before, uint64_t s, uint64_t total, double dev, double host)
{
    double mid = ((double)before + (double)s / 2) / (double)total;
    return mid < dev ? FG_TIER_DEVICE : mid < host ? FG_TIER_HOST : FG_TIER_DISK;
}

/* Homes for the run keys[lo, hi) of one (kind, rank, group); bytes = the kind's per rank. */
static void place_group(fg_pager *p, const gkey *keys, size_t lo, size_t hi, const double *f,
                        const uint64_t *bytes, uint8_t *home)
{
    uint64_t total = 0, before = 0;
    uint32_t r = keys[lo].rank;
    double dev = fg_place_threshold(bytes, r, f[0]), host = fg_place_threshold(bytes, r, f[0] + f[1]);
    for (size_t i = lo; i < hi; i++)
        total += p->chunks[keys[i].id].d.padded;
    for (size_t i = lo; i < hi; i++) {
        uint64_t s = p->chunks[keys[i].id].d.padded;
        home[keys[i].id] = (uint8_t)fg_place_tier(before, s, total, dev, host);
        before += s;
    }
}

/* homed[t] gets the bytes homed in each tier. */
static int check_fit(fg_pager *p, const uint8_t *home, uint64_t *homed, fg_err *err)
{
    uint64_t stream = 0;
    memset(homed, 0, FG_TIER_COUNT * sizeof *homed);
    for (uint32_t i = 0; i < p->n_chunks; i++) {
        uint64_t s = p->chunks[i].d.padded;
        homed[home[i]] += s;
        if (home[i] != FG_TIER_HOST && s > stream)
            stream = s;
    }
    if (homed[FG_TIER_DEVICE] && !p->dev_base)
        return fg_err_set(err, FG_ERR_PAGER_NO_TIER, "pager: the policy puts %llu bytes on the "
                          "DEVICE tier, which is absent (no GPU, no device backend or a 0 budget)",
                          (unsigned long long)homed[FG_TIER_DEVICE]);
    if (homed[FG_TIER_DEVICE] > p->arena[FG_TIER_DEVICE].size)
        return fg_err_set(err, FG_ERR_PAGER_BUDGET, "pager: the policy homes %llu bytes on "
                          "DEVICE, over its budget of %llu", (unsigned long long)homed[2],
                          (unsigned long long)p->arena[FG_TIER_DEVICE].size);
    if (homed[FG_TIER_HOST] + stream > p->arena[FG_TIER_HOST].size)
        return fg_err_set(err, FG_ERR_PAGER_BUDGET, "pager: the policy homes %llu bytes on "
                          "HOST and streams chunks of up to %llu bytes through it, over its "
                          "budget of %llu", (unsigned long long)homed[1],
                          (unsigned long long)stream,
                          (unsigned long long)p->arena[FG_TIER_HOST].size);
    return FG_OK;
}

int fg_pager_place(fg_pager *p, const fg_pager_policy *pol, fg_err *err)
{
    int rc = FG_OK;
    for (int k = 0; k < FG_CHUNK_KIND_COUNT && rc == FG_OK; k++)
        rc = check_fractions(fractions(pol, k), k == 0 ? "w" : k == 1 ? "c" : "h", err);
    for (int k = 0; k < FG_CHUNK_KIND_COUNT && rc == FG_OK; k++)
        for (uint32_t i = 0; i < p->n_chunks && rc == FG_OK; i++)
            if ((int)p->chunks[i].d.kind == k && fractions(pol, k)[0] > 0 && !p->dev_base)
                rc = fg_err_set(err, FG_ERR_PAGER_NO_TIER,
                                "pager: the policy puts %g of the %s on the DEVICE tier, which "
                                "is absent (no GPU, no device backend or a 0 budget)",
                                fractions(pol, k)[0], kind_name(k));
    if (rc)
        return rc;
    gkey *keys = malloc((p->n_chunks + 1) * sizeof *keys);
    uint8_t *home = malloc(p->n_chunks + 1);
    if (!keys || !home) {
        free(keys);
        free(home);
        return fg_err_set(err, FG_ERR_NOMEM, "pager: out of memory");
    }
    uint64_t bytes[FG_CHUNK_KIND_COUNT][FG_PLACE_RANKS];
    memset(bytes, 0, sizeof bytes);
    for (uint32_t i = 0; i < p->n_chunks; i++) {
        const fg_pager_chunk_desc *d = &p->chunks[i].d;
        keys[i] = (gkey){(uint8_t)d->kind, (uint8_t)d->rank, d->group, i};
        bytes[d->kind][d->rank] += d->padded;
    }
    qsort(keys, p->n_chunks, sizeof *keys, cmp_gkey);
    for (size_t lo = 0, hi; lo < p->n_chunks; lo = hi) {
        for (hi = lo + 1; hi < p->n_chunks && keys[hi].kind == keys[lo].kind &&
                          keys[hi].rank == keys[lo].rank && keys[hi].group == keys[lo].group;
             hi++)
            ;
        place_group(p, keys, lo, hi, fractions(pol, keys[lo].kind), bytes[keys[lo].kind], home);
    }
    uint64_t homed[FG_TIER_COUNT];
    rc = check_fit(p, home, homed, err);
    for (uint32_t i = 0; i < p->n_chunks && rc == FG_OK; i++)
        p->chunks[i].home = home[i];
    if (rc == FG_OK) /* the pools' homed regions (pager.c make_room) */
        p->split[FG_TIER_HOST] = homed[FG_TIER_HOST], p->split[FG_TIER_DEVICE] = homed[FG_TIER_DEVICE];
    if (rc == FG_OK && !(p->cfg.flags & FG_PAGER_NO_PREFAULT)) {
        /* the homed region is the bottom of the pool, filled first fit as its chunks first
         * load: commit it now and fault it in beside the first reads (pool.c) */
        char note[160] = "";
        fg_hostpool_prefault(&p->hp, 0, homed[FG_TIER_HOST], note, sizeof note);
        if (note[0])
            fg_pager_notice(p, "%s", note);
    }
    free(keys);
    free(home);
    return rc;
}
