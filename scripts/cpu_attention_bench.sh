#!/usr/bin/env bash
# The CPU attention benchmarks of docs/performance-history.md on any Linux machine with cmake, ninja,
# Eigen and Google Benchmark (no OpenCV, no tests): a CPU-only build in build-cpu-bench/, then
# `fa` and torch_sdpa against Eigen's GEMM and the sparse backends against `fa`, each with
# repetitions in random interleaving (the yardstick sees the load the kernels see), on
# MMGEN_BENCH_THREADS threads (default 2) pinned to as many distinct physical cores. Results go to
# $OUT (default out/cpu-bench); MMGEN_BENCH_SPARSE=0 skips the sparse rows.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/cpu-bench}"
mkdir -p "$OUT"
threads="${MMGEN_BENCH_THREADS:-2}"

lscpu > "$OUT/cpu.txt"
if [ ! -f build-cpu-bench/build.ninja ]; then
  cmake -S . -B build-cpu-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_OPENCV=OFF \
    -DMMGEN_TESTS=OFF > "$OUT/configure.log"
fi
cmake --build build-cpu-bench --target attention_bench > "$OUT/build.log" || {
  tail -20 "$OUT/build.log"
  echo "cpu_attention_bench: the build failed (is Google Benchmark installed? see $OUT)"
  exit 1
}

# One logical CPU from each of the first $threads physical cores (SMT siblings would share one
# core's FMA units and halve the yardstick).
cpus=$(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | sort -t, -k3,3n -k2,2n -u | cut -d, -f1 |
  head -n "$threads" | paste -sd,)
echo "threads: $threads on CPUs $cpus" | tee "$OUT/setup.txt"
run() {
  OMP_NUM_THREADS="$threads" OMP_PROC_BIND=true taskset -c "$cpus" \
    build-cpu-bench/bench/attention_bench --benchmark_repetitions=3 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true "$@"
}
run --benchmark_filter='BM_EigenGemm|BM_Fa|BM_TorchSdpa' | tee "$OUT/fa.txt"
if [ "${MMGEN_BENCH_SPARSE:-1}" = 1 ]; then
  run --benchmark_filter='BM_Sparse' | tee "$OUT/sparse.txt"
fi
