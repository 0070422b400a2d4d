/* fg-sample - write a small .fgt file with one tensor of each codec and some metadata, so a
 * new user (and SPEC.md's worked example) can see the format without a model. Deterministic. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_version.h"
#include "fgt.h"
#include "tool_args.h"

static ta_opt k_opts[] = {
    {.kind = TA_HELP, .name = "help", .short_name = 'h', .help = "this text"},
    {.kind = TA_NOTE, .name = "version", .help = "the version and the build's features"},
    {0},
};

/* Any other usage prints the whole text on stderr (bad == NULL): there is one operand. */
static const ta_cmd k_cmd = {
    "fg-sample",
    "usage: fg-sample OUT.fgt\n"
    "Writes a small .fgt file (fg's tensor container, SPEC.md) holding one tensor of each codec\n"
    "(F16, F32, BF16, 4-bit and 8-bit groups) and some metadata, with deterministic contents, so\n"
    "the format can be seen without a model: fg-inspect OUT.fgt lists it.\n",
    k_opts, NULL, 0, NULL, NULL,
};

static uint32_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* Fill len bytes with deterministic bytes; for Q codecs this yields arbitrary (finite, since
 * the high exponent bits are masked) f16 scales and codes, enough to show the layout. */
static void fill(uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(rng(&seed) & 0x3f);
}

static int add(fg_fgt_writer *w, const char *name, fg_codec codec, uint32_t n_dims,
               const uint64_t *dims, uint64_t rows_per_chunk, fg_err *err)
{
    fg_fgt_tensor_desc d = {name, codec, n_dims, dims, name, 0};
    int rc = fg_fgt_writer_begin_tensor(w, &d, err);
    uint64_t rows = n_dims ? dims[0] : 1;
    for (uint64_t r = 0; rc == 0 && r < rows; r += rows_per_chunk) {
        uint64_t n = rows - r < rows_per_chunk ? rows - r : rows_per_chunk, len;
        rc = fg_codec_chunk_bytes(&codec, n_dims, dims, n, &len, err);
        uint8_t *buf = rc ? NULL : malloc(len);
        if (!rc && !buf)
            rc = FG_ERR_NOMEM;
        if (!rc) {
            fill(buf, len, r + 1);
            rc = fg_fgt_writer_add_chunk(w, n, buf, len, err);
        }
        free(buf);
    }
    return rc ? rc : fg_fgt_writer_end_tensor(w, err);
}

int main(int argc, char **argv)
{
    if (fg_version_flag(argc, argv, "fg-sample"))
        return 0;
    ta_init("fg-sample", 0);
    int first = argc == 2 ? ta_parse(&k_cmd, argc, argv) : 0;
    if (argc != 2 || first != 1 || argv[1][0] == '-') {
        ta_help(&k_cmd, stderr);
        return 2;
    }
    fg_fgt_writer *w;
    fg_err err;
    if (fg_fgt_writer_create(argv[1], NULL, &w, &err)) {
        fprintf(stderr, "fg-sample: %s\n", err.msg);
        return 1;
    }
    static const uint64_t emb[2] = {16, 8}, ln[1] = {8}, fc[2] = {128, 64};
    const char *const tags[2] = {"sample", "demo"};
    int rc = fg_fgt_writer_meta_str(w, "general.name", "fg sample", &err);
    if (!rc) rc = fg_fgt_writer_meta_u64(w, "sample.hidden_size", 8, &err);
    if (!rc) rc = fg_fgt_writer_meta_str_array(w, "sample.tags", tags, 2, &err);
    if (!rc) rc = add(w, "embed.weight", fg_codec_float(FG_CODEC_F16), 2, emb, 8, &err);
    if (!rc) rc = add(w, "ln.weight", fg_codec_float(FG_CODEC_F32), 1, ln, 8, &err);
    if (!rc) rc = add(w, "ln.bias", fg_codec_float(FG_CODEC_BF16), 1, ln, 8, &err);
    if (!rc) rc = add(w, "fc.weight.q4", fg_codec_quant(4, 64, 1), 2, fc, 64, &err);
    if (!rc) rc = add(w, "fc.weight.q8", fg_codec_quant(8, 64, 0), 2, fc, 64, &err);
    if (rc) {
        fprintf(stderr, "fg-sample: %s\n", err.msg);
        fg_fgt_writer_abort(w);
        return 1;
    }
    if (fg_fgt_writer_finish(w, &err)) {
        fprintf(stderr, "fg-sample: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s\n", argv[1]);
    if (fflush(stdout) || ferror(stdout)) { /* the file is whole; the report of it is lost */
        fprintf(stderr, "fg-sample: stdout: write error: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
