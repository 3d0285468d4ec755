#!/bin/sh
# V-MoBA (mixture of block attention for video) with its settings in a YAML file.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a kite over a beach" \
  --height 128 --width 128 --num-frames 9 --num-inference-steps 4 --max-sequence-length 32 \
  --attention-backend vmoba_attn --attention-backend-config examples/vmoba/vmoba.yaml \
  --output-path "$OUT" --output-file-name vmoba --overwrite ${FORMAT:+--output-format "$FORMAT"}
