/* runner_prefix.h - private to the runner: the prefix cache's part of a run (runner_prefix.c). */
#ifndef FG_RUNNER_PREFIX_H
#define FG_RUNNER_PREFIX_H

#include <stdio.h>

#include "prefix.h"
#include "runner.h"

/* Open o->prefix_cache for engine e's identity and attach it to e. *out owned by the caller
 * (fg_prefix_close, after the engine is closed). */
int fg_runner_prefix_open(fg_engine *e, const fg_run_opts *o, fg_prefix **out, fg_err *err);
/* The shared-prefix pass over a job's prompts[0..n) (fg_prefix_shared): each shared prefix
 * computed once as a prompt of its own (one greedy token, discarded), its pages saved. Time,
 * prompt tokens and prefixes are added to rep. */
int fg_runner_prefix_share(fg_engine *e, fg_prefix *p, const int32_t *const *prompts,
                           const uint32_t *lens, size_t n, fg_run_report *rep, fg_err *err);
/* The summary's line about the cache. */
void fg_runner_prefix_summary(FILE *log, const fg_run_opts *o, fg_prefix *p,
                              const fg_run_report *rep);

#endif
