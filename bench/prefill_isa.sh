#!/usr/bin/env bash
# The prefill with the AVX-512 prefill kernels against the same build's AVX2 kernels
# (FG_PREFILL_AVX512=0), end to end through fg-infer, in interleaved rounds (issue 43): an F16
# store (the 16-bit GEMM: gemm16_avx2.c vs gemm16_avx512.c) and, when given, a 4-bit store with
# groups along the input axis under --compute int8 (the Q4 panel kernel: gemm_q4p_avx2.c vs
# gemm_q4p_vnni512.c). Each run is a prefill only (--gen-len 1) of gbs x ngb prompts of PL tokens;
# printed: the prefill's seconds and GFLOP/s of its Linear layers (as bench/prefill.sh counts
# them), the process's user CPU seconds, and per round the ratio old/new of both. On a shared
# machine the CPU seconds are the steadier figure (a run that waits for a core is not charged
# the wait); the wall-clock ratio is printed beside it. With BF16=1 in the environment the F16
# store also runs with --compute bf16 (the AVX512-BF16 kernel: x and weights rounded to
# bfloat16), printed as a third column against the AVX2 run.
#
# usage: bench/prefill_isa.sh F16_STORE [Q4_STORE|-] [ROUNDS] [GBSxNGB]  (default 2 rounds, 8x1;
#        env PL (128), THREADS (2), BF16 (0), BIN)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
F16=${1:?usage: bench/prefill_isa.sh F16_STORE [Q4_STORE|-] [ROUNDS] [GBSxNGB]}
Q4=${2:--} ROUNDS=${3:-2} BLK=${4:-8x1}
THREADS=${THREADS:-2} PL=${PL:-128} BF16=${BF16:-0}
g=${BLK%x*} n=${BLK#*x}
read -r h f L V < <("$BIN/fg-inspect" --json --no-chunks "$F16" | "${PYTHON:-python3}" -c '
import json, sys
m = json.load(sys.stdin)["model"]
print(m["hidden"], m["ffn"], m["layers"], m["vocab"])')
gflop=$(awk -v p=$((g * n)) -v P="$PL" -v L="$L" -v h="$h" -v f="$f" -v V="$V" \
        'BEGIN { printf "%.3f", p * (P * L * 2 * (4 * h * h + 2 * h * f) + 2 * h * V) / 1e9 }')
echo "prefill_isa: block $BLK, prompt $PL, $THREADS threads: $gflop GFLOP of Linear layers a run"
echo "  load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# one run: prints "PREFILL_S USER_S"
one() {
  local store=$1 avx512=$2 comp=(); shift 2
  [ "$avx512" = bf16 ] && avx512=1 comp=(--compute bf16)
  local t; t=$(mktemp)
  local log; log=$(FG_PREFILL_AVX512=$avx512 /usr/bin/time -f "%U" -o "$t" "$BIN/fg-infer" \
        -m "$store" --prompt-len "$PL" --gen-len 1 --threads "$THREADS" --gpu-batch-size "$g" \
        --num-gpu-batches "$n" "$@" "${comp[@]}" 2>&1 >/dev/null)
  echo "$(echo "$log" | sed -nE 's/^summary: .*\(prefill ([0-9.]+) s, .*/\1/p') $(tail -1 "$t")"
  rm -f "$t"
}
pair() {
  local name=$1 store=$2 r=$3; shift 3
  read -r p0 u0 < <(one "$store" 0 "$@")
  read -r p1 u1 < <(one "$store" 1 "$@")
  awk -v G="$gflop" -v n="$name" -v r="$r" -v p0="$p0" -v u0="$u0" -v p1="$p1" -v u1="$u1" \
      'BEGIN { printf "  round %d %-8s avx2: prefill %.2f s (%.1f GFLOP/s), %.2f CPU s | " \
               "avx512: %.2f s (%.1f GFLOP/s), %.2f CPU s | avx512/avx2: wall %.2fx, CPU %.2fx\n",
               r, n, p0, G / p0, u0, p1, G / p1, u1, p0 / p1, u0 / u1 }'
  if [ "$BF16" = 1 ] && [ "$name" = F16 ]; then
    read -r p2 u2 < <(one "$store" bf16 "$@")
    awk -v G="$gflop" -v r="$r" -v p0="$p0" -v u0="$u0" -v p2="$p2" -v u2="$u2" \
        'BEGIN { printf "  round %d F16-bf16 (--compute bf16): prefill %.2f s (%.1f GFLOP/s), " \
                 "%.2f CPU s | bf16/avx2: wall %.2fx, CPU %.2fx\n",
                 r, p2, G / p2, u2, p0 / p2, u0 / u2 }'
  fi
}
for r in $(seq 1 "$ROUNDS"); do
  pair F16 "$F16" "$r"
  [ "$Q4" = - ] || pair Q4-int8 "$Q4" "$r" --compute int8
done
echo "  load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
