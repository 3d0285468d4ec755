#!/usr/bin/env bash
# A/B of two builds of the Z-Image-Turbo-sized forward on one GPU: runs the two
# zimage_transformer_cuda_bench binaries alternately ROUNDS times (A, B, A, B, ...), each a median
# of REPEATS forwards, and prints every median and the median of each side. Machines of one kind
# differ by 4-5% (docs/performance-history.md), so only a same-machine, interleaved comparison says what a
# change did.
# usage: bench/cuda/zimage_forward_ab.sh BENCH_A BENCH_B [ROUNDS=3] [REPEATS=9]
set -euo pipefail
a="$1" b="$2" rounds="${3:-3}" repeats="${4:-9}"
declare -a times_a times_b
for ((round = 1; round <= rounds; ++round)); do
  for side in a b; do
    binary=$a
    [ "$side" = b ] && binary=$b
    median=$("$binary" --repeats "$repeats" | sed -n 's/.*median \([0-9.]*\) s.*/\1/p')
    echo "round $round $side: forward median $median s"
    if [ "$side" = a ]; then times_a+=("$median"); else times_b+=("$median"); fi
  done
done
python3 - "${times_a[*]}" "${times_b[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"A: median {ma:.4f} s (range {min(a):.4f}-{max(a):.4f}); "
      f"B: median {mb:.4f} s (range {min(b):.4f}-{max(b):.4f}); B/A {mb / ma:.3f}")
PY
