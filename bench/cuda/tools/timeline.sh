#!/usr/bin/env bash
# Runs a command under the CUPTI timeline (bench/cuda/tools/cupti_timeline.cpp) on the GPU host:
#   bench/cuda/tools/timeline.sh REPORT_FILE COMMAND [ARGS...]
# Builds the injection library against the CUPTI it finds (the toolkit's extras/CUPTI or the one
# pip's nvidia packages ship with torch), picking the newest kernel/memcpy/memset record layouts
# its header declares.
set -euo pipefail
report="$1"
shift
here="$(cd "$(dirname "$0")" && pwd)"
header="$( (find /usr/local/cuda/ /opt /usr/lib /usr/local/lib -name cupti_activity.h 2>/dev/null ||
  true) | head -1)"
[ -n "$header" ] || { echo "timeline.sh: no CUPTI header (cupti_activity.h) on this machine" >&2; exit 1; }
include="$(dirname "$header")"
library="$( (find "$include/.." -maxdepth 3 -name 'libcupti.so*' 2>/dev/null || true) | head -1)"
[ -n "$library" ] || { echo "timeline.sh: no libcupti.so beside $include" >&2; exit 1; }
newest() { grep -oE "\\b$1[0-9]*\\b" "$header" | sort -V | tail -1; }
build="${TMPDIR:-/tmp}/cupti_timeline"
mkdir -p "$build"
g++ -std=c++17 -O2 -shared -fPIC -I"$include" -I/usr/local/cuda/include \
  -DTIMELINE_KERNEL_RECORD="$(newest CUpti_ActivityKernel)" \
  -DTIMELINE_MEMCPY_RECORD="$(newest CUpti_ActivityMemcpy)" \
  -DTIMELINE_MEMSET_RECORD="$(newest CUpti_ActivityMemset)" \
  "$here/cupti_timeline.cpp" "$library" -Wl,-rpath,"$(dirname "$library")" \
  -o "$build/libcupti_timeline.so"
CUDA_INJECTION64_PATH="$build/libcupti_timeline.so" TIMELINE_OUT="$report" "$@"
