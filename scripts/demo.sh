#!/usr/bin/env bash
# The default run: builds the mmgen executable alone (no tests or benchmarks), then draws "a red
# circle on a blue background" with the small wan-shapes model in examples/models and writes a PNG
# under outputs/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh mmgen
prompt="${1:-a red circle on a blue background}"
args=(--model-path examples/models/wan-shapes --prompt "$prompt" --negative-prompt ""
      --height 128 --width 128 --num-frames 1 --num-inference-steps 20 --guidance-scale 4.0
      --max-sequence-length 32 --seed 1 --output-path outputs)
./build/mmgen generate "${args[@]}"
echo "demo: the picture is in outputs/ (compare with the first tile of docs/wan-shapes-preview.png)"
