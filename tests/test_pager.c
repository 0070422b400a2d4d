/* test_pager.c - the pager: data through every engine and tier, budgets under random workloads,
 * prefetch dedup, pinned chunks surviving eviction, injected faults, sticky errors, placement,
 * write-back, .fgt registration, checksums on every read (weights and written-back chunks).
 *
 * The DEVICE tier runs on the pager's plain simulated device (synchronous copies) and, where a
 * test says so, on compute/'s simulated accelerator (memory host code cannot touch, a copy
 * engine thread, a link of set speed), so uploads are asynchronous as on a GPU.
 *
 * Files live in two places: a directory on the real disk (under the build dir, so O_DIRECT
 * works) and /dev/shm (tmpfs) when present. The O_DIRECT refusal path is driven by the fault
 * engine (FG_FAULT_NO_DIRECT), since some kernels let tmpfs accept O_DIRECT.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "backend.h"
#include "pager.h"
#include "pager_int.h"
#include "testutil.h"

#ifndef FG_TEST_DISKDIR
#define FG_TEST_DISKDIR "."
#endif

static char g_dir[4096];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/pager-XXXXXX", FG_TEST_DISKDIR);
    ck_assert_msg(mkdtemp(g_dir) != NULL, "mkdtemp %s", g_dir);
}

static void teardown(void)
{
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *path_in(const char *dir, const char *name)
{
    static char b[4][8400];
    static int k;
    char *s = b[k++ & 3];
    snprintf(s, sizeof b[0], "%s/%s", dir, name);
    return s;
}

/* A raw data file: n chunks, chunk i of len[i] bytes at a 4096-aligned offset, zero padded. */
typedef struct dfile {
    const char *path;
    uint32_t n;
    uint64_t off[64], len[64], padded[64], xxh[64];
    uint64_t size;
} dfile;

static uint64_t pad(uint64_t n) { return (n + 4095) & ~4095ull; }

static void make_file(dfile *f, const char *path, uint32_t n, uint64_t seed)
{
    f->path = path;
    f->n = n;
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    ck_assert_int_ge(fd, 0);
    uint64_t pos = 8192, s = seed;
    for (uint32_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        f->len[i] = 1 + (s >> 33) % (200 * 1024);
        f->padded[i] = pad(f->len[i]);
        f->off[i] = pos;
        uint8_t *b = calloc(1, f->padded[i]);
        tu_fill(b, f->len[i], seed * 1000 + i);
        f->xxh[i] = XXH3_64bits(b, f->len[i]);
        ck_assert_int_eq(pwrite(fd, b, f->padded[i], (off_t)pos), (ssize_t)f->padded[i]);
        free(b);
        pos += f->padded[i] + 4096 * (i % 3); /* holes between some chunks */
    }
    f->size = pos;
    ck_assert_int_eq(ftruncate(fd, (off_t)pos), 0);
    close(fd);
}

static void reg_file(fg_pager *p, const dfile *f, int writable, fg_chunk_kind kind,
                     uint32_t groups)
{
    fg_err err;
    uint32_t file, id;
    ck_assert_msg(fg_pager_add_file(p, f->path, writable, &file, &err) == FG_OK, "%s", err.msg);
    for (uint32_t i = 0; i < f->n; i++) {
        fg_pager_chunk_desc d = {file, f->off[i], f->len[i], f->padded[i], f->xxh[i], 1,
                                 1000 + i, fg_codec_float(FG_CODEC_F32), kind,
                                 groups ? i % groups : 0};
        ck_assert_msg(fg_pager_add_chunk(p, &d, &id, &err) == FG_OK, "%s", err.msg);
        ck_assert_uint_eq(id, fg_pager_chunk_count(p) - 1);
    }
}

static void check_ok(fg_pager *p)
{
    fg_err err;
    ck_assert_msg(fg_pager_check(p, &err) == FG_OK, "%s", err.msg);
}

enum { ENG_URING, ENG_PREAD, ENG_FAULT_NONE, ENG_NO_DIRECT, ENG_COUNT };

/* Set before open_pager: the DEVICE tier on compute/'s simulated accelerator with this link
 * speed in GB/s (0 unlimited); g_sim is then a handle on it for reading device bytes. */
static double g_sim_link = -1;
static fg_device *g_sim;

/* Host bytes of a view: the view's own pointer, or on the sim accelerator where its device
 * bytes live (host code may not touch device addresses). */
static uint8_t *bytes_of(const fg_pager_view *v)
{
    if (v->tier == FG_TIER_DEVICE && g_sim)
        return fg_device_sim_alias(g_sim, v->ptr);
    return v->ptr;
}

static void sim_done(void)
{
    fg_device_free(g_sim);
    g_sim = NULL;
    g_sim_link = -1;
}

static fg_pager *open_pager(int eng, uint64_t host, uint64_t dev, unsigned qd, uint64_t block,
                            const fg_pager_fault *fault)
{
    fg_err err;
    fg_pager_config c = {{0, host, dev}, qd, block, FG_PAGER_ENGINE_AUTO, NULL, NULL,
                         FG_PAGER_VERIFY | FG_PAGER_NO_CUDA, NULL, NULL};
    fg_pager_io *io = NULL;
    if (eng == ENG_PREAD)
        ck_assert_int_eq(fg_pager_io_pread_create(qd, 1, &io, &err), FG_OK);
    else
        ck_assert_msg(fg_pager_io_uring_create(qd, &io, &err) == FG_OK, "%s", err.msg);
    if (eng == ENG_FAULT_NONE || eng == ENG_NO_DIRECT || fault) {
        fg_pager_fault f = {eng == ENG_NO_DIRECT ? FG_FAULT_NO_DIRECT : FG_FAULT_NONE, 0};
        ck_assert_int_eq(fg_pager_io_fault_create(io, fault ? fault : &f, &io, &err), FG_OK);
    }
    c.io = io;
    if (dev && g_sim_link >= 0) {
        ck_assert_int_eq(fg_device_sim_create(dev + (1 << 20), g_sim_link, &c.device, &err),
                         FG_OK);
        g_sim = c.device->iface->retain(c.device);
    } else if (dev) {
        ck_assert_int_eq(fg_pager_device_host_create(&c.device, &err), FG_OK);
    }
    fg_pager *p;
    ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    check_ok(p);
    return p;
}

static void expect_chunk(fg_pager *p, const dfile *f, uint32_t id, uint32_t i, fg_tier t)
{
    fg_err err;
    fg_pager_view v;
    ck_assert_msg(fg_pager_acquire(p, id, t, &v, &err) == FG_OK, "chunk %u: %s", id, err.msg);
    ck_assert_int_eq(v.tier, t);
    ck_assert_uint_eq(v.length, f->len[i]);
    ck_assert_uint_eq(v.tag, 1000 + i);
    ck_assert_uint_eq(v.codec.id, FG_CODEC_F32);
    ck_assert_uint_eq((uintptr_t)v.ptr % 4096, 0);
    ck_assert_msg(XXH3_64bits(v.ptr, v.length) == f->xxh[i], "chunk %u content differs", id);
    int nonzero = 0; /* padding read from the file: zeros */
    for (uint64_t k = v.length; k < v.padded; k++)
        nonzero |= ((uint8_t *)v.ptr)[k];
    ck_assert_int_eq(nonzero, 0);
    check_ok(p);
    ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    check_ok(p);
}

/* Every engine x every tier x disk and tmpfs: content equals the file's. */
START_TEST(t_engines_tiers)
{
    const char *dirs[2] = {g_dir, "/dev/shm"};
    for (int di = 0; di < 2; di++) {
        if (di == 1 && access(dirs[1], W_OK) != 0)
            continue;
        char name[64];
        snprintf(name, sizeof name, "fgpager-%d-%d.bin", (int)getpid(), _i);
        dfile f;
        make_file(&f, path_in(dirs[di], name), 24, 7 + (uint64_t)_i);
        for (int t = FG_TIER_HOST; t <= FG_TIER_DEVICE; t++) {
            fg_pager *p = open_pager(_i, 1 << 20, 512 << 10, 8, 64 << 10, NULL);
            reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
            for (int rep = 0; rep < 2; rep++)
                for (uint32_t i = 0; i < f.n; i++)
                    expect_chunk(p, &f, i, i, (fg_tier)t);
            fg_pager_stats st;
            fg_pager_stats_get(p, &st);
            ck_assert_uint_le(st.peak[FG_TIER_HOST], 1 << 20);
            ck_assert_uint_le(st.peak[FG_TIER_DEVICE], 512 << 10);
            ck_assert_uint_gt(st.moved[FG_TIER_DISK][FG_TIER_HOST], 0);
            if (t == FG_TIER_DEVICE)
                ck_assert_uint_gt(st.moved[FG_TIER_HOST][FG_TIER_DEVICE], 0);
            ck_assert_uint_eq(st.fallback_files, _i == ENG_NO_DIRECT ? 1u : 0u);
            if (_i == ENG_NO_DIRECT)
                ck_assert_msg(strstr(st.notice, "refuses O_DIRECT") != NULL, "%s", st.notice);
            fg_pager_close(p);
        }
        unlink(f.path);
    }
}
END_TEST

/* kB of a "Name:   N kB" line of /proc/self/status. */
static uint64_t status_kb(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            kb = strtoull(line + n + 1, NULL, 10);
    fclose(f);
    return kb;
}

/* A budget is a ceiling, not an allocation (issue 38 item 5): a pager with 2 GiB HOST (and,
 * by row, 2 GiB DEVICE on the plain simulated device or on compute/'s accelerator, both of
 * which pin the HOST pool's granules as they are used) holding a few MiB peaks at tens of MiB
 * of RSS, with a few MiB pinned;
 * on the base commit the pool was mlocked and registered whole at open (2 GiB resident).
 * Every read still goes through a registered buffer. */
START_TEST(t_budget_is_ceiling)
{
    const uint64_t gib2 = 2ull << 30;
    if (_i == 2)
        g_sim_link = 0;
    char name[64];
    snprintf(name, sizeof name, "fgpager-ceiling-%d.bin", (int)getpid());
    dfile f;
    make_file(&f, path_in(g_dir, name), 24, 99);
    FILE *cr = fopen("/proc/self/clear_refs", "w"); /* "5": reset VmHWM to VmRSS */
    if (cr) {
        fputs("5", cr);
        fclose(cr);
    }
    uint64_t before = status_kb("VmRSS");
    fg_pager *p = open_pager(ENG_URING, gib2, _i ? gib2 : 0, 8, 1 << 20, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    for (int rep = 0; rep < 2; rep++)
        for (uint32_t i = 0; i < f.n; i++) {
            fg_err err;
            fg_pager_view v; /* on the accelerator: bytes host code may not touch */
            ck_assert_msg(fg_pager_acquire(p, i, _i ? FG_TIER_DEVICE : FG_TIER_HOST, &v, &err)
                          == FG_OK, "%s", err.msg);
            ck_assert_msg(XXH3_64bits(bytes_of(&v), v.length) == f.xxh[i], "chunk %u", i);
            ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
            check_ok(p);
        }
    uint64_t hwm = cr ? status_kb("VmHWM") : status_kb("VmRSS");
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.budget[FG_TIER_HOST], gib2);
    ck_assert_uint_gt(st.host_committed, 0);
    ck_assert_msg(st.host_committed <= (16u << 20), "committed %llu bytes",
                  (unsigned long long)st.host_committed);
    if (_i) /* the devices pin in place: what is committed, no more */
        ck_assert_uint_eq(st.host_pinned, st.host_committed);
    uint64_t allow_kb = 48u * 1024;
#if defined(__SANITIZE_ADDRESS__)
    /* ASan writes the shadow (1/8) of a heap allocation: the devices' 2 GiB aligned_alloc */
    if (_i)
        allow_kb += (gib2 / 8) >> 10;
#endif
    ck_assert_msg(hwm - before < allow_kb, "peak RSS grew by %llu kB for %llu bytes of chunks",
                  (unsigned long long)(hwm - before), (unsigned long long)f.size);
    const char *rb = strstr(st.engine, "registered buffers, "); /* "N of M ops fixed" */
    unsigned fixed = 0, ops = 0;
    ck_assert_msg(rb && sscanf(rb + 20, "%u of %u", &fixed, &ops) == 2, "%s", st.engine);
    ck_assert_msg(fixed == ops && ops > 0, "%s", st.engine);
    fg_pager_close(p);
    if (_i == 2)
        sim_done();
    unlink(f.path);
}
END_TEST

/* Pinned memory is a ceiling too (issue 38 item 5 on a GPU: --backend cuda --ram-budget 64G
 * pinned 64 GiB at open). On the plain simulated device, which has pinned memory and checks
 * its rules as the CUDA runtime does (device.c: overlapping pins refused, copies naming
 * unpinned memory PINNED refused, all counted): a pager with 2 GiB HOST holding a few MiB, its
 * chunks uploaded (acquired on the device and prefetched there) and brought back. Rows:
 *  0  the device pins in place: pinned memory grows with use (a few MiB, what the pool
 *     committed), every upload names PINNED memory that is pinned, close unpins all of it.
 *     On the base commit this device's PINNED allocation held the whole 2 GiB.
 *  1  the same device without the pin entry: the old behaviour, one PINNED allocation of the
 *     whole budget.
 *  2  pins refused (an OS short of lockable memory): a notice, the pool plain (locked where
 *     mlock is allowed), its extents copied as plain host memory, every chunk intact
 *     (t_pool_pin_runs refuses part way). */
START_TEST(t_pinned_is_ceiling)
{
    const uint64_t gib2 = 2ull << 30;
    fg_err err;
    char name[64];
    snprintf(name, sizeof name, "fgpager-pinned-%d.bin", (int)getpid());
    dfile f;
    make_file(&f, path_in(g_dir, name), 24, 41);
    static fg_device_iface no_pin;
    fg_device *dev;
    ck_assert_int_eq(fg_pager_device_host_create(&dev, &err), FG_OK);
    if (_i == 1) {
        no_pin = *dev->iface;
        no_pin.pin = NULL;
        no_pin.unpin = NULL;
        dev->iface = &no_pin;
    }
    if (_i == 2)
        fg_pager_device_host_pin_limit(dev, 1u << 20);
    fg_device *watch = dev->iface->retain(dev);
    fg_pager_config c = {{0, gib2, 64 << 20}, 8, 1 << 20, FG_PAGER_ENGINE_URING, NULL, dev,
                         FG_PAGER_VERIFY | FG_PAGER_NO_CUDA | (_i == 2 ? FG_PAGER_NO_MLOCK : 0),
                         NULL, NULL};
    fg_pager *p;
    ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_ticket tk[24];
    for (uint32_t i = 0; i < f.n; i++) { /* half acquired on the device, half prefetched */
        fg_pager_view v;
        if (i % 2)
            ck_assert_msg(fg_pager_prefetch(p, i, FG_TIER_DEVICE, &tk[i], &err) == FG_OK, "%s",
                          err.msg);
        else
            ck_assert_msg(fg_pager_acquire(p, i, FG_TIER_DEVICE, &v, &err) == FG_OK &&
                          fg_pager_release(p, &v, 0, &err) == FG_OK, "chunk %u: %s", i, err.msg);
        check_ok(p);
    }
    for (uint32_t i = 0; i < f.n; i++) {
        if (i % 2)
            ck_assert_msg(fg_pager_wait(p, tk[i], &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(fg_pager_evict(p, i, &err) == FG_OK, "%s", err.msg);
        expect_chunk(p, &f, i, i, FG_TIER_DEVICE); /* on the device from HOST again */
        expect_chunk(p, &f, i, i, FG_TIER_HOST);
    }
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    fg_pager_device_stats ds;
    fg_pager_device_host_stats(watch, &ds);
    ck_assert_uint_eq(ds.misuse, 0);
    ck_assert_uint_gt(st.moved[FG_TIER_HOST][FG_TIER_DEVICE], 0);
    ck_assert_uint_eq(ds.pinned, st.host_pinned);
    if (_i == 1) {
        ck_assert_uint_ge(ds.pinned_peak, gib2);
        ck_assert_uint_eq(st.host_pinned, gib2);
    } else if (_i == 0) {
        ck_assert_uint_gt(st.host_pinned, 0);
        ck_assert_uint_le(st.host_pinned, st.host_committed);
        ck_assert_msg(ds.pinned_peak <= (16u << 20), "pinned %llu bytes",
                      (unsigned long long)ds.pinned_peak);
        ck_assert_uint_gt(ds.pinned_copies, 0);
    } else {
        ck_assert_msg(strstr(st.notice, "not pinned past") != NULL, "%s", st.notice);
        ck_assert_uint_eq(st.host_pinned, 0);
        ck_assert_uint_eq(ds.pinned_copies, 0);
        ck_assert_uint_gt(st.host_committed, 0);
        ck_assert_int_eq(st.host_locked, 0); /* plain (FG_PAGER_NO_MLOCK) */
    }
    fg_pager_close(p);
    fg_pager_device_host_stats(watch, &ds);
    ck_assert_uint_eq(ds.pinned, 0); /* unpinned (or freed) at close */
    ck_assert_uint_eq(ds.misuse, 0);
    fg_device_free(watch);
    unlink(f.path);
}
END_TEST

/* The pool pins in runs (pool.c): 4 MiB extents taken one after the other over 96 MiB from
 * the bottom of a 2 GiB pool (2 MiB granules) and over 32 MiB from its top pin at most about
 * twice the span used in a handful of pin() ranges, so few extents span two ranges; each
 * extent is named PINNED; close unpins every range. Row 1: pins refused past 40 MiB: a notice,
 * the extents in pinned runs PINNED, the others (and one across the last run's end) HOST. */
START_TEST(t_pool_pin_runs)
{
    fg_err err;
    fg_device *dev;
    ck_assert_int_eq(fg_pager_device_host_create(&dev, &err), FG_OK);
    if (_i)
        fg_pager_device_host_pin_limit(dev, 40u << 20);
    fg_hostpool h;
    char note[160] = "";
    const uint64_t size = 2ull << 30, ext = (4u << 20) - 3 * 4096;
    ck_assert_int_eq(fg_hostpool_open(&h, dev, size, 1 << 20, 0, note, sizeof note, &err), FG_OK);
    ck_assert_int_eq(h.how, FG_POOL_PIN_LAZY);
    ck_assert_uint_eq(h.granule, 2u << 20);
    unsigned across = 0, n = 0, plain = 0;
    for (int side = 0; side < 2; side++)
        for (uint64_t k = 0; k * ext < (side ? 32u << 20 : 96u << 20); k++, n++) {
            uint64_t off = side ? size - (k + 1) * ext : k * ext;
            fg_hostpool_commit(&h, off, ext, note, sizeof note);
            int pinned = 1;
            for (uint64_t g = off / h.granule; g <= (off + ext - 1) / h.granule; g++)
                pinned &= (h.committed[g] & FG_GRAN_PINNED) != 0;
            ck_assert_int_eq(fg_hostpool_buft(&h, off, ext),
                             pinned ? FG_BUFT_PINNED : FG_BUFT_HOST);
            plain += !pinned;
            for (uint64_t g = off / h.granule + 1; g <= (off + ext - 1) / h.granule; g++)
                across += (h.committed[g] & FG_GRAN_PIN_START) != 0;
        }
    fg_pager_device_stats ds;
    fg_pager_device_host_stats(dev, &ds);
    ck_assert_uint_eq(ds.misuse, 0);
    ck_assert_uint_eq(ds.pinned, h.pinned_bytes);
    if (_i) {
        ck_assert_msg(strstr(note, "not pinned past 32.0 MiB") != NULL, "%s", note);
        ck_assert_uint_eq(h.pinned_bytes, 32u << 20);
        ck_assert_uint_gt(plain, 0);
        ck_assert_uint_lt(plain, n);
        ck_assert_uint_gt(h.committed_bytes, h.pinned_bytes);
    } else {
        ck_assert_str_eq(note, "");
        ck_assert_uint_eq(plain, 0);
        ck_assert_uint_eq(h.pinned_bytes, h.committed_bytes);
    }
    ck_assert_msg(h.pinned_bytes <= 2 * (128u << 20) + 4 * h.granule, "pinned %llu bytes",
                  (unsigned long long)h.pinned_bytes);
    ck_assert_msg(ds.pins <= 16, "%llu pin ranges", (unsigned long long)ds.pins);
    ck_assert_msg(across <= ds.pins, "%u of %u extents across two pin ranges", across, n);
    fg_hostpool_close(&h, dev);
    fg_pager_device_host_stats(dev, &ds);
    ck_assert_uint_eq(ds.pinned, 0);
    ck_assert_uint_eq(ds.misuse, 0);
    fg_device_free(dev);
}
END_TEST

/* Every chunk of a .fgt file, registered through the format reader. */
START_TEST(t_fgt_file)
{
    fg_err err;
    const char *path = path_in(g_dir, "m.fgt");
    fg_fgt_writer *w;
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), FG_OK);
    uint64_t dims[2] = {100, 300};
    fg_fgt_tensor_desc d = {"a", fg_codec_float(FG_CODEC_F32), 2, dims, NULL, 0};
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_OK);
    float *rows = malloc(30 * 300 * sizeof *rows);
    for (int c = 0; c < 4; c++) {
        uint64_t n = c < 3 ? 30 : 10;
        tu_fill(rows, n * 300 * 4, (uint64_t)c);
        ck_assert_int_eq(fg_fgt_writer_add_chunk(w, n, rows, n * 300 * 4, &err), FG_OK);
    }
    free(rows);
    ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), FG_OK);
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == FG_OK, "%s", err.msg);

    fg_pager *p = open_pager(ENG_URING, 256 << 10, 0, 4, 0, NULL);
    uint32_t first, count;
    ck_assert_msg(fg_pager_add_fgt(p, path, 0, FG_CHUNK_WEIGHT, &first, &count, &err) == FG_OK,
                  "%s", err.msg);
    ck_assert_uint_eq(first, 0);
    ck_assert_uint_eq(count, 4);
    fg_fgt_reader *r;
    ck_assert_int_eq(fg_fgt_open(path, 0, &r, &err), FG_OK);
    for (uint32_t j = 0; j < count; j++) {
        fg_pager_view v;
        const void *want;
        ck_assert_int_eq(fg_fgt_chunk_data(r, 0, j, 1, &want, &err), FG_OK);
        ck_assert_msg(fg_pager_acquire(p, first + j, FG_TIER_HOST, &v, &err) == FG_OK, "%s",
                      err.msg);
        ck_assert_uint_eq(v.tag, j);
        ck_assert_uint_eq(v.length, (j < 3 ? 30u : 10u) * 1200u);
        ck_assert_int_eq(memcmp(v.ptr, want, v.length), 0);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    fg_fgt_close(r);
    fg_pager_close(p);
}
END_TEST

/* Random prefetch/acquire/release/evict/write-back over three tiers: budgets hold, invariants
 * hold after every call, and the file ends with exactly what was written back. Runs 2 and 3
 * put the DEVICE tier on the simulated accelerator, whose uploads complete asynchronously
 * (UPLOADING chunks meet every other call). */
START_TEST(t_random_budgets)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "r.bin"), 40, 99 + (uint64_t)_i);
    uint64_t host = 900 << 10, dev = 600 << 10;
    if (_i >= 2)
        g_sim_link = _i == 2 ? 0 : 2.0;
    fg_pager *p = open_pager(_i & 1 ? ENG_PREAD : ENG_URING, host, dev, 6, 32 << 10, NULL);
    reg_file(p, &f, 1, FG_CHUNK_KV, 5);
    uint64_t *want = calloc(f.n, sizeof *want);
    memcpy(want, f.xxh, f.n * sizeof *want);
    fg_pager_view held[4];
    int n_held = 0, budget_refusals = 0;
    uint64_t s = 12345 + (uint64_t)_i;
    for (int step = 0; step < 3000; step++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t id = (uint32_t)((s >> 33) % f.n);
        int op = (int)((s >> 20) % 8);
        fg_tier t = (s >> 40) & 1 ? FG_TIER_DEVICE : FG_TIER_HOST;
        fg_pager_ticket tk;
        int rc = FG_OK;
        if (op <= 1) {
            rc = fg_pager_prefetch(p, id, t, &tk, &err);
        } else if (op <= 4 && n_held < 4) {
            fg_pager_view v;
            rc = fg_pager_acquire(p, id, t, &v, &err);
            if (rc == FG_OK) {
                ck_assert_msg(XXH3_64bits(bytes_of(&v), v.length) == want[id], "chunk %u", id);
                held[n_held++] = v;
            }
        } else if (op <= 6 && n_held) {
            fg_pager_view v = held[--n_held];
            unsigned fl = 0;
            int still_pinned = 0;
            for (int k = 0; k < n_held; k++)
                still_pinned |= held[k].id == v.id;
            if ((s >> 50) & 1 && !still_pinned) { /* modify and release dirty */
                tu_fill(bytes_of(&v), v.length, s);
                want[v.id] = XXH3_64bits(bytes_of(&v), v.length);
                fl = FG_PAGER_DIRTY | ((s >> 52) & 1 ? FG_PAGER_WRITE_BEHIND : 0);
            }
            rc = fg_pager_release(p, &v, fl, &err);
        } else if (op == 7) {
            rc = (s >> 45) & 1 ? fg_pager_evict(p, id, &err) : fg_pager_write_back(p, id, &err);
            if (rc == FG_ERR_STATE || rc == FG_ERR_PAGER_PINNED)
                rc = FG_OK;
        }
        if (rc == FG_ERR_PAGER_BUDGET || rc == FG_ERR_PAGER_PINNED) {
            budget_refusals++;
            rc = FG_OK;
        }
        ck_assert_msg(rc == FG_OK, "step %d op %d chunk %u: %s", step, op, id, err.msg);
        check_ok(p);
    }
    while (n_held)
        ck_assert_int_eq(fg_pager_release(p, &held[--n_held], 0, &err), FG_OK);
    for (uint32_t i = 0; i < f.n; i++)
        ck_assert_msg(fg_pager_evict(p, i, &err) == FG_OK, "%s", err.msg);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_le(st.peak[FG_TIER_HOST], host);
    ck_assert_uint_le(st.peak[FG_TIER_DEVICE], dev);
    ck_assert_uint_gt(st.peak[FG_TIER_DEVICE], 0);
    ck_assert_uint_gt(st.write_backs, 0);
    ck_assert_uint_eq(st.used[FG_TIER_HOST], 0);
    if (_i >= 2)
        ck_assert_uint_gt(st.async_uploads, 0);
    fg_pager_close(p);
    sim_done();
    /* the file now holds what was written back */
    int fd = open(f.path, O_RDONLY);
    for (uint32_t i = 0; i < f.n; i++) {
        uint8_t *b = malloc(f.len[i]);
        ck_assert_int_eq(pread(fd, b, f.len[i], (off_t)f.off[i]), (ssize_t)f.len[i]);
        ck_assert_msg(XXH3_64bits(b, f.len[i]) == want[i], "file chunk %u", i);
        free(b);
    }
    close(fd);
    free(want);
    (void)budget_refusals;
}
END_TEST

START_TEST(t_prefetch_dedup)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "d.bin"), 8, 3);
    fg_pager *p = open_pager(ENG_URING, 1 << 20, 0, 4, 4096, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_ticket a, b, c;
    ck_assert_int_eq(fg_pager_prefetch(p, 2, FG_TIER_HOST, &a, &err), FG_OK);
    ck_assert_int_eq(fg_pager_prefetch(p, 2, FG_TIER_HOST, &b, &err), FG_OK);
    ck_assert_uint_ne(a, 0);
    /* the second request joins the first, unless the first read has already landed (a loaded
     * machine completes it between the two calls: seen once under ASan), when the chunk is
     * resident and there is nothing to wait for */
    ck_assert_msg(b == a || b == 0, "second prefetch: ticket %llu, the first's %llu",
                  (unsigned long long)b, (unsigned long long)a);
    check_ok(p);
    ck_assert_int_eq(fg_pager_wait(p, a, &err), FG_OK);
    ck_assert_int_eq(fg_pager_prefetch(p, 2, FG_TIER_HOST, &c, &err), FG_OK);
    ck_assert_uint_eq(c, 0); /* already resident */
    expect_chunk(p, &f, 2, 2, FG_TIER_HOST);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.dedup, b == a ? 1 : 0); /* (the first read landed: nothing joined) */
    ck_assert_uint_eq(st.prefetches, 3);
    ck_assert_uint_eq(st.io_ops, f.padded[2] / 4096); /* loaded once */
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.moved[FG_TIER_DISK][FG_TIER_HOST], f.padded[2]);
    fg_pager_close(p);
}
END_TEST

/* A pinned chunk survives a stream of other chunks through a small budget; with everything
 * pinned, the next load is refused instead of exceeding the budget. */
START_TEST(t_pinned_survives)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "p.bin"), 30, 5);
    uint64_t host = 640 << 10;
    fg_pager *p = open_pager(ENG_URING, host, 0, 8, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_view keep;
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &keep, &err), FG_OK);
    for (int rep = 0; rep < 3; rep++)
        for (uint32_t i = 1; i < f.n; i++) {
            fg_pager_ticket tk;
            if (i + 1 < f.n)
                fg_pager_prefetch(p, i + 1, FG_TIER_HOST, &tk, &err); /* may be refused */
            expect_chunk(p, &f, i, i, FG_TIER_HOST);
            ck_assert_msg(XXH3_64bits(keep.ptr, keep.length) == f.xxh[0], "pinned chunk lost");
        }
    /* pin until the budget is full: the next acquire is refused, nothing exceeds */
    fg_pager_view pins[30];
    int n = 0, rc = FG_OK;
    for (uint32_t i = 1; i < f.n && rc == FG_OK; i++) {
        rc = fg_pager_acquire(p, i, FG_TIER_HOST, &pins[n], &err);
        n += rc == FG_OK;
    }
    ck_assert_int_eq(rc, FG_ERR_PAGER_BUDGET);
    ck_assert_msg(strstr(err.msg, "host budget") != NULL, "%s", err.msg);
    check_ok(p);
    ck_assert_int_eq(fg_pager_evict(p, 0, &err), FG_ERR_PAGER_PINNED);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_le(st.peak[FG_TIER_HOST], host);
    ck_assert_uint_gt(st.evictions, 0);
    while (n)
        ck_assert_int_eq(fg_pager_release(p, &pins[--n], 0, &err), FG_OK);
    ck_assert_int_eq(fg_pager_release(p, &keep, 0, &err), FG_OK);
    ck_assert_int_eq(fg_pager_release(p, &keep, 0, &err), FG_ERR_STATE); /* double release */
    fg_pager_close(p);
}
END_TEST

/* Each injected fault surfaces as an error at acquire, then sticks. */
typedef struct fcase {
    fg_pager_fault_kind kind;
    uint64_t nth;
    int inner_pread;
    int code;
} fcase;

static const fcase fcases[] = {
    {FG_FAULT_EIO, 1, 0, FG_ERR_IO},         {FG_FAULT_EIO, 7, 0, FG_ERR_IO},
    {FG_FAULT_EIO, 3, 1, FG_ERR_IO},         {FG_FAULT_SHORT_EOF, 2, 0, FG_ERR_PAGER_SHORT},
    {FG_FAULT_SHORT_EOF, 1, 1, FG_ERR_PAGER_SHORT}, {FG_FAULT_SUBMIT, 4, 0, FG_ERR_IO},
    {FG_FAULT_ENOSPC, 1, 0, FG_ERR_NO_SPACE}, {FG_FAULT_ENOSPC, 2, 1, FG_ERR_NO_SPACE},
};

START_TEST(t_faults)
{
    const fcase *fc = &fcases[_i];
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "f.bin"), 12, 11);
    fg_pager_fault fault = {fc->kind, fc->nth};
    fg_pager *p = open_pager(fc->inner_pread ? ENG_PREAD : ENG_URING, 1 << 20, 0, 4, 16 << 10,
                             &fault);
    reg_file(p, &f, 1, FG_CHUNK_WEIGHT, 0);
    int rc = FG_OK;
    uint32_t i;
    for (i = 0; i < f.n && rc == FG_OK; i++) {
        fg_pager_ticket tk;
        if (i + 2 < f.n)
            fg_pager_prefetch(p, i + 2, FG_TIER_HOST, &tk, NULL);
        fg_pager_view v;
        rc = fg_pager_acquire(p, i, FG_TIER_HOST, &v, &err);
        if (rc == FG_OK) {
            ck_assert_msg(XXH3_64bits(v.ptr, v.length) == f.xxh[i], "chunk %u", i);
            if (fc->kind == FG_FAULT_ENOSPC) {
                ((uint8_t *)v.ptr)[0] ^= 1;
                ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
                rc = fg_pager_write_back(p, i, &err);
            } else {
                ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
            }
        }
    }
    ck_assert_msg(rc == fc->code, "fault %d nth %llu: got %d (%s), want %d", fc->kind,
                  (unsigned long long)fc->nth, rc, err.msg, fc->code);
    check_ok(p);
    /* sticky: every later call reports the same error */
    fg_pager_view v;
    fg_pager_ticket tk;
    uint32_t file;
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &v, &err), fc->code);
    ck_assert_msg(strstr(err.msg, "earlier I/O error") != NULL, "%s", err.msg);
    ck_assert_int_eq(fg_pager_prefetch(p, f.n - 1, FG_TIER_HOST, &tk, &err), fc->code);
    ck_assert_int_eq(fg_pager_add_file(p, f.path, 0, &file, &err), fc->code);
    ck_assert_int_eq(fg_pager_write_back(p, 0, &err), fc->code);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_int_eq(st.sticky, fc->code);
    check_ok(p);
    fg_pager_close(p);
}
END_TEST

/* A transient short read is completed by resubmitting the rest: data intact, no error. */
START_TEST(t_short_once)
{
    dfile f;
    make_file(&f, path_in(g_dir, "s.bin"), 6, 13);
    fg_pager_fault fault = {FG_FAULT_SHORT_ONCE, 2};
    fg_pager *p = open_pager(_i ? ENG_PREAD : ENG_URING, 1 << 20, 0, 4, 0, &fault);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    for (uint32_t i = 0; i < f.n; i++)
        expect_chunk(p, &f, i, i, FG_TIER_HOST);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.short_reads, 1);
    ck_assert_int_eq(st.sticky, 0);
    fg_pager_close(p);
}
END_TEST

static void label_tag(void *ctx, uint64_t tag, char *buf, size_t n)
{
    snprintf(buf, n, "%s %llu", (const char *)ctx, (unsigned long long)tag);
}

/* Verification is the default: a changed byte on disk is refused before anyone sees the chunk,
 * with a sticky error naming the file, the chunk (and the caller's label), its offset and what
 * to run. FG_PAGER_NO_VERIFY hands the bytes over unchecked. */
START_TEST(t_checksum)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "c.bin"), 6, 17);
    int fd = open(f.path, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)f.off[3] + 1), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)f.off[3] + 1), 1);
    close(fd);
    fg_pager_config c = {{0, 1 << 20, 0}, 4, 0, FG_PAGER_ENGINE_URING, NULL, NULL,
                         FG_PAGER_NO_CUDA, NULL, NULL, label_tag, (void *)"tag"};
    fg_pager *p;
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_OK);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    expect_chunk(p, &f, 2, 2, FG_TIER_HOST);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, 3, FG_TIER_HOST, &v, &err), FG_ERR_CHECKSUM);
    char want[256];
    snprintf(want, sizeof want, "c.bin: tag 1003 (pager chunk 3) at offset %llu",
             (unsigned long long)f.off[3]);
    ck_assert_msg(strstr(err.msg, want) && strstr(err.msg, "checksum mismatch") &&
                  strstr(err.msg, "fg-inspect --verify") && !strchr(err.msg, '\n'),
                  "%s", err.msg);
    check_ok(p);
    /* sticky: nothing read after a mismatch is trusted, every call repeats the first error */
    ck_assert_int_eq(fg_pager_acquire(p, 4, FG_TIER_HOST, &v, &err), FG_ERR_CHECKSUM);
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_int_eq(st.sticky, FG_ERR_CHECKSUM);
    fg_pager_close(p);

    c.flags |= FG_PAGER_NO_VERIFY; /* unchecked: the damaged bytes come through */
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_OK);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    ck_assert_int_eq(fg_pager_acquire(p, 3, FG_TIER_HOST, &v, &err), FG_OK);
    ck_assert(XXH3_64bits(v.ptr, v.length) != f.xxh[3]);
    ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    fg_pager_close(p);

    /* FG_PAGER_VERIFY is still accepted (it is the default) */
    c.flags = FG_PAGER_VERIFY | FG_PAGER_NO_CUDA;
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_OK);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    ck_assert_int_eq(fg_pager_acquire(p, 3, FG_TIER_HOST, &v, &err), FG_ERR_CHECKSUM);
    fg_pager_close(p);
}
END_TEST

/* A read corrupted in transit (fault engine) is caught the same way, for both engines. */
START_TEST(t_corrupt_read)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "cr.bin"), 4, 19);
    fg_pager_fault fault = {FG_FAULT_CORRUPT_READ, 1};
    fg_pager *p = open_pager(_i ? ENG_PREAD : ENG_URING, 1 << 20, 0, 4, 0, &fault);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &v, &err), FG_ERR_CHECKSUM);
    ck_assert_msg(strstr(err.msg, "cr.bin: pager chunk 0 at offset 8192") != NULL, "%s", err.msg);
    check_ok(p);
    fg_pager_close(p);
}
END_TEST

/* Offload chunks (a writable file, registered without checksums, as the engine's KV cache and
 * activations are): a write-back records the payload's XXH3 and the reload is checked. A write
 * corrupted on its way to the file (fault engine), and a byte changed in the file by someone
 * else, are both refused on reload; untouched chunks reload intact. */
START_TEST(t_offload_checksum)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "kv.bin"), 4, 41);
    /* 0 intact, 1 injected bad write, 2 file edited, 3 bad write of chunks held on DEVICE
     * (written back through a staging HOST extent) */
    for (int mode = 0; mode < 4; mode++) {
        fg_pager_fault fault = {mode % 2 ? FG_FAULT_CORRUPT_WRITE : FG_FAULT_NONE, 2};
        fg_tier t = mode == 3 ? FG_TIER_DEVICE : FG_TIER_HOST;
        fg_pager *p = open_pager(_i ? ENG_PREAD : ENG_URING, 1 << 20, mode == 3 ? 1 << 20 : 0, 4,
                                 0, &fault);
        uint32_t file, id;
        ck_assert_int_eq(fg_pager_add_file(p, f.path, 1, &file, &err), FG_OK);
        for (uint32_t i = 0; i < f.n; i++) {
            fg_pager_chunk_desc d = {file, f.off[i], f.len[i], f.padded[i], 0, 0, 500 + i,
                                     {0}, FG_CHUNK_KV, i};
            ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
        }
        for (uint32_t i = 0; i < 2; i++) {
            fg_pager_view v;
            ck_assert_int_eq(fg_pager_acquire(p, i, t, &v, &err), FG_OK);
            memset(v.ptr, 0x30 + (int)i + mode, v.length); /* the host device is plain memory */
            ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
            ck_assert_msg(fg_pager_evict(p, i, &err) == FG_OK, "%s", err.msg); /* writes back */
            fg_pager_chunk_desc d;
            ck_assert_int_eq(fg_pager_chunk(p, i, &d), FG_OK);
            ck_assert_int_eq(d.has_xxh3, 1);
        }
        if (mode == 2) { /* someone changes the file between write-back and reload */
            int fd = open(f.path, O_RDWR);
            uint8_t b = 0x77;
            ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)f.off[1] + 100), 1);
            close(fd);
        }
        fg_pager_view v;
        ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &v, &err), FG_OK);
        ck_assert_uint_eq(((uint8_t *)v.ptr)[v.length - 1], 0x30 + mode);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
        int rc = fg_pager_acquire(p, 1, FG_TIER_HOST, &v, &err);
        if (mode == 0) {
            ck_assert_msg(rc == FG_OK, "%s", err.msg);
            ck_assert_uint_eq(((uint8_t *)v.ptr)[0], 0x31);
            ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
        } else {
            ck_assert_int_eq(rc, FG_ERR_CHECKSUM);
            ck_assert_msg(strstr(err.msg, "kv.bin: pager chunk 1 at offset") &&
                          strstr(err.msg, "changed on disk"), "%s", err.msg);
        }
        check_ok(p);
        fg_pager_close(p);
    }
}
END_TEST

/* The AVX2 XXH3 the pager uses equals libxxhash's for every length around the kernel's block
 * and stripe boundaries, and for misaligned starts. */
START_TEST(t_hash)
{
    size_t n = (1 << 20) + 4096;
    uint8_t *b = malloc(n + 64);
    tu_fill(b, n + 64, 99);
    for (size_t len = 0; len < 2100; len++)
        ck_assert_uint_eq(fg_pager_xxh3(b + (len % 7), len), fg_pager_xxh3_ref(b + (len % 7), len));
    size_t big[] = {4096, 65536, 65537, 1 << 20, n};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        ck_assert_uint_eq(fg_pager_xxh3(b + 1, big[i]), XXH3_64bits(b + 1, big[i]));
    if (__builtin_cpu_supports("avx2"))
        ck_assert_uint_eq(fg_pager_xxh3_avx2(b, n), XXH3_64bits(b, n));
    free(b);
}
END_TEST

/* FG_PAGER_VERIFY_ONCE: a chunk's bytes are checked at their first load only (the second load of
 * a chunk corrupted in transit is not caught), and again after a write-back changes them. */
START_TEST(t_verify_once)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "vo.bin"), 2, 43);
    fg_pager_fault fault = {FG_FAULT_CORRUPT_READ, 2}; /* the second read: chunk 0 again */
    fg_pager_io *io;
    ck_assert_int_eq(fg_pager_io_uring_create(4, &io, &err), FG_OK);
    ck_assert_int_eq(fg_pager_io_fault_create(io, &fault, &io, &err), FG_OK);
    fg_pager_config c = {{0, 1 << 20, 0}, 4, 0, 0, io, NULL,
                         FG_PAGER_NO_CUDA | FG_PAGER_VERIFY_ONCE, NULL, NULL, NULL, NULL};
    fg_pager *p;
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_OK);
    reg_file(p, &f, 1, FG_CHUNK_KV, 0);
    fg_pager_view v;
    uint8_t first;
    int fd = open(f.path, O_RDWR);
    ck_assert_int_eq(pread(fd, &first, 1, (off_t)f.off[0]), 1);
    expect_chunk(p, &f, 0, 0, FG_TIER_HOST);
    ck_assert_int_eq(fg_pager_evict(p, 0, &err), FG_OK);
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &v, &err), FG_OK); /* not checked */
    ck_assert_uint_eq(((uint8_t *)v.ptr)[0], first ^ 0xff); /* the corrupted read came through */
    ((uint8_t *)v.ptr)[0] ^= 0xff;                          /* put it back, then write it */
    ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
    ck_assert_int_eq(fg_pager_evict(p, 0, &err), FG_OK);
    uint8_t x = 0x11;
    ck_assert_int_eq(pwrite(fd, &x, 1, (off_t)f.off[0] + 5), 1);
    close(fd);
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_HOST, &v, &err), FG_ERR_CHECKSUM);
    fg_pager_close(p);
}
END_TEST

START_TEST(t_placement)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "pl.bin"), 12, 23);
    /* no DEVICE tier: any fraction on it is refused with a clear message */
    fg_pager *p = open_pager(ENG_URING, 4 << 20, 0, 4, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 3);
    fg_pager_policy pol = {{0.2, 0.5, 0.3}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(fg_pager_place(p, &pol, &err), FG_ERR_PAGER_NO_TIER);
    ck_assert_msg(strstr(err.msg, "DEVICE tier") && strstr(err.msg, "weights"), "%s", err.msg);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, 0, FG_TIER_DEVICE, &v, &err), FG_ERR_PAGER_NO_TIER);
    pol = (fg_pager_policy){{0.5, 0.6, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(fg_pager_place(p, &pol, &err), FG_ERR_INVALID_ARG);
    fg_pager_close(p);

    /* with a device: the midpoint rule per group, budgets checked */
    p = open_pager(ENG_URING, 4 << 20, 4 << 20, 4, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 3);
    pol = (fg_pager_policy){{0.25, 0.5, 0.25}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_msg(fg_pager_place(p, &pol, &err) == FG_OK, "%s", err.msg);
    for (uint32_t g = 0; g < 3; g++) {
        double total = 0, before = 0;
        for (uint32_t i = g; i < f.n; i += 3)
            total += (double)f.padded[i];
        for (uint32_t i = g; i < f.n; i += 3) {
            double mid = (before + (double)f.padded[i] / 2) / total;
            before += (double)f.padded[i];
            fg_tier want = mid < 0.25 ? FG_TIER_DEVICE : mid < 0.75 ? FG_TIER_HOST : FG_TIER_DISK;
            ck_assert_int_eq(fg_pager_home(p, i), want);
        }
    }
    /* acquire with FG_TIER_DISK goes to the home (HOST for disk-homed chunks) */
    for (uint32_t i = 0; i < f.n; i++) {
        ck_assert_int_eq(fg_pager_acquire(p, i, FG_TIER_DISK, &v, &err), FG_OK);
        fg_tier h = fg_pager_home(p, i);
        ck_assert_int_eq(v.tier, h == FG_TIER_DEVICE ? FG_TIER_DEVICE : FG_TIER_HOST);
        ck_assert(XXH3_64bits(v.ptr, v.length) == f.xxh[i]);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    check_ok(p);
    fg_pager_close(p);

    /* homes that do not fit the HOST budget are refused */
    p = open_pager(ENG_URING, 256 << 10, 4 << 20, 4, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 1);
    pol = (fg_pager_policy){{0, 1, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_int_eq(fg_pager_place(p, &pol, &err), FG_ERR_PAGER_BUDGET);
    ck_assert_msg(strstr(err.msg, "HOST") != NULL, "%s", err.msg);
    fg_pager_close(p);
}
END_TEST

/* Weights of mixed sizes streamed through the HOST room left beside KV chunks homed there
 * (pool = homed + twice the largest streamed chunk, as fg-infer plans it): the homed chunks
 * are loaded once and never evicted or written back, however the streaming fragments its room.
 * (Regression: with one first-fit region, streamed chunks landed between homed ones and the
 * pager wrote dirty KV chunks back to make contiguous room.) */
START_TEST(t_streaming_spares_homed)
{
    fg_err err;
    dfile w, kv;
    make_file(&w, path_in(g_dir, "w.bin"), 40, 31);
    make_file(&kv, path_in(g_dir, "kv.bin"), 6, 37);
    uint64_t homed = 0, big = 0;
    for (uint32_t i = 0; i < kv.n; i++)
        homed += kv.padded[i];
    for (uint32_t i = 0; i < w.n; i++)
        big = w.padded[i] > big ? w.padded[i] : big;
    fg_pager *p = open_pager(ENG_URING, homed + 2 * big, 0, 8, 0, NULL);
    reg_file(p, &w, 0, FG_CHUNK_WEIGHT, 4);
    reg_file(p, &kv, 1, FG_CHUNK_KV, 0);
    fg_pager_policy pol = {{0, 0, 1}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_msg(fg_pager_place(p, &pol, &err) == FG_OK, "%s", err.msg);
    fg_pager_view v;
    for (uint32_t round = 0; round < 4; round++)
        for (uint32_t i = 0; i < w.n; i++) {
            fg_pager_ticket t;
            if (i + 1 < w.n)
                fg_pager_prefetch(p, i + 1, FG_TIER_HOST, &t, NULL);
            ck_assert_msg(fg_pager_acquire(p, i, FG_TIER_DISK, &v, &err) == FG_OK, "%s", err.msg);
            ck_assert(XXH3_64bits(v.ptr, v.length) == w.xxh[i]);
            ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
            uint32_t k = w.n + (round * w.n + i) % kv.n;
            ck_assert_msg(fg_pager_acquire(p, k, FG_TIER_DISK, &v, &err) == FG_OK, "%s", err.msg);
            ((uint8_t *)v.ptr)[0] ^= 1;
            ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
            check_ok(p);
        }
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.write_backs, 0);
    ck_assert_uint_eq(st.moved[FG_TIER_HOST][FG_TIER_DISK], 0);
    fg_pager_close(p);
}
END_TEST

/* place commits the homed region ahead of use (pool.c fg_hostpool_prefault): counted at once
 * (the homed bytes' granules plus one, never past the budget), faulted in by a helper thread
 * (the process's RSS grows without a load), and the loads then read the same bytes.
 * FG_PAGER_NO_PREFAULT leaves the pool committed as used; a close right after place stops the
 * helper (loop 2). */
START_TEST(t_prefault)
{
    fg_err err;
    dfile w;
    make_file(&w, path_in(g_dir, "w.bin"), 64, 41);
    uint64_t homed = 0;
    for (uint32_t i = 0; i < w.n; i++)
        homed += w.padded[i];
    const uint64_t host = 64ull << 20, gran = 2ull << 20; /* granule: io_block rounded to 2 MiB */
    uint64_t rss0 = status_kb("VmRSS");
    fg_pager *p = open_pager(ENG_URING, host, 0, 8, 1 << 20, NULL);
    if (_i == 1) { /* the config flag, set after open as a caller's config would carry it */
        fg_pager_close(p);
        fg_pager_config c = {{0, host, 0}, 8, 1 << 20, FG_PAGER_ENGINE_URING, NULL, NULL,
                             FG_PAGER_NO_CUDA | FG_PAGER_NO_PREFAULT, NULL, NULL};
        ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    }
    reg_file(p, &w, 0, FG_CHUNK_WEIGHT, 4);
    fg_pager_policy pol = {{0, 1, 0}, {0, 1, 0}, {0, 1, 0}};
    ck_assert_msg(fg_pager_place(p, &pol, &err) == FG_OK, "%s", err.msg);
    check_ok(p);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    uint64_t want = (homed + gran - 1) / gran * gran + gran;
    ck_assert_uint_eq(st.host_committed, (_i == 1 ? 0 : want));
    if (_i == 2) { /* the helper may still be faulting: close stops and joins it */
        fg_pager_close(p);
        return;
    }
    if (_i == 0) { /* faulted in by the helper, nothing loaded yet (10 s: a loaded machine) */
        uint64_t rss = 0;
        for (int k = 0; k < 1000 && (rss = status_kb("VmRSS")) < rss0 + homed / 1024; k++)
            usleep(10000);
        ck_assert_msg(rss >= rss0 + homed / 1024, "RSS %llu kB, %llu before, %llu homed",
                      (unsigned long long)rss, (unsigned long long)rss0,
                      (unsigned long long)homed);
        ck_assert_uint_eq(st.moved[FG_TIER_DISK][FG_TIER_HOST], 0);
    }
    for (uint32_t i = 0; i < w.n; i++) {
        fg_pager_view v;
        ck_assert_msg(fg_pager_acquire(p, i, FG_TIER_DISK, &v, &err) == FG_OK, "%s", err.msg);
        ck_assert_msg(XXH3_64bits(v.ptr, v.length) == w.xxh[i], "chunk %u", i);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    check_ok(p);
    fg_pager_stats_get(p, &st);
    ck_assert_uint_le(st.host_committed, want);
    ck_assert_uint_ge(st.host_committed, homed);
    fg_pager_close(p);
}
END_TEST

/* Fresh chunks (never written back) load without a read, as zeros; after a write-back they
 * read their bytes. A memory-only registration (NULL path) makes no file and refuses I/O. */
START_TEST(t_fresh_and_memory_only)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "fresh.bin"), 2, 31);
    fg_pager *p = open_pager(ENG_URING, 1 << 20, 0, 4, 0, NULL);
    uint32_t file, id;
    ck_assert_int_eq(fg_pager_add_file(p, f.path, 1, &file, &err), FG_OK);
    fg_pager_chunk_desc d = {file, f.off[0], f.len[0], (f.len[0] + 4095) & ~4095ull, 0, 0, 7,
                             {0}, FG_CHUNK_KV, 0, 1};
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, id, FG_TIER_HOST, &v, &err), FG_OK);
    for (uint64_t i = 0; i < v.length; i++) /* the file holds make_file's bytes: not read */
        ck_assert_uint_eq(((uint8_t *)v.ptr)[i], 0);
    memset(v.ptr, 0x5a, v.length);
    ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.moved[FG_TIER_DISK][FG_TIER_HOST], 0);
    ck_assert_msg(fg_pager_write_back(p, id, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_pager_evict(p, id, &err), FG_OK);
    ck_assert_int_eq(fg_pager_acquire(p, id, FG_TIER_HOST, &v, &err), FG_OK);
    ck_assert_uint_eq(((uint8_t *)v.ptr)[0], 0x5a); /* written: read back, and checked */
    ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    fg_pager_stats_get(p, &st);
    ck_assert_uint_gt(st.moved[FG_TIER_DISK][FG_TIER_HOST], 0);
    check_ok(p);
    fg_pager_close(p);

    p = open_pager(ENG_URING, 1 << 20, 0, 4, 0, NULL);
    ck_assert_int_eq(fg_pager_add_file(p, NULL, 1, &file, &err), FG_OK);
    d.file = file;
    d.offset = 0;
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
    ck_assert_int_eq(fg_pager_acquire(p, id, FG_TIER_HOST, &v, &err), FG_OK);
    memset(v.ptr, 1, v.length);
    ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
    ck_assert_int_ne(fg_pager_write_back(p, id, &err), FG_OK);
    ck_assert_msg(strstr(err.msg, "memory only"), "%s", err.msg);
    fg_pager_close(p);
}
END_TEST

START_TEST(t_write_back)
{
    fg_err err;
    dfile f;
    make_file(&f, path_in(g_dir, "w.bin"), 4, 29);
    fg_pager *p = open_pager(_i ? ENG_PREAD : ENG_URING, 1 << 20, 1 << 20, 4, 0, NULL);
    reg_file(p, &f, 1, FG_CHUNK_KV, 0);
    for (uint32_t i = 0; i < 2; i++) {
        fg_tier t = i ? FG_TIER_DEVICE : FG_TIER_HOST;
        fg_pager_view v;
        ck_assert_int_eq(fg_pager_acquire(p, i, t, &v, &err), FG_OK);
        memset(v.ptr, 0x40 + (int)i, v.length);
        ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_OK);
        ck_assert_msg(fg_pager_write_back(p, i, &err) == FG_OK, "%s", err.msg);
        check_ok(p);
        uint8_t *b = malloc(f.len[i]), *w = malloc(f.len[i]);
        memset(w, 0x40 + (int)i, f.len[i]);
        int fd = open(f.path, O_RDONLY);
        ck_assert_int_eq(pread(fd, b, f.len[i], (off_t)f.off[i]), (ssize_t)f.len[i]);
        close(fd);
        ck_assert_int_eq(memcmp(b, w, f.len[i]), 0);
        fg_pager_chunk_desc d;
        ck_assert_int_eq(fg_pager_chunk(p, i, &d), FG_OK);
        ck_assert(d.xxh3 == XXH3_64bits(w, f.len[i])); /* checksum follows the new bytes */
        free(b);
        free(w);
        /* evict and reload: verified against the new checksum */
        ck_assert_int_eq(fg_pager_evict(p, i, &err), FG_OK);
        ck_assert_int_eq(fg_pager_acquire(p, i, t, &v, &err), FG_OK);
        ck_assert_uint_eq(((uint8_t *)v.ptr)[0], 0x40 + i);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.write_backs, 2);
    ck_assert_uint_gt(st.moved[FG_TIER_HOST][FG_TIER_DISK], 0);
    ck_assert_uint_gt(st.moved[FG_TIER_DEVICE][FG_TIER_HOST], 0);
    fg_pager_close(p);

    /* read-only file: dirty release and write-back are refused */
    p = open_pager(ENG_URING, 1 << 20, 0, 4, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_KV, 0);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, 2, FG_TIER_HOST, &v, &err), FG_OK);
    ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_pager_write_back(p, 2, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    fg_pager_close(p);
}
END_TEST

START_TEST(t_bad_input)
{
    fg_err err;
    fg_pager *p;
    fg_pager_config c = {{0, 1000, 0}, 0, 0, 0, NULL, NULL, FG_PAGER_NO_CUDA, NULL, NULL};
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_ERR_INVALID_ARG);
    c.budget[FG_TIER_HOST] = 1 << 20;
    c.io_block = 1000;
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "io_block") != NULL, "%s", err.msg);
    /* a refused open destroys the engine and device it was handed (ASan sees any leak) */
    ck_assert_int_eq(fg_pager_io_uring_create(4, &c.io, &err), FG_OK);
    ck_assert_int_eq(fg_pager_device_host_create(&c.device, &err), FG_OK);
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_ERR_INVALID_ARG);
    c.io = NULL;
    c.device = NULL;
    c.io_block = 0;
    c.budget[FG_TIER_DEVICE] = 1 << 20; /* no device given, CUDA off: DEVICE tier absent */
    ck_assert_int_eq(fg_pager_open(&c, &p, &err), FG_OK);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_int_eq(st.device_present, 0);
    uint32_t file;
    ck_assert_int_eq(fg_pager_add_file(p, path_in(g_dir, "missing"), 0, &file, &err), FG_ERR_IO);
    ck_assert_msg(strstr(err.msg, "missing") != NULL, "%s", err.msg);
    dfile f;
    make_file(&f, path_in(g_dir, "b.bin"), 2, 31);
    ck_assert_int_eq(fg_pager_add_file(p, f.path, 0, &file, &err), FG_OK);
    fg_pager_chunk_desc d = {file, 100, 10, 4096, 0, 0, 0, {0}, FG_CHUNK_WEIGHT, 0};
    uint32_t id;
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_ERR_INVALID_ARG);
    d.offset = f.off[0];
    d.length = f.len[0];
    d.padded = f.padded[0];
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
    /* a chunk registered past the end of the file: end-of-file inside it */
    d.offset = f.size + 4096 * 10;
    ck_assert_int_eq(fg_pager_add_chunk(p, &d, &id, &err), FG_OK);
    fg_pager_view v;
    ck_assert_int_eq(fg_pager_acquire(p, id, FG_TIER_HOST, &v, &err), FG_ERR_PAGER_SHORT);
    ck_assert_msg(strstr(err.msg, "end of file") != NULL, "%s", err.msg);
    ck_assert_int_eq(fg_pager_acquire(p, 99, FG_TIER_HOST, &v, &err), FG_ERR_PAGER_SHORT);
    check_ok(p);
    fg_pager_close(p);
    fg_pager_close(NULL);
    ck_assert_str_eq(fg_strerror(FG_ERR_PAGER_BUDGET), "pager: tier budget exhausted");
}
END_TEST

/* A write-behind: the release returns with the write in flight (WRITING_BACK, counted once it
 * lands); the chunk is clean afterwards, so evicting it writes nothing more and reading it back
 * gives the new bytes, checked against the checksum taken when the write began. A failed
 * write-behind (ENOSPC) is reported by the next call, and the chunk stays dirty in memory. */
START_TEST(t_write_behind)
{
    fg_err err;
    dfile f;
    for (int fail = 0; fail < 2; fail++) {
        make_file(&f, path_in(g_dir, "wb.bin"), 6, 23);
        fg_pager_fault fault = {FG_FAULT_ENOSPC, 1};
        fg_pager *p = open_pager(ENG_URING, 1 << 20, 0, 4, 16 << 10, fail ? &fault : NULL);
        reg_file(p, &f, 1, FG_CHUNK_KV, 0);
        fg_pager_view v;
        ck_assert_int_eq(fg_pager_acquire(p, 2, FG_TIER_HOST, &v, &err), FG_OK);
        tu_fill(v.ptr, v.length, 77 + (uint64_t)fail);
        uint64_t h = XXH3_64bits(v.ptr, v.length);
        ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY | FG_PAGER_WRITE_BEHIND, &err),
                         FG_OK);
        check_ok(p);
        /* the release did not wait: the write is in flight, or it has already landed (or
         * failed) and was reaped by the release's own progress step, which a fast file system
         * allows (seen once under ASan on a loaded machine) */
        const pchunk *wc = &p->chunks[2];
        ck_assert_msg(wc->state == CS_WRITING_BACK ||
                          (wc->state == CS_HOST && wc->dirty == (fail ? 1 : 0)),
                      "fail %d: state %d dirty %d", fail, (int)wc->state, (int)wc->dirty);
        if (fail) {
            fg_pager_ticket tk;
            int rc = fg_pager_acquire(p, 2, FG_TIER_HOST, &v, &err);
            ck_assert_int_eq(rc, FG_ERR_NO_SPACE);
            ck_assert_msg(strstr(err.msg, "wb.bin") != NULL, "%s", err.msg);
            ck_assert_int_eq(fg_pager_prefetch(p, 3, FG_TIER_HOST, &tk, &err), FG_ERR_NO_SPACE);
            /* not lost: dirty in memory once its other writes drain */
            const pchunk *c = &p->chunks[2];
            ck_assert(c->err && (c->state == CS_WRITING_BACK || (c->state == CS_HOST &&
                                                                 c->dirty)));
            check_ok(p);
            fg_pager_close(p);
            continue;
        }
        ck_assert_int_eq(fg_pager_evict(p, 2, &err), FG_OK); /* waits; a drop, no second write */
        fg_pager_stats st;
        fg_pager_stats_get(p, &st);
        ck_assert_uint_eq(st.write_backs, 1);
        ck_assert_uint_eq(st.moved[FG_TIER_HOST][FG_TIER_DISK], f.padded[2]);
        ck_assert_msg(fg_pager_acquire(p, 2, FG_TIER_HOST, &v, &err) == FG_OK, "%s", err.msg);
        ck_assert(XXH3_64bits(v.ptr, v.length) == h);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
        /* a write-behind still in flight at close lands */
        ck_assert_int_eq(fg_pager_acquire(p, 4, FG_TIER_HOST, &v, &err), FG_OK);
        tu_fill(v.ptr, v.length, 99);
        h = XXH3_64bits(v.ptr, v.length);
        ck_assert_int_eq(fg_pager_release(p, &v, FG_PAGER_DIRTY | FG_PAGER_WRITE_BEHIND, &err),
                         FG_OK);
        fg_pager_close(p);
        int fd = open(f.path, O_RDONLY);
        uint8_t *b = malloc(f.len[4]);
        ck_assert_int_eq(pread(fd, b, f.len[4], (off_t)f.off[4]), (ssize_t)f.len[4]);
        ck_assert(XXH3_64bits(b, f.len[4]) == h);
        free(b);
        close(fd);
    }
}
END_TEST

/* Uploads run on the device's copy engine while the caller goes on: prefetching chunks homed
 * on the GPU returns with their copies still in flight (the link is slow: ~0.2 s a chunk), each
 * holding its HOST and DEVICE extents; waiting completes them with the right bytes; a HOST
 * allocation that finds no victim completes them (their HOST extents free up) instead of
 * failing; close with uploads in flight is clean. */
START_TEST(t_async_uploads)
{
    enum { N = 4, CH = 1 << 20 };
    fg_err err;
    const char *path = path_in(g_dir, "u.bin");
    dfile f = {path, N + 1, {0}, {0}, {0}, {0}, 0};
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    uint8_t *b = malloc(CH);
    for (uint32_t i = 0; i <= N; i++) {
        f.off[i] = (uint64_t)i * CH, f.len[i] = f.padded[i] = CH;
        tu_fill(b, CH, 500 + i);
        f.xxh[i] = XXH3_64bits(b, CH);
        ck_assert_int_eq(pwrite(fd, b, CH, (off_t)f.off[i]), CH);
    }
    close(fd);
    free(b);
    g_sim_link = 0.005; /* GB/s: 1 MiB in 0.21 s */
    fg_pager *p = open_pager(ENG_URING, N * CH, N * CH, 8, 0, NULL);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_ticket tk[N];
    fg_pager_view v;
    for (uint32_t i = 0; i < N; i++) { /* into RAM first */
        ck_assert_msg(fg_pager_acquire(p, i, FG_TIER_HOST, &v, &err) == FG_OK, "%s", err.msg);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_msg(fg_pager_prefetch(p, i, FG_TIER_DEVICE, &tk[i], &err) == FG_OK, "%s",
                      err.msg);
        ck_assert_uint_ne(tk[i], 0); /* something to wait for */
    }
    fg_pager_stats st;
    fg_device_sim_stats ds;
    fg_pager_stats_get(p, &st);
    fg_device_sim_stats_get(g_sim, &ds);
    check_ok(p);
    ck_assert_uint_eq(st.async_uploads, N);
    ck_assert_uint_eq(st.moved[FG_TIER_HOST][FG_TIER_DEVICE], 0); /* none completed yet */
    ck_assert_uint_eq(st.used[FG_TIER_HOST], N * CH);              /* sources still held */
    ck_assert_uint_eq(st.used[FG_TIER_DEVICE], N * CH);
    ck_assert_msg(ds.busy_s < N * 0.2, "the copies ran before prefetch returned (%.3f s)",
                  ds.busy_s);
    /* the fifth chunk needs HOST room that only finished uploads free */
    expect_chunk(p, &f, N, N, FG_TIER_HOST);
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.moved[FG_TIER_HOST][FG_TIER_DEVICE], (uint64_t)N * CH);
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_int_eq(fg_pager_wait(p, tk[i], &err), FG_OK);
        ck_assert_int_eq(fg_pager_acquire(p, i, FG_TIER_DEVICE, &v, &err), FG_OK);
        ck_assert_msg(XXH3_64bits(bytes_of(&v), v.length) == f.xxh[i], "chunk %u", i);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
    }
    fg_pager_stats_get(p, &st);
    ck_assert_uint_eq(st.hits, N); /* the acquires found them on the GPU */
    /* uploads in flight at close: waited for, nothing leaks (ASan) */
    for (uint32_t i = 0; i < N; i++)
        ck_assert_int_eq(fg_pager_evict(p, i, &err), FG_OK);
    expect_chunk(p, &f, 0, 0, FG_TIER_HOST);
    ck_assert_int_eq(fg_pager_prefetch(p, 0, FG_TIER_DEVICE, &tk[0], &err), FG_OK);
    check_ok(p);
    fg_pager_close(p);
    sim_done();
}
END_TEST

/* The CUDA device: on a machine without a GPU it refuses cleanly; with one, chunks go to the
 * GPU and back intact (DEVICE -> HOST copies the device bytes, not a stale host copy), acquired
 * there or prefetched (asynchronous uploads on the copy stream). */
START_TEST(t_cuda)
{
    fg_err err;
    fg_pager_device *dev;
    int rc = fg_pager_device_cuda_create(&dev, &err);
    if (rc != FG_OK) {
        ck_assert_int_eq(rc, FG_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.msg, "cuda") != NULL, "%s", err.msg);
        return; /* no GPU here: nothing more to run */
    }
    dfile f;
    make_file(&f, path_in(g_dir, "g.bin"), 10, 37);
    fg_pager_config c = {{0, 1 << 20, 1 << 20}, 8, 0, FG_PAGER_ENGINE_URING, NULL, dev,
                         FG_PAGER_VERIFY, NULL, NULL};
    fg_pager *p;
    ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    for (uint32_t i = 0; i < f.n; i++) {
        fg_pager_view v;
        ck_assert_msg(fg_pager_acquire(p, i, FG_TIER_DEVICE, &v, &err) == FG_OK, "%s", err.msg);
        ck_assert_int_eq(fg_pager_release(p, &v, 0, &err), FG_OK);
        expect_chunk(p, &f, i, i, FG_TIER_HOST); /* DEVICE -> HOST */
    }
    /* prefetched uploads (the copy stream, events): in RAM, prefetched to the GPU, waited for,
     * brought back intact */
    fg_pager_ticket tk[10];
    for (uint32_t i = 0; i < f.n; i++) { /* until the 1 MiB pool is full of uploads */
        int r = fg_pager_prefetch(p, i, FG_TIER_DEVICE, &tk[i], &err);
        ck_assert_msg(r == FG_OK || r == FG_ERR_PAGER_BUDGET, "%s", err.msg);
    }
    check_ok(p);
    for (uint32_t i = 0; i < f.n; i++) {
        ck_assert_msg(fg_pager_wait(p, tk[i], &err) == FG_OK, "%s", err.msg);
        expect_chunk(p, &f, i, i, FG_TIER_HOST);
    }
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_int_eq(st.device_present, 1);
    ck_assert_int_eq(st.host_locked, 1);
    ck_assert_uint_gt(st.moved[FG_TIER_DEVICE][FG_TIER_HOST], 0);
    ck_assert_uint_gt(st.async_uploads, 0);
    fg_pager_close(p);
}
END_TEST

/* The CUDA device pins the HOST pool granule by granule (cudaHostRegister) as it is used: with
 * 2 GiB HOST, a few MiB pinned (on the base commit: cudaHostAlloc of all 2 GiB at open), the
 * prefetched uploads asynchronous and intact. Under the emulated runtime (test_pager under
 * tests/cudaemu) its counters say the same from the runtime's side: the bytes registered are
 * the pool's pinned bytes, no asynchronous copy was staged through pageable memory (the device
 * splits a copy across two registrations), and close unregisters everything. */
START_TEST(t_cuda_pinned)
{
    fg_err err;
    fg_pager_device *dev;
    if (fg_pager_device_cuda_create(&dev, &err) != FG_OK)
        return; /* no GPU here (t_cuda checks the refusal) */
    typedef void (*stats_fn)(size_t *, size_t *, unsigned long long *);
    stats_fn emu = (stats_fn)dlsym(RTLD_DEFAULT, "fgemu_pinned_stats");
    size_t now0 = 0, now = 0, peak = 0;
    unsigned long long staged0 = 0, staged = 0;
    if (emu)
        emu(&now0, &peak, &staged0);
    char name[64];
    snprintf(name, sizeof name, "fgpager-cupin-%d.bin", (int)getpid());
    dfile f;
    make_file(&f, path_in(g_dir, name), 24, 43);
    fg_pager_config c = {{0, 2ull << 30, 64 << 20}, 8, 1 << 20, FG_PAGER_ENGINE_URING, NULL, dev,
                         FG_PAGER_VERIFY, NULL, NULL};
    fg_pager *p;
    ck_assert_msg(fg_pager_open(&c, &p, &err) == FG_OK, "%s", err.msg);
    reg_file(p, &f, 0, FG_CHUNK_WEIGHT, 0);
    fg_pager_ticket tk[24];
    for (uint32_t i = 0; i < f.n; i++)
        ck_assert_msg(fg_pager_prefetch(p, i, FG_TIER_DEVICE, &tk[i], &err) == FG_OK, "%s",
                      err.msg);
    for (uint32_t i = 0; i < f.n; i++) {
        ck_assert_msg(fg_pager_wait(p, tk[i], &err) == FG_OK, "%s", err.msg);
        expect_chunk(p, &f, i, i, FG_TIER_HOST); /* DEVICE -> HOST */
    }
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    ck_assert_uint_gt(st.async_uploads, 0);
    ck_assert_uint_gt(st.host_pinned, 0);
    ck_assert_msg(st.host_pinned <= (16u << 20), "pinned %llu bytes of 2 GiB",
                  (unsigned long long)st.host_pinned);
    if (emu) {
        emu(&now, &peak, &staged);
        ck_assert_uint_eq(now - now0, st.host_pinned);
        ck_assert_uint_eq(staged, staged0);
    }
    fg_pager_close(p);
    if (emu) {
        emu(&now, &peak, &staged);
        ck_assert_uint_eq(now, now0);
    }
    unlink(f.path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pager");
    TCase *tc = tcase_create("pager");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, t_engines_tiers, 0, ENG_COUNT);
    tcase_add_test(tc, t_fgt_file);
    tcase_add_loop_test(tc, t_budget_is_ceiling, 0, 3);
    tcase_add_loop_test(tc, t_pinned_is_ceiling, 0, 3);
    tcase_add_loop_test(tc, t_pool_pin_runs, 0, 2);
    tcase_add_test(tc, t_fresh_and_memory_only);
    tcase_add_loop_test(tc, t_random_budgets, 0, 4);
    tcase_add_test(tc, t_async_uploads);
    tcase_add_test(tc, t_write_behind);
    tcase_add_test(tc, t_prefetch_dedup);
    tcase_add_test(tc, t_pinned_survives);
    tcase_add_loop_test(tc, t_faults, 0, (int)(sizeof fcases / sizeof fcases[0]));
    tcase_add_loop_test(tc, t_short_once, 0, 2);
    tcase_add_test(tc, t_checksum);
    tcase_add_test(tc, t_hash);
    tcase_add_test(tc, t_verify_once);
    tcase_add_loop_test(tc, t_corrupt_read, 0, 2);
    tcase_add_loop_test(tc, t_offload_checksum, 0, 2);
    tcase_add_test(tc, t_placement);
    tcase_add_loop_test(tc, t_write_back, 0, 2);
    tcase_add_test(tc, t_streaming_spares_homed);
    tcase_add_loop_test(tc, t_prefault, 0, 3);
    tcase_add_test(tc, t_bad_input);
    tcase_add_test(tc, t_cuda);
    tcase_add_test(tc, t_cuda_pinned);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
