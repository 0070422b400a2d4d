/* gemm16.c - the prefill's GEMM on 16-bit float weights: y = x W^T for many rows of x, with W
 * binary16 or bfloat16 [n, k] widened to f32 while it is packed (quant.h states the contract;
 * this file checks arguments, packs x, picks the ISA and holds the scalar reference).
 *
 * Why our own GEMM and not OpenBLAS sgemm on decoded pieces: the engine meets a Linear's weights
 * one stored piece at a time (4 MiB: 256-1024 rows), and sgemm packs its whole x operand again
 * for every call, per thread: at prefill sizes OpenBLAS spent 9% of the time packing (perf,
 * synthetic opt-1.3b, 8 x 128 prompts; fc2's 256-row pieces repacked 32 MiB of x per 128 rows of
 * W) and 2% more decoding pieces to an f32 buffer it then read again. Here x is packed once per
 * Linear (fg_xpack) and the weights are widened straight into the packed panel the register
 * kernel reads, so each weight byte is touched once outside the kernel.
 *
 * ISAs: AVX2 runs gemm16_avx2.c (6 x 16 tiles of 8-lane FMA); AVX512 runs gemm16_avx512.c (6 x 32
 * tiles of 16-lane FMA, the same sums in the same order: the same bits) when the panel holds a
 * 32-row strip (kc x 32 floats), else the AVX2 kernel. FG_PREFILL_AVX512=0 in the environment
 * keeps the AVX2 kernels for the prefill GEMMs (this one and the Q4 panel kernel) on an AVX-512
 * CPU, to compare them on one machine. fg_w16_gemm_bf16 (--compute bf16) runs gemm16_bf16.c on
 * CPUs with AVX512-BF16: x and the weights rounded to bfloat16, VDPBF16PS (docs/performance.md
 * has its speed and perplexity rows); elsewhere its reference here, which rounds the same way.
 *
 * Layout of packed x (GotoBLAS/BLIS-style): columns in blocks of FG_XPACK_KC; within a block of
 * kc columns starting at column p, micro-panels of FG_XPACK_MR rows, each [kc][MR] (row i of the
 * panel at offset kk * MR + i); block p starts at p * mp, panel b at b * kc * MR, where mp is m
 * rounded up to MR. Rows past m are zero.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "quant_int.h"
#include "quant_gemm_int.h"

uint64_t fg_xpack_floats(uint64_t m, uint64_t k)
{
    return (m + FG_XPACK_MR - 1) / FG_XPACK_MR * FG_XPACK_MR * k;
}

void fg_xpack(const float *x, uint64_t m, uint64_t k, uint64_t ldx, float *xp, uint64_t b0,
              uint64_t b1)
{
    const uint64_t MR = FG_XPACK_MR, mp = (m + MR - 1) / MR * MR;
    b1 = b1 < mp / MR ? b1 : mp / MR;
#ifdef FG_QUANT_X86
    if (fg_quant_isa_default() != FG_QUANT_ISA_REF) {
        fgq_avx2_xpack(x, m, k, ldx, xp, b0, b1);
        return;
    }
#endif
    for (uint64_t p = 0; p < k; p += FG_XPACK_KC) {
        uint64_t kc = k - p < FG_XPACK_KC ? k - p : FG_XPACK_KC;
        for (uint64_t b = b0; b < b1; b++) {
            float *d = xp + p * mp + b * kc * MR;
            for (uint64_t i = 0; i < MR; i++) {
                uint64_t r = b * MR + i;
                if (r >= m) {
                    for (uint64_t kk = 0; kk < kc; kk++)
                        d[kk * MR + i] = 0.0f;
                    continue;
                }
                const float *s = x + r * ldx + p;
                for (uint64_t kk = 0; kk < kc; kk++)
                    d[kk * MR + i] = s[kk];
            }
        }
    }
}

float fgq_xpack_at(const float *xp, uint64_t m, uint64_t k, uint64_t i, uint64_t c)
{
    const uint64_t MR = FG_XPACK_MR, mp = (m + MR - 1) / MR * MR;
    uint64_t p = c / FG_XPACK_KC * FG_XPACK_KC, kc = k - p < FG_XPACK_KC ? k - p : FG_XPACK_KC;
    return xp[p * mp + i / MR * kc * MR + (c - p) * MR + i % MR];
}

static float w16(int bf16, uint16_t h)
{
    return bf16 ? fgq_bitsf((uint32_t)h << 16) : fgq_h2f(h);
}

float fgq_bf16_round(float f)
{
    uint32_t u = fgq_fbits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: stays NaN (quieted) */
        return fgq_bitsf((u | 0x00400000u) & 0xFFFF0000u);
    if (!(u & 0x7F800000u)) /* zero or denormal: signed zero, as the instructions flush them */
        return fgq_bitsf(u & 0x80000000u);
    return fgq_bitsf((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

float fgq_xpack_bf16_at(const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i, uint64_t c)
{
    const uint64_t MR = FG_XPACK_MR, mp = (m + MR - 1) / MR * MR;
    uint64_t p = c / FG_XPACK_KC * FG_XPACK_KC, kc = k - p < FG_XPACK_KC ? k - p : FG_XPACK_KC;
    uint32_t pair = xb[p / 2 * mp + i / MR * ((kc + 1) / 2) * MR + (c - p) / 2 * MR + i % MR];
    return fgq_bitsf((c - p) % 2 ? pair & 0xFFFF0000u : pair << 16);
}

void fgq_ref_w16_gemm(int bf16, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                      const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                      const float *bias, float *y, uint64_t ldy)
{
    for (uint64_t i = i0; i < i1; i++)
        for (uint64_t j = 0; j < n; j++) {
            double acc = bias ? bias[j] : 0.0;
            for (uint64_t c = 0; c < k; c++) {
                float wv = w16(bf16, w[j * ldw + c]);
                if (xb)
                    acc += (double)fgq_bf16_round(wv) * fgq_xpack_bf16_at(xb, m, k, i, c);
                else
                    acc += (double)wv * fgq_xpack_at(xp, m, k, i, c);
            }
            y[i * ldy + j] = (float)acc;
        }
}

uint64_t fg_xpack_bf16_words(uint64_t m, uint64_t k)
{
    return (m + FG_XPACK_MR - 1) / FG_XPACK_MR * FG_XPACK_MR * ((k + 1) / 2);
}

void fg_xpack_bf16(const float *x, uint64_t m, uint64_t k, uint64_t ldx, uint32_t *xb,
                   uint64_t b0, uint64_t b1)
{
    const uint64_t MR = FG_XPACK_MR, mp = (m + MR - 1) / MR * MR;
    b1 = b1 < mp / MR ? b1 : mp / MR;
#ifdef FG_QUANT_BF16
    if (fg_w16_gemm_bf16_fast()) {
        fgq_bf16_xpack(x, m, k, ldx, xb, b0, b1);
        return;
    }
#endif
    for (uint64_t p = 0; p < k; p += FG_XPACK_KC) {
        uint64_t kc = k - p < FG_XPACK_KC ? k - p : FG_XPACK_KC, kc2 = (kc + 1) / 2;
        for (uint64_t b = b0; b < b1; b++) {
            uint32_t *d = xb + p / 2 * mp + b * kc2 * MR;
            for (uint64_t i = 0; i < MR; i++) {
                uint64_t r = b * MR + i;
                for (uint64_t kk = 0; kk < kc; kk += 2) {
                    uint32_t lo = 0, hi = 0;
                    if (r < m) {
                        lo = fgq_fbits(fgq_bf16_round(x[r * ldx + p + kk])) >> 16;
                        if (kk + 1 < kc)
                            hi = fgq_fbits(fgq_bf16_round(x[r * ldx + p + kk + 1])) >> 16;
                    }
                    d[kk / 2 * MR + i] = lo | hi << 16;
                }
            }
        }
    }
}

uint64_t fg_w16_bf16_panel_min_floats(uint64_t k)
{
    return ((k < FG_XPACK_KC ? (k ? k : 1) : FG_XPACK_KC) + 1) / 2 * 32;
}

int fg_w16_gemm_bf16_fast(void)
{
#ifdef FG_QUANT_BF16
    return fg_quant_isa_default() == FG_QUANT_ISA_AVX512 &&
           (fg_cpu_features() & FG_CPU_AVX512BF16);
#else
    return 0;
#endif
}

/* fg_w16_gemm's and fg_w16_gemm_bf16's argument checks. */
static int w16_check(uint8_t codec, uint64_t n, uint64_t ldw, uint64_t m, uint64_t k,
                     uint64_t i0, uint64_t i1, uint64_t ldy, fg_quant_isa *isa, fg_err *err)
{
    if (*isa == FG_QUANT_ISA_AUTO)
        *isa = fg_quant_isa_default();
    if (!fg_quant_isa_supported(*isa))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "quant: ISA %s not available on this CPU",
                          fg_quant_isa_name(*isa));
    if (codec != FG_CODEC_F16 && codec != FG_CODEC_BF16)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "w16 gemm: codec %u is not F16 or BF16",
                          codec);
    if (ldw < k || ldy < n || i1 > m || i0 > i1 || i0 % FG_XPACK_MR)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "w16 gemm: strides w %llu, y %llu or rows "
                          "[%llu, %llu) of %llu for n %llu, k %llu", (unsigned long long)ldw,
                          (unsigned long long)ldy, (unsigned long long)i0, (unsigned long long)i1,
                          (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
    return FG_OK;
}

int fg_w16_gemm_bf16(uint8_t codec, const uint16_t *w, uint64_t n, uint64_t ldw,
                     const uint32_t *xb, uint64_t m, uint64_t k, uint64_t i0, uint64_t i1,
                     const float *bias, float *y, uint64_t ldy, float *panel,
                     uint64_t panel_floats, fg_quant_isa isa, fg_err *err)
{
    int rc = w16_check(codec, n, ldw, m, k, i0, i1, ldy, &isa, err);
    if (rc)
        return rc;
#ifdef FG_QUANT_BF16
    if (isa == FG_QUANT_ISA_AVX512 && (fg_cpu_features() & FG_CPU_AVX512BF16) && k) {
        if (panel_floats < fg_w16_bf16_panel_min_floats(k))
            return fg_err_set(err, FG_ERR_INVALID_ARG, "w16 gemm bf16: a panel of %llu floats, "
                              "%llu needed", (unsigned long long)panel_floats,
                              (unsigned long long)fg_w16_bf16_panel_min_floats(k));
        fgq_bf16_w16_gemm(codec == FG_CODEC_BF16, w, n, ldw, xb, m, k, i0, i1, bias, y, ldy,
                          panel, panel_floats);
        return FG_OK;
    }
#endif
    (void)panel, (void)panel_floats;
    fgq_ref_w16_gemm(codec == FG_CODEC_BF16, w, n, ldw, NULL, xb, m, k, i0, i1, bias, y, ldy);
    return FG_OK;
}

int fg_w16_gemm(uint8_t codec, const uint16_t *w, uint64_t n, uint64_t ldw, const float *xp,
                uint64_t m, uint64_t k, uint64_t i0, uint64_t i1, const float *bias, float *y,
                uint64_t ldy, float *panel, uint64_t panel_floats, fg_quant_isa isa, fg_err *err)
{
    int rc = w16_check(codec, n, ldw, m, k, i0, i1, ldy, &isa, err);
    if (rc)
        return rc;
#ifdef FG_QUANT_X86
    if (isa != FG_QUANT_ISA_REF) {
        if (panel_floats < fg_w16_panel_min_floats(k))
            return fg_err_set(err, FG_ERR_INVALID_ARG, "w16 gemm: a panel of %llu floats, "
                              "%llu needed", (unsigned long long)panel_floats,
                              (unsigned long long)fg_w16_panel_min_floats(k));
        if (isa == FG_QUANT_ISA_AVX512 && fgq_prefill_avx512_on() &&
            panel_floats >= (k < FG_XPACK_KC ? k : FG_XPACK_KC) * 32)
            fgq_avx512_w16_gemm(codec == FG_CODEC_BF16, w, n, ldw, xp, m, k, i0, i1, bias, y,
                                ldy, panel, panel_floats);
        else
            fgq_avx2_w16_gemm(codec == FG_CODEC_BF16, w, n, ldw, xp, m, k, i0, i1, bias, y, ldy,
                              panel, panel_floats);
        return FG_OK;
    }
#endif
    (void)panel, (void)panel_floats;
    fgq_ref_w16_gemm(codec == FG_CODEC_BF16, w, n, ldw, xp, NULL, m, k, i0, i1, bias, y, ldy);
    return FG_OK;
}

int fgq_prefill_avx512_on(void)
{
    static _Atomic int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("FG_PREFILL_AVX512");
        v = !(e && !strcmp(e, "0"));
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

uint64_t fg_w16_panel_min_floats(uint64_t k)
{
    return (k < FG_XPACK_KC ? (k ? k : 1) : FG_XPACK_KC) * 16;
}

int fg_w16_gemm_fast(void)
{
#ifdef FG_QUANT_X86
    return fg_quant_isa_default() != FG_QUANT_ISA_REF;
#else
    return 0;
#endif
}
