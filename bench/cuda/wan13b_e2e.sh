#!/usr/bin/env bash
# Wan2.1-1.3B-sized end to end on one GPU, mmgen beside diffusers in the same run: 480x832, 81
# frames, 10 steps, guidance 5, the prompts of ../shared/tools/peers/wan13b_e2e.py, on its random
# bf16 folder (real transformer and VAE sizes; `make` writes it once). mmgen runs the request twice
# in one process (a prompt file): the second request is the steady state a server sees (the first
# pays the products' tuning and the allocator's first blocks); diffusers warms up inside the peer
# script. Then diffusers with cuDNN attention and compiled repeated blocks (`diffusers-fast`), and,
# unless FAST_ONLY=1, diffusers' default SDPA run, whose video mmgen's is compared with.
# usage: bench/cuda/wan13b_e2e.sh MMGEN TOKENIZER_DIR PEER_SCRIPT [WORK_DIR] [-- MMGEN_ARGS...]
set -euo pipefail
mmgen="$1" tokenizer="$2" peer="$3" work="${4:-/tmp/wan13b}"
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
steps="${STEPS:-10}"
prompt="a red fox running through snow, cinematic, golden hour"
negative="blurry, low quality, static"
mkdir -p "$work"
[ -f "$work/model/model_index.json" ] || python3 "$peer" make "$work/model" "$tokenizer"
printf '%s\n%s\n' "$prompt" "$prompt" > "$work/prompts.txt"
rm -rf "$work/out"
"$mmgen" generate --device cuda --model-path "$work/model" --prompt-file-path "$work/prompts.txt" \
  --negative-prompt "$negative" --height 480 --width 832 --num-frames 81 \
  --num-inference-steps "$steps" --guidance-scale 5 --seed 42 --output-format npy \
  --output-path "$work/out" "$@" 2>&1 | tee "$work/mmgen.log" |
  grep -E "attention|encode|denoise|decode|peak|error" || true
python3 - "$work/mmgen.log" <<'PY'
import re, sys
stages = {"encode": [], "denoise": [], "decode": []}
per_step = []
for line in open(sys.argv[1]):
    m = re.search(r"info (encode|denoise|decode): (?:\d+ [a-z ]+ in )?([0-9.]+) s(?:, ([0-9.]+) s/step)?", line)
    if m:
        stages[m.group(1)].append(float(m.group(2)))
        if m.group(3): per_step.append(float(m.group(3)))
print("mmgen-wan13b", {"s/step, request 2": per_step[-1] if per_step else None,
      "s/step, each request": per_step, "decode_s": stages["decode"], "denoise_s": stages["denoise"]})
PY
python3 "$peer" diffusers-fast "$work/model" "$work/diffusers_fast.json" "$steps"
if [ "${FAST_ONLY:-0}" != 1 ]; then
  python3 "$peer" diffusers "$work/model" "$work/diffusers.json" "$work/diffusers.npy" "$steps"
  video="$(ls "$work"/out/*.npy | tail -1)"
  python3 "$peer" compare "$video" "$work/diffusers.npy"
fi
