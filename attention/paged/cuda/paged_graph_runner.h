// CUDA graphs for paged decode (SGLang's CudaGraphRunner): one graph per batch-size bucket,
// captured once; a decode batch replays the smallest bucket that holds it, padded with rows that
// have sequence length cuda_graph_seq_len_fill_value(), cache slot 0 (the reserved padding slot)
// and no request row (page 0). The step — every layer's decode for `bucket` rows, reading inputs
// from and writing outputs to fixed device buffers the caller owns and fills — is recorded once;
// before each replay the backend's replay hook rewrites the metadata buffers the kernels read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "attention/paged/cuda/paged_backend_cuda.h"

namespace mmgen::cuda::paged {

class DecodeGraphRunner {
 public:
  // step(bucket, batch): launches one decode step for `bucket` rows on backend.stream() (the
  // runner's stream), given the padded batch (for shapes; its metadata is already on the device).
  using Step = std::function<void(int64_t bucket, const ForwardBatch& batch)>;

  // Captures a graph for each of `buckets` (ascending; default 1, 2, 4, 8, then multiples of 8
  // up to max_batch_size).
  DecodeGraphRunner(PagedBackendCuda& backend, int64_t max_batch_size, Step step,
                    std::vector<int64_t> buckets = {});
  ~DecodeGraphRunner();
  DecodeGraphRunner(const DecodeGraphRunner&) = delete;
  DecodeGraphRunner& operator=(const DecodeGraphRunner&) = delete;

  // The bucket a batch of `batch_size` requests replays.
  int64_t bucket_for(int64_t batch_size) const;
  // `batch` padded to `bucket` rows.
  ForwardBatch padded(const ForwardBatch& batch, int64_t bucket) const;
  // Replays the step for a decode batch (inputs already in the step's buffers for its first
  // rows, written on stream()); returns the bucket used. Asynchronous.
  int64_t replay(const ForwardBatch& batch);

  cudaStream_t stream() const { return stream_; }
  const std::vector<int64_t>& buckets() const { return buckets_; }

  static std::vector<int64_t> default_buckets(int64_t max_batch_size);

 private:
  PagedBackendCuda& backend_;
  Step step_;
  std::vector<int64_t> buckets_;
  std::vector<cudaGraphExec_t> graphs_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace mmgen::cuda::paged
