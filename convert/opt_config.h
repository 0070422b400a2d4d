/* opt_config.h - a Hugging Face OPT config.json as a plain struct, the tensors an OPT checkpoint
 * must hold for it, and the check that a checkpoint holds exactly those.
 *
 * The rules follow transformers' modeling_opt.py (OPTDecoder, OPTDecoderLayer, OPTForCausalLM):
 *   embed_tokens [vocab, word_embed_proj_dim]; embed_positions [max_position_embeddings + 2,
 *   hidden] (OPT's learned positions are offset by 2); project_out [word_embed_proj_dim, hidden]
 *   and project_in [hidden, word_embed_proj_dim], no bias, only when word_embed_proj_dim !=
 *   hidden_size (opt-350m); final_layer_norm only when do_layer_norm_before and not
 *   _remove_final_layer_norm; per layer q/k/v/out_proj [hidden, hidden] (+ bias [hidden] when
 *   enable_bias), self_attn_layer_norm and final_layer_norm [hidden] weight and bias (only when
 *   layer_norm_elementwise_affine), fc1 [ffn, hidden], fc2 [hidden, ffn] (+ biases); lm_head
 *   [vocab, word_embed_proj_dim], optional when tie_word_embeddings (it equals embed_tokens).
 *
 * Names: canonical names are OPTForCausalLM's ("model.decoder.layers.0.fc1.weight",
 * "lm_head.weight"). A checkpoint may spell them without "model." (OPTModel checkpoints and
 * FlexGen's numpy directories) and FlexGen renames model.decoder.final_layer_norm to
 * decoder.layer_norm; fg_opt_canonical_name maps all of these to the canonical form.
 */
#ifndef FG_OPT_CONFIG_H
#define FG_OPT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_opt_config {
    uint32_t vocab_size;              /* required */
    uint32_t hidden_size;             /* required; multiple of num_attention_heads */
    uint32_t num_hidden_layers;       /* required */
    uint32_t ffn_dim;                 /* required */
    uint32_t num_attention_heads;     /* required */
    uint32_t max_position_embeddings; /* required */
    uint32_t word_embed_proj_dim;     /* default hidden_size */
    int do_layer_norm_before;         /* default 1 */
    int remove_final_layer_norm;      /* "_remove_final_layer_norm", default 0 */
    int enable_bias;                  /* default 1 */
    int layer_norm_elementwise_affine;/* default 1 */
    int tie_word_embeddings;          /* default 1 */
    int64_t bos_token_id;             /* default 2; -1 when null */
    int64_t eos_token_id;             /* default 2; -1 when null */
    int64_t pad_token_id;             /* default 1; -1 when null */
    char torch_dtype[16];             /* "float16", "float32", "bfloat16", or "" when absent */
} fg_opt_config;

#define FG_OPT_MAX_LAYERS 1024u
#define FG_OPT_MAX_DIM (1u << 20) /* any one of vocab/hidden/ffn/positions */

/* Parse config.json at path. Errors name the file and the key ("config.json: key hidden_size:
 * missing"). model_type must be "opt" and activation_function "relu". */
int fg_opt_config_load(const char *path, fg_opt_config *out, fg_err *err);
/* Same over a buffer (fuzzer, tests); label names it in messages. */
int fg_opt_config_parse(const char *json, size_t len, const char *label, fg_opt_config *out,
                        fg_err *err);

typedef struct fg_opt_tensor_spec {
    char name[96];   /* canonical name */
    uint32_t n_dims; /* 1 or 2 */
    uint64_t dims[2];
    int optional;    /* lm_head.weight when tied */
} fg_opt_tensor_spec;

/* The tensors an OPT checkpoint of this config holds, in model order. *out is malloc'd and
 * owned by the caller (free()). */
int fg_opt_expected_tensors(const fg_opt_config *cfg, fg_opt_tensor_spec **out, uint32_t *n,
                            fg_err *err);

/* Canonical form of a checkpoint tensor name into buf (cap bytes); returns buf, or NULL when
 * the name does not fit. */
const char *fg_opt_canonical_name(const char *name, char *buf, size_t cap);

/* Compare a checkpoint against cfg: every required tensor present (under any accepted
 * spelling) exactly once with the expected shape, and no other tensor. The first problem is
 * returned as one line naming the tensor and its file: FG_ERR_NOT_FOUND (missing),
 * FG_ERR_BAD_NAME (not an OPT tensor), FG_ERR_SIZE_MISMATCH (shape), FG_ERR_DUPLICATE (two
 * spellings of one tensor). On success, when map is non-NULL, map[i] (caller-allocated,
 * fg_ckpt_count entries) receives the index into the expected list of checkpoint tensor i. */
int fg_opt_check_ckpt(const fg_opt_config *cfg, const fg_ckpt *ck, uint32_t *map, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
