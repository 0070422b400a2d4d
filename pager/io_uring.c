/* io_uring.c - the io_uring I/O engine: O_DIRECT, registered files, registered buffers.
 *
 * Files are opened with O_DIRECT and installed in a sparse registered-file table, so each
 * SQE names a table slot (IOSQE_FIXED_FILE) and the kernel skips the fget/fput per op.
 * register_memory makes a sparse buffer table with one slot per granule of the HOST pool, and
 * register_piece fills slot g with granules g and g + 1 once the pager has committed them (the
 * pool's memory arrives with use: registering pins pages, so registering the whole budget at
 * open would make it resident). An op lies inside the piece of the granule it starts in, and
 * uses READ_FIXED/WRITE_FIXED, which skips pinning pages per op; the index is computed, not
 * searched. When registration is refused (RLIMIT_MEMLOCK, a kernel without sparse tables) ops
 * fall back to plain READ/WRITE and describe() says so. Each submit is pushed to the kernel at once, so a
 * prefetch starts moving data before the caller returns to its compute.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pager_int.h"

#define MAX_FILES 256
#define MAX_BUFS 8192 /* FG_POOL_MAX_GRANULES; the kernel takes up to 16384 */
#define REG_PIECE (1ull << 30) /* the kernel's limit per registered buffer */

typedef struct uring_io {
    fg_pager_io base;
    struct io_uring ring;
    unsigned depth;
    int fds[MAX_FILES]; /* -1 = free slot */
    char *pool;          /* register_memory's base; NULL: no table */
    size_t pool_len, granule;
    size_t *piece_len;   /* [n_slots]: bytes of registered piece g, 0 = not registered */
    unsigned n_slots, n_bufs; /* table slots; pieces registered */
    int files_registered;
    uint64_t ops, fixed_ops; /* submitted; of them through a registered buffer */
    char desc[96];
} uring_io;

static int u_open(fg_pager_io *io, const char *path, int writable, int *handle, fg_err *err)
{
    uring_io *u = (uring_io *)io;
    int slot = 0;
    while (slot < MAX_FILES && u->fds[slot] >= 0)
        slot++;
    if (slot == MAX_FILES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: more than %d files open in the pager", path,
                          MAX_FILES);
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
    if (fd < 0 && errno == EINVAL)
        return fg_err_sys(err, FG_ERR_UNSUPPORTED, EINVAL, "%s: O_DIRECT refused", path);
    if (fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: open", path);
    if (u->files_registered) {
        int r = io_uring_register_files_update(&u->ring, (unsigned)slot, &fd, 1);
        if (r < 0) {
            close(fd);
            return fg_err_sys(err, FG_ERR_IO, -r, "%s: io_uring_register_files_update", path);
        }
    }
    u->fds[slot] = fd;
    *handle = slot;
    return FG_OK;
}

static void u_close(fg_pager_io *io, int handle)
{
    uring_io *u = (uring_io *)io;
    if (handle < 0 || handle >= MAX_FILES || u->fds[handle] < 0)
        return;
    if (u->files_registered) {
        int off = -1;
        io_uring_register_files_update(&u->ring, (unsigned)handle, &off, 1);
    }
    close(u->fds[handle]);
    u->fds[handle] = -1;
}

static int u_register_memory(fg_pager_io *io, void *base, size_t len, size_t granule,
                             fg_err *err)
{
    uring_io *u = (uring_io *)io;
    unsigned n = (unsigned)((len + granule - 1) / granule);
    if (u->pool || n == 0 || n > MAX_BUFS || 2 * granule > REG_PIECE)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "io_uring: %u pieces of %zu bytes", n,
                          granule);
    u->piece_len = calloc(n, sizeof *u->piece_len);
    if (!u->piece_len)
        return fg_err_set(err, FG_ERR_NOMEM, "io_uring engine: out of memory");
    int r = io_uring_register_buffers_sparse(&u->ring, n);
    if (r < 0) {
        free(u->piece_len);
        u->piece_len = NULL;
        return fg_err_sys(err, FG_ERR_UNSUPPORTED, -r, "io_uring_register_buffers_sparse(%u)", n);
    }
    u->pool = base;
    u->pool_len = len;
    u->granule = granule;
    u->n_slots = n;
    return FG_OK;
}

static int u_register_piece(fg_pager_io *io, unsigned g, fg_err *err)
{
    uring_io *u = (uring_io *)io;
    if (!u->pool || g >= u->n_slots)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "io_uring: no buffer slot %u", g);
    size_t off = (size_t)g * u->granule;
    size_t n = u->pool_len - off < 2 * u->granule ? u->pool_len - off : 2 * u->granule;
    struct iovec iov = {u->pool + off, n};
    int r = io_uring_register_buffers_update_tag(&u->ring, g, &iov, NULL, 1);
    if (r < 0)
        return fg_err_sys(err, FG_ERR_UNSUPPORTED, -r, "io_uring_register_buffers_update_tag"
                          "(%u, %zu bytes)", g, n);
    u->piece_len[g] = n;
    u->n_bufs++;
    return FG_OK;
}

/* Index of the registered piece holding [p, p+n) (that of the granule p lies in), or -1. */
static int fixed_index(const uring_io *u, const void *p, uint64_t n)
{
    const char *c = p;
    if (!u->n_bufs || c < u->pool || c >= u->pool + u->pool_len)
        return -1;
    size_t g = (size_t)(c - u->pool) / u->granule;
    size_t end = g * u->granule + u->piece_len[g];
    return u->piece_len[g] && (size_t)(c - u->pool) + n <= end ? (int)g : -1;
}

static int u_submit(fg_pager_io *io, const fg_pager_io_op *op, fg_err *err)
{
    uring_io *u = (uring_io *)io;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe)
        return fg_err_set(err, FG_ERR_STATE, "io_uring: submission queue full (depth %u)",
                          u->depth);
    int fd = u->files_registered ? op->handle : u->fds[op->handle];
    int bi = fixed_index(u, op->buf, op->len);
    u->ops++;
    u->fixed_ops += bi >= 0;
    unsigned n = (unsigned)op->len;
    if (bi >= 0 && op->write)
        io_uring_prep_write_fixed(sqe, fd, op->buf, n, op->off, bi);
    else if (bi >= 0)
        io_uring_prep_read_fixed(sqe, fd, op->buf, n, op->off, bi);
    else if (op->write)
        io_uring_prep_write(sqe, fd, op->buf, n, op->off);
    else
        io_uring_prep_read(sqe, fd, op->buf, n, op->off);
    if (u->files_registered)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, op->user);
    int r = io_uring_submit(&u->ring);
    if (r < 0)
        return fg_err_sys(err, FG_ERR_IO, -r, "io_uring_submit");
    return FG_OK;
}

static int u_reap(fg_pager_io *io, unsigned min, fg_pager_io_done *done, unsigned max,
                  unsigned *n, fg_err *err)
{
    uring_io *u = (uring_io *)io;
    struct io_uring_cqe *cqe;
    unsigned got = 0;
    while (got < max) {
        int r = got < min ? io_uring_wait_cqe(&u->ring, &cqe) : io_uring_peek_cqe(&u->ring, &cqe);
        if (r == -EAGAIN || r == -EINTR) {
            if (got >= min)
                break;
            continue;
        }
        if (r < 0) {
            *n = got;
            return fg_err_sys(err, FG_ERR_IO, -r, "io_uring_wait_cqe");
        }
        done[got].user = io_uring_cqe_get_data64(cqe);
        done[got].res = cqe->res;
        got++;
        io_uring_cqe_seen(&u->ring, cqe);
    }
    *n = got;
    return FG_OK;
}

static unsigned u_depth(fg_pager_io *io) { return ((uring_io *)io)->depth; }

static const char *u_describe(fg_pager_io *io)
{
    uring_io *u = (uring_io *)io;
    snprintf(u->desc, sizeof u->desc, "io_uring(qd=%u%s, %llu of %llu ops fixed%s)", u->depth,
             u->n_bufs ? ", registered buffers" : "", (unsigned long long)u->fixed_ops,
             (unsigned long long)u->ops, u->files_registered ? ", registered files" : "");
    return u->desc;
}

static void u_destroy(fg_pager_io *io)
{
    uring_io *u = (uring_io *)io;
    if (!u)
        return;
    for (int i = 0; i < MAX_FILES; i++)
        if (u->fds[i] >= 0)
            close(u->fds[i]);
    io_uring_queue_exit(&u->ring);
    free(u->piece_len);
    free(u);
}

static const fg_pager_io_methods uring_methods = {
    "io_uring", u_open, u_close, u_register_memory, u_register_piece, u_submit, u_reap, u_depth, u_describe,
    u_destroy,
};

int fg_pager_io_uring_create(unsigned queue_depth, fg_pager_io **out, fg_err *err)
{
    uring_io *u = calloc(1, sizeof *u);
    if (!u)
        return fg_err_set(err, FG_ERR_NOMEM, "io_uring engine: out of memory");
    u->base.m = &uring_methods;
    u->depth = queue_depth ? queue_depth : 32;
    for (int i = 0; i < MAX_FILES; i++)
        u->fds[i] = -1;
    /* COOP_TASKRUN: completions are not pushed by interrupting the task (as fio does); falls
     * back to plain setup on kernels without it. */
    unsigned flags = getenv("FG_URING_PLAIN") ? 0 : IORING_SETUP_COOP_TASKRUN;
    int r = io_uring_queue_init(u->depth, &u->ring, flags);
    if (r == -EINVAL && flags)
        r = io_uring_queue_init(u->depth, &u->ring, 0);
    if (r < 0) {
        free(u);
        return fg_err_sys(err, FG_ERR_UNSUPPORTED, -r, "io_uring_queue_init(%u)", queue_depth);
    }
    u->files_registered = io_uring_register_files_sparse(&u->ring, MAX_FILES) == 0;
    *out = &u->base;
    return FG_OK;
}
