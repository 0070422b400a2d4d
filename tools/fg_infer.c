/* fg-infer - generate with a model held in a store (see docs/usage.md).
 *
 *   fg-infer -m STORE -p PROMPT                      print a continuation
 *   fg-infer -m STORE -p TEXT --chat                 one chat turn (the chat template), the reply
 *   fg-infer -m STORE --chat                         an interactive chat (standard input's lines)
 *   fg-infer -m STORE --input IN.jsonl --output OUT.jsonl [--resume]   a resumable batch job
 *   fg-infer -m STORE --prompt-len N --gen-len N     synthetic prompts (benchmarks)
 *   fg-infer ppl -m STORE --text FILE [--window N]   perplexity
 *   fg-infer score -m STORE --input PAIRS.jsonl --output OUT.jsonl [--rolling] [--resume]
 *                                                    log-likelihoods (lm-eval's requests)
 *   fg-infer -m STORE --dry-run [...]                the memory plan, nothing run
 *   fg-infer calibrate [--calibration FILE] [--quick] measure this machine for --policy auto
 *   fg-infer calibrate --backend cuda|sim --device-profile FILE: the device, as a profile
 *   mpirun -np N fg-infer ...                        the same run as a pipeline of N ranks
 *
 * The main reads the flags into fg_run_opts from one table (tool_args.h: parsing and --help
 * from the same entries), decides the kind of run from the ppl/calibrate word and the flags
 * given, lets the runner check the rules between its options (fg_run_opts_check: a library
 * caller gets the same refusals), and calls fg_run (runner/runner.h). Exit 0 on success, 1 on
 * a runtime error (one line naming the file, flag or prompt at fault), 2 on bad usage (a flag
 * or value that cannot be right, before anything runs).
 *
 * Under mpirun (dist/dist.h, engine/stage.h) rank 0 runs fg_run with the link in its engine
 * options and the other ranks follow (fg_runner_follow); a rank that fails prints its one line,
 * prefixed with its rank, and ends every rank (fg_dist_abort).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "fg_version.h"
#include "runner.h"
#include "runner_follow.h"
#include "tool_args.h"
#include "tool_engine_args.h"

typedef struct args {
    fg_run_opts r;
    int ppl, calibrate, score; /* the first word */
    const char *placement; /* the first of --percent, --gpu-batch-size, --num-gpu-batches given */
    int cpu_cache;       /* --cpu-cache-compute[=true|false]: 1, 0; -1 not given */
    uint32_t gen_len;
    const char *trace;
    double dist_timeout;  /* --dist-timeout: the pipeline's watchdog */
    const char *sampling; /* the first of --top-k, --top-p, --seed given (NULL: none) */
} args;

static args g_a; /* the flags: the option table below writes here */
static int g_rank; /* under mpirun: only rank 0 prints usage errors */

/* Ctrl-C during a job: the first asks the runner to stop after the block it is generating
 * (every appended block is durable), the second ends the process at once. */
static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig)
{
    static const char msg[] = "\nfg-infer: stopping after this block (Ctrl-C again to stop at "
                              "once; what is saved stays saved)\n";
    if (g_interrupt) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupt = 1;
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

/* argv[i] as the shell reads it back: bare when only safe bytes, else single-quoted. */
static void put_arg(FILE *f, const char *s)
{
    if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                        "_./=:,+-@%") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

/* The interrupted job's one line: results saved, and the command that continues it. */
static void interrupted_line(int argc, char **argv, const args *a, const fg_run_report *rep)
{
    int has_resume = 0;
    if (!strcmp(a->r.output, "-")) { /* nothing to read back: say so rather than a command */
        fprintf(stderr, "fg-infer: interrupted: %" PRIu64 " results written to standard output "
                "(--resume needs --output FILE)\n", rep->saved);
        return;
    }
    fprintf(stderr, "fg-infer: interrupted: %" PRIu64 " results saved in %s; continue with: ",
            rep->saved, a->r.output);
    for (int i = 0; i < argc; i++) {
        has_resume |= !strcmp(argv[i], "--resume");
        if (i)
            fputc(' ', stderr);
        put_arg(stderr, argv[i]);
    }
    fprintf(stderr, "%s%s\n", has_resume ? "" : " --resume",
            !strcmp(a->r.input, "-") ? " < (the same input)" : "");
}

/* ---- the flags: one table (tool_args.h) read into g_a ---- */

static void stop_fn(void *dst, const char *v, int argc, char **argv)
{
    fg_run_opts *r = dst;
    (void)argc, (void)argv;
    if (r->n_stops == FG_RUN_MAX_STOPS || !*v)
        ta_die("--stop: at most %d non-empty strings", FG_RUN_MAX_STOPS);
    r->stops[r->n_stops++] = v;
}

#define SECTION(h, text) {.kind = TA_SECTION, .name = h, .help = text}
#define FLAG(n, f, v, h) {.kind = TA_FLAG, .name = n, .dst = &(f), .size = sizeof(f), .val = v, \
                          .help = h}
#define ONCE(n, s, f, a, h) {.kind = TA_ONCE, .name = n, .short_name = s, .dst = &(f), .arg = a, \
                             .help = h}
#define STR(n, f, a, h) {.kind = TA_STR, .name = n, .dst = &(f), .arg = a, .help = h}
#define UINT(n, f, l, hi_, a, h) {.kind = TA_UINT, .name = n, .dst = &(f), .size = sizeof(f), \
                                  .lo = l, .hi = hi_, .arg = a, .help = h}
#define SIZE(n, f, h) {.kind = TA_SIZE, .name = n, .dst = &(f), .arg = "SIZE", .help = h}
#define FLOAT(n, f, a, h) {.kind = TA_FLOAT, .name = n, .dst = &(f), .size = sizeof(f), .arg = a, \
                           .help = h}
#define ABOVE(n, f, top, why, a, h) {.kind = TA_FLOAT, .name = n, .dst = &(f), .size = sizeof(f), \
                                     .min = 0, .max = top, .range = why, .arg = a, .help = h}
#define CHOICE(n, f, w, v, a, h) {.kind = TA_CHOICE, .name = n, .dst = &(f), .size = sizeof(f), \
                                  .words = w, .vals = v, .arg = a, .help = h}
#define BOOL(n, f, h) {.kind = TA_BOOL, .name = n, .dst = &(f), .size = sizeof(f), .help = h}

static ta_opt k_opts[] = {
    SECTION("runs", NULL),
    ONCE("model", 'm', g_a.r.model, "STORE", "the store (a directory fg-convert wrote)"),
    ONCE("prompt", 'p', g_a.r.prompt, "PROMPT", "continue PROMPT and print it (may be empty)"),
    ONCE("input", 0, g_a.r.input, "IN.jsonl", "a job's prompts, one JSON line each (- = stdin)"),
    ONCE("output", 0, g_a.r.output, "OUT.jsonl", "its results (- = stdout)"),
    FLAG("resume", g_a.r.resume, 1, "continue the job: lines already in OUT.jsonl are skipped"),
    UINT("prompt-len", g_a.r.prompt_len, 1, 1 << 20, "N", "synthetic prompts of N tokens (a "
         "benchmark, as FlexGen's)"),
    UINT("gen-len", g_a.gen_len, 1, 1 << 20, "N", "... generating N tokens each"),
    ONCE("text", 0, g_a.r.text, "FILE", "ppl: the text scored"),
    UINT("window", g_a.r.window, 2, 1 << 20, "N", "ppl: tokens a window (the model's context)"),
    UINT("max-tokens", g_a.r.max_tokens, 1, UINT64_MAX, "N", "ppl: score at most N tokens"),
    FLAG("quick", g_a.r.calibrate_quick, 1, "calibrate: the quick measurement"),
    FLAG("rolling", g_a.r.rolling, 1, "score: lines {\"id\", \"text\"}: the text's rolling "
         "log-likelihood (lm-eval's loglikelihood_rolling) instead of context/continuation pairs"),
    FLAG("no-shared-context", g_a.r.eo.no_share, 1, "score: compute a context shared by several "
         "pairs once per pair (measures what computing it once saves)"),
    SECTION("generation", NULL),
    UINT("max-new-tokens", g_a.r.max_new, 1, 1 << 20, "N", "new tokens a prompt (32)"),
    FLOAT("temperature", g_a.r.sample.temperature, "F", "0 = greedy (the default)"),
    {.kind = TA_UINT, .name = "top-k", .dst = &g_a.r.sample.top_k, .size = 4, .lo = 0,
     .hi = 1 << 30, .given = &g_a.sampling, .arg = "N",
     .help = "sample from the N most likely tokens (0: all); --top-k, --top-p and --seed act "
             "from --temperature above 0"},
    {.kind = TA_FLOAT, .name = "top-p", .dst = &g_a.r.sample.top_p, .size = 4,
     .given = &g_a.sampling, .arg = "F",
     .help = "sample from the fewest tokens whose probabilities reach F (1: all)"},
    {.kind = TA_FLOAT, .name = "min-p", .dst = &g_a.r.sample.min_p, .size = 4,
     .given = &g_a.sampling, .arg = "F",
     .help = "drop tokens less likely than F x the most likely one (0: off; after top-p)"},
    {.kind = TA_FLOAT, .name = "repetition-penalty", .dst = &g_a.r.sample.repetition_penalty,
     .size = 4, .arg = "F", .help = "transformers': the logits of tokens in the prompt or output "
     "divided by F when positive, times F when negative (1: off; greedy too)"},
    {.kind = TA_FLOAT, .name = "presence-penalty", .dst = &g_a.r.sample.presence_penalty,
     .size = 4, .arg = "F", .help = "OpenAI's: F off the logit of each token the output has "
     "(-2..2, 0: off)"},
    {.kind = TA_FLOAT, .name = "frequency-penalty", .dst = &g_a.r.sample.frequency_penalty,
     .size = 4, .arg = "F", .help = "OpenAI's: F x its count in the output off each token's "
     "logit (-2..2, 0: off)"},
    {.kind = TA_UINT, .name = "seed", .dst = &g_a.r.sample.seed, .size = 8, .lo = 0,
     .hi = UINT64_MAX, .given = &g_a.sampling, .arg = "N", .help = "the sampler's seed (0)"},
    {.kind = TA_FN, .name = "stop", .dst = &g_a.r, .fn = stop_fn, .takes_value = 1, .arg = "STR",
     .help = "a stop string (repeatable)"},
    FLAG("ignore-eos", g_a.r.ignore_eos, 1, "always max-new-tokens (--prompt-len runs always do, "
         "as FlexGen's benchmark)"),
    SECTION("prompts", "encoded as transformers' tokenizer(text): special tokens written in the "
            "text are matched, BOS added as the tokenizer's post-processor does"),
    FLAG("no-special-in-prompt", g_a.r.no_special_in_prompt, 1, "split special tokens' text as "
         "ordinary text"),
    FLAG("chat", g_a.r.chat, 1, "-p TEXT is one user message, rendered through the model's "
         "chat template (as transformers' apply_chat_template with add_generation_prompt); "
         "prints the reply; without -p: an interactive chat (a line a turn, the conversation "
         "kept; Ctrl-D ends)"),
    SECTION("jobs", "each input line {\"id\", \"prompt\", \"max_new_tokens\", \"stop\", "
            "\"meta\"}, or \"messages\": [{\"role\", \"content\"}, ...] (and optional "
            "\"chat_template_kwargs\") for the chat template instead of \"prompt\"; a line that "
            "cannot fit the context gets an \"error\" result line and the "
            "job goes on; --input - reads standard input (a pipe or a file); an input with no "
            "prompt is an error (exit 1), never a run of 0; results come a block at a time, so "
            "not always in input order (ids as given, meta echoed); Ctrl-C stops after the "
            "block and prints the --resume command"),
    FLAG("prompt-ids", g_a.r.prompt_ids, 1, "add the prompt's ids to each result"),
    SECTION("placement", NULL),
    {.kind = TA_FN, .name = "percent", .dst = &g_a.r.eo.policy, .fn = ta_percent_fn,
     .takes_value = 1, .given = &g_a.placement, .arg = "WG WC CG CC HG HC",
     .help = "FlexGen's: GPU and CPU percentages of weights, KV cache, activations; the rest "
             "goes to disk"},
    SIZE("ram-budget", g_a.r.eo.ram_budget, "at most the RAM available now"),
    {.kind = TA_UINT, .name = "gpu-batch-size", .dst = &g_a.r.eo.policy.gbs, .size = 4, .lo = 1,
     .hi = 4096, .given = &g_a.placement, .arg = "N", .help = "sequences a GPU batch"},
    {.kind = TA_UINT, .name = "num-gpu-batches", .dst = &g_a.r.eo.policy.ngb, .size = 4,
     .lo = 1, .hi = 4096, .given = &g_a.placement, .arg = "N",
     .help = "GPU batches a block (gbs x ngb sequences)"},
    CHOICE("schedule", g_a.r.eo.policy.schedule, "zigzag|row", ta_k_sched, NULL, "FlexGen's "
           "zig-zag block schedule (the default) or row by row"),
    FLAG("overlap", g_a.r.eo.policy.overlap, 1, "prefetch while computing (the default)"),
    FLAG("no-overlap", g_a.r.eo.policy.overlap, 0, "one unit at a time"),
    BOOL("sep-layer", g_a.r.eo.policy.sep_layer, "attention and MLP as separate units (true)"),
    UINT("max-context", g_a.r.eo.max_ctx, 2, 1 << 20, "N", "the longest prompt + generation"),
    CHOICE("experts", g_a.r.eo.policy.experts, "routed|all", ta_k_experts, NULL, "a mixture of "
           "experts' weights off the GPU and RAM: read only the experts a step's tokens chose, "
           "or all"),
    SECTION("policy", NULL),
    CHOICE("policy", g_a.r.policy_auto, "auto|fixed", ta_k_policy, NULL, "auto, the default "
           "without --percent, --gpu-batch-size or --num-gpu-batches: FlexGen's cost model and "
           "LP search over block and placement (and the 4-bit cache with --allow-lossy); with "
           "a device its GPU share too, priced by a measurement of the device at start"),
    STR("calibration", g_a.r.calibration, "FILE", "default $XDG_CACHE_HOME/fg/calibration.json"),
    STR("device-profile", g_a.r.device_profile, "FILE", "a device backend: price the plan with "
        "this device calibration instead of measuring the device (with --backend sim, plans "
        "for a GPU this machine lacks); fg-infer calibrate --backend cuda --device-profile FILE "
        "writes one"),
    UINT("max-block", g_a.r.max_block, 1, 256, "N", "auto: at most N sequences a block"),
    UINT("num-prompts", g_a.r.num_prompts, 1, 1u << 30, "N", "--prompt-len runs: the job's "
         "prompts; auto picks the block within it"),
    FLAG("warmup", g_a.r.warmup, 1, "--prompt-len runs: one block of other random prompts "
         "runs untimed first, as llama-bench's warm-up does, so the summary times an engine "
         "whose RAM-homed weights are loaded (the first reads and first touches excluded)"),
    FLAG("allow-lossy", g_a.r.allow_lossy, 1, "auto may choose the 4-bit KV cache; without it, "
         "only --compress-cache, --compress-weight, --attn-sparsity turn them on"),
    SECTION("compression", NULL),
    FLAG("compress-cache", g_a.r.eo.policy.compress_cache, 1, "4-bit KV cache"),
    ABOVE("attn-sparsity", g_a.r.eo.policy.attn_sparsity, 1, "the fraction of past tokens "
          "kept, in (0, 1]", "F", "keep the top F of past tokens"),
    FLAG("compress-weight", g_a.r.eo.policy.compress_weight, 1, "4-bit weights: the store's, or "
         "quantized at load from an F16 store into a temporary store"),
    SECTION("sizes", "SIZE is bytes with K, M, G or T, binary whichever way it is written: "
            "512M = 512MB = 512MiB = 512 x 2^20 bytes, 1G = 1GB = 1GiB (as free -h and ls -h "
            "count); printed as MiB and GiB"),
    SECTION("other", NULL),
    UINT("threads", g_a.r.eo.threads, 1, 1024, "N", "compute threads (the CPUs online)"),
    ONCE("trace", 0, g_a.trace, "FILE", "Chrome trace events"),
    FLAG("verify", g_a.r.eo.no_verify, 0, "check chunk checksums as they are read (the "
         "default)"),
    FLAG("no-verify", g_a.r.eo.no_verify, 1, "skip that"),
    FLAG("quiet", g_a.r.quiet, 1, "no progress, notices or summary"),
    {.kind = TA_NOTE, .name = "version", .help = "the commit it was built from, the build's "
     "features"},
    FLAG("dry-run", g_a.r.eo.plan_only, 1, "print the memory plan of the run these flags make, "
         "and stop; nothing is allocated"),
    CHOICE("compute", g_a.r.eo.compute, "f32|int8|f16|bf16", ta_k_compute, "int8|f32|f16|bf16",
           "int8, the default: integer dot products on 4-bit/8-bit weights grouped along the "
           "input axis, fg-convert --group-axis 1; f32: those weights decoded to f32; F16/BF16/F32 "
           "weights are f32 either way; f16: 16-bit GEMM inputs, f32 sums, on --backend cuda; "
           "bf16: as int8, and F16/BF16 weights with x and weights rounded to bfloat16 (2 rows "
           "and more) on CPUs with AVX512-BF16 (about 1.8x; f32 elsewhere)"),
    STR("offload-dir", g_a.r.eo.offload_dir, "DIR", "the KV cache's disk file; default $TMPDIR "
        "or /tmp"),
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    SECTION("device", NULL),
    CHOICE("backend", g_a.r.eo.backend, "cpu|sim|cuda", ta_k_backend, NULL, "sim: a simulated GPU "
           "on the CPU"),
    SIZE("gpu-budget", g_a.r.eo.gpu_budget, "device memory; default: CUDA's free memory less "
         "1 GiB, sim 1G"),
    ABOVE("sim-link", g_a.r.eo.sim_link_gbps, INFINITY, "GB/s of the simulated link, above 0",
          "GBPS", "the simulated link's bandwidth"),
    BOOL("cpu-cache-compute", g_a.cpu_cache, "with a device: attention on the CPU where the KV "
         "cache is in RAM; not given: --policy auto picks where it predicts faster, --policy "
         "fixed the device"),
    SECTION("prefix cache", NULL),
    ONCE("prefix-cache", 0, g_a.r.prefix_cache, "DIR", "prompt prefixes' KV rows kept in a store "
         "there, loaded instead of computed; shared prefixes of a job computed once"),
    SIZE("prefix-cache-budget", g_a.r.prefix_budget, "least recently used pages evicted past "
         "it"),
    UINT("prefix-page-tokens", g_a.r.prefix_page_tokens, 1, 4096, "N", "tokens a cache page, "
         "16; fixed per cache"),
    SECTION("pipeline", "mpirun -np N fg-infer ... (N ranks, layers split between them; each "
            "rank's --ram-budget and --threads are its own)"),
    ABOVE("dist-timeout", g_a.dist_timeout, INFINITY, "seconds, more than 0", "S", "a peer "
          "silent for S seconds is dead or stuck: 300"),
    UINT("micro-batch", g_a.r.eo.micro_batch, 1, 4096, "N", "batches of gbs sequences a "
         "micro-batch holds: ceil(ngb / ranks)"),
    {0},
};

static const ta_cmd k_cmd = {
    "fg-infer",
    "usage: fg-infer -m STORE (-p PROMPT | --input IN.jsonl --output OUT.jsonl [--resume]\n"
    "                | --prompt-len N --gen-len N) [options]\n"
    "       fg-infer ppl -m STORE --text FILE [--window N] [--max-tokens N] [options]\n"
    "       fg-infer score -m STORE --input PAIRS.jsonl --output OUT.jsonl [--rolling] [--resume]\n"
    "       fg-infer calibrate [--calibration FILE] [--quick] [--threads N]\n"
    "       fg-infer calibrate --backend cuda|sim --device-profile FILE [--quick] "
    "[--compress-weight]\n",
    k_opts, "bad option or missing value:", 0, NULL, NULL,
};

/* The run the ppl/calibrate word and the flags make (o.mode): exactly one kind, or the plan
 * alone (--dry-run). What is wrong between the other options is the runner's to say
 * (fg_run_opts_check), which also names the missing half of --input/--output. */
static void choose_mode(args *a)
{
    if (a->calibrate) {
        a->r.mode = FG_RUN_CALIBRATE;
        return;
    }
    if (!a->ppl && (a->r.text || a->r.window || a->r.max_tokens)) /* not silently ignored */
        ta_die("%s belongs to fg-infer ppl", a->r.text ? "--text" : a->r.window ? "--window"
                                                                            : "--max-tokens");
    if (!a->r.model) {
        fprintf(stderr, "fg-infer: -m STORE is required (see fg-infer --help)\n");
        exit(2);
    }
    int dry = a->r.eo.plan_only;
    if (a->score) {
        if (a->r.prompt || a->r.prompt_len || a->r.chat)
            ta_die("fg-infer score reads --input PAIRS.jsonl: no -p, --chat or --prompt-len");
        if (!a->r.input || !a->r.output)
            ta_die("fg-infer score needs --input PAIRS.jsonl and --output OUT.jsonl");
        a->r.mode = FG_RUN_SCORE;
        return;
    }
    if (a->r.rolling)
        ta_die("--rolling belongs to fg-infer score");
    int chat_alone = a->r.chat && !a->r.prompt; /* the interactive chat */
    int modes = !!a->r.prompt + !!a->r.input + !!a->r.prompt_len + a->ppl + chat_alone;
    if (dry && modes > 1)
        ta_die("--dry-run plans one kind of run: give at most one of -p, --input, --prompt-len, ppl");
    a->r.mode = a->ppl ? FG_RUN_PPL : a->r.prompt || chat_alone ? FG_RUN_PROMPT
              : a->r.input ? FG_RUN_JOBS
              : a->r.prompt_len ? FG_RUN_SYNTHETIC : FG_RUN_DRY; /* DRY: the plan alone */
    int half_job = (modes == 1 && a->r.input && !a->r.output) || (a->r.output && !a->r.input);
    if (half_job || (dry && !modes))
        return;
    if (modes != 1 || (a->ppl && !a->r.text) || (!!a->r.prompt_len != !!a->gen_len && !a->ppl))
        ta_die("choose one of -p PROMPT, --chat, --input/--output, --prompt-len/--gen-len, or "
               "ppl --text");
}

static void parse_args(args *a, int argc, char **argv)
{
    a->cpu_cache = -1;
    a->r.max_new = 32;
    a->r.sample.top_p = 1.0f;
    a->r.eo.policy = fg_policy_default();
    a->r.eo.compute = FG_COMPUTE_INT8; /* README "Accuracy of the compressions": within 0.03% */
    a->r.policy_auto = -1;
    a->dist_timeout = 300;
    if (argc > 1 && (!strcmp(argv[1], "ppl") || !strcmp(argv[1], "calibrate") ||
                     !strcmp(argv[1], "score"))) {
        a->ppl = !strcmp(argv[1], "ppl");
        a->score = !strcmp(argv[1], "score");
        a->calibrate = !a->ppl && !a->score;
        argv++;
        argc--;
    }
    int first = ta_parse(&k_cmd, argc, argv);
    if (first != argc)
        ta_die("unexpected argument '%s' (see --help)", argv[first]);
    ta_engine_check(&a->r.eo);
    if (a->r.eo.backend != FG_BACKEND_CPU) { /* FlexGen's: on the device unless asked */
        a->r.eo.policy.cpu_attention = a->cpu_cache == 1;
        a->r.attn_search = a->cpu_cache < 0; /* --policy auto: where it predicts faster */
    } else if (a->cpu_cache == 0) {
        ta_die("--cpu-cache-compute=false needs a device (--backend cuda or sim): the CPU "
            "backend's attention is always on the CPU");
    }
    a->r.placement_fixed = a->placement != NULL;
    /* auto never turns on a lossy compression by itself: the 4-bit cache only when asked
     * (--compress-cache) or allowed (--allow-lossy); weights and sparsity are never its choice */
    a->r.cache_choice = a->r.eo.policy.compress_cache ? 1 : a->r.allow_lossy ? -1 : 0;
    choose_mode(a);
    if (a->gen_len)
        a->r.max_new = a->gen_len;
    a->r.eo.trace_path = a->trace;
}

/* The runner's rules (fg_run_opts_check), with the pipeline's when there are several ranks;
 * then the warning for sampling flags that greedy decoding ignores. */
static void check_args(args *a, fg_dist *d)
{
    fg_err err;
    a->r.eo.link = fg_dist_link(d);
    if (fg_run_opts_check(&a->r, &err))
        ta_die("%s", err.msg);
    if (a->sampling && a->r.sample.temperature == 0.0f && !a->r.quiet && !g_rank &&
        a->r.mode != FG_RUN_CALIBRATE)
        fprintf(stderr, "fg-infer: warning: --%s has no effect at temperature 0 (greedy: the "
                "most likely token every step); give --temperature to sample\n", a->sampling);
    if (fg_dist_size(d) > 1) {
        /* --backend cuda: ranks on one machine take its GPUs in turn (the rank's index on its
         * node, modulo the GPUs visible) */
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        local = local ? local : getenv("MPI_LOCALRANKID");
        a->r.eo.gpu_index = local ? atoi(local) : g_rank;
    }
}

static void follower_notice(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "fg-infer: %s\n", line);
}

/* One line naming the rank (unless the message does), then every rank ends. */
static void fail(fg_dist *d, const fg_err *err)
{
    if (fg_dist_size(d) > 1 && strncmp(err->msg, "rank ", 5))
        fprintf(stderr, "fg-infer: rank %d: %s\n", fg_dist_rank(d), err->msg);
    else
        fprintf(stderr, "fg-infer: %s\n", err->msg);
    fg_dist_abort(d, 1);
}

static void link_line(fg_dist *d, const args *a, const fg_run_report *rep)
{
    fg_dist_stats st;
    fg_dist_stats_get(d, &st);
    if (a->r.quiet || fg_dist_size(d) < 2)
        return;
    fprintf(stderr, "fg-infer: rank %d: sent %" PRIu64 " bytes in %" PRIu64 " messages, waited "
            "%.2f s for rank %d", fg_dist_rank(d), st.sent_bytes, st.sent_msgs, st.wait_s,
            (fg_dist_rank(d) + fg_dist_size(d) - 1) % fg_dist_size(d));
    if (rep && rep->tokens)
        fprintf(stderr, "; %" PRIu64 " tokens generated", rep->tokens);
    fputc('\n', stderr);
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-infer"))
        return 0;
    args *a = &g_a;
    fg_err err;
    fg_dist *d = NULL;
    if (fg_dist_init(&argc, &argv, &d, &err)) {
        fprintf(stderr, "fg-infer: %s\n", err.msg);
        fg_dist_abort(d, 1);
    }
    g_rank = fg_dist_rank(d);
    ta_init("fg-infer", g_rank > 0); /* rank 0 alone says what is wrong with the flags */
    parse_args(a, argc, argv);
    check_args(a, d);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe is a write error with a message, not a kill */
    fg_dist_set_timeout(d, a->dist_timeout);
    fg_run_report rep = {0};
    char trace[4096];
    if (a->r.mode == FG_RUN_JOBS && !a->r.eo.plan_only && g_rank == 0) {
        a->r.interrupt = &g_interrupt;
        signal(SIGINT, on_sigint);
    }
    if (g_rank > 0) {
        a->r.eo.notice = a->r.quiet ? NULL : follower_notice;
        snprintf(trace, sizeof trace, "%s.rank%d", a->trace ? a->trace : "", g_rank);
        a->r.eo.trace_path = a->trace ? trace : NULL; /* rank 0's file, then one per rank */
        a->r.eo.plan_only = 0; /* --dry-run is rank 0's: a follower serves what it is sent */
        if (fg_runner_follow(a->r.model, &a->r.eo, a->r.eo.link, &err))
            fail(d, &err);
    } else if (fg_run(&a->r, &rep, &err)) {
        if (!rep.interrupted)
            fail(d, &err);
        interrupted_line(argc, argv, a, &rep);
        fg_stage_quit(a->r.eo.link, &err);
        fg_dist_abort(d, 130);
    } else if (fg_stage_quit(a->r.eo.link, &err)) {
        fail(d, &err);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "fg-infer: writing to standard output: %s\n", strerror(errno));
        fg_dist_abort(d, 1);
    }
    link_line(d, a, &rep);
    if (fg_dist_finish(d, &err)) {
        fprintf(stderr, "fg-infer: %s\n", err.msg);
        return 1;
    }
    return 0;
}
