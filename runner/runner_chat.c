/* runner_chat.c - fg-infer -m STORE --chat without -p: an interactive chat through the session
 * (session.h), one engine for the whole conversation.
 *
 * Each line read from standard input is the user's next message; the conversation so far
 * (every user and assistant turn, as a JSON messages array) is rendered through the model's
 * chat template with the generation prompt, and the reply streams to the output as it is
 * generated, then joins the conversation. End of input (Ctrl-D) ends the chat; an empty line is
 * skipped. A turn that fails (the conversation no longer fits the context, the template
 * refuses it) is said on the log and left out of the conversation; the chat goes on. The
 * context is --max-context, else the model's positions; the sampling, stops and max-new-tokens
 * are the run's flags. On a terminal a "> " prompt is written to the log before each line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "session_int.h"

typedef struct chat_out {
    fgr_run *r;
    int failed;
} chat_out;

static int print_piece(void *ctx, uint32_t req, uint32_t choice, const char *piece, size_t len,
                       const int32_t *ids, const fg_token_lp *lp, uint32_t n_ids, int finish)
{
    chat_out *c = ctx;
    (void)req, (void)choice, (void)ids, (void)lp, (void)n_ids, (void)finish;
    if (len && (fwrite(piece, 1, len, c->r->out) != len || fflush(c->r->out)))
        c->failed = errno ? errno : EIO;
    return c->failed != 0;
}

/* One turn: the user's line added, the reply generated and added (or the turn dropped). */
static int chat_turn(fg_session *s, fgr_run *r, json_t *conv, const char *line, fg_err *err)
{
    json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "user", "content", line));
    char *msgs = json_dumps(conv, JSON_COMPACT);
    if (!msgs) {
        json_array_remove(conv, json_array_size(conv) - 1);
        fprintf(r->log, "fg-infer: that line is not UTF-8 text: skipped\n");
        return FG_OK;
    }
    fg_request q = {0};
    q.messages = msgs;
    q.max_tokens = r->o->max_new;
    q.ignore_eos = r->o->ignore_eos;
    q.logprobs = -1;
    for (int i = 0; i < r->o->n_stops && i < FG_REQ_MAX_STOPS; i++)
        q.stops[q.n_stops++] = r->o->stops[i];
    fg_response resp;
    chat_out co = {r, 0};
    int rc = fg_session_generate(s, &q, 1, print_piece, &co, &resp, err);
    if (rc == FG_OK && co.failed)
        rc = fg_err_sys(err, FG_ERR_IO, co.failed, "writing to %s", fgr_out_name(r));
    if (rc == FG_OK && resp.status) {
        fprintf(r->log, "fg-infer: %s (the turn is left out; the chat goes on)\n", resp.error);
        json_array_remove(conv, json_array_size(conv) - 1);
    } else if (rc == FG_OK) {
        json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "assistant", "content",
                                              resp.choices[0].text));
        rc = fgr_write_out(r, "\n", err);
    }
    fg_response_clear(&resp);
    free(msgs);
    return rc;
}

int fgr_run_chat(fgr_run *r, fg_err *err)
{
    fg_session_opts so = {0};
    so.run = *r->o;
    so.run.quiet = 1; /* the session's notices would cut into the conversation */
    so.max_seqs = 1;
    so.interrupt = r->o->interrupt;
    fg_session *s;
    int rc = fg_session_open(&so, &s, err);
    if (rc)
        return rc;
    int tty = isatty(0);
    if (!fg_session_info_get(s)->has_chat_template)
        rc = fg_err_set(err, FG_ERR_NOT_FOUND, "--chat: %s has no chat template (fg-convert "
                        "stores the checkpoint's tokenizer_config.json chat_template)",
                        r->o->model);
    if (rc == FG_OK && tty && !r->o->quiet)
        fprintf(r->log, "fg-infer: chatting with %s (context %u tokens); Ctrl-D ends\n",
                fg_session_info_get(s)->model_name, fg_session_info_get(s)->max_ctx);
    json_t *conv = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (rc == FG_OK && conv) {
        if (tty)
            fputs("> ", r->log), fflush(r->log);
        if ((len = getline(&line, &cap, stdin)) < 0)
            break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len > 0)
            rc = chat_turn(s, r, conv, line, err);
    }
    if (rc == FG_OK && !conv)
        rc = fg_err_set(err, FG_ERR_NOMEM, "out of memory");
    if (rc == FG_OK && tty)
        fputc('\n', r->log);
    free(line);
    json_decref(conv);
    fg_session_close(s);
    return rc;
}
