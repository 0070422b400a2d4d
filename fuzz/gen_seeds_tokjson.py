#!/usr/bin/env python3
"""Write the seed corpora of fuzz_tokjson_load and fuzz_tokjson_encode (run by hand from the
repository root; outputs are committed in fuzz/corpus/tokjson_load/ and
fuzz/corpus/tokjson_encode/). Needs no package beyond Python.

fuzz_tokjson_load inputs are tokenizer.json, tokenizer_config.json and special_tokens_map.json
joined by NUL bytes (the last two optional). The seeds are the fixture tokenizers of
tests/fixtures/tokjson cut down to their first 400 tokens (and the merges among them), each in
its own layout and with the other steps swapped in: every normalizer, pre-tokenizer, Split
behavior, decoder and post-processor fg reads, plus a few it refuses, and with the
tokenizer_config.json of real models (tests/fixtures/real), whose tokenizer_class makes fg build
transformers' pipeline. fuzz_tokjson_encode seeds
are strings from the fixtures' cases plus invalid UTF-8. The committed corpora also hold inputs that
libFuzzer found new coverage with (merged with -merge=1; load inputs under 3 KB only)."""
import copy
import json
import os

ROOT = os.getcwd()
FIX = os.path.join(ROOT, "tests", "fixtures", "tokjson")
OUT = os.path.join(ROOT, "fuzz", "corpus")
SP = "\u2581"


def cut(j, keep=400):
    j = copy.deepcopy(j)
    m = j["model"]
    vocab = {k: v for k, v in m["vocab"].items() if v < keep}
    merges = []
    for x in m["merges"]:
        a, b = x if isinstance(x, list) else x.split(" ")
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(x)
    m["vocab"], m["merges"] = vocab, merges
    added = [a for a in j["added_tokens"]]
    for i, a in enumerate(added):
        a["id"] = keep + i if a["content"] not in vocab else vocab[a["content"]]
    for pp in [j.get("post_processor")] + (j.get("post_processor") or {}).get("processors", []):
        for v in ((pp or {}).get("special_tokens") or {}).values():
            v["ids"] = [next(a["id"] for a in added if a["content"] == v["id"])]
    return j


VARIANTS = {
    "norm_nfkc": ("normalizer", {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]}),
    "norm_nfd": ("normalizer", {"type": "NFD"}),
    "pre_removed": ("pre_tokenizer", {"type": "Split", "pattern": {"String": " "},
                                      "behavior": "Removed", "invert": False}),
    "pre_prev": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "[\\s\\S&&x]|\\h+"},
                                   "behavior": "MergedWithPrevious", "invert": False}),
    "pre_next_inv": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "[^\\S\\n]+|\\d"},
                                       "behavior": "MergedWithNext", "invert": True}),
    "pre_contig": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "\\p{L}*"},
                                     "behavior": "Contiguous", "invert": False}),
    "pre_bytelevel": ("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True,
                                        "trim_offsets": True, "use_regex": True}),
    "pre_meta_old": ("pre_tokenizer", {"type": "Metaspace", "replacement": SP,
                                       "add_prefix_space": True}),
    "pre_digits": ("pre_tokenizer", {"type": "Digits", "individual_digits": True}),
    "dec_none": ("decoder", None),
    "dec_strip": ("decoder", {"type": "Sequence", "decoders": [
        {"type": "Strip", "content": "a", "start": 2, "stop": 3}, {"type": "Fuse"}]}),
    "dec_wordpiece": ("decoder", {"type": "WordPiece", "prefix": "##"}),
    "post_roberta": ("post_processor", {"type": "RobertaProcessing", "sep": ["</s>", 2],
                                        "cls": ["<s>", 1], "trim_offsets": True}),
    "post_none": ("post_processor", None),
    "model_unigram": ("model", {"type": "Unigram", "vocab": [["a", 0.0]]}),
}


def write(path, parts):
    with open(path, "wb") as f:
        f.write(b"\0".join(parts))


def main():
    os.makedirs(os.path.join(OUT, "tokjson_load"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "tokjson_encode"), exist_ok=True)
    n = 0
    for name in sorted(os.listdir(FIX)):
        if name.startswith("v_"):  # the variants: their steps are in VARIANTS below
            continue
        j = json.load(open(os.path.join(FIX, name, "tokenizer.json"), encoding="utf-8"))
        cfg = open(os.path.join(FIX, name, "tokenizer_config.json"), "rb").read()
        small = cut(j)
        dump = lambda x: json.dumps(x, ensure_ascii=False).encode()
        write(os.path.join(OUT, "tokjson_load", name), [dump(small), cfg])
        write(os.path.join(OUT, "tokjson_load", name + "_nocfg"), [dump(small)])
        for vname, (key, val) in VARIANTS.items():
            v = copy.deepcopy(small)
            v[key] = val
            write(os.path.join(OUT, "tokjson_load", "%s_%s" % (name, vname)), [dump(v), cfg])
            n += 1
        cases = open(os.path.join(FIX, name, "cases.txt"), "rb").read().split(b"\nT ")[1:]
        for i, c in enumerate(cases[::40]):
            size, rest = c.split(b"\n", 1)
            with open(os.path.join(OUT, "tokjson_encode", "%s_%03d" % (name, i)), "wb") as f:
                f.write(rest[:int(size)])
    # the real configs' shapes (tests/fixtures/real): the pipeline transformers' class builds
    # (LlamaTokenizer with legacy true / false, add_bos false; GPT2Tokenizer with a prefix space)
    real = os.path.join(ROOT, "tests", "fixtures", "real")
    for base, cfgs in (("llama2", [("meta-llama__Llama-2-7b-hf", None),
                                   ("mistralai__Mixtral-8x7B-v0.1", None),
                                   ("microsoft__Phi-3-mini", None)]),
                       ("qwen2", [(None, b'{"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": true}'),
                                  (None, b'{"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": false}')])):
        small = cut(json.load(open(os.path.join(FIX, base, "tokenizer.json"), encoding="utf-8")))
        for k, (d, cfg) in enumerate(cfgs):
            if d:
                cfg = open(os.path.join(real, d, "tokenizer_config.json"), "rb").read()
            write(os.path.join(OUT, "tokjson_load", "%s_realcfg%d" % (base, k)),
                  [json.dumps(small, ensure_ascii=False).encode(), cfg])
            n += 1
    for i, s in enumerate([b"\xff\xfe", b"a\xc3(b\xe2\x82", b"\xed\xa0\x80 x", b"\xf4\x90\x80\x80",
                           b"\xc0\xaf<tab>\t ", b"\xe2\x96\x81\xe2\x96 Lady Russell"]):
        with open(os.path.join(OUT, "tokjson_encode", "invalid_%d" % i), "wb") as f:
            f.write(s)
    print("wrote %d load seeds" % (n + 10))


if __name__ == "__main__":
    main()
