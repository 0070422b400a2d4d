/* quant_kernels.cuh - the CUDA kernels of quant_cuda.cu (whose top comment says what they do).
 *
 * Device code only, in a header of its own so that tests/cudaemu/ can compile the same text for
 * the host and run it under its emulated runtime: what is written here must build both ways.
 */
#ifndef FG_QUANT_KERNELS_CUH
#define FG_QUANT_KERNELS_CUH

#include <stdint.h>

#include "quant_int.h"

namespace {

struct Geo {
    uint64_t rows, cols, ld, n_groups, gpl; /* gpl: groups per line (row or column) */
    uint32_t G, levels, hdr, gbytes, bits, f16scale, hi_first, along_rows;
};

struct Status {
    int code;
    unsigned long long group;
};

__device__ float load_dense(const void *src, int f16, uint64_t i)
{
    return f16 ? fgq_h2f(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}

__device__ uint64_t group_of(const Geo &g, uint64_t r, uint64_t c, uint32_t *t)
{
    if (g.along_rows) {
        *t = (uint32_t)(r % g.G);
        return (r / g.G) * g.cols + c;
    }
    *t = (uint32_t)(c % g.G);
    return r * g.gpl + c / g.G;
}

__device__ uint32_t code_at(const uint8_t *codes, uint32_t t, const Geo &g)
{
    if (g.bits == 8)
        return codes[t];
    uint32_t b = codes[t / 2], hi = (t & 1u) ^ g.hi_first;
    return hi ? b >> 4 : b & 0xFu;
}

__device__ void read_ms(const uint8_t *grp, const Geo &g, float *m, float *s)
{
    if (g.f16scale) {
        *m = fgq_h2f((uint16_t)(grp[0] | grp[1] << 8));
        *s = fgq_h2f((uint16_t)(grp[2] | grp[3] << 8));
    } else {
        *m = fgq_bitsf(grp[0] | grp[1] << 8 | grp[2] << 16 | (uint32_t)grp[3] << 24);
        *s = fgq_bitsf(grp[4] | grp[5] << 8 | grp[6] << 16 | (uint32_t)grp[7] << 24);
    }
}

__global__ void decode_kernel(Geo g, const uint8_t *src, void *dst, int f16out)
{
    uint64_t n = g.rows * g.cols;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t r = i / g.cols, c = i % g.cols;
        uint32_t t;
        const uint8_t *grp = src + group_of(g, r, c, &t) * g.gbytes;
        float m, s;
        read_ms(grp, g, &m, &s);
        float y = __fadd_rn(m, __fmul_rn((float)code_at(grp + g.hdr, t, g), s));
        if (f16out)
            ((uint16_t *)dst)[r * g.ld + c] = fgq_f2h(fgq_sat16(y));
        else
            ((float *)dst)[r * g.ld + c] = y;
    }
}

/* Dense index of position t of group k. */
__device__ bool elem_of(const Geo &g, uint64_t k, uint32_t t, uint64_t *idx)
{
    uint64_t r, c;
    if (g.along_rows) {
        r = (k / g.cols) * g.G + t;
        c = k % g.cols;
        if (r >= g.rows)
            return false;
    } else {
        r = k / g.gpl;
        c = (k % g.gpl) * g.G + t;
        if (c >= g.cols)
            return false;
    }
    *idx = r * g.ld + c;
    return true;
}

__device__ void fail(Status *st, int code, uint64_t k)
{
    if (atomicCAS(&st->code, 0, code) == 0)
        st->group = k;
}

__device__ void put_bytes(uint8_t *p, uint32_t v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

__global__ void encode_kernel(Geo g, const void *src, int f16in, uint8_t *dst, Status *st)
{
    uint64_t k = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    if (k >= g.n_groups)
        return;
    uint64_t idx;
    float mn = 0, mx = 0;
    for (uint32_t t = 0; t < g.G && elem_of(g, k, t, &idx); t++) {
        float x = load_dense(src, f16in, idx);
        if (!fgq_finite(x))
            return fail(st, FG_ERR_NONFINITE, k);
        mn = t == 0 || x < mn ? x : mn;
        mx = t == 0 || x > mx ? x : mx;
    }
    mn = mn == 0.0f ? 0.0f : mn;
    mx = mx == 0.0f ? 0.0f : mx;
    float m, s;
    uint32_t mb, sb, ssz = g.f16scale ? 2 : 4;
    int rc = fgq_header_calc(mn, mx, (int)g.f16scale, g.levels, &m, &s, &mb, &sb);
    if (rc)
        return fail(st, rc, k);
    uint8_t *out = dst + k * g.gbytes;
    put_bytes(out, mb, ssz);
    put_bytes(out + ssz, sb, ssz);
    uint8_t *codes = out + g.hdr;
    float L = (float)g.levels;
    for (uint32_t t = 0; t < g.G; t += 2) {
        uint32_t c0 = 0, c1 = 0;
        if (s != 0.0f && elem_of(g, k, t, &idx))
            c0 = fgq_code1(load_dense(src, f16in, idx), m, s, L);
        if (s != 0.0f && elem_of(g, k, t + 1, &idx))
            c1 = fgq_code1(load_dense(src, f16in, idx), m, s, L);
        if (g.bits == 8) {
            codes[t] = (uint8_t)c0;
            codes[t + 1] = (uint8_t)c1;
        } else {
            codes[t / 2] = (uint8_t)(g.hi_first ? (c0 << 4) | c1 : c0 | (c1 << 4));
        }
    }
}

} // namespace

#endif
