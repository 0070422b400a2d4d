#!/usr/bin/env bash
# fg-infer through the session (issue 40, items 4-6) on the shipped Austen model and a shrunk
# Qwen2.5 with its published tokenizer and chat template (tests/fixtures/real-tiny + real):
#   1. -p streams into a pipe: the same text as the same prompt run as a job line, a stop
#      string cut as the job cuts it;
#   2. --chat without -p reads turns from a pipe: one reply line a turn, the conversation kept
#      (the second turn's reply differs from the same line asked alone);
#   3. fg-infer score: pairs' results (text and ids), error lines for malformed ones, --resume
#      after a torn line gives the same file, --rolling texts; the two answers of a four-choice
#      item with the same context agree with one pair scored alone.
# usage: tool_session.sh FG-CONVERT FG-INFER ROOT TINY REAL WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 ROOT=$(readlink -f "$3") TINY=$(readlink -f "$4") REAL=$(readlink -f "$5")
WORK=$6
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_session: $*" >&2; exit 1; }
"$CONVERT" "$ROOT/models/austen-opt" -o austen --quiet
I=("$INFER" -m austen --quiet --threads 1)

# 1. -p streamed = the job's text
P="It is a truth universally acknowledged"
"${I[@]}" -p "$P" --max-new-tokens 24 | cat > p.txt
printf '{"id": "a", "prompt": "%s", "max_new_tokens": 24}\n' "$P" > j.jsonl
"${I[@]}" --input j.jsonl --output j.out
want=$(python3 -c 'import json,sys; r=json.loads(open("j.out").readline()); sys.stdout.write(r["text"])')
[ "$(cat p.txt)" = "$P$want" ] || fail "-p printed '$(cat p.txt)', the job's text '$P$want'"
"${I[@]}" -p "$P" --max-new-tokens 24 --stop "," | cat > ps.txt
[ "$(cat ps.txt)" = "$P${want%%,*}" ] || fail "-p --stop printed '$(cat ps.txt)'"
echo "-p streamed into a pipe: the job's text, cut at the stop string"

# 2. the interactive chat
n=Qwen__Qwen2.5-0.5B-Instruct
mkdir ck && cp "$TINY/$n/"*.json ck/ && xz -dc "$TINY/$n/model.safetensors.xz" > ck/model.safetensors
for f in tokenizer.json tokenizer_config.json vocab.json merges.txt special_tokens_map.json; do
  if [ -f "$REAL/$n/$f.xz" ]; then xz -dc "$REAL/$n/$f.xz" > "ck/$f"
  elif [ -f "$REAL/$n/$f" ]; then cp "$REAL/$n/$f" "ck/$f"; fi
done
"$CONVERT" ck -o qwen --quiet
# -p sampled on a random Qwen (byte-level pieces of multi-byte characters everywhere): the
# same text as the job line (line 1 samples from -p's stream), valid UTF-8 piece by piece
Q=("$INFER" -m qwen --quiet --threads 1 --max-context 256 --temperature 1 --seed 7)
"${Q[@]}" -p "Hello" --max-new-tokens 48 | cat > q.txt
printf '{"id": "q", "prompt": "Hello", "max_new_tokens": 48}\n' > qj.jsonl
"${Q[@]}" --input qj.jsonl --output qj.out
python3 - <<'PY' || fail "-p on Qwen: the streamed text is not the job's"
import json
got = open("q.txt", "rb").read().decode("utf-8")  # strict: whole characters only
want = json.loads(open("qj.out").readline())["text"]
assert got == "Hello" + want + "\n", (got, want)
assert any(ord(c) > 127 for c in want), "no multi-byte character to test with"
PY
echo "-p on a byte-level BPE: valid UTF-8, the job's text"
C=("$INFER" -m qwen --chat --quiet --threads 1 --max-new-tokens 6 --max-context 256)
printf 'Hello there\n\nWho are you?\n' | "${C[@]}" > two.txt
[ "$(wc -l < two.txt)" -eq 2 ] || fail "--chat: $(wc -l < two.txt) reply lines for 2 turns"
printf 'Who are you?\n' | "${C[@]}" > one.txt
[ "$(sed -n 2p two.txt)" != "$(cat one.txt)" ] || fail "--chat: the second turn saw no history"
echo "--chat: a reply line a turn, the conversation kept"

# 3. score
cat > pairs.jsonl <<'J'
{"id": 1, "context": "Emma Woodhouse, handsome, clever, and", "continuation": " rich"}
{"id": 2, "context": "Emma Woodhouse, handsome, clever, and", "continuation": " poor"}
{"id": "three", "context": [2, 100, 200], "continuation": [300, 40]}
{"id": 4, "context": "x"}

{"context": "no id", "continuation": "y"}
J
"$INFER" score -m austen --quiet --threads 1 --input pairs.jsonl --output s.out
[ "$(wc -l < s.out)" -eq 5 ] || fail "score: $(wc -l < s.out) result lines for 5 pairs"
grep -q '"id":1,"logprob":-[0-9.]*,"is_greedy":\(true\|false\),"n_tokens":1}' s.out ||
  fail "score: $(head -1 s.out)"
grep -q '"id":4,"error":"\\"continuation\\" is missing"' s.out || fail "score: $(sed -n 4p s.out)"
grep -q '"id":null,"line":6,"error"' s.out || fail "score: $(sed -n 5p s.out)"
head -1 pairs.jsonl > one.jsonl
"$INFER" score -m austen --quiet --threads 1 --input one.jsonl --output one.out
[ "$(head -1 s.out)" = "$(cat one.out)" ] || fail "score: pair 1 alone $(cat one.out), in a batch $(head -1 s.out)"
head -c -15 s.out > r.out
"$INFER" score -m austen --quiet --threads 1 --input pairs.jsonl --output r.out --resume
cmp -s r.out s.out || fail "score --resume after a torn line: $(cat r.out)"
if "$INFER" score -m austen --quiet --input pairs.jsonl --output s.out 2> err.txt; then
  fail "score over a non-empty output without --resume ran"
fi
grep -q "not empty (--resume continues it)" err.txt || fail "score said: $(cat err.txt)"
printf '{"id": "t", "text": "%s"}\n' "$P" > t.jsonl
"$INFER" score --rolling -m austen --quiet --threads 1 --input t.jsonl --output t.out
grep -q '"id":"t","logprob":-[0-9.]*,"n_tokens":[0-9]*}' t.out || fail "score --rolling: $(cat t.out)"
echo "score: pairs, ids, error lines, resume, rolling"
