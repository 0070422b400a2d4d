/* backend_nocuda.c - the CUDA backend's entry points in a build without the CUDA toolkit: they
 * answer FG_ERR_UNSUPPORTED, so callers need no #ifdef (backend.h). */
#include "backend.h"

int fg_backend_cuda_create(const fg_backend_cuda_opts *o, fg_backend **out, fg_err *err)
{
    (void)o;
    *out = NULL;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "--backend cuda: this build has no CUDA support "
                      "(configure with the CUDA toolkit and -DFG_CUDA=ON)");
}

int fg_cuda_device_count(void)
{
    return 0;
}

int fg_cuda_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes, fg_err *err)
{
    (void)device;
    *free_bytes = *total_bytes = 0;
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "--backend cuda: this build has no CUDA support "
                      "(configure with the CUDA toolkit and -DFG_CUDA=ON)");
}
