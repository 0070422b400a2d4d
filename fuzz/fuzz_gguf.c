/* fuzz_gguf.c - libFuzzer target for the GGUF reader (convert/gguf.c): the input is a whole
 * GGUF file. What the parser accepts must keep its promises: every tensor inside the input, on
 * the alignment, no two overlapping; the metadata getters, the name mapping, the listing as
 * fg_ckpt tensors (merged experts split: one per expert; gpt-oss's read in place, its fused
 * gate_up as two views of runs of rows: every byte a listed tensor reads inside the input),
 * the dequantization of the first
 * blocks of every block type (gguf_dequant.c) and the tokenizer metadata
 * rewritten as tokenizer.json and loaded (gguf_tok.c) then run over it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void use_tensor(const ck_gguf *g, const ck_gguf_ti *t, const uint8_t *data, size_t size)
{
    uint64_t at = g->data_off + t->offset;
    if (t->offset % g->alignment || at > size || t->bytes > size - at)
        abort(); /* accepted data must lie inside the file, aligned */
    char hf[FG_CKPT_MAX_NAME + 64];
    ck_gguf_hf_name(ck_gguf_str(g, "general.architecture"), t->name, hf, sizeof hf);
    ck_gguf_expert_name(t->name, t->ne[2], hf, sizeof hf);
    float out[512];
    uint32_t be, bb;
    if (!ck_ggml_block(t->type, &be, &bb) || be == 1)
        return;
    uint64_t blocks = t->bytes / bb;
    blocks = blocks < 512 / be ? blocks : 512 / be;
    static const struct { uint32_t ggml; uint8_t ckpt; } types[] = {
        {CK_GGML_Q4_0, FG_CKPT_Q4_0}, {CK_GGML_Q4_1, FG_CKPT_Q4_1}, {CK_GGML_Q5_0, FG_CKPT_Q5_0},
        {CK_GGML_Q5_1, FG_CKPT_Q5_1}, {CK_GGML_Q8_0, FG_CKPT_Q8_0}, {CK_GGML_Q2_K, FG_CKPT_Q2_K},
        {CK_GGML_Q3_K, FG_CKPT_Q3_K}, {CK_GGML_Q4_K, FG_CKPT_Q4_K}, {CK_GGML_Q5_K, FG_CKPT_Q5_K},
        {CK_GGML_Q6_K, FG_CKPT_Q6_K}, {CK_GGML_IQ4_NL, FG_CKPT_IQ4_NL},
        {CK_GGML_IQ4_XS, FG_CKPT_IQ4_XS}, {CK_GGML_MXFP4, FG_CKPT_MXFP4},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].ggml == t->type && ck_gguf_dequant(types[i].ckpt, data + at, blocks, out))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ck_src src = {.mem = data, .fd = -1, .size = size, .label = "fuzz.gguf"};
    ck_gguf g;
    fg_err err;
    if (ck_gguf_parse(&src, &g, &err) == FG_OK) {
        uint64_t v;
        double f;
        (void)ck_gguf_str(&g, "general.architecture");
        (void)ck_gguf_uint(&g, "llama.block_count", &v);
        (void)ck_gguf_float(&g, "llama.rope.freq_base", &f);
        if (g.n_ti && g.data_off > size)
            abort();
        uint64_t end = 0;
        for (uint32_t i = 0; i < g.n_ti; i++) {
            use_tensor(&g, &g.ti[i], data, size);
            end = g.ti[i].offset + g.ti[i].bytes > end ? g.ti[i].offset + g.ti[i].bytes : end;
        }
        ck_list l = {0};
        if (ck_gguf_list(&g, "fuzz.gguf", &l, &err) == FG_OK && l.n < g.n_ti)
            abort();
        for (uint32_t i = 0; i < l.n; i++) { /* the last byte each listed tensor reads */
            const fg_ckpt_tensor *t = &l.t[i];
            uint32_t be, bb;
            uint64_t run = t->run ? t->run : t->n_elements, span;
            if (!ck_dtype_block(t->dtype, &be, &bb) || !run || run % be ||
                (t->run && t->n_elements % run))
                abort();
            span = (t->run ? (t->n_elements / run - 1) * t->stride + run : run) / be * bb;
            if (t->offset > size || span > size - t->offset)
                abort();
        }
        if (l.n == g.n_ti && ck_gguf_join(&g, &l, "fuzz.gguf", &err) == FG_OK) /* deepseek2 */
            for (uint32_t i = 0; i < l.n; i++)
                if (l.t[i].join && (l.t[i].join > l.n || !l.t[l.t[i].join - 1].is_scale ||
                                    l.t[i].n_elements != l.t[i].dims[0] * l.t[i].dims[1]))
                    abort();
        ck_list_free(&l);
        char *tj, *cj; /* the tokenizer metadata rewritten as tokenizer.json and loaded */
        size_t tl, cl;
        if (ck_gguf_tokenizer(&g, &src, &tj, &tl, &cj, &cl, NULL, &err) == FG_OK && (!tj || !cj))
            abort();
        free(tj);
        free(cj);
    }
    ck_gguf_free(&g);
    return 0;
}
