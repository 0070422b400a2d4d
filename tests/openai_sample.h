/* openai_sample.h - fg_responses built by hand for the OpenAI writers' tests (test_openai.c)
 * and the emitter whose lines the openai package's types check (openai_emit.c,
 * check_openai_types.py): real token ids of GPT-2's tokenizer (data/gpt2-tokenizer), a reply
 * whose byte-level pieces split a character (so a token's string is U+FFFD), log-probs that
 * are real log-softmax values of a made-up distribution (sum of exp <= 1 at each position). */
#ifndef FG_OPENAI_SAMPLE_H
#define FG_OPENAI_SAMPLE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "request.h"
#include "tokenizer.h"

static inline int32_t *sample_ids(fg_tok *tok, const char *text, uint32_t *n)
{
    fg_tok_ids v = {0};
    fg_err err;
    if (fg_tok_encode(tok, text, strlen(text), 0, &v, &err))
        abort();
    *n = (uint32_t)v.n;
    return v.ids; /* the caller frees (fg_response_clear frees what it is given) */
}

static inline char *sample_text(fg_tok *tok, const int32_t *ids, uint32_t n)
{
    fg_tok_bytes b = {0};
    fg_err err;
    if (fg_tok_decode(tok, ids, n, 0, &b, &err))
        abort();
    char *s = malloc(b.len + 1);
    memcpy(s, b.data, b.len);
    s[b.len] = '\0';
    fg_tok_bytes_free(&b);
    return s;
}

/* Position i's log-probs: chosen gets log(0.5 / (i + 1)), the alternatives descending. */
static inline void sample_lps(int32_t chosen, uint32_t i, uint32_t n_top, float *lp,
                              fg_token_lp *top)
{
    *lp = logf(0.5f / (float)(i + 1));
    for (uint32_t k = 0; k < n_top; k++) {
        top[k].id = k == 0 ? chosen : (int32_t)(100 + 7 * k + i);
        top[k].logprob = k == 0 ? *lp : logf(0.2f / (float)(k + 1) / (float)(i + 1));
    }
}

/* A response to prompt "Hello world" with n choices of reply text (EOS-finished first, the
 * others length), log-probs with n_top alternatives when n_top >= 0 (prompt log-probs too, the
 * first NaN, when echo). */
static inline void sample_response(fg_tok *tok, uint32_t n, int n_top, int echo,
                                   fg_response *r)
{
    static const char *const replies[] = {" caf\xc3\xa9 \xe2\x98\x95 ok", " second", " third"};
    memset(r, 0, sizeof *r);
    r->prompt_ids = sample_ids(tok, "Hello world", &r->n_prompt);
    r->choices = calloc(n, sizeof *r->choices);
    r->n_choices = n;
    uint32_t nt = n_top < 0 ? 0 : (uint32_t)n_top;
    if (n_top >= 0 && echo) {
        r->prompt_logprob = malloc(r->n_prompt * sizeof(float));
        r->prompt_top = malloc((size_t)r->n_prompt * (nt ? nt : 1) * sizeof(fg_token_lp));
        for (uint32_t i = 0; i < r->n_prompt; i++)
            sample_lps(r->prompt_ids[i], i, nt, &r->prompt_logprob[i],
                       r->prompt_top + (size_t)i * nt);
        r->prompt_logprob[0] = NAN;
        for (uint32_t k = 0; k < nt; k++)
            r->prompt_top[k] = (fg_token_lp){-1, NAN};
    }
    for (uint32_t c = 0; c < n; c++) {
        fg_choice *ch = &r->choices[c];
        ch->tokens = sample_ids(tok, replies[c % 3], &ch->n_tokens);
        ch->text = sample_text(tok, ch->tokens, ch->n_tokens);
        ch->finish = c == 0 ? FG_FINISH_EOS : FG_FINISH_LENGTH;
        if (n_top >= 0) {
            ch->n_top = nt;
            ch->logprob = malloc(ch->n_tokens * sizeof(float));
            ch->top = malloc((size_t)ch->n_tokens * (nt ? nt : 1) * sizeof(fg_token_lp));
            for (uint32_t i = 0; i < ch->n_tokens; i++)
                sample_lps(ch->tokens[i], i, nt, &ch->logprob[i], ch->top + (size_t)i * nt);
        }
        r->completion_tokens += ch->n_tokens;
    }
    r->seconds = 0.25;
}

#endif
