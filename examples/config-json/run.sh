#!/bin/sh
# Settings, the prompt included, from a JSON file. --seed on the command line wins over the file's.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --config examples/config-json/config.json --model-path "$MODEL" --seed 12 \
  --output-path "$OUT" --output-file-name config_json --overwrite ${FORMAT:+--output-format "$FORMAT"}
