/* jobs_read.c - the streamed job reader (jobs.h) and the legacy whole-file loader.
 *
 * A seekable input is validated in a first pass that keeps only the ids, so a bad line 90,000
 * lines down is reported before hours of generation; the second pass re-parses each line and
 * checks it against the first (a file that changed in between is refused, not trusted). A pipe
 * is validated as it is read. Memory is the current block plus one id-set entry per id.
 */
#define _GNU_SOURCE
#include "jobs_int.h"
#include "fg_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the streamed reader ----------------------------------------------------------------- */

struct fg_job_reader {
    lread lr;
    char *name;
    idset ids;
    size_t total;  /* jobs counted: all of them when validated, else so far */
    int validated; /* the whole input was checked by a first pass */
    int complete;  /* the whole input has been read at least once */
    fg_err fail;   /* sticky error */
};

/* The next non-blank line of r's input: 1, 0 at the end, or an error code (set in err). */
static int next_line(fg_job_reader *r, fg_err *err)
{
    for (;;) {
        int n = fgj_lread_next(&r->lr);
        if (n < 0)
            return fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", r->name);
        if (n == 0)
            return 0;
        if (r->lr.lineno == 1 && !strncmp(r->lr.line, "\xEF\xBB\xBF", 3)) {
            memmove(r->lr.line, r->lr.line + 3, strlen(r->lr.line + 3) + 1);
            r->lr.len -= 3;
        }
        if (r->lr.len > FG_JOB_MAX_LINE)
            return fg_err_set(err, FG_ERR_LIMIT, "%s:%zu: line longer than %u bytes", r->name,
                              r->lr.lineno, FG_JOB_MAX_LINE);
        if (!fgj_blank(r->lr.line))
            return 1;
    }
}

/* Record job j's id: a duplicate, or (second pass) an id the first pass did not see there, is
 * an error. */
static int note_id(fg_job_reader *r, const fg_job *j, fg_err *err)
{
    char c[48];
    int added;
    id_entry *e = fgj_idset_add(&r->ids, j->id, &added);
    if (!e)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for ids", r->name);
    if (added)
        e->line = j->line;
    if (r->validated && (added || e->line != j->line)) /* (emitted: the top bit is set) */
        return fg_err_set(err, FG_ERR_CORRUPT, "%s:%zu: prompt \"%s\": the file changed while "
                          "the job was reading it", r->name, j->line, fgj_clip(j->id, c));
    if (!added && !r->validated)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s:%zu: prompt \"%s\": id already used on "
                          "line %zu", r->name, j->line, fgj_clip(j->id, c), e->line);
    if (r->validated)
        e->line |= ID_EMITTED;
    if (added)
        r->total++;
    return FG_OK;
}

static int validate_all(fg_job_reader *r, fg_err *err)
{
    int n;
    while ((n = next_line(r, err)) == 1) {
        fg_job j;
        int rc = fgj_parse_job(r->lr.line, r->lr.len, r->name, r->lr.lineno, &j, err);
        if (rc == FG_OK)
            rc = note_id(r, &j, err);
        fgj_job_free(&j);
        if (rc)
            return rc;
    }
    if (n < 0)
        return n;
    int e = fgj_lread_rewind(&r->lr);
    if (e)
        return fg_err_sys(err, FG_ERR_IO, -e, "%s: rewinding", r->name);
    r->validated = r->complete = 1;
    return FG_OK;
}

int fg_job_reader_open_fd(int fd, const char *name, fg_job_reader **out, fg_err *err)
{
    *out = NULL;
    fg_job_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        close(fd);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    fgj_lread_init(&r->lr, fd, FG_JOB_MAX_LINE + 4);
    struct stat st;
    int rc = FG_OK;
    if (fstat(fd, &st))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", name);
    else if (S_ISDIR(st.st_mode))
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s: is a directory", name);
    else if (S_ISREG(st.st_mode))
        rc = validate_all(r, err);
    if (rc == FG_OK && r->validated && r->total == 0)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s: no prompts", name);
    if (rc) {
        fg_job_reader_close(r);
        return rc;
    }
    *out = r;
    return FG_OK;
}

int fg_job_reader_open(const char *path, fg_job_reader **out, fg_err *err)
{
    *out = NULL;
    int stdin_ = !strcmp(path, "-");
    int fd = stdin_ ? fcntl(0, F_DUPFD_CLOEXEC, 3) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, errno,
                          "%s: cannot open", stdin_ ? "stdin" : path);
    return fg_job_reader_open_fd(fd, stdin_ ? "stdin" : path, out, err);
}

static int block_push(fg_job_list *b, size_t max, fg_job *j)
{
    if (!b->jobs && !(b->jobs = calloc(max < 4096 ? max : 4096, sizeof *b->jobs)))
        return -1;
    if (b->n >= 4096 && (b->n & (b->n - 1)) == 0) {
        fg_job *p = realloc(b->jobs, (b->n * 2 < max ? b->n * 2 : max) * sizeof *p);
        if (!p)
            return -1;
        b->jobs = p;
    }
    b->jobs[b->n++] = *j;
    return 0;
}

static int read_block(fg_job_reader *r, const fg_job_output *done, size_t max, fg_job_list *b,
                      fg_err *err)
{
    int n = 0;
    while (b->n < max && (n = next_line(r, err)) == 1) {
        fg_job j;
        int rc = fgj_parse_job(r->lr.line, r->lr.len, r->name, r->lr.lineno, &j, err);
        if (rc == FG_OK)
            rc = note_id(r, &j, err);
        if (rc == FG_OK && done && fg_job_output_has(done, j.id)) {
            fgj_job_free(&j);
            continue;
        }
        if (rc == FG_OK && block_push(b, max, &j))
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", r->name);
        if (rc) {
            fgj_job_free(&j);
            return rc;
        }
    }
    if (b->n < max && n < 0)
        return n;
    if (b->n < max) {
        r->complete = 1;
        if (r->total == 0)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: no prompts", r->name);
    }
    return FG_OK;
}

int fg_job_reader_next(fg_job_reader *r, const fg_job_output *done, size_t max,
                       fg_job_list *block, fg_err *err)
{
    fg_jobs_free(block);
    if (r->fail.code) {
        if (err)
            *err = r->fail;
        return r->fail.code;
    }
    if (max == 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: a block of 0 jobs", r->name);
    fg_err e;
    int rc = read_block(r, done, max, block, &e);
    if (rc) {
        fg_jobs_free(block);
        r->fail = e;
        if (err)
            *err = e;
    }
    return rc;
}

void fg_job_reader_count(const fg_job_reader *r, const fg_job_output *done, size_t *total,
                         size_t *n_done, int *complete)
{
    size_t d = 0;
    for (size_t i = 0; done && n_done && i < r->ids.cap; i++)
        d += r->ids.slot[i].key && fg_job_output_has(done, r->ids.slot[i].key);
    if (total)
        *total = r->total;
    if (n_done)
        *n_done = d;
    if (complete)
        *complete = r->complete;
}

void fg_job_reader_close(fg_job_reader *r)
{
    if (!r)
        return;
    if (r->lr.fd >= 0)
        close(r->lr.fd);
    free(r->lr.line);
    fgj_idset_free(&r->ids);
    free(r->name);
    free(r);
}

/* ---- legacy API -------------------------------------------------------------------------- */

int fg_jobs_load(const char *path, fg_job_list *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    fg_job_reader *r;
    int rc = fg_job_reader_open(path, &r, err);
    if (rc)
        return rc;
    fg_job_list b = {0};
    while ((rc = fg_job_reader_next(r, NULL, 4096, &b, err)) == FG_OK && b.n) {
        fg_job *p = realloc(out->jobs, (out->n + b.n) * sizeof *p);
        if (!p) {
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        out->jobs = p;
        memcpy(out->jobs + out->n, b.jobs, b.n * sizeof *p);
        out->n += b.n;
        free(b.jobs); /* the jobs' strings moved to out */
        b.jobs = NULL;
        b.n = 0;
    }
    fg_jobs_free(&b);
    fg_job_reader_close(r);
    if (rc)
        fg_jobs_free(out);
    return rc;
}
