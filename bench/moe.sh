#!/usr/bin/env bash
# A mixture of experts larger than its RAM budget (--experts, engine/policy.h), at block sizes
# of 1, 8 and 32 sequences (BLOCKS; one GPU batch of B sequences): in one run, fg-infer reading
# only the experts each step's tokens chose (routed, the default) against prefetching every
# expert with its layer (all, what the engine did before; MODES), and llama.cpp on the same
# weights with its experts left to mmap under the same RAM limit (issue 43). For each block size
# and mode, runs of 1 and 1 + N new tokens from the same synthetic prompt: seconds per decode
# step from the longer run's decode phase (fg-infer's summary) and the decode's tok/s (B tokens
# a step), bytes read from disk per decode step from the two runs' difference (N decode steps),
# beside the whole run's; and the union bound (issue 43): the summary's experts computed a
# decode step by a sparse layer (the union of the experts the block's B tokens chose) times one
# expert's bytes in every sparse layer (from fg-inspect), against which the bytes read a step
# are put as a ratio (the weights outside the experts are read too when the budget does not hold
# them, so the ratio says how close reading is to the routed experts alone).
# Tokens are sampled (temperature 1, a fixed seed: the same in both modes): greedy decoding of
# random weights repeats one token, whose steps would all choose the same experts.
#
# The store. With LLAMACPP=1 (the default; qwen1.5-moe-a2.7b only): bench/moe_gguf.py writes
# one random-weight GGUF of the model's shape in Q4_0 (its docstring: random codes and scales,
# F32 routers, GPT-2's tokenizer padded to the vocabulary; LAYERS cuts the 24 layers, the
# per-layer shapes kept), and fg-convert imports that file (`FILE.gguf --compress-weight
# --group-size 32 --group-axis 1`: the 2-D Q4_0 tensors become fg's 4-bit groups block for
# block, the same values; the stacked experts [60, rows, cols] go through F16 and are quantized
# again by fg's encoder, so fg's experts are close to, not bit-equal to, llama.cpp's; the F32
# routers and norms are stored F16), so both engines run the same routers and weights (routing
# can differ only where two experts' scores fall within F16's rounding). With LLAMACPP=0:
# `fg-convert synth --model MODEL --compress-weight --group-axis 1` (4-bit weights grouped along
# the input axis, what --compute int8, fg-infer's default, multiplies; random values: its
# routers are random too, so routing is not a trained model's), fg alone. Either is written to
# DIR once and reused. qwen1.5-moe-a2.7b (60 experts, top 4, a shared expert) is 8 GB in 4-bit,
# a few minutes to write here (each route); qwen3-30b-a3b (128, top 8) is about 17 GB.
#
# llama.cpp (bench/llamacpp.sh builds it): llama-batched-bench -npp PL -ntg N -npl B -kvu, one
# process per block size, its own timing of the generation phase (T_TG: N steps of B tokens,
# the prompt's prefill timed apart), the model mmapped (llama.cpp's default) so its experts are
# paged in from the file as the steps touch them. Why this tool: in its generation phase it
# feeds every sequence a fresh random token id (std::rand() % n_vocab) each step, not one fixed
# token, so the B sequences route to different experts, as fg's sampled sequences do (random
# ids, not samples: the routing's spread is alike, the tokens are not the same ones). It samples
# nothing, where fg samples at temperature 1 (a softmax over 151936 logits a token, small beside
# a step's expert reads). The KV cache is unified (-kvu) and sized to the run (-c), as fg's is;
# without -kvu llama.cpp pads every sequence's cache to 256 cells (1.5 GB at 32 sequences).
# Weight repacking is off (-nr): by default llama.cpp's CPU backend copies every Q4_0 tensor
# into an interleaved anonymous buffer at load (8 GB here, nothing left to mmap), which the
# limit OOM-kills (exit 137); with -nr every tensor stays in the mapping, paged in as used, and
# multiplies with ggml's plain Q4_0 dot kernels (the repacked GEMM computes faster, but these
# steps wait on the disk). llama.cpp maps the file with MAP_POPULATE, MADV_WILLNEED and
# POSIX_FADV_SEQUENTIAL (its default prefetch): the load reads the whole file through the
# limit (untimed), and a page fault reads around the faulting page by up to the file's
# readahead window (twice read_ahead_kb under FADV_SEQUENTIAL; this machine's disk says 8192
# KB; the kernel stops reading around after many misses), where one expert's matrix is 1.6 MB,
# so its faults may read neighbouring experts' bytes too: llama.cpp's own behaviour, left as it
# is (no llama.cpp flag narrows it but --numa's MADV_RANDOM, a 4 KB read a fault).
#
# The RAM limit: both engines run in a memory cgroup (v1: MEMLIMIT, default --ram-budget plus
# 512 MiB; a child of this shell's cgroup), which counts the page cache, so llama.cpp's mmapped
# experts are evicted from it under the limit as a machine of that size would evict them; fg
# reads with O_DIRECT into its --ram-budget pool, below the limit by the margin its activations,
# KV cache and code take. Before each run the cgroup is emptied (memory.force_empty: the page
# cache an earlier run left charged to it) and, before llama.cpp's, the GGUF's pages are dropped
# (posix_fadvise DONTNEED), so none is served from pages charged to another cgroup.
# Each line gives the cgroup's peak usage and failcnt (how often the limit was hit: llama.cpp's
# reclaim) and the 1-minute load average when the run ended. Without a writable memory cgroup
# (no cgroup v1 memory controller, not root) the runs go on unlimited and say so.
#
# Limits: wall times on a shared machine (compare the ratios within one block's lines, run back
# to back); llama.cpp's bytes read a step are not measured (page faults: the line gives the
# cgroup's count of major faults in the whole run, load and prefill included, not their bytes).
#
# usage: bench/moe.sh [MODEL] [BUDGET] [DIR]   (default qwen1.5-moe-a2.7b, 3G,
#        ${TMPDIR:-/tmp}/fg-bench-moe; env N (8 decode steps), PL (16), THREADS (2, both
#        engines), BIN, BLOCKS ("1 8 32"), MODES ("routed all"), LLAMACPP (1), LAYERS (24),
#        MEMLIMIT (BUDGET + 512M), GGUF_PYTHON (a Python with numpy: python3), LLAMACPP_BIN (the
#        directory bench/llamacpp.sh prints))
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
MODEL=${1:-qwen1.5-moe-a2.7b} BUDGET=${2:-3G} DIR=${3:-${TMPDIR:-/tmp}/fg-bench-moe}
N=${N:-8} PL=${PL:-16} THREADS=${THREADS:-2}
LLAMACPP=${LLAMACPP:-1} LAYERS=${LAYERS:-24}
mkdir -p "$DIR"
written() { # (a store: DIR/.complete; a file: FILE.complete)
  touch "$1/.complete" 2>/dev/null || touch "$1.complete"
  echo "moe: written in $(( $(date +%s) - t0 )) s"
}
if [ "$LLAMACPP" = 1 ]; then
  [ "$MODEL" = qwen1.5-moe-a2.7b ] ||
    { echo "moe: the llama.cpp column's GGUF writer knows qwen1.5-moe-a2.7b only" \
           "(LLAMACPP=0 for $MODEL)" >&2; exit 1; }
  if [ -n "${LLAMACPP_BIN:-}" ]; then
    LLBIN=$LLAMACPP_BIN LLSRC=
  else
    { read -r LLBIN; read -r LLSRC; } < <("$ROOT/bench/llamacpp.sh")
  fi
  GGUF=$DIR/$MODEL-L$LAYERS-q4_0.gguf STORE=$DIR/$MODEL-L$LAYERS-gguf-q4ax1
  if [ ! -e "$GGUF.complete" ]; then
    echo "moe: writing $GGUF (bench/moe_gguf.py --layers $LAYERS)"
    t0=$(date +%s)
    PYTHONPATH=${LLSRC:+$LLSRC/gguf-py:}${PYTHONPATH:-} "${GGUF_PYTHON:-python3}" \
      "$ROOT/bench/moe_gguf.py" "$GGUF" --layers "$LAYERS"
    written "$GGUF"
  fi
  if [ ! -e "$STORE/.complete" ]; then
    rm -rf "$STORE"
    echo "moe: importing $GGUF into $STORE (--compress-weight --group-size 32 --group-axis 1)"
    t0=$(date +%s)
    "$BIN/fg-convert" "$GGUF" -o "$STORE" --compress-weight --group-size 32 --group-axis 1 --quiet
    written "$STORE"
  fi
else
  STORE=$DIR/$MODEL-q4ax1
  if [ ! -e "$STORE/.complete" ]; then
    rm -rf "$STORE"
    echo "moe: writing $STORE (fg-convert synth --model $MODEL --compress-weight --group-axis 1)"
    t0=$(date +%s)
    "$BIN/fg-convert" synth --model "$MODEL" -o "$STORE" --tokenizer "$ROOT/data/gpt2-tokenizer" \
      --compress-weight --group-axis 1 --seed 1 --quiet
    written "$STORE"
  fi
fi
# The memory cgroup (v1) both engines run in: CG, empty when there is none to make; removed at
# exit, an engine still in it (the script interrupted) stopped first
uncg() {
  local p i
  for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  for i in 1 2 3 4 5 6 7 8 9 10; do [ -n "$(cat "$CG/cgroup.procs")" ] && sleep 0.5; done
  rmdir "$CG" 2>/dev/null || echo "moe: could not remove the cgroup $CG" >&2
}
LIMIT=${MEMLIMIT:-$(( $(numfmt --from=iec "$BUDGET") + 512 * 1024 * 1024 ))}
LIMIT=$(numfmt --from=iec "$LIMIT")
CG=/sys/fs/cgroup/memory$(sed -nE 's/^[0-9]+:memory:(.*)/\1/p' /proc/self/cgroup)/fgmoe.$$
if mkdir "$CG" 2>/dev/null && echo "$LIMIT" > "$CG/memory.limit_in_bytes"; then
  trap uncg EXIT
  trap 'exit 130' INT TERM # (the EXIT trap then runs: bash skips it when a signal kills it)
else
  rmdir "$CG" 2>/dev/null || true
  echo "moe: no memory cgroup to make ($CG): the runs are NOT under a RAM limit" \
       "(fg's --ram-budget aside)"
  CG=
fi
# runs its arguments in the cgroup, emptied first (the page cache an earlier run left charged
# to it reclaimed: memory.force_empty) and its peak usage and failcnt reset
limited() {
  if [ -z "$CG" ]; then "$@"; return; fi
  echo 0 > "$CG/memory.force_empty"
  echo 0 > "$CG/memory.max_usage_in_bytes"; echo 0 > "$CG/memory.failcnt"
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"
}
# "peak MB, failcnt, oom kills (since the cgroup was made), load" after the last limited run
cgline() {
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  if [ -z "$CG" ]; then echo "no cgroup, load $l"; return; fi
  echo "cgroup peak $(( $(cat "$CG/memory.max_usage_in_bytes") / 1000000 )) MB of" \
       "$(( LIMIT / 1000000 )), failcnt $(cat "$CG/memory.failcnt"), oom_kill" \
       "$(sed -nE 's/^oom_kill ([0-9]+)/\1/p' "$CG/memory.oom_control"), load $l"
}
BLOCKS=${BLOCKS:-"1 8 32"} MODES=${MODES:-"routed all"}
# one expert's bytes summed over the sparse layers (the experts' tensors hold all experts of a
# layer: their bytes over the expert count), and the expert count
read -r EXB NEXP < <("$BIN/fg-inspect" --json --no-chunks "$STORE" | "${PYTHON:-python3}" -c '
import json, sys
d = json.load(sys.stdin)
n = d["model"]["experts"]
print(sum(t["bytes"] for t in d["tensors"] if ".experts." in t["name"]) // n, n)')
echo "moe: $MODEL 4-bit, $(du -sb "$STORE" | cut -f1) bytes, --ram-budget $BUDGET, blocks" \
     "$BLOCKS, prompt $PL, $N decode steps, $THREADS threads; an expert in every sparse layer" \
     "$EXB bytes, $NEXP experts"
# one run of $1 new tokens, --experts $2, block $3: "seconds decode_seconds read_bytes experts"
one() {
  local log
  log=$(limited "$BIN/fg-infer" -m "$STORE" --prompt-len "$PL" --gen-len "$1" \
        --ram-budget "$BUDGET" \
        --gpu-batch-size "$3" --num-gpu-batches 1 --threads "$THREADS" --experts "$2" \
        --temperature 1 --seed 5 \
        2>&1 >/dev/null) || true # (the summary check below names the failure)
  local tot dec rd ex
  tot=$(echo "$log" | sed -nE 's/^summary: .* generated in ([0-9.]+) s .*/\1/p')
  dec=$(echo "$log" | sed -nE 's/^summary: .*, decode ([0-9.]+) s\).*/\1/p')
  rd=$(echo "$log" | sed -nE 's/.*read from disk [^(]*\(([0-9]+) bytes.*/\1/p')
  ex=$(echo "$log" | sed -nE 's/.*experts computed by a sparse layer, of [0-9]+: ([0-9.]+) a decode step.*/\1/p')
  [ -n "$tot" ] && [ -n "$dec" ] && [ -n "$rd" ] || { echo "moe: no summary: $log" >&2; exit 1; }
  echo "$tot $dec $rd ${ex:-0}"
}
# llama-batched-bench at block $1, the GGUF's pages dropped first: its T_TG (seconds, N steps)
# and the run's major page faults (the whole run's: load, prefill and decode)
llama() {
  local log ctx=$(( ($1 * (PL + N) / 256 + 1) * 256 )) mf0; mf0=$(majflt)
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$GGUF"
  log=$(limited "$LLBIN/llama-batched-bench" -m "$GGUF" -c "$ctx" -kvu -nr -npp "$PL" -ntg "$N" \
        -npl "$1" -t "$THREADS" 2>&1) ||
    { echo "moe: llama-batched-bench failed (exit $?; 137: killed, the cgroup's OOM?):" \
           "$(echo "$log" | tail -3)" >&2; exit 1; }
  local tg # (the table's row for this block: | PP | TG | B | N_KV | T_PP | S_PP | T_TG | ...)
  tg=$(echo "$log" | awk -F'|' -v b="$1" 'NF >= 10 && $4 + 0 == b && $8 + 0 > 0 { print $8 + 0 }')
  [ -n "$tg" ] ||
    { echo "moe: no llama-batched-bench table: $(echo "$log" | tail -5)" >&2; exit 1; }
  echo "$tg $(( $(majflt) - mf0 ))"
}
# the cgroup's major page faults so far (0 without one)
majflt() {
  [ -z "$CG" ] && echo 0 || sed -nE 's/^total_pgmajfault ([0-9]+)/\1/p' "$CG/memory.stat"
}
for b in $BLOCKS; do
  declare -A S=() B=()
  for mode in $MODES; do
    read -r _ _ r1 _ < <(one 1 "$mode" "$b")
    read -r t2 d2 r2 ex < <(one $((N + 1)) "$mode" "$b")
    cg=$(cgline)
    S[$mode]=$(awk -v d="$d2" -v n="$N" 'BEGIN { printf "%.3f", d / n }')
    B[$mode]=$(awk -v a="$r1" -v c="$r2" -v n="$N" 'BEGIN { printf "%.0f", (c - a) / n }')
    awk -v m="$mode" -v s="${S[$mode]}" -v by="${B[$mode]}" -v t="$t2" -v r="$r2" -v n="$N" \
        -v b="$b" -v ex="$ex" -v E="$EXB" -v X="$NEXP" -v cg="$cg" 'BEGIN {
      u = (m == "all" ? X : ex) * E
      printf "  block %2d --experts %-6s a decode step: %.3f s (%.2f tok/s), %.1f MB read; " \
             "experts a step %.1f of %d, union bound %.1f MB, read/union %.2f; the %d-step run: " \
             "%.2f s, %.2f GB read; %s\n", b, m, s, (s > 0 ? b / s : 0), by / 1e6, ex, X, u / 1e6,
             (u > 0 ? by / u : 0), n + 1, t, r / 1e9, cg }'
  done
  if [ "$LLAMACPP" = 1 ]; then
    read -r tg mf < <(llama "$b")
    awk -v b="$b" -v tg="$tg" -v n="$N" -v sr="${S[routed]:-0}" -v mf="$mf" -v cg="$(cgline)" '
    BEGIN {
      s = tg / n
      printf "  block %2d llama.cpp (mmap)  a decode step: %.3f s (%.2f tok/s); fg routed " \
             "against it: %.2fx the decode tok/s; major page faults in the run %d; %s\n",
             b, s, b / s, (sr > 0 ? s / sr : 0), mf, cg }'
  fi
  if [ -n "${S[routed]:-}" ] && [ -n "${S[all]:-}" ]; then
    awk -v b="$b" -v sr="${S[routed]}" -v sa="${S[all]}" -v br="${B[routed]}" -v ba="${B[all]}" 'BEGIN {
      fs = 0; fb = 0
      if (sr > 0) fs = sa / sr
      if (br > 0) fb = ba / br
      printf "  block %2d routed against all: decode %.2fx faster, %.2fx fewer bytes read a step\n",
             b, fs, fb }'
  fi
done
