#!/usr/bin/env bash
# Installs missing dependencies, builds mmgen and its tests, and runs the whole suite with ctest.
# Where the CUDA toolkit is installed, the CUDA code (kernels, GPU tests and benchmarks) is built
# too, so it keeps compiling; it runs only on a GPU machine (scripts/gpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/build_cuda.sh
cd build
ctest --output-on-failure --parallel "$(nproc)"
