#!/bin/sh
# Video Sparse Attention: 4x4x4-token cubes; each query cube attends to the (1 - sparsity) share of
# key cubes its coarse attention scores highest (here 1 of the 3x8x8 grid's 1x2x2 cubes). The
# settings go inline as key=value pairs. Checkpoints trained with VSA carry to_gate_compress
# weights for the coarse branch; the tiny model has none, so only the fine branch runs (logged).
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a kite over a beach" \
  --height 128 --width 128 --num-frames 9 --num-inference-steps 4 --max-sequence-length 32 \
  --attention-backend video_sparse_attn --attention-backend-config sparsity=0.75 \
  --output-path "$OUT" --output-file-name vsa --overwrite ${FORMAT:+--output-format "$FORMAT"}
