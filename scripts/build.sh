#!/usr/bin/env bash
# Installs missing build dependencies and builds mmgen in Release under build/.
# A second run only rebuilds what changed.
#   scripts/build.sh             everything: the mmgen executable, the tests and the benchmarks
#   scripts/build.sh TARGET...   only those CMake targets and what they need (demo.sh: mmgen)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build --parallel "$(nproc)" "${targets[@]}"
