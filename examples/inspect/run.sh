#!/bin/sh
# What a model folder holds and what a request would need, without loading weights: components,
# classes, parameters, dtypes, sizes, each component's attention backend, and the memory estimate
# against the free memory (with the flags that would fit when it does not). --json for scripts.
set -eu
cd "$(dirname "$0")/../.."            # the repository root
MMGEN=${MMGEN:-build/mmgen}          # the binary; MODEL, OUT and FORMAT may be set too
MODEL=${MODEL:-examples/models/wan-tiny}
OUT=${OUT:-outputs/examples}

"$MMGEN" inspect --model-path "$MODEL" --height 480 --width 832 --num-frames 81
mkdir -p "$OUT"
"$MMGEN" inspect --model-path "$MODEL" --height 480 --width 832 --num-frames 81 --json \
  > "$OUT/inspect.json"
