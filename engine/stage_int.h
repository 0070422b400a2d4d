/* stage_int.h - private to the pipeline stage (stage.c, schedule.c): its messages and their
 * parsers. Messages come from another process, over a network when the ranks are on several
 * machines: every parser checks every length and count before anything is used, and is fuzzed
 * (fuzz/fuzz_stage_msg.c). */
#ifndef FG_STAGE_INT_H
#define FG_STAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "policy.h"
#include "stage.h"

/* A message: this header, then `bytes` of payload. OPEN: an fg_stage_open; BLOCK: n, the
 * prompt lengths [n], the prompts' ids one after another (uint32/int32, native order); DATA:
 * f32 rows; END, QUIT: nothing. */
enum { FG_MSG_OPEN = 1, FG_MSG_BLOCK, FG_MSG_DATA, FG_MSG_END, FG_MSG_QUIT };
typedef struct fg_stage_msg {
    uint32_t magic, kind;
    uint32_t step, batch;          /* DATA: the step, and the batch of these rows */
    uint32_t first, end;           /* DATA: the micro-batch, batches [first, end) */
    uint64_t bytes;
} fg_stage_msg;

/* What every stage must share, from rank 0's engine. */
typedef struct fg_stage_open {
    fg_policy policy;              /* gbs, ngb: rank 0's plan */
    uint32_t max_ctx, gen_hint;
    int32_t compute;
    int32_t have_fractions;
} fg_stage_open;

/* Send one message over l (header, then `bytes` of payload). */
int fg_stage_send(const fg_link *l, uint32_t kind, uint32_t step, uint32_t batch, uint32_t first,
                  uint32_t end, const void *payload, size_t bytes, fg_err *err);
/* The next message; *payload valid until the next receive. A malformed one is an error. */
int fg_stage_recv(const fg_link *l, int forever, fg_stage_msg *h, const void **payload,
                  fg_err *err);

/* The header of buf[0..len) into *h and its payload; FG_ERR_CORRUPT naming `rank` and `from`
 * when it is not a whole message. */
int fg_stage_msg_parse(const void *buf, size_t len, int rank, int from, fg_stage_msg *h,
                       const void **payload, fg_err *err);
/* An OPEN payload: sizes, block and context in range, a known compute mode. */
int fg_stage_open_parse(const void *p, uint64_t bytes, int rank, fg_stage_open *out,
                        fg_err *err);
/* A BLOCK payload for a block of at most max_n sequences of at most max_ctx - 1 prompt ids:
 * *n, *lens and *ids point into p. */
int fg_stage_block_parse(const void *p, uint64_t bytes, uint32_t max_n, uint32_t max_ctx,
                         int rank, uint32_t *n, const uint32_t **lens, const int32_t **ids,
                         fg_err *err);

#endif
