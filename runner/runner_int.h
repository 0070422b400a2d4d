/* runner_int.h - private to the runner: one run's state and the pieces its files share.
 *
 * The runner is split by concern (each file opens with its own design notes):
 *   runner.c          fg_run: the store, the tokenizer, the engine opened for a run's shape,
 *                     a block generated, the output written
 *   runner_opts.c     fg_run_opts_check: the rules between options (what fg-infer refuses)
 *   runner_modes.c    the run modes: -p (streamed), synthetic, perplexity, the plan alone,
 *                     calibration
 *   runner_chat.c     --chat without -p: the interactive chat, through the session
 *   runner_score.c    fg-infer score: pairs' (or texts') log-likelihoods, resumable
 *   session*.c        the session API (session.h, session_int.h): what fg-serve, Python and
 *                     the chat run through
 *   runner_jobs.c     JSONL jobs: sized, packed into blocks, answered, resumable
 *   runner_policy.c   the policy search's glue (--policy auto) and a fixed policy's prediction
 *   runner_quant.c    quantize-at-load (--compress-weight on an F16 store)
 *   runner_summary.c  the summary after a run
 *   runner_prefix.c   the prefix cache's part of a run
 *   runner_follow.c   a follower rank's life in a pipeline (fg_runner_follow, runner_follow.h)
 * Names here are fgr_ (internal to the library, not exported by libfg).
 */
#ifndef FG_RUNNER_INT_H
#define FG_RUNNER_INT_H

#include <stdio.h>

#include "fg_progress.h"
#include "jobs.h"
#include "policy_search.h"
#include "runner.h"
#include "runner_prefix.h"

/* One fg_run: what it opened (closed by fg_run at the end, in reverse) and what it measured. */
typedef struct fgr_run {
    const fg_run_opts *o;
    fg_engine_opts eo;     /* o->eo, with the policy the search chose and the runner's notice */
    FILE *out, *log;
    fg_store *store;
    fg_model *model;       /* the store's, read once (fgr_open_store) */
    fg_tok *tok;
    fg_engine *e;
    fg_prefix *pfx;        /* --prefix-cache, or NULL */
    char tmp_store[4096];  /* a store quantized at load, removed once the engine is open */
    fg_run_report rep;
    uint32_t max_pos;      /* the model's positions (fgr_open_store) */
    char policy_line[400]; /* policy_auto: what the search chose */
    char dev_line[512];    /* ... and the device's calibration it priced with */
    char calib_note[2 * FG_ERR_MSG_MAX + 128]; /* the calibration was missing or stale */
    /* rep.predicted: what the prediction was priced with, for the bound once the engine's plan
     * is made (fgr_bound; job.dev points at dev or is NULL) */
    fg_calib calib;
    fg_calib_dev calib_dev;
    fg_policy_job job;
    char bound_line[1024]; /* fg_bound_describe of one block ("" when not predicted) */
    fg_policy_model pmodel; /* fgr_policy_model's: built from model once (pmodel_ok), dropped
                             * with it (fgr_model_close) */
    int pmodel_ok;
    int warm;               /* --warmup ran: base holds the engine's counters after it */
    fg_engine_stats base;
} fgr_run;

/* A progress bar over the tokens of several blocks: base counts the blocks before this one. */
typedef struct fgr_tick {
    fg_progress bar;
    uint64_t base;
} fgr_tick;

/* The stop strings of each sequence of the block being generated. */
typedef struct fgr_stops {
    fg_tok *tok;
    const char *const *const *v; /* [block] */
    const int *n;                /* [block] */
} fgr_stops;

/* ---- runner.c: tokens, the store, the engine, one block ---- */

/* How prompts are encoded (FG_TOK_* flags): as transformers' tokenizer(text) unless
 * --no-special-in-prompt. */
unsigned fgr_prompt_flags(const fgr_run *r);
/* Token ids of text; *ids owned by the caller. An empty result is FG_ERR_INVALID_ARG
 * "WHAT: the prompt is empty"; other errors are prefixed with what. */
int fgr_encode(fgr_run *r, const char *text, unsigned flags, int32_t **ids, uint32_t *n,
               const char *what, fg_err *err);
/* Token ids of a chat: messages (a JSON array of {role, content}) rendered through the model's
 * chat template with the assistant turn's header (add_generation_prompt) and kwargs (a JSON
 * object of template variables, or NULL), then encoded as transformers'
 * apply_chat_template(tokenize=True) does: special tokens matched, none added (the template
 * writes the BOS). *ids owned by the caller. A store without a template fails with
 * fg_model_chat's error; a render failure (the template's raise_exception) is
 * FG_ERR_INVALID_ARG "WHAT: MESSAGE", as an empty result is. */
int fgr_encode_chat(fgr_run *r, const char *messages, const char *kwargs, int32_t **ids,
                    uint32_t *n, const char *what, fg_err *err);
/* ids as text (special tokens skipped); owned by the caller, NULL on failure (err set, when
 * not NULL). */
char *fgr_decode(fg_tok *tok, const int32_t *ids, uint32_t n, fg_err *err);
/* Cut text at the first of the n stop strings v. */
void fgr_cut_stop(char *text, const char *const *v, int n);
/* The store at o->model (said as what it is when it is not one), its model and tokenizer. */
int fgr_open_store(fgr_run *r, fg_err *err);
/* The engine for prompts of P tokens, G new ones, seqs sequences (0: any): quantize-at-load,
 * the policy search or a fixed policy's prediction, the prefix cache. */
int fgr_open_engine(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err);
/* Generate seqs[0..n) (n <= block size) as one block; st may be NULL (no stop strings). */
int fgr_generate(fgr_run *r, fg_gen_seq *seqs, uint32_t n, const fgr_stops *st, fgr_tick *tc,
                 fg_err *err);
/* What r->out is, for a write error's message. */
const char *fgr_out_name(const fgr_run *r);
/* text to r->out, flushed. */
int fgr_write_out(fgr_run *r, const char *text, fg_err *err);

/* ---- runner_modes.c, runner_jobs.c: the run modes ---- */

int fgr_run_prompt(fgr_run *r, fg_err *err);
/* --chat without -p: the interactive chat (runner_chat.c) */
int fgr_run_chat(fgr_run *r, fg_err *err);
/* fg-infer score (runner_score.c) */
int fgr_run_score(fgr_run *r, fg_err *err);
/* One input line of fg-infer score parsed alone (the fuzz target's entry): 1 when blank, else 0
 * with why "" (scorable) or the error result's message. */
int fgr_score_line(const char *text, int rolling, char *why, size_t cap);
int fgr_run_synthetic(fgr_run *r, fg_err *err);
int fgr_run_ppl(fgr_run *r, fg_err *err);
int fgr_run_dry(fgr_run *r, fg_err *err);
int fgr_run_calibrate(fgr_run *r, fg_err *err);
int fgr_run_jobs(fgr_run *r, fg_err *err);
/* The context a prompt + generation must fit: --max-context, else the model's positions. */
uint32_t fgr_context_limit(const fgr_run *r);
/* First pass over a job file: its longest fitting prompt, largest generation, new tokens. */
int fgr_size_jobs(fgr_run *r, const fg_job_output *done, uint32_t *maxP, uint32_t *maxG,
                  uint64_t *total, fg_err *err);
/* The engine's prompt and generation lengths for a job sized so (0, 0 from a pipe). */
void fgr_jobs_shape(uint32_t maxP, uint32_t maxG, uint32_t limit, uint32_t *P, uint32_t *G);

/* ---- runner_policy.c ---- */

/* --policy auto: choose r->eo.policy for prompts of P tokens, G new ones, seqs sequences. */
int fgr_auto_policy(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err);
/* A fixed policy's predicted times, when this machine has a calibration (silent otherwise). */
void fgr_predict_fixed(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs);
/* With rep.predicted and the engine open: the bound of its plan (rep.bound_s, bound_tok_s,
 * r->bound_line); silent when the model cannot be read for it. */
void fgr_bound(fgr_run *r);
/* The policy search's view of r->model (fg_policy_model_build), built at the first call and
 * kept for the search, the prediction, the bound and the summary; NULL (err set) when it
 * cannot be built. */
const fg_policy_model *fgr_policy_model(fgr_run *r, fg_err *err);
/* r->model closed and set to NULL, the policy model built from it dropped. */
void fgr_model_close(fgr_run *r);

/* ---- runner_quant.c ---- */

/* --compress-weight on a store that is not 4-bit: r->store and r->model replaced by a
 * temporary 4-bit store's (r->tmp_store names it). hp: the model's, copied by the caller. */
int fgr_quantize_at_load(fgr_run *r, const fg_hparams *hp, fg_err *err);
/* Remove the directory tree at path (a temporary store). */
void fgr_remove_tree(const char *path);

/* ---- runner_summary.c ---- */

/* The summary lines after a run (nothing when quiet or no engine). */
void fgr_summary(fgr_run *r);

#endif
