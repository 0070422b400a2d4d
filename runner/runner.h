/* runner.h - one run of fg-infer as a library call: the store opened once, prompts tokenized,
 * the engine planned for them, blocks generated with sampling and stop strings, JSONL results
 * written (resumable, streamed: any number of prompts) as each block finishes, progress on a
 * terminal, a summary; or perplexity over a text; or the plan alone (--dry-run).
 *
 * The tool (tools/fg_infer.c) only parses flags into fg_run_opts and calls fg_run; every failure
 * comes back as one line naming the file, flag, prompt or tensor at fault.
 */
#ifndef FG_RUNNER_H
#define FG_RUNNER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_run_mode {
    FG_RUN_PROMPT = 0, /* continue one prompt, print it */
    FG_RUN_JOBS,       /* a JSONL job: input -> results */
    FG_RUN_SYNTHETIC,  /* one block of random prompts (FlexGen's benchmark runs) */
    FG_RUN_PPL,        /* perplexity of a text */
    FG_RUN_DRY,        /* print the plan of the run the fields describe and stop (or any mode
                          with eo.plan_only) */
    FG_RUN_CALIBRATE,  /* measure this machine for the policy search, write the file */
    FG_RUN_SCORE,      /* log-likelihoods of (context, continuation) pairs, or of texts
                          (rolling): input -> output, resumable (fg-infer score) */
} fg_run_mode;

#define FG_RUN_MAX_STOPS 8

typedef struct fg_run_opts {
    fg_run_mode mode;
    const char *model;              /* the store */
    fg_engine_opts eo;              /* policy, budget, threads, ...; notice is the runner's */
    fg_sample_params sample;
    uint32_t max_new;               /* new tokens per prompt (a job line may say otherwise) */
    const char *stops[FG_RUN_MAX_STOPS]; /* stop strings for -p and synthetic runs */
    int n_stops;
    const char *prompt;             /* PROMPT */
    int chat;                       /* PROMPT: the prompt is one user message, rendered through
                                       the model's chat template (--chat) */
    const char *input, *output;     /* JOBS ("-" = stdin / stdout) */
    int resume;
    int rolling;                    /* SCORE: lines are texts (loglikelihood_rolling) */
    uint32_t prompt_len;            /* SYNTHETIC (gen length: max_new) */
    uint32_t num_prompts;           /* SYNTHETIC: prompts in the job (0: one block); the
                                       policy search chooses a block of at most that many */
    int warmup;                     /* SYNTHETIC: one block of other prompts runs untimed first
                                       (llama-bench's warm-up run): the summary times an engine
                                       whose homed weights are loaded and its memory touched */
    const char *text;               /* PPL */
    uint32_t window;                /* PPL: tokens per window (0: the model's context) */
    uint64_t max_tokens;            /* PPL: score at most this many tokens (0: all) */
    /* the policy search (policy/policy_search.h) */
    int policy_auto;                /* 1: choose block, placement and cache compression (eo.policy
                                       keeps the schedule, overlap, sep_layer, sparsity); 0: the
                                       fixed eo.policy; -1: auto unless placement_fixed (and
                                       never in a pipeline): fg_run_opts_check settles it */
    int placement_fixed;            /* the caller fixed the placement (fractions, gbs, ngb:
                                       fg-infer's --percent, --gpu-batch-size,
                                       --num-gpu-batches), which policy_auto 1 would overrule */
    int cache_choice;               /* auto: -1 search the 4-bit cache (--allow-lossy), 0 never
                                       (the default: auto turns on nothing lossy), 1 always */
    int attn_search;                /* auto on a device: search where attention runs too
                                       (eo.policy.cpu_attention otherwise) */
    uint32_t max_block;             /* auto: at most this many sequences a block (0: 256) */
    const char *calibration;        /* calibration file (NULL: $XDG_CACHE_HOME/fg/...; missing
                                       or stale there: measured quickly and written) */
    int calibrate_quick;            /* CALIBRATE: the quick measurement */
    const char *device_profile;     /* a device backend: the device's calibration from this file
                                       (policy_search.h fg_calib_dev_load) instead of measuring
                                       it; CALIBRATE: measure the device and write it there */
    const char *prefix_cache;       /* --prefix-cache DIR: prompt prefixes' KV rows kept there
                                       (prefix.h); NULL: none */
    uint64_t prefix_budget;         /* --prefix-cache-budget: bytes of cache pages (0: no bound) */
    uint32_t prefix_page_tokens;    /* --prefix-page-tokens: tokens a cache page (0: 16) */
    int no_special_in_prompt;       /* prompts: special tokens' text split as text (default:
                                       matched, as transformers' tokenizer(text) does) */
    int prompt_ids;                 /* JOBS: results carry "prompt_ids" */
    int ignore_eos;                 /* generate max_new tokens whatever the model emits
                                       (SYNTHETIC always does, as FlexGen's benchmark) */
    int allow_lossy;                /* policy_auto may choose a lossy compression (4-bit KV
                                       cache, 4-bit weights, sparse attention) */
    const volatile sig_atomic_t *interrupt; /* JOBS: non-zero (set by a SIGINT handler) stops the job
                                       between blocks: rep.interrupted, rep.saved */
    int quiet;                      /* no progress, notices or summary */
    FILE *out;                      /* generated text, perplexity, plan (NULL: stdout) */
    FILE *log;                      /* progress, notices, summary (NULL: stderr) */
} fg_run_opts;

typedef struct fg_run_report {
    uint64_t prompts, tokens;       /* generated */
    double prefill_s, decode_s, total_s;
    double perplexity;              /* PPL */
    uint64_t scored;                /* PPL: tokens scored */
    int predicted;                  /* policy_auto: the cost model's figures below are set */
    double pred_prefill_s, pred_decode_s, pred_tok_s;
    /* --prefix-cache: the job's prompt tokens whose KV rows were loaded / computed; the shared
     * pass (runner_prefix.c): prefixes and their tokens computed first, and its time (also
     * counted in prefill_s) */
    uint64_t prompt_cached, prompt_computed, shared_prefixes, shared_tokens;
    double shared_s;
    uint64_t pred_read, pred_write;  /* predicted disk traffic of one block, bytes */
    uint64_t pred_up, pred_down;     /* ... and link traffic (a device backend), bytes */
    double bound_s, bound_tok_s;     /* predicted: the block's bound (policy_search.h
                                        fg_policy_bound: no schedule takes less), its tok/s */
    int interrupted;                 /* JOBS: stopped by opts.interrupt (fg_run: FG_ERR_STATE) */
    uint64_t saved;                  /* JOBS: result lines in the output when the run ended */
} fg_run_report;

/* The rules between o's options, as fg-infer refuses its flags: FG_OK, or FG_ERR_INVALID_ARG
 * with one line naming the flag at fault (e.g. "--sim-link belongs to --backend sim"). Settles
 * what depends on others (policy_auto -1). eo.plan_only (--dry-run) plans o->mode's run
 * instead of running it; FG_RUN_DRY plans the run its fields describe. With eo.link of more
 * than one rank (a pipeline), also what a pipeline cannot run. fg_run calls it on its own copy;
 * a caller may call it first to refuse before anything else. */
int fg_run_opts_check(fg_run_opts *o, fg_err *err);

/* Run o. rep (may be NULL) receives the figures. Errors: one line in err; FG_ERR_INVALID_ARG
 * for bad options (fg_run_opts_check), others as the lower floors report them. */
int fg_run(const fg_run_opts *o, fg_run_report *rep, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
