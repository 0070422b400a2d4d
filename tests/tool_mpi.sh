#!/usr/bin/env bash
# fg-infer as a pipeline of MPI ranks on this machine (mpirun --oversubscribe), against one
# process on the same store and job:
#  1. the same tokens (greedy, and seeded sampling) for 2 and 3 ranks, with the default and
#     other micro-batch sizes, on OPT (synthetic: opt-tiny, and opt-125m whose 12 layers really
#     split) and the Llama-family fixtures (two mixtures of experts among them), whose fixture
#     prompt must also give transformers' greedy tokens; and on the simulated GPU (--backend sim) in two placements;
#  2. a model larger than each rank's --ram-budget runs, each rank's peak RSS within its budget
#     plus process overhead, and the ranks split the weights between them;
#  3. a rank that fails (FG_DIST_FAULT=R:fail, or a --ram-budget too small on one rank given
#     with mpirun's MPMD syntax), is killed (SIGKILL) or hangs (found by the watchdog: nothing
#     for --dist-timeout, then no answer when asked) ends every rank within a time limit, with
#     one line naming the rank and the cause.
# Skipped (exit 77) without mpirun or without MPI in the build.
# usage: tool_mpi.sh FG-CONVERT FG-INFER MPIRUN HAVE_MPI TOKENIZER LLAMA_FIXTURES WORKDIR
set -euo pipefail
CONVERT=$1 INFER=$2 MPIRUN=$3 HAVE_MPI=$4 TOK=$5 FIX=$6 WORK=$7
if [ "$HAVE_MPI" != "ON" ] || [ -z "$MPIRUN" ] || ! [ -x "$MPIRUN" ]; then
  echo "tool_mpi: no MPI in this build or no mpirun: skipped"
  exit 77
fi
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
fail() { echo "tool_mpi: $*" >&2; exit 1; }
MPI=("$MPIRUN" --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || MPI+=(--allow-run-as-root)
export ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0 # Open MPI's own allocations
key() { sed -E 's/"timing":\{[^}]*\}//' "$1" | sort; }

for i in $(seq 1 7); do # 7 prompts of 7 lengths: a block of 2 x 3 and one of a single sequence
  printf '{"id": "p%d", "prompt": "Prompt number %d says%s"}\n' "$i" "$i" \
    "$(printf ' more%.0s' $(seq 1 "$i"))"
done > in.jsonl

# same STORE NEW EXTRA...: one process, then 2 and 3 ranks (and micro-batches of 1 and 3)
same() {
  local store=$1 new=$2; shift 2
  local args=(-m "$store" --input in.jsonl --max-new-tokens "$new" --gpu-batch-size 2
              --num-gpu-batches 3 --threads 1 --quiet "$@")
  rm -f one.jsonl
  "$INFER" "${args[@]}" --output one.jsonl || fail "$store: one process failed"
  for run in "2" "3" "2 --micro-batch 1" "3 --micro-batch 3"; do
    read -r n extra <<< "$run"
    rm -f many.jsonl
    # shellcheck disable=SC2086
    timeout 300 "${MPI[@]}" -np "$n" "$INFER" "${args[@]}" $extra --dist-timeout 60 \
      --output many.jsonl || fail "$store: $n ranks $extra failed"
    diff <(key one.jsonl) <(key many.jsonl) > /dev/null ||
      fail "$store: $n ranks $extra differ from one process: $(diff <(key one.jsonl) <(key many.jsonl) | head -4)"
  done
  echo "$store $*: 2 and 3 ranks give one process's tokens"
}

# ---- 1. the same tokens
"$CONVERT" synth --model opt-tiny -o tiny --tokenizer "$TOK" --seed 7 --quiet
"$CONVERT" synth --model opt-125m -o m125 --tokenizer "$TOK" --seed 1 --quiet
same tiny 20
same tiny 20 --temperature 0.8 --seed 3
same m125 6
# on the simulated GPU: the rows a stage sends come down from device memory, those it receives
# go up (activations on the GPU with the cache in RAM and attention beside it; then the
# activations in RAM)
same tiny 20 --backend sim --gpu-budget 64M --percent 50 50 0 100 100 0 --cpu-cache-compute
same tiny 20 --backend sim --gpu-budget 64M --percent 100 0 100 0 0 100
# (qwen2-window-tiny: its window is on layer 1 only, so a stage that numbered its layers from
# its own first one would attend wrongly; the mixtures of experts: a follower's steps page the
# chosen experts by its own token counts)
for m in llama2-tiny-bf16:llama2-tiny llama3-tiny-bf16:llama3-tiny \
         mistral-tiny-bf16:mistral-tiny qwen2-tiny-bf16:qwen2-tiny \
         qwen2-window-tiny-bf16:qwen2-window-tiny mixtral-tiny-bf16:mixtral-tiny \
         qwen2-moe-tiny-bf16:qwen2-moe-tiny; do
  IFS=: read -r dir ref <<< "$m"
  "$CONVERT" "$FIX/$dir" -o "$dir.store" --quiet || fail "$dir: convert"
  same "$dir.store" 12
  text=$(sed -n 's/^prompt_text //p' "$FIX/$ref.ref/meta.txt")
  want=$(sed -n 's/^output: //p' "$FIX/$ref.ref/greedy.txt" | tr -s ' ' ',')
  printf '{"id": "p", "prompt": "%s", "max_new_tokens": 20}\n' "$text" > ref.jsonl
  rm -f out.jsonl
  timeout 300 "${MPI[@]}" -np 3 "$INFER" -m "$dir.store" --input ref.jsonl --output out.jsonl \
    --quiet --threads 1 || fail "$dir: 3 ranks on the fixture prompt"
  got=$(sed -n 's/.*"tokens": *\[\([0-9, ]*\)\].*/\1/p' out.jsonl | tr -d ' ')
  [ "$got" = "$want" ] || fail "$dir: 3 ranks gave $got, transformers $want"
done

# ---- 2. a model larger than each rank's budget
weights=$(du -sb m125 | cut -f1)
budget=$((128 * 1024 * 1024))
[ "$weights" -gt "$budget" ] || fail "weights $weights not above the budget"
A=(-m m125 --input in.jsonl --max-new-tokens 4 --gpu-batch-size 2 --num-gpu-batches 3
   --threads 1)
rm -f one.jsonl many.jsonl
"$INFER" "${A[@]}" --quiet --output one.jsonl
timeout 300 "${MPI[@]}" -np 2 "$INFER" "${A[@]}" --ram-budget 128M --output many.jsonl \
  2> log.txt || fail "2 ranks in 128 MiB each: $(cat log.txt)"
diff <(key one.jsonl) <(key many.jsonl) > /dev/null || fail "2 ranks in 128 MiB differ"
limit=$(( (128 + 96) * 1024 * 1024 ))
libs=$(ldd "$INFER" 2>/dev/null || true)
for r in 0 1; do
  if [ "$r" = 0 ]; then line=$(grep 'peak RSS' log.txt | grep -v 'rank 1:'); else
    line=$(grep "rank 1: layers" log.txt); fi
  rss=$(sed -nE 's/.*peak RSS [^(]*\(([0-9]+) bytes.*/\1/p' <<< "$line")
  [ -n "$rss" ] || fail "rank $r printed no peak RSS: $(cat log.txt)"
  [[ "$libs" == *libasan* ]] || [ "$rss" -le "$limit" ] || fail "rank $r: peak RSS $rss > $limit"
done
disk1=$(sed -nE 's/.*rank 1: layers.*read from disk [^(]*\(([0-9]+) bytes.*/\1/p' log.txt)
[ -n "$disk1" ] && [ "$disk1" -gt 0 ] || fail "rank 1 read nothing from disk: $(cat log.txt)"
echo "2 ranks, 128 MiB each, $weights bytes of weights: the same tokens; $(grep -o 'rank 1: layers [0-9-]*' log.txt)"

# ---- 3. failures: one line naming the rank, every rank ends
T=(-m tiny --input in.jsonl --max-new-tokens 20 --gpu-batch-size 2 --num-gpu-batches 3
   --threads 1 --quiet --output f.jsonl)
ends() { # WHAT PATTERN CMD...: fails (non-zero) within 60 s, PATTERN on exactly one line
  local what=$1 pat=$2; shift 2
  rm -f f.jsonl
  local t0=$SECONDS rc=0
  timeout 60 "$@" > /dev/null 2> err.txt || rc=$?
  [ "$rc" -ne 0 ] || fail "$what: exit 0"
  [ "$rc" -ne 124 ] || fail "$what: still running after 60 s: $(cat err.txt)"
  [ "$(grep -cE "$pat" err.txt)" -eq 1 ] || fail "$what: no one line /$pat/: $(cat err.txt)"
  echo "$what: ended in $((SECONDS - t0)) s: $(grep -E "$pat" err.txt)"
}
ends "rank 1 fails" '^fg-infer: rank 1: a fault injected' \
  env FG_DIST_FAULT=1:fail "${MPI[@]}" -x FG_DIST_FAULT -np 3 "$INFER" "${T[@]}"
ends "rank 2's budget is too small" '^fg-infer: rank 2: --ram-budget 1 MiB is too small' \
  "${MPI[@]}" -np 2 "$INFER" "${T[@]}" : -np 1 "$INFER" "${T[@]}" --ram-budget 1M
ends "rank 1 is killed" 'rank 1 .*signal 9' \
  env FG_DIST_FAULT=1:kill "${MPI[@]}" -x FG_DIST_FAULT -np 3 "$INFER" "${T[@]}"
ends "--prefix-cache under mpirun" '^fg-infer: --prefix-cache runs in one process' \
  "${MPI[@]}" -np 2 "$INFER" "${T[@]}" --prefix-cache pc
for r in 1 0; do
  ends "rank $r hangs" "^fg-infer: rank $(( (r + 1) % 3 )): rank $r is dead or stuck" \
    env FG_DIST_FAULT=$r:hang "${MPI[@]}" -x FG_DIST_FAULT -np 3 "$INFER" "${T[@]}" \
    --dist-timeout 3
done
