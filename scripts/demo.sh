#!/usr/bin/env bash
# The main job, for now: install dependencies, build, write a sample .fgt file and show it with
# fg-inspect (tensors, chunks, checksums verified). A later issue turns this into generation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target fg-sample fg-inspect >/dev/null
out=build/demo
mkdir -p "$out"
rm -f "$out/sample.fgt"
build/fg-sample "$out/sample.fgt"
build/fg-inspect --verify "$out/sample.fgt"
