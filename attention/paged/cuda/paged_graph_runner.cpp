#include "attention/paged/cuda/paged_graph_runner.h"

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

std::vector<int64_t> DecodeGraphRunner::default_buckets(int64_t max_batch_size) {
  std::vector<int64_t> buckets;
  for (int64_t size : {1, 2, 4, 8})
    if (size < max_batch_size) buckets.push_back(size);
  for (int64_t size = 16; size < max_batch_size; size += 8) buckets.push_back(size);
  buckets.push_back(max_batch_size);
  return buckets;
}

DecodeGraphRunner::DecodeGraphRunner(PagedBackendCuda& backend, int64_t max_batch_size, Step step,
                                     std::vector<int64_t> buckets)
    : backend_(backend), step_(std::move(step)), buckets_(std::move(buckets)) {
  check(max_batch_size >= 1, "CUDA-graph decode needs a batch size of at least 1, got {}",
        max_batch_size);
  if (buckets_.empty()) buckets_ = default_buckets(max_batch_size);
  std::sort(buckets_.begin(), buckets_.end());
  check(buckets_.front() >= 1 && buckets_.back() <= max_batch_size,
        "CUDA-graph decode: buckets must lie in [1, {}]", max_batch_size);
  MMGEN_CUDA_CHECK(cudaStreamCreate(&stream_));
  backend_.set_stream(stream_);
  backend_.init_cuda_graph_state(max_batch_size, max_batch_size);
  for (int64_t bucket : buckets_) {
    const ForwardBatch batch =
        padded(ForwardBatch{.mode = attention::paged::ForwardMode::Decode}, bucket);
    backend_.init_forward_metadata_capture_cuda_graph(bucket, bucket, batch);
    step_(bucket, batch);  // warm-up outside the capture: one-time kernel attributes, plans
    MMGEN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph = nullptr;
    MMGEN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      step_(bucket, batch);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    MMGEN_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    MMGEN_CUDA_CHECK(status);
    graphs_.push_back(exec);
  }
}

DecodeGraphRunner::~DecodeGraphRunner() {
  for (cudaGraphExec_t exec : graphs_) cudaGraphExecDestroy(exec);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  backend_.set_stream(nullptr);
}

int64_t DecodeGraphRunner::bucket_for(int64_t batch_size) const {
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), batch_size);
  check(batch_size >= 1 && it != buckets_.end(),
        "CUDA-graph decode: a batch of {} requests exceeds the largest captured size {}",
        batch_size, buckets_.back());
  return *it;
}

ForwardBatch DecodeGraphRunner::padded(const ForwardBatch& batch, int64_t bucket) const {
  ForwardBatch out = batch;
  const size_t real = size_t(batch.batch_size());
  out.mode = attention::paged::ForwardMode::Decode;
  out.seq_lens.resize(size_t(bucket), backend_.cuda_graph_seq_len_fill_value());
  out.req_pool_indices.resize(real);
  out.req_pool_indices.resize(size_t(bucket), -1);  // no request row: page / slot 0
  out.out_cache_loc.resize(real);
  out.out_cache_loc.resize(size_t(bucket), 0);  // the reserved padding slot
  out.input_ids.clear();
  out.valid_lens.clear();
  out.extend_prefix_lens.clear();
  out.extend_seq_lens.clear();
  out.finish_metadata();
  return out;
}

int64_t DecodeGraphRunner::replay(const ForwardBatch& batch) {
  check(batch.mode == attention::paged::ForwardMode::Decode,
        "CUDA-graph replay takes decode batches only");
  const int64_t bucket = bucket_for(batch.batch_size());
  const size_t index =
      size_t(std::find(buckets_.begin(), buckets_.end(), bucket) - buckets_.begin());
  backend_.set_stream(stream_);
  backend_.init_forward_metadata_replay_cuda_graph(bucket, padded(batch, bucket));
  MMGEN_CUDA_CHECK(cudaGraphLaunch(graphs_[index], stream_));
  return bucket;
}

}  // namespace mmgen::cuda::paged
