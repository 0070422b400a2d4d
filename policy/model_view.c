/* model_view.c - the model as the policy search sees it (fg_policy_model): the plan's view of
 * each unit (fg_plan_unit, the same figures runtime/engine.c gives fg_plan_make) and each
 * unit's padded weight chunks in the order the engine registers them with the pager (so that
 * fg_policy_weights_homed can apply the pager's placement rule exactly).
 *
 * The tensors are found as the engine finds them (runtime/engine.c add_tensor): unit by unit in
 * model/'s order, a name already added reused (a tied head streams the embedding it does not
 * own), a missing name replaced by its fallback when that one was added.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "policy_search.h"

#define PAGE_UP(x) (((x) + 4095) & ~4095ull)

typedef struct vt {
    fg_tensor_spec spec;
    uint32_t group, n_chunks, codec;
    uint64_t stored, max_chunk, max_floats;
    uint64_t *padded;           /* [n_chunks] */
} vt;

typedef struct view {
    vt *t;
    uint32_t n, cap;
} view;

static int find(const view *v, const char *name)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (!strcmp(v->t[i].spec.name, name))
            return (int)i;
    return -1;
}

static int fill(vt *t, const fg_store_tensor *st, fg_err *err)
{
    t->codec = st->codec.id;
    t->n_chunks = st->n_chunks;
    t->padded = malloc((st->n_chunks + 1) * sizeof *t->padded);
    if (!t->padded)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    uint64_t cols = st->n_dims > 1 ? st->dims[1] : 1;
    for (uint32_t c = 0; c < st->n_chunks; c++) {
        t->padded[c] = PAGE_UP(st->chunks[c].length);
        t->stored += t->padded[c];
        t->max_chunk = t->padded[c] > t->max_chunk ? t->padded[c] : t->max_chunk;
        uint64_t f = st->chunks[c].n_rows * cols;
        t->max_floats = f > t->max_floats ? f : t->max_floats;
    }
    return FG_OK;
}

static int add(fg_store *store, view *v, const fg_tensor_spec *spec, uint32_t group, int *index,
               fg_err *err)
{
    if ((*index = find(v, spec->name)) >= 0)
        return FG_OK;
    fg_store_tensor *st;
    int rc = fg_store_tensor_get(store, spec->name, &st, err);
    if (rc == FG_ERR_NOT_FOUND && spec->fallback[0] && (*index = find(v, spec->fallback)) >= 0)
        return FG_OK;
    if (rc)
        return rc == FG_ERR_NOT_FOUND ? fg_err_set(err, rc, "%s: tensor '%s' is missing from the "
                                                   "store", fg_store_dir(store), spec->name)
                                      : rc;
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 64;
        vt *p = realloc(v->t, cap * sizeof *p);
        if (!p) {
            fg_store_tensor_free(st);
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        }
        v->t = p, v->cap = cap;
    }
    vt *t = &v->t[v->n];
    memset(t, 0, sizeof *t);
    t->spec = *spec;
    t->group = group;
    rc = fill(t, st, err);
    fg_store_tensor_free(st);
    *index = (int)v->n++;
    return rc;
}

/* Unit u's figures for the plan (runtime/engine.c plan_unit) and its decoded floats. */
static void unit_figures(const view *v, const int *ts, uint32_t n_t, uint32_t u, fg_plan_unit *pu,
                         uint64_t *floats)
{
    memset(pu, 0, sizeof *pu);
    for (uint32_t i = 0; i < n_t; i++) {
        const vt *t = &v->t[ts[i]];
        fg_access a = t->group == u ? t->spec.access : FG_ACCESS_STREAM;
        uint64_t vals = t->spec.dims[0] * (t->spec.n_dims > 1 ? t->spec.dims[1] : 1);
        if (t->group == u)
            pu->stored += t->stored;
        if (a == FG_ACCESS_SMALL)
            pu->small_floats += vals;
        if (a == FG_ACCESS_LINEAR || a == FG_ACCESS_STREAM)
            *floats += vals;
        if (a == FG_ACCESS_SMALL || a == FG_ACCESS_LINEAR)
            pu->resident += t->stored;
        else
            pu->stream_chunk = t->max_chunk > pu->stream_chunk ? t->max_chunk : pu->stream_chunk;
    }
}

/* Chunks in pager id order (tensor order, then chunk order) with each unit's range, the
 * weights' codec (by bytes) and whether every matrix is 4-bit. */
static int chunks(const view *v, fg_policy_model *m, fg_err *err)
{
    uint64_t total = 0, by_codec[32] = {0};
    for (uint32_t i = 0; i < v->n; i++)
        total += v->t[i].n_chunks;
    m->chunk = malloc((total + 1) * sizeof *m->chunk);
    m->unit_first = calloc(m->pm.n_units + 1, sizeof *m->unit_first);
    if (!m->chunk || !m->unit_first)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    uint64_t k = 0;
    m->all_q4 = 1;
    for (uint32_t u = 0; u < m->pm.n_units; u++) {
        m->unit_first[u] = (uint32_t)k;
        for (uint32_t i = 0; i < v->n; i++)
            for (uint32_t c = 0; v->t[i].group == u && c < v->t[i].n_chunks; c++)
                m->chunk[k++] = v->t[i].padded[c];
    }
    m->unit_first[m->pm.n_units] = (uint32_t)k;
    for (uint32_t i = 0; i < v->n; i++) {
        if (v->t[i].spec.n_dims < 2)
            continue;
        by_codec[v->t[i].codec & 31] += v->t[i].stored;
        m->all_q4 &= v->t[i].codec == FG_CODEC_Q4;
    }
    for (int c = 0; c < 32; c++)
        if (by_codec[c] > by_codec[m->codec])
            m->codec = c;
    return FG_OK;
}

static int build(fg_store *store, fg_policy_model *m, view *v, fg_err *err)
{
    int rc = fg_engine_read_config(store, &m->hp, err);
    if (rc)
        return rc;
    uint32_t n_units = fg_model_n_units(&m->hp);
    m->units = calloc(n_units, sizeof *m->units);
    int (*ts)[FG_UNIT_MAX_TENSORS] = calloc(n_units, sizeof *ts);
    uint32_t *n_t = calloc(n_units, sizeof *n_t);
    rc = m->units && ts && n_t ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; rc == FG_OK && u < n_units; u++) {
        fg_tensor_spec spec[FG_UNIT_MAX_TENSORS];
        n_t[u] = fg_model_unit_tensors(&m->hp, u, spec);
        for (uint32_t i = 0; rc == FG_OK && i < n_t[u]; i++)
            rc = add(store, v, &spec[i], u, &ts[u][i], err);
    }
    uint64_t weights = 0, max_floats = 0;
    for (uint32_t i = 0; rc == FG_OK && i < v->n; i++) {
        weights += v->t[i].stored;
        max_floats = v->t[i].max_floats > max_floats ? v->t[i].max_floats : max_floats;
    }
    for (uint32_t u = 0; rc == FG_OK && u < n_units; u++)
        unit_figures(v, ts[u], n_t[u], u, &m->units[u], &m->linear_floats);
    m->pm = (fg_plan_model){&m->hp, n_units, m->units, weights, max_floats};
    free(ts);
    free(n_t);
    return rc ? rc : chunks(v, m, err);
}

int fg_policy_model_build(fg_store *store, fg_policy_model *m, fg_err *err)
{
    memset(m, 0, sizeof *m);
    view v = {0};
    int rc = build(store, m, &v, err);
    for (uint32_t i = 0; i < v.n; i++)
        free(v.t[i].padded);
    free(v.t);
    if (rc)
        fg_policy_model_free(m);
    return rc;
}

void fg_policy_model_free(fg_policy_model *m)
{
    if (!m)
        return;
    free(m->units);
    free(m->chunk);
    free(m->unit_first);
    memset(m, 0, sizeof *m);
}

uint64_t fg_policy_weights_homed(const fg_policy_model *m, double w_ram)
{
    uint64_t homed = 0;
    for (uint32_t u = 0; u < m->pm.n_units; u++) {
        double total = 0, before = 0;
        for (uint32_t k = m->unit_first[u]; k < m->unit_first[u + 1]; k++)
            total += (double)m->chunk[k];
        for (uint32_t k = m->unit_first[u]; k < m->unit_first[u + 1]; k++) {
            double s = (double)m->chunk[k], mid = (before + s / 2) / total;
            before += s;
            homed += mid < w_ram ? m->chunk[k] : 0;
        }
    }
    return homed;
}
