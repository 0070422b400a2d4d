/* runner_jobs.c - a JSONL job: --input lines in, --output results out, resumable.
 *
 * A job streams: a first pass over the input (when it can be read twice: a file, or a file on
 * stdin) tokenizes every pending prompt only to size the context (the longest prompt plus the
 * largest generation of the lines that fit) and the progress total, keeping nothing; the
 * second pass reads one block of prompts at a time, packs a block of those that fit the
 * context together, generates it, appends its results (one write and an fdatasync), and frees
 * it; a line that cannot fit gets its error result line and the job goes on, as does a line
 * whose request is malformed (jobs.c's j->invalid) or whose messages the chat template refuses.
 * A line with messages is rendered through the model's chat template (fgr_encode_chat); a
 * store without one stops the job with that error. Memory is the
 * block plus one hash entry per id, whatever the number of prompts. From a pipe there is one
 * pass: the context is --max-context, or the model's. A job that ends with a prompt read but
 * not answered is an error, never a silent success; Ctrl-C (opts.interrupt) stops it between
 * blocks, reported in rep.interrupted and rep.saved. With --prefix-cache a file job first runs
 * its shared-prefix pass (a third pass over the input: runner_prefix.c).
 *
 * --prompt-len runs generate exactly gen_len tokens (EOS ignored, as FlexGen's benchmark), for
 * --num-prompts prompts when given: runner_modes.c.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "openai.h"
#include "session_int.h"

/* ---- JSONL jobs ----
 *
 * A block needs its longest prompt plus its largest max_new_tokens (prompts are left-padded to
 * the longest and every sequence decodes the same steps: schedule.c). A file's job is sized by
 * its first pass to maxP + maxG (the longest prompt and the largest generation of the lines
 * that fit), capped by --max-context or the model's positions, so a block may be any mix of
 * its lines. Where the cap cuts that (or from a pipe, sized before any prompt is read), blocks
 * are packed: prompts read and tokenized wait in a queue of one block, and each block takes
 * from it, in input order, every prompt that keeps its longest prompt + largest generation
 * within the engine's context; the rest wait for the next block, the queue refilled from the
 * reader first, so every block is as full as the waiting lines allow (a call of the session
 * is one engine block: its own packing finds them all fitting). Every line that fits the
 * context on its own runs, whatever the mix and the block size; a line that cannot fit (or has
 * no tokens) gets its own error result line and the job goes on. Results are appended a block
 * at a time, so they can come out of input order: the ids say which is which.
 */

typedef struct qjob {
    fg_job job;              /* moved out of the reader's block */
    uint32_t P, G;           /* prompt tokens, new tokens */
    uint32_t seqs;           /* sequences it takes (its choices); 0: it gets an error result */
} qjob;

typedef struct jobs_run {
    fg_job_reader *rd;
    fg_job_output *outp;
    fg_job_list block;       /* the reader's last block, then the lines of one call */
    qjob *q;                 /* [block size] lines read and sized, waiting */
    size_t nq;
    int eof;
    fg_session *s;           /* the job's session: its engine answers every line */
    uint64_t appended;       /* result lines this run appended (error lines included) */
    uint64_t errors;         /* ... of which error lines */
} jobs_run;

static uint32_t job_max_new(const fgr_run *r, const fg_job *j)
{
    return j->max_new > 0 ? (uint32_t)j->max_new : r->o->max_new;
}

static void what_of(const fgr_run *r, const fg_job *j, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:%zu: prompt \"%.40s\"", r->o->input, j->line, j->id);
}

/* The context a prompt + generation must fit: --max-context, else the model's positions. */
uint32_t fgr_context_limit(const fgr_run *r)
{
    return r->eo.max_ctx && r->eo.max_ctx < r->max_pos ? r->eo.max_ctx : r->max_pos;
}

/* Tokenize job j for a context of ctx: FG_OK with *ids set (owned by the caller), or 1 with
 * msg and *type saying why the line gets an error result instead (no tokens, or more than ctx
 * with its generation); other codes are failures of the run. */
static int prep_job(fgr_run *r, const fg_job *j, uint32_t ctx, int32_t **ids, uint32_t *n,
                    char *msg, size_t cap, const char **type, fg_err *err)
{
    char what[160];
    uint32_t mn = job_max_new(r, j);
    what_of(r, j, what, sizeof what);
    *ids = NULL;
    *n = 0;
    if (j->invalid) { /* malformed messages, or both prompt and messages (jobs.c) */
        snprintf(msg, cap, "%s", j->invalid);
        *type = "invalid_request";
        return 1;
    }
    int rc = j->messages ? fgr_encode_chat(r, j->messages, j->chat_kwargs, ids, n, "", err)
                         : fgr_encode(r, j->prompt, fgr_prompt_flags(r), ids, n, "", err);
    if (rc == FG_ERR_NOT_FOUND && j->messages) /* the store has no chat template: say so */
        return rc;
    if (rc == FG_ERR_INVALID_ARG) { /* "": empty (no BOS either), or the template refused it */
        snprintf(msg, cap, "%s", err->msg + 2);
        *type = "invalid_prompt";
        return 1;
    }
    if (rc) {
        char m[FG_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        return fg_err_set(err, rc, "%s%s", what, m);
    }
    if ((uint64_t)*n + mn <= ctx)
        return FG_OK;
    if ((uint64_t)*n + mn > r->max_pos)
        snprintf(msg, cap, "%u prompt tokens + %u new exceed the model's %u positions", *n, mn,
                 r->max_pos);
    else
        snprintf(msg, cap, "%u prompt tokens + %u new exceed the context of %u (--max-context)",
                 *n, mn, ctx);
    free(*ids);
    *ids = NULL;
    *type = "context_length_exceeded";
    return 1;
}

/* First pass over a file: the longest prompt (*maxP) and largest generation (*maxG) of the
 * pending lines that fit the context limit, and their new tokens in all (the progress bar's
 * total). Lines that do not fit are left for their error lines in the run. */
int fgr_size_jobs(fgr_run *r, const fg_job_output *done, uint32_t *maxP, uint32_t *maxG,
                  uint64_t *total, fg_err *err)
{
    fg_job_reader *rd = NULL;
    fg_job_list l = {0};
    uint32_t limit = fgr_context_limit(r);
    int rc = fg_job_reader_open(r->o->input, &rd, err);
    *maxP = *maxG = 0;
    *total = 0;
    while (rc == FG_OK && (rc = fg_job_reader_next(rd, done, 256, &l, err)) == FG_OK && l.n) {
        for (size_t i = 0; rc == FG_OK && i < l.n; i++) {
            int32_t *ids;
            uint32_t n;
            char msg[256];
            const char *type;
            rc = prep_job(r, &l.jobs[i], limit, &ids, &n, msg, sizeof msg, &type, err);
            free(ids);
            if (rc == 1) {
                rc = FG_OK;
                continue;
            }
            uint32_t mn = job_max_new(r, &l.jobs[i]);
            *maxP = n > *maxP ? n : *maxP;
            *maxG = mn > *maxG ? mn : *maxG;
            *total += mn;
        }
    }
    fg_jobs_free(&l);
    fg_job_reader_close(rd);
    return rc;
}

/* The engine's prompt and generation lengths (its context: P + G) for a file whose fitting
 * lines have prompts up to maxP and generations up to maxG under the limit; 0, 0 (the limit:
 * open_engine) from a pipe. */
void fgr_jobs_shape(uint32_t maxP, uint32_t maxG, uint32_t limit, uint32_t *P, uint32_t *G)
{
    if (!maxP) {
        *P = *G = 0;
    } else if ((uint64_t)maxP + maxG <= limit) {
        *P = maxP;
        *G = maxG;
    } else { /* packed blocks (jobs_run) */
        *G = maxG < limit / 2 ? maxG : limit / 2;
        *P = limit - *G;
    }
}

/* Say on the log that a line got an error result. */
static void error_note(fgr_run *r, const fg_job *job, const char *msg)
{
    if (r->o->quiet)
        return;
    char c[48];
    snprintf(c, sizeof c, "%.40s", job->id);
    fprintf(r->log, "\rfg-infer: %s:%zu: prompt \"%s\": %s (an error line in %s; the job goes "
            "on)\n", r->o->input, job->line, c, msg, r->o->output);
}

/* One block of the reader's lines answered through the session and appended in one write: a
 * malformed line (jobs.c's invalid) gets its error result, the others their responses (an
 * error response for a line that cannot run: too long, empty, refused by the template). Each
 * request samples from the stream of its input line, so a resumed job draws what the whole
 * job would have. */
static int answer_block(fgr_run *r, jobs_run *j, uint32_t blk, fg_err *err)
{
    size_t n = j->block.n;
    fg_request *q = calloc(n + 1, sizeof *q);
    fg_response *resp = calloc(n + 1, sizeof *resp);
    fg_job_result *res = calloc(n + 1, sizeof *res);
    uint64_t *streams = calloc(n + 1, sizeof *streams);
    uint32_t *map = calloc(n + 1, sizeof *map), m = 0;
    int rc = q && resp && res && streams && map ? FG_OK
           : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < n; i++)
        if (!j->block.jobs[i].invalid) {
            q[m] = j->block.jobs[i].req;
            streams[m] = j->block.jobs[i].line - 1;
            map[m++] = (uint32_t)i;
        }
    double t0 = fg_now();
    if (rc == FG_OK && m)
        rc = fgs_generate_streams(j->s, q, m, streams, resp, err);
    double dt = fg_now() - t0;
    for (size_t i = 0, k = 0; rc == FG_OK && i < n; i++) {
        const fg_job *job = &j->block.jobs[i];
        res[i] = (fg_job_result){job, NULL, NULL, 0, 0, "length", dt, blk};
        if (job->invalid) {
            res[i].error = job->invalid;
            res[i].error_type = "invalid_request";
            error_note(r, job, job->invalid);
            j->errors++;
            continue;
        }
        fg_response *p = &resp[k++];
        res[i].resp = p;
        res[i].prompt_tokens = p->n_prompt;
        res[i].prompt_ids = r->o->prompt_ids ? p->prompt_ids : NULL;
        if (p->status) {
            error_note(r, job, p->error);
            j->errors++;
        }
    }
    if (rc == FG_OK)
        rc = fg_job_output_append(j->outp, res, n, err);
    j->appended += rc == FG_OK ? n : 0;
    for (uint32_t i = 0; resp && i < m; i++)
        fg_response_clear(&resp[i]);
    free(q);
    free(resp);
    free(res);
    free(streams);
    free(map);
    return rc;
}

/* --prefix-cache: the pending prompts' shared prefixes computed once, before the blocks (lines
 * that will get error lines are left out). */
static int share_jobs(fgr_run *r, const fg_job_output *done, fg_err *err)
{
    fg_job_reader *rd;
    fg_job_list l = {0};
    int32_t **ids = NULL;
    uint32_t *lens = NULL, ctx = fg_engine_plan(r->e)->max_ctx;
    size_t n = 0, cap = 0;
    int rc = fg_job_reader_open(r->o->input, &rd, err);
    while (rc == FG_OK && (rc = fg_job_reader_next(rd, done, 256, &l, err)) == FG_OK && l.n) {
        for (size_t i = 0; rc == FG_OK && i < l.n; i++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                int32_t **ni = realloc(ids, cap * sizeof *ids);
                ids = ni ? ni : ids;
                uint32_t *nl = ni ? realloc(lens, cap * sizeof *lens) : NULL;
                lens = nl ? nl : lens;
                if (!nl) {
                    rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            char msg[256];
            const char *type;
            rc = prep_job(r, &l.jobs[i], ctx, &ids[n], &lens[n], msg, sizeof msg, &type, err);
            n += rc == FG_OK;
            rc = rc == 1 ? FG_OK : rc;
        }
    }
    fg_jobs_free(&l);
    fg_job_reader_close(rd);
    if (rc == FG_OK)
        rc = fg_runner_prefix_share(r->e, r->pfx, (const int32_t *const *)ids, lens, n, &r->rep,
                                    err);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    return rc;
}

/* Ctrl-C (fg_run_opts.interrupt) is honoured between blocks: what is appended is durable. */
static int interrupted(fgr_run *r, fg_err *err)
{
    if (!r->o->interrupt || !*r->o->interrupt)
        return FG_OK;
    r->rep.interrupted = 1;
    return fg_err_set(err, FG_ERR_STATE, "interrupted");
}

/* Read lines until the queue holds a block's worth (or the input ends), each sized as the
 * session will size it. */
static int refill(fgr_run *r, jobs_run *j, uint32_t bs, uint32_t ctx, fg_err *err)
{
    if (j->eof || j->nq >= bs)
        return FG_OK;
    int rc = fg_job_reader_next(j->rd, j->outp, bs - j->nq, &j->block, err);
    j->eof = rc == FG_OK && j->block.n == 0;
    for (size_t i = 0; rc == FG_OK && i < j->block.n; i++) {
        qjob *p = &j->q[j->nq++];
        p->job = j->block.jobs[i];
        memset(&j->block.jobs[i], 0, sizeof j->block.jobs[i]);
        int32_t *ids;
        char msg[256];
        const char *type;
        rc = prep_job(r, &p->job, ctx, &ids, &p->P, msg, sizeof msg, &type, err);
        free(ids);
        p->G = job_max_new(r, &p->job);
        p->seqs = rc == FG_OK ? (p->job.req.n ? p->job.req.n : 1) : 0;
        rc = rc == 1 ? FG_OK : rc;
    }
    fg_jobs_free(&j->block);
    return rc;
}

/* Move into j->block, in queue order, the waiting lines whose sequences together fit a block
 * and keep the longest prompt + the largest generation within ctx (lines that get an error
 * result go with any); the rest stay queued. */
static int take_block(jobs_run *j, uint32_t bs, uint32_t ctx, fg_err *err)
{
    uint32_t P = 0, G = 0, n = 0;
    size_t keep = 0, m = 0;
    if (!(j->block.jobs = calloc(j->nq + 1, sizeof *j->block.jobs)))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->nq; i++) {
        qjob *p = &j->q[i];
        uint32_t P2 = p->P > P ? p->P : P, G2 = p->G > G ? p->G : G;
        if (!p->seqs || (n + p->seqs <= bs && (uint64_t)P2 + G2 <= ctx) || (!n && !m)) {
            j->block.jobs[m++] = p->job;
            if (p->seqs)
                P = P2, G = G2, n += p->seqs;
        } else {
            j->q[keep++] = *p;
        }
    }
    j->block.n = m;
    j->nq = keep;
    return FG_OK;
}

static int jobs_loop(fgr_run *r, jobs_run *j, uint64_t total, fg_err *err)
{
    uint32_t bs = fg_session_info_get(j->s)->block_seqs;
    uint32_t ctx = fg_session_info_get(j->s)->max_ctx;
    fgr_tick tc = {{0}, 0};
    fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, total, r->o->quiet);
    fgs_set_tick(j->s, &tc);
    double t0 = fg_now();
    int rc = FG_OK;
    /* a block of lines a call (a line's n choices are n sequences): those of the queue that
     * fit together; the rest wait for the next, with the lines read meanwhile */
    if (!(j->q = calloc(bs + 1, sizeof *j->q)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t blk = 0; rc == FG_OK; blk++) {
        if ((rc = interrupted(r, err)) || (rc = refill(r, j, bs, ctx, err)) || !j->nq)
            break;
        if ((rc = take_block(j, bs, ctx, err)) == FG_OK)
            rc = answer_block(r, j, blk, err);
        fg_jobs_free(&j->block);
    }
    if (rc == FG_ERR_STATE && r->o->interrupt && *r->o->interrupt)
        r->rep.interrupted = 1;
    fgs_set_tick(j->s, NULL);
    fg_progress_end(&tc.bar);
    r->rep.total_s = fg_now() - t0;
    return rc;
}

/* What was read must have been answered: a job never ends with prompts silently unread. */
static int check_answered(fgr_run *r, jobs_run *j, size_t n_done, fg_err *err)
{
    size_t total;
    fg_job_reader_count(j->rd, NULL, &total, NULL, NULL);
    if (n_done + j->appended == total)
        return FG_OK;
    return fg_err_set(err, FG_ERR_CORRUPT, "%s: %zu prompts read, %zu answered (%zu already "
                      "in %s): nothing should be left", r->o->input, total,
                      (size_t)(n_done + j->appended), n_done, r->o->output);
}

static void free_jobs_run(jobs_run *j)
{
    fg_jobs_free(&j->block);
    for (size_t i = 0; j->q && i < j->nq; i++)
        fg_job_clear(&j->q[i].job);
    free(j->q);
    fg_job_reader_close(j->rd);
}

/* The job's session, sized as the first pass found (a context of P + G; blocks of the
 * policy's choice up to --max-block, else the pending lines, at most 256); from then on the
 * job's run is the session's (its engine, prefix cache and report). */
static int open_session(fgr_run *r, jobs_run *j, uint32_t P, uint32_t G, size_t pending,
                        fg_err *err)
{
    fg_session_opts so = {0};
    fg_tok_free(r->tok); /* the first pass's store: a process holds a store once */
    fgr_model_close(r);
    fg_store_close(r->store);
    r->tok = NULL, r->store = NULL;
    so.run = *r->o;
    so.max_ctx = P + G;
    so.max_seqs = r->o->max_block ? r->o->max_block : pending && pending < 256
                                                    ? (uint32_t)pending : 256;
    so.interrupt = r->o->interrupt;
    return fg_session_open(&so, &j->s, err);
}

int fgr_run_jobs(fgr_run *r, fg_err *err)
{
    jobs_run j = {0};
    fg_job_output_info info;
    int rc = fg_job_output_open(r->o->output, r->o->resume ? FG_JOB_RESUME : 0, &j.outp, &info,
                                err);
    if (rc == FG_OK)
        rc = fg_job_reader_open(r->o->input, &j.rd, err);
    size_t total = 0, n_done = 0;
    int complete = 0;
    if (rc == FG_OK)
        fg_job_reader_count(j.rd, j.outp, &total, &n_done, &complete);
    if (rc == FG_OK && !r->o->quiet && info.n_results)
        fprintf(r->log, "fg-infer: resuming: %zu results already in %s%s%s\n", info.n_results,
                r->o->output, info.aside_path[0] ? "; damaged lines moved to " : "",
                info.aside_path);
    if (rc == FG_OK && !complete && !r->o->quiet && isatty(0) && !strcmp(r->o->input, "-"))
        fprintf(r->log, "fg-infer: reading JSONL prompts from the terminal (end with Ctrl-D)\n");
    if (rc == FG_OK && complete && n_done == total) {
        if (!r->o->quiet)
            fprintf(r->log, "fg-infer: nothing to do: every prompt of %s is in %s\n",
                    r->o->input, r->o->output);
        goto done;
    }
    uint32_t maxP = 0, maxG = 0, P, G;
    uint64_t new_tokens = 0;
    if (rc == FG_OK)
        rc = fgr_open_store(r, err);
    if (rc == FG_OK && complete) /* a file: size the run by its prompts */
        rc = fgr_size_jobs(r, j.outp, &maxP, &maxG, &new_tokens, err);
    if (rc == FG_OK && complete && !maxP) /* every line gets an error line: a tiny engine */
        maxP = maxG = 1;
    fgr_jobs_shape(maxP, maxG, r->max_pos ? fgr_context_limit(r) : 0, &P, &G);
    if (rc == FG_OK)
        rc = open_session(r, &j, P, G, complete ? total - n_done : 0, err);
    fgr_run *sr = j.s ? fgs_run(j.s) : r; /* the session's run: its engine, cache, report */
    if (rc == FG_OK) /* OpenAI lines: the store's name as their model, the tokens' spelling */
        rc = fg_job_output_set_openai(j.outp, fg_session_info_get(j.s)->model_name,
                                      fg_oai_tok_piece, sr->tok, err);
    if (rc == FG_OK && sr->pfx && complete)
        rc = share_jobs(sr, j.outp, err);
    if (rc == FG_OK)
        rc = jobs_loop(sr, &j, new_tokens, err);
    if (rc == FG_OK)
        rc = check_answered(sr, &j, n_done, err);
    sr->rep.total_s += sr->rep.shared_s; /* the shared pass ran before the loop's clock */
    if (rc == FG_OK)
        fgr_summary(sr);
    if (j.s)
        r->rep = sr->rep;
    if (rc == FG_OK && j.errors && !r->o->quiet)
        fprintf(r->log, "fg-infer: %" PRIu64 " of the prompts could not run: their error lines "
                "are in %s\n", j.errors, r->o->output);
done:
    r->rep.saved = j.outp ? fg_job_output_count(j.outp) : 0;
    free_jobs_run(&j);
    fg_session_close(j.s);
    fg_err cerr;
    int rc2 = fg_job_output_close(j.outp, &cerr);
    if (rc == FG_OK && rc2) {
        *err = cerr;
        rc = rc2;
    }
    return rc;
}
