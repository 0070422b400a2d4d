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
grep -q "read from disk" <<< "$out" || { echo "$out"; exit 1; }
# issue 38 (4): prompts encode as transformers' tokenizer(text) does: special tokens written in
# the text matched, BOS added (the ids transformers 5 gave for these texts with
# AutoTokenizer.from_pretrained("models/austen-opt")); --no-special-in-prompt splits them as text
printf '%s\n' '{"id": 1, "prompt": "Hello</s>world"}' '{"id": 2, "prompt": "<pad>It is</s>"}' > sp.jsonl
"$INFER" -m austen --input sp.jsonl --output sp.out --prompt-ids --max-new-tokens 1 --quiet
"$INFER" -m austen --input sp.jsonl --output sp-text.out --prompt-ids --max-new-tokens 1 --quiet \
  --no-special-in-prompt
ids() { grep "^{\"id\":$2," "$1" | sed -nE 's/.*"prompt_ids":(\[[^]]*\]).*/\1/p'; }
[ "$(ids sp.out 1)" = "[2,43,512,82,2,3955]" ] && [ "$(ids sp.out 2)" = "[2,1,924,368,2]" ] ||
  { echo "prompt ids differ from transformers': $(ids sp.out 1) $(ids sp.out 2)"; exit 1; }
[ "$(ids sp-text.out 1)" = "[2,43,512,82,31,18,86,33,3955]" ] ||
  { echo "--no-special-in-prompt: $(ids sp-text.out 1)"; exit 1; }
echo "prompt ids equal transformers' tokenizer(text)"
echo "austen model ok"
