/* prefix_kv.c - the engine's side of the prefix cache (prefix.h): cached KV rows copied into a
 * block's KV chunks before its prefill, and the whole prompt pages the prefill computed copied
 * out and saved after the block.
 *
 * A block's prompts are left-padded to P tokens; sequence s with n_s tokens has pad_s =
 * P - n_s, and its token i sits at cache slot pad_s + i with a position that counts real
 * tokens only, so the KV rows of a token prefix do not depend on the padding (and per-row
 * codecs encode each row on its own): a page's rows can be written at any slot. The lookup
 * finds c_s cached tokens for each sequence (whole pages, at most n_s - 1: the last prompt
 * token must be computed for its logits); they are read into slots [pad_s, pad_s + c_s) of
 * every layer, and the prefill then computes slots [s0, P) of all sequences, s0 = min over s
 * of pad_s + c_s (schedule.c's chunked prefill). Rows past s0 that were loaded are computed
 * again, to the same values.
 *
 * A page that another process evicts between the lookup and the read is a miss from there on:
 * c_s drops to that page, and the pages already copied beyond it are recomputed.
 *
 * The same slot mechanism serves scoring (fg_engine_score, the end of this file): the rows of a
 * run several windows share, copied from a donor's prefill into each window's slots, and the
 * held run, rows kept in host memory from one scoring call to the next.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine_int.h"
#include "prefix.h"

#define SAVE_GROUP_BYTES (64ull << 20) /* payload bytes gathered per fg_prefix_put */
#define SAVE_GROUP_ENTRIES 1024u       /* and at most this many entries (put takes 4096) */

/* ---- identity ---- */

typedef struct hash_ctx {
    XXH3_state_t *st;
} hash_ctx;

static int hash_tensor(void *ctx, const fg_store_tensor *t)
{
    XXH3_state_t *st = ((hash_ctx *)ctx)->st;
    XXH3_64bits_update(st, t->name, strlen(t->name) + 1);
    uint8_t c[12] = {t->codec.id, t->codec.bits, t->codec.group_axis, t->codec.scale_dtype,
                     t->codec.nibble_order, t->codec.layout_version};
    memcpy(c + 8, &t->codec.group_size, 4);
    XXH3_64bits_update(st, c, sizeof c);
    XXH3_64bits_update(st, &t->digest, sizeof t->digest);
    return 0;
}

int fg_engine_prefix_ident(fg_engine *e, uint32_t page_tokens, fg_prefix_ident *id,
                           fg_err *err)
{
    memset(id, 0, sizeof *id);
    size_t len;
    const void *cfg = fg_model_config_json(e->model, &len);
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, cfg, len);
    if (e->hp.rope.use_long) /* LongRoPE's other frequencies rotate the cached keys otherwise */
        XXH3_64bits_update(st, "longrope long_factor", 20);
    hash_ctx hc = {st};
    int rc = fg_store_tensor_iter(e->store, hash_tensor, &hc, err);
    id->model = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    id->n_layers = e->hp.n_layers;
    id->row_bytes = (uint32_t)e->plan.kv_row;
    id->width = fg_model_kv_width(&e->hp);
    id->page_tokens = page_tokens;
    id->codec_id = e->kv_codec.id;
    id->codec_bits = e->kv_codec.bits;
    id->codec_axis = e->kv_codec.group_axis;
    id->codec_group = e->kv_codec.group_size;
    id->compute = (uint8_t)e->o.compute;
    id->kv_single = fg_model_kv_planes(&e->hp) == 1; /* (MLA's latent rows) */
    snprintf(id->backend, sizeof id->backend, "%s", e->be->iface->name);
    snprintf(id->label, sizeof id->label, "%s model %.64s", e->arch->name,
             fg_store_dir(e->store));
    return rc;
}

void fg_engine_set_prefix(fg_engine *e, fg_prefix *p) { e->prefix = p; }

/* ---- per block ---- */

void fg_pfx_block_free(fg_pfx_block *pb)
{
    for (uint32_t s = 0; pb->keys && s < pb->n; s++)
        free(pb->keys[s]);
    free(pb->keys);
    free(pb->known);
    free(pb->cached);
    memset(pb, 0, sizeof *pb);
}

/* n bytes between a chunk (in the view's tier) and host memory: through the device's copy
 * engine when the chunk is device memory, which host code never touches. */
static int chunk_copy(fg_engine *e, const fg_pager_view *v, uint8_t *at, uint8_t *pl, size_t n,
                      int to_chunk, fg_err *err)
{
    if (v->tier != FG_TIER_DEVICE) {
        memcpy(to_chunk ? at : pl, to_chunk ? pl : at, n);
        return FG_OK;
    }
    fg_device *d = e->be->dev;
    return to_chunk ? d->iface->copy(d, at, FG_BUFT_DEVICE, pl, FG_BUFT_HOST, n, NULL, err)
                    : d->iface->copy(d, pl, FG_BUFT_HOST, at, FG_BUFT_DEVICE, n, NULL, err);
}

/* Rows [slot, slot + m) of sequence row r of the KV chunk of (batch, layer) <-> host memory:
 * the K rows at pl, the V rows at pl + vstride bytes (MLA's chunk has the K rows alone). */
static int rows_copy_n(fg_engine *e, const fg_pager_view *v, uint32_t r, uint32_t slot,
                       uint32_t m, uint8_t *pl, size_t vstride, int to_chunk, fg_err *err)
{
    size_t rb = e->plan.kv_row;
    size_t rows = (size_t)e->gbs * e->max_ctx, off = ((size_t)r * e->max_ctx + slot) * rb;
    uint8_t *k = (uint8_t *)v->ptr + off, *val = (uint8_t *)v->ptr + rows * rb + off;
    int rc = chunk_copy(e, v, k, pl, m * rb, to_chunk, err);
    if (fg_model_kv_planes(&e->hp) == 1) /* (MLA: no V rows) */
        return rc;
    return rc ? rc : chunk_copy(e, v, val, pl + vstride, m * rb, to_chunk, err);
}

/* A page's rows [slot, slot + G) <-> its payload (K rows, then V rows). */
static int rows_copy(fg_engine *e, const fg_pager_view *v, uint32_t r, uint32_t slot,
                     uint8_t *pl, int to_chunk, fg_err *err)
{
    uint32_t G = fg_prefix_page_tokens(e->prefix);
    return rows_copy_n(e, v, r, slot, G, pl, (size_t)G * e->plan.kv_row, to_chunk, err);
}

static int lookup_all(fg_engine *e, fg_pfx_block *pb, const fg_gen_seq *seqs, fg_err *err)
{
    uint32_t G = fg_prefix_page_tokens(e->prefix);
    pb->keys = calloc(pb->n, sizeof *pb->keys);
    pb->known = calloc(pb->n, sizeof *pb->known);
    pb->cached = calloc(pb->n, sizeof *pb->cached);
    if (!pb->keys || !pb->known || !pb->cached)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; s < pb->n; s++) {
        uint32_t all = seqs[s].n_prompt / G, usable = (seqs[s].n_prompt - 1) / G;
        if (!(pb->keys[s] = malloc(((size_t)all + 1) * sizeof *pb->keys[s])))
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        fg_prefix_keys(e->prefix, seqs[s].prompt, all, pb->keys[s]);
        int rc = fg_prefix_lookup(e->prefix, seqs[s].prompt, pb->keys[s], usable, &pb->known[s],
                                  err);
        pb->cached[s] = pb->known[s] * G;
        uint32_t more = 0; /* a last whole page (n_prompt % G == 0) is not loaded, nor saved
                              again when the cache has it */
        if (rc == FG_OK && all > usable && pb->known[s] == usable)
            rc = fg_prefix_probe(e->prefix, seqs[s].prompt, pb->keys[s], all, &more, err);
        if (rc)
            return rc;
        pb->known[s] = more > pb->known[s] ? more : pb->known[s];
    }
    return FG_OK;
}

/* Read the cached pages of batch k's sequences into its KV chunk of layer l. */
static int load_chunk(fg_engine *e, fg_pfx_block *pb, const fg_gen_seq *seqs, uint32_t k,
                      uint32_t l, uint8_t *buf, fg_err *err)
{
    uint32_t G = fg_prefix_page_tokens(e->prefix), first = k * e->gbs;
    uint32_t end = first + e->gbs < pb->n ? first + e->gbs : pb->n;
    int any = 0;
    for (uint32_t s = first; s < end; s++)
        any |= pb->cached[s] > 0;
    if (!any)
        return FG_OK;
    fg_pager_view v;
    int rc = fg_engine_acquire(e, fg_engine_kv_id(e, k, l), &v, err);
    for (uint32_t s = first; rc == FG_OK && s < end; s++) {
        uint32_t pad = pb->P - seqs[s].n_prompt;
        for (uint32_t j = 0; j < pb->cached[s] / G; j++) {
            fg_err e2;
            int r2 = fg_prefix_read(e->prefix, &pb->keys[s][j], j, l, buf, &e2);
            if (r2 == FG_ERR_NOT_FOUND || r2 == FG_ERR_STORE_STALE) {
                pb->cached[s] = j * G; /* gone meanwhile: compute from here */
                break;
            }
            if (r2) {
                *err = e2;
                rc = r2;
                break;
            }
            rc = rows_copy(e, &v, s - first, pad + j * G, buf, 1, err);
        }
    }
    return fg_engine_release(e, &v, 1, rc, err);
}

int fg_engine_prefix_load(fg_engine *e, const fg_gen_seq *seqs, uint32_t n, uint32_t P,
                          fg_pfx_block *pb, uint32_t *s0, fg_err *err)
{
    memset(pb, 0, sizeof *pb);
    pb->n = n;
    pb->P = P;
    *s0 = 0;
    if (!e->prefix)
        return FG_OK;
    int rc = lookup_all(e, pb, seqs, err);
    uint8_t *buf = rc ? NULL : malloc(fg_prefix_payload_bytes(e->prefix));
    if (rc == FG_OK && !buf)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    uint32_t nb = (n + e->gbs - 1) / e->gbs;
    for (uint32_t k = 0; rc == FG_OK && k < nb; k++)
        for (uint32_t l = 0; rc == FG_OK && l < e->hp.n_layers; l++)
            rc = load_chunk(e, pb, seqs, k, l, buf, err);
    free(buf);
    uint32_t lo = P;
    for (uint32_t s = 0; rc == FG_OK && s < n; s++) {
        uint32_t at = P - seqs[s].n_prompt + pb->cached[s];
        lo = at < lo ? at : lo;
    }
    if (rc == FG_OK)
        *s0 = lo;
    for (uint32_t s = 0; rc == FG_OK && s < n; s++) {
        uint32_t pad = P - seqs[s].n_prompt, got = lo > pad ? lo - pad : 0;
        pb->tok_cached += got;
        pb->tok_computed += seqs[s].n_prompt - got;
    }
    return rc;
}

/* ---- saving ---- */

typedef struct cand {
    fg_prefix_key key;
    uint32_t seq, page;
} cand;

static int by_key(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->key.job != y->key.job)
        return x->key.job < y->key.job ? -1 : 1;
    if (x->key.seq != y->key.seq)
        return x->key.seq < y->key.seq ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq; /* the first sequence's copy is kept */
}

static int by_seq(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->page < y->page ? -1 : x->page > y->page;
}

/* The whole prompt pages not found in the cache, one per key, in sequence order. */
static cand *candidates(const fg_engine *e, const fg_pfx_block *pb, const fg_gen_seq *seqs,
                        size_t *n_out)
{
    uint32_t G = fg_prefix_page_tokens(e->prefix);
    size_t n = 0;
    for (uint32_t s = 0; s < pb->n; s++)
        n += seqs[s].n_prompt / G - pb->known[s];
    cand *c = malloc((n + 1) * sizeof *c);
    if (!c)
        return NULL;
    n = 0;
    for (uint32_t s = 0; s < pb->n; s++)
        for (uint32_t j = pb->known[s]; j < seqs[s].n_prompt / G; j++)
            c[n++] = (cand){pb->keys[s][j], s, j};
    qsort(c, n, sizeof *c, by_key);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (!w || c[w - 1].key.job != c[i].key.job || c[w - 1].key.seq != c[i].key.seq)
            c[w++] = c[i];
    qsort(c, w, sizeof *c, by_seq);
    *n_out = w;
    return c;
}

/* Copy the payloads of candidates c[0..n) out of the KV chunks (each (batch, layer) chunk
 * acquired once) into data, entry i layer l at data + (i * L + l) * payload, and put them. */
static int save_group(fg_engine *e, const fg_pfx_block *pb, const fg_gen_seq *seqs,
                      const cand *c, size_t n, uint8_t *data, const void **lp,
                      fg_prefix_entry *ent, fg_err *err)
{
    uint32_t G = fg_prefix_page_tokens(e->prefix), L = e->hp.n_layers;
    size_t pl = fg_prefix_payload_bytes(e->prefix);
    int rc = FG_OK;
    for (uint32_t l = 0; rc == FG_OK && l < L; l++)
        for (size_t i = 0; rc == FG_OK && i < n;) {
            uint32_t k = c[i].seq / e->gbs;
            fg_pager_view v;
            if ((rc = fg_engine_acquire(e, fg_engine_kv_id(e, k, l), &v, err)))
                break;
            for (; rc == FG_OK && i < n && c[i].seq / e->gbs == k; i++) {
                uint32_t pad = pb->P - seqs[c[i].seq].n_prompt;
                rc = rows_copy(e, &v, c[i].seq % e->gbs, pad + c[i].page * G,
                               data + (i * L + l) * pl, 0, err);
            }
            rc = fg_engine_release(e, &v, 0, rc, err);
        }
    for (size_t i = 0; rc == FG_OK && i < n; i++) {
        const fg_prefix_key *keys = pb->keys[c[i].seq];
        for (uint32_t l = 0; l < L; l++)
            lp[i * L + l] = data + (i * L + l) * pl;
        ent[i] = (fg_prefix_entry){c[i].key, c[i].page ? keys[c[i].page - 1] : (fg_prefix_key){0, 0},
                                   c[i].page, seqs[c[i].seq].prompt + (size_t)c[i].page * G,
                                   lp + i * L};
    }
    return rc == FG_OK ? fg_prefix_put(e->prefix, ent, n, err) : rc;
}

static int save_all(fg_engine *e, const fg_pfx_block *pb, const fg_gen_seq *seqs, const cand *c,
                    size_t n, fg_err *err)
{
    uint32_t L = e->hp.n_layers;
    size_t per = (size_t)L * fg_prefix_payload_bytes(e->prefix);
    size_t group = SAVE_GROUP_BYTES / per ? SAVE_GROUP_BYTES / per : 1;
    group = group < SAVE_GROUP_ENTRIES ? group : SAVE_GROUP_ENTRIES;
    group = group < n ? group : n;
    uint8_t *data = malloc(group * per);
    const void **lp = malloc(group * L * sizeof *lp);
    fg_prefix_entry *ent = malloc(group * sizeof *ent);
    int rc = data && lp && ent ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == FG_OK && i < n; i += group)
        rc = save_group(e, pb, seqs, c + i, n - i < group ? n - i : group, data, lp, ent, err);
    free(data);
    free(lp);
    free(ent);
    return rc;
}

int fg_engine_prefix_save(fg_engine *e, const fg_gen_seq *seqs, fg_pfx_block *pb, fg_err *err)
{
    if (!e->prefix || !pb->keys)
        return FG_OK;
    size_t n = 0;
    cand *c = candidates(e, pb, seqs, &n);
    if (!c)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    int rc = fg_prefix_write_begin(e->prefix, err);
    if (rc == FG_ERR_STORE_BUSY) { /* another process kept writing: save nothing this time */
        if (e->o.notice)
            e->o.notice(e->o.notice_ctx, err->msg);
        free(c);
        return FG_OK;
    }
    if (rc == FG_OK) {
        rc = save_all(e, pb, seqs, c, n, err);
        fg_err e2;
        int rc2 = fg_prefix_write_end(e->prefix, &e2);
        if (rc == FG_OK && rc2) {
            *err = e2;
            rc = rc2;
        }
    }
    free(c);
    return rc;
}

/* ---- prefixes shared by scoring calls (fg_engine_score) ----
 *
 * Windows scored together whose first tokens are the same (lm-eval's choices of one context, a
 * few-shot prefix) compute those rows once: the windows sorted by their tokens, each window's
 * shareable run is its longest common prefix with a neighbour, cut to the positions before its
 * first wanted logits; consecutive windows whose runs agree form a group and its first window
 * is the donor. The donors' runs are a first prefill of their own (schedule.c), whose rows are
 * copied, layer by layer, through host memory into every member's slots [pad_s, pad_s + c_s)
 * of the windows' block, as cached pages are above; the block's prefill then computes slots
 * [s0, P) only.
 *
 * Across calls, the held run: after each call the rows of the window last in token order (up
 * to its first wanted logits) are copied out to host memory with their tokens; the next call's
 * windows (the caller sorts them on from there) take from it what they begin with: a few-shot
 * prefix every item shares, or the whole context of an item whose choices the calls split.
 * The donors take theirs too, and a group whose donor would give no more than the held run is
 * dropped (fg_engine_share_trim). A call whose windows all begin with a run the held run lacks
 * may prefill that run alone first (the level-0 pass, schedule.c), which becomes the held run:
 * a few-shot prefix is then computed once a job, and each item's context after it once. With
 * a prefix cache the level-0 pass is a block like a generated one: its cached pages loaded, its
 * new whole pages saved (fg_engine_prefix_load/save), so the next job loads that run. The
 * held run is at most max_ctx rows of every layer, one sequence's cache, outside the plan
 * (as share_rows' buffer is): under a RAM budget it is kept only when it fits beside the plan's
 * total (else nothing is held and the next call computes its run again); it is freed at
 * close. */

typedef struct win_ref {
    const int32_t *ids;
    uint32_t n, idx;
} win_ref;

static int by_tokens(const void *a, const void *b)
{
    const win_ref *x = a, *y = b;
    uint32_t m = x->n < y->n ? x->n : y->n;
    for (uint32_t i = 0; i < m; i++)
        if (x->ids[i] != y->ids[i])
            return x->ids[i] < y->ids[i] ? -1 : 1;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static uint32_t common(const win_ref *a, const win_ref *b)
{
    uint32_t m = a->n < b->n ? a->n : b->n, i = 0;
    while (i < m && a->ids[i] == b->ids[i])
        i++;
    return i;
}

void fg_share_plan_free(fg_share_plan *sp)
{
    free(sp->donor);
    free(sp->c);
    free(sp->dwin);
    free(sp->dlen);
    memset(sp, 0, sizeof *sp);
}

/* Close group d (the last): a group of one shares nothing. */
static void close_group(fg_share_plan *sp, uint32_t d, uint32_t members)
{
    if (d == FG_SHARE_NONE || members > 1)
        return;
    sp->donor[sp->dwin[d]] = FG_SHARE_NONE;
    sp->c[sp->dwin[d]] = 0;
    sp->nd--;
}

int fg_engine_share_plan(const int32_t *const *w, const uint32_t *lens, const uint32_t *from,
                         uint32_t n, fg_share_plan *sp, fg_err *err)
{
    memset(sp, 0, sizeof *sp);
    sp->n = n;
    win_ref *o = malloc(((size_t)n + 1) * sizeof *o);
    uint32_t *adj = calloc((size_t)n + 2, sizeof *adj);
    sp->donor = malloc(((size_t)n + 1) * sizeof *sp->donor);
    sp->c = calloc((size_t)n + 1, sizeof *sp->c);
    sp->dwin = calloc((size_t)n + 1, sizeof *sp->dwin);
    sp->dlen = calloc((size_t)n + 1, sizeof *sp->dlen);
    int rc = o && adj && sp->donor && sp->c && sp->dwin && sp->dlen
           ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; rc == FG_OK && s < n; s++) {
        o[s] = (win_ref){w[s], lens[s], s};
        sp->donor[s] = FG_SHARE_NONE;
    }
    if (rc == FG_OK)
        qsort(o, n, sizeof *o, by_tokens);
    for (uint32_t i = 1; rc == FG_OK && i < n; i++) /* adj[i]: o[i - 1] and o[i] */
        adj[i] = common(&o[i - 1], &o[i]);
    uint32_t cur = FG_SHARE_NONE, members = 0, to_donor = 0;
    for (uint32_t i = 0; rc == FG_OK && i < n; i++) {
        uint32_t s = o[i].idx, cap = from[s] < lens[s] - 1 ? from[s] : lens[s] - 1;
        uint32_t best = adj[i] > adj[i + 1] ? adj[i] : adj[i + 1];
        sp->c[s] = best < cap ? best : cap;
        to_donor = adj[i] < to_donor ? adj[i] : to_donor;
        if (sp->c[s] == 0)
            continue;
        if (cur != FG_SHARE_NONE && sp->c[s] <= to_donor) { /* its run is the donor's too */
            sp->donor[s] = cur;
            sp->dlen[cur] = sp->c[s] > sp->dlen[cur] ? sp->c[s] : sp->dlen[cur];
            members++;
            continue;
        }
        close_group(sp, cur, members);
        cur = sp->nd++;
        sp->dwin[cur] = s;
        sp->dlen[cur] = sp->c[s];
        sp->donor[s] = cur;
        members = 1;
        to_donor = UINT32_MAX;
    }
    if (rc == FG_OK)
        close_group(sp, cur, members);
    if (rc == FG_OK && n) { /* sorted: what the first and the last share, all share */
        sp->last = o[n - 1].idx;
        sp->common = common(&o[0], &o[n - 1]);
        for (uint32_t s = 0; s < n; s++) {
            uint32_t cap = from[s] < lens[s] - 1 ? from[s] : lens[s] - 1;
            sp->common = cap < sp->common ? cap : sp->common;
        }
    }
    free(o);
    free(adj);
    return rc;
}

static int plan_alloc(fg_share_plan *sp, uint32_t n, uint32_t nd, fg_err *err)
{
    memset(sp, 0, sizeof *sp);
    sp->n = n;
    sp->donor = malloc(((size_t)n + 1) * sizeof *sp->donor);
    sp->c = calloc((size_t)n + 1, sizeof *sp->c);
    sp->dwin = calloc((size_t)nd + 1, sizeof *sp->dwin);
    sp->dlen = calloc((size_t)nd + 1, sizeof *sp->dlen);
    return sp->donor && sp->c && sp->dwin && sp->dlen
         ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

int fg_engine_share_trim(const fg_share_plan *sp, const uint32_t *hw, const uint32_t *mw,
                         fg_share_plan *out, uint32_t *hd, fg_err *err)
{
    uint32_t *cnt = calloc((size_t)sp->nd + 1, sizeof *cnt), *to = NULL;
    int rc = plan_alloc(out, sp->n, sp->nd, err);
    if (rc == FG_OK && (!cnt || !(to = malloc(((size_t)sp->nd + 1) * sizeof *to))))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; rc == FG_OK && s < sp->n; s++) /* the members the donor gives more */
        if (sp->donor[s] != FG_SHARE_NONE && sp->c[s] > hw[s])
            cnt[sp->donor[s]]++;
    for (uint32_t d = 0; rc == FG_OK && d < sp->nd; d++) {
        to[d] = cnt[d] > 1 ? out->nd++ : FG_SHARE_NONE;
        if (to[d] != FG_SHARE_NONE)
            out->dwin[to[d]] = sp->dwin[d];
    }
    for (uint32_t s = 0; rc == FG_OK && s < sp->n; s++) {
        uint32_t d = sp->donor[s] != FG_SHARE_NONE && sp->c[s] > hw[s] ? to[sp->donor[s]]
                   : FG_SHARE_NONE;
        out->donor[s] = d;
        out->c[s] = d != FG_SHARE_NONE ? sp->c[s] : 0;
        if (d != FG_SHARE_NONE && out->c[s] > out->dlen[d])
            out->dlen[d] = out->c[s];
    }
    for (uint32_t d = 0; rc == FG_OK && d < out->nd; d++)
        hd[d] = mw[out->dwin[d]] < out->dlen[d] ? mw[out->dwin[d]] : out->dlen[d];
    out->common = sp->common;
    out->last = sp->last;
    free(cnt);
    free(to);
    return rc;
}

int fg_engine_share_fits(const fg_engine *e, const fg_share_plan *sp)
{
    uint64_t rows = 0;
    for (uint32_t d = 0; d < sp->nd; d++)
        rows += sp->dlen[d];
    uint64_t need = rows * 2 * e->plan.kv_row + (uint64_t)(sp->nd + 1) * sizeof(size_t) +
                    (uint64_t)sp->n * (sizeof(size_t) + sizeof(uint32_t));
    uint64_t held = (uint64_t)e->held.cap * (2 * e->plan.kv_row * e->hp.n_layers +
                                             sizeof *e->held.ids); /* (kept meanwhile) */
    return !e->plan.budget || e->plan.total_host + held + need <= e->plan.budget;
}

/* Layer l: into each block of sequences [0, n) that takes any rows, cnt[s] rows into sequence
 * s's slots from slot[s], out of src's rows from off[s] (0 when off is NULL), K rows then V
 * rows vs bytes on. */
static int rows_into_blocks(fg_engine *e, uint32_t l, uint32_t n, const uint32_t *cnt,
                            const uint32_t *slot, const uint8_t *src, const size_t *off,
                            size_t vs, fg_err *err)
{
    uint32_t nb = (n + e->gbs - 1) / e->gbs;
    int rc = FG_OK;
    for (uint32_t k = 0; rc == FG_OK && k < nb; k++) {
        uint32_t first = k * e->gbs, end = first + e->gbs < n ? first + e->gbs : n;
        int any = 0;
        for (uint32_t s = first; s < end; s++)
            any |= cnt[s] > 0;
        if (!any)
            continue;
        fg_pager_view v;
        if ((rc = fg_engine_acquire(e, fg_engine_kv_id(e, k, l), &v, err)))
            break;
        for (uint32_t s = first; rc == FG_OK && s < end; s++)
            if (cnt[s])
                rc = rows_copy_n(e, &v, s - first, slot[s], cnt[s],
                                 (uint8_t *)src + (off ? off[s] : 0) * e->plan.kv_row, vs, 1,
                                 err);
        rc = fg_engine_release(e, &v, 1, rc, err);
    }
    return rc;
}

int fg_engine_share_rows(fg_engine *e, const fg_share_plan *sp, uint32_t P1, uint32_t P2,
                         const uint32_t *lens, fg_err *err)
{
    size_t rb = e->plan.kv_row, total = 0;
    size_t *at = malloc(((size_t)sp->nd + 1) * sizeof *at);
    size_t *off = malloc(((size_t)sp->n + 1) * sizeof *off);
    uint32_t *slot = malloc(((size_t)sp->n + 1) * sizeof *slot);
    for (uint32_t d = 0; at && d < sp->nd; d++) {
        at[d] = total;
        total += sp->dlen[d];
    }
    for (uint32_t s = 0; at && off && slot && s < sp->n; s++) {
        off[s] = sp->c[s] ? at[sp->donor[s]] : 0;
        slot[s] = P2 - lens[s];
    }
    /* [K rows of all donors][V rows] */
    uint8_t *buf = at && off && slot ? malloc(total * 2 * rb + 1) : NULL;
    int rc = buf ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory (%zu shared KV rows)",
                                     total);
    uint32_t nb1 = (sp->nd + e->gbs - 1) / e->gbs;
    for (uint32_t l = 0; rc == FG_OK && l < e->hp.n_layers; l++) {
        for (uint32_t k = 0; rc == FG_OK && k < nb1; k++) { /* out of the donors' prefill */
            fg_pager_view v;
            if ((rc = fg_engine_acquire(e, fg_engine_kv_id(e, k, l), &v, err)))
                break;
            for (uint32_t d = k * e->gbs; rc == FG_OK && d < sp->nd && d < (k + 1) * e->gbs; d++)
                rc = rows_copy_n(e, &v, d % e->gbs, P1 - sp->dlen[d], sp->dlen[d],
                                 buf + at[d] * rb, total * rb, 0, err);
            rc = fg_engine_release(e, &v, 0, rc, err);
        }
        if (rc == FG_OK) /* into the windows' block */
            rc = rows_into_blocks(e, l, sp->n, sp->c, slot, buf, off, total * rb, err);
    }
    free(buf);
    free(at);
    free(off);
    free(slot);
    return rc;
}

/* ---- the held run (sched_int.h): rows kept from one scoring call to the next ---- */

int fg_engine_has_prefix(const fg_engine *e) { return e->prefix != NULL; }

int fg_engine_prefix_cached(fg_engine *e, const int32_t *ids, uint32_t n, uint32_t *got,
                            fg_err *err)
{
    *got = 0;
    if (!e->prefix || n < 2)
        return FG_OK;
    uint32_t G = fg_prefix_page_tokens(e->prefix), usable = (n - 1) / G, found = 0;
    fg_prefix_key *keys = malloc(((size_t)usable + 1) * sizeof *keys);
    if (!keys)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    fg_prefix_keys(e->prefix, ids, usable, keys);
    int rc = fg_prefix_probe(e->prefix, ids, keys, usable, &found, err);
    *got = rc == FG_OK ? found * G : 0;
    free(keys);
    return rc;
}

uint32_t fg_engine_held_match(const fg_engine *e, const int32_t *ids, uint32_t n)
{
    uint32_t i = 0, m = e->held.n < n ? e->held.n : n;
    while (i < m && e->held.ids[i] == ids[i])
        i++;
    return i;
}

/* Layer l's K rows of the held run (its V rows e->held.cap rows on). */
static uint8_t *held_rows(fg_engine *e, uint32_t l)
{
    return e->held.rows + (size_t)l * 2 * e->held.cap * e->plan.kv_row;
}

int fg_engine_held_load(fg_engine *e, const fg_gen_seq *seqs, uint32_t n, uint32_t P,
                        const uint32_t *r, fg_err *err)
{
    uint32_t *slot = malloc(((size_t)n + 1) * sizeof *slot);
    int rc = slot ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t s = 0; slot && s < n; s++)
        slot[s] = P - seqs[s].n_prompt;
    for (uint32_t l = 0; rc == FG_OK && l < e->hp.n_layers; l++)
        rc = rows_into_blocks(e, l, n, r, slot, held_rows(e, l),
                              NULL, (size_t)e->held.cap * e->plan.kv_row, err);
    free(slot);
    return rc;
}

int fg_engine_held_fits(const fg_engine *e, uint32_t m)
{
    uint64_t need = (uint64_t)m * (2 * e->plan.kv_row * e->hp.n_layers + sizeof *e->held.ids);
    return m <= e->held.cap || !e->plan.budget || e->plan.total_host + need <= e->plan.budget;
}

int fg_engine_held_keep(fg_engine *e, uint32_t s, uint32_t slot, const int32_t *ids,
                        uint32_t m, fg_err *err)
{
    size_t rb = e->plan.kv_row;
    e->held.n = 0; /* (until its rows are in) */
    if (!fg_engine_held_fits(e, m)) {
        free(e->held.rows); /* no room in the RAM budget beside the plan: nothing is held */
        free(e->held.ids);
        e->held.rows = NULL, e->held.ids = NULL, e->held.cap = 0;
        return FG_OK;
    }
    if (m > e->held.cap) {
        free(e->held.rows);
        free(e->held.ids);
        e->held.rows = malloc((size_t)m * 2 * rb * e->hp.n_layers);
        e->held.ids = malloc((size_t)m * sizeof *e->held.ids);
        e->held.cap = e->held.rows && e->held.ids ? m : 0;
        if (!e->held.cap)
            return fg_err_set(err, FG_ERR_NOMEM, "out of memory (%u held KV rows)", m);
    }
    int rc = FG_OK;
    for (uint32_t l = 0; rc == FG_OK && l < e->hp.n_layers; l++) {
        fg_pager_view v;
        if ((rc = fg_engine_acquire(e, fg_engine_kv_id(e, s / e->gbs, l), &v, err)))
            break;
        rc = rows_copy_n(e, &v, s % e->gbs, slot, m, held_rows(e, l),
                         (size_t)e->held.cap * rb, 0, err);
        rc = fg_engine_release(e, &v, 0, rc, err);
    }
    if (rc == FG_OK) {
        memcpy(e->held.ids, ids, (size_t)m * sizeof *ids);
        e->held.n = m;
    }
    return rc;
}
