/* runner_opts.c - fg_run_opts_check: the rules between a run's options (runner.h).
 *
 * These are the runner's rules, not fg-infer's: a library caller that sets the options
 * directly gets the same refusals, in the same words, as a user typing the flags (messages
 * name the flag: the options mirror fg-infer's flags one to one). fg-infer checks what its
 * own grammar decides (one kind of run, -m given, ppl's --text) and calls this for the rest;
 * fg_run calls it again on its copy, so nothing reaches the engine unchecked.
 *
 * Rules that only depend on one value (ranges, words) are read by the tool's option table;
 * these depend on two or more: a flag that would do nothing in this run is refused, not
 * ignored ("--sim-link belongs to --backend sim"); --policy auto does not overrule a placement
 * given by hand; a pipeline (eo.link of more than one rank) runs neither calibration, ppl,
 * the row schedule, the policy search nor the prefix cache. policy_auto -1 (not said) becomes
 * auto unless the placement is fixed or the run is a pipeline.
 */
#include <string.h>

#include "runner.h"
#include "stage.h"

static int bad(fg_err *err, const char *msg)
{
    return fg_err_set(err, FG_ERR_INVALID_ARG, "%s", msg);
}

/* What only a device, or one backend, makes mean anything. */
static int check_device(const fg_run_opts *o, fg_err *err)
{
    if (o->policy_auto == 1 && o->placement_fixed)
        return bad(err, "--policy auto chooses the placement: drop --percent, --gpu-batch-size "
                   "and --num-gpu-batches, or use --policy fixed");
    if (o->eo.gpu_budget && o->eo.backend == FG_BACKEND_CPU)
        return bad(err, "--gpu-budget needs a device: --backend cuda or sim");
    if (o->eo.sim_link_gbps > 0 && o->eo.backend != FG_BACKEND_SIM)
        return bad(err, "--sim-link belongs to --backend sim");
    if (o->chat && (o->input || o->prompt_len || o->mode == FG_RUN_PPL))
        return bad(err, "--chat belongs to -p TEXT or the interactive chat (a job's lines take "
                   "\"messages\")");
    if (o->num_prompts && !o->prompt_len)
        return bad(err, "--num-prompts belongs to --prompt-len/--gen-len runs (a job's prompts "
                   "are its lines)");
    if (o->warmup && !o->prompt_len)
        return bad(err, "--warmup belongs to --prompt-len/--gen-len runs (a benchmark's)");
    return FG_OK;
}

/* What belongs to another kind of run. */
static int check_mode(const fg_run_opts *o, fg_err *err)
{
    int dry = o->mode == FG_RUN_DRY || o->eo.plan_only;
    if (o->calibrate_quick)
        return bad(err, "--quick belongs to fg-infer calibrate");
    if (o->device_profile && o->eo.backend == FG_BACKEND_CPU)
        return bad(err, "--device-profile belongs to a device backend (--backend cuda or sim)");
    if (o->mode != FG_RUN_PPL && o->mode != FG_RUN_DRY && (o->text || o->window || o->max_tokens))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s belongs to fg-infer ppl",
                          o->text ? "--text" : o->window ? "--window" : "--max-tokens");
    if (o->rolling && o->mode != FG_RUN_SCORE)
        return bad(err, "--rolling belongs to fg-infer score");
    if (o->resume && !o->input)
        return bad(err, "--resume continues an --input/--output job");
    if (o->input && !o->output && !dry)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--input %s needs --output FILE (where the "
                          "results go; - for standard output)", o->input);
    if (o->output && !o->input)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--output %s needs --input FILE (the JSONL "
                          "prompts; - for standard input)", o->output);
    int whole = o->mode == FG_RUN_PROMPT ? o->prompt || o->chat
              : o->mode == FG_RUN_JOBS || o->mode == FG_RUN_SCORE ? !!o->input
              : o->mode == FG_RUN_SYNTHETIC ? !!o->prompt_len : o->mode == FG_RUN_PPL ? !!o->text
              : 1;
    if (!whole)
        return bad(err, "choose one of -p PROMPT, --input/--output, --prompt-len/--gen-len, or "
                   "ppl --text");
    return fg_sample_check(&o->sample, err);
}

/* A pipeline of n ranks: what runs in one process only. */
static int check_pipeline(const fg_run_opts *o, int n, fg_err *err)
{
    if (o->mode == FG_RUN_CALIBRATE || o->mode == FG_RUN_PPL || o->mode == FG_RUN_SCORE)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s runs in one process, not under mpirun "
                          "with %d ranks", o->mode == FG_RUN_CALIBRATE ? "calibrate"
                          : o->mode == FG_RUN_PPL ? "ppl" : "score", n);
    if (o->eo.policy.schedule == FG_SCHEDULE_ROW)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--schedule row: a pipeline of %d ranks runs "
                          "its own micro-batch schedule", n);
    if (o->policy_auto == 1)
        return bad(err, "--policy auto plans one process: under mpirun each rank places its own "
                   "layers in its own --ram-budget (drop --policy auto)");
    if (o->prefix_cache)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--prefix-cache runs in one process: a cache "
                          "page holds every layer's rows and a pipeline stage has only its own "
                          "(not under mpirun with %d ranks)", n);
    return FG_OK;
}

int fg_run_opts_check(fg_run_opts *o, fg_err *err)
{
    int ranks = o->eo.link ? o->eo.link->size : 1;
    int rc = check_device(o, err);
    if (rc == FG_OK && o->mode != FG_RUN_CALIBRATE)
        rc = check_mode(o, err);
    if (rc == FG_OK && ranks > 1)
        rc = check_pipeline(o, ranks, err);
    if (rc == FG_OK && o->policy_auto < 0) /* a pipeline places each stage by the default rule */
        o->policy_auto = !o->placement_fixed && ranks < 2;
    return rc;
}
