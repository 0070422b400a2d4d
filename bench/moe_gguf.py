#!/usr/bin/env python3
"""A random-weight GGUF of qwen1.5-moe-a2.7b's shape, Q4_0, for bench/moe.sh's llama.cpp column.

usage: moe_gguf.py OUT.gguf [--layers N] [--seed S] [--tokenizer DIR]
       (run with a Python that has gguf-py: llama.cpp's vendored gguf-py/ or PyPI's gguf)

One file both engines run: llama.cpp mmaps it as it is, and fg-convert imports it into an fg
store (`fg-convert OUT.gguf -o STORE --compress-weight --group-size 32 --group-axis 1`), so the
two read the same weights and, above all, the same routers (routing decides what is read).

The shape is the one `fg-convert synth --model qwen1.5-moe-a2.7b` writes (convert/synth.c):
general.architecture qwen2moe, hidden 2048, 24 layers (--layers cuts them, the per-layer shapes
kept), 16 heads of 128 with q/k/v biases, 60 experts of 1408 chosen 4 a token (softmax over all
60, not renormalized: qwen2moe's rule in both engines), a shared expert of 5632 behind its sigmoid
gate, vocabulary 151936, rope theta 1e6. The keys are those llama.cpp's qwen2moe loader and fg's
importer (convert/gguf_config.c) read.

The weights are written directly as ggml Q4_0 blocks (an F16 scale d, 32 four-bit codes n, value
(n - 8) d), no F32 copy made: the codes uniform random, d of random sign and magnitude uniform in
[0.5, 1.5] x 1 / (4.6 sqrt(K)) for a row of K inputs (4.6 is the codes' standard deviation), so a
matrix keeps its input's scale and activations stay finite through the layers. The embedding and
output head are Q4_0 too (the embedding at unit scale); norms ones, biases zero, routers F32
normal with standard deviation 2 / sqrt(2048) (router logits of standard deviation about 2, so
tokens spread over the experts rather than all taking the same four), the shared expert's gate
F32 of the same kind.

The tokenizer is GPT-2's byte-level BPE (data/gpt2-tokenizer: vocab.json, merges.txt; pre
"gpt-2"), its 50257 tokens padded to the 151936 rows with [PADi] tokens of type UNUSED, as
convert_hf_to_gguf.py pads a vocabulary shorter than the embedding; bos = eos = 50256. The
benches feed token ids, not text, so the tokenizer only has to load.
"""
import argparse
import json
import math
import os
import sys

try:
    import numpy as np
    import gguf
except ImportError as e:
    sys.exit(f"moe_gguf.py: {e}: run with a Python that has numpy and gguf-py (llama.cpp's "
             "gguf-py/ on PYTHONPATH, or pip install gguf; bench/moe.sh: GGUF_PYTHON)")

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS = 151936, 2048, 24, 16, 16
FFN, EXPERTS, TOP, EXPERT_FFN, SHARED_FFN = 5632, 60, 4, 1408, 5632
CTX, THETA, EPS = 8192, 1e6, 1e-6
Q4 = gguf.GGMLQuantizationType.Q4_0


def q4_0(rng, rows_shape, k, unit=None):
    """Random Q4_0 blocks for rows of k inputs: uint8 of shape rows_shape + (k / 32 * 18,)."""
    nb = k // 32
    blocks = rng.integers(0, 256, size=tuple(rows_shape) + (nb, 18), dtype=np.uint8)
    base = unit if unit is not None else 1.0 / (4.6 * math.sqrt(k))
    d = rng.uniform(0.5, 1.5, size=tuple(rows_shape) + (nb,)).astype(np.float32) * base
    d *= rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=d.shape)
    blocks[..., 0:2] = d.astype(np.float16).view(np.uint8).reshape(d.shape + (2,))
    return blocks.reshape(tuple(rows_shape) + (nb * 18,))


def plan(layers):
    """(name, kind, shape): kind q4 (shape = rows + (k,)), f32 ones/zeros/router."""
    t = [("token_embd.weight", "q4e", (VOCAB, HIDDEN))]
    hd = HIDDEN // HEADS
    for i in range(layers):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", "ones", (HIDDEN,)),
              (b + "attn_q.weight", "q4", (HEADS * hd, HIDDEN)),
              (b + "attn_q.bias", "zeros", (HEADS * hd,)),
              (b + "attn_k.weight", "q4", (KV_HEADS * hd, HIDDEN)),
              (b + "attn_k.bias", "zeros", (KV_HEADS * hd,)),
              (b + "attn_v.weight", "q4", (KV_HEADS * hd, HIDDEN)),
              (b + "attn_v.bias", "zeros", (KV_HEADS * hd,)),
              (b + "attn_output.weight", "q4", (HIDDEN, HEADS * hd)),
              (b + "ffn_norm.weight", "ones", (HIDDEN,)),
              (b + "ffn_gate_inp.weight", "router", (EXPERTS, HIDDEN)),
              (b + "ffn_gate_exps.weight", "q4", (EXPERTS, EXPERT_FFN, HIDDEN)),
              (b + "ffn_up_exps.weight", "q4", (EXPERTS, EXPERT_FFN, HIDDEN)),
              (b + "ffn_down_exps.weight", "q4", (EXPERTS, HIDDEN, EXPERT_FFN)),
              (b + "ffn_gate_inp_shexp.weight", "router", (HIDDEN,)),
              (b + "ffn_gate_shexp.weight", "q4", (SHARED_FFN, HIDDEN)),
              (b + "ffn_up_shexp.weight", "q4", (SHARED_FFN, HIDDEN)),
              (b + "ffn_down_shexp.weight", "q4", (HIDDEN, SHARED_FFN))]
    t += [("output_norm.weight", "ones", (HIDDEN,)), ("output.weight", "q4", (VOCAB, HIDDEN))]
    return t


def make(rng, kind, shape):
    if kind == "q4":
        return q4_0(rng, shape[:-1], shape[-1])
    if kind == "q4e":
        return q4_0(rng, shape[:-1], shape[-1], unit=1.0 / 4.6)
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    if kind == "zeros":
        return np.zeros(shape, dtype=np.float32)
    return (rng.standard_normal(shape, dtype=np.float32) * (2.0 / math.sqrt(HIDDEN)))


def byte_shape(kind, shape):
    if kind.startswith("q4"):
        return tuple(shape[:-1]) + (shape[-1] // 32 * 18,)
    return tuple(shape)


def tokenizer(w, tokdir):
    with open(os.path.join(tokdir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    with open(os.path.join(tokdir, "merges.txt"), encoding="utf-8") as f:
        merges = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#version")]
    eos = vocab["<|endoftext|>"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    types[eos] = gguf.TokenType.CONTROL
    for i in range(len(tokens), VOCAB):
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                        "gpt2-tokenizer"))
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    w = gguf.GGUFWriter(a.out, "qwen2moe")
    w.add_name("fg synthetic qwen1.5-moe-a2.7b")
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(EPS)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(TOP)
    w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_expert_shared_feed_forward_length(SHARED_FFN)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    tokenizer(w, a.tokenizer)
    p = plan(a.layers)
    for name, kind, shape in p:
        bs = byte_shape(kind, shape)
        q = kind.startswith("q4")
        w.add_tensor_info(name, bs, np.dtype(np.uint8 if q else np.float32),
                          int(np.prod(bs)) * (1 if q else 4), raw_dtype=Q4 if q else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, kind, shape in p:
        w.write_tensor_data(make(rng, kind, shape))
    w.close()


if __name__ == "__main__":
    main()
