/* testutil.h - helpers shared by the Check suites: temp directories and a suite runner. */
#ifndef FG_TESTUTIL_H
#define FG_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Create a fresh temp directory (mkdtemp under $TMPDIR or /tmp); returns a static path that
 * stays valid until tu_tmpdir_remove. Aborts the test on failure. */
const char *tu_tmpdir_create(void);
/* rm -rf the directory made by tu_tmpdir_create. */
void tu_tmpdir_remove(void);
/* rm -rf dir (nothing when it does not exist). */
void tu_rmtree(const char *dir);
/* path = tmpdir + "/" + name, in a static rotating buffer. */
const char *tu_path(const char *name);

/* The whole file at path, NUL-terminated (malloc'd; the caller frees it), its size in *len when
 * len is not NULL; fails the test when it cannot be read. */
char *tu_slurp(const char *path, size_t *len);

/* One step of xorshift64 (13, 7, 17) on *s (nonzero): the tests' deterministic generator. */
uint64_t tu_xorshift(uint64_t *s);
/* Deterministic bytes for tests. */
void tu_fill(void *p, size_t n, uint64_t seed);

/* n floats uniform in [-scale, scale), deterministic in seed (xorshift). */
void tu_randf(float *x, size_t n, uint64_t seed, float scale);
/* Normalized mean squared error of a against ref: sum (a - ref)^2 / sum ref^2 (the plain sum
 * when ref is all zero). */
double tu_nmse(const float *a, const float *ref, size_t n);

/* Fails the test with the message alone when cond is false: ck_assert_msg without the
 * expression's text, for checks inside loops over many values (the message names the value). */
#define TU_REQUIRE(cond, ...)                                                                     \
    do {                                                                                          \
        if (!(cond))                                                                              \
            ck_abort_msg(__VA_ARGS__);                                                            \
    } while (0)

/* Run a suite in fork mode; returns the process exit status (0 when all pass). */
int tu_run(Suite *s);

/* Run probe in a child process and return what it returned (1 with a message when the child
 * died), its message (up to cap bytes) copied into msg. For a check whose side effects must not
 * reach the suite's parent: the CUDA runtime's context does not survive the fork of tu_run, so
 * a main that asks "is there a GPU?" by creating one asks in a child. */
int tu_probe(int (*probe)(char *msg, size_t cap), char *msg, size_t cap);

#endif
