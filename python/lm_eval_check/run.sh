#!/usr/bin/env bash
# lm-evaluation-harness with fg's model on local tasks made from the shipped Austen texts
# (make_tasks.py: cloze multiple choice, rolling perplexity, a generate_until task), on the
# shipped model (models/austen-opt, converted with fg.convert), through `python -m fg.lm_eval`
# (no lm-eval release, through 0.4.13, discovers plugins: the module registers the model, then
# runs lm-eval's command line). Its own venv (lm-eval is heavy; not in the test venv): made at WORK/venv when
# missing, with lm-eval and this checkout's package (pip install ./python).
# usage: python/lm_eval_check/run.sh WORK [ITEMS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mkdir -p "$1" && cd "$1" && pwd)
ITEMS=${2:-40}
V=$WORK/venv
if [ ! -x "$V/bin/lm_eval" ]; then
  python3 -m venv "$V"
  "$V/bin/pip" install -q lm-eval
fi
"$V/bin/python" -c "import fg" 2>/dev/null || "$V/bin/pip" install -q "$SRC/python"
"$V/bin/python" "$SRC/python/lm_eval_check/make_tasks.py" "$SRC/data/austen/persuasion.txt" \
  "$WORK/tasks" "$ITEMS"
[ -d "$WORK/austen.store" ] ||
  "$V/bin/python" -c "import fg, sys; fg.convert(sys.argv[1], sys.argv[2], progress=False)" \
    "$SRC/models/austen-opt" "$WORK/austen.store"
cd "$WORK"
/usr/bin/time -f "lm_eval --model fg: %e s wall" "$V/bin/python" -m fg.lm_eval --model fg \
  --model_args "store=$WORK/austen.store,ram_budget=1GiB,max_ctx=512" \
  --include_path "$WORK/tasks" --tasks austen_cloze,austen_ppl,austen_gen \
  --output_path "$WORK/results" --log_samples
