#!/usr/bin/env bash
# A mixture of experts larger than its RAM budget (--experts, engine/policy.h), at block sizes
# of 1, 8 and 32 sequences (BLOCKS; one GPU batch of B sequences): in one run, fg-infer reading
# only the experts each step's tokens chose (routed, the default) against prefetching every
# expert with its layer (all, what the engine did before; MODES). For each block size and mode,
# runs of 1 and 1 + N new tokens from the same synthetic prompt: seconds per decode step from the
# longer run's decode phase (fg-infer's summary) and the decode's tok/s (B tokens a step), bytes
# read from disk per decode step from the two runs' difference (N decode steps), beside the whole
# run's; and the union bound (issue 43): the summary's experts computed a decode step by a sparse
# layer (the union of the experts the block's B tokens chose) times one expert's bytes in every
# sparse layer (from fg-inspect), against which the bytes read a step are put as a ratio (the
# weights outside the experts are read too when the budget does not hold them, so the ratio says
# how close reading is to the routed experts alone). The llama.cpp column the issue asks for is
# not here yet.
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
#        ${TMPDIR:-/tmp}/fg-bench-moe; env N (8 decode steps), PL (16), THREADS (2), BIN,
#        BLOCKS ("1 8 32"), MODES ("routed all"))
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
BLOCKS=${BLOCKS:-"1 8 32"} MODES=${MODES:-"routed all"}
# one expert's bytes summed over the sparse layers (the experts' tensors hold all experts of a
# layer: their bytes over the expert count), and the expert count
read -r EXB NEXP < <("$BIN/fg-inspect" --json --no-chunks "$STORE" | "${PYTHON:-python3}" -c '
import json, sys
d = json.load(sys.stdin)
n = d["model"]["experts"]
print(sum(t["bytes"] for t in d["tensors"] if ".experts." in t["name"]) // n, n)')
echo "moe: $MODEL 4-bit, $(du -sb "$STORE" | cut -f1) bytes, --ram-budget $BUDGET, blocks" \
     "$BLOCKS, prompt $PL, $N decode steps, $THREADS threads; an expert in every sparse layer" \
     "$EXB bytes, $NEXP experts"
# one run of $1 new tokens, --experts $2, block $3: "seconds decode_seconds read_bytes experts"
one() {
  local log
  log=$("$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len "$1" --ram-budget "$BUDGET" \
        --gpu-batch-size "$3" --num-gpu-batches 1 --threads "$THREADS" --experts "$2" \
        --temperature 1 --seed 5 \
        2>&1 >/dev/null)
  local tot dec rd ex
  tot=$(echo "$log" | sed -nE 's/^summary: .* generated in ([0-9.]+) s .*/\1/p')
  dec=$(echo "$log" | sed -nE 's/^summary: .*, decode ([0-9.]+) s\).*/\1/p')
  rd=$(echo "$log" | sed -nE 's/.*read from disk [^(]*\(([0-9]+) bytes.*/\1/p')
  ex=$(echo "$log" | sed -nE 's/.*experts computed by a sparse layer, of [0-9]+: ([0-9.]+) a decode step.*/\1/p')
  [ -n "$tot" ] && [ -n "$dec" ] && [ -n "$rd" ] || { echo "moe: no summary: $log" >&2; exit 1; }
  echo "$tot $dec $rd ${ex:-0}"
}
for b in $BLOCKS; do
  declare -A S=() B=()
  for mode in $MODES; do
    read -r _ _ r1 _ < <(one 1 "$mode" "$b")
    read -r t2 d2 r2 ex < <(one $((N + 1)) "$mode" "$b")
    S[$mode]=$(awk -v d="$d2" -v n="$N" 'BEGIN { printf "%.3f", d / n }')
    B[$mode]=$(awk -v a="$r1" -v c="$r2" -v n="$N" 'BEGIN { printf "%.0f", (c - a) / n }')
    awk -v m="$mode" -v s="${S[$mode]}" -v by="${B[$mode]}" -v t="$t2" -v r="$r2" -v n="$N" \
        -v b="$b" -v ex="$ex" -v E="$EXB" -v X="$NEXP" 'BEGIN {
      u = (m == "all" ? X : ex) * E
      printf "  block %2d --experts %-6s a decode step: %.3f s (%.2f tok/s), %.1f MB read; " \
             "experts a step %.1f of %d, union bound %.1f MB, read/union %.2f; the %d-step run: " \
             "%.2f s, %.2f GB read\n", b, m, s, (s > 0 ? b / s : 0), by / 1e6, ex, X, u / 1e6,
             (u > 0 ? by / u : 0), n + 1, t, r / 1e9 }'
  done
  if [ -n "${S[routed]:-}" ] && [ -n "${S[all]:-}" ]; then
    awk -v b="$b" -v sr="${S[routed]}" -v sa="${S[all]}" -v br="${B[routed]}" -v ba="${B[all]}" 'BEGIN {
      fs = 0; fb = 0
      if (sr > 0) fs = sa / sr
      if (br > 0) fb = ba / br
      printf "  block %2d routed against all: decode %.2fx faster, %.2fx fewer bytes read a step\n",
             b, fs, fb }'
  fi
done
