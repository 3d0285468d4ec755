#!/usr/bin/env bash
# The default run: builds the mmgen executable alone (no tests or benchmarks, and only the packages
# it needs), then draws "a red circle on a blue background" with the small wan-shapes model in
# examples/models and writes a PNG under outputs/. The model's settings (128x128, 1 frame, 20
# steps, guidance 4, 32 tokens) come from its folder's mmgen.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh mmgen
prompt="${1:-a red circle on a blue background}"
./build/mmgen generate --model-path examples/models/wan-shapes --prompt "$prompt" --seed 1 \
  --output-path outputs
echo "demo: the picture is in outputs/ (compare with the first tile of docs/wan-shapes-preview.png)"
