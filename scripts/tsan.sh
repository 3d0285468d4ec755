#!/usr/bin/env bash
# Builds the tests of the OpenMP kernels with ThreadSanitizer (cmake --preset tsan: clang with
# LLVM's libomp, into build-tsan/) and runs them with ctest at OMP_NUM_THREADS=2; a failed test or
# any data race report fails the run. Not part of CI (it takes long); run it after changing
# parallel code. A second run rebuilds only what changed.
#   scripts/tsan.sh [TEST_EXECUTABLE...]   (default: the list below)
#
# TSan sees only instrumented code, and libomp is not instrumented: without help every barrier,
# reduction and the end of each parallel region would look unsynchronised. Archer (libarcher.so,
# from libomp-dev) is the OpenMP tool that tells TSan about them; libomp loads it through
# OMP_TOOL_LIBRARIES. The preset builds without OpenCV, whose FFmpeg libraries would load GCC's
# libgomp beside libomp.
set -euo pipefail
cd "$(dirname "$0")/.."

tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(flash_attention_test sage_attention_test sla_attention_test
  sta_attention_test svg2_attention_test vmoba_attention_test vsa_attention_test
  paged_attention_test wan_transformer_test wan_vae_test vae_tiling_test wan_pipeline_test
  umt5_test qwen3_test random_test scheduler_test tensor_test)

./scripts/setup.sh clang libclang-rt-dev  # libclang-rt-dev: clang's sanitizer runtimes
[ -f build-tsan/build.ninja ] || cmake --preset tsan
cmake --build build-tsan --parallel "$(nproc)" --target mmgen "${tests[@]}"

archer=$(clang++ -print-resource-dir)/../../libarcher.so
[ -f "$archer" ] || { echo "tsan: $archer not found (libomp-dev)"; exit 1; }
logs="$PWD/build-tsan/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
export OMP_TOOL_LIBRARIES="$archer"
export TSAN_OPTIONS="ignore_noninstrumented_modules=1:second_deadlock_stack=1:log_path=$logs/tsan"

labels=$(IFS='|'; echo "${tests[*]}")
status=0
(cd build-tsan && ctest --output-on-failure --parallel "$(nproc)" --timeout 1800 --no-tests=error \
  -L "^($labels)\$") || status=1
if compgen -G "$logs/*" > /dev/null; then
  echo "tsan: reports:"
  cat "$logs"/*
  status=1
fi
exit "$status"
