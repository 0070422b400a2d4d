/* quant_amx_emul.c - the AMX-INT8 prefill GEMM's body (quant/gemm_amx_kern.h) with the tile
 * instructions emulated in C, so that the kernel's logic (tile configuration, packing of both
 * operands into tile layouts, the chunk and group loops, the float terms, tails in m, n and k)
 * runs on any CPU: no CPU with AMX was at hand. Plain C, compiled with the default flags
 * (test_quant_amx).
 *
 * The emulation follows the SDM's pseudo-code, with the checks that would fault turned into
 * abort() (a programmer error in the kernel then fails the test loudly):
 *  - LDTILECFG: palette 0 releases; palette 1 sets per tile rows (<= 16) and colsb (<= 64 bytes,
 *    a multiple of 4) and zeroes all tile data; other palettes or reserved bytes fault.
 *  - TILELOADD / TILESTORED: rows x colsb bytes from / to base + row x stride; a load zeroes the
 *    bytes past colsb and the rows past rows.
 *  - TILEZERO: the tile's 1 KiB zeroed.
 *  - TDPBUSD c, a, b: with K = a.colsb / 4 (must equal b.rows), c.rows == a.rows and
 *    c.colsb == b.colsb: c.dword[m][n] += sum over k < K of the four products of a.row[m]'s
 *    unsigned bytes 4k..4k+3 and b.row[k]'s signed bytes 4n..4n+3, in wrapping 32-bit
 *    arithmetic; bytes past c.colsb and rows past c.rows zeroed.
 *  - TILERELEASE: back to the initial state (tile use without a configuration faults).
 * State is per thread (tiles are per-thread state, as the registers).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct emu_tiles {
    uint8_t data[8][16][64];
    uint16_t colsb[8];
    uint8_t rows[8];
    int configured;
} emu_tiles;

static _Thread_local emu_tiles T;

static void emu_fault(const char *what)
{
    fprintf(stderr, "quant_amx_emul: %s would fault\n", what);
    abort();
}

static void emu_ldtilecfg(const void *cfgp)
{
    const uint8_t *cfg = cfgp;
    memset(&T, 0, sizeof T);
    if (cfg[0] == 0)
        return;
    if (cfg[0] != 1 || cfg[1] != 0)
        emu_fault("LDTILECFG (palette, start_row)");
    for (int i = 2; i < 16; i++)
        if (cfg[i])
            emu_fault("LDTILECFG (reserved bytes)");
    for (int t = 0; t < 8; t++) {
        uint16_t colsb = (uint16_t)(cfg[16 + 2 * t] | cfg[17 + 2 * t] << 8);
        uint8_t rows = cfg[48 + t];
        if (colsb > 64 || colsb % 4 || rows > 16 || (!colsb) != (!rows))
            emu_fault("LDTILECFG (a tile's shape)");
        T.colsb[t] = colsb, T.rows[t] = rows;
    }
    T.configured = 1;
}

static void emu_check(int t, const char *what)
{
    if (!T.configured || t < 0 || t > 7 || !T.rows[t])
        emu_fault(what);
}

static void emu_tilezero(int t)
{
    emu_check(t, "TILEZERO");
    memset(T.data[t], 0, sizeof T.data[t]);
}

static void emu_tileload(int t, const void *base, long stride)
{
    emu_check(t, "TILELOADD");
    memset(T.data[t], 0, sizeof T.data[t]);
    for (int r = 0; r < T.rows[t]; r++)
        memcpy(T.data[t][r], (const uint8_t *)base + r * stride, T.colsb[t]);
}

static void emu_tilestore(int t, void *base, long stride)
{
    emu_check(t, "TILESTORED");
    for (int r = 0; r < T.rows[t]; r++)
        memcpy((uint8_t *)base + r * stride, T.data[t][r], T.colsb[t]);
}

static void emu_tdpbusd(int c, int a, int b)
{
    emu_check(c, "TDPBUSD (dest)");
    emu_check(a, "TDPBUSD (src1)");
    emu_check(b, "TDPBUSD (src2)");
    if (c == a || c == b || a == b || T.colsb[a] / 4 != T.rows[b] || T.rows[c] != T.rows[a] ||
        T.colsb[c] != T.colsb[b])
        emu_fault("TDPBUSD (shapes)");
    const int K = T.colsb[a] / 4, N = T.colsb[c] / 4;
    for (int m = 0; m < T.rows[c]; m++)
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &T.data[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int e = 0; e < 4; e++)
                    acc += (uint32_t)((int32_t)T.data[a][m][4 * k + e] *
                                      (int32_t)(int8_t)T.data[b][k][4 * n + e]);
            memcpy(&T.data[c][m][4 * n], &acc, 4);
        }
    for (int m = 0; m < 16; m++)
        memset(&T.data[c][m][T.colsb[c]], 0, 64 - T.colsb[c]);
    for (int m = T.rows[c]; m < 16; m++)
        memset(T.data[c][m], 0, 64);
}

static void emu_tilerelease(void) { memset(&T, 0, sizeof T); }

#define FGQ_TILE_LOADCONFIG(cfg) emu_ldtilecfg(cfg)
#define FGQ_TILE_ZERO(t) emu_tilezero(t)
#define FGQ_TILE_LOAD(t, base, stride) emu_tileload((t), (base), (stride))
#define FGQ_TILE_DPBUSD(c, a, b) emu_tdpbusd((c), (a), (b))
#define FGQ_TILE_STORE(t, base, stride) emu_tilestore((t), (base), (stride))
#define FGQ_TILE_RELEASE() emu_tilerelease()
#define FGQ_AMX_ENTRY fgq_amx_emul_gemm_panel
#include "gemm_amx_kern.h"
