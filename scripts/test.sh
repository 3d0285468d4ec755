#!/usr/bin/env bash
# Installs missing dependencies, builds mmgen and its tests, and runs the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
cd build
ctest --output-on-failure --parallel "$(nproc)"
