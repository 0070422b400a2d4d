/* gemm_amx_kern.h - the body of the AMX-INT8 prefill GEMM (gemm_amx.c has the design), included
 * once per build of it. The includer defines FGQ_AMX_ENTRY (the function's name) and the tile
 * operations, on tile numbers that are literal constants (the intrinsics take immediates):
 *   FGQ_TILE_LOADCONFIG(cfg)          LDTILECFG from 64 bytes at cfg
 *   FGQ_TILE_ZERO(t)                  TILEZERO tmm t
 *   FGQ_TILE_LOAD(t, base, stride)    TILELOADD tmm t from base, row stride in bytes
 *   FGQ_TILE_DPBUSD(c, a, b)          TDPBUSD tmm c += tmm a (u8) . tmm b (s8)
 *   FGQ_TILE_STORE(t, base, stride)   TILESTORED tmm t to base
 *   FGQ_TILE_RELEASE()                TILERELEASE
 * gemm_amx.c maps them on the instructions; tests/quant_amx_emul.c on exact emulations in C.
 * Everything else here is plain C (no intrinsics), so the emulated build runs on any CPU; the
 * float loops are written on 16 lanes for the compiler to vectorize (gemm_amx.c: AVX-512).
 */
#ifndef FGQ_AMX_ENTRY
#error "define FGQ_AMX_ENTRY and the tile operations before including gemm_amx_kern.h"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant_gemm_int.h"

#define AT 16                       /* rows of a tile; a C tile is AT x AT int32 */
#define AS 32                       /* weight rows of a strip (two A tiles) */
#define AR 32                       /* activation rows of a block (two B tiles) */
_Static_assert(AS == FGQ_AMX_ROWS && AR == FGQ_AMX_ROWS, "fgq_amx_block_bytes's layout");
#define AKB FG_QUANT_PANEL_COLS     /* columns a k block: the other panel kernels', for their bits */

/* The tile configuration: every tile 16 rows x 64 bytes (palette 1). C: tmm0..3, A (weight
 * codes, 16 rows x 64 k): tmm4, 5, B (activations, 16 quads of k x 16 rows x 4): tmm6, 7. */
static void amx_config(uint8_t cfg[64])
{
    memset(cfg, 0, 64);
    cfg[0] = 1;
    for (int t = 0; t < 8; t++) {
        cfg[16 + 2 * t] = 64; /* colsb, little-endian uint16 */
        cfg[48 + t] = AT;     /* rows */
    }
}

/* Strip rows [0, nr) (nr <= 32; the rest zero) of groups [g0, g0 + ng): codes to codes
 * ([group][G / 64][32 rows][64 k]: an A tile is 16 rows of one 64-column chunk), scale and min
 * to sm ([group][32 scales, 32 mins]). Q4: a chunk's 64 codes are the 32 low nibbles of its 32
 * bytes, then the 32 high ones (hi_first: the other way), the activations' Q4 order. */
static void amx_pack_strip(const fgq_params *p, const uint8_t *w, uint64_t row_bytes,
                           uint32_t nr, uint64_t g0, uint64_t ng, uint8_t *codes, float *sm)
{
    const uint32_t nch = p->G / 64;
    for (uint64_t g = 0; g < ng; g++) {
        float *s = sm + g * 2 * AS;
        for (uint32_t t = 0; t < AS; t++) {
            float mn = 0.0f, sc = 0.0f;
            if (t < nr)
                fgq_read_ms(w + t * row_bytes + (g0 + g) * p->gbytes, p, &mn, &sc);
            s[t] = sc, s[AS + t] = mn;
        }
        for (uint32_t c = 0; c < nch; c++)
            for (uint32_t t = 0; t < AS; t++) {
                uint8_t *o = codes + ((g * nch + c) * AS + t) * 64;
                if (t >= nr) {
                    memset(o, 0, 64);
                    continue;
                }
                const uint8_t *src = w + t * row_bytes + (g0 + g) * p->gbytes + p->hdr;
                if (p->bits == 8) {
                    memcpy(o, src + c * 64, 64);
                    continue;
                }
                src += c * 32;
                for (uint32_t b = 0; b < 32; b++) {
                    uint8_t lo = src[b] & 0x0F, hi = src[b] >> 4;
                    o[b] = p->hi_first ? hi : lo;
                    o[32 + b] = p->hi_first ? lo : hi;
                }
            }
    }
}

/* Activation rows [r0, r0 + rows) (rows <= 32; the rest zero) of groups [g0, g0 + ng) into B
 * tiles xb ([group][G / 64][2 halves][16 quads][16 rows][4]: a quad of k of 16 rows is one tile
 * row, TDPBUSD's layout for its second source), and their scales and qmin into as, qm
 * ([group][32]; one activation scale a group). */
static void amx_pack_act(const fg_quant_act *a, uint64_t r0, uint32_t rows, uint64_t g0,
                         uint64_t ng, int8_t *xb, float *as, float *qm)
{
    const uint32_t G = a->group, nch = G / 64;
    for (uint64_t g = 0; g < ng; g++) {
        for (uint32_t r = 0; r < AR; r++) {
            uint64_t i = r0 + r;
            as[g * AR + r] = r < rows ? a->scale[i * a->n_blocks + g0 + g] : 0.0f;
            qm[g * AR + r] = r < rows ? a->qmin[i * a->n_groups + g0 + g] : 0.0f;
        }
        for (uint32_t c = 0; c < nch; c++)
            for (uint32_t h = 0; h < 2; h++) {
                int8_t *o = xb + ((g * nch + c) * 2 + h) * 1024;
                for (uint32_t r = 0; r < AT; r++) {
                    uint32_t rr = h * AT + r;
                    if (rr >= rows) {
                        for (uint32_t q = 0; q < 16; q++)
                            memset(o + q * 64 + r * 4, 0, 4);
                        continue;
                    }
                    const int8_t *src = a->q + (r0 + rr) * a->kp + (g0 + g) * G + c * 64;
                    for (uint32_t q = 0; q < 16; q++)
                        memcpy(o + q * 64 + r * 4, src + q * 4, 4);
                }
            }
    }
}

/* The float terms of one group for one C tile (16 weight rows x 16 activation rows, int32 I in
 * row-major [weight row][activation row]): t += I * (s_w * a) + m_w * qmin, per element two
 * binary32 FMA in this order (the AVX2 and AVX512-VNNI panel kernels' arithmetic). */
static inline void amx_terms(const int32_t *I, const float *sw, const float *mw, const float *as,
                             const float *qm, float *t)
{
    for (uint32_t m = 0; m < AT; m++) {
        float *tr = t + m * AT;
        const int32_t *ir = I + m * AT;
        const float s = sw[m], mn = mw[m];
#pragma GCC ivdep
        for (uint32_t n = 0; n < AT; n++) {
            float v = fmaf((float)ir[n], s * as[n], tr[n]);
            tr[n] = fmaf(mn, qm[n], v);
        }
    }
}

/* One strip (its codes and sm) against one activation block (xb, as, qm) over the k block's ng
 * groups: y[i * ldy + j] for i < rows, j < cols = (first: from bias[j], or 0 when bias is NULL)
 * or += the terms. */
static void amx_tile(uint64_t ng, uint32_t G, const uint8_t *codes, const float *sm,
                     const int8_t *xb, const float *as, const float *qm, float *y, uint64_t ldy,
                     uint32_t rows, uint32_t cols, int first, const float *bias)
{
    float t[4][AT * AT] __attribute__((aligned(64)));   /* [A half x 2 + B half][m][n] */
    int32_t I[4][AT * AT] __attribute__((aligned(64)));
    const uint32_t nch = G / 64;
    memset(t, 0, sizeof t);
    for (uint64_t g = 0; g < ng; g++) {
        FGQ_TILE_ZERO(0);
        FGQ_TILE_ZERO(1);
        FGQ_TILE_ZERO(2);
        FGQ_TILE_ZERO(3);
        for (uint32_t c = 0; c < nch; c++) {
            const uint8_t *ca = codes + (g * nch + c) * AS * 64;
            const int8_t *xc = xb + (g * nch + c) * 2 * 1024;
            FGQ_TILE_LOAD(4, ca, 64);
            FGQ_TILE_LOAD(5, ca + AT * 64, 64);
            FGQ_TILE_LOAD(6, xc, 64);
            FGQ_TILE_LOAD(7, xc + 1024, 64);
            FGQ_TILE_DPBUSD(0, 4, 6);
            FGQ_TILE_DPBUSD(1, 4, 7);
            FGQ_TILE_DPBUSD(2, 5, 6);
            FGQ_TILE_DPBUSD(3, 5, 7);
        }
        FGQ_TILE_STORE(0, I[0], 64);
        FGQ_TILE_STORE(1, I[1], 64);
        FGQ_TILE_STORE(2, I[2], 64);
        FGQ_TILE_STORE(3, I[3], 64);
        const float *sw = sm + g * 2 * AS, *mw = sw + AS, *ag = as + g * AR, *qg = qm + g * AR;
        for (uint32_t q = 0; q < 4; q++) { /* C tile q: weight half q / 2, activation half q % 2 */
            uint32_t wh = q / 2 * AT, xh = q % 2 * AT;
            amx_terms(I[q], sw + wh, mw + wh, ag + xh, qg + xh, t[q]);
        }
    }
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < cols; j++) {
            float v = t[j / AT * 2 + i / AT][j % AT * AT + i % AT];
            float *yy = y + i * ldy + j;
            *yy = first ? (bias ? v + bias[j] : v) : *yy + v;
        }
}


void FGQ_AMX_ENTRY(const fgq_params *p, const uint8_t *w, uint64_t row_bytes, uint64_t n0,
                   uint64_t n1, const fg_quant_act *a, uint64_t i0, uint64_t i1,
                   const float *bias, float *y, uint64_t ldy, void *panel, size_t panel_bytes)
{
    const uint64_t ngw = row_bytes / p->gbytes;
    uint64_t kb = AKB / p->G ? AKB / p->G : 1;
    kb = kb < ngw ? kb : ngw;
    /* a strip's codes and sm, and an activation block's bytes: the same (AS == AR) */
    const uint64_t sb = fgq_amx_block_bytes(kb, p->G), strips = (panel_bytes - sb) / sb;
    uint8_t cfg[64];
    amx_config(cfg);
    FGQ_TILE_LOADCONFIG(cfg);
    for (uint64_t j0 = n0; j0 < n1; j0 += strips * AS) {
        uint64_t jn = n1 - j0 < strips * AS ? n1 - j0 : strips * AS, ns = (jn + AS - 1) / AS;
        for (uint64_t g0 = 0; g0 < ngw; g0 += kb) {
            uint64_t ng = ngw - g0 < kb ? ngw - g0 : kb;
            uint8_t *codes = panel;
            float *sm = (float *)(codes + ns * ng * p->G * AS);
            int8_t *xb = (int8_t *)(sm + ns * ng * 2 * AS);
            float *as = (float *)(xb + ng * p->G * AR), *qm = as + ng * AR;
            for (uint64_t s = 0; s < ns; s++) {
                uint64_t r = j0 + s * AS;
                uint32_t nr = (uint32_t)(n1 - r < AS ? n1 - r : AS);
                amx_pack_strip(p, w + r * row_bytes, row_bytes, nr, g0, ng,
                               codes + s * ng * p->G * AS, sm + s * ng * 2 * AS);
            }
            for (uint64_t ib = i0; ib < i1; ib += AR) {
                uint32_t rows = (uint32_t)(i1 - ib < AR ? i1 - ib : AR);
                amx_pack_act(a, ib, rows, g0, ng, xb, as, qm);
                for (uint64_t s = 0; s < ns; s++) {
                    uint64_t r = j0 + s * AS;
                    uint32_t cols = (uint32_t)(n1 - r < AS ? n1 - r : AS);
                    amx_tile(ng, p->G, codes + s * ng * p->G * AS, sm + s * ng * 2 * AS, xb, as,
                             qm, y + ib * ldy + r, ldy, rows, cols, g0 == 0,
                             bias ? bias + r : NULL);
                }
            }
        }
    }
    FGQ_TILE_RELEASE();
}

#undef AT
#undef AS
#undef AR
#undef AKB
