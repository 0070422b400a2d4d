/* engine.c - an engine on a store: the model's tensors as engine/plan_model.c finds them
 * (model/'s table), every weight chunk registered with the pager (group = unit), the memory plan
 * (plan.c) made and every buffer sized from it, and the calls the schedules (schedule.c) make
 * for weights, KV and activation chunks (sched_int.h).
 *
 * The engine's files, top to bottom; a file calls only files below it (scripts/engine_calls.py
 * counts the calls that climb: none), and the follower rank's life, which opens an engine and
 * serves, is the runner's (runner/runner_follow.c), a floor above:
 *
 *    schedule.c    the schedules (generate, logits, a follower's serve) over one context,
 *        |         fg_sched (sched_int.h): it never sees struct fg_engine
 *    prefix_kv.c   the prefix cache's KV rows into and out of a block's KV chunks; scoring's
 *        |         shared runs (a donor's rows into its group's windows; the held run, kept
 *        |         from one scoring call to the next)
 *        |
 *    engine.c      open and close, tensors and units, the pager, weights, the schedules' calls
 *        |
 *    engine_dev.c  the backend, the device budget, buffers on the device, copies over the link
 *        |
 *    stage.c       a pipeline stage: its split, its plan, its messages (send/receive hooks)
 *        |
 *    trace.c, plan_model.c, plan.c   trace events; the plan's view of the model; the plan
 *
 * Invariants:
 *  E1  the engine allocates exactly the buffers the plan counts, with the plan's sizes (the
 *      pager's HOST pool gets plan.pool; the rest are plan.fixed; on a device backend the
 *      workspace, head, SMALL and block rows are device memory, counted in plan.dev_reserve:
 *      engine_dev.c);
 *  E2  every chunk of every tensor goes through the pager: acquire (disk -> HOST when not
 *      resident, its checksum checked unless no_verify), use, release, on every path (release
 *      folds its error into the caller's);
 *  E3  the engine knows roles and access kinds (model.h), never a family's tensor names;
 *  E4  a pipeline stage (stage.h: opts.link) registers, plans and reads only its own units'
 *      tensors and its own layers' KV cache; the other stages' are looked up, never read;
 *  E5  struct fg_engine (engine_int.h) is private to the files from prefix_kv.c down; the
 *      schedules see fg_sched, bound once at open after every buffer exists (sched_bind):
 *      what it copies (block, context, units, link, backend) is fixed from then on, and the
 *      buffers it points at are the engine's, freed at close;
 *  E6  the block (gbs x ngb), the context and the stage's layers are fixed at open: the plan
 *      is made once, and every later call works within it.
 *
 * How weights reach the backend (fg_access): SMALL tensors (norms, biases, position tables) are
 * decoded to f32 when their unit loads (on a device backend by its gather, into device memory);
 * LINEAR tensors go to the backend as typed weights whose pieces are the stored chunks,
 * prefetched whole with their unit and decoded by the backend one chunk at a time; the GATHER
 * tensor (token embedding) gives only the rows a step needs; the STREAM tensor (LM head, the
 * embedding itself when tied) is read chunk by chunk with read-ahead while the previous chunk
 * multiplies, so the whole table never sits in RAM.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fg_bytes.h"
#include "engine_int.h"
#include "fg_json.h"
#include "fg_progress.h"
#include "quant.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- tensors and units ---- */

/* A pipeline stage plans only what it registers: the units it runs (their figures, their
 * weight chunks for the pager's midpoint rule, compacted in place) and its layers' KV cache. */
static void stage_view(fg_engine *e)
{
    uint64_t weights = 0, max_floats = 0;
    for (uint32_t i = 0; i < e->n_tensors; i++) {
        const wtensor *t = &e->tensors[i];
        if (!fg_engine_runs(e, t->group))
            continue; /* another stage's */
        weights += t->stored_bytes;
        for (uint32_t c = 0; c < t->n_chunks; c++) {
            uint64_t f = t->chunks[c].n_rows * fg_tensor_spec_cols(&t->spec);
            max_floats = f > max_floats ? f : max_floats;
        }
    }
    uint32_t j = 0, lo = e->plan_unit_first[0];
    for (uint32_t u = 0; u < e->n_units; u++) {
        uint32_t hi = e->plan_unit_first[u + 1];
        e->plan_unit_first[u] = j;
        if (fg_engine_runs(e, u))
            for (uint32_t k = lo; k < hi; k++)
                e->plan_chunk_rank[j] = e->plan_chunk_rank[k], e->plan_chunk[j++] = e->plan_chunk[k];
        else
            memset(&e->plan_units[u], 0, sizeof e->plan_units[u]);
        lo = hi;
    }
    e->plan_unit_first[e->n_units] = j;
    e->pm.weights = weights;
    e->pm.max_chunk_floats = max_floats;
    e->pm.kv_layers_off = e->hp.n_layers - (e->l1 - e->l0);
}

/* The tensors and units as engine/plan_model.c finds them (the policy search sees the same
 * table): the engine takes its arrays and adds each tensor's piece rows. */
static int build_units(fg_engine *e, fg_err *err)
{
    fg_plan_weights w;
    int rc = fg_plan_weights_build(e->store, &e->hp, &w, err);
    if (rc)
        return rc;
    e->tensors = calloc(w.n_t + 1, sizeof *e->tensors);
    rc = e->tensors ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; rc == FG_OK && i < w.n_t; i++) {
        fg_plan_tensor *s = &w.t[i];
        wtensor *t = &e->tensors[e->n_tensors++];
        *t = (wtensor){.spec = s->spec, .codec = s->codec, .file_id = s->file_id,
                       .group = s->group, .n_chunks = s->n_chunks, .chunks = s->chunks,
                       .stored_bytes = s->stored, .rank = s->rank};
        s->chunks = NULL;
        t->piece_rows = malloc((t->n_chunks + 1) * sizeof *t->piece_rows);
        if (!t->piece_rows) {
            rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
            break;
        }
        for (uint32_t c = 0; c < t->n_chunks; c++)
            t->piece_rows[c] = t->chunks[c].first_row;
        t->piece_rows[t->n_chunks] = t->spec.dims[0];
        /* a mixture's stacked experts are used one by one: each in whole chunks (their biases,
         * vectors, are decoded whole) */
        for (uint32_t b = 1, c = 0; t->spec.blocks > 1 && t->spec.n_dims > 1 &&
                                    b < t->spec.blocks; b++) {
            uint64_t row = t->spec.dims[0] / t->spec.blocks * b;
            while (c < t->n_chunks && t->piece_rows[c] < row)
                c++;
            if (t->piece_rows[c] != row) {
                rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: tensor '%s': a stored chunk straddles "
                                "the rows of its blocks %u and %u (each expert must be whole "
                                "chunks: convert the checkpoint with this fg-convert)",
                                fg_store_dir(e->store), t->spec.name, b - 1, b);
                break;
            }
        }
    }
    if (rc == FG_OK) {
        e->cap_tensors = e->n_tensors;
        e->n_units = w.pm.n_units;
        e->units = w.ut;
        e->plan_units = w.units;
        e->plan_chunk = w.chunk;
        e->plan_unit_first = w.unit_first;
        e->plan_chunk_rank = w.chunk_rank;
        e->pm = w.pm;
        e->pm.hp = &e->hp;
        w.ut = NULL;
        w.units = NULL;
        w.chunk = NULL;
        w.unit_first = NULL;
        w.chunk_rank = NULL;
    }
    fg_plan_weights_free(&w);
    if (rc == FG_OK)
        rc = fg_stage_setup(e, err);
    if (rc == FG_OK && e->link)
        stage_view(e);
    return rc;
}

/* ---- the pager ---- */

/* Register every tensor's file and chunks with the pager (group = the unit that owns it, rank
 * the tensor's: plan_model.c). */
static int register_chunks(fg_engine *e, fg_err *err)
{
    uint32_t files[1024], file_ids[1024], n_files = 0;
    for (uint32_t i = 0; i < e->n_tensors; i++) {
        wtensor *t = &e->tensors[i];
        uint32_t k;
        if (!fg_engine_runs(e, t->group))
            continue; /* another stage's: never read here */
        for (k = 0; k < n_files && file_ids[k] != t->file_id; k++)
            ;
        int rc = FG_OK;
        if (k == n_files) {
            char path[4096];
            if (n_files == 1024)
                return fg_err_set(err, FG_ERR_LIMIT, "more than 1024 weight files");
            fg_store_file_path(e->store, t->file_id, 0, path, sizeof path);
            rc = fg_pager_add_file(e->pager, path, 0, &files[k], err);
            file_ids[n_files++] = t->file_id;
        }
        for (uint32_t c = 0; rc == FG_OK && c < t->n_chunks; c++) {
            const fg_fgt_chunk_info *ci = &t->chunks[c];
            fg_pager_chunk_desc d = {files[k], ci->offset, ci->length, fg_page_up(ci->length),
                                     ci->xxh3, 1, ((uint64_t)i << 32) | c, t->codec,
                                     FG_CHUNK_WEIGHT, t->group, 0, t->rank};
            uint32_t id;
            rc = fg_pager_add_chunk(e->pager, &d, &id, err);
            if (c == 0)
                t->first_id = id;
        }
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* The offload file: one KV chunk per (batch, layer), then one activation chunk per batch,
 * registered writable with the pager, then unlinked at once so nothing is left behind. The
 * chunks are fresh (their bytes are written before they are read), so the pager never reads one
 * that was not written back; when the plan homes the cache and the activations in RAM nothing
 * is ever written either, and no file is made at all (a memory-only registration). The file is
 * sparse; once the pager has placed the chunks, reserve_offload allocates the blocks of those
 * homed on disk, so a file system without room for them fails the start, not a write-back in
 * the middle of a run. */
const char *fg_engine_offload_dir(const fg_engine_opts *o)
{
    const char *dir = o->offload_dir ? o->offload_dir : getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

uint64_t fg_engine_offload_free(const fg_engine_opts *o)
{
    struct statvfs vf;
    return statvfs(fg_engine_offload_dir(o), &vf) ? UINT64_MAX
                                                  : (uint64_t)vf.f_bavail * vf.f_frsize;
}

uint64_t fg_engine_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f) && sscanf(line, "MemAvailable: %llu kB", &kb) != 1)
        ;
    if (f)
        fclose(f);
    return (uint64_t)kb * 1024;
}

static const char *offload_dir(const fg_engine *e) { return fg_engine_offload_dir(&e->o); }

static int offload_file(fg_engine *e, uint64_t bytes, uint32_t *file, int *fd_out, fg_err *err)
{
    *fd_out = -1;
    if (!e->plan.on_disk[1] && !e->plan.on_disk[2])
        return fg_pager_add_file(e->pager, NULL, 1, file, err);
    const char *dir = offload_dir(e);
    char path[4096];
    snprintf(path, sizeof path, "%s/fg-kv-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "--offload-dir %s: cannot create the KV file",
                          dir);
    int rc = ftruncate(fd, (off_t)bytes) ? fg_err_sys(err, FG_ERR_IO, errno, "--offload-dir %s: "
                                                      "ftruncate", path) : FG_OK;
    if (rc == FG_OK)
        rc = fg_pager_add_file(e->pager, path, 1, file, err);
    unlink(path);
    if (rc)
        close(fd);
    else
        *fd_out = fd;
    return rc;
}

/* Allocate the offload file's blocks under the chunks the pager homed on disk (adjacent ones in
 * one call). A file system that cannot allocate ahead (EOPNOTSUPP) is checked for free space
 * instead. */
static int reserve_offload(fg_engine *e, int fd, fg_err *err)
{
    uint32_t n = e->ngb * (e->l1 - e->l0) + e->ngb;
    uint64_t need = 0, lo = 0, hi = 0;
    int rc = 0, unsupported = 0;
    for (uint32_t i = 0; i <= n && !rc; i++) {
        fg_pager_chunk_desc d = {0};
        int disk = i < n && fg_pager_chunk(e->pager, e->kv_first + i, &d) == FG_OK &&
                   fg_pager_home(e->pager, e->kv_first + i) == FG_TIER_DISK;
        if (disk && hi == d.offset) { /* extends the range */
            hi += d.padded;
        } else {
            if (hi > lo && !unsupported) {
                rc = fallocate(fd, 0, (off_t)lo, (off_t)(hi - lo)) ? errno : 0;
                if (rc == EOPNOTSUPP || rc == ENOSYS)
                    unsupported = 1, rc = 0;
            }
            lo = disk ? d.offset : 0;
            hi = disk ? d.offset + d.padded : 0;
        }
        need += disk ? d.padded : 0;
    }
    char a[32], b[32];
    uint64_t avail = rc == 0 && !unsupported ? 0 : fg_engine_offload_free(&e->o);
    if (rc == 0 && unsupported && avail < need)
        rc = ENOSPC;
    if (rc == ENOSPC)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--offload-dir %s: the KV cache and activations "
                          "homed on disk need %s; the file system has %s free (another "
                          "--offload-dir, a smaller block, or more of them in RAM)",
                          offload_dir(e), fg_fmt_bytes((double)need, a, sizeof a),
                          avail == UINT64_MAX ? "?" : fg_fmt_bytes((double)avail, b, sizeof b));
    if (rc)
        return fg_err_sys(err, FG_ERR_IO, rc, "--offload-dir %s: allocating %s for the KV "
                          "cache and activations homed on disk", offload_dir(e),
                          fg_fmt_bytes((double)need, a, sizeof a));
    return FG_OK;
}

static int register_kv(fg_engine *e, int *fd, fg_err *err)
{
    uint64_t kvc = e->plan.kv_chunk, actc = e->plan.act_chunk;
    uint64_t n = (uint64_t)e->ngb * (e->l1 - e->l0), act_off = n * kvc;
    uint32_t file;
    int rc = offload_file(e, act_off + e->ngb * actc, &file, fd, err);
    for (uint64_t i = 0; rc == FG_OK && i < n; i++) {
        fg_pager_chunk_desc d = {file, i * kvc, kvc, kvc, 0, 0, UINT64_MAX - i, {0},
                                 FG_CHUNK_KV, (uint32_t)i, 1};
        uint32_t id;
        rc = fg_pager_add_chunk(e->pager, &d, &id, err);
        if (i == 0)
            e->kv_first = id;
    }
    for (uint32_t k = 0; rc == FG_OK && k < e->ngb; k++) {
        fg_pager_chunk_desc d = {file, act_off + k * actc, actc, actc, 0, 0, UINT64_MAX - n - k,
                                 {0}, FG_CHUNK_ACT, (uint32_t)(n + k), 1};
        uint32_t id;
        rc = fg_pager_add_chunk(e->pager, &d, &id, err);
        if (k == 0)
            e->act_first = id;
    }
    return rc;
}

/* The pager's label for a chunk's tag (register_chunks: tensor index << 32 | chunk), so its
 * errors name the tensor. */
static void chunk_label(void *ctx, uint64_t tag, char *buf, size_t n)
{
    const fg_engine *e = ctx;
    uint32_t t = (uint32_t)(tag >> 32);
    if (t < e->n_tensors)
        snprintf(buf, n, "tensor '%s' chunk %u", e->tensors[t].spec.name, (uint32_t)tag);
    else
        snprintf(buf, n, "the KV cache / activations");
}

/* The pager's weight homes are the plan's (the one rule: pager/place.c, engine/plan.c): a
 * difference would break the budget the plan kept, so it is refused (FG_ERR_STATE: a bug). */
static int homes_agree(fg_engine *e, fg_err *err)
{
    uint64_t homed[FG_TIER_COUNT] = {0};
    for (uint32_t i = 0; i < e->n_tensors; i++) {
        const wtensor *t = &e->tensors[i];
        for (uint32_t c = 0; fg_engine_runs(e, t->group) && c < t->n_chunks; c++)
            homed[fg_pager_home(e->pager, t->first_id + c)] += fg_page_up(t->chunks[c].length);
    }
    if (homed[FG_TIER_HOST] == e->plan.homed[0] && homed[FG_TIER_DEVICE] == e->plan.dev_homed[0])
        return FG_OK;
    return fg_err_set(err, FG_ERR_STATE, "engine: the pager homes %llu + %llu bytes of "
                      "weights in RAM + GPU, the memory plan counted %llu + %llu",
                      (unsigned long long)homed[FG_TIER_HOST],
                      (unsigned long long)homed[FG_TIER_DEVICE],
                      (unsigned long long)e->plan.homed[0],
                      (unsigned long long)e->plan.dev_homed[0]);
}

static int open_pager(fg_engine *e, fg_err *err)
{
    fg_pager_config pc;
    memset(&pc, 0, sizeof pc);
    pc.budget[FG_TIER_HOST] = e->plan.pool;
    pc.flags = FG_PAGER_NO_CUDA | (e->o.no_verify ? FG_PAGER_NO_VERIFY : 0);
    pc.notice = e->o.notice;
    pc.notice_ctx = e->o.notice_ctx;
    pc.label = chunk_label;
    pc.label_ctx = e;
    int fd = -1;
    int rc = fg_engine_pager_device(e, &pc, err);
    if (rc == FG_OK)
        rc = fg_pager_open(&pc, &e->pager, err);
    if (rc == FG_OK)
        rc = register_chunks(e, err);
    if (rc == FG_OK)
        rc = register_kv(e, &fd, err);
    if (rc == FG_OK)
        rc = fg_pager_place(e->pager, &e->plan.frac, err);
    if (rc == FG_OK)
        rc = homes_agree(e, err);
    if (rc == FG_OK && fd >= 0)
        rc = reserve_offload(e, fd, err);
    /* --no-overlap: stores wait, as loads do */
    e->write_behind = e->o.policy.overlap && !fg_plan_disk_cached(&e->plan);
    if (fd >= 0)
        close(fd);
    return rc;
}

int fg_engine_acquire(fg_engine *e, uint32_t id, fg_pager_view *v, fg_err *err)
{
    double t0 = fg_now();
    int rc = fg_pager_acquire(e->pager, id, FG_TIER_DISK, v, err);
    e->wait_s += fg_now() - t0;
    return rc;
}

int fg_engine_release(fg_engine *e, const fg_pager_view *v, int dirty, int rc, fg_err *err)
{
    fg_err rerr;
    /* a KV chunk homed on disk is not used again before the next step reaches its layer: it is
     * stored while the next batches compute (FlexGen's store of the previous batch's cache),
     * so evicting it later is a drop, not a write the computing thread waits for */
    unsigned fl = !dirty ? 0
                : dirty == FG_ENGINE_STORE && e->write_behind &&
                  fg_pager_home(e->pager, v->id) == FG_TIER_DISK
                ? FG_PAGER_DIRTY | FG_PAGER_WRITE_BEHIND : FG_PAGER_DIRTY;
    int rc2 = fg_pager_release(e->pager, v, fl, &rerr);
    if (rc == FG_OK && rc2) {
        if (err)
            *err = rerr;
        rc = rc2;
    }
    return rc;
}

/* Prefetches ask for each chunk's home (FG_TIER_DISK: HOST, or DEVICE for what is homed on the
 * GPU): a chunk homed on the GPU goes up as soon as its read completes, or at once when it is
 * already in RAM, while the device still computes the units before it, not when its unit
 * acquires it. */
void fg_engine_kv_prefetch(fg_engine *e, uint32_t k, uint32_t layer)
{
    fg_pager_ticket t;
    fg_pager_prefetch(e->pager, fg_engine_kv_id(e, k, layer), FG_TIER_DISK, &t, NULL);
}

int fg_engine_kv_acquire(fg_engine *e, uint32_t k, uint32_t layer, fg_pager_view *v, fg_err *err)
{
    return fg_engine_acquire(e, fg_engine_kv_id(e, k, layer), v, err);
}

fg_kv_batch fg_engine_kv_view(const fg_engine *e, void *chunk, uint32_t layer)
{
    size_t rows = (size_t)e->gbs * e->max_ctx, rb = e->plan.kv_row;
    uint8_t *base = chunk; /* K rows, then V rows (MLA: one set, the values the same rows) */
    uint8_t *v = fg_model_kv_planes(&e->hp) == 2 ? base + rows * rb : base;
    return (fg_kv_batch){base, v, e->kv_codec, rb, fg_model_kv_width(&e->hp), e->max_ctx,
                         layer};
}

int fg_engine_act_acquire(fg_engine *e, uint32_t k, fg_pager_view *v, fg_err *err)
{
    return fg_engine_acquire(e, e->act_first + k, v, err);
}

void fg_engine_act_prefetch(fg_engine *e, uint32_t k)
{
    fg_pager_ticket t;
    fg_pager_prefetch(e->pager, e->act_first + k, FG_TIER_DISK, &t, NULL);
}

/* ---- weights ---- */

static int prefetch_chunk(fg_engine *e, const wtensor *t, uint32_t c)
{
    fg_pager_ticket tk;
    return c < t->n_chunks ? fg_pager_prefetch(e->pager, t->first_id + c, FG_TIER_DISK, &tk, NULL)
                           : FG_OK;
}

void fg_engine_span_prefetch(fg_engine *e, uint32_t u, uint64_t tokens)
{
    uint32_t n = fg_plan_span(&e->pm, &e->o.policy, u);
    int experts = e->o.policy.experts == FG_EXPERTS_ALL ||
                  fg_model_expert_share(&e->hp, (double)tokens) >= FG_EXPERTS_WHOLE;
    for (uint32_t k = 0; k < n; k++) {
        const unit *un = &e->units[(u + k) % e->n_units];
        for (uint32_t i = 0; i < un->n_t; i++) {
            const wtensor *t = &e->tensors[un->t[i]];
            /* a streamed tensor fetches each next chunk as it goes; the rows a gather needs
             * are known only then: prefetching them whole would read the table; so are the
             * experts a few tokens choose (model/decoder.c asks for them after routing) */
            int later = !experts && fg_role_is_expert(t->spec.role);
            uint32_t chunks = t->spec.access == FG_ACCESS_GATHER || later ? 0
                            : t->spec.access == FG_ACCESS_STREAM || t->group != u + k ? 1
                            : t->n_chunks;
            for (uint32_t c = 0; c < chunks; c++)
                if (prefetch_chunk(e, t, c))
                    return; /* no room now: the acquire will load it */
        }
    }
}

/* fg_weight callbacks: piece i of tensor w->t is its chunk i, through the pager. */
static int piece_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    wsrc *w = ctx;
    fg_engine *e = w->e;
    const wtensor *t = &e->tensors[w->t];
    if (i >= t->n_chunks)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tensor '%s' has %u chunks, not %u",
                          t->spec.name, t->n_chunks, i + 1);
    for (uint32_t d = 1; e->o.policy.overlap && t->spec.access == FG_ACCESS_STREAM &&
                         d <= FG_HEAD_AHEAD; d++)
        prefetch_chunk(e, t, i + d); /* read the next ones while this one multiplies */
    /* the chunk's own view: a backend may hold several pieces (backend.h fg_weight) */
    fg_pager_view *v = &e->wviews[t->first_id + i];
    int rc = fg_engine_acquire(e, t->first_id + i, v, err);
    if (rc)
        return rc;
    const fg_fgt_chunk_info *ci = &t->chunks[i];
    *p = (fg_wpiece){v->ptr, (size_t)ci->length, t->codec, t->spec.n_dims,
                     {t->spec.dims[0], fg_tensor_spec_cols(&t->spec)},
                     ci->first_row, ci->n_rows, v};
    return FG_OK;
}

static int piece_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    wsrc *w = ctx;
    return fg_engine_release(w->e, p->token, 0, FG_OK, err);
}

static void piece_prefetch(void *ctx, uint32_t i)
{
    wsrc *w = ctx;
    prefetch_chunk(w->e, &w->e->tensors[w->t], i);
}

/* Decode tensor ti whole into dst (f32, of type e->buft): a SMALL tensor (norms, biases,
 * positions). On a device backend its chunks go to the backend's gather (decoded where they
 * are, uploaded raw when homed in RAM), else they are decoded here. */
/* dst[0 .. n) += add (a SMALL tensor's fg_tensor_spec.add), on the backend when dst is its
 * device's memory */
static int add_const(fg_engine *e, float *dst, uint64_t n, float add, fg_err *err)
{
    if (e->buft == FG_BUFT_HOST) {
        for (uint64_t i = 0; i < n; i++)
            dst[i] += add;
        return FG_OK;
    }
    float *v = malloc(n * sizeof *v + 4);
    if (!v)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        v[i] = add;
    int rc = e->be->iface->add(e->be, dst, v, n, err);
    if (rc == FG_OK) /* the add may read v until the backend's queue drains */
        rc = e->be->iface->sync(e->be, err);
    free(v);
    return rc;
}

static int materialize_raw(fg_engine *e, uint32_t ti, float *dst, fg_err *err);

/* A SMALL tensor decoded to f32 at dst (host or device memory, the engine's buffer type), with
 * its spec's constant added */
static int materialize(fg_engine *e, uint32_t ti, float *dst, fg_err *err)
{
    const wtensor *t = &e->tensors[ti];
    int rc = materialize_raw(e, ti, dst, err);
    uint64_t n = t->spec.dims[0] * fg_tensor_spec_cols(&t->spec);
    return rc == FG_OK && t->spec.add != 0 ? add_const(e, dst, n, t->spec.add, err) : rc;
}

static int materialize_raw(fg_engine *e, uint32_t ti, float *dst, fg_err *err)
{
    const wtensor *t = &e->tensors[ti];
    uint64_t cols = fg_tensor_spec_cols(&t->spec);
    if (e->buft != FG_BUFT_HOST) {
        wsrc *s = &e->wsrc[ti];
        *s = (wsrc){e, (int)ti};
        fg_weight w = {NULL, t->n_chunks, t->piece_rows, piece_acquire, piece_release,
                       piece_prefetch, s};
        int rc = fg_engine_small_gather(e, &w, t->spec.dims[0], cols, dst, err);
        return rc ? fg_err_set(err, rc, "tensor '%s': %s", t->spec.name, err->msg) : FG_OK;
    }
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        const fg_fgt_chunk_info *ci = &t->chunks[c];
        fg_pager_view v;
        int rc = fg_engine_acquire(e, t->first_id + c, &v, err);
        if (rc)
            return rc;
        float *out = dst + ci->first_row * cols;
        uint64_t n = ci->n_rows * cols;
        const void *src;
        void *tmp; /* the bytes of a chunk homed on the GPU, copied down */
        rc = fg_engine_small_bytes(e, &v, &src, &tmp, err);
        if (rc == FG_OK && t->codec.id == FG_CODEC_F32) {
            memcpy(out, src, n * 4);
        } else if (rc == FG_OK && t->codec.id == FG_CODEC_F16) {
            fg_f16_to_f32(src, out, n, FG_QUANT_ISA_AUTO);
        } else if (rc == FG_OK && t->codec.id == FG_CODEC_BF16) {
            for (uint64_t i = 0; i < n; i++) {
                uint32_t bits = (uint32_t)((const uint16_t *)src)[i] << 16;
                memcpy(&out[i], &bits, 4);
            }
        } else if (rc == FG_OK) {
            fg_qview q;
            rc = fg_codec_qview(&t->codec, t->spec.n_dims, t->spec.dims, ci->n_rows, &q, err);
            if (rc == FG_OK)
                rc = fg_quant_decode(&t->codec, &q, src, ci->length, out, FG_CODEC_F32, 0,
                                     FG_QUANT_ISA_AUTO, err);
        }
        free(tmp);
        if ((rc = fg_engine_release(e, &v, 0, rc, err)))
            return fg_err_set(err, rc, "tensor '%s' chunk %u: %s", t->spec.name, c, err->msg);
    }
    return FG_OK;
}

/* Load unit u's SMALL tensors into dst (f32) and fill w with every tensor's view. decoded: the
 * unit's SMALL tensors are already at dst (the kept embedding span): only the pointers are
 * set. */
static int unit_load(fg_engine *e, uint32_t u, fg_unit_w *w, float *dst, int decoded,
                     fg_err *err)
{
    const unit *un = &e->units[u];
    memset(w, 0, sizeof *w);
    fg_model_unit_kind(&e->hp, u, &w->layer);
    for (uint32_t i = 0; i < un->n_t; i++) {
        const wtensor *t = &e->tensors[un->t[i]];
        fg_role r = t->group == u ? t->spec.role : FG_ROLE_LM_HEAD; /* a tied head */
        fg_access a = t->group == u ? t->spec.access : FG_ACCESS_STREAM;
        w->rows[r] = t->spec.dims[0];
        if (a != FG_ACCESS_SMALL) {
            wsrc *s = &e->wsrc[un->t[i]];
            *s = (wsrc){e, un->t[i]};
            w->w[r] = (fg_weight){NULL, t->n_chunks, t->piece_rows, piece_acquire,
                                  piece_release, piece_prefetch, s};
            continue;
        }
        int rc = decoded ? FG_OK : materialize(e, un->t[i], dst, err);
        if (rc)
            return rc;
        w->f[r] = dst;
        w->w[r].f32 = dst;
        dst += t->spec.dims[0] * fg_tensor_spec_cols(&t->spec);
    }
    return FG_OK;
}

uint32_t fg_engine_span_len(const fg_engine *e, uint32_t u)
{
    return fg_plan_span(&e->pm, &e->o.policy, u);
}

/* The embedding span's SMALL tensors (OPT's learned positions: a whole table) are decoded once
 * into the front of small_f32 and kept; the other spans share the room after them. */
int fg_engine_span_load(fg_engine *e, uint32_t u, uint32_t n, fg_unit_w *w, fg_err *err)
{
    int embed = e->units[u].kind == FG_UNIT_EMBED;
    float *dst = e->small_f32 + (embed ? 0 : e->plan.small_keep / 4);
    int rc = FG_OK;
    for (uint32_t k = 0; rc == FG_OK && k < n; k++) {
        rc = unit_load(e, u + k, &w[k], dst, embed && e->small_kept, err);
        dst += e->plan_units[u + k].small_floats;
    }
    if (embed && rc == FG_OK)
        e->small_kept = 1;
    return rc;
}

/* ---- open / close ---- */

static int alloc_buffers(fg_engine *e, fg_err *err)
{
    const fg_plan *p = &e->plan;
    uint64_t tok = (uint64_t)e->gbs * e->max_ctx, bls = (uint64_t)e->gbs * e->ngb;
    e->ws_rows = (uint32_t)(tok > bls ? tok : bls);
    e->ws_rows = e->ws_rows > p->logit_rows ? e->ws_rows : p->logit_rows;
    e->wsrc = calloc(e->n_tensors + 1, sizeof *e->wsrc);
    uint32_t ids = 1; /* the weight chunks' ids: a view each (piece_acquire) */
    for (uint32_t t = 0; t < e->n_tensors; t++)
        ids = e->tensors[t].first_id + e->tensors[t].n_chunks > ids
                  ? e->tensors[t].first_id + e->tensors[t].n_chunks : ids;
    e->wviews = calloc(ids, sizeof *e->wviews);
    e->sc.blk_ids = malloc(bls * 4);
    e->sc.blk_pos = malloc(bls * 4);
    e->sc.valid = calloc(e->ngb * tok, 1);
    e->sc.ids = calloc(e->ngb * tok, 4);
    e->sc.pos = calloc(e->ngb * tok, 4);
    if (!e->wsrc || !e->wviews || !e->sc.valid || !e->sc.ids || !e->sc.pos || !e->sc.blk_ids ||
        !e->sc.blk_pos)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory for the engine's buffers (%.0f MiB "
                          "planned)", p->total_host / FG_MIB);
    int rc = fg_engine_buffers_dev(e, err); /* the workspace, rows and logits: engine_dev.c */
    if (rc == FG_OK)
        rc = fg_sample_scratch_create(e->hp.vocab_size, &e->sc.sampler, err);
    if (rc == FG_OK)
        rc = e->be->iface->reserve(e->be, e->pm.max_chunk_floats, err);
    return rc;
}

/* What the schedules see (sched_int.h), once the buffers are allocated: copies of what is
 * fixed from here on; the buffers are e->sc's own. */
static void sched_bind(fg_engine *e)
{
    fg_sched *c = &e->sc;
    c->e = e;
    c->hp = &e->hp;
    c->arch = e->arch;
    c->be = e->be;
    c->policy = &e->o.policy;
    c->micro_batch = e->o.micro_batch;
    c->sync_spans = e->o.trace_path && e->buft != FG_BUFT_HOST;
    c->no_share = e->o.no_share;
    c->gbs = e->gbs;
    c->ngb = e->ngb;
    c->max_ctx = e->max_ctx;
    c->logit_rows = e->plan.logit_rows;
    c->ahead = e->plan.ahead;
    c->units = e->units;
    c->n_units = e->n_units;
    c->link = e->link;
    c->l0 = e->l0;
    c->l1 = e->l1;
    c->buft = e->buft;
}

fg_sched *fg_engine_sched(fg_engine *e) { return &e->sc; }

static int check_opts(fg_engine *e, fg_err *err)
{
    const fg_policy *p = &e->o.policy;
    if (!(p->attn_sparsity >= 0 && p->attn_sparsity <= 1))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--attn-sparsity %g: must be in (0, 1]",
                          (double)p->attn_sparsity);
    if (e->max_ctx > e->hp.max_pos && e->hp.pos == FG_POS_LEARNED)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prompt + generation of %u tokens exceeds the "
                          "model's %u positions", e->max_ctx, e->hp.max_pos);
    /* dynamic NTK rescales theta past them, which fg does not (model/rope.c) */
    if (e->max_ctx > e->hp.max_pos && e->hp.pos == FG_POS_ROPE &&
        e->hp.rope.scaling == FG_ROPE_DYNAMIC)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "a context of %u tokens exceeds the model's "
                          "%u positions, past which its dynamic rope_scaling would change the "
                          "frequencies", e->max_ctx, e->hp.max_pos);
    for (uint32_t i = 0; p->compress_weight && i < e->n_tensors; i++)
        if (e->tensors[i].spec.n_dims >= 2 && e->tensors[i].codec.id != FG_CODEC_Q4 &&
            !fg_role_stays_wide(e->tensors[i].spec.role))
            return fg_err_set(err, FG_ERR_STATE, "--compress-weight: tensor '%s' is %s in %s "
                              "(quantize the store with fg-convert STORE -o STORE-q4 "
                              "--compress-weight)", e->tensors[i].spec.name,
                              fg_codec_name(e->tensors[i].codec.id), fg_store_dir(e->store));
    return FG_OK;
}

/* The memory plan; with o.score_room under a budget, made again with room kept out of it for
 * scoring's shared rows (prefix_kv.c: fg_engine_share_fits, fg_engine_held_fits measure them
 * against the budget beside the plan's total): the held run of a whole context, all layers, and
 * the donors' rows of one layer for a block of contexts, at most a quarter of the budget. When
 * the plan does not fit beside that room, the first plan stands (sharing then takes what room
 * there is, often none). */
static int make_plan(fg_engine *e, fg_err *err)
{
    uint64_t b = e->o.ram_budget;
    int rc = fg_plan_make(&e->pm, &e->o.policy, e->max_ctx, b, &e->plan, err);
    if (rc || !b || !e->o.score_room || e->o.no_share)
        return rc;
    uint64_t rows = (uint64_t)e->max_ctx * 2 * e->plan.kv_row;
    uint64_t want = rows * (e->hp.n_layers + (uint64_t)e->plan.gbs * e->plan.ngb);
    uint64_t room = want < b / 4 ? want : b / 4;
    fg_plan pl;
    fg_err e2;
    if (fg_plan_make(&e->pm, &e->o.policy, e->max_ctx, b - room, &pl, &e2) == FG_OK) {
        pl.budget = b; /* (the whole budget: the shared rows' checks measure against it) */
        e->plan = pl;
    }
    return FG_OK;
}

static int engine_init(fg_engine *e, fg_err *err)
{
    e->hp = *fg_model_hparams(e->model); /* the engine's copy: use_long is set below */
    int rc = build_units(e, err);
    if (rc)
        return rc;
    e->arch = fg_model_arch(&e->hp);
    e->max_ctx = e->o.max_ctx ? e->o.max_ctx : e->hp.max_pos;
    if ((rc = check_opts(e, err)))
        return rc;
    /* LongRoPE's long factors for a context past the original positions, its short ones within
     * them: transformers switches by the largest position a forward call sees, so the two agree
     * for every run within the original positions and for a prompt already past them (a prompt
     * within them that generation takes past differs; llama.cpp's rule is this one too) */
    e->hp.rope.use_long = e->hp.rope.scaling == FG_ROPE_LONGROPE &&
                          e->max_ctx > e->hp.rope.orig_max_pos;
    if (e->o.policy.compress_cache)
        e->kv_codec = fg_codec_quant(4, 64, 1);
    else
        e->kv_codec = fg_codec_float(FG_CODEC_F32);
    if ((rc = fg_engine_device_budget(e, err)))
        return rc;
    rc = e->link ? fg_stage_plan(e, err) : make_plan(e, err);
    if (rc)
        return rc;
    e->gbs = e->plan.gbs;
    e->ngb = e->plan.ngb;
    if (e->o.plan_only)
        return FG_OK;
    /* a budget is a ceiling the run may reach: one above what the kernel can give now would
     * end in a failed allocation or the OOM killer hours in, so it is refused here */
    uint64_t now = e->o.ram_budget ? fg_engine_mem_available() : 0;
    if (now && e->o.ram_budget > now) {
        char b[32], a[32];
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %s is more than the %s of RAM "
                          "available now (MemAvailable in /proc/meminfo): give at most that",
                          fg_fmt_bytes((double)e->o.ram_budget, b, sizeof b),
                          fg_fmt_bytes((double)now, a, sizeof a));
    }
    uint64_t avail = e->o.ram_budget ? 0 : fg_engine_mem_available();
    if (avail && e->plan.total_host > avail)
        return fg_err_set(err, FG_ERR_NO_SPACE, "the plan needs %.1f GiB of RAM (block %u x %u, "
                          "context %u), more than the %.1f GiB available: a smaller "
                          "--gpu-batch-size or --num-gpu-batches, or less in RAM by --percent", e->plan.total_host / GIB, e->gbs, e->ngb,
                          e->max_ctx, avail / GIB);
    if ((rc = fg_engine_backend_create(e, err)) || (rc = open_pager(e, err)) ||
        (rc = alloc_buffers(e, err)))
        return rc;
    sched_bind(e);
    return FG_OK;
}

int fg_engine_open(const fg_model *model, const fg_engine_opts *o, fg_engine **out,
                   fg_err *err)
{
    fg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    e->o = *o;
    e->model = model;
    e->store = fg_model_store(model);
    e->t_open = fg_now();
    e->link = o->link && o->link->size > 1 ? o->link : NULL;
    int rc = engine_init(e, err);
    int staged = rc == FG_OK && e->link && !e->o.plan_only; /* a plan alone joins no stage */
    if (staged)
        rc = fg_stage_ready(e, err);
    if (staged && rc == FG_OK && e->link->rank == 0)
        rc = fg_stage_announce(e, err);
    if (rc) {
        e->o.trace_path = NULL;
        fg_engine_close(e, NULL);
        return rc;
    }
    *out = e;
    return FG_OK;
}

int fg_engine_close(fg_engine *e, fg_err *err)
{
    if (!e)
        return FG_OK;
    int rc = FG_OK;
    if (e->o.trace_path) {
        fg_err terr;
        rc = fg_trace_write(e, e->o.trace_path, &terr);
        if (rc && err)
            *err = terr;
    }
    fg_pager_close(e->pager);
    fg_engine_buffers_dev_free(e); /* before the device goes */
    fg_backend_free(e->be);
    fg_sample_scratch_free(e->sc.sampler);
    for (uint32_t i = 0; i < e->n_tensors; i++) {
        free(e->tensors[i].chunks);
        free(e->tensors[i].piece_rows);
    }
    free(e->tensors);
    free(e->units);
    free(e->plan_units);
    free(e->plan_chunk);
    free(e->plan_unit_first);
    free(e->plan_chunk_rank);
    free(e->wsrc);
    free(e->wviews);
    free(e->sc.blk_ids);
    free(e->sc.blk_pos);
    free(e->sc.valid);
    free(e->sc.ids);
    free(e->sc.pos);
    free(e->spans);
    free(e->held.ids);
    free(e->held.rows);
    free(e);
    return rc;
}

const fg_hparams *fg_engine_hparams(const fg_engine *e) { return &e->hp; }
const fg_plan *fg_engine_plan(const fg_engine *e) { return &e->plan; }
uint32_t fg_engine_block_size(const fg_engine *e) { return e->gbs * e->ngb; }

uint64_t fg_engine_disk_read(fg_engine *e)
{
    fg_pager_stats ps;
    fg_pager_stats_get(e->pager, &ps);
    return ps.moved[FG_TIER_DISK][FG_TIER_HOST] + ps.moved[FG_TIER_DISK][FG_TIER_DEVICE];
}

void fg_engine_stats_get(const fg_engine *e, fg_engine_stats *out)
{
    memset(out, 0, sizeof *out);
    fg_pager_stats_get(e->pager, &out->pager);
    fg_backend_stats bs;
    e->be->iface->stats(e->be, &bs);
    out->weight_bytes_converted = bs.decoded_bytes;
    out->weight_bytes_panel = bs.panel_bytes;
    out->link_bytes[0] = bs.link_bytes[0];
    out->link_bytes[1] = bs.link_bytes[1];
    out->compute_s = e->sc.compute_s;
    out->prefill_rows = e->sc.prefill_rows;
    out->rows_shared = e->sc.rows_shared;
    out->disk_read[0] = e->sc.disk_read[0];
    out->disk_read[1] = e->sc.disk_read[1];
    out->decode_sweeps = e->sc.decode_sweeps;
    out->load_wait_s = e->wait_s;
    out->ram_peak_planned = e->plan.total_host;
    if (e->sc.ws)
        fg_model_ws_moe_stats(e->sc.ws, out->moe);
}

void fg_engine_span(fg_engine *e, const char *name, double t0, int32_t u, int32_t batch,
                    int32_t step)
{
    if (!e->o.trace_path)
        return;
    if (e->n_spans == e->cap_spans) {
        size_t cap = e->cap_spans ? e->cap_spans * 2 : 4096;
        span *p = realloc(e->spans, cap * sizeof *p);
        if (!p)
            return; /* tracing is best effort */
        e->spans = p;
        e->cap_spans = cap;
    }
    e->spans[e->n_spans++] = (span){name, t0, fg_now(), u, batch, step};
}
