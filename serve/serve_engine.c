/* serve_engine.c - the one thread that owns the session (runner/session.h: one thread at a
 * time), and the queue the HTTP threads feed it.
 *
 * Design:
 *  1. fg_serve_run's thread opens the session (the model loads while /health answers 503; the
 *     policy search's GLPK keeps a per-thread environment, which lives as long as the main
 *     thread), makes the table of token strings and hands the session to the engine thread,
 *     which alone uses it from then on. The engine thread loops: gather (a block smaller than
 *     the last waits briefly for the requests still coming: gather_locked), take the queued
 *     tokenizer jobs and as many generation jobs as fit one block (sequences = prompts x n
 *     summed; the first job always, however large: the session splits it), run them with one
 *     fg_session_generate, answer each. Requests arriving while a block runs wait in the queue
 *     and join the next block (block-level batching; joining at token boundaries would need
 *     the session to admit sequences into a running block, which session.h does not offer).
 *  2. Everything a job shares with its HTTP thread (stream bytes, done, cancelled) is under
 *     srv.mu; each job has its own condition variable. A job has two references, the HTTP
 *     side's and the engine's; the last release frees it, so a client that leaves while its
 *     request runs frees nothing the engine still writes to.
 *  3. Streaming: on_piece (on this thread) formats the piece as a server-sent event outside the
 *     lock and appends it to the job's buffer; the HTTP thread's reader sends it. A job whose
 *     client left (cancelled) makes on_piece return non-zero: the session stops its choices.
 *  4. Response bodies are made on this thread (the session's responses are read here alone);
 *     the HTTP thread only sends them.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_int.h"

double srv_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

srv_job *srv_job_new(srv_job_kind kind)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->kind = kind;
    j->refs = 1;
    pthread_cond_init(&j->cond, NULL);
    j->t_queued = srv_now();
    return j;
}

void srv_job_release_locked(srv_job *j)
{
    if (!j || --j->refs > 0)
        return;
    for (uint32_t i = 0; j->resp && i < j->body.n_reqs; i++)
        fg_response_clear(&j->resp[i]);
    free(j->resp);
    free(j->first_sent);
    srv_body_clear(&j->body);
    srv_tok_body_clear(&j->tok);
    free(j->ids);
    srv_out_free(j->out);
    free(j->sbuf);
    pthread_cond_destroy(&j->cond);
    free(j);
}

static uint32_t job_seqs(const srv_job *j)
{
    return j->kind == SRV_JOB_GENERATE ? j->body.n_reqs * (j->body.n ? j->body.n : 1) : 0;
}

int srv_enqueue_locked(srv *v, srv_job *j)
{
    if (!v->loaded || v->stopping || v->load_failed)
        return 503;
    uint32_t maxq = v->o.max_queue ? v->o.max_queue : 256;
    if (v->queued >= maxq)
        return 429;
    j->refs++;
    j->next = NULL;
    if (v->tail)
        v->tail->next = j;
    else
        v->head = j;
    v->tail = j;
    v->queued++;
    pthread_cond_signal(&v->cond);
    return 0;
}

/* Append bytes to a job's stream (under mu). */
static void stream_put_locked(srv_job *j, const char *s)
{
    size_t n = strlen(s);
    if (j->slen + n + 1 > j->scap) {
        size_t cap = (j->slen + n + 1) * 2;
        char *b = realloc(j->sbuf, cap);
        if (!b)
            return; /* the client sees a shorter stream; the request still ends */
        j->sbuf = b;
        j->scap = cap;
    }
    memcpy(j->sbuf + j->slen, s, n + 1);
    j->slen += n;
}

static void finish_locked(srv_job *j)
{
    j->done = 1;
    pthread_cond_broadcast(&j->cond);
}

/* ---- tokenizer jobs ---- */

static void answer(srv_job *j, int status, const char *type, const char *param, const char *msg,
                   json_t *ok)
{
    if (ok) {
        j->status = 200;
        j->out = json_dumps(ok, JSON_COMPACT);
        json_decref(ok);
        if (j->out)
            return;
        msg = "out of memory";
        status = 500;
    }
    srv_error e;
    srv_error_set(&e, status, type, param, "%s", msg);
    j->status = status;
    j->out = srv_out_error(&e);
}

static void run_tokenize(srv *v, srv_job *j)
{
    fg_err err;
    char *text = NULL;
    int32_t *ids = NULL;
    uint32_t n = 0;
    const char *prompt = j->tok.prompt;
    if (j->tok.messages) {
        if (fg_session_chat_render(v->s, j->tok.messages, NULL, &text, &err))
            return answer(j, 400, "invalid_request_error", "messages", err.msg, NULL);
        prompt = text;
    }
    if (fg_session_tokenize(v->s, prompt, j->tok.add_special, &ids, &n, &err)) {
        free(text);
        return answer(j, 400, "invalid_request_error", "prompt", err.msg, NULL);
    }
    json_t *o = json_object(), *a = json_array(), *strs = json_array();
    for (uint32_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(ids[i]));
        if ((uint32_t)ids[i] < v->vocab.n)
            json_array_append_new(strs, srv_json_text(v->vocab.text[ids[i]],
                                                      v->vocab.len[ids[i]]));
    }
    json_object_set_new(o, "count", json_integer(n));
    json_object_set_new(o, "max_model_len", json_integer(v->info.max_ctx));
    json_object_set_new(o, "tokens", a);
    if (j->tok.token_strs)
        json_object_set_new(o, "token_strs", strs);
    else
        json_decref(strs);
    free(ids);
    free(text);
    answer(j, 0, NULL, NULL, NULL, o);
}

static void run_detokenize(srv *v, srv_job *j)
{
    fg_err err;
    char *text = NULL;
    if (fg_session_detokenize(v->s, j->ids, j->n_ids, 0, &text, &err))
        return answer(j, 400, "invalid_request_error", "tokens", err.msg, NULL);
    json_t *o = json_object();
    json_object_set_new(o, "prompt", srv_json_text(text, strlen(text)));
    free(text);
    answer(j, 0, NULL, NULL, NULL, o);
}

/* ---- generation ---- */

typedef struct gen_ctx {
    srv *v;
    srv_job **job_of;  /* [requests] */
    uint32_t *prompt_of;
} gen_ctx;

static void out_ctx(const srv *v, const srv_job *j, srv_out_ctx *c)
{
    c->model = v->model_name;
    c->id = j->id;
    c->created = j->created;
    c->vocab = &v->vocab;
}

/* With echo, a streamed choice starts with the prompt's text: as given, or its tokens' text
 * (as the writers put it first in a whole response). NULL without echo. */
static char *echo_chunk(srv *v, const srv_job *j, const srv_out_ctx *c, uint32_t p,
                        uint32_t index)
{
    const fg_request *q = &j->body.reqs[p];
    if (!q->echo)
        return NULL;
    if (q->prompt)
        return srv_out_chunk(c, &j->body, index, q->prompt, strlen(q->prompt), NULL, NULL, 0,
                             FG_FINISH_NONE, 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (uint32_t i = 0; f && i < q->n_prompt_ids; i++) {
        const char *b;
        size_t n;
        srv_vocab_piece(&v->vocab, q->prompt_ids[i], &b, &n);
        fwrite(b, 1, n, f);
    }
    if (!f || fclose(f))
        return NULL;
    char *ev = srv_out_chunk(c, &j->body, index, buf, len, NULL, NULL, 0, FG_FINISH_NONE, 1);
    free(buf);
    return ev;
}

static int on_piece(void *ctx, uint32_t req, uint32_t choice, const char *piece, size_t len,
                    const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids, int finish)
{
    gen_ctx *g = ctx;
    srv *v = g->v;
    srv_job *j = g->job_of[req];
    uint32_t index = g->prompt_of[req] * j->body.n + choice;
    double now = srv_now();
    char *ev = NULL;
    pthread_mutex_lock(&v->mu);
    int cancelled = j->cancelled, first = !j->first_sent[index];
    if (n_ids) {
        if (j->t_first == 0) {
            j->t_first = now;
            srv_hist_add(&v->ttft, now - j->t_queued);
        } else {
            srv_hist_add(&v->itl, (now - j->t_last) / n_ids);
        }
        j->t_last = now;
    }
    pthread_mutex_unlock(&v->mu);
    if (cancelled)
        return 1;
    if (!j->body.stream || (!len && finish == FG_FINISH_NONE && !(lp && n_ids)))
        return 0;
    srv_out_ctx c;
    out_ctx(v, j, &c);
    char *echo = first ? echo_chunk(v, j, &c, g->prompt_of[req], index) : NULL;
    /* the session streams each token's own log-prob, not its alternatives */
    ev = srv_out_chunk(&c, &j->body, index, piece, len, ids, lp, n_ids, finish,
                       first && !echo);
    pthread_mutex_lock(&v->mu);
    if (echo)
        stream_put_locked(j, echo);
    free(echo);
    if (ev) {
        stream_put_locked(j, ev);
        j->first_sent[index] = 1;
        j->any_piece = 1;
        pthread_cond_broadcast(&j->cond);
    }
    cancelled = j->cancelled;
    pthread_mutex_unlock(&v->mu);
    free(ev);
    return cancelled;
}

/* The first failed response of a job, or NULL. */
static const fg_response *failed(const srv_job *j)
{
    for (uint32_t i = 0; i < j->body.n_reqs; i++)
        if (j->resp[i].status)
            return &j->resp[i];
    return NULL;
}

static void error_of(const fg_response *r, srv_error *e)
{
    srv_error_set(e, r->status, r->error_type ? r->error_type
                  : r->status >= 500 ? "server_error" : "invalid_request_error", NULL, "%s",
                  r->error[0] ? r->error : "the request failed");
}

/* Answer one generation job after its block (the engine thread, outside mu). */
static void answer_generate(srv *v, srv_job *j)
{
    srv_out_ctx c;
    out_ctx(v, j, &c);
    const fg_response *bad = failed(j);
    char *body = NULL, *tail = NULL, *usage = NULL;
    srv_error e;
    for (uint32_t i = 0; i < j->body.n_reqs; i++) {
        j->prompt_tokens += j->resp[i].n_prompt;
        j->completion_tokens += j->resp[i].completion_tokens;
    }
    if (bad)
        error_of(bad, &e);
    if (!j->body.stream) {
        if (!bad)
            body = srv_out_response(&c, &j->body, j->resp);
    } else if (j->body.include_usage && !bad) {
        usage = srv_out_usage_chunk(&c, &j->body, j->prompt_tokens, j->completion_tokens);
    }
    if (bad)
        tail = srv_out_error(&e);
    pthread_mutex_lock(&v->mu);
    v->prompt_tokens += j->prompt_tokens;
    v->completion_tokens += j->completion_tokens;
    srv_hist_add(&v->e2e, srv_now() - j->t_queued);
    if (!j->body.stream) {
        j->status = bad ? bad->status : body ? 200 : 500;
        j->out = bad ? tail : body ? body : srv_out_error(&(srv_error){.status = 500,
                                                    .type = "server_error",
                                                    .message = "out of memory"});
        tail = NULL;
    } else if (bad && !j->any_piece) { /* nothing sent yet: a plain error response */
        j->status = bad->status;
        j->out = tail;
        tail = NULL;
    } else {
        if (bad) {
            stream_put_locked(j, "data: ");
            stream_put_locked(j, tail);
            stream_put_locked(j, "\n\n");
        }
        if (usage)
            stream_put_locked(j, usage);
        stream_put_locked(j, "data: [DONE]\n\n");
        j->status = 200;
    }
    finish_locked(j);
    pthread_mutex_unlock(&v->mu);
    srv_out_free(tail);
    free(usage);
}

static void run_generate(srv *v, srv_job **jobs, uint32_t nj)
{
    uint32_t total = 0, at = 0;
    for (uint32_t i = 0; i < nj; i++)
        total += jobs[i]->body.n_reqs;
    fg_request *reqs = calloc(total, sizeof *reqs);
    fg_response *resp = calloc(total, sizeof *resp);
    gen_ctx g = {v, calloc(total, sizeof(srv_job *)), calloc(total, sizeof(uint32_t))};
    fg_err err = {0};
    int rc = FG_ERR_NOMEM;
    if (reqs && resp && g.job_of && g.prompt_of) {
        for (uint32_t i = 0; i < nj; i++)
            for (uint32_t p = 0; p < jobs[i]->body.n_reqs; p++, at++) {
                reqs[at] = jobs[i]->body.reqs[p];
                g.job_of[at] = jobs[i];
                g.prompt_of[at] = p;
            }
        rc = fg_session_generate(v->s, reqs, total, on_piece, &g, resp, &err);
    }
    at = 0;
    for (uint32_t i = 0; i < nj; i++) {
        srv_job *j = jobs[i];
        j->resp = calloc(j->body.n_reqs, sizeof *j->resp);
        for (uint32_t p = 0; p < j->body.n_reqs; p++, at++) {
            if (j->resp && resp) {
                j->resp[p] = resp[at];
                memset(&resp[at], 0, sizeof resp[at]);
            }
            if (j->resp && rc == FG_ERR_NOMEM && !j->resp[p].status) {
                j->resp[p].status = 500;
                snprintf(j->resp[p].error, sizeof j->resp[p].error, "out of memory");
            }
        }
        if (j->resp)
            answer_generate(v, j);
    }
    if (rc && !v->o.quiet)
        fprintf(v->o.log, "fg-serve: a block failed: %s\n", err.msg);
    for (uint32_t i = 0; resp && i < total; i++)
        fg_response_clear(&resp[i]);
    free(resp);
    free(reqs);
    free(g.job_of);
    free(g.prompt_of);
}

/* ---- the loop ---- */

/* Take the queue's tokenizer jobs and the generation jobs that fit one block, in order. */
static uint32_t take_locked(srv *v, srv_job **tok, uint32_t *ntok, srv_job **gen)
{
    uint32_t block = v->info.block_seqs ? v->info.block_seqs : 1, seqs = 0, ngen = 0;
    srv_job **pp = &v->head, *last = NULL;
    *ntok = 0;
    while (*pp) {
        srv_job *j = *pp;
        if (j->cancelled) { /* its client left while it waited */
            *pp = j->next;
            v->queued--;
            finish_locked(j);
            srv_job_release_locked(j);
            continue;
        }
        int take = j->kind != SRV_JOB_GENERATE ||
                   (ngen == 0 || seqs + job_seqs(j) <= block);
        if (!take) {
            last = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        v->queued--;
        if (j->kind == SRV_JOB_GENERATE) {
            gen[ngen++] = j;
            seqs += job_seqs(j);
        } else {
            tok[(*ntok)++] = j;
        }
    }
    v->tail = last;
    return ngen;
}

/* The neutral token the table's decodes start with: "a" alone, else none (-1). */
static int32_t neutral_token(srv *v, char **prefix)
{
    int32_t *ids = NULL, x = -1;
    uint32_t n = 0;
    fg_err err;
    *prefix = NULL;
    if (fg_session_tokenize(v->s, "a", 0, &ids, &n, &err) == FG_OK && n == 1 &&
        fg_session_detokenize(v->s, ids, 1, 0, prefix, &err) == FG_OK)
        x = ids[0];
    free(ids);
    return x;
}

/* Each id's text as it decodes after the neutral token (decode([x, id]) less decode([x])), so a
 * SentencePiece token keeps the leading space a lone decode drops; the lone decode otherwise. */
static int make_vocab(srv *v, fg_err *err)
{
    uint32_t n = v->info.vocab_size;
    char *prefix = NULL;
    int32_t x = neutral_token(v, &prefix);
    size_t pl = prefix ? strlen(prefix) : 0;
    v->vocab.text = calloc(n ? n : 1, sizeof *v->vocab.text);
    v->vocab.len = calloc(n ? n : 1, sizeof *v->vocab.len);
    if (!v->vocab.text || !v->vocab.len) {
        free(prefix);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory for the token strings");
    }
    v->vocab.n = n;
    for (uint32_t i = 0; i < n; i++) {
        char *t = NULL;
        int32_t pair[2] = {x, (int32_t)i};
        fg_err e2;
        int ok = x >= 0 && fg_session_detokenize(v->s, pair, 2, 0, &t, &e2) == FG_OK &&
                 !strncmp(t, prefix, pl);
        if (ok)
            memmove(t, t + pl, strlen(t + pl) + 1);
        else if (free(t), t = NULL, fg_session_detokenize(v->s, pair + 1, 1, 0, &t, &e2))
            t = NULL;
        v->vocab.text[i] = t ? t : strdup("");
        if (!v->vocab.text[i]) {
            free(prefix);
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory for the token strings");
        }
        v->vocab.len[i] = strlen(v->vocab.text[i]);
    }
    free(prefix);
    return FG_OK;
}

/* One token generated at load, so that what the first block pays once (buffers, the KV file,
 * the weights' first reads) is paid before /health says ready, not by the first client. */
static void warm_up(srv *v)
{
    int32_t id = v->info.bos_id >= 0 ? v->info.bos_id : 0;
    fg_request q = {.prompt_ids = &id, .n_prompt_ids = 1, .max_tokens = 1, .n = 1,
                    .logprobs = -1};
    fg_response r = {0};
    fg_err err;
    if (fg_session_generate(v->s, &q, 1, NULL, NULL, &r, &err) == FG_OK && r.status &&
        !v->o.quiet)
        fprintf(v->o.log, "fg-serve: warm-up request refused: %s\n", r.error);
    fg_response_clear(&r);
}

void srv_open_session(srv *v)
{
    fg_err err = {0};
    fg_session *s = NULL;
    int rc = fg_session_open(&v->o.session, &s, &err);
    if (!rc) {
        v->s = s;
        v->info = *fg_session_info_get(s);
        snprintf(v->model_name, sizeof v->model_name, "%s",
                 v->info.model_name ? v->info.model_name : "fg");
        rc = make_vocab(v, &err);
        if (!rc)
            warm_up(v);
    }
    pthread_mutex_lock(&v->mu);
    if (rc) {
        v->load_failed = 1;
        v->load_err = err;
    } else {
        v->loaded = 1;
        fg_session_stats_get(s, &v->stats);
    }
    pthread_mutex_unlock(&v->mu);
}

static uint32_t queued_seqs_locked(const srv *v)
{
    uint32_t n = 0;
    for (const srv_job *j = v->head; j; j = j->next)
        n += job_seqs(j);
    return n;
}

static struct timespec after_ms(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t ns = (uint64_t)t.tv_nsec + ms * 1000000u;
    t.tv_sec += (time_t)(ns / 1000000000u);
    t.tv_nsec = (long)(ns % 1000000000u);
    return t;
}

static int before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Clients answered together by the last block send their next requests some moments apart:
 * while fewer sequences are queued than the last block ran (and than a block holds), wait for
 * more as long as they keep coming (batch_wait_ms since the last arrival, 10 x batch_wait_ms at
 * most), so one early request does not start a nearly empty block that the others then wait
 * behind. A lone client (the last block had one sequence) never waits. */
static void gather_locked(srv *v)
{
    uint32_t block = v->info.block_seqs ? v->info.block_seqs : 1;
    if (!v->o.batch_wait_ms || v->stopping)
        return;
    struct timespec cap = after_ms(10ull * v->o.batch_wait_ms);
    uint32_t seen = queued_seqs_locked(v);
    for (;;) {
        struct timespec until = after_ms(v->o.batch_wait_ms);
        if (before(&cap, &until))
            until = cap;
        uint32_t q = queued_seqs_locked(v);
        if (q >= block || q >= v->last_seqs || v->stopping)
            return;
        if (pthread_cond_timedwait(&v->cond, &v->mu, &until)) {
            if (queued_seqs_locked(v) == seen || !before(&until, &cap))
                return; /* nothing came for batch_wait_ms, or the cap */
        }
        seen = queued_seqs_locked(v);
    }
}

void *srv_engine_main(void *arg)
{
    srv *v = arg;
    uint32_t cap = 64;
    srv_job **tok = NULL, **gen = NULL;
    for (;;) {
        pthread_mutex_lock(&v->mu);
        while (!v->load_failed && !v->head && !v->stopping)
            pthread_cond_wait(&v->cond, &v->mu);
        if (v->load_failed || (!v->head && v->stopping)) {
            pthread_mutex_unlock(&v->mu);
            break;
        }
        gather_locked(v);
        if (v->queued > cap || !tok) {
            cap = v->queued > cap ? v->queued : cap;
            free(tok);
            free(gen);
            tok = malloc(cap * sizeof *tok);
            gen = malloc(cap * sizeof *gen);
        }
        uint32_t ntok = 0, ngen = tok && gen ? take_locked(v, tok, &ntok, gen) : 0;
        v->running = ngen + ntok;
        pthread_mutex_unlock(&v->mu);
        for (uint32_t i = 0; i < ntok; i++) {
            (tok[i]->kind == SRV_JOB_TOKENIZE ? run_tokenize : run_detokenize)(v, tok[i]);
            pthread_mutex_lock(&v->mu);
            finish_locked(tok[i]);
            srv_job_release_locked(tok[i]);
            pthread_mutex_unlock(&v->mu);
        }
        uint32_t seqs = 0;
        for (uint32_t i = 0; i < ngen; i++)
            seqs += job_seqs(gen[i]);
        if (ngen) {
            v->last_seqs = seqs;
            if (getenv("FG_SERVE_TRACE_BLOCKS"))
                fprintf(v->o.log, "fg-serve: block: %u requests, %u sequences\n", ngen, seqs);
            run_generate(v, gen, ngen);
        }
        pthread_mutex_lock(&v->mu);
        for (uint32_t i = 0; i < ngen; i++)
            srv_job_release_locked(gen[i]);
        v->running = 0;
        v->blocks += ngen > 0;
        fg_session_stats_get(v->s, &v->stats);
        pthread_mutex_unlock(&v->mu);
    }
    free(tok);
    free(gen);
    pthread_mutex_lock(&v->mu);
    v->engine_done = 1;
    pthread_mutex_unlock(&v->mu);
    return NULL;
}
