#!/usr/bin/env bash
# Installs missing build dependencies and builds mmgen in Release under build/.
# A second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build --parallel "$(nproc)"
