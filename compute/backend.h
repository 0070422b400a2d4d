/* backend.h - the compute backend: a device object that owns memory and runs the ops a decoder
 * layer needs (ggml-backend style), so model code and schedules never name a device.
 *
 * A backend is { iface, ctx, dev }. It has
 *  - memory: its device object (core/fg_device.h: buffer types host, pinned host, device;
 *    alloc/free; copies, asynchronous with events where the device has streams), the same
 *    object the pager's DEVICE tier uses;
 *  - ops on f32 activations: linear on typed weights (F32/F16/BF16/Q4/Q8, whole or piece by
 *    piece), row gather from a typed table, LayerNorm, RMSNorm, RoPE, activations (relu, gelu,
 *    gelu-tanh, silu-gated, tanh, gpt-oss's clamped SwiGLU), add, scale, argmax of rows (greedy
 *    sampling), scatter of rows (a mixture of experts' outputs), KV encode, attention (causal,
 *    grouped-query, sliding window, top-k sparse, soft-capped, with sinks, values of a width
 *    and place of their own, over an f32 or 4/8-bit cache).
 * The CPU backend (OpenBLAS sgemm + SIMD kernels, each with a scalar reference, one helper-thread
 * pool) is always present. Its ops are synchronous and its device is the host device (no
 * pinned or device memory). A device backend fills the same table; every op has a scalar reference
 * (compute/ops_ref.c) that the cross-backend test (tests/test_ops.c) compares each backend with.
 *
 * Typed weights: a Linear weight W [n, k] (Hugging Face layout: row r produces output r) is f32
 * rows in memory, or pieces that come one at a time from their owner (the engine hands out the
 * store's chunks through the pager): the backend acquires piece i (encoded rows [first, first +
 * n) in the chunk's codec), decodes it into its own cache-resident f32 buffer (sized by
 * `reserve`), multiplies at once, and releases it. The f32 weights never exist whole, so each
 * stored byte is read from RAM once per use.
 *
 * Thread-safety: one backend instance is used by one thread at a time (it runs its own helper
 * threads inside an op). Errors: every op returns FG_OK or a negative fg_status, with err set to
 * one line naming the op and the shape.
 */
#ifndef FG_BACKEND_H
#define FG_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "fg_device.h"
#include "fg_error.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_backend fg_backend;

/* One piece of a typed weight: encoded rows [first, first + n) of a tensor of dims (the
 * chunk's bytes in `codec`; Q4/Q8 views come from fg_codec_qview(codec, n_dims, dims, n)). */
typedef struct fg_wpiece {
    const void *data;
    size_t len;
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[2];
    uint64_t first, n;
    void *token;          /* the owner's, for release */
} fg_wpiece;

/* A typed weight [n, k]: whole f32 rows, or n_pieces pieces, piece i holding rows
 * [piece_rows[i], piece_rows[i + 1]) (disjoint, covering [0, n)), acquired in increasing order,
 * each released once. A piece in host memory is released before the next is acquired; pieces
 * in device memory may be held several at once (the CUDA backend multiplies a run of them
 * together), so each acquire fills a piece (token included) of its own. acquire(i) may start
 * reading later pieces; prefetch(i) (optional) asks for piece i ahead of its acquire (the
 * gather asks for every piece it needs first). */
typedef struct fg_weight {
    const float *f32;
    uint32_t n_pieces;
    const uint64_t *piece_rows;   /* [n_pieces + 1] */
    int (*acquire)(void *ctx, uint32_t i, fg_wpiece *p, fg_err *err);
    int (*release)(void *ctx, fg_wpiece *p, fg_err *err);
    void (*prefetch)(void *ctx, uint32_t i);
    void *ctx;
} fg_weight;

/* One sequence's KV cache: rows [0, cap) of `width` values (n_kv_heads * head_dim), in f32
 * (row_bytes = 4 * width) or quantized along the row in codec (Q4/Q8, groups along the head
 * dimension: FlexGen's choice). */
typedef struct fg_kv_view {
    void *k, *v;
    fg_codec codec;       /* id FG_CODEC_F32, FG_CODEC_Q4 or FG_CODEC_Q8 */
    size_t row_bytes;
    uint32_t width, cap;
} fg_kv_view;

/* Bytes of one KV row of `width` values in codec (F32, or Q4/Q8 along the row); 0 when the
 * codec cannot hold such a row. */
size_t fg_kv_row_bytes(const fg_codec *c, uint32_t width);

/* Attention of n_q consecutive queries of one sequence against its cache, all heads. Query i
 * sits at cache position q_pos0 + i and attends the keys t <= q_pos0 + i with valid[t] set and,
 * when window > 0, t > q_pos0 + i - window. Query head h reads KV head h / (n_heads /
 * n_kv_heads). Positions are cache rows (left padding included).
 * Values of another width than the keys (multi-head latent attention): v_dim values a head,
 * which need not be head_dim, in value rows of vw = v_off + n_kv_heads * v_dim values at kv.v,
 * KV head g's at v_off + g * v_dim (v_dim 0: head_dim; with v_off 0 too, vw = kv.width and
 * the value rows are the key rows' shape, as before). A value row takes 4 vw bytes in f32, or
 * fg_kv_row_bytes(codec, vw) quantized (the key rows' bytes when vw = kv.width: MLA's absorbed
 * decode attends the latent c, dims [pe, pe + r) of its cache rows [rope(k_pe) | c], with kv.v
 * = kv.k and v_off = pe). A quantized cache takes v_off only at a group boundary along the
 * row (v_off a multiple of codec.group_size, groups along the row): the values are then a
 * quantized row of their own from byte v_off / group_size x group_bytes, whose groups are the
 * row's, which is how the CUDA split kernels address them in the codec (an offset inside a
 * group would put the rope dims and the first values under one scale, a group the values'
 * reader does not start at); other offsets are refused (FG_ERR_INVALID_ARG). */
typedef struct fg_attn_op {
    const float *q;         /* [n_q, n_heads * head_dim], already scaled */
    fg_kv_view kv;          /* rows [0, q_pos0 + n_q) are read */
    const uint8_t *valid;   /* [kv.cap]: 1 = a real token */
    uint32_t n_q, q_pos0, n_heads, n_kv_heads, head_dim, window;
    float keep;             /* top-k sparse: the ceil(keep * n) best-scoring keys; 0 or 1 dense */
    float *out;             /* [n_q, n_heads * v_dim] (v_dim 0: head_dim) */
    float *scratch;         /* scratch_parts regions of scratch_stride >= 2 * (q_pos0 + n_q) */
    size_t scratch_stride;
    uint32_t scratch_parts;
    float *k_tmp, *v_tmp;   /* quantized cache: [q_pos0 + n_q, width] decode room for the
                             * keys, [q_pos0 + n_q, vw] for the values (v_tmp unused when
                             * kv.v = kv.k and vw = width: one decode serves both) */
    float softcap;          /* > 0: each score s (q already scaled) becomes softcap *
                             * tanh(s / softcap) before the softmax (Gemma 2); 0: none */
    const float *sinks;     /* [n_heads] or NULL: each head's softmax also counts exp(sinks[h])
                             * in its denominator, a key with no value (gpt-oss); memory of the
                             * backend like q. With m = max(s_t, sinks[h]) the weights are
                             * exp(s_t - m) / (sum_t exp(s_t - m) + exp(sinks[h] - m)), after
                             * the soft-cap and the top-k, so they sum to less than 1; a query
                             * whose keys are all masked still gets zeros */
    uint32_t v_dim;         /* values a head (0: head_dim; see above) */
    uint32_t v_off;         /* where a value row's values start (values, not bytes) */
} fg_attn_op;

/* RoPE in transformers' rotate-half layout: for each head, dims i and i + d/2 (i < d/2, d =
 * rot_dim, the dims past it pass unrotated) rotate by position * inv_freq[i], inv_freq[i] =
 * theta^(-2i/d), rescaled by `scaling`. YaRN and LongRoPE also scale the rotated dims of q and
 * k by attn_factor (transformers multiplies cos and sin by it, so the dims past rot_dim are not
 * scaled); the model instead rotates q with rot_scale = attn_factor^2 (the scores are what it
 * changes) and k with none, so the cached keys are the unscaled rotation. */
typedef enum fg_rope_scaling {
    FG_ROPE_NONE = 0, FG_ROPE_LINEAR, FG_ROPE_LLAMA3, FG_ROPE_YARN,
    FG_ROPE_DYNAMIC, /* dynamic NTK: the default frequencies up to max_position_embeddings, the
                      * only lengths it is run for (the engine refuses a longer context) */
    FG_ROPE_LONGROPE /* Phi-3's: each frequency divided by its own factor, short_factor's or
                      * (use_long) long_factor's, and q, k scaled by attn_factor */
} fg_rope_scaling;
#define FG_ROPE_MAX_EXT 128 /* longrope: factors of at most 128 frequencies (rot_dim 256) */
typedef struct fg_rope {
    float theta;
    fg_rope_scaling scaling;
    float factor;               /* linear: positions / factor; llama3: long wavelengths / factor;
                                 * yarn: interpolated frequencies / factor; dynamic: unused */
    float low_freq_factor, high_freq_factor; /* llama3 */
    uint32_t orig_max_pos;      /* llama3, yarn: original_max_position_embeddings */
    uint32_t rot_dim;           /* dims rotated per head (= head_dim unless partial) */
    float beta_fast, beta_slow; /* yarn: the ramp's bounds in rotations (32 and 1 by default) */
    int truncate;               /* yarn: the ramp's bounds rounded outwards to whole dims */
    float attn_factor;          /* yarn, longrope: q and k scale after the rotation */
    int use_long;               /* longrope: long_factor (the engine sets it for a context past
                                 * orig_max_pos), else short_factor */
    float short_factor[FG_ROPE_MAX_EXT], long_factor[FG_ROPE_MAX_EXT]; /* longrope: [rot_dim/2] */
    float rot_scale;            /* the rotated dims come out times this (0: 1); the dims past
                                 * rot_dim are left as they are */
    float pos_beta;             /* > 0: a row at position p also times 1 + pos_beta ln(1 +
                                 * floor(p / orig_max_pos)) (Llama 4's scaling of q, which
                                 * Ministral 3 uses; the model sets it for q only) */
} fg_rope;
/* inv_freq[0 .. rot_dim/2) as transformers computes it (f32). */
void fg_rope_inv_freq(const fg_rope *r, float *inv_freq);
/* The scaling's rope_type as config.json spells it ("none" for FG_ROPE_NONE); static string. */
const char *fg_rope_scaling_name(fg_rope_scaling s);

typedef enum fg_act {
    FG_ACT_RELU = 0, FG_ACT_GELU, FG_ACT_GELU_TANH, FG_ACT_SILU,
    FG_ACT_TANH, /* (Gemma 2's logit soft-capping: cap * tanh(x / cap)) */
    FG_ACT_SWIGLU_OAI /* gpt-oss's clamped SwiGLU, gated only (fg_act_fn) */
} fg_act;
/* An activation and its parameters. FG_ACT_SWIGLU_OAI (transformers' GptOssExperts) computes,
 * in f32, g = min(gate, limit), u = clamp(up, -limit, limit), out = g * sigmoid(alpha * g) *
 * (u + 1); alpha and limit are the config's swiglu_alpha (1.702) and swiglu_limit (7.0), unused
 * by the other kinds. */
typedef struct fg_act_fn {
    fg_act kind;
    float alpha, limit;
} fg_act_fn;

/* Per-head products and copies (multi-head latent attention: each head's W_UK absorbed into its
 * query, W_UV applied to its latent output, the rows moved between layouts). For token t < n and
 * head h < n_heads, with xh = x + t * x_ld + h * x_hs (k values), yh = y + t * y_ld + h * y_hs (m
 * values, the rest of y untouched) and Wh = w + h * w_hs:
 *   w NULL:    yh[j] = xh[j]                        (a strided copy; m == k)
 *   trans 0:   yh[j] = sum_i Wh[j * w_ld + i] xh[i] (Wh's m rows of k: y = W x)
 *   trans 1:   yh[j] = sum_i Wh[i * w_ld + j] xh[i] (Wh's k rows of m: y = W^T x)
 * in f32 (sums in any order). x, w, y in the backend's memory (host or device); x and y do not
 * overlap. */
typedef struct fg_heads_op {
    const float *x;
    size_t x_ld, x_hs;
    const float *w;         /* NULL: copy */
    size_t w_hs, w_ld;
    int trans;
    float *y;
    size_t y_ld, y_hs;
    uint32_t n, n_heads, k, m;
} fg_heads_op;

typedef struct fg_backend_stats {
    uint64_t decoded_bytes;     /* f32 bytes produced by decoding typed weight pieces */
    uint64_t panel_bytes;       /* bytes the CPU backend's prefill GEMMs repacked weights into:
                                 * 16-bit weights widened to f32 (fg_w16_gemm), Q4 codes
                                 * unpacked to bytes (fg_quant_gemm_panel) */
    /* bytes its device moved over the host <-> device link, [0] host -> device, [1] device ->
     * host (whoever issued the copy: the backend's staging, the pager, the engine); 0 on the
     * CPU backend, which has no link */
    uint64_t link_bytes[2];
} fg_backend_stats;

typedef struct fg_backend_iface {
    const char *name;
    /* wait for every op queued so far (a no-op where ops are synchronous) */
    int (*sync)(fg_backend *be, fg_err *err);
    /* room to decode weight pieces of up to `floats` values (called once sizes are known) */
    int (*reserve)(fg_backend *be, uint64_t floats, fg_err *err);
    /* ---- ops (f32 activations, row-major) ---- */
    /* y[m, n] = x[m, k] . W^T (+ bias[n]) */
    int (*linear)(fg_backend *be, const float *x, const fg_weight *w, const float *bias,
                  float *y, uint32_t m, uint32_t n, uint32_t k, fg_err *err);
    /* out[i, :] = W[ids[i], :] (width values a row); ids checked against the rows (on CUDA
     * ids in device memory are checked by the kernel, which reports the first it saw) */
    int (*gather)(fg_backend *be, const fg_weight *w, uint64_t rows, const int32_t *ids,
                  uint32_t n, float *out, uint32_t width, fg_err *err);
    /* y = (x - mean) / sqrt(var + eps) * g + b over rows of n (in place allowed) */
    int (*layernorm)(fg_backend *be, const float *x, const float *g, const float *b, float *y,
                     uint32_t rows, uint32_t n, float eps, fg_err *err);
    /* y = x / sqrt(mean(x^2) + eps) * g (in place allowed) */
    int (*rmsnorm)(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                   uint32_t n, float eps, fg_err *err);
    /* x [rows, n_heads * head_dim] rotated in place; row r at positions[r] */
    int (*rope)(fg_backend *be, float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                const int32_t *positions, const fg_rope *r, fg_err *err);
    /* x = act(x) over n values; with up non-NULL x = act(x) * up (the gated MLP), and for
     * FG_ACT_SWIGLU_OAI x = g * sigmoid(alpha g) * (clamp(up) + 1) (fg_act_fn), which needs up
     * (FG_ERR_INVALID_ARG without) */
    int (*act)(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n, fg_err *err);
    /* y += x */
    int (*add)(fg_backend *be, float *y, const float *x, size_t n, fg_err *err);
    /* x *= s over n values (attention's query scaling, on the device where x lives) */
    int (*scale)(fg_backend *be, float *x, float s, size_t n, fg_err *err);
    /* ids[r] = the index of the greatest of x[r, 0 .. n) for r < rows (greedy decoding on the
     * device: rows x 4 bytes come back instead of the rows), exactly fg_sample's argmax: the
     * first of equal maxima (-0 == +0), a NaN never wins, a row whose first value is NaN
     * answers 0. x and ids in host or device memory; n >= 1 */
    int (*argmax)(fg_backend *be, const float *x, uint32_t rows, uint32_t n, int32_t *ids,
                  fg_err *err);
    /* y[idx[i], :] = s[i] * x[i, :] (accumulate 0) or y[idx[i], :] += s[i] * x[i, :]
     * (accumulate 1: the product rounded to f32, then added, as torch's index_add_ of a scaled
     * tensor) for i < n, rows of `width` values: a mixture of experts' outputs into the rows of
     * their tokens. y has y_rows rows (an idx past them or negative is refused; on CUDA idx in
     * device memory is checked by the kernel, which reports the first it saw); the idx of one
     * call are distinct. x, y in host or device memory, idx and s too */
    int (*scatter)(fg_backend *be, float *y, uint32_t y_rows, const float *x, const int32_t *idx,
                   const float *s, uint32_t n, uint32_t width, int accumulate, fg_err *err);
    /* rows [row, row + n) of the cache from k, v [n, width] f32 (encoded when quantized) */
    int (*kv_store)(fg_backend *be, const fg_kv_view *kv, uint32_t row, const float *k,
                    const float *v, uint32_t n, fg_err *err);
    int (*attention)(fg_backend *be, const fg_attn_op *a, fg_err *err);
    void (*stats)(const fg_backend *be, fg_backend_stats *out);
    void (*destroy)(fg_backend *be);
    /* per-head products and copies (fg_heads_op) */
    int (*heads)(fg_backend *be, const fg_heads_op *o, fg_err *err);
} fg_backend_iface;

/* The elements an fg_heads_op's x (which 0), w (1) or y (2) spans from its pointer. */
size_t fg_heads_span(const fg_heads_op *o, int which);

struct fg_backend {
    const fg_backend_iface *iface;
    void *ctx;
    fg_device *dev;    /* its memory; owned by the backend */
};

/* The CPU backend computing on `threads` cores (0 = every online CPU): OpenBLAS is switched to
 * one thread (process-wide) and each op is split across the backend's helper threads, the
 * process's one pool. Owned by the caller until fg_backend_free. */
int fg_backend_cpu_create(int threads, fg_backend **out, fg_err *err);

/* Linear arithmetic of the CPU backend:
 *  - FG_COMPUTE_F32 (the default): weights decoded to f32 and multiplied by sgemm, except F16
 *    weights at small row counts (decode steps, m <= 48), which a fused kernel multiplies from
 *    their F16 bytes (F16C + FMA, f32 sums: one pass over the weights, no f32 copy);
 *  - FG_COMPUTE_INT8: Q4/Q8 weights grouped along the input axis are multiplied with the
 *    activations quantized to int8 per group of the weight's columns (integer dot products;
 *    quant.h fg_quant_gemm); other weights as in F32. */
typedef enum fg_compute {
    FG_COMPUTE_F32 = 0,
    FG_COMPUTE_INT8 = 1,
    FG_COMPUTE_F16 = 2,
    FG_COMPUTE_BF16 = 3,
} fg_compute;
/* FG_COMPUTE_F16: 16-bit GEMM inputs, F32 accumulation (the CUDA backend's tensor-core path:
 * F16/BF16 weights as stored, Q4/Q8 dequantized to F16, activations rounded per Linear); the
 * CPU backends compute it as FG_COMPUTE_F32.
 * FG_COMPUTE_BF16: the CPU's 16-bit path: F16/BF16 weights at 2 rows and more (batch-1
 * decode stays on the fused kernel) multiplied with x and the weights rounded to bfloat16 and
 * products summed in f32 (quant.h fg_w16_gemm_bf16: VDPBF16PS on CPUs with AVX512-BF16, about 1.8x the f32 kernels
 * there); on a CPU without AVX512-BF16 those pieces are computed as under FG_COMPUTE_F32 (the
 * reference that rounds would only be slower). Q4/Q8 weights as under FG_COMPUTE_INT8. The
 * simulated device computes it as the CPU backend; the CUDA backend refuses it
 * (FG_ERR_UNSUPPORTED: its 16-bit path is FG_COMPUTE_F16). */
typedef struct fg_backend_cpu_opts {
    int threads;        /* 0 = every online CPU */
    fg_compute compute;
} fg_backend_cpu_opts;
int fg_backend_cpu_create_opts(const fg_backend_cpu_opts *o, fg_backend **out, fg_err *err);
void fg_backend_free(fg_backend *be); /* NULL accepted */

/* Which backend an engine computes on. */
typedef enum fg_backend_kind {
    FG_BACKEND_CPU = 0,
    FG_BACKEND_SIM = 1,     /* the simulated device below */
    FG_BACKEND_CUDA = 2,    /* compute/backend_cuda.cu */
} fg_backend_kind;

/* ---- the CUDA backend (compute/backend_cuda.cu; compute/backend_nocuda.c in a build without
 * the toolkit, where both calls answer FG_ERR_UNSUPPORTED) ----
 * cuBLAS GemmEx for Linear layers (F16/BF16 weights as stored, F32 weights as F32, Q4/Q8
 * dequantized to F16 on the device, F32 accumulation), kernels for the rest, over the same
 * staging rules as the sim backend (host operands uploaded per op through pinned staging on a
 * copy stream, device operands used in place, piece i + 1 uploading while piece i multiplies).
 * FG_ERR_UNSUPPORTED when no GPU is visible. */
typedef struct fg_backend_cuda_opts {
    int device;             /* CUDA device ordinal */
    int threads;            /* CPU threads of the delegated ops (0 = every online CPU) */
    fg_compute compute;
    int cpu_attention;
} fg_backend_cuda_opts;
int fg_backend_cuda_create(const fg_backend_cuda_opts *o, fg_backend **out, fg_err *err);
/* CUDA devices visible (0 without a GPU or without CUDA support). */
int fg_cuda_device_count(void);
/* Free and total memory of CUDA device `device`. */
int fg_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes, fg_err *err);

/* ---- the simulated device backend (compute/backend_sim.c, compute/device_sim.c) ----
 * A device on the CPU: its DEVICE memory is addresses host code cannot touch (a load or store
 * through one faults), copies go through a copy-engine thread at a configurable link bandwidth
 * and complete events; its ops run the CPU kernels on its own memory. Operands an op receives
 * in host memory are uploaded first (outputs downloaded after), device-resident ones (the
 * pager's DEVICE tier, buffers the caller allocated on be->dev) are used in place; a piecewise
 * Linear uploads piece i + 1 while piece i multiplies. With cpu_attention, attention over a
 * cache in host memory runs on the CPU where the cache is (FlexGen's --cpu-cache-compute): its
 * device operands (queries, validity) come down and its output goes up, the cache stays. */
typedef struct fg_backend_sim_opts {
    int threads;            /* the CPU kernels' threads (0 = every online CPU) */
    fg_compute compute;
    uint64_t capacity;      /* bytes of device memory */
    double link_gbps;       /* host <-> device GB/s (0 = memcpy speed) */
    int cpu_attention;
    int no_overlap;         /* upload a Linear's pieces one after another (for comparisons) */
} fg_backend_sim_opts;
int fg_backend_sim_create(const fg_backend_sim_opts *o, fg_backend **out, fg_err *err);
/* Seconds the sim backend's kernels ran (its copies are in fg_device_sim_stats). */
double fg_backend_sim_compute_s(const fg_backend *be);

/* The simulated device alone (owned by the caller: fg_device_free; retain shares it). */
int fg_device_sim_create(uint64_t capacity, double link_gbps, fg_device **out, fg_err *err);
int fg_device_is_sim(const fg_device *d);
/* Where device pointer p's bytes live (NULL when p is not device memory): for the device's own
 * ops only. owns: [p, p + n) is device memory. */
void *fg_device_sim_alias(const fg_device *d, const void *p);
int fg_device_sim_owns(const fg_device *d, const void *p, uint64_t n);
/* A copy on the compute stream (the sim backend stages an op's operands so, as the CUDA
 * backend does on its compute stream): synchronous, by the calling thread, sharing the link
 * with the streams (device_sim.c). */
int fg_device_sim_copy_inline(fg_device *d, void *dst, fg_buft dt, const void *src, fg_buft st,
                              uint64_t n, fg_err *err);
/* An upload (host -> device) on the upload stream, the sim backend's own for weight pieces (the
 * CUDA backend's `us`), not queued behind the copy engine's prefetches; *ev completes it. */
int fg_device_sim_upload(fg_device *d, void *dst, const void *src, uint64_t n, fg_event **ev,
                         fg_err *err);
typedef struct fg_device_sim_stats {
    uint64_t bytes[2][2];   /* copied [from device?][to device?] */
    double busy_s;          /* time spent copying, link time included: the streams' and the
                               synchronous copies' (a sum: they may overlap) */
    uint64_t used, peak;    /* device bytes allocated */
} fg_device_sim_stats;
void fg_device_sim_stats_get(const fg_device *d, fg_device_sim_stats *out);

/* ---- the scalar reference of every op (compute/ops_ref.c): the definition each backend is
 * tested against; slow, single-threaded, no SIMD ---- */
extern const fg_backend_iface fg_ops_ref;
/* A backend running the references (tests; a template for new backends). */
int fg_backend_ref_create(fg_backend **out, fg_err *err);

/* ---- CPU kernels, exported for tests: each SIMD path has a scalar _ref twin ---- */
typedef struct fg_attn_args {
    const float *q;        /* [n_q, n_heads * head_dim] */
    const float *k, *v;    /* [n_ctx, kv_stride] key rows, KV head g at column g * head_dim;
                            * value rows v_stride apart from v (their first value: v_off
                            * already added), KV head g's at g * v_dim */
    size_t kv_stride;
    const uint8_t *valid;
    uint32_t n_q, q_pos0;
    uint32_t n_heads, head_dim;
    float *out;            /* [n_q, n_heads * v_dim] */
    float *scratch;
    float keep;
    size_t scratch_stride;
    uint32_t scratch_parts;
    uint32_t n_kv_heads;   /* 0 = n_heads */
    uint32_t window;       /* 0 = none */
    float softcap;         /* 0 = none (fg_attn_op.softcap) */
    const float *sinks;    /* [n_heads] or NULL (fg_attn_op.sinks) */
    size_t v_stride;       /* 0 = kv_stride */
    uint32_t v_dim;        /* values a head, out [n_q, n_heads * v_dim]; 0 = head_dim */
    float *kv_pack;        /* NULL, or scratch_parts regions of kv_pack_stride floats, >= (q_pos0
                            * + n_q) * (head_dim + v_dim): a part copies the keys and values of
                            * the KV head it works on there, in contiguous rows (same bits) */
    size_t kv_pack_stride;
} fg_attn_args;

void fg_cpu_layernorm_ref(const float *x, const float *g, const float *b, float *y, uint32_t n,
                          float eps);
void fg_cpu_layernorm(const float *x, const float *g, const float *b, float *y, uint32_t n,
                      float eps);
void fg_cpu_attention_ref(const fg_attn_args *a);
void fg_cpu_attention(const fg_attn_args *a);
/* The (query, head) problems j = part (mod n_parts), in scratch region `part` (any split gives
 * the same bits as fg_cpu_attention). */
void fg_cpu_attention_part(const fg_attn_args *a, uint32_t part, uint32_t n_parts);
float fg_cpu_dot_ref(const float *a, const float *b, uint32_t n);
float fg_cpu_dot(const float *a, const float *b, uint32_t n);
/* Which SIMD path the dispatching kernels use: "avx512", "avx2" or "ref" (core/fg_cpu.h;
 * FG_COMPUTE_ISA=ref|avx2|avx512 caps it). */
const char *fg_cpu_isa(void);

#ifdef __cplusplus
}
#endif
#endif
