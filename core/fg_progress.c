/* fg_progress.c - see fg_progress.h. */
#define _POSIX_C_SOURCE 200809L
#include "fg_progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double fg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *fg_fmt_bytes(double b, char *buf, int n)
{
    /* binary units: budgets and sizes are given in them (512M = 512 MiB) */
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024.0 && i < 4) {
        b /= 1024.0;
        i++;
    }
    snprintf(buf, (size_t)n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

void fg_progress_begin(fg_progress *p, const char *label, fg_unit unit, uint64_t total, int quiet)
{
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->done = 0;
    p->t0 = fg_now();
    p->last_draw = 0.0;
    p->drawn = 0;
    p->enabled = !quiet && isatty(STDERR_FILENO);
}

static void draw(fg_progress *p, double now)
{
    double el = now - p->t0, rate = el > 0 ? (double)p->done / el : 0.0;
    double eta = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0.0;
    double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 0.0;
    char a[32], b[32], r[32];
    if (p->unit == FG_UNIT_BYTES)
        fprintf(stderr, "\r%s %s / %s (%.0f%%)  %s/s  ETA %.0fs   ", p->label,
                fg_fmt_bytes((double)p->done, a, sizeof a),
                fg_fmt_bytes((double)p->total, b, sizeof b), pct,
                fg_fmt_bytes(rate, r, sizeof r), eta);
    else
        fprintf(stderr, "\r%s %llu / %llu tokens (%.0f%%)  %.1f tok/s  ETA %.0fs   ", p->label,
                (unsigned long long)p->done, (unsigned long long)p->total, pct, rate, eta);
    fflush(stderr);
    p->drawn = 1;
    p->last_draw = now;
}

void fg_progress_update(fg_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->enabled)
        return;
    double now = fg_now();
    if (now - p->last_draw >= 0.1)
        draw(p, now);
}

void fg_progress_end(fg_progress *p)
{
    if (!p->enabled)
        return;
    draw(p, fg_now());
    fputc('\n', stderr);
}
