/* fgemu.h - what CUDA device code sees when tests/cudaemu/ compiles it for the host.
 *
 * kernels.cc includes this, then the very kernel headers nvcc compiles (compute/kernels_cuda.cuh,
 * quant/quant_kernels.cuh). A kernel runs as one fiber per CUDA thread (runtime.cc): the
 * built-in indices are the running fiber's, __syncthreads and the warp shuffles are barriers
 * between fibers, __shared__ memory is one instance per running block (blocks of one stream run
 * one after the other on its worker thread; streams run on threads of their own, hence
 * thread_local). Nothing here is fast; it is exact about what the kernels compute, and it stops
 * with a message where CUDA leaves the behaviour undefined (a barrier not every thread reaches,
 * a shuffle naming a thread that has returned).
 */
#ifndef FG_CUDAEMU_H
#define FG_CUDAEMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace fgemu {

/* The running CUDA thread (one fiber). */
struct cthread {
    uint3 tid;
    unsigned lane;
};

extern thread_local cthread *t_cur;   /* the fiber running on this worker */
extern thread_local dim3 t_block_idx; /* the running block */
extern thread_local dim3 t_block_dim;
extern thread_local dim3 t_grid_dim;
extern thread_local void *t_dyn_shared; /* the launch's dynamic shared memory */

void sync_block();
/* The warp exchange behind the shuffles: every lane of `mask` offers `bits` and gets lane
 * `src_lane`'s (its own when src_lane is outside the warp). */
uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane);

template <typename T> T shfl_down(unsigned mask, T v, unsigned delta)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    int lane = (int)t_cur->lane, src = lane + (int)delta;
    b = warp_exchange(mask, b, src < 32 ? src : lane);
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}

} // namespace fgemu

#ifdef FGEMU_KERNEL_SIDE /* kernels.cc: what the kernel headers see (not the runtime) */

/* The toolkit's headers define these empty for a host compiler; the kernels need them so. */
#undef __shared__
#define __shared__ static thread_local
#define FG_DYNAMIC_SHARED(type, name) type *name = (type *)fgemu::t_dyn_shared

#define threadIdx (fgemu::t_cur->tid)
#define blockIdx (fgemu::t_block_idx)
#define blockDim (fgemu::t_block_dim)
#define gridDim (fgemu::t_grid_dim)

#define __syncthreads() fgemu::sync_block()
#define __shfl_down_sync(mask, v, d) fgemu::shfl_down((mask), (v), (d))

/* Device intrinsics the toolkit declares for the device only. A stream's blocks run one at a
 * time and its fibers never preempt each other, but two streams' kernels may run at once, so
 * the atomics are atomic. */
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round to nearest: what a host float operation does (kernels.cc is built without FMA
 * contraction, as quant_cuda.cu is with --fmad=false). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <typename T> static inline T atomicCAS(T *p, T cmp, T val)
{
    __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}

#endif /* FGEMU_KERNEL_SIDE */
#endif
