/* fuzz_model_config.c - libFuzzer target for config.json through model/'s table: parse, and for
 * an accepted config build every unit's tensor list (bounded by the config limits). The same
 * bytes are also read as a generation_config.json over a fixed config (its stop set bounded);
 * an accepted config's per-layer windows are checked and its rotary frequencies computed (both
 * LongRoPE lists, Gemma 3's local settings), and a fused tensor's parts named and found among
 * the model's tensors. */
#include <stdint.h>
#include <stdlib.h>

#include "backend_int.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_hparams hp;
    fg_err err;
    static const char base[] = "{\"model_type\":\"opt\",\"vocab_size\":64,\"hidden_size\":8,"
                               "\"num_hidden_layers\":1,\"ffn_dim\":8,"
                               "\"num_attention_heads\":2,\"max_position_embeddings\":16}";
    if (fg_model_config_parse(base, sizeof base - 1, NULL, &hp, &err) != FG_OK)
        abort();
    if (fg_model_generation_config_parse((const char *)data, size, NULL, &hp, &err) == FG_OK &&
        (hp.n_eos < 1 || hp.n_eos > FG_MODEL_MAX_EOS || hp.eos_id != hp.eos_ids[0]))
        abort();
    if (fg_model_config_parse((const char *)data, size, "fuzz/config.json", &hp, &err) != FG_OK)
        return 0;
    fg_tensor_spec *spec = NULL;
    uint32_t n = 0;
    if (fg_model_tensors(&hp, &spec, &n, &err) == FG_OK &&
        (n < 2 || n > fg_model_n_units(&hp) * FG_UNIT_MAX_TENSORS))
        abort();
    /* per-layer windows: never wider than the window, counted consistently */
    uint32_t windowed = 0;
    for (uint32_t l = 0; l < hp.n_layers; l++) {
        uint32_t w = fg_model_layer_window(&hp, l);
        if (w && w != hp.sliding_window)
            abort();
        windowed += w != 0;
    }
    if (windowed != fg_model_windowed_layers(&hp))
        abort();
    /* the rotary frequencies of an accepted config (yarn's ramp included) are computable; a
     * LongRoPE config's two lists both pass the op's check (the parser validated them), and so
     * do Gemma 3's local settings */
    static float f[1u << 15];
    for (int k = 0; hp.pos == FG_POS_ROPE && k < 3; k++) {
        fg_rope r = k == 2 ? hp.rope_local : hp.rope;
        if (k == 2 && !hp.local_rope)
            break;
        r.use_long = k == 1;
        int ok = fgb_rope_check(&r, hp.head_dim, &err) == FG_OK;
        if (!ok && r.scaling == FG_ROPE_LONGROPE)
            abort();
        if (ok && r.rot_dim / 2 <= sizeof f / sizeof f[0])
            fg_rope_inv_freq(&r, f);
    }
    /* a fused tensor's parts are tensors of the model (Phi-3's q/k/v and gate/up, a mixture's
     * every expert in one tensor) */
    static const char *const fused[] = {"model.layers.0.self_attn.qkv_proj.weight",
                                        "model.layers.0.mlp.gate_up_proj.weight",
                                        "model.layers.0.mlp.experts.gate_up_proj",
                                        "model.layers.0.mlp.experts.down_proj",
                                        "model.layers.0.mlp.experts.gate_up_proj_bias",
                                        "model.layers.0.mlp.experts.down_proj_bias"};
    char parts[FG_FUSED_MAX][FG_TENSOR_NAME_MAX];
    const fg_arch *a = fg_model_arch(&hp);
    for (size_t k = 0; spec && a && a->fused && k < sizeof fused / sizeof *fused; k++) {
        uint32_t layout = 0;
        uint32_t np = a->fused(&hp, fused[k], parts, &layout);
        if (np > FG_FUSED_MAX || layout > (FG_FUSE_INTERLEAVED | FG_FUSE_TRANSPOSED))
            abort();
        for (uint32_t i = 0; i < np; i++)
            if (!fg_model_spec_find(spec, n, parts[i]))
                abort();
    }
    free(spec);
    return 0;
}
