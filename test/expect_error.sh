#!/usr/bin/env bash
# expect_error.sh REGEX COMMAND...: passes when COMMAND exits non-zero within 60 s (no rank hangs) and its
# output matches REGEX (the message names the problem).
regex="$1"; shift
out=$(timeout 60 "$@" 2>&1); rc=$?
echo "$out" | tail -5
if [ $rc -eq 124 ]; then echo "FAIL: timed out (a rank hung)"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAIL: exited 0"; exit 1; fi
if ! echo "$out" | grep -Eq -e "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "ok: exit $rc, message matches /$regex/"
