/* metafile.c - metadata values too large for one catalog value: files of their own.
 *
 * A value over FG_STORE_META_INLINE (16 MiB, the .fgt container's blob limit; Gemma 3's
 * tokenizer.json is 33 MB) is written by its batch as `meta-NNNNNN-K.blob`, NNNNNN the batch's
 * part-0 weight file, K the value's index in the batch: a 4096-byte checksummed header (store
 * id, owner file, key, length, the payload's XXH3), then the payload. Crash safety is the
 * batch's: the blob is fdatasynced before part 0 is published (whose directory fsync covers
 * the blob's entry too), and it becomes visible only through the catalog commit, whose `meta`
 * record (version 3) names it with its length and XXH3; part 0 carries the same reference as
 * `fg.store.metafile.<key>` so reindex rebuilds the record from the files alone. A blob whose
 * owner weight file is not in the catalog is a leftover: a writable open (R2) and reindex
 * remove it. Every read checks the header and the payload's XXH3 and fails with one line
 * naming the key and the file. SPEC "Catalog" / "meta" is the byte-level description.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "fg_bytes.h"
#include "store_int.h"

#define MF_MAGIC "FGMETAF\x01"
#define MF_HEADER 4096u
#define MF_KEY_AT 64u

void metafile_name(uint32_t owner, uint32_t k, char *buf, size_t n)
{
    snprintf(buf, n, "meta-%06u-%u.blob", owner, k);
}

uint32_t metafile_parse(const char *name)
{
    unsigned owner, k;
    int end = 0;
    if (sscanf(name, "meta-%6u-%u.blob%n", &owner, &k, &end) != 2 || name[end] != '\0' ||
        strlen(name) < 17 || owner == 0 || owner > STORE_MAX_FILES)
        return 0;
    return owner;
}

static void header_encode(const fg_store *s, const char *key, const metaref *r, uint8_t *h)
{
    size_t kn = strlen(key);
    memset(h, 0, MF_HEADER);
    memcpy(h, MF_MAGIC, 8);
    fg_put32(h + 8, 1);                 /* version */
    fg_put32(h + 12, (uint32_t)kn);     /* key length */
    memcpy(h + 16, s->uuid, 16);
    fg_put32(h + 32, r->owner);
    fg_put32(h + 36, r->k);
    fg_put64(h + 40, r->len);
    fg_put64(h + 48, r->xxh3);
    memcpy(h + MF_KEY_AT, key, kn);
    fg_put64(h + MF_HEADER - 8, XXH3_64bits(h, MF_HEADER - 8));
}

int metafile_write(fg_store *s, const char *key, const void *data, metaref *r, fg_err *err)
{
    char name[64], path[4200];
    metafile_name(r->owner, r->k, name, sizeof name);
    store_path(s, path, sizeof path, name);
    r->xxh3 = XXH3_64bits(data, r->len);
    uint8_t *h = malloc(MF_HEADER);
    if (!h)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    header_encode(s, key, r, h);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644), rc = 0;
    if (fd < 0)
        rc = -errno;
    if (!rc)
        rc = io_write_all(s, fd, h, MF_HEADER, 0);
    if (!rc && r->len)
        rc = io_write_all(s, fd, data, r->len, MF_HEADER);
    if (!rc)
        rc = io_sync(s, fd);
    free(h);
    if (fd >= 0)
        close(fd);
    if (rc && fd >= 0)
        unlink(path);
    return rc ? io_fail(err, rc, path, "writing metadata") : FG_OK;
}

void metafile_remove(const fg_store *s, const metaref *r)
{
    char name[64], path[4200];
    metafile_name(r->owner, r->k, name, sizeof name);
    store_path(s, path, sizeof path, name);
    unlink(path);
}

/* The header of path must be intact and name this store, key and reference. */
static int header_check(fg_store *s, int fd, const char *key, const metaref *r,
                        const char *path, fg_err *err)
{
    uint8_t *h = malloc(MF_HEADER);
    if (!h)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->dir);
    size_t got = 0;
    int rc = io_read_all(s, fd, h, MF_HEADER, 0, &got);
    if (rc) {
        free(h);
        return fg_err_set(err, FG_ERR_CHECKSUM, "%s: metadata '%s': its file is truncated (%zu of "
                          "%u header bytes)", path, key, got, MF_HEADER);
    }
    uint8_t *e = malloc(MF_HEADER);
    if (e)
        header_encode(s, key, r, e);
    int ok = e && !memcmp(h, e, MF_HEADER);
    int foreign = memcmp(h, MF_MAGIC, 8) == 0 && memcmp(h + 16, s->uuid, 16) != 0;
    free(h);
    free(e);
    if (foreign)
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "%s: metadata '%s': the file belongs to "
                          "another store", path, key);
    if (!ok)
        return fg_err_set(err, FG_ERR_CHECKSUM, "%s: metadata '%s': damaged header or not the "
                          "file the catalog names", path, key);
    return FG_OK;
}

int metafile_read(fg_store *s, const char *key, const metaref *r, void **data, fg_err *err)
{
    char name[64], path[4200];
    metafile_name(r->owner, r->k, name, sizeof name);
    store_path(s, path, sizeof path, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_STORE_MISSING : FG_ERR_IO, errno,
                          "%s: metadata '%s': cannot open its file", path, key);
    int rc = header_check(s, fd, key, r, path, err);
    uint8_t *p = rc ? NULL : malloc(r->len ? r->len : 1);
    if (!rc && !p)
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: metadata '%s': out of memory for %llu bytes",
                        path, key, (unsigned long long)r->len);
    size_t got = 0;
    if (!rc && r->len && io_read_all(s, fd, p, r->len, MF_HEADER, &got))
        rc = fg_err_set(err, FG_ERR_CHECKSUM, "%s: metadata '%s': truncated (%zu of %llu bytes)",
                        path, key, got, (unsigned long long)r->len);
    if (!rc && XXH3_64bits(p, r->len) != r->xxh3)
        rc = fg_err_set(err, FG_ERR_CHECKSUM, "%s: metadata '%s': checksum mismatch (the file "
                        "is damaged)", path, key);
    close(fd);
    if (rc) {
        free(p);
        return rc;
    }
    if (data)
        *data = p;
    else
        free(p);
    return FG_OK;
}

void metaref_encode(const metaref *r, uint8_t out[METAREF_SIZE])
{
    memset(out, 0, METAREF_SIZE);
    fg_put32(out, r->k);
    fg_put64(out + 8, r->len);
    fg_put64(out + 16, r->xxh3);
}

int metaref_decode(const void *in, size_t n, uint32_t owner, metaref *r)
{
    const uint8_t *p = in;
    if (n != METAREF_SIZE || fg_le32(p + 4) != 0)
        return FG_ERR_CORRUPT;
    r->owner = owner;
    r->k = fg_le32(p);
    r->len = fg_le64(p + 8);
    r->xxh3 = fg_le64(p + 16);
    return r->len > FG_STORE_META_MAX ? FG_ERR_CORRUPT : FG_OK;
}
