#!/usr/bin/env bash
# issue 38 (2): a JSONL job of mixed lengths runs whatever the block and the placement.
# 200 prompts of 1 to 400 tokens with max_new_tokens from 1 to 200 on the synthetic opt-tiny
# (2,048 positions, greedy). The reference is the same job at a block of 1 sequence: every
# prompt alone. Each run below must answer every line (200 result lines, none an error) with
# tokens and prompt ids equal to the reference's.
# The grid: the full one (block sizes 1..64 x weights/KV cache/activations on RAM or disk x
# the simulated device) would be 64 x 9 runs of about 20 s each on 2 cores; this samples it
# deterministically: 8 runs (about 140 s on 2 idle cores) covering the block sizes 1, 12, 18,
# 23, 37 and 64 (the ends, sizes that are not powers of two, gbs x ngb shapes), six of the
# eight RAM/disk placements (all in RAM, all on disk, weights + KV cache on disk, weights +
# activations on disk, KV cache + activations on disk, the weights' RAM/disk split of the
# default), the simulated device, a regular file on stdin, and --max-context 450 below the
# job's longest prompt + largest generation (600), which packs the blocks and gives the lines
# over 450 their error lines (the others' tokens are the reference's: a prompt alone attends the
# same keys whatever the cache's size; a block-1 run at 450 of its own, which the check used to
# make, was the test's critical path under the sanitizers).
set -euo pipefail
CONVERT=$1 INFER=$2 TOK=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$CONVERT" synth --model opt-tiny -o tiny --tokenizer "$TOK" --seed 7 --quiet

# one word is one GPT-2 token here (the tokenizer adds no BOS): line i has 1 + (149 i mod 400)
# words and 1 + (53 i mod 200) new tokens; lines 1-4 pin the ends (400 and 1 words, 200 and 1)
awk 'BEGIN { split("the cat sat on a mat and then it ran to big red house with my dog", W, " ");
  for (i = 1; i <= 200; i++) {
    w = 1 + (i * 149) % 400; mn = 1 + (i * 53) % 200;
    if (i == 1) w = 400; if (i == 2) w = 1; if (i == 3) mn = 200; if (i == 4) mn = 1;
    s = ""; for (k = 0; k < w; k++) s = s (k ? " " : "") W[1 + (k * 7 + i) % 17];
    printf "{\"id\":\"p%d\",\"prompt\":\"%s\",\"max_new_tokens\":%d}\n", i, s, mn } }' > mixed.jsonl

BASE=(-m tiny --policy fixed --quiet --prompt-ids --max-new-tokens 32)
# id, tokens, prompt ids (or the error) of each line, sorted by id
key() { sed -E -e 's/^(\{"id":"[^"]*").*("tokens":\[[^]]*\]).*("prompt_tokens":[0-9]+).*("prompt_ids":\[[^]]*\]).*/\1 \2 \3 \4/' \
              -e 's/^(\{"id":"[^"]*").*("error":\{[^}]*\}).*/\1 \2/' "$1" | sort; }
check() { # name, results file, reference file, errors expected
  local n e
  n=$(wc -l < "$2"); e=$(grep -c '"error":{' "$2" || true)
  [ "$n" -eq 200 ] || { echo "$1: $n result lines of 200"; exit 1; }
  [ "$e" -eq "$4" ] || { echo "$1: $e error lines, expected $4"; grep '"error":{' "$2" | head -3; exit 1; }
  diff <(key "$3") <(key "$2") > diff.txt || { echo "$1: tokens differ from each prompt alone:"; head -4 diff.txt; exit 1; }
  echo "$1: 200 lines ($e errors), tokens equal each prompt alone"
}
t0=$SECONDS
"$INFER" "${BASE[@]}" --input mixed.jsonl --output ref.jsonl --gpu-batch-size 1 --num-gpu-batches 1
check "block 1 (reference)" ref.jsonl ref.jsonl 0
max=$(sed -nE 's/.*"prompt_tokens":([0-9]+).*/\1/p' ref.jsonl | sort -n | tail -1)
min=$(sed -nE 's/.*"prompt_tokens":([0-9]+).*/\1/p' ref.jsonl | sort -n | head -1)
[ "$max" -eq 400 ] && [ "$min" -eq 1 ] || { echo "prompts of $min..$max tokens, not 1..400"; exit 1; }
echo "reference: $((SECONDS - t0)) s"

# block (gbs ngb), placement (--percent: weights, KV cache, activations: 0 100 = RAM, 0 0 = disk)
run() { # name gbs ngb percent... [-- extra flags]
  local name=$1 gbs=$2 ngb=$3; shift 3
  local t=$SECONDS
  "$INFER" "${BASE[@]}" --input mixed.jsonl --output "$name.jsonl" --gpu-batch-size "$gbs" \
    --num-gpu-batches "$ngb" "$@"
  check "$name ($gbs x $ngb, $*; $((SECONDS - t)) s)" "$name.jsonl" ref.jsonl 0
}
run b64-ram     16 4 --percent 0 100 0 100 0 100
run b37-disk    37 1 --percent 0 0 0 0 0 0
run b12-wkvdisk  4 3 --percent 0 0 0 0 0 100
run b23-sim     23 1 --percent 0 100 0 100 0 100 --backend sim
# a regular file on standard input (issue 38 (3): it used to run 0 prompts and exit 0)
t=$SECONDS
"$INFER" "${BASE[@]}" --input - --output stdin.jsonl --gpu-batch-size 9 --num-gpu-batches 2 \
  --percent 0 0 0 100 0 0 < mixed.jsonl
check "b18-stdin (9 x 2, weights and activations on disk; $((SECONDS - t)) s)" stdin.jsonl ref.jsonl 0

# --max-context 450: lines over it get error lines naming their lengths; the rest, run in packed
# blocks, have the reference's tokens
"$INFER" "${BASE[@]}" --input mixed.jsonl --output b64-450.jsonl --gpu-batch-size 32 \
  --num-gpu-batches 2 --max-context 450 --percent 0 100 0 0 0 0
# id, prompt tokens (one a word), new tokens of every line over 450
awk -F'"max_new_tokens":' '{ split($1, a, "\"prompt\":\""); n = split(a[2], w, " ");
  split($1, b, "\""); if (n + $2 + 0 > 450) print b[4], n, $2 + 0 }' mixed.jsonl | sort > over.txt
over=$(wc -l < over.txt)
[ "$over" -gt 10 ] || { echo "only $over lines over 450"; exit 1; }
n=$(wc -l < b64-450.jsonl)
[ "$n" -eq 200 ] || { echo "--max-context 450: $n result lines of 200"; exit 1; }
sed -nE 's/^\{"id":"([^"]*)".*"error":\{"type":"context_length_exceeded","message":"([0-9]+) prompt tokens \+ ([0-9]+) new exceed the context of 450 \(--max-context\)"\}.*/\1 \2 \3/p' \
  b64-450.jsonl | sort > errors.txt
diff over.txt errors.txt > diff.txt ||
  { echo "--max-context 450: the error lines are not exactly the lines over 450 with their lengths:"; head -4 diff.txt; exit 1; }
grep -vF -f <(sed -E 's/^([^ ]*) .*/"id":"\1"/' over.txt) b64-450.jsonl > b64-450-ok.jsonl || true
grep -vF -f <(sed -E 's/^([^ ]*) .*/"id":"\1"/' over.txt) ref.jsonl > ref-450-ok.jsonl || true
[ "$(wc -l < b64-450-ok.jsonl)" -eq $((200 - over)) ] || { echo "--max-context 450: lines lost"; exit 1; }
diff <(key ref-450-ok.jsonl) <(key b64-450-ok.jsonl) > diff.txt ||
  { echo "--max-context 450: tokens differ from each prompt alone:"; head -4 diff.txt; exit 1; }
echo "block 64 packed in --max-context 450: $over error lines naming their lengths, $((200 - over)) lines with each prompt alone's tokens"
echo "all: $((SECONDS - t0)) s"
