#!/bin/sh
# floors.sh - the floors are one-way (issue 39): every #include "..." in a library folder names a
# header of its own folder or of a floor below (cmake/floors.txt, the one list of floors), never a
# sibling's or a higher floor's, and never another folder's private header (*_int.h). Headers
# found in no library folder (system, generated) are not judged.
#
# Usage: floors.sh SOURCE_DIR   prints one line per include that climbs, exits 1 if any.
#        ctest runs it (test `floors`) after a self-test: a made-up tree with one upward, one
#        sibling and one private include must fail with three lines, the same tree without them
#        must pass, so the check cannot pass by reading nothing.
set -eu

# check ROOT FLOORS_FILE: the violations in ROOT, one a line; returns 1 if any
check() {
    awk -v root="$1" '
    FNR == NR {                       # floors.txt: rank 0 is the top floor
        if ($0 ~ /^[ \t]*(#|$)/) next
        for (i = 1; i <= NF; i++) { rank[$i] = n; order[++nf] = $i }
        n++; next
    }
    END {
        bad = 0
        for (i = 1; i <= nf; i++) {   # every header of a library folder -> its folder
            d = order[i]
            cmd = "cd \"" root "\" && ls " d "/*.h 2>/dev/null"
            while ((cmd | getline f) > 0) {
                b = f; sub(/.*\//, "", b)
                if (b in home && home[b] != d) {
                    print "floors: header " b " is in both " home[b] "/ and " d "/"; bad++
                }
                home[b] = d
            }
            close(cmd)
        }
        for (i = 1; i <= nf; i++) {
            d = order[i]
            cmd = "cd \"" root "\" && ls " d "/*.c " d "/*.h " d "/*.cu " d "/*.cpp 2>/dev/null"
            while ((cmd | getline f) > 0) {
                ln = 0
                while ((getline line < (root "/" f)) > 0) {
                    ln++
                    if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
                    h = line; sub(/^[^"]*"/, "", h); sub(/".*/, "", h); sub(/.*\//, "", h)
                    if (!(h in home) || home[h] == d) continue
                    hd = home[h]
                    if (rank[hd] < rank[d])
                        why = "climbs from floor " d "/ to " hd "/"
                    else if (rank[hd] == rank[d])
                        why = "crosses to sibling " hd "/ on the same floor"
                    else if (h ~ /_int\.h$/)
                        why = "is private to " hd "/"
                    else continue
                    print f ":" ln ": includes " h " (" hd "/): " why; bad++
                }
                close(root "/" f)
            }
            close(cmd)
        }
        exit bad ? 1 : 0
    }' "$2" /dev/null
}

selftest() {
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    mkdir -p "$t/runner" "$t/engine" "$t/convert" "$t/core" "$t/model"
    echo '#include "core.h"' > "$t/runner/runner.h"
    echo '#include "model_int.h"' > "$t/model/model_int.h"
    : > "$t/core/core.h"
    : > "$t/convert/convert.h"
    printf '#include "core.h"\n#include "engine.h"\n#include <stdio.h>\n' > "$t/engine/engine.c"
    : > "$t/engine/engine.h"
    cp "$t/engine/engine.c" "$t/engine/ok.c"
    check "$t" "$1" > /dev/null || { echo "floors: self-test: a clean tree fails"; return 1; }
    printf '#include "runner.h"\n  #  include "convert.h"\n#include "sub/model_int.h"\n' \
        >> "$t/engine/engine.c"
    n=$(check "$t" "$1" | grep -c "^engine/engine.c:[456]: ") || true
    [ "$n" = 3 ] || { echo "floors: self-test: found $n of 3 planted includes"; return 1; }
    rm -rf "$t"
    trap - EXIT
}

root=${1:?usage: floors.sh SOURCE_DIR}
floors="$root/cmake/floors.txt"
selftest "$floors"
check "$root" "$floors"
