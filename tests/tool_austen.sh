#!/usr/bin/env bash
# The shipped model (models/austen-opt, trained by its train.py) against transformers:
# fg-infer's perplexity on the first 1,000 tokens of Persuasion, windows of 64 and 512, equals
# the numbers transformers computed at training time (models/austen-opt/eval.json) within 0.1%,
# with F16 weights; and a greedy continuation comes out under a RAM budget with the weights on
# disk. Skips (77) when the model is not in the tree.
set -euo pipefail
CONVERT=$1 INFER=$2 ROOT=$3 WORK=$4
MODEL=$ROOT/models/austen-opt
[ -f "$MODEL/model.safetensors" ] || { echo "no shipped model"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$CONVERT" "$MODEL" -o austen --quiet
for w in 64 512; do
  want=$(tr -d '\n ' < "$MODEL/eval.json" | sed -nE "s/.*\"excerpt_ppl\":\{[^}]*\"$w\":([0-9.]+).*/\1/p")
  got=$("$INFER" ppl -m austen --text "$ROOT/data/austen/persuasion.txt" --max-tokens 1000 \
        --window $w --quiet | sed -nE 's/^perplexity ([0-9.]+) .*/\1/p')
  awk -v a="$got" -v b="$want" -v w=$w 'BEGIN {
    d = (a - b) / b; if (d < 0) d = -d;
    printf "window %d: fg-infer %.4f, transformers %.4f, relative difference %.2e\n", w, a, b, d;
    exit !(d <= 1e-3) }'
done
out=$("$INFER" -m austen -p "It is a truth universally acknowledged" --max-new-tokens 20 \
      --percent 0 0 0 100 0 100 2>&1)
echo "$out" | grep -q "read from disk" || { echo "$out"; exit 1; }
echo "austen model ok"
