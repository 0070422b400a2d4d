/* test_backend_sim.c - the simulated device and its backend (compute/device_sim.c,
 * compute/backend_sim.c): device memory host code cannot touch, copies through the copy engine
 * with events (synchronous copies and the upload stream not queued behind it), operands resident on the device used in place (same bits as staged ones, no
 * link traffic: a Linear, a norm, the scale op, a gather by device row indices), copies
 * overlapping compute in a piecewise Linear, attention delegated to the CPU where the cache is
 * in host memory, and clear errors for a full device or a bad copy.
 * (test_ops runs every op of the sim backend against the reference.)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "fg_progress.h"
#include "testutil.h"

static fg_backend *sim(double gbps, int cpu_attention, int no_overlap)
{
    fg_backend_sim_opts o = {1, FG_COMPUTE_F32, 256u << 20, gbps, cpu_attention, no_overlap};
    fg_backend *be;
    fg_err err;
    ck_assert_int_eq(fg_backend_sim_create(&o, &be, &err), FG_OK);
    return be;
}

/* n bytes of src in fresh device memory of be. */
static void *upload(fg_backend *be, const void *src, size_t n)
{
    fg_device *d = be->dev;
    void *p;
    fg_err err;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, n, &p, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, p, FG_BUFT_DEVICE, src, FG_BUFT_HOST, n, NULL, &err), FG_OK);
    return p;
}

static void download(fg_backend *be, void *dst, const void *src, size_t n)
{
    fg_err err;
    ck_assert_int_eq(be->dev->iface->copy(be->dev, dst, FG_BUFT_HOST, src, FG_BUFT_DEVICE, n,
                                          NULL, &err), FG_OK);
}

static uint64_t moved(const fg_backend *be)
{
    fg_device_sim_stats st;
    fg_device_sim_stats_get(be->dev, &st);
    return st.bytes[0][1] + st.bytes[1][0];
}

START_TEST(host_code_cannot_touch_device_memory)
{
    fg_backend *be = sim(0, 0, 0);
    void *p;
    fg_err err;
    ck_assert_int_eq(be->dev->iface->alloc(be->dev, FG_BUFT_DEVICE, 4096, &p, &err), FG_OK);
    *(volatile char *)p = 1; /* faults: the test expects SIGSEGV */
    fg_backend_free(be);
}
END_TEST

/* Pieces of f32 rows handed out from host memory, or from device memory. */
typedef struct pieces {
    const void *data[16];
    size_t len;
    uint64_t rows[17];
    uint32_t n, k;
    int held, max_held;
} pieces;

static int p_acquire(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err)
{
    (void)err;
    pieces *s = ctx;
    s->held++;
    s->max_held = s->held > s->max_held ? s->held : s->max_held;
    uint64_t r = s->rows[i + 1] - s->rows[i];
    *p = (fg_wpiece){s->data[i], r * s->k * 4, fg_codec_float(FG_CODEC_F32), 2, {s->n, s->k},
                     s->rows[i], r, NULL};
    return FG_OK;
}

static int p_release(void *ctx, fg_wpiece *p, fg_err *err)
{
    (void)p, (void)err;
    ((pieces *)ctx)->held--;
    return FG_OK;
}

static fg_weight p_weight(pieces *s, uint32_t n_pieces)
{
    return (fg_weight){NULL, n_pieces, s->rows, p_acquire, p_release, NULL, s};
}

START_TEST(device_operands_are_used_in_place)
{
    enum { M = 3, N = 40, K = 24, P = 4 };
    fg_backend *be = sim(0, 0, 0);
    float w[N * K], x[M * K], bias[N], y1[M * N], y2[M * N];
    tu_randf(w, N * K, 1, 1.0f);
    tu_randf(x, M * K, 2, 1.0f);
    tu_randf(bias, N, 3, 1.0f);
    pieces hs = {.n = N, .k = K}, ds = {.n = N, .k = K};
    for (uint32_t i = 0; i <= P; i++)
        hs.rows[i] = ds.rows[i] = (uint64_t)i * N / P;
    for (uint32_t i = 0; i < P; i++) {
        hs.data[i] = w + hs.rows[i] * K;
        ds.data[i] = upload(be, hs.data[i], (hs.rows[i + 1] - hs.rows[i]) * K * 4);
    }
    fg_err err;
    fg_weight hw = p_weight(&hs, P), dw = p_weight(&ds, P);
    ck_assert_int_eq(be->iface->linear(be, x, &hw, bias, y1, M, N, K, &err), FG_OK);
    void *dx = upload(be, x, sizeof x), *db = upload(be, bias, sizeof bias), *dy;
    ck_assert_int_eq(be->dev->iface->alloc(be->dev, FG_BUFT_DEVICE, sizeof y2, &dy, &err), FG_OK);
    uint64_t before = moved(be);
    ck_assert_int_eq(be->iface->linear(be, dx, &dw, db, dy, M, N, K, &err), FG_OK);
    ck_assert_uint_eq(moved(be), before); /* everything was on the device already */
    download(be, y2, dy, sizeof y2);
    ck_assert(!memcmp(y1, y2, sizeof y1));
    ck_assert_int_eq(hs.held, 0);
    ck_assert_int_eq(ds.held, 0);
    ck_assert_int_le(hs.max_held, 1); /* the owner lends one piece at a time */
    /* a norm in place on device memory */
    float g[K], b[K], z1[M * K], z2[M * K];
    tu_randf(g, K, 4, 1.0f);
    tu_randf(b, K, 5, 1.0f);
    ck_assert_int_eq(be->iface->layernorm(be, x, g, b, z1, M, K, 1e-5f, &err), FG_OK);
    void *dg = upload(be, g, sizeof g), *dbb = upload(be, b, sizeof b);
    ck_assert_int_eq(be->iface->layernorm(be, dx, dg, dbb, dx, M, K, 1e-5f, &err), FG_OK);
    download(be, z2, dx, sizeof z2);
    ck_assert(!memcmp(z1, z2, sizeof z1));
    /* the query scaling in place, and a gather of device pieces by row indices in device
     * memory (how the engine decodes its SMALL tensors on a device backend): nothing moves */
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = N - 1 - i;
    void *dids = upload(be, ids, sizeof ids), *dout;
    ck_assert_int_eq(be->dev->iface->alloc(be->dev, FG_BUFT_DEVICE, sizeof w, &dout, &err), FG_OK);
    ck_assert_int_eq(be->iface->reserve(be, N * K, &err), FG_OK); /* decode room */
    before = moved(be);
    ck_assert_int_eq(be->iface->scale(be, dx, 0.125f, M * K, &err), FG_OK);
    ck_assert_msg(be->iface->gather(be, &dw, N, dids, N, dout, K, &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_eq(moved(be), before);
    ck_assert_int_eq(ds.held, 0);
    download(be, z2, dx, sizeof z2);
    for (int i = 0; i < M * K; i++)
        ck_assert(z2[i] == z1[i] * 0.125f);
    float g2[N * K];
    download(be, g2, dout, sizeof g2);
    for (int i = 0; i < N; i++)
        ck_assert(!memcmp(g2 + i * K, w + (N - 1 - i) * K, K * 4));
    fg_backend_free(be);
}
END_TEST

/* One piecewise Linear with x and y resident on the device: wall time, and copy + compute. */
static void timed_linear(double gbps, int no_overlap, const float *w, const float *x,
                         uint32_t m, uint32_t n, uint32_t k, uint32_t np, double *wall,
                         double *sum)
{
    fg_backend *be = sim(gbps, 0, no_overlap);
    pieces s = {.n = n, .k = k};
    for (uint32_t i = 0; i <= np; i++)
        s.rows[i] = (uint64_t)i * n / np;
    for (uint32_t i = 0; i < np; i++)
        s.data[i] = w + s.rows[i] * k;
    fg_weight hw = p_weight(&s, np);
    fg_err err;
    void *dx = upload(be, x, (size_t)m * k * 4), *dy;
    ck_assert_int_eq(be->dev->iface->alloc(be->dev, FG_BUFT_DEVICE, (size_t)m * n * 4, &dy, &err),
                     FG_OK);
    fg_device_sim_stats st0, st1;
    fg_device_sim_stats_get(be->dev, &st0);
    double c0 = fg_backend_sim_compute_s(be), t0 = fg_now();
    ck_assert_int_eq(be->iface->linear(be, dx, &hw, NULL, dy, m, n, k, &err), FG_OK);
    *wall = fg_now() - t0;
    fg_device_sim_stats_get(be->dev, &st1);
    *sum = (st1.busy_s - st0.busy_s) + (fg_backend_sim_compute_s(be) - c0);
    ck_assert_uint_eq(st1.bytes[0][1] - st0.bytes[0][1], (uint64_t)n * k * 4); /* the pieces */
    fg_backend_free(be);
}

/* A slow link: piece i + 1 uploads while piece i multiplies, so the wall time is well under
 * the copy time plus the compute time (both measured in the same run); without overlap it is
 * their sum. The link is set so the pieces' upload takes about as long as their multiply, as
 * measured just before: when the machine's load changes between that measurement and the run
 * (the compute several times faster, the copies then dominating), the ratio nears 1 however
 * well they overlap, so the overlapped run is tried up to 3 times, each with its own
 * measurement. */
START_TEST(copies_overlap_compute)
{
    enum { M = 1024, N = 1536, K = 1024, P = 6 };
    float *w = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
    tu_randf(w, (size_t)N * K, 7, 1.0f);
    tu_randf(x, (size_t)M * K, 8, 1.0f);
    double wall[2], sum[2], c, gbps = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        timed_linear(0, 0, w, x, M, N, K, P, &wall[0], &c); /* the compute time alone */
        gbps = (double)N * K * 4 / c / 1e9;
        timed_linear(gbps, 0, w, x, M, N, K, P, &wall[0], &sum[0]);
        printf("copies_overlap_compute (link %.2f GB/s): overlapped %.3f s (copy + compute "
               "%.3f s)\n", gbps, wall[0], sum[0]);
        if (wall[0] < 0.85 * sum[0])
            break;
    }
    timed_linear(gbps, 1, w, x, M, N, K, P, &wall[1], &sum[1]);
    printf("copies_overlap_compute: serial %.3f s (%.3f s)\n", wall[1], sum[1]);
    ck_assert_msg(wall[0] < 0.85 * sum[0], "overlapped: wall %.3f s, copy + compute %.3f s",
                  wall[0], sum[0]);
    ck_assert_msg(wall[1] > 0.95 * sum[1], "serial: wall %.3f s, copy + compute %.3f s", wall[1],
                  sum[1]);
    free(w);
    free(x);
}
END_TEST

/* --cpu-cache-compute: attention over a host cache runs where the cache is (nothing crosses
 * the link; with its other operands on the device only they do) and gives the same bits as
 * the device's staged attention. */
START_TEST(attention_runs_where_the_cache_lives)
{
    enum { H = 4, D = 8, CAP = 16, NQ = 2, POS = 9 };
    float q[NQ * H * D], k[CAP * H * D], v[CAP * H * D], o1[NQ * H * D], o2[NQ * H * D];
    float sc[4 * 2 * CAP];
    uint8_t valid[CAP];
    tu_randf(q, sizeof q / 4, 11, 1.0f);
    tu_randf(k, sizeof k / 4, 12, 1.0f);
    tu_randf(v, sizeof v / 4, 13, 1.0f);
    for (int i = 0; i < CAP; i++)
        valid[i] = i != 3;
    fg_kv_view kv = {k, v, fg_codec_float(FG_CODEC_F32), H * D * 4, H * D, CAP};
    fg_attn_op a = {q, kv, valid, NQ, POS, H, H, D, 0, 0, o1, sc, 2 * CAP, 4, NULL, NULL};
    fg_err err;
    fg_backend *dev = sim(0, 0, 0), *cpu = sim(0, 1, 0);
    ck_assert_int_eq(dev->iface->attention(dev, &a, &err), FG_OK);
    ck_assert_uint_gt(moved(dev), (uint64_t)(POS + NQ) * H * D * 4 * 2);
    a.out = o2;
    ck_assert_int_eq(cpu->iface->attention(cpu, &a, &err), FG_OK);
    ck_assert_uint_eq(moved(cpu), 0);
    ck_assert(!memcmp(o1, o2, sizeof o1));
    /* the queries, validity, output and scratch in device memory (a device workspace): they
     * cross the link, the cache does not */
    void *dq = upload(cpu, q, sizeof q), *dvalid = upload(cpu, valid, sizeof valid), *dout, *dsc;
    ck_assert_int_eq(cpu->dev->iface->alloc(cpu->dev, FG_BUFT_DEVICE, sizeof o2, &dout, &err),
                     FG_OK);
    ck_assert_int_eq(cpu->dev->iface->alloc(cpu->dev, FG_BUFT_DEVICE, sizeof sc, &dsc, &err),
                     FG_OK);
    uint64_t before = moved(cpu);
    fg_attn_op b = a;
    b.q = dq, b.valid = dvalid, b.out = dout, b.scratch = dsc;
    ck_assert_int_eq(cpu->iface->attention(cpu, &b, &err), FG_OK);
    ck_assert_uint_eq(moved(cpu) - before, 2 * sizeof q + sizeof valid);
    memset(o2, 0, sizeof o2);
    download(cpu, o2, dout, sizeof o2);
    ck_assert(!memcmp(o1, o2, sizeof o1));
    fg_backend_free(dev);
    fg_backend_free(cpu);
}
END_TEST

START_TEST(a_full_device_and_bad_copies_are_refused)
{
    fg_device *d;
    fg_err err;
    ck_assert_int_eq(fg_device_sim_create(1 << 20, 0, &d, &err), FG_OK);
    void *a, *b;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 700 << 10, &a, &err), FG_OK);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 700 << 10, &b, &err), FG_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "simulated device: no room"));
    d->iface->free(d, FG_BUFT_DEVICE, a); /* the room comes back */
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 700 << 10, &b, &err), FG_OK);
    char host[64] = {0};
    ck_assert_int_eq(d->iface->copy(d, host, FG_BUFT_DEVICE, host, FG_BUFT_HOST, 64, NULL, &err),
                     FG_ERR_INVALID_ARG); /* host memory named as device memory */
    ck_assert_int_eq(d->iface->copy(d, b, FG_BUFT_DEVICE, host, FG_BUFT_HOST, 2 << 20, NULL,
                                    &err), FG_ERR_INVALID_ARG); /* past the end */
    /* a shared handle keeps the arena alive after the first is freed */
    fg_device *d2 = d->iface->retain(d);
    ck_assert_ptr_nonnull(d2);
    fg_device_free(d);
    ck_assert_int_eq(d2->iface->copy(d2, b, FG_BUFT_DEVICE, host, FG_BUFT_HOST, 64, NULL, &err),
                     FG_OK);
    d2->iface->free(d2, FG_BUFT_DEVICE, b);
    fg_device_free(d2);
    ck_assert_int_eq(fg_device_sim_create(0, 0, &d, &err), FG_ERR_INVALID_ARG);
}
END_TEST

/* Pinned host memory keeps a GPU's rules: pin registers host memory in place (adjacent ranges
 * fine, an overlapping one refused, as cudaHostRegister refuses it), a copy may name as PINNED
 * memory that is all pinned (across adjacent ranges too, asynchronously) or in a PINNED
 * allocation, and naming anything else PINNED is refused; unpinned, it is refused again. */
START_TEST(pinned_memory_rules)
{
    fg_device *d;
    fg_err err;
    ck_assert_int_eq(fg_device_sim_create(1 << 20, 0, &d, &err), FG_OK);
    ck_assert_ptr_nonnull(d->iface->pin);
    uint8_t *h = aligned_alloc(4096, 4 * 4096), *back = calloc(1, 3 * 4096);
    for (int i = 0; i < 4 * 4096; i++)
        h[i] = (uint8_t)(i * 13 + 5);
    void *dv, *pa;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, 3 * 4096, &dv, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dv, FG_BUFT_DEVICE, h, FG_BUFT_PINNED, 4096, NULL, &err),
                     FG_ERR_INVALID_ARG); /* not pinned yet */
    ck_assert_int_eq(d->iface->pin(d, h, 2 * 4096, &err), FG_OK);
    ck_assert_int_eq(d->iface->pin(d, h + 4096, 2 * 4096, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "overlaps"));
    ck_assert_int_eq(d->iface->pin(d, h + 2 * 4096, 4096, &err), FG_OK); /* adjacent */
    fg_event *ev;
    ck_assert_int_eq(d->iface->copy(d, dv, FG_BUFT_DEVICE, h, FG_BUFT_PINNED, 3 * 4096, &ev,
                                    &err), FG_OK); /* across two ranges */
    ck_assert_int_eq(d->iface->event_wait(d, ev, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dv, FG_BUFT_DEVICE, h + 4096, FG_BUFT_PINNED, 3 * 4096,
                                    NULL, &err), FG_ERR_INVALID_ARG); /* past the pinned */
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_PINNED, 3 * 4096, &pa, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, pa, FG_BUFT_PINNED, dv, FG_BUFT_DEVICE, 3 * 4096, NULL,
                                    &err), FG_OK);
    ck_assert_int_eq(memcmp(pa, h, 3 * 4096), 0);
    d->iface->unpin(d, h);
    ck_assert_int_eq(d->iface->copy(d, back, FG_BUFT_PINNED, dv, FG_BUFT_DEVICE, 4096, NULL,
                                    &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(d->iface->copy(d, h + 2 * 4096, FG_BUFT_PINNED, dv, FG_BUFT_DEVICE, 4096,
                                    NULL, &err), FG_OK);
    d->iface->unpin(d, h + 2 * 4096);
    ck_assert_int_eq(d->iface->pin(d, h, 4 * 4096, &err), FG_OK); /* all of it free again */
    d->iface->unpin(d, h);
    d->iface->free(d, FG_BUFT_PINNED, pa);
    d->iface->free(d, FG_BUFT_DEVICE, dv);
    fg_device_free(d);
    free(h);
    free(back);
}
END_TEST

/* The streams: with 4 MiB queued on the copy engine over a 20 MB/s link (about 0.2 s), a
 * synchronous copy (the engine's ids and positions) and an upload on the upload stream (the
 * backend's weight pieces) do not wait behind it, and each lands its bytes; sync waits for all. */
START_TEST(synchronous_copies_and_uploads_pass_the_queue)
{
    enum { BIG = 4 << 20, SMALL = 4096 };
    fg_device *d;
    fg_err err;
    ck_assert_int_eq(fg_device_sim_create(16 << 20, 0.02, &d, &err), FG_OK);
    uint8_t *big = malloc(BIG), small[SMALL], back[SMALL];
    memset(big, 0x5a, BIG);
    for (int i = 0; i < SMALL; i++)
        small[i] = (uint8_t)(i * 7);
    void *dbig, *dsmall, *dup;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, BIG, &dbig, &err), FG_OK);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, SMALL, &dsmall, &err), FG_OK);
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, SMALL, &dup, &err), FG_OK);
    double t0 = fg_now();
    fg_event *ev = NULL, *uev = NULL;
    ck_assert_int_eq(d->iface->copy(d, dbig, FG_BUFT_DEVICE, big, FG_BUFT_HOST, BIG, &ev, &err),
                     FG_OK);
    ck_assert_int_eq(d->iface->copy(d, dsmall, FG_BUFT_DEVICE, small, FG_BUFT_HOST, SMALL, NULL,
                                    &err), FG_OK);
    double t_sync = fg_now() - t0;
    ck_assert_int_eq(fg_device_sim_upload(d, dup, small, SMALL, &uev, &err), FG_OK);
    ck_assert_int_eq(d->iface->event_wait(d, uev, &err), FG_OK);
    double t_up = fg_now() - t0;
    ck_assert_int_eq(d->iface->copy(d, back, FG_BUFT_HOST, dsmall, FG_BUFT_DEVICE, SMALL, NULL,
                                    &err), FG_OK);
    ck_assert_mem_eq(back, small, SMALL);
    ck_assert_int_eq(d->iface->copy(d, back, FG_BUFT_HOST, dup, FG_BUFT_DEVICE, SMALL, NULL,
                                    &err), FG_OK);
    ck_assert_mem_eq(back, small, SMALL);
    ck_assert_int_eq(d->iface->sync(d, &err), FG_OK);
    double t_all = fg_now() - t0;
    printf("streams: sync copy %.4f s, upload %.4f s, the queued 4 MiB %.4f s\n", t_sync, t_up,
           t_all);
    ck_assert_msg(t_sync < t_all / 4 && t_up < t_all / 4,
                  "sync %.4f s, upload %.4f s behind the queue (%.4f s)", t_sync, t_up, t_all);
    ck_assert_msg(t_all > 0.15, "the 4 MiB crossed a 20 MB/s link in %.4f s", t_all);
    uint8_t *bb = malloc(BIG);
    ck_assert_int_eq(d->iface->event_wait(d, ev, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, bb, FG_BUFT_HOST, dbig, FG_BUFT_DEVICE, BIG, NULL, &err),
                     FG_OK);
    ck_assert_mem_eq(bb, big, BIG);
    free(bb);
    free(big);
    fg_device_free(d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("backend_sim");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 120);
    tcase_add_test_raise_signal(tc, host_code_cannot_touch_device_memory, SIGSEGV);
    tcase_add_test(tc, device_operands_are_used_in_place);
    tcase_add_test(tc, copies_overlap_compute);
    tcase_add_test(tc, attention_runs_where_the_cache_lives);
    tcase_add_test(tc, a_full_device_and_bad_copies_are_refused);
    tcase_add_test(tc, pinned_memory_rules);
    tcase_add_test(tc, synchronous_copies_and_uploads_pass_the_queue);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
