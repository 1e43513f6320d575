#!/usr/bin/env bash
# checkpoint_roundtrip.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIRUN: a checkpoint saved at tp 2 + SP is one
# consolidated llm.c file that loads at tp 1 and tp 4, and over pipeline stages (pp 2, tp 2 x pp 2), and saves
# back byte-identical; one saved by a pipeline (1F1B, and interleaved) loads at one rank and saves back the same.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/layers/attention.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val $dir/val.bin"
$mpirun -np 2 "$train" $common --tp 2 --sp --steps 3 --dropout 0.1 --save "$dir/a.bin" > "$dir/log_a.txt"
$mpirun -np 1 "$train" $common --tp 1 --steps 0 --init "$dir/a.bin" --save "$dir/b.bin" > "$dir/log_b.txt"
$mpirun -np 4 "$train" $common --tp 4 --steps 0 --init "$dir/a.bin" --save "$dir/c.bin" > "$dir/log_c.txt"
$mpirun -np 2 "$train" $common --pp 2 --steps 0 --init "$dir/a.bin" --save "$dir/d.bin" > "$dir/log_d.txt"
$mpirun -np 4 "$train" $common --tp 2 --sp --pp 2 --steps 0 --init "$dir/a.bin" --save "$dir/e.bin" > "$dir/log_e.txt"
cmp "$dir/a.bin" "$dir/b.bin" && cmp "$dir/a.bin" "$dir/c.bin" && cmp "$dir/a.bin" "$dir/d.bin" && cmp "$dir/a.bin" "$dir/e.bin"
# Trained by a pipeline: the stages' parts (and the first stage's copy of the tied embedding) make one file.
$mpirun -np 2 "$train" $common --pp 2 --steps 3 --num-microbatches 2 --dropout 0.1 --save "$dir/f.bin" > "$dir/log_f.txt"
$mpirun -np 1 "$train" $common --steps 0 --init "$dir/f.bin" --save "$dir/g.bin" > "$dir/log_g.txt"
cmp "$dir/f.bin" "$dir/g.bin"
four="${common/--layers 2/--layers 4}"
$mpirun -np 2 "$train" $four --pp 2 --num-layers-per-virtual-pipeline-stage 1 --num-microbatches 2 --steps 3 --save "$dir/h.bin" > "$dir/log_h.txt"
$mpirun -np 1 "$train" $four --steps 0 --init "$dir/h.bin" --save "$dir/i.bin" > "$dir/log_i.txt"
cmp "$dir/h.bin" "$dir/i.bin"
# And the header is llm.c's: magic 20240326, version 3, maxT 32, V 257, L 2, NH 4, C 32, Vp 384.
python3 - "$dir/a.bin" <<'PY'
import struct, sys
h = struct.unpack("<8i", open(sys.argv[1], "rb").read(32))
assert h == (20240326, 3, 32, 257, 2, 4, 32, 384), h
print("header", h)
PY
echo "checkpoint round trip across tp 2 (SP) -> tp 1 -> tp 4 -> pp 2 -> tp 2 x pp 2, and from pp 2 (1F1B, interleaved): identical"
