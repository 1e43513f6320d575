#!/usr/bin/env bash
# test_crash_save.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP WHERE [FLAGS...]: a process SIGKILLed while
# writing a checkpoint leaves the previous one loadable, and resuming from it ends exactly where an
# uninterrupted run ends. WHERE is the crash point inside the second save (MM_CRASH_DURING_SAVE=2:BYTES,
# model/atomic_file.h): start (0 bytes), model (inside model.bin), state (inside state.bin), latest (inside
# the new `latest` pointer: both new files are complete, but not yet published).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; where="$6"; shift 6
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val $dir/val.bin
        --val-batches 0 --steps 10 --lr 3e-3 --log-every 10 $flags"
# The uninterrupted run (its checkpoint files give the byte sizes of a save).
$mpirun -np "$np" "$train" $common --checkpoint-dir "$dir/ref" --save-every 5 --save "$dir/ref.bin" > "$dir/out_ref.txt"
model_bytes=$(stat -c %s "$dir/ref/step_00000010/model.bin")
state_bytes=$(stat -c %s "$dir/ref/step_00000010/state.bin")
case "$where" in
  start) at=0 ;;
  model) at=$((model_bytes / 2)) ;;
  state) at=$((model_bytes + state_bytes / 2)) ;;
  latest) at=$((model_bytes + state_bytes + 5)) ;;
  *) echo "unknown crash point $where"; exit 2 ;;
esac
set +e
MM_CRASH_DURING_SAVE=2:$at $mpirun -x MM_CRASH_DURING_SAVE -np "$np" "$train" $common --checkpoint-dir "$dir/ck" --save-every 5 \
  > "$dir/out_crash.txt" 2>&1
rc=$?
set -e
grep -q "fault injection: SIGKILL during save 2 after $at bytes" "$dir/out_crash.txt" || { cat "$dir/out_crash.txt"; echo "FAIL: no crash"; exit 1; }
test $rc -ne 0 || { echo "FAIL: the killed run exited 0"; exit 1; }
echo "killed during save 2 at byte $at ($where; model.bin $model_bytes bytes, state.bin $state_bytes bytes), exit $rc; left behind:"
(cd "$dir/ck" && find . -type f | sort | sed 's/^/  /')
test "$(cat "$dir/ck/latest")" = "step_00000005" || { echo "FAIL: latest no longer names step_00000005"; exit 1; }
# The previous pair is intact: resume from it and finish; the result equals the uninterrupted run's.
$mpirun -np "$np" "$train" $common --resume "$dir/ck" --save-every 5 --save "$dir/resumed.bin" > "$dir/out_resume.txt"
grep -q "resumed from $dir/ck/step_00000005: step 5 done" "$dir/out_resume.txt"
# The killed writer could not remove its lock (data/writer_lock.h): the resumed run found it stale and took it over.
grep -Eq "^note: $dir/ck/lock was left by pid [0-9]+ on .*, which is no longer running .*taken over" "$dir/out_resume.txt" ||
  { echo "FAIL: the stale lock was not taken over with a note"; exit 1; }
cmp "$dir/ref.bin" "$dir/resumed.bin" || { echo "FAIL: resumed run ends elsewhere"; exit 1; }
# The debris of the killed save is gone: only the new complete pair and the pointer remain.
left=$(cd "$dir/ck" && find . -type f | sort | tr '\n' ' ')
test "$left" = "./latest ./step_00000010/model.bin ./step_00000010/state.bin " || { echo "FAIL: left $left"; exit 1; }
echo "previous checkpoint loaded; resumed run == uninterrupted run (final parameters identical); debris cleaned"
