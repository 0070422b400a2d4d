/* fg-serve - an OpenAI-compatible HTTP server on a store's model (docs/serve.md).
 *
 *   fg-serve -m STORE [--host 127.0.0.1] [--port 8000] [--api-key KEY] [placement, policy ...]
 *
 * The main reads the flags into fg_serve_opts from one table (tool_args.h; the placement,
 * policy, compression and device flags are fg-infer's, with the same names, values and
 * defaults) and calls fg_serve_run (serve/serve.h), which listens, loads the model, answers
 * until SIGTERM or SIGINT, drains the requests it took and returns. Exit 0 after a clean drain,
 * 1 on a runtime error (one line: the port, the store), 2 on bad usage.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_version.h"
#include "serve.h"
#include "tool_args.h"
#include "tool_engine_args.h"

typedef struct args {
    fg_serve_opts s;
    uint32_t port;
    const char *placement; /* the first of --percent, --gpu-batch-size, --num-gpu-batches */
    int cpu_cache;         /* --cpu-cache-compute: 1, 0; -1 not given */
} args;

static args g_a;
static volatile sig_atomic_t g_stop;

/* SIGTERM / SIGINT: the first drains, a second ends the process at once. */
static void on_stop(int sig)
{
    static const char msg[] = "\nfg-serve: draining (again to stop at once)\n";
    if (g_stop) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop = 1;
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

#define R g_a.s.session.run
#define SECTION(h, text) {.kind = TA_SECTION, .name = h, .help = text}
#define FLAG(n, f, v, h) {.kind = TA_FLAG, .name = n, .dst = &(f), .size = sizeof(f), .val = v, \
                          .help = h}
#define ONCE(n, s, f, a, h) {.kind = TA_ONCE, .name = n, .short_name = s, .dst = &(f), .arg = a, \
                             .help = h}
#define STR(n, f, a, h) {.kind = TA_STR, .name = n, .dst = &(f), .arg = a, .help = h}
#define UINT(n, f, l, hi_, a, h) {.kind = TA_UINT, .name = n, .dst = &(f), .size = sizeof(f), \
                                  .lo = l, .hi = hi_, .arg = a, .help = h}
#define SIZE(n, f, h) {.kind = TA_SIZE, .name = n, .dst = &(f), .arg = "SIZE", .help = h}
#define ABOVE(n, f, top, why, a, h) {.kind = TA_FLOAT, .name = n, .dst = &(f), .size = sizeof(f), \
                                     .min = 0, .max = top, .range = why, .arg = a, .help = h}
#define CHOICE(n, f, w, v, a, h) {.kind = TA_CHOICE, .name = n, .dst = &(f), .size = sizeof(f), \
                                  .words = w, .vals = v, .arg = a, .help = h}
#define BOOL(n, f, h) {.kind = TA_BOOL, .name = n, .dst = &(f), .size = sizeof(f), .help = h}

static ta_opt k_opts[] = {
    SECTION("server", "routes: /v1/completions, /v1/chat/completions, /v1/models, /tokenize, "
            "/detokenize, /tokenizer_info, /health, /metrics (docs/serve.md)"),
    ONCE("model", 'm', R.model, "STORE", "the store (a directory fg-convert wrote)"),
    ONCE("host", 0, g_a.s.host, "ADDR", "the address to listen on: 127.0.0.1 (the default, this "
         "machine only), 0.0.0.0 or :: for every interface"),
    UINT("port", g_a.port, 0, 65535, "N", "the port: 8000; 0 picks a free one (the log says "
         "which)"),
    ONCE("api-key", 0, g_a.s.api_key, "KEY", "requests must carry Authorization: Bearer KEY "
         "(/health excepted)"),
    SIZE("max-body", g_a.s.max_body, "a request body's limit: 16M; larger ones get 413"),
    UINT("max-queue", g_a.s.max_queue, 1, 1u << 20, "N", "requests waiting for the engine: 256; "
         "more get 429"),
    UINT("max-conns", g_a.s.max_conns, 1, 65536, "N", "connections at once: 256"),
    UINT("timeout", g_a.s.timeout_s, 1, 86400, "S", "an idle or stalled connection is closed "
         "after S seconds: 30"),
    UINT("batch-wait", g_a.s.batch_wait_ms, 0, 10000, "MS", "before a block smaller than the "
         "last one starts, wait for more requests while they keep coming (MS ms since the last "
         "arrival, 10 x MS at most): 20 (0: never)"),
    FLAG("quiet", g_a.s.quiet, 1, "no notices"),
    SECTION("requests", "a request's own fields (max_tokens, temperature, ...) override these"),
    UINT("max-new-tokens", R.max_new, 1, 1 << 20, "N", "max_tokens when a request gives none: "
         "256"),
    {.kind = TA_FLOAT, .name = "temperature", .dst = &R.sample.temperature, .size = 4,
     .arg = "F", .help = "temperature when a request gives none: 1, as OpenAI's (0: greedy)"},
    {.kind = TA_UINT, .name = "seed", .dst = &R.sample.seed, .size = 8, .lo = 0,
     .hi = UINT64_MAX, .arg = "N", .help = "the sampler's seed when a request gives none (0)"},
    UINT("max-context", R.eo.max_ctx, 2, 1 << 20, "N", "the longest prompt + generation (the "
         "model's positions)"),
    UINT("max-seqs", g_a.s.session.max_seqs, 1, 4096, "N", "sequences a block: requests "
         "arriving together share one (the policy's choice, at most 32)"),
    FLAG("no-special-in-prompt", R.no_special_in_prompt, 1, "split special tokens' text in "
         "prompts as ordinary text"),
    SECTION("placement", "as fg-infer's"),
    {.kind = TA_FN, .name = "percent", .dst = &R.eo.policy, .fn = ta_percent_fn,
     .takes_value = 1, .given = &g_a.placement, .arg = "WG WC CG CC HG HC",
     .help = "FlexGen's: GPU and CPU percentages of weights, KV cache, activations; the rest "
             "goes to disk"},
    SIZE("ram-budget", R.eo.ram_budget, "at most the RAM available now"),
    {.kind = TA_UINT, .name = "gpu-batch-size", .dst = &R.eo.policy.gbs, .size = 4, .lo = 1,
     .hi = 4096, .given = &g_a.placement, .arg = "N", .help = "sequences a GPU batch"},
    {.kind = TA_UINT, .name = "num-gpu-batches", .dst = &R.eo.policy.ngb, .size = 4, .lo = 1,
     .hi = 4096, .given = &g_a.placement, .arg = "N",
     .help = "GPU batches a block (gbs x ngb sequences)"},
    CHOICE("schedule", R.eo.policy.schedule, "zigzag|row", ta_k_sched, NULL, "FlexGen's zig-zag "
           "block schedule (the default) or row by row"),
    FLAG("overlap", R.eo.policy.overlap, 1, "prefetch while computing (the default)"),
    FLAG("no-overlap", R.eo.policy.overlap, 0, "one unit at a time"),
    BOOL("sep-layer", R.eo.policy.sep_layer, "attention and MLP as separate units (true)"),
    CHOICE("experts", R.eo.policy.experts, "routed|all", ta_k_experts, NULL, "a mixture of "
           "experts off the GPU and RAM: read the experts a step chose, or all"),
    SECTION("policy", NULL),
    CHOICE("policy", R.policy_auto, "auto|fixed", ta_k_policy, NULL, "auto (the default without "
           "--percent, --gpu-batch-size, --num-gpu-batches): FlexGen's cost model and LP search"),
    STR("calibration", R.calibration, "FILE", "default $XDG_CACHE_HOME/fg/calibration.json"),
    UINT("max-block", R.max_block, 1, 256, "N", "auto: at most N sequences a block"),
    FLAG("allow-lossy", R.allow_lossy, 1, "auto may choose the 4-bit KV cache"),
    SECTION("compression", NULL),
    FLAG("compress-cache", R.eo.policy.compress_cache, 1, "4-bit KV cache"),
    ABOVE("attn-sparsity", R.eo.policy.attn_sparsity, 1, "the fraction of past tokens kept, "
          "in (0, 1]", "F", "keep the top F of past tokens"),
    FLAG("compress-weight", R.eo.policy.compress_weight, 1, "4-bit weights"),
    SECTION("other", NULL),
    UINT("threads", R.eo.threads, 1, 1024, "N", "compute threads (the CPUs online)"),
    FLAG("verify", R.eo.no_verify, 0, "check chunk checksums as they are read (the default)"),
    FLAG("no-verify", R.eo.no_verify, 1, "skip that"),
    CHOICE("compute", R.eo.compute, "f32|int8|f16|bf16", ta_k_compute, "int8|f32|f16|bf16",
           "as fg-infer's "
           "(int8, the default)"),
    STR("offload-dir", R.eo.offload_dir, "DIR", "the KV cache's disk file; default $TMPDIR or "
        "/tmp"),
    {.kind = TA_NOTE, .name = "version", .help = "the commit it was built from"},
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    SECTION("device", NULL),
    CHOICE("backend", R.eo.backend, "cpu|sim|cuda", ta_k_backend, NULL, "sim: a simulated GPU on "
           "the CPU"),
    SIZE("gpu-budget", R.eo.gpu_budget, "device memory; default: CUDA's free memory less 1 GiB"),
    ABOVE("sim-link", R.eo.sim_link_gbps, INFINITY, "GB/s of the simulated link, above 0",
          "GBPS", "the simulated link's bandwidth"),
    BOOL("cpu-cache-compute", g_a.cpu_cache, "with a device: attention on the CPU where the KV "
         "cache is in RAM"),
    SECTION("prefix cache", NULL),
    ONCE("prefix-cache", 0, R.prefix_cache, "DIR", "prompt prefixes' KV rows kept there, loaded "
         "instead of computed"),
    SIZE("prefix-cache-budget", R.prefix_budget, "least recently used pages evicted past it"),
    {0},
};

static const ta_cmd k_cmd = {
    "fg-serve",
    "usage: fg-serve -m STORE [--host 127.0.0.1] [--port 8000] [--api-key KEY] [options]\n",
    k_opts, "bad option or missing value:", 0, NULL, NULL,
};

static void parse_args(args *a, int argc, char **argv)
{
    a->cpu_cache = -1;
    a->port = 8000;
    a->s.batch_wait_ms = 20;
    a->s.session.run.max_new = 256;
    a->s.session.run.sample.top_p = 1.0f;
    a->s.session.run.sample.temperature = 1.0f; /* OpenAI's default */
    a->s.session.run.eo.policy = fg_policy_default();
    a->s.session.run.eo.compute = FG_COMPUTE_INT8;
    a->s.session.run.policy_auto = -1;
    int first = ta_parse(&k_cmd, argc, argv);
    if (first != argc)
        ta_die("unexpected argument '%s' (see --help)", argv[first]);
    if (!a->s.session.run.model) {
        fprintf(stderr, "fg-serve: -m STORE is required (see fg-serve --help)\n");
        exit(2);
    }
    fg_run_opts *r = &a->s.session.run;
    if (r->sample.temperature < 0)
        ta_die("--temperature %g: 0 (greedy) or above", (double)r->sample.temperature);
    ta_engine_check(&r->eo);
    if (r->eo.backend != FG_BACKEND_CPU) {
        r->eo.policy.cpu_attention = a->cpu_cache == 1;
        r->attn_search = a->cpu_cache < 0;
    } else if (a->cpu_cache == 0) {
        ta_die("--cpu-cache-compute=false needs a device (--backend cuda or sim)");
    }
    r->placement_fixed = a->placement != NULL;
    r->cache_choice = r->eo.policy.compress_cache ? 1 : r->allow_lossy ? -1 : 0;
    r->quiet = 1; /* no per-block progress lines from the runner */
    a->s.port = (uint16_t)a->port;
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-serve"))
        return 0;
    ta_init("fg-serve", 0);
    parse_args(&g_a, argc, argv);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    g_a.s.stop = &g_stop;
    fg_err err;
    if (fg_serve_run(&g_a.s, &err)) {
        fprintf(stderr, "fg-serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
