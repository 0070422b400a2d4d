#!/usr/bin/env bash
# The prefill against OpenBLAS sgemm on the same shapes, in one run (issue 16): fg-infer's
# prefill phase (F16 weights from RAM: decoding pieces to f32, the GEMMs, attention, norms all
# included) in GFLOP/s of its Linear layers, beside bench_sgemm's "layer mix" (OpenBLAS with
# THREADS threads on [M, h] x [h, h]^T, [M, h] x [ffn, h]^T, [M, ffn] x [h, ffn]^T, weighted by
# the FLOPs each contributes to a layer; best of 5 calls) at M = gbs x prompt length (the prefill
# runs one batch of gbs prompts at a time), measured before and after each fg-infer run; and
# beside it bench_sgemm's "sustained" figure (a layer's six Linears back to back for SGEMM_S
# seconds, 20 by default), also before and after. The ratio is taken against the mean of the two
# sustained figures: like the prefill's own tens of seconds they include a shared machine's slow
# moments, which best-of-5 bursts leave out (on this machine the bursts swing 130-155 GFLOP/s
# minute to minute). The burst ratio is printed too.
#
# Prefill FLOPs: prompts x (prompt length x layers x 2 (4 h^2 + 2 h ffn) + 2 h vocab) (the LM
# head runs on each prompt's last position only; OPT shapes: ungated MLP, no GQA).
#
# usage: bench/prefill.sh STORE [ROUNDS] [GBSxNGB] [fg-infer flags...]  (default 2 rounds, 8x4;
#        env PL (128), THREADS (2), SGEMM_S (20), BIN)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/prefill.sh STORE [ROUNDS] [GBSxNGB] [fg-infer flags...]}
ROUNDS=${2:-2} BLK=${3:-8x4}
shift $(( $# < 3 ? $# : 3 ))
THREADS=${THREADS:-2} PL=${PL:-128} SGEMM_S=${SGEMM_S:-20}
g=${BLK%x*} n=${BLK#*x}
read -r h f L V < <("$BIN/fg-inspect" --json --no-chunks "$STORE" | "${PYTHON:-python3}" -c '
import json, sys
m = json.load(sys.stdin)["model"]
print(m["hidden"], m["ffn"], m["layers"], m["vocab"])')
M=$((g * PL))
gflop=$(awk -v p=$((g * n)) -v P="$PL" -v L="$L" -v h="$h" -v f="$f" -v V="$V" \
        'BEGIN { printf "%.3f", p * (P * L * 2 * (4 * h * h + 2 * h * f) + 2 * h * V) / 1e9 }')
echo "prefill: $STORE, block $BLK, prompt $PL: $gflop GFLOP of Linear layers; sgemm at M = $M, $THREADS threads"
sg() { "$BIN/bench/bench_sgemm" "$M" "$h" "$f" "$THREADS" "$SGEMM_S" |
       sed -nE 's/.*layer mix ([0-9.]+) GFLOP.*/\1/p; s/.*sustained ([0-9.]+) GFLOP.*/\1/p' | paste -sd' '; }
for r in $(seq 1 "$ROUNDS"); do
  read -r b0 s0 < <(sg)
  log=$("$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len 1 --threads "$THREADS" \
        --gpu-batch-size "$g" --num-gpu-batches "$n" "$@" 2>&1 >/dev/null)
  read -r b1 s1 < <(sg)
  pf=$(echo "$log" | sed -nE 's/^summary: .*\(prefill ([0-9.]+) s, .*/\1/p')
  awk -v G="$gflop" -v t="$pf" -v s0="$s0" -v s1="$s1" -v b0="$b0" -v b1="$b1" -v r="$r" 'BEGIN {
    s = (s0 + s1) / 2; b = b0 > b1 ? b0 : b1;
    printf "  round %d: prefill %.2f s = %.1f GFLOP/s; sgemm sustained %.1f, %.1f: ratio %.2f" \
           " (bursts %.1f, %.1f: %.2f of the best)\n", r, t, G / t, s0, s1, G / t / s, b0, b1, G / t / b }'
done
