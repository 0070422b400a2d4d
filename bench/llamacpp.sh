#!/usr/bin/env bash
# llama.cpp as a peer (issue 43): built from the llama-cpp-python sdist on PyPI, which vendors
# llama.cpp and its convert_hf_to_gguf.py, with GGML_NATIVE (the machine's own ISA), once per
# version into a cache; prints the directory holding llama-bench, llama-batched-bench and
# llama-quantize, and on a second line the vendored llama.cpp source (convert_hf_to_gguf.py,
# gguf-py/).
#
# The build is a unity build (CMAKE_UNITY_BUILD, 16 files a unit): llama.cpp's ~240 C++ files
# take well over an hour on this 2-core shared machine one by one; only the three tools are built
# (no server, tests or examples; no curl or OpenSSL: the benches read local files). ggml-cpu's
# files do not compile as one unit (x86/repack.cpp redefines a static of quants.c's), nor does
# common/json.cpp with its neighbours (ordered_json declared twice), so the extracted copy's
# ggml-cpu target gets UNITY_BUILD OFF and json.cpp SKIP_UNITY_BUILD_INCLUSION (a line added to
# each CMakeLists.txt).
#
# usage: bench/llamacpp.sh   (env LLAMACPP_PY: the llama-cpp-python version (0.3.36);
#        LLAMACPP_CACHE (~/.cache/fg-llamacpp); JOBS (2))
set -euo pipefail
VER=${LLAMACPP_PY:-0.3.36}
CACHE=${LLAMACPP_CACHE:-$HOME/.cache/fg-llamacpp}
SRC=$CACHE/llama_cpp_python-$VER/vendor/llama.cpp
BLD=$CACHE/build-$VER
mkdir -p "$CACHE"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  if [ ! -f "$CACHE/llama_cpp_python-$VER.tar.gz" ]; then
    echo "llamacpp: downloading the llama-cpp-python $VER sdist (PyPI)" >&2
    pip download --no-binary :all: --no-deps "llama-cpp-python==$VER" -d "$CACHE" >&2
  fi
  tar xzf "$CACHE/llama_cpp_python-$VER.tar.gz" -C "$CACHE"
fi
if ! grep -q 'UNITY_BUILD OFF' "$SRC/ggml/src/ggml-cpu/CMakeLists.txt"; then
  sed -i 's/^\( *\)ggml_add_backend_library(${GGML_CPU_NAME})$/&\n\1set_target_properties(${GGML_CPU_NAME} PROPERTIES UNITY_BUILD OFF)/' \
    "$SRC/ggml/src/ggml-cpu/CMakeLists.txt"
  grep -q 'UNITY_BUILD OFF' "$SRC/ggml/src/ggml-cpu/CMakeLists.txt" ||
    { echo "llamacpp: ggml-cpu's CMakeLists.txt is not as expected" >&2; exit 1; }
fi
if ! grep -q 'SKIP_UNITY_BUILD_INCLUSION' "$SRC/common/CMakeLists.txt"; then
  echo 'set_source_files_properties(json.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)' >> \
    "$SRC/common/CMakeLists.txt"
fi
if [ ! -x "$BLD/bin/llama-batched-bench" ] || [ ! -x "$BLD/bin/llama-bench" ] ||
   [ ! -x "$BLD/bin/llama-quantize" ]; then
  echo "llamacpp: building llama.cpp (llama-cpp-python $VER) into $BLD" >&2
  cmake -S "$SRC" -B "$BLD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >&2
  cmake --build "$BLD" -j "${JOBS:-2}" --target llama-bench llama-batched-bench llama-quantize >&2
fi
echo "$BLD/bin"
echo "$SRC"
