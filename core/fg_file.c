/* fg_file.c - see fg_file.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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
