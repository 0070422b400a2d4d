/* ops_backends.c - the cross-backend op tests' backends and device operands (ops_backends.h). */
#include "ops_backends.h"

#include <stdlib.h>

#include "testutil.h"

int ops_backends(fg_backend **out)
{
    fg_err err;
    int n = 0;
    ck_assert_int_eq(fg_backend_cpu_create(3, &out[n++], &err), FG_OK);
    ck_assert_int_eq(fg_backend_ref_create(&out[n++], &err), FG_OK);
    /* the simulated device: every operand crosses its link (host memory staged per op) */
    fg_backend_sim_opts so = {2, FG_COMPUTE_F32, 64u << 20, 0, 0, 0};
    ck_assert_int_eq(fg_backend_sim_create(&so, &out[n++], &err), FG_OK);
    /* the CUDA backend where a GPU is visible (F32 compute: the reference's bounds hold); under
     * the emulated runtime (test_ops_emu: FG_TEST_EXPECT_CUDA) it must be there */
    fg_backend_cuda_opts co = {0, 2, FG_COMPUTE_F32, 0};
    if (fg_backend_cuda_create(&co, &out[n], &err) == FG_OK)
        n++;
    else if (getenv("FG_TEST_EXPECT_CUDA"))
        ck_abort_msg("the CUDA backend did not open under the emulated runtime: %s", err.msg);
    return n;
}

void ops_free_all(fg_backend **b, int n)
{
    for (int i = 0; i < n; i++)
        fg_backend_free(b[i]);
}

void *ops_place(fg_device *d, int dev, const void *src, size_t n)
{
    fg_err err;
    if (!dev)
        return (void *)src;
    void *p;
    ck_assert_int_eq(d->iface->alloc(d, FG_BUFT_DEVICE, n, &p, &err), FG_OK);
    ck_assert_int_eq(d->iface->copy(d, p, FG_BUFT_DEVICE, src, FG_BUFT_HOST, n, NULL, &err),
                     FG_OK);
    return p;
}

void ops_unplace(fg_device *d, int dev, void *p)
{
    if (dev)
        d->iface->free(d, FG_BUFT_DEVICE, p);
}
