/* session_score.c - log-probs of given tokens (session_int.h): lm-evaluation-harness's
 * loglikelihood (fg_session_score) and loglikelihood_rolling (fg_session_score_rolling), and
 * the log-softmax helpers the block's per-token log-probs share.
 *
 * Every log-prob is the log-softmax of the raw logits, computed in double (fgs_lse): the
 * model's distribution before any sampling warper, as transformers' log_softmax gives it.
 * The logits come from fg_engine_score: windows of the block's size scored together, the
 * logits of the positions asked for copied out (groups bounded to WIN_BYTES of logits, at least
 * one window); windows that begin with the same tokens compute them once, within a group and
 * across consecutive groups (the engine keeps the last window's run for the next call).
 *
 * Pairs: lm-eval's rule (its HF model's _encode_pair): the context's trailing spaces move to
 * the continuation; the whole text context + continuation is encoded (with the model's BOS
 * rule, as tokenizer(text)) and the continuation is the tokens past the context's own
 * encoding, so a tokenizer that merges across the boundary is scored as it would generate; an
 * empty context is the BOS (else the EOS) token, lm-eval's prefix token. The window fed is
 * context + continuation less its last token, cut from the left to max_ctx tokens (lm-eval's
 * HF model cuts to its max_length the same way, (context + continuation)[-(max_length + 1):]
 * less its last token, so max_length = max_ctx gives the same windows); only the positions
 * predicting the continuation reach the head. Pairs whose windows are equal token for token
 * are scored once. The windows go to the engine sorted by their tokens, so the pairs of one
 * context (lm-eval's four choices) fall in one group or two consecutive ones, and contexts
 * sharing a few-shot prefix in consecutive groups: the prefix is computed once for all the
 * calls (until a window that does not begin with it), each context once after it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session_int.h"

#define WIN_BYTES (256u << 20)

double fgs_lse(const float *x, uint32_t n)
{
    double m = -INFINITY, s = 0;
    for (uint32_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    if (!isfinite(m))
        return m;
    for (uint32_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

/* Insert (id, v) into the sorted top[0..*have) of capacity k. */
static void top_insert(fg_token_lp *top, uint32_t k, uint32_t *have, int32_t id, float v)
{
    uint32_t at = *have;
    while (at > 0 && top[at - 1].logprob < v)
        at--;
    if (at >= k)
        return;
    uint32_t end = *have < k ? *have : k - 1;
    memmove(top + at + 1, top + at, (size_t)(end - at) * sizeof *top);
    top[at] = (fg_token_lp){id, v};
    *have += *have < k;
}

void fgs_top(const float *x, uint32_t n, double lse, uint32_t k, fg_token_lp *top)
{
    uint32_t have = 0;
    for (uint32_t i = 0; k && i < n; i++)
        if (have < k || x[i] > top[k - 1].logprob)
            top_insert(top, k, &have, (int32_t)i, x[i]);
    for (uint32_t i = 0; i < k; i++) {
        if (i >= have)
            top[i] = (fg_token_lp){-1, -INFINITY};
        else
            top[i].logprob = (float)((double)top[i].logprob - lse);
    }
}

int fgs_windows(fg_session *s, const int32_t *const *windows, const uint32_t *lens,
                const uint32_t *from, uint32_t m, fgs_pos_fn fn, void *ctx, fg_err *err)
{
    uint32_t bs = s->info.block_seqs, V = s->info.vocab_size;
    int rc = FG_OK;
    for (uint32_t w0 = 0; rc == FG_OK && w0 < m;) {
        uint32_t g = 0, maxl = 0;
        while (w0 + g < m && g < bs) {
            uint32_t k = lens[w0 + g] - (from ? from[w0 + g] : 0), l = k > maxl ? k : maxl;
            if (g && (uint64_t)(g + 1) * l * V * 4 > WIN_BYTES)
                break;
            maxl = l;
            g++;
        }
        size_t stride = (size_t)maxl * V;
        float *out = malloc((size_t)g * stride * sizeof *out);
        if (!out)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory (logits of %u windows of %u "
                              "tokens)", g, maxl);
        rc = fg_engine_score(s->r.e, windows + w0, lens + w0, from ? from + w0 : NULL, g, NULL,
                             NULL, out, stride, err);
        for (uint32_t w = 0; rc == FG_OK && w < g; w++) {
            uint32_t f = from ? from[w0 + w] : 0;
            for (uint32_t t = f; rc == FG_OK && t < lens[w0 + w]; t++)
                rc = fn(ctx, w0 + w, t, out + w * stride + (size_t)(t - f) * V, V);
        }
        free(out);
        w0 += g;
        if (rc == FG_OK && fgs_interrupted(s))
            rc = fg_err_set(err, FG_ERR_STATE, "interrupted");
    }
    return rc;
}

/* ---- pairs ---- */

typedef struct pair {
    int32_t *ids;       /* context + continuation */
    uint32_t n, ncont;  /* tokens; the continuation's (the last ncont) */
    uint32_t start;     /* the window: ids[start .. n - 1) */
    int32_t dup;        /* an earlier pair with the same window and continuation, or -1 */
} pair;

/* The context's prefix token: BOS, else EOS (lm-eval's prefix_token_id). */
static int32_t prefix_token(const fg_session *s)
{
    return s->info.bos_id >= 0 ? s->info.bos_id : s->info.eos_id >= 0 ? s->info.eos_id : 0;
}

static int encode_text(fg_session *s, const char *t, size_t len, unsigned flags, int32_t **ids,
                       uint32_t *n, fg_err *err)
{
    fg_tok_ids v = {0};
    int rc = fg_tok_encode(s->r.tok, t, len, flags, &v, err);
    *ids = v.ids;
    *n = (uint32_t)v.n;
    return rc;
}

/* The context's and continuation's ids (*c, *k owned by the caller) by lm-eval's rule. */
static int pair_ids(fg_session *s, const fg_score_req *q, int32_t **c, uint32_t *nc,
                    int32_t **k, uint32_t *nk, fg_err *err)
{
    unsigned bos = fgr_prompt_flags(&s->r), plain = bos & ~FG_TOK_ADD_BOS;
    const char *ctx = q->context, *cont = q->continuation ? q->continuation : "";
    int rc = FG_OK;
    *c = *k = NULL;
    *nc = *nk = 0;
    if (ctx && ctx[0] && !q->cont_ids) { /* the whole text, split at the context's tokens */
        size_t lc = strlen(ctx), sp = 0, lw = lc + strlen(cont);
        while (sp < lc && strchr(" \t\n\r\v\f", ctx[lc - sp - 1]))
            sp++;
        char *whole = malloc(lw + 1);
        int32_t *w = NULL;
        uint32_t nw = 0;
        if (!whole)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        memcpy(whole, ctx, lc);
        memcpy(whole + lc, cont, lw - lc + 1);
        rc = encode_text(s, whole, lw, bos, &w, &nw, err);
        free(whole);
        if (rc == FG_OK)
            rc = encode_text(s, ctx, lc - sp, bos, c, nc, err);
        if (rc == FG_OK && nw > *nc && (*k = malloc((size_t)(nw - *nc) * sizeof **k))) {
            memcpy(*k, w + *nc, (size_t)(nw - *nc) * sizeof **k);
            *nk = nw - *nc;
        }
        free(w);
        return rc;
    }
    if (ctx && ctx[0])
        rc = encode_text(s, ctx, strlen(ctx), bos, c, nc, err);
    else if (q->context_ids && q->n_context_ids && (*c = malloc(q->n_context_ids * 4)))
        memcpy(*c, q->context_ids, (size_t)q->n_context_ids * 4), *nc = q->n_context_ids;
    if (rc == FG_OK && q->cont_ids && q->n_cont_ids && (*k = malloc(q->n_cont_ids * 4)))
        memcpy(*k, q->cont_ids, (size_t)q->n_cont_ids * 4), *nk = q->n_cont_ids;
    else if (rc == FG_OK && !q->cont_ids)
        rc = encode_text(s, cont, strlen(cont), plain, k, nk, err);
    return rc;
}

/* Pair p's ids; 1 with res's error set when it cannot be scored. */
static int encode_pair(fg_session *s, const fg_score_req *q, pair *p, fg_score_res *res,
                       fg_err *err)
{
    int32_t *c, *k;
    uint32_t nc, nk, ctx = s->info.max_ctx;
    int rc = pair_ids(s, q, &c, &nc, &k, &nk, err);
    if (rc == FG_OK && (p->ids = malloc(((size_t)nc + nk + 1) * sizeof *p->ids))) {
        if (nc == 0) /* an empty context: the prefix token (lm-eval's) */
            p->ids[nc++] = prefix_token(s);
        else
            memcpy(p->ids, c, (size_t)nc * sizeof *c);
        if (nk)
            memcpy(p->ids + nc, k, (size_t)nk * sizeof *k);
        p->n = nc + nk;
        p->ncont = nk;
    } else if (rc == FG_OK) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    free(c);
    free(k);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < p->n && !res->status; i++)
        if (p->ids[i] < 0 || (uint32_t)p->ids[i] >= s->info.vocab_size) {
            res->status = 400;
            snprintf(res->error, sizeof res->error, "token %d is not an id of the model's %u",
                     p->ids[i], s->info.vocab_size);
        }
    if (!res->status && p->ncont == 0) {
        res->status = 400;
        snprintf(res->error, sizeof res->error, "continuation: no tokens to score");
    }
    if (!res->status && p->ncont > ctx) {
        res->status = 413;
        snprintf(res->error, sizeof res->error, "%u continuation tokens exceed the context "
                 "of %u", p->ncont, ctx);
    }
    p->start = p->n - 1 > ctx ? p->n - 1 - ctx : 0;
    return res->status ? 1 : FG_OK;
}

typedef struct score_ctx {
    pair *p;
    uint32_t *map;          /* window -> pair */
    fg_score_res *out;
} score_ctx;

static int score_pos(void *ctx, uint32_t w, uint32_t t, const float *lg, uint32_t V)
{
    score_ctx *c = ctx;
    uint32_t i = c->map[w];
    const pair *p = &c->p[i];
    uint32_t at = p->start + t + 1; /* the token this position predicts */
    if (at < p->n - p->ncont)
        return FG_OK;
    int32_t id = p->ids[at];
    c->out[i].logprob += (double)lg[id] - fgs_lse(lg, V);
    uint32_t best = 0;
    for (uint32_t v = 1; v < V; v++)
        best = lg[v] > lg[best] ? v : best;
    c->out[i].is_greedy &= (int32_t)best == id;
    c->out[i].n_tokens++;
    return FG_OK;
}

static int same_window(const pair *a, const pair *b)
{
    return a->n - a->start == b->n - b->start && a->ncont == b->ncont &&
           !memcmp(a->ids + a->start, b->ids + b->start, (size_t)(a->n - a->start) * 4);
}

/* Windows in the order of their tokens (then the pair's index), so that the pairs of one
 * context, and contexts sharing a few-shot prefix, sit in one block of fg_engine_score. */
typedef struct win_key {
    const pair *p;
    uint32_t i;
} win_key;

static int by_window(const void *a, const void *b)
{
    const win_key *x = a, *y = b;
    const int32_t *u = x->p->ids + x->p->start, *v = y->p->ids + y->p->start;
    uint32_t nu = x->p->n - 1 - x->p->start, nv = y->p->n - 1 - y->p->start;
    for (uint32_t t = 0; t < nu && t < nv; t++)
        if (u[t] != v[t])
            return u[t] < v[t] ? -1 : 1;
    if (nu != nv)
        return nu < nv ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int run_pairs(fg_session *s, pair *p, uint32_t n, fg_score_res *out, fg_err *err)
{
    const int32_t **win = calloc(n + 1, sizeof *win);
    uint32_t *lens = calloc(n + 1, sizeof *lens), *map = calloc(n + 1, sizeof *map), m = 0;
    uint32_t *from = calloc(n + 1, sizeof *from);
    win_key *key = calloc(n + 1, sizeof *key);
    int rc = win && lens && map && from && key ? FG_OK
           : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        p[i].dup = -1;
        if (!out[i].status)
            key[m++] = (win_key){&p[i], i};
    }
    if (rc == FG_OK)
        qsort(key, m, sizeof *key, by_window);
    uint32_t nw = 0;
    for (uint32_t j = 0; rc == FG_OK && j < m; j++) {
        uint32_t i = key[j].i;
        if (j && same_window(&p[i], &p[map[nw - 1]])) { /* sorted: an equal one is the last */
            p[i].dup = (int32_t)map[nw - 1];
            continue;
        }
        out[i].is_greedy = 1;
        win[nw] = p[i].ids + p[i].start;
        lens[nw] = p[i].n - 1 - p[i].start;
        from[nw] = p[i].n - p[i].ncont - 1 - p[i].start; /* predicts the continuation's first */
        map[nw++] = i;
    }
    score_ctx c = {p, map, out};
    if (rc == FG_OK)
        rc = fgs_windows(s, win, lens, from, nw, score_pos, &c, err);
    for (uint32_t i = 0; rc == FG_OK && i < n; i++)
        if (p[i].dup >= 0)
            out[i] = out[p[i].dup];
    free(win);
    free(lens);
    free(map);
    free(from);
    free(key);
    return rc;
}

int fg_session_score(fg_session *s, const fg_score_req *reqs, uint32_t n, fg_score_res *out,
                     fg_err *err)
{
    pair *p = calloc(n + 1, sizeof *p);
    int rc = p ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    memset(out, 0, (size_t)n * sizeof *out);
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        rc = encode_pair(s, &reqs[i], &p[i], &out[i], err);
        rc = rc == 1 ? FG_OK : rc;
    }
    double t0 = fg_now();
    if (rc == FG_OK)
        rc = run_pairs(s, p, n, out, err);
    s->st.busy_s += fg_now() - t0;
    for (uint32_t i = 0; p && i < n; i++) {
        s->st.requests++;
        s->st.errors += out[i].status != 0;
        s->st.prompt_tokens += p[i].n;
        free(p[i].ids);
    }
    free(p);
    return rc;
}

/* ---- rolling ---- */

typedef struct roll_ctx {
    const int32_t *tok;     /* the text's tokens */
    const uint32_t *first;  /* [window] index in tok of the first token it predicts */
    const uint32_t *skip;   /* [window] positions before its first prediction */
    double lp;
    uint64_t n;
} roll_ctx;

static int roll_pos(void *ctx, uint32_t w, uint32_t t, const float *lg, uint32_t V)
{
    roll_ctx *c = ctx;
    if (t < c->skip[w])
        return FG_OK;
    int32_t id = c->tok[c->first[w] + t - c->skip[w]];
    c->lp += (double)lg[id] - fgs_lse(lg, V);
    c->n++;
    return FG_OK;
}

/* lm-eval's rolling windows (context_len 1) over tok[0..n) with inputs of L tokens. */
static int rolling(fg_session *s, const int32_t *tok, uint32_t n, double *lp, uint64_t *count,
                   fg_err *err)
{
    uint32_t L = s->info.max_ctx - 1, nw = (n + L - 1) / L;
    int32_t *first_in = malloc(((size_t)L + 1) * sizeof *first_in);
    const int32_t **win = calloc(nw + 1, sizeof *win);
    uint32_t *lens = calloc(nw + 1, sizeof *lens), *first = calloc(nw + 1, sizeof *first),
             *skip = calloc(nw + 1, sizeof *skip);
    int rc = first_in && win && lens && first && skip ? FG_OK
           : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t w = 0, done = 0; rc == FG_OK && w < nw; w++) {
        uint32_t pl = n - done < L ? n - done : L, end = done + pl;
        if (w == 0) { /* the prefix token, then the first pl - 1 tokens */
            first_in[0] = prefix_token(s);
            memcpy(first_in + 1, tok, (size_t)(pl - 1) * sizeof *tok);
            win[0] = first_in;
            lens[0] = pl;
        } else {
            win[w] = tok + end - 1 - L;
            lens[w] = L;
            skip[w] = L - pl;
        }
        first[w] = done;
        done = end;
    }
    roll_ctx c = {tok, first, skip, 0, 0};
    if (rc == FG_OK)
        rc = fgs_windows(s, win, lens, skip, nw, roll_pos, &c, err);
    *lp = c.lp;
    *count = c.n;
    free(first_in);
    free(win);
    free(lens);
    free(first);
    free(skip);
    return rc;
}

int fg_session_score_rolling(fg_session *s, const char *text, double *logprob,
                             uint64_t *n_tokens, fg_err *err)
{
    fg_tok_ids v = {0};
    *logprob = 0;
    *n_tokens = 0;
    int rc = fg_tok_encode(s->r.tok, text, strlen(text),
                           fgr_prompt_flags(&s->r) & ~FG_TOK_ADD_BOS, &v, err);
    if (rc == FG_OK && v.n > UINT32_MAX / 2)
        rc = fg_err_set(err, FG_ERR_LIMIT, "text: too many tokens");
    double t0 = fg_now();
    if (rc == FG_OK && v.n)
        rc = rolling(s, v.ids, (uint32_t)v.n, logprob, n_tokens, err);
    s->st.busy_s += fg_now() - t0;
    s->st.requests++;
    s->st.prompt_tokens += v.n;
    fg_tok_ids_free(&v);
    return rc;
}
