#!/usr/bin/env bash
# expect_failure.sh SECONDS STATUS REGEX COMMAND...: a negative control of the emulated device. Passes only when
# COMMAND ends within SECONDS with exit status STATUS and its output (stdout and stderr) has a line matching
# REGEX, the reason it had to fail. STATUS is a number (1: a test's own check failed; 66: a ThreadSanitizer race
# report, the race mode's exit code; 8: ctest with failed tests) or a signal name (SIGABRT: the emulator stopped
# the program, its memcheck, synccheck and launch checks, and AddressSanitizer, all abort; the shell sees
# 128 + the signal's number). A command that succeeds, hangs, ends with another status, or fails for another
# reason fails this test. STATUS 0 is for a program that checks a failure itself and reports it (the emulated
# NCCL's deadlock and short receive): then it must exit 0 and print the reason.
secs="$1"; status="$2"; regex="$3"; shift 3
case "$status" in
  SIG*) want=$((128 + $(kill -l "${status#SIG}"))) || exit 2 ;;
  *[!0-9]*|"") echo "expect_failure.sh: STATUS must be a number or a signal name, not '$status'"; exit 2 ;;
  *) want=$status ;;
esac
out=$(timeout "$secs" "$@" 2>&1); rc=$?
printf '%s\n' "$out" | grep -E -e "$regex" | head -3
if [ $rc -eq 124 ]; then printf '%s\n' "$out" | tail -5; echo "FAIL: timed out after $secs s"; exit 1; fi
if [ $rc -eq 0 ] && [ "$want" -ne 0 ]; then printf '%s\n' "$out" | tail -5; echo "FAIL: exited 0, the negative control did not fail"; exit 1; fi
if [ $rc -ne "$want" ]; then
  printf '%s\n' "$out" | tail -10
  echo "FAIL: exit $rc, but the negative control must end with $status (exit $want)"
  exit 1
fi
if ! grep -Eq -e "$regex" <<< "$out"; then
  printf '%s\n' "$out" | tail -10
  echo "FAIL: exit $rc, but the output does not match /$regex/"
  exit 1
fi
echo "ok: exit $rc$([ "$status" = "$want" ] || echo " ($status)"), and the output matches /$regex/"
