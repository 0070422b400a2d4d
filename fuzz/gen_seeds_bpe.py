#!/usr/bin/env python3
"""Write the seed corpora of fuzz_bpe_load and fuzz_bpe_encode (run by hand from the repository
root; outputs are committed in fuzz/corpus/bpe_load/ and fuzz/corpus/bpe_encode/).

fuzz_bpe_load inputs are vocab.json, merges.txt, tokenizer_config.json and
special_tokens_map.json joined by NUL bytes (the last two optional). The seeds are cut down from
the real GPT-2 files: the 256 byte-level tokens plus the first N merges and their results, with
GPT-2's ids or renumbered OPT-style, with and without config files."""
import json
import os

ROOT = os.getcwd()
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def byte_symbols():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def cut(n_merges):
    vocab = json.load(open(os.path.join(GPT2, "vocab.json"), encoding="utf-8"))
    lines = open(os.path.join(GPT2, "merges.txt"), encoding="utf-8").read().split("\n")[1:1 + n_merges]
    keep = set(byte_symbols())
    for l in lines:
        a, b = l.split(" ")
        keep.update([a, b, a + b])
    return {k: v for k, v in vocab.items() if k in keep}, lines


def write(name, vocab, lines, config=None, special=None, target="bpe_load"):
    parts = [json.dumps(vocab, ensure_ascii=False), "#version: 0.2\n" + "\n".join(lines) + "\n"]
    if config is not None or special is not None:
        parts.append(json.dumps(config or {}))
    if special is not None:
        parts.append(json.dumps(special))
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(b"\0".join(p.encode("utf-8") for p in parts))


def main():
    vocab, lines = cut(300)
    write("gpt2-300", vocab, lines)
    ids = sorted(vocab.values())
    opt = {k: 4 + ids.index(v) for k, v in vocab.items()}
    opt.update({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3})
    tok = {"content": "</s>", "lstrip": False, "normalized": True, "rstrip": False,
           "single_word": False}
    write("opt-300-config", opt, lines,
          {"add_bos_token": True, "add_prefix_space": False, "bos_token": tok, "eos_token": tok,
           "unk_token": tok, "pad_token": dict(tok, content="<pad>"), "errors": "replace",
           "tokenizer_class": "GPT2Tokenizer"},
          {"bos_token": tok, "eos_token": tok, "unk_token": tok, "pad_token": dict(tok, content="<pad>")})
    write("added-tokens", vocab, lines[:50],
          {"added_tokens_decoder": {"60000": {"content": "<|x|>", "special": True},
                                    "60001": {"content": "<|y|>", "special": False}},
           "additional_special_tokens": ["<|q|>", {"content": "\u0120the"}]},
          {"eos_token": "<|endoftext|>"})
    small, small_lines = cut(20)
    write("gpt2-20-crlf", small, [l + "\r" for l in small_lines])
    texts = [
        "Hello world", "It's 1818, and Anne Elliot's 27th year.\n\n  Chapter 2\t\t",
        "caf\u00e9 \u4f60\u597d \U0001f600\U0001f44d\U0001f3fd \u0645\u0631\u062d\u0628\u0627 \u00a0\u3000 x",
        "<|endoftext|>Next<|endoftext|", "   \n\n\n   trailing   ", "'s 't 're 've 'm 'll 'd 'S",
        "123456789 3.14 \u0663\u0664 \u00bd \u216b",
    ]
    os.makedirs(os.path.join(OUT, "bpe_encode"), exist_ok=True)
    for i, t in enumerate(texts):
        open(os.path.join(OUT, "bpe_encode", "text-%d" % i), "wb").write(t.encode("utf-8"))
    open(os.path.join(OUT, "bpe_encode", "invalid-utf8"), "wb").write(
        b"ab\xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\x00\x01")
    para = open(os.path.join(ROOT, "data", "austen", "persuasion.txt"), encoding="utf-8").read()[:3000]
    open(os.path.join(OUT, "bpe_encode", "austen"), "wb").write(para.encode("utf-8"))


if __name__ == "__main__":
    main()
