/* backend_cpu.c - the CPU compute backend: Linear layers through OpenBLAS sgemm (fp32) on typed
 * weights decoded piece by piece, the small kernels from kernels_cpu.c and ops_common.c, and
 * the scalar references themselves where SIMD gains nothing (RoPE, argmax, scatter; add and
 * scale split across the helpers: ops_ref.c).
 * Synchronous: `sync` is a no-op. Its device is the host device (core/fg_device.h): host memory,
 * no pinned or device memory.
 *
 * Threads: the backend owns the process's helper-thread pool (par.h). OpenBLAS runs
 * single-threaded and the backend splits each Linear's output columns (rows of W) across the
 * helpers, one sgemm per part. OpenBLAS's own pool spins in sched_yield between calls (its
 * thread timeout is fixed when the library loads), which on a small machine steals the cores
 * from everything between GEMMs (weight decoding, attention, norms): perf on opt-1.3b decode
 * showed 13% of the time in sched_yield. Our helpers sleep on a condition variable instead.
 * Decoding a weight piece (F16/BF16/Q4/Q8 -> f32, bound by memory bandwidth, which one core
 * does not saturate) and attention's (query, head) problems (at prefill sizes each part first
 * copies its KV head's rows together, kv_pack_room) are split across the same helpers;
 * the fused kernels and the decoding of a piece hand out chunks (fg_par_run_dyn: eight a
 * thread, claimed by whoever is free) instead of one fixed part per thread, so a helper that
 * wakes late does not hold up the piece (batch-1 decode runs one per 4 MiB piece).
 *
 * Weight pieces are decoded into one f32 buffer (`reserve`d for the largest chunk) that stays in
 * the cache and is multiplied at once, so the f32 weights never exist whole (this cut opt-1.3b's
 * decode from RAM by 29% against materializing whole sub-layers).
 *
 * Which kernel multiplies a piece:
 *  - F16 at m <= F16_GEMM_MAX_M: the fused F16 kernel (decode);
 *  - F16/BF16 past it: our own GEMM (quant/gemm16.c: x packed once per Linear, weights widened
 *    straight into the panels the register kernel reads, one panel a thread carved from the
 *    decode buffer; it replaced sgemm there: opt-1.3b F16 prefill 0.71-0.76 -> 0.77-0.82 of the
 *    sgemm bench, bench/prefill.sh);
 *  - Q4/Q8 along the input axis under --compute int8: x quantized once per Linear (rows split
 *    across the helpers), then at m >= I8_PANEL_MIN_M for Q4 with groups >= 64 the panel
 *    kernel (fg_quant_gemm_panel: codes unpacked once per slab, 4 x 8 tiles), else the row
 *    kernels (opt-1.3b 4-bit prefill, bench/prefill.sh 8x4: ~150 GFLOP/s with one thread
 *    quantizing and the row kernel, 178 with the quantization split, 201 with the panel kernel);
 *  - everything else decoded to f32 and sgemm.
 * Under --compute bf16 (FG_COMPUTE_BF16) on a CPU with AVX512-BF16 the 16-bit pieces at 2 rows
 * and more (BF16_PANEL_MIN_M: decode blocks too) take fg_w16_gemm_bf16 (VDPBF16PS on x and
 * weights rounded to bfloat16) instead, and Q4/Q8 pieces the int8 kernels as under --compute
 * int8.
 * On AVX-512 CPUs both panel GEMMs run zmm kernels with 32-row strips (gemm16_avx512.c; with
 * AVX512-VNNI gemm_q4p_vnni512.c), the AVX2 kernels' bits at about 1.9x and 2.2x their speed
 * here (bench_gemm_prefill); FG_PREFILL_AVX512=0 keeps the AVX2 kernels.
 * FG_PANEL_GEMM=0 in the environment turns both panel GEMMs off (sgemm on decoded 16-bit
 * pieces, the row kernel for int8), for comparing.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend_int.h"
#include "par.h"

#define DECODE_PARTS 64 /* decode parts with their own status (helpers past it idle) */

typedef struct decode_job {
    const fg_wpiece *p;
    float *dst;
    uint64_t r0, r1, q, cols; /* rows [r0, r1) of the piece; rows per quantum */
    int rc[DECODE_PARTS];
    fg_err err[DECODE_PARTS];
} decode_job;

typedef struct cpu_ctx {
    fg_par *par;
    float *wbuf;          /* one decoded weight piece */
    uint64_t wcap;        /* floats */
    fg_compute compute;
    decode_job djob;      /* the piece being decoded (one op at a time per backend) */
    void *scr;            /* the Linear in progress's x, as int8 activations (fg_quant_act) or
                           * packed for the 16-bit GEMM (fg_xpack): one at a time, counted in
                           * the plan's lscratch */
    size_t scr_cap;       /* bytes */
    float *xal;           /* a 64-byte aligned copy of a misaligned x for the fused F16 kernel */
    size_t xal_cap;       /* floats */
    float *kvp;           /* attention's contiguous copies of a KV head, one region a part
                           * (fg_attn_args.kv_pack) */
    size_t kvp_cap;       /* floats */
    int w16;              /* the panel GEMMs are on (FG_PANEL_GEMM unset or not 0) */
    int bf16;             /* 16-bit pieces through fg_w16_gemm_bf16 (FG_COMPUTE_BF16 on a CPU
                           * with AVX512-BF16) */
    fg_backend_stats st;
} cpu_ctx;

/* The fused F16 kernel beats decoding to f32 + sgemm up to here (bench_f16, one thread: 1.3x at
 * m = 32, 1.1x at 48, 1.04x at 64, 0.88x at 128, x 32-byte aligned; misaligned rows of x cost the
 * kernel 30%, so cpu_linear hands it an aligned copy). */
#define F16_GEMM_MAX_M 48
/* Under --compute bf16 the bfloat16 panel GEMM takes 16-bit pieces from 2 rows on: its
 * VDPBF16PS beats the fused F16 kernel's FMAs at every m but 1, where the fused kernel's one
 * pass over the F16 bytes wins (opt-1.3b F16, 32 sequences x 17 new tokens, 2 threads, AMD EPYC
 * Zen 4, load 3-7; decode seconds fused -> bf16 panel: blocks 2 x 16 19.2 -> 7.8, 4 x 8 20.3 ->
 * 9.7, 8 x 4 19.7 -> 13.4, 32 x 1 19.6 -> 13.7; batch 1: 1.2-1.4 -> 3.7-4.0). */
#define BF16_PANEL_MIN_M 2

/* ---- memory ---- */

static int cpu_sync(fg_backend *be, fg_err *err)
{
    (void)be, (void)err;
    return FG_OK;
}

static int cpu_reserve(fg_backend *be, uint64_t floats, fg_err *err)
{
    cpu_ctx *c = be->ctx;
    if (floats <= c->wcap)
        return FG_OK;
    free(c->wbuf);
    c->wbuf = aligned_alloc(64, (floats * 4 + 63) & ~(uint64_t)63);
    c->wcap = c->wbuf ? floats : 0;
    return c->wbuf ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "cpu backend: %llu floats of weight "
                                        "decode room", (unsigned long long)floats);
}

/* ---- decoding a piece on every helper ---- */

/* Chunks a piece is cut into for fg_par_run_dyn: several per thread, so a helper that wakes
 * late still finds work, and a thread that lost its core to another process holds up at most
 * one chunk (within the DECODE_PARTS that have their own status). */
static uint32_t dyn_chunks(const cpu_ctx *c)
{
    uint32_t n = fg_par_threads(c->par) * 8;
    return n < DECODE_PARTS ? n : DECODE_PARTS;
}


/* Part `part`'s rows: whole quanta (a group of rows for axis-0 groups, one row otherwise; 64
 * values at least so parts do not share cache lines). */
static void decode_part(void *arg, uint32_t part, uint32_t n_parts)
{
    decode_job *j = arg;
    uint32_t parts = n_parts < DECODE_PARTS ? n_parts : DECODE_PARTS;
    uint64_t quanta = (j->r1 - j->r0 + j->q - 1) / j->q, per = (quanta + parts - 1) / parts;
    if (j->q * j->cols < 64)
        per = (per * j->q * j->cols + 63) / 64 * 64 / (j->q * j->cols) + 1;
    uint64_t a = j->r0 + per * part * j->q, b = a + per * j->q;
    b = b < j->r1 ? b : j->r1;
    if (part >= parts || a >= b)
        return;
    j->rc[part] = fgb_decode_rows(j->p, a, b, j->dst + (a - j->r0) * j->cols, FG_QUANT_ISA_AUTO,
                                  &j->err[part]);
}

static int decode(cpu_ctx *c, const fg_wpiece *p, uint64_t r0, uint64_t r1, float *dst,
                  fg_err *err)
{
    decode_job *j = &c->djob;
    j->p = p;
    j->dst = dst;
    j->r0 = r0;
    j->r1 = r1;
    j->q = fgb_quantum(p);
    j->cols = p->n_dims > 1 ? p->dims[1] : 1;
    memset(j->rc, 0, sizeof j->rc);
    if ((r1 - r0) * j->cols < 4096)
        decode_part(j, 0, 1);
    else
        fg_par_run_dyn(c->par, decode_part, j, dyn_chunks(c));
    int rc = FG_OK;
    for (uint32_t k = 0; k < DECODE_PARTS && rc == FG_OK; k++)
        if ((rc = j->rc[k]) && err)
            *err = j->err[k];
    c->st.decoded_bytes += (r1 - r0) * (p->n_dims > 1 ? p->dims[1] : 1) * 4;
    return rc;
}

/* ---- linear ---- */

typedef struct linear_job {
    const float *a, *w, *bias;
    float *c;
    size_t ldc;
    uint32_t m, n, k;
} linear_job;

/* Output columns [n0, n1) of part `part`: whole 16-column groups (parts past the end idle). */
static void linear_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const linear_job *j = arg;
    uint32_t per = ((j->n + n_parts - 1) / n_parts + 15) & ~15u, n0 = per * part;
    uint32_t n1 = n0 + per > j->n ? j->n : n0 + per;
    if (n0 >= n1)
        return;
    float beta = 0.0f;
    if (j->bias) {
        for (uint32_t i = 0; i < j->m; i++)
            memcpy(j->c + (size_t)i * j->ldc + n0, j->bias + n0, (n1 - n0) * sizeof *j->c);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->m, (int)(n1 - n0), (int)j->k,
                1.0f, j->a, (int)j->k, j->w + (size_t)n0 * j->k, (int)j->k, beta, j->c + n0,
                (int)j->ldc);
}

static void gemm(cpu_ctx *c, const float *a, const float *w, const float *bias, float *y,
                 size_t ldy, uint32_t m, uint32_t n, uint32_t k)
{
    linear_job j = {a, w, bias, y, ldy, m, n, k};
    /* small problems are not worth waking a helper for */
    if ((uint64_t)m * n * k < (1u << 18) || n < 32)
        linear_part(&j, 0, 1);
    else
        fg_par_run(c->par, linear_part, &j);
}

/* ---- fused kernels on the piece's own bytes: F16 x f32 (small m), int8 x Q4/Q8 ---- */

typedef struct fused_job {
    const fg_wpiece *p;
    const float *x, *bias;
    const fg_quant_act *act; /* NULL: the F16 kernel */
    float *y;                /* row 0 of the piece's output columns */
    uint32_t m, n, k;        /* y's row stride is n */
    int rc[DECODE_PARTS];
    fg_err err[DECODE_PARTS];
} fused_job;

/* Part `part`'s output columns (rows of the piece): 16 at least a part. */
static void fused_part(void *arg, uint32_t part, uint32_t n_parts)
{
    fused_job *j = arg;
    uint32_t parts = n_parts < DECODE_PARTS ? n_parts : DECODE_PARTS;
    uint64_t rows = j->p->n, per = ((rows + parts - 1) / parts + 15) & ~15ull;
    uint64_t r0 = per * part, r1 = r0 + per < rows ? r0 + per : rows;
    if (part >= parts || r0 >= r1)
        return;
    int rc;
    if (j->act) {
        fg_qview v;
        rc = fg_codec_qview(&j->p->codec, j->p->n_dims, j->p->dims, j->p->n, &v, &j->err[part]);
        if (rc == FG_OK)
            rc = fg_quant_gemm(&j->p->codec, &v, j->p->data, j->p->len, r0, r1, j->act, j->y,
                               j->n, FG_QUANT_ISA_AUTO, &j->err[part]);
    } else {
        rc = fg_f16_gemm((const uint16_t *)j->p->data + r0 * j->k, r1 - r0, j->k, j->k, j->x,
                         j->m, j->k, j->y + r0, j->n, FG_QUANT_ISA_AUTO, &j->err[part]);
    }
    for (uint32_t i = 0; rc == FG_OK && j->bias && i < j->m; i++)
        for (uint64_t r = r0; r < r1; r++)
            j->y[(size_t)i * j->n + r] += j->bias[r];
    j->rc[part] = rc;
}

static int run_fused(cpu_ctx *c, fused_job *j, fg_err *err)
{
    memset(j->rc, 0, sizeof j->rc);
    if ((uint64_t)j->m * j->p->n * j->k < (1u << 16))
        fused_part(j, 0, 1);
    else
        fg_par_run_dyn(c->par, fused_part, j, dyn_chunks(c));
    for (uint32_t k = 0; k < DECODE_PARTS; k++)
        if (j->rc[k]) {
            if (err)
                *err = j->err[k];
            return j->rc[k];
        }
    return FG_OK;
}

/* ---- a Linear's input, quantized or packed once per Linear ---- */

/* What the Linear in progress has made of x in c->scr (its pieces share one codec, so one). */
typedef struct lin_x {
    fg_quant_act act;
    int act_done, xp_done;
} lin_x;

static int scratch(cpu_ctx *c, size_t bytes, fg_err *err)
{
    if (bytes <= c->scr_cap)
        return FG_OK;
    free(c->scr);
    c->scr = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    c->scr_cap = c->scr ? bytes : 0;
    return c->scr ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "cpu backend: %zu bytes for a "
                                       "Linear's input", bytes);
}

/* ---- 16-bit weights at prefill sizes: fg_w16_gemm on x packed once per Linear ---- */

#define W16_ROWS 128 /* weight rows a chunk at least (x is streamed once per chunk) */
/* int8 pieces take the panel kernel from here: it unpacks a slab's codes once, which fewer rows
 * do not repay (one thread, n 1024, k 2048, weights cycled from DRAM, against the row kernel:
 * 0.57-0.74x at m 8, 0.84-0.88x at 16, 1.09-1.15x at 32, 1.17-1.26x at 48, 1.24-1.42x at 64;
 * fc1's shape 0.92x at 32). At 32 a 4-bit decode of 32 sequences measured the same either way
 * (three interleaved pairs, decode 20.1-23.4 s), so the switch stays at 64. */
#define I8_PANEL_MIN_M 64

typedef struct xpack_job {
    const float *x;
    void *xp;
    uint32_t m, k;
    int bf16; /* fg_xpack_bf16's pairs, else fg_xpack's floats */
} xpack_job;

static void xpack_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const xpack_job *j = arg;
    uint64_t panels = (j->m + FG_XPACK_MR - 1) / FG_XPACK_MR;
    uint64_t per = (panels + n_parts - 1) / n_parts;
    if (j->bf16)
        fg_xpack_bf16(j->x, j->m, j->k, j->k, j->xp, per * part, per * (part + 1));
    else
        fg_xpack(j->x, j->m, j->k, j->k, j->xp, per * part, per * (part + 1));
}

/* x packed into c->scr, once per Linear (as bfloat16 pairs under c->bf16: half the bytes, so
 * the plan's lscratch for fg_xpack covers it). */
static int pack_x(cpu_ctx *c, const float *x, uint32_t m, uint32_t k, lin_x *lx, fg_err *err)
{
    if (lx->xp_done)
        return FG_OK;
    int rc = scratch(c, c->bf16 ? fg_xpack_bf16_words(m, k) * 4 : fg_xpack_floats(m, k) * 4,
                     err);
    if (rc)
        return rc;
    lx->act_done = 0;
    xpack_job j = {x, c->scr, m, k, c->bf16};
    if ((uint64_t)m * k < (1u << 16))
        xpack_part(&j, 0, 1);
    else
        fg_par_run_dyn(c->par, xpack_part, &j, dyn_chunks(c));
    lx->xp_done = 1;
    return FG_OK;
}

/* A Linear piece at prefill sizes through a panel GEMM: the 16-bit GEMM on x packed once per
 * Linear, or the int8 panel kernel on x quantized once per Linear (quant.h:
 * fg_quant_gemm_panel). Chunks are (weight rows, x rows) rectangles; each running chunk takes
 * one panel of the decode room. */
typedef struct panel_job {
    const fg_wpiece *p;
    const float *xp, *bias;    /* xp: packed x (16-bit weights; bfloat16 pairs under bf16) */
    const fg_quant_act *act;   /* int8 activations (else NULL) */
    fg_qview v;                /* the piece's view (int8) */
    float *y;                  /* row 0 of the piece's output columns; row stride n */
    uint32_t m, n, k;
    uint64_t rows_per, xrows_per; /* a chunk's weight rows and x rows (a multiple of 12) */
    uint32_t n_rb;             /* chunks along the weight rows */
    float *panels;             /* n_slots panels of panel_floats in the decode room */
    uint64_t panel_floats;
    uint32_t n_slots;
    int bf16;                  /* 16-bit weights through fg_w16_gemm_bf16 */
    _Atomic uint64_t busy;     /* panels in use: at most one a running chunk */
    int rc[DECODE_PARTS];
    fg_err err[DECODE_PARTS];
} panel_job;

static void panel_part(void *arg, uint32_t part, uint32_t n_parts)
{
    panel_job *j = arg;
    (void)n_parts;
    uint64_t r0 = (part % j->n_rb) * j->rows_per, i0 = (part / j->n_rb) * j->xrows_per;
    uint64_t r1 = r0 + j->rows_per < j->p->n ? r0 + j->rows_per : j->p->n;
    uint64_t i1 = i0 + j->xrows_per < j->m ? i0 + j->xrows_per : j->m;
    if (r0 >= r1 || i0 >= i1)
        return;
    uint32_t s = 0; /* a free panel: fewer chunks run at once than there are panels */
    while (atomic_fetch_or(&j->busy, 1ull << s) & (1ull << s))
        s = (s + 1) % j->n_slots;
    float *panel = j->panels + s * j->panel_floats;
    int rc;
    if (j->act) {
        rc = fg_quant_gemm_panel(&j->p->codec, &j->v, j->p->data, j->p->len, r0, r1, j->act, i0,
                                 i1, j->bias, j->y, j->n, panel, j->panel_floats * 4,
                                 FG_QUANT_ISA_AUTO, &j->err[part]);
    } else if (j->bf16) {
        rc = fg_w16_gemm_bf16(j->p->codec.id, (const uint16_t *)j->p->data + r0 * j->k, r1 - r0,
                              j->k, (const uint32_t *)j->xp, j->m, j->k, i0, i1,
                              j->bias ? j->bias + r0 : NULL, j->y + r0, j->n, panel,
                              j->panel_floats, FG_QUANT_ISA_AUTO, &j->err[part]);
    } else {
        rc = fg_w16_gemm(j->p->codec.id, (const uint16_t *)j->p->data + r0 * j->k, r1 - r0, j->k,
                         j->xp, j->m, j->k, i0, i1, j->bias ? j->bias + r0 : NULL, j->y + r0,
                         j->n, panel, j->panel_floats, FG_QUANT_ISA_AUTO, &j->err[part]);
    }
    atomic_fetch_and(&j->busy, ~(1ull << s));
    j->rc[part] = rc;
}

static uint32_t panel_slots(const cpu_ctx *c)
{
    uint32_t t = fg_par_threads(c->par);
    return t < 64 ? t : 64;
}

/* Whether piece p takes the 16-bit GEMM at m rows: F16/BF16 2-d, past the fused kernel's m, with
 * a panel of the decode room for each thread. */
static int w16_piece(const cpu_ctx *c, const fg_wpiece *p, uint32_t m)
{
    return c->w16 && (c->bf16 ? m >= BF16_PANEL_MIN_M : m > F16_GEMM_MAX_M) && p->n_dims == 2 &&
           (p->codec.id == FG_CODEC_F16 || p->codec.id == FG_CODEC_BF16) &&
           c->wcap / panel_slots(c) >= (c->bf16 ? fg_w16_bf16_panel_min_floats(p->dims[1])
                                                : fg_w16_panel_min_floats(p->dims[1]));
}

/* Piece p (an int8 piece) at m rows through the int8 panel kernel. */
static int i8_panel_piece(const cpu_ctx *c, const fg_wpiece *p, uint32_t m)
{
    return c->w16 && m >= I8_PANEL_MIN_M && fg_quant_gemm_panel_fast(&p->codec) &&
           c->wcap * 4 / panel_slots(c) >= fg_quant_gemm_panel_min(&p->codec, p->dims[1]) + 64;
}

static int run_panel(cpu_ctx *c, const fg_wpiece *p, const fg_quant_act *act, const float *bias,
                     float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    uint32_t t = fg_par_threads(c->par), slots = panel_slots(c);
    panel_job job, *j = &job;
    memset(j, 0, sizeof *j);
    j->p = p, j->xp = c->scr, j->act = act, j->bias = bias, j->y = y, j->m = m, j->n = n;
    j->bf16 = c->bf16;
    j->k = k;
    if (act) {
        int rc = fg_codec_qview(&p->codec, p->n_dims, p->dims, p->n, &j->v, err);
        if (rc)
            return rc;
    }
    j->n_slots = slots;
    j->panel_floats = c->wcap / slots / 16 * 16; /* 64-byte multiples: panels stay aligned */
    j->panels = c->wbuf;
    atomic_init(&j->busy, 0);
    /* two chunks a thread of at least W16_ROWS weight rows (a kc block of x is read once per
     * chunk and meets rows / 16 strips: bench at m 1020, k 2048, one thread: 128 rows 82-86
     * GFLOP/s, 512 rows 91-94); when that gives fewer than two a thread, x's rows are split
     * too (each such chunk repacks its weights, which costs less than an idle thread) */
    /* whole 32-row strips (the AVX-512 kernels' strips; 16 and 8 for the AVX2 ones) */
    uint64_t rows = p->n, per = ((rows + 2 * t - 1) / (2 * t) + 31) & ~31ull;
    per = per > W16_ROWS ? per : W16_ROWS;
    if ((rows + per - 1) / per > DECODE_PARTS)
        per = ((rows + DECODE_PARTS - 1) / DECODE_PARTS + 31) & ~31ull;
    j->rows_per = per;
    j->n_rb = (uint32_t)((rows + per - 1) / per);
    uint32_t n_mb = 1, want = 2 * t;
    if (j->n_rb < want) {
        n_mb = (want + j->n_rb - 1) / j->n_rb;
        uint32_t most = (m + 47) / 48; /* 48 rows of x a chunk at least */
        n_mb = n_mb < most ? n_mb : most;
        n_mb = n_mb * j->n_rb <= DECODE_PARTS ? n_mb : DECODE_PARTS / j->n_rb;
        n_mb = n_mb ? n_mb : 1;
    }
    uint64_t xr = (m + n_mb - 1) / n_mb;
    j->xrows_per = (xr + 11) / 12 * 12; /* whole tiles of either kernel (6 and 4 rows) */
    uint32_t chunks = j->n_rb * n_mb;
    if ((uint64_t)m * rows * k < (1u << 18))
        for (uint32_t q = 0; q < chunks; q++)
            panel_part(j, q, chunks);
    else
        fg_par_run_dyn(c->par, panel_part, j, chunks);
    int rc = FG_OK;
    for (uint32_t q = 0; q < DECODE_PARTS && rc == FG_OK; q++)
        if ((rc = j->rc[q]) && err)
            *err = j->err[q];
    c->st.panel_bytes += rows * k * (act ? 1 : 4) * n_mb;
    return rc;
}

/* A Q4/Q8 piece the int8 kernels take: groups along the input axis (quant.h). */
static int int8_piece(const cpu_ctx *c, const fg_wpiece *p)
{
    return (c->compute == FG_COMPUTE_INT8 || c->compute == FG_COMPUTE_BF16) && p->n_dims == 2 &&
           (p->codec.id == FG_CODEC_Q4 || p->codec.id == FG_CODEC_Q8) && p->codec.group_axis == 1;
}

typedef struct quant_job {
    fg_quant_act *a;
    const float *x;
    uint32_t k;
    int rc[DECODE_PARTS];
    fg_err err[DECODE_PARTS];
} quant_job;

/* Rows of part `part` quantized through a view of them (every row is independent). */
static void quant_part(void *arg, uint32_t part, uint32_t n_parts)
{
    quant_job *j = arg;
    uint32_t parts = n_parts < DECODE_PARTS ? n_parts : DECODE_PARTS;
    uint64_t per = (j->a->m + parts - 1) / parts, i0 = per * part;
    uint64_t i1 = i0 + per < j->a->m ? i0 + per : j->a->m;
    if (part >= parts || i0 >= i1)
        return;
    fg_quant_act sub = fg_quant_act_rows(j->a, i0, i1);
    j->rc[part] = fg_quant_act_q8(&sub, j->x + i0 * j->k, j->k, FG_QUANT_ISA_AUTO, &j->err[part]);
}

/* x quantized to int8 for p's codec into c->scr, once per Linear, one scale per weight group;
 * the rows split across the helpers (a single thread took 5% of a 4-bit prefill). */
static int quantize_x(cpu_ctx *c, const fg_wpiece *p, const float *x, uint32_t m, uint32_t k,
                      lin_x *lx, fg_err *err)
{
    if (lx->act_done)
        return FG_OK;
    size_t need;
    uint32_t block = p->codec.group_size;
    int rc = fg_quant_act_size(&p->codec, m, k, block, &need, err);
    if (rc == FG_OK)
        rc = scratch(c, need, err);
    lx->xp_done = 0;
    if (rc == FG_OK)
        rc = fg_quant_act_init(&lx->act, &p->codec, m, k, block, c->scr, c->scr_cap, err);
    if (rc == FG_OK) {
        quant_job j = {&lx->act, x, k, {0}, {{0}}};
        if ((uint64_t)m * k < (1u << 16))
            quant_part(&j, 0, 1);
        else
            fg_par_run(c->par, quant_part, &j);
        for (uint32_t q = 0; q < DECODE_PARTS && rc == FG_OK; q++)
            if ((rc = j.rc[q]) && err)
                *err = j.err[q];
    }
    lx->act_done = rc == FG_OK;
    return rc;
}

static int linear_piece(cpu_ctx *c, const float *x, const fg_weight *w, uint32_t i,
                        const float *bias, float *y, uint32_t m, uint32_t n, uint32_t k,
                        lin_x *lx, fg_err *err)
{
    fg_wpiece p;
    int rc = w->acquire(w->ctx, i, &p, err), held = 1;
    if (rc)
        return rc;
    rc = fgb_check_piece(&p, n, k, err);
    const float *rows = p.data;
    int f16 = p.codec.id == FG_CODEC_F16 && m <= F16_GEMM_MAX_M, i8 = int8_piece(c, &p);
    if (rc == FG_OK && w16_piece(c, &p, m)) { /* widened (or rounded) into the GEMM's panels */
        rc = pack_x(c, x, m, k, lx, err);
        if (rc == FG_OK)
            rc = run_panel(c, &p, NULL, bias ? bias + p.first : NULL, y + p.first, m, n, k, err);
        int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
        return rc ? rc : rc2;
    }
    if (rc == FG_OK && (f16 || i8)) { /* multiplied from the piece's own bytes */
        if (i8)
            rc = quantize_x(c, &p, x, m, k, lx, err);
        fused_job j = {&p, x, bias ? bias + p.first : NULL, i8 ? &lx->act : NULL,
                       y + p.first, m, n, k, {0}, {{0}}};
        if (rc == FG_OK && i8 && i8_panel_piece(c, &p, m))
            rc = run_panel(c, &p, &lx->act, j.bias, j.y, m, n, k, err);
        else if (rc == FG_OK)
            rc = run_fused(c, &j, err);
        int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
        return rc ? rc : rc2;
    }
    if (rc == FG_OK && p.codec.id != FG_CODEC_F32) {
        rc = p.n * k > c->wcap
                 ? fg_err_set(err, FG_ERR_INVALID_ARG, "cpu backend: a weight piece of %llu "
                              "floats over the reserved %llu", (unsigned long long)(p.n * k),
                              (unsigned long long)c->wcap)
                 : decode(c, &p, 0, p.n, c->wbuf, err);
        rows = c->wbuf;
        if (rc == FG_OK) { /* decoded: the piece's bytes can go before the GEMM */
            held = 0;
            rc = w->release(w->ctx, &p, err);
        }
    }
    if (rc == FG_OK)
        gemm(c, x, rows, bias ? bias + p.first : NULL, y + p.first, n, m, (uint32_t)p.n, k);
    if (held) {
        int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
        rc = rc ? rc : rc2;
    }
    return rc;
}

/* x itself, or (for the fused F16 kernel, whose loads of x straddle cache lines otherwise) a
 * 64-byte aligned copy in c->xal; NULL when out of memory (err set). */
static const float *aligned_x(cpu_ctx *c, const float *x, uint32_t m, uint32_t k, fg_err *err)
{
    size_t need = (size_t)m * k;
    if (m > F16_GEMM_MAX_M || !((uintptr_t)x & 31))
        return x;
    if (need > c->xal_cap) {
        free(c->xal);
        c->xal = aligned_alloc(64, (need * 4 + 63) & ~(size_t)63);
        c->xal_cap = c->xal ? need : 0;
        if (!c->xal) {
            fg_err_set(err, FG_ERR_NOMEM, "cpu backend: %zu floats of aligned activations", need);
            return NULL;
        }
    }
    memcpy(c->xal, x, need * 4);
    return c->xal;
}

static int cpu_linear(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                      float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err)
{
    cpu_ctx *c = be->ctx;
    if (w->f32) {
        gemm(c, x, w->f32, bias, y, n, m, n, k);
        return FG_OK;
    }
    if (!(x = aligned_x(c, x, m, k, err)))
        return FG_ERR_NOMEM;
    lin_x lx = {.act_done = 0, .xp_done = 0}; /* x quantized / packed at the first piece */
    for (uint32_t i = 0; i < w->n_pieces; i++) {
        int rc = linear_piece(c, x, w, i, bias, y, m, n, k, &lx, err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* ---- gather ---- */

static uint32_t piece_of(const fg_weight *w, uint64_t row)
{
    uint32_t lo = 0, hi = w->n_pieces;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (w->piece_rows[mid] <= row)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The rows of piece i that ids ask for, each decoded alone (its quantum) and copied out. */
static int gather_piece(cpu_ctx *c, const fg_weight *w, uint32_t i, const int32_t *ids,
                        uint32_t n, float *out, uint32_t width, fg_err *err)
{
    fg_wpiece p;
    int rc = w->acquire(w->ctx, i, &p, err);
    if (rc)
        return rc;
    uint64_t q = fgb_quantum(&p);
    if (q * width > c->wcap)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "cpu backend: gather needs %llu floats of "
                        "decode room", (unsigned long long)(q * width));
    for (uint32_t r = 0; rc == FG_OK && r < n; r++) {
        uint64_t id = (uint64_t)ids[r];
        if (id < p.first || id >= p.first + p.n)
            continue;
        uint64_t r0 = (id - p.first) / q * q, r1 = r0 + q < p.n ? r0 + q : p.n;
        rc = fgb_decode_rows(&p, r0, r1, c->wbuf, FG_QUANT_ISA_AUTO, err);
        if (rc == FG_OK)
            memcpy(out + (size_t)r * width, c->wbuf + (id - p.first - r0) * width,
                   (size_t)width * 4);
    }
    int rc2 = w->release(w->ctx, &p, rc ? NULL : err);
    return rc ? rc : rc2;
}

static int cpu_gather(fg_backend *be, const fg_weight *w, uint64_t rows, const int32_t *ids,
                      uint32_t n, float *out, uint32_t width, fg_err *err)
{
    cpu_ctx *c = be->ctx;
    for (uint32_t r = 0; r < n; r++)
        if (ids[r] < 0 || (uint64_t)ids[r] >= rows)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "token id %d outside the vocabulary of "
                              "%llu", ids[r], (unsigned long long)rows);
    if (w->f32) {
        for (uint32_t r = 0; r < n; r++)
            memcpy(out + (size_t)r * width, w->f32 + (size_t)ids[r] * width, (size_t)width * 4);
        return FG_OK;
    }
    /* ask for every piece needed first, so the reads run at full queue depth */
    uint8_t need[w->n_pieces];
    memset(need, 0, sizeof need);
    for (uint32_t r = 0; r < n; r++)
        need[piece_of(w, (uint64_t)ids[r])] = 1;
    for (uint32_t i = 0; w->prefetch && i < w->n_pieces; i++)
        if (need[i])
            w->prefetch(w->ctx, i);
    for (uint32_t i = 0; i < w->n_pieces; i++) {
        int rc = need[i] ? gather_piece(c, w, i, ids, n, out, width, err) : FG_OK;
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* ---- small ops ---- */

/* Row-wise and element-wise ops at prefill sizes (layernorm, rmsnorm, activations) run on every
 * helper (rows or elements are independent, so the split does not change a bit); one thread
 * took 2% of an OPT prefill. */
#define SMALL_OP_SPLIT 65536 /* elements at least before the helpers are woken */

typedef struct small_job {
    const float *x, *g, *b, *up;
    float *y;
    uint32_t rows, n;
    size_t len;
    float eps;
    int rms;   /* norm_part: RMSNorm (else LayerNorm) */
    fg_act_fn act;
    float s;   /* scale_part's factor */
} small_job;

static void norm_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const small_job *j = arg;
    uint32_t per = (j->rows + n_parts - 1) / n_parts, r0 = per * part;
    for (uint32_t r = r0; r < j->rows && r < r0 + per; r++) {
        const float *x = j->x + (size_t)r * j->n;
        float *y = j->y + (size_t)r * j->n;
        if (j->rms)
            fgb_rmsnorm_row(x, j->g, y, j->n, j->eps);
        else
            fg_cpu_layernorm(x, j->g, j->b, y, j->n, j->eps);
    }
}

static void act_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const small_job *j = arg;
    size_t per = ((j->len + n_parts - 1) / n_parts + 15) & ~(size_t)15, i0 = per * part;
    if (i0 < j->len)
        fgb_act(j->act, j->y + i0, j->up ? j->up + i0 : NULL,
                j->len - i0 < per ? j->len - i0 : per);
}

/* Element ranges of part `part` (16-float multiples): add_part y += up, scale_part y *= s (the
 * reference's loops on each range: every element on its own, so the same bits). */
static void elem_range(const small_job *j, uint32_t part, uint32_t n_parts, size_t *i0,
                       size_t *n)
{
    size_t per = ((j->len + n_parts - 1) / n_parts + 15) & ~(size_t)15;
    *i0 = per * part;
    *n = *i0 < j->len ? (j->len - *i0 < per ? j->len - *i0 : per) : 0;
}

static void add_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const small_job *j = arg;
    size_t i0, n;
    elem_range(j, part, n_parts, &i0, &n);
    if (n)
        fgb_ref_add(NULL, j->y + i0, j->up + i0, n, NULL);
}

static void scale_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const small_job *j = arg;
    size_t i0, n;
    elem_range(j, part, n_parts, &i0, &n);
    if (n)
        fgb_ref_scale(NULL, j->y + i0, j->s, n, NULL);
}

/* j on the calling thread below SMALL_OP_SPLIT elements (or when it cannot be split), else on
 * every helper. */
static int run_small(fg_backend *be, void (*fn)(void *, uint32_t, uint32_t), small_job *j,
                     uint64_t elements, int splittable)
{
    cpu_ctx *c = be->ctx;
    if (elements < SMALL_OP_SPLIT || !splittable)
        fn(j, 0, 1);
    else
        fg_par_run(c->par, fn, j);
    return FG_OK;
}

static int cpu_layernorm(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                         uint32_t rows, uint32_t n, float eps, fg_err *err)
{
    (void)err;
    small_job j = {.x = x, .g = g, .b = b, .y = y, .rows = rows, .n = n, .eps = eps};
    return run_small(be, norm_part, &j, (uint64_t)rows * n, rows > 1);
}

static int cpu_rmsnorm(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                       uint32_t n, float eps, fg_err *err)
{
    (void)err;
    small_job j = {.x = x, .g = g, .y = y, .rows = rows, .n = n, .eps = eps, .rms = 1};
    return run_small(be, norm_part, &j, (uint64_t)rows * n, rows > 1);
}

static int cpu_act(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n,
                   fg_err *err)
{
    int rc = fgb_act_check(a, up, err);
    if (rc)
        return rc;
    small_job j = {.y = x, .up = up, .len = n, .act = a};
    return run_small(be, act_part, &j, n, 1);
}

/* The residual adds and the query scaling of a prefill (1024 x 2048 floats in opt-1.3b's 8 x
 * 128) ran on the calling thread alone: 0.6% of the samples, the helpers idle meanwhile. */
static int cpu_add(fg_backend *be, float *y, const float *x, size_t n, fg_err *err)
{
    (void)err;
    small_job j = {.y = y, .up = x, .len = n};
    return run_small(be, add_part, &j, n, 1);
}

static int cpu_scale(fg_backend *be, float *x, float s, size_t n, fg_err *err)
{
    (void)err;
    small_job j = {.y = x, .len = n, .s = s};
    return run_small(be, scale_part, &j, n, 1);
}

static int cpu_kv_store(fg_backend *be, const fg_kv_view *kv, uint32_t row, const float *k,
                        const float *v, uint32_t n, fg_err *err)
{
    (void)be;
    return fgb_kv_encode(kv, row, k, v, n, FG_QUANT_ISA_AUTO, err);
}

static void attention_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const fg_attn_args *a = arg;
    uint32_t parts = a->scratch_parts < n_parts ? a->scratch_parts : n_parts;
    if (part < parts)
        fg_cpu_attention_part(a, part, parts);
}

/* Attention packs a part's KV head into contiguous rows (kernels_cpu.c: a head's rows in the
 * cache are a power of two apart and thrash a few cache sets) when each part has this many
 * queries of a head at least to reuse them, and the copies take at most KV_PACK_MAX floats:
 * a scratch outside the memory plan, so kept small (4 MiB: 2 parts of a 2048-token context
 * of 128-wide keys and values take 2 MiB); longer contexts read the cache in place. */
#define KV_PACK_MIN_Q 8
#define KV_PACK_MAX (1u << 20)

/* a->kv_pack: room for a part's copy of one KV head in c->kvp, or left NULL (too few queries
 * a part, too long a context, or out of memory: the kernels then read the cache in place). */
static void kv_pack_room(cpu_ctx *c, fg_attn_args *a, uint32_t parts)
{
    uint32_t vd = a->v_dim ? a->v_dim : a->head_dim;
    size_t stride = ((size_t)(a->q_pos0 + a->n_q) * (a->head_dim + vd) + 15) & ~(size_t)15;
    if (a->n_q < KV_PACK_MIN_Q * parts || stride * parts > KV_PACK_MAX)
        return;
    if (stride * parts > c->kvp_cap) {
        free(c->kvp);
        c->kvp = aligned_alloc(64, stride * parts * 4);
        c->kvp_cap = c->kvp ? stride * parts : 0;
        if (!c->kvp)
            return;
    }
    a->kv_pack = c->kvp, a->kv_pack_stride = stride;
}

static int cpu_attention(fg_backend *be, const fg_attn_op *op, fg_err *err)
{
    cpu_ctx *c = be->ctx;
    const float *k, *v;
    int rc = fgb_attn_check(op, err);
    if (rc == FG_OK)
        rc = fgb_kv_f32(op, &k, &v, FG_QUANT_ISA_AUTO, err);
    if (rc)
        return rc;
    fg_attn_args a = fgb_attn_args(op, k, v);
    /* a decode step's one query over a short context is not worth waking a helper for */
    uint64_t work = (uint64_t)a.n_q * a.n_heads * (a.q_pos0 + a.n_q) * a.head_dim;
    uint32_t t = fg_par_threads(c->par);
    int split = a.scratch_parts > 1 && work >= (1u << 16);
    kv_pack_room(c, &a, split ? (a.scratch_parts < t ? a.scratch_parts : t) : 1);
    if (split)
        fg_par_run(c->par, attention_part, &a);
    else
        fg_cpu_attention(&a);
    return FG_OK;
}

/* Heads h = part (mod n_parts) of a heads op: one sgemm each (x and y strided by their row
 * lengths), or a row copy */
static void heads_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const fg_heads_op *o = arg;
    for (uint32_t h = part; h < o->n_heads; h += n_parts) {
        const float *x = o->x + h * o->x_hs;
        float *y = o->y + h * o->y_hs;
        if (!o->w) {
            for (uint32_t t = 0; t < o->n; t++)
                memcpy(y + t * o->y_ld, x + t * o->x_ld, (size_t)o->k * 4);
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, o->trans ? CblasNoTrans : CblasTrans,
                    (int)o->n, (int)o->m, (int)o->k, 1.0f, x, (int)o->x_ld, o->w + h * o->w_hs,
                    (int)o->w_ld, 0.0f, y, (int)o->y_ld);
    }
}

/* Heads split across the helpers once the op is big enough to wake them */
static int cpu_heads(fg_backend *be, const fg_heads_op *o, fg_err *err)
{
    cpu_ctx *c = be->ctx;
    int rc = fgb_heads_check(o, err);
    if (rc)
        return rc;
    uint64_t work = (uint64_t)o->n * o->n_heads * o->k * (o->w ? o->m : 1);
    if (o->n_heads > 1 && work >= (1u << 18))
        fg_par_run(c->par, heads_part, (void *)o);
    else
        heads_part((void *)o, 0, 1);
    return FG_OK;
}

static void cpu_stats(const fg_backend *be, fg_backend_stats *out)
{
    *out = ((const cpu_ctx *)be->ctx)->st;
}

static void cpu_destroy(fg_backend *be)
{
    cpu_ctx *c = be->ctx;
    if (c) {
        fg_par_free(c->par);
        free(c->wbuf);
        free(c->scr);
        free(c->xal);
        free(c->kvp);
    }
    free(c);
    fg_device_free(be->dev);
    free(be);
}

static const fg_backend_iface k_cpu = {
    "cpu", cpu_sync, cpu_reserve,
    cpu_linear, cpu_gather, cpu_layernorm, cpu_rmsnorm, fgb_ref_rope, cpu_act, cpu_add,
    cpu_scale, fgb_ref_argmax, fgb_ref_scatter, cpu_kv_store, cpu_attention, cpu_stats,
    cpu_destroy, cpu_heads,
};

int fg_backend_cpu_create(int threads, fg_backend **out, fg_err *err)
{
    fg_backend_cpu_opts o = {threads, FG_COMPUTE_F32};
    return fg_backend_cpu_create_opts(&o, out, err);
}

int fg_backend_cpu_create_opts(const fg_backend_cpu_opts *o, fg_backend **out, fg_err *err)
{
    int threads = o->threads;
    fg_backend *be = calloc(1, sizeof *be);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return fg_err_set(err, FG_ERR_NOMEM, "cpu backend: out of memory");
    }
    be->iface = &k_cpu;
    be->ctx = c;
    c->compute = o->compute;
    const char *env = getenv("FG_PANEL_GEMM");
    c->w16 = fg_w16_gemm_fast() && !(env && strcmp(env, "0") == 0);
    c->bf16 = c->w16 && o->compute == FG_COMPUTE_BF16 && fg_w16_gemm_bf16_fast();
    int rc = fg_device_host_create(&be->dev, err);
    if (rc == FG_OK)
        rc = fg_par_create(threads > 0 ? (uint32_t)threads : 0, &c->par, err);
    if (rc) {
        cpu_destroy(be);
        return rc;
    }
    openblas_set_num_threads(1);
    *out = be;
    return FG_OK;
}
