#!/usr/bin/env bash
# Compiles the CUDA kernels with their GPU tests and benchmarks into build-cuda/ when nvcc is found
# (/usr/local/cuda/bin or PATH); says so and does nothing otherwise. No GPU is needed to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc="$(command -v nvcc || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  echo "build_cuda: no nvcc found; CUDA code not compiled (install the CUDA toolkit to check it)"
  exit 0
fi
if [ ! -f build-cuda/build.ninja ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_CUDA=ON -DMMGEN_OPENCV=OFF \
    -DMMGEN_TESTS=OFF -DMMGEN_BENCH=OFF -DCMAKE_CUDA_COMPILER="$nvcc" > /dev/null
fi
# Everything the CUDA build has: the layers with their CUDA code, mmgen, GPU tests and benchmarks.
cmake --build build-cuda --parallel "$(nproc)"
echo "build_cuda: CUDA kernels, GPU tests and benchmarks compiled (run them with scripts/gpu.sh)"
