#!/usr/bin/env bash
# cpu_peer.sh BUILD_DIR [ROUNDS] [SHAPE]: seconds per training step of mini-megatron, next to this machine's
# GEMM roofline and to PyTorch's eager CPU mode (bench/torch_gpt.py), on the same GPT: fp32, one rank, 2 threads,
# no dropout, from the same llm.c checkpoint on the same token shard. SHAPE (default peer):
#  - peer: vocabulary 1000 padded to 1024, 4 layers, 8 heads, hidden 256, batch 8 x 128 tokens, 12 steps a round;
#  - gpt2: GPT-2's vocabulary (50257, padded to 50304), 2 layers, 12 heads, hidden 768, batch 2 x 1024, 4 steps.
# A round (ROUNDS of them, default 3) runs, one after the other: sgemm_rate (the machine's rate now: one
# 2-thread OpenBLAS sgemm at n 2048), mini-megatron, sgemm_rate again, PyTorch. A round's rate is the higher of
# its two sgemm rates (a machine shared with other work slows down and speeds up within seconds; the higher
# rate makes the stricter roofline). A round's roofline is the step's matrix FLOPs
# (every linear layer and the LM head forward and backward, 3 x 2·N·in·out, and attention's two products over
# the whole s x s square, 3 x 4·B·S²·h a layer) at that round's rate; each ratio is taken within its round, so
# a machine that slows down between rounds moves both sides of it. Printed: each round, then the medians (of
# the per-step times over steps 3.. of every round, 2.. for gpt2, and of the rounds' roofline ratios) with the
# load; the losses of the first and last step and the largest difference between the two programs' losses
# over all steps (the same model on the same batches).
# A benchmark (make bench runs it), never a test. Without PyTorch (apt-get install python3-torch) it reports
# the roofline ratio alone.
set -euo pipefail
build="${1:-build}"; rounds="${2:-3}"; shape="${3:-peer}"
here="$(cd "$(dirname "$0")" && pwd)"
case "$shape" in
  peer) L=4 NH=8 C=256 V=1000 Vp=1024 B=8 T=128 steps=12 skip=2 ;;
  gpt2) L=2 NH=12 C=768 V=50257 Vp=50304 B=2 T=1024 steps=4 skip=1 ;;
  *) echo "cpu_peer: SHAPE must be peer or gpt2, got '$shape'"; exit 2 ;;
esac
case "$rounds" in ''|*[!0-9]*|0) echo "cpu_peer: ROUNDS must be a positive integer, got '$rounds'"; exit 2 ;; esac
for p in train_gpt sgemm_rate; do
  [ -x "$build/$p" ] || { echo "cpu_peer: $build/$p is missing (build it: make build)"; exit 2; }
done
# The interpreter that has PyTorch: the first python3 on PATH, else the system's (python3-torch installs there).
py=""
for p in python3 /usr/bin/python3; do "$p" -c "import torch" 2>/dev/null && { py="$p"; break; }; done
[ -n "$py" ] || echo "cpu_peer: PyTorch is not installed (apt-get install python3-torch): the roofline ratio only"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
python3 - "$dir/shard.bin" "$V" <<'EOF'
import random, struct, sys
random.seed(1)
n, V = 200000, int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(V) for _ in range(n))))
EOF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2
model="--layers $L --heads $NH --hidden $C --vocab $V --padded-vocab $Vp --max-seq $T"
"$build/train_gpt" --device cpu $model --steps 0 --train "$dir/shard.bin" --val none --save "$dir/init.bin" > /dev/null
for r in $(seq "$rounds"); do
  echo "cpu_peer: round $r of $rounds" >&2
  OPENBLAS_NUM_THREADS=2 "$build/sgemm_rate" --n 2048 --threads 2 > "$dir/sgemm_$r.txt"
  "$build/train_gpt" --device cpu --init "$dir/init.bin" --train "$dir/shard.bin" --val none --no-shuffle --batch $B \
    --seq $T --steps $steps --lr 1e-4 --lr-schedule constant --beta2 0.999 --grad-clip 0 --dropout 0 \
    --log "$dir/ours_$r.jsonl" --log-every 100 > /dev/null
  OPENBLAS_NUM_THREADS=2 "$build/sgemm_rate" --n 2048 --threads 2 >> "$dir/sgemm_$r.txt"
  if [ -n "$py" ]; then
    "$py" "$here/torch_gpt.py" "$dir/init.bin" "$dir/shard.bin" --batch $B --seq $T --steps $steps --threads 2 \
      --lr 1e-4 > "$dir/torch_$r.txt"
  fi
done
python3 - "$dir" "$rounds" "$shape" $L $NH $C $Vp $B $T $skip <<'EOF'
import json, os, statistics, sys
d, rounds, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
L, NH, C, Vp, B, T, skip = map(int, sys.argv[4:11])
N = B * T
# Forward + backward (x 3) of every linear (QKV, projection, fc1, fc2: 12·C² weights a layer), the LM head,
# and attention's Q·Kᵀ and P·V over the whole square (2 products of 2·B·T²·C a layer).
flops = 3 * (L * 2 * N * 12 * C * C + 2 * N * C * Vp + L * 4 * B * T * T * C)
have_torch = os.path.exists(f"{d}/torch_1.txt")
ours, theirs, roof_ratios, diffs = [], [], [], []
print(f"cpu peer ({shape}: {L} layers, h {C}, {NH} heads, vocabulary {Vp}, {B} x {T} tokens, fp32, 1 rank, "
      f"2 threads; {flops / 1e9:.1f} GFLOP of matrix products a step; {rounds} rounds):")
for r in range(1, rounds + 1):
    rates = [float(l.split(":")[1].split()[0]) for l in open(f"{d}/sgemm_{r}.txt")]  # GFLOP/s, before and after
    rate = max(rates)
    rows = [json.loads(l) for l in open(f"{d}/ours_{r}.jsonl") if "train_loss" in l]
    mine = statistics.median([x["ms"] for x in rows[skip:]])
    ours += [x["ms"] for x in rows[skip:]]
    roof = flops / (rate * 1e9) * 1e3  # ms
    roof_ratios.append(mine / roof)
    line = (f"  round {r}: sgemm {rates[0]:.1f} / {rates[1]:.1f} GFLOP/s, roofline {roof:.1f} ms | mini-megatron {mine:.1f} ms/step, "
            f"{mine / roof:.2f} x roofline")
    first_ours, last_ours = rows[0]["train_loss"], rows[-1]["train_loss"]
    if have_torch:
        t = [l.split() for l in open(f"{d}/torch_{r}.txt")]
        theirs += [float(x[5]) for x in t[skip:]]
        diffs += [abs(x["train_loss"] - float(y[3])) for x, y in zip(rows, t)]
        first_torch, last_torch = float(t[0][3]), float(t[-1][3])
        tm = statistics.median([float(x[5]) for x in t[skip:]])
        line += f" | PyTorch eager {tm:.1f} ms/step, ratio {mine / tm:.2f}"
    print(line)
a = statistics.median(ours)
line = (f"  medians (load {os.getloadavg()[0]:.2f}): mini-megatron {a:.1f} ms/step, "
        f"{statistics.median(roof_ratios):.2f} x its roofline")
if have_torch:
    b = statistics.median(theirs)
    line += f" | PyTorch eager {b:.1f} ms/step | ratio {a / b:.2f}"
print(line)
if have_torch:
    print(f"  loss at step 1: mini-megatron {first_ours:.7f}, PyTorch {first_torch:.7f}; at step {len(rows)}: "
          f"{last_ours:.7f}, {last_torch:.7f}; largest difference over all steps {max(diffs):.1e}")
EOF
