/* session.c - a long-lived run (session.h): the store, model, tokenizer and engine opened once,
 * then requests answered in blocks (the files of the session: session_int.h).
 *
 * Open plans the engine for max_ctx tokens a sequence (prompt + generation: the engine's
 * context) and at most max_seqs sequences a block, through the runner's own steps
 * (fgr_open_store, fgr_open_engine: quantize-at-load, the policy search, the prefix cache), so
 * a session and fg_run plan alike. The search is told a prompt of max_ctx - G tokens and a
 * generation of G (the default max_tokens, at most half the context): the shape it prices.
 *
 * A generate call prepares every request first: checked (fg_request_check), encoded (text as
 * transformers' tokenizer(text), ids as given, messages through the chat template), and sized
 * against the context; a request that fails any of these gets its error response (400 or 413)
 * and takes no part in the blocks. The others' choices (n each) are items, packed into blocks
 * in request order as runner_jobs.c packs job lines: a block takes every waiting item that
 * keeps its longest prompt + largest generation within the context (every item fits alone).
 *
 * Sampling: a request's own fields (fg_request.set says which it gave) over the session's
 * defaults (run.sample: fg-infer's flags, fg-serve's options). Streams: a request with a seed draws choice c from stream c, so a seeded request's
 * samples do not depend on the call, the packing or the block size (as fg_sample's stream
 * per job line); a request without one takes the session's seed (run.sample.seed) and a
 * stream no earlier request of the session used (fg-infer's jobs: its input line's, so a
 * resumed job draws what the whole job would have), so two unseeded requests differ; its
 * choice c adds c x 2^40 to that stream.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session_int.h"

static void notice(void *ctx, const char *line)
{
    fg_session *s = ctx;
    if (!s->ro.quiet)
        fprintf(s->r.log, "fg-infer: %s\n", line);
}

int fgs_interrupted(const fg_session *s)
{
    return s->o.interrupt && *s->o.interrupt;
}

/* The store's name: its directory's last component. */
static void store_name(fg_session *s, const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    const char *b = path + len;
    while (b > path && b[-1] != '/')
        b--;
    snprintf(s->name, sizeof s->name, "%.*s", (int)(path + len - b), b);
}

/* The context: opts.max_ctx, else run.eo.max_ctx, else the model's positions. */
static int plan_ctx(fg_session *s, uint32_t *ctx, fg_err *err)
{
    uint32_t c = s->o.max_ctx ? s->o.max_ctx : s->ro.eo.max_ctx ? s->ro.eo.max_ctx
                                                                 : s->r.max_pos;
    if (c < 2)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "max_ctx %u: a sequence needs 2 tokens at "
                          "least", c);
    if (c > s->r.max_pos)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "max_ctx %u exceeds the model's %u "
                          "positions", c, s->r.max_pos);
    *ctx = c;
    return FG_OK;
}

static int open_engine(fg_session *s, fg_err *err)
{
    uint32_t ctx = 0;
    int rc = plan_ctx(s, &ctx, err);
    if (rc)
        return rc;
    uint32_t G = s->ro.max_new && s->ro.max_new < ctx / 2 ? s->ro.max_new : ctx / 2;
    uint32_t seqs = s->o.max_seqs ? s->o.max_seqs : 32;
    if (!s->ro.max_block)
        s->ro.max_block = seqs;
    s->r.eo.max_ctx = ctx;
    return fgr_open_engine(&s->r, ctx - G, G, seqs, err);
}

static void fill_info(fg_session *s)
{
    const fg_hparams *hp = fg_engine_hparams(s->r.e);
    const fg_chat_template *t;
    const fg_chat_tokens *tk;
    fg_err e;
    s->info.model_name = s->name;
    s->info.store_path = s->ro.model;
    s->info.max_ctx = fg_engine_plan(s->r.e)->max_ctx;
    s->info.block_seqs = fg_engine_block_size(s->r.e);
    s->info.vocab_size = hp->vocab_size;
    s->info.has_chat_template = fg_model_chat(s->r.model, &t, &tk, &e) == FG_OK;
    s->info.bos_id = hp->bos_id;
    s->info.eos_id = hp->eos_id;
}

int fg_session_open(const fg_session_opts *opts, fg_session **out, fg_err *err)
{
    fg_session *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    s->o = *opts;
    s->ro = opts->run;
    s->ro.mode = FG_RUN_DRY; /* the checks of a run whose shape the fields give */
    s->ro.prompt = s->ro.input = s->ro.output = NULL;
    s->ro.chat = 0;
    s->ro.resume = 0;
    s->ro.rolling = 0;
    int rc = s->ro.model ? fg_run_opts_check(&s->ro, err)
                         : fg_err_set(err, FG_ERR_INVALID_ARG, "no store (-m)");
    s->ro.mode = FG_RUN_JOBS;
    s->ro.input = opts->run.input; /* (fg-infer's job mode names its input in messages) */
    s->ro.output = opts->run.output;
    s->r.o = &s->ro;
    s->r.eo = s->ro.eo;
    s->r.out = s->ro.out ? s->ro.out : stdout;
    s->r.log = s->ro.log ? s->ro.log : stderr;
    s->r.eo.notice = notice;
    s->r.eo.notice_ctx = s;
    if (rc == FG_OK && s->r.eo.plan_only)
        rc = fg_err_set(err, FG_ERR_INVALID_ARG, "a session runs requests: no --dry-run");
    if (rc == FG_OK)
        rc = fgr_open_store(&s->r, err);
    if (rc == FG_OK)
        rc = open_engine(s, err);
    if (rc) {
        fg_session_close(s);
        return rc;
    }
    store_name(s, s->ro.model);
    fill_info(s);
    *out = s;
    return FG_OK;
}

void fg_session_close(fg_session *s)
{
    if (!s)
        return;
    fg_err e;
    fg_engine_close(s->r.e, &e);
    if (s->r.tmp_store[0])
        fgr_remove_tree(s->r.tmp_store);
    fg_prefix_close(s->r.pfx);
    fg_tok_free(s->r.tok);
    fgr_model_close(&s->r);
    fg_store_close(s->r.store);
    free(s);
}

const fg_session_info *fg_session_info_get(const fg_session *s)
{
    return &s->info;
}

void fg_session_stats_get(const fg_session *s, fg_session_stats *out)
{
    *out = s->st;
    fg_engine_stats_get(s->r.e, &out->engine);
}

/* ---- the tokenizer ---- */

int fg_session_tokenize(fg_session *s, const char *text, int add_special, int32_t **ids,
                        uint32_t *n, fg_err *err)
{
    fg_tok_ids v = {0};
    /* special tokens written in the text are matched either way, as transformers' tokenizer
     * (text, add_special_tokens=False) does, unless prompts may not name them */
    unsigned fl = (add_special ? FG_TOK_ADD_BOS : 0u) |
                  (s->r.o->no_special_in_prompt ? 0u : FG_TOK_SPECIAL);
    int rc = fg_tok_encode(s->r.tok, text, strlen(text), fl, &v, err);
    if (rc || v.n > UINT32_MAX) {
        fg_tok_ids_free(&v);
        return rc ? rc : fg_err_set(err, FG_ERR_LIMIT, "text too long");
    }
    *ids = v.ids ? v.ids : malloc(sizeof **ids);
    *n = (uint32_t)v.n;
    return *ids ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

int fg_session_detokenize(fg_session *s, const int32_t *ids, uint32_t n, int skip_special,
                          char **text, fg_err *err)
{
    fg_tok_bytes b = {0};
    int rc = fg_tok_decode(s->r.tok, ids, n, skip_special ? FG_TOK_SKIP_SPECIAL : 0, &b, err);
    if (rc) {
        fg_tok_bytes_free(&b);
        return rc;
    }
    *text = malloc(b.len + 1);
    if (*text) {
        memcpy(*text, b.data ? b.data : "", b.len);
        (*text)[b.len] = '\0';
    }
    fg_tok_bytes_free(&b);
    return *text ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

int fg_session_chat_render(fg_session *s, const char *messages, const char *kwargs, char **text,
                           fg_err *err)
{
    const fg_chat_template *t;
    const fg_chat_tokens *tk;
    int rc = fg_model_chat(s->r.model, &t, &tk, err);
    if (rc)
        return rc;
    fg_chat_opts co = {1, tk->bos, tk->eos, tk->pad, tk->unk, kwargs, kwargs ? strlen(kwargs) : 0,
                       0, 0, 0};
    size_t len = 0;
    *text = NULL;
    return fg_chat_render(t, messages, strlen(messages), &co, text, &len, err);
}

/* ---- generate: the requests prepared ---- */

int fgs_has_seed(const fg_request *q)
{
    return q->has_seed || (q->set & FG_REQ_SET_SEED);
}

fg_sample_params fgs_sample(const fg_session *s, const fg_request *q)
{
    fg_sample_params p = s->ro.sample;
    unsigned m = q->set;
    if (m & FG_REQ_SET_TEMPERATURE)
        p.temperature = q->sample.temperature;
    if (m & FG_REQ_SET_TOP_P)
        p.top_p = q->sample.top_p;
    if (m & FG_REQ_SET_TOP_K)
        p.top_k = q->sample.top_k;
    if (fgs_has_seed(q))
        p.seed = q->sample.seed;
    if (m & FG_REQ_SET_MIN_P)
        p.min_p = q->min_p;
    if (m & FG_REQ_SET_PRESENCE)
        p.presence_penalty = q->presence_penalty;
    if (m & FG_REQ_SET_FREQUENCY)
        p.frequency_penalty = q->frequency_penalty;
    if (m & FG_REQ_SET_REPETITION)
        p.repetition_penalty = q->repetition_penalty;
    return p;
}

static void resp_error(fg_response *r, int status, const char *type, const char *msg)
{
    r->status = status;
    r->error_type = type;
    snprintf(r->error, sizeof r->error, "%s", msg);
}

static uint32_t req_max_tokens(const fg_session *s, const fg_request *q)
{
    return q->max_tokens ? q->max_tokens : s->ro.max_new ? s->ro.max_new : 16;
}

/* The prompt's ids into resp->prompt_ids: FG_OK, 1 when the request got its error response,
 * else the call's failure. */
static int encode_req(fg_session *s, const fg_request *q, fg_response *resp, fg_err *err)
{
    int32_t *ids = NULL;
    uint32_t n = 0;
    int rc;
    if (q->prompt_ids) {
        for (uint32_t i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] < 0 || (uint32_t)q->prompt_ids[i] >= s->info.vocab_size) {
                char m[160];
                snprintf(m, sizeof m, "prompt: token %u is %d, not an id of the model's %u",
                         i, q->prompt_ids[i], s->info.vocab_size);
                resp_error(resp, 400, "invalid_request_error", m);
                return 1;
            }
        n = q->n_prompt_ids;
        ids = n ? malloc((size_t)n * sizeof *ids) : NULL;
        if (n && !ids)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        if (n)
            memcpy(ids, q->prompt_ids, (size_t)n * sizeof *ids);
        rc = n ? FG_OK : fg_err_set(err, FG_ERR_INVALID_ARG, "prompt: the prompt is empty");
    } else if (q->messages) {
        rc = fgr_encode_chat(&s->r, q->messages, q->chat_kwargs, &ids, &n, "messages", err);
    } else {
        rc = fgr_encode(&s->r, q->prompt ? q->prompt : "", fgr_prompt_flags(&s->r), &ids, &n,
                        "prompt", err);
    }
    if (rc == FG_ERR_INVALID_ARG || rc == FG_ERR_NOT_FOUND || rc == FG_ERR_UNSUPPORTED) {
        resp_error(resp, 400, "invalid_request_error", err->msg);
        return 1;
    }
    if (rc)
        return rc;
    resp->prompt_ids = ids;
    resp->n_prompt = n;
    return FG_OK;
}

/* Request q checked, encoded and sized: FG_OK, 1 (its error response set), or a failure. */
static int prep_req(fg_session *s, const fg_request *q, fg_response *resp, fg_err *err)
{
    fg_err e;
    if (fg_request_check(q, &e)) {
        resp_error(resp, 400, "invalid_request_error", e.msg);
        return 1;
    }
    int rc = encode_req(s, q, resp, err);
    if (rc)
        return rc;
    uint32_t mn = req_max_tokens(s, q), ctx = s->info.max_ctx;
    if ((uint64_t)resp->n_prompt + mn > ctx) { /* said as fg-infer's jobs always said it */
        char m[200];
        uint32_t limit = s->ro.eo.max_ctx && s->ro.eo.max_ctx < s->r.max_pos ? s->ro.eo.max_ctx
                                                                              : s->r.max_pos;
        uint64_t need = (uint64_t)resp->n_prompt + mn;
        if (need > s->r.max_pos)
            snprintf(m, sizeof m, "%u prompt tokens + %u new exceed the model's %u positions",
                     resp->n_prompt, mn, s->r.max_pos);
        else if (need > limit)
            snprintf(m, sizeof m, "%u prompt tokens + %u new exceed the context of %u "
                     "(--max-context)", resp->n_prompt, mn, limit);
        else
            snprintf(m, sizeof m, "%u prompt tokens + %u new exceed the context of %u",
                     resp->n_prompt, mn, ctx);
        resp_error(resp, 413, "context_length_exceeded", m);
        return 1;
    }
    uint32_t nc = q->n ? q->n : 1;
    resp->choices = calloc(nc, sizeof *resp->choices);
    if (!resp->choices)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    resp->n_choices = nc;
    return FG_OK;
}

/* Move into blk, in order, the waiting items that together keep the longest prompt + the
 * largest generation within ctx; the rest stay in q (compacted). */
static uint32_t pack(fgs_item *q, size_t *nq, fgs_item *blk, uint32_t bs, uint32_t ctx)
{
    uint32_t P = 0, G = 0, nb = 0;
    size_t keep = 0;
    for (size_t i = 0; i < *nq; i++) {
        uint32_t P2 = q[i].n > P ? q[i].n : P, G2 = q[i].mn > G ? q[i].mn : G;
        if (nb < bs && (uint64_t)P2 + G2 <= ctx) {
            blk[nb++] = q[i];
            P = P2, G = G2;
        } else {
            q[keep++] = q[i];
        }
    }
    *nq = keep;
    return nb;
}

/* The items (choices) of the prepared requests. */
static int make_items(fg_session *s, const fg_request *reqs, uint32_t n, fg_response *resp,
                      const uint64_t *streams, fgs_item **items, size_t *ni, fg_err *err)
{
    size_t total = 0, k = 0;
    for (uint32_t i = 0; i < n; i++)
        total += resp[i].status ? 0 : resp[i].n_choices;
    *items = calloc(total + 1, sizeof **items);
    if (!*items)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        if (resp[i].status)
            continue;
        const fg_request *q = &reqs[i];
        uint64_t base = fgs_has_seed(q) ? 0 : streams ? streams[i] : (1ull << 32) + s->streams++;
        uint64_t step = fgs_has_seed(q) ? 1 : 1ull << 40;
        for (uint32_t c = 0; c < resp[i].n_choices; c++)
            (*items)[k++] = (fgs_item){i, c, q, &resp[i], resp[i].prompt_ids, resp[i].n_prompt,
                                       req_max_tokens(s, q), base + c * step, q->min_tokens};
    }
    *ni = k;
    return FG_OK;
}

/* ---- echo: the prompt's log-probs (its text is the writers' to put first) ---- */

typedef struct echo_ctx {
    const fg_request *reqs;
    fg_response *resp;
    const uint32_t *map; /* window -> request */
} echo_ctx;

static int echo_pos(void *ctx, uint32_t w, uint32_t t, const float *lg, uint32_t V)
{
    echo_ctx *c = ctx;
    fg_response *r = &c->resp[c->map[w]];
    uint32_t k = (uint32_t)c->reqs[c->map[w]].logprobs;
    int32_t id = r->prompt_ids[t + 1];
    double lse = fgs_lse(lg, V);
    r->prompt_logprob[t + 1] = (float)((double)lg[id] - lse);
    fgs_top(lg, V, lse, k, r->prompt_top + (size_t)(t + 1) * k);
    return FG_OK;
}

/* With echo and logprobs: each prompt token's log-prob given the ones before it (the first's
 * NaN: no context), scored in windows of the block. */
static int echo_logprobs(fg_session *s, const fg_request *reqs, fg_response *resp, uint32_t n,
                         fg_err *err)
{
    const int32_t **win = calloc(n + 1, sizeof *win);
    uint32_t *lens = calloc(n + 1, sizeof *lens), *map = calloc(n + 1, sizeof *map), m = 0;
    int rc = win && lens && map ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        fg_response *r = &resp[i];
        uint32_t k = reqs[i].logprobs > 0 ? (uint32_t)reqs[i].logprobs : 0;
        if (r->status || !reqs[i].echo || reqs[i].logprobs < 0)
            continue;
        r->prompt_logprob = malloc((size_t)r->n_prompt * sizeof *r->prompt_logprob);
        r->prompt_top = malloc(((size_t)r->n_prompt * k + 1) * sizeof *r->prompt_top);
        if (!r->prompt_logprob || !r->prompt_top) {
            rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
            break;
        }
        r->prompt_logprob[0] = NAN;
        for (uint32_t j = 0; j < k; j++)
            r->prompt_top[j] = (fg_token_lp){-1, NAN};
        if (r->n_prompt < 2)
            continue;
        win[m] = r->prompt_ids;
        lens[m] = r->n_prompt - 1;
        map[m++] = i;
    }
    echo_ctx c = {reqs, resp, map};
    if (rc == FG_OK && m)
        rc = fgs_windows(s, win, lens, NULL, m, echo_pos, &c, err);
    free(win);
    free(lens);
    free(map);
    return rc;
}

/* Run the items in blocks. */
static int run_items(fgs_call *c, fgs_item *q, size_t nq, fg_err *err)
{
    fg_session *s = c->s;
    uint32_t bs = s->info.block_seqs;
    fgs_item *blk = calloc(bs, sizeof *blk);
    int rc = blk ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    while (rc == FG_OK && nq) {
        if (fgs_interrupted(s)) {
            rc = fg_err_set(err, FG_ERR_STATE, "interrupted");
            break;
        }
        double t0 = fg_now();
        uint32_t nb = pack(q, &nq, blk, bs, s->info.max_ctx);
        rc = fgs_block(c, blk, nb, err);
        double dt = fg_now() - t0;
        s->st.busy_s += dt;
        s->st.blocks++;
        for (uint32_t i = 0; i < nb; i++)
            blk[i].resp->seconds += dt / nb;
    }
    free(blk);
    return rc;
}

/* What is left of each response once the blocks ran: usage, cancelled requests. */
static void finish_resps(fgs_call *c, fg_response *resp, uint32_t n, int rc, const fg_err *err)
{
    fg_session *s = c->s;
    for (uint32_t i = 0; i < n; i++) {
        fg_response *r = &resp[i];
        s->st.requests++;
        if (r->status == 0 && c->cancelled[i])
            resp_error(r, 499, "cancelled", "the request was cancelled");
        if (r->status == 0 && rc) {
            int done = r->choices != NULL;
            for (uint32_t k = 0; k < r->n_choices; k++)
                done &= r->choices[k].text != NULL;
            if (!done)
                resp_error(r, 500, "server_error", err->msg);
        }
        if (r->status) {
            s->st.errors++;
            continue;
        }
        r->completion_tokens = 0;
        for (uint32_t k = 0; k < r->n_choices; k++)
            r->completion_tokens += r->choices[k].n_tokens;
        s->st.prompt_tokens += r->n_prompt;
        s->st.completion_tokens += r->completion_tokens;
    }
}

static int generate(fg_session *s, const fg_request *reqs, uint32_t n, const uint64_t *streams,
                    fg_piece_fn on_piece, void *piece_ctx, fg_response *resp, fg_err *err)
{
    fgs_call c = {s, on_piece, piece_ctx, calloc(n + 1, 1)};
    fgs_item *items = NULL;
    size_t ni = 0;
    int rc = c.cancelled ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    memset(resp, 0, (size_t)n * sizeof *resp);
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        rc = prep_req(s, &reqs[i], &resp[i], err);
        rc = rc == 1 ? FG_OK : rc;
    }
    if (rc == FG_OK)
        rc = echo_logprobs(s, reqs, resp, n, err);
    if (rc == FG_OK)
        rc = make_items(s, reqs, n, resp, streams, &items, &ni, err);
    if (rc == FG_OK)
        rc = run_items(&c, items, ni, err);
    if (c.cancelled)
        finish_resps(&c, resp, n, rc, err);
    free(items);
    free(c.cancelled);
    return rc;
}

int fg_session_generate(fg_session *s, const fg_request *reqs, uint32_t n, fg_piece_fn on_piece,
                        void *piece_ctx, fg_response *resp, fg_err *err)
{
    return generate(s, reqs, n, NULL, on_piece, piece_ctx, resp, err);
}

int fgs_generate_streams(fg_session *s, const fg_request *reqs, uint32_t n,
                         const uint64_t *streams, fg_response *resp, fg_err *err)
{
    return generate(s, reqs, n, streams, NULL, NULL, resp, err);
}

void fgs_set_tick(fg_session *s, fgr_tick *t)
{
    s->tick = t;
}

fgr_run *fgs_run(fg_session *s)
{
    return &s->r;
}
