/* fg_error.c - status strings and the fg_err record helpers (see fg_error.h). */
#include "fg_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *fg_strerror(int code)
{
    switch (code) {
    case FG_OK: return "ok";
    case FG_ERR_INVALID_ARG: return "invalid argument";
    case FG_ERR_NOMEM: return "out of memory";
    case FG_ERR_IO: return "I/O error";
    case FG_ERR_EXISTS: return "file exists";
    case FG_ERR_NOT_FOUND: return "not found";
    case FG_ERR_UNSUPPORTED: return "unsupported";
    case FG_ERR_TRUNCATED: return "truncated";
    case FG_ERR_BAD_MAGIC: return "bad magic";
    case FG_ERR_BAD_ENDIAN: return "bad endianness marker";
    case FG_ERR_VERSION: return "unsupported version";
    case FG_ERR_CHECKSUM: return "checksum mismatch";
    case FG_ERR_BAD_ALIGN: return "bad alignment";
    case FG_ERR_LIMIT: return "limit exceeded";
    case FG_ERR_OVERFLOW: return "size overflow";
    case FG_ERR_BAD_ENUM: return "unknown enum value";
    case FG_ERR_BAD_NAME: return "bad name";
    case FG_ERR_DUPLICATE: return "duplicate name";
    case FG_ERR_OUT_OF_BOUNDS: return "out of bounds";
    case FG_ERR_OVERLAP: return "overlapping ranges";
    case FG_ERR_SIZE_MISMATCH: return "size mismatch";
    case FG_ERR_RESERVED: return "reserved field not zero";
    case FG_ERR_STATE: return "invalid state";
    case FG_ERR_NO_SPACE: return "no space left";
    case FG_ERR_CORRUPT: return "corrupt structure";
    /* module ranges (see fg_error.h): add each new code here */
    case FG_ERR_DISALLOWED: return "refused by the input policy";
    case FG_ERR_NONFINITE: return "non-finite value after conversion";
    default: return "unknown error";
    }
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
