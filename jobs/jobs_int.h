/* jobs_int.h - private to the jobs library: what its files share.
 *
 * The library is split by concern (each file opens with its own notes):
 *   jobs_util.c  the id hash set, the buffered line reader, the raw member scanner (an id or
 *                "meta" as the line wrote it), UTF-8 repair, message clipping
 *   jobs_line.c  fg's own job line: parsed, every field's type checked, unknown keys refused
 *   jobs_read.c  the streamed job reader (validation pass, duplicate ids, blocks) and the
 *                legacy whole-file loader
 *   jobs_out.c   the locked resumable results file, the legacy output calls
 *   jobs_result.c  result lines in the answered line's format; what resume takes as a result
 *   request.c    fg_request_check, fg_response_clear (request.h)
 *   openai_parse.c  an OpenAI request body as an fg_request; the typed field readers
 *   openai_write.c  OpenAI response bodies, chunks, error objects, Batch output lines
 * Names here are fgj_ (internal to the library, not exported by libfg).
 */
#ifndef FG_JOBS_INT_H
#define FG_JOBS_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs.h"
#include "openai.h"

#define FGJ_HIDDEN __attribute__((visibility("hidden")))

/* ---- id hash set (jobs_util.c) ----------------------------------------------------------- */

typedef struct id_entry {
    const char *key; /* in the set's arena; NULL: empty slot */
    size_t line;     /* input: the line that first used the id; top bit: handed out */
} id_entry;

#define ID_EMITTED ((size_t)1 << (sizeof(size_t) * 8 - 1))

typedef struct id_block {
    struct id_block *next;
    size_t used, cap;
    char bytes[];
} id_block;

typedef struct idset {
    id_entry *slot; /* [cap], cap a power of two or 0; 16 bytes an id */
    size_t cap, n;
    id_block *arena; /* the keys, back to back (no malloc header per id) */
} idset;

/* The entry for key, inserted when absent (*added = 1). NULL when out of memory. */
FGJ_HIDDEN id_entry *fgj_idset_add(idset *s, const char *key, int *added);
/* The entry for key, or NULL. */
FGJ_HIDDEN const id_entry *fgj_idset_get(const idset *s, const char *key);
FGJ_HIDDEN void fgj_idset_free(idset *s);

/* ---- buffered line reader (jobs_util.c) -------------------------------------------------- */

typedef struct lread {
    int fd;
    char rbuf[1 << 16];
    size_t rpos, rlen;
    int eof;
    char *line;       /* the current line's first min(len, max) bytes, NUL-terminated, no '\n' */
    size_t len, cap;  /* len: the whole line's length without its '\n' */
    size_t max;       /* bytes kept of one line */
    int nl;           /* the line ended with '\n' (0: last line, torn) */
    uint64_t start;   /* offset of the current line */
    uint64_t off;     /* offset of the next byte */
    size_t lineno;
    int positional;   /* a regular file: read with pread from base + off, never moving the
                       * descriptor's offset, which a dup of stdin shares with every other
                       * reader of it (a second reader's pass must not move this one's) */
    uint64_t base;    /* the descriptor's offset when the reader began (stdin may start
                       * part-way into its file) */
} lread;

FGJ_HIDDEN void fgj_lread_init(lread *lr, int fd, size_t max);
/* Next line: 1, 0 at the end, -errno on a read error. */
FGJ_HIDDEN int fgj_lread_next(lread *lr);
/* Back to the first line (a positional reader only; else -ESPIPE). */
FGJ_HIDDEN int fgj_lread_rewind(lread *lr);
/* Only spaces, tabs and CRs. */
FGJ_HIDDEN int fgj_blank(const char *s);

/* ---- text helpers (jobs_util.c) ---------------------------------------------------------- */

/* s shortened to at most 40 bytes (on a UTF-8 boundary), control bytes as '?', for messages. */
FGJ_HIDDEN const char *fgj_clip(const char *s, char out[48]);
/* The text of member key (written without escapes) of the JSON object s[0, n) (valid JSON):
 * 1 and its span, or 0 when absent (or its name written with escapes). */
FGJ_HIDDEN int fgj_raw_member(const char *s, size_t n, const char *key, const char **v,
                              size_t *vn);
/* The id v as text (*is_int: a JSON integer, kept as the line wrote it, of any size), or NULL
 * when it is not a non-empty string or an integer. line may be NULL (no raw text). */
FGJ_HIDDEN char *fgj_id_text(json_t *v, const char *line, size_t len, int *is_int);
/* "meta" as written (compact JSON when its name was escaped); NULL on no memory. */
FGJ_HIDDEN char *fgj_meta_text(json_t *v, const char *line, size_t len);
/* s with its control bytes (a parser's message may quote the text's) as '?', in place. */
FGJ_HIDDEN char *fgj_oneline(char *s);
/* Copy of s (malloc'd) with every invalid UTF-8 sequence as U+FFFD; NULL on no memory. */
FGJ_HIDDEN char *fgj_utf8_sanitize(const char *s);

/* ---- a job line (jobs_line.c) ------------------------------------------------------------ */

/* Parse one non-blank line into *j (zeroed first; freed again on an error). */
FGJ_HIDDEN int fgj_parse_job(const char *text, size_t len, const char *file, size_t line,
                             fg_job *j, fg_err *err);
FGJ_HIDDEN void fgj_job_free(fg_job *j);

/* ---- result lines (jobs_result.c) ------------------------------------------------------- */

typedef struct fgj_emit {
    char *model;  /* OpenAI bodies' "model" (NULL: the line's own, else "") */
    fg_oai_piece_fn piece;
    void *ctx;
} fgj_emit;

/* The results as one buffer of lines (*buf malloc'd, owned by the caller); name for messages. */
FGJ_HIDDEN int fgj_encode_results(const fgj_emit *e, const char *name, const fg_job_result *r,
                                  size_t n, char **buf, size_t *len, fg_err *err);
/* The id of a result line fg wrote (fg's own result or error line, or an OpenAI Batch output
 * line: its custom_id), malloc'd; NULL when the line is not one. */
FGJ_HIDDEN char *fgj_result_id(const char *s, size_t n);

/* ---- OpenAI writers' pieces (openai_write.c) --------------------------------------------- */

/* The completions endpoint's legacy log-probs object of choice c (the prompt's positions first
 * with echo). NULL on failure. */
FGJ_HIDDEN json_t *fgj_legacy_logprobs(const fg_oai_meta *m, const fg_response *r,
                                       const fg_choice *c, int echo);
/* {"error": {message, type, param, code}}; NULL on no memory. */
FGJ_HIDDEN json_t *fgj_error_object(const char *message, const char *type, const char *param,
                                    const char *code);

/* ---- typed field readers (openai_parse.c) ------------------------------------------------
 * Each returns FG_OK, FGJ_BAD with the refusal (naming the field) in why[FGJ_WHY], or
 * FG_ERR_NOMEM. */

#define FGJ_WHY FG_ERR_MSG_MAX
#define FGJ_BAD FG_ERR_INVALID_ARG
#define FGJ_MAX_TOKENS FG_JOB_MAX_NEW_TOKENS

FGJ_HIDDEN int fgj_get_number(json_t *v, const char *name, float *out, char *why);
FGJ_HIDDEN int fgj_get_int(json_t *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                           char *why);
FGJ_HIDDEN int fgj_get_bool(json_t *v, const char *name, int *out, char *why);
/* "stop": a non-empty string or an array of at most FG_REQ_MAX_STOPS of them, appended to
 * stops[*n_stops] (strdup'd). */
FGJ_HIDDEN int fgj_get_stops(json_t *st, char **stops, int *n_stops, char *why);
/* An array of token ids (integers 0..INT32_MAX, at least one) as *ids (malloc'd). */
FGJ_HIDDEN int fgj_get_ids(json_t *a, const char *name, int32_t **ids, uint32_t *n, char *why);
/* FG_OK when m is a non-empty array of {"role": string, "content": string, array or null}. */
FGJ_HIDDEN int fgj_messages_wrong(json_t *m, char *why);
/* 1 when key is one of the sampling fields both formats share (temperature, top_p, top_k,
 * min_p, seed, the penalties, n, min_tokens, ignore_eos), read into q with *rc the outcome;
 * else 0. */
FGJ_HIDDEN int fgj_sampling_field(const char *key, json_t *v, fg_request *q, int *rc, char *why);
/* An OpenAI body (already parsed JSON) into *b; param (64 bytes, may be NULL) gets the field
 * at fault. */
FGJ_HIDDEN int fgj_oai_body_read(json_t *o, fg_oai_endpoint ep, unsigned flags, fg_oai_body *b,
                                 char *param, char *why);

#endif
