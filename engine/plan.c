/* plan.c - the memory plan (see plan.h for its invariants).
 *
 * The block: gbs x ngb sequences (8 x 4 unless the policy fixes them), shrunk until the least a
 * block needs fits the budget: its buffers plus room to stream two spans of units, two KV chunks
 * and two activation chunks. The pool then gets what the budget leaves after the buffers (with
 * no budget: exactly what is homed in RAM plus the window, so data homed on disk really streams
 * from disk). Without --percent fractions, everything is homed in RAM when it fits beside the
 * window, else the weights go to disk, then the KV cache too, then the activations. What a
 * placement homes is counted as the pager will home it (its midpoint rule, place.c), and a
 * placement whose homed bytes and window exceed the budget is refused with the budget needed.
 */
#include <string.h>

#include "fg_bytes.h"
#include "fg_progress.h"
#include "plan.h"
#include "quant.h"

#define PREFETCH_AHEAD FG_PLAN_AHEAD

fg_policy fg_policy_default(void)
{
    fg_policy p;
    memset(&p, 0, sizeof p);
    p.sep_layer = 1;
    p.overlap = 1;
    p.cpu_attention = 1;
    return p;
}

uint32_t fg_plan_span(const fg_plan_model *m, const fg_policy *p, uint32_t u)
{
    uint32_t layer;
    return !p->sep_layer && fg_model_unit_kind(m->hp, u, &layer) == FG_UNIT_ATTN ? 2 : 1;
}

/* The SMALL floats of the embedding unit's span (kept for the engine's life) and of the
 * largest other span, and the stored bytes the largest span keeps resident. */
static void spans(const fg_plan_model *m, const fg_policy *p, uint64_t *keep, uint64_t *small,
                  uint64_t *resident)
{
    *keep = *small = *resident = 0;
    for (uint32_t u = 0; u < m->n_units; u++) {
        uint64_t f = 0, r = 0;
        uint32_t layer;
        for (uint32_t k = 0; k < fg_plan_span(m, p, u) && u + k < m->n_units; k++) {
            f += m->units[u + k].small_floats;
            r += m->units[u + k].resident + m->units[u + k].stream_chunk;
        }
        if (fg_model_unit_kind(m->hp, u, &layer) == FG_UNIT_EMBED)
            *keep += f;
        else
            *small = f > *small ? f : *small;
        *resident = r > *resident ? r : *resident;
    }
}

/* The CPU backend's copies of a Linear's input x [rows, k] (compute/backend_cpu.c), for k up to
 * the widest Linear input: one buffer for x packed for the 16-bit GEMM (rows rounded up to
 * FG_XPACK_MR, f32) or quantized to int8 (fg_quant_act: codes padded to max(G, 64) columns, and
 * three floats a group of G >= FG_FGT_GROUP_MIN; G up to FG_FGT_GROUP_MAX), whichever is larger,
 * plus the fused F16 kernel's aligned copy of x at m <= 48 rows. */
static uint64_t lin_scratch(const fg_hparams *hp, uint64_t rows)
{
    uint64_t k = hp->hidden > hp->embed_dim ? hp->hidden : hp->embed_dim;
    uint64_t qw = (uint64_t)hp->n_heads * hp->head_dim;
    k = k > qw ? k : qw;
    k = k > hp->ffn ? k : hp->ffn;
    uint64_t xp = (rows + FG_XPACK_MR - 1) / FG_XPACK_MR * FG_XPACK_MR * k * 4;
    uint64_t kp = (k + 63) / 64 * 64 + FG_FGT_GROUP_MAX;
    uint64_t act = rows * kp + 3 * 4 * rows * (kp / FG_FGT_GROUP_MIN + 1) + 3 * 64;
    return (xp > act ? xp : act) + (rows < 48 ? rows : 48) * k * 4 + 64;
}

/* Every buffer outside the pager for a block of gbs x ngb, and the host bytes they take. */
static void buffers(const fg_plan_model *m, const fg_policy *p, fg_plan *pl)
{
    const fg_hparams *hp = m->hp;
    uint64_t ctx = pl->max_ctx, bls = (uint64_t)pl->gbs * pl->ngb, h = hp->hidden;
    uint64_t tok = (uint64_t)pl->gbs * ctx > bls ? (uint64_t)pl->gbs * ctx : bls;
    uint64_t keep, small, resident;
    spans(m, p, &keep, &small, &resident);
    pl->logit_rows = bls > 16 ? (uint32_t)bls : 16;
    pl->small_keep = keep * 4;
    pl->small_f32 = (keep + small) * 4;
    pl->max_span = resident;
    pl->wdecode = m->max_chunk_floats * 4;
    pl->workspace = fg_model_ws_bytes(hp, (uint32_t)tok, pl->max_ctx);
    pl->head = (uint64_t)pl->logit_rows * (hp->vocab_size + h) * 4;
    pl->block = (uint64_t)pl->ngb * pl->gbs * ctx * 9 + bls * (h * 4 + 8);
    pl->sampler = (uint64_t)hp->vocab_size * 8;
    pl->lscratch = lin_scratch(hp, tok);
    pl->head_host = pl->head;
    pl->block_host = pl->block;
    pl->fixed = pl->small_f32 + pl->wdecode + pl->lscratch + pl->workspace + pl->head +
                pl->block + pl->sampler;
    if (p->gpu_budget) { /* engine/engine_dev.c: only these stay in RAM */
        pl->head_host = (uint64_t)pl->logit_rows * (hp->vocab_size + 1) * 4;
        pl->block_host = (uint64_t)pl->ngb * pl->gbs * ctx * 9 + bls * 8;
        pl->fixed = pl->head_host + pl->block_host + pl->sampler;
    }
}

static void chunks(const fg_plan_model *m, const fg_policy *p, fg_plan *pl)
{
    const fg_hparams *hp = m->hp;
    uint32_t width = fg_model_kv_width(hp);
    fg_codec q = fg_codec_quant(4, 64, 1);
    pl->kv_row = p->compress_cache ? fg_kv_row_bytes(&q, width) : (uint64_t)width * 4;
    pl->kv_chunk = fg_page_up(fg_model_kv_planes(hp) * (uint64_t)pl->gbs * pl->max_ctx *
                              pl->kv_row); /* (MLA: the latent rows once) */
    pl->act_chunk = fg_page_up((uint64_t)pl->gbs * pl->max_ctx * hp->hidden * 4);
}

static uint64_t least(const fg_plan *pl)
{
    return pl->fixed + 2 * pl->max_span + 2 * pl->kv_chunk + 2 * pl->act_chunk;
}

/* Shrink the block (what the policy leaves free, ngb first) until its least need fits. */
static void choose_block(const fg_plan_model *m, const fg_policy *p, uint64_t budget, fg_plan *pl)
{
    pl->gbs = p->gbs ? p->gbs : 8;
    pl->ngb = p->ngb ? p->ngb : 4;
    for (;;) {
        buffers(m, p, pl);
        chunks(m, p, pl);
        if (!budget || least(pl) <= budget || (uint64_t)pl->gbs * pl->ngb == 1 ||
            (p->gbs && p->ngb))
            return;
        if (!p->ngb && pl->ngb > 1)
            pl->ngb--;
        else if (!p->gbs && pl->gbs > 1)
            pl->gbs--;
        else
            return;
    }
}

/* The largest share x of the weights above cumulative share base whose homes (by the pager's
 * rule: a unit's chunks are whole) take at most `bytes` (bisection: homes grow with x). */
static double share_within(const fg_plan_model *m, double base, double most, uint64_t bytes)
{
    uint64_t below = fg_plan_homed_weights(m, base);
    double lo = 0, hi = most;
    if (fg_plan_homed_weights(m, base + hi) - below <= bytes)
        return hi;
    for (int i = 0; i < 40; i++) {
        double mid = (lo + hi) / 2;
        *(fg_plan_homed_weights(m, base + mid) - below <= bytes ? &lo : &hi) = mid;
    }
    return lo;
}

/* Default placement: everything in RAM when it fits (beside the streaming window); else the
 * activations in RAM while they fit, then the KV cache with them, and of the weights the share
 * the room left holds beside one more span (so the pager still prefetches FG_PLAN_AHEAD spans
 * ahead): the pager homes what every step reads first (its ranks), the rest streams from disk.
 * Homing beats the pool's LRU at holding weights: a sweep larger than the LRU's room evicts
 * each chunk before the next sweep uses it again. But for a mixture's experts while a step's
 * chosen ones fit the room beside what every step reads: then the LRU keeps them better.
 * Returns the bytes of weights RAM may home (UINT64_MAX: all of them). */
static uint64_t default_frac(const fg_plan_model *m, const fg_plan *pl, uint64_t kv,
                             uint64_t act, uint64_t host, fg_pager_policy *f)
{
    memset(f, 0, sizeof *f);
    uint64_t room = host > pl->window ? host - pl->window : 0;
    if (m->weights + kv + act <= room) {
        f->w[1] = f->c[1] = f->h[1] = 1.0;
        return UINT64_MAX;
    }
    f->c[kv + act <= room ? 1 : 2] = 1.0;
    f->h[act <= room ? 1 : 2] = 1.0;
    uint64_t used = (f->c[1] > 0 ? kv : 0) + (f->h[1] > 0 ? act : 0);
    uint64_t spare = room > used + pl->max_span ? room - used - pl->max_span : 0;
    /* a mixture's experts: none homed while the experts a step chooses fit the streaming room
     * left beside the rest (a small block chooses again many of the experts it chose a step
     * before, and the pool's LRU keeps those; a share homed for good would shrink that room) */
    uint64_t rb[FG_PLACE_RANKS];
    fg_plan_rank_bytes(m, rb);
    double chosen = fg_model_expert_share(m->hp, (double)pl->gbs * pl->ngb) * (double)rb[1];
    if (rb[1] && rb[0] <= spare && chosen + (double)pl->window <= (double)(host - used - rb[0]))
        spare = rb[0];
    f->w[1] = share_within(m, 0, 1, spare);
    f->w[2] = 1 - f->w[1];
    return spare;
}

int fg_plan_disk_cached(const fg_plan *pl)
{
    uint64_t streamed = pl->on_disk[0] + pl->on_disk[1] + pl->on_disk[2];
    uint64_t homed = pl->homed[0] + pl->homed[1] + pl->homed[2];
    return streamed > 0 && homed <= pl->pool && streamed <= pl->pool - homed;
}

void fg_plan_rank_bytes(const fg_plan_model *m, uint64_t bytes[FG_PLACE_RANKS])
{
    memset(bytes, 0, FG_PLACE_RANKS * sizeof *bytes);
    for (uint32_t k = 0; m->chunk && k < m->unit_first[m->n_units]; k++)
        bytes[m->chunk_rank ? m->chunk_rank[k] : 0] += m->chunk[k];
}

uint64_t fg_plan_homed_weights(const fg_plan_model *m, double w_ram)
{
    if (!m->chunk)
        return (uint64_t)((double)m->weights * w_ram);
    uint64_t bytes[FG_PLACE_RANKS], homed = 0;
    double thr[FG_PLACE_RANKS];
    fg_plan_rank_bytes(m, bytes);
    for (uint32_t r = 0; r < FG_PLACE_RANKS; r++)
        thr[r] = fg_place_threshold(bytes, r, w_ram);
    for (uint32_t u = 0; u < m->n_units; u++)
        for (uint32_t r = 0; r < FG_PLACE_RANKS; r++) {
            uint64_t total = 0, before = 0;
            if (!bytes[r])
                continue;
            for (uint32_t k = m->unit_first[u]; k < m->unit_first[u + 1]; k++)
                total += (m->chunk_rank ? m->chunk_rank[k] : 0) == r ? m->chunk[k] : 0;
            for (uint32_t k = m->unit_first[u]; total && k < m->unit_first[u + 1]; k++) {
                if ((m->chunk_rank ? m->chunk_rank[k] : 0) != r)
                    continue;
                homed += fg_place_tier(before, m->chunk[k], total, 0, thr[r]) != FG_TIER_DISK
                             ? m->chunk[k] : 0;
                before += m->chunk[k];
            }
        }
    return homed;
}

/* With a GPU and no fractions: as many weights in its pool as surely fit (the pager homes a
 * chunk by its midpoint, so each unit may take up to half its largest chunk beyond the
 * fraction; a stored chunk is at most the f32 decode room), then RAM the next share the
 * default rule's room holds (ram_bytes), the rest disk. */
static void default_gpu(const fg_plan_model *m, fg_plan *pl, uint64_t ram_bytes,
                        fg_pager_policy *f)
{
    double slack = (double)m->n_units * (double)pl->wdecode / 2;
    double g = ((double)pl->dev_pool - slack) / (double)(m->weights ? m->weights : 1);
    g = g < 0 ? 0 : g > 1 ? 1 : g;
    double rest = 1 - g; /* RAM's share: what it held without the GPU, now above the GPU's */
    double ram = ram_bytes == UINT64_MAX ? rest : share_within(m, g, rest, ram_bytes);
    f->w[0] = g;
    f->w[1] = ram;
    f->w[2] = rest - ram;
}

static uint64_t kv_layers(const fg_plan_model *m)
{
    return m->hp->n_layers - m->kv_layers_off;
}

/* What is homed on the device, in RAM and on disk, as the pager places it: weights by the
 * midpoint rule (DEVICE below g, HOST below g + c); each KV and activation chunk is a group of
 * its own, placed by its midpoint 1/2. */
static void homes(const fg_plan_model *m, fg_plan *pl)
{
    uint64_t total[3] = {m->weights, (uint64_t)pl->ngb * kv_layers(m) * pl->kv_chunk,
                         (uint64_t)pl->ngb * pl->act_chunk};
    const double *fr[3] = {pl->frac.w, pl->frac.c, pl->frac.h};
    for (int k = 0; k < 3; k++) {
        uint64_t dev, dev_ram; /* homed on the device; on the device or in RAM */
        if (k == 0) {
            dev = fg_plan_homed_weights(m, fr[0][0]);
            dev_ram = fg_plan_homed_weights(m, fr[0][0] + fr[0][1]);
        } else {
            dev = 0.5 < fr[k][0] ? total[k] : 0;
            dev_ram = 0.5 < fr[k][0] + fr[k][1] ? total[k] : 0;
        }
        pl->dev_homed[k] = dev;
        pl->homed[k] = dev_ram - dev;
        pl->on_disk[k] = total[k] - dev_ram;
    }
}

/* The device's share: the engine's device-resident buffers (the model workspace, the head's
 * rows and logits, the SMALL tensors and their row indices, the block's rows, positions and
 * validity: engine/engine_dev.c), a device backend's per-op staging (an activation chunk, a KV
 * chunk, two weight pieces), the rest the pager's pool. */
static int device(const fg_policy *p, fg_plan *pl, fg_err *err)
{
    if (!p->gpu_budget)
        return FG_OK;
    pl->dev_reserve = pl->workspace + pl->head + 2 * pl->small_f32 + pl->block + pl->act_chunk +
                      pl->kv_chunk + 2 * pl->wdecode;
    if (pl->dev_reserve + (1u << 20) > p->gpu_budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.0f MiB is too small: a device "
                          "backend keeps %.0f MiB of engine buffers and per-op staging for gbs "
                          "%u x ngb %u",
                          p->gpu_budget / FG_MIB, pl->dev_reserve / FG_MIB, pl->gbs, pl->ngb);
    pl->dev_pool = (p->gpu_budget - pl->dev_reserve) & ~(uint64_t)4095;
    return FG_OK;
}

int fg_plan_make(const fg_plan_model *m, const fg_policy *p, uint32_t max_ctx,
                 uint64_t ram_budget, fg_plan *pl, fg_err *err)
{
    memset(pl, 0, sizeof *pl);
    pl->max_ctx = max_ctx;
    pl->budget = ram_budget;
    choose_block(m, p, ram_budget, pl);
    pl->window = 2 * pl->max_span + 2 * pl->kv_chunk + 2 * pl->act_chunk;
    if (!ram_budget) /* room to prefetch PREFETCH_AHEAD spans ahead of the one computing */
        pl->window += (PREFETCH_AHEAD - 1) * pl->max_span;
    if (ram_budget && pl->fixed + pl->window > ram_budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB is too small: this model "
                          "needs %.0f MiB of buffers for gbs %u x ngb %u plus %.0f MiB to stream "
                          "weights, KV cache and activations (at least %.0f MiB)",
                          ram_budget / FG_MIB, pl->fixed / FG_MIB, pl->gbs, pl->ngb, pl->window / FG_MIB,
                          (pl->fixed + pl->window) / FG_MIB);
    uint64_t kv = (uint64_t)pl->ngb * kv_layers(m) * pl->kv_chunk;
    uint64_t act = (uint64_t)pl->ngb * pl->act_chunk;
    uint64_t host = ram_budget ? ram_budget - pl->fixed : m->weights + kv + act + pl->window;
    int rc = device(p, pl, err);
    if (rc)
        return rc;
    uint64_t ram_bytes = UINT64_MAX;
    if (p->have_fractions)
        pl->frac = p->frac;
    else
        ram_bytes = default_frac(m, pl, kv, act, host, &pl->frac);
    if (!p->have_fractions && p->gpu_budget)
        default_gpu(m, pl, ram_bytes, &pl->frac);
    if (!p->gpu_budget && (pl->frac.c[0] > 0 || pl->frac.h[0] > 0 || pl->frac.w[0] > 0))
        return fg_err_set(err, FG_ERR_PAGER_NO_TIER, "--percent puts weights, cache or "
                          "activations on a GPU, and this engine runs on the CPU (--backend "
                          "cuda or sim gives it a device)");
    homes(m, pl);
    uint64_t homed = pl->homed[0] + pl->homed[1] + pl->homed[2];
    uint64_t dev = pl->dev_homed[0] + pl->dev_homed[1] + pl->dev_homed[2];
    if (dev > pl->dev_pool)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.0f MiB is too small for this "
                          "placement: it homes %.0f MiB on the GPU beside %.0f MiB of per-op "
                          "staging (at least %.0f MiB, or lower --percent's GPU shares)",
                          p->gpu_budget / FG_MIB, dev / FG_MIB, pl->dev_reserve / FG_MIB,
                          (pl->dev_reserve + dev) / FG_MIB + 1);
    if (ram_budget && homed + pl->window > host)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB is too small for this "
                          "placement: it homes %.0f MiB in RAM (weights %.0f, KV cache %.0f, "
                          "activations %.0f) and streams through %.0f MiB, beside %.0f MiB of "
                          "buffers for gbs %u x ngb %u (at least %.0f MiB, or lower --percent's "
                          "RAM shares)", ram_budget / FG_MIB, homed / FG_MIB, pl->homed[0] / FG_MIB,
                          pl->homed[1] / FG_MIB, pl->homed[2] / FG_MIB, pl->window / FG_MIB, pl->fixed / FG_MIB,
                          pl->gbs, pl->ngb, (pl->fixed + homed + pl->window) / FG_MIB);
    /* no budget: the pool holds what is homed in RAM plus the window */
    pl->pool = ram_budget ? host : homed + pl->window;
    pl->total_host = pl->fixed + pl->pool;
    /* prefetch deeper only where the pool's streaming room holds every span in flight: with
     * less, prefetching further would evict chunks the current span still uses */
    double room = (double)pl->pool - (double)homed - 2.0 * (double)(pl->kv_chunk + pl->act_chunk);
    pl->ahead = room >= (double)(1 + PREFETCH_AHEAD) * (double)pl->max_span ? PREFETCH_AHEAD : 1;
    return FG_OK;
}

void fg_plan_print(const fg_plan *pl, FILE *f)
{
    char b[32];
    static const char *what[3] = {"weights", "KV cache", "activations"};
    uint64_t homed = pl->homed[0] + pl->homed[1] + pl->homed[2];
    const double *fr[3] = {pl->frac.w, pl->frac.c, pl->frac.h};
    fprintf(f, "plan: block %u x %u (gbs x ngb), context %u, prefetch %u ahead\n", pl->gbs,
            pl->ngb, pl->max_ctx, pl->ahead);
    for (int k = 0; k < 3; k++) {
        char d[32];
        if (pl->dev_pool) {
            char g[32];
            fprintf(f, "  %-12s GPU %5.1f%% %10s", what[k], 100 * fr[k][0],
                    fg_fmt_bytes((double)pl->dev_homed[k], g, sizeof g));
        }
        if (!pl->dev_pool)
            fprintf(f, "  %-12s", what[k]);
        fprintf(f, " RAM %5.1f%% %10s   disk %5.1f%% %10s\n", 100 * fr[k][1],
                fg_fmt_bytes((double)pl->homed[k], b, sizeof b), 100 * fr[k][2],
                fg_fmt_bytes((double)pl->on_disk[k], d, sizeof d));
    }
    if (pl->dev_pool) {
        char g[32];
        fprintf(f, "  GPU: pager pool %s, ", fg_fmt_bytes((double)pl->dev_pool, g, sizeof g));
        fprintf(f, "engine buffers and per-op staging %s\n",
                fg_fmt_bytes((double)pl->dev_reserve, g, sizeof g));
    }
    int dev = pl->dev_pool > 0; /* the engine's buffers but their host sides are on the GPU */
    const struct { const char *name; uint64_t v; int gpu; } rows[] = {
        {"small weights (f32)", pl->small_f32, dev}, {"weight decode", pl->wdecode, dev},
        {"linear inputs", pl->lscratch, dev}, {"workspace", pl->workspace, dev},
        {"logits", pl->head_host, 0}, {"block state", pl->block_host, 0},
        {"sampler", pl->sampler, 0}, {"pager: homed", homed, 0},
        {"pager: streaming", pl->pool > homed ? pl->pool - homed : 0, 0},
        {"total RAM", pl->total_host, 0}, {"budget", pl->budget, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (rows[i].gpu) {
            fprintf(f, "  %-20s %10s\n", rows[i].name, "on the GPU");
            continue;
        }
        fprintf(f, "  %-20s %10s (%llu bytes)\n", rows[i].name,
                rows[i].v || i + 1 < sizeof rows / sizeof rows[0]
                    ? fg_fmt_bytes((double)rows[i].v, b, sizeof b) : "none",
                (unsigned long long)rows[i].v);
    }
}
