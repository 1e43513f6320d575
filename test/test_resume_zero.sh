#!/usr/bin/env bash
# test_resume_zero.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [--stages "A:B C:D ..."] [FLAGS...]: checkpoints
# are consolidated whatever the ZeRO stage, so a run saved at one stage resumes at another. Each pair A:B saves
# at --zero A (0: nothing sharded, 1: the distributed optimizer, 2, 3: parallel/zero_sharding.h) at step 10
# and resumes at --zero B. At dp 2 with one micro-batch every stage computes the same bits
# (parallel/zero_sharding.h), so every crossed run must equal the straight 20-step run bit for bit: losses,
# gradient norms and the final llm.c file. Default pairs: 1:0 0:1 (with and without the distributed optimizer).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
pairs="1:0 0:1"
if [ "${1:-}" = "--stages" ]; then pairs="$2"; shift 2; fi
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/model/train_state.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none
        --steps 20 --warmup 3 --lr 3e-3 --dropout 0.1 --weight-decay 0.1 --log-every 10 $flags"
$mpirun -np "$np" "$train" $common --log "$dir/a.jsonl" --save "$dir/a.bin" > "$dir/out_a.txt"
losses() { grep -o '"step":[0-9]*,"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1"; }
for pair in $pairs; do
  a=${pair%:*}; b=${pair#*:}
  rm -rf "$dir/ck"
  $mpirun -np "$np" "$train" $common --zero "$a" --log "$dir/$a$b.jsonl" --checkpoint-dir "$dir/ck" --exit-interval 10 > "$dir/out_${a}${b}_1.txt"
  $mpirun -np "$np" "$train" $common --zero "$b" --log "$dir/$a$b.jsonl" --resume "$dir/ck" --save "$dir/$a$b.bin" > "$dir/out_${a}${b}_2.txt"
  grep -q "resumed from $dir/ck/step_00000010: step 10 done" "$dir/out_${a}${b}_2.txt"
  if ! diff <(losses "$dir/a.jsonl") <(losses "$dir/$a$b.jsonl"); then echo "FAIL: saved at --zero $a, resumed at --zero $b: losses differ"; exit 1; fi
  test "$(losses "$dir/$a$b.jsonl" | wc -l)" = 20
  cmp "$dir/a.bin" "$dir/$a$b.bin" || { echo "FAIL: saved at --zero $a, resumed at --zero $b: final parameters differ"; exit 1; }
  for z in "$a" "$b"; do
    out="$dir/out_${a}${b}_$([ "$z" = "$a" ] && echo 1 || echo 2).txt"
    case $z in
      1) grep -q "distributed optimizer: each of" "$out" || { echo "FAIL: --zero 1 did not shard"; exit 1; } ;;
      2|3) grep -q "ZeRO-$z: each of" "$out" || { echo "FAIL: --zero $z did not shard"; exit 1; } ;;
    esac
  done
  echo "saved at --zero $a at step 10, resumed at --zero $b: 20 losses and the final model bit for bit"
done
losses "$dir/a.jsonl" | sed -n '1p;20p'
