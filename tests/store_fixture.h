/* store_fixture.h - what test_store.c and test_store_meta.c share: the store directory of the
 * running test (a fresh temp dir per test: setup/teardown as a Check fixture), its last error,
 * and helpers that fail the test on any error. */
#ifndef FG_STORE_FIXTURE_H
#define FG_STORE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "store_testlib.h"

extern char g_dir[8192]; /* the test's store directory */
extern fg_err g_err;     /* the last call's error */

#define OK(expr) ck_assert_msg((expr) == FG_OK, "%s: %s", #expr, g_err.msg)

/* g_dir = the temp dir's NAME */
void set_dir(const char *name);
/* Check fixture: a new temp dir with g_dir its "store"; removed after the test. */
void setup(void);
void teardown(void);
/* fg_store_create(g_dir, o) / close s and open g_dir again with flags. */
fg_store *make(const fg_store_opts *o);
fg_store *reopen(fg_store *s, unsigned flags);
/* A batch of n tensors prefix.<i>, rows x 64 f32, chunks of 16 rows, plus meta "cfg.<prefix>". */
void add_batch(fg_store *s, const char *prefix, int n, uint64_t rows);
/* A whole file (malloc'd, *n its size) / written whole. */
uint8_t *read_file(const char *path, size_t *n);
void write_file(const char *path, const void *b, size_t n);

#endif
