/* jobs.c - see jobs.h. JSON through jansson. */
#define _GNU_SOURCE
#include "jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *id_text(json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return strdup(buf);
    }
    return NULL;
}

static int parse_stops(json_t *o, fg_job *j, const char *path, size_t line, fg_err *err)
{
    json_t *st = json_object_get(o, "stop");
    if (!st)
        return FG_OK;
    if (json_is_string(st))
        st = json_pack("[O]", st);
    else
        json_incref(st);
    if (!json_is_array(st) || json_array_size(st) > FG_JOB_MAX_STOPS) {
        json_decref(st);
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: \"stop\" must be a string or up to %d "
                          "strings", path, line, FG_JOB_MAX_STOPS);
    }
    for (size_t i = 0; i < json_array_size(st); i++) {
        json_t *s = json_array_get(st, i);
        if (!json_is_string(s) || !*json_string_value(s)) {
            json_decref(st);
            return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: stop strings must be non-empty "
                              "strings", path, line);
        }
        j->stops[j->n_stops++] = strdup(json_string_value(s));
    }
    json_decref(st);
    return FG_OK;
}

static int parse_line(const char *text, const char *path, size_t line, fg_job *j, fg_err *err)
{
    json_error_t je;
    memset(j, 0, sizeof *j);
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: not a JSON object (%s)", path, line,
                          o ? "" : je.text);
    }
    j->max_new = -1;
    json_t *p = json_object_get(o, "prompt"), *mx = json_object_get(o, "max_new_tokens");
    j->id = id_text(json_object_get(o, "id"));
    int rc = FG_OK;
    if (!j->id)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: \"id\" (string or integer) is missing",
                        path, line);
    else if (!json_is_string(p))
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: \"prompt\" (string) is missing", path,
                        line);
    else if (mx && (!json_is_integer(mx) || json_integer_value(mx) < 1))
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: \"max_new_tokens\" must be a positive "
                        "integer", path, line);
    if (rc == FG_OK) {
        j->prompt = strdup(json_string_value(p));
        j->max_new = mx ? (int64_t)json_integer_value(mx) : -1;
        rc = parse_stops(o, j, path, line, err);
    }
    json_decref(o);
    return rc;
}

static void job_free(fg_job *j)
{
    free(j->id);
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
}

void fg_jobs_free(fg_job_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        job_free(&l->jobs[i]);
    free(l->jobs);
    l->jobs = NULL;
    l->n = 0;
}

static int check_unique(const fg_job_list *l, const char *path, fg_err *err)
{
    for (size_t i = 0; i < l->n; i++)      /* quadratic, fine for the thousands of prompts */
        for (size_t k = i + 1; k < l->n; k++) /* a job holds; a hash set if that grows */
            if (!strcmp(l->jobs[i].id, l->jobs[k].id))
                return fg_err_set(err, FG_ERR_DUPLICATE, "%s: id \"%s\" appears twice", path,
                                  l->jobs[i].id);
    return FG_OK;
}

int fg_jobs_load(const char *path, fg_job_list *out, fg_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, errno,
                          "%s: cannot open", path);
    memset(out, 0, sizeof *out);
    char *line = NULL;
    size_t cap = 0, lineno = 0, alloc = 0;
    ssize_t len;
    int rc = FG_OK;
    while (rc == FG_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        if (out->n == alloc) {
            alloc = alloc ? alloc * 2 : 64;
            fg_job *p = realloc(out->jobs, alloc * sizeof *p);
            if (!p) {
                rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            out->jobs = p;
        }
        rc = parse_line(line, path, lineno, &out->jobs[out->n], err);
        if (rc == FG_OK)
            out->n++;
        else
            job_free(&out->jobs[out->n]);
    }
    free(line);
    fclose(f);
    if (rc == FG_OK && out->n == 0)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s: no prompts", path);
    if (rc == FG_OK)
        rc = check_unique(out, path, err);
    if (rc)
        fg_jobs_free(out);
    return rc;
}

/* Cut fd back to its last newline (a line torn by a kill) and mark finished ids. */
static int scan_output(int fd, const char *path, fg_job_list *jobs, size_t *n_done, fg_err *err)
{
    FILE *f = fdopen(dup(fd), "r");
    if (!f)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot read", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    off_t good = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (line[len - 1] != '\n')
            break; /* torn tail */
        json_t *o = json_loads(line, 0, NULL);
        char *id = o ? id_text(json_object_get(o, "id")) : NULL;
        json_decref(o);
        if (!id)
            break; /* not one of our lines: stop trusting the rest */
        for (size_t i = 0; i < jobs->n; i++)
            if (!jobs->jobs[i].done && !strcmp(jobs->jobs[i].id, id)) {
                jobs->jobs[i].done = 1;
                (*n_done)++;
            }
        free(id);
        good += len;
    }
    free(line);
    fclose(f);
    if (ftruncate(fd, good) || lseek(fd, good, SEEK_SET) < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot cut a torn last line", path);
    return FG_OK;
}

int fg_jobs_open_output(const char *path, int resume, fg_job_list *jobs, int *fd, size_t *n_done,
                        fg_err *err)
{
    *n_done = 0;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for writing", path);
    struct stat st;
    if (fstat(f, &st)) {
        close(f);
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", path);
    }
    if (st.st_size > 0 && !resume) {
        close(f);
        return fg_err_set(err, FG_ERR_EXISTS, "%s: already holds results; pass --resume to "
                          "continue that job, or choose another --output", path);
    }
    int rc = st.st_size > 0 ? scan_output(f, path, jobs, n_done, err) : FG_OK;
    if (rc) {
        close(f);
        return rc;
    }
    *fd = f;
    return FG_OK;
}

/* Copy of s with every invalid UTF-8 sequence replaced by U+FFFD, as Hugging Face decodes
 * with errors="replace" (a generation can stop inside a multi-byte character). */
static char *utf8_sanitize(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                   : (*p & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len && (size_t)(end - p) >= len;
        uint32_t cp = len == 1 ? *p : len == 2 ? (*p & 0x1Fu) : len == 3 ? (*p & 0x0Fu) : (*p & 0x07u);
        for (size_t k = 1; ok && k < len; k++) {
            ok = (p[k] & 0xC0) == 0x80;
            cp = (cp << 6) | (p[k] & 0x3Fu);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        ok = ok && cp >= min[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
        if (ok) {
            memcpy(o, p, len);
            o += len;
            p += len;
        } else { /* one U+FFFD for a lead byte and the continuation bytes that follow it */
            size_t skip = 1;
            while (len > 1 && skip < len && p + skip < end && (p[skip] & 0xC0) == 0x80)
                skip++;
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            p += skip;
        }
    }
    *o = '\0';
    return out;
}

static json_t *result_json(const fg_job_result *r)
{
    json_t *toks = json_array();
    for (size_t i = 0; i < r->n_tokens; i++)
        json_array_append_new(toks, json_integer(r->tokens[i]));
    char *text = utf8_sanitize(r->text);
    json_t *o = text ? json_pack("{s:s, s:s, s:o, s:s, s:I, s:{s:I, s:f}}", "id", r->job->id,
                                 "text", text, "tokens", toks, "finish_reason", r->finish,
                                 "prompt_tokens", (json_int_t)r->prompt_tokens, "timing",
                                 "block", (json_int_t)r->block, "block_seconds", r->seconds)
                     : NULL;
    free(text);
    return o;
}

int fg_jobs_append(int fd, const char *path, const fg_job_result *r, size_t n, fg_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        json_t *o = result_json(&r[i]);
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        json_decref(o);
        if (s)
            fprintf(m, "%s\n", s);
        free(s);
        if (!s) {
            fclose(m);
            free(buf);
            return fg_err_set(err, FG_ERR_NOMEM, "%s: cannot encode result \"%s\"", path,
                              r[i].job->id);
        }
    }
    fclose(m);
    size_t off = 0;
    int rc = FG_OK;
    while (off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = fg_err_sys(err, errno == ENOSPC ? FG_ERR_NO_SPACE : FG_ERR_IO, errno,
                            "%s: writing results", path);
            break;
        }
        off += (size_t)w;
    }
    if (rc == FG_OK && fdatasync(fd))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: fdatasync", path);
    free(buf);
    return rc;
}
