#!/usr/bin/env bash
# trace_gpu_test.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: the trainer's --trace on the (emulated) GPU, over NCCL,
# a 2-stage ZB-H1 pipeline of 4 micro-batches (its units run their W's while the unit's exchange is in flight on
# the communication stream), every NCCL exchange started 3 ms late (EMU_NCCL_P2P_DELAY_MS, test/emulator/nccl.cc)
# so that the exchanges take a while; trace_gpu_check.py then checks that the compute rows keep the stream's order
# and that a W overlapping an exchange shows as overlapping, and that corrupted copies fail (--negative).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$prep" --out-dir "$dir" "$src/README.md" > /dev/null
EMU_NCCL_P2P_DELAY_MS=3 $mpirun -x EMU_NCCL_P2P_DELAY_MS -np 2 "$train" --device cuda --comm nccl --pp 2 \
  --pipeline-schedule zb-h1 --layers 2 --heads 2 --hidden 32 --seq 16 --batch 4 --micro-batch-size 1 --steps 3 \
  --train "$dir/train.bin" --val none --sample 0 --trace "$dir/t.json" --trace-steps 2:2 > "$dir/out.txt"
grep -q "trace: steps 2 to 2 written" "$dir/out.txt" || { echo "FAIL: no trace written"; cat "$dir/out.txt"; exit 1; }
python3 "$src/test/train/trace_gpu_check.py" "$dir/t.json" --negative
