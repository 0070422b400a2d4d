/* search.c - the cost model and the policy search (policy_search.h).
 *
 * The cost model is the FlexGen paper's (Appendix A.3) adapted to what this engine does
 * (engine/schedule.c). A block is n = gbs x ngb sequences, P prompt tokens, G new tokens: one
 * prefill step then G - 1 decode steps, each sweeping the units once. Rates come from the
 * calibration (calib.c).
 *  - compute, prefill: batch by batch, every Linear at M = gbs * P rows (F_lin FLOPs a token at
 *    the GEMM rate for that M, measured on f16 pieces: decoding included; a q4 store adds what
 *    its decoder is slower), causal attention over P(P+1)/2 query-key pairs per sequence and
 *    layer (at the width it attends: an MLA model's expanded heads when its prefill expands,
 *    fg_model_mla_expands); the LM head once at M = n rows;
 *  - compute, decode step: every Linear and the head once over the whole block (M = n rows),
 *    attention of each sequence over the mean context P + G/2 (the 4-bit cache's rate when
 *    compressed, never below the f32 one: its path decodes to f32 first);
 *  - I/O: the prefill reads every weight once (the pool starts empty); a decode step reads the
 *    weight bytes homed on disk once (a span's weights serve every batch; of them, not a
 *    mixture's unchosen experts nor embedding rows no token gathers, which the pager's ranks
 *    put on disk first: decode_weight_read) and reads and writes
 *    back each (batch, layer) KV chunk homed on disk; the prefill writes the cache homed on disk
 *    (fresh chunks: nothing read) and each activation chunk once (used by every unit, the LRU
 *    keeps it). When the pool's streaming room holds everything homed on disk, nothing is read
 *    again after the prefill (the LRU keeps it). Predicted bytes are checked against the
 *    pager's counters (tests/test_policy.c). A mixture's experts are read (and, on a device,
 *    staged) only where chosen: of their bytes a step reads the share its tokens are expected
 *    to choose under uniform routing (fg_model_expert_share), or all of them when the engine
 *    prefetches them with their layer (engine/policy.h fg_expert_paging); a q4 model's
 *    decode term counts the chosen experts' values alone.
 * A step takes writes + max(compute, reads) + (1 - phi) min(compute, reads): write-backs block
 * the computing thread (the pager writes a dirty chunk when it evicts it) except the KV
 * cache's, which the engine writes behind (counted with the reads: see behind); reads overlap
 * compute by the calibrated share phi, when the plan prefetches FG_PLAN_AHEAD spans ahead; with one
 * span ahead (homed data fills the pool, leaving room for two spans only) or without
 * --overlap, phi = 0 (measured: reading and computing then add up). Memory: the plan
 * (fg_plan_make) gives the fixed buffers, the streaming window and the totals of weights, KV
 * cache and activations; the budget constraint is linear in the fractions: fixed + window +
 * W wc + KV cc + ACT hc <= budget (less one more span in the overlapping regime).
 *
 * With a device backend (job->dev: --backend cuda|sim, the device measured by calib_dev.c)
 * every op computes on the device and the model adds the GPU tier (FlexGen's own cost model has
 * it; this one prices what this engine's device path moves, see step_prefill): compute at the
 * device's rates (attention on the CPU under --cpu-cache-compute with the cache in host
 * memory), and over the link what is not homed on the GPU, op by op: Linear pieces at each call
 * (uploads overlap the multiplies by the measured share phi_d), SMALL tensors at each unit
 * load, the chunks a gather touches, a host cache's rows, host activations' rows; what is homed
 * on the GPU goes up once. A step's device side E = max(lin, upload) + (1 - phi_d) min(lin,
 * upload) + the rest, itself the compute of the step time above (disk reads overlap it), and
 * the GPU's memory is a second linear constraint: W wg + KV cg + ACT hg <= the plan's device
 * pool. Predicted link bytes are checked against the sim backend's counters
 * (tests/test_policy.c).
 *
 * The search enumerates blocks (gbs, ngb), the 4-bit cache on or off, the two prefetch
 * regimes (room kept for FG_PLAN_AHEAD spans, overlapping; or the pool filled, not) and,
 * because the pager homes each KV chunk and each activation chunk whole (one chunk per
 * placement group: a fraction places it in RAM when above 1/2), the cache's and activations'
 * tier (RAM or disk; the GPU too with a device); for each, one LP over the nine fractions (the
 * GPU's fixed at 0 without a device), the two device sides and the two step times (each max
 * linearized as two rows) is solved with GLPK. The weights' fractions are then checked with the
 * pager's own midpoint rule (a unit's chunks are indivisible) and lowered until the real bytes
 * fit (what leaves the GPU goes to RAM), and fg_plan_make must accept the result. The fastest per
 * token wins (within 2%, the one with fewer batches; a 4-bit cache, which changes the numbers,
 * only when nothing fits without it or it is 5% faster).
 * Weights are searched in the store's own codec: the search never quantizes at load.
 *
 * The bound (fg_policy_bound) reuses the terms: each phase's Linear FLOPs at the GEMM rate
 * alone, its link bytes with the weights off the GPU once a sweep, its disk bytes, the greatest
 * of the three times. Every term is one the prediction adds or maxes with more, so it is never
 * above the prediction (tests/test_policy.c).
 */
#include <math.h>
#include <string.h>

#include "fg_bytes.h"
#include "fg_progress.h"
#include "policy_search.h"


/* Rates and sizes shared by the terms. */
typedef struct terms {
    double n, gbs, ngb, P, G, L;
    double f_lin, f_head, qw;
    double qw_att;       /* query width attention costs (fg_model_attn_width x n_heads): qw, or
                            an MLA model's absorbed heads with the latent alone as values */
    double qw_pre;       /* query width the prefill attends at: qw, or an MLA model's expanded
                            heads' (fg_model_mla_expands: n_heads x (qk_nope + qk_rope + v) / 2,
                            keys and values of their own widths, where qw is the absorbed
                            head's kv_lora_rank + qk_rope) */
    double dec_s;        /* extra seconds to decode every LINEAR/STREAM weight once */
    double dec_pre, dec_dec; /* ... those a prefill batch, a decode step decodes (a mixture's
                                chosen experts) */
    int rate;            /* the calibration's GEMM table Linear layers are priced at
                            (FG_CALIB_*; INT8: the int8 kernels, no decode to f32) */
    double attn;         /* seconds per query x key x query width (the CPU's) */
    double kv_total, act_total, weights, n_units;
    double experts;      /* of weights, a mixture's stacked experts */
    double xr_pre, xr_dec; /* the share of them the engine reads off disk in the prefill, in a
                              decode step (its prefetch rule: engine.c, policy.h) */
    double xs_pre, xs_dec; /* ... and a Linear call stages: the chosen ones (a prefill batch's,
                              the decode step's) */
    fg_sweep_bytes sweep; /* the weights' bytes a device backend uploads from host memory */
    double wread_dec;    /* weight bytes a decode step reads per weight byte (x[0] = the share
                            homed on disk): what ranks home last is what a step reads least */
    double rd, wr;       /* seconds per byte read / written */
    double phi;          /* share of the shorter of reading and computing hidden (overlap) */
    int cached;          /* the streaming room holds everything homed on disk: decode reads none */
    int prefetch;        /* --overlap: the pager prefetches spans ahead, so what is homed on the
                            GPU uploads (asynchronously) while the spans before it compute */
    /* a device backend (dev non-NULL) */
    const fg_calib_dev *dev;
    double up, down;     /* link seconds per byte */
    double dev_attn;     /* the device's attention: seconds per query x key x query width */
    double dev_attn_pre; /* the same in a prefill (many queries a sequence) */
    double kv_tok;       /* bytes of one token's K and V rows in every layer */
    double act_row, q_row; /* bytes of one activation row (hidden f32), one query row (f32) */
    int cpu_attn, post_norm, learned_pos;
} terms;

/* Seconds per weight value decoded beyond what the GEMM rate holds (it was measured on f16
 * pieces): q4 minus f16 when slower; f32 and f16 nothing. */
static double decode_extra(const fg_calib *c, int codec)
{
    if (codec != FG_CODEC_Q4 && codec != FG_CODEC_Q8)
        return 0;
    double d = 1.0 / c->dec_q4 - 1.0 / c->dec_f16;
    return d > 0 ? d : 0;
}

/* The share of a mixture's experts homed on disk a step of `tokens` tokens reads: all when
 * the engine prefetches them with their layer (--experts all, or most expected chosen), else
 * the chosen ones (uniform routing: a real router's skew reads fewer). */
static double read_share(const fg_hparams *hp, const fg_policy *p, double tokens)
{
    double s = fg_model_expert_share(hp, tokens);
    return p->experts == FG_EXPERTS_ALL || s >= FG_EXPERTS_WHOLE ? 1 : s;
}

/* The weight bytes a decode step reads off disk, per weight byte (multiplied by the share homed
 * on disk, x[0]): every byte homed there but a mixture's unchosen experts and an embedding's
 * rows no token of the step gathers. Placement ranks (pager/place.c) home the experts after
 * what every step reads and the gathered rows last, so which bytes are on disk is the plan's
 * placement (fg_policy_sweep_bytes at the weights' GPU + RAM fraction); without a tensor table
 * or with nothing on disk, the share as if each kind of bytes were on disk alike. */
static double decode_weight_read(const fg_policy_model *m, const fg_plan *pl,
                                 const fg_policy *p, const terms *t)
{
    double uniform = t->weights - t->experts * (1 - t->xr_dec);
    if (!m->w.t || pl->on_disk[0] == 0 || t->weights <= 0)
        return uniform;
    fg_sweep_bytes sb;
    fg_policy_sweep_bytes(m, p->frac.w[0] + p->frac.w[1], &sb);
    double rows = sb.gather_chunks ? t->n / sb.gather_chunks : 1;
    double unread = sb.experts * (1 - t->xr_dec) + sb.gather * (1 - (rows < 1 ? rows : 1));
    double on_disk = (double)pl->on_disk[0], read = on_disk - unread;
    return (read > 0 ? read : 0) * t->weights / on_disk;
}

/* Reading overlaps computing by the calibrated share only when the pager prefetches
 * FG_PLAN_AHEAD spans ahead (the plan's streaming room holds them): prefetching one span ahead,
 * what is left when homed data fills the pool, measured no overlap at all (opt-1.3b, weights
 * 40% homed under half their size: a decode step took the sum of reading and computing). A
 * spare span beyond the plan's threshold was tried and measured no better (opt-1.3b, 83.7%
 * against 85% and 87.8% of the weights homed under a budget of their size: all within noise). */
static double overlap_share(const fg_calib *c, const fg_plan *pl, const fg_policy *p)
{
    return p->overlap && pl->ahead >= FG_PLAN_AHEAD ? c->overlap : 0;
}

static double kind_total(const fg_plan *pl, int k)
{
    return (double)pl->dev_homed[k] + (double)pl->homed[k] + (double)pl->on_disk[k];
}

static void terms_of(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                     const fg_policy *p, const fg_policy_job *job, terms *t)
{
    const fg_hparams *hp = &m->hp;
    memset(t, 0, sizeof *t);
    /* a block with fewer sequences than room computes only those (whole batches first) */
    double n = (double)pl->gbs * pl->ngb;
    n = job->max_seqs && job->max_seqs < n ? job->max_seqs : n;
    t->gbs = pl->gbs < n ? pl->gbs : n, t->ngb = ceil(n / t->gbs), t->n = n;
    t->P = job->prompt_len ? job->prompt_len : 1;
    t->G = job->gen_len ? job->gen_len : 1;
    t->L = hp->n_layers;
    t->f_head = 2.0 * hp->vocab_size * hp->embed_dim;
    t->f_lin = fg_model_flops_per_token(hp) - t->f_head;
    t->qw = (double)hp->n_heads * hp->head_dim;
    /* the engine's cache codec (engine.c: f32, or 4-bit groups of 64 along the row) */
    fg_codec cache = p->compress_cache ? fg_codec_quant(4, 64, 1) : fg_codec_float(FG_CODEC_F32);
    t->qw_att = hp->n_heads * fg_model_attn_width(hp, &cache);
    t->qw_pre = fg_model_mla_expands(hp, cache.id, (uint32_t)t->P, 0)
                    ? hp->n_heads * (hp->qk_nope_dim + hp->qk_rope_dim + hp->v_head_dim) / 2.0
                    : t->qw_att;
    t->rate = job->int8 && m->q4_int8 ? FG_CALIB_INT8
              : job->bf16 && (m->codec == FG_CODEC_F16 || m->codec == FG_CODEC_BF16)
                  ? FG_CALIB_BF16
                  : FG_CALIB_F32;
    t->dec_s = t->rate == FG_CALIB_INT8 ? 0 : (double)m->linear_floats * decode_extra(c, m->codec);
    /* the 4-bit path decodes the cache to f32 and runs the same attention: never faster (a
     * lower figure is noise of the shared machine) */
    t->attn = p->compress_cache && c->attn_q4_s > c->attn_s ? c->attn_q4_s : c->attn_s;
    t->kv_total = kind_total(pl, 1);
    t->act_total = kind_total(pl, 2);
    t->weights = (double)m->pm.weights;
    t->experts = (double)m->experts;
    t->xs_pre = fg_model_expert_share(hp, t->gbs * t->P);
    t->xs_dec = fg_model_expert_share(hp, t->n);
    t->xr_pre = read_share(hp, p, t->n * t->P);
    t->xr_dec = read_share(hp, p, t->n);
    /* the chosen experts are decoded */
    double per = t->rate == FG_CALIB_INT8 ? 0 : decode_extra(c, m->codec);
    t->dec_pre = t->dec_s - (double)m->expert_floats * (1 - t->xs_pre) * per;
    t->dec_dec = t->dec_s - (double)m->expert_floats * (1 - t->xs_dec) * per;
    t->n_units = m->pm.n_units;
    t->sweep = m->sweep;
    t->wread_dec = decode_weight_read(m, pl, p, t);
    t->rd = 1.0 / c->disk_read;
    t->wr = 1.0 / c->disk_write;
    t->phi = overlap_share(c, pl, p);
    t->prefetch = p->overlap;
    t->cached = fg_plan_disk_cached(pl);
    if ((t->dev = job->dev)) {
        t->up = 1.0 / job->dev->up;
        t->down = 1.0 / job->dev->down;
        t->dev_attn = p->compress_cache ? job->dev->attn_q4_s : job->dev->attn_s;
        t->dev_attn_pre = p->compress_cache ? job->dev->attn_pre_q4_s : job->dev->attn_pre_s;
        if (t->dev_attn_pre <= 0)
            t->dev_attn_pre = t->dev_attn;
        t->dec_s = t->dec_pre = t->dec_dec = 0; /* measured on the run's codec */
        t->kv_tok = fg_model_kv_planes(hp) * (double)pl->kv_row * t->L; /* (MLA: once) */
        t->act_row = 4.0 * hp->hidden;
        t->q_row = 4.0 * t->qw;
        t->cpu_attn = p->cpu_attention;
        t->post_norm = !hp->pre_norm;
        t->learned_pos = hp->pos == FG_POS_LEARNED;
    }
}

static double compute_prefill(const fg_calib *c, const terms *t)
{
    double m = t->gbs * t->P;
    double lin = m * t->f_lin / fg_calib_flops_at(c, t->rate, m) + t->dec_pre;
    double att = t->L * t->gbs * t->P * (t->P + 1) / 2 * t->qw_pre * t->attn;
    return t->ngb * (lin + att) + t->n * t->f_head / fg_calib_flops_at(c, t->rate, t->n);
}

static double compute_decode(const fg_calib *c, const terms *t)
{
    double ctx = t->P + t->G / 2;
    return t->n * (t->f_lin + t->f_head) / fg_calib_flops_at(c, t->rate, t->n) + t->dec_dec +
           t->L * t->n * ctx * t->qw_att * t->attn;
}

/* I/O seconds per unit of each disk fraction [weights, cache, activations], reads and writes
 * apart: reads are prefetched while computing; a KV chunk homed on disk is written behind
 * (the engine releases it after its attention with FG_PAGER_WRITE_BEHIND, while the next
 * batches compute: see behind), but any other dirty chunk is written back when it is evicted,
 * synchronously, by the computing thread (pager/pager.c evict_one). KV and activation
 * chunks are fresh (pager: never-written chunks load as zeros without a read): the prefill
 * writes the cache homed on disk and reads none of it. An activation chunk is used by every
 * unit, so the pager's LRU keeps it while the weights stream past: one write-back in all
 * (measured against the pager's counters, tests/test_policy.c). */
static void io_prefill(const terms *t, double rd[3], double wr[3])
{
    rd[0] = 0, wr[0] = 0; /* every weight is read in the prefill: see cold_read */
    rd[1] = 0, wr[1] = t->kv_total * t->wr;
    rd[2] = 0, wr[2] = t->act_total * t->wr;
}

/* The prefill reads every weight once whatever its home: the pool starts empty, and what is
 * homed in RAM (or on the GPU) is loaded by its first use; of a mixture's experts, the ones its
 * tokens choose (all, with enough tokens). */
static double cold_read(const terms *t)
{
    return (t->weights - t->experts * (1 - t->xr_pre)) * t->rd;
}

/* Of the writes wr, those written behind, overlapping compute like reads: the KV cache's,
 * unless the streaming room holds everything homed on disk (then the engine writes nothing
 * behind: the LRU keeps the chunks, and what the prefill charges for them is an eviction's). */
static void behind(const terms *t, const double wr[3], double wb[3])
{
    wb[0] = wb[2] = 0;
    wb[1] = t->cached ? 0 : wr[1];
}

/* A decode step reads the weights and the cache homed on disk and writes the cache back,
 * unless the streaming room holds all of it (then it stays resident after the prefill). */
static void io_decode(const terms *t, double rd[3], double wr[3])
{
    double k = t->cached ? 0 : 1;
    rd[0] = k * t->wread_dec * t->rd, wr[0] = 0;
    rd[1] = k * t->kv_total * t->rd, wr[1] = k * t->kv_total * t->wr;
    rd[2] = wr[2] = 0;
}

/* One step (the prefill, or one decode step) as the device computes it. On the CPU backend lin
 * is the whole compute and the rest is zero.
 *  - lin: the Linear layers (the head included) at the device's rate for their row count;
 *    weights not homed on the GPU are uploaded per call (the backend stages piece i + 1 while
 *    piece i multiplies: overlap share phi_d), so w_up bytes per unit of (1 - wg): the Linear
 *    weights once a decode step, once per batch in the prefill (each batch calls each Linear;
 *    the head once for the block),
 *    the SMALL ones (norms, biases) once a step as each unit loads (the embedding unit's once,
 *    kept), a token embedding table by the chunks holding a gathered row (ids at random);
 *    the weights homed on the GPU go up once, in the prefill, as the pager promotes them (w_cold
 *    per unit of wg), and so do the fresh cache and activation chunks homed there;
 *  - other: attention, on the device, or on the CPU where the cache is in host memory under
 *    --cpu-cache-compute;
 *  - up/down: what else crosses the link, synchronously: a cache in host memory (kv_store
 *    downloads each new row; attention on the device uploads every row it reads, attention on
 *    the CPU downloads the queries and uploads its output) and activations in host memory in
 *    the prefill (each op on them stages its rows: the pre-norm reads, the residual add reads
 *    and writes, a post-norm reads and writes; the embedding writes). */
typedef struct step {
    double lin, other, w_up, w_cold, up, down;
    double k_lin, k_kept, k_gather; /* uses of each kind of weight bytes (fg_sweep_bytes) */
    double x_share;                 /* of the experts' bytes, the share a Linear call stages */
} step;

/* The share of a GATHER table's chunks holding at least one of r rows drawn at random. */
static double touched(const terms *t, double r)
{
    double c = t->sweep.gather_chunks;
    return c > 0 ? 1 - pow(1 - 1 / c, r) : 0;
}

/* A step's weight bytes uploaded when sb (fg_policy_sweep_bytes) are off the GPU. */
static double step_weights(const step *s, const fg_sweep_bytes *sb)
{
    return (sb->lin - sb->experts * (1 - s->x_share)) * s->k_lin + sb->head + sb->small +
           sb->kept * s->k_kept + sb->gather * s->k_gather;
}

static void kv_link(const terms *t, double rows, double ctx_rows, step *s)
{
    s->down += t->n * rows * t->kv_tok;
    if (t->cpu_attn) {
        s->down += t->L * t->n * rows * t->q_row;
        s->up += t->L * t->n * rows * t->q_row;
    } else {
        s->up += t->n * ctx_rows * t->kv_tok;
    }
}

static void step_prefill(const fg_calib *c, const terms *t, int kv_host, int act_host, step *s)
{
    memset(s, 0, sizeof *s);
    if (!t->dev) {
        s->lin = compute_prefill(c, t);
        return;
    }
    double m = t->gbs * t->P;
    double pairs = t->ngb * t->L * t->gbs * t->P * (t->P + 1) / 2 * t->qw_pre;
    s->lin = t->ngb * m * t->f_lin / fg_calib_dev_flops(t->dev, m) +
             t->n * t->f_head / fg_calib_dev_flops(t->dev, t->n);
    s->other = pairs * (kv_host && t->cpu_attn ? t->attn : t->dev_attn_pre);
    s->k_lin = t->ngb, s->k_kept = 1, s->k_gather = t->ngb * touched(t, t->gbs * t->P);
    s->x_share = t->xs_pre;
    s->w_up = step_weights(s, &t->sweep);
    s->w_cold = t->weights;
    /* a fresh cache or activation chunk homed on the GPU goes up once too (the pager makes it
     * in host memory, zeroed) */
    s->up += (kv_host ? 0 : t->kv_total) + (act_host ? 0 : t->act_total);
    if (kv_host)
        kv_link(t, t->P, t->P, s);
    if (act_host) { /* a layer: 4 reads; 2 writes (pre-norm) or 4; the embedding writes, and
                     * adds learned positions row by row (a read and a write) */
        double rows = t->n * t->P * t->act_row;
        s->up += rows * (4 * t->L + t->learned_pos);
        s->down += rows * ((t->post_norm ? 4 : 2) * t->L + 1 + t->learned_pos);
    }
}

static void step_decode(const fg_calib *c, const terms *t, int kv_host, step *s)
{
    memset(s, 0, sizeof *s);
    if (!t->dev) {
        s->lin = compute_decode(c, t);
        return;
    }
    double ctx = t->P + t->G / 2;
    s->lin = t->n * (t->f_lin + t->f_head) / fg_calib_dev_flops(t->dev, t->n);
    s->other = t->L * t->n * ctx * t->qw_att * (kv_host && t->cpu_attn ? t->attn : t->dev_attn);
    s->k_lin = 1, s->k_kept = 0, s->k_gather = touched(t, t->n);
    s->x_share = t->xs_dec;
    s->w_up = step_weights(s, &t->sweep);
    if (kv_host)
        kv_link(t, 1, ctx, s);
}

/* Seconds of a step's device side uploading w bytes of weights:
 * max(lin, upload) + (1 - phi_d) min(lin, upload) + other + the synchronous link. */
static double device_time(const terms *t, const step *s, double w_bytes, double w_homed)
{
    double ws = w_bytes * t->up, wh = w_homed * t->up, phi = t->dev ? t->dev->overlap : 0;
    /* the pieces' uploads hide phi_d of the shorter of them and the multiplies; the GPU-homed
     * chunks' first upload runs on the copy stream ahead of the spans that use them (hidden
     * under computing when prefetching, else waited for) */
    double comp = s->lin + (1 - phi) * ws + (t->prefetch ? 0 : wh), link = wh + ws + (1 - phi) * s->lin;
    return (comp > link ? comp : link) + s->other + s->up * t->up + s->down * t->down;
}

/* A step: writes block the computing thread; reads (and writes behind, counted in rd) overlap
 * compute (when overlap is on) by the calibrated share phi of the shorter:
 * wr + max(c, r) + (1 - phi) min(c, r). */
static double step_time(double compute, double rd, double wr, double phi)
{
    double hi = compute > rd ? compute : rd, lo = compute > rd ? rd : compute;
    return wr + hi + (1 - phi) * lo;
}

static double dot3(const double k[3], const double x[3])
{
    return k[0] * x[0] + k[1] * x[1] + k[2] * x[2];
}

void fg_policy_predict(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                       const fg_policy *p, const fg_policy_job *job, fg_prediction *out)
{
    terms t;
    terms_of(c, m, pl, p, job, &t);
    double pr[3], pw[3], dr[3], dw[3], pb[3], db[3];
    io_prefill(&t, pr, pw);
    io_decode(&t, dr, dw);
    behind(&t, pw, pb);
    behind(&t, dw, db);
    /* fractions as the pager really places them (the plan counts its homes) */
    double x[3], g[3];
    for (int k = 0; k < 3; k++) {
        double total = kind_total(pl, k);
        x[k] = total > 0 ? (double)pl->on_disk[k] / total : 0;
        g[k] = total > 0 ? (double)pl->dev_homed[k] / total : 0;
    }
    int kv_host = g[1] < 0.5, act_host = g[2] < 0.5;
    step sp, sd;
    step_prefill(c, &t, kv_host, act_host, &sp);
    step_decode(c, &t, kv_host, &sd);
    /* the weights' link bytes as the pager homes them (its midpoint rule, chunk by chunk) */
    double wp = 0, wd = 0, wh = 0;
    if (t.dev) {
        fg_sweep_bytes sb;
        fg_policy_sweep_bytes(m, p->frac.w[0], &sb);
        wp = step_weights(&sp, &sb);
        wd = step_weights(&sd, &sb);
        wh = (double)pl->dev_homed[0];
    }
    memset(out, 0, sizeof *out);
    out->compute_decode_s = device_time(&t, &sd, wd, 0);
    out->io_decode_s = dot3(dr, x) + dot3(dw, x);
    out->prefill_s = step_time(device_time(&t, &sp, wp, wh),
                               cold_read(&t) + dot3(pr, x) + dot3(pb, x),
                               dot3(pw, x) - dot3(pb, x), t.phi);
    out->decode_s = (t.G - 1) * step_time(out->compute_decode_s, dot3(dr, x) + dot3(db, x),
                                          dot3(dw, x) - dot3(db, x), t.phi);
    out->tokens = (uint64_t)(t.n * t.G);
    /* bytes: the seconds' terms at one second per byte */
    out->read_bytes = (uint64_t)((cold_read(&t) + dot3(pr, x) + (t.G - 1) * dot3(dr, x)) /
                                 t.rd);
    out->write_bytes = (uint64_t)((dot3(pw, x) + (t.G - 1) * dot3(dw, x)) / t.wr);
    out->up_bytes = (uint64_t)(wp + wh + (t.G - 1) * wd + sp.up + (t.G - 1) * sd.up);
    out->down_bytes = (uint64_t)(sp.down + (t.G - 1) * sd.down);
    double total = out->prefill_s + out->decode_s;
    out->tok_s = total > 0 ? (double)out->tokens / total : 0;
}

/* ---- the bound ---- */

/* The step's Linear seconds at the GEMM rate alone (attention and decoding left out): the
 * device's table on a device, else the CPU's for the Linear layers' path. */
static double gemm_s(const fg_calib *c, const terms *t, double flops, double m)
{
    double r = t->dev ? fg_calib_dev_flops(t->dev, m) : fg_calib_flops_at(c, t->rate, m);
    return r > 0 ? flops / r : 0;
}

static void bound_phase(fg_bound_phase *b, double up_rate, double down_rate, double rd,
                        double wr)
{
    b->link_s = 0;
    if (up_rate > 0 && down_rate > 0) {
        double u = b->link_up / up_rate, d = b->link_down / down_rate;
        b->link_s = u > d ? u : d; /* the link carries both ways at once */
    }
    b->disk_s = b->disk_read * rd + b->disk_write * wr;
    b->rate = b->compute_s > 0 ? b->flops / b->compute_s : 0;
    b->s = b->compute_s;
    b->s = b->link_s > b->s ? b->link_s : b->s;
    b->s = b->disk_s > b->s ? b->disk_s : b->s;
}

void fg_policy_bound(const fg_calib *c, const fg_policy_model *m, const fg_plan *pl,
                     const fg_policy *p, const fg_policy_job *job, fg_bound *out)
{
    terms t;
    terms_of(c, m, pl, p, job, &t);
    memset(out, 0, sizeof *out);
    fg_bound_phase *bp = &out->ph[0], *bd = &out->ph[1];
    double mp = t.gbs * t.P;
    bp->flops = t.ngb * mp * t.f_lin + t.n * t.f_head;
    bp->compute_s = gemm_s(c, &t, t.ngb * mp * t.f_lin, mp) + gemm_s(c, &t, t.n * t.f_head, t.n);
    bd->flops = (t.G - 1) * t.n * (t.f_lin + t.f_head);
    bd->compute_s = gemm_s(c, &t, bd->flops, t.n);
    /* the disk: the prediction's bytes, split by phase (the same terms at a byte a second) */
    double pr3[3], pw3[3], dr3[3], dw3[3], x[3];
    io_prefill(&t, pr3, pw3);
    io_decode(&t, dr3, dw3);
    for (int k = 0; k < 3; k++) {
        double total = kind_total(pl, k);
        x[k] = total > 0 ? (double)pl->on_disk[k] / total : 0;
    }
    bp->disk_read = (cold_read(&t) + dot3(pr3, x)) / t.rd;
    bp->disk_write = dot3(pw3, x) / t.wr;
    bd->disk_read = (t.G - 1) * dot3(dr3, x) / t.rd;
    bd->disk_write = (t.G - 1) * dot3(dw3, x) / t.wr;
    double up = 0, down = 0;
    if (t.dev) { /* the weights off the GPU once a sweep (the prefill's batches could share one
                  * upload), the GPU-homed ones once; the cache's and activations' rows as the
                  * placement moves them (fg_policy_predict's rule for their home) */
        int kv_host = !(pl->dev_homed[1] * 2 > kind_total(pl, 1));
        int act_host = !(pl->dev_homed[2] * 2 > kind_total(pl, 2));
        step sp, sd;
        step_prefill(c, &t, kv_host, act_host, &sp);
        step_decode(c, &t, kv_host, &sd);
        sp.k_lin = 1;
        fg_sweep_bytes sb;
        fg_policy_sweep_bytes(m, p->frac.w[0], &sb);
        bp->link_up = step_weights(&sp, &sb) + (double)pl->dev_homed[0] + sp.up;
        bp->link_down = sp.down;
        bd->link_up = (t.G - 1) * (step_weights(&sd, &sb) + sd.up);
        bd->link_down = (t.G - 1) * sd.down;
        up = job->dev->up, down = job->dev->down;
    }
    for (int k = 0; k < 2; k++) {
        bound_phase(&out->ph[k], up, down, t.rd, t.wr);
        out->s += out->ph[k].s;
    }
    out->link_rate[0] = up, out->link_rate[1] = down;
    out->disk_rate[0] = 1 / t.rd, out->disk_rate[1] = 1 / t.wr;
    out->tokens = (uint64_t)(t.n * t.G);
    out->tok_s = out->s > 0 ? (double)out->tokens / out->s : 0;
}

/* "2.10 s: compute 1.20 s (3.1 TFLOP at 2.6 TFLOP/s)", and the link's and the disk's when
 * they move bytes; times and bytes times k */
static size_t phase_text(const fg_bound *bd, const fg_bound_phase *b, double k, char *buf,
                         size_t cap)
{
    char x[32], y[32];
    double f = k * b->flops, u = f >= 1e12 || b->rate >= 1e12 ? 1e12 : 1e9;
    const char *un = u == 1e12 ? "T" : "G";
    size_t n = (size_t)snprintf(buf, cap, "%.2f s: compute %.2f s (%.3g %sFLOP at %.3g %sFLOP/s)",
                                k * b->s, k * b->compute_s, f / u, un, b->rate / u, un);
    if (n < cap && (b->link_up > 0 || b->link_down > 0))
        n += (size_t)snprintf(buf + n, cap - n, ", link %.2f s (up %s at %.3g GB/s, down %s at "
                              "%.3g)", k * b->link_s,
                              fg_fmt_bytes(k * b->link_up, x, (int)sizeof x),
                              bd->link_rate[0] / 1e9,
                              fg_fmt_bytes(k * b->link_down, y, (int)sizeof y),
                              bd->link_rate[1] / 1e9);
    if (n < cap && (b->disk_read > 0 || b->disk_write > 0))
        n += (size_t)snprintf(buf + n, cap - n, ", disk %.2f s (read %s at %.3g GB/s, write %s "
                              "at %.3g)", k * b->disk_s,
                              fg_fmt_bytes(k * b->disk_read, x, (int)sizeof x),
                              bd->disk_rate[0] / 1e9,
                              fg_fmt_bytes(k * b->disk_write, y, (int)sizeof y),
                              bd->disk_rate[1] / 1e9);
    return n < cap ? n : cap;
}

void fg_bound_describe(const fg_bound *b, double blocks, char *buf, size_t cap)
{
    char pre[320], dec[320];
    phase_text(b, &b->ph[0], blocks, pre, sizeof pre);
    phase_text(b, &b->ph[1], blocks, dec, sizeof dec);
    snprintf(buf, cap, "%.2f tok/s at most, %.2f s: prefill %s; decode %s", b->tok_s,
             blocks * b->s, pre, dec);
}

/* ---- the search ---- */

enum { X_WG, X_WC, X_WD, X_CG, X_CC, X_CD, X_HG, X_HC, X_HD, X_EP, X_ED, X_TP, X_TD, NX };
enum { R_W, R_C, R_H, R_PRE_DEV, R_PRE_IO = R_PRE_DEV + 2, R_DEC_DEV = R_PRE_IO + 2,
       R_DEC_IO = R_DEC_DEV + 2, R_MEM = R_DEC_IO + 2, R_GPU, NR };
#define TIE 1e-3 /* of the I/O time added to the objective: among equal times, less I/O */

/* The device side of a step as two rows (device_time's max linearized) in the weights' host
 * share wc + wd = 1 - wg: the GPU-homed weights go up once, u0 wg (u0 = w_cold at the link's
 * seconds a byte), on the copy stream ahead of their span when prefetching (hidden under
 * computing; h = 0) or waited for (h = u0); the pieces in host memory w_up (wc + wd), of which
 * phi_d of the shorter of them and the multiplies is hidden. With u = w_up - u0:
 *   row r:     E - ((1 - phi_d)(u + u0) - h)(wc + wd) >= lin + h + rest  (computing dominates)
 *   row r + 1: E - u (wc + wd)                        >= u0 + (1 - phi_d) lin + rest (uploading)
 * On the CPU backend everything but lin is 0: E = the compute. */
static void device_rows(double *A, double *rlo, double *rhi, int r, int xe, const terms *t,
                        const step *s)
{
    double u0 = s->w_cold * t->up, u = s->w_up * t->up - u0, phi = t->dev ? t->dev->overlap : 0;
    double rest = s->other + s->up * t->up + s->down * t->down, h = t->prefetch ? 0 : u0;
    A[r * NX + xe] = A[(r + 1) * NX + xe] = 1;
    A[r * NX + X_WC] = A[r * NX + X_WD] = -((1 - phi) * (u + u0) - h);
    A[(r + 1) * NX + X_WC] = A[(r + 1) * NX + X_WD] = -u;
    rlo[r] = s->lin + h + rest, rlo[r + 1] = u0 + (1 - phi) * s->lin + rest;
    rhi[r] = rhi[r + 1] = HUGE_VAL;
}

/* The step time as two rows (the max of step_time linearized) with the device side E a
 * variable, r = cold + (rd + wb).x (wb: the writes behind, of wr):
 *   row r:     T - (rd + wr).x - (1 - phi) E                >= cold   (the disk dominates)
 *   row r + 1: T - E - ((1 - phi)(rd + wb) + wr - wb).x     >= (1 - phi) cold  (computing) */
static void step_rows(double *A, double *rlo, double *rhi, int r, int xt, int xe,
                      const double rd[3], const double wr[3], const double wb[3], double cold,
                      double phi)
{
    static const int disk[3] = {X_WD, X_CD, X_HD};
    A[r * NX + xt] = A[(r + 1) * NX + xt] = 1;
    A[r * NX + xe] = -(1 - phi), A[(r + 1) * NX + xe] = -1;
    for (int k = 0; k < 3; k++) {
        A[r * NX + disk[k]] = -(rd[k] + wr[k]);
        A[(r + 1) * NX + disk[k]] = -((1 - phi) * (rd[k] + wb[k]) + wr[k] - wb[k]);
    }
    rlo[r] = cold, rlo[(r + 1)] = (1 - phi) * cold;
    rhi[r] = rhi[r + 1] = HUGE_VAL;
}

/* The cache's and the activations' tiers of one candidate (a chunk is homed whole). */
typedef struct tiers {
    double cg, cc, hg, hc;   /* 1 on the GPU / in RAM, else 0 (disk when both are 0) */
} tiers;

/* The LP of one candidate: minimize Tp + (G - 1) Td over the nine fractions (the cache's and
 * activations' tiers fixed by tr, the weights' GPU share only with a device), the device sides
 * and the step times, with at most cap bytes homed in RAM and dev_cap on the GPU. *wg, *wc get
 * the weights' GPU and RAM fractions. */
static int solve(const fg_calib *c, const terms *t, double phi, const tiers *tr, double cap,
                 double dev_cap, double *wg, double *wc, fg_err *err)
{
    double cost[NX] = {0}, A[NR * NX] = {0}, lo[NX] = {0}, hi[NX], rlo[NR], rhi[NR], x[NX], obj;
    for (int j = 0; j < NX; j++)
        hi[j] = 1;
    hi[X_WG] = t->dev ? 1 : 0;
    lo[X_CG] = hi[X_CG] = tr->cg, lo[X_CC] = hi[X_CC] = tr->cc;
    lo[X_CD] = hi[X_CD] = 1 - tr->cg - tr->cc;
    lo[X_HG] = hi[X_HG] = tr->hg, lo[X_HC] = hi[X_HC] = tr->hc;
    lo[X_HD] = hi[X_HD] = 1 - tr->hg - tr->hc;
    hi[X_EP] = hi[X_ED] = hi[X_TP] = hi[X_TD] = HUGE_VAL;
    double pr[3], pw[3], dr[3], dw[3], pb[3], db[3];
    io_prefill(t, pr, pw);
    io_decode(t, dr, dw);
    behind(t, pw, pb);
    behind(t, dw, db);
    step sp, sd;
    step_prefill(c, t, tr->cg == 0, tr->hg == 0, &sp);
    step_decode(c, t, tr->cg == 0, &sd);
    cost[X_TP] = 1, cost[X_TD] = t->G - 1;
    /* among equal times, less read from disk and less sent over the link; RAM before disk
     * when the streaming room would hold the weights anyway (nothing read after the prefill) */
    cost[X_WC] = TIE * (t->G - 1) * sd.w_up * t->up;
    cost[X_WD] = TIE * ((t->G - 1) * dr[0] + t->weights * t->rd) + cost[X_WC];
    for (int k = 0; k < 3; k++) {
        A[k * NX + 3 * k] = A[k * NX + 3 * k + 1] = A[k * NX + 3 * k + 2] = 1;
        rlo[k] = rhi[k] = 1;
    }
    device_rows(A, rlo, rhi, R_PRE_DEV, X_EP, t, &sp);
    device_rows(A, rlo, rhi, R_DEC_DEV, X_ED, t, &sd);
    step_rows(A, rlo, rhi, R_PRE_IO, X_TP, X_EP, pr, pw, pb, cold_read(t), phi);
    step_rows(A, rlo, rhi, R_DEC_IO, X_TD, X_ED, dr, dw, db, 0, phi);
    /* memory homed in RAM within what the budget leaves after buffers and the window, and on
     * the GPU within its pool */
    A[R_MEM * NX + X_WC] = t->weights, A[R_MEM * NX + X_CC] = t->kv_total;
    A[R_MEM * NX + X_HC] = t->act_total;
    rlo[R_MEM] = -HUGE_VAL;
    rhi[R_MEM] = cap;
    A[R_GPU * NX + X_WG] = t->weights, A[R_GPU * NX + X_CG] = t->kv_total;
    A[R_GPU * NX + X_HG] = t->act_total;
    rlo[R_GPU] = -HUGE_VAL;
    rhi[R_GPU] = dev_cap;
    int rc = fg_lp_solve(NX, NR, cost, A, rlo, rhi, lo, hi, x, &obj, err);
    if (rc == FG_OK) {
        *wg = x[X_WG] < 0 ? 0 : x[X_WG] > 1 ? 1 : x[X_WG];
        *wc = x[X_WC] < 0 ? 0 : x[X_WC] > 1 - *wg ? 1 - *wg : x[X_WC];
    }
    return rc;
}

static void set_fractions(fg_policy *p, double wg, double wc, const tiers *tr)
{
    p->have_fractions = 1;
    p->frac = (fg_pager_policy){{wg, wc, 1 - wg - wc},
                                {tr->cg, tr->cc, 1 - tr->cg - tr->cc},
                                {tr->hg, tr->hc, 1 - tr->hg - tr->hc}};
    p->frac.w[2] = p->frac.w[2] < 0 ? 0 : p->frac.w[2]; /* rounding: the pager refuses < 0 */
}

/* The least budget the block needs: its buffers and the streaming window, all else on disk. */
static uint64_t least_need(const fg_plan *pl)
{
    return pl->fixed + 2 * pl->max_span + 2 * pl->kv_chunk + 2 * pl->act_chunk;
}

/* Weight bytes the pager homes in RAM with GPU and RAM fractions wg, wc (its midpoint rule). */
static double ram_homed(const fg_policy_model *m, double wg, double wc)
{
    return (double)fg_policy_weights_homed(m, wg + wc) - (double)fg_policy_weights_homed(m, wg);
}

/* Lower the weights' GPU share until what the pager really homes on the GPU fits its pool (what
 * leaves it goes to RAM), then their RAM share until RAM's fits the room; then the plan must
 * accept it. */
static int fit(const fg_policy_model *m, const fg_plan *pl0, fg_policy *p, uint32_t max_ctx,
               uint64_t budget, double room, double *wg, double *wc, const tiers *tr,
               fg_plan *pl, fg_err *err)
{
    double kv = kind_total(pl0, 1), act = kind_total(pl0, 2);
    double dev_other = tr->cg * kv + tr->hg * act, other = tr->cc * kv + tr->hc * act;
    double dev_room = (double)pl0->dev_pool;
    for (int i = 0; i < 64 && *wg > 0; i++) { /* what leaves the GPU goes to RAM */
        if ((double)fg_policy_weights_homed(m, *wg) + dev_other <= dev_room)
            break;
        double d = *wg > 1.0 / 64 ? 1.0 / 64 : *wg;
        *wg -= d, *wc += d;
    }
    if (*wc > 1 - *wg)
        *wc = 1 - *wg;
    for (int i = 0; i < 64 && *wc > 0 && ram_homed(m, *wg, *wc) + other > room; i++)
        *wc = *wc > 1.0 / 64 ? *wc - 1.0 / 64 : 0;
    if (ram_homed(m, *wg, *wc) + other > room ||
        (double)fg_policy_weights_homed(m, *wg) + dev_other > dev_room)
        return fg_err_set(err, FG_ERR_NO_SPACE, "does not fit");
    set_fractions(p, *wg, *wc, tr);
    int rc = fg_plan_make(&m->pm, p, max_ctx, budget, pl, err);
    if (rc == FG_OK && pl->homed[0] + pl->homed[1] + pl->homed[2] + pl->window > pl->pool)
        rc = fg_err_set(err, FG_ERR_NO_SPACE, "the plan does not fit");
    return rc;
}

static const uint32_t GBS[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
static const uint32_t NGB[] = {1, 2, 3, 4, 6, 8, 12, 16};
#define MAX_BLOCK 256 /* the calibration's largest GEMM row count */

typedef struct best {
    fg_policy p;
    fg_prediction pred;
    int found;
} best;

/* A 4-bit cache changes the numbers: it is chosen only when nothing fits without it or it is
 * this much faster. */
#define LOSSY_GAIN 1.05

/* Predictions this close are a tie, won by the block with fewer batches (then more rows a
 * batch): the model does not price a batch's own costs (its KV and activation acquires, each
 * Linear called once per batch at fewer rows in the prefill), and measured 2 x 4 at 0.56 of
 * 8 x 1 (opt-1.3b, half the weights' budget) where it predicted them 0.5% apart. */
#define NEAR 0.02

static int better(const fg_prediction *pr, const fg_policy *p, const best *b)
{
    if (!b->found || pr->tok_s > b->pred.tok_s * (1 + NEAR))
        return 1;
    if (pr->tok_s < b->pred.tok_s * (1 - NEAR))
        return 0;
    if (p->ngb != b->p.ngb)
        return p->ngb < b->p.ngb;
    if (p->gbs != b->p.gbs)
        return p->gbs > b->p.gbs;
    return pr->tok_s > b->pred.tok_s * (1 + 1e-6);
}

/* Spans of streaming room the overlapping regime keeps beyond the window's two: the plan's
 * deeper prefetch (fg_plan_make's threshold for prefetching FG_PLAN_AHEAD spans). */
#define DEEP_SPARE (FG_PLAN_AHEAD - 1)

/* One candidate block with a cache codec: every tier of cache and activations (the GPU's too
 * with a device). */
static void candidate(const fg_calib *c, const fg_policy_model *m, const fg_policy_job *job,
                      fg_policy *p, uint64_t budget, fg_search_stats *st, best *bests)
{
    best *b = &bests[p->compress_cache ? 1 : 0];
    uint32_t ctx = job->max_ctx > job->prompt_len + job->gen_len
                 ? job->max_ctx : job->prompt_len + job->gen_len;
    fg_plan pl0, pl;
    fg_err e;
    static const tiers all_ram = {0, 1, 0, 1}, all_disk = {0, 0, 0, 0};
    set_fractions(p, 0, 1, &all_ram);
    if (fg_plan_make(&m->pm, p, ctx, 0, &pl0, &e)) {
        fg_policy big = *p; /* the device's budget too small for the block: what it needs */
        big.gpu_budget = UINT64_MAX / 4;
        if (p->gpu_budget && !fg_plan_make(&m->pm, &big, ctx, 0, &pl0, &e) &&
            (!st->min_gpu || pl0.dev_reserve + (1u << 20) < st->min_gpu))
            st->min_gpu = pl0.dev_reserve + (1u << 20);
        return;
    }
    uint64_t need = least_need(&pl0);
    if (!st->min_budget || need < st->min_budget)
        st->min_budget = need;
    set_fractions(p, 0, 0, &all_disk); /* the buffers and window under the budget: all on disk */
    if (need > budget || fg_plan_make(&m->pm, p, ctx, budget, &pl0, &e))
        return;
    terms t;
    terms_of(c, m, &pl0, p, job, &t);
    /* two regimes: room left to prefetch FG_PLAN_AHEAD spans ahead (reading overlaps computing),
     * or the pool filled with homed data (one span ahead: no overlap) */
    double room = (double)budget - (double)(pl0.fixed + pl0.window);
    double deep = room - DEEP_SPARE * (double)pl0.max_span;
    int n_tiers = job->dev ? 3 : 2;
    for (int k = 0; k < n_tiers * n_tiers * (p->overlap ? 2 : 1); k++) {
        int i = k % (n_tiers * n_tiers), shallow = k >= n_tiers * n_tiers || !p->overlap;
        /* tiers 0 GPU, 1 RAM, 2 disk (the GPU's only with a device); the fastest first, so
         * that a tie keeps it */
        int ct = i % n_tiers + (job->dev ? 0 : 1), ht = i / n_tiers + (job->dev ? 0 : 1);
        tiers tr = {ct == 0, ct == 1, ht == 0, ht == 1};
        double wg = 0, wc, cap = shallow ? room : deep;
        double disk = (ct == 2 ? kind_total(&pl0, 1) : 0) + (ht == 2 ? kind_total(&pl0, 2) : 0);
        if (job->disk_free && disk > (double)job->disk_free) { /* the offload file's room */
            if (!st->min_disk || disk < (double)st->min_disk)
                st->min_disk = (uint64_t)disk;
            continue;
        }
        st->lps++;
        if (cap < 0 || solve(c, &t, shallow ? 0 : c->overlap, &tr, cap, (double)pl0.dev_pool,
                             &wg, &wc, &e) ||
            fit(m, &pl0, p, ctx, budget, cap, &wg, &wc, &tr, &pl, &e))
            continue;
        st->feasible++;
        fg_prediction pr;
        fg_policy_predict(c, m, &pl, p, job, &pr);
        if (better(&pr, p, b)) {
            b->p = *p;
            b->pred = pr;
            b->found = 1;
        }
    }
}

int fg_policy_search(const fg_calib *c, const fg_policy_model *m, const fg_policy *base,
                     const fg_policy_job *job, fg_policy *out, fg_prediction *pred,
                     fg_search_stats *st, fg_err *err)
{
    fg_search_stats local;
    st = st ? st : &local;
    memset(st, 0, sizeof *st);
    best bs[2]; /* [0] f32 cache, [1] 4-bit cache */
    memset(bs, 0, sizeof bs);
    uint64_t budget = job->ram_budget ? job->ram_budget : UINT64_MAX / 4;
    uint32_t cap = job->max_seqs && job->max_seqs < MAX_BLOCK ? job->max_seqs : MAX_BLOCK;
    int have_cap = 0;
    for (size_t i = 0; i <= sizeof GBS / sizeof GBS[0]; i++)
        for (size_t j = 0; j < sizeof NGB / sizeof NGB[0]; j++) {
            /* the last row: one batch of exactly cap sequences, unless enumerated already */
            uint32_t g = i < sizeof GBS / sizeof GBS[0] ? GBS[i] : cap;
            if (i == sizeof GBS / sizeof GBS[0] && (j > 0 || have_cap))
                continue;
            if (g * NGB[j] > cap)
                continue;
            have_cap |= g * NGB[j] == cap;
            /* where attention runs: on the device first (FlexGen's default), so that a tie
             * (the cache on the GPU, where the choice changes nothing) keeps it */
            int searched = job->dev && job->attn_search;
            for (int k = 0; k < (searched ? 4 : 2); k++) {
                int cc = k % 2;
                if (job->cache_choice >= 0 && cc != job->cache_choice)
                    continue;
                fg_policy p = *base;
                p.gbs = g;
                p.ngb = NGB[j];
                p.compress_cache = cc;
                p.compress_weight = m->all_q4;
                if (searched)
                    p.cpu_attention = k / 2;
                st->candidates++;
                candidate(c, m, job, &p, budget, st, bs);
            }
        }
    const best *b = bs[1].found && (!bs[0].found || bs[1].pred.tok_s > LOSSY_GAIN *
                                     bs[0].pred.tok_s) ? &bs[1] : &bs[0];
    char a[32], bb[32];
    if (!b->found && st->min_disk)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--offload-dir %s: %s free; no policy fits the "
                          "budgets with its KV cache and activations in RAM or on the GPU, and "
                          "the smallest block keeping them on disk needs %s there",
                          job->disk_dir ? job->disk_dir : "(the offload dir)",
                          fg_fmt_bytes((double)job->disk_free, a, sizeof a),
                          fg_fmt_bytes((double)st->min_disk, bb, sizeof bb));
    if (!b->found && st->min_gpu && !st->min_budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--gpu-budget %.1f MiB: no policy fits; the "
                          "smallest block needs %.1f MiB of the device (--gpu-budget %.0fM)",
                          (double)base->gpu_budget / FG_MIB, (double)st->min_gpu / FG_MIB,
                          ceil((double)st->min_gpu / FG_MIB));
    if (!b->found && job->ram_measured)
        return fg_err_set(err, FG_ERR_NO_SPACE, "no policy fits the %.0f MiB of RAM available "
                          "(90%% of MemAvailable); the smallest block needs %.0f MiB",
                          (double)job->ram_budget / FG_MIB, (double)st->min_budget / FG_MIB);
    if (!b->found)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB: no policy fits; the "
                          "smallest block needs %.0f MiB (--ram-budget %.0fM)",
                          (double)job->ram_budget / FG_MIB, (double)st->min_budget / FG_MIB,
                          ceil((double)st->min_budget / FG_MIB));
    *out = b->p;
    if (pred)
        *pred = b->pred;
    return FG_OK;
}

static const char *tier_name(const double f[3])
{
    return f[0] > 0.5 ? "GPU" : f[0] + f[1] > 0.5 ? "RAM" : "disk";
}

void fg_policy_describe(const fg_policy *p, char *buf, size_t cap)
{
    char gpu[32] = "";
    int dev = p->frac.w[0] > 0 || p->frac.c[0] > 0 || p->frac.h[0] > 0;
    if (dev)
        snprintf(gpu, sizeof gpu, "GPU %.1f%% ", 100 * p->frac.w[0]);
    /* with a device and the cache off it: where attention runs (--cpu-cache-compute) */
    const char *attn = !dev || p->frac.c[0] > 0.5 ? ""
                     : p->cpu_attention ? ", attention on the CPU" : ", attention on the GPU";
    snprintf(buf, cap, "block %u x %u (gbs x ngb), weights %sRAM %.1f%% disk %.1f%%, KV cache "
             "%s%s%s, activations %s, weights %s", p->gbs, p->ngb, gpu, 100 * p->frac.w[1],
             100 * p->frac.w[2], tier_name(p->frac.c), p->compress_cache ? " (4-bit)" : "", attn,
             tier_name(p->frac.h), p->compress_weight ? "4-bit" : "as stored");
}
