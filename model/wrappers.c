/* wrappers.c - multimodal checkpoints whose text model fg runs: Gemma 3 4B-27B ("gemma3"),
 * Mistral Small 3.x ("mistral3"), Qwen2.5-VL ("qwen2_5_vl") and Qwen3-VL ("qwen3_vl", the
 * dense ones), each a row of families.c (its wrapper: the text types, the class's text
 * defaults).
 *
 * The text model's config is text_config (Qwen2.5-VL's hub files: the top level itself), read
 * by the fg entry its model_type maps to (absent: the wrapper's first), with the keys it lacks
 * taken from the wrapper config class's text defaults where they differ from that entry's; a
 * rope type "mrope" (the VL models' multimodal positions: for text, every section sees the
 * same position, so the frequencies are the default ones) reads as default. The top level's
 * bos/eos/pad ids and dtype, when present, win; its tie_word_embeddings decides the head
 * (transformers 5 ties there; absent: the class's default, or for the Qwen ones text_config's
 * true, as transformers carries pre-5 files; fg uses an lm_head.weight a checkpoint holds
 * either way, as transformers does). Tensors: the text model's under "model.language_model."
 * (transformers 5), "language_model.model." (Gemma's and Mistral's hub files) or "model."
 * (Qwen's), the head as "lm_head." or "language_model.lm_head."; the vision towers and
 * projectors are accepted unread (fg_arch.unused). Known gap: the config classes' other text
 * defaults are the fg entry's (the released configs name them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "families.h"

/* rope_type / type "mrope" -> "default" in the rope object of the text config t (in place) */
static void mrope_default(json_t *t)
{
    static const char *const keys[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        json_t *o = json_object_get(t, keys[i]), *ty;
        if (!json_is_object(o))
            continue;
        ty = json_object_get(o, "rope_type") ? json_object_get(o, "rope_type")
                                              : json_object_get(o, "type");
        if (json_is_string(ty) && !strcmp(json_string_value(ty), "mrope")) {
            json_object_del(o, "type");
            json_object_set_new(o, "rope_type", json_string("default"));
        }
    }
}

/* The text config of root as JSON bytes naming the fg entry that reads it (*txt, the caller's
 * to free). */
static int text_config(json_t *root, const char *label, const wrapper *w, char **txt,
                       fg_err *err)
{
    json_t *tc = json_object_get(root, "text_config");
    if (!json_is_object(tc) && !(w->flat && !tc))
        return fgm_key_err(err, label, "text_config", "must be an object (the text model's "
                           "config)");
    json_t *mt = json_object_get(tc, "model_type");
    int which = -1; /* the text type named (absent: the first) */
    for (int i = 0; i < 2 && which < 0; i++)
        if (w->text[i][0] && (mt ? json_is_string(mt) &&
                                       !strcmp(json_string_value(mt), w->text[i][0])
                                 : i == 0))
            which = i;
    if (which < 0) {
        char what[96];
        snprintf(what, sizeof what, "must be \"%s\"%s%s%s", w->text[0][0],
                 w->text[1][0] ? " or \"" : "", w->text[1][0] ? w->text[1][0] : "",
                 w->text[1][0] ? "\"" : "");
        return fgm_key_err(err, label, "text_config.model_type", what);
    }
    json_t *copy = json_deep_copy(tc ? tc : root);
    json_t *dflt = w->defaults && !which ? json_loads(w->defaults, 0, NULL) : NULL;
    *txt = NULL;
    if (copy && (!w->defaults || which || dflt)) {
        if (!tc) { /* a flat file: the top level, less the other parts */
            json_object_del(copy, "vision_config");
            json_object_del(copy, "text_config");
        }
        if (dflt)
            json_object_update_missing(copy, dflt);
        mrope_default(copy);
        if (!json_object_set_new(copy, "model_type", json_string(w->text[which][1])))
            *txt = json_dumps(copy, JSON_COMPACT);
    }
    json_decref(dflt);
    json_decref(copy);
    return *txt ? FG_OK : fg_err_set(err, FG_ERR_NOMEM, "out of memory");
}

int fgm_wrapped_parse(json_t *root, const char *label, const fgm_family *f, fg_hparams *hp,
                      fg_err *err)
{
    const wrapper *w = &f->w;
    char *txt, sub[160];
    int rc = text_config(root, label, w, &txt, err);
    if (rc)
        return rc;
    json_t *tc = json_object_get(root, "text_config");
    snprintf(sub, sizeof sub, "%.140s%s", label ? label : "config.json", tc ? " text_config" : "");
    rc = fg_model_config_parse(txt, strlen(txt), sub, hp, err);
    free(txt);
    snprintf(hp->arch, sizeof hp->arch, "%s", f->arch.name); /* (its tensor names: the wrapper's) */
    uint32_t n;
    if (rc == FG_OK)
        rc = fgm_tokens(root, label, "bos_token_id", hp->bos_id, &hp->bos_id, 1, &n, err);
    if (rc == FG_OK && json_object_get(root, "eos_token_id"))
        rc = fgm_tokens(root, label, "eos_token_id", -1, hp->eos_ids, FG_MODEL_MAX_EOS,
                        &hp->n_eos, err);
    if (rc == FG_OK)
        rc = fgm_tokens(root, label, "pad_token_id", hp->pad_id, &hp->pad_id, 1, &n, err);
    int tie = w->tie >= 0 ? w->tie : tc && json_is_true(json_object_get(tc, "tie_word_embeddings"));
    if (rc == FG_OK)
        rc = fgm_bool(root, label, "tie_word_embeddings", tie, &hp->tied_head, err);
    hp->eos_id = hp->eos_ids[0];
    return rc ? rc : fgm_dtype(root, label, hp, err);
}

const char *fgm_wrapped_name(const char *name, char *buf, size_t cap)
{
    static const struct { const char *from, *to; } k_map[] = {
        {"model.language_model.", "model."}, {"language_model.model.", "model."},
        {"language_model.lm_head.", "lm_head."}};
    const char *to = "", *rest = name;
    for (size_t i = 0; i < sizeof k_map / sizeof k_map[0]; i++)
        if (!strncmp(name, k_map[i].from, strlen(k_map[i].from))) {
            to = k_map[i].to;
            rest = name + strlen(k_map[i].from);
            break;
        }
    int k = snprintf(buf, cap, "%s%s", to, rest);
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}

int fgm_wrapped_unused(const fg_hparams *hp, const char *name)
{
    static const char *const pre[] = {"model.vision_tower.", "vision_tower.",
                                      "model.multi_modal_projector.", "multi_modal_projector.",
                                      "model.visual.", "visual."};
    (void)hp;
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(name, pre[i], strlen(pre[i])))
            return 1;
    return 0;
}

