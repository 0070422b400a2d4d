/* fuzz_jobs.c - libFuzzer target for the JSONL job reader (jobs/jobs_read.c, jobs_line.c): the
 * input is a whole job file. An odd first byte feeds it through a pipe (validated as it streams, when it fits
 * the pipe), an even one through a memfd (a seekable file: validated by a first pass). Every
 * job handed out is checked against the documented field rules, an integer id's literal and
 * the meta text (found in the line's own bytes by jobs_util.c's raw member scanner) included;
 * fg's lines and OpenAI Batch lines alike (a valid line's fg_request passes fg_request_check);
 * a refused input's message is one line. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "jobs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int input_fd(const uint8_t *data, size_t size)
{
    int p[2];
    if (size && (data[0] & 1) && size < 60000 && pipe(p) == 0) {
        if (write(p[1], data, size) != (ssize_t)size)
            abort();
        close(p[1]);
        return p[0];
    }
    int fd = memfd_create("fuzz_jobs", MFD_CLOEXEC);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || lseek(fd, 0, SEEK_SET))
        abort();
    return fd;
}

static void check_job(const fg_job *j)
{
    if (!j->id || !*j->id || j->line == 0)
        abort();
    /* one prompt kind (text, token ids or messages), unless the line is answered as invalid */
    int kinds = !!j->prompt + !!j->prompt_ids + !!j->messages;
    if (!j->invalid && kinds != 1)
        abort();
    if (j->invalid && (j->format == FG_JOB_OPENAI) != (j->invalid_param != NULL))
        abort(); /* an OpenAI line's error names its field ("" for the line) */
    /* a valid line's request is the job's own fields and passes the contract's rules */
    fg_err e;
    if (!j->invalid && (j->req.prompt != j->prompt || j->req.messages != j->messages ||
                        j->req.prompt_ids != j->prompt_ids ||
                        j->req.n_prompt_ids != j->n_prompt_ids || j->req.n_stops != j->n_stops ||
                        fg_request_check(&j->req, &e) != FG_OK))
        abort();
    if (j->format == FG_JOB_OPENAI && (j->id_is_int || j->meta))
        abort();
    if (j->invalid && !*j->invalid)
        abort();
    if (j->chat_kwargs && (!j->messages || j->chat_kwargs[0] != '{'))
        abort();
    if (j->max_new != -1 && (j->max_new < 1 || j->max_new > FG_JOB_MAX_NEW_TOKENS))
        abort();
    if (j->n_stops < 0 || j->n_stops > FG_JOB_MAX_STOPS)
        abort();
    for (int i = 0; i < j->n_stops; i++)
        if (!j->stops[i] || !*j->stops[i])
            abort();
    /* an integer id is kept as its literal (results write it back unquoted): -?[0-9]+ */
    const char *d = j->id + (j->id[0] == '-');
    if (j->id_is_int && (!*d || d[strspn(d, "0123456789")]))
        abort();
    if (j->meta && (!*j->meta || strchr(j->meta, '\n')))
        abort(); /* meta is one JSON value's text, spliced into one result line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_job_reader *r;
    fg_err err;
    if (fg_job_reader_open_fd(input_fd(data, size), "fuzz.jsonl", &r, &err)) {
        if (strchr(err.msg, '\n') || strchr(err.msg, '\r'))
            abort(); /* an error is one line */
        return 0;
    }
    fg_job_list b = {0};
    size_t n = 0;
    int rc;
    while ((rc = fg_job_reader_next(r, NULL, 3, &b, &err)) == FG_OK && b.n) {
        for (size_t i = 0; i < b.n; i++)
            check_job(&b.jobs[i]);
        n += b.n;
    }
    if (rc && (strchr(err.msg, '\n') || strchr(err.msg, '\r')))
        abort();
    size_t total;
    fg_job_reader_count(r, NULL, &total, NULL, NULL);
    if (n > total)
        abort(); /* handed out more jobs than distinct ids */
    fg_jobs_free(&b);
    fg_job_reader_close(r);
    return 0;
}
