#!/usr/bin/env bash
# What FlexGen's overlap buys (its "no overlap" ablation), --overlap against --no-overlap in
# alternating runs of one invocation (this machine is noisy), for two placements:
#  (a) CPU, weights in RAM, KV cache on disk: loads prefetched, each batch's KV chunk written
#      behind after its attention (the pager's FG_PAGER_WRITE_BEHIND), against loads and stores
#      the computing thread waits for; prints decode seconds and the pager's stall;
#  (b) the simulated GPU, every weight homed on it, a slow link (SIM_LINK GB/s): the first pass
#      uploads each span's weights on the copy engine while the span before computes (the
#      pager's UPLOADING state), against uploads at acquire; prints prefill seconds and stall.
# usage: bench/overlap.sh STORE [ROUNDS]   (env BIN, PL, GL, BLOCK like 4x4, SIM_LINK, DIR: the
#        offload dir, default the build dir: a real disk)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/overlap.sh STORE [ROUNDS]}
ROUNDS=${2:-3}
PL=${PL:-32} GL=${GL:-8} BLOCK=${BLOCK:-4x4} SIM_LINK=${SIM_LINK:-1} DIR=${DIR:-$BIN}
G=${BLOCK%x*} N=${BLOCK#*x}
run() { # phase flags... -> "seconds stall"
  local phase=$1; shift
  "$BIN/fg-infer" -m "$STORE" "$@" 2>&1 | awk -v p="$phase" '
    /^summary:/ { for (i = 1; i <= NF; i++) if ($i == p || $i == "(" p) { s = $(i + 1) } }
    /stalled/ { for (i = 1; i <= NF; i++) if ($i == "stalled") { st = $(i + 1) } }
    END { gsub(/[s,;]/, "", s); gsub(/[s,;]/, "", st); print s, st }'
}
ab() { # label phase flags...
  local label=$1 phase=$2; shift 2
  local on=() off=()
  for r in $(seq 1 "$ROUNDS"); do
    on+=("$(run "$phase" "$@" --overlap)")
    off+=("$(run "$phase" "$@" --no-overlap)")
  done
  printf '%s\n' "${on[@]}" | paste -d' ' - <(printf '%s\n' "${off[@]}") | awk -v l="$label" -v p="$phase" '
    { on += $1; son += $2; off += $3; soff += $4; n++
      printf "  round %d: %s %.2f s (stall %.2f s) overlapped, %.2f s (stall %.2f s) not\n", n, p, $1, $2, $3, $4 }
    END { printf "%s: %s %.2f s overlapped vs %.2f s not: %.2fx (mean of %d rounds)\n", l, p, on / n, off / n, off / on, n }'
}
echo "overlap: $STORE, prompt $PL, $GL new tokens, block $BLOCK, offload dir $DIR"
ab "(a) cpu, cache on disk" decode --percent 0 100 0 0 0 100 --prompt-len "$PL" --gen-len "$GL" \
   --gpu-batch-size "$G" --num-gpu-batches "$N" --offload-dir "$DIR"
ab "(b) sim, weights on the GPU, link $SIM_LINK GB/s" prefill --backend sim --sim-link "$SIM_LINK" \
   --gpu-budget 4G --percent 100 0 100 0 100 0 --prompt-len "$PL" --gen-len 2 \
   --gpu-batch-size 1 --num-gpu-batches "$N" --offload-dir "$DIR"
