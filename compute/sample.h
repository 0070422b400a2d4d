/* sample.h - next-token selection: greedy, temperature, top-k, top-p, min-p and the
 * repetition, presence and frequency penalties, with a seeded generator per sequence so a
 * job's output does not depend on how sequences were batched.
 *
 * Order of operations follows Hugging Face's logits processors and warpers (and vLLM's, which
 * agree): the repetition penalty over the prompt and the output (transformers'
 * RepetitionPenaltyLogitsProcessor: a logit of a token seen is divided by the penalty when
 * positive, multiplied when negative, once per token whatever its count), then OpenAI's
 * presence and frequency penalties over the output (logit -= frequency x count + presence x
 * [count > 0], as vLLM applies them after the repetition penalty); then the warpers:
 * temperature, top-k, top-p (keep the smallest set of most likely tokens whose probability
 * reaches top_p, at least one), min-p (drop the tokens whose probability is below min_p x the
 * most likely's, after top-p: MinPLogitsWarper's place), then sample from the renormalized
 * distribution. temperature == 0 means greedy (the argmax of the penalized logits, the first
 * index on ties, like torch.argmax).
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
    /* (zero is off for each field below, so older initializers keep their meaning) */
    float min_p;              /* 0 = off; else in (0, 1] */
    float presence_penalty;   /* 0 = off; in [-2, 2] (OpenAI's range) */
    float frequency_penalty;  /* 0 = off; in [-2, 2] */
    float repetition_penalty; /* 0 or 1 = off; else > 0 (transformers': > 1 discourages) */
} fg_sample_params;

/* What a sequence has seen, for the penalties: its prompt and the tokens generated so far. */
typedef struct fg_sample_hist {
    const int32_t *prompt;
    uint32_t n_prompt;
    const int32_t *out;
    uint32_t n_out;
} fg_sample_hist;

/* Whether p changes the logits with the sequence's history (a penalty is on). */
int fg_sample_uses_hist(const fg_sample_params *p);

/* xoshiro256** state. */
typedef struct fg_rng {
    uint64_t s[4];
} fg_rng;

/* Seed a generator for one sequence: the same (seed, stream) always gives the same draws. */
void fg_rng_seed(fg_rng *r, uint64_t seed, uint64_t stream);
/* Uniform in [0, 1). */
double fg_rng_uniform(fg_rng *r);

/* Validate parameters; the message names the option (--temperature, --top-p, --min-p,
 * --presence-penalty, --frequency-penalty, --repetition-penalty). */
int fg_sample_check(const fg_sample_params *p, fg_err *err);

/* Scratch for fg_sample over a vocabulary of n tokens; owned by the caller. */
typedef struct fg_sample_scratch fg_sample_scratch;
int fg_sample_scratch_create(uint32_t n, fg_sample_scratch **out, fg_err *err);
void fg_sample_scratch_free(fg_sample_scratch *s);

/* Choose the next token from logits[n] (not modified). */
int32_t fg_sample(const float *logits, uint32_t n, const fg_sample_params *p, fg_rng *rng,
                  fg_sample_scratch *s);
/* The same with the sequence's history (h may be NULL: no penalty applies). */
int32_t fg_sample_hist_pick(const float *logits, uint32_t n, const fg_sample_params *p,
                            const fg_sample_hist *h, fg_rng *rng, fg_sample_scratch *s);
/* The distribution fg_sample_hist_pick draws from, as probs[n] (zeros for the tokens the
 * warpers removed; sums to 1; greedy: 1 at the argmax): what the tests compare with
 * transformers' processors. */
void fg_sample_probs(const float *logits, uint32_t n, const fg_sample_params *p,
                     const fg_sample_hist *h, fg_sample_scratch *s, double *probs);

/* log-softmax value of token id under logits[n] (for perplexity), computed in double. */
double fg_log_prob(const float *logits, uint32_t n, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
