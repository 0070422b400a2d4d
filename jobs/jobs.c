/* jobs.c - see jobs.h. JSON through jansson.
 *
 * Design:
 * - One buffered line reader (lread) over a descriptor serves both the job input and the resume
 *   scan of a results file. It tracks the byte offset of each line, so the scan never has to keep
 *   lines: a rewrite re-reads them (the file is locked) and copies byte ranges.
 * - Ids live in one string hash set (idset, open addressing, FNV-1a): the input's ids for the
 *   duplicate check (each with the line that first used it), the output's for the done-set.
 *   Nothing else grows with the number of prompts.
 * - A seekable input is validated in a first pass that keeps only the ids, so a bad line 90,000
 *   lines down is reported before hours of generation; the second pass re-parses each line and
 *   checks it against the first (a file that changed in between is refused, not trusted).
 * Invariants of the results file (for a regular file):
 *  1. While a job runs, its process holds an exclusive flock on the inode at PATH; a rewrite
 *     locks the new inode before renaming it over PATH, and an opener re-checks after locking
 *     that PATH still names the inode it locked.
 *  2. No byte of a results file is dropped: a damaged or torn line is copied to PATH.damaged and
 *     fsynced before the file is cut or replaced; a file with no result line is never written.
 *  3. Each append is one block of whole lines; on a failed write the file is cut back to its size
 *     before the block (best effort; a resume moves any torn remainder aside).
 */
#define _GNU_SOURCE
#include "jobs.h"
#include "fg_json.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- id hash set ------------------------------------------------------------------------ */

typedef struct id_entry {
    const char *key; /* in the set's arena; NULL: empty slot */
    size_t line;     /* input: the line that first used the id; top bit: handed out */
} id_entry;

#define ID_EMITTED ((size_t)1 << (sizeof(size_t) * 8 - 1))

typedef struct id_block {
    struct id_block *next;
    size_t used, cap;
    char bytes[];
} id_block;

typedef struct idset {
    id_entry *slot; /* [cap], cap a power of two or 0; 16 bytes an id */
    size_t cap, n;
    id_block *arena; /* the keys, back to back (no malloc header per id) */
} idset;

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
static id_entry *idset_add(idset *s, const char *key, int *added)
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

static const id_entry *idset_get(const idset *s, const char *key)
{
    const id_entry *e = idset_find(s, key, id_hash(key));
    return e && e->key ? e : NULL;
}

static void idset_free(idset *s)
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

typedef struct lread {
    int fd;
    char rbuf[1 << 16];
    size_t rpos, rlen;
    int eof;
    char *line;       /* the current line's first min(len, max) bytes, NUL-terminated, no '\n' */
    size_t len, cap;  /* len: the whole line's length without its '\n' */
    size_t max;       /* bytes kept of one line */
    int nl;           /* the line ended with '\n' (0: last line, torn) */
    uint64_t start;   /* offset of the current line */
    uint64_t off;     /* offset of the next byte */
    size_t lineno;
    int positional;   /* a regular file: read with pread from base + off, never moving the
                       * descriptor's offset, which a dup of stdin shares with every other
                       * reader of it (a second reader's pass must not move this one's) */
    uint64_t base;    /* the descriptor's offset when the reader began (stdin may start
                       * part-way into its file) */
} lread;

static void lread_init(lread *lr, int fd, size_t max)
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
static int lread_next(lread *lr)
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

static int lread_rewind(lread *lr)
{
    if (!lr->positional)
        return -ESPIPE;
    lr->rpos = lr->rlen = 0;
    lr->eof = 0;
    lr->off = lr->start = 0;
    lr->lineno = 0;
    return 0;
}

static int blank(const char *s)
{
    return s[strspn(s, " \t\r")] == '\0';
}

/* ---- parsing a job line ------------------------------------------------------------------ */

/* s shortened to at most 40 bytes (on a UTF-8 boundary), control bytes as '?', for messages. */
static const char *clip(const char *s, char out[48])
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
static int raw_member(const char *s, size_t n, const char *key, const char **v, size_t *vn)
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
static char *id_text(json_t *v, const char *line, size_t len, int *is_int)
{
    const char *raw;
    size_t rn;
    *is_int = 0;
    if (line && raw_member(line, len, "id", &raw, &rn) && raw[0] != '"') {
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
static char *meta_text(json_t *v, const char *line, size_t len)
{
    const char *raw;
    size_t rn;
    if (raw_member(line, len, "meta", &raw, &rn))
        return strndup(raw, rn);
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

typedef struct where {
    const char *file;
    size_t line;
    const char *id; /* NULL until known */
} where;

static int bad(fg_err *err, const where *w, const char *fmt, const char *arg)
{
    char what[200], c[48];
    snprintf(what, sizeof what, fmt, arg);
    if (w->id)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: prompt \"%s\": %s", w->file, w->line,
                          clip(w->id, c), what);
    return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: %s", w->file, w->line, what);
}

static int check_keys(json_t *o, const where *w, fg_err *err)
{
    static const char *const known[] = {"id", "prompt", "max_new_tokens", "stop", "meta",
                                        "messages", "chat_template_kwargs"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]))
            k++;
        char c[48];
        if (k == sizeof known / sizeof *known)
            return bad(err, w, "unknown key \"%s\" (known: id, prompt or messages, "
                       "max_new_tokens, stop, chat_template_kwargs, and meta for your own data)",
                       clip(key, c));
    }
    return FG_OK;
}

static int parse_max_new(json_t *mx, fg_job *j, const where *w, fg_err *err)
{
    j->max_new = -1;
    if (!mx)
        return FG_OK;
    if (!json_is_integer(mx) || json_integer_value(mx) < 1 ||
        json_integer_value(mx) > (json_int_t)FG_JOB_MAX_NEW_TOKENS) {
        char lim[24];
        snprintf(lim, sizeof lim, "%u", FG_JOB_MAX_NEW_TOKENS);
        return bad(err, w, "\"max_new_tokens\" must be an integer from 1 to %s (no fraction, "
                   "exponent or quotes)", lim);
    }
    j->max_new = (int64_t)json_integer_value(mx);
    return FG_OK;
}

static int parse_stops(json_t *st, fg_job *j, const where *w, fg_err *err)
{
    if (!st)
        return FG_OK;
    size_t n = json_is_string(st) ? 1 : json_is_array(st) ? json_array_size(st) : SIZE_MAX;
    char lim[16];
    snprintf(lim, sizeof lim, "%d", FG_JOB_MAX_STOPS);
    if (n > FG_JOB_MAX_STOPS)
        return bad(err, w, "\"stop\" must be a string or an array of at most %s strings", lim);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(st) ? st : json_array_get(st, i);
        if (!json_is_string(s) || !*json_string_value(s))
            return bad(err, w, "\"stop\" strings must be non-empty strings%s", "");
        if (!(j->stops[j->n_stops] = strdup(json_string_value(s))))
            return fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
        j->n_stops++;
    }
    return FG_OK;
}

/* Why messages m is not an array of {"role": string, "content": string, array or null}
 * objects (into why), or 0 when it is. */
static int messages_wrong(json_t *m, char *why, size_t cap)
{
    if (!json_is_array(m) || json_array_size(m) == 0) {
        snprintf(why, cap, "\"messages\" must be a non-empty array of {\"role\", \"content\"} "
                 "objects");
        return 1;
    }
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *o = json_array_get(m, i), *c = json_object_get(o, "content");
        if (!json_is_object(o))
            snprintf(why, cap, "\"messages\"[%zu] is not an object", i);
        else if (!json_is_string(json_object_get(o, "role")))
            snprintf(why, cap, "\"messages\"[%zu] has no \"role\" string", i);
        else if (!c || !(json_is_string(c) || json_is_array(c) || json_is_null(c)))
            snprintf(why, cap, "\"messages\"[%zu] has no \"content\" (a string, an array of "
                     "parts, or null)", i);
        else
            continue;
        return 1;
    }
    return 0;
}

/* "messages" and "chat_template_kwargs" as JSON text into j, or j->invalid saying what is wrong
 * with them (the line's error result); FG_ERR_NOMEM only. */
static int parse_chat(json_t *o, fg_job *j, const where *w, fg_err *err)
{
    json_t *m = json_object_get(o, "messages"), *kw = json_object_get(o, "chat_template_kwargs");
    char why[200];
    int wrong = 1;
    if (json_object_get(o, "prompt"))
        snprintf(why, sizeof why, "\"prompt\" and \"messages\" together: give one of them");
    else if (kw && !json_is_object(kw))
        snprintf(why, sizeof why, "\"chat_template_kwargs\" must be an object");
    else
        wrong = messages_wrong(m, why, sizeof why);
    if (wrong)
        j->invalid = strdup(why);
    else {
        j->messages = json_dumps(m, JSON_COMPACT);
        if (kw && j->messages)
            j->chat_kwargs = json_dumps(kw, JSON_COMPACT);
    }
    if (wrong ? !j->invalid : !j->messages || (kw && !j->chat_kwargs))
        return fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    return FG_OK;
}

static void job_free(fg_job *j)
{
    free(j->id);
    free(j->prompt);
    free(j->messages);
    free(j->chat_kwargs);
    free(j->invalid);
    free(j->meta);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    memset(j, 0, sizeof *j);
}

static int parse_fields(json_t *o, const char *line, size_t len, fg_job *j, where *w,
                        fg_err *err)
{
    if (!json_is_object(o))
        return bad(err, w, "not a JSON object%s", "");
    json_t *idv = json_object_get(o, "id"), *p = json_object_get(o, "prompt");
    if (!idv)
        return bad(err, w, "\"id\" is missing%s", "");
    if (!(j->id = id_text(idv, line, len, &j->id_is_int)))
        return bad(err, w, "\"id\" must be a non-empty string or an integer%s", "");
    w->id = j->id;
    int rc = check_keys(o, w, err);
    json_t *meta = json_object_get(o, "meta");
    if (rc == FG_OK && meta && !(j->meta = meta_text(meta, line, len)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    int chat = json_object_get(o, "messages") || json_object_get(o, "chat_template_kwargs");
    if (rc == FG_OK && chat)
        rc = parse_chat(o, j, w, err);
    else if (rc == FG_OK && !json_is_string(p))
        rc = bad(err, w, "\"prompt\" (a string) is %s", p ? "not a string" : "missing");
    else if (rc == FG_OK && !(j->prompt = strdup(json_string_value(p))))
        rc = fg_err_set(err, FG_ERR_NOMEM, "%s:%zu: out of memory", w->file, w->line);
    if (rc == FG_OK)
        rc = parse_max_new(json_object_get(o, "max_new_tokens"), j, w, err);
    if (rc == FG_OK)
        rc = parse_stops(json_object_get(o, "stop"), j, w, err);
    return rc;
}

/* Parse one non-blank line into *j (zeroed first; freed again on an error). */
static int parse_job(const char *text, size_t len, const char *file, size_t line, fg_job *j,
                     fg_err *err)
{
    memset(j, 0, sizeof *j);
    j->line = line;
    where w = {file, line, NULL};
    json_error_t je;
    json_t *o = fg_json_loadb(text, len, JSON_REJECT_DUPLICATES, &je); /* as Python reads it */
    if (!o)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s:%zu: not valid JSON: %s (column %d)", file,
                          line, je.text, je.column);
    int rc = parse_fields(o, text, len, j, &w, err);
    json_decref(o);
    if (rc)
        job_free(j);
    return rc;
}

void fg_job_clear(fg_job *j)
{
    if (j)
        job_free(j);
}

void fg_jobs_free(fg_job_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        job_free(&l->jobs[i]);
    free(l->jobs);
    l->jobs = NULL;
    l->n = 0;
}

/* ---- the streamed reader ----------------------------------------------------------------- */

struct fg_job_reader {
    lread lr;
    char *name;
    idset ids;
    size_t total;  /* jobs counted: all of them when validated, else so far */
    int validated; /* the whole input was checked by a first pass */
    int complete;  /* the whole input has been read at least once */
    fg_err fail;   /* sticky error */
};

/* The next non-blank line of r's input: 1, 0 at the end, or an error code (set in err). */
static int next_line(fg_job_reader *r, fg_err *err)
{
    for (;;) {
        int n = lread_next(&r->lr);
        if (n < 0)
            return fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", r->name);
        if (n == 0)
            return 0;
        if (r->lr.lineno == 1 && !strncmp(r->lr.line, "\xEF\xBB\xBF", 3)) {
            memmove(r->lr.line, r->lr.line + 3, strlen(r->lr.line + 3) + 1);
            r->lr.len -= 3;
        }
        if (r->lr.len > FG_JOB_MAX_LINE)
            return fg_err_set(err, FG_ERR_LIMIT, "%s:%zu: line longer than %u bytes", r->name,
                              r->lr.lineno, FG_JOB_MAX_LINE);
        if (!blank(r->lr.line))
            return 1;
    }
}

/* Record job j's id: a duplicate, or (second pass) an id the first pass did not see there, is
 * an error. */
static int note_id(fg_job_reader *r, const fg_job *j, fg_err *err)
{
    char c[48];
    int added;
    id_entry *e = idset_add(&r->ids, j->id, &added);
    if (!e)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for ids", r->name);
    if (added)
        e->line = j->line;
    if (r->validated && (added || e->line != j->line)) /* (emitted: the top bit is set) */
        return fg_err_set(err, FG_ERR_CORRUPT, "%s:%zu: prompt \"%s\": the file changed while "
                          "the job was reading it", r->name, j->line, clip(j->id, c));
    if (!added && !r->validated)
        return fg_err_set(err, FG_ERR_DUPLICATE, "%s:%zu: prompt \"%s\": id already used on "
                          "line %zu", r->name, j->line, clip(j->id, c), e->line);
    if (r->validated)
        e->line |= ID_EMITTED;
    if (added)
        r->total++;
    return FG_OK;
}

static int validate_all(fg_job_reader *r, fg_err *err)
{
    int n;
    while ((n = next_line(r, err)) == 1) {
        fg_job j;
        int rc = parse_job(r->lr.line, r->lr.len, r->name, r->lr.lineno, &j, err);
        if (rc == FG_OK)
            rc = note_id(r, &j, err);
        job_free(&j);
        if (rc)
            return rc;
    }
    if (n < 0)
        return n;
    int e = lread_rewind(&r->lr);
    if (e)
        return fg_err_sys(err, FG_ERR_IO, -e, "%s: rewinding", r->name);
    r->validated = r->complete = 1;
    return FG_OK;
}

int fg_job_reader_open_fd(int fd, const char *name, fg_job_reader **out, fg_err *err)
{
    *out = NULL;
    fg_job_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        close(fd);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    lread_init(&r->lr, fd, FG_JOB_MAX_LINE + 4);
    struct stat st;
    int rc = FG_OK;
    if (fstat(fd, &st))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", name);
    else if (S_ISDIR(st.st_mode))
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s: is a directory", name);
    else if (S_ISREG(st.st_mode))
        rc = validate_all(r, err);
    if (rc == FG_OK && r->validated && r->total == 0)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "%s: no prompts", name);
    if (rc) {
        fg_job_reader_close(r);
        return rc;
    }
    *out = r;
    return FG_OK;
}

int fg_job_reader_open(const char *path, fg_job_reader **out, fg_err *err)
{
    *out = NULL;
    int stdin_ = !strcmp(path, "-");
    int fd = stdin_ ? fcntl(0, F_DUPFD_CLOEXEC, 3) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_err_sys(err, errno == ENOENT ? FG_ERR_NOT_FOUND : FG_ERR_IO, errno,
                          "%s: cannot open", stdin_ ? "stdin" : path);
    return fg_job_reader_open_fd(fd, stdin_ ? "stdin" : path, out, err);
}

static int block_push(fg_job_list *b, size_t max, fg_job *j)
{
    if (!b->jobs && !(b->jobs = calloc(max < 4096 ? max : 4096, sizeof *b->jobs)))
        return -1;
    if (b->n >= 4096 && (b->n & (b->n - 1)) == 0) {
        fg_job *p = realloc(b->jobs, (b->n * 2 < max ? b->n * 2 : max) * sizeof *p);
        if (!p)
            return -1;
        b->jobs = p;
    }
    b->jobs[b->n++] = *j;
    return 0;
}

static int read_block(fg_job_reader *r, const fg_job_output *done, size_t max, fg_job_list *b,
                      fg_err *err)
{
    int n = 0;
    while (b->n < max && (n = next_line(r, err)) == 1) {
        fg_job j;
        int rc = parse_job(r->lr.line, r->lr.len, r->name, r->lr.lineno, &j, err);
        if (rc == FG_OK)
            rc = note_id(r, &j, err);
        if (rc == FG_OK && done && fg_job_output_has(done, j.id)) {
            job_free(&j);
            continue;
        }
        if (rc == FG_OK && block_push(b, max, &j))
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", r->name);
        if (rc) {
            job_free(&j);
            return rc;
        }
    }
    if (b->n < max && n < 0)
        return n;
    if (b->n < max) {
        r->complete = 1;
        if (r->total == 0)
            return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: no prompts", r->name);
    }
    return FG_OK;
}

int fg_job_reader_next(fg_job_reader *r, const fg_job_output *done, size_t max,
                       fg_job_list *block, fg_err *err)
{
    fg_jobs_free(block);
    if (r->fail.code) {
        if (err)
            *err = r->fail;
        return r->fail.code;
    }
    if (max == 0)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: a block of 0 jobs", r->name);
    fg_err e;
    int rc = read_block(r, done, max, block, &e);
    if (rc) {
        fg_jobs_free(block);
        r->fail = e;
        if (err)
            *err = e;
    }
    return rc;
}

void fg_job_reader_count(const fg_job_reader *r, const fg_job_output *done, size_t *total,
                         size_t *n_done, int *complete)
{
    size_t d = 0;
    for (size_t i = 0; done && n_done && i < r->ids.cap; i++)
        d += r->ids.slot[i].key && fg_job_output_has(done, r->ids.slot[i].key);
    if (total)
        *total = r->total;
    if (n_done)
        *n_done = d;
    if (complete)
        *complete = r->complete;
}

void fg_job_reader_close(fg_job_reader *r)
{
    if (!r)
        return;
    if (r->lr.fd >= 0)
        close(r->lr.fd);
    free(r->lr.line);
    idset_free(&r->ids);
    free(r->name);
    free(r);
}

/* ---- result lines ------------------------------------------------------------------------ */

/* Copy of s with every invalid UTF-8 sequence replaced by U+FFFD, as Hugging Face decodes
 * with errors="replace" (a generation can stop inside a multi-byte character). */
static char *utf8_sanitize(const char *s)
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

static json_t *int_array(const int32_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Every member but the id and meta (spliced in as written: result_line). */
static json_t *result_json(const fg_job_result *r)
{
    if (r->error)
        return json_pack("{s:{s:s, s:s}, s:I}", "error", "type",
                         r->error_type ? r->error_type : "error", "message", r->error,
                         "prompt_tokens", (json_int_t)r->prompt_tokens);
    json_t *toks = int_array(r->tokens, r->n_tokens);
    json_t *pids = r->prompt_ids ? int_array(r->prompt_ids, r->prompt_tokens) : NULL;
    char *text = utf8_sanitize(r->text);
    if (!text || !toks || (r->prompt_ids && !pids)) {
        json_decref(toks);
        json_decref(pids);
        free(text);
        return NULL;
    }
    json_t *o = json_pack("{s:s, s:o, s:s, s:I, s:{s:I, s:f}}", "text", text, "tokens", toks,
                          "finish_reason", r->finish, "prompt_tokens",
                          (json_int_t)r->prompt_tokens, "timing", "block",
                          (json_int_t)r->block, "block_seconds", r->seconds);
    free(text); /* json_pack took toks, on failure too */
    if (o && pids && json_object_set_new(o, "prompt_ids", pids)) {
        json_decref(o);
        return NULL;
    }
    if (!o)
        json_decref(pids);
    return o;
}

/* One result line: {"id": ID as the input wrote it, the members, "meta": META}\n to m. */
static int result_line(FILE *m, const fg_job_result *r)
{
    json_t *o = result_json(r);
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER)
                   : NULL;
    json_decref(o);
    json_t *ids = r->job->id_is_int ? NULL : json_string(r->job->id);
    char *id = ids ? json_dumps(ids, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(ids);
    int ok = body && (id || r->job->id_is_int);
    if (ok) {
        size_t bl = strlen(body); /* "{...}": its members are body[1, bl - 1) */
        fprintf(m, "{\"id\":%s%s%.*s%s%s}\n", id ? id : r->job->id, bl > 2 ? "," : "",
                (int)(bl - 2), body + 1, r->job->meta ? ",\"meta\":" : "",
                r->job->meta ? r->job->meta : "");
    }
    free(body);
    free(id);
    return ok ? 0 : -1;
}

/* The results as one buffer of lines (*buf malloc'd, owned by the caller). */
static int encode_results(const char *name, const fg_job_result *r, size_t n, char **buf,
                          size_t *len, fg_err *err)
{
    *buf = NULL;
    FILE *m = open_memstream(buf, len);
    if (!m)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < n; i++) {
        if (result_line(m, &r[i])) {
            fclose(m);
            free(*buf);
            *buf = NULL;
            char c[48];
            return fg_err_set(err, FG_ERR_NOMEM, "%s: cannot encode the result of prompt \"%s\"",
                              name, clip(r[i].job->id, c));
        }
    }
    if (fclose(m)) {
        free(*buf);
        *buf = NULL;
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", name);
    }
    return FG_OK;
}

/* Is this line a result fg wrote (generated text, or an error line)? Returns its id (malloc'd)
 * or NULL. Read as Python would (an integer id of any size). */
static char *result_id(const char *s, size_t n)
{
    json_t *o = fg_json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    char *id = NULL;
    json_t *f = json_object_get(o, "finish_reason"), *t = json_object_get(o, "tokens");
    json_t *e = json_object_get(o, "error");
    int ok = json_is_object(o) && json_is_string(json_object_get(o, "text")) &&
             json_is_array(t) && json_is_string(f);
    ok = ok && (!strcmp(json_string_value(f), "length") || !strcmp(json_string_value(f), "eos") ||
                !strcmp(json_string_value(f), "stop"));
    for (size_t i = 0; ok && i < json_array_size(t); i++)
        ok = json_is_integer(json_array_get(t, i));
    ok = ok || (json_is_object(o) && json_is_object(e) &&
                json_is_string(json_object_get(e, "message")));
    int is_int;
    if (ok)
        id = id_text(json_object_get(o, "id"), s, n, &is_int);
    json_decref(o);
    return id;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* Write all of buf; *done = bytes written. 0 or an errno (EIO for a write that returns 0). */
static int write_all(int fd, const char *buf, size_t len, size_t *done)
{
    *done = 0;
    while (*done < len) {
        ssize_t w = write(fd, buf + *done, len - *done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        *done += (size_t)w;
    }
    return 0;
}

static int sys_code(int e)
{
    return e == ENOSPC || e == EDQUOT ? FG_ERR_NO_SPACE : FG_ERR_IO;
}

/* Durable on a regular file; a pipe or device that cannot sync (EINVAL, EROFS) is not an error. */
static int sync_data(int fd)
{
    if (fdatasync(fd) == 0 || errno == EINVAL || errno == EROFS)
        return 0;
    return errno;
}

/* Write a block of result lines to fd; on a regular file a failed write is cut back. */
static int append_buf(int fd, int regular, const char *name, const char *buf, size_t len,
                      fg_err *err)
{
    off_t at = regular ? lseek(fd, 0, SEEK_END) : 0;
    size_t done;
    int e = write_all(fd, buf, len, &done);
    if (e) {
        int cut = regular && at >= 0 && done > 0 && ftruncate(fd, at) == 0;
        return fg_err_sys(err, sys_code(e), e, "%s: writing results (%zu of %zu bytes written%s)",
                          name, done, len, cut ? ", cut back" : "");
    }
    if ((e = regular ? sync_data(fd) : 0))
        return fg_err_sys(err, sys_code(e), e, "%s: fdatasync", name);
    return FG_OK;
}

/* ---- the results file -------------------------------------------------------------------- */

struct fg_job_output {
    int fd;
    int regular;   /* a regular file: locked, synced, resumable */
    char *path;    /* as given; "stdout" for "-" */
    idset done;
    fg_err fail;   /* sticky error */
};

static void output_free(fg_job_output *o)
{
    if (!o)
        return;
    if (o->fd >= 0)
        close(o->fd);
    idset_free(&o->done);
    free(o->path);
    free(o);
}

static int fsync_dir(const char *path)
{
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int e = fsync(fd) && errno != EINVAL ? errno : 0;
    close(fd);
    return e;
}

/* Copy bytes [off, off + len) of src to the current position of dst. 0 or an errno. */
static int copy_range(int src, uint64_t off, uint64_t len, int dst)
{
    char buf[1 << 16];
    while (len) {
        ssize_t n = pread(src, buf, len < sizeof buf ? len : sizeof buf, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        size_t w;
        int e = write_all(dst, buf, (size_t)n, &w);
        if (e)
            return e;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

#define FG_JOB_MAX_RESULT_LINE ((size_t)256 << 20) /* a longer line is not a result */

/* What the resume scan found. */
typedef struct scan {
    size_t n_results, n_damaged, first_damaged, n_lines;
    uint64_t end_complete; /* offset just past the last '\n' */
    int tail;              /* 0: none, 1: a valid result without its '\n', 2: torn */
    int tail_fg;           /* the torn tail starts like one of our lines */
} scan;

/* Classify the current line of lr; add a result's id to done (when done is non-NULL). */
static int line_is_result(const lread *lr, idset *done)
{
    if (lr->len >= lr->max)
        return 0;
    char *id = result_id(lr->line, lr->len);
    int added;
    int ok = id != NULL;
    if (id && done && !idset_add(done, id, &added))
        ok = -1;
    free(id);
    return ok;
}

static int scan_file(fg_job_output *o, scan *s, fg_err *err)
{
    memset(s, 0, sizeof *s);
    lread *lr = malloc(sizeof *lr);
    if (!lr)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", o->path);
    lread_init(lr, o->fd, FG_JOB_MAX_RESULT_LINE);
    lr->base = 0; /* the whole results file */
    int n, rc = FG_OK;
    while (rc == FG_OK && (n = lread_next(lr)) == 1) {
        int ok = line_is_result(lr, &o->done);
        s->n_lines++;
        if (ok < 0)
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory for ids", o->path);
        else if (lr->nl) {
            s->end_complete = lr->off;
            s->n_results += ok;
            if (!ok && !s->n_damaged++)
                s->first_damaged = lr->lineno;
        } else {
            s->tail = ok ? 1 : 2;
            s->n_results += ok;
            s->tail_fg = !ok && !strncmp(lr->line, "{\"id\":", 6);
        }
    }
    if (rc == FG_OK && n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", o->path);
    free(lr->line);
    free(lr);
    return rc;
}

/* Append bytes [off, off + len) of the output, and a newline, to PATH.damaged (fsynced). */
static int aside_open(fg_job_output *o, fg_job_output_info *info, int *fd, fg_err *err)
{
    snprintf(info->aside_path, sizeof info->aside_path, "%s.damaged", o->path);
    *fd = open(info->aside_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open to keep damaged lines",
                          info->aside_path);
    return FG_OK;
}

static int aside_put(int fd, int src, uint64_t off, uint64_t len, const char *aside, fg_err *err)
{
    size_t w;
    int e = copy_range(src, off, len, fd);
    if (!e)
        e = write_all(fd, "\n", 1, &w);
    if (e)
        return fg_err_sys(err, sys_code(e), e, "%s: keeping a damaged line", aside);
    return FG_OK;
}

static int aside_close(int fd, const char *aside, fg_err *err)
{
    int e = fsync(fd) ? errno : 0;
    if (close(fd) && !e)
        e = errno;
    if (!e)
        e = fsync_dir(aside);
    if (e)
        return fg_err_sys(err, sys_code(e), e, "%s: fsync", aside);
    return FG_OK;
}

/* A torn last line (and nothing else wrong): keep its bytes aside, then cut the file. */
static int cut_torn_tail(fg_job_output *o, const scan *s, uint64_t size,
                         fg_job_output_info *info, fg_err *err)
{
    int afd;
    int rc = aside_open(o, info, &afd, err);
    if (rc)
        return rc;
    rc = aside_put(afd, o->fd, s->end_complete, size - s->end_complete, info->aside_path, err);
    int rc2 = aside_close(afd, info->aside_path, rc ? NULL : err);
    if (rc || rc2)
        return rc ? rc : rc2;
    if (ftruncate(o->fd, (off_t)s->end_complete) || sync_data(o->fd))
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cutting the torn last line", o->path);
    info->torn_tail = 1;
    return FG_OK;
}

/* Copy each line of the output to tmp (results) or afd (the rest); the file is locked. */
static int split_lines(fg_job_output *o, int tmp, const char *tmpname, int afd,
                       const char *aside, fg_err *err)
{
    lread *lr = malloc(sizeof *lr);
    if (!lr)
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", o->path);
    lread_init(lr, o->fd, FG_JOB_MAX_RESULT_LINE);
    lr->base = 0; /* the whole results file */
    int n = lread_rewind(lr), rc = FG_OK;
    if (n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: seek", o->path);
    while (rc == FG_OK && (n = lread_next(lr)) == 1) {
        if (line_is_result(lr, NULL)) {
            int e = copy_range(o->fd, lr->start, lr->len, tmp);
            size_t w;
            if (!e)
                e = write_all(tmp, "\n", 1, &w);
            if (e)
                rc = fg_err_sys(err, sys_code(e), e, "%s: writing", tmpname);
        } else {
            rc = aside_put(afd, o->fd, lr->start, lr->len, aside, err);
        }
    }
    if (rc == FG_OK && n < 0)
        rc = fg_err_sys(err, FG_ERR_IO, -n, "%s: reading", o->path);
    free(lr->line);
    free(lr);
    return rc;
}

/* Damaged lines inside the file: move them aside and replace the file atomically by one
 * holding only the results; the new inode is locked before it is renamed over the path. */
static int rewrite(fg_job_output *o, const struct stat *st, fg_job_output_info *info,
                   fg_err *err)
{
    char tmpname[4200];
    snprintf(tmpname, sizeof tmpname, "%s.XXXXXX", o->path);
    int tmp = mkostemp(tmpname, O_CLOEXEC), afd = -1;
    if (tmp < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot create a temporary file", tmpname);
    int rc = FG_OK;
    if (fchmod(tmp, st->st_mode & 07777) || flock(tmp, LOCK_EX | LOCK_NB))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: preparing", tmpname);
    if (rc == FG_OK)
        rc = aside_open(o, info, &afd, err);
    if (rc == FG_OK)
        rc = split_lines(o, tmp, tmpname, afd, info->aside_path, err);
    if (afd >= 0) {
        int rc2 = aside_close(afd, info->aside_path, rc ? NULL : err);
        rc = rc ? rc : rc2;
    }
    if (rc == FG_OK && fsync(tmp))
        rc = fg_err_sys(err, sys_code(errno), errno, "%s: fsync", tmpname);
    if (rc == FG_OK && rename(tmpname, o->path))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: renaming %s over it", o->path, tmpname);
    if (rc) {
        unlink(tmpname);
        close(tmp);
        return rc;
    }
    int e = fsync_dir(o->path);
    close(o->fd); /* releases the old inode's lock; the new one is held */
    o->fd = tmp;
    if (e)
        return fg_err_sys(err, FG_ERR_IO, e, "%s: fsync of its directory", o->path);
    info->rewritten = 1;
    return FG_OK;
}

static int resume(fg_job_output *o, const struct stat *st, fg_job_output_info *info,
                  fg_err *err)
{
    scan s;
    int rc = scan_file(o, &s, err);
    if (rc)
        return rc;
    if (s.n_results == 0 && !(s.n_lines == 1 && s.tail == 2 && s.tail_fg))
        return fg_err_set(err, FG_ERR_BAD_MAGIC, "%s: not an fg results file (none of its %zu "
                          "lines is a result line); it was not touched", o->path, s.n_lines);
    info->n_results = s.n_results;
    info->n_damaged = s.n_damaged;
    info->first_damaged = s.first_damaged;
    if (s.n_damaged) /* the rewrite also completes or moves aside the last line */
        rc = rewrite(o, st, info, err);
    else if (s.tail == 2)
        rc = cut_torn_tail(o, &s, (uint64_t)st->st_size, info, err);
    info->torn_tail = s.tail == 2;
    if (rc == FG_OK && s.tail == 1 && !s.n_damaged) { /* a whole result missing only its newline */
        size_t w;
        int e = lseek(o->fd, 0, SEEK_END) < 0 ? errno : write_all(o->fd, "\n", 1, &w);
        if (!e)
            e = sync_data(o->fd);
        if (e)
            rc = fg_err_sys(err, sys_code(e), e, "%s: completing the last line", o->path);
    }
    return rc;
}

/* Open PATH and lock it, making sure the lock is on the inode PATH names. */
static int open_locked(fg_job_output *o, struct stat *st, fg_err *err)
{
    for (int tries = 0; tries < 16; tries++) {
        o->fd = open(o->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (o->fd < 0)
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for writing", o->path);
        if (flock(o->fd, LOCK_EX | LOCK_NB)) {
            int e = errno;
            if (e == EWOULDBLOCK)
                return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: another fg-infer job is writing "
                                  "to it", o->path);
            return fg_err_sys(err, FG_ERR_IO, e, "%s: cannot lock", o->path);
        }
        struct stat now;
        if (fstat(o->fd, st) || stat(o->path, &now))
            return fg_err_sys(err, FG_ERR_IO, errno, "%s: stat", o->path);
        if (now.st_dev == st->st_dev && now.st_ino == st->st_ino)
            return FG_OK;
        close(o->fd); /* replaced under us by the job that held it: look again */
        o->fd = -1;
    }
    return fg_err_set(err, FG_ERR_STORE_BUSY, "%s: keeps being replaced by another job", o->path);
}

static int open_stream(fg_job_output *o, unsigned flags, fg_err *err)
{
    if (flags & FG_JOB_RESUME)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s: --resume needs a regular file to read "
                          "back (this is a pipe, terminal or device)", o->path);
    o->fd = !strcmp(o->path, "stdout") ? fcntl(1, F_DUPFD_CLOEXEC, 3)
                                       : open(o->path, O_WRONLY | O_CLOEXEC);
    if (o->fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "%s: cannot open for writing", o->path);
    return FG_OK;
}

static int open_regular(fg_job_output *o, unsigned flags, fg_job_output_info *info, fg_err *err)
{
    struct stat st;
    char *real;
    if (lstat(o->path, &st) == 0 && S_ISLNK(st.st_mode) && (real = realpath(o->path, NULL))) {
        free(o->path); /* lock, rewrite and rename the file the link names, not the link */
        o->path = real;
    }
    int rc = open_locked(o, &st, err);
    if (rc)
        return rc;
    if (st.st_size > 0 && !(flags & FG_JOB_RESUME))
        return fg_err_set(err, FG_ERR_EXISTS, "%s: already holds results; pass --resume to "
                          "continue that job, or choose another --output", o->path);
    if (st.st_size > 0)
        rc = resume(o, &st, info, err);
    if (rc == FG_OK && lseek(o->fd, 0, SEEK_END) < 0)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: seek", o->path);
    return rc;
}

int fg_job_output_open(const char *path, unsigned flags, fg_job_output **out,
                       fg_job_output_info *info, fg_err *err)
{
    *out = NULL;
    fg_job_output_info scratch;
    info = info ? info : &scratch;
    memset(info, 0, sizeof *info);
    fg_job_output *o = calloc(1, sizeof *o);
    int is_stdout = !strcmp(path, "-");
    if (!o || !(o->path = strdup(is_stdout ? "stdout" : path))) {
        free(o);
        return fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
    }
    o->fd = -1;
    struct stat st;
    int stream = is_stdout || (stat(path, &st) == 0 && !S_ISREG(st.st_mode));
    int rc = stream ? open_stream(o, flags, err) : open_regular(o, flags, info, err);
    if (rc == FG_OK && stream && fstat(o->fd, &st) == 0)
        o->regular = S_ISREG(st.st_mode); /* stdout redirected to a file: sync it */
    else
        o->regular = !stream;
    if (rc) {
        output_free(o);
        return rc;
    }
    *out = o;
    return FG_OK;
}

int fg_job_output_has(const fg_job_output *o, const char *id)
{
    return idset_get(&o->done, id) != NULL;
}

size_t fg_job_output_count(const fg_job_output *o)
{
    return o->done.n;
}

int fg_job_output_append(fg_job_output *o, const fg_job_result *r, size_t n, fg_err *err)
{
    if (o->fail.code) {
        if (err)
            *err = o->fail;
        return o->fail.code;
    }
    char *buf;
    size_t len;
    fg_err e;
    int rc = encode_results(o->path, r, n, &buf, &len, &e);
    if (rc == FG_OK)
        rc = append_buf(o->fd, o->regular, o->path, buf, len, &e);
    free(buf);
    for (size_t i = 0; rc == FG_OK && i < n; i++) {
        int added;
        if (!idset_add(&o->done, r[i].job->id, &added))
            rc = fg_err_set(&e, FG_ERR_NOMEM, "%s: out of memory for ids", o->path);
    }
    if (rc) {
        o->fail = e;
        if (err)
            *err = e;
    }
    return rc;
}

int fg_job_output_close(fg_job_output *o, fg_err *err)
{
    if (!o)
        return FG_OK;
    int rc = o->fail.code;
    if (rc && err)
        *err = o->fail;
    if (close(o->fd) && rc == FG_OK)
        rc = fg_err_sys(err, FG_ERR_IO, errno, "%s: close", o->path);
    o->fd = -1;
    output_free(o);
    return rc;
}

/* ---- legacy API -------------------------------------------------------------------------- */

int fg_jobs_load(const char *path, fg_job_list *out, fg_err *err)
{
    memset(out, 0, sizeof *out);
    fg_job_reader *r;
    int rc = fg_job_reader_open(path, &r, err);
    if (rc)
        return rc;
    fg_job_list b = {0};
    while ((rc = fg_job_reader_next(r, NULL, 4096, &b, err)) == FG_OK && b.n) {
        fg_job *p = realloc(out->jobs, (out->n + b.n) * sizeof *p);
        if (!p) {
            rc = fg_err_set(err, FG_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        out->jobs = p;
        memcpy(out->jobs + out->n, b.jobs, b.n * sizeof *p);
        out->n += b.n;
        free(b.jobs); /* the jobs' strings moved to out */
        b.jobs = NULL;
        b.n = 0;
    }
    fg_jobs_free(&b);
    fg_job_reader_close(r);
    if (rc)
        fg_jobs_free(out);
    return rc;
}

int fg_jobs_open_output(const char *path, int resume_, fg_job_list *jobs, int *fd, size_t *n_done,
                        fg_err *err)
{
    *n_done = 0;
    fg_job_output *o;
    int rc = fg_job_output_open(path, resume_ ? FG_JOB_RESUME : 0, &o, NULL, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < jobs->n; i++)
        if ((jobs->jobs[i].done = fg_job_output_has(o, jobs->jobs[i].id)))
            (*n_done)++;
    *fd = o->fd; /* the descriptor, and with it the lock, pass to the caller */
    o->fd = -1;
    output_free(o);
    return FG_OK;
}

int fg_jobs_append(int fd, const char *path, const fg_job_result *r, size_t n, fg_err *err)
{
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    char *buf;
    size_t len;
    int rc = encode_results(path, r, n, &buf, &len, err);
    if (rc == FG_OK)
        rc = append_buf(fd, regular, path, buf, len, err);
    free(buf);
    return rc;
}
