// torch_native on the GPU (SGLang torch_native_backend.py), the reference design: per request,
// its whole K/V read from the pool through its request-table row (the new tokens saved first),
// every query at its position over all of them — one query row per CTA (the row kernel, no
// tiles, no split of the keys) as SDPA over the gathered sequence computes it. Encoder-only
// layers read the packed k/v. The metadata is the request rows' token slots (CSR), nothing else.
#include "attention/paged/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

PagedBackendCudaOptions without_splits(PagedBackendCudaOptions options) {
  options.max_kv_splits = 1;  // the reference never splits a sequence's keys
  return options;
}

class TorchNativeBackendCuda final : public SlotBackendCuda {
 public:
  TorchNativeBackendCuda(DeviceKVPool* pool, const PagedBackendCudaOptions& options)
      : SlotBackendCuda(pool, without_splits(options)) {}
  std::string_view name() const override { return "torch_native"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    PagedAttentionParams p = query_params(io, layer, batch, true);
    if (layer.type == attention::paged::AttentionType::EncoderOnly) {
      p.source = KeySource::Packed;
      p.kv_pos0 = nullptr;
      p.kv_len = at(sections_.seq_len);
      p.kv_start = at(sections_.q_start);
    } else {
      read_keys_from_pool(p, io, layer, batch, save_kv_cache);
    }
    paged_attention_rows(p, 1, nullptr, nullptr, stream_);
  }

 protected:
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    // Whole sequences through the request rows; an encoder-only batch (no table) reads the packed
    // k/v and needs no slots.
    const bool slots = batch.req_to_token != nullptr || graph != nullptr;
    add_slot_indices(batch, slots ? batch.seq_lens : std::vector<int64_t>(batch.seq_lens.size(), 0),
                     builder, s, graph);
  }
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_torch_native_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<TorchNativeBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
