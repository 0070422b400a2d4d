#!/usr/bin/env bash
# The README cannot go stale where a test can see it (ctest readme):
#  - "What is where": every path in its first column exists, and every top-level folder the
#    repository tracks is listed (a new folder without a row fails);
#  - every docs/ file and SPEC.md the README links exists, and every docs/*.md is linked;
#  - the README stays a front door: under 300 lines.
# Usage: readme.sh SOURCE_DIR
set -euo pipefail
cd "$1"
die() { echo "readme: $*" >&2; exit 1; }
lines=$(wc -l < README.md)
[ "$lines" -lt 300 ] || die "README.md has $lines lines (keep it under 300; topics go in docs/)"
table=$(awk '/^## What is where/ {on=1; next} on && /^## / {exit} on && /^\|/ {print}' README.md)
[ -n "$table" ] || die "README.md has no \"What is where\" table"
listed=$(sed -nE 's/^\| *([^|]*)\|.*/\1/p' <<<"$table" | grep -oE '`[^`]+`' | tr -d '`')
for p in $listed; do
  [ -e "$p" ] || die "\"What is where\" lists $p, which does not exist"
done
tracked=$(git ls-files 2>/dev/null | sed -nE 's|^([^/]+)/.*|\1|p' | sort -u | grep -v '^\.') ||
  tracked=$(find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' ! -name 'build*' -printf '%f\n')
for d in $tracked; do
  grep -qxF "$d/" <<<"$listed" || die "the folder $d/ is not in README.md's \"What is where\""
done
for f in $(grep -oE '\]\((docs/[^)]+|SPEC\.md)\)' README.md | sed -E 's/^\]\((.*)\)$/\1/' | sort -u); do
  [ -f "$f" ] || die "README.md links $f, which does not exist"
done
for f in docs/*.md; do
  grep -qF "]($f)" README.md || die "$f is not linked from README.md's \"Read more\""
done
echo "readme ok: $lines lines, $(wc -w <<<"$listed") paths listed, $(ls docs/*.md | wc -l) docs linked"
