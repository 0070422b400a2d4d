/* tok_map.c - the tokenizer's containers: byte arenas, the string and pair hash maps, the word
 * cache, and GPT-2's byte <-> code point table.
 *
 * All maps are open addressing with linear probing over a power-of-two table kept at most half
 * full, so a probe sequence always ends at an empty slot. Nothing is ever removed; the word
 * cache is emptied wholesale when it reaches its bound, which keeps its memory fixed
 * (about 1.5 MiB of slots, 4 MiB of ids, a few MiB of keys) however much text passes through.
 */
#include "tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

uint64_t tok_hash(const void *p, size_t n) { return XXH3_64bits(p, n); }

int tok_arena_put(tok_arena *a, const void *src, size_t n, uint32_t *off)
{
    if (a->len + n > UINT32_MAX)
        return FG_ERR_LIMIT;
    if (a->len + n > a->cap || !a->p) {  /* never NULL after a put, even of 0 bytes */
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + n)
            cap *= 2;
        char *p = realloc(a->p, cap);
        if (!p)
            return FG_ERR_NOMEM;
        a->p = p;
        a->cap = cap;
    }
    if (n)
        memcpy(a->p + a->len, src, n);
    *off = (uint32_t)a->len;
    a->len += n;
    return FG_OK;
}

void tok_arena_free(tok_arena *a)
{
    free(a->p);
    memset(a, 0, sizeof *a);
}

/* ---- strmap */

static int strmap_grow(strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    strmap_ent *e = malloc(cap * sizeof *e);
    if (!e)
        return FG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++)
        e[i].id = -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->ent[i].id < 0)
            continue;
        size_t j = m->ent[i].hash & (cap - 1);
        while (e[j].id >= 0)
            j = (j + 1) & (cap - 1);
        e[j] = m->ent[i];
    }
    free(m->ent);
    m->ent = e;
    m->cap = cap;
    return FG_OK;
}

static size_t strmap_find(const strmap *m, const char *key, size_t len, uint64_t h)
{
    size_t j = h & (m->cap - 1);
    while (m->ent[j].id >= 0) {
        const strmap_ent *e = &m->ent[j];
        if (e->hash == h && e->len == len && memcmp(m->keys.p + e->off, key, len) == 0)
            return j;
        j = (j + 1) & (m->cap - 1);
    }
    return j;
}

int tok_strmap_put(strmap *m, const char *key, size_t len, int32_t id, int32_t *old_id)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m))
        return FG_ERR_NOMEM;
    uint64_t h = tok_hash(key, len);
    size_t j = strmap_find(m, key, len, h);
    if (m->ent[j].id >= 0) {
        if (old_id)
            *old_id = m->ent[j].id;
        return FG_ERR_DUPLICATE;
    }
    uint32_t off;
    int rc = tok_arena_put(&m->keys, key, len, &off);
    if (rc)
        return rc;
    m->ent[j] = (strmap_ent){h, off, (uint32_t)len, id};
    m->n++;
    return FG_OK;
}

int32_t tok_strmap_get(const strmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    return m->ent[strmap_find(m, key, len, tok_hash(key, len))].id;
}

void tok_strmap_free(strmap *m)
{
    free(m->ent);
    tok_arena_free(&m->keys);
    memset(m, 0, sizeof *m);
}

/* ---- pairmap */

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static inline size_t pair_slot(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int pairmap_grow(pairmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    pairmap_ent *e = malloc(cap * sizeof *e);
    if (!e)
        return FG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++)
        e[i].key = TOK_PAIR_EMPTY;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->ent[i].key == TOK_PAIR_EMPTY)
            continue;
        size_t j = pair_slot(m->ent[i].key, cap);
        while (e[j].key != TOK_PAIR_EMPTY)
            j = (j + 1) & (cap - 1);
        e[j] = m->ent[i];
    }
    free(m->ent);
    m->ent = e;
    m->cap = cap;
    return FG_OK;
}

int tok_pairmap_put(pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
    if ((m->n + 1) * 2 > m->cap && pairmap_grow(m))
        return FG_ERR_NOMEM;
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->cap);
    while (m->ent[j].key != TOK_PAIR_EMPTY && m->ent[j].key != key)
        j = (j + 1) & (m->cap - 1);
    if (m->ent[j].key == TOK_PAIR_EMPTY)
        m->n++;
    m->ent[j] = (pairmap_ent){key, rank, merged};
    return FG_OK;
}

const pairmap_ent *tok_pairmap_get(const pairmap *m, int32_t a, int32_t b)
{
    if (!m->cap)
        return NULL;
    uint64_t key = pair_key(a, b);
    size_t j = pair_slot(key, m->cap);
    while (m->ent[j].key != TOK_PAIR_EMPTY) {
        if (m->ent[j].key == key)
            return &m->ent[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void tok_pairmap_free(pairmap *m)
{
    free(m->ent);
    memset(m, 0, sizeof *m);
}

/* ---- trie */

static int32_t trie_node_new(trie *tr, uint8_t byte)
{
    if (tr->len >= INT32_MAX)
        return -1;
    if (tr->len == tr->cap) {
        size_t cap = tr->cap ? 2 * tr->cap : 256;
        trie_node *n = realloc(tr->n, cap * sizeof *n);
        if (!n)
            return -1;
        tr->n = n;
        tr->cap = cap;
    }
    tr->n[tr->len] = (trie_node){-1, -1, -1, byte};
    return (int32_t)tr->len++;
}

static int32_t trie_child(const trie *tr, int32_t at, uint8_t byte)
{
    int32_t c = tr->n[at].child;
    while (c >= 0 && tr->n[c].byte != byte)
        c = tr->n[c].next;
    return c;
}

int tok_trie_put(trie *tr, const unsigned char *s, size_t len, int32_t k)
{
    if (!tr->len && trie_node_new(tr, 0) < 0)
        return FG_ERR_NOMEM;
    int32_t at = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = trie_child(tr, at, s[i]);
        if (c < 0) {
            if ((c = trie_node_new(tr, s[i])) < 0)
                return tr->len >= INT32_MAX ? FG_ERR_LIMIT : FG_ERR_NOMEM;
            tr->n[c].next = tr->n[at].child;
            tr->n[at].child = c;
        }
        at = c;
    }
    if (at && tr->n[at].k < 0)
        tr->n[at].k = k;
    return FG_OK;
}

int32_t tok_trie_longest(const trie *tr, const unsigned char *s, size_t len, size_t *mlen)
{
    int32_t best = -1, at = 0;
    for (size_t i = 0; tr->len && i < len && (at = trie_child(tr, at, s[i])) >= 0; i++)
        if (tr->n[at].k >= 0) {
            best = tr->n[at].k;
            *mlen = i + 1;
        }
    return best;
}

void tok_trie_free(trie *tr)
{
    free(tr->n);
    memset(tr, 0, sizeof *tr);
}

/* ---- word cache */

static void wcache_clear(wcache *c)
{
    for (size_t i = 0; i < TOK_WCACHE_SLOTS; i++)
        c->ent[i].len = UINT32_MAX;
    c->n = 0;
    c->keys.len = 0;
    c->ids_len = 0;
}

const int32_t *tok_wcache_get(const wcache *c, const char *w, size_t len, size_t *n_ids)
{
    if (!c->ent)
        return NULL;
    uint64_t h = tok_hash(w, len);
    for (size_t j = h & (TOK_WCACHE_SLOTS - 1); c->ent[j].len != UINT32_MAX;
         j = (j + 1) & (TOK_WCACHE_SLOTS - 1)) {
        const wcache_ent *e = &c->ent[j];
        if (e->hash == h && e->len == len && memcmp(c->keys.p + e->off, w, len) == 0) {
            *n_ids = e->n_ids;
            return c->ids + e->ids_off;
        }
    }
    return NULL;
}

/* Best effort: a cache that cannot allocate simply does not remember. */
void tok_wcache_put(wcache *c, const char *w, size_t len, const int32_t *ids, size_t n_ids)
{
    if (!c->ent) {
        c->ent = malloc(TOK_WCACHE_SLOTS * sizeof *c->ent);
        c->ids = malloc(TOK_WCACHE_IDS * sizeof *c->ids);
        if (!c->ent || !c->ids) {
            tok_wcache_free(c);
            return;
        }
        wcache_clear(c);
    }
    if ((c->n + 1) * 2 > TOK_WCACHE_SLOTS || c->ids_len + n_ids > TOK_WCACHE_IDS)
        wcache_clear(c);
    uint32_t off;
    if (tok_arena_put(&c->keys, w, len, &off))
        return;
    uint64_t h = tok_hash(w, len);
    size_t j = h & (TOK_WCACHE_SLOTS - 1);
    while (c->ent[j].len != UINT32_MAX)
        j = (j + 1) & (TOK_WCACHE_SLOTS - 1);
    if (n_ids)
        memcpy(c->ids + c->ids_len, ids, n_ids * sizeof *ids);
    c->ent[j] = (wcache_ent){h, off, (uint32_t)len, (uint32_t)c->ids_len, (uint32_t)n_ids};
    c->ids_len += n_ids;
    c->n++;
}

void tok_wcache_free(wcache *c)
{
    free(c->ent);
    free(c->ids);
    tok_arena_free(&c->keys);
    memset(c, 0, sizeof *c);
}

/* ---- GPT-2 bytes_to_unicode: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF)
 * stand for themselves; the other 68 bytes get 256, 257, ... in byte order. */

static int printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (printable_byte(b))
        return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++)
        n += !printable_byte(i);
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!printable_byte(b) && n-- == 0)
            return (int)b;
    return -1;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t k = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (s[0] >= 0xF5 || k == 0 || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    uint32_t cp = k == 2 ? (s[0] & 0x1Fu) << 6 | (s[1] & 0x3Fu)
                : k == 3 ? (s[0] & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu)
                : (s[0] & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

const char *tok_quote(char *buf, size_t cap, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, i = 0, max = len > 40 ? 40 : len;
    while (i < max && o + 8 < cap) {
        size_t k = u[i] >= 0x80 ? utf8_seq(u + i, len - i) : 0;
        if (k == 2 && u[i] == 0xC2 && u[i + 1] < 0xA0)
            k = 0;  /* C1 controls are escaped like C0 ones */
        if (k) {
            memcpy(buf + o, u + i, k);
            o += k;
            i += k;
        } else if (u[i] >= 0x20 && u[i] < 0x7f && u[i] != '"' && u[i] != '\\') {
            buf[o++] = (char)u[i++];
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", u[i++]);
        }
    }
    if (i < len && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o < cap ? o : cap - 1] = '\0';
    return buf;
}
