/* fuzz_jobs_resume.c - libFuzzer target for the results-file resume scan (jobs/jobs_out.c): the
 * input is an existing --output file, opened with FG_JOB_RESUME in a private temp dir. A
 * refused file must be byte for byte untouched; an accepted one must have lost no byte (what
 * the file no longer holds is in OUTPUT.damaged). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[4000], g_out[4096], g_aside[4200];

static void remove_dir(void)
{
    unlink(g_aside);
    unlink(g_out);
    rmdir(g_dir); /* empty: each input's files are removed after it */
}

static void paths(void)
{
    if (g_out[0])
        return;
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fuzz_jobs_resume-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir))
        abort();
    snprintf(g_out, sizeof g_out, "%s/out.jsonl", g_dir);
    snprintf(g_aside, sizeof g_aside, "%s.damaged", g_out);
    atexit(remove_dir);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    uint8_t *buf = malloc(1);
    size_t cap = 1, r;
    while ((r = fread(buf + *n, 1, cap - *n, f)) > 0)
        if ((*n += r) == cap)
            buf = realloc(buf, cap *= 2);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    paths();
    unlink(g_aside);
    FILE *f = fopen(g_out, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f))
        abort();
    fg_job_output *o;
    fg_job_output_info info;
    fg_err err;
    int rc = fg_job_output_open(g_out, FG_JOB_RESUME, &o, &info, &err);
    size_t n, na;
    uint8_t *now = slurp(g_out, &n), *aside = slurp(g_aside, &na);
    if (rc && (n != size || (size && memcmp(now, data, size)) || aside))
        abort(); /* refused, but touched */
    if (rc == FG_OK && (n + na < size || fg_job_output_count(o) > info.n_results))
        abort(); /* bytes lost, or ids from nowhere */
    free(now);
    free(aside);
    fg_job_output_close(o, NULL);
    unlink(g_aside);
    unlink(g_out);
    return 0;
}
