/* examples/generate.c - greedy generation through the engine API, as another program writes it
 * against the installed libfg (pkg-config fg, or find_package(fg) and fg::fg).
 *
 *   fg_generate STORE PROMPT [N]   continue PROMPT by N tokens (default 16), greedily
 *
 * Prints one line "tokens: ID ..." with the generated ids, then the prompt and its continuation.
 * The store (made by fg-convert) is opened read-only and lent to the engine, which runs the
 * default policy: everything in RAM when it fits.
 * The prompt is encoded as fg-infer encodes it (BOS first when the model wants one), so the
 * tokens equal fg-infer's for the same prompt at temperature 0 (tests/install checks this).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fg/engine.h>

static int fail(const char *what, const fg_err *err)
{
    fprintf(stderr, "fg_generate: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: fg_generate STORE PROMPT [N]\n");
        return 2;
    }
    uint32_t n_new = argc == 4 ? (uint32_t)strtoul(argv[3], NULL, 10) : 16;
    if (n_new == 0 || n_new > 4096) {
        fprintf(stderr, "fg_generate: N %s: from 1 to 4096 tokens\n", argv[3]);
        return 2;
    }
    fg_engine_opts o = {0};
    o.policy = fg_policy_default(); /* zig-zag, overlap, separate sub-layers, sizes chosen */
    fg_store *store;
    fg_model *model = NULL;
    fg_tok *tok = NULL;
    fg_engine *e;
    fg_err err;
    if (fg_store_open(argv[1], FG_STORE_RDONLY, NULL, &store, &err))
        return fail(argv[1], &err);
    if (fg_model_open(store, &model, &err) || fg_model_tokenizer(model, &tok, &err) ||
        fg_engine_open(model, &o, &e, &err)) {
        fg_tok_free(tok);
        fg_model_close(model);
        fg_store_close(store);
        return fail(argv[1], &err);
    }
    fg_tok_ids prompt = {0};
    fg_tok_bytes text = {0};
    int32_t *out = malloc(n_new * sizeof *out);
    int rc = 1;
    if (!out)
        fprintf(stderr, "fg_generate: out of memory\n");
    else if (fg_tok_encode(tok, argv[2], strlen(argv[2]), FG_TOK_ADD_BOS, &prompt, &err))
        fail("encoding the prompt", &err);
    else {
        fg_gen_seq s = {prompt.ids, (uint32_t)prompt.n, n_new, {0, 0, 1, 0}, 0, out, 0, 0};
        fg_gen_stats st;
        if (fg_engine_generate(e, &s, 1, NULL, &st, &err))
            fail("generate", &err);
        else if (fg_tok_decode(tok, out, s.n_out, FG_TOK_SKIP_SPECIAL, &text, &err))
            fail("decoding", &err);
        else {
            printf("tokens:");
            for (uint32_t i = 0; i < s.n_out; i++)
                printf(" %d", out[i]);
            printf("\n%s%.*s\n", argv[2], (int)text.len, text.data ? text.data : "");
            rc = 0;
        }
    }
    fg_tok_bytes_free(&text);
    fg_tok_ids_free(&prompt);
    free(out);
    if (fg_engine_close(e, &err))
        rc = fail("close", &err);
    fg_tok_free(tok);
    fg_model_close(model);
    fg_store_close(store);
    return rc;
}
