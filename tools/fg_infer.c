/* fg-infer - generate with a model held in a store (see docs/usage.md).
 *
 *   fg-infer -m STORE -p PROMPT                      print a continuation
 *   fg-infer -m STORE --input IN.jsonl --output OUT.jsonl [--resume]   a resumable batch job
 *   fg-infer -m STORE --prompt-len N --gen-len N     synthetic prompts (benchmarks)
 *   fg-infer ppl -m STORE --text FILE [--window N]   perplexity
 *   fg-infer -m STORE --dry-run [...]                the memory plan, nothing run
 *   fg-infer calibrate [--calibration FILE] [--quick] measure this machine for --policy auto
 *   mpirun -np N fg-infer ...                        the same run as a pipeline of N ranks
 *
 * The main parses flags into fg_run_opts and calls the runner library (runner/runner.h). Exit
 * 0 on success, 1 on a runtime error (one line naming the file, flag or prompt at fault), 2 on
 * bad usage (a flag or value that cannot be right, before anything runs).
 *
 * Under mpirun (dist/dist.h, engine/stage.h) rank 0 runs fg_run with the link in its engine
 * options and the other ranks follow (fg_runner_follow); a rank that fails prints its one line,
 * prefixed with its rank, and ends every rank (fg_dist_abort).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "fg_version.h"
#include "runner.h"
#include "runner_follow.h"
#include "tool_args.h"

typedef struct args {
    fg_run_opts r;
    int ppl, calibrate;
    int policy;          /* -1 not given, 0 fixed, 1 auto */
    int placement;       /* --percent, --gpu-batch-size or --num-gpu-batches given */
    int cpu_cache;       /* --cpu-cache-compute[=true|false]: 1, 0; -1 not given */
    uint32_t gen_len;
    const char *trace;
    double dist_timeout;  /* --dist-timeout: the pipeline's watchdog */
    const char *sampling; /* the first of --top-k, --top-p, --seed given (NULL: none) */
} args;

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

/* A usage error: one line, exit 2. */

static void usage(FILE *f)
{
    fputs("usage: fg-infer -m STORE (-p PROMPT | --input IN.jsonl --output OUT.jsonl [--resume]\n"
          "                | --prompt-len N --gen-len N) [options]\n"
          "       fg-infer ppl -m STORE --text FILE [--window N] [--max-tokens N] [options]\n"
          "       fg-infer calibrate [--calibration FILE] [--quick] [--threads N]\n"
          "generation:   --max-new-tokens N (32)  --temperature F (0 = greedy)  --top-k N\n"
          "              --top-p F  --seed N (--top-k, --top-p, --seed act from --temperature\n"
          "              above 0)  --stop STR (repeatable)  --ignore-eos (always\n"
          "              max-new-tokens; --prompt-len runs always do, as FlexGen's benchmark)\n"
          "prompts:      encoded as transformers' tokenizer(text): special tokens written in\n"
          "              the text are matched, BOS added as the tokenizer's post-processor does;\n"
          "              --no-special-in-prompt splits special tokens' text as ordinary text\n"
          "jobs:         each input line {\"id\", \"prompt\", \"max_new_tokens\", \"stop\", \"meta\"};\n"
          "              a line that cannot fit the context gets an \"error\" result line and\n"
          "              the job goes on; --prompt-ids adds the prompt's ids to each result;\n"
          "              --input - reads standard input (a pipe or a file); an input with\n"
          "              no prompt is an error (exit 1), never a run of 0; results come a\n"
          "              block at a time, so not always in input order (ids as given, meta\n"
          "              echoed); Ctrl-C stops after the block and prints the --resume command\n"
          "placement:    --percent WG WC CG CC HG HC (FlexGen: GPU and CPU percentages of\n"
          "              weights, KV cache, activations; the rest goes to disk)\n"
          "              --ram-budget SIZE (at most the RAM available now)  --gpu-batch-size N\n"
          "              --num-gpu-batches N  --schedule zigzag|row  --overlap / --no-overlap\n"
          "              --sep-layer[=true|false]  --cpu-cache-compute[=true|false]\n"
          "              --max-context N\n"
          "              --experts routed|all (a mixture of experts' weights off the GPU\n"
          "              and RAM: read only the experts a step's tokens chose, or all)\n"
          "policy:       --policy auto|fixed (auto, the default without --percent,\n"
          "              --gpu-batch-size or --num-gpu-batches: FlexGen's cost model and LP\n"
          "              search over block and placement (and the 4-bit cache with\n"
          "              --allow-lossy); with a device\n"
          "              its GPU share too, priced by a measurement of the device at start)\n"
          "              --calibration FILE (default $XDG_CACHE_HOME/fg/calibration.json)\n"
          "              --max-block N (auto: at most N sequences a block)  --num-prompts N\n"
          "              (--prompt-len runs: the job's prompts; auto picks the block within it)\n"
          "              --allow-lossy (auto may choose the 4-bit KV cache; without it, only\n"
          "              --compress-cache, --compress-weight, --attn-sparsity turn them on)\n"
          "compression:  --compress-cache (4-bit KV cache)  --attn-sparsity F (keep the top F of\n"
          "              past tokens)  --compress-weight (4-bit weights: the store's, or\n"
          "              quantized at load from an F16 store into a temporary store)\n"
          "sizes:        SIZE is bytes with K, M, G or T, binary whichever way it is written:\n"
          "              512M = 512MB = 512MiB = 512 x 2^20 bytes, 1G = 1GB = 1GiB (as free -h\n"
          "              and ls -h count); printed as MiB and GiB\n"
          "other:        --threads N  --trace FILE (Chrome trace events)  --no-verify  --quiet\n"
          "              --version (the commit it was built from, the build's features)\n"
          "              --dry-run (print the memory plan of the run these flags make, and\n"
          "              stop; nothing is allocated)\n"
          "              --compute int8|f32|f16 (int8, the default: integer dot products on\n"
          "              4-bit/8-bit weights grouped along the input axis, fg-convert --group-axis\n"
          "              1; f32: those weights decoded to f32; F16/BF16/F32 weights are f32\n"
          "              either way; f16: 16-bit GEMM inputs, f32 sums, on --backend cuda)\n"
          "              --offload-dir DIR (the KV cache's disk file; default $TMPDIR or /tmp)\n"
          "device:       --backend cpu|sim|cuda (sim: a simulated GPU on the CPU)\n"
          "              --gpu-budget SIZE (device memory; default: CUDA's free memory less\n"
          "              1 GiB, sim 1G)  --sim-link GBPS (the simulated link's bandwidth)\n"
          "              --cpu-cache-compute[=true|false] (with a device: attention on the\n"
          "              CPU where the KV cache is in RAM; not given: --policy auto picks\n"
          "              where it predicts faster, --policy fixed the device)\n"
          "prefix cache: --prefix-cache DIR (prompt prefixes' KV rows kept in a store there,\n"
          "              loaded instead of computed; shared prefixes of a job computed once)\n"
          "              --prefix-cache-budget SIZE (least recently used pages evicted past it)\n"
          "              --prefix-page-tokens N (tokens a cache page, 16; fixed per cache)\n"
          "pipeline:     mpirun -np N fg-infer ... (N ranks, layers split between them; each\n"
          "              rank's --ram-budget and --threads are its own)  --dist-timeout S\n"
          "              (a peer silent for S seconds is dead or stuck: 300)  --micro-batch N\n"
          "              (batches of gbs sequences a micro-batch holds: ceil(ngb / ranks))\n",
          f);
}

/* FlexGen's --percent: six percentages; what GPU and CPU leave goes to disk. */
static void parse_percent(args *a, char **argv, int *optind_io, int argc)
{
    double v[6];
    int i0 = *optind_io - 1, eq = argv[i0] != optarg; /* --percent=WG WC ...: WG is in argv[i0] */
    for (int i = 0; i < 6; i++) {
        if (i0 + i >= argc)
            ta_die("--percent needs 6 numbers (WG WC CG CC HG HC)");
        if (i == 0 && eq)
            v[0] = ta_float("--percent", optarg);
        else
            v[i] = ta_float("--percent", argv[i0 + i]);
        if (v[i] < 0 || v[i] > 100)
            ta_die("--percent %s: each number is a percentage in [0, 100]",
                i == 0 && eq ? optarg : argv[i0 + i]);
    }
    *optind_io = i0 + 6;
    double *dst[3] = {a->r.eo.policy.frac.w, a->r.eo.policy.frac.c, a->r.eo.policy.frac.h};
    const char *what[3] = {"weights", "KV cache", "activations"};
    for (int k = 0; k < 3; k++) {
        if (v[2 * k] + v[2 * k + 1] > 100)
            ta_die("--percent: the %s percentages %g + %g exceed 100", what[k], v[2 * k],
                v[2 * k + 1]);
        dst[k][0] = v[2 * k] / 100;
        dst[k][1] = v[2 * k + 1] / 100;
        dst[k][2] = 1 - dst[k][0] - dst[k][1];
    }
    a->r.eo.policy.have_fractions = 1;
}

enum {
    O_INPUT = 256, O_OUTPUT, O_RESUME, O_MAXNEW, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_STOP,
    O_PERCENT, O_GBS, O_NGB, O_SCHED, O_EXPERTS, O_OVERLAP, O_NO_OVERLAP, O_SEP, O_CPUCACHE, O_BUDGET,
    O_THREADS, O_TRACE, O_VERIFY, O_QUIET, O_TEXT, O_WINDOW, O_MAXTOK, O_PLEN, O_GLEN, O_CTX,
    O_COMPRESS_W, O_COMPRESS_C, O_SPARSITY, O_OFFLOAD, O_NO_VERIFY, O_DRY_RUN,
    O_POLICY, O_CALIB, O_MAXBLOCK, O_QUICK, O_COMPUTE, O_BACKEND, O_GPU_BUDGET, O_SIM_LINK,
    O_PFX, O_PFX_BUDGET, O_PFX_PAGE,
    O_DIST_TIMEOUT, O_MICRO, O_NUM_PROMPTS, O_NO_SPECIAL, O_PROMPT_IDS, O_IGNORE_EOS, O_ALLOW_LOSSY,
};

static void parse_one(args *a, int c, char **argv, int argc)
{
    switch (c) {
    case 'm': a->r.model = ta_once("-m", a->r.model, optarg, 0); break;
    case 'p': a->r.prompt = ta_once("-p", a->r.prompt, optarg, 1); break;
    case O_INPUT: a->r.input = ta_once("--input", a->r.input, optarg, 0); break;
    case O_OUTPUT: a->r.output = ta_once("--output", a->r.output, optarg, 0); break;
    case O_RESUME: a->r.resume = 1; break;
    case O_MAXNEW: a->r.max_new = (uint32_t)ta_uint("--max-new-tokens", optarg, 1, 1 << 20); break;
    case O_TEMP: a->r.sample.temperature = ta_f32("--temperature", optarg); break;
    case O_TOPK:
        a->r.sample.top_k = (uint32_t)ta_uint("--top-k", optarg, 0, 1 << 30);
        a->sampling = a->sampling ? a->sampling : "--top-k";
        break;
    case O_TOPP:
        a->r.sample.top_p = ta_f32("--top-p", optarg);
        a->sampling = a->sampling ? a->sampling : "--top-p";
        break;
    case O_SEED:
        a->r.sample.seed = ta_uint("--seed", optarg, 0, UINT64_MAX);
        a->sampling = a->sampling ? a->sampling : "--seed";
        break;
    case O_STOP:
        if (a->r.n_stops == FG_RUN_MAX_STOPS || !*optarg)
            ta_die("--stop: at most %d non-empty strings", FG_RUN_MAX_STOPS);
        a->r.stops[a->r.n_stops++] = optarg;
        break;
    case O_PERCENT: parse_percent(a, argv, &optind, argc); a->placement = 1; break;
    case O_GBS:
        a->r.eo.policy.gbs = (uint32_t)ta_uint("--gpu-batch-size", optarg, 1, 4096);
        a->placement = 1;
        break;
    case O_NGB:
        a->r.eo.policy.ngb = (uint32_t)ta_uint("--num-gpu-batches", optarg, 1, 4096);
        a->placement = 1;
        break;
    case O_POLICY:
        if (strcmp(optarg, "auto") && strcmp(optarg, "fixed"))
            ta_die("--policy %s: expected auto or fixed", optarg);
        a->policy = !strcmp(optarg, "auto");
        break;
    case O_CALIB: a->r.calibration = optarg; break;
    case O_MAXBLOCK: a->r.max_block = (uint32_t)ta_uint("--max-block", optarg, 1, 256); break;
    case O_QUICK: a->r.calibrate_quick = 1; break;
    case O_SCHED:
        if (strcmp(optarg, "zigzag") && strcmp(optarg, "row"))
            ta_die("--schedule %s: expected zigzag or row", optarg);
        a->r.eo.policy.schedule = !strcmp(optarg, "row") ? FG_SCHEDULE_ROW : FG_SCHEDULE_ZIGZAG;
        break;
    case O_EXPERTS:
        if (strcmp(optarg, "routed") && strcmp(optarg, "all"))
            ta_die("--experts %s: expected routed or all", optarg);
        a->r.eo.policy.experts = !strcmp(optarg, "all") ? FG_EXPERTS_ALL : FG_EXPERTS_ROUTED;
        break;
    case O_OVERLAP: a->r.eo.policy.overlap = 1; break;
    case O_NO_OVERLAP: a->r.eo.policy.overlap = 0; break;
    case O_SEP:
        if (optarg && strcmp(optarg, "true") && strcmp(optarg, "false"))
            ta_die("--sep-layer %s: expected true or false", optarg);
        a->r.eo.policy.sep_layer = !optarg || !strcmp(optarg, "true");
        break;
    case O_CPUCACHE: /* the CPU backend: always so */
        if (optarg && strcmp(optarg, "true") && strcmp(optarg, "false"))
            ta_die("--cpu-cache-compute %s: expected true or false", optarg);
        a->cpu_cache = !optarg || !strcmp(optarg, "true");
        break;
    case O_BACKEND:
        if (strcmp(optarg, "cpu") && strcmp(optarg, "sim") && strcmp(optarg, "cuda"))
            ta_die("--backend %s: expected cpu, sim or cuda", optarg);
        a->r.eo.backend = !strcmp(optarg, "cuda") ? FG_BACKEND_CUDA
                        : !strcmp(optarg, "sim") ? FG_BACKEND_SIM : FG_BACKEND_CPU;
        break;
    case O_GPU_BUDGET: a->r.eo.gpu_budget = ta_size("--gpu-budget", optarg); break;
    case O_SIM_LINK:
        a->r.eo.sim_link_gbps = ta_float("--sim-link", optarg);
        if (!(a->r.eo.sim_link_gbps > 0))
            ta_die("--sim-link %s: GB/s of the simulated link, above 0", optarg);
        break;
    case O_BUDGET: a->r.eo.ram_budget = ta_size("--ram-budget", optarg); break;
    case O_THREADS: a->r.eo.threads = (int)ta_uint("--threads", optarg, 1, 1024); break;
    case O_TRACE: a->trace = ta_once("--trace", a->trace, optarg, 0); break;
    case O_VERIFY: a->r.eo.no_verify = 0; break; /* the default */
    case O_NO_VERIFY: a->r.eo.no_verify = 1; break;
    case O_DRY_RUN: a->r.mode = FG_RUN_DRY; break;
    case O_COMPUTE:
        if (strcmp(optarg, "f32") && strcmp(optarg, "int8") && strcmp(optarg, "f16"))
            ta_die("--compute %s: expected f32, int8 or f16", optarg);
        a->r.eo.compute = !strcmp(optarg, "int8") ? FG_COMPUTE_INT8
                        : !strcmp(optarg, "f16") ? FG_COMPUTE_F16 : FG_COMPUTE_F32;
        break;
    case O_QUIET: a->r.quiet = 1; break;
    case O_TEXT: a->r.text = ta_once("--text", a->r.text, optarg, 0); break;
    case O_WINDOW: a->r.window = (uint32_t)ta_uint("--window", optarg, 2, 1 << 20); break;
    case O_MAXTOK: a->r.max_tokens = ta_uint("--max-tokens", optarg, 1, UINT64_MAX); break;
    case O_PLEN: a->r.prompt_len = (uint32_t)ta_uint("--prompt-len", optarg, 1, 1 << 20); break;
    case O_GLEN: a->gen_len = (uint32_t)ta_uint("--gen-len", optarg, 1, 1 << 20); break;
    case O_CTX: a->r.eo.max_ctx = (uint32_t)ta_uint("--max-context", optarg, 2, 1 << 20); break;
    case O_COMPRESS_W: a->r.eo.policy.compress_weight = 1; break;
    case O_COMPRESS_C: a->r.eo.policy.compress_cache = 1; break;
    case O_OFFLOAD: a->r.eo.offload_dir = optarg; break;
    case O_PFX: a->r.prefix_cache = ta_once("--prefix-cache", a->r.prefix_cache, optarg, 0); break;
    case O_PFX_BUDGET: a->r.prefix_budget = ta_size("--prefix-cache-budget", optarg); break;
    case O_PFX_PAGE:
        a->r.prefix_page_tokens = (uint32_t)ta_uint("--prefix-page-tokens", optarg, 1, 4096);
        break;
    case O_SPARSITY:
        a->r.eo.policy.attn_sparsity = ta_f32("--attn-sparsity", optarg);
        if (!(a->r.eo.policy.attn_sparsity > 0 && a->r.eo.policy.attn_sparsity <= 1))
            ta_die("--attn-sparsity %s: the fraction of past tokens kept, in (0, 1]", optarg);
        break;
    case O_DIST_TIMEOUT:
        a->dist_timeout = ta_float("--dist-timeout", optarg);
        if (!(a->dist_timeout > 0))
            ta_die("--dist-timeout %s: seconds, more than 0", optarg);
        break;
    case O_MICRO:
        a->r.eo.micro_batch = (uint32_t)ta_uint("--micro-batch", optarg, 1, 4096);
        break;
    case O_NO_SPECIAL: a->r.no_special_in_prompt = 1; break;
    case O_NUM_PROMPTS:
        a->r.num_prompts = (uint32_t)ta_uint("--num-prompts", optarg, 1, 1u << 30);
        break;
    case O_PROMPT_IDS: a->r.prompt_ids = 1; break;
    case O_IGNORE_EOS: a->r.ignore_eos = 1; break;
    case O_ALLOW_LOSSY: a->r.allow_lossy = 1; break;
    case 'h': usage(stdout); exit(0);
    default:
        ta_die("bad option or missing value: %s (see fg-infer --help)", ta_bad_opt(argv));
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
        {"schedule", required_argument, NULL, O_SCHED},
        {"experts", required_argument, NULL, O_EXPERTS}, {"overlap", no_argument, NULL, O_OVERLAP},
        {"no-overlap", no_argument, NULL, O_NO_OVERLAP}, {"sep-layer", optional_argument, NULL, O_SEP},
        {"cpu-cache-compute", optional_argument, NULL, O_CPUCACHE},
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
        {"prefix-cache", required_argument, NULL, O_PFX},
        {"prefix-cache-budget", required_argument, NULL, O_PFX_BUDGET},
        {"prefix-page-tokens", required_argument, NULL, O_PFX_PAGE},
        {"no-verify", no_argument, NULL, O_NO_VERIFY}, {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"policy", required_argument, NULL, O_POLICY},
        {"compute", required_argument, NULL, O_COMPUTE},
        {"backend", required_argument, NULL, O_BACKEND},
        {"gpu-budget", required_argument, NULL, O_GPU_BUDGET},
        {"sim-link", required_argument, NULL, O_SIM_LINK},
        {"calibration", required_argument, NULL, O_CALIB},
        {"max-block", required_argument, NULL, O_MAXBLOCK}, {"quick", no_argument, NULL, O_QUICK},
        {"dist-timeout", required_argument, NULL, O_DIST_TIMEOUT},
        {"micro-batch", required_argument, NULL, O_MICRO},
        {"no-special-in-prompt", no_argument, NULL, O_NO_SPECIAL},
        {"num-prompts", required_argument, NULL, O_NUM_PROMPTS},
        {"prompt-ids", no_argument, NULL, O_PROMPT_IDS},
        {"ignore-eos", no_argument, NULL, O_IGNORE_EOS},
        {"allow-lossy", no_argument, NULL, O_ALLOW_LOSSY},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->cpu_cache = -1;
    a->r.max_new = 32;
    a->r.sample.top_p = 1.0f;
    a->r.eo.policy = fg_policy_default();
    a->r.eo.compute = FG_COMPUTE_INT8; /* README "Accuracy of the compressions": within 0.03% */
    a->policy = -1;
    a->dist_timeout = 300;
    if (argc > 1 && (!strcmp(argv[1], "ppl") || !strcmp(argv[1], "calibrate"))) {
        a->ppl = !strcmp(argv[1], "ppl");
        a->calibrate = !a->ppl;
        argv++;
        argc--;
    }
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:h", opts, NULL)) != -1)
        parse_one(a, c, argv, argc);
    if (optind != argc)
        ta_die("unexpected argument '%s' (see --help)", argv[optind]);
    if (a->policy == 1 && a->placement)
        ta_die("--policy auto chooses the placement: drop --percent, --gpu-batch-size and "
            "--num-gpu-batches, or use --policy fixed");
    if (a->r.eo.backend != FG_BACKEND_CPU) { /* FlexGen's: on the device unless asked */
        a->r.eo.policy.cpu_attention = a->cpu_cache == 1;
        a->r.attn_search = a->cpu_cache < 0; /* --policy auto: where it predicts faster */
    } else if (a->cpu_cache == 0) {
        ta_die("--cpu-cache-compute=false needs a device (--backend cuda or sim): the CPU "
            "backend's attention is always on the CPU");
    }
    if (a->r.eo.gpu_budget && a->r.eo.backend == FG_BACKEND_CPU)
        ta_die("--gpu-budget needs a device: --backend cuda or sim");
    if (a->r.eo.sim_link_gbps > 0 && a->r.eo.backend != FG_BACKEND_SIM)
        ta_die("--sim-link belongs to --backend sim");
    a->r.policy_auto = a->policy == 1 || (a->policy == -1 && !a->placement);
    /* auto never turns on a lossy compression by itself: the 4-bit cache only when asked
     * (--compress-cache) or allowed (--allow-lossy); weights and sparsity are never its choice */
    a->r.cache_choice = a->r.eo.policy.compress_cache ? 1 : a->r.allow_lossy ? -1 : 0;
    if (a->r.num_prompts && !a->r.prompt_len)
        ta_die("--num-prompts belongs to --prompt-len/--gen-len runs (a job's prompts are its lines)");
    if (a->calibrate) {
        a->r.mode = FG_RUN_CALIBRATE;
        return;
    }
    if (a->r.calibrate_quick)
        ta_die("--quick belongs to fg-infer calibrate");
    if (!a->ppl && (a->r.text || a->r.window || a->r.max_tokens)) /* not silently ignored */
        ta_die("%s belongs to fg-infer ppl", a->r.text ? "--text" : a->r.window ? "--window"
                                                                            : "--max-tokens");
    if (a->r.resume && !a->r.input)
        ta_die("--resume continues an --input/--output job");
    if (!a->r.model) {
        fprintf(stderr, "fg-infer: -m STORE is required (see fg-infer --help)\n");
        exit(2);
    }
    int dry = a->r.mode == FG_RUN_DRY;
    int modes = !!a->r.prompt + !!a->r.input + !!a->r.prompt_len + a->ppl;
    if (dry && modes > 1)
        ta_die("--dry-run plans one kind of run: give at most one of -p, --input, --prompt-len, ppl");
    if (dry && !modes)
        modes = 1; /* the plan alone: sized for --max-context or the model's context */
    if (modes == 1 && a->r.input && !a->r.output && !dry)
        ta_die("--input %s needs --output FILE (where the results go; - for standard output)",
            a->r.input);
    if (a->r.output && !a->r.input)
        ta_die("--output %s needs --input FILE (the JSONL prompts; - for standard input)",
            a->r.output);
    if (modes != 1 || (a->r.input && !a->r.output && !dry) || (a->r.output && !a->r.input) ||
        (a->ppl && !a->r.text) || (!!a->r.prompt_len != !!a->gen_len && !a->ppl))
        ta_die("choose one of -p PROMPT, --input/--output, --prompt-len/--gen-len, or ppl --text");
    fg_err err;
    if (fg_sample_check(&a->r.sample, &err))
        ta_die("%s", err.msg);
    if (a->sampling && a->r.sample.temperature == 0.0f && !a->r.quiet && !g_rank)
        fprintf(stderr, "fg-infer: warning: %s has no effect at temperature 0 (greedy: the most "
                "likely token every step); give --temperature to sample\n", a->sampling);
    if (a->gen_len)
        a->r.max_new = a->gen_len;
    a->r.eo.trace_path = a->trace;
    if (!dry)
        a->r.mode = a->ppl ? FG_RUN_PPL : a->r.prompt ? FG_RUN_PROMPT
                  : a->r.input ? FG_RUN_JOBS : FG_RUN_SYNTHETIC;
}

/* Several ranks: what a pipeline runs, and its policy. The search plans one process for the
 * whole model: a pipeline places each stage by the default rule in each rank's budget instead. */
static void pipeline_args(args *a, int size)
{
    if (a->calibrate || a->ppl)
        ta_die("%s runs in one process, not under mpirun with %d ranks",
            a->calibrate ? "calibrate" : "ppl", size);
    if (a->r.eo.policy.schedule == FG_SCHEDULE_ROW)
        ta_die("--schedule row: a pipeline of %d ranks runs its own micro-batch schedule", size);
    if (a->policy == 1)
        ta_die("--policy auto plans one process: under mpirun each rank places its own layers in "
            "its own --ram-budget (drop --policy auto)");
    if (a->r.prefix_cache)
        ta_die("--prefix-cache runs in one process: a cache page holds every layer's rows and a "
            "pipeline stage has only its own (not under mpirun with %d ranks)", size);
    a->r.policy_auto = 0;
    /* --backend cuda: ranks on one machine take its GPUs in turn (the rank's index on its
     * node, modulo the GPUs visible) */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    local = local ? local : getenv("MPI_LOCALRANKID");
    a->r.eo.gpu_index = local ? atoi(local) : g_rank;
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
    args a;
    fg_err err;
    fg_dist *d = NULL;
    if (fg_dist_init(&argc, &argv, &d, &err)) {
        fprintf(stderr, "fg-infer: %s\n", err.msg);
        fg_dist_abort(d, 1);
    }
    g_rank = fg_dist_rank(d);
    ta_init("fg-infer", g_rank > 0); /* rank 0 alone says what is wrong with the flags */
    parse_args(&a, argc, argv);
    signal(SIGPIPE, SIG_IGN); /* a closed pipe is a write error with a message, not a kill */
    if (fg_dist_size(d) > 1)
        pipeline_args(&a, fg_dist_size(d));
    fg_dist_set_timeout(d, a.dist_timeout);
    a.r.eo.link = fg_dist_link(d);
    fg_run_report rep = {0};
    char trace[4096];
    if (a.r.mode == FG_RUN_JOBS && g_rank == 0) {
        a.r.interrupt = &g_interrupt;
        signal(SIGINT, on_sigint);
    }
    if (g_rank > 0) {
        a.r.eo.notice = a.r.quiet ? NULL : follower_notice;
        snprintf(trace, sizeof trace, "%s.rank%d", a.trace ? a.trace : "", g_rank);
        a.r.eo.trace_path = a.trace ? trace : NULL; /* rank 0's file, then one per rank */
        if (fg_runner_follow(a.r.model, &a.r.eo, a.r.eo.link, &err))
            fail(d, &err);
    } else if (fg_run(&a.r, &rep, &err)) {
        if (!rep.interrupted)
            fail(d, &err);
        interrupted_line(argc, argv, &a, &rep);
        fg_stage_quit(a.r.eo.link, &err);
        fg_dist_abort(d, 130);
    } else if (fg_stage_quit(a.r.eo.link, &err)) {
        fail(d, &err);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "fg-infer: writing to standard output: %s\n", strerror(errno));
        fg_dist_abort(d, 1);
    }
    link_line(d, &a, &rep);
    if (fg_dist_finish(d, &err)) {
        fprintf(stderr, "fg-infer: %s\n", err.msg);
        return 1;
    }
    return 0;
}
