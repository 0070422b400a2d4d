#!/usr/bin/env bash
# A mixture of experts larger than its RAM budget, one sequence (--experts, engine/policy.h):
# in one run, fg-infer reading only the experts each step's tokens chose (routed, the default)
# against prefetching every expert with its layer (all, what the engine did before). For each
# mode, runs of 1 and 1 + N new tokens from the same synthetic prompt: seconds per decode token
# from the longer run's decode phase (fg-infer's summary), bytes read from disk per decode token
# from the two runs' difference (N decode steps), beside the whole run's.
# Tokens are sampled (temperature 1, a fixed seed: the same in both modes): greedy decoding of
# random weights repeats one token, whose steps would all choose the same experts.
#
# The store: `fg-convert synth --model MODEL --compress-weight --group-axis 1` (4-bit weights
# grouped along the input axis, what --compute int8, fg-infer's default, multiplies; random
# values: its routers are random too, so routing is not a trained model's) written to DIR once
# and reused. The default qwen1.5-moe-a2.7b (60 experts, top 4, a shared expert) is 8 GB in
# 4-bit, about 60 s to write here; qwen3-30b-a3b (128, top 8) is about 17 GB.
#
# usage: bench/moe.sh [MODEL] [BUDGET] [DIR]   (default qwen1.5-moe-a2.7b, 3G,
#        ${TMPDIR:-/tmp}/fg-bench-moe; env N (8 decode steps), PL (16), THREADS (2), BIN)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
MODEL=${1:-qwen1.5-moe-a2.7b} BUDGET=${2:-3G} DIR=${3:-${TMPDIR:-/tmp}/fg-bench-moe}
N=${N:-8} PL=${PL:-16} THREADS=${THREADS:-2}
STORE=$DIR/$MODEL-q4ax1
mkdir -p "$DIR"
if [ ! -e "$STORE/.complete" ]; then
  rm -rf "$STORE"
  echo "moe: writing $STORE (fg-convert synth --model $MODEL --compress-weight --group-axis 1)"
  t0=$(date +%s)
  "$BIN/fg-convert" synth --model "$MODEL" -o "$STORE" --tokenizer "$ROOT/data/gpt2-tokenizer" \
    --compress-weight --group-axis 1 --seed 1 --quiet
  touch "$STORE/.complete"
  echo "moe: written in $(( $(date +%s) - t0 )) s"
fi
echo "moe: $MODEL 4-bit, $(du -sb "$STORE" | cut -f1) bytes, --ram-budget $BUDGET, one" \
     "sequence, prompt $PL, $N decode steps, $THREADS threads"
# one run of $1 new tokens, --experts $2: "seconds decode_seconds read_bytes"
one() {
  local log
  log=$("$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len "$1" --ram-budget "$BUDGET" \
        --gpu-batch-size 1 --num-gpu-batches 1 --threads "$THREADS" --experts "$2" \
        --temperature 1 --seed 5 \
        2>&1 >/dev/null)
  local tot dec rd
  tot=$(echo "$log" | sed -nE 's/^summary: .* generated in ([0-9.]+) s .*/\1/p')
  dec=$(echo "$log" | sed -nE 's/^summary: .*, decode ([0-9.]+) s\).*/\1/p')
  rd=$(echo "$log" | sed -nE 's/.*read from disk [^(]*\(([0-9]+) bytes.*/\1/p')
  [ -n "$tot" ] && [ -n "$dec" ] && [ -n "$rd" ] || { echo "moe: no summary: $log" >&2; exit 1; }
  echo "$tot $dec $rd"
}
declare -A S B
for mode in routed all; do
  read -r _ _ r1 < <(one 1 "$mode")
  read -r t2 d2 r2 < <(one $((N + 1)) "$mode")
  S[$mode]=$(awk -v d="$d2" -v n="$N" 'BEGIN { printf "%.3f", d / n }')
  B[$mode]=$(awk -v a="$r1" -v b="$r2" -v n="$N" 'BEGIN { printf "%.0f", (b - a) / n }')
  awk -v m="$mode" -v s="${S[$mode]}" -v b="${B[$mode]}" -v t="$t2" -v r="$r2" -v n="$N" 'BEGIN {
    printf "  --experts %-6s a decode token: %.3f s, %.1f MB read; the %d-token run: %.2f s, %.2f GB read\n",
           m, s, b / 1e6, n + 1, t, r / 1e9 }'
done
awk -v sr="${S[routed]}" -v sa="${S[all]}" -v br="${B[routed]}" -v ba="${B[all]}" 'BEGIN {
  fs = 0; fb = 0
  if (sr > 0) fs = sa / sr
  if (br > 0) fb = ba / br
  printf "  routed against all: decode %.2fx faster, %.2fx fewer bytes read a token\n", fs, fb }'
