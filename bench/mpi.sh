#!/usr/bin/env bash
# The pipeline on one machine: `mpirun -np 2 fg-infer --threads 1` against `fg-infer --threads 2`
# on the same synthetic job, as interleaved pairs (this machine is noisy: compare within a
# pair), and the bytes each rank sends per generated token.
# usage: bench/mpi.sh [MODEL] [PROMPT_LEN] [GEN_LEN] [GBSxNGB] [PAIRS] [EXTRA fg-infer flags...]
set -euo pipefail
MODEL=${1:-opt-125m} PL=${2:-32} GL=${3:-32} BLK=${4:-8x4} PAIRS=${5:-3}
shift $(( $# < 5 ? $# : 5 ))
EXTRA=("$@")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${STORE:-$ROOT/build/bench-$MODEL.store}
[ -d "$STORE" ] || "$BIN/fg-convert" synth --model "$MODEL" -o "$STORE" \
  --tokenizer "$ROOT/data/gpt2-tokenizer" --quiet
MPI=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || MPI+=(--allow-run-as-root)
ARGS=(-m "$STORE" --prompt-len "$PL" --gen-len "$GL" --gpu-batch-size "${BLK%x*}"
      --num-gpu-batches "${BLK#*x}" "${EXTRA[@]}")
tps() { sed -nE 's/^summary: .*: ([0-9.]+) tok\/s$/\1/p' <<< "$1"; }
echo "model $MODEL, prompt $PL, gen $GL, block $BLK ${EXTRA[*]}"
for p in $(seq 1 "$PAIRS"); do
  one=$("$BIN/fg-infer" "${ARGS[@]}" --threads 2 2>&1 >/dev/null)
  two=$("${MPI[@]}" -np 2 "$BIN/fg-infer" "${ARGS[@]}" --threads 1 2>&1 >/dev/null)
  a=$(tps "$one") b=$(tps "$two")
  echo "pair $p: 1 process x 2 threads $a tok/s, 2 ranks x 1 thread $b tok/s, ratio $(echo "scale=3; $b / $a" | bc)"
done
echo "last pipeline run:"
grep -E 'rank [0-9]+:' <<< "$two" | sed 's/^/  /'
toks=$(sed -nE 's/.*; ([0-9]+) tokens generated$/\1/p' <<< "$two")
grep -E 'sent [0-9]+ bytes' <<< "$two" | while read -r line; do
  r=$(sed -nE 's/.*rank ([0-9]+): sent.*/\1/p' <<< "$line")
  s=$(sed -nE 's/.*sent ([0-9]+) bytes.*/\1/p' <<< "$line")
  echo "  rank $r sends $((s / toks)) bytes per generated token ($s bytes, $toks tokens)"
done
