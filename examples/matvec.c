/* examples/matvec.c - an out-of-core y = A x that is not a language model, on format + pager.
 *
 * It shows how another application reuses the pager unchanged: the matrix A lives in a .fgt
 * file (one f32 tensor "A" [rows, cols], split into row blocks, each block one chunk); the
 * program registers every chunk with fg_pager_add_fgt, then streams them through a HOST budget
 * several times smaller than A, prefetching as far ahead as the budget allows while it
 * computes the rows of the block it holds. x and y stay in ordinary memory.
 *
 *   fg_matvec create FILE ROWS COLS ROWS_PER_CHUNK   write A (deterministic values)
 *   fg_matvec run FILE HOST_KIB [--check]            y = A x through the pager; --check also
 *                                                    computes y directly (mmap reader) and
 *                                                    exits 1 unless both agree exactly
 *
 * Exact agreement is expected: both paths sum each row in the same order in double.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fg/pager.h>

static int fail(const char *what, const fg_err *e)
{
    fprintf(stderr, "fg_matvec: %s: %s\n", what, e->msg);
    return 1;
}

static float a_value(uint64_t r, uint64_t c) { return (float)((r * 31 + c * 17) % 97) / 97.0f - 0.5f; }
static float x_value(uint64_t c) { return (float)(c % 13) / 13.0f; }

static int create(const char *path, uint64_t rows, uint64_t cols, uint64_t per)
{
    fg_err err;
    fg_fgt_writer *w;
    uint64_t dims[2] = {rows, cols};
    if (fg_fgt_writer_create(path, NULL, &w, &err))
        return fail("create", &err);
    fg_fgt_tensor_desc d = {"A", fg_codec_float(FG_CODEC_F32), 2, dims, NULL, 0};
    float *buf = malloc(per * cols * sizeof *buf);
    int rc = buf ? fg_fgt_writer_begin_tensor(w, &d, &err) : FG_ERR_NOMEM;
    for (uint64_t r0 = 0; rc == FG_OK && r0 < rows; r0 += per) {
        uint64_t n = rows - r0 < per ? rows - r0 : per;
        for (uint64_t i = 0; i < n; i++)
            for (uint64_t c = 0; c < cols; c++)
                buf[i * cols + c] = a_value(r0 + i, c);
        rc = fg_fgt_writer_add_chunk(w, n, buf, n * cols * sizeof *buf, &err);
    }
    free(buf);
    if (rc == FG_OK)
        rc = fg_fgt_writer_end_tensor(w, &err);
    if (rc) {
        fg_fgt_writer_abort(w);
        return fail(path, &err);
    }
    if (fg_fgt_writer_finish(w, &err))
        return fail(path, &err);
    printf("wrote %s: A [%llu, %llu] f32, %llu rows per chunk\n", path, (unsigned long long)rows,
           (unsigned long long)cols, (unsigned long long)per);
    return 0;
}

/* rows [r0, r0+n) of y from a block of A */
static void block_matvec(const float *a, uint64_t n, uint64_t cols, const float *x, double *y)
{
    for (uint64_t i = 0; i < n; i++) {
        double s = 0;
        for (uint64_t c = 0; c < cols; c++)
            s += (double)a[i * cols + c] * x[c];
        y[i] = s;
    }
}

/* The out-of-core loop: prefetch ahead, acquire one block, compute its rows, release. */
static int stream(fg_pager *p, uint32_t first, uint32_t n, uint64_t cols, const float *x,
                  double *y, fg_err *err)
{
    uint32_t ahead = first;
    uint64_t row = 0;
    for (uint32_t i = first; i < first + n; i++) {
        fg_pager_ticket t;
        if (ahead < i)
            ahead = i;
        while (ahead < first + n && fg_pager_prefetch(p, ahead, FG_TIER_HOST, &t, NULL) == 0)
            ahead++;
        fg_pager_view v;
        int rc = fg_pager_acquire(p, i, FG_TIER_HOST, &v, err);
        if (rc)
            return rc;
        uint64_t rows = v.length / (cols * sizeof(float));
        block_matvec(v.ptr, rows, cols, x, y + row);
        row += rows;
        if ((rc = fg_pager_release(p, &v, 0, err)))
            return rc;
    }
    return FG_OK;
}

/* The direct computation: A read whole through the mmap reader, no pager, no budget. */
static int check(const char *path, const float *x, const double *y)
{
    fg_err err;
    fg_fgt_reader *r;
    fg_fgt_tensor_info ti;
    if (fg_fgt_open(path, 0, &r, &err))
        return fail(path, &err);
    fg_fgt_tensor(r, 0, &ti);
    uint64_t rows = ti.dims[0], cols = ti.dims[1], bad = 0, row = 0;
    double *ref = malloc(rows * sizeof *ref);
    for (uint32_t j = 0; j < ti.n_chunks; j++) {
        fg_fgt_chunk_info ci;
        const void *a;
        fg_fgt_chunk(r, 0, j, &ci);
        if (fg_fgt_chunk_data(r, 0, j, 1, &a, &err)) {
            fg_fgt_close(r);
            free(ref);
            return fail(path, &err);
        }
        block_matvec(a, ci.n_rows, cols, x, ref + row);
        row += ci.n_rows;
    }
    fg_fgt_close(r);
    for (uint64_t i = 0; i < rows; i++)
        bad += ref[i] != y[i] || ref[i] != ref[i];
    free(ref);
    printf("check: %llu of %llu rows differ from the direct computation\n",
           (unsigned long long)bad, (unsigned long long)rows);
    return bad != 0;
}

static int run(const char *path, uint64_t host_kib, int do_check)
{
    fg_err err;
    fg_fgt_reader *r;
    fg_fgt_tensor_info ti;
    if (fg_fgt_open(path, 0, &r, &err))
        return fail(path, &err);
    fg_fgt_tensor(r, 0, &ti);
    fg_fgt_close(r);
    uint64_t rows = ti.dims[0], cols = ti.dims[1];
    float *x = malloc(cols * sizeof *x);
    double *y = calloc(rows, sizeof *y);
    for (uint64_t c = 0; c < cols; c++)
        x[c] = x_value(c);
    fg_pager_config cfg = {{0, host_kib << 10, 0}, 32, 0, FG_PAGER_ENGINE_AUTO, NULL, NULL,
                           FG_PAGER_VERIFY | FG_PAGER_NO_CUDA, NULL, NULL};
    fg_pager *p;
    uint32_t first, n;
    struct timespec t0, t1;
    if (fg_pager_open(&cfg, &p, &err) || fg_pager_add_fgt(p, path, 0, FG_CHUNK_WEIGHT, &first,
                                                          &n, &err))
        return fail(path, &err);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = stream(p, first, n, cols, x, y, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fg_pager_stats st;
    fg_pager_stats_get(p, &st);
    fg_pager_close(p);
    if (rc)
        return fail(path, &err);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, sum = 0;
    for (uint64_t i = 0; i < rows; i++)
        sum += y[i];
    printf("y = A x: A %.1f MiB through a %.1f MiB HOST budget (%.1fx), %u chunks, %.3f s, "
           "peak HOST %.1f MiB, stalled %.3f s, sum(y) = %.6f\n",
           (double)ti.payload_bytes / 1048576, (double)(host_kib << 10) / 1048576,
           (double)ti.payload_bytes / (double)(host_kib << 10), n, secs,
           (double)st.peak[FG_TIER_HOST] / 1048576, (double)st.stall_ns * 1e-9, sum);
    int bad = st.peak[FG_TIER_HOST] > (host_kib << 10);
    if (do_check)
        bad |= check(path, x, y);
    free(x);
    free(y);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "create"))
        return create(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
                      strtoull(argv[5], NULL, 10));
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "run"))
        return run(argv[2], strtoull(argv[3], NULL, 10), argc == 5 && !strcmp(argv[4], "--check"));
    fprintf(stderr, "usage: fg_matvec create FILE ROWS COLS ROWS_PER_CHUNK\n"
                    "       fg_matvec run FILE HOST_KIB [--check]\n");
    return 2;
}
