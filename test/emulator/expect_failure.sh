#!/usr/bin/env bash
# expect_failure.sh SECONDS REGEX COMMAND...: a negative control of the emulated device. Passes only when
# COMMAND exits non-zero within SECONDS and its output (stdout and stderr) has a line matching REGEX, the
# reason it had to fail. A command that succeeds, hangs, or fails for another reason fails this test.
secs="$1"; regex="$2"; shift 2
out=$(timeout "$secs" "$@" 2>&1); rc=$?
printf '%s\n' "$out" | grep -E -e "$regex" | head -3
if [ $rc -eq 124 ]; then printf '%s\n' "$out" | tail -5; echo "FAIL: timed out after $secs s"; exit 1; fi
if [ $rc -eq 0 ]; then printf '%s\n' "$out" | tail -5; echo "FAIL: exited 0, the negative control did not fail"; exit 1; fi
if ! grep -Eq -e "$regex" <<< "$out"; then
  printf '%s\n' "$out" | tail -10
  echo "FAIL: exit $rc, but the output does not match /$regex/"
  exit 1
fi
echo "ok: exit $rc, and the output matches /$regex/"
