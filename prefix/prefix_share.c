/* prefix_share.c - which prefixes of a job's prompts to compute once, before its blocks
 * (fg_prefix_shared in prefix.h).
 *
 * Two prompts share page j exactly when their chain keys of page j are equal (the key covers
 * every token up to the page's end), so "shared" is closed under taking prefixes: the pages
 * two or more prompts hold form a forest whose leaves are the deepest shared prefixes. Only the
 * pages a lookup can use count ((len - 1) / page_tokens of them: the last prompt token is
 * always computed). Each leaf not already cached whole becomes one span; computing the spans
 * as prompts of their own (shallowest first) saves their pages, and every prompt of the job
 * then loads them, whichever block it falls in. Cost: O(total pages log total pages).
 */
#include <stdlib.h>
#include <string.h>

#include "prefix.h"

typedef struct tup {
    fg_prefix_key key;
    size_t prompt;
    uint32_t page;
} tup;

static int cmp_key(const fg_prefix_key *a, const fg_prefix_key *b)
{
    if (a->job != b->job)
        return a->job < b->job ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int by_key(const void *a, const void *b)
{
    const tup *x = a, *y = b;
    int c = cmp_key(&x->key, &y->key);
    return c ? c : x->prompt < y->prompt ? -1 : x->prompt > y->prompt;
}

static int by_depth(const void *a, const void *b)
{
    const fg_prefix_span *x = a, *y = b;
    if (x->n_tokens != y->n_tokens)
        return x->n_tokens < y->n_tokens ? -1 : 1;
    return x->prompt < y->prompt ? -1 : x->prompt > y->prompt;
}

/* keys[i] (n_pages[i] each) and every (key, prompt, page) in key order. */
static int all_keys(fg_prefix *p, const int32_t *const *prompts, const uint32_t *lens, size_t n,
                    fg_prefix_key **keys, uint32_t *n_pages, tup **out, size_t *n_out)
{
    uint32_t G = fg_prefix_page_tokens(p);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        n_pages[i] = lens[i] ? (lens[i] - 1) / G : 0;
        total += n_pages[i];
        if (!(keys[i] = malloc(((size_t)n_pages[i] + 1) * sizeof *keys[i])))
            return FG_ERR_NOMEM;
        fg_prefix_keys(p, prompts[i], n_pages[i], keys[i]);
    }
    tup *t = malloc((total + 1) * sizeof *t);
    if (!t)
        return FG_ERR_NOMEM;
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n_pages[i]; j++)
            t[w++] = (tup){keys[i][j], i, j};
    qsort(t, w, sizeof *t, by_key);
    *out = t;
    *n_out = w;
    return FG_OK;
}

/* depth[i]: leading pages of prompt i that another prompt has too. */
static void shared_depths(const tup *t, size_t nt, uint32_t *depth)
{
    for (size_t a = 0, b; a < nt; a = b) {
        for (b = a + 1; b < nt && !cmp_key(&t[a].key, &t[b].key); b++)
            ;
        if (b - a < 2)
            continue;
        for (size_t q = a; q < b; q++)
            if (t[q].page + 1 > depth[t[q].prompt])
                depth[t[q].prompt] = t[q].page + 1;
    }
}

/* One span per distinct deepest key, not cached whole. */
static int leaves(fg_prefix *p, const int32_t *const *prompts, fg_prefix_key **keys,
                  const uint32_t *depth, size_t n, fg_prefix_span *out, size_t *n_out,
                  fg_err *err)
{
    uint32_t G = fg_prefix_page_tokens(p);
    tup *d = malloc((n + 1) * sizeof *d);
    if (!d)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    size_t m = 0, w = 0;
    for (size_t i = 0; i < n; i++)
        if (depth[i])
            d[m++] = (tup){keys[i][depth[i] - 1], i, depth[i]};
    qsort(d, m, sizeof *d, by_key);
    int rc = FG_OK;
    for (size_t q = 0; rc == FG_OK && q < m; q++) {
        if (q && !cmp_key(&d[q].key, &d[q - 1].key))
            continue;
        uint32_t found;
        rc = fg_prefix_probe(p, prompts[d[q].prompt], keys[d[q].prompt], d[q].page, &found, err);
        if (rc == FG_OK && found < d[q].page)
            out[w++] = (fg_prefix_span){d[q].prompt, d[q].page * G};
    }
    free(d);
    qsort(out, w, sizeof *out, by_depth);
    *n_out = w;
    return rc;
}

int fg_prefix_shared(fg_prefix *p, const int32_t *const *prompts, const uint32_t *lens, size_t n,
                     fg_prefix_span **out, size_t *n_out, fg_err *err)
{
    *out = NULL;
    *n_out = 0;
    fg_prefix_key **keys = calloc(n + 1, sizeof *keys);
    uint32_t *n_pages = calloc(n + 1, sizeof *n_pages), *depth = calloc(n + 1, sizeof *depth);
    fg_prefix_span *spans = malloc((n + 1) * sizeof *spans);
    tup *t = NULL;
    size_t nt = 0;
    int rc = keys && n_pages && depth && spans ? all_keys(p, prompts, lens, n, keys, n_pages, &t, &nt)
                                               : FG_ERR_NOMEM;
    if (rc)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK) {
        shared_depths(t, nt, depth);
        rc = leaves(p, prompts, keys, depth, n, spans, n_out, err);
    }
    for (size_t i = 0; keys && i < n; i++)
        free(keys[i]);
    free(keys);
    free(n_pages);
    free(depth);
    free(t);
    if (rc == FG_OK)
        *out = spans;
    else
        free(spans);
    return rc;
}
