/* backend_int.h - pieces the backends share (compute/): decoding typed weight rows and KV rows,
 * and the scalar forms of the small ops, which are both the reference and, where SIMD gains
 * nothing at these sizes, the CPU backend's code. */
#ifndef FG_BACKEND_INT_H
#define FG_BACKEND_INT_H

#include "backend.h"
#include "quant.h"

/* Rows [r0, r1) of piece p (relative to p->first; r0 a multiple of the codec's row quantum,
 * r1 one too or p->n) decoded to f32 into dst [r1 - r0, cols]. */
int fgb_decode_rows(const fg_wpiece *p, uint64_t r0, uint64_t r1, float *dst, fg_quant_isa isa,
                    fg_err *err);
/* Rows per decode quantum of p (1 for float codecs, the group for axis-0 quantized ones). */
uint64_t fgb_quantum(const fg_wpiece *p);
/* Check a piece against the weight it belongs to ([n, k]). */
int fgb_check_piece(const fg_wpiece *p, uint32_t n, uint32_t k, fg_err *err);

/* KV rows [row, row + n) from f32 (decoding them: fgb_kv_f32). */
int fgb_kv_encode(const fg_kv_view *kv, uint32_t row, const float *k, const float *v, uint32_t n,
                  fg_quant_isa isa, fg_err *err);
/* An attention op's values (backend.h fg_attn_op): values a head, values a value row (vw),
 * bytes a value row in the cache's codec. */
uint32_t fgb_attn_vdim(const fg_attn_op *a);
uint32_t fgb_attn_vwidth(const fg_attn_op *a);
size_t fgb_attn_vrow_bytes(const fg_attn_op *a);
/* The value rows are the key rows' memory (MLA's absorbed decode): one decode serves both. */
int fgb_attn_v_is_k(const fg_attn_op *a);
/* The f32 rows attention reads: the cache itself, or decoded into a's k_tmp/v_tmp; *v points
 * at the first value (v_off into the value rows). */
int fgb_kv_f32(const fg_attn_op *a, const float **k, const float **v, fg_quant_isa isa,
               fg_err *err);
/* fg_attn_args for the kernels from an op whose rows are f32 at k, v (v: fgb_kv_f32's). */
fg_attn_args fgb_attn_args(const fg_attn_op *a, const float *k, const float *v);
int fgb_attn_check(const fg_attn_op *a, fg_err *err);
/* scatter's row indices idx[0..n) (host memory) all within [0, y_rows)? */
int fgb_scatter_check(const int32_t *idx, uint32_t n, uint32_t y_rows, fg_err *err);

/* Host room a device backend grows and keeps for fgb_attention_on_host. */
typedef struct fgb_room {
    uint8_t *p;
    size_t cap;
} fgb_room;
/* --cpu-cache-compute with the cache in host memory: attention on the CPU backend `cpu` beside
 * the cache. Operands for which on_device(d, p) holds (a device workspace's queries, output,
 * scratch and decode rows, the validity, the sinks) go through `room` by d's copies: queries,
 * validity and sinks down, the output back up; the cache never crosses the link. Shared by the
 * sim and CUDA backends. */
int fgb_attention_on_host(fg_backend *cpu, fg_device *d,
                          int (*on_device)(const fg_device *d, const void *p), fgb_room *room,
                          const fg_attn_op *a, fg_err *err);

/* Ops whose scalar reference is also the CPU backend's code (ops_ref.c; be is not used). */
int fgb_ref_rmsnorm(fg_backend *be, const float *x, const float *g, float *y, uint32_t rows,
                    uint32_t n, float eps, fg_err *err);
int fgb_ref_rope(fg_backend *be, float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                 const int32_t *positions, const fg_rope *r, fg_err *err);
int fgb_ref_act(fg_backend *be, fg_act_fn a, float *x, const float *up, size_t n, fg_err *err);
int fgb_ref_add(fg_backend *be, float *y, const float *x, size_t n, fg_err *err);
int fgb_ref_heads(fg_backend *be, const fg_heads_op *o, fg_err *err);
int fgb_heads_check(const fg_heads_op *o, fg_err *err);
int fgb_ref_scale(fg_backend *be, float *x, float s, size_t n, fg_err *err);
int fgb_ref_argmax(fg_backend *be, const float *x, uint32_t rows, uint32_t n, int32_t *ids,
                   fg_err *err);
int fgb_ref_scatter(fg_backend *be, float *y, uint32_t y_rows, const float *x, const int32_t *idx,
                    const float *s, uint32_t n, uint32_t width, int accumulate, fg_err *err);

void fgb_rmsnorm_row(const float *x, const float *g, float *y, uint32_t n, float eps);
void fgb_rope_rows(float *x, uint32_t rows, uint32_t n_heads, uint32_t head_dim,
                   const int32_t *positions, const float *inv_freq, const fg_rope *r);
void fgb_act(fg_act_fn a, float *x, const float *up, size_t n);
/* The activation's operands refused before anything is staged: FG_ACT_SWIGLU_OAI needs up. */
int fgb_act_check(fg_act_fn a, const float *up, fg_err *err);
int fgb_rope_check(const fg_rope *r, uint32_t head_dim, fg_err *err);

#endif
