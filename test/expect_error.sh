#!/usr/bin/env bash
# expect_error.sh [--gpu] REGEX COMMAND...: passes when COMMAND exits non-zero within 60 s (no rank hangs) and its
# output matches REGEX (the message names the problem).
# With --gpu first: a GPU test, skipped (exit 77) when no GPU is visible.
# With --before-first-step first: the trainer must also refuse before it runs any step (no step line printed);
# the time it took is printed (never asserted: timings belong to benchmarks).
if [ "$1" = "--gpu" ]; then
  shift
  nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU visible: skipped"; exit 77; }
fi
before_first_step=0
if [ "$1" = "--before-first-step" ]; then before_first_step=1; shift; fi
regex="$1"; shift
t0=$(date +%s.%N)
out=$(timeout 60 "$@" 2>&1); rc=$?
t1=$(date +%s.%N)
echo "$out" | tail -5
if [ $rc -eq 124 ]; then echo "FAIL: timed out (a rank hung)"; exit 1; fi
if [ $before_first_step = 1 ]; then
  if echo "$out" | grep -Eq '^step +[0-9]+/'; then echo "FAIL: refused only after a training step ran"; exit 1; fi
  echo "refused before the first step, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s after the start"
fi
if [ $rc -eq 0 ]; then echo "FAIL: exited 0"; exit 1; fi
if ! echo "$out" | grep -Eq -e "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "ok: exit $rc, message matches /$regex/"
