/* runtime.cc - libcudart.so.<major> for machines without a GPU: the CUDA runtime calls fg makes,
 * carried out on the CPU, so that the binaries nvcc built (tests, fg-infer --backend cuda) run
 * their CUDA code paths unchanged with LD_LIBRARY_PATH pointing here.
 *
 * It is a test instrument, not a GPU: it says nothing of speed, and a kernel's arithmetic is
 * the host compiler's (no FMA contraction) where nvcc's may fuse. What it checks is what fails
 * first on a real GPU: the host code's use of the runtime (streams, events, the order of
 * asynchronous copies, stream-ordered allocation, launch limits), the kernels' indexing,
 * barriers and shuffles, and cuBLAS's arguments (cublas.cc). Stricter than the driver where
 * that costs nothing:
 *  - Device memory is host memory under a protection key that only the stream workers may use
 *    (when the CPU has PKU): host code that dereferences a device pointer dies at once with a
 *    message, as it would on a GPU. Each allocation ends within 256 bytes of an inaccessible
 *    page, starts on one, and is filled with 0xff bytes (NaN as floats; the first and last MiB
 *    of an allocation over 4 MiB) so that reading what was never written shows.
 *  - Copies and memsets must lie inside one allocation on their device side and match their
 *    cudaMemcpyKind.
 *  - Every stream is a worker thread running its work in order; an event is a point in one
 *    stream's order; cudaStreamWaitEvent holds a stream until that point. Copies from pageable
 *    memory are synchronous as the CUDA documentation describes them (host to device: after the
 *    stream's earlier work, before the call returns; device to host: the call returns when the
 *    copy has been made); copies between device and pinned memory (cudaHostAlloc) are not.
 *  - A kernel runs block after block on its stream's worker, its threads on fibers (one for
 *    all of them while none waits at a barrier; every other block starts them from the last,
 *    so an order the code does not enforce differs between blocks); __syncthreads and the
 *    shuffles are barriers; a barrier a thread of the block never reaches,
 *    a launch over CUDA's limits (1024 threads a block, 48 KiB of dynamic shared memory without
 *    opting in, grid y and z 65535), a kernel argument pointing to host memory that is not
 *    pinned, or a kernel missing from kernels.cc is reported.
 * What it cannot see: data races between a block's threads beyond the two start orders, the
 * GPU's memory model, kernels reading pageable memory through a struct's pointer it does not
 * know (bad_arg in kernels.cc knows attn_k's), tensor-core rounding, speed. gpu-check.sh is
 * still the first thing to run on a GPU.
 * Pinned host memory is cudaHostAlloc's or the caller's registered in place (cudaHostRegister,
 * cudaHostUnregister, with the runtime's errors for an overlapping registration and an
 * unregister of what is not one); a host range counts as pinned only when all of it lies in
 * one allocation or registration (the driver stages any other, across two registrations too),
 * and fgemu_pinned_stats says how many bytes are pinned and how many asynchronous copies were
 * staged, so a test can see pinned memory grow with use and copies meant to overlap do.
 * Environment: FGEMU_DEVICES (default 1; 0: no device), FGEMU_DEVICE_MEM (bytes the device has,
 * K/M/G suffixes, default 1G), FGEMU_NO_PKEY=1 (no protection key), FGEMU_STATS=1 (launches
 * per kernel, pinned host memory at most and the staged copies, at exit).
 */
#define _GNU_SOURCE 1
#include <cxxabi.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fgemu.h"
#include "fgemu_int.h"

#define API extern "C" __attribute__((visibility("default")))

namespace fgemu {

thread_local cthread *t_cur;
thread_local dim3 t_block_idx, t_block_dim, t_grid_dim;
thread_local void *t_dyn_shared;

static void say(const char *fmt, va_list ap)
{
    fputs("fgemu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

[[noreturn]] static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    abort();
}

static void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}

static size_t env_size(const char *name, size_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    default: break;
    }
    return (size_t)v;
}

/* ------------------------------------------------------------------ errors */

static thread_local cudaError_t t_last = cudaSuccess;

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        t_last = e;
    return e;
}

/* ------------------------------------------------------------------ protection key */

static int g_pkey = -1;
static std::once_flag g_pkey_once;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
#ifdef SEGV_PKUERR
    if (si->si_code == SEGV_PKUERR) {
        char msg[160];
        int n = snprintf(msg, sizeof msg, "fgemu: host code touched device memory at %p\n",
                         si->si_addr);
        if (write(2, msg, (size_t)n) < 0) {
        }
        abort();
    }
#endif
    signal(sig, SIG_DFL); /* anything else: as if we were not here */
    raise(sig);
}

static void pkey_init()
{
    if (getenv("FGEMU_NO_PKEY"))
        return;
    g_pkey = pkey_alloc(0, PKEY_DISABLE_ACCESS);
    if (g_pkey < 0)
        return; /* no PKU: unprotected */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, nullptr);
}

static void pkey_allow(bool on)
{
    std::call_once(g_pkey_once, pkey_init);
    if (g_pkey >= 0)
        pkey_set(g_pkey, on ? 0 : PKEY_DISABLE_ACCESS);
}

/* Host-side emulator code that must touch device memory (a synchronous copy). */
struct device_access {
    unsigned saved;
    device_access() { saved = g_pkey >= 0 ? (unsigned)pkey_get(g_pkey) : 0; pkey_allow(true); }
    ~device_access()
    {
        if (g_pkey >= 0)
            pkey_set(g_pkey, (int)saved);
    }
};

/* ------------------------------------------------------------------ memory */

/* MEM_REGISTERED: the caller's memory, page-locked in place by cudaHostRegister (no mapping
 * of ours: map is NULL). */
enum mem_kind { MEM_DEVICE, MEM_PINNED, MEM_REGISTERED };

struct alloc {
    char *ptr;
    size_t size;
    char *map;      /* the mapping, guard pages included */
    size_t map_len;
    mem_kind kind;
};

/* Host memory pinned now and at most (cudaHostAlloc and cudaHostRegister bytes), and the
 * asynchronous copies whose host side was not all in one pinned range (staged, so
 * synchronous: the overlap a program meant to have is lost); fgemu_pinned_stats. */
static size_t g_pinned, g_pinned_peak;
static unsigned long long g_staged;
/* of those, copies whose host side started in one pinned range and ran past its end (a caller
 * that should have split the copy at the range boundary) */
static unsigned long long g_straddled;

static std::mutex g_mem_mu;
static std::map<uintptr_t, alloc> g_mem; /* by ptr */
static size_t g_used;

static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t total_mem()
{
    static size_t t = env_size("FGEMU_DEVICE_MEM", (size_t)1 << 30);
    return t;
}

/* The allocation holding p (interior pointers too), or NULL. Caller holds g_mem_mu. */
static alloc *find_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_mem.upper_bound(a);
    if (it == g_mem.begin())
        return nullptr;
    --it;
    alloc &x = it->second;
    return a < (uintptr_t)x.ptr + (x.size ? x.size : 1) ? &x : nullptr;
}

static bool find(const void *p, alloc *out)
{
    std::lock_guard<std::mutex> g(g_mem_mu);
    alloc *x = find_locked(p);
    if (x)
        *out = *x;
    return x != nullptr;
}

/* Mappings freed, kept for reuse by size and kind (the mmap, protection-key and munmap
 * system calls of every stream-ordered staging allocation made the tests slow). */
static std::multimap<std::pair<size_t, int>, char *> g_spare;
static size_t g_spare_bytes;
static const size_t SPARE_MAX = (size_t)256 << 20;

static cudaError_t mem_new(void **out, size_t n, mem_kind kind)
{
    if (!out)
        return cudaErrorInvalidValue;
    *out = nullptr;
    size_t pg = page(), body = (n + 255) / 256 * 256, body_pages = (body + pg - 1) / pg * pg;
    if (body_pages == 0)
        body_pages = pg;
    size_t len = body_pages + 2 * pg;
    char *m = nullptr;
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        if (kind == MEM_DEVICE) {
            if (g_used + body > total_mem())
                return cudaErrorMemoryAllocation;
            g_used += body;
        }
        auto it = g_spare.find({len, (int)kind});
        if (it != g_spare.end()) {
            m = it->second;
            g_spare.erase(it);
            g_spare_bytes -= len;
        }
    }
    if (!m) {
        m = (char *)mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
        if (m == MAP_FAILED) {
            std::lock_guard<std::mutex> g(g_mem_mu);
            if (kind == MEM_DEVICE)
                g_used -= body;
            return cudaErrorMemoryAllocation;
        }
        std::call_once(g_pkey_once, pkey_init);
        int prc = kind == MEM_DEVICE && g_pkey >= 0
                      ? pkey_mprotect(m + pg, body_pages, PROT_READ | PROT_WRITE, g_pkey)
                      : mprotect(m + pg, body_pages, PROT_READ | PROT_WRITE);
        if (prc != 0)
            die("mprotect: %s", strerror(errno));
    }
    char *p = m + pg + body_pages - body; /* the end within 256 bytes of the guard page */
    if (kind == MEM_DEVICE) { /* never written reads as NaN: all of a small allocation, the
                               * first and last MiB of a large one (a pool: filling all of it
                               * would cost the pages of the whole device) */
        device_access acc;
        size_t edge = (size_t)1 << 20;
        if (body <= 4 * edge) {
            memset(p, 0xff, body);
        } else {
            memset(p, 0xff, edge);
            memset(p + body - edge, 0xff, edge);
        }
    }
    std::lock_guard<std::mutex> g(g_mem_mu);
    g_mem[(uintptr_t)p] = alloc{p, n, m, len, kind};
    if (kind == MEM_PINNED && (g_pinned += n) > g_pinned_peak)
        g_pinned_peak = g_pinned;
    *out = p;
    return cudaSuccess;
}

static cudaError_t mem_free(void *p, mem_kind kind)
{
    if (!p)
        return cudaSuccess;
    alloc a;
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        auto it = g_mem.find((uintptr_t)p);
        if (it == g_mem.end() || it->second.kind != kind) {
            warn("free of %p, which is not the start of a live %s allocation", p,
                 kind == MEM_DEVICE ? "device" : "pinned (cudaHostAlloc)");
            return cudaErrorInvalidValue;
        }
        a = it->second;
        g_mem.erase(it);
        if (kind == MEM_DEVICE)
            g_used -= (a.size + 255) / 256 * 256;
        else
            g_pinned -= a.size;
        if (g_spare_bytes + a.map_len <= SPARE_MAX) {
            g_spare.emplace(std::make_pair(a.map_len, (int)kind), a.map);
            g_spare_bytes += a.map_len;
            return cudaSuccess;
        }
    }
    munmap(a.map, a.map_len);
    return cudaSuccess;
}

bool pointer_ok(const void *p)
{
    alloc a;
    return !p || find(p, &a);
}

/* Where p points: 0 pageable host memory, 1 pinned, 2 device; *a its allocation. */
static int kind_of(const void *p, alloc *a)
{
    if (!find(p, a))
        return 0;
    return a->kind == MEM_DEVICE ? 2 : 1;
}

/* n bytes from p end inside a (p inside it) */
static bool ends_inside(const alloc &a, const void *p, size_t n)
{
    return (uintptr_t)p + n <= (uintptr_t)a.ptr + a.size;
}

} // namespace fgemu

API int fgemu_device_range(const void *p, size_t n)
{
    using namespace fgemu;
    alloc a;
    return kind_of(p, &a) == 2 && ends_inside(a, p, n);
}

/* Host bytes pinned now and at most (cudaHostAlloc + cudaHostRegister), and the asynchronous
 * host <-> device copies the emulated driver staged (host side not all in one pinned range). */
API void fgemu_pinned_stats(size_t *now, size_t *peak, unsigned long long *staged)
{
    using namespace fgemu;
    std::lock_guard<std::mutex> g(g_mem_mu);
    *now = g_pinned;
    *peak = g_pinned_peak;
    *staged = g_staged;
}

namespace fgemu {

/* ------------------------------------------------------------------ streams and events */


} // namespace fgemu

struct CUstream_st {
    std::mutex mu;
    std::condition_variable cv;      /* work queued */
    std::condition_variable done_cv; /* work finished */
    std::deque<std::function<void()>> q;
    uint64_t enq = 0, done = 0; /* work items queued, finished (both under mu) */
    bool stop = false, blocking = true;
    std::thread worker;
};

struct CUevent_st {
    CUstream_st *s = nullptr; /* the stream and point of its last record */
    uint64_t at = 0;
};

namespace fgemu {

static void worker_main(CUstream_st *s)
{
    pkey_allow(true);
    for (;;) {
        std::function<void()> fn;
        {
            std::unique_lock<std::mutex> l(s->mu);
            s->cv.wait(l, [s] { return s->stop || !s->q.empty(); });
            if (s->q.empty())
                return;
            fn = std::move(s->q.front());
            s->q.pop_front();
        }
        fn();
        {
            std::lock_guard<std::mutex> g(s->mu);
            s->done++;
        }
        s->done_cv.notify_all();
    }
}

static void start(CUstream_st *s) { s->worker = std::thread(worker_main, s); }

static std::mutex g_streams_mu;
static std::vector<CUstream_st *> g_streams; /* live created streams */
static CUstream_st *g_legacy;                 /* stream 0 */

static CUstream_st *legacy()
{
    static std::once_flag once;
    std::call_once(once, [] {
        g_legacy = new CUstream_st;
        start(g_legacy);
    });
    return g_legacy;
}

static CUstream_st *resolve(cudaStream_t s)
{
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return legacy();
    return (CUstream_st *)s;
}

static void wait_point(CUstream_st *s, uint64_t at)
{
    std::unique_lock<std::mutex> l(s->mu);
    s->done_cv.wait(l, [s, at] { return s->done >= at; });
}

/* Queue fn on s; its point in s's order. Work on the legacy stream waits for the blocking
 * streams' earlier work and theirs for its (CUDA's legacy default stream). */
static uint64_t enqueue(CUstream_st *s, std::function<void()> fn)
{
    std::vector<std::pair<CUstream_st *, uint64_t>> deps;
    {
        std::lock_guard<std::mutex> g(g_streams_mu);
        if (s == g_legacy) {
            for (CUstream_st *o : g_streams)
                if (o->blocking) {
                    std::lock_guard<std::mutex> l(o->mu);
                    deps.emplace_back(o, o->enq);
                }
        } else if (s->blocking && g_legacy) {
            std::lock_guard<std::mutex> l(g_legacy->mu);
            deps.emplace_back(g_legacy, g_legacy->enq);
        }
    }
    std::lock_guard<std::mutex> g(s->mu);
    if (!deps.empty())
        s->q.push_back([deps] {
            for (auto &d : deps)
                wait_point(d.first, d.second);
        });
    s->q.push_back(std::move(fn));
    s->enq += deps.empty() ? 1 : 2;
    uint64_t at = s->enq;
    s->cv.notify_one();
    return at;
}

static void sync_stream(CUstream_st *s)
{
    uint64_t at;
    {
        std::lock_guard<std::mutex> g(s->mu);
        at = s->enq;
    }
    wait_point(s, at);
}

static void sync_all()
{
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> g(g_streams_mu);
        all = g_streams;
    }
    if (g_legacy)
        all.push_back(g_legacy);
    for (CUstream_st *s : all)
        sync_stream(s);
}

/* ------------------------------------------------------------------ kernels: fibers */

enum fstate { F_RUN, F_BARRIER, F_WARP, F_DONE };

/* A fiber switch: the callee-saved registers, MXCSR and the x87 control word pushed on the
 * running stack, its stack pointer saved in *from, `to` loaded (x86-64 System V; glibc's
 * swapcontext also saves the signal mask, a system call each way, which made kernels slow). */
extern "C" void fgemu_switch(void **from, void *to);
extern "C" void fgemu_fiber_start();
asm(R"(
    .text
    .globl fgemu_switch
    .hidden fgemu_switch
    .type fgemu_switch, @function
fgemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fgemu_switch, .-fgemu_switch
    .globl fgemu_fiber_start
    .hidden fgemu_fiber_start
    .type fgemu_fiber_start, @function
fgemu_fiber_start:
    andq $-16, %rsp
    call fgemu_fiber_main
    ud2
    .size fgemu_fiber_start, .-fgemu_fiber_start
)");

/* One CUDA thread of the running block. */
struct cuthread {
    cthread ct;
    fstate st;
    unsigned mask; /* a warp exchange's */
    int src;
    uint64_t offer, got;
};

/* A fiber that runs the block's threads one after another, each to its end, until one stops at
 * a barrier: that thread keeps the fiber, and the scheduler starts another fiber for the next
 * thread. A kernel without barriers runs its whole block on one fiber without a switch; one
 * with barriers ends with a fiber per thread. */
struct runner {
    void *sp;
    int th;       /* the thread it runs */
    bool ended;   /* no thread left to start */
};

struct block_run {
    const kernel_def *k;
    const void *args;
    std::vector<cuthread> t;
    std::vector<runner> rs;
    size_t next;  /* the first thread not started */
    bool reverse; /* started from the last: a kernel whose threads need an order they are
                     not given (a read of another thread's write without a barrier between)
                     computes differently in one block and the next */
    void *sched;
    runner *cur;
};

static thread_local block_run *t_run;
static thread_local std::vector<char *> t_stacks;
static const size_t STACK = 64 << 10;

static void yield_to_sched()
{
    block_run *r = t_run;
    fgemu_switch(&r->cur->sp, r->sched);
}

} // namespace fgemu

extern "C" __attribute__((used)) void fgemu_fiber_main()
{
    using namespace fgemu;
    block_run *r = t_run;
    while (r->next < r->t.size()) {
        size_t i = r->next++;
        if (r->reverse) /* every other block starts its threads from the last */
            i = r->t.size() - 1 - i;
        runner *me = r->cur; /* the vector of runners may move while this one is parked */
        me->th = (int)i;
        cuthread &th = r->t[i];
        th.st = F_RUN;
        t_cur = &th.ct;
        r->k->run(r->args);
        r->t[(size_t)r->cur->th].st = F_DONE;
    }
    r->cur->ended = true;
    yield_to_sched(); /* never resumed */
    abort();
}

namespace fgemu {

/* A fresh fiber's stack: fgemu_switch's frame (control words, six registers) returning into
 * fgemu_fiber_start. */
static void *fiber_stack(char *stack)
{
    uintptr_t top = ((uintptr_t)stack + STACK) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                         /* padding */
    *--sp = (void *)fgemu_fiber_start;       /* ret target */
    for (int i = 0; i < 6; i++)
        *--sp = nullptr;                     /* rbp rbx r12 r13 r14 r15 */
    uint32_t ctl[2];
    __asm__ volatile("stmxcsr %0" : "=m"(ctl[0]));
    __asm__ volatile("fnstcw %0" : "=m"(ctl[1]));
    *--sp = nullptr;
    memcpy(sp, ctl, 8);
    return sp;
}

static std::string block_name(const block_run &r)
{
    char b[160];
    snprintf(b, sizeof b, "kernel %s block (%u,%u,%u)", r.k->name, t_block_idx.x, t_block_idx.y,
             t_block_idx.z);
    return b;
}

static void run_block(block_run &r)
{
    size_t n = r.t.size();
    unsigned bx = t_block_dim.x, by = t_block_dim.y;
    for (size_t i = 0; i < n; i++) {
        cuthread &c = r.t[i];
        c.ct.tid.x = (unsigned)(i % bx);
        c.ct.tid.y = (unsigned)(i / bx % by);
        c.ct.tid.z = (unsigned)(i / ((size_t)bx * by));
        c.ct.lane = (unsigned)(i % 32);
        c.st = F_RUN; /* not started counts as able to run */
    }
    r.next = 0;
    r.reverse = (t_block_idx.x + t_block_idx.y + t_block_idx.z) & 1;
    r.rs.clear();
    r.rs.reserve(n);
    for (;;) {
        /* run every runner whose thread can go on; start one more while threads are left */
        bool ran;
        do {
            ran = false;
            for (size_t j = 0; j < r.rs.size(); j++) {
                runner &u = r.rs[j];
                if (u.ended || r.t[(size_t)u.th].st != F_RUN)
                    continue;
                r.cur = &u;
                t_cur = &r.t[(size_t)u.th].ct;
                fgemu_switch(&r.sched, u.sp);
                ran = true;
            }
            if (r.next < n) {
                if (t_stacks.size() <= r.rs.size()) {
                    char *st = (char *)mmap(nullptr, STACK, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                    if (st == MAP_FAILED)
                        die("no memory for a fiber stack");
                    t_stacks.push_back(st);
                }
                r.rs.push_back(runner{fiber_stack(t_stacks[r.rs.size()]), -1, false});
                runner &u = r.rs.back();
                r.cur = &u;
                fgemu_switch(&r.sched, u.sp);
                ran = true;
            }
        } while (ran && r.next < n);
        /* every thread has started: each is done, at a block barrier or at a warp exchange */
        size_t done = 0, bar = 0, runnable = 0;
        for (auto &c : r.t)
            done += c.st == F_DONE, bar += c.st == F_BARRIER, runnable += c.st == F_RUN;
        if (done == n)
            return;
        if (runnable)
            continue;
        bool moved = false;
        for (size_t w0 = 0; w0 < n; w0 += 32) { /* warp exchanges whose lanes have all come */
            size_t w1 = w0 + 32 < n ? w0 + 32 : n;
            unsigned mask = 0, at = 0, dead = 0;
            for (size_t i = w0; i < w1; i++) {
                if (r.t[i].st == F_WARP)
                    mask = r.t[i].mask, at |= 1u << (i - w0);
                else if (r.t[i].st == F_DONE)
                    dead |= 1u << (i - w0);
            }
            if (!at)
                continue;
            unsigned exists = w1 - w0 == 32 ? 0xffffffffu : (1u << (w1 - w0)) - 1;
            if (mask & ~exists)
                die("%s: a shuffle's mask 0x%08x names lanes past the block's %zu threads",
                    block_name(r).c_str(), mask, n);
            if (mask & dead)
                die("%s: a shuffle's mask 0x%08x names lanes that have returned (0x%08x)",
                    block_name(r).c_str(), mask, dead);
            if ((at & mask) != mask)
                continue; /* some lanes are still at a block barrier: judged below */
            for (size_t i = w0; i < w1; i++) {
                cuthread &c = r.t[i];
                if (c.st != F_WARP)
                    continue;
                if (c.mask != mask)
                    die("%s: lanes of one warp shuffle with different masks",
                        block_name(r).c_str());
                int sl = c.src;
                c.got = sl >= 0 && sl < 32 && ((mask >> sl) & 1u) ? r.t[w0 + (size_t)sl].offer
                                                                   : c.offer;
                c.st = F_RUN;
            }
            moved = true;
        }
        if (moved)
            continue;
        if (bar + done == n) {
            if (done)
                die("%s: __syncthreads not reached by %zu of its %zu threads, which returned",
                    block_name(r).c_str(), done, n);
            for (auto &c : r.t)
                c.st = F_RUN;
            continue;
        }
        die("%s: threads wait at __syncthreads while others wait at a warp shuffle",
            block_name(r).c_str());
    }
}

void sync_block()
{
    t_run->t[(size_t)t_run->cur->th].st = F_BARRIER;
    yield_to_sched();
}

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane)
{
    cuthread *f = &t_run->t[(size_t)t_run->cur->th];
    if (!((mask >> f->ct.lane) & 1u))
        die("kernel %s: a shuffle by lane %u, which its mask 0x%08x leaves out",
            t_run->k->name, f->ct.lane, mask);
    f->mask = mask;
    f->offer = bits;
    f->src = src_lane;
    f->st = F_WARP;
    yield_to_sched();
    return f->got;
}

struct launch {
    const kernel_def *k;
    void *args;
    dim3 grid, block;
    size_t smem;
};

static void run_launch(const launch &L)
{
    size_t threads = (size_t)L.block.x * L.block.y * L.block.z;
    /* dynamic shared memory ends at an inaccessible page: an overrun faults */
    size_t pg = page(), body = (L.smem + pg - 1) / pg * pg;
    char *sm = nullptr;
    if (L.smem) {
        sm = (char *)mmap(nullptr, body + pg, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (sm == MAP_FAILED)
            die("no memory for shared memory");
        mprotect(sm + body, pg, PROT_NONE);
        t_dyn_shared = sm + body - (L.smem + 15) / 16 * 16;
    } else {
        t_dyn_shared = nullptr;
    }
    block_run r;
    r.k = L.k;
    r.args = L.args;
    r.t.resize(threads);
    t_run = &r;
    t_block_dim = L.block;
    t_grid_dim = L.grid;
    for (unsigned z = 0; z < L.grid.z; z++)
        for (unsigned y = 0; y < L.grid.y; y++)
            for (unsigned x = 0; x < L.grid.x; x++) {
                t_block_idx = dim3(x, y, z);
                if (sm)
                    memset(sm, 0xff, body); /* shared memory starts undefined */
                run_block(r);
            }
    t_run = nullptr;
    t_cur = nullptr;
    if (sm)
        munmap(sm, body + pg);
    L.k->unpack(L.args);
}

/* ------------------------------------------------------------------ kernel registry */

struct reg {
    std::string name, params;
    const kernel_def *k;
    bool same_params; /* nvcc's parameters are the host build's (judged at the first launch:
                         a binary registers kernels it may never launch) */
    unsigned long launches;
};

static std::mutex g_reg_mu;
static std::map<const void *, reg> g_reg; /* by the host function nvcc generates for it */

static std::string strip_ns(const std::string &s)
{
    static const std::string anon = "(anonymous namespace)::", nv = "_GLOBAL__N_";
    std::string o;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, anon.size(), anon) == 0) {
            i += anon.size();
        } else if (s.compare(i, nv.size(), nv) == 0 && s.find("::", i) != std::string::npos) {
            i = s.find("::", i) + 2;
        } else {
            o += s[i++];
        }
    }
    return o;
}

/* "k_add" and "(float*, ...)" of a mangled device name; nvcc's anonymous namespaces dropped */
static void split_name(const char *mangled, std::string *name, std::string *params)
{
    int st = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    std::string s = strip_ns(d ? d : mangled);
    free(d);
    size_t paren = s.find('(');
    std::string q = paren == std::string::npos ? s : s.substr(0, paren);
    size_t colon = q.rfind("::");
    *name = colon == std::string::npos ? q : q.substr(colon + 2);
    *params = paren == std::string::npos ? "" : s.substr(paren);
}

/* FGEMU_STATS=1: the launches of each kernel at exit (what a test ran on the "device") */
__attribute__((destructor)) static void stats()
{
    if (!getenv("FGEMU_STATS"))
        return;
    std::lock_guard<std::mutex> g(g_reg_mu);
    for (auto &e : g_reg)
        fprintf(stderr, "fgemu: %-16s %lu launches\n", e.second.name.c_str(), e.second.launches);
    std::lock_guard<std::mutex> m(g_mem_mu);
    fprintf(stderr, "fgemu: pinned host memory: %.1f MiB at most, %.1f MiB at exit; %llu "
            "asynchronous copies staged, %llu of them across a pinned range's end\n",
            g_pinned_peak / 1048576.0, g_pinned / 1048576.0, g_staged, g_straddled);
}

} // namespace fgemu

/* ------------------------------------------------------------------ the API */

using namespace fgemu;

API void **__cudaRegisterFatBinary(void *fatCubin)
{
    static void *handle[4];
    (void)fatCubin;
    return handle;
}

API void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
API void __cudaUnregisterFatBinary(void **h) { (void)h; }

API void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun,
                                const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)h, (void)deviceName, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim,
        (void)wSize;
    reg r;
    split_name(deviceFun, &r.name, &r.params);
    r.k = nullptr;
    r.launches = 0;
    size_t n;
    const kernel_def *ks = kernels(&n);
    for (size_t i = 0; i < n; i++)
        if (r.name == ks[i].name)
            r.k = &ks[i];
    r.same_params = r.k && r.params == strip_ns(r.k->params);
    std::lock_guard<std::mutex> g(g_reg_mu);
    g_reg[(const void *)hostFun] = r;
}

struct call_conf {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
static thread_local std::vector<call_conf> t_conf;

API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                         struct CUstream_st *stream)
{
    t_conf.push_back(call_conf{gridDim, blockDim, sharedMem, (cudaStream_t)stream});
    return 0;
}

API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                           void *stream)
{
    if (t_conf.empty())
        return ret(cudaErrorInvalidConfiguration);
    call_conf c = t_conf.back();
    t_conf.pop_back();
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.smem;
    *(cudaStream_t *)stream = c.stream;
    return cudaSuccess;
}

API cudaError_t __cudaGetKernel(cudaKernel_t *out, const void *fun)
{
    std::lock_guard<std::mutex> g(g_reg_mu);
    auto it = g_reg.find(fun);
    if (it == g_reg.end())
        return ret(cudaErrorInvalidDeviceFunction);
    *out = (cudaKernel_t)&it->second;
    return cudaSuccess;
}

API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                   size_t smem, cudaStream_t stream)
{
    reg *r = (reg *)kernel;
    if (!r)
        return ret(cudaErrorInvalidDeviceFunction);
    if (!r->k)
        die("kernel %s has no host build: add it to tests/cudaemu/kernels.cc", r->name.c_str());
    if (!r->same_params)
        die("kernel %s: nvcc registered it as %s, the host build is %s", r->name.c_str(),
            r->params.c_str(), r->k->params);
    size_t threads = (size_t)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
        warn("kernel %s: launch <<<(%u,%u,%u), (%u,%u,%u)>>> is outside CUDA's limits",
             r->name.c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return ret(cudaErrorInvalidConfiguration);
    }
    if (smem > 48 * 1024) {
        warn("kernel %s: %zu bytes of dynamic shared memory (over 48 KiB needs "
             "cudaFuncSetAttribute)", r->name.c_str(), smem);
        return ret(cudaErrorInvalidValue);
    }
    __atomic_fetch_add(&r->launches, 1, __ATOMIC_RELAXED);
    launch L{r->k, r->k->pack(args), grid, block, smem};
    const void *at = nullptr;
    int bad = r->k->check(L.args, &at);
    if (bad >= 0)
        die("kernel %s: argument %d points to host memory the GPU cannot reach (%p: not from "
            "cudaMalloc or cudaHostAlloc)", r->name.c_str(), bad, at);
    enqueue(resolve(stream), [L] { run_launch(L); });
    return cudaSuccess;
}

/* The launch nvcc's generated host code made before CUDA 13 (and any explicit call). */
API cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                 size_t smem, cudaStream_t stream)
{
    cudaKernel_t k;
    cudaError_t e = __cudaGetKernel(&k, func);
    return e != cudaSuccess ? e : __cudaLaunchKernel(k, grid, block, args, smem, stream);
}

API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

API const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    default: return "unknown error (emulated runtime)";
    }
}

static int device_count()
{
    static int n = (int)env_size("FGEMU_DEVICES", 1);
    return n;
}

API cudaError_t cudaGetDeviceCount(int *n)
{
    *n = device_count();
    return *n ? cudaSuccess : ret(cudaErrorNoDevice);
}

API cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= device_count())
        return ret(device_count() ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    return cudaSuccess; /* the devices share one memory and one set of streams */
}

API cudaError_t cudaDeviceSynchronize(void)
{
    sync_all();
    return cudaSuccess;
}

API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    if (!device_count())
        return ret(cudaErrorNoDevice);
    std::lock_guard<std::mutex> g(g_mem_mu);
    *total_b = total_mem();
    *free_b = total_mem() - g_used;
    return cudaSuccess;
}

API cudaError_t cudaMalloc(void **p, size_t n) { return ret(mem_new(p, n, MEM_DEVICE)); }

API cudaError_t cudaFree(void *p)
{
    sync_all(); /* cudaFree waits for the device */
    return ret(mem_free(p, MEM_DEVICE));
}

API cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    return ret(mem_new(p, n, MEM_PINNED));
}

API cudaError_t cudaFreeHost(void *p)
{
    sync_all();
    return ret(mem_free(p, MEM_PINNED));
}

/* Page-lock the caller's [p, p + n) in place. As the runtime: a range overlapping pinned
 * memory is cudaErrorHostMemoryAlreadyRegistered, one overlapping device memory or empty is
 * cudaErrorInvalidValue; its pages must be mapped (they are touched, as pinning faults them in:
 * an unmapped one is reported and refused). */
API cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags)
{
    (void)flags;
    if (!p || n == 0)
        return ret(cudaErrorInvalidValue);
    uintptr_t a = (uintptr_t)p, pg = page(), lo = a & ~(pg - 1);
    std::vector<unsigned char> in((a + n - lo + pg - 1) / pg);
    if (mincore((void *)lo, a + n - lo, in.data()) != 0 && errno == ENOMEM) {
        warn("cudaHostRegister(%p, %zu): not all of it is mapped memory", p, n);
        return ret(cudaErrorInvalidValue);
    }
    std::lock_guard<std::mutex> g(g_mem_mu);
    auto it = g_mem.lower_bound(a);
    if (it != g_mem.begin())
        --it;
    for (; it != g_mem.end() && (uintptr_t)it->second.ptr < a + n; ++it) {
        const alloc &x = it->second;
        if ((uintptr_t)x.ptr + (x.size ? x.size : 1) <= a)
            continue;
        if (x.kind == MEM_DEVICE) {
            warn("cudaHostRegister(%p, %zu): overlaps device memory at %p", p, n, (void *)x.ptr);
            return ret(cudaErrorInvalidValue);
        }
        warn("cudaHostRegister(%p, %zu): overlaps pinned memory at %p (%zu bytes)", p, n,
             (void *)x.ptr, x.size);
        return ret(cudaErrorHostMemoryAlreadyRegistered);
    }
    g_mem[a] = alloc{(char *)p, n, nullptr, 0, MEM_REGISTERED};
    if ((g_pinned += n) > g_pinned_peak)
        g_pinned_peak = g_pinned;
    return cudaSuccess;
}

/* The start of a registration, and only that: anything else is
 * cudaErrorHostMemoryNotRegistered. Waits for the device (copies through it may be in flight). */
API cudaError_t cudaHostUnregister(void *p)
{
    sync_all();
    std::lock_guard<std::mutex> g(g_mem_mu);
    auto it = g_mem.find((uintptr_t)p);
    if (!p || it == g_mem.end() || it->second.kind != MEM_REGISTERED) {
        warn("cudaHostUnregister(%p): not the start of a registered range", p);
        return ret(cudaErrorHostMemoryNotRegistered);
    }
    g_pinned -= it->second.size;
    g_mem.erase(it);
    return cudaSuccess;
}

API cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    (void)s; /* ready at once: later work on any stream may use it, as the pool allows */
    return ret(mem_new(p, n, MEM_DEVICE));
}

API cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    alloc a;
    if (!p)
        return cudaSuccess;
    if (!find(p, &a) || a.ptr != p || a.kind != MEM_DEVICE) {
        warn("cudaFreeAsync(%p): not the start of a live device allocation", p);
        return ret(cudaErrorInvalidValue);
    }
    enqueue(resolve(s), [p] { mem_free(p, MEM_DEVICE); });
    return cudaSuccess;
}

API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    static int dummy;
    if (device < 0 || device >= device_count())
        return ret(cudaErrorInvalidDevice);
    *pool = (cudaMemPool_t)&dummy;
    return cudaSuccess;
}

API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void *value)
{
    (void)pool, (void)attr, (void)value;
    return cudaSuccess;
}

API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    if (!a)
        return ret(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    alloc x;
    if (p && find(p, &x)) {
        a->type = x.kind == MEM_DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
        a->device = 0;
        a->devicePointer = (void *)p;
        a->hostPointer = x.kind != MEM_DEVICE ? (void *)p : nullptr;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        a->hostPointer = (void *)p;
    }
    return cudaSuccess;
}

/* Device side of a copy: p (kind_of's k, allocation a) starts n bytes inside one device
 * allocation; otherwise says why. */
static bool check_dev(int k, const alloc &a, const void *p, size_t n, const char *what)
{
    if (k != 2) {
        warn("%s: %p is not device memory", what, p);
        return false;
    }
    if (!ends_inside(a, p, n)) {
        warn("%s: %zu bytes at %p overrun the %zu-byte allocation at %p", what, n, p, a.size,
             (void *)a.ptr);
        return false;
    }
    return true;
}

static cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                        CUstream_st *s, bool sync_call, const char *what)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return ret(cudaErrorInvalidValue);
    alloc ad, as;
    int kd = kind_of(dst, &ad), ks = kind_of(src, &as);
    if (kind == cudaMemcpyDefault)
        kind = ks == 2 ? (kd == 2 ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                       : (kd == 2 ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    bool dev_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool dev_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dev_dst && !check_dev(kd, ad, dst, n, what)) ||
        (dev_src && !check_dev(ks, as, src, n, what)))
        return ret(cudaErrorInvalidValue);
    if ((!dev_dst && kd == 2) || (!dev_src && ks == 2)) {
        warn("%s: a device pointer on the host side of a %s copy", what,
             kind == cudaMemcpyHostToDevice ? "host-to-device" : "device-to-host");
        return ret(cudaErrorInvalidValue);
    }
    /* host memory pinned only where the whole range lies in one pinned allocation or
     * registration: the driver stages any other (across two registrations too) */
    bool straddles = false;
    if (!dev_dst && kd == 1 && !ends_inside(ad, dst, n))
        kd = 0, straddles = true;
    if (!dev_src && ks == 1 && !ends_inside(as, src, n))
        ks = 0, straddles = true;
    bool pageable = (!dev_dst && kd == 0) || (!dev_src && ks == 0);
    if (pageable && !sync_call && kind != cudaMemcpyHostToHost) {
        std::lock_guard<std::mutex> g(g_mem_mu);
        g_staged++;
        g_straddled += straddles;
    }
    if (sync_call || (pageable && kind == cudaMemcpyHostToDevice)) {
        /* after the stream's earlier work, before returning */
        if (sync_call)
            sync_all();
        else
            sync_stream(s);
        device_access acc;
        memmove(dst, src, n);
        return cudaSuccess;
    }
    uint64_t at = enqueue(s, [dst, src, n] { memmove(dst, src, n); });
    if (pageable) /* device to pageable host: returns when done */
        wait_point(s, at);
    return cudaSuccess;
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    return copy(dst, src, n, kind, legacy(), true, "cudaMemcpy");
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                                cudaStream_t s)
{
    return copy(dst, src, n, kind, resolve(s), false, "cudaMemcpyAsync");
}

API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (n == 0)
        return cudaSuccess;
    alloc a;
    if (!check_dev(kind_of(p, &a), a, p, n, "cudaMemsetAsync"))
        return ret(cudaErrorInvalidValue);
    enqueue(resolve(s), [p, v, n] { memset(p, v, n); });
    return cudaSuccess;
}

API cudaError_t cudaMemset(void *p, int v, size_t n)
{
    cudaError_t e = cudaMemsetAsync(p, v, n, nullptr);
    if (e == cudaSuccess)
        sync_stream(legacy());
    return e;
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    CUstream_st *s = new CUstream_st;
    s->blocking = !(flags & cudaStreamNonBlocking);
    start(s);
    {
        std::lock_guard<std::mutex> g(g_streams_mu);
        g_streams.push_back(s);
    }
    *out = s;
    return cudaSuccess;
}

API cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    CUstream_st *s = (CUstream_st *)st;
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> g(g_streams_mu);
        bool found = false;
        for (size_t i = 0; i < g_streams.size(); i++)
            if (g_streams[i] == s) {
                g_streams.erase(g_streams.begin() + (long)i);
                found = true;
                break;
            }
        if (!found)
            return ret(cudaErrorInvalidResourceHandle);
    }
    { /* its queued work still runs (CUDA releases a stream when its work is done) */
        std::lock_guard<std::mutex> g(s->mu);
        s->stop = true;
        s->cv.notify_one();
    }
    s->worker.join();
    delete s;
    return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    sync_stream(resolve(s));
    return cudaSuccess;
}

API cudaError_t cudaStreamQuery(cudaStream_t st)
{
    CUstream_st *s = resolve(st);
    std::lock_guard<std::mutex> g(s->mu);
    return s->done >= s->enq ? cudaSuccess : cudaErrorNotReady;
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new CUevent_st;
    return cudaSuccess;
}

API cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}

API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    CUstream_st *s = resolve(st);
    e->s = s;
    e->at = enqueue(s, [] {});
    return cudaSuccess;
}

API cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    if (e->s)
        wait_point(e->s, e->at);
    return cudaSuccess;
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    if (!e->s) /* never recorded: nothing to wait for */
        return cudaSuccess;
    CUstream_st *on = e->s;
    uint64_t at = e->at;
    enqueue(resolve(st), [on, at] { wait_point(on, at); });
    return cudaSuccess;
}

API int fgemu_enqueue(cudaStream_t s, void (*fn)(void *), void *arg)
{
    enqueue(resolve(s), [fn, arg] { fn(arg); });
    return 0;
}
