/* fg_progress.h - one self-rewriting progress line on a terminal: done/total in the caller's
 * unit (bytes or tokens), rate and ETA. Silent when quiet is set or stderr is not a terminal,
 * so logs and pipes stay clean. Redraws at most 10 times a second. Not thread-safe. */
#ifndef FG_PROGRESS_H
#define FG_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_UNIT_BYTES, FG_UNIT_TOKENS } fg_unit;

typedef struct fg_progress {
    const char *label;
    fg_unit unit;
    uint64_t total, done;
    double t0, last_draw;
    int enabled, drawn;
} fg_progress;

/* Start a line; quiet != 0 (or stderr not a tty) disables output. */
void fg_progress_begin(fg_progress *p, const char *label, fg_unit unit, uint64_t total, int quiet);
/* Set the amount done so far and redraw when due. */
void fg_progress_update(fg_progress *p, uint64_t done);
/* Final redraw and newline (when anything was drawn). */
void fg_progress_end(fg_progress *p);

/* Monotonic seconds. */
double fg_now(void);
/* "1.5 GiB", "320.0 MiB", "12.0 KiB" (binary units, one decimal) into buf. */
const char *fg_fmt_bytes(double bytes, char *buf, int n);

#ifdef __cplusplus
}
#endif
#endif
