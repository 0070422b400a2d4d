/* fgemu_int.h - what the emulated runtime (runtime.cc), its kernel table (kernels.cc) and its
 * cuBLAS (cublas.cc) share. Not a CUDA header: nothing of fg includes it. */
#ifndef FG_CUDAEMU_INT_H
#define FG_CUDAEMU_INT_H

#include <stddef.h>
#include <cuda_runtime.h>

namespace fgemu {

/* One kernel compiled for the host: its name, its parameters as the compiler spells them,
 * and how to copy a launch's arguments (they live in the frame of nvcc's generated launch
 * function, gone when the launch returns) and run one thread on the copy. */
struct kernel_def {
    const char *name;
    const char *params;                 /* demangled: "(float*, unsigned int)" */
    void *(*pack)(void **args);         /* a heap copy of the arguments */
    void (*run)(const void *packed);    /* the kernel body, for the calling fiber */
    void (*unpack)(void *packed);       /* frees the copy */
    /* the index of the first argument the GPU could not follow (a pointer to host memory that
     * is not pinned: bad_arg in kernels.cc), its value in *at; -1 when none */
    int (*check)(const void *packed, const void **at);
};

/* NULL, device memory or pinned host memory: what a kernel may be given. */
bool pointer_ok(const void *p);

const kernel_def *kernels(size_t *n);

} // namespace fgemu

extern "C" {
/* For cublas.cc: run fn(arg) on the stream, in its order; 0 or a cudaError_t. */
__attribute__((visibility("default"))) int fgemu_enqueue(cudaStream_t s, void (*fn)(void *),
                                                         void *arg);
/* 1 when [p, p + n) lies inside one live device allocation. */
__attribute__((visibility("default"))) int fgemu_device_range(const void *p, size_t n);
}

#endif
