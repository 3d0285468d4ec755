// flashinfer_mla on the GPU (SGLang flashinfer_mla_backend.py; the design is in
// attention/paged/mla_backends.cpp): absorbed multi-head latent attention over a keys-only pool of
// latent rows. The new tokens' rows are saved first; then every query reads its request's whole
// sequence through CSR token slots (FlashInfer's MLA kernel as SGLang plans it, page size 1), with
// the latent kernel (paged_kernels.h) for extend and split-KV decode alike.
#include "attention/paged/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class FlashInferMlaBackendCuda final : public SlotBackendCuda {
 public:
  using SlotBackendCuda::SlotBackendCuda;
  std::string_view name() const override { return "flashinfer_mla"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    PagedAttentionParams p = query_params(io, layer, batch, true);
    read_keys_from_pool(p, io, layer, batch, save_kv_cache);
    run_extend(p);
  }

 protected:
  attention::ModelAttention layer_kind() const override {
    return attention::ModelAttention::LatentMla;
  }
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    add_slot_indices(batch, batch.seq_lens, builder, s, graph);  // whole sequences, from the pool
  }
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_flashinfer_mla_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<FlashInferMlaBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
