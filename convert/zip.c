/* zip.c - the part of ZIP that torch.save archives use: stored entries, optional ZIP64.
 *
 * The reader finds the end-of-central-directory record (EOCD) in the last 22 + 65535 bytes,
 * requiring its comment length to reach exactly the end of the file; follows the ZIP64 locator
 * and ZIP64 EOCD when present; reads the central directory (bounded by CK_ZIP_MAX_CD) and then
 * every entry's local header, and cross-checks the two: signature, name, method, and (when the
 * data-descriptor flag is clear) CRC and sizes. Only method 0 (stored) is accepted: compressed
 * entries are refused with their name. Encrypted entries and multi-disk archives are refused.
 * Every offset and length is checked against the file; entries' [local header, data end)
 * ranges must lie before the central directory and must not overlap one another; names are
 * 1..CK_ZIP_MAX_NAME bytes without NUL and unique.
 *
 * Nothing is decompressed and no entry data is read here; callers pread what they need.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "fg_bytes.h"

#define SIG_EOCD 0x06054b50u
#define SIG_Z64_LOC 0x07064b50u
#define SIG_Z64_EOCD 0x06064b50u
#define SIG_CEN 0x02014b50u
#define SIG_LOC 0x04034b50u
#define EOCD_LEN 22u
#define CEN_LEN 46u
#define LOC_LEN 30u

typedef struct zdir {
    uint64_t n, cd_off, cd_size, cd_end_limit; /* cd must end at or before cd_end_limit */
} zdir;

typedef struct zent {
    ck_zip_entry pub;
    uint64_t lho, csize, usize;
    uint32_t crc;
    uint16_t flags, method;
} zent;

static int find_eocd(const ck_src *s, uint64_t *eocd_off, uint8_t rec[EOCD_LEN], fg_err *err)
{
    uint64_t tail = s->size < EOCD_LEN + 65535u ? s->size : EOCD_LEN + 65535u;
    if (tail < EOCD_LEN)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: too short to be a zip archive", s->label);
    uint8_t *buf = malloc((size_t)tail);
    if (!buf)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->label);
    int rc = ck_src_read(s, s->size - tail, buf, (size_t)tail, "zip end record", err);
    for (uint64_t i = tail - EOCD_LEN + 1; rc == FG_OK && i-- > 0;) {
        if (fg_le32(buf + i) == SIG_EOCD && i + EOCD_LEN + fg_le16(buf + i + 20) == tail) {
            memcpy(rec, buf + i, EOCD_LEN);
            *eocd_off = s->size - tail + i;
            free(buf);
            return FG_OK;
        }
    }
    free(buf);
    if (rc)
        return rc;
    return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: no zip end-of-central-directory record (not a "
                      "zip archive, or truncated)", s->label);
}

static int read_zip64(const ck_src *s, uint64_t eocd_off, zdir *d, fg_err *err)
{
    uint8_t loc[20], z[56];
    int rc = ck_src_read(s, eocd_off - 20, loc, 20, "zip64 locator", err);
    if (rc)
        return rc;
    if (fg_le32(loc) != SIG_Z64_LOC)
        return 1; /* no ZIP64 records */
    uint64_t zoff = fg_le64(loc + 8);
    if (fg_le32(loc + 4) != 0 || fg_le32(loc + 16) > 1)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported",
                          s->label);
    if (zoff > eocd_off - 20 || eocd_off - 20 - zoff < 56)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: zip64 end record offset %llu is invalid",
                          s->label, (unsigned long long)zoff);
    if ((rc = ck_src_read(s, zoff, z, 56, "zip64 end record", err)))
        return rc;
    if (fg_le32(z) != SIG_Z64_EOCD)
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: zip64 end record has a bad signature", s->label);
    if (fg_le32(z + 16) != 0 || fg_le32(z + 20) != 0 || fg_le64(z + 24) != fg_le64(z + 32))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported",
                          s->label);
    d->n = fg_le64(z + 32);
    d->cd_size = fg_le64(z + 40);
    d->cd_off = fg_le64(z + 48);
    d->cd_end_limit = zoff;
    return FG_OK;
}

static int read_dir(const ck_src *s, zdir *d, fg_err *err)
{
    uint8_t e[EOCD_LEN] = {0};
    uint64_t eocd_off = 0;
    int rc = find_eocd(s, &eocd_off, e, err);
    if (rc)
        return rc;
    if (fg_le16(e + 4) != 0 || fg_le16(e + 6) != 0 || fg_le16(e + 8) != fg_le16(e + 10))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported",
                          s->label);
    d->n = fg_le16(e + 10);
    d->cd_size = fg_le32(e + 12);
    d->cd_off = fg_le32(e + 16);
    d->cd_end_limit = eocd_off;
    if (eocd_off >= 20 && (rc = read_zip64(s, eocd_off, d, err)) < 0)
        return rc;
    if (d->n > CK_ZIP_MAX_ENTRIES || d->cd_size > CK_ZIP_MAX_CD)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: zip central directory of %llu entries / %llu "
                          "bytes exceeds the limits", s->label, (unsigned long long)d->n,
                          (unsigned long long)d->cd_size);
    if (d->cd_off > d->cd_end_limit || d->cd_size > d->cd_end_limit - d->cd_off)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: zip central directory lies outside the "
                          "file", s->label);
    if (d->n * CEN_LEN > d->cd_size)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip central directory too small for %llu "
                          "entries", s->label, (unsigned long long)d->n);
    return FG_OK;
}

/* ZIP64 extended information (header 0x0001): fields present only where the 32-bit field is
 * saturated, in the order usize, csize, lho. */
static int apply_zip64_extra(const uint8_t *x, size_t xl, zent *z, int local)
{
    for (size_t p = 0; p + 4 <= xl;) {
        uint16_t id = fg_le16(x + p), len = fg_le16(x + p + 2);
        if (p + 4 + len > xl)
            return -1;
        if (id == 0x0001) {
            const uint8_t *f = x + p + 4;
            size_t at = 0;
            uint64_t *fields[3] = {&z->usize, &z->csize, &z->lho};
            for (int i = 0; i < (local ? 2 : 3); i++) {
                if (*fields[i] != 0xffffffffu)
                    continue;
                if (at + 8 > len)
                    return -1;
                *fields[i] = fg_le64(f + at);
                at += 8;
            }
            return 0;
        }
        p += 4 + (size_t)len;
    }
    return 0;
}

static int name_ok(const uint8_t *n, size_t len)
{
    return len > 0 && len <= CK_ZIP_MAX_NAME && memchr(n, 0, len) == NULL;
}

/* Parse central directory entry at cd[*pos]; advances *pos. */
static int parse_cen(const ck_src *s, const uint8_t *cd, uint64_t cd_size, uint64_t *pos, zent *z,
                     fg_err *err)
{
    const uint8_t *c = cd + *pos;
    if (cd_size - *pos < CEN_LEN || fg_le32(c) != SIG_CEN)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip central directory entry at +%llu is "
                          "malformed", s->label, (unsigned long long)*pos);
    size_t nl = fg_le16(c + 28), xl = fg_le16(c + 30), cl = fg_le16(c + 32);
    if (cd_size - *pos - CEN_LEN < nl + xl + cl)
        return fg_err_set(err, FG_ERR_TRUNCATED, "%s: zip central directory entry runs past the "
                          "directory", s->label);
    if (!name_ok(c + CEN_LEN, nl))
        return fg_err_set(err, FG_ERR_BAD_NAME, "%s: zip entry name empty, longer than %u bytes "
                          "or holding NUL", s->label, CK_ZIP_MAX_NAME);
    z->flags = fg_le16(c + 8);
    z->method = fg_le16(c + 10);
    z->crc = fg_le32(c + 16);
    z->csize = fg_le32(c + 20);
    z->usize = fg_le32(c + 24);
    z->lho = fg_le32(c + 42);
    z->pub.name = malloc(nl + 1);
    if (!z->pub.name)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", s->label);
    memcpy(z->pub.name, c + CEN_LEN, nl);
    z->pub.name[nl] = '\0';
    if (apply_zip64_extra(c + CEN_LEN + nl, xl, z, 0))
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s: malformed extra field", s->label,
                          z->pub.name);
    if (fg_le16(c + 34) != 0 && fg_le16(c + 34) != 0xffff)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: zip entry %s is on another disk", s->label,
                          z->pub.name);
    *pos += CEN_LEN + nl + xl + cl;
    return FG_OK;
}

static int check_local(const ck_src *s, zent *z, uint64_t cd_off, fg_err *err)
{
    const char *nm = z->pub.name;
    if (z->flags & 0x41u)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: zip entry %s is encrypted", s->label, nm);
    if (z->method != 0)
        return fg_err_set(err, FG_ERR_DISALLOWED, "%s: zip entry %s is compressed (method %u); fg "
                          "reads only stored entries (torch.save writes them)", s->label, nm,
                          z->method);
    if (z->csize != z->usize)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s is stored but its sizes differ",
                          s->label, nm);
    uint8_t l[LOC_LEN + CK_ZIP_MAX_NAME];
    size_t nl = strlen(nm);
    int rc = ck_src_read(s, z->lho, l, LOC_LEN, "zip local header", err);
    if (rc)
        return rc;
    size_t lnl = fg_le16(l + 26), lxl = fg_le16(l + 28);
    if (fg_le32(l) != SIG_LOC || lnl != nl)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s: local header does not match the "
                          "central directory", s->label, nm);
    if ((rc = ck_src_read(s, z->lho + LOC_LEN, l + LOC_LEN, nl, "zip local header name", err)))
        return rc;
    if (memcmp(l + LOC_LEN, nm, nl) != 0 || fg_le16(l + 8) != z->method)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s: local header name or method "
                          "differs from the central directory", s->label, nm);
    if (!(fg_le16(l + 6) & 0x8u)) {
        zent lz = *z;
        lz.csize = fg_le32(l + 18);
        lz.usize = fg_le32(l + 22);
        if (lz.csize == 0xffffffffu || lz.usize == 0xffffffffu) {
            uint8_t x[256];
            size_t take = lxl < sizeof x ? lxl : sizeof x;
            if ((rc = ck_src_read(s, z->lho + LOC_LEN + nl, x, take, "zip local extra", err)))
                return rc;
            if (apply_zip64_extra(x, take, &lz, 1))
                return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s: malformed local extra "
                                  "field", s->label, nm);
        }
        if (fg_le32(l + 14) != z->crc || lz.csize != z->csize || lz.usize != z->usize)
            return fg_err_set(err, FG_ERR_CORRUPT, "%s: zip entry %s: local header CRC or sizes "
                              "differ from the central directory", s->label, nm);
    }
    z->pub.data_off = z->lho + LOC_LEN + nl + lxl;
    z->pub.size = z->usize;
    if (z->pub.data_off > cd_off || z->pub.size > cd_off - z->pub.data_off)
        return fg_err_set(err, FG_ERR_OUT_OF_BOUNDS, "%s: zip entry %s: data runs into the central "
                          "directory or past the file", s->label, nm);
    return FG_OK;
}

static int cmp_lho(const void *a, const void *b)
{
    const zent *x = a, *y = b;
    return x->lho < y->lho ? -1 : x->lho > y->lho;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const ck_zip_entry *)a)->name, ((const ck_zip_entry *)b)->name);
}

static int check_layout(const ck_src *s, zent *z, uint64_t n, fg_err *err)
{
    qsort(z, (size_t)n, sizeof *z, cmp_lho);
    for (uint64_t i = 1; i < n; i++)
        if (z[i - 1].pub.data_off + z[i - 1].pub.size > z[i].lho)
            return fg_err_set(err, FG_ERR_OVERLAP, "%s: zip entries %s and %s overlap", s->label,
                              z[i - 1].pub.name, z[i].pub.name);
    return FG_OK;
}

static int load_entries(const ck_src *s, const zdir *d, zent *z, fg_err *err)
{
    uint8_t *cd = malloc(d->cd_size ? (size_t)d->cd_size : 1);
    if (!cd)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for the zip directory", s->label);
    int rc = ck_src_read(s, d->cd_off, cd, (size_t)d->cd_size, "zip central directory", err);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < d->n && rc == FG_OK; i++) {
        z[i].pub.cd_index = (uint32_t)i;
        rc = parse_cen(s, cd, d->cd_size, &pos, &z[i], err);
    }
    free(cd);
    for (uint64_t i = 0; i < d->n && rc == FG_OK; i++)
        rc = check_local(s, &z[i], d->cd_off, err);
    if (rc == FG_OK)
        rc = check_layout(s, z, d->n, err);
    return rc;
}

int ck_zip_open(const ck_src *src, ck_zip *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    zdir d = {0};
    int rc = read_dir(src, &d, err);
    if (rc)
        return rc;
    zent *z = calloc(d.n ? (size_t)d.n : 1, sizeof *z);
    if (!z)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", src->label);
    rc = load_entries(src, &d, z, err);
    out->e = calloc(d.n ? (size_t)d.n : 1, sizeof *out->e);
    if (!out->e && rc == FG_OK)
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", src->label);
    for (uint64_t i = 0; i < d.n; i++) {
        if (out->e)
            out->e[i] = z[i].pub;
        else
            free(z[i].pub.name);
    }
    out->n = out->e ? (uint32_t)d.n : 0;
    free(z);
    if (rc == FG_OK) {
        qsort(out->e, out->n, sizeof *out->e, cmp_name);
        for (uint32_t i = 1; i < out->n && rc == FG_OK; i++)
            if (strcmp(out->e[i - 1].name, out->e[i].name) == 0)
                rc = fg_err_set(err, FG_ERR_DUPLICATE, "%s: zip entry %s appears twice",
                                src->label, out->e[i].name);
    }
    if (rc)
        ck_zip_free(out);
    return rc;
}

void ck_zip_free(ck_zip *z)
{
    if (!z)
        return;
    for (uint32_t i = 0; i < z->n; i++)
        free(z->e[i].name);
    free(z->e);
    z->e = NULL;
    z->n = 0;
}

const ck_zip_entry *ck_zip_find(const ck_zip *z, const char *name)
{
    ck_zip_entry key = {.name = (char *)name};
    return z->n ? bsearch(&key, z->e, z->n, sizeof *z->e, cmp_name) : NULL;
}
