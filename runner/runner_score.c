/* runner_score.c - fg-infer score: log-likelihoods through the session (fg_session_score,
 * fg_session_score_rolling), as lm-evaluation-harness's loglikelihood and
 * loglikelihood_rolling requests need them.
 *
 * Input lines {"id", "context", "continuation"} (each side text, or an array of token ids)
 * give {"id", "logprob", "is_greedy", "n_tokens"}; with --rolling, lines {"id", "text"} give
 * {"id", "logprob", "n_tokens"}. A line that cannot be scored (malformed, no continuation
 * tokens, too long) gets {"id", "error"} and the run goes on; a line without an id is named by
 * its line number ("line"). Pairs are scored in batches of BATCH lines (the session scores
 * equal windows once and fills the engine's block); each batch's results are appended in one
 * write, flushed and fdatasync'ed, so --resume continues after the last whole line: the ids
 * already in the output are skipped, a torn last line is cut off. The engine is planned once
 * for --max-context tokens a window, else for the input file's longest line (a first pass
 * tokenizes every line: a short context lets the block be large), else (a pipe) the model's
 * positions.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "session_int.h"

#define BATCH 256

typedef struct ids_set {
    char **v;
    size_t n, cap;
    int sorted;
} ids_set;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int set_add(ids_set *s, const char *id)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v, s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(id)))
        return -1;
    s->n++;
    s->sorted = 0;
    return 0;
}

static int set_has(ids_set *s, const char *id)
{
    if (!s->sorted && s->n) { /* (qsort of an empty, NULL array is undefined) */
        qsort(s->v, s->n, sizeof *s->v, cmp_str);
        s->sorted = 1;
    }
    return s->n && bsearch(&id, s->v, s->n, sizeof *s->v, cmp_str) != NULL;
}

typedef struct score_run {
    fgr_run *r;
    fg_session *s;
    FILE *in, *out;
    int out_file;        /* a regular file: fdatasync after each batch */
    ids_set done;
    size_t line;         /* input lines read */
    uint64_t scored, errors, tokens;
} score_run;

/* --resume: the ids of the whole result lines of the output; a torn last line cut off. */
static int load_done(score_run *sr, const char *path, fg_err *err)
{
    FILE *f = fopen(path, "r+");
    if (!f)
        return errno == ENOENT ? FG_OK : fg_err_sys(err, FG_ERR_IO, errno, "--output %s", path);
    char *line = NULL;
    size_t cap = 0, no = 0;
    ssize_t len;
    off_t good = 0;
    int rc = FG_OK;
    while (rc == FG_OK && (len = getline(&line, &cap, f)) > 0) {
        no++;
        if (line[len - 1] != '\n')
            break; /* torn */
        json_t *j = json_loads(line, 0, NULL), *id = json_object_get(j, "id");
        json_t *at = json_object_get(j, "line"); /* a line without an id: by its number */
        char *t = json_is_integer(at) ? NULL : id ? json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT)
                                                  : NULL;
        if (json_is_integer(at) && asprintf(&t, "line:%" PRId64, (int64_t)json_integer_value(at)) < 0)
            t = NULL;
        if (!t)
            rc = fg_err_set(err, FG_ERR_CORRUPT, "--output %s:%zu: not a result line of fg-infer "
                            "score", path, no);
        else if (set_add(&sr->done, t))
            rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        free(t);
        json_decref(j);
        good += len;
    }
    free(line);
    if (rc == FG_OK && ftruncate(fileno(f), good))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "--output %s: cutting its torn last line", path);
    fclose(f);
    return rc;
}

static int open_files(score_run *sr, fg_err *err)
{
    const fg_run_opts *o = sr->r->o;
    struct stat st;
    sr->in = strcmp(o->input, "-") ? fopen(o->input, "r") : stdin;
    if (!sr->in)
        return fg_err_sys(err, FG_ERR_NOT_FOUND, errno, "--input %s", o->input);
    if (!strcmp(o->output, "-")) {
        sr->out = stdout;
        return o->resume ? fg_err_set(err, FG_ERR_INVALID_ARG, "--resume needs an --output "
                                      "file, not standard output") : FG_OK;
    }
    if (!o->resume && stat(o->output, &st) == 0 && st.st_size > 0)
        return fg_err_set(err, FG_ERR_EXISTS, "--output %s: not empty (--resume continues it)",
                          o->output);
    int rc = o->resume ? load_done(sr, o->output, err) : FG_OK;
    if (rc == FG_OK && !(sr->out = fopen(o->output, "a")))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "--output %s", o->output);
    sr->out_file = rc == FG_OK && fstat(fileno(sr->out), &st) == 0 && S_ISREG(st.st_mode);
    return rc;
}

/* One side of a pair: a string, or an array of token ids (*ids owned by the caller). */
static const char *side(json_t *v, int32_t **ids, uint32_t *n, const char **bad)
{
    *ids = NULL, *n = 0;
    if (json_is_string(v))
        return json_string_value(v);
    if (!json_is_array(v)) {
        *bad = "must be a string or an array of token ids";
        return NULL;
    }
    size_t m = json_array_size(v);
    *ids = malloc((m + 1) * sizeof **ids);
    for (size_t i = 0; *ids && i < m; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > INT32_MAX) {
            *bad = "token ids must be integers >= 0";
            return NULL;
        }
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = (uint32_t)m;
    return NULL;
}

typedef struct item {
    json_t *j;          /* the line (owns the strings) */
    char *id;           /* the id's JSON text */
    char err[200];      /* a line refused before scoring */
    size_t line;        /* 1-based input line */
    int noid;           /* id is "line:N": the line has none (results say "id": null, "line") */
    fg_score_req q;
    int32_t *cids, *kids;
} item;

static void item_free(item *it)
{
    json_decref(it->j);
    free(it->id);
    free(it->cids);
    free(it->kids);
    memset(it, 0, sizeof *it);
}

/* Parse input line text into it; 1 when the line is blank. */
static int parse_line(int rolling, size_t line, const char *text, item *it)
{
    json_error_t je;
    const char *bad = NULL, *field = NULL;
    memset(it, 0, sizeof *it);
    it->line = line;
    if (strspn(text, " \t\r\n") == strlen(text))
        return 1;
    it->j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    json_t *id = json_object_get(it->j, "id");
    if (json_is_string(id) || json_is_integer(id))
        it->id = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
    if ((!it->j || !json_is_object(it->j)) && !it->id && asprintf(&it->id, "line:%zu",
                                                                  line) >= 0)
        it->noid = 1;
    if (!it->j || !json_is_object(it->j)) {
        snprintf(it->err, sizeof it->err, "not a JSON object: %s", it->j ? "" : je.text);
        return 0;
    }
    if (!it->id) {
        snprintf(it->err, sizeof it->err, "\"id\" is missing (a string or an integer)");
        it->noid = 1;
    }
    if (!it->id && asprintf(&it->id, "line:%zu", line) < 0)
        it->id = NULL;
    if (it->noid)
        return 0;
    if (rolling) {
        json_t *t = json_object_get(it->j, "text");
        if (!json_is_string(t))
            snprintf(it->err, sizeof it->err, "\"text\" must be a string");
        return 0;
    }
    json_t *c = json_object_get(it->j, "context"), *k = json_object_get(it->j, "continuation");
    if (!k) {
        snprintf(it->err, sizeof it->err, "\"continuation\" is missing");
        return 0;
    }
    it->q.context = c ? side(c, &it->cids, &it->q.n_context_ids, &bad) : "";
    it->q.context_ids = it->cids;
    field = "context";
    if (!bad) {
        it->q.continuation = side(k, &it->kids, &it->q.n_cont_ids, &bad);
        it->q.cont_ids = it->kids;
        field = "continuation";
    }
    if (bad)
        snprintf(it->err, sizeof it->err, "\"%s\" %s", field, bad);
    return 0;
}

int fgr_score_line(const char *text, int rolling, char *why, size_t cap)
{
    item it;
    int blank = parse_line(rolling, 1, text, &it);
    snprintf(why, cap, "%s", blank ? "" : it.err);
    if (!blank && !it.err[0] && !rolling && !it.q.context && !it.q.context_ids)
        abort(); /* a pair without a context of either kind: the parser's invariant */
    item_free(&it);
    return blank;
}

/* A result line into buf (growing it). */
static int put_line(json_t *o, char **buf, size_t *len, size_t *cap)
{
    char *t = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!t)
        return -1;
    size_t l = strlen(t);
    if (*len + l + 2 > *cap) {
        size_t nc = (*cap + l + 2) * 2;
        char *b = realloc(*buf, nc);
        if (!b) {
            free(t);
            return -1;
        }
        *buf = b, *cap = nc;
    }
    memcpy(*buf + *len, t, l);
    (*buf)[*len + l] = '\n';
    *len += l + 1;
    free(t);
    return 0;
}

static json_t *id_of(const item *it, size_t line)
{
    json_t *id = it->id && !it->noid ? json_loads(it->id, JSON_DECODE_ANY, NULL) : NULL;
    return id ? id : json_pack("{s:n, s:I}", "id", "line", (json_int_t)line);
}

static int write_batch(score_run *sr, const char *buf, size_t len, fg_err *err)
{
    if ((len && fwrite(buf, 1, len, sr->out) != len) || fflush(sr->out) ||
        (sr->out_file && fdatasync(fileno(sr->out))))
        return fg_err_sys(err, FG_ERR_IO, errno, "writing to --output %s", sr->r->o->output);
    return FG_OK;
}

/* Score items[0..n) and append their results. */
static int run_batch(score_run *sr, item *it, size_t n, fg_err *err)
{
    fg_score_req *q = calloc(n + 1, sizeof *q);
    fg_score_res *res = calloc(n + 1, sizeof *res);
    uint32_t *map = calloc(n + 1, sizeof *map), m = 0;
    int rc = q && res && map ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < n; i++)
        if (!it[i].err[0] && !sr->r->o->rolling)
            q[m] = it[i].q, map[m++] = (uint32_t)i;
    if (rc == FG_OK && m)
        rc = fg_session_score(sr->s, q, m, res, err);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (size_t i = 0, k = 0; rc == FG_OK && i < n; i++) {
        json_t *o = json_object();
        json_t *id = id_of(&it[i], it[i].line);
        if (json_is_object(id))
            json_object_update(o, id), json_decref(id);
        else
            json_object_set_new(o, "id", id);
        const char *e = it[i].err[0] ? it[i].err : NULL;
        double lp = 0;
        uint64_t nt = 0;
        int greedy = 0;
        if (!e && sr->r->o->rolling) {
            rc = fg_session_score_rolling(sr->s, json_string_value(json_object_get(it[i].j,
                                          "text")), &lp, &nt, err);
        } else if (!e) {
            fg_score_res *x = &res[k++];
            e = x->status ? x->error : NULL;
            lp = x->logprob, nt = x->n_tokens, greedy = x->is_greedy;
        }
        if (e) {
            json_object_set_new(o, "error", json_string(e));
            sr->errors++;
        } else {
            json_object_set_new(o, "logprob", json_real(lp));
            if (!sr->r->o->rolling)
                json_object_set_new(o, "is_greedy", json_boolean(greedy));
            json_object_set_new(o, "n_tokens", json_integer((json_int_t)nt));
            sr->scored++;
            sr->tokens += nt;
        }
        if (rc == FG_OK && put_line(o, &buf, &len, &cap))
            rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    if (rc == FG_OK)
        rc = write_batch(sr, buf, len, err);
    free(buf);
    free(q);
    free(res);
    free(map);
    return rc;
}

static int score_loop(score_run *sr, fg_err *err)
{
    item *it = calloc(BATCH, sizeof *it);
    size_t n = 0, cap = 0;
    char *line = NULL;
    ssize_t len;
    int rc = it ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    while (rc == FG_OK && (len = getline(&line, &cap, sr->in)) >= 0) {
        sr->line++;
        if (parse_line(sr->r->o->rolling, sr->line, line, &it[n]))
            continue;
        if (it[n].id && set_has(&sr->done, it[n].id)) { /* --resume: answered already */
            item_free(&it[n]);
            continue;
        }
        if (++n == BATCH) {
            rc = run_batch(sr, it, n, err);
            for (size_t i = 0; i < n; i++)
                item_free(&it[i]);
            n = 0;
        }
        if (rc == FG_OK && sr->r->o->interrupt && *sr->r->o->interrupt)
            rc = fg_err_set(err, FG_ERR_STATE, "interrupted");
    }
    if (rc == FG_OK && ferror(sr->in))
        rc = fg_err_sys(err, FG_ERR_IO, errno, "--input %s", sr->r->o->input);
    if (rc == FG_OK && n)
        rc = run_batch(sr, it, n, err);
    for (size_t i = 0; it && i < n; i++)
        item_free(&it[i]);
    free(it);
    free(line);
    return rc;
}

/* Tokens of one line's pair or text (0 for a line that will get an error result). */
static uint32_t line_tokens(fgr_run *r, const item *it)
{
    fg_tok_ids v = {0};
    fg_err e;
    uint64_t n = 0;
    if (it->err[0])
        return 0;
    const char *t = r->o->rolling ? json_string_value(json_object_get(it->j, "text")) : NULL;
    if (!t && it->q.context_ids)
        n += it->q.n_context_ids;
    if (!t && it->q.cont_ids)
        n += it->q.n_cont_ids;
    if (!t && !it->q.cont_ids) { /* the whole text: the context's side and the continuation */
        const char *c = it->q.context ? it->q.context : "", *k = it->q.continuation;
        if (fg_tok_encode(r->tok, c, strlen(c), FG_TOK_ADD_BOS, &v, &e) == FG_OK &&
            fg_tok_encode(r->tok, k, strlen(k), 0, &v, &e) == FG_OK)
            n += v.n;
    } else if (!t && it->q.context) {
        if (fg_tok_encode(r->tok, it->q.context, strlen(it->q.context), FG_TOK_ADD_BOS, &v,
                          &e) == FG_OK)
            n += v.n;
    } else if (t && fg_tok_encode(r->tok, t, strlen(t), 0, &v, &e) == FG_OK) {
        n = v.n + 1;
    }
    fg_tok_ids_free(&v);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Without --max-context, a file's lines size the engine: its context is the longest line's
 * tokens (+ 8 for the tokenizer's merges across the boundary), at most the model's positions
 * (a rolling text longer than that is scored in windows of it). The store is opened for its
 * tokenizer and closed again (the session opens it). */
static int size_input(fgr_run *r, uint32_t *ctx, fg_err *err)
{
    struct stat st;
    *ctx = 0;
    if (r->o->eo.max_ctx || !strcmp(r->o->input, "-") || stat(r->o->input, &st) ||
        !S_ISREG(st.st_mode))
        return FG_OK;
    FILE *f = fopen(r->o->input, "r");
    int rc = f ? fgr_open_store(r, err) : FG_OK;
    char *line = NULL;
    size_t cap = 0, no = 0;
    uint32_t longest = 0;
    while (f && rc == FG_OK && getline(&line, &cap, f) >= 0) {
        item it;
        if (!parse_line(r->o->rolling, ++no, line, &it)) {
            uint32_t n = line_tokens(r, &it);
            longest = n > longest ? n : longest;
        }
        item_free(&it);
    }
    free(line);
    if (f)
        fclose(f);
    if (rc == FG_OK && longest) {
        uint64_t c = (uint64_t)longest + 8;
        *ctx = c < r->max_pos ? (uint32_t)c : r->max_pos;
    }
    fg_tok_free(r->tok); /* a process holds a store once: the session opens it again */
    fgr_model_close(r);
    fg_store_close(r->store);
    r->tok = NULL, r->store = NULL;
    return rc;
}

int fgr_run_score(fgr_run *r, fg_err *err)
{
    score_run sr = {r, NULL, NULL, NULL, 0, {0}, 0, 0, 0, 0};
    int rc = open_files(&sr, err);
    fg_session_opts so = {0};
    so.run = *r->o;
    so.run.eo.score_room = 1; /* the shared contexts' rows under a RAM budget */
    so.interrupt = r->o->interrupt;
    if (rc == FG_OK)
        rc = size_input(r, &so.max_ctx, err);
    if (rc == FG_OK)
        rc = fg_session_open(&so, &sr.s, err);
    double t0 = fg_now();
    if (rc == FG_OK)
        rc = score_loop(&sr, err);
    double dt = fg_now() - t0;
    fg_session_stats st = {0};
    if (sr.s)
        fg_session_stats_get(sr.s, &st);
    if (rc == FG_OK && !r->o->quiet) /* tokens/s: every token of the windows scored */
        fprintf(r->log, "fg-infer: scored %" PRIu64 " %s (%" PRIu64 " tokens, %" PRIu64 " "
                "scored) in %.2f s: %.1f items/s, %.0f tokens/s; prefill rows %" PRIu64
                " computed, %" PRIu64 " taken from shared contexts%s\n", sr.scored,
                r->o->rolling ? "texts" : "pairs", st.prompt_tokens, sr.tokens, dt,
                dt > 0 ? sr.scored / dt : 0.0, dt > 0 ? st.prompt_tokens / dt : 0.0,
                st.engine.prefill_rows, st.engine.rows_shared,
                sr.errors ? "; some lines got error results" : "");
    fg_session_close(sr.s);
    if (sr.in && sr.in != stdin)
        fclose(sr.in);
    if (sr.out && sr.out != stdout)
        fclose(sr.out);
    for (size_t i = 0; i < sr.done.n; i++)
        free(sr.done.v[i]);
    free(sr.done.v);
    return rc;
}
