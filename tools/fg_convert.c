/* fg-convert - import a checkpoint into a store, or synthesize one (see docs/usage.md).
 *
 *   fg-convert CHECKPOINT_DIR|FILE.gguf -o STORE [--compress-weight] [--weight-bits 4|8]
 *              [--group-size N] [--group-axis 0|1] [--tokenizer DIR] [--quiet]
 *   fg-convert STORE -o STORE2 --compress-weight [...]   (a store re-encoded, e.g. to 4-bit)
 *   fg-convert synth --model opt-1.3b -o STORE [--seed N] --tokenizer DIR [...]
 *
 * The flags come from one table (tool_args.h); the rules between them are the convert
 * library's (fg_convert_opts_check), but for the synth word's own. Exit 0 on success, 1 with a
 * one-line error naming the file and tensor, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "convert_opts.h"
#include "fg_version.h"
#include "fg_progress.h"
#include "model.h"
#include "tool_args.h"

static volatile sig_atomic_t g_signal;
static void die_of_signal(fg_progress *bar);

static void progress(void *ctx, uint64_t done, uint64_t total)
{
    fg_progress *p = ctx;
    if (g_signal)
        die_of_signal(p);
    p->total = total;
    fg_progress_update(p, done);
}

/* ---- SIGINT, SIGTERM, SIGHUP: no half store left behind ----
 * The store a conversion creates is complete only once its batch commits; until then it has no
 * config and fg-infer calls it unfinished. An interrupted conversion removes what it created
 * (the directory, or its contents when -o was an existing empty directory), says so in one
 * line, and dies of the signal. The handler only records it: the removal runs from the progress
 * callback, which the conversion calls between chunks (single-threaded), never inside a write. */
static const char *g_out;
static int g_out_existed;

static void on_signal(int sig) { g_signal = sig; }

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    return ftw->level == 0 && g_out_existed ? 0 : remove(p);
}

static void die_of_signal(fg_progress *bar)
{
    int sig = g_signal;
    fg_progress_end(bar);
    if (g_out)
        nftw(g_out, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fprintf(stderr, "fg-convert: interrupted (%s)%s%s%s\n", strsignal(sig),
            g_out ? ": the unfinished store " : "", g_out ? g_out : "", g_out ? " was removed" : "");
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(128 + sig);
}

static void catch_signals(const char *out)
{
    struct stat st;
    struct sigaction sa;
    DIR *d = opendir(out);
    struct dirent *de;
    int empty = 1;
    while (d && empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    if (d)
        closedir(d);
    g_out_existed = stat(out, &st) == 0;
    g_out = !g_out_existed || (d && empty) ? out : NULL; /* never what was there before */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second one kills at once, e.g. a conversion stuck on NFS */
    sigemptyset(&sa.sa_mask);
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) { /* one ignored by whoever started us (nohup, &) stays so */
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}

/* ---- the flags: one table (tool_args.h) ---- */

typedef struct args {
    fg_convert_opts o;
    const char *out, *model;
    uint64_t seed;
    const char *seed_given;
    int bits, quiet, synth;
} args;

static args g_a = {.o = {.group_axis = -1}};

static void bits_fn(void *dst, const char *v, int argc, char **argv)
{
    (void)argc, (void)argv;
    int bits = (int)ta_uint("--weight-bits", v, 4, 8);
    if (bits != 4 && bits != 8)
        ta_die("--weight-bits %s: expected 4 or 8", v);
    *(int *)dst = bits;
}

static void chunk_fn(void *dst, const char *v, int argc, char **argv)
{
    (void)argc, (void)argv;
    *(uint64_t *)dst = ta_uint("--chunk-mib", v, 1, 1024) << 20;
}

static void epilog(FILE *f)
{
    char names[2048];
    fg_convert_synth_names(names, sizeof names);
    fprintf(f, "synth shapes: %s\n", names);
    fprintf(f, "model families (config.json model_type): %s\n", fg_arch_names());
}

static ta_opt k_opts[] = {
    {.kind = TA_SECTION, .name = "options"},
    {.kind = TA_ONCE, .name = "output", .short_name = 'o', .dst = &g_a.out, .arg = "STORE",
     .help = "the new store (a missing or empty directory)"},
    {.kind = TA_FLAG, .name = "compress-weight", .dst = &g_a.o.compress_weight,
     .size = sizeof(int), .val = 1, .help = "4-bit groups for every tensor of 2+ dims but a "
     "mixture's routers, kept 16-bit"},
    {.kind = TA_FN, .name = "weight-bits", .dst = &g_a.bits, .fn = bits_fn, .takes_value = 1,
     .arg = "4|8", .help = "the groups' code width; 8 implies --compress-weight"},
    {.kind = TA_UINT, .name = "group-size", .dst = &g_a.o.group_size, .size = 4, .lo = 8,
     .hi = 4096, .arg = "N", .help = "values a group (64)"},
    {.kind = TA_UINT, .name = "group-axis", .dst = &g_a.o.group_axis, .size = 4, .lo = 0,
     .hi = 1, .arg = "0|1", .help = "0: output channels"},
    {.kind = TA_ONCE, .name = "tokenizer", .dst = &g_a.o.tokenizer_dir, .arg = "DIR",
     .help = "vocab.json, merges.txt; default: the checkpoint dir"},
    {.kind = TA_FN, .name = "chunk-mib", .dst = &g_a.o.chunk_bytes, .fn = chunk_fn,
     .takes_value = 1, .arg = "N", .help = "MiB a chunk (4)"},
    {.kind = TA_ONCE, .name = "model", .dst = &g_a.model, .arg = "SHAPE",
     .help = "synth: the shape (below)"},
    {.kind = TA_UINT, .name = "seed", .dst = &g_a.seed, .size = 8, .lo = 0, .hi = UINT64_MAX,
     .given = &g_a.seed_given, .arg = "N", .help = "synth: the weights' seed (0)"},
    {.kind = TA_FLAG, .name = "zero-weights", .dst = &g_a.o.zero_weights, .size = sizeof(int),
     .val = 1, .help = "synth: matrices and biases all zero, left as holes in sparse files (no "
     "data written, no disk space): a store of any size for --dry-run plans"},
    {.kind = TA_FLAG, .name = "quiet", .short_name = 'q', .dst = &g_a.quiet, .size = sizeof(int),
     .val = 1, .help = "no progress or report"},
    {.kind = TA_NOTE, .name = "version", .help = "the version and the build's features"},
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {0},
};

static const ta_cmd k_cmd = {
    "fg-convert",
    "usage: fg-convert CHECKPOINT_DIR|FILE.gguf -o STORE [options]\n"
    "       fg-convert STORE -o STORE2 [options]   (an F16 store re-encoded, e.g. to 4-bit)\n"
    "       fg-convert synth --model SHAPE -o STORE --tokenizer DIR [--seed N] [options]\n",
    k_opts, "bad option or missing value:", 0, NULL, epilog,
};

/* The flags, and what would do nothing here (refused, not ignored); returns the checkpoint
 * or store argument (NULL for synth). */
static const char *parse_args(args *a, int argc, char **argv)
{
    a->synth = argc > 1 && !strcmp(argv[1], "synth");
    if (a->synth) {
        argv++;
        argc--;
    }
    int first = ta_parse(&k_cmd, argc, argv);
    if (!a->out || (a->synth ? (!a->model || first != argc) : first != argc - 1))
        ta_die("%s (see fg-convert --help)", !a->out ? "-o STORE is required"
               : a->synth ? "synth needs --model and no other argument"
                          : "give one checkpoint directory");
    if (!a->synth && (a->model || a->seed_given || a->o.zero_weights))
        ta_die("%s belongs to fg-convert synth (see fg-convert --help)",
               a->model ? "--model" : a->seed_given ? "--seed" : "--zero-weights");
    if (a->bits)
        a->o.compress_weight = a->bits;
    else if (a->o.compress_weight)
        a->o.compress_weight = 4;
    fg_err err;
    if (fg_convert_opts_check(&a->o, &err))
        ta_die("%s (see fg-convert --help)", err.msg);
    if (a->synth && !a->o.tokenizer_dir)
        ta_die("synth needs --tokenizer DIR (vocab.json, merges.txt)");
    return a->synth ? NULL : argv[first];
}

/* The conversion's one line: tensors, what was skipped, bytes, time, peak RSS. */
static void report(const fg_convert_report *rep, const char *out)
{
    char a[32], b[32], r[32], m[32];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024;
    char skipped[224] = "";
    int k = 0;
    if (rep->skipped)
        k = snprintf(skipped, sizeof skipped, " (%u buffers derived from config.json, such "
                     "as rotary_emb.inv_freq, skipped)", rep->skipped);
    if (rep->unused && k >= 0 && (size_t)k < sizeof skipped)
        snprintf(skipped + k, sizeof skipped - (size_t)k, " (%u tensors of the %s skipped: "
                 "fg runs the %s)", rep->unused,
                 rep->unused_mtp ? "multi-token prediction layers"
                                 : "vision tower and projector",
                 rep->unused_mtp ? "next-token model" : "text model");
    fprintf(stderr, "fg-convert: %u tensors%s, %s read, %s stored in %s (%.1f s, %s/s); "
            "peak RSS %s (%" PRIu64 " bytes)\n",
            rep->tensors, skipped, fg_fmt_bytes((double)rep->source_bytes, a, sizeof a),
            fg_fmt_bytes((double)rep->stored_bytes, b, sizeof b), out, rep->seconds,
            fg_fmt_bytes(rep->seconds > 0 ? (double)rep->stored_bytes / rep->seconds : 0, r,
                         sizeof r), fg_fmt_bytes((double)rss, m, sizeof m), rss);
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-convert"))
        return 0;
    ta_init("fg-convert", 0);
    args *a = &g_a;
    const char *src = parse_args(a, argc, argv);
    fg_progress bar;
    fg_progress_begin(&bar, a->synth ? "synthesizing" : "converting", FG_UNIT_BYTES, 0, a->quiet);
    a->o.progress = progress;
    a->o.progress_ctx = &bar;
    fg_convert_report rep;
    fg_err err;
    char id[4096];
    struct stat st;
    int from_store = src && snprintf(id, sizeof id, "%s/store.id", src) > 0 && stat(id, &st) == 0;
    catch_signals(a->out);
    if (from_store && a->o.tokenizer_dir)
        fprintf(stderr, "fg-convert: --tokenizer is ignored: the store's tokenizer is copied\n");
    int rc = a->synth ? fg_convert_synth(a->model, a->out, a->seed, &a->o, &rep, &err)
             : from_store ? fg_convert_store(src, a->out, &a->o, &rep, &err)
                          : fg_convert_import(src, a->out, &a->o, &rep, &err);
    if (rc && g_signal) /* the conversion removed what it made; say why it stopped */
        die_of_signal(&bar);
    fg_progress_end(&bar);
    if (rc) {
        fprintf(stderr, "fg-convert: %s\n", err.msg);
        return 1;
    }
    if (!a->quiet)
        report(&rep, a->out);
    if (rep.ggml_requant && !a->quiet) /* a second loss the user can avoid */
        fprintf(stderr, "fg-convert: note: %u tensors' Q4_0/Q8_0 blocks were re-quantized into "
                "fg's groups through F16, a second loss (docs/accuracy.md, \"Through GGUF\"); "
                "--group-size 32 --group-axis 1 keeps their blocks exactly\n",
                rep.ggml_requant);
    return 0;
}
