/* runner_policy.c - the runner's glue to the policy search (policy/policy_search.h).
 *
 * --policy auto chooses the block, the placement and the cache's compression just before the
 * engine opens, from the machine's calibration (the cache's file, measured quickly when
 * missing) and the run's prompt length, new tokens and prompt count; on a device backend also
 * from the device, measured through a backend made like the run's (calibrate_device), which
 * adds the GPU's share to the search; the summary and --dry-run print its predicted times (and
 * link bytes) beside the measured ones. It chooses a lossy compression (the 4-bit cache) only
 * when allowed (o->cache_choice). A fixed policy is priced when this machine has a calibration
 * file; on a device backend only under --dry-run (nothing measures the device for a run) or
 * with --device-profile FILE, a device's calibration read instead of measured (so --backend sim
 * --dry-run can plan for a GPU this machine lacks).
 * Whatever priced the prediction (the calibration, the device's, the job) is kept in the run, and
 * once the engine's plan is made fgr_bound prices the bound of that plan (fg_policy_bound: the
 * least time the measured rates allow), which --dry-run and the summary print with the share of
 * it the run achieved.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_search.h"
#include "runner_int.h"

/* Whether the cost model prices Linear layers at the int8 kernels' rate: --compute int8 on the
 * CPU backend, and --compute bf16 (int8 for Q4/Q8; the store decides whether its weights take
 * them: fg_policy_model.q4_int8); bf16 prices F16/BF16 matrices at the bfloat16 GEMM's rate. */
static int cpu_bf16(const fgr_run *r)
{
    return r->eo.compute == FG_COMPUTE_BF16 && r->eo.backend == FG_BACKEND_CPU;
}

static int cpu_int8(const fgr_run *r)
{
    return (r->eo.compute == FG_COMPUTE_INT8 && r->eo.backend == FG_BACKEND_CPU) || cpu_bf16(r);
}

/* The calibration: --calibration FILE as given (refused when stale), else the cache's file,
 * measured quickly and written when it is missing, unreadable or of another machine/version. */
static int load_calibration(fgr_run *r, fg_calib *c, fg_err *err)
{
    char path[4096];
    int rc = r->o->calibration ? FG_OK : fg_calib_default_path(path, sizeof path, err);
    if (rc == FG_OK && r->o->calibration)
        snprintf(path, sizeof path, "%s", r->o->calibration);
    if (rc == FG_OK)
        rc = fg_calib_load(path, c, err);
    if (rc == FG_OK || r->o->calibration || rc == FG_ERR_LIMIT)
        return rc;
    snprintf(r->calib_note, sizeof r->calib_note, "%s; measured this machine quickly "
             "(fg-infer calibrate measures it fully)", err->msg);
    rc = fg_calib_measure(fg_engine_offload_dir(&r->eo), r->eo.threads, 1, r->o->quiet ? NULL : r->log,
                          c, err);
    fg_err serr;
    if (rc == FG_OK && fg_calib_save(path, c, &serr)) /* a read-only cache: use it unsaved */
        snprintf(r->calib_note + strlen(r->calib_note),
                 sizeof r->calib_note - strlen(r->calib_note), "; not saved: %s", serr.msg);
    return rc;
}

/* What the search plans for without a budget: 90% of the RAM available now. */
static uint64_t mem_available(void)
{
    return fg_engine_mem_available() / 10 * 9;
}
/* A device backend's calibration (policy/calib_dev.c), measured quickly through a backend made
 * as the run's will be (the simulated one with room for the measurement whatever the budget),
 * or read from --device-profile FILE (whose GEMM rates must be of the store's weight codec);
 * its figures go into r->dev_line. */
static int calibrate_device(fgr_run *r, const fg_policy_model *m, fg_calib_dev *d, fg_err *err)
{
    fg_backend *be = NULL;
    uint64_t room = r->eo.policy.gpu_budget > (512ull << 20) ? r->eo.policy.gpu_budget
                                                             : 512ull << 20;
    int q4 = m->codec == FG_CODEC_Q4, rc;
    if (r->o->device_profile) {
        rc = fg_calib_dev_load(r->o->device_profile, d, err);
        if (rc == FG_OK && d->q4 != q4)
            rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--device-profile %s: measured on %s "
                            "weights, and this store's matrices are %s (fg-infer calibrate "
                            "--device-profile%s measures the other)", r->o->device_profile,
                            d->q4 ? "q4" : "f16", q4 ? "q4" : "f16",
                            q4 ? " with --compress-weight" : "");
    } else {
        rc = fg_engine_backend_new(&r->eo, room, &be, err);
        if (rc == FG_OK)
            rc = fg_calib_measure_device(be, q4, 1, d, err);
        fg_backend_free(be);
    }
    if (rc)
        return rc;
    size_t cap = sizeof r->dev_line;
    int n = snprintf(r->dev_line, cap, "%s: link %.3g GB/s up, %.3g down; linear %.1f GFLOP/s at "
                     "1 row, %.1f at 256; attention %.2f ns a key and head of 64 (%.3g in a "
                     "prefill); %.0f%% of the uploads hidden (", d->name, d->up / 1e9,
                     d->down / 1e9, d->gflops[0], d->gflops[FG_CALIB_NM - 1],
                     d->attn_s * 1e9 * 64, d->attn_pre_s * 1e9 * 64, 100 * d->overlap);
    size_t at = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    if (r->o->device_profile && snprintf(r->dev_line + at, cap - at, "from %s, ",
                                         r->o->device_profile) > 0)
        at = strlen(r->dev_line);
    if (snprintf(r->dev_line + at, cap - at, "measured in %.2f s)", d->seconds) < 0)
        r->dev_line[at] = '\0';
    return rc;
}

/* The cost model's prediction for the run's summary; what it was priced with, kept for the
 * bound (fgr_bound). */
static void report_prediction(fgr_run *r, const fg_prediction *pred, const fg_calib *c,
                              const fg_policy_job *job)
{
    r->calib = *c;
    r->job = *job;
    if (job->dev) {
        r->calib_dev = *job->dev;
        r->job.dev = &r->calib_dev;
    }
    r->job.disk_dir = NULL; /* (the engine's: not kept) */
    r->rep.predicted = 1;
    r->rep.pred_prefill_s = pred->prefill_s;
    r->rep.pred_decode_s = pred->decode_s;
    r->rep.pred_tok_s = pred->tok_s;
    r->rep.pred_read = pred->read_bytes;
    r->rep.pred_write = pred->write_bytes;
    r->rep.pred_up = pred->up_bytes;
    r->rep.pred_down = pred->down_bytes;
}

/* Bytes the offload dir's file system has free (less 1%, at least 16 MiB, for what else
 * writes there during the run); 0 when unknown: no limit. */
static uint64_t disk_free(const fgr_run *r)
{
    uint64_t n = fg_engine_offload_free(&r->eo), margin = n / 100;
    margin = margin > (16u << 20) ? margin : 16u << 20;
    return n == UINT64_MAX ? 0 : n > margin ? n - margin : 1;
}

/* Choose r->eo.policy for prompts of P tokens, G new ones, `seqs` sequences (0: any). */
int fgr_auto_policy(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err)
{
    fg_calib c;
    fg_calib_dev dev;
    const fg_policy_model *m = NULL;
    int rc = load_calibration(r, &c, err);
    if (rc || (rc = fg_engine_gpu_budget(&r->eo, &r->eo.policy.gpu_budget, err)))
        return rc;
    if (!(m = fgr_policy_model(r, err)))
        return err->code;
    int on_dev = r->eo.backend != FG_BACKEND_CPU;
    if (on_dev && (rc = calibrate_device(r, m, &dev, err)))
        return rc;
    uint32_t cap = r->o->max_block;
    if (P + G == 0 || P + G > (r->eo.max_ctx ? r->eo.max_ctx : m->hp.max_pos)) {
        uint32_t ctx = r->eo.max_ctx ? r->eo.max_ctx : m->hp.max_pos;
        G = G < ctx ? G : 1;
        P = ctx - G;
    }
    fg_policy_job job = {P, G, seqs && cap ? (seqs < cap ? seqs : cap) : seqs ? seqs : cap,
                         r->eo.ram_budget ? r->eo.ram_budget : mem_available(),
                         r->o->cache_choice, cpu_int8(r), on_dev ? &dev : NULL,
                         disk_free(r), fg_engine_offload_dir(&r->eo), r->eo.max_ctx,
                         !r->eo.ram_budget, on_dev && r->o->attn_search};
    job.bf16 = cpu_bf16(r);
    fg_prediction pred;
    fg_search_stats st;
    double t0 = fg_now();
    rc = fg_policy_search(&c, m, &r->eo.policy, &job, &r->eo.policy, &pred, &st, err);
    if (rc == FG_OK) {
        char d[200];
        fg_policy_describe(&r->eo.policy, d, sizeof d);
        report_prediction(r, &pred, &c, &job);
        snprintf(r->policy_line, sizeof r->policy_line, "auto: %s%s (%u LPs, %u feasible, "
                 "%.0f ms)", d, r->o->cache_choice == 0 ? "; lossless only (--allow-lossy lets "
                 "it choose the 4-bit KV cache)" : r->o->cache_choice < 0 ? "; lossy allowed "
                 "(--allow-lossy)" : "", st.lps, st.feasible, (fg_now() - t0) * 1e3);
    }
    return rc;
}

/* A fixed policy's predicted times, when this machine has a calibration file (nothing is
 * measured for it, and nothing said when there is none); on a device backend under --dry-run
 * only, with the device measured as --policy auto measures it. */
void fgr_predict_fixed(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs)
{
    fg_calib c;
    fg_calib_dev dev;
    const fg_policy_model *m;
    char path[4096];
    fg_err e;
    /* a device is measured for it (about a second) only under --dry-run, which is asked for the
     * figures; a run does not pay that at start */
    int on_dev = r->eo.backend != FG_BACKEND_CPU;
    if (on_dev && !r->eo.plan_only && !r->o->device_profile)
        return;
    if (r->o->calibration)
        snprintf(path, sizeof path, "%s", r->o->calibration);
    else if (fg_calib_default_path(path, sizeof path, &e))
        return;
    if (fg_calib_load(path, &c, &e) || !(m = fgr_policy_model(r, &e)))
        return;
    if (on_dev && calibrate_device(r, m, &dev, &e))
        return;
    const fg_plan *pl = fg_engine_plan(r->e);
    fg_policy_job job = {P ? P : pl->max_ctx - G, G, seqs, r->eo.ram_budget, -1, cpu_int8(r),
                         on_dev ? &dev : NULL};
    job.bf16 = cpu_bf16(r);
    fg_prediction pred;
    fg_policy p = r->eo.policy;
    p.frac = pl->frac;
    fg_policy_predict(&c, m, pl, &p, &job, &pred);
    report_prediction(r, &pred, &c, &job);
    snprintf(r->policy_line, sizeof r->policy_line, "fixed");
}

void fgr_bound(fgr_run *r)
{
    const fg_policy_model *m;
    fg_err e;
    r->bound_line[0] = '\0';
    if (!r->rep.predicted || !r->e || !(m = fgr_policy_model(r, &e)))
        return;
    const fg_plan *pl = fg_engine_plan(r->e);
    fg_policy p = r->eo.policy;
    p.frac = pl->frac;
    fg_bound b;
    fg_policy_bound(&r->calib, m, pl, &p, &r->job, &b);
    r->rep.bound_s = b.s;
    r->rep.bound_tok_s = b.tok_s;
    fg_bound_describe(&b, 1, r->bound_line, sizeof r->bound_line);
}

const fg_policy_model *fgr_policy_model(fgr_run *r, fg_err *err)
{
    if (!r->pmodel_ok) {
        if (!r->model) {
            fg_err_set(err, FG_ERR_STATE, "no model is open");
            return NULL;
        }
        if (fg_policy_model_build(r->model, &r->pmodel, err))
            return NULL;
        r->pmodel_ok = 1;
    }
    return &r->pmodel;
}

void fgr_model_close(fgr_run *r)
{
    if (r->pmodel_ok)
        fg_policy_model_free(&r->pmodel);
    r->pmodel_ok = 0;
    fg_model_close(r->model);
    r->model = NULL;
}
