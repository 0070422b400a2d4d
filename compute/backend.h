/* backend.h - the compute backend interface (ggml-backend style): a table of the few kernels a
 * transformer layer needs, so the model code and the schedule never name a device.
 *
 * A backend is { iface, ctx }. The CPU backend (OpenBLAS sgemm + C kernels with AVX2/AVX-512
 * paths, each with a scalar reference) is always present; a CUDA backend fills the same table
 * when built with CUDA (FG_ERR_UNSUPPORTED otherwise). All tensors are f32, row-major, in
 * memory the backend can address (host memory for the CPU backend). Calls are synchronous on
 * the CPU backend; a device backend may queue them and `sync` waits.
 * Thread-safety: one backend instance is used by one thread at a time.
 */
#ifndef FG_BACKEND_H
#define FG_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_backend fg_backend;

/* One attention problem: queries of n_q consecutive positions of one sequence against its
 * cached keys/values, for all heads. Positions are indices into the cache (0 = oldest). */
typedef struct fg_attn_args {
    const float *q;        /* [n_q, n_heads * head_dim], already including the 1/sqrt(d) scale */
    const float *k, *v;    /* [n_ctx, kv_stride] cache rows; head h at column h * head_dim */
    size_t kv_stride;      /* floats between consecutive cache rows */
    const uint8_t *valid;  /* [n_ctx]: 0 = masked key (left padding), 1 = attend */
    uint32_t n_q, q_pos0;  /* query i sits at cache position q_pos0 + i (causal limit) */
    uint32_t n_heads, head_dim;
    float *out;            /* [n_q, n_heads * head_dim] */
    float *scratch;        /* scratch_parts regions of scratch_stride >= 2 * (q_pos0 + n_q)
                              floats (one region when scratch_parts is 0) */
    float keep;            /* top-k sparse attention: attend to the ceil(keep * n) highest-scoring
                              valid keys (FlexGen's --attn-sparsity); 0 or >= 1 = dense */
    size_t scratch_stride;
    uint32_t scratch_parts;  /* problems a backend may run at once, one scratch region each */
} fg_attn_args;

/* A Linear layer's weight W [n, k] (HF layout: row r produces output r): f32 rows in memory, or
 * rows that come piece by piece from their owner (the engine decodes one stored chunk at a time
 * into a reused f32 buffer that stays in the cache, and the model multiplies it at once: the
 * weight never exists whole in f32, so each stored byte is read from RAM once per use). */
typedef struct fg_weight {
    const float *f32;      /* all n rows, or NULL: pieces */
    /* piece i (0 <= i < n_pieces): rows [*first, *first + *n) as f32 in *rows, valid until the
     * next call; pieces are disjoint and cover [0, n) */
    int (*piece)(void *ctx, uint32_t i, const float **rows, uint64_t *first, uint64_t *n,
                 fg_err *err);
    void *ctx;
    uint32_t n_pieces;
} fg_weight;

typedef struct fg_backend_iface {
    const char *name;
    /* C[m, n] = A[m, k] . B[n, k]^T (+ bias[n] when non-NULL): a Linear layer, W in HF layout */
    int (*linear)(fg_backend *be, const float *a, const float *w, const float *bias, float *c,
                  uint32_t m, uint32_t n, uint32_t k);
    /* y = (x - mean) / sqrt(var + eps) * g + b over rows of length n (in place allowed) */
    int (*layernorm)(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                     uint32_t rows, uint32_t n, float eps);
    int (*relu)(fg_backend *be, float *x, size_t n);
    /* y += x */
    int (*add)(fg_backend *be, float *y, const float *x, size_t n);
    int (*attention)(fg_backend *be, const fg_attn_args *a);
    int (*sync)(fg_backend *be);
    void (*free)(fg_backend *be);
} fg_backend_iface;

struct fg_backend {
    const fg_backend_iface *iface;
    void *ctx;
};

/* The CPU backend computing on `threads` cores (0 = every online CPU): OpenBLAS is switched to
 * one thread (process-wide) and each Linear is split across the backend's helper threads.
 * Owned by the caller until fg_backend_free. */
int fg_backend_cpu_create(int threads, fg_backend **out, fg_err *err);
void fg_backend_free(fg_backend *be); /* NULL accepted */

/* ---- CPU kernels, exported for tests: each SIMD path has a scalar _ref twin ---- */
void fg_cpu_layernorm_ref(const float *x, const float *g, const float *b, float *y, uint32_t n,
                          float eps);
void fg_cpu_layernorm(const float *x, const float *g, const float *b, float *y, uint32_t n,
                      float eps);
void fg_cpu_attention_ref(const fg_attn_args *a);
void fg_cpu_attention(const fg_attn_args *a);
/* The (query, head) problems j = part (mod n_parts), in scratch region `part` (the backend runs
 * the parts on its threads; any split gives the same bits as fg_cpu_attention). */
void fg_cpu_attention_part(const fg_attn_args *a, uint32_t part, uint32_t n_parts);
float fg_cpu_dot_ref(const float *a, const float *b, uint32_t n);
float fg_cpu_dot(const float *a, const float *b, uint32_t n);
/* Which SIMD path the dispatching kernels use: "avx512", "avx2" or "ref". FG_COMPUTE_ISA in the
 * environment (ref|avx2|avx512) forces a path no better than the CPU has. */
const char *fg_cpu_isa(void);

#ifdef __cplusplus
}
#endif
#endif
