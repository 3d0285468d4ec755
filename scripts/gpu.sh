#!/usr/bin/env bash
# Builds the CUDA code and runs the GPU tests and benchmarks in one go, on a machine with an
# NVIDIA Hopper GPU, nvcc, cmake, ninja and python3 with torch (for the yardsticks). No OpenCV
# needed. Results and logs go to $OUT (default out/gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

if [ ! -f build-cuda/build.ninja ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_CUDA=ON \
    -DMMGEN_OPENCV=OFF -DMMGEN_TESTS=OFF -DMMGEN_BENCH=OFF > "$OUT/configure.log"
fi
cmake --build build-cuda --target flash_attention_cuda_test flash_attention_cuda_bench \
  mmgen_attention wan_transformer_cuda_test wan_transformer_cuda_bench 2>&1 |
  tee "$OUT/build.log" | grep -E "error|warning|spill|C7515" || true

# The Hopper kernel must run on the warpgroup MMA: count HGMMA instructions in its SASS.
if command -v cuobjdump > /dev/null; then
  echo "HGMMA instructions in mmgen_cuda: $(cuobjdump -sass build-cuda/libmmgen_cuda.a | grep -c HGMMA || true)"
fi

echo "== GPU tests"
status=0
(cd build-cuda && ctest -L gpu -V) 2>&1 | tee "$OUT/tests.log" || status=1

echo "== attention benchmark"
dump="$(mktemp -d)"
build-cuda/bench/cuda/flash_attention_cuda_bench --dump "$dump" | tee "$OUT/attention_bench.txt"
python3 bench/cuda/torch_attention_reference.py "$dump" "$OUT" build-cuda/bench/cuda/libmmgen_attention.so |
  tee "$OUT/attention_torch.txt"
rm -rf "$dump"

echo "== Wan transformer benchmark"
build-cuda/bench/cuda/wan_transformer_cuda_bench --repeats 5 | tee "$OUT/wan_transformer_bench.txt"
[ "$status" = 0 ] || echo "gpu.sh: GPU TESTS FAILED (see $OUT/tests.log)"
exit "$status"
