#!/usr/bin/env python3
"""gen_seeds_jinja.py - seed corpus for fuzz_jinja: every published template of
tests/fixtures/chat/templates and every snippet of tests/fixtures/chat/snippets.json, each
as flags byte + template (the harness then renders it on its built-in conversation), and a
few with their own messages after a NUL. Run from the repository root; writes fuzz/corpus/jinja/."""
import hashlib
import json
import os

FIX = "tests/fixtures/chat"
OUT = "fuzz/corpus/jinja"


def put(data):
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    for fn in sorted(os.listdir(os.path.join(FIX, "templates"))):
        src = open(os.path.join(FIX, "templates", fn), "rb").read()
        put(b"\x01" + src)
        put(b"\x03" + src)
    convs = json.load(open(os.path.join(FIX, "conversations.json"), encoding="utf-8"))
    for row in json.load(open(os.path.join(FIX, "snippets.json"), encoding="utf-8")):
        put(b"\x00" + row["template"].encode())
    qwen = open(os.path.join(FIX, "templates", "Qwen-Qwen3-0.6B.jinja"), "rb").read()
    for conv in convs.values():
        put(b"\x01" + qwen + b"\x00" + json.dumps(conv, ensure_ascii=False).encode())


if __name__ == "__main__":
    main()
