#!/bin/sh
# Text to image: one frame gives a PNG whose text chunk "parameters" holds the settings. With
# MODEL=examples/models/wan-shapes (a small model that really draws coloured shapes) use
# --height 128 --width 128 --num-inference-steps 20 --guidance-scale 4 and an empty negative prompt.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" \
  --prompt "a red circle on a blue background" --negative-prompt "" \
  --height 64 --width 64 --num-frames 1 \
  --num-inference-steps 4 --guidance-scale 4 --max-sequence-length 32 --seed 1 \
  --output-path "$OUT" --output-file-name t2i --overwrite ${FORMAT:+--output-format "$FORMAT"}
