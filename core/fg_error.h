/* fg_error.h - the one error enum of fg, and the error record every fallible call fills.
 *
 * Every fallible function returns an fg_status (FG_OK = 0, failures negative) and, when the
 * caller passes a non-NULL fg_err, writes a one-line human message into it that names the
 * file, tensor, chunk or field at fault. The record is plain data owned by the caller; no
 * function keeps a pointer to it. Libraries never print and never exit.
 */
#ifndef FG_ERROR_H
#define FG_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_status {
    FG_OK = 0,
    FG_ERR_INVALID_ARG = -1,  /* caller passed an argument outside the documented range */
    FG_ERR_NOMEM = -2,        /* allocation failed */
    FG_ERR_IO = -3,           /* the OS refused a read, write, fsync, open, ... (see sys_errno) */
    FG_ERR_EXISTS = -4,       /* refusing to overwrite an existing file */
    FG_ERR_NOT_FOUND = -5,    /* no such file, tensor or key */
    FG_ERR_UNSUPPORTED = -6,  /* feature compiled out or not available on this machine */
    FG_ERR_TRUNCATED = -7,    /* a structure runs past the end of the file or its region */
    FG_ERR_BAD_MAGIC = -8,    /* not an fg file */
    FG_ERR_BAD_ENDIAN = -9,   /* endianness marker does not read as little-endian */
    FG_ERR_VERSION = -10,     /* major version this library cannot read */
    FG_ERR_CHECKSUM = -11,    /* stored XXH3 does not match the bytes */
    FG_ERR_BAD_ALIGN = -12,   /* alignment invalid, or an offset not on the alignment */
    FG_ERR_LIMIT = -13,       /* a value exceeds a limit written in SPEC.md */
    FG_ERR_OVERFLOW = -14,    /* size arithmetic would overflow 64 bits */
    FG_ERR_BAD_ENUM = -15,    /* unknown codec, dtype, type tag or flag */
    FG_ERR_BAD_NAME = -16,    /* empty name or a byte outside the allowed set */
    FG_ERR_DUPLICATE = -17,   /* two tensors or metadata keys with one name */
    FG_ERR_OUT_OF_BOUNDS = -18, /* an offset/length pointing outside the valid region */
    FG_ERR_OVERLAP = -19,     /* two byte ranges that must be disjoint intersect */
    FG_ERR_SIZE_MISMATCH = -20, /* a length differs from the size its descriptor implies */
    FG_ERR_RESERVED = -21,    /* a reserved field or padding byte is not zero */
    FG_ERR_STATE = -22,       /* call made in the wrong state (programmer error) */
    FG_ERR_NO_SPACE = -23,    /* disk full (ENOSPC) or a budget/map is full */
    FG_ERR_CORRUPT = -24,     /* other structural inconsistency */
    /* Codes specific to one module live in its range, so modules grow without collisions:
     * quant -30..-39, store -40..-49, pager -50..-59, compute -60..-69, convert/text -70..-79,
     * tools and jobs -80..-89. */
    FG_ERR_NONFINITE = -30,   /* quant: NaN or Inf in data to be quantized */
    FG_ERR_QUANT_RANGE = -31, /* quant: a group's value range does not fit its min/scale */
    /* store/ (-40..-49) */
    FG_ERR_STORE_NOT_STORE = -40, /* directory is not an fg store (no valid store.id) */
    FG_ERR_STORE_FOREIGN = -41,   /* a file carries another store's id, or a kind/name not ours */
    FG_ERR_STORE_MISSING = -42,   /* a file the catalog lists is missing from the directory */
    FG_ERR_STORE_READONLY = -43,  /* write refused: store opened read-only or directory read-only */
    FG_ERR_STORE_MAP_FULL = -44,  /* the LMDB map reached its configured maximum size */
    FG_ERR_STORE_BUSY = -45,      /* another process or handle holds the store open for writing */
    FG_ERR_STORE_STALE = -46,     /* KV page torn, stale, or not the page the catalog expects */
    FG_ERR_STORE_CATALOG = -47,   /* catalog missing, unreadable or of another version: reindex */
    FG_ERR_STORE_LMDB = -48,      /* other LMDB failure (see the message) */
    /* text (tokenizer) */
    FG_ERR_TOK_JSON = -70,    /* tokenizer JSON file is not well-formed JSON */
    FG_ERR_TOK_VOCAB = -71,   /* vocab.json not an object of string->id, bad/duplicate id, ... */
    FG_ERR_TOK_MERGES = -72,  /* merges.txt line malformed or naming a token not in the vocab */
    FG_ERR_TOK_CONFIG = -73,  /* tokenizer_config.json / special_tokens_map.json field invalid */
    FG_ERR_TOK_BAD_ID = -74,  /* token id outside the vocabulary (decode) */
    /* convert (-75..-79; the tokenizer has -70..-74) */
    FG_ERR_DISALLOWED = -75,  /* convert: input reaches for something refused by policy
                               * (pickle global/opcode, compressed zip entry) */
} fg_status;

#define FG_ERR_MSG_MAX 320

typedef struct fg_err {
    int code;                  /* fg_status of the failure, FG_OK when none */
    int sys_errno;             /* errno of the OS call at fault, 0 when none */
    char msg[FG_ERR_MSG_MAX];  /* one line, no trailing newline */
} fg_err;

/* Static English text for a status code; never NULL. */
const char *fg_strerror(int code);

/* Fill *e (when non-NULL) with code and a printf-style message; returns code. */
int fg_err_set(fg_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Like fg_err_set but records errnum and appends ": strerror(errnum)". */
int fg_err_sys(fg_err *e, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Reset *e to FG_OK with an empty message (NULL is accepted). */
void fg_err_clear(fg_err *e);

#ifdef __cplusplus
}
#endif
#endif
