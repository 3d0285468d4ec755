#!/usr/bin/env bash
# Installs the Debian packages mmgen builds with. Idempotent: packages already present are skipped,
# so a second run does nothing. Needs root (or sudo) only when something is missing. Arguments name
# further packages a script needs (scripts/tsan.sh: clang).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libopencv-dev libeigen3-dev libomp-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  "$@")
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
