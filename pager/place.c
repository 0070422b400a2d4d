/* place.c - home tiers from FlexGen's placement fractions, and the pager's invariant checker.
 *
 * Placement rule (normative text in SPEC-section.md): chunks of one kind are split per group
 * by the cumulative-midpoint rule FlexGen uses for a layer's weights (get_choice in
 * flex_opt.py): within a group, in id order, chunk i with padded size s_i and bytes S_<i
 * before it has midpoint m_i = (S_<i + s_i / 2) / S; its home is DEVICE when m_i < g, HOST when
 * m_i < g + c, else DISK. Granularity comes from what a group is: a layer for weights (each
 * layer split by the fractions, tensors indivisible), a tensor for KV cache and activations
 * (each tensor's pages split by the fractions).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pager_int.h"

typedef struct gkey {
    uint8_t kind;
    uint32_t group, id;
} gkey;

static int cmp_gkey(const void *a, const void *b)
{
    const gkey *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
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

/* Homes for the run keys[lo, hi) of one (kind, group). */
static void place_group(fg_pager *p, const gkey *keys, size_t lo, size_t hi, const double *f,
                        uint8_t *home)
{
    double total = 0, before = 0;
    for (size_t i = lo; i < hi; i++)
        total += (double)p->chunks[keys[i].id].d.padded;
    for (size_t i = lo; i < hi; i++) {
        double s = (double)p->chunks[keys[i].id].d.padded;
        double mid = (before + s / 2) / total;
        before += s;
        home[keys[i].id] = mid < f[0] ? FG_TIER_DEVICE
                           : mid < f[0] + f[1] ? FG_TIER_HOST
                                               : FG_TIER_DISK;
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
    for (uint32_t i = 0; i < p->n_chunks; i++)
        keys[i] = (gkey){(uint8_t)p->chunks[i].d.kind, p->chunks[i].d.group, i};
    qsort(keys, p->n_chunks, sizeof *keys, cmp_gkey);
    for (size_t lo = 0, hi; lo < p->n_chunks; lo = hi) {
        for (hi = lo + 1; hi < p->n_chunks && keys[hi].kind == keys[lo].kind &&
                          keys[hi].group == keys[lo].group;
             hi++)
            ;
        place_group(p, keys, lo, hi, fractions(pol, keys[lo].kind), home);
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
