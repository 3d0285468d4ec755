#!/bin/sh
# A batch: one output per prompt of the file, the model loaded once. With --output-file-name NAME
# the files are NAME_0, NAME_1, ...; without, each is named after its prompt. A prompt that fails
# is reported on one line and the rest go on; a summary line ends the run.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" generate --model-path "$MODEL" --prompt-file-path examples/prompt-file/prompts.txt \
  --height 32 --width 32 --num-frames 1 --num-inference-steps 3 --max-sequence-length 32 \
  --output-path "$OUT" --output-file-name batch --overwrite ${FORMAT:+--output-format "$FORMAT"}
