/* gemm_amx_check.c - whether the AMX-INT8 panel kernel (gemm_amx.c) runs: the CPU and OS report
 * AMX-INT8 (core/fg_cpu.h; the detector has asked Linux for the tile data permission),
 * FG_QUANT_AMX is not "0", and a first-use self-check passes. Compiled with the default flags.
 *
 * Why a self-check: the kernel's tile instructions had never run on hardware when it was written
 * (only their emulation in C, tests/quant_amx_emul.c). So before its first use the real kernel
 * runs a small Q4 and a small Q8 GEMM with tails (37 activation rows from row 2, 45 weight rows
 * from row 3, k = 2150: two k blocks, the last group partial) whose every value is an exact
 * integer in binary32 (activation codes in -7..7, scales 1 or 1/2, small integer mins and bias),
 * against the same sums in int64. A difference (a misread tile layout, a wrong configuration)
 * leaves the AVX-512 kernels in place with one line on stderr. It costs about 10 million integer
 * multiply-adds, once per process.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "quant_gemm_int.h"

uint64_t fgq_amx_panel_min(uint32_t G, uint64_t k)
{
    uint64_t ngw = (k + G - 1) / G, kb = FG_QUANT_PANEL_COLS / G ? FG_QUANT_PANEL_COLS / G : 1;
    kb = kb < ngw ? kb : ngw;
    return 2 * fgq_amx_block_bytes(kb ? kb : 1, G);
}

#define CK_M 39
#define CK_I0 2
#define CK_N 48
#define CK_N0 3
#define CK_K 2150
#define CK_G 64

static uint32_t ck_rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The weight chunk: min (j + g) % 5 - 2, scale 1, codes pseudo-random (f32 scales; Q4 high
 * nibble first, so the nibble order is exercised). */
static void ck_weights(const fgq_params *p, uint8_t *w, uint64_t row_bytes, uint32_t *s)
{
    const uint64_t ngw = row_bytes / p->gbytes;
    for (uint64_t j = 0; j < CK_N; j++)
        for (uint64_t g = 0; g < ngw; g++) {
            uint8_t *grp = w + j * row_bytes + g * p->gbytes;
            float ms[2] = {(float)((int)((j + g) % 5) - 2), 1.0f};
            memcpy(grp, ms, 8);
            for (uint32_t b = 0; b < p->G * p->bits / 8; b++)
                grp[8 + b] = (uint8_t)ck_rnd(s);
        }
}

/* The activations: codes in -7..7 (0 past k), scale 1 or 1/2 a group, qsum and qmin to match. */
static void ck_act(fg_quant_act *a, uint32_t *s)
{
    for (uint64_t i = 0; i < a->m; i++) {
        for (uint64_t c = 0; c < a->kp; c++)
            a->q[i * a->kp + c] = c < a->k ? (int8_t)((int)(ck_rnd(s) % 15) - 7) : 0;
        for (uint64_t g = 0; g < a->n_groups; g++) {
            int32_t sum = 0;
            for (uint32_t t = 0; t < a->group; t++)
                sum += a->q[i * a->kp + g * a->group + t];
            a->scale[i * a->n_blocks + g] = (i + g) % 3 ? 1.0f : 0.5f;
            a->qsum[i * a->n_groups + g] = sum;
            a->qmin[i * a->n_groups + g] = a->scale[i * a->n_blocks + g] * (float)sum;
        }
    }
}

/* Output (i, j) in int64 halves (every term a multiple of 1/2): bias + sum over groups of
 * a * (I + min * qsum). */
static int64_t ck_want2(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                        const fg_quant_act *a, uint64_t i, uint64_t j, int bias)
{
    const uint64_t ngw = row_bytes / p->gbytes;
    int64_t y2 = bias ? 2 * (int64_t)(j % 7) - 6 : 0;
    for (uint64_t g = 0; g < ngw; g++) {
        const uint8_t *grp = w + j * row_bytes + g * p->gbytes;
        float ms[2];
        memcpy(ms, grp, 8);
        int64_t dot = 0;
        for (uint32_t t = 0; t < p->G; t++) {
            uint32_t code = grp[8 + t * p->bits / 8];
            if (p->bits == 4)
                code = ((t & 1u) ^ p->hi_first) ? code >> 4 : code & 0xFu;
            dot += (int64_t)code * a->q[i * a->kp + fgq_act_pos(a, g * p->G + t)];
        }
        int64_t t2 = 2 * (dot + (int64_t)ms[0] * a->qsum[i * a->n_groups + g]);
        y2 += a->scale[i * a->n_blocks + g] == 1.0f ? t2 : t2 / 2;
    }
    return y2;
}

/* One codec's check: the count of outputs that differ (columns before CK_N0 and rows before
 * CK_I0 must stay untouched). */
static int ck_one(fgq_panel_fn fn, unsigned bits, void *buf, size_t len)
{
    fgq_params p = {.G = CK_G, .levels = bits == 4 ? 15 : 255, .hdr = 8,
                    .gbytes = 8 + CK_G * bits / 8, .bits = (uint8_t)bits, .hi_first = bits == 4};
    const uint64_t kp = (CK_K + 63) / 64 * 64, ng = kp / CK_G, row_bytes = ng * p.gbytes;
    uint8_t *b = buf;
    uint8_t *w = b;
    int8_t *q = (int8_t *)(w + CK_N * row_bytes);
    float *scale = (float *)(q + CK_M * kp), *qmin = scale + CK_M * ng, *y = qmin + CK_M * ng;
    float *bias = y + CK_M * CK_N;
    int32_t *qsum = (int32_t *)(bias + CK_N);
    void *panel = qsum + CK_M * ng;
    size_t used = (size_t)((uint8_t *)panel - b), pbytes = fgq_amx_panel_min(CK_G, CK_K);
    if (used + pbytes > len)
        return -1;
    fg_quant_act a = {.m = CK_M, .k = CK_K, .kp = kp, .n_groups = ng, .n_blocks = ng,
                      .group = CK_G, .block = CK_G, .bits = (uint8_t)bits, .q = q,
                      .scale = scale, .qsum = qsum, .qmin = qmin};
    uint32_t s = 12345u + bits;
    ck_weights(&p, w, row_bytes, &s);
    ck_act(&a, &s);
    for (uint64_t j = 0; j < CK_N; j++)
        bias[j] = (float)(int)(j % 7) - 3.0f;
    for (uint64_t q2 = 0; q2 < CK_M * CK_N; q2++)
        y[q2] = 777.0f;
    fn(&p, w, row_bytes, CK_N0, CK_N, &a, CK_I0, CK_M, bits == 4 ? bias : NULL, y, CK_N, panel,
       pbytes);
    int bad = 0;
    for (uint64_t i = 0; i < CK_M; i++)
        for (uint64_t j = 0; j < CK_N; j++) {
            float want = 777.0f;
            if (i >= CK_I0 && j >= CK_N0)
                want = (float)ck_want2(&p, w, row_bytes, &a, i, j, bits == 4) * 0.5f;
            bad += y[i * CK_N + j] != want;
        }
    return bad;
}

int fgq_amx_selfcheck(fgq_panel_fn fn)
{
    const uint64_t kp = (CK_K + 63) / 64 * 64, ng = kp / CK_G;
    size_t len = CK_N * ng * (8 + CK_G) + CK_M * kp + 4 * (3 * CK_M * ng + CK_M * CK_N + CK_N) +
                 fgq_amx_panel_min(CK_G, CK_K) + 64;
    void *buf = malloc(len);
    if (!buf)
        return -1;
    int bad4 = ck_one(fn, 4, buf, len), bad8 = bad4 < 0 ? 0 : ck_one(fn, 8, buf, len);
    free(buf);
    return bad4 < 0 || bad8 < 0 ? -1 : bad4 + bad8;
}

#ifdef FG_QUANT_AMX
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_state;

static void amx_init(void)
{
    const char *env = getenv("FG_QUANT_AMX");
    if ((env && !strcmp(env, "0")) || !(fg_cpu_features() & FG_CPU_AMX_INT8))
        return;
    int bad = fgq_amx_selfcheck(fgq_amx_gemm_panel);
    if (bad) {
        fprintf(stderr, "fg: the AMX-INT8 kernel failed its self-check (%d outputs differ); the "
                        "int8 GEMM keeps its AVX-512 kernels\n", bad);
        return;
    }
    amx_state = 1;
}

int fgq_amx_on(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_state;
}
#else
int fgq_amx_on(void) { return 0; }
#endif
