/* dist.h - the processes of one fg-infer run as the stages of a pipeline (stage.h), over MPI
 * point-to-point messages (Open MPI from Debian, launched with mpirun).
 *
 * fg_dist_init starts MPI only when a launcher started this process (mpirun sets
 * OMPI_COMM_WORLD_SIZE / PMIX_RANK): a plain `fg-infer ...` stays one process and never loads
 * MPI's runtime. A build without MPI (dist_none.c) runs one process and refuses, naming the
 * cause, to be one of several ranks.
 *
 * The link (fg_dist_link): sends are MPI_Isend from a copy (a slot per message in flight,
 * reused once MPI says it is done), so a stage computes its next batch while the last one
 * travels; a receive polls MPI_Improbe (sleeping between polls, so ranks sharing cores leave
 * them to the one computing) until the message is there or the watchdog's timeout passes,
 * then MPI_Mrecv's it into a buffer that grows to the largest message.
 *
 * Failure: a rank that fails prints its one line and calls fg_dist_abort (MPI_Abort), which
 * ends every rank; a rank that dies is seen by mpirun, which ends the rest; a rank that hangs
 * is found by the watchdog: a rank that received nothing for timeout_s seconds asks the ranks
 * before it, one by one, what they do (every rank answers while it waits or between its
 * units), and the first that does not answer within min(timeout_s, 5) s is the stuck one; its
 * successor prints the line naming it and aborts (the others wait for that, so one line is
 * printed). One that answers "computing" is slow, not stuck: that is the line then.
 *
 * Fault hook for the tests: FG_DIST_FAULT=RANK:fail|hang|kill[:N] makes rank RANK fail (an
 * error), hang (sleep forever) or kill itself (SIGKILL) at its N-th received message (3).
 */
#ifndef FG_DIST_H
#define FG_DIST_H

#include <stdint.h>

#include "fg_error.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_dist fg_dist;

/* Start (MPI_Init when launched by mpirun); *out owned by the caller (fg_dist_finish). argc and
 * argv are MPI_Init's. */
int fg_dist_init(int *argc, char ***argv, fg_dist **out, fg_err *err);
int fg_dist_rank(const fg_dist *d);
int fg_dist_size(const fg_dist *d);
/* The link to the neighbours, owned by d; NULL with one rank. */
const fg_link *fg_dist_link(fg_dist *d);
/* The watchdog: a wait for a peer longer than this fails (0: never). */
void fg_dist_set_timeout(fg_dist *d, double seconds);

typedef struct fg_dist_stats {
    uint64_t sent_bytes, sent_msgs, recv_bytes, recv_msgs;
    double wait_s;          /* waiting for messages */
} fg_dist_stats;
void fg_dist_stats_get(const fg_dist *d, fg_dist_stats *out);

/* End every rank now (MPI_Abort with code); with one rank, exit(code). */
void fg_dist_abort(fg_dist *d, int code) __attribute__((noreturn));
/* Wait for the sends in flight (up to the timeout), MPI_Finalize, free d. NULL accepted. */
int fg_dist_finish(fg_dist *d, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
