/* openai.h - OpenAI's completions and chat completions API as fg requests and responses: one
 * request body parsed into an fg_request, and the response bodies, streaming chunks, error
 * objects and Batch output lines written from an fg_response. Used by the job reader (an OpenAI
 * Batch line's "body") and by fg-serve (an HTTP body) alike; nothing here does I/O.
 *
 * Request bodies (openai_parse.c) are taken as the synchronous endpoints take them, with
 * vLLM's extensions that fg implements; every other field OpenAI or vLLM defines is refused by
 * name ("logit_bias": not supported by fg), never ignored, and so is any unknown field. A
 * field given as null counts as absent (what OpenAI's own API does). docs/jobs.md lists every
 * field with its type and range.
 *
 * Writers (openai_write.c) return one compact JSON text (no newline) owned by the caller
 * (free). Token strings come from a callback giving a token's bytes (fg_oai_tok_piece for an
 * fg_tok): a string is the bytes with invalid UTF-8 as U+FFFD (as vLLM decodes a token), chat's
 * "bytes" the raw bytes.
 */
#ifndef FG_OPENAI_H
#define FG_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "fg_error.h"
#include "request.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fg_oai_endpoint {
    FG_OAI_NONE = 0,
    FG_OAI_COMPLETIONS = 1, /* /v1/completions */
    FG_OAI_CHAT = 2,        /* /v1/chat/completions */
} fg_oai_endpoint;

/* The endpoint a URL path names ("/v1/completions", "/v1/chat/completions"), else FG_OAI_NONE. */
fg_oai_endpoint fg_oai_endpoint_of(const char *url);
/* "/v1/completions" or "/v1/chat/completions" (static). */
const char *fg_oai_endpoint_url(fg_oai_endpoint ep);

/* ---- request bodies --------------------------------------------------------------------- */

#define FG_OAI_MAX_PROMPT_IDS (1u << 24)

/* One parsed body: req points into the strings and arrays this struct owns. */
typedef struct fg_oai_body {
    fg_oai_endpoint ep;
    fg_request req;
    char *model;          /* the body's "model" (required by OpenAI; kept, NULL when absent):
                             the runner checks it against the store's name or notes it */
    int stream;           /* "stream": true (refused with FG_OAI_BATCH) */
    int include_usage;    /* "stream_options": {"include_usage": true} */
    /* owned storage behind req */
    char *prompt;
    int32_t *prompt_ids;
    char *messages;       /* compact JSON array */
    char *chat_kwargs;    /* compact JSON object */
    char *stops[FG_REQ_MAX_STOPS];
} fg_oai_body;

enum {
    FG_OAI_BATCH = 1u << 0, /* a Batch line's body: "stream": true is refused */
};

/* Parse the JSON text body[0, len) for endpoint ep into *b (zeroed first). FG_OK; or
 * FG_ERR_INVALID_ARG with one line naming the field (err) and the field's name in param
 * (cap 64, "" when the body as a whole is wrong; may be NULL), *b left empty; FG_ERR_NOMEM.
 * The body is read as Python's json module reads it (fg_json_loadb); duplicate keys refused. */
int fg_oai_body_parse(const char *body, size_t len, fg_oai_endpoint ep, unsigned flags,
                      fg_oai_body *b, char *param, fg_err *err);

/* Free what *b owns and zero it; NULL accepted. */
void fg_oai_body_clear(fg_oai_body *b);

/* ---- response bodies -------------------------------------------------------------------- */

/* A token's bytes: FG_OK with *bytes valid until the next call (or longer), else an error. */
typedef int (*fg_oai_piece_fn)(void *ctx, int32_t id, const char **bytes, size_t *len);

/* fg_oai_piece_fn over a tokenizer (ctx: a const fg_tok *). */
int fg_oai_tok_piece(void *ctx, int32_t id, const char **bytes, size_t *len);

/* What a response says besides the fg_response: its id ("cmpl-..." / "chatcmpl-..."), model
 * name, creation time (Unix seconds) and the token strings' source. */
typedef struct fg_oai_meta {
    const char *id;
    const char *model;
    int64_t created;
    fg_oai_piece_fn piece;  /* needed for log-probs only (NULL: none asked) */
    void *piece_ctx;
} fg_oai_meta;

/* The endpoint's response body for request q answered by r (r->status == 0): a "text_completion"
 * with choices {index, text, logprobs, finish_reason} (logprobs in the legacy schema {tokens,
 * token_logprobs, top_logprobs, text_offset}, the prompt's tokens first with echo, its first
 * log-prob null), or a "chat.completion" with choices {index, message {role, content},
 * logprobs {content: [{token, logprob, bytes, top_logprobs}]}, finish_reason}; usage
 * {prompt_tokens, completion_tokens, total_tokens}. finish_reason: "stop" for EOS and stop
 * strings, "length" for max_tokens. *out owned by the caller. */
int fg_oai_response_json(const fg_oai_meta *m, fg_oai_endpoint ep, const fg_request *q,
                         const fg_response *r, char **out, fg_err *err);

/* One streamed chunk for choice `choice`: text (len bytes) with its tokens' log-probs (n_ids
 * positions: logprob[i] the chosen token's, top[i * n_top ...] the alternatives; NULL when not
 * asked), finish FG_FINISH_NONE or the choice's finish (FG_FINISH_*). Completions: a
 * "text_completion" object; chat: a "chat.completion.chunk" whose delta carries the role on the
 * first chunk (first != 0) and the content. *out owned by the caller. */
int fg_oai_chunk_json(const fg_oai_meta *m, fg_oai_endpoint ep, uint32_t choice, int first,
                      const char *text, size_t len, const int32_t *ids, const float *logprob,
                      const fg_token_lp *top, uint32_t n_top, uint32_t n_ids, int finish,
                      char **out, fg_err *err);

/* The last chunk with stream_options.include_usage: empty choices and the usage. */
int fg_oai_usage_chunk_json(const fg_oai_meta *m, fg_oai_endpoint ep, uint64_t prompt_tokens,
                            uint64_t completion_tokens, char **out, fg_err *err);

/* OpenAI's error object {"error": {"message", "type", "param", "code"}} (param, code may be
 * NULL: null). */
int fg_oai_error_json(const char *message, const char *type, const char *param,
                      const char *code, char **out, fg_err *err);

/* A Batch output line (BatchRequestOutput, without newline): {"id", "custom_id", "response":
 * {"status_code", "request_id", "body"}, "error"}. body_json is the response body's JSON text;
 * a failed request (status >= 400) carries the error object as body and "error": {"code":
 * error_code, "message": error_message} (the shape of OpenAI's Batch error lines; vLLM's
 * run-batch also sets "error" on a failed request, with its message), else "error": null. */
int fg_oai_batch_line(const char *line_id, const char *custom_id, const char *request_id,
                      int status, const char *body_json, const char *error_code,
                      const char *error_message, char **out, fg_err *err);

#ifdef __cplusplus
}
#endif
#endif
