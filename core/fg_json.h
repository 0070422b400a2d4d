/* fg_json.h - JSON text as Python's json module reads it, handed to jansson.
 *
 * Checkpoints are written by Python, and every JSON file fg reads from one (config.json,
 * tokenizer_config.json, tokenizer.json, the safetensors index, ...) must load wherever
 * json.loads would. jansson refuses two things Python writes:
 *  - integers beyond int64: transformers writes "model_max_length": 1000000000000000019884624838656
 *    (int(1e30)) for a tokenizer without a maximum. Such a literal is rewritten, in place and at
 *    the same length, as a real of the same value to 15 significant digits, so jansson's line and
 *    column in any later error still point into the caller's text. A key that needs an exact
 *    integer sees a real and refuses it by name; keys fg does not need never notice.
 *  - NaN, Infinity and -Infinity (json.dumps writes them for non-finite floats): rewritten as the
 *    strings "NaN", "Infinity", "-Infinity", so a key that needs a number refuses it by name and
 *    keys fg ignores load. (Columns after one on the same line shift by two.)
 * Nothing inside a string is touched; text that is not JSON reaches jansson unchanged in meaning,
 * and jansson reports it.
 */
#ifndef FG_JSON_H
#define FG_JSON_H

#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* json_loadb(buf, len, flags, je) after the rewrites above. Returns a new reference (the
 * caller json_decref()s it) or NULL with *je set, as json_loadb does; NULL with je->text
 * "out of memory" where the rewritten copy cannot be allocated. */
json_t *fg_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *je);

#ifdef __cplusplus
}
#endif
#endif
