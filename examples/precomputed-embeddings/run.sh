#!/bin/sh
# Precomputed prompt embeddings: `mmgen encode` runs only the text encoder and writes the
# embedding to a safetensors file (prompt_embeds.0); `generate --prompt-embeds` then skips the
# encoder. The video is bit for bit the one --prompt gives. Useful to encode once and sample
# many seeds, or to encode on another machine.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

mkdir -p "$OUT"
"$MMGEN" encode --model-path "$MODEL" --prompt "a red fox running through snow" \
  --max-sequence-length 32 --out "$OUT/fox_embeds.safetensors"
"$MMGEN" encode --model-path "$MODEL" --prompt "blurry, low quality" \
  --max-sequence-length 32 --out "$OUT/negative_embeds.safetensors"
"$MMGEN" generate --model-path "$MODEL" \
  --prompt-embeds "$OUT/fox_embeds.safetensors" \
  --negative-prompt-embeds "$OUT/negative_embeds.safetensors" \
  --height 32 --width 48 --num-frames 5 --num-inference-steps 3 --max-sequence-length 32 \
  --output-path "$OUT" --output-file-name embeds --overwrite ${FORMAT:+--output-format "$FORMAT"}
