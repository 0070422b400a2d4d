/* jobs_line.c - fg's own job line (jobs.h's input format): one JSON object read as Python's
 * json module reads it, every field's type checked, any unknown key refused (a misspelt key
 * would otherwise run silently with a default). A line whose request is well-formed JSON with
 * an id but whose messages are malformed keeps its reason in j->invalid: the runner answers it
 * with an error result and the job goes on.
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
    char what[200], c[48];
    snprintf(what, sizeof what, fmt, arg);
    if (w->id)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: prompt \"%s\": %s", w->file, w->line,
                          fgj_clip(w->id, c), what);
    return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: %s", w->file, w->line, what);
}

static int check_keys(json_t *o, const where *w, fg_err *err)
{
    static const char *const known[] = {"id", "prompt", "max_new_tokens", "stop", "meta",
                                        "messages", "chat_template_kwargs"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]))
            k++;
        char c[48];
        if (k == sizeof known / sizeof *known)
            return bad(err, w, "unknown key \"%s\" (known: id, prompt or messages, "
                       "max_new_tokens, stop, chat_template_kwargs, and meta for your own data)",
                       fgj_clip(key, c));
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

static int parse_stops(json_t *st, fg_job *j, const where *w, fg_err *err)
{
    if (!st)
        return FG_OK;
    size_t n = json_is_string(st) ? 1 : json_is_array(st) ? json_array_size(st) : SIZE_MAX;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", FG_JOB_MAX_STOPS);
    if (n > FG_JOB_MAX_STOPS)
        return bad(err, w, "\"stop\" must be a string or an array of at most %s strings", lim);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(st) ? st : json_array_get(st, i);
        if (!json_is_string(s) || !*json_string_value(s))
            return bad(err, w, "\"stop\" strings must be non-empty strings%s", "");
        if (!(j->stops[j->n_stops] = strdup(json_string_value(s))))
            return fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
        j->n_stops++;
    }
    return FG_OK;
}

/* Why messages m is not an array of {"role": string, "content": string, array or null}
 * objects (into why), or 0 when it is. */
static int messages_wrong(json_t *m, char *why, size_t cap)
{
    if (!json_is_array(m) || json_array_size(m) == 0) {
        snprintf(why, cap, "\"messages\" must be a non-empty array of {\"role\", \"content\"} "
                 "objects");
        return 1;
    }
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *o = json_array_get(m, i), *c = json_object_get(o, "content");
        if (!json_is_object(o))
            snprintf(why, cap, "\"messages\"[%zu] is not an object", i);
        else if (!json_is_string(json_object_get(o, "role")))
            snprintf(why, cap, "\"messages\"[%zu] has no \"role\" string", i);
        else if (!c || !(json_is_string(c) || json_is_array(c) || json_is_null(c)))
            snprintf(why, cap, "\"messages\"[%zu] has no \"content\" (a string, an array of "
                     "parts, or null)", i);
        else
            continue;
        return 1;
    }
    return 0;
}

/* "messages" and "chat_template_kwargs" as JSON text into j, or j->invalid saying what is wrong
 * with them (the line's error result); FG_ERR_NOMEM only. */
static int parse_chat(json_t *o, fg_job *j, const where *w, fg_err *err)
{
    json_t *m = json_object_get(o, "messages"), *kw = json_object_get(o, "chat_template_kwargs");
    char why[200];
    int wrong = 1;
    if (json_object_get(o, "prompt"))
        snprintf(why, sizeof why, "\"prompt\" and \"messages\" together: give one of them");
    else if (kw && !json_is_object(kw))
        snprintf(why, sizeof why, "\"chat_template_kwargs\" must be an object");
    else
        wrong = messages_wrong(m, why, sizeof why);
    if (wrong)
        j->invalid = strdup(why);
    else {
        j->messages = json_dumps(m, JSON_COMPACT);
        if (kw && j->messages)
            j->chat_kwargs = json_dumps(kw, JSON_COMPACT);
    }
    if (wrong ? !j->invalid : !j->messages || (kw && !j->chat_kwargs))
        return fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    return FG_OK;
}

void fgj_job_free(fg_job *j)
{
    free(j->id);
    free(j->prompt);
    free(j->messages);
    free(j->chat_kwargs);
    free(j->invalid);
    free(j->meta);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    memset(j, 0, sizeof *j);
}

static int parse_fields(json_t *o, const char *line, size_t len, fg_job *j, where *w,
                        fg_err *err)
{
    if (!json_is_object(o))
        return bad(err, w, "not a JSON object%s", "");
    json_t *idv = json_object_get(o, "id"), *p = json_object_get(o, "prompt");
    if (!idv)
        return bad(err, w, "\"id\" is missing%s", "");
    if (!(j->id = fgj_id_text(idv, line, len, &j->id_is_int)))
        return bad(err, w, "\"id\" must be a non-empty string or an integer%s", "");
    w->id = j->id;
    int rc = check_keys(o, w, err);
    json_t *meta = json_object_get(o, "meta");
    if (rc == FG_OK && meta && !(j->meta = fgj_meta_text(meta, line, len)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    int chat = json_object_get(o, "messages") || json_object_get(o, "chat_template_kwargs");
    if (rc == FG_OK && chat)
        rc = parse_chat(o, j, w, err);
    else if (rc == FG_OK && !json_is_string(p))
        rc = bad(err, w, "\"prompt\" (a string) is %s", p ? "not a string" : "missing");
    else if (rc == FG_OK && !(j->prompt = strdup(json_string_value(p))))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    if (rc == FG_OK)
        rc = parse_max_new(json_object_get(o, "max_new_tokens"), j, w, err);
    if (rc == FG_OK)
        rc = parse_stops(json_object_get(o, "stop"), j, w, err);
    return rc;
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
                          line, je.text, je.column);
    int rc = parse_fields(o, text, len, j, &w, err);
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
