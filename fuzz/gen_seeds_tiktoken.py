#!/usr/bin/env python3
"""Write the seed corpus of fuzz_tiktoken_load (run by hand from the repository root; output
committed in fuzz/corpus/tiktoken_load/). Inputs are tiktoken.model, tokenizer_config.json and
tokenization_kimi.py joined by NUL bytes (the last two optional). Seeds: small ranks files made
here (the 256 bytes plus merges, some multi-byte), the first 3000 ranks of the committed Llama 3
tiktoken file (tests/fixtures/real/meta-llama__Llama-3.2-3B-Instruct/original/tokenizer.model.xz:
ranks 0..2999 are a valid file on their own), configs in Kimi K2's shape, the pattern as a join
list and as one literal, and hostile variants (bad or non-canonical base64, a rank or token
twice, a missing rank or byte, a huge line, specials outside the reserved range, bad JSON, a
pattern fg cannot translate)."""
import base64
import hashlib
import json
import lzma
import os

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "fuzz", "corpus", "tiktoken_load")
LLAMA3 = os.path.join(ROOT, "tests", "fixtures", "real", "meta-llama__Llama-3.2-3B-Instruct",
                      "original", "tokenizer.model.xz")
KIMI_PAT = [
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
]


def ranks_file(tokens, crlf=False):
    nl = "\r\n" if crlf else "\n"
    return "".join("%s %d%s" % (base64.b64encode(t).decode(), r, nl) for t, r in tokens).encode()


def small_tokens():
    toks = [bytes([b]) for b in range(256)]
    for w in [b"ab", b"abc", b"he", b"hel", b"hell", b"hello", b" w", b" wor", b"or", b"ld", b"aa",
              b"aaa", b"aaaa", "東".encode()[:2], "東".encode(), "京".encode()[:2], "京".encode(),
              b"  ", b"\n\n", b"12", b"123", b"'s", b" don", b"'t", "é".encode()]:
        if w not in toks:
            toks.append(w)
    return [(t, i) for i, t in enumerate(toks)]


def config(n, extra=None):
    names = {n: "[BOS]", n + 1: "[EOS]", n + 2: "<|im_end|>", n + 3: "<|im_user|>", n + 256: "[UNK]",
             n + 257: "[PAD]"}
    if extra:
        names.update(extra)
    return json.dumps({"added_tokens_decoder": {str(i): {"content": c, "special": True} for i, c in names.items()},
                       "bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]",
                       "tokenizer_class": "TikTokenTokenizer"}).encode()


def py_join(pats):
    body = "".join('        r"""%s""",\n' % p for p in pats)
    return ("class TikTokenTokenizer:\n    num_reserved_special_tokens = 256\n\n    pat_str = \"|\".join(\n"
            "        [\n%s        ]\n    )\n\n    def f(self):\n        return E(pat_str=self.pat_str)\n" % body).encode()


def seed(name, *parts):
    data = b"\0".join(parts)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    toks = small_tokens()
    n = len(toks)
    good = ranks_file(toks)
    seed("small", good)
    seed("small_cfg", good, config(n))
    seed("small_cfg_py", good, config(n), py_join(KIMI_PAT))
    seed("small_crlf_py1", ranks_file(toks, crlf=True), b"{}", b'pat_str = r"\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+"\n')
    seed("small_shuffled", ranks_file(list(reversed(toks))), config(n))
    with lzma.open(LLAMA3) as f:
        lines = f.read().splitlines()[:3000]
    seed("llama3_3000", b"\n".join(lines) + b"\n", config(3000), py_join(KIMI_PAT))
    # hostile
    seed("bad_b64", good + b"YW*= %d\n" % n)
    seed("noncanon_b64", good + b"YWJ= %d\n" % n)
    seed("dup_rank", good + b"enp6 %d\n" % (n - 1))
    seed("dup_token", good + b"YWI= %d\n" % n)
    seed("missing_rank", good + b"enp6 %d\n" % (n + 5))
    seed("two_spaces", good + b"enp6  %d\n" % n)
    seed("no_byte", ranks_file([(t if t != b"q" else b"qq", r) for t, r in toks]))
    seed("huge_line", good + b"A" * 70000 + b" 1\n")
    seed("cfg_outside", good, config(n, {5: "<x>"}))
    seed("cfg_bad_json", good, b'{"added_tokens_decoder": {')
    seed("cfg_shape", good, b'{"added_tokens_decoder": {"%d": {"content": 5}}, "bos_token": []}' % n)
    seed("py_none", good, b"{}", b"x = 1\n")
    seed("py_escape", good, b"{}", b'pat_str = "a\\\\|b"\n')
    seed("py_negated_and", good, b"{}", py_join([r"[^a&&b]", r"\s+"]))
    seed("py_bad_regex", good, b"{}", py_join([r"(", r"\s+"]))
    print(len(os.listdir(OUT)), "seeds in", OUT)


if __name__ == "__main__":
    main()
