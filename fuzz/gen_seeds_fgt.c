/* gen_seeds_fgt.c - write a handful of small, valid .fgt files that exercise every feature of
 * the format (each metadata type, every codec, both group axes, an empty tensor, a 0-d tensor,
 * two generations) into a directory: the seed corpus for fuzz_fgt. Deterministic.
 * usage: gen_seeds_fgt DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgt.h"

static int add(fg_fgt_writer *w, const char *name, fg_codec codec, uint32_t n_dims,
               const uint64_t *dims, uint64_t rows_per_chunk, fg_err *err)
{
    fg_fgt_tensor_desc d = {name, codec, n_dims, dims, "src.key", 0x1234};
    int rc = fg_fgt_writer_begin_tensor(w, &d, err);
    uint64_t n = 1;
    for (uint32_t i = 0; i < n_dims; i++)
        n *= dims[i];
    uint64_t rows = n == 0 ? 0 : n_dims ? dims[0] : 1;
    for (uint64_t r = 0; rc == 0 && r < rows; r += rows_per_chunk) {
        uint64_t nr = rows - r < rows_per_chunk ? rows - r : rows_per_chunk, len;
        rc = fg_codec_chunk_bytes(&codec, n_dims, dims, nr, &len, err);
        uint8_t *buf = rc ? NULL : calloc(1, len);
        for (uint64_t i = 0; buf && i < len; i++)
            buf[i] = (uint8_t)(i * 7 + r);
        if (!rc)
            rc = buf ? fg_fgt_writer_add_chunk(w, nr, buf, len, err) : FG_ERR_NOMEM;
        free(buf);
    }
    return rc ? rc : fg_fgt_writer_end_tensor(w, err);
}

static int seed_meta(const char *path, fg_err *err)
{
    fg_fgt_writer *w;
    int rc = fg_fgt_writer_create(path, NULL, &w, err);
    if (rc)
        return rc;
    uint64_t arr[2] = {1, 2};
    const char *strs[2] = {"a", "\xc3\xa9"};
    static const uint64_t d[1] = {3};
    rc = fg_fgt_writer_meta_u64(w, "u", 1, err);
    if (!rc) rc = fg_fgt_writer_meta_i64(w, "i", -1, err);
    if (!rc) rc = fg_fgt_writer_meta_f64(w, "f", 0.5, err);
    if (!rc) rc = fg_fgt_writer_meta_str(w, "s", "str", err);
    if (!rc) rc = fg_fgt_writer_meta_bytes(w, "b", "\0\1", 2, err);
    if (!rc) rc = fg_fgt_writer_meta_array(w, "a", FG_META_I64, arr, 2, err);
    if (!rc) rc = fg_fgt_writer_meta_str_array(w, "sa", strs, 2, err);
    if (!rc) rc = add(w, "t", fg_codec_float(FG_CODEC_F32), 1, d, 3, err);
    if (rc) {
        fg_fgt_writer_abort(w);
        return rc;
    }
    return fg_fgt_writer_finish(w, err);
}

static int seed_codecs(const char *path, fg_err *err)
{
    fg_fgt_writer *w;
    int rc = fg_fgt_writer_create(path, NULL, &w, err);
    if (rc)
        return rc;
    static const uint64_t q[2] = {10, 16}, e[2] = {0, 4}, v[1] = {9};
    rc = add(w, "q4.ax1", fg_codec_quant(4, 8, 1), 2, q, 5, err);
    if (!rc) rc = add(w, "q8.ax0", fg_codec_quant(8, 8, 0), 2, q, 8, err);
    if (!rc) rc = add(w, "bf16", fg_codec_float(FG_CODEC_BF16), 1, v, 4, err);
    if (!rc) rc = add(w, "f16.empty", fg_codec_float(FG_CODEC_F16), 2, e, 1, err);
    if (!rc) rc = add(w, "scalar", fg_codec_float(FG_CODEC_F32), 0, NULL, 1, err);
    if (rc) {
        fg_fgt_writer_abort(w);
        return rc;
    }
    return fg_fgt_writer_finish(w, err);
}

static int seed_two_generations(const char *path, fg_err *err)
{
    static const uint64_t d[2] = {2, 2};
    fg_fgt_writer *w;
    int rc = fg_fgt_writer_create(path, NULL, &w, err);
    if (!rc) rc = add(w, "gen1", fg_codec_float(FG_CODEC_F16), 2, d, 1, err);
    if (!rc) rc = fg_fgt_writer_finish(w, err);
    if (!rc) rc = fg_fgt_writer_append(path, &w, err);
    if (!rc) rc = add(w, "gen2", fg_codec_float(FG_CODEC_F16), 2, d, 2, err);
    if (!rc) rc = fg_fgt_writer_finish(w, err);
    return rc;
}

/* SPEC.md's worked example: metadata general.name = "tiny", tensor "w" F32 [2, 2] in one chunk
 * holding 1.0, 2.0, -0.5, 0.25. */
static int seed_tiny(const char *path, fg_err *err)
{
    static const uint64_t d[2] = {2, 2};
    static const float v[4] = {1.0f, 2.0f, -0.5f, 0.25f};
    fg_fgt_tensor_desc desc = {"w", fg_codec_float(FG_CODEC_F32), 2, d, "w", 0};
    fg_fgt_writer *w;
    int rc = fg_fgt_writer_create(path, NULL, &w, err);
    if (rc)
        return rc;
    rc = fg_fgt_writer_meta_str(w, "general.name", "tiny", err);
    if (!rc) rc = fg_fgt_writer_begin_tensor(w, &desc, err);
    if (!rc) rc = fg_fgt_writer_add_chunk(w, 2, v, sizeof v, err);
    if (!rc) rc = fg_fgt_writer_end_tensor(w, err);
    if (rc) {
        fg_fgt_writer_abort(w);
        return rc;
    }
    return fg_fgt_writer_finish(w, err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds_fgt DIR\n");
        return 2;
    }
    char p[4][4096];
    snprintf(p[0], sizeof p[0], "%s/seed-meta.fgt", argv[1]);
    snprintf(p[1], sizeof p[1], "%s/seed-codecs.fgt", argv[1]);
    snprintf(p[2], sizeof p[2], "%s/seed-generations.fgt", argv[1]);
    snprintf(p[3], sizeof p[3], "%s/seed-tiny.fgt", argv[1]);
    for (int i = 0; i < 4; i++)
        remove(p[i]);
    fg_err err;
    if (seed_meta(p[0], &err) || seed_codecs(p[1], &err) || seed_two_generations(p[2], &err) ||
        seed_tiny(p[3], &err)) {
        fprintf(stderr, "gen_seeds_fgt: %s\n", err.msg);
        return 1;
    }
    return 0;
}
