#!/usr/bin/env bash
# test_interrupt.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: Ctrl-C (SIGINT) says what was saved
# (train/interrupt.h), and one checkpoint directory takes one writer (data/writer_lock.h).
#   1. SIGINT in the middle of the second save (MM_CRASH_DURING_SAVE=2:N MM_CRASH_SIGNAL=INT, data/atomic_file.h):
#      the message names the last complete checkpoint (step 2) and the command that continues; `latest` still
#      names it, the lock is gone, and --resume ends where the uninterrupted run ends.
#   2. SIGINT in the first save: it says that nothing was saved before it.
#   3. SIGINT in the final --save of a run without --checkpoint-dir: nothing saved.
#   4. A live writer: a second run into its directory is refused at start, naming the first's pid (read from its
#      lock); SIGINT to the first then names its last checkpoint, and its lock is gone.
# No verdict depends on time: case 4 waits for the first checkpoint to exist (120 s at most: a hang guard).
set -uo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); bg=""
trap '[ -n "$bg" ] && kill -9 $bg 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$prep" --out-dir "$dir" "$src/train/options.cu" > /dev/null || fail "prepare_data"
T="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none --lr 3e-3
   --log-every 100"
# 1. In the second save.
$mpirun -np 1 "$train" $T --steps 6 --checkpoint-dir "$dir/ref" --save-every 2 --save "$dir/ref.bin" > "$dir/ref.txt" 2>&1 ||
  fail "the uninterrupted run"
MM_CRASH_DURING_SAVE=2:100 MM_CRASH_SIGNAL=INT $mpirun -x MM_CRASH_DURING_SAVE -x MM_CRASH_SIGNAL -np 1 "$train" $T --steps 6 \
  --checkpoint-dir "$dir/ck" --save-every 2 > "$dir/one.txt" 2>&1
rc=$?
cat "$dir/one.txt" | grep -E "fault injection|interrupted"
[ $rc -ne 0 ] || fail "1: the interrupted run exited 0"
grep -q "fault injection: SIGINT during save 2 after 100 bytes" "$dir/one.txt" || fail "1: no SIGINT"
grep -Eq "^interrupted \(SIGINT\): while saving the checkpoint of step 4: that save is incomplete and not published; the last checkpoint is still $dir/ck/step_00000002: --resume $dir/ck continues from step 2" "$dir/one.txt" ||
  fail "1: the message does not name the last checkpoint"
[ "$(cat "$dir/ck/latest")" = step_00000002 ] || fail "1: latest moved"
[ ! -e "$dir/ck/lock" ] || fail "1: the lock is still there"
$mpirun -np 1 "$train" $T --steps 6 --resume "$dir/ck" --save-every 2 --save "$dir/resumed.bin" > "$dir/one_resume.txt" 2>&1 ||
  { tail -3 "$dir/one_resume.txt"; fail "1: the resume"; }
cmp "$dir/ref.bin" "$dir/resumed.bin" || fail "1: the resumed run ends elsewhere"
# 2. In the first save.
MM_CRASH_DURING_SAVE=1:0 MM_CRASH_SIGNAL=INT $mpirun -x MM_CRASH_DURING_SAVE -x MM_CRASH_SIGNAL -np 1 "$train" $T --steps 6 \
  --checkpoint-dir "$dir/ck2" --save-every 2 > "$dir/two.txt" 2>&1 && fail "2: exited 0"
grep -Eq "^interrupted \(SIGINT\): while saving the checkpoint of step 2: that save is incomplete and not published; nothing was saved before it in $dir/ck2" "$dir/two.txt" ||
  { cat "$dir/two.txt"; fail "2: the message does not say that nothing was saved"; }
# 3. In the final --save, without a checkpoint directory.
MM_CRASH_DURING_SAVE=0:0 MM_CRASH_SIGNAL=INT $mpirun -x MM_CRASH_DURING_SAVE -x MM_CRASH_SIGNAL -np 1 "$train" $T --steps 2 \
  --save "$dir/three.bin" > "$dir/three.txt" 2>&1 && fail "3: exited 0"
grep -Eq "^interrupted \(SIGINT\): nothing saved: the run has no --checkpoint-dir" "$dir/three.txt" ||
  { cat "$dir/three.txt"; fail "3: the message does not say that nothing was saved"; }
# 4. A live writer and a second one.
$mpirun -np 2 "$train" $T --steps 1000000 --checkpoint-dir "$dir/live" --save-every 2 > "$dir/a.txt" 2>&1 &
bg=$!
for _ in $(seq 1200); do [ -f "$dir/live/latest" ] && break; sleep 0.1; done
[ -f "$dir/live/latest" ] || { cat "$dir/a.txt"; fail "4: the first run saved nothing in 120 s"; }
pid=$(sed -n 's/^pid \([0-9]*\) host .*/\1/p' "$dir/live/lock")
[ -n "$pid" ] || fail "4: no pid in $dir/live/lock: $(cat "$dir/live/lock")"
bash "$src/test/expect_error.sh" --before-first-step --exit 1 \
  "--checkpoint-dir $dir/live is in use: the run with pid $pid on this host .* holds $dir/live/lock" \
  $mpirun -np 2 "$train" $T --steps 4 --checkpoint-dir "$dir/live" || fail "4: the second writer was not refused naming the first"
kill -INT "$pid"
wait $bg; bg=""
grep -E "^interrupted" "$dir/a.txt"
grep -Eq "^interrupted \(SIGINT\): (the last checkpoint is $dir/live/step_[0-9]+ \(complete\)|while saving the checkpoint of step [0-9]+: that save is incomplete and not published; the last checkpoint is still $dir/live/step_[0-9]+): --resume $dir/live continues from step [0-9]+" "$dir/a.txt" ||
  { tail -5 "$dir/a.txt"; fail "4: the interrupted writer does not name its last checkpoint"; }
[ ! -e "$dir/live/lock" ] || fail "4: the lock outlived its run"
echo "interrupt: ok (SIGINT in a save names the last checkpoint, or says nothing was saved; a second writer is refused naming the first)"
