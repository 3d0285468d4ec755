// Page-locked host memory behind a Tensor (core/download_queue.h, core/weight_stream.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda/cuda_check.h"
#include "core/tensor.h"

namespace mmgen {
namespace cuda {

// Page-locked host memory (cudaMallocHost): device-to-host copies into it run at full speed and
// asynchronously.
class PinnedStorage final : public Storage {
 public:
  explicit PinnedStorage(size_t bytes) : size_(bytes) {
    MMGEN_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), bytes > 0 ? bytes : 1));
  }
  ~PinnedStorage() override { cudaFreeHost(data_); }
  PinnedStorage(const PinnedStorage&) = delete;
  PinnedStorage& operator=(const PinnedStorage&) = delete;
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cuda

}  // namespace mmgen
