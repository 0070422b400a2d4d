/* jobs.h - resumable JSONL batch jobs for fg-infer.
 *
 * Input: one JSON object per line: {"id": string or number, "prompt": string,
 * "max_new_tokens": int (optional), "stop": [string, ...] (optional)}. Blank lines are skipped;
 * anything else is an error naming the file and line.
 * Output: one JSON object per finished prompt, appended as each block completes (one write and
 * an fdatasync per block), so a killed job loses at most the block in progress. On --resume the
 * output file is cut back to its last complete line and every id already present is skipped.
 */
#ifndef FG_JOBS_H
#define FG_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_JOB_MAX_STOPS 8

typedef struct fg_job {
    char *id;          /* the input id as text (numbers kept as written) */
    char *prompt;
    int64_t max_new;   /* -1: use the command's default */
    char *stops[FG_JOB_MAX_STOPS];
    int n_stops;
    int done;          /* already present in the output (resume) */
} fg_job;

typedef struct fg_job_list {
    fg_job *jobs;
    size_t n;
} fg_job_list;

/* Parse a JSONL file. Duplicate ids are an error. *out owned by the caller (fg_jobs_free). */
int fg_jobs_load(const char *path, fg_job_list *out, fg_err *err);
void fg_jobs_free(fg_job_list *l);

/* Open the output for appending. With resume, cut a torn last line, then mark jobs whose id is
 * already in the file as done; without resume an existing non-empty file is refused
 * (FG_ERR_EXISTS) so no results are overwritten. *fd is the open descriptor. */
int fg_jobs_open_output(const char *path, int resume, fg_job_list *jobs, int *fd, size_t *n_done,
                        fg_err *err);

typedef struct fg_job_result {
    const fg_job *job;
    const char *text;
    const int32_t *tokens;
    size_t n_tokens;
    size_t prompt_tokens;
    const char *finish;  /* "length", "eos" or "stop" */
    double seconds;      /* wall time of the block that produced it */
    uint32_t block;
} fg_job_result;

/* Append results as JSON lines in one write, then fdatasync. */
int fg_jobs_append(int fd, const char *path, const fg_job_result *r, size_t n, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
