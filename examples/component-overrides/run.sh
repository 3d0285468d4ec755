#!/bin/sh
# Per-component overrides: --<component>-path replaces one folder of the model (here the VAE, with
# the same one: point it at another AutoencoderKLWan folder to swap it), and each component can get
# its own attention backend: the comma form, or the dotted form for one component.
# --dry-run prints what each component resolves to, and where each choice came from.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt "a sailing boat" \
  --vae-path "$MODEL/vae" \
  --component-attention-backends text_encoder=torch_native,transformer=torch_sdpa \
  --height 32 --width 48 --num-frames 5 --num-inference-steps 3 --max-sequence-length 32 \
  --output-path "$OUT" --output-file-name overrides --overwrite ${FORMAT:+--output-format "$FORMAT"}

"$MMGEN" generate --model-path "$MODEL" --prompt "a sailing boat" \
  --component-attention-backends.vae torch_sdpa --dry-run > "$OUT/overrides_dry_run.json"
