/* runner_follow.h - a follower rank's life in a pipeline (stage.h): the runner's, a floor above
 * the engine it opens. */
#ifndef FG_RUNNER_FOLLOW_H
#define FG_RUNNER_FOLLOW_H

#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A follower rank (rank > 0): wait for rank 0's OPEN (fg_stage_await), open the store at
 * `model`, its model and an engine over this rank's stage (o: this rank's budget, threads,
 * offload dir, trace; the block and the policy come from rank 0), run every block rank 0 sends
 * until QUIT (fg_stage_serve). notice (in o) receives one line at the end with what this stage
 * did. Returns FG_OK at once when rank 0's first word is QUIT. */
int fg_runner_follow(const char *model, const fg_engine_opts *o, const fg_link *link,
                     fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
