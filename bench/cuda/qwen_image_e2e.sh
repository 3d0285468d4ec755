#!/usr/bin/env bash
# Qwen-Image-sized end to end on one GPU, mmgen beside diffusers in the same run: 1024x1024, true
# CFG 4 with a negative prompt, on random bf16 weights of the real transformer and VAE sizes
# (bench/cuda/qwen_image_folder.py writes them for mmgen; ../shared/tools/peers/image_anchors.py
# builds the same modules in memory with 64-token random prompt embeddings). mmgen runs the prompt
# twice in one process; the second request is the steady state.
# usage: bench/cuda/qwen_image_e2e.sh MMGEN ANCHOR_SCRIPT [WORK_DIR] [STEPS]
set -euo pipefail
mmgen="$1" anchor="$2" work="${3:-/tmp/qwen-image}" steps="${4:-12}"
here="$(cd "$(dirname "$0")" && pwd)"
prompt="a red fox running through snow, cinematic, detailed fur, soft morning light, wide shot"
[ -f "$work/model/model_index.json" ] ||
  python3 "$here/qwen_image_folder.py" "$work/model" "$here/../../tests/fixtures/qwenimage-tiny/model"
printf '%s\n%s\n' "$prompt" "$prompt" > "$work/prompts.txt"
rm -rf "$work/out"
"$mmgen" generate --device cuda --model-path "$work/model" --prompt-file-path "$work/prompts.txt" \
  --negative-prompt " " --true-cfg-scale 4 --height 1024 --width 1024 \
  --num-inference-steps "$steps" --seed 42 --output-format npy --output-path "$work/out" 2>&1 |
  tee "$work/mmgen.log" |
  grep -E "error|upload|load|encode|denoise|decode|write|peak|device|text encoder" || true
python3 "$anchor" qwen
