/* fg_file.h - opening a path that must be a regular file.
 *
 * Every input fg reads by name (a store's files, a checkpoint's, tokenizer files, a calibration)
 * is a regular file. open() of a FIFO blocks until a writer appears, so a FIFO planted where a
 * file belongs would hang the program; a directory opens and fails only at the first read, with
 * an errno that names no file. fg_open_regular opens with O_NONBLOCK (which makes the open of a
 * FIFO return at once), refuses anything but a regular file in one line naming the path and what
 * it is, and clears O_NONBLOCK again (it means nothing for a regular file's reads, but the caller
 * may hand the descriptor on).
 */
#ifndef FG_FILE_H
#define FG_FILE_H

#include <stdio.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* open(path, flags | O_CLOEXEC) of a regular file into *fd: FG_OK, or the status with err set
 * and *fd = -1 (FG_ERR_NOT_FOUND for a missing path, FG_ERR_IO otherwise: "PATH: cannot open:
 * strerror", "PATH: a FIFO, not a regular file" and the like). With O_CREAT the check applies
 * to what the path names after the open. */
int fg_open_regular(const char *path, int flags, int *fd, fg_err *err);
/* The same as a stdio stream opened "rb" into *f (NULL on error). */
int fg_fopen_regular(const char *path, FILE **f, fg_err *err);
/* The whole of a regular file of at most max bytes into *buf (malloc'd, NUL-terminated after the
 * *len bytes): fg_open_regular's refusals, FG_ERR_LIMIT "PATH: larger than MAX bytes" for a
 * longer file, FG_ERR_IO for a read error; *buf NULL on error. Memory grows with the file, not
 * with max. */
int fg_read_regular(const char *path, size_t max, char **buf, size_t *len, fg_err *err);
/* What a stat mode names, for messages: "a directory", "a FIFO", ... ("a regular file"). */
const char *fg_file_kind(unsigned mode);

#ifdef __cplusplus
}
#endif
#endif
