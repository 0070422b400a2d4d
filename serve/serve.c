/* serve.c - fg_serve_run: the listening socket first (so /health answers 503 while the model
 * loads), the session opened on this thread, the engine thread (serve_engine.c) started with
 * it, then a wait for the stop flag and the drain: no new connections (MHD quiesced) and new
 * requests on open ones 503, the queue answered to the end, the requests still sending
 * finished, then everything closed.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve_int.h"

static void nap(void)
{
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
}

static void srv_free(srv *v)
{
    for (uint32_t i = 0; v->vocab.text && i < v->vocab.n; i++)
        free(v->vocab.text[i]);
    free(v->vocab.text);
    free(v->vocab.len);
    fg_session_close(v->s);
    pthread_cond_destroy(&v->cond);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

/* Wait for the stop flag, or for the model's load to fail. */
static int wait_stop(srv *v, fg_err *err)
{
    int said = 0;
    for (;;) {
        pthread_mutex_lock(&v->mu);
        int failed = v->load_failed, loaded = v->loaded;
        if (failed)
            *err = v->load_err;
        pthread_mutex_unlock(&v->mu);
        if (failed)
            return err->code ? err->code : FG_ERR_STATE;
        if (loaded && !said && !v->o.quiet) {
            fprintf(v->o.log, "fg-serve: model %s loaded: %u sequences a block, %u tokens a "
                    "sequence\n", v->model_name, v->info.block_seqs, v->info.max_ctx);
            said = 1;
        }
        if (v->o.stop && *v->o.stop)
            return FG_OK;
        nap();
    }
}

int fg_serve_run(const fg_serve_opts *opts, fg_err *err)
{
    srv *v = calloc(1, sizeof *v);
    if (!v)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    v->o = *opts;
    if (!v->o.log)
        v->o.log = stderr;
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cond, NULL);
    void *daemon = NULL;
    uint16_t port = 0;
    int rc = srv_http_start(v, &daemon, &port, err);
    if (rc) {
        srv_free(v);
        return rc;
    }
    const char *host = v->o.host ? v->o.host : "127.0.0.1";
    fprintf(v->o.log, "fg-serve: listening on http://%s%s%s:%u (loading %s)\n",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port,
            v->o.session.run.model);
    fflush(v->o.log);
    srv_open_session(v); /* here: the engine thread takes the session once it is open */
    pthread_t engine;
    if (pthread_create(&engine, NULL, srv_engine_main, v)) {
        srv_http_stop(daemon);
        srv_free(v);
        return fg_err_set(err, FG_ERR_NOMEM, "cannot start the engine thread");
    }
    rc = wait_stop(v, err);
    /* the drain: no new connections, no new requests, the queue answered, sends finished */
    pthread_mutex_lock(&v->mu);
    v->stopping = 1;
    uint32_t left = v->queued + v->running;
    pthread_cond_broadcast(&v->cond);
    pthread_mutex_unlock(&v->mu);
    if (!rc && !v->o.quiet)
        fprintf(v->o.log, "fg-serve: stopping: %u requests to finish\n", left);
    srv_http_quiesce(daemon);
    pthread_join(engine, NULL);
    for (int i = 0; i < 30 * 50; i++) { /* streams still sending: at most 30 s */
        pthread_mutex_lock(&v->mu);
        uint32_t active = v->active;
        pthread_mutex_unlock(&v->mu);
        if (!active)
            break;
        nap();
    }
    srv_http_stop(daemon);
    if (!rc && !v->o.quiet)
        fprintf(v->o.log, "fg-serve: stopped\n");
    srv_free(v);
    return rc;
}
