#!/usr/bin/env bash
# trace_test.sh MODE SCHEDULE TRAIN_GPT PREPARE_DATA DRAW_PIPELINE SOURCE_DIR MPIEXEC [CHECKER ARGS...]: the
# trainer's --trace (layers/trace.h) on a 2-stage pipeline of 4 micro-batches in SCHEDULE (1f1b, afab,
# interleaved with 2 chunks per stage, or any other --pipeline-schedule), steps 2 and 3 recorded, validation
# between them.
#   check: trace_check.py (test/train/) on the file: its structure, no overlaps, every op once per step, the
#          schedule's order and the messages on aligned clocks; and on corrupted copies, each of which must
#          fail (--negative).
#   draw:  build/draw_pipeline on the file and --ideal for SCHEDULE: non-empty PNGs, each stage's idle share
#          printed; a bad request refused.
#   flags: --trace and --trace-steps refused before any work: malformed, beyond --steps, alone, over an input.
# CHECKER ARGS (e.g. --require-ops) go to trace_check.py; with --require-ops the draw test needs the ops too.
set -euo pipefail
mode="$1"; schedule="$2"; train="$3"; prep="$4"; draw="$5"; src="$6"; mpirun="$7 --oversubscribe --bind-to none"; shift 7
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$prep" --out-dir "$dir" "$src/README.md" > /dev/null
chunks=1
sched=(--pipeline-schedule "$schedule")
if [ "$schedule" = interleaved ]; then chunks=2; sched=(--num-layers-per-virtual-pipeline-stage 1); fi
run=(--device cpu --pp 2 --layers 4 --heads 4 --hidden 32 --seq 32 --batch 8 --num-microbatches 4 --steps 3
     --train "$dir/train.bin" --val "$dir/val.bin" --val-every 2 --val-batches 1 "${sched[@]}")
if [ "$mode" != flags ]; then
  $mpirun -np 2 "$train" "${run[@]}" --trace "$dir/t.json" --trace-steps 2:3 > "$dir/out.txt"
  grep -q "trace: steps 2 to 3 written to $dir/t.json" "$dir/out.txt" || { echo "FAIL: no 'trace: ... written' line"; cat "$dir/out.txt"; exit 1; }
fi

png_ok() {  # a PNG file of some size
  python3 - "$1" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, "%s is not a PNG of some size (%d bytes)" % (sys.argv[1], len(data))
PY
}

if [ "$mode" = check ]; then
  if ! python3 "$src/test/train/trace_check.py" "$dir/t.json" --schedule "$schedule" --pp 2 --micro 4 --chunks $chunks --negative "$@"; then
    cp "$dir/t.json" "$PWD/trace_check_failed_$schedule.json"  # for a look in Perfetto
    echo "FAIL: the trace is kept as $PWD/trace_check_failed_$schedule.json"; exit 1
  fi
elif [ "$mode" = flags ]; then
  # Refused before any work, with the flag's message (exit 2 from the option parser).
  refuse() {  # refuse REGEX FLAGS...
    local regex="$1"; shift
    set +e; $mpirun -np 2 "$train" "${run[@]}" "$@" > "$dir/bad.txt" 2>&1; local rc=$?; set -e
    if [ $rc -eq 0 ] || ! grep -Eq -e "$regex" "$dir/bad.txt" || grep -q "^step " "$dir/bad.txt"; then
      echo "FAIL: $* should be refused before any step with /$regex/ (exit $rc)"; cat "$dir/bad.txt"; exit 1
    fi
    echo "refused: $* -> $(grep -Eo -e "$regex" "$dir/bad.txt" | head -1)"
  }
  refuse "--trace-steps expects FIRST:LAST .* got '2:x'" --trace "$dir/b.json" --trace-steps 2:x
  refuse "--trace-steps expects FIRST:LAST .* got '3:2'" --trace "$dir/b.json" --trace-steps 3:2
  refuse "--trace-steps 2:9 goes beyond --steps 3" --trace "$dir/b.json" --trace-steps 2:9
  refuse "--trace-steps needs --trace FILE.json" --trace-steps 2
  refuse "--trace .*train.bin is the --train file" --trace "$dir/train.bin"
elif [ "$mode" = draw ]; then
  if grep -q '"cat":"compute"' "$dir/t.json" || [[ " $* " == *" --require-ops "* ]]; then
    "$draw" "$dir/t.json" --out "$dir/trace.png" | tee "$dir/draw.txt"
    grep -q "idle share" "$dir/draw.txt"
    png_ok "$dir/trace.png"
  else  # until the executor records its ops: the tool must say that there is nothing to draw
    if "$draw" "$dir/t.json" --out "$dir/trace.png" 2> "$dir/draw_err.txt" || ! grep -q "holds no schedule ops" "$dir/draw_err.txt"; then
      echo "FAIL: a trace without ops was not refused with a message"; cat "$dir/draw_err.txt"; exit 1
    fi
    echo "note: the trace holds no op events yet (model/pipeline_step.cu records none): drawing it skipped, its refusal checked"
  fi
  "$draw" --ideal --pp 4 --micro 8 --schedule "$schedule" --out "$dir/ideal.png" | tee "$dir/ideal.txt"
  grep -q "idle share" "$dir/ideal.txt"
  png_ok "$dir/ideal.png"
  # A bad request is refused with a message, not drawn.
  if "$draw" --ideal --pp 0 --micro 8 --schedule 1f1b --out "$dir/bad.png" 2> "$dir/bad.txt"; then
    echo "FAIL: --pp 0 was drawn"; exit 1
  fi
  grep -q "error:" "$dir/bad.txt" || { echo "FAIL: no error message for --pp 0"; cat "$dir/bad.txt"; exit 1; }
else
  echo "trace_test.sh: unknown mode $mode"; exit 2
fi
