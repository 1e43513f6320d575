#!/usr/bin/env bash
# pipeline_peer_stopped.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: a 2-stage pipeline run (--pp 2) whose
# stage 1 stops itself with SIGSTOP in the middle of its 5th step (the hidden flag --stop-stage-at 1:5,
# layers/test_hooks.h, model/pipeline_step.cu):
# alive, holding its sockets, answering nothing (what a hung GPU or a swapped-out node looks like). Stage 0
# must exit non-zero within --comm-timeout plus a few seconds, with a message that names the stage it waited
# for; nothing may be left running.
set -uo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
timeout_s=3
dir=$(mktemp -d)
launcher=""
# The launcher's ranks, by pid (the stopped stage may outlive the others).
kill_ranks() { for p in $(pgrep -P "$launcher"); do kill -KILL "$p" 2>/dev/null; done; }
cleanup() {
  [ -n "$launcher" ] && { kill_ranks; kill -KILL "$launcher" 2>/dev/null; }
  rm -rf "$dir"
}
trap cleanup EXIT
cat "$src/train/options.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null || { echo "FAIL: prepare_data"; exit 1; }
$mpirun -np 2 "$train" --stop-stage-at 1:5 --device cpu --pp 2 --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 \
  --batch 8 --num-microbatches 8 --train "$dir/train.bin" --val none --steps 1000 --log-every 1 --comm-timeout $timeout_s \
  > "$dir/out.txt" 2>&1 &
launcher=$!
# The ranks are the launcher's children; OMPI_COMM_WORLD_RANK tells them apart.
rank_pid() {
  for p in $(pgrep -P "$launcher"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
r0=""
for _ in $(seq 1 600); do  # up to 60 s for the run to reach the stop
  [ -z "$r0" ] && r0=$(rank_pid 0)
  grep -q "fault injection: stage 1 stops itself" "$dir/out.txt" && break
  kill -0 "$launcher" 2>/dev/null || { cat "$dir/out.txt"; echo "FAIL: the run ended before stage 1 stopped"; exit 1; }
  sleep 0.1
done
t0=$(date +%s.%N)
[ -n "$r0" ] || { cat "$dir/out.txt"; echo "FAIL: rank 0 not found under pid $launcher"; exit 1; }
grep -q "fault injection: stage 1 stops itself" "$dir/out.txt" || { cat "$dir/out.txt"; echo "FAIL: stage 1 never stopped"; exit 1; }
limit=$(echo "$timeout_s + 10" | bc)
while kill -0 "$r0" 2>/dev/null && [ "$(echo "$(date +%s.%N) - $t0 < $limit" | bc)" = 1 ]; do sleep 0.1; done
took=$(echo "$(date +%s.%N) - $t0" | bc)
if kill -0 "$r0" 2>/dev/null; then tail -5 "$dir/out.txt"; echo "FAIL: stage 0 still running ${took} s after stage 1 stopped"; exit 1; fi
kill_ranks  # the stopped stage, if the launcher has not ended it yet
wait "$launcher"; rc=$?; launcher=""
grep -E "error|fault injection" "$dir/out.txt"
[ $rc -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
grep -Eq "\[rank 0\] error: comm timeout: .*(from|to) stage 1" "$dir/out.txt" ||
  { echo "FAIL: stage 0's message does not name stage 1"; exit 1; }
echo "ok: stage 0 stopped ${took} s after stage 1 did (--comm-timeout $timeout_s), job exit $rc, naming stage 1"
