#!/usr/bin/env bash
# The main job: install dependencies, build, convert the shipped model (models/austen-opt, a
# small OPT trained on five Austen novels) to an F16 store and a 4-bit store, then generate a
# continuation of "It is a truth universally acknowledged" with the weights served from disk
# under a RAM budget smaller than the weights, and print the throughput summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target fg-convert fg-infer fg-inspect >/dev/null
out=build/demo
rm -rf "$out" && mkdir -p "$out"
weights=$(stat -c %s models/austen-opt/model.safetensors)
echo "== converting models/austen-opt ($weights bytes of F16 weights)"
build/fg-convert models/austen-opt -o "$out/austen.store" --chunk-mib 1
build/fg-convert models/austen-opt -o "$out/austen-q4.store" --chunk-mib 1 --compress-weight
budget=$((weights * 9 / 10))
prompt="It is a truth universally acknowledged"
echo
echo "== F16 weights from disk, --ram-budget $budget bytes (90% of the weights)"
build/fg-infer -m "$out/austen.store" -p "$prompt" --max-new-tokens 60 --ram-budget "$budget" \
  --gpu-batch-size 1 --num-gpu-batches 1 --temperature 0.8 --top-p 0.95 --seed 1
echo
echo "== 4-bit weights, same budget"
build/fg-infer -m "$out/austen-q4.store" -p "$prompt" --max-new-tokens 60 --ram-budget "$budget" \
  --gpu-batch-size 1 --num-gpu-batches 1 --temperature 0.8 --top-p 0.95 --seed 1
