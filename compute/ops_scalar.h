/* ops_scalar.h - scalar pieces of the ops that the CPU reference (ops_common.c) and the CUDA
 * kernels (kernels_cuda.cuh) share, so the two compute one formula: an activation of one
 * value, RoPE's rotation of one frequency of one row. FG_HD marks them host and device under
 * nvcc (as quant_int.h's FGQ_HD does); the emulated runtime (tests/cudaemu) compiles them for
 * the host like any C. */
#ifndef FG_OPS_SCALAR_H
#define FG_OPS_SCALAR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __CUDACC__
#define FG_HD __host__ __device__
#else
#define FG_HD
#endif

/* fg_act a applied to x (SiLU for an unknown one, and for FG_ACT_SWIGLU_OAI, which is gated
 * only: fgb_act2) */
FG_HD static inline float fgb_act1(int a, float x)
{
    switch (a) {
    case FG_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case FG_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case FG_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case FG_ACT_TANH: return tanhf(x);
    default: return x / (1.0f + expf(-x));
    }
}

/* The gated form, act(x) * up. gpt-oss's clamped SwiGLU in transformers' steps, all f32: the
 * gate clamped from above only, up on both sides (comparisons, not fminf/fmaxf, so that a NaN
 * passes through as torch.clamp lets it), glu = g * sigmoid(alpha g), then (u + 1) * glu. */
FG_HD static inline float fgb_act2(fg_act_fn a, float x, float up)
{
    if (a.kind != FG_ACT_SWIGLU_OAI)
        return fgb_act1(a.kind, x) * up;
    float g = x > a.limit ? a.limit : x;
    float u = up < -a.limit ? -a.limit : up > a.limit ? a.limit : up;
    float glu = g * (1.0f / (1.0f + expf(-(g * a.alpha))));
    return (u + 1.0f) * glu;
}

/* Frequency i of every head of one row (n_heads x head_dim floats) rotated by the angle
 * pos * inv_freq_i, cos and sin in binary64: the pair (i, i + half) of the rotate-half
 * layout. */
/* The factor a row at position pos comes out of the rotation times: scale, and with beta > 0
 * Llama 4's position scaling of q, 1 + beta ln(1 + floor(pos / orig)) (Ministral 3) */
FG_HD static inline float fgb_rope_row_scale(float scale, float beta, uint32_t orig, float pos)
{
    return beta > 0 && orig ? scale * (1.0f + beta * logf(1.0f + floorf(pos / (float)orig)))
                            : scale;
}

FG_HD static inline void fgb_rope_pair(float *row, uint32_t n_heads, uint32_t head_dim,
                                       uint32_t i, uint32_t half, float pos, float inv_freq_i,
                                       float scale)
{
    float ang = pos * inv_freq_i;
    float c = (float)cos((double)ang) * scale, s = (float)sin((double)ang) * scale;
    for (uint32_t h = 0; h < n_heads; h++) {
        float *p = row + (size_t)h * head_dim;
        float a = p[i], b = p[i + half];
        p[i] = a * c - b * s;
        p[i + half] = b * c + a * s;
    }
}

#endif
