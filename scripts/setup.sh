#!/usr/bin/env bash
# Install everything fg needs to build and test on Debian 12, from Debian's archive.
# Idempotent: packages already installed are skipped, so repeated runs are quick.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-14-dev   # compilers, libFuzzer runtime
  liblmdb-dev liburing-dev libxxhash-dev libopenblas-dev libglpk-dev check
  libpcre2-dev libutf8proc-dev libjansson-dev
  fio xxd xz-utils                                            # bench/pager, tests (xz: the real tokenizer corpus)
  openmpi-bin libopenmpi-dev                                  # dist/: mpirun -np N fg-infer
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
