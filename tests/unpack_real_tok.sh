#!/bin/sh
# Unpack the real tokenizer corpus for test_realtok: copy SRC (tests/fixtures/real) to DST,
# FILE.xz decompressed to FILE (the large tokenizer.json files are committed compressed).
set -eu
SRC=$1 DST=$2
rm -rf "$DST" && mkdir -p "$DST"
cd "$SRC"
find . -type f | while read -r f; do
  mkdir -p "$DST/$(dirname "$f")"
  case $f in
    *.xz) xz -dc "$f" >"$DST/${f%.xz}" ;;
    *) cp "$f" "$DST/$f" ;;
  esac
done
