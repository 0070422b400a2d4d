/* jobs_out.c - result lines and the locked, resumable results file (jobs.h).
 *
 * The lines themselves are jobs_result.c's.
 * Invariants of the results file (for a regular file):
 *  1. While a job runs, its process holds an exclusive flock on the inode at PATH; a rewrite
 *     locks the new inode before renaming it over PATH, and an opener re-checks after locking
 *     that PATH still names the inode it locked.
 *  2. No byte of a results file is dropped: a damaged or torn line is copied to PATH.damaged and
 *     fsynced before the file is cut or replaced; a file with no result line is never written.
 *  3. Each append is one block of whole lines; on a failed write the file is cut back to its size
 *     before the block (best effort; a resume moves any torn remainder aside).
 */
#define _GNU_SOURCE
#include "jobs_int.h"
#include "fg_json.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- writing ----------------------------------------------------------------------------- */

/* Write all of buf; *done = bytes written. 0 or an errno (EIO for a write that returns 0). */
static int write_all(int fd, const char *buf, size_t len, size_t *done)
{
    *done = 0;
    while (*done < len) {
        ssize_t w = write(fd, buf + *done, len - *done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        *done += (size_t)w;
    }
    return 0;
}

static int sys_code(int e)
{
    return e == ENOSPC || e == EDQUOT ? FG_ERR_NO_SPACE : FG_ERR_IO;
}

/* Durable on a regular file; a pipe or device that cannot sync (EINVAL, EROFS) is not an error. */
static int sync_data(int fd)
{
    if (fdatasync(fd) == 0 || errno == EINVAL || errno == EROFS)
        return 0;
    return errno;
}

/* Write a block of result lines to fd; on a regular file a failed write is cut back. */
static int append_buf(int fd, int regular, const char *name, const char *buf, size_t len,
                      fg_err *err)
{
    off_t at = regular ? lseek(fd, 0, SEEK_END) : 0;
    size_t done;
    int e = write_all(fd, buf, len, &done);
    if (e) {
        int cut = regular && at >= 0 && done > 0 && ftruncate(fd, at) == 0;
        return fg_err_sys(err, sys_code(e), e, "%s: writing results (%zu of %zu bytes written%s)",
                          name, done, len, cut ? ", cut back" : "");
    }
    if ((e = regular ? sync_data(fd) : 0))
        return fg_err_sys(err, sys_code(e), e, "%s: fdatasync", name);
    return FG_OK;
}

/* ---- the results file -------------------------------------------------------------------- */

struct fg_job_output {
    fgj_emit emit; /* how OpenAI lines name the model and spell tokens */
    int fd;
    int regular;   /* a regular file: locked, synced, resumable */
    char *path;    /* as given; "stdout" for "-" */
    idset done;
    fg_err fail;   /* sticky error */
};

static void output_free(fg_job_output *o)
{
    if (!o)
        return;
    if (o->fd >= 0)
        close(o->fd);
    fgj_idset_free(&o->done);
    free(o->emit.model);
    free(o->path);
    free(o);
}

static int fsync_dir(const char *path)
{
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int e = fsync(fd) && errno != EINVAL ? errno : 0;
    close(fd);
    return e;
}

/* Copy bytes [off, off + len) of src to the current position of dst. 0 or an errno. */
static int copy_range(int src, uint64_t off, uint64_t len, int dst)
{
    char buf[1 << 16];
    while (len) {
        ssize_t n = pread(src, buf, len < sizeof buf ? len : sizeof buf, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        size_t w;
        int e = write_all(dst, buf, (size_t)n, &w);
        if (e)
            return e;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

#define FG_JOB_MAX_RESULT_LINE ((size_t)256 << 20) /* a longer line is not a result */

/* What the resume scan found. */
typedef struct scan {
    size_t n_results, n_damaged, first_damaged, n_lines;
    uint64_t end_complete; /* offset just past the last '\n' */
    int tail;              /* 0: none, 1: a valid result without its '\n', 2: torn */
    int tail_fg;           /* the torn tail starts like one of our lines */
} scan;

/* Classify the current line of lr; add a result's id to done (when done is non-NULL). */
static int line_is_result(const lread *lr, idset *done)
{
    if (lr->len >= lr->max)
        return 0;
    char *id = fgj_result_id(lr->line, lr->len);
    int added;
    int ok = id != NULL;
    if (id && done && !fgj_idset_add(done, id, &added))
        ok = -1;
    free(id);
    return ok;
}

static int scan_file(fg_job_output *o, scan *s, fg_err *err)
{
    memset(s, 0, sizeof *s);
    lread *lr = malloc(sizeof *lr);
    if (!lr)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", o->path);
    fgj_lread_init(lr, o->fd, FG_JOB_MAX_RESULT_LINE);
    lr->base = 0; /* the whole results file */
    int n, rc = FG_OK;
    while (rc == FG_OK && (n = fgj_lread_next(lr)) == 1) {
        int ok = line_is_result(lr, &o->done);
        s->n_lines++;
        if (ok < 0)
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for ids", o->path);
        else if (lr->nl) {
            s->end_complete = lr->off;
            s->n_results += ok;
            if (!ok && !s->n_damaged++)
                s->first_damaged = lr->lineno;
        } else {
            s->tail = ok ? 1 : 2;
            s->n_results += ok;
            s->tail_fg = !ok && !strncmp(lr->line, "{\"id\":", 6);
        }
    }
    if (rc == FG_OK && n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", o->path);
    free(lr->line);
    free(lr);
    return rc;
}

/* Append bytes [off, off + len) of the output, and a newline, to PATH.damaged (fsynced). */
static int aside_open(fg_job_output *o, fg_job_output_info *info, int *fd, fg_err *err)
{
    snprintf(info->aside_path, sizeof info->aside_path, "%s.damaged", o->path);
    *fd = open(info->aside_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open to keep damaged lines",
                          info->aside_path);
    return FG_OK;
}

static int aside_put(int fd, int src, uint64_t off, uint64_t len, const char *aside, fg_err *err)
{
    size_t w;
    int e = copy_range(src, off, len, fd);
    if (!e)
        e = write_all(fd, "\n", 1, &w);
    if (e)
        return fg_err_sys(err, sys_code(e), e, "%s: keeping a damaged line", aside);
    return FG_OK;
}

static int aside_close(int fd, const char *aside, fg_err *err)
{
    int e = fsync(fd) ? errno : 0;
    if (close(fd) && !e)
        e = errno;
    if (!e)
        e = fsync_dir(aside);
    if (e)
        return fg_err_sys(err, sys_code(e), e, "%s: fsync", aside);
    return FG_OK;
}

/* A torn last line (and nothing else wrong): keep its bytes aside, then cut the file. */
static int cut_torn_tail(fg_job_output *o, const scan *s, uint64_t size,
                         fg_job_output_info *info, fg_err *err)
{
    int afd;
    int rc = aside_open(o, info, &afd, err);
    if (rc)
        return rc;
    rc = aside_put(afd, o->fd, s->end_complete, size - s->end_complete, info->aside_path, err);
    int rc2 = aside_close(afd, info->aside_path, rc ? NULL : err);
    if (rc || rc2)
        return rc ? rc : rc2;
    if (ftruncate(o->fd, (off_t)s->end_complete) || sync_data(o->fd))
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cutting the torn last line", o->path);
    info->torn_tail = 1;
    return FG_OK;
}

/* Copy each line of the output to tmp (results) or afd (the rest); the file is locked. */
static int split_lines(fg_job_output *o, int tmp, const char *tmpname, int afd,
                       const char *aside, fg_err *err)
{
    lread *lr = malloc(sizeof *lr);
    if (!lr)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", o->path);
    fgj_lread_init(lr, o->fd, FG_JOB_MAX_RESULT_LINE);
    lr->base = 0; /* the whole results file */
    int n = fgj_lread_rewind(lr), rc = FG_OK;
    if (n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: seek", o->path);
    while (rc == FG_OK && (n = fgj_lread_next(lr)) == 1) {
        if (line_is_result(lr, NULL)) {
            int e = copy_range(o->fd, lr->start, lr->len, tmp);
            size_t w;
            if (!e)
                e = write_all(tmp, "\n", 1, &w);
            if (e)
                rc = fg_err_sys(err, sys_code(e), e, "%s: writing", tmpname);
        } else {
            rc = aside_put(afd, o->fd, lr->start, lr->len, aside, err);
        }
    }
    if (rc == FG_OK && n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", o->path);
    free(lr->line);
    free(lr);
    return rc;
}

/* Damaged lines inside the file: move them aside and replace the file atomically by one
 * holding only the results; the new inode is locked before it is renamed over the path. */
static int rewrite(fg_job_output *o, const struct stat *st, fg_job_output_info *info,
                   fg_err *err)
{
    char tmpname[4200];
    snprintf(tmpname, sizeof tmpname, "%s.XXXXXX", o->path);
    int tmp = mkostemp(tmpname, O_CLOEXEC), afd = -1;
    if (tmp < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot create a temporary file", tmpname);
    int rc = FG_OK;
    if (fchmod(tmp, st->st_mode & 07777) || flock(tmp, LOCK_EX | LOCK_NB))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: preparing", tmpname);
    if (rc == FG_OK)
        rc = aside_open(o, info, &afd, err);
    if (rc == FG_OK)
        rc = split_lines(o, tmp, tmpname, afd, info->aside_path, err);
    if (afd >= 0) {
        int rc2 = aside_close(afd, info->aside_path, rc ? NULL : err);
        rc = rc ? rc : rc2;
    }
    if (rc == FG_OK && fsync(tmp))
        rc = fg_err_sys(err, sys_code(errno), errno, "%s: fsync", tmpname);
    if (rc == FG_OK && rename(tmpname, o->path))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: renaming %s over it", o->path, tmpname);
    if (rc) {
        unlink(tmpname);
        close(tmp);
        return rc;
    }
    int e = fsync_dir(o->path);
    close(o->fd); /* releases the old inode's lock; the new one is held */
    o->fd = tmp;
    if (e)
        return fg_err_sys(err, FG_ERR_IO, e, "%s: fsync of its directory", o->path);
    info->rewritten = 1;
    return FG_OK;
}

static int resume(fg_job_output *o, const struct stat *st, fg_job_output_info *info,
                  fg_err *err)
{
    scan s;
    int rc = scan_file(o, &s, err);
    if (rc)
        return rc;
    if (s.n_results == 0 && !(s.n_lines == 1 && s.tail == 2 && s.tail_fg))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: not an fg results file (none of its %zu "
                          "lines is a result line); it was not touched", o->path, s.n_lines);
    info->n_results = s.n_results;
    info->n_damaged = s.n_damaged;
    info->first_damaged = s.first_damaged;
    if (s.n_damaged) /* the rewrite also completes or moves aside the last line */
        rc = rewrite(o, st, info, err);
    else if (s.tail == 2)
        rc = cut_torn_tail(o, &s, (uint64_t)st->st_size, info, err);
    info->torn_tail = s.tail == 2;
    if (rc == FG_OK && s.tail == 1 && !s.n_damaged) { /* a whole result missing only its newline */
        size_t w;
        int e = lseek(o->fd, 0, SEEK_END) < 0 ? errno : write_all(o->fd, "\n", 1, &w);
        if (!e)
            e = sync_data(o->fd);
        if (e)
            rc = fg_err_sys(err, sys_code(e), e, "%s: completing the last line", o->path);
    }
    return rc;
}

/* Open PATH and lock it, making sure the lock is on the inode PATH names. */
static int open_locked(fg_job_output *o, struct stat *st, fg_err *err)
{
    for (int tries = 0; tries < 16; tries++) {
        o->fd = open(o->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (o->fd < 0)
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for writing", o->path);
        if (flock(o->fd, LOCK_EX | LOCK_NB)) {
            int e = errno;
            if (e == EWOULDBLOCK)
                return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: another fg-infer job is writing "
                                  "to it", o->path);
            return fg_err_sys(err, FG_ERR_IO, e, "%s: cannot lock", o->path);
        }
        struct stat now;
        if (fstat(o->fd, st) || stat(o->path, &now))
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", o->path);
        if (now.st_dev == st->st_dev && now.st_ino == st->st_ino)
            return FG_OK;
        close(o->fd); /* replaced under us by the job that held it: look again */
        o->fd = -1;
    }
    return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: keeps being replaced by another job", o->path);
}

static int open_stream(fg_job_output *o, unsigned flags, fg_err *err)
{
    if (flags & FG_JOB_RESUME)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: --resume needs a regular file to read "
                          "back (this is a pipe, terminal or device)", o->path);
    o->fd = !strcmp(o->path, "stdout") ? fcntl(1, F_DUPFD_CLOEXEC, 3)
                                       : open(o->path, O_WRONLY | O_CLOEXEC);
    if (o->fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for writing", o->path);
    return FG_OK;
}

static int open_regular(fg_job_output *o, unsigned flags, fg_job_output_info *info, fg_err *err)
{
    struct stat st;
    char *real;
    if (lstat(o->path, &st) == 0 && S_ISLNK(st.st_mode) && (real = realpath(o->path, NULL))) {
        free(o->path); /* lock, rewrite and rename the file the link names, not the link */
        o->path = real;
    }
    int rc = open_locked(o, &st, err);
    if (rc)
        return rc;
    if (st.st_size > 0 && !(flags & FG_JOB_RESUME))
        return fg_err_set(err, FG_ERR_EXISTS, "%s: already holds results; pass --resume to "
                          "continue that job, or choose another --output", o->path);
    if (st.st_size > 0)
        rc = resume(o, &st, info, err);
    if (rc == FG_OK && lseek(o->fd, 0, SEEK_END) < 0)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: seek", o->path);
    return rc;
}

int fg_job_output_open(const char *path, unsigned flags, fg_job_output **out,
                       fg_job_output_info *info, fg_err *err)
{
    *out = NULL;
    fg_job_output_info scratch;
    info = info ? info : &scratch;
    memset(info, 0, sizeof *info);
    fg_job_output *o = calloc(1, sizeof *o);
    int is_stdout = !strcmp(path, "-");
    if (!o || !(o->path = strdup(is_stdout ? "stdout" : path))) {
        free(o);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    }
    o->fd = -1;
    struct stat st;
    int stream = is_stdout || (stat(path, &st) == 0 && !S_ISREG(st.st_mode));
    int rc = stream ? open_stream(o, flags, err) : open_regular(o, flags, info, err);
    if (rc == FG_OK && stream && fstat(o->fd, &st) == 0)
        o->regular = S_ISREG(st.st_mode); /* stdout redirected to a file: sync it */
    else
        o->regular = !stream;
    if (rc) {
        output_free(o);
        return rc;
    }
    *out = o;
    return FG_OK;
}

int fg_job_output_has(const fg_job_output *o, const char *id)
{
    return fgj_idset_get(&o->done, id) != NULL;
}

size_t fg_job_output_count(const fg_job_output *o)
{
    return o->done.n;
}

int fg_job_output_set_openai(fg_job_output *o, const char *model,
                             int (*piece)(void *ctx, int32_t id, const char **bytes,
                                          size_t *len),
                             void *ctx, fg_err *err)
{
    char *m = model ? strdup(model) : NULL;
    if (model && !m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", o->path);
    free(o->emit.model);
    o->emit = (fgj_emit){m, piece, ctx};
    return FG_OK;
}

int fg_job_output_append(fg_job_output *o, const fg_job_result *r, size_t n, fg_err *err)
{
    if (o->fail.code) {
        if (err)
            *err = o->fail;
        return o->fail.code;
    }
    char *buf;
    size_t len;
    fg_err e;
    int rc = fgj_encode_results(&o->emit, o->path, r, n, &buf, &len, &e);
    if (rc == FG_OK)
        rc = append_buf(o->fd, o->regular, o->path, buf, len, &e);
    free(buf);
    for (size_t i = 0; rc == FG_OK && i < n; i++) {
        int added;
        if (!fgj_idset_add(&o->done, r[i].job->id, &added))
            rc = fg_err_set(&e, FG_ERR_NOMEM, "%s: out of memory for ids", o->path);
    }
    if (rc) {
        o->fail = e;
        if (err)
            *err = e;
    }
    return rc;
}

int fg_job_output_close(fg_job_output *o, fg_err *err)
{
    if (!o)
        return FG_OK;
    int rc = o->fail.code;
    if (rc && err)
        *err = o->fail;
    if (close(o->fd) && rc == FG_OK)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: close", o->path);
    o->fd = -1;
    output_free(o);
    return rc;
}

int fg_jobs_open_output(const char *path, int resume_, fg_job_list *jobs, int *fd, size_t *n_done,
                        fg_err *err)
{
    *n_done = 0;
    fg_job_output *o;
    int rc = fg_job_output_open(path, resume_ ? FG_JOB_RESUME : 0, &o, NULL, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < jobs->n; i++)
        if ((jobs->jobs[i].done = fg_job_output_has(o, jobs->jobs[i].id)))
            (*n_done)++;
    *fd = o->fd; /* the descriptor, and with it the lock, pass to the caller */
    o->fd = -1;
    output_free(o);
    return FG_OK;
}

int fg_jobs_append(int fd, const char *path, const fg_job_result *r, size_t n, fg_err *err)
{
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    char *buf;
    size_t len;
    fgj_emit none = {0};
    int rc = fgj_encode_results(&none, path, r, n, &buf, &len, err);
    if (rc == FG_OK)
        rc = append_buf(fd, regular, path, buf, len, err);
    free(buf);
    return rc;
}
