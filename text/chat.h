/* chat.h - a checkpoint's chat template, rendered as transformers renders it.
 *
 * fg_chat_render(tpl, messages, opts) produces the text of transformers'
 * tokenizer.apply_chat_template(messages, add_generation_prompt=..., tokenize=False) for the
 * same template, special tokens and keyword arguments, byte for byte (tests/test_chat.c checks
 * it on the published templates of the families fg runs; tests/fixtures/chat/ has the list).
 * The template language is the subset of Jinja2 that chat templates use, run in transformers'
 * environment (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
 * strftime_now, namespace); text/jinja_parse.c lists the grammar and text/jinja_filters.c the
 * filters and methods. A template using anything else fails fg_chat_template_parse with a
 * one-line message naming the line and the construct ("chat template line 12: filter 'foo' is
 * not supported"), so fg-convert refuses such a checkpoint up front.
 * Untrusted templates are safe to run: nesting, macro recursion, loop iterations, output size
 * and memory are bounded, and each bound fails the render with a message.
 *
 * Lifecycle: fg_chat_template_parse -> fg_chat_render ... -> fg_chat_template_free. A parsed
 * template is read-only while rendering, so renders may run on several threads at once.
 */
#ifndef FG_CHAT_H
#define FG_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_chat_template fg_chat_template;

/* Longest template source accepted (published templates are under 20 KB). */
#define FG_CHAT_MAX_TEMPLATE (1u << 20)

/* Parse src[0..len) (UTF-8, no NUL needed). On success *out owns a template the caller frees
 * with fg_chat_template_free; on failure *out is NULL and err names the line and construct. */
int fg_chat_template_parse(const char *src, size_t len, fg_chat_template **out, fg_err *err);
void fg_chat_template_free(fg_chat_template *t);

typedef struct fg_chat_opts {
    int add_generation_prompt;  /* end with the assistant turn's header */
    const char *bos_token;      /* the tokenizer's special tokens, as transformers passes them */
    const char *eos_token;      /*   (NULL: not passed, so undefined in the template) */
    const char *pad_token;
    const char *unk_token;
    /* A JSON object of further template variables, as apply_chat_template's **kwargs and
     * tools= / documents=: {"enable_thinking": false, "tools": [...]}. NULL: none. These
     * override the tokens above. tools and documents are None when not given, as there. */
    const char *extra_json;
    size_t extra_len;
    int64_t now;                /* strftime_now's instant (Unix seconds, local time); 0: now */
    size_t max_output;          /* bytes; 0: FG_CHAT_MAX_OUTPUT */
    long max_iterations;        /* loop iterations over the render; 0: FG_CHAT_MAX_ITERATIONS */
} fg_chat_opts;

#define FG_CHAT_MAX_OUTPUT (16u << 20)
#define FG_CHAT_MAX_ITERATIONS 1000000L

/* Render messages_json (a JSON array of message objects, the OpenAI / transformers shape:
 * {"role", "content", optional "tool_calls", "reasoning_content", ...}) with t. Keys whose
 * value is null are dropped and reasoning fields aliased, as apply_chat_template does. On
 * success *out is a malloc'd NUL-terminated string of *out_len bytes (the caller frees it);
 * on failure *out is NULL and err says why (a raise_exception in the template reads
 * "chat template line N: raise_exception: <its message>"). opts may be NULL. */
int fg_chat_render(const fg_chat_template *t, const char *messages_json, size_t messages_len,
                   const fg_chat_opts *opts, char **out, size_t *out_len, fg_err *err);

/* The template source a checkpoint's files name: chat_template.jinja's text when given,
 * else chat_template.json's "chat_template", else tokenizer_config.json's "chat_template"
 * (a string, or a list of {"name", "template"} from which "default" is taken, or "tool_use"
 * when want_tools and present). Any argument may be NULL (file absent). On success *src is a
 * malloc'd NUL-terminated copy (the caller frees it); FG_ERR_NOT_FOUND when none has one. */
int fg_chat_template_select(const char *jinja, size_t jinja_len, const char *chat_json,
                            size_t chat_json_len, const char *tok_config, size_t tok_config_len,
                            int want_tools, char **src, fg_err *err);

/* The special tokens transformers passes a template (its special_tokens_map: bos_token,
 * eos_token, pad_token, unk_token), read from tokenizer_config.json, else from
 * special_tokens_map.json; a value is a string or an AddedToken object ({"content": ...}).
 * Either buffer may be NULL (file absent). Absent tokens stay NULL. The strings are malloc'd:
 * fg_chat_tokens_free releases them. Point fg_chat_opts' token fields at them. */
typedef struct fg_chat_tokens { char *bos, *eos, *pad, *unk; } fg_chat_tokens;
int fg_chat_tokens_read(const char *tok_config, size_t tok_config_len, const char *special_map,
                        size_t special_map_len, fg_chat_tokens *out, fg_err *err);
void fg_chat_tokens_free(fg_chat_tokens *t);

#ifdef __cplusplus
}
#endif
#endif
