/* runner_prefix.c - the prefix cache in a run: open it for the engine's identity, the job's
 * shared-prefix pass, the summary line.
 *
 * The shared-prefix pass is what makes "prompts that share a prefix compute it once, in the same
 * block or in different blocks" true: before the first block, the deepest prefixes that two or
 * more pending prompts share (fg_prefix_shared) run as prompts of their own, whole pages only,
 * in blocks of the engine's size; their pages are saved as every prefill saves its pages, and
 * the job's blocks then load them. The pass generates one token per prefix (the schedule's
 * smallest unit of work) and throws it away; its time counts to the prefill, its tokens to
 * shared_tokens (not to the job's cached/computed prompt tokens).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fg_progress.h"
#include "runner_prefix.h"
#include "store.h"

#define DEFAULT_PAGE_TOKENS 16u

int fg_runner_prefix_open(fg_engine *e, const fg_run_opts *o, fg_prefix **out, fg_err *err)
{
    fg_prefix_ident id;
    uint32_t G = o->prefix_page_tokens ? o->prefix_page_tokens : DEFAULT_PAGE_TOKENS;
    int rc = fg_engine_prefix_ident(e, G, &id, err);
    fg_prefix_opts po = {o->prefix_budget, 0};
    if (rc == FG_OK)
        rc = fg_prefix_open(o->prefix_cache, &id, &po, out, err);
    if (rc == FG_OK)
        fg_engine_set_prefix(e, *out);
    return rc;
}

int fg_runner_prefix_share(fg_engine *e, fg_prefix *p, const int32_t *const *prompts,
                           const uint32_t *lens, size_t n, fg_run_report *rep, fg_err *err)
{
    fg_prefix_span *sp;
    size_t ns;
    double t0 = fg_now();
    int rc = fg_prefix_shared(p, prompts, lens, n, &sp, &ns, err);
    if (rc)
        return rc;
    uint32_t bs = fg_engine_block_size(e);
    fg_gen_seq *seqs = calloc(bs, sizeof *seqs);
    int32_t *out = calloc(bs, sizeof *out);
    if (!seqs || !out)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < ns; i += bs) {
        uint32_t m = ns - i < bs ? (uint32_t)(ns - i) : bs;
        for (uint32_t q = 0; q < m; q++)
            seqs[q] = (fg_gen_seq){prompts[sp[i + q].prompt], sp[i + q].n_tokens, 1,
                                   {0, 0, 1, 0}, 0, &out[q], 0, 0};
        fg_gen_stats gs;
        rc = fg_engine_generate(e, seqs, m, NULL, &gs, err);
        rep->shared_tokens += gs.prompt_computed;
    }
    rep->shared_prefixes += ns;
    rep->shared_s += fg_now() - t0;
    rep->prefill_s += fg_now() - t0;
    free(seqs);
    free(out);
    free(sp);
    return rc;
}

void fg_runner_prefix_summary(FILE *log, const fg_run_opts *o, fg_prefix *p,
                              const fg_run_report *rep)
{
    if (!p)
        return;
    fg_prefix_stats st;
    fg_prefix_stats_get(p, &st);
    char wr[32];
    fprintf(log, "         prefix cache %s: prompt tokens %" PRIu64 " cached, %" PRIu64
            " computed (shared pass: %" PRIu64 " prefixes, %" PRIu64 " tokens, %.2f s); pages "
            "hit %" PRIu64 ", saved %" PRIu64 " (%s), evicted %" PRIu64 "%s\n",
            o->prefix_cache, rep->prompt_cached, rep->prompt_computed, rep->shared_prefixes,
            rep->shared_tokens, rep->shared_s, st.pages_hit, st.pages_saved,
            fg_fmt_bytes((double)st.bytes_written, wr, sizeof wr), st.pages_evicted,
            st.busy_skips ? "; some saves skipped: another process held the cache" : "");
}
