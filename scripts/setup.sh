#!/usr/bin/env bash
# Installs the Debian packages mmgen builds with. Idempotent: packages already present are skipped,
# so a second run does nothing. Needs root (or sudo) only when something is missing.
#   scripts/setup.sh [--executable] [PACKAGE...]
# --executable (demo.sh): only what the mmgen executable needs: the compiler and CMake/Ninja, CLI11,
# yaml-cpp, nlohmann-json, Eigen, spdlog/fmt, and of OpenCV the four modules mmgen calls (core,
# imgproc, imgcodecs, videoio: PNG/JPEG/WebP and MP4 output) rather than libopencv-dev, which pulls
# in every module (VTK, contrib, ...: 399 packages and 314 MB to download beside the 274 and
# 222 MB of the four). Without it, also what the tests and benchmarks need (GoogleTest, GoogleMock,
# Google Benchmark) and libomp-dev (clang's OpenMP, for tsan.sh and fuzz.sh). Further arguments
# name packages a script needs besides (scripts/tsan.sh: clang).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libeigen3-dev libspdlog-dev libfmt-dev libssl-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev libopencv-videoio-dev)
if [ "${1:-}" = "--executable" ]; then
  shift
else
  packages+=(libgtest-dev libgmock-dev libbenchmark-dev libomp-dev)
fi
packages+=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build dependencies present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
