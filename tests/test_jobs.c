/* test_jobs.c - JSONL batch jobs: parsing and its errors, refusing to overwrite results, and
 * resuming after a kill that tore the last line. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"
#include "testutil.h"

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

START_TEST(parse_prompts_and_errors)
{
    const char *p = tu_path("in.jsonl");
    put(p, "{\"id\": \"a\", \"prompt\": \"Hello\"}\n\n"
           "{\"id\": 7, \"prompt\": \"x\", \"max_new_tokens\": 5, \"stop\": [\".\", \"!\"]}\n"
           "{\"id\": \"c\", \"prompt\": \"y\", \"stop\": \"\\n\"}\n");
    fg_job_list l;
    fg_err err;
    ck_assert_msg(fg_jobs_load(p, &l, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_str_eq(l.jobs[1].id, "7");
    ck_assert_int_eq(l.jobs[1].max_new, 5);
    ck_assert_int_eq(l.jobs[1].n_stops, 2);
    ck_assert_str_eq(l.jobs[2].stops[0], "\n");
    ck_assert_int_eq(l.jobs[0].max_new, -1);
    fg_jobs_free(&l);
    put(p, "{\"id\": \"a\", \"prompt\": \"Hello\"}\n{\"prompt\": \"no id\"}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "in.jsonl:2:"), "%s", err.msg);
    put(p, "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_DUPLICATE);
    put(p, "not json\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    put(p, "{\"id\": 1, \"prompt\": \"x\", \"max_new_tokens\": 0}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_jobs_load(tu_path("missing"), &l, &err), FG_ERR_NOT_FOUND);
}
END_TEST

START_TEST(resume_skips_done_and_cuts_torn_line)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    put(in, "{\"id\": \"a\", \"prompt\": \"1\"}\n{\"id\": \"b\", \"prompt\": \"2\"}\n"
            "{\"id\": \"c\", \"prompt\": \"3\"}\n");
    fg_job_list l;
    fg_err err;
    int fd;
    size_t done;
    ck_assert_int_eq(fg_jobs_load(in, &l, &err), 0);
    ck_assert_int_eq(fg_jobs_open_output(out, 0, &l, &fd, &done, &err), 0);
    int32_t toks[2] = {5, 6};
    fg_job_result r = {&l.jobs[0], "caf\xc3\xa9 \xe2\x82", toks, 2, 1, "length", 0.5, 0};
    ck_assert_msg(fg_jobs_append(fd, out, &r, 1, &err) == 0, "%s", err.msg);
    close(fd);
    /* a kill in the middle of the next write */
    FILE *f = fopen(out, "a");
    fputs("{\"id\": \"b\", \"text\": \"par", f);
    fclose(f);
    ck_assert_int_eq(fg_jobs_open_output(out, 0, &l, &fd, &done, &err), FG_ERR_EXISTS);
    ck_assert_int_eq(fg_jobs_open_output(out, 1, &l, &fd, &done, &err), 0);
    ck_assert_uint_eq(done, 1);
    ck_assert(l.jobs[0].done && !l.jobs[1].done && !l.jobs[2].done);
    fg_job_result r2 = {&l.jobs[1], "two", toks, 1, 1, "eos", 0.1, 1};
    ck_assert_int_eq(fg_jobs_append(fd, out, &r2, 1, &err), 0);
    close(fd);
    char buf[1024] = {0};
    f = fopen(out, "r");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    ck_assert_uint_gt(n, 0);
    ck_assert_msg(strstr(buf, "\"text\":\"caf\\u00E9 \\uFFFD\""), "%s", buf); /* torn UTF-8 */
    ck_assert_msg(strstr(buf, "\"id\":\"b\",\"text\":\"two\""), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "par"));
    fg_jobs_free(&l);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, parse_prompts_and_errors);
    tcase_add_test(tc, resume_skips_done_and_cuts_torn_line);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
