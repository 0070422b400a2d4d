#!/usr/bin/env bash
# libfg exports only fg_ names (ctest install_symbols). Fails, listing them, when
#  - libfg.so has a global defined dynamic symbol (nm -D) not starting with fg_, or
#  - libfg.a has a global defined symbol (nm -g) not starting with fg_, or
#  - a function declared in a public header is missing from either library (hidden too much),
#  - the two libraries export different sets, or the soname is not libfg.so.MAJOR.
set -euo pipefail
SO=$1 AR=$2 INCLUDE=$3 SONAME=$4
fail=0
so_syms=$(nm -D --defined-only "$SO" | awk 'NF == 3 { print $3 }' | sort -u)
ar_syms=$(nm -g --defined-only "$AR" | awk 'NF == 3 { print $3 }' | sort -u)
for lib in so ar; do
  syms=${lib}_syms
  bad=$(grep -v '^fg_' <<<"${!syms}" || true)
  if [ -n "$bad" ]; then
    echo "$([ $lib = so ] && echo "$SO" || echo "$AR") exports $(wc -l <<<"$bad") symbols without the fg_ prefix:"
    echo "$bad" | sed 's/^/  /'
    fail=1
  fi
done
if ! diff <(echo "$so_syms") <(echo "$ar_syms") >/dev/null; then
  echo "libfg.so and libfg.a export different symbols:"
  diff <(echo "$so_syms") <(echo "$ar_syms") | grep '^[<>]' | sed 's/^/  /'
  fail=1
fi
# Every function the public headers declare (comments removed) must be exported.
declared=$(cat "$INCLUDE"/*.h | perl -0777 -pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' |
           grep -oE '\bfg_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$so_syms"))
if [ -n "$missing" ]; then
  echo "declared in $INCLUDE but not exported by libfg:"
  echo "$missing" | sed 's/^/  /'
  fail=1
fi
got=$(objdump -p "$SO" | awk '$1 == "SONAME" { print $2 }')
[ "$got" = "$SONAME" ] || { echo "soname of $SO: '$got', expected $SONAME"; fail=1; }
[ $fail -eq 0 ] || exit 1
echo "libfg.so and libfg.a: $(wc -l <<<"$so_syms") symbols, all fg_; the $(wc -l <<<"$declared")" \
     "functions of the public headers all exported; soname $got"
