/* runner.c - fg_run: a whole fg-infer run as a library call (see runner.h; the files of the
 * runner: runner_int.h).
 *
 * One run opens the store once (read-only) and keeps it until the end: the tokenizer and the
 * model (config and metadata, read once: fg_model_open) come from it, the engine borrows it.
 * --compress-weight on an F16 store quantizes it into a temporary store first
 * (runner_quant.c), which replaces the source for the run. The engine is opened for the run's
 * shape (prompt tokens, new tokens, sequences) once the mode knows it: a run longer than the
 * model's context is refused before the policy search (runner_policy.c) chooses a block for
 * it; --prefix-cache opens the cache for the engine's identity (runner_prefix.c).
 *
 * Prompts are encoded as transformers' tokenizer(text) does (special tokens written in the
 * text matched, the post-processor's BOS added) unless --no-special-in-prompt; chats (--chat,
 * a job line's messages) as apply_chat_template(tokenize=True) does: the model's template
 * rendered, its text encoded with special tokens matched and none added. An id past the
 * tokenizer's vocabulary decodes as nothing. Stop strings are checked on the decoded text of
 * each sequence as it grows, and the text is cut at the first one.
 *
 * fg_run checks the options against one another first (fg_run_opts_check, runner_opts.c), and
 * a --trace path before hours of generating; whatever fails, everything opened is closed (the
 * engine first: it writes the trace) and a temporary store removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "runner_int.h"

static void notice(void *ctx, const char *line)
{
    fgr_run *r = ctx;
    if (!r->o->quiet)
        fprintf(r->log, "fg-infer: %s\n", line);
}

static void tick(void *ctx, uint64_t tokens)
{
    fgr_tick *t = ctx;
    fg_progress_update(&t->bar, t->base + tokens);
}

/* How prompts are encoded: as transformers' tokenizer(text) does by default (special tokens
 * written in the text matched, the post-processor's BOS added); --no-special-in-prompt splits
 * special tokens' text as ordinary text (the BOS still added). */
unsigned fgr_prompt_flags(const fgr_run *r)
{
    return FG_TOK_ADD_BOS | (r->o->no_special_in_prompt ? 0u : FG_TOK_SPECIAL);
}

/* Token ids of text under the FG_TOK_* flags; *ids owned by the caller. */
int fgr_encode(fgr_run *r, const char *text, unsigned flags, int32_t **ids, uint32_t *n,
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

/* See runner_int.h. The render's error is FG_ERR_INVALID_ARG whatever its code, so a job line
 * whose messages the template refuses gets an error result and the job goes on. */
int fgr_encode_chat(fgr_run *r, const char *messages, const char *kwargs, int32_t **ids,
                    uint32_t *n, const char *what, fg_err *err)
{
    const fg_chat_template *t;
    const fg_chat_tokens *tk;
    int rc = fg_model_chat(r->model, &t, &tk, err);
    if (rc)
        return rc;
    fg_chat_opts co = {1, tk->bos, tk->eos, tk->pad, tk->unk, kwargs, kwargs ? strlen(kwargs) : 0,
                       0, 0, 0};
    char *text = NULL;
    size_t len = 0;
    if (fg_chat_render(t, messages, strlen(messages), &co, &text, &len, err)) {
        char m[FG_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: %s", what, m);
    }
    rc = fgr_encode(r, text, FG_TOK_SPECIAL, ids, n, what, err);
    free(text);
    return rc;
}

/* ids as text (special tokens skipped); owned by the caller, NULL on failure (err set). An id
 * past the tokenizer's vocabulary (a model's padded embedding rows) decodes as nothing
 * (fg_tok_decode); the caller keeps it in tokens. */
char *fgr_decode(fg_tok *tok, const int32_t *ids, uint32_t n, fg_err *err)
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

static int stop_check(void *ctx, uint32_t seq, const int32_t *out, uint32_t n)
{
    const fgr_stops *s = ctx;
    if (!s->n[seq])
        return 0;
    char *text = fgr_decode(s->tok, out, n, NULL);
    int hit = 0;
    for (int i = 0; text && i < s->n[seq] && !hit; i++)
        hit = strstr(text, s->v[seq][i]) != NULL;
    free(text);
    return hit;
}

/* Cut text at the first stop string. */
void fgr_cut_stop(char *text, const char *const *v, int n)
{
    for (int i = 0; i < n; i++) {
        char *p = strstr(text, v[i]);
        if (p)
            *p = '\0';
    }
}

/* A -m that is not a store, said as what it is: missing, a Hugging Face checkpoint directory
 * (convert it first), a GGUF file (convert it first). FG_OK when it may be a store. */
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
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "-m %s: a GGUF file, not an fg store: convert "
                          "it first (fg-convert %s -o STORE), then fg-infer -m STORE", m, m);
    return fg_err_set(err, FG_ERR_STORE_NOT_STORE, "-m %s: a file, not an fg store (a directory "
                      "written by fg-convert)", m);
}

/* The store, its config (first: a store without one is not a finished conversion, which is
 * what to say rather than blame its tokenizer) and its tokenizer. */
int fgr_open_store(fgr_run *r, fg_err *err)
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

int fgr_open_engine(fgr_run *r, uint32_t P, uint32_t G, uint32_t seqs, fg_err *err)
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
        rc = fgr_quantize_at_load(r, &hp, err);
    if (!r->eo.max_ctx)
        r->eo.max_ctx = P + G;
    r->eo.gen_hint = G; /* a pipeline's split weighs the head by it */
    if (rc == FG_OK && r->o->policy_auto)
        rc = fgr_auto_policy(r, P, G, seqs, err);
    if (rc == FG_OK)
        rc = fg_engine_open(r->model, &r->eo, &r->e, err);
    if (rc == FG_OK && r->o->prefix_cache && !r->eo.plan_only)
        rc = fg_runner_prefix_open(r->e, r->o, &r->pfx, err);
    if (rc == FG_OK && !r->o->policy_auto && P + G)
        fgr_predict_fixed(r, P, G, seqs);
    if (rc == FG_OK)
        fgr_bound(r);
    if (r->tmp_store[0]) { /* the pager and the catalog hold their files open: names can go */
        fgr_remove_tree(r->tmp_store);
        r->tmp_store[0] = '\0';
    }
    return rc;
}

/* Generate seqs[0..n) (n <= block size) as one block with the given stop strings. */
int fgr_generate(fgr_run *r, fg_gen_seq *seqs, uint32_t n, const fgr_stops *st, fgr_tick *tc,
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
const char *fgr_out_name(const fgr_run *r)
{
    return r->o->out ? "the output" : "standard output";
}

int fgr_write_out(fgr_run *r, const char *text, fg_err *err)
{
    if (fputs(text, r->out) == EOF || fflush(r->out))
        return fg_err_sys(err, FG_ERR_IO, errno, "writing to %s", fgr_out_name(r));
    return FG_OK;
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

/* The run o's mode (or its plan alone) makes. */
static int dispatch(fgr_run *r, fg_err *err)
{
    const fg_run_opts *o = r->o;
    if (o->eo.plan_only && o->mode != FG_RUN_CALIBRATE)
        return fgr_run_dry(r, err);
    switch (o->mode) {
    case FG_RUN_PROMPT: return fgr_run_prompt(r, err);
    case FG_RUN_JOBS: return fgr_run_jobs(r, err);
    case FG_RUN_SYNTHETIC: return fgr_run_synthetic(r, err);
    case FG_RUN_PPL: return fgr_run_ppl(r, err);
    case FG_RUN_SCORE: return fgr_run_score(r, err);
    case FG_RUN_DRY: return fgr_run_dry(r, err);
    case FG_RUN_CALIBRATE: return fgr_run_calibrate(r, err);
    default: return fg_err_set(err, FG_ERR_INVALID_ARG, "fg_run: unknown mode %d", (int)o->mode);
    }
}

int fg_run(const fg_run_opts *o, fg_run_report *rep, fg_err *err)
{
    fgr_run r;
    fg_run_opts checked = *o;
    memset(&r, 0, sizeof r);
    r.o = &checked;
    r.eo = o->eo;
    r.out = o->out ? o->out : stdout;
    r.log = o->log ? o->log : stderr;
    r.eo.notice = notice;
    r.eo.notice_ctx = &r;
    int rc = fg_run_opts_check(&checked, err);
    int runs = o->mode != FG_RUN_DRY && o->mode != FG_RUN_CALIBRATE && !o->eo.plan_only;
    if (rc == FG_OK && runs) /* (a plan or a calibration writes no trace) */
        rc = check_trace_path(r.eo.trace_path, err);
    if (rc == FG_OK)
        rc = dispatch(&r, err);
    fg_err cerr;
    int rc2 = fg_engine_close(r.e, &cerr); /* writes the trace: a failure fails the run */
    if (rc == FG_OK && rc2) {
        *err = cerr;
        rc = rc2;
    }
    if (r.tmp_store[0])
        fgr_remove_tree(r.tmp_store);
    fg_prefix_close(r.pfx); /* after the engine, which borrows it */
    fg_tok_free(r.tok);
    fgr_model_close(&r);
    fg_store_close(r.store);
    if (rep)
        *rep = r.rep;
    return rc;
}

