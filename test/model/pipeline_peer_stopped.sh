#!/usr/bin/env bash
# pipeline_peer_stopped.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: a 2-stage pipeline run (--pp 2) whose
# stage 1 is stopped mid-run with SIGSTOP (alive, holding its sockets, answering nothing: what a hung GPU or
# a swapped-out node looks like). Stage 0 must exit non-zero within --comm-timeout plus a few seconds, with
# a message that names the stage it waited for; nothing may be left running.
set -uo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
timeout_s=3
dir=$(mktemp -d)
launcher=""
cleanup() {
  [ -n "${stopped:-}" ] && kill -KILL "$stopped" 2>/dev/null
  [ -n "$launcher" ] && kill -KILL "$launcher" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
cat "$src/train_options.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null || { echo "FAIL: prepare_data"; exit 1; }
# Eight micro-batches per step: a step is mostly the pipeline's exchanges, so the stop lands in one.
$mpirun -np 2 "$train" --device cpu --pp 2 --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 8 \
  --num-microbatches 8 --train "$dir/train.bin" --val none --steps 1000000 --log-every 1 --comm-timeout $timeout_s \
  > "$dir/out.txt" 2>&1 &
launcher=$!
# The ranks are the launcher's children; OMPI_COMM_WORLD_RANK tells them apart.
rank_pid() {
  for p in $(pgrep -P "$launcher"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
for _ in $(seq 1 600); do  # up to 60 s for a few steps to run
  [ "$(grep -c '^step' "$dir/out.txt")" -ge 3 ] && break
  kill -0 "$launcher" 2>/dev/null || { cat "$dir/out.txt"; echo "FAIL: the run ended before it was stopped"; exit 1; }
  sleep 0.1
done
r0=$(rank_pid 0); stopped=$(rank_pid 1)
[ -n "$r0" ] && [ -n "$stopped" ] || { cat "$dir/out.txt"; echo "FAIL: ranks not found under pid $launcher"; exit 1; }
kill -STOP "$stopped"
t0=$(date +%s.%N)
limit=$(echo "$timeout_s + 10" | bc)
while kill -0 "$r0" 2>/dev/null && [ "$(echo "$(date +%s.%N) - $t0 < $limit" | bc)" = 1 ]; do sleep 0.1; done
took=$(echo "$(date +%s.%N) - $t0" | bc)
if kill -0 "$r0" 2>/dev/null; then tail -5 "$dir/out.txt"; echo "FAIL: stage 0 still running ${took} s after stage 1 was stopped"; exit 1; fi
kill -KILL "$stopped" 2>/dev/null; stopped=""
wait "$launcher"; rc=$?; launcher=""
grep -E "error" "$dir/out.txt"
[ $rc -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
grep -Eq "\[rank 0\] error: comm timeout: .*(from|to) stage 1|\[rank 0\] error: comm timeout: .*world ranks 0 1" "$dir/out.txt" ||
  { echo "FAIL: stage 0's message does not name stage 1"; exit 1; }
echo "ok: stage 0 stopped ${took} s after stage 1 was (--comm-timeout $timeout_s), job exit $rc, naming stage 1"
