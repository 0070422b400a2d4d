#!/usr/bin/env bash
# A checkpoint whose tokenizer.json is over 16 MiB imports (issue 38 item 1: Gemma 1/2's is about
# 17.5 MB, Gemma 3's about 33 MB; the base commit c108f10 refused anything over 1 << 24 bytes).
# The gemma3 fixture's tokenizer.json, padded with JSON whitespace to 33 MB, converts; the store
# keeps it as a metadata file of its own (meta-NNNNNN-K.blob); greedy tokens equal those of the
# unpadded conversion; fg-inspect lists it and --verify reads it; a flipped byte in it fails
# fg-infer and --verify with one line naming the key and the file; --reindex keeps it.
set -euo pipefail
CONVERT=$1 INFER=$2 INSPECT=$3 FIX=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK"
cp -r "$FIX" "$WORK/ckpt"
T=$WORK/ckpt/tokenizer.json
size=$(stat -c %s "$T")
[ "$(tail -c 1 "$T")" = "}" ] || { echo "fixture tokenizer.json does not end in }"; exit 1; }
{ head -c $((size - 1)) "$FIX/tokenizer.json"; head -c $((33000000 - size)) /dev/zero | tr '\0' ' '; printf '}'; } >"$T"
[ "$(stat -c %s "$T")" -eq 33000000 ] || { echo "padding failed"; exit 1; }
"$CONVERT" "$FIX" -o "$WORK/small" --quiet >/dev/null
"$CONVERT" "$WORK/ckpt" -o "$WORK/big" --quiet >/dev/null
ls "$WORK"/big/meta-*.blob >/dev/null || { echo "no metadata file: $(ls "$WORK/big")"; exit 1; }
a=$("$INFER" -m "$WORK/small" -p "hello world" --max-new-tokens 8 2>/dev/null)
b=$("$INFER" -m "$WORK/big" -p "hello world" --max-new-tokens 8 2>/dev/null)
[ "$a" = "$b" ] || { echo "tokens differ: '$a' vs '$b'"; exit 1; }
out=$("$INSPECT" --verify "$WORK/big")
grep -Eq 'tokenizer.tokenizer_json +33000000 bytes' <<<"$out" || { echo "inspect: $out"; exit 1; }
grep -q 'verify: ok' <<<"$out" || { echo "verify: $out"; exit 1; }
"$INSPECT" --reindex --verify "$WORK/big" >/dev/null
c=$("$INFER" -m "$WORK/big" -p "hello world" --max-new-tokens 8 2>/dev/null)
[ "$a" = "$c" ] || { echo "after reindex: '$c'"; exit 1; }
B=$(ls "$WORK"/big/meta-*.blob)
printf 'X' | dd of="$B" bs=1 seek=20000000 conv=notrunc status=none
for tool in infer inspect; do
  set +e
  if [ $tool = infer ]; then err=$("$INFER" -m "$WORK/big" -p hi 2>&1 >/dev/null); rc=$?
  else err=$("$INSPECT" --verify "$WORK/big" 2>&1 >/dev/null); rc=$?; fi
  set -e
  [ $rc -ne 0 ] && grep -q "$(basename "$B"): metadata 'tokenizer.tokenizer_json': checksum mismatch" <<<"$err" ||
    { echo "$tool on a damaged metadata file: rc=$rc $err"; exit 1; }
done
echo "large metadata end-to-end ok"
