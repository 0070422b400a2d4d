/* jobs_line.c - one job line (jobs.h's input formats) into an fg_job and its fg_request.
 *
 * A line is read as Python's json module reads it. Its keys say its format: "custom_id"
 * without "id" is an OpenAI Batch line, anything else fg's own line.
 * - fg's own line: every field's type checked, any unknown key refused, and a bad field stops
 *   the job before it starts (a misspelt key would otherwise run silently with a default); only
 *   malformed messages (or prompt and messages together) are kept as j->invalid, answered by an
 *   error result while the job goes on.
 * - An OpenAI line: its custom_id is the job's id (a line without a usable custom_id, or not
 *   JSON, stops the job as an fg line does: it could get no result a resume would recognise);
 *   everything else wrong with it (method, url, a body field fg refuses) is j->invalid with
 *   the field in j->invalid_param, so that line gets its error result and the job goes on.
 * Either way j->req is the line's request (fg_request_check passed) when j->invalid is NULL.
 */
#define _GNU_SOURCE
#include "jobs_int.h"
#include "fg_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct where {
    const char *file;
    size_t line;
    const char *id; /* NULL until known */
} where;

static int bad(fg_err *err, const where *w, const char *fmt, const char *arg)
{
    char what[FGJ_WHY + 64], c[48];
    snprintf(what, sizeof what, fmt, arg);
    if (w->id)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: prompt \"%s\": %s", w->file, w->line,
                          fgj_clip(w->id, c), what);
    return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: %s", w->file, w->line, what);
}

static int nomem(fg_err *err, const where *w)
{
    return fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
}

/* A typed reader's outcome as the line's error. */
static int field_rc(int rc, const char *why, const where *w, fg_err *err)
{
    if (rc == FG_ERR_NOMEM)
        return nomem(err, w);
    return rc ? bad(err, w, "%s", why) : FG_OK;
}

/* ---- fg's own line ------------------------------------------------------------------------ */

/* The keys read by their own code (the rest go through fgj_sampling_field). */
static const char *const fg_keys[] = {"id", "prompt", "messages", "chat_template_kwargs",
                                      "max_new_tokens", "stop", "meta", "logprobs", "echo"};

static int fg_key(const char *key)
{
    for (size_t k = 0; k < sizeof fg_keys / sizeof *fg_keys; k++)
        if (!strcmp(key, fg_keys[k]))
            return 1;
    return 0;
}

/* The per-request fields (sampling, n, logprobs, echo, ...) and unknown keys. */
static int parse_request_keys(json_t *o, fg_job *j, const where *w, fg_err *err)
{
    const char *key;
    json_t *v;
    char why[FGJ_WHY], c[48];
    int rc = FG_OK;
    json_object_foreach(o, key, v) {
        int64_t k = -1;
        if (!strcmp(key, "logprobs"))
            rc = fgj_get_int(v, key, 0, FG_REQ_MAX_TOP_LOGPROBS, &k, why), j->req.logprobs = (int)k;
        else if (!strcmp(key, "echo"))
            rc = fgj_get_bool(v, key, &j->req.echo, why);
        else if (fg_key(key))
            continue;
        else if (!fgj_sampling_field(key, v, &j->req, &rc, why))
            return bad(err, w, "unknown key \"%s\" (known: id, prompt or messages, "
                       "max_new_tokens, stop, the sampling fields of docs/jobs.md, and meta for "
                       "your own data)", fgj_clip(key, c));
        if (rc)
            return field_rc(rc, why, w, err);
    }
    return FG_OK;
}

static int parse_max_new(json_t *mx, fg_job *j, const where *w, fg_err *err)
{
    j->max_new = -1;
    if (!mx)
        return FG_OK;
    if (!json_is_integer(mx) || json_integer_value(mx) < 1 ||
        json_integer_value(mx) > (json_int_t)FG_JOB_MAX_NEW_TOKENS) {
        char lim[24];
        snprintf(lim, sizeof lim, "%u", FG_JOB_MAX_NEW_TOKENS);
        return bad(err, w, "\"max_new_tokens\" must be an integer from 1 to %s (no fraction, "
                   "exponent or quotes)", lim);
    }
    j->max_new = (int64_t)json_integer_value(mx);
    return FG_OK;
}

/* "messages" and "chat_template_kwargs" as JSON text into j, or j->invalid saying what is wrong
 * with them (the line's error result); FG_ERR_NOMEM only. */
static int parse_chat(json_t *o, fg_job *j, const where *w, fg_err *err)
{
    json_t *m = json_object_get(o, "messages"), *kw = json_object_get(o, "chat_template_kwargs");
    char why[FGJ_WHY];
    int wrong = 1;
    if (json_object_get(o, "prompt"))
        snprintf(why, sizeof why, "\"prompt\" and \"messages\" together: give one of them");
    else if (kw && !json_is_object(kw))
        snprintf(why, sizeof why, "\"chat_template_kwargs\" must be an object");
    else
        wrong = fgj_messages_wrong(m, why) != FG_OK;
    if (wrong)
        j->invalid = strdup(why);
    else {
        j->messages = json_dumps(m, JSON_COMPACT);
        if (kw && j->messages)
            j->chat_kwargs = json_dumps(kw, JSON_COMPACT);
    }
    if (wrong ? !j->invalid : !j->messages || (kw && !j->chat_kwargs))
        return nomem(err, w);
    return FG_OK;
}

/* "prompt": a string, or token ids. */
static int parse_prompt(json_t *p, fg_job *j, const where *w, fg_err *err)
{
    char why[FGJ_WHY];
    if (json_is_array(p))
        return field_rc(fgj_get_ids(p, "prompt", &j->prompt_ids, &j->n_prompt_ids, why), why, w,
                        err);
    if (!json_is_string(p))
        return bad(err, w, "\"prompt\" (a string, or a list of token ids) is %s",
                   p ? "not a string" : "missing");
    return (j->prompt = strdup(json_string_value(p))) ? FG_OK : nomem(err, w);
}

/* j->req from the job's fields, and the rules between them. */
static int link_request(fg_job *j)
{
    fg_request *q = &j->req;
    q->prompt = j->prompt;
    q->prompt_ids = j->prompt_ids;
    q->n_prompt_ids = j->n_prompt_ids;
    q->messages = j->messages;
    q->chat_kwargs = j->chat_kwargs;
    q->max_tokens = j->max_new > 0 ? (uint32_t)j->max_new : 0;
    q->n_stops = j->n_stops;
    for (int i = 0; i < j->n_stops; i++)
        q->stops[i] = j->stops[i];
    return FG_OK;
}

static int parse_fg(json_t *o, const char *line, size_t len, fg_job *j, where *w, fg_err *err)
{
    json_t *idv = json_object_get(o, "id"), *meta = json_object_get(o, "meta");
    if (!idv)
        return bad(err, w, "\"id\" is missing%s", "");
    if (!(j->id = fgj_id_text(idv, line, len, &j->id_is_int)))
        return bad(err, w, "\"id\" must be a non-empty string or an integer%s", "");
    w->id = j->id;
    j->req.logprobs = -1;
    int rc = parse_request_keys(o, j, w, err);
    if (rc == FG_OK && meta && !(j->meta = fgj_meta_text(meta, line, len)))
        rc = nomem(err, w);
    int chat = json_object_get(o, "messages") || json_object_get(o, "chat_template_kwargs");
    if (rc == FG_OK)
        rc = chat ? parse_chat(o, j, w, err) : parse_prompt(json_object_get(o, "prompt"), j, w, err);
    if (rc == FG_OK)
        rc = parse_max_new(json_object_get(o, "max_new_tokens"), j, w, err);
    json_t *st = json_object_get(o, "stop");
    char why[FGJ_WHY];
    if (rc == FG_OK && st)
        rc = field_rc(fgj_get_stops(st, j->stops, &j->n_stops, why), why, w, err);
    if (rc == FG_OK && !j->invalid) {
        fg_err e;
        link_request(j);
        if (fg_request_check(&j->req, &e))
            rc = bad(err, w, "%s", e.msg);
    }
    return rc;
}

/* ---- an OpenAI Batch line ---------------------------------------------------------------- */

/* Why the line (around its body) cannot run, with the field at fault; 0 when it can. */
static int oai_envelope_wrong(json_t *o, char *why, const char **param)
{
    const char *key;
    json_t *v;
    char c[48];
    json_object_foreach(o, key, v) {
        if (strcmp(key, "custom_id") && strcmp(key, "method") && strcmp(key, "url") &&
            strcmp(key, "body")) {
            *param = key;
            return snprintf(why, FGJ_WHY, "unknown key \"%s\" in a Batch line (known: "
                            "custom_id, method, url, body)", fgj_clip(key, c)), 1;
        }
    }
    json_t *m = json_object_get(o, "method"), *u = json_object_get(o, "url");
    if ((*param = "method", !json_is_string(m) || strcmp(json_string_value(m), "POST")))
        return snprintf(why, FGJ_WHY, "\"method\" must be \"POST\""), 1;
    if ((*param = "url", !json_is_string(u) || !fg_oai_endpoint_of(json_string_value(u))))
        return snprintf(why, FGJ_WHY, "\"url\" %s: fg serves \"/v1/completions\" and "
                        "\"/v1/chat/completions\"", json_is_string(u) ? fgj_clip(
                        json_string_value(u), c) : "(not a string)"), 1;
    if ((*param = "body", !json_is_object(json_object_get(o, "body"))))
        return snprintf(why, FGJ_WHY, "\"body\" (an object) is %s", json_object_get(o, "body")
                        ? "not an object" : "missing"), 1;
    return 0;
}

/* Move a parsed body's strings into the job (they then belong to it). */
static void take_body(fg_job *j, fg_oai_body *b)
{
    j->model = b->model, b->model = NULL;
    j->prompt = b->prompt, b->prompt = NULL;
    j->prompt_ids = b->prompt_ids, b->prompt_ids = NULL;
    j->n_prompt_ids = b->req.n_prompt_ids;
    j->messages = b->messages, b->messages = NULL;
    j->chat_kwargs = b->chat_kwargs, b->chat_kwargs = NULL;
    for (int i = 0; i < b->req.n_stops; i++)
        j->stops[i] = b->stops[i], b->stops[i] = NULL;
    j->n_stops = b->req.n_stops;
    j->max_new = b->req.max_tokens ? (int64_t)b->req.max_tokens : -1;
    j->req = b->req;
    link_request(j);
}

static int parse_oai(json_t *o, fg_job *j, where *w, fg_err *err)
{
    json_t *cid = json_object_get(o, "custom_id");
    if (!json_is_string(cid) || !*json_string_value(cid))
        return bad(err, w, "\"custom_id\" must be a non-empty string%s", "");
    if (!(j->id = strdup(json_string_value(cid))))
        return nomem(err, w);
    w->id = j->id;
    j->format = FG_JOB_OPENAI;
    j->max_new = -1;
    j->req.logprobs = -1;
    char why[FGJ_WHY], param[64] = "";
    const char *at = "";
    if (oai_envelope_wrong(o, why, &at)) {
        snprintf(param, sizeof param, "%s", at);
    } else {
        json_t *u = json_object_get(o, "url");
        j->endpoint = fg_oai_endpoint_of(json_string_value(u));
        fg_oai_body b;
        int rc = fgj_oai_body_read(json_object_get(o, "body"), j->endpoint, FG_OAI_BATCH, &b,
                                   param, why);
        if (rc == FG_ERR_NOMEM)
            return nomem(err, w);
        if (rc == FG_OK) {
            take_body(j, &b);
            fg_oai_body_clear(&b);
            return FG_OK;
        }
    }
    if (!(j->invalid = strdup(why)) || !(j->invalid_param = strdup(param)))
        return nomem(err, w);
    return FG_OK;
}

void fgj_job_free(fg_job *j)
{
    free(j->id);
    free(j->model);
    free(j->prompt);
    free(j->prompt_ids);
    free(j->messages);
    free(j->chat_kwargs);
    free(j->invalid);
    free(j->invalid_param);
    free(j->meta);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    memset(j, 0, sizeof *j);
}

/* Parse one non-blank line into *j (zeroed first; freed again on an error). */
int fgj_parse_job(const char *text, size_t len, const char *file, size_t line, fg_job *j,
                  fg_err *err)
{
    memset(j, 0, sizeof *j);
    j->line = line;
    where w = {file, line, NULL};
    json_error_t je;
    json_t *o = fg_json_loadb(text, len, JSON_REJECT_DUPLICATES, &je); /* as Python reads it */
    if (!o)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: not valid JSON: %s (column %d)", file,
                          line, fgj_oneline(je.text), je.column);
    int rc;
    if (!json_is_object(o))
        rc = bad(err, &w, "not a JSON object%s", "");
    else if (json_object_get(o, "custom_id") && !json_object_get(o, "id"))
        rc = parse_oai(o, j, &w, err);
    else
        rc = parse_fg(o, text, len, j, &w, err);
    json_decref(o);
    if (rc)
        fgj_job_free(j);
    return rc;
}

void fg_job_clear(fg_job *j)
{
    if (j)
        fgj_job_free(j);
}

void fg_jobs_free(fg_job_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        fgj_job_free(&l->jobs[i]);
    free(l->jobs);
    l->jobs = NULL;
    l->n = 0;
}
