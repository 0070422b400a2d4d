#!/usr/bin/env bash
# fg-convert synth throughput next to what the disk takes: in one run, on the same file system,
# (1) dd writing the same number of bytes with fdatasync, (2) fg-convert synth of the model.
# Prints both rates and their ratio (target >= 0.5). usage: bench/synth_vs_disk.sh [MODEL] [DIR]
set -euo pipefail
MODEL=${1:-opt-1.3b}
DIR=${2:-$(pwd)/bench-synth}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/build}
rm -rf "$DIR" && mkdir -p "$DIR"
"$BIN/fg-convert" synth --model "$MODEL" -o "$DIR/probe" --tokenizer "$ROOT/data/gpt2-tokenizer" --quiet
bytes=$(du -sb "$DIR/probe" | cut -f1)
rm -rf "$DIR/probe"
for rep in 1 2; do
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$DIR/dd.bin" bs=4M count=$((bytes / 4194304)) conv=fdatasync status=none
  t1=$(date +%s.%N)
  rm -f "$DIR/dd.bin"
  "$BIN/fg-convert" synth --model "$MODEL" -o "$DIR/s" --tokenizer "$ROOT/data/gpt2-tokenizer" --quiet
  t2=$(date +%s.%N)
  rm -rf "$DIR/s"
  awk -v b="$bytes" -v a="$t0" -v m="$t1" -v e="$t2" -v r="$rep" 'BEGIN {
    dd = b / (m - a) / 1e9; fg = b / (e - m) / 1e9;
    printf "rep %d: %s %.2f GB  dd+fdatasync %.2f GB/s  fg-convert synth %.2f GB/s  ratio %.2f\n",
           r, "'"$MODEL"'", b / 1e9, dd, fg, fg / dd }'
done
rm -rf "$DIR"
