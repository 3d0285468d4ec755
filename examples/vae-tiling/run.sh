#!/bin/sh
# VAE decode in tiles: bounded memory for large frames. 128-pixel tile cores overlapping by
# 32 pixels; each tile is decoded with enough context that the result matches the untiled decode
# to about 1e-6. `mmgen inspect ... --vae-tiling` shows the memory it saves.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a field of sunflowers" \
  --height 256 --width 384 --num-frames 5 --num-inference-steps 2 --max-sequence-length 32 \
  --vae-tiling --vae-tile-size 128 --vae-tile-overlap 32 \
  --output-path "$OUT" --output-file-name tiled --overwrite ${FORMAT:+--output-format "$FORMAT"}
