#!/bin/sh
# The fixture tree the tests read, built from the committed one (tests/fixtures/fixture_links.py
# explains the layout): SRC copied to DST, then every line "<path> <source path>" of
# SRC/links.txt made a copy of its source, so DST holds each checkpoint directory whole, as the
# fixture scripts wrote it (a -hf5 variant: its own config.json + its -bf16 base's weights;
# every family: its tokenizer files from <top>/tokenizers/<kind>/, which DST then drops, as it
# drops links.txt and the scripts). Built in DST.tmp and renamed: a half-built tree is never read.
# usage: fixtures_assemble.sh SRC DST [STAMP]   (STAMP touched when done)
set -eu
SRC=$1 DST=$2
rm -rf "$DST.tmp" && mkdir -p "$DST.tmp"
cp -R "$SRC/." "$DST.tmp/"
grep -v '^#' "$SRC/links.txt" | while read -r dst src; do
  [ -f "$DST.tmp/$src" ] || { echo "fixtures_assemble: $SRC/links.txt: $src (for $dst) missing" >&2; exit 1; }
  mkdir -p "$DST.tmp/$(dirname "$dst")" && cp "$DST.tmp/$src" "$DST.tmp/$dst"
done
find "$DST.tmp" -depth \( -name '*.py' -o -name '*.pyc' -o -name __pycache__ -o -name links.txt \
     -o \( -type d -name tokenizers \) \) -exec rm -rf {} +
rm -rf "$DST" && mv "$DST.tmp" "$DST"
if [ $# -ge 3 ]; then touch "$3"; fi
