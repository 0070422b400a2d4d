/* model_open.h - the model as a store holds it, read once: config.json and generation_config.json
 * parsed into the hyperparameters, the architecture found, config.json's model_type kept, and the
 * tokenizer's files at hand. One handle per run, passed to the engine (engine.h), the memory plan's
 * builder (plan_model.h), the policy search (policy_search.h), the runner and fg-inspect, so no
 * layer parses the metadata again.
 *
 * The chat template (tokenizer.chat_template_jinja / _json / tokenizer.config_json's, as
 * fg_chat_template_select picks) and the special tokens it is given are read and parsed at open
 * too, but a store without one (or with one that does not parse) fails only fg_model_chat: a
 * model is run without its template unless a chat is asked for.
 *
 * Lifecycle: fg_store_open (read-only), fg_model_open(store) borrows the store (it must outlive
 * the handle), fg_model_close. The handle is immutable after open: any number of readers.
 */
#ifndef FG_MODEL_OPEN_H
#define FG_MODEL_OPEN_H

#include "chat.h"
#include "fg_error.h"
#include "model.h"
#include "store.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_model fg_model;

/* Read the store's model.config_json (required: a store without it is not a finished
 * conversion, said naming the store) and model.generation_config_json (optional: the stop set of
 * transformers' generate()). Errors name the store and the metadata key. *out owned by the caller
 * (fg_model_close). */
int fg_model_open(fg_store *store, fg_model **out, fg_err *err);
void fg_model_close(fg_model *m); /* NULL accepted */

const fg_hparams *fg_model_hparams(const fg_model *m);
const fg_arch *fg_model_arch_of(const fg_model *m);
fg_store *fg_model_store(const fg_model *m);
/* config.json's top-level "model_type" as written ("" when it has none): transformers picks a
 * tokenizer.json's class by it too (SPEC §14). */
const char *fg_model_type(const fg_model *m);
/* Whether the stop set (hparams eos_ids) is generation_config.json's rather than config.json's. */
int fg_model_stop_from_generation(const fg_model *m);
/* model.config_json's bytes as the store holds them (valid until close): what identifies the
 * model's configuration byte for byte (the prefix cache's identity hashes them). */
const void *fg_model_config_json(const fg_model *m, size_t *len);

/* The store's tokenizer (SPEC T1: tokenizer.model names the class; gpt2-bpe reads vocab.json +
 * merges.txt, the tokenizer.json classes read tokenizer.json; the config files are optional for
 * both). *out owned by the caller (fg_tok_free). Errors name the store and the key. */
int fg_model_tokenizer(const fg_model *m, fg_tok **out, fg_err *err);

/* The model's chat template and the special tokens transformers passes it (bos/eos/pad/unk,
 * from tokenizer_config.json or special_tokens_map.json), both valid until close. A store
 * without a template fails FG_ERR_NOT_FOUND "<store>: the model has no chat template
 * (tokenizer_config.json chat_template, chat_template.jinja)"; one whose template does not parse
 * fails with the parser's message after the store's name. */
int fg_model_chat(const fg_model *m, const fg_chat_template **tpl, const fg_chat_tokens **toks,
                  fg_err *err);

#ifdef __cplusplus
}
#endif

#endif
