/* jobs.h - resumable JSONL batch jobs: a streamed job reader and a locked, resumable results file
 * (jobs_read.c, jobs_line.c, jobs_out.c; shared pieces in jobs_util.c).
 *
 * Input (JSONL): one JSON object per line, in either of two formats (docs/jobs.md lists every
 * field side by side); a file may mix them, and ids share one namespace.
 *  - fg's own line: {"id": string or integer, "prompt": string or [token ids], "max_new_tokens":
 *    integer, "stop": [string, ...] or string, "meta": any value (echoed), and the per-request
 *    fields by OpenAI's names: temperature, top_p, top_k, min_p, seed, presence_penalty,
 *    frequency_penalty, repetition_penalty, n, logprobs (integer 0..20), echo, min_tokens,
 *    ignore_eos}, all but id and prompt optional; or, for a chat model, "messages" instead of
 *    "prompt": an array of {"role": string, "content": string, array or null, ...} objects,
 *    rendered through the model's chat template by the runner, with an optional
 *    "chat_template_kwargs" object (e.g. {"enable_thinking": false}). A line with an id whose
 *    messages are malformed, or that has both "prompt" and "messages", is read with j->invalid
 *    saying why: the runner answers it with an error result and the job goes on. Every other
 *    fault stops the job before it starts: every field's type is checked: an id is a non-empty
 *    string or an integer (compared as text: "7" and 7 are the same id); max_new_tokens an
 *    integer in 1..FG_JOB_MAX_NEW_TOKENS (no fractions, exponents, strings or wrap); stop one
 *    non-empty string or an array of at most FG_JOB_MAX_STOPS of them; the request's fields by
 *    fg_request_check. Any other key is refused (a misspelt "max_tokens" would otherwise run
 *    silently with the default); "meta" is the one place for a user's own data.
 *  - an OpenAI Batch line (a "custom_id" and no "id"): {"custom_id": string, "method": "POST",
 *    "url": "/v1/completions" | "/v1/chat/completions", "body": the endpoint's request body}
 *    read by openai.h's parser; custom_id is the job's id. A line fg cannot run (a field fg
 *    does not implement, a bad method or url, ...) is read with j->invalid and j->invalid_param
 *    naming the field: its error result, and the job goes on. A line without a usable
 *    custom_id stops the job as a bad fg line does.
 * Either way a valid line's j->req is its fg_request. Lines are read as Python's json module
 * reads them (fg_json_loadb: integers of any size, NaN). Duplicate keys, invalid UTF-8 and NUL
 * bytes are refused by the JSON parser. Blank lines and a UTF-8 byte order mark at the start
 * are skipped. A line is at most FG_JOB_MAX_LINE bytes. Every error is one line
 * "FILE:LINE: prompt "ID": what" (the id when the line got that far).
 *
 * Output (JSONL): an OpenAI line's result is a BatchRequestOutput line (openai.h's writers;
 * docs/jobs.md); fg's line gets one object per finished prompt, {"id": string or integer (as the input wrote
 * it: an integer id, of any size, comes back as that integer), "text": string, "tokens": [int],
 * "finish_reason": "length"|"eos"|"stop", "prompt_tokens": int, "prompt_ids": [int] (when
 * asked), "timing": {...}, "meta": the input's meta, byte for byte (when it had one)}; a prompt
 * that could not run gets {"id": ..., "error": {"type": string, "message": string},
 * "prompt_tokens": int, "meta": ...} instead, and the job goes on (an error line is a result:
 * resume does not run it again). From a full fg_response (fg_job_result.resp) it also carries
 * "logprobs" (the completions endpoint's legacy object) when asked and "choices" when n > 1; a
 * result without one (the legacy fields) for a request that asked for log-probs, n > 1 or echo
 * is an error result saying so. Resume recognises both formats' result lines (an OpenAI line's
 * by its custom_id). Appended one block per write and made durable with fdatasync
 * (regular files) before the next block starts.
 *
 * Lifecycle of a run (what the runner does):
 *   fg_job_reader_open(input) -> fg_job_output_open(output, resume) ->
 *   fg_job_output_set_openai(output, model, piece, tok) (for OpenAI lines' names and tokens) ->
 *   loop { fg_job_reader_next(reader, output, max, &block) until block.n == 0;
 *          generate; fg_job_output_append(output, results) } ->
 *   fg_job_output_close (reports a failed close) -> fg_job_reader_close.
 * Memory is bounded by the block, plus one hash-set entry per distinct id (input ids for the
 * duplicate check, output ids for the done-set): a job of any number of prompts streams.
 */
#ifndef FG_JOBS_H
#define FG_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "request.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_JOB_MAX_STOPS 8
#define FG_JOB_MAX_NEW_TOKENS (1u << 24) /* beyond any context; keeps counts in uint32 */
#define FG_JOB_MAX_LINE (64u << 20)      /* bytes in one input line */

/* fg_job.format: which line format a line was written in (each line says by its keys). */
typedef enum fg_job_format {
    FG_JOB_FG = 0,     /* fg's own line: "id", "prompt" | "messages", ... */
    FG_JOB_OPENAI = 1, /* an OpenAI Batch line: "custom_id", "method", "url", "body" */
} fg_job_format;

typedef struct fg_job {
    char *id;          /* the input id as text (an integer as written, of any size); an OpenAI
                          line's custom_id */
    int id_is_int;     /* the id was a JSON integer: results write it back unquoted */
    int format;        /* fg_job_format */
    int endpoint;      /* OpenAI lines: fg_oai_endpoint (openai.h) of the line's "url" */
    char *model;       /* OpenAI lines: the body's "model" (NULL when absent) */
    char *prompt;      /* NULL when the line has messages or prompt token ids */
    int32_t *prompt_ids; /* [n_prompt_ids] "prompt" given as token ids, or NULL */
    uint32_t n_prompt_ids;
    char *messages;    /* the "messages" array as compact JSON text, or NULL */
    char *chat_kwargs; /* the "chat_template_kwargs" object as compact JSON text, or NULL */
    char *invalid;     /* non-NULL: why the line's request cannot run (an error result) */
    char *invalid_param; /* with invalid: the field at fault ("" for the line as a whole) */
    char *meta;        /* the "meta" value's JSON text as the line wrote it, or NULL */
    int64_t max_new;   /* 1..FG_JOB_MAX_NEW_TOKENS, or -1: use the command's default */
    char *stops[FG_JOB_MAX_STOPS];
    int n_stops;
    fg_request req;    /* the line's request (without invalid): points into this job's strings,
                          valid while the job is; max_tokens 0 when max_new is -1 */
    int done;          /* legacy fg_jobs_open_output only: already present in the output */
    size_t line;       /* 1-based line of the input, for the runner's messages */
} fg_job;

typedef struct fg_job_list {
    fg_job *jobs;      /* [n], owned by the list */
    size_t n;
} fg_job_list;

/* Free the strings of one job and zero it (a job moved out of a list). */
void fg_job_clear(fg_job *j);

/* Free every job of *l and reset it to empty; NULL and an empty list are accepted. */
void fg_jobs_free(fg_job_list *l);

/* ---- the results file ------------------------------------------------------------------- */

typedef struct fg_job_output fg_job_output;

enum {
    FG_JOB_RESUME = 1u << 0, /* continue an existing results file (otherwise a non-empty one is
                              * refused with FG_ERR_EXISTS) */
};

/* What fg_job_output_open found in an existing results file (all zero for a new one). */
typedef struct fg_job_output_info {
    size_t n_results;     /* valid result lines kept (ids in the done-set) */
    size_t n_damaged;     /* complete lines that are not results: moved to aside_path */
    size_t first_damaged; /* 1-based line number of the first of them, 0 when none */
    int torn_tail;        /* a last line without its newline (a killed write): moved aside */
    int rewritten;        /* the file was rewritten (atomically) without the damaged lines */
    char aside_path[4200];/* "<output>.damaged" when something was moved there, else "" */
} fg_job_output_info;

/* Open the results file path for appending; "-" is standard output.
 * A regular file is locked (flock, exclusive, not waiting): a second job on the same output gets
 * FG_ERR_STORE_BUSY "PATH: another fg-infer job is writing to it". Without FG_JOB_RESUME a
 * non-empty file is refused (FG_ERR_EXISTS) and left untouched. With it:
 *  - every complete line that is a valid result line is kept and its id joins the done-set;
 *  - a file with content but no valid result line is not fg results: refused (FG_ERR_BAD_MAGIC)
 *    naming it, byte for byte untouched;
 *  - a last line without its newline is torn: when it parses as a result it is completed with a
 *    newline and kept; otherwise its bytes are appended to PATH.damaged (fsynced) and the file
 *    is cut back to the last newline;
 *  - damaged complete lines are appended to PATH.damaged and the file is rewritten without them
 *    atomically (temp file in the same directory, fsync, rename over PATH, directory fsync),
 *    the lock carried over to the new file before the rename.
 * A pipe, terminal or other non-regular file is written as a stream (no lock, no fdatasync);
 * FG_JOB_RESUME on one is refused (FG_ERR_INVALID_ARG).
 * *out is owned by the caller (fg_job_output_close); *info (may be NULL) is filled on success. */
int fg_job_output_open(const char *path, unsigned flags, fg_job_output **out,
                       fg_job_output_info *info, fg_err *err);

/* 1 when a result for id is in the file (found by resume or appended since), else 0. */
int fg_job_output_has(const fg_job_output *o, const char *id);

/* Number of distinct ids in the done-set. */
size_t fg_job_output_count(const fg_job_output *o);

typedef struct fg_job_result {
    const fg_job *job;
    const char *text;      /* invalid UTF-8 is written as U+FFFD */
    const int32_t *tokens;
    size_t n_tokens;
    size_t prompt_tokens;
    const char *finish;  /* "length", "eos" or "stop" */
    double seconds;      /* wall time of the block that produced it */
    uint32_t block;
    const char *error;     /* non-NULL: the prompt could not run; this message (one line) and
                            * error_type are written instead of text, tokens and finish_reason */
    const char *error_type; /* e.g. "context_length_exceeded", "invalid_prompt" */
    const int32_t *prompt_ids; /* non-NULL: written as "prompt_ids" ([prompt_tokens] ids) */
    const fg_response *resp; /* non-NULL: the job's whole response (fg_session_generate's):
                              * choices, log-probs and usage come from it, and text, tokens,
                              * finish, prompt_tokens and error above are not read (a response
                              * with status > 0 is the error result) */
} fg_job_result;

/* How OpenAI result lines name the model and spell tokens (log-probs need piece): model is
 * copied (NULL: the line's own "model", else ""); piece and ctx (fg_oai_piece_fn of openai.h;
 * fg_oai_tok_piece with a const fg_tok *) must stay valid while results are appended. */
int fg_job_output_set_openai(fg_job_output *o, const char *model,
                             int (*piece)(void *ctx, int32_t id, const char **bytes,
                                          size_t *len),
                             void *ctx, fg_err *err);

/* Append results as JSON lines in one write (retried over short writes), then fdatasync when the
 * output is a regular file. Any failure names the output; it is sticky: later appends return
 * the same error. The ids join the done-set. Nothing in r is kept. */
int fg_job_output_append(fg_job_output *o, const fg_job_result *r, size_t n, fg_err *err);

/* Close (and unlock) the output; returns the first error of the handle's life, or that of
 * close() itself. NULL is accepted (FG_OK). */
int fg_job_output_close(fg_job_output *o, fg_err *err);

/* ---- the streamed job reader ------------------------------------------------------------ */

typedef struct fg_job_reader fg_job_reader;

/* Open a JSONL input; "-" is standard input. When the input is seekable (a regular file) the
 * whole file is validated first (one streamed pass that keeps only the ids), so a bad or
 * duplicate line anywhere is reported before any prompt runs; a pipe is validated as it is read.
 * An input without a single prompt is refused. *out owned by the caller (fg_job_reader_close). */
int fg_job_reader_open(const char *path, fg_job_reader **out, fg_err *err);

/* The same over an open descriptor, which the reader takes (closes) whatever the outcome; name
 * is used in messages. */
int fg_job_reader_open_fd(int fd, const char *name, fg_job_reader **out, fg_err *err);

/* Fill *block with the next up to max (>= 1) jobs in input order whose ids are not in done
 * (NULL: none skipped). The jobs previously in *block are freed first, so a caller that reuses
 * one fg_job_list holds one block at a time; block->n == 0 means the input is finished. The
 * list is owned by the caller (fg_jobs_free). On an error *block is empty and the reader stays
 * failed (each later call returns the same error). */
int fg_job_reader_next(fg_job_reader *r, const fg_job_output *done, size_t max,
                       fg_job_list *block, fg_err *err);

/* Jobs in the input and how many of them done already holds. With a validated (seekable)
 * input these are final from the start; for a pipe they count the lines read so far, and
 * *complete says which (1: the whole input has been read). Any out-pointer may be NULL. */
void fg_job_reader_count(const fg_job_reader *r, const fg_job_output *done, size_t *total,
                         size_t *n_done, int *complete);

/* NULL is accepted. */
void fg_job_reader_close(fg_job_reader *r);

/* ---- legacy API (tools/fg_infer.c until it moves to the reader and fg_job_output) ------- */

/* Read a whole JSONL file (same rules as the reader). *out owned by the caller (fg_jobs_free). */
int fg_jobs_load(const char *path, fg_job_list *out, fg_err *err);

/* fg_job_output_open, then mark the jobs already in the output as done and hand back a
 * descriptor (which holds the lock until the caller closes it). */
int fg_jobs_open_output(const char *path, int resume, fg_job_list *jobs, int *fd, size_t *n_done,
                        fg_err *err);

/* Append results to a descriptor from fg_jobs_open_output (same write and sync rules). */
int fg_jobs_append(int fd, const char *path, const fg_job_result *r, size_t n, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
