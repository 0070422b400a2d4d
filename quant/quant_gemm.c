/* quant_gemm.c - integer GEMM of int8 activations with Q4/Q8 weight chunks: argument checks, ISA
 * choice, and the scalar reference that defines the result (quant.h states the formula).
 *
 * Why groups along the input axis only: with w = min_g + scale_g * q and a group running along
 * k, the dot product of a row of x with a row of W splits into one float term per group
 * (min_g times the group's sum of activations) plus scale_g times an integer dot product of int8
 * activations with the codes,
 * so the inner loop is VPMADDUBSW / VPMADDWD on bytes and the floats are touched once per group.
 * With groups down the output axis (axis 0) the scale changes with every k; keeping the integer
 * loop then means re-quantizing x * scale_g for every group of G output rows and reading codes
 * that run down columns. The accuracy table (README) has axis 1 as accurate as axis 0 on the
 * shipped model, so the int8 path requires axis-1 chunks and says so when handed another.
 *
 * Choices that make the kernels simple and the ISAs agree:
 *  - activation rows are padded with zero codes to a multiple of max(G, 64), so a code vector
 *    never runs past the row, and padding weight codes (which readers must not interpret) meet
 *    zero activations;
 *  - for Q4 the activations are stored, per 64 columns, the 32 evens then the 32 odds: the low
 *    and the high nibbles of 32 code bytes, masked, then line up with them as they are;
 *  - the min term uses the rounded activations too (min_g * a * qsum_g), so the result is the
 *    dequantized weights times the dequantized activations; mixing exact x into the min term
 *    would leave sum (w - min) e as the error instead of sum w e (quant.h);
 *  - the AVX2 Q8 kernels recentre codes to q - 128 (VPMADDUBSW takes unsigned x signed bytes
 *    and would saturate at 255 * 127 * 2) and add 128 * qsum back in the integer domain (VPDPBUSD
 *    does not saturate and takes the codes as they are), so every ISA computes the same integer
 *    per group.
 * The reference sums the per-group terms in binary64; SIMD kernels in binary32.
 *
 * ISAs: REF runs the reference; AVX2 runs quant_gemm_avx2.c, or its VPDPBUSD twin
 * (quant_gemm_vnni.c) when the CPU has AVX-VNNI; AVX512 runs the AVX512-VNNI twin
 * (quant_gemm_vnni512.c) when the CPU has it, else as AVX2. FG_QUANT_VNNI=0 in the environment
 * turns the VNNI kernels off (to compare them with the plain AVX2 ones on one machine).
 * The panel kernel (many activation rows, Q4): gemm_q4p_avx2.c, or with ISA avx512 on a CPU
 * with AVX512-VNNI gemm_q4p_vnni512.c (zmm VPDPBUSD, 32-row strips; the AVX2 kernel's bits),
 * which FG_QUANT_VNNI=0 or FG_PREFILL_AVX512=0 turns off. Before both, on a CPU with AMX-INT8,
 * gemm_amx.c (tiles, Q4 and Q8, the AVX2 panel kernel's bits for Q4) once its first-use
 * self-check passed (gemm_amx_check.c); FG_QUANT_AMX=0 turns it off.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "quant_gemm_int.h"

#define ACT_ALIGN 64u

/* ---- reference kernels ---- */

/* Largest |x| over x[0..n) as bits (exact), or UINT32_MAX when some x is NaN or Inf. */
static uint32_t amax_bits(const float *x, uint64_t n)
{
    uint32_t mx = 0;
    for (uint64_t c = 0; c < n; c++) {
        uint32_t u = fgq_fbits(x[c]) & 0x7FFFFFFFu;
        if (u >= 0x7F800000u)
            return UINT32_MAX;
        mx = u > mx ? u : mx;
    }
    return mx;
}

/* Scale and reciprocal of a block with largest magnitude amax (quant.h rule). */
static void block_scale(float amax, float *scale, float *inv)
{
    *inv = 127.0f / amax;
    *scale = amax / 127.0f;
    if (amax == 0.0f || !fgq_finite(*inv))
        *inv = 0.0f, *scale = 0.0f;
}

static int8_t act_code(float x, float inv)
{
    float q = rintf(x * inv);
    return (int8_t)(q < -127.0f ? -127.0f : q > 127.0f ? 127.0f : q);
}

static void act_sums(fg_quant_act *a, uint64_t i)
{
    const int8_t *q = a->q + i * a->kp;
    for (uint64_t g = 0; g < a->n_groups; g++) {
        uint64_t c0 = g * a->group;
        int32_t s = 0;
        for (uint32_t t = 0; t < a->group; t++)
            s += q[fgq_act_pos(a, c0 + t)];
        a->qsum[i * a->n_groups + g] = s;
        a->qmin[i * a->n_groups + g] = a->scale[i * a->n_blocks + c0 / a->block] * (float)s;
    }
}

int fgq_ref_act_row(const float *x, fg_quant_act *a, uint64_t i)
{
    int8_t *q = a->q + i * a->kp;
    for (uint64_t b = 0; b < a->n_blocks; b++) {
        uint64_t c0 = b * a->block, c1 = c0 + a->block < a->kp ? c0 + a->block : a->kp;
        uint64_t r1 = c1 < a->k ? c1 : a->k;
        uint32_t mx = c0 < a->k ? amax_bits(x + c0, r1 - c0) : 0;
        if (mx == UINT32_MAX)
            return 1;
        float inv;
        block_scale(fgq_bitsf(mx), &a->scale[i * a->n_blocks + b], &inv);
        for (uint64_t c = c0; c < c1; c++)
            q[fgq_act_pos(a, c)] = c < a->k ? act_code(x[c], inv) : 0;
    }
    act_sums(a, i);
    return 0;
}

static inline uint32_t wcode(const uint8_t *codes, uint32_t t, const fgq_params *p)
{
    if (p->bits == 8)
        return codes[t];
    uint32_t b = codes[t / 2], high = (t & 1u) ^ p->hi_first;
    return high ? b >> 4 : b & 0xFu;
}

/* Row i of the activations against weight row `row`: the definition of one output. */
static float ref_dot(const fgq_params *p, const uint8_t *row, uint64_t ngw, const fg_quant_act *a,
                     uint64_t i)
{
    const int8_t *q = a->q + i * a->kp;
    double acc = 0.0;
    for (uint64_t g = 0; g < ngw; g++) {
        const uint8_t *grp = row + g * p->gbytes;
        float m, s;
        fgq_read_ms(grp, p, &m, &s);
        int64_t idot = 0;
        for (uint32_t t = 0; t < p->G; t++) {
            uint64_t c = g * p->G + t;
            idot += (int64_t)wcode(grp + p->hdr, t, p) * q[fgq_act_pos(a, c)];
        }
        double qs = a->qsum[i * a->n_groups + g];
        acc += a->scale[i * a->n_blocks + g * p->G / a->block] *
               ((double)m * qs + (double)s * (double)idot);
    }
    return (float)acc;
}

void fgq_ref_gemm(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                  uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy)
{
    uint64_t ngw = row_bytes / p->gbytes;
    for (uint64_t i = 0; i < a->m; i++)
        for (uint64_t j = n0; j < n1; j++)
            y[i * ldy + j] = ref_dot(p, w + j * row_bytes, ngw, a, i);
}

/* ---- entry points ---- */

typedef struct act_dims {
    uint64_t kp, block, n_groups, n_blocks;
    uint64_t off_qsum, off_qmin, off_q, bytes;
} act_dims;

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Codec and shape checks shared by act_size/act_init; the buffer layout in *d. */
static int act_layout(const fg_codec *c, uint64_t m, uint64_t k, uint32_t block, act_dims *d,
                      fg_err *err)
{
    fg_codec cc = *c;
    cc.group_axis = 0;
    int rc = fg_codec_validate(&cc, 1, err);
    if (rc)
        return rc;
    if (c->id != FG_CODEC_Q4 && c->id != FG_CODEC_Q8)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant act: codec %s is not quantized",
                          fg_codec_name(c->id));
    uint32_t G = c->group_size;
    if (m == 0 || k == 0 || k > (UINT64_MAX >> 8))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant act: %llu x %llu activations",
                          (unsigned long long)m, (unsigned long long)k);
    if (block % G)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "quant act: scale block %u is not a multiple of the group size %u",
                          block, G);
    d->kp = align_up(k, G > 64 ? G : 64);
    d->block = block ? block : d->kp;
    d->n_groups = d->kp / G;
    d->n_blocks = (d->kp + d->block - 1) / d->block;
    uint64_t ns, ng, nq;
    if (fg_mul_u64(m, d->n_blocks * 4, &ns) || fg_mul_u64(m, d->n_groups * 4, &ng) ||
        fg_mul_u64(m, d->kp, &nq) || ns > SIZE_MAX / 4 || ng > SIZE_MAX / 4 || nq > SIZE_MAX / 4)
        return fg_err_set(err, FG_ERR_OVERFLOW, "quant act: %llu x %llu activations overflow",
                          (unsigned long long)m, (unsigned long long)k);
    d->off_qsum = align_up(ns, ACT_ALIGN);
    d->off_qmin = d->off_qsum + align_up(ng, ACT_ALIGN);
    d->off_q = d->off_qmin + align_up(ng, ACT_ALIGN);
    d->bytes = d->off_q + align_up(nq, ACT_ALIGN);
    return FG_OK;
}

int fg_quant_act_size(const fg_codec *c, uint64_t m, uint64_t k, uint32_t block, size_t *bytes,
                      fg_err *err)
{
    act_dims d;
    int rc = act_layout(c, m, k, block, &d, err);
    if (rc == FG_OK)
        *bytes = (size_t)d.bytes;
    return rc;
}

int fg_quant_act_init(fg_quant_act *a, const fg_codec *c, uint64_t m, uint64_t k, uint32_t block,
                      void *buf, size_t len, fg_err *err)
{
    act_dims d;
    int rc = act_layout(c, m, k, block, &d, err);
    if (rc)
        return rc;
    if (!buf || len < d.bytes)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "quant act: buffer of %zu bytes, need %llu",
                          len, (unsigned long long)d.bytes);
    uint8_t *b = buf;
    *a = (fg_quant_act){.m = m, .k = k, .kp = d.kp, .n_groups = d.n_groups,
                        .n_blocks = d.n_blocks, .group = c->group_size,
                        .block = (uint32_t)d.block, .bits = c->bits,
                        .q = (int8_t *)(b + d.off_q), .scale = (float *)b,
                        .qsum = (int32_t *)(b + d.off_qsum), .qmin = (float *)(b + d.off_qmin)};
    return FG_OK;
}

/* The ISA to run: AUTO resolved, and supported by this CPU. */
static int gemm_isa(fg_quant_isa isa, fg_quant_isa *out, fg_err *err)
{
    if (isa == FG_QUANT_ISA_AUTO)
        isa = fg_quant_isa_default();
    if (!fg_quant_isa_supported(isa))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "quant: ISA %s not available on this CPU",
                          fg_quant_isa_name(isa));
    *out = isa;
    return FG_OK;
}

typedef void (*gemm_fn)(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                        uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy);

#ifdef FG_QUANT_VNNI
/* Bit 1: AVX-VNNI; bit 2: AVX512-VNNI (the process's one detector, core/fg_cpu.h); 0 when
 * $FG_QUANT_VNNI is "0". Read once (racing first calls store the same value). */
static int vnni_flags(void)
{
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        unsigned f = fg_cpu_features();
        const char *env = getenv("FG_QUANT_VNNI");
        v = 0;
        if (!(env && strcmp(env, "0") == 0))
            v = (f & FG_CPU_AVXVNNI ? 1 : 0) | (f & FG_CPU_AVX512VNNI ? 2 : 0);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}
#endif

/* The GEMM kernel for a resolved ISA and group size. */
static gemm_fn gemm_kernel(fg_quant_isa use, uint32_t G)
{
    if (use == FG_QUANT_ISA_REF || G < 32)
        return fgq_ref_gemm;
#ifdef FG_QUANT_VNNI
    int v = vnni_flags();
    if (use == FG_QUANT_ISA_AVX512 && (v & 2))
        return fgq_vnni512_gemm;
    if (v & 1)
        return fgq_vnni_gemm;
#endif
#ifdef FG_QUANT_X86
    return fgq_avx2_gemm;
#else
    return fgq_ref_gemm;
#endif
}

static int act_nonfinite(const float *x, const fg_quant_act *a, uint64_t i, fg_err *err)
{
    uint64_t c = 0;
    while (c + 1 < a->k && isfinite(x[c]))
        c++;
    return fg_err_set(err, FG_ERR_NONFINITE, "quant act: element (%llu, %llu) is %s",
                      (unsigned long long)i, (unsigned long long)c, isnan(x[c]) ? "NaN" : "Inf");
}

int fg_quant_act_q8(fg_quant_act *a, const float *x, uint64_t ldx, fg_quant_isa isa, fg_err *err)
{
    fg_quant_isa use = FG_QUANT_ISA_REF;
    int rc = gemm_isa(isa, &use, err);
    if (rc)
        return rc;
    if (ldx == 0)
        ldx = a->k;
    if (ldx < a->k)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant act: row stride %llu < k %llu",
                          (unsigned long long)ldx, (unsigned long long)a->k);
    for (uint64_t i = 0; i < a->m; i++) {
        const float *row = x + i * ldx;
#ifdef FG_QUANT_X86
        int bad = use != FG_QUANT_ISA_REF ? fgq_avx2_act_row(row, a, i)
                                          : fgq_ref_act_row(row, a, i);
#else
        int bad = fgq_ref_act_row(row, a, i);
#endif
        if (bad)
            return act_nonfinite(row, a, i, err);
    }
    return FG_OK;
}

static int gemm_check(const fg_codec *c, const fg_qview *v, size_t w_len, uint64_t n0,
                      uint64_t n1, const fg_quant_act *a, uint64_t ldy, fgq_params *p, fg_err *err)
{
    int rc = fgq_check(c, v, FG_CODEC_F32, 0, w_len, p, err);
    if (rc)
        return rc;
    if (v->along_rows)
        return fg_err_set(err, FG_ERR_UNSUPPORTED,
                          "quant gemm: groups run along axis 0 (output channels); the int8 path "
                          "needs groups along the input axis (fg-convert --group-axis 1)");
    if (a->group != p->G || a->bits != p->bits || a->k != v->cols)
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "quant gemm: activations quantized for q%u group %u, k %llu; weight is "
                          "q%u group %u, k %llu", a->bits, a->group, (unsigned long long)a->k,
                          p->bits, p->G, (unsigned long long)v->cols);
    if (n0 > n1 || n1 > v->rows || (a->m > 1 && ldy < n1))
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "quant gemm: rows [%llu, %llu) of a %llu-row chunk, output stride %llu",
                          (unsigned long long)n0, (unsigned long long)n1,
                          (unsigned long long)v->rows, (unsigned long long)ldy);
    return FG_OK;
}

int fg_quant_gemm(const fg_codec *c, const fg_qview *v, const void *w, size_t w_len, uint64_t n0,
                  uint64_t n1, const fg_quant_act *a, float *y, uint64_t ldy, fg_quant_isa isa,
                  fg_err *err)
{
    fgq_params p;
    fg_quant_isa use = FG_QUANT_ISA_REF;
    int rc = gemm_check(c, v, w_len, n0, n1, a, ldy, &p, err);
    if (rc || (rc = gemm_isa(isa, &use, err)))
        return rc;
    uint64_t row_bytes = (v->cols + p.G - 1) / p.G * p.gbytes;
    gemm_kernel(use, p.G)(&p, w, row_bytes, n0, n1, a, y, ldy);
    return FG_OK;
}

fg_quant_act fg_quant_act_rows(const fg_quant_act *a, uint64_t i0, uint64_t i1)
{
    fg_quant_act v = *a;
    v.m = i1 - i0;
    v.q += i0 * a->kp;
    v.scale += i0 * a->n_blocks;
    v.qsum += i0 * a->n_groups;
    v.qmin += i0 * a->n_groups;
    return v;
}

/* ---- many activation rows: the panel kernel (gemm_q4p_avx2.c) ---- */

static int panel_kernel(fg_quant_isa use, const fgq_params *p)
{
#ifdef FG_QUANT_X86
    return use != FG_QUANT_ISA_REF && p->bits == 4 && p->G >= 64;
#else
    (void)use, (void)p;
    return 0;
#endif
}

/* Bytes of one strip (8 weight rows) of one k block of a k-column weight: what the panel kernel
 * needs at least (gemm_q4p_avx2.c lays a block out the same way). */
static size_t strip_bytes(uint32_t G, uint64_t k)
{
    uint64_t kb = FG_QUANT_PANEL_COLS / G ? FG_QUANT_PANEL_COLS / G : 1, ngw = (k + G - 1) / G;
    kb = kb < ngw ? kb : ngw;
    return (size_t)((kb ? kb : 1) * ((uint64_t)G * 8 + 64));
}

/* 1 when the AVX512-VNNI panel kernel (gemm_q4p_vnni512.c: 32-row strips, 4 times the AVX2
 * kernel's panel) runs this call: ISA avx512 on a CPU with AVX512-VNNI, FG_QUANT_VNNI and
 * FG_PREFILL_AVX512 not "0", one activation scale a group, a panel of four AVX2 strips. */
static int panel_vnni512(fg_quant_isa use, const fgq_params *p, const fg_quant_act *a,
                         uint64_t k, size_t panel_bytes)
{
#ifdef FG_QUANT_VNNI
    return use == FG_QUANT_ISA_AVX512 && (vnni_flags() & 2) && fgq_prefill_avx512_on() &&
           a->block == p->G && panel_bytes >= 4 * strip_bytes(p->G, k);
#else
    (void)use, (void)p, (void)a, (void)k, (void)panel_bytes;
    return 0;
#endif
}

/* 1 when the AMX-INT8 kernel (gemm_amx.c) runs this call: ISA avx512, FG_PREFILL_AVX512 not "0",
 * Q4 or Q8 with G a multiple of 64, one activation scale a group, a panel of fgq_amx_panel_min
 * bytes (4-byte aligned), and fgq_amx_on (the CPU, FG_QUANT_AMX, the first-use self-check). */
#ifdef FG_QUANT_AMX
static int panel_amx(fg_quant_isa use, const fgq_params *p, const fg_quant_act *a, uint64_t k,
                     const void *panel, size_t panel_bytes)
{
    return use == FG_QUANT_ISA_AVX512 && fgq_prefill_avx512_on() && p->G % 64 == 0 &&
           a->block == p->G && panel && !((uintptr_t)panel & 3) &&
           panel_bytes >= fgq_amx_panel_min(p->G, k) && fgq_amx_on();
}
#endif

size_t fg_quant_gemm_panel_min(const fg_codec *c, uint64_t k)
{
    return c->group_size ? strip_bytes(c->group_size, k) : 0;
}

int fg_quant_gemm_panel_fast(const fg_codec *c)
{
    fgq_params p = {.G = c->group_size, .bits = c->bits};
    fg_quant_isa use = fg_quant_isa_default();
#ifdef FG_QUANT_AMX
    if (use == FG_QUANT_ISA_AVX512 && fgq_prefill_avx512_on() && p.G && p.G % 64 == 0 &&
        (p.bits == 4 || p.bits == 8) && fgq_amx_on())
        return 1;
#endif
    return panel_kernel(use, &p);
}

int fg_quant_gemm_panel(const fg_codec *c, const fg_qview *v, const void *w, size_t w_len,
                        uint64_t n0, uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                        const float *bias, float *y, uint64_t ldy, void *panel, size_t panel_bytes,
                        fg_quant_isa isa, fg_err *err)
{
    fgq_params p;
    fg_quant_isa use = FG_QUANT_ISA_REF;
    int rc = gemm_check(c, v, w_len, n0, n1, a, ldy, &p, err);
    if (rc || (rc = gemm_isa(isa, &use, err)))
        return rc;
    if (i0 > i1 || i1 > a->m)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant gemm: activation rows [%llu, %llu) "
                          "of %llu", (unsigned long long)i0, (unsigned long long)i1,
                          (unsigned long long)a->m);
    uint64_t row_bytes = (v->cols + p.G - 1) / p.G * p.gbytes;
    if (i0 == i1 || n0 == n1)
        return FG_OK;
#ifdef FG_QUANT_AMX
    if (panel_amx(use, &p, a, v->cols, panel, panel_bytes)) {
        fgq_amx_gemm_panel(&p, w, row_bytes, n0, n1, a, i0, i1, bias, y, ldy, panel, panel_bytes);
        return FG_OK;
    }
#endif
#ifdef FG_QUANT_X86
    if (panel_kernel(use, &p)) {
        if (!panel || ((uintptr_t)panel & 31) || panel_bytes < strip_bytes(p.G, v->cols))
            return fg_err_set(err, FG_ERR_INVALID_ARG, "quant gemm: a panel of %zu bytes at "
                              "%p, %zu (32-byte aligned) needed", panel_bytes, panel,
                              strip_bytes(p.G, v->cols));
#ifdef FG_QUANT_VNNI
        if (panel_vnni512(use, &p, a, v->cols, panel_bytes)) {
            fgq_vnni512_gemm_panel(&p, w, row_bytes, n0, n1, a, i0, i1, bias, y, ldy, panel,
                                   panel_bytes);
            return FG_OK;
        }
#endif
        fgq_avx2_gemm_panel(&p, w, row_bytes, n0, n1, a, i0, i1, bias, y, ldy, panel,
                            panel_bytes);
        return FG_OK;
    }
#endif
    /* the row kernels on a view of rows [i0, i1) */
    fg_quant_act sub = fg_quant_act_rows(a, i0, i1);
    gemm_kernel(use, p.G)(&p, w, row_bytes, n0, n1, &sub, y + i0 * ldy, ldy);
    for (uint64_t i = i0; bias && i < i1; i++)
        for (uint64_t j = n0; j < n1; j++)
            y[i * ldy + j] += bias[j];
    return FG_OK;
}

/* ---- F16 weights ---- */

void fgq_ref_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                      uint64_t m, uint64_t ldx, float *y, uint64_t ldy)
{
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (uint64_t c = 0; c < k; c++)
                acc += (double)fgq_h2f(w[j * ldw + c]) * x[i * ldx + c];
            y[i * ldy + j] = (float)acc;
        }
}

int fg_f16_gemm(const uint16_t *w, uint64_t n, uint64_t k, uint64_t ldw, const float *x,
                uint64_t m, uint64_t ldx, float *y, uint64_t ldy, fg_quant_isa isa, fg_err *err)
{
    fg_quant_isa use = FG_QUANT_ISA_REF;
    int rc = gemm_isa(isa, &use, err);
    if (rc)
        return rc;
    if (ldw < k || ldx < k || (m > 1 && ldy < n))
        return fg_err_set(err, FG_ERR_INVALID_ARG,
                          "f16 gemm: strides w %llu, x %llu, y %llu for k %llu, n %llu",
                          (unsigned long long)ldw, (unsigned long long)ldx,
                          (unsigned long long)ldy, (unsigned long long)k, (unsigned long long)n);
#ifdef FG_QUANT_X86
    if (use != FG_QUANT_ISA_REF) {
        fgq_avx2_f16_gemm(w, n, k, ldw, x, m, ldx, y, ldy);
        return FG_OK;
    }
#endif
    fgq_ref_f16_gemm(w, n, k, ldw, x, m, ldx, y, ldy);
    return FG_OK;
}
