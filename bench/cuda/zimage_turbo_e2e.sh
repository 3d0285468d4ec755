#!/usr/bin/env bash
# Z-Image-Turbo-sized end to end on one GPU, mmgen beside diffusers in the same run: 1024x1024,
# 9 steps, guidance 0, the prompt of ../shared/tools/peers/zimage_anchor.py, on random bf16 weights
# of the real sizes (bench/cuda/zimage_turbo_folder.py writes them for mmgen; the anchor builds the
# same modules in memory). mmgen runs the prompt three times in one process (a prompt file) and
# the last two requests are the steady state a server sees; the anchor reports its median of 3.
# usage: bench/cuda/zimage_turbo_e2e.sh MMGEN TOKENIZER_DIR ANCHOR_SCRIPT [WORK_DIR]
set -euo pipefail
mmgen="$1" tokenizer="$2" anchor="$3" work="${4:-/tmp/zimage-turbo}"
prompt="a red fox running through snow, cinematic"
[ -f "$work/model/model_index.json" ] ||
  python3 "$(dirname "$0")/zimage_turbo_folder.py" "$work/model" "$tokenizer"
printf '%s\n%s\n%s\n' "$prompt" "$prompt" "$prompt" > "$work/prompts.txt"
rm -rf "$work/out"
"$mmgen" generate --device cuda --model-path "$work/model" --prompt-file-path "$work/prompts.txt" \
  --height 1024 --width 1024 --num-inference-steps 9 --guidance-scale 0 --seed 42 \
  --output-format npy --output-path "$work/out" 2>&1 | tee "$work/mmgen.log" |
  grep -E "upload|load|encode|denoise|decode|write|peak|device|text encoder" || true
python3 - "$work/mmgen.log" <<'PY'
import re, statistics, sys
stages = {"encode": [], "denoise": [], "decode": []}
per_step = []
for line in open(sys.argv[1]):
    m = re.search(r"info (encode|denoise|decode): (?:\d+ steps in )?([0-9.]+) s(?:, ([0-9.]+) s/step)?", line)
    if m:
        stages[m.group(1)].append(float(m.group(2)))
        if m.group(3): per_step.append(float(m.group(3)))
steady = lambda v: statistics.median(v[1:]) if len(v) > 1 else v[0]
total = [sum(x) for x in zip(stages["encode"], stages["denoise"], stages["decode"])]
print("mmgen-zimage-turbo", {"total_s(encode+denoise+decode), steady": round(steady(total), 4),
      "per_request": [round(t, 4) for t in total], "s/step": steady(per_step),
      "encode_s": steady(stages["encode"]), "decode_s": steady(stages["decode"])})
PY
python3 "$anchor" "$tokenizer"
