#!/usr/bin/env bash
# layering.sh — the trainer's floors, and no circle between two files.
#
#   bash test/docs/layering.sh SOURCE_ROOT   (CTest: layering, label unit)
#
# 1. The floors: the ops (layers/), the parallel mechanisms (parallel/), the memory accounting (recompute/) and
#    the data (data/) include nothing of the model (model/) or of the trainer (train/), so that each can be read,
#    built and tested without what stands on it. (The test hooks live in layers/ for this reason.)
# 2. No circle: two concepts (a file name without its extension: linear.cu and linear.h are "linear") never
#    include each other's headers both ways, and the include graph has no longer loop either (tsort finds them),
#    so that a reader who follows a call down never comes back to where she started. The circles that are known
#    and being removed are listed in KNOWN below, each with who removes it; a new one fails.
# The negative controls in test/docs/docs.cmake run it on planted trees: a floor that includes model/, a circle.
# Prints one line per problem; exit 1 when there is any.
set -u
root=${1:?usage: layering.sh SOURCE_ROOT}
cd "$root" || exit 2
# Pairs "a b" (sorted) that include each other today and are being taken apart elsewhere.
KNOWN="sequence_parallel tensor_parallel"
problems=0
files=$(find layers parallel recompute data model train tools bench -maxdepth 1 \
             \( -name '*.cu' -o -name '*.h' -o -name '*.cuh' \) 2>/dev/null | sort)
for f in $(grep -E '^(layers|parallel|recompute|data)/' <<< "$files"); do
    up=$(grep -nE '#include "[^"]*\b(model|train)/' "$f")
    [ -n "$up" ] && { echo "layering: $f includes a floor above it: $up"; problems=$((problems + 1)); }
done
edges=$(for f in $files; do
    a=$(basename "${f%.*}")
    grep -oE '^#include "[^"]+\.(h|cuh)"' "$f" | sed -E 's/#include "(.*\/)?([^/"]+)\.(h|cuh)"/\2/' |
        while read -r b; do [ "$a" != "$b" ] && echo "$a $b"; done
done | sort -u)
while read -r a b; do
    [ -z "$a" ] && continue
    [[ "$a" < "$b" ]] || continue
    grep -qxF "$b $a" <<< "$edges" || continue
    grep -qxF "$a $b" <<< "$KNOWN" && continue
    echo "layering: a circle: $a and $b include each other's headers"; problems=$((problems + 1))
done <<< "$edges"
# Longer loops, the known pairs' edges left out.
rest=$(while read -r a b; do
    [ -z "$a" ] && continue
    p=$(printf '%s\n%s\n' "$a" "$b" | sort | paste -sd' ')
    grep -qxF "$p" <<< "$KNOWN" || echo "$a $b"
done <<< "$edges")
loop=$(tsort <<< "$rest" 2>&1 >/dev/null | grep -v 'input contains a loop' | sed 's/^tsort: //' | paste -sd' ')
[ -n "$loop" ] && { echo "layering: a loop of includes through: $loop"; problems=$((problems + 1)); }
[ "$problems" -eq 0 ] || { echo "layering: $problems problem(s)"; exit 1; }
echo "layering: $(wc -l <<< "$files") files; layers/, parallel/, recompute/ and data/ include nothing of model/ or train/;" \
     "no circle but the $(wc -l <<< "$KNOWN") known ones"
