#!/usr/bin/env bash
# download_tinyshakespeare.sh — for online users: fetch tiny Shakespeare (~1 MB, Karpathy's char-rnn
# data set) and turn it into token shards with the byte-level tokenizer:
#   data/generated/tinyshakespeare/train.bin, val.bin
# Usage (from the repository root, after building):  bash data/download_tinyshakespeare.sh [BUILD_DIR]
# Tests and CI never call this: they use `prepare_data --default`, which needs no network.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="$root/data/generated/tinyshakespeare"
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

if [ ! -x "$build/prepare_data" ]; then
  echo "error: $build/prepare_data not found; build it first (make train, or cmake --build $build --target prepare_data)" >&2
  exit 1
fi
command -v curl >/dev/null || { echo "error: curl is needed to download $url" >&2; exit 1; }

mkdir -p "$out"
if [ ! -s "$out/input.txt" ]; then
  echo "downloading $url"
  # Download to a temporary name first so that an interrupted download is not taken for the data set.
  curl --fail --location --silent --show-error -o "$out/input.txt.part" "$url"
  mv "$out/input.txt.part" "$out/input.txt"
fi
"$build/prepare_data" --out-dir "$out" --val-fraction 0.1 "$out/input.txt"
