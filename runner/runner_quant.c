/* runner_quant.c - quantize-at-load: --compress-weight on a store that is not 4-bit.
 *
 * The store is quantized into a temporary store in the offload directory (what fg-convert STORE
 * --compress-weight writes), which replaces the source for the run; its names are removed as
 * soon as the engine holds its files open (fgr_open_engine), and again by fg_run if the run
 * fails before that. The source is closed first: one handle per store per process. A store
 * whose every matrix is already Q4, or kept 16-bit by the model (fg_role_stays_wide), needs
 * nothing. Temporary stores are named fg-q4-PID-XXXXXX: one left by a killed run (its process
 * gone) is removed by the next run that quantizes in that directory.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "runner_int.h"

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

void fgr_remove_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void bytes_progress(void *ctx, uint64_t done, uint64_t total)
{
    fg_progress *p = ctx;
    p->total = total;
    fg_progress_update(p, done);
}

/* Does the store hold a matrix --compress-weight would quantize (not Q4, not one the model
 * keeps 16-bit: fg_role_stays_wide)? */
typedef struct q4_need {
    int need;
    fg_tensor_spec *spec;
    uint32_t n;
} q4_need;

static int not_q4(void *ctx, const fg_store_tensor *t)
{
    q4_need *q = ctx;
    if (t->n_dims < 2 || t->codec.id == FG_CODEC_Q4)
        return 0;
    const fg_tensor_spec *s = fg_model_spec_find(q->spec, q->n, t->name);
    q->need |= !s || !fg_role_stays_wide(s->role);
    return 0;
}

/* Temporary stores are named fg-q4-PID-XXXXXX: one whose process is gone was left by a run
 * that was killed while quantizing; it is removed by the next run that uses the directory. */
static void sweep_stale(fgr_run *r, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long pid;
        char rest[32];
        if (sscanf(de->d_name, "fg-q4-%ld-%31s", &pid, rest) != 2 || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its process is alive (or not ours to ask about) */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        fgr_remove_tree(path);
        if (!r->o->quiet)
            fprintf(r->log, "fg-infer: removed %s, left by a run that was killed\n", path);
    }
    if (d)
        closedir(d);
}

/* --compress-weight on a store that is not 4-bit: quantize it into a temporary store and use
 * that one instead (the source is closed first: one handle per store per process). */
int fgr_quantize_at_load(fgr_run *r, const fg_hparams *hp, fg_err *err)
{
    q4_need q = {0, NULL, 0};
    int rc = fg_model_tensors(hp, &q.spec, &q.n, err);
    if (rc == FG_OK)
        rc = fg_store_tensor_iter(r->store, not_q4, &q, err);
    free(q.spec);
    if (rc || !q.need)
        return rc;
    const char *od = fg_engine_offload_dir(&r->eo);
    sweep_stale(r, od);
    snprintf(r->tmp_store, sizeof r->tmp_store, "%s/fg-q4-%ld-XXXXXX", od, (long)getpid());
    if (!mkdtemp(r->tmp_store)) {
        r->tmp_store[0] = '\0';
        return fg_err_sys(err, FG_ERR_IO, errno, "--compress-weight: cannot create a temporary "
                          "store in %s", od);
    }
    fgr_model_close(r);
    fg_store_close(r->store);
    r->store = NULL;
    fg_progress bar;
    fg_progress_begin(&bar, "quantizing", FG_UNIT_BYTES, 0, r->o->quiet);
    fg_convert_opts co = {1, 0, -1, NULL, 0, bytes_progress, &bar};
    fg_convert_report rep;
    rc = fg_convert_store(r->o->model, r->tmp_store, &co, &rep, err);
    fg_progress_end(&bar);
    if (rc == FG_OK)
        rc = fg_store_open(r->tmp_store, FG_STORE_RDONLY, NULL, &r->store, err);
    if (rc == FG_OK)
        rc = fg_model_open(r->store, &r->model, err);
    if (rc == FG_OK && !r->o->quiet) {
        char x[32], y[32];
        fprintf(r->log, "fg-infer: quantized the weights to 4-bit at load: %s -> %s in %.1f s "
                "(a temporary store in %s, removed once open)\n",
                fg_fmt_bytes((double)rep.source_bytes, x, sizeof x),
                fg_fmt_bytes((double)rep.stored_bytes, y, sizeof y), rep.seconds, r->tmp_store);
    }
    return rc;
}
