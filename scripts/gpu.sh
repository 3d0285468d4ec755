#!/usr/bin/env bash
# Builds the CUDA code and runs the GPU tests and benchmarks in one go, on a machine with an
# NVIDIA Hopper GPU, nvcc, cmake, ninja and python3 with torch (for the yardsticks). No OpenCV
# needed (MMGEN_GPU_BENCH=0 skips the benchmarks). Results and logs go to $OUT (default out/gpu). The fixture checks read
# ../shared/fixtures, or .gpu-fixtures/ where ../shared does not travel (copy
# ../shared/fixtures/wan-tiny/reference into .gpu-fixtures/wan-tiny/reference and carry it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

if [ ! -f build-cuda/build.ninja ]; then
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_CUDA=ON \
    -DMMGEN_OPENCV=OFF -DMMGEN_TESTS=OFF -DMMGEN_BENCH=OFF > "$OUT/configure.log"
fi
# Everything the CUDA build has: the mmgen executable, the GPU tests and benchmarks.
cmake --build build-cuda 2>&1 |
  tee "$OUT/build.log" | grep -E "error|warning|spill|C7515" || true

# The Hopper kernel must run on the warpgroup MMA: count HGMMA instructions in its SASS.
if command -v cuobjdump > /dev/null; then
  echo "HGMMA instructions in mmgen_attention: $(cuobjdump -sass build-cuda/libmmgen_attention.a | grep -c HGMMA || true)"
fi

fixtures=../shared/fixtures
[ -d .gpu-fixtures ] && fixtures=.gpu-fixtures
export MMGEN_FIXTURES="$PWD/$fixtures"

echo "== GPU tests"
status=0
(cd build-cuda && ctest -L gpu -V) 2>&1 | tee "$OUT/tests.log" || status=1

# MMGEN_GPU_SANITIZE=1: the kernel tests under compute-sanitizer's four tools too.
if [ "${MMGEN_GPU_SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck synccheck initcheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 9 build-cuda/tests/cuda/flash_attention_cuda_test \
      > "$OUT/sanitize_$tool.log" 2>&1 || status=1
    echo "compute-sanitizer $tool: $(grep -E "SUMMARY" "$OUT/sanitize_$tool.log" | tail -1)"
  done
  compute-sanitizer --tool memcheck --error-exitcode 9 build-cuda/tests/cuda/sparse_attention_cuda_test \
    > "$OUT/sanitize_sparse.log" 2>&1 || status=1
  echo "compute-sanitizer memcheck (sparse backends): $(grep SUMMARY "$OUT/sanitize_sparse.log")"
  compute-sanitizer --tool memcheck --error-exitcode 9 build-cuda/tests/cuda/wan_transformer_cuda_test \
    > "$OUT/sanitize_transformer.log" 2>&1 || status=1
  echo "compute-sanitizer memcheck (transformer): $(grep SUMMARY "$OUT/sanitize_transformer.log")"
  compute-sanitizer --tool memcheck --error-exitcode 9 build-cuda/tests/cuda/svg2_cuda_test --quick \
    > "$OUT/sanitize_svg2.log" 2>&1 || status=1
  echo "compute-sanitizer memcheck (SVG2): $(grep SUMMARY "$OUT/sanitize_svg2.log")"
  for test in paged_attention_cuda_test umt5_encoder_cuda_test; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "build-cuda/tests/cuda/$test" \
      > "$OUT/sanitize_$test.log" 2>&1 || status=1
    echo "compute-sanitizer memcheck ($test): $(grep SUMMARY "$OUT/sanitize_$test.log")"
  done
fi

# MMGEN_GPU_BENCH=0: tests and the fixture check only (a few minutes instead of ten).
if [ "${MMGEN_GPU_BENCH:-1}" = 1 ]; then
echo "== attention benchmark"
dump="$(mktemp -d)"
build-cuda/bench/cuda/flash_attention_cuda_bench --dump "$dump" | tee "$OUT/attention_bench.txt"
python3 bench/cuda/torch_attention_reference.py "$dump" "$OUT" build-cuda/bench/cuda/libmmgen_attention.so |
  tee "$OUT/attention_torch.txt"
rm -rf "$dump"

echo "== paged text-encoder attention and UMT5 benchmark (torch SDPA on the same ragged shapes)"
build-cuda/bench/cuda/paged_attention_cuda_bench --json "$OUT/paged_cases.json" | tee "$OUT/paged_bench.txt"
python3 bench/cuda/torch_paged_reference.py "$OUT/paged_cases.json" | tee "$OUT/paged_torch.txt"

echo "== every GPU DiT attention backend at Wan2.1-1.3B's self-attention shape"
build-cuda/bench/cuda/sparse_attention_cuda_bench --repeats 10 | tee "$OUT/sparse_attention_bench.txt"

echo "== the 1.3B transformer's products in bf16 and in FP8 (e4m3), with the cost of quantizing"
build-cuda/bench/cuda/gemm_fp8_cuda_bench | tee "$OUT/gemm_fp8_bench.txt"

echo "== Wan transformer benchmark (dense, STA, VSA)"
build-cuda/bench/cuda/wan_transformer_cuda_bench --repeats 5 | tee "$OUT/wan_transformer_bench.txt"
echo "== a rank-64 LoRA on every linear layer of the 1.3B transformer: none, merged, at run time"
echo "   (diffusers beside it, unfused and fused, where diffusers and peft are installed)"
build-cuda/bench/cuda/wan_lora_cuda_bench --repeats 5 --lora-file /tmp/mmgen_wan_lora.safetensors |
  tee "$OUT/wan_lora_bench.txt"
if python3 -c "import diffusers, peft" 2> /dev/null; then
  python3 bench/cuda/diffusers_wan_lora.py /tmp/mmgen_wan_lora.safetensors 5 |
    tee "$OUT/diffusers_wan_lora.txt"
fi
echo "== Wan VAE decoder: the convolution kernel alone, then wan-tiny and Wan2.1-sized 480x832x81 decodes"
build-cuda/bench/cuda/conv3d_cuda_bench | tee "$OUT/conv3d_bench.txt" || status=1
build-cuda/bench/cuda/wan_vae_cuda_bench --repeats 3 | tee "$OUT/wan_vae_bench.txt"
fi
echo "== mmgen generate --device cuda on the wan-tiny fixture (seed 42) against diffusers"
build-cuda/mmgen generate --device cuda --model-path examples/models/wan-tiny \
  --prompt "a red fox running through snow" --negative-prompt "blurry, low quality, static" \
  --height 32 --width 48 --num-frames 5 --num-inference-steps 4 --guidance-scale 5 \
  --max-sequence-length 24 --seed 42 --output-format npy --output-path "$OUT" \
  --output-file-name fixture_cuda.npy --log-level warn || status=1
python3 - "$OUT/fixture_cuda.npy" "$MMGEN_FIXTURES/wan-tiny/reference/reference.safetensors" <<'PY' || status=1
import sys, numpy as np
from safetensors.numpy import load_file
ours = np.load(sys.argv[1]).astype(np.float64)
ref = load_file(sys.argv[2])["pipeline.video_seed42"].astype(np.float64)
error = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
print(f"CLI --device cuda video vs diffusers (seed 42): relative error {error:.2e}, "
      f"max abs diff {np.abs(ours - ref).max():.2e} (bound: relative 1e-2)")
sys.exit(0 if error < 1e-2 else 1)
PY

echo "== --device auto (the default): a CUDA build on this GPU runs there, and says so"
build-cuda/mmgen backends | head -2 || true
build-cuda/mmgen generate --model-path examples/models/wan-tiny --prompt "a red fox" \
  --height 32 --width 32 --num-frames 1 --num-inference-steps 2 --output-format npy \
  --output-path /tmp/mmgen-auto --overwrite > /tmp/mmgen-auto.log 2>&1 || status=1
grep "device:" /tmp/mmgen-auto.log || true
grep -q "device: cuda (auto: " /tmp/mmgen-auto.log || { echo "FAIL: no --device did not run on the GPU"; status=1; }

# Several GPUs (--gpus, issue 24) on a machine with two or more: the same wan-tiny request on one
# GPU, on two (Ulysses) and on two with --cfg-parallel gives the same video to the byte.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  echo "== --gpus 2 (Ulysses, then CFG parallel) against one GPU on wan-tiny"
  for run in "1:" "2:" "2:--cfg-parallel"; do
    gpus=${run%%:*} extra=${run#*:}
    timeout 120 build-cuda/mmgen generate --device cuda --model-path examples/models/wan-tiny \
      --prompt "a red fox" --height 64 --width 96 --num-frames 9 --num-inference-steps 3 \
      --guidance-scale 4 --seed 3 --gpus "$gpus" $extra --output-format npy --output-path "$OUT" \
      --output-file-name "gpus${gpus}${extra:+_cfg}.npy" --overwrite --log-level warn || status=1
  done
  for file in gpus2.npy gpus2_cfg.npy; do
    if cmp -s "$OUT/gpus1.npy" "$OUT/$file"; then echo "$file: identical to one GPU"
    else echo "FAIL: $file differs from the one-GPU video"; status=1; fi
  done
fi

[ "$status" = 0 ] || echo "gpu.sh: GPU TESTS FAILED (see $OUT/tests.log)"
exit "$status"
