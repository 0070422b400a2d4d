/* par.c - helper threads for fg_par_run (see par.h).
 *
 * A generation counter under one mutex: fg_par_run publishes (fn, arg), bumps the generation
 * and broadcasts; each helper runs its part when it sees a new generation and counts itself
 * done; the caller runs part 0, then waits until all helpers are done. Between runs a helper
 * spins for SPIN_NS on the generation (atomic), then sleeps on the condition variable;
 * the caller of a dynamic run spins as long for the helpers' last chunks. The spin calls
 * sched_yield, not PAUSE: a thread that shares its core gives it away at once.
 * Measured (2 threads, this 2-core VM): waking a sleeping thread cost enough that in an F16
 * prefill (a run per 4 MiB weight piece, four chunks each) the helper had a tenth fewer GEMM
 * samples than the caller (45.8% against 41.8%; spinning, 43.6% and 43.5%) and the prefill ran
 * 2.5-2.7% slower (two interleaved pairs). 4-bit batch-1 decode, 32 tokens: sleeping 1.71-1.72 s,
 * spinning on PAUSE 1.55-1.65, on sched_yield 1.48-1.61; with a CPU hog beside it sleeping
 * 2.34-2.41 s, PAUSE 3.05-3.24 (the spinner took the core its caller needed: an earlier
 * unbounded spin measured 2-3x slower for that reason), sched_yield 2.34-2.63; 4 threads on the
 * 2 cores: sleeping 1.72-1.89 s, sched_yield 1.48-1.51.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "par.h"

struct fg_par {
    uint32_t n;              /* parts = threads, caller included */
    pthread_t *threads;      /* [n - 1] */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    _Atomic uint64_t gen;    /* bumped per run, under mu (helpers also spin on it without) */
    uint32_t n_done;         /* helpers finished with this generation */
    int quit;
    fg_par_fn fn;
    void *arg;
    int dyn;                 /* the current run hands out chunks (fg_par_run_dyn) */
    uint32_t n_chunks;
    _Atomic uint64_t claim;  /* (gen & 0xffffffff) << 32 | next unclaimed chunk */
    _Atomic uint64_t left;   /* chunks of the current dyn run not finished */
};

/* Claim and run chunks of dyn run `gen` until none is left (or a newer run has started). */
static void run_chunks(fg_par *p, uint64_t gen, fg_par_fn fn, void *arg, uint32_t n)
{
    uint64_t tag = (gen & 0xffffffffu) << 32;
    for (;;) {
        uint64_t v = atomic_load(&p->claim);
        if ((v & ~(uint64_t)0xffffffffu) != tag || (uint32_t)v >= n)
            return;
        if (!atomic_compare_exchange_weak(&p->claim, &v, v + 1))
            continue;
        fn(arg, (uint32_t)v, n);
        if (atomic_fetch_sub(&p->left, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

typedef struct helper_arg {
    fg_par *p;
    uint32_t part;
} helper_arg;

/* Threads spin this long before they sleep: see the top. */
#define SPIN_NS 200000

/* Yield while (*a == v) == equal, for at most SPIN_NS (the clock read every 8 yields). */
static void spin_while(_Atomic uint64_t *a, uint64_t v, int equal)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 1; (atomic_load(a) == v) == equal; i++) {
        sched_yield();
        if (i % 8)
            continue;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) > SPIN_NS)
            return;
    }
}

static void *helper(void *v)
{
    helper_arg *h = v;
    fg_par *p = h->p;
    uint32_t part = h->part;
    free(h);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->gen == seen && !p->quit) {
            pthread_mutex_unlock(&p->mu);
            spin_while(&p->gen, seen, 1);
            pthread_mutex_lock(&p->mu);
        }
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        fg_par_fn fn = p->fn;
        void *arg = p->arg;
        if (p->dyn) {
            uint32_t n = p->n_chunks;
            pthread_mutex_unlock(&p->mu);
            run_chunks(p, seen, fn, arg, n);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        fn(arg, part, p->n);
        pthread_mutex_lock(&p->mu);
        if (++p->n_done == p->n - 1)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int fg_par_create(uint32_t n_threads, fg_par **out, fg_err *err)
{
    fg_par *p = calloc(1, sizeof *p);
    if (!p)
        return fg_err_set(err, FG_ERR_NOMEM, "helper threads: out of memory");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    p->n = n_threads ? n_threads : cpus > 0 ? (uint32_t)cpus : 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc(p->n, sizeof *p->threads);
    if (!p->threads) {
        fg_par_free(p);
        return fg_err_set(err, FG_ERR_NOMEM, "helper threads: out of memory");
    }
    for (uint32_t i = 1; i < p->n; i++) {
        helper_arg *h = malloc(sizeof *h);
        if (h)
            h->p = p, h->part = i;
        int e = h ? pthread_create(&p->threads[i - 1], NULL, helper, h) : ENOMEM;
        if (!e)
            continue;
        free(h);
        uint32_t want = p->n;
        p->n = i; /* join the ones started */
        fg_par_free(p);
        return fg_err_sys(err, FG_ERR_NOMEM, e, "cannot start helper thread %u of %u", i, want);
    }
    *out = p;
    return FG_OK;
}

uint32_t fg_par_threads(const fg_par *p) { return p ? p->n : 1; }

void fg_par_run(fg_par *p, fg_par_fn fn, void *arg)
{
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->arg = arg, p->n_done = 0, p->dyn = 0;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    pthread_mutex_lock(&p->mu);
    while (p->n_done < p->n - 1)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void fg_par_run_dyn(fg_par *p, fg_par_fn fn, void *arg, uint32_t n_chunks)
{
    if (!p || p->n == 1 || n_chunks <= 1) {
        for (uint32_t c = 0; c < n_chunks; c++)
            fn(arg, c, n_chunks);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn, p->arg = arg, p->dyn = 1, p->n_chunks = n_chunks;
    uint64_t gen = ++p->gen;
    atomic_store(&p->left, n_chunks);
    atomic_store(&p->claim, (gen & 0xffffffffu) << 32);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, gen, fn, arg, n_chunks);
    spin_while(&p->left, 0, 0); /* the helpers' last chunks: often done within the spin */
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->left))
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void fg_par_free(fg_par *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 1; i < p->n; i++)
        pthread_join(p->threads[i - 1], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
