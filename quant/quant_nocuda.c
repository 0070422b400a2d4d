/* quant_nocuda.c - quant_cuda.h in a build without the CUDA toolkit: every call says so. */
#include "quant_cuda.h"

int fg_quant_cuda_device_count(void) { return 0; }

int fg_quant_cuda_encode(const fg_codec *c, const fg_qview *v, const void *d_src,
                         uint8_t src_dtype, uint64_t ld, void *d_dst, size_t dst_len,
                         void *stream, fg_err *err)
{
    (void)c, (void)v, (void)d_src, (void)src_dtype, (void)ld, (void)d_dst, (void)dst_len;
    (void)stream;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "quant: built without CUDA");
}

int fg_quant_cuda_decode(const fg_codec *c, const fg_qview *v, const void *d_src, size_t src_len,
                         void *d_dst, uint8_t dst_dtype, uint64_t ld, void *stream, fg_err *err)
{
    (void)c, (void)v, (void)d_src, (void)src_len, (void)d_dst, (void)dst_dtype, (void)ld;
    (void)stream;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "quant: built without CUDA");
}
