/* test_quant_cuda.c - the CUDA Q4/Q8 kernels against the CPU reference: the same chunk bytes
 * from encoding and the same bits from decoding (F32 and F16), both axes, tails, F16/F32
 * scales, both nibble orders, and NaN refusal. Exits 77 (skip) in a build without CUDA or when
 * cudaGetDeviceCount reports no device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "quant_cuda.h"
#include "testutil.h"

#ifdef FG_TEST_CUDA
#include <cuda_runtime_api.h>

static uint64_t g_rng = 42;
static uint64_t rnd(void) { return tu_xorshift(&g_rng); }

static void *dev_copy(const void *p, size_t n)
{
    void *d = NULL;
    ck_assert_int_eq(cudaMalloc(&d, n ? n : 1), cudaSuccess);
    if (p)
        ck_assert_int_eq(cudaMemcpy(d, p, n, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void *host_copy(const void *d, size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_int_eq(cudaMemcpy(p, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return p;
}

static void one_case(int i)
{
    static const uint32_t gs[] = {32, 64, 128, 256, 8};
    unsigned bits = i & 1 ? 4 : 8;
    uint32_t G = gs[i % 5];
    int along_rows = (i / 2) % 2;
    fg_codec c = fg_codec_quant(bits, G, along_rows ? 0 : 1);
    if (i % 3 == 0)
        c.scale_dtype = FG_SCALE_F32;
    if (bits == 4 && i % 4 == 1)
        c.nibble_order = FG_NIBBLE_HI_FIRST;
    uint64_t rows = 1 + rnd() % 300, cols = 1 + rnd() % 300, ld = cols + i % 3;
    uint8_t dtype = i % 5 == 2 ? FG_CODEC_F16 : FG_CODEC_F32;
    uint64_t dims[2] = {rows, cols};
    fg_qview v;
    fg_err err;
    size_t qlen, es = dtype == FG_CODEC_F32 ? 4 : 2;
    ck_assert_int_eq(fg_codec_qview(&c, 2, dims, rows, &v, &err), FG_OK);
    ck_assert_int_eq(fg_quant_chunk_bytes(&v, &qlen, &err), FG_OK);
    uint8_t *src = calloc(rows * ld, es);
    for (uint64_t k = 0; k < rows * ld; k++) {
        float x = (float)((int64_t)(rnd() % 20001) - 10000) / 3000.0f;
        if (dtype == FG_CODEC_F32)
            ((float *)src)[k] = x;
        else
            ((uint16_t *)src)[k] = fg_f32_to_f16_1(x);
    }
    uint8_t *ref = malloc(qlen);
    ck_assert_int_eq(fg_quant_encode(&c, &v, src, dtype, ld, ref, qlen, FG_QUANT_ISA_REF, &err),
                     FG_OK);
    void *dsrc = dev_copy(src, rows * ld * es), *dq = dev_copy(NULL, qlen);
    ck_assert_msg(fg_quant_cuda_encode(&c, &v, dsrc, dtype, ld, dq, qlen, NULL, &err) == FG_OK,
                  "%s", err.msg);
    uint8_t *got = host_copy(dq, qlen);
    ck_assert_msg(memcmp(got, ref, qlen) == 0, "case %d: cuda encode differs", i);
    for (int o = 0; o < 2; o++) {
        uint8_t odt = o ? FG_CODEC_F16 : FG_CODEC_F32;
        size_t oes = o ? 2 : 4, on = rows * ld * oes;
        uint8_t *want = calloc(on, 1);
        ck_assert_int_eq(fg_quant_decode(&c, &v, ref, qlen, want, odt, ld, FG_QUANT_ISA_REF, &err),
                         FG_OK);
        void *dout = dev_copy(want, on); /* the gaps between rows must stay untouched */
        cudaMemset(dout, 0, on);
        ck_assert_int_eq(fg_quant_cuda_decode(&c, &v, dq, qlen, dout, odt, ld, NULL, &err), FG_OK);
        ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
        uint8_t *y = host_copy(dout, on);
        ck_assert_msg(memcmp(y, want, on) == 0, "case %d: cuda decode (%s) differs", i,
                      o ? "f16" : "f32");
        free(y), free(want);
        cudaFree(dout);
    }
    if (dtype == FG_CODEC_F32 && rows * cols > 5) { /* NaN refused */
        ((float *)src)[(rows - 1) * ld + cols - 1] = NAN;
        cudaMemcpy(dsrc, src, rows * ld * es, cudaMemcpyHostToDevice);
        ck_assert_int_eq(fg_quant_cuda_encode(&c, &v, dsrc, dtype, ld, dq, qlen, NULL, &err),
                         FG_ERR_NONFINITE);
    }
    cudaFree(dsrc), cudaFree(dq);
    free(src), free(ref), free(got);
}

START_TEST(test_cuda_equals_ref)
{
    for (int i = 0; i < 40; i++)
        one_case(i);
}
END_TEST
#endif

int main(void)
{
    int n = fg_quant_cuda_device_count();
    if (n <= 0) {
        fprintf(stderr, "test_quant_cuda: no CUDA device (or built without CUDA): skipped\n");
        return 77;
    }
#ifdef FG_TEST_CUDA
    Suite *s = suite_create("quant_cuda");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cuda_equals_ref);
    suite_add_tcase(s, tc);
    /* No fork mode here: the CUDA context made by cudaGetDeviceCount above does not survive
     * fork(), so a forked child could not use the device. */
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
#else
    return 77;
#endif
}
