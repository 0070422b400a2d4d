/* dump_logits.c - what the engine computes for given token ids, as raw float32 files, for
 * tests/fixtures/sweep_configs.py to compare with transformers (a developer's tool, not a test:
 * it needs no fixture and checks nothing itself).
 *
 *   dump_logits STORE IDS.txt OUT PLACEMENT NGEN [f32|int8]
 *
 * IDS.txt: one sequence of token ids a line (at most 16 lines of 1 to 200 ids). PLACEMENT: ram
 * (the default rule), disk (weights, KV cache and activations homed on disk), q4cache (4-bit KV
 * cache), sim (the simulated device: half the weights, the cache and the activations on it).
 * The last argument is the Linear arithmetic (default f32; int8 as fg-infer's default for Q4/Q8
 * weights grouped along the input axis).
 * Writes, all float32 little-endian with V = the model's vocabulary:
 *   OUT.logits   every sequence's logits [len][V], one after another, all sequences in one block
 *                (fg_engine_logits with every window at once)
 *   OUT.single   the same, each sequence alone in its block
 *   OUT.gen      NGEN greedy tokens per sequence, all in one block: a line of ids each (fewer
 *                when it stopped at EOS)
 *   OUT.steps    [n][NGEN][V]: the logits each generated token was chosen from (zeros after EOS)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

enum { MAX_SEQ = 16, MAX_LEN = 200, MAX_GEN = 64 };

typedef struct steps {
    float *buf;
    uint32_t V, ngen;
} steps;

static void on_logits(void *ctx, uint32_t seq, uint32_t n_out, const float *l, uint32_t vocab)
{
    steps *s = ctx;
    if (vocab == s->V && n_out < s->ngen)
        memcpy(s->buf + ((size_t)seq * s->ngen + n_out) * vocab, l, (size_t)vocab * 4);
}

static int die(const char *what, const char *msg)
{
    fprintf(stderr, "dump_logits: %s: %s\n", what, msg);
    return 1;
}

static int put(const char *out, const char *ext, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", out, ext);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    ok = f && !fclose(f) && ok;
    return ok ? 0 : die(path, "cannot write");
}

int main(int argc, char **argv)
{
    if (argc != 6 && !(argc == 7 && (!strcmp(argv[6], "f32") || !strcmp(argv[6], "int8"))))
        return die("usage", "dump_logits STORE IDS.txt OUT ram|disk|q4cache|sim NGEN [f32|int8]");
    const char *mode = argv[4];
    uint32_t ngen = (uint32_t)strtoul(argv[5], NULL, 10);
    static int32_t ids[MAX_SEQ][MAX_LEN];
    uint32_t lens[MAX_SEQ], n = 0, total = 0;
    FILE *f = fopen(argv[2], "r");
    if (!f)
        return die(argv[2], "cannot open");
    char line[8192];
    while (n < MAX_SEQ && fgets(line, sizeof line, f)) {
        char *p = line, *e;
        lens[n] = 0;
        for (long v = strtol(p, &e, 10); e != p && lens[n] < MAX_LEN; v = strtol(p, &e, 10)) {
            ids[n][lens[n]++] = (int32_t)v;
            p = e;
        }
        total += lens[n];
        n += lens[n] > 0;
    }
    fclose(f);
    if (!n || ngen > MAX_GEN)
        return die(argv[2], "no sequence, or NGEN over 64");
    fg_engine_opts o = {0};
    o.policy = fg_policy_default();
    o.threads = 1;
    o.compute = argc == 7 && !strcmp(argv[6], "int8") ? FG_COMPUTE_INT8 : FG_COMPUTE_F32;
    o.max_ctx = MAX_LEN + MAX_GEN;
    o.policy.gbs = n, o.policy.ngb = 1; /* every sequence in one block */
    if (!strcmp(mode, "disk")) {
        o.policy.have_fractions = 1;
        o.policy.frac = (fg_pager_policy){{0, 0, 1}, {0, 0, 1}, {0, 0, 1}};
    } else if (!strcmp(mode, "q4cache")) {
        o.policy.compress_cache = 1;
    } else if (!strcmp(mode, "sim")) {
        o.backend = FG_BACKEND_SIM;
        o.policy.have_fractions = 1;
        o.policy.frac = (fg_pager_policy){{0.5, 0.5, 0}, {1, 0, 0}, {1, 0, 0}};
    } else if (strcmp(mode, "ram")) {
        return die(mode, "not a placement (ram, disk, q4cache, sim)");
    }
    fg_store *s;
    fg_model *md;
    fg_engine *eng;
    fg_err err;
    if (fg_store_open(argv[1], FG_STORE_RDONLY, NULL, &s, &err) || fg_model_open(s, &md, &err))
        return die(argv[1], err.msg);
    fg_hparams hp = *fg_model_hparams(md);
    if (o.max_ctx > hp.max_pos)
        o.max_ctx = hp.max_pos;
    if (fg_engine_open(md, &o, &eng, &err))
        return die(argv[1], err.msg);
    uint32_t V = hp.vocab_size;
    const int32_t *win[MAX_SEQ];
    for (uint32_t i = 0; i < n; i++)
        win[i] = ids[i];
    /* all windows at once into [n][MAX_LEN][V], packed in place below (offsets only shrink) */
    float *lg = calloc((size_t)n * MAX_LEN * V, 4), *one = calloc((size_t)total * V, 4);
    steps st = {calloc((size_t)n * (ngen ? ngen : 1) * V, 4), V, ngen};
    if (!lg || !one || !st.buf)
        return die("memory", "out of memory");
    double nll = 0;
    uint64_t cnt = 0;
    if (fg_engine_logits(eng, win, lens, n, &nll, &cnt, lg, (size_t)MAX_LEN * V, &err))
        return die("logits", err.msg);
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        memmove(lg + off, lg + (size_t)i * MAX_LEN * V, (size_t)lens[i] * V * 4);
        if (fg_engine_logits(eng, &win[i], &lens[i], 1, &nll, &cnt, one + off,
                             (size_t)lens[i] * V, &err))
            return die("logits", err.msg);
        off += (size_t)lens[i] * V;
    }
    int rc = put(argv[3], "logits", lg, off * 4) || put(argv[3], "single", one, off * 4);
    if (!rc && ngen) {
        static int32_t out[MAX_SEQ][MAX_GEN];
        fg_gen_seq q[MAX_SEQ];
        for (uint32_t i = 0; i < n; i++)
            q[i] = (fg_gen_seq){ids[i], lens[i], ngen, {0, 0, 1, 0}, i, out[i], 0, 0};
        fg_gen_hooks hooks = {0};
        hooks.logits = on_logits;
        hooks.logits_ctx = &st;
        fg_gen_stats gs;
        if (fg_engine_generate(eng, q, n, &hooks, &gs, &err))
            return die("generate", err.msg);
        char text[MAX_SEQ * MAX_GEN * 12] = "";
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            for (uint32_t t = 0; t < q[i].n_out; t++)
                k += (size_t)snprintf(text + k, sizeof text - k, "%s%d", t ? " " : "", out[i][t]);
            k += (size_t)snprintf(text + k, sizeof text - k, "\n");
        }
        rc = put(argv[3], "gen", text, k) ||
             put(argv[3], "steps", st.buf, (size_t)n * ngen * V * 4);
    }
    free(lg);
    free(one);
    free(st.buf);
    if (fg_engine_close(eng, &err))
        rc = die("close", err.msg);
    fg_model_close(md);
    fg_store_close(s);
    return rc;
}
