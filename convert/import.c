/* import.c - fg_convert_import and the tensor writer shared with synth.c (see convert.h).
 *
 * One tensor at a time, one chunk at a time: read rows_per_chunk rows of source elements,
 * convert them to F16 (or quantize the F16 rows to Q4 or Q8 groups), append the chunk to the store
 * batch. Buffers are sized for one chunk and reused, so peak memory is a few chunk sizes plus
 * the largest metadata file, independent of the checkpoint's size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fg_bytes.h"
#include "fg_file.h"
#include "convert.h"
#include "convert_int.h"
#include "gguf.h"
#include "fg_progress.h"
#include "chat.h"
#include "quant.h"
#include "tokenizer.h"

static int grow(void **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    void *q = realloc(*p, need);
    if (!q)
        return -1;
    *p = q;
    *cap = need;
    return 0;
}

fg_codec fgc_codec_for(const fg_convert_opts *o, uint32_t n_dims, uint8_t elem, int wide)
{
    if (!o->compress_weight || n_dims < 2 || wide)
        return fg_codec_float(elem == FG_CODEC_BF16 ? FG_CODEC_BF16 : FG_CODEC_F16);
    unsigned axis = o->group_axis < 0 ? FG_CONVERT_DEFAULT_AXIS : (unsigned)o->group_axis;
    return fg_codec_quant(o->compress_weight == 8 ? 8 : 4, o->group_size ? o->group_size : 64,
                          axis ? n_dims - 1 : 0);
}

/* Rows of a chunk: about chunk_bytes (4 MiB) of F16 rows, or, for Q4/Q8 groups along the input
 * axis, about that many stored bytes: the int8 path multiplies those chunks as stored (no f32
 * copy that must fit the cache), and batch-1 decode pays a fixed cost per chunk (a helper woken,
 * a pager acquire), which cost a 4-bit opt-1.3b 25% of its decode speed with chunks of 4 MiB of
 * F16 rows (1 MiB stored). Groups along axis 0 keep the F16 measure: those chunks are decoded to
 * f32 for sgemm into a buffer meant to stay in the cache. */
static uint64_t rows_per_chunk(const fgc_job *j, const fg_codec *c, uint32_t n_dims,
                               const uint64_t *dims)
{
    uint64_t cols = 1, target = j->o->chunk_bytes ? j->o->chunk_bytes : 4u << 20;
    for (uint32_t d = 1; d < n_dims; d++)
        cols *= dims[d];
    /* bytes per 16 values of a row: F16 32; Q4 8 and Q8 16, plus an F16 min and scale (4 bytes)
     * per group of G (64 / G, rounded down) */
    uint64_t per16 = 32;
    if ((c->id == FG_CODEC_Q4 || c->id == FG_CODEC_Q8) && n_dims >= 2 && c->group_axis != 0)
        per16 = (c->id == FG_CODEC_Q4 ? 8u : 16u) + 64u / c->group_size;
    uint64_t rows = n_dims ? dims[0] : 1, r = target * 16 / (cols ? cols * per16 : 1);
    r = r ? r : 1;
    uint64_t q = fg_codec_row_quantum(c, n_dims);
    r = (r + q - 1) / q * q;
    return r < rows ? r : rows;
}

/* A chunk's rows that stay inside one block of br rows (an expert is used alone: its weight is
 * whole chunks): br when step reaches it, else the largest divisor of br within step that the
 * codec's row quantum q divides (0: none) */
static uint64_t block_step(uint64_t step, uint64_t br, uint64_t q)
{
    if (step >= br)
        return br % q ? 0 : br;
    for (uint64_t d = step; d >= 1; d--)
        if (br % d == 0 && d % q == 0)
            return d;
    return 0;
}

int fgc_write_tensor(fgc_job *j, const fgc_tensor_src *src, fg_err *err)
{
    fg_codec c = fgc_codec_for(j->o, src->n_dims, src->elem, src->wide);
    fg_fgt_tensor_desc d = {src->name, c, src->n_dims, src->dims, src->source_name,
                            src->source_hash};
    int rc = fg_store_batch_begin_tensor(j->batch, &d, err);
    if (rc)
        return rc;
    uint64_t cols = 1, rows = src->n_dims ? src->dims[0] : 1;
    for (uint32_t k = 1; k < src->n_dims; k++)
        cols *= src->dims[k];
    uint64_t step = rows_per_chunk(j, &c, src->n_dims, src->dims);
    /* an expert's rows in whole chunks (a vector, gpt-oss's experts' biases, is read whole) */
    if (src->blocks > 1 && src->n_dims > 1 && rows % src->blocks == 0) {
        uint64_t q = fg_codec_row_quantum(&c, src->n_dims);
        step = block_step(step, rows / src->blocks, q ? q : 1);
        if (!step)
            return fg_err_set(err, FG_ERR_UNSUPPORTED, "tensor '%s': its %u blocks of %llu rows "
                              "cannot be stored in whole chunks of %s (groups of %llu rows)",
                              src->name, src->blocks,
                              (unsigned long long)(rows / src->blocks), fg_codec_name(c.id),
                              (unsigned long long)q);
    }
    for (uint64_t r = 0; rc == FG_OK && r < rows && cols; r += step) {
        uint64_t n = rows - r < step ? rows - r : step, elems = n * cols;
        if (grow((void **)&j->f16, &j->f16_cap, elems * 2))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory for a chunk of '%s'", src->name);
        const void *data = j->f16;
        size_t len = elems * 2;
        int direct = 0; /* the payload written from the source's blocks (qread) */
        if (!src->read) { /* all zero: a hole (zero bytes are value 0 in every codec) */
            fg_qview v;
            if (c.id == FG_CODEC_Q4 || c.id == FG_CODEC_Q8)
                rc = fg_codec_qview(&c, src->n_dims, src->dims, n, &v, err);
            if (rc == FG_OK && (c.id == FG_CODEC_Q4 || c.id == FG_CODEC_Q8))
                rc = fg_quant_chunk_bytes(&v, &len, err);
            data = NULL;
            direct = 1;
        } else if (c.id == FG_CODEC_Q4 || c.id == FG_CODEC_Q8) {
            fg_qview v;
            rc = fg_codec_qview(&c, src->n_dims, src->dims, n, &v, err);
            if (rc == FG_OK && fg_quant_chunk_bytes(&v, &len, err) == FG_OK &&
                grow((void **)&j->q, &j->q_cap, len))
                rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory quantizing '%s'", src->name);
            if (rc == FG_OK && src->qread) {
                rc = src->qread(src->ctx, &c, r, n, j->q, err);
                direct = rc == FG_OK;
                rc = rc == FG_ERR_UNSUPPORTED ? FG_OK : rc;
                data = j->q;
            }
        }
        if (rc == FG_OK && !direct)
            rc = src->read(src->ctx, r * cols, elems, j->f16, err);
        if (rc)
            break;
        if (!direct && (c.id == FG_CODEC_Q4 || c.id == FG_CODEC_Q8)) {
            fg_qview v;
            rc = fg_codec_qview(&c, src->n_dims, src->dims, n, &v, err);
            if (rc == FG_OK && fg_quant_chunk_bytes(&v, &len, err) == FG_OK &&
                grow((void **)&j->q, &j->q_cap, len))
                rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory quantizing '%s'", src->name);
            const void *in = j->f16;
            uint8_t in_dtype = FG_CODEC_F16;
            if (rc == FG_OK && src->elem == FG_CODEC_BF16) { /* widened exactly to F32 */
                if (grow((void **)&j->f32, &j->f32_cap, elems * 4))
                    rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory quantizing '%s'", src->name);
                for (uint64_t i = 0; rc == FG_OK && i < elems; i++) {
                    uint32_t bits = (uint32_t)j->f16[i] << 16;
                    memcpy(&j->f32[i], &bits, 4);
                }
                in = j->f32;
                in_dtype = FG_CODEC_F32;
            }
            if (rc == FG_OK)
                rc = fg_quant_encode(&c, &v, in, in_dtype, 0, j->q, len, FG_QUANT_ISA_AUTO, err);
            data = j->q;
        }
        if (rc == FG_OK)
            rc = fg_store_batch_add_chunk(j->batch, n, data, len, err);
        j->stored += len;
        j->done += elems * src->src_elem_bytes / (src->src_per ? src->src_per : 1);
        if (j->o->progress)
            j->o->progress(j->o->progress_ctx, j->done, j->total);
        if (rc == FG_OK && j->o->interrupt && *j->o->interrupt)
            rc = fg_err_set(err, FG_ERR_STATE, "%s: conversion interrupted", j->dst);
    }
    return rc ? rc : fg_store_batch_end_tensor(j->batch, err);
}

/* The bytes of dir/file as metadata blob key; check (may be NULL) must accept them first. */
static int meta_file(fgc_job *j, const char *key, const char *dir, const char *file, int optional,
                     int (*check)(const char *buf, size_t len, const char *path, void *ctx,
                                  fg_err *err),
                     void *ctx, fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *buf;
    size_t len;
    int rc = fg_read_regular(path, FG_STORE_META_MAX, &buf, &len, err); /* a FIFO is named */
    if (rc)
        return optional && rc == FG_ERR_NOT_FOUND ? FG_OK : rc;
    if (check)
        rc = check(buf, len, path, ctx, err);
    if (rc == FG_OK)
        rc = fg_store_batch_meta(j->batch, key, buf, len, err);
    free(buf);
    return rc;
}

int fgc_meta_file(fgc_job *j, const char *key, const char *dir, const char *file, int optional,
                  fg_err *err)
{
    return meta_file(j, key, dir, file, optional, NULL, NULL, err);
}

/* generation_config.json must parse (its eos_token_id is the engine's stop set) */
static int check_generation(const char *buf, size_t len, const char *path, void *ctx,
                            fg_err *err)
{
    fg_hparams hp = *(const fg_hparams *)ctx;
    return fg_model_generation_config_parse(buf, len, path, &hp, err);
}

/* dir/file's bytes into *buf (NULL when the file is absent) */
static int read_optional(const char *dir, const char *file, char **buf, size_t *len, fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    *buf = NULL;
    *len = 0;
    int rc = fg_read_regular(path, FG_STORE_META_MAX, buf, len, err);
    return rc == FG_ERR_NOT_FOUND ? FG_OK : rc;
}

/* The checkpoint's chat template (chat_template.jinja, else chat_template.json, else
 * tokenizer_config.json's chat_template; fg_chat_template_select) must parse: a template using
 * what fg's interpreter lacks fails the conversion here, naming its file, line and construct,
 * rather than the first chat request. No template at all is fine (a base model). */
static int check_chat_template(const char *dir, fg_err *err)
{
    static const char *const files[] = {"chat_template.jinja", "chat_template.json",
                                        "tokenizer_config.json"};
    char *buf[3] = {0};
    size_t len[3] = {0};
    int rc = FG_OK;
    for (int i = 0; i < 3 && rc == FG_OK; i++)
        rc = read_optional(dir, files[i], &buf[i], &len[i], err);
    char *src = NULL;
    int from = 2; /* the file the template came from, for the message */
    if (buf[0])
        from = 0;
    else if (rc == FG_OK && buf[1] &&
             fg_chat_template_select(NULL, 0, buf[1], len[1], NULL, 0, 0, &src, NULL) == FG_OK)
        from = 1;
    free(src);
    src = NULL;
    if (rc == FG_OK) {
        fg_err e = {0};
        rc = fg_chat_template_select(buf[0], len[0], buf[1], len[1], buf[2], len[2], 0, &src, &e);
        if (rc == FG_ERR_NOT_FOUND)
            rc = FG_OK; /* no template: a base model */
        else if (rc)
            fg_err_set(err, rc, "%s/%s", dir, e.msg);
    }
    if (rc == FG_OK && src) {
        fg_chat_template *t;
        fg_err e = {0};
        rc = fg_chat_template_parse(src, strlen(src), &t, &e);
        if (rc)
            fg_err_set(err, rc, "%s/%s: %s (fg's template interpreter cannot run it)", dir,
                       files[from], e.msg);
        fg_chat_template_free(t);
    }
    free(src);
    for (int i = 0; i < 3; i++)
        free(buf[i]);
    return rc;
}

/* The tokenizer files of dir as store metadata: tokenizer.json (+ tokenizer_config.json and
 * special_tokens_map.json) when dir has one, else tiktoken.model + the pattern of
 * tokenization_kimi.py (Kimi K2; + the same two), else GPT-2's vocab.json + merges.txt (+ the
 * same two); and chat_template.jinja / chat_template.json when present, once the chat template
 * (from them or tokenizer_config.json) has parsed. The files are loaded once here, so a tokenizer fg cannot use fails the conversion
 * naming its file rather than the first generation. */
int fgc_tokenizer_meta(fgc_job *j, const char *dir, fg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    int json = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/tiktoken.model", dir); /* Kimi K2: text/tok_tiktoken.c */
    int tt = !json && access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if (!json && !tt && access(path, F_OK) != 0) /* name the file today's checkpoints carry */
        return fg_err_set(err, FG_ERR_NOT_FOUND, "%s: no tokenizer.json (fg reads the checkpoint's "
                          "tokenizer from it: save it beside config.json with the tokenizer's "
                          "save_pretrained, or name its directory with --tokenizer DIR)", dir);
    fg_tok *tok = NULL;
    int rc = json ? fg_tok_load_json_dir(dir, &tok, err) : fg_tok_load_dir(dir, &tok, err);
    if (rc)
        return rc;
    const char *model = fg_tok_class(tok); /* SPEC T1: the class (a static string) */
    rc = fg_store_batch_meta(j->batch, "tokenizer.model", model, strlen(model), err);
    fg_tok_free(tok);
    if (!rc && json)
        rc = fgc_meta_file(j, "tokenizer.tokenizer_json", dir, "tokenizer.json", 0, err);
    if (!rc && tt)
        rc = fgc_meta_file(j, "tokenizer.tiktoken_model", dir, "tiktoken.model", 0, err);
    if (!rc && tt) { /* the split pattern tokenization_kimi.py sets (loaded above: it reads) */
        char *py = NULL, *pat = NULL;
        size_t pn = 0;
        rc = read_optional(dir, "tokenization_kimi.py", &py, &pn, err);
        if (!rc)
            rc = fg_tok_tiktoken_pattern(py, pn, "tokenization_kimi.py", &pat, err);
        if (!rc)
            rc = fg_store_batch_meta(j->batch, "tokenizer.tiktoken_pattern", pat, strlen(pat), err);
        free(py);
        free(pat);
    }
    if (!rc && !json && !tt)
        rc = fgc_meta_file(j, "tokenizer.vocab_json", dir, "vocab.json", 0, err);
    if (!rc && !json && !tt)
        rc = fgc_meta_file(j, "tokenizer.merges_txt", dir, "merges.txt", 0, err);
    if (!rc)
        rc = fgc_meta_file(j, "tokenizer.config_json", dir, "tokenizer_config.json", 1,
                           err);
    if (!rc)
        rc = fgc_meta_file(j, "tokenizer.special_tokens_map_json", dir, "special_tokens_map.json",
                           1, err);
    if (!rc)
        rc = check_chat_template(dir, err);
    if (!rc)
        rc = fgc_meta_file(j, "tokenizer.chat_template_jinja", dir, "chat_template.jinja", 1, err);
    if (!rc)
        rc = fgc_meta_file(j, "tokenizer.chat_template_json", dir, "chat_template.json", 1, err);
    return rc;
}

/* ---- store lifecycle ---- */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* The same below an -o directory that existed (empty: fg_store_create refuses any other), which
 * stays. */
static int rm_below(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    return ftw->level ? remove(p) : 0;
}

int fgc_begin(fgc_job *j, const char *dst, const fg_convert_opts *o, fg_err *err)
{
    memset(j, 0, sizeof *j);
    j->o = o;
    j->dst = dst;
    j->t0 = fg_now();
    struct stat st;
    j->created_dir = stat(dst, &st) != 0;
    int rc = fg_store_create(dst, NULL, &j->store, err);
    if (rc == FG_OK)
        rc = fg_store_batch_begin(j->store, &j->batch, err);
    return rc;
}

int fgc_end(fgc_job *j, int rc, fg_convert_report *rep, fg_err *err)
{
    if (rc == FG_OK) {
        rc = fg_store_batch_commit(j->batch, err);
        j->batch = NULL;
    }
    fg_store_batch_abort(j->batch);
    fg_store_close(j->store);
    if (rc && j->store) /* a failed conversion leaves no half store, in a dir of its own or not */
        nftw(j->dst, j->created_dir ? rm_one : rm_below, 16, FTW_DEPTH | FTW_PHYS);
    if (rep) {
        rep->tensors = j->tensors;
        rep->skipped = j->skipped;
        rep->unused = j->unused;
        rep->unused_mtp = 0; /* (import says) */
        rep->ggml_requant = j->ggml_requant;
        rep->source_bytes = j->done;
        rep->stored_bytes = j->stored;
        rep->seconds = fg_now() - j->t0;
    }
    free(j->f16);
    free(j->q);
    free(j->raw);
    free(j->f32);
    return rc;
}

/* ---- import ---- */

typedef struct ck_read_ctx {
    fgc_job *j;
    const fg_ckpt *ck;
    uint32_t index;
    uint64_t first;   /* element of the checkpoint tensor the canonical one starts at (a part
                         of a fused tensor starts past the parts before it) */
    const fgc_part *parts; /* a stacked tensor: where each block is (fgc_part) */
    uint64_t block;   /* ... of this many elements */
    uint64_t cols;    /* elements of a row */
    /* a strided block (gpt-oss's transposed experts): the span of the checkpoint tensor it
     * spreads over, read once and picked from (the reads come block by block, in order) */
    uint16_t *span;
    uint64_t span_cap, span_lo, span_n;
    uint32_t span_index;
    uint32_t perm_head, perm_rot, perm_off; /* an interleaved rotary layout
                                             * (fg_tensor_spec.perm_*) */
    int requant_counted; /* ck_qread counted this tensor in j->ggml_requant */
} ck_read_ctx;

static int ck_read_one(ck_read_ctx *c, uint32_t index, uint64_t first, uint64_t n,
                       uint16_t *out, fg_err *err);

/* Values [first, first + n) of an MXFP4 tensor (p: its blocks and scales; first and n
 * multiples of 32) as BF16: code x 2^(scale - 127), as transformers' dequantization (exact in
 * BF16 but where a product falls below its normals, rounded to nearest even). */
static int ck_read_mxfp4(ck_read_ctx *c, const fgc_part *p, uint64_t first, uint64_t n,
                         uint16_t *out, fg_err *err)
{
    static const float lut[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const fg_ckpt_tensor *st = fg_ckpt_tensor_at(c->ck, p->scales);
    if (grow(&c->j->raw, &c->j->raw_cap, n / 2 + n / 32))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'",
                          fg_ckpt_tensor_at(c->ck, p->index)->name);
    uint8_t *codes = (uint8_t *)c->j->raw, *exps = codes + n / 2;
    int rc = fg_ckpt_read(c->ck, p->index, first / 2, n / 2, codes, err);
    if (rc == FG_OK)
        rc = fg_ckpt_read(c->ck, p->scales, first / 32, n / 32, exps, err);
    for (uint64_t g = 0; rc == FG_OK && g < n / 32; g++) {
        if (exps[g] == 255) /* E8M0's NaN */
            return fg_err_set(err, FG_ERR_NONFINITE, "%s: tensor '%s' element %llu is 255 "
                              "(NaN in E8M0)", st->path, st->name,
                              (unsigned long long)(first / 32 + g));
        for (uint32_t i = 0; i < 32; i++) {
            uint8_t b = codes[g * 16 + i / 2];
            float v = ldexpf(lut[i % 2 ? b >> 4 : b & 15], (int)exps[g] - 127);
            uint32_t x;
            memcpy(&x, &v, 4);
            uint16_t h = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
            if ((h & 0x7f80u) == 0x7f80u) /* (only a scale of 128 or more gets there) */
                return fg_err_set(err, FG_ERR_NONFINITE, "%s: tensor '%s' element %llu: its "
                                  "scale %u makes a value infinite", st->path, st->name,
                                  (unsigned long long)(first / 32 + g), exps[g]);
            out[g * 32 + i] = h;
        }
    }
    return rc;
}

/* Elements [at, at + k) of a strided block p: its span read (once), then picked. */
static int ck_read_strided(ck_read_ctx *c, const fgc_part *p, uint64_t at, uint64_t k,
                           uint16_t *out, fg_err *err)
{
    uint64_t rows = c->block / c->cols;
    uint64_t n = (rows - 1) * p->rs + (c->cols - 1) * p->cs + 1; /* first .. its last element */
    if (c->span_index != p->index || c->span_lo != p->first || c->span_n != n) {
        if (n > c->span_cap) {
            uint16_t *b = realloc(c->span, n * sizeof *b);
            if (!b)
                return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'",
                                  fg_ckpt_tensor_at(c->ck, p->index)->name);
            c->span = b;
            c->span_cap = n;
        }
        c->span_n = 0; /* invalid until read */
        int rc = p->mxfp4 ? ck_read_mxfp4(c, p, p->first, n, c->span, err)
                          : ck_read_one(c, p->index, p->first, n, c->span, err);
        if (rc)
            return rc;
        c->span_index = p->index, c->span_lo = p->first, c->span_n = n;
    }
    for (uint64_t i = 0; i < k; i++) {
        uint64_t r = (at + i) / c->cols, col = (at + i) % c->cols;
        out[i] = c->span[r * p->rs + col * p->cs];
    }
    return FG_OK;
}

/* The checkpoint row that canonical row r is under an interleaved rotary layout: within each
 * head, rotate-half's i-th of the first half of the rotated dims is the (2i)-th, of the second
 * half the (2i + 1)-th; the dims past them stay. */
static uint64_t perm_row(const ck_read_ctx *c, uint64_t r)
{
    uint64_t h = r / c->perm_head, d = r % c->perm_head, half = c->perm_rot / 2;
    uint64_t o = c->perm_off; /* (the rotated rows' start in each head: MLA's) */
    if (d < o || d >= o + c->perm_rot)
        return r;
    d -= o;
    return h * c->perm_head + o + (d < half ? 2 * d : 2 * (d - half) + 1);
}

static int ck_read(void *ctx, uint64_t first, uint64_t n, uint16_t *out, fg_err *err)
{
    ck_read_ctx *c = ctx;
    int rc = FG_OK;
    while (!c->parts && c->perm_head && n && rc == FG_OK) { /* row by row, reordered */
        uint64_t r = first / c->cols, at = first % c->cols;
        uint64_t k = c->cols - at < n ? c->cols - at : n;
        rc = ck_read_one(c, c->index, c->first + perm_row(c, r) * c->cols + at, k, out, err);
        first += k;
        out += k;
        n -= k;
    }
    if (!c->parts && c->perm_head)
        return rc;
    if (!c->parts)
        return ck_read_one(c, c->index, first + c->first, n, out, err);
    while (n && rc == FG_OK) { /* block by block */
        uint64_t b = first / c->block, at = first % c->block;
        uint64_t k = c->block - at < n ? c->block - at : n;
        const fgc_part *p = &c->parts[b];
        rc = p->rs ? ck_read_strided(c, p, at, k, out, err)
                   : ck_read_one(c, p->index, p->first + at, k, out, err);
        first += k;
        out += k;
        n -= k;
    }
    return rc;
}

/* Rows [r0, r0 + n) of a GGUF Q8_0 / Q4_0 tensor as fg Q8 / Q4 groups of 32 along the row
 * with F16 scales, block for block: min -128 d (-8 d), scale d, code q + 128 (the nibble n), the
 * nibbles repacked in fg's order. fg's value min + code x scale (binary32) is then q x d exactly,
 * ggml's value (a zero's sign aside), where the F16 path rounds it. FG_ERR_UNSUPPORTED for
 * another codec or layout, a stacked tensor, or a block whose min is not an F16 (|d| > 511.75
 * for Q8_0, > 8188 for Q4_0; or d not finite): that chunk goes the F16 way. */
static int ck_qread(void *ctx, const fg_codec *cd, uint64_t r0, uint64_t n, uint8_t *out,
                    fg_err *err)
{
    ck_read_ctx *c = ctx;
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(c->ck, c->index);
    int q8 = t->dtype == FG_CKPT_Q8_0;
    if (!c->parts && (q8 || t->dtype == FG_CKPT_Q4_0) && cd->bits == (q8 ? 8 : 4) &&
        (cd->group_size != 32 || cd->group_axis != 1) && !c->requant_counted) {
        c->requant_counted = 1; /* (the layout, not the block: a block's d can refuse too) */
        c->j->ggml_requant++;
    }
    if (c->parts || !(q8 || t->dtype == FG_CKPT_Q4_0) || cd->bits != (q8 ? 8 : 4) ||
        cd->group_size != 32 || cd->group_axis != 1 || cd->scale_dtype != FG_SCALE_F16 ||
        cd->nibble_order != FG_NIBBLE_LO_FIRST || c->cols % 32)
        return FG_ERR_UNSUPPORTED;
    uint32_t bb = q8 ? 34 : 18, gb = q8 ? 36 : 20;
    uint64_t nb = c->cols / 32;
    if (grow(&c->j->raw, &c->j->raw_cap, nb * bb))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", t->name);
    uint8_t *raw = c->j->raw;
    for (uint64_t r = r0; r < r0 + n; r++) {
        uint64_t src = c->perm_head ? perm_row(c, r) : r;
        int rc = fg_ckpt_read(c->ck, c->index, c->first + src * c->cols, c->cols, raw, err);
        if (rc)
            return rc;
        for (uint64_t b = 0; b < nb; b++) {
            const uint8_t *in = raw + b * bb;
            uint8_t *g = out + ((r - r0) * nb + b) * gb;
            float d = fg_f16_to_f32_1(fg_le16(in)), m = d * (q8 ? -128.0f : -8.0f);
            uint16_t mh = fg_f32_to_f16_1(m);
            if (!isfinite(m) || fg_f16_to_f32_1(mh) != m)
                return FG_ERR_UNSUPPORTED;
            fg_put16(g, mh);
            memcpy(g + 2, in, 2); /* the scale: d's bits */
            for (int i = 0; q8 && i < 32; i++)
                g[4 + i] = (uint8_t)((int)(int8_t)in[2 + i] + 128);
            for (int i = 0; !q8 && i < 16; i++) { /* fg code 2i low, 2i + 1 high */
                int lo = 2 * i < 16 ? in[2 + 2 * i] & 15 : in[2 + 2 * i - 16] >> 4;
                int hi = 2 * i + 1 < 16 ? in[3 + 2 * i] & 15 : in[3 + 2 * i - 16] >> 4;
                g[4 + i] = (uint8_t)(lo | hi << 4);
            }
        }
    }
    return FG_OK;
}

static int ck_read_one(ck_read_ctx *c, uint32_t index, uint64_t first, uint64_t n,
                       uint16_t *out, fg_err *err)
{
    const fg_ckpt_tensor *t = fg_ckpt_tensor_at(c->ck, index);
    size_t es = fg_ckpt_dtype_size(t->dtype);
    if (t->join) /* GGUF deepseek2's kv_b_proj from attn_k_b and attn_v_b */
        return ck_gguf_read_kvb(c->ck, index, first, n, out, err);
    if (t->dtype == FG_CKPT_F8_E4M3) /* block-scaled FP8, as BF16 (fp8.c) */
        return ck_fp8_read_bf16(c->ck, index, first, n, out, &c->j->raw, &c->j->raw_cap, err);
    if (ck_dtype_is_block(t->dtype) || t->shift != 0) /* GGUF: blocks dequantized, Gemma's norms */
        return ck_gguf_read_f16(c->ck, index, first, n, out, &c->j->raw, &c->j->raw_cap, err);
    if (t->dtype == FG_CKPT_F16 || t->dtype == FG_CKPT_BF16) /* kept bit for bit */
        return fg_ckpt_read(c->ck, index, first, n, out, err);
    if (grow(&c->j->raw, &c->j->raw_cap, n * es))
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory reading '%s'", t->name);
    int rc = fg_ckpt_read(c->ck, index, first, n, c->j->raw, err);
    if (rc)
        return rc;
    size_t bad = 0;
    rc = fg_ckpt_to_f16(t->dtype, c->j->raw, n, out, &bad);
    if (rc == FG_ERR_UNSUPPORTED)
        return fg_err_set(err, rc, "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 "
                          "weights convert", t->path, t->name, fg_ckpt_dtype_name(t->dtype));
    if (rc)
        return fg_err_set(err, rc, "%s: tensor '%s' element %llu is not finite in F16",
                          t->path, t->name, (unsigned long long)(first + bad));
    return FG_OK;
}

/* The checkpoint tensor of a source (a stacked one's first block) */
static uint32_t first_part(const fgc_source *s)
{
    return s->index == FGC_STACKED ? s->parts[0].index : s->index;
}

/* Source bytes of n elements of dtype (GGUF's blocks: a share of their block's bytes) */
static uint64_t src_bytes(uint8_t dtype, uint64_t n)
{
    uint32_t be, bb;
    return ck_dtype_block(dtype, &be, &bb) ? n * bb / be : 0;
}

static int import_tensors(fgc_job *j, const fg_ckpt *ck, const fg_hparams *hp,
                          const fgc_source *from, fg_err *err)
{
    fg_tensor_spec *spec;
    uint32_t n_spec;
    int rc = fg_model_tensors(hp, &spec, &n_spec, err);
    if (rc)
        return rc;
    uint64_t hashes[FG_CKPT_MAX_FILES] = {0};
    for (uint32_t s = 0; s < n_spec; s++) /* a tied LM head is the embedding: not stored */
        if (from[s].index != FGC_NONE && !spec[s].fallback[0])
            j->total += src_bytes(fg_ckpt_tensor_at(ck, first_part(&from[s]))->dtype,
                                  spec[s].dims[0] * fg_tensor_spec_cols(&spec[s]));
    for (uint32_t s = 0; rc == FG_OK && s < n_spec; s++) {
        uint32_t i = from[s].index;
        if (i == FGC_NONE || spec[s].fallback[0])
            continue; /* tied LM head: the engine uses the embedding */
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, first_part(&from[s]));
        if (!hashes[t->file] && (rc = fg_ckpt_file_xxh3(ck, t->file, &hashes[t->file], err)))
            break;
        /* (a stacked one's blocks agree: model_check.c; MXFP4 values are BF16's) */
        int bf16 = ck_gguf_bf16(t->dtype) || t->dtype == FG_CKPT_F8_E4M3 ||
                   (i == FGC_STACKED && from[s].parts[0].mxfp4);
        ck_read_ctx rc_ctx = {j, ck, i, from[s].row0 * fg_tensor_spec_cols(&spec[s]),
                              i == FGC_STACKED ? from[s].parts : NULL,
                              spec[s].blocks ? spec[s].dims[0] / spec[s].blocks *
                                               fg_tensor_spec_cols(&spec[s]) : 0,
                              fg_tensor_spec_cols(&spec[s]), NULL, 0, 0, 0, 0,
                              spec[s].perm_head, spec[s].perm_rot, spec[s].perm_off};
        fgc_tensor_src src = {spec[s].name, t->source, hashes[t->file], spec[s].n_dims,
                              {spec[s].dims[0], spec[s].dims[1]}, src_bytes(t->dtype, 1024),
                              bf16 ? FG_CODEC_BF16 : FG_CODEC_F16, ck_read, &rc_ctx,
                              spec[s].blocks, fg_role_stays_wide(spec[s].role), 1024,
                              i == FGC_STACKED ? NULL : ck_qread};
        rc = fgc_write_tensor(j, &src, err);
        free(rc_ctx.span);
        j->tensors += rc == FG_OK;
    }
    free(spec);
    return rc;
}

/* hp from src/config.json, or for a GGUF file from its metadata (*json: the config.json
 * synthesized, stored in its place), or for an FP8 checkpoint from its config.json less
 * quantization_config (*json: that text). */
static int load_config(const fg_ckpt *ck, const char *src,
                       fg_hparams *hp, char **json, size_t *len, fg_err *err)
{
    const ck_gguf *g = ck_gguf_of(ck);
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", src);
    if (!g && ck_fp8_has(ck)) { /* FP8 block-scaled: stored as BF16, the config says so */
        int rc = ck_fp8_config(src, json, len, err);
        return rc ? rc : fg_model_config_parse(*json, *len, cfg_path, hp, err);
    }
    if (!g)
        return fg_model_config_load(cfg_path, hp, err);
    int interleaved = 0, fd = open(src, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fg_err_set(err, FG_ERR_IO, "%s: cannot open: %s", src, strerror(e));
    }
    ck_src s = {.fd = fd, .size = (uint64_t)st.st_size, .label = src}; /* (array values) */
    int rc = ck_gguf_config(g, ck, &s, src, json, len, &interleaved, err);
    close(fd);
    if (rc == FG_OK)
        rc = fg_model_config_parse(*json, *len, src, hp, err);
    hp->rope_interleaved |= interleaved; /* llama.cpp's Q/K row order, undone at conversion */
    return rc;
}

/* A GGUF file's tokenizer (gguf_tok.c: its tokenizer.ggml.* metadata as tokenizer.json +
 * tokenizer_config.json, malloc'd into t), loaded once here so a tokenizer fg cannot use, or a
 * chat template its interpreter cannot run, fails the conversion before the store is made. */
typedef struct gguf_tok {
    char *json, *cfg;
    size_t json_len, cfg_len;
    const char *cls; /* fg_tok_class: a static string */
} gguf_tok;

static int gguf_tok_check(const gguf_tok *t, const char *src, fg_err *err)
{
    char *tpl = NULL;
    fg_err e = {0};
    int rc = fg_chat_template_select(NULL, 0, NULL, 0, t->cfg, t->cfg_len, 0, &tpl, &e);
    if (rc == FG_ERR_NOT_FOUND)
        return FG_OK; /* no template: a base model */
    if (rc)
        return fg_err_set(err, rc, "%s: tokenizer.chat_template: %s", src, e.msg);
    fg_chat_template *ct = NULL;
    rc = fg_chat_template_parse(tpl, strlen(tpl), &ct, &e);
    if (rc)
        fg_err_set(err, rc, "%s: tokenizer.chat_template: %s (fg's template interpreter cannot "
                   "run it)", src, e.msg);
    fg_chat_template_free(ct);
    free(tpl);
    return rc;
}

static int gguf_tok_make(const ck_gguf *g, const char *src, gguf_tok *t, fg_err *err)
{
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fg_err_set(err, FG_ERR_IO, "%s: cannot open: %s", src, strerror(e));
    }
    ck_src s = {.fd = fd, .size = (uint64_t)st.st_size, .label = src};
    fg_tok *tok = NULL;
    int rc = ck_gguf_tokenizer(g, &s, &t->json, &t->json_len, &t->cfg, &t->cfg_len, &tok, err);
    close(fd);
    if (rc == FG_OK)
        t->cls = fg_tok_class(tok);
    fg_tok_free(tok);
    return rc ? rc : gguf_tok_check(t, src, err);
}

static int gguf_tok_store(fgc_job *j, const gguf_tok *t, fg_err *err)
{
    int rc = fg_store_batch_meta(j->batch, "tokenizer.model", t->cls, strlen(t->cls), err);
    if (rc == FG_OK)
        rc = fg_store_batch_meta(j->batch, "tokenizer.tokenizer_json", t->json, t->json_len, err);
    if (rc == FG_OK)
        rc = fg_store_batch_meta(j->batch, "tokenizer.config_json", t->cfg, t->cfg_len, err);
    return rc;
}

int fg_convert_import(const char *src, const char *dst, const fg_convert_opts *o,
                      fg_convert_report *rep, fg_err *err)
{
    fg_ckpt *ck;
    int rc = fg_ckpt_open(src, &ck, err);
    if (rc)
        return rc;
    fg_hparams hp;
    fgc_source *from = NULL;
    fgc_skips skips = {0, 0};
    char *cfg_json = NULL;
    size_t cfg_len = 0;
    gguf_tok gt = {0};
    rc = load_config(ck, src, &hp, &cfg_json, &cfg_len, err);
    if (rc == FG_OK && ck_gguf_of(ck) && !o->tokenizer_dir) /* a GGUF file: its own tokenizer */
        rc = gguf_tok_make(ck_gguf_of(ck), src, &gt, err);
    if (rc == FG_OK && !(from = calloc((size_t)fg_model_n_units(&hp) * FG_UNIT_MAX_TENSORS,
                                       sizeof *from)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = fg_convert_check_ckpt(&hp, ck, from, &skips, err);
    fgc_job j;
    if (rc == FG_OK) {
        rc = fgc_begin(&j, dst, o, err);
        j.skipped = skips.derived;
        j.unused = skips.unused;
        if (rc == FG_OK)
            rc = cfg_json ? fg_store_batch_meta(j.batch, "model.config_json", cfg_json, cfg_len,
                                                err)
                          : fgc_meta_file(&j, "model.config_json", src, "config.json", 0, err);
        if (rc == FG_OK && !ck_gguf_of(ck))
            rc = meta_file(&j, "model.generation_config_json", src, "generation_config.json", 1,
                           check_generation, &hp, err);
        if (rc == FG_OK)
            rc = gt.json ? gguf_tok_store(&j, &gt, err)
                         : fgc_tokenizer_meta(&j, o->tokenizer_dir ? o->tokenizer_dir : src, err);
        if (rc == FG_OK)
            rc = import_tensors(&j, ck, &hp, from, err);
        rc = fgc_end(&j, rc, rep, err);
        if (rep)
            rep->unused_mtp = hp.mtp_layers > 0;
    }
    if (from)
        fgc_sources_free(from, fg_model_n_units(&hp) * FG_UNIT_MAX_TENSORS);
    free(from);
    free(cfg_json);
    free(gt.json);
    free(gt.cfg);
    fg_ckpt_close(ck);
    return rc;
}
