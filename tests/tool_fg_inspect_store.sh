#!/usr/bin/env bash
# fg-inspect on a store directory: table and JSON show files, tensors, chunks, metadata and KV
# page usage; --verify passes; after one payload byte of a weight file is flipped, --verify
# exits 1 naming the tensor and chunk; a directory that is not a store gets a one-line error.
# Reliability: output into a full device exits 1 naming stdout; bad usage exits 2; a truncated,
# zeroed or random catalog gives one line saying to run --reindex (exit 1, never a signal) and
# --reindex repairs it; a store the user may only read is shown (as nobody when run as root).
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
# the text never reaches a full device: exit 1 naming stdout
set +e
err=$("$INSPECT" "$WORK/empty" 2>&1 >/dev/full); rc=$?
err=$("$INSPECT" "$S" 2>&1 >/dev/full); rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'stdout: write error' <<<"$err" || { echo "/dev/full: rc=$rc $err"; exit 1; }
# usage errors exit 2, runtime errors 1
set +e
"$INSPECT" >/dev/null 2>&1; r1=$?
"$INSPECT" --reindex "$F" >/dev/null 2>&1; r2=$?
"$INSPECT" "$WORK/no-such-thing" >/dev/null 2>&1; r3=$?
set -e
[ "$r1 $r2 $r3" = "2 2 1" ] || { echo "exit codes: $r1 $r2 $r3"; exit 1; }
# a damaged catalog: one line naming data.mdb and --reindex, exit 1, never a signal
printf "\x$(printf %02x "$old")" | dd of="$F" bs=1 seek=16400 conv=notrunc status=none
D=$S/catalog/data.mdb
cp "$D" "$WORK/data.mdb.good"
size=$(stat -c %s "$D")
for how in 0 4096 8192 half minus zero random; do
  cp "$WORK/data.mdb.good" "$D"
  case $how in
    half) truncate -s $((size / 2)) "$D" ;;
    minus) truncate -s $((size - 4096)) "$D" ;;
    zero) dd if=/dev/zero of="$D" bs=4096 seek=$((size / 4096 - 1)) count=1 conv=notrunc status=none ;;
    random) head -c "$size" /dev/urandom >"$D" ;;
    *) truncate -s "$how" "$D" ;;
  esac
  set +e
  err=$("$INSPECT" "$S" 2>&1 >/dev/null); rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    [ $rc -eq 1 ] || { echo "catalog $how: rc=$rc (signal?) $err"; exit 1; }
    [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q 'data.mdb: damaged catalog' <<<"$err" &&
      grep -q "fg-inspect --reindex $S" <<<"$err" || { echo "catalog $how: $err"; exit 1; }
  elif [ "$how" != zero ] && [ "$how" != minus ]; then  # those may hit a page nothing reads
    echo "catalog $how: accepted"; exit 1
  fi
done
"$INSPECT" --reindex --verify "$S" >"$WORK/reindexed.txt" 2>&1 || { cat "$WORK/reindexed.txt"; exit 1; }
grep -q 'catalog rebuilt' "$WORK/reindexed.txt" && grep -q 'verify: ok: 3 files, 3 tensors' "$WORK/reindexed.txt" ||
  { echo "reindex: $(cat "$WORK/reindexed.txt")"; exit 1; }
# a store this user may read but not write
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    chmod 755 "$WORK" && chmod 555 "$S" "$S/catalog"
    out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$INSPECT" --verify "$S" 2>&1) ||
      { echo "read-only as nobody: $out"; exit 1; }
    grep -q 'verify: ok' <<<"$out" || { echo "read-only: $out"; exit 1; }
    chmod 755 "$S" "$S/catalog"
  fi
else
  chmod 555 "$S" "$S/catalog"
  out=$("$INSPECT" --verify "$S" 2>&1) || { echo "read-only: $out"; exit 1; }
  chmod 755 "$S" "$S/catalog"
fi
# a metadata value over 16 MiB: a checksummed file of its own, read by --verify
S2=$WORK/store-big
"$SAMPLE" "$S2" big
out=$("$INSPECT" --verify "$S2")
grep -Eq 'tokenizer.json +16781312 bytes' <<<"$out" || { echo "big meta: $out"; exit 1; }
grep -q 'verify: ok: 4 files' <<<"$out" || { echo "big verify: $out"; exit 1; }
B=$S2/meta-000004-0.blob
[ -f "$B" ] || { echo "no $B: $(ls "$S2")"; exit 1; }
old=$(od -An -tu1 -j9000000 -N1 "$B" | tr -d ' ')
printf "\\x$(printf %02x $(( (old + 1) % 256 )))" | dd of="$B" bs=1 seek=9000000 conv=notrunc status=none
set +e
err=$("$INSPECT" --verify "$S2" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && [ "$(wc -l <<<"$err")" -eq 1 ] &&
  grep -q "meta-000004-0.blob: metadata 'tokenizer.json': checksum mismatch" <<<"$err" ||
  { echo "big meta flipped: rc=$rc $err"; exit 1; }
echo "fg-inspect store end-to-end ok"
