#!/usr/bin/env bash
# trainer_cp_without_wait.sh MPIEXEC TEST_EQUIVALENCE: the negative control of ring attention's event wait, on
# the emulated GPU. test_equivalence at cp 2 over the emulated NCCL (ring attention's exchanges on the
# communication stream; no order-check headers, whose read-back would synchronize the host with every exchange
# and hide the missing wait), with the NCCL exchanges started EMU_NCCL_P2P_DELAY_MS late (a slow link):
#   1. as it is: the compute stream waits for each received K|V block, so it must pass;
#   2. with --skip-cp-ring-wait (TestHooks::skip_cp_ring_wait, parallel/context_parallel.cu): the blocks read a
#      receive buffer before the data lands, so it must fail with exit 1 (its checks failed, no crash), and say
#      why (a loss or gradient mismatch).
set -uo pipefail
mpirun="$1 --oversubscribe --bind-to none"; eq="$2"
args="--tp 1 --cp 2 --attention flash --seq 32 --device cuda --comm nccl --no-order-check --steps 1"
export EMU_NCCL_P2P_DELAY_MS=${EMU_NCCL_P2P_DELAY_MS:-300}
# shellcheck disable=SC2086
out=$(timeout 300 $mpirun -np 2 "$eq" $args 2>&1); rc=$?
echo "$out" | tail -3
[ $rc -eq 0 ] || { echo "FAIL: with the wait (and the slow link) the CP equivalence failed (exit $rc)"; exit 1; }
# shellcheck disable=SC2086
out=$(timeout 300 $mpirun -np 2 "$eq" $args --skip-cp-ring-wait 2>&1); rc=$?
echo "$out" | grep -E "differ|FAIL|emulated" | head -5
[ $rc -eq 124 ] && { echo "FAIL: timed out without the wait (a hang, not a wrong result)"; exit 1; }
[ $rc -ne 0 ] || { echo "FAIL: without the wait the CP equivalence still passed: the missing wait went unseen"; exit 1; }
[ $rc -eq 1 ] || { echo "FAIL: exit $rc without the wait: a failed check exits 1 (another status is a crash)"; echo "$out" | tail -15; exit 1; }
grep -Eq "loss differs|gradient of .* differs|loss curves differ" <<< "$out" ||
  { echo "FAIL: exit $rc without the wait, but not for a mismatch:"; echo "$out" | tail -15; exit 1; }
echo "ok: without the event wait ring attention read K|V before it arrived, and the equivalence failed (exit $rc)"
