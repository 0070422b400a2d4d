/* test_ckpt.c - the checkpoint reader against files written by safetensors, torch.save, numpy
 * and transformers (tests/fixtures/ckpt, made by tests/fixtures/make_ckpt_fixtures.py): names,
 * shapes, dtypes and values of every tensor read in pieces, F16 conversion bit-exact against
 * torch's .half(), one exact error per bad file, the OPT config and tensor-set checks. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt.h"
#include "quant.h"
#include "ckpt_int.h"
#include "fg_bytes.h"
#include "testutil.h"

#ifndef FG_CKPT_FIXTURES
#error "FG_CKPT_FIXTURES must name tests/fixtures/ckpt"
#endif

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static const char *fx(const char *name)
{
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", FG_CKPT_FIXTURES, name);
    return buf[k];
}

static fg_ckpt *open_ok(const char *name)
{
    fg_ckpt *ck;
    fg_err err;
    int rc = fg_ckpt_open(fx(name), &ck, &err);
    ck_assert_msg(rc == FG_OK, "%s: %s", name, err.msg);
    return ck;
}

static double elem(uint8_t dtype, const uint8_t *p)
{
    uint32_t x;
    float f;
    double d;
    switch (dtype) {
    case FG_CKPT_F32: x = fg_le32(p); memcpy(&f, &x, 4); return f;
    case FG_CKPT_F16: return fg_f16_to_f32_1(fg_le16(p));
    case FG_CKPT_BF16: return fg_ckpt_bf16_to_f32(fg_le16(p));
    case FG_CKPT_F64: { uint64_t y = fg_le64(p); memcpy(&d, &y, 8); return d; }
    case FG_CKPT_I64: return (double)(int64_t)fg_le64(p);
    }
    ck_abort_msg("bad dtype %u", dtype);
    return 0;
}

static uint8_t dtype_of(const char *s)
{
    for (uint8_t d = 1; d <= 5; d++)
        if (strcmp(fg_ckpt_dtype_name(d), s) == 0)
            return d;
    ck_abort_msg("dtype %s", s);
    return 0;
}

/* Read tensor i in pieces of `step` elements; compare with the recorded values and f16 bits. */
static void check_values(const fg_ckpt *ck, uint32_t i, json_t *exp, uint64_t step)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
    json_t *vals = json_object_get(exp, "values"), *bits = json_object_get(exp, "f16_bits");
    ck_assert_uint_eq(json_array_size(vals), t->n_elements);
    size_t el = fg_ckpt_dtype_size(t->dtype);
    uint8_t *buf = malloc(step * el);
    uint16_t *h = malloc(step * sizeof *h);
    fg_err err;
    for (uint64_t at = 0; at < t->n_elements; at += step) {
        uint64_t n = t->n_elements - at < step ? t->n_elements - at : step;
        ck_assert_msg(fg_ckpt_read(ck, i, at, n, buf, &err) == FG_OK, "%s", err.msg);
        for (uint64_t k = 0; k < n; k++)
            ck_assert_msg(elem(t->dtype, buf + k * el) == json_real_value(json_array_get(vals, at + k))
                              || elem(t->dtype, buf + k * el) ==
                                     (double)json_integer_value(json_array_get(vals, at + k)),
                          "%s[%llu]", t->name, (unsigned long long)(at + k));
        if (t->dtype == FG_CKPT_F64 || t->dtype == FG_CKPT_I64) {
            ck_assert_int_eq(fg_ckpt_to_f16(t->dtype, buf, n, h, NULL), FG_ERR_UNSUPPORTED);
            continue;
        }
        size_t bad;
        int rc = fg_ckpt_to_f16(t->dtype, buf, n, h, &bad);
        for (uint64_t k = 0; k < n; k++)
            ck_assert_msg(h[k] == json_integer_value(json_array_get(bits, at + k)),
                          "%s[%llu]: f16 %04x, torch %04llx", t->name, (unsigned long long)(at + k),
                          h[k], (unsigned long long)json_integer_value(json_array_get(bits, at + k)));
        ck_assert_int_eq(rc, bad < n ? FG_ERR_NONFINITE : FG_OK);
    }
    free(buf);
    free(h);
}

/* Every tensor of expected.json present with its dtype, shape and values, and nothing else. */
static void check_expected(const char *name)
{
    fg_ckpt *ck = open_ok(name);
    char path[1100];
    snprintf(path, sizeof path, "%s/expected.json", fx(name));
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *ts = json_object_get(root, "tensors");
    ck_assert_msg(root != NULL, "%s: %s", path, je.text);
    ck_assert_uint_eq(fg_ckpt_count(ck), json_object_size(ts));
    const char *key;
    json_t *exp;
    json_object_foreach(ts, key, exp) {
        uint32_t i;
        ck_assert_msg(fg_ckpt_find(ck, key, &i) == FG_OK, "%s: %s missing", name, key);
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
        ck_assert_str_eq(t->name, key);
        ck_assert_uint_eq(t->dtype, dtype_of(json_string_value(json_object_get(exp, "dtype"))));
        json_t *shape = json_object_get(exp, "shape");
        ck_assert_uint_eq(t->n_dims, json_array_size(shape));
        for (uint32_t d = 0; d < t->n_dims; d++)
            ck_assert_uint_eq(t->dims[d], json_integer_value(json_array_get(shape, d)));
        ck_assert_uint_eq(t->length, t->n_elements * fg_ckpt_dtype_size(t->dtype));
        ck_assert_ptr_eq(t->path, fg_ckpt_file_path(ck, t->file));
        ck_assert(t->offset + t->length <= fg_ckpt_file_size(ck, t->file));
        check_values(ck, i, exp, 3);
        check_values(ck, i, exp, t->n_elements ? t->n_elements : 1);
    }
    json_decref(root);
    fg_ckpt_close(ck);
}

START_TEST(safetensors_single_and_sharded)
{
    check_expected("st_single");
    check_expected("st_sharded");
    fg_ckpt *ck = open_ok("st_single");
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_SAFETENSORS);
    ck_assert_uint_eq(fg_ckpt_meta_count(ck), 1);
    const char *k, *v;
    ck_assert_int_eq(fg_ckpt_meta(ck, 0, &k, &v), FG_OK);
    ck_assert_str_eq(k, "format");
    ck_assert_str_eq(v, "pt");
    fg_ckpt_close(ck);
    ck = open_ok("st_sharded");
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_SAFETENSORS_SHARDED);
    ck_assert_uint_eq(fg_ckpt_file_count(ck), 2);
    ck_assert_ptr_nonnull(strstr(fg_ckpt_file_path(ck, 1), "model-00002-of-00002.safetensors"));
    fg_ckpt_close(ck);
}
END_TEST

START_TEST(torch_single_sharded_zip64)
{
    check_expected("bin_single");
    check_expected("bin_sharded");
    check_expected("bin_zip64");
    check_expected("bin_proto4");
    check_expected("bin_rezipped_comment");
    check_expected("bin_old_layout"); /* archive/, .data/version, no byteorder, unaligned */
    fg_ckpt *ck = open_ok("bin_single");
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_TORCH);
    uint32_t a, b;
    ck_assert_int_eq(fg_ckpt_find(ck, "view.row", &a), FG_OK);
    ck_assert_int_eq(fg_ckpt_find(ck, "view.all", &b), FG_OK);
    /* one storage, the row 4 floats in */
    ck_assert_uint_eq(fg_ckpt_tensor_at(ck, a)->offset, fg_ckpt_tensor_at(ck, b)->offset + 16);
    fg_ckpt_close(ck);
    ck = open_ok("bin_sharded");
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_TORCH_SHARDED);
    ck_assert_uint_eq(fg_ckpt_file_count(ck), 2);
    fg_ckpt_close(ck);
}
END_TEST

START_TEST(numpy_directory)
{
    check_expected("npy_dir");
    fg_ckpt *ck = open_ok("npy_dir");
    ck_assert_int_eq(fg_ckpt_kind_of(ck), FG_CKPT_NUMPY);
    ck_assert_uint_eq(fg_ckpt_file_count(ck), 5); /* notes.txt is not a tensor */
    uint32_t i;
    ck_assert_int_eq(fg_ckpt_find(ck, "scalar", &i), FG_OK);
    ck_assert_uint_eq(fg_ckpt_tensor_at(ck, i)->n_dims, 0);
    ck_assert_uint_eq(fg_ckpt_tensor_at(ck, i)->n_elements, 1);
    fg_ckpt_close(ck);
}
END_TEST

static void expect_fail(const char *name, int code, const char *needle)
{
    fg_ckpt *ck = (fg_ckpt *)1;
    fg_err err;
    int rc = fg_ckpt_open(fx(name), &ck, &err);
    ck_assert_msg(rc == code, "%s: got %d (%s), want %d", name, rc, err.msg, code);
    ck_assert_int_eq(err.code, code);
    ck_assert_ptr_null(ck);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "%s: '%s' lacks '%s'", name, err.msg, needle);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

START_TEST(bad_files_get_exact_errors)
{
    expect_fail("bad_st_twice", FG_ERR_DUPLICATE, "tensor w.f32 appears twice (in "
                "model-00001-of-00002.safetensors and model-00002-of-00002.safetensors)");
    expect_fail("bad_st_noshard", FG_ERR_NOT_FOUND, "model-00002-of-00002.safetensors: cannot open");
    expect_fail("bad_st_overlap", FG_ERR_OVERLAP, "overlap in the data section");
    expect_fail("bad_st_dtype", FG_ERR_BAD_ENUM, "tensor w.f16: dtype I16 is not one fg reads");
    expect_fail("bad_st_shape", FG_ERR_SIZE_MISMATCH, "tensor w.f32: shape x dtype is 36 bytes");
    expect_fail("bad_st_truncated", FG_ERR_OUT_OF_BOUNDS, "past the data section");
    expect_fail("bad_bin_compressed", FG_ERR_DISALLOWED, "/data/0 is compressed (method 8)");
    expect_fail("bad_bin_global", FG_ERR_DISALLOWED, "pickle reaches for disallowed global "
                "posix.system");
    expect_fail("bad_bin_eval", FG_ERR_DISALLOWED, "pickle reaches for disallowed global "
                "builtins.eval");
    expect_fail("bad_bin_crc", FG_ERR_CORRUPT, "zip entry pytorch_model/data.pkl: local header CRC "
                "or sizes differ from the central directory");
    expect_fail("bad_bin_noncontig", FG_ERR_UNSUPPORTED, "tensor wt has non-contiguous strides");
    expect_fail("bad_bin_short_storage", FG_ERR_SIZE_MISMATCH, "holds 20 bytes, the pickle says 6 "
                "elements of F32");
    expect_fail("bad_npy_fortran", FG_ERR_UNSUPPORTED, "w.npy: .npy fortran_order is True");
    expect_fail("bad_npy_truncated", FG_ERR_TRUNCATED, ".npy data needs 12 bytes, the file has 10");
    expect_fail("opt_tiny_np/no-such-dir", FG_ERR_NOT_FOUND, "no-such-dir");
}
END_TEST

/* ---- safetensors rules: tests/fixtures/ckpt/st_rules.json (checked against the reference
 * reader by tests/fixtures/check_st_rules.py); each case is built here and parsed. */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int code_named(const char *name)
{
    static const struct { const char *n; int c; } tab[] = {
        {"FG_ERR_CORRUPT", FG_ERR_CORRUPT}, {"FG_ERR_SIZE_MISMATCH", FG_ERR_SIZE_MISMATCH},
        {"FG_ERR_OVERLAP", FG_ERR_OVERLAP}, {"FG_ERR_OUT_OF_BOUNDS", FG_ERR_OUT_OF_BOUNDS},
        {"FG_ERR_OVERFLOW", FG_ERR_OVERFLOW}, {"FG_ERR_BAD_ENUM", FG_ERR_BAD_ENUM},
        {"FG_ERR_TRUNCATED", FG_ERR_TRUNCATED}, {"FG_ERR_LIMIT", FG_ERR_LIMIT},
    };
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
        if (!strcmp(tab[i].n, name))
            return tab[i].c;
    ck_abort_msg("st_rules.json: unknown code %s", name);
    return 0;
}

static size_t unhex(const char *h, uint8_t *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

/* The file a case describes (malloc'd), as check_st_rules.py builds it. */
static uint8_t *st_case_file(json_t *c, size_t *len)
{
    json_t *raw = json_object_get(c, "raw_hex"), *hx = json_object_get(c, "header_hex");
    json_t *hd = json_object_get(c, "header"), *n = json_object_get(c, "n");
    size_t data = (size_t)json_integer_value(json_object_get(c, "data"));
    uint8_t *f = calloc(1, 8 + 4096 + data);
    if (raw) {
        *len = unhex(json_string_value(raw), f);
        return f;
    }
    size_t hl = hx ? unhex(json_string_value(hx), f + 8) : strlen(json_string_value(hd));
    if (!hx)
        memcpy(f + 8, json_string_value(hd), hl);
    put_le64(f, n ? (uint64_t)json_integer_value(n) : hl);
    for (size_t i = 0; i < data; i++)
        f[8 + hl + i] = (uint8_t)i;
    *len = 8 + hl + data;
    return f;
}

START_TEST(safetensors_reference_rules)
{
    json_error_t je;
    json_t *root = json_load_file(fx("st_rules.json"), 0, &je);
    ck_assert_msg(root != NULL, "st_rules.json: %s", je.text);
    json_t *cases = json_object_get(root, "cases");
    ck_assert_uint_ge(json_array_size(cases), 40);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        size_t len;
        uint8_t *f = st_case_file(c, &len);
        ck_src src = {.mem = f, .fd = -1, .size = len, .label = "rule.safetensors"};
        ck_list l = {0};
        fg_err err = {0};
        int rc = ck_st_parse(&src, &l, &err);
        if (json_is_true(json_object_get(c, "accept"))) {
            ck_assert_msg(rc == FG_OK, "%s: refused: %s", name, err.msg);
            for (uint32_t k = 0; k < l.n; k++) /* every byte of the data section, once */
                ck_assert(l.t[k].offset + l.t[k].length <= len);
        } else {
            const char *msg = json_string_value(json_object_get(c, "msg"));
            int want = code_named(json_string_value(json_object_get(c, "code")));
            ck_assert_msg(rc == want, "%s: got %d (%s), want %d", name, rc, err.msg, want);
            ck_assert_msg(strstr(err.msg, msg) && !strncmp(err.msg, "rule.safetensors: ", 18),
                          "%s: '%s' lacks '%s'", name, err.msg, msg);
            ck_assert_ptr_null(strchr(err.msg, '\n'));
        }
        ck_list_free(&l);
        free(f);
    }
    json_decref(root);
}
END_TEST

/* The same rule through fg_ckpt_open on a real file: the exact file reads, one byte more (that
 * no tensor accounts for) is refused naming the file. */
START_TEST(safetensors_trailing_bytes_refused)
{
    const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    uint8_t f[128] = {0};
    size_t hl = strlen(h);
    put_le64(f, hl);
    memcpy(f + 8, h, hl);
    for (int extra = 0; extra < 2; extra++) {
        FILE *o = fopen(tu_path("model.safetensors"), "wb");
        fwrite(f, 1, 8 + hl + 8 + (size_t)extra, o);
        fclose(o);
        fg_ckpt *ck = NULL;
        fg_err err;
        int rc = fg_ckpt_open(tu_path("."), &ck, &err);
        if (!extra) {
            ck_assert_msg(rc == FG_OK, "%s", err.msg);
            ck_assert_uint_eq(fg_ckpt_count(ck), 1);
        } else {
            ck_assert_int_eq(rc, FG_ERR_SIZE_MISMATCH);
            ck_assert_msg(strstr(err.msg, "model.safetensors: 1 bytes after the last tensor at "
                                 "data offset 8 belong to no tensor"), "%s", err.msg);
        }
        fg_ckpt_close(ck);
    }
}
END_TEST

/* torch.load's layout rules (tests/fixtures/make_torch_rule_fixtures.py). */
START_TEST(torch_layout_rules)
{
    expect_fail("bad_bin_no_folder", FG_ERR_CORRUPT, "pytorch_model.bin: first zip entry data.pkl "
                "is not in a folder");
    expect_fail("bad_bin_outside", FG_ERR_CORRUPT, "zip entry notes/readme.txt is outside the "
                "archive folder pytorch_model/");
    expect_fail("bad_bin_no_version", FG_ERR_NOT_FOUND, "no pytorch_model/version or "
                "pytorch_model/.data/version record");
    expect_fail("bad_bin_version_new", FG_ERR_VERSION, "pytorch_model/version is 11; torch reads "
                "versions 1..10");
    expect_fail("bad_bin_version_text", FG_ERR_VERSION, "pytorch_model/version does not hold a "
                "version number");
    expect_fail("bad_bin_big_endian", FG_ERR_UNSUPPORTED, "pytorch_model/byteorder says "
                "big-endian");
    expect_fail("bad_bin_byteorder", FG_ERR_BAD_ENDIAN, "pytorch_model/byteorder is neither");
    expect_fail("bad_bin_preview", FG_ERR_UNSUPPORTED, "preview-release torch format");
}
END_TEST

/* A .npy file in memory: version major.minor, a dict padded with spaces to hlen bytes (with
 * its '\n'), one F32 element, then `extra` bytes. */
static int npy_case(uint8_t major, uint8_t minor, size_t hlen, size_t extra, fg_err *err)
{
    const char *d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    size_t pre = major == 1 ? 10 : 12;
    uint8_t *f = calloc(1, pre + hlen + 4 + extra);
    memcpy(f, "\x93NUMPY", 6);
    f[6] = major;
    f[7] = minor;
    if (major == 1) {
        f[8] = (uint8_t)hlen;
        f[9] = (uint8_t)(hlen >> 8);
    } else {
        put_le64(f + 8, hlen); /* u32 LE; the next 4 bytes are the header, overwritten below */
    }
    memset(f + pre, ' ', hlen);
    memcpy(f + pre, d, strlen(d));
    f[pre + hlen - 1] = '\n';
    ck_src src = {.mem = f, .fd = -1, .size = pre + hlen + 4 + extra, .label = "w.npy"};
    ck_list l = {0};
    int rc = ck_npy_parse(&src, "w", &l, err);
    ck_list_free(&l);
    free(f);
    return rc;
}

/* numpy.load's rules: versions (1,0), (2,0), (3,0); header <= 10,000 bytes. */
START_TEST(npy_reference_rules)
{
    fg_err err;
    ck_assert_int_eq(npy_case(1, 0, 118, 0, &err), FG_OK);
    ck_assert_int_eq(npy_case(3, 0, 10000, 0, &err), FG_OK);
    ck_assert_int_eq(npy_case(1, 1, 118, 0, &err), FG_ERR_VERSION);
    ck_assert_msg(strstr(err.msg, "w.npy: .npy format 1.1 is not 1.0, 2.0 or 3.0"), "%s", err.msg);
    ck_assert_int_eq(npy_case(4, 0, 116, 0, &err), FG_ERR_VERSION);
    ck_assert_int_eq(npy_case(2, 0, 10001, 0, &err), FG_ERR_LIMIT);
    ck_assert_msg(strstr(err.msg, "header of 10001 bytes (limit 10000)"), "%s", err.msg);
    ck_assert_int_eq(npy_case(1, 0, 118, 1, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_msg(strstr(err.msg, "w.npy: 1 bytes after the .npy data"), "%s", err.msg);
}
END_TEST

START_TEST(empty_dir_is_not_a_checkpoint)
{
    fg_ckpt *ck;
    fg_err err;
    ck_assert_int_eq(fg_ckpt_open(tu_path(""), &ck, &err), FG_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no checkpoint found"));
}
END_TEST

/* A FIFO in place of the index is named, not read (reading it would wait for a writer). */
START_TEST(index_fifo_is_not_waited_on)
{
    ck_assert_int_eq(mkfifo(tu_path("model.safetensors.index.json"), 0644), 0);
    fg_ckpt *ck;
    fg_err err;
    ck_assert_int_ne(fg_ckpt_open(tu_path(""), &ck, &err), FG_OK);
    ck_assert_msg(strstr(err.msg, "model.safetensors.index.json") && strstr(err.msg, "FIFO"),
                  "%s", err.msg);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    ck_assert(a && b);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, b), n);
    fclose(a);
    fclose(b);
}

START_TEST(read_range_hash_and_truncation)
{
    const char *dst = tu_path("model.safetensors");
    copy_file(fx("st_single/model.safetensors"), dst);
    fg_ckpt *ck;
    fg_err err;
    ck_assert_int_eq(fg_ckpt_open(tu_path(""), &ck, &err), FG_OK);
    /* hash: streamed XXH3 equals XXH3 of the whole file */
    struct stat st;
    ck_assert_int_eq(stat(dst, &st), 0);
    uint8_t *all = malloc((size_t)st.st_size);
    FILE *f = fopen(dst, "rb");
    ck_assert_uint_eq(fread(all, 1, (size_t)st.st_size, f), (size_t)st.st_size);
    fclose(f);
    uint64_t h;
    ck_assert_int_eq(fg_ckpt_file_xxh3(ck, 0, &h, &err), FG_OK);
    ck_assert_uint_eq(h, XXH3_64bits(all, (size_t)st.st_size));
    free(all);
    uint32_t i;
    ck_assert_int_eq(fg_ckpt_find(ck, "w.f32", &i), FG_OK);
    float v[6];
    ck_assert_int_eq(fg_ckpt_read(ck, i, 4, 3, v, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_ckpt_read(ck, 99, 0, 1, v, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_ckpt_read(ck, i, 6, 0, v, &err), FG_OK);
    ck_assert_int_eq(truncate(dst, st.st_size - 1), 0);
    ck_assert_int_eq(fg_ckpt_read(ck, i, 0, 6, v, &err), FG_ERR_TRUNCATED);
    ck_assert_ptr_nonnull(strstr(err.msg, "changed size"));
    fg_ckpt_close(ck);
}
END_TEST

/* A 5 GiB tensor in a sparse safetensors file: open reads only the header, and element reads
 * past 4 GiB land where they should. */
START_TEST(sparse_tensor_past_4gib)
{
    const uint64_t n = 5ull << 30 >> 1; /* F16 elements in 5 GiB */
    char hdr[256];
    int hl = snprintf(hdr, sizeof hdr, "{\"big\":{\"dtype\":\"F16\",\"shape\":[%llu],"
                      "\"data_offsets\":[0,%llu]}}", (unsigned long long)n,
                      (unsigned long long)(2 * n));
    int fd = open(tu_path("model.safetensors"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    uint8_t len[8];
    fg_put64(len, (uint64_t)hl);
    ck_assert_int_eq(pwrite(fd, len, 8, 0), 8);
    ck_assert_int_eq(pwrite(fd, hdr, (size_t)hl, 8), hl);
    uint64_t data = 8 + (uint64_t)hl;
    if (ftruncate(fd, (off_t)(data + 2 * n)) != 0) {
        close(fd);
        return; /* filesystem without sparse files of this size: nothing to test */
    }
    uint16_t mark[2] = {0x3c00, 0xc000}; /* 1.0, -2.0 at elements n-2, n-1 */
    ck_assert_int_eq(pwrite(fd, mark, 4, (off_t)(data + 2 * (n - 2))), 4);
    close(fd);
    fg_ckpt *ck;
    fg_err err;
    ck_assert_msg(fg_ckpt_open(tu_path(""), &ck, &err) == FG_OK, "%s", err.msg);
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, 0);
    ck_assert_uint_eq(t->n_elements, n);
    ck_assert_uint_eq(t->length, 5ull << 30);
    uint16_t got[3];
    ck_assert_int_eq(fg_ckpt_read(ck, 0, n - 3, 3, got, &err), FG_OK);
    ck_assert_uint_eq(got[0], 0);
    ck_assert_uint_eq(got[1], 0x3c00);
    ck_assert_uint_eq(got[2], 0xc000);
    fg_ckpt_close(ck);
}
END_TEST

START_TEST(f16_conversion)
{
    /* every finite half survives half -> float -> half */
    for (uint32_t x = 0; x < 65536; x++) {
        if ((x & 0x7c00u) == 0x7c00u)
            continue;
        ck_assert_uint_eq(fg_f32_to_f16_1(fg_f16_to_f32_1((uint16_t)x)), x);
    }
#ifdef __FLT16_MAX__
    /* against the compiler's own conversion over a spread of bit patterns */
    uint64_t s = 12345;
    for (int k = 0; k < 300000; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(s >> 32);
        float f;
        memcpy(&f, &bits, 4);
        if (f != f)
            continue;
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        ck_assert_msg(fg_f32_to_f16_1(f) == want, "%08x: %04x vs %04x", bits, fg_f32_to_f16_1(f), want);
    }
#endif
    float big[4] = {1.0f, 65504.0f, 70000.0f, -1e9f};
    uint16_t h[4];
    size_t bad = 99;
    ck_assert_int_eq(fg_ckpt_to_f16(FG_CKPT_F32, big, 4, h, &bad), FG_ERR_NONFINITE);
    ck_assert_uint_eq(bad, 2);
    ck_assert_uint_eq(h[1], 0x7bff);
    ck_assert_uint_eq(h[2], 0x7c00);
    ck_assert_uint_eq(h[3], 0xfc00);
    ck_assert_int_eq(fg_ckpt_to_f16(FG_CKPT_F32, big, 2, h, &bad), FG_OK);
    ck_assert_uint_eq(bad, 2);
    uint16_t bnan[2] = {0x3f80, 0x7fc0}; /* bf16 1.0, NaN */
    ck_assert_int_eq(fg_ckpt_to_f16(FG_CKPT_BF16, bnan, 2, h, &bad), FG_ERR_NONFINITE);
    ck_assert_uint_eq(bad, 1);
    ck_assert_uint_eq(h[0], 0x3c00);
}
END_TEST

static void pkl_fail(const void *p, size_t n, int code, const char *needle)
{
    ck_pkl_result r;
    fg_err err;
    int rc = ck_pkl_load(p, n, "t.pkl", &r, &err);
    ck_assert_msg(rc == code, "got %d (%s), want %d", rc, err.msg, code);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
    ck_assert_ptr_null(r.t);
}

#define PKL(s) s, sizeof(s) - 1

START_TEST(unpickler_rules)
{
    pkl_fail(PKL("\x80\x02(i__main__\nX\n."), FG_ERR_DISALLOWED, "opcode 0x69 at byte 3");
    pkl_fail(PKL("\x80\x02" "cbuiltins\ngetattr\n."), FG_ERR_DISALLOWED, "builtins.getattr");
    pkl_fail(PKL("\x80\x02h\x05."), FG_ERR_CORRUPT, "unset slot");
    pkl_fail(PKL("\x80\x02]."), FG_ERR_CORRUPT, "result is not a dict");
    pkl_fail(PKL("\x80\x02}X\x01\x00\x00\x00kK\x05s."), FG_ERR_CORRUPT,
             "state dict entry k is not a tensor");
    pkl_fail(PKL("\x80\x02}"), FG_ERR_TRUNCATED, "ends without STOP");
    pkl_fail(PKL("\x80\x02X\xff\x00\x00\x00" "ab."), FG_ERR_TRUNCATED, "past the end");
    pkl_fail(PKL("\x80\x09}."), FG_ERR_VERSION, "protocol");
    pkl_fail(PKL("\x80\x02}(Ns."), FG_ERR_CORRUPT, "stack underflow"); /* a mark hides the dict */
    pkl_fail(PKL("\x80\x02q\x00."), FG_ERR_CORRUPT, "stack underflow");
    pkl_fail(PKL("\x80\x02Nr\x00\x00\x00\x01."), FG_ERR_LIMIT, "memo index");
    pkl_fail(PKL("\x80\x02" "ccollections\nOrderedDict\nK\x01\x85R."), FG_ERR_CORRUPT,
             "OrderedDict called with arguments");
    /* a list appended to itself through the memo: no recursion, no leak (ASan) */
    pkl_fail(PKL("\x80\x02]q\x00h\x00" "a."), FG_ERR_CORRUPT, "result is not a dict");
    pkl_fail(PKL("\x80\x02}}."), FG_ERR_CORRUPT, "stack not empty");
    /* 2^20 + 1 marks: refused at the limit, not by exhausting memory */
    size_t n = (1u << 20) + 8;
    char *deep = malloc(n);
    memset(deep, '(', n);
    deep[0] = (char)0x80;
    deep[1] = 2;
    pkl_fail(deep, n, FG_ERR_LIMIT, "marks deeper than the limit");
    free(deep);
}
END_TEST

/* __metadata__ keys: the first value of a key wins (shards repeat their metadata), the count is
 * capped, and adding N keys costing O(N^2) key comparisons is gone: 4096 keys sharing an 8 KiB
 * prefix took minutes that way (the tcase's 20 s timeout catches a return of it). */
START_TEST(metadata_first_wins_linear)
{
    enum { PREFIX = 8192 };
    char *key = malloc(PREFIX + 16);
    memset(key, 'k', PREFIX);
    ck_list l = {0};
    fg_err err;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < CK_MAX_META; i++) {
            snprintf(key + PREFIX, 16, "%u", i);
            ck_assert_int_eq(ck_list_add_meta(&l, key, pass ? "second" : "first", &err), FG_OK);
        }
    ck_assert_uint_eq(l.n_meta, 2 * CK_MAX_META);
    for (uint32_t i = 0; i < l.n_meta; i += 2)
        ck_assert_str_eq(l.meta[i + 1], "first");
    snprintf(key + PREFIX, 16, "%u", CK_MAX_META);
    ck_assert_int_eq(ck_list_add_meta(&l, key, "v", &err), FG_ERR_LIMIT);
    ck_list_free(&l);
    free(key);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("ckpt");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, safetensors_single_and_sharded);
    tcase_add_test(tc, torch_single_sharded_zip64);
    tcase_add_test(tc, numpy_directory);
    tcase_add_test(tc, bad_files_get_exact_errors);
    tcase_add_test(tc, safetensors_reference_rules);
    tcase_add_test(tc, torch_layout_rules);
    tcase_add_test(tc, npy_reference_rules);
    tcase_add_test(tc, safetensors_trailing_bytes_refused);
    tcase_add_test(tc, empty_dir_is_not_a_checkpoint);
    tcase_add_test(tc, read_range_hash_and_truncation);
    tcase_add_test(tc, sparse_tensor_past_4gib);
    tcase_add_test(tc, f16_conversion);
    tcase_add_test(tc, unpickler_rules);
    tcase_add_test(tc, index_fifo_is_not_waited_on);
    suite_add_tcase(s, tc);
    TCase *fast = tcase_create("fast");
    tcase_set_timeout(fast, 20);
    tcase_add_test(fast, metadata_first_wins_linear);
    suite_add_tcase(s, fast);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
