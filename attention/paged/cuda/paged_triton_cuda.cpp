// triton on the GPU (SGLang triton_backend.py over triton_ops/extend_attention.py and
// decode_attention.py):
//  - metadata: qo_indptr over the new tokens and the CSR kv_indptr / kv_indices (token slots)
//    over the *prefix* lengths for an extend, over the whole sequences for a decode;
//  - extend: one pass per query tile and one online softmax over the cached prefix, read through
//    kv_indices from the pool, then the new tokens straight from the packed k/v (causal), so no
//    merge of partial results; K/V saved to the pool afterwards. Encoder-only layers attend the
//    packed k/v alone;
//  - decode: save K/V, then split-KV over the whole sequences (stage 1 partial results and LSEs
//    per split, stage 2 their LSE merge).

#include "attention/paged/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class TritonBackendCuda final : public SlotBackendCuda {
 public:
  using SlotBackendCuda::SlotBackendCuda;
  std::string_view name() const override { return "triton"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    const bool decoder = layer.type == attention::paged::AttentionType::Decoder;
    PagedAttentionParams p = query_params(io, layer, batch, true);
    if (!decoder || !batch.has_prefix()) {  // the new tokens alone, from the packed k/v
      p.source = KeySource::Packed;
      p.kv_pos0 = at(sections_.q_pos0);
      p.kv_len = at(sections_.q_len);
      p.kv_start = at(sections_.q_start);
      run_extend(p);
    } else {
      check(sections_.indices >= 0,
            "GPU triton paged attention layer {}: a cached prefix needs the batch's request table",
            layer.layer_id);
      p.k_new = p.k, p.v_new = p.v, p.k_new_stride = p.k_stride, p.v_new_stride = p.v_stride;
      set_pool_keys(p, layer);
      set_decode_keys(p, layer);  // the prefix's slots ...
      p.source = KeySource::PrefixThenPacked;
      p.kv_len = at(sections_.seq_len);  // ... then the new tokens
      run_extend(p);
    }
    if (decoder && save_kv_cache) save_kv(io, layer, batch);
  }

 protected:
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    const bool decode = batch.mode == attention::paged::ForwardMode::Decode;
    add_slot_indices(batch, decode ? batch.seq_lens : batch.extend_prefix_lens, builder, s, graph);
  }
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_triton_backend_cuda(DeviceKVPool* pool,
                                                           const PagedBackendCudaOptions& options) {
  return std::make_unique<TritonBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
