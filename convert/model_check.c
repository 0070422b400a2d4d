/* model_check.c - a checkpoint against the tensors its config.json implies (model/'s table):
 * every required tensor present (under any spelling the family accepts) exactly once with the
 * expected shape and a dtype fg converts, and no other tensor but the buffers the family derives
 * from config.json itself (Llama's rotary_emb.inv_freq), whose shapes are checked and which are
 * then skipped. The first problem is one line naming the tensor and its file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "convert_int.h"

typedef struct sspec {
    fg_tensor_spec s;
    uint32_t orig; /* index in the model-order list */
} sspec;

static int cmp_spec(const void *a, const void *b)
{
    return strcmp(((const sspec *)a)->s.name, ((const sspec *)b)->s.name);
}

static void shape_str(char *buf, size_t cap, uint32_t nd, const uint64_t *d)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

static int check_one(const fg_ckpt_tensor *t, const fg_tensor_spec *s, fg_err *err)
{
    int ok = t->n_dims == s->n_dims;
    for (uint32_t d = 0; ok && d < s->n_dims; d++)
        ok = t->dims[d] == s->dims[d];
    if (!ok) {
        char a[128], b[64];
        shape_str(a, sizeof a, t->n_dims, t->dims);
        shape_str(b, sizeof b, s->n_dims, s->dims);
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s has shape %s, config.json "
                          "implies %s", t->path, t->name, a, b);
    }
    if (t->dtype != FG_CKPT_F32 && t->dtype != FG_CKPT_F16 && t->dtype != FG_CKPT_BF16)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s has dtype %s; fg converts F32, "
                          "F16 and BF16", t->path, t->name, fg_ckpt_dtype_name(t->dtype));
    return FG_OK;
}

/* Match each checkpoint tensor to its spec (sorted copy); seen[] counts matches. */
static int match_all(const fg_hparams *hp, const fg_ckpt *ck, const sspec *sorted, uint32_t n,
                     uint32_t *seen, uint32_t *map, fg_err *err)
{
    const fg_arch *a = fg_model_arch(hp);
    for (uint32_t i = 0; i < fg_ckpt_count(ck); i++) {
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
        sspec key;
        if (!a->canonical_name(t->name, key.s.name, sizeof key.s.name))
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor", t->path,
                              t->name, a->noun);
        const sspec *ss = bsearch(&key, sorted, n, sizeof *sorted, cmp_spec);
        uint64_t len = !ss && a->derived ? a->derived(hp, key.s.name) : 0;
        if (len) { /* a buffer fg derives from config.json: checked, then skipped */
            fg_tensor_spec d = {.n_dims = 1, .dims = {len}};
            snprintf(d.name, sizeof d.name, "%s", key.s.name);
            int rc = check_one(t, &d, err);
            if (rc)
                return rc;
            if (map)
                map[i] = FGC_SKIP;
            continue;
        }
        if (!ss)
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor for this "
                              "config.json", t->path, t->name, a->noun);
        uint32_t k = (uint32_t)(ss - sorted);
        if (seen[k]++)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of %s",
                              t->path, t->name, ss->s.name);
        int rc = check_one(t, &ss->s, err);
        if (rc)
            return rc;
        if (map)
            map[i] = ss->orig;
    }
    return FG_OK;
}

int fg_convert_check_ckpt(const fg_hparams *hp, const fg_ckpt *ck, uint32_t *map, fg_err *err)
{
    fg_tensor_spec *exp;
    uint32_t n;
    int rc = fg_model_tensors(hp, &exp, &n, err);
    if (rc)
        return rc;
    sspec *sorted = malloc((size_t)n * sizeof *sorted + 1);
    uint32_t *seen = calloc(n + 1, sizeof *seen);
    if (!sorted || !seen) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < n; k++) {
        sorted[k].s = exp[k];
        sorted[k].orig = k;
    }
    qsort(sorted, n, sizeof *sorted, cmp_spec);
    rc = match_all(hp, ck, sorted, n, seen, map, err);
    for (uint32_t k = 0; k < n && rc == FG_OK; k++)
        if (!seen[k] && !sorted[k].s.optional)
            rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %s (required by config.json) is "
                            "missing", fg_ckpt_dir(ck), sorted[k].s.name);
out:
    free(seen);
    free(sorted);
    free(exp);
    return rc;
}
