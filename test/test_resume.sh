#!/usr/bin/env bash
# test_resume.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: exact resume.
#   A: train 20 steps straight.  B: train the same 20-step run, stop at step 10 (--exit-interval 10, which
#   saves a checkpoint), then --resume to step 20. The 20 losses must be identical (bitwise: the log prints
#   each float with %.9g, which round-trips) and the final llm.c checkpoints byte-identical.
# With more than one rank, the step-10 checkpoint also resumes at another layout (one rank, no TP, PP,
# micro-batches, context parallelism or distributed optimizer): it must say so (equivalent, not bitwise) and
# finish.
# With --shards first among the flags: the training data is split into shards of 10 batches each, read as
# the pattern train_*.bin, so that the 20 steps (shuffled) cross shard boundaries before and after the resume.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
shards=0
if [ "${1:-}" = "--shards" ]; then shards=1; shift; fi
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/model/train_state.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
data="$dir/train.bin"
if [ "$shards" = 1 ]; then
  python3 - "$dir" <<'PY'
import struct, sys
d = sys.argv[1]
raw = open(d + "/train.bin", "rb").read()
n = struct.unpack("<i", raw[8:12])[0]
tokens = raw[1024:]
per = 10 * 4 * 16 + 1 + 7  # 10 batches of B*T = 64 tokens, the extra target token, and a tail
for k, start in enumerate(range(0, n - per, per)):
    part = tokens[2 * start:2 * (start + per)]
    open(f"{d}/train_{k:03d}.bin", "wb").write(struct.pack("<256i", 20240520, 1, per, *([0] * 253)) + part)
PY
  data="$dir/train_*.bin"
  set -f  # the pattern goes to the trainer as it is (it expands it), not through the shell's unquoted $common
fi
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $data --val $dir/val.bin
        --val-batches 1 --val-every 5 --steps 20 --warmup 3 --lr 3e-3 --dropout 0.1 --log-every 5 $flags"
$mpirun -np "$np" "$train" $common --log "$dir/a.jsonl" --save "$dir/a.bin" > "$dir/out_a.txt"
$mpirun -np "$np" "$train" $common --log "$dir/b.jsonl" --checkpoint-dir "$dir/ck" --save-every 4 --exit-interval 10 > "$dir/out_b1.txt"
grep -q "exit: --exit-interval 10 reached at step 10" "$dir/out_b1.txt"
test "$(cat "$dir/ck/latest")" = "step_00000010"
ls "$dir/ck" | grep -qx step_00000008 && { echo "FAIL: the older step_00000008 was not deleted"; exit 1; }
cp -r "$dir/ck" "$dir/ck10"
$mpirun -np "$np" "$train" $common --log "$dir/b.jsonl" --resume "$dir/ck" --save "$dir/b.bin" > "$dir/out_b2.txt"
grep -q "resumed from $dir/ck/step_00000010: step 10 done" "$dir/out_b2.txt"
losses() { grep -o '"step":[0-9]*,"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1"; }
if ! diff <(losses "$dir/a.jsonl") <(losses "$dir/b.jsonl"); then echo "FAIL: losses differ after resume"; exit 1; fi
test "$(losses "$dir/a.jsonl" | wc -l)" = 20
cmp "$dir/a.bin" "$dir/b.bin" || { echo "FAIL: final parameters differ"; exit 1; }
# The last checkpoint is the final model too.
cmp "$dir/a.bin" "$dir/ck/step_00000020/model.bin" || { echo "FAIL: checkpoint model differs"; exit 1; }
echo "20 steps straight == 10 + resume + 10: $(losses "$dir/a.jsonl" | wc -l) losses identical, final parameters identical"
losses "$dir/b.jsonl" | sed -n '1p;10p;11p;20p'
if [ "$np" != 1 ]; then
  # The consolidated state resumes at another layout: one rank, tp 1, without the distributed optimizer
  # (equivalent math, not bitwise).
  plain=$(echo "$common" | sed -e 's/--tp [0-9]*//' -e 's/--sp//' -e 's/--zero [0-9]//' -e 's/--pp [0-9]*//' -e 's/--num-microbatches [0-9]*//' \
          -e 's/--cp [0-9]*//')
  $mpirun -np 1 "$train" $plain --resume "$dir/ck10" > "$dir/out_c.txt"
  grep -q "continuation is equivalent but not bitwise identical" "$dir/out_c.txt"
  echo "resumed the tp $np checkpoint at tp 1: $(grep -o 'loss [0-9.]* -> [0-9.]*' "$dir/out_c.txt")"
  grep -o 'step    20/20 | loss [0-9.]*' "$dir/out_a.txt" "$dir/out_c.txt"
fi
