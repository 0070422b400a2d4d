#!/usr/bin/env bash
# End-to-end check of the tools: fg-sample writes a file; fg-inspect shows it as a table and as
# JSON; --verify passes; after one payload byte is flipped, --verify exits 1 naming the tensor
# and chunk; a file that is not .fgt gets a one-line error and exit 1.
set -euo pipefail
SAMPLE=$1 INSPECT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
F=$WORK/sample.fgt
"$SAMPLE" "$F" >/dev/null
out=$("$INSPECT" --verify "$F")
grep -Eq 'fc.weight.q4 +q4/g64/ax1/f16' <<<"$out" || { echo "table: $out"; exit 1; }
grep -q 'all 8 chunk checksums match' <<<"$out" || { echo "verify: $out"; exit 1; }
json=$("$INSPECT" --json "$F")
grep -q '"name": "ln.bias", "codec": "bf16"' <<<"$json" || { echo "json: $json"; exit 1; }
# embed.weight chunk 0 starts at 8192; flip byte 8200
G=$WORK/bad.fgt
cp "$F" "$G"
old=$(od -An -tu1 -j8200 -N1 "$G" | tr -d ' ')
printf "\\x$(printf %02x $(( (old + 1) % 256 )))" | dd of="$G" bs=1 seek=8200 conv=notrunc status=none
set +e
err=$("$INSPECT" --verify "$G" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] || { echo "verify on corrupted file: rc=$rc"; exit 1; }
grep -q "tensor 'embed.weight' chunk 0: checksum mismatch" <<<"$err" || { echo "msg: $err"; exit 1; }
[ "$(wc -l <<<"$err")" -eq 1 ] || { echo "not one line: $err"; exit 1; }
head -c 9000 /dev/urandom >"$WORK/junk.fgt"
set +e
err=$("$INSPECT" "$WORK/junk.fgt" 2>&1 >/dev/null); rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'junk.fgt: no valid superblock' <<<"$err" || { echo "junk: rc=$rc $err"; exit 1; }
set +e
"$INSPECT" --bogus "$F" >/dev/null 2>&1; rc=$?
set -e
[ $rc -eq 2 ] || { echo "bad flag rc=$rc"; exit 1; }
# usage errors are one line naming the flag (not getopt's line and the whole usage); a FIFO is
# refused, not opened (the open would wait for a writer forever); fg-sample's stdout full: exit 1
for args in "--bogus $F" "-zz $F" "$F $F" ""; do
  set +e; err=$("$INSPECT" $args 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -eq 2 ] && [ "$(grep -c . <<<"$err")" -eq 1 ] || { echo "usage '$args': rc=$rc $err"; exit 1; }
done
[[ $err == *"give one FILE.fgt or store directory"* ]] || { echo "no argument: $err"; exit 1; }
mkfifo "$WORK/fifo"
set +e; err=$(timeout 20 "$INSPECT" "$WORK/fifo" 2>&1 >/dev/null); rc=$?; set -e
[ $rc -eq 1 ] && [[ $err == *"fifo: not a .fgt file or a store directory" ]] || { echo "fifo: rc=$rc $err"; exit 1; }
set +e; err=$("$SAMPLE" "$WORK/again.fgt" 2>&1 >/dev/full); rc=$?; set -e
[ $rc -eq 1 ] && [[ $err == *"stdout: write error"* ]] || { echo "fg-sample >/dev/full: rc=$rc $err"; exit 1; }
echo "fg-inspect end-to-end ok"
