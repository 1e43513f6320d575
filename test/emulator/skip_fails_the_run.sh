#!/usr/bin/env bash
# skip_fails_the_run.sh BUILD TEST...: the negative control of "no silent skips" in the emulated build. Each TEST
# is run as make test-emulated runs it (its registration in BUILD's CTestTestfile.cmake, copied to a folder of
# its own so that this nested ctest does not write into the running one's logs), with the emulated GPU hidden
# (CUDA_VISIBLE_DEVICES empty): the test skips (exit 77), and ctest must count that as a failure: exit 8, the
# test listed as failed, and its output saying that it skipped for want of a GPU.
set -uo pipefail
build="$1"; shift
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
grep -v '^subdirs(' "$build/CTestTestfile.cmake" > "$dir/CTestTestfile.cmake"
for t in "$@"; do
  out=$(CUDA_VISIBLE_DEVICES= timeout 300 ctest --test-dir "$dir" -R "^$t\$" --output-on-failure 2>&1); rc=$?
  if [ $rc -ne 8 ] || ! grep -Eq "[0-9]+ - $t \(Failed\)" <<< "$out" ||
     ! grep -Eq "no CUDA GPU visible|no GPU visible: skipped" <<< "$out"; then
    echo "$out" | tail -15
    echo "FAIL: ctest exit $rc: $t skipping without a GPU must fail the emulated run (exit 8, listed as Failed)"
    exit 1
  fi
  grep -E "no CUDA GPU visible|no GPU visible: skipped|$t \(Failed\)" <<< "$out" | head -2
  echo "ok: $t skipped (exit 77) without a GPU, and the emulated run counts it as a failure (ctest exit 8)"
done
