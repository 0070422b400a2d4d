/* session.h - a long-lived run: one store, model, tokenizer, chat template and engine opened
 * once, then requests (jobs/request.h) answered in blocks until it is closed. What fg-serve
 * (serve/) and the Python package (python/) are built on, and what fg-infer's prompt, chat,
 * job and score modes run through: one engine behind every front door.
 *
 * Lifecycle: fg_session_open(opts) -> any number of fg_session_generate / _score / _tokenize /
 * _detokenize / _chat_render calls -> fg_session_close. The engine is planned once at open for
 * opts.max_ctx tokens a sequence and opts.max_seqs sequences a block (the policy search, a fixed
 * policy, the prefix cache, quantize-at-load: as fg-infer's flags), so every later call's
 * requests are packed into blocks of that engine; a request that cannot fit gets its error
 * response (status 413), never a failed call.
 *
 * Threads: a session is used by one thread at a time (a server runs one engine thread and
 * queues requests to it); two sessions in two threads are independent. A call may be stopped
 * from another thread or a signal handler through opts.interrupt: the engine finishes the step
 * it is in, the call returns FG_ERR_STATE "interrupted" and the session stays usable.
 */
#ifndef FG_SESSION_H
#define FG_SESSION_H

#include <signal.h>
#include <stdint.h>

#include "request.h"
#include "runner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_session fg_session;

typedef struct fg_session_opts {
    fg_run_opts run;        /* the store (run.model), engine options (run.eo: budgets, backend,
                               threads, policy), run.policy_auto and the search's fields, the
                               prefix cache, run.sample (the default sampling), run.max_new (the
                               default max_tokens), run.no_special_in_prompt, run.quiet,
                               run.log; run.mode, prompt, input, output are ignored */
    uint32_t max_ctx;       /* tokens a sequence may hold, prompt + generation (0: the model's
                               positions, or run.eo.max_ctx when set) */
    uint32_t max_seqs;      /* sequences a block (0: the policy's choice, at most 32) */
    const volatile sig_atomic_t *interrupt; /* non-zero stops the call in progress */
} fg_session_opts;

/* What a session serves (valid until close). */
typedef struct fg_session_info {
    const char *model_name;  /* the store's name (its directory's last component) */
    const char *store_path;
    uint32_t max_ctx;        /* as planned */
    uint32_t block_seqs;     /* sequences a block */
    uint32_t vocab_size;
    int has_chat_template;
    int32_t bos_id, eos_id;  /* -1 when none */
} fg_session_info;

/* Open the store at opts->run.model and plan its engine. *out owned by the caller
 * (fg_session_close). Errors as fg_run's: one line naming the store, flag or budget. */
int fg_session_open(const fg_session_opts *opts, fg_session **out, fg_err *err);
/* Close everything; NULL accepted. */
void fg_session_close(fg_session *s);
const fg_session_info *fg_session_info_get(const fg_session *s);

/* Streaming: called as each choice's text grows, in generation order. piece is the new text
 * (whole UTF-8 characters: bytes of a character not yet complete wait for the next token; at
 * a stop string the text before it), ids the tokens it came from, lp their log-probs when the
 * request asked (else NULL). finish is FG_FINISH_NONE until the choice's last call, which
 * carries its finish reason (piece may be empty). A non-zero return cancels that request (a
 * client gone): its other choices stop at the next step and its response gets status 499. */
typedef int (*fg_piece_fn)(void *ctx, uint32_t req, uint32_t choice, const char *piece,
                           size_t len, const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids,
                           int finish);

/* Answer reqs[0..n): resp[i] for reqs[i] (filled whole; clear each with fg_response_clear).
 * Choices of all requests are packed into blocks of the engine (a request's n choices are n
 * sequences); sampled results for a given seed do not depend on the packing. A request that is
 * malformed (fg_request_check), empty, too long for max_ctx or refused by the chat template
 * gets its error response and the others run. on_piece (may be NULL) streams. Returns FG_OK
 * when every request was answered (some perhaps with errors), else the run's failure (disk,
 * budget, interrupt) with err set and the responses of requests not answered carrying it
 * (status 500). */
int fg_session_generate(fg_session *s, const fg_request *reqs, uint32_t n, fg_piece_fn on_piece,
                        void *piece_ctx, fg_response *resp, fg_err *err);

/* Scoring (lm-evaluation-harness's loglikelihood): the log-prob of continuation given context,
 * summed over the continuation's tokens (natural log), and whether greedy decoding from the
 * context would produce exactly those tokens. The context is encoded with the model's BOS rule,
 * the continuation without one, as lm-eval's HF model does (continuation tokens are those of
 * the concatenated text past the context's, when the tokenizer merges across the boundary).
 * Requests sharing a context compute it once. Text or ids for either side. */
typedef struct fg_score_req {
    const char *context;        /* text, or NULL with context_ids */
    const int32_t *context_ids;
    uint32_t n_context_ids;
    const char *continuation;   /* text, or NULL with cont_ids */
    const int32_t *cont_ids;
    uint32_t n_cont_ids;
} fg_score_req;

typedef struct fg_score_res {
    double logprob;             /* summed */
    int is_greedy;
    uint32_t n_tokens;          /* continuation tokens scored */
    int status;                 /* 0, or 400 / 413 with error set */
    char error[FG_ERR_MSG_MAX];
} fg_score_res;

int fg_session_score(fg_session *s, const fg_score_req *reqs, uint32_t n, fg_score_res *out,
                     fg_err *err);

/* Rolling log-likelihood of a whole text (lm-eval's loglikelihood_rolling, perplexity tasks):
 * every token scored once with as much left context as max_ctx allows (disjoint windows, each
 * predicting its tokens from the windows' own prefix, as lm-eval's rolling windows with
 * context length max_ctx); the first token is predicted from BOS when the model has one. */
int fg_session_score_rolling(fg_session *s, const char *text, double *logprob,
                             uint64_t *n_tokens, fg_err *err);

/* The tokenizer: ids of text (add_special: the model's BOS/EOS rule as tokenizer(text); special
 * tokens written in the text are matched either way, as transformers' tokenizer matches them,
 * unless run.no_special_in_prompt); text of
 * ids (skip_special: as decode(skip_special_tokens=True)). Results owned by the caller (free). */
int fg_session_tokenize(fg_session *s, const char *text, int add_special, int32_t **ids,
                        uint32_t *n, fg_err *err);
int fg_session_detokenize(fg_session *s, const int32_t *ids, uint32_t n, int skip_special,
                          char **text, fg_err *err);
/* A chat's prompt text as apply_chat_template(messages, add_generation_prompt=True,
 * tokenize=False) gives it (kwargs may be NULL). *text owned by the caller. */
int fg_session_chat_render(fg_session *s, const char *messages, const char *kwargs, char **text,
                           fg_err *err);

/* Counters since open (for /metrics and summaries). */
typedef struct fg_session_stats {
    uint64_t requests, errors, prompt_tokens, completion_tokens, blocks;
    double busy_s;
    fg_engine_stats engine;
} fg_session_stats;
void fg_session_stats_get(const fg_session *s, fg_session_stats *out);

#ifdef __cplusplus
}
#endif
#endif
