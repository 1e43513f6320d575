#!/usr/bin/env bash
# expect_error.sh [--gpu] REGEX COMMAND...: passes when COMMAND exits non-zero within 60 s (no rank hangs) and its
# output matches REGEX (the message names the problem).
# With --gpu first: a GPU test, skipped (exit 77) when no GPU is visible.
if [ "$1" = "--gpu" ]; then
  shift
  nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU visible: skipped"; exit 77; }
fi
regex="$1"; shift
out=$(timeout 60 "$@" 2>&1); rc=$?
echo "$out" | tail -5
if [ $rc -eq 124 ]; then echo "FAIL: timed out (a rank hung)"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAIL: exited 0"; exit 1; fi
if ! echo "$out" | grep -Eq -e "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "ok: exit $rc, message matches /$regex/"
