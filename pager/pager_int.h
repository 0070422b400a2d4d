/* pager_int.h - private structures of the pager (see pager.c for the design). */
#ifndef FG_PAGER_INT_H
#define FG_PAGER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pager.h"

#define FG_PAGE 4096ull

/* ---- extent allocator over one pool (pool.c) ---- */
typedef struct fg_extent {
    uint64_t off, len; /* bytes, multiples of FG_PAGE */
} fg_extent;

typedef struct fg_arena {
    uint64_t size;      /* pool bytes (the tier budget) */
    uint64_t used;      /* allocated bytes */
    uint64_t peak;
    fg_extent *free;    /* sorted by off, coalesced */
    uint32_t n_free, cap_free;
} fg_arena;

int fg_arena_init(fg_arena *a, uint64_t size);
void fg_arena_fini(fg_arena *a);
/* First fit from the bottom; 0 on success, -1 when no free extent is large enough. */
int fg_arena_alloc(fg_arena *a, uint64_t len, uint64_t *off);
/* Within [lo, hi): first fit from the bottom, or (high) from the top, splitting an extent when
 * the piece comes from its middle; -1 also when growing the free list fails. */
int fg_arena_alloc_in(fg_arena *a, uint64_t len, uint64_t lo, uint64_t hi, int high,
                      uint64_t *off);
/* 0 on success, -1 on allocation failure of the free list (the arena is unchanged). */
int fg_arena_free(fg_arena *a, uint64_t off, uint64_t len);
uint64_t fg_arena_free_bytes(const fg_arena *a);

/* ---- the HOST pool's memory (pool.c): reserved at open, committed granule by granule ---- */
#define FG_POOL_MAX_GRANULES 8192u
/* How the pool's memory is held: MMAP plain; LOCKED mlock'ed granule by granule; PINNED one
 * allocation of the device's pinned memory, whole (a device without pin); PIN_LAZY reserved
 * like MMAP and pinned granule by granule through the device's pin entry. */
enum { FG_POOL_MMAP = 0, FG_POOL_LOCKED = 1, FG_POOL_PINNED = 2, FG_POOL_PIN_LAZY = 3 };
/* committed[g] bits */
enum { FG_GRAN_COMMITTED = 1, FG_GRAN_REGISTERED = 2, FG_GRAN_PINNED = 4, FG_GRAN_PIN_START = 8 };
/* A pinned run (one pin() range of whole granules, pool.c) is at least (when granules are
 * smaller) and at most this many bytes. */
#define FG_POOL_PIN_RUN_MIN (8ull << 20)
#define FG_POOL_PIN_RUN_MAX (256ull << 20)

typedef struct fg_hostpool {
    uint8_t *base;            /* [size] bytes of address space */
    uint64_t size;            /* the HOST budget */
    uint64_t granule;         /* bytes per granule */
    uint32_t n_gran;
    uint8_t *committed;       /* [n_gran]: FG_GRAN_* bits (0: not yet committed) */
    uint64_t committed_bytes; /* sum of committed granules' bytes, <= size */
    uint64_t pinned_bytes;    /* sum of FG_GRAN_PINNED granules' bytes, <= committed_bytes */
    uint32_t pinned_gran;     /* FG_GRAN_PINNED granules */
    int how;                  /* FG_POOL_*: how granules committed from now on are held */
    int lock;                 /* mlock granules when not pinning them */
    int registered;           /* the engine takes pieces for fixed-buffer I/O */
    fg_device *pin_dev;       /* the device that pinned the FG_GRAN_PINNED granules */
    fg_pager_io *io;
    /* committing ahead (fg_hostpool_prefault): the helper thread faults granules [pre_lo,
     * pre_hi) in, in order, and locks them when pre_lock; the caller's thread owns every other
     * field, the helper reads only base, granule, size and these */
    pthread_t pre_thread;
    int pre_running;          /* the helper was started and not yet joined */
    int pre_lock;             /* the helper mlocks (the pool is LOCKED); else MADV_POPULATE_WRITE */
    uint32_t pre_lo, pre_hi;
    atomic_uint pre_next;     /* the helper's progress: [pre_lo, pre_next) are faulted in */
    atomic_int pre_stop;      /* close: stop after the granule in hand */
    atomic_int pre_errno;     /* mlock's errno in the helper (0: none); it went on unlocked */
    int pre_noted;            /* pre_errno reported as a notice */
} fg_hostpool;

/* Reserve the pool: address space pinned granule by granule when dev has a pin entry, else
 * the device's PINNED memory whole when dev offers it, else mmap. A message that is not an
 * error (a refusal worked around) goes to note[note_n]. */
int fg_hostpool_open(fg_hostpool *h, fg_device *dev, uint64_t size, uint64_t io_block, int lock,
                     char *note, size_t note_n, fg_err *err);
void fg_hostpool_attach(fg_hostpool *h, fg_pager_io *io, char *note, size_t note_n);
/* Commit the granules [off, off+len) covers (plus one): never fails; a refusal to pin, lock or
 * register is written to note and the pool goes on without. */
void fg_hostpool_commit(fg_hostpool *h, uint64_t off, uint64_t len, char *note, size_t note_n);
/* Commit the granules [off, off+len) covers (plus one) now, as fg_hostpool_commit would on their
 * first use, and start a helper thread that faults them in (and mlocks them, when locking) from
 * the bottom up, so the kernel's zeroing of fresh pages runs beside the caller's reads and
 * compute instead of inside its first touches. Only for a pool held plain or locked (pinning
 * goes through the device, whose calls are the caller's thread's: PIN_LAZY and PINNED pools are
 * left as they are); a second call waits for the first helper. Never fails: without a thread
 * (pthread_create refused) the granules are faulted in by this call. */
void fg_hostpool_prefault(fg_hostpool *h, uint64_t off, uint64_t len, char *note, size_t note_n);
/* The helper's refusal to lock (once, as a notice) and how the pool is held from then on. */
void fg_hostpool_poll(fg_hostpool *h, char *note, size_t note_n);
/* The pool's memory is locked or pinned (fg_pager_stats.host_locked). */
int fg_hostpool_locked(const fg_hostpool *h);
/* The buffer type of [off, off+len) for the device's copies: PINNED when all of it is pinned. */
fg_buft fg_hostpool_buft(const fg_hostpool *h, uint64_t off, uint64_t len);
/* Unpins (after the device's copies complete) and frees; dev: the one given to open. */
void fg_hostpool_close(fg_hostpool *h, fg_device *dev);

/* ---- chunk states (pager.c "State machine") ---- */
typedef enum chunk_state {
    CS_DISK = 0,
    CS_LOADING = 1,      /* reads in flight into a HOST buffer */
    CS_HOST = 2,
    CS_DEVICE = 3,
    CS_WRITING_BACK = 4, /* writes in flight from its HOST extent (clean once they land) */
    CS_ERROR = 5,
    CS_UPLOADING = 6,    /* a HOST -> DEVICE copy in flight: holds both extents and an event */
} chunk_state;

typedef struct pchunk {
    fg_pager_chunk_desc d;
    uint8_t state;     /* chunk_state */
    uint8_t target;    /* LOADING: fg_tier it goes to when the reads finish */
    uint8_t home;      /* fg_tier from place */
    uint8_t dirty;
    uint32_t pins;
    uint8_t pin_tier;  /* tier of the views while pins > 0 */
    uint64_t host_off; /* HOST pool offset while holding a host buffer */
    uint64_t dev_off;  /* DEVICE pool offset while in DEVICE */
    uint64_t queued;   /* bytes of the transfer not yet submitted */
    uint32_t pending;  /* ops in flight */
    uint32_t gen;      /* load generation; tickets carry it */
    int err;           /* ERROR: fg_status */
    uint64_t lru;      /* tick of last use */
    uint32_t next_q;   /* link in the submission queue (UINT32_MAX = none) */
    uint8_t in_q;
    uint8_t used;       /* acquired since its last load (an unused prefetch is evicted last) */
    uint8_t verified;   /* its bytes on disk matched its checksum once (FG_PAGER_VERIFY_ONCE) */
    uint8_t xfer_write; /* the queued/pending transfer is a write */
    uint8_t fresh;      /* never written back: its bytes on disk are undefined (loads zero-fill) */
    uint32_t hold;      /* > 0 while a pager call works on the chunk: not evictable */
    uint8_t *xfer;      /* buffer of the transfer (NULL = its HOST extent) */
    fg_event *ev;       /* UPLOADING: completes the copy */
    uint64_t wr_xxh3;   /* a write in flight: the XXH3 of what it writes */
} pchunk;

typedef struct pfile {
    char *path;
    int writable;
    int handle;
    fg_pager_io *io; /* primary engine, or the pread fallback */
} pfile;

typedef struct op_slot {
    uint32_t chunk;
    uint64_t off;  /* offset inside the chunk */
    uint64_t len;
    uint8_t write, used;
    fg_pager_io *io;
} op_slot;

struct fg_pager {
    fg_pager_config cfg;
    fg_pager_io *io;       /* primary engine */
    fg_pager_io *fallback; /* pread engine for files that refuse O_DIRECT (lazy) */
    fg_device *dev;
    fg_hostpool hp;        /* HOST pool */
    void *dev_base;        /* DEVICE pool (backend pointer) */
    fg_arena arena[FG_TIER_COUNT]; /* [HOST], [DEVICE] used */
    uint64_t split[FG_TIER_COUNT]; /* pool bytes [0, split) for chunks homed in the tier,
                                      [split, size) for chunks passing through; set by place
                                      (0 before: one region) */
    pfile *files;
    uint32_t n_files, cap_files;
    pchunk *chunks;
    uint32_t n_chunks, cap_chunks;
    op_slot *ops;          /* depth slots */
    uint32_t *free_ops;
    uint32_t n_free_ops, depth;
    uint32_t q_head, q_tail; /* chunks with queued (unsubmitted) bytes, FIFO */
    uint32_t inflight;
    uint32_t uploading;    /* chunks in UPLOADING */
    uint64_t tick;
    int in_pump;           /* > 0 while completions are processed: make_room must not wait */
    int no_wait;           /* > 0 inside prefetch: make_room must not wait */
    fg_err sticky;         /* code != 0: sticky error */
    fg_pager_stats st;
    uint32_t dbg_every;    /* FG_PAGER_DEBUG: the invariant check runs after every dbg_every-th
                              changing call (FG_PAGER_CHECK_EVERY, default 1) */
    uint64_t dbg_calls;
};

/* hash.c: XXH3-64 (AVX2 when the CPU has it); _ref is libxxhash's, _avx2 needs AVX2. */
uint64_t fg_pager_xxh3(const void *p, size_t n);
uint64_t fg_pager_xxh3_ref(const void *p, size_t n);
uint64_t fg_pager_xxh3_avx2(const void *p, size_t n);

void fg_pager_notice(fg_pager *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
