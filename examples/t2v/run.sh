#!/bin/sh
# Text to video: a 9-frame clip (frames - 1 must be divisible by 4) at 96x64, written as an MP4 with
# its settings in a .json beside it. The tiny model has random weights, so the clip is noise, but
# every stage runs; for a real Wan2.1 folder drop the size flags (480x832, 81 frames, 50 steps
# come from configs/wan.yaml) and set MODEL.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" \
  --prompt "a red fox running through snow" \
  --height 64 --width 96 --num-frames 9 --fps 8 \
  --num-inference-steps 4 --guidance-scale 5 --max-sequence-length 32 --seed 42 \
  --output-path "$OUT" --output-file-name t2v --overwrite ${FORMAT:+--output-format "$FORMAT"}
