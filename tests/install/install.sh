#!/usr/bin/env bash
# The installed package as another project uses it (ctest install_package):
#  1. cmake --install the build tree into a temporary prefix; the layout is complete (the five
#     tools in bin/, each answering --version) and the
#     public headers compile alone (C, and C++ when a C++ compiler is given), include only one
#     another and no private *_int.h; a C++ program links fg_ functions (extern "C") from
#     libfg.so and from libfg.a;
#  2. out of tree, examples/matvec.c and examples/generate.c are built with pkg-config (shared,
#     and --static against libfg.a) and with find_package(fg) (fg::fg and fg::fg_static);
#  3. every matvec runs --check on a matrix 4x its HOST budget; every generate continues a
#     prompt on a store converted from the shipped model, and its greedy tokens must equal
#     fg-infer's for the same prompt.
# Usage: install.sh BUILD_DIR SOURCE_DIR WORK CONVERT INFER VERSION CC [CXX] (CFLAGS in the
# environment: extra compile and link flags, e.g. the sanitizers of the build).
# shellcheck disable=SC2046,SC2086  # flag lists ($FLAGS, pkg-config output) split on purpose
set -euo pipefail
BUILD=$1 ROOT=$2 WORK=$3 CONVERT=$4 INFER=$5 VERSION=$6 CC=$7 CXX=${8:-}
FLAGS=${CFLAGS:-}
P=$WORK/prefix
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
t0=$EPOCHREALTIME
step() { printf '%6.1f s  %s\n' "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "$*"; }
die() { echo "install_package: $*" >&2; exit 1; }

# ---- 1. install, layout, headers
cmake --install "$BUILD" --prefix "$P" > install.log || { cat install.log; die "cmake --install failed"; }
major=${VERSION%%.*}
for f in lib/libfg.so.$VERSION lib/libfg.so.$major lib/libfg.so lib/libfg.a lib/pkgconfig/fg.pc \
         lib/cmake/fg/fgConfig.cmake lib/cmake/fg/fgConfigVersion.cmake lib/cmake/fg/fgTargets.cmake; do
  [ -e "$P/$f" ] || die "$P/$f was not installed"
done
[ "$(readlink "$P/lib/libfg.so.$major")" = "libfg.so.$VERSION" ] || die "libfg.so.$major does not point at libfg.so.$VERSION"
headers=$(cd "$P/include/fg" && ls)
! grep -q '_int\.h$' <<<"$headers" || die "a private header was installed: $headers"
for h in $headers; do
  for inc in $(sed -nE 's/^#include "([^"]+)".*/\1/p' "$P/include/fg/$h"); do
    [ -f "$P/include/fg/$inc" ] || die "include/fg/$h includes \"$inc\", which is not installed"
  done
  echo "#include <fg/$h>" > one.c
  $CC -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$P/include" one.c || die "fg/$h does not compile alone as C"
  if [ -n "$CXX" ]; then
    $CXX -x c++ -Wall -Wextra -Werror -fsyntax-only -I"$P/include" one.c || die "fg/$h does not compile alone as C++"
  fi
done
step "installed $(wc -w <<<"$headers") headers in $P/include/fg; each compiles alone as C${CXX:+ and C++}"
for t in fg-convert fg-infer fg-inspect fg-sample fg-tokenize; do
  [ -x "$P/bin/$t" ] || die "$P/bin/$t was not installed"
  v=$("$P/bin/$t" --version) || die "$P/bin/$t --version failed"
  [[ "$v" == "$t $VERSION (git "*"features: CUDA "* ]] || die "$t --version printed '$v'"
done
step "installed the five tools in $P/bin; each prints its --version"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
[ "$(pkg-config --modversion fg)" = "$VERSION" ] || die "pkg-config --modversion fg: $(pkg-config --modversion fg)"
static_libs=$(pkg-config --libs --static fg | sed -E 's/-lfg( |$)/-l:libfg.a\1/')
if [ -n "$CXX" ]; then
  cat > cxx.cc <<'EOF'
#include <fg/engine.h>
#include <cstdio>
#include <stdexcept>
int main() {
    try { // C++ unwinding next to libfg.a's own (nvcc's host code in CUDA builds)
        throw std::runtime_error("thrown");
    } catch (const std::exception &x) {
        std::printf("%s\n", x.what());
    }
    fg_store *s = nullptr;
    fg_err err;
    int rc = fg_store_open("no-such-store", FG_STORE_RDONLY, nullptr, &s, &err);
    std::printf("%s: %s\n", fg_strerror(rc), err.msg);
    return rc == FG_OK;
}
EOF
  $CXX $FLAGS -o cxx cxx.cc -I"$P/include" -L"$P/lib" -lfg -Wl,-rpath,"$P/lib" || die "a C++ program does not link"
  ./cxx > /dev/null || die "the C++ program failed"
  $CXX $FLAGS -o cxx_static cxx.cc -I"$P/include" $static_libs || die "a C++ program does not link libfg.a"
  ./cxx_static > /dev/null || die "the C++ program linked with libfg.a failed"
  step "a C++ program links and runs against libfg.so and libfg.a"
fi

# ---- 2. builds out of tree
for ex in matvec generate; do
  $CC $FLAGS -o pc_$ex "$ROOT/examples/$ex.c" $(pkg-config --cflags --libs fg) -Wl,-rpath,"$P/lib" ||
    die "cc $ex.c \$(pkg-config --cflags --libs fg) failed"
  $CC $FLAGS -o pcs_$ex "$ROOT/examples/$ex.c" $(pkg-config --cflags --static fg) $static_libs ||
    die "cc $ex.c with pkg-config --static failed"
  dyn=$(readelf -d pc_$ex) # captured: `readelf | grep -q` can fail on SIGPIPE under pipefail
  grep -q 'NEEDED.*libfg\.so\.'"$major" <<< "$dyn" || die "pc_$ex does not load libfg.so.$major"
  dyn=$(readelf -d pcs_$ex)
  ! grep -q 'NEEDED.*libfg' <<< "$dyn" || die "pcs_$ex is not linked with libfg.a"
  # a static link needs no CUDA runtime library at run time (it links the static one)
  ! grep -q 'NEEDED.*libcudart' <<< "$dyn" || die "pcs_$ex needs libcudart.so at run time"
done
step "built with pkg-config: shared and --static"
cmake -S "$ROOT/tests/install/consumer" -B consumer -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DFG_VERSION="$VERSION" -DFG_EXAMPLES="$ROOT/examples" \
  > consumer.log 2>&1 || { cat consumer.log; die "configuring the find_package(fg) project failed"; }
grep -q "fg $VERSION from $P/lib/cmake/fg" consumer.log || { cat consumer.log; die "find_package(fg) did not find $P"; }
cmake --build consumer >> consumer.log 2>&1 || { cat consumer.log; die "building the find_package(fg) project failed"; }
dyn=$(readelf -d consumer/generate_static)
! grep -q 'NEEDED.*libfg' <<< "$dyn" || die "fg::fg_static linked libfg.so"
step "built with find_package(fg): fg::fg and fg::fg_static"

# ---- 3. run them
"$BUILD/fg_matvec" create m.fgt 1024 1000 64 > /dev/null
for m in pc_matvec pcs_matvec consumer/matvec consumer/matvec_static; do
  ./$m run m.fgt 1024 --check > $m.out 2>&1 || { cat $m.out; die "$m run --check failed"; }
done
step "matvec --check: 4 builds agree with the direct computation"
model=$ROOT/models/austen-opt
if [ -f "$model/model.safetensors" ]; then
  "$CONVERT" "$model" -o store --quiet
else # the shipped model is not in this tree: a synthetic one of the same engine
  "$CONVERT" synth --model opt-tiny -o store --tokenizer "$ROOT/data/gpt2-tokenizer" --seed 7 --quiet
  model=synthetic
fi
prompt="It is a truth universally acknowledged"
n=12
printf '{"id": "a", "prompt": "%s"}\n' "$prompt" > in.jsonl
"$INFER" -m store --input in.jsonl --output out.jsonl --max-new-tokens $n --quiet
want=$(sed -nE 's/.*"tokens": *\[([^]]*)\].*/\1/p' out.jsonl | tr -d ' ' | tr ',' ' ')
[ -n "$want" ] || die "no tokens from fg-infer: $(cat out.jsonl)"
for g in pc_generate pcs_generate consumer/generate consumer/generate_static; do
  ./$g store "$prompt" $n > $g.out 2>&1 || { cat $g.out; die "$g failed"; }
  got=$(sed -nE 's/^tokens: //p' $g.out)
  [ "$got" = "$want" ] || die "$g: tokens '$got', fg-infer: '$want'"
done
step "generate ($model): 4 builds, the same $(wc -w <<<"$want") greedy tokens as fg-infer: $want"
echo "install_package ok"
