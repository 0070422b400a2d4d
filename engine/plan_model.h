/* plan_model.h - the model as the memory plan sees it, built from a store: every weight tensor
 * the engine registers with the pager (found unit by unit through model/'s table), the tensors
 * of each unit, and the per-unit figures fg_plan_make takes (plan.h). One builder for the
 * engine (engine/engine.c allocates and registers by it) and the policy search (policy/
 * evaluates its candidates with it), so the two never disagree on a byte.
 *
 * How tensors are found: unit by unit in model/'s order; a name already added is reused (a tied
 * head streams the embedding it does not own); a missing name is replaced by its fallback when
 * that one was added; every shape is checked against config.json's.
 */
#ifndef FG_PLAN_MODEL_H
#define FG_PLAN_MODEL_H

#include "fgt.h"
#include "plan.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One weight tensor as stored. */
typedef struct fg_plan_tensor {
    fg_tensor_spec spec;           /* name, role, access, shape (the store's, checked) */
    fg_codec codec;
    uint32_t file_id;              /* store weight file */
    uint32_t group;                /* the unit that owns it: the pager's placement group */
    uint32_t n_chunks;
    fg_fgt_chunk_info *chunks;     /* [n_chunks], owned (rows, lengths, offsets, checksums) */
    uint64_t stored;               /* bytes of its chunks, each padded to 4 KiB */
    uint64_t max_floats;           /* values of its largest chunk decoded */
    uint32_t rank;                 /* its chunks' placement rank (pager.h FG_PLACE_RANKS): 0 read
                                      every step, 1 a mixture's routed experts, 2 rows gathered
                                      (an embedding table no head streams) */
} fg_plan_tensor;

/* The tensors one unit computes with. */
typedef struct fg_plan_unit_tensors {
    fg_unit_kind kind;
    uint32_t layer;
    int t[FG_UNIT_MAX_TENSORS];    /* indices into fg_plan_weights.t */
    uint32_t n_t;
} fg_plan_unit_tensors;

typedef struct fg_plan_weights {
    fg_hparams hp;
    fg_plan_tensor *t;             /* [n_t], owned, in pager registration order */
    uint32_t n_t, cap_t;
    fg_plan_unit_tensors *ut;      /* [pm.n_units], owned */
    fg_plan_unit *units;           /* [pm.n_units], owned: each unit's figures */
    uint64_t *chunk;               /* owned: padded weight chunks, unit by unit in pager id order */
    uint8_t *chunk_rank;           /* owned: [chunks] each one's placement rank */
    uint32_t *unit_first;          /* [pm.n_units + 1], owned */
    fg_plan_model pm;              /* pm.hp = &hp, pm.units = units, pm.chunk = chunk...: do not
                                      copy the struct */
} fg_plan_weights;

/* Build from a store (borrowed) and its hyperparameters (copied). On failure *out holds
 * nothing to free. Errors: FG_ERR_NOT_FOUND naming a missing tensor, FG_ERR_SIZE_MISMATCH
 * naming one whose shape is not config.json's, the store's own. */
int fg_plan_weights_build(fg_store *store, const fg_hparams *hp, fg_plan_weights *out,
                          fg_err *err);
/* Free what is still owned (a caller may take arrays and set their pointers to NULL first). */
void fg_plan_weights_free(fg_plan_weights *w);

#ifdef __cplusplus
}
#endif
#endif
