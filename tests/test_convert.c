/* test_convert.c - every fixture layout converts into a store whose tensors equal the source:
 * F16 bit for bit (the fixtures are f16-representable, BF16 ones included), Q4 within half a
 * quantization step of the tensor's range; provenance names the source key and file hash;
 * config and tokenizer land in the metadata; synth writes the shapes of a real OPT. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "convert.h"
#include "model.h"
#include "quant.h"
#include "store.h"
#include "testutil.h"

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

typedef struct cmp_ctx {
    const fg_ckpt *ck;
    fg_store *s;
    int q4;
    uint32_t checked;
} cmp_ctx;

/* Compare one stored tensor with its source (found through its provenance). */
static int cmp_tensor(void *ctx, const fg_store_tensor *t)
{
    cmp_ctx *c = ctx;
    fg_err err;
    fg_store_tensor *full;
    ck_assert_int_eq(fg_store_tensor_get(c->s, t->name, &full, &err), 0);
    /* provenance: the source key is kept in the .fgt file; find it by canonical name */
    uint32_t idx = UINT32_MAX;
    char canon[256];
    for (uint32_t i = 0; i < fg_ckpt_count(c->ck); i++) {
        const char *nm = fg_arch_find("opt")->canonical_name(fg_ckpt_tensor_at(c->ck, i)->name,
                                                             canon, sizeof canon);
        if (nm && !strcmp(nm, t->name))
            idx = i;
    }
    ck_assert_msg(idx != UINT32_MAX, "no source for %s", t->name);
    const fg_ckpt_tensor *src = fg_ckpt_tensor_at(c->ck, idx);
    /* provenance in the .fgt file: the source key and the XXH3 of the source file */
    char path[4096];
    fg_store_file_path(c->s, full->file_id, 0, path, sizeof path);
    fg_fgt_reader *r;
    fg_fgt_tensor_info ti;
    uint64_t hash;
    ck_assert_int_eq(fg_fgt_open(path, 0, &r, &err), 0);
    ck_assert_int_eq(fg_fgt_tensor(r, full->file_index, &ti), 0);
    ck_assert_str_eq(ti.source_name, src->name);
    ck_assert_int_eq(fg_ckpt_file_xxh3(c->ck, src->file, &hash, &err), 0);
    ck_assert_uint_eq(ti.source_hash, hash);
    fg_fgt_close(r);
    size_t n = src->n_elements, es = fg_ckpt_dtype_size(src->dtype);
    void *raw = malloc(n * es);
    uint16_t *want = malloc(n * 2);
    ck_assert_int_eq(fg_ckpt_read(c->ck, idx, 0, n, raw, &err), 0);
    ck_assert_int_eq(fg_ckpt_to_f16(src->dtype, raw, n, want, NULL), 0);
    float lo = INFINITY, hi = -INFINITY, maxerr = 0;
    uint64_t cols = n / (t->n_dims ? t->dims[0] : 1);
    for (uint32_t k = 0; k < full->n_chunks; k++) {
        const fg_fgt_chunk_info *ci = &full->chunks[k];
        const void *p;
        ck_assert_int_eq(fg_store_chunk_data(c->s, full, k, 1, &p, &err), 0);
        const uint16_t *w = want + ci->first_row * cols;
        if (full->codec.id == FG_CODEC_BF16) { /* a BF16 checkpoint is kept bit for bit */
            ck_assert_int_eq(src->dtype, FG_CKPT_BF16);
            ck_assert_msg(!memcmp(p, (const uint16_t *)raw + ci->first_row * cols,
                                  ci->n_rows * cols * 2), "%s chunk %u differs", t->name, k);
            continue;
        }
        if (full->codec.id == FG_CODEC_F16) {
            ck_assert_msg(!memcmp(p, w, ci->n_rows * cols * 2), "%s chunk %u differs", t->name, k);
            continue;
        }
        fg_qview v;
        ck_assert_int_eq(fg_codec_qview(&full->codec, full->n_dims, full->dims, ci->n_rows, &v,
                                        &err), 0);
        float *d = malloc(ci->n_rows * cols * 4);
        ck_assert_int_eq(fg_quant_decode(&full->codec, &v, p, ci->length, d, FG_CODEC_F32, 0,
                                         FG_QUANT_ISA_AUTO, &err), 0);
        for (uint64_t i = 0; i < ci->n_rows * cols; i++) {
            float x = fg_f16_to_f32_1(w[i]);
            lo = fminf(lo, x), hi = fmaxf(hi, x);
            maxerr = fmaxf(maxerr, fabsf(d[i] - x));
        }
        free(d);
    }
    if (full->codec.id == FG_CODEC_Q4)
        ck_assert_msg(maxerr <= (hi - lo) / 15 / 2 * 1.01f + 1e-6f, "%s: q4 error %g, range %g",
                      t->name, maxerr, hi - lo);
    else
        ck_assert_int_eq(full->codec.id, src->dtype == FG_CKPT_BF16 ? FG_CODEC_BF16 : FG_CODEC_F16);
    ck_assert_int_eq(c->q4 && t->n_dims >= 2, full->codec.id == FG_CODEC_Q4);
    free(raw);
    free(want);
    fg_store_tensor_free(full);
    c->checked++;
    return 0;
}

static void check_layout(const char *layout, int q4, uint32_t want_tensors)
{
    char src[4096], tok[4096];
    snprintf(src, sizeof src, "%s/opt/%s", FG_FIXTURE_DIR, layout);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    const char *dst = tu_path(q4 ? "q4" : "f16");
    fg_convert_opts o = {q4, 64, -1, tok, 0, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_msg(fg_convert_import(src, dst, &o, &rep, &err) == 0, "%s: %s", layout, err.msg);
    ck_assert_uint_eq(rep.tensors, want_tensors);
    fg_ckpt *ck;
    fg_store *s;
    ck_assert_int_eq(fg_ckpt_open(src, &ck, &err), 0);
    ck_assert_int_eq(fg_store_open(dst, FG_STORE_RDONLY, NULL, &s, &err), 0);
    cmp_ctx c = {ck, s, q4, 0};
    ck_assert_int_eq(fg_store_tensor_iter(s, cmp_tensor, &c, &err), 0);
    ck_assert_uint_eq(c.checked, want_tensors);
    void *data;
    size_t len;
    ck_assert_int_eq(fg_store_meta_get(s, "model.config_json", &data, &len, &err), 0);
    ck_assert(strstr(data, "\"model_type\": \"opt\"") != NULL);
    free(data);
    ck_assert_int_eq(fg_store_meta_get(s, "tokenizer.vocab_json", &data, &len, &err), 0);
    ck_assert_uint_gt(len, 1000000);
    free(data);
    ck_assert_int_eq(fg_store_verify(s, NULL, &err), 0);
    fg_store_close(s);
    fg_ckpt_close(ck);
}

/* opt-tiny: 2 layers x 16 tensors + embed tokens, positions, final LN weight and bias */
START_TEST(safetensors_f16) { check_layout("opt-tiny-safetensors", 0, 36); }
END_TEST
START_TEST(sharded_f16) { check_layout("opt-tiny-sharded", 0, 36); }
END_TEST
START_TEST(bin_f16) { check_layout("opt-tiny-bin", 0, 36); }
END_TEST
START_TEST(bf16_bin_kept) { check_layout("opt-tiny-bf16-bin", 0, 36); }
END_TEST
START_TEST(npy_f16) { check_layout("opt-tiny-npy", 0, 36); }
END_TEST
/* opt-350m style: no final LN, project_in/out */
START_TEST(m350_f16) { check_layout("opt-350m-style-safetensors", 0, 36); }
END_TEST
START_TEST(safetensors_q4) { check_layout("opt-tiny-safetensors", 1, 36); }
END_TEST

typedef struct digest_ctx {
    fg_store *other;
    uint32_t same;
} digest_ctx;

static int same_digest(void *ctx, const fg_store_tensor *t)
{
    digest_ctx *d = ctx;
    fg_store_tensor *o;
    fg_err err;
    ck_assert_msg(fg_store_tensor_get(d->other, t->name, &o, &err) == 0, "%s", err.msg);
    ck_assert_msg(o->digest == t->digest && o->codec.id == t->codec.id, "%s differs", t->name);
    fg_store_tensor_free(o);
    d->same++;
    return 0;
}

/* stores a and b hold the same tensors with the same bytes (digests over chunk checksums) */
static void same_stores(const char *a, const char *b, uint32_t want)
{
    fg_store *sa, *sb;
    fg_err err;
    ck_assert_int_eq(fg_store_open(a, FG_STORE_RDONLY, NULL, &sa, &err), 0);
    ck_assert_int_eq(fg_store_open(b, FG_STORE_RDONLY, NULL, &sb, &err), 0);
    digest_ctx d = {sb, 0};
    ck_assert_int_eq(fg_store_tensor_iter(sa, same_digest, &d, &err), 0);
    ck_assert_uint_eq(d.same, want);
    void *data;
    size_t len;
    ck_assert_int_eq(fg_store_meta_get(sb, "tokenizer.merges_txt", &data, &len, &err), 0);
    free(data);
    fg_store_close(sa);
    fg_store_close(sb);
}

/* A store re-encoded by fg_convert_store: F16 -> F16 keeps every byte; F16 -> 4-bit equals a
 * 4-bit import of the same checkpoint; a 4-bit source is refused, naming the tensor, and
 * leaves nothing behind. */
START_TEST(store_to_store)
{
    char src[4096], tok[4096];
    snprintf(src, sizeof src, "%s/opt/opt-tiny-safetensors", FG_FIXTURE_DIR);
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts f16 = {0, 64, -1, tok, 0, NULL, NULL}, q4 = {1, 64, -1, tok, 0, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    ck_assert_int_eq(fg_convert_import(src, tu_path("f16"), &f16, &rep, &err), 0);
    ck_assert_int_eq(fg_convert_import(src, tu_path("q4"), &q4, &rep, &err), 0);
    ck_assert_msg(fg_convert_store(tu_path("f16"), tu_path("f16b"), &f16, &rep, &err) == 0, "%s",
                  err.msg);
    ck_assert_uint_eq(rep.tensors, 36);
    same_stores(tu_path("f16"), tu_path("f16b"), 36);
    ck_assert_msg(fg_convert_store(tu_path("f16"), tu_path("q4b"), &q4, &rep, &err) == 0, "%s",
                  err.msg);
    same_stores(tu_path("q4"), tu_path("q4b"), 36);
    ck_assert_int_eq(fg_convert_store(tu_path("q4"), tu_path("q4c"), &q4, &rep, &err),
                     FG_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "tensor '") && strstr(err.msg, "q4"), "%s", err.msg);
    ck_assert_int_ne(access(tu_path("q4c"), F_OK), 0);
    ck_assert_int_ne(fg_convert_store(tu_path("nowhere"), tu_path("x"), &q4, &rep, &err), 0);
    ck_assert_msg(strstr(err.msg, "nowhere") != NULL, "%s", err.msg);
    ck_assert_int_ne(access(tu_path("x"), F_OK), 0);
}
END_TEST

START_TEST(synth_has_real_shapes)
{
    char tok[4096];
    snprintf(tok, sizeof tok, "%s/data/gpt2-tokenizer", FG_SOURCE_DIR);
    fg_convert_opts o = {0, 0, -1, tok, 0, NULL, NULL};
    fg_convert_report rep;
    fg_err err;
    const char *dst = tu_path("synth");
    ck_assert_msg(fg_convert_synth("opt-125m", dst, 5, &o, &rep, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(rep.tensors, 12 * 16 + 4);
    fg_store *s;
    fg_store_tensor *t;
    ck_assert_int_eq(fg_store_open(dst, FG_STORE_RDONLY, NULL, &s, &err), 0);
    ck_assert_int_eq(fg_store_tensor_get(s, "model.decoder.layers.11.fc1.weight", &t, &err), 0);
    ck_assert_uint_eq(t->dims[0], 3072);
    ck_assert_uint_eq(t->dims[1], 768);
    fg_store_tensor_free(t);
    ck_assert_int_eq(fg_store_tensor_get(s, "model.decoder.embed_tokens.weight", &t, &err), 0);
    ck_assert_uint_eq(t->dims[0], 50272);
    fg_store_tensor_free(t);
    fg_store_close(s);
    ck_assert_int_eq(fg_convert_synth("opt-9b", tu_path("x"), 5, &o, &rep, &err),
                     FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "--model opt-9b: not a shape"), "%s", err.msg);
    char names[2048];
    fg_convert_synth_names(names, sizeof names); /* from the tables: every shape, tests last */
    ck_assert_msg(strstr(names, "opt-175b") && strstr(names, "qwen3-30b-a3b") &&
                  strstr(names, "(tests: opt-tiny, qwen3-moe-tiny)"), "%s", names);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("convert");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, safetensors_f16);
    tcase_add_test(tc, sharded_f16);
    tcase_add_test(tc, bin_f16);
    tcase_add_test(tc, bf16_bin_kept);
    tcase_add_test(tc, npy_f16);
    tcase_add_test(tc, m350_f16);
    tcase_add_test(tc, safetensors_q4);
    tcase_add_test(tc, synth_has_real_shapes);
    tcase_add_test(tc, store_to_store);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
