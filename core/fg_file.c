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

int fg_open_regular(const char *path, int flags, fg_err *err)
{
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        fg_err_sys(err, e == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, e, "%s", path);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        fg_err_sys(err, FG_ERR_IO, e, "%s", path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        fg_err_set(err, FG_ERR_IO, "%s: %s, not a regular file", path, fg_file_kind(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (!(flags & O_NONBLOCK) && fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *fg_fopen_regular(const char *path, fg_err *err)
{
    int fd = fg_open_regular(path, O_RDONLY, err);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        fg_err_sys(err, FG_ERR_NOMEM, e, "%s", path);
    }
    return f;
}
