/* opt_config.c - OPT config.json -> fg_opt_config, the expected tensor list, and the check of a
 * checkpoint against it (rules in opt_config.h, from transformers' modeling_opt.py).
 *
 * Parsing is strict where a wrong value would silently build a wrong model: required integers
 * must be JSON integers in range, booleans must be JSON booleans, model_type must be "opt" and
 * activation_function "relu" (the only one fg computes). Keys we do not use are ignored, as
 * transformers does. Every error is one line naming the file and the key.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"
#include "opt_config.h"

static int key_err(fg_err *err, const char *label, const char *key, const char *what)
{
    return fg_err_set(err, FG_ERR_CORRUPT, "%s: key %s: %s", label, key, what);
}

static int get_uint(json_t *root, const char *label, const char *key, int required, uint32_t max,
                    uint32_t *out, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return key_err(err, label, key, "missing");
        return 1; /* caller applies the default */
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (json_int_t)max) {
        char what[64];
        snprintf(what, sizeof what, "must be an integer in [1, %u]", max);
        return key_err(err, label, key, what);
    }
    *out = (uint32_t)json_integer_value(v);
    return FG_OK;
}

static int get_bool(json_t *root, const char *label, const char *key, int dflt, int *out,
                    fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v) {
        *out = dflt;
        return FG_OK;
    }
    if (!json_is_boolean(v))
        return key_err(err, label, key, "must be true or false");
    *out = json_is_true(v);
    return FG_OK;
}

static int get_token(json_t *root, const char *label, const char *key, int64_t dflt, int64_t *out,
                     fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (json_is_array(v)) /* transformers allows a list of eos ids; the first is the id */
        v = json_array_size(v) ? json_array_get(v, 0) : json_null();
    if (!v) {
        *out = dflt;
        return FG_OK;
    }
    if (json_is_null(v)) {
        *out = -1;
        return FG_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return key_err(err, label, key, "must be a non-negative integer or null");
    *out = json_integer_value(v);
    return FG_OK;
}

static int get_str_eq(json_t *root, const char *label, const char *key, const char *want,
                      int required, fg_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v && !required)
        return FG_OK;
    if (!v)
        return key_err(err, label, key, "missing");
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0) {
        char what[128];
        snprintf(what, sizeof what, "is %.40s%s%s; fg supports \"%s\"",
                 json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
                 json_is_string(v) ? "\"" : "", want);
        return fg_err_set(err, FG_ERR_UNSUPPORTED, "%s: key %s: %s", label, key, what);
    }
    return FG_OK;
}

static int get_dtype(json_t *root, const char *label, fg_opt_config *c, fg_err *err)
{
    const char *key = "torch_dtype";
    json_t *v = json_object_get(root, key);
    if (!v) { /* transformers >= 5 writes "dtype" */
        key = "dtype";
        v = json_object_get(root, key);
    }
    if (!v || json_is_null(v))
        return FG_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (!s || (strcmp(s, "float16") && strcmp(s, "float32") && strcmp(s, "bfloat16")))
        return key_err(err, label, key, "must be \"float16\", \"float32\" or \"bfloat16\"");
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", s);
    return FG_OK;
}

static int parse_root(json_t *root, const char *label, fg_opt_config *c, fg_err *err)
{
    int rc;
    if ((rc = get_str_eq(root, label, "model_type", "opt", 1, err)) ||
        (rc = get_str_eq(root, label, "activation_function", "relu", 0, err)))
        return rc;
    const struct { const char *key; uint32_t *dst; uint32_t max; } req[] = {
        {"vocab_size", &c->vocab_size, FG_OPT_MAX_DIM},
        {"hidden_size", &c->hidden_size, FG_OPT_MAX_DIM},
        {"num_hidden_layers", &c->num_hidden_layers, FG_OPT_MAX_LAYERS},
        {"ffn_dim", &c->ffn_dim, FG_OPT_MAX_DIM},
        {"num_attention_heads", &c->num_attention_heads, FG_OPT_MAX_DIM},
        {"max_position_embeddings", &c->max_position_embeddings, FG_OPT_MAX_DIM},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if ((rc = get_uint(root, label, req[i].key, 1, req[i].max, req[i].dst, err)))
            return rc;
    if (c->hidden_size % c->num_attention_heads)
        return key_err(err, label, "num_attention_heads", "does not divide hidden_size");
    c->word_embed_proj_dim = c->hidden_size;
    if ((rc = get_uint(root, label, "word_embed_proj_dim", 0, FG_OPT_MAX_DIM,
                       &c->word_embed_proj_dim, err)) < 0)
        return rc;
    if ((rc = get_bool(root, label, "do_layer_norm_before", 1, &c->do_layer_norm_before, err)) ||
        (rc = get_bool(root, label, "_remove_final_layer_norm", 0, &c->remove_final_layer_norm, err)) ||
        (rc = get_bool(root, label, "enable_bias", 1, &c->enable_bias, err)) ||
        (rc = get_bool(root, label, "layer_norm_elementwise_affine", 1,
                       &c->layer_norm_elementwise_affine, err)) ||
        (rc = get_bool(root, label, "tie_word_embeddings", 1, &c->tie_word_embeddings, err)) ||
        (rc = get_token(root, label, "bos_token_id", 2, &c->bos_token_id, err)) ||
        (rc = get_token(root, label, "eos_token_id", 2, &c->eos_token_id, err)) ||
        (rc = get_token(root, label, "pad_token_id", 1, &c->pad_token_id, err)))
        return rc;
    return get_dtype(root, label, c, err);
}

int fg_opt_config_parse(const char *json, size_t len, const char *label, fg_opt_config *out,
                        fg_err *err)
{
    memset(out, 0, sizeof *out);
    if (!label)
        label = "config.json";
    if (len > CK_CONFIG_MAX_BYTES)
        return fg_err_set(err, FG_ERR_LIMIT, "%s: %zu bytes (limit %llu)", label, len,
                          (unsigned long long)CK_CONFIG_MAX_BYTES);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fg_err_set(err, FG_ERR_CORRUPT, "%s: invalid JSON: %s (line %d)", label, je.text,
                          je.line);
    int rc = json_is_object(root) ? parse_root(root, label, out, err)
                                  : fg_err_set(err, FG_ERR_CORRUPT, "%s: not a JSON object", label);
    json_decref(root);
    return rc;
}

int fg_opt_config_load(const char *path, fg_opt_config *out, fg_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fg_err_sys(err, FG_ERR_NOT_FOUND, errno, "%s", path);
    char *buf = malloc(CK_CONFIG_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, CK_CONFIG_MAX_BYTES + 1, f) : 0;
    int ioerr = ferror(f);
    fclose(f);
    int rc;
    if (!buf)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    else if (ioerr)
        rc = fg_err_set(err, FG_ERR_IO, "%s: read error", path);
    else
        rc = fg_opt_config_parse(buf, n, path, out, err);
    free(buf);
    return rc;
}

/* ---- expected tensors ---- */

typedef struct speclist {
    fg_opt_tensor_spec *v;
    uint32_t n;
} speclist;

static void spec(speclist *l, const char *name, uint64_t d0, uint64_t d1, int optional)
{
    fg_opt_tensor_spec *s = &l->v[l->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->n_dims = d1 ? 2 : 1;
    s->dims[0] = d0;
    s->dims[1] = d1;
    s->optional = optional;
}

static void linear(speclist *l, const char *p, uint64_t out, uint64_t in, int bias)
{
    char n[sizeof l->v->name];
    /* prefixes are at most ~50 bytes ("model.decoder.layers.N.self_attn.out_proj") */
    if (snprintf(n, sizeof n, "%s.weight", p) < (int)sizeof n)
        spec(l, n, out, in, 0);
    if (bias && snprintf(n, sizeof n, "%s.bias", p) < (int)sizeof n)
        spec(l, n, out, 0, 0);
}

static void layernorm(speclist *l, const char *p, uint64_t dim, int affine)
{
    if (affine)
        linear(l, p, dim, 0, 1);
}

static void layer(speclist *l, const fg_opt_config *c, uint32_t i)
{
    char p[96];
    uint64_t h = c->hidden_size;
    static const char *proj[] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "model.decoder.layers.%u.self_attn.%s", i, proj[k]);
        linear(l, p, h, h, c->enable_bias);
    }
    snprintf(p, sizeof p, "model.decoder.layers.%u.self_attn_layer_norm", i);
    layernorm(l, p, h, c->layer_norm_elementwise_affine);
    snprintf(p, sizeof p, "model.decoder.layers.%u.fc1", i);
    linear(l, p, c->ffn_dim, h, c->enable_bias);
    snprintf(p, sizeof p, "model.decoder.layers.%u.fc2", i);
    linear(l, p, h, c->ffn_dim, c->enable_bias);
    snprintf(p, sizeof p, "model.decoder.layers.%u.final_layer_norm", i);
    layernorm(l, p, h, c->layer_norm_elementwise_affine);
}

int fg_opt_expected_tensors(const fg_opt_config *c, fg_opt_tensor_spec **out, uint32_t *n,
                            fg_err *err)
{
    speclist l = {calloc((size_t)c->num_hidden_layers * 16 + 8, sizeof *l.v), 0};
    if (!l.v)
        return fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    uint64_t h = c->hidden_size, w = c->word_embed_proj_dim;
    spec(&l, "model.decoder.embed_tokens.weight", c->vocab_size, w, 0);
    spec(&l, "model.decoder.embed_positions.weight", (uint64_t)c->max_position_embeddings + 2, h, 0);
    if (w != h) {
        linear(&l, "model.decoder.project_out", w, h, 0);
        linear(&l, "model.decoder.project_in", h, w, 0);
    }
    if (c->do_layer_norm_before && !c->remove_final_layer_norm)
        layernorm(&l, "model.decoder.final_layer_norm", h, c->layer_norm_elementwise_affine);
    for (uint32_t i = 0; i < c->num_hidden_layers; i++)
        layer(&l, c, i);
    spec(&l, "lm_head.weight", c->vocab_size, w, c->tie_word_embeddings);
    *out = l.v;
    *n = l.n;
    return FG_OK;
}

const char *fg_opt_canonical_name(const char *name, char *buf, size_t cap)
{
    const char *rest = name;
    if (strncmp(name, "model.decoder.", 14) == 0)
        rest = name + 6;
    if (strncmp(rest, "decoder.", 8) != 0) {
        int k = snprintf(buf, cap, "%s", name);
        return k >= 0 && (size_t)k < cap ? buf : NULL;
    }
    /* FlexGen's numpy directories call the final layer norm decoder.layer_norm */
    const char *fl = strncmp(rest, "decoder.layer_norm.", 19) == 0 ? rest + 19 : NULL;
    int k = fl ? snprintf(buf, cap, "model.decoder.final_layer_norm.%s", fl)
               : snprintf(buf, cap, "model.%s", rest);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

typedef struct sspec {
    fg_opt_tensor_spec s;
    uint32_t orig; /* index in the model-order list */
} sspec;

static int cmp_spec(const void *a, const void *b)
{
    return strcmp(((const sspec *)a)->s.name, ((const sspec *)b)->s.name);
}

static void shape_str(char *buf, size_t cap, uint32_t nd, const uint64_t *d)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

static int check_one(const fg_ckpt_tensor *t, const fg_opt_tensor_spec *s, fg_err *err)
{
    int ok = t->n_dims == s->n_dims;
    for (uint32_t d = 0; ok && d < s->n_dims; d++)
        ok = t->dims[d] == s->dims[d];
    if (!ok) {
        char a[128], b[64];
        shape_str(a, sizeof a, t->n_dims, t->dims);
        shape_str(b, sizeof b, s->n_dims, s->dims);
        return fg_err_set(err, FG_ERR_SIZE_MISMATCH, "%s: tensor %s has shape %s, config.json "
                          "implies %s", t->path, t->name, a, b);
    }
    if (t->dtype != FG_CKPT_F32 && t->dtype != FG_CKPT_F16 && t->dtype != FG_CKPT_BF16)
        return fg_err_set(err, FG_ERR_BAD_ENUM, "%s: tensor %s has dtype %s; fg converts F32, "
                          "F16 and BF16", t->path, t->name, fg_ckpt_dtype_name(t->dtype));
    return FG_OK;
}

/* Match each checkpoint tensor to its spec (sorted copy `sorted`); seen[] counts matches. */
static int match_all(const fg_ckpt *ck, const sspec *sorted, uint32_t n, uint32_t *seen,
                     uint32_t *map, fg_err *err)
{
    for (uint32_t i = 0; i < fg_ckpt_count(ck); i++) {
        const fg_ckpt_tensor *t = fg_ckpt_tensor_at(ck, i);
        sspec key;
        if (!fg_opt_canonical_name(t->name, key.s.name, sizeof key.s.name))
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not an OPT tensor", t->path,
                              t->name);
        const sspec *ss = bsearch(&key, sorted, n, sizeof *sorted, cmp_spec);
        if (!ss)
            return fg_err_set(err, FG_ERR_BAD_NAME, "%s: tensor %s is not an OPT tensor for this "
                              "config.json", t->path, t->name);
        uint32_t k = (uint32_t)(ss - sorted);
        if (seen[k]++)
            return fg_err_set(err, FG_ERR_DUPLICATE, "%s: tensor %s is a second spelling of %s",
                              t->path, t->name, ss->s.name);
        int rc = check_one(t, &ss->s, err);
        if (rc)
            return rc;
        if (map)
            map[i] = ss->orig;
    }
    return FG_OK;
}

int fg_opt_check_ckpt(const fg_opt_config *cfg, const fg_ckpt *ck, uint32_t *map, fg_err *err)
{
    fg_opt_tensor_spec *exp;
    sspec *sorted;
    uint32_t n;
    int rc = fg_opt_expected_tensors(cfg, &exp, &n, err);
    if (rc)
        return rc;
    sorted = malloc((size_t)n * sizeof *sorted);
    uint32_t *seen = calloc(n, sizeof *seen);
    if (!sorted || !seen) {
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < n; k++) {
        sorted[k].s = exp[k];
        sorted[k].orig = k;
    }
    qsort(sorted, n, sizeof *sorted, cmp_spec);
    rc = match_all(ck, sorted, n, seen, map, err);
    for (uint32_t k = 0; k < n && rc == FG_OK; k++)
        if (!seen[k] && !sorted[k].s.optional)
            rc = fg_err_set(err, FG_ERR_NOT_FOUND, "%s: tensor %s (required by config.json) is "
                            "missing", fg_ckpt_dir(ck), sorted[k].s.name);
out:
    free(seen);
    free(sorted);
    free(exp);
    return rc;
}
