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
#include <algorithm>

#include "attention/cuda/paged_backend_base.h"
#include "core/error.h"

namespace mmgen::cuda::paged {

namespace {

class TritonBackendCuda final : public PagedBackendCudaBase {
 public:
  using PagedBackendCudaBase::PagedBackendCudaBase;
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
      p.source = KeySource::PrefixThenPacked;
      p.k_new = p.k, p.v_new = p.v, p.k_new_stride = p.k_stride, p.v_new_stride = p.v_stride;
      set_pool_keys(p, layer);
      p.kv_pos0 = nullptr;
      p.kv_len = at(sections_.seq_len);
      p.kv_start = at(sections_.kv_start);
      p.indices = at(sections_.indices);
      run_extend(p);
    }
    if (decoder && save_kv_cache) save_kv(io, layer, batch);
  }

 protected:
  void add_key_indices(const ForwardBatch& batch, MetadataBuilder& builder, Sections& s,
                       const GraphCapacity* graph) override {
    const int64_t bs = batch.batch_size();
    const bool decode = batch.mode == attention::paged::ForwardMode::Decode;
    std::vector<int32_t> indptr(size_t(bs), 0), lengths(size_t(bs), 0), indices;
    int64_t total = 0;
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t len = decode ? batch.seq_lens[size_t(r)] : batch.extend_prefix_lens[size_t(r)];
      indptr[size_t(r)] = int32_t(total);
      lengths[size_t(r)] = int32_t(len);
      total += len;
    }
    const int64_t capacity = graph ? graph->batch_size : -1;
    s.kv_start = builder.add(indptr, capacity);
    s.kv_len = builder.add(lengths, capacity);
    if (total == 0 && !graph) return;
    // (A CUDA-graph capture batch has padding rows only and no table.)
    const bool real_rows = std::any_of(batch.req_pool_indices.begin(), batch.req_pool_indices.end(),
                                       [](int64_t r) { return r >= 0; });
    check(batch.req_to_token != nullptr || total == 0 || !real_rows,
          "GPU triton paged attention: the batch reads the pool but has no request table");
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
};

}  // namespace

std::unique_ptr<PagedBackendCuda> make_triton_backend_cuda(DeviceKVPool* pool,
                                                           const PagedBackendCudaOptions& options) {
  return std::make_unique<TritonBackendCuda>(pool, options);
}

}  // namespace mmgen::cuda::paged
