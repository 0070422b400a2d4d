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
    case FG_ERR_NONFINITE: return "NaN or Inf in data to quantize";
    case FG_ERR_QUANT_RANGE: return "value range does not fit the quantization scale dtype";
    case FG_ERR_STORE_NOT_STORE: return "not an fg store";
    case FG_ERR_STORE_FOREIGN: return "file belongs to another store";
    case FG_ERR_STORE_MISSING: return "file listed in the catalog is missing";
    case FG_ERR_STORE_READONLY: return "store is read-only";
    case FG_ERR_STORE_MAP_FULL: return "catalog map is full";
    case FG_ERR_STORE_BUSY: return "store is open for writing elsewhere";
    case FG_ERR_STORE_STALE: return "stale or torn KV page";
    case FG_ERR_STORE_CATALOG: return "catalog missing or unreadable";
    case FG_ERR_STORE_LMDB: return "LMDB error";
    case -50: return "pager: tier budget exhausted";        /* FG_ERR_PAGER_BUDGET */
    case -51: return "pager: tier absent";                  /* FG_ERR_PAGER_NO_TIER */
    case -52: return "pager: chunk pinned";                 /* FG_ERR_PAGER_PINNED */
    case -53: return "pager: device backend failure";       /* FG_ERR_PAGER_DEVICE */
    case -54: return "pager: end of file inside a chunk";   /* FG_ERR_PAGER_SHORT */
    case FG_ERR_TOK_JSON: return "malformed tokenizer JSON";
    case FG_ERR_TOK_VOCAB: return "invalid tokenizer vocabulary";
    case FG_ERR_TOK_MERGES: return "invalid tokenizer merges";
    case FG_ERR_TOK_CONFIG: return "invalid tokenizer config";
    case FG_ERR_TOK_BAD_ID: return "token id not in vocabulary";
    case FG_ERR_DISALLOWED: return "refused by the input policy";
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
