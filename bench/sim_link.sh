#!/usr/bin/env bash
# What a decode step moves over the simulated GPU's link (issue 18): fg-infer on --backend sim
# with weights, KV cache and activations homed on the device, at a fixed context, run for 1 and
# for G + 1 new tokens; the difference of the summaries' link lines over G is one decode step's
# bytes (the weights' first upload and the pager's chunk fills cancel), printed beside the decode
# phase's tok/s of the longer run. With the engine's workspace on the device a step moves the
# token ids and positions up (the validity went up with the prompts) and, greedy, the next ids down (4 bytes a sequence:
# the argmax runs on the device; with a temperature the live sequences' logits, 4 x vocab
# bytes), nothing that grows with the layers or the hidden width.
#
# usage: bench/sim_link.sh STORE [ROUNDS] [fg-infer flags...]   (default 3 rounds, the prompt
#        below, G = 60, --sim-link 16, 2 threads; env G, LINK, THREADS, BIN; a batch:
#        bench/sim_link.sh STORE 3 --prompt-len 32 --gpu-batch-size 8 --num-gpu-batches 4)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/sim_link.sh STORE [ROUNDS] [fg-infer flags...]}
ROUNDS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
G=${G:-60} LINK=${LINK:-16} THREADS=${THREADS:-2}
INPUT=(-p "It is a truth universally acknowledged")
for a in "$@"; do [ "$a" = --prompt-len ] && INPUT=(); done
COMMON=(--max-context 128 --backend sim --sim-link "$LINK" --percent 100 0 100 0 100 0
        --threads "$THREADS" "$@")
run() { # new tokens -> "up down decode_s tokens"
  local flag=(--max-new-tokens "$1")
  [ ${#INPUT[@]} -eq 0 ] && flag=(--gen-len "$1")
  "$BIN/fg-infer" -m "$STORE" "${INPUT[@]}" "${flag[@]}" "${COMMON[@]}" 2>&1 >/dev/null |
    tr '\n' ' ' | sed -nE 's/.*summary: ([0-9]+) tokens.*decode ([0-9.]+) s\).*host -> device [^(]*\(([0-9]+) bytes\), device -> host [^(]*\(([0-9]+) bytes\).*/\3 \4 \2 \1/p'
}
echo "sim_link: $STORE, $G decode steps, link $LINK GB/s, $THREADS threads"
for r in $(seq 1 "$ROUNDS"); do
  read -r u1 d1 _ n1 <<< "$(run 1)"
  read -r u2 d2 s2 n2 <<< "$(run $((G + 1)))"
  awk -v u=$((u2 - u1)) -v d=$((d2 - d1)) -v g="$G" -v s="$s2" -v n="$((n2 - n1))" 'BEGIN {
    printf "  round: a decode step moves %.0f bytes up, %.0f down (%.0f a generated token);",
           u / g, d / g, (u + d) / n
    printf " decode %.1f tok/s\n", n / s }'
done
