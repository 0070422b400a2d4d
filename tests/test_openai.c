/* test_openai.c - OpenAI request bodies and both job line formats as fg_requests, and the
 * writers: every accepted field read into the request, every refusal naming its field (and
 * param), fg's own line's new fields and their strict types, OpenAI Batch lines through the job
 * reader (invalid ones kept as the line's error, the job going on), result lines of both
 * formats in one results file and their resume by id / custom_id, and the writers' shapes
 * checked with jansson (the openai package's types check them too: check_openai_types.py). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jobs.h"
#include "openai.h"
#include "openai_sample.h"
#include "testutil.h"

static void setup(void) { tu_tmpdir_create(); }
static void teardown(void) { tu_tmpdir_remove(); }

static void parse_ok(const char *body, fg_oai_endpoint ep, fg_oai_body *b)
{
    fg_err err = {0};
    char param[64];
    ck_assert_msg(fg_oai_body_parse(body, strlen(body), ep, 0, b, param, &err) == FG_OK,
                  "%s: %s", body, err.msg);
}

START_TEST(completions_every_field)
{
    fg_oai_body b;
    parse_ok("{\"model\":\"opt\",\"prompt\":\"Hi\",\"max_tokens\":7,\"temperature\":0.5,"
             "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":-2,\"stop\":[\"a\",\"b\"],\"n\":3,"
             "\"logprobs\":20,\"echo\":true,\"ignore_eos\":true,\"min_tokens\":2,"
             "\"presence_penalty\":0.5,\"frequency_penalty\":-1,\"repetition_penalty\":1.2,"
             "\"user\":\"u1\",\"best_of\":3,\"stream\":false,\"suffix\":null,\"logit_bias\":null}",
             FG_OAI_COMPLETIONS, &b);
    const fg_request *q = &b.req;
    ck_assert_str_eq(b.model, "opt");
    ck_assert_str_eq(q->prompt, "Hi");
    ck_assert_ptr_null(q->messages);
    ck_assert_uint_eq(q->max_tokens, 7);
    ck_assert_float_eq(q->sample.temperature, 0.5f);
    ck_assert_float_eq(q->sample.top_p, 0.9f);
    ck_assert_uint_eq(q->sample.top_k, 40);
    ck_assert_float_eq(q->min_p, 0.05f);
    ck_assert_uint_eq(q->sample.seed, (uint64_t)-2);
    ck_assert(q->has_seed);
    ck_assert_int_eq(q->n_stops, 2);
    ck_assert_str_eq(q->stops[1], "b");
    ck_assert_uint_eq(q->n, 3);
    ck_assert_int_eq(q->logprobs, 20);
    ck_assert(q->echo && q->ignore_eos && !q->stream);
    ck_assert_uint_eq(q->min_tokens, 2);
    ck_assert_float_eq(q->presence_penalty, 0.5f);
    ck_assert_float_eq(q->frequency_penalty, -1.0f);
    ck_assert_float_eq(q->repetition_penalty, 1.2f);
    ck_assert_uint_eq(q->set, 0xff);
    fg_oai_body_clear(&b);

    /* the prompt's other shapes; top_k -1 is off; absent fields leave set empty */
    parse_ok("{\"prompt\":[1,2,3],\"top_k\":-1}", FG_OAI_COMPLETIONS, &b);
    ck_assert_uint_eq(b.req.n_prompt_ids, 3);
    ck_assert_int_eq(b.req.prompt_ids[2], 3);
    ck_assert_uint_eq(b.req.sample.top_k, 0);
    ck_assert_int_eq(b.req.logprobs, -1);
    fg_oai_body_clear(&b);
    parse_ok("{\"prompt\":[\"one\"]}", FG_OAI_COMPLETIONS, &b);
    ck_assert_str_eq(b.req.prompt, "one");
    ck_assert_uint_eq(b.req.set, 0);
    fg_oai_body_clear(&b);
    parse_ok("{\"prompt\":[[9,8]],\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             FG_OAI_COMPLETIONS, &b);
    ck_assert_uint_eq(b.req.n_prompt_ids, 2);
    ck_assert(b.stream && b.include_usage && b.req.stream);
    fg_oai_body_clear(&b);
}
END_TEST

START_TEST(chat_every_field)
{
    fg_oai_body b;
    parse_ok("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":"
             "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}],"
             "\"max_completion_tokens\":5,\"logprobs\":true,\"top_logprobs\":4,"
             "\"chat_template_kwargs\":{\"enable_thinking\":false},\"temperature\":0}",
             FG_OAI_CHAT, &b);
    ck_assert_ptr_null(b.req.prompt);
    ck_assert_ptr_nonnull(strstr(b.req.messages, "\"role\":\"system\""));
    ck_assert_str_eq(b.req.chat_kwargs, "{\"enable_thinking\":false}");
    ck_assert_uint_eq(b.req.max_tokens, 5);
    ck_assert_int_eq(b.req.logprobs, 4);
    ck_assert_uint_eq(b.req.set, FG_REQ_SET_TEMPERATURE);
    fg_oai_body_clear(&b);
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
             "\"max_tokens\":3}", FG_OAI_CHAT, &b);
    ck_assert_int_eq(b.req.logprobs, 0); /* the chosen token's, no alternatives */
    ck_assert_uint_eq(b.req.max_tokens, 3);
    fg_oai_body_clear(&b);
    parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false}",
             FG_OAI_CHAT, &b);
    ck_assert_int_eq(b.req.logprobs, -1);
    fg_oai_body_clear(&b);
}
END_TEST

/* Each body refused, with the field named in the message and in param. */
static const struct {
    fg_oai_endpoint ep;
    unsigned flags;
    const char *body, *param, *want;
} refused[] = {
#define C FG_OAI_COMPLETIONS
#define H FG_OAI_CHAT
    {C, 0, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":2}}", "logit_bias", "not supported by fg"},
    {C, 0, "{\"prompt\":\"x\",\"suffix\":\"s\"}", "suffix", "\"suffix\" is not supported"},
    {C, 0, "{\"prompt\":\"x\",\"best_of\":2}", "best_of", "best_of equal to n"},
    {C, 0, "{\"prompt\":\"x\",\"use_beam_search\":true}", "use_beam_search", "not supported"},
    {C, 0, "{\"prompt\":\"x\",\"response_format\":{}}", "response_format", "not supported"},
    {C, 0, "{\"prompt\":\"x\",\"prompt_logprobs\":1}", "prompt_logprobs", "not supported"},
    {C, 0, "{\"prompt\":\"x\",\"stop_token_ids\":[1]}", "stop_token_ids", "not supported"},
    {C, 0, "{\"prompt\":\"x\",\"frobnicate\":1}", "frobnicate", "unknown field \"frobnicate\""},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[]}", "tools",
     "\"tools\" is not supported"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}",
     "tool_choice", "not supported"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "echo",
     "only for /v1/completions"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
     "{\"type\":\"json_object\"}}", "response_format", "not supported"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":\"x\"}", "prompt",
     "unknown field"},
    {C, 0, "{\"messages\":[]}", "messages", "unknown field"},
    {C, FG_OAI_BATCH, "{\"prompt\":\"x\",\"stream\":true}", "stream", "not possible in a batch"},
    {C, 0, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options",
     "only with \"stream\": true"},
    {C, 0, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "a list of 2 prompts"},
    {C, 0, "{\"prompt\":[]}", "prompt", "token ids"},
    {C, 0, "{\"prompt\":[1,-2]}", "prompt", "\"prompt\"[1] must be a token id"},
    {C, 0, "{\"prompt\":[1,2.5]}", "prompt", "\"prompt\"[1]"},
    {C, 0, "{\"prompt\":5}", "prompt", "must be a string"},
    {C, 0, "{\"model\":\"m\"}", "prompt", "\"prompt\" is missing"},
    {C, 0, "{\"prompt\":null}", "prompt", "\"prompt\" is missing"},
    {H, 0, "{\"model\":\"m\"}", "messages", "\"messages\" is missing"},
    {H, 0, "{\"messages\":[{\"content\":\"x\"}]}", "messages", "no \"role\""},
    {H, 0, "{\"messages\":[]}", "messages", "non-empty array"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}",
     "chat_template_kwargs", "must be an object"},
    {C, 0, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "\"max_tokens\" must be an integer"},
    {C, 0, "{\"prompt\":\"x\",\"max_tokens\":1.0}", "max_tokens", "max_tokens"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,"
     "\"max_completion_tokens\":3}", "max_tokens", "together"},
    {C, 0, "{\"prompt\":\"x\",\"temperature\":\"1\"}", "temperature", "must be a number"},
    {C, 0, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature", "\"temperature\" -1"},
    {C, 0, "{\"prompt\":\"x\",\"temperature\":NaN}", "temperature", "must be a number"},
    {C, 0, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "(0, 1]"},
    {C, 0, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p", "(0, 1]"},
    {C, 0, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", "top_k"},
    {C, 0, "{\"prompt\":\"x\",\"min_p\":1.5}", "min_p", "[0, 1]"},
    {C, 0, "{\"prompt\":\"x\",\"seed\":1.5}", "seed", "\"seed\" must be an integer"},
    {C, 0, "{\"prompt\":\"x\",\"seed\":99999999999999999999}", "seed", "seed"},
    {C, 0, "{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty", "[-2, 2]"},
    {C, 0, "{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", "frequency_penalty", "[-2, 2]"},
    {C, 0, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty", "> 0"},
    {C, 0, "{\"prompt\":\"x\",\"n\":0}", "n", "\"n\" must be an integer from 1 to 128"},
    {C, 0, "{\"prompt\":\"x\",\"n\":129}", "n", "\"n\""},
    {C, 0, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "from 0 to 20"},
    {C, 0, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "\"logprobs\" must be an integer"},
    {C, 0, "{\"prompt\":\"x\",\"top_logprobs\":2}", "top_logprobs", "for /v1/chat/completions"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs",
     "true or false"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
     "top_logprobs", "needs \"logprobs\": true"},
    {H, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
     "\"top_logprobs\":21}", "top_logprobs", "from 0 to 20"},
    {C, 0, "{\"prompt\":\"x\",\"echo\":1}", "echo", "true or false"},
    {C, 0, "{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", "ignore_eos", "true or false"},
    {C, 0, "{\"prompt\":\"x\",\"min_tokens\":-1}", "min_tokens", "min_tokens"},
    {C, 0, "{\"prompt\":\"x\",\"min_tokens\":9,\"max_tokens\":4}", "min_tokens",
     "more than \"max_tokens\""},
    {C, 0, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop", "non-empty"},
    {C, 0, "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}",
     "stop", "at most 8"},
    {C, 0, "{\"prompt\":\"x\",\"model\":5}", "model", "\"model\" must be a string"},
    {C, 0, "{\"prompt\":\"x\",\"user\":5}", "user", "\"user\" must be a string"},
    {C, 0, "[1]", "", "not a JSON object"},
    {C, 0, "{\"prompt\":\"x\",\"prompt\":\"y\"}", "", "not valid JSON"},
    /* regression (fuzz_oai_body): the parser's message quoted a raw newline of the body */
    {C, 0, "{\"prompt\":\"x\\\n\"}", "", "not valid JSON"},
#undef C
#undef H
};

START_TEST(refusals_name_the_field)
{
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        fg_oai_body b;
        fg_err err = {0};
        char param[64] = "unset";
        int rc = fg_oai_body_parse(refused[i].body, strlen(refused[i].body), refused[i].ep,
                                   refused[i].flags, &b, param, &err);
        ck_assert_msg(rc == FG_ERR_INVALID_ARG, "%s: accepted", refused[i].body);
        ck_assert_msg(strstr(err.msg, refused[i].want), "%s: %s", refused[i].body, err.msg);
        ck_assert_msg(!strcmp(param, refused[i].param), "%s: param \"%s\"", refused[i].body,
                      param);
        ck_assert_ptr_null(b.req.prompt); /* left empty */
        ck_assert_ptr_null(strchr(err.msg, '\n'));
    }
}
END_TEST

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

START_TEST(fg_line_fields)
{
    const char *p = tu_path("in.jsonl");
    put(p, "{\"id\":\"a\",\"prompt\":[5,6],\"temperature\":0.7,\"top_p\":0.5,\"top_k\":3,"
           "\"min_p\":0.1,\"seed\":9,\"presence_penalty\":1,\"frequency_penalty\":1,"
           "\"repetition_penalty\":1.3,\"n\":2,\"logprobs\":4,\"echo\":true,\"min_tokens\":1,"
           "\"ignore_eos\":true,\"max_new_tokens\":6,\"stop\":\"x\"}\n"
           "{\"id\":2,\"prompt\":\"plain\"}\n");
    fg_job_list l;
    fg_err err = {0};
    ck_assert_msg(fg_jobs_load(p, &l, &err) == FG_OK, "%s", err.msg);
    const fg_request *q = &l.jobs[0].req;
    ck_assert_int_eq(l.jobs[0].format, FG_JOB_FG);
    ck_assert_ptr_null(q->prompt);
    ck_assert_uint_eq(q->n_prompt_ids, 2);
    ck_assert_int_eq(q->prompt_ids[1], 6);
    ck_assert_float_eq(q->sample.temperature, 0.7f);
    ck_assert_uint_eq(q->sample.top_k, 3);
    ck_assert_uint_eq(q->sample.seed, 9);
    ck_assert_float_eq(q->repetition_penalty, 1.3f);
    ck_assert_uint_eq(q->set, 0xff);
    ck_assert_uint_eq(q->n, 2);
    ck_assert_int_eq(q->logprobs, 4);
    ck_assert(q->echo && q->ignore_eos);
    ck_assert_uint_eq(q->min_tokens, 1);
    ck_assert_uint_eq(q->max_tokens, 6);
    ck_assert_int_eq(q->n_stops, 1);
    ck_assert_str_eq(q->stops[0], "x");
    q = &l.jobs[1].req;
    ck_assert_str_eq(q->prompt, "plain");
    ck_assert_int_eq(q->logprobs, -1);
    ck_assert_uint_eq(q->max_tokens, 0);
    ck_assert_uint_eq(q->set, 0);
    fg_jobs_free(&l);

    /* a bad field stops the job before it starts, naming the line, the id and the field */
    static const struct {
        const char *line, *want;
    } bad[] = {
        {"{\"id\":\"a\",\"prompt\":\"x\",\"temperature\":\"hot\"}", "\"temperature\" must be"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"temperature\":null}", "\"temperature\" must be"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"top_p\":2}", "\"top_p\" 2: must be in (0, 1]"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"n\":1.0}", "\"n\" must be an integer"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"logprobs\":true}", "\"logprobs\" must be an integer"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"echo\":\"y\"}", "\"echo\" must be true or false"},
        {"{\"id\":\"a\",\"prompt\":[]}", "\"prompt\" token ids"},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":3}", "unknown key \"max_tokens\""},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"logit_bias\":{}}", "unknown key \"logit_bias\""},
        {"{\"id\":\"a\",\"prompt\":\"x\",\"min_tokens\":5,\"max_new_tokens\":2}",
         "\"min_tokens\" 5: more than"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}",
         "\"echo\": only with a \"prompt\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put(p, bad[i].line);
        int rc = fg_jobs_load(p, &l, &err);
        ck_assert_msg(rc == FG_ERR_INVALID_ARG, "%s: accepted", bad[i].line);
        ck_assert_msg(strstr(err.msg, "in.jsonl:1: prompt \"a\": ") && strstr(err.msg, bad[i].want),
                      "%s: %s", bad[i].line, err.msg);
    }
}
END_TEST

static const char *const batch_lines =
    "{\"custom_id\":\"ok\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":"
    "\"opt\",\"prompt\":\"Hi\",\"max_tokens\":3,\"seed\":1}}\n"
    "{\"custom_id\":\"chat\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{"
    "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}}\n"
    "{\"custom_id\":\"lb\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{"
    "\"prompt\":\"x\",\"logit_bias\":{\"1\":1}}}\n"
    "{\"custom_id\":\"emb\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{}}\n"
    "{\"custom_id\":\"get\",\"method\":\"GET\",\"url\":\"/v1/completions\",\"body\":{}}\n"
    "{\"custom_id\":\"nobody\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"
    "{\"custom_id\":\"extra\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{"
    "\"prompt\":\"x\"},\"headers\":{}}\n"
    "{\"custom_id\":\"strm\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{"
    "\"prompt\":\"x\",\"stream\":true}}\n"
    "{\"id\":\"fg1\",\"prompt\":\"mixed in\"}\n";

START_TEST(batch_lines_read)
{
    const char *p = tu_path("in.jsonl");
    put(p, batch_lines);
    fg_job_list l;
    fg_err err = {0};
    ck_assert_msg(fg_jobs_load(p, &l, &err) == FG_OK, "%s", err.msg);
    ck_assert_uint_eq(l.n, 9);
    static const struct {
        const char *id, *param, *why;
    } want[] = {{"ok", NULL, NULL}, {"chat", NULL, NULL},
                {"lb", "logit_bias", "\"logit_bias\" is not supported by fg"},
                {"emb", "url", "/v1/embeddings"}, {"get", "method", "\"POST\""},
                {"nobody", "body", "\"body\" (an object) is missing"},
                {"extra", "headers", "unknown key \"headers\""},
                {"strm", "stream", "not possible in a batch"}, {"fg1", NULL, NULL}};
    for (size_t i = 0; i < l.n; i++) {
        const fg_job *j = &l.jobs[i];
        ck_assert_str_eq(j->id, want[i].id);
        ck_assert_int_eq(j->format, i < 8 ? FG_JOB_OPENAI : FG_JOB_FG);
        if (want[i].why) {
            ck_assert_msg(j->invalid && strstr(j->invalid, want[i].why), "%s: %s", j->id,
                          j->invalid ? j->invalid : "(valid)");
            ck_assert_str_eq(j->invalid_param, want[i].param);
        } else {
            ck_assert_msg(!j->invalid, "%s: %s", j->id, j->invalid);
        }
    }
    ck_assert_int_eq(l.jobs[0].endpoint, FG_OAI_COMPLETIONS);
    ck_assert_str_eq(l.jobs[0].model, "opt");
    ck_assert_str_eq(l.jobs[0].req.prompt, "Hi");
    ck_assert_uint_eq(l.jobs[0].req.max_tokens, 3);
    ck_assert_int_eq(l.jobs[0].max_new, 3);
    ck_assert_int_eq(l.jobs[1].endpoint, FG_OAI_CHAT);
    ck_assert_int_eq(l.jobs[1].req.logprobs, 0);
    ck_assert_ptr_nonnull(l.jobs[1].req.messages);
    fg_jobs_free(&l);

    /* what no result could answer stops the job, naming the line */
    static const struct {
        const char *line, *want;
    } fatal[] = {
        {"{\"custom_id\":5,\"body\":{}}", "in.jsonl:1: \"custom_id\" must be a non-empty string"},
        {"{\"custom_id\":\"\",\"body\":{}}", "\"custom_id\" must be"},
        {"{\"custom_id\":\"a\",\"body\":{}}\n{\"custom_id\":\"a\",\"body\":{}}",
         "in.jsonl:2: prompt \"a\": id already used on line 1"},
        {"{\"id\":\"a\",\"prompt\":\"x\"}\n{\"custom_id\":\"a\",\"body\":{}}",
         "id already used"}, /* one namespace across formats */
    };
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        put(p, fatal[i].line);
        ck_assert_int_ne(fg_jobs_load(p, &l, &err), FG_OK);
        ck_assert_msg(strstr(err.msg, fatal[i].want), "%s", err.msg);
    }
}
END_TEST

static fg_tok *load_tok(void)
{
    fg_tok *tok;
    fg_err err;
    ck_assert_msg(fg_tok_load_dir(FG_SOURCE_DIR "/data/gpt2-tokenizer", &tok, &err) == FG_OK,
                  "%s", err.msg);
    return tok;
}

static json_t *load(const char *s)
{
    json_error_t je;
    json_t *o = json_loads(s, 0, &je);
    ck_assert_msg(o != NULL, "%s: %s", je.text, s);
    return o;
}

START_TEST(completion_writer)
{
    fg_tok *tok = load_tok();
    fg_response r;
    sample_response(tok, 2, 2, 1, &r);
    fg_request q = {.prompt = "Hello world", .logprobs = 2, .echo = 1, .n = 2};
    fg_oai_meta m = {"cmpl-1", "opt", 42, fg_oai_tok_piece, tok};
    char *s;
    fg_err err;
    ck_assert_int_eq(fg_oai_response_json(&m, FG_OAI_COMPLETIONS, &q, &r, &s, &err), FG_OK);
    json_t *o = load(s);
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "created")), 42);
    json_t *ch = json_object_get(o, "choices");
    ck_assert_uint_eq(json_array_size(ch), 2);
    json_t *c0 = json_array_get(ch, 0), *c1 = json_array_get(ch, 1);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "stop"); /* EOS */
    ck_assert_str_eq(json_string_value(json_object_get(c1, "finish_reason")), "length");
    ck_assert_int_eq(json_integer_value(json_object_get(c1, "index")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "text")),
                     "Hello world caf\xc3\xa9 \xe2\x98\x95 ok");
    json_t *lp = json_object_get(c0, "logprobs");
    json_t *toks = json_object_get(lp, "tokens"), *tl = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs"), *off = json_object_get(lp, "text_offset");
    size_t n = r.n_prompt + r.choices[0].n_tokens;
    ck_assert_uint_eq(json_array_size(toks), n);
    ck_assert_uint_eq(json_array_size(off), n);
    ck_assert(json_is_null(json_array_get(tl, 0)) && json_is_null(json_array_get(top, 0)));
    ck_assert_str_eq(json_string_value(json_array_get(toks, 1)), " world");
    ck_assert_int_eq(json_integer_value(json_array_get(off, 1)), 5);
    ck_assert_int_eq(json_integer_value(json_array_get(off, n - 1)), 18); /* " ok" */
    ck_assert_str_eq(json_string_value(json_array_get(toks, 3)), " \xef\xbf\xbd"); /* half a char */
    double want = log(0.5); /* generated position 0 */
    ck_assert_double_eq_tol(json_real_value(json_array_get(tl, r.n_prompt)), want, 1e-6);
    json_t *d = json_array_get(top, r.n_prompt);
    ck_assert_double_eq_tol(json_real_value(json_object_get(d, " caf\xc3\xa9")), want, 1e-6);
    json_t *u = json_object_get(o, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "prompt_tokens")), r.n_prompt);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "completion_tokens")),
                     r.completion_tokens);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "total_tokens")),
                     r.n_prompt + r.completion_tokens);
    json_decref(o);
    free(s);
    fg_response_clear(&r);
    fg_tok_free(tok);
}
END_TEST

START_TEST(chat_writer_and_chunks)
{
    fg_tok *tok = load_tok();
    fg_response r;
    sample_response(tok, 1, 3, 0, &r);
    r.choices[0].finish = FG_FINISH_STOP;
    fg_request q = {.messages = "[]", .logprobs = 3};
    fg_oai_meta m = {"chatcmpl-1", "opt", 1, fg_oai_tok_piece, tok};
    char *s;
    fg_err err;
    ck_assert_int_eq(fg_oai_response_json(&m, FG_OAI_CHAT, &q, &r, &s, &err), FG_OK);
    json_t *o = load(s), *c0 = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion");
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_t *msg = json_object_get(c0, "message");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    json_t *content = json_object_get(json_object_get(c0, "logprobs"), "content");
    ck_assert_uint_eq(json_array_size(content), r.choices[0].n_tokens);
    json_t *e1 = json_array_get(content, 1); /* " \xe2\x98": bytes kept raw */
    json_t *bytes = json_object_get(e1, "bytes");
    ck_assert_uint_eq(json_array_size(bytes), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(bytes, 1)), 0xe2);
    ck_assert_uint_eq(json_array_size(json_object_get(e1, "top_logprobs")), 3);
    json_decref(o);
    free(s);

    /* the first chunk carries the role; the last its finish reason */
    const fg_choice *c = &r.choices[0];
    ck_assert_int_eq(fg_oai_chunk_json(&m, FG_OAI_CHAT, 0, 1, "ab", 2, c->tokens, c->logprob,
                                       c->top, c->n_top, 1, FG_FINISH_NONE, &s, &err), FG_OK);
    o = load(s);
    c0 = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion.chunk");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c0, "delta"), "role")),
                     "assistant");
    ck_assert(json_is_null(json_object_get(c0, "finish_reason")));
    json_decref(o);
    free(s);
    ck_assert_int_eq(fg_oai_chunk_json(&m, FG_OAI_COMPLETIONS, 2, 0, "z", 1, NULL, NULL, NULL, 0,
                                       0, FG_FINISH_EOS, &s, &err), FG_OK);
    ck_assert_str_eq(s, "{\"id\":\"chatcmpl-1\",\"object\":\"text_completion\",\"created\":1,"
                        "\"model\":\"opt\",\"choices\":[{\"index\":2,\"text\":\"z\",\"logprobs\":"
                        "null,\"finish_reason\":\"stop\"}]}");
    free(s);
    ck_assert_int_eq(fg_oai_usage_chunk_json(&m, FG_OAI_CHAT, 3, 4, &s, &err), FG_OK);
    ck_assert_ptr_nonnull(strstr(s, "\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                                    "\"completion_tokens\":4,\"total_tokens\":7}"));
    free(s);
    ck_assert_int_eq(fg_oai_error_json("bad \"x\"", "invalid_request_error", "x", NULL, &s, &err),
                     FG_OK);
    ck_assert_str_eq(s, "{\"error\":{\"message\":\"bad \\\"x\\\"\",\"type\":\"invalid_request_error\","
                        "\"param\":\"x\",\"code\":null}}");
    free(s);
    fg_response_clear(&r);
    fg_tok_free(tok);
}
END_TEST

/* Both formats' results in one file; a resume finds every id (custom_id for OpenAI lines). */
START_TEST(mixed_results_resume)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    put(in, batch_lines);
    fg_tok *tok = load_tok();
    fg_job_reader *rd;
    fg_job_output *o;
    fg_err err = {0};
    fg_job_list b = {0};
    ck_assert_msg(fg_job_reader_open(in, &rd, &err) == FG_OK, "%s", err.msg);
    ck_assert_int_eq(fg_job_output_open(out, 0, &o, NULL, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_set_openai(o, "opt", fg_oai_tok_piece, tok, &err), FG_OK);
    ck_assert_int_eq(fg_job_reader_next(rd, NULL, 4, &b, &err), FG_OK); /* the first four */
    for (size_t i = 0; i < b.n; i++) {
        fg_response r = {0};
        fg_job_result jr = {.job = &b.jobs[i], .error = b.jobs[i].invalid,
                            .error_type = "invalid_request_error"};
        if (!b.jobs[i].invalid) {
            sample_response(tok, 1, b.jobs[i].req.logprobs, 0, &r);
            jr.resp = &r;
        }
        ck_assert_msg(fg_job_output_append(o, &jr, 1, &err) == FG_OK, "%s", err.msg);
        fg_response_clear(&r);
    }
    /* a legacy result (text, no fg_response) for the fg line; the runner of today */
    ck_assert_int_eq(fg_job_reader_next(rd, NULL, 16, &b, &err), FG_OK);
    fg_job *last = &b.jobs[b.n - 1];
    ck_assert_str_eq(last->id, "fg1");
    fg_job_result jr = {.job = last, .text = "t", .tokens = (int32_t[]){1}, .n_tokens = 1,
                        .prompt_tokens = 2, .finish = "eos"};
    ck_assert_int_eq(fg_job_output_append(o, &jr, 1, &err), FG_OK);
    /* ... and the chat line without log-probs through the legacy path: valid OpenAI output */
    ck_assert_int_eq(fg_job_output_close(o, &err), FG_OK);
    fg_jobs_free(&b);
    fg_job_reader_close(rd);

    char *text = slurp(out);
    ck_assert_ptr_nonnull(strstr(text, "{\"id\":\"fg-batch-"));
    ck_assert_ptr_nonnull(strstr(text, "\"custom_id\":\"ok\",\"response\":{\"status_code\":200"));
    ck_assert_ptr_nonnull(strstr(text, "\"custom_id\":\"lb\",\"response\":{\"status_code\":400"));
    ck_assert_ptr_nonnull(strstr(text, "\"param\":\"logit_bias\""));
    ck_assert_ptr_nonnull(strstr(text, "\"param\":\"url\""));
    ck_assert_ptr_nonnull(strstr(text, "{\"id\":\"fg1\",\"text\":\"t\",\"tokens\":[1],"
                                       "\"finish_reason\":\"eos\""));
    ck_assert_ptr_nonnull(strstr(text, "\"model\":\"opt\""));

    fg_job_output_info info;
    ck_assert_int_eq(fg_job_output_open(out, FG_JOB_RESUME, &o, &info, &err), FG_OK);
    ck_assert_uint_eq(info.n_results, 5);
    ck_assert_uint_eq(info.n_damaged, 0);
    ck_assert(fg_job_output_has(o, "ok") && fg_job_output_has(o, "chat") &&
              fg_job_output_has(o, "lb") && fg_job_output_has(o, "emb") &&
              fg_job_output_has(o, "fg1") && !fg_job_output_has(o, "get"));
    ck_assert_int_eq(fg_job_output_close(o, &err), FG_OK);
    fg_tok_free(tok);
}
END_TEST

/* A result from the legacy path must not drop what its request asked for. */
START_TEST(legacy_result_refuses_what_it_lacks)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    put(in, "{\"id\":\"a\",\"prompt\":\"x\",\"logprobs\":1}\n"
            "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{"
            "\"prompt\":\"x\",\"n\":2}}\n");
    fg_job_list l;
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_jobs_load(in, &l, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_open(out, 0, &o, NULL, &err), FG_OK);
    fg_job_result r[2] = {{.job = &l.jobs[0], .text = "t", .finish = "length"},
                          {.job = &l.jobs[1], .text = "t", .finish = "length"}};
    ck_assert_int_eq(fg_job_output_append(o, r, 2, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_close(o, &err), FG_OK);
    char *text = slurp(out);
    ck_assert_msg(strstr(text, "{\"id\":\"a\",\"error\":{\"type\":\"unsupported\",\"message\":"
                               "\"this job runner does not produce log-probabilities yet\"}"),
                  "%s", text);
    ck_assert_msg(strstr(text, "\"status_code\":501") && strstr(text, "n > 1 choices"), "%s",
                  text);
    fg_jobs_free(&l);
}
END_TEST

/* An fg line answered from a full response: choices, log-probs, prompt ids. */
START_TEST(fg_result_from_response)
{
    const char *in = tu_path("in.jsonl"), *out = tu_path("out.jsonl");
    put(in, "{\"id\":7,\"prompt\":\"Hello world\",\"n\":2,\"logprobs\":1,\"meta\":{\"k\":1}}\n");
    fg_tok *tok = load_tok();
    fg_job_list l;
    fg_job_output *o;
    fg_err err;
    ck_assert_int_eq(fg_jobs_load(in, &l, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_open(out, 0, &o, NULL, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_set_openai(o, NULL, fg_oai_tok_piece, tok, &err), FG_OK);
    fg_response resp;
    sample_response(tok, 2, 1, 0, &resp);
    fg_job_result r = {.job = &l.jobs[0], .resp = &resp, .block = 3};
    ck_assert_int_eq(fg_job_output_append(o, &r, 1, &err), FG_OK);
    ck_assert_int_eq(fg_job_output_close(o, &err), FG_OK);
    json_t *j = load(slurp(out));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "id")), 7);
    ck_assert_str_eq(json_string_value(json_object_get(j, "finish_reason")), "eos");
    ck_assert_uint_eq(json_array_size(json_object_get(j, "choices")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(
                         json_object_get(j, "choices"), 1), "text")), " second");
    json_t *lp = json_object_get(j, "logprobs");
    ck_assert_uint_eq(json_array_size(json_object_get(lp, "tokens")), resp.choices[0].n_tokens);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "prompt_tokens")), resp.n_prompt);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "meta"), "k")), 1);
    json_decref(j);
    fg_response_clear(&resp);
    fg_jobs_free(&l);
    fg_tok_free(tok);
}
END_TEST

START_TEST(request_check_rules)
{
    fg_err err;
    fg_request q = {.prompt = "x", .logprobs = -1};
    ck_assert_int_eq(fg_request_check(&q, &err), FG_OK);
    q.messages = "[]";
    ck_assert_int_eq(fg_request_check(&q, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "together"));
    q = (fg_request){.logprobs = -1};
    ck_assert_int_eq(fg_request_check(&q, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"prompt\" (or \"messages\") is missing"));
    q = (fg_request){.prompt = "x", .logprobs = 21};
    ck_assert_int_eq(fg_request_check(&q, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"logprobs\""));
    q = (fg_request){.messages = "[]", .logprobs = 21};
    ck_assert_int_eq(fg_request_check(&q, &err), FG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "\"top_logprobs\""));
    /* an unset field is the run's default, whatever it holds */
    q = (fg_request){.prompt = "x", .logprobs = -1, .sample.top_p = 0};
    ck_assert_int_eq(fg_request_check(&q, &err), FG_OK);
    q.set = FG_REQ_SET_TOP_P;
    ck_assert_int_eq(fg_request_check(&q, &err), FG_ERR_INVALID_ARG);
    fg_response r = {0};
    r.choices = calloc(1, sizeof *r.choices);
    r.n_choices = 1;
    r.choices[0].text = strdup("t");
    fg_response_clear(&r);
    ck_assert_ptr_null(r.choices);
    fg_response_clear(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("openai");
    TCase *tc = tcase_create("openai");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, completions_every_field);
    tcase_add_test(tc, chat_every_field);
    tcase_add_test(tc, refusals_name_the_field);
    tcase_add_test(tc, fg_line_fields);
    tcase_add_test(tc, batch_lines_read);
    tcase_add_test(tc, completion_writer);
    tcase_add_test(tc, chat_writer_and_chunks);
    tcase_add_test(tc, mixed_results_resume);
    tcase_add_test(tc, legacy_result_refuses_what_it_lacks);
    tcase_add_test(tc, fg_result_from_response);
    tcase_add_test(tc, request_check_rules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(suite());
}
