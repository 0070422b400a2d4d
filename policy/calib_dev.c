/* calib_dev.c - a device's calibration (policy_search.h fg_calib_dev), measured through the
 * backend a run computes on (--backend cuda or sim), for the cost model's GPU tier:
 *  - the link: host -> device and device -> host copies of up to 16 MiB (64 MiB unless quick;
 *    less when one takes 20 ms) from pinned host memory when the device has it (the pager's
 *    HOST pool is pinned then);
 *  - the backend's linear at M = 1, 2, ..., 256 rows on 2048 x 2048 weights of the run's codec
 *    in two pieces resident in device memory, x and y in device memory: a Linear homed on the
 *    GPU. The row counts are timed round-robin (calib.c's reason: a burst of load falls on every
 *    M alike), each rate the median of its rounds;
 *  - the same Linear at M = 64 with its pieces in host memory (what a weight homed in RAM
 *    costs: the backend uploads piece i + 1 while piece i multiplies), against the upload and
 *    the resident multiply alone: the share of the shorter hidden under the longer;
 *  - attention of one query over 2048 keys (32 heads of 64) in an f32 and a 4-bit cache on the
 *    device (a decode step's), and of 256 queries over their causal prefix (a prefill's): a
 *    GPU runs one (query, head) problem a block, so one query a sequence leaves most of it idle
 *    (an H200: 3.9 ns a key and head of 64 at one query) while a prefill fills it; priced at
 *    the decode's rate, opt-6.7b's prefill was predicted 3.9x slower than it ran.
 * The data the measurements compute on crosses the link once, as one row replicated on the
 * device (fill), so a slow simulated link is measured in seconds. Nothing is cached in a file:
 * the simulated device's link is a flag, a GPU is shared.
 */
#include <stdlib.h>
#include <string.h>

#include "calib_int.h"
#include "fg_progress.h"
#include "policy_search.h"
#include "quant.h"

#define N 2048u
#define K 2048u
#define MAXM 256u
#define ROUNDS 32
#define PRE_Q 256u /* a prefill's queries (and keys) for its attention */

typedef struct dbuf {
    fg_device *d;
    fg_buft t;
    void *p;
} dbuf;

static int dalloc(fg_device *d, fg_buft t, uint64_t n, dbuf *b, fg_err *err)
{
    b->d = d, b->t = t, b->p = NULL;
    return d->iface->alloc(d, t, n, &b->p, err);
}

static void dfree(dbuf *b)
{
    if (b->p)
        b->d->iface->free(b->d, b->t, b->p);
    b->p = NULL;
}

/* Host bytes up into device memory (synchronous). */
static int up(fg_device *d, void *dst, const void *src, uint64_t n, fg_err *err)
{
    return d->iface->copy(d, dst, FG_BUFT_DEVICE, src, FG_BUFT_HOST, n, NULL, err);
}

/* n bytes of device memory at dst filled with copies of the host pattern (pn bytes, n a
 * multiple of it): the pattern crosses the link once, the rest is copied on the device
 * (doubling), so a slow link costs the measurement little. */
static int fill(fg_device *d, void *dst, const void *pat, uint64_t pn, uint64_t n, fg_err *err)
{
    int rc = up(d, dst, pat, pn, err);
    for (uint64_t have = pn; rc == FG_OK && have < n; have *= 2)
        rc = d->iface->copy(d, (uint8_t *)dst + have, FG_BUFT_DEVICE, dst, FG_BUFT_DEVICE,
                            n - have < have ? n - have : have, NULL, err);
    return rc;
}

/* ---- the link ---- */

/* The link: copies of n bytes each way, n grown from 1 MiB (x4, up to 16 MiB quick, 64 MiB
 * otherwise) until one takes 20 ms: a slow simulated link is measured in seconds, not minutes. */
static int measure_link(fg_device *d, int quick, fg_calib_dev *c, fg_err *err)
{
    uint64_t most = quick ? 16u << 20 : 64u << 20, n = 1u << 20;
    dbuf h, g;
    int rc = dalloc(d, FG_BUFT_PINNED, most, &h, err);
    if (rc == FG_ERR_UNSUPPORTED)
        rc = dalloc(d, FG_BUFT_HOST, most, &h, err);
    if (rc == FG_OK)
        rc = dalloc(d, FG_BUFT_DEVICE, most, &g, err);
    else
        g.p = NULL;
    if (rc == FG_OK)
        memset(h.p, 1, most);
    for (; rc == FG_OK && n < most; n *= 4) {
        double t0 = fg_now();
        rc = d->iface->copy(d, g.p, FG_BUFT_DEVICE, h.p, h.t, n, NULL, err);
        if (fg_now() - t0 >= 0.02)
            break;
    }
    n = n < most ? n : most;
    double r[2][16];
    int reps = quick ? 3 : 7;
    for (int i = 0; rc == FG_OK && i < reps; i++)
        for (int dir = 0; rc == FG_OK && dir < 2; dir++) {
            double t0 = fg_now();
            rc = dir ? d->iface->copy(d, h.p, h.t, g.p, FG_BUFT_DEVICE, n, NULL, err)
                     : d->iface->copy(d, g.p, FG_BUFT_DEVICE, h.p, h.t, n, NULL, err);
            double dt = fg_now() - t0;
            r[dir][i] = dt > 0 ? (double)n / dt : 0;
        }
    if (rc == FG_OK) {
        c->up = fg_calib_median(r[0], reps);
        c->down = fg_calib_median(r[1], reps);
    }
    dfree(&g);
    dfree(&h);
    return rc;
}

/* ---- Linear ---- */

static int linear(fg_backend *be, fg_calib_pieces *w, const float *x, float *y, uint32_t m,
                  fg_err *err)
{
    fg_weight wt = fg_calib_weight(w);
    return be->iface->linear(be, x, &wt, NULL, y, m, N, K, err);
}

/* The weight matrix in the run's codec, on the host: *len bytes (N rows). */
static int weight_bytes(int q4, uint8_t **out, size_t *len, fg_codec *codec, fg_err *err)
{
    uint64_t dims[2] = {N, K};
    fg_qview v;
    *codec = q4 ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F16);
    *len = (size_t)N * K * 2;
    int rc = q4 ? fg_codec_qview(codec, 2, dims, N, &v, err) : FG_OK;
    if (rc == FG_OK && q4)
        rc = fg_quant_chunk_bytes(&v, len, err);
    if (rc == FG_OK && *len % N)
        rc = fg_err_set(err, FG_ERR_SIZE_MISMATCH, "calibration: a %s chunk of %u rows is %zu "
                        "bytes", fg_codec_name(codec->id), N, *len);
    float *w = rc == FG_OK ? malloc((size_t)N * K * 4) : NULL;
    *out = rc == FG_OK ? malloc(*len) : NULL;
    if (rc == FG_OK && (!w || !*out))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < (size_t)N * K; i++)
        w[i] = (float)(i % 13) * 0.01f - 0.06f;
    if (rc == FG_OK && q4)
        rc = fg_quant_encode(codec, &v, w, FG_CODEC_F32, 0, *out, *len, fg_quant_isa_default(),
                             err);
    else if (rc == FG_OK)
        fg_f32_to_f16(w, (uint16_t *)*out, (size_t)N * K, fg_quant_isa_default());
    free(w);
    return rc;
}

/* Seconds of `calls` Linears at m rows over the copies (round-robin), synchronised. */
static int timed(fg_backend *be, fg_calib_pieces *w, uint32_t copies, const float *x, float *y,
                 uint32_t m, uint32_t calls, double *s, fg_err *err)
{
    const uint8_t *base = w->data;
    size_t len = (size_t)N * w->row_bytes;
    int rc = FG_OK;
    double t0 = fg_now();
    for (uint32_t j = 0; rc == FG_OK && j < calls; j++) {
        w->data = base + (size_t)(j % copies) * len;
        rc = linear(be, w, x, y, m, err);
    }
    w->data = base;
    if (rc == FG_OK)
        rc = be->iface->sync(be, err);
    *s = fg_now() - t0;
    return rc;
}

static int measure_linear(fg_backend *be, int q4, int quick, fg_calib_dev *c, fg_err *err)
{
    fg_device *d = be->dev;
    uint8_t *host = NULL;
    size_t len = 0;
    fg_codec codec;
    dbuf wd = {0}, wh = {0}, xd = {0}, yd = {0};
    uint32_t copies = quick ? 2 : 8; /* 16 MiB of F16 (64 MiB): beyond a cache */
    double *r = malloc((size_t)FG_CALIB_NM * ROUNDS * sizeof *r);
    float *x = malloc((size_t)K * 4); /* one row, replicated on the device */
    int rc = r && x ? weight_bytes(q4, &host, &len, &codec, err)
                    : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = dalloc(d, FG_BUFT_DEVICE, (uint64_t)len * copies, &wd, err);
    if (rc == FG_OK) /* the first row over the link, every other a copy of it */
        rc = fill(d, wd.p, host, len / N, (uint64_t)len * copies, err);
    if (rc == FG_OK)
        rc = dalloc(d, FG_BUFT_DEVICE, (uint64_t)MAXM * K * 4, &xd, err);
    if (rc == FG_OK)
        rc = dalloc(d, FG_BUFT_DEVICE, (uint64_t)MAXM * N * 4, &yd, err);
    for (size_t i = 0; rc == FG_OK && i < K; i++)
        x[i] = (float)(i % 7) * 0.1f - 0.3f;
    if (rc == FG_OK)
        rc = fill(d, xd.p, x, (uint64_t)K * 4, (uint64_t)MAXM * K * 4, err);
    if (rc == FG_OK)
        rc = be->iface->reserve(be, (uint64_t)N / 2 * K, err);
    fg_calib_pieces w = fg_calib_pieces_of(wd.p, len / N, codec, N, K);
    /* warm-up (a GPU's first call loads its kernels) */
    double s;
    if (rc == FG_OK)
        rc = timed(be, &w, copies, xd.p, yd.p, MAXM, 1, &s, err);
    double start = fg_now(), least = quick ? 0.2 : 2.0;
    int rounds = 0;
    while (rc == FG_OK && rounds < ROUNDS && (rounds < 3 || fg_now() - start < least)) {
        for (uint32_t i = 0; rc == FG_OK && i < FG_CALIB_NM; i++) {
            uint32_t m = 1u << i, calls = MAXM / m > 16 ? 16 : MAXM / m;
            rc = timed(be, &w, copies, xd.p, yd.p, m, calls, &s, err);
            r[i * ROUNDS + rounds] = s > 0 ? 2.0 * calls * m * N * K / s : 0;
        }
        rounds++;
    }
    for (uint32_t i = 0; rc == FG_OK && i < FG_CALIB_NM; i++) {
        c->m[i] = 1u << i;
        c->gflops[i] = fg_calib_median(r + i * ROUNDS, rounds) / 1e9;
    }
    /* the overlap: pieces uploaded from (pinned) host memory while the previous multiplies */
    if (rc == FG_OK) {
        rc = dalloc(d, FG_BUFT_PINNED, len, &wh, err);
        if (rc == FG_ERR_UNSUPPORTED)
            rc = dalloc(d, FG_BUFT_HOST, len, &wh, err);
    }
    if (rc == FG_OK)
        memcpy(wh.p, host, len);
    double t_res[5], t_staged[5];
    double t_link = c->up > 0 ? (double)len / c->up : 0;
    /* a link this slow makes the uploads the whole story: no overlap assumed, none measured */
    int reps = t_link > 1.0 ? 0 : t_link > 0.25 ? 1 : quick ? 3 : 5;
    for (int i = 0; rc == FG_OK && i < reps; i++) {
        fg_calib_pieces hs = fg_calib_pieces_of(wh.p, len / N, codec, N, K);
        rc = timed(be, &w, copies, xd.p, yd.p, 64, 1, &t_res[i], err);
        if (rc == FG_OK)
            rc = timed(be, &hs, 1, xd.p, yd.p, 64, 1, &t_staged[i], err);
    }
    if (rc == FG_OK && reps) {
        double tc = fg_calib_median(t_res, reps), ts = fg_calib_median(t_staged, reps);
        double lo = tc < t_link ? tc : t_link, phi = lo > 0 ? (tc + t_link - ts) / lo : 0;
        c->overlap = phi < 0 ? 0 : phi > 1 ? 1 : phi;
    }
    dfree(&wh), dfree(&yd), dfree(&xd), dfree(&wd);
    free(host), free(r), free(x);
    return rc;
}

/* ---- attention ---- */

/* Attention of n_q queries at positions [ctx - n_q, ctx) over their causal prefix: *out the
 * seconds per (query, key) pair and query width. */
static int measure_attn(fg_backend *be, int q4, int quick, uint32_t n_q, uint32_t ctx,
                        double *out, fg_err *err)
{
    fg_device *d = be->dev;
    const uint32_t heads = 32, hd = 64, width = heads * hd;
    fg_codec codec = q4 ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F32);
    size_t rb = fg_kv_row_bytes(&codec, width), rows = (size_t)ctx * width * 4;
    dbuf k = {0}, v = {0}, rowsd = {0}, valid = {0}, q = {0}, o = {0}, sc = {0}, kt = {0},
         vt = {0};
    float *hrows = malloc((size_t)width * 4);
    uint8_t *hvalid = malloc(ctx);
    int rc = hrows && hvalid ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK) {
        for (size_t i = 0; i < width; i++)
            hrows[i] = (float)(i % 11) * 0.02f - 0.1f;
        memset(hvalid, 1, ctx);
    }
    struct { dbuf *b; uint64_t n; } all[] = {
        {&k, (uint64_t)ctx * rb}, {&v, (uint64_t)ctx * rb}, {&rowsd, rows}, {&valid, ctx},
        {&q, (uint64_t)n_q * width * 4}, {&o, (uint64_t)n_q * width * 4},
        {&sc, 16 * 2 * (uint64_t)ctx * 4},
        {&kt, q4 ? rows : 0}, {&vt, q4 ? rows : 0}};
    for (size_t i = 0; rc == FG_OK && i < sizeof all / sizeof all[0]; i++)
        if (all[i].n)
            rc = dalloc(d, FG_BUFT_DEVICE, all[i].n, all[i].b, err);
    if (rc == FG_OK)
        rc = fill(d, rowsd.p, hrows, (uint64_t)width * 4, rows, err);
    if (rc == FG_OK)
        rc = up(d, valid.p, hvalid, ctx, err);
    if (rc == FG_OK)
        rc = fill(d, q.p, hrows, (uint64_t)width * 4, (uint64_t)n_q * width * 4, err);
    fg_kv_view kv = {k.p, v.p, codec, rb, width, ctx};
    if (rc == FG_OK)
        rc = be->iface->kv_store(be, &kv, 0, rowsd.p, rowsd.p, ctx, err);
    fg_attn_op a = {q.p, kv, valid.p, n_q, ctx - n_q, heads, heads, hd, 0, 0, o.p, sc.p,
                    2 * (size_t)ctx, 16, kt.p, vt.p};
    double r[64], start = fg_now();
    int reps = 0;
    while (rc == FG_OK && reps < 64 && (reps < 3 || fg_now() - start < (quick ? 0.05 : 0.5))) {
        double t0 = fg_now();
        rc = be->iface->attention(be, &a, err);
        if (rc == FG_OK)
            rc = be->iface->sync(be, err);
        r[reps++] = fg_now() - t0;
    }
    /* the pairs: query i (position ctx - n_q + i) reads keys [0, ctx - n_q + i] */
    double pairs = (double)n_q * (ctx - n_q) + (double)n_q * (n_q + 1) / 2;
    if (rc == FG_OK)
        *out = fg_calib_median(r, reps) / (pairs * width);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dfree(all[i].b);
    free(hrows), free(hvalid);
    return rc;
}

int fg_calib_measure_device(fg_backend *be, int q4, int quick, fg_calib_dev *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", be->iface->name);
    out->q4 = q4;
    double t0 = fg_now();
    int rc = measure_link(be->dev, quick, out, err);
    if (rc == FG_OK)
        rc = measure_linear(be, q4, quick, out, err);
    if (rc == FG_OK)
        rc = measure_attn(be, 0, quick, 1, 2048, &out->attn_s, err);
    if (rc == FG_OK)
        rc = measure_attn(be, 1, quick, 1, 2048, &out->attn_q4_s, err);
    if (rc == FG_OK)
        rc = measure_attn(be, 0, quick, PRE_Q, PRE_Q, &out->attn_pre_s, err);
    if (rc == FG_OK)
        rc = measure_attn(be, 1, quick, PRE_Q, PRE_Q, &out->attn_pre_q4_s, err);
    out->seconds = fg_now() - t0;
    return rc;
}

double fg_calib_dev_flops(const fg_calib_dev *d, double m)
{
    return fg_calib_interp(d->m, d->gflops, m);
}
