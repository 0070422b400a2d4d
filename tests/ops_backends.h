/* ops_backends.h - what the cross-backend op tests (test_ops.c, test_ops_attn.c) share: the
 * backends under test and operands placed in a device's memory. */
#ifndef FG_TEST_OPS_BACKENDS_H
#define FG_TEST_OPS_BACKENDS_H

#include <stddef.h>

#include "backend.h"

/* The backends under test into out[] (room for 4), their count: the CPU, the scalar reference
 * (it must agree with itself), the simulated device (every operand crosses its link), and CUDA
 * where a GPU is visible (under the emulated runtime, FG_TEST_EXPECT_CUDA, it must be there). */
int ops_backends(fg_backend **out);
void ops_free_all(fg_backend **b, int n);
/* n bytes of src in d's device memory (src itself when dev is 0); ops_unplace frees it. */
void *ops_place(fg_device *d, int dev, const void *src, size_t n);
void ops_unplace(fg_device *d, int dev, void *p);

#endif
