#!/usr/bin/env bash
# gpu-deps.sh - pack the libraries fg builds against for a GPU machine that cannot fetch them.
#
# The device machines this project borrows for scripts/gpu-check.sh are bare and offline: CUDA,
# a compiler and CMake, but none of LMDB, liburing, xxHash, OpenBLAS, GLPK, Check, PCRE2,
# utf8proc, Jansson or pkg-config. Run this here (Debian 12, with apt-get's archive reachable):
# it downloads those packages (headers, pkg-config files and shared libraries, no docs or static
# archives) and packs them into .gpu-deps/fg-deps.tar.xz (git ignores .gpu-deps/), about 6 MB.
# Carry that folder with the working tree; gpu-check.sh unpacks it into its work directory and
# builds and runs against it (PKG_CONFIG_SYSROOT_DIR, CMAKE_PREFIX_PATH, LD_LIBRARY_PATH), so it
# never touches the machine's /.
# usage: scripts/gpu-deps.sh [OUTDIR]   (default: .gpu-deps under the source tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.gpu-deps}
PACKAGES=(
  pkgconf pkgconf-bin libpkgconf3
  liblmdb-dev liblmdb0 liburing-dev liburing2 libxxhash-dev libxxhash0
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  libglpk-dev libglpk40 libamd2 libcolamd2 libsuitesparseconfig5 libltdl7 libgmp10
  check libsubunit0 libsubunit-dev
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libutf8proc-dev libutf8proc2 libjansson-dev libjansson4
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/debs" "$tmp/root" "$OUT"
(cd "$tmp/debs" && apt-get download "${PACKAGES[@]}" >/dev/null 2>"$tmp/apt.log") ||
  { echo "gpu-deps: apt-get download failed:" >&2; tail -5 "$tmp/apt.log" >&2; exit 1; }
for d in "$tmp"/debs/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
# what a build needs: headers, .pc files, shared objects and their links, Check's static library
# (Debian ships no shared one); not docs, man pages, other static archives or the BLAS/LAPACK
# shims
rm -rf "$tmp/root/usr/share/doc" "$tmp/root/usr/share/man" "$tmp/root/usr/share/lintian" \
       "$tmp/root/usr/share/info"
find "$tmp/root" -name '*.a' ! -name 'libcheck*' -delete
rm -f "$tmp"/root/usr/lib/x86_64-linux-gnu/openblas-pthread/lib{blas,lapack}.so*
# Debian picks OpenBLAS through update-alternatives, which dpkg-deb -x does not run: the links
# the alternatives would make (the pkg-config file and the library in the multiarch directory)
ml=usr/lib/x86_64-linux-gnu
ln -sf ../openblas-pthread/pkgconfig/openblas.pc "$tmp/root/$ml/pkgconfig/openblas.pc"
ln -sf openblas-pthread/libopenblas.so.0 "$tmp/root/$ml/libopenblas.so.0"
ln -sf openblas-pthread/libopenblas.so "$tmp/root/$ml/libopenblas.so"
# pkgconf ships pkg-config as a link in newer packages; make sure one is there
[ -e "$tmp/root/usr/bin/pkg-config" ] || ln -s pkgconf "$tmp/root/usr/bin/pkg-config"
tar -C "$tmp/root" -cJf "$OUT/fg-deps.tar.xz" .
printf '%s\n' "${PACKAGES[@]}" > "$OUT/packages.txt"
(cd "$tmp/debs" && ls) > "$OUT/versions.txt"
echo "gpu-deps: $OUT/fg-deps.tar.xz ($(du -h "$OUT/fg-deps.tar.xz" | cut -f1), ${#PACKAGES[@]} packages);" \
     "carry .gpu-deps with the working tree to the GPU machine"
