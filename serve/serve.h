/* serve.h - fg-serve as one library call: an OpenAI-compatible HTTP server in front of one
 * session (runner/session.h), so the server is another front door to the same engine, not a
 * second one (docs/serve.md).
 *
 * fg_serve_run listens first (so /health answers 503 while the model loads), opens the session
 * on its engine thread, answers requests until *opts.stop turns non-zero (SIGTERM, SIGINT),
 * then stops accepting, lets the requests already taken finish (the drain), and returns.
 * Requests queue to the engine thread, which answers as many as fit a block together
 * (fg_session_generate); requests arriving while a block runs join the next block.
 */
#ifndef FG_SERVE_H
#define FG_SERVE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_serve_opts {
    fg_session_opts session;  /* the store, engine, policy, defaults (as fg-infer's flags) */
    const char *host;         /* an IPv4 or IPv6 literal to bind (NULL: 127.0.0.1) */
    uint16_t port;            /* 0: an ephemeral port (the log line names it) */
    const char *api_key;      /* requests must send "Authorization: Bearer KEY" (/health
                                 excepted); NULL: none */
    uint64_t max_body;        /* bytes of a request body (0: 16 MiB); more: 413 */
    uint32_t max_queue;       /* requests waiting for the engine (0: 256); more: 429 */
    uint32_t max_conns;       /* connections at once (0: 256) */
    uint32_t timeout_s;       /* an idle connection is closed after this (0: 30; slowloris) */
    uint32_t batch_wait_ms;   /* the engine waits up to this for the clients of the last
                                 block to send their next requests before starting a block
                                 with fewer sequences than that one ran (0: never waits) */
    const volatile sig_atomic_t *stop; /* non-zero: stop accepting, drain, return */
    int quiet;                /* no request log */
    FILE *log;                /* "listening on", load, errors (NULL: stderr) */
} fg_serve_opts;

/* Serve until *opts->stop. FG_OK after a clean drain; else the failure to bind or to open the
 * model (one line in err). */
int fg_serve_run(const fg_serve_opts *opts, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
