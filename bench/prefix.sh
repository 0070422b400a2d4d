#!/usr/bin/env bash
# bench/prefix.sh - the prefix KV cache on a HELM-like job: N prompts sharing one few-shot
# prefix of 384 tokens, each with its own question of 16-48 tokens, 8 generated tokens (greedy).
# Runs the job three times on one block shape: without the cache, with an empty cache (cold:
# the shared pass computes the prefix once, the blocks load it) and again (warm: every whole
# page of every prompt is cached), counts the prompts whose tokens differ, and prints prefill
# and total time (fg-infer's summary) with the speedups over the run without cache. REPS > 1
# repeats the off/warm pair, interleaved, for noisy machines.
#
# usage: bench/prefix.sh STORE [N (256)] [WORK (/tmp/fg-prefix-bench)] [fg-infer args...]
#   e.g. build/fg-convert synth --model opt-1.3b -o /tmp/opt-1.3b --tokenizer data/gpt2-tokenizer
#        bench/prefix.sh /tmp/opt-1.3b 32 /tmp/pb --gpu-batch-size 16 --num-gpu-batches 2
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
INFER=${FG_INFER:-$ROOT/build/fg-infer}
STORE=$1 N=${2:-256} WORK=${3:-/tmp/fg-prefix-bench}
shift $(( $# < 3 ? $# : 3 ))
REPS=${REPS:-1}
mkdir -p "$WORK"
rm -rf "$WORK/cache"
python3 - "$N" > "$WORK/in.jsonl" <<'PY'
import json, random, sys
# common English words that GPT-2 encodes as one token each with their leading space
W = ("the of and to in is was for on that with as by at from his her it be this which or had "
     "not but are they you all one were their there been has have when who will more no if "
     "out so said what up its about into than them can only other new some time could these "
     "two may then do first any my now such like our over man me even most made after also "
     "did many before must through back years where much your way well down should because "
     "each just those people how too little state good very make world still own see men "
     "work long here get both between life being under never day same another know while "
     "last might us great old year off come since against go came right used take three").split()
rng = random.Random(17)
prefix = " ".join(rng.choice(W) for _ in range(383)) + "\n"   # + BOS = 384 tokens
for i in range(int(sys.argv[1])):
    q = " ".join(rng.choice(W) for _ in range(rng.randint(14, 46)))
    print(json.dumps({"id": "q%d" % i, "prompt": prefix + "Question:" + q + " Answer:"}))
PY
ARGS=(-m "$STORE" --input "$WORK/in.jsonl" --max-new-tokens 8 "$@")
run() { # name, extra args: prints "prefill total cached computed"
  local name=$1; shift
  rm -f "$WORK/$name.jsonl"
  "$INFER" "${ARGS[@]}" --output "$WORK/$name.jsonl" "$@" 2> "$WORK/$name.log"
  local s p t c u
  s=$(grep '^summary:' "$WORK/$name.log")
  t=$(sed -n 's/.* generated in \([0-9.]*\) s .*/\1/p' <<< "$s")
  p=$(sed -n 's/.*(prefill \([0-9.]*\) s.*/\1/p' <<< "$s")
  c=$(sed -n 's/.*prompt tokens \([0-9]*\) cached, \([0-9]*\) computed.*/\1 \2/p' "$WORK/$name.log")
  echo "$p $t ${c:-0 -}"
}
texts() { python3 -c 'import json,sys; [print(json.loads(l)["id"], json.loads(l)["tokens"]) for l in open(sys.argv[1])]' "$1" | sort; }
read -r op ot _ _ <<< "$(run off)"
read -r cp ct cc cu <<< "$(run cold --prefix-cache "$WORK/cache")"
read -r wp wt wc wu <<< "$(run warm --prefix-cache "$WORK/cache")"
same=""
for r in cold warm; do # a near-tie of the top two logits may flip (see README)
  n=$(diff <(texts "$WORK/off.jsonl") <(texts "$WORK/$r.jsonl") | grep -c '^<' || true)
  same+="$r: $n of $N prompts' tokens differ from the run without cache; "
done
tok=$(python3 -c 'import json,sys; print(sum(json.loads(l)["prompt_tokens"] for l in open(sys.argv[1])))' "$WORK/off.jsonl")
echo "prefix bench: $N prompts ($tok prompt tokens), store $STORE, args: $*"
printf '| run | prefill s | total s | prompt tokens cached / computed | prefill speedup | total speedup |\n'
printf '|---|---|---|---|---|---|\n'
row() { printf '| %s | %s | %s | %s / %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5" \
  "$(python3 -c "print('%.1fx' % ($op / max($2, 1e-9)))")" \
  "$(python3 -c "print('%.1fx' % ($ot / max($3, 1e-9)))")"; }
row "no cache" "$op" "$ot" 0 "$tok"
row "cold cache" "$cp" "$ct" "$cc" "$cu"
row "warm cache" "$wp" "$wt" "$wc" "$wu"
for ((i = 2; i <= REPS; i++)); do
  read -r op ot _ _ <<< "$(run off)"
  read -r wp wt wc wu <<< "$(run warm --prefix-cache "$WORK/cache")"
  row "no cache ($i)" "$op" "$ot" 0 "$tok"
  row "warm cache ($i)" "$wp" "$wt" "$wc" "$wu"
done
grep 'prefix cache' "$WORK/cold.log" | sed 's/^ */cold: /'
echo "$same"
du -sh "$WORK/cache" | sed 's/^/cache on disk: /'
