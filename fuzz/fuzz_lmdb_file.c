/* fuzz_lmdb_file.c - libFuzzer target for the check a catalog's data.mdb passes before LMDB
 * maps it (store/lmdb_check.c). The input is a whole data.mdb. The check must never read out
 * of bounds, and when it accepts a file, LMDB must open it and walk every record of the main
 * database and of every named database in it without a fault (the claim the store relies on:
 * a file that passes cannot crash LMDB). The file goes to a temporary file, opened with
 * MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK. */
#define _GNU_SOURCE
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct mem {
    const uint8_t *p;
    size_t n;
} mem;

static int mem_read(void *ctx, void *buf, size_t n, uint64_t off)
{
    const mem *m = ctx;
    if (off > m->n || n > m->n - off)
        return -1;
    memcpy(buf, m->p + off, n);
    return 0;
}

/* Every record of db; for the main database, every named database it lists too. */
static void walk_db(MDB_txn *t, MDB_dbi db, int main_db)
{
    MDB_cursor *c;
    if (mdb_cursor_open(t, db, &c))
        return;
    MDB_val k, v;
    volatile uint8_t sink = 0;
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc && sink != 1;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        for (size_t i = 0; i < v.mv_size; i += 4096)
            sink ^= ((const uint8_t *)v.mv_data)[i];
        if (!main_db || !k.mv_size || k.mv_size > 64)
            continue;
        char name[65];
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = '\0';
        MDB_dbi sub;
        if (strlen(name) == k.mv_size && mdb_dbi_open(t, name, 0, &sub) == 0)
            walk_db(t, sub, 0);
    }
    mdb_cursor_close(c);
}

static void lmdb_walk(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/fuzz-lmdb-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return;
    int ok = write(fd, data, size) == (ssize_t)size;
    close(fd);
    MDB_env *env;
    MDB_txn *t;
    MDB_dbi db;
    if (ok && mdb_env_create(&env) == 0) {
        mdb_env_set_maxdbs(env, 64);
        if (mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK, 0644) == 0 &&
            mdb_txn_begin(env, NULL, MDB_RDONLY, &t) == 0) {
            if (mdb_dbi_open(t, NULL, 0, &db) == 0)
                walk_db(t, db, 1);
            mdb_txn_abort(t);
        }
        mdb_env_close(env);
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mem m = {data, size};
    char why[256];
    if (cat_file_check(mem_read, &m, size, why, sizeof why) == 0)
        lmdb_walk(data, size);
    else if (!why[0] || strchr(why, '\n'))
        abort(); /* a refusal always says why, on one line */
    return 0;
}
