/* sample.h - next-token selection: greedy, temperature, top-k, top-p, with a seeded generator
 * per sequence so a job's output does not depend on how sequences were batched.
 *
 * Order of operations follows Hugging Face's logits warpers: temperature, then top-k, then
 * top-p (keep the smallest set of most likely tokens whose probability reaches top_p, at least
 * one), then sample from the renormalized distribution. temperature == 0 means greedy (argmax,
 * the first index on ties, like torch.argmax).
 */
#ifndef FG_SAMPLE_H
#define FG_SAMPLE_H

#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_sample_params {
    float temperature; /* 0 = greedy; else > 0 */
    uint32_t top_k;    /* 0 = off */
    float top_p;       /* 1 = off; else in (0, 1] */
    uint64_t seed;
} fg_sample_params;

/* xoshiro256** state. */
typedef struct fg_rng {
    uint64_t s[4];
} fg_rng;

/* Seed a generator for one sequence: the same (seed, stream) always gives the same draws. */
void fg_rng_seed(fg_rng *r, uint64_t seed, uint64_t stream);
/* Uniform in [0, 1). */
double fg_rng_uniform(fg_rng *r);

/* Validate parameters; the message names the option (--temperature, --top-k, --top-p). */
int fg_sample_check(const fg_sample_params *p, fg_err *err);

/* Scratch for fg_sample over a vocabulary of n tokens; owned by the caller. */
typedef struct fg_sample_scratch fg_sample_scratch;
int fg_sample_scratch_create(uint32_t n, fg_sample_scratch **out, fg_err *err);
void fg_sample_scratch_free(fg_sample_scratch *s);

/* Choose the next token from logits[n] (not modified). */
int32_t fg_sample(const float *logits, uint32_t n, const fg_sample_params *p, fg_rng *rng,
                  fg_sample_scratch *s);

/* log-softmax value of token id under logits[n] (for perplexity), computed in double. */
double fg_log_prob(const float *logits, uint32_t n, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
