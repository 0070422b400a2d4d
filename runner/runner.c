/* runner.c - fg_run: a whole fg-infer run as a library call (see runner.h).
 *
 * One run opens the store once (read-only) and keeps it until the end: the tokenizer and the
 * config are read from it, the engine borrows it. --compress-weight on an F16 store quantizes it
 * into a temporary store in the offload directory first (what fg-convert STORE --compress-weight
 * writes), which replaces the source for the run and whose names are removed as soon as the
 * engine holds its files open.
 *
 * A JSONL job streams: a first pass over the input (when it can be read twice: a file, or a
 * file on stdin) tokenizes every pending prompt only to size the context (the longest prompt
 * plus the largest generation of the lines that fit) and the progress total, keeping nothing;
 * the second pass reads one block of prompts at a time, packs a block of those that fit the
 * context together, generates it, appends its results (one write and an fdatasync), and frees
 * it; a line that cannot fit gets its error result line and the job goes on (the JSONL jobs
 * section below). Memory is the block plus one hash entry per id, whatever the number of
 * prompts. From a pipe there is one pass: the context is --max-context, or the model's. A job
 * that ends with a prompt read but not answered is an error, never a silent success; Ctrl-C
 * (opts.interrupt) stops it between blocks, reported in rep.interrupted and rep.saved.
 *
 * Prompts are encoded as transformers' tokenizer(text) does (special tokens written in the
 * text matched, the post-processor's BOS added) unless --no-special-in-prompt. An id past the
 * tokenizer's vocabulary decodes as nothing. --prompt-len runs generate exactly gen_len tokens
 * (EOS ignored, as FlexGen's benchmark), for --num-prompts prompts when given. --policy auto
 * chooses a lossy compression (the 4-bit cache) only when allowed (--allow-lossy).
 *
 * --policy auto (policy/policy_search.h) chooses the block, the placement and the cache's
 * compression just before the engine opens, from the machine's calibration (the cache's file,
 * measured quickly when missing) and the run's prompt length, new tokens and prompt count; on a
 * device backend also from the device, measured through a backend made like the run's
 * (calibrate_device), which adds the GPU's share to the search; the summary and --dry-run print
 * its predicted times (and link bytes) beside the measured ones. A fixed policy on a device
 * backend is not priced (nothing measures the device for it).
 *
 * --prefix-cache (runner_prefix.c) opens the cache for the engine's identity once the engine is
 * open; a file job first runs its shared-prefix pass (a third pass over the input), and the
 * summary adds the cache's line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "convert.h"
#include "fg_progress.h"
#include "jobs.h"
#include "policy_search.h"
#include "runner.h"
#include "runner_prefix.h"

typedef struct run {
    const fg_run_opts *o;
    fg_engine_opts eo;
    FILE *out, *log;
    fg_store *store;
    fg_model *model;       /* the store's, read once (open_store) */
    fg_tok *tok;
    fg_engine *e;
    fg_prefix *pfx;        /* --prefix-cache, or NULL */
    char tmp_store[4096];  /* a store quantized at load, removed once the engine is open */
    fg_run_report rep;
    uint32_t max_pos;      /* the model's positions (open_store) */
    char policy_line[400]; /* policy_auto: what the search chose */
    char dev_line[512];    /* ... and the device's calibration it priced with */
    char calib_note[2 * FG_ERR_MSG_MAX + 128]; /* the calibration was missing or stale */
} run;

/* ---- small pieces ---- */

static void notice(void *ctx, const char *line)
{
    run *r = ctx;
    if (!r->o->quiet)
        fprintf(r->log, "fg-infer: %s\n", line);
}

typedef struct tick_ctx {
    fg_progress bar;
    uint64_t base;
} tick_ctx;

static void tick(void *ctx, uint64_t tokens)
{
    tick_ctx *t = ctx;
    fg_progress_update(&t->bar, t->base + tokens);
}

static void bytes_progress(void *ctx, uint64_t done, uint64_t total)
{
    fg_progress *p = ctx;
    p->total = total;
    fg_progress_update(p, done);
}

/* How prompts are encoded: as transformers' tokenizer(text) does by default (special tokens
 * written in the text matched, the post-processor's BOS added); --no-special-in-prompt splits
 * special tokens' text as ordinary text (the BOS still added). */
static unsigned prompt_flags(const run *r)
{
    return FG_TOK_ADD_BOS | (r->o->no_special_in_prompt ? 0u : FG_TOK_SPECIAL);
}

/* Token ids of text under the FG_TOK_* flags; *ids owned by the caller. */
static int encode(run *r, const char *text, unsigned flags, int32_t **ids, uint32_t *n,
                  const char *what, fg_err *err)
{
    fg_tok_ids v = {0};
    int rc = fg_tok_encode(r->tok, text, strlen(text), flags, &v, err);
    if (rc) {
        char m[FG_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        fg_tok_ids_free(&v);
        return fg_err_set(err, rc, "%s: %s", what, m);
    }
    if (v.n == 0 || v.n > UINT32_MAX / 2) {
        fg_tok_ids_free(&v);
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: the prompt is empty", what);
    }
    *ids = v.ids;
    *n = (uint32_t)v.n;
    return FG_OK;
}

/* ids as text (special tokens skipped); owned by the caller, NULL on failure (err set). An id
 * past the tokenizer's vocabulary (a model's padded embedding rows) decodes as nothing
 * (fg_tok_decode); the caller keeps it in tokens. */
static char *decode(fg_tok *tok, const int32_t *ids, uint32_t n, fg_err *err)
{
    fg_tok_bytes b = {0};
    if (fg_tok_decode(tok, ids, n, FG_TOK_SKIP_SPECIAL, &b, err)) {
        fg_tok_bytes_free(&b);
        return NULL;
    }
    char *s = malloc(b.len + 1);
    if (s) {
        memcpy(s, b.data ? b.data : "", b.len);
        s[b.len] = '\0';
    } else {
        fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    fg_tok_bytes_free(&b);
    return s;
}

/* The stop strings of each sequence of the block being generated. */
typedef struct stops {
    fg_tok *tok;
    const char *const *const *v; /* [block] */
    const int *n;                /* [block] */
} stops;

static int stop_check(void *ctx, uint32_t seq, const int32_t *out, uint32_t n)
{
    const stops *s = ctx;
    if (!s->n[seq])
        return 0;
    char *text = decode(s->tok, out, n, NULL);
    int hit = 0;
    for (int i = 0; text && i < s->n[seq] && !hit; i++)
        hit = strstr(text, s->v[seq][i]) != NULL;
    free(text);
    return hit;
}

/* Cut text at the first stop string. */
static void cut_stop(char *text, const char *const *v, int n)
{
    for (int i = 0; i < n; i++) {
        char *p = strstr(text, v[i]);
        if (p)
            *p = '\0';
    }
}

static const char *finish_name(int f)
{
    return f == FG_FINISH_EOS ? "eos" : f == FG_FINISH_STOP ? "stop" : "length";
}

/* ---- the store and the engine ---- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
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
static void sweep_stale(run *r, const char *dir)
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
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (!r->o->quiet)
            fprintf(r->log, "fg-infer: removed %s, left by a run that was killed\n", path);
    }
    if (d)
        closedir(d);
}

/* --compress-weight on a store that is not 4-bit: quantize it into a temporary store and use
 * that one instead (the source is closed first: one handle per store per process). */
static int quantize_at_load(run *r, const fg_hparams *hp, fg_err *err)
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
    fg_model_close(r->model);
    r->model = NULL;
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

/* A -m that is not a store, said as what it is: missing, a Hugging Face checkpoint directory
 * (convert it first), a GGUF file (not read yet). FG_OK when it may be a store. */
static int model_path_check(const char *m, fg_err *err)
{
    struct stat st;
    char p[4200];
    if (stat(m, &st))
        return errno == ENOENT ? fg_err_set(err, FG_ERR_NOT_FOUND, "-m %s: does not exist", m)
                               : fg_err_sys(err, FG_ERR_IO, errno, "-m %s", m);
    if (S_ISDIR(st.st_mode)) {
        snprintf(p, sizeof p, "%s/store.id", m);
        if (access(p, F_OK) == 0)
            return FG_OK;
        snprintf(p, sizeof p, "%s/config.json", m);
        if (access(p, F_OK) == 0)
            return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "-m %s: a Hugging Face checkpoint "
                              "directory, not an fg store: convert it first (fg-convert %s -o "
                              "STORE), then fg-infer -m STORE", m, m);
        return FG_OK; /* fg_store_open says what is missing */
    }
    if (fg_ckpt_is_gguf(m))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "-m %s: a GGUF file, which fg does not read "
                          "yet: convert the model's Hugging Face checkpoint (config.json and "
                          "*.safetensors) with fg-convert DIR -o STORE", m);
    return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "-m %s: a file, not an fg store (a directory "
                      "written by fg-convert)", m);
}

/* The store, its config (first: a store without one is not a finished conversion, which is
 * what to say rather than blame its tokenizer) and its tokenizer. */
static int open_store(run *r, fg_err *err)
{
    int rc = model_path_check(r->o->model, err);
    if (rc == FG_OK)
        rc = fg_store_open(r->o->model, FG_STORE_RDONLY, NULL, &r->store, err);
    if (rc == FG_OK)
        rc = fg_model_open(r->store, &r->model, err);
    r->max_pos = rc == FG_OK ? fg_model_hparams(r->model)->max_pos : 0;
    if (rc == FG_OK && (rc = fg_model_tokenizer(r->model, &r->tok, err)) &&
        strncmp(err->msg, r->o->model, strlen(r->o->model))) { /* "tokenizer.vocab_json:1:..." */
        char m[FG_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        fg_err_set(err, rc, "%s: %s (check it with fg-inspect --verify %s)", r->o->model, m,
                   r->o->model);
    }
    return rc;
}

/* ---- the policy search (--policy auto) ---- */

/* Whether the cost model prices Linear layers at the int8 kernels' rate: --compute int8 on the
 * CPU backend (the store decides whether its weights take them: fg_policy_model.q4_int8). */
static int cpu_int8(const run *r)
{
    return r->eo.compute == FG_COMPUTE_INT8 && r->eo.backend == FG_BACKEND_CPU;
}

/* The calibration: --calibration FILE as given (refused when stale), else the cache's file,
 * measured quickly and written when it is missing, unreadable or of another machine/version. */
static int load_calibration(run *r, fg_calib *c, fg_err *err)
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
 * as the run's will be (the simulated one with room for the measurement whatever the budget);
 * its figures go into r->dev_line. */
static int calibrate_device(run *r, const fg_policy_model *m, fg_calib_dev *d, fg_err *err)
{
    fg_backend *be = NULL;
    uint64_t room = r->eo.policy.gpu_budget > (512ull << 20) ? r->eo.policy.gpu_budget
                                                             : 512ull << 20;
    int rc = fg_engine_backend_new(&r->eo, room, &be, err);
    if (rc == FG_OK)
        rc = fg_calib_measure_device(be, m->codec == FG_CODEC_Q4, 1, d, err);
    fg_backend_free(be);
    if (rc == FG_OK)
        snprintf(r->dev_line, sizeof r->dev_line, "%s: link %.3g GB/s up, %.3g down; linear "
                 "%.1f GFLOP/s at 1 row, %.1f at 256; attention %.2f ns a key and head of 64 "
                 "(%.3g in a prefill); %.0f%% of the uploads hidden (measured in %.2f s)",
                 d->name, d->up / 1e9, d->down / 1e9, d->gflops[0], d->gflops[FG_CALIB_NM - 1],
                 d->attn_s * 1e9 * 64, d->attn_pre_s * 1e9 * 64, 100 * d->overlap, d->seconds);
    return rc;
}

/* Bytes the offload dir's file system has free (less 1%, at least 16 MiB, for what else
 * writes there during the run); 0 when unknown: no limit. */
static uint64_t disk_free(const run *r)
{
    uint64_t n = fg_engine_offload_free(&r->eo), margin = n / 100;
    margin = margin > (16u << 20) ? margin : 16u << 20;
    return n == UINT64_MAX ? 0 : n > margin ? n - margin : 1;
}

/* Choose r->eo.policy for prompts of P tokens, G new ones, `seqs` sequences (0: any). */
static int auto_policy(run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err)
{
    fg_calib c;
    fg_calib_dev dev;
    fg_policy_model m;
    int rc = load_calibration(r, &c, err);
    if (rc || (rc = fg_engine_gpu_budget(&r->eo, &r->eo.policy.gpu_budget, err)) ||
        (rc = fg_policy_model_build(r->model, &m, err)))
        return rc;
    int on_dev = r->eo.backend != FG_BACKEND_CPU;
    if (on_dev && (rc = calibrate_device(r, &m, &dev, err))) {
        fg_policy_model_free(&m);
        return rc;
    }
    uint32_t cap = r->o->max_block;
    if (P + G == 0 || P + G > (r->eo.max_ctx ? r->eo.max_ctx : m.hp.max_pos)) {
        uint32_t ctx = r->eo.max_ctx ? r->eo.max_ctx : m.hp.max_pos;
        G = G < ctx ? G : 1;
        P = ctx - G;
    }
    fg_policy_job job = {P, G, seqs && cap ? (seqs < cap ? seqs : cap) : seqs ? seqs : cap,
                         r->eo.ram_budget ? r->eo.ram_budget : mem_available(),
                         r->o->cache_choice, cpu_int8(r), on_dev ? &dev : NULL,
                         disk_free(r), fg_engine_offload_dir(&r->eo), r->eo.max_ctx,
                         !r->eo.ram_budget, on_dev && r->o->attn_search};
    fg_prediction pred;
    fg_search_stats st;
    double t0 = fg_now();
    rc = fg_policy_search(&c, &m, &r->eo.policy, &job, &r->eo.policy, &pred, &st, err);
    if (rc == FG_OK) {
        char d[200];
        fg_policy_describe(&r->eo.policy, d, sizeof d);
        r->rep.predicted = 1;
        r->rep.pred_prefill_s = pred.prefill_s;
        r->rep.pred_decode_s = pred.decode_s;
        r->rep.pred_tok_s = pred.tok_s;
        r->rep.pred_read = pred.read_bytes;
        r->rep.pred_write = pred.write_bytes;
        r->rep.pred_up = pred.up_bytes;
        r->rep.pred_down = pred.down_bytes;
        snprintf(r->policy_line, sizeof r->policy_line, "auto: %s%s (%u LPs, %u feasible, "
                 "%.0f ms)", d, r->o->cache_choice == 0 ? "; lossless only (--allow-lossy lets "
                 "it choose the 4-bit KV cache)" : r->o->cache_choice < 0 ? "; lossy allowed "
                 "(--allow-lossy)" : "", st.lps, st.feasible, (fg_now() - t0) * 1e3);
    }
    fg_policy_model_free(&m);
    return rc;
}

/* A fixed policy's predicted times, when this machine has a calibration file (nothing is
 * measured for it, and nothing said when there is none); on a device backend under --dry-run
 * only, with the device measured as --policy auto measures it. */
static void predict_fixed(run *r, uint32_t P, uint32_t G, uint32_t seqs)
{
    fg_calib c;
    fg_calib_dev dev;
    fg_policy_model m;
    char path[4096];
    fg_err e;
    /* a device is measured for it (about a second) only under --dry-run, which is asked for the
     * figures; a run does not pay that at start */
    int on_dev = r->eo.backend != FG_BACKEND_CPU;
    if (on_dev && !r->eo.plan_only)
        return;
    if (r->o->calibration)
        snprintf(path, sizeof path, "%s", r->o->calibration);
    else if (fg_calib_default_path(path, sizeof path, &e))
        return;
    if (fg_calib_load(path, &c, &e) || fg_policy_model_build(r->model, &m, &e))
        return;
    if (on_dev && calibrate_device(r, &m, &dev, &e)) {
        fg_policy_model_free(&m);
        return;
    }
    const fg_plan *pl = fg_engine_plan(r->e);
    fg_policy_job job = {P ? P : pl->max_ctx - G, G, seqs, r->eo.ram_budget, -1, cpu_int8(r),
                         on_dev ? &dev : NULL};
    fg_prediction pred;
    fg_policy p = r->eo.policy;
    p.frac = pl->frac;
    fg_policy_predict(&c, &m, pl, &p, &job, &pred);
    fg_policy_model_free(&m);
    r->rep.predicted = 1;
    r->rep.pred_prefill_s = pred.prefill_s;
    r->rep.pred_decode_s = pred.decode_s;
    r->rep.pred_tok_s = pred.tok_s;
    r->rep.pred_read = pred.read_bytes;
    r->rep.pred_write = pred.write_bytes;
    r->rep.pred_up = pred.up_bytes;
    r->rep.pred_down = pred.down_bytes;
    snprintf(r->policy_line, sizeof r->policy_line, "fixed");
}

static int open_engine(run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err)
{
    /* a run longer than the model's context is that, said before the policy search, which
     * would name a --ram-budget no block of that length fits (a copy: quantize_at_load reopens
     * the model on its temporary store) */
    fg_hparams hp = *fg_model_hparams(r->model);
    int rc = FG_OK;
    if ((uint64_t)P + G > hp.max_pos)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prompt + generation of %" PRIu64 " tokens "
                          "exceeds the model's %u positions", (uint64_t)P + G, hp.max_pos);
    if (rc == FG_OK && r->eo.policy.compress_weight)
        rc = quantize_at_load(r, &hp, err);
    if (!r->eo.max_ctx)
        r->eo.max_ctx = P + G;
    r->eo.gen_hint = G; /* a pipeline's split weighs the head by it */
    if (rc == FG_OK && r->o->policy_auto)
        rc = auto_policy(r, P, G, seqs, err);
    if (rc == FG_OK)
        rc = fg_engine_open(r->model, &r->eo, &r->e, err);
    if (rc == FG_OK && r->o->prefix_cache && !r->eo.plan_only)
        rc = fg_runner_prefix_open(r->e, r->o, &r->pfx, err);
    if (rc == FG_OK && !r->o->policy_auto && P + G)
        predict_fixed(r, P, G, seqs);
    if (r->tmp_store[0]) { /* the pager and the catalog hold their files open: names can go */
        nftw(r->tmp_store, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        r->tmp_store[0] = '\0';
    }
    return rc;
}

/* A phase whose time is off the cost model's by more than 1.5x (and that took, or was predicted
 * to take, a second or more: shorter ones are start-up and noise) gets a line that says so: a
 * calibration measured in a busy moment prices every later plan wrong (a quick one on this
 * machine once had the F16 GEMM at 77 GFLOP/s where 130 ran, and the prefill predicted at 1.9x
 * its time) and --policy auto then chooses with it. */
static void calib_off(const run *r, const char *phase, double predicted, double measured)
{
    double big = predicted > measured ? predicted : measured;
    if (big < 1.0 || predicted <= 0 || measured <= 0)
        return;
    double f = measured / predicted;
    if (f < 1.5 && f > 1 / 1.5)
        return;
    fprintf(r->log, "         calibration: the %s ran %.2fx %s than predicted; if that holds on "
            "a quiet machine, measure it again: fg-infer calibrate%s%s\n", phase,
            f > 1 ? f : 1 / f, f > 1 ? "slower" : "faster",
            r->o->calibration ? " --calibration " : "",
            r->o->calibration ? r->o->calibration : "");
}

/* ---- generation ---- */

static void summary(run *r)
{
    if (r->o->quiet || !r->e)
        return;
    fg_engine_stats st;
    fg_engine_stats_get(r->e, &st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const fg_plan *pl = fg_engine_plan(r->e);
    const fg_run_report *p = &r->rep;
    char rd[32], wr[32], peak[32], plan[32], budget[32];
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024, disk = st.pager.moved[FG_TIER_DISK][FG_TIER_HOST];
    fprintf(r->log,
            "summary: %" PRIu64 " tokens generated in %.2f s (prefill %.2f s, decode %.2f s): "
            "%.2f tok/s\n"
            "         block %u x %u (gbs x ngb), schedule %s; peak RSS %s (%" PRIu64 " bytes; "
            "plan %s, budget %s)\n"
            "         read from disk %s (%" PRIu64 " bytes), written %s (KV cache and "
            "activations), pager hits %" PRIu64 " misses %" PRIu64 ", stalled %.2f s; %s\n",
            p->tokens, p->total_s, p->prefill_s, p->decode_s,
            p->total_s > 0 ? (double)p->tokens / p->total_s : 0.0, pl->gbs, pl->ngb,
            r->eo.policy.schedule == FG_SCHEDULE_ROW ? "row-by-row" : "zig-zag",
            fg_fmt_bytes((double)rss, peak, sizeof peak), rss,
            fg_fmt_bytes((double)st.ram_peak_planned, plan, sizeof plan),
            r->eo.ram_budget ? fg_fmt_bytes((double)r->eo.ram_budget, budget, sizeof budget)
                             : "none",
            fg_fmt_bytes((double)disk, rd, sizeof rd), disk,
            fg_fmt_bytes((double)st.pager.moved[FG_TIER_HOST][FG_TIER_DISK], wr, sizeof wr),
            st.pager.hits, st.pager.misses, (double)st.pager.stall_ns * 1e-9, st.pager.engine);
    if (pl->dev_pool) { /* a device backend: the GPU's share */
        char g[32], w[32], m[32];
        fprintf(r->log, "         GPU: weights %.1f%%, KV cache %.1f%%, activations %.1f%%; "
                "pool peak %s of %s; host -> device %s\n", 100 * pl->frac.w[0],
                100 * pl->frac.c[0], 100 * pl->frac.h[0],
                fg_fmt_bytes((double)st.pager.peak[FG_TIER_DEVICE], g, sizeof g),
                fg_fmt_bytes((double)pl->dev_pool, w, sizeof w),
                fg_fmt_bytes((double)st.pager.moved[FG_TIER_HOST][FG_TIER_DEVICE], m, sizeof m));
        char up[32], dn[32], per[32];
        uint64_t link = st.link_bytes[0] + st.link_bytes[1];
        fprintf(r->log, "         link: host -> device %s (%" PRIu64 " bytes), device -> host "
                "%s (%" PRIu64 " bytes); %s a generated token\n",
                fg_fmt_bytes((double)st.link_bytes[0], up, sizeof up), st.link_bytes[0],
                fg_fmt_bytes((double)st.link_bytes[1], dn, sizeof dn), st.link_bytes[1],
                fg_fmt_bytes(p->tokens ? (double)link / (double)p->tokens : 0.0, per,
                             sizeof per));
    }
    if (p->predicted) { /* the cost model's block (full), times the blocks run */
        double nb = ceil((double)p->prompts / fg_engine_block_size(r->e));
        nb = nb > 0 ? nb : 1;
        if (r->calib_note[0])
            fprintf(r->log, "         calibration: %s\n", r->calib_note);
        fprintf(r->log, "         policy %s\n", r->policy_line);
        if (r->dev_line[0])
            fprintf(r->log, "         device %s\n", r->dev_line);
        fprintf(r->log, "         predicted: prefill %.2f s, decode %.2f s, "
                "%.2f tok/s; measured %.2f s, %.2f s, %.2f tok/s\n", nb * p->pred_prefill_s,
                nb * p->pred_decode_s, p->pred_tok_s, p->prefill_s, p->decode_s,
                p->total_s > 0 ? (double)p->tokens / p->total_s : 0.0);
        fprintf(r->log, "         predicted disk traffic: read %s, written %s (measured above)\n",
                fg_fmt_bytes(nb * (double)p->pred_read, rd, sizeof rd),
                fg_fmt_bytes(nb * (double)p->pred_write, wr, sizeof wr));
        if (pl->dev_pool)
            fprintf(r->log, "         predicted link traffic: host -> device %s, device -> "
                    "host %s (measured above)\n",
                    fg_fmt_bytes(nb * (double)p->pred_up, rd, sizeof rd),
                    fg_fmt_bytes(nb * (double)p->pred_down, wr, sizeof wr));
        calib_off(r, "prefill", nb * p->pred_prefill_s, p->prefill_s);
        calib_off(r, "decode", nb * p->pred_decode_s, p->decode_s);
    }
    fg_runner_prefix_summary(r->log, r->o, r->pfx, p);
    const fg_hparams *hp = fg_engine_hparams(r->e);
    if (st.moe[0].units || st.moe[1].units) { /* what the routers chose: experts computed */
        fprintf(r->log, "         experts computed by a sparse layer, of %u:", hp->n_experts);
        const char *sep = "";
        for (int k = 1; k >= 0; k--) { /* decode steps, then prefills */
            const fg_moe_stats *m = &st.moe[k];
            if (!m->units)
                continue;
            fprintf(r->log, "%s %.1f a %s step (%.1f tokens)", sep,
                    (double)m->experts / (double)m->units, k ? "decode" : "prefill",
                    (double)m->pairs / (double)m->units / hp->top_k);
            sep = ",";
        }
        fprintf(r->log, "\n");
    }
    double f = fg_model_flops_per_token(hp);
    if (p->decode_s > 0 && p->tokens > p->prompts)
        fprintf(r->log, "         decode: %.1f GFLOP/s in Linear layers and LM head (%.2f GFLOP "
                "per token)\n", (double)(p->tokens - p->prompts) * f / p->decode_s / 1e9, f / 1e9);
}

/* Generate seqs[0..n) (n <= block size) as one block with the given stop strings. */
static int generate(run *r, fg_gen_seq *seqs, uint32_t n, const stops *st, tick_ctx *tc,
                    fg_err *err)
{
    fg_gen_hooks hooks = {st ? stop_check : NULL, (void *)st, tick, tc};
    fg_gen_stats gs;
    int rc = fg_engine_generate(r->e, seqs, n, &hooks, &gs, err);
    r->rep.prefill_s += gs.prefill_s;
    r->rep.decode_s += gs.decode_s;
    r->rep.tokens += gs.new_tokens;
    r->rep.prompts += n;
    r->rep.prompt_cached += gs.prompt_cached;
    r->rep.prompt_computed += gs.prompt_computed;
    tc->base += gs.new_tokens;
    return rc;
}

/* What r->out is, for a write error's message. */
static const char *out_name(const run *r)
{
    return r->o->out ? "the output" : "standard output";
}

static int write_out(run *r, const char *text, fg_err *err)
{
    if (fputs(text, r->out) == EOF || fflush(r->out))
        return fg_err_sys(err, FG_ERR_IO, errno, "writing to %s", out_name(r));
    return FG_OK;
}

static int run_prompt(run *r, fg_err *err)
{
    int32_t *ids = NULL, *out = NULL;
    uint32_t n = 0;
    int rc = open_store(r, err);
    if (rc == FG_OK)
        rc = encode(r, r->o->prompt, prompt_flags(r), &ids, &n, "-p", err);
    if (rc == FG_OK)
        rc = open_engine(r, n, r->o->max_new, 1, err);
    if (rc == FG_OK && !(out = malloc((size_t)r->o->max_new * sizeof *out)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_gen_seq s = {ids, n, r->o->max_new, r->o->sample, 0, out, 0, 0, r->o->ignore_eos};
    const char *const *sv = r->o->stops;
    stops st = {r->tok, &sv, &r->o->n_stops};
    tick_ctx tc = {{0}, 0};
    double t0 = fg_now();
    if (rc == FG_OK) {
        fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, r->o->max_new, r->o->quiet);
        rc = generate(r, &s, 1, &st, &tc, err);
        fg_progress_end(&tc.bar);
    }
    r->rep.total_s = fg_now() - t0;
    char *text = rc == FG_OK ? decode(r->tok, out, s.n_out, err) : NULL;
    if (rc == FG_OK && !text)
        rc = FG_ERR_NOMEM;
    if (rc == FG_OK) {
        cut_stop(text, r->o->stops, r->o->n_stops);
        rc = write_out(r, r->o->prompt, err);
        if (rc == FG_OK)
            rc = write_out(r, text, err);
        if (rc == FG_OK)
            rc = write_out(r, "\n", err);
        summary(r);
    }
    free(text);
    free(out);
    free(ids);
    return rc;
}

/* FlexGen's benchmark: random prompts of prompt_len ids, each generating exactly gen_len
 * tokens (EOS ignored, as FlexGen's benchmark does). --num-prompts N fixes the job: N prompts
 * in blocks of the engine's size (the search picks that block within N); without it the job
 * is one block, of whatever size the policy gives. */
static int run_synthetic(run *r, fg_err *err)
{
    uint32_t P = r->o->prompt_len, G = r->o->max_new;
    int rc = open_store(r, err);
    if (rc == FG_OK)
        rc = open_engine(r, P, G, r->o->num_prompts, err);
    if (rc)
        return rc;
    uint32_t bs = fg_engine_block_size(r->e), V = fg_engine_hparams(r->e)->vocab_size;
    uint64_t N = r->o->num_prompts ? r->o->num_prompts : bs;
    fg_gen_seq *seqs = calloc(bs, sizeof *seqs);
    int32_t *ids = malloc((size_t)bs * P * sizeof *ids), *out = malloc((size_t)bs * G * sizeof *out);
    if (!seqs || !ids || !out) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        goto done;
    }
    fg_rng rng;
    fg_rng_seed(&rng, r->o->sample.seed, 99);
    tick_ctx tc = {{0}, 0};
    double t0 = fg_now();
    fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, N * G, r->o->quiet);
    for (uint64_t i0 = 0; rc == FG_OK && i0 < N; i0 += bs) {
        uint32_t n = N - i0 < bs ? (uint32_t)(N - i0) : bs;
        for (uint32_t i = 0; i < n; i++) {
            for (uint32_t t = 0; t < P; t++)
                ids[(size_t)i * P + t] = 4 + (int32_t)(fg_rng_uniform(&rng) * (V - 4));
            seqs[i] = (fg_gen_seq){ids + (size_t)i * P, P, G, r->o->sample, i0 + i,
                                   out + (size_t)i * G, 0, 0, 1};
        }
        rc = generate(r, seqs, n, NULL, &tc, err);
    }
    fg_progress_end(&tc.bar);
    r->rep.total_s = fg_now() - t0;
    if (rc == FG_OK)
        summary(r);
done:
    free(seqs);
    free(ids);
    free(out);
    return rc;
}

/* ---- JSONL jobs ----
 *
 * A block needs its longest prompt plus its largest max_new_tokens (prompts are left-padded to
 * the longest and every sequence decodes the same steps: schedule.c). A file's job is sized by
 * its first pass to maxP + maxG (the longest prompt and the largest generation of the lines
 * that fit), capped by --max-context or the model's positions, so a block may be any mix of
 * its lines. Where the cap cuts that (or from a pipe, sized before any prompt is read), blocks
 * are packed: prompts read and tokenized wait in a queue of one block, and each block takes
 * from it, in input order, every prompt that keeps its longest prompt + largest generation
 * within the engine's context; the rest wait for the next block. Every line that fits the
 * context on its own runs, whatever the mix and the block size; a line that cannot fit (or has
 * no tokens) gets its own error result line and the job goes on. Results are appended a block
 * at a time, so they can come out of input order: the ids say which is which.
 */

typedef struct pend {
    fg_job job;         /* moved out of the reader's block */
    int32_t *ids;
    uint32_t n, mn;     /* prompt tokens, new tokens */
} pend;

typedef struct jobs_run {
    fg_job_reader *rd;
    fg_job_output *outp;
    fg_job_list block;       /* the reader's last block (its jobs move to q) */
    pend *q;                 /* [block size] read and tokenized, waiting */
    size_t nq;
    int eof;                 /* the reader is finished */
    pend *blk;               /* [block size] the block being generated */
    uint32_t nb;
    fg_gen_seq *seqs;        /* [block size] */
    const char *const **sv;  /* [block size] stop strings */
    int *sn;
    uint64_t appended;       /* result lines this run appended (error lines included) */
    uint64_t errors;         /* ... of which error lines */
} jobs_run;

static uint32_t job_max_new(const run *r, const fg_job *j)
{
    return j->max_new > 0 ? (uint32_t)j->max_new : r->o->max_new;
}

static void what_of(const run *r, const fg_job *j, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:%zu: prompt \"%.40s\"", r->o->input, j->line, j->id);
}

/* The context a prompt + generation must fit: --max-context, else the model's positions. */
static uint32_t context_limit(const run *r)
{
    return r->eo.max_ctx && r->eo.max_ctx < r->max_pos ? r->eo.max_ctx : r->max_pos;
}

/* Tokenize job j for a context of ctx: FG_OK with *ids set (owned by the caller), or 1 with
 * msg and *type saying why the line gets an error result instead (no tokens, or more than ctx
 * with its generation); other codes are failures of the run. */
static int prep_job(run *r, const fg_job *j, uint32_t ctx, int32_t **ids, uint32_t *n,
                    char *msg, size_t cap, const char **type, fg_err *err)
{
    char what[160];
    uint32_t mn = job_max_new(r, j);
    what_of(r, j, what, sizeof what);
    *ids = NULL;
    *n = 0;
    int rc = encode(r, j->prompt, prompt_flags(r), ids, n, "", err);
    if (rc == FG_ERR_INVALID_ARG) { /* "": the prompt is empty (no BOS either) */
        snprintf(msg, cap, "%s", err->msg + 2);
        *type = "invalid_prompt";
        return 1;
    }
    if (rc) {
        char m[FG_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        return fg_err_set(err, rc, "%s%s", what, m);
    }
    if ((uint64_t)*n + mn <= ctx)
        return FG_OK;
    if ((uint64_t)*n + mn > r->max_pos)
        snprintf(msg, cap, "%u prompt tokens + %u new exceed the model's %u positions", *n, mn,
                 r->max_pos);
    else
        snprintf(msg, cap, "%u prompt tokens + %u new exceed the context of %u (--max-context)",
                 *n, mn, ctx);
    free(*ids);
    *ids = NULL;
    *type = "context_length_exceeded";
    return 1;
}

/* First pass over a file: the longest prompt (*maxP) and largest generation (*maxG) of the
 * pending lines that fit the context limit, and their new tokens in all (the progress bar's
 * total). Lines that do not fit are left for their error lines in the run. */
static int size_jobs(run *r, const fg_job_output *done, uint32_t *maxP, uint32_t *maxG,
                     uint64_t *total, fg_err *err)
{
    fg_job_reader *rd = NULL;
    fg_job_list l = {0};
    uint32_t limit = context_limit(r);
    int rc = fg_job_reader_open(r->o->input, &rd, err);
    *maxP = *maxG = 0;
    *total = 0;
    while (rc == FG_OK && (rc = fg_job_reader_next(rd, done, 256, &l, err)) == FG_OK && l.n) {
        for (size_t i = 0; rc == FG_OK && i < l.n; i++) {
            int32_t *ids;
            uint32_t n;
            char msg[256];
            const char *type;
            rc = prep_job(r, &l.jobs[i], limit, &ids, &n, msg, sizeof msg, &type, err);
            free(ids);
            if (rc == 1) {
                rc = FG_OK;
                continue;
            }
            uint32_t mn = job_max_new(r, &l.jobs[i]);
            *maxP = n > *maxP ? n : *maxP;
            *maxG = mn > *maxG ? mn : *maxG;
            *total += mn;
        }
    }
    fg_jobs_free(&l);
    fg_job_reader_close(rd);
    return rc;
}

/* The engine's prompt and generation lengths (its context: P + G) for a file whose fitting
 * lines have prompts up to maxP and generations up to maxG under the limit; 0, 0 (the limit:
 * open_engine) from a pipe. */
static void jobs_shape(uint32_t maxP, uint32_t maxG, uint32_t limit, uint32_t *P, uint32_t *G)
{
    if (!maxP) {
        *P = *G = 0;
    } else if ((uint64_t)maxP + maxG <= limit) {
        *P = maxP;
        *G = maxG;
    } else { /* packed blocks (jobs_run) */
        *G = maxG < limit / 2 ? maxG : limit / 2;
        *P = limit - *G;
    }
}

/* Append one error result line for job (taken by the call: freed). */
static int emit_error(run *r, jobs_run *j, fg_job *job, uint32_t n, const char *msg,
                      const char *type, fg_err *err)
{
    fg_job_result res = {0};
    res.job = job;
    res.prompt_tokens = n;
    res.error = msg;
    res.error_type = type;
    res.finish = "length";
    int rc = fg_job_output_append(j->outp, &res, 1, err);
    if (rc == FG_OK && !r->o->quiet) {
        char c[48];
        snprintf(c, sizeof c, "%.40s", job->id);
        fprintf(r->log, "\rfg-infer: %s:%zu: prompt \"%s\": %s (an error line in %s; the job "
                "goes on)\n", r->o->input, job->line, c, msg, r->o->output);
    }
    j->appended += rc == FG_OK;
    j->errors += rc == FG_OK;
    fg_job_clear(job);
    return rc;
}

/* Read and tokenize until the queue holds a block (or the input ends); lines that cannot run
 * get their error lines here. */
static int refill(run *r, jobs_run *j, uint32_t bs, uint32_t ctx, fg_err *err)
{
    int rc = FG_OK;
    while (rc == FG_OK && !j->eof && j->nq < bs) {
        if ((rc = fg_job_reader_next(j->rd, j->outp, bs - j->nq, &j->block, err)))
            break;
        j->eof = j->block.n == 0;
        for (size_t i = 0; rc == FG_OK && i < j->block.n; i++) {
            pend *p = &j->q[j->nq];
            char msg[256];
            const char *type;
            p->job = j->block.jobs[i]; /* moved: the reader's copy is zeroed */
            memset(&j->block.jobs[i], 0, sizeof j->block.jobs[i]);
            p->mn = job_max_new(r, &p->job);
            rc = prep_job(r, &p->job, ctx, &p->ids, &p->n, msg, sizeof msg, &type, err);
            if (rc == 1)
                rc = emit_error(r, j, &p->job, p->n, msg, type, err);
            else if (rc == FG_OK)
                j->nq++;
            else
                fg_job_clear(&p->job);
        }
    }
    return rc;
}

/* Move into j->blk, in queue order, the waiting prompts that together keep the longest prompt
 * + the largest generation within ctx (the first always fits: refill checked it alone). */
static void pack_block(jobs_run *j, uint32_t bs, uint32_t ctx)
{
    uint32_t P = 0, G = 0;
    size_t keep = 0;
    j->nb = 0;
    for (size_t i = 0; i < j->nq; i++) {
        pend *p = &j->q[i];
        uint32_t P2 = p->n > P ? p->n : P, G2 = p->mn > G ? p->mn : G;
        if (j->nb < bs && (uint64_t)P2 + G2 <= ctx) {
            j->blk[j->nb++] = *p;
            P = P2, G = G2;
        } else {
            j->q[keep++] = *p;
        }
    }
    j->nq = keep;
}

/* The block's sequences (their outputs allocated; freed by free_block). */
static int fill_block(run *r, jobs_run *j, fg_err *err)
{
    for (uint32_t i = 0; i < j->nb; i++) {
        pend *p = &j->blk[i];
        int32_t *out = malloc((size_t)p->mn * sizeof *out);
        /* the sampler's stream is the input line: a resumed job draws the same numbers */
        j->seqs[i] = (fg_gen_seq){p->ids, p->n, p->mn, r->o->sample, p->job.line - 1, out, 0,
                                  0, r->o->ignore_eos};
        if (!out)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        j->sv[i] = (const char *const *)p->job.stops;
        j->sn[i] = p->job.n_stops;
    }
    return FG_OK;
}

static void free_block(jobs_run *j)
{
    for (uint32_t i = 0; i < j->nb; i++) {
        free(j->blk[i].ids);
        free(j->seqs[i].out);
        fg_job_clear(&j->blk[i].job);
        j->seqs[i] = (fg_gen_seq){0};
    }
    j->nb = 0;
}

/* Results of the block, in one append. */
static int emit_block(run *r, jobs_run *j, uint32_t blk, double seconds, fg_err *err)
{
    uint32_t n = j->nb;
    fg_job_result *res = calloc(n + 1, sizeof *res);
    char **texts = calloc(n + 1, sizeof *texts);
    int rc = res && texts ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        const fg_gen_seq *s = &j->seqs[i];
        const fg_job *job = &j->blk[i].job;
        if (!(texts[i] = decode(r->tok, s->out, s->n_out, err)))
            rc = FG_ERR_NOMEM;
        else
            cut_stop(texts[i], (const char *const *)job->stops, job->n_stops);
        res[i] = (fg_job_result){job, texts[i], s->out, s->n_out, s->n_prompt,
                                 finish_name(s->finish), seconds, blk};
        res[i].prompt_ids = r->o->prompt_ids ? s->prompt : NULL;
    }
    if (rc == FG_OK)
        rc = fg_job_output_append(j->outp, res, n, err);
    j->appended += rc == FG_OK ? n : 0;
    for (uint32_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(res);
    return rc;
}

/* --prefix-cache: the pending prompts' shared prefixes computed once, before the blocks (lines
 * that will get error lines are left out). */
static int share_jobs(run *r, const fg_job_output *done, fg_err *err)
{
    fg_job_reader *rd;
    fg_job_list l = {0};
    int32_t **ids = NULL;
    uint32_t *lens = NULL, ctx = fg_engine_plan(r->e)->max_ctx;
    size_t n = 0, cap = 0;
    int rc = fg_job_reader_open(r->o->input, &rd, err);
    while (rc == FG_OK && (rc = fg_job_reader_next(rd, done, 256, &l, err)) == FG_OK && l.n) {
        for (size_t i = 0; rc == FG_OK && i < l.n; i++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                int32_t **ni = realloc(ids, cap * sizeof *ids);
                ids = ni ? ni : ids;
                uint32_t *nl = ni ? realloc(lens, cap * sizeof *lens) : NULL;
                lens = nl ? nl : lens;
                if (!nl) {
                    rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            char msg[256];
            const char *type;
            rc = prep_job(r, &l.jobs[i], ctx, &ids[n], &lens[n], msg, sizeof msg, &type, err);
            n += rc == FG_OK;
            rc = rc == 1 ? FG_OK : rc;
        }
    }
    fg_jobs_free(&l);
    fg_job_reader_close(rd);
    if (rc == FG_OK)
        rc = fg_runner_prefix_share(r->e, r->pfx, (const int32_t *const *)ids, lens, n, &r->rep,
                                    err);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(lens);
    return rc;
}

/* Ctrl-C (fg_run_opts.interrupt) is honoured between blocks: what is appended is durable. */
static int interrupted(run *r, fg_err *err)
{
    if (!r->o->interrupt || !*r->o->interrupt)
        return FG_OK;
    r->rep.interrupted = 1;
    return fg_err_set(err, FG_ERR_STATE, "interrupted");
}

static int jobs_loop(run *r, jobs_run *j, uint64_t total, fg_err *err)
{
    uint32_t bs = fg_engine_block_size(r->e), ctx = fg_engine_plan(r->e)->max_ctx;
    j->q = calloc(bs, sizeof *j->q);
    j->blk = calloc(bs, sizeof *j->blk);
    j->seqs = calloc(bs, sizeof *j->seqs);
    j->sv = calloc(bs, sizeof *j->sv);
    j->sn = calloc(bs, sizeof *j->sn);
    if (!j->q || !j->blk || !j->seqs || !j->sv || !j->sn)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    stops st = {r->tok, j->sv, j->sn};
    tick_ctx tc = {{0}, 0};
    fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, total, r->o->quiet);
    double t0 = fg_now();
    int rc = FG_OK;
    for (uint32_t blk = 0; rc == FG_OK; blk++) {
        if ((rc = interrupted(r, err)) || (rc = refill(r, j, bs, ctx, err)) || !j->nq)
            break;
        double tb = fg_now();
        pack_block(j, bs, ctx);
        rc = fill_block(r, j, err);
        if (rc == FG_OK)
            rc = generate(r, j->seqs, j->nb, &st, &tc, err);
        if (rc == FG_OK)
            rc = emit_block(r, j, blk, fg_now() - tb, err);
        free_block(j);
    }
    fg_progress_end(&tc.bar);
    r->rep.total_s = fg_now() - t0;
    return rc;
}

/* What was read must have been answered: a job never ends with prompts silently unread. */
static int check_answered(run *r, jobs_run *j, size_t n_done, fg_err *err)
{
    size_t total;
    fg_job_reader_count(j->rd, NULL, &total, NULL, NULL);
    if (n_done + j->appended == total)
        return FG_OK;
    return fg_err_set(err, FG_ERR_CORRUPT, "%s: %zu prompts read, %zu answered (%zu already "
                      "in %s): nothing should be left", r->o->input, total,
                      (size_t)(n_done + j->appended), n_done, r->o->output);
}

static void free_jobs_run(jobs_run *j)
{
    free_block(j);
    for (size_t i = 0; i < j->nq; i++) {
        free(j->q[i].ids);
        fg_job_clear(&j->q[i].job);
    }
    fg_jobs_free(&j->block);
    free(j->q);
    free(j->blk);
    free(j->seqs);
    free(j->sv);
    free(j->sn);
    fg_job_reader_close(j->rd);
}

static int run_jobs(run *r, fg_err *err)
{
    jobs_run j = {0};
    fg_job_output_info info;
    int rc = fg_job_output_open(r->o->output, r->o->resume ? FG_JOB_RESUME : 0, &j.outp, &info,
                                err);
    if (rc == FG_OK)
        rc = fg_job_reader_open(r->o->input, &j.rd, err);
    size_t total = 0, n_done = 0;
    int complete = 0;
    if (rc == FG_OK)
        fg_job_reader_count(j.rd, j.outp, &total, &n_done, &complete);
    if (rc == FG_OK && !r->o->quiet && info.n_results)
        fprintf(r->log, "fg-infer: resuming: %zu results already in %s%s%s\n", info.n_results,
                r->o->output, info.aside_path[0] ? "; damaged lines moved to " : "",
                info.aside_path);
    if (rc == FG_OK && !complete && !r->o->quiet && isatty(0) && !strcmp(r->o->input, "-"))
        fprintf(r->log, "fg-infer: reading JSONL prompts from the terminal (end with Ctrl-D)\n");
    if (rc == FG_OK && complete && n_done == total) {
        if (!r->o->quiet)
            fprintf(r->log, "fg-infer: nothing to do: every prompt of %s is in %s\n",
                    r->o->input, r->o->output);
        goto done;
    }
    uint32_t maxP = 0, maxG = 0, P, G;
    uint64_t new_tokens = 0;
    if (rc == FG_OK)
        rc = open_store(r, err);
    if (rc == FG_OK && complete) /* a file: size the run by its prompts */
        rc = size_jobs(r, j.outp, &maxP, &maxG, &new_tokens, err);
    if (rc == FG_OK && complete && !maxP) /* every line gets an error line: a tiny engine */
        maxP = maxG = 1;
    jobs_shape(maxP, maxG, r->max_pos ? context_limit(r) : 0, &P, &G);
    if (rc == FG_OK)
        rc = open_engine(r, P, G, complete ? (uint32_t)(total - n_done) : 0, err);
    if (rc == FG_OK && r->pfx && complete)
        rc = share_jobs(r, j.outp, err);
    if (rc == FG_OK)
        rc = jobs_loop(r, &j, new_tokens, err);
    if (rc == FG_OK)
        rc = check_answered(r, &j, n_done, err);
    r->rep.total_s += r->rep.shared_s; /* the shared pass ran before the loop's clock */
    if (rc == FG_OK)
        summary(r);
    if (rc == FG_OK && j.errors && !r->o->quiet)
        fprintf(r->log, "fg-infer: %" PRIu64 " of the prompts could not run: their error lines "
                "are in %s\n", j.errors, r->o->output);
done:
    r->rep.saved = j.outp ? fg_job_output_count(j.outp) : 0;
    free_jobs_run(&j);
    fg_err cerr;
    int rc2 = fg_job_output_close(j.outp, &cerr);
    if (rc == FG_OK && rc2) {
        *err = cerr;
        rc = rc2;
    }
    return rc;
}

/* ---- perplexity ---- */

static int read_text(const char *path, char **out, fg_err *err)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f)
        return fg_err_sys(err, FG_ERR_NOT_FOUND, errno, "--text %s", path);
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { /* fopen opens a directory */
        fclose(f);
        return fg_err_sys(err, FG_ERR_IO, EISDIR, "--text %s", path);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    int rc = FG_OK;
    do {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                rc = fg_err_set(err, FG_ERR_NOMEM, "--text %s: out of memory", path);
                break;
            }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (rc == FG_OK && ferror(f))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "--text %s: read error", path);
    const char *nul = rc == FG_OK ? memchr(buf, 0, len) : NULL;
    if (nul) /* the tokenizer would see the text end there, and score a part of it silently */
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--text %s: a NUL byte at offset %zu (not text)",
                        path, (size_t)(nul - buf));
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return FG_OK;
}

/* Windows of W - 1 ids each after BOS, scored a block at a time (the protocol of
 * models/austen-opt/train.py's eval_ppl). */
static int score_windows(run *r, const int32_t *ids, uint32_t n, uint32_t W, fg_err *err)
{
    int32_t bos = fg_engine_hparams(r->e)->bos_id;
    uint32_t n_win = (n + W - 2) / (W - 1), bs = fg_engine_block_size(r->e);
    int32_t *buf = malloc((size_t)bs * W * sizeof *buf);
    const int32_t **win = malloc(bs * sizeof *win);
    uint32_t *lens = malloc(bs * sizeof *lens);
    if (!buf || !win || !lens) {
        free(buf), free(win), free(lens);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    double nll = 0;
    uint64_t count = 0;
    fg_progress bar;
    fg_progress_begin(&bar, "scoring", FG_UNIT_TOKENS, n, r->o->quiet);
    int rc = FG_OK;
    for (uint32_t w0 = 0; rc == FG_OK && w0 < n_win; w0 += bs) {
        uint32_t m = n_win - w0 < bs ? n_win - w0 : bs;
        for (uint32_t i = 0; i < m; i++) {
            uint32_t start = (w0 + i) * (W - 1), len = n - start < W - 1 ? n - start : W - 1;
            int32_t *p = buf + (size_t)i * W;
            p[0] = bos >= 0 ? bos : 0;
            memcpy(p + 1, ids + start, (size_t)len * sizeof *ids);
            win[i] = p;
            lens[i] = len + 1;
        }
        rc = fg_engine_logits(r->e, win, lens, m, &nll, &count, NULL, 0, err);
        fg_progress_update(&bar, count);
    }
    fg_progress_end(&bar);
    free(buf), free(win), free(lens);
    r->rep.scored = count;
    r->rep.perplexity = exp(nll / (double)(count ? count : 1));
    if (rc == FG_OK && !isfinite(r->rep.perplexity))
        rc = fg_err_set(err, FG_ERR_CORRUPT, "%s: perplexity is not finite (non-finite logits: "
                        "check the store with fg-inspect --verify)", r->o->model);
    return rc;
}

static int run_ppl(run *r, fg_err *err)
{
    char *text = NULL;
    int32_t *ids = NULL;
    uint32_t n = 0, W = r->o->window;
    int rc = open_store(r, err);
    if (rc == FG_OK)
        rc = read_text(r->o->text, &text, err);
    if (rc == FG_OK && !text[0])
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--text %s: the file is empty", r->o->text);
    if (rc == FG_OK)
        rc = encode(r, text, 0, &ids, &n, r->o->text, err); /* the text as text */
    free(text);
    uint32_t max_pos = rc == FG_OK ? fg_model_hparams(r->model)->max_pos : 0;
    if (rc == FG_OK && !W)
        W = max_pos;
    if (rc == FG_OK && W > max_pos)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--window %u: more than the model's %u "
                        "positions", W, max_pos);
    if (rc == FG_OK && W < 2)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--window %u: at least 2 tokens", W);
    if (rc == FG_OK && n < 2)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--text %s: fewer than 2 tokens to score",
                        r->o->text);
    if (r->o->max_tokens && n > r->o->max_tokens)
        n = (uint32_t)r->o->max_tokens;
    if (rc == FG_OK)
        rc = open_engine(r, W - 1, 1, (n + W - 2) / (W - 1), err);
    double t0 = fg_now();
    if (rc == FG_OK)
        rc = score_windows(r, ids, n, W, err);
    r->rep.total_s = fg_now() - t0;
    free(ids);
    if (rc == FG_OK) {
        char line[256];
        snprintf(line, sizeof line, "perplexity %.6f over %" PRIu64 " tokens (window %u, %u "
                 "windows, %.1f s)\n", r->rep.perplexity, r->rep.scored, W,
                 (n + W - 2) / (W - 1), r->rep.total_s);
        rc = write_out(r, line, err);
    }
    return rc;
}

/* ---- the plan alone ---- */

/* The plan of the run the same flags without --dry-run would make: sized by -p's prompt, or
 * by --input's longest prompt and its generation (as run_jobs sizes a file), or by
 * --prompt-len/--gen-len, else --max-context or the model's context. The engine stops at the
 * plan: nothing is allocated, so a plan too large for this machine prints instead of failing. */
static int run_dry(run *r, fg_err *err)
{
    uint32_t P = r->o->prompt_len ? r->o->prompt_len : r->o->window;
    uint32_t G = r->o->prompt_len ? r->o->max_new : 0, seqs = r->o->prompt ? 1 : 0;
    r->eo.plan_only = 1;
    int rc = open_store(r, err);
    if (rc == FG_OK && r->o->prompt) {
        int32_t *ids = NULL;
        uint32_t n = 0;
        rc = encode(r, r->o->prompt, prompt_flags(r), &ids, &n, "-p", err);
        free(ids);
        P = n, G = r->o->max_new;
    } else if (rc == FG_OK && r->o->input) {
        fg_job_reader *rd = NULL;
        size_t total = 0;
        int complete = 0;
        uint32_t maxP = 0, maxG = 0;
        uint64_t new_tokens = 0;
        rc = fg_job_reader_open(r->o->input, &rd, err);
        if (rc == FG_OK)
            fg_job_reader_count(rd, NULL, &total, NULL, &complete);
        fg_job_reader_close(rd);
        if (rc == FG_OK && complete)
            rc = size_jobs(r, NULL, &maxP, &maxG, &new_tokens, err);
        jobs_shape(maxP, maxG, context_limit(r), &P, &G);
        seqs = complete ? (uint32_t)(total < UINT32_MAX ? total : UINT32_MAX) : 0;
    }
    if (rc == FG_OK)
        rc = open_engine(r, P, G, seqs, err);
    if (rc == FG_OK) {
        if (r->rep.predicted && r->calib_note[0])
            fprintf(r->out, "calibration: %s\n", r->calib_note);
        if (r->rep.predicted)
            fprintf(r->out, "policy %s\n%s%s%spredicted: prefill %.2f s, decode %.2f s, "
                    "%.2f tok/s\n", r->policy_line, r->dev_line[0] ? "device " : "",
                    r->dev_line, r->dev_line[0] ? "\n" : "", r->rep.pred_prefill_s,
                    r->rep.pred_decode_s, r->rep.pred_tok_s);
        char up[32], down[32];
        if (r->rep.predicted && r->dev_line[0])
            fprintf(r->out, "predicted link traffic (a block): host -> device %s, device -> "
                    "host %s\n", fg_fmt_bytes((double)r->rep.pred_up, up, sizeof up),
                    fg_fmt_bytes((double)r->rep.pred_down, down, sizeof down));
        fg_plan_print(fg_engine_plan(r->e), r->out);
        if (fflush(r->out))
            rc = fg_err_sys(err, FG_ERR_IO, errno, "writing the plan to %s", out_name(r));
    }
    return rc;
}

/* ---- calibration ---- */

static int run_calibrate(run *r, fg_err *err)
{
    char path[4096];
    fg_calib c;
    int rc = r->o->calibration ? FG_OK : fg_calib_default_path(path, sizeof path, err);
    if (rc)
        return rc;
    if (r->o->calibration)
        snprintf(path, sizeof path, "%s", r->o->calibration);
    rc = fg_calib_measure(fg_engine_offload_dir(&r->eo), r->eo.threads, r->o->calibrate_quick,
                          r->o->quiet ? NULL : r->log, &c, err);
    if (rc == FG_OK)
        rc = fg_calib_save(path, &c, err);
    if (rc)
        return rc;
    fprintf(r->out, "calibration of %s (%d threads%s) in %.1f s, written to %s\n"
            "  disk read %.0f MB/s, write %.0f MB/s (pager, 4 MiB chunks)\n"
            "  decode to f32: f16 %.2f G values/s, q4 %.2f G values/s\n"
            "  attention: %.3g ns per query x key x width (f32 cache), %.3g (4-bit cache)\n"
            "  reading overlaps computing: %.0f%%\n"
            "  linear GFLOP/s by rows, f16 weights:", c.machine, c.threads,
            c.quick ? ", quick" : "",
            c.seconds, path, c.disk_read / 1e6, c.disk_write / 1e6, c.dec_f16 / 1e9,
            c.dec_q4 / 1e9, c.attn_s * 1e9, c.attn_q4_s * 1e9, 100 * c.overlap);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", c.m[i], c.gflops[i]);
    fputs("\n  linear GFLOP/s by rows, Q4 weights at --compute int8:", r->out);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", c.m[i], c.gflops_i8[i]);
    fputc('\n', r->out);
    return fflush(r->out) ? fg_err_sys(err, FG_ERR_IO, errno, "writing to %s", out_name(r))
                          : FG_OK;
}

/* --trace is written when the engine closes, at the end of the run: a path that cannot be
 * written (a directory, a missing or read-only directory) is named now, not after hours of
 * generating. Nothing is created here. */
static int check_trace_path(const char *path, fg_err *err)
{
    struct stat st;
    char dir[4096];
    if (!path)
        return FG_OK;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? fg_err_sys(err, FG_ERR_IO, EISDIR, "--trace %s", path)
             : access(path, W_OK) ? fg_err_sys(err, FG_ERR_IO, errno, "--trace %s", path)
                                  : FG_OK;
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    if (access(dir, W_OK | X_OK))
        return fg_err_sys(err, FG_ERR_IO, errno, "--trace %s: cannot create it in %s", path, dir);
    return FG_OK;
}

int fg_run(const fg_run_opts *o, fg_run_report *rep, fg_err *err)
{
    run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.eo = o->eo;
    r.out = o->out ? o->out : stdout;
    r.log = o->log ? o->log : stderr;
    r.eo.notice = notice;
    r.eo.notice_ctx = &r;
    int rc = o->mode == FG_RUN_DRY || o->mode == FG_RUN_CALIBRATE
                 ? FG_OK : check_trace_path(r.eo.trace_path, err);
    switch (rc ? -1 : (int)o->mode) {
    case -1: break;
    case FG_RUN_PROMPT: rc = run_prompt(&r, err); break;
    case FG_RUN_JOBS: rc = run_jobs(&r, err); break;
    case FG_RUN_SYNTHETIC: rc = run_synthetic(&r, err); break;
    case FG_RUN_PPL: rc = run_ppl(&r, err); break;
    case FG_RUN_DRY: rc = run_dry(&r, err); break;
    case FG_RUN_CALIBRATE: rc = run_calibrate(&r, err); break;
    default: rc = fg_err_set(err, FG_ERR_INVALID_ARG, "fg_run: unknown mode %d", (int)o->mode);
    }
    fg_err cerr;
    int rc2 = fg_engine_close(r.e, &cerr); /* writes the trace: a failure fails the run */
    if (rc == FG_OK && rc2) {
        *err = cerr;
        rc = rc2;
    }
    if (r.tmp_store[0])
        nftw(r.tmp_store, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fg_prefix_close(r.pfx); /* after the engine, which borrows it */
    fg_tok_free(r.tok);
    fg_model_close(r.model);
    fg_store_close(r.store);
    if (rep)
        *rep = r.rep;
    return rc;
}
