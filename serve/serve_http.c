/* serve_http.c - the HTTP side of fg-serve, on GNU libmicrohttpd (docs/serve.md says why):
 * routing, the API key, body limits, requests handed to the engine thread and their answers
 * sent back, plain or as server-sent events.
 *
 * Design:
 *  1. MHD runs a thread per connection (MHD_USE_THREAD_PER_CONNECTION): a handler may block
 *     until the engine answers, and a stream's reader may block until the next piece; the
 *     number of connections is bounded (max_conns) and an idle one is closed after timeout_s,
 *     so slow clients (slowloris) hold a bounded number of threads for a bounded time.
 *  2. The socket is bound here (getaddrinfo on a numeric host, SO_REUSEADDR) and handed to MHD,
 *     so a bind failure has its errno in the message and port 0 names the port it got.
 *  3. The body is read into memory up to max_body: a Content-Length above it is refused (413)
 *     before any byte is read, a chunked body that grows past it likewise at the end.
 *  4. A streamed request's response is created only once its first piece (or its failure)
 *     is known, so a request refused by the engine (too long for the context) gets a plain
 *     error status, not a 200 stream carrying an error.
 *  5. A stream's response holds a reference to its job; MHD frees the response when the
 *     connection ends, and a job not done by then is marked cancelled: the engine's on_piece
 *     returns non-zero and the session stops its sequences (the client went away). A request
 *     waiting for its answer looks at its socket every 100 ms: a client that closed it
 *     cancels the request the same way (or the engine skips it while still queued).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve_int.h"

typedef struct conn {
    srv *v;
    srv_route route;
    char *body;
    size_t len, cap;
    int too_big;
    int refused;   /* an error was found at the first call: answered at the last */
    srv_error err;
} conn;

static enum MHD_Result reply_allow(struct MHD_Connection *c, srv *v, srv_route r, int status,
                                   const char *body, const char *type, const char *allow)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                                               MHD_RESPMEM_MUST_COPY);
    if (!res)
        return MHD_NO;
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 401)
        MHD_add_response_header(res, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (allow)
        MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    pthread_mutex_lock(&v->mu);
    srv_count_locked(v, r, status);
    pthread_mutex_unlock(&v->mu);
    return rc;
}

static enum MHD_Result reply(struct MHD_Connection *c, srv *v, srv_route r, int status,
                             const char *body, const char *type)
{
    return reply_allow(c, v, r, status, body, type, NULL);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, srv *v, srv_route r, int status,
                                  const char *body)
{
    return reply(c, v, r, status, body, "application/json");
}

static enum MHD_Result reply_error(struct MHD_Connection *c, srv *v, srv_route r,
                                   const srv_error *e)
{
    char *s = srv_out_error(e);
    enum MHD_Result rc = reply_allow(c, v, r, e->status, s, "application/json",
                                     e->status == 405 ? e->allow : NULL);
    srv_out_free(s);
    return rc;
}

static enum MHD_Result reply_json_obj(struct MHD_Connection *c, srv *v, srv_route r, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, "out of memory");
        return reply_error(c, v, r, &e);
    }
    enum MHD_Result rc = reply_json(c, v, r, 200, s);
    free(s);
    return rc;
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static int authorized(struct MHD_Connection *c, const char *key)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    size_t n = strlen(h), m = strlen(key);
    unsigned d = n != m;
    for (size_t i = 0; i < m; i++)
        d |= (unsigned char)key[i] ^ (unsigned char)(i < n ? h[i] : 0);
    return !d;
}

/* ---- the routes that need no engine ---- */

static enum MHD_Result do_models(struct MHD_Connection *c, srv *v)
{
    json_t *o = json_object(), *data = json_array(), *m = json_object();
    json_object_set_new(m, "id", json_string(v->model_name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer((json_int_t)time(NULL)));
    json_object_set_new(m, "owned_by", json_string("fg"));
    json_object_set_new(m, "root", json_string(v->info.store_path ? v->info.store_path : ""));
    json_object_set_new(m, "max_model_len", json_integer(v->info.max_ctx));
    json_array_append_new(data, m);
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return reply_json_obj(c, v, SRV_MODELS, o);
}

static json_t *token_or_null(const srv *v, int32_t id)
{
    return id >= 0 && (uint32_t)id < v->vocab.n ? srv_json_text(v->vocab.text[id],
                                                                 v->vocab.len[id])
                                                  : json_null();
}

/* What lm-eval's remote tokenizer reads (as vLLM's /tokenizer_info: tokenizer_config.json's
 * fields): the special tokens' text and ids, the vocabulary size, the longest sequence. */
static enum MHD_Result do_tokenizer_info(struct MHD_Connection *c, srv *v)
{
    json_t *o = json_object();
    json_object_set_new(o, "tokenizer_class", json_string("fg"));
    json_object_set_new(o, "bos_token", token_or_null(v, v->info.bos_id));
    json_object_set_new(o, "eos_token", token_or_null(v, v->info.eos_id));
    json_object_set_new(o, "pad_token", json_null());
    json_object_set_new(o, "bos_token_id", v->info.bos_id >= 0 ? json_integer(v->info.bos_id)
                                                                : json_null());
    json_object_set_new(o, "eos_token_id", v->info.eos_id >= 0 ? json_integer(v->info.eos_id)
                                                                : json_null());
    json_object_set_new(o, "vocab_size", json_integer(v->info.vocab_size));
    json_object_set_new(o, "model_max_length", json_integer(v->info.max_ctx));
    return reply_json_obj(c, v, SRV_TOKENIZER_INFO, o);
}

static enum MHD_Result do_metrics(struct MHD_Connection *c, srv *v)
{
    char *t = srv_metrics_text(v);
    enum MHD_Result rc = reply(c, v, SRV_METRICS, 200, t ? t : "",
                               "text/plain; version=0.0.4; charset=utf-8");
    free(t);
    return rc;
}

/* ---- jobs for the engine ---- */

typedef struct stream_ref {
    srv *v;
    srv_job *j;
} stream_ref;

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    stream_ref *r = cls;
    srv_job *j = r->j;
    (void)pos;
    pthread_mutex_lock(&r->v->mu);
    while (j->sent == j->slen && !j->done) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_sec += 1;
        pthread_cond_timedwait(&j->cond, &r->v->mu, &t);
    }
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (j->sent < j->slen) {
        size_t k = j->slen - j->sent < max ? j->slen - j->sent : max;
        memcpy(out, j->sbuf + j->sent, k);
        j->sent += k;
        if (j->sent == j->slen)
            j->sent = j->slen = 0;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&r->v->mu);
    return n;
}

static void stream_free(void *cls)
{
    stream_ref *r = cls;
    pthread_mutex_lock(&r->v->mu);
    if (!r->j->done) {
        r->j->cancelled = 1;
        r->v->cancelled++;
    }
    srv_job_release_locked(r->j);
    pthread_mutex_unlock(&r->v->mu);
    free(r);
}

/* The client closed its side while its request waits (nothing to read but the end). A
 * pipelined next request is data, not the end: not gone. */
static int peer_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    char b;
    if (!ci)
        return 0;
    ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Queue j and answer: wait for the whole answer, or (a stream) for its first piece. */
static enum MHD_Result run_job(struct MHD_Connection *c, srv *v, srv_route route, srv_job *j)
{
    srv_error e;
    pthread_mutex_lock(&v->mu);
    int st = srv_enqueue_locked(v, j);
    if (st) {
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        if (st == 429)
            srv_error_set(&e, 429, "rate_limit_error", NULL, "the queue is full (%u requests "
                          "waiting; --max-queue)", v->o.max_queue ? v->o.max_queue : 256);
        else
            srv_error_set(&e, 503, "service_unavailable", NULL, "%s", v->stopping
                          ? "the server is shutting down" : "the model is loading");
        return reply_error(c, v, route, &e);
    }
    int stream = j->kind == SRV_JOB_GENERATE && j->body.stream;
    while (!j->done && !(stream && j->any_piece)) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100 * 1000 * 1000;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&j->cond, &v->mu, &t) == ETIMEDOUT && peer_gone(c)) {
            j->cancelled = 1; /* the engine skips it, or on_piece stops it */
            v->cancelled++;
            srv_job_release_locked(j);
            pthread_mutex_unlock(&v->mu);
            return MHD_NO;
        }
    }
    if (!stream || (j->done && !j->any_piece && j->status != 200)) {
        int status = j->status ? j->status : 500;
        char *out = j->out;
        j->out = NULL;
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        enum MHD_Result rc = reply_json(c, v, route, status, out ? out : "{}");
        srv_out_free(out);
        return rc;
    }
    pthread_mutex_unlock(&v->mu);
    stream_ref *r = malloc(sizeof *r);
    struct MHD_Response *res = r ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                                     stream_read, r, stream_free)
                                 : NULL;
    if (!res) {
        pthread_mutex_lock(&v->mu);
        j->cancelled = 1;
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        free(r);
        return MHD_NO;
    }
    r->v = v;
    r->j = j; /* the HTTP side's reference moves to the response */
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, res);
    MHD_destroy_response(res);
    pthread_mutex_lock(&v->mu);
    srv_count_locked(v, route, 200);
    pthread_mutex_unlock(&v->mu);
    return rc;
}

static enum MHD_Result do_generate(struct MHD_Connection *c, srv *v, conn *k)
{
    srv_error e;
    srv_job *j = srv_job_new(SRV_JOB_GENERATE);
    if (!j)
        return MHD_NO;
    int chat = k->route == SRV_CHAT;
    if (srv_body_parse(&j->body, chat, k->body ? k->body : "", k->len, v->info.vocab_size, &e)) {
        pthread_mutex_lock(&v->mu);
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        return reply_error(c, v, k->route, &e);
    }
    j->first_sent = calloc((size_t)j->body.n_reqs * j->body.n, sizeof *j->first_sent);
    pthread_mutex_lock(&v->mu);
    uint64_t id = ++v->next_id;
    pthread_mutex_unlock(&v->mu);
    snprintf(j->id, sizeof j->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)id);
    j->created = (long long)time(NULL);
    if (!j->first_sent) {
        pthread_mutex_lock(&v->mu);
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        return MHD_NO;
    }
    return run_job(c, v, k->route, j);
}

static enum MHD_Result do_tokenizer(struct MHD_Connection *c, srv *v, conn *k)
{
    srv_error e;
    int tok = k->route == SRV_TOKENIZE;
    srv_job *j = srv_job_new(tok ? SRV_JOB_TOKENIZE : SRV_JOB_DETOKENIZE);
    if (!j)
        return MHD_NO;
    const char *b = k->body ? k->body : "";
    int bad = tok ? srv_tok_body_parse(&j->tok, b, k->len, &e)
                  : srv_detok_body_parse(b, k->len, v->info.vocab_size, &j->ids, &j->n_ids, &e);
    if (bad) {
        pthread_mutex_lock(&v->mu);
        srv_job_release_locked(j);
        pthread_mutex_unlock(&v->mu);
        return reply_error(c, v, k->route, &e);
    }
    return run_job(c, v, k->route, j);
}

/* ---- the handler ---- */

static enum MHD_Result first_call(struct MHD_Connection *c, srv *v, conn *k, const char *method,
                                  const char *url)
{
    k->route = srv_route_of(method, url, &k->err);
    if (k->route == SRV_ROUTE_NONE) {
        k->refused = 1;
        return MHD_YES;
    }
    if (v->o.api_key && k->route != SRV_HEALTH && !authorized(c, v->o.api_key)) {
        srv_error_set(&k->err, 401, "authentication_error", NULL, "a valid API key is "
                      "required: Authorization: Bearer KEY");
        k->refused = 1;
        return MHD_YES;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t max = v->o.max_body ? v->o.max_body : 16u << 20;
    if (cl && strtoull(cl, NULL, 10) > max) {
        srv_error_set(&k->err, 413, "invalid_request_error", NULL, "the body is over %llu "
                      "bytes (--max-body)", (unsigned long long)max);
        /* answered now: nothing of the body is read */
        enum MHD_Result rc = reply_error(c, v, k->route, &k->err);
        k->refused = 2;
        return rc;
    }
    return MHD_YES;
}

static void take_body(srv *v, conn *k, const char *data, size_t n)
{
    uint64_t max = v->o.max_body ? v->o.max_body : 16u << 20;
    if (k->too_big || k->len + n > max) {
        k->too_big = 1;
        return;
    }
    if (k->len + n + 1 > k->cap) {
        size_t cap = (k->len + n + 1) * 2;
        char *b = realloc(k->body, cap);
        if (!b) {
            k->too_big = 1;
            return;
        }
        k->body = b;
        k->cap = cap;
    }
    memcpy(k->body + k->len, data, n);
    k->len += n;
    k->body[k->len] = 0;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, srv *v, conn *k)
{
    srv_error e;
    pthread_mutex_lock(&v->mu);
    int loaded = v->loaded, stopping = v->stopping;
    pthread_mutex_unlock(&v->mu);
    if (k->route == SRV_METRICS)
        return do_metrics(c, v);
    if (k->route == SRV_HEALTH && loaded && !stopping)
        return reply_json(c, v, SRV_HEALTH, 200, "{\"status\":\"ok\"}");
    if (!loaded || stopping) {
        srv_error_set(&e, 503, "service_unavailable", NULL, "%s", stopping
                      ? "the server is shutting down" : "the model is loading");
        return reply_error(c, v, k->route, &e);
    }
    if (k->too_big) {
        srv_error_set(&e, 413, "invalid_request_error", NULL, "the body is over %llu bytes "
                      "(--max-body)", (unsigned long long)(v->o.max_body ? v->o.max_body
                                                                         : 16u << 20));
        return reply_error(c, v, k->route, &e);
    }
    switch (k->route) {
    case SRV_MODELS: return do_models(c, v);
    case SRV_TOKENIZER_INFO: return do_tokenizer_info(c, v);
    case SRV_TOKENIZE:
    case SRV_DETOKENIZE: return do_tokenizer(c, v, k);
    default: return do_generate(c, v, k);
    }
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    srv *v = cls;
    conn *k = *con_cls;
    (void)version;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k)
            return MHD_NO;
        k->v = v;
        *con_cls = k;
        pthread_mutex_lock(&v->mu);
        v->active++;
        pthread_mutex_unlock(&v->mu);
        return first_call(c, v, k, method, url);
    }
    if (*upload_size) {
        if (!k->refused)
            take_body(v, k, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->refused == 2)
        return MHD_YES; /* answered at the first call */
    if (k->refused)
        return reply_error(c, v, k->route, &k->err);
    return dispatch(c, v, k);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    srv *v = cls;
    conn *k = *con_cls;
    (void)c, (void)why;
    if (!k)
        return;
    pthread_mutex_lock(&v->mu);
    v->active--;
    pthread_mutex_unlock(&v->mu);
    free(k->body);
    free(k);
    *con_cls = NULL;
}

static int bind_socket(const char *host, uint16_t port, uint16_t *bound, fg_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--host %s: not an IPv4 or IPv6 address (%s)",
                          host, gai_strerror(g));
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return fg_err_sys(err, FG_ERR_IO, e, "listening on %s port %u", host, port);
    }
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *bound = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                            : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

int srv_http_start(srv *v, void **daemon, uint16_t *port, fg_err *err)
{
    const char *host = v->o.host ? v->o.host : "127.0.0.1";
    int fd = bind_socket(host, v->o.port, port, err);
    if (fd < 0)
        return fd;
    v->listen_fd = fd;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ITC,
        0, NULL, NULL, handler, v,
        MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(v->o.max_conns ? v->o.max_conns : 256),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(v->o.timeout_s ? v->o.timeout_s : 30),
        MHD_OPTION_NOTIFY_COMPLETED, completed, v,
        MHD_OPTION_END);
    if (!d) {
        close(fd);
        return fg_err_set(err, FG_ERR_IO, "libmicrohttpd would not start on %s port %u", host,
                          *port);
    }
    *daemon = d;
    return FG_OK;
}

void srv_http_quiesce(void *daemon)
{
    MHD_socket s = MHD_quiesce_daemon(daemon);
    if (s != MHD_INVALID_SOCKET)
        close(s);
}

void srv_http_stop(void *daemon)
{
    MHD_stop_daemon(daemon);
}
