// What the GPU paged backends share (internal to attention/paged/cuda/): the batch metadata
// both designs upload (per-request lengths, work lists, cache slots) plus each design's own key
// indices, the upload through pinned staging, the CUDA-graph buffers, the KV store and the
// split-KV decode. The designs differ in their key indices (page table vs CSR slots) and in how
// extend reads the keys: paged_fa3_cuda.cpp (fa3 and flex_attention), paged_flashinfer_cuda.cpp,
// paged_triton_cuda.cpp, paged_torch_native_cuda.cpp, paged_dual_chunk_cuda.cpp,
// paged_mla_cuda.cpp (flashinfer_mla; flashmla is the page-table design of paged_fa3_cuda.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/paged/cuda/paged_backend_cuda.h"
#include "attention/paged/cuda/paged_kernels.h"
#include "core/cuda/device_memory.h"

namespace mmgen::cuda::paged {

// int32 sections appended one after another; a section may be padded to a fixed capacity so its
// offset does not depend on the batch (CUDA-graph buffers).
class MetadataBuilder {
 public:
  int64_t add(const std::vector<int32_t>& values, int64_t capacity = -1);
  std::vector<int32_t>& data() { return data_; }

 private:
  std::vector<int32_t> data_;
};

// Pinned host memory for asynchronous uploads: before it is rewritten, the previous upload's
// copy (only that copy, not the work queued after it) is waited for.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  // Copies `values` to `device` (capacity checked by the caller) on `stream`.
  void upload(const std::vector<int32_t>& values, void* device, cudaStream_t stream);

 private:
  int32_t* host_ = nullptr;
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

class PagedBackendCudaBase : public PagedBackendCuda {
 public:
  PagedBackendCudaBase(DeviceKVPool* pool, const PagedBackendCudaOptions& options);

  void init_forward_metadata(const ForwardBatch& batch) override;
  void forward_decode(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override;
  void init_cuda_graph_state(int64_t max_batch_size, int64_t max_num_tokens) override;
  void init_forward_metadata_capture_cuda_graph(int64_t batch_size, int64_t num_tokens,
                                                const ForwardBatch& batch) override;
  void init_forward_metadata_replay_cuda_graph(int64_t batch_size,
                                               const ForwardBatch& batch) override;

 protected:
  // Offsets of the metadata sections (int32 elements; −1: absent) and where they landed.
  struct Sections {
    int64_t q_start = -1, q_len = -1, q_pos0 = -1, seq_len = -1, valid_len = -1, token_request = -1,
            tiles = -1, out_loc = -1, kv_start = -1, kv_len = -1, indices = -1;
    int64_t num_tiles = 0, max_pages = 0;
  };
  // Graph capacities when building into the CUDA-graph buffers; null: sized to the batch.
  struct GraphCapacity {
    int64_t batch_size = 0, indices = 0, max_pages = 0;
  };

  // The kind of layer this design runs (and no other).
  virtual attention::ModelAttention layer_kind() const { return attention::ModelAttention::Plain; }
  // The design's key indices for the batch (sections.indices, kv_start, kv_len, max_pages).
  virtual void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder,
                               Sections& sections, const GraphCapacity* graph) = 0;
  // Entries of the design's key indices for a graph of `max_batch_size` requests.
  virtual int64_t graph_indices_capacity(int64_t max_batch_size) const = 0;
  // How decode reads the pool: the design's key source over the whole sequences.
  virtual void set_decode_keys(PagedAttentionParams& params, const PagedLayer& layer) const = 0;

  const int32_t* at(int64_t offset) const;
  // Checks what every forward needs and fills the query side of the params.
  PagedAttentionParams query_params(const DeviceAttentionIo& io, const PagedLayer& layer,
                                    const ForwardBatch& batch, bool extend) const;
  void set_pool_keys(PagedAttentionParams& params, const PagedLayer& layer) const;
  // A decoder layer's keys for extend: the new tokens' K/V saved to the pool when asked, then
  // `params` pointed at the pool through the design's decode keys (whole sequences). Throws for a
  // batch without a request table.
  void read_keys_from_pool(PagedAttentionParams& params, const DeviceAttentionIo& io,
                           const PagedLayer& layer, const ForwardBatch& batch, bool save_kv_cache);
  // Writes the new tokens' K/V to the pool (decoder layers).
  void save_kv(const DeviceAttentionIo& io, const PagedLayer& layer, const ForwardBatch& batch);
  // Extend attention: the tile kernel where compiled for the head size, else the row kernel.
  void run_extend(const PagedAttentionParams& params);
  // The request's slot of token j (its req_to_token row); null for a padding row.
  static const int64_t* request_slots(const ForwardBatch& batch, int64_t request);
  // Key indices in FlashInfer's CSR form (page size 1), shared by the designs that read slots:
  // request r's first lengths[r] token slots (padding rows read slot 0), with its offset
  // (sections.kv_start) and length (sections.kv_len). Nothing beyond those two sections when no
  // request reads the pool (outside a graph).
  void add_slot_indices(const ForwardBatch& batch, const std::vector<int64_t>& lengths,
                        MetadataBuilder& builder, Sections& sections,
                        const GraphCapacity* graph) const;

  DeviceKVPool* pool_;
  PagedBackendCudaOptions options_;
  Sections sections_;

 private:
  void build(const ForwardBatch& batch, const GraphCapacity* graph, MetadataBuilder& builder);

  bool graph_mode_ = false;
  const int32_t* device_base_ = nullptr;
  DeviceBuffer eager_metadata_, eager_partial_;
  PinnedStaging eager_staging_, graph_staging_;
  GraphCapacity graph_capacity_;
  DeviceBuffer graph_metadata_, graph_partial_;
  size_t graph_metadata_entries_ = 0;
};

// The designs that read the pool through CSR token slots (flashinfer, triton, torch_native): their
// key indices are add_slot_indices' sections (each design chooses the lengths), and decode reads
// every request's run of slots through them.
class SlotBackendCuda : public PagedBackendCudaBase {
 public:
  using PagedBackendCudaBase::PagedBackendCudaBase;

 protected:
  int64_t graph_indices_capacity(int64_t max_batch_size) const override {
    return max_batch_size * options_.max_context_len;
  }
  void set_decode_keys(PagedAttentionParams& p, const PagedLayer&) const override {
    p.source = KeySource::Slots;
    p.kv_pos0 = nullptr;
    p.kv_start = at(sections_.kv_start);
    p.kv_len = at(sections_.kv_len);
    p.indices = at(sections_.indices);
  }
};

std::unique_ptr<PagedBackendCuda> make_fa3_backend_cuda(DeviceKVPool* pool,
                                                        const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_flashinfer_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_triton_backend_cuda(DeviceKVPool* pool,
                                                           const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_torch_native_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_flex_attention_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_dual_chunk_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_flashinfer_mla_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);
std::unique_ptr<PagedBackendCuda> make_flashmla_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options);

}  // namespace mmgen::cuda::paged
