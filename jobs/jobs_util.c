/* jobs_util.c - the pieces the jobs library's files share (jobs_int.h).
 *
 * - Ids live in one string hash set (idset, open addressing, FNV-1a): the input's ids for the
 *   duplicate check (each with the line that first used it), the output's for the done-set.
 *   Nothing else grows with the number of prompts.
 * - One buffered line reader (lread) over a descriptor serves both the job input and the resume
 *   scan of a results file. It tracks the byte offset of each line, so the scan never has to keep
 *   lines: a rewrite re-reads them (the file is locked) and copies byte ranges.
 * - The id and "meta" come back in a result exactly as the line wrote them, so their spans are
 *   found in the line's own text (raw member scanner).
 */
#define _GNU_SOURCE
#include "jobs_int.h"
#include "fg_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- id hash set ------------------------------------------------------------------------ */


static uint64_t id_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static id_entry *idset_find(const idset *s, const char *key, uint64_t h)
{
    if (!s->cap)
        return NULL;
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        id_entry *e = &s->slot[i];
        if (!e->key || !strcmp(e->key, key))
            return e;
    }
}

static int idset_grow(idset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 1024;
    id_entry *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t i = 0; i < s->cap; i++) {
        id_entry *e = &s->slot[i];
        if (!e->key)
            continue;
        size_t k = id_hash(e->key) & (cap - 1);
        while (slot[k].key)
            k = (k + 1) & (cap - 1);
        slot[k] = *e;
    }
    free(s->slot);
    s->slot = slot;
    s->cap = cap;
    return 0;
}

static const char *arena_copy(idset *s, const char *key)
{
    size_t n = strlen(key) + 1;
    id_block *b = s->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        if (!(b = malloc(sizeof *b + cap)))
            return NULL;
        b->next = s->arena;
        b->used = 0;
        b->cap = cap;
        s->arena = b;
    }
    char *p = memcpy(b->bytes + b->used, key, n);
    b->used += n;
    return p;
}

/* The entry for key, inserted when absent (*added = 1). NULL when out of memory. */
id_entry *fgj_idset_add(idset *s, const char *key, int *added)
{
    uint64_t h = id_hash(key);
    *added = 0;
    id_entry *e = idset_find(s, key, h);
    if (e && e->key)
        return e;
    if ((s->n + 1) * 4 > s->cap * 3) {
        if (idset_grow(s))
            return NULL;
        e = idset_find(s, key, h);
    }
    if (!(e->key = arena_copy(s, key)))
        return NULL;
    e->line = 0;
    s->n++;
    *added = 1;
    return e;
}

const id_entry *fgj_idset_get(const idset *s, const char *key)
{
    const id_entry *e = idset_find(s, key, id_hash(key));
    return e && e->key ? e : NULL;
}

void fgj_idset_free(idset *s)
{
    while (s->arena) {
        id_block *b = s->arena;
        s->arena = b->next;
        free(b);
    }
    free(s->slot);
    memset(s, 0, sizeof *s);
}

/* ---- buffered line reader ---------------------------------------------------------------- */


void fgj_lread_init(lread *lr, int fd, size_t max)
{
    lr->fd = fd;
    lr->rpos = lr->rlen = 0;
    lr->eof = 0;
    lr->line = NULL;
    lr->len = lr->cap = 0;
    lr->max = max;
    lr->nl = 0;
    lr->start = lr->off = 0;
    lr->lineno = 0;
    struct stat st;
    off_t at = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? lseek(fd, 0, SEEK_CUR) : -1;
    lr->positional = at >= 0;
    lr->base = at >= 0 ? (uint64_t)at : 0;
}

static int lread_keep(lread *lr, const char *p, size_t n)
{
    size_t room = lr->len < lr->max ? lr->max - lr->len : 0;
    size_t k = n < room ? n : room, kept = lr->len < lr->max ? lr->len : lr->max;
    if (kept + k + 1 > lr->cap) {
        size_t cap = lr->cap ? lr->cap : 256;
        while (cap < kept + k + 1)
            cap *= 2;
        char *b = realloc(lr->line, cap);
        if (!b)
            return -ENOMEM;
        lr->line = b;
        lr->cap = cap;
    }
    memcpy(lr->line + kept, p, k);
    lr->line[kept + k] = '\0';
    lr->len += n;
    return 0;
}

/* Next line: 1, 0 at the end, -errno on a read error. */
int fgj_lread_next(lread *lr)
{
    lr->len = 0;
    lr->nl = 0;
    lr->start = lr->off;
    if (lread_keep(lr, "", 0))
        return -ENOMEM;
    for (;;) {
        if (lr->rpos == lr->rlen) {
            if (lr->eof)
                return lr->off > lr->start ? (lr->lineno++, 1) : 0;
            /* the buffer is used up: the next byte is at off */
            ssize_t n = lr->positional ? pread(lr->fd, lr->rbuf, sizeof lr->rbuf,
                                               (off_t)(lr->base + lr->off))
                                       : read(lr->fd, lr->rbuf, sizeof lr->rbuf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return -errno;
            lr->eof = n == 0;
            lr->rpos = 0;
            lr->rlen = (size_t)n;
            continue;
        }
        char *p = lr->rbuf + lr->rpos, *nlp = memchr(p, '\n', lr->rlen - lr->rpos);
        size_t n = nlp ? (size_t)(nlp - p) : lr->rlen - lr->rpos;
        if (lread_keep(lr, p, n))
            return -ENOMEM;
        lr->rpos += n + (nlp != NULL);
        lr->off += n + (nlp != NULL);
        if (nlp) {
            lr->nl = 1;
            lr->lineno++;
            return 1;
        }
    }
}

int fgj_lread_rewind(lread *lr)
{
    if (!lr->positional)
        return -ESPIPE;
    lr->rpos = lr->rlen = 0;
    lr->eof = 0;
    lr->off = lr->start = 0;
    lr->lineno = 0;
    return 0;
}

int fgj_blank(const char *s)
{
    return s[strspn(s, " \t\r")] == '\0';
}

char *fgj_oneline(char *s)
{
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return s;
}

const char *fgj_clip(const char *s, char out[48])
{
    size_t n = strlen(s), k = n > 40 ? 40 : n;
    while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    for (size_t i = 0; i < k; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    strcpy(out + k, k < n ? "..." : "");
    return out;
}

/* ---- raw member text -------------------------------------------------------------------
 * The id and "meta" come back in the result exactly as the line wrote them (an integer id of
 * any size stays that integer, meta any JSON value byte for byte), so their spans are found in
 * the line's own text. The line has already been parsed as valid JSON; this only skips values. */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/* End of the JSON value starting at s[i] (valid JSON assumed); n when it runs off. */
static size_t skip_value(const char *s, size_t n, size_t i)
{
    int depth = 0;
    do {
        if (i >= n)
            return n;
        char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                i += s[i] == '\\';
            i++;
        } else if (c == '{' || c == '[') {
            depth++, i++;
        } else if (c == '}' || c == ']') {
            depth--, i++;
        } else if (depth > 0) {
            i++; /* ':' ',' whitespace and scalars inside a container */
        } else {
            while (i < n && !strchr(",}] \t\r\n", s[i]))
                i++;
        }
    } while (depth > 0);
    return i;
}

/* The text of member key (written without escapes) of the object s[0, n): 1 and its span, or
 * 0 when absent (or its name written with escapes: the caller falls back to the parsed value). */
int fgj_raw_member(const char *s, size_t n, const char *key, const char **v, size_t *vn)
{
    size_t i = skip_ws(s, n, 0), klen = strlen(key);
    if (i >= n || s[i] != '{')
        return 0;
    for (i = skip_ws(s, n, i + 1); i < n && s[i] == '"';) {
        size_t k0 = i + 1, k1 = skip_value(s, n, i) - 1;
        i = skip_ws(s, n, skip_ws(s, n, k1 + 1) + 1); /* past ':' */
        size_t end = skip_value(s, n, i);
        if (k1 - k0 == klen && !memcmp(s + k0, key, klen)) {
            *v = s + i;
            *vn = end - i;
            return 1;
        }
        i = skip_ws(s, n, end);
        i = i < n && s[i] == ',' ? skip_ws(s, n, i + 1) : n;
    }
    return 0;
}

/* An integer literal (what JSON allows: no fraction, no exponent). */
static int int_literal(const char *s, size_t n)
{
    size_t i = n && s[0] == '-';
    if (i == n)
        return 0;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* The id as text (*is_int: it was a JSON integer, kept as written, of any size), or NULL when
 * it is not a non-empty string or an integer. */
char *fgj_id_text(json_t *v, const char *line, size_t len, int *is_int)
{
    const char *raw;
    size_t rn;
    *is_int = 0;
    if (line && fgj_raw_member(line, len, "id", &raw, &rn) && raw[0] != '"') {
        if (!int_literal(raw, rn) || rn > 4096)
            return NULL; /* a real, or NaN that the loader made a string */
        *is_int = 1;
        return strndup(raw, rn);
    }
    if (json_is_string(v) && *json_string_value(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        *is_int = 1;
        return strdup(buf);
    }
    return NULL;
}

/* "meta" as written (compact JSON when its name was escaped); NULL on no memory. */
char *fgj_meta_text(json_t *v, const char *line, size_t len)
{
    const char *raw;
    size_t rn;
    if (fgj_raw_member(line, len, "meta", &raw, &rn))
        return strndup(raw, rn);
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

/* Copy of s with every invalid UTF-8 sequence replaced by U+FFFD, as Hugging Face decodes
 * with errors="replace" (a generation can stop inside a multi-byte character). */
char *fgj_utf8_sanitize(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                   : (*p & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len && (size_t)(end - p) >= len;
        uint32_t cp = len == 1 ? *p : len == 2 ? (*p & 0x1Fu) : len == 3 ? (*p & 0x0Fu) : (*p & 0x07u);
        for (size_t k = 1; ok && k < len; k++) {
            ok = (p[k] & 0xC0) == 0x80;
            cp = (cp << 6) | (p[k] & 0x3Fu);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        ok = ok && cp >= min[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
        if (ok) {
            memcpy(o, p, len);
            o += len;
            p += len;
        } else { /* one U+FFFD for a lead byte and the continuation bytes that follow it */
            size_t skip = 1;
            while (len > 1 && skip < len && p + skip < end && (p[skip] & 0xC0) == 0x80)
                skip++;
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            p += skip;
        }
    }
    *o = '\0';
    return out;
}
