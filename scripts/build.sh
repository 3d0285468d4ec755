#!/usr/bin/env bash
# Installs missing build dependencies and builds mmgen in Release under build/.
# A second run only rebuilds what changed.
#   scripts/build.sh             everything: the mmgen executable, the tests and the benchmarks
#   scripts/build.sh mmgen       the executable alone (demo.sh): only its packages are installed and
#                                the build is configured without the tests and benchmarks, which a
#                                later full build adds (reusing every object already built)
#   scripts/build.sh TARGET...   those CMake targets and what they need
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$*" = "mmgen" ]; then
  ./scripts/setup.sh --executable
  tests=OFF
else
  ./scripts/setup.sh
  tests=ON
fi
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_TESTS=$tests -DMMGEN_BENCH=$tests
elif [ $tests = ON ] && grep -q '^MMGEN_TESTS:BOOL=OFF' build/CMakeCache.txt; then
  cmake -S . -B build -DMMGEN_TESTS=ON -DMMGEN_BENCH=ON
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build build --parallel "$(nproc)" "${targets[@]}"
