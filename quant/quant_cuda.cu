/* quant_cuda.cu - CUDA kernels for Q4/Q8 chunks (quant_cuda.h), bit-identical to quant_ref.c.
 *
 * The scalar rules are the very functions of quant_int.h (FGQ_HD = __host__ __device__): the
 * binary16 conversions, the min-down/scale-up header rule (in binary64, as on the CPU) and the
 * code formula. Arithmetic uses explicit _rn intrinsics and the file is built with
 * --fmad=false, so m + code * s is a rounded product then a rounded sum, as on the CPU.
 *  - decode: one thread per output element (grid-stride over rows * cols), consecutive threads
 *    on consecutive columns, so the stores coalesce; the group header is re-read per element
 *    (it stays in L1/L2).
 *  - encode: one thread per group. With groups down the rows (along_rows == 1) neighbouring
 *    threads read neighbouring columns (coalesced); along the columns each thread walks its own
 *    run of G elements. A first version: correct, not tuned.
 * Failures found on the device (NaN/Inf, range) are reported through a small status block
 * allocated stream-ordered; encode therefore synchronises the stream.
 * The kernels are in quant_kernels.cuh, which tests/cudaemu also compiles for the host.
 */
#include <cuda_runtime.h>

#include "quant_cuda.h"
#include "quant_int.h"

#include "quant_kernels.cuh"

namespace {

int check_args(const fg_codec *c, const fg_qview *v, uint8_t dtype, uint64_t ld, size_t len,
               Geo *g, fg_err *err)
{
    fgq_params p;
    int rc = fgq_check(c, v, dtype, ld, len, &p, err);
    if (rc)
        return rc;
    g->rows = v->rows;
    g->cols = v->cols;
    g->ld = ld ? ld : v->cols;
    g->n_groups = v->n_groups;
    g->G = p.G;
    g->bits = p.bits;
    g->levels = p.levels;
    g->f16scale = p.f16scale;
    g->hi_first = p.hi_first;
    g->hdr = p.hdr;
    g->gbytes = p.gbytes;
    g->along_rows = (uint32_t)v->along_rows;
    g->gpl = (v->cols + p.G - 1) / p.G;
    return FG_OK;
}

int cuda_fail(cudaError_t e, const char *what, fg_err *err)
{
    return fg_err_set(err, FG_ERR_IO, "quant cuda: %s: %s", what, cudaGetErrorString(e));
}

} // namespace

extern "C" int fg_quant_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}

extern "C" int fg_quant_cuda_decode(const fg_codec *c, const fg_qview *v, const void *d_src,
                                    size_t src_len, void *d_dst, uint8_t dst_dtype, uint64_t ld,
                                    void *stream, fg_err *err)
{
    Geo g;
    int rc = check_args(c, v, dst_dtype, ld, src_len, &g, err);
    if (rc || g.rows == 0 || g.cols == 0)
        return rc;
    uint64_t n = g.rows * g.cols, blocks = (n + 255) / 256;
    unsigned grid = (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16);
    decode_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(g, (const uint8_t *)d_src, d_dst,
                                                          dst_dtype == FG_CODEC_F16);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? FG_OK : cuda_fail(e, "decode launch", err);
}

static int report(const Geo &g, const Status &st, fg_err *err)
{
    uint64_t r = g.along_rows ? (st.group / g.cols) * g.G : st.group / g.gpl;
    uint64_t col = g.along_rows ? st.group % g.cols : (st.group % g.gpl) * g.G;
    return fg_err_set(err, st.code, "quant cuda: group at (%llu, %llu): %s",
                      (unsigned long long)r, (unsigned long long)col, fg_strerror(st.code));
}

extern "C" int fg_quant_cuda_encode(const fg_codec *c, const fg_qview *v, const void *d_src,
                                    uint8_t src_dtype, uint64_t ld, void *d_dst, size_t dst_len,
                                    void *stream, fg_err *err)
{
    Geo g;
    int rc = check_args(c, v, src_dtype, ld, dst_len, &g, err);
    if (rc || g.n_groups == 0)
        return rc;
    cudaStream_t sm = (cudaStream_t)stream;
    Status *d_st = nullptr, st = {0, 0};
    cudaError_t e = cudaMallocAsync((void **)&d_st, sizeof st, sm);
    if (e != cudaSuccess)
        return cuda_fail(e, "status alloc", err);
    cudaMemsetAsync(d_st, 0, sizeof st, sm);
    uint64_t blocks = (g.n_groups + 127) / 128;
    encode_kernel<<<(unsigned)blocks, 128, 0, sm>>>(g, d_src, src_dtype == FG_CODEC_F16,
                                                    (uint8_t *)d_dst, d_st);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&st, d_st, sizeof st, cudaMemcpyDeviceToHost, sm);
    cudaFreeAsync(d_st, sm);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(sm);
    if (e != cudaSuccess)
        return cuda_fail(e, "encode", err);
    return st.code ? report(g, st, err) : FG_OK;
}
