#!/usr/bin/env bash
# fg-infer --prefix-cache end to end, on the shipped model (models/austen-opt, converted here):
#  1. a JSONL job whose prompts share a few-shot prefix gives the same results without the
#     cache, with an empty one (cold: the shared pass computes the prefixes once) and with the
#     filled one (warm); the summary counts cached and computed prompt tokens;
#     the same through the simulated GPU with the KV cache on the device;
#  2. fg-inspect shows the cache (entries, bytes, hits) and --verify passes;
#  3. a cache made under another KV codec is refused with one line;
#  4. --prefix-cache-budget bounds the bytes in use;
#  5. two jobs at once on one cache both finish with the same results;
#  6. fg-infer SIGKILLed at seeded instants while filling a cache leaves one that verifies and
#     gives the same results.
set -euo pipefail
CONVERT=$1 INFER=$2 INSPECT=$3 SRC=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$CONVERT" "$SRC/models/austen-opt" -o model --quiet
PREFIX="It is a truth universally acknowledged, that a single man in possession of a good \
fortune, must be in want of a wife. However little known the feelings or views of such a man \
may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the \
surrounding families, that he is considered the rightful property of some one or other of their \
daughters. Question:"
QS=("What did Mr. Bennet reply?" "Who is Elizabeth Bennet?" "Where is Netherfield Park?"
    "Why did Jane go to London in the winter?" "When is the ball?" "How many daughters?"
    "Is Mr. Darcy proud?" "Who wrote the letter?" "What is the entail?")
for i in $(seq 0 17); do
  printf '{"id": "q%d", "prompt": "%s %s Answer:"}\n' "$i" "$PREFIX" "${QS[$((i % 9))]}"
done > in.jsonl
ARGS=(-m model --input in.jsonl --max-new-tokens 8 --gpu-batch-size 3 --num-gpu-batches 2
      --threads 2 --prefix-page-tokens 8)
texts() { python3 -c 'import json,sys; [print(json.loads(l)["id"], json.loads(l)["text"]) for l in open(sys.argv[1])]' "$1" | sort; }
"$INFER" "${ARGS[@]}" --output off.jsonl --quiet
"$INFER" "${ARGS[@]}" --output cold.jsonl --prefix-cache cache 2> cold.log
"$INFER" "${ARGS[@]}" --output warm.jsonl --prefix-cache cache 2> warm.log
for r in cold warm; do
  diff <(texts off.jsonl) <(texts $r.jsonl) || { echo "$r results differ"; exit 1; }
done
grep -q "shared pass: [1-9][0-9]* prefixes" cold.log || { cat cold.log; echo "no shared pass"; exit 1; }
cached() { sed -n 's/.*prompt tokens \([0-9]*\) cached, \([0-9]*\) computed.*/\1 \2/p' "$1"; }
read -r cc cp <<< "$(cached cold.log)"
read -r wc wp <<< "$(cached warm.log)"
[ "$cc" -gt "$cp" ] || { echo "cold: $cc cached, $cp computed"; exit 1; }
[ "$wc" -ge "$cc" ] && [ "$wp" -le "$cp" ] && grep -q "saved 0 " warm.log || { echo "warm: $wc/$wp vs cold $cc/$cp"; exit 1; }

# ---- 1b. a device backend (the simulated GPU) with the KV cache on the device: the cache's rows
# move through the device's copy engine, never by host pointers into device memory
SIM=(--backend sim --percent 100 0 100 0 100 0)
"$INFER" "${ARGS[@]}" "${SIM[@]}" --output sim-cold.jsonl --prefix-cache sim-cache 2> sim-cold.log
"$INFER" "${ARGS[@]}" "${SIM[@]}" --output sim-warm.jsonl --prefix-cache sim-cache 2> sim-warm.log
for r in sim-cold sim-warm; do
  diff <(texts off.jsonl) <(texts $r.jsonl) || { echo "$r results differ"; exit 1; }
done
read -r sc sp <<< "$(cached sim-warm.log)"
[ "$sc" -gt 0 ] || { cat sim-warm.log; echo "sim: nothing loaded from the cache"; exit 1; }

# ---- 2. fg-inspect
"$INSPECT" cache > inspect.txt
grep -q "entries" inspect.txt && grep -q "hits" inspect.txt || { cat inspect.txt; exit 1; }
"$INSPECT" --json --verify cache > inspect.json 2> verify.log
python3 - <<'PY'
import json
j = json.load(open("inspect.json"))
assert j["entries"] > 0 and j["hits"] > 0 and j["bytes"] > 0 and j["bad"] == 0, j
assert j["page_tokens"] == 8 and j["kv_bits"] == 0, j
PY
grep -q "verify ok" verify.log

# ---- 3. another codec: refused, one line
if "$INFER" "${ARGS[@]}" --output q4.jsonl --prefix-cache cache --compress-cache 2> q4.log; then
  echo "a cache of another KV codec was used"; exit 1
fi
[ "$(wc -l < q4.log)" -eq 1 ] && grep -q "use another directory" q4.log || { cat q4.log; exit 1; }

# ---- 4. budget
"$INFER" "${ARGS[@]}" --output b.jsonl --prefix-cache small --prefix-cache-budget 1M --quiet
diff <(texts off.jsonl) <(texts b.jsonl)
bytes=$(python3 -c 'import json,subprocess,sys; print(json.loads(subprocess.check_output([sys.argv[1], "--json", "small"]))["bytes"])' "$INSPECT")
[ "$bytes" -le 1048576 ] || { echo "budget 1M, $bytes bytes in use"; exit 1; }

# ---- 5. two jobs on one cache at once
"$INFER" "${ARGS[@]}" --output s1.jsonl --prefix-cache shared --quiet & p1=$!
"$INFER" "${ARGS[@]}" --output s2.jsonl --prefix-cache shared --quiet & p2=$!
rc1=0 rc2=0
wait $p1 || rc1=$?
wait $p2 || rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] || { echo "two jobs on one cache: exit $rc1, $rc2"; exit 1; }
for r in s1 s2; do diff <(texts off.jsonl) <(texts $r.jsonl); done
"$INSPECT" --verify shared > /dev/null
# ---- 6. fg-infer killed (SIGKILL) at seeded instants while it fills a cache: the cache still
# verifies, and a run through it gives the same results
RANDOM=20261201
for t in 1 2 3 4 5 6; do
  "$INFER" "${ARGS[@]}" --output k$t.jsonl --prefix-cache killed --quiet & pk=$!
  sleep "0.$(printf '%03d' $((RANDOM % 900)))"
  kill -9 $pk 2>/dev/null || true
  wait $pk 2>/dev/null || true
done
"$INFER" "${ARGS[@]}" --output k.jsonl --prefix-cache killed --quiet
diff <(texts off.jsonl) <(texts k.jsonl) || { echo "results through a killed cache differ"; exit 1; }
"$INSPECT" --verify killed > /dev/null
# what a creation killed part way leaves (a kill above may land there or not): a lone stale
# store.id.tmp, or a store.id nobody holds without its catalog; the next run makes the cache
mkdir half1 half2
head -c 64 /dev/urandom > half1/store.id.tmp
touch -d '-10 sec' half1/store.id.tmp
cp killed/store.id half2/store.id
for h in half1 half2; do
  rm -f h.jsonl
  "$INFER" "${ARGS[@]}" --output h.jsonl --prefix-cache $h --quiet ||
    { echo "a half-made cache ($h) was not made again"; exit 1; }
  diff <(texts off.jsonl) <(texts h.jsonl) || { echo "results through $h differ"; exit 1; }
  "$INSPECT" --verify $h > /dev/null
done
echo "tool_prefix: ok (cold $cc cached / $cp computed, warm $wc / $wp)"
