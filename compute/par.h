/* par.h - a fixed set of helper threads that run one function over n parts, the caller
 * taking part 0 (the engine converts a weight chunk's f16/bf16 rows to f32 on every core while
 * OpenBLAS is idle; OpenBLAS's own threads are busy only inside sgemm, so they never compete).
 *
 * fg_par_create(n) starts n - 1 threads (0: one per online CPU; 1 starts none and runs
 * everything inline);
 * fg_par_run calls fn(arg, part, n) for part in [0, n) and returns when all have returned. One
 * caller at a time. fg_par_free joins the threads (NULL is accepted). Nothing is allocated by
 * fg_par_run. */
#ifndef FG_PAR_H
#define FG_PAR_H

#include <stdint.h>

#include "fg_error.h"

typedef struct fg_par fg_par;
typedef void (*fg_par_fn)(void *arg, uint32_t part, uint32_t n_parts);

int fg_par_create(uint32_t n_threads, fg_par **out, fg_err *err);
uint32_t fg_par_threads(const fg_par *p);
void fg_par_run(fg_par *p, fg_par_fn fn, void *arg);
/* fn(arg, chunk, n_chunks) for chunk in [0, n_chunks), each exactly once, on whichever of the
 * caller and the helpers claims it first (the caller does them all when no helper wakes in time);
 * returns when every chunk has returned. fn must not depend on which thread runs a chunk.
 * One caller at a time; nothing is allocated. */
void fg_par_run_dyn(fg_par *p, fg_par_fn fn, void *arg, uint32_t n_chunks);
void fg_par_free(fg_par *p);

#endif
