/* serve_int.h - fg-serve's private parts: the parsed request body (serve_body.c), the JSON
 * it answers with (serve_out.c), the engine thread and its queue (serve_engine.c), the
 * counters behind /metrics (serve_metrics.c), the HTTP side (serve_http.c). Not installed.
 */
#ifndef FG_SERVE_INT_H
#define FG_SERVE_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "openai.h"
#include "request.h"
#include "serve.h"
#include "session.h"

#define SRV_MAX_PROMPTS 1024  /* prompts one completions request may list */
#define SRV_MAX_SEQS 4096     /* prompts x n of one request */

/* An error as the OpenAI API answers it: {"error": {"message", "type", "param", "code"}}. */
typedef struct srv_error {
    int status;            /* HTTP status: 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type;      /* static: "invalid_request_error", ... */
    const char *param;     /* static, param_buf, or NULL: the field at fault */
    char param_buf[64];
    const char *allow;     /* 405: the route's method (static) */
    char message[FG_ERR_MSG_MAX];
} srv_error;

int srv_error_set(srv_error *e, int status, const char *type, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- request bodies (serve_body.c; the fuzzed parser) ---- */

typedef enum srv_route {
    SRV_ROUTE_NONE = 0,
    SRV_HEALTH, SRV_MODELS, SRV_TOKENIZE, SRV_DETOKENIZE, SRV_TOKENIZER_INFO,
    SRV_COMPLETIONS, SRV_CHAT, SRV_METRICS,
} srv_route;

/* The route of a method and path: SRV_ROUTE_NONE with e set to 404 (no such path) or 405
 * (a known path with another method). Paths are exact: no parameters, nothing reaches a file. */
srv_route srv_route_of(const char *method, const char *url, srv_error *e);
const char *srv_route_name(srv_route r); /* "completions", ... for /metrics labels */

/* A parsed /v1/completions or /v1/chat/completions body: one fg_request a prompt (a list of
 * prompts is several), sharing the other fields. Owns everything reqs point into. */
typedef struct srv_body {
    int chat;
    fg_oai_body *bodies;   /* [n_reqs] jobs/openai.h's parsed bodies (own the strings) */
    fg_request *reqs;      /* [n_reqs] their requests */
    uint32_t n_reqs;
    uint32_t n;            /* choices a prompt */
    int stream, include_usage;
    int chat_logprobs;     /* chat: "logprobs": true */
} srv_body;

/* Parse body[0..len) for the completions (chat 0) or chat endpoint. vocab: ids of token
 * prompts must lie in [0, vocab) (0: not checked). FG_OK, or FG_ERR_INVALID_ARG with e set
 * (status 400 naming the field). b is filled only on success; clear it with srv_body_clear. */
int srv_body_parse(srv_body *b, int chat, const char *body, size_t len, uint32_t vocab,
                   srv_error *e);
void srv_body_clear(srv_body *b);

/* /tokenize: {"prompt" | "messages", "add_special_tokens", "return_token_strs"} */
typedef struct srv_tok_body {
    json_t *root;
    const char *prompt;
    char *messages;        /* owned JSON text */
    int add_special, token_strs;
} srv_tok_body;
int srv_tok_body_parse(srv_tok_body *t, const char *body, size_t len, srv_error *e);
void srv_tok_body_clear(srv_tok_body *t);
/* /detokenize: {"tokens": [ids]}; *ids owned by the caller (free). */
int srv_detok_body_parse(const char *body, size_t len, uint32_t vocab, int32_t **ids,
                         uint32_t *n, srv_error *e);

/* ---- response bodies (serve_out.c) ---- */

/* Each token's text (bytes, not always valid UTF-8), as it decodes after a neutral token (a
 * SentencePiece token keeps its leading space), made once at start; read by any thread. */
typedef struct srv_vocab {
    char **text;           /* [n] NUL-terminated */
    size_t *len;           /* [n] */
    uint32_t n;
} srv_vocab;

/* fg_oai_piece_fn over a srv_vocab (ctx). */
int srv_vocab_piece(void *ctx, int32_t id, const char **bytes, size_t *len);

/* What a response's JSON needs besides the response: ids, names, times. */
typedef struct srv_out_ctx {
    const char *model;
    const char *id;        /* "cmpl-..." / "chatcmpl-..." */
    long long created;
    const srv_vocab *vocab;
} srv_out_ctx;

/* The whole non-streaming body for b's responses resp[0..b->n_reqs) (jobs/openai.h's writer;
 * several prompts merged); NULL when out of memory. */
char *srv_out_response(const srv_out_ctx *c, const srv_body *b, const fg_response *resp);
/* One server-sent event "data: {chunk}\n\n" for a piece of choice `index` (prompt x n +
 * choice) with its tokens' own log-probs (lp: NULL when not asked); NULL: no memory. finish is
 * FG_FINISH_*; first: the chat's first chunk of that choice (carries the role). */
char *srv_out_chunk(const srv_out_ctx *c, const srv_body *b, uint32_t index, const char *piece,
                    size_t len, const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids,
                    int finish, int first);
/* The final usage chunk (stream_options.include_usage). */
char *srv_out_usage_chunk(const srv_out_ctx *c, const srv_body *b, uint64_t prompt_tokens,
                          uint64_t completion_tokens);
/* {"error": {...}} text; never NULL (a static fallback when out of memory, not to be freed:
 * srv_out_free knows it). */
char *srv_out_error(const srv_error *e);
void srv_out_free(char *s);
/* A JSON string of bytes that may not be valid UTF-8 (invalid sequences become U+FFFD). */
json_t *srv_json_text(const char *s, size_t len);

/* ---- the server (serve_engine.c, serve_http.c, serve_metrics.c) ---- */

typedef enum srv_job_kind { SRV_JOB_GENERATE = 0, SRV_JOB_TOKENIZE, SRV_JOB_DETOKENIZE } srv_job_kind;

typedef struct srv_job srv_job;
typedef struct srv srv;

/* Latency summaries for /metrics: a histogram with fixed buckets (seconds). */
#define SRV_HIST_BUCKETS 14
typedef struct srv_hist {
    uint64_t count[SRV_HIST_BUCKETS + 1]; /* per bucket, the last +Inf */
    double sum;
    uint64_t n;
} srv_hist;
extern const double srv_hist_le[SRV_HIST_BUCKETS];
void srv_hist_add(srv_hist *h, double v);

struct srv_job {
    srv_job_kind kind;
    srv_job *next;          /* the queue */
    int refs;               /* the HTTP side and the engine (under srv.mu) */
    int done;               /* answered: body / status final, or the stream ended */
    int cancelled;          /* the client went away */
    pthread_cond_t cond;    /* done, or stream bytes, or cancelled */
    /* generate */
    srv_body body;
    char id[40];
    long long created;
    fg_response *resp;      /* [body.n_reqs] */
    uint32_t *first_sent;   /* [n_reqs * n]: the chat's role chunk went out */
    /* tokenize / detokenize */
    srv_tok_body tok;
    int32_t *ids;
    uint32_t n_ids;
    /* the answer: status and body (non-streaming), or the stream's bytes */
    int status;
    char *out;              /* owned (srv_out_free) */
    char *sbuf;             /* stream bytes not yet sent */
    size_t slen, scap, sent; /* sent: bytes of sbuf already handed to MHD */
    int streaming;          /* the HTTP side sends sbuf as it grows */
    int any_piece;          /* a stream chunk was written (status 200 is committed) */
    double t_queued, t_first, t_last; /* monotonic seconds */
    uint64_t prompt_tokens, completion_tokens;
};

struct srv {
    fg_serve_opts o;
    pthread_mutex_t mu;
    pthread_cond_t cond;    /* the engine's: work queued, or stopping */
    srv_job *head, *tail;   /* queued, not yet taken */
    uint32_t queued, running;
    int loaded;             /* the session is open: requests are served */
    int load_failed;
    int stopping;           /* SIGTERM: no new requests, drain */
    int engine_done;
    fg_err load_err;
    fg_session *s;          /* the engine thread's alone */
    fg_session_info info;   /* copied at open (strings owned by the session) */
    srv_vocab vocab;
    char model_name[256];
    uint64_t next_id;
    uint32_t last_seqs;     /* sequences of the last block (the engine's gather) */
    /* counters for /metrics (under mu) */
    uint64_t req_count[SRV_METRICS + 1][6]; /* per route, per status class 1xx..5xx, 499 */
    uint64_t prompt_tokens, completion_tokens, cancelled, blocks;
    srv_hist ttft, itl, e2e;
    fg_session_stats stats; /* the engine's, after each block */
    uint32_t active;        /* requests being handled (the drain waits for 0) */
    int listen_fd;
};

double srv_now(void);
/* Open the session, make the token table, warm up; sets loaded or load_failed. */
void srv_open_session(srv *v);
/* The engine thread: answers queued jobs until stopping and drained. */
void *srv_engine_main(void *arg);
/* Queue a job (refs += 1 for the engine). Returns 0, or 429 when max_queue jobs wait, or 503
 * while loading / stopping. Under srv.mu. */
int srv_enqueue_locked(srv *v, srv_job *j);
srv_job *srv_job_new(srv_job_kind kind);
/* Drop one reference (under srv.mu); the last frees the job. */
void srv_job_release_locked(srv_job *j);
/* Prometheus text of the counters; owned by the caller (free). */
char *srv_metrics_text(srv *v);
void srv_count_locked(srv *v, srv_route r, int status);
/* The HTTP daemon: start (listening), and stop. */
int srv_http_start(srv *v, void **daemon, uint16_t *port, fg_err *err);
void srv_http_quiesce(void *daemon);
void srv_http_stop(void *daemon);

#endif
