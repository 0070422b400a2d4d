/* model_check.c - a checkpoint against the tensors its config.json implies (model/'s table):
 * every required tensor present (under any spelling the family accepts, as a part of a fused
 * tensor the family names, such as Phi-3's qkv_proj, or as the blocks of a stacked one, such as
 * a mixture's experts.E.gate_proj, or every expert's blocks of one or more stacked ones, such as
 * GraniteMoE's input_linear [experts, 2 x width, hidden]) exactly once with the expected shape and a
 * dtype fg converts, and no other tensor but the buffers the family derives from config.json
 * itself (Llama's rotary_emb.inv_freq), whose shapes are checked and which are then skipped. The
 * first problem is one line naming the tensor and its file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "convert_int.h"
#include "ckpt_int.h"

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

/* t's shape must be dims[0 .. nd) and its dtype one fg converts. */
/* t's shape is dims (FG_ERR_SIZE_MISMATCH naming both) */
static int check_dims(const fg_ckpt_tensor *t, uint32_t nd, const uint64_t *dims, fg_err *err)
{
    int ok = t->n_dims == nd;
    for (uint32_t d = 0; ok && d < nd; d++)
        ok = t->dims[d] == dims[d];
    if (!ok) {
        char a[128], b[64];
        shape_str(a, sizeof a, t->n_dims, t->dims);
        shape_str(b, sizeof b, nd, dims);
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s has shape %s, config.json "
                          "implies %s", t->path, t->name, a, b);
    }
    return FG_OK;
}

/* ... and a dtype fg converts */
static int check_shape(const fg_ckpt_tensor *t, uint32_t nd, const uint64_t *dims, fg_err *err)
{
    int rc = check_dims(t, nd, dims, err);
    if (rc)
        return rc;
    if (t->dtype != FG_CKPT_F32 && t->dtype != FG_CKPT_F16 && t->dtype != FG_CKPT_BF16 &&
        !ck_dtype_is_block(t->dtype) && /* (GGUF's blocks, dequantized) */
        !(t->dtype == FG_CKPT_F8_E4M3 && t->scales)) /* (FP8 with block scales: fp8.c) */
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s has dtype %s; fg converts F32, "
                          "F16 and BF16", t->path, t->name, fg_ckpt_dtype_name(t->dtype));
    return FG_OK;
}

static int check_one(const fg_ckpt_tensor *t, const fg_tensor_spec *s, fg_err *err)
{
    return check_shape(t, s->n_dims, s->dims, err);
}

typedef struct match {
    const fg_hparams *hp;
    const fg_arch *a;
    const sspec *sorted;
    uint32_t n;
    uint32_t *seen;     /* [n] matches of each sorted spec (blocks of a stacked one) */
    fgc_part **blk;     /* [n] a stacked spec's checkpoint tensor and row per block, or NULL */
    fgc_source *src;    /* [n] in model order, or NULL */
    const fg_ckpt *ck;
} match;

static const sspec *find(const match *m, const char *name)
{
    sspec key;
    snprintf(key.s.name, sizeof key.s.name, "%s", name);
    return bsearch(&key, m->sorted, m->n, sizeof *m->sorted, cmp_spec);
}

/* Spec ss comes from tensor i at row0. */
static int take(const match *m, const sspec *ss, const fg_ckpt_tensor *t, uint32_t i,
                uint64_t row0, fg_err *err)
{
    if (m->seen[ss - m->sorted]++)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of %s",
                          t->path, t->name, ss->s.name);
    if (m->src)
        m->src[ss->orig] = (fgc_source){i, row0, NULL};
    return FG_OK;
}

/* Room for a stacked spec's blocks, none found yet. */
static fgc_part *new_blocks(uint32_t n)
{
    fgc_part *b = malloc(n * sizeof *b);
    for (uint32_t j = 0; b && j < n; j++)
        b[j] = (fgc_part){.index = FGC_NONE, .scales = FGC_NONE};
    return b;
}

/* Tensor i is block b of the stacked spec named `name`: one block's rows, the other dims. */
static int take_block(const match *m, const fg_ckpt_tensor *t, uint32_t i, const char *name,
                      uint32_t b, fg_err *err)
{
    const sspec *ss = find(m, name);
    size_t k = ss ? (size_t)(ss - m->sorted) : 0;
    if (!ss || ss->s.blocks < 2 || b >= ss->s.blocks || ss->s.dims[0] % ss->s.blocks)
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor for this "
                          "config.json", t->path, t->name, m->a->noun);
    fg_tensor_spec one = ss->s;
    one.dims[0] /= ss->s.blocks;
    snprintf(one.name, sizeof one.name, "%s", t->name);
    int rc = check_one(t, &one, err);
    if (rc)
        return rc;
    if (!m->blk[k] && m->seen[k])
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of %s",
                          t->path, t->name, ss->s.name);
    if (!m->blk[k] && !(m->blk[k] = new_blocks(ss->s.blocks)))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (m->blk[k][b].index != FGC_NONE)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of block "
                          "%u of %s", t->path, t->name, b, ss->s.name);
    /* one stored tensor, one 16-bit type: BF16 blocks, or F16/F32 ones, not both */
    for (uint32_t j = 0; j < ss->s.blocks; j++) {
        const fg_ckpt_tensor *o = m->blk[k][j].index == FGC_NONE ? NULL
                                : fg_ckpt_tensor_at(m->ck, m->blk[k][j].index);
        if (o && (o->dtype == FG_CKPT_BF16) != (t->dtype == FG_CKPT_BF16))
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s is %s, %s is %s: the "
                              "blocks of %s must be one of BF16 or the others", t->path,
                              t->name, fg_ckpt_dtype_name(t->dtype), o->name,
                              fg_ckpt_dtype_name(o->dtype), ss->s.name);
        if (o)
            break;
    }
    m->blk[k][b] = (fgc_part){.index = i, .scales = FGC_NONE};
    m->seen[k]++;
    return FG_OK;
}

/* Tensor i holds every expert of the stacked specs `parts`, [experts, rows, cols]: expert e's
 * rows of each part, in part order (GraniteMoE's input_linear: gate then up; transformers 5's
 * in-memory mlp.experts.gate_up_proj alike), so block e of part p is its rows e * rows + (the
 * rows of the parts before p), read as [experts * rows, cols]. layout (FG_FUSE_*): the parts'
 * rows alternating (row r of part p is the block's row r * n_parts + p), each expert stored
 * transposed, [experts, cols, rows] (gpt-oss's gate_up_proj; vectors, the experts' biases,
 * [experts, rows]); MXFP4, the values' codes [experts, rows, cols / 32, 16] bytes, or their
 * scales [experts, rows, cols / 32] bytes (either may come first: the parts are made by the
 * first, the scales' index kept beside). */
static int take_batched(const match *m, const fg_ckpt_tensor *t, uint32_t i,
                        char (*parts)[FG_TENSOR_NAME_MAX], uint32_t n_parts, uint32_t layout,
                        fg_err *err)
{
    const sspec *ss[FG_FUSED_MAX];
    uint64_t dims[3] = {0, 0, 0};
    int vec = 0, inter = (layout & FG_FUSE_INTERLEAVED) != 0;
    int trans = (layout & FG_FUSE_TRANSPOSED) != 0, mx = (layout & FG_FUSE_MXFP4) != 0;
    int scl = (layout & FG_FUSE_MXFP4_SCALES) != 0;
    for (uint32_t p = 0; p < n_parts; p++) {
        const fg_tensor_spec *s = (ss[p] = find(m, parts[p])) ? &ss[p]->s : NULL;
        if (!s || s->blocks < 2 || s->dims[0] % s->blocks)
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor for this "
                              "config.json", t->path, t->name, m->a->noun);
        if (p && (s->blocks != dims[0] || fg_tensor_spec_cols(s) != dims[2] ||
                  (s->n_dims == 1) != vec || (inter && s->dims[0] != ss[0]->s.dims[0])))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: the parts of %s differ in shape",
                              t->path, t->name); /* a family table mistake */
        vec = s->n_dims == 1;
        dims[0] = s->blocks;
        dims[1] += s->dims[0] / s->blocks;
        dims[2] = fg_tensor_spec_cols(s);
    }
    uint64_t rows = dims[1], cols = dims[2];
    int rc;
    if ((mx || scl) && (vec || trans || cols % 32))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: tensor %s: MXFP4 needs rows of a "
                          "multiple of 32 values (config.json implies %llu)", t->path, t->name,
                          (unsigned long long)cols);
    if (mx || scl) { /* bytes of codes or of exponents */
        uint64_t want[4] = {dims[0], rows, cols / 32, 16};
        rc = check_dims(t, mx ? 4 : 3, want, err);
        if (rc == FG_OK && t->dtype != FG_CKPT_U8)
            rc = fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s has dtype %s; MXFP4 %s are "
                            "U8", t->path, t->name, fg_ckpt_dtype_name(t->dtype),
                            mx ? "blocks" : "scales");
    } else {
        uint64_t want[3] = {dims[0], trans && !vec ? cols : rows, trans && !vec ? rows : cols};
        rc = check_shape(t, vec ? 2 : 3, want, err);
    }
    for (uint64_t p = 0, off = 0; rc == FG_OK && p < n_parts; p++) {
        size_t k = (size_t)(ss[p] - m->sorted);
        if (m->seen[k] && !scl)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of %s",
                              t->path, t->name, ss[p]->s.name);
        if (!m->blk[k] && !(m->blk[k] = new_blocks(ss[p]->s.blocks)))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        /* the part's row r is the block's row r0 + r * step; its element (r, c) at
         * e * rows * cols + that row * cols + c, or transposed c * rows + that row */
        uint64_t r0 = inter ? p : off, step = inter ? n_parts : 1;
        for (uint64_t e = 0; e < dims[0]; e++) {
            fgc_part *b = &m->blk[k][e];
            uint64_t base = e * rows * cols;
            if (scl && b->scales != FGC_NONE)
                return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s: a second spelling of "
                                  "the MXFP4 scales of %s", t->path, t->name, ss[p]->s.name);
            if (scl) {
                b->scales = i;
                continue;
            }
            uint32_t sc = b->scales;
            *b = trans ? (fgc_part){i, base + r0, step, rows, sc, 0}
               : step > 1 || mx ? (fgc_part){i, base + r0 * cols, step * cols, 1, sc, mx}
                                : (fgc_part){i, base + r0 * cols, 0, 0, sc, 0};
        }
        if (!scl)
            m->seen[k] = ss[p]->s.blocks;
        off += ss[p]->s.dims[0] / ss[p]->s.blocks;
    }
    return rc;
}

/* Tensor i holds the n_parts specs `parts` stacked along its rows: its shape must be theirs
 * with the rows added up (the parts agree on every other dimension). */
static int take_fused(const match *m, const fg_ckpt_tensor *t, uint32_t i,
                      char (*parts)[FG_TENSOR_NAME_MAX], uint32_t n_parts, fg_err *err)
{
    const sspec *ss[FG_FUSED_MAX];
    fg_tensor_spec whole = {.n_dims = 0};
    for (uint32_t p = 0; p < n_parts; p++) {
        if (!(ss[p] = find(m, parts[p])))
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor for this "
                              "config.json", t->path, t->name, m->a->noun);
        const fg_tensor_spec *s = &ss[p]->s;
        if (p && (s->n_dims != whole.n_dims || (s->n_dims > 1 && s->dims[1] != whole.dims[1])))
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: the parts of %s differ in shape",
                              t->path, t->name); /* a family table mistake */
        whole.n_dims = s->n_dims;
        whole.dims[0] += s->dims[0];
        whole.dims[1] = s->dims[1];
    }
    snprintf(whole.name, sizeof whole.name, "%s", t->name);
    int rc = check_one(t, &whole, err);
    for (uint64_t p = 0, row0 = 0; rc == FG_OK && p < n_parts; row0 += ss[p++]->s.dims[0])
        rc = take(m, ss[p], t, i, row0, err);
    return rc;
}

/* Is part `name` a stacked spec (its rows blocks: a mixture's experts)? Then its fused tensor
 * holds every expert, [experts, rows, cols] (take_batched), never the parts one after another:
 * a 2-D one is refused by its shape, not read in the wrong order. */
static int stacked_part(const match *m, const char *name)
{
    const sspec *ss = find(m, name);
    return ss && ss->s.blocks > 1;
}

/* Match each checkpoint tensor to its spec (or specs, when fused); derived buffers and unused
 * tensors counted in *skips. */
static int match_all(const match *m, const fg_ckpt *ck, fgc_skips *skips, fg_err *err)
{
    for (uint32_t i = 0; i < fg_ckpt_count(ck); i++) {
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
        char name[FG_TENSOR_NAME_MAX], parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
        if (t->is_scale) /* an FP8 tensor's block scales, read through it (fp8.c) */
            continue;
        if (!m->a->canonical_name(t->name, name, sizeof name))
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor", t->path,
                              t->name, m->a->noun);
        int unused = m->a->unused ? m->a->unused(m->hp, name) : 0;
        if (unused == 2 && t->n_elements) /* a part config.json makes empty */
            return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s holds %llu values; "
                              "config.json implies none", t->path, t->name,
                              (unsigned long long)t->n_elements);
        if (unused == 2)
            continue; /* (nothing to skip) */
        if (unused) { /* accepted unread */
            skips->unused++;
            continue;
        }
        const sspec *ss = find(m, name);
        uint64_t len = !ss && m->a->derived ? m->a->derived(m->hp, name) : 0;
        uint32_t layout = 0;
        uint32_t n_parts = !ss && !len && m->a->fused ? m->a->fused(m->hp, name, parts, &layout)
                                                      : 0;
        uint32_t block = 0;
        int blk = !ss && !len && !n_parts && m->a->stacked &&
                  m->a->stacked(m->hp, name, parts[0], &block);
        int rc;
        if (len) { /* a buffer fg derives from config.json: checked, then skipped */
            fg_tensor_spec d = {.n_dims = 1, .dims = {len}};
            snprintf(d.name, sizeof d.name, "%s", name);
            rc = check_one(t, &d, err);
            skips->derived += rc == FG_OK;
        } else if (n_parts && stacked_part(m, parts[0])) { /* every expert's blocks */
            rc = take_batched(m, t, i, parts, n_parts, layout, err);
        } else if (n_parts && layout) { /* (only experts are laid out otherwise) */
            rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor %s: a fused layout fg reads only "
                            "for stacked experts", t->path, t->name); /* a family table mistake */
        } else if (n_parts) {
            rc = take_fused(m, t, i, parts, n_parts, err);
        } else if (blk) {
            rc = take_block(m, t, i, parts[0], block, err);
        } else if (!ss) {
            rc = fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not %s tensor for this "
                            "config.json", t->path, t->name, m->a->noun);
        } else if ((rc = check_one(t, &ss->s, err)) == FG_OK) {
            rc = m->blk[ss - m->sorted]
                 ? fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of "
                              "its blocks", t->path, t->name)
                 : take(m, ss, t, i, 0, err);
        }
        if (rc)
            return rc;
    }
    return FG_OK;
}

int fg_convert_check_ckpt(const fg_hparams *hp, const fg_ckpt *ck, fgc_source *src,
                          fgc_skips *skips, fg_err *err)
{
    fg_tensor_spec *exp;
    uint32_t n;
    fgc_skips sk = {0, 0};
    int rc = fg_model_tensors(hp, &exp, &n, err);
    if (rc)
        return rc;
    sspec *sorted = malloc((size_t)n * sizeof *sorted + 1);
    uint32_t *seen = calloc(n + 1, sizeof *seen);
    fgc_part **blk = calloc(n + 1, sizeof *blk);
    if (!sorted || !seen || !blk) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < n; k++) {
        sorted[k].s = exp[k];
        sorted[k].orig = k;
        if (src)
            src[k] = (fgc_source){FGC_NONE, 0, NULL};
    }
    qsort(sorted, n, sizeof *sorted, cmp_spec);
    match m = {hp, fg_model_arch(hp), sorted, n, seen, blk, src, ck};
    rc = match_all(&m, ck, &sk, err);
    for (uint32_t k = 0; k < n && rc == FG_OK; k++) {
        uint32_t b = 0;
        while (blk[k] && b < sorted[k].s.blocks && blk[k][b].index != FGC_NONE)
            b++;
        if (blk[k] && b < sorted[k].s.blocks)
            rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: block %u of tensor %s (an expert's "
                            "weight, required by config.json) is missing", fg_ckpt_dir(ck), b,
                            sorted[k].s.name);
        else if (!seen[k] && !sorted[k].s.optional)
            rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %s (required by config.json) is "
                            "missing", fg_ckpt_dir(ck), sorted[k].s.name);
        for (b = 0; rc == FG_OK && blk[k] && b < sorted[k].s.blocks; b++)
            if ((blk[k][b].mxfp4 != 0) != (blk[k][b].scales != FGC_NONE))
                rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: the MXFP4 %s of tensor %s are "
                                "missing (%s)", fg_ckpt_dir(ck),
                                blk[k][b].mxfp4 ? "scales" : "blocks", sorted[k].s.name,
                                fg_ckpt_tensor_at(ck, blk[k][b].mxfp4 ? blk[k][b].index
                                                                      : blk[k][b].scales)->name);
        if (blk[k] && src && rc == FG_OK) { /* the parts go to the caller */
            src[sorted[k].orig] = (fgc_source){FGC_STACKED, 0, blk[k]};
            blk[k] = NULL;
        }
    }
    if (skips)
        *skips = sk;
    if (rc && src)
        fgc_sources_free(src, n);
out:
    for (uint32_t k = 0; blk && k < n; k++)
        free(blk[k]);
    free(blk);
    free(seen);
    free(sorted);
    free(exp);
    return rc;
}

void fgc_sources_free(fgc_source *src, uint32_t n)
{
    for (uint32_t k = 0; src && k < n; k++) {
        free(src[k].parts);
        src[k].parts = NULL;
    }
}
