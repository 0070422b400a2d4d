/* quant_cuda.h - CUDA kernels for Q4/Q8 chunks: the same bytes and bits as the CPU reference.
 *
 * Arguments mean what they mean for fg_quant_encode / fg_quant_decode (quant.h), except that the
 * buffers are device memory and stream is a cudaStream_t (NULL: the default stream). In a build
 * without CUDA these functions exist and return FG_ERR_UNSUPPORTED, so callers need no #ifdef.
 */
#ifndef FG_QUANT_CUDA_H
#define FG_QUANT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "fgt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices visible (0 with none, on error, or in a build without CUDA). */
int fg_quant_cuda_device_count(void);

/* Quantize on the device. Synchronous: waits for stream, so it can report NaN/Inf
 * (FG_ERR_NONFINITE) or a group out of the scale dtype's range (FG_ERR_QUANT_RANGE) with the
 * coordinates of the group's first element. CUDA failures -> FG_ERR_IO with CUDA's message. */
int fg_quant_cuda_encode(const fg_codec *c, const fg_qview *v, const void *d_src,
                         uint8_t src_dtype, uint64_t ld, void *d_dst, size_t dst_len,
                         void *stream, fg_err *err);

/* Dequantize on the device. Asynchronous on stream: returns once the kernel is queued. */
int fg_quant_cuda_decode(const fg_codec *c, const fg_qview *v, const void *d_src, size_t src_len,
                         void *d_dst, uint8_t dst_dtype, uint64_t ld, void *stream, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
