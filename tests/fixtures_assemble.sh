#!/bin/sh
# The fixture tree the tests read, built from the committed one (tests/fixtures/fixture_links.py
# explains the layout): SRC copied to DST, then every line "<path> <source>" of SRC/links.txt
# carried out, so DST holds each checkpoint directory whole, byte for byte as the fixture
# scripts wrote it:
#   "<top>/ <top>/refs.txt"   the .ref text files, one section "== <name>.ref/<file>" each
#   "<dir>/ <dir>.tar.xz"     a per-tensor directory, unpacked
#   "<path> <path>.xz"        a file committed xz-compressed, decompressed
#   "<path> <source path>"    a copy of another file (a -hf5 variant's base weights, a shared
#                             tokenizer from <top>/tokenizers/<kind>/)
# in that order; then the sources of the first three forms, the tokenizers/ directories,
# links.txt and the scripts are dropped. Built in DST.tmp and renamed: a half-built tree is never
# read.
# usage: fixtures_assemble.sh SRC DST [STAMP]   (STAMP touched when done)
set -eu
SRC=$1 DST=$2 T=$2.tmp
links() { grep -v '^#' "$SRC/links.txt"; }
rm -rf "$T" && mkdir -p "$T"
cp -R "$SRC/." "$T/"
missing() { echo "fixtures_assemble: $SRC/links.txt: $1 (for $2) missing" >&2; exit 1; }
links | while read -r dst src; do
  case $dst in */) [ -f "$T/$src" ] || missing "$src" "$dst" ;; esac
  case $dst in
    */) mkdir -p "$T/$dst"
        case $src in
          *.tar.xz) tar -xJf "$T/$src" -C "$T/$dst" ;;
          *) awk -v d="$T/$dst" '/^== /{ if (f) close(f); f = d substr($0, 4); p = f
                sub(/\/[^\/]*$/, "", p); system("mkdir -p \"" p "\""); next }
                f { print > f }' "$T/$src" ;;
        esac ;;
  esac
done
links | while read -r dst src; do
  case $dst in */|*.xz) continue ;; esac
  case $src in *.xz) [ -f "$T/$src" ] || missing "$src" "$dst"
                     mkdir -p "$(dirname "$T/$dst")" && xz -dc "$T/$src" >"$T/$dst" ;; esac
done
links | while read -r dst src; do
  case $dst in */) continue ;; esac
  case $dst:$src in *.xz:*.xz) ;; *:*.xz) continue ;; esac
  [ -f "$T/$src" ] || missing "$src" "$dst"
  mkdir -p "$(dirname "$T/$dst")" && cp "$T/$src" "$T/$dst"
done
links | while read -r dst src; do
  case $dst:$src in */:*|*.xz:*.xz) ;; *:*.xz) rm -f "$T/$src" ;; esac
  case $dst in */) rm -f "$T/$src" ;; esac
done
# (a checkpoint's tokenization_*.py stays: fg reads the tiktoken split pattern from it)
find "$T" -depth \( \( -name '*.py' ! -name 'tokenization_*.py' \) -o -name '*.pyc' -o -name __pycache__ -o -name links.txt \
     -o \( -type d -name tokenizers \) \) -exec rm -rf {} +
rm -rf "$DST" && mv "$T" "$DST"
if [ $# -ge 3 ]; then touch "$3"; fi
