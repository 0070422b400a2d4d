/* sample.c - see sample.h. Allocation-free per call: the scratch holds a probability array, an
 * index array, the penalized logits and the history's counts, sized for the vocabulary once.
 * Top-k/top-p sort only the candidates they need (a partial selection for top-k; a full sort
 * of the survivors for top-p). The penalties touch only the tokens of the history (counts
 * set and cleared over it), so a call costs O(vocab + history). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

struct fg_sample_scratch {
    uint32_t n;
    float *p;      /* [n] */
    uint32_t *idx; /* [n] */
    float *lg;     /* [n] the penalized logits */
    uint32_t *cnt; /* [n] the history's counts (all zero between calls) */
};

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fg_rng_seed(fg_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&x);
}

static uint64_t next(fg_rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double fg_rng_uniform(fg_rng *r)
{
    return (double)(next(r) >> 11) * (1.0 / 9007199254740992.0);
}

int fg_sample_check(const fg_sample_params *p, fg_err *err)
{
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--temperature %g: must be >= 0 (0 = greedy)",
                          (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--top-p %g: must be in (0, 1]",
                          (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--min-p %g: must be in [0, 1] (0 = off)",
                          (double)p->min_p);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--presence-penalty %g: must be in [-2, 2]",
                          (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--frequency-penalty %g: must be in [-2, 2]",
                          (double)p->frequency_penalty);
    if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--repetition-penalty %g: must be > 0 "
                          "(1 = off)", (double)p->repetition_penalty);
    return FG_OK;
}

int fg_sample_uses_hist(const fg_sample_params *p)
{
    return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
           (p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f);
}

int fg_sample_scratch_create(uint32_t n, fg_sample_scratch **out, fg_err *err)
{
    fg_sample_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->n = n;
        s->p = malloc((size_t)n * sizeof *s->p);
        s->idx = malloc((size_t)n * sizeof *s->idx);
        s->lg = malloc((size_t)n * sizeof *s->lg);
        s->cnt = calloc(n, sizeof *s->cnt);
    }
    if (!s || !s->p || !s->idx || !s->lg || !s->cnt) {
        fg_sample_scratch_free(s);
        return fg_err_set(err, FG_ERR_NOMEM, "sampler: out of memory for %u tokens", n);
    }
    *out = s;
    return FG_OK;
}

void fg_sample_scratch_free(fg_sample_scratch *s)
{
    if (!s)
        return;
    free(s->p);
    free(s->idx);
    free(s->lg);
    free(s->cnt);
    free(s);
}

static int32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

static int by_prob_desc(const void *a, const void *b, void *ctx)
{
    const float *p = ctx;
    float x = p[*(const uint32_t *)a], y = p[*(const uint32_t *)b];
    if (x != y)
        return x > y ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Move the k largest of p[idx[0..m)] to the front by selection, O(m k): fine for the k of
 * practice (tens); returns the new candidate count. */
static uint32_t keep_top_k(const float *p, uint32_t *idx, uint32_t m, uint32_t k)
{
    if (k >= m)
        return m;
    for (uint32_t i = 0; i < k; i++) { /* selection of the k best, O(m k) */
        uint32_t best = i;
        for (uint32_t j = i + 1; j < m; j++)
            if (p[idx[j]] > p[idx[best]] || (p[idx[j]] == p[idx[best]] && idx[j] < idx[best]))
                best = j;
        uint32_t t = idx[i];
        idx[i] = idx[best];
        idx[best] = t;
    }
    return k;
}

/* Count the tokens of ids[0..n) that are in the vocabulary into s->cnt. */
static void count(fg_sample_scratch *s, const int32_t *ids, uint32_t n, int add)
{
    for (uint32_t i = 0; ids && i < n; i++)
        if (ids[i] >= 0 && (uint32_t)ids[i] < s->n)
            s->cnt[ids[i]] = add ? s->cnt[ids[i]] + 1 : 0;
}

/* The logits after the penalties: logits itself when none applies, else s->lg. */
static const float *penalize(const float *logits, uint32_t n, const fg_sample_params *p,
                             const fg_sample_hist *h, fg_sample_scratch *s)
{
    if (!h || !fg_sample_uses_hist(p))
        return logits;
    memcpy(s->lg, logits, (size_t)n * sizeof *logits);
    float rp = p->repetition_penalty;
    if (rp != 0.0f && rp != 1.0f) { /* once per token of prompt + output: count marks it */
        const int32_t *v[2] = {h->prompt, h->out};
        uint32_t m[2] = {h->n_prompt, h->n_out};
        for (int k = 0; k < 2; k++)
            for (uint32_t i = 0; v[k] && i < m[k]; i++) {
                int32_t t = v[k][i];
                if (t < 0 || (uint32_t)t >= n || s->cnt[t])
                    continue;
                s->cnt[t] = 1;
                s->lg[t] = s->lg[t] < 0 ? s->lg[t] * rp : s->lg[t] / rp;
            }
        count(s, h->prompt, h->n_prompt, 0);
        count(s, h->out, h->n_out, 0);
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        count(s, h->out, h->n_out, 1);
        for (uint32_t i = 0; i < h->n_out; i++) {
            int32_t t = h->out[i];
            if (t < 0 || (uint32_t)t >= n || !s->cnt[t])
                continue;
            s->lg[t] -= p->frequency_penalty * (float)s->cnt[t] + p->presence_penalty;
            s->cnt[t] = 0; /* applied once */
        }
    }
    return s->lg;
}

/* The candidates the warpers keep: s->idx[0..m) with unnormalized probabilities in s->p. */
static uint32_t warp(const float *lg, uint32_t n, const fg_sample_params *p,
                     fg_sample_scratch *s)
{
    float mx = lg[argmax(lg, n)];
    for (uint32_t i = 0; i < n; i++) {
        s->p[i] = expf((lg[i] - mx) / p->temperature);
        s->idx[i] = i;
    }
    uint32_t m = n;
    if (p->top_k)
        m = keep_top_k(s->p, s->idx, m, p->top_k);
    if (p->top_p < 1.0f) {
        qsort_r(s->idx, m, sizeof *s->idx, by_prob_desc, s->p);
        double total = 0.0, cum = 0.0;
        for (uint32_t i = 0; i < m; i++)
            total += s->p[s->idx[i]];
        uint32_t keep = 0;
        while (keep < m && (keep == 0 || cum < p->top_p * total))
            cum += s->p[s->idx[keep++]];
        m = keep;
    }
    if (p->min_p > 0.0f) { /* relative to the most likely survivor: normalizing cancels */
        float top = 0.0f;
        for (uint32_t i = 0; i < m; i++)
            top = s->p[s->idx[i]] > top ? s->p[s->idx[i]] : top;
        uint32_t keep = 0;
        for (uint32_t i = 0; i < m; i++)
            if (s->p[s->idx[i]] >= p->min_p * top)
                s->idx[keep++] = s->idx[i];
        m = keep;
    }
    return m;
}

int32_t fg_sample_hist_pick(const float *logits, uint32_t n, const fg_sample_params *p,
                            const fg_sample_hist *h, fg_rng *rng, fg_sample_scratch *s)
{
    const float *lg = penalize(logits, n, p, h, s);
    if (p->temperature == 0.0f || n == 1)
        return argmax(lg, n);
    uint32_t m = warp(lg, n, p, s);
    double sum = 0.0;
    for (uint32_t i = 0; i < m; i++)
        sum += s->p[s->idx[i]];
    double u = fg_rng_uniform(rng) * sum, acc = 0.0;
    for (uint32_t i = 0; i < m; i++) {
        acc += s->p[s->idx[i]];
        if (u < acc)
            return (int32_t)s->idx[i];
    }
    return (int32_t)s->idx[m - 1];
}

int32_t fg_sample(const float *logits, uint32_t n, const fg_sample_params *p, fg_rng *rng,
                  fg_sample_scratch *s)
{
    return fg_sample_hist_pick(logits, n, p, NULL, rng, s);
}

void fg_sample_probs(const float *logits, uint32_t n, const fg_sample_params *p,
                     const fg_sample_hist *h, fg_sample_scratch *s, double *probs)
{
    const float *lg = penalize(logits, n, p, h, s);
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (p->temperature == 0.0f || n == 1) {
        probs[argmax(lg, n)] = 1.0;
        return;
    }
    uint32_t m = warp(lg, n, p, s);
    double sum = 0.0;
    for (uint32_t i = 0; i < m; i++)
        sum += s->p[s->idx[i]];
    for (uint32_t i = 0; i < m; i++)
        probs[s->idx[i]] = s->p[s->idx[i]] / sum;
}

double fg_log_prob(const float *logits, uint32_t n, int32_t id)
{
    double mx = logits[argmax(logits, n)], sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    return (double)logits[id] - mx - log(sum);
}
