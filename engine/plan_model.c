/* plan_model.c - the plan's model built from a store (plan_model.h): the engine's tensor table
 * and each unit's figures for fg_plan_make.
 *
 * A unit's figures: stored = padded bytes of the tensors it owns; resident = SMALL and LINEAR
 * tensors it owns (loaded whole with the unit); stream_chunk = the largest chunk of a GATHER or
 * STREAM tensor, or of one it does not own (a tied head streams the embedding); small_floats =
 * f32 values of its SMALL tensors (decoded when it loads).
 *
 * A tensor's placement rank (pager/place.c homes lower ranks first): 1 for a mixture's routed
 * experts (a step reads the ones its tokens chose), 2 for a table only gathered by row (an
 * untied embedding: a step reads a row a token), 0 for everything a step reads whole.
 */
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "plan_model.h"


static int find(const fg_plan_weights *w, const char *name)
{
    for (uint32_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].spec.name, name))
            return (int)i;
    return -1;
}

static int shape_check(fg_store *store, const fg_tensor_spec *want, const fg_store_tensor *st,
                       fg_err *err)
{
    int ok = st->n_dims == want->n_dims;
    for (uint32_t d = 0; ok && d < want->n_dims; d++)
        ok = st->dims[d] == want->dims[d];
    if (ok)
        return FG_OK;
    return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor '%s' has %u dims [%llu, %llu], "
                      "config.json implies [%llu, %llu]", fg_store_dir(store), want->name,
                      st->n_dims, (unsigned long long)st->dims[0],
                      (unsigned long long)(st->n_dims > 1 ? st->dims[1] : 0),
                      (unsigned long long)want->dims[0], (unsigned long long)want->dims[1]);
}

static int fill(fg_plan_tensor *t, const fg_store_tensor *st, fg_err *err)
{
    t->codec = st->codec;
    t->file_id = st->file_id;
    t->chunks = malloc((st->n_chunks + 1) * sizeof *t->chunks);
    if (!t->chunks)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    t->n_chunks = st->n_chunks;
    uint64_t cols = st->n_dims > 1 ? st->dims[1] : 1;
    for (uint32_t c = 0; c < st->n_chunks; c++) {
        t->chunks[c] = st->chunks[c];
        t->stored += fg_page_up(st->chunks[c].length);
        uint64_t f = st->chunks[c].n_rows * cols;
        t->max_floats = f > t->max_floats ? f : t->max_floats;
    }
    return FG_OK;
}

/* Look spec up in the store (once; a tied head finds the embedding already added); its index
 * into *index. */
static int add(fg_store *store, fg_plan_weights *w, const fg_tensor_spec *spec, uint32_t group,
               int *index, fg_err *err)
{
    if ((*index = find(w, spec->name)) >= 0)
        return FG_OK;
    fg_store_tensor *st;
    int rc = fg_store_tensor_get(store, spec->name, &st, err);
    if (rc == FG_ERR_NOT_FOUND && spec->fallback[0] && (*index = find(w, spec->fallback)) >= 0)
        return FG_OK;
    if (rc)
        return rc == FG_ERR_NOT_FOUND
                   ? fg_err_set(err, rc, "%s: tensor '%s' is missing from the store",
                                fg_store_dir(store), spec->name)
                   : rc;
    rc = shape_check(store, spec, st, err);
    if (rc == FG_OK && w->n_t == w->cap_t) {
        uint32_t cap = w->cap_t ? 2 * w->cap_t : 64;
        fg_plan_tensor *p = realloc(w->t, cap * sizeof *p);
        rc = p ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        if (p)
            w->t = p, w->cap_t = cap;
    }
    if (rc == FG_OK) {
        fg_plan_tensor *t = &w->t[w->n_t];
        memset(t, 0, sizeof *t);
        t->spec = *spec;
        t->group = group;
        rc = fill(t, st, err);
        *index = (int)w->n_t++;
    }
    fg_store_tensor_free(st);
    return rc;
}

static void unit_of(const fg_plan_weights *w, uint32_t u, fg_plan_unit *pu)
{
    const fg_plan_unit_tensors *un = &w->ut[u];
    memset(pu, 0, sizeof *pu);
    for (uint32_t i = 0; i < un->n_t; i++) {
        const fg_plan_tensor *t = &w->t[un->t[i]];
        fg_access a = t->group == u ? t->spec.access : FG_ACCESS_STREAM;
        if (t->group == u)
            pu->stored += t->stored;
        if (a == FG_ACCESS_SMALL)
            pu->small_floats += t->spec.dims[0] * fg_tensor_spec_cols(&t->spec);
        if (a == FG_ACCESS_SMALL || a == FG_ACCESS_LINEAR) {
            pu->resident += t->stored;
            continue;
        }
        for (uint32_t c = 0; c < t->n_chunks; c++) {
            uint64_t b = fg_page_up(t->chunks[c].length);
            pu->stream_chunk = b > pu->stream_chunk ? b : pu->stream_chunk;
        }
    }
}

static void ranks(fg_plan_weights *w)
{
    for (uint32_t i = 0; i < w->n_t; i++)
        w->t[i].rank = fg_role_is_expert(w->t[i].spec.role) ? 1
                       : w->t[i].spec.access == FG_ACCESS_GATHER ? 2 : 0;
    for (uint32_t u = 0; u < w->pm.n_units; u++) /* a tied head streams the embedding */
        for (uint32_t i = 0; i < w->ut[u].n_t; i++)
            if (w->t[w->ut[u].t[i]].group != u)
                w->t[w->ut[u].t[i]].rank = 0;
}

/* The weight chunks in the pager's id order (the engine registers tensor by tensor, chunk by
 * chunk) grouped by owning unit: what pager/place.c splits by the fractions. */
static int chunk_list(fg_plan_weights *w, fg_err *err)
{
    uint64_t total = 0, k = 0;
    for (uint32_t i = 0; i < w->n_t; i++)
        total += w->t[i].n_chunks;
    w->chunk = malloc((total + 1) * sizeof *w->chunk);
    w->unit_first = calloc(w->pm.n_units + 1, sizeof *w->unit_first);
    w->chunk_rank = malloc(total + 1);
    if (!w->chunk || !w->unit_first || !w->chunk_rank)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; u < w->pm.n_units; u++) {
        w->unit_first[u] = (uint32_t)k;
        for (uint32_t i = 0; i < w->n_t; i++)
            for (uint32_t c = 0; w->t[i].group == u && c < w->t[i].n_chunks; c++) {
                w->chunk_rank[k] = (uint8_t)w->t[i].rank;
                w->chunk[k++] = fg_page_up(w->t[i].chunks[c].length);
            }
    }
    w->unit_first[w->pm.n_units] = (uint32_t)k;
    w->pm.chunk = w->chunk;
    w->pm.unit_first = w->unit_first;
    w->pm.chunk_rank = w->chunk_rank;
    return FG_OK;
}

static int build(fg_store *store, fg_plan_weights *w, fg_err *err)
{
    uint32_t n_units = fg_model_n_units(&w->hp);
    w->ut = calloc(n_units + 1, sizeof *w->ut);
    w->units = calloc(n_units + 1, sizeof *w->units);
    if (!w->ut || !w->units)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; u < n_units; u++) {
        fg_plan_unit_tensors *un = &w->ut[u];
        fg_tensor_spec spec[FG_UNIT_MAX_TENSORS];
        un->kind = fg_model_unit_kind(&w->hp, u, &un->layer);
        un->n_t = fg_model_unit_tensors(&w->hp, u, spec);
        for (uint32_t i = 0; i < un->n_t; i++) {
            int rc = add(store, w, &spec[i], u, &un->t[i], err);
            if (rc)
                return rc;
        }
    }
    uint64_t weights = 0, max_floats = 0;
    for (uint32_t i = 0; i < w->n_t; i++) {
        weights += w->t[i].stored;
        max_floats = w->t[i].max_floats > max_floats ? w->t[i].max_floats : max_floats;
    }
    for (uint32_t u = 0; u < n_units; u++)
        unit_of(w, u, &w->units[u]);
    w->pm = (fg_plan_model){&w->hp, n_units, w->units, weights, max_floats, NULL, NULL};
    ranks(w);
    return chunk_list(w, err);
}

int fg_plan_weights_build(fg_store *store, const fg_hparams *hp, fg_plan_weights *out,
                          fg_err *err)
{
    memset(out, 0, sizeof *out);
    out->hp = *hp;
    int rc = build(store, out, err);
    if (rc)
        fg_plan_weights_free(out);
    return rc;
}

void fg_plan_weights_free(fg_plan_weights *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; w->t && i < w->n_t; i++)
        free(w->t[i].chunks);
    free(w->t);
    free(w->ut);
    free(w->units);
    free(w->chunk);
    free(w->chunk_rank);
    free(w->unit_first);
    memset(w, 0, sizeof *w);
}
