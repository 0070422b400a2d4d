/* request.h - one generation request and its response, as plain data: what every front door
 * (fg's own job lines, OpenAI Batch lines, fg-serve's HTTP bodies, the Python package) turns its
 * input into, and what the runner's session (runner/session.h) answers with.
 *
 * A request is one prompt (text, token ids, or a chat's messages) with its own sampling
 * settings, n choices, stop strings and log-prob wishes; its response holds the prompt's ids
 * (and their log-probs with echo), one choice per sample, the usage and, when the request could
 * not run, an error instead. Nothing here knows the engine or a line format: jobs/ reads lines
 * into requests and writes responses as lines (openai.c in OpenAI's schema), the session runs
 * them.
 *
 * Ownership: a request's strings and arrays belong to whoever filled it (the job reader frees
 * its own with fg_job_clear); a response's belong to the response (fg_response_clear).
 */
#ifndef FG_REQUEST_H
#define FG_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_REQ_MAX_STOPS 8
#define FG_REQ_MAX_N 128          /* choices a request may ask for */
#define FG_REQ_MAX_TOP_LOGPROBS 20 /* alternatives a token may list (OpenAI's chat limit) */

/* fg_request.set: which sampling fields a request gave (contract change, jobs). */
enum {
    FG_REQ_SET_TEMPERATURE = 1u << 0,
    FG_REQ_SET_TOP_P = 1u << 1,
    FG_REQ_SET_TOP_K = 1u << 2,
    FG_REQ_SET_MIN_P = 1u << 3,
    FG_REQ_SET_SEED = 1u << 4,
    FG_REQ_SET_PRESENCE = 1u << 5,
    FG_REQ_SET_FREQUENCY = 1u << 6,
    FG_REQ_SET_REPETITION = 1u << 7,
};

typedef struct fg_request {
    /* the prompt: exactly one of text, ids or messages */
    const char *prompt;             /* text, encoded as transformers' tokenizer(text) */
    const int32_t *prompt_ids;      /* token ids as given (no BOS added) */
    uint32_t n_prompt_ids;
    const char *messages;           /* a JSON array of chat messages, rendered through the
                                       model's chat template with the generation prompt */
    const char *chat_kwargs;        /* a JSON object of template variables, or NULL */
    /* generation */
    uint32_t max_tokens;            /* new tokens per choice; 0: the run's default */
    uint32_t min_tokens;            /* EOS and stop strings do not end a choice before this */
    int ignore_eos;                 /* EOS is a token like any other */
    fg_sample_params sample;        /* temperature, top_k, top_p, seed (as given: see set) */
    int has_seed;                   /* sample.seed was given (else the run's seed) */
    /* Contract change (jobs): the sampling fields fg_sample_params does not carry yet
     * (compute/sample.h is the runner's); the runner moves them into sample when it adds them. */
    float min_p;                    /* 0 = off; else in (0, 1] */
    float presence_penalty;         /* -2..2 (OpenAI), 0 = off */
    float frequency_penalty;        /* -2..2 (OpenAI), 0 = off */
    float repetition_penalty;       /* > 0 (vLLM, transformers), 1 = off */
    unsigned set;                   /* FG_REQ_SET_* bits: the sampling fields the request gave;
                                       the others take the run's defaults (fg-infer's flags,
                                       fg-serve's options), whatever sample holds for them */
    uint32_t n;                     /* choices (independent samples); 0 counts as 1 */
    const char *stops[FG_REQ_MAX_STOPS]; /* stop strings: the text ends before the first */
    int n_stops;
    /* log-probabilities (natural log, of the model's distribution before sampling's warpers) */
    int logprobs;                   /* -1: none; k >= 0: each generated token's log-prob and
                                       its k most likely alternatives */
    int echo;                       /* the prompt's tokens come first in the log-probs (the
                                       response's prompt_logprob; the first is null). Contract
                                       change (runner): the choice's text and the streamed
                                       pieces are the generated text alone; the writers
                                       (jobs/openai_write.c) put the prompt's text first, as
                                       the endpoint's echo does */
    int stream;                     /* the front door wants pieces as they are generated */
} fg_request;

/* One position's log-probs: the chosen token's and the top alternatives (most likely first). */
typedef struct fg_token_lp {
    int32_t id;
    float logprob;
} fg_token_lp;

typedef struct fg_choice {
    char *text;             /* decoded (special tokens skipped), cut at a stop string; invalid
                               UTF-8 at a cut is U+FFFD */
    int32_t *tokens;        /* [n_tokens] generated ids (the stop string's tokens included) */
    uint32_t n_tokens;
    int finish;             /* FG_FINISH_LENGTH, _EOS or _STOP (engine.h) */
    /* with logprobs >= 0, per generated token: */
    float *logprob;         /* [n_tokens] the chosen token's */
    fg_token_lp *top;       /* [n_tokens * n_top] alternatives, most likely first */
    uint32_t n_top;
} fg_choice;

typedef struct fg_response {
    int32_t *prompt_ids;    /* [n_prompt] as the model saw them (BOS / template included) */
    uint32_t n_prompt;
    /* with echo and logprobs >= 0: per prompt token (prompt_logprob[0] is NaN: no context) */
    float *prompt_logprob;  /* [n_prompt] */
    fg_token_lp *prompt_top; /* [n_prompt * n_top], row 0 empty (id -1) */
    fg_choice *choices;     /* [n_choices] in choice order */
    uint32_t n_choices;
    uint64_t completion_tokens; /* summed over the choices */
    double seconds;         /* wall time of the block(s) that produced it */
    /* a request that could not run: status > 0, choices empty */
    int status;             /* 0: ok; else an HTTP-like status (400 bad request, 413 too long,
                               500 engine failure) */
    const char *error_type; /* static: "invalid_request_error", "context_length_exceeded", ... */
    char error[FG_ERR_MSG_MAX]; /* one line */
} fg_response;

/* Free what a response owns and zero it; NULL accepted. */
void fg_response_clear(fg_response *r);

/* The rules between a request's fields, as every front door refuses them: one prompt kind, n
 * in 1..FG_REQ_MAX_N, logprobs in -1..FG_REQ_MAX_TOP_LOGPROBS, echo only with a text or ids
 * prompt, min_tokens <= max_tokens when both are set, fg_sample_check's rules. FG_OK, or
 * FG_ERR_INVALID_ARG with one line naming the field by OpenAI's name ("max_tokens",
 * "top_logprobs", "n", ...), which fg's own line format shares where it has the field. */
int fg_request_check(const fg_request *q, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
