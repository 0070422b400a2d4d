/* fg_error.c - status strings and the fg_err record helpers (see fg_error.h). */
#include "fg_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const k_messages[] = {
    "ok",
    "invalid argument",
    "out of memory",
    "I/O error",
    "file exists",
    "not found",
    "unsupported",
    "truncated",
    "bad magic",
    "bad endianness marker",
    "unsupported version",
    "checksum mismatch",
    "bad alignment",
    "limit exceeded",
    "size overflow",
    "unknown enum value",
    "bad name",
    "duplicate name",
    "out of bounds",
    "overlapping ranges",
    "size mismatch",
    "reserved field not zero",
    "invalid state",
    "no space left",
    "corrupt structure",
};

const char *fg_strerror(int code)
{
    int n = (int)(sizeof k_messages / sizeof k_messages[0]);
    if (code > 0 || -code >= n)
        return "unknown error";
    return k_messages[-code];
}

static void vset(fg_err *e, int code, const char *fmt, va_list ap)
{
    e->code = code;
    e->sys_errno = 0;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

int fg_err_set(fg_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vset(e, code, fmt, ap);
        va_end(ap);
    }
    return code;
}

int fg_err_sys(fg_err *e, int code, int errnum, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vset(e, code, fmt, ap);
        va_end(ap);
        size_t len = strlen(e->msg);
        snprintf(e->msg + len, sizeof e->msg - len, ": %s", strerror(errnum));
        e->sys_errno = errnum;
    }
    return code;
}

void fg_err_clear(fg_err *e)
{
    if (e) {
        e->code = FG_OK;
        e->sys_errno = 0;
        e->msg[0] = '\0';
    }
}
