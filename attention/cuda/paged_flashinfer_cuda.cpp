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
#include <algorithm>

#include "attention/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class FlashInferBackendCuda final : public PagedBackendCudaBase {
 public:
  using PagedBackendCudaBase::PagedBackendCudaBase;
  std::string_view name() const override { return "flashinfer"; }

  void forward_extend(const DeviceAttentionIo& io, const PagedLayer& layer,
                      const ForwardBatch& batch, bool save_kv_cache) override {
    const bool decoder = layer.type == attention::paged::AttentionType::Decoder;
    PagedAttentionParams p = query_params(io, layer, batch, true);
    if (!ragged_ && decoder) {  // paged only
      check(sections_.indices >= 0,
            "GPU flashinfer paged attention layer {}: a decoder layer needs the batch's request "
            "table",
            layer.layer_id);
      if (save_kv_cache) save_kv(io, layer, batch);
      set_pool_keys(p, layer);
      set_decode_keys(p, layer);
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
    const int64_t bs = batch.batch_size();
    const bool decode = batch.mode == attention::paged::ForwardMode::Decode;
    ragged_ = !decode && (options_.flashinfer_use_ragged || !batch.req_to_token);
    std::vector<int32_t> indptr(size_t(bs), 0), lengths(size_t(bs), 0), indices;
    int64_t total = 0;
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t len = ragged_ ? batch.extend_prefix_lens[size_t(r)] : batch.seq_lens[size_t(r)];
      indptr[size_t(r)] = int32_t(total);
      lengths[size_t(r)] = int32_t(len);
      total += len;
    }
    const int64_t capacity = graph ? graph->batch_size : -1;
    s.kv_start = builder.add(indptr, capacity);
    s.kv_len = builder.add(lengths, capacity);
    if (total == 0 && !graph) return;
    const bool real_rows = std::any_of(batch.req_pool_indices.begin(), batch.req_pool_indices.end(),
                                       [](int64_t r) { return r >= 0; });
    check(batch.req_to_token != nullptr || total == 0 || !real_rows,
          "GPU flashinfer paged attention: the batch reads the pool but has no request table");
    indices.reserve(size_t(total));
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t* slots = request_slots(batch, r);
      for (int64_t j = 0; j < lengths[size_t(r)]; ++j)
        indices.push_back(slots ? int32_t(slots[j]) : 0);  // padding rows read slot 0
    }
    s.indices = builder.add(indices, graph ? graph->indices : -1);
  }

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

 private:
  bool ragged_ = true;
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_flashinfer_backend_cuda(
    DeviceKVPool* pool, const PagedBackendCudaOptions& options) {
  return std::make_unique<FlashInferBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
