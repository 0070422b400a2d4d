/* pager.h - tiered, budgeted residency of file chunks: DISK -> HOST (pinned pool) -> DEVICE.
 *
 * The pager knows chunks, not tensors or transformers. A chunk is a byte range of a registered
 * file: (file, offset, length, padded length, optional XXH3, user tag, kind, group). The pager
 * moves chunks between tiers ahead of use (prefetch), hands out pinned views (acquire/release),
 * writes modified chunks back (write_back), and never lets a tier hold more than its byte budget:
 * when it cannot make room without dropping a pinned or in-flight chunk it refuses with
 * FG_ERR_PAGER_BUDGET. SPEC.md ("Pager") is normative for states, invariants and placement.
 *
 * Threads: a pager handle is NOT thread-safe; one thread at a time may call into it (callers
 * serialise). Overlap of I/O and compute comes from the kernel (io_uring runs the reads while
 * the caller computes), not from threads inside the pager; its one thread of its own faults the
 * homed region of the HOST pool in after place (pool.c), touching no pager state.
 *
 * Checksums: unless FG_PAGER_NO_VERIFY, every chunk read from a file is checked against its
 * XXH3 before anyone sees it: the one registered with it, or, for a chunk of a writable file
 * (KV cache, activations), the one the pager computed when it wrote the chunk back.
 *
 * Errors: every call returns an fg_status and fills *err (may be NULL). After an unrecoverable
 * error (EIO, ENOSPC, a file shorter than a registered chunk, a checksum mismatch) the pager is
 * in a sticky error state: every later call except stats and close returns the first error's
 * code, with a message that repeats it.
 */
#ifndef FG_PAGER_H
#define FG_PAGER_H

#include <stddef.h>
#include <stdint.h>

#include "fg_device.h"
#include "fg_error.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pager error codes (range -50..-59, see fg_error.h). */
enum {
    FG_ERR_PAGER_BUDGET = -50,  /* a tier budget would be exceeded (nothing evictable) */
    FG_ERR_PAGER_NO_TIER = -51, /* the DEVICE tier is absent (no GPU and no device backend) */
    FG_ERR_PAGER_PINNED = -52,  /* operation needs an unpinned chunk */
    FG_ERR_PAGER_DEVICE = -53,  /* the device backend failed (copy or allocation) */
    FG_ERR_PAGER_SHORT = -54,   /* a read returned end-of-file inside a registered chunk */
};

typedef enum fg_tier {
    FG_TIER_DISK = 0,
    FG_TIER_HOST = 1,
    FG_TIER_DEVICE = 2,
} fg_tier;
#define FG_TIER_COUNT 3

typedef enum fg_chunk_kind {
    FG_CHUNK_WEIGHT = 0, /* placed with (wg, wc, wd) */
    FG_CHUNK_KV = 1,     /* placed with (cg, cc, cd) */
    FG_CHUNK_ACT = 2,    /* placed with (hg, hc, hd) */
} fg_chunk_kind;
#define FG_CHUNK_KIND_COUNT 3

/* ---- I/O engines (SQLite-VFS style): the pager does all file I/O through one of these. ---- */
typedef struct fg_pager_io fg_pager_io;

typedef struct fg_pager_io_op {
    int handle;     /* from open */
    int write;      /* 0 read, 1 write */
    void *buf;      /* 4096-aligned (O_DIRECT) */
    uint64_t len;   /* multiple of 4096 */
    uint64_t off;   /* file offset, multiple of 4096 */
    uint64_t user;  /* returned with the completion */
} fg_pager_io_op;

typedef struct fg_pager_io_done {
    uint64_t user;
    int64_t res; /* bytes transferred (may be short), or -errno */
} fg_pager_io_done;

typedef struct fg_pager_io_methods {
    const char *name;
    /* Open path for reading (and writing when writable). direct=1 asks for O_DIRECT; an engine
     * that needs it returns FG_ERR_UNSUPPORTED with sys_errno EINVAL when the file system
     * refuses it (the pager then falls back to the pread engine for that file). */
    int (*open)(fg_pager_io *io, const char *path, int writable, int *handle, fg_err *err);
    void (*close)(fg_pager_io *io, int handle);
    /* Optional (NULL): [base, base+len) is the pool I/O buffers come from, in granules of
     * `granule` bytes (at most 8192 of them); nothing is registered yet. */
    int (*register_memory)(fg_pager_io *io, void *base, size_t len, size_t granule, fg_err *err);
    /* Required with register_memory: granules g and g+1 are committed; register the piece
     * [g * granule, (g + 2) * granule) (clipped to the pool) for zero-copy fixed-buffer I/O of
     * ops that lie inside it. Called at most once per g. */
    int (*register_piece)(fg_pager_io *io, unsigned g, fg_err *err);
    /* Queue one op; the caller never has more than depth() ops outstanding. */
    int (*submit)(fg_pager_io *io, const fg_pager_io_op *op, fg_err *err);
    /* Reap up to max completions into done[], blocking until at least min are available
     * (min may be 0: poll). *n receives the count. */
    int (*reap)(fg_pager_io *io, unsigned min, fg_pager_io_done *done, unsigned max, unsigned *n,
                fg_err *err);
    unsigned (*depth)(fg_pager_io *io);
    /* Optional (NULL): short description of features in use (registered buffers, ...). */
    const char *(*describe)(fg_pager_io *io);
    void (*destroy)(fg_pager_io *io); /* waits for nothing: the pager drains before calling */
} fg_pager_io_methods;

/* Every engine object starts with this header. */
struct fg_pager_io {
    const fg_pager_io_methods *m;
};

/* io_uring with O_DIRECT, a sparse registered-file table, registered buffers (via
 * register_memory) and queue_depth entries (0 = 32). FG_ERR_UNSUPPORTED when io_uring is not
 * available. The caller owns *out until it hands it to fg_pager_open or calls m->destroy. */
int fg_pager_io_uring_create(unsigned queue_depth, fg_pager_io **out, fg_err *err);
/* Synchronous pread/pwrite engine; direct opens use O_DIRECT when the file system allows it
 * and plain buffered I/O otherwise. Ownership as above. */
int fg_pager_io_pread_create(unsigned queue_depth, int use_direct, fg_pager_io **out, fg_err *err);

/* Fault injection for tests: wraps inner (owning it from now on, even on failure). */
typedef enum fg_pager_fault_kind {
    FG_FAULT_NONE = 0,
    FG_FAULT_EIO = 1,        /* the nth read (or write) completes with -EIO */
    FG_FAULT_SHORT_EOF = 2,  /* the nth read returns half, every later read of it returns 0 */
    FG_FAULT_SHORT_ONCE = 3, /* the nth read returns half once (a transient short read) */
    FG_FAULT_ENOSPC = 4,     /* the nth write completes with -ENOSPC */
    FG_FAULT_NO_DIRECT = 5,  /* every direct open fails with EINVAL (file system refusal) */
    FG_FAULT_SUBMIT = 6,     /* the nth submit itself fails with FG_ERR_IO (EAGAIN-like) */
    FG_FAULT_CORRUPT_WRITE = 7, /* the nth write reaches the file with its first byte flipped
                                   (the caller's buffer is as it was once the write completes) */
    FG_FAULT_CORRUPT_READ = 8,  /* the nth read completes with its first byte flipped */
} fg_pager_fault_kind;

typedef struct fg_pager_fault {
    fg_pager_fault_kind kind;
    uint64_t nth; /* 1-based count of matching ops (reads for EIO/SHORT, writes for ENOSPC) */
} fg_pager_fault;
int fg_pager_io_fault_create(fg_pager_io *inner, const fg_pager_fault *f, fg_pager_io **out,
                             fg_err *err);

/* ---- DEVICE tier: a device object (core/fg_device.h), the same one a compute backend on that
 * device uses. The pager allocates its whole DEVICE budget at open (FG_BUFT_DEVICE) and copies
 * chunks with copy() between its HOST pool and that region. Its HOST pool is an mmap
 * reservation whose granules are pinned through the device's pin entry as first used (a budget
 * is a ceiling for pinned memory too); a device with PINNED memory but no pin entry gets the
 * whole pool as one FG_BUFT_PINNED allocation; with neither, granules are mlocked as first used.
 * ---- */
typedef fg_device fg_pager_device; /* the name the pager's API used before the device object */

/* A simulated device: DEVICE buffers in plain host memory, so tests exercise all three tiers
 * without a GPU; PINNED allocations and pin/unpin are recorded and checked (device.c). Caller
 * owns *out until handed to fg_pager_open. */
int fg_pager_device_host_create(fg_device **out, fg_err *err);
typedef struct fg_pager_device_stats {
    uint64_t pinned, pinned_peak; /* bytes pinned now, at most (PINNED allocations and pins) */
    uint64_t pins;                /* pin() calls that pinned a range */
    uint64_t pinned_copies;       /* copies whose host side was named PINNED (all pinned) */
    uint64_t misuse;              /* overlapping pins, unpins of nothing, copies naming
                                     unpinned memory PINNED: 0 in a correct program */
} fg_pager_device_stats;
/* The simulated device's counters (zeros for another device). */
void fg_pager_device_host_stats(const fg_device *d, fg_pager_device_stats *out);
/* pin() refuses once `bytes` would be pinned (0: no limit), as an OS short of lockable memory. */
void fg_pager_device_host_pin_limit(fg_device *d, uint64_t bytes);
/* The CUDA device (GPU 0; core/fg_device_cuda.h, the CUDA backend's): cudaMalloc, cudaHostAlloc,
 * copies on its copy stream with events, so prefetched uploads overlap the caller.
 * FG_ERR_UNSUPPORTED when built without CUDA or with no GPU. */
int fg_pager_device_cuda_create(fg_device **out, fg_err *err);

/* ---- The pager ---- */
typedef struct fg_pager fg_pager;

enum {
    FG_PAGER_VERIFY = 1,    /* the default, kept for old callers: no effect */
    FG_PAGER_NO_MLOCK = 2,  /* do not try to lock the HOST pool */
    FG_PAGER_NO_CUDA = 4,   /* never auto-create the CUDA device backend */
    FG_PAGER_NO_VERIFY = 8, /* skip checksums: loads are not checked against a chunk's XXH3 and
                               write-backs of chunks registered without one record none */
    FG_PAGER_VERIFY_ONCE = 16, /* check a chunk's bytes the first time they load, not again
                                  until a write-back changes them: a file damaged at rest, a
                                  foreign file or a moved offset is still caught, a disk that
                                  returns other bytes on a later read of the same chunk is not */
    FG_PAGER_NO_PREFAULT = 32, /* commit the HOST pool only as it is used: place does not
                                  commit the homed region ahead (pool.c); also set by the
                                  environment's FG_PAGER_PREFAULT=0 */
};

typedef enum fg_pager_engine {
    FG_PAGER_ENGINE_AUTO = 0, /* io_uring when available, else pread */
    FG_PAGER_ENGINE_URING = 1,
    FG_PAGER_ENGINE_PREAD = 2,
} fg_pager_engine;

typedef struct fg_pager_config {
    uint64_t budget[FG_TIER_COUNT]; /* bytes; [DISK] ignored; [HOST] > 0; [DEVICE] 0 = no tier */
    unsigned queue_depth;           /* ops in flight (0 = 32) */
    uint64_t io_block;              /* bytes per I/O op, multiple of 4096 (0 = 1 MiB) */
    fg_pager_engine engine;         /* ignored when io is set */
    fg_pager_io *io;                /* NULL, or an engine the pager takes ownership of */
    fg_device *device;              /* NULL (CUDA auto when available), or owned from now on */
    unsigned flags;                 /* FG_PAGER_* */
    /* Called with one-line notices (pread fallback, pool not locked); NULL = keep silent
     * (the last notice is in stats). Must not call into the pager. */
    void (*notice)(void *ctx, const char *line);
    void *notice_ctx;
    /* Optional: what chunk `tag` is, for error messages ("tensor 'w' chunk 3"): writes a
     * NUL-terminated string of at most n bytes into buf. Must not call into the pager. */
    void (*label)(void *ctx, uint64_t tag, char *buf, size_t n);
    void *label_ctx;
} fg_pager_config;

/* Create a pager: reserves the HOST pool (budget[HOST] bytes of address space; memory arrives
 * with use, never past the budget: a budget is a ceiling) and allocates the DEVICE pool.
 * On success *out is owned by the caller until fg_pager_close; on failure every object the
 * config handed over (io, device) has been destroyed. */
int fg_pager_open(const fg_pager_config *cfg, fg_pager **out, fg_err *err);
/* Wait for in-flight I/O, free pools, close files, destroy engines and device. Dirty chunks are
 * NOT written back (call write_back first). Every view becomes invalid. NULL accepted. */
void fg_pager_close(fg_pager *p);

/* Register a file; the pager opens it (read-only, or read-write when writable) and keeps it
 * open until close. *file is its id. path is copied. A NULL path registers a memory-only
 * "file" for chunks that never leave RAM (fresh chunks homed in HOST): any read or write of it
 * fails naming the chunk, so a placement that would need it is caught, and no file is made. */
int fg_pager_add_file(fg_pager *p, const char *path, int writable, uint32_t *file, fg_err *err);

typedef struct fg_pager_chunk_desc {
    uint32_t file;      /* from fg_pager_add_file */
    uint64_t offset;    /* multiple of 4096 */
    uint64_t length;    /* payload bytes, > 0 */
    uint64_t padded;    /* >= length, multiple of 4096; bytes read/written and budgeted */
    uint64_t xxh3;      /* of the payload, when has_xxh3 */
    int has_xxh3;
    uint64_t tag;       /* caller's tag, returned in views */
    fg_codec codec;     /* returned in views (zeroed when the caller has none) */
    fg_chunk_kind kind;
    uint32_t group;     /* placement unit: a layer for weights, a tensor for KV/activations */
    int fresh;          /* (writable files) the bytes are undefined until the chunk is first
                           written back: loads before that read nothing and hand out zeros */
    uint32_t rank;      /* placement rank, < FG_PLACE_RANKS: a kind's chunks of a lower rank are
                           homed before any of a higher one (0 for all: FlexGen's rule) */
} fg_pager_chunk_desc;

/* Placement ranks: how often a chunk is read, hottest first. A caller ranks what it reads every
 * step 0, what it reads for some steps (a mixture's routed experts) 1, what it reads a row at a
 * time (an embedding table) 2. */
#define FG_PLACE_RANKS 4

/* The placement rule's threshold for rank r (SPEC.md "Placement"): a cumulative fraction t of a
 * kind's bytes (g, or g + c), given the kind's bytes per rank, becomes the share of rank r's own
 * bytes it covers once the ranks below are covered whole: clamp((t x total - bytes of the ranks
 * below r) / bytes[r], 0, 1); exactly t when rank r holds every byte. The pager, the engine's
 * plan and the policy search place by this one function. */
double fg_place_threshold(const uint64_t bytes[FG_PLACE_RANKS], uint32_t r, double t);
/* The tier the rule gives a chunk of s bytes after `before` bytes of its (kind, rank, group)
 * run of `total` bytes, in id order: its midpoint m = (before + s / 2) / total against its
 * rank's thresholds dev (of g) and host (of g + c): DEVICE when m < dev, HOST when m < host,
 * else DISK. */
fg_tier fg_place_tier(uint64_t before, uint64_t s, uint64_t total, double dev, double host);

/* Register a chunk; ids are dense and start at 0. The descriptor is copied. */
int fg_pager_add_chunk(fg_pager *p, const fg_pager_chunk_desc *d, uint32_t *id, fg_err *err);
/* Register every chunk of a .fgt file in file order (tensor i, chunk j): tag = i << 32 | j,
 * group = i, codec = the tensor's, padded = length rounded up to 4096. *first and *count get
 * the id range. The reader is used only during the call. */
int fg_pager_add_fgt(fg_pager *p, const char *path, int writable, fg_chunk_kind kind,
                     uint32_t *first, uint32_t *count, fg_err *err);
/* Copy of a registered chunk's descriptor. */
int fg_pager_chunk(const fg_pager *p, uint32_t id, fg_pager_chunk_desc *out);
uint32_t fg_pager_chunk_count(const fg_pager *p);

/* Placement fractions, FlexGen's order: [0] = GPU (DEVICE), [1] = CPU (HOST), [2] = disk.
 * Each triple sums to 1 (within 1e-6). */
typedef struct fg_pager_policy {
    double w[3]; /* weights: wg, wc, wd */
    double c[3]; /* KV cache: cg, cc, cd */
    double h[3]; /* activations: hg, hc, hd */
} fg_pager_policy;

/* Assign every chunk a home tier (rule in SPEC.md "Placement") and check it fits: homed bytes
 * plus the largest chunk streamed through a tier must not exceed its budget. Refused, with no
 * home changed, with FG_ERR_INVALID_ARG when a triple is not fractions summing to 1,
 * FG_ERR_PAGER_NO_TIER when a fraction > 0 targets an absent DEVICE tier, FG_ERR_PAGER_BUDGET
 * when it does not fit. Resident chunks stay where they are (pinned ones included); homes take
 * effect at the next acquire with FG_TIER_DISK and in eviction order. May be called again. */
int fg_pager_place(fg_pager *p, const fg_pager_policy *pol, fg_err *err);
/* Home tier of chunk id (FG_TIER_DISK before place). */
fg_tier fg_pager_home(const fg_pager *p, uint32_t id);

typedef uint64_t fg_pager_ticket; /* 0 = nothing to wait for */

/* Start moving chunk id to tier (HOST or DEVICE) without waiting. Returns a ticket for
 * fg_pager_wait in *ticket (0 when already resident there). A chunk already on its way gets the
 * same ticket (deduplicated). FG_ERR_PAGER_BUDGET when no room can be made now. */
int fg_pager_prefetch(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_ticket *ticket,
                      fg_err *err);
/* Wait until the load behind ticket finished; returns its outcome. */
int fg_pager_wait(fg_pager *p, fg_pager_ticket ticket, fg_err *err);

typedef struct fg_pager_view {
    void *ptr;       /* HOST: a CPU pointer; DEVICE: a backend pointer. padded bytes valid */
    uint64_t length; /* payload bytes */
    uint64_t padded;
    uint64_t tag;
    fg_codec codec;
    fg_tier tier;
    uint32_t id;
} fg_pager_view;

/* Make chunk id resident in tier (HOST or DEVICE; FG_TIER_DISK means "its home, or HOST when
 * homed on disk"), waiting for I/O, and pin it. The view stays valid until the matching
 * release; a chunk may be acquired several times (pins count), all in one tier. */
int fg_pager_acquire(fg_pager *p, uint32_t id, fg_tier tier, fg_pager_view *view, fg_err *err);

enum {
    FG_PAGER_DIRTY = 1,        /* release flag: the caller modified the bytes */
    FG_PAGER_WRITE_BEHIND = 2, /* ... and will not use them again soon: a dirty HOST chunk
                                  released by its last pin starts its write-back now, without
                                  waiting (WRITING_BACK), so its later eviction is a drop */
};
/* Unpin; the view is invalid afterwards. DIRTY needs a writable file. A write-behind that
 * fails makes the pager sticky (the next call reports it) and leaves the chunk dirty. */
int fg_pager_release(fg_pager *p, const fg_pager_view *view, unsigned flags, fg_err *err);
/* Write chunk id's current bytes (padded) back to its file now, synchronously; it stays
 * resident and becomes clean. The chunk must be resident and its file writable. The XXH3 of
 * the payload written becomes the chunk's checksum (unless FG_PAGER_NO_VERIFY and the chunk was
 * registered without one), checked when the chunk is read back. */
int fg_pager_write_back(fg_pager *p, uint32_t id, fg_err *err);
/* Drop chunk id from memory (writing it back first when dirty). Refused when pinned. */
int fg_pager_evict(fg_pager *p, uint32_t id, fg_err *err);

typedef struct fg_pager_stats {
    uint64_t moved[FG_TIER_COUNT][FG_TIER_COUNT]; /* bytes moved [from][to] */
    uint64_t used[FG_TIER_COUNT], peak[FG_TIER_COUNT], budget[FG_TIER_COUNT];
    uint64_t hits, misses;      /* acquires that found / did not find the chunk in place */
    uint64_t prefetches, dedup; /* prefetch calls; of them, chunks already on their way */
    uint64_t evictions, write_backs, io_ops, short_reads;
    uint64_t wasted;            /* evictions of prefetched chunks never acquired */
    uint64_t inflight_sum;      /* sum over submits of the ops in flight after it (mean depth) */
    uint64_t stall_ns;          /* time acquire/wait spent blocked on I/O or uploads */
    uint64_t async_uploads;     /* HOST -> DEVICE copies started without waiting for them */
    uint64_t host_committed;    /* bytes of the HOST pool committed so far (first used,
                                   locked, registered; the homed region from place on):
                                   grows with use, never past budget */
    uint64_t host_pinned;       /* bytes of the HOST pool pinned by the device: its granules
                                   pinned with use (the device's pin entry), <= host_committed;
                                   the whole budget for a device without pin (cudaHostAlloc) */
    int host_locked;            /* HOST pool is mlock'ed or pinned (cudaHostRegister/Alloc) */
    int device_present;
    unsigned fallback_files;    /* files read through the pread engine (O_DIRECT refused) */
    int sticky;                 /* fg_status of the sticky error, 0 when none */
    char engine[96];            /* "io_uring(qd=32, registered buffers, registered files)" */
    char notice[160];           /* the last notice, "" when none */
} fg_pager_stats;

/* Snapshot of the counters; valid in every state, including after a sticky error. */
void fg_pager_stats_get(const fg_pager *p, fg_pager_stats *out);

/* Check the invariants written at the top of pager.c (O(chunks + extents)); FG_ERR_CORRUPT
 * naming the first one broken. For tests and debugging; the library never calls it unless
 * built with FG_PAGER_DEBUG. */
int fg_pager_check(const fg_pager *p, fg_err *err);

/* "disk", "host", "device". */
const char *fg_tier_name(fg_tier t);

#ifdef __cplusplus
}
#endif
#endif
