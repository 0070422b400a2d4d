#!/usr/bin/env bash
# The whole test suite: install dependencies, build with -Werror (CUDA code too when nvcc is
# present; GPU tests skip without a GPU), run every test, then build and run the suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer. Exit non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)

echo "== build (gcc, -Werror)"
cmake -S . -B build -DFG_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests"
(cd build && ctest --output-on-failure -j"$jobs")

echo "== build (ASan + UBSan)"
cmake -S . -B build-asan -DFG_WERROR=ON -DFG_SANITIZE=ON -DFG_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan + UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$jobs")
