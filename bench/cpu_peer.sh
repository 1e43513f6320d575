#!/usr/bin/env bash
# cpu_peer.sh BUILD_DIR [ROUNDS]: seconds per training step of mini-megatron next to PyTorch's eager CPU mode
# (bench/torch_gpt.py) on the same small GPT: vocabulary 1000 padded to 1024, 4 layers, 8 heads, hidden 256,
# batch 8 x 128 tokens, fp32, one rank, 2 threads, no dropout, the same llm.c checkpoint and token shard.
# The two programs run alternately ROUNDS times (default 3), 12 steps each; each reports its own per-step
# times, and the medians (over steps 3.., all rounds) and their ratio are printed, with the machine's load.
# The losses of the first and last step are printed too: the same model on the same batches.
# A benchmark (make bench runs it when PyTorch is installed: apt-get install python3-torch), never a test.
set -euo pipefail
build="${1:-build}"; rounds="${2:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
# The interpreter that has PyTorch: the first python3 on PATH, else the system's (python3-torch installs there).
py=""
for p in python3 /usr/bin/python3; do "$p" -c "import torch" 2>/dev/null && { py="$p"; break; }; done
[ -n "$py" ] || { echo "cpu_peer: PyTorch is not installed (apt-get install python3-torch)"; exit 0; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
python3 - "$dir/shard.bin" <<'PY'
import random, struct, sys
random.seed(1)
n = 200000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(1000) for _ in range(n))))
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2
model="--layers 4 --heads 8 --hidden 256 --vocab 1000 --padded-vocab 1024 --max-seq 128"
"$build/train_gpt" --device cpu $model --steps 0 --train "$dir/shard.bin" --val none --save "$dir/init.bin" > /dev/null
steps=12
for r in $(seq "$rounds"); do
  "$build/train_gpt" --device cpu --init "$dir/init.bin" --train "$dir/shard.bin" --val none --no-shuffle --batch 8 \
    --seq 128 --steps $steps --lr 1e-4 --lr-schedule constant --beta2 0.999 --grad-clip 0 --dropout 0 \
    --log "$dir/ours_$r.jsonl" --log-every 100 > /dev/null
  "$py" "$here/torch_gpt.py" "$dir/init.bin" "$dir/shard.bin" --batch 8 --seq 128 --steps $steps --threads 2 \
    --lr 1e-4 > "$dir/torch_$r.txt"
done
python3 - "$dir" "$rounds" <<'PY'
import json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
ours, theirs, first = [], [], {}
for r in range(1, rounds + 1):
    rows = [json.loads(l) for l in open(f"{d}/ours_{r}.jsonl") if "train_loss" in l]
    ours += [x["ms"] for x in rows[2:]]
    first["ours"], last_ours = rows[0]["train_loss"], rows[-1]["train_loss"]
    t = [l.split() for l in open(f"{d}/torch_{r}.txt")]
    theirs += [float(x[5]) for x in t[2:]]
    first["torch"], last_torch = float(t[0][3]), float(t[-1][3])
a, b = statistics.median(ours), statistics.median(theirs)
load = os.getloadavg()[0]
print(f"cpu peer (4 layers, h 256, 8 x 128 tokens, fp32, 1 rank, 2 threads; {rounds} alternating rounds, load {load:.2f}):")
print(f"  mini-megatron {a:.1f} ms/step | PyTorch eager {b:.1f} ms/step | ratio {a / b:.2f}")
print(f"  loss at step 1: mini-megatron {first['ours']:.6f}, PyTorch {first['torch']:.6f}; "
      f"at step {len(rows)}: {last_ours:.6f}, {last_torch:.6f}")
PY
