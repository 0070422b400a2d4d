/* openai_emit.c - writes one of every OpenAI object fg produces, as "KIND<TAB>JSON" lines on
 * stdout, for check_openai_types.py to parse with the openai package's types: response bodies
 * of both endpoints (with and without log-probs, echo, n > 1, a token-id prompt), streaming
 * chunks, usage chunks, an error object, and Batch output lines made the way a job makes them
 * (an input file of OpenAI lines read by the job reader, answered with fg_responses through the
 * results file, invalid lines answered with their error). Usage: openai_emit WORKDIR. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"
#include "openai.h"
#include "openai_sample.h"

static fg_tok *tok;

static void out(const char *kind, int rc, char *json, const fg_err *err)
{
    if (rc) {
        fprintf(stderr, "openai_emit: %s: %s\n", kind, err->msg);
        exit(1);
    }
    printf("%s\t%s\n", kind, json);
    free(json);
}

static void body(const char *kind, fg_oai_endpoint ep, const char *req_json, uint32_t n,
                 int n_top, int echo)
{
    fg_oai_body b;
    fg_err err;
    char param[64];
    if (fg_oai_body_parse(req_json, strlen(req_json), ep, 0, &b, param, &err)) {
        fprintf(stderr, "openai_emit: %s: %s\n", req_json, err.msg);
        exit(1);
    }
    fg_response r;
    sample_response(tok, n, n_top, echo, &r);
    fg_oai_meta m = {"cmpl-test", "fg-model", 1700000000, fg_oai_tok_piece, tok};
    char *s;
    {
        int rc_ = fg_oai_response_json(&m, ep, &b.req, &r, &s, &err);
        out(kind, rc_, s, &err);
    };
    fg_response_clear(&r);
    fg_oai_body_clear(&b);
}

static void chunks(const char *kind, fg_oai_endpoint ep)
{
    fg_response r;
    sample_response(tok, 1, 2, 0, &r);
    const fg_choice *c = &r.choices[0];
    fg_oai_meta m = {"chunk-test", "fg-model", 1700000000, fg_oai_tok_piece, tok};
    fg_err err;
    char *s;
    for (uint32_t i = 0; i < c->n_tokens; i++) {
        const char *b;
        size_t len;
        fg_tok_token_bytes(tok, c->tokens[i], &b, &len);
        {
        int rc_ = fg_oai_chunk_json(&m, ep, 0, i == 0, b, len, c->tokens + i, c->logprob + i,
                                    c->top + (size_t)i * c->n_top, c->n_top, 1,
                                    FG_FINISH_NONE, &s, &err);
        out(kind, rc_, s, &err);
    };
    }
    {
        int rc_ = fg_oai_chunk_json(&m, ep, 0, 0, "", 0, NULL, NULL, NULL, 0, 0, c->finish,
                                &s, &err);
        out(kind, rc_, s, &err);
    };
    {
        int rc_ = fg_oai_usage_chunk_json(&m, ep, r.n_prompt, r.completion_tokens, &s, &err);
        out(kind, rc_, s, &err);
    };
    fg_response_clear(&r);
}

static const char *const batch_in =
    "{\"custom_id\":\"c1\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":"
    "\"m\",\"prompt\":\"Hello world\",\"max_tokens\":8,\"logprobs\":2,\"echo\":true}}\n"
    "{\"custom_id\":\"c2\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{"
    "\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":2,"
    "\"logprobs\":true,\"top_logprobs\":3}}\n"
    "{\"custom_id\":\"c3\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":"
    "\"m\",\"prompt\":\"x\",\"logit_bias\":{\"50256\":-100}}}\n"
    "{\"custom_id\":\"c4\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{"
    "\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}\n";

/* The Batch path as a job runs it: reader -> fg_responses -> the results file. */
static void batch(const char *dir)
{
    char in[4096], res[4096];
    snprintf(in, sizeof in, "%s/batch.jsonl", dir);
    snprintf(res, sizeof res, "%s/batch.out.jsonl", dir);
    FILE *f = fopen(in, "w");
    fputs(batch_in, f);
    fclose(f);
    unlink(res);
    fg_job_reader *rd;
    fg_job_output *o;
    fg_err err;
    fg_job_list b = {0};
    if (fg_job_reader_open(in, &rd, &err) || fg_job_output_open(res, 0, &o, NULL, &err) ||
        fg_job_output_set_openai(o, "fg-model", fg_oai_tok_piece, tok, &err) ||
        fg_job_reader_next(rd, NULL, 16, &b, &err)) {
        fprintf(stderr, "openai_emit: batch: %s\n", err.msg);
        exit(1);
    }
    for (size_t i = 0; i < b.n; i++) {
        const fg_job *j = &b.jobs[i];
        fg_response r = {0};
        fg_job_result jr = {.job = j, .error = j->invalid, .error_type = "invalid_request_error"};
        if (!j->invalid) {
            sample_response(tok, j->req.n ? j->req.n : 1, j->req.logprobs, j->req.echo, &r);
            jr.resp = &r;
        }
        if (fg_job_output_append(o, &jr, 1, &err)) {
            fprintf(stderr, "openai_emit: append: %s\n", err.msg);
            exit(1);
        }
        fg_response_clear(&r);
    }
    fg_jobs_free(&b);
    fg_job_reader_close(rd);
    fg_job_output_close(o, NULL);
    char line[1 << 16];
    f = fopen(res, "r");
    while (fgets(line, sizeof line, f))
        printf("batch\t%s", line);
    fclose(f);
}

int main(int argc, char **argv)
{
    fg_err err;
    if (argc != 2 || fg_tok_load_dir(FG_SOURCE_DIR "/data/gpt2-tokenizer", &tok, &err)) {
        fprintf(stderr, "usage: openai_emit WORKDIR (%s)\n", argc == 2 ? err.msg : "");
        return 2;
    }
    fg_oai_endpoint C = FG_OAI_COMPLETIONS, H = FG_OAI_CHAT;
    body("completion", C, "{\"model\":\"m\",\"prompt\":\"Hello world\"}", 1, -1, 0);
    body("completion", C, "{\"prompt\":\"Hello world\",\"logprobs\":2,\"echo\":true}", 1, 2, 1);
    body("completion", C, "{\"prompt\":[15496,995],\"logprobs\":0,\"echo\":true}", 1, 0, 1);
    body("completion", C, "{\"prompt\":\"Hello world\",\"n\":3,\"logprobs\":5}", 3, 5, 0);
    body("chat", H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 1, -1, 0);
    body("chat", H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,"
         "\"top_logprobs\":3,\"n\":2}", 2, 3, 0);
    body("chat", H, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true}",
         1, 0, 0);
    chunks("completion_chunk", C);
    chunks("chat_chunk", H);
    char *s;
    {
        int rc_ = fg_oai_error_json("\"logit_bias\" is not supported by fg",
                                   "invalid_request_error", "logit_bias", NULL, &s, &err);
        out("error", rc_, s, &err);
    };
    batch(argv[1]);
    fg_tok_free(tok);
    return 0;
}
