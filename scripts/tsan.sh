#!/usr/bin/env bash
# Builds the tests of the OpenMP kernels with ThreadSanitizer (cmake --preset tsan: clang with
# LLVM's libomp, into build-tsan/) and runs them with ctest at OMP_NUM_THREADS=2, then runs mmgen
# generate and encode on examples/models/wan-shapes with each CPU attention backend; a failed test
# or run, or any data race report, fails the run. Not part of CI (it takes long); run it after
# changing parallel code. A second run rebuilds only what changed.
#   scripts/tsan.sh [TEST_EXECUTABLE...]   (default: the list below, and the runs)
#
# The runs are there because the tests' tensors are small: many kernels go parallel only above a
# size (an OpenMP if clause), which the tests stay below. At 256x256, 5 frames, the transformer,
# text encoder and VAE kernels run on two threads.
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

export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive  # what ctest gives the tests, for the runs

labels=$(IFS='|'; echo "${tests[*]}")
status=0
(cd build-tsan && ctest --output-on-failure --parallel "$(nproc)" --timeout 1800 --no-tests=error \
  -L "^($labels)\$") || status=1

if [ $# -eq 0 ]; then
  out=build-tsan/tsan-outputs
  generate() {
    echo "tsan: mmgen generate $*"
    build-tsan/mmgen generate --model-path examples/models/wan-shapes --prompt "a red circle" \
      --height 256 --width 256 --num-frames 5 --num-inference-steps 2 --output-format npy \
      --output-path "$out" --output-file-name tsan --overwrite --quiet "$@" || status=1
  }
  generate --vae-tiling --vae-tile-size 128 --vae-tile-overlap 32
  generate --attention-backend sparse_video_gen_2_attn
  generate --attention-backend vmoba_attn --attention-backend-config examples/vmoba/vmoba.yaml
  generate --attention-backend video_sparse_attn --attention-backend-config sparsity=0.75
  generate --attention-backend sla_attn
  generate --attention-backend sage_attn
  for backend in torch_native triton flashinfer fa3 flex_attention; do
    echo "tsan: mmgen encode, text encoder attention $backend"
    build-tsan/mmgen encode --model-path examples/models/wan-shapes --prompt "a red circle" \
      --prompt "a red circle on a green background" --prompt "two yellow squares" --page-size 16 \
      --component-attention-backends "text_encoder=$backend" --out "$out/tsan.safetensors" \
      > /dev/null || status=1
  done
fi
if compgen -G "$logs/*" > /dev/null; then
  echo "tsan: reports:"
  cat "$logs"/*
  status=1
fi
exit "$status"
