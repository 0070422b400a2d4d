#!/usr/bin/env bash
# The accuracy table of README.md (in the spirit of FlexGen's Table 3): perplexity of the
# shipped model on held-out Persuasion under each compression setting, all computed by
# fg-infer ppl in one run. usage: bench/accuracy.sh [MAX_TOKENS]  (default: the whole novel)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
MODEL=${MODEL:-$ROOT/models/austen-opt}
TEXT=$ROOT/data/austen/persuasion.txt
WORK=${WORK:-$ROOT/build/accuracy}
MAX=${1:-}
rm -rf "$WORK" && mkdir -p "$WORK"
conv() { "$BIN/fg-convert" "$MODEL" -o "$WORK/$1" --quiet "${@:2}"; }
conv f16
for g in 32 64 128; do conv "q4-g$g-ax0" --compress-weight --group-size $g --group-axis 0; done
conv q4-g64-ax1 --compress-weight --group-size 64 --group-axis 1
conv q8-g64-ax0 --weight-bits 8 --group-size 64 --group-axis 0
conv q8-g64-ax1 --weight-bits 8 --group-size 64 --group-axis 1
ppl() { "$BIN/fg-infer" ppl -m "$WORK/$1" --text "$TEXT" --window 512 --quiet \
          ${MAX:+--max-tokens $MAX} "${@:2}" | sed -nE 's/^perplexity ([0-9.]+) over ([0-9]+).*/\1 \2/p'; }
base=$(ppl f16 | cut -d' ' -f1)
row() { # label store flags...
  local r; r=$(ppl "${@:2}")
  awk -v l="$1" -v p="${r% *}" -v n="${r#* }" -v b="$base" \
      'BEGIN { printf "| %-44s | %8.3f | %+6.2f%% | %d |\n", l, p, (p / b - 1) * 100, n }'
}
echo "| setting (Persuasion, window 512) | perplexity | vs F16 | tokens |"
echo "|---|---:|---:|---:|"
row "F16 weights, f32 KV cache" f16
row "F16 weights, \`--compute bf16\` (x and weights rounded to bfloat16 in the prefill GEMMs)" f16 --compute bf16
row "4-bit weights, g64, axis 0 (output channels)" q4-g64-ax0
row "4-bit weights, g64, axis 1 (input channels)" q4-g64-ax1 --compute f32
row "4-bit weights, g32, axis 0" q4-g32-ax0
row "4-bit weights, g128, axis 0" q4-g128-ax0
row "4-bit weights, g64, axis 1, int8 activations" q4-g64-ax1 --compute int8
row "8-bit weights, g64, axis 0" q8-g64-ax0
row "8-bit weights, g64, axis 1" q8-g64-ax1 --compute f32
row "8-bit weights, g64, axis 1, int8 activations" q8-g64-ax1 --compute int8
row "4-bit KV cache (g64 along the head dim)" f16 --compress-cache
row "4-bit weights (g64, axis 0) + 4-bit KV cache" q4-g64-ax0 --compress-cache
row "both + sparse attention keeping 10%" q4-g64-ax0 --compress-cache --attn-sparsity 0.1

# The Llama-family test fixtures (2 layers, hidden 64, vocabulary 512, random weights, BF16): no
# language model, so only the change against BF16 says anything. Window 128 (their context), the
# first 20000 tokens. They are read whole from the build tree (tests/fixtures keeps one copy of
# each file: cmake --build build --target fg_fixtures assembles them).
FIX=${FIX:-$BIN/tests/fixtures/llama}
[ -d "$FIX/llama2-tiny-bf16" ] || cmake --build "$BIN" --target fg_fixtures >/dev/null
echo
echo "| fixture (Persuasion, window 128, 20000 tokens) | BF16 | Q8 ax1 | Q8 ax1 int8 | Q4 ax1 | Q4 ax1 int8 |"
echo "|---|---:|---:|---:|---:|---:|"
for m in llama2-tiny llama3-tiny mistral-tiny qwen2-tiny; do
  mkdir -p "$WORK"
  "$BIN/fg-convert" "$FIX/$m-bf16" -o "$WORK/$m" --quiet
  "$BIN/fg-convert" "$FIX/$m-bf16" -o "$WORK/$m-q8" --quiet --weight-bits 8 --group-axis 1
  "$BIN/fg-convert" "$FIX/$m-bf16" -o "$WORK/$m-q4" --quiet --compress-weight --group-axis 1
  fp() { "$BIN/fg-infer" ppl -m "$WORK/$1" --text "$TEXT" --window 128 --max-tokens 20000 --quiet \
           "${@:2}" | sed -nE 's/^perplexity ([0-9.]+) over.*/\1/p'; }
  b=$(fp "$m")
  printf '| %s | %.3f' "$m" "$b"
  for s in "$m-q8 --compute f32" "$m-q8 --compute int8" "$m-q4 --compute f32" "$m-q4 --compute int8"; do
    # shellcheck disable=SC2086
    p=$(fp $s); awk -v p="$p" -v b="$b" 'BEGIN { printf " | %.3f (%+.2f%%)", p, (p / b - 1) * 100 }'
  done
  echo " |"
done
rm -rf "$WORK"
