#!/usr/bin/env bash
# fg-inspect on a store directory: table and JSON show files, tensors, chunks, metadata and KV
# page usage; --verify passes; after one payload byte of a weight file is flipped, --verify
# exits 1 naming the tensor and chunk; a directory that is not a store gets a one-line error.
set -euo pipefail
SAMPLE=$1 INSPECT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
S=$WORK/store
"$SAMPLE" "$S"
out=$("$INSPECT" --verify "$S")
grep -Eq 'tok_embd.weight +f32 +\[64, 64\] +2 +16384 +weights-000001.fgt#0' <<<"$out" || { echo "table: $out"; exit 1; }
grep -Eq 'weights-000002.fgt' <<<"$out" || { echo "rotation: $out"; exit 1; }
grep -Eq 'kv-000003.pages +[0-9]+ +slots 256, used 5, free 251' <<<"$out" || { echo "kv: $out"; exit 1; }
grep -q 'job 11: 3 pages' <<<"$out" || { echo "jobs: $out"; exit 1; }
grep -Eq 'config.json +14 bytes' <<<"$out" || { echo "meta: $out"; exit 1; }
grep -q 'verify: ok: 3 files, 3 tensors, 4 chunk checksums, 5 KV pages' <<<"$out" || { echo "verify: $out"; exit 1; }
json=$("$INSPECT" --json --verify "$S")
grep -q '"name": "blk.0.attn_q.weight", "codec": "f32", "shape": \[16, 64\]' <<<"$json" || { echo "json: $json"; exit 1; }
grep -q '"kv": {"slots": 256, "used": 5, "free": 251' <<<"$json" || { echo "json kv: $json"; exit 1; }
grep -q '"verify": {"ok": true' <<<"$json" || { echo "json verify: $json"; exit 1; }
if command -v python3 >/dev/null; then
  python3 -c '
import json, sys
def pairs(p):
    keys = [k for k, _ in p]
    if len(set(keys)) != len(keys):
        sys.exit("duplicate JSON key in %s" % keys)
    return dict(p)
json.load(sys.stdin, object_pairs_hook=pairs)' <<<"$json"
fi
# flip one payload byte of tok_embd.weight chunk 1 (second 4 KiB-aligned chunk: 8192 + 8192)
F=$S/weights-000001.fgt
old=$(od -An -tu1 -j16400 -N1 "$F" | tr -d ' ')
printf "\\x$(printf %02x $(( (old + 1) % 256 )))" | dd of="$F" bs=1 seek=16400 conv=notrunc status=none
set +e
err=$("$INSPECT" --verify "$S" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] || { echo "verify on corrupted store: rc=$rc"; exit 1; }
grep -q "tensor 'tok_embd.weight' chunk 1: checksum mismatch" <<<"$err" || { echo "msg: $err"; exit 1; }
[ "$(wc -l <<<"$err")" -eq 1 ] || { echo "not one line: $err"; exit 1; }
mkdir -p "$WORK/empty"
set +e
err=$("$INSPECT" "$WORK/empty" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'not an fg store' <<<"$err" || { echo "empty: rc=$rc $err"; exit 1; }
echo "fg-inspect store end-to-end ok"
