#!/usr/bin/env bash
# expect_error.sh [--gpu] REGEX COMMAND...: passes when COMMAND exits non-zero within 60 s (no rank hangs) and its
# output matches REGEX (the message names the problem).
# With --gpu first: a GPU test, skipped (exit 77) when no GPU is visible.
# With --before-first-step first: the trainer must also refuse before it runs any step (no step line printed);
# the time it took is printed (never asserted: timings belong to benchmarks).
# With --exit N first (after --before-first-step when both): the exit status must be N (or one of "N|M"), and no
# rank may have been aborted (no MPI_ABORT box): a refusal found on every rank ends with every rank leaving on
# its own, after MPI_Finalize (MPI_Abort is for one rank's fault).
if [ "$1" = "--gpu" ]; then
  shift
  nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU visible: skipped"; exit 77; }
fi
before_first_step=0
if [ "$1" = "--before-first-step" ]; then before_first_step=1; shift; fi
want_exit=""
if [ "$1" = "--exit" ]; then want_exit="$2"; shift 2; fi
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
if [ -n "$want_exit" ]; then
  [[ "$rc" =~ ^($want_exit)$ ]] || { echo "FAIL: exit status $rc, expected $want_exit"; exit 1; }
  if echo "$out" | grep -q "MPI_ABORT was invoked"; then echo "FAIL: a rank was aborted (MPI_Abort) for a refusal every rank found"; exit 1; fi
fi
if ! echo "$out" | grep -Eq -e "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "ok: exit $rc, message matches /$regex/"
