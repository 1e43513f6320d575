#!/usr/bin/env bash
# [DATA=text|random] [DATA_REV=REV|worktree] [KERNELS="default SkylakeX ..."] [SHOW_STEPS="20 30"] [AT_STEPS="1 13"]
#     loss_deviation.sh BUILD_DIR[,BUILD_DIR...] [STEPS] [LR]
# How far fp32 training drifts from float64 training (issues 22, 41).
# The model of cpu_peer.sh (vocabulary 1000 padded to 1024, 4 layers, 8 heads, hidden 256, batch 8 x 128
# tokens, no dropout, no gradient clipping, AdamW betas 0.9/0.999, constant learning rate, default 60 steps
# at 1e-3) is trained from the same llm.c checkpoint on the same token shard: by mini-megatron in fp32
# (train_gpt on the CPU; once per build folder given, so two trees compare in one session), and by PyTorch
# (bench/torch_gpt.py) in float64 and in fp32. The float64 run is the reference; for each fp32 run the script
# prints |loss − reference loss| at steps 20 and 30 (SHOW_STEPS: the steps to show) and the largest over all
# steps and over the first half.
# PyTorch's fp32 run is the yardstick: fp32 cannot do better than the rounding of a careful fp32
# implementation, and mini-megatron's drift should be no larger than PyTorch's.
# Why the first half separately: at this learning rate the runs stay close for a while and then the
# rounding differences are amplified by training itself (a chaotic map: each loss spike multiplies them), so
# the late steps measure the amplification as much as the ops; the early steps measure the ops.
# KERNELS: one fp32 run is one draw of its rounding errors, and which draw a spike amplifies most is chance.
# With KERNELS set, every fp32 run is repeated under each OpenBLAS kernel named (OPENBLAS_CORETYPE; "default"
# is the environment's OPENBLAS_CORETYPE, or OpenBLAS's own choice without one; SkylakeX, Sandybridge,
# Nehalem, Core2, ... run on any x86-64 CPU that has their instructions): the same math with other GEMM
# roundings, for both implementations alike. The script then prints each run and each implementation's
# median. (A step runs at its kernel's speed: Core2's is the slowest.)
# AT_STEPS="1 13 ...": instead of whole runs, step K's gradient from mini-megatron's weights after step K − 1,
# tensor by tensor against float64 next to PyTorch fp32's (bench/step_accuracy.cu and .py; the first build
# folder's train_gpt and step_accuracy).
# Data: DATA=text (the default) is the bytes of README.md and docs/*.md as tokens (0..255 of the 1000): text
# the model learns from, so the loss falls and training amplifies rounding differences as it does on real
# data. The docs change with every commit, and so would the figures: the text is read at the commit
# DATA_REV (default 68e2b1e, the tree the figures of bench/PERF_NOTES.md "Accuracy" were measured on);
# DATA_REV=worktree reads the working tree. DATA=random: cpu_peer.sh's 200,000 tokens drawn uniformly from
# 1000 (seed 1), on which the loss stays at ln 1000 and the runs barely diverge.
# A benchmark (make accuracy runs it when PyTorch is installed), never a test.
set -euo pipefail
builds="${1:-build}"; steps="${2:-60}"; lr="${3:-1e-3}"
here="$(cd "$(dirname "$0")" && pwd)"
py=""
for p in python3 /usr/bin/python3; do "$p" -c "import torch" 2>/dev/null && { py="$p"; break; }; done
[ -n "$py" ] || { echo "loss_deviation: PyTorch is not installed (apt-get install python3-torch)"; exit 0; }
IFS=, read -r -a build_dirs <<< "$builds"
for b in "${build_dirs[@]}"; do
  [ -x "$b/train_gpt" ] || { echo "loss_deviation: $b/train_gpt not found (cmake --build $b --target train_gpt)"; exit 1; }
done
read -r -a kernels <<< "${KERNELS:-default}"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# The text at DATA_REV: README.md and docs/*.md as git holds them there (the working tree's when asked, or
# when this is not a git checkout that has the commit).
rev="${DATA_REV:-68e2b1ef19fb2d5ffa0cb00fb23f09baf837eda2}"
mkdir -p "$dir/text/docs"
if [ "${DATA:-text}" = text ] && [ "$rev" != worktree ] &&
   git -C "$here/.." cat-file -e "$rev^{commit}" 2>/dev/null; then
  for f in README.md $(git -C "$here/.." ls-tree --name-only "$rev" docs/ | grep '\.md$'); do
    git -C "$here/.." show "$rev:$f" > "$dir/text/$f"
  done
  data_label="text at ${rev:0:7}"
else
  cp "$here/../README.md" "$dir/text/" && cp "$here"/../docs/*.md "$dir/text/docs/"
  data_label="${DATA:-text}"
  [ "${DATA:-text}" = text ] && data_label="text of the working tree"
fi
python3 - "$dir/shard.bin" "${DATA:-text}" "$dir/text" <<'PY'
import glob, os, random, struct, sys
path, kind, root = sys.argv[1:4]
if kind == "random":
    random.seed(1)
    tokens = [random.randrange(1000) for _ in range(200000)]
else:
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    tokens = list(b"".join(open(f, "rb").read() for f in files))
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
model="--layers 4 --heads 8 --hidden 256 --vocab 1000 --padded-vocab 1024 --max-seq 128"
"${build_dirs[0]}/train_gpt" --device cpu $model --steps 0 --train "$dir/shard.bin" --val none \
  --save "$dir/init.bin" > /dev/null
# mini-megatron's fp32 run of the case; "$@": --steps N and where to write
ours_run() {  # BUILD_DIR FLAGS...
  local b="$1"; shift
  "$b/train_gpt" --device cpu --dtype fp32 --init "$dir/init.bin" --train "$dir/shard.bin" --val none --no-shuffle \
    --batch 8 --seq 128 --lr "$lr" --lr-schedule constant --warmup 0 --beta2 0.999 --grad-clip 0 --dropout 0 \
    "$@" > /dev/null
}
# AT_STEPS: one table per step K (the header says how), from the weights a run saved after step K − 1.
if [ -n "${AT_STEPS:-}" ]; then
  b="${build_dirs[0]}"
  [ -x "$b/step_accuracy" ] ||
    { echo "loss_deviation: $b/step_accuracy not found (cmake --build $b --target step_accuracy)"; exit 1; }
  for k in $AT_STEPS; do
    weights="$dir/init.bin"; state=()
    if [ "$k" -gt 1 ]; then
      ours_run "$b" --steps $((k - 1)) --checkpoint-dir "$dir/ck$k"
      weights="$dir/ck$k/$(cat "$dir/ck$k/latest")/model.bin"; state=("${weights%model.bin}state.bin")
    fi
    mkdir -p "$dir/at$k"
    "$b/step_accuracy" --model "$weights" --train "$dir/shard.bin" --step "$k" --out "$dir/at$k" > /dev/null
    echo "data $data_label, OpenBLAS kernel ${OPENBLAS_CORETYPE:-default};" \
      "mini-megatron ${b}'s weights after step $((k - 1))"
    "$py" "$here/step_accuracy.py" "$weights" "$dir/shard.bin" "$k" "$dir/at$k" "${state[@]}"
    echo
  done
  exit 0
fi
with_kernel() {  # KERNEL COMMAND...: the command under that OpenBLAS kernel ("default": the environment's choice)
  local k="$1"; shift
  if [ "$k" = default ]; then "$@"; else OPENBLAS_CORETYPE="$k" "$@"; fi
}
torch_run() {  # DTYPE OUT
  "$py" "$here/torch_gpt.py" "$dir/init.bin" "$dir/shard.bin" --batch 8 --seq 128 --steps "$steps" \
    --threads "$OMP_NUM_THREADS" --lr "$lr" --dtype "$1" > "$2"
}
torch_run float64 "$dir/ref.txt"
runs=()
for k in "${kernels[@]}"; do
  label="$k"; [ "$k" = default ] && label="${OPENBLAS_CORETYPE:-default}"
  for i in "${!build_dirs[@]}"; do
    with_kernel "$k" ours_run "${build_dirs[$i]}" --steps "$steps" --log "$dir/ours_${i}_$k.jsonl" --log-every 1000
    runs+=("mini-megatron ${build_dirs[$i]}|$label|$dir/ours_${i}_$k.jsonl")
  done
  with_kernel "$k" torch_run float32 "$dir/torch_$k.txt"
  runs+=("PyTorch fp32|$label|$dir/torch_$k.txt")
done
python3 - "$dir/ref.txt" "$steps" "$lr" "$data_label" "${SHOW_STEPS:-20 30}" "${runs[@]}" <<'PY'
import json, statistics, sys
ref_path, steps, lr, data, show = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def losses(path):
    if path.endswith(".jsonl"):
        return [json.loads(l)["train_loss"] for l in open(path) if "train_loss" in l]
    return [float(l.split()[3]) for l in open(path)]
ref, half = losses(ref_path), steps // 2
cols = [(f"step {s}", s) for s in map(int, show.split()) if s <= steps] + [(f"max over {steps}", None),
                                                                           (f"max over first {half}", half)]
def row(run):
    assert len(run) == len(ref) == steps, (len(run), len(ref), steps)
    d = [abs(a - b) for a, b in zip(run, ref)]
    return [d[s - 1] if s else max(d) for _, s in cols[:-1]] + [max(d[:half])]
print(f"loss deviation from PyTorch float64 (4 layers, h 256, 8 heads, 8 x 128 tokens, lr {lr} constant, "
      f"no clipping, no dropout; {steps} steps; data {data}):")
print(f"  {'run':<34} {'OpenBLAS kernel':<16}" + "".join(f"{c:>20}" for c, _ in cols))
table = {}
for spec in sys.argv[6:]:
    name, kernel, path = spec.split("|")
    r = row(losses(path))
    table.setdefault(name, []).append(r)
    print(f"  {name:<34} {kernel:<16}" + "".join(f"{x:>20.3e}" for x in r))
if len(next(iter(table.values()))) > 1:
    for name, rows in table.items():
        print(f"  {name:<34} {'median':<16}" + "".join(f"{statistics.median(c):>20.3e}" for c in zip(*rows)))
print(f"  loss at step 1 / {steps}: float64 {ref[0]:.9g} / {ref[-1]:.9g}")
PY
