/* cuBLAS through dlopen: see cublas_dl.h for why.
 *
 * The library is looked up by its soname (the system's search path, LD_LIBRARY_PATH), then in
 * the toolkit directory this build was configured with (FG_CUBLAS_DIR), so a build tree and an
 * install find it without an rpath to the toolkit. The _v2 names are the exported symbols behind
 * cublas_v2.h's macros. */
#include "cublas_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define SONAME_STR2(x) #x
#define SONAME_STR(x) SONAME_STR2(x)
#define CUBLAS_SONAME "libcublas.so." SONAME_STR(CUBLAS_VER_MAJOR)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static fg_cublas_fns g_fns;
static char g_why[512];

static void *open_lib(void)
{
    void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef FG_CUBLAS_DIR
    if (!h) {
        char path[400];
        snprintf(path, sizeof path, "%s/%s", FG_CUBLAS_DIR, CUBLAS_SONAME);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (!h)
        snprintf(g_why, sizeof g_why, "cannot load %s: %s", CUBLAS_SONAME, dlerror());
    return h;
}

static int sym(void *h, const char *name, void **out)
{
    *out = dlsym(h, name);
    if (!*out)
        snprintf(g_why, sizeof g_why, "%s: no symbol %s", CUBLAS_SONAME, name);
    return *out != NULL;
}

static void load(void)
{
    void *h = open_lib();
    if (!h)
        return;
    fg_cublas_fns f;
    if (sym(h, "cublasCreate_v2", (void **)&f.create) &&
        sym(h, "cublasDestroy_v2", (void **)&f.destroy) &&
        sym(h, "cublasSetStream_v2", (void **)&f.set_stream) &&
        sym(h, "cublasSgemm_v2", (void **)&f.sgemm) &&
        sym(h, "cublasGemmEx", (void **)&f.gemm_ex) &&
        sym(h, "cublasSgemmBatched", (void **)&f.sgemm_batched) &&
        sym(h, "cublasGemmBatchedEx", (void **)&f.gemm_batched_ex))
        g_fns = f;
}

const fg_cublas_fns *fg_cublas(fg_err *err)
{
    pthread_once(&g_once, load);
    if (g_fns.create)
        return &g_fns;
    fg_err_set(err, FG_ERR_UNSUPPORTED, "--backend cuda: %s", g_why);
    return NULL;
}
