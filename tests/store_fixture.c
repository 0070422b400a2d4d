/* store_fixture.c - the store suites' shared fixture (store_fixture.h): a temp store dir per
 * test, and helpers to make, reopen and fill a store and to read and write its files whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"

char g_dir[8192];
fg_err g_err;

void set_dir(const char *name)
{
    snprintf(g_dir, sizeof g_dir, "%s", tu_path(name));
}

void setup(void)
{
    tu_tmpdir_create();
    set_dir("store");
}

void teardown(void)
{
    tu_tmpdir_remove();
}

fg_store *make(const fg_store_opts *o)
{
    fg_store *s;
    OK(fg_store_create(g_dir, o, &s, &g_err));
    return s;
}

fg_store *reopen(fg_store *s, unsigned flags)
{
    fg_store_close(s);
    OK(fg_store_open(g_dir, flags, NULL, &s, &g_err));
    return s;
}

/* Batch of n tensors prefix.<i>, rows x 64 f32, chunks of 16 rows, plus meta "cfg.<prefix>". */
void add_batch(fg_store *s, const char *prefix, int n, uint64_t rows)
{
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.%d", prefix, i);
        OK(st_put_tensor(b, name, rows, 64, 16, &g_err));
    }
    char key[64];
    snprintf(key, sizeof key, "cfg.%s", prefix);
    OK(fg_store_batch_meta(b, key, prefix, strlen(prefix), &g_err));
    OK(fg_store_batch_commit(b, &g_err));
}

uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(*n + 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}
