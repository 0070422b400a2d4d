/* model_view.c - the model as the policy search sees it (fg_policy_model): the table
 * engine/plan_model.c builds for the engine (the same tensors, units, per-unit figures and
 * weight chunks in pager order: one builder, so the plan the search evaluates is the plan the
 * engine allocates by and homes what the pager homes), plus what only the search needs: the
 * values decoded per sweep and the weights' codec.
 */
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "engine.h"
#include "policy_search.h"


/* Values of LINEAR/STREAM weights each unit decodes (a tensor it does not own streams). */
static uint64_t linear_floats(const fg_plan_weights *w)
{
    uint64_t f = 0;
    for (uint32_t u = 0; u < w->pm.n_units; u++)
        for (uint32_t i = 0; i < w->ut[u].n_t; i++) {
            const fg_plan_tensor *t = &w->t[w->ut[u].t[i]];
            fg_access a = t->group == u ? t->spec.access : FG_ACCESS_STREAM;
            if (a == FG_ACCESS_LINEAR || a == FG_ACCESS_STREAM)
                f += t->spec.dims[0] * (t->spec.n_dims > 1 ? t->spec.dims[1] : 1);
        }
    return f;
}

void fg_policy_sweep_bytes(const fg_policy_model *m, double wg, fg_sweep_bytes *out)
{
    const fg_plan_weights *w = &m->w;
    memset(out, 0, sizeof *out);
    if (!w->t) { /* a model given by sizes alone: every byte a Linear's */
        out->lin = (double)(m->pm.weights - fg_plan_homed_weights(&m->pm, wg));
        return;
    }
    uint32_t *uses_lin = calloc(w->n_t, sizeof *uses_lin), *uses_small = calloc(w->n_t, 4);
    uint32_t *uses_head = calloc(w->n_t, 4);
    /* per unit and rank: bytes, and bytes before the chunk at hand (the pager's order) */
    uint64_t *total = calloc((size_t)w->pm.n_units * FG_PLACE_RANKS, sizeof *total);
    uint64_t *before = calloc((size_t)w->pm.n_units * FG_PLACE_RANKS, sizeof *before);
    if (!uses_lin || !uses_small || !uses_head || !total || !before) {
        free(uses_lin), free(uses_small), free(uses_head), free(total), free(before);
        return;
    }
    for (uint32_t u = 0; u < w->pm.n_units; u++)
        for (uint32_t i = 0; i < w->ut[u].n_t; i++) {
            int ti = w->ut[u].t[i];
            fg_access a = w->t[ti].group == u ? w->t[ti].spec.access : FG_ACCESS_STREAM;
            int lin = a == FG_ACCESS_LINEAR || a == FG_ACCESS_STREAM;
            *(w->ut[u].kind == FG_UNIT_HEAD ? &uses_head[ti] : &uses_lin[ti]) += lin;
            uses_small[ti] += a == FG_ACCESS_SMALL;
        }
    uint64_t bytes[FG_PLACE_RANKS];
    double thr[FG_PLACE_RANKS];
    fg_plan_rank_bytes(&w->pm, bytes);
    for (uint32_t r = 0; r < FG_PLACE_RANKS; r++)
        thr[r] = fg_place_threshold(bytes, r, wg);
    for (uint32_t ti = 0; ti < w->n_t; ti++)
        for (uint32_t c = 0; w->t[ti].group < w->pm.n_units && c < w->t[ti].n_chunks; c++)
            total[w->t[ti].group * FG_PLACE_RANKS + w->t[ti].rank] +=
                fg_page_up(w->t[ti].chunks[c].length);
    /* the pager's rule (pager/place.c), chunk by chunk in registration order */
    for (uint32_t ti = 0; ti < w->n_t; ti++) {
        const fg_plan_tensor *t = &w->t[ti];
        uint32_t g = t->group < w->pm.n_units ? t->group : 0;
        uint32_t gr = g * FG_PLACE_RANKS + t->rank;
        int kept = w->ut[g].kind == FG_UNIT_EMBED, gather = t->spec.access == FG_ACCESS_GATHER;
        if (gather)
            out->gather_chunks += t->n_chunks;
        for (uint32_t c = 0; c < t->n_chunks; c++) {
            double len = (double)t->chunks[c].length;
            uint64_t padded = fg_page_up(t->chunks[c].length);
            fg_tier home = fg_place_tier(before[gr], padded, total[gr], 0, thr[t->rank]);
            before[gr] += padded;
            if (home != FG_TIER_DISK)
                continue;
            out->lin += len * uses_lin[ti];
            out->experts += fg_role_is_expert(t->spec.role) ? len * uses_lin[ti] : 0;
            out->head += len * uses_head[ti];
            *(kept ? &out->kept : &out->small) += len * uses_small[ti];
            out->gather += gather ? len : 0;
        }
    }
    free(uses_lin), free(uses_small), free(uses_head), free(total), free(before);
}

/* The weights' codec (by bytes), whether every matrix is 4-bit, and whether most bytes are Q4
 * grouped along the input axis (what the CPU backend's int8 kernels take). */
static void codecs(const fg_plan_weights *w, fg_policy_model *m)
{
    uint64_t by_codec[32] = {0}, q4_in = 0, all = 0;
    m->all_q4 = 1;
    for (uint32_t i = 0; i < w->n_t; i++) {
        if (w->t[i].spec.n_dims < 2)
            continue;
        by_codec[w->t[i].codec.id & 31] += w->t[i].stored;
        all += w->t[i].stored;
        m->all_q4 &= w->t[i].codec.id == FG_CODEC_Q4 || fg_role_stays_wide(w->t[i].spec.role);
        if (w->t[i].codec.id == FG_CODEC_Q4 && w->t[i].codec.group_axis == 1)
            q4_in += w->t[i].stored;
    }
    for (int c = 0; c < 32; c++)
        if (by_codec[c] > by_codec[m->codec])
            m->codec = c;
    m->q4_int8 = all && q4_in * 2 > all;
}

int fg_policy_model_build(const fg_model *model, fg_policy_model *m, fg_err *err)
{
    memset(m, 0, sizeof *m);
    m->hp = *fg_model_hparams(model);
    int rc = fg_plan_weights_build(fg_model_store(model), &m->hp, &m->w, err);
    if (rc == FG_OK) {
        m->pm = m->w.pm;
        m->pm.hp = &m->hp;
        m->linear_floats = linear_floats(&m->w);
        for (uint32_t i = 0; i < m->w.n_t; i++) {
            const fg_tensor_spec *sp = &m->w.t[i].spec;
            if (!fg_role_is_expert(sp->role))
                continue;
            m->experts += m->w.t[i].stored;
            m->expert_floats += sp->dims[0] * (sp->n_dims > 1 ? sp->dims[1] : 1);
        }
        fg_policy_sweep_bytes(m, 0, &m->sweep);
        codecs(&m->w, m);
    }
    if (rc)
        fg_policy_model_free(m);
    return rc;
}

void fg_policy_model_free(fg_policy_model *m)
{
    if (!m)
        return;
    fg_plan_weights_free(&m->w);
    memset(m, 0, sizeof *m);
}

uint64_t fg_policy_weights_homed(const fg_policy_model *m, double w_ram)
{
    return fg_plan_homed_weights(&m->pm, w_ram);
}
