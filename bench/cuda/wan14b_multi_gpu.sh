#!/usr/bin/env bash
# The several-GPU figures of docs/performance-history.md ("Several GPUs: the targets hold"): the
# Wan2.1-14B-shaped pipeline (bench/cuda/wan14b_folder.py, written once into /dev/shm) at
# 720x1280x81, guidance 5, seed 42, in each layout given, one after another on this machine; each
# layout's step times (from the debug progress lines: the running mean times the count,
# differenced) and whether its video is the one-GPU video byte for byte.
# usage: bench/cuda/wan14b_multi_gpu.sh MMGEN [LAYOUT...]   LAYOUT: GPUS or GPUS:cfg (default: 1 2
#        2:cfg 4 4:cfg, those that fit the machine's GPUs). STEPS (default 5) and WORK
#        (default /dev/shm/wan14b-runs) from the environment. Needs python3 with torch, diffusers,
#        transformers and numpy for the folder and the comparison.
set -uo pipefail
mmgen="$1"
shift
gpus_here=$(nvidia-smi -L | wc -l)
layouts=("$@")
if [ ${#layouts[@]} -eq 0 ]; then
  for l in 1 2 2:cfg 4 4:cfg; do [ "${l%%:*}" -le "$gpus_here" ] && layouts+=("$l"); done
fi
model=/dev/shm/wan14b work="${WORK:-/dev/shm/wan14b-runs}"
mkdir -p "$work"
[ -f "$model/model_index.json" ] ||
  python3 "$(dirname "$0")/wan14b_folder.py" "$model" "$(dirname "$0")/../../examples/models/wan-tiny/tokenizer"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
for layout in "${layouts[@]}"; do
  gpus=${layout%%:*} name=gpus${layout/:/_}
  extra=()
  [ "$layout" != "$gpus" ] && extra=(--cfg-parallel)
  "$mmgen" generate --device cuda --model-path "$model" \
    --prompt "a red fox running through snow, cinematic" --height 720 --width 1280 --num-frames 81 \
    --num-inference-steps "${STEPS:-5}" --guidance-scale 5 --seed 42 --gpus "$gpus" "${extra[@]}" \
    --output-format npy --output-path "$work" --output-file-name "$name.npy" --overwrite \
    --log-level debug > "$work/$name.log" 2>&1 || { echo "$name: failed (see $work/$name.log)"; continue; }
  grep "denoise [0-9]*/" "$work/$name.log" | python3 -c "
import re, sys
means = [float(re.search(r'\((\S+) s/step', line).group(1)) for line in sys.stdin]
steps = [(i + 1) * m - i * (means[i - 1] if i else 0) for i, m in enumerate(means)]
steady = steps[1:] or steps
print('$name steps', [round(s, 3) for s in steps], 'steady %.3f s/step' % (sum(steady) / len(steady)))"
  grep -E "info (upload|decode|done)" "$work/$name.log"
  if [ "$name" != gpus1 ] && [ -f "$work/gpus1.npy" ]; then
    if cmp -s "$work/gpus1.npy" "$work/$name.npy"; then echo "$name: video identical to one GPU"
    else python3 -c "
import numpy as np
a, b = np.load('$work/gpus1.npy'), np.load('$work/$name.npy')
print('$name: video vs one GPU, relative', float(np.linalg.norm(a - b) / np.linalg.norm(a)))"; fi
  fi
done
