/* test_format.c - .fgt writer/reader round trips, append generations, torn superblocks,
 * corruption detection, writer misuse, and chunks past 4 GiB in a sparse file. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgt.h"
#include "testutil.h"

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

typedef struct tspec {
    const char *name;
    fg_codec codec;
    uint32_t n_dims;
    uint64_t dims[FG_FGT_MAX_DIMS];
    uint64_t rows_per_chunk;
} tspec;

static uint64_t rows_of(const tspec *t)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->dims[d];
    return n == 0 ? 0 : t->n_dims ? t->dims[0] : 1;
}

static uint64_t chunk_seed(uint32_t tensor, uint64_t row) { return tensor * 1000003ull + row; }

/* Write tensors with deterministic payloads; returns FG_OK or the first error. */
static void write_tensors(fg_fgt_writer *w, const tspec *ts, uint32_t n)
{
    fg_err err;
    for (uint32_t i = 0; i < n; i++) {
        const tspec *t = &ts[i];
        fg_fgt_tensor_desc d = {t->name, t->codec, t->n_dims, t->dims, "src", 77};
        ck_assert_msg(fg_fgt_writer_begin_tensor(w, &d, &err) == FG_OK, "%s", err.msg);
        uint64_t rows = rows_of(t);
        for (uint64_t r = 0; r < rows; r += t->rows_per_chunk) {
            uint64_t nr = rows - r < t->rows_per_chunk ? rows - r : t->rows_per_chunk, len;
            ck_assert_int_eq(fg_codec_chunk_bytes(&t->codec, t->n_dims, t->dims, nr, &len, &err), 0);
            uint8_t *buf = malloc(len);
            tu_fill(buf, len, chunk_seed(i, r));
            ck_assert_msg(fg_fgt_writer_add_chunk(w, nr, buf, len, &err) == FG_OK, "%s", err.msg);
            free(buf);
        }
        ck_assert_msg(fg_fgt_writer_end_tensor(w, &err) == FG_OK, "%s", err.msg);
    }
}

static void check_tensors(const fg_fgt_reader *r, const tspec *ts, uint32_t n)
{
    fg_err err;
    for (uint32_t i = 0; i < n; i++) {
        const tspec *t = &ts[i];
        uint32_t idx;
        ck_assert_msg(fg_fgt_find(r, t->name, &idx) == FG_OK, "find %s", t->name);
        fg_fgt_tensor_info ti;
        ck_assert_int_eq(fg_fgt_tensor(r, idx, &ti), 0);
        ck_assert_str_eq(ti.name, t->name);
        ck_assert_str_eq(ti.source_name, "src");
        ck_assert_uint_eq(ti.source_hash, 77);
        ck_assert_int_eq(memcmp(&ti.codec, &t->codec, sizeof t->codec), 0);
        ck_assert_uint_eq(ti.n_dims, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            ck_assert_uint_eq(ti.dims[d], t->dims[d]);
        uint64_t row = 0;
        for (uint32_t c = 0; c < ti.n_chunks; c++) {
            fg_fgt_chunk_info ci;
            const void *p;
            ck_assert_int_eq(fg_fgt_chunk(r, idx, c, &ci), 0);
            ck_assert_uint_eq(ci.first_row, row);
            ck_assert_uint_eq(ci.offset % 4096, 0);
            ck_assert_msg(fg_fgt_chunk_data(r, idx, c, 1, &p, &err) == FG_OK, "%s", err.msg);
            uint8_t *want = malloc(ci.length);
            tu_fill(want, ci.length, chunk_seed(i, row));
            ck_assert_int_eq(memcmp(p, want, ci.length), 0);
            free(want);
            row += ci.n_rows;
        }
        ck_assert_uint_eq(row, rows_of(t));
    }
}

static const tspec k_awkward[] = {
    {"scalar", {FG_CODEC_F32}, 0, {0}, 1},
    {"vec.odd", {FG_CODEC_F16}, 1, {7}, 3},
    {"bf16.matrix", {FG_CODEC_BF16}, 2, {5, 3}, 2},
    {"f32.padding", {FG_CODEC_F32}, 2, {3, 1001}, 1},
    {"many.dims", {FG_CODEC_F16}, 8, {2, 1, 3, 1, 2, 1, 2, 3}, 1},
    {"empty.rows", {FG_CODEC_F32}, 2, {0, 5}, 1},
    {"empty.inner", {FG_CODEC_F16}, 3, {4, 0, 2}, 1},
    {"q4.lastaxis.partial", {0}, 2, {5, 100}, 2},
    {"q4.axis0.tail", {0}, 2, {130, 3}, 64},
    {"q8.vec", {0}, 1, {1000}, 256},
    {"q8.3d.last", {0}, 3, {3, 2, 33}, 1},
    {"q4.f32scales", {0}, 2, {8, 256}, 8},
};

static void awkward(tspec *out)
{
    memcpy(out, k_awkward, sizeof k_awkward);
    out[7].codec = fg_codec_quant(4, 64, 1);
    out[8].codec = fg_codec_quant(4, 64, 0);
    out[9].codec = fg_codec_quant(8, 256, 0);
    out[10].codec = fg_codec_quant(8, 32, 2);
    out[11].codec = fg_codec_quant(4, 128, 1);
    out[11].codec.scale_dtype = FG_SCALE_F32;
    out[11].codec.nibble_order = FG_NIBBLE_HI_FIRST;
}

#define N_AWKWARD (sizeof k_awkward / sizeof k_awkward[0])

START_TEST(roundtrip_every_codec_and_shape)
{
    tspec ts[N_AWKWARD];
    awkward(ts);
    fg_fgt_writer *w;
    fg_err err;
    const char *path = tu_path("a.fgt");
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    write_tensors(w, ts, N_AWKWARD);
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == 0, "%s", err.msg);
    fg_fgt_reader *r;
    ck_assert_msg(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(fg_fgt_tensor_count(r), N_AWKWARD);
    check_tensors(r, ts, N_AWKWARD);
    /* file order is kept */
    fg_fgt_tensor_info ti;
    fg_fgt_tensor(r, 3, &ti);
    ck_assert_str_eq(ti.name, "f32.padding");
    ck_assert_uint_eq(ti.payload_bytes, 3 * 1001 * 4);
    /* q4 along the last axis, [5, 100], g64, f16 scales: 5 rows x 2 groups x (4 + 32) bytes */
    uint32_t idx;
    fg_fgt_find(r, "q4.lastaxis.partial", &idx);
    fg_fgt_tensor(r, idx, &ti);
    ck_assert_uint_eq(ti.payload_bytes, 5 * 2 * 36);
    /* q4 along axis 0, [130, 3]: chunks of 64, 64, 2 rows -> 1 row-group x 3 columns each */
    fg_fgt_find(r, "q4.axis0.tail", &idx);
    fg_fgt_tensor(r, idx, &ti);
    ck_assert_uint_eq(ti.n_chunks, 3);
    ck_assert_uint_eq(ti.payload_bytes, 3 * 3 * 36);
    fg_fgt_find(r, "empty.rows", &idx);
    fg_fgt_tensor(r, idx, &ti);
    ck_assert_uint_eq(ti.n_chunks, 0);
    ck_assert_int_eq(fg_fgt_find(r, "nope", &idx), FG_ERR_NOT_FOUND);
    fg_fgt_close(r);
}
END_TEST

START_TEST(roundtrip_large_alignment)
{
    tspec ts[N_AWKWARD];
    awkward(ts);
    fg_fgt_writer *w;
    fg_err err;
    fg_fgt_writer_opts o = {1u << 16};
    const char *path = tu_path("a64k.fgt");
    ck_assert_int_eq(fg_fgt_writer_create(path, &o, &w, &err), 0);
    write_tensors(w, ts, 4);
    ck_assert_int_eq(fg_fgt_writer_finish(w, &err), 0);
    fg_fgt_reader *r;
    ck_assert_msg(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err) == 0, "%s", err.msg);
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    ck_assert_uint_eq(fi.alignment, 65536);
    for (uint32_t t = 0; t < 4; t++)
        for (uint32_t c = 0;; c++) {
            fg_fgt_chunk_info ci;
            if (fg_fgt_chunk(r, t, c, &ci))
                break;
            ck_assert_uint_eq(ci.offset % 65536, 0);
        }
    check_tensors(r, ts, 4);
    fg_fgt_close(r);
    o.alignment = 3000;
    ck_assert_int_eq(fg_fgt_writer_create(tu_path("bad.fgt"), &o, &w, &err), FG_ERR_BAD_ALIGN);
}
END_TEST

START_TEST(many_tensors_and_metadata)
{
    enum { N = 3000 };
    fg_fgt_writer *w;
    fg_err err;
    const char *path = tu_path("many.fgt");
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    uint64_t arr[3] = {1, 2, 3};
    double f = 0.25;
    const char *strs[3] = {"a", "", "\xc3\xa9t\xc3\xa9"};
    ck_assert_int_eq(fg_fgt_writer_meta_u64(w, "u", 42, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_i64(w, "i", -5, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_f64(w, "f", f, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_str(w, "s", "h\xc3\xa9llo", &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_bytes(w, "b", "\0\1\2", 3, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_array(w, "arr", FG_META_U64, arr, 3, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_str_array(w, "strs", strs, 3, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_u64(w, "u", 1, &err), FG_ERR_DUPLICATE);
    ck_assert_int_eq(fg_fgt_writer_meta_str(w, "bad", "\xff", &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_fgt_writer_meta_u64(w, "", 1, &err), FG_ERR_BAD_NAME);
    static tspec ts[N];
    static char names[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.w", (i * 7919) % N);
        ts[i] = (tspec){names[i], {FG_CODEC_F16}, 1, {(uint64_t)(i % 5 + 1)}, 2};
    }
    write_tensors(w, ts, N);
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == 0, "%s", err.msg);
    fg_fgt_reader *r;
    ck_assert_msg(fg_fgt_open(path, 0, &r, &err) == 0, "%s", err.msg);
    check_tensors(r, ts, N);
    fg_meta_info m;
    ck_assert_int_eq(fg_fgt_meta_find(r, "u", &m), 0);
    ck_assert_uint_eq(m.u64, 42);
    ck_assert_int_eq(fg_fgt_meta_find(r, "i", &m), 0);
    ck_assert_int_eq(m.i64, -5);
    ck_assert_int_eq(fg_fgt_meta_find(r, "f", &m), 0);
    ck_assert(m.f64 == 0.25);
    ck_assert_int_eq(fg_fgt_meta_find(r, "s", &m), 0);
    ck_assert_str_eq(m.data, "h\xc3\xa9llo");
    ck_assert_int_eq(fg_fgt_meta_find(r, "b", &m), 0);
    ck_assert_uint_eq(m.len, 3);
    ck_assert_int_eq(memcmp(m.data, "\0\1\2", 3), 0);
    ck_assert_int_eq(fg_fgt_meta_find(r, "arr", &m), 0);
    ck_assert_uint_eq(m.len, 3);
    ck_assert_uint_eq(fg_meta_array_u64(&m, 2), 3);
    ck_assert_int_eq(fg_fgt_meta_find(r, "strs", &m), 0);
    const uint8_t *cur = m.data;
    uint64_t seen = 0;
    const char *s;
    uint32_t len;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fg_meta_array_next_str(&m, &cur, &seen, &s, &len), 0);
        ck_assert_uint_eq(len, strlen(strs[i]));
        ck_assert_int_eq(memcmp(s, strs[i], len), 0);
    }
    ck_assert_int_eq(fg_meta_array_next_str(&m, &cur, &seen, &s, &len), -1);
    ck_assert_int_eq(fg_fgt_meta_find(r, "absent", &m), FG_ERR_NOT_FOUND);
    fg_fgt_close(r);
}
END_TEST

static void make_simple(const char *path, const tspec *ts, uint32_t n)
{
    fg_fgt_writer *w;
    fg_err err;
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_str(w, "gen", "one", &err), 0);
    write_tensors(w, ts, n);
    ck_assert_int_eq(fg_fgt_writer_finish(w, &err), 0);
}

static const tspec k_two[2] = {
    {"a", {FG_CODEC_F32}, 2, {4, 8}, 2},
    {"b", {FG_CODEC_F16}, 1, {9}, 4},
};

START_TEST(append_keeps_previous_generation)
{
    const char *path = tu_path("app.fgt");
    make_simple(path, k_two, 1);
    fg_fgt_writer *w;
    fg_err err;
    ck_assert_msg(fg_fgt_writer_append(path, &w, &err) == 0, "%s", err.msg);
    fg_fgt_tensor_desc again = {"a", k_two[0].codec, 2, k_two[0].dims, NULL, 0};
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &again, &err), FG_ERR_DUPLICATE);
    ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), FG_ERR_STATE);
    fg_fgt_writer_abort(w);

    ck_assert_int_eq(fg_fgt_writer_append(path, &w, &err), 0);
    tspec b = k_two[1];
    fg_fgt_tensor_desc d = {b.name, b.codec, b.n_dims, b.dims, "src", 77};
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), 0);
    uint8_t buf[18];
    tu_fill(buf, 8, chunk_seed(1, 0));
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 4, buf, 8, &err), 0);
    tu_fill(buf, 8, chunk_seed(1, 4));
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 4, buf, 8, &err), 0);
    tu_fill(buf, 2, chunk_seed(1, 8));
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 1, buf, 2, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_meta_str(w, "gen", "two", &err), FG_ERR_DUPLICATE);
    ck_assert_int_eq(fg_fgt_writer_meta_u64(w, "gen2", 2, &err), 0);
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == 0, "%s", err.msg);

    fg_fgt_reader *r;
    ck_assert_int_eq(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err), 0);
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    ck_assert_uint_eq(fi.generation, 2);
    ck_assert_int_eq(fi.slot, 0);
    check_tensors(r, k_two, 2);
    fg_meta_info m;
    ck_assert_int_eq(fg_fgt_meta_find(r, "gen", &m), 0);
    ck_assert_int_eq(fg_fgt_meta_find(r, "gen2", &m), 0);
    fg_fgt_close(r);

    /* torn write of generation 2's superblock (slot 0): the reader falls back to generation 1 */
    int fd = open(path, O_RDWR);
    uint8_t half[64];
    memset(half, 0xA5, sizeof half);
    ck_assert_int_eq(pwrite(fd, half, sizeof half, 64), (ssize_t)sizeof half);
    close(fd);
    ck_assert_msg(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err) == 0, "%s", err.msg);
    fg_fgt_file(r, &fi);
    ck_assert_uint_eq(fi.generation, 1);
    ck_assert_int_eq(fi.slot, 1);
    ck_assert_uint_eq(fg_fgt_tensor_count(r), 1);
    check_tensors(r, k_two, 1);
    fg_fgt_close(r);

    /* both slots torn: a clear error */
    fd = open(path, O_RDWR);
    ck_assert_int_eq(pwrite(fd, half, sizeof half, 4096 + 64), (ssize_t)sizeof half);
    close(fd);
    ck_assert_int_eq(fg_fgt_open(path, 0, &r, &err), FG_ERR_CHECKSUM);
    ck_assert_msg(strstr(err.msg, "no valid superblock"), "%s", err.msg);
}
END_TEST

START_TEST(abort_and_crash_leave_no_visible_tensor)
{
    const char *path = tu_path("ab.fgt");
    fg_fgt_writer *w;
    fg_err err;
    fg_fgt_reader *r;
    /* new file, abort: removed */
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    write_tensors(w, k_two, 2);
    fg_fgt_writer_abort(w);
    ck_assert_int_eq(access(path, F_OK), -1);
    /* new file, "crash" before finish (writer leaked, fd closed by exit): no valid superblock */
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    write_tensors(w, k_two, 2);
    ck_assert_int_eq(fg_fgt_open(path, 0, &r, &err), FG_ERR_BAD_MAGIC);
    fg_fgt_writer_abort(w);
    /* append aborted: file bytes restored, previous generation intact */
    make_simple(path, k_two, 1);
    struct stat st0, st1;
    stat(path, &st0);
    ck_assert_int_eq(fg_fgt_writer_append(path, &w, &err), 0);
    write_tensors(w, &k_two[1], 1);
    fg_fgt_writer_abort(w);
    stat(path, &st1);
    ck_assert_int_eq(st0.st_size, st1.st_size);
    ck_assert_int_eq(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err), 0);
    check_tensors(r, k_two, 1);
    fg_fgt_close(r);
    /* existing path is refused */
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), FG_ERR_EXISTS);
    ck_assert_int_eq(fg_fgt_open(tu_path("missing.fgt"), 0, &r, &err), FG_ERR_NOT_FOUND);
}
END_TEST

START_TEST(writer_refuses_misuse)
{
    fg_fgt_writer *w;
    fg_err err;
    ck_assert_int_eq(fg_fgt_writer_create(tu_path("m.fgt"), NULL, &w, &err), 0);
    uint64_t dims[2] = {130, 64};
    fg_fgt_tensor_desc d = {"q", fg_codec_quant(4, 64, 0), 2, dims, NULL, 0};
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 1, "x", 1, &err), FG_ERR_STATE);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_ERR_STATE);
    uint8_t buf[64 * 36 * 3];
    memset(buf, 0, sizeof buf);
    /* 32 rows is not a multiple of the group size 64 (and not the last chunk) */
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 32, buf, 64 * 36, &err), FG_ERR_BAD_ALIGN);
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 64, buf, 64 * 36 - 1, &err), FG_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 131, buf, 64 * 36, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 128, buf, 2 * 64 * 36, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), FG_ERR_STATE); /* 2 rows missing */
    ck_assert_int_eq(fg_fgt_writer_add_chunk(w, 2, buf, 64 * 36, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_end_tensor(w, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_ERR_DUPLICATE);
    d.name = "bad\nname";
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_ERR_BAD_NAME);
    d.name = "axis";
    d.codec.group_axis = 3;
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_ERR_BAD_ENUM);
    d.codec = fg_codec_quant(4, 48, 1);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), FG_ERR_LIMIT);
    uint64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    fg_fgt_tensor_desc d9 = {"nine", fg_codec_float(FG_CODEC_F32), 9, nine, NULL, 0};
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d9, &err), FG_ERR_LIMIT);
    uint64_t big[2] = {1ull << 30, 1ull << 30};
    fg_fgt_tensor_desc db = {"big", fg_codec_float(FG_CODEC_F32), 2, big, NULL, 0};
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &db, &err), FG_ERR_LIMIT);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d9, &err), FG_ERR_LIMIT);
    d.name = "open";
    d.codec = fg_codec_float(FG_CODEC_F16);
    ck_assert_int_eq(fg_fgt_writer_begin_tensor(w, &d, &err), 0);
    ck_assert_int_eq(fg_fgt_writer_finish(w, &err), FG_ERR_STATE); /* frees w, removes file */
    ck_assert_int_eq(access(tu_path("m.fgt"), F_OK), -1);
}
END_TEST

START_TEST(every_byte_flip_in_chunks_is_caught)
{
    const char *path = tu_path("flip.fgt");
    tspec ts[2] = {{"a", {FG_CODEC_F32}, 2, {3, 5}, 1}, {"b", {0}, 2, {2, 64}, 1}};
    ts[1].codec = fg_codec_quant(4, 32, 1);
    make_simple(path, ts, 2);
    int fd = open(path, O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    uint8_t *orig = malloc((size_t)st.st_size);
    ck_assert_int_eq(pread(fd, orig, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    fg_fgt_reader *r;
    fg_err err;
    ck_assert_int_eq(fg_fgt_open_mem(orig, (size_t)st.st_size, "flip", FG_FGT_OPEN_VERIFY, &r, &err), 0);
    uint8_t *copy = malloc((size_t)st.st_size);
    int flips = 0;
    for (uint32_t t = 0; t < 2; t++)
        for (uint32_t c = 0;; c++) {
            fg_fgt_chunk_info ci;
            if (fg_fgt_chunk(r, t, c, &ci))
                break;
            for (uint64_t b = ci.offset; b < ci.offset + ci.length; b++) {
                memcpy(copy, orig, (size_t)st.st_size);
                copy[b] ^= (uint8_t)(1u << (b % 8));
                fg_fgt_reader *r2;
                /* structure stays valid: open succeeds, verify names the chunk */
                ck_assert_int_eq(fg_fgt_open_mem(copy, (size_t)st.st_size, "flip", 0, &r2, &err), 0);
                uint32_t bt = 99, bc = 99;
                ck_assert_int_eq(fg_fgt_verify(r2, &bt, &bc, &err), FG_ERR_CHECKSUM);
                ck_assert_uint_eq(bt, t);
                ck_assert_uint_eq(bc, c);
                const void *p;
                ck_assert_int_eq(fg_fgt_chunk_data(r2, t, c, 1, &p, &err), FG_ERR_CHECKSUM);
                fg_fgt_close(r2);
                ck_assert_int_eq(fg_fgt_open_mem(copy, (size_t)st.st_size, "flip",
                                                 FG_FGT_OPEN_VERIFY, &r2, &err), FG_ERR_CHECKSUM);
                flips++;
            }
        }
    ck_assert_int_eq(flips, 3 * 5 * 4 + 2 * 2 * (4 + 16));
    /* any flip in the index is caught by the index checksum */
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    for (uint64_t b = fi.index_offset; b < fi.index_offset + fi.index_length; b++) {
        memcpy(copy, orig, (size_t)st.st_size);
        copy[b] ^= 0x10;
        fg_fgt_reader *r2;
        ck_assert_int_eq(fg_fgt_open_mem(copy, (size_t)st.st_size, "flip", 0, &r2, &err),
                         FG_ERR_CHECKSUM);
    }
    fg_fgt_close(r);
    free(copy);
    free(orig);
}
END_TEST

START_TEST(offsets_past_4gib_in_sparse_file)
{
    const char *path = tu_path("sparse.fgt");
    fg_fgt_writer *w;
    fg_err err;
    ck_assert_int_eq(fg_fgt_writer_create(path, NULL, &w, &err), 0);
    write_tensors(w, k_two, 1);
    ck_assert_int_eq(fg_fgt_writer_reserve(w, 5ull << 30, &err), 0);
    write_tensors(w, k_two + 1, 1);
    ck_assert_msg(fg_fgt_writer_finish(w, &err) == 0, "%s", err.msg);
    fg_fgt_reader *r;
    ck_assert_msg(fg_fgt_open(path, FG_FGT_OPEN_VERIFY, &r, &err) == 0, "%s", err.msg);
    fg_fgt_chunk_info ci;
    uint32_t idx;
    ck_assert_int_eq(fg_fgt_find(r, "b", &idx), 0);
    ck_assert_int_eq(fg_fgt_chunk(r, idx, 0, &ci), 0);
    ck_assert_uint_gt(ci.offset, 5ull << 30);
    fg_fgt_file_info fi;
    fg_fgt_file(r, &fi);
    ck_assert_uint_gt(fi.index_offset, 4ull << 30);
    fg_fgt_close(r);
    /* b's payload was written with the seed of tensor index 0 in its own write_tensors call */
    tspec b = k_two[1];
    ck_assert_int_eq(fg_fgt_open(path, 0, &r, &err), 0);
    const void *p;
    ck_assert_int_eq(fg_fgt_chunk_data(r, idx, 0, 1, &p, &err), 0);
    uint8_t want[8];
    tu_fill(want, 8, chunk_seed(0, 0));
    ck_assert_int_eq(memcmp(p, want, 8), 0);
    (void)b;
    fg_fgt_close(r);
    struct stat st;
    stat(path, &st);
    ck_assert_int_lt(st.st_blocks * 512, 1 << 20); /* really sparse */
}
END_TEST

START_TEST(codec_sizes)
{
    fg_err err;
    uint64_t n;
    uint64_t d2[2] = {10, 100};
    fg_codec q = fg_codec_quant(4, 64, 1);
    ck_assert_int_eq(fg_codec_chunk_bytes(&q, 2, d2, 10, &n, &err), 0);
    ck_assert_uint_eq(n, 10 * 2 * (2 + 2 + 32));
    q.scale_dtype = FG_SCALE_F32;
    ck_assert_int_eq(fg_codec_chunk_bytes(&q, 2, d2, 10, &n, &err), 0);
    ck_assert_uint_eq(n, 10 * 2 * (4 + 4 + 32));
    fg_codec q8 = fg_codec_quant(8, 32, 0);
    ck_assert_int_eq(fg_codec_chunk_bytes(&q8, 2, d2, 10, &n, &err), 0);
    ck_assert_uint_eq(n, 1 * 100 * (4 + 32));
    fg_qview v;
    ck_assert_int_eq(fg_codec_qview(&q8, 2, d2, 10, &v, &err), 0);
    ck_assert_int_eq(v.along_rows, 1);
    ck_assert_uint_eq(v.rows, 10);
    ck_assert_uint_eq(v.cols, 100);
    fg_codec f = fg_codec_float(FG_CODEC_BF16);
    ck_assert_int_eq(fg_codec_chunk_bytes(&f, 2, d2, 3, &n, &err), 0);
    ck_assert_uint_eq(n, 600);
    uint64_t huge[2] = {1ull << 40, 1ull << 40};
    ck_assert_int_eq(fg_codec_chunk_bytes(&f, 2, huge, 1ull << 40, &n, &err), FG_ERR_OVERFLOW);
    fg_codec bad = {.id = 9};
    ck_assert_int_eq(fg_codec_validate(&bad, 2, &err), FG_ERR_BAD_ENUM);
    ck_assert_int_eq(fg_codec_validate(&q, 0, &err), FG_ERR_UNSUPPORTED);
    ck_assert_str_eq(fg_strerror(FG_ERR_CHECKSUM), "checksum mismatch");
    ck_assert_str_eq(fg_strerror(-999), "unknown error");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("format");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, roundtrip_every_codec_and_shape);
    tcase_add_test(tc, roundtrip_large_alignment);
    tcase_add_test(tc, many_tensors_and_metadata);
    tcase_add_test(tc, append_keeps_previous_generation);
    tcase_add_test(tc, abort_and_crash_leave_no_visible_tensor);
    tcase_add_test(tc, writer_refuses_misuse);
    tcase_add_test(tc, every_byte_flip_in_chunks_is_caught);
    tcase_add_test(tc, offsets_past_4gib_in_sparse_file);
    tcase_add_test(tc, codec_sizes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
