/* test_fp8.c - FP8 block-scaled checkpoints (convert/fp8.c) against ml_dtypes' float8_e4m3fn
 * (tests/fixtures/fp8, made by make_fp8_fixtures.py from the transformers fixtures, quantized as
 * DeepSeek's conversion does):
 *   - the 256 e4m3fn bytes decoded as ml_dtypes decodes them (NaN where it is NaN);
 *   - an FP8 checkpoint converted stores exactly what its dequantized BF16 twin (ml_dtypes:
 *     bfloat16(float32(code) x scale_inv)) converts to, bit for bit: blocks of 128 x 128 (every
 *     matrix one partial block, F32 scales, planted max / subnormal / zero codes) and of 32 x 16
 *     (BF16 scales);
 *   - the engine's logits from the FP8 store against transformers' on the unquantized source
 *     (the quantization's own loss, bounded per row);
 *   - hostile directories refused in one line: no scales, scales of the wrong shape, no
 *     quantization_config; a NaN byte refused naming its element.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_int.h"
#include "convert.h"
#include "engine.h"
#include "model.h"
#include "store.h"
#include "testutil.h"

#ifndef FG_FIXTURE_DIR
#error "FG_FIXTURE_DIR must name tests/fixtures"
#endif

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static const char *fx(const char *rel)
{
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", FG_FIXTURE_DIR, rel);
    return buf[k];
}

START_TEST(test_decode)
{
    size_t len;
    char *ref = tu_slurp(fx("fp8/e4m3.f32"), &len);
    ck_assert_uint_eq(len, 256 * 4);
    for (int b = 0; b < 256; b++) {
        float want, got = ck_fp8_e4m3_to_f32((uint8_t)b);
        memcpy(&want, ref + 4 * b, 4);
        if (isnan(want))
            ck_assert_msg(isnan(got), "byte 0x%02x: %a, ml_dtypes NaN", b, got);
        else
            ck_assert_msg(!memcmp(&got, &want, 4), "byte 0x%02x: %a, ml_dtypes %a", b, got, want);
    }
    free(ref);
}
END_TEST

static const char *convert(const char *src, const char *tok, const char *name)
{
    const char *dst = tu_path(name);
    fg_convert_opts o = {0, 64, -1, tok, 4096, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &o, &rep, &err) == 0, "%s: %s", src, err.msg);
    return dst;
}

typedef struct cmp_ctx {
    fg_store *other;
    uint32_t n;
} cmp_ctx;

static int cmp_tensor(void *ctx, const fg_store_tensor *t)
{
    cmp_ctx *c = ctx;
    fg_store_tensor *o;
    fg_err err;
    ck_assert_msg(fg_store_tensor_get(c->other, t->name, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(t->codec.id, o->codec.id);
    ck_assert_msg(t->digest == o->digest, "tensor %s differs", t->name);
    fg_store_tensor_free(o);
    c->n++;
    return 0;
}

/* FP8 directory, its BF16 twin, the transformers fixture it came from (tokenizer, logits). The
 * bound is e4m3's own loss on these tiny random models (3 mantissa bits: 1.4e-2 and 2.3e-2
 * measured, qwen3's with the planted extreme codes); exactness is test_same_store's. */
static const struct row { const char *fp8, *ref, *src, *logits; double max_nmse; } rows[] = {
    {"fp8/qwen3-tiny-fp8", "fp8/qwen3-tiny-fp8-ref", "llama/qwen3-tiny-bf16",
     "llama/qwen3-tiny.ref/logits.f32", 3e-2},
    {"fp8/llama2-tiny-fp8", "fp8/llama2-tiny-fp8-ref", "llama/llama2-tiny-f32",
     "llama/llama2-tiny.ref/logits.f32", 4e-2},
};

START_TEST(test_same_store)
{
    const struct row *r = &rows[_i];
    const char *a = convert(fx(r->fp8), fx(r->src), "from-fp8");
    const char *b = convert(fx(r->ref), fx(r->src), "from-bf16");
    fg_store *sa, *sb;
    fg_err err;
    ck_assert_int_eq(fg_store_open(a, FG_STORE_RDONLY, NULL, &sa, &err), 0);
    ck_assert_int_eq(fg_store_open(b, FG_STORE_RDONLY, NULL, &sb, &err), 0);
    cmp_ctx c = {sb, 0}, d = {sa, 0};
    ck_assert_int_eq(fg_store_tensor_iter(sa, cmp_tensor, &c, &err), 0);
    ck_assert_int_eq(fg_store_tensor_iter(sb, cmp_tensor, &d, &err), 0);
    ck_assert_uint_eq(c.n, d.n);
    ck_assert_uint_gt(c.n, 10);
    fg_store_close(sa);
    fg_store_close(sb);
}
END_TEST

static void read_ints(const char *path, int32_t *v, size_t n)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(fscanf(f, "%d", &v[i]), 1);
    fclose(f);
}

/* nmse of the FP8 store's logits on the reference batch against transformers' on the source */
START_TEST(test_logits)
{
    const struct row *r = &rows[_i];
    char p[512];
    int32_t ids[3][12], mask[3][12], seqs[3][12];
    snprintf(p, sizeof p, "%s", r->logits);
    *strrchr(p, '/') = 0;
    char q[600];
    snprintf(q, sizeof q, "%s/ids.txt", p);
    read_ints(fx(q), &ids[0][0], 36);
    snprintf(q, sizeof q, "%s/mask.txt", p);
    read_ints(fx(q), &mask[0][0], 36);
    size_t len;
    float *want = (float *)(void *)tu_slurp(fx(r->logits), &len);
    ck_assert_uint_eq(len, 36 * 512 * 4);
    const char *dir = convert(fx(r->fp8), fx(r->src), "store");
    fg_store *s;
    fg_model *m;
    fg_engine *e;
    fg_err err;
    fg_engine_opts o;
    memset(&o, 0, sizeof o);
    o.policy = fg_policy_default();
    o.threads = 1;
    o.max_ctx = 64;
    ck_assert_int_eq(fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, &err), 0);
    ck_assert_msg(fg_model_open(s, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(fg_engine_open(m, &o, &e, &err) == 0, "%s", err.msg);
    const int32_t *win[3];
    uint32_t lens[3];
    for (int b = 0; b < 3; b++) {
        lens[b] = 0;
        for (int t = 0; t < 12; t++)
            if (mask[b][t])
                seqs[b][lens[b]++] = ids[b][t];
        win[b] = seqs[b];
    }
    float *out = calloc(36 * 512, 4);
    ck_assert_msg(fg_engine_logits(e, win, lens, 3, NULL, NULL, out, 12 * 512, &err) == 0, "%s",
                  err.msg);
    double num = 0, den = 0;
    for (int b = 0; b < 3; b++)
        for (uint32_t t = 0, pad = 12 - lens[b]; t < lens[b]; t++)
            for (int v = 0; v < 512; v++) {
                double x = out[(b * 12 + t) * 512 + v], y = want[(b * 12 + pad + t) * 512 + v];
                num += (x - y) * (x - y), den += y * y;
            }
    fprintf(stderr, "%s: nmse %.3g against transformers on the unquantized source\n", r->fp8,
            num / den);
    ck_assert_msg(num / den <= r->max_nmse, "%s: nmse %g", r->fp8, num / den);
    free(out);
    free(want);
    ck_assert_int_eq(fg_engine_close(e, NULL), 0);
    fg_model_close(m);
    fg_store_close(s);
}
END_TEST

/* Directories refused at open, in one line naming what. */
static const struct bad { const char *dir, *msg; int rc; } bad[] = {
    {"fp8/bad-noscale", "F8_E4M3 tensor w has no w_scale_inv (its block scales)", FG_ERR_NOT_FOUND},
    {"fp8/bad-scaleshape", "tensor w_scale_inv must be F32 or BF16 [2, 2] (w [4, 8] in blocks of "
     "2x4)", FG_ERR_SIZE_MISMATCH},
    {"fp8/bad-noconfig", "F8_E4M3 tensors, but quantization_config.quant_method is not \"fp8\"",
     FG_ERR_UNSUPPORTED},
};

START_TEST(test_bad)
{
    const struct bad *b = &bad[_i];
    fg_ckpt *ck = NULL;
    fg_err err;
    int rc = fg_ckpt_open(fx(b->dir), &ck, &err);
    ck_assert_msg(rc == b->rc, "%s: rc %d (%s)", b->dir, rc, rc ? err.msg : "");
    ck_assert_msg(strstr(err.msg, b->msg) && !strchr(err.msg, '\n'), "%s: '%s' lacks '%s'",
                  b->dir, err.msg, b->msg);
    ck_assert_ptr_null(ck);
    /* and fg-convert's path: nothing made */
    const char *dst = tu_path("out");
    fg_convert_opts o = {0, 64, -1, NULL, 4096, NULL, NULL};
    fg_convert_report rep;
    ck_assert_int_ne(fg_convert_import(fx(b->dir), dst, &o, &rep, &err), 0);
    ck_assert(strstr(err.msg, b->msg));
    ck_assert_int_ne(access(dst, F_OK), 0);
}
END_TEST

START_TEST(test_nan)
{
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(fx("fp8/nan"), &ck, &err) == 0, "%s", err.msg);
    uint32_t i;
    ck_assert_int_eq(fg_ckpt_find(ck, "w", &i), 0);
    uint16_t out[32];
    void *scratch = NULL;
    size_t cap = 0;
    ck_assert_int_eq(ck_fp8_read_bf16(ck, i, 0, 5, out, &scratch, &cap, &err), 0);
    ck_assert_int_eq(out[1], 0x3d80); /* 1/8 as e4m3 x the scale 0.5: 2^-4 in BF16 */
    ck_assert_int_eq(ck_fp8_read_bf16(ck, i, 0, 32, out, &scratch, &cap, &err), FG_ERR_NONFINITE);
    ck_assert_msg(strstr(err.msg, "tensor 'w' element 5 (row 0, column 5) is not finite: byte "
                                  "0x7f") && !strchr(err.msg, '\n'), "%s", err.msg);
    free(scratch);
    fg_ckpt_close(ck);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("fp8");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_decode);
    tcase_add_loop_test(tc, test_same_store, 0, sizeof rows / sizeof rows[0]);
    tcase_add_loop_test(tc, test_logits, 0, sizeof rows / sizeof rows[0]);
    tcase_add_loop_test(tc, test_bad, 0, sizeof bad / sizeof bad[0]);
    tcase_add_test(tc, test_nan);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
