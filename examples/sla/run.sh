#!/bin/sh
# Sparse-Linear Attention: each block of block_q queries attends exactly to the topk share of
# block_k-key blocks its pooled scores rank highest; a linear branch through the layer's proj_l
# weights covers the rest (SLA-trained checkpoints such as TurboWan; the tiny model has none, so
# the branch is zero, as the log says). The settings go as a JSON object; sage_sla_attn takes the
# same ones with INT8 Q·K.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a kite over a beach" \
  --height 128 --width 128 --num-frames 9 --num-inference-steps 4 --max-sequence-length 32 \
  --attention-backend sla_attn \
  --attention-backend-config '{"topk": 0.25, "block_q": 64, "block_k": 32, "feature_map": "softmax"}' \
  --output-path "$OUT" --output-file-name sla --overwrite ${FORMAT:+--output-format "$FORMAT"}
