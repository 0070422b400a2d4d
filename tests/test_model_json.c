/* test_model_json.c - config.json and generation_config.json as Python's json and
 * transformers write and read them: nulls, reals, huge integers, unknown keys (rows of strings),
 * and the published files of the real-metadata corpus (tests/fixtures/real). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "testutil.h"

/* What Python's json and transformers accept in config.json: null for an optional key is the
 * key absent (a flag's default, one KV head per query head, no window), 1e-05 a float, keys fg
 * does not know ignored; a bound (max_position_embeddings, sliding_window) may be a whole real
 * or an integer past int64 (clamped); a shape given as a real, a fractional bound or a flag that
 * is not a boolean is refused naming the key. */
START_TEST(config_nulls_reals_unknown_keys)
{
#define BASE "\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2," \
             "\"intermediate_size\":48,\"num_attention_heads\":4,\"rms_norm_eps\":1e-05"
    static const struct {
        const char *json, *bad_key; /* bad_key NULL: parses */
        uint32_t max_pos, window, kv;
        int tied;
    } rows[] = {
        {"{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":64,"
         "\"tie_word_embeddings\":null,\"attention_bias\":null,\"mlp_bias\":null,"
         "\"head_dim\":null,\"num_key_value_heads\":null,\"rope_scaling\":null,"
         "\"pad_token_id\":null,\"some_new_key\":{\"x\":[1,null,2.5e300]}}", NULL, 64, 0, 4, 0},
        {"{\"model_type\":\"qwen2\"," BASE ",\"max_position_embeddings\":64.0,"
         "\"use_sliding_window\":null,\"sliding_window\":null,\"tie_word_embeddings\":true,"
         "\"num_key_value_heads\":null}", NULL,
         64, 0, 4, 1},
        {"{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":"
         "1000000000000000019884624838656}", NULL, FG_MODEL_MAX_DIM, 0, 4, 0},
        {"{\"model_type\":\"mistral\"," BASE ",\"max_position_embeddings\":128,"
         "\"sliding_window\":4096.0,\"num_key_value_heads\":2}", NULL, 128, 4096, 2, 0},
        {"{\"model_type\":\"llama\",\"vocab_size\":64,\"hidden_size\":32.0,"
         "\"num_hidden_layers\":2,\"intermediate_size\":48,\"num_attention_heads\":4,"
         "\"max_position_embeddings\":64}", "hidden_size", 0, 0, 0, 0},
        {"{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":64.5}",
         "max_position_embeddings", 0, 0, 0, 0},
        {"{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":64,"
         "\"tie_word_embeddings\":\"yes\"}", "tie_word_embeddings", 0, 0, 0, 0},
    };
#undef BASE
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fg_hparams c;
        fg_err err;
        int rc = fg_model_config_parse(rows[i].json, strlen(rows[i].json), NULL, &c, &err);
        if (rows[i].bad_key) {
            ck_assert_msg(rc != FG_OK && strstr(err.msg, rows[i].bad_key) &&
                          strstr(err.msg, "config.json"), "row %zu: %d %s", i, rc, err.msg);
            continue;
        }
        ck_assert_msg(rc == FG_OK, "row %zu: %s", i, err.msg);
        ck_assert_msg(c.max_pos == rows[i].max_pos && c.sliding_window == rows[i].window &&
                      c.n_kv_heads == rows[i].kv && c.tied_head == rows[i].tied,
                      "row %zu: %u %u %u %d", i, c.max_pos, c.sliding_window, c.n_kv_heads,
                      c.tied_head);
    }
}
END_TEST

/* ---- the real-metadata corpus (tests/fixtures/real: published config.json and
 * generation_config.json files, sources in config_sources.tsv) ---- */

/* DIR/FILE of the corpus (malloc'd), or NULL when the corpus has no such file. */
static char *read_real(const char *dir, const char *file, size_t *len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/%s", FG_REAL_FIXTURES, dir, file);
    return access(p, F_OK) == 0 ? tu_slurp(p, len) : NULL;
}

/* Every published config.json of the corpus parses, with the shapes and features its family
 * means, and its generation_config.json (where the corpus has one) sets the stop ids; nulls for
 * optional keys, floats like 1e-05, integers where a float is meant (rope_theta 250000), keys fg
 * does not know (auto_map {}, cache_implementation, _sliding_window_pattern) all as transformers
 * reads them. */
START_TEST(real_configs)
{
    static const struct {
        const char *dir, *arch;
        uint32_t vocab, hidden, layers, heads, kv, head_dim, ffn, experts, window;
        int tied, n_eos, eos0; /* the stop set after generation_config.json */
    } rows[] = {
        {"meta-llama__Llama-2-7b-hf", "llama", 32000, 4096, 32, 32, 32, 128, 11008, 0, 0, 0, 1, 2},
        {"meta-llama__Llama-3.2-3B-Instruct", "llama", 128256, 3072, 28, 24, 8, 128, 8192, 0, 0,
         1, 3, 128001},
        {"mistralai__Mistral-7B-Instruct-v0.3", "mistral", 32768, 4096, 32, 32, 8, 128, 14336, 0,
         0, 0, 1, 2},
        {"mistralai__Mixtral-8x7B-v0.1", "mixtral", 32000, 4096, 32, 32, 8, 128, 14336, 8, 0, 0,
         1, 2},
        {"microsoft__phi-4", "phi3", 100352, 5120, 40, 40, 10, 128, 17920, 0, 0, 0, 2, 100257},
        {"Qwen__Qwen2.5-0.5B-Instruct", "qwen2", 151936, 896, 24, 14, 2, 64, 4864, 0, 0, 1, 1,
         151645},
        {"Qwen__Qwen3-1.7B", "qwen3", 151936, 2048, 28, 16, 8, 128, 6144, 0, 0, 1, 1, 151645},
        {"google__gemma-2b", "gemma", 256000, 2048, 18, 8, 1, 256, 16384, 0, 0, 1, 1, 2},
        {"google__gemma-2-9b-it", "gemma2", 256000, 3584, 42, 16, 8, 256, 14336, 0, 4096, 1, 1, 1},
        {"google__gemma-3-270m-it", "gemma3_text", 262144, 640, 18, 4, 1, 256, 2048, 0, 512, 1, 2,
         1},
        {"HuggingFaceTB__SmolLM2-135M", "llama", 49152, 576, 30, 9, 3, 64, 1536, 0, 0, 1, 1, 0},
        {"TinyLlama__TinyLlama-1.1B-Chat-v1.0", "llama", 32000, 2048, 22, 32, 4, 64, 5632, 0, 0, 0,
         1, 2},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t len;
        char *cfg = read_real(rows[i].dir, "config.json", &len);
        ck_assert_msg(cfg, "%s: no config.json", rows[i].dir);
        fg_hparams c;
        fg_err err;
        ck_assert_msg(fg_model_config_parse(cfg, len, rows[i].dir, &c, &err) == FG_OK, "%s",
                      err.msg);
        free(cfg);
        ck_assert_str_eq(c.arch, rows[i].arch);
        ck_assert_msg(c.vocab_size == rows[i].vocab && c.hidden == rows[i].hidden &&
                      c.n_layers == rows[i].layers && c.n_heads == rows[i].heads &&
                      c.n_kv_heads == rows[i].kv && c.head_dim == rows[i].head_dim,
                      "%s: shapes", rows[i].dir);
        ck_assert_msg((c.n_experts ? c.moe_ffn : c.ffn) == rows[i].ffn &&
                      c.n_experts == rows[i].experts && c.tied_head == rows[i].tied,
                      "%s: mlp/head", rows[i].dir);
        ck_assert_msg(fg_model_layer_window(&c, 0) == rows[i].window, "%s: window %u", rows[i].dir,
                      fg_model_layer_window(&c, 0));
        char *gen = read_real(rows[i].dir, "generation_config.json", &len);
        if (gen)
            ck_assert_msg(fg_model_generation_config_parse(gen, len, rows[i].dir, &c, &err) ==
                          FG_OK, "%s", err.msg);
        free(gen);
        ck_assert_msg(c.n_eos == (uint32_t)rows[i].n_eos && c.eos_id == rows[i].eos0,
                      "%s: eos %u %d", rows[i].dir, c.n_eos, c.eos_id);
    }
    /* Phi-3-mini's generation_config.json (CRLF line ends, a list of stops) on its own */
    size_t len;
    char *gen = read_real("microsoft__Phi-3-mini", "generation_config.json", &len);
    fg_hparams c = {.n_eos = 1, .eos_id = 2};
    fg_err err;
    ck_assert(gen);
    ck_assert_msg(fg_model_generation_config_parse(gen, len, NULL, &c, &err) == FG_OK, "%s",
                  err.msg);
    ck_assert(c.n_eos == 3 && c.eos_ids[2] == 32007);
    free(gen);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_json");
    TCase *tc = tcase_create("model_json");
    tcase_add_test(tc, config_nulls_reals_unknown_keys);
    tcase_add_test(tc, real_configs);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
