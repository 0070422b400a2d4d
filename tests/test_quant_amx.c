/* test_quant_amx.c - the AMX-INT8 prefill GEMM (quant/gemm_amx.c) through its body with the tile
 * instructions emulated (quant_amx_emul.c: runs on any CPU; no AMX CPU was at hand): Q4 and Q8,
 * prefill shapes with tails in m (rows in two ranges, not a multiple of 32), n (edge strips,
 * several slabs with the smallest panel, columns from n0) and k (past one and two k blocks, a
 * last group past k), G 64..256, F16/F32 scales, both nibble orders, with and without bias,
 * against a scalar model of the panel kernels' arithmetic bit for bit, against the AVX2 panel
 * kernel bit for bit for Q4 (where the CPU runs AVX2), and against the reference within the
 * float bound; the first-use self-check (it passes on the emulated kernel and catches wrong
 * ones); and the dispatch's facts on this CPU (no AMX bits, no AMX path, where it has none).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "quant.h"
#include "quant_gemm_int.h"
#include "testutil.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { return tu_xorshift(&g_rng); }
static float gauss(void)
{
    double u = (double)(rnd() >> 11) * 0x1.0p-53 + 1e-300, v = (double)(rnd() >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* One case: the weight chunk, its parameters and the activations. */
typedef struct acase {
    fg_codec c;
    fg_qview v;
    fgq_params p;
    uint8_t *q;
    size_t qlen;
    uint64_t row_bytes;
    fg_quant_act a;
    void *abuf;
} acase;

static void acase_make(acase *t, unsigned bits, uint32_t G, int f32s, int hi, uint64_t m,
                       uint64_t n, uint64_t k)
{
    fg_err err;
    memset(t, 0, sizeof *t);
    t->c = fg_codec_quant(bits, G, 1);
    if (f32s)
        t->c.scale_dtype = FG_SCALE_F32;
    if (hi)
        t->c.nibble_order = FG_NIBBLE_HI_FIRST;
    uint64_t dims[2] = {n, k};
    ck_assert_msg(fg_codec_qview(&t->c, 2, dims, n, &t->v, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_quant_chunk_bytes(&t->v, &t->qlen, &err), FG_OK);
    float *w = malloc(n * k * 4), *x = malloc(m * k * 4);
    for (uint64_t i = 0; i < n * k; i++)
        w[i] = 0.02f * gauss() + (rnd() % 50 == 0 ? 0.1f : 0.0f);
    for (uint64_t i = 0; i < m * k; i++)
        x[i] = gauss() * (i % 37 == 5 ? 20.0f : 1.0f);
    t->q = malloc(t->qlen);
    ck_assert_int_eq(fg_quant_encode(&t->c, &t->v, w, FG_CODEC_F32, 0, t->q, t->qlen,
                                     FG_QUANT_ISA_REF, &err), FG_OK);
    ck_assert_int_eq(fgq_check(&t->c, &t->v, FG_CODEC_F32, 0, t->qlen, &t->p, &err), FG_OK);
    t->row_bytes = (k + G - 1) / G * t->p.gbytes;
    size_t len;
    ck_assert_int_eq(fg_quant_act_size(&t->c, m, k, G, &len, &err), FG_OK);
    t->abuf = aligned_alloc(64, (len + 63) / 64 * 64);
    ck_assert_int_eq(fg_quant_act_init(&t->a, &t->c, m, k, G, t->abuf, len, &err), FG_OK);
    ck_assert_int_eq(fg_quant_act_q8(&t->a, x, k, FG_QUANT_ISA_REF, &err), FG_OK);
    free(w), free(x);
}

static void acase_free(acase *t) { free(t->q), free(t->abuf); }

static uint32_t code_at(const fgq_params *p, const uint8_t *grp, uint32_t t)
{
    if (p->bits == 8)
        return grp[p->hdr + t];
    uint32_t b = grp[p->hdr + t / 2];
    return ((t & 1u) ^ p->hi_first) ? b >> 4 : b & 0xFu;
}

/* The panel kernels' arithmetic, one output at a time: per k block of FG_QUANT_PANEL_COLS
 * columns, t = 0, per group t = fma(I, s_w * a, t), t = fma(m_w, qmin, t) in binary32, then y =
 * t (+ bias) at the first block, y + t after. *mag gets |bias| + sum |terms| (for the bound). */
static float model(const acase *t, uint64_t i, uint64_t j, const float *bias, double *mag)
{
    const fgq_params *p = &t->p;
    const fg_quant_act *a = &t->a;
    const uint64_t ngw = t->row_bytes / p->gbytes, kb = FG_QUANT_PANEL_COLS / p->G;
    float y = 0;
    *mag = bias ? fabs(bias[j]) : 0;
    for (uint64_t g0 = 0; g0 < ngw; g0 += kb) {
        float acc = 0;
        for (uint64_t g = g0; g < g0 + kb && g < ngw; g++) {
            const uint8_t *grp = t->q + j * t->row_bytes + g * p->gbytes;
            float mn, sc;
            fgq_read_ms(grp, p, &mn, &sc);
            int64_t dot = 0;
            for (uint32_t c = 0; c < p->G; c++)
                dot += (int64_t)code_at(p, grp, c) * a->q[i * a->kp + fgq_act_pos(a, g * p->G + c)];
            float as = a->scale[i * a->n_blocks + g], qm = a->qmin[i * a->n_groups + g];
            acc = fmaf((float)dot, sc * as, acc);
            acc = fmaf(mn, qm, acc);
            *mag += fabs((double)dot * sc * as) + fabs((double)mn * qm);
        }
        y = g0 == 0 ? (bias ? acc + bias[j] : acc) : y + acc;
    }
    return y;
}

static const struct {
    unsigned bits;
    uint32_t G;
    int f32s, hi, bias;
    uint64_t m, n, k;
} k_cases[] = {
    {4, 64, 0, 0, 1, 100, 70, 2300},  {4, 128, 1, 1, 0, 37, 33, 4500},
    {8, 64, 0, 0, 1, 45, 97, 2125},   {8, 256, 1, 0, 0, 33, 40, 1000},
    {4, 64, 0, 1, 1, 5, 7, 40},       {8, 64, 1, 0, 1, 16, 32, 64},
    {8, 128, 0, 0, 1, 130, 50, 777},  {4, 256, 1, 0, 1, 64, 96, 4096},
};

/* The emulated kernel over rows [lo, split) and [split, hi), columns [n0, n), into y (rows
 * outside [lo, hi) and columns before n0 set to 777 first: they must stay). */
static void run_emul(const acase *t, uint64_t m, uint64_t n, uint64_t n0, uint64_t lo,
                     uint64_t hi, const float *bias, float *y, size_t pbytes)
{
    void *panel = aligned_alloc(64, (pbytes + 63) / 64 * 64);
    for (uint64_t q = 0; q < m * n; q++)
        y[q] = q % n < n0 || q / n < lo || q / n >= hi ? 777.0f : -12345.0f;
    uint64_t split = lo + (hi - lo) / 3;
    for (int half = 0; half < 2; half++) {
        uint64_t i0 = half ? split : lo, i1 = half ? hi : split;
        if (i0 < i1)
            fgq_amx_emul_gemm_panel(&t->p, t->q, t->row_bytes, n0, n, &t->a, i0, i1, bias, y, n,
                                    panel, pbytes);
    }
    free(panel);
}

START_TEST(test_amx_emulated)
{
    const size_t nc = sizeof k_cases / sizeof *k_cases;
    const int avx2 = fg_quant_isa_supported(FG_QUANT_ISA_AVX2);
    if (!avx2)
        fprintf(stderr, "test_quant_amx: no AVX2: Q4 not compared with the AVX2 panel kernel\n");
    for (size_t c = 0; c < nc; c++) {
        const uint64_t m = k_cases[c].m, n = k_cases[c].n, k = k_cases[c].k, n0 = n / 5;
        acase t;
        acase_make(&t, k_cases[c].bits, k_cases[c].G, k_cases[c].f32s, k_cases[c].hi, m, n, k);
        float *bias = NULL, *y = malloc(m * n * 4), *want = malloc(m * n * 4);
        if (k_cases[c].bias) {
            bias = malloc(n * 4);
            for (uint64_t j = 0; j < n; j++)
                bias[j] = gauss();
        }
        double *mag = malloc(m * n * sizeof *mag);
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t j = 0; j < n; j++)
                want[i * n + j] = j < n0 ? 777.0f : model(&t, i, j, bias, &mag[i * n + j]);
        uint64_t pmin = fgq_amx_panel_min(t.p.G, k);
        for (int run = 0; run < 3; run++) { /* panels min and big; rows inside, then all */
            uint64_t lo = run < 2 ? 1 : 0, hi = run < 2 ? m - 1 : m;
            run_emul(&t, m, n, n0, lo, hi, bias, y, run == 1 ? 5 * pmin + 100 : pmin);
            for (uint64_t q = 0; q < m * n; q++) {
                float wq = q / n < lo || q / n >= hi ? 777.0f : want[q];
                TU_REQUIRE(!memcmp(&y[q], &wq, 4), "case %zu (q%u G %u) run %d (%llu, %llu): %a, "
                        "model %a", c, t.p.bits, t.p.G, run, (unsigned long long)(q / n),
                        (unsigned long long)(q % n), y[q], wq);
            }
        }
        fg_err err;
        if (t.p.bits == 4 && avx2) { /* the AVX2 panel kernel's bits */
            size_t pb = 8 * fg_quant_gemm_panel_min(&t.c, k);
            void *panel = aligned_alloc(64, (pb + 63) / 64 * 64);
            float *y2 = malloc(m * n * 4);
            for (uint64_t q = 0; q < m * n; q++)
                y2[q] = 777.0f;
            ck_assert_int_eq(fg_quant_gemm_panel(&t.c, &t.v, t.q, t.qlen, n0, n, &t.a, 0, m, bias,
                                                 y2, n, panel, pb, FG_QUANT_ISA_AVX2, &err),
                             FG_OK);
            for (uint64_t q = 0; q < m * n; q++)
                TU_REQUIRE(!memcmp(&y[q], &y2[q], 4), "case %zu: (%llu, %llu) %a, avx2 panel %a",
                        c, (unsigned long long)(q / n), (unsigned long long)(q % n), y[q], y2[q]);
            free(panel), free(y2);
        }
        /* the reference (binary64 terms): within (2 groups + 4) x 2^-24 of the terms' size */
        float *yr = malloc(m * n * 4);
        ck_assert_int_eq(fg_quant_gemm(&t.c, &t.v, t.q, t.qlen, 0, n, &t.a, yr, n,
                                       FG_QUANT_ISA_REF, &err), FG_OK);
        const double ulps = 2.0 * (double)t.a.n_groups + 4;
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t j = n0; j < n; j++) {
                double e = (double)yr[i * n + j] + (bias ? bias[j] : 0);
                TU_REQUIRE(fabs(y[i * n + j] - e) <= ulps * 0x1p-24 * mag[i * n + j],
                        "case %zu (%llu, %llu): %.9g, ref %.9g", c, (unsigned long long)i,
                        (unsigned long long)j, y[i * n + j], e);
            }
        free(yr), free(y), free(want), free(bias), free(mag);
        acase_free(&t);
    }
}
END_TEST

/* Kernels the self-check must refuse: one output off by one ulp; a row before i0 written. */
static void off_by_ulp(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                       uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                       const float *bias, float *y, uint64_t ldy, void *panel, size_t panel_bytes)
{
    fgq_amx_emul_gemm_panel(p, w, row_bytes, n0, n1, a, i0, i1, bias, y, ldy, panel, panel_bytes);
    float *v = &y[(i1 - 1) * ldy + n1 - 1];
    *v = nextafterf(*v, INFINITY);
}

static void stray_row(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                      uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                      const float *bias, float *y, uint64_t ldy, void *panel, size_t panel_bytes)
{
    fgq_amx_emul_gemm_panel(p, w, row_bytes, n0, n1, a, i0 - 1, i1, bias, y, ldy, panel,
                            panel_bytes);
}

START_TEST(test_amx_selfcheck)
{
    ck_assert_int_eq(fgq_amx_selfcheck(fgq_amx_emul_gemm_panel), 0);
    ck_assert_int_eq(fgq_amx_selfcheck(off_by_ulp), 2); /* one in Q4, one in Q8 */
    ck_assert_int_gt(fgq_amx_selfcheck(stray_row), 0);
}
END_TEST

/* The detector and the dispatch on this CPU: AMX bits only with AMX-TILE; without AMX-INT8 no
 * AMX path (fgq_amx_on 0), and fg_quant_gemm_panel_fast as before for Q8. */
START_TEST(test_amx_dispatch)
{
    unsigned f = fg_cpu_features();
    if (f & (FG_CPU_AMX_INT8 | FG_CPU_AMX_BF16))
        ck_assert(f & FG_CPU_AMX_TILE);
    if (!(f & FG_CPU_AMX_INT8)) {
        ck_assert_int_eq(fgq_amx_on(), 0);
        fg_codec q8 = fg_codec_quant(8, 64, 1);
        ck_assert_int_eq(fg_quant_gemm_panel_fast(&q8), 0);
        fprintf(stderr, "test_quant_amx: no AMX-INT8 here: the real tile instructions not run\n");
    } else {
#ifdef FG_QUANT_AMX
        fprintf(stderr, "test_quant_amx: AMX-INT8 here: the kernel %s its self-check\n",
                fgq_amx_on() ? "passed" : "FAILED");
        ck_assert_int_eq(fgq_amx_selfcheck(fgq_amx_gemm_panel), 0);
#else
        fprintf(stderr, "test_quant_amx: AMX-INT8 here, but the compiler built no AMX kernel\n");
#endif
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant_amx");
    TCase *tc = tcase_create("quant_amx");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_amx_emulated);
    tcase_add_test(tc, test_amx_selfcheck);
    tcase_add_test(tc, test_amx_dispatch);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
