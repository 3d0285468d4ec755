#!/bin/sh
# Settings from a YAML file; the prompt and the output come from the command line.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --config examples/config-yaml/config.yaml --model-path "$MODEL" \
  --prompt "a lighthouse at dusk, waves breaking" \
  --output-path "$OUT" --output-file-name config_yaml --overwrite ${FORMAT:+--output-format "$FORMAT"}
