/* io.c - the store's own file I/O, through a replaceable function table.
 *
 * Every write the store makes to its own files (KV pages and KV file headers, header wipes,
 * store.id) goes through fg_store_io, so tests can inject EIO, ENOSPC and short writes the way
 * SQLite's test VFS does. The loops here turn short counts into retries and report the first
 * failure as -errno; callers map it to an fg_status with io_fail. Weight files are written by
 * format/'s .fgt writer, which does its own POSIX I/O.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_int.h"

static ssize_t posix_pwrite(void *ctx, int fd, const void *buf, size_t n, off_t off)
{
    (void)ctx;
    return pwrite(fd, buf, n, off);
}

static ssize_t posix_pread(void *ctx, int fd, void *buf, size_t n, off_t off)
{
    (void)ctx;
    return pread(fd, buf, n, off);
}

static int posix_fdatasync(void *ctx, int fd)
{
    (void)ctx;
    return fdatasync(fd);
}

static int posix_ftruncate(void *ctx, int fd, off_t len)
{
    (void)ctx;
    return ftruncate(fd, len);
}

const fg_store_io store_posix_io = {posix_pwrite, posix_pread, posix_fdatasync, posix_ftruncate,
                                    NULL};

int io_write_all(const fg_store *s, int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = s->io.pwrite(s->io.ctx, fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno ? -errno : -EIO;
        }
        if (w == 0)
            return -EIO;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int io_read_all(const fg_store *s, int fd, void *p, size_t n, uint64_t off, size_t *got)
{
    uint8_t *b = p;
    if (got)
        *got = 0;
    while (n) {
        ssize_t r = s->io.pread(s->io.ctx, fd, b, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno ? -errno : -EIO;
        }
        if (r == 0)
            return -ENODATA; /* past the end of the file */
        b += r;
        n -= (size_t)r;
        off += (uint64_t)r;
        if (got)
            *got += (size_t)r;
    }
    return 0;
}

int io_read_fail(fg_err *err, int neg_errno, const char *path, const char *what, size_t got,
                 size_t want)
{
    if (neg_errno == -ENODATA)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %s: short read: got %zu of %zu bytes (the "
                          "file ends early)", path, what, got, want);
    return io_fail(err, neg_errno, path, what);
}

int io_sync(const fg_store *s, int fd)
{
    if (s->io.fdatasync(s->io.ctx, fd))
        return errno ? -errno : -EIO;
    return 0;
}

int io_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int io_fail(fg_err *err, int neg_errno, const char *path, const char *what)
{
    int e = -neg_errno;
    int code = (e == ENOSPC || e == EDQUOT || e == EFBIG) ? FG_ERR_NO_SPACE : FG_ERR_IO;
    if (e == ENODATA)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: %s: short read (the file ends early)", path,
                          what);
    if (e == 0) /* never ": Success" */
        return fg_err_set(err, code, "%s: %s: failed with no error code", path, what);
    return fg_err_sys(err, code, e, "%s: %s", path, what);
}

void store_path(const fg_store *s, char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", s->dir, name);
}

void store_file_name(uint32_t id, int kv, char *buf, size_t n)
{
    snprintf(buf, n, kv ? "kv-%06u.pages" : "weights-%06u.fgt", id);
}

uint32_t store_parse_name(const char *name, int *kv)
{
    const char *p;
    if (!strncmp(name, "weights-", 8)) {
        p = name + 8;
        *kv = 0;
    } else if (!strncmp(name, "kv-", 3)) {
        p = name + 3;
        *kv = 1;
    } else {
        return 0;
    }
    uint32_t id = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 7; p++, digits++)
        id = id * 10 + (uint32_t)(*p - '0');
    if (digits != 6 || id == 0 || strcmp(p, *kv ? ".pages" : ".fgt"))
        return 0;
    return id;
}
