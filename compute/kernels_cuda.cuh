/* kernels_cuda.cuh - the CUDA backend's kernels (backend_cuda.cu, whose top comment says what
 * each computes; compute/ops_ref.c is their definition).
 *
 * Device code only, in a header of its own so that tests/cudaemu/ can compile the same text for
 * the host and run it under its emulated runtime (see tests/cudaemu/runtime.cc): what is written
 * here must build both ways. Dynamic shared memory is declared with FG_DYNAMIC_SHARED, which the
 * emulator defines for itself.
 */
#ifndef FG_KERNELS_CUDA_CUH
#define FG_KERNELS_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "backend.h"
#include "ops_scalar.h"
}

#ifndef FG_DYNAMIC_SHARED
#define FG_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

namespace {

__device__ float block_sum(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    float r = 0.0f;
    if (threadIdx.x == 0) {
        for (int i = 0; i < (int)(blockDim.x + 31) / 32; i++)
            r += sh[i];
        sh[32] = r;
    }
    __syncthreads();
    return sh[32];
}

__device__ float block_max(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = -INFINITY;
        for (int i = 0; i < (int)(blockDim.x + 31) / 32; i++)
            r = fmaxf(r, sh[i]);
        sh[32] = r;
    }
    __syncthreads();
    return sh[32];
}

__global__ void k_layernorm(const float *x, const float *g, const float *b, float *y, uint32_t n,
                            float eps)
{
    __shared__ float sh[33];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i];
    float mean = block_sum(s, sh) / (float)n;
    float v = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        v += (xr[i] - mean) * (xr[i] - mean);
    float inv = 1.0f / sqrtf(block_sum(v, sh) / (float)n + eps);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = (xr[i] - mean) * inv * g[i] + b[i];
}

__global__ void k_rmsnorm(const float *x, const float *g, float *y, uint32_t n, float eps)
{
    __shared__ float sh[33];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i] * xr[i];
    float inv = 1.0f / sqrtf(block_sum(s, sh) / (float)n + eps);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = g[i] * (xr[i] * inv);
}

__global__ void k_rope(float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                       const int32_t *pos, const float *inv_freq, uint32_t half, float scale,
                       float beta, uint32_t orig)
{
    for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < (uint64_t)rows * half;
         j += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t r = (uint32_t)(j / half), i = (uint32_t)(j % half);
        float p = (float)(pos[r] > 0 ? pos[r] : 0);
        fgb_rope_pair(x + (size_t)r * n_heads * head_dim, n_heads, head_dim, i, half, p,
                      inv_freq[i], fgb_rope_row_scale(scale, beta, orig, p));
    }
}

__global__ void k_act(fg_act_fn a, float *x, const float *up, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = up ? fgb_act2(a, x[i], up[i]) : fgb_act1(a.kind, x[i]);
}

__global__ void k_add(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* fg_heads_op (backend.h): one thread an output value (token, head, j), the sum over k in
 * order */
__global__ void k_heads(fg_heads_op o)
{
    size_t total = (size_t)o.n * o.n_heads * o.m;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t j = (uint32_t)(i % o.m), h = (uint32_t)(i / o.m % o.n_heads);
        size_t t = i / o.m / o.n_heads;
        const float *x = o.x + t * o.x_ld + h * o.x_hs;
        float *y = o.y + t * o.y_ld + h * o.y_hs;
        if (!o.w) {
            y[j] = x[j];
            continue;
        }
        const float *w = o.w + h * o.w_hs;
        float acc = 0;
        for (uint32_t q = 0; q < o.k; q++)
            acc += (o.trans ? w[(size_t)q * o.w_ld + j] : w[(size_t)j * o.w_ld + q]) * x[q];
        y[j] = acc;
    }
}

__global__ void k_scale(float *x, float s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* ids[r] = argmax of row r of x [rows, n], one block of ARGMAX_T threads a row: each thread
 * keeps the first strict maximum of its strided, increasing indices among non-NaN values, the
 * tree keeps the greater, the lower index on a tie: fg_sample's sequential scan, whose only
 * other case is a NaN at index 0, which no later value displaces. */
#define ARGMAX_T 256
__global__ void k_argmax(const float *x, uint32_t n, int32_t *ids)
{
    __shared__ float bv[ARGMAX_T];
    __shared__ uint32_t bi[ARGMAX_T];
    const float *v = x + (size_t)blockIdx.x * n;
    float best = 0.0f;
    uint32_t at = UINT32_MAX; /* none yet */
    for (uint32_t i = threadIdx.x; i < n; i += ARGMAX_T)
        if (!isnan(v[i]) && (at == UINT32_MAX || v[i] > best))
            best = v[i], at = i;
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = at;
    __syncthreads();
    for (uint32_t h = ARGMAX_T / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) {
            uint32_t j = threadIdx.x + h, a = bi[threadIdx.x], b = bi[j];
            if (b != UINT32_MAX && (a == UINT32_MAX || bv[j] > bv[threadIdx.x] ||
                                    (bv[j] == bv[threadIdx.x] && b < a))) {
                bv[threadIdx.x] = bv[j];
                bi[threadIdx.x] = b;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = isnan(v[0]) || bi[0] == UINT32_MAX ? 0 : (int32_t)bi[0];
}

/* y[r, first + c] += bias[first + c] for rows < m, c < cols (row stride ld) */
__global__ void k_bias(float *y, const float *bias, uint32_t m, uint64_t cols, uint64_t ld,
                       uint64_t first)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (uint64_t)m * cols;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t r = i / cols, c = i % cols;
        y[r * ld + first + c] += bias[first + c];
    }
}

/* 16-bit <-> f32 */
__global__ void k_to16(const float *x, void *out, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (bf16) {
            ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
        } else { /* saturated as the weights' decode is (fgq_sat16): an outlier past the
                  * binary16 range stays finite instead of turning the logits to NaN */
            float f = x[i];
            f = f > 65504.0f ? 65504.0f : f < -65504.0f ? -65504.0f : f;
            ((__half *)out)[i] = __float2half_rn(f);
        }
    }
}

__global__ void k_from16(const uint16_t *x, float *out, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (bf16)
            out[i] = __uint_as_float((uint32_t)x[i] << 16);
        else
            out[i] = __half2float(__ushort_as_half(x[i]));
    }
}

/* out[i] = table[ids[i] - first] (width floats) for ids in [first, first + rows); with bad
 * non-NULL an id outside [0, total) sets bad[0] and leaves its id in bad[1] (ids that live on
 * the device are checked there: the host never sees them) */
__global__ void k_gather(const float *table, uint64_t first, uint64_t rows, const int32_t *ids,
                         uint32_t n, float *out, uint32_t width, uint64_t total, int32_t *bad)
{
    uint32_t i = blockIdx.x;
    if (i >= n)
        return;
    if (bad && threadIdx.x == 0 && (ids[i] < 0 || (uint64_t)ids[i] >= total)) {
        bad[0] = 1;
        bad[1] = ids[i];
    }
    uint64_t id = (uint64_t)ids[i];
    if (id < first || id >= first + rows)
        return;
    for (uint32_t c = threadIdx.x; c < width; c += blockDim.x)
        out[(size_t)i * width + c] = table[(id - first) * width + c];
}

/* y[idx[i], :] = s[i] * x[i, :] (accumulate 0) or += (accumulate 1), one block per i, threads
 * over the width: the product rounded to f32 by __fmul_rn (never fused with the add, as in
 * ops_ref.c), then added by __fadd_rn. An index outside [0, y_rows) writes nothing; with bad
 * non-NULL the first block to see one sets bad[0] and leaves its index in bad[1] (indices in
 * device memory are checked here, as k_gather's ids: the host never sees them) */
__global__ void k_scatter(float *y, uint32_t y_rows, const float *x, const int32_t *idx,
                          const float *s, uint32_t width, int accumulate, int32_t *bad)
{
    uint32_t i = blockIdx.x;
    int32_t r = idx[i];
    if (r < 0 || (uint32_t)r >= y_rows) {
        if (bad && threadIdx.x == 0 && atomicCAS(&bad[0], 0, 1) == 0)
            bad[1] = r;
        return;
    }
    float si = s[i];
    const float *xr = x + (size_t)i * width;
    float *yr = y + (size_t)r * width;
    for (uint32_t c = threadIdx.x; c < width; c += blockDim.x) {
        float p = __fmul_rn(si, xr[c]);
        yr[c] = accumulate ? __fadd_rn(yr[c], p) : p;
    }
}

struct attn_k {
    const float *q, *k, *v;
    const uint8_t *valid;
    float *out, *scores;     /* scores: [problems, ctx] */
    uint32_t kv_stride, n_q, q_pos0, n_heads, head_dim, grp, window, ctx, j0;
    float keep;
    float softcap;           /* > 0: each score capped to softcap * tanh(s / softcap) */
    const float *sinks;      /* [n_heads] or NULL: exp(sinks[h]) joins head h's denominator */
    uint32_t v_stride, v_dim; /* value rows (v at the first value), values a head */
};

/* A float's bits as an unsigned key in the floats' order (-0 just below +0). */
__device__ uint32_t ord_key(float f)
{
    uint32_t u = __float_as_uint(f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

__device__ float key_float(uint32_t k)
{
    return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

/* The k-th largest of the finite scores sc[0..n) (the largest T with at least k scores >= T),
 * for the whole block: a radix select, the key's bits decided from the top, each by one count
 * over the scores (32 passes of n / blockDim.x: the first version compared every score with
 * every other, O(n^2)). */
__device__ float kth_largest(const float *sc, uint32_t n, uint32_t k, float *sh)
{
    uint32_t key = 0;
    for (int b = 31; b >= 0; b--) {
        uint32_t cand = key | 1u << b;
        float cnt = 0.0f;
        for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
            float s = sc[t];
            cnt += s != -INFINITY && s == s && ord_key(s) >= cand ? 1.0f : 0.0f;
        }
        if (block_sum(cnt, sh) >= (float)k) /* the same sum in every thread */
            key = cand;
    }
    return key_float(key);
}

/* One (query i, head h) problem j = j0 + blockIdx.x (see the file's comment). */
__global__ void k_attention(attn_k a)
{
    __shared__ float sh[33];
    FG_DYNAMIC_SHARED(float, qs);
    uint32_t j = a.j0 + blockIdx.x, i = j / a.n_heads, h = j % a.n_heads, d = a.head_dim;
    uint32_t end = a.q_pos0 + i + 1, t0 = a.window && end > a.window ? end - a.window : 0;
    uint32_t n = end - t0, width = a.n_heads * d, vd = a.v_dim;
    const float *q = a.q + (size_t)i * width + (size_t)h * d;
    const float *kb = a.k + (size_t)t0 * a.kv_stride + (size_t)(h / a.grp) * d;
    const float *vb = a.v + (size_t)t0 * a.v_stride + (size_t)(h / a.grp) * vd;
    float *o = a.out + ((size_t)i * a.n_heads + h) * vd;
    float *sc = a.scores + (size_t)blockIdx.x * a.ctx;
    for (uint32_t c = threadIdx.x; c < d; c += blockDim.x)
        qs[c] = q[c];
    __syncthreads();
    float mx = -INFINITY, nv = 0.0f;
    for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
        float s = -INFINITY;
        if (a.valid[t0 + t]) {
            s = 0.0f;
            for (uint32_t c = 0; c < d; c++)
                s += qs[c] * kb[(size_t)t * a.kv_stride + c];
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
            nv += 1.0f;
        }
        sc[t] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, sh);
    if (mx == -INFINITY) { /* every key masked: a padding query */
        for (uint32_t c = threadIdx.x; c < vd; c += blockDim.x)
            o[c] = 0.0f;
        return;
    }
    if (a.keep > 0.0f && a.keep < 1.0f) {
        uint32_t valid_n = (uint32_t)block_sum(nv, sh);
        uint32_t k = (uint32_t)ceilf(a.keep * (float)valid_n);
        k = k ? k : 1;
        if (k < valid_n) {
            float thr = kth_largest(sc, n, k, sh);
            for (uint32_t t = threadIdx.x; t < n; t += blockDim.x)
                if (sc[t] < thr)
                    sc[t] = -INFINITY;
            __syncthreads();
        }
    }
    float sink = a.sinks ? a.sinks[h] : -INFINITY, sum = 0.0f;
    mx = sink > mx ? sink : mx; /* the max of the scores and the sink (kernels_cpu.c) */
    for (uint32_t t = threadIdx.x; t < n; t += blockDim.x) {
        float p = sc[t] != -INFINITY ? expf(sc[t] - mx) : 0.0f;
        sc[t] = p;
        sum += p;
    }
    sum = block_sum(sum, sh); /* block_sum's barrier publishes sc */
    if (a.sinks) /* the sink's share of the denominator; its weight is dropped */
        sum += expf(sink - mx);
    float inv = 1.0f / sum;
    /* the weighted sum of V: with vd <= blockDim, g = blockDim / vd groups of vd threads each
     * sum every g-th key (a decode's one query a sequence leaves few blocks: its keys are what
     * is left to split), then the first group adds the groups' sums in group order */
    uint32_t g = vd <= blockDim.x ? blockDim.x / vd : 1, grp = threadIdx.x / vd;
    float *part = qs + d; /* [g][vd] beside q (g vd <= blockDim floats) */
    if (g > 1) {
        uint32_t c = threadIdx.x % vd;
        float acc = 0.0f;
        if (grp < g)
            for (uint32_t t = grp; t < n; t += g)
                if (sc[t] != 0.0f)
                    acc += sc[t] * inv * vb[(size_t)t * a.v_stride + c];
        if (grp < g)
            part[grp * vd + c] = acc;
        __syncthreads();
        if (grp == 0) {
            float tot = part[c];
            for (uint32_t k = 1; k < g; k++)
                tot += part[k * vd + c];
            o[c] = tot;
        }
        return;
    }
    for (uint32_t c = threadIdx.x; c < vd; c += blockDim.x) {
        float acc = 0.0f;
        for (uint32_t t = 0; t < n; t++)
            if (sc[t] != 0.0f)
                acc += sc[t] * inv * vb[(size_t)t * a.v_stride + c];
        o[c] = acc;
    }
}


/* ---- decode attention split over the keys (flash-decoding) ----
 * For n_q <= 4 queries and dense keys (keep 0 or 1). Block (x = KV head g and group of up to
 * ADEC_HG of its query heads, y = split s, z = query i) reads the cache rows of its split,
 * [lo + s * split, lo + (s + 1) * split) cut to the query's causal range and window, directly in
 * the cache's codec, and keeps everything it decodes in registers: thread j owns the 8 columns
 * cc = j % cpr (cpr = head_dim / 8 chunks a row; blockDim = kpp * cpr) of the rows j / cpr,
 * j / cpr + kpp, ... of a tile of tk rows, its query heads' q on those columns and their weighted
 * V sums. A tile: the K chunks' dot products with q into shared memory, their sums per (head,
 * key) (soft-capped, masked keys -inf), the online softmax step (running max, rescale, sum of
 * exp) per head, then each V chunk times its weight into the thread's sums. Each KV row is read
 * once for all the block's query heads, the next tile's K loads are issued once this tile's
 * scores are taken and its V loads once its V is summed (in flight during the next step's
 * work), and decoded values never go through shared memory (f32 there would cost 8 times the
 * bytes of 4-bit codes). Values of v_dim <= head_dim dims a head (MLA's absorbed decode: the
 * latent part of its cache rows) go to the threads whose 8 columns cc fall in [0, v_dim / 8),
 * each reading value row t's chunk cc of KV head g, columns g * v_dim + 8 cc from the values'
 * start; the others read keys only. The threads' sums meet in shared memory at the end, in
 * key-lane order, as a partial [m, l, acc[v_dim]] per (query, head, split) in part.
 * k_attn_combine adds the splits:
 * M = max(m_s, sink), out = sum acc_s e^(m_s - M) / (sum l_s e^(m_s - M) + e^(sink - M)); a
 * query with no valid key (every m_s = -inf) gets zeros. */
#define ADEC_HG 4 /* query heads a block at most (their q and V sums live in registers; a
                   * kernel for multi-head attention keeps one) */
#define ADEC_CH 4 /* a thread's rows a tile */
#ifdef __CUDA_ARCH__
#define ADEC_UNROLL _Pragma("unroll")
#else
#define ADEC_UNROLL /* the emulator's host build */
#endif

struct attn_dec_k {
    const float *q;            /* [n_q, n_heads * head_dim] */
    const uint8_t *k, *v;      /* key rows from 0, row_bytes apart; v at the first value of
                                * value row 0 (v_at bytes in), v_row_bytes apart */
    const uint8_t *valid;      /* [ctx] */
    float *part;               /* [n_q][n_heads][n_split][v_dim + 2] */
    size_t row_bytes, v_row_bytes, v_at;
    uint32_t G, gbytes, hdr, f16scale, hi_first; /* Q4/Q8: groups of G along the row */
    uint32_t n_heads, grp, hpb, head_dim, cpr, kpp, q_pos0, window, lo, split, n_split, tk;
    uint32_t v_dim, cprv;      /* values a head (<= head_dim), their 8-value chunks */
    float softcap;
};

/* 8 values of a row from column c (c % 8 == 0: one group holds them all), as loaded: F32 the
 * values' bits; Q4/Q8 x = min and scale (F16 scales) or min (F32), y = F32 scale, z (and w for
 * Q8) the codes. */
struct raw8 {
    uint4 a, b;
};

template <int BITS> __device__ raw8 load8(const attn_dec_k &a, const uint8_t *row, uint32_t c)
{
    raw8 r;
    if (BITS == 0) { /* 16-byte aligned (the host checks) */
        const uint4 *p = (const uint4 *)(row + (size_t)c * 4);
        r.a = p[0];
        r.b = p[1];
        return r;
    }
    const uint8_t *g = row + (size_t)(c / a.G) * a.gbytes;
    const uint32_t *h = (const uint32_t *)g;
    const uint32_t *w = (const uint32_t *)(g + a.hdr + c % a.G * BITS / 8);
    r.a.x = h[0];
    r.a.y = a.f16scale ? 0u : h[1];
    r.a.z = w[0];
    r.a.w = BITS == 8 ? w[1] : 0u;
    r.b = r.a;
    return r;
}

/* load8's values, each m + code * s rounded as the codec's decode rounds it. */
template <int BITS> __device__ void dec8(const attn_dec_k &a, const raw8 &r, float *y)
{
    if (BITS == 0) {
        y[0] = __uint_as_float(r.a.x), y[1] = __uint_as_float(r.a.y);
        y[2] = __uint_as_float(r.a.z), y[3] = __uint_as_float(r.a.w);
        y[4] = __uint_as_float(r.b.x), y[5] = __uint_as_float(r.b.y);
        y[6] = __uint_as_float(r.b.z), y[7] = __uint_as_float(r.b.w);
        return;
    }
    float m, s;
    if (a.f16scale) {
        m = __half2float(__ushort_as_half((unsigned short)(r.a.x & 0xffffu)));
        s = __half2float(__ushort_as_half((unsigned short)(r.a.x >> 16)));
    } else {
        m = __uint_as_float(r.a.x);
        s = __uint_as_float(r.a.y);
    }
    ADEC_UNROLL
    for (int j = 0; j < 8; j++) {
        uint32_t code;
        if (BITS == 4) {
            uint32_t b = r.a.z >> (8 * (j / 2)) & 0xffu;
            code = ((uint32_t)j & 1u) ^ a.hi_first ? b >> 4 : b & 0xfu;
        } else {
            code = (j < 4 ? r.a.z >> (8 * j) : r.a.w >> (8 * (j - 4))) & 0xffu;
        }
        y[j] = __fadd_rn(m, __fmul_rn((float)code, s));
    }
}

/* This thread's chunks (rows t0 + u * kpp + key lane, u < ADEC_CH, below nt) of K or V (rows
 * `stride` bytes apart). */
template <int BITS> __device__ void load_rows(const attn_dec_k &a, const uint8_t *base,
                                              size_t stride, uint32_t t0, uint32_t nt,
                                              uint32_t col, raw8 *r)
{
    uint32_t kl = threadIdx.x / a.cpr;
    ADEC_UNROLL
    for (int u = 0; u < ADEC_CH; u++) {
        uint32_t t = u * a.kpp + kl;
        if (t < nt)
            r[u] = load8<BITS>(a, base + (size_t)(t0 + t) * stride, col);
    }
}

/* Shared memory (floats) of a block: the dot products [hpb][tk][cpr + 1] (or at the end the
 * threads' V sums [kpp][hpb][vd]), then sc [hpb][tk], mrun, lrun, corr [hpb]. */
__host__ __device__ inline uint32_t adec_dots(uint32_t hpb, uint32_t tk, uint32_t cpr,
                                              uint32_t kpp, uint32_t vd)
{
    uint32_t dots = hpb * tk * (cpr + 1), sums = kpp * hpb * vd;
    return dots > sums ? dots : sums;
}

/* Scores of the tile's nt rows from t0 into sc (the dot products' partial sums in order, then
 * the soft-cap; masked keys -inf), then the softmax step: new running max, the old sums'
 * factor in corr, sc the weights e^(s - max), the running sum of exp. */
__device__ void adec_scores(const attn_dec_k &a, uint32_t t0, uint32_t nt, uint32_t nh,
                            const float *dots, float *sc, float *mrun, float *lrun, float *corr)
{
    uint32_t tk = a.tk, cpr = a.cpr;
    for (uint32_t j = threadIdx.x; j < nh * nt; j += blockDim.x) {
        uint32_t h = j / nt, t = j % nt;
        float s = -INFINITY;
        if (a.valid[t0 + t]) {
            const float *p = dots + (h * tk + t) * (cpr + 1);
            s = 0.0f;
            for (uint32_t c = 0; c < cpr; c++)
                s += p[c];
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
        }
        sc[h * tk + t] = s;
    }
    __syncthreads();
    for (uint32_t h = threadIdx.x; h < nh; h += blockDim.x) {
        float mx = -INFINITY, mo = mrun[h];
        for (uint32_t t = 0; t < nt; t++)
            mx = fmaxf(mx, sc[h * tk + t]);
        float mn = fmaxf(mo, mx);
        corr[h] = mn == -INFINITY ? 1.0f : expf(mo - mn);
        mrun[h] = mn;
    }
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < nh * nt; j += blockDim.x) {
        uint32_t h = j / nt, t = j % nt;
        float s = sc[h * tk + t];
        sc[h * tk + t] = s != -INFINITY ? expf(s - mrun[h]) : 0.0f;
    }
    __syncthreads();
    for (uint32_t h = threadIdx.x; h < nh; h += blockDim.x) {
        float l = lrun[h] * corr[h];
        for (uint32_t t = 0; t < nt; t++)
            l += sc[h * tk + t];
        lrun[h] = l;
    }
}

template <int BITS, int HG> __device__ void attn_split(const attn_dec_k &a)
{
    FG_DYNAMIC_SHARED(float, sh);
    uint32_t d = a.head_dim, hpb = a.hpb, groups = (a.grp + hpb - 1) / hpb, tk = a.tk;
    uint32_t g = blockIdx.x / groups, h0 = g * a.grp + blockIdx.x % groups * hpb;
    uint32_t nh = a.grp - blockIdx.x % groups * hpb, s = blockIdx.y, i = blockIdx.z;
    nh = nh < hpb ? nh : hpb;
    uint32_t cc = threadIdx.x % a.cpr, kl = threadIdx.x / a.cpr, col = g * d + cc * 8;
    uint32_t vd = a.v_dim, colv = g * vd + cc * 8;
    bool hasv = cc < a.cprv; /* this thread's columns hold values too */
    float *dots = sh, *sc = dots + adec_dots(hpb, tk, a.cpr, a.kpp, vd), *mrun = sc + hpb * tk;
    float *lrun = mrun + hpb, *corr = lrun + hpb;
    float qr[HG][8], acc[HG][8];
    const float *q = a.q + ((size_t)i * a.n_heads + h0) * d + cc * 8;
    ADEC_UNROLL
    for (uint32_t h = 0; h < HG; h++)
        for (int e = 0; e < 8; e++)
            qr[h][e] = h < nh ? q[h * d + e] : 0.0f, acc[h][e] = 0.0f;
    for (uint32_t h = threadIdx.x; h < nh; h += blockDim.x)
        mrun[h] = -INFINITY, lrun[h] = 0.0f;
    /* this query's keys [t0, end) within the split's [b0, b1) */
    uint32_t end = a.q_pos0 + i + 1, t0 = a.window && end > a.window ? end - a.window : 0;
    uint32_t b0 = a.lo + s * a.split, b1 = b0 + a.split;
    b0 = b0 > t0 ? b0 : t0;
    b1 = b1 < end ? b1 : end;
    raw8 rk[ADEC_CH], rv[ADEC_CH];
    if (b0 < b1) {
        load_rows<BITS>(a, a.k, a.row_bytes, b0, b1 - b0 < tk ? b1 - b0 : tk, col, rk);
        if (hasv)
            load_rows<BITS>(a, a.v, a.v_row_bytes, b0, b1 - b0 < tk ? b1 - b0 : tk, colv, rv);
    }
    __syncthreads();
    for (uint32_t t = b0; t < b1; t += tk) {
        uint32_t nt = b1 - t < tk ? b1 - t : tk, next = t + nt;
        uint32_t nn = b1 - next < tk ? b1 - next : tk;
        ADEC_UNROLL
        for (int u = 0; u < ADEC_CH; u++) { /* the K chunks' dot products with q */
            uint32_t r = u * a.kpp + kl;
            if (r >= nt)
                continue;
            float y[8];
            dec8<BITS>(a, rk[u], y);
            ADEC_UNROLL
            for (uint32_t h = 0; h < HG; h++) {
                if (h >= nh)
                    continue;
                float p = 0.0f;
                for (int e = 0; e < 8; e++)
                    p += qr[h][e] * y[e];
                /* stride cpr + 1: the sums' reads (a key a thread) fall in distinct banks */
                dots[(h * tk + r) * (a.cpr + 1) + cc] = p;
            }
        }
        __syncthreads();
        if (next < b1)
            load_rows<BITS>(a, a.k, a.row_bytes, next, nn, col, rk);
        adec_scores(a, t, nt, nh, dots, sc, mrun, lrun, corr);
        ADEC_UNROLL
        for (uint32_t h = 0; h < HG; h++)
            for (int e = 0; e < 8; e++)
                acc[h][e] *= h < nh ? corr[h] : 1.0f;
        ADEC_UNROLL
        for (int u = 0; u < ADEC_CH; u++) { /* the V chunks times their weights */
            uint32_t r = u * a.kpp + kl;
            if (r >= nt || !hasv)
                continue;
            float y[8];
            dec8<BITS>(a, rv[u], y);
            ADEC_UNROLL
            for (uint32_t h = 0; h < HG; h++) {
                float p = h < nh ? sc[h * tk + r] : 0.0f;
                if (p != 0.0f) /* a masked row's V is never used (it may be anything) */
                    for (int e = 0; e < 8; e++)
                        acc[h][e] += p * y[e];
            }
        }
        if (next < b1 && hasv)
            load_rows<BITS>(a, a.v, a.v_row_bytes, next, nn, colv, rv);
        /* sc and corr are rewritten after the next tile's first barrier */
    }
    ADEC_UNROLL
    for (uint32_t h = 0; h < HG; h++) /* dots' last readers passed a barrier since */
        for (int e = 0; e < 8 && h < nh && hasv; e++)
            dots[(kl * hpb + h) * vd + cc * 8 + e] = acc[h][e];
    __syncthreads();
    size_t stride = (size_t)vd + 2;
    for (uint32_t j = threadIdx.x; j < nh * stride; j += blockDim.x) {
        uint32_t h = (uint32_t)(j / stride), c = (uint32_t)(j % stride);
        float *p = a.part + (((size_t)i * a.n_heads + h0 + h) * a.n_split + s) * stride, v = 0;
        if (c < 2)
            v = c == 0 ? mrun[h] : lrun[h];
        for (uint32_t k = 0; c >= 2 && k < a.kpp; k++)
            v += dots[(k * hpb + h) * vd + c - 2];
        p[c] = v;
    }
}

/* Registers: the _h1 kernels (one query head a KV head) fit 4 blocks on an SM (the 512 blocks
 * of a step at 1 sequence x 32 KV heads x 2048 positions in one wave on 132 SMs), the others 3
 * without spilling (Llama-3-8B's 8 KV heads x 32 splits in one wave). */
#ifdef __CUDACC__
#define ADEC_BOUNDS(blocks) __launch_bounds__(128, blocks)
#else
#define ADEC_BOUNDS(blocks) /* the emulator's host build */
#endif
#define ADEC_KERNEL(name, bits, hg, blocks) \
    __global__ void ADEC_BOUNDS(blocks) name(attn_dec_k a) { attn_split<bits, hg>(a); }
ADEC_KERNEL(k_attn_split_f32, 0, ADEC_HG, 3)
ADEC_KERNEL(k_attn_split_q4, 4, ADEC_HG, 3)
ADEC_KERNEL(k_attn_split_q8, 8, ADEC_HG, 3)
ADEC_KERNEL(k_attn_split_f32_h1, 0, 1, 4)
ADEC_KERNEL(k_attn_split_q4_h1, 4, 1, 4)
ADEC_KERNEL(k_attn_split_q8_h1, 8, 1, 4)

/* The splits of (query blockIdx.y, head blockIdx.x) into out [n_q, n_heads * v_dim] (see
 * above); shared: the splits' weights e^(m_s - M). */
__global__ void k_attn_combine(const float *part, const float *sinks, float *out,
                               uint32_t n_heads, uint32_t v_dim, uint32_t n_split)
{
    FG_DYNAMIC_SHARED(float, w);
    uint32_t h = blockIdx.x, i = blockIdx.y, d = v_dim;
    size_t stride = (size_t)d + 2;
    const float *p = part + ((size_t)i * n_heads + h) * n_split * stride;
    float *o = out + ((size_t)i * n_heads + h) * d;
    float mx = -INFINITY;
    for (uint32_t s = 0; s < n_split; s++)
        mx = fmaxf(mx, p[s * stride]);
    if (mx == -INFINITY) { /* every key masked: a padding query */
        for (uint32_t c = threadIdx.x; c < d; c += blockDim.x)
            o[c] = 0.0f;
        return;
    }
    float sink = sinks ? sinks[h] : -INFINITY;
    mx = sink > mx ? sink : mx;
    for (uint32_t s = threadIdx.x; s < n_split; s += blockDim.x) {
        float m = p[s * stride];
        w[s] = m != -INFINITY ? expf(m - mx) : 0.0f;
    }
    __syncthreads();
    float l = 0.0f;
    for (uint32_t s = 0; s < n_split; s++)
        l += w[s] != 0.0f ? p[s * stride + 1] * w[s] : 0.0f;
    l += expf(sink - mx); /* the sink's share of the denominator (0 with none) */
    float inv = 1.0f / l;
    for (uint32_t c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (uint32_t s = 0; s < n_split; s++)
            if (w[s] != 0.0f)
                acc += p[s * stride + 2 + c] * w[s];
        o[c] = acc * inv;
    }
}

} // namespace

#endif
