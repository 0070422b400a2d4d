#!/usr/bin/env bash
# Install everything fg needs to build and test on Debian 12, from Debian's archive.
# Idempotent: packages already installed are skipped, so repeated runs are quick.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-14-dev   # compilers, libFuzzer runtime
  liblmdb-dev liburing-dev libxxhash-dev libopenblas-dev libglpk-dev check
  libpcre2-dev libutf8proc-dev libjansson-dev
  libmicrohttpd-dev                                           # serve/: fg-serve's HTTP
  fio xxd xz-utils                                            # bench/pager, tests (xz: the real tokenizer corpus)
  openmpi-bin libopenmpi-dev                                  # dist/: mpirun -np N fg-infer
  python3 python3-venv python3-pip                            # the test venv (below)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test suite's Python venv (.venv-test at the repository root): the packages of
# python/requirements-test.txt from PyPI, reinstalled only when that file changes. Tests find
# it through CMake's FG_TEST_PYTHON (the venv's python) and skip (77) when it is absent.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-test"
req="$root/python/requirements-test.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: making the test venv $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi
