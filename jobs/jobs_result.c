/* jobs_result.c - result lines, in the format of the line they answer (jobs.h), and the test
 * that tells a result line from anything else when a results file is resumed.
 *
 * - fg's own line gets fg's result: {"id" as written, "text", "tokens", "finish_reason"
 *   ("length" | "eos" | "stop"), "prompt_tokens", "timing", ...}. From a full fg_response it
 *   adds "logprobs" (the completions endpoint's legacy object, of choice 0) when asked and
 *   "choices" (every choice: text, tokens, finish_reason, logprobs) when n > 1; the top-level
 *   text/tokens/finish_reason are choice 0's, so a reader of n = 1 results needs nothing new.
 * - An OpenAI line gets a BatchRequestOutput line (openai_write.c's writers): ids derived from
 *   the custom_id ("fg-batch-<16 hex>", "fg-req-...", "cmpl-..." / "chatcmpl-..."), so a resumed
 *   job writes the same ids.
 * A results file may mix both (an input may): resume recognises either kind by its keys and
 * takes the custom_id as the id, so ids share one namespace across formats.
 * Legacy results (text and tokens without an fg_response) carry no log-probs or choices: a
 * request that asked for them gets an error result saying so, never a silent omission.
 */
#define _GNU_SOURCE
#include "fg_json.h"
#include "jobs_int.h"
#include "engine.h"
#include "openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))

static json_t *int_array(const int32_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static const char *fg_finish(int finish)
{
    return finish == FG_FINISH_EOS ? "eos" : finish == FG_FINISH_STOP ? "stop" : "length";
}

static int finish_code(const char *s)
{
    return !s ? FG_FINISH_LENGTH : !strcmp(s, "eos") ? FG_FINISH_EOS
           : !strcmp(s, "stop") ? FG_FINISH_STOP : FG_FINISH_LENGTH;
}

/* What a legacy result cannot carry that its request asked for, or NULL. */
static const char *legacy_lacks(const fg_job *j)
{
    if (!j->req.prompt && !j->req.prompt_ids && !j->req.messages)
        return NULL; /* a job not from a line (its req never filled): nothing asked */
    if (j->req.logprobs >= 0)
        return "log-probabilities";
    if (j->req.n > 1)
        return "n > 1 choices";
    if (j->req.echo)
        return "echo";
    return NULL;
}

/* ---- fg's own result ---------------------------------------------------------------------- */

static json_t *fg_error(const char *type, const char *msg, uint64_t prompt_tokens)
{
    char *m = fgj_utf8_sanitize(msg ? msg : "");
    json_t *o = m ? json_pack("{s:{s:s, s:s}, s:I}", "error", "type", type ? type : "error",
                              "message", m, "prompt_tokens", (json_int_t)prompt_tokens)
                  : NULL;
    free(m);
    return o;
}

/* One choice's members {text, tokens, finish_reason}. */
static json_t *fg_choice_json(const char *text, const int32_t *tokens, size_t n, int finish)
{
    char *t = fgj_utf8_sanitize(text ? text : "");
    json_t *toks = int_array(tokens, n);
    json_t *o = t && toks ? json_pack("{s:s, s:o, s:s}", "text", t, "tokens", toks,
                                      "finish_reason", fg_finish(finish))
                          : NULL;
    if (!(t && toks))
        json_decref(toks);
    free(t);
    return o;
}

/* Members from the legacy fields (no fg_response). */
static json_t *fg_legacy(const fg_job_result *r)
{
    const char *lacks = legacy_lacks(r->job);
    char msg[160];
    if (!r->error && lacks)
        snprintf(msg, sizeof msg, "this job runner does not produce %s yet", lacks);
    if (r->error || lacks)
        return fg_error(r->error ? r->error_type : "unsupported", r->error ? r->error : msg,
                        r->prompt_tokens);
    json_t *o = fg_choice_json(r->text, r->tokens, r->n_tokens, finish_code(r->finish));
    if (o && (json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)r->prompt_tokens))
              || json_object_set_new(o, "timing", json_pack("{s:I, s:f}", "block",
                                     (json_int_t)r->block, "block_seconds", r->seconds)) ||
              (r->prompt_ids && json_object_set_new(o, "prompt_ids",
                                                    int_array(r->prompt_ids, r->prompt_tokens))))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Members from a full response. */
static json_t *fg_from_resp(const fgj_emit *e, const fg_job_result *r)
{
    const fg_response *p = r->resp;
    const fg_request *q = &r->job->req;
    if (p->status || p->n_choices == 0)
        return fg_error(p->error_type, p->status ? p->error : "no choices", p->n_prompt);
    fg_oai_meta m = {NULL, NULL, 0, e->piece, e->ctx};
    json_t *o = NULL, *all = p->n_choices > 1 ? json_array() : NULL;
    int ok = p->n_choices == 1 || all;
    for (uint32_t i = 0; ok && i < p->n_choices; i++) {
        const fg_choice *c = &p->choices[i];
        json_t *ch = fg_choice_json(c->text, c->tokens, c->n_tokens, c->finish);
        if (ch && q->logprobs >= 0)
            json_object_set_new(ch, "logprobs", fgj_legacy_logprobs(&m, p, c, q->echo));
        ok = ch && (q->logprobs < 0 || json_object_get(ch, "logprobs"));
        if (ok && i == 0)
            o = json_deep_copy(ch);
        if (ok && all)
            ok = !json_array_append(all, ch);
        json_decref(ch);
    }
    ok = ok && o && !json_object_set_new(o, "prompt_tokens", json_integer(p->n_prompt)) &&
         !json_object_set_new(o, "timing", json_pack("{s:I, s:f}", "block", (json_int_t)r->block,
                                                      "block_seconds", p->seconds)) &&
         (!r->prompt_ids || !json_object_set_new(o, "prompt_ids",
                                                 int_array(p->prompt_ids, p->n_prompt))) &&
         (!all || !json_object_set(o, "choices", all));
    json_decref(all);
    if (!ok)
        json_decref(o);
    return ok ? o : NULL;
}

/* {"id": ID as the input wrote it, the members, "meta": META}\n to f. */
static int fg_line(FILE *f, const fgj_emit *e, const fg_job_result *r)
{
    json_t *o = r->resp ? fg_from_resp(e, r) : fg_legacy(r);
    char *body = o ? json_dumps(o, DUMP_FLAGS) : NULL;
    json_decref(o);
    json_t *ids = r->job->id_is_int ? NULL : json_string(r->job->id);
    char *id = ids ? json_dumps(ids, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(ids);
    int ok = body && (id || r->job->id_is_int);
    if (ok) {
        size_t bl = strlen(body); /* "{...}": its members are body[1, bl - 1) */
        fprintf(f, "{\"id\":%s%s%.*s%s%s}\n", id ? id : r->job->id, bl > 2 ? "," : "",
                (int)(bl - 2), body + 1, r->job->meta ? ",\"meta\":" : "",
                r->job->meta ? r->job->meta : "");
    }
    free(body);
    free(id);
    return ok ? 0 : -1;
}

/* ---- an OpenAI Batch output line --------------------------------------------------------- */

static uint64_t fnv(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The error of r (an invalid line, a failed request, or what a legacy result lacks), or NULL. */
static const char *oai_error(const fg_job_result *r, int *status, const char **code,
                             const char **param, char *buf, size_t cap)
{
    const fg_job *j = r->job;
    *status = 400;
    *code = r->error_type ? r->error_type : "invalid_request_error";
    *param = j->invalid ? j->invalid_param : NULL;
    if (j->invalid && !r->resp)
        return r->error ? r->error : j->invalid;
    if (r->resp && r->resp->status) {
        *status = r->resp->status;
        *code = r->resp->error_type ? r->resp->error_type : "error";
        return r->resp->error;
    }
    if (r->resp)
        return NULL;
    if (r->error)
        return r->error;
    const char *lacks = legacy_lacks(j);
    if (!lacks)
        return NULL;
    snprintf(buf, cap, "this job runner does not produce %s yet", lacks);
    *status = 501;
    *code = "unsupported";
    return buf;
}

static int oai_line(FILE *f, const fgj_emit *e, const fg_job_result *r)
{
    const fg_job *j = r->job;
    char line_id[40], req_id[40], body_id[48], buf[160];
    uint64_t h = fnv(j->id);
    snprintf(line_id, sizeof line_id, "fg-batch-%016llx", (unsigned long long)h);
    snprintf(req_id, sizeof req_id, "fg-req-%016llx", (unsigned long long)h);
    snprintf(body_id, sizeof body_id, "%s-%016llx",
             j->endpoint == FG_OAI_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)h);
    int status;
    const char *code, *param;
    const char *msg = oai_error(r, &status, &code, &param, buf, sizeof buf);
    char *body = NULL, *line = NULL;
    fg_err err;
    int rc;
    if (msg) {
        json_t *eo = fgj_error_object(msg, status >= 500 ? "server_error"
                                      : "invalid_request_error", param, code);
        body = eo ? json_dumps(eo, DUMP_FLAGS) : NULL;
        json_decref(eo);
        rc = body ? FG_OK : FG_ERR_NOMEM;
    } else {
        fg_choice c = {(char *)r->text, (int32_t *)r->tokens, (uint32_t)r->n_tokens,
                       finish_code(r->finish), NULL, NULL, 0};
        fg_response legacy = {.prompt_ids = (int32_t *)r->prompt_ids,
                              .n_prompt = (uint32_t)r->prompt_tokens, .choices = &c,
                              .n_choices = 1, .completion_tokens = r->n_tokens};
        fg_oai_meta m = {body_id, e->model ? e->model : j->model ? j->model : "",
                         (int64_t)time(NULL), e->piece, e->ctx};
        rc = fg_oai_response_json(&m, j->endpoint, &j->req, r->resp ? r->resp : &legacy, &body,
                                  &err);
    }
    if (rc == FG_OK)
        rc = fg_oai_batch_line(line_id, j->id, req_id, msg ? status : 200, body, code, msg,
                               &line, &err);
    if (rc == FG_OK)
        fprintf(f, "%s\n", line);
    free(body);
    free(line);
    return rc == FG_OK ? 0 : -1;
}

int fgj_encode_results(const fgj_emit *e, const char *name, const fg_job_result *r, size_t n,
                       char **buf, size_t *len, fg_err *err)
{
    *buf = NULL;
    FILE *m = open_memstream(buf, len);
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < n; i++) {
        int bad = r[i].job->format == FG_JOB_OPENAI ? oai_line(m, e, &r[i]) : fg_line(m, e, &r[i]);
        if (bad) {
            fclose(m);
            free(*buf);
            *buf = NULL;
            char c[48];
            return fg_err_set(err, FG_ERR_NOMEM, "%s: cannot encode the result of prompt \"%s\"",
                              name, fgj_clip(r[i].job->id, c));
        }
    }
    if (fclose(m)) {
        free(*buf);
        *buf = NULL;
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    return FG_OK;
}

/* ---- recognising result lines ------------------------------------------------------------ */

static int fg_result(json_t *o)
{
    json_t *f = json_object_get(o, "finish_reason"), *t = json_object_get(o, "tokens");
    json_t *e = json_object_get(o, "error");
    int ok = json_is_string(json_object_get(o, "text")) && json_is_array(t) && json_is_string(f);
    ok = ok && (!strcmp(json_string_value(f), "length") || !strcmp(json_string_value(f), "eos") ||
                !strcmp(json_string_value(f), "stop"));
    for (size_t i = 0; ok && i < json_array_size(t); i++)
        ok = json_is_integer(json_array_get(t, i));
    return ok || (json_is_object(e) && json_is_string(json_object_get(e, "message")));
}

/* A BatchRequestOutput: custom_id, response {status_code, ...} or null, and an "error" member. */
static int oai_result(json_t *o)
{
    json_t *c = json_object_get(o, "custom_id"), *resp = json_object_get(o, "response");
    return json_is_string(c) && *json_string_value(c) && json_object_get(o, "error") &&
           (json_is_null(resp) ||
            (json_is_object(resp) && json_is_integer(json_object_get(resp, "status_code"))));
}

char *fgj_result_id(const char *s, size_t n)
{
    json_t *o = fg_json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    char *id = NULL;
    int is_int;
    if (json_is_object(o) && json_object_get(o, "custom_id")) { /* fg's results have none */
        if (oai_result(o))
            id = strdup(json_string_value(json_object_get(o, "custom_id")));
    } else if (json_is_object(o) && fg_result(o)) {
        id = fgj_id_text(json_object_get(o, "id"), s, n, &is_int);
    }
    json_decref(o);
    return id;
}
