#!/usr/bin/env bash
# Batch-1 decode against the memory's speed (issue 16): in one run, the read bandwidth of a plain
# AVX2 read loop (bench_membw, THREADS threads, before and after each fg-infer run) and fg-infer
# at batch 1 from RAM; prints the decode phase's weight bytes per token x decode tok/s and its
# ratio to the read loop's best pass measured next to it.
#
# Weight bytes per token: the store's bytes of every tensor of 2+ dims that a decode step reads
# whole (the Linear layers and the LM head, which is the tied token embedding for OPT and
# Llama 3.2; the position and untied token embeddings, of which one row is gathered, and the
# 1-D norms/biases are left out). Decode tok/s: the decode
# phase's (tokens - prompts) / decode seconds from fg-infer's summary.
#
# usage: bench/batch1.sh STORE [ROUNDS] [fg-infer flags...]   (default 3 rounds, prompt 16,
#        32 new tokens, 2 threads; env THREADS, PL, GL, BIN)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/batch1.sh STORE [ROUNDS] [fg-infer flags...]}
ROUNDS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
THREADS=${THREADS:-2} PL=${PL:-16} GL=${GL:-32}
wbytes=$("$BIN/fg-inspect" --json --no-chunks "$STORE" | "${PYTHON:-python3}" -c '
import json, sys
d = json.load(sys.stdin)
tied = d["model"]["tied_head"]
read = lambda n: "embed_positions" not in n and ("embed_tokens" not in n or tied)
print(sum(t["bytes"] for t in d["tensors"] if len(t["shape"]) >= 2 and read(t["name"])))')
echo "batch1: $STORE, $wbytes weight bytes per decode step; prompt $PL, $GL new tokens, $THREADS threads"
bw() { "$BIN/bench/bench_membw" "$THREADS" 1024 1 | sed -nE 's/.*best ([0-9.]+) GB\/s.*/\1/p'; }
for r in $(seq 1 "$ROUNDS"); do
  b0=$(bw)
  log=$("$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len "$GL" --threads "$THREADS" \
        --gpu-batch-size 1 --num-gpu-batches 1 "$@" 2>&1 >/dev/null)
  b1=$(bw)
  echo "$log" | sed -nE 's/^summary: ([0-9]+) tokens generated in ([0-9.]+) s \(prefill ([0-9.]+) s, decode ([0-9.]+) s\): ([0-9.]+) tok\/s$/\1 \4 \5/p' |
    awk -v w="$wbytes" -v b0="$b0" -v b1="$b1" -v r="$r" '{
      steps = $1 - 1; tps = steps / $2; gbs = w * tps / 1e9; bw = b0 > b1 ? b0 : b1;
      printf "  round %d: %.2f tok/s overall, decode %.2f tok/s x %.3f GB = %.1f GB/s; read loop %.1f, %.1f GB/s (best %.1f): ratio %.2f\n",
             r, $3, tps, w / 1e9, gbs, b0, b1, bw, gbs / bw }'
done
