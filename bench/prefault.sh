#!/usr/bin/env bash
# The HOST pool committed ahead (pager/pool.c fg_hostpool_prefault: place commits the homed
# region and a helper thread faults it in beside the first reads) against the pool committed as
# used (FG_PAGER_PREFAULT=0), in one run: batch-1 fg-infer from RAM, rounds of lazy, ahead,
# ahead, lazy (ABBA, so a drift of the machine's load cancels), SLEEP seconds before each run
# (on a VM with free page reporting the guest hands freed memory back to the host about 2 s
# after a process exits; a run started sooner reuses the last run's pages and pays less for
# its first touches, favouring whichever runs second).
#
# Per run: the prefill and decode seconds of fg-infer's summary, the process's wall seconds,
# "first token" = wall - decode (open, prefill and exit: the time to the first token of a
# --prompt-len run), "open" = wall - prefill - decode (the engine's open, the store's, the
# tokenizer's, exit), and the process's user + system CPU seconds; then the means per mode and
# ahead / lazy ratios (below 1: faster).
#
# usage: bench/prefault.sh STORE [ROUNDS] [fg-infer flags...]   (default 1 round = 4 runs;
#        env PL (128), GL (8), THREADS (2), SLEEP (10), BIN)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/prefault.sh STORE [ROUNDS] [fg-infer flags...]}
ROUNDS=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
PL=${PL:-128} GL=${GL:-8} THREADS=${THREADS:-2} SLEEP=${SLEEP:-10}
RES=$(mktemp)
trap 'rm -f "$RES" "$RES.t"' EXIT
echo "prefault: $STORE, batch 1, prompt $PL, $GL new, $THREADS threads, $ROUNDS round(s) of lazy ahead ahead lazy"
run() { # mode flags...
  local mode=$1 t0 t1 log
  shift
  sleep "$SLEEP"
  t0=$(date +%s.%N)
  log=$( if [ "$mode" = lazy ]; then export FG_PAGER_PREFAULT=0; else unset FG_PAGER_PREFAULT; fi
         /usr/bin/time -f "cpu %U %S" -o "$RES.t" "$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" \
           --gen-len "$GL" --threads "$THREADS" --gpu-batch-size 1 --num-gpu-batches 1 "$@" 2>&1 >/dev/null)
  t1=$(date +%s.%N)
  echo "$log" | sed -nE 's/^summary: .*\(prefill ([0-9.]+) s, decode ([0-9.]+) s\).*/\1 \2/p' |
    awk -v m="$mode" -v w="$(echo "$t1 - $t0" | bc)" -v cpu="$(awk '{ print $2 + $3 }' "$RES.t")" \
        -v ld="$(cut -d' ' -f1 /proc/loadavg)" '{
      printf "%s %.2f %.2f %.2f %.2f %.2f %.2f\n", m, $1, $2, w, w - $2, w - $1 - $2, cpu >> "'"$RES"'"
      printf "  %-5s prefill %6.2f s  decode %6.2f s  wall %6.2f s  first token %6.2f s  open %5.2f s  CPU %6.2f s  load %s\n",
             m, $1, $2, w, w - $2, w - $1 - $2, cpu, ld }'
}
for _ in $(seq 1 "$ROUNDS"); do
  for m in lazy ahead ahead lazy; do run "$m" "$@"; done
done
awk '{ n[$1]++; for (i = 2; i <= 7; i++) s[$1, i] += $i }
  END {
    split("prefill decode wall first-token open CPU", name, " ")
    for (i = 2; i <= 7; i++) {
      a = s["ahead", i] / n["ahead"]; l = s["lazy", i] / n["lazy"]
      printf "  mean %-11s lazy %7.2f s  ahead %7.2f s  ahead/lazy %.2f\n", name[i - 1], l, a, (l > 0 ? a / l : 0)
    } }' "$RES"
