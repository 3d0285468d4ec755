#!/usr/bin/env bash
# The GPU memory figures of docs/performance-history.md (issue 23): the Wan2.1-14B-shaped pipeline with
# UMT5-XXL's 24 layers (bench/cuda/wan14b_folder.py, written once into /dev/shm) at 480x832x81,
# guidance 5, seed 42, on one GPU: without a limit in bf16, then under --max-gpu-memory LIMIT with
# FP8 products (the text encoder and the transformer leave the GPU after their stage), then under
# the same limit in bf16 (the transformer's 27 GiB exceed it, so --gpu-offload auto streams its
# blocks from page-locked host memory). Prints each run's step times, upload, decode and peak GPU
# memory lines, the FP8 video's distance to the bf16 one, and whether the streamed bf16 video is
# the unlimited one to the byte.
# usage: bench/cuda/wan14b_gpu_memory.sh MMGEN   STEPS (default 2), LIMIT (default 24GiB) and WORK
#        (default /dev/shm/wan14b-memory) from the environment. Needs python3 with torch,
#        diffusers, transformers and numpy for the folder and the comparison.
set -uo pipefail
mmgen="$1"
model=/dev/shm/wan14b-xxl work="${WORK:-/dev/shm/wan14b-memory}" limit="${LIMIT:-24GiB}"
mkdir -p "$work"
[ -f "$model/model_index.json" ] ||
  python3 "$(dirname "$0")/wan14b_folder.py" "$model" \
    "$(dirname "$0")/../../examples/models/wan-tiny/tokenizer" 24
run() {  # name, then extra flags
  local name="$1"
  shift
  local start=$SECONDS
  "$mmgen" generate --device cuda --model-path "$model" \
    --prompt "a red fox running through snow, cinematic" --height 480 --width 832 --num-frames 81 \
    --num-inference-steps "${STEPS:-2}" --guidance-scale 5 --seed 42 --output-format npy \
    --output-path "$work" --output-file-name "$name.npy" --overwrite --log-level debug "$@" \
    > "$work/$name.log" 2>&1
  local status=$?
  echo "== $name (exit $status, $((SECONDS - start)) s)"
  grep -E "info (upload|encode|decode|done|gpu memory|gpu offload|stage offload|guidance)|error" \
    "$work/$name.log"
  grep "denoise [0-9]*/" "$work/$name.log" | python3 -c "
import re, sys
means = [float(re.search(r'\((\S+) s/step', line).group(1)) for line in sys.stdin]
steps = [(i + 1) * m - i * (means[i - 1] if i else 0) for i, m in enumerate(means)]
print('steps', [round(s, 3) for s in steps])"
}
run bf16
run fp8_limited --max-gpu-memory "$limit" --gpu-matmul-precision fp8
run bf16_limited --max-gpu-memory "$limit"
python3 - "$work/bf16.npy" "$work/fp8_limited.npy" <<'PY'
import sys, numpy as np
a, b = (np.load(p).astype(np.float64) for p in sys.argv[1:3])
print(f"fp8 under the limit vs bf16 without: video relative error "
      f"{np.linalg.norm(b - a) / np.linalg.norm(a):.2e}, max abs {np.abs(b - a).max():.2e}")
PY
cmp -s "$work/bf16.npy" "$work/bf16_limited.npy" &&
  echo "bf16 under the limit (streamed blocks) vs bf16 without: the same bytes" ||
  echo "bf16 under the limit (streamed blocks) vs bf16 without: DIFFERENT"
