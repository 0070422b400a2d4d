/* test_store_crash.c - crash safety of store/, tested for real.
 *
 * Each trial forks a writer that opens the store (running crash recovery itself) and loops over
 * random operations: batches of tensors (rotated over several weight files; one in six also
 * carries a metadata value over FG_STORE_META_INLINE, a file of its own), KV page writes
 * (copy-on-write rewrites of random keys) and KV frees. The parent SIGKILLs it after a random
 * delay, then checks, first through a read-only handle (no recovery) and then through a
 * writable one (after recovery):
 *   - the store opens and fg_store_verify passes;
 *   - every visible tensor holds exactly the bytes written for its name, and every batch is
 *     visible whole or not at all (names carry the batch size: "b<trial>.<op>.<i>of<n>");
 *   - every visible large metadata value reads back whole (its bytes derive from its first
 *     line, which names its batch) and its batch is visible: no half-visible value;
 *   - every mapped KV page reads back with valid checksums and the payload written for its key
 *     and token range;
 * and every 8th trial also deletes the catalog, reindexes, and compares every answer.
 * The store carries over from trial to trial (a fresh one every 25), so recovery meets states
 * left by earlier crashes.
 *
 * Reproducible: the schedule (delays, operations, sizes) comes from the seed (argv[2] or
 * FG_CRASH_SEED); the instant the kernel delivers SIGKILL is not, so the report counts where
 * the kills landed. Usage: test_store_crash [trials [seed]]. Exit 0 pass, 1 failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store_testlib.h"

enum { PH_OPEN = 0, PH_IMPORT, PH_KV_WRITE, PH_KV_FREE, PH_N };
static const char *ph_name[PH_N] = {"open/recovery", "tensor import", "KV page write", "KV free"};

typedef struct shared {
    volatile int phase;
    volatile uint64_t ops;
} shared;

static shared *g_sh;
static uint64_t g_big_seen; /* large metadata values found whole after kills */
static char g_dir[4096];
static fg_err g_err;

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define FAIL(...) do { fprintf(stderr, "trial %d: ", trial); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)

/* ---- the writer (child) ---- */

/* A large metadata value: "trial T op O n N\n" then bytes derived from that line. */
static uint8_t *big_value(size_t len, int trial, uint64_t op, int n)
{
    uint8_t *v = malloc(len);
    if (!v)
        return NULL;
    int h = snprintf((char *)v, 64, "trial %d op %" PRIu64 " n %d\n", trial, op, n);
    tu_fill(v + h, len - (size_t)h, XXH3_64bits(v, (size_t)h));
    return v;
}

static int op_big_meta(fg_store_batch *b, uint64_t *rng, int trial, uint64_t op, int n)
{
    size_t len = FG_STORE_META_INLINE + 1 + rnd(rng) % 65536;
    uint8_t *v = big_value(len, trial, op, n);
    char key[32];
    snprintf(key, sizeof key, "big.%d", (int)(rnd(rng) % 2));
    int rc = v ? fg_store_batch_meta(b, key, v, len, &g_err) : -1;
    free(v);
    return rc;
}

static int op_import(fg_store *s, uint64_t *rng, int trial, uint64_t op)
{
    int n = 1 + (int)(rnd(rng) % 5);
    fg_store_batch *b;
    if (fg_store_batch_begin(s, &b, &g_err))
        return -1;
    for (int i = 0; i < n; i++) {
        char name[96];
        snprintf(name, sizeof name, "b%d.%" PRIu64 ".%dof%d", trial, op, i, n);
        uint64_t rows = 1 + rnd(rng) % 96;
        if (st_put_tensor(b, name, rows, 64, 8 + rnd(rng) % 24, &g_err)) {
            fg_store_batch_abort(b);
            return -1;
        }
    }
    char key[64], val[64];
    snprintf(key, sizeof key, "cfg.%d", (int)(rnd(rng) % 4));
    snprintf(val, sizeof val, "trial %d op %" PRIu64, trial, op);
    if (fg_store_batch_meta(b, key, val, strlen(val), &g_err) ||
        (rnd(rng) % 6 == 0 && op_big_meta(b, rng, trial, op, n))) {
        fg_store_batch_abort(b);
        return -1;
    }
    return fg_store_batch_commit(b, &g_err);
}

static int op_kv_write(fg_store *s, uint64_t *rng)
{
    static uint8_t bufs[8][4096 - FG_STORE_KV_HEADER_SIZE];
    fg_store_kv_write_req r[8];
    size_t n = 1 + rnd(rng) % 8;
    for (size_t i = 0; i < n; i++) {
        fg_store_kv_key k = {1 + rnd(rng) % 3, (uint32_t)(rnd(rng) % 3), (uint32_t)(rnd(rng) % 4),
                             (uint32_t)(rnd(rng) % 3)};
        uint32_t first = (uint32_t)(rnd(rng) % 1000);
        size_t len = 1 + rnd(rng) % sizeof bufs[0];
        st_kv_fill(bufs[i], len, &k, first);
        r[i] = (fg_store_kv_write_req){k, first, 1 + (uint32_t)(rnd(rng) % 16), FG_CODEC_F16,
                                       bufs[i], len};
    }
    return fg_store_kv_write(s, n, r, NULL, &g_err);
}

static int op_kv_free(fg_store *s, uint64_t *rng)
{
    fg_store_kv_key k = {1 + rnd(rng) % 3, (uint32_t)(rnd(rng) % 3), 0, 0};
    return fg_store_kv_free(s, &k, 1 + (int)(rnd(rng) % 2), NULL, &g_err);
}

static void writer(int trial, uint64_t seed)
{
    uint64_t rng = seed;
    fg_store *s;
    g_sh->phase = PH_OPEN;
    if (fg_store_open(g_dir, 0, NULL, &s, &g_err)) {
        fprintf(stderr, "writer: open: %s\n", g_err.msg);
        _exit(3);
    }
    for (uint64_t op = 0;; op++) {
        uint64_t r = rnd(&rng) % 10;
        int rc;
        if (r < 4) {
            g_sh->phase = PH_IMPORT;
            rc = op_import(s, &rng, trial, op);
        } else if (r < 9) {
            g_sh->phase = PH_KV_WRITE;
            rc = op_kv_write(s, &rng);
        } else {
            g_sh->phase = PH_KV_FREE;
            rc = op_kv_free(s, &rng);
        }
        if (rc) {
            fprintf(stderr, "writer: op %" PRIu64 ": %s\n", op, g_err.msg);
            _exit(4);
        }
        g_sh->ops++;
    }
}

/* ---- the checker (parent) ---- */

typedef struct tcheck {
    fg_store *s;
    int trial;
    char last_batch[96];
    int seen, want;
    uint64_t tensors;
} tcheck;

/* Tensors come in name order, so a batch's tensors are adjacent ("b<t>.<op>.<i>of<n>"). */
static int batch_close(tcheck *c)
{
    int trial = c->trial;
    if (c->last_batch[0] && c->seen != c->want)
        FAIL("batch %s is half-visible: %d of %d tensors", c->last_batch, c->seen, c->want);
    return 0;
}

static int check_tensor(void *ctx, const fg_store_tensor *t)
{
    tcheck *c = ctx;
    int trial = c->trial, i, n;
    const char *dot = strrchr(t->name, '.');
    if (!dot || sscanf(dot + 1, "%dof%d", &i, &n) != 2)
        FAIL("unexpected tensor name '%s'", t->name);
    size_t plen = (size_t)(dot - t->name);
    if (strlen(c->last_batch) != plen || strncmp(c->last_batch, t->name, plen)) {
        batch_close(c);
        snprintf(c->last_batch, sizeof c->last_batch, "%.*s", (int)plen, t->name);
        c->seen = 0;
        c->want = n;
    }
    c->seen++;
    c->tensors++;
    if (st_check_tensor(c->s, t, &g_err))
        FAIL("tensor '%s' has wrong contents: %s", t->name, g_err.msg);
    return 0;
}

typedef struct kcheck {
    fg_store *s;
    int trial;
    uint64_t pages;
} kcheck;

static int check_page(void *ctx, const fg_store_kv_page *p)
{
    kcheck *c = ctx;
    int trial = c->trial;
    static uint8_t buf[4096], want[4096];
    fg_store_kv_page got;
    if (fg_store_kv_read(c->s, &p->key, buf, sizeof buf, &got, &g_err))
        FAIL("KV page unreadable: %s", g_err.msg);
    st_kv_fill(want, got.payload_len, &p->key, got.token_first);
    if (memcmp(buf, want, got.payload_len))
        FAIL("KV page job %" PRIu64 " seq %u layer %u page %u: wrong payload", p->key.job,
             p->key.seq, p->key.layer, p->key.page);
    c->pages++;
    return 0;
}

typedef struct mcheck {
    fg_store *s;
    int trial;
    uint64_t big;
} mcheck;

static int check_meta(void *ctx, const char *key, size_t len)
{
    mcheck *c = ctx;
    int trial = c->trial, t, n;
    if (strncmp(key, "big.", 4))
        return 0;
    void *m;
    size_t got;
    if (fg_store_meta_get(c->s, key, &m, &got, &g_err))
        FAIL("metadata '%s' unreadable: %s", key, g_err.msg);
    uint64_t op;
    char head[64];
    snprintf(head, sizeof head, "%.*s", (int)(got < 63 ? got : 63), (char *)m);
    if (got != len || sscanf(head, "trial %d op %" SCNu64 " n %d", &t, &op, &n) != 3)
        FAIL("metadata '%s': %zu bytes, listed %zu, begins '%.20s'", key, got, len, head);
    uint8_t *want = big_value(got, t, op, n);
    if (!want || memcmp(m, want, got))
        FAIL("metadata '%s' (trial %d op %" PRIu64 "): wrong contents", key, t, op);
    free(want);
    free(m);
    char name[96];
    fg_store_tensor *ten;
    snprintf(name, sizeof name, "b%d.%" PRIu64 ".0of%d", t, op, n);
    if (fg_store_tensor_get(c->s, name, &ten, &g_err))
        FAIL("metadata '%s' visible, its batch's tensor %s not: %s", key, name, g_err.msg);
    fg_store_tensor_free(ten);
    c->big++;
    g_big_seen++;
    return 0;
}

static void check_store(int trial, unsigned flags, uint64_t *tensors, uint64_t *pages)
{
    fg_store *s;
    if (fg_store_open(g_dir, flags, NULL, &s, &g_err))
        FAIL("open%s after the kill: %s", flags ? " (read-only)" : "", g_err.msg);
    fg_store_verify_report rep;
    if (fg_store_verify(s, &rep, &g_err))
        FAIL("verify%s: %s", flags ? " (read-only)" : "", g_err.msg);
    if (!flags && rep.orphan_files)
        FAIL("%u orphan files after recovery", rep.orphan_files);
    tcheck tc = {s, trial, "", 0, 0, 0};
    if (fg_store_tensor_iter(s, check_tensor, &tc, &g_err))
        FAIL("tensor iteration: %s", g_err.msg);
    batch_close(&tc);
    mcheck mc = {s, trial, 0};
    if (fg_store_meta_iter(s, check_meta, &mc, &g_err))
        FAIL("metadata iteration: %s", g_err.msg);
    kcheck kc = {s, trial, 0};
    if (fg_store_kv_iter(s, UINT64_MAX, check_page, &kc, &g_err))
        FAIL("KV iteration: %s", g_err.msg);
    *tensors = tc.tensors;
    *pages = kc.pages;
    fg_store_close(s);
}

/* Answers as one string: tensor names + digests, KV keys + generations + slots. */
static int sig_tensor(void *ctx, const fg_store_tensor *t)
{
    char line[256];
    snprintf(line, sizeof line, "%s %u %016" PRIx64 "\n", t->name, t->file_id, t->digest);
    strcat(ctx, line);
    return 0;
}

static int sig_kv(void *ctx, const fg_store_kv_page *p)
{
    char line[256];
    snprintf(line, sizeof line, "%" PRIu64 "/%u/%u/%u g%" PRIu64 " f%u s%u %u+%u\n", p->key.job,
             p->key.seq, p->key.layer, p->key.page, p->generation, p->file_id, p->slot,
             p->token_first, p->n_tokens);
    strcat(ctx, line);
    return 0;
}

static fg_store *g_sig_store;

static int sig_meta(void *ctx, const char *key, size_t len)
{
    void *m;
    size_t n;
    if (fg_store_meta_get(g_sig_store, key, &m, &n, &g_err) || n != len)
        return -1;
    char line[256];
    snprintf(line, sizeof line, "meta %s = %.*s\n", key, (int)(n > 100 ? 100 : n), (char *)m);
    strcat(ctx, line);
    free(m);
    return 0;
}

static char *signature(int trial)
{
    fg_store *s;
    if (fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err))
        FAIL("open for signature: %s", g_err.msg);
    char *sig = calloc(1, 4 << 20);
    fg_store_tensor_iter(s, sig_tensor, sig, &g_err);
    fg_store_kv_iter(s, UINT64_MAX, sig_kv, sig, &g_err);
    g_sig_store = s;
    if (fg_store_meta_iter(s, sig_meta, sig, &g_err))
        FAIL("metadata: %s", g_err.msg);
    fg_store_close(s);
    return sig;
}

static void check_reindex(int trial)
{
    char *a = signature(trial), cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/catalog'", g_dir);
    if (system(cmd))
        FAIL("rm catalog");
    if (fg_store_reindex(g_dir, NULL, &g_err))
        FAIL("reindex: %s", g_err.msg);
    char *b = signature(trial);
    if (strcmp(a, b))
        FAIL("reindex gives different answers:\n--- catalog\n%s--- reindexed\n%s", a, b);
    free(a);
    free(b);
}

static void fresh_store(int trial)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd))
        FAIL("rm store");
    fg_store_opts o = {.kv_page_size = 4096, .kv_pages_per_file = 64,
                       .max_file_bytes = 48 << 10, .map_initial = 64 << 10};
    fg_store *s;
    if (fg_store_create(g_dir, &o, &s, &g_err))
        FAIL("create: %s", g_err.msg);
    fg_store_close(s);
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 220;
    const char *env = getenv("FG_CRASH_SEED");
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : env ? strtoull(env, NULL, 0) : 20261130;
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fgcrash-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    strcat(g_dir, "/store");
    g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("store crash test: %d trials, seed %" PRIu64 " (rerun: test_store_crash %d %" PRIu64
           ")\n", trials, seed, trials, seed);
    uint64_t rng = seed, kills[PH_N] = {0}, exited = 0, tensors = 0, pages = 0, ops = 0;
    for (int trial = 0; trial < trials; trial++) {
        if (trial % 25 == 0)
            fresh_store(trial);
        uint64_t child_seed = rnd(&rng);
        useconds_t delay = (useconds_t)(rnd(&rng) % 60000);
        g_sh->phase = PH_OPEN;
        g_sh->ops = 0;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            writer(trial, child_seed);
        usleep(delay);
        int phase = g_sh->phase;
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (!WIFSIGNALED(st)) {
            fprintf(stderr, "trial %d: writer exited with %d before the kill\n", trial,
                    WEXITSTATUS(st));
            return 1;
        }
        kills[phase]++;
        ops += g_sh->ops;
        check_store(trial, FG_STORE_RDONLY, &tensors, &pages);
        check_store(trial, 0, &tensors, &pages);
        if (trial % 8 == 7)
            check_reindex(trial);
    }
    (void)exited;
    printf("all %d trials passed; %" PRIu64 " operations committed before kills; last state: "
           "%" PRIu64 " tensors, %" PRIu64 " KV pages\nkills landed in:", trials, ops, tensors,
           pages);
    for (int p = 0; p < PH_N; p++)
        printf(" %s %" PRIu64 "%s", ph_name[p], kills[p], p + 1 < PH_N ? "," : "\n");
    printf("large metadata values checked whole: %" PRIu64 "\n", g_big_seen);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%.*s'", (int)(strlen(g_dir) - 6), g_dir);
    return system(cmd) ? 1 : 0;
}
