/* model_int.h - helpers the family files share: strict config.json reading and tensor specs. */
#ifndef FG_MODEL_INT_H
#define FG_MODEL_INT_H

#include <jansson.h>

#include "model.h"

#define FGM_CONFIG_MAX_BYTES (1u << 20)

/* Each returns FG_OK, or an error naming label and key. "opt" variants return 1 when the key is
 * absent or null (the caller keeps its default). */
int fgm_key_err(fg_err *err, const char *label, const char *key, const char *what);
int fgm_uint(json_t *root, const char *label, const char *key, int required, uint32_t max,
             uint32_t *out, fg_err *err);
/* ... an integer in [0, max] (absent or null: *out kept, returns 1) */
int fgm_count(json_t *root, const char *label, const char *key, uint32_t max, uint32_t *out,
              fg_err *err);
/* A bound (not a shape): an integer or whole real >= 1, clamped to max (absent or null: 1) */
int fgm_limit(json_t *root, const char *label, const char *key, int required, uint32_t max,
              uint32_t *out, fg_err *err);
/* true or false (absent or null: dflt) */
int fgm_bool(json_t *root, const char *label, const char *key, int dflt, int *out, fg_err *err);
int fgm_float(json_t *root, const char *label, const char *key, double lo, double hi, int required,
              float *out, fg_err *err);
/* A token id (integer >= 0), null (-1) or a list of them (eos_token_id): ids[0..*n). */
int fgm_tokens(json_t *root, const char *label, const char *key, int32_t dflt, int32_t *ids,
               uint32_t cap, uint32_t *n, fg_err *err);
/* key must be a string equal to one of want[0..n_want); its index into *which. */
int fgm_enum(json_t *root, const char *label, const char *key, const char *const *want,
             int n_want, int required, int *which, fg_err *err);
int fgm_dtype(json_t *root, const char *label, fg_hparams *hp, fg_err *err);
/* Parse json as an object and call fn on it. */
int fgm_parse(const char *json, size_t len, const char *label,
              int (*fn)(json_t *root, const char *label, fg_hparams *hp, fg_err *err),
              fg_hparams *hp, fg_err *err);

/* OPT's entry (opt.c); the others are the rows of families.c (families.h). */
extern const fg_arch fg_arch_opt;

/* Append a spec to out[*n]. d1 == 0: a vector. */
void fgm_spec(fg_tensor_spec *out, uint32_t *n, const char *name, fg_role role, fg_access access,
              uint64_t d0, uint64_t d1);

#endif
