#!/usr/bin/env python3
"""Seed corpus for fuzz_prefix_pages (SPEC "Prefix cache"): byte 0 picks the decoder (0 the
identity page, 1 a meta page), the rest is the payload. Run: python3 fuzz/gen_seeds_prefix.py"""
import hashlib, os, struct

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "prefix_pages")
os.makedirs(out, exist_ok=True)

def ident(page_tokens=16, layers=24, row=8192, width=2048, codec=(1, 0, 0), compute=0,
          group=0, backend=b"cpu", label=b"opt model /models/opt-1.3b"):
    b = bytearray(160)
    b[0:8] = b"FGPFXID1"
    struct.pack_into("<HHIQIII", b, 8, 1, 160, page_tokens, 0x1234abcd, layers, row, width)
    b[36], b[37], b[38] = codec
    b[39] = compute
    struct.pack_into("<I", b, 40, group)
    b[48:48 + len(backend)] = backend
    b[64:64 + len(label)] = label
    return bytes(b)

def meta(tokens, page=1, parent=(0x1111, 0x22), hits=3):
    if page == 0:
        parent = (0, 0)
    b = bytearray(64)
    struct.pack_into("<IHHQIIIIQQQQ", b, 0, 0x4D504746, 1, 64, parent[0], parent[1], page,
                     len(tokens), 0, hits, 1700000000, 1700000100, 0x55aa)
    return bytes(b) + b"".join(struct.pack("<i", t) for t in tokens)

seeds = [
    b"\x00" + ident(),
    b"\x00" + ident(page_tokens=8, codec=(7, 4, 1), group=64, backend=b"cuda", label=b"llama"),
    b"\x00" + ident()[:100],
    b"\x00" + ident(page_tokens=0),
    b"\x01" + meta(list(range(16))),
    b"\x01" + meta([50256, 13, 198, 0], page=0),
    b"\x01" + meta(list(range(16)))[:70],
    b"\x01" + meta([1, 2], page=0, parent=(5, 0)),
]
for s in seeds:
    with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
        f.write(s)
