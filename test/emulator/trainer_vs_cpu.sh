#!/usr/bin/env bash
# trainer_vs_cpu.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NAME NP DTYPE FLAGS...: the whole trainer on the
# emulated GPU (build-emulated's train_gpt --device cuda: the project's kernels, the emulated cuBLAS/cuBLASLt
# and, with NP 2, the emulated NCCL) against the CPU path of the same binary (--device cpu --comm mpi), in
# the layout FLAGS, on llm.c's small case (README: --dropout 0 --no-shuffle --lr-schedule constant --warmup 0
# --weight-decay 0 --grad-clip 0 --beta2 0.999 --batch 4 --seq 64 --lr 1e-4) with a small model, 5 steps.
# Every step's training loss must agree within the GPU equivalence tests' loss tolerance (test_equivalence,
# test_gpu_equivalence_*): 1e-5 relative in fp32, 2e-2 in bf16 (the two paths round bf16 partial sums at
# different places). (test/parallel/test_multi_gpu.sh allows 1e-3 with dropout on a 768-wide model; at this
# size 1e-3 let a bias shifted by one row in the emulated cuBLASLt pass, 1e-5 does not.)
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; name="$5"; np="$6"; dtype="$7"
shift 7
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src"/layers/*.cu > "$dir/text.txt"  # byte-level text
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--dtype $dtype --layers 4 --heads 4 --hidden 64 --max-seq 64 --dropout 0 --no-shuffle --lr-schedule constant
        --warmup 0 --weight-decay 0 --grad-clip 0 --beta2 0.999 --batch 4 --seq 64 --lr 1e-4
        --train $dir/train.bin --val none --steps 5 --log-every 1 $flags"
run() {  # run DEVICE COMM LOG
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! $mpirun -np "$np" "$train" --device "$1" --comm "$2" $common --log "$dir/$3.jsonl" > "$dir/$3.txt" 2>&1; then
    tail -20 "$dir/$3.txt"
    echo "FAIL $name: the $1 run stopped"
    exit 1
  fi
  t1=$(date +%s.%N)
  printf '%s: the %s run took %.1f s\n' "$name" "$1" "$(echo "$t1 - $t0" | bc)"
}
comm=mpi
[ "$np" -gt 1 ] && comm=nccl
run cpu mpi cpu
run cuda "$comm" cuda
python3 - "$dir/cpu.jsonl" "$dir/cuda.jsonl" "$name" "$dtype" <<'PY'
import json, math, sys
def losses(path):
    return [(r["step"], r["train_loss"]) for r in map(json.loads, open(path)) if "train_loss" in r]
cpu, gpu, name, dtype = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3], sys.argv[4]
tol = 1e-5 if dtype == "fp32" else 2e-2
assert len(cpu) == 5 and [s for s, _ in cpu] == [s for s, _ in gpu], (cpu, gpu)
for (s, c), (_, g) in zip(cpu, gpu):
    print(f"{name}: step {s}: loss cpu {c:.7f} emulated cuda {g:.7f} (rel {abs(c - g) / abs(c):.1e})")
bad = [s for (s, c), (_, g) in zip(cpu, gpu) if not (abs(c - g) <= tol * abs(c))]  # NaN fails
if bad:
    sys.exit(f"FAIL {name}: losses differ beyond {tol:g} relative at steps {bad}")
print(f"{name}: the emulated GPU matches the CPU path within {tol:g} relative")
PY
