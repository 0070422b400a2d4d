/* engine.c - opening a store for generation: config and tokenizer from the store's metadata,
 * every weight chunk registered with the pager (group = sub-layer), the memory plan, and the
 * weight access paths used by the schedules (generate.c).
 *
 * Sub-layers ("units", FlexGen's layers with --sep-layer): 0 = input embedding, then attention
 * and MLP of each decoder layer, then the output head. Weights reach compute three ways:
 *  - materialized: the unit's tensors are converted (F16/BF16/Q4/Q8 -> f32) into one f32
 *    buffer sized for the largest unit, once per step, and shared by all batches of a block;
 *  - gathered: the token embedding table, of which a step needs only its tokens' rows;
 *  - streamed: the LM head (the same table when tied), multiplied chunk by chunk so the whole
 *    [vocab, embed] table never exists in f32.
 * Every chunk goes through the pager: acquire (disk -> HOST when not resident), decode, release.
 *
 * Memory plan (all within ram_budget): the pager's HOST pool gets what is left after the fixed
 * buffers (unit f32 buffer, chunk scratch, KV cache, activations, workspace, logits); it holds
 * the weights homed in RAM plus room to stream two units of those homed on disk.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "engine_int.h"
#include "par.h"
#include "fg_bytes.h"
#include "fg_progress.h"
#include "quant.h"

#define MB (1024.0 * 1024.0)

/* ---- metadata ---- */

static int load_config(fg_engine *e, fg_err *err)
{
    void *data;
    size_t len;
    int rc = fg_store_meta_get(e->store, "model.config_json", &data, &len, err);
    if (rc)
        return rc;
    rc = fg_opt_config_parse(data, len, "model.config_json (store metadata)", &e->cfg, err);
    free(data);
    if (rc)
        return rc;
    const fg_opt_config *c = &e->cfg;
    e->hp = (fg_opt_hparams){c->vocab_size, c->hidden_size, c->num_hidden_layers, c->ffn_dim,
                             c->num_attention_heads, c->max_position_embeddings,
                             c->word_embed_proj_dim, c->do_layer_norm_before,
                             c->do_layer_norm_before && !c->remove_final_layer_norm,
                             (int32_t)c->pad_token_id, (int32_t)c->bos_token_id,
                             (int32_t)c->eos_token_id};
    if (!c->enable_bias || !c->layer_norm_elementwise_affine)
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "config.json: OPT without biases or LayerNorm "
                          "affine parameters is not supported");
    return fg_opt_hparams_check(&e->hp, err);
}

static int load_tokenizer_from(fg_store *store, fg_tok **out, fg_err *err)
{
    static const char *keys[4] = {"tokenizer.vocab_json", "tokenizer.merges_txt",
                                  "tokenizer.config_json",
                                  "tokenizer.special_tokens_map_json"};
    void *d[4] = {0};
    size_t n[4] = {0};
    int rc = FG_OK;
    for (int i = 0; i < 4 && rc == FG_OK; i++) {
        rc = fg_store_meta_get(store, keys[i], &d[i], &n[i], err);
        if (rc == FG_ERR_NOT_FOUND && i >= 2)
            rc = FG_OK; /* optional files */
        else if (rc == FG_ERR_NOT_FOUND)
            rc = fg_err_set(err, rc, "%s: the store has no %s (convert the checkpoint with its "
                            "tokenizer files)", fg_store_dir(store), keys[i]);
    }
    if (rc == FG_OK) {
        fg_tok_files f = {d[0], n[0], keys[0], d[1], n[1], keys[1], d[2], n[2], keys[2],
                          d[3], n[3], keys[3]};
        rc = fg_tok_load_mem(&f, out, err);
    }
    for (int i = 0; i < 4; i++)
        free(d[i]);
    return rc;
}

int fg_engine_tokenizer_open(const char *dir, fg_tok **out, fg_err *err)
{
    fg_store *s;
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, err);
    if (rc == FG_OK) {
        rc = load_tokenizer_from(s, out, err);
        fg_store_close(s);
    }
    return rc;
}

/* ---- tensors and units ---- */

/* Look tensor `name` up in the store (once; later units reuse it); index into e->tensors.
 * Chunks are registered with the pager later (register_chunks), once the plan is known. */
static int add_tensor(fg_engine *e, const char *name, uint32_t group, int *index, fg_err *err)
{
    for (uint32_t i = 0; i < e->n_tensors; i++)
        if (!strcmp(e->tensors[i].name, name)) {
            *index = (int)i;
            return FG_OK;
        }
    fg_store_tensor *st;
    int rc = fg_store_tensor_get(e->store, name, &st, err);
    if (rc)
        return rc == FG_ERR_NOT_FOUND
                   ? fg_err_set(err, rc, "%s: tensor '%s' is missing from the store",
                                fg_store_dir(e->store), name)
                   : rc;
    wtensor *t = &e->tensors[e->n_tensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = st->n_dims;
    t->dims[0] = st->dims[0];
    t->dims[1] = st->n_dims > 1 ? st->dims[1] : 1;
    t->codec = st->codec;
    t->file_id = st->file_id;
    t->group = group;
    t->n_chunks = st->n_chunks;
    t->chunks = malloc((st->n_chunks + 1) * sizeof *t->chunks);
    if (!t->chunks) {
        fg_store_tensor_free(st);
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    }
    for (uint32_t c = 0; c < st->n_chunks; c++) {
        t->chunks[c] = st->chunks[c];
        t->stored_bytes += (st->chunks[c].length + 4095) & ~4095ull;
        if (st->chunks[c].n_rows > e->max_chunk_rows)
            e->max_chunk_rows = (uint32_t)st->chunks[c].n_rows;
    }
    fg_store_tensor_free(st);
    *index = (int)e->n_tensors++;
    return FG_OK;
}

/* Register every tensor's file and chunks with the pager (group = the unit that owns it). */
static int register_chunks(fg_engine *e, fg_err *err)
{
    uint32_t files[1024], file_ids[1024], n_files = 0;
    for (uint32_t i = 0; i < e->n_tensors; i++) {
        wtensor *t = &e->tensors[i];
        uint32_t f = 0, k;
        for (k = 0; k < n_files && file_ids[k] != t->file_id; k++)
            ;
        int rc = FG_OK;
        if (k == n_files) {
            char path[4096];
            if (n_files == 1024)
                return fg_err_set(err, FG_ERR_LIMIT, "more than 1024 weight files");
            fg_store_file_path(e->store, t->file_id, 0, path, sizeof path);
            rc = fg_pager_add_file(e->pager, path, 0, &files[k], err);
            file_ids[n_files++] = t->file_id;
        }
        f = files[k];
        for (uint32_t c = 0; rc == FG_OK && c < t->n_chunks; c++) {
            const fg_fgt_chunk_info *ci = &t->chunks[c];
            fg_pager_chunk_desc d = {f, ci->offset, ci->length, (ci->length + 4095) & ~4095ull,
                                     ci->xxh3, 1, ((uint64_t)i << 32) | c, t->codec,
                                     FG_CHUNK_WEIGHT, t->group};
            uint32_t id;
            rc = fg_pager_add_chunk(e->pager, &d, &id, err);
            if (c == 0)
                t->first_id = id;
        }
        if (rc)
            return rc;
    }
    return FG_OK;
}

static uint64_t floats_of(const fg_engine *e, int t)
{
    return t < 0 ? 0 : e->tensors[t].dims[0] * e->tensors[t].dims[1];
}

/* Names of a unit's tensors in role order (NULL = absent in this model). */
static void unit_names(const fg_engine *e, const unit *u, char names[UNIT_MAX_TENSORS][96])
{
    static const char *attn[10] = {"self_attn_layer_norm.weight", "self_attn_layer_norm.bias",
                                   "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                                   "self_attn.k_proj.weight", "self_attn.k_proj.bias",
                                   "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                                   "self_attn.out_proj.weight", "self_attn.out_proj.bias"};
    static const char *mlp[6] = {"final_layer_norm.weight", "final_layer_norm.bias", "fc1.weight",
                                 "fc1.bias", "fc2.weight", "fc2.bias"};
    int proj = e->hp.embed_dim != e->hp.hidden;
    memset(names, 0, (size_t)UNIT_MAX_TENSORS * 96);
    switch (u->kind) {
    case U_EMBED:
        strcpy(names[0], "model.decoder.embed_tokens.weight");
        strcpy(names[1], "model.decoder.embed_positions.weight");
        if (proj)
            strcpy(names[2], "model.decoder.project_in.weight");
        break;
    case U_ATTN:
        for (int i = 0; i < 10; i++)
            snprintf(names[i], 96, "model.decoder.layers.%u.%s", u->layer, attn[i]);
        break;
    case U_MLP:
        for (int i = 0; i < 6; i++)
            snprintf(names[i], 96, "model.decoder.layers.%u.%s", u->layer, mlp[i]);
        break;
    default:
        if (e->hp.final_ln) {
            strcpy(names[0], "model.decoder.final_layer_norm.weight");
            strcpy(names[1], "model.decoder.final_layer_norm.bias");
        }
        if (proj)
            strcpy(names[2], "model.decoder.project_out.weight");
        strcpy(names[3], "lm_head.weight");
        break;
    }
}

/* A gathered (embedding) or streamed (LM head) tensor: only some chunks, or one at a time. */
static int streamed(const unit *un, uint32_t i)
{
    return (un->kind == U_EMBED && i == 0) || (un->kind == U_HEAD && i == 3);
}

/* A Linear matrix of a layer (q, k, v, out_proj, fc1, fc2): handed to the model piece by piece
 * (fg_weight), each stored chunk decoded right before it is multiplied. */
static int piecewise(const unit *un, uint32_t i)
{
    return (un->kind == U_ATTN && (i == 2 || i == 4 || i == 6 || i == 8)) ||
           (un->kind == U_MLP && (i == 2 || i == 4));
}

static int build_unit(fg_engine *e, uint32_t index, int kind, uint32_t layer, fg_err *err)
{
    unit *u = &e->units[index];
    u->kind = kind;
    u->layer = layer;
    u->n_t = kind == U_ATTN ? 10 : kind == U_MLP ? 6 : kind == U_EMBED ? 3 : 4;
    char names[UNIT_MAX_TENSORS][96];
    unit_names(e, u, names);
    for (uint32_t i = 0; i < u->n_t; i++) {
        u->t[i] = -1;
        if (!names[i][0])
            continue;
        int rc = add_tensor(e, names[i], index, &u->t[i], err);
        if (rc == FG_ERR_NOT_FOUND && kind == U_HEAD && i == 3) /* tied: the embedding */
            rc = add_tensor(e, "model.decoder.embed_tokens.weight", 0, &u->t[i], err);
        if (rc)
            return rc;
        const wtensor *t = &e->tensors[u->t[i]];
        if (!(kind == U_HEAD && i == 3 && t->group != index))
            u->stored_bytes += t->stored_bytes; /* a tied head streams the embedding's bytes */
        /* gathered (embed tokens) and streamed (LM head) tensors are not materialized and need
         * one chunk resident at a time; the others are resident whole while the unit computes */
        if (piecewise(u, i)) {
            u->resident_bytes += t->stored_bytes; /* prefetched whole; decoded chunk by chunk */
        } else if (!streamed(u, i)) {
            u->f32_floats += floats_of(e, u->t[i]);
            u->resident_bytes += t->stored_bytes;
        } else {
            for (uint32_t c = 0; c < t->n_chunks; c++) {
                uint64_t b = (t->chunks[c].length + 4095) & ~4095ull;
                u->stream_chunk = b > u->stream_chunk ? b : u->stream_chunk;
            }
        }
    }
    return FG_OK;
}

static int build_units(fg_engine *e, fg_err *err)
{
    uint32_t L = e->hp.n_layers;
    e->n_units = 2 * L + 2;
    e->units = calloc(e->n_units, sizeof *e->units);
    e->tensors = calloc(16 * L + 8, sizeof *e->tensors); /* 16 per layer + embed/head */
    if (!e->units || !e->tensors)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    int rc = build_unit(e, 0, U_EMBED, 0, err);
    for (uint32_t l = 0; rc == FG_OK && l < L; l++) {
        rc = build_unit(e, 1 + 2 * l, U_ATTN, l, err);
        if (rc == FG_OK)
            rc = build_unit(e, 2 + 2 * l, U_MLP, l, err);
    }
    return rc ? rc : build_unit(e, e->n_units - 1, U_HEAD, 0, err);
}

/* ---- memory plan ---- */

typedef struct plan {
    uint64_t fixed;      /* bytes of buffers outside the pager */
    uint64_t weights;    /* stored weight bytes (padded) */
    uint64_t max_unit;   /* stored bytes of the largest unit */
    uint64_t host;       /* the pager's HOST budget */
} plan;

static uint64_t fixed_bytes(const fg_engine *e, uint32_t gbs, uint32_t ngb, uint64_t max_unit_f32)
{
    uint64_t h = e->hp.hidden, ctx = e->max_ctx, bls = (uint64_t)gbs * ngb;
    uint64_t tok = (uint64_t)gbs * ctx > bls ? (uint64_t)gbs * ctx : bls;
    uint64_t wide = e->hp.embed_dim > h ? e->hp.embed_dim : h;
    uint64_t rows = bls > 16 ? bls : 16;
    uint64_t b = max_unit_f32 * 4 + e->max_chunk_floats * 4;
    b += tok * e->hp.embed_dim * 4;                          /* gathered embedding rows */
    b += e->kv_row ? 2 * ctx * h * 4 : 0;                     /* 4-bit KV decode scratch */
    b += tok * (wide + 4 * h + e->hp.ffn + e->max_chunk_rows) * 4 + 2 * ctx * 4; /* workspace */
    b += rows * (e->hp.vocab_size + e->max_chunk_rows + h + e->hp.embed_dim) * 4; /* head */
    b += (uint64_t)ngb * gbs * ctx * 9;                       /* ids, positions, validity */
    b += bls * (h * 4 + 8);                                   /* the decode step's block rows */
    b += (uint64_t)e->hp.vocab_size * 8;                      /* sampler */
    return b;
}

/* Units loaded together: one, or an attention unit with its MLP when sub-layers are not
 * separate (FlexGen's --sep-layer false). */
static uint32_t span_of(const fg_engine *e, uint32_t u)
{
    return !e->o.sep_layer && e->units[u].kind == U_ATTN ? 2 : 1;
}

/* The most f32 floats materialized at once (one load). */
static uint64_t max_f32_floats(const fg_engine *e)
{
    uint64_t m = 0;
    for (uint32_t u = 0; u < e->n_units; u++) {
        uint64_t f = 0;
        for (uint32_t k = 0; k < span_of(e, u); k++)
            f += e->units[u + k].f32_floats;
        m = f > m ? f : m;
    }
    return m;
}

/* Weight bytes, and the most one load needs resident while it computes: its materialized
 * tensors whole plus one chunk of a gathered/streamed one. */
static void plan_weights(const fg_engine *e, plan *p)
{
    p->weights = p->max_unit = 0;
    for (uint32_t i = 0; i < e->n_tensors; i++)
        p->weights += e->tensors[i].stored_bytes;
    for (uint32_t u = 0; u < e->n_units; u++) {
        uint64_t need = 0;
        for (uint32_t k = 0; k < span_of(e, u); k++)
            need += e->units[u + k].resident_bytes + e->units[u + k].stream_chunk;
        p->max_unit = need > p->max_unit ? need : p->max_unit;
    }
}

/* Choose gbs/ngb (when not given), the pager budget and, without --percent, the placement:
 * all weights in RAM when they fit, else on disk streamed through a two-unit window. */
/* Bytes of one (batch, layer) KV chunk: K and V rows for gbs sequences of max_ctx tokens. */
static uint64_t kv_chunk_bytes(const fg_engine *e, uint32_t gbs)
{
    uint64_t row = e->kv_row ? e->kv_row : (uint64_t)e->hp.hidden * 4;
    return (2 * (uint64_t)gbs * e->max_ctx * row + 4095) & ~4095ull;
}

/* Bytes of one batch's activations: gbs sequences of max_ctx tokens of hidden f32. */
static uint64_t act_chunk_bytes(const fg_engine *e, uint32_t gbs)
{
    return ((uint64_t)gbs * e->max_ctx * e->hp.hidden * 4 + 4095) & ~4095ull;
}

/* Default placement (no --percent): everything in RAM when it fits, else weights to disk,
 * then the KV cache too; activations stay in RAM (kv_total includes them). */
static void default_policy(const plan *p, uint64_t kv_total, fg_pager_policy *pol)
{
    memset(pol, 0, sizeof *pol);
    pol->h[1] = 1.0;
    uint64_t w_window = 2 * p->max_unit;
    if (p->weights + kv_total + w_window <= p->host) {
        pol->w[1] = pol->c[1] = 1.0;
    } else if (kv_total + w_window <= p->host) {
        pol->w[2] = pol->c[1] = 1.0;
    } else {
        pol->w[2] = pol->c[2] = 1.0;
    }
}

static int make_plan(fg_engine *e, plan *p, fg_pager_policy *pol, fg_err *err)
{
    uint64_t max_f32 = max_f32_floats(e);
    plan_weights(e, p);
    uint64_t budget = e->o.ram_budget;
    uint32_t gbs = e->o.gbs ? e->o.gbs : 8, ngb = e->o.ngb ? e->o.ngb : 4;
    /* the least a block needs: its buffers plus room to stream two sub-layers and two KV
     * chunks; shrink the block (what the flags leave free) until that fits */
    for (;;) {
        uint64_t need = fixed_bytes(e, gbs, ngb, max_f32) + 2 * p->max_unit +
                        2 * kv_chunk_bytes(e, gbs) + 2 * act_chunk_bytes(e, gbs);
        if (!budget || need <= budget || gbs * ngb == 1 || (e->o.ngb && e->o.gbs))
            break;
        if (!e->o.ngb && ngb > 1)
            ngb--;
        else if (!e->o.gbs && gbs > 1)
            gbs--;
        else
            break;
    }
    e->kv_chunk = kv_chunk_bytes(e, gbs);
    e->act_chunk = act_chunk_bytes(e, gbs);
    uint64_t kv_total = (uint64_t)ngb * e->hp.n_layers * e->kv_chunk, kv_window = 2 * e->kv_chunk;
    uint64_t act_total = (uint64_t)ngb * e->act_chunk, act_window = 2 * e->act_chunk;
    uint64_t window = 2 * p->max_unit + kv_window + act_window;
    p->fixed = fixed_bytes(e, gbs, ngb, max_f32);
    if (!budget) /* room to prefetch FG_PREFETCH_AHEAD units ahead of the one computing */
        window += (FG_PREFETCH_AHEAD - 1) * p->max_unit;
    if (budget && p->fixed + window > budget)
        return fg_err_set(err, FG_ERR_NO_SPACE, "--ram-budget %.0f MiB is too small: this model "
                          "needs %.0f MiB of buffers for gbs %u x ngb %u plus %.0f MiB to stream "
                          "weights, KV cache and activations", budget / MB, p->fixed / MB, gbs,
                          ngb, window / MB);
    p->host = budget ? budget - p->fixed : p->weights + kv_total + act_total + window;
    e->gbs = gbs;
    e->ngb = ngb;
    if (e->o.have_policy) {
        *pol = e->o.policy;
        /* no budget: the pool holds what is homed in RAM plus the streaming windows, so
         * whatever is homed on disk really streams from disk */
        if (!budget)
            p->host = (uint64_t)((double)p->weights * (pol->w[1] + pol->w[0]) +
                                 (double)kv_total * (pol->c[1] + pol->c[0]) +
                                 (double)act_total * (pol->h[1] + pol->h[0])) + window;
    } else {
        default_policy(p, kv_total + act_total, pol);
    }
    if (pol->c[0] > 0 || pol->h[0] > 0 || pol->w[0] > 0)
        return fg_err_set(err, FG_ERR_PAGER_NO_TIER, "--percent puts weights, cache or "
                          "activations on a GPU, and this engine runs on the CPU");
    e->planned = p->fixed + p->host;
    /* prefetch deeper only where the pool's streaming room holds every unit in flight: with
     * less, prefetching further would evict chunks the current unit still uses */
    double homed = (double)p->weights * (pol->w[1] + pol->w[0]) +
                   (double)kv_total * (pol->c[1] + pol->c[0]) +
                   (double)act_total * (pol->h[1] + pol->h[0]);
    double room = (double)p->host - homed - (double)(kv_window + act_window);
    e->ahead = room >= (double)(1 + FG_PREFETCH_AHEAD) * (double)p->max_unit ? FG_PREFETCH_AHEAD : 1;
    return FG_OK;
}

/* The offload file: one KV chunk per (batch, layer), then one activation chunk per batch,
 * registered writable with the pager, then unlinked at once so nothing is left behind. */
static int register_kv(fg_engine *e, fg_err *err)
{
    const char *dir = e->o.offload_dir ? e->o.offload_dir : getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/fg-kv-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return fg_err_sys(err, FG_ERR_IO, errno, "--offload-dir %s: cannot create the KV file",
                          dir && *dir ? dir : "/tmp");
    uint64_t n = (uint64_t)e->ngb * e->hp.n_layers, act_off = n * e->kv_chunk;
    int rc = ftruncate(fd, (off_t)(act_off + e->ngb * e->act_chunk))
                 ? fg_err_sys(err, FG_ERR_IO, errno, "%s: ftruncate", path) : FG_OK;
    close(fd);
    uint32_t file;
    if (rc == FG_OK)
        rc = fg_pager_add_file(e->pager, path, 1, &file, err);
    unlink(path);
    for (uint64_t i = 0; rc == FG_OK && i < n; i++) {
        fg_pager_chunk_desc d = {file, i * e->kv_chunk, e->kv_chunk, e->kv_chunk, 0, 0,
                                 UINT64_MAX - i, {0}, FG_CHUNK_KV, (uint32_t)i};
        uint32_t id;
        rc = fg_pager_add_chunk(e->pager, &d, &id, err);
        if (i == 0)
            e->kv_first = id;
    }
    for (uint32_t k = 0; rc == FG_OK && k < e->ngb; k++) {
        fg_pager_chunk_desc d = {file, act_off + k * e->act_chunk, e->act_chunk, e->act_chunk, 0,
                                 0, UINT64_MAX - n - k, {0}, FG_CHUNK_ACT, (uint32_t)(n + k)};
        uint32_t id;
        rc = fg_pager_add_chunk(e->pager, &d, &id, err);
        if (k == 0)
            e->act_first = id;
    }
    return rc;
}

int fg_engine_act_acquire(fg_engine *e, uint32_t k, uint32_t n_batches, fg_pager_view *v,
                          fg_err *err)
{
    double t0 = fg_now();
    int rc = fg_pager_acquire(e->pager, e->act_first + k, FG_TIER_DISK, v, err);
    e->wait_s += fg_now() - t0;
    if (rc == FG_OK && k + 1 < n_batches) {
        fg_pager_ticket t;
        fg_pager_prefetch(e->pager, e->act_first + k + 1, FG_TIER_HOST, &t, NULL);
    }
    return rc;
}

int fg_engine_act_release(fg_engine *e, const fg_pager_view *v, int dirty, int rc, fg_err *err)
{
    fg_err rerr;
    int rc2 = fg_pager_release(e->pager, v, dirty ? FG_PAGER_DIRTY : 0, &rerr);
    if (rc == FG_OK && rc2) {
        if (err)
            *err = rerr;
        rc = rc2;
    }
    return rc;
}

void fg_engine_kv_prefetch(fg_engine *e, uint32_t k, uint32_t layer)
{
    fg_pager_ticket t;
    fg_pager_prefetch(e->pager, e->kv_first + k * e->hp.n_layers + layer, FG_TIER_HOST, &t, NULL);
}

/* ---- open / close ---- */

static int alloc_buffers(fg_engine *e, uint64_t max_f32, fg_err *err)
{
    uint64_t h = e->hp.hidden, tok = (uint64_t)e->gbs * e->max_ctx, ngb = e->ngb;
    uint64_t bls = (uint64_t)e->gbs * e->ngb;
    e->ws_rows = (uint32_t)(tok > bls ? tok : bls);
    e->logit_rows = e->gbs * e->ngb > 16 ? e->gbs * e->ngb : 16;
    e->unit_f32 = malloc((max_f32 + 1) * 4);
    e->chunk_f32 = malloc((e->max_chunk_floats + 1) * 4);
    e->tok_rows = malloc((uint64_t)e->ws_rows * e->hp.embed_dim * 4);
    e->blk_hidden = malloc(bls * h * 4);
    e->blk_ids = malloc(bls * 4);
    e->blk_pos = malloc(bls * 4);
    e->kv_tmp = e->kv_row ? malloc(2 * (uint64_t)e->max_ctx * h * 4) : NULL;
    e->logits = malloc((uint64_t)e->logit_rows * e->hp.vocab_size * 4);
    e->head_tmp = malloc((uint64_t)e->logit_rows * e->max_chunk_rows * 4 + 4);
    e->head_x = malloc((uint64_t)e->logit_rows * (h + e->hp.embed_dim) * 4);
    e->valid = calloc(ngb * tok, 1);
    e->ids = calloc(ngb * tok, 4);
    e->pos = calloc(ngb * tok, 4);
    if (!e->unit_f32 || !e->chunk_f32 || !e->tok_rows || (e->kv_row && !e->kv_tmp) || !e->logits ||
        !e->head_tmp || !e->head_x || !e->valid || !e->ids || !e->pos || !e->blk_hidden ||
        !e->blk_ids || !e->blk_pos)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory for the engine's buffers (%.0f MiB "
                          "planned)", e->planned / MB);
    int rc = fg_opt_ws_create(&e->hp, e->ws_rows, e->max_ctx, e->max_chunk_rows, &e->ws, err);
    if (rc == FG_OK)
        rc = fg_sample_scratch_create(e->hp.vocab_size, &e->sampler, err);
    return rc;
}

static int open_pager(fg_engine *e, const plan *p, const fg_pager_policy *pol, fg_err *err)
{
    fg_pager_config pc;
    memset(&pc, 0, sizeof pc);
    pc.budget[FG_TIER_HOST] = p->host;
    pc.flags = FG_PAGER_NO_CUDA | (e->o.verify ? FG_PAGER_VERIFY : 0);
    pc.notice = e->o.notice;
    pc.notice_ctx = e->o.notice_ctx;
    int rc = fg_pager_open(&pc, &e->pager, err);
    if (rc == FG_OK)
        rc = register_chunks(e, err);
    if (rc == FG_OK)
        rc = register_kv(e, err);
    if (rc == FG_OK)
        rc = fg_pager_place(e->pager, pol, err);
    return rc;
}

static int engine_init(fg_engine *e, const char *dir, fg_err *err)
{
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &e->store, err);
    if (!rc)
        rc = load_config(e, err);
    if (!rc)
        rc = load_tokenizer_from(e->store, &e->tok, err);
    if (!rc)
        rc = build_units(e, err);
    if (rc)
        return rc;
    for (uint32_t i = 0; e->o.compress_weight && i < e->n_tensors; i++)
        if (e->tensors[i].n_dims >= 2 && e->tensors[i].codec.id != FG_CODEC_Q4)
            return fg_err_set(err, FG_ERR_STATE, "--compress-weight: tensor '%s' is %s after "
                              "quantizing at load", e->tensors[i].name,
                              fg_codec_name(e->tensors[i].codec.id));
    for (uint32_t i = 0; i < e->n_tensors; i++) /* largest decoded chunk of any tensor */
        for (uint32_t c = 0; c < e->tensors[i].n_chunks; c++) {
            uint64_t f = e->tensors[i].chunks[c].n_rows * e->tensors[i].dims[1];
            e->max_chunk_floats = f > e->max_chunk_floats ? f : e->max_chunk_floats;
        }
    e->max_ctx = e->o.max_ctx ? e->o.max_ctx : e->hp.max_pos;
    if (e->o.attn_sparsity < 0 || e->o.attn_sparsity > 1)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "--attn-sparsity %g: must be in (0, 1]",
                          (double)e->o.attn_sparsity);
    if (e->o.compress_cache) {
        e->kv_codec = fg_codec_quant(4, 64, 1);
        e->kv_row = fg_opt_kv_row_bytes(&e->kv_codec, e->hp.hidden);
    }
    if (e->max_ctx > e->hp.max_pos)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "prompt + generation of %u tokens exceeds the "
                          "model's %u positions", e->max_ctx, e->hp.max_pos);
    plan p = {0, 0, 0, 0};
    fg_pager_policy pol;
    uint64_t max_f32 = max_f32_floats(e);
    if ((rc = make_plan(e, &p, &pol, err)) || (rc = open_pager(e, &p, &pol, err)) ||
        (rc = alloc_buffers(e, max_f32, err)))
        return rc;
    if ((rc = fg_par_create(e->o.threads > 0 ? (uint32_t)e->o.threads : 0, &e->par, err)))
        return rc;
    return fg_backend_cpu_create(e->o.threads, &e->be, err);
}

/* ---- --compress-weight on a store that is not 4-bit: quantize at load ---- */

static int not_q4(void *ctx, const fg_store_tensor *t)
{
    *(int *)ctx |= t->n_dims >= 2 && t->codec.id != FG_CODEC_Q4;
    return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* Quantize the store at dir into a new temporary store (its path into tmp, "" when none was
 * needed): every matrix to 4-bit groups of 64 along the output channels, as fg-convert
 * --compress-weight writes them. The caller removes tmp once the engine has its files open. */
static int quantize_at_load(fg_engine *e, const char *dir, char *tmp, size_t cap, fg_err *err)
{
    fg_store *s;
    int need = 0, rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, err);
    if (rc == FG_OK)
        rc = fg_store_tensor_iter(s, not_q4, &need, err);
    fg_store_close(s);
    tmp[0] = 0;
    if (rc || !need)
        return rc;
    const char *od = e->o.offload_dir ? e->o.offload_dir : getenv("TMPDIR");
    snprintf(tmp, cap, "%s/fg-q4-XXXXXX", od && *od ? od : "/tmp");
    if (!mkdtemp(tmp)) {
        rc = fg_err_sys(err, FG_ERR_IO, errno, "--compress-weight: cannot create a temporary "
                        "store in %s", od && *od ? od : "/tmp");
        tmp[0] = 0;
        return rc;
    }
    fg_convert_opts co = {1, 0, -1, NULL, 0, e->o.progress, e->o.progress_ctx};
    fg_convert_report rep;
    rc = fg_convert_store(dir, tmp, &co, &rep, err);
    if (rc == FG_OK && e->o.notice) {
        char line[512], a[32], b[32];
        snprintf(line, sizeof line, "quantized the weights to 4-bit at load: %s -> %s in %.1f s "
                 "(a temporary store in %s, removed once open)",
                 fg_fmt_bytes((double)rep.source_bytes, a, sizeof a),
                 fg_fmt_bytes((double)rep.stored_bytes, b, sizeof b), rep.seconds, tmp);
        e->o.notice(e->o.notice_ctx, line);
    }
    return rc;
}

int fg_engine_open(const char *dir, const fg_engine_opts *o, fg_engine **out, fg_err *err)
{
    fg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    e->o = *o;
    e->t_open = fg_now();
    char tmp[4096] = "";
    int rc = o->compress_weight ? quantize_at_load(e, dir, tmp, sizeof tmp, err) : FG_OK;
    if (rc == FG_OK)
        rc = engine_init(e, tmp[0] ? tmp : dir, err);
    if (tmp[0]) /* the pager and the catalog hold their files open: the names can go */
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc) {
        e->o.trace_path = NULL;
        fg_engine_close(e);
        return rc;
    }
    *out = e;
    return FG_OK;
}

void fg_engine_close(fg_engine *e)
{
    if (!e)
        return;
    if (e->o.trace_path) {
        fg_err err;
        if (fg_trace_write(e, e->o.trace_path, &err) && e->o.notice)
            e->o.notice(e->o.notice_ctx, err.msg);
    }
    fg_pager_close(e->pager);
    fg_store_close(e->store);
    fg_tok_free(e->tok);
    fg_backend_free(e->be);
    fg_par_free(e->par);
    fg_opt_ws_free(e->ws);
    fg_sample_scratch_free(e->sampler);
    for (uint32_t i = 0; i < e->n_tensors; i++)
        free(e->tensors[i].chunks);
    free(e->tensors);
    free(e->units);
    free(e->unit_f32);
    free(e->chunk_f32);
    free(e->tok_rows);
    free(e->blk_hidden);
    free(e->blk_ids);
    free(e->blk_pos);
    free(e->kv_tmp);
    free(e->logits);
    free(e->head_tmp);
    free(e->head_x);
    free(e->valid);
    free(e->ids);
    free(e->pos);
    free(e->spans);
    free(e);
}

const fg_opt_hparams *fg_engine_hparams(const fg_engine *e) { return &e->hp; }
fg_tok *fg_engine_tokenizer(fg_engine *e) { return e->tok; }
uint32_t fg_engine_block_size(const fg_engine *e) { return e->gbs * e->ngb; }

void fg_engine_batching(const fg_engine *e, uint32_t *gbs, uint32_t *ngb)
{
    *gbs = e->gbs;
    *ngb = e->ngb;
}

void fg_engine_stats_get(const fg_engine *e, fg_engine_stats *out)
{
    memset(out, 0, sizeof *out);
    fg_pager_stats_get(e->pager, &out->pager);
    out->weight_bytes_converted = e->converted;
    out->compute_s = e->compute_s;
    out->load_wait_s = e->wait_s;
    out->ram_peak_planned = e->planned;
}

void fg_engine_span(fg_engine *e, const char *name, double t0, int32_t u, int32_t batch,
                    int32_t step)
{
    if (!e->o.trace_path)
        return;
    if (e->n_spans == e->cap_spans) {
        size_t cap = e->cap_spans ? e->cap_spans * 2 : 4096;
        span *p = realloc(e->spans, cap * sizeof *p);
        if (!p)
            return; /* tracing is best effort */
        e->spans = p;
        e->cap_spans = cap;
    }
    e->spans[e->n_spans++] = (span){name, t0, fg_now(), u, batch, step};
}

/* ---- weight access ---- */

static void prefetch_chunk(fg_engine *e, const wtensor *t, uint32_t c)
{
    fg_pager_ticket tk;
    if (c < t->n_chunks)
        fg_pager_prefetch(e->pager, t->first_id + c, FG_TIER_HOST, &tk, NULL);
}

int fg_engine_unit_prefetch(fg_engine *e, uint32_t u)
{
    const unit *un = &e->units[u];
    for (uint32_t i = 0; i < un->n_t; i++) {
        if (un->t[i] < 0)
            continue;
        const wtensor *t = &e->tensors[un->t[i]];
        /* a streamed tensor fetches each next chunk as it goes (fg_engine_head); the rows a
         * gather needs are known only then: prefetching them whole would read the table */
        uint32_t n = streamed(un, i) ? (un->kind == U_HEAD) : t->n_chunks;
        for (uint32_t c = 0; c < n; c++) {
            fg_pager_ticket tk;
            if (fg_pager_prefetch(e->pager, t->first_id + c, FG_TIER_HOST, &tk, NULL))
                return FG_OK; /* no room now: the acquire will load it */
        }
    }
    return FG_OK;
}

/* Decode chunk c of t (acquired through the pager) into dst [n_rows, dims[1]] f32. */
/* f16 -> f32 of n values, split across the helper threads in 64-value-aligned parts (the
 * conversion is bound by memory bandwidth, which one core does not saturate). */
typedef struct conv_job {
    const void *src;
    float *dst;
    uint64_t n;
} conv_job;

static void conv_part(void *arg, uint32_t part, uint32_t n_parts)
{
    const conv_job *j = arg;
    uint64_t per = ((j->n + n_parts - 1) / n_parts + 63) & ~63ull, a = per * part;
    uint64_t b = a + per < j->n ? a + per : j->n;
    if (a < b)
        fg_f16_to_f32((const uint16_t *)j->src + a, j->dst + a, b - a, FG_QUANT_ISA_AUTO);
}

/* 4-bit/8-bit decode of a chunk's rows split across the helper threads in parts of whole
 * row quanta (a group of rows for axis-0 groups, one row otherwise), whose bytes are
 * contiguous in the chunk (SPEC 6: groups stored row-block outer). */
#define QCONV_PARTS 64
typedef struct qconv_job {
    const wtensor *t;
    const uint8_t *src;
    float *dst;
    uint64_t n_rows, q, qbytes; /* rows; rows per quantum; bytes per quantum */
    int rc[QCONV_PARTS];
} qconv_job;

static void qconv_part(void *arg, uint32_t part, uint32_t n_parts)
{
    qconv_job *j = arg;
    uint32_t parts = n_parts < QCONV_PARTS ? n_parts : QCONV_PARTS; /* the rest idle */
    uint64_t quanta = (j->n_rows + j->q - 1) / j->q, per = (quanta + parts - 1) / parts;
    uint64_t r0 = per * part * j->q, r1 = r0 + per * j->q < j->n_rows ? r0 + per * j->q : j->n_rows;
    if (part >= parts || r0 >= r1)
        return;
    fg_qview v;
    int rc = fg_codec_qview(&j->t->codec, j->t->n_dims, j->t->dims, r1 - r0, &v, NULL);
    if (rc == FG_OK)
        rc = fg_quant_decode(&j->t->codec, &v, j->src + r0 / j->q * j->qbytes,
                             v.n_groups * v.group_bytes, j->dst + r0 * j->t->dims[1],
                             FG_CODEC_F32, 0, FG_QUANT_ISA_AUTO, NULL);
    j->rc[part] = rc;
}

static int decode_chunk(fg_engine *e, const wtensor *t, uint32_t c, float *dst, fg_err *err)
{
    fg_pager_view v;
    double t0 = fg_now();
    int rc = fg_pager_acquire(e->pager, t->first_id + c, FG_TIER_DISK, &v, err);
    e->wait_s += fg_now() - t0;
    if (rc)
        return rc;
    const fg_fgt_chunk_info *ci = &t->chunks[c];
    uint64_t n = ci->n_rows * t->dims[1];
    switch (t->codec.id) {
    case FG_CODEC_F32: memcpy(dst, v.ptr, n * 4); break;
    case FG_CODEC_F16: {
        conv_job j = {v.ptr, dst, n};
        fg_par_run(e->par, conv_part, &j);
        break;
    }
    case FG_CODEC_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)((const uint16_t *)v.ptr)[i] << 16;
            memcpy(&dst[i], &bits, 4);
        }
        break;
    default: {
        qconv_job j = {t, v.ptr, dst, ci->n_rows, fg_codec_row_quantum(&t->codec, t->n_dims), 0,
                       {0}};
        fg_qview q;
        rc = fg_codec_qview(&t->codec, t->n_dims, t->dims, j.q, &q, err);
        j.qbytes = q.n_groups * q.group_bytes;
        if (rc == FG_OK)
            fg_par_run(e->par, qconv_part, &j);
        for (uint32_t k = 0; rc == FG_OK && k < QCONV_PARTS; k++)
            if (j.rc[k])
                rc = fg_err_set(err, j.rc[k], "decoding chunk %u of tensor '%s' failed", c,
                                t->name);
        break;
    }
    }
    e->converted += n * 4;
    fg_err rerr;
    int rc2 = fg_pager_release(e->pager, &v, 0, &rerr);
    if (rc == FG_OK && rc2) {
        if (err)
            *err = rerr;
        rc = rc2;
    }
    return rc;
}

static int materialize(fg_engine *e, int ti, float *dst, fg_err *err)
{
    const wtensor *t = &e->tensors[ti];
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        int rc = decode_chunk(e, t, c, dst + t->chunks[c].first_row * t->dims[1], err);
        if (rc)
            return rc;
    }
    return FG_OK;
}

/* fg_weight.piece for a piecewise tensor: chunk i decoded into e->chunk_f32 (the pager loads
 * it when it is not resident yet; the unit's prefetch normally has). */
static int weight_piece(void *ctx, uint32_t i, const float **rows, uint64_t *first, uint64_t *n,
                        fg_err *err)
{
    const wsrc *w = ctx;
    const wtensor *t = &w->e->tensors[w->t];
    if (i >= t->n_chunks)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "tensor '%s' has %u chunks, not %u", t->name,
                          t->n_chunks, i + 1);
    *rows = w->e->chunk_f32;
    *first = t->chunks[i].first_row;
    *n = t->chunks[i].n_rows;
    return decode_chunk(w->e, t, i, w->e->chunk_f32, err);
}

int fg_engine_unit_load(fg_engine *e, uint32_t u, void *wstruct, float *dst, fg_err *err)
{
    const unit *un = &e->units[u];
    const float *f[UNIT_MAX_TENSORS] = {0};
    fg_weight pw[UNIT_MAX_TENSORS];
    memset(pw, 0, sizeof pw);
    for (uint32_t i = 0; i < un->n_t; i++) {
        if (streamed(un, i) || un->t[i] < 0)
            continue;
        if (piecewise(un, i)) { /* attention and MLP units alternate: (u & 1) keeps them apart */
            wsrc *w = &e->wsrc[(u & 1) * UNIT_MAX_TENSORS + i];
            *w = (wsrc){e, un->t[i]};
            pw[i] = (fg_weight){NULL, weight_piece, w, e->tensors[un->t[i]].n_chunks};
            continue;
        }
        int rc = materialize(e, un->t[i], dst, err);
        if (rc)
            return rc;
        f[i] = dst;
        dst += floats_of(e, un->t[i]);
    }
    switch (un->kind) {
    case U_EMBED: { /* tok_rows: gathered by the caller */
        fg_opt_embed_w *w = wstruct;
        w->pos = f[1], w->proj_in = f[2];
        break;
    }
    case U_ATTN:
        *(fg_opt_attn_w *)wstruct = (fg_opt_attn_w){f[0], f[1], pw[2], f[3], pw[4], f[5],
                                                    pw[6], f[7], pw[8], f[9]};
        break;
    case U_MLP:
        *(fg_opt_mlp_w *)wstruct = (fg_opt_mlp_w){f[0], f[1], pw[2], f[3], pw[4], f[5]};
        break;
    default: /* the LM head itself streams (fg_engine_head) */
        *(fg_opt_head_w *)wstruct = (fg_opt_head_w){f[0], f[1], f[2], NULL};
        break;
    }
    return FG_OK;
}

uint32_t fg_engine_span_of(const fg_engine *e, uint32_t u)
{
    return span_of(e, u);
}

/* Chunk of tensor t holding row r (binary search over first_row). */
static uint32_t chunk_of_row(const wtensor *t, uint64_t r)
{
    uint32_t lo = 0, hi = t->n_chunks;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (t->chunks[mid].first_row <= r)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int chunk_needed(const wtensor *t, uint32_t c, const int32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && chunk_of_row(t, (uint64_t)ids[i]) == c)
            return 1;
    return 0;
}

int fg_engine_gather(fg_engine *e, const int32_t *ids, uint32_t n, fg_err *err)
{
    const wtensor *t = &e->tensors[e->units[0].t[0]];
    uint64_t width = t->dims[1];
    /* with overlap, first ask for every needed chunk so the reads run at full queue depth
     * rather than one chunk at a time (a prefetch that finds no room is dropped: that chunk
     * loads below); then decode each needed chunk once and copy the rows of the ids it holds */
    for (uint32_t c = 0; e->o.overlap && c < t->n_chunks; c++)
        if (chunk_needed(t, c, ids, n))
            prefetch_chunk(e, t, c);
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        const fg_fgt_chunk_info *ci = &t->chunks[c];
        if (!chunk_needed(t, c, ids, n))
            continue;
        int rc = decode_chunk(e, t, c, e->chunk_f32, err);
        if (rc)
            return rc;
        for (uint32_t i = 0; i < n; i++)
            if ((uint64_t)ids[i] >= ci->first_row && (uint64_t)ids[i] < ci->first_row + ci->n_rows)
                memcpy(e->tok_rows + (size_t)i * width,
                       e->chunk_f32 + ((uint64_t)ids[i] - ci->first_row) * width, width * 4);
    }
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint64_t)ids[i] >= t->dims[0])
            return fg_err_set(err, FG_ERR_INVALID_ARG, "token id %d outside the vocabulary of %llu",
                              ids[i], (unsigned long long)t->dims[0]);
    return FG_OK;
}

void fg_engine_head_put(fg_engine *e, uint32_t row, const float *hidden)
{
    memcpy(e->head_x + (size_t)row * e->hp.hidden, hidden, (size_t)e->hp.hidden * 4);
}

int fg_engine_head(fg_engine *e, const fg_opt_head_w *hw, uint32_t row0, uint32_t n, fg_err *err)
{
    const unit *un = &e->units[e->n_units - 1];
    const wtensor *t = &e->tensors[un->t[3]];
    uint32_t h = e->hp.hidden, ed = e->hp.embed_dim, V = e->hp.vocab_size;
    if (row0 + n > e->logit_rows)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "head over rows %u..%u (at most %u)", row0,
                          row0 + n, e->logit_rows);
    float *x = e->head_x + (size_t)row0 * h, *y = e->head_x + (size_t)e->logit_rows * h;
    if (hw->ln_w)
        e->be->iface->layernorm(e->be, x, hw->ln_w, hw->ln_b, x, n, h, 1e-5f);
    if (hw->proj_out) {
        e->be->iface->linear(e->be, x, hw->proj_out, NULL, y, n, ed, h);
        x = y;
    }
    for (uint32_t c = 0; c < t->n_chunks; c++) {
        const fg_fgt_chunk_info *ci = &t->chunks[c];
        for (uint32_t d = 1; e->o.overlap && d <= FG_HEAD_AHEAD; d++)
            prefetch_chunk(e, t, c + d); /* read the next ones while this one multiplies */
        int rc = decode_chunk(e, t, c, e->chunk_f32, err);
        if (rc)
            return rc;
        e->be->iface->linear(e->be, x, e->chunk_f32, NULL, e->head_tmp, n, (uint32_t)ci->n_rows,
                             ed);
        for (uint32_t r = 0; r < n; r++)
            memcpy(e->logits + (size_t)(row0 + r) * V + ci->first_row,
                   e->head_tmp + (size_t)r * ci->n_rows, ci->n_rows * 4);
    }
    return FG_OK;
}
