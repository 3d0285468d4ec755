// CUDA-event timing the GPU benchmarks share: one run of some GPU work between two events, and the
// median of repeated runs after warm-up runs (the first call of a product picks its algorithm).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "core/cuda/cuda_check.h"

namespace mmgen::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Milliseconds of one run of `work` on `stream`, between two events recorded there.
inline double event_ms(const std::function<void()>& work, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  MMGEN_CUDA_CHECK(cudaEventCreate(&start));
  MMGEN_CUDA_CHECK(cudaEventCreate(&stop));
  MMGEN_CUDA_CHECK(cudaEventRecord(start, stream));
  work();
  MMGEN_CUDA_CHECK(cudaEventRecord(stop, stream));
  MMGEN_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MMGEN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  MMGEN_CUDA_CHECK(cudaEventDestroy(start));
  MMGEN_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

// The median of `repeats` timed runs of `work`, after `warmups` untimed ones.
inline double median_event_ms(const std::function<void()>& work, int repeats, int warmups = 1,
                              cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmups; ++i) work();
  MMGEN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) times.push_back(event_ms(work, stream));
  return median(times);
}

}  // namespace mmgen::bench
