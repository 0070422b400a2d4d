/* request.c - the rules between a request's fields (request.h), shared by every front door, and
 * freeing a response.
 *
 * The checks name fields by OpenAI's names, which fg's own job line shares (docs/jobs.md).
 * Ranges follow vLLM where OpenAI and vLLM differ and fg can honour vLLM's wider range
 * (temperature has no upper bound, top_k 0 is off); penalties keep OpenAI's -2..2.
 * Only the fields marked in q->set are checked among the sampling ones: the others are the
 * run's defaults, which the run checked with its flags' names.
 */
#include "request.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int bad(fg_err *err, const char *field, const char *rule, double v)
{
    return fg_err_set(err, FG_ERR_INVALID_ARG, "\"%s\" %g: %s", field, v, rule);
}

static int check_sampling(const fg_request *q, fg_err *err)
{
    const fg_sample_params *s = &q->sample;
    if ((q->set & FG_REQ_SET_TEMPERATURE) && !(s->temperature >= 0.0f && isfinite(s->temperature)))
        return bad(err, "temperature", "must be a number >= 0 (0 = greedy)", s->temperature);
    if ((q->set & FG_REQ_SET_TOP_P) && !(s->top_p > 0.0f && s->top_p <= 1.0f))
        return bad(err, "top_p", "must be in (0, 1]", s->top_p);
    if ((q->set & FG_REQ_SET_MIN_P) && !(q->min_p >= 0.0f && q->min_p <= 1.0f))
        return bad(err, "min_p", "must be in [0, 1] (0 = off)", q->min_p);
    if ((q->set & FG_REQ_SET_PRESENCE) &&
        !(q->presence_penalty >= -2.0f && q->presence_penalty <= 2.0f))
        return bad(err, "presence_penalty", "must be in [-2, 2]", q->presence_penalty);
    if ((q->set & FG_REQ_SET_FREQUENCY) &&
        !(q->frequency_penalty >= -2.0f && q->frequency_penalty <= 2.0f))
        return bad(err, "frequency_penalty", "must be in [-2, 2]", q->frequency_penalty);
    if ((q->set & FG_REQ_SET_REPETITION) &&
        !(q->repetition_penalty > 0.0f && isfinite(q->repetition_penalty)))
        return bad(err, "repetition_penalty", "must be a number > 0 (1 = off)",
                   q->repetition_penalty);
    return FG_OK;
}

int fg_request_check(const fg_request *q, fg_err *err)
{
    int kinds = (q->prompt != NULL) + (q->prompt_ids != NULL || q->n_prompt_ids > 0) +
                (q->messages != NULL);
    if (kinds != 1)
        return fg_err_set(err, FG_ERR_INVALID_ARG, kinds ? "\"prompt\" and \"messages\" together: "
                          "give one of them" : "\"prompt\" (or \"messages\") is missing");
    if (q->prompt_ids && q->n_prompt_ids == 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "\"prompt\": an empty list of token ids");
    if (q->chat_kwargs && !q->messages)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "\"chat_template_kwargs\" without "
                          "\"messages\"");
    if (q->n > FG_REQ_MAX_N)
        return bad(err, "n", "must be from 1 to 128", q->n);
    if (q->logprobs < -1 || q->logprobs > FG_REQ_MAX_TOP_LOGPROBS)
        return bad(err, q->messages ? "top_logprobs" : "logprobs", "must be from 0 to 20",
                   q->logprobs);
    if (q->echo && q->messages)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "\"echo\": only with a \"prompt\" (not "
                          "\"messages\")");
    if (q->max_tokens && q->min_tokens > q->max_tokens)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "\"min_tokens\" %u: more than \"max_tokens\" "
                          "%u", q->min_tokens, q->max_tokens);
    if (q->n_stops < 0 || q->n_stops > FG_REQ_MAX_STOPS)
        return bad(err, "stop", "at most 8 strings", q->n_stops);
    for (int i = 0; i < q->n_stops; i++)
        if (!q->stops[i] || !*q->stops[i])
            return fg_err_set(err, FG_ERR_INVALID_ARG, "\"stop\"[%d]: an empty string", i);
    return check_sampling(q, err);
}

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
