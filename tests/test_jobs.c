/* test_jobs.c - JSONL batch jobs: strict parsing and its messages, the streamed reader in bounded
 * memory, the results file (resume keeps every valid line, moves damaged and torn lines aside,
 * refuses what is not fg results untouched, rewrites atomically), the lock between two
 * processes, pipes and terminals, and write errors (/dev/full, a short write under a file size
 * limit). Real files in a temp dir, real processes, no mocks. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jobs.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define FG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FG_TEST_ASAN 1
#endif
#endif
#ifndef FG_TEST_ASAN
#define FG_TEST_ASAN 0
#endif

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static int line_count(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A result line as fg writes it, for building damaged files by hand. */
static void result_line(char *out, size_t cap, const char *id)
{
    snprintf(out, cap, "{\"id\":\"%s\",\"text\":\"t-%s\",\"tokens\":[1,2],\"finish_reason\":"
             "\"length\",\"prompt_tokens\":3,\"timing\":{\"block\":0,\"block_seconds\":0.5}}\n",
             id, id);
}

START_TEST(parse_prompts_and_errors)
{
    const char *p = tu_path("in.jsonl");
    put(p, "{\"id\": \"a\", \"prompt\": \"Hello\"}\n\n"
           "{\"id\": 7, \"prompt\": \"x\", \"max_new_tokens\": 5, \"stop\": [\".\", \"!\"]}\n"
           "{\"id\": \"c\", \"prompt\": \"y\", \"stop\": \"\\n\", \"meta\": {\"k\": [1]}}\n");
    fg_job_list l;
    fg_err err;
    ck_assert_msg(fg_jobs_load(p, &l, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_str_eq(l.jobs[1].id, "7");
    ck_assert_int_eq(l.jobs[1].max_new, 5);
    ck_assert_int_eq(l.jobs[1].n_stops, 2);
    ck_assert_uint_eq(l.jobs[1].line, 3);
    ck_assert_str_eq(l.jobs[2].stops[0], "\n");
    ck_assert_int_eq(l.jobs[0].max_new, -1);
    fg_jobs_free(&l);
    put(p, "{\"id\": \"a\", \"prompt\": \"Hello\"}\n{\"prompt\": \"no id\"}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "in.jsonl:2:"), "%s", err.msg);
    put(p, "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "in.jsonl:2: prompt \"a\": id already used on line 1"), "%s",
                  err.msg);
    put(p, "not json\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    put(p, "{\"id\": 1, \"prompt\": \"x\", \"max_new_tokens\": 0}\n");
    ck_assert_int_eq(fg_jobs_load(p, &l, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_jobs_load(tu_path("missing"), &l, &err), FG_ERR_NOT_FOUND);
}
END_TEST

/* Each line alone in a file must be refused with code and a message holding want. */
static const struct {
    const char *line, *want;
    int code;
} bad_lines[] = {
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":4294967297}", "prompt \"a\": \"max_new", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":3.5}", "max_new_tokens", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":5.0}", "max_new_tokens", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":1e3}", "max_new_tokens", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":-1}", "max_new_tokens", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":\"5\"}", "max_new_tokens", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":null}", "max_new_tokens", -1},
    /* lines load as Python's json reads them (fg_json_loadb); the key refuses such a value */
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":NaN}", "in.jsonl:1: prompt \"a\": \"max_new", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":99999999999999999999999}", "max_new_tokens",
     -1},
    {"{\"id\":1e3,\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":NaN,\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\"]}", "\"stop\" strings", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[1]}", "\"stop\" strings", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":\"\"}", "\"stop\" strings", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":{\"a\":\"b\"}}", "at most 8", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
     "at most 8", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":5}", "unknown key \"max_tokens\"", -1},
    {"{\"id\":3.5,\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":\"\",\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":null,\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":[\"a\"],\"prompt\":\"x\"}", "\"id\" must be", -1},
    {"{\"id\":\"a\"}", "prompt \"a\": \"prompt\" (a string, or a list of token ids) is missing", -1},
    {"{\"id\":\"a\",\"prompt\":5}", "not a string", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"prompt\":\"y\"}", "duplicate", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\"}{\"id\":\"b\",\"prompt\":\"y\"}", "not valid JSON", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\\u0000y\"}", "not valid JSON", -1},
    {"{\"id\":\"a\",\"prompt\":\"\xff\"}", "not valid JSON", -1},
    {"[1, 2]", "in.jsonl:1: not a JSON object", -1},
    {"{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"y\",\"Stop\":1}",
     "in.jsonl:2: prompt \"b\": unknown key \"Stop\"", -1},
    {"{\"id\":\"7\",\"prompt\":\"x\"}\n{\"id\":7,\"prompt\":\"y\"}", "line 1", FG_ERR_DUPLICATE},
    {"\n  \n\r\n", "in.jsonl: no prompts", -1},
};

START_TEST(strict_fields)
{
    const char *p = tu_path("in.jsonl");
    for (size_t i = 0; i < sizeof bad_lines / sizeof *bad_lines; i++) {
        put(p, bad_lines[i].line);
        fg_job_reader *r = NULL;
        fg_err err = {0};
        int rc = fg_job_reader_open(p, &r, &err);
        ck_assert_msg(rc == bad_lines[i].code, "line %zu: rc %d (%s)", i, rc, err.msg);
        ck_assert_ptr_null(r);
        ck_assert_msg(strstr(err.msg, bad_lines[i].want), "line %zu: %s", i, err.msg);
        ck_assert_ptr_null(strchr(err.msg, '\n'));
    }
    /* the raw NUL byte, which a C string would hide */
    FILE *f = fopen(p, "wb");
    fwrite("{\"id\":\"a\",\"prompt\":\"x\"}\0junk\n", 1, 29, f);
    fclose(f);
    fg_job_reader *r;
    fg_err err;
    ck_assert_int_eq(fg_job_reader_open(p, &r, &err), FG_ERR_INVALID_ARG);
    /* accepted: BOM, CRLF, blank lines, the largest max_new_tokens, an empty stop array */
    put(p, "\xEF\xBB\xBF{\"id\":\"a\",\"prompt\":\"x\",\"max_new_tokens\":16777216,\"stop\":[]}\r\n"
           "\r\n\n{\"id\":-3,\"prompt\":\"\"}");
    fg_job_list b = {0};
    ck_assert_msg(fg_job_reader_open(p, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_job_reader_next(r, NULL, 10, &b, &err), 0);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(b.jobs[0].max_new, FG_JOB_MAX_NEW_TOKENS);
    ck_assert_int_eq(b.jobs[0].n_stops, 0);
    ck_assert_str_eq(b.jobs[1].id, "-3");
    ck_assert_uint_eq(b.jobs[1].line, 4);
    ck_assert_int_eq(fg_job_reader_next(r, NULL, 10, &b, &err), 0);
    ck_assert_uint_eq(b.n, 0);
    fg_job_reader_close(r);
}
END_TEST

/* A bad line far down a file is reported at open, before any job is handed out. */
START_TEST(validates_whole_file_first)
{
    const char *p = tu_path("in.jsonl");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 5000; i++)
        fprintf(f, "{\"id\":%d,\"prompt\":\"p\"}\n", i);
    fprintf(f, "{\"id\":17,\"prompt\":\"again\"}\n");
    fclose(f);
    fg_job_reader *r;
    fg_err err;
    ck_assert_int_eq(fg_job_reader_open(p, &r, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "in.jsonl:5001: prompt \"17\": id already used on line 18"),
                  "%s", err.msg);
}
END_TEST

/* A pipe cannot be read twice: it is validated as it streams, errors come from next(). */
START_TEST(pipe_input_streams)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    const char *text = "{\"id\":\"a\",\"prompt\":\"1\"}\n{\"id\":\"b\",\"prompt\":\"2\"}\n"
                       "{\"id\":\"a\",\"prompt\":\"3\"}\n";
    ck_assert_int_eq(write(p[1], text, strlen(text)), (ssize_t)strlen(text));
    close(p[1]);
    fg_job_reader *r;
    fg_err err;
    ck_assert_int_eq(fg_job_reader_open_fd(p[0], "pipe", &r, &err), 0);
    fg_job_list b = {0};
    ck_assert_int_eq(fg_job_reader_next(r, NULL, 2, &b, &err), 0);
    ck_assert_uint_eq(b.n, 2);
    size_t total;
    int complete;
    fg_job_reader_count(r, NULL, &total, NULL, &complete);
    ck_assert_uint_eq(total, 2);
    ck_assert_int_eq(complete, 0);
    ck_assert_int_eq(fg_job_reader_next(r, NULL, 2, &b, &err), FG_ERR_DUPLICATE);
    ck_assert_msg(strstr(err.msg, "pipe:3: prompt \"a\""), "%s", err.msg);
    ck_assert_uint_eq(b.n, 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(fg_job_reader_next(r, NULL, 2, &b, &err), FG_ERR_DUPLICATE); /* sticky */
    ck_assert_msg(strstr(err.msg, "pipe:3:"), "%s", err.msg);
    fg_job_reader_close(r);
}
END_TEST

static long peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 100,000 prompts of 600 bytes (about 62 MB) stream in blocks of 256: the peak RSS grows by
 * the ids and one block, not by the file. The legacy whole-file load, run after, shows the
 * measurement can see the difference. */
START_TEST(streams_100k_prompts_in_bounded_memory)
{
    const char *p = tu_path("big.jsonl");
    FILE *f = fopen(p, "w");
    char pad[601];
    memset(pad, 'w', 600);
    pad[600] = '\0';
    for (int i = 0; i < 100000; i++)
        fprintf(f, "{\"id\":\"p%06d\",\"prompt\":\"%s\",\"max_new_tokens\":%d}\n", i, pad,
                1 + i % 7);
    ck_assert_int_eq(fclose(f), 0);
    long before = peak_rss_kb();
    fg_job_reader *r;
    fg_err err;
    ck_assert_msg(fg_job_reader_open(p, &r, &err) == 0, "%s", err.msg);
    fg_job_list b = {0};
    size_t seen = 0, sum = 0;
    int rc;
    while ((rc = fg_job_reader_next(r, NULL, 256, &b, &err)) == 0 && b.n) {
        for (size_t i = 0; i < b.n; i++)
            sum += (size_t)b.jobs[i].max_new + strlen(b.jobs[i].prompt);
        seen += b.n;
    }
    ck_assert_msg(rc == 0, "%s", err.msg);
    fg_job_reader_close(r);
    long streamed = peak_rss_kb() - before;
    ck_assert_uint_eq(seen, 100000);
    ck_assert_uint_eq(sum, 100000 * 600 + 14285 * 28 + 15);
    fg_job_list all;
    ck_assert_int_eq(fg_jobs_load(p, &all, &err), 0);
    long loaded = peak_rss_kb() - before;
    ck_assert_uint_eq(all.n, 100000);
    fg_jobs_free(&all);
    unlink(p);
    fprintf(stderr, "jobs: 100k prompts, 62 MB: peak RSS +%ld KiB streamed, +%ld KiB loaded\n",
            streamed, loaded);
#if FG_TEST_ASAN /* ASan keeps freed blocks in quarantine: RSS says nothing about the reader */
    (void)streamed;
    (void)loaded;
#else
    ck_assert_msg(streamed < 12 * 1024, "streaming grew the peak RSS by %ld KiB", streamed);
    ck_assert_msg(loaded > 48 * 1024, "the whole-file load grew it by only %ld KiB", loaded);
#endif
}
END_TEST

static fg_job_result res(const fg_job *j, const char *text)
{
    static const int32_t toks[2] = {5, 6};
    return (fg_job_result){j, text, toks, 2, 1, "length", 0.5, 0};
}

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
    char *buf = tu_slurp(out, NULL);
    ck_assert_msg(strstr(buf, "\"text\":\"caf\\u00E9 \\uFFFD\""), "%s", buf); /* torn UTF-8 */
    ck_assert_msg(strstr(buf, "\"id\":\"b\",\"text\":\"two\""), "%s", buf);
    ck_assert_ptr_null(strstr(buf, "par"));
    free(buf);
    /* the torn bytes were moved aside, not deleted */
    buf = tu_slurp(tu_path("out.jsonl.damaged"), NULL);
    ck_assert_str_eq(buf, "{\"id\": \"b\", \"text\": \"par\n");
    free(buf);
    fg_jobs_free(&l);
}
END_TEST

/* issue 38 (3): stdin redirected from a regular file. Every reader of "-" is a dup of fd 0 and
 * shares its offset: a second reader's pass (the runner's sizing pass) used to leave the first
 * at the end of the file, so the job ran 0 prompts and exited 0. Also: stdin starting part-way
 * into its file is read from there. */
START_TEST(stdin_regular_file_two_readers)
{
    const char *in = tu_path("in.jsonl");
    put(in, "{\"id\":\"skip\",\"prompt\":\"not this\"}\n"
            "{\"id\":\"a\",\"prompt\":\"1\"}\n{\"id\":\"b\",\"prompt\":\"2\"}\n");
    int saved = dup(0), fd = open(in, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, 0), 0);
    close(fd);
    off_t first = (off_t)strlen("{\"id\":\"skip\",\"prompt\":\"not this\"}\n");
    ck_assert_int_eq(lseek(0, first, SEEK_SET), first); /* past the first line */
    fg_job_reader *r1, *r2;
    fg_err err;
    ck_assert_msg(fg_job_reader_open("-", &r1, &err) == 0, "%s", err.msg);
    ck_assert_msg(fg_job_reader_open("-", &r2, &err) == 0, "%s", err.msg);
    fg_job_list b = {0};
    size_t n2 = 0, n1 = 0;
    while (fg_job_reader_next(r2, NULL, 1, &b, &err) == 0 && b.n)
        n2 += b.n; /* the second reader's whole pass */
    ck_assert_int_eq(fg_job_reader_next(r1, NULL, 8, &b, &err), 0);
    n1 = b.n;
    ck_assert_uint_eq(n2, 2);
    ck_assert_uint_eq(n1, 2);
    ck_assert_str_eq(b.jobs[0].id, "a");
    fg_jobs_free(&b);
    fg_job_reader_close(r1);
    fg_job_reader_close(r2);
    /* an empty regular file on stdin is an error, not zero prompts */
    put(in, "");
    fd = open(in, O_RDONLY);
    ck_assert_int_eq(dup2(fd, 0), 0);
    close(fd);
    ck_assert_int_eq(fg_job_reader_open("-", &r1, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "stdin: no prompts"), "%s", err.msg);
    dup2(saved, 0);
    close(saved);
}
END_TEST

/* issue 38 (7): integer ids come back as integers as written (a huge one too), meta is echoed
 * byte for byte, an error line is a result (resume skips it), and resume reads all of them. */
START_TEST(ids_meta_and_error_lines)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    put(in, "{\"id\": 7, \"prompt\": \"x\", \"meta\": {\"k\": [1, 2.5e3, \"\\u00e9\"], \"n\": null}}\n"
            "{\"id\": 123456789012345678901234567890, \"prompt\": \"y\", \"meta\": 5}\n"
            "{\"id\": -3, \"prompt\": \"z\"}\n{\"id\": \"s\", \"prompt\": \"w\", \"meta\": \"m\"}\n");
    for (int pass = 0; pass < 2; pass++) {
        fg_job_reader *r;
        fg_job_output *o;
        fg_err err;
        ck_assert_msg(fg_job_reader_open(in, &r, &err) == 0, "%s", err.msg);
        ck_assert_msg(fg_job_output_open(out, pass ? FG_JOB_RESUME : 0, &o, NULL, &err) == 0,
                      "%s", err.msg);
        fg_job_list b = {0};
        ck_assert_int_eq(fg_job_reader_next(r, o, 8, &b, &err), 0);
        ck_assert_uint_eq(b.n, pass ? 0 : 4);
        if (!pass) {
            ck_assert_str_eq(b.jobs[1].id, "123456789012345678901234567890");
            ck_assert(b.jobs[0].id_is_int && b.jobs[1].id_is_int && !b.jobs[3].id_is_int);
            ck_assert_str_eq(b.jobs[0].meta, "{\"k\": [1, 2.5e3, \"\\u00e9\"], \"n\": null}");
            ck_assert_ptr_null(b.jobs[2].meta);
            int32_t pids[2] = {2, 9};
            fg_job_result rs[4];
            for (int i = 0; i < 4; i++)
                rs[i] = res(&b.jobs[i], "t");
            rs[0].prompt_ids = pids;
            rs[0].prompt_tokens = 2;
            rs[2].error = "4 prompt tokens + 9 new exceed the model's 8 positions";
            rs[2].error_type = "context_length_exceeded";
            ck_assert_int_eq(fg_job_output_append(o, rs, 4, &err), 0);
        }
        ck_assert_uint_eq(fg_job_output_count(o), 4);
        fg_jobs_free(&b);
        ck_assert_int_eq(fg_job_output_close(o, &err), 0);
        fg_job_reader_close(r);
    }
    char *buf = tu_slurp(out, NULL);
    static const char *const want[] = {
        "{\"id\":7,\"text\":\"t\",\"tokens\":[5,6],\"finish_reason\":\"length\",\"prompt_tokens\":2,"
        "\"timing\":{\"block\":0,\"block_seconds\":0.5},\"prompt_ids\":[2,9],"
        "\"meta\":{\"k\": [1, 2.5e3, \"\\u00e9\"], \"n\": null}}\n",
        "\n{\"id\":123456789012345678901234567890,\"text\":\"t\",",
        "\"meta\":5}\n",
        "\n{\"id\":-3,\"error\":{\"type\":\"context_length_exceeded\",\"message\":\"4 prompt tokens"
        " + 9 new exceed the model's 8 positions\"},\"prompt_tokens\":1}\n",
        "\n{\"id\":\"s\",\"text\":\"t\",",
        "\"meta\":\"m\"}\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        ck_assert_msg(strstr(buf, want[i]), "%s not in:\n%s", want[i], buf);
    free(buf);
}
END_TEST

/* The runner's loop over the new API: read blocks not yet done, append, resume. */
START_TEST(runner_loop_resumes)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    FILE *f = fopen(in, "w");
    for (int i = 0; i < 10; i++)
        fprintf(f, "{\"id\":%d,\"prompt\":\"p%d\"}\n", i, i);
    fclose(f);
    for (int pass = 0; pass < 2; pass++) {
        fg_job_reader *r;
        fg_job_output *o;
        fg_job_output_info info;
        fg_err err;
        ck_assert_int_eq(fg_job_reader_open(in, &r, &err), 0);
        ck_assert_msg(fg_job_output_open(out, pass ? FG_JOB_RESUME : 0, &o, &info, &err) == 0,
                      "%s", err.msg);
        size_t total, n_done;
        fg_job_reader_count(r, o, &total, &n_done, NULL);
        ck_assert_uint_eq(total, 10);
        ck_assert_uint_eq(n_done, pass ? 3 : 0);
        ck_assert_uint_eq(info.n_results, pass ? 3 : 0);
        fg_job_list b = {0};
        size_t got = 0;
        int rc;
        while ((rc = fg_job_reader_next(r, o, 3, &b, &err)) == 0 && b.n) {
            fg_job_result rs[3];
            for (size_t i = 0; i < b.n; i++)
                rs[i] = res(&b.jobs[i], b.jobs[i].prompt);
            ck_assert_int_eq(fg_job_output_append(o, rs, b.n, &err), 0);
            got += b.n;
            if (!pass && got == 3)
                break; /* "killed" after the first block */
        }
        ck_assert_msg(rc == 0, "%s", err.msg);
        fg_jobs_free(&b);
        ck_assert_uint_eq(got, pass ? 7 : 3);
        ck_assert_uint_eq(fg_job_output_count(o), pass ? 10 : 3);
        ck_assert_int_eq(fg_job_output_close(o, &err), 0);
        fg_job_reader_close(r);
    }
    char *buf = tu_slurp(out, NULL);
    ck_assert_int_eq(line_count(buf), 10);
    for (int i = 0; i < 10; i++) {
        char want[64];
        snprintf(want, sizeof want, "{\"id\":%d,\"text\":\"p%d\"", i, i); /* an integer */
        ck_assert_msg(strstr(buf, want), "%s missing", want);
    }
    free(buf);
}
END_TEST

/* A damaged line in the middle: every valid line, before and after it, is kept; the damaged
 * one moves to out.jsonl.damaged; the file is replaced atomically (a new inode). */
START_TEST(resume_keeps_lines_after_damage)
{
    const char *out = tu_path("out.jsonl");
    char a[256], b[256], c[256], all[1024];
    result_line(a, sizeof a, "a");
    result_line(b, sizeof b, "b");
    result_line(c, sizeof c, "c");
    char torn[] = "{\"id\":\"d\",\"te";
    snprintf(all, sizeof all, "%s{\"id\":\"x\",\"text\":\"ga\x01rbage\n%s\n%s%s", a, b, c, torn);
    put(out, all);
    struct stat before, after;
    ck_assert_int_eq(stat(out, &before), 0);
    fg_job_output *o;
    fg_job_output_info info;
    fg_err err;
    /* through a symbolic link: the file it names is rewritten, the link stays a link */
    ck_assert_int_eq(symlink("out.jsonl", tu_path("link.jsonl")), 0);
    ck_assert_msg(fg_job_output_open(tu_path("link.jsonl"), FG_JOB_RESUME, &o, &info, &err) == 0,
                  "%s", err.msg);
    ck_assert_uint_eq(info.n_results, 3);
    ck_assert_uint_eq(info.n_damaged, 2); /* the garbage and the blank line */
    ck_assert_uint_eq(info.first_damaged, 2);
    ck_assert_int_eq(info.torn_tail, 1);
    ck_assert_int_eq(info.rewritten, 1);
    ck_assert(fg_job_output_has(o, "a") && fg_job_output_has(o, "b") &&
              fg_job_output_has(o, "c"));
    ck_assert(!fg_job_output_has(o, "x") && !fg_job_output_has(o, "d"));
    fg_job d = {.id = "d"};
    fg_job_result rd = res(&d, "dee");
    ck_assert_int_eq(fg_job_output_append(o, &rd, 1, &err), 0);
    ck_assert_int_eq(fg_job_output_close(o, &err), 0);
    ck_assert_int_eq(stat(out, &after), 0);
    ck_assert(after.st_ino != before.st_ino);
    struct stat lst;
    ck_assert_int_eq(lstat(tu_path("link.jsonl"), &lst), 0);
    ck_assert(S_ISLNK(lst.st_mode));
    char *buf = tu_slurp(out, NULL), want[1024];
    snprintf(want, sizeof want, "%s%s%s{\"id\":\"d\",\"text\":\"dee\"", a, b, c);
    ck_assert_msg(!strncmp(buf, want, strlen(want)) && line_count(buf) == 4, "%s", buf);
    free(buf);
    buf = tu_slurp(info.aside_path, NULL);
    snprintf(want, sizeof want, "{\"id\":\"x\",\"text\":\"ga\x01rbage\n\n%s\n", torn);
    ck_assert_str_eq(buf, want);
    free(buf);
    ck_assert_msg(strstr(info.aside_path, "/out.jsonl.damaged"), "%s", info.aside_path);
}
END_TEST

static void check_refused_untouched(const char *content, size_t len)
{
    const char *out = tu_path("out.jsonl");
    FILE *f = fopen(out, "wb");
    fwrite(content, 1, len, f);
    fclose(f);
    struct stat before, after;
    ck_assert_int_eq(stat(out, &before), 0);
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(out, FG_JOB_RESUME, &o, NULL, &err), FG_ERR_BAD_MAGIC);
    ck_assert_msg(strstr(err.msg, out) && strstr(err.msg, "not an fg results file"), "%s",
                  err.msg);
    size_t n;
    char *buf = tu_slurp(out, &n);
    ck_assert_uint_eq(n, len);
    ck_assert(memcmp(buf, content, len) == 0);
    free(buf);
    ck_assert_int_eq(stat(out, &after), 0);
    ck_assert(after.st_ino == before.st_ino && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec &&
              after.st_mtime == before.st_mtime);
    ck_assert_int_eq(access(tu_path("out.jsonl.damaged"), F_OK), -1);
}

START_TEST(resume_refuses_foreign_file_untouched)
{
    const char prompts[] = "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"y\"}\n";
    check_refused_untouched(prompts, sizeof prompts - 1); /* the input given as --output */
    const char text[] = "Dear diary,\nno JSON here\nat all";
    check_refused_untouched(text, sizeof text - 1);
    const char bin[] = "\x7f" "ELF\x02\x01\x01\0\0\0\n\0\xff\xfe";
    check_refused_untouched(bin, sizeof bin - 1);
    /* without --resume any non-empty file is refused, untouched */
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(tu_path("out.jsonl"), 0, &o, NULL, &err), FG_ERR_EXISTS);
    /* a file holding only the torn start of the first block is ours: moved aside */
    put(tu_path("out.jsonl"), "{\"id\":\"a\",\"text\":\"hal");
    ck_assert_int_eq(fg_job_output_open(tu_path("out.jsonl"), FG_JOB_RESUME, &o, NULL, &err), 0);
    ck_assert_uint_eq(fg_job_output_count(o), 0);
    fg_job_output_close(o, NULL);
    struct stat st;
    ck_assert_int_eq(stat(tu_path("out.jsonl"), &st), 0);
    ck_assert_int_eq(st.st_size, 0);
}
END_TEST

/* A whole result missing only its newline is kept and completed. */
START_TEST(resume_completes_last_newline)
{
    const char *out = tu_path("out.jsonl");
    char a[256];
    result_line(a, sizeof a, "a");
    a[strlen(a) - 1] = '\0';
    put(out, a);
    fg_job_output *o;
    fg_job_output_info info;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(out, FG_JOB_RESUME, &o, &info, &err), 0);
    ck_assert(fg_job_output_has(o, "a") && !info.torn_tail && !info.rewritten);
    fg_job b = {.id = "b"};
    fg_job_result rb = res(&b, "bee");
    ck_assert_int_eq(fg_job_output_append(o, &rb, 1, &err), 0);
    ck_assert_int_eq(fg_job_output_close(o, &err), 0);
    char *buf = tu_slurp(out, NULL);
    ck_assert_int_eq(line_count(buf), 2);
    ck_assert(!strncmp(buf, a, strlen(a)) && buf[strlen(a)] == '\n');
    free(buf);
}
END_TEST

/* Two processes, one output: the second is refused in one line while the first holds it,
 * including after the first rewrote (replaced) the file. */
START_TEST(lock_refuses_second_job)
{
    const char *out = tu_path("out.jsonl");
    char a[256], all[600];
    result_line(a, sizeof a, "a");
    snprintf(all, sizeof all, "%sdamage\n%s", a, a); /* resume will rewrite it */
    put(out, all);
    int go[2], stop[2];
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(stop), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fg_job_output *o;
        fg_job_output_info info;
        int ok = fg_job_output_open(out, FG_JOB_RESUME, &o, &info, NULL) == 0 && info.rewritten;
        char c = ok ? 'y' : 'n';
        if (write(go[1], &c, 1) != 1 || read(stop[0], &c, 1) != 1)
            _exit(3);
        _exit(ok ? 0 : 2);
    }
    char c = 0;
    ck_assert_int_eq(read(go[0], &c, 1), 1);
    ck_assert_int_eq(c, 'y');
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(out, FG_JOB_RESUME, &o, NULL, &err), FG_ERR_STORE_BUSY);
    ck_assert_msg(strstr(err.msg, "out.jsonl: another fg-infer job is writing to it"), "%s",
                  err.msg);
    ck_assert_int_eq(fg_job_output_open(out, 0, &o, NULL, &err), FG_ERR_STORE_BUSY);
    ck_assert_int_eq(write(stop[1], "x", 1), 1);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_msg(fg_job_output_open(out, FG_JOB_RESUME, &o, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(fg_job_output_count(o), 1);
    fg_job_output_close(o, NULL);
}
END_TEST

START_TEST(pipe_and_terminal_output)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(path, FG_JOB_RESUME, &o, NULL, &err), FG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "--resume needs a regular file"), "%s", err.msg);
    ck_assert_msg(fg_job_output_open(path, 0, &o, NULL, &err) == 0, "%s", err.msg);
    fg_job j = {.id = "a"};
    fg_job_result r = res(&j, "piped");
    ck_assert_msg(fg_job_output_append(o, &r, 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_job_output_close(o, &err), 0);
    close(p[1]);
    char buf[512] = {0};
    ck_assert_int_gt(read(p[0], buf, sizeof buf - 1), 0);
    ck_assert_msg(!strncmp(buf, "{\"id\":\"a\",\"text\":\"piped\"", 24), "%s", buf);
    /* stdout as a pipe ("-") */
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(dup2(p[1], 1), 1);
    ck_assert_int_eq(fg_job_output_open("-", FG_JOB_RESUME, &o, NULL, &err), FG_ERR_INVALID_ARG);
    ck_assert_int_eq(fg_job_output_open("-", 0, &o, NULL, &err), 0);
    ck_assert_int_eq(fg_job_output_append(o, &r, 1, &err), 0);
    ck_assert_int_eq(fg_job_output_close(o, &err), 0);
    ck_assert_int_gt(read(p[0], buf, sizeof buf - 1), 0);
    ck_assert_msg(!strncmp(buf, "{\"id\":\"a\"", 8), "%s", buf);
    /* a terminal: a pseudo-terminal's slave side */
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(m, 0);
    ck_assert(grantpt(m) == 0 && unlockpt(m) == 0);
    const char *pts = ptsname(m);
    ck_assert_msg(fg_job_output_open(pts, 0, &o, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(fg_job_output_append(o, &r, 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fg_job_output_close(o, &err), 0);
    memset(buf, 0, sizeof buf);
    ck_assert_int_gt(read(m, buf, sizeof buf - 1), 0);
    ck_assert_msg(strstr(buf, "\"text\":\"piped\""), "%s", buf);
    close(m);
}
END_TEST

START_TEST(write_error_dev_full)
{
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open("/dev/full", 0, &o, NULL, &err), 0);
    fg_job j = {.id = "a"};
    fg_job_result r = res(&j, "lost");
    ck_assert_int_eq(fg_job_output_append(o, &r, 1, &err), FG_ERR_NO_SPACE);
    ck_assert_msg(strstr(err.msg, "/dev/full: writing results") && strstr(err.msg, "space"),
                  "%s", err.msg);
    ck_assert(!fg_job_output_has(o, "a"));
    ck_assert_int_eq(fg_job_output_close(o, &err), FG_ERR_NO_SPACE); /* reported again */
    /* stdout redirected to /dev/full */
    int fd = open("/dev/full", O_WRONLY);
    ck_assert_int_eq(dup2(fd, 1), 1);
    ck_assert_int_eq(fg_job_output_open("-", 0, &o, NULL, &err), 0);
    ck_assert_int_eq(fg_job_output_append(o, &r, 1, &err), FG_ERR_NO_SPACE);
    ck_assert_msg(strstr(err.msg, "stdout: writing results"), "%s", err.msg);
    fg_job_output_close(o, NULL);
    /* the legacy descriptor path too */
    ck_assert_int_eq(fg_jobs_append(fd, "/dev/full", &r, 1, &err), FG_ERR_NO_SPACE);
    close(fd);
}
END_TEST

/* A short write: a file size limit lets part of the block through, then EFBIG. The error names
 * the file, the partial block is cut back, the error is sticky, and the file resumes clean. */
START_TEST(short_write_cut_back)
{
    const char *out = tu_path("out.jsonl");
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_job_output_open(out, 0, &o, NULL, &err), 0);
    fg_job a = {.id = "a"}, b = {.id = "b"};
    fg_job_result ra = res(&a, "first");
    ck_assert_int_eq(fg_job_output_append(o, &ra, 1, &err), 0);
    struct stat st;
    ck_assert_int_eq(stat(out, &st), 0);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {(rlim_t)st.st_size + 10, RLIM_INFINITY};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    fg_job_result rb = res(&b, "second");
    ck_assert_int_eq(fg_job_output_append(o, &rb, 1, &err), FG_ERR_IO);
    ck_assert_msg(strstr(err.msg, "out.jsonl: writing results (10 of") &&
                  strstr(err.msg, "cut back") && strstr(err.msg, "too large"), "%s", err.msg);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(fg_job_output_append(o, &ra, 1, &err), FG_ERR_IO); /* sticky */
    ck_assert_msg(strstr(err.msg, "(10 of"), "%s", err.msg);
    ck_assert_int_eq(fg_job_output_close(o, NULL), FG_ERR_IO);
    struct stat now;
    ck_assert_int_eq(stat(out, &now), 0);
    ck_assert_int_eq(now.st_size, st.st_size);
    ck_assert_int_eq(fg_job_output_open(out, FG_JOB_RESUME, &o, NULL, &err), 0);
    ck_assert(fg_job_output_has(o, "a") && !fg_job_output_has(o, "b"));
    fg_job_output_close(o, NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120); /* the 100k-prompt file takes seconds (more under ASan) */
    tcase_add_test(tc, parse_prompts_and_errors);
    tcase_add_test(tc, strict_fields);
    tcase_add_test(tc, validates_whole_file_first);
    tcase_add_test(tc, pipe_input_streams);
    tcase_add_test(tc, streams_100k_prompts_in_bounded_memory);
    tcase_add_test(tc, resume_skips_done_and_cuts_torn_line);
    tcase_add_test(tc, runner_loop_resumes);
    tcase_add_test(tc, stdin_regular_file_two_readers);
    tcase_add_test(tc, ids_meta_and_error_lines);
    tcase_add_test(tc, resume_keeps_lines_after_damage);
    tcase_add_test(tc, resume_refuses_foreign_file_untouched);
    tcase_add_test(tc, resume_completes_last_newline);
    tcase_add_test(tc, lock_refuses_second_job);
    tcase_add_test(tc, pipe_and_terminal_output);
    tcase_add_test(tc, write_error_dev_full);
    tcase_add_test(tc, short_write_cut_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
