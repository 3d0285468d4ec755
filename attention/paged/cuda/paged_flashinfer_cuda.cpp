// flashinfer on the GPU (SGLang flashinfer_backend.py over FlashInfer's wrappers), plan once per
// forward, run per layer:
//  - plan (init_forward_metadata): qo_indptr over the new tokens; the paged KV in FlashInfer's CSR
//    form with page size 1 (kv_indptr, kv_indices = token slots) over the prefix lengths when the
//    ragged path is on, over the whole sequences otherwise (and always for a decode);
//  - extend, ragged path: new tokens attend the new tokens from the packed k/v (causal per
//    layer); only when a request has a cached prefix does a paged pass attend the prefix (no
//    causal mask: it lies before every query), and the two partial results merge by LSE
//    (merge_state). K/V are saved afterwards; encoder-only layers take the ragged path only;
//  - extend, paged-only path: save K/V first, then one paged attention over everything;
//  - decode: save K/V, then the paged pass over the whole sequences (split-KV).

#include "attention/paged/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class FlashInferBackendCuda final : public SlotBackendCuda {
 public:
  using SlotBackendCuda::SlotBackendCuda;
  std::string_view name() const override { return "flashinfer"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    const bool decoder = layer.type == attention::paged::AttentionType::Decoder;
    PagedAttentionParams p = query_params(io, layer, batch, true);
    if (!ragged_ && decoder) {  // paged only
      read_keys_from_pool(p, io, layer, batch, save_kv_cache);
      run_extend(p);
      return;
    }
    // Ragged: the new tokens against themselves, at their positions after the prefix.
    p.source = KeySource::Packed;
    p.kv_pos0 = at(sections_.q_pos0);
    p.kv_len = at(sections_.q_len);
    p.kv_start = at(sections_.q_start);
    if (!batch.has_prefix()) {
      run_extend(p);
    } else {
      check(sections_.indices >= 0,
            "GPU flashinfer paged attention layer {}: a cached prefix needs the batch's request "
            "table",
            layer.layer_id);
      const int64_t rows = batch.num_tokens * layer.num_q_heads;
      DeviceBuffer lse(size_t(2 * rows) * 4), prefix_out(size_t(rows * layer.head_dim) * 2);
      p.lse = lse.as<float>();
      run_extend(p);
      PagedAttentionParams prefix = p;
      prefix.out = prefix_out.data();
      prefix.out_stride = layer.num_q_heads * layer.head_dim;
      prefix.lse = lse.as<float>() + rows;
      prefix.causal = false;
      set_pool_keys(prefix, layer);
      set_decode_keys(prefix, layer);
      run_extend(prefix);
      merge_attention_states(p.out, p.out_stride, p.lse, prefix.out, prefix.out_stride, prefix.lse,
                             batch.num_tokens, layer.num_q_heads, layer.head_dim, stream_);
    }
    if (decoder && save_kv_cache) save_kv(io, layer, batch);
  }

 protected:
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    const bool decode = batch.mode == attention::paged::ForwardMode::Decode;
    ragged_ = !decode && (options_.flashinfer_use_ragged || !batch.req_to_token);
    add_slot_indices(batch, ragged_ ? batch.extend_prefix_lens : batch.seq_lens, builder, s, graph);
  }

 private:
  bool ragged_ = true;
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_flashinfer_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<FlashInferBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
