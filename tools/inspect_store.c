/* inspect_store.c - the store half of fg-inspect: given a store directory, show its files,
 * tensors, chunks, metadata blobs and KV page usage with sizes, as a table or JSON; --verify
 * runs fg_store_verify. The store is opened read-only, so this works while a writer runs. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "inspect_store.h"
#include "model_open.h"
#include "inspect_util.h"
#include "store.h"

typedef struct ictx {
    fg_store *s;
    int json, chunks, first;
    uint64_t *kv_used;   /* [max file id + 1] pages mapped per page file */
    uint32_t kv_cap;
    uint64_t jobs[64][2]; /* (job, pages) for the first 64 jobs */
    int n_jobs;
} ictx;

static void jstr(const char *s) { iu_json_str(s); }

static void shape(const fg_store_tensor *t, char *b, size_t n) { iu_shape(t->n_dims, t->dims, b, n); }

static void codec(const fg_codec *c, char *b, size_t n) { iu_codec(c, 0, b, n); }

static int kv_count(void *vctx, const fg_store_kv_page *p)
{
    ictx *c = vctx;
    if (p->file_id < c->kv_cap)
        c->kv_used[p->file_id]++;
    int j;
    for (j = 0; j < c->n_jobs && c->jobs[j][0] != p->key.job; j++)
        ;
    if (j == c->n_jobs && j < 64)
        c->jobs[c->n_jobs++][0] = p->key.job;
    if (j < 64)
        c->jobs[j][1]++;
    return 0;
}

static int max_id(void *vctx, const fg_store_file *f)
{
    ictx *c = vctx;
    if (f->id + 1 > c->kv_cap)
        c->kv_cap = f->id + 1;
    return 0;
}

/* The bytes file f takes on disk (its allocated blocks: less than its size when it has holes,
 * as a synth --zero-weights store's files do); UINT64_MAX when it cannot be stat'ed. */
static uint64_t disk_bytes(const ictx *c, const fg_store_file *f)
{
    char path[4200];
    struct stat st;
    if (fg_store_file_path(c->s, f->id, f->kv, path, sizeof path) || stat(path, &st))
        return UINT64_MAX;
    return (uint64_t)st.st_blocks * 512;
}

static int show_file(void *vctx, const fg_store_file *f)
{
    ictx *c = vctx;
    char name[64];
    snprintf(name, sizeof name, f->kv ? "kv-%06u.pages" : "weights-%06u.fgt", f->id);
    uint64_t disk = disk_bytes(c, f);
    if (c->json) {
        printf("%s\n  {\"name\": \"%s\", \"kind\": \"%s\", \"bytes\": %" PRIu64, c->first ? "" : ",",
               name, f->kv ? "kv" : "weights", f->size);
        if (disk != UINT64_MAX)
            printf(", \"disk_bytes\": %" PRIu64, disk);
        if (f->kv)
            printf(", \"slots\": %u, \"used\": %" PRIu64 "}", f->slots, c->kv_used[f->id]);
        else
            printf(", \"generation\": %" PRIu64 ", \"batch\": %" PRIu64 ", \"part\": %u, "
                   "\"parts\": %u}", f->generation, f->batch, f->part, f->parts);
    } else if (f->kv) {
        printf("  %-20s %14" PRIu64 "  slots %u, used %" PRIu64 ", free %" PRIu64 "\n", name,
               f->size, f->slots, c->kv_used[f->id], f->slots - c->kv_used[f->id]);
    } else {
        printf("  %-20s %14" PRIu64 "  batch %" PRIu64 " part %u/%u, generation %" PRIu64 "%s",
               name, f->size, f->batch, f->part + 1, f->parts, f->generation,
               disk < f->size / 2 ? "" : "\n");
        if (disk < f->size / 2)
            printf(", sparse: %" PRIu64 " bytes on disk\n", disk);
    }
    c->first = 0;
    return 0;
}

static int show_tensor(void *vctx, const fg_store_tensor *t)
{
    ictx *c = vctx;
    char sh[160], co[48];
    shape(t, sh, sizeof sh);
    codec(&t->codec, co, sizeof co);
    if (!c->json) {
        printf("  %-44s %-14s %-22s %6u %12" PRIu64 "  weights-%06u.fgt#%u\n", t->name, co, sh,
               t->n_chunks, t->payload_bytes, t->file_id, t->file_index);
        for (uint32_t k = 0; c->chunks && k < t->n_chunks; k++)
            printf("      chunk %-5u offset %-12" PRIu64 " length %-10" PRIu64 " rows %" PRIu64
                   "+%" PRIu64 " xxh3 %016" PRIx64 "\n", k, t->chunks[k].offset,
                   t->chunks[k].length, t->chunks[k].first_row, t->chunks[k].n_rows,
                   t->chunks[k].xxh3);
        return 0;
    }
    printf("%s\n  {\"name\": ", c->first ? "" : ",");
    jstr(t->name);
    printf(", \"codec\": \"%s\", \"shape\": %s, \"bytes\": %" PRIu64 ", \"file\": %u, "
           "\"index\": %u, \"batch\": %" PRIu64 ", \"digest\": \"%016" PRIx64 "\", \"n_chunks\": %u",
           fg_codec_name(t->codec.id), sh, t->payload_bytes, t->file_id, t->file_index, t->batch,
           t->digest, t->n_chunks);
    if (c->chunks) {
        printf(", \"chunks\": [");
        for (uint32_t k = 0; k < t->n_chunks; k++)
            printf("%s{\"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"first_row\": %" PRIu64
                   ", \"rows\": %" PRIu64 ", \"xxh3\": \"%016" PRIx64 "\"}", k ? ", " : "",
                   t->chunks[k].offset, t->chunks[k].length, t->chunks[k].first_row,
                   t->chunks[k].n_rows, t->chunks[k].xxh3);
        printf("]");
    }
    printf("}");
    c->first = 0;
    return 0;
}

static int show_meta(void *vctx, const char *key, size_t len)
{
    ictx *c = vctx;
    if (c->json) {
        printf("%s", c->first ? "" : ", ");
        jstr(key);
        printf(": {\"bytes\": %zu}", len);
    } else {
        printf("  %-44s %zu bytes\n", key, len);
    }
    c->first = 0;
    return 0;
}

static void show_info(const fg_store_info *i, int json)
{
    if (json) {
        printf("{\"store\": \"%s\", \"kv_page_size\": %u, \"kv_pages_per_file\": %u, "
               "\"max_file_bytes\": %" PRIu64 ", \"map_size\": %" PRIu64 ", \"map_used\": %" PRIu64
               ", \"n_tensors\": %" PRIu64 ", \"n_chunks\": %" PRIu64 ", \"weight_bytes\": %" PRIu64
               ", \"kv\": {\"slots\": %" PRIu64 ", \"used\": %" PRIu64 ", \"free\": %" PRIu64
               ", \"dirty\": %" PRIu64 ", \"generation\": %" PRIu64 "}",
               i->uuid, i->kv_page_size, i->kv_pages_per_file, i->max_file_bytes, i->map_size,
               i->map_used, i->n_tensors, i->n_chunks, i->weight_bytes, i->kv_slots, i->kv_used,
               i->kv_free, i->kv_dirty, i->kv_generation);
        return;
    }
    printf("store %s  kv pages %u bytes x %u per file  weight files rotate at %" PRIu64 " bytes\n"
           "catalog map %" PRIu64 " bytes (%" PRIu64 " used)\n"
           "%u weight files, %" PRIu64 " bytes; %" PRIu64 " tensors, %" PRIu64 " chunks; %" PRIu64
           " metadata blobs\n%u KV page files: %" PRIu64 " slots, %" PRIu64 " used (%" PRIu64
           " bytes), %" PRIu64 " free (%" PRIu64 " awaiting wipe), last generation %" PRIu64 "\n",
           i->uuid, i->kv_page_size, i->kv_pages_per_file, i->max_file_bytes, i->map_size,
           i->map_used, i->n_weight_files, i->weight_bytes, i->n_tensors, i->n_chunks, i->n_meta,
           i->n_kv_files, i->kv_slots, i->kv_used, i->kv_used * i->kv_page_size, i->kv_free,
           i->kv_dirty, i->kv_generation);
}

/* What the model line says beyond the shapes: a sliding window, a mixture's experts, soft caps
 * or attention sinks, the stop ids (", "-separated for JSON). */
typedef struct mdesc {
    uint32_t nw, sparse;   /* windowed layers, a mixture of experts' sparse layers */
    char eos[FG_MODEL_MAX_EOS * 12 + 1];
    size_t n_eos;          /* bytes in eos (0: no stop id) */
    const char *scaling;   /* the rotary scaling's name, or "" */
    char window[64], moe[224], caps[80];
} mdesc;

static void describe(const fg_hparams *hp, int json, mdesc *d)
{
    memset(d, 0, sizeof *d);
    for (uint32_t i = 0; i < hp->n_eos && hp->eos_ids[i] >= 0; i++)
        d->n_eos += (size_t)snprintf(d->eos + d->n_eos, sizeof d->eos - d->n_eos, "%s%d",
                                     d->n_eos ? (json ? ", " : " ") : "", hp->eos_ids[i]);
    d->scaling = hp->pos == FG_POS_ROPE && hp->rope.scaling != FG_ROPE_NONE
               ? fg_rope_scaling_name(hp->rope.scaling) : "";
    d->nw = fg_model_windowed_layers(hp);
    if (d->nw == hp->n_layers && d->nw)
        snprintf(d->window, sizeof d->window, ", sliding window %u", hp->sliding_window);
    else if (d->nw)
        snprintf(d->window, sizeof d->window, ", sliding window %u on %u of %u layers",
                 hp->sliding_window, d->nw, hp->n_layers);
    for (uint32_t l = 0; l < hp->n_layers; l++)
        d->sparse += fg_model_layer_sparse(hp, l) != 0;
    char glu[80] = "";
    if (hp->act == FG_ACT_SWIGLU_OAI) /* gpt-oss */
        snprintf(glu, sizeof glu, ", biased, clamped SwiGLU (limit %g, alpha %g)",
                 hp->act_limit, hp->act_alpha);
    if (d->sparse)
        snprintf(d->moe, sizeof d->moe, ", %u experts (top %u%s) of %u%s%s on %u of %u layers",
                 hp->n_experts, hp->top_k, hp->norm_topk ? ", renormalized" : "", hp->moe_ffn,
                 hp->shared_ffn ? " + a shared one" : "", glu, d->sparse, hp->n_layers);
    if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        snprintf(d->caps, sizeof d->caps, "; soft-capped: scores %g, logits %g",
                 hp->attn_softcap, hp->final_softcap);
    else if (hp->attn_sinks)
        snprintf(d->caps, sizeof d->caps, "; attention sinks");
}

static void model_json(const fg_hparams *hp, const mdesc *d, const char *tok)
{
    uint32_t sp = d->sparse;
    printf(",\n \"model\": {\"family\": \"%s\", \"layers\": %u, \"hidden\": %u, "
           "\"heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"qk_norm\": %s, "
           "\"ffn\": %u, \"vocab\": %u, \"max_positions\": %u, \"rope_scaling\": \"%s\", "
           "\"rotary_dims\": %u, \"sliding_window\": %u, \"windowed_layers\": %u, "
           "\"tied_head\": %s, \"eos_ids\": [%s], \"tokenizer\": \"%s\", "
           "\"experts\": %u, \"top_k\": %u, \"expert_ffn\": %u, \"shared_ffn\": %u, "
           "\"sparse_layers\": %u, \"attn_softcap\": %g, \"final_softcap\": %g, "
           "\"attn_sinks\": %s, \"swiglu_limit\": %g}", hp->arch,
           hp->n_layers, hp->hidden, hp->n_heads, hp->n_kv_heads, hp->head_dim,
           hp->qk_norm ? "true" : "false", hp->ffn, hp->vocab_size, hp->max_pos,
           *d->scaling ? d->scaling : "none", hp->pos == FG_POS_ROPE ? hp->rope.rot_dim : 0,
           hp->sliding_window, d->nw, hp->tied_head ? "true" : "false", d->eos, tok,
           sp ? hp->n_experts : 0, sp ? hp->top_k : 0, sp ? hp->moe_ffn : 0,
           sp ? hp->shared_ffn : 0, sp, hp->attn_softcap, hp->final_softcap,
           hp->attn_sinks ? "true" : "false",
           hp->act == FG_ACT_SWIGLU_OAI ? hp->act_limit : 0.0);
}

static void model_text(const fg_hparams *hp, const mdesc *d, const char *tok, int from_gen)
{
    char part[48] = "", local[64] = "";
    const char *scaling = d->scaling;
    if (hp->pos == FG_POS_ROPE && hp->rope.rot_dim < hp->head_dim)
        snprintf(part, sizeof part, " on %u of %u dims", hp->rope.rot_dim, hp->head_dim);
    if (hp->local_rope) /* Gemma 3 */
        snprintf(local, sizeof local, "; sliding layers: base %g, %s", hp->rope_local.theta,
                 hp->rope_local.scaling ? fg_rope_scaling_name(hp->rope_local.scaling)
                                        : "no scaling");
    printf("model %s: %u layers, hidden %u, heads %u (kv %u) x %u%s, ffn %u%s, vocab %u, "
           "positions %u (%s%s%s%s%s%s)%s%s%s; stops at %s%s; tokenizer %s\n", hp->arch,
           hp->n_layers, hp->hidden, hp->n_heads, hp->n_kv_heads, hp->head_dim,
           hp->qk_norm ? " with q/k norms" : "", hp->ffn, d->moe, hp->vocab_size, hp->max_pos,
           hp->pos == FG_POS_ROPE ? "rotary" : "learned", part, *scaling ? ", " : "", scaling,
           *scaling ? " scaling" : "", local, d->window, hp->tied_head ? ", tied head" : "",
           d->caps, d->n_eos ? d->eos : "no id", from_gen ? " (generation_config.json)" : "",
           tok);
}

/* The model the store holds (its config.json through model/'s table, with the stop set of its
 * generation_config.json when it has one) and tokenizer kind. */
static void show_model(fg_store *s, int json)
{
    void *tk = NULL;
    size_t tn = 0;
    fg_err err;
    fg_model *md = NULL;
    int rc = fg_model_open(s, &md, &err);
    if (rc == FG_ERR_NOT_FOUND)
        return; /* not a model store */
    void *zw = NULL;
    size_t zn = 0;
    if (fg_store_meta_get(s, "synth.weights", &zw, &zn, &err))
        zw = NULL;
    int zero = zw && zn == 4 && !memcmp(zw, "zero", 4);
    free(zw);
    if (fg_store_meta_get(s, "tokenizer.model", &tk, &tn, &err))
        tk = NULL;
    char tok[32] = "none";
    if (tk)
        snprintf(tok, sizeof tok, "%.*s", (int)(tn < 31 ? tn : 31), (const char *)tk);
    free(tk);
    fg_hparams hp;
    mdesc d;
    memset(&hp, 0, sizeof hp);
    if (rc == FG_OK) {
        hp = *fg_model_hparams(md);
        describe(&hp, json, &d);
    }
    int from_gen = rc == FG_OK && fg_model_stop_from_generation(md);
    fg_model_close(md);
    if (json && rc) {
        printf(",\n \"model\": {\"error\": ");
        jstr(err.msg);
        printf("}");
    } else if (json) {
        model_json(&hp, &d, tok);
    } else if (rc) {
        printf("model: %s\n", err.msg);
    } else {
        model_text(&hp, &d, tok, from_gen);
    }
    /* fg-convert synth --zero-weights: said, so no one takes its run times for a model's */
    if (json)
        printf(",\n \"zero_weights\": %s", zero ? "true" : "false");
    else if (zero)
        printf("weights: all zero (fg-convert synth --zero-weights): matrices and biases are "
               "holes in sparse files, read as zeros at no disk cost; for plans, not for "
               "timings or output\n");
}

static int run(fg_store *s, int json, int verify, int chunks, fg_err *err)
{
    fg_store_info info;
    fg_store_verify_report rep;
    ictx c = {s, json, chunks, 1, NULL, 0, {{0}}, 0};
    int rc = verify ? fg_store_verify(s, &rep, err) : FG_OK;
    if (!rc)
        rc = fg_store_info_get(s, &info, err);
    if (!rc)
        rc = fg_store_file_iter(s, max_id, &c, err);
    if (!rc && !(c.kv_used = calloc(c.kv_cap + 1, sizeof *c.kv_used)))
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = fg_store_kv_iter(s, UINT64_MAX, kv_count, &c, err);
    if (rc) {
        free(c.kv_used);
        return rc;
    }
    show_info(&info, json);
    show_model(s, json);
    printf(json ? ",\n \"files\": [" : "\nfiles:\n");
    rc = fg_store_file_iter(s, show_file, &c, err);
    printf(json ? "],\n \"tensors\": [" : "\ntensors: %-35s %-14s %-22s %6s %12s  %s\n", "name",
           "codec", "shape", "chunks", "bytes", "file");
    c.first = 1;
    if (!rc)
        rc = fg_store_tensor_iter(s, show_tensor, &c, err);
    printf(json ? "],\n \"metadata\": {" : "\nmetadata:\n");
    c.first = 1;
    if (!rc)
        rc = fg_store_meta_iter(s, show_meta, &c, err);
    printf(json ? "},\n \"kv_jobs\": [" : "\nKV pages by job:\n");
    for (int j = 0; j < c.n_jobs; j++)
        printf(json ? "%s{\"job\": %" PRIu64 ", \"pages\": %" PRIu64 "}" : "%s  job %" PRIu64
               ": %" PRIu64 " pages\n", json && j ? ", " : "", c.jobs[j][0], c.jobs[j][1]);
    if (json && verify)
        printf("],\n \"verify\": {\"ok\": true, \"files\": %u, \"chunks\": %" PRIu64
               ", \"kv_pages\": %" PRIu64 ", \"orphan_files\": %u}}\n", rep.files, rep.chunks,
               rep.kv_pages, rep.orphan_files);
    else if (json)
        printf("]}\n");
    else if (verify)
        printf("\nverify: ok: %u files, %" PRIu64 " tensors, %" PRIu64 " chunk checksums, %" PRIu64
               " KV pages checked; %u orphan files\n", rep.files, rep.tensors, rep.chunks,
               rep.kv_pages, rep.orphan_files);
    free(c.kv_used);
    return rc;
}

int inspect_store(const char *dir, int json, int verify, int chunks)
{
    fg_store *s;
    fg_err err;
    int rc = fg_store_open(dir, FG_STORE_RDONLY, NULL, &s, &err);
    if (!rc) {
        rc = run(s, json, verify, chunks, &err);
        fg_store_close(s);
    }
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "fg-inspect: %s%s\n", verify ? "verify failed: " : "", err.msg);
        return 1;
    }
    return 0;
}
