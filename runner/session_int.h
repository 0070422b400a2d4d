/* session_int.h - private to the session (runner/session*.c): its state and the pieces its
 * files share.
 *
 *   session.c         open/close, the tokenizer calls, the requests prepared and answered
 *   session_block.c   one block of choices generated: sequences, stop strings, streaming
 *                     pieces, per-token log-probs (the engine's hooks)
 *   session_score.c   log-probs of given tokens (echo, fg_session_score, _score_rolling)
 */
#ifndef FG_SESSION_INT_H
#define FG_SESSION_INT_H

#include "runner_int.h"
#include "session.h"

struct fg_session {
    fg_session_opts o;
    fg_run_opts ro;          /* o.run, checked (fg_run_opts_check) */
    fgr_run r;               /* the store, model, tokenizer, engine (runner_int.h) */
    fg_session_info info;
    fg_session_stats st;
    char name[256];
    uint64_t streams;        /* requests without a seed answered so far: their streams */
    fgr_tick *tick;          /* fg-infer's progress bar over a job's tokens, or NULL */
};

/* One choice of a request, waiting for or in a block. */
typedef struct fgs_item {
    uint32_t req, choice;
    const fg_request *q;
    fg_response *resp;
    const int32_t *ids;      /* the request's prompt ids (resp->prompt_ids) */
    uint32_t n, mn;          /* prompt tokens, new tokens */
    uint64_t stream;
    uint32_t min_tokens;
} fgs_item;

/* The requests of one fg_session_generate call: which were cancelled by on_piece. */
typedef struct fgs_call {
    fg_session *s;
    fg_piece_fn on_piece;
    void *piece_ctx;
    uint8_t *cancelled;      /* [n requests] */
} fgs_call;

/* fg_session_generate with each request's sampler stream given (streams[i]: a job's input
 * line, so a resumed job draws what the whole job would have; choice c of a request without
 * a seed draws from streams[i] + c * 2^40); streams NULL: the session's own. */
int fgs_generate_streams(fg_session *s, const fg_request *reqs, uint32_t n,
                         const uint64_t *streams, fg_response *resp, fg_err *err);
/* The progress bar the blocks tick (NULL: none). */
void fgs_set_tick(fg_session *s, fgr_tick *t);
/* The session's run (its store, engine, prefix cache and report), for fg-infer's job mode. */
fgr_run *fgs_run(fg_session *s);

/* Generate items[0..n) (n <= block size) as one block, filling their choices. */
int fgs_block(fgs_call *c, fgs_item *items, uint32_t n, fg_err *err);

/* Log-probs of each next token of windows[0..m): fn(ctx, w, t, logits, vocab) for t in
 * [from[w], lens[w]) (from NULL: from 0) sees the logits position t gave (predicting
 * windows[w][t + 1]). Windows in groups of the block, in the order given: windows that begin
 * with the same tokens and sit in one group compute them once (fg_engine_score). */
typedef int (*fgs_pos_fn)(void *ctx, uint32_t w, uint32_t t, const float *logits,
                          uint32_t vocab);
int fgs_windows(fg_session *s, const int32_t *const *windows, const uint32_t *lens,
                const uint32_t *from, uint32_t m, fgs_pos_fn fn, void *ctx, fg_err *err);

/* The log-softmax of logits[n] in double: log-sum-exp; top[0..k) the k most likely (ids,
 * log-probs, most likely first, lower id first on ties). */
double fgs_lse(const float *logits, uint32_t n);
void fgs_top(const float *logits, uint32_t n, double lse, uint32_t k, fg_token_lp *top);

/* The sampling of request q: the fields it gave (q->set), the run's (run.sample) for the rest;
 * has_seed or a set seed keeps q's seed. */
fg_sample_params fgs_sample(const fg_session *s, const fg_request *q);
int fgs_has_seed(const fg_request *q);

/* Streaming text (session_block.c; -p's too): the text of ids[0..n) with special tokens
 * skipped and ill-formed UTF-8 as U+FFFD; *whole: its bytes before a character still
 * incomplete at the end (final: that one too becomes U+FFFD). Owned by the caller; NULL on
 * failure (err set when not NULL). */
char *fgs_text(fg_tok *tok, const int32_t *ids, uint32_t n, int final, size_t *whole,
               fg_err *err);
/* Where the earliest of the stop strings v[0..n) starts in text, or -1. */
long fgs_stop_at(const char *const *v, int n, const char *text);
/* The longest suffix of text[0..len) that is a proper prefix of one of v[0..n): what a stream
 * holds back. */
size_t fgs_stop_hold(const char *const *v, int n, const char *text, size_t len);

/* Whether the call was interrupted (opts.interrupt). */
int fgs_interrupted(const fg_session *s);

#endif
