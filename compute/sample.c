/* sample.c - see sample.h. Allocation-free per call: the scratch holds a probability array and
 * an index array sized for the vocabulary once. Top-k/top-p sort only the candidates they need
 * (a partial selection for top-k; a full sort of the survivors for top-p). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

struct fg_sample_scratch {
    uint32_t n;
    float *p;      /* [n] */
    uint32_t *idx; /* [n] */
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
    return FG_OK;
}

int fg_sample_scratch_create(uint32_t n, fg_sample_scratch **out, fg_err *err)
{
    fg_sample_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->n = n;
        s->p = malloc((size_t)n * sizeof *s->p);
        s->idx = malloc((size_t)n * sizeof *s->idx);
    }
    if (!s || !s->p || !s->idx) {
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

int32_t fg_sample(const float *logits, uint32_t n, const fg_sample_params *p, fg_rng *rng,
                  fg_sample_scratch *s)
{
    if (p->temperature == 0.0f || n == 1)
        return argmax(logits, n);
    float mx = logits[argmax(logits, n)];
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        s->p[i] = expf((logits[i] - mx) / p->temperature);
        s->idx[i] = i;
        sum += s->p[i];
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
    sum = 0.0;
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

double fg_log_prob(const float *logits, uint32_t n, int32_t id)
{
    double mx = logits[argmax(logits, n)], sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    return (double)logits[id] - mx - log(sum);
}
