#!/usr/bin/env bash
# check_dry_run.sh BUILD_DIR OUTDIR: bench/gpu_suite.sh --dry-run lists every CTest test labelled gpu (the
# list `ctest -N -L gpu` gives for BUILD_DIR), and nothing else as a gpu test, and gives every part of the
# suite a time budget. Runs anywhere (the dry run needs no GPU).
set -euo pipefail
build="$1"; out="$2"
here=$(cd "$(dirname "$0")" && pwd)
want=$(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p' | sort)
plan=$(bash "$here/gpu_suite.sh" --dry-run "$out")
listed=$(echo "$plan" | sed -n 's/^  gpu test \([^:]*\):.*/\1/p' | sort)
[ -n "$want" ] || { echo "FAIL: ctest -N -L gpu lists no test in $build"; exit 1; }
missing=$(comm -23 <(echo "$want") <(echo "$listed"))
extra=$(comm -13 <(echo "$want") <(echo "$listed"))
status=0
[ -z "$missing" ] || { echo "FAIL: gpu tests the dry run does not list: $(echo $missing)"; status=1; }
[ -z "$extra" ] || { echo "FAIL: the dry run lists gpu tests CTest does not have: $(echo $extra)"; status=1; }
for part in "tests (budget" "bench (budget [0-9]* s): layer_bench --device cuda --dtype bf16 --hidden 6144" \
            "bench (budget [0-9]* s): layer_bench --device cuda --dtype bf16 --hidden 1600" \
            "bench (budget [0-9]* s): e2e_bench --device cuda --dtype bf16 --layers 48" \
            "bench (budget [0-9]* s): e2e_bench --device cuda --dtype bf16 --layers 6" \
            "bench (budget [0-9]* s): attention_bench --device cuda --dtype bf16 .*--seq 1024,2048,4096,8192" \
            "bench (budget [0-9]* s): e2e_bench .*--policies selective --attention flash"; do
  grep -q -- "$part" <<<"$plan" || { echo "FAIL: the dry run has no line matching '$part'"; status=1; }
done
[ $status = 0 ] && echo "dry run lists all $(echo "$want" | wc -l) gpu tests of ctest -N -L gpu, and every part's budget"
exit $status
