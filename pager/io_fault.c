/* io_fault.c - a fault-injecting engine wrapping another (SQLite test6.c style).
 *
 * It forwards every call to the inner engine, counting ops, and on the nth matching op injects
 * the configured fault: a completion with -EIO or -ENOSPC that never reaches the disk, a short
 * read (the inner engine reads half; with SHORT_EOF every later read of the rest returns 0, as
 * if the file had been truncated), a failing submit, an O_DIRECT refusal at open, or silent
 * corruption: a write that reaches the file with its first byte flipped (the byte is flipped in
 * the caller's buffer for the write and flipped back when its completion is reaped), or a read
 * whose first byte is flipped when its completion is reaped. Injected completions queue here
 * and are reaped before the inner engine's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pager_int.h"

typedef struct fault_io {
    fg_pager_io base;
    fg_pager_io *inner;
    fg_pager_fault f;
    uint64_t reads, writes, ops;
    fg_pager_io_done *q; /* injected completions */
    unsigned head, count, depth;
    int eof_handle;      /* SHORT_EOF: reads of [eof_lo, eof_hi) on eof_handle return 0 */
    uint64_t eof_lo, eof_hi;
    uint8_t *flip_buf;   /* CORRUPT_*: first byte of the op's buffer, flipped at reap */
    uint64_t flip_user;
    char desc[128];
} fault_io;

static int f_open(fg_pager_io *io, const char *path, int writable, int *handle, fg_err *err)
{
    fault_io *f = (fault_io *)io;
    if (f->f.kind == FG_FAULT_NO_DIRECT)
        return fg_err_sys(err, FG_ERR_UNSUPPORTED, EINVAL, "%s: O_DIRECT refused (injected)",
                          path);
    return f->inner->m->open(f->inner, path, writable, handle, err);
}

static void f_close(fg_pager_io *io, int handle)
{
    fault_io *f = (fault_io *)io;
    f->inner->m->close(f->inner, handle);
}

static int f_register(fg_pager_io *io, void *base, size_t len, size_t granule, fg_err *err)
{
    fault_io *f = (fault_io *)io;
    if (!f->inner->m->register_memory)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "no buffer registration");
    return f->inner->m->register_memory(f->inner, base, len, granule, err);
}

static int f_register_piece(fg_pager_io *io, unsigned g, fg_err *err)
{
    fault_io *f = (fault_io *)io;
    return f->inner->m->register_piece(f->inner, g, err);
}

static void inject(fault_io *f, uint64_t user, int64_t res)
{
    f->q[(f->head + f->count) % f->depth] = (fg_pager_io_done){user, res};
    f->count++;
}

static int hit(const fault_io *f, fg_pager_fault_kind k, uint64_t n)
{
    return f->f.kind == k && n == f->f.nth;
}

static int f_submit(fg_pager_io *io, const fg_pager_io_op *op, fg_err *err)
{
    fault_io *f = (fault_io *)io;
    uint64_t nrw = op->write ? ++f->writes : ++f->reads;
    f->ops++;
    if (hit(f, FG_FAULT_SUBMIT, f->ops))
        return fg_err_sys(err, FG_ERR_IO, EAGAIN, "submit refused (injected)");
    if (hit(f, FG_FAULT_EIO, f->ops) || (op->write && hit(f, FG_FAULT_ENOSPC, nrw))) {
        inject(f, op->user, f->f.kind == FG_FAULT_EIO ? -EIO : -ENOSPC);
        return FG_OK;
    }
    if (!op->write && f->eof_handle == op->handle && op->off >= f->eof_lo && op->off < f->eof_hi) {
        inject(f, op->user, 0);
        return FG_OK;
    }
    if ((op->write && hit(f, FG_FAULT_CORRUPT_WRITE, nrw)) ||
        (!op->write && hit(f, FG_FAULT_CORRUPT_READ, nrw))) {
        f->flip_buf = op->buf;
        f->flip_user = op->user;
        if (op->write)
            f->flip_buf[0] ^= 0xff; /* what reaches the file; restored at reap */
    }
    if (!op->write && (hit(f, FG_FAULT_SHORT_EOF, nrw) || hit(f, FG_FAULT_SHORT_ONCE, nrw))) {
        fg_pager_io_op half = *op;
        half.len = (op->len / 2) & ~(uint64_t)4095;
        if (f->f.kind == FG_FAULT_SHORT_EOF) {
            f->eof_handle = op->handle;
            f->eof_lo = op->off + half.len;
            f->eof_hi = op->off + op->len;
        }
        if (half.len == 0) {
            inject(f, op->user, 0);
            return FG_OK;
        }
        return f->inner->m->submit(f->inner, &half, err);
    }
    return f->inner->m->submit(f->inner, op, err);
}

static int f_reap(fg_pager_io *io, unsigned min, fg_pager_io_done *done, unsigned max,
                  unsigned *n, fg_err *err)
{
    fault_io *f = (fault_io *)io;
    unsigned got = 0;
    while (got < max && f->count) {
        done[got++] = f->q[f->head];
        f->head = (f->head + 1) % f->depth;
        f->count--;
    }
    unsigned more = 0;
    int rc = FG_OK;
    if (got < max)
        rc = f->inner->m->reap(f->inner, min > got ? min - got : 0, done + got, max - got, &more,
                               err);
    *n = got + more;
    for (unsigned i = 0; f->flip_buf && i < *n; i++) {
        if (done[i].user == f->flip_user) {
            f->flip_buf[0] ^= 0xff; /* a write's buffer restored, a read's corrupted */
            f->flip_buf = NULL;
        }
    }
    return rc;
}

static unsigned f_depth(fg_pager_io *io)
{
    fault_io *f = (fault_io *)io;
    return f->inner->m->depth(f->inner);
}

static const char *f_describe(fg_pager_io *io)
{
    fault_io *f = (fault_io *)io;
    const char *in = f->inner->m->describe ? f->inner->m->describe(f->inner) : f->inner->m->name;
    strncpy(f->desc, "fault+", sizeof f->desc - 1);
    strncat(f->desc, in, sizeof f->desc - strlen(f->desc) - 1);
    return f->desc;
}

static void f_destroy(fg_pager_io *io)
{
    fault_io *f = (fault_io *)io;
    if (!f)
        return;
    f->inner->m->destroy(f->inner);
    free(f->q);
    free(f);
}

static const fg_pager_io_methods fault_methods = {
    "fault", f_open, f_close, f_register, f_register_piece, f_submit, f_reap, f_depth, f_describe, f_destroy,
};

int fg_pager_io_fault_create(fg_pager_io *inner, const fg_pager_fault *fc, fg_pager_io **out,
                             fg_err *err)
{
    fault_io *f = calloc(1, sizeof *f);
    unsigned depth = inner ? inner->m->depth(inner) : 0;
    fg_pager_io_done *q = depth ? calloc(depth, sizeof *q) : NULL;
    if (!inner || !f || !q || !fc) {
        free(f);
        free(q);
        if (inner)
            inner->m->destroy(inner);
        return fg_err_set(err, inner && fc ? FG_ERR_NOMEM : FG_ERR_INVALID_ARG,
                          "fault engine: cannot create");
    }
    f->base.m = &fault_methods;
    f->inner = inner;
    f->f = *fc;
    f->q = q;
    f->depth = depth;
    f->eof_handle = -1;
    *out = &f->base;
    return FG_OK;
}
