/* dist_mpi.c - fg_dist over MPI (see dist.h for the design).
 *
 * One tag, one communicator (MPI_COMM_WORLD); MPI_ERRORS_RETURN so a failed call becomes an
 * fg_err naming the call, never MPI's own abort. Only the calling thread uses MPI (the
 * backend's helper threads never do): MPI_THREAD_FUNNELED.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "fg_progress.h"

#define TAG 7100     /* the pipeline's messages */
#define TAG_ASK 7101 /* the watchdog's "what are you doing?" */
#define TAG_ANS 7102 /* ... and its answer: {state, rank waited on} */
enum { BUSY = 1, WAITING = 2 };

typedef struct slot {
    void *buf;
    size_t cap;
    MPI_Request req;
    int busy;
} slot;

struct fg_dist {
    fg_link link;
    int rank, size, mpi;
    slot *slots;
    size_t n_slots;
    void *rbuf;                 /* probed receives (before expect) */
    size_t rcap;
    void *post[2];              /* posted receives (after expect): post[cur] is in flight */
    size_t post_cap;
    MPI_Request preq;
    MPI_Status pstatus;         /* of the posted receive, once complete */
    int posted, cur;            /* posted: 0 none, 1 in flight, 2 complete (in post[cur]) */
    fg_dist_stats st;
    int fault_rank, fault_at;   /* FG_DIST_FAULT */
    char fault_what[8];
};

static int mpi_err(int rc, const char *call, const fg_dist *d, fg_err *err)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, s, &n);
    return fg_err_set(err, FG_ERR_IO, "rank %d: %s: %.*s", d->rank, call, n, s);
}

/* Slots whose send MPI has finished become free. */
static int reap(fg_dist *d, fg_err *err)
{
    for (size_t i = 0; i < d->n_slots; i++) {
        int done = 0, rc;
        if (d->slots[i].busy && (rc = MPI_Test(&d->slots[i].req, &done, MPI_STATUS_IGNORE)))
            return mpi_err(rc, "MPI_Test", d, err);
        if (done)
            d->slots[i].busy = 0;
    }
    return FG_OK;
}

static slot *free_slot(fg_dist *d, fg_err *err)
{
    if (reap(d, err))
        return NULL;
    for (size_t i = 0; i < d->n_slots; i++)
        if (!d->slots[i].busy)
            return &d->slots[i];
    slot *p = realloc(d->slots, (d->n_slots + 1) * sizeof *p);
    if (!p) {
        fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    d->slots = p;
    memset(&p[d->n_slots], 0, sizeof *p);
    return &p[d->n_slots++];
}

static int link_send(void *ctx, const void *head, size_t hl, const void *body, size_t bl,
                     fg_err *err)
{
    fg_dist *d = ctx;
    if (hl + bl > INT_MAX)
        return fg_err_set(err, FG_ERR_LIMIT, "rank %d: a message of %zu bytes (more than MPI's "
                          "int count): use a smaller --gpu-batch-size", d->rank, hl + bl);
    slot *s = free_slot(d, err);
    if (!s)
        return err->code;
    if (s->cap < hl + bl) {
        void *p = realloc(s->buf, hl + bl);
        if (!p)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        s->buf = p;
        s->cap = hl + bl;
    }
    memcpy(s->buf, head, hl);
    if (bl)
        memcpy((char *)s->buf + hl, body, bl);
    int rc = MPI_Isend(s->buf, (int)(hl + bl), MPI_BYTE, (d->rank + 1) % d->size, TAG,
                       MPI_COMM_WORLD, &s->req);
    if (rc)
        return mpi_err(rc, "MPI_Isend", d, err);
    s->busy = 1;
    d->st.sent_bytes += hl + bl;
    d->st.sent_msgs++;
    return FG_OK;
}

static void nap(unsigned polls)
{
    /* a few quick polls, then sleep up to 1 ms: ranks sharing cores leave them to the one
     * that computes */
    struct timespec ts = {0, polls < 16 ? 0 : polls < 64 ? 50000 : 1000000};
    if (ts.tv_nsec)
        nanosleep(&ts, NULL);
    else
        sched_yield();
}

static void fault(fg_dist *d, fg_err *err, int *rc)
{
    if (d->fault_rank != d->rank || (uint64_t)d->fault_at != d->st.recv_msgs)
        return;
    if (!strcmp(d->fault_what, "kill"))
        raise(SIGKILL);
    if (!strcmp(d->fault_what, "hang"))
        for (;;)
            pause();
    *rc = fg_err_set(err, FG_ERR_IO, "rank %d: a fault injected by FG_DIST_FAULT at message %d",
                     d->rank, d->fault_at);
}

static int prev_rank(const fg_dist *d) { return (d->rank + d->size - 1) % d->size; }
static void answer(fg_dist *d, int state);

static int post(fg_dist *d, fg_err *err)
{
    int rc = MPI_Irecv(d->post[d->cur], (int)d->post_cap, MPI_BYTE, prev_rank(d), TAG,
                       MPI_COMM_WORLD, &d->preq);
    if (rc)
        return mpi_err(rc, "MPI_Irecv", d, err);
    d->posted = 1;
    return FG_OK;
}

static int link_expect(void *ctx, size_t max_len, fg_err *err)
{
    fg_dist *d = ctx;
    if (d->posted || max_len > INT_MAX)
        return max_len > INT_MAX ? fg_err_set(err, FG_ERR_LIMIT, "rank %d: messages of %zu "
                                              "bytes (more than MPI's int count): use a smaller "
                                              "--gpu-batch-size", d->rank, max_len) : FG_OK;
    for (int i = 0; i < 2; i++)
        if (!(d->post[i] = malloc(max_len)))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    d->post_cap = max_len;
    return post(d, err);
}

static void link_poll(void *ctx)
{
    fg_dist *d = ctx;
    int done;
    fg_err err;
    if (d->posted == 1 && MPI_Test(&d->preq, &done, &d->pstatus) == MPI_SUCCESS && done)
        d->posted = 2;
    reap(d, &err);
    answer(d, BUSY);
}

/* Answer every watchdog question pending: this rank is `state` (waiting on its predecessor,
 * or computing). */
static void answer(fg_dist *d, int state)
{
    for (;;) {
        int flag = 0, q;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_ASK, MPI_COMM_WORLD, &flag, &st) || !flag)
            return;
        MPI_Recv(&q, 1, MPI_INT, st.MPI_SOURCE, TAG_ASK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int a[2] = {state, prev_rank(d)};
        MPI_Send(a, 2, MPI_INT, st.MPI_SOURCE, TAG_ANS, MPI_COMM_WORLD); /* small: eager */
    }
}

/* Ask rank q what it does; 0 when it does not answer within wait_s. */
static int ask(fg_dist *d, int q, double wait_s)
{
    int me = d->rank, a[2], flag = 0;
    MPI_Request r;
    MPI_Isend(&me, 1, MPI_INT, q, TAG_ASK, MPI_COMM_WORLD, &r);
    double t0 = fg_now();
    for (unsigned polls = 0; !flag && fg_now() - t0 < wait_s; polls++) {
        MPI_Iprobe(q, TAG_ANS, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        answer(d, WAITING);
        if (!flag)
            nap(polls);
    }
    if (!flag) {
        MPI_Request_free(&r); /* a few eager bytes: done locally, or with the silent rank */
        return 0;
    }
    MPI_Recv(a, 2, MPI_INT, q, TAG_ANS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    return a[0];
}

/* Nothing came for timeout_s: walk back along the ring asking each rank what it does, to the
 * first that does not answer (dead or stuck) or that computes (alive, slow). Only the stuck
 * rank's successor reports it (so one line is printed); the others wait for it to. */
static int blame(fg_dist *d, double waited, int *report, fg_err *err)
{
    double wait_s = d->link.timeout_s < 5 ? d->link.timeout_s : 5;
    int q = prev_rank(d);
    for (int hops = 0; hops < d->size - 1; hops++, q = (q + d->size - 1) % d->size) {
        int state = ask(d, q, wait_s);
        if (state == BUSY) {
            *report = 1;
            return fg_err_set(err, FG_ERR_IO, "rank %d: nothing from rank %d for %.0f s, and "
                              "rank %d is still computing: slower than --dist-timeout allows",
                              d->rank, prev_rank(d), waited, q);
        }
        if (state == 0) {
            *report = q == prev_rank(d);
            return fg_err_set(err, FG_ERR_IO, "rank %d: rank %d is dead or stuck: nothing from "
                              "it for %.0f s, and no answer to the watchdog (--dist-timeout)",
                              d->rank, q, waited);
        }
    }
    *report = 1;
    return fg_err_set(err, FG_ERR_IO, "rank %d: every rank waits on the one before it (a lost "
                      "message) for %.0f s", d->rank, waited);
}

/* Wait for the message: a posted receive to complete, or (before expect) one to be probed. */
static int wait_msg(fg_dist *d, int forever, MPI_Message *msg, MPI_Status *status, fg_err *err)
{
    double t0 = fg_now(), deadline = d->link.timeout_s;
    for (unsigned polls = 0;; polls++) {
        int flag = d->posted == 2, rc = MPI_SUCCESS;
        if (d->posted == 1 && (rc = MPI_Test(&d->preq, &flag, &d->pstatus)) == MPI_SUCCESS &&
            flag)
            d->posted = 2;
        else if (!d->posted)
            rc = MPI_Improbe(prev_rank(d), TAG, MPI_COMM_WORLD, &flag, msg, status);
        if (rc)
            return mpi_err(rc, d->posted ? "MPI_Test" : "MPI_Improbe", d, err);
        if (flag)
            break;
        if ((rc = reap(d, err)))
            return rc;
        answer(d, WAITING);
        if (!forever && d->link.timeout_s > 0 && fg_now() - t0 > deadline) {
            int report;
            rc = blame(d, fg_now() - t0, &report, err);
            if (report || deadline > d->link.timeout_s)
                return rc;
            deadline += d->link.timeout_s; /* the stuck rank's successor reports it */
        }
        nap(polls);
    }
    d->st.wait_s += fg_now() - t0;
    return FG_OK;
}

static int link_recv(void *ctx, int forever, const void **buf, size_t *len, fg_err *err)
{
    fg_dist *d = ctx;
    MPI_Message msg;
    MPI_Status status;
    int rc = wait_msg(d, forever, &msg, &status, err), count = 0;
    if (rc)
        return rc;
    if (d->posted) { /* the message is in post[cur]; post the next one into the other */
        MPI_Get_count(&d->pstatus, MPI_BYTE, &count);
        *buf = d->post[d->cur];
        d->cur ^= 1;
        if ((rc = post(d, err)))
            return rc;
    } else {
        MPI_Get_count(&status, MPI_BYTE, &count);
        if ((size_t)count > d->rcap) {
            void *p = realloc(d->rbuf, (size_t)count);
            if (!p)
                return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
            d->rbuf = p;
            d->rcap = (size_t)count;
        }
        if ((rc = MPI_Mrecv(d->rbuf, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE)))
            return mpi_err(rc, "MPI_Mrecv", d, err);
        *buf = d->rbuf;
    }
    d->st.recv_bytes += (uint64_t)count;
    d->st.recv_msgs++;
    *len = (size_t)count;
    fault(d, err, &rc);
    return rc;
}

static int launched(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (getenv(v[i]))
            return 1;
    return 0;
}

static void parse_fault(fg_dist *d)
{
    const char *f = getenv("FG_DIST_FAULT");
    d->fault_rank = -1;
    d->fault_at = 3;
    if (f && sscanf(f, "%d:%7[a-z]:%d", &d->fault_rank, d->fault_what, &d->fault_at) < 2)
        d->fault_rank = -1;
}

int fg_dist_init(int *argc, char ***argv, fg_dist **out, fg_err *err)
{
    fg_dist *d = calloc(1, sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    d->size = 1;
    *out = d;
    if (!launched())
        return FG_OK;
    int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc)
        return fg_err_set(err, FG_ERR_IO, "MPI_Init_thread failed (%d)", rc);
    d->mpi = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    parse_fault(d);
    d->link = (fg_link){d->rank, d->size, 300, link_send, link_recv, link_expect, link_poll, d};
    return FG_OK;
}

int fg_dist_rank(const fg_dist *d) { return d->rank; }
int fg_dist_size(const fg_dist *d) { return d->size; }
const fg_link *fg_dist_link(fg_dist *d) { return d->size > 1 ? &d->link : NULL; }
void fg_dist_set_timeout(fg_dist *d, double seconds) { d->link.timeout_s = seconds; }
void fg_dist_stats_get(const fg_dist *d, fg_dist_stats *out) { *out = d->st; }

void fg_dist_abort(fg_dist *d, int code)
{
    fflush(stdout);
    fflush(stderr);
    if (d && d->mpi)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int fg_dist_finish(fg_dist *d, fg_err *err)
{
    if (!d)
        return FG_OK;
    int rc = FG_OK;
    double t0 = fg_now();
    for (size_t i = 0; d->mpi && rc == FG_OK && i < d->n_slots; i++)
        while (rc == FG_OK && d->slots[i].busy) {
            if ((rc = reap(d, err)) == FG_OK && d->slots[i].busy &&
                d->link.timeout_s > 0 && fg_now() - t0 > d->link.timeout_s)
                rc = fg_err_set(err, FG_ERR_IO, "rank %d: rank %d did not take the last "
                                "messages in %.0f s", d->rank, (d->rank + 1) % d->size,
                                d->link.timeout_s);
            nap(64);
        }
    if (d->posted == 1) { /* the receive posted for a message that never comes */
        MPI_Cancel(&d->preq);
        MPI_Wait(&d->preq, MPI_STATUS_IGNORE);
    }
    if (d->mpi && rc == FG_OK)
        MPI_Finalize();
    for (size_t i = 0; i < d->n_slots; i++)
        free(d->slots[i].buf);
    free(d->slots);
    free(d->rbuf);
    free(d->post[0]);
    free(d->post[1]);
    free(d);
    return rc;
}
