/* lmdb_check.c - check a catalog's data.mdb with pread before LMDB maps it.
 *
 * LMDB trusts its data file: it maps it and follows page numbers and node offsets without
 * bounds checks, so a truncated file (a page past the end: SIGBUS) or garbage (a wild offset:
 * SIGSEGV) kills the process. The catalog is derived data that reindex rebuilds, so a damaged
 * one must be an error that says so, never a signal. This file reads what LMDB would read,
 * with pread into a buffer, and checks it against the layout of LMDB 0.9 on a 64-bit host
 * (mdb.c: MDB_page, MDB_meta, MDB_db, MDB_node; the one Debian 12 ships):
 *
 *   - both meta pages (0 and 1, the second at the page size the first names): P_META flag,
 *     page number, magic 0xBEEFC0DE, data version 1, the same page size (a power of two in
 *     [512, 65536]), a map size below 2^48 and not smaller than the pages in use, a last page
 *     number inside the map; LMDB uses the meta with the higher txnid (meta 1 on a tie loses);
 *   - from that meta, the free-page tree and the main tree, and through the main tree every
 *     named database's tree (F_SUBDATA records): each page lies inside the file and says it is
 *     the page asked for (a zeroed or overwritten page does not), is a branch or leaf page with
 *     at least one node and sane lower/upper bounds, every node and its key and data lie inside
 *     the page, node and database flags are those the store writes (no sorted duplicates, no
 *     integer or reverse keys outside the free-page tree, whose keys are 8 bytes; a
 *     sub-database record inline, in the main tree only), every child
 *     and overflow page number is inside the file and not beyond last_pg, overflow runs hold
 *     their data, the depth stays within LMDB's cursor stack (32), and no page is reached twice
 *     (so the walk is O(file) even for a crafted file).
 *
 * A file that passes can be opened and read by LMDB without touching a byte outside the file
 * or outside a page. The walk reads every page reachable from the meta in use: about a
 * millisecond per MB of catalog from the page cache. A writer in another process may commit
 * during the walk; the metas are read again afterwards and the walk is repeated when a txnid
 * moved (pages reachable from the latest meta are never rewritten until a later commit).
 * Limits: page contents beyond structure (key order, record encodings) are not checked here:
 * the store's record decoders check values, and LMDB's own checks catch misordered keys as
 * MDB_CORRUPTED or "not found". Duplicate-sorted databases (unused by the store) are refused.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_bytes.h"
#include "store_int.h"

#define PAGEHDRSZ 16u
#define NODESIZE 8u
#define DB_SIZE 48u
#define META_OFF 16u        /* MDB_meta after the page header */
#define META_END (META_OFF + 136u)
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_DIRTY 0x10u
#define P_LOOSE 0x4000u
#define P_KEEP 0x8000u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define LMDB_MAGIC 0xBEEFC0DEu
#define MAX_DEPTH 32
#define P_INVALID UINT64_MAX

typedef struct lc_db {
    uint16_t flags, depth;
    uint64_t root;
} lc_db;

typedef struct lc_meta {
    uint32_t psize;
    uint64_t mapsize, last_pg, txnid;
    lc_db dbs[2]; /* FREE_DBI, MAIN_DBI */
} lc_meta;

typedef struct lc {
    lc_read_fn rd;
    void *ctx;
    uint64_t size, pages, last_pg;
    uint32_t psize;
    uint8_t *seen;  /* one bit per page of the file */
    uint8_t *buf;   /* MAX_DEPTH + 1 page buffers */
    char *why;
    size_t why_n;
} lc;

static int bad(lc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(lc *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_n, fmt, ap);
    va_end(ap);
    return -1;
}

static void db_decode(const uint8_t *p, lc_db *d)
{
    d->flags = fg_le16(p + 4);
    d->depth = fg_le16(p + 6);
    d->root = fg_le64(p + 40);
}

/* Meta page i (i = 0: offset 0; i = 1: offset psize of meta 0). */
static int meta_read(lc *c, int i, uint32_t psize, lc_meta *m)
{
    uint8_t b[META_END];
    uint64_t off = i ? psize : 0;
    if (off + sizeof b > c->size || c->rd(c->ctx, b, sizeof b, off))
        return bad(c, "meta page %d: file ends at %llu bytes", i, (unsigned long long)c->size);
    if (!(fg_le16(b + 10) & P_META) || fg_le64(b) != (uint64_t)i)
        return bad(c, "meta page %d: not a meta page", i);
    if (fg_le32(b + META_OFF) != LMDB_MAGIC)
        return bad(c, "meta page %d: no LMDB magic", i);
    if (fg_le32(b + META_OFF + 4) != 1)
        return bad(c, "meta page %d: LMDB data version %u, not 1", i, fg_le32(b + META_OFF + 4));
    m->mapsize = fg_le64(b + META_OFF + 16);
    db_decode(b + META_OFF + 24, &m->dbs[0]);
    db_decode(b + META_OFF + 24 + DB_SIZE, &m->dbs[1]);
    m->psize = fg_le32(b + META_OFF + 24); /* FREE_DBI's md_pad */
    m->last_pg = fg_le64(b + META_OFF + 120);
    m->txnid = fg_le64(b + META_OFF + 128);
    if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
        return bad(c, "meta page %d: page size %u", i, m->psize);
    if (i && m->psize != psize)
        return bad(c, "meta pages disagree on the page size (%u, %u)", psize, m->psize);
    if (m->dbs[0].flags != 0x08 || m->dbs[1].flags != 0) /* MDB_INTEGERKEY on the free tree */
        return bad(c, "meta page %d: database flags %#x, %#x", i, m->dbs[0].flags,
                   m->dbs[1].flags);
    if (m->mapsize > (1ull << 48) || m->last_pg < 1 || m->last_pg >= (1ull << 48) / m->psize ||
        (m->last_pg + 1) * m->psize > (m->mapsize > c->size ? m->mapsize : c->size))
        return bad(c, "meta page %d: map size %llu and last page %llu do not fit together", i,
                   (unsigned long long)m->mapsize, (unsigned long long)m->last_pg);
    return 0;
}

/* Read page pgno into b and check its number; mark it seen. */
static int page_get(lc *c, uint64_t pgno, uint8_t *b, const char *what)
{
    if (pgno < 2 || pgno > c->last_pg || pgno >= c->pages)
        return bad(c, "%s: page %llu is outside the file (%llu pages, last page %llu)", what,
                   (unsigned long long)pgno, (unsigned long long)c->pages,
                   (unsigned long long)c->last_pg);
    if (c->seen[pgno >> 3] & (1u << (pgno & 7)))
        return bad(c, "%s: page %llu is reached twice", what, (unsigned long long)pgno);
    c->seen[pgno >> 3] |= (uint8_t)(1u << (pgno & 7));
    if (c->rd(c->ctx, b, c->psize, pgno * c->psize))
        return bad(c, "%s: page %llu cannot be read", what, (unsigned long long)pgno);
    if (fg_le64(b) != pgno)
        return bad(c, "%s: page %llu says it is page %llu (overwritten or zeroed)", what,
                   (unsigned long long)pgno, (unsigned long long)fg_le64(b));
    return 0;
}

/* An overflow run of data bytes starting at pgno. */
static int overflow_check(lc *c, uint64_t pgno, uint64_t data, uint8_t *b, const char *what)
{
    if (page_get(c, pgno, b, what))
        return -1;
    uint64_t n = fg_le32(b + 12);
    if (!(fg_le16(b + 10) & P_OVERFLOW) || n < 1 || pgno + n > c->pages ||
        pgno + n - 1 > c->last_pg || n * c->psize - PAGEHDRSZ < data)
        return bad(c, "%s: overflow page %llu (%llu pages) does not hold %llu bytes", what,
                   (unsigned long long)pgno, (unsigned long long)n, (unsigned long long)data);
    for (uint64_t k = 1; k < n; k++) /* the run's other pages belong to it alone */
        c->seen[(pgno + k) >> 3] |= (uint8_t)(1u << ((pgno + k) & 7));
    return 0;
}

enum { T_FREE = 0, T_MAIN = 1, T_NAMED = 2 }; /* which tree a page belongs to */

static int walk(lc *c, uint64_t pgno, int depth, int tree, const char *what);

/* Node k of page b (already bounds-checked page header). */
static int node_check(lc *c, const uint8_t *b, unsigned k, int leaf, int depth, int tree,
                      const char *what)
{
    unsigned ptr = fg_le16(b + PAGEHDRSZ + 2 * k), upper = fg_le16(b + 14);
    uint64_t pgno = fg_le64(b);
    if (ptr < upper || ptr + NODESIZE > c->psize)
        return bad(c, "%s: page %llu node %u at offset %u is outside the page", what,
                   (unsigned long long)pgno, k, ptr);
    const uint8_t *n = b + ptr;
    unsigned lo = fg_le16(n), hi = fg_le16(n + 2), flags = fg_le16(n + 4), ks = fg_le16(n + 6);
    uint64_t end = (uint64_t)ptr + NODESIZE + ks;
    if (tree == T_FREE && ks != 8 && (leaf || k > 0)) /* LMDB compares them as 8-byte ints */
        return bad(c, "%s: page %llu node %u: key of %u bytes, not 8", what,
                   (unsigned long long)pgno, k, ks);
    if (!leaf) {
        uint64_t child = lo | (uint64_t)hi << 16 | (uint64_t)flags << 32;
        if (end > c->psize)
            return bad(c, "%s: page %llu node %u: key runs past the page", what,
                       (unsigned long long)pgno, k);
        return walk(c, child, depth + 1, tree, what);
    }
    uint64_t dsize = lo | (uint64_t)hi << 16;
    if ((flags & ~(F_BIGDATA | F_SUBDATA)) || flags == (F_BIGDATA | F_SUBDATA))
        return bad(c, "%s: page %llu node %u: flags %#x", what, (unsigned long long)pgno, k,
                   flags); /* F_DUPDATA is never written here; a sub-database record inline */
    if (end + (flags & F_BIGDATA ? 8 : dsize) > c->psize)
        return bad(c, "%s: page %llu node %u: key or data runs past the page", what,
                   (unsigned long long)pgno, k);
    if (flags & F_BIGDATA)
        return overflow_check(c, fg_le64(n + NODESIZE + ks), dsize, c->buf + (size_t)(depth + 1) *
                              c->psize, what);
    if (flags & F_SUBDATA) { /* a named database: its MDB_db record */
        if (tree != T_MAIN || dsize != DB_SIZE)
            return bad(c, "%s: page %llu node %u: a sub-database record where none belongs",
                       what, (unsigned long long)pgno, k);
        lc_db d;
        db_decode(n + NODESIZE + ks, &d);
        char name[80];
        snprintf(name, sizeof name, "database '%.*s'", ks > 40 ? 40 : (int)ks,
                 (const char *)n + NODESIZE);
        if (d.flags) /* comparators and sorted duplicates the store never asks for */
            return bad(c, "%s: flags %#x, the store creates none", name, d.flags);
        return d.root == P_INVALID ? 0 : walk(c, d.root, depth + 1, T_NAMED, name);
    }
    return 0;
}

/* The tree below pgno; depth 0 is a root. Buffers: one per level. */
static int walk(lc *c, uint64_t pgno, int depth, int tree, const char *what)
{
    if (depth >= MAX_DEPTH)
        return bad(c, "%s: tree deeper than %d pages", what, MAX_DEPTH);
    uint8_t *b = c->buf + (size_t)depth * c->psize;
    if (page_get(c, pgno, b, what))
        return -1;
    unsigned flags = fg_le16(b + 10), lower = fg_le16(b + 12), upper = fg_le16(b + 14);
    unsigned kind = flags & ~(P_DIRTY | P_LOOSE | P_KEEP); /* in-memory bits: ignored */
    int leaf = kind == P_LEAF;
    if (kind != P_LEAF && kind != P_BRANCH)
        return bad(c, "%s: page %llu has flags %#x, not a branch or leaf page", what,
                   (unsigned long long)pgno, flags);
    if (lower <= PAGEHDRSZ || (lower - PAGEHDRSZ) % 2 || upper < lower || upper > c->psize)
        /* no node at all: LMDB never leaves an empty page in a tree, and reads node 0 of a
         * leaf without looking at the count */
        return bad(c, "%s: page %llu has bounds %u..%u", what, (unsigned long long)pgno, lower,
                   upper);
    for (unsigned k = 0; k < (lower - PAGEHDRSZ) / 2; k++)
        if (node_check(c, b, k, leaf, depth, tree, what))
            return -1;
    return 0;
}

static int check_once(lc *c, lc_meta *used)
{
    lc_meta m[2];
    if (c->size < 2 * 512)
        return bad(c, "file of %llu bytes is shorter than two meta pages",
                   (unsigned long long)c->size);
    if (meta_read(c, 0, 0, &m[0]) || meta_read(c, 1, m[0].psize, &m[1]))
        return -1;
    *used = m[m[1].txnid > m[0].txnid];
    c->psize = used->psize;
    c->last_pg = used->last_pg;
    c->pages = c->size / c->psize;
    free(c->seen);
    free(c->buf);
    c->seen = calloc(c->pages / 8 + 1, 1);
    c->buf = malloc((size_t)(MAX_DEPTH + 1) * c->psize);
    if (!c->seen || !c->buf)
        return bad(c, "out of memory");
    static const char *names[2] = {"free-page tree", "main tree"};
    for (int i = 0; i < 2; i++)
        if (used->dbs[i].root != P_INVALID && walk(c, used->dbs[i].root, 0, i, names[i]))
            return -1;
    return 0;
}

int cat_file_check(lc_read_fn rd, void *ctx, uint64_t size, char *why, size_t why_n)
{
    lc c = {rd, ctx, size, 0, 0, 0, NULL, NULL, why, why_n};
    int rc = -1;
    for (int attempt = 0; attempt < 5 && rc; attempt++) {
        lc_meta used = {.txnid = UINT64_MAX}, again[2];
        rc = check_once(&c, &used);
        char keep[256];
        snprintf(keep, sizeof keep, "%s", why);
        /* a commit while we walked (the txnid in use moved): walk the new state */
        if (rc && meta_read(&c, 0, 0, &again[0]) == 0 &&
            meta_read(&c, 1, again[0].psize, &again[1]) == 0 &&
            again[again[1].txnid > again[0].txnid].txnid != used.txnid)
            continue;
        snprintf(why, why_n, "%s", keep);
        break;
    }
    free(c.seen);
    free(c.buf);
    return rc;
}
