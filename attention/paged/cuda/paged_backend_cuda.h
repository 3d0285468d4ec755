// The paged-attention backend contract on the GPU: the CPU contract (attention/paged/
// paged_backend.h, SGLang's AttentionBackend) with device tensors.
//   init_forward_metadata(batch)  once per forward pass: the batch's metadata (lengths, page
//                                 table or CSR indices, work lists, cache slots) built on the
//                                 host and uploaded in one asynchronous copy;
//   forward_extend / forward_decode per layer, on the backend's stream; decoder layers first
//                                 write the new K/V to the device pool at batch.out_cache_loc;
//   CUDA graphs (decode):         init_cuda_graph_state allocates fixed device buffers once;
//                                 the capture hook writes a batch-size bucket's metadata there
//                                 before the step is captured; the replay hook rewrites them in
//                                 place (one asynchronous copy from pinned memory, no device
//                                 synchronisation) before each replay. Kernels read lengths from
//                                 those buffers, so one graph serves any lengths up to the
//                                 context limit.
// The batch is the CPU ForwardBatch: the host request table (ReqToTokenPool) and allocator give
// the slots; the device pool (DeviceKVPool, captured at construction as SGLang's backends capture
// theirs) holds the rows. batch.kv_pool (the CPU pool) is not read.
// q, k, v are bf16 rows of [heads, head_dim] with token strides (views of a fused QKV product
// need no copy); out is bf16 [num_tokens, num_q_heads, head_dim] rows.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string_view>
#include <vector>

#include "attention/paged/cuda/paged_kv_pool.h"
#include "attention/paged/forward_batch.h"
#include "attention/paged/paged_layer.h"

namespace mmgen::cuda::paged {

using attention::paged::ForwardBatch;
using attention::paged::PagedLayer;

// The additive per-head score bias hook on the device (the GPU form of PagedLayer::bias, which
// must stay null here): fp32 values [num_q_heads, 2·max_len − 1], entry (h, (k − q) + max_len − 1),
// with max_len at least the longest sequence of the batch.
struct DeviceBias {
  const float* values = nullptr;
  int64_t max_len = 0;
};

struct DeviceAttentionIo {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  // Elements between consecutive tokens; 0: packed (heads · head_dim).
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;
  DeviceBias bias;
  // q, k, v and out in float32 (the exact mode; encoder-only layers, the row kernel).
  bool fp32 = false;
};

struct PagedBackendCudaOptions {
  // Decode splits each query's keys over up to this many CTAs (at least kPagedSplitMinKeys keys
  // each), merged by LSE.
  int64_t max_kv_splits = 16;
  bool flashinfer_use_ragged = true;  // flashinfer: ragged + paged extend (false: paged only)
  // Sizes of the CUDA-graph buffers: the longest sequence a captured decode may see, and the most
  // query heads of a layer it runs.
  int64_t max_context_len = 4096;
  int64_t max_q_heads = 64;
  // Tests: the row kernel for extend even where the tile kernel is compiled for the head size.
  bool force_row_kernel = false;
};

class PagedBackendCuda {
 public:
  virtual ~PagedBackendCuda();
  virtual std::string_view name() const = 0;

  virtual void init_forward_metadata(const ForwardBatch& batch) = 0;
  virtual void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                              const ForwardBatch& batch, bool save_kv_cache = true) = 0;
  virtual void forward_decode(const DeviceAttentionIo& io, const PagedLayer& layer,
                              const ForwardBatch& batch, bool save_kv_cache = true) = 0;
  // Idle: nothing; decode → forward_decode; else forward_extend.
  void forward(const DeviceAttentionIo& io, const PagedLayer& layer, const ForwardBatch& batch,
               bool save_kv_cache = true);

  virtual void init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) = 0;
  virtual void init_forward_metadata_capture_cuda_graph(int64_t batch_size, int64_t num_tokens,
                                                        const ForwardBatch& batch) = 0;
  virtual void init_forward_metadata_replay_cuda_graph(int64_t batch_size,
                                                       const ForwardBatch& batch) = 0;
  virtual int64_t cuda_graph_seq_len_fill_value() const { return 1; }

  // Every launch and copy goes to this stream (default: the legacy default stream). Graph
  // capture needs a stream of its own.
  void set_stream(cudaStream_t stream) { stream_ = stream; }
  cudaStream_t stream() const { return stream_; }

 protected:
  cudaStream_t stream_ = nullptr;
};

// Builds a GPU paged backend by catalogue name ("fa3", "flashinfer", "triton", "torch_native",
// "flex_attention", "dual_chunk_flash_attn", "flashinfer_mla", "flashmla"); `pool` may be null for
// encoder-only use (no K/V kept); the MLA designs need a keys-only pool. Throws Error for a name
// without a CUDA implementation.
std::unique_ptr<PagedBackendCuda> make_paged_backend_cuda(
    std::string_view name, DeviceKVPool* pool, const PagedBackendCudaOptions& options = {});

// The paged backends this build runs on CUDA (feeds the catalogue's kernel table), and the head
// sizes they take.
std::vector<std::string_view> cuda_paged_backends();
std::vector<int> cuda_paged_head_sizes();

}  // namespace mmgen::cuda::paged
