#!/bin/sh
# Sliding Tile Attention for the transformer's self-attention. At 128x128 and 9 frames the
# transformer sees a 3x8x8 token grid; tile_size [1, 4, 4] cuts it into 3x2x2 tiles. The mask
# strategy file gives each (step, layer, head) its window in tiles, "step_layer_head": [wt, wh, ww]:
# here head 0 looks along time only ([3, 1, 1]: its own spatial tile in every frame) and head 1
# within its frame ([1, 2, 2]), for the wan-tiny model's 2 layers and 2 heads, at steps 1 to 3 of 4
# (steps before skip_time_steps run dense). Cross-attention stays dense (fa), as the log says.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a kite over a beach" \
  --height 128 --width 128 --num-frames 9 --num-inference-steps 4 --max-sequence-length 32 \
  --attention-backend sliding_tile_attn --attention-backend-config examples/sta/sta.json \
  --output-path "$OUT" --output-file-name sta --overwrite ${FORMAT:+--output-format "$FORMAT"}
