#!/usr/bin/env python3
"""Seed corpus for fuzz_stage_msg (engine/stage_int.h): a valid message of each kind, little
endian as on x86-64. The OPEN payload is an fg_stage_open of OPEN_BYTES (sizeof on the build's
ABI: 136 on x86-64 Linux) with gbs 2, ngb 3, context 48. usage: gen_seeds_stage.py OUT_DIR"""
import os
import struct
import sys

MAGIC, OPEN_BYTES = 0x53504746, 136
OPEN, BLOCK, DATA, END, QUIT = 1, 2, 3, 4, 5


def msg(kind, payload=b"", step=0, batch=0, first=0, end=0):
    return struct.pack("<6IQ", MAGIC, kind, step, batch, first, end, len(payload)) + payload


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    policy = bytearray(OPEN_BYTES - 16)
    struct.pack_into("<II", policy, 0, 2, 3)  # gbs, ngb
    open_payload = bytes(policy) + struct.pack("<IIii", 48, 20, 0, 0)
    lens = [3, 5, 1]
    ids = list(range(sum(lens)))
    block = struct.pack("<I", len(lens)) + struct.pack(f"<{len(lens)}I", *lens) + \
        struct.pack(f"<{len(ids)}i", *ids)
    seeds = {
        "open": msg(OPEN, open_payload),
        "block": msg(BLOCK, block),
        "data": msg(DATA, struct.pack("<4f", 1, 2, 3, 4), 1, 2, 2, 3),
        "end": msg(END),
        "quit": msg(QUIT),
        "short": msg(BLOCK, block)[:40],
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


main()
