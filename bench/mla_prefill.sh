#!/usr/bin/env bash
# Multi-head latent attention's prefill, absorbed against expanded (model/decoder.c; issue 44):
# fg-infer's prefill of one prompt of each length in LENS with FG_MLA_PREFILL=absorb and =expand,
# ROUNDS rounds, the two paths' order alternating round by round (absorb first in odd rounds),
# so a shared machine's slow minutes fall on both. Per run: the summary's prefill seconds (wall,
# weight reads included) and the process's user and system CPU seconds (/usr/bin/time; the
# system time is mostly reading the weights, the same work on both paths); then per length the
# mean of each and expand / absorb.
#
# The store: a DeepSeek-V2-Lite shape (16 heads, kv_lora 512, rope 64, nope 128, v 128), e.g.
#   build/fg-convert synth --model deepseek-v2-lite --zero-weights --compress-weight \
#       -o v2l.store --tokenizer data/gpt2-tokenizer
# (zero weights: holes, nothing written; every router logit is 0, so every token picks the same
# 6 experts, the same multiply-adds a token as a real router's 6, fewer distinct experts read).
#
# usage: bench/mla_prefill.sh STORE [ROUNDS] [fg-infer flags...]  (default 2 rounds;
#        env LENS ("512 2048"), THREADS (2), BIN (build))
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
STORE=${1:?usage: bench/mla_prefill.sh STORE [ROUNDS] [fg-infer flags...]}
ROUNDS=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
THREADS=${THREADS:-2} LENS=${LENS:-512 2048}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "mla prefill: $STORE, prompts of $LENS tokens, $ROUNDS rounds, $THREADS threads"
printf '%-6s %-6s %-7s %10s %10s %10s\n' round len mode prefill_s user_s sys_s
for r in $(seq 1 "$ROUNDS"); do
  for len in $LENS; do
    modes="absorb expand"
    (( r % 2 )) || modes="expand absorb"
    for m in $modes; do
      FG_MLA_PREFILL=$m /usr/bin/time -f 'CPU %U %S' -o "$tmp/time" \
        "$BIN/fg-infer" -m "$STORE" --prompt-len "$len" --gen-len 1 --num-prompts 1 \
        --threads "$THREADS" "$@" > "$tmp/log" 2>&1 ||
        { cat "$tmp/log" >&2; echo "fg-infer failed ($m, $len)" >&2; exit 1; }
      p=$(sed -nE 's/.*\(prefill ([0-9.]+) s,.*/\1/p' "$tmp/log" | head -1)
      c=$(awk '/^CPU/ { printf "%.2f %.2f", $2, $3 }' "$tmp/time")
      [[ -n $p && -n $c ]] || { cat "$tmp/log" >&2; echo "no prefill time ($m, $len)" >&2; exit 1; }
      printf '%-6s %-6s %-7s %10s %10s %10s\n' "$r" "$len" "$m" "$p" $c | tee -a "$tmp/rows"
    done
  done
done
echo "means over $ROUNDS rounds:"
awk '{ k = $2 " " $3; p[k] += $4; u[k] += $5; y[k] += $6; n[k]++; L[$2] = 1 }
     END { for (l in L) {
             a = l " absorb"; e = l " expand";
             printf "  %s tokens: absorb prefill %.2f s, user %.2f s, sys %.2f s; expand prefill " \
                    "%.2f s, user %.2f s, sys %.2f s; expand / absorb: prefill %.3f, user %.3f\n",
                    l, p[a] / n[a], u[a] / n[a], y[a] / n[a], p[e] / n[e], u[e] / n[e],
                    y[e] / n[e], p[e] / p[a], u[e] / u[a] } }' "$tmp/rows" | sort -n -k1
