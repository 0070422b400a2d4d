/* fg_file.c - see fg_file.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fg_file.h"

const char *fg_file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "not a file";
    }
}

int fg_open_regular(const char *path, int flags, int *fd, fg_err *err)
{
    *fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    if (*fd < 0)
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, errno,
                          "%s: cannot open", path);
    struct stat st;
    int rc = FG_OK;
    if (fstat(*fd, &st))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open", path);
    else if (!S_ISREG(st.st_mode))
        rc = fg_err_set(err, FG_ERR_IO, "%s: %s, not a regular file", path,
                        fg_file_kind(st.st_mode));
    if (rc) {
        close(*fd);
        *fd = -1;
        return rc;
    }
    int fl = fcntl(*fd, F_GETFL);
    if (!(flags & O_NONBLOCK) && fl >= 0) /* io_uring honours it even on a regular file */
        fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return FG_OK;
}

int fg_fopen_regular(const char *path, FILE **f, fg_err *err)
{
    int fd;
    *f = NULL;
    int rc = fg_open_regular(path, O_RDONLY, &fd, err);
    if (rc)
        return rc;
    if (!(*f = fdopen(fd, "rb"))) {
        rc = fg_err_sys(err, FG_ERR_NOMEM, errno, "%s: cannot open", path);
        close(fd);
    }
    return rc;
}

int fg_read_regular(const char *path, size_t max, char **buf, size_t *len, fg_err *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f;
    int rc = fg_fopen_regular(path, &f, err);
    if (rc)
        return rc;
    char *b = NULL;
    size_t n = 0, cap = 0, got = 1;
    while (got && n <= max) { /* reads max + 1 bytes at most: one more says "too long" */
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(b, (nc > max + 1 ? max + 1 : nc) + 1);
            if (!nb) {
                rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            b = nb;
            cap = nc > max + 1 ? max + 1 : nc;
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
    }
    if (rc == FG_OK && ferror(f))
        rc = fg_err_set(err, FG_ERR_IO, "%s: read error", path);
    else if (rc == FG_OK && n > max)
        rc = fg_err_set(err, FG_ERR_LIMIT, "%s: larger than %zu bytes", path, max);
    fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return FG_OK;
}
