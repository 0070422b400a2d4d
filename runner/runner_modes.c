/* runner_modes.c - the run modes but jobs (runner_jobs.c): continue one prompt (-p), FlexGen's
 * synthetic benchmark (--prompt-len/--gen-len, EOS ignored), perplexity over a text (windows
 * after BOS, scored a block at a time), the plan alone (--dry-run: the engine stops at the plan,
 * nothing allocated), and the calibration of this machine for --policy auto. Each opens the
 * store, sizes the engine for its shape (fgr_open_engine) and writes its result to r->out.
 * -p --chat is one user message rendered through the model's chat template (one turn); it
 * prints the reply alone, where -p prints the prompt and its continuation. Both print the text
 * as it is generated (whole UTF-8 characters; text that could still become a stop string
 * waits), on a terminal or into a pipe (flushed after each piece). --chat without -p is the
 * interactive chat (runner_chat.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "policy_search.h"
#include "runner_int.h"
#include "session_int.h"

/* -p's ids: the text as a prompt, or with --chat one user message through the chat template. */
static int prompt_ids(fgr_run *r, int32_t **ids, uint32_t *n, fg_err *err)
{
    if (!r->o->chat)
        return fgr_encode(r, r->o->prompt, fgr_prompt_flags(r), ids, n, "-p", err);
    json_t *m = json_pack("[{s:s, s:s}]", "role", "user", "content", r->o->prompt);
    char *msgs = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!msgs)
        return fg_err_set(err, FG_ERR_NOMEM, "-p: out of memory (or not UTF-8) for --chat");
    int rc = fgr_encode_chat(r, msgs, NULL, ids, n, "-p --chat", err);
    free(msgs);
    return rc;
}

/* -p's output as it is generated: after each token the text so far (whole UTF-8 characters,
 * none of what could still become a stop string) past what was printed; a stop string ends it. */
typedef struct pstream {
    fgr_run *r;
    size_t printed;
    int failed;           /* a write failed: werr says it */
    fg_err werr;
} pstream;

static void print_upto(pstream *p, const char *text, size_t upto)
{
    if (p->failed || upto <= p->printed)
        return;
    if (fwrite(text + p->printed, 1, upto - p->printed, p->r->out) != upto - p->printed ||
        fflush(p->r->out)) {
        fg_err_sys(&p->werr, FG_ERR_IO, errno, "writing to %s", fgr_out_name(p->r));
        p->failed = 1;
    }
    p->printed = upto;
}

static int prompt_token(void *ctx, uint32_t seq, const int32_t *out, uint32_t n)
{
    pstream *p = ctx;
    const fg_run_opts *o = p->r->o;
    size_t whole;
    char *text = fgs_text(p->r->tok, out, n, 0, &whole, NULL);
    (void)seq;
    if (!text)
        return 0;
    long at = fgs_stop_at(o->stops, o->n_stops, text);
    print_upto(p, text, at >= 0 ? (size_t)at : whole - fgs_stop_hold(o->stops, o->n_stops,
                                                                         text, whole));
    free(text);
    return at >= 0 || p->failed;
}

/* The rest of the text once the sequence ended, and the newline. */
static int prompt_finish(pstream *p, const fg_gen_seq *s, fg_err *err)
{
    size_t whole;
    char *text = fgs_text(p->r->tok, s->out, s->n_out, 1, &whole, err);
    if (!text)
        return err->code ? err->code : FG_ERR_NOMEM;
    long at = fgs_stop_at(p->r->o->stops, p->r->o->n_stops, text);
    print_upto(p, text, at >= 0 ? (size_t)at : strlen(text));
    free(text);
    if (p->failed) {
        *err = p->werr;
        return err->code;
    }
    return fgr_write_out(p->r, "\n", err);
}

int fgr_run_prompt(fgr_run *r, fg_err *err)
{
    int32_t *ids = NULL, *out = NULL;
    uint32_t n = 0;
    if (r->o->chat && !r->o->prompt)
        return fgr_run_chat(r, err);
    int rc = fgr_open_store(r, err);
    if (rc == FG_OK)
        rc = prompt_ids(r, &ids, &n, err);
    if (rc == FG_OK)
        rc = fgr_open_engine(r, n, r->o->max_new, 1, err);
    if (rc == FG_OK && !(out = malloc((size_t)r->o->max_new * sizeof *out)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_gen_seq s = {ids, n, r->o->max_new, r->o->sample, 0, out, 0, 0, r->o->ignore_eos};
    pstream ps = {r, 0, 0, {0}};
    fg_gen_hooks h = {prompt_token, &ps, NULL, NULL, NULL, NULL};
    fg_gen_stats gs;
    double t0 = fg_now();
    if (rc == FG_OK && !r->o->chat) /* a chat prints the reply alone */
        rc = fgr_write_out(r, r->o->prompt, err);
    if (rc == FG_OK) { /* (no progress bar: the text itself shows the progress) */
        rc = fg_engine_generate(r->e, &s, 1, &h, &gs, err);
        r->rep.prefill_s += gs.prefill_s;
        r->rep.decode_s += gs.decode_s;
        r->rep.tokens += gs.new_tokens;
        r->rep.prompts++;
        r->rep.prompt_cached += gs.prompt_cached;
        r->rep.prompt_computed += gs.prompt_computed;
    }
    r->rep.total_s = fg_now() - t0;
    if (rc == FG_OK)
        rc = prompt_finish(&ps, &s, err);
    if (rc == FG_OK)
        fgr_summary(r);
    free(out);
    free(ids);
    return rc;
}

/* n sequences of P random ids (from id 4 on), g new tokens each into out's rows of G, their
 * generator streams i0 + i. */
static void random_block(const fgr_run *r, fg_rng *rng, uint32_t V, uint32_t P, uint32_t g,
                         uint32_t G, uint64_t i0, uint32_t n, int32_t *ids, int32_t *out,
                         fg_gen_seq *seqs)
{
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t t = 0; t < P; t++)
            ids[(size_t)i * P + t] = 4 + (int32_t)(fg_rng_uniform(rng) * (V - 4));
        seqs[i] = (fg_gen_seq){ids + (size_t)i * P, P, g, r->o->sample, i0 + i,
                               out + (size_t)i * G, 0, 0, 1};
    }
}

/* FlexGen's benchmark: random prompts of prompt_len ids, each generating exactly gen_len
 * tokens (EOS ignored, as FlexGen's benchmark does). --num-prompts N fixes the job: N prompts
 * in blocks of the engine's size (the search picks that block within N); without it the job
 * is one block, of whatever size the policy gives. */
int fgr_run_synthetic(fgr_run *r, fg_err *err)
{
    uint32_t P = r->o->prompt_len, G = r->o->max_new;
    int rc = fgr_open_store(r, err);
    if (rc == FG_OK)
        rc = fgr_open_engine(r, P, G, r->o->num_prompts, err);
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
    if (r->o->warmup) { /* other prompts (another stream), at most 2 new tokens each */
        uint32_t n = N < bs ? (uint32_t)N : bs, g = G < 2 ? G : 2;
        fg_rng_seed(&rng, r->o->sample.seed, 98);
        random_block(r, &rng, V, P, g, G, 0, n, ids, out, seqs);
        fg_gen_stats gs;
        rc = fg_engine_generate(r->e, seqs, n, NULL, &gs, err);
        fg_engine_stats_get(r->e, &r->base);
        r->warm = rc == FG_OK;
    }
    fg_rng_seed(&rng, r->o->sample.seed, 99);
    fgr_tick tc = {{0}, 0};
    double t0 = fg_now();
    fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, N * G, r->o->quiet);
    for (uint64_t i0 = 0; rc == FG_OK && i0 < N; i0 += bs) {
        uint32_t n = N - i0 < bs ? (uint32_t)(N - i0) : bs;
        random_block(r, &rng, V, P, G, G, i0, n, ids, out, seqs);
        rc = fgr_generate(r, seqs, n, NULL, &tc, err);
    }
    fg_progress_end(&tc.bar);
    r->rep.total_s = fg_now() - t0;
    if (rc == FG_OK)
        fgr_summary(r);
done:
    free(seqs);
    free(ids);
    free(out);
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
static int score_windows(fgr_run *r, const int32_t *ids, uint32_t n, uint32_t W, fg_err *err)
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

int fgr_run_ppl(fgr_run *r, fg_err *err)
{
    char *text = NULL;
    int32_t *ids = NULL;
    uint32_t n = 0, W = r->o->window;
    int rc = fgr_open_store(r, err);
    if (rc == FG_OK)
        rc = read_text(r->o->text, &text, err);
    if (rc == FG_OK && !text[0])
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "--text %s: the file is empty", r->o->text);
    if (rc == FG_OK)
        rc = fgr_encode(r, text, 0, &ids, &n, r->o->text, err); /* the text as text */
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
        rc = fgr_open_engine(r, W - 1, 1, (n + W - 2) / (W - 1), err);
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
        rc = fgr_write_out(r, line, err);
    }
    return rc;
}

/* ---- the plan alone ---- */

/* The plan of the run the same flags without --dry-run would make: sized by -p's prompt, or
 * by --input's longest prompt and its generation (as run_jobs sizes a file), or by
 * --prompt-len/--gen-len (and --num-prompts, which bounds the block as in the run), else
 * --max-context or the model's context. The engine stops at the
 * plan: nothing is allocated, so a plan too large for this machine prints instead of failing. */
int fgr_run_dry(fgr_run *r, fg_err *err)
{
    uint32_t P = r->o->prompt_len ? r->o->prompt_len : r->o->window;
    uint32_t G = r->o->prompt_len ? r->o->max_new : 0;
    uint32_t seqs = r->o->prompt ? 1 : r->o->num_prompts; /* as fgr_run_synthetic's engine */
    r->eo.plan_only = 1;
    int rc = fgr_open_store(r, err);
    if (rc == FG_OK && r->o->prompt) {
        int32_t *ids = NULL;
        uint32_t n = 0;
        rc = prompt_ids(r, &ids, &n, err);
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
            rc = fgr_size_jobs(r, NULL, &maxP, &maxG, &new_tokens, err);
        fgr_jobs_shape(maxP, maxG, fgr_context_limit(r), &P, &G);
        seqs = complete ? (uint32_t)(total < UINT32_MAX ? total : UINT32_MAX) : 0;
    }
    if (rc == FG_OK)
        rc = fgr_open_engine(r, P, G, seqs, err);
    if (rc == FG_OK) {
        if (r->rep.predicted && r->calib_note[0])
            fprintf(r->out, "calibration: %s\n", r->calib_note);
        if (r->rep.predicted)
            fprintf(r->out, "policy %s\n%s%s%spredicted: prefill %.2f s, decode %.2f s, "
                    "%.2f tok/s\n", r->policy_line, r->dev_line[0] ? "device " : "",
                    r->dev_line, r->dev_line[0] ? "\n" : "", r->rep.pred_prefill_s,
                    r->rep.pred_decode_s, r->rep.pred_tok_s);
        if (r->rep.predicted && r->bound_line[0])
            fprintf(r->out, "bound (a block): %s\n", r->bound_line);
        char up[32], down[32];
        if (r->rep.predicted && r->dev_line[0])
            fprintf(r->out, "predicted link traffic (a block): host -> device %s, device -> "
                    "host %s\n", fg_fmt_bytes((double)r->rep.pred_up, up, sizeof up),
                    fg_fmt_bytes((double)r->rep.pred_down, down, sizeof down));
        fg_plan_print(fg_engine_plan(r->e), r->out);
        if (fflush(r->out))
            rc = fg_err_sys(err, FG_ERR_IO, errno, "writing the plan to %s", fgr_out_name(r));
    }
    return rc;
}

/* ---- calibration ---- */

/* fg-infer calibrate --backend cuda|sim --device-profile FILE: the device measured (as --policy
 * auto measures it at start; fully unless --quick; on Q4 weights with --compress-weight) and
 * written as a device profile. */
static int calibrate_device_profile(fgr_run *r, fg_err *err)
{
    fg_backend *be = NULL;
    fg_calib_dev d;
    uint64_t room = r->eo.policy.gpu_budget > (512ull << 20) ? r->eo.policy.gpu_budget
                                                             : 512ull << 20;
    int rc = fg_engine_backend_new(&r->eo, room, &be, err);
    if (rc == FG_OK)
        rc = fg_calib_measure_device(be, r->eo.policy.compress_weight, r->o->calibrate_quick, &d,
                                     err);
    fg_backend_free(be);
    if (rc == FG_OK)
        rc = fg_calib_dev_save(r->o->device_profile, &d, err);
    if (rc)
        return rc;
    fprintf(r->out, "device profile of %s (%s weights%s) in %.1f s, written to %s\n"
            "  link %.3g GB/s up, %.3g down; uploads hidden %.0f%%\n"
            "  attention: %.3g ns per query x key x width (f32 cache), %.3g (4-bit cache); a "
            "prefill's %.3g, %.3g\n  linear GFLOP/s by rows:", d.name, d.q4 ? "q4" : "f16",
            r->o->calibrate_quick ? ", quick" : "", d.seconds, r->o->device_profile, d.up / 1e9,
            d.down / 1e9, 100 * d.overlap, d.attn_s * 1e9, d.attn_q4_s * 1e9,
            d.attn_pre_s * 1e9, d.attn_pre_q4_s * 1e9);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", d.m[i], d.gflops[i]);
    fputc('\n', r->out);
    return FG_OK;
}

int fgr_run_calibrate(fgr_run *r, fg_err *err)
{
    char path[4096];
    fg_calib c;
    if (r->o->device_profile)
        return calibrate_device_profile(r, err);
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
            "  memory read %.1f GB/s (a plain read loop: a decode's roofline)\n"
            "  decode to f32: f16 %.2f G values/s, q4 %.2f G values/s\n"
            "  attention: %.3g ns per query x key x width (f32 cache), %.3g (4-bit cache)\n"
            "  reading overlaps computing: %.0f%%\n"
            "  linear GFLOP/s by rows, f16 weights:", c.machine, c.threads,
            c.quick ? ", quick" : "",
            c.seconds, path, c.disk_read / 1e6, c.disk_write / 1e6, c.mem_read / 1e9, c.dec_f16 / 1e9,
            c.dec_q4 / 1e9, c.attn_s * 1e9, c.attn_q4_s * 1e9, 100 * c.overlap);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", c.m[i], c.gflops[i]);
    fputs("\n  linear GFLOP/s by rows, Q4 weights at --compute int8:", r->out);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", c.m[i], c.gflops_i8[i]);
    fputs("\n  linear GFLOP/s by rows, f16 weights at --compute bf16:", r->out);
    for (int i = 0; i < FG_CALIB_NM; i++)
        fprintf(r->out, " %u:%.1f", c.m[i], c.gflops_bf16[i]);
    fputc('\n', r->out);
    return fflush(r->out) ? fg_err_sys(err, FG_ERR_IO, errno, "writing to %s", fgr_out_name(r))
                          : FG_OK;
}
