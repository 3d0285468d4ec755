#!/usr/bin/env bash
# FLUX.1-dev-sized end to end on one GPU, mmgen beside diffusers in the same run: 1024x1024,
# 28 steps, guidance 3.5, on random bf16 weights of the real transformer and VAE sizes
# (bench/cuda/flux_dev_folder.py writes them for mmgen; ../shared/tools/peers/image_anchors.py
# builds the same modules in memory and feeds random prompt embeddings). mmgen runs the prompt
# twice in one process; the second request is the steady state.
# usage: bench/cuda/flux_dev_e2e.sh MMGEN ANCHOR_SCRIPT [WORK_DIR] [STEPS]
set -euo pipefail
mmgen="$1" anchor="$2" work="${3:-/tmp/flux-dev}" steps="${4:-28}"
here="$(cd "$(dirname "$0")" && pwd)"
prompt="a red fox running through snow, cinematic"
[ -f "$work/model/model_index.json" ] ||
  python3 "$here/flux_dev_folder.py" "$work/model" "$here/../../tests/fixtures/flux-tiny/model"
printf '%s\n%s\n' "$prompt" "$prompt" > "$work/prompts.txt"
rm -rf "$work/out"
"$mmgen" generate --device cuda --model-path "$work/model" --prompt-file-path "$work/prompts.txt" \
  --height 1024 --width 1024 --num-inference-steps "$steps" --guidance-scale 3.5 --seed 42 \
  --output-format npy --output-path "$work/out" 2>&1 | tee "$work/mmgen.log" |
  grep -E "error|upload|load|encode|denoise|decode|write|peak|device|text encoder" || true
python3 - "$work/mmgen.log" <<'PY' || true
import re, sys
stages = {"encode": [], "denoise": [], "decode": []}
per_step = []
for line in open(sys.argv[1]):
    m = re.search(r"info (encode|denoise|decode): (?:\d+ steps in )?([0-9.]+) s(?:, ([0-9.]+) s/step)?", line)
    if m:
        stages[m.group(1)].append(float(m.group(2)))
        if m.group(3): per_step.append(float(m.group(3)))
print("mmgen-flux-dev", {"s/step (2nd request)": per_step[-1], "denoise_s": stages["denoise"][-1],
      "encode_s": stages["encode"][-1], "decode_s": stages["decode"][-1]})
PY
python3 "$anchor" flux
