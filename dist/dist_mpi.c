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

#define TAG 7100

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
    void *rbuf;
    size_t rcap;
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

static int link_recv(void *ctx, int forever, const void **buf, size_t *len, fg_err *err)
{
    fg_dist *d = ctx;
    int prev = (d->rank + d->size - 1) % d->size, flag = 0, rc;
    double t0 = fg_now();
    MPI_Message msg;
    MPI_Status status;
    for (unsigned polls = 0; !flag; polls++) {
        if ((rc = MPI_Improbe(prev, TAG, MPI_COMM_WORLD, &flag, &msg, &status)))
            return mpi_err(rc, "MPI_Improbe", d, err);
        if (flag)
            break;
        if ((rc = reap(d, err)))
            return rc;
        if (!forever && d->link.timeout_s > 0 && fg_now() - t0 > d->link.timeout_s)
            return fg_err_set(err, FG_ERR_IO, "rank %d: nothing from rank %d for %.0f s: rank "
                              "%d is dead or stuck (--dist-timeout)", d->rank, prev,
                              d->link.timeout_s, prev);
        nap(polls);
    }
    d->st.wait_s += fg_now() - t0;
    int count = 0;
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
    d->st.recv_bytes += (uint64_t)count;
    d->st.recv_msgs++;
    rc = FG_OK;
    fault(d, err, &rc);
    *buf = d->rbuf;
    *len = (size_t)count;
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
    d->link = (fg_link){d->rank, d->size, 300, link_send, link_recv, d};
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
    if (d->mpi && rc == FG_OK)
        MPI_Finalize();
    for (size_t i = 0; i < d->n_slots; i++)
        free(d->slots[i].buf);
    free(d->slots);
    free(d->rbuf);
    free(d);
    return rc;
}
