/* io_pread.c - the synchronous pread/pwrite engine, and the fallback where O_DIRECT is refused.
 *
 * submit performs the whole transfer at once (looping over EINTR and partial transfers until
 * the length is done or end-of-file) and queues the completion; reap hands queued completions
 * back. It needs no kernel feature beyond pread, so it runs on every file system. With
 * use_direct it opens files O_DIRECT when the file system allows and buffered otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pager_int.h"

#define MAX_FILES 256

typedef struct pread_io {
    fg_pager_io base;
    unsigned depth;
    int use_direct;
    int fds[MAX_FILES];
    fg_pager_io_done *q; /* ring of depth completions */
    unsigned head, count;
    char desc[64];
} pread_io;

static int p_open(fg_pager_io *io, const char *path, int writable, int *handle, fg_err *err)
{
    pread_io *e = (pread_io *)io;
    int slot = 0;
    while (slot < MAX_FILES && e->fds[slot] >= 0)
        slot++;
    if (slot == MAX_FILES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %d files open in the pager", path,
                          MAX_FILES);
    int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
    int fd = e->use_direct ? open(path, flags | O_DIRECT) : -1;
    if (fd < 0)
        fd = open(path, flags);
    if (fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: open", path);
    e->fds[slot] = fd;
    *handle = slot;
    return FG_OK;
}

static void p_close(fg_pager_io *io, int handle)
{
    pread_io *e = (pread_io *)io;
    if (handle >= 0 && handle < MAX_FILES && e->fds[handle] >= 0) {
        close(e->fds[handle]);
        e->fds[handle] = -1;
    }
}

/* Transfer the whole op; bytes done, or -errno when nothing could be moved. */
static int64_t transfer(int fd, const fg_pager_io_op *op)
{
    uint64_t done = 0;
    while (done < op->len) {
        char *b = (char *)op->buf + done;
        ssize_t r = op->write ? pwrite(fd, b, op->len - done, (off_t)(op->off + done))
                              : pread(fd, b, op->len - done, (off_t)(op->off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return done ? (int64_t)done : -errno;
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

static int p_submit(fg_pager_io *io, const fg_pager_io_op *op, fg_err *err)
{
    pread_io *e = (pread_io *)io;
    if (e->count == e->depth)
        return fg_err_set(err, FG_ERR_STATE, "pread engine: more than %u ops queued", e->depth);
    fg_pager_io_done *d = &e->q[(e->head + e->count) % e->depth];
    d->user = op->user;
    d->res = transfer(e->fds[op->handle], op);
    e->count++;
    return FG_OK;
}

static int p_reap(fg_pager_io *io, unsigned min, fg_pager_io_done *done, unsigned max,
                  unsigned *n, fg_err *err)
{
    pread_io *e = (pread_io *)io;
    unsigned got = 0;
    while (got < max && e->count) {
        done[got++] = e->q[e->head];
        e->head = (e->head + 1) % e->depth;
        e->count--;
    }
    *n = got;
    if (got < min)
        return fg_err_set(err, FG_ERR_STATE, "pread engine: waiting for %u ops, none in flight",
                          min);
    return FG_OK;
}

static unsigned p_depth(fg_pager_io *io) { return ((pread_io *)io)->depth; }

static const char *p_describe(fg_pager_io *io)
{
    pread_io *e = (pread_io *)io;
    snprintf(e->desc, sizeof e->desc, "pread(%s)", e->use_direct ? "O_DIRECT when allowed"
                                                                 : "buffered");
    return e->desc;
}

static void p_destroy(fg_pager_io *io)
{
    pread_io *e = (pread_io *)io;
    if (!e)
        return;
    for (int i = 0; i < MAX_FILES; i++)
        if (e->fds[i] >= 0)
            close(e->fds[i]);
    free(e->q);
    free(e);
}

static const fg_pager_io_methods pread_methods = {
    "pread", p_open, p_close, NULL, NULL, p_submit, p_reap, p_depth, p_describe, p_destroy,
};

int fg_pager_io_pread_create(unsigned queue_depth, int use_direct, fg_pager_io **out, fg_err *err)
{
    pread_io *e = calloc(1, sizeof *e);
    unsigned depth = queue_depth ? queue_depth : 32;
    fg_pager_io_done *q = calloc(depth, sizeof *q);
    if (!e || !q) {
        free(e);
        free(q);
        return fg_err_set(err, FG_ERR_NOMEM, "pread engine: out of memory");
    }
    e->base.m = &pread_methods;
    e->depth = depth;
    e->q = q;
    e->use_direct = use_direct;
    for (int i = 0; i < MAX_FILES; i++)
        e->fds[i] = -1;
    *out = &e->base;
    return FG_OK;
}
