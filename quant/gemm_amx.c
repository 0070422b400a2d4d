/* gemm_amx.c - the prefill's int8 GEMM on Q4 and Q8 weights with AMX-INT8 tiles (TDPBUSD):
 * fg_quant_gemm_panel's kernel on CPUs whose detector (core/fg_cpu.h) reports AMX-TILE and
 * AMX-INT8 with the OS's permission to use the tile data (Linux arch_prctl, asked once by the
 * detector before any tile instruction). Compiled with -mamx-tile -mamx-int8 and AVX-512 flags.
 *
 * NOT YET RUN ON HARDWARE: no CPU with AMX was at hand when this was written. What has run is
 * this body with the tile instructions emulated in C (tests/quant_amx_emul.c: every test in
 * test_quant_amx) and this file's machine code read back (objdump). So quant_gemm.c runs a
 * self-check on first use (a small Q4 and Q8 GEMM with tails, exact integers, through this very
 * kernel against an integer computation) and, if it differs, keeps the AVX-512 kernels with one
 * line on stderr; FG_QUANT_AMX=0 turns the path off.
 *
 * Tiles: TDPBUSD multiplies unsigned bytes of its first source by signed bytes of its second, so
 * the weights' codes (Q4 0..15, Q8 0..255) are the A tiles and the int8 activations the B tiles;
 * C[weight row][activation row] sums 64 products per k chunk in int32 (exact: |sum| <
 * 4096 x 255 x 127). Every tile is 16 rows x 64 bytes (one configuration per call); a C tile is
 * 16 weight rows x 16 activation rows. Per call of amx_tile: a strip of 32 weight rows (A tiles
 * tmm4, 5) meets a block of 32 activation rows (B tiles tmm6, 7) in four C tiles (tmm0..3): per
 * 64-column chunk 4 loads and 4 TDPBUSD. Groups are G >= 64 columns (a multiple of 64), so a
 * group's integer sum is complete in C after G / 64 chunks; C is then stored (4 KiB) and the
 * float terms applied, per element t += I * (s_w * a) + m_w * qmin with two binary32 FMA, in
 * the order of the AVX2 and AVX512-VNNI panel kernels (gemm_q4p_avx2.c, gemm_q4p_kern512.h), with
 * the same k blocks (FG_QUANT_PANEL_COLS columns) and the same bias and accumulation steps: so for
 * Q4 the output is theirs bit for bit, and for Q8 (which has no other panel kernel) it is that
 * arithmetic, within fg_quant_gemm's stated tolerance of the reference.
 * Layout: the weights repacked per slab into the panel as A tiles ([group][G / 64][32 rows][64
 * codes], Q4 nibbles unpacked into the activations' Q4 order), the activations of each 32-row
 * block into B tiles ([group][G / 64][2][16 quads][16 rows][4 bytes]) after the slab's strips in
 * the panel (fgq_amx_panel_min bytes at least). Rows past the end are zero codes, not stored.
 * Only one activation scale a group (a->block == G), as the AVX512-VNNI panel kernel.
 *
 * The intrinsics: GCC's TILELOADD and LDTILECFG asm statements do not tell the compiler that
 * they read memory (only TILESTORED has a memory clobber; LDTILECFG names 8 of its 64 bytes),
 * so the macros below put a compiler barrier before each, lest the packed data or the
 * configuration be written after the instruction reads it.
 */
#include <immintrin.h>

#define FGQ_BARRIER() __asm__ volatile("" ::: "memory")
#define FGQ_TILE_LOADCONFIG(cfg)                                                                  \
    do {                                                                                          \
        FGQ_BARRIER();                                                                            \
        _tile_loadconfig(cfg);                                                                    \
    } while (0)
#define FGQ_TILE_ZERO(t) _tile_zero(t)
#define FGQ_TILE_LOAD(t, base, stride)                                                            \
    do {                                                                                          \
        FGQ_BARRIER();                                                                            \
        _tile_loadd(t, base, stride);                                                             \
    } while (0)
#define FGQ_TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define FGQ_TILE_STORE(t, base, stride)                                                           \
    do {                                                                                          \
        _tile_stored(t, base, stride);                                                            \
        FGQ_BARRIER();                                                                            \
    } while (0)
#define FGQ_TILE_RELEASE() _tile_release()
#define FGQ_AMX_ENTRY fgq_amx_gemm_panel
#include "gemm_amx_kern.h"
