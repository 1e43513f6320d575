#!/usr/bin/env bash
# test_resume_extend.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: extending a finished run on
# purpose (Megatron-LM's --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler).
#   A: a 10-step cosine run on one rank, checkpointed at its end.
#   Refused: resuming it with --steps 20, or with --lr-schedule constant, and neither flag: exit 1 on every rank
#   (no rank aborted), the message naming the value by name and both flags.
#   B: resumed at another layout (NP ranks, FLAGS) with --steps 20 --override-opt_param-scheduler.
#   C: resumed on one rank the same way (the same layout as A).
#   D: resumed on one rank with --steps 20 --use-checkpoint-opt_param-scheduler.
# Checks: B's and C's learning rate at steps 11..20 is the new schedule (cosine over 20 steps, which differs from
# the old one's final rate); D's is the old schedule's final rate; B's loss continues from A's (step 11 near
# step 10, far below step 1) and equals C's at every step up to the layouts' float reassociation (1e-3 relative).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/model/train_state.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none
        --warmup 2 --lr 1e-2 --final-lr-frac 0.1 --dropout 0.1 --log-every 5"
$mpirun -np 1 "$train" $common --steps 10 --checkpoint-dir "$dir/ck" --log "$dir/a.jsonl" > "$dir/out_a.txt"
test "$(cat "$dir/ck/latest")" = "step_00000010"
for run in b c d; do cp -r "$dir/ck" "$dir/ck_$run"; done

# Without a flag, a changed schedule is refused on every rank, values by name, both flags named.
bash "$src/test/expect_error.sh" --before-first-step --exit 1 \
  "--steps 20 differs from the checkpoint's 10 .*--override-opt_param-scheduler.*--use-checkpoint-opt_param-scheduler" \
  $mpirun -np "$np" "$train" $common --steps 20 --resume "$dir/ck_b" $flags
bash "$src/test/expect_error.sh" --before-first-step --exit 1 \
  "--lr-schedule constant differs from the checkpoint's cosine .*--override-opt_param-scheduler" \
  $mpirun -np "$np" "$train" $common --steps 20 --lr-schedule constant --resume "$dir/ck_b" $flags

$mpirun -np "$np" "$train" $common --steps 20 --resume "$dir/ck_b" --override-opt_param-scheduler $flags \
  --log "$dir/b.jsonl" > "$dir/out_b.txt"
grep -q "override-opt_param-scheduler: from step 11 on the learning rate follows this run's schedule" "$dir/out_b.txt"
$mpirun -np 1 "$train" $common --steps 20 --resume "$dir/ck_c" --override-opt_param-scheduler --log "$dir/c.jsonl" > "$dir/out_c.txt"
$mpirun -np 1 "$train" $common --steps 20 --resume "$dir/ck_d" --use-checkpoint-opt_param-scheduler --log "$dir/d.jsonl" \
  > "$dir/out_d.txt"
grep -q "use-checkpoint-opt_param-scheduler: the learning rate follows the checkpoint's schedule" "$dir/out_d.txt"

python3 - "$dir" <<'PY'
import json, math, sys
d = sys.argv[1]
def log(name):
    return {r["step"]: r for r in map(json.loads, open(f"{d}/{name}.jsonl")) if "train_loss" in r}
a, b, c, dd = log("a"), log("b"), log("c"), log("d")
lr, warmup, floor = 1e-2, 2, 1e-2 * 0.1
def cosine(step, steps):  # train/bookkeeping.cu's learning_rate
    p = min(1.0, (step - warmup) / (steps - warmup))
    return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * p))
fail = []
assert sorted(b) == list(range(11, 21)) and sorted(c) == sorted(b) and sorted(dd) == sorted(b), (sorted(b), sorted(c))
for s in range(11, 21):
    if abs(b[s]["lr"] - cosine(s, 20)) > 1e-6 * lr: fail.append(f"B step {s}: lr {b[s]['lr']} is not the new cosine's {cosine(s, 20)}")
    if abs(c[s]["lr"] - b[s]["lr"]) > 1e-9: fail.append(f"C step {s}: lr {c[s]['lr']} differs from B's {b[s]['lr']}")
    if abs(dd[s]["lr"] - floor) > 1e-6 * lr: fail.append(f"D step {s}: lr {dd[s]['lr']} is not the old schedule's final {floor}")
    if abs(b[s]["train_loss"] - c[s]["train_loss"]) > 1e-3 * c[s]["train_loss"]:
        fail.append(f"step {s}: loss {b[s]['train_loss']} at the other layout differs from {c[s]['train_loss']}")
# The new schedule differs from the old one's (which had ended at its floor), so the check above can fail.
assert cosine(11, 20) > 2 * floor
# The loss continues: step 11 (the weights of step 10, the next batch) keeps most of what steps 1..10 gained
# (a restart from the initial weights would give about step 1's), and so do the steps after it.
gain = a[1]["train_loss"] - a[10]["train_loss"]
if not (gain > 0.5 and a[1]["train_loss"] - b[11]["train_loss"] > 0.5 * gain
        and max(b[s]["train_loss"] for s in b) < a[1]["train_loss"] - 0.5 * gain):
    fail.append(f"the loss does not continue: step 1 {a[1]['train_loss']}, step 10 {a[10]['train_loss']}, "
                f"resumed step 11 {b[11]['train_loss']}")
if fail:
    print("FAIL:\n  " + "\n  ".join(fail)); sys.exit(1)
print(f"loss: step 1 {a[1]['train_loss']:.4f}, step 10 {a[10]['train_loss']:.4f}, resumed at the other layout: step 11 "
      f"{b[11]['train_loss']:.4f} ... step 20 {b[20]['train_loss']:.4f} (one rank: {c[20]['train_loss']:.4f})")
print(f"lr: override {b[11]['lr']:.3e} at step 11 -> {b[20]['lr']:.3e} at step 20 (cosine over 20 steps); "
      f"use-checkpoint {dd[11]['lr']:.3e} throughout (the 10-step cosine's end)")
PY
