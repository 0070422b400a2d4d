#!/usr/bin/env bash
# fg-serve's throughput against a batch job on the same prompts, in one run (issue 41 item 3):
# the batch job (fg-infer --input: P prompts, M new tokens each, ignore_eos, blocks of at most
# B sequences) before and after the server runs; between them fg-serve (--max-seqs B, the same
# placement and policy) driven by bench/serve_load.py with 1, 8 and 32 concurrent streaming
# clients. Prints requests/s, generated tokens/s, TTFT and inter-token latency p50/p99 for each,
# and the ratio of the 32-client tokens/s to the batch job's (target: >= 0.8).
#
# usage: bench/serve.sh [P] [M]     (defaults 64 prompts, 64 tokens)
# env:   BIN (build dir: fg-serve, fg-infer, fg-convert), MODEL (a checkpoint directory; the
#        shipped models/austen-opt), WORK, B (32), CLIENTS ("1 8 32"), FLAGS (more flags for
#        both, e.g. "--threads 2")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
MODEL=${MODEL:-$ROOT/models/austen-opt}
WORK=${WORK:-$ROOT/build/bench-serve}
P=${1:-64} M=${2:-64} B=${B:-32}
CLIENTS=${CLIENTS:-"1 8 32"}
FLAGS=${FLAGS:-}
rm -rf "$WORK" && mkdir -p "$WORK"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$WORK/xdg}
"$BIN/fg-convert" "$MODEL" -o "$WORK/store" --quiet
# P prompts: the first 200 characters of paragraphs of Pride and Prejudice
python3 - "$ROOT/data/austen/pride_and_prejudice.txt" "$P" > "$WORK/prompts.jsonl" <<'PY'
import json, sys
paras = [p.replace("\n", " ").strip() for p in open(sys.argv[1]).read().split("\n\n")]
paras = [p for p in paras if len(p) > 200][50:]
for i in range(int(sys.argv[2])):
    print(json.dumps({"id": str(i), "prompt": paras[i % len(paras)][:200]}))
PY
batch() { # the batch job's tok/s: generated tokens over its wall time from the first block
  local t0 t1
  rm -f "$WORK/batch.jsonl"
  t0=$(date +%s.%N)
  "$BIN/fg-infer" -m "$WORK/store" --input "$WORK/prompts.jsonl" --output "$WORK/batch.jsonl" \
    --max-new-tokens "$M" --ignore-eos --max-block "$B" $FLAGS 2> "$WORK/batch.log"
  t1=$(date +%s.%N)
  local meas; meas=$(sed -nE 's/.*measured ([0-9.]+) s, ([0-9.]+) s, ([0-9.]+) tok\/s.*/\1 \2 \3/p' "$WORK/batch.log")
  awk -v m="$meas" -v w="$(echo "$t1 - $t0" | bc)" -v n=$((P * M)) 'BEGIN {
    split(m, a, " "); printf "batch job: %d prompts x %d tokens: prefill %.2f s, decode %.2f s: %.1f tok/s (%.1f over its whole %.2f s)\n", n / '"$M"', '"$M"', a[1], a[2], n / (a[1] + a[2]), n / w, w }'
  echo "BATCH $(awk -v m="$meas" -v n=$((P * M)) 'BEGIN { split(m, a, " "); printf "%.3f", n / (a[1] + a[2]) }')" >> "$WORK/figures"
}
serve() { # CLIENTS REQUESTS
  "$BIN/fg-serve" -m "$WORK/store" --port 0 --max-seqs "$B" --max-block "$B" --quiet \
    --max-new-tokens "$M" $FLAGS > "$WORK/serve.log" 2>&1 &
  local pid=$! port=""
  trap 'kill -TERM '$pid' 2>/dev/null' EXIT # not left running if the load fails
  for _ in $(seq 600); do
    port=$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$WORK/serve.log")
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
    sleep 0.1
  done
  python3 "$ROOT/bench/serve_load.py" "$port" "$WORK/prompts.jsonl" "$1" "$2" "$M" > "$WORK/load.out"
  grep -v '^TOKS' "$WORK/load.out"
  echo "SERVE$1 $(sed -n 's/^TOKS //p' "$WORK/load.out")" >> "$WORK/figures"
  kill -TERM $pid && wait $pid
  trap - EXIT
}
: > "$WORK/figures"
batch
for c in $CLIENTS; do
  n=$P; [ "$c" -lt 32 ] && n=$((4 * c < P ? 4 * c : P)) # fewer requests for fewer clients
  serve "$c" "$n"
done
batch
awk '/^BATCH/ { b += $2; nb++ } /^SERVE32 / { s = $2 } END {
  if (s && nb) printf "32 clients: %.1f tok/s = %.2f x the batch job (%.1f tok/s, the mean of the runs before and after)\n", s, s / (b / nb), b / nb }' "$WORK/figures"
