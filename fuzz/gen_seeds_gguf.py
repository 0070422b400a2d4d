#!/usr/bin/env python3
"""Write the seed corpus of fuzz_gguf (run by hand from the repository root; the output is
committed in fuzz/corpus/gguf/). Needs the `gguf` package (pip install gguf: llama.cpp's gguf-py).

Valid seeds are small GGUF files written by gguf-py: metadata of every value type (scalars,
strings, arrays of numbers and of strings, a custom alignment), tensors of each type fg reads
(F32, F16, BF16, Q8_0, Q4_0), one row of random blocks of every other block type it
dequantizes (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4) and one it
refuses (IQ2_XXS), a `llama` file as convert_hf_to_gguf.py names its tensors, a `qwen2moe` file
with merged experts (blk.N.ffn_*_exps, split per expert on import), a `gemma3` one with a
per-layer sliding_window_pattern array and a `gpt-oss` one (MXFP4 experts with biases, a fused
ffn_gate_up_exps, sinks). (tests/fixtures/gguf/tok-llama2.gguf, a SentencePiece
vocabulary, and tok-gpt4o.gguf, a byte-level one with tokenizer.ggml.pre "gpt-4o", are copied
in by hand under their sha1.) Hostile seeds are those files with one field patched: counts and lengths
made huge, an offset moved off the alignment or past the end, a type made unknown, a name
duplicated, the file cut short."""
import hashlib
import os
import struct

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

OUT = os.path.join(os.getcwd(), "fuzz", "corpus", "gguf")
TMP = os.path.join(OUT, "tmp.gguf")


def written(fill, alignment=None, arch="llama"):
    w = gguf.GGUFWriter(TMP, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = open(TMP, "rb").read()
    os.remove(TMP)
    return data


def every_type(w):
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "hello")
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 2.25)
    w.add_array("t.arr_i32", [1, 2, 3])
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_f32", [0.5, 1.5])


def tensors(w):
    r = np.random.default_rng(1)
    x = r.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("token_embd.weight", x)
    w.add_tensor("output_norm.weight", x[0])
    w.add_tensor("blk.0.attn_q.weight", x.astype(np.float16))
    w.add_tensor("blk.0.attn_k.weight", gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.attn_v.weight", gguf.quants.quantize(x, Q.Q4_0), raw_dtype=Q.Q4_0)
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(x, Q.BF16), raw_dtype=Q.BF16)


def llama(w):
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)
    tensors(w)


def q4k(w):
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((2, 144), np.uint8), raw_dtype=Q.Q4_K)
    w.add_tensor("x", x)


BLOCKS = [Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS,
          Q.MXFP4, Q.IQ2_XXS]


def blocks(w):
    r = np.random.default_rng(3)
    for q in BLOCKS:
        bs, ts = gguf.GGML_QUANT_SIZES[q]
        raw = r.integers(0, 256, size=(1, 256 // bs * ts), dtype=np.uint8)
        w.add_tensor("blk.0.%s.weight" % q.name.lower(), raw, raw_dtype=q)


def qwen2moe(w):
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    w.add_expert_feed_forward_length(8)
    w.add_expert_shared_feed_forward_length(16)
    r = np.random.default_rng(4)
    w.add_tensor("token_embd.weight", r.standard_normal((16, 32)).astype(np.float32))
    w.add_tensor("blk.0.ffn_gate_inp.weight", r.standard_normal((4, 32)).astype(np.float32))
    w.add_tensor("blk.0.ffn_gate_inp_shexp.weight", r.standard_normal(32).astype(np.float32))
    w.add_tensor("blk.0.ffn_gate_exps.weight", r.standard_normal((4, 8, 32)).astype(np.float32))
    w.add_tensor("blk.0.ffn_down_exps.weight",
                 gguf.quants.quantize(r.standard_normal((4, 32, 32)).astype(np.float32), Q.Q8_0),
                 raw_dtype=Q.Q8_0)


def gemma3(w):
    w.add_block_count(2)
    w.add_embedding_length(32)
    w.add_head_count(2)
    w.add_sliding_window(4)
    w.add_sliding_window_pattern([True, False])
    w.add_attention_scale(0.25)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(32, np.float32))
    w.add_tensor("blk.1.post_ffw_norm.weight", np.ones(32, np.float32))


def gpt_oss(w):
    """gpt-oss's experts: gate and up MXFP4 apart, a fused BF16 pair (--fuse-gate-up-exps) with
    its bias, the sinks and the router (listed in place / as views of the fused rows)."""
    r = np.random.default_rng(5)
    w.add_block_count(2)
    w.add_embedding_length(32)
    w.add_expert_count(2)
    w.add_swiglu_clamp_exp([7.0, 7.0])
    w.add_tensor("token_embd.weight", r.standard_normal((16, 32)).astype(np.float32))
    w.add_tensor("blk.0.attn_sinks.weight", r.standard_normal(2).astype(np.float32))
    w.add_tensor("blk.0.ffn_gate_inp.bias", r.standard_normal(2).astype(np.float32))
    for p in ("gate", "up", "down"):
        raw = r.integers(0, 256, size=(2, 8, 17), dtype=np.uint8)
        raw[..., 0] = r.integers(118, 130, size=(2, 8))  # (E8M0 exponents near 1)
        w.add_tensor("blk.0.ffn_%s_exps.weight" % p, raw, raw_dtype=Q.MXFP4)
        w.add_tensor("blk.0.ffn_%s_exps.bias" % p, r.standard_normal((2, 8)).astype(np.float32))
    w.add_tensor("blk.1.ffn_gate_up_exps.weight", r.standard_normal((2, 6, 32)).astype(np.float16))
    w.add_tensor("blk.1.ffn_gate_up_exps.bias", r.standard_normal((2, 6)).astype(np.float32))


def patched(data, at, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def hostile(data):
    """Variants of a valid file with tensors, each one field wrong."""
    n_ti, n_kv = struct.unpack_from("<QQ", data, 8)
    out = [data[:n] for n in (3, 8, 20, 24, 40, len(data) // 2, len(data) - 1)]
    out += [patched(data, 8, "<Q", v) for v in (n_ti + 1, 1 << 40, (1 << 64) - 1)]
    out += [patched(data, 16, "<Q", v) for v in (n_kv + 1, 1 << 40, (1 << 64) - 1)]
    out += [patched(data, 4, "<I", v) for v in (1, 4, 0x03000000)]
    out.append(patched(data, 24, "<Q", (1 << 64) - 1))  # the first key's length
    name = data.find(b"token_embd.weight")
    if name > 0:  # n_dims, ne[0], ne[1], type, offset follow the first tensor's name
        at = name + len("token_embd.weight")
        out.append(patched(data, at, "<I", 9))
        out.append(patched(data, at + 4, "<Q", 0))
        out.append(patched(data, at + 4, "<Q", 1 << 62))
        out.append(patched(data, at + 20, "<I", 99))
        out.append(patched(data, at + 24, "<Q", 4))
        out.append(patched(data, at + 24, "<Q", 1 << 50))
        out.append(data.replace(b"blk.0.attn_k.weight", b"blk.0.attn_q.weight", 1))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = [written(lambda w: None), written(every_type), written(llama),
             written(tensors, alignment=64), written(q4k), written(blocks),
             written(qwen2moe, arch="qwen2moe"), written(gemma3, arch="gemma3"),
             written(gpt_oss, arch="gpt-oss")]
    seeds += hostile(seeds[2]) + hostile(seeds[3]) + hostile(seeds[5]) + hostile(seeds[6])
    seeds += hostile(seeds[8])
    for s in seeds:
        with open(os.path.join(OUT, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print("%d seeds in %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
