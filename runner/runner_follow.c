/* runner_follow.c - a follower rank's life (runner_follow.h): await rank 0's word, open the
 * store, the model and an engine over this rank's layers, serve blocks until QUIT, close, and
 * say in one line what the stage did. It opens an engine and drives it, so it lives on the
 * runner's floor: the engine below knows the stage's messages and schedules (engine/stage.c,
 * engine/schedule.c), never who opens it. */
#include <stdio.h>
#include <sys/resource.h>

#include "fg_bytes.h"
#include "fg_progress.h"
#include "runner_follow.h"

static void follower_line(fg_engine *e, const fg_engine_opts *o)
{
    if (!o->notice)
        return;
    fg_engine_stats st;
    fg_engine_stats_get(e, &st);
    fg_stage_info si;
    fg_stage_info_get(e, &si);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024;
    char line[400], rd[32], plan[32], peak[32];
    snprintf(line, sizeof line, "rank %d: layers %u-%u, block %u x %u; peak RSS %s (%llu "
             "bytes; plan %s + link buffers %.1f MiB), read from disk %s (%llu bytes), compute "
             "%.2f s, waited for weights %.2f s", si.rank, si.l0, si.l1 - 1, si.gbs, si.ngb,
             fg_fmt_bytes((double)rss, peak, sizeof peak), (unsigned long long)rss,
             fg_fmt_bytes((double)st.ram_peak_planned, plan, sizeof plan),
             si.link_bytes / FG_MIB,
             fg_fmt_bytes((double)st.pager.moved[FG_TIER_DISK][FG_TIER_HOST], rd, sizeof rd),
             (unsigned long long)st.pager.moved[FG_TIER_DISK][FG_TIER_HOST], st.compute_s,
             st.load_wait_s);
    o->notice(o->notice_ctx, line);
}

int fg_runner_follow(const char *model, const fg_engine_opts *o, const fg_link *link,
                     fg_err *err)
{
    fg_engine_opts eo = *o;
    int quit = 0;
    int rc = fg_stage_await(link, &eo, &quit, err);
    if (rc || quit)
        return rc;
    fg_store *store = NULL;
    fg_model *md = NULL;
    fg_engine *e = NULL;
    rc = fg_store_open(model, FG_STORE_RDONLY, NULL, &store, err);
    if (rc == FG_OK)
        rc = fg_model_open(store, &md, err);
    if (rc == FG_OK)
        rc = fg_engine_open(md, &eo, &e, err);
    if (rc == FG_OK)
        rc = fg_stage_serve(e, err);
    if (rc == FG_OK)
        follower_line(e, &eo);
    fg_err cerr;
    int rc2 = fg_engine_close(e, &cerr);
    if (rc == FG_OK && rc2)
        *err = cerr, rc = rc2;
    fg_model_close(md);
    fg_store_close(store);
    return rc;
}
