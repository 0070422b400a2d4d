/* model.c - the architecture table, config.json dispatch, units and tensor lists, and the
 * strict JSON helpers the family files share (model_int.h).
 *
 * Parsing is strict where a wrong value would silently build a wrong model: shapes must be
 * JSON integers in range, booleans JSON booleans, strings from the supported set. What Python's
 * json module and transformers accept is accepted: null for an optional key is the key absent
 * (its default), 1e-05 is a float, a bound (max_position_embeddings, sliding_window) may be a
 * whole real or an integer past int64 (clamped: fgm_limit), and keys a family does not use are
 * ignored. Every error is one line naming the file and the key.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_json.h"
#include "fg_file.h"
#include "families.h"

/* The table: OPT's entry (opt.c), then the rows of families.c in their order. */
const fg_arch *fg_arch_find(const char *model_type)
{
    if (model_type && !strcmp(model_type, fg_arch_opt.name))
        return &fg_arch_opt;
    const fgm_family *f = fgm_row_find(model_type);
    return f ? &f->arch : NULL;
}

const fg_arch *fg_model_arch(const fg_hparams *hp)
{
    return fg_arch_find(hp->arch);
}

const char *fg_arch_names(void)
{
    static char buf[1024]; /* (about 300 bytes for the 33 entries of today) */
    if (!buf[0])
        for (size_t i = 0, k = 0; i <= fgm_n_rows && k < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "",
                                  i ? fgm_rows[i - 1].arch.name : fg_arch_opt.name);
    return buf;
}

/* ---- JSON helpers ---- */

int fgm_key_err(fg_err *err, const char *label, const char *key, const char *what)
{
    return fg_err_set(err, FG_ERR_CORRUPT, "%s: key %s: %s", label, key, what);
}

/* An integer key in [min, max] into *out: 1 when absent or null (unless required). */
static int int_key(json_t *root, const char *label, const char *key, int required,
                   uint32_t min, uint32_t max, uint32_t *out, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return required ? fgm_key_err(err, label, key, "missing") : 1;
    if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
        json_integer_value(v) > (json_int_t)max) {
        char what[64];
        snprintf(what, sizeof what, "must be an integer in [%u, %u]", min, max);
        return fgm_key_err(err, label, key, what);
    }
    *out = (uint32_t)json_integer_value(v);
    return FG_OK;
}

int fgm_uint(json_t *root, const char *label, const char *key, int required, uint32_t max,
             uint32_t *out, fg_err *err)
{
    return int_key(root, label, key, required, 1, max, out, err);
}

int fgm_count(json_t *root, const char *label, const char *key, uint32_t max, uint32_t *out,
              fg_err *err)
{
    return int_key(root, label, key, 0, 0, max, out, err);
}

/* A bound rather than a shape (max_position_embeddings, sliding_window): nothing is sized from
 * it exactly, so a whole number written as a real (32768.0, or an integer past int64 that
 * fg_json_loadb reads as a real) is taken, and one above max is clamped to max (fg's own limit
 * on any context is lower). A fraction, a negative or a non-number is refused naming the key. */
int fgm_limit(json_t *root, const char *label, const char *key, int required, uint32_t max,
              uint32_t *out, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return required ? fgm_key_err(err, label, key, "missing") : 1;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (!(d >= 1) || d != floor(d))
        return fgm_key_err(err, label, key, "must be a whole number >= 1");
    *out = d > max ? max : (uint32_t)d;
    return FG_OK;
}

/* absent or null: dflt (transformers reads a null flag as unset: the class default) */
int fgm_bool(json_t *root, const char *label, const char *key, int dflt, int *out, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return FG_OK;
    }
    if (!json_is_boolean(v))
        return fgm_key_err(err, label, key, "must be true or false");
    *out = json_is_true(v);
    return FG_OK;
}

int fgm_float(json_t *root, const char *label, const char *key, double lo, double hi, int required,
              float *out, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return required ? fgm_key_err(err, label, key, "missing") : 1;
    double d = json_is_number(v) ? json_number_value(v) : lo - 1;
    if (!(d >= lo && d <= hi)) {
        char what[96];
        snprintf(what, sizeof what, "must be a number in [%g, %g]", lo, hi);
        return fgm_key_err(err, label, key, what);
    }
    *out = (float)d;
    return FG_OK;
}

static int token_of(json_t *v, int32_t *id)
{
    if (json_is_null(v)) {
        *id = -1;
        return 1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return 0;
    *id = (int32_t)json_integer_value(v);
    return 1;
}

int fgm_tokens(json_t *root, const char *label, const char *key, int32_t dflt, int32_t *ids,
               uint32_t cap, uint32_t *n, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    *n = 1;
    ids[0] = dflt;
    if (!v)
        return FG_OK;
    if (!json_is_array(v))
        return token_of(v, &ids[0]) ? FG_OK
                                    : fgm_key_err(err, label, key, "must be a non-negative "
                                                  "integer, null or a list of them");
    size_t k = json_array_size(v);
    if (k == 0 || k > cap)
        return fgm_key_err(err, label, key, "a list of 1 to 8 token ids");
    for (size_t i = 0; i < k; i++)
        if (!token_of(json_array_get(v, i), &ids[i]) || ids[i] < 0)
            return fgm_key_err(err, label, key, "list entries must be non-negative integers");
    *n = (uint32_t)k;
    return FG_OK;
}

int fgm_enum(json_t *root, const char *label, const char *key, const char *const *want,
             int n_want, int required, int *which, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return required ? fgm_key_err(err, label, key, "missing") : 1;
    for (int i = 0; json_is_string(v) && i < n_want; i++)
        if (!strcmp(json_string_value(v), want[i])) {
            *which = i;
            return FG_OK;
        }
    char what[160];
    size_t k = (size_t)snprintf(what, sizeof what, "is %s%.40s%s; fg supports",
                                json_is_string(v) ? "\"" : "",
                                json_is_string(v) ? json_string_value(v) : "not a string",
                                json_is_string(v) ? "\"" : "");
    for (int i = 0; i < n_want && k < sizeof what; i++)
        k += (size_t)snprintf(what + k, sizeof what - k, "%s \"%s\"", i ? "," : "", want[i]);
    return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s: %s", label, key, what);
}

int fgm_dtype(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    const char *key = json_object_get(root, "torch_dtype") ? "torch_dtype" : "dtype";
    json_t *v = json_object_get(root, key); /* transformers >= 5 writes "dtype" */
    if (!v || json_is_null(v))
        return FG_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (!s || (strcmp(s, "float16") && strcmp(s, "float32") && strcmp(s, "bfloat16")))
        return fgm_key_err(err, label, key, "must be \"float16\", \"float32\" or \"bfloat16\"");
    snprintf(hp->dtype, sizeof hp->dtype, "%s", s);
    return FG_OK;
}

int fgm_parse(const char *json, size_t len, const char *label,
              int (*fn)(json_t *root, const char *label, fg_hparams *hp, fg_err *err),
              fg_hparams *hp, fg_err *err)
{
    if (len > FGM_CONFIG_MAX_BYTES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: %zu bytes (limit %u)", label, len,
                          FGM_CONFIG_MAX_BYTES);
    json_error_t je;
    json_t *root = fg_json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: invalid JSON: %s (line %d)", label, je.text,
                          je.line);
    int rc = json_is_object(root) ? fn(root, label, hp, err)
                                  : fg_err_set(err, FG_ERR_CORRUPT, "%s: not a JSON object", label);
    json_decref(root);
    return rc;
}

void fgm_spec(fg_tensor_spec *out, uint32_t *n, const char *name, fg_role role, fg_access access,
              uint64_t d0, uint64_t d1)
{
    fg_tensor_spec *s = &out[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->role = role;
    s->access = access;
    s->n_dims = d1 ? 2 : 1;
    s->dims[0] = d0;
    s->dims[1] = d1;
}

/* ---- config dispatch ---- */

static int model_type(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    json_t *v = json_object_get(root, "model_type");
    if (!v)
        return fgm_key_err(err, label, "model_type", "missing");
    if (!json_is_string(v))
        return fgm_key_err(err, label, "model_type", "must be a string");
    if (!fg_arch_find(json_string_value(v)))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key model_type: \"%.40s\" is not a "
                          "family fg runs (fg-convert --help lists them)", label,
                          json_string_value(v));
    snprintf(hp->arch, sizeof hp->arch, "%s", json_string_value(v));
    /* GPTQ, AWQ, bitsandbytes, FP8...: tensors fg cannot read as weights; say so by the key
     * rather than by the first packed tensor's name. A row with traits.mxfp4 (gpt-oss) has its
     * MXFP4 experts read (as the 16-bit values they hold: fg-convert, model_check.c) */
    const fgm_family *f = fgm_row_find(hp->arch);
    json_t *q = json_object_get(root, "quantization_config");
    json_t *m = json_is_object(q) ? json_object_get(q, "quant_method") : NULL;
    if (q && !json_is_null(q) && !(json_is_string(m) && !strcmp(json_string_value(m), "mxfp4") &&
                                   f && f->t.mxfp4)) {
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key quantization_config: a checkpoint "
                          "quantized by another tool (quant_method \"%.32s\") is not supported; "
                          "convert its F16/BF16/F32 original (--compress-weight for 4-bit)",
                          label, json_is_string(m) ? json_string_value(m) : "?");
    }
    return FG_OK;
}

int fg_model_config_parse(const char *json, size_t len, const char *label, fg_hparams *hp,
                          fg_err *err)
{
    memset(hp, 0, sizeof *hp);
    label = label ? label : "config.json";
    int rc = fgm_parse(json, len, label, model_type, hp, err);
    if (rc)
        return rc;
    const fg_arch *a = fg_arch_find(hp->arch);
    rc = a->parse_config(json, len, label, hp, err);
    return rc ? rc : fg_hparams_check(hp, err);
}

/* (hp is fg_model_generation_config_parse's copy: written freely, kept only on success) */
static int generation_eos(json_t *root, const char *label, fg_hparams *hp, fg_err *err)
{
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v))
        return FG_OK; /* config.json's stand */
    int rc = fgm_tokens(root, label, "eos_token_id", -1, hp->eos_ids, FG_MODEL_MAX_EOS,
                        &hp->n_eos, err);
    hp->eos_id = hp->eos_ids[0];
    return rc;
}

int fg_model_generation_config_parse(const char *json, size_t len, const char *label,
                                     fg_hparams *hp, fg_err *err)
{
    fg_hparams h = *hp; /* *hp changes only on success */
    int rc = fgm_parse(json, len, label ? label : "generation_config.json", generation_eos, &h,
                       err);
    if (rc == FG_OK)
        *hp = h;
    return rc;
}

int fg_model_config_load(const char *path, fg_hparams *hp, fg_err *err)
{
    char *buf;
    size_t n;
    int rc = fg_read_regular(path, FGM_CONFIG_MAX_BYTES, &buf, &n, err); /* a FIFO is named */
    if (rc == FG_OK)
        rc = fg_model_config_parse(buf, n, path, hp, err);
    free(buf);
    return rc;
}

int fg_hparams_check(const fg_hparams *c, fg_err *err)
{
    if (!c->vocab_size || !c->hidden || !c->n_layers || !c->ffn || !c->n_heads ||
        !c->n_kv_heads || !c->head_dim || !c->max_pos || !c->embed_dim)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s config: a size is zero (vocab %u, hidden "
                          "%u, layers %u, ffn %u, heads %u/%u of %u, positions %u, embed %u)",
                          c->arch, c->vocab_size, c->hidden, c->n_layers, c->ffn, c->n_heads,
                          c->n_kv_heads, c->head_dim, c->max_pos, c->embed_dim);
    if (c->n_layers > FG_MODEL_MAX_LAYERS || c->hidden > FG_MODEL_MAX_DIM ||
        c->ffn > FG_MODEL_MAX_DIM || c->vocab_size > FG_MODEL_MAX_DIM ||
        (uint64_t)c->n_heads * c->head_dim > FG_MODEL_MAX_DIM)
        return fg_err_set(err, FG_ERR_LIMIT, "%s config: a size exceeds fg's limits", c->arch);
    if (c->n_heads % c->n_kv_heads)
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s config: %u attention heads are not a "
                          "multiple of %u key/value heads", c->arch, c->n_heads, c->n_kv_heads);
    if (c->pos == FG_POS_ROPE && (c->head_dim % 2 || !(c->rope.theta > 0)))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s config: RoPE needs an even head_dim and "
                          "rope_theta > 0", c->arch);
    if (c->n_experts && (c->n_experts > FG_MODEL_MAX_EXPERTS || !c->top_k ||
                         c->top_k > c->n_experts || !c->moe_ffn || c->moe_ffn > FG_MODEL_MAX_DIM ||
                         c->shared_ffn > FG_MODEL_MAX_DIM))
        return fg_err_set(err, FG_ERR_INVALID_ARG, "%s config: a mixture of %u experts (at most "
                          "%u) of width %u routing each token to %u of them (at least 1) is not "
                          "one fg runs", c->arch, c->n_experts, FG_MODEL_MAX_EXPERTS, c->moe_ffn,
                          c->top_k);
    if (!fg_arch_find(c->arch))
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "model_type \"%s\" is not a family fg runs "
                          "(fg-convert --help lists them)", c->arch);
    return FG_OK;
}

/* ---- units and tensors ---- */

uint32_t fg_model_n_units(const fg_hparams *hp)
{
    return 2 * hp->n_layers + 2;
}

fg_unit_kind fg_model_unit_kind(const fg_hparams *hp, uint32_t u, uint32_t *layer)
{
    *layer = u ? (u - 1) / 2 : 0;
    if (u == 0)
        return FG_UNIT_EMBED;
    if (u + 1 == fg_model_n_units(hp)) {
        *layer = 0;
        return FG_UNIT_HEAD;
    }
    return u % 2 ? FG_UNIT_ATTN : FG_UNIT_MLP;
}

uint32_t fg_model_unit_tensors(const fg_hparams *hp, uint32_t u, fg_tensor_spec *out)
{
    const fg_arch *a = fg_model_arch(hp);
    uint32_t layer;
    fg_unit_kind k = fg_model_unit_kind(hp, u, &layer);
    return a ? a->unit_tensors(hp, k, layer, out) : 0;
}

int fg_model_tensors(const fg_hparams *hp, fg_tensor_spec **out, uint32_t *n, fg_err *err)
{
    uint32_t units = fg_model_n_units(hp), k = 0;
    fg_tensor_spec *v = calloc((size_t)units * FG_UNIT_MAX_TENSORS, sizeof *v);
    if (!v)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; u < units; u++)
        k += fg_model_unit_tensors(hp, u, v + k);
    *out = v;
    *n = k;
    return FG_OK;
}

uint64_t fg_tensor_spec_cols(const fg_tensor_spec *s)
{
    return s->n_dims > 1 ? s->dims[1] : 1;
}

uint32_t fg_model_kv_width(const fg_hparams *hp)
{
    return hp->n_kv_heads * hp->head_dim;
}

uint32_t fg_model_kv_planes(const fg_hparams *hp)
{
    return hp->mla ? 1 : 2;
}

uint32_t fg_model_layer_window(const fg_hparams *hp, uint32_t layer)
{
    if (!hp->sliding_window || layer >= FG_MODEL_MAX_LAYERS)
        return 0;
    return (hp->full_layers[layer / 64] >> (layer % 64)) & 1 ? 0 : hp->sliding_window;
}

const fg_rope *fg_model_layer_rope(const fg_hparams *hp, uint32_t layer)
{
    if (layer >= FG_MODEL_MAX_LAYERS)
        return &hp->rope;
    if ((hp->nope_layers[layer / 64] >> (layer % 64)) & 1)
        return NULL;
    int full = (hp->full_layers[layer / 64] >> (layer % 64)) & 1;
    return hp->local_rope && !full ? &hp->rope_local : &hp->rope;
}

int fg_model_layer_sparse(const fg_hparams *hp, uint32_t layer)
{
    return hp->n_experts && layer < FG_MODEL_MAX_LAYERS &&
           !((hp->dense_layers[layer / 64] >> (layer % 64)) & 1);
}

const fg_tensor_spec *fg_model_spec_find(const fg_tensor_spec *spec, uint32_t n,
                                         const char *name)
{
    for (uint32_t i = 0; spec && i < n; i++)
        if (!strcmp(spec[i].name, name))
            return &spec[i];
    return NULL;
}

int fg_role_stays_wide(fg_role r)
{
    return r == FG_ROLE_ROUTER || r == FG_ROLE_SHARED_GATE || r == FG_ROLE_ROUTER_CORR;
}

int fg_role_is_expert(fg_role r)
{
    return r == FG_ROLE_EXP_GATE || r == FG_ROLE_EXP_UP || r == FG_ROLE_EXP_DOWN;
}

double fg_model_expert_share(const fg_hparams *hp, double tokens)
{
    if (!hp->n_experts || hp->top_k >= hp->n_experts)
        return 1;
    return tokens <= 0 ? 0 : 1 - pow(1 - (double)hp->top_k / hp->n_experts, tokens);
}

uint32_t fg_model_windowed_layers(const fg_hparams *hp)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < hp->n_layers; l++)
        n += fg_model_layer_window(hp, l) != 0;
    return n;
}

double fg_model_flops_per_token(const fg_hparams *hp)
{
    double h = hp->hidden, f = hp->ffn, e = hp->embed_dim;
    double q = (double)hp->n_heads * hp->head_dim, kv = fg_model_kv_width(hp);
    double attn = h * (2 * q + 2 * kv), mlp = 0;
    if (hp->mla) { /* q (low-rank or not), kv_a, W_UK and W_UV absorbed, o */
        double H = hp->n_heads, qk = (double)hp->qk_nope_dim + hp->qk_rope_dim;
        double r = hp->kv_lora_rank, ql = hp->q_lora_rank;
        attn = (ql ? h * ql + ql * H * qk : h * H * qk) + h * (r + hp->qk_rope_dim) +
               H * hp->qk_nope_dim * r + H * r * hp->v_head_dim + H * hp->v_head_dim * h;
    }
    for (uint32_t l = 0; l < hp->n_layers; l++) /* a sparse MLP: its token's top_k experts */
        mlp += !fg_model_layer_sparse(hp, l) ? (hp->gated ? 3 : 2) * h * f
             : 3 * h * ((double)hp->top_k * hp->moe_ffn + hp->shared_ffn) +
               h * ((double)hp->n_experts + (hp->shared_ffn ? 1 : 0));
    double proj = hp->embed_dim != hp->hidden ? 2 * h * e : 0;
    return 2 * (hp->n_layers * attn + mlp + proj + (double)hp->vocab_size * e);
}

void fg_model_positions(const uint8_t *valid, uint32_t n, int32_t *positions)
{
    int32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        count += valid[i] ? 1 : 0;
        positions[i] = valid[i] ? count - 1 : -1;
    }
}
