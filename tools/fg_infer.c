/* fg-infer - generate with an OPT model held in a store (see README "fg-infer").
 *
 *   fg-infer -m STORE -p PROMPT                      print a continuation
 *   fg-infer -m STORE --input IN.jsonl --output OUT.jsonl [--resume]   a resumable batch job
 *   fg-infer -m STORE --prompt-len N --gen-len N     synthetic prompts (benchmarks)
 *   fg-infer ppl -m STORE --text FILE [--window N]   perplexity
 *
 * The main parses flags, calls the engine, prints. Exit 0 on success, 1 on a runtime error
 * (one line naming the file, flag or prompt at fault), 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ftw.h>

#include "convert.h"
#include "engine.h"
#include "fg_progress.h"
#include "jobs.h"

typedef struct args {
    const char *model, *prompt, *input, *output, *text, *trace;
    int resume, quiet, ppl, dry_run;
    uint32_t max_new, prompt_len, gen_len, window;
    uint64_t max_tokens;
    fg_sample_params sample;
    const char *stops[FG_JOB_MAX_STOPS];
    int n_stops;
    fg_engine_opts eo;
    fg_store *store;  /* the one open of the model's store (the quantized copy's with
                         --compress-weight on an F16 store) */
    fg_tok *tok;
    char tmp_store[4096]; /* a store quantized at load, removed once the engine is open */
} args;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fg-infer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage(FILE *f)
{
    fputs("usage: fg-infer -m STORE (-p PROMPT | --input IN.jsonl --output OUT.jsonl [--resume]\n"
          "                | --prompt-len N --gen-len N) [options]\n"
          "       fg-infer ppl -m STORE --text FILE [--window N] [--max-tokens N] [options]\n"
          "generation:   --max-new-tokens N (32)  --temperature F (0 = greedy)  --top-k N\n"
          "              --top-p F  --seed N  --stop STR (repeatable)\n"
          "placement:    --percent WG WC CG CC HG HC (FlexGen: GPU and CPU percentages of\n"
          "              weights, KV cache, activations; the rest goes to disk)\n"
          "              --ram-budget SIZE (e.g. 512M, 4G)  --gpu-batch-size N\n"
          "              --num-gpu-batches N  --schedule zigzag|row  --overlap / --no-overlap\n"
          "              --sep-layer[=true|false]  --cpu-cache-compute  --max-context N\n"
          "compression:  --compress-cache (4-bit KV cache)  --attn-sparsity F (keep the top F of\n"
          "              past tokens)  --compress-weight (4-bit weights: the store's, or\n"
          "              quantized at load from an F16 store into a temporary store)\n"
          "other:        --threads N  --trace FILE (Chrome trace events)  --verify  --quiet\n"
          "              --offload-dir DIR (the KV cache's disk file; default $TMPDIR or /tmp)\n",
          f);
}

static uint64_t parse_size(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
    if (errno || end == s || *end || v <= 0)
        die("%s %s: expected a size such as 512M or 4G", flag, s);
    return (uint64_t)(v * mult);
}

static uint64_t parse_uint(const char *flag, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
        die("%s %s: expected an integer in [%" PRIu64 ", %" PRIu64 "]", flag, s, lo, hi);
    return v;
}

static double parse_float(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        die("%s %s: expected a number", flag, s);
    return v;
}

/* FlexGen's --percent: six percentages; what GPU and CPU leave goes to disk. */
static void parse_percent(args *a, char **argv, int *optind_io, int argc)
{
    double v[6];
    int i0 = *optind_io - 1;
    for (int i = 0; i < 6; i++) {
        if (i0 + i >= argc)
            die("--percent needs 6 numbers (WG WC CG CC HG HC)");
        v[i] = parse_float("--percent", argv[i0 + i]);
        if (v[i] < 0 || v[i] > 100)
            die("--percent %s: each number is a percentage in [0, 100]", argv[i0 + i]);
    }
    *optind_io = i0 + 6;
    double *dst[3] = {a->eo.policy.frac.w, a->eo.policy.frac.c, a->eo.policy.frac.h};
    const char *what[3] = {"weights", "KV cache", "activations"};
    for (int k = 0; k < 3; k++) {
        if (v[2 * k] + v[2 * k + 1] > 100)
            die("--percent: the %s percentages %g + %g exceed 100", what[k], v[2 * k],
                v[2 * k + 1]);
        dst[k][0] = v[2 * k] / 100;
        dst[k][1] = v[2 * k + 1] / 100;
        dst[k][2] = 1 - dst[k][0] - dst[k][1];
    }
    a->eo.policy.have_fractions = 1;
}

enum {
    O_INPUT = 256, O_OUTPUT, O_RESUME, O_MAXNEW, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_STOP,
    O_PERCENT, O_GBS, O_NGB, O_SCHED, O_OVERLAP, O_NO_OVERLAP, O_SEP, O_CPUCACHE, O_BUDGET,
    O_THREADS, O_TRACE, O_VERIFY, O_QUIET, O_TEXT, O_WINDOW, O_MAXTOK, O_PLEN, O_GLEN, O_CTX,
    O_COMPRESS_W, O_COMPRESS_C, O_SPARSITY, O_OFFLOAD, O_NO_VERIFY, O_DRY_RUN,
};

static void parse_one(args *a, int c, char **argv, int argc)
{
    switch (c) {
    case 'm': a->model = optarg; break;
    case 'p': a->prompt = optarg; break;
    case O_INPUT: a->input = optarg; break;
    case O_OUTPUT: a->output = optarg; break;
    case O_RESUME: a->resume = 1; break;
    case O_MAXNEW: a->max_new = (uint32_t)parse_uint("--max-new-tokens", optarg, 1, 1 << 20); break;
    case O_TEMP: a->sample.temperature = (float)parse_float("--temperature", optarg); break;
    case O_TOPK: a->sample.top_k = (uint32_t)parse_uint("--top-k", optarg, 0, 1 << 30); break;
    case O_TOPP: a->sample.top_p = (float)parse_float("--top-p", optarg); break;
    case O_SEED: a->sample.seed = parse_uint("--seed", optarg, 0, UINT64_MAX); break;
    case O_STOP:
        if (a->n_stops == FG_JOB_MAX_STOPS || !*optarg)
            die("--stop: at most %d non-empty strings", FG_JOB_MAX_STOPS);
        a->stops[a->n_stops++] = optarg;
        break;
    case O_PERCENT: parse_percent(a, argv, &optind, argc); break;
    case O_GBS: a->eo.policy.gbs = (uint32_t)parse_uint("--gpu-batch-size", optarg, 1, 4096); break;
    case O_NGB: a->eo.policy.ngb = (uint32_t)parse_uint("--num-gpu-batches", optarg, 1, 4096); break;
    case O_SCHED:
        if (strcmp(optarg, "zigzag") && strcmp(optarg, "row"))
            die("--schedule %s: expected zigzag or row", optarg);
        a->eo.policy.schedule = !strcmp(optarg, "row") ? FG_SCHEDULE_ROW : FG_SCHEDULE_ZIGZAG;
        break;
    case O_OVERLAP: a->eo.policy.overlap = 1; break;
    case O_NO_OVERLAP: a->eo.policy.overlap = 0; break;
    case O_SEP:
        if (optarg && strcmp(optarg, "true") && strcmp(optarg, "false"))
            die("--sep-layer %s: expected true or false", optarg);
        a->eo.policy.sep_layer = !optarg || !strcmp(optarg, "true");
        break;
    case O_CPUCACHE: break; /* attention always runs where the cache lives: the CPU */
    case O_BUDGET: a->eo.ram_budget = parse_size("--ram-budget", optarg); break;
    case O_THREADS: a->eo.threads = (int)parse_uint("--threads", optarg, 1, 1024); break;
    case O_TRACE: a->trace = optarg; break;
    case O_VERIFY: a->eo.no_verify = 0; break; /* the default */
    case O_NO_VERIFY: a->eo.no_verify = 1; break;
    case O_DRY_RUN: a->dry_run = 1; break;
    case O_QUIET: a->quiet = 1; break;
    case O_TEXT: a->text = optarg; break;
    case O_WINDOW: a->window = (uint32_t)parse_uint("--window", optarg, 2, 1 << 20); break;
    case O_MAXTOK: a->max_tokens = parse_uint("--max-tokens", optarg, 1, UINT64_MAX); break;
    case O_PLEN: a->prompt_len = (uint32_t)parse_uint("--prompt-len", optarg, 1, 1 << 20); break;
    case O_GLEN: a->gen_len = (uint32_t)parse_uint("--gen-len", optarg, 1, 1 << 20); break;
    case O_CTX: a->eo.max_ctx = (uint32_t)parse_uint("--max-context", optarg, 2, 1 << 20); break;
    case O_COMPRESS_W: a->eo.policy.compress_weight = 1; break;
    case O_COMPRESS_C: a->eo.policy.compress_cache = 1; break;
    case O_OFFLOAD: a->eo.offload_dir = optarg; break;
    case O_SPARSITY:
        a->eo.policy.attn_sparsity = (float)parse_float("--attn-sparsity", optarg);
        if (!(a->eo.policy.attn_sparsity > 0 && a->eo.policy.attn_sparsity <= 1))
            die("--attn-sparsity %s: the fraction of past tokens kept, in (0, 1]", optarg);
        break;
    case 'h': usage(stdout); exit(0);
    default:
        fprintf(stderr, "fg-infer: bad option or missing value: %s (see fg-infer --help)\n",
                argv[optind - 1]);
        exit(2);
    }
}

static void parse_args(args *a, int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"prompt", required_argument, NULL, 'p'},
        {"input", required_argument, NULL, O_INPUT}, {"output", required_argument, NULL, O_OUTPUT},
        {"resume", no_argument, NULL, O_RESUME},
        {"max-new-tokens", required_argument, NULL, O_MAXNEW},
        {"temperature", required_argument, NULL, O_TEMP}, {"top-k", required_argument, NULL, O_TOPK},
        {"top-p", required_argument, NULL, O_TOPP}, {"seed", required_argument, NULL, O_SEED},
        {"stop", required_argument, NULL, O_STOP}, {"percent", required_argument, NULL, O_PERCENT},
        {"gpu-batch-size", required_argument, NULL, O_GBS},
        {"num-gpu-batches", required_argument, NULL, O_NGB},
        {"schedule", required_argument, NULL, O_SCHED}, {"overlap", no_argument, NULL, O_OVERLAP},
        {"no-overlap", no_argument, NULL, O_NO_OVERLAP}, {"sep-layer", optional_argument, NULL, O_SEP},
        {"cpu-cache-compute", no_argument, NULL, O_CPUCACHE},
        {"ram-budget", required_argument, NULL, O_BUDGET},
        {"threads", required_argument, NULL, O_THREADS}, {"trace", required_argument, NULL, O_TRACE},
        {"verify", no_argument, NULL, O_VERIFY}, {"quiet", no_argument, NULL, O_QUIET},
        {"text", required_argument, NULL, O_TEXT}, {"window", required_argument, NULL, O_WINDOW},
        {"max-tokens", required_argument, NULL, O_MAXTOK},
        {"prompt-len", required_argument, NULL, O_PLEN}, {"gen-len", required_argument, NULL, O_GLEN},
        {"max-context", required_argument, NULL, O_CTX},
        {"compress-weight", no_argument, NULL, O_COMPRESS_W},
        {"compress-cache", no_argument, NULL, O_COMPRESS_C},
        {"attn-sparsity", required_argument, NULL, O_SPARSITY},
        {"offload-dir", required_argument, NULL, O_OFFLOAD},
        {"no-verify", no_argument, NULL, O_NO_VERIFY}, {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->max_new = 32;
    a->sample.top_p = 1.0f;
    a->eo.policy = fg_policy_default();
    if (argc > 1 && !strcmp(argv[1], "ppl")) {
        a->ppl = 1;
        argv++;
        argc--;
    }
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:h", opts, NULL)) != -1)
        parse_one(a, c, argv, argc);
    if (optind != argc)
        die("unexpected argument '%s' (see --help)", argv[optind]);
    if (!a->model) {
        fprintf(stderr, "fg-infer: -m STORE is required (see fg-infer --help)\n");
        exit(2);
    }
    int modes = !!a->prompt + !!a->input + !!a->prompt_len + a->ppl;
    if (a->dry_run && !modes)
        modes = 1; /* the plan alone: sized for --max-context or the model's context */
    if (modes != 1 || (a->input && !a->output) || (a->output && !a->input) ||
        (a->ppl && !a->text) || (!!a->prompt_len != !!a->gen_len && !a->ppl))
        die("choose one of -p PROMPT, --input/--output, --prompt-len/--gen-len, or ppl --text");
    fg_err err;
    if (fg_sample_check(&a->sample, &err))
        die("%s", err.msg);
    if (a->gen_len)
        a->max_new = a->gen_len;
    a->eo.trace_path = a->trace;
}

/* ---- shared pieces ---- */

static void notice(void *ctx, const char *line)
{
    if (!*(const int *)ctx)
        fprintf(stderr, "fg-infer: %s\n", line);
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

static int32_t *encode(fg_tok *tok, const char *text, int bos, uint32_t *n, const char *what)
{
    fg_tok_ids ids = {0};
    fg_err err;
    if (fg_tok_encode(tok, text, strlen(text), bos ? FG_TOK_ADD_BOS : 0, &ids, &err))
        die("%s: %s", what, err.msg);
    if (ids.n == 0)
        die("%s: the prompt is empty", what);
    *n = (uint32_t)ids.n;
    return ids.ids;
}

static char *decode(fg_tok *tok, const int32_t *ids, uint32_t n)
{
    fg_tok_bytes b = {0};
    fg_err err;
    if (fg_tok_decode(tok, ids, n, FG_TOK_SKIP_SPECIAL, &b, &err))
        die("decoding output: %s", err.msg);
    char *s = malloc(b.len + 1);
    memcpy(s, b.data ? b.data : "", b.len);
    s[b.len] = '\0';
    fg_tok_bytes_free(&b);
    return s;
}

typedef struct stop_ctx {
    fg_tok *tok;
    uint32_t base; /* index of the block's first sequence */
    const char *const *stops[4096];
    const int *n_stops[4096];
} stop_ctx;

/* Stop when the decoded output contains one of the sequence's stop strings. */
static int stop_check(void *ctx, uint32_t seq, const int32_t *out, uint32_t n)
{
    stop_ctx *s = ctx;
    seq += s->base;
    if (!*s->n_stops[seq])
        return 0;
    char *text = decode(s->tok, out, n);
    int hit = 0;
    for (int i = 0; i < *s->n_stops[seq] && !hit; i++)
        hit = strstr(text, s->stops[seq][i]) != NULL;
    free(text);
    return hit;
}

/* Cut text at the first stop string. */
static void cut_stop(char *text, const char *const *stops, int n)
{
    for (int i = 0; i < n; i++) {
        char *p = strstr(text, stops[i]);
        if (p)
            *p = '\0';
    }
}

static const char *finish_name(int f)
{
    return f == FG_FINISH_EOS ? "eos" : f == FG_FINISH_STOP ? "stop" : "length";
}

static void summary(fg_engine *e, const args *a, double prefill, double decode, uint64_t tokens,
                    uint64_t seqs, double total)
{
    if (a->quiet)
        return;
    fg_engine_stats st;
    fg_engine_stats_get(e, &st);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint32_t gbs = fg_engine_plan(e)->gbs, ngb = fg_engine_plan(e)->ngb;
    char r[32], w[32], peak[32], plan[32], budget[32];
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024, disk = st.pager.moved[FG_TIER_DISK][FG_TIER_HOST];
    fprintf(stderr,
            "summary: %" PRIu64 " tokens generated in %.2f s (prefill %.2f s, decode %.2f s): "
            "%.2f tok/s\n"
            "         block %u x %u (gbs x ngb), schedule %s; peak RSS %s (%" PRIu64 " bytes; "
            "plan %s, budget %s)\n"
            "         read from disk %s (%" PRIu64 " bytes), written %s (KV cache and activations), pager hits %"
            PRIu64 " misses %" PRIu64 ", stalled %.2f s; %s\n",
            tokens, total, prefill, decode, total > 0 ? (double)tokens / total : 0.0, gbs, ngb,
            a->eo.policy.schedule == FG_SCHEDULE_ROW ? "row-by-row" : "zig-zag",
            fg_fmt_bytes((double)rss, peak, sizeof peak), rss,
            fg_fmt_bytes((double)st.ram_peak_planned, plan, sizeof plan),
            a->eo.ram_budget ? fg_fmt_bytes((double)a->eo.ram_budget, budget, sizeof budget)
                             : "none",
            fg_fmt_bytes((double)disk, r, sizeof r), disk,
            fg_fmt_bytes((double)st.pager.moved[FG_TIER_HOST][FG_TIER_DISK], w, sizeof w),
            st.pager.hits, st.pager.misses, (double)st.pager.stall_ns * 1e-9, st.pager.engine);
    if (decode > 0 && tokens > seqs)
        fprintf(stderr, "         decode: %.1f GFLOP/s in Linear layers and LM head (%.2f GFLOP "
                "per token)\n", (double)(tokens - seqs) *
                fg_model_flops_per_token(fg_engine_hparams(e)) / decode / 1e9,
                fg_model_flops_per_token(fg_engine_hparams(e)) / 1e9);
}

/* ---- modes ---- */

/* Generate for n sequences in blocks; results handed to emit per block. */
typedef void (*emit_fn)(void *ctx, fg_gen_seq *seqs, uint32_t first, uint32_t n,
                        uint32_t block, double seconds);

static void run_blocks(fg_engine *e, const args *a, fg_gen_seq *seqs, uint32_t n, stop_ctx *sc,
                       emit_fn emit, void *ectx)
{
    uint32_t bs = fg_engine_block_size(e);
    uint64_t total_new = 0;
    for (uint32_t i = 0; i < n; i++)
        total_new += seqs[i].max_new;
    tick_ctx tc = {{0}, 0};
    fg_progress_begin(&tc.bar, "generating", FG_UNIT_TOKENS, total_new, a->quiet);
    double prefill = 0, dec = 0, t0 = fg_now();
    uint64_t tokens = 0;
    for (uint32_t first = 0, blk = 0; first < n; first += bs, blk++) {
        uint32_t m = n - first < bs ? n - first : bs;
        fg_gen_stats st;
        fg_err err;
        double tb = fg_now();
        if (sc)
            sc->base = first;
        fg_gen_hooks hooks = {sc ? stop_check : NULL, sc, tick, &tc};
        if (fg_engine_generate(e, seqs + first, m, &hooks, &st, &err))
            die("%s", err.msg);
        prefill += st.prefill_s;
        dec += st.decode_s;
        tokens += st.new_tokens;
        tc.base += st.new_tokens;
        if (emit)
            emit(ectx, seqs, first, m, blk, fg_now() - tb);
    }
    fg_progress_end(&tc.bar);
    summary(e, a, prefill, dec, tokens, n, fg_now() - t0);
}

static void open_progress(void *ctx, uint64_t done, uint64_t total)
{
    fg_progress *p = ctx;
    p->total = total;
    fg_progress_update(p, done);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int not_q4(void *ctx, const fg_store_tensor *t)
{
    *(int *)ctx |= t->n_dims >= 2 && t->codec.id != FG_CODEC_Q4;
    return 0;
}

/* --compress-weight on a store that is not 4-bit: quantize it at load into a temporary store
 * in the offload dir (exactly what fg-convert STORE --compress-weight writes), open that one
 * instead, and remove its names at once (the open handles keep the files). */
static void quantize_at_load(args *a)
{
    int need = 0;
    fg_err err;
    if (fg_store_tensor_iter(a->store, not_q4, &need, &err))
        die("%s", err.msg);
    if (!need)
        return;
    const char *od = a->eo.offload_dir ? a->eo.offload_dir : getenv("TMPDIR");
    char *tmp = a->tmp_store;
    snprintf(tmp, sizeof a->tmp_store, "%s/fg-q4-XXXXXX", od && *od ? od : "/tmp");
    if (!mkdtemp(tmp))
        die("--compress-weight: cannot create a temporary store in %s: %s", od && *od ? od : "/tmp",
            strerror(errno));
    fg_store_close(a->store); /* the conversion opens it itself (one handle per process) */
    a->store = NULL;
    fg_progress bar;
    fg_progress_begin(&bar, "quantizing", FG_UNIT_BYTES, 0, a->quiet);
    fg_convert_opts co = {1, 0, -1, NULL, 0, open_progress, &bar};
    fg_convert_report rep;
    int rc = fg_convert_store(a->model, tmp, &co, &rep, &err);
    fg_progress_end(&bar);
    fg_store *q = NULL;
    if (rc == FG_OK)
        rc = fg_store_open(tmp, FG_STORE_RDONLY, NULL, &q, &err);
    if (rc) {
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        die("%s", err.msg);
    }
    if (!a->quiet) {
        char x[32], y[32];
        fprintf(stderr, "fg-infer: quantized the weights to 4-bit at load: %s -> %s in %.1f s "
                "(a temporary store in %s, removed once open)\n",
                fg_fmt_bytes((double)rep.source_bytes, x, sizeof x),
                fg_fmt_bytes((double)rep.stored_bytes, y, sizeof y), rep.seconds, tmp);
    }
    a->store = q;
}

/* The store, opened once per run, and its tokenizer. */
static void open_store(args *a)
{
    fg_err err;
    if (fg_store_open(a->model, FG_STORE_RDONLY, NULL, &a->store, &err) ||
        fg_engine_read_tokenizer(a->store, &a->tok, &err))
        die("%s", err.msg);
}

static fg_engine *open_engine(args *a, uint32_t max_ctx)
{
    static int quiet;
    quiet = a->quiet;
    a->eo.notice = notice;
    a->eo.notice_ctx = &quiet;
    if (a->eo.policy.compress_weight)
        quantize_at_load(a);
    if (!a->eo.max_ctx)
        a->eo.max_ctx = max_ctx;
    fg_engine *e;
    fg_err err;
    int rc = fg_engine_open(a->store, &a->eo, &e, &err);
    if (a->tmp_store[0]) /* the pager and the catalog hold their files open: the names can go */
        nftw(a->tmp_store, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc)
        die("%s", err.msg);
    return e;
}

static void close_engine(args *a, fg_engine *e)
{
    fg_err err;
    if (fg_engine_close(e, &err))
        die("%s", err.msg);
    fg_tok_free(a->tok);
    fg_store_close(a->store);
}

static void run_prompt(args *a)
{
    open_store(a);
    uint32_t n;
    int32_t *ids = encode(a->tok, a->prompt, 1, &n, "-p");
    fg_engine *e = open_engine(a, n + a->max_new);
    int32_t *out = malloc(a->max_new * sizeof *out);
    fg_gen_seq s = {ids, n, a->max_new, a->sample, 0, out, 0, 0};
    stop_ctx *sc = calloc(1, sizeof *sc);
    sc->tok = a->tok;
    sc->stops[0] = a->stops;
    sc->n_stops[0] = &a->n_stops;
    run_blocks(e, a, &s, 1, sc, NULL, NULL);
    char *text = decode(a->tok, out, s.n_out);
    cut_stop(text, a->stops, a->n_stops);
    printf("%s%s\n", a->prompt, text);
    free(text);
    free(sc);
    free(out);
    free(ids);
    close_engine(a, e);
}

typedef struct job_ctx {
    fg_tok *tok;
    fg_job **jobs; /* [n] the pending jobs, in order */
    int fd;
    const char *path;
} job_ctx;

static void emit_jobs(void *ctx, fg_gen_seq *seqs, uint32_t first, uint32_t n,
                      uint32_t block, double seconds)
{
    job_ctx *j = ctx;
    fg_job_result *r = calloc(n, sizeof *r);
    char **texts = calloc(n, sizeof *texts);
    if (!r || !texts)
        die("%s: out of memory", j->path);
    for (uint32_t i = 0; i < n; i++) {
        fg_gen_seq *s = &seqs[first + i];
        const fg_job *job = j->jobs[first + i];
        texts[i] = decode(j->tok, s->out, s->n_out);
        cut_stop(texts[i], (const char *const *)job->stops, job->n_stops);
        r[i] = (fg_job_result){job, texts[i], s->out, s->n_out, s->n_prompt,
                               finish_name(s->finish), seconds, block};
    }
    fg_err err;
    if (fg_jobs_append(j->fd, j->path, r, n, &err))
        die("%s", err.msg);
    for (uint32_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(r);
}

static void run_jobs(args *a)
{
    fg_job_list l;
    fg_err err;
    int fd;
    size_t done;
    if (fg_jobs_load(a->input, &l, &err) ||
        fg_jobs_open_output(a->output, a->resume, &l, &fd, &done, &err))
        die("%s", err.msg);
    uint32_t n = 0, max_prompt = 0, max_new = 0;
    fg_job **pending = malloc(l.n * sizeof *pending);
    for (size_t i = 0; i < l.n; i++)
        if (!l.jobs[i].done)
            pending[n++] = &l.jobs[i];
    if (!a->quiet && done)
        fprintf(stderr, "fg-infer: resuming: %zu of %zu prompts already in %s\n", done, l.n,
                a->output);
    if (n > 4096)
        die("%s: at most 4096 pending prompts per run", a->input);
    if (n)
        open_store(a);
    fg_gen_seq *seqs = calloc(n + 1, sizeof *seqs);
    stop_ctx *sc = calloc(1, sizeof *sc);
    for (uint32_t i = 0; i < n; i++) {
        fg_job *job = pending[i];
        uint32_t np;
        char what[64];
        snprintf(what, sizeof what, "%s: prompt \"%.40s\"", a->input, job->id);
        int32_t *ids = encode(a->tok, job->prompt, 1, &np, what);
        uint32_t mn = job->max_new > 0 ? (uint32_t)job->max_new : a->max_new;
        seqs[i] = (fg_gen_seq){ids, np, mn, a->sample, (uint64_t)(job - l.jobs),
                               malloc(mn * sizeof(int32_t)), 0, 0};
        max_prompt = np > max_prompt ? np : max_prompt;
        max_new = mn > max_new ? mn : max_new;
        sc->stops[i] = (const char *const *)job->stops;
        sc->n_stops[i] = &job->n_stops;
    }
    fg_engine *e = NULL;
    if (n) {
        e = open_engine(a, max_prompt + max_new);
        sc->tok = a->tok;
        job_ctx jc = {a->tok, pending, fd, a->output};
        run_blocks(e, a, seqs, n, sc, emit_jobs, &jc);
    } else if (!a->quiet) {
        fprintf(stderr, "fg-infer: nothing to do: every prompt of %s is in %s\n", a->input,
                a->output);
    }
    for (uint32_t i = 0; i < n; i++) {
        free((void *)seqs[i].prompt);
        free(seqs[i].out);
    }
    free(seqs);
    free(sc);
    free(pending);
    close(fd);
    fg_jobs_free(&l);
    if (e)
        close_engine(a, e);
}

/* Synthetic prompts of random tokens (FlexGen's --prompt-len/--gen-len benchmark runs): one
 * block of gbs x ngb sequences; EOS does not stop them (every sequence runs gen_len). */
static void run_synthetic(args *a)
{
    open_store(a);
    fg_engine *e = open_engine(a, a->prompt_len + a->gen_len);
    uint32_t n = fg_engine_block_size(e), V = fg_engine_hparams(e)->vocab_size;
    fg_gen_seq *seqs = calloc(n, sizeof *seqs);
    fg_rng rng;
    fg_rng_seed(&rng, a->sample.seed, 99);
    for (uint32_t i = 0; i < n; i++) {
        int32_t *p = malloc(a->prompt_len * sizeof *p);
        for (uint32_t t = 0; t < a->prompt_len; t++)
            p[t] = 4 + (int32_t)(fg_rng_uniform(&rng) * (V - 4));
        seqs[i] = (fg_gen_seq){p, a->prompt_len, a->gen_len, a->sample, i,
                               malloc(a->gen_len * sizeof(int32_t)), 0, 0};
    }
    run_blocks(e, a, seqs, n, NULL, NULL, NULL);
    for (uint32_t i = 0; i < n; i++) {
        free((void *)seqs[i].prompt);
        free(seqs[i].out);
    }
    free(seqs);
    close_engine(a, e);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("--text %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            buf = realloc(buf, cap + 1);
            if (!buf)
                die("--text %s: out of memory", path);
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f))
        die("--text %s: read error", path);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* Perplexity by the protocol of models/austen-opt/train.py (eval_ppl): the text's ids (no BOS)
 * in consecutive blocks of window-1, each fed as [BOS] + block. */
static void run_ppl(args *a)
{
    open_store(a);
    char *text = read_text(a->text);
    uint32_t n;
    int32_t *ids = encode(a->tok, text, 0, &n, a->text);
    free(text);
    if (a->max_tokens && n > a->max_tokens)
        n = (uint32_t)a->max_tokens;
    uint32_t W = a->window;
    fg_err err;
    fg_hparams hp;
    if (!W && fg_engine_read_config(a->store, &hp, &err))
        die("%s", err.msg);
    W = W ? W : hp.max_pos;
    fg_engine *e = open_engine(a, W);
    int32_t bos = fg_engine_hparams(e)->bos_id;
    uint32_t n_win = (n + W - 2) / (W - 1), bs = fg_engine_block_size(e);
    int32_t **win = malloc(n_win * sizeof *win);
    uint32_t *lens = malloc(n_win * sizeof *lens);
    for (uint32_t w = 0; w < n_win; w++) {
        uint32_t start = w * (W - 1), len = n - start < W - 1 ? n - start : W - 1;
        win[w] = malloc((len + 1) * sizeof **win);
        win[w][0] = bos;
        memcpy(win[w] + 1, ids + start, len * sizeof *ids);
        lens[w] = len + 1;
    }
    double nll = 0, t0 = fg_now();
    uint64_t count = 0;
    fg_progress bar;
    fg_progress_begin(&bar, "scoring", FG_UNIT_TOKENS, n, a->quiet);
    for (uint32_t w = 0; w < n_win; w += bs) {
        uint32_t m = n_win - w < bs ? n_win - w : bs;
        if (fg_engine_logits(e, (const int32_t *const *)win + w, lens + w, m, &nll, &count, NULL,
                             0, &err))
            die("%s", err.msg);
        fg_progress_update(&bar, count);
    }
    fg_progress_end(&bar);
    printf("perplexity %.6f over %" PRIu64 " tokens (window %u, %u windows, %.1f s)\n",
           exp(nll / (double)count), count, W, n_win, fg_now() - t0);
    for (uint32_t w = 0; w < n_win; w++)
        free(win[w]);
    free(win);
    free(lens);
    free(ids);
    close_engine(a, e);
}

/* --dry-run: the plan the engine would allocate by, for the run's context, then exit. */
static void run_dry(args *a)
{
    open_store(a);
    uint32_t ctx = a->prompt_len + a->gen_len;
    fg_engine *e = open_engine(a, ctx ? ctx : a->window);
    fg_plan_print(fg_engine_plan(e), stdout);
    close_engine(a, e);
}

int main(int argc, char **argv)
{
    args a;
    parse_args(&a, argc, argv);
    if (a.dry_run)
        run_dry(&a);
    else if (a.ppl)
        run_ppl(&a);
    else if (a.prompt)
        run_prompt(&a);
    else if (a.input)
        run_jobs(&a);
    else
        run_synthetic(&a);
    return 0;
}
