/* test_store_meta.c - Check suite for the store's metadata: a blob damaged inside the catalog is
 * caught by its checksum and restored by reindex; values over FG_STORE_META_INLINE (16 MiB) are
 * checksummed files of their own (round trip, reopen, reindex, replacement, damage, leftovers).
 * The batch-failure case of large values runs with test_store.c's fault injection. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_fixture.h"

/* A metadata blob damaged inside the catalog (LMDB keeps no checksums) is caught when it is read
 * (its record carries the blob's XXH3), verify names it, and reindex restores it from the weight
 * file's copy. */
START_TEST(test_meta_checksum)
{
    fg_store *s = make(NULL);
    fg_store_batch *b;
    static const char blob[] = "{\"tokenizer\": \"a blob whose one byte will change\"}";
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(st_put_tensor(b, "t.0", 4, 64, 4, &g_err));
    OK(fg_store_batch_meta(b, "tok.json", blob, sizeof blob - 1, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    fg_store_close(s);
    size_t n;
    uint8_t *cat = read_file(tu_path("store/catalog/data.mdb"), &n);
    uint8_t *at = memmem(cat, n, "will change", 11);
    ck_assert_ptr_nonnull(at);
    at[0] = 'W';
    write_file(tu_path("store/catalog/data.mdb"), cat, n);
    free(cat);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    void *m;
    size_t len;
    ck_assert_int_eq(fg_store_meta_get(s, "tok.json", &m, &len, &g_err), FG_ERR_CHECKSUM);
    ck_assert_msg(strstr(g_err.msg, "metadata 'tok.json': checksum mismatch in the catalog") &&
                  strstr(g_err.msg, "--reindex"), "%s", g_err.msg);
    ck_assert_int_ne(fg_store_verify(s, NULL, &g_err), FG_OK);
    ck_assert_msg(strstr(g_err.msg, "tok.json"), "%s", g_err.msg);
    fg_store_close(s);
    OK(fg_store_reindex(g_dir, NULL, &g_err));
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    OK(fg_store_meta_get(s, "tok.json", &m, &len, &g_err));
    ck_assert_uint_eq(len, sizeof blob - 1);
    ck_assert_int_eq(memcmp(m, blob, len), 0);
    free(m);
    fg_store_close(s);
}
END_TEST

/* A value over FG_STORE_META_INLINE (Gemma 3's tokenizer.json is 33 MB; the base commit refused
 * anything over 16 MiB) is a checksummed file of its own: it round trips, lists with its length,
 * survives reopen and reindex, a later batch replaces it (and a small value replaces it back);
 * damage, leftovers and failed batches have tests of their own below. */
static uint8_t *big_value(size_t n, uint64_t seed)
{
    uint8_t *v = malloc(n);
    ck_assert_ptr_nonnull(v);
    tu_fill(v, n, seed);
    return v;
}

static size_t g_meta_len;
static int meta_len_cb(void *ctx, const char *key, size_t len)
{
    if (!strcmp(key, ctx))
        g_meta_len = len;
    return 0;
}

static void expect_meta(fg_store *s, const char *key, const uint8_t *want, size_t n)
{
    void *m;
    size_t len;
    OK(fg_store_meta_get(s, key, &m, &len, &g_err));
    ck_assert_uint_eq(len, n);
    ck_assert_msg(memcmp(m, want, n) == 0, "metadata '%s' differs", key);
    free(m);
    g_meta_len = 0;
    OK(fg_store_meta_iter(s, meta_len_cb, (void *)key, &g_err));
    ck_assert_uint_eq(g_meta_len, n);
}

START_TEST(test_meta_large)
{
    const size_t n = 33u << 20, n2 = FG_STORE_META_INLINE + 1;
    uint8_t *v = big_value(n, 1), *v2 = big_value(n2, 2);
    fg_store *s = make(NULL);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(st_put_tensor(b, "t.0", 4, 64, 4, &g_err));
    OK(fg_store_batch_meta(b, "tokenizer.json", v, n, &g_err));
    OK(fg_store_batch_meta(b, "small", "abc", 3, &g_err));
    ck_assert_int_eq(fg_store_batch_meta(b, "huge", v, FG_STORE_META_MAX + 1ull, &g_err),
                     FG_ERR_LIMIT);
    OK(fg_store_batch_commit(b, &g_err));
    ck_assert_int_eq(access(tu_path("store/meta-000001-0.blob"), F_OK), 0);
    expect_meta(s, "tokenizer.json", v, n);
    expect_meta(s, "small", (const uint8_t *)"abc", 3);
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.meta, 2);
    s = reopen(s, FG_STORE_RDONLY);
    expect_meta(s, "tokenizer.json", v, n);
    fg_store_close(s);
    /* reindex rebuilds the record from part 0's reference */
    OK(fg_store_reindex(g_dir, NULL, &g_err));
    OK(fg_store_open(g_dir, 0, NULL, &s, &g_err));
    expect_meta(s, "tokenizer.json", v, n);
    /* a later batch replaces it with another large value, then with a small one */
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(fg_store_batch_meta(b, "tokenizer.json", v2, n2, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    expect_meta(s, "tokenizer.json", v2, n2);
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(fg_store_batch_meta(b, "tokenizer.json", "{}", 2, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    expect_meta(s, "tokenizer.json", (const uint8_t *)"{}", 2);
    OK(fg_store_verify(s, NULL, &g_err));
    fg_store_close(s);
    free(v);
    free(v2);
}
END_TEST

/* One flipped payload byte, a flipped header byte, a truncated file and a missing one: reads
 * and verify fail with one line naming the key and the file; reindex does not hide it. */
START_TEST(test_meta_large_damage)
{
    const size_t n = FG_STORE_META_INLINE + 4096;
    uint8_t *v = big_value(n, 3);
    fg_store *s = make(NULL);
    fg_store_batch *b;
    OK(fg_store_batch_begin(s, &b, &g_err));
    OK(fg_store_batch_meta(b, "tokenizer.json", v, n, &g_err));
    OK(fg_store_batch_commit(b, &g_err));
    fg_store_close(s);
    const char *path = tu_path("store/meta-000001-0.blob");
    static const struct { long off; int truncate; int rc; const char *what; } cases[] = {
        {4096 + 12345, 0, FG_ERR_CHECKSUM, "checksum mismatch"},
        {70, 0, FG_ERR_CHECKSUM, "damaged header"},
        {4096 + 100, 1, FG_ERR_CHECKSUM, "truncated"},
        {-1, 0, FG_ERR_STORE_MISSING, "cannot open its file"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t fn;
        uint8_t *orig = read_file(path, &fn);
        if (cases[c].off < 0)
            ck_assert_int_eq(unlink(path), 0);
        else if (cases[c].truncate)
            ck_assert_int_eq(truncate(path, cases[c].off), 0);
        else {
            uint8_t *d = malloc(fn);
            memcpy(d, orig, fn);
            d[cases[c].off] ^= 0x20;
            write_file(path, d, fn);
            free(d);
        }
        OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
        void *m = NULL;
        size_t len;
        ck_assert_int_eq(fg_store_meta_get(s, "tokenizer.json", &m, &len, &g_err), cases[c].rc);
        ck_assert_msg(strstr(g_err.msg, "meta-000001-0.blob: metadata 'tokenizer.json'") &&
                      strstr(g_err.msg, cases[c].what) && !strchr(g_err.msg, '\n'),
                      "case %zu: %s", c, g_err.msg);
        ck_assert_int_eq(fg_store_verify(s, NULL, &g_err), cases[c].rc);
        ck_assert_msg(strstr(g_err.msg, "tokenizer.json"), "%s", g_err.msg);
        fg_store_close(s);
        write_file(path, orig, fn); /* restored: reads again */
        free(orig);
        OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
        expect_meta(s, "tokenizer.json", v, n);
        fg_store_close(s);
    }
    free(v);
}
END_TEST

/* Leftovers: a metadata file whose batch never committed (its owner weight file unlisted) is
 * counted by verify, removed by a writable open (R2) and by reindex. */
START_TEST(test_meta_large_leftover)
{
    fg_store *s = make(NULL);
    add_batch(s, "a", 1, 4);
    fg_store_close(s);
    static const uint8_t junk[8192] = {1};
    write_file(tu_path("store/meta-000007-0.blob"), junk, sizeof junk);
    OK(fg_store_open(g_dir, FG_STORE_RDONLY, NULL, &s, &g_err));
    fg_store_verify_report rep;
    OK(fg_store_verify(s, &rep, &g_err));
    ck_assert_uint_eq(rep.orphan_files, 1);
    s = reopen(s, 0);
    ck_assert_int_ne(access(tu_path("store/meta-000007-0.blob"), F_OK), 0);
    fg_store_close(s);
    write_file(tu_path("store/meta-000007-0.blob"), junk, sizeof junk);
    OK(fg_store_reindex(g_dir, NULL, &g_err));
    ck_assert_int_ne(access(tu_path("store/meta-000007-0.blob"), F_OK), 0);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("store_meta");
    TCase *tc = tcase_create("store_meta");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_meta_checksum);
    tcase_add_test(tc, test_meta_large);
    tcase_add_test(tc, test_meta_large_damage);
    tcase_add_test(tc, test_meta_large_leftover);
    suite_add_tcase(su, tc);
    return tu_run(su);
}
