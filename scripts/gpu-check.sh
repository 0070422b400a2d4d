#!/usr/bin/env bash
# gpu-check.sh - the first thing to run wherever a GPU is at hand (one prepared script, under
# 8 minutes on one GPU): build with CUDA, run the GPU tests, the CUDA tests again under
# compute-sanitizer's memcheck, then a short benchmark printing each figure beside its ceiling
# measured in the same run:
#   - host -> device GB/s of the pager vs pinned cudaMemcpy;
#   - Linear TFLOP/s of the CUDA backend vs cuBLAS alone on the same shapes;
#   - tok/s of synthetic opt-6.7b and a Llama-3-8B shape under --gpu-budget 16G, prompt 512,
#     generation 32, the block and placement --policy auto picks (the device measured at
#     start, its line printed with the prediction), beside FlexGen's T4 (16 GB) opt-6.7b figure,
#     and opt-6.7b again with attention over a cache in RAM placed the other way (GPU or CPU);
#   - opt-30b in 4-bit when the disk has room and the time allows;
#   each run's bound (the compute-and-link bound of its plan at the measured rates) and the
#   share of it achieved, and the GPU's device profiles (f16, q4) kept in $OUT;
#   opt-6.7b's auto run is traced (--trace: WORKDIR/trace-opt-6.7b.json, copied to $OUT when
#   set) for where its prefill's time goes.
# Put its whole output in the closing note of the work it checks.
# The GPU machines lent here are bare and offline (CUDA, a compiler, CMake; no LMDB, liburing,
# OpenBLAS, GLPK, Check ...): run scripts/gpu-deps.sh on this side first and carry .gpu-deps
# with the working tree; this script unpacks it into WORKDIR/deps and builds against it.
# usage: scripts/gpu-check.sh [WORKDIR]   (WORKDIR: build and synthetic stores; default
#        build-gpu under the source tree; GPU_CHECK_SKIP_MODELS=1 stops after the benchmark,
#        GPU_CHECK_NO_BUILD=1 reuses WORKDIR's build, GPU_CHECK_DEPS=FILE another bundle)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$ROOT/build-gpu}
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
say() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }
fail=0
# keep FILE: a log of WORKDIR for the one who reads the output (the device tool brings back what
# is under $OUT)
keep() { [ -n "${OUT:-}" ] && [ -d "$OUT" ] && cp "$WORK/$1" "$OUT/" 2>/dev/null; return 0; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version \
  --format=csv,noheader || say "nvidia-smi: not found"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
arch=${cap:-90}
say "build: CUDA architecture sm_$arch, $(nproc) cores"
mkdir -p "$WORK"
# The libraries from scripts/gpu-deps.sh, unpacked under WORKDIR (never into /): pkg-config
# reads only their .pc files, with their paths under the unpacked root (the sysroot), and the
# programs find the shared objects there at run time.
DEPS=${GPU_CHECK_DEPS:-$ROOT/.gpu-deps/fg-deps.tar.xz}
cmake_deps=()
if [ -f "$DEPS" ]; then
  D=$WORK/deps
  ml=$D/usr/lib/x86_64-linux-gnu
  if [ "${GPU_CHECK_NO_BUILD:-0}" != 1 ]; then
    rm -rf "$D" && mkdir -p "$D" && tar -C "$D" -xJf "$DEPS" || { say "cannot unpack $DEPS"; exit 1; }
  fi
  export PATH=$D/usr/bin:$PATH PKG_CONFIG_SYSROOT_DIR=$D
  export PKG_CONFIG_LIBDIR=$ml/pkgconfig:$D/usr/share/pkgconfig
  export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export LD_LIBRARY_PATH=$ml:$ml/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cmake_deps=(-DCMAKE_PREFIX_PATH="$D/usr" -DPKG_CONFIG_EXECUTABLE="$D/usr/bin/pkg-config")
  say "libraries: $(wc -l < "$(dirname "$DEPS")/packages.txt" 2>/dev/null || echo some) packages from $DEPS"
else
  say "libraries: the system's ($DEPS not found: on a bare machine run scripts/gpu-deps.sh first, here)"
fi
gen=()
[ -f "$WORK/CMakeCache.txt" ] || ! command -v ninja >/dev/null || gen=(-G Ninja)
if [ "${GPU_CHECK_NO_BUILD:-0}" != 1 ]; then # a rerun after a fix can skip nothing else
  command -v cc >/dev/null || command -v gcc >/dev/null || { say "no C compiler on this machine"; exit 1; }
  cmake -S "$ROOT" -B "$WORK" "${gen[@]}" "${cmake_deps[@]}" -DFG_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" > "$WORK/configure.log" 2>&1 ||
    { tail -20 "$WORK/configure.log"; keep configure.log; exit 1; }
  cmake --build "$WORK" -j "$(nproc)" --target test_ops test_ops_attn test_backend_cuda test_infer_cuda \
    test_quant_cuda test_backend_sim test_pager bench_gpu fg-infer fg-convert > "$WORK/build.log" 2>&1 ||
    { grep -E "error" "$WORK/build.log" | head -30; keep build.log; exit 1; }
  say "built"
fi

say "GPU tests (a skip here means the GPU was not seen: a failure)"
out=$(cd "$WORK" && timeout 300 ctest -R "^(test_ops|test_ops_attn|test_backend_cuda|test_infer_cuda|test_quant_cuda|test_backend_sim|test_pager)$" \
  --output-on-failure 2>&1)
echo "$out" > "$WORK/tests.log"
echo "$out" | grep -E "Test +#|tests passed|FAILED|Failed|F:|E:|nmse" | head -60
echo "$out" | grep -q "Skipped\|Not Run\|Failed\|FAILED" && { fail=1; keep tests.log; }

# The kernels under compute-sanitizer's memcheck (out-of-bounds and misaligned accesses, bad
# frees; no leak check: the stream-ordered pool keeps its memory by design): the CUDA tests
# unforked, so the tool sees their kernels.
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
      /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if echo "$out" | grep -q "Skipped"; then
  say "memcheck: skipped (the GPU tests did not see a GPU)"
elif [ -n "$san" ] && [ -x "$san" ]; then
  for t in test_backend_cuda test_quant_cuda; do
    (cd "$WORK" && CK_FORK=no timeout 120 "$san" --tool memcheck --error-exitcode 9 \
      --print-limit 20 "tests/$t" > "$WORK/memcheck-$t.log" 2>&1)
    r=$?
    say "memcheck $t: $(grep -E "ERROR SUMMARY|LEAK SUMMARY" "$WORK/memcheck-$t.log" | tr '\n' ' ')(exit $r)"
    [ $r = 0 ] || { fail=1; grep -E "=========" "$WORK/memcheck-$t.log" | head -20; keep "memcheck-$t.log"; }
  done
else
  say "compute-sanitizer: not found (memcheck skipped)"
fi

say "benchmark"
timeout 120 "$WORK/bench/bench_gpu"
rc=$?
[ $rc = 77 ] && { say "no GPU visible: stopping (nothing below can run)"; exit 1; }
[ $rc = 0 ] || fail=1

# the GPU's device profiles (f16 and q4 weights), kept in $OUT: with them `--backend sim
# --device-profile FILE --dry-run` plans and prices runs for this GPU on a machine without one
for w in f16 q4; do
  cw=(); [ $w = q4 ] && cw=(--compress-weight)
  timeout 60 "$WORK/fg-infer" calibrate --backend cuda --device-profile "$WORK/profile-$w.json" \
    "${cw[@]}" 2>&1 | sed 's/^/  /' && keep "profile-$w.json" || { say "device profile ($w): failed"; fail=1; }
done

# the pinned HOST pool is a ceiling too (pinned as used, cudaHostRegister): a 16 GiB RAM budget
# on the shipped model must not pin (and make resident) 16 GiB; base c9043ee did
if [ -f "$ROOT/models/austen-opt/model.safetensors" ]; then
  "$WORK/fg-convert" "$ROOT/models/austen-opt" -o "$WORK/austen" --quiet &&
  rss=$( { /usr/bin/time -f "%M" "$WORK/fg-infer" -m "$WORK/austen" --backend cuda \
           --ram-budget 16G --percent 0 100 100 0 100 0 --gpu-batch-size 1 --num-gpu-batches 1 \
           -p hi --max-new-tokens 4 --quiet > /dev/null; } 2>&1 | tail -1)
  say "pinned pool: fg-infer --backend cuda --ram-budget 16G on the shipped model: peak RSS ${rss:-?} KiB"
  [ -n "$rss" ] && [ "$rss" -lt 1048576 ] || fail=1
fi

if [ "${GPU_CHECK_SKIP_MODELS:-0}" != 1 ]; then
  STORES=$WORK/stores
  mkdir -p "$STORES"
  tok=$ROOT/data/gpt2-tokenizer
  run_model() { # label store extra-flags...: prints tok/s, prefill/decode split
    local label=$1 store=$2; shift 2
    local o
    # --max-block 32: a synthetic run is one block of the size auto picks, up to 256 sequences,
    # whose f32 KV cache (opt-6.7b: 146 GB at 544 positions) would go to a 64 GB disk
    o=$(timeout 150 "$WORK/fg-infer" -m "$store" --backend cuda --gpu-budget 16G --compute f16 \
        --prompt-len 512 --gen-len 32 --max-block 32 "$@" 2>&1 >/dev/null) || { say "$label: failed"; echo "$o" | tail -5; fail=1; last=; return; }
    last=$o
    echo "$o" | grep -E "summary:|block [0-9]|GPU:|link:|policy auto|device cuda|predicted|bound" |
      head -12 | sed "s/^ */  $label: /"
  }
  free_gb() { df -BG --output=avail "$STORES" | tail -1 | tr -dc 0-9; }
  for m in opt-6.7b llama-3-8b; do
    if [ "$(free_gb)" -lt 20 ] || [ "$(elapsed)" -gt 330 ]; then say "$m: skipped (disk $(free_gb)G free, $(elapsed)s elapsed)"; continue; fi
    [ -d "$STORES/$m" ] || timeout 120 "$WORK/fg-convert" synth --model "$m" -o "$STORES/$m" \
      --tokenizer "$tok" --quiet || { say "$m: synth failed"; fail=1; continue; }
    say "$m: $(du -sh "$STORES/$m" | cut -f1) of weights"
    # opt-6.7b's run traced (units' loads and computes, Chrome trace events): where its time goes
    trace=()
    [ "$m" = opt-6.7b ] && trace=(--trace "$WORK/trace-$m.json")
    run_model "$m" "$STORES/$m" "${trace[@]}"
    [ "$m" = opt-6.7b ] && keep "trace-$m.json"
    if [ "$m" = opt-6.7b ]; then
      echo "  (FlexGen on a T4 with 16 GB, opt-6.7b, prompt 512, gen 32: 25.26 tok/s)"
      # where attention over a cache in RAM runs, the other way than auto chose: the measured
      # figure beside the one the search predicted faster
      case $last in
        *"attention on the CPU"*) run_model "$m (attention on the GPU)" "$STORES/$m" --cpu-cache-compute=false ;;
        *"attention on the GPU"*) run_model "$m (attention on the CPU)" "$STORES/$m" --cpu-cache-compute ;;
      esac
    fi
    rm -rf "$STORES/$m" # the disk is needed for the next one
  done
  if [ "$(free_gb)" -ge 24 ] && [ "$(elapsed)" -lt 330 ]; then
    timeout 150 "$WORK/fg-convert" synth --model opt-30b -o "$STORES/opt-30b-q4" --tokenizer "$tok" \
      --compress-weight --quiet && run_model opt-30b-q4 "$STORES/opt-30b-q4" --compress-weight
    rm -rf "$STORES/opt-30b-q4"
  else
    say "opt-30b 4-bit: skipped (disk $(free_gb)G free, $(elapsed)s elapsed)"
  fi
fi
say "done: $([ $fail = 0 ] && echo OK || echo FAILURES above)"
exit $fail
