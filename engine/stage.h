/* stage.h - the engine as one stage of a pipeline across processes (FlexGen's multi-GPU
 * pipeline): the model's layers split into contiguous stages, one process (rank) each, with its
 * own pager and budgets over its own units; the batches of a block flow rank to rank as
 * micro-batches through a point-to-point link (dist/ gives one over MPI).
 *
 * The ring: rank 0 holds the embedding, the first layers and the LM head; rank r > 0 a run of
 * layers. Rank 0 sends each micro-batch's rows to rank 1, ..., the last rank sends its output
 * rows back to rank 0, which runs the head, samples, and feeds the next step's embedding: the
 * tokens never leave rank 0, and what crosses each link is hidden rows (hidden x 4 bytes a
 * sequence and token in the decode; the prompt's rows in the prefill, only the last position's
 * on the way back to rank 0).
 *
 * Each rank reads only from the rank before it and writes only to the rank after it, so one
 * FIFO link each way is the whole protocol: OPEN (the block and policy rank 0 planned), BLOCK
 * (the prompts), DATA (step, batch, rows), END (the block is done), QUIT.
 */
#ifndef FG_STAGE_H
#define FG_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A point-to-point link between the ranks of a ring (send, receive; the transport behind it is
 * the implementer's). A link is used by one thread. */
typedef struct fg_link {
    int rank, size;       /* this process, and how many */
    double timeout_s;     /* a wait for a peer longer than this is an error (a dead or stuck
                             peer), except the first wait of a follower (0: wait forever) */
    /* Send head then body (one message of head_len + body_len bytes) to rank (rank + 1) %
     * size. Both are copied before it returns; the transfer completes in the background (the
     * link keeps one buffer per message in flight). */
    int (*send)(void *ctx, const void *head, size_t head_len, const void *body, size_t body_len,
                fg_err *err);
    /* The next message from rank (rank - 1 + size) % size, in order; *buf (owned by the link)
     * stays valid until the next recv. forever: no timeout for this wait. */
    int (*recv)(void *ctx, int forever, const void **buf, size_t *len, fg_err *err);
    /* Optional (may be NULL). expect: no message from now on is longer than max_len, so the
     * link may post its receives ahead (two buffers of max_len). poll: let transfers in flight
     * progress (the stage calls it between units while it computes). */
    int (*expect)(void *ctx, size_t max_len, fg_err *err);
    void (*poll)(void *ctx);
    void *ctx;
} fg_link;

/* Split `layers` layers into n stages of contiguous layers balancing cost: stage 0 carries
 * base0 (the embedding and the head) plus layers [first[0], first[1]) (possibly none), stage s
 * > 0 layers [first[s], first[s + 1]) (at least one), first[0] = 0, first[n] = layers. Minimizes
 * the largest stage's cost (ties: the earliest cut). cost[l] >= 0. first has n + 1 entries.
 * FG_ERR_INVALID_ARG when n < 1 or n - 1 > layers. Pure. */
int fg_stage_split(const double *cost, uint32_t layers, double base0, uint32_t n, uint32_t *first,
                   fg_err *err);

/* A follower rank (rank > 0), before its engine opens: wait (forever: rank 0 may take long) for
 * rank 0's first message and pass it on down the ring. OPEN: *eo (this rank's budget, threads,
 * offload dir, trace) takes what rank 0 planned (the policy, the context, the compute mode) and
 * the link; QUIT: *quit = 1 and eo is untouched. Anything else is FG_ERR_CORRUPT. The follower's
 * whole life (open, serve, its closing line) is the runner's (runner_follow.h). */
struct fg_engine_opts;
struct fg_engine;
int fg_stage_await(const fg_link *link, struct fg_engine_opts *eo, int *quit, fg_err *err);

/* A follower's engine (opened on fg_stage_await's options): run every block rank 0 sends until
 * QUIT. */
int fg_stage_serve(struct fg_engine *e, fg_err *err);

/* What this process's stage runs: layers [l0, l1) (every layer without a link), the block
 * gbs x ngb, and the budget's share kept for the link's buffers. */
typedef struct fg_stage_info {
    int rank;
    uint32_t l0, l1, gbs, ngb;
    uint64_t link_bytes;
} fg_stage_info;
void fg_stage_info_get(const struct fg_engine *e, fg_stage_info *out);

/* Rank 0, at the end of the run (whether or not an engine was opened): tell the followers to
 * finish. */
int fg_stage_quit(const fg_link *link, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
