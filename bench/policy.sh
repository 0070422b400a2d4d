#!/usr/bin/env bash
# --policy auto against a hand grid (issue 15): synthetic models under RAM budgets of 25%, 50%
# and 100% of their weights; for each budget, 8 hand-picked policies (blocks, weight placement,
# the fixed rule, a 4-bit cache) and auto, each one short synthetic run. Prints each run's
# tok/s (the median of REPS interleaved runs, and each run) and the cost model's prediction,
# auto's ratio to the best grid point (target >= 0.95), and the median |predicted - measured| /
# measured over every run (target <= 15%).
# The machine's calibration (fg-infer calibrate) is made first when there is none. Auto runs
# with --allow-lossy: the grid has a 4-bit cache point, and auto may choose one too (without
# the flag, since issue 38, auto turns nothing lossy on by itself).
# With DEVICE=sim (or cuda) the budgets are the GPU's (--gpu-budget: the percentage of the
# weights plus RESERVE MiB for the engine's device buffers; RAM unlimited) and the grid places
# on the device: the default rule (weights on the GPU first), the weights' share that fits on
# the GPU with the KV cache on the GPU or in RAM (attention on the device, or on the CPU with
# --cpu-cache-compute), every weight in RAM; auto prices it with the device measured at start.
# usage: bench/policy.sh [MODEL...]      (default: opt-1.3b llama-3.2-1b)
# env:   PL (prompt, 32)  GL (new tokens, 8)  BLOCK (auto's --max-block and the grid's largest
#        block, 8)  BUDGETS (percent of the weights, "25 50 100")  THREADS (2)  BIN (build/)
#        REPS (rounds, 3: every policy runs once a round, the order rotated; medians reported)
#        DEVICE (sim|cuda: the GPU's budgets)  LINK (the sim's --sim-link GB/s, 4)  RESERVE (128)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
PL=${PL:-32} GL=${GL:-8} BLOCK=${BLOCK:-8} THREADS=${THREADS:-2} REPS=${REPS:-3}
BUDGETS=(${BUDGETS:-25 50 100})
MODELS=("$@"); [ ${#MODELS[@]} -gt 0 ] || MODELS=(opt-1.3b llama-3.2-1b)
CAL=${XDG_CACHE_HOME:-$HOME/.cache}/fg/calibration.json
[ -f "$CAL" ] && grep -q '"quick": false' "$CAL" || "$BIN/fg-infer" calibrate --threads "$THREADS"
half=$((BLOCK / 2)) quarter=$((BLOCK / 4 > 0 ? BLOCK / 4 : 1))

# one run: prints "label|tok/s|predicted tok/s|policy" (tok/s "failed" when it did not run)
run() {
  local label=$1; shift
  local out
  if ! out=$("$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len "$GL" --threads "$THREADS" \
             "$@" 2>&1 >/dev/null); then
    echo "$label|failed|0|$(echo "$out" | tail -1 | cut -c1-90)"
    return
  fi
  local tps pred pol
  tps=$(echo "$out" | sed -nE 's/^summary: .*: ([0-9.]+) tok\/s$/\1/p')
  pred=$(echo "$out" | sed -nE 's/.*predicted: .* ([0-9.]+) tok\/s; measured.*/\1/p')
  pol=$(echo "$out" | sed -nE 's/.*policy (auto: )?(.*)$/\2/p' | sed -E 's/ \([0-9]+ LPs.*//')
  echo "$label|$tps|${pred:-0}|${pol:-fixed}"
}

# the median of the numbers given ("failed" when none is a number)
median() {
  printf '%s\n' "$@" | { grep -E '^[0-9.]+$' || true; } | sort -g | awk '{ v[NR] = $1 } END {
    if (!NR) { print "failed"; exit }
    printf "%.2f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

ERRS=()
for MODEL in "${MODELS[@]}"; do
  STORE=${STORE_DIR:-$ROOT/build}/bench-$MODEL.store
  [ -d "$STORE" ] || "$BIN/fg-convert" synth --model "$MODEL" -o "$STORE" \
    --tokenizer "$ROOT/data/gpt2-tokenizer" --quiet
  weights=$(du -sbL "$STORE" | cut -f1)
  echo "== $MODEL: weights $((weights >> 20)) MiB, prompt $PL, gen $GL, $THREADS threads"
  for pct in "${BUDGETS[@]}"; do
    budget=$(( (weights * pct / 100) >> 20 ))M
    wr=$((pct > 15 ? pct - 15 : 0)); wr=$((wr > 100 ? 100 : wr)) # weights' RAM % that fits
    if [ -n "${DEVICE:-}" ]; then
      budget=$(( ((weights * pct / 100) >> 20) + ${RESERVE:-128} ))M
      wg=$(( (pct > 100 ? 100 : pct) * 9 / 10 )); wc=$((100 - wg)) # beside the cache
      DEV="--backend $DEVICE --gpu-budget $budget"
      [ "$DEVICE" = sim ] && DEV="$DEV --sim-link ${LINK:-4}"
      FIX="--policy fixed $DEV"
      labels=("${BLOCK}x1 rule" "${half}x2 rule" "${BLOCK}x1 w$wg% cGPU" "${half}x2 w$wg% cGPU"
              "${BLOCK}x1 w$wg% cRAM" "${BLOCK}x1 w$wg% cRAM cpu" "${BLOCK}x1 w0%" auto)
      args=("$FIX --gpu-batch-size $BLOCK --num-gpu-batches 1"
            "$FIX --gpu-batch-size $half --num-gpu-batches 2"
            "$FIX --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent $wg $wc 100 0 100 0"
            "$FIX --gpu-batch-size $half --num-gpu-batches 2 --percent $wg $wc 100 0 100 0"
            "$FIX --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent $wg $wc 0 100 100 0"
            "$FIX --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent $wg $wc 0 100 100 0 --cpu-cache-compute"
            "$FIX --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent 0 100 100 0 100 0"
            "$DEV --max-block $BLOCK --allow-lossy")
    else
    FIX=(--policy fixed --ram-budget "$budget")
    labels=("${quarter}x1 rule" "${BLOCK}x1 rule" "${half}x2 rule" "${quarter}x4 rule"
            "${BLOCK}x1 w$wr%" "${half}x2 w$wr%" "${BLOCK}x1 w$wr% c4" "${BLOCK}x1 w0%" auto)
    args=("${FIX[*]} --gpu-batch-size $quarter --num-gpu-batches 1"
          "${FIX[*]} --gpu-batch-size $BLOCK --num-gpu-batches 1"
          "${FIX[*]} --gpu-batch-size $half --num-gpu-batches 2"
          "${FIX[*]} --gpu-batch-size $quarter --num-gpu-batches 4"
          "${FIX[*]} --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent 0 $wr 0 100 0 100"
          "${FIX[*]} --gpu-batch-size $half --num-gpu-batches 2 --percent 0 $wr 0 100 0 100"
          "${FIX[*]} --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent 0 $wr 0 100 0 100 --compress-cache"
          "${FIX[*]} --gpu-batch-size $BLOCK --num-gpu-batches 1 --percent 0 0 0 100 0 100"
          "--ram-budget $budget --max-block $BLOCK --allow-lossy")
    fi
    n=${#labels[@]}
    declare -A TPS=() PRED=() POL=()
    # REPS rounds, each running every policy once, the order rotated from round to round: the
    # shared machine's load drifts, and interleaving spreads it over all the policies alike
    for ((r = 0; r < REPS; r++)); do
      for ((j = 0; j < n; j++)); do
        i=$(( (j + r * 3) % n ))
        # shellcheck disable=SC2086
        IFS='|' read -r _ tps pred pol <<< "$(run "${labels[$i]}" ${args[$i]})"
        TPS[$i]="${TPS[$i]:-} $tps" PRED[$i]=$pred POL[$i]=$pol
        [ "$tps" != failed ] && [ "$pred" != 0 ] && ERRS+=("$(awk -v p="$pred" -v m="$tps" \
          'BEGIN { d = (p - m) / m; print (d < 0 ? -d : d) }')")
      done
    done
    echo "-- budget $pct% ($budget), $REPS rounds interleaved"
    printf '   %-16s %9s %17s %9s  %s\n' policy "tok/s" "(runs)" predicted "auto's choice"
    best=0 best_label=
    for ((i = 0; i < n; i++)); do
      med=$(median ${TPS[$i]})
      printf '   %-16s %9s %17s %9s  %s\n' "${labels[$i]}" "$med" "($(echo ${TPS[$i]} | tr ' ' ','))" \
        "${PRED[$i]}" "$([ "${labels[$i]}" = auto ] && echo "${POL[$i]}")"
      [ "$med" = failed ] && continue
      [ "${labels[$i]}" != auto ] && [ "$(awk -v a="$best" -v b="$med" 'BEGIN { print (b > a) }')" = 1 ] \
        && best=$med best_label=${labels[$i]}
    done
    amed=$(median ${TPS[$((n - 1))]})
    [ "$amed" != failed ] && awk -v a="$amed" -v b="$best" -v l="$best_label" \
      'BEGIN { if (b > 0) printf "   auto / best grid point (%s): %.2f (medians)\n", l, a / b }'
  done
done
if [ ${#ERRS[@]} -gt 0 ]; then
  printf '%s\n' "${ERRS[@]}" | sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median |predicted - measured| / measured over %d runs: %.0f%%\n", NR, 100 * m }'
fi
