/* prefix.c - the prefix KV cache over a store's KV pages (prefix.h; SPEC "Prefix cache").
 *
 * Keys. The store's KV key is (job u64, seq u32, layer u32, page u32). A cached prompt page
 * with chain hash h (XXH3-128, see prefix.h) lives at job = low 64 bits of h (never 0),
 * seq = low 32 bits of the high half, page = its page number, one layer key per model layer
 * and layer FG_PREFIX_META_LAYER for its meta page. The identity page sits at (0, 0,
 * FG_PREFIX_IDENT_LAYER, 0). So one entry is the store keys sharing (job, seq): a free of
 * those two fields evicts it whole.
 *
 * Trust. A lookup believes a page only after the store checked its header and payload
 * checksums and its catalog record (fg_store_kv_read), and the meta page repeats the tokens,
 * the parent key, the page number and the identity: a 96-bit key collision or a page written
 * under another identity is a miss, never wrong KV rows.
 *
 * Crash safety. An entry (its layer pages and meta page) is written by one fg_store_kv_write,
 * whose pages are fdatasynced before the one catalog commit that maps them; a kill at any
 * instant leaves each entry whole or absent, and a torn page fails its checksum.
 *
 * LRU. Every write (new entry, or a hit rewriting the meta page with hits + 1) gives the meta
 * page a larger store generation, so the meta generation orders entries by last use; eviction
 * frees the oldest entries until the pages in use fit the budget. Within one write, deeper
 * pages are written first (older), so a prefix is evicted after the pages that extend it.
 *
 * Sharing. The store has one writer at a time (an flock) and one handle per process: the cache
 * holds a read-only handle and reopens the store for writing only inside write_begin/end,
 * waiting while another process writes. Readers see committed snapshots; a page evicted by
 * another process under a reader is a miss (FG_ERR_STORE_STALE / NOT_FOUND), never garbage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "fg_bytes.h"
#include "fg_file.h"
#include "prefix.h"
#include "store.h"

#define IDENT_MAGIC "FGPFXID1"
#define META_MAGIC 0x4D504746u /* "FGPM" */
#define PREFIX_VERSION 1u
#define KEYED_BYTES 64u        /* bytes of the identity that feed the hash chain */
#define PUT_MAX_ENTRIES 4096u

struct fg_prefix {
    char *dir;
    fg_prefix_ident id;
    uint8_t ident_bytes[FG_PREFIX_IDENT_SIZE];
    XXH128_canonical_t root;  /* key_{-1} */
    uint64_t ident_lo;
    fg_prefix_opts o;
    fg_store *s;
    int writing;
    uint32_t page_size;       /* store slot bytes */
    size_t payload;           /* bytes of one layer payload */
    uint8_t *buf;             /* [page_size] meta reads */
    fg_prefix_key *touch;     /* keys found by lookups, hits not yet written */
    uint32_t *touch_page;
    size_t n_touch, cap_touch;
    fg_prefix_stats st;
};

/* ---- encodings ---- */

void fg_prefix_ident_encode(const fg_prefix_ident *id, uint8_t *o)
{
    memset(o, 0, FG_PREFIX_IDENT_SIZE);
    memcpy(o, IDENT_MAGIC, 8);
    fg_put16(o + 8, PREFIX_VERSION);
    fg_put16(o + 10, FG_PREFIX_IDENT_SIZE);
    fg_put32(o + 12, id->page_tokens);
    fg_put64(o + 16, id->model);
    fg_put32(o + 24, id->n_layers);
    fg_put32(o + 28, id->row_bytes);
    fg_put32(o + 32, id->width);
    o[36] = id->codec_id;
    o[37] = id->codec_bits;
    o[38] = id->codec_axis;
    o[39] = id->compute;
    fg_put32(o + 40, id->codec_group);
    o[44] = id->kv_single ? 1 : 0;
    memcpy(o + 48, id->backend, strnlen(id->backend, sizeof id->backend - 1));
    memcpy(o + 64, id->label, strnlen(id->label, sizeof id->label - 1));
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* A NUL-terminated printable string in a fixed field of n bytes, zero-padded. */
static int fixed_string(const uint8_t *p, size_t n, char *out)
{
    size_t len = strnlen((const char *)p, n);
    if (len == n || !all_zero(p + len, n - len))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (p[i] < 0x20 || p[i] > 0x7e)
            return 0;
    memcpy(out, p, len);
    out[len] = '\0';
    return 1;
}

int fg_prefix_ident_decode(const uint8_t *b, size_t len, fg_prefix_ident *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len != FG_PREFIX_IDENT_SIZE)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "prefix cache identity: %zu bytes, not %u",
                          len, FG_PREFIX_IDENT_SIZE);
    if (memcmp(b, IDENT_MAGIC, 8))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "prefix cache identity: bad magic");
    if (fg_le16(b + 8) != PREFIX_VERSION || fg_le16(b + 10) != FG_PREFIX_IDENT_SIZE)
        return fg_err_set(err, FG_ERR_VERSION, "prefix cache identity: version %u size %u",
                          fg_le16(b + 8), fg_le16(b + 10));
    if (!all_zero(b + 45, 3) || b[44] > 1)
        return fg_err_set(err, FG_ERR_RESERVED, "prefix cache identity: reserved bytes set");
    out->kv_single = b[44];
    out->page_tokens = fg_le32(b + 12);
    out->model = fg_le64(b + 16);
    out->n_layers = fg_le32(b + 24);
    out->row_bytes = fg_le32(b + 28);
    out->width = fg_le32(b + 32);
    out->codec_id = b[36];
    out->codec_bits = b[37];
    out->codec_axis = b[38];
    out->compute = b[39];
    out->codec_group = fg_le32(b + 40);
    if (!out->page_tokens || out->page_tokens > FG_PREFIX_MAX_PAGE_TOKENS || !out->n_layers ||
        out->n_layers > 65536 || !out->row_bytes || !out->width)
        return fg_err_set(err, FG_ERR_LIMIT, "prefix cache identity: page tokens %u, layers %u, "
                          "row bytes %u out of range", out->page_tokens, out->n_layers,
                          out->row_bytes);
    if (!fixed_string(b + 48, 16, out->backend) || !fixed_string(b + 64, 96, out->label))
        return fg_err_set(err, FG_ERR_CORRUPT, "prefix cache identity: bad backend or label");
    return FG_OK;
}

static void meta_encode(const fg_prefix *p, const fg_prefix_meta *m, const int32_t *tokens,
                        uint8_t *o)
{
    memset(o, 0, FG_PREFIX_META_HEAD);
    fg_put32(o, META_MAGIC);
    fg_put16(o + 4, PREFIX_VERSION);
    fg_put16(o + 6, FG_PREFIX_META_HEAD);
    fg_put64(o + 8, m->parent_job);
    fg_put32(o + 16, m->parent_seq);
    fg_put32(o + 20, m->page);
    fg_put32(o + 24, m->n_tokens);
    fg_put64(o + 32, m->hits);
    fg_put64(o + 40, m->created);
    fg_put64(o + 48, m->used);
    fg_put64(o + 56, p->ident_lo);
    for (uint32_t i = 0; i < m->n_tokens; i++)
        fg_put32(o + FG_PREFIX_META_HEAD + 4 * i, (uint32_t)tokens[i]);
}

int fg_prefix_meta_decode(const uint8_t *b, size_t len, fg_prefix_meta *m, fg_err *err)
{
    memset(m, 0, sizeof *m);
    if (len < FG_PREFIX_META_HEAD)
        return fg_err_set(err, FG_ERR_TRUNCATED, "prefix cache meta page: %zu bytes", len);
    if (fg_le32(b) != META_MAGIC || fg_le16(b + 4) != PREFIX_VERSION ||
        fg_le16(b + 6) != FG_PREFIX_META_HEAD)
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "prefix cache meta page: bad magic or version");
    if (!all_zero(b + 28, 4))
        return fg_err_set(err, FG_ERR_RESERVED, "prefix cache meta page: reserved bytes set");
    m->parent_job = fg_le64(b + 8);
    m->parent_seq = fg_le32(b + 16);
    m->page = fg_le32(b + 20);
    m->n_tokens = fg_le32(b + 24);
    m->hits = fg_le64(b + 32);
    m->created = fg_le64(b + 40);
    m->used = fg_le64(b + 48);
    m->ident = fg_le64(b + 56);
    if (!m->n_tokens || m->n_tokens > FG_PREFIX_MAX_PAGE_TOKENS ||
        len != FG_PREFIX_META_HEAD + 4 * (size_t)m->n_tokens)
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "prefix cache meta page: %u tokens in %zu "
                          "bytes", m->n_tokens, len);
    if ((m->page == 0) != (m->parent_job == 0 && m->parent_seq == 0))
        return fg_err_set(err, FG_ERR_CORRUPT, "prefix cache meta page: page %u with parent "
                          "%016llx", m->page, (unsigned long long)m->parent_job);
    m->tokens = b + FG_PREFIX_META_HEAD;
    return FG_OK;
}

/* ---- keys ---- */

static fg_prefix_key key_of(XXH128_hash_t h)
{
    fg_prefix_key k = {h.low64 ? h.low64 : 1, (uint32_t)h.high64};
    return k;
}

void fg_prefix_keys(const fg_prefix *p, const int32_t *ids, uint32_t n_pages, fg_prefix_key *keys)
{
    XXH128_canonical_t prev = p->root;
    XXH3_state_t st;
    uint8_t le[256];
    uint32_t G = p->id.page_tokens;
    for (uint32_t j = 0; j < n_pages; j++) {
        XXH3_128bits_reset(&st);
        XXH3_128bits_update(&st, &prev, sizeof prev);
        for (uint32_t i = 0; i < G; i += 64) {
            uint32_t m = G - i < 64 ? G - i : 64;
            for (uint32_t t = 0; t < m; t++)
                fg_put32(le + 4 * t, (uint32_t)ids[(size_t)j * G + i + t]);
            XXH3_128bits_update(&st, le, 4 * (size_t)m);
        }
        XXH128_hash_t h = XXH3_128bits_digest(&st);
        keys[j] = key_of(h);
        XXH128_canonicalFromHash(&prev, h);
    }
}

static fg_store_kv_key skey(const fg_prefix_key *k, uint32_t layer, uint32_t page)
{
    return (fg_store_kv_key){k->job, k->seq, layer, page};
}

/* ---- open and close ---- */

static size_t meta_bytes(const fg_prefix *p)
{
    return FG_PREFIX_META_HEAD + 4 * (size_t)p->id.page_tokens;
}

static int store_open(fg_prefix *p, unsigned flags, fg_err *err)
{
    fg_store_opts so = {0};
    so.kv_page_size = p->page_size;
    return fg_store_open(p->dir, flags, &so, &p->s, err);
}

/* What a creation killed part way leaves (fg_store_create: mkdir, store.id.tmp, store.id, the
 * catalog): nothing but those, no page file, and no process holding store.id's lock. Such a
 * cache holds no pages, so it is emptied and made again; without this a cache whose first run
 * was killed was refused for ever ("directory is not empty"). A lone store.id.tmp counts only
 * once it is a second old (a live creator renames it within milliseconds). 1: emptied. */
static int sweep_half_made(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int other = 0, id = 0, tmp = 0, cat = 0;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (!strcmp(n, "store.id"))
            id = 1;
        else if (!strcmp(n, "store.id.tmp"))
            tmp = 1;
        else if (!strcmp(n, "catalog"))
            cat = 1;
        else
            other = 1;
    }
    closedir(d);
    if (other || !(id || tmp || cat))
        return 0;
    char path[PATH_MAX];
    int fd = -1;
    if (id) { /* a store.id someone holds is a live store (or one being made) */
        snprintf(path, sizeof path, "%s/store.id", dir);
        if (fg_open_regular(path, O_RDONLY, &fd, NULL) || flock(fd, LOCK_EX | LOCK_NB)) {
            if (fd >= 0)
                close(fd);
            return 0;
        }
    } else if (tmp) {
        struct stat st;
        snprintf(path, sizeof path, "%s/store.id.tmp", dir);
        if (stat(path, &st) || time(NULL) - st.st_mtime < 1)
            return 0;
    }
    if (cat) {
        snprintf(path, sizeof path, "%s/catalog", dir);
        DIR *c = opendir(path);
        while (c && (e = readdir(c))) {
            char f[PATH_MAX];
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                snprintf(f, sizeof f, "%s/%s", path, e->d_name) < (int)sizeof f)
                unlink(f);
        }
        if (c)
            closedir(c);
        rmdir(path);
    }
    snprintf(path, sizeof path, "%s/store.id.tmp", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/store.id", dir);
    unlink(path);
    if (fd >= 0)
        close(fd);
    return 1;
}

/* Open the store, creating it when the directory is missing or not a store yet (another
 * process creating it at the same time is waited for: until its catalog exists, a reader sees
 * FG_ERR_STORE_CATALOG; a creation that was killed is swept, sweep_half_made). */
static int open_or_create(fg_prefix *p, fg_err *err)
{
    for (int tries = 0;; tries++) {
        int rc = store_open(p, FG_STORE_RDONLY, err);
        if (rc == FG_ERR_STORE_CATALOG && tries < 100) { /* another process is creating it */
            if (tries >= 25 && sweep_half_made(p->dir)) /* or a killed one left it */
                continue;
            usleep(20000);
            continue;
        }
        if (rc != FG_ERR_STORE_NOT_STORE && rc != FG_ERR_NOT_FOUND && rc != FG_ERR_IO)
            return rc;
        fg_store_opts so = {0};
        so.kv_page_size = p->page_size;
        so.kv_pages_per_file = 4096;
        fg_store *s;
        fg_err cerr;
        if (fg_store_create(p->dir, &so, &s, &cerr) == FG_OK) {
            fg_store_close(s);
            continue;
        }
        if (cerr.code == FG_ERR_EXISTS && sweep_half_made(p->dir))
            continue;
        if (tries >= 100 && rc == FG_ERR_IO) { /* unreadable (a FIFO as store.id): say so */
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return fg_err_set(err, rc, "--prefix-cache %s: %s", p->dir, why);
        }
        if (tries >= 100) /* not creatable: report why */
            return fg_err_set(err, cerr.code, "--prefix-cache %s: %s", p->dir, cerr.msg);
        usleep(20000);
    }
}

static int ident_mismatch(const fg_prefix *p, const fg_prefix_ident *have, uint32_t page_size,
                          fg_err *err)
{
    return fg_err_set(err, FG_ERR_STORE_FOREIGN,
                      "--prefix-cache %s was made for %s (KV codec %u/%u-bit, %u tokens a page, "
                      "%u layers, backend %s, compute %u, %u-byte pages), not %s (codec "
                      "%u/%u-bit, %u tokens a page, %u layers, backend %s, compute %u, %u-byte "
                      "pages): use another directory",
                      p->dir, have->label, have->codec_id, have->codec_bits, have->page_tokens,
                      have->n_layers, have->backend, have->compute, page_size, p->id.label,
                      p->id.codec_id, p->id.codec_bits, p->id.page_tokens, p->id.n_layers,
                      p->id.backend, p->id.compute, p->page_size);
}

/* A store without an identity page is made a cache only when it is an empty KV store of our
 * page size (one this process or another just created); anything else (a model store, a KV
 * store of another program or page size) is refused before a byte is written into it. */
static int fresh_cache(const fg_prefix *p, const fg_store_info *info, fg_err *err)
{
    if (info->n_tensors || info->n_weight_files)
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "--prefix-cache %s: a store of %" PRIu64
                          " weight tensors (a model), not a prefix cache: use another "
                          "directory", p->dir, info->n_tensors);
    if (info->kv_used || info->kv_page_size != p->page_size)
        return fg_err_set(err, FG_ERR_STORE_FOREIGN, "--prefix-cache %s: a KV store of %u-byte "
                          "pages (%" PRIu64 " in use) without a prefix cache's identity (this "
                          "run's pages are %u bytes): use another directory", p->dir,
                          info->kv_page_size, info->kv_used, p->page_size);
    return FG_OK;
}

/* Check the cache's identity page against ours; write it when the cache has none. */
static int check_ident(fg_prefix *p, fg_err *err)
{
    fg_store_kv_key k = {0, 0, FG_PREFIX_IDENT_LAYER, 0};
    fg_store_info info;
    int rc = fg_store_info_get(p->s, &info, err);
    if (rc)
        return rc;
    fg_store_kv_page pg;
    rc = fg_store_kv_read(p->s, &k, p->buf, p->page_size, &pg, err);
    if (rc == FG_ERR_NOT_FOUND) {
        if ((rc = fresh_cache(p, &info, err)))
            return rc;
        if ((rc = fg_prefix_write_begin(p, err)))
            return rc;
        fg_store_kv_write_req r = {k, 0, 0, 0, p->ident_bytes, FG_PREFIX_IDENT_SIZE};
        rc = fg_store_kv_lookup(p->s, &k, &pg, NULL) == FG_OK ? FG_OK
                                                              : fg_store_kv_write(p->s, 1, &r, NULL, err);
        int rc2 = fg_prefix_write_end(p, err);
        return rc ? rc : rc2 ? rc2 : check_ident(p, err);
    }
    fg_prefix_ident have;
    if (rc == FG_OK)
        rc = fg_prefix_ident_decode(p->buf, pg.payload_len, &have, err);
    if (rc)
        return fg_err_set(err, rc, "--prefix-cache %s: %s", p->dir, err->msg);
    if (memcmp(p->buf, p->ident_bytes, KEYED_BYTES) || info.kv_page_size != p->page_size)
        return ident_mismatch(p, &have, info.kv_page_size, err);
    return FG_OK;
}

int fg_prefix_open(const char *dir, const fg_prefix_ident *id, const fg_prefix_opts *opts,
                   fg_prefix **out, fg_err *err)
{
    fg_err local;
    err = err ? err : &local;
    *out = NULL;
    if (!id->page_tokens || id->page_tokens > FG_PREFIX_MAX_PAGE_TOKENS || !id->n_layers ||
        !id->row_bytes)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--prefix-cache: %u tokens a page (1..%u)",
                          id->page_tokens, FG_PREFIX_MAX_PAGE_TOKENS);
    fg_prefix *p = calloc(1, sizeof *p);
    if (!p || !(p->dir = strdup(dir))) {
        free(p);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    p->id = *id;
    if (opts)
        p->o = *opts;
    if (p->o.busy_wait_s <= 0)
        p->o.busy_wait_s = 30;
    fg_prefix_ident_encode(id, p->ident_bytes);
    XXH128_canonicalFromHash(&p->root, XXH3_128bits(p->ident_bytes, KEYED_BYTES));
    p->ident_lo = XXH3_128bits(p->ident_bytes, KEYED_BYTES).low64;
    p->payload = (id->kv_single ? 1 : 2) * (size_t)id->page_tokens * id->row_bytes;
    size_t need = p->payload > meta_bytes(p) ? p->payload : meta_bytes(p);
    need = (FG_STORE_KV_HEADER_SIZE + need + 4095) / 4096 * 4096;
    if (need > FG_STORE_KV_PAGE_MAX) {
        fg_prefix_close(p);
        return fg_err_set(err, FG_ERR_LIMIT, "--prefix-cache: a page of %u tokens is %zu bytes "
                          "a layer, over the store's %u", id->page_tokens, need,
                          FG_STORE_KV_PAGE_MAX);
    }
    p->page_size = (uint32_t)need;
    int rc = (p->buf = malloc(need)) ? open_or_create(p, err)
                                     : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK)
        rc = check_ident(p, err);
    if (rc) {
        fg_prefix_close(p);
        return rc;
    }
    *out = p;
    return FG_OK;
}

static int flush_touches(fg_prefix *p, fg_err *err);

void fg_prefix_close(fg_prefix *p)
{
    if (!p)
        return;
    if (p->n_touch && p->s && !p->writing && fg_prefix_write_begin(p, NULL) == FG_OK)
        fg_prefix_write_end(p, NULL);
    fg_store_close(p->s);
    free(p->touch);
    free(p->touch_page);
    free(p->buf);
    free(p->dir);
    free(p);
}

uint32_t fg_prefix_page_tokens(const fg_prefix *p) { return p->id.page_tokens; }
size_t fg_prefix_payload_bytes(const fg_prefix *p) { return p->payload; }
void fg_prefix_stats_get(const fg_prefix *p, fg_prefix_stats *out) { *out = p->st; }

/* ---- lookups and reads ---- */

static int add_touch(fg_prefix *p, const fg_prefix_key *k, uint32_t page)
{
    if (p->n_touch == p->cap_touch) {
        size_t cap = p->cap_touch ? 2 * p->cap_touch : 64;
        fg_prefix_key *t = realloc(p->touch, cap * sizeof *t);
        if (t)
            p->touch = t;
        uint32_t *tp = t ? realloc(p->touch_page, cap * sizeof *tp) : NULL;
        if (!tp)
            return FG_ERR_NOMEM;
        p->touch_page = tp;
        p->cap_touch = cap;
    }
    p->touch[p->n_touch] = *k;
    p->touch_page[p->n_touch++] = page;
    return FG_OK;
}

/* Does the meta page of keys[j] say what we expect? A read or decode failure is a miss. */
static int meta_matches(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys, uint32_t j,
                        int *ok, fg_err *err)
{
    fg_store_kv_key k = skey(&keys[j], FG_PREFIX_META_LAYER, j);
    fg_store_kv_page pg;
    fg_err e2;
    int rc = fg_store_kv_read(p->s, &k, p->buf, p->page_size, &pg, &e2);
    *ok = 0;
    if (rc == FG_ERR_NOT_FOUND || rc == FG_ERR_STORE_STALE)
        return FG_OK;
    if (rc) {
        *err = e2;
        return rc;
    }
    fg_prefix_meta m;
    if (fg_prefix_meta_decode(p->buf, pg.payload_len, &m, NULL))
        return FG_OK;
    fg_prefix_key par = j ? keys[j - 1] : (fg_prefix_key){0, 0};
    if (m.page != j || m.n_tokens != p->id.page_tokens || m.ident != p->ident_lo ||
        m.parent_job != par.job || m.parent_seq != par.seq)
        return FG_OK;
    const int32_t *t = ids + (size_t)j * p->id.page_tokens;
    for (uint32_t i = 0; i < m.n_tokens; i++)
        if ((int32_t)fg_le32(m.tokens + 4 * i) != t[i])
            return FG_OK;
    *ok = 1;
    return FG_OK;
}

static int lookup(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys, uint32_t n_pages,
                  int count, uint32_t *found, fg_err *err)
{
    *found = 0;
    for (uint32_t j = 0; j < n_pages; j++) {
        int ok, rc = meta_matches(p, ids, keys, j, &ok, err);
        if (rc)
            return rc;
        if (!ok)
            break;
        if (count && add_touch(p, &keys[j], j))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        *found = j + 1;
    }
    if (count)
        p->st.pages_hit += *found;
    return FG_OK;
}

int fg_prefix_lookup(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys,
                     uint32_t n_pages, uint32_t *found, fg_err *err)
{
    return lookup(p, ids, keys, n_pages, 1, found, err);
}

int fg_prefix_probe(fg_prefix *p, const int32_t *ids, const fg_prefix_key *keys,
                    uint32_t n_pages, uint32_t *found, fg_err *err)
{
    return lookup(p, ids, keys, n_pages, 0, found, err);
}

int fg_prefix_read(fg_prefix *p, const fg_prefix_key *key, uint32_t j, uint32_t layer, void *buf,
                   fg_err *err)
{
    fg_store_kv_key k = skey(key, layer, j);
    fg_store_kv_page pg;
    int rc = fg_store_kv_read(p->s, &k, buf, p->payload, &pg, err);
    if (rc == FG_OK && (pg.payload_len != p->payload || pg.codec != p->id.codec_id ||
                        pg.n_tokens != p->id.page_tokens))
        rc = fg_err_set(err, FG_ERR_STORE_STALE, "--prefix-cache %s: page %u layer %u holds %u "
                        "bytes, not %zu", p->dir, j, layer, pg.payload_len, p->payload);
    return rc;
}

/* ---- writes ---- */

int fg_prefix_write_begin(fg_prefix *p, fg_err *err)
{
    if (p->writing)
        return fg_err_set(err, FG_ERR_STATE, "prefix cache: write already begun");
    fg_store_close(p->s);
    p->s = NULL;
    double waited = 0;
    for (;;) {
        int rc = store_open(p, 0, err);
        if (rc == FG_OK)
            break;
        if (rc != FG_ERR_STORE_BUSY || waited >= p->o.busy_wait_s) {
            fg_err e2;
            if (rc == FG_ERR_STORE_BUSY)
                p->st.busy_skips++;
            if (store_open(p, FG_STORE_RDONLY, &e2))
                return fg_err_set(err, e2.code, "--prefix-cache %s: %s", p->dir, e2.msg);
            return rc;
        }
        usleep(20000);
        waited += 0.02;
    }
    p->writing = 1;
    return FG_OK;
}

typedef struct put_ctx {
    const fg_prefix_entry *e;
    size_t n;
} put_ctx;

static int by_page_desc(const void *a, const void *b, void *ctx)
{
    const fg_prefix_entry *e = ((put_ctx *)ctx)->e;
    size_t ia = *(const size_t *)a, ib = *(const size_t *)b;
    uint32_t pa = e[ia].page, pb = e[ib].page;
    return pa < pb ? 1 : pa > pb ? -1 : ia < ib ? -1 : ia > ib; /* stable: in given order */
}

int fg_prefix_put(fg_prefix *p, const fg_prefix_entry *e, size_t n, fg_err *err)
{
    if (!p->writing)
        return fg_err_set(err, FG_ERR_STATE, "prefix cache: put outside write_begin/end");
    if (n == 0)
        return FG_OK;
    if (n > PUT_MAX_ENTRIES)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prefix cache: %zu entries in one put", n);
    uint32_t L = p->id.n_layers, G = p->id.page_tokens;
    size_t per = (size_t)L + 1, mb = meta_bytes(p);
    fg_store_kv_write_req *r = calloc(n * per, sizeof *r);
    uint8_t *metas = malloc(n * mb);
    size_t *order = malloc(n * sizeof *order);
    int rc = r && metas && order ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    uint64_t now = (uint64_t)time(NULL);
    for (size_t i = 0; rc == FG_OK && i < n; i++)
        order[i] = i;
    put_ctx pc = {e, n};
    if (rc == FG_OK)
        qsort_r(order, n, sizeof *order, by_page_desc, &pc);
    for (size_t q = 0; rc == FG_OK && q < n; q++) {
        const fg_prefix_entry *x = &e[order[q]];
        fg_prefix_meta m = {x->parent.job, x->parent.seq, x->page, G, 0, now, now, 0, NULL};
        meta_encode(p, &m, x->tokens, metas + q * mb);
        for (uint32_t l = 0; l < L; l++)
            r[q * per + l] = (fg_store_kv_write_req){skey(&x->key, l, x->page), x->page * G, G,
                                                     p->id.codec_id, x->layers[l], p->payload};
        r[q * per + L] = (fg_store_kv_write_req){skey(&x->key, FG_PREFIX_META_LAYER, x->page),
                                                 x->page * G, G, 0, metas + q * mb, mb};
    }
    if (rc == FG_OK)
        rc = fg_store_kv_write(p->s, n * per, r, NULL, err);
    if (rc == FG_OK) {
        p->st.pages_saved += n;
        p->st.bytes_written += n * (L * p->payload + mb);
    }
    free(r);
    free(metas);
    free(order);
    return rc;
}

static int by_touch(const void *a, const void *b, void *ctx)
{
    const fg_prefix *p = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (p->touch_page[i] != p->touch_page[j]) /* deeper first: written older */
        return p->touch_page[i] < p->touch_page[j] ? 1 : -1;
    if (p->touch[i].job != p->touch[j].job)
        return p->touch[i].job < p->touch[j].job ? -1 : 1;
    return p->touch[i].seq < p->touch[j].seq ? -1 : p->touch[i].seq > p->touch[j].seq;
}

/* Rewrite the meta page of every key found since the last write with hits + 1 and now (a key
 * found twice counts twice). Keys gone meanwhile are skipped. */
static int flush_touches(fg_prefix *p, fg_err *err)
{
    size_t n = p->n_touch, mb = meta_bytes(p), *order = malloc((n + 1) * sizeof *order);
    uint8_t *metas = malloc((n + 1) * mb);
    fg_store_kv_write_req *r = calloc(n + 1, sizeof *r);
    int rc = order && metas && r ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < n; i++)
        order[i] = i;
    if (rc == FG_OK)
        qsort_r(order, n, sizeof *order, by_touch, p);
    size_t w = 0;
    for (size_t q = 0; rc == FG_OK && q < n; q++) {
        const fg_prefix_key *k = &p->touch[order[q]];
        uint32_t j = p->touch_page[order[q]];
        if (w && r[w - 1].key.job == k->job && r[w - 1].key.seq == k->seq) {
            fg_put64(metas + (w - 1) * mb + 32, fg_le64(metas + (w - 1) * mb + 32) + 1);
            continue;
        }
        fg_store_kv_key sk = skey(k, FG_PREFIX_META_LAYER, j);
        fg_store_kv_page pg;
        fg_prefix_meta m;
        if (fg_store_kv_read(p->s, &sk, metas + w * mb, mb, &pg, NULL) != FG_OK ||
            fg_prefix_meta_decode(metas + w * mb, pg.payload_len, &m, NULL) != FG_OK ||
            m.n_tokens != p->id.page_tokens)
            continue;
        fg_put64(metas + w * mb + 32, m.hits + 1);
        fg_put64(metas + w * mb + 48, (uint64_t)time(NULL));
        r[w] = (fg_store_kv_write_req){sk, pg.token_first, pg.n_tokens, 0, metas + w * mb, mb};
        w++;
    }
    if (rc == FG_OK && w)
        rc = fg_store_kv_write(p->s, w, r, NULL, err);
    if (rc == FG_OK)
        p->n_touch = 0;
    free(order);
    free(metas);
    free(r);
    return rc;
}

typedef struct lru {
    fg_prefix_key k;
    uint64_t gen;
} lru;

typedef struct lru_list {
    lru *v;
    size_t n, cap;
} lru_list;

static int collect_meta(void *ctx, const fg_store_kv_page *pg)
{
    lru_list *l = ctx;
    if (pg->key.layer != FG_PREFIX_META_LAYER)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        lru *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return FG_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (lru){{pg->key.job, pg->key.seq}, pg->generation};
    return 0;
}

static int by_gen(const void *a, const void *b)
{
    uint64_t x = ((const lru *)a)->gen, y = ((const lru *)b)->gen;
    return x < y ? -1 : x > y;
}

/* Free the least recently used entries until the slots in use fit the budget. */
static int evict(fg_prefix *p, fg_err *err)
{
    fg_store_info info;
    int rc = fg_store_info_get(p->s, &info, err);
    if (rc || !p->o.budget || info.kv_used * p->page_size <= p->o.budget)
        return rc;
    lru_list l = {0};
    rc = fg_store_kv_iter(p->s, UINT64_MAX, collect_meta, &l, err);
    if (rc == FG_ERR_NOMEM)
        rc = fg_err_set(err, rc, "out of memory");
    if (rc == FG_OK)
        qsort(l.v, l.n, sizeof *l.v, by_gen);
    uint64_t used = info.kv_used * p->page_size;
    for (size_t i = 0; rc == FG_OK && i < l.n && used > p->o.budget; i++) {
        fg_store_kv_key k = skey(&l.v[i].k, 0, 0);
        uint64_t freed = 0;
        rc = fg_store_kv_free(p->s, &k, 2, &freed, err);
        used -= freed * p->page_size;
        p->st.pages_evicted++;
    }
    free(l.v);
    return rc;
}

int fg_prefix_write_end(fg_prefix *p, fg_err *err)
{
    if (!p->writing)
        return fg_err_set(err, FG_ERR_STATE, "prefix cache: write_end without write_begin");
    fg_err e1;
    int rc = p->n_touch ? flush_touches(p, &e1) : FG_OK;
    if (rc == FG_OK)
        rc = evict(p, &e1);
    fg_store_close(p->s);
    p->s = NULL;
    p->writing = 0;
    fg_err e2;
    int rc2 = store_open(p, FG_STORE_RDONLY, &e2);
    if (rc2 && err)
        return fg_err_set(err, rc2, "--prefix-cache %s: %s", p->dir, e2.msg);
    if (rc && err)
        *err = e1;
    return rc;
}

/* ---- inspection ---- */

typedef struct info_ctx {
    fg_store *s;
    fg_prefix_info *out;
    uint8_t *buf;
    size_t cap;
} info_ctx;

static int info_page(void *vctx, const fg_store_kv_page *pg)
{
    info_ctx *c = vctx;
    if (pg->key.layer == FG_PREFIX_IDENT_LAYER && pg->key.job == 0)
        return 0;
    if (pg->key.layer != FG_PREFIX_META_LAYER) {
        c->out->kv_pages++;
        return 0;
    }
    c->out->entries++;
    fg_store_kv_page got;
    fg_prefix_meta m;
    if (fg_store_kv_read(c->s, &pg->key, c->buf, c->cap, &got, NULL) != FG_OK ||
        fg_prefix_meta_decode(c->buf, got.payload_len, &m, NULL) != FG_OK) {
        c->out->bad++;
        return 0;
    }
    c->out->hits += m.hits;
    if (m.page + 1 > c->out->deepest)
        c->out->deepest = m.page + 1;
    return 0;
}

static int file_bytes(void *ctx, const fg_store_file *f)
{
    if (f->kv)
        ((fg_prefix_info *)ctx)->file_bytes += f->size;
    return 0;
}

int fg_prefix_info_get(const char *dir, fg_prefix_info *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    fg_store *s;
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, err);
    if (rc)
        return rc;
    fg_store_info si;
    rc = fg_store_info_get(s, &si, err);
    info_ctx c = {s, out, rc ? NULL : malloc(si.kv_page_size), si.kv_page_size};
    if (rc == FG_OK && !c.buf)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_store_kv_key k = {0, 0, FG_PREFIX_IDENT_LAYER, 0};
    fg_store_kv_page pg;
    if (rc == FG_OK && fg_store_kv_read(s, &k, c.buf, c.cap, &pg, NULL) == FG_OK)
        out->has_ident = fg_prefix_ident_decode(c.buf, pg.payload_len, &out->ident, NULL) == FG_OK;
    if (rc == FG_OK && out->has_ident) /* another kind of store: nothing more to count */
        rc = fg_store_kv_iter(s, UINT64_MAX, info_page, &c, err);
    if (rc == FG_OK)
        rc = fg_store_file_iter(s, file_bytes, out, err);
    out->bytes = si.kv_used * si.kv_page_size;
    free(c.buf);
    fg_store_close(s);
    return rc;
}
