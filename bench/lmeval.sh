#!/usr/bin/env bash
# lm-evaluation-harness on local tasks made from the shipped Austen texts
# (python/lm_eval_check/make_tasks.py: cloze multiple choice, rolling perplexity, a
# generate_until task), on the shipped model three ways in one run: lm-eval's `hf` backend on
# the checkpoint (transformers + torch), `local-completions` against fg-serve (token ids in,
# echo + prompt log-probs out), and the fg Python package's lm-eval model. Prints each
# backend's table and wall time. lm-eval and torch are heavy: VENV is a venv that has them
# (e.g. `python3 -m venv V && V/bin/pip install "lm-eval[api]" accelerate torch`); nothing here
# installs them. BUILD is a build tree of this checkout (fg-convert, fg-serve,
# python/libfgpy.so).
# MODEL (default: the shipped model) is any checkpoint directory transformers and fg-convert both
# read, MAXLEN its positions (default 512).
# usage: [MODEL=DIR MAXLEN=N] bench/lmeval.sh VENV BUILD WORK [ITEMS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
V=$(cd "$1" && pwd) B=$(cd "$2" && pwd) WORK=$(mkdir -p "$3" && cd "$3" && pwd) ITEMS=${4:-40}
PORT=${PORT:-8123} MODEL=$(cd "${MODEL:-$SRC/models/austen-opt}" && pwd) MAXLEN=${MAXLEN:-512}
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$V/bin/python" "$SRC/python/lm_eval_check/make_tasks.py" "$SRC/data/austen/persuasion.txt" \
  "$WORK/tasks" "$ITEMS"
[ -d "$WORK/austen.store" ] || "$B/fg-convert" "$MODEL" -o "$WORK/austen.store" --quiet
TASKS=(--include_path "$WORK/tasks" --tasks austen_cloze,austen_ppl,austen_gen)
table() { sed -n '/^|  *Tasks/,/^$/p' "$1"; }

t0=$(date +%s.%N)
"$V/bin/lm_eval" --model hf --device cpu --batch_size 8 "${TASKS[@]}" \
  --model_args "pretrained=$MODEL,dtype=float32" > "$WORK/hf.log" 2>&1
t1=$(date +%s.%N)
"$B/fg-serve" -m "$WORK/austen.store" --port "$PORT" --ram-budget 1G --quiet > "$WORK/serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "localhost:$PORT/health" >/dev/null && break; sleep 0.2; done
t2=$(date +%s.%N)
"$V/bin/lm_eval" --model local-completions "${TASKS[@]}" --model_args \
  "base_url=http://127.0.0.1:$PORT/v1/completions,model=austen.store,tokenizer=$MODEL,tokenized_requests=True,max_length=$MAXLEN" \
  > "$WORK/serve-eval.log" 2>&1
t3=$(date +%s.%N)
kill -TERM $spid; wait $spid || true
PYTHONPATH="$SRC/python" FG_LIBRARY="$B/python/libfgpy.so" "$V/bin/python" -m fg.lm_eval \
  --model fg --model_args "store=$WORK/austen.store,ram_budget=1GiB,max_ctx=$MAXLEN" "${TASKS[@]}" \
  > "$WORK/fg.log" 2>&1
t4=$(date +%s.%N)
echo "== hf (transformers), $(echo "$t1 - $t0" | bc) s wall"; table "$WORK/hf.log"
echo "== local-completions -> fg-serve, $(echo "$t3 - $t2" | bc) s wall"; table "$WORK/serve-eval.log"
echo "== fg (Python package), $(echo "$t4 - $t3" | bc) s wall"; table "$WORK/fg.log"
