/* serve_metrics.c - /metrics in Prometheus' text format (version 0.0.4): requests by route and
 * status, tokens in and out, queue depth, time to first token, inter-token latency and
 * end-to-end latency as histograms, blocks run, bytes the pager read from disk, RAM in use
 * (resident set, /proc/self/statm) and the pager's host tier in use. Names start with fg_.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pager.h"
#include "serve_int.h"

const double srv_hist_le[SRV_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25, 0.5, 1, 2.5, 5, 10, 30};

void srv_hist_add(srv_hist *h, double v)
{
    int b = 0;
    while (b < SRV_HIST_BUCKETS && v > srv_hist_le[b])
        b++;
    h->count[b]++;
    h->sum += v;
    h->n++;
}

static const char *const k_class[6] = {"1xx", "2xx", "3xx", "4xx", "5xx", "499"};

void srv_count_locked(srv *v, srv_route r, int status)
{
    int c = status == 499 ? 5 : status / 100 - 1;
    if (c < 0 || c > 5)
        c = 4;
    v->req_count[r][c]++;
}

typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return;
        b->s = s;
        b->cap = cap;
    }
}

static void hist(buf *b, const char *name, const char *help, const srv_hist *h)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, srv_hist_le[i], cum);
    }
    cum += h->count[SRV_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name, cum,
        name, h->sum, name, h->n);
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void counter(buf *b, const char *name, const char *type, const char *help, uint64_t x)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, x);
}

char *srv_metrics_text(srv *v)
{
    buf b = {0};
    pthread_mutex_lock(&v->mu);
    put(&b, "# HELP fg_requests_total HTTP requests answered, by route and status class\n"
            "# TYPE fg_requests_total counter\n");
    for (int r = SRV_ROUTE_NONE; r <= SRV_METRICS; r++) /* NONE: "other" (404, 405) */
        for (int c = 0; c < 6; c++)
            if (v->req_count[r][c])
                put(&b, "fg_requests_total{route=\"%s\",status=\"%s\"} %" PRIu64 "\n",
                    srv_route_name((srv_route)r), k_class[c], v->req_count[r][c]);
    counter(&b, "fg_prompt_tokens_total", "counter", "prompt tokens of answered generation "
            "requests", v->prompt_tokens);
    counter(&b, "fg_generation_tokens_total", "counter", "tokens generated", v->completion_tokens);
    counter(&b, "fg_requests_cancelled_total", "counter", "streams whose client left",
            v->cancelled);
    counter(&b, "fg_blocks_total", "counter", "engine blocks run (fg_session_generate calls)",
            v->blocks);
    counter(&b, "fg_queue_depth", "gauge", "requests waiting for the engine", v->queued);
    counter(&b, "fg_requests_running", "gauge", "requests in the block running", v->running);
    counter(&b, "fg_model_loaded", "gauge", "1 once the model is loaded", (uint64_t)v->loaded);
    hist(&b, "fg_time_to_first_token_seconds", "from the request queued to its first token",
         &v->ttft);
    hist(&b, "fg_inter_token_latency_seconds", "between a request's tokens", &v->itl);
    hist(&b, "fg_request_latency_seconds", "from queued to answered (generation)", &v->e2e);
    const fg_pager_stats *p = &v->stats.engine.pager;
    counter(&b, "fg_pager_read_bytes_total", "counter", "bytes the pager read from disk",
            p->moved[FG_TIER_DISK][FG_TIER_HOST] + p->moved[FG_TIER_DISK][FG_TIER_DEVICE]);
    counter(&b, "fg_pager_host_bytes", "gauge", "bytes of the pager's RAM tier in use",
            p->used[FG_TIER_HOST]);
    pthread_mutex_unlock(&v->mu);
    counter(&b, "fg_resident_memory_bytes", "gauge", "RAM in use by the process (resident set)",
            rss_bytes());
    return b.s;
}
