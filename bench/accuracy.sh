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
# Through GGUF (issue 45): the shipped model is an OPT, which llama.cpp has no architecture for, so
# the GGUF files of the Llama test model (tests/fixtures/gguf, written by gguf-py from
# llama2-tiny-f32) and the K-quant one stand in: each file's own quantization against its source,
# then fg's re-quantization of the dequantized values (a second loss) against the file, in the
# layout that keeps ggml's blocks (lossless: groups of 32 along the input axis) and in fg's
# others. llama-k-tiny has no source (random Q4_K / Q6_K blocks as a Q4_K_M file mixes them): its
# F16 store, the exact dequantization, is its reference. Weights' loss alone: --compute f32.
GG=$ROOT/tests/fixtures/gguf
gtok=(--tokenizer "$FIX/llama2-tiny-f32")
gconv() { "$BIN/fg-convert" "$1" -o "$WORK/$2" --quiet "${gtok[@]}" "${@:3}"; }
gp() { "$BIN/fg-infer" ppl -m "$WORK/$1" --text "$TEXT" --window 128 --max-tokens 20000 --quiet \
         --compute f32 | sed -nE 's/^perplexity ([0-9.]+) over.*/\1/p'; }
gcell() { awk -v p="$(gp "$1")" -v b="$2" 'BEGIN { printf " | %.3f (%+.2f%%)", p, (p / b - 1) * 100 }'; }
"$BIN/fg-convert" "$FIX/llama2-tiny-f32" -o "$WORK/g-src" --quiet
gconv "$GG/llama2-tiny-q8_0.gguf" g-q8
gconv "$GG/llama2-tiny-q8_0.gguf" g-q8-ll --weight-bits 8 --group-size 32 --group-axis 1
gconv "$GG/llama2-tiny-q8_0.gguf" g-q8-g64 --weight-bits 8 --group-axis 1
gconv "$GG/llama2-tiny-q4_0.gguf" g-q4
gconv "$GG/llama2-tiny-q4_0.gguf" g-q4-ll --compress-weight --group-size 32 --group-axis 1
gconv "$GG/llama2-tiny-q4_0.gguf" g-q4-g64a1 --compress-weight --group-axis 1
gconv "$GG/llama2-tiny-q4_0.gguf" g-q4-g64a0 --compress-weight
echo
echo "| llama2-tiny through GGUF (Persuasion, window 128, 20000 tokens, --compute f32) | perplexity (vs the F32 source) | fg re-quantized: lossless layout (g32 ax1) | g64 ax1 | g64 ax0 |"
echo "|---|---:|---:|---:|---:|"
src=$(gp g-src)
printf '| F32 source | %.3f | | | |\n' "$src"
q8=$(gp g-q8) q4=$(gp g-q4)
printf '| Q8_0 file, stored F16'; gcell g-q8 "$src"
gcell g-q8-ll "$q8"; gcell g-q8-g64 "$q8"; echo " | |"
printf '| Q4_0 file, stored F16'; gcell g-q4 "$src"
gcell g-q4-ll "$q4"; gcell g-q4-g64a1 "$q4"; gcell g-q4-g64a0 "$q4"; echo " |"
gconv "$GG/llama-k-tiny.gguf" k-f16
gconv "$GG/llama-k-tiny.gguf" k-q8 --weight-bits 8 --group-axis 1
gconv "$GG/llama-k-tiny.gguf" k-q4a1 --compress-weight --group-axis 1
gconv "$GG/llama-k-tiny.gguf" k-q4a0 --compress-weight
echo
echo "| llama-k-tiny (Q4_K + Q6_K) through GGUF | stored F16 (exact) | fg Q8 g64 ax1 | fg Q4 g64 ax1 | fg Q4 g64 ax0 |"
echo "|---|---:|---:|---:|---:|"
kb=$(gp k-f16)
printf '| perplexity (vs F16) | %.3f' "$kb"; gcell k-q8 "$kb"; gcell k-q4a1 "$kb"; gcell k-q4a0 "$kb"; echo " |"
rm -rf "$WORK"
