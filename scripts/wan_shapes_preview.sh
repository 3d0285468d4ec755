#!/usr/bin/env bash
# Redraws docs/wan-shapes-preview.png: the eight demo prompts of examples/models/wan-shapes with
# demo.sh's settings (128x128, 20 steps, guidance 4, max_sequence_length 32, empty negative
# prompt, seed 1), left to right and top to bottom in a 4x2 grid, as the model's README lists
# them. Needs a build (scripts/build.sh), python3 and `convert FILE.png ppm:-` (ImageMagick) to
# read the tiles back.
set -euo pipefail
cd "$(dirname "$0")/.."
MMGEN=${MMGEN:-build/mmgen}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/prompts.txt" <<'PROMPTS'
a red circle on a blue background
a blue square on a yellow background
a yellow triangle on a purple background
a white circle on a black background
a purple square on a white background
an orange triangle on a green background
a green circle on a red background
a black square on a yellow background
PROMPTS
"$MMGEN" generate --model-path examples/models/wan-shapes --prompt-file-path "$work/prompts.txt" \
  --negative-prompt "" --height 128 --width 128 --num-frames 1 --num-inference-steps 20 \
  --guidance-scale 4.0 --max-sequence-length 32 --seed 1 --output-path "$work" \
  --output-file-name tile --quiet
for i in 0 1 2 3 4 5 6 7; do convert "$work/tile_$i.png" ppm:- > "$work/tile_$i.ppm"; done
python3 - "$work" docs/wan-shapes-preview.png <<'PYTHON'
import struct, sys, zlib
work, out = sys.argv[1], sys.argv[2]
def read_ppm(path):  # binary P6, maxval 255
    data = open(path, "rb").read()
    fields, at = [], 0
    while len(fields) < 4:
        while data[at:at + 1].isspace(): at += 1
        if data[at:at + 1] == b"#":
            at = data.index(b"\n", at)
            continue
        end = at
        while not data[end:end + 1].isspace(): end += 1
        fields.append(data[at:end]); at = end
    assert fields[0] == b"P6" and fields[3] == b"255", path
    width, height = int(fields[1]), int(fields[2])
    return width, height, data[at + 1:at + 1 + width * height * 3]
tiles = [read_ppm(f"{work}/tile_{i}.ppm") for i in range(8)]
w, h = tiles[0][0], tiles[0][1]
rows = []
for grid_row in range(2):
    for y in range(h):
        line = b"".join(tiles[grid_row * 4 + c][2][y * w * 3:(y + 1) * w * 3] for c in range(4))
        rows.append(b"\0" + line)
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4 * w, 2 * h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))
open(out, "wb").write(png)
PYTHON
echo "wrote docs/wan-shapes-preview.png"
