/* quant.c - the public quant/ entry points: ISA choice, argument checks, and the walk over a
 * chunk's groups.
 *
 * Kernels live in quant_ref.c / quant_avx2.c / quant_avx512.c behind one table (quant_int.h).
 *  - Quantizing, along_rows == 0: a group is a run of G (or fewer, at a row's end) contiguous
 *    elements of a source row: F32 input is used in place, F16 input is widened into a stack
 *    buffer first.
 *  - Quantizing, along_rows == 1: a group is a column segment of G rows. A tile of B columns x G
 *    rows (B * G <= FGQ_TILE floats, on the stack) is transposed into group order (8x8 register
 *    transposes on AVX2), then every column goes through the same per-group kernels, so both axes
 *    give the same bytes on every ISA.
 *  - Dequantizing: a whole row of groups per kernel call (along_rows == 0), or a whole row-group
 *    per call (along_rows == 1), which the SIMD kernels write in 8-row strips of transposed 8x8
 *    blocks.
 * The per-group stored min/scale always come from fgq_header (scalar, shared). No allocation.
 *
 * ISA choice: fg_quant_isa_default() asks the process's one CPU detector (core/fg_cpu.h), capped
 * by $FG_QUANT_ISA (or $FG_ISA). AVX2/AVX-512 kernels are compiled with per-file target flags
 * and only called after that check, so this library still runs on CPUs without them.
 */
#include <stdlib.h>
#include <string.h>

#include "fg_cpu.h"
#include "quant_int.h"

#define FGQ_TILE 4096u /* floats in the transpose tile: 16 KiB */

/* ---- ISA selection ---- */

const char *fg_quant_isa_name(fg_quant_isa isa)
{
    switch (isa) {
    case FG_QUANT_ISA_AUTO: return "auto";
    case FG_QUANT_ISA_REF: return "ref";
    case FG_QUANT_ISA_AVX2: return "avx2";
    case FG_QUANT_ISA_AVX512: return "avx512";
    }
    return "?";
}

int fg_quant_isa_parse(const char *s, fg_quant_isa *out, fg_err *err)
{
    for (int i = FG_QUANT_ISA_AUTO; i <= FG_QUANT_ISA_AVX512; i++)
        if (s && strcmp(s, fg_quant_isa_name((fg_quant_isa)i)) == 0) {
            *out = (fg_quant_isa)i;
            return FG_OK;
        }
    return fg_err_set(err, FG_ERR_INVALID_ARG, "quant ISA '%s' unknown (auto, ref, avx2, avx512)",
                      s ? s : "(null)");
}

int fg_quant_isa_supported(fg_quant_isa isa)
{
    unsigned f = fg_cpu_features();
    (void)f;
    switch (isa) {
    case FG_QUANT_ISA_REF: return 1;
#ifdef FG_QUANT_X86
    case FG_QUANT_ISA_AVX2: return (f & FG_CPU_AVX2) && (f & FG_CPU_F16C);
    case FG_QUANT_ISA_AVX512: return (f & FG_CPU_AVX512) && (f & FG_CPU_F16C);
#endif
    default: return 0;
    }
}

/* The process's one detector (core/fg_cpu.h), capped by $FG_QUANT_ISA for this module, read
 * once (every AUTO call asks). */
fg_quant_isa fg_quant_isa_default(void)
{
    static _Atomic int cached = -1;
    switch (fg_cpu_isa_cap_once("FG_QUANT_ISA", &cached)) {
    case FG_ISA_AVX512: return FG_QUANT_ISA_AVX512;
    case FG_ISA_AVX2: return FG_QUANT_ISA_AVX2;
    default: return FG_QUANT_ISA_REF;
    }
}

static const fgq_kernels *kernels_for(fg_quant_isa isa)
{
    if (isa == FG_QUANT_ISA_AUTO)
        isa = fg_quant_isa_default();
    if (!fg_quant_isa_supported(isa))
        return NULL;
#ifdef FG_QUANT_X86
    if (isa == FG_QUANT_ISA_AVX2)
        return &fgq_kernels_avx2;
    if (isa == FG_QUANT_ISA_AVX512)
        return &fgq_kernels_avx512;
#endif
    return &fgq_kernels_ref;
}

/* ---- argument checks ---- */

int fg_quant_chunk_bytes(const fg_qview *v, size_t *out, fg_err *err)
{
    uint64_t n;
    if (fg_mul_u64(v->n_groups, v->group_bytes, &n) || n > SIZE_MAX)
        return fg_err_set(err, FG_ERR_OVERFLOW, "quant: chunk of %llu groups overflows",
                          (unsigned long long)v->n_groups);
    *out = (size_t)n;
    return FG_OK;
}

int fgq_check(const fg_codec *c, const fg_qview *v, uint8_t dtype, uint64_t ld, size_t len,
              fgq_params *p, fg_err *err)
{
    fg_codec cc = *c; /* the axis is the view's business (along_rows) */
    cc.group_axis = 0;
    int rc = fg_codec_validate(&cc, 1, err);
    if (rc)
        return rc;
    if (c->id != FG_CODEC_Q4 && c->id != FG_CODEC_Q8)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant: codec %s is not quantized",
                          fg_codec_name(c->id));
    if (dtype != FG_CODEC_F32 && dtype != FG_CODEC_F16)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant: dense dtype %s (must be f32 or f16)",
                          fg_codec_name(dtype));
    p->G = c->group_size;
    p->bits = c->bits;
    p->levels = (1u << c->bits) - 1;
    p->f16scale = c->scale_dtype == FG_SCALE_F16;
    p->hi_first = c->nibble_order == FG_NIBBLE_HI_FIRST;
    p->hdr = p->f16scale ? 4 : 8;
    p->gbytes = p->hdr + p->G * p->bits / 8;
    uint64_t along = v->along_rows ? v->rows : v->cols, other = v->along_rows ? v->cols : v->rows;
    uint64_t groups = along / p->G + (along % p->G != 0), ng;
    if (v->group_bytes != p->gbytes || fg_mul_u64(groups, other, &ng) || ng != v->n_groups)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH,
                          "quant: view [%llu, %llu] with %llu groups of %u bytes does not match "
                          "codec %s group %u", (unsigned long long)v->rows,
                          (unsigned long long)v->cols, (unsigned long long)v->n_groups,
                          v->group_bytes, fg_codec_name(c->id), p->G);
    size_t need = 0;
    if ((rc = fg_quant_chunk_bytes(v, &need, err)))
        return rc;
    if (len < need)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "quant: chunk buffer of %zu bytes, need %zu",
                          len, need);
    if (ld != 0 && ld < v->cols)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "quant: row stride %llu < cols %llu",
                          (unsigned long long)ld, (unsigned long long)v->cols);
    return FG_OK;
}

/* fgq_check, then the kernels of isa. */
static int prepare(const fg_codec *c, const fg_qview *v, uint8_t dtype, uint64_t ld, size_t len,
                   fgq_params *p, const fgq_kernels **k, fg_quant_isa isa, fg_err *err)
{
    int rc = fgq_check(c, v, dtype, ld, len, p, err);
    if (rc)
        return rc;
    if (!(*k = kernels_for(isa)))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "quant: ISA %s not available on this CPU",
                          fg_quant_isa_name(isa));
    return FG_OK;
}

/* ---- encoding ---- */

/* Quantize one contiguous group x[0..n) into out (gbytes). */
static int encode_group(const fgq_kernels *k, const float *x, uint32_t n, const fgq_params *p,
                        uint8_t *out)
{
    float mn, mx, m, s;
    if (k->minmax(x, n, &mn, &mx))
        return FG_ERR_NONFINITE;
    mn = mn == 0.0f ? 0.0f : mn; /* one zero: +0, whichever the reduction met first */
    mx = mx == 0.0f ? 0.0f : mx;
    int rc = fgq_header(mn, mx, p, &m, &s, out);
    if (rc)
        return rc;
    if (s == 0.0f)
        memset(out + p->hdr, 0, p->gbytes - p->hdr);
    else
        k->codes(x, n, m, s, p, out + p->hdr);
    return FG_OK;
}

/* Element (r, c) of the dense source as binary32. */
static float dense_at(const void *src, uint8_t dtype, uint64_t ld, uint64_t r, uint64_t c)
{
    if (dtype == FG_CODEC_F32)
        return ((const float *)src)[r * ld + c];
    return fgq_h2f(((const uint16_t *)src)[r * ld + c]);
}

/* Turn a group failure into a message naming the first offending element of the group. */
static int group_error(int rc, const void *src, uint8_t dtype, uint64_t ld, uint64_t r0,
                       uint64_t c0, uint32_t n, int along_rows, fg_err *err)
{
    if (rc == FG_ERR_NONFINITE)
        for (uint32_t t = 0; t < n; t++) {
            uint64_t r = along_rows ? r0 + t : r0, c = along_rows ? c0 : c0 + t;
            float x = dense_at(src, dtype, ld, r, c);
            if (!isfinite(x))
                return fg_err_set(err, rc, "quant: element (%llu, %llu) is %s",
                                  (unsigned long long)r, (unsigned long long)c,
                                  isnan(x) ? "NaN" : "Inf");
        }
    return fg_err_set(err, rc,
                      "quant: group at (%llu, %llu): value range does not fit (min/scale in the "
                      "scale dtype, top code in binary32)",
                      (unsigned long long)r0, (unsigned long long)c0);
}

static int encode_cols(const fgq_kernels *k, const fgq_params *p, const fg_qview *v,
                       const void *src, uint8_t dtype, uint64_t ld, uint8_t *out, fg_err *err)
{
    float buf[FG_FGT_GROUP_MAX];
    for (uint64_t r = 0; r < v->rows; r++)
        for (uint64_t c0 = 0; c0 < v->cols; c0 += p->G, out += p->gbytes) {
            uint32_t n = (uint32_t)(v->cols - c0 < p->G ? v->cols - c0 : p->G);
            const float *x = buf;
            if (dtype == FG_CODEC_F32)
                x = (const float *)src + r * ld + c0;
            else
                k->h2f((const uint16_t *)src + r * ld + c0, buf, n);
            int rc = encode_group(k, x, n, p, out);
            if (rc)
                return group_error(rc, src, dtype, ld, r, c0, n, 0, err);
        }
    return FG_OK;
}

/* Transpose rows [r0, r0+nr) x cols [c0, c0+nb) of the source into tile[j * G + t]. */
static void gather_tile(const fgq_kernels *k, const void *src, uint8_t dtype, uint64_t ld,
                        uint64_t r0, uint32_t nr, uint64_t c0, uint32_t nb, uint32_t G,
                        float *tile)
{
    if (dtype == FG_CODEC_F32) {
        k->transpose((const float *)src + r0 * ld + c0, ld, tile, G, nr, nb);
        return;
    }
    float rows[FGQ_TILE]; /* [nr][nb] widened */
    for (uint32_t t = 0; t < nr; t++)
        k->h2f((const uint16_t *)src + (r0 + t) * ld + c0, rows + (size_t)t * nb, nb);
    k->transpose(rows, nb, tile, G, nr, nb);
}

static uint32_t tile_cols(uint32_t G, uint64_t cols)
{
    uint64_t b = FGQ_TILE / G;
    return (uint32_t)(b < cols ? b : cols);
}

static int encode_rows(const fgq_kernels *k, const fgq_params *p, const fg_qview *v,
                       const void *src, uint8_t dtype, uint64_t ld, uint8_t *out, fg_err *err)
{
    float tile[FGQ_TILE];
    uint32_t B = tile_cols(p->G, v->cols);
    for (uint64_t r0 = 0; r0 < v->rows; r0 += p->G) {
        uint32_t nr = (uint32_t)(v->rows - r0 < p->G ? v->rows - r0 : p->G);
        for (uint64_t c0 = 0; c0 < v->cols; c0 += B) {
            uint32_t nb = (uint32_t)(v->cols - c0 < B ? v->cols - c0 : B);
            gather_tile(k, src, dtype, ld, r0, nr, c0, nb, p->G, tile);
            for (uint32_t j = 0; j < nb; j++, out += p->gbytes) {
                int rc = encode_group(k, tile + (size_t)j * p->G, nr, p, out);
                if (rc)
                    return group_error(rc, src, dtype, ld, r0, c0 + j, nr, 1, err);
            }
        }
    }
    return FG_OK;
}

int fg_quant_encode(const fg_codec *c, const fg_qview *v, const void *src, uint8_t src_dtype,
                    uint64_t ld, void *dst, size_t dst_len, fg_quant_isa isa, fg_err *err)
{
    fgq_params p;
    const fgq_kernels *k;
    int rc = prepare(c, v, src_dtype, ld, dst_len, &p, &k, isa, err);
    if (rc)
        return rc;
    if (ld == 0)
        ld = v->cols;
    if (v->along_rows)
        return encode_rows(k, &p, v, src, src_dtype, ld, dst, err);
    return encode_cols(k, &p, v, src, src_dtype, ld, dst, err);
}

/* ---- decoding ---- */

static void decode_cols(const fgq_kernels *k, const fgq_params *p, const fg_qview *v,
                        const uint8_t *in, void *dst, uint8_t dtype, uint64_t ld)
{
    uint64_t row_bytes = (v->cols / p->G + (v->cols % p->G != 0)) * p->gbytes;
    for (uint64_t r = 0; r < v->rows; r++, in += row_bytes) {
        if (dtype == FG_CODEC_F32)
            k->dec_f32(in, v->cols, p, (float *)dst + r * ld);
        else
            k->dec_f16(in, v->cols, p, (uint16_t *)dst + r * ld);
    }
}

static void decode_rows(const fgq_kernels *k, const fgq_params *p, const fg_qview *v,
                        const uint8_t *in, void *dst, uint8_t dtype, uint64_t ld)
{
    for (uint64_t r0 = 0; r0 < v->rows; r0 += p->G, in += v->cols * p->gbytes) {
        uint32_t nr = (uint32_t)(v->rows - r0 < p->G ? v->rows - r0 : p->G);
        if (dtype == FG_CODEC_F32)
            k->dec_rows_f32(in, nr, v->cols, p, (float *)dst + r0 * ld, ld);
        else
            k->dec_rows_f16(in, nr, v->cols, p, (uint16_t *)dst + r0 * ld, ld);
    }
}

int fg_quant_decode(const fg_codec *c, const fg_qview *v, const void *src, size_t src_len,
                    void *dst, uint8_t dst_dtype, uint64_t ld, fg_quant_isa isa, fg_err *err)
{
    fgq_params p;
    const fgq_kernels *k;
    int rc = prepare(c, v, dst_dtype, ld, src_len, &p, &k, isa, err);
    if (rc)
        return rc;
    if (ld == 0)
        ld = v->cols;
    if (v->along_rows)
        decode_rows(k, &p, v, src, dst, dst_dtype, ld);
    else
        decode_cols(k, &p, v, src, dst, dst_dtype, ld);
    return FG_OK;
}

/* ---- binary16 conversion ---- */

void fg_f16_to_f32(const uint16_t *src, float *dst, size_t n, fg_quant_isa isa)
{
    const fgq_kernels *k = kernels_for(isa);
    (k ? k : &fgq_kernels_ref)->h2f(src, dst, n);
}

void fg_f32_to_f16(const float *src, uint16_t *dst, size_t n, fg_quant_isa isa)
{
    const fgq_kernels *k = kernels_for(isa);
    (k ? k : &fgq_kernels_ref)->f2h(src, dst, n);
}

float fg_f16_to_f32_1(uint16_t h) { return fgq_h2f(h); }

uint16_t fg_f32_to_f16_1(float f) { return fgq_f2h(f); }
