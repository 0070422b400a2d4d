/* fgpy.c - libfgpy.so, what the Python package (python/fg/) loads with ctypes: a handful of flat
 * functions over libfg's public API, so that Python never mirrors the large, changing option
 * structs (fg_run_opts, fg_engine_opts, fg_sample_params) by hand.
 *
 * Thin by rule: every behaviour lives in libfg. This file only
 *   - fills fg_session_opts / fg_run_opts from a small flat struct with fg-infer's defaults
 *     (tools/fg_infer.c parse_args: the default policy, the int8 Linear path, top_p 1, the
 *     policy search unless fixed), so a Python LLM and fg-infer with the same store and flags
 *     run the same engine;
 *   - turns flat requests (fgpy_request: plain C types only) into jobs/request.h's fg_request;
 *   - owns the interrupt flag a session is opened with (fgpy_interrupt sets it from another
 *     thread: Python's Ctrl-C handler runs on the main thread while a worker thread is in
 *     fg_session_generate, so the engine stops at its next step);
 *   - runs fg-inspect's own code (tools/inspect_store.c, compiled in here) in a forked child
 *     whose standard output is a pipe, so fg.inspect returns exactly the JSON that
 *     `fg-inspect --json` prints, with no second implementation.
 * The structs Python does read directly (fg_response, fg_choice, fg_token_lp, fg_session_info,
 * fg_err) are checked at import against fgpy_layout's sizes and offsets: a header change makes
 * the import fail with a message, never read garbage.
 *
 * Ownership: fgpy_open's handle is the caller's (fgpy_close); strings and arrays returned
 * through out-pointers are the caller's (fgpy_free); responses are cleared with
 * fg_response_clear (libfg).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "convert.h"
#include "convert_opts.h"
#include "fg_version.h"
#include "inspect_store.h"
#include "request.h"
#include "runner.h"
#include "session.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- options ---- */

typedef struct fgpy_opts {
    const char *store;
    uint64_t ram_budget;      /* bytes, 0: as fg-infer (at most the RAM available now) */
    uint64_t gpu_budget;      /* bytes, 0: the backend's default */
    int policy_auto;          /* 1 auto, 0 fixed (FlexGen's default placement), -1 fg-infer's */
    int threads;              /* 0: the CPUs online */
    int backend;              /* FG_BACKEND_CPU, _SIM, _CUDA */
    const char *offload_dir;  /* NULL: $TMPDIR */
    const char *prefix_cache; /* NULL: none */
    uint64_t prefix_budget;   /* bytes, 0: no bound */
    uint32_t max_ctx, max_seqs;
    uint32_t max_new;         /* default max_tokens */
    int allow_lossy;
    int compress_weight;      /* 4-bit weights at load */
    int quiet;                /* no notices or progress on stderr */
    int compute;              /* 0: fg-infer's default (int8); else 1 + FG_COMPUTE_* */
    int score_room;           /* room in the RAM budget for scoring's shared rows
                                 (fg_engine_opts.score_room) */
} fgpy_opts;

/* fg_run_opts as fg-infer fills it before its flags (parse_args), then o's fields. */
static void run_opts(const fgpy_opts *o, fg_run_opts *r)
{
    memset(r, 0, sizeof *r);
    r->model = o->store;
    r->max_new = o->max_new ? o->max_new : 16;
    r->sample.top_p = 1.0f;
    r->eo.policy = fg_policy_default();
    r->eo.compute = o->compute > 0 ? (fg_compute)(o->compute - 1) : FG_COMPUTE_INT8;
    r->eo.ram_budget = o->ram_budget;
    r->eo.gpu_budget = o->gpu_budget;
    r->eo.threads = o->threads;
    r->eo.backend = (fg_backend_kind)o->backend;
    r->eo.offload_dir = o->offload_dir;
    r->eo.score_room = o->score_room;
    r->eo.policy.compress_weight = o->compress_weight;
    if (o->backend != FG_BACKEND_CPU)
        r->attn_search = 1; /* fg-infer without --cpu-cache-compute: where it predicts faster */
    r->policy_auto = o->policy_auto;
    r->allow_lossy = o->allow_lossy;
    r->cache_choice = o->allow_lossy ? -1 : 0;
    r->prefix_cache = o->prefix_cache;
    r->prefix_budget = o->prefix_budget;
    r->quiet = o->quiet;
}

/* ---- sessions ---- */

typedef struct fgpy {
    fg_session *s;
    volatile sig_atomic_t stop;
} fgpy;

EXPORT int fgpy_open(const fgpy_opts *o, fgpy **out, fg_err *err)
{
    *out = NULL;
    fgpy *h = calloc(1, sizeof *h);
    if (!h)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_session_opts so;
    memset(&so, 0, sizeof so);
    run_opts(o, &so.run);
    so.max_ctx = o->max_ctx;
    so.max_seqs = o->max_seqs;
    so.interrupt = &h->stop;
    int rc = fg_session_open(&so, &h->s, err);
    if (rc) {
        free(h);
        return rc;
    }
    *out = h;
    return FG_OK;
}

EXPORT void fgpy_close(fgpy *h)
{
    if (!h)
        return;
    fg_session_close(h->s);
    free(h);
}

/* Safe from any thread (and from a signal handler). */
EXPORT void fgpy_interrupt(fgpy *h) { h->stop = 1; }

EXPORT const fg_session_info *fgpy_info(fgpy *h) { return fg_session_info_get(h->s); }

EXPORT void fgpy_stats(fgpy *h, uint64_t out[7], double *busy_s)
{
    fg_session_stats st;
    fg_session_stats_get(h->s, &st);
    out[0] = st.requests, out[1] = st.errors, out[2] = st.prompt_tokens;
    out[3] = st.completion_tokens, out[4] = st.blocks;
    out[5] = st.engine.prefill_rows, out[6] = st.engine.rows_shared;
    *busy_s = st.busy_s;
}

EXPORT void fgpy_free(void *p) { free(p); }

/* ---- generation ---- */

typedef struct fgpy_request {
    const char *prompt;
    const int32_t *prompt_ids;
    uint32_t n_prompt_ids;
    const char *messages;        /* JSON array */
    const char *chat_kwargs;     /* JSON object or NULL */
    uint32_t max_tokens, min_tokens;
    int ignore_eos;
    double temperature, top_p, min_p;
    int32_t top_k;
    double presence_penalty, frequency_penalty, repetition_penalty;
    uint64_t seed;
    int has_seed;
    uint32_t n;
    const char *stops[FG_REQ_MAX_STOPS];
    int n_stops;
    int logprobs;                /* -1 none, else top alternatives */
    int echo;
    int stream;
} fgpy_request;

static int sample_params(const fgpy_request *p, fg_sample_params *sp, fg_err *err)
{
    memset(sp, 0, sizeof *sp);
    if (p->top_k < 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "top_k must be >= 0 (0: off), not %d",
                          (int)p->top_k);
    sp->temperature = (float)p->temperature;
    sp->top_p = (float)p->top_p;
    sp->top_k = (uint32_t)p->top_k;
    sp->seed = p->seed;
    sp->min_p = (float)p->min_p;
    sp->presence_penalty = (float)p->presence_penalty;
    sp->frequency_penalty = (float)p->frequency_penalty;
    sp->repetition_penalty = (float)p->repetition_penalty;
    return FG_OK;
}

static int to_request(const fgpy_request *p, fg_request *q, fg_err *err)
{
    memset(q, 0, sizeof *q);
    q->prompt = p->prompt;
    q->prompt_ids = p->prompt_ids;
    q->n_prompt_ids = p->n_prompt_ids;
    q->messages = p->messages;
    q->chat_kwargs = p->chat_kwargs;
    q->max_tokens = p->max_tokens;
    q->min_tokens = p->min_tokens;
    q->ignore_eos = p->ignore_eos;
    q->has_seed = p->has_seed;
    q->n = p->n;
    if (p->n_stops < 0 || p->n_stops > FG_REQ_MAX_STOPS)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "stop: at most %d stop strings",
                          FG_REQ_MAX_STOPS);
    for (int i = 0; i < p->n_stops; i++)
        q->stops[i] = p->stops[i];
    q->n_stops = p->n_stops;
    q->logprobs = p->logprobs;
    q->echo = p->echo;
    q->stream = p->stream;
    int rc = sample_params(p, &q->sample, err);
    /* every sampling field comes from SamplingParams: none takes the session's default */
    q->min_p = q->sample.min_p;
    q->presence_penalty = q->sample.presence_penalty;
    q->frequency_penalty = q->sample.frequency_penalty;
    q->repetition_penalty = q->sample.repetition_penalty;
    q->set = FG_REQ_SET_TEMPERATURE | FG_REQ_SET_TOP_P | FG_REQ_SET_TOP_K | FG_REQ_SET_MIN_P |
             FG_REQ_SET_PRESENCE | FG_REQ_SET_FREQUENCY | FG_REQ_SET_REPETITION |
             (p->has_seed ? FG_REQ_SET_SEED : 0);
    return rc ? rc : fg_request_check(q, err);
}

/* Answer reqs[0..n) into resp[0..n) (each cleared by the caller with fg_response_clear). A
 * request whose fields are refused gets its 400 response here, as the session answers the
 * requests it refuses; the others run. The interrupt flag is cleared first: a Ctrl-C stops
 * this call, not the next one. */
EXPORT int fgpy_generate(fgpy *h, const fgpy_request *reqs, uint32_t n, fg_piece_fn on_piece,
                         void *ctx, fg_response *resp, fg_err *err)
{
    fg_request *q = calloc(n ? n : 1, sizeof *q);
    uint32_t *map = calloc(n ? n : 1, sizeof *map);
    fg_response *sub = calloc(n ? n : 1, sizeof *sub);
    if (!q || !map || !sub) {
        free(q), free(map), free(sub);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        fg_err e;
        memset(&resp[i], 0, sizeof resp[i]);
        if (to_request(&reqs[i], &q[m], &e)) {
            resp[i].status = 400;
            resp[i].error_type = "invalid_request_error";
            snprintf(resp[i].error, sizeof resp[i].error, "%s", e.msg);
        } else {
            map[m++] = i;
        }
    }
    h->stop = 0;
    int rc = m ? fg_session_generate(h->s, q, m, on_piece, ctx, sub, err) : FG_OK;
    for (uint32_t j = 0; j < m; j++)
        resp[map[j]] = sub[j];
    free(q), free(map), free(sub);
    return rc;
}

/* ---- scoring and the tokenizer ---- */

/* ctx[i] a text, or NULL with ctx_ids[i][0..n_ctx_ids[i]) the context's ids as given (an
 * empty context scored from the prefix token, as lm-eval does); cont[i] a text, or NULL with
 * cont_ids[i][0..n_cont_ids[i]) the continuation's ids as given (cont_ids itself may be NULL
 * when every continuation is a text). A text context with a text continuation is split by
 * lm-eval's rule (session.h); ids are scored as they are. */
EXPORT int fgpy_score(fgpy *h, const char *const *ctx, const int32_t *const *ctx_ids,
                      const uint32_t *n_ctx_ids, const char *const *cont,
                      const int32_t *const *cont_ids, const uint32_t *n_cont_ids, uint32_t n,
                      fg_score_res *out, fg_err *err)
{
    fg_score_req *r = calloc(n ? n : 1, sizeof *r);
    if (!r)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        r[i].context = ctx[i], r[i].continuation = cont[i];
        if (!ctx[i])
            r[i].context_ids = ctx_ids[i], r[i].n_context_ids = n_ctx_ids[i];
        if (!cont[i] && cont_ids)
            r[i].cont_ids = cont_ids[i], r[i].n_cont_ids = n_cont_ids[i];
    }
    h->stop = 0;
    int rc = fg_session_score(h->s, r, n, out, err);
    free(r);
    return rc;
}

EXPORT int fgpy_score_rolling(fgpy *h, const char *text, double *lp, uint64_t *n, fg_err *err)
{
    h->stop = 0;
    return fg_session_score_rolling(h->s, text, lp, n, err);
}

EXPORT int fgpy_tokenize(fgpy *h, const char *text, int add_special, int32_t **ids, uint32_t *n,
                         fg_err *err)
{
    return fg_session_tokenize(h->s, text, add_special, ids, n, err);
}

EXPORT int fgpy_detokenize(fgpy *h, const int32_t *ids, uint32_t n, int skip_special,
                           char **text, fg_err *err)
{
    return fg_session_detokenize(h->s, ids, n, skip_special, text, err);
}

EXPORT int fgpy_chat_render(fgpy *h, const char *messages, const char *kwargs, char **text,
                            fg_err *err)
{
    return fg_session_chat_render(h->s, messages, kwargs, text, err);
}

/* ---- a batch file: fg-infer --input/--output (fg's lines or OpenAI Batch lines) ---- */

EXPORT int fgpy_run_jobs(const fgpy_opts *o, const char *input, const char *output, int resume,
                         const volatile sig_atomic_t *interrupt, uint64_t rep_out[4],
                         fg_err *err)
{
    fg_run_opts r;
    run_opts(o, &r);
    r.mode = FG_RUN_JOBS;
    r.input = input;
    r.output = output;
    r.resume = resume;
    r.interrupt = interrupt;
    fg_run_report rep;
    memset(&rep, 0, sizeof rep);
    int rc = fg_run(&r, &rep, err);
    rep_out[0] = rep.prompts, rep_out[1] = rep.tokens;
    rep_out[2] = (uint64_t)rep.interrupted, rep_out[3] = rep.saved;
    return rc;
}

/* ---- conversion ---- */

EXPORT int fgpy_convert(const char *src, const char *dst, int weight_bits, uint32_t group_size,
                        int group_axis, const char *tokenizer_dir,
                        void (*progress)(void *, uint64_t, uint64_t),
                        const volatile int *interrupt, double rep_out[4], fg_err *err)
{
    fg_convert_opts o;
    memset(&o, 0, sizeof o);
    o.interrupt = interrupt; /* Ctrl-C: stops at the next chunk, no store left (convert.h) */
    o.compress_weight = weight_bits;
    o.group_size = group_size;
    o.group_axis = group_axis;
    o.tokenizer_dir = tokenizer_dir;
    o.progress = progress;
    int rc = fg_convert_opts_check(&o, err);
    if (rc)
        return rc;
    if (group_axis < 0)
        o.group_axis = 0;
    fg_convert_report rep;
    memset(&rep, 0, sizeof rep);
    /* a store as the source is re-encoded (fg-convert STORE -o STORE2) */
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/store.id", src);
    if (access(probe, F_OK) == 0)
        rc = fg_convert_store(src, dst, &o, &rep, err);
    else
        rc = fg_convert_import(src, dst, &o, &rep, err);
    rep_out[0] = rep.tensors, rep_out[1] = (double)rep.source_bytes;
    rep_out[2] = (double)rep.stored_bytes, rep_out[3] = rep.seconds;
    return rc;
}

/* Random weights at a known shape with real tokenizer files (fg-convert synth): for tests and
 * benchmarks. */
EXPORT int fgpy_synth(const char *model, const char *dst, uint64_t seed, const char *tokenizer_dir,
                      fg_err *err)
{
    fg_convert_opts o;
    memset(&o, 0, sizeof o);
    o.tokenizer_dir = tokenizer_dir;
    fg_convert_report rep;
    return fg_convert_synth(model, dst, seed, &o, &rep, err);
}

/* ---- fg-inspect --json, in a child process ---- */

static int read_all(int fd, char **buf, size_t *len)
{
    size_t cap = 1 << 16;
    *len = 0;
    *buf = malloc(cap);
    for (;;) {
        if (!*buf)
            return -1;
        if (*len + 1 >= cap) {
            char *nb = realloc(*buf, cap *= 2);
            if (!nb) {
                free(*buf);
                *buf = NULL;
                return -1;
            }
            *buf = nb;
        }
        ssize_t k = read(fd, *buf + *len, cap - *len - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        *len += (size_t)k;
    }
    (*buf)[*len] = '\0';
    return 0;
}

/* *json (the caller's, fgpy_free): fg-inspect --json's output for the store or file at path;
 * on failure its one-line error in err (FG_ERR_INVALID_ARG: the child could not report). */
EXPORT int fgpy_inspect(const char *path, int verify, int chunks, char **json, fg_err *err)
{
    int out[2], er[2];
    *json = NULL;
    if (pipe2(out, O_CLOEXEC))
        return fg_err_set(err, FG_ERR_IO, "inspect: pipe: %s", strerror(errno));
    if (pipe2(er, O_CLOEXEC)) {
        close(out[0]), close(out[1]);
        return fg_err_set(err, FG_ERR_IO, "inspect: pipe: %s", strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(out[0]), close(out[1]), close(er[0]), close(er[1]);
        return fg_err_set(err, FG_ERR_IO, "inspect: fork: %s", strerror(e));
    }
    if (pid == 0) { /* the child: fg-inspect's code with stdout and stderr on the pipes */
        dup2(out[1], 1);
        dup2(er[1], 2);
        int rc = inspect_store(path, 1, verify, chunks);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(out[1]);
    close(er[1]);
    char *o = NULL, *e = NULL;
    size_t on = 0, en = 0;
    /* stderr is a line at most: read stdout to its end first, then stderr */
    int rr = read_all(out[0], &o, &on);
    rr |= read_all(er[0], &e, &en);
    close(out[0]);
    close(er[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = FG_OK;
    if (rr) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    } else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        const char *m = e && strncmp(e, "fg-inspect: ", 12) == 0 ? e + 12 : e ? e : "";
        size_t ml = strcspn(m, "\n");
        rc = fg_err_set(err, strstr(m, "No such file") || strstr(m, "not found") ||
                                 strstr(m, "does not exist") ? FG_ERR_NOT_FOUND
                                                              : FG_ERR_CORRUPT,
                        "%.*s", (int)(ml < 300 ? ml : 300),
                        *m ? m : "fg-inspect failed");
    } else {
        *json = o;
        o = NULL;
    }
    free(o);
    free(e);
    return rc;
}

/* ---- the layout Python checks at import ---- */

#define OFF(t, f) (uint64_t) offsetof(t, f)
/* Writes the numbers below into out (cap entries); returns how many there are. */
EXPORT int fgpy_layout(uint64_t *out, int cap)
{
    const uint64_t v[] = {
        sizeof(fg_err), OFF(fg_err, msg),
        sizeof(fg_token_lp), OFF(fg_token_lp, logprob),
        sizeof(fg_choice), OFF(fg_choice, text), OFF(fg_choice, tokens),
        OFF(fg_choice, n_tokens), OFF(fg_choice, finish), OFF(fg_choice, logprob),
        OFF(fg_choice, top), OFF(fg_choice, n_top),
        sizeof(fg_response), OFF(fg_response, prompt_ids), OFF(fg_response, n_prompt),
        OFF(fg_response, prompt_logprob), OFF(fg_response, prompt_top),
        OFF(fg_response, choices), OFF(fg_response, n_choices),
        OFF(fg_response, completion_tokens), OFF(fg_response, seconds),
        OFF(fg_response, status), OFF(fg_response, error_type), OFF(fg_response, error),
        sizeof(fg_score_res), OFF(fg_score_res, logprob), OFF(fg_score_res, is_greedy),
        OFF(fg_score_res, n_tokens), OFF(fg_score_res, status), OFF(fg_score_res, error),
        sizeof(fg_session_info), OFF(fg_session_info, model_name),
        OFF(fg_session_info, store_path), OFF(fg_session_info, max_ctx),
        OFF(fg_session_info, block_seqs), OFF(fg_session_info, vocab_size),
        OFF(fg_session_info, has_chat_template), OFF(fg_session_info, bos_id),
        OFF(fg_session_info, eos_id),
        sizeof(fgpy_opts), sizeof(fgpy_request), OFF(fgpy_request, stops),
        OFF(fgpy_request, stream),
    };
    int n = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < n && i < cap; i++)
        out[i] = v[i];
    return n;
}

EXPORT const char *fgpy_version(void) { return fg_version_string(); }
