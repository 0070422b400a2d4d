/* request_tmp.c - TEMPORARY: fg_request_check and fg_response_clear (jobs/request.h) until the
 * jobs helper's implementation (jobs/) is merged; then this file goes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

void fg_response_clear(fg_response *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; r->choices && i < r->n_choices; i++) {
        free(r->choices[i].text);
        free(r->choices[i].tokens);
        free(r->choices[i].logprob);
        free(r->choices[i].top);
    }
    free(r->choices);
    free(r->prompt_ids);
    free(r->prompt_logprob);
    free(r->prompt_top);
    memset(r, 0, sizeof *r);
}

int fg_request_check(const fg_request *q, fg_err *err)
{
    int kinds = !!q->prompt + !!q->prompt_ids + !!q->messages;
    if (kinds != 1)
        return fg_err_set(err, FG_ERR_INVALID_ARG, kinds ? "prompt: give one of prompt or "
                          "messages, not both" : "prompt: missing (prompt or messages)");
    if (q->n > FG_REQ_MAX_N)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "n: %u is more than %d", q->n, FG_REQ_MAX_N);
    if (q->logprobs < -1 || q->logprobs > FG_REQ_MAX_TOP_LOGPROBS)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "logprobs: %d is not in 0..%d", q->logprobs,
                          FG_REQ_MAX_TOP_LOGPROBS);
    if (q->echo && q->messages)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "echo: only with a prompt, not messages");
    if (q->max_tokens && q->min_tokens > q->max_tokens)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "min_tokens: %u is more than max_tokens %u",
                          q->min_tokens, q->max_tokens);
    if (q->n_stops < 0 || q->n_stops > FG_REQ_MAX_STOPS)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "stop: at most %d strings", FG_REQ_MAX_STOPS);
    return fg_sample_check(&q->sample, err);
}
