#!/usr/bin/env bash
# test_resume_zero.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: checkpoints are consolidated
# whatever the optimizer, so a run saved with the distributed optimizer (--zero 1) resumes without it and one
# saved without it resumes with it. At dp 2 the two optimizers compute the same bits
# (parallel/distributed_optimizer.h), so both crossed runs must equal the straight 20-step run bit for bit:
# losses, gradient norms and the final llm.c file.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/model/train_state.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none
        --steps 20 --warmup 3 --lr 3e-3 --dropout 0.1 --weight-decay 0.1 --log-every 10 $flags"
$mpirun -np "$np" "$train" $common --log "$dir/a.jsonl" --save "$dir/a.bin" > "$dir/out_a.txt"
losses() { grep -o '"step":[0-9]*,"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1"; }
for first in with without; do
  z1=""; z2="--zero 1"
  if [ "$first" = with ]; then z1="--zero 1"; z2=""; fi
  rm -rf "$dir/ck"
  $mpirun -np "$np" "$train" $common $z1 --log "$dir/$first.jsonl" --checkpoint-dir "$dir/ck" --exit-interval 10 > "$dir/out_${first}_1.txt"
  $mpirun -np "$np" "$train" $common $z2 --log "$dir/$first.jsonl" --resume "$dir/ck" --save "$dir/$first.bin" > "$dir/out_${first}_2.txt"
  grep -q "resumed from $dir/ck/step_00000010: step 10 done" "$dir/out_${first}_2.txt"
  if ! diff <(losses "$dir/a.jsonl") <(losses "$dir/$first.jsonl"); then echo "FAIL: saved $first --zero 1, resumed the other way: losses differ"; exit 1; fi
  test "$(losses "$dir/$first.jsonl" | wc -l)" = 20
  cmp "$dir/a.bin" "$dir/$first.bin" || { echo "FAIL: saved $first --zero 1, resumed the other way: final parameters differ"; exit 1; }
  echo "saved $first the distributed optimizer at step 10, resumed the other way: 20 losses and the final model bit for bit"
done
grep -q "distributed optimizer: each of" "$dir/out_with_1.txt" || { echo "FAIL: --zero 1 did not shard"; exit 1; }
losses "$dir/a.jsonl" | sed -n '1p;20p'
