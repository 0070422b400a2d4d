#!/usr/bin/env bash
# fg-infer --backend cuda end to end under the emulated CUDA runtime (tests/cudaemu, through
# LD_LIBRARY_PATH): the shipped model's greedy continuation equals the CPU backend's with
# everything on the GPU, with the weights on the GPU and the KV cache in RAM attended by the
# CPU (--cpu-cache-compute), and with 4-bit weights streamed from RAM; and as a pipeline of two
# MPI ranks, each on its own (emulated) GPU, where the build has MPI; a --gpu-budget below the
# backend's scratch and a machine without a device get one line and a non-zero exit.
# Usage: tool_cuda_emu.sh CONVERT INFER ROOT WORK EMU_DIR [MPIRUN HAVE_MPI]. Skips (77) without
# the model.
set -euo pipefail
CONVERT=$1 INFER=$2 ROOT=$3 WORK=$4 EMU=$5 MPIRUN=${6:-} HAVE_MPI=${7:-OFF}
MODEL=$ROOT/models/austen-opt
[ -f "$MODEL/model.safetensors" ] || { echo "no shipped model"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$CONVERT" "$MODEL" -o austen --quiet
"$CONVERT" austen -o austen-q4 --compress-weight --quiet
P="It is a truth universally acknowledged"
fixed=(--gpu-batch-size 1 --num-gpu-batches 1) # a fixed policy: no device measurement at start
gen() { # store backend flags...: the continuation, on stdout
  local store=$1 backend=$2; shift 2
  LD_LIBRARY_PATH=$EMU "$INFER" -m "$store" -p "$P" --max-new-tokens 12 --quiet \
    --backend "$backend" "${fixed[@]}" "$@"
}
for store in austen austen-q4; do
  want=$(gen $store cpu)
  [ -n "$want" ] || { echo "$store: the CPU backend printed nothing"; exit 1; }
  while read -r label flags; do
    # shellcheck disable=SC2086
    got=$(gen $store cuda $flags)
    [ "$got" = "$want" ] || { printf '%s, %s: cuda gave\n%s\ncpu gave\n%s\n' "$store" "$label" \
                              "$got" "$want"; exit 1; }
    echo "$store, $label: same as the CPU"
  done <<'CASES'
all-on-GPU --percent 100 0 100 0 100 0
cache-in-RAM,CPU-attention --percent 100 0 0 100 100 0 --cpu-cache-compute
weights-in-RAM --percent 0 100 100 0 100 0
CASES
done
# weights homed in RAM: the backend uploads the pager's views itself, and each upload must stay
# inside one pinned run of the HOST pool (pinned granule by granule): a copy across a run's
# end is staged by the driver, synchronously, and the upload no longer overlaps compute
stats=$(FGEMU_STATS=1 LD_LIBRARY_PATH=$EMU "$INFER" -m austen -p "$P" --max-new-tokens 12 --quiet \
        --backend cuda "${fixed[@]}" --percent 0 100 100 0 100 0 --ram-budget 2G 2>&1 >/dev/null |
        grep 'fgemu: pinned host memory')
[[ "$stats" == *", 0 of them across a pinned range's end"* ]] ||
  { echo "weights-in-RAM uploads crossed a pinned range's end: $stats"; exit 1; }
echo "weights-in-RAM uploads: none across a pinned range ($stats)"
if [ "$HAVE_MPI" = ON ] && [ -n "$MPIRUN" ] && [ -x "$MPIRUN" ]; then
  MPI=("$MPIRUN" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -np 2)
  [ "$(id -u)" -ne 0 ] || MPI+=(--allow-run-as-root)
  want=$(gen austen cpu)
  got=$(LD_LIBRARY_PATH=$EMU "${MPI[@]}" "$INFER" -m austen -p "$P" --max-new-tokens 12 --quiet \
        --backend cuda "${fixed[@]}" --percent 100 0 100 0 100 0)
  [ "$got" = "$want" ] || { printf 'two ranks on cuda gave\n%s\ncpu gave\n%s\n' "$got" "$want"; exit 1; }
  echo "austen, two MPI ranks on cuda: same as the CPU"
fi
expect_fail() { # label pattern cmd...: a non-zero exit and one line matching pattern
  local label=$1 pat=$2; shift 2
  local out rc=0
  out=$("$@" 2>&1 >/dev/null) || rc=$?
  [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -q -- "$pat" <<< "$out" ||
    { echo "$label: exit $rc, said: $out"; exit 1; }
  echo "$label: refused ($out)"
}
expect_fail "budget below the scratch" "--gpu-budget 2.0 MiB" env LD_LIBRARY_PATH="$EMU" \
  "$INFER" -m austen -p "$P" --backend cuda --gpu-budget 2M "${fixed[@]}" --percent 100 0 100 0 100 0
expect_fail "no device" "no GPU 0 visible" env FGEMU_DEVICES=0 LD_LIBRARY_PATH="$EMU" \
  "$INFER" -m austen -p "$P" --backend cuda
echo "fg-infer --backend cuda under the emulated runtime ok"
