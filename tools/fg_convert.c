/* fg-convert - import a checkpoint into a store, or synthesize one (see docs/usage.md).
 *
 *   fg-convert CHECKPOINT_DIR -o STORE [--compress-weight] [--weight-bits 4|8] [--group-size N]
 *              [--group-axis 0|1]
 *              [--tokenizer DIR] [--quiet]
 *   fg-convert STORE -o STORE2 --compress-weight [...]   (a store re-encoded, e.g. to 4-bit)
 *   fg-convert synth --model opt-1.3b -o STORE [--seed N] --tokenizer DIR [...]
 *
 * Exit 0 on success, 1 with a one-line error naming the file and tensor, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert.h"
#include "fg_version.h"
#include "fg_progress.h"
#include "model.h"
#include "tool_args.h"

static void usage(FILE *f)
{
    fputs("usage: fg-convert CHECKPOINT_DIR -o STORE [options]\n"
          "       fg-convert STORE -o STORE2 [options]   (an F16 store re-encoded, e.g. to 4-bit)\n"
          "       fg-convert synth --model SHAPE -o STORE --tokenizer DIR [--seed N] [options]\n"
          "options: --compress-weight (4-bit groups for every tensor of 2+ dims but a\n"
          "         mixture's routers, kept 16-bit)\n"
          "         --weight-bits 4|8 (the groups' code width; 8 implies --compress-weight)\n"
          "         --group-size N (64)  --group-axis 0|1 (0: output channels)\n"
          "         --tokenizer DIR (vocab.json, merges.txt; default: the checkpoint dir)\n"
          "         --chunk-mib N (4)  --quiet  --version\n",
          f);
    char names[2048];
    fg_convert_synth_names(names, sizeof names);
    fprintf(f, "synth shapes: %s\n", names);
    fprintf(f, "model families (config.json model_type): %s\n", fg_arch_names());
}

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

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-convert"))
        return 0;
    ta_init("fg-convert", 0);
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'}, {"model", required_argument, NULL, 'M'},
        {"seed", required_argument, NULL, 's'}, {"compress-weight", no_argument, NULL, 'c'},
        {"group-size", required_argument, NULL, 'g'}, {"group-axis", required_argument, NULL, 'a'},
        {"weight-bits", required_argument, NULL, 'b'}, {"tokenizer", required_argument, NULL, 't'},
        {"chunk-mib", required_argument, NULL, 'k'},
        {"quiet", no_argument, NULL, 'q'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    fg_convert_opts o = {0, 0, -1, NULL, 0, NULL, NULL};
    const char *out = NULL, *model = NULL;
    uint64_t seed = 0;
    opterr = 0;
    int quiet = 0, c, bits = 0, seed_given = 0, synth = argc > 1 && !strcmp(argv[1], "synth");
    if (synth) {
        argv++;
        argc--;
    }
    while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = ta_once("-o", out, optarg, 0); break;
        case 'M': model = ta_once("--model", model, optarg, 0); break;
        case 's': seed = ta_uint("--seed", optarg, 0, UINT64_MAX); seed_given = 1; break;
        case 'c': o.compress_weight = 1; break;
        case 'b':
            bits = (int)ta_uint("--weight-bits", optarg, 4, 8);
            if (bits != 4 && bits != 8) {
                fprintf(stderr, "fg-convert: --weight-bits %s: expected 4 or 8\n", optarg);
                return 2;
            }
            break;
        case 'g': o.group_size = (uint32_t)ta_uint("--group-size", optarg, 8, 4096); break;
        case 'a': o.group_axis = (int)ta_uint("--group-axis", optarg, 0, 1); break;
        case 't': o.tokenizer_dir = ta_once("--tokenizer", o.tokenizer_dir, optarg, 0); break;
        case 'k': o.chunk_bytes = ta_uint("--chunk-mib", optarg, 1, 1024) << 20; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "fg-convert: bad option or missing value: %s (see fg-convert --help)\n",
                    ta_bad_opt(argv));
            return 2;
        }
    }
    if (!out || (synth ? (!model || optind != argc) : optind != argc - 1)) {
        fprintf(stderr, "fg-convert: %s (see fg-convert --help)\n",
                !out ? "-o STORE is required" : synth ? "synth needs --model and no other argument"
                                                      : "give one checkpoint directory");
        return 2;
    }
    /* flags that would do nothing here are refused, not ignored */
    const char *idle = !synth && model ? "--model" : !synth && seed_given ? "--seed"
                     : !bits && !o.compress_weight && o.group_size ? "--group-size"
                     : !bits && !o.compress_weight && o.group_axis >= 0 ? "--group-axis" : NULL;
    if (idle) {
        fprintf(stderr, "fg-convert: %s %s (see fg-convert --help)\n", idle,
                idle[2] == 'g' ? "needs --compress-weight or --weight-bits"
                               : "belongs to fg-convert synth");
        return 2;
    }
    if (synth && !o.tokenizer_dir) {
        fprintf(stderr, "fg-convert: synth needs --tokenizer DIR (vocab.json, merges.txt)\n");
        return 2;
    }
    if (bits)
        o.compress_weight = bits;
    else if (o.compress_weight)
        o.compress_weight = 4;
    fg_progress bar;
    fg_progress_begin(&bar, synth ? "synthesizing" : "converting", FG_UNIT_BYTES, 0, quiet);
    o.progress = progress;
    o.progress_ctx = &bar;
    fg_convert_report rep;
    fg_err err;
    char id[4096];
    struct stat st;
    int from_store = !synth && snprintf(id, sizeof id, "%s/store.id", argv[optind]) > 0 &&
                     stat(id, &st) == 0;
    catch_signals(out);
    if (from_store && o.tokenizer_dir)
        fprintf(stderr, "fg-convert: --tokenizer is ignored: the store's tokenizer is copied\n");
    int rc = synth ? fg_convert_synth(model, out, seed, &o, &rep, &err)
             : from_store ? fg_convert_store(argv[optind], out, &o, &rep, &err)
                          : fg_convert_import(argv[optind], out, &o, &rep, &err);
    if (rc && g_signal) /* the conversion removed what it made; say why it stopped */
        die_of_signal(&bar);
    fg_progress_end(&bar);
    if (rc) {
        fprintf(stderr, "fg-convert: %s\n", err.msg);
        return 1;
    }
    if (!quiet) {
        char a[32], b[32], r[32], m[32];
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        uint64_t rss = (uint64_t)ru.ru_maxrss * 1024;
        char skipped[224] = "";
        int k = 0;
        if (rep.skipped)
            k = snprintf(skipped, sizeof skipped, " (%u buffers derived from config.json, such "
                         "as rotary_emb.inv_freq, skipped)", rep.skipped);
        if (rep.unused && k >= 0 && (size_t)k < sizeof skipped)
            snprintf(skipped + k, sizeof skipped - (size_t)k, " (%u tensors of the %s skipped: "
                     "fg runs the %s)", rep.unused,
                     rep.unused_mtp ? "multi-token prediction layers"
                                    : "vision tower and projector",
                     rep.unused_mtp ? "next-token model" : "text model");
        fprintf(stderr, "fg-convert: %u tensors%s, %s read, %s stored in %s (%.1f s, %s/s); "
                "peak RSS %s (%" PRIu64 " bytes)\n",
                rep.tensors, skipped, fg_fmt_bytes((double)rep.source_bytes, a, sizeof a),
                fg_fmt_bytes((double)rep.stored_bytes, b, sizeof b), out, rep.seconds,
                fg_fmt_bytes(rep.seconds > 0 ? (double)rep.stored_bytes / rep.seconds : 0, r,
                             sizeof r), fg_fmt_bytes((double)rss, m, sizeof m), rss);
    }
    return 0;
}
